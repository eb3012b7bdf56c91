/* steps.c — listing and examining the step directories of a root
 * (steps.h). Deletion is in remove.c. */
#define _DEFAULT_SOURCE /* DT_* of readdir, gethostname */
#include "manager/steps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/checked.h"
#include "core/ctx.h"
#include "runtime/files.h"
#include "runtime/lease.h"
#include "runtime/rt.h"

int64_t dcpi_step_parse(const char *name) {
  if (strncmp(name, "step-", 5) != 0) return -1;
  const char *d = name + 5;
  size_t len = strlen(d);
  if (len < 1 || len > 19 || (d[0] == '0' && len > 1)) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (d[i] < '0' || d[i] > '9') return -1;
    v = v * 10 + (uint64_t)(d[i] - '0');
  }
  return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
}

void dcpi_step_name(char *out, size_t cap, int64_t step) {
  snprintf(out, cap, "step-%" PRId64, step);
}

static void note(dcpi_step_scan *s, dcp_step_state st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(dcpi_step_scan *s, dcp_step_state st, const char *fmt, ...) {
  s->state = st;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->note, sizeof s->note, fmt, ap);
  va_end(ap);
}

/* ---- inside one step ------------------------------------------------------ */

typedef struct listing {
  dcpi_rt *rt;
  bool metadata, parts;
  char lease[DCPI_NAME_MAX]; /* a lease file's name, "" when none */
  uint64_t bytes;
} listing;

static int on_file(void *arg, const char *name) {
  listing *l = arg;
  dcpi_file_name fn;
  dcpi_file_kind k = dcpi_name_parse(name, &fn);
  if (!strcmp(name, DCPI_METADATA_NAME)) l->metadata = true;
  if (k == DCPI_FILE_PART || k == DCPI_FILE_LEGACY_PART) l->parts = true;
  if (!strcmp(name, DCPI_COORD_LEASE) ||
      (!strncmp(name, ".lock.", 6) && !strstr(name, ".t-") && !l->lease[0]))
    snprintf(l->lease, sizeof l->lease, "%s", name);
  uint64_t sz = 0;
  if (dcpi_rt_file_size(l->rt, name, &sz, NULL) == DCP_OK) l->bytes += sz;
  return 0;
}

/* Whether the lease file `name` is held by a process that looks alive:
 * its record parses, and it has not expired or (same host) its pid is
 * gone. Advisory only (a listing): a deletion takes the lease for real. */
static bool lease_live(dcpi_rt *rt, const char *name, char *who, size_t cap) {
  uint8_t *data = NULL;
  size_t len = 0;
  if (dcpi_rt_read_file(rt, name, &data, &len, NULL)) return false;
  dcpi_lease_record r;
  bool ok = dcpi_lease_record_parse((const char *)data, len, &r);
  free(data);
  if (!ok) return false;
  snprintf(who, cap, "host %s pid %" PRId64, r.host, r.pid);
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) == 0 && !strncmp(host, r.host, 64) && dcpi_pid_gone(r.pid))
    return false; /* this host's holder is dead */
  return dcpi_lease_wall_ms() <= r.expires_ms + r.grace_ms;
}

