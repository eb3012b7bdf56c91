/* test_load_dedup.c — read dedup in dcp_load, without other processes:
 * groups from the layouts equal the groups from the key exchange (members
 * and readers), the agreement lanes tell agreeing ranks from disagreeing
 * ones, the broadcast schedules of all ranks can never deadlock (a
 * simulation of blocking group broadcasts) and every member cuts the same
 * units (packing), the balancer's guarantee holds, and on one rank the load
 * options are checked and the statistics count the data reads. */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/layout.h"
#include "model/state.h"
#include "runtime/load_int.h"

#define W 8 /* ranks of the synthetic jobs */

/* ---- synthetic jobs: every rank's state, built on detached contexts ---- */

typedef struct job {
  int32_t world;
  dcp_ctx *ctx[W];
  dcp_state *st[W];
  dcp_layout *layouts[16];
  size_t nlayouts;
  uint8_t *mem[W];
} job;

/* A DP x TP job (dp * tp == world) with tensors sharded on dim 0, dim 1,
 * replicated, unevenly, and sharded over both mesh dims; skip_rank (or -1) lacks the
 * last tensor; hand_rank (or -1) adds its chunk of the first tensor by hand
 * instead of through the layout. */
static void job_build(job *j, int32_t dp, int32_t tp, int32_t skip_rank, int32_t hand_rank) {
  memset(j, 0, sizeof *j);
  j->world = dp * tp;
  static const struct {
    const char *fqn;
    int64_t shape[2];
    uint32_t map[2];
  } T[] = {{"w.col", {40, 24}, {2, 0}}, {"w.row", {24, 40}, {0, 2}},
           {"bias", {24, 1}, {0, 0}},   {"big", {1024, 600}, {2, 0}},
           {"uneven", {5, 3}, {2, 0}}, /* empty boxes on some ranks with TP > 5 */
           {"grid", {16, 16}, {1, 2}}};
  size_t nt = sizeof T / sizeof T[0];
  int64_t mesh[2] = {dp, tp};
  for (size_t t = 0; t < nt; t++)
    assert_int_equal(dcpi_layout_create(2, mesh, NULL, 2, T[t].map, &j->layouts[j->nlayouts++], NULL),
                     DCP_OK);
  for (int32_t r = 0; r < j->world; r++) {
    dcp_ctx_config cfg;
    dcp_ctx_config_init(&cfg);
    cfg.rank = r;
    cfg.world_size = j->world;
    assert_int_equal(dcp_ctx_create(&cfg, &j->ctx[r]), DCP_OK);
    assert_int_equal(dcp_state_create(j->ctx[r], &j->st[r]), DCP_OK);
    j->mem[r] = calloc(1024 * 600 * 4, 1); /* enough for any chunk */
    for (size_t t = 0; t < nt; t++) {
      if (r == skip_rank && t == nt - 1) continue;
      if (r == hand_rank && t == 0) {
        dcp_box b;
        assert_int_equal(dcp_layout_box(j->layouts[t], T[t].shape, r, &b), DCP_OK);
        assert_int_equal(dcp_state_add_tensor(j->st[r], T[t].fqn, DCP_F32, 2, T[t].shape), DCP_OK);
        assert_int_equal(dcp_state_add_chunk(j->st[r], T[t].fqn, b.offset, b.size, j->mem[r]),
                         DCP_OK);
        continue;
      }
      assert_int_equal(dcp_state_add_sharded(j->st[r], T[t].fqn, DCP_F32, 2, T[t].shape,
                                             j->layouts[t], j->mem[r]),
                       DCP_OK);
    }
  }
}

static void job_free(job *j) {
  for (int32_t r = 0; r < j->world; r++) {
    dcp_state_free(j->st[r]);
    dcp_ctx_free(j->ctx[r]);
    free(j->mem[r]);
  }
  for (size_t i = 0; i < j->nlayouts; i++) dcp_layout_free(j->layouts[i]);
}

/* A rank's keys (one per non-empty chunk) as the runtime forms them. */
static size_t rank_keys(const dcp_state *st, dcpi_load_key *keys, uint32_t *chunk_of) {
  size_t n = 0;
  for (size_t i = 0; i < st->nchunks; i++) {
    const dcpi_chunk_item *c = &st->chunks[i];
    if (c->nbytes <= 0) continue;
    const dcpi_tensor_item *t = &st->tensors[c->tensor];
    keys[n] = dcpi_load_key_of(t->fqn, t->fqn_len, t->ndim, c->box.offset, c->box.size, c->nbytes);
    chunk_of[n++] = (uint32_t)i;
  }
  return n;
}

