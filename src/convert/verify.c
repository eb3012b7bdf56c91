/* verify.c — dcp_verify: every block of a checkpoint read and checked,
 * every tensor exactly covered by its chunks, and no two refs stored in
 * the same bytes. For a save without a
 * collective (<rank>.metadata, merged when opened) that includes the copies
 * the merged view leaves out, so every stored byte is checked. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/sized.h"
#include "base/strmap.h"
#include "convert/cv.h"
#include "metadata/view.h"
#include "runtime/files.h"
#include "runtime/local_save.h"
#include "runtime/parts.h"

/* One stored range of a ref: [lo, hi) of file, and whose it is (a chunk of
 * tensor t, or with t UINT32_MAX bytes item `index`). */
typedef struct span {
  uint32_t file, t;
  uint64_t lo, hi;
  size_t index;
} span;

typedef struct verify_job {
  dcp_ctx *ctx;
  dcp_meta *m;
  dcpi_rt rt;
  dcpi_block_reader *br;
  dcp_verify_report rep;
  dcpi_cv_progress pr;
  dcpi_err first;
  span *spans; /* every chunk's and bytes item's stored range, as checked */
  size_t nspans, cap_spans;
  bool spans_lost; /* out of memory collecting them */
} verify_job;

/* Count a problem; the first one is kept. A missing data file means the
 * checkpoint is incomplete. */
static void problem(verify_job *j, dcp_status rc, const dcpi_err *err) {
  if (rc == DCP_ENOTFOUND) rc = DCP_EINCOMPLETE;
  j->rep.problems++;
  if (j->rep.first_status) return;
  j->rep.first_status = rc;
  dcpi_fail(&j->first, rc, "%s", err->msg[0] ? err->msg : dcp_strerror(rc));
}

/* Record where ref's bytes are stored (of tensor t's chunk `index`, or
 * with t UINT32_MAX bytes item `index`), for check_overlaps. */
static void add_span(verify_job *j, const dcp_storage_ref *ref, uint32_t t, size_t index) {
  if (!ref->stored_length || j->spans_lost) return;
  if (DCPI_RESERVE(j->spans, j->cap_spans, j->nspans + 1)) {
    j->spans_lost = true;
    problem(j, DCP_ENOMEM, &(dcpi_err){DCP_ENOMEM, "verify: out of memory"});
    return;
  }
  uint64_t hi = ref->offset + ref->stored_length;
  j->spans[j->nspans++] =
      (span){ref->file, t, ref->offset, hi < ref->offset ? UINT64_MAX : hi, index};
}

static dcp_status count(void *arg, uint64_t raw_offset, const uint8_t *data, size_t len,
                        dcpi_err *err) {
  (void)raw_offset, (void)data, (void)err;
  verify_job *j = arg;
  j->rep.bytes += len;
  dcpi_cv_progress_add(&j->pr, len);
  return DCP_OK;
}

static void check_ref_in(verify_job *j, const dcp_meta *m, uint32_t file,
                         const dcp_storage_ref *ref, const char *what) {
  const char *name;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status rc = dcp_meta_file(m, file, &name);
  if (!rc) rc = dcpi_block_read(j->br, name, ref, 0, ref->raw_length, what, count, j, &err);
  else dcpi_fail(&err, DCP_ECORRUPT, "%s: no file %u", what, file);
  j->rep.blocks += ref->block_count;
  if (rc) problem(j, rc, &err);
}

static void check_ref(verify_job *j, uint32_t file, const dcp_storage_ref *ref,
                      const char *what) {
  check_ref_in(j, j->m, file, ref, what);
}

