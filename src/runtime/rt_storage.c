/* rt_storage.c — storage wrappers: the context's storage plugin on the
 * operation's checkpoint directory, with plugin errors turned into
 * dcpi_err messages that name the plugin, the operation and the file. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/wire.h"
#include "core/plugin.h"
#include "metadata/format.h"
#include "runtime/rt.h"

/* Find the storage plugin on first use ("posix" unless configured). */
static dcp_status ensure_plugin(dcpi_rt *rt) {
  if (rt->ctx->storage) return DCP_OK;
  const void *table;
  dcp_status rc = dcpi_plugin_find(DCP_PLUGIN_STORAGE, "posix", rt->ctx->plugin_path, &table,
                                  &rt->err);
  if (!rc) rt->ctx->storage = table;
  return rc;
}

static dcp_status done(dcpi_rt *rt, int rc, const dcp_plugin_err *perr, const char *op,
                       const char *name, dcpi_err *err) {
  if (rc == DCP_OK) return DCP_OK;
  char what[300];
  if (name && name[0]) snprintf(what, sizeof what, "%s '%s' in %s", op, name, rt->path);
  else snprintf(what, sizeof what, "%s in %s", op, rt->path); /* a call on an open file */
  return dcpi_plugin_status(rc, perr, rt->ctx->storage->name, what, err);
}

dcp_status dcpi_rt_open_storage(dcpi_rt *rt, uint32_t flags) {
  if (rt->st) return DCP_OK; /* already open (a load that starts over) */
  dcp_status s = ensure_plugin(rt);
  if (s) return s;
  dcp_storage_config cfg = {.struct_size = sizeof cfg, .root = rt->path, .flags = flags,
                            .rank = rt->ctx->rank, .world_size = rt->ctx->world_size,
                            .options = rt->ctx->storage_options};
  dcp_plugin_err perr = {{0}};
  int rc = rt->ctx->storage->open(&cfg, &rt->st, &perr);
  if (rc) {
    rt->st = NULL;
    return done(rt, rc, &perr, "open", "", &rt->err);
  }
  dcpi_storage_stats(rt->ctx->storage, rt->st, &rt->io0);
  return DCP_OK;
}

dcp_status dcpi_rt_file_open(dcpi_rt *rt, const char *name, uint32_t mode,
                             dcp_storage_file **f, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  int rc = rt->ctx->storage->file_open(rt->st, name, mode, f, &perr);
  return done(rt, rc, &perr, "file_open", name, err);
}

dcp_status dcpi_rt_file_write(dcpi_rt *rt, dcp_storage_file *f, const void *buf, size_t len,
                              dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->file_write(f, buf, len, &perr), &perr, "write", "", err);
}

dcp_status dcpi_rt_file_read(dcpi_rt *rt, dcp_storage_file *f, void *buf, size_t len,
                             uint64_t off, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->file_read(f, buf, len, off, &perr), &perr, "read", "",
              err);
}

dcp_status dcpi_rt_file_sync(dcpi_rt *rt, dcp_storage_file *f, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->file_sync(f, &perr), &perr, "sync", "", err);
}

dcp_status dcpi_rt_file_close(dcpi_rt *rt, dcp_storage_file *f, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->file_close(f, &perr), &perr, "close", "", err);
}

dcp_status dcpi_rt_file_size(dcpi_rt *rt, const char *name, uint64_t *size, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  int rc = rt->ctx->storage->file_size(rt->st, name, size, &perr);
  return done(rt, rc, &perr, "size", name, err);
}

dcp_status dcpi_rt_rename(dcpi_rt *rt, const char *from, const char *to, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->rename(rt->st, from, to, &perr), &perr, "rename", from, err);
}

dcp_status dcpi_rt_remove(dcpi_rt *rt, const char *name, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->remove(rt->st, name, &perr), &perr, "remove", name, err);
}

dcp_status dcpi_rt_sync_dir(dcpi_rt *rt, dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->sync_dir(rt->st, &perr), &perr, "sync_dir", "", err);
}

dcp_status dcpi_rt_list(dcpi_rt *rt, int (*fn)(void *arg, const char *name), void *arg,
                        dcpi_err *err) {
  dcp_plugin_err perr = {{0}};
  return done(rt, rt->ctx->storage->list(rt->st, fn, arg, &perr), &perr, "list", "", err);
}

/* Files above this size that begin like .metadata have their header's total
 * length compared with the file's before the whole file is read. */
#define PEEK_ABOVE ((uint64_t)1 << 20)

/* A file of `size` bytes open at f whose first bytes are those of a
 * .metadata (magic, a version this library reads) but whose header gives
 * another total length is corrupt (truncated, padded, or a damaged header):
 * say so before allocating and reading all of it, so that a .metadata
 * padded to terabytes (a sparse file) is refused at once instead of
 * exhausting memory. Other files pass (their own decoder judges them).
 * Errors: DCP_ECORRUPT, the read's. */
