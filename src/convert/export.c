/* export.c — dcp_export_safetensors: a checkpoint to safetensors, one file
 * or shards of a maximum size with an index.json, streamed: a window of one
 * tensor in memory at a time. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/cv.h"

typedef struct export_job {
  dcp_ctx *ctx;
  dcp_meta *m;
  dcpi_rt in, out;
  dcpi_block_reader *br;
  size_t nt;
  uint64_t *bytes; /* per tensor */
  uint32_t *shard; /* per tensor */
  uint32_t nshards;
  uint8_t *buf;
  size_t cap;
  dcpi_cv_progress pr;
  dcpi_err err;
} export_job;

/* Every tensor name must be a key a safetensors header can hold: the format
 * reserves __metadata__ (written over, the checkpoint's key/values would be
 * lost and no reader, libdcp's import included, would take the file). Checked
 * before anything is written. */
static dcp_status check_names(export_job *j) {
  for (size_t t = 0; t < j->nt; t++) {
    dcp_tensor_info ti;
    if (dcp_meta_tensor(j->m, t, &ti) == DCP_OK && strcmp(ti.fqn, DCPI_ST_METADATA_KEY) == 0)
      return dcpi_fail(&j->err, DCP_ENAME,
                       "export: tensor '" DCPI_ST_METADATA_KEY "' cannot be exported: "
                       "safetensors reserves that header key for the file's string-to-string "
                       "metadata (rename the tensor, or leave it out of the export)");
  }
  return DCP_OK;
}

/* Tensors in fqn order into shards of at most max bytes of data. */
static dcp_status plan_shards(export_job *j, uint64_t max) {
  j->bytes = calloc(j->nt ? j->nt : 1, sizeof *j->bytes);
  j->shard = calloc(j->nt ? j->nt : 1, sizeof *j->shard);
  if (!j->bytes || !j->shard) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
  uint64_t fill = 0;
  uint32_t k = 0;
  for (size_t t = 0; t < j->nt; t++) {
    dcp_status rc = dcpi_cv_tensor_bytes(j->m, t, &j->bytes[t], &j->err);
    if (rc) return rc;
    if (max && fill && fill + j->bytes[t] > max) k++, fill = 0;
    if (k == UINT32_MAX) return dcpi_fail(&j->err, DCP_EINVAL, "too many shards");
    j->shard[t] = k;
    fill += j->bytes[t];
    /* the index's total_size and every data offset must stay representable */
    if (j->bytes[t] > (uint64_t)INT64_MAX - j->pr.total)
      return dcpi_fail(&j->err, DCP_EOVERFLOW, "export: the tensors hold more than 2^63 bytes");
    j->pr.total += j->bytes[t];
  }
  j->nshards = k + 1;
  return DCP_OK;
}

static void shard_name(const export_job *j, uint32_t k, char *buf, size_t cap) {
  if (j->nshards == 1)
    snprintf(buf, cap, "model.safetensors");
  else
    snprintf(buf, cap, "model-%05u-of-%05u.safetensors", k + 1, j->nshards);
}

/* The header of shard k: its tensors back to back. */
static dcp_status shard_header(export_job *j, uint32_t k, uint8_t **hdr, size_t *len) {
  dcpi_st_out *outs = calloc(j->nt ? j->nt : 1, sizeof *outs);
  size_t nkv = dcp_meta_kv_count(j->m), n = 0;
  const char **kk = calloc(nkv ? nkv : 1, sizeof *kk), **kv = calloc(nkv ? nkv : 1, sizeof *kv);
  dcp_status rc = outs && kk && kv ? DCP_OK : dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; i < nkv && !rc; i++) dcp_meta_kv(j->m, i, &kk[i], &kv[i]);
  uint64_t at = 0;
  dcp_tensor_info ti[1];
  int64_t(*shapes)[DCP_MAX_NDIM] = rc ? NULL : calloc(j->nt ? j->nt : 1, sizeof *shapes);
  if (!rc && !shapes) rc = dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
  for (size_t t = 0; t < j->nt && !rc; t++) {
    if (j->shard[t] != k) continue;
    dcp_meta_tensor(j->m, t, ti);
    memcpy(shapes[n], ti->shape, sizeof ti->shape);
    outs[n] = (dcpi_st_out){.name = ti->fqn, .dtype = ti->dtype, .ndim = ti->ndim,
                            .shape = shapes[n], .begin = at, .end = at + j->bytes[t]};
    at += j->bytes[t];
    n++;
  }
  if (!rc) rc = dcpi_st_build_header(outs, n, kk, kv, nkv, hdr, len, &j->err);
  free(shapes);
  free(outs);
  free(kk);
  free(kv);
  return rc;
}

/* Tensor t streamed into f window by window: memory holds one window
 * (DCPI_CV_EXPORT_WINDOW at most), whatever the tensor's size. */
