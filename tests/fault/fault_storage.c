/*
 * fault_storage.c — the "fault" storage plugin, a test fixture: it wraps
 * another storage plugin (loaded by name through the same plugin ABI) and
 * makes chosen operations fail, so the fault campaign can check that a
 * failed or killed save never turns into a silently wrong checkpoint.
 *
 * A backend opened with DCP_STORAGE_AUX (the directory lease's own handle,
 * an async trainer's look at what is committed) passes every operation
 * through untouched.
 *
 * Options (the storage config's options string, "key=value,..."):
 *   inner=NAME        the wrapped plugin, dcp-storage-NAME.so, searched in
 *                     $DCP_PLUGIN_PATH's directories, then the build tree's
 *                     plugin directory (FAULT_INNER_DIR); default "posix"
 *   inner_opts=A;B    options handed to the inner plugin (';' becomes ',')
 *   ctl=PATH          a control file read at every open of a backend: it
 *                     holds the fault keys below (comma or newline
 *                     separated) and overrides those of the options; no
 *                     file means no faults. This is how one context (and
 *                     the async writer process it spawned) is switched
 *                     between faulty and clean saves.
 * Fault keys:
 *   fail=KIND:N:ACTION  the N-th operation (1-based, counted per backend)
 *                     of KIND fails. KIND: mount (the backend open), open,
 *                     write, read, sync, close, size, rename, remove,
 *                     syncdir, list. ACTION: eio, enospc, short (a write
 *                     stores half its bytes, then fails with EIO), torn (a
 *                     write stores half its bytes and reports success: a
 *                     lying backend), kill (SIGKILL before the operation),
 *                     killafter (SIGKILL right after it).
 *   kill=BYTES        SIGKILL the process once BYTES bytes have been written
 *                     through this backend (the bytes before the offset
 *                     reach the inner plugin first).
 *   rank=R            inject on the backend opened by rank R only.
 *   probe=1           at close, write the per-kind operation counts and the
 *                     bytes written to PATH.probe.<rank> (PATH of ctl=).
 *   log=FILE          append "<rank> <kind> <name> [<name2>]" for every
 *                     operation to FILE (shared by all processes: O_APPEND
 *                     keeps the lines in the order the operations started;
 *                     name2 is the target of a rename, w or r for an open).
 *   journal=FILE      power-loss journal (fc_journal.h): every mutating
 *                     operation (the creation of the root by the backend's
 *                     open, a write open, each write with its bytes, file
 *                     and directory syncs, renames, removes) runs under an
 *                     exclusive flock of FILE and is appended to it, with
 *                     one sequence number over all the processes sharing
 *                     FILE (counted in FILE.state, mapped shared). The
 *                     campaign replays a prefix of it into what a power
 *                     cut could leave (fc_crash.c). The inner plugin must
 *                     keep one flat directory per root (posix).
 *   lie=fsync|syncdir with journal=: a file system that ignores file_sync
 *                     (or sync_dir): the call succeeds but is not
 *                     journaled, so no replay counts on it (the campaign's
 *                     check that its oracle sees a lost checkpoint).
 *   cut=K             with journal=: the power goes off after the K-th
 *                     journaled operation: that process dies (SIGKILL)
 *                     right after it, and every process sharing the
 *                     journal dies at its next storage call, so nothing
 *                     after operation K ever reaches the disk.
 * Load-side actions (fail=read:N:..., fail=size:N:...), modelling a flaky
 * file system: read short (a prefix read, then DCP_ECORRUPT "short read",
 * what a file that ends early gives), read zero / garbage (the read
 * succeeds but the second half of the buffer holds zeros / a stale
 * pattern), read flip (one bit of the buffer flipped, success reported),
 * size lie (half the real size, or 1 for an empty file, success
 * reported).
 * Whenever a fault fires, a line naming it is appended to PATH.fired.
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dcp_plugin.h"
#include "fc_journal.h"

#ifndef FAULT_INNER_DIR
#define FAULT_INNER_DIR ""
#endif

enum { K_MOUNT, K_OPEN, K_WRITE, K_READ, K_SYNC, K_CLOSE, K_SIZE, K_RENAME, K_REMOVE,
       K_SYNCDIR, K_LIST, K_COUNT };
static const char *const kind_names[K_COUNT] = {"mount", "open",   "write",  "read",
                                                "sync",  "close",  "size",   "rename",
                                                "remove", "syncdir", "list"};

enum { A_NONE, A_EIO, A_ENOSPC, A_SHORT, A_TORN, A_KILL, A_KILLAFTER, A_ZERO, A_GARBAGE,
       A_FLIP, A_LIE, A_COUNT };
static const char *const action_names[A_COUNT] = {
    "none", "eio", "enospc", "short", "torn", "kill", "killafter", "zero", "garbage", "flip",
    "lie"};

/* What to inject on one backend. */
typedef struct fault_spec {
  int kind, action; /* fail=: kind and action, action A_NONE when unset */
  uint64_t nth;
  bool has_kill; /* kill=: the byte offset */
  uint64_t kill_at;
  int rank; /* rank=, -1 for every rank */
  bool probe;
  char log[512]; /* log=: append every operation to this file, or "" */
  char journal[512]; /* journal=: the power-loss journal, or "" */
  uint64_t cut;      /* cut=: power off after this journaled operation (0: never) */
  bool lie_fsync, lie_syncdir; /* lie=: syncs that make nothing durable */
} fault_spec;