typedef struct all_keys {
  dcpi_load_key keys[W][64];
  uint32_t chunk_of[W][64];
  size_t n[W];
} all_keys;

static dcpi_read_groups *exchange(const job *j, all_keys *k, dcpi_balance_policy pol) {
  const dcpi_load_key *lists[W];
  for (int32_t r = 0; r < j->world; r++) {
    k->n[r] = rank_keys(j->st[r], k->keys[r], k->chunk_of[r]);
    lists[r] = k->keys[r];
  }
  dcpi_read_groups *g;
  assert_int_equal(dcpi_load_groups_build(lists, k->n, j->world, pol, &g, NULL), DCP_OK);
  return g;
}

/* ---- layout groups equal exchanged groups ------------------------------- */

static void same_groups(int32_t dp, int32_t tp, dcpi_balance_policy pol) {
  job j;
  job_build(&j, dp, tp, -1, -1);
  all_keys *k = calloc(1, sizeof *k);
  dcpi_read_groups *gx = exchange(&j, k, pol);
  int64_t a[3] = {0}, b[3] = {0};
  for (int32_t r = 0; r < j.world; r++) {
    bool usable;
    dcpi_read_groups *gl;
    assert_int_equal(dcpi_load_layout_groups(j.st[r], j.world, pol, &usable, &gl, NULL), DCP_OK);
    assert_true(usable);
    /* identical groups, readers and loads: both see every rank's requests */
    assert_int_equal(gl->ngroups, gx->ngroups);
    for (size_t i = 0; i < gx->ngroups; i++) {
      const dcpi_read_group *x = &gx->groups[i], *l = &gl->groups[i];
      assert_memory_equal(x->offset, l->offset, 2 * sizeof *x->offset);
      assert_int_equal(x->reader, l->reader);
      assert_int_equal(x->nmembers, l->nmembers);
      assert_memory_equal(x->members, l->members, x->nmembers * sizeof *x->members);
    }
    /* members agree with dcp_layout_replica_group */
    for (size_t i = 0; i < k->n[r]; i++) {
      int64_t gi = dcpi_load_groups_find(gl, &k->keys[r][i]);
      assert_true(gi >= 0);
      const dcpi_chunk_item *c = &j.st[r]->chunks[k->chunk_of[r][i]];
      int32_t rg[W];
      size_t n;
      assert_int_equal(dcp_layout_replica_group(j.st[r]->tensors[c->tensor].layout, r, rg, W, &n),
                       DCP_OK);
      assert_int_equal(n, gl->groups[gi].nmembers);
      assert_memory_equal(rg, gl->groups[gi].members, n * sizeof *rg);
    }
    int64_t ra[3], rb[3];
    dcpi_load_agreement_lanes(gl, r, k->keys[r], k->n[r], ra, rb);
    for (int l = 0; l < 3; l++) a[l] += ra[l], b[l] += rb[l];
    dcpi_read_groups_free(gl);
  }
  assert_memory_equal(a, b, sizeof a);
  dcpi_read_groups_free(gx);
  free(k);
  job_free(&j);
}

static void test_layout_equals_exchange(void **state) {
  (void)state;
  same_groups(4, 2, DCPI_BALANCE_LEAST_LOADED);
  same_groups(2, 4, DCPI_BALANCE_LEAST_LOADED);
  same_groups(8, 1, DCPI_BALANCE_LOWEST_RANK);
  same_groups(1, 8, DCPI_BALANCE_LEAST_LOADED);
}

/* A rank that lacks a tensor (the others' layouts count it as a member)
 * makes the lanes disagree; one that added a chunk by hand cannot use the
 * layout path at all. */
static void test_lanes_detect_disagreement(void **state) {
  (void)state;
  job j;
  job_build(&j, 4, 2, 5, 2);
  int64_t a[3] = {0}, b[3] = {0};
  for (int32_t r = 0; r < j.world; r++) {
    bool usable;
    dcpi_read_groups *gl;
    assert_int_equal(dcpi_load_layout_groups(j.st[r], j.world, DCPI_BALANCE_LEAST_LOADED,
                                             &usable, &gl, NULL),
                     DCP_OK);
    if (r == 2) {
      assert_false(usable);
      assert_null(gl);
      continue;
    }
    assert_true(usable);
    dcpi_load_key keys[64];
    uint32_t chunk_of[64];
    size_t n = rank_keys(j.st[r], keys, chunk_of);
    int64_t ra[3], rb[3];
    dcpi_load_agreement_lanes(gl, r, keys, n, ra, rb);
    for (int l = 0; l < 3; l++) a[l] += ra[l], b[l] += rb[l];
    dcpi_read_groups_free(gl);
  }
  assert_true(memcmp(a, b, sizeof a) != 0);
  job_free(&j);
}

