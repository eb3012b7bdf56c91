/* cc_handshake.c — the rendezvous handshake (cc_handshake.h). */
#include "cc_handshake.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cc_codec.h"
#include "cc_file.h"
#include "dcp_plugin.h"

#define POLL_MIN_NS 50000LL    /* 50 us */
#define POLL_MAX_NS 20000000LL /* 20 ms */
#define MISSING_SHOWN 8        /* ranks named in a timeout message */

int64_t dcpi_cc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void dcpi_cc_sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Sleeps before the next poll, at most until the deadline: *backoff grows
 * from POLL_MIN_NS to POLL_MAX_NS, back to the start after progress.
 * Returns 0, or -1 when the deadline has passed (no sleep then). */
static int poll_pause(const dcpi_cc_hs *h, int64_t *backoff, int progress) {
  int64_t left = h->deadline_ns - dcpi_cc_now_ns();
  if (left <= 0) return -1;
  if (progress) *backoff = POLL_MIN_NS;
  dcpi_cc_sleep_ns(*backoff < left ? *backoff : left);
  if (*backoff < POLL_MAX_NS) *backoff *= 2;
  return 0;
}

/* "<dir>/<prefix><name>" (name "hello.<r>" for r >= 0, else "session")
 * into buf (PATH_MAX bytes); DCP_EINVAL when too long. */
static int hs_path(const dcpi_cc_hs *h, char *buf, int32_t r, dcp_plugin_err *err) {
  int n = r >= 0 ? snprintf(buf, PATH_MAX, "%s/%shello.%d", h->dir, h->prefix, (int)r)
                 : snprintf(buf, PATH_MAX, "%s/%ssession", h->dir, h->prefix);
  if (n < 0 || n >= PATH_MAX)
    return dcp_plugin_fail(err, DCP_EINVAL, "path too long in %s", h->dir);
  return DCP_OK;
}

int dcpi_cc_hs_init(dcpi_cc_hs *h, dcp_plugin_err *err) {
  char path[PATH_MAX];
  h->session = h->nonce = 0;
  h->nonces = NULL;
  h->buf = NULL;
  h->buf_len = dcpi_cc_session_record(h->world);
  if (!h->buf_len || h->rank < 0 || h->rank >= h->world)
    return dcp_plugin_fail(err, DCP_EINVAL, "rank %d / world %d out of range", (int)h->rank,
                           (int)h->world);
  int rc = hs_path(h, path, h->world - 1, err);
  if (!rc) rc = hs_path(h, path, -1, err);
  if (rc || h->rank != 0) return rc;
  h->session = dcpi_cc_random64();
  h->nonces = calloc((size_t)h->world, sizeof *h->nonces);
  h->buf = malloc(h->buf_len);
  if (h->nonces && h->buf) return DCP_OK;
  dcpi_cc_hs_free(h);
  return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
}

void dcpi_cc_hs_free(dcpi_cc_hs *h) {
  free(h->nonces);
  free(h->buf);
  h->nonces = NULL;
  h->buf = NULL;
}

/* Reads path into buf (cap bytes): DCPI_CC_PRESENT with *len set,
 * DCPI_CC_ABSENT (also a file longer than cap: not a record of ours, or
 * one that shrank while read), DCPI_CC_ODD, or DCP_EIO. */
