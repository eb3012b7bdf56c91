/* test_save_layout.c — rank 0's side of per-rank planning
 * (runtime/save_layout.h) on offers from real states: agreement on the
 * per-mesh digests (a different tensor_map or flat cut, a flat tensor
 * sharded on one rank, save options, a member without
 * the mesh's tensors, a tensor on two meshes: DCP_EMISMATCH), every piece
 * taken exactly once before the commit (a missing piece DCP_EINCOMPLETE, a
 * repeated or unknown one DCP_ECORRUPT), and malformed offers (every
 * truncation and byte flip: an error, never a crash). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "metadata/meta.h"
#include "model/box.h"
#include "model/layout.h"
#include "model/state.h"
#include "planner/layout_plan.h"
#include "runtime/save_layout.h"
#include "runtime/save_layout_bytes.h"

#define W 4

/* How rank r lays out its tensors; variants break one thing. */
typedef enum variant {
  SAME, OTHER_MAP, OTHER_OPTS, NO_C_ON_1, NO_C_ON_3, SPLIT_X,
  FLAT,            /* plus "f" flat-sharded over DP, replicated over TP */
  FLAT_OTHER_DIMS, /* rank 2 cuts "f" over DP and TP */
  FLAT_AS_SHARDED, /* rank 2 adds "f" as a sharded tensor */
  BYTES,           /* plus "cfg" REPLICATED on ranks 1..3 and "rng" PER_RANK on all */
  BYTES_SCOPE,     /* rank 2's "cfg" is PER_RANK */
  BYTES_LENGTH,    /* rank 3's "cfg" is longer */
  BYTES_CLASH      /* rank 0 has bytes "c", a tensor of ranks 1 and 3 */
} variant;

typedef struct job {
  dcp_ctx *ctx[W];
  dcp_state *st[W];
  dcp_layout *l[W][4];
  float buf[W][4][64];
  dcpi_save_opts opts[W];
  uint8_t blob[W][8];
  uint8_t *all;
  size_t lens[W], total;
} job;

static void add(job *j, int32_t r, int k, const char *fqn, uint32_t nd, const int64_t *shape,
                uint32_t mnd, const int64_t *ms, const int32_t *ranks, const uint32_t *map) {
  assert_int_equal(dcpi_layout_create(mnd, ms, ranks, nd, map, &j->l[r][k], NULL), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(j->st[r], fqn, DCP_F32, nd, shape, j->l[r][k],
                                         j->buf[r][k]), DCP_OK);
}

/* Ranks 0..3: "a" [5, 3] TP over a [2, 2] mesh, "b" [7] replicated there,
 * "c" [9] sharded over the mesh [2] of ranks {3, 1}. */