struct dcp_storage {
  const dcp_storage_plugin *inner;
  dcp_storage *ist;
  fault_spec sp;
  bool armed; /* sp applies to this backend's rank */
  int rank;
  char *ctl; /* ctl= path, or NULL */
  _Atomic uint64_t ops[K_COUNT];
  _Atomic uint64_t written;
  int jfd;        /* the journal, or -1 */
  fcj_state *js;  /* its shared state */
  char root[4096];
};

struct dcp_storage_file {
  dcp_storage *st;
  dcp_storage_file *inner;
  char name[256]; /* for the log */
  uint64_t jh;    /* journal: seq of the write open (0: a read file) */
  uint64_t pos;   /* journal: bytes appended so far */
};

static int fail(dcp_plugin_err *err, int code, const char *fmt, ...) {
  if (!err) return code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return code;
}

/* ---- options ---------------------------------------------------------- */

static int lookup(const char *const *names, int n, const char *s, size_t len) {
  for (int i = 0; i < n; i++)
    if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) return i;
  return -1;
}

/* A decimal in [0, 2^63). */
static bool parse_u64(const char *s, size_t n, uint64_t *out) {
  if (n == 0 || n > 18) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  *out = v;
  return true;
}

/* fail=KIND:N:ACTION */
static bool parse_fail(fault_spec *sp, const char *v, size_t n) {
  const char *c1 = memchr(v, ':', n);
  const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - v)) : NULL;
  if (!c2) return false;
  int kind = lookup(kind_names, K_COUNT, v, (size_t)(c1 - v));
  int action = lookup(action_names, A_COUNT, c2 + 1, n - (size_t)(c2 + 1 - v));
  uint64_t nth;
  if (kind < 0 || action <= A_NONE || !parse_u64(c1 + 1, (size_t)(c2 - c1 - 1), &nth) || !nth)
    return false;
  /* actions that only make sense on one kind */
  if ((action == A_TORN && kind != K_WRITE) ||
      (action == A_SHORT && kind != K_WRITE && kind != K_READ) ||
      ((action == A_ZERO || action == A_GARBAGE || action == A_FLIP) && kind != K_READ) ||
      (action == A_LIE && kind != K_SIZE))
    return false;
  sp->kind = kind, sp->action = action, sp->nth = nth;
  return true;
}