static int read_record(const char *path, unsigned char *buf, size_t cap, size_t *len,
                       dcp_plugin_err *err) {
  int fd = -1;
  uint64_t size = 0;
  int rc = dcpi_cc_open_file(path, &fd, &size, err);
  if (rc != DCPI_CC_PRESENT) return rc;
  size_t got = 0;
  while (size <= cap && got < (size_t)size) {
    ssize_t r = pread(fd, buf + got, (size_t)size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return dcp_plugin_fail(err, DCP_EIO, "read %s: %s", path, strerror(e));
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (size > cap || got != (size_t)size) return DCPI_CC_ABSENT;
  *len = got;
  return DCPI_CC_PRESENT;
}

/* What looking for a file found besides its contents: a world size it
 * names (0: none), and whether it was a link or not a regular file. */
typedef struct sighting {
  uint32_t other_world;
  int odd;
} sighting;

/* Looks at rank r's hello once: 1 with *nonce set, 0 when there is none
 * of this world (what was seen goes to *s), or a negative status. */
static int look_hello(const dcpi_cc_hs *h, int32_t r, uint64_t *nonce, sighting *s,
                      dcp_plugin_err *err) {
  char path[PATH_MAX];
  unsigned char rec[DCPI_CC_HELLO_RECORD];
  size_t len = 0;
  int rc = hs_path(h, path, r, err);
  if (!rc) rc = read_record(path, rec, sizeof rec, &len, err);
  if (rc == DCPI_CC_ODD) s->odd = 1;
  if (rc != DCPI_CC_PRESENT) return rc < 0 ? rc : 0;
  rc = dcpi_cc_hello_decode(rec, len, h->world, path, nonce, &s->other_world, err);
  return rc < 0 ? rc : rc == DCPI_CC_OURS;
}

/* Appends "; <what> names a world of N ranks, this one has W: ..." and
 * "; <path> is a symbolic link ..." to msg (cap bytes) as s says. */
static void add_notes(const dcpi_cc_hs *h, char *msg, size_t cap, const sighting *s,
                      const char *what, const char *odd_path) {
  size_t n = strlen(msg);
  if (s->other_world && n < cap)
    n += (size_t)snprintf(msg + n, cap - n,
                          "; %s names a world of %u ranks, this one has %d: were the ranks "
                          "started with different world sizes?", what, (unsigned)s->other_world,
                          (int)h->world);
  if (odd_path && n < cap)
    snprintf(msg + n, cap - n, "; %s is a symbolic link or not a regular file (ignored)",
             odd_path);
}

/* The timeout of collect: the first missing ranks, and what was seen. */
static int collect_timeout(const dcpi_cc_hs *h, const sighting *s, int32_t odd_rank,
                           dcp_plugin_err *err) {
  char list[200] = "", odd[PATH_MAX] = "";
  size_t shown = 0, missing = 0, used = 0;
  for (int32_t r = 1; r < h->world; r++) {
    if (h->nonces[r]) continue;
    missing++;
    if (shown < MISSING_SHOWN && used < sizeof list) {
      int k = snprintf(list + used, sizeof list - used, "%s%d", shown ? ", " : "", (int)r);
      if (k > 0) used += (size_t)k;
      shown++;
    }
  }
  if (odd_rank > 0) hs_path(h, odd, odd_rank, NULL);
  dcp_plugin_fail(
      err, DCP_ETIMEDOUT,
      "timed out after %lld ms waiting for the hello of rank(s) %s%s (%zu missing) in %s",
      (long long)h->timeout_ms, list, missing > shown ? ", ..." : "", missing, h->dir);
  if (err) add_notes(h, err->msg, sizeof err->msg, s, "a hello file", odd_rank > 0 ? odd : NULL);
  return DCP_ETIMEDOUT;
}

int dcpi_cc_hs_collect(dcpi_cc_hs *h, dcp_plugin_err *err) {
  int64_t backoff = POLL_MIN_NS;
  sighting s = {0, 0};
  int32_t odd_rank = 0;
  for (;;) {
    size_t missing = 0, progress = 0;
    for (int32_t r = 1; r < h->world; r++) {
      if (h->nonces[r]) continue;
      sighting one = {0, 0};
      int rc = look_hello(h, r, &h->nonces[r], &one, err);
      if (rc < 0) return rc;
      if (one.other_world) s.other_world = one.other_world;
      if (one.odd && !odd_rank) odd_rank = r;
      if (rc) progress++;
      else missing++;
    }
    if (missing == 0) return DCP_OK;
    if (poll_pause(h, &backoff, progress != 0)) return collect_timeout(h, &s, odd_rank, err);
  }
}

int dcpi_cc_hs_publish(dcpi_cc_hs *h, dcp_plugin_err *err) {
  char path[PATH_MAX];
  int rc = hs_path(h, path, -1, err);
  if (rc) return rc;
  dcpi_cc_session_encode(h->buf, h->session, h->world, h->nonces);
  return dcpi_cc_write_file(path, h->buf, h->buf_len, NULL, 0, err);
}

int dcpi_cc_hs_rescan(dcpi_cc_hs *h, const unsigned char *acked, dcp_plugin_err *err) {
  int changed = 0;
  for (int32_t r = 1; r < h->world; r++) {
    if (acked[r]) continue;
    uint64_t n = 0;
    sighting s = {0, 0};
    int rc = look_hello(h, r, &n, &s, err);
    if (rc < 0) return rc;
    if (rc && n != h->nonces[r]) {
      h->nonces[r] = n;
      changed = 1;
    }
  }
  return changed ? dcpi_cc_hs_publish(h, err) : DCP_OK;
}

void dcpi_cc_hs_retire(const dcpi_cc_hs *h) {
  char path[PATH_MAX];
  if (!hs_path(h, path, -1, NULL)) unlink(path);
}

/* Rank r > 0: polls the session file until one echoes h->nonce. */
static int await_session(dcpi_cc_hs *h, const char *spath, dcp_plugin_err *err) {
  unsigned char *rec = malloc(h->buf_len);
  if (!rec) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  int64_t backoff = POLL_MIN_NS;
  sighting s = {0, 0};
  int rc;
  for (;;) {
    size_t len = 0;
    rc = read_record(spath, rec, h->buf_len, &len, err);
    if (rc == DCPI_CC_ODD) s.odd = 1;
    if (rc == DCPI_CC_PRESENT)
      rc = dcpi_cc_session_decode(rec, len, h->world, h->rank, h->nonce, spath, &h->session,
                                  &s.other_world, err);
    if (rc < 0 || rc == DCPI_CC_OURS) break; /* DCPI_CC_OURS == DCPI_CC_PRESENT */
    if (poll_pause(h, &backoff, 0)) {
      rc = dcp_plugin_fail(err, DCP_ETIMEDOUT,
                           "timed out after %lld ms waiting for rank 0's session file %s",
                           (long long)h->timeout_ms, spath);
      if (err) add_notes(h, err->msg, sizeof err->msg, &s, "the session file", s.odd ? spath : NULL);
      break;
    }
  }
  free(rec);
  return rc < 0 ? rc : DCP_OK;
}

int dcpi_cc_hs_join(dcpi_cc_hs *h, dcp_plugin_err *err) {
  char hpath[PATH_MAX], spath[PATH_MAX];
  unsigned char hello[DCPI_CC_HELLO_RECORD];
  int rc = hs_path(h, hpath, h->rank, err);
  if (!rc) rc = hs_path(h, spath, -1, err);
  if (rc) return rc;
  h->nonce = dcpi_cc_random64();
  dcpi_cc_hello_encode(hello, h->nonce, h->world);
  rc = dcpi_cc_write_file(hpath, hello, sizeof hello, NULL, 0, err);
  if (!rc) rc = await_session(h, spath, err);
  unlink(hpath);
  return rc;
}
