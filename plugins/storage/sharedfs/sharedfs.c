/*
 * sharedfs.c — the "sharedfs" storage plugin, for NFS/Lustre-like shared
 * file systems written by up to 10^4 ranks at once.
 *
 * What differs from posix (the rest is the shared engine in
 * plugins/storage/common):
 *  - fan-out: a file `name` lives in root/dNNN/name, NNN = a stable hash of
 *    the name mod 256, so no directory holds 10^4 entries (a single huge
 *    directory serialises creates on one metadata server lock). Any rank
 *    finds any file from its name alone. Subdirectories are made on first
 *    use (mkdir races between ranks are fine: EEXIST).
 *  - O_DIRECT by default (direct=0 turns it off): client page caches of
 *    TB-sized checkpoints only evict the training job's memory.
 *  - EINTR, EAGAIN and ESTALE are retried with exponential backoff (5
 *    retries, 1 ms doubling to 16 ms; retries=N changes the count); an
 *    ESTALE file handle is replaced by a fresh open of the name.
 *  - file_size stats through a fresh open (close-to-open consistency), and
 *    a READ open is always a new open(2).
 *  - sync_dir fsyncs every subdirectory touched since the last sync_dir,
 *    then root.
 *  - DCP_FILE_EXCL (DCP_STORAGE_CAP_EXCL) is an O_EXCL create in the
 *    name's subdirectory: atomic between clients on NFSv3+ (the client
 *    sends an EXCLUSIVE create) and Lustre. NFSv2 has no exclusive create
 *    at all; the plugin cannot tell, and the lease is not safe there.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/fsio.h"

#define SFS_FANOUT 256u

struct dcp_storage {
  fsio_core core;                 /* first: fsio_core_of() converts the pointer */
  _Atomic int subfd[SFS_FANOUT];  /* open subdirectory fds, -1 until first use */
  atomic_bool touched[SFS_FANOUT]; /* changed since the last sync_dir */
};

/* The subdirectory of a name: FNV-1a (32 bit), stable across hosts,
 * builds and versions — it is part of the on-disk layout. */
static unsigned sfs_bucket(const char *name) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) h = (h ^ *p) * 16777619u;
  return h % SFS_FANOUT;
}

/* The storage around a core (its first member). */
static dcp_storage *sfs_of(fsio_core *c) { return (dcp_storage *)(void *)c; }

/* "dNNN" for bucket b. */
static void sfs_subname(unsigned b, char out[8]) { snprintf(out, 8, "d%03u", b); }

/* Fail with errno e for an operation on subdirectory sub; a planted
 * symlink in its place (refused by O_NOFOLLOW) is named as such. */
static int sfs_fail_sub(fsio_core *c, dcp_plugin_err *err, int e, const char *op,
                        const char *sub) {
  if (fsio_is_symlink_at(c->rootfd, sub))
    return dcp_plugin_fail(err, DCP_EIO,
                           "%s %s/%s: is a symbolic link; libdcp never follows links "
                           "inside a checkpoint directory",
                           op, c->root, sub);
  return dcp_plugin_fail(err, fsio_errno_status(e), "%s %s/%s: %s", op, c->root, sub, strerror(e));
}

/* mkdir the subdirectory; another rank winning the race is fine. */
static int sfs_mkdir(fsio_core *c, const char *sub, dcp_plugin_err *err) {
  unsigned attempt = 0;
  int e;
  do e = mkdirat(c->rootfd, sub, 0777) && errno != EEXIST ? errno : 0;
  while (e && fsio_retry(c, e, &attempt));
  return e ? sfs_fail_sub(c, err, e, "mkdir", sub) : DCP_OK;
}

/* Open bucket b's directory fd, creating the directory when `create`.
 * ENOENT without create is left to the caller (*fd = -1, DCP_OK). */