/* One fault key; false for a bad value or an unknown key. */
static bool apply_fault_key(fault_spec *sp, const char *k, size_t kn, const char *v, size_t vn) {
  uint64_t x;
#define KEY_IS(lit) (kn == sizeof(lit) - 1 && memcmp(k, lit, kn) == 0)
  if (KEY_IS("fail")) return parse_fail(sp, v, vn);
  if (KEY_IS("kill")) return (sp->has_kill = parse_u64(v, vn, &sp->kill_at));
  if (KEY_IS("rank")) return parse_u64(v, vn, &x) && x < 1000000 && ((sp->rank = (int)x), true);
  if (KEY_IS("probe")) return parse_u64(v, vn, &x) && x <= 1 && ((sp->probe = x), true);
  if (KEY_IS("log")) {
    if (vn == 0 || vn >= sizeof sp->log) return false;
    memcpy(sp->log, v, vn), sp->log[vn] = '\0';
    return true;
  }
  if (KEY_IS("journal")) {
    if (vn == 0 || vn >= sizeof sp->journal) return false;
    memcpy(sp->journal, v, vn), sp->journal[vn] = '\0';
    return true;
  }
  if (KEY_IS("cut")) return parse_u64(v, vn, &sp->cut);
  if (KEY_IS("lie")) {
    if (vn == 5 && !memcmp(v, "fsync", 5)) return (sp->lie_fsync = true);
    if (vn == 7 && !memcmp(v, "syncdir", 7)) return (sp->lie_syncdir = true);
    return false;
  }
#undef KEY_IS
  return false;
}

/* Configuration of the wrapper itself (the options string). */
typedef struct wrap_cfg {
  char inner[65];
  char *inner_opts; /* malloc'd, ',' restored, or NULL */
  char *ctl;        /* malloc'd or NULL */
} wrap_cfg;

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) memcpy(p, s, n), p[n] = '\0';
  return p;
}

static bool apply_wrap_key(wrap_cfg *w, fault_spec *sp, const char *k, size_t kn, const char *v,
                           size_t vn) {
  if (kn == 5 && memcmp(k, "inner", 5) == 0) {
    if (vn == 0 || vn >= sizeof w->inner) return false;
    for (size_t i = 0; i < vn; i++)
      if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '_'))
        return false;
    memcpy(w->inner, v, vn), w->inner[vn] = '\0';
    return true;
  }
  if (kn == 10 && memcmp(k, "inner_opts", 10) == 0) {
    free(w->inner_opts);
    if (!(w->inner_opts = dup_n(v, vn))) return false;
    for (char *p = w->inner_opts; *p; p++)
      if (*p == ';') *p = ',';
    return true;
  }
  if (kn == 3 && memcmp(k, "ctl", 3) == 0) {
    free(w->ctl);
    return vn > 0 && (w->ctl = dup_n(v, vn)) != NULL;
  }
  return apply_fault_key(sp, k, kn, v, vn);
}

/* Parse "key=value" items separated by any of seps; w NULL allows fault
 * keys only (the control file). */
static int parse_items(const char *s, const char *seps, wrap_cfg *w, fault_spec *sp,
                       const char *where, dcp_plugin_err *err) {
  while (s && *s) {
    size_t n = strcspn(s, seps);
    const char *eq = memchr(s, '=', n);
    if (n > 0) {
      size_t kn = eq ? (size_t)(eq - s) : 0, vn = eq ? n - kn - 1 : 0;
      bool ok = eq && kn > 0 &&
                (w ? apply_wrap_key(w, sp, s, kn, eq + 1, vn)
                   : apply_fault_key(sp, s, kn, eq + 1, vn));
      if (!ok)
        return fail(err, DCP_EINVAL, "fault storage: bad item '%.*s' in %s", (int)n, s, where);
    }
    s += n;
    if (*s) s++;
  }
  return DCP_OK;
}

/* The control file's fault keys replace those of the options. */
static int read_ctl(const char *path, fault_spec *sp, dcp_plugin_err *err) {
  FILE *f = fopen(path, "r");
  if (!f) return errno == ENOENT ? DCP_OK : fail(err, DCP_EIO, "fault storage: %s: %s", path,
                                                 strerror(errno));
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  *sp = (fault_spec){.rank = -1};
  return parse_items(buf, ",\n\r \t", NULL, sp, path, err);
}

/* ---- the inner plugin ---------------------------------------------------- */

static const dcp_storage_plugin *try_load(const char *dir, size_t dn, const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%.*s/dcp-storage-%s.so", (int)dn, dir, name);
  if (access(path, R_OK) != 0) return NULL;
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* kept loaded: tables are handed out */
  dcp_plugin_entry_fn entry = h ? (dcp_plugin_entry_fn)dlsym(h, DCP_PLUGIN_ENTRY_SYMBOL) : NULL;
  const dcp_storage_plugin *t = entry ? entry(DCP_PLUGIN_STORAGE) : NULL;
  if (!t || t->abi_version != DCP_PLUGIN_ABI_VERSION || t->struct_size < sizeof *t) return NULL;
  return t;
}