static void build(job *j, variant v) {
  memset(j, 0, sizeof *j);
  int64_t m22[2] = {2, 2}, m2[1] = {2}, sa[2] = {5, 3}, sb[1] = {7}, sc[1] = {9};
  int32_t r4[4] = {0, 1, 2, 3}, r31[2] = {3, 1}, r01[2] = {0, 1}, r23[2] = {2, 3};
  uint32_t ma[2] = {2, 0}, mo[2] = {0, 2}, mb[1] = {0}, mc[1] = {1};
  for (int32_t r = 0; r < W; r++) {
    dcp_ctx_config cfg;
    dcp_ctx_config_init(&cfg);
    cfg.rank = r, cfg.world_size = W;
    assert_int_equal(dcp_ctx_create(&cfg, &j->ctx[r]), DCP_OK);
    assert_int_equal(dcp_state_create(j->ctx[r], &j->st[r]), DCP_OK);
    dcpi_save_opts_init(&j->opts[r]);
    /* block size 2: a cell of "a" (36 bytes, 2 holders) is split in 2, "b"
     * (28 bytes, 4 holders) in 3; "c" has no replicas: 9 pieces */
    j->opts[r].block_size = v == OTHER_OPTS && r == 1 ? 4 : 2;
    if (v == SPLIT_X) { /* "x" on {0, 1} for ranks 0, 1 and on {2, 3} for ranks 2, 3 */
      add(j, r, 0, "x", 1, sc, 1, m2, r < 2 ? r01 : r23, mc);
      continue;
    }
    add(j, r, 0, "a", 2, sa, 2, m22, r4, v == OTHER_MAP && r == 2 ? mo : ma);
    add(j, r, 1, "b", 1, sb, 2, m22, r4, mb);
    if ((r == 1 && v != NO_C_ON_1) || (r == 3 && v != NO_C_ON_3))
      add(j, r, 2, "c", 1, sc, 1, m2, r31, mc);
    if (v >= BYTES) {
      dcp_scope cfg_scope = v == BYTES_SCOPE && r == 2 ? DCP_SCOPE_PER_RANK : DCP_SCOPE_REPLICATED;
      if (r > 0)
        assert_int_equal(dcp_state_add_bytes(j->st[r], "cfg", cfg_scope, j->blob[r],
                                             v == BYTES_LENGTH && r == 3 ? 5 : 4), DCP_OK);
      assert_int_equal(dcp_state_add_bytes(j->st[r], "rng", DCP_SCOPE_PER_RANK, j->blob[r],
                                           (size_t)r + 1), DCP_OK);
      if (v == BYTES_CLASH && r == 0)
        assert_int_equal(dcp_state_add_bytes(j->st[r], "c", DCP_SCOPE_REPLICATED, j->blob[r], 1),
                         DCP_OK);
    } else if (v >= FLAT) { /* "f" [6, 3] replicated on [2, 2], cut over mesh dim 0 */
      int64_t sf[2] = {6, 3};
      uint32_t none[2] = {0, 0}, dims = v == FLAT_OTHER_DIMS && r == 2 ? 3 : 1;
      assert_int_equal(dcpi_layout_create(2, m22, r4, 2, none, &j->l[r][3], NULL), DCP_OK);
      if (v == FLAT_AS_SHARDED && r == 2)
        assert_int_equal(dcp_state_add_sharded(j->st[r], "f", DCP_F32, 2, sf, j->l[r][3],
                                               j->buf[r][3]), DCP_OK);
      else
        assert_int_equal(dcp_state_add_flat_sharded(j->st[r], "f", DCP_F32, 2, sf, j->l[r][3],
                                                    dims, j->buf[r][3]), DCP_OK);
    }
  }
  dcpi_wbuf all = {0};
  for (int32_t r = 0; r < W; r++) {
    size_t before = all.len;
    dcpi_save_layout_offer(j->st[r], &j->opts[r], &all);
    j->lens[r] = all.len - before;
  }
  assert_int_equal(all.status, DCP_OK);
  j->all = all.data, j->total = all.len;
}

static void job_free(job *j) {
  for (int32_t r = 0; r < W; r++) {
    dcp_state_free(j->st[r]);
    for (int k = 0; k < 4; k++) dcp_layout_free(j->l[r][k]);
    dcp_ctx_free(j->ctx[r]);
  }
  free(j->all);
}

static dcp_status build_set(job *j, dcpi_layout_set **ls, dcpi_err *err) {
  dcpi_err_clear(err);
  return dcpi_layout_set_build(j->all, j->lens, W, &j->opts[0], ls, err);
}

static void fake_ref(dcp_storage_ref *ref, uint32_t file, int64_t nbytes, uint64_t *sum) {
  *ref = (dcp_storage_ref){.file = file, .codec = DCP_CODEC_NONE, .block_size = 1u << 20,
                           .stored_length = (uint64_t)nbytes, .raw_length = (uint64_t)nbytes,
                           .block_count = nbytes ? 1 : 0, .block_checksums = sum};
}

/* build_set refuses variant v with code, its message holding needle. */
static void expect_error(variant v, dcp_status code, const char *needle) {
  job j;
  build(&j, v);
  dcpi_layout_set *ls = (dcpi_layout_set *)1;
  dcpi_err err;
  assert_int_equal(build_set(&j, &ls, &err), code);
  assert_null(ls);
  if (!strstr(err.msg, needle)) fail_msg("'%s' not in: %s", needle, err.msg);
  job_free(&j);
}

/* The metadata a commit of ls builds: one data file (*file), ls's tensors. */
static dcpi_md *commit_md(dcpi_layout_set *ls, uint32_t *file) {
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md, "data", file, &err), DCP_OK);
  assert_int_equal(dcpi_layout_set_add_tensors(ls, md, &err), DCP_OK);
  return md;
}

static void expect_mismatch(variant v, const char *needle) {
  expect_error(v, DCP_EMISMATCH, needle);
}

static void test_mismatches(void **state) {
  (void)state;
  expect_mismatch(OTHER_MAP, "mesh [2, 2] of ranks 0, 1, 2, 3: the layout tensors of rank 2");
  expect_mismatch(NO_C_ON_1, "rank 1 has none of the tensors rank 3 lays out");
  expect_mismatch(NO_C_ON_3, "rank 1 lays out tensors on a mesh whose first rank");
  expect_mismatch(SPLIT_X, "tensor 'x' is laid out on two meshes");
  expect_mismatch(OTHER_OPTS, "the layout tensors of rank 1 differ");
  expect_mismatch(OTHER_OPTS, "save options");
  expect_mismatch(FLAT_OTHER_DIMS, "the layout tensors of rank 2");
  expect_mismatch(FLAT_AS_SHARDED, "the layout tensors of rank 2");
  expect_mismatch(BYTES_CLASH, "'c' is a tensor but a bytes item on rank 0");
}

