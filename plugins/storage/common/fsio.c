/*
 * fsio.c — backend lifetime, option parsing, names, errors and retries of
 * the shared file-system engine (see fsio.h).
 */
#define _GNU_SOURCE /* O_DIRECT, DT_REG */

#include "fsio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- messages and names -------------------------------------------------- */

/* Messages: dcp_plugin_fail (dcp_plugin.h) formats a reason into err and
 * returns the code; fsio_fail_errno below adds the path and errno text. */

/* The brief's mapping: a full device or quota is ENOSPC (the runtime may
 * react to it), a missing entry is ENOTFOUND, everything else is EIO. */
int fsio_errno_status(int e) {
  switch (e) {
    case ENOSPC:
    case EDQUOT:
      return DCP_ENOSPC;
    case ENOENT:
      return DCP_ENOTFOUND;
    default:
      return DCP_EIO;
  }
}

/* Every errno failure names the operation, the path and the system's text,
 * so a message alone is enough to find the culprit on a 10^4-rank job.
 * strerror is thread-safe in glibc for valid codes (static strings). */
int fsio_fail_errno(const fsio_core *c, dcp_plugin_err *err, int e, const char *op,
                    const char *name) {
  char path[FSIO_PATH_MAX];
  if (name)
    c->ops->path_of(c, name, path, sizeof path);
  else
    snprintf(path, sizeof path, "%s", c->root ? c->root : "(root)");
  return dcp_plugin_fail(err, fsio_errno_status(e), "%s %s: %s", op, path, strerror(e));
}

/* Only the library's own alphabet: no '/', no NUL tricks, no dot names, so
 * a valid name is always one component directly under its directory. */
int fsio_name_ok(const char *name) {
  if (!name) return 0;
  size_t n = strnlen(name, FSIO_NAME_MAX + 1);
  if (n == 0 || n > FSIO_NAME_MAX) return 0;
  if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)name[i];
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '_' || ch == '-';
    if (!ok) return 0;
  }
  return 1;
}

/* Reject an invalid name with DCP_ENAME; the name is shown only when it is
 * printable and short, since it may be anything. */
int fsio_check_name(const char *name, dcp_plugin_err *err) {
  if (fsio_name_ok(name)) return DCP_OK;
  if (!name) return dcp_plugin_fail(err, DCP_ENAME, "invalid file name: NULL");
  size_t n = strnlen(name, FSIO_NAME_MAX + 1);
  return dcp_plugin_fail(err, DCP_ENAME,
                         "invalid file name (%zu%s bytes; allowed: 1..255 of [A-Za-z0-9._-], "
                         "not \".\" or \"..\")",
                         n, n > FSIO_NAME_MAX ? "+" : "");
}

/* See fsio.h. */
int fsio_is_symlink_at(int dirfd, const char *name) {
  struct stat sb;
  return fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(sb.st_mode);
}

/* ---- retries, injection, counters ---------------------------------------- */

/* Relaxed is enough: counters are only summed, never used to order memory. */
void fsio_count(_Atomic uint64_t *ctr, uint64_t n) {
  atomic_fetch_add_explicit(ctr, n, memory_order_relaxed);
}

/* EINTR is always worth another try; on shared file systems EAGAIN (server
 * busy, lock contention) and ESTALE (a handle outlived its file's cached
 * identity) are too, with exponential backoff so 10^4 clients do not hammer
 * a struggling server in lock step. */