/* dcp-storage-<name>.so on $DCP_PLUGIN_PATH, then in FAULT_INNER_DIR. */
static const dcp_storage_plugin *load_inner(const char *name) {
  if (strcmp(name, "fault") == 0) return NULL; /* no wrapping ourselves */
  const char *p = getenv("DCP_PLUGIN_PATH");
  while (p && *p) {
    size_t n = strcspn(p, ":");
    const dcp_storage_plugin *t = n ? try_load(p, n, name) : NULL;
    if (t) return t;
    p += n;
    if (*p) p++;
  }
  return FAULT_INNER_DIR[0] ? try_load(FAULT_INNER_DIR, strlen(FAULT_INNER_DIR), name) : NULL;
}

/* ---- injection ------------------------------------------------------------ */

/* Append a note that a fault fired to <ctl>.fired (before a kill, too). */
static void note_fired(const dcp_storage *st, const char *what, uint64_t n) {
  if (!st->ctl) return;
  char path[4096], line[160];
  snprintf(path, sizeof path, "%s.fired", st->ctl);
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  int len = snprintf(line, sizeof line, "rank=%d pid=%d %s n=%llu\n", st->rank, (int)getpid(),
                     what, (unsigned long long)n);
  ssize_t w = write(fd, line, (size_t)len);
  (void)w;
  close(fd);
}

/* Append "rank kind name [name2]" to the log=, whose lines from every
 * process (O_APPEND) are in the order the operations completed. */
static void log_op(const dcp_storage *st, int kind, const char *name, const char *name2) {
  if (!st->sp.log[0]) return;
  char line[640];
  int len = snprintf(line, sizeof line, "%d %s %s%s%s\n", st->rank, kind_names[kind],
                     name ? name : "-", name2 ? " " : "", name2 ? name2 : "");
  int fd = open(st->sp.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, line, (size_t)len < sizeof line ? (size_t)len : sizeof line - 1);
  (void)w;
  close(fd);
}

/* Count one operation of kind; the action to take (A_NONE mostly). */
static int hit(dcp_storage *st, int kind) {
  uint64_t n = atomic_fetch_add(&st->ops[kind], 1) + 1;
  if (!st->armed || st->sp.action == A_NONE || st->sp.kind != kind || st->sp.nth != n)
    return A_NONE;
  char what[64];
  snprintf(what, sizeof what, "fail=%s:%s", kind_names[kind], action_names[st->sp.action]);
  note_fired(st, what, n);
  if (st->sp.action == A_KILL) raise(SIGKILL);
  return st->sp.action;
}

/* The error an injected action gives (kill actions never get here, except
 * killafter, handled by the caller). */
static int injected(const dcp_storage *st, int kind, int action, dcp_plugin_err *err) {
  int code = action == A_ENOSPC ? DCP_ENOSPC : DCP_EIO;
  return fail(err, code, "fault storage: injected %s on %s #%llu (rank %d)",
              action == A_ENOSPC ? "ENOSPC" : action == A_SHORT ? "short write" : "EIO",
              kind_names[kind], (unsigned long long)atomic_load(&st->ops[kind]), st->rank);
}

/* After the operation (on name, name2: NULL when none): log it when it
 * succeeded, then the killafter action. */
static int after(const dcp_storage *st, int kind, const char *name, const char *name2,
                 int action, int rc) {
  if (rc == DCP_OK) log_op(st, kind, name, name2);
  if (action == A_KILLAFTER) raise(SIGKILL);
  return rc;
}

/* ---- the power-loss journal ------------------------------------------------ */

/* The power is off: this process stops here, as a machine losing power
 * would, before the operation reaches the disk. */
static void power_off(void) {
  raise(SIGKILL);
  for (;;) pause();
}

/* Any storage call after the cut stops its process. */
static void j_alive(const dcp_storage *st) {
  if (st->js && __atomic_load_n(&st->js->dead, __ATOMIC_SEQ_CST)) power_off();
}

