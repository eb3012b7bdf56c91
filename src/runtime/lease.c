/* lease.c — the directory lease (lease.h, docs/save-load.md "The directory
 * lease").
 *
 * The file `name` holds the current holder's record. Its life:
 *  - vacant → taken with an exclusive create (DCP_FILE_EXCL) and one
 *    write of the record: exactly one of several creators succeeds;
 *  - held → renewed every ttl/3: the holder writes its next record to a
 *    temporary of its own, checks that the lease still holds its nonce,
 *    and renames the temporary over it;
 *  - expired (wall clock past expiry + grace) or an empty/unparsable file
 *    that stays unchanged → broken by renaming a record of the breaker's
 *    own over it (the name never becomes vacant during a break, so no
 *    creator can slip in), after which the breaker waits "settle" and
 *    claims the lease only if its record is still there;
 *  - released → removed by its holder.
 *
 * Why no two claim at once (Fischer's timing argument): a breaker renames
 * within `step` of the read that judged the old record (it measures that,
 * and gives up when it took longer), and claims only after its record
 * survived settle = 2 * step; any other breaker judged the same old record
 * before the first rename replaced it, so it renamed before that rename +
 * step, i.e. before the claim's read, which then sees it. A creator whose
 * create-to-close took longer than `step` may have had its still-empty
 * file judged by a breaker (which waits 2 * step before judging an empty
 * file), so it too waits settle and re-reads before claiming. Removals
 * happen only when no breaker can be in flight: a live holder's record is
 * never judged expired, and a record a late renewal or break placed is
 * removed no sooner than settle after it was placed. A holder knows its
 * lease is safe until its deadline: the monotonic time at which it made
 * the record plus ttl; with clocks within the grace nobody breaks it
 * before. A renewal that lands after that deadline marks the lease lost.
 */
#include "runtime/lease.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/plugin.h"

#define LEASE_NAME_MAX 160u   /* room for ".t-<16 hex>-<seq>" after it */
#define RECORD_MAGIC "dcp-lease 1 "
#define GRACE_PARSE_MAX 3600000 /* a record's grace beyond this is not ours */
#define MAX_ATTEMPTS 64       /* acquire rounds lost to races before EBUSY */

struct dcpi_lease {
  bool enforced;
  const dcp_storage_plugin *sp; /* the context's storage table */
  dcp_storage *st;              /* the lease's own handle on the directory */
  char *root;                   /* for messages */
  char name[LEASE_NAME_MAX + 1];
  int64_t ttl_ms, grace_ms, step_ms;
  uint8_t nonce[16];     /* = rec.nonce, read by any thread (never written again) */
  dcpi_lease_record rec; /* our latest record (the acquirer, then the renewal thread) */
  uint64_t seq;          /* temporaries made so far (their names; same owners) */
  pthread_mutex_t mu;    /* guards everything below */
  pthread_cond_t cv;
  pthread_t thread;
  bool thread_started, stop;
  int64_t deadline_ns; /* monotonic: nobody may break our record before */
  int64_t placed_ns;   /* monotonic: when our latest record landed */
  bool lost;           /* never ours again */
  bool zombie;         /* lost, but a late renewal put our record in the file */
  bool registered;     /* in the process's table of held nonces */
  int64_t zombie_deadline_ns;
  char why[DCPI_ERR_MSG_MAX - 64]; /* why it was lost */
  char last_err[256];             /* the last renewal error, "" if none */
};

/* ---- clocks, sleeping ---------------------------------------------------- */

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t dcpi_lease_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ns(int64_t ns) {
  if (ns <= 0) return;
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Sleep until the monotonic time t. */
static void sleep_until(int64_t t) { sleep_ns(t - mono_ns()); }

#define MS (1000000LL)

/* ---- the record ------------------------------------------------------------ */

static void hex_of(const uint8_t *b, size_t n, char *out) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 15];
  }
  out[2 * n] = '\0';
}

static int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

