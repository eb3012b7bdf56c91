/* plan_persist.c — the checkpoint's .plan file: written by rank 0 after a
 * save, read by every rank before the first save of a context
 * (plan_persist.h, docs/format.md ".plan"). */
#include "runtime/plan_persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/ctx.h"
#include "runtime/save.h"

static const uint8_t magic[8] = {'D', 'C', 'P', 'P', 'L', 'A', 'N', '1'};

void dcpi_plan_file_encode(const dcpi_plan_entry *e, dcpi_wbuf *w) {
  dcpi_w_bytes(w, magic, sizeof magic);
  dcpi_plan_entry_encode(e, w);
  if (!w->status) dcpi_w_u64(w, XXH3_64bits(w->data, w->len));
}

void dcpi_plan_file_write(dcpi_rt *rt, const dcpi_plan_entry *e) {
  if (!e || !e->plans || e->world <= 0) return;
  dcpi_wbuf w = {0};
  dcpi_plan_file_encode(e, &w);
  dcpi_err ignored;
  dcp_storage_file *f = NULL;
  if (!w.status && !dcpi_rt_file_open(rt, DCPI_PLAN_FILE_TMP, DCP_FILE_WRITE, &f, &ignored)) {
    dcp_status rc = dcpi_rt_file_write(rt, f, w.data, w.len, &ignored);
    if (dcpi_rt_file_close(rt, f, &ignored)) rc = DCP_EIO;
    if (!rc) rc = dcpi_rt_rename(rt, DCPI_PLAN_FILE_TMP, DCPI_PLAN_FILE_NAME, &ignored);
    if (rc) dcpi_rt_remove(rt, DCPI_PLAN_FILE_TMP, &ignored);
  }
  dcpi_wbuf_free(&w);
}

dcp_status dcpi_plan_file_read(dcpi_rt *rt, uint8_t **data, size_t *len, dcpi_err *err) {
  uint64_t size = 0;
  *data = NULL;
  dcp_status rc = dcpi_rt_file_size(rt, DCPI_PLAN_FILE_NAME, &size, err);
  if (rc) return rc;
  if (size < sizeof magic + 8 || size > DCPI_PLAN_FILE_MAX)
    return dcpi_fail(err, DCP_ECORRUPT, ".plan: %llu bytes, not a plan file",
                     (unsigned long long)size);
  dcp_storage_file *f = NULL;
  if ((rc = dcpi_rt_file_open(rt, DCPI_PLAN_FILE_NAME, DCP_FILE_READ, &f, err))) return rc;
  uint8_t head[sizeof magic];
  uint8_t *buf = NULL;
  rc = dcpi_rt_file_read(rt, f, head, sizeof head, 0, err);
  if (!rc && memcmp(head, magic, sizeof magic) != 0)
    rc = dcpi_fail(err, DCP_ECORRUPT, ".plan: not a plan file");
  if (!rc && !(buf = malloc((size_t)size)))
    rc = dcpi_fail(err, DCP_ENOMEM, "out of memory for .plan");
  if (!rc) rc = dcpi_rt_file_read(rt, f, buf, (size_t)size, 0, err);
  dcpi_err ignored;
  dcpi_rt_file_close(rt, f, &ignored);
  if (rc) {
    free(buf);
    return rc;
  }
  *data = buf;
  *len = (size_t)size;
  return DCP_OK;
}