static void check_tensor(verify_job *j, size_t ti) {
  dcp_tensor_info t;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_meta_tensor(j->m, ti, &t);
  j->rep.tensors++;
  dcp_status rc = dcpi_cv_check_coverage(j->m, ti, &err);
  if (rc) problem(j, rc, &err);
  for (size_t c = 0; c < t.chunk_count; c++) {
    dcp_chunk_info ci;
    if ((rc = dcp_meta_chunk(j->m, ti, c, &ci))) {
      dcpi_fail(&err, rc, "tensor '%s': chunk %zu cannot be decoded", t.fqn, c);
      problem(j, rc, &err);
      return;
    }
    char what[DCPI_ERR_MSG_MAX / 2];
    dcpi_cv_describe_box(what, sizeof what, t.fqn, &ci.box);
    j->rep.chunks++;
    check_ref(j, ci.ref.file, &ci.ref, what);
    add_span(j, &ci.ref, (uint32_t)ti, c);
  }
}

static void check_bytes(verify_job *j, size_t bi) {
  dcp_bytes_info b;
  dcp_meta_bytes(j->m, bi, &b);
  char what[DCPI_ERR_MSG_MAX / 2];
  snprintf(what, sizeof what, "bytes item '%.200s' (rank %d)", b.key, (int)b.rank);
  j->rep.bytes_items++;
  check_ref(j, b.ref.file, &b.ref, what);
  add_span(j, &b.ref, UINT32_MAX, bi);
}

static int cmp_span(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  if (a->file != b->file) return a->file < b->file ? -1 : 1;
  if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
  return (a->hi > b->hi) - (a->hi < b->hi);
}

static void describe_span(verify_job *j, const span *x, char *buf, size_t cap) {
  if (x->t == UINT32_MAX) {
    dcp_bytes_info b;
    dcp_meta_bytes(j->m, x->index, &b);
    snprintf(buf, cap, "bytes item '%.100s' (rank %d)", b.key, (int)b.rank);
    return;
  }
  dcp_tensor_info t;
  dcp_chunk_info c;
  dcp_meta_tensor(j->m, x->t, &t);
  dcp_meta_chunk(j->m, x->t, x->index, &c);
  dcpi_cv_describe_box(buf, cap, t.fqn, &c.box);
}

/* Every chunk and bytes item is written once, to a place of its own: two
 * refs that share stored bytes (a forged .metadata: each block checksum
 * matches, the values are another item's) make the checkpoint corrupt. */
static void check_overlaps(verify_job *j) {
  span *v = j->spans;
  if (j->spans_lost) return;
  dcpi_sort(v, j->nspans, sizeof *v, cmp_span);
  for (size_t i = 1; i < j->nspans; i++) {
    if (v[i].file != v[i - 1].file || v[i].lo >= v[i - 1].hi) continue;
    char a[DCPI_ERR_MSG_MAX / 3], b[DCPI_ERR_MSG_MAX / 3];
    const char *name = "";
    dcpi_err err;
    describe_span(j, &v[i - 1], a, sizeof a);
    describe_span(j, &v[i], b, sizeof b);
    dcp_meta_file(j->m, v[i].file, &name);
    dcpi_fail(&err, DCP_ECORRUPT, "%s and %s are stored in the same bytes of %s (from %llu)", a,
              b, name, (unsigned long long)v[i].lo);
    problem(j, DCP_ECORRUPT, &err);
  }
}

/* ---- copies only the per-rank files hold ------------------------------- */

