/* test_layout_plan.c — per-rank planning of layout tensors
 * (planner/layout_plan.h) against the whole-plan builder: on random meshes
 * (permuted rank subsets of the world), tensor maps, uneven and empty
 * splits, replicas and split pieces, flat-sharded tensors (ranges of the
 * cells cut over the replicas), the union of every rank's locally
 * computed writes covers each tensor exactly once and equals the global
 * plan's items and owners; plus the rule's opt-out and bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "model/box.h"
#include "model/layout.h"
#include "planner/layout_plan.h"
#include "planner/save_plan.h"

#define MAXT 8

typedef struct pcase {
  int32_t world;
  dcpi_save_opts opts;
  size_t nt;
  dcpi_layout_tensor t[MAXT];
  char names[MAXT][32];
  int64_t shapes[MAXT][3];
  dcp_layout *layouts[MAXT];
} pcase;

/* A random subset of [0, world) of size n, in random order. */
static void random_ranks(tu_rng *r, int32_t world, int64_t n, int32_t *out) {
  int32_t all[64];
  for (int32_t i = 0; i < world; i++) all[i] = i;
  for (int32_t i = world; i > 1; i--) {
    int32_t k = (int32_t)tu_rng_range(r, 0, i - 1), x = all[i - 1];
    all[i - 1] = all[k], all[k] = x;
  }
  memcpy(out, all, (size_t)n * sizeof *out);
}

/* A random tensor_map over mesh_ndim dims for ndim tensor dims. */
static void random_map(tu_rng *r, uint32_t mesh_ndim, uint32_t ndim, uint32_t *map) {
  uint32_t used = 0;
  for (uint32_t d = 0; d < ndim; d++) {
    map[d] = 0;
    for (uint32_t m = 0; m < mesh_ndim; m++)
      if (!(used & (1u << m)) && tu_rng_range(r, 0, 2) == 0) map[d] |= 1u << m;
    used |= map[d];
  }
}

static void random_case(tu_rng *r, pcase *c) {
  memset(c, 0, sizeof *c);
  c->world = (int32_t)tu_rng_range(r, 1, 12);
  dcpi_save_opts_init(&c->opts);
  c->opts.block_size = (uint32_t)tu_rng_range(r, 1, 48); /* small: pieces get split */
  if (tu_rng_range(r, 0, 5) == 0) c->opts.policy = DCPI_BALANCE_LOWEST_RANK;
  c->nt = (size_t)tu_rng_range(r, 1, MAXT);
  for (size_t i = 0; i < c->nt; i++) {
    uint32_t mnd = (uint32_t)tu_rng_range(r, 1, 3);
    int64_t ms[3], n = 1;
    for (uint32_t m = 0; m < mnd; m++) {
      ms[m] = tu_rng_range(r, 1, 3);
      while (n * ms[m] > c->world) ms[m]--;
      if (ms[m] < 1) ms[m] = 1;
      n *= ms[m];
    }
    int32_t ranks[64];
    random_ranks(r, c->world, n, ranks);
    uint32_t nd = (uint32_t)tu_rng_range(r, 0, 3), map[3];
    random_map(r, mnd, nd, map);
    assert_int_equal(dcpi_layout_create(mnd, ms, ranks, nd, map, &c->layouts[i], NULL), DCP_OK);
    for (uint32_t d = 0; d < nd; d++) c->shapes[i][d] = tu_rng_range(r, 0, 3) ? tu_rng_range(r, 1, 11) : 0;
    snprintf(c->names[i], sizeof c->names[i], "t%zu.%c", i, (char)('a' + tu_rng_range(r, 0, 25)));
    c->t[i] = (dcpi_layout_tensor){.fqn = c->names[i], .fqn_len = strlen(c->names[i]),
                                   .dtype = (dcp_dtype)tu_rng_range(r, DCP_BOOL, DCP_C64),
                                   .ndim = nd, .shape = c->shapes[i], .layout = c->layouts[i],
                                   .flat = tu_rng_range(r, 0, 2) == 0};
    if (c->t[i].flat) { /* cut over a random subset of the dims that shard nothing (0: all) */
      uint32_t free_dims = ((1u << mnd) - 1) & ~dcpi_layout_sharding_dims(c->layouts[i]), asked = 0;
      for (uint32_t m = 0; m < mnd; m++)
        if ((free_dims & (1u << m)) && tu_rng_range(r, 0, 1)) asked |= 1u << m;
      assert_int_equal(dcpi_layout_flat_dims(c->layouts[i], asked, &c->t[i].flat_dims, NULL), DCP_OK);
    }
  }
}

