/* verify.c — dcp_verify: every block of a checkpoint read and checked, and
 * every tensor exactly covered by its chunks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/cv.h"

typedef struct verify_job {
  dcp_ctx *ctx;
  dcp_meta *m;
  dcpi_rt rt;
  dcpi_block_reader *br;
  dcp_verify_report rep;
  dcpi_cv_progress pr;
  dcpi_err first;
} verify_job;

/* Count a problem; the first one is kept. A missing data file means the
 * checkpoint is incomplete. */
static void problem(verify_job *j, dcp_status s, const dcpi_err *err) {
  if (s == DCP_ENOTFOUND) s = DCP_EINCOMPLETE;
  j->rep.problems++;
  if (j->rep.first_status) return;
  j->rep.first_status = s;
  dcpi_fail(&j->first, s, "%s", err->msg[0] ? err->msg : dcp_strerror(s));
}

static dcp_status count(void *arg, uint64_t raw_offset, const uint8_t *data, size_t len,
                        dcpi_err *err) {
  (void)raw_offset, (void)data, (void)err;
  verify_job *j = arg;
  j->rep.bytes += len;
  dcpi_cv_progress_add(&j->pr, len);
  return DCP_OK;
}

static void check_ref(verify_job *j, uint32_t file, const dcp_storage_ref *ref,
                      const char *what) {
  const char *name;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status s = dcp_meta_file(j->m, file, &name);
  if (!s) s = dcpi_block_read(j->br, name, ref, 0, ref->raw_length, what, count, j, &err);
  else dcpi_fail(&err, DCP_ECORRUPT, "%s: no file %u", what, file);
  j->rep.blocks += ref->block_count;
  if (s) problem(j, s, &err);
}

static void check_tensor(verify_job *j, size_t ti) {
  dcp_tensor_info t;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_meta_tensor(j->m, ti, &t);
  j->rep.tensors++;
  dcp_status s = dcpi_cv_check_coverage(j->m, ti, &err);
  if (s) problem(j, s, &err);
  for (size_t c = 0; c < t.chunk_count; c++) {
    dcp_chunk_info ci;
    if ((s = dcp_meta_chunk(j->m, ti, c, &ci))) {
      dcpi_fail(&err, s, "tensor '%s': chunk %zu cannot be decoded", t.fqn, c);
      problem(j, s, &err);
      return;
    }
    char what[DCPI_ERR_MSG_MAX / 2];
    dcpi_cv_describe_box(what, sizeof what, t.fqn, &ci.box);
    j->rep.chunks++;
    check_ref(j, ci.ref.file, &ci.ref, what);
  }
}

static void check_bytes(verify_job *j, size_t bi) {
  dcp_bytes_info b;
  dcp_meta_bytes(j->m, bi, &b);
  char what[DCPI_ERR_MSG_MAX / 2];
  snprintf(what, sizeof what, "bytes item '%.200s' (rank %d)", b.key, (int)b.rank);
  j->rep.bytes_items++;
  check_ref(j, b.ref.file, &b.ref, what);
}

static uint64_t total_bytes(verify_job *j) {
  uint64_t total = 0;
  for (size_t t = 0; t < dcp_meta_tensor_count(j->m); t++) {
    dcp_tensor_info ti;
    dcp_meta_tensor(j->m, t, &ti);
    for (size_t c = 0; c < ti.chunk_count; c++) {
      dcp_chunk_info ci;
      if (dcp_meta_chunk(j->m, t, c, &ci) == DCP_OK) total += ci.ref.raw_length;
    }
  }
  for (size_t b = 0; b < dcp_meta_bytes_count(j->m); b++) {
    dcp_bytes_info bi;
    if (dcp_meta_bytes(j->m, b, &bi) == DCP_OK) total += bi.ref.raw_length;
  }
  return total;
}

static dcp_status run(verify_job *j, const char *ckpt) {
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status s = dcp_meta_open(j->ctx, ckpt, &j->m);
  if (s) return dcpi_fail(&j->first, s, "%s", dcp_ctx_last_error(j->ctx));
  if ((s = dcpi_cv_open(&j->rt, j->ctx, ckpt, 0, &err)) ||
      (s = dcpi_block_reader_create(&j->rt, &j->br, &err)))
    return dcpi_fail(&j->first, s, "%s", err.msg);
  j->pr.total = total_bytes(j);
  for (size_t t = 0; t < dcp_meta_tensor_count(j->m); t++) check_tensor(j, t);
  for (size_t b = 0; b < dcp_meta_bytes_count(j->m); b++) check_bytes(j, b);
  return j->rep.first_status;
}

dcp_status dcp_verify(dcp_ctx *ctx, const char *ckpt, dcp_verify_report *out) {
  if (!ctx) return DCP_EINVAL;
  verify_job j = {.ctx = ctx, .pr = {.ctx = ctx}};
  dcpi_err_clear(&j.first);
  dcp_status s;
  if (out && out->struct_size < offsetof(dcp_verify_report, problems))
    s = dcpi_fail(&j.first, DCP_EINVAL, "verify: report struct_size %u too small",
                  out->struct_size);
  else if (!ckpt || !*ckpt)
    s = dcpi_fail(&j.first, DCP_EINVAL, "verify: empty checkpoint path");
  else
    s = run(&j, ckpt);
  j.rep.first_status = s;
  snprintf(j.rep.first_problem, sizeof j.rep.first_problem, "%s", s ? j.first.msg : "");
  if (s && !j.rep.problems) j.rep.problems = 1;
  if (out) {
    size_t n = out->struct_size < sizeof j.rep ? out->struct_size : sizeof j.rep;
    j.rep.struct_size = out->struct_size;
    memcpy(out, &j.rep, n);
  }
  dcpi_block_reader_free(j.br);
  dcpi_cv_close(&j.rt);
  dcp_meta_free(j.m);
  return dcpi_ctx_report(ctx, &j.first);
}