/* The writers of bytes items: a REPLICATED one by its lowest holder (rank
 * 1 for "cfg"), a PER_RANK one by every rank; the assignment each rank
 * gets says so; the commit takes exactly those, once each. */
static void test_bytes(void **state) {
  (void)state;
  expect_error(BYTES_SCOPE, DCP_ESCOPE, "bytes 'cfg': REPLICATED on rank 1 but PER_RANK on rank 2");
  expect_error(BYTES_LENGTH, DCP_ESCOPE, "replicated with length 4 on rank 1 but 5 on rank 3");
  job j;
  build(&j, BYTES);
  dcpi_layout_set *ls;
  dcpi_err err;
  assert_int_equal(build_set(&j, &ls, &err), DCP_OK);
  uint8_t *flags[W];
  for (int32_t r = 0; r < W; r++) {
    dcpi_wbuf msg = {0};
    bool ok = false;
    dcpi_layout_set_assignment(ls, r, &msg);
    assert_int_equal(dcpi_lbytes_parse_assignment(msg.data, msg.len, j.st[r]->nbytes, &ok,
                                                  &flags[r], &err), DCP_OK);
    assert_true(ok);
    /* a message for another count of items, or cut short, is corrupt */
    uint8_t *junk;
    assert_int_equal(dcpi_lbytes_parse_assignment(msg.data, msg.len, j.st[r]->nbytes + 1, &ok,
                                                  &junk, &err), DCP_ECORRUPT);
    assert_int_equal(dcpi_lbytes_parse_assignment(msg.data, msg.len - 1, j.st[r]->nbytes, &ok,
                                                  &junk, &err), DCP_ECORRUPT);
    dcpi_wbuf_free(&msg);
  }
  /* state order: rank 0 has "rng"; ranks 1..3 "cfg" then "rng" */
  assert_int_equal(flags[0][0], 1);
  assert_int_equal(flags[1][0], 1), assert_int_equal(flags[1][1], 1);
  assert_int_equal(flags[2][0], 0), assert_int_equal(flags[2][1], 1);
  assert_int_equal(flags[3][0], 0), assert_int_equal(flags[3][1], 1);
  uint32_t file;
  uint64_t sum = 1;
  dcpi_md *md = commit_md(ls, &file);
  dcp_storage_ref ref;
  fake_ref(&ref, file, 4, &sum);
  assert_int_equal(dcpi_layout_set_take_bytes(ls, md, 2, 0, &ref, &err), DCP_ECORRUPT); /* not its */
  assert_int_equal(dcpi_layout_set_take_bytes(ls, md, 1, 0, &ref, &err), DCP_OK);
  assert_int_equal(dcpi_layout_set_take_bytes(ls, md, 1, 0, &ref, &err), DCP_ECORRUPT); /* twice */
  assert_int_equal(dcpi_layout_set_take_bytes(ls, md, 1, 7, &ref, &err), DCP_ECORRUPT);
  for (int32_t r = 0; r < W; r++) {
    fake_ref(&ref, file, r + 2, &sum); /* another length */
    assert_int_equal(dcpi_layout_set_take_bytes(ls, md, r, r ? 1 : 0, &ref, &err), DCP_ECORRUPT);
    fake_ref(&ref, file, r + 1, &sum);
    if (r < W - 1)
      assert_int_equal(dcpi_layout_set_take_bytes(ls, md, r, r ? 1 : 0, &ref, &err), DCP_OK);
    free(flags[r]);
  }
  /* completion, on rank 1's items alone: "cfg" missing names it */
  dcpi_wbuf offer = {0};
  dcpi_lbytes_put_offer(j.st[1], &offer);
  dcpi_lbytes b = {0};
  dcpi_rbuf rd = {offer.data, offer.len, 0};
  dcpi_strmap none = {0};
  assert_int_equal(dcpi_lbytes_read(&b, &rd, 1, &err), DCP_OK);
  assert_int_equal(dcpi_lbytes_settle(&b, &none, &err), DCP_OK);
  assert_int_equal(dcpi_lbytes_complete(&b, &err), DCP_EINCOMPLETE);
  assert_non_null(strstr(err.msg, "bytes 'cfg' of rank 1 was not written"));
  dcpi_md *md2;
  assert_int_equal(dcpi_md_create(&md2), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md2, "data", &file, &err), DCP_OK);
  fake_ref(&ref, file, 4, &sum);
  assert_int_equal(dcpi_lbytes_take(&b, md2, 1, 0, &ref, &err), DCP_OK);
  fake_ref(&ref, file, 2, &sum);
  assert_int_equal(dcpi_lbytes_take(&b, md2, 1, 1, &ref, &err), DCP_OK);
  assert_int_equal(dcpi_lbytes_complete(&b, &err), DCP_OK);
  /* a truncated offer is corrupt, never read past */
  for (size_t cut = 0; cut < offer.len; cut++) {
    dcpi_lbytes t = {0};
    dcpi_rbuf tr = {offer.data, cut, 0};
    assert_int_equal(dcpi_lbytes_read(&t, &tr, 1, &err), DCP_ECORRUPT);
    dcpi_lbytes_free(&t);
  }
  dcpi_lbytes_free(&b);
  dcpi_wbuf_free(&offer);
  dcpi_md_free(md2);
  dcpi_md_free(md);
  dcpi_layout_set_free(ls);
  job_free(&j);
}