/* Where a ref's bytes start, as a key: the file's name, NUL, the offset. */
static size_t place_key(const dcp_meta *m, const dcp_storage_ref *ref, char *buf, size_t cap) {
  const char *name = "";
  dcp_meta_file(m, ref->file, &name);
  int n = snprintf(buf, cap, "%s%c%llu", name, 0, (unsigned long long)ref->offset);
  return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

typedef struct places {
  dcpi_strmap map;
  char **keys; /* owned copies the map points at */
  size_t nkeys, cap;
} places;

/* Record where ref's bytes start. Returns 1 when that place is new, 0 when
 * it was recorded before, DCP_ENOMEM. */
static int places_add(places *p, const dcp_meta *m, const dcp_storage_ref *ref) {
  char key[300];
  size_t n = place_key(m, ref, key, sizeof key);
  uint32_t v;
  if (n == 0 || dcpi_strmap_get(&p->map, key, n, &v)) return 0;
  if (p->nkeys == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    char **k = realloc(p->keys, cap * sizeof *k);
    if (!k) return DCP_ENOMEM;
    p->keys = k, p->cap = cap;
  }
  char *copy = malloc(n);
  if (!copy) return DCP_ENOMEM;
  memcpy(copy, key, n);
  p->keys[p->nkeys++] = copy;
  return dcpi_strmap_put(&p->map, copy, n, 0, NULL) < 0 ? DCP_ENOMEM : 1;
}

static void places_free(places *p) {
  for (size_t i = 0; i < p->nkeys; i++) free(p->keys[i]);
  free(p->keys);
  dcpi_strmap_free(&p->map);
}

/* Record every ref of m in p; with verify, check each one not seen before.
 * Returns 0, or DCP_ENOMEM. */
static int each_ref(verify_job *j, dcp_meta *m, places *p, int verify) {
  for (size_t t = 0; t < dcp_meta_tensor_count(m); t++) {
    dcp_tensor_info ti;
    dcp_meta_tensor(m, t, &ti);
    for (size_t c = 0; c < ti.chunk_count; c++) {
      dcp_chunk_info ci;
      if (dcp_meta_chunk(m, t, c, &ci)) continue; /* reported for the merged view */
      int fresh = places_add(p, m, &ci.ref);
      if (fresh < 0) return fresh;
      if (!fresh || !verify) continue;
      char what[DCPI_ERR_MSG_MAX / 2];
      dcpi_cv_describe_box(what, sizeof what, ti.fqn, &ci.box);
      j->rep.chunks++;
      check_ref_in(j, m, ci.ref.file, &ci.ref, what);
    }
  }
  for (size_t b = 0; b < dcp_meta_bytes_count(m); b++) {
    dcp_bytes_info bi;
    dcp_meta_bytes(m, b, &bi);
    int fresh = places_add(p, m, &bi.ref);
    if (fresh < 0) return fresh;
    if (!fresh || !verify) continue;
    char what[DCPI_ERR_MSG_MAX / 2];
    snprintf(what, sizeof what, "bytes item '%.200s' (copy of rank %d's file)", bi.key,
             (int)bi.rank);
    j->rep.bytes_items++;
    check_ref_in(j, m, bi.ref.file, &bi.ref, what);
  }
  return 0;
}

/* The name of rank r's part of the save the merged view shows: of the
 * newest complete save (as the merge chose it), else the 0.2 name. */
static void part_name(const dcpi_part_save *sv, int32_t r, char *name) {
  const dcpi_part *pt = sv ? dcpi_parts_of_rank(sv, r) : NULL;
  if (pt) dcpi_name_part(name, pt->rank, pt->world, pt->seq, pt->tag);
  else snprintf(name, DCPI_NAME_MAX, DCPI_RANK_METADATA_FMT, (int)r);
}

/* A save without a collective: verify what the rank files hold beyond the
 * merged view (a chunk or replicated item several ranks wrote). */
static void check_rank_copies(verify_job *j) {
  uint64_t size;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (dcpi_rt_file_size(&j->rt, DCPI_METADATA_NAME, &size, &err) == DCP_OK) return;
  dcpi_parts parts;
  if (dcpi_parts_scan(&j->rt, &parts, &err)) memset(&parts, 0, sizeof parts);
  const dcpi_part_save *sv = dcpi_parts_newest_complete(&parts, 0);
  places p = {0};
  int rc = each_ref(j, j->m, &p, 0);
  for (int32_t r = 0; rc >= 0 && r < dcp_meta_world_size(j->m); r++) {
    char name[DCPI_NAME_MAX];
    uint8_t *data = NULL;
    size_t len = 0;
    dcp_meta *m = NULL;
    part_name(sv, r, name);
    if (dcpi_rt_read_file(&j->rt, name, &data, &len, &err) == DCP_OK &&
        dcp_meta_open_memory(j->ctx, data, len, &m) == DCP_OK)
      rc = each_ref(j, m, &p, 1);
    dcp_meta_free(m);
    free(data); /* a rank file that does not open failed the merge already */
  }
  if (rc < 0) problem(j, DCP_ENOMEM, &(dcpi_err){DCP_ENOMEM, "verify: out of memory"});
  places_free(&p);
  dcpi_parts_free(&parts);
}

/* Every data file is as long as the save recorded (format version 2): bytes
 * appended to one, or a cut in a region no block covers, are problems too. */
static void check_file_lengths(verify_job *j) {
  for (size_t f = 0; f < dcp_meta_file_count(j->m); f++) {
    const char *name;
    uint64_t want, have;
    dcpi_err err;
    dcpi_err_clear(&err);
    if (dcp_meta_file(j->m, f, &name) || dcp_meta_file_length(j->m, f, &want)) continue;
    dcp_status rc = dcpi_rt_file_size(&j->rt, name, &have, &err);
    if (rc == DCP_OK && have != want)
      rc = dcpi_fail(&err, DCP_ECORRUPT, "%s/%s is %llu bytes, the save wrote %llu (%s)",
                    j->rt.path, name, (unsigned long long)have, (unsigned long long)want,
                    have > want ? "bytes appended" : "cut short");
    if (rc) problem(j, rc, &err);
  }
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
  dcp_status rc = dcp_meta_open(j->ctx, ckpt, &j->m);
  if (rc) return dcpi_fail(&j->first, rc, "%s", dcp_ctx_last_error(j->ctx));
  if ((rc = dcpi_cv_open(&j->rt, j->ctx, ckpt, 0, &err)) ||
      (rc = dcpi_block_reader_create(&j->rt, &j->br, &err)))
    return dcpi_fail(&j->first, rc, "%s", err.msg);
  j->pr.total = total_bytes(j);
  dcpi_err whole;
  if ((rc = dcpi_meta_check_whole(j->m, &whole))) { /* the trailer, which no load reads */
    dcpi_fail(&err, rc, "%s/%s: %s", ckpt, DCPI_METADATA_NAME, whole.msg);
    problem(j, rc, &err);
  }
  for (size_t t = 0; t < dcp_meta_tensor_count(j->m); t++) check_tensor(j, t);
  for (size_t b = 0; b < dcp_meta_bytes_count(j->m); b++) check_bytes(j, b);
  check_rank_copies(j);
  check_file_lengths(j);
  check_overlaps(j);
  return j->rep.first_status;
}

dcp_status dcp_verify(dcp_ctx *ctx, const char *ckpt, dcp_verify_report *out) {
  if (!ctx) return DCP_EINVAL;
  verify_job j = {.ctx = ctx, .pr = {.ctx = ctx, .phase = DCP_PHASE_VERIFY}};
  dcpi_err_clear(&j.first);
  dcp_status rc;
  if (out && !DCPI_HAS_FIELD(out, dcp_verify_report, bytes))
    rc = dcpi_fail(&j.first, DCP_EINVAL, "verify: report struct_size %u too small",
                  out->struct_size);
  else if (!ckpt || !*ckpt)
    rc = dcpi_fail(&j.first, DCP_EINVAL, "verify: empty checkpoint path");
  else
    rc = run(&j, ckpt);
  j.rep.first_status = rc;
  snprintf(j.rep.first_problem, sizeof j.rep.first_problem, "%s", rc ? j.first.msg : "");
  if (rc && !j.rep.problems) j.rep.problems = 1;
  if (out) dcpi_sized_fill(out, &j.rep, sizeof j.rep);
  dcpi_block_reader_free(j.br);
  dcpi_cv_close(&j.rt);
  dcp_meta_free(j.m);
  free(j.spans);
  return dcpi_ctx_report(ctx, &j.first);
}
