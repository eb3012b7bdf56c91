/* test_load_plan_grid.c — load planning against a derived grid or FLAT
 * form (the saved side as a dcpi_grid or dcpi_flat, no box list, no index)
 * gives exactly the plan of the same chunks given as an explicit box list
 * (through the box index): same overlaps in the same order, field by
 * field, on random grids, flat splits and random destination boxes; and a
 * grid or form that disagrees with the tensor is DCP_ECORRUPT, not a wrong
 * plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/box.h"
#include "model/grid.h"
#include "planner/load_plan.h"
#include "testutil.h"

#define ND 3

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

typedef struct gcase {
  uint32_t ndim;
  int64_t shape[ND];
  dcpi_grid grid;
  dcpi_flat flat; /* used instead of grid when is_flat */
  bool is_flat;
  int64_t *off, *sz; /* the grid's boxes as a list */
  int64_t doff[64 * ND], dsz[64 * ND];
  size_t ndest;
} gcase;

static void make_dest(tu_rng *rng, gcase *c);

static void make_case(tu_rng *rng, gcase *c) {
  int64_t n[ND], cs[ND], k[ND];
  dcpi_err err;
  do {
    c->ndim = (uint32_t)tu_rng_range(rng, 1, ND);
    for (uint32_t d = 0; d < c->ndim; d++) {
      c->shape[d] = tu_rng_range(rng, 1, 60);
      cs[d] = ceil_div(c->shape[d], tu_rng_range(rng, 1, 6));
      n[d] = ceil_div(c->shape[d], cs[d]);
      k[d] = tu_rng_range(rng, 1, 4);
    }
  } while (dcpi_grid_init(&c->grid, c->ndim, c->shape, n, cs, k, 20000, &err) != DCP_OK);
  size_t cnt = (size_t)c->grid.count;
  c->is_flat = false;
  c->off = malloc(cnt * c->ndim * sizeof *c->off);
  c->sz = malloc(cnt * c->ndim * sizeof *c->sz);
  for (size_t i = 0; i < cnt; i++)
    dcpi_grid_box(&c->grid, (int64_t)i, c->off + i * c->ndim, c->sz + i * c->ndim);
  make_dest(rng, c);
}

/* A random FLAT form: the grid's outer cells (k = 1) cut into f flat
 * ranges each; its chunks listed the plain way (cell, range, boxes). */
static void make_flat_case(tu_rng *rng, gcase *c) {
  int64_t n[ND], cs[ND], one[ND] = {1, 1, 1}, f;
  size_t cnt;
  do {
    c->ndim = (uint32_t)tu_rng_range(rng, 1, ND);
    for (uint32_t d = 0; d < c->ndim; d++) {
      c->shape[d] = tu_rng_range(rng, 1, 30);
      cs[d] = ceil_div(c->shape[d], tu_rng_range(rng, 1, 4));
      n[d] = ceil_div(c->shape[d], cs[d]);
    }
    f = tu_rng_range(rng, 1, 40);
  } while (dcpi_grid_init(&c->grid, c->ndim, c->shape, n, cs, one, 20000, NULL) != DCP_OK ||
           dcpi_flat_init(&c->flat, &c->grid, f, 20000, NULL) != DCP_OK);
  cnt = (size_t)c->flat.count;
  c->is_flat = true;
  c->off = malloc(cnt * c->ndim * sizeof *c->off);
  c->sz = malloc(cnt * c->ndim * sizeof *c->sz);
  size_t at = 0;
  for (int64_t cell = 0; cell < c->grid.count; cell++) {
    int64_t co[ND], csz[ND], numel;
    dcpi_grid_box(&c->grid, cell, co, csz);
    dcpi_numel(c->ndim, csz, &numel);
    int64_t per = ceil_div(numel, f);
    for (int64_t b = 0; b < numel; b += per) {
      size_t nb;
      dcpi_flat_to_boxes(c->ndim, co, csz, b, numel - b < per ? numel - b : per,
                         c->off + at * c->ndim, c->sz + at * c->ndim, 2 * ND - 1, &nb, NULL);
      at += nb;
    }
  }
  assert_int_equal(at, cnt);
  make_dest(rng, c);
}

/* Random destination boxes, mostly non-empty. */
static void make_dest(tu_rng *rng, gcase *c) {
  c->ndest = (size_t)tu_rng_range(rng, 1, 64);
  for (size_t i = 0; i < c->ndest; i++)
    for (uint32_t d = 0; d < c->ndim; d++) {
      int64_t a = tu_rng_range(rng, 0, c->shape[d]), b = tu_rng_range(rng, 0, c->shape[d]);
      if (a > b) { int64_t t = a; a = b; b = t; }
      if (a == b && b < c->shape[d]) b++; /* mostly non-empty */
      c->doff[i * c->ndim + d] = a, c->dsz[i * c->ndim + d] = b - a;
    }
}