size_t dcpi_lease_record_format(const dcpi_lease_record *r, char *buf, size_t cap) {
  char nonce[33];
  hex_of(r->nonce, 16, nonce);
  int n = snprintf(buf, cap,
                   RECORD_MAGIC "nonce=%s host=%s pid=%" PRId64 " expires_ms=%" PRId64
                                " ttl_ms=%" PRId64 " grace_ms=%" PRId64 " renewals=%" PRIu64 "\n",
                   nonce, r->host, r->pid, r->expires_ms, r->ttl_ms, r->grace_ms, r->renewals);
  if (n > 0 && r->boot[0]) { /* replace the newline with the holder's boot and namespace */
    int m = snprintf(buf + n - 1, cap > (size_t)n ? cap - (size_t)n + 1 : 0,
                     " boot=%s pidns=%" PRIu64 "\n", r->boot, r->pidns);
    n = m > 0 ? n - 1 + m : -1;
  }
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

bool dcpi_lease_record_parse(const char *buf, size_t len, dcpi_lease_record *r) {
  char text[DCPI_LEASE_RECORD_MAX + 1], nonce[33], again[DCPI_LEASE_RECORD_MAX + 1];
  if (!buf || len == 0 || len > DCPI_LEASE_RECORD_MAX || memchr(buf, '\0', len)) return false;
  memcpy(text, buf, len);
  text[len] = '\0';
  dcpi_lease_record o;
  memset(&o, 0, sizeof o);
  long long pid, exp, ttl, grace;
  unsigned long long ren, pidns = 0;
  int got = sscanf(text,
                   RECORD_MAGIC "nonce=%32[0-9a-f] host=%64[A-Za-z0-9._-] pid=%lld "
                                "expires_ms=%lld ttl_ms=%lld grace_ms=%lld renewals=%llu "
                                "boot=%32[0-9a-f] pidns=%llu",
                   nonce, o.host, &pid, &exp, &ttl, &grace, &ren, o.boot, &pidns);
  if (got != 7 && got != 9) return false;
  if (got == 7) o.boot[0] = '\0';
  else if (strlen(o.boot) != 32) return false;
  o.pidns = pidns;
  if (strlen(nonce) != 32 || pid <= 0 || exp < 0 || ttl < DCPI_LEASE_TTL_MIN_MS ||
      ttl > DCPI_LEASE_TTL_MAX_MS || grace < 0 || grace > GRACE_PARSE_MAX)
    return false;
  for (int i = 0; i < 16; i++)
    o.nonce[i] = (uint8_t)(hex_val(nonce[2 * i]) << 4 | hex_val(nonce[2 * i + 1]));
  o.pid = pid, o.expires_ms = exp, o.ttl_ms = ttl, o.grace_ms = grace, o.renewals = ren;
  /* canonical only: formatting it again must give the bytes back */
  size_t n = dcpi_lease_record_format(&o, again, sizeof again);
  if (n != len || memcmp(again, text, len) != 0) return false;
  *r = o;
  return true;
}

/* "host H pid P, expires in 1.2 s (at 2024-01-01T00:00:00Z, renewed 3 times)". */
static void describe(const dcpi_lease_record *r, char *buf, size_t cap) {
  int64_t now = dcpi_lease_wall_ms(), left = r->expires_ms - now;
  char when[32] = "?";
  time_t t = (time_t)(r->expires_ms / 1000);
  struct tm tm;
  if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  snprintf(buf, cap, "host %s pid %" PRId64 ", %s %.1f s %s (at %s, renewed %" PRIu64 " times)",
           r->host, r->pid, left >= 0 ? "expires in" : "expired", (double)(left >= 0 ? left : -left) / 1000.0,
           left >= 0 ? "from now" : "ago", when, r->renewals);
}

/* This boot's id (/proc/sys/kernel/random/boot_id, dashes dropped) and
 * this process's pid namespace; "" and 0 when unknown. */
static void boot_and_pidns(char boot[33], uint64_t *pidns) {
  boot[0] = '\0';
  *pidns = 0;
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  char line[64] = "";
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
  }
  size_t n = 0;
  for (const char *p = line; *p && n < 32; p++)
    if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')) boot[n++] = *p;
  boot[n] = '\0';
  struct stat sb;
  if (n != 32 || stat("/proc/self/ns/pid", &sb) != 0) {
    boot[0] = '\0';
    return;
  }
  *pidns = (uint64_t)sb.st_ino;
}

/* The nonces of the leases this process holds (acquired, not released):
 * a record of this process with another nonce is a leftover (a release
 * whose removal failed), whoever reads it here. The one process-wide
 * table of the library: what a process holds is a fact about the process. */
typedef struct held_nonce {
  uint8_t nonce[16];
  struct held_nonce *next;
} held_nonce;
static pthread_mutex_t g_held_mu = PTHREAD_MUTEX_INITIALIZER;
static held_nonce *g_held;

static bool held_add(const uint8_t nonce[16]) {
  held_nonce *h = malloc(sizeof *h);
  if (!h) return false;
  memcpy(h->nonce, nonce, 16);
  pthread_mutex_lock(&g_held_mu);
  h->next = g_held, g_held = h;
  pthread_mutex_unlock(&g_held_mu);
  return true;
}

