/* test_plan_hash.c — plan-cache keys and the local-plan codec: any change
 * of a field changes the key, insertion order does not, and the decoder
 * survives arbitrary input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "testutil.h"
#include "planner/save_plan.h"

#define MAXT 6
#define MAXC 5
#define MAXB 4

typedef struct spec_tensor {
  char name[32];
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[3];
  size_t nchunks;
  int64_t off[MAXC][3], sz[MAXC][3];
} spec_tensor;

typedef struct spec {
  int32_t rank, world;
  dcpi_save_opts opts;
  size_t ntensors, nbytes;
  spec_tensor t[MAXT];
  char bkey[MAXB][32];
  dcp_scope bscope[MAXB];
  int64_t blen[MAXB];
} spec;

static void random_spec(tu_rng *r, spec *s) {
  memset(s, 0, sizeof *s);
  s->world = (int32_t)tu_rng_range(r, 1, 64);
  s->rank = (int32_t)tu_rng_range(r, 0, s->world - 1);
  dcpi_save_opts_init(&s->opts);
  s->opts.policy = (dcpi_balance_policy)tu_rng_range(r, 0, 1);
  s->opts.flags = (uint32_t)tu_rng_range(r, 0, 255);
  s->opts.block_size = (uint32_t)tu_rng_range(r, 1, 1 << 22);
  s->ntensors = (size_t)tu_rng_range(r, 1, MAXT);
  for (size_t i = 0; i < s->ntensors; i++) {
    spec_tensor *t = &s->t[i];
    snprintf(t->name, sizeof t->name, "layer%zu.w%d", i, (int)tu_rng_range(r, 0, 9));
    t->dtype = (dcp_dtype)tu_rng_range(r, DCP_BOOL, DCP_C64);
    t->ndim = (uint32_t)tu_rng_range(r, 1, 3);
    for (uint32_t d = 0; d < t->ndim; d++) t->shape[d] = tu_rng_range(r, 4, 40);
    t->nchunks = (size_t)tu_rng_range(r, 0, MAXC);
    for (size_t c = 0; c < t->nchunks; c++)
      for (uint32_t d = 0; d < t->ndim; d++) {
        /* distinct boxes: chunk c starts at offset c in dim 0 */
        t->off[c][d] = d == 0 ? (int64_t)c : tu_rng_range(r, 0, 3);
        t->sz[c][d] = tu_rng_range(r, 0, 3);
      }
  }
  s->nbytes = (size_t)tu_rng_range(r, 0, MAXB);
  for (size_t i = 0; i < s->nbytes; i++) {
    snprintf(s->bkey[i], sizeof s->bkey[i], "extra%zu", i);
    s->bscope[i] = (dcp_scope)tu_rng_range(r, 0, 1);
    s->blen[i] = tu_rng_range(r, 0, 100);
  }
}

/* Build the plan, adding everything in an order shuffled by shuffle_seed
 * (0: spec order). */