/* A flat tensor's pieces: every rank's writes taken once each complete
 * the set, and the pieces cover "f" exactly (18 elements, 72 bytes). */
static void test_flat_accounting(void **state) {
  (void)state;
  job j;
  build(&j, FLAT);
  dcpi_layout_set *ls;
  dcpi_err err;
  assert_int_equal(build_set(&j, &ls, &err), DCP_OK);
  dcpi_md *md;
  uint32_t file;
  uint64_t sum = 1;
  int64_t f_bytes = 0;
  dcp_storage_ref held_ref;
  uint64_t held_key = 0;
  dcpi_layout_write held = {0};
  dcpi_layout_tensor held_t = {0};
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md, "data", &file, &err), DCP_OK);
  assert_int_equal(dcpi_layout_set_add_tensors(ls, md, &err), DCP_OK);
  for (int32_t r = 0; r < W; r++) {
    size_t n;
    dcpi_layout_write *ws;
    dcpi_layout_tensor *lts = dcpi_save_layout_tensors(j.st[r]);
    assert_int_equal(dcpi_layout_plan_rank(lts, j.st[r]->ntensors, W, r, &j.opts[r], &ws, &n,
                                           &err), DCP_OK);
    for (size_t k = 0; k < n; k++) {
      const dcpi_layout_tensor *t = &lts[ws[k].tensor];
      dcp_storage_ref ref;
      fake_ref(&ref, file, ws[k].nbytes, &sum);
      uint64_t key = dcpi_layout_piece_key(t->ndim, t->shape, ws[k].box);
      if (!strcmp(t->fqn, "f")) f_bytes += ws[k].nbytes;
      if (r == 1 && k == 0) { /* held back: the commit must miss it */
        held_ref = ref, held_key = key, held = ws[k], held_t = *t;
        continue;
      }
      assert_int_equal(dcpi_layout_set_take(ls, md, r, t->fqn, t->fqn_len, key, &ref, &err),
                       DCP_OK);
    }
    free(lts), free(ws);
  }
  assert_int_equal(f_bytes, 72);
  char b[256];
  assert_int_equal(dcpi_layout_set_complete(ls, &err), DCP_EINCOMPLETE);
  assert_non_null(strstr(err.msg, dcpi_box_str(held_t.ndim, held.box, held.box + held_t.ndim, b,
                                              sizeof b)));
  assert_int_equal(dcpi_layout_set_take(ls, md, 1, held_t.fqn, held_t.fqn_len, held_key + 1,
                                        &held_ref, &err), DCP_ECORRUPT); /* inside a piece */
  assert_int_equal(dcpi_layout_set_take(ls, md, 1, held_t.fqn, held_t.fqn_len, held_key,
                                        &held_ref, &err), DCP_OK);
  assert_int_equal(dcpi_layout_set_complete(ls, &err), DCP_OK);
  dcpi_md_free(md);
  dcpi_layout_set_free(ls);
  job_free(&j);
}

