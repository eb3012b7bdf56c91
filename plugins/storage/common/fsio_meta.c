/*
 * fsio_meta.c — name-level operations of the shared file-system engine:
 * size, atomic rename, remove.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"

/* stat the name without following a symlink, retrying transients. */
static int stat_at(fsio_core *c, int dirfd, const char *name, struct stat *sb,
                   dcp_plugin_err *err) {
  unsigned attempt = 0;
  int e;
  do e = fstatat(dirfd, name, sb, AT_SYMLINK_NOFOLLOW) ? errno : 0;
  while (e && fsio_retry(c, e, &attempt));
  if (e) return fsio_fail_errno(c, err, e, "stat", name);
  if (S_ISREG(sb->st_mode)) return DCP_OK;
  char path[FSIO_PATH_MAX];
  c->ops->path_of(c, name, path, sizeof path);
  if (S_ISLNK(sb->st_mode))
    return dcp_plugin_fail(err, DCP_EIO,
                           "stat %s: is a symbolic link; libdcp never follows links "
                           "inside a checkpoint directory",
                           path);
  return dcp_plugin_fail(err, DCP_EIO, "stat %s: not a regular file", path);
}

/* stat through a fresh open: on NFS an open revalidates the attributes
 * (close-to-open), where a bare stat may answer from a stale cache. */
static int stat_open(fsio_core *c, int dirfd, const char *name, struct stat *sb,
                     dcp_plugin_err *err) {
  int fd, direct = 0;
  int rc = fsio_open_at(c, dirfd, name, O_RDONLY, &direct, &fd, err);
  if (rc) return rc;
  int e = fstat(fd, sb) ? errno : 0;
  close(fd);
  return e ? fsio_fail_errno(c, err, e, "stat", name) : DCP_OK;
}

/* See dcp_plugin.h. */
int fsio_file_size(dcp_storage *st, const char *name, uint64_t *size, dcp_plugin_err *err) {
  fsio_core *c = fsio_core_of(st);
  int rc = fsio_check_name(name, err);
  if (rc) return rc;
  if (!size) return dcp_plugin_fail(err, DCP_EINVAL, "file_size: NULL size");
  int dirfd;
  struct stat sb;
  rc = c->ops->dir_of(c, name, 0, &dirfd, err);
  if (!rc)
    rc = c->policy.close_to_open ? stat_open(c, dirfd, name, &sb, err)
                                 : stat_at(c, dirfd, name, &sb, err);
  if (rc) return rc;
  *size = (uint64_t)sb.st_size;
  fsio_count(&c->stats.meta_ops, 1);
  return DCP_OK;
}

/* 1 when name exists under dirfd. */
static int exists_at(int dirfd, const char *name) {
  struct stat sb;
  return fstatat(dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

/* See dcp_plugin.h. renameat(2) replaces `to` atomically, also between two
 * directories of one file system (sharedfs' subdirectories). On NFS a
 * rename is not idempotent: when a retried attempt finds `from` gone and
 * `to` present, the earlier attempt did reach the server and succeeded. */
int fsio_rename(dcp_storage *st, const char *from, const char *to, dcp_plugin_err *err) {
  fsio_core *c = fsio_core_of(st);
  int rc = fsio_check_name(from, err);
  if (!rc) rc = fsio_check_name(to, err);
  int dfrom, dto;
  if (!rc) rc = c->ops->dir_of(c, from, 0, &dfrom, err);
  if (!rc) rc = c->ops->dir_of(c, to, 1, &dto, err);
  if (rc) return rc;
  unsigned attempt = 0;
  int e;
  do {
    e = renameat(dfrom, from, dto, to) ? errno : 0;
    if (e == ENOENT && attempt > 0 && exists_at(dto, to)) e = 0;
  } while (e && fsio_retry(c, e, &attempt));
  if (e) {
    char pf[FSIO_PATH_MAX], pt[FSIO_PATH_MAX];
    c->ops->path_of(c, from, pf, sizeof pf);
    c->ops->path_of(c, to, pt, sizeof pt);
    return dcp_plugin_fail(err, fsio_errno_status(e), "rename %s to %s: %s", pf, pt, strerror(e));
  }
  if (c->ops->touch) c->ops->touch(c, from), c->ops->touch(c, to);
  fsio_count(&c->stats.meta_ops, 1);
  return DCP_OK;
}

/* See dcp_plugin.h. unlinkat removes a symlink itself, never its target;
 * a directory is refused (EISDIR → DCP_EIO). As with rename, ENOENT on a
 * retry means the earlier attempt removed it. */
int fsio_remove(dcp_storage *st, const char *name, dcp_plugin_err *err) {
  fsio_core *c = fsio_core_of(st);
  int rc = fsio_check_name(name, err);
  int dirfd;
  if (!rc) rc = c->ops->dir_of(c, name, 0, &dirfd, err);
  if (rc) return rc;
  unsigned attempt = 0;
  int e;
  do {
    e = unlinkat(dirfd, name, 0) ? errno : 0;
    if (e == ENOENT && attempt > 0) e = 0;
  } while (e && fsio_retry(c, e, &attempt));
  if (e) return fsio_fail_errno(c, err, e, "remove", name);
  if (c->ops->touch) c->ops->touch(c, name);
  fsio_count(&c->stats.meta_ops, 1);
  return DCP_OK;
}