static dcpi_local_plan *build(const spec *s, uint64_t shuffle_seed) {
  dcpi_local_plan *lp;
  dcpi_err err;
  assert_int_equal(dcpi_local_plan_create(s->rank, s->world, &s->opts, &lp, &err), DCP_OK);
  size_t tord[MAXT], idx[MAXT];
  for (size_t i = 0; i < s->ntensors; i++) tord[i] = i;
  typedef struct op { int kind; size_t a, b; } op;
  op ops[MAXT * MAXC + MAXB];
  size_t nops = 0;
  for (size_t i = 0; i < s->ntensors; i++)
    for (size_t c = 0; c < s->t[i].nchunks; c++) ops[nops++] = (op){0, i, c};
  for (size_t i = 0; i < s->nbytes; i++) ops[nops++] = (op){1, i, 0};
  if (shuffle_seed) {
    tu_rng r;
    tu_rng_seed(&r, shuffle_seed);
    for (size_t i = s->ntensors; i > 1; i--) {
      size_t j = (size_t)tu_rng_range(&r, 0, (int64_t)i - 1), t = tord[i - 1];
      tord[i - 1] = tord[j], tord[j] = t;
    }
    for (size_t i = nops; i > 1; i--) {
      size_t j = (size_t)tu_rng_range(&r, 0, (int64_t)i - 1);
      op t = ops[i - 1];
      ops[i - 1] = ops[j], ops[j] = t;
    }
  }
  for (size_t k = 0; k < s->ntensors; k++) {
    const spec_tensor *t = &s->t[tord[k]];
    uint32_t h;
    assert_int_equal(dcpi_local_plan_add_tensor(lp, t->name, t->dtype, t->ndim, t->shape, &h, &err),
                     DCP_OK);
    idx[tord[k]] = h;
  }
  for (size_t k = 0; k < nops; k++) {
    if (ops[k].kind == 0) {
      const spec_tensor *t = &s->t[ops[k].a];
      assert_int_equal(dcpi_local_plan_add_chunk(lp, (uint32_t)idx[ops[k].a], t->off[ops[k].b],
                                                 t->sz[ops[k].b], &err),
                       DCP_OK);
    } else {
      size_t i = ops[k].a;
      assert_int_equal(dcpi_local_plan_add_bytes(lp, s->bkey[i], s->bscope[i], s->blen[i], &err),
                       DCP_OK);
    }
  }
  assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_OK);
  return lp;
}

static dcpi_plan_key key_of(const spec *s, uint64_t shuffle_seed) {
  dcpi_local_plan *lp = build(s, shuffle_seed);
  dcpi_plan_key k;
  assert_int_equal(dcpi_plan_hash(lp, &k, NULL), DCP_OK);
  dcpi_local_plan_free(lp);
  return k;
}

/* Apply mutation m (0..) to s; false when it does not apply to this spec. */
static bool mutate(spec *s, int m, tu_rng *r) {
  spec_tensor *t = &s->t[tu_rng_range(r, 0, (int64_t)s->ntensors - 1)];
  switch (m) {
    case 0: if (s->world < 2) return false; s->rank = (s->rank + 1) % s->world; return true;
    case 1: s->world++; return true;
    case 2: s->opts.policy = s->opts.policy ? DCPI_BALANCE_LEAST_LOADED : DCPI_BALANCE_LOWEST_RANK; return true;
    case 3: s->opts.flags ^= 1u << tu_rng_range(r, 0, 31); return true;
    case 4: s->opts.block_size++; return true;
    case 5: t->name[strlen(t->name) - 1] = 'z'; return true; /* names end in a digit */
    case 6: strcat(t->name, "x"); return true;
    case 7: t->dtype = t->dtype == DCP_C64 ? DCP_BOOL : t->dtype + 1; return true;
    case 8: t->shape[tu_rng_range(r, 0, t->ndim - 1)]++; return true;
    case 9: /* one more dim of extent 1; every box covers it */
      if (t->ndim == 3) return false;
      t->shape[t->ndim] = 1;
      for (size_t c = 0; c < t->nchunks; c++) t->off[c][t->ndim] = 0, t->sz[c][t->ndim] = 1;
      t->ndim++;
      return true;
    case 10: if (!t->nchunks) return false; t->off[tu_rng_range(r, 0, (int64_t)t->nchunks - 1)][t->ndim - 1] += 7; return true;
    case 11: if (!t->nchunks) return false; t->sz[tu_rng_range(r, 0, (int64_t)t->nchunks - 1)][t->ndim - 1]++; return true;
    case 12: if (!t->nchunks) return false; t->nchunks--; return true;
    case 13: /* a new distinct chunk */
      if (t->nchunks == MAXC) return false;
      for (uint32_t d = 0; d < t->ndim; d++) t->off[t->nchunks][d] = d ? 0 : 100, t->sz[t->nchunks][d] = 1;
      t->nchunks++;
      return true;
    case 14: if (!s->nbytes) return false; s->bkey[0][0] = 'X'; return true;
    case 15: if (!s->nbytes) return false; s->bscope[0] = !s->bscope[0]; return true;
    case 16: if (!s->nbytes) return false; s->blen[s->nbytes - 1]++; return true;
    case 17: if (!s->nbytes) return false; s->nbytes--; return true;
    case 18: if (s->nbytes == MAXB) return false; snprintf(s->bkey[s->nbytes], 32, "new"); s->bscope[s->nbytes] = 0; s->blen[s->nbytes++] = 0; return true;
    case 19: if (s->ntensors == MAXT) return false; s->t[s->ntensors] = (spec_tensor){.name = "zz", .dtype = DCP_U8, .ndim = 1, .shape = {1}}; s->ntensors++; return true;
    case 20: if (s->ntensors < 2) return false; s->ntensors--; return true;
    default: return false;
  }
}
#define NMUT 21