static void case_free(pcase *c) {
  for (size_t i = 0; i < c->nt; i++) dcp_layout_free(c->layouts[i]);
}

/* Rank r's local plan: its box of every layout tensor whose mesh has it
 * (the boxes of its range for a flat one; marked), and the whole of a
 * hand-added replicated tensor "hand". */
static dcpi_local_plan *local_plan(const pcase *c, int32_t r) {
  dcpi_local_plan *lp;
  assert_int_equal(dcpi_local_plan_create(r, c->world, &c->opts, &lp, NULL), DCP_OK);
  for (size_t i = 0; i < c->nt; i++) {
    const dcpi_layout_tensor *t = &c->t[i];
    int64_t pos = dcpi_layout_position(t->layout, r), off[3], sz[3];
    if (pos < 0) continue;
    uint32_t ti;
    assert_int_equal(dcpi_local_plan_add_tensor(lp, t->fqn, t->dtype, t->ndim, t->shape, &ti, NULL),
                     DCP_OK);
    assert_int_equal(dcpi_local_plan_mark_layout(lp, ti, NULL), DCP_OK);
    if (t->flat) {
      int64_t fo[5 * 3], fs[5 * 3];
      size_t n;
      dcpi_layout_flat_boxes_at(t->layout, t->shape, pos, t->flat_dims, fo, fs, &n);
      for (size_t b = 0; b < n; b++)
        assert_int_equal(dcpi_local_plan_add_chunk(lp, ti, fo + b * t->ndim, fs + b * t->ndim, NULL),
                         DCP_OK);
      continue;
    }
    dcpi_layout_box_at(t->layout, t->shape, pos, off, sz);
    assert_int_equal(dcpi_local_plan_add_chunk(lp, ti, off, sz, NULL), DCP_OK);
  }
  int64_t hs[1] = {40}, ho[1] = {0};
  uint32_t hi;
  assert_int_equal(dcpi_local_plan_add_tensor(lp, "hand", DCP_F32, 1, hs, &hi, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_add_chunk(lp, hi, ho, hs, NULL), DCP_OK);
  assert_int_equal(dcpi_local_plan_finish(lp, NULL), DCP_OK);
  return lp;
}

static size_t tensor_of(const pcase *c, const char *fqn) {
  for (size_t i = 0; i < c->nt; i++)
    if (!strcmp(c->names[i], fqn)) return i;
  return SIZE_MAX;
}

typedef struct rank_writes {
  dcpi_layout_write *w;
  size_t n;
  uint8_t *matched;
} rank_writes;

/* The write of rank ws equal to item it of tensor ti; fails when none. */
static void match_item(const pcase *c, rank_writes *ws, size_t ti, const dcpi_gp_item *it) {
  uint32_t nd = c->t[ti].ndim;
  for (size_t k = 0; k < ws->n; k++) {
    const dcpi_layout_write *w = &ws->w[k];
    if (w->tensor != ti || ws->matched[k] || memcmp(w->box, it->offset, nd * 8) ||
        memcmp(w->box + nd, it->size, nd * 8))
      continue;
    assert_int_equal(w->nbytes, it->nbytes);
    assert_int_equal(w->npieces > 1, it->piece);
    if (it->piece) assert_int_equal(w->piece_offset, it->piece_offset);
    ws->matched[k] = 1;
    return;
  }
  fail_msg("tensor %s: owner %d has no write of a plan item", c->names[ti], it->owner);
}

/* Every element of every layout tensor is written exactly once. */
static void check_cover(const pcase *c, const rank_writes *rw) {
  for (size_t ti = 0; ti < c->nt; ti++) {
    const dcpi_layout_tensor *t = &c->t[ti];
    int64_t numel;
    dcpi_numel(t->ndim, t->shape, &numel);
    uint8_t *hits = calloc((size_t)numel + 1, 1);
    for (int32_t r = 0; r < c->world; r++)
      for (size_t k = 0; k < rw[r].n; k++) {
        const dcpi_layout_write *w = &rw[r].w[k];
        if (w->tensor != ti) continue;
        int64_t n;
        dcpi_numel(t->ndim, w->box + t->ndim, &n);
        for (int64_t e = 0; e < n; e++) { /* unravel e in the box */
          int64_t rest = e, lin = 0, co[3];
          for (uint32_t d = t->ndim; d-- > 0;) co[d] = rest % w->box[t->ndim + d], rest /= w->box[t->ndim + d];
          for (uint32_t d = 0; d < t->ndim; d++) lin = lin * t->shape[d] + w->box[d] + co[d];
          hits[lin]++;
        }
      }
    for (int64_t e = 0; e < numel; e++) assert_int_equal(hits[e], 1);
    free(hits);
  }
}

/* dcpi_layout_pieces: exactly the pieces the ranks write, each once; and
 * dcpi_piece_locate finds each from its offset, in a slot of its own. */
typedef struct piece_walk {
  const pcase *c;
  size_t ti, count;
  const rank_writes *rw;
  dcpi_piece_space ps;
  uint8_t *slots;
} piece_walk;

static uint64_t key_of(uint32_t nd, const int64_t *shape, const int64_t *off) {
  uint64_t k = 0;
  for (uint32_t d = 0; d < nd; d++) k = k * (uint64_t)shape[d] + (uint64_t)off[d];
  return k;
}

static void check_located(piece_walk *pw, const int64_t *box, int64_t nbytes) {
  const dcpi_layout_tensor *t = &pw->c->t[pw->ti];
  int64_t found[2 * DCP_MAX_NDIM], fb;
  uint64_t slot;
  assert_true(dcpi_piece_locate(&pw->ps, t, key_of(t->ndim, t->shape, box), found, &fb, &slot));
  assert_memory_equal(found, box, 2 * t->ndim * sizeof *box);
  assert_int_equal(fb, nbytes);
  assert_true(slot < pw->ps.nslots);
  assert_int_equal(pw->slots[slot], 0);
  pw->slots[slot] = 1;
}

static dcp_status on_piece(void *arg, const int64_t *box, int64_t nbytes, uint32_t piece,
                           uint32_t npieces) {
  piece_walk *pw = arg;
  uint32_t nd = pw->c->t[pw->ti].ndim;
  size_t found = 0;
  for (int32_t r = 0; r < pw->c->world; r++)
    for (size_t k = 0; k < pw->rw[r].n; k++) {
      const dcpi_layout_write *w = &pw->rw[r].w[k];
      if (w->tensor == pw->ti && !memcmp(w->box, box, 2 * nd * sizeof *box)) {
        assert_int_equal(w->nbytes, nbytes);
        assert_int_equal(w->piece, piece);
        assert_int_equal(w->npieces, npieces);
        found++;
      }
    }
  assert_int_equal(found, 1);
  check_located(pw, box, nbytes);
  pw->count++;
  return DCP_OK;
}

static void check_pieces(const pcase *c, const rank_writes *rw, size_t total) {
  size_t count = 0;
  for (size_t ti = 0; ti < c->nt; ti++) {
    const dcpi_layout_tensor *t = &c->t[ti];
    piece_walk pw = {.c = c, .ti = ti, .rw = rw};
    assert_int_equal(dcpi_piece_space_init(t, c->world, &c->opts, &pw.ps, NULL), DCP_OK);
    pw.slots = calloc(pw.ps.nslots + 1, 1);
    assert_int_equal(dcpi_layout_pieces(t, c->world, &c->opts, on_piece, &pw, NULL), DCP_OK);
    assert_int_equal(dcpi_piece_count(&pw.ps, t), pw.count);
    /* every other offset, and those past the tensor, start no piece */
    int64_t numel = 1, box[2 * DCP_MAX_NDIM], nb;
    for (uint32_t d = 0; d < t->ndim; d++) numel *= t->shape[d];
    size_t starts = 0;
    uint64_t slot;
    for (uint64_t k = 0; k < (uint64_t)numel + 3; k++)
      starts += dcpi_piece_locate(&pw.ps, t, k, box, &nb, &slot);
    assert_int_equal(starts, pw.count);
    free(pw.slots);
    count += pw.count;
  }
  assert_int_equal(count, total);
}

static void check_case(const pcase *c) {
  dcpi_local_plan *lps[16];
  for (int32_t r = 0; r < c->world; r++) lps[r] = local_plan(c, r);
  dcpi_global_plan *gp;
  dcpi_err err;
  dcpi_err_clear(&err);
  assert_int_equal(dcpi_global_plan_build((const dcpi_local_plan *const *)lps, (size_t)c->world,
                                          NULL, &gp, &err), DCP_OK);
  rank_writes rw[16];
  size_t total = 0;
  for (int32_t r = 0; r < c->world; r++) {
    assert_int_equal(dcpi_layout_plan_rank(c->t, c->nt, c->world, r, &c->opts, &rw[r].w, &rw[r].n,
                                           &err), DCP_OK);
    rw[r].matched = calloc(rw[r].n + 1, 1);
    total += rw[r].n;
  }
  size_t items = 0;
  for (size_t t = 0; t < dcpi_global_plan_tensor_count(gp); t++) {
    dcpi_gp_tensor gt;
    dcpi_global_plan_tensor(gp, t, &gt);
    size_t ti = tensor_of(c, gt.fqn);
    assert_int_equal(gt.layout, ti != SIZE_MAX);
    for (size_t i = gt.first_item; ti != SIZE_MAX && i < gt.first_item + gt.nitems; i++, items++) {
      dcpi_gp_item it;
      dcpi_global_plan_item(gp, i, &it);
      match_item(c, &rw[it.owner], ti, &it);
    }
  }
  assert_int_equal(items, total); /* and so every write matched one item */
  check_cover(c, rw);
  check_pieces(c, rw, total);
  for (int32_t r = 0; r < c->world; r++) {
    free(rw[r].w), free(rw[r].matched);
    dcpi_local_plan_free(lps[r]);
  }
  dcpi_global_plan_free(gp);
}

static void test_random_layouts(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, 19);
  for (int k = 0; k < 600; k++) {
    pcase c;
    random_case(&r, &c);
    check_case(&c);
    case_free(&c);
  }
}

