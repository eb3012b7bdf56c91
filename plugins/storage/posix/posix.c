/*
 * posix.c — the "posix" storage plugin: a checkpoint is one flat directory
 * of files on a local (or any POSIX) file system.
 *
 * Everything but the directory layout lives in the shared engine
 * (plugins/storage/common): strict names, openat under a directory fd of
 * root with O_NOFOLLOW, pread/pwrite loops, optional O_DIRECT with aligned
 * staging, exclusive creation (DCP_FILE_EXCL), errno mapping and atomic
 * counters. Options: direct=0|1,
 * buffer_mib=N (1..1024, O_DIRECT staging size), retries=N (EINTR), and the
 * test hook inject=SITE:ERRNO:COUNT.
 */
#define _GNU_SOURCE

#include <stdio.h>
#include <stdlib.h>

#include "../common/fsio.h"

struct dcp_storage {
  fsio_core core; /* first: fsio_core_of() converts the pointer */
};

/* Every name lives directly in root. */
static int posix_dir_of(fsio_core *c, const char *name, int create, int *dirfd,
                        dcp_plugin_err *err) {
  (void)name, (void)create, (void)err;
  *dirfd = c->rootfd;
  return DCP_OK;
}

/* root/name, for messages. */
static void posix_path_of(const fsio_core *c, const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", c->root, name);
}

static const fsio_ops posix_ops = {posix_dir_of, NULL, posix_path_of};

/* Local file systems: only EINTR is transient, retried at once. */
static const fsio_policy posix_policy = {16, 0, 0, 0, 0};

/* See dcp_plugin.h. O_DIRECT only when asked (flag or direct=1). */
static int posix_open(const dcp_storage_config *cfg, dcp_storage **out, dcp_plugin_err *err) {
  return fsio_backend_open(sizeof(dcp_storage), NULL, &posix_ops, cfg, &posix_policy, 0, out,
                           err);
}

/* See dcp_plugin.h. */
static void posix_close(dcp_storage *st) {
  if (!st) return;
  fsio_core_close(&st->core);
  free(st);
}

/* See dcp_plugin.h: one directory, one fsync. */
static int posix_sync_dir(dcp_storage *st, dcp_plugin_err *err) {
  int rc = fsio_fsync_dir(&st->core, st->core.rootfd, NULL, err);
  if (!rc) fsio_count(&st->core.stats.sync_ops, 1);
  return rc;
}

/* See dcp_plugin.h: the regular files of root with valid names. */
static int posix_list(dcp_storage *st, int (*fn)(void *arg, const char *name), void *arg,
                      dcp_plugin_err *err) {
  if (!fn) return dcp_plugin_fail(err, DCP_EINVAL, "list: NULL callback");
  int rc = fsio_list_dir(&st->core, st->core.rootfd, NULL, NULL, fn, arg, err);
  if (rc >= 0) fsio_count(&st->core.stats.meta_ops, 1);
  return rc;
}

static const dcp_storage_plugin posix_table =
    FSIO_TABLE("posix", DCP_STORAGE_CAP_DIRECT | DCP_STORAGE_CAP_EXCL, posix_open,
               posix_close, posix_sync_dir, posix_list);

FSIO_ENTRY(posix_table)