static dcp_status write_tensor(export_job *j, dcp_storage_file *f, size_t t) {
  uint64_t total = j->bytes[t];
  size_t win = total < DCPI_CV_EXPORT_WINDOW ? (size_t)total : DCPI_CV_EXPORT_WINDOW;
  if (win > j->cap) {
    uint8_t *p = realloc(j->buf, win);
    if (!p) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory for a %zu-byte window", win);
    j->buf = p, j->cap = win;
  }
  dcp_status rc = dcpi_cv_check_coverage(j->m, t, &j->err);
  for (uint64_t at = 0; at < total && !rc; at += win) {
    size_t n = total - at < win ? (size_t)(total - at) : win;
    rc = dcpi_cv_read_window(j->br, j->m, t, at, j->buf, n, &j->pr, &j->err);
    if (!rc) rc = dcpi_rt_file_write(&j->out, f, j->buf, n, &j->err);
  }
  return rc;
}

static dcp_status write_shard(export_job *j, uint32_t k) {
  char name[80], tmp[96];
  shard_name(j, k, name, sizeof name);
  snprintf(tmp, sizeof tmp, "%s.tmp", name);
  uint8_t *hdr = NULL;
  size_t hlen = 0;
  dcp_storage_file *f = NULL;
  dcp_status rc = shard_header(j, k, &hdr, &hlen);
  if (!rc) rc = dcpi_rt_file_open(&j->out, tmp, DCP_FILE_WRITE, &f, &j->err);
  if (!rc) rc = dcpi_rt_file_write(&j->out, f, hdr, hlen, &j->err);
  free(hdr);
  for (size_t t = 0; t < j->nt && !rc; t++)
    if (j->shard[t] == k) rc = write_tensor(j, f, t);
  if (!rc) rc = dcpi_rt_file_sync(&j->out, f, &j->err);
  dcpi_err ignored;
  if (f) {
    dcp_status c = dcpi_rt_file_close(&j->out, f, rc ? &ignored : &j->err);
    if (!rc) rc = c;
  }
  if (!rc) rc = dcpi_rt_rename(&j->out, tmp, name, &j->err);
  if (rc && f) dcpi_rt_remove(&j->out, tmp, &ignored);
  return rc;
}

static json_t *index_json(const export_job *j) {
  json_t *root = json_object(), *md = json_object(), *wm = json_object();
  int bad = !root || !md || !wm || json_object_set_new(md, "total_size",
                                                       json_integer((json_int_t)j->pr.total));
  for (size_t t = 0; t < j->nt && !bad; t++) {
    dcp_tensor_info ti;
    char name[80];
    dcp_meta_tensor(j->m, t, &ti);
    shard_name(j, j->shard[t], name, sizeof name);
    bad = json_object_set_new(wm, ti.fqn, json_string(name));
  }
  bad = bad || json_object_set(root, "metadata", md) || json_object_set(root, "weight_map", wm);
  json_decref(md);
  json_decref(wm);
  if (bad) json_decref(root);
  return bad ? NULL : root;
}

static dcp_status write_index(export_job *j) {
  json_t *root = index_json(j);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!text) return dcpi_fail(&j->err, DCP_ENOMEM, "cannot build the index (out of memory?)");
  dcp_status rc = dcpi_rt_write_file_atomic(&j->out, "model.safetensors.index.json",
                                           "model.safetensors.index.json.tmp", text, strlen(text),
                                           &j->err);
  free(text);
  return rc;
}

static dcp_status run(export_job *j, const char *ckpt, const char *outdir, uint64_t max) {
  dcp_status rc = dcp_meta_open(j->ctx, ckpt, &j->m);
  if (rc) return dcpi_fail(&j->err, rc, "%s", dcp_ctx_last_error(j->ctx));
  j->nt = dcp_meta_tensor_count(j->m);
  if ((rc = check_names(j))) return rc;
  if ((rc = plan_shards(j, max))) return rc;
  if ((rc = dcpi_cv_open(&j->in, j->ctx, ckpt, 0, &j->err))) return rc;
  if ((rc = dcpi_block_reader_create(&j->in, &j->br, &j->err))) return rc;
  if ((rc = dcpi_cv_open(&j->out, j->ctx, outdir, DCP_STORAGE_CREATE, &j->err))) return rc;
  for (uint32_t k = 0; k < j->nshards && !rc; k++) rc = write_shard(j, k);
  if (!rc && j->nshards > 1) rc = write_index(j);
  return rc;
}

dcp_status dcp_export_safetensors(dcp_ctx *ctx, const char *ckpt, const char *outdir,
                                  uint64_t max_shard_bytes) {
  if (!ctx) return DCP_EINVAL;
  export_job j = {.ctx = ctx, .pr = {.ctx = ctx, .phase = DCP_PHASE_EXPORT}};
  dcpi_err_clear(&j.err);
  dcp_status rc;
  if (!ckpt || !*ckpt || !outdir || !*outdir)
    rc = dcpi_fail(&j.err, DCP_EINVAL, "export: empty checkpoint or output path");
  else
    rc = run(&j, ckpt, outdir, max_shard_bytes);
  (void)rc;
  dcpi_block_reader_free(j.br);
  dcpi_cv_close(&j.in);
  dcpi_cv_close(&j.out);
  dcp_meta_free(j.m);
  free(j.bytes);
  free(j.shard);
  free(j.buf);
  return dcpi_ctx_report(ctx, &j.err);
}