static dcp_status check_meta_length(dcpi_rt *rt, dcp_storage_file *f, const char *name,
                                    uint64_t size, dcpi_err *err) {
  uint8_t h[DCPI_HEADER_SIZE];
  if (size <= PEEK_ABOVE) return DCP_OK;
  dcp_status rc = dcpi_rt_file_read(rt, f, h, sizeof h, 0, err);
  if (rc) return rc;
  uint32_t version = dcpi_get_u32(h + DCPI_MAGIC_LEN);
  if (memcmp(h, DCPI_MAGIC, DCPI_MAGIC_LEN) || version < 1 || version > DCPI_FORMAT_VERSION)
    return DCP_OK;
  uint64_t total = dcpi_get_u64(h + 16);
  if (total == size) return DCP_OK;
  return dcpi_fail(err, DCP_ECORRUPT, "%s/%s: corrupt metadata: the header says %llu bytes, the "
                   "file has %llu (truncated, padded or a damaged header; not read)",
                   rt->path, name, (unsigned long long)total, (unsigned long long)size);
}

/* How often dcpi_rt_read_file reads a file again that a rename replaced
 * while it was read. */
#define READ_ATTEMPTS 4

/* One read of the whole file `name` (see dcpi_rt_read_file). Its size is
 * taken by name before and after the read: when they differ (or the read
 * came up short), a rename replaced the file in between — the handle read
 * one file, the size was another's — and *moved is set, with the status
 * of what failed (DCP_ECORRUPT for a short read, or set here). */
static dcp_status read_once(dcpi_rt *rt, const char *name, uint8_t **data, size_t *len,
                            bool *moved, dcpi_err *err) {
  uint64_t size, after;
  dcp_storage_file *f;
  dcpi_err ignored;
  *moved = false;
  dcp_status rc = dcpi_rt_file_size(rt, name, &size, err);
  if (rc) return rc;
  if (size > SIZE_MAX / 2) return dcpi_fail(err, DCP_ECORRUPT, "'%s' is %llu bytes", name,
                                            (unsigned long long)size);
  if ((rc = dcpi_rt_file_open(rt, name, DCP_FILE_READ, &f, err))) return rc;
  uint8_t *buf = NULL;
  rc = check_meta_length(rt, f, name, size, err);
  if (!rc && !(buf = malloc(size ? (size_t)size : 1)))
    rc = dcpi_fail(err, DCP_ENOMEM, "out of memory for '%s'", name);
  if (!rc) rc = dcpi_rt_file_read(rt, f, buf, (size_t)size, 0, err);
  dcpi_rt_file_close(rt, f, rc ? &ignored : err);
  if ((!rc || rc == DCP_ECORRUPT) && !dcpi_rt_file_size(rt, name, &after, &ignored) &&
      after != size) {
    *moved = true;
    if (!rc) rc = dcpi_fail(err, DCP_ECORRUPT, "'%s' was replaced while it was read", name);
  }
  if (rc) {
    free(buf);
    return rc;
  }
  *data = buf;
  *len = (size_t)size;
  return DCP_OK;
}

dcp_status dcpi_rt_read_file(dcpi_rt *rt, const char *name, uint8_t **data, size_t *len,
                             dcpi_err *err) {
  *data = NULL;
  bool moved = true;
  dcp_status rc = DCP_OK;
  dcpi_err e; /* an attempt's failure reaches err only when it is the last */
  for (int i = 0; moved && i < READ_ATTEMPTS; i++) {
    dcpi_err_clear(&e);
    rc = read_once(rt, name, data, len, &moved, &e);
  }
  if (rc && err) *err = e;
  return rc;
}

dcp_status dcpi_rt_write_file_atomic(dcpi_rt *rt, const char *name, const char *tmp_name,
                                     const void *data, size_t len, dcpi_err *err) {
  dcp_storage_file *f;
  dcp_status rc = dcpi_rt_file_open(rt, tmp_name, DCP_FILE_WRITE, &f, err);
  if (rc) return rc;
  rc = dcpi_rt_file_write(rt, f, data, len, err);
  if (!rc) rc = dcpi_rt_file_sync(rt, f, err);
  dcpi_err ignored;
  dcp_status c = dcpi_rt_file_close(rt, f, rc ? &ignored : err);
  if (!rc) rc = c;
  if (!rc) rc = dcpi_rt_rename(rt, tmp_name, name, err);
  if (!rc) rc = dcpi_rt_sync_dir(rt, err);
  if (rc) dcpi_rt_remove(rt, tmp_name, &ignored); /* best effort */
  return rc;
}