void dcpi_step_examine(dcp_ctx *ctx, const char *root, int64_t step, dcpi_step_scan *out) {
  memset(out, 0, sizeof *out);
  out->step = step;
  char name[32], path[4096 + 64];
  dcpi_step_name(name, sizeof name, step);
  snprintf(path, sizeof path, "%s/%s", root, name);
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    note(out, DCP_STEP_INCOMPLETE, "cannot be read: %s", strerror(errno));
    return;
  }
  if (S_ISLNK(sb.st_mode)) {
    note(out, DCP_STEP_FOREIGN, "a symbolic link (never followed, loaded or deleted)");
    return;
  }
  if (!S_ISDIR(sb.st_mode)) {
    note(out, DCP_STEP_FOREIGN, "not a directory");
    return;
  }
  dcpi_rt rt = {.ctx = ctx, .path = path};
  dcpi_err_clear(&rt.err);
  listing l = {.rt = &rt};
  dcpi_err e;
  dcpi_err_clear(&e);
  if (dcpi_rt_open_storage(&rt, 0) || dcpi_rt_list(&rt, on_file, &l, &e)) {
    note(out, DCP_STEP_INCOMPLETE, "cannot be listed: %s", rt.err.msg[0] ? rt.err.msg : e.msg);
    if (rt.st) ctx->storage->close(rt.st);
    return;
  }
  if (!l.metadata && !l.parts) {
    char who[128] = "";
    if (l.lease[0] && lease_live(&rt, l.lease, who, sizeof who))
      note(out, DCP_STEP_PENDING, "being written: its lease is held by %s", who);
    else
      note(out, DCP_STEP_INCOMPLETE, "no commit marker (an abandoned save or deletion)");
    ctx->storage->close(rt.st);
    return;
  }
  ctx->storage->close(rt.st);

  dcpi_err saved = ctx->last; /* a listing leaves the context's error alone */
  dcp_meta *meta = NULL;
  dcp_status rc = dcp_meta_open(ctx, path, &meta);
  if (rc == DCP_EINCOMPLETE) {
    note(out, DCP_STEP_INCOMPLETE, "not committed: %s", ctx->last.msg);
  } else if (rc) {
    note(out, DCP_STEP_CORRUPT, "%s: %s", dcp_strerror(rc), ctx->last.msg);
  } else {
    const char *value = NULL;
    for (size_t i = 0; i < dcp_meta_kv_count(meta); i++) {
      const char *k, *v;
      if (dcp_meta_kv(meta, i, &k, &v) == DCP_OK && !strcmp(k, DCPI_STEP_KEY)) value = v;
    }
    if (!value)
      note(out, DCP_STEP_FOREIGN, "a checkpoint without the manager's step record (%s)",
           DCPI_STEP_KEY);
    else if (dcpi_step_parse_value(value) != step)
      note(out, DCP_STEP_FOREIGN, "its metadata records step '%.40s', not %" PRId64, value,
           step);
    else {
      out->state = DCP_STEP_COMMITTED;
      out->bytes = l.bytes;
    }
    dcp_meta_free(meta);
  }
  ctx->last = saved;
}

int64_t dcpi_step_parse_value(const char *v) {
  char buf[32];
  if (strlen(v) > 19) return -1;
  snprintf(buf, sizeof buf, "step-%s", v);
  return dcpi_step_parse(buf);
}

/* ---- the root -------------------------------------------------------------- */

static int by_step(const void *a, const void *b) {
  int64_t x = ((const dcpi_step_scan *)a)->step, y = ((const dcpi_step_scan *)b)->step;
  return (x > y) - (x < y);
}

dcp_status dcpi_steps_scan(dcp_ctx *ctx, const char *root, int64_t pending,
                           dcpi_step_scan **out, size_t *n, dcpi_err *err) {
  *out = NULL;
  *n = 0;
  DIR *d = opendir(root);
  if (!d) return dcpi_fail(err, DCP_EIO, "cannot list the root %s: %s", root, strerror(errno));
  dcpi_step_scan *v = NULL;
  size_t len = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    int64_t step = dcpi_step_parse(de->d_name);
    if (step < 0) continue;
    if (len == cap) {
      size_t nc = cap ? cap * 2 : 16;
      dcpi_step_scan *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        closedir(d);
        free(v);
        return dcpi_fail(err, DCP_ENOMEM, "out of memory listing %s", root);
      }
      v = nv;
      cap = nc;
    }
    v[len++].step = step;
  }
  closedir(d);
  /* the pending step is listed even before its writer made the directory */
  bool seen = pending < 0;
  for (size_t i = 0; i < len && !seen; i++) seen = v[i].step == pending;
  if (!seen) {
    dcpi_step_scan *nv = realloc(v, (len + 1) * sizeof *nv);
    if (!nv) {
      free(v);
      return dcpi_fail(err, DCP_ENOMEM, "out of memory listing %s", root);
    }
    v = nv;
    v[len++].step = pending;
  }
  if (len) dcpi_sort(v, len, sizeof *v, by_step);
  for (size_t i = 0; i < len; i++) {
    if (v[i].step == pending) {
      int64_t st = v[i].step;
      memset(&v[i], 0, sizeof v[i]);
      v[i].step = st;
      note(&v[i], DCP_STEP_PENDING, "this manager's async save, not durable yet");
      continue;
    }
    dcpi_step_examine(ctx, root, v[i].step, &v[i]);
  }
  *out = v;
  *n = len;
  return DCP_OK;
}

dcp_status dcpi_root_sync(const char *root, dcpi_err *err) {
  int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return dcpi_fail(err, DCP_EIO, "cannot open the root %s: %s", root, strerror(errno));
  int rc = fsync(fd);
  int e = errno;
  close(fd);
  if (rc) return dcpi_fail(err, DCP_EIO, "cannot sync the root %s: %s", root, strerror(e));
  return DCP_OK;
}
