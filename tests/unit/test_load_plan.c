/* test_load_plan.c — random save layout → random load layout: copying the
 * plan's byte runs from synthetic saved chunks (cut out of a global
 * reference tensor) into destination buffers reproduces the reference byte
 * for byte; plus every error of the planner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "core/ctx.h"
#include "model/box.h"
#include "model/layout.h"
#include "model/state.h"
#include "planner/load_plan.h"

#define MAXB 4096 /* boxes per partition */

typedef struct boxset {
  uint32_t nd;
  size_t n;
  int64_t off[MAXB * 4], sz[MAXB * 4];
} boxset;

static void push(boxset *b, const int64_t *o, const int64_t *s) {
  assert_true(b->n < MAXB);
  if (b->nd) memcpy(b->off + b->n * b->nd, o, b->nd * sizeof *o);
  if (b->nd) memcpy(b->sz + b->n * b->nd, s, b->nd * sizeof *s);
  b->n++;
}

/* Distinct boxes of a random layout (mesh 1..3 dims, random tensor_map,
 * uneven ceil-divided splits, empty shards kept once). */
static void layout_partition(tu_rng *r, const int64_t *shape, boxset *b) {
  uint32_t mnd = (uint32_t)tu_rng_range(r, 1, 3), map[4] = {0};
  int64_t mesh[3];
  for (uint32_t m = 0; m < mnd; m++) {
    mesh[m] = tu_rng_range(r, 1, 4);
    uint32_t d = b->nd ? (uint32_t)tu_rng_range(r, 0, b->nd) : 0;
    if (d < b->nd) map[d] |= 1u << m; /* d == nd: this mesh dim replicates */
  }
  dcp_layout *l;
  assert_int_equal(dcpi_layout_create(mnd, mesh, NULL, b->nd, map, &l, NULL), DCP_OK);
  for (int64_t p = 0; p < l->nranks; p++) {
    int64_t o[4], s[4];
    dcpi_layout_box_at(l, shape, p, o, s);
    int dup = 0;
    for (size_t i = 0; i < b->n && !dup; i++)
      dup = !memcmp(b->off + i * b->nd, o, b->nd * sizeof *o) &&
            !memcmp(b->sz + i * b->nd, s, b->nd * sizeof *s);
    if (!dup) push(b, o, s);
  }
  dcp_layout_free(l);
}

/* Flat sharding (ZeRO style): random cuts of the flat range, each piece
 * decomposed into boxes. */
static void flat_partition(tu_rng *r, const int64_t *shape, boxset *b) {
  int64_t numel, zero[4] = {0}, at = 0;
  dcpi_numel(b->nd, shape, &numel);
  int pieces = (int)tu_rng_range(r, 1, 9);
  for (int k = 0; k < pieces; k++) {
    int64_t len = k == pieces - 1 ? numel - at : tu_rng_range(r, 0, numel - at);
    int64_t o[7 * 4], s[7 * 4];
    size_t n;
    assert_int_equal(dcpi_flat_to_boxes(b->nd, zero, shape, at, len, o, s, 7, &n, NULL), DCP_OK);
    for (size_t i = 0; i < n; i++) push(b, o + i * b->nd, s + i * b->nd);
    at += len;
  }
}

/* Guillotine cuts: split a box in a random dim at a random place. */
static void split(tu_rng *r, boxset *b, int64_t *o, int64_t *s, int depth) {
  uint32_t d = b->nd ? (uint32_t)tu_rng_range(r, 0, b->nd - 1) : 0;
  if (!b->nd || depth == 0 || s[d] < 2 || tu_rng_range(r, 0, 3) == 0) {
    push(b, o, s);
    return;
  }
  int64_t cut = tu_rng_range(r, 1, s[d] - 1), o2[4], s2[4];
  memcpy(o2, o, sizeof o2);
  memcpy(s2, s, sizeof s2);
  s[d] = cut, o2[d] += cut, s2[d] -= cut;
  split(r, b, o, s, depth - 1);
  split(r, b, o2, s2, depth - 1);
}

