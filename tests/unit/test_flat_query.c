/* test_flat_query.c — the FLAT form's arithmetic (model/grid.h): on random
 * shapes, outer cells and flat splits, the chunk count, the box of every
 * chunk index (seek, and stepping with next), the first chunk of every
 * cell, and the chunks meeting random boxes (query) equal what the plain
 * generation gives: every cell, every range, dcpi_flat_to_boxes, in that
 * order (format version 4's chunk order), the query checked against a scan
 * of all of them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/box.h"
#include "model/grid.h"
#include "testutil.h"

#define ND 4
#define MAXB 20000

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

typedef struct fcase {
  uint32_t nd;
  int64_t shape[ND];
  dcpi_flat fl;
  size_t n;
  int64_t *off, *sz;   /* the chunks in generation order */
  int64_t *cell_first; /* first chunk of each cell */
} fcase;

/* The reference: generate every box, cell by cell, range by range. */
static size_t generate(const dcpi_grid *g, int64_t f, fcase *c) {
  size_t n = 0;
  uint32_t nd = g->ndim;
  for (int64_t cell = 0; cell < g->count; cell++) {
    int64_t co[ND], cs[ND], numel;
    dcpi_grid_box(g, cell, co, cs);
    dcpi_numel(nd, cs, &numel);
    int64_t per = ceil_div(numel, f);
    if (c) c->cell_first[cell] = (int64_t)n;
    for (int64_t b = 0; b < numel; b += per) {
      int64_t bo[(2 * ND - 1) * ND], bs[(2 * ND - 1) * ND];
      size_t nb;
      dcpi_flat_to_boxes(nd, co, cs, b, numel - b < per ? numel - b : per, bo, bs, 2 * ND - 1, &nb,
                         NULL);
      if (c && n + nb <= MAXB) {
        memcpy(c->off + n * nd, bo, nb * nd * sizeof *bo);
        memcpy(c->sz + n * nd, bs, nb * nd * sizeof *bs);
      }
      n += nb;
    }
  }
  return n;
}

static bool make_case(tu_rng *rng, fcase *c) {
  int64_t n[ND], cs[ND], one[ND];
  dcpi_grid g;
  c->nd = (uint32_t)tu_rng_range(rng, 1, ND);
  for (uint32_t d = 0; d < c->nd; d++) {
    c->shape[d] = tu_rng_range(rng, 1, d == 0 ? 40 : 12);
    cs[d] = ceil_div(c->shape[d], tu_rng_range(rng, 1, 4));
    n[d] = ceil_div(c->shape[d], cs[d]);
    one[d] = 1;
  }
  if (dcpi_grid_init(&g, c->nd, c->shape, n, cs, one, 1000, NULL) != DCP_OK) return false;
  int64_t f = tu_rng_range(rng, 1, 3) == 1 ? tu_rng_range(rng, 1, 400) : tu_rng_range(rng, 1, 12);
  size_t want = generate(&g, f, NULL);
  if (want > MAXB) return false;
  c->off = malloc((want ? want : 1) * c->nd * sizeof *c->off);
  c->sz = malloc((want ? want : 1) * c->nd * sizeof *c->sz);
  c->cell_first = malloc((size_t)g.count * sizeof *c->cell_first);
  c->n = generate(&g, f, c);
  dcpi_err err;
  assert_int_equal(dcpi_flat_init(&c->fl, &g, f, (uint64_t)c->n, &err), DCP_OK);
  assert_int_equal(c->fl.count, (int64_t)c->n);
  if (c->n > 1) assert_int_equal(dcpi_flat_init(&c->fl, &g, f, c->n - 1, &err), DCP_ECORRUPT);
  assert_int_equal(dcpi_flat_init(&c->fl, &g, f, (uint64_t)c->n, &err), DCP_OK);
  return true;
}

static void free_case(fcase *c) { free(c->off), free(c->sz), free(c->cell_first); }

static void assert_box(const fcase *c, size_t i, const int64_t *o, const int64_t *s) {
  assert_memory_equal(o, c->off + i * c->nd, c->nd * sizeof *o);
  assert_memory_equal(s, c->sz + i * c->nd, c->nd * sizeof *s);
}

