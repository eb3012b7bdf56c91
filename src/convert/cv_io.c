/* cv_io.c — storage outside a save or load, source files that are
 * symbolic links, safetensors headers through the storage plugin, and
 * progress reporting. */
#define _XOPEN_SOURCE 700 /* realpath: XSI in glibc's headers */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert/cv.h"
#include "core/progress.h"

void dcp_ctx_set_progress(dcp_ctx *ctx, dcp_progress_fn fn, void *arg) {
  if (!ctx) return;
  ctx->progress = fn;
  ctx->progress_arg = fn ? arg : NULL;
}

void dcpi_cv_progress_add(dcpi_cv_progress *p, uint64_t n) {
  if (!p) return;
  p->done += n;
  if (p->ctx && p->ctx->progress) p->ctx->progress(p->ctx->progress_arg, p->done, p->total);
  dcpi_progress(p->ctx, p->phase, p->done, p->total);
}

dcp_status dcpi_cv_open(dcpi_rt *rt, dcp_ctx *ctx, const char *dir, uint32_t flags,
                        dcpi_err *err) {
  memset(rt, 0, sizeof *rt);
  rt->ctx = ctx;
  rt->path = dir;
  dcpi_err_clear(&rt->err);
  dcp_status rc = dcpi_rt_open_storage(rt, flags);
  if (rc) {
    rt->st = NULL;
    dcpi_fail(err, rc, "%s", rt->err.msg);
  }
  return rc;
}

void dcpi_cv_close(dcpi_rt *rt) {
  if (rt->st) rt->ctx->storage->close(rt->st);
  rt->st = NULL;
}

dcp_status dcpi_cv_split(const char *path, char **dir, char **name, dcpi_err *err) {
  *dir = *name = NULL;
  size_t n = path ? strlen(path) : 0;
  if (!n || path[n - 1] == '/')
    return dcpi_fail(err, DCP_EINVAL, "'%s' is not a path to a file", path ? path : "(null)");
  const char *slash = strrchr(path, '/');
  if (!slash) {
    *dir = strdup(".");
  } else if (slash == path) {
    *dir = strdup("/");
  } else if ((*dir = malloc((size_t)(slash - path) + 1))) {
    memcpy(*dir, path, (size_t)(slash - path));
    (*dir)[slash - path] = '\0';
  }
  *name = strdup(slash ? slash + 1 : path);
  if (!*dir || !*name) {
    free(*dir), free(*name);
    *dir = *name = NULL;
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  }
  return DCP_OK;
}

/* Prefix err's message with the file's name. */
static dcp_status in_file(dcpi_err *err, dcp_status rc, const char *name) {
  char msg[DCPI_ERR_MSG_MAX];
  snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
  return dcpi_fail(err, rc, "%s: %s", name, msg);
}

/* dir/name, malloc'd ("name" alone when dir is "."). */
static char *join(const char *dir, const char *name) {
  bool here = strcmp(dir, ".") == 0;
  size_t dl = here ? 0 : strlen(dir), nl = strlen(name);
  char *p = malloc(dl + nl + 2);
  if (!p) return NULL;
  memcpy(p, dir, dl);
  size_t at = dl;
  if (dl && dir[dl - 1] != '/') p[at++] = '/';
  memcpy(p + at, name, nl + 1);
  return p;
}

static dcp_status keep_as_named(const char *dir, const char *name, char **rdir, char **rname,
                                dcpi_err *err) {
  *rdir = strdup(dir);
  *rname = strdup(name);
  if (*rdir && *rname) return DCP_OK;
  free(*rdir), free(*rname);
  *rdir = *rname = NULL;
  return dcpi_fail(err, DCP_ENOMEM, "out of memory");
}

/* The whole path is resolved (realpath), so a link to a link, or one whose
 * target passes through linked directories, reaches the file itself; the
 * plugin then opens that file with its own rules (a regular file, not a
 * link: one swapped in after this check is still refused there). */
static dcp_status follow_link(const char *path, char **rdir, char **rname, dcpi_err *err) {
  char *real = realpath(path, NULL);
  if (!real) {
    int e = errno;
    return e == ENOENT ? dcpi_fail(err, DCP_ENOTFOUND, "'%s' is a symbolic link to a missing file",
                                   path)
                       : dcpi_fail(err, e == ENOMEM ? DCP_ENOMEM : DCP_EIO,
                                   "'%s' is a symbolic link that cannot be resolved: %s", path,
                                   strerror(e));
  }
  dcp_status rc = dcpi_cv_split(real, rdir, rname, err);
  free(real);
  return rc;
}

dcp_status dcpi_cv_resolve_source(const char *dir, const char *name, char **rdir, char **rname,
                                  bool *linked, dcpi_err *err) {
  *rdir = *rname = NULL;
  *linked = false;
  char *path = join(dir, name);
  if (!path) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  struct stat sb;
  dcp_status rc;
  if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
    *linked = true;
    rc = follow_link(path, rdir, rname, err);
  } else {
    rc = keep_as_named(dir, name, rdir, rname, err);
  }
  free(path);
  return rc;
}

static dcp_status read_header_bytes(dcpi_rt *rt, dcp_storage_file *f, const char *name,
                                    uint64_t size, dcpi_st_header **out, dcpi_err *err) {
  uint8_t prefix[8] = {0};
  uint64_t hlen = 0;
  dcp_status rc = size >= 8 ? dcpi_rt_file_read(rt, f, prefix, 8, 0, err) : DCP_OK;
  if (!rc) rc = dcpi_st_header_len(prefix, size, &hlen, err);
  if (rc) return rc == DCP_ECORRUPT ? in_file(err, rc, name) : rc;
  char *json = malloc((size_t)hlen);
  if (!json) return dcpi_fail(err, DCP_ENOMEM, "out of memory for a %llu-byte header",
                              (unsigned long long)hlen);
  rc = dcpi_rt_file_read(rt, f, json, (size_t)hlen, 8, err);
  if (!rc) rc = dcpi_st_parse(json, (size_t)hlen, size - 8 - hlen, out, err);
  free(json);
  return rc == DCP_ECORRUPT ? in_file(err, rc, name) : rc;
}

dcp_status dcpi_cv_read_st_header(dcpi_rt *rt, const char *name, const char *shown,
                                  dcpi_st_header **out, dcpi_err *err) {
  uint64_t size = 0;
  dcp_storage_file *f = NULL;
  *out = NULL;
  dcp_status rc = dcpi_rt_file_size(rt, name, &size, err);
  if (!rc) rc = dcpi_rt_file_open(rt, name, DCP_FILE_READ, &f, err);
  if (rc) return rc;
  rc = read_header_bytes(rt, f, shown ? shown : name, size, out, err);
  dcpi_err ignored;
  dcpi_rt_file_close(rt, f, &ignored);
  return rc;
}

void dcpi_cv_describe_box(char *buf, size_t cap, const char *fqn, const dcp_box *box) {
  int n = snprintf(buf, cap, "tensor '%s' box [", fqn);
  for (uint32_t d = 0; d < box->ndim && n >= 0 && (size_t)n < cap; d++)
    n += snprintf(buf + n, cap - (size_t)n, "%s%lld:%lld", d ? ", " : "",
                  (long long)box->offset[d], (long long)(box->offset[d] + box->size[d]));
  if (n >= 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}