static void random_partition(tu_rng *r, const int64_t *shape, boxset *b) {
  b->n = 0;
  int64_t o[4] = {0}, s[4];
  memcpy(s, shape, sizeof s);
  switch (tu_rng_range(r, 0, 2)) {
    case 0: layout_partition(r, shape, b); break;
    case 1: flat_partition(r, shape, b); break;
    default: split(r, b, o, s, 6); break;
  }
}

/* ---- a synthetic checkpoint --------------------------------------------- */

#define NT 3
static const dcp_dtype DTYPES[] = {DCP_U8, DCP_BF16, DCP_F32, DCP_F64};

typedef struct world {
  char fqn[NT][16];
  dcp_dtype dtype[NT];
  uint32_t nd;
  int64_t shape[NT][4];
  unsigned char *ref[NT]; /* the global tensors, row-major */
  boxset saved[NT], dest[NT];
  uint64_t *ids[NT];
  unsigned char **sdata[NT]; /* per saved chunk, cut out of ref */
  dcpi_saved_tensor st[NT];
} world;

/* Copy box (o, s) of tensor t's reference into buf (row-major in the box),
 * or compare it when check is set. */
static void box_bytes(const world *w, int t, const int64_t *o, const int64_t *s,
                      unsigned char *buf, int check) {
  size_t es = dcp_dtype_size(w->dtype[t]);
  int64_t numel, c[4], g[4];
  dcpi_numel(w->nd, s, &numel);
  for (int64_t i = 0; i < numel; i++) {
    int64_t rest = i;
    for (uint32_t d = w->nd; d-- > 0;) c[d] = rest % s[d], rest /= s[d];
    for (uint32_t d = 0; d < w->nd; d++) g[d] = o[d] + c[d];
    const unsigned char *src = w->ref[t] + (size_t)tu_linear(w->nd, w->shape[t], g) * es;
    if (check)
      assert_memory_equal(buf + (size_t)i * es, src, es);
    else
      memcpy(buf + (size_t)i * es, src, es);
  }
}

static void make_world(tu_rng *r, world *w) {
  memset(w, 0, sizeof *w);
  w->nd = (uint32_t)tu_rng_range(r, 0, 3);
  for (int t = 0; t < NT; t++) {
    snprintf(w->fqn[t], sizeof w->fqn[t], "layer.%d.w", t); /* sorted by strcmp */
    w->dtype[t] = DTYPES[tu_rng_range(r, 0, 3)];
    for (uint32_t d = 0; d < w->nd; d++) w->shape[t][d] = tu_rng_range(r, 0, 9);
    int64_t numel;
    dcpi_numel(w->nd, w->shape[t], &numel);
    size_t bytes = (size_t)numel * dcp_dtype_size(w->dtype[t]);
    w->ref[t] = malloc(bytes + 1);
    for (size_t i = 0; i < bytes; i++) w->ref[t][i] = (unsigned char)tu_rng_next(r);
    w->saved[t].nd = w->dest[t].nd = w->nd;
    random_partition(r, w->shape[t], &w->saved[t]);
    random_partition(r, w->shape[t], &w->dest[t]);
    size_t n = w->saved[t].n;
    w->ids[t] = malloc((n + 1) * sizeof *w->ids[t]);
    w->sdata[t] = malloc((n + 1) * sizeof *w->sdata[t]);
    for (size_t i = 0; i < n; i++) {
      const int64_t *o = w->saved[t].off + i * w->nd, *s = w->saved[t].sz + i * w->nd;
      int64_t ne;
      dcpi_numel(w->nd, s, &ne);
      w->ids[t][i] = 1000 * (uint64_t)t + i * 7 + 3;
      w->sdata[t][i] = malloc((size_t)ne * dcp_dtype_size(w->dtype[t]) + 1);
      box_bytes(w, t, o, s, w->sdata[t][i], 0);
    }
    w->st[t] = (dcpi_saved_tensor){w->fqn[t], w->dtype[t], w->nd, w->shape[t], n,
                                   w->saved[t].off, w->saved[t].sz, w->ids[t], NULL, NULL};
  }
}