dcpi_plan_entry *dcpi_plan_file_accept(const uint8_t *file, size_t len, int32_t rank,
                                       int32_t world, dcpi_plan_key key, const uint8_t *plan,
                                       size_t plan_len, dcpi_err *err) {
  if (len < sizeof magic + 8 || memcmp(file, magic, sizeof magic) != 0) {
    dcpi_fail(err, DCP_ECORRUPT, ".plan: not a plan file");
    return NULL;
  }
  if (XXH3_64bits(file, len - 8) != dcpi_get_u64(file + len - 8)) {
    dcpi_fail(err, DCP_ECORRUPT, ".plan: checksum mismatch");
    return NULL;
  }
  dcpi_plan_entry *f = NULL;
  if (dcpi_plan_entry_decode(file + sizeof magic, len - sizeof magic - 8, &f, err)) return NULL;
  dcpi_plan_entry *out = NULL;
  dcpi_global_plan *gp = NULL;
  dcpi_wbuf *msgs = NULL;
  size_t at = 0, total = 0;
  if (f->world != world || !f->plans) {
    dcpi_fail(err, DCP_EMISMATCH, ".plan: saved by a world of %d, this one is %d",
              (int)f->world, (int)world);
    goto done;
  }
  for (int32_t r = 0; r < world; r++) {
    if (r < rank) at += f->plan_lens[r];
    total += f->plan_lens[r];
  }
  if (f->plan_lens[rank] != plan_len || memcmp(f->plans + at, plan, plan_len) != 0) {
    dcpi_fail(err, DCP_EMISMATCH, ".plan: rank %d's recorded plan is not this save's",
              (int)rank);
    goto done;
  }
  if (dcpi_global_plan_from_encoded(f->plans, f->plan_lens, world, &gp, err)) goto done;
  if (!(msgs = calloc((size_t)world, sizeof *msgs))) {
    dcpi_fail(err, DCP_ENOMEM, "out of memory");
    goto done;
  }
  if (dcpi_save_encode_assignments(gp, world, msgs, err)) goto done;
  /* the generation a gather of these plans gives them (save.c, plan) */
  int64_t gen = (int64_t)(XXH3_64bits(f->plans, total) & INT64_MAX) | 1;
  dcpi_wbuf *mine = &msgs[rank];
  uint8_t *assignment = mine->data ? mine->data : malloc(1);
  mine->data = NULL;
  if (!assignment) {
    dcpi_fail(err, DCP_ENOMEM, "out of memory");
  } else if (rank == 0) {
    out = dcpi_plan_entry_new(key, gen, assignment, mine->len, world, f->plans, f->plan_lens, gp);
    f->plans = NULL, f->plan_lens = NULL, gp = NULL; /* out's now (or freed) */
  } else {
    out = dcpi_plan_entry_new(key, gen, assignment, mine->len, 0, NULL, NULL, NULL);
  }
  if (!out) dcpi_fail(err, DCP_ENOMEM, "out of memory");
done:
  for (int32_t r = 0; msgs && r < world; r++) dcpi_wbuf_free(&msgs[r]);
  free(msgs);
  dcpi_global_plan_free(gp);
  dcpi_plan_entry_drop(f);
  return out;
}

/* The directory that holds `path` (path without its last component and the
 * slashes around it) into out; false when it does not fit. */
static bool parent_dir(const char *path, char *out, size_t cap) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  size_t cut = n;
  while (cut > 0 && path[cut - 1] != '/') cut--;
  if (cut == 0) return snprintf(out, cap, ".") < (int)cap;
  while (cut > 1 && path[cut - 1] == '/') cut--;
  if (cut >= cap) return false;
  memcpy(out, path, cut);
  out[cut] = '\0';
  return true;
}

/* The parent directory's .plan (a manager's root keeps its newest step's
 * there): read through a storage handle of its own. */
static dcp_status read_parent_plan(dcpi_rt *rt, uint8_t **data, size_t *len) {
  char parent[4096];
  if (!rt->path || !parent_dir(rt->path, parent, sizeof parent)) return DCP_ENOTFOUND;
  dcpi_rt prt = {.ctx = rt->ctx, .path = parent};
  dcpi_err_clear(&prt.err);
  dcpi_err ignored;
  dcp_status rc = dcpi_rt_open_storage(&prt, 0);
  if (!rc) rc = dcpi_plan_file_read(&prt, data, len, &ignored);
  if (prt.st) rt->ctx->storage->close(prt.st);
  return rc;
}

bool dcpi_plan_file_seed(dcpi_rt *rt, dcpi_plan_key key, const uint8_t *plan, size_t plan_len) {
  dcpi_plan_cache *cache = dcpi_ctx_plan_cache(rt->ctx);
  if (!cache) return false;
  dcpi_plan_entry *have = dcpi_plan_cache_get(cache, key);
  if (have) {
    dcpi_plan_cache_release(cache, have);
    return false; /* the context's own entry decides */
  }
  uint8_t *data = NULL;
  size_t len = 0;
  dcpi_err ignored;
  if (dcpi_plan_file_read(rt, &data, &len, &ignored) && read_parent_plan(rt, &data, &len))
    return false;
  dcpi_plan_entry *e = dcpi_plan_file_accept(data, len, rt->ctx->rank, rt->ctx->world_size, key,
                                             plan, plan_len, &ignored);
  free(data);
  if (!e) return false;
  dcpi_plan_cache_put(cache, e);
  return true;
}