int fsio_retry(fsio_core *c, int e, unsigned *attempt) {
  int transient = e == EINTR;
  if (c->policy.shared_fs) transient |= e == EAGAIN || e == EWOULDBLOCK || e == ESTALE;
  if (!transient || *attempt >= c->policy.max_retries) return 0;
  uint64_t us = (uint64_t)c->policy.backoff_us << (*attempt < 20 ? *attempt : 20);
  if (us > c->policy.backoff_max_us) us = c->policy.backoff_max_us;
  if (us > 0) {
    struct timespec ts = {(time_t)(us / 1000000u), (long)(us % 1000000u) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  (*attempt)++;
  fsio_count(&c->stats.retries, 1);
  return 1;
}

/* Consume one injected failure at this site, if any are left. */
int fsio_inject(fsio_core *c, int site) {
  if (c->fault.site != site) return 0;
  int left = atomic_load(&c->fault.left);
  while (left > 0) {
    if (atomic_compare_exchange_weak(&c->fault.left, &left, left - 1)) return c->fault.err;
  }
  return 0;
}

/* ---- options -------------------------------------------------------------- */

/* A strict decimal: digits only, no sign or blanks, within [lo, hi]. */
static int parse_uint(const char *s, size_t n, uint64_t lo, uint64_t hi, uint64_t *out) {
  if (n == 0 || n > 19) return 0;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return 0;
    v = v * 10u + (uint64_t)(s[i] - '0');
  }
  if (v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* errno names accepted by inject=. */
static int errno_by_name(const char *s, size_t n) {
  static const struct {
    const char *name;
    int e;
  } tab[] = {{"eintr", EINTR},   {"eagain", EAGAIN}, {"estale", ESTALE}, {"einval", EINVAL},
             {"enospc", ENOSPC}, {"edquot", EDQUOT}, {"eio", EIO},       {"enoent", ENOENT}};
  for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
    if (strlen(tab[i].name) == n && memcmp(tab[i].name, s, n) == 0) return tab[i].e;
  return 0;
}

/* inject=SITE:ERRNO:COUNT — a test hook: the next COUNT system calls at
 * SITE (open: file opens; io: reads, writes, fsyncs) fail with ERRNO. */
static int parse_inject(fsio_core *c, const char *v, size_t n) {
  const char *p1 = memchr(v, ':', n);
  const char *p2 = p1 ? memchr(p1 + 1, ':', n - (size_t)(p1 + 1 - v)) : NULL;
  if (!p2) return 0;
  size_t sn = (size_t)(p1 - v), en = (size_t)(p2 - p1 - 1), cn = n - (size_t)(p2 + 1 - v);
  int site = sn == 4 && memcmp(v, "open", 4) == 0 ? FSIO_SITE_OPEN
             : sn == 2 && memcmp(v, "io", 2) == 0 ? FSIO_SITE_IO
                                                  : 0;
  int e = errno_by_name(p1 + 1, en);
  uint64_t count;
  if (!site || !e || !parse_uint(p2 + 1, cn, 0, 1000000, &count)) return 0;
  c->fault.site = site;
  c->fault.err = e;
  atomic_store(&c->fault.left, (int)count);
  return 1;
}

/* Apply one key=value; 0 for a bad value, -1 for an unknown key. */
static int apply_option(fsio_core *c, const char *k, size_t kn, const char *v, size_t vn) {
  uint64_t x;
#define KEY_IS(lit) (kn == sizeof(lit) - 1 && memcmp(k, lit, kn) == 0)
  if (KEY_IS("direct")) {
    if (!parse_uint(v, vn, 0, 1, &x)) return 0;
    c->direct = (int)x;
  } else if (KEY_IS("buffer_mib")) {
    if (!parse_uint(v, vn, 1, 1024, &x)) return 0;
    c->stage_size = (size_t)x << 20;
  } else if (KEY_IS("retries")) {
    if (!parse_uint(v, vn, 0, 30, &x)) return 0;
    c->policy.max_retries = (unsigned)x;
  } else if (KEY_IS("inject")) {
    return parse_inject(c, v, vn);
  } else {
    return -1;
  }
#undef KEY_IS
  return 1;
}

/* "key=value,key=value": every item must be a known key with a valid
 * value; empty items, missing '=' or unknown keys are DCP_EINVAL naming
 * the offending item, since a silently ignored typo ("direkt=1") would
 * change durability or speed without anyone noticing. */
static int parse_options(fsio_core *c, const char *opts, dcp_plugin_err *err) {
  if (!opts || !*opts) return DCP_OK;
  const char *p = opts;
  for (;;) {
    size_t n = strcspn(p, ",");
    const char *eq = memchr(p, '=', n);
    if (!eq || eq == p)
      return dcp_plugin_fail(err, DCP_EINVAL, "storage option '%.*s' is not key=value", (int)n, p);
    size_t kn = (size_t)(eq - p);
    int r = apply_option(c, p, kn, eq + 1, n - kn - 1);
    if (r < 0)
      return dcp_plugin_fail(err, DCP_EINVAL,
                             "unknown storage option '%.*s' (known: direct, buffer_mib, retries, "
                             "inject)",
                             (int)kn, p);
    if (r == 0)
      return dcp_plugin_fail(err, DCP_EINVAL, "bad value in storage option '%.*s'", (int)n, p);
    if (p[n] == '\0') return DCP_OK;
    p += n + 1;
  }
}

/* ---- backend lifetime ------------------------------------------------------ */

/* Create root (one level) when asked; an existing one is fine. */
/* Sync the directory holding path (its parent), so that a new entry in it
 * survives a power cut: a checkpoint directory made here would otherwise
 * vanish with every checkpoint committed inside it. */
static int sync_parent(fsio_core *c, const char *path, dcp_plugin_err *err) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;       /* trailing slashes */
  while (n > 0 && path[n - 1] != '/') n--;       /* the last component */
  char *parent = n ? strndup(path, n) : strdup(".");
  if (!parent) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int e = fd < 0 || fsync(fd) != 0 ? errno : 0;
  if (fd >= 0) close(fd);
  free(parent);
  /* some file systems refuse fsync on a directory: that is not a failure */
  return e && e != EINVAL && e != EROFS ? fsio_fail_errno(c, err, e, "sync parent directory", NULL)
                                        : DCP_OK;
}

static int make_root(fsio_core *c, const char *root, dcp_plugin_err *err) {
  if (mkdir(root, 0777) == 0) return sync_parent(c, root, err);
  if (errno == EEXIST) return DCP_OK;
  return fsio_fail_errno(c, err, errno, "mkdir", NULL);
}

/* Open root as a directory fd; every later name is resolved under it with
 * *at() calls, so a renamed or replaced path cannot redirect us. */
static int open_root(fsio_core *c, const char *root, dcp_plugin_err *err) {
  unsigned attempt = 0;
  int e;
  do {
    c->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    e = c->rootfd < 0 ? errno : 0;
  } while (e && fsio_retry(c, e, &attempt));
  if (!e) return DCP_OK;
  if (e == ENOENT)
    return dcp_plugin_fail(err, DCP_ENOTFOUND, "checkpoint directory %s does not exist", root);
  return fsio_fail_errno(c, err, e, "open directory", NULL);
}

/* See fsio.h. */
int fsio_core_open(fsio_core *c, const fsio_ops *ops, const dcp_storage_config *cfg,
                   const fsio_policy *pol, int direct_default, dcp_plugin_err *err) {
  c->ops = ops;
  c->rootfd = -1;
  c->root = NULL;
  if (!cfg || !DCP_HAS_FIELD(cfg, dcp_storage_config, flags) || !cfg->root || !*cfg->root)
    return dcp_plugin_fail(err, DCP_EINVAL, "storage config: NULL, too small or without root");
  c->policy = *pol;
  c->direct = direct_default || (cfg->flags & DCP_STORAGE_DIRECT) != 0;
  c->stage_size = FSIO_STAGE_DEFAULT;
  const char *opts = DCP_HAS_FIELD(cfg, dcp_storage_config, options) ? cfg->options : NULL;
  int rc = parse_options(c, opts, err);
  if (rc) return rc;
  c->root = strdup(cfg->root);
  if (!c->root) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  if (cfg->flags & DCP_STORAGE_CREATE) rc = make_root(c, cfg->root, err);
  if (!rc) rc = open_root(c, cfg->root, err);
  if (rc) fsio_core_close(c);
  return rc;
}

/* See fsio.h. */
int fsio_backend_open(size_t size, void (*init)(dcp_storage *st), const fsio_ops *ops,
                      const dcp_storage_config *cfg, const fsio_policy *pol,
                      int direct_default, dcp_storage **out, dcp_plugin_err *err) {
  if (!out) return dcp_plugin_fail(err, DCP_EINVAL, "open: NULL out");
  *out = NULL;
  dcp_storage *st = calloc(1, size);
  if (!st) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  if (init) init(st);
  int rc = fsio_core_open(fsio_core_of(st), ops, cfg, pol, direct_default, err);
  if (rc) {
    free(st);
    return rc;
  }
  *out = st;
  return DCP_OK;
}

/* See fsio.h. */
void fsio_core_close(fsio_core *c) {
  if (c->rootfd >= 0) close(c->rootfd);
  c->rootfd = -1;
  free(c->root);
  c->root = NULL;
}

/* See fsio.h: the core is the first member of every plugin's dcp_storage. */
fsio_core *fsio_core_of(dcp_storage *st) { return (fsio_core *)(void *)st; }

/* ---- directories ----------------------------------------------------------- */

/* See fsio.h. */
int fsio_fsync_dir(fsio_core *c, int dirfd, const char *path, dcp_plugin_err *err) {
  unsigned attempt = 0;
  int e;
  do {
    e = fsio_inject(c, FSIO_SITE_IO);
    if (!e) e = fsync(dirfd) ? errno : 0;
  } while (e && fsio_retry(c, e, &attempt));
  if (!e) return DCP_OK;
  return dcp_plugin_fail(err, fsio_errno_status(e), "fsync directory %s: %s", path ? path : c->root,
                         strerror(e));
}

/* Regular files only: a symlink, directory or fifo planted in the
 * checkpoint is not one of ours. DT_UNKNOWN (some NFS servers, XFS
 * without ftype) needs a stat that does not follow links. */
static int is_regular(int dirfd, const struct dirent *de) {
  if (de->d_type == DT_REG) return 1;
  if (de->d_type != DT_UNKNOWN) return 0;
  struct stat sb;
  return fstatat(dirfd, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode);
}

/* Walk one open directory stream, calling fn for the entries we keep. */
static int walk_dir(DIR *d, int (*accept)(const char *name, void *actx), void *actx,
                    int (*fn)(void *arg, const char *name), void *arg, int *sys_err) {
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      *sys_err = errno;
      return 0;
    }
    if (!fsio_name_ok(de->d_name) || !is_regular(dirfd(d), de)) continue;
    if (accept && !accept(de->d_name, actx)) continue;
    int r = fn(arg, de->d_name);
    if (r) return r;
  }
}