static void free_world(world *w) {
  for (int t = 0; t < NT; t++) {
    for (size_t i = 0; i < w->saved[t].n; i++) free(w->sdata[t][i]);
    free(w->sdata[t]);
    free(w->ids[t]);
    free(w->ref[t]);
  }
}

/* The destination side: every dest box of every tensor, interleaved by a
 * random permutation so chunk order differs from tensor order. */
typedef struct request {
  dcpi_load_tensor lt[NT];
  dcpi_load_chunk ch[NT * MAXB];
  size_t nch;
  int ct[NT * MAXB];   /* tensor of chunk */
  size_t ci[NT * MAXB]; /* index in that tensor's dest boxset */
} request;

static void make_request(tu_rng *r, const world *w, request *q) {
  q->nch = 0;
  for (int t = 0; t < NT; t++) {
    q->lt[t] = (dcpi_load_tensor){w->fqn[t], w->dtype[t], w->nd, w->shape[t]};
    for (size_t i = 0; i < w->dest[t].n; i++) {
      q->ct[q->nch] = t;
      q->ci[q->nch++] = i;
    }
  }
  for (size_t i = q->nch; i > 1; i--) {
    size_t j = (size_t)tu_rng_range(r, 0, (int64_t)i - 1), a = q->ci[i - 1];
    int b = q->ct[i - 1];
    q->ci[i - 1] = q->ci[j], q->ct[i - 1] = q->ct[j], q->ci[j] = a, q->ct[j] = b;
  }
  for (size_t k = 0; k < q->nch; k++) {
    const boxset *d = &w->dest[q->ct[k]];
    q->ch[k] = (dcpi_load_chunk){(uint32_t)q->ct[k], d->off + q->ci[k] * d->nd,
                                 d->sz + q->ci[k] * d->nd};
  }
}

/* Lookup callback over the world (exercises the non-array source). */
static dcp_status world_lookup(void *arg, const char *fqn, size_t len, dcpi_saved_tensor *out,
                               dcpi_err *err) {
  (void)err;
  const world *w = arg;
  for (int t = 0; t < NT; t++)
    if (strlen(w->fqn[t]) == len && !memcmp(w->fqn[t], fqn, len)) {
      *out = w->st[t];
      return DCP_OK;
    }
  return DCP_ENOTFOUND;
}

/* Check the overlap's own fields against its boxes. */
static void check_overlap(const world *w, const request *q, const dcpi_overlap *ov) {
  int t = (int)ov->tensor;
  const dcpi_load_chunk *c = &q->ch[ov->dest_chunk];
  const int64_t *so = w->saved[t].off + ov->saved_chunk * w->nd;
  const int64_t *ss = w->saved[t].sz + ov->saved_chunk * w->nd;
  assert_int_equal(ov->tensor, c->tensor);
  assert_int_equal(ov->saved_id, w->ids[t][ov->saved_chunk]);
  assert_int_equal(ov->elem_size, dcp_dtype_size(w->dtype[t]));
  int64_t n = 1;
  for (uint32_t d = 0; d < w->nd; d++) {
    assert_true(ov->size[d] > 0);
    assert_int_equal(ov->dest_offset[d], ov->offset[d] - c->offset[d]);
    assert_int_equal(ov->src_offset[d], ov->offset[d] - so[d]);
    assert_int_equal(ov->dest_size[d], c->size[d]);
    assert_int_equal(ov->src_size[d], ss[d]);
    assert_true(ov->offset[d] >= c->offset[d] && ov->offset[d] >= so[d]);
    assert_true(ov->offset[d] + ov->size[d] <= c->offset[d] + c->size[d]);
    assert_true(ov->offset[d] + ov->size[d] <= so[d] + ss[d]);
    n *= ov->size[d];
  }
  assert_int_equal(ov->bytes, n * ov->elem_size);
}