/* The threads of one process (a lease renewer beside the saving thread,
 * two backends) share no flock: flock locks belong to the open file, and
 * a second flock on it by another thread is granted at once. */
static pthread_mutex_t j_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Before a mutating operation: take the journal lock (one total order of
 * the operations of every thread of every process sharing the journal). */
static void j_begin(const dcp_storage *st) {
  if (st->jfd < 0) return;
  pthread_mutex_lock(&j_mutex);
  while (flock(st->jfd, LOCK_EX) != 0 && errno == EINTR) {
  }
  j_alive(st);
}

/* After it: journal it when `record` (it succeeded and changed something),
 * release the lock, and cut the power when it was the cut= operation.
 * Returns the operation's seq (0 when not journaled). */
static uint64_t j_end(dcp_storage *st, bool record, uint32_t type, uint64_t handle,
                      uint64_t offset, const char *name, const char *name2, const void *data,
                      size_t len) {
  if (st->jfd < 0) return 0;
  uint64_t seq = 0;
  if (record) {
    seq = __atomic_add_fetch(&st->js->ops, 1, __ATOMIC_SEQ_CST);
    fcj_rec h = {.type = type, .seq = seq, .handle = handle, .offset = offset, .len = len};
    if (fcj_append(st->jfd, &h, st->root, name, name2, data) != 0) {
      /* a journal that misses an operation would make every replay wrong */
      fprintf(stderr, "fault storage: cannot append to the journal %s: %s\n", st->sp.journal,
              strerror(errno));
      abort();
    }
    if (st->sp.cut && seq >= st->sp.cut) {
      __atomic_store_n(&st->js->dead, 1, __ATOMIC_SEQ_CST);
      note_fired(st, "cut", seq);
      power_off(); /* the lock goes with the process */
    }
  }
  while (flock(st->jfd, LOCK_UN) != 0 && errno == EINTR) {
  }
  pthread_mutex_unlock(&j_mutex);
  return seq;
}