/* Count, seek, next and the cells' first chunks. */
static void test_flat_index(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(1919));
  size_t chunks = 0;
  for (int k = 0; k < 400; k++) {
    fcase c;
    if (!make_case(&rng, &c)) { k--; continue; }
    for (int64_t cell = 0; cell <= c.fl.cells.count; cell++)
      assert_int_equal(dcpi_flat_before_cell(&c.fl, cell),
                       cell < c.fl.cells.count ? c.cell_first[cell] : (int64_t)c.n);
    dcpi_flat_pos p;
    int64_t o[ND], s[ND];
    for (size_t i = 0; i < c.n; i += 1 + (size_t)tu_rng_range(&rng, 0, 3)) {
      dcpi_flat_seek(&c.fl, (int64_t)i, &p);
      dcpi_flat_box(&p, c.nd, o, s);
      assert_box(&c, i, o, s);
    }
    dcpi_flat_seek(&c.fl, 0, &p);
    for (size_t i = 0; i < c.n; i++) {
      dcpi_flat_box(&p, c.nd, o, s);
      assert_box(&c, i, o, s);
      assert_int_equal(dcpi_flat_next(&c.fl, &p), i + 1 < c.n);
    }
    chunks += c.n;
    free_case(&c);
  }
  printf("# 400 random flat forms, %zu chunks: count, seek, next, cells == generation\n", chunks);
}

typedef struct hits {
  int64_t idx[MAXB];
  size_t n;
  const fcase *c;
} hits;

static int on_hit(void *arg, int64_t index, const int64_t *off, const int64_t *size) {
  hits *h = arg;
  assert_true(index >= 0 && (size_t)index < h->c->n);
  assert_box(h->c, (size_t)index, off, size);
  assert_true(h->n == 0 || h->idx[h->n - 1] < index); /* ascending */
  h->idx[h->n++] = index;
  return 0;
}

/* Query == a scan of every chunk. */
static void test_flat_query_equals_scan(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(2024));
  static hits h;
  size_t found = 0;
  for (int k = 0; k < 300; k++) {
    fcase c;
    if (!make_case(&rng, &c)) { k--; continue; }
    for (int q = 0; q < 20; q++) {
      int64_t o[ND], s[ND];
      for (uint32_t d = 0; d < c.nd; d++) {
        int64_t a = tu_rng_range(&rng, 0, c.shape[d] - 1), b = tu_rng_range(&rng, 0, c.shape[d] - 1);
        if (a > b) { int64_t t = a; a = b; b = t; }
        o[d] = a, s[d] = b - a + 1;
      }
      h.n = 0, h.c = &c;
      assert_int_equal(dcpi_flat_query(&c.fl, o, s, on_hit, &h), 0);
      size_t want = 0;
      for (size_t i = 0; i < c.n; i++)
        if (dcpi_boxes_overlap(c.nd, c.off + i * c.nd, c.sz + i * c.nd, o, s)) {
          assert_true(want < h.n);
          assert_int_equal(h.idx[want], (int64_t)i);
          want++;
        }
      assert_int_equal(want, h.n);
      found += h.n;
    }
    free_case(&c);
  }
  printf("# 6000 random boxes: %zu chunks found, query == scan\n", found);
  assert_true(found > 10000);
}

/* Large cells: the counts are floor sums, not loops (a 2^40-element cell
 * cut into 10^6 ranges), checked against a count along one range. */
static void test_flat_large(void **state) {
  (void)state;
  int64_t shape[2] = {1 << 20, 1 << 20}, n[2] = {2, 1}, c[2] = {1 << 19, 1 << 20}, one[2] = {1, 1};
  dcpi_grid g;
  dcpi_flat fl;
  assert_int_equal(dcpi_grid_init(&g, 2, shape, n, c, one, 1000, NULL), DCP_OK);
  assert_int_equal(dcpi_flat_init(&fl, &g, 1000003, UINT64_MAX, NULL), DCP_OK);
  dcpi_flat_pos p;
  dcpi_flat_seek(&fl, fl.count - 1, &p);
  assert_int_equal(p.cell, 1);
  assert_int_equal(p.range, p.ranges - 1);
  assert_int_equal(p.box, (int64_t)p.nbox - 1);
  dcpi_flat_seek(&fl, fl.count / 2, &p);
  int64_t idx = p.index, o[2], s[2];
  dcpi_flat_box(&p, 2, o, s);
  assert_true(dcpi_flat_next(&fl, &p));
  assert_int_equal(p.index, idx + 1);
  printf("# 2 x 2^39 elements in 2 x 1000003 ranges: %lld chunks\n", (long long)fl.count);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_flat_index),
      cmocka_unit_test(test_flat_query_equals_scan),
      cmocka_unit_test(test_flat_large),
  };
  return TU_RUN(tests, NULL, NULL);
}