/* ---- schedules: no crossing, identical units ------------------------------ */

/* Simulate blocking group broadcasts: a unit completes when it is at the
 * head of every member's queue, and those heads must describe the same
 * broadcast. true when every unit completes (no deadlock). */
static bool simulate(const dcpi_load_sched *sc, int32_t world) {
  size_t head[W] = {0}, done = 0, total = 0;
  for (int32_t r = 0; r < world; r++) total += sc[r].nunits;
  for (bool progress = true; progress;) {
    progress = false;
    for (int32_t r = 0; r < world; r++) {
      if (head[r] >= sc[r].nunits) continue;
      const dcpi_bcast_unit *u = &sc[r].units[head[r]];
      bool ready = true;
      for (uint32_t m = 0; m < u->nmembers && ready; m++) {
        int32_t q = u->members[m];
        if (head[q] >= sc[q].nunits) {
          ready = false;
          break;
        }
        const dcpi_bcast_unit *v = &sc[q].units[head[q]];
        ready = v->nmembers == u->nmembers && v->reader == u->reader &&
                !memcmp(v->members, u->members, u->nmembers * sizeof *u->members);
        if (ready) { /* the same broadcast must move the same bytes */
          assert_int_equal(v->bytes, u->bytes);
          assert_int_equal(v->count, u->count);
          assert_int_equal(v->packed, u->packed);
        }
      }
      if (!ready) continue;
      for (uint32_t m = 0; m < u->nmembers; m++) head[u->members[m]]++;
      done += u->nmembers; /* one unit off each member's queue */
      progress = true;
    }
  }
  return done == total;
}

/* Random requests: keys from a pool (some replicated over random rank
 * sets, sizes from a few bytes to several MiB), every rank's schedule. */
static void test_schedules_never_cross(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(5));
  for (int round = 0; round < 200; round++) {
    int32_t world = (int32_t)tu_rng_range(&rng, 2, W);
    size_t npool = (size_t)tu_rng_range(&rng, 1, 40);
    dcpi_load_key pool[40];
    for (size_t i = 0; i < npool; i++) {
      int64_t off[1] = {(int64_t)i}, sz[1] = {1};
      int64_t bytes = tu_rng_range(&rng, 0, 3) == 0 ? tu_rng_range(&rng, 1 << 20, 3 << 20)
                                                     : tu_rng_range(&rng, 1, 300000);
      pool[i] = dcpi_load_key_of("k", 1, 1, off, sz, bytes);
    }
    dcpi_load_key keys[W][40];
    uint32_t chunk_of[W][40];
    size_t n[W] = {0};
    const dcpi_load_key *lists[W];
    for (int32_t r = 0; r < world; r++) {
      for (size_t i = 0; i < npool; i++)
        if (tu_rng_range(&rng, 0, 2)) {
          chunk_of[r][n[r]] = (uint32_t)n[r];
          keys[r][n[r]++] = pool[i];
        }
      lists[r] = keys[r];
    }
    dcpi_read_groups *g;
    dcpi_balance_policy pol = round % 3 ? DCPI_BALANCE_LEAST_LOADED : DCPI_BALANCE_LOWEST_RANK;
    assert_int_equal(dcpi_load_groups_build(lists, n, world, pol, &g, NULL), DCP_OK);
    dcpi_load_sched sc[W];
    int64_t read_total = 0;
    for (int32_t r = 0; r < world; r++) {
      memset(&sc[r], 0, sizeof sc[r]);
      sc[r].role = calloc(40, 1);
      assert_int_equal(dcpi_load_sched_build(g, r, keys[r], chunk_of[r], n[r], 40, &sc[r], NULL),
                       DCP_OK);
      read_total += sc[r].read_bytes;
      /* units: packed ones hold items below the pack size and reach it
       * unless they end their run; big items travel alone */
      for (size_t u = 0; u < sc[r].nunits; u++) {
        const dcpi_bcast_unit *x = &sc[r].units[u];
        if (!x->packed) {
          assert_int_equal(x->count, 1);
          assert_true(x->bytes >= DCPI_LOAD_PACK_BYTES);
        } else {
          assert_true(x->bytes < 2 * (int64_t)DCPI_LOAD_PACK_BYTES);
          assert_true(x->bytes <= sc[r].max_pack);
        }
      }
    }
    /* every distinct key is read exactly once */
    int64_t unique = 0;
    for (size_t i = 0; i < g->ngroups; i++) unique += g->groups[i].bytes;
    assert_int_equal(read_total, unique);
    assert_true(simulate(sc, world));
    for (int32_t r = 0; r < world; r++) dcpi_load_sched_free(&sc[r]);
    dcpi_read_groups_free(g);
  }
}