static void held_remove(const uint8_t nonce[16]) {
  pthread_mutex_lock(&g_held_mu);
  for (held_nonce **p = &g_held; *p; p = &(*p)->next)
    if (memcmp((*p)->nonce, nonce, 16) == 0) {
      held_nonce *h = *p;
      *p = h->next;
      free(h);
      break;
    }
  pthread_mutex_unlock(&g_held_mu);
}

static bool held_here(const uint8_t nonce[16]) {
  bool found = false;
  pthread_mutex_lock(&g_held_mu);
  for (const held_nonce *h = g_held; h && !found; h = h->next)
    found = memcmp(h->nonce, nonce, 16) == 0;
  pthread_mutex_unlock(&g_held_mu);
  return found;
}

/* The state letter of /proc/<pid>/stat (after the command's closing
 * parenthesis, which may itself hold spaces or parentheses), or 0. */
static char proc_state(int64_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%" PRId64 "/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *close = strrchr(buf, ')');
  return close && close[1] == ' ' ? close[2] : 0;
}

/* Tasks (threads) of pid still listed in /proc/<pid>/task, or -1. */
static int proc_tasks(int64_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%" PRId64 "/task", pid);
  DIR *d = opendir(path);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

bool dcpi_pid_gone(int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  if (kill((pid_t)pid, 0) != 0) return errno == ESRCH;
  char st = proc_state(pid);
  return (st == 'Z' || st == 'X') && proc_tasks(pid) == 1;
}

/* Whether r's holder is known to be gone: same host, same boot, same pid
 * namespace, and its pid is gone (or it is this process, which does not
 * hold that lease). A reused pid keeps the lease alive until its expiry
 * (the safe direction). */
static bool holder_dead(const dcpi_lease *l, const dcpi_lease_record *r) {
  if (!r->boot[0] || !l->rec.boot[0] || strcmp(r->boot, l->rec.boot) != 0 ||
      r->pidns != l->rec.pidns || strcmp(r->host, l->rec.host) != 0 || r->pid <= 0 ||
      r->pid > INT32_MAX)
    return false;
  if (r->pid == (int64_t)getpid()) return !held_here(r->nonce);
  return dcpi_pid_gone(r->pid);
}

/* This host's name in the record's alphabet. */
static void host_name(char out[65]) {
  char h[256] = "";
  if (gethostname(h, sizeof h - 1) != 0) h[0] = '\0';
  h[sizeof h - 1] = '\0';
  size_t n = 0;
  for (const char *p = h; *p && n < 64; p++) {
    char c = *p;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '_' || c == '-';
    out[n++] = ok ? c : '_';
  }
  if (n == 0) memcpy(out, "unknown", 8), n = 7;
  out[n] = '\0';
}

static dcp_status random_nonce(uint8_t nonce[16]) {
  size_t got = 0;
  while (got < 16) {
    ssize_t n = getrandom(nonce + got, 16 - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return DCP_EIO;
    got += (size_t)n;
  }
  return DCP_OK;
}

/* ---- storage ----------------------------------------------------------------- */

/* A file's first bytes and its size (content of a lease file as read). */
typedef struct content {
  bool present;
  uint64_t size;
  size_t len; /* bytes in buf: min(size, DCPI_LEASE_RECORD_MAX) */
  char buf[DCPI_LEASE_RECORD_MAX];
} content;

static bool same_content(const content *a, const content *b) {
  return a->present == b->present && a->size == b->size && a->len == b->len &&
         memcmp(a->buf, b->buf, a->len) == 0;
}

static dcp_status st_fail(const dcpi_lease *l, int rc, const dcp_plugin_err *perr,
                          const char *op, const char *name, dcpi_err *err) {
  char what[400];
  snprintf(what, sizeof what, "lease: %s '%s' in %s", op, name, l->root);
  return dcpi_plugin_status(rc, perr, l->sp->name, what, err);
}

/* Read name into c (c->present false when it does not exist). The size is
 * taken by name, then the file opened: when it was replaced in between
 * and turns out shorter, try again. */
static dcp_status read_content(dcpi_lease *l, const char *name, content *c, dcpi_err *err) {
  for (int attempt = 0;; attempt++) {
    memset(c, 0, sizeof *c);
    dcp_plugin_err perr = {{0}};
    int rc = l->sp->file_size(l->st, name, &c->size, &perr);
    if (rc == DCP_ENOTFOUND) return DCP_OK;
    if (rc) return st_fail(l, rc, &perr, "size", name, err);
    c->len = c->size < DCPI_LEASE_RECORD_MAX ? (size_t)c->size : DCPI_LEASE_RECORD_MAX;
    dcp_storage_file *f;
    rc = l->sp->file_open(l->st, name, DCP_FILE_READ, &f, &perr);
    if (rc == DCP_ENOTFOUND) return DCP_OK;
    if (rc) return st_fail(l, rc, &perr, "open", name, err);
    rc = c->len ? l->sp->file_read(f, c->buf, c->len, 0, &perr) : DCP_OK;
    dcp_plugin_err ignored = {{0}};
    l->sp->file_close(f, &ignored);
    if (rc == DCP_ECORRUPT && attempt < 8) continue; /* replaced by a shorter one */
    if (rc) return st_fail(l, rc, &perr, "read", name, err);
    c->present = true;
    return DCP_OK;
  }
}

/* Create name with mode (DCP_FILE_WRITE, possibly | DCP_FILE_EXCL) and
 * write data in one write; no sync: a lease need not survive a power
 * loss (an older or empty record afterwards is broken like any other),
 * and close makes it visible to other NFS clients. */
static dcp_status write_file(dcpi_lease *l, const char *name, uint32_t mode, const char *data,
                             size_t len, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  dcp_storage_file *f;
  int rc = l->sp->file_open(l->st, name, mode, &f, &perr);
  if (rc) return st_fail(l, rc, &perr, mode & DCP_FILE_EXCL ? "create" : "open", name, err);
  rc = l->sp->file_write(f, data, len, &perr);
  dcp_plugin_err perr2 = {{0}};
  int rc2 = l->sp->file_close(f, rc ? &perr2 : &perr);
  if (!rc) rc = rc2;
  return rc ? st_fail(l, rc, &perr, "write", name, err) : DCP_OK;
}

static void remove_quiet(dcpi_lease *l, const char *name) {
  dcp_plugin_err perr = {{0}};
  l->sp->remove(l->st, name, &perr);
}

/* A fresh temporary name for our next record. */
static void temp_name(dcpi_lease *l, char out[256]) {
  char nonce[33];
  hex_of(l->nonce, 8, nonce);
  snprintf(out, 256, "%s.t-%s-%" PRIu64, l->name, nonce, l->seq++);
}

/* Whether c is a record of ours (our nonce). */
static bool is_ours(const dcpi_lease *l, const content *c, dcpi_lease_record *r) {
  return c->present && c->len == c->size && dcpi_lease_record_parse(c->buf, c->len, r) &&
         memcmp(r->nonce, l->nonce, 16) == 0;
}

/* r with a new expiry (ttl from now), formatted into buf; *t0 is the
 * monotonic time taken before the wall clock, so t0 + ttl is our deadline. */
static size_t make_record(const dcpi_lease *l, dcpi_lease_record *r, char *buf, int64_t *t0) {
  *t0 = mono_ns();
  r->expires_ms = dcpi_lease_wall_ms() + l->ttl_ms;
  return dcpi_lease_record_format(r, buf, DCPI_LEASE_RECORD_MAX + 1);
}

/* ---- acquiring ----------------------------------------------------------------- */

/* Try the exclusive create. DCP_EEXIST when the name exists; DCP_OK with
 * *claimed telling whether we hold the lease now (false: we were slow and
 * somebody broke our file meanwhile). */
static dcp_status try_create(dcpi_lease *l, bool *claimed, dcpi_err *err) {
  char rec[DCPI_LEASE_RECORD_MAX + 1];
  int64_t t0;
  size_t n = make_record(l, &l->rec, rec, &t0);
  *claimed = false;
  dcpi_err e2;
  dcpi_err_clear(&e2);
  dcp_status rc = write_file(l, l->name, DCP_FILE_WRITE | DCP_FILE_EXCL, rec, n, &e2);
  int64_t t1 = mono_ns(), step = l->step_ms * MS;
  if (rc == DCP_EEXIST) return DCP_EEXIST;
  if (rc) {
    /* Our file may exist, empty or partial. Within step nobody can have
     * judged it, so it is still ours to remove; later, leave it to be
     * broken like any empty lease file. */
    if (t1 - t0 < step) remove_quiet(l, l->name);
    if (err) *err = e2;
    return rc;
  }
  if (t1 - t0 >= step) {
    /* Slow: a breaker may have judged our file while it was still empty;
     * any such breaker has renamed over it by t1 + step. */
    sleep_until(t1 + 2 * step);
    content c;
    dcpi_lease_record r;
    if ((rc = read_content(l, l->name, &c, err))) return rc;
    if (!is_ours(l, &c, &r) || c.len != n || memcmp(c.buf, rec, n) != 0) return DCP_OK;
  }
  pthread_mutex_lock(&l->mu);
  l->deadline_ns = t0 + l->ttl_ms * MS;
  l->placed_ns = t1;
  pthread_mutex_unlock(&l->mu);
  *claimed = true;
  return DCP_OK;
}

typedef enum { SEEN_VACANT, SEEN_CHANGED, SEEN_LIVE, SEEN_BREAKABLE } seen_kind;

/* Look at the existing lease file: vacant, changed while we looked, held
 * by a live holder (EBUSY message in err), or breakable (*judged is the
 * content to break). */
static dcp_status inspect(dcpi_lease *l, content *judged, seen_kind *kind, dcpi_err *err) {
  content c;
  dcp_status rc = read_content(l, l->name, &c, err);
  if (rc) return rc;
  if (!c.present) return *kind = SEEN_VACANT, DCP_OK;
  dcpi_lease_record r;
  if (c.len == c.size && dcpi_lease_record_parse(c.buf, c.len, &r)) {
    int64_t now = dcpi_lease_wall_ms();
    bool own = memcmp(r.nonce, l->nonce, 16) == 0; /* left by an earlier round */
    if (!own && now <= r.expires_ms + r.grace_ms && !holder_dead(l, &r)) {
      char who[300];
      describe(&r, who, sizeof who);
      *kind = SEEN_LIVE;
      return dcpi_fail(err, DCP_EBUSY,
                       "checkpoint directory %s is in use: lease '%s' is held by %s; another "
                       "save into this directory is running (or its holder stopped, and the "
                       "lease can be taken %.1f s from now)",
                       l->root, l->name, who,
                       (double)(r.expires_ms + r.grace_ms - now) / 1000.0);
    }
    *judged = c;
    return *kind = SEEN_BREAKABLE, DCP_OK;
  }
  /* Empty or unparsable: a holder that died between creating and writing
   * it, or one writing it right now (which takes less than step). */
  sleep_ns(2 * l->step_ms * MS);
  content again;
  if ((rc = read_content(l, l->name, &again, err))) return rc;
  if (!again.present) return *kind = SEEN_VACANT, DCP_OK;
  if (!same_content(&c, &again)) return *kind = SEEN_CHANGED, DCP_OK;
  *judged = again;
  return *kind = SEEN_BREAKABLE, DCP_OK;
}

/* Replace the judged content with our record (see the top of the file).
 * DCP_OK with *claimed false when somebody else got there first. */
static dcp_status try_break(dcpi_lease *l, const content *judged, bool *claimed,
                            dcpi_err *err) {
  char rec[DCPI_LEASE_RECORD_MAX + 1], tmp[256];
  int64_t t0, step = l->step_ms * MS;
  size_t n = make_record(l, &l->rec, rec, &t0);
  *claimed = false;
  temp_name(l, tmp);
  dcp_status s = write_file(l, tmp, DCP_FILE_WRITE, rec, n, err);
  if (s) {
    remove_quiet(l, tmp);
    return s;
  }
  content c;
  int64_t tj = mono_ns(); /* the judgment: this read */
  if ((s = read_content(l, l->name, &c, err)) || !same_content(&c, judged)) {
    remove_quiet(l, tmp);
    return s;
  }
  dcp_plugin_err perr = {{0}};
  int rc = l->sp->rename(l->st, tmp, l->name, &perr);
  int64_t tr = mono_ns();
  if (rc) {
    remove_quiet(l, tmp);
    return st_fail(l, rc, &perr, "rename", tmp, err);
  }
  sleep_until(tr + 2 * step);
  dcpi_lease_record r;
  if ((s = read_content(l, l->name, &c, err))) return s;
  bool ours = is_ours(l, &c, &r) && c.len == n && memcmp(c.buf, rec, n) == 0;
  if (tr - tj > step) {
    /* Too slow to know that our rename did not replace the record of
     * somebody who had already claimed: do not claim; take our record
     * back out (every breaker of what we judged has acted by now). */
    if (ours) remove_quiet(l, l->name);
    return DCP_OK;
  }
  if (!ours) return DCP_OK;
  pthread_mutex_lock(&l->mu);
  l->deadline_ns = t0 + l->ttl_ms * MS;
  l->placed_ns = tr;
  pthread_mutex_unlock(&l->mu);
  *claimed = true;
  return DCP_OK;
}

/* ---- renewal ---------------------------------------------------------------------- */

/* Mark the lease lost (under mu). */
static void lose_locked(dcpi_lease *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lose_locked(dcpi_lease *l, const char *fmt, ...) {
  if (l->lost) return;
  l->lost = true;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->why, sizeof l->why, fmt, ap);
  va_end(ap);
}

/* Why a read lease file is not ours, for messages. */
static void not_ours_reason(const content *c, char *buf, size_t cap) {
  dcpi_lease_record r;
  if (!c->present) {
    snprintf(buf, cap, "the lease file was removed by another process");
  } else if (c->len == c->size && dcpi_lease_record_parse(c->buf, c->len, &r)) {
    char who[300];
    describe(&r, who, sizeof who);
    snprintf(buf, cap, "the lease was taken over by %s", who);
  } else {
    snprintf(buf, cap, "the lease file was overwritten (%" PRIu64 " bytes, not a record)",
             c->size);
  }
}

/* One renewal (the renewal thread only). */
static void renew_once(dcpi_lease *l) {
  char rec[DCPI_LEASE_RECORD_MAX + 1], tmp[256], why[400];
  int64_t t0;
  dcpi_lease_record next = l->rec;
  next.renewals++;
  size_t n = make_record(l, &next, rec, &t0);
  pthread_mutex_lock(&l->mu);
  int64_t deadline = l->deadline_ns;
  pthread_mutex_unlock(&l->mu);
  temp_name(l, tmp);
  dcpi_err e;
  dcpi_err_clear(&e);
  dcp_status s = write_file(l, tmp, DCP_FILE_WRITE, rec, n, &e);
  content c;
  dcpi_lease_record r;
  if (!s) s = read_content(l, l->name, &c, &e);
  int rc = DCP_OK;
  dcp_plugin_err perr = {{0}};
  bool ours = !s && is_ours(l, &c, &r), late = mono_ns() >= deadline;
  if (ours && !late) {
    rc = l->sp->rename(l->st, tmp, l->name, &perr);
    if (rc) st_fail(l, rc, &perr, "rename", tmp, &e);
  }
  int64_t t1 = mono_ns();
  if (s || rc || !ours || late) remove_quiet(l, tmp);
  if (!s && !ours) not_ours_reason(&c, why, sizeof why);
  pthread_mutex_lock(&l->mu);
  if (s || rc) {
    snprintf(l->last_err, sizeof l->last_err, "%.255s", e.msg);
  } else if (!ours) {
    lose_locked(l, "%s", why);
  } else if (late) {
    lose_locked(l, "the lease expired before it could be renewed (this process was stalled, "
                   "or its renewals failed%s%s)",
                l->last_err[0] ? ": " : "", l->last_err);
  } else if (t1 >= deadline) {
    /* Stalled between the check and the rename, past the expiry: someone
     * may have broken the lease meanwhile, and our rename replaced their
     * record (their check fails on it). Never ours again; the record we
     * just put there is removed at release. */
    lose_locked(l, "a renewal landed %.1f s after the lease expired (this process was "
                   "stalled)", (double)(t1 - deadline) / 1e9);
    l->zombie = true;
    l->zombie_deadline_ns = t0 + l->ttl_ms * MS;
    l->placed_ns = t1;
    l->rec = next;
  } else {
    l->rec = next;
    l->deadline_ns = t0 + l->ttl_ms * MS;
    l->placed_ns = t1;
    l->last_err[0] = '\0';
  }
  pthread_mutex_unlock(&l->mu);
}

static void *renew_main(void *arg) {
  dcpi_lease *l = arg;
  int64_t interval = l->ttl_ms * MS / 3;
  pthread_mutex_lock(&l->mu);
  int64_t next = l->placed_ns + interval;
  while (!l->stop && !l->lost) {
    int64_t now = mono_ns();
    if (now < next) {
      struct timespec ts = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
      pthread_cond_timedwait(&l->cv, &l->mu, &ts);
      continue;
    }
    pthread_mutex_unlock(&l->mu);
    renew_once(l);
    pthread_mutex_lock(&l->mu);
    /* after a failed attempt, try again sooner */
    next = l->last_err[0] ? mono_ns() + interval / 3 : l->placed_ns + interval;
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

/* ---- the API ------------------------------------------------------------------------ */

static bool lease_name_ok(const char *name) {
  size_t n = strnlen(name, LEASE_NAME_MAX + 1);
  if (n == 0 || n > LEASE_NAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '.' || c == '_' || c == '-'))
      return false;
  }
  return true;
}

static void lease_free(dcpi_lease *l) {
  if (l && l->registered) held_remove(l->nonce);
  if (!l) return;
  if (l->st) l->sp->close(l->st);
  pthread_cond_destroy(&l->cv);
  pthread_mutex_destroy(&l->mu);
  free(l->root);
  free(l);
}

/* Set up the lease object: its own storage handle, identity, timings. */
static dcp_status lease_new(dcpi_rt *rt, const char *name, int64_t ttl_ms, dcpi_lease **out,
                            dcpi_err *err) {
  dcpi_lease *l = calloc(1, sizeof *l);
  if (!l) return dcpi_fail(err, DCP_ENOMEM, "out of memory for the lease");
  pthread_condattr_t ca;
  bool cv_ok = pthread_condattr_init(&ca) == 0;
  if (cv_ok) {
    cv_ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
            pthread_cond_init(&l->cv, &ca) == 0;
    pthread_condattr_destroy(&ca);
  }
  if (!cv_ok || pthread_mutex_init(&l->mu, NULL) != 0) {
    if (cv_ok) pthread_cond_destroy(&l->cv);
    free(l);
    return dcpi_fail(err, DCP_ENOMEM, "cannot set up the lease's lock");
  }
  *out = l;
  l->sp = rt->ctx->storage;
  l->enforced = (l->sp->caps & DCP_STORAGE_CAP_EXCL) != 0;
  memcpy(l->name, name, strlen(name) + 1);
  l->ttl_ms = ttl_ms;
  l->grace_ms = ttl_ms / 2 < DCPI_LEASE_GRACE_MAX_MS ? ttl_ms / 2 : DCPI_LEASE_GRACE_MAX_MS;
  l->step_ms = ttl_ms / 10 < 10 ? 10 : ttl_ms / 10 > 1000 ? 1000 : ttl_ms / 10;
  l->root = strdup(rt->path);
  if (!l->root) return dcpi_fail(err, DCP_ENOMEM, "out of memory for the lease");
  if (!l->enforced) return DCP_OK;
  if (random_nonce(l->nonce))
    return dcpi_fail(err, DCP_EIO, "lease: getrandom: %s", strerror(errno));
  memcpy(l->rec.nonce, l->nonce, 16);
  host_name(l->rec.host);
  boot_and_pidns(l->rec.boot, &l->rec.pidns);
  l->rec.pid = (int64_t)getpid();
  l->rec.ttl_ms = ttl_ms;
  l->rec.grace_ms = l->grace_ms;
  dcp_storage_config cfg = {.struct_size = sizeof cfg, .root = rt->path,
                            .flags = DCP_STORAGE_AUX,
                            .rank = rt->ctx->rank, .world_size = rt->ctx->world_size,
                            .options = rt->ctx->storage_options};
  dcp_plugin_err perr = {{0}};
  int rc = l->sp->open(&cfg, &l->st, &perr);
  if (rc) {
    l->st = NULL;
    return st_fail(l, rc, &perr, "open", "", err);
  }
  return DCP_OK;
}

dcp_status dcpi_lease_acquire(dcpi_rt *rt, const char *name, int64_t ttl_ms, dcpi_lease **out,
                              dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "lease: NULL out");
  *out = NULL;
  if (!rt || !rt->ctx || !rt->ctx->storage || !rt->st || !rt->path)
    return dcpi_fail(err, DCP_EINVAL, "lease: the checkpoint's storage is not open");
  if (!name || !lease_name_ok(name))
    return dcpi_fail(err, DCP_EINVAL, "lease: invalid lease file name");
  if (ttl_ms == 0) ttl_ms = DCPI_LEASE_TTL_DEFAULT_MS;
  if (ttl_ms < DCPI_LEASE_TTL_MIN_MS || ttl_ms > DCPI_LEASE_TTL_MAX_MS)
    return dcpi_fail(err, DCP_EINVAL, "lease: ttl %" PRId64 " ms is outside %d..%d ms", ttl_ms,
                     DCPI_LEASE_TTL_MIN_MS, DCPI_LEASE_TTL_MAX_MS);
  dcpi_lease *l = NULL;
  dcp_status rc = lease_new(rt, name, ttl_ms, &l, err);
  if (rc || !l->enforced) {
    if (rc) lease_free(l);
    else *out = l;
    return rc;
  }
  bool claimed = false;
  for (int attempt = 0; attempt < MAX_ATTEMPTS && !claimed; attempt++) {
    rc = try_create(l, &claimed, err);
    if (rc == DCP_OK) continue;
    if (rc != DCP_EEXIST) break;
    content judged;
    seen_kind kind;
    rc = inspect(l, &judged, &kind, err);
    if (rc) break;
    if (kind == SEEN_VACANT || kind == SEEN_CHANGED) continue;
    rc = try_break(l, &judged, &claimed, err);
    if (rc) break;
  }
  if (!rc && !claimed)
    rc = dcpi_fail(err, DCP_EBUSY,
                  "checkpoint directory %s: lease '%s' is contended; gave up after %d rounds",
                  l->root, l->name, MAX_ATTEMPTS);
  if (!rc && !(l->registered = held_add(l->nonce))) {
    remove_quiet(l, l->name);
    rc = dcpi_fail(err, DCP_ENOMEM, "lease: out of memory");
  }
  if (!rc && pthread_create(&l->thread, NULL, renew_main, l) != 0) {
    remove_quiet(l, l->name);
    rc = dcpi_fail(err, DCP_ENOMEM, "lease: cannot start the renewal thread");
  } else if (!rc) {
    l->thread_started = true;
  }
  if (rc) {
    lease_free(l);
    return rc;
  }
  *out = l;
  return DCP_OK;
}

bool dcpi_lease_enforced(const dcpi_lease *l) { return l && l->enforced; }

/* Lose the lease when less than ttl/4 is left before our deadline (under mu). */
static void check_time_locked(dcpi_lease *l) {
  int64_t left = l->deadline_ns - mono_ns();
  if (left > l->ttl_ms * MS / 4) return;
  lose_locked(l, "the lease %s %.1f s %s and was not renewed in time (this process was "
                 "stalled, or its renewals failed%s%s)",
              left >= 0 ? "expires in" : "expired", (double)(left >= 0 ? left : -left) / 1e9,
              left >= 0 ? "from now" : "ago", l->last_err[0] ? ": " : "", l->last_err);
}

/* DCP_ESTALE for a lost lease (under mu). */
static dcp_status stale_locked(dcpi_lease *l, dcpi_err *err) {
  return dcpi_fail(err, DCP_ESTALE, "checkpoint directory %s: this save no longer holds its "
                   "lease '%s': %s", l->root, l->name, l->why);
}

dcp_status dcpi_lease_check(dcpi_lease *l, dcpi_err *err) {
  if (!l) return dcpi_fail(err, DCP_EINVAL, "lease: NULL");
  if (!l->enforced) return DCP_OK;
  pthread_mutex_lock(&l->mu);
  check_time_locked(l);
  dcp_status rc = l->lost ? stale_locked(l, err) : DCP_OK;
  pthread_mutex_unlock(&l->mu);
  if (rc) return rc;
  content c;
  dcpi_lease_record r;
  if ((rc = read_content(l, l->name, &c, err))) return rc;
  char why[400] = "";
  bool ours = is_ours(l, &c, &r);
  if (!ours) not_ours_reason(&c, why, sizeof why);
  pthread_mutex_lock(&l->mu);
  if (!ours) lose_locked(l, "%s", why);
  check_time_locked(l);
  rc = l->lost ? stale_locked(l, err) : DCP_OK;
  pthread_mutex_unlock(&l->mu);
  return rc;
}

void dcpi_lease_release(dcpi_lease *l) {
  if (!l) return;
  if (l->thread_started) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
  }
  if (l->enforced && l->st) {
    content c;
    dcpi_lease_record r;
    dcpi_err e;
    if (!l->lost && mono_ns() < l->deadline_ns) {
      /* ours and unexpired: nobody may be breaking it */
      if (!read_content(l, l->name, &c, &e) && is_ours(l, &c, &r) &&
          mono_ns() < l->deadline_ns)
        remove_quiet(l, l->name);
    } else if (l->zombie) {
      /* our late renewal's record: breakers of the record it replaced
       * have acted within the step bound; after its own expiry it is
       * left to be broken */
      sleep_until(l->placed_ns + 2 * l->step_ms * MS);
      if (mono_ns() < l->zombie_deadline_ns && !read_content(l, l->name, &c, &e) &&
          is_ours(l, &c, &r) && mono_ns() < l->zombie_deadline_ns)
        remove_quiet(l, l->name);
    }
  }
  lease_free(l);
}