static int journal_open(dcp_storage *st, dcp_plugin_err *err) {
  st->jfd = -1;
  if (!st->sp.journal[0]) return DCP_OK;
  char path[sizeof st->sp.journal + 16];
  snprintf(path, sizeof path, "%s.state", st->sp.journal);
  int jfd = open(st->sp.journal, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  int sfd = jfd < 0 ? -1 : open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  struct stat sb;
  void *map = MAP_FAILED;
  if (sfd >= 0) {
    while (flock(jfd, LOCK_EX) != 0 && errno == EINTR) {
    }
    if (fstat(sfd, &sb) == 0 && (sb.st_size >= (off_t)sizeof(fcj_state) ||
                                 ftruncate(sfd, sizeof(fcj_state)) == 0))
      map = mmap(NULL, sizeof(fcj_state), PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    flock(jfd, LOCK_UN);
  }
  int e = errno;
  if (sfd >= 0) close(sfd);
  if (map == MAP_FAILED) {
    if (jfd >= 0) close(jfd);
    return fail(err, DCP_EIO, "fault storage: journal %s: %s", st->sp.journal, strerror(e));
  }
  st->jfd = jfd;
  st->js = map;
  return DCP_OK;
}

/* ---- backend ---------------------------------------------------------------- */

static void wrap_cfg_free(wrap_cfg *w) {
  free(w->inner_opts);
  free(w->ctl);
}

static void write_probe(dcp_storage *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s.probe.%d", st->ctl, st->rank);
  FILE *f = fopen(path, "w");
  if (!f) return;
  for (int k = 0; k < K_COUNT; k++)
    fprintf(f, "%s=%llu ", kind_names[k], (unsigned long long)atomic_load(&st->ops[k]));
  fprintf(f, "bytes=%llu\n", (unsigned long long)atomic_load(&st->written));
  fclose(f);
}

static void f_close(dcp_storage *st) {
  if (!st) return;
  if (st->sp.probe && st->ctl) write_probe(st);
  if (st->ist) st->inner->close(st->ist);
  if (st->js) munmap(st->js, sizeof *st->js);
  if (st->jfd >= 0) close(st->jfd);
  free(st->ctl);
  free(st);
}

static int open_inner(dcp_storage *st, const dcp_storage_config *cfg, const wrap_cfg *w,
                      dcp_plugin_err *err) {
  if (!(st->inner = load_inner(w->inner)))
    return fail(err, DCP_EINVAL, "fault storage: inner plugin '%s' not found or refused",
                w->inner);
  dcp_storage_config ic = *cfg;
  ic.struct_size = sizeof ic;
  ic.options = w->inner_opts;
  int action = hit(st, K_MOUNT);
  if (action) return injected(st, K_MOUNT, action, err);
  /* journal: the open that creates the root is an operation of its own */
  j_begin(st);
  struct stat sb;
  bool existed = stat(cfg->root, &sb) == 0;
  int rc = st->inner->open(&ic, &st->ist, err);
  j_end(st, rc == DCP_OK && !existed && (cfg->flags & DCP_STORAGE_CREATE), FCJ_MKDIR, 0, 0,
        NULL, NULL, NULL, 0);
  return rc;
}

static int f_open(const dcp_storage_config *cfg, dcp_storage **out, dcp_plugin_err *err) {
  if (!out || !cfg || cfg->struct_size < sizeof *cfg)
    return fail(err, DCP_EINVAL, "fault storage: NULL or old config");
  *out = NULL;
  dcp_storage *st = calloc(1, sizeof *st);
  if (!st) return fail(err, DCP_ENOMEM, "fault storage: out of memory");
  wrap_cfg w = {.inner = "posix"};
  st->sp = (fault_spec){.rank = -1};
  st->rank = cfg->rank;
  st->jfd = -1;
  snprintf(st->root, sizeof st->root, "%s", cfg->root ? cfg->root : "");
  int rc = parse_items(cfg->options, ",", &w, &st->sp, "the options", err);
  if (!rc && w.ctl) rc = read_ctl(w.ctl, &st->sp, err);
  /* an auxiliary handle (the directory lease, the trainer's look at what is
   * committed) passes through: faults, probes, logs and the journal are
   * about the save's and the load's own I/O */
  if (cfg->flags & DCP_STORAGE_AUX) st->sp = (fault_spec){.rank = -1};
  st->ctl = w.ctl, w.ctl = NULL;
  st->armed = st->sp.rank < 0 || st->sp.rank == cfg->rank;
  if (!rc) rc = journal_open(st, err);
  if (!rc) j_alive(st);
  if (!rc) rc = open_inner(st, cfg, &w, err);
  wrap_cfg_free(&w);
  if (rc) {
    st->ist = NULL;
    st->sp.probe = false;
    f_close(st);
    return rc;
  }
  *out = st;
  return DCP_OK;
}

/* ---- files ------------------------------------------------------------------ */

static int f_file_open(dcp_storage *st, const char *name, uint32_t mode, dcp_storage_file **out,
                       dcp_plugin_err *err) {
  j_alive(st);
  int action = hit(st, K_OPEN);
  if (action && action != A_KILLAFTER) return injected(st, K_OPEN, action, err);
  dcp_storage_file *f = calloc(1, sizeof *f);
  if (!f) return fail(err, DCP_ENOMEM, "fault storage: out of memory");
  f->st = st;
  snprintf(f->name, sizeof f->name, "%s", name ? name : "");
  bool w = (mode & DCP_FILE_WRITE) != 0; /* with DCP_FILE_EXCL too: a create */
  if (w) j_begin(st);
  int rc = st->inner->file_open(st->ist, name, mode, &f->inner, err);
  if (w) f->jh = j_end(st, rc == DCP_OK, FCJ_OPENW, 0, 0, name, NULL, NULL, 0);
  const char *how = w ? "w" : "r";
  if (rc) {
    free(f);
    return after(st, K_OPEN, name, how, action, rc);
  }
  *out = f;
  return after(st, K_OPEN, name, how, action, DCP_OK);
}

/* One write of len bytes to the inner file, journaled. */
static int inner_write(dcp_storage_file *f, const void *buf, size_t len, dcp_plugin_err *err) {
  dcp_storage *st = f->st;
  j_begin(st);
  int rc = st->inner->file_write(f->inner, buf, len, err);
  j_end(st, rc == DCP_OK && f->jh, FCJ_WRITE, f->jh, f->pos, f->name, NULL, buf, len);
  if (rc == DCP_OK) f->pos += len;
  return rc;
}

/* Pass len bytes on, unless the kill offset lies within them: then the
 * bytes before it go first and the process dies. */
static int write_through(dcp_storage_file *f, const void *buf, size_t len, dcp_plugin_err *err) {
  dcp_storage *st = f->st;
  uint64_t at = atomic_load(&st->written);
  if (st->armed && st->sp.has_kill && at + len > st->sp.kill_at) {
    size_t head = (size_t)(st->sp.kill_at > at ? st->sp.kill_at - at : 0);
    if (head) inner_write(f, buf, head, err);
    note_fired(st, "kill", st->sp.kill_at);
    raise(SIGKILL);
  }
  int rc = inner_write(f, buf, len, err);
  if (!rc) atomic_fetch_add(&st->written, len);
  return rc;
}

static int f_file_write(dcp_storage_file *f, const void *buf, size_t len, dcp_plugin_err *err) {
  j_alive(f->st);
  int action = hit(f->st, K_WRITE);
  if (action == A_SHORT || action == A_TORN) {
    int rc = write_through(f, buf, len / 2, err);
    if (rc || action == A_TORN) return rc;
  }
  if (action && action != A_KILLAFTER) return injected(f->st, K_WRITE, action, err);
  return after(f->st, K_WRITE, f->name, NULL, action, write_through(f, buf, len, err));
}

/* What a flaky file system hands back instead of the file's bytes: the
 * second half of the buffer zeroed, or overwritten with a stale pattern,
 * or one bit flipped. */
static void mangle(int action, uint8_t *b, size_t len, uint64_t offset) {
  size_t half = len / 2;
  if (action == A_ZERO) memset(b + half, 0, len - half);
  if (action == A_GARBAGE)
    for (size_t i = half; i < len; i++) b[i] = (uint8_t)(0x5a ^ ((offset + i) * 131u >> 3));
  if (action == A_FLIP && len) b[half] ^= 0x10;
}

static int f_file_read(dcp_storage_file *f, void *buf, size_t len, uint64_t offset,
                       dcp_plugin_err *err) {
  dcp_storage *st = f->st;
  j_alive(st);
  int action = hit(st, K_READ);
  if (action == A_SHORT) {
    /* a file that ends early: the ABI's DCP_ECORRUPT */
    if (len / 2) st->inner->file_read(f->inner, buf, len / 2, offset, err);
    return fail(err, DCP_ECORRUPT, "fault storage: injected short read of %s: %zu of %zu bytes "
                "at offset %llu (rank %d)", f->name, len / 2, len, (unsigned long long)offset,
                st->rank);
  }
  if (action == A_ZERO || action == A_GARBAGE || action == A_FLIP) {
    int rc = st->inner->file_read(f->inner, buf, len, offset, err);
    if (rc == DCP_OK) mangle(action, buf, len, offset);
    return after(st, K_READ, f->name, NULL, A_NONE, rc);
  }
  if (action && action != A_KILLAFTER) return injected(st, K_READ, action, err);
  return after(st, K_READ, f->name, NULL, action,
               st->inner->file_read(f->inner, buf, len, offset, err));
}

static int f_file_sync(dcp_storage_file *f, dcp_plugin_err *err) {
  dcp_storage *st = f->st;
  j_alive(st);
  int action = hit(st, K_SYNC);
  if (action && action != A_KILLAFTER) return injected(st, K_SYNC, action, err);
  j_begin(st);
  int rc = st->inner->file_sync(f->inner, err);
  j_end(st, rc == DCP_OK && f->jh && !st->sp.lie_fsync, FCJ_FSYNC, f->jh, 0, f->name, NULL,
        NULL, 0);
  return after(st, K_SYNC, f->name, NULL, action, rc);
}

/* Closes the inner file whatever happens (the contract frees f). */
static int f_file_close(dcp_storage_file *f, dcp_plugin_err *err) {
  dcp_storage *st = f->st;
  j_alive(st);
  int action = hit(st, K_CLOSE);
  dcp_plugin_err ignored;
  int rc = st->inner->file_close(f->inner, action && action != A_KILLAFTER ? &ignored : err);
  char name[sizeof f->name];
  memcpy(name, f->name, sizeof name);
  free(f);
  if (action && action != A_KILLAFTER) return injected(st, K_CLOSE, action, err);
  return after(st, K_CLOSE, name, NULL, action, rc);
}

/* ---- names -------------------------------------------------------------------- */

static int f_file_size(dcp_storage *st, const char *name, uint64_t *size, dcp_plugin_err *err) {
  j_alive(st);
  int action = hit(st, K_SIZE);
  if (action == A_LIE) {
    int rc = st->inner->file_size(st->ist, name, size, err);
    if (rc == DCP_OK) *size = *size ? *size / 2 : 1;
    return after(st, K_SIZE, name, NULL, A_NONE, rc);
  }
  if (action && action != A_KILLAFTER) return injected(st, K_SIZE, action, err);
  return after(st, K_SIZE, name, NULL, action, st->inner->file_size(st->ist, name, size, err));
}

static int f_rename(dcp_storage *st, const char *from, const char *to, dcp_plugin_err *err) {
  j_alive(st);
  int action = hit(st, K_RENAME);
  if (action && action != A_KILLAFTER) return injected(st, K_RENAME, action, err);
  j_begin(st);
  int rc = st->inner->rename(st->ist, from, to, err);
  j_end(st, rc == DCP_OK, FCJ_RENAME, 0, 0, from, to, NULL, 0);
  return after(st, K_RENAME, from, to, action, rc);
}

static int f_remove(dcp_storage *st, const char *name, dcp_plugin_err *err) {
  j_alive(st);
  int action = hit(st, K_REMOVE);
  if (action && action != A_KILLAFTER) return injected(st, K_REMOVE, action, err);
  j_begin(st);
  int rc = st->inner->remove(st->ist, name, err);
  j_end(st, rc == DCP_OK, FCJ_REMOVE, 0, 0, name, NULL, NULL, 0);
  return after(st, K_REMOVE, name, NULL, action, rc);
}

static int f_sync_dir(dcp_storage *st, dcp_plugin_err *err) {
  j_alive(st);
  int action = hit(st, K_SYNCDIR);
  if (action && action != A_KILLAFTER) return injected(st, K_SYNCDIR, action, err);
  j_begin(st);
  int rc = st->inner->sync_dir(st->ist, err);
  j_end(st, rc == DCP_OK && !st->sp.lie_syncdir, FCJ_SYNCDIR, 0, 0, NULL, NULL, NULL, 0);
  return after(st, K_SYNCDIR, NULL, NULL, action, rc);
}

static int f_list(dcp_storage *st, int (*fn)(void *arg, const char *name), void *arg,
                  dcp_plugin_err *err) {
  j_alive(st);
  int action = hit(st, K_LIST);
  if (action && action != A_KILLAFTER) return injected(st, K_LIST, action, err);
  return after(st, K_LIST, NULL, NULL, action, st->inner->list(st->ist, fn, arg, err));
}

static void f_get_stats(const dcp_storage *st, dcp_io_stats *out) {
  st->inner->get_stats(st->ist, out);
}

static const dcp_storage_plugin fault_table = {
    .abi_version = DCP_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(dcp_storage_plugin),
    .name = "fault",
#ifdef DCP_STORAGE_CAP_EXCL
    /* exclusive creates go to the inner plugin (posix and sharedfs have
     * them), so that saves take their directory lease through this one */
    .caps = DCP_STORAGE_CAP_EXCL,
#else
    .caps = 0,
#endif
    .open = f_open,
    .close = f_close,
    .file_open = f_file_open,
    .file_write = f_file_write,
    .file_read = f_file_read,
    .file_sync = f_file_sync,
    .file_close = f_file_close,
    .file_size = f_file_size,
    .rename = f_rename,
    .remove = f_remove,
    .sync_dir = f_sync_dir,
    .list = f_list,
    .get_stats = f_get_stats,
};

DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_STORAGE ? &fault_table : NULL;
}