/* See fsio.h. The directory is reopened through "." so the stream has its
 * own file offset and never disturbs (or is disturbed by) the cached fd. */
int fsio_list_dir(fsio_core *c, int dirfd, int (*accept)(const char *name, void *actx),
                  void *actx, int (*fn)(void *arg, const char *name), void *arg,
                  dcp_plugin_err *err) {
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return fsio_fail_errno(c, err, errno, "open directory", NULL);
  DIR *d = fdopendir(fd);
  if (!d) {
    int e = errno;
    close(fd);
    return fsio_fail_errno(c, err, e, "opendir", NULL);
  }
  int sys_err = 0;
  int r = walk_dir(d, accept, actx, fn, arg, &sys_err);
  closedir(d);
  if (!r && sys_err) return fsio_fail_errno(c, err, sys_err, "readdir", NULL);
  return r;
}

/* ---- counters and diagnostics --------------------------------------------- */

/* Snapshot of the counters into the fields out's struct_size has (each one
 * atomic; the set is not one snapshot). */
void fsio_get_stats2(const dcp_storage *st, dcp_io_stats2 *out) {
  const fsio_core *c = (const fsio_core *)(const void *)st;
  fsio_stats *s = (fsio_stats *)&c->stats; /* atomic_load takes non-const in C11 */
#define FSIO_STAT(f) \
  if (DCP_HAS_FIELD(out, dcp_io_stats2, f)) out->f = atomic_load(&s->f)
  FSIO_STAT(bytes_written);
  FSIO_STAT(write_ops);
  FSIO_STAT(bytes_read);
  FSIO_STAT(read_ops);
  FSIO_STAT(sync_ops);
  FSIO_STAT(meta_ops);
  FSIO_STAT(retries);
#undef FSIO_STAT
}

/* The frozen version-1 counters, from the same snapshot code. */
void fsio_get_stats(const dcp_storage *st, dcp_io_stats *out) {
  dcp_io_stats2 s2 = {.struct_size = sizeof s2};
  fsio_get_stats2(st, &s2);
  *out = (dcp_io_stats){s2.bytes_written, s2.write_ops, s2.bytes_read, s2.read_ops,
                        s2.sync_ops,      s2.meta_ops,  s2.retries};
}

/* How often O_DIRECT was refused and buffered I/O used instead. */
static uint64_t diag_direct_fallbacks(const dcp_storage *st) {
  const fsio_core *c = (const fsio_core *)(const void *)st;
  return atomic_load((_Atomic uint64_t *)&c->stats.direct_fallbacks);
}

/* How often an fd was replaced by a fresh open after ESTALE. */
static uint64_t diag_reopens(const dcp_storage *st) {
  const fsio_core *c = (const fsio_core *)(const void *)st;
  return atomic_load((_Atomic uint64_t *)&c->stats.reopens);
}

const fsio_diag fsio_diag_table = {2, diag_direct_fallbacks, fsio_diag_file_is_direct,
                                   diag_reopens, fsio_diag_writeback_started};
