/*
 * dcp-coll-file — collectives through files in a directory shared by all
 * ranks (cfg->rendezvous). Built for writer processes that share a file
 * system but no network library; data volumes are small (plans, results,
 * agreement values), so there is no BULK capability.
 *
 * Protocol
 * --------
 * Every file is written to a fresh "<name>.tmp.<16 random hex>" (O_EXCL,
 * O_NOFOLLOW) and renamed to <name>, so it appears atomically and nothing
 * is ever written through a link planted in the directory; readers open
 * with O_NOFOLLOW and read regular files only, so a link (or a fifo) at a
 * name counts as "not there yet" and a timeout names it (common/cc_file.h).
 * Every file is a record of common/cc_codec.h: the payload, then a 32-byte
 * trailer (little endian):
 *
 *     u64 payload length | u64 XXH3_64bits(payload) | u32 op | u32 0 |
 *     "DCPFXCH1"
 *
 * A reader treats a file without a valid trailer (too short, wrong magic) as
 * not there yet; a file whose trailer is well formed but whose length or
 * checksum disagrees with the payload is DCP_ECORRUPT; a payload of the
 * wrong size or op is a mismatched call (DCP_EINVAL). These byte formats
 * and checks are fx_codec.c's and cc_codec.c's (pure functions, fuzzed by
 * tests/fuzz/fuzz_coll_file.c and fuzz_coll_handshake.c); this file does
 * the I/O around them.
 *
 * Names start with the job name (option "job=NAME", default "dcp"), so jobs
 * with different names share a directory without colliding.
 *
 * Open (honours timeout_ms as a whole): the rendezvous handshake the gloo
 * collective shares (common/cc_handshake.h, files "<job>.hello.<r>" and
 * "<job>.session"):
 *   1. rank r > 0 draws a random nonce n_r and writes "<job>.hello.<r>"
 *      = {n_r, world};
 *   2. rank 0 draws the session id S, waits for every hello and writes
 *      "<job>.session" = {S, world, n_1 .. n_{W-1}};
 *   3. rank r accepts a session file only when it echoes its own n_r, so a
 *      session file left by a crashed job of the same name is never taken
 *      for this one; it then removes its hello;
 *   4. round 0 (a barrier on session files, below) is the acknowledgement
 *      and completes the open. While it waits, rank 0 re-reads the hellos
 *      of ranks not yet in round 0 and rewrites the session file when one
 *      changed (it had read a stale hello before the fresh one replaced
 *      it). After round 0 rank 0 removes the session file.
 *
 * Rounds: every collective call is global round k = 1, 2, ... and every
 * rank writes "<job>.<S>.<k>.<rank>" in every round (non-roots write an
 * empty ack where they have nothing to send; scatterv's root also writes one
 * piece file "<job>.<S>.<k>.<root>.<dest>" per destination). A rank
 * completes round k only after it has seen every rank's round-k file, which
 * proves that every rank has finished everything before round k; so on
 * completing round k a rank removes every file it wrote before entering
 * round k. Every round is therefore also a barrier.
 *
 * group_bcast does not take a global round (non-members do not call it): its
 * file is "<job>.<S>.g<hash of the ranks>.<seq>.<root>", seq counting the
 * calls on that group; only the root writes. Members read it before they
 * enter the next global round, so the same removal rule covers it.
 *
 * Close: a final global round, after which each rank removes its earlier
 * files; then rank r > 0 writes "<job>.<S>.done.<r>" and leaves, and rank 0,
 * once every done file is there (every rank has read every closing file),
 * removes all closing-round and done files. All ranks closing normally leave
 * the directory as they found it. After any failed collective the
 * communicator is broken: later calls return DCP_EPEER and close only
 * removes this rank's own files from before the failed round (those of the
 * failed round stay, so that a peer still reading them fails fast on its own
 * instead of waiting for the timeout).
 *
 * Nothing is fsynced: the files are ephemeral and only visibility between
 * processes matters (close-to-open consistency on NFS-like file systems).
 *
 * Host id (the table's host_id, for read dedup): common/cc_host.h, computed
 * at open, the id the gloo and mpi collectives report too.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "cc_file.h"
#include "cc_handshake.h"
#include "cc_host.h"
#include "cc_opts.h"
#include "dcp_plugin.h"
#include "fx_codec.h"

#define TRAILER_SIZE DCPI_FX_TRAILER_SIZE
#define JOB_MAX 64
#define POLL_MIN_NS 50000LL     /* 50 us */
#define POLL_MAX_NS 20000000LL  /* 20 ms */
#define MISSING_SHOWN 8         /* ranks named in a timeout message */


/* Outcome of looking at one file: FILE_ODD is a link or not a regular file
 * at the name (treated as absent, and named by a timeout). */
enum { FILE_ABSENT = DCPI_FX_ABSENT, FILE_PRESENT = DCPI_FX_PRESENT, FILE_ODD = 2 };

/* A growable list of file paths this rank wrote. */
typedef struct path_list {
  char **v;
  size_t n, cap;
} path_list;

/* The call counter of one group (group_bcast). */
typedef struct group_seq {
  uint64_t key;
  uint64_t seq;
} group_seq;