/* Copy through the runs; returns the bytes copied. Every run must lie in
 * [src_first, src_last), the first starts it and the last ends it. */
static int64_t copy_overlap(const world *w, const dcpi_overlap *ov, unsigned char *dest,
                            unsigned char *written) {
  dcpi_run_iter it;
  dcpi_run run;
  int64_t total = 0, nruns = 0, last_end = -1;
  const unsigned char *src = w->sdata[ov->tensor][ov->saved_chunk];
  dcpi_run_iter_init(&it, ov);
  while (dcpi_run_iter_next(&it, &run)) {
    assert_true(run.len > 0);
    if (nruns == 0) assert_int_equal(run.src_off, ov->src_first);
    assert_true(run.src_off >= ov->src_first && run.src_off + run.len <= ov->src_last);
    assert_true(run.src_off > last_end - 1 || nruns == 0);
    memcpy(dest + run.dest_off, src + run.src_off, (size_t)run.len);
    for (int64_t b = 0; b < run.len; b++) written[run.dest_off + b]++;
    last_end = run.src_off + run.len;
    total += run.len;
    nruns++;
  }
  assert_int_equal(last_end, ov->src_last);
  assert_int_equal(nruns, dcpi_overlap_run_count(ov));
  return total;
}

/* Apply the plan and compare every destination buffer with the reference. */
static void apply_and_check(const world *w, const request *q, const dcpi_load_plan *p) {
  assert_int_equal(p->nchunks, q->nch);
  int64_t total = 0;
  for (size_t k = 0; k < q->nch; k++) {
    int t = q->ct[k];
    int64_t ne;
    dcpi_numel(w->nd, q->ch[k].size, &ne);
    size_t bytes = (size_t)ne * dcp_dtype_size(w->dtype[t]);
    unsigned char *buf = malloc(bytes + 1), *written = calloc(bytes + 1, 1);
    memset(buf, 0xA5, bytes);
    for (size_t i = p->chunk_first[k]; i < p->chunk_first[k + 1]; i++) {
      const dcpi_overlap *ov = &p->overlaps[i];
      assert_int_equal(ov->dest_chunk, k);
      if (i > p->chunk_first[k]) assert_true(ov->saved_chunk > p->overlaps[i - 1].saved_chunk);
      check_overlap(w, q, ov);
      total += copy_overlap(w, ov, buf, written);
    }
    for (size_t b = 0; b < bytes; b++) assert_int_equal(written[b], 1);
    box_bytes(w, t, q->ch[k].offset, q->ch[k].size, buf, 1);
    free(buf);
    free(written);
  }
  assert_int_equal(p->chunk_first[q->nch], p->noverlaps);
  assert_int_equal(p->total_bytes, total);
}

static void test_random_reshard(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(21));
  world *w = malloc(sizeof *w);
  request *q = malloc(sizeof *q);
  for (int it = 0; it < 1500; it++) {
    make_world(&r, w);
    make_request(&r, w, q);
    dcpi_saved_source src = {.tensors = w->st, .ntensors = NT};
    if (it % 2) src = (dcpi_saved_source){.lookup = world_lookup, .arg = w};
    dcpi_load_plan *p;
    dcpi_err err;
    dcpi_err_clear(&err);
    dcp_status rc = dcpi_load_plan_build(q->lt, NT, q->ch, q->nch, &src, &p, &err);
    if (rc) fail_msg("iteration %d: %s", it, err.msg);
    apply_and_check(w, q, p);
    dcpi_load_plan_free(p);
    free_world(w);
  }
  free(w);
  free(q);
}

/* A row-parallel / column-parallel reshard with known numbers: 2 saved
 * column halves, 1 dest box of rows 1..3 → 2 overlaps, 2 runs each of 2
 * elements, spans precise. */
