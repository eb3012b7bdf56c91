/* remove.c — deleting one step directory (steps.h, dcpi_step_delete).
 *
 * The order is what makes a crash harmless: the step's lease first (no
 * save may be writing it), then its commit markers (.metadata and the
 * parts of an uncoordinated save) and a sync of the directory — from here
 * on the step is incomplete and never loaded —, then every other file, the
 * lease, the directory itself and a sync of the root. Everything after the
 * lease happens under a directory handle opened with O_NOFOLLOW, relative
 * to it, never following a link: a step replaced by a link meanwhile fails
 * the deletion instead of reaching outside the root.
 *
 * DCP_MANAGER_DELETE_DELAY_MS (environment, tests only) sleeps that long
 * between the un-commit and the removal of the files, so that the crash
 * trials can kill a deletion in the middle. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/ctx.h"
#include "manager/steps.h"
#include "runtime/files.h"
#include "runtime/lease.h"
#include "runtime/rt.h"

/* Remove every entry of the directory fd (recursively, never following a
 * link; depth bounded), except `keep` when non-NULL. Closes fd. */
static dcp_status empty_dir(int fd, const char *keep, int depth, const char *what,
                            dcpi_err *err) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return dcpi_fail(err, DCP_EIO, "cannot list %s: %s", what, strerror(errno));
  }
  rewinddir(d); /* fd may be a dup of a handle already read to its end */
  dcp_status rc = DCP_OK;
  struct dirent *de;
  while ((de = readdir(d))) {
    const char *n = de->d_name;
    if (!strcmp(n, ".") || !strcmp(n, "..") || (keep && !strcmp(n, keep))) continue;
    struct stat sb;
    if (fstatat(dirfd(d), n, &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(sb.st_mode)) {
      if (depth >= 4) {
        if (!rc) rc = dcpi_fail(err, DCP_EIO, "%s nests directories too deep to remove", what);
        continue;
      }
      int sub = openat(dirfd(d), n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) {
        if (!rc) rc = dcpi_fail(err, DCP_EIO, "cannot open %s/%s: %s", what, n, strerror(errno));
        continue;
      }
      dcp_status t = empty_dir(sub, NULL, depth + 1, what, err);
      if (t) {
        if (!rc) rc = t;
        continue;
      }
      if (unlinkat(dirfd(d), n, AT_REMOVEDIR) != 0 && !rc)
        rc = dcpi_fail(err, DCP_EIO, "cannot remove %s/%s: %s", what, n, strerror(errno));
    } else if (unlinkat(dirfd(d), n, 0) != 0 && errno != ENOENT && !rc) {
      rc = dcpi_fail(err, DCP_EIO, "cannot remove %s/%s: %s", what, n, strerror(errno));
    }
  }
  closedir(d);
  return rc;
}

static void test_delay(void) {
  const char *v = getenv("DCP_MANAGER_DELETE_DELAY_MS");
  long ms = v ? strtol(v, NULL, 10) : 0;
  if (ms > 0 && ms < 10000) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Remove the commit markers of the directory fd and sync it. */
static dcp_status uncommit(int fd, const char *what, dcpi_err *err) {
  int dup_fd = dup(fd);
  DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
  if (!d) {
    if (dup_fd >= 0) close(dup_fd);
    return dcpi_fail(err, DCP_EIO, "cannot list %s: %s", what, strerror(errno));
  }
  rewinddir(d);
  dcp_status rc = DCP_OK;
  struct dirent *de;
  while ((de = readdir(d))) {
    dcpi_file_name fn;
    dcpi_file_kind k = dcpi_name_parse(de->d_name, &fn);
    bool marker = !strcmp(de->d_name, DCPI_METADATA_NAME) || k == DCPI_FILE_PART ||
                  k == DCPI_FILE_LEGACY_PART;
    if (marker && unlinkat(fd, de->d_name, 0) != 0 && errno != ENOENT && !rc)
      rc = dcpi_fail(err, DCP_EIO, "cannot remove %s/%s: %s", what, de->d_name, strerror(errno));
  }
  closedir(d);
  if (!rc && fsync(fd) != 0)
    rc = dcpi_fail(err, DCP_EIO, "cannot sync %s: %s", what, strerror(errno));
  return rc;
}

dcp_status dcpi_step_delete(dcp_ctx *ctx, const char *root, int64_t step, dcpi_err *err) {
  char name[32], path[4096 + 64];
  dcpi_step_name(name, sizeof name, step);
  snprintf(path, sizeof path, "%s/%s", root, name);
  int rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0) return dcpi_fail(err, DCP_EIO, "cannot open the root %s: %s", root, strerror(errno));
  int fd = openat(rootfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    close(rootfd);
    return dcpi_fail(err, e == ENOENT ? DCP_ENOTFOUND : DCP_EINVAL,
                     "%s is not a directory of the root (%s): not deleted", path, strerror(e));
  }

  /* no save may be writing it while it goes */
  dcpi_rt rt = {.ctx = ctx, .path = path};
  dcpi_err_clear(&rt.err);
  dcpi_lease *lease = NULL;
  dcp_status rc = dcpi_rt_open_storage(&rt, 0);
  if (!rc) rc = dcpi_lease_acquire(&rt, DCPI_COORD_LEASE, ctx->lease_ms, &lease, &rt.err);
  if (rc) {
    dcpi_fail(err, rc, "%s not deleted: %s", path, rt.err.msg);
    if (rt.st) ctx->storage->close(rt.st);
    close(fd);
    close(rootfd);
    return rc;
  }

  rc = uncommit(fd, path, err);
  if (!rc) {
    test_delay();
    int fd2 = dup(fd);
    rc = fd2 < 0 ? dcpi_fail(err, DCP_EIO, "dup: %s", strerror(errno))
                : empty_dir(fd2, DCPI_COORD_LEASE, 0, path, err);
  }
  dcpi_lease_release(lease);
  ctx->storage->close(rt.st);
  if (!rc) {
    /* the lease's own leftovers (a temporary of a renewal), then the directory */
    int fd2 = dup(fd);
    rc = fd2 < 0 ? dcpi_fail(err, DCP_EIO, "dup: %s", strerror(errno))
                : empty_dir(fd2, NULL, 0, path, err);
  }
  close(fd);
  if (!rc && unlinkat(rootfd, name, AT_REMOVEDIR) != 0)
    rc = dcpi_fail(err, DCP_EIO, "cannot remove the directory %s: %s", path, strerror(errno));
  if (!rc && fsync(rootfd) != 0)
    rc = dcpi_fail(err, DCP_EIO, "cannot sync the root %s: %s", root, strerror(errno));
  close(rootfd);
  return rc;
}