struct dcp_comm {
  int32_t rank, size;
  int64_t timeout_ms;
  char *dir;
  char job[JOB_MAX + 1];
  char prefix[JOB_MAX + 2]; /* "<job>.": the handshake's file names */
  uint64_t session;
  uint64_t round;     /* the last global round entered */
  int broken;
  path_list written;  /* files written since entering the current round */
  path_list earlier;  /* files removable once the current round completes */
  group_seq *groups;
  size_t ngroups, gcap;
  struct rank0_open *opening; /* rank 0's handshake during round 0 of open */
  uint64_t host;              /* host_id (cc_host.h) */
};

/* One file a round waits for. */
typedef struct want {
  char *path;
  int32_t from;  /* the rank that writes it (for messages) */
  uint32_t op;
  void *dst;     /* NULL: check the trailer only; else read len bytes here */
  size_t len;
  int lenient;   /* a wrong op/size means "stale, not yet there" */
  int done;
  int odd;       /* last seen as a link or not a regular file */
} want;

/* Called while a wait is idle (rank 0 re-reads hellos during open). */
typedef int (*idle_fn)(dcp_comm *c, want *w, size_t n, dcp_plugin_err *err);

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

/* Deadline timeout_ms from now. */
static int64_t deadline_of(const dcp_comm *c) {
  return dcpi_cc_now_ns() + c->timeout_ms * 1000000LL;
}

/* Appends a copy of path to list l. */
static int list_add(path_list *l, const char *path) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **v = realloc(l->v, cap * sizeof *v);
    if (!v) return DCP_ENOMEM;
    l->v = v;
    l->cap = cap;
  }
  char *copy = strdup(path);
  if (!copy) return DCP_ENOMEM;
  l->v[l->n++] = copy;
  return DCP_OK;
}

/* Removes every file of l from disk (best effort) and empties it. */
static void list_unlink(path_list *l) {
  for (size_t i = 0; i < l->n; i++) {
    unlink(l->v[i]);
    free(l->v[i]);
  }
  l->n = 0;
}

/* Empties l, leaving its files on disk. */
static void list_forget(path_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i]);
  l->n = 0;
}

/* Moves every entry of src to the end of dst. */
static int list_move(path_list *dst, path_list *src) {
  for (size_t i = 0; i < src->n; i++) {
    int rc = list_add(dst, src->v[i]);
    if (rc) return rc;
    free(src->v[i]);
  }
  src->n = 0;
  return DCP_OK;
}

/* Formats dir/<name> into buf (PATH_MAX bytes); DCP_EINVAL if too long. */
static int make_path(const dcp_comm *c, char *buf, dcp_plugin_err *err, const char *fmt, ...) {
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof name)
    return dcp_plugin_fail(err, DCP_EINVAL, "name too long");
  n = snprintf(buf, PATH_MAX, "%s/%s", c->dir, name);
  if (n < 0 || n >= PATH_MAX)
    return dcp_plugin_fail(err, DCP_EINVAL, "path too long in %s", c->dir);
  return DCP_OK;
}

/* Path of rank `from`'s file of global round k. */
static int round_path(const dcp_comm *c, char *buf, uint64_t k, int32_t from, dcp_plugin_err *err) {
  return make_path(c, buf, err, "%s.%016llx.%llu.%d", c->job, (unsigned long long)c->session,
                   (unsigned long long)k, (int)from);
}

/* ------------------------------------------------------------------------ */
/* Files                                                                    */
/* ------------------------------------------------------------------------ */