static void test_known_case(void **state) {
  (void)state;
  int64_t shape[2] = {4, 4};
  int64_t so[] = {0, 0, 0, 2}, ss[] = {4, 2, 4, 2};
  dcpi_saved_tensor st = {"w", DCP_F32, 2, shape, 2, so, ss, NULL, NULL, NULL};
  dcpi_saved_source src = {.tensors = &st, .ntensors = 1};
  dcpi_load_tensor lt = {"w", DCP_F32, 2, shape};
  int64_t o[2] = {1, 0}, s[2] = {2, 4};
  dcpi_load_chunk ch = {0, o, s};
  dcpi_load_plan *p;
  assert_int_equal(dcpi_load_plan_build(&lt, 1, &ch, 1, &src, &p, NULL), DCP_OK);
  assert_int_equal(p->noverlaps, 2);
  const dcpi_overlap *a = &p->overlaps[0], *b = &p->overlaps[1];
  assert_int_equal(a->saved_id, 0);
  assert_int_equal(b->saved_id, 1);
  assert_int_equal(a->src_first, 2 * 4);      /* row 1 of a 2-wide chunk */
  assert_int_equal(a->src_last, 3 * 2 * 4);   /* through row 2 */
  assert_int_equal(b->dest_offset[1], 2);
  assert_int_equal(dcpi_overlap_run_count(a), 2);
  dcpi_run_iter it;
  dcpi_run run;
  dcpi_run_iter_init(&it, b);
  assert_true(dcpi_run_iter_next(&it, &run));
  assert_int_equal(run.dest_off, 2 * 4);
  assert_int_equal(run.src_off, 2 * 4);
  assert_int_equal(run.len, 2 * 4);
  assert_true(dcpi_run_iter_next(&it, &run));
  assert_int_equal(run.dest_off, (4 + 2) * 4);
  assert_false(dcpi_run_iter_next(&it, &run));
  dcpi_load_plan_free(p);
  /* full-width rows merge into one run */
  int64_t so2[] = {0, 0}, ss2[] = {4, 4};
  st = (dcpi_saved_tensor){"w", DCP_F32, 2, shape, 1, so2, ss2, NULL, NULL, NULL};
  assert_int_equal(dcpi_load_plan_build(&lt, 1, &ch, 1, &src, &p, NULL), DCP_OK);
  assert_int_equal(p->noverlaps, 1);
  assert_int_equal(dcpi_overlap_run_count(&p->overlaps[0]), 1);
  dcpi_run_iter_init(&it, &p->overlaps[0]);
  assert_true(dcpi_run_iter_next(&it, &run));
  assert_int_equal(run.src_off, 16);
  assert_int_equal(run.len, 32);
  dcpi_load_plan_free(p);
}