/* Every rank's writes taken: complete; one left out: DCP_EINCOMPLETE. */
static void test_commit_accounting(void **state) {
  (void)state;
  job j;
  build(&j, SAME);
  dcpi_layout_set *ls;
  dcpi_err err;
  assert_int_equal(build_set(&j, &ls, &err), DCP_OK);
  uint32_t file;
  uint64_t sum = 1;
  dcpi_md *md = commit_md(ls, &file);
  dcpi_layout_write *last = NULL;
  const dcpi_layout_tensor *last_t = NULL;
  dcpi_layout_tensor *lts[W];
  dcpi_layout_write *ws[W];
  size_t total = 0;
  for (int32_t r = 0; r < W; r++) {
    size_t n;
    lts[r] = dcpi_save_layout_tensors(j.st[r]);
    assert_int_equal(dcpi_layout_plan_rank(lts[r], j.st[r]->ntensors, W, r, &j.opts[r], &ws[r],
                                           &n, &err), DCP_OK);
    for (size_t k = 0; k < n; k++, total++) {
      const dcpi_layout_write *w = &ws[r][k];
      const dcpi_layout_tensor *t = &lts[r][w->tensor];
      dcp_storage_ref ref;
      fake_ref(&ref, file, w->nbytes, &sum);
      uint64_t key = dcpi_layout_piece_key(t->ndim, t->shape, w->box);
      if (r == W - 1 && k == n - 1) { /* keep the last one back */
        last = &ws[r][k], last_t = t;
        continue;
      }
      assert_int_equal(dcpi_layout_set_take(ls, md, r, t->fqn, t->fqn_len, key, &ref, &err),
                       DCP_OK);
    }
  }
  assert_int_equal(total, 9);
  assert_non_null(last);
  assert_int_equal(dcpi_layout_set_complete(ls, &err), DCP_EINCOMPLETE);
  assert_non_null(strstr(err.msg, last_t->fqn));
  char b[256]; /* and names the piece */
  assert_non_null(strstr(err.msg, dcpi_box_str(last_t->ndim, last->box, last->box + last_t->ndim,
                                              b, sizeof b)));
  dcp_storage_ref ref;
  fake_ref(&ref, file, last->nbytes + 4, &sum); /* another length */
  uint64_t key = dcpi_layout_piece_key(last_t->ndim, last_t->shape, last->box);
  assert_int_equal(dcpi_layout_set_take(ls, md, 3, last_t->fqn, last_t->fqn_len, key, &ref, &err),
                   DCP_ECORRUPT);
  assert_int_equal(dcpi_layout_set_take(ls, md, 3, "zz", 2, key, &ref, &err), DCP_ECORRUPT);
  fake_ref(&ref, file, last->nbytes, &sum);
  assert_int_equal(dcpi_layout_set_take(ls, md, 3, last_t->fqn, last_t->fqn_len, key + 1, &ref,
                                        &err), DCP_ECORRUPT);
  assert_int_equal(dcpi_layout_set_take(ls, md, 3, last_t->fqn, last_t->fqn_len, key, &ref, &err),
                   DCP_OK);
  assert_int_equal(dcpi_layout_set_complete(ls, &err), DCP_OK);
  assert_int_equal(dcpi_layout_set_take(ls, md, 3, last_t->fqn, last_t->fqn_len, key, &ref, &err),
                   DCP_ECORRUPT); /* twice */
  for (int32_t r = 0; r < W; r++) free(lts[r]), free(ws[r]);
  dcpi_md_free(md);
  dcpi_layout_set_free(ls);
  job_free(&j);
}

/* Truncated offers and flipped bytes: an error or (a flip that keeps the
 * offer well formed and consistent) OK, never a crash or a leak. */
static void test_malformed(void **state) {
  (void)state;
  job j;
  build(&j, FLAT); /* flat offers too */
  size_t keep = j.lens[W - 1];
  dcpi_layout_set *ls;
  dcpi_err err;
  for (size_t cut = 0; cut < keep; cut++) {
    j.lens[W - 1] = cut;
    assert_int_not_equal(build_set(&j, &ls, &err), DCP_OK);
  }
  j.lens[W - 1] = keep;
  tu_rng rng;
  tu_rng_seed(&rng, 7);
  for (int k = 0; k < 2000; k++) {
    size_t at = (size_t)tu_rng_range(&rng, 0, (int64_t)j.total - 1);
    uint8_t old = j.all[at];
    j.all[at] ^= (uint8_t)(1u << tu_rng_range(&rng, 0, 7));
    if (build_set(&j, &ls, &err) == DCP_OK) dcpi_layout_set_free(ls);
    j.all[at] = old;
  }
  assert_int_equal(build_set(&j, &ls, &err), DCP_OK);
  dcpi_layout_set_free(ls);
  job_free(&j);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mismatches),
      cmocka_unit_test(test_flat_accounting),
      cmocka_unit_test(test_bytes),
      cmocka_unit_test(test_commit_accounting),
      cmocka_unit_test(test_malformed),
  };
  return TU_RUN(tests, NULL, NULL);
}