static dcpi_load_plan *plan(const gcase *c, bool use_grid, dcp_status want) {
  dcpi_load_tensor t = {"t", DCP_F32, c->ndim, c->shape};
  dcpi_load_chunk ch[64];
  for (size_t i = 0; i < c->ndest; i++)
    ch[i] = (dcpi_load_chunk){0, c->doff + i * c->ndim, c->dsz + i * c->ndim};
  dcpi_saved_tensor s = {.fqn = "t", .dtype = DCP_F32, .ndim = c->ndim, .shape = c->shape,
                         .nchunks = (size_t)(c->is_flat ? c->flat.count : c->grid.count)};
  if (use_grid && c->is_flat) s.flat = &c->flat;
  else if (use_grid) s.grid = &c->grid;
  else s.chunk_off = c->off, s.chunk_sz = c->sz;
  dcpi_saved_source src = {.tensors = &s, .ntensors = 1};
  dcpi_load_plan *p = NULL;
  dcpi_err err;
  assert_int_equal(dcpi_load_plan_build(&t, 1, ch, c->ndest, &src, &p, &err), want);
  return p;
}

static void same_plans(const dcpi_load_plan *a, const dcpi_load_plan *b, uint32_t nd) {
  assert_int_equal(a->noverlaps, b->noverlaps);
  assert_int_equal(a->total_bytes, b->total_bytes);
  for (size_t i = 0; i <= a->nchunks; i++) assert_int_equal(a->chunk_first[i], b->chunk_first[i]);
  for (size_t i = 0; i < a->noverlaps; i++) {
    const dcpi_overlap *x = &a->overlaps[i], *y = &b->overlaps[i];
    assert_int_equal(x->dest_chunk, y->dest_chunk);
    assert_int_equal(x->saved_chunk, y->saved_chunk);
    assert_int_equal(x->saved_id, y->saved_id);
    assert_int_equal(x->src_first, y->src_first);
    assert_int_equal(x->src_last, y->src_last);
    assert_int_equal(x->bytes, y->bytes);
    assert_memory_equal(x->offset, y->offset, nd * sizeof *x->offset);
    assert_memory_equal(x->size, y->size, nd * sizeof *x->size);
    assert_memory_equal(x->src_offset, y->src_offset, nd * sizeof *x->src_offset);
    assert_memory_equal(x->src_size, y->src_size, nd * sizeof *x->src_size);
  }
}

/* 500 random cases of make: the arithmetic plan equals the box-index one. */
static void derived_equals_list(void (*make)(tu_rng *, gcase *), uint64_t seed,
                                const char *what) {
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(seed));
  size_t overlaps = 0;
  for (int k = 0; k < 500; k++) {
    gcase c;
    make(&rng, &c);
    dcpi_load_plan *g = plan(&c, true, DCP_OK), *l = plan(&c, false, DCP_OK);
    same_plans(g, l, c.ndim);
    overlaps += g->noverlaps;
    dcpi_load_plan_free(g), dcpi_load_plan_free(l);
    free(c.off), free(c.sz);
  }
  printf("# 500 random %s: %zu overlaps, arithmetic query == box index\n", what, overlaps);
  assert_true(overlaps > 1000);
}

static void test_grid_equals_list(void **state) {
  (void)state;
  derived_equals_list(make_case, 1903, "grids");
}

static void test_flat_equals_list(void **state) {
  (void)state;
  derived_equals_list(make_flat_case, 1904, "flat forms");
}

/* A FLAT form over another shape than the tensor is corruption. */
static void test_flat_mismatch(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, 8);
  gcase c;
  make_flat_case(&rng, &c);
  c.flat.cells.extent[0] += 1;
  dcpi_load_plan *p = plan(&c, true, DCP_ECORRUPT);
  assert_null(p);
  free(c.off), free(c.sz);
}

/* A grid of another shape or count than the tensor is corruption. */
static void test_grid_mismatch(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, 7);
  gcase c;
  make_case(&rng, &c);
  c.grid.extent[0] += 1;
  dcpi_load_plan *p = plan(&c, true, DCP_ECORRUPT);
  assert_null(p);
  free(c.off), free(c.sz);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_grid_equals_list),
      cmocka_unit_test(test_grid_mismatch),
      cmocka_unit_test(test_flat_equals_list),
      cmocka_unit_test(test_flat_mismatch),
  };
  return TU_RUN(tests, NULL, NULL);
}
