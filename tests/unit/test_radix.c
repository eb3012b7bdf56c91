/* test_radix.c — dcpi_radix_sort_kv (src/base/radix.c) against a stable
 * qsort reference (by key, then input position) on every path it takes:
 * the insertion sort below 32 items (its fallback for short arrays), the
 * digit passes, digits skipped because every key shares them, an even and
 * an odd number of passes (the result in a or in tmp), max_key 0 (no digit
 * at all) and full 64-bit keys. Stability matters: the planner relies on
 * equal keys keeping rank order. */
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/radix.h"
#include "metadata/meta.h"
#include "testutil.h"

/* The reference order: key, then the value (the input position). */
static int cmp_ref(const void *a, const void *b) {
  const dcpi_kv64 *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->val > y->val) - (x->val < y->val);
}

/* Key i of n under pattern p, bounded by max_key. */
static uint64_t make_key(tu_rng *rng, int p, size_t i, size_t n, uint64_t max_key) {
  uint64_t r = tu_rng_next(rng);
  switch (p) {
    case 0: return max_key == UINT64_MAX ? r : r % (max_key + 1);      /* uniform */
    case 1: return max_key;                                           /* all equal */
    case 2: return (r % 4) * (max_key / 4);                           /* few, duplicated */
    case 3: return max_key - (max_key / (n + 1)) * (uint64_t)i;        /* descending */
    case 4: return (max_key / (n + 1)) * (uint64_t)i;                  /* ascending */
    default: return ((r % 16) << 8 | 0x5a) & max_key;                 /* digits 0 and 2+ shared */
  }
}

/* Sort n keys of pattern p both ways; the orders must be equal. */
static void check_one(tu_rng *rng, size_t n, uint64_t max_key, int p) {
  dcpi_kv64 *a = malloc((n ? n : 1) * sizeof *a), *tmp = malloc((n ? n : 1) * sizeof *tmp);
  dcpi_kv64 *ref = malloc((n ? n : 1) * sizeof *ref);
  assert_true(a && tmp && ref);
  for (size_t i = 0; i < n; i++) a[i] = ref[i] = (dcpi_kv64){make_key(rng, p, i, n, max_key), i};
  dcpi_sort(ref, n, sizeof *ref, cmp_ref);
  dcpi_kv64 *got = dcpi_radix_sort_kv(a, tmp, n, max_key);
  assert_true(got == a || got == tmp);
  for (size_t i = 0; i < n; i++) {
    if (got[i].key != ref[i].key || got[i].val != ref[i].val)
      fail_msg("n %zu max_key %llu pattern %d: item %zu is (%llu, %llu), want (%llu, %llu)", n,
               (unsigned long long)max_key, p, i, (unsigned long long)got[i].key,
               (unsigned long long)got[i].val, (unsigned long long)ref[i].key,
               (unsigned long long)ref[i].val);
  }
  free(a), free(tmp), free(ref);
}

static void test_against_qsort(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(4242));
  static const size_t sizes[] = {0, 1, 2, 3, 31, 32, 33, 100, 257, 4096};
  static const uint64_t maxes[] = {0, 1, 255, 256, 65535, 65536, 1ull << 40, UINT64_MAX - 1,
                                   UINT64_MAX};
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (size_t m = 0; m < sizeof maxes / sizeof *maxes; m++)
      for (int p = 0; p < 6; p++) check_one(&rng, sizes[s], maxes[m], p);
}

/* Random sizes around the insertion-sort threshold and random widths. */
static void test_random(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(4243));
  for (int k = 0; k < 400; k++) {
    size_t n = (size_t)tu_rng_range(&rng, 0, k % 2 ? 64 : 3000);
    uint64_t max_key = tu_rng_next(&rng) >> tu_rng_range(&rng, 0, 63);
    check_one(&rng, n, max_key, (int)tu_rng_range(&rng, 0, 5));
  }
}

/* Encode one tensor of 12 bands of 300 rows x 50000 columns, each band
 * cut at random columns (keys of two digits), the boxes added in the order
 * perm gives. */
static void *encode_rows(const int64_t (*box)[4], const size_t *perm, size_t n, size_t *len) {
  dcpi_md *md;
  dcpi_err err;
  uint32_t tid;
  int64_t shape[2] = {3600, 50000};
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md, "f", NULL, &err), DCP_OK);
  assert_int_equal(dcpi_md_add_tensor(md, "t", DCP_U8, 2, shape, -1, NULL, &tid, &err), DCP_OK);
  for (size_t i = 0; i < n; i++) {
    const int64_t *b = box[perm[i]];
    uint64_t raw = (uint64_t)(b[2] * b[3]), ck = perm[i];
    dcp_storage_ref ref = {.file = 0, .codec = DCP_CODEC_NONE, .block_size = 1u << 30,
                           .offset = 64 * perm[i], .stored_length = raw, .raw_length = raw,
                           .block_count = 1, .block_checksums = &ck};
    assert_int_equal(dcpi_md_add_chunk(md, tid, b, b + 2, &ref, &err), DCP_OK);
  }
  void *buf;
  assert_int_equal(dcpi_md_encode(md, &buf, len, &err), DCP_OK);
  dcpi_md_free(md);
  return buf;
}

/* The encoder sorts an unsorted chunk list by radix passes (keys shared
 * across rows: every pass must be stable); the bytes must equal those of
 * the same chunks added already sorted (no sort at all). */
static void test_encoder_order(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(4244));
  for (int k = 0; k < 50; k++) {
    int64_t box[600][4];
    size_t n = 0, sorted[600], perm[600];
    for (int64_t r = 0; r < 12; r++)
      for (int64_t c = 0; c < 50000;) {
        int64_t w = tu_rng_range(&rng, 1, 4000);
        if (c + w > 50000) w = 50000 - c;
        assert_true(n < 600);
        box[n][0] = r * 300, box[n][1] = c, box[n][2] = 300, box[n][3] = w;
        c += w, n++;
      }
    for (size_t i = 0; i < n; i++) sorted[i] = perm[i] = i;
    for (size_t i = n; i-- > 1;) {
      size_t j = (size_t)tu_rng_range(&rng, 0, (int64_t)i), x = perm[i];
      perm[i] = perm[j], perm[j] = x;
    }
    size_t la, lb;
    void *a = encode_rows((const int64_t (*)[4])box, sorted, n, &la);
    void *b = encode_rows((const int64_t (*)[4])box, perm, n, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a), free(b);
  }
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_against_qsort),
      cmocka_unit_test(test_random),
      cmocka_unit_test(test_encoder_order),
  };
  return TU_RUN(tests, NULL, NULL);
}