/* ---- one rank: options and statistics ------------------------------------ */

static void test_single_rank_options(void **state) {
  (void)state;
  char dir[] = "/tmp/dcp-dedup-XXXXXX", ckpt[64], plugins[PATH_MAX];
  assert_non_null(mkdtemp(dir));
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  tu_plugin_dir(plugins, sizeof plugins);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.plugin_path = plugins;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  enum { N = 64 * 1024 };
  int64_t shape[1] = {N / 4};
  float *src = malloc(N), *dst = malloc(N);
  for (int i = 0; i < N / 4; i++) src[i] = (float)i;
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, shape), DCP_OK);
  int64_t off[1] = {0};
  assert_int_equal(dcp_state_add_chunk(st, "w", off, shape, src), DCP_OK);
  assert_int_equal(dcp_save(ctx, st, ckpt, NULL), DCP_OK);
  dcp_state_free(st);

  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", off, shape, dst), DCP_OK);
  dcp_load_options o;
  dcp_load_options_init(&o);
  assert_int_equal(o.read_dedup, DCP_READ_DEDUP_AUTO);
  assert_int_equal(o.reader_policy, DCP_POLICY_BALANCED);
  assert_int_equal(o.max_inflight_bytes, 256ull << 20);
  o.read_dedup = (dcp_read_dedup)7;
  assert_int_equal(dcp_load(ctx, st, ckpt, &o), DCP_EINVAL);
  dcp_load_options_init(&o);
  o.reader_policy = (dcp_policy)9;
  assert_int_equal(dcp_load(ctx, st, ckpt, &o), DCP_EINVAL);
  dcp_load_options_init(&o);
  o.flags = 0x80;
  assert_int_equal(dcp_load(ctx, st, ckpt, &o), DCP_EINVAL);
  /* an old caller's smaller struct gets the defaults for the new fields */
  dcp_load_options old;
  dcp_load_options_init(&old);
  old.struct_size = (uint32_t)(offsetof(dcp_load_options, flags) + sizeof old.flags);
  old.read_dedup = (dcp_read_dedup)7; /* past its size: ignored */
  memset(dst, 0, N);
  assert_int_equal(dcp_load(ctx, st, ckpt, &old), DCP_OK);
  assert_memory_equal(src, dst, N);
  /* one rank: nothing to share; every data byte read once */
  uint32_t flags[] = {0, DCP_LOAD_NO_PIPELINE};
  for (int i = 0; i < 2; i++) {
    dcp_load_options_init(&o);
    o.read_dedup = DCP_READ_DEDUP_ON;
    o.flags = flags[i];
    o.max_inflight_bytes = 1;
    memset(dst, 0, N);
    assert_int_equal(dcp_load(ctx, st, ckpt, &o), DCP_OK);
    assert_memory_equal(src, dst, N);
    dcp_stats s = {.struct_size = sizeof s};
    assert_int_equal(dcp_ctx_stats(ctx, &s), DCP_OK);
    assert_int_equal(s.dedup_path, 0);
    assert_int_equal(s.data_read_bytes, N);
    assert_true(s.bytes_read > s.data_read_bytes); /* + .metadata */
    assert_int_equal(s.read_payload_bytes, N);
    assert_int_equal(s.dedup_sent_bytes + s.dedup_recv_bytes + s.dedup_groups, 0);
    assert_int_equal(s.data_bytes, N);
  }
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  free(src);
  free(dst);
  tu_remove_tree(dir);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_layout_equals_exchange),
      cmocka_unit_test(test_lanes_detect_disagreement),
      cmocka_unit_test(test_schedules_never_cross),
      cmocka_unit_test(test_single_rank_options),
  };
  return TU_RUN(tests, NULL, NULL);
}