static int sfs_open_sub(fsio_core *c, unsigned b, int create, int *fd, dcp_plugin_err *err) {
  char sub[8];
  sfs_subname(b, sub);
  int rc = create ? sfs_mkdir(c, sub, err) : DCP_OK;
  unsigned attempt = 0;
  int e = 0;
  while (!rc) {
    *fd = openat(c->rootfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    e = *fd < 0 ? errno : 0;
    if (!e || !fsio_retry(c, e, &attempt)) break;
  }
  if (rc || !e) return rc;
  *fd = -1;
  if (e == ENOENT && !create) return DCP_OK;
  return sfs_fail_sub(c, err, e, "open directory", sub);
}

/* The cached fd of bucket b, opened (and with create, made) on first use.
 * Lock-free: racing openers publish with a CAS and the loser closes its fd. */
static int sfs_sub_fd(fsio_core *c, unsigned b, int create, int *fd, dcp_plugin_err *err) {
  dcp_storage *st = sfs_of(c);
  *fd = atomic_load(&st->subfd[b]);
  if (*fd >= 0) return DCP_OK;
  int mine, rc = sfs_open_sub(c, b, create, &mine, err);
  if (rc || mine < 0) return rc;
  int expect = -1;
  if (atomic_compare_exchange_strong(&st->subfd[b], &expect, mine)) {
    *fd = mine;
  } else {
    close(mine);
    *fd = expect;
  }
  return DCP_OK;
}

/* fsio_ops.dir_of: a missing subdirectory means a missing file. */
static int sfs_dir_of(fsio_core *c, const char *name, int create, int *dirfd,
                      dcp_plugin_err *err) {
  int rc = sfs_sub_fd(c, sfs_bucket(name), create, dirfd, err);
  if (rc || *dirfd >= 0) return rc;
  char path[FSIO_PATH_MAX];
  c->ops->path_of(c, name, path, sizeof path);
  return dcp_plugin_fail(err, DCP_ENOTFOUND, "%s: %s", path, strerror(ENOENT));
}

/* fsio_ops.touch: remember the subdirectory for the next sync_dir. */
static void sfs_touch(fsio_core *c, const char *name) {
  atomic_store(&sfs_of(c)->touched[sfs_bucket(name)], true);
}

/* fsio_ops.path_of: root/dNNN/name. */
static void sfs_path_of(const fsio_core *c, const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/d%03u/%s", c->root, sfs_bucket(name), name);
}

static const fsio_ops sfs_ops = {sfs_dir_of, sfs_touch, sfs_path_of};

/* 5 retries sleeping 1, 2, 4, 8, 16 ms; shared-FS errors; close-to-open. */
static const fsio_policy sfs_policy = {5, 1000, 16000, 1, 1};

/* No subdirectory opened or touched yet. */
static void sfs_init(dcp_storage *st) {
  for (unsigned b = 0; b < SFS_FANOUT; b++) {
    atomic_init(&st->subfd[b], -1);
    atomic_init(&st->touched[b], false);
  }
}

/* See dcp_plugin.h. O_DIRECT unless direct=0. */
static int sfs_open(const dcp_storage_config *cfg, dcp_storage **out, dcp_plugin_err *err) {
  return fsio_backend_open(sizeof(dcp_storage), sfs_init, &sfs_ops, cfg, &sfs_policy, 1, out,
                           err);
}

/* See dcp_plugin.h. */
static void sfs_close(dcp_storage *st) {
  if (!st) return;
  for (unsigned b = 0; b < SFS_FANOUT; b++) {
    int fd = atomic_load(&st->subfd[b]);
    if (fd >= 0) close(fd);
  }
  fsio_core_close(&st->core);
  free(st);
}

/* See dcp_plugin.h. A touched flag is cleared before its fsync, so a touch
 * racing with us is never lost, and set again when the fsync fails. */
static int sfs_sync_dir(dcp_storage *st, dcp_plugin_err *err) {
  fsio_core *c = &st->core;
  for (unsigned b = 0; b < SFS_FANOUT; b++) {
    if (!atomic_exchange(&st->touched[b], false)) continue;
    char path[FSIO_PATH_MAX];
    snprintf(path, sizeof path, "%s/d%03u", c->root, b);
    int rc = fsio_fsync_dir(c, atomic_load(&st->subfd[b]), path, err);
    if (rc) {
      atomic_store(&st->touched[b], true);
      return rc;
    }
  }
  int rc = fsio_fsync_dir(c, c->rootfd, NULL, err);
  if (!rc) fsio_count(&c->stats.sync_ops, 1);
  return rc;
}

/* list's filter: only names that hash to the directory they are in
 * (anything else could not be opened through the API). */
static int sfs_in_bucket(const char *name, void *actx) {
  return sfs_bucket(name) == *(const unsigned *)actx;
}

/* See dcp_plugin.h: logical names from every existing subdirectory. */
static int sfs_list(dcp_storage *st, int (*fn)(void *arg, const char *name), void *arg,
                    dcp_plugin_err *err) {
  fsio_core *c = &st->core;
  if (!fn) return dcp_plugin_fail(err, DCP_EINVAL, "list: NULL callback");
  for (unsigned b = 0; b < SFS_FANOUT; b++) {
    int fd, rc = sfs_sub_fd(c, b, 0, &fd, err);
    if (!rc && fd >= 0) rc = fsio_list_dir(c, fd, sfs_in_bucket, &b, fn, arg, err);
    if (rc) return rc;
  }
  fsio_count(&c->stats.meta_ops, 1);
  return DCP_OK;
}

static const dcp_storage_plugin sfs_table =
    FSIO_TABLE("sharedfs",
               DCP_STORAGE_CAP_DIRECT | DCP_STORAGE_CAP_SHARED_FS | DCP_STORAGE_CAP_EXCL,
               sfs_open, sfs_close, sfs_sync_dir, sfs_list);

FSIO_ENTRY(sfs_table)