static void test_mutations_change_key(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(21));
  int applied[NMUT] = {0};
  for (int round = 0; round < 60; round++) {
    spec s;
    random_spec(&r, &s);
    dcpi_plan_key k0 = key_of(&s, 0);
    /* insertion order never matters */
    for (uint64_t sh = 1; sh <= 3; sh++) assert_true(dcpi_plan_key_equal(k0, key_of(&s, sh + (uint64_t)round * 7)));
    for (int m = 0; m < NMUT; m++) {
      spec s2 = s;
      if (!mutate(&s2, m, &r)) continue;
      applied[m]++;
      dcpi_plan_key k1 = key_of(&s2, (uint64_t)m + 1);
      if (dcpi_plan_key_equal(k0, k1)) fail_msg("mutation %d kept the key (round %d)", m, round);
    }
  }
  for (int m = 0; m < NMUT; m++) assert_true(applied[m] > 0);
}

/* Length prefixes keep name boundaries: {"a","bc"} vs {"ab","c"}. */
static void test_unambiguous_names(void **state) {
  (void)state;
  dcpi_plan_key k[2];
  const char *names[2][2] = {{"a", "bc"}, {"ab", "c"}};
  for (int v = 0; v < 2; v++) {
    dcpi_local_plan *lp;
    assert_int_equal(dcpi_local_plan_create(0, 1, NULL, &lp, NULL), DCP_OK);
    int64_t shape[1] = {4};
    assert_int_equal(dcpi_local_plan_add_tensor(lp, names[v][0], DCP_U8, 1, shape, NULL, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(lp, names[v][1], DCP_U8, 1, shape, NULL, NULL), DCP_OK);
    assert_int_equal(dcpi_local_plan_finish(lp, NULL), DCP_OK);
    assert_int_equal(dcpi_plan_hash(lp, &k[v], NULL), DCP_OK);
    dcpi_local_plan_free(lp);
  }
  assert_false(dcpi_plan_key_equal(k[0], k[1]));
}

static void test_roundtrip(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(22));
  for (int round = 0; round < 40; round++) {
    spec s;
    random_spec(&r, &s);
    dcpi_local_plan *lp = build(&s, (uint64_t)round + 1), *back;
    uint8_t *a, *b;
    size_t alen, blen;
    dcpi_err err;
    assert_int_equal(dcpi_local_plan_encode(lp, &a, &alen, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_decode(a, alen, &back, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_encode(back, &b, &blen, &err), DCP_OK);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    assert_int_equal(dcpi_local_plan_rank(back), s.rank);
    assert_int_equal(dcpi_local_plan_world_size(back), s.world);
    assert_true(dcpi_save_opts_equal(dcpi_local_plan_opts(back), &s.opts));
    assert_int_equal(dcpi_local_plan_chunk_count(back), dcpi_local_plan_chunk_count(lp));
    dcpi_plan_key k1, k2;
    assert_int_equal(dcpi_plan_hash(lp, &k1, NULL), DCP_OK);
    assert_int_equal(dcpi_plan_hash(back, &k2, NULL), DCP_OK);
    assert_true(dcpi_plan_key_equal(k1, k2));
    /* every truncation and every single-bit flip is refused */
    for (size_t n = 0; n < alen; n++) {
      dcpi_local_plan *x = (dcpi_local_plan *)1;
      dcp_status rc = dcpi_local_plan_decode(a, n, &x, &err);
      assert_int_equal(rc, DCP_ECORRUPT);
      assert_null(x);
    }
    for (int f = 0; f < 64; f++) {
      size_t pos = (size_t)tu_rng_range(&r, 0, (int64_t)alen - 1);
      a[pos] ^= (uint8_t)(1u << tu_rng_range(&r, 0, 7));
      dcpi_local_plan *x;
      dcp_status rc = dcpi_local_plan_decode(a, alen, &x, &err);
      assert_true(rc == DCP_ECORRUPT || rc == DCP_EVERSION);
      a[pos] = b[pos];
    }
    free(a), free(b);
    dcpi_local_plan_free(lp);
    dcpi_local_plan_free(back);
  }
}

/* Frame random bodies with a valid header and checksum, so the body
 * parser itself is exercised: it must refuse or accept cleanly, and what
 * it accepts must re-encode to the input. */
static void test_decode_garbage(void **state) {
  (void)state;
  tu_rng r;
  tu_rng_seed(&r, tu_seed(23));
  uint8_t buf[256];
  for (int round = 0; round < 20000; round++) {
    size_t body = (size_t)tu_rng_range(&r, 0, 200);
    memcpy(buf, "DCPLPLAN\1\0\0\0", 12);
    for (size_t i = 0; i < body; i++) {
      /* mostly small varints, so parsing gets past the first fields */
      uint64_t v = tu_rng_next(&r);
      buf[12 + i] = (uint8_t)(v % 4 == 0 ? v >> 8 : (v >> 8) % 8);
    }
    uint64_t h = XXH3_64bits(buf, 12 + body);
    for (int k = 0; k < 8; k++) buf[12 + body + (size_t)k] = (uint8_t)(h >> (8 * k));
    dcpi_local_plan *x;
    dcpi_err err;
    dcp_status rc = dcpi_local_plan_decode(buf, 20 + body, &x, &err);
    if (rc == DCP_OK) {
      uint8_t *again;
      size_t n;
      assert_int_equal(dcpi_local_plan_encode(x, &again, &n, NULL), DCP_OK);
      assert_int_equal(n, 20 + body);
      assert_memory_equal(again, buf, n);
      free(again);
      dcpi_local_plan_free(x);
    } else {
      assert_int_equal(rc, DCP_ECORRUPT);
      assert_null(x);
    }
  }
  /* a huge count with a valid checksum is corrupt, not an allocation */
  static const uint8_t huge[] = {'D', 'C', 'P', 'L', 'P', 'L', 'A', 'N', 1, 0, 0, 0,
                                 0, 1, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F};
  memcpy(buf, huge, sizeof huge);
  uint64_t h = XXH3_64bits(buf, sizeof huge);
  for (int k = 0; k < 8; k++) buf[sizeof huge + (size_t)k] = (uint8_t)(h >> (8 * k));
  dcpi_local_plan *x;
  dcpi_err err;
  assert_int_equal(dcpi_local_plan_decode(buf, sizeof huge + 8, &x, &err), DCP_ECORRUPT);
  /* a newer version is EVERSION */
  buf[8] = 2;
  h = XXH3_64bits(buf, sizeof huge);
  for (int k = 0; k < 8; k++) buf[sizeof huge + (size_t)k] = (uint8_t)(h >> (8 * k));
  assert_int_equal(dcpi_local_plan_decode(buf, sizeof huge + 8, &x, &err), DCP_EVERSION);
}

static void test_unfinished(void **state) {
  (void)state;
  dcpi_local_plan *lp;
  assert_int_equal(dcpi_local_plan_create(0, 2, NULL, &lp, NULL), DCP_OK);
  dcpi_plan_key k;
  dcpi_err err;
  assert_int_equal(dcpi_plan_hash(lp, &k, &err), DCP_EINVAL);
  uint8_t *d;
  size_t n;
  assert_int_equal(dcpi_local_plan_encode(lp, &d, &n, &err), DCP_EINVAL);
  dcpi_local_plan_free(lp);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mutations_change_key),
      cmocka_unit_test(test_unambiguous_names),
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_decode_garbage),
      cmocka_unit_test(test_unfinished),
  };
  return TU_RUN(tests, NULL, NULL);
}