/* Reads exactly len bytes at off; -1 on error or a short file. */
static int pread_all(int fd, void *p, size_t len, off_t off) {
  unsigned char *b = p;
  while (len > 0) {
    ssize_t r = pread(fd, b, len, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    b += r;
    len -= (size_t)r;
    off += r;
  }
  return 0;
}


/* Writes payload + trailer to path through a fresh temporary (see the
 * protocol), so readers see either nothing or the whole file. */
static int put_file(const char *path, uint32_t op, const void *payload, size_t len,
                    dcp_plugin_err *err) {
  unsigned char tr[TRAILER_SIZE];
  dcpi_fx_trailer_make(tr, op, payload, len);
  return dcpi_cc_write_file(path, payload, len, tr, sizeof tr, err);
}

/* put_file, remembering the file for removal after the next round. */
static int put_tracked(dcp_comm *c, const char *path, uint32_t op, const void *payload,
                       size_t len, dcp_plugin_err *err) {
  int rc = put_file(path, op, payload, len, err);
  if (rc) return rc;
  rc = list_add(&c->written, path);
  if (rc) {
    unlink(path);
    return dcp_plugin_fail(err, rc, "out of memory");
  }
  return DCP_OK;
}

/* Reads and checks the trailer of the open file fd (size bytes); returns
 * FILE_ABSENT when there is no valid trailer yet, else FILE_PRESENT with *t
 * set, or DCP_ECORRUPT. */
static int read_trailer(int fd, off_t size, const char *path, dcpi_fx_trailer *t,
                        dcp_plugin_err *err) {
  unsigned char tr[TRAILER_SIZE];
  if (size < TRAILER_SIZE) return FILE_ABSENT;
  if (pread_all(fd, tr, sizeof tr, size - TRAILER_SIZE)) return FILE_ABSENT;
  return dcpi_fx_trailer_parse(tr, (uint64_t)size, path, t, err);
}

/* Checks the payload of a present file against what w expects and reads it
 * into w->dst; a lenient want turns a mismatch into FILE_ABSENT. */
static int check_payload(int fd, const want *w, const dcpi_fx_trailer *t, dcp_plugin_err *err) {
  dcpi_fx_expect e = {.path = w->path, .from = w->from, .op = w->op, .has_data = w->dst != NULL,
                      .len = w->len, .lenient = w->lenient};
  int rc = dcpi_fx_accept(t, &e, err);
  if (rc != FILE_PRESENT || !w->dst) return rc;
  if (w->len && pread_all(fd, w->dst, w->len, 0))
    return dcp_plugin_fail(err, DCP_EIO, "read %s: %s", w->path, strerror(errno));
  rc = dcpi_fx_verify(t, w->dst, &e, err);
  return rc ? rc : FILE_PRESENT;
}

/* Looks at the file of w once: FILE_ABSENT, FILE_ODD, FILE_PRESENT
 * (payload read when wanted) or a negative status. */
static int try_want(const want *w, dcp_plugin_err *err) {
  int fd = -1;
  uint64_t size = 0;
  int rc = dcpi_cc_open_file(w->path, &fd, &size, err);
  if (rc == DCPI_CC_ABSENT) return FILE_ABSENT;
  if (rc == DCPI_CC_ODD) return FILE_ODD;
  if (rc < 0) return rc;
  dcpi_fx_trailer t = {0};
  rc = read_trailer(fd, (off_t)size, w->path, &t, err);
  if (rc == FILE_PRESENT) rc = check_payload(fd, w, &t, err);
  close(fd);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Waiting                                                                  */
/* ------------------------------------------------------------------------ */

/* 1 when want i is an extra file (past the per-rank ones) of a rank whose
 * round file w[from] is missing too: that rank is counted once. */
static int counted(const dcp_comm *c, const want *w, size_t n, size_t i) {
  int32_t r = w[i].from;
  return i >= (size_t)c->size && r >= 0 && (size_t)r < n && w[r].from == r && !w[r].done;
}

/* The timeout message: what was waited for and the first missing ranks,
 * each named once. */
static int timeout_error(const dcp_comm *c, const want *w, size_t n, const char *what,
                         dcp_plugin_err *err) {
  char list[200] = "";
  size_t shown = 0, missing = 0, used = 0;
  const char *odd = NULL;
  for (size_t i = 0; i < n; i++) {
    if (w[i].done) continue;
    if (w[i].odd && !odd) odd = w[i].path;
    if (counted(c, w, n, i)) continue;
    missing++;
    if (shown < MISSING_SHOWN && used < sizeof list) {
      int k = snprintf(list + used, sizeof list - used, "%s%d", shown ? ", " : "", (int)w[i].from);
      if (k > 0) used += (size_t)k;
      shown++;
    }
  }
  return dcp_plugin_fail(
      err, DCP_ETIMEDOUT,
      "%s timed out after %lld ms waiting for rank(s) %s%s (%zu missing)%s%s%s", what,
      (long long)c->timeout_ms, list, missing > shown ? ", ..." : "", missing, odd ? "; " : "",
      odd ? odd : "", odd ? " is a symbolic link or not a regular file (ignored)" : "");
}

/* Polls the files of w[0..n) with exponential backoff until all are there,
 * one is bad, or the deadline passes (DCP_ETIMEDOUT naming the missing). */
static int wait_all(dcp_comm *c, want *w, size_t n, int64_t deadline, const char *what,
                    idle_fn idle, dcp_plugin_err *err) {
  int64_t backoff = POLL_MIN_NS;
  for (;;) {
    size_t pending = 0, progress = 0;
    for (size_t i = 0; i < n; i++) {
      if (w[i].done) continue;
      int rc = try_want(&w[i], err);
      if (rc < 0) return rc;
      w[i].odd = rc == FILE_ODD;
      if (rc == FILE_PRESENT) {
        w[i].done = 1;
        progress++;
      } else {
        pending++;
      }
    }
    if (pending == 0) return DCP_OK;
    int64_t left = deadline - dcpi_cc_now_ns();
    if (left <= 0) return timeout_error(c, w, n, what, err);
    if (idle) {
      int rc = idle(c, w, n, err);
      if (rc) return rc;
    }
    backoff = progress ? POLL_MIN_NS : backoff;
    dcpi_cc_sleep_ns(backoff < left ? backoff : left);
    if (backoff < POLL_MAX_NS) backoff *= 2;
  }
}

/* Frees the paths of w[0..n) and w itself. */
static void wants_free(want *w, size_t n) {
  if (!w) return;
  for (size_t i = 0; i < n; i++) free(w[i].path);
  free(w);
}

/* Wants for every other rank's round-k file (trailer only, op), plus
 * `extra` zeroed slots at the end; NULL on failure (err set). */
static want *round_wants(dcp_comm *c, uint64_t k, uint32_t op, size_t extra,
                         dcp_plugin_err *err) {
  size_t n = (size_t)c->size + extra;
  want *w = calloc(n, sizeof *w);
  char path[PATH_MAX];
  if (!w) {
    dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
    return NULL;
  }
  for (int32_t r = 0; r < c->size; r++) {
    w[r].from = r;
    w[r].op = op;
    w[r].done = (r == c->rank);
    if (round_path(c, path, k, r, err) || !(w[r].path = strdup(path))) {
      if (!w[r].path) dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
      wants_free(w, n);
      return NULL;
    }
  }
  return w;
}

/* ------------------------------------------------------------------------ */
/* Rounds                                                                   */
/* ------------------------------------------------------------------------ */

/* Enters the next global round: what this rank wrote so far becomes
 * removable once this round completes. Returns the round number (0 on
 * failure: the communicator is then broken). */
static uint64_t round_enter(dcp_comm *c, dcp_plugin_err *err) {
  if (list_move(&c->earlier, &c->written)) {
    c->broken = 1;
    dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
    return 0;
  }
  return ++c->round;
}

/* Ends a round: on success removes the files that no rank reads any more;
 * on failure marks the communicator broken. Frees w. Returns rc. */
static int round_leave(dcp_comm *c, int rc, want *w, size_t n) {
  wants_free(w, n);
  if (rc == DCP_OK)
    list_unlink(&c->earlier);
  else
    c->broken = 1;
  return rc;
}

/* Refuses calls on a broken communicator. */
static int check_usable(const dcp_comm *c, dcp_plugin_err *err) {
  if (!c) return dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
  if (c->broken)
    return dcp_plugin_fail(err, DCP_EPEER,
                           "communicator unusable after an earlier failure");
  return DCP_OK;
}

/* One whole round where this rank writes `mine` (len bytes) as its round
 * file and waits for w (built by round_wants for round k). */
static int run_round(dcp_comm *c, uint64_t k, uint32_t op, const void *mine, size_t len, want *w,
                     size_t n, dcp_plugin_err *err) {
  char path[PATH_MAX];
  char label[64];
  int rc = round_path(c, path, k, c->rank, err);
  if (!rc) rc = put_tracked(c, path, op, mine, len, err);
  snprintf(label, sizeof label, "round %llu", (unsigned long long)k);
  if (!rc) rc = wait_all(c, w, n, deadline_of(c), label, NULL, err);
  return round_leave(c, rc, w, n);
}

/* Starts a round: checks the communicator, enters the round and builds its
 * wants; NULL on failure (*rc and err set). */
static want *round_start(dcp_comm *c, uint32_t op, size_t extra, uint64_t *k, int *rc,
                         dcp_plugin_err *err) {
  *rc = check_usable(c, err);
  if (*rc) return NULL;
  *k = round_enter(c, err);
  *rc = DCP_ENOMEM;
  if (*k == 0) return NULL;
  want *w = round_wants(c, *k, op, extra, err);
  if (!w) c->broken = 1; /* round entered but not written: the peers will miss us */
  else *rc = DCP_OK;
  return w;
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */

/* Barrier: an empty file from every rank. */
static int f_barrier(dcp_comm *c, dcp_plugin_err *err) {
  uint64_t k;
  int rc;
  want *w = round_start(c, OP_BARRIER, 0, &k, &rc, err);
  if (!w) return rc;
  return run_round(c, k, OP_BARRIER, NULL, 0, w, (size_t)c->size, err);
}

/* Checks a root argument. */
static int check_root(const dcp_comm *c, int32_t root, dcp_plugin_err *err) {
  if (!c) return dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
  if (root < 0 || root >= c->size)
    return dcp_plugin_fail(err, DCP_EINVAL, "root %d outside [0, %d)", (int)root,
                           (int)c->size);
  return DCP_OK;
}

/* Bcast: the root's file carries the payload, the others' are empty acks. */
static int f_bcast(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err) {
  if (check_root(c, root, err)) return DCP_EINVAL;
  if (!buf && len) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  uint64_t k;
  int rc;
  want *w = round_start(c, OP_BCAST, 0, &k, &rc, err);
  if (!w) return rc;
  if (c->rank != root) {
    w[root].dst = buf;
    w[root].len = len;
  }
  return run_round(c, k, OP_BCAST, c->rank == root ? buf : NULL, c->rank == root ? len : 0, w,
                   (size_t)c->size, err);
}

/* Allgather: every file carries len bytes, read into recv at rank*len. */
static int f_allgather(dcp_comm *c, const void *send, size_t len, void *recv,
                       dcp_plugin_err *err) {
  if (!c) return dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
  if (len && (!send || !recv)) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (len && (size_t)c->size > SIZE_MAX / len)
    return dcp_plugin_fail(err, DCP_EOVERFLOW, "size overflow");
  uint64_t k;
  int rc;
  want *w = round_start(c, OP_ALLGATHER, 0, &k, &rc, err);
  if (!w) return rc;
  unsigned char *out = recv;
  for (int32_t r = 0; r < c->size && len; r++) {
    w[r].dst = out + (size_t)r * len;
    w[r].len = len;
  }
  if (len) memmove(out + (size_t)c->rank * len, send, len);
  return run_round(c, k, OP_ALLGATHER, send, len, w, (size_t)c->size, err);
}

/* Byte offsets of each rank's part in a back-to-back buffer (size+1
 * entries, last = total); NULL on overflow or no memory. */
static size_t *offsets_of(const size_t *lens, int32_t n, int *rc, dcp_plugin_err *err) {
  size_t *off = malloc(((size_t)n + 1) * sizeof *off);
  if (!off) {
    *rc = dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
    return NULL;
  }
  off[0] = 0;
  for (int32_t i = 0; i < n; i++) {
    if (lens[i] > SIZE_MAX - off[i]) {
      free(off);
      *rc = dcp_plugin_fail(err, DCP_EOVERFLOW, "total length overflows");
      return NULL;
    }
    off[i + 1] = off[i] + lens[i];
  }
  return off;
}

/* Gatherv: every rank's file carries its part; the root reads them all. */
static int f_gatherv(dcp_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                     int32_t root, dcp_plugin_err *err) {
  if (check_root(c, root, err)) return DCP_EINVAL;
  int at_root = c->rank == root;
  if ((len && !send) || (at_root && (!lens || (!recv && len))))
    return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (at_root && lens[root] != len)
    return dcp_plugin_fail(err, DCP_EINVAL, "lens[root] %zu != len %zu", lens[root],
                           len);
  int rc = DCP_OK;
  size_t *off = at_root ? offsets_of(lens, c->size, &rc, err) : NULL;
  if (rc) return rc;
  uint64_t k;
  want *w = round_start(c, OP_GATHERV, 0, &k, &rc, err);
  if (!w) {
    free(off);
    return rc;
  }
  unsigned char *out = recv;
  for (int32_t r = 0; at_root && r < c->size; r++) {
    w[r].dst = lens[r] ? out + off[r] : (void *)w; /* any non-NULL: check a 0-byte payload */
    w[r].len = lens[r];
  }
  if (at_root && len) memmove(out + off[root], send, len);
  free(off);
  return run_round(c, k, OP_GATHERV, send, len, w, (size_t)c->size, err);
}

/* The root's side of scatterv: one piece file per other rank. */
static int scatter_pieces(dcp_comm *c, uint64_t k, const unsigned char *send, const size_t *off,
                          void *recv, dcp_plugin_err *err) {
  char path[PATH_MAX];
  for (int32_t r = 0; r < c->size; r++) {
    size_t n = off[r + 1] - off[r];
    if (r == c->rank) {
      if (n) memmove(recv, send + off[r], n);
      continue;
    }
    int rc = make_path(c, path, err, "%s.%016llx.%llu.%d.%d", c->job,
                       (unsigned long long)c->session, (unsigned long long)k, (int)c->rank, (int)r);
    if (!rc) rc = put_tracked(c, path, OP_SCATTERV, n ? send + off[r] : NULL, n, err);
    if (rc) return rc;
  }
  return DCP_OK;
}

/* Scatterv: the root writes a piece file per rank, then all write acks. */
static int f_scatterv(dcp_comm *c, const void *send, const size_t *lens, void *recv, size_t len,
                      int32_t root, dcp_plugin_err *err) {
  if (check_root(c, root, err)) return DCP_EINVAL;
  int at_root = c->rank == root;
  if ((len && !recv) || (at_root && !lens))
    return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (at_root && lens[root] != len)
    return dcp_plugin_fail(err, DCP_EINVAL, "lens[root] %zu != len %zu", lens[root],
                           len);
  int rc = DCP_OK;
  size_t *off = at_root ? offsets_of(lens, c->size, &rc, err) : NULL;
  if (rc) return rc;
  if (at_root && off[c->size] && !send) {
    free(off);
    return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  }
  uint64_t k;
  want *w = round_start(c, OP_SCATTERV, 1, &k, &rc, err);
  size_t n = (size_t)c->size + 1;
  if (!rc && at_root) {
    w[c->size].done = 1;
    rc = scatter_pieces(c, k, send, off, recv, err);
  } else if (!rc) {
    char path[PATH_MAX];
    want *p = &w[c->size];
    rc = make_path(c, path, err, "%s.%016llx.%llu.%d.%d", c->job, (unsigned long long)c->session,
                   (unsigned long long)k, (int)root, (int)c->rank);
    *p = (want){.path = rc ? NULL : strdup(path), .from = root, .op = OP_SCATTERV,
                .dst = len ? recv : (void *)w, .len = len};
    if (!rc && !p->path) rc = dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  }
  free(off);
  if (!w) return rc;
  if (rc) return round_leave(c, rc, w, n);
  return run_round(c, k, OP_SCATTERV, NULL, 0, w, n, err);
}

/* Allreduce: every rank writes its values and reduces all files itself, in
 * rank order, so every rank gets the same result. */
static int f_allreduce(dcp_comm *c, int64_t *vals, size_t n, uint32_t op, dcp_plugin_err *err) {
  if (!c) return dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
  if (op < DCP_REDUCE_MIN || op > DCP_REDUCE_SUM)
    return dcp_plugin_fail(err, DCP_EINVAL, "unknown reduce op %u", op);
  if (n && !vals) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (n > SIZE_MAX / 8 / (size_t)c->size)
    return dcp_plugin_fail(err, DCP_EOVERFLOW, "too many values");
  size_t bytes = n * 8;
  unsigned char *all = malloc(bytes * (size_t)c->size + 1);
  if (!all) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  unsigned char *mine = all + bytes * (size_t)c->rank;
  for (size_t i = 0; i < n; i++) {
    uint64_t u;
    memcpy(&u, &vals[i], sizeof u);
    dcpi_fx_put64(mine + 8 * i, u);
  }
  uint64_t k;
  int rc;
  want *w = round_start(c, OP_ALLREDUCE, 0, &k, &rc, err);
  if (!w) {
    free(all);
    return rc;
  }
  for (int32_t r = 0; r < c->size; r++) {
    w[r].dst = all + bytes * (size_t)r;
    w[r].len = bytes;
  }
  rc = run_round(c, k, OP_ALLREDUCE, mine, bytes, w, (size_t)c->size, err);
  if (rc == DCP_OK && n) {
    for (size_t i = 0; i < n; i++) {
      uint64_t u = dcpi_fx_get64(all + 8 * i);
      memcpy(&vals[i], &u, sizeof u);
    }
    for (int32_t r = 1; r < c->size; r++) dcpi_fx_reduce_into(vals, all + bytes * (size_t)r, n, op);
  }
  free(all);
  return rc;
}

/* Validates a group: ascending ranks in range, containing self and root. */
static int check_group(const dcp_comm *c, const int32_t *ranks, size_t n, int32_t root,
                       dcp_plugin_err *err) {
  int self = 0, has_root = 0;
  if (!ranks || n == 0) return dcp_plugin_fail(err, DCP_EINVAL, "empty group");
  for (size_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->size || (i && ranks[i] <= ranks[i - 1]))
      return dcp_plugin_fail(err, DCP_EINVAL, "group ranks must ascend within [0, %d)",
                             (int)c->size);
    self |= ranks[i] == c->rank;
    has_root |= ranks[i] == root;
  }
  if (!self || !has_root)
    return dcp_plugin_fail(err, DCP_EINVAL, "group lacks this rank or root");
  return DCP_OK;
}

/* The next call number of the group with the given key. */
static int group_next(dcp_comm *c, uint64_t key, uint64_t *seq) {
  for (size_t i = 0; i < c->ngroups; i++) {
    if (c->groups[i].key == key) {
      *seq = ++c->groups[i].seq;
      return DCP_OK;
    }
  }
  if (c->ngroups == c->gcap) {
    size_t cap = c->gcap ? c->gcap * 2 : 8;
    group_seq *g = realloc(c->groups, cap * sizeof *g);
    if (!g) return DCP_ENOMEM;
    c->groups = g;
    c->gcap = cap;
  }
  c->groups[c->ngroups++] = (group_seq){key, 1};
  *seq = 1;
  return DCP_OK;
}

/* Key of a group: xxh3 of its ranks in little-endian order. */
static uint64_t group_key(const int32_t *ranks, size_t n) {
  XXH3_state_t *s = XXH3_createState();
  uint64_t h;
  if (!s) return (uint64_t)n * 0x9e3779b97f4a7c15ull ^ (uint64_t)ranks[0];
  XXH3_64bits_reset(s);
  for (size_t i = 0; i < n; i++) {
    unsigned char b[4];
    dcpi_fx_put32(b, (uint32_t)ranks[i]);
    XXH3_64bits_update(s, b, sizeof b);
  }
  h = XXH3_64bits_digest(s);
  XXH3_freeState(s);
  return h;
}

/* group_bcast: the root writes one file per call; members read it. */
static int f_group_bcast(dcp_comm *c, const int32_t *ranks, size_t n, void *buf, size_t len,
                         int32_t root, dcp_plugin_err *err) {
  if (check_usable(c, err)) return c ? DCP_EPEER : DCP_EINVAL;
  if (check_group(c, ranks, n, root, err)) return DCP_EINVAL;
  if (!buf && len) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  uint64_t key = group_key(ranks, n), seq = 0;
  if (group_next(c, key, &seq)) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  char path[PATH_MAX];
  int rc = make_path(c, path, err, "%s.%016llx.g%016llx.%llu.%d", c->job,
                     (unsigned long long)c->session, (unsigned long long)key,
                     (unsigned long long)seq, (int)root);
  if (rc) return rc;
  if (c->rank == root) return put_tracked(c, path, OP_GROUP, buf, len, err);
  want w = {.path = path, .from = root, .op = OP_GROUP, .dst = len ? buf : (void *)path, .len = len};
  char label[96];
  snprintf(label, sizeof label, "group %016llx call %llu", (unsigned long long)key,
           (unsigned long long)seq);
  rc = wait_all(c, &w, 1, deadline_of(c), label, NULL, err);
  if (rc) c->broken = 1;
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Open                                                                     */
/* ------------------------------------------------------------------------ */

/* mkdir -p: creates every missing directory of path. */
static int make_dirs(const char *path, dcp_plugin_err *err) {
  char buf[PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof buf)
    return dcp_plugin_fail(err, DCP_EINVAL, "bad rendezvous path");
  memcpy(buf, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char keep = buf[i];
    buf[i] = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return dcp_plugin_fail(err, DCP_EIO, "mkdir %s: %s", buf, strerror(errno));
    buf[i] = keep;
  }
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
    return dcp_plugin_fail(err, DCP_EIO, "%s is not a directory", path);
  return DCP_OK;
}

/* Parses "job=NAME" (1..64 of [A-Za-z0-9_-], default "dcp"); anything
 * else is DCP_EINVAL. */
static int parse_options(dcp_comm *c, const char *opts, dcp_plugin_err *err) {
  strcpy(c->job, "dcp");
  const dcpi_cc_opt known[] = {{.key = "job", .kind = DCPI_CC_OPT_NAME, .max = JOB_MAX,
                                .out = c->job}};
  int rc = dcpi_cc_parse_options(opts, known, sizeof known / sizeof *known, NULL, err);
  snprintf(c->prefix, sizeof c->prefix, "%s.", c->job);
  return rc;
}

/* Validates cfg and fills rank, size, timeout, dir and options. */
static int configure(dcp_comm *c, const dcp_coll_config *cfg, dcp_plugin_err *err) {
  if (!DCP_HAS_FIELD(cfg, dcp_coll_config, timeout_ms))
    return dcp_plugin_fail(err, DCP_EINVAL, "config too small");
  if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
    return dcp_plugin_fail(err, DCP_EINVAL, "rank %d / world %d invalid", (int)cfg->rank,
                           (int)cfg->world_size);
  if (cfg->timeout_ms <= 0 || cfg->timeout_ms > INT64_MAX / 1000000)
    return dcp_plugin_fail(err, DCP_EINVAL, "timeout_ms must be > 0");
  if (!cfg->rendezvous || !cfg->rendezvous[0])
    return dcp_plugin_fail(err, DCP_EINVAL, "no rendezvous directory");
  c->rank = cfg->rank;
  c->size = cfg->world_size;
  c->timeout_ms = cfg->timeout_ms;
  c->host = dcpi_cc_host_id();
  c->dir = strdup(cfg->rendezvous);
  if (!c->dir) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  const char *opts = DCP_HAS_FIELD(cfg, dcp_coll_config, options) ? cfg->options : NULL;
  return parse_options(c, opts, err);
}

/* The handshake of this rank (common/cc_handshake.h) until deadline. */
static int hs_start(dcp_comm *c, dcpi_cc_hs *h, int64_t deadline, dcp_plugin_err *err) {
  *h = (dcpi_cc_hs){.dir = c->dir, .prefix = c->prefix, .rank = c->rank, .world = c->size,
                    .deadline_ns = deadline, .timeout_ms = c->timeout_ms};
  return dcpi_cc_hs_init(h, err);
}

/* Rank 0's handshake while round 0 runs: the ranks not yet in round 0
 * have not acked its session. */
typedef struct rank0_open {
  dcpi_cc_hs *hs;
  unsigned char *acked; /* world entries */
} rank0_open;

/* Idle hook of rank 0's round 0: a rank not yet in round 0 may have
 * replaced a stale hello that rank 0 read; the handshake re-reads those
 * and rewrites the session file when a nonce changed. */
static int rank0_rescan(dcp_comm *c, want *w, size_t n, dcp_plugin_err *err) {
  rank0_open *o = c->opening;
  for (size_t r = 0; o && r < n; r++) o->acked[r] = (unsigned char)w[r].done;
  return o ? dcpi_cc_hs_rescan(o->hs, o->acked, err) : DCP_OK;
}

/* Round 0 of open: this rank's empty file, then everyone's (rank 0
 * rescans hellos meanwhile, through c->opening). */
static int round0(dcp_comm *c, int64_t deadline, dcp_plugin_err *err) {
  char path[PATH_MAX];
  want *w = round_wants(c, 0, OP_OPEN, 0, err);
  if (!w) return DCP_ENOMEM;
  int rc = round_path(c, path, 0, c->rank, err);
  if (!rc) rc = put_tracked(c, path, OP_OPEN, NULL, 0, err);
  if (!rc)
    rc = wait_all(c, w, (size_t)c->size, deadline, "round 0",
                  c->opening ? rank0_rescan : NULL, err);
  wants_free(w, (size_t)c->size);
  return rc;
}

/* Rank 0 of open: collect the hellos, publish the session, run round 0,
 * retire the session file. */
static int open_rank0(dcp_comm *c, int64_t deadline, dcp_plugin_err *err) {
  dcpi_cc_hs h;
  int rc = hs_start(c, &h, deadline, err);
  if (rc) return rc;
  c->session = h.session;
  rank0_open o = {&h, calloc((size_t)c->size, 1)};
  rc = o.acked ? DCP_OK : dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  if (!rc) rc = dcpi_cc_hs_collect(&h, err);
  if (!rc) rc = dcpi_cc_hs_publish(&h, err);
  if (!rc) {
    c->opening = &o;
    rc = round0(c, deadline, err);
    c->opening = NULL;
  }
  dcpi_cc_hs_retire(&h);
  free(o.acked);
  dcpi_cc_hs_free(&h);
  return rc;
}

/* A rank > 0 of open: say hello, wait for a session that echoes our nonce,
 * run round 0. */
static int open_other(dcp_comm *c, int64_t deadline, dcp_plugin_err *err) {
  dcpi_cc_hs h;
  int rc = hs_start(c, &h, deadline, err);
  if (!rc) rc = dcpi_cc_hs_join(&h, err);
  c->session = h.session;
  dcpi_cc_hs_free(&h);
  return rc ? rc : round0(c, deadline, err);
}

static void f_close(dcp_comm *c);

/* Opens the communicator: validates cfg, creates the directory, runs the
 * session handshake (see the protocol at the top). */
static int f_open(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err) {
  if (!cfg || !out) return dcp_plugin_fail(err, DCP_EINVAL, "NULL argument");
  *out = NULL;
  dcp_comm *c = calloc(1, sizeof *c);
  if (!c) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  int rc = configure(c, cfg, err);
  if (!rc) rc = make_dirs(c->dir, err);
  if (!rc) {
    int64_t deadline = deadline_of(c);
    rc = c->rank == 0 ? open_rank0(c, deadline, err) : open_other(c, deadline, err);
  }
  if (rc) {
    c->broken = 1;
    f_close(c);
    return rc;
  }
  *out = c;
  return DCP_OK;
}

/* ------------------------------------------------------------------------ */
/* Close                                                                    */
/* ------------------------------------------------------------------------ */

/* Rank 0's last step: once every rank's done file is there, nobody reads
 * the closing round any more; remove all of its files and the done files. */
static void close_cleanup(dcp_comm *c, uint64_t k) {
  want *w = calloc((size_t)c->size, sizeof *w);
  char path[PATH_MAX];
  if (!w) return;
  int ok = 1;
  for (int32_t r = 0; r < c->size && ok; r++) {
    w[r] = (want){.from = r, .op = OP_DONE, .done = r == 0};
    ok = !make_path(c, path, NULL, "%s.%016llx.done.%d", c->job, (unsigned long long)c->session,
                    (int)r) && (w[r].path = strdup(path)) != NULL;
  }
  if (ok && wait_all(c, w, (size_t)c->size, deadline_of(c), "close", NULL, NULL) == DCP_OK) {
    for (int32_t r = 1; r < c->size; r++) {
      unlink(w[r].path);
      if (!round_path(c, path, k, r, NULL)) unlink(path);
    }
  }
  wants_free(w, (size_t)c->size);
}

/* The closing round of a healthy communicator (see the protocol). */
static void close_round(dcp_comm *c) {
  uint64_t k;
  int rc;
  want *w = round_start(c, OP_CLOSE, 0, &k, &rc, NULL);
  if (!w) return;
  if (run_round(c, k, OP_CLOSE, NULL, 0, w, (size_t)c->size, NULL) != DCP_OK) return;
  if (c->rank != 0) {
    char path[PATH_MAX];
    /* the closing file stays for rank 0 to remove: others may still read it */
    list_forget(&c->written);
    if (!make_path(c, path, NULL, "%s.%016llx.done.%d", c->job, (unsigned long long)c->session,
                   (int)c->rank))
      put_file(path, OP_DONE, NULL, 0, NULL);
  } else {
    close_cleanup(c, k);
  }
}

/* Frees the communicator; a healthy one first runs the closing round so
 * that no file is left behind. Not collective in the failure case. */
static void f_close(dcp_comm *c) {
  if (!c) return;
  if (!c->broken) close_round(c);
  list_unlink(&c->earlier);
  if (c->broken) { /* peers may still be reading the failed round: leave it */
    list_forget(&c->written);
  }
  list_unlink(&c->written);
  free(c->earlier.v);
  free(c->written.v);
  free(c->groups);
  free(c->dir);
  free(c);
}

/* Accessors. */
static int32_t f_rank(const dcp_comm *c) { return c ? c->rank : -1; }
static int32_t f_size(const dcp_comm *c) { return c ? c->size : 0; }
static uint64_t f_host_id(const dcp_comm *c) { return c ? c->host : 0; }

static const dcp_coll_plugin file_plugin = {
    .abi_version = DCP_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(dcp_coll_plugin),
    .name = "file",
    .caps = DCP_COLL_CAP_GROUPS,
    .open = f_open,
    .close = f_close,
    .rank = f_rank,
    .size = f_size,
    .barrier = f_barrier,
    .bcast = f_bcast,
    .allgather = f_allgather,
    .gatherv = f_gatherv,
    .scatterv = f_scatterv,
    .allreduce_i64 = f_allreduce,
    .group_bcast = f_group_bcast,
    .host_id = f_host_id,
};

/* The plugin's only exported symbol. */
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);
const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_COLL ? &file_plugin : NULL;
}