/* The state entry: chunk indices are the state's, data pointers usable. */
static void test_from_state(void **state) {
  (void)state;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  dcp_ctx *ctx;
  dcp_state *stt;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  assert_int_equal(dcp_state_create(ctx, &stt), DCP_OK);
  int64_t shape[1] = {10};
  uint16_t ref[10], got[10];
  for (int i = 0; i < 10; i++) ref[i] = (uint16_t)(i * 311 + 7);
  assert_int_equal(dcp_state_add_tensor(stt, "b", DCP_BF16, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(stt, "a", DCP_BF16, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_flat(stt, "b", NULL, 3, 7, got + 3), DCP_OK);
  assert_int_equal(dcp_state_add_flat(stt, "a", NULL, 0, 10, got), DCP_OK);
  assert_int_equal(dcp_state_add_flat(stt, "b", NULL, 0, 3, got), DCP_OK);
  int64_t so[] = {0, 4}, ss[] = {4, 6};
  dcpi_saved_tensor st[2] = {{"a", DCP_BF16, 1, shape, 2, so, ss, NULL, NULL, NULL},
                             {"b", DCP_BF16, 1, shape, 2, so, ss, NULL, NULL, NULL}};
  dcpi_saved_source src = {.tensors = st, .ntensors = 2};
  dcpi_load_plan *p;
  assert_int_equal(dcpi_load_plan_from_state(stt, &src, &p, NULL), DCP_OK);
  assert_int_equal(p->nchunks, 3);
  /* apply for tensor b only (chunks 0 and 2), from ref */
  memset(got, 0, sizeof got);
  for (size_t i = 0; i < p->noverlaps; i++) {
    const dcpi_overlap *ov = &p->overlaps[i];
    if (ov->tensor != 0) continue;
    dcpi_run_iter it;
    dcpi_run run;
    dcpi_run_iter_init(&it, ov);
    unsigned char *d = stt->chunks[ov->dest_chunk].data;
    const unsigned char *s = (const unsigned char *)(ref + so[ov->saved_chunk]);
    while (dcpi_run_iter_next(&it, &run)) memcpy(d + run.dest_off, s + run.src_off, (size_t)run.len);
  }
  assert_memory_equal(got, ref, sizeof ref);
  dcpi_load_plan_free(p);
  dcp_state_free(stt);
  dcp_ctx_free(ctx);
}

/* ---- errors --------------------------------------------------------------- */

typedef struct one {
  int64_t shape[2];
  int64_t so[8], ss[8];
  dcpi_saved_tensor st;
  dcpi_saved_source src;
  dcpi_load_tensor lt;
  int64_t o[2], s[2];
  dcpi_load_chunk ch;
} one;

/* Saved: an 8x6 F32 tensor in two row halves; dest: the whole tensor. */
static void one_init(one *x) {
  memset(x, 0, sizeof *x);
  x->shape[0] = 8, x->shape[1] = 6;
  int64_t so[] = {0, 0, 4, 0}, ss[] = {4, 6, 4, 6};
  memcpy(x->so, so, sizeof so);
  memcpy(x->ss, ss, sizeof ss);
  x->st = (dcpi_saved_tensor){"model.w", DCP_F32, 2, x->shape, 2, x->so, x->ss, NULL, NULL, NULL};
  x->src = (dcpi_saved_source){.tensors = &x->st, .ntensors = 1};
  x->lt = (dcpi_load_tensor){"model.w", DCP_F32, 2, x->shape};
  x->s[0] = 8, x->s[1] = 6;
  x->ch = (dcpi_load_chunk){0, x->o, x->s};
}

static dcp_status run_one(one *x, dcpi_err *err) {
  dcpi_load_plan *p = (dcpi_load_plan *)1;
  dcpi_err_clear(err);
  dcp_status rc = dcpi_load_plan_build(&x->lt, 1, &x->ch, 1, &x->src, &p, err);
  if (rc) assert_null(p);
  dcpi_load_plan_free(p);
  return rc;
}

static void test_errors(void **state) {
  (void)state;
  one x;
  dcpi_err err;
  one_init(&x);
  assert_int_equal(run_one(&x, &err), DCP_OK);

  x.lt.fqn = "model.v"; /* not in the checkpoint */
  assert_int_equal(run_one(&x, &err), DCP_ENOTFOUND);
  assert_non_null(strstr(err.msg, "model.v"));
  x.src = (dcpi_saved_source){.lookup = NULL, .tensors = NULL};
  assert_int_equal(run_one(&x, &err), DCP_ENOTFOUND);

  one_init(&x);
  x.lt.dtype = DCP_BF16;
  assert_int_equal(run_one(&x, &err), DCP_EMISMATCH);
  assert_non_null(strstr(err.msg, "model.w"));
  assert_non_null(strstr(err.msg, "F32"));
  assert_non_null(strstr(err.msg, "BF16"));

  one_init(&x);
  int64_t other[2] = {8, 7};
  x.lt.shape = other;
  x.s[1] = 7;
  assert_int_equal(run_one(&x, &err), DCP_EMISMATCH);
  assert_non_null(strstr(err.msg, "[8, 6]"));
  assert_non_null(strstr(err.msg, "[8, 7]"));
  one_init(&x);
  x.lt.ndim = 1, x.s[0] = 8;
  assert_int_equal(run_one(&x, &err), DCP_EMISMATCH);

  one_init(&x); /* drop the second half: 24 elements missing */
  x.st.nchunks = 1;
  assert_int_equal(run_one(&x, &err), DCP_EINCOMPLETE);
  assert_non_null(strstr(err.msg, "model.w"));
  assert_non_null(strstr(err.msg, "[0:8, 0:6]"));
  assert_non_null(strstr(err.msg, "24"));
  x.st.nchunks = 0;
  assert_int_equal(run_one(&x, &err), DCP_EINCOMPLETE);
  x.s[0] = 0; /* a zero-size box needs nothing */
  assert_int_equal(run_one(&x, &err), DCP_OK);

  one_init(&x); /* a saved chunk outside the shape */
  x.ss[2] = 5;
  assert_int_equal(run_one(&x, &err), DCP_ECORRUPT);
  one_init(&x); /* overlapping saved chunks that over-cover */
  x.so[2] = 3, x.ss[2] = 5;
  assert_int_equal(run_one(&x, &err), DCP_ECORRUPT);

  one_init(&x); /* dest box outside the shape */
  x.o[0] = 1;
  assert_int_equal(run_one(&x, &err), DCP_EBOUNDS);
  one_init(&x);
  x.ch.tensor = 1;
  assert_int_equal(run_one(&x, &err), DCP_EINVAL);
  one_init(&x);
  x.lt.dtype = DCP_DTYPE_INVALID;
  assert_int_equal(run_one(&x, &err), DCP_EINVAL);

  one_init(&x); /* an unsorted array */
  dcpi_saved_tensor two[2] = {x.st, x.st};
  two[0].fqn = "z";
  x.src = (dcpi_saved_source){.tensors = two, .ntensors = 2};
  assert_int_equal(run_one(&x, &err), DCP_EINVAL);
  assert_int_equal(dcpi_load_plan_build(NULL, 0, NULL, 0, &x.src, NULL, &err), DCP_EINVAL);
}

/* The lookup's own errors pass through with its message. */
static dcp_status corrupt_lookup(void *arg, const char *fqn, size_t len, dcpi_saved_tensor *out,
                                 dcpi_err *err) {
  (void)arg, (void)len, (void)out;
  return dcpi_fail(err, DCP_ECORRUPT, "chunk list of '%s' is malformed", fqn);
}

static void test_lookup_error(void **state) {
  (void)state;
  one x;
  dcpi_err err;
  one_init(&x);
  x.src = (dcpi_saved_source){.lookup = corrupt_lookup};
  assert_int_equal(run_one(&x, &err), DCP_ECORRUPT);
  assert_non_null(strstr(err.msg, "malformed"));
}

/* A tensor with no chunks (or only empty ones) is still checked. */
static void test_no_chunks_still_checked(void **state) {
  (void)state;
  one x;
  dcpi_err err;
  one_init(&x);
  x.lt.fqn = "missing";
  dcpi_load_plan *p;
  assert_int_equal(dcpi_load_plan_build(&x.lt, 1, NULL, 0, &x.src, &p, &err), DCP_ENOTFOUND);
  x.lt.fqn = "model.w";
  assert_int_equal(dcpi_load_plan_build(&x.lt, 1, NULL, 0, &x.src, &p, &err), DCP_OK);
  assert_int_equal(p->noverlaps, 0);
  dcpi_load_plan_free(p);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_reshard),  cmocka_unit_test(test_known_case),
      cmocka_unit_test(test_from_state),      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_lookup_error),    cmocka_unit_test(test_no_chunks_still_checked),
  };
  return TU_RUN(tests, NULL, NULL);
}