/* A 4-row box replicated over 4 ranks, 8 bytes a row, block size 1: split
 * into 4 pieces written by 4 distinct ranks (the rule rotates by piece). */
static void test_split_spreads(void **state) {
  (void)state;
  int64_t ms[1] = {4}, shape[2] = {4, 2};
  uint32_t map[2] = {0, 0};
  dcp_layout *l;
  assert_int_equal(dcpi_layout_create(1, ms, (int32_t[]){3, 1, 0, 2}, 2, map, &l, NULL), DCP_OK);
  dcpi_layout_tensor t = {.fqn = "e", .fqn_len = 1, .dtype = DCP_F32, .ndim = 2, .shape = shape,
                          .layout = l};
  dcpi_save_opts o;
  dcpi_save_opts_init(&o);
  o.block_size = 1;
  uint32_t seen = 0;
  for (int32_t r = 0; r < 4; r++) {
    dcpi_layout_write *w;
    size_t n;
    assert_int_equal(dcpi_layout_plan_rank(&t, 1, 4, r, &o, &w, &n, NULL), DCP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(w[0].npieces, 4);
    assert_int_equal(w[0].nbytes, 8);
    assert_int_equal(w[0].piece_offset, 8 * w[0].piece);
    seen |= 1u << w[0].piece;
    free(w);
  }
  assert_int_equal(seen, 0xf);
  dcp_layout_free(l);
}

/* One rank that does not mark the tensor turns the rule off for it. */
static void test_unmarked_sighting(void **state) {
  (void)state;
  int64_t shape[1] = {8}, off[1] = {0};
  dcpi_local_plan *lps[2];
  for (int32_t r = 0; r < 2; r++) {
    uint32_t ti;
    assert_int_equal(dcpi_local_plan_create(r, 2, NULL, &lps[r], NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(lps[r], "w", DCP_F32, 1, shape, &ti, NULL), DCP_OK);
    if (r == 0) assert_int_equal(dcpi_local_plan_mark_layout(lps[r], ti, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_chunk(lps[r], ti, off, shape, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_finish(lps[r], NULL), DCP_OK);
  }
  dcpi_global_plan *gp;
  assert_int_equal(dcpi_global_plan_build((const dcpi_local_plan *const *)lps, 2, NULL, &gp, NULL),
                   DCP_OK);
  dcpi_gp_tensor gt;
  dcpi_global_plan_tensor(gp, 0, &gt);
  assert_false(gt.layout);
  /* the mark travels in the encoding, and only rank 0's has it */
  dcpi_lp_tensor_view v;
  for (int32_t r = 0; r < 2; r++) {
    uint8_t *enc;
    size_t len;
    dcpi_local_plan *back;
    assert_int_equal(dcpi_local_plan_encode(lps[r], &enc, &len, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_decode(enc, len, &back, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_tensor(back, 0, &v), DCP_OK);
    assert_int_equal(v.layout, r == 0);
    free(enc);
    dcpi_local_plan_free(back);
  }
  dcpi_global_plan_free(gp);
  dcpi_local_plan_free(lps[0]), dcpi_local_plan_free(lps[1]);
}

static void test_bad_input(void **state) {
  (void)state;
  int64_t ms[1] = {2}, shape[1] = {8};
  uint32_t map[1] = {1};
  dcp_layout *l;
  assert_int_equal(dcpi_layout_create(1, ms, (int32_t[]){0, 5}, 1, map, &l, NULL), DCP_OK);
  dcpi_layout_tensor t = {.fqn = "w", .fqn_len = 1, .dtype = DCP_F32, .ndim = 1, .shape = shape,
                          .layout = l};
  dcpi_layout_write *w = (dcpi_layout_write *)1;
  size_t n = 7;
  dcpi_err err;
  dcpi_err_clear(&err);
  assert_int_equal(dcpi_layout_plan_rank(&t, 1, 4, 0, NULL, &w, &n, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "rank 5"));
  assert_null(w);
  assert_int_equal(n, 0);
  assert_int_equal(dcpi_layout_plan_rank(&t, 1, 6, 6, NULL, &w, &n, NULL), DCP_EINVAL);
  t.ndim = 2;
  assert_int_equal(dcpi_layout_plan_rank(&t, 1, 6, 0, NULL, &w, &n, NULL), DCP_EINVAL);
  t.ndim = 1;
  shape[0] = -1;
  assert_int_not_equal(dcpi_layout_plan_rank(&t, 1, 6, 0, NULL, &w, &n, NULL), DCP_OK);
  assert_int_equal(dcpi_layout_plan_rank(NULL, 1, 6, 0, NULL, &w, &n, NULL), DCP_EINVAL);
  dcp_layout_free(l);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_layouts),
      cmocka_unit_test(test_split_spreads),
      cmocka_unit_test(test_unmarked_sighting),
      cmocka_unit_test(test_bad_input),
  };
  return TU_RUN(tests, NULL, NULL);
}
