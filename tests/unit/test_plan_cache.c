/* test_plan_cache.c — the save plan cache: lookups by key, LRU
 * replacement, reference counts that keep a borrowed entry alive past its
 * eviction, the shared flag that drives the trainer ↔ writer exchange, and
 * the serialised form (round trip; every truncation and trailing byte
 * refused; rank 0's global plan rebuilt from the carried plans). */
#include <stdlib.h>
#include <string.h>

#include "runtime/plan_cache.h"
#include "testutil.h"

static dcpi_plan_key key_of(uint64_t n) { return (dcpi_plan_key){n, ~n}; }

static uint8_t *bytes_of(const char *s) {
  uint8_t *p = malloc(strlen(s) + 1);
  memcpy(p, s, strlen(s) + 1);
  return p;
}

static dcpi_plan_entry *entry(uint64_t k, int64_t gen) {
  dcpi_plan_entry *e = dcpi_plan_entry_new(key_of(k), gen, bytes_of("assign"), 6, 0, NULL,
                                           NULL, NULL);
  assert_non_null(e);
  return e;
}

static void test_get_put_lru(void **state) {
  (void)state;
  dcpi_plan_cache c;
  dcpi_plan_cache_init(&c);
  assert_null(dcpi_plan_cache_get(&c, key_of(1)));
  for (uint64_t k = 1; k <= DCPI_PLAN_CACHE_SLOTS; k++) dcpi_plan_cache_put(&c, entry(k, 10));
  dcpi_plan_entry *one = dcpi_plan_cache_get(&c, key_of(1)); /* 1 is now the newest */
  assert_non_null(one);
  assert_int_equal(one->generation, 10);
  dcpi_plan_cache_release(&c, one);
  dcpi_plan_cache_put(&c, entry(99, 10)); /* evicts 2, the least recently used */
  assert_null(dcpi_plan_cache_get(&c, key_of(2)));
  dcpi_plan_entry *e = dcpi_plan_cache_get(&c, key_of(1));
  assert_non_null(e);
  dcpi_plan_cache_release(&c, e);
  dcpi_plan_cache_clear(&c);
}

static void test_borrowed_entry_survives_replacement(void **state) {
  (void)state;
  dcpi_plan_cache c;
  dcpi_plan_cache_init(&c);
  dcpi_plan_cache_put(&c, entry(5, 1));
  dcpi_plan_entry *held = dcpi_plan_cache_get(&c, key_of(5));
  dcpi_plan_cache_put(&c, entry(5, 2)); /* a newer plan of the same key */
  assert_int_equal(held->generation, 1); /* still valid (ASan would see a use after free) */
  assert_memory_equal(held->assignment, "assign", 6);
  dcpi_plan_cache_release(&c, held);
  dcpi_plan_entry *now = dcpi_plan_cache_get(&c, key_of(5));
  assert_int_equal(now->generation, 2);
  dcpi_plan_cache_release(&c, now);
  /* the same key and generation again: the entry in place is kept */
  dcpi_plan_entry *dup = entry(5, 2);
  dup->shared = true;
  dcpi_plan_cache_put(&c, dup);
  now = dcpi_plan_cache_get(&c, key_of(5));
  assert_true(now->shared);
  dcpi_plan_cache_release(&c, now);
  dcpi_plan_cache_clear(&c);
}

/* A key is stored once even when an empty slot comes before its slot. */
static void test_one_slot_per_key(void **state) {
  (void)state;
  dcpi_plan_cache c;
  dcpi_plan_cache_init(&c);
  dcpi_plan_cache_put(&c, entry(1, 1));
  dcpi_plan_cache_put(&c, entry(2, 1));
  dcpi_plan_entry *first = c.slots[0];
  c.slots[0] = NULL; /* make slot 0 empty, key 2 in slot 1 */
  dcpi_plan_cache_put(&c, entry(2, 7));
  size_t n = 0;
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++)
    if (c.slots[i] && dcpi_plan_key_equal(c.slots[i]->key, key_of(2))) n++;
  assert_int_equal(n, 1);
  dcpi_plan_entry *e = dcpi_plan_cache_get(&c, key_of(2));
  assert_int_equal(e->generation, 7);
  dcpi_plan_cache_release(&c, e);
  c.slots[0] = first;
  dcpi_plan_cache_clear(&c);
}

static void test_shared_flag(void **state) {
  (void)state;
  dcpi_plan_cache c;
  dcpi_plan_cache_init(&c);
  dcpi_plan_cache_put(&c, entry(1, 1));
  dcpi_plan_cache_put(&c, entry(2, 1));
  dcpi_plan_entry *out[DCPI_PLAN_CACHE_SLOTS];
  size_t n = dcpi_plan_cache_take_unshared(&c, out, DCPI_PLAN_CACHE_SLOTS);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < n; i++) dcpi_plan_cache_release(&c, out[i]);
  assert_int_equal(dcpi_plan_cache_take_unshared(&c, out, DCPI_PLAN_CACHE_SLOTS), 0);
  dcpi_plan_cache_unshare_all(&c); /* a new writer process */
  n = dcpi_plan_cache_take_unshared(&c, out, DCPI_PLAN_CACHE_SLOTS);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < n; i++) dcpi_plan_cache_release(&c, out[i]);
  dcpi_plan_cache_clear(&c);
}

/* Two ranks' encoded plans of a 2-row tensor split by rows, and a bytes item
 * both hold. */
static void two_plans(uint8_t **all, size_t **lens) {
  uint8_t *enc[2];
  size_t len[2];
  dcpi_err err;
  for (int r = 0; r < 2; r++) {
    dcpi_local_plan *lp;
    int64_t shape[2] = {2, 3}, off[2] = {r, 0}, size[2] = {1, 3};
    uint32_t t;
    assert_int_equal(dcpi_local_plan_create(r, 2, NULL, &lp, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_tensor(lp, "w", DCP_F32, 2, shape, &t, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_chunk(lp, t, off, size, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_add_bytes(lp, "cfg", DCP_SCOPE_REPLICATED, 9, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_finish(lp, &err), DCP_OK);
    assert_int_equal(dcpi_local_plan_encode(lp, &enc[r], &len[r], &err), DCP_OK);
    dcpi_local_plan_free(lp);
  }
  *all = malloc(len[0] + len[1]);
  memcpy(*all, enc[0], len[0]);
  memcpy(*all + len[0], enc[1], len[1]);
  *lens = malloc(2 * sizeof **lens);
  (*lens)[0] = len[0], (*lens)[1] = len[1];
  free(enc[0]), free(enc[1]);
}

static void test_serialised_roundtrip(void **state) {
  (void)state;
  uint8_t *all;
  size_t *lens;
  two_plans(&all, &lens);
  dcpi_plan_entry *e = dcpi_plan_entry_new(key_of(7), 12345, bytes_of("xyz"), 3, 2, all, lens,
                                           NULL);
  dcpi_wbuf w = {0};
  dcpi_plan_entry_encode(e, &w);
  assert_int_equal(w.status, DCP_OK);
  dcpi_err err;
  dcpi_plan_entry *d;
  assert_int_equal(dcpi_plan_entry_decode(w.data, w.len, &d, &err), DCP_OK);
  assert_true(dcpi_plan_key_equal(d->key, key_of(7)));
  assert_int_equal(d->generation, 12345);
  assert_int_equal(d->assignment_len, 3);
  assert_memory_equal(d->assignment, "xyz", 3);
  assert_int_equal(d->world, 2);
  assert_true(d->shared); /* it came from the other side */
  /* rank 0's global plan is rebuilt from the plans that travelled */
  dcpi_plan_cache c;
  dcpi_plan_cache_init(&c);
  dcpi_plan_cache_put(&c, d);
  dcpi_plan_entry *got = dcpi_plan_cache_get(&c, key_of(7));
  dcpi_global_plan *gp = dcpi_plan_entry_global(&c, got, &err);
  assert_non_null(gp);
  assert_int_equal(dcpi_global_plan_tensor_count(gp), 1);
  assert_int_equal(dcpi_global_plan_item_count(gp), 2);  /* two row chunks */
  assert_int_equal(dcpi_global_plan_bytes_count(gp), 1); /* cfg once, deduplicated */
  assert_ptr_equal(dcpi_plan_entry_global(&c, got, &err), gp); /* built once */
  dcpi_plan_cache_release(&c, got);
  dcpi_plan_cache_clear(&c);
  /* every truncation and a trailing byte are refused */
  for (size_t cut = 0; cut < w.len; cut++) {
    assert_int_equal(dcpi_plan_entry_decode(w.data, cut, &d, &err), DCP_ECORRUPT);
    assert_null(d);
  }
  dcpi_w_u8(&w, 0);
  assert_int_equal(dcpi_plan_entry_decode(w.data, w.len, &d, &err), DCP_ECORRUPT);
  /* single-byte changes decode or fail, never read out of bounds */
  for (size_t i = 0; i + 1 < w.len; i++) {
    w.data[i] ^= 0x5a;
    if (dcpi_plan_entry_decode(w.data, w.len - 1, &d, &err) == DCP_OK) dcpi_plan_entry_drop(d);
    w.data[i] ^= 0x5a;
  }
  dcpi_wbuf_free(&w);
  dcpi_plan_entry_drop(e);
}

static void test_entry_without_plans_has_no_global_plan(void **state) {
  (void)state;
  dcpi_plan_cache c;
  dcpi_plan_cache_init(&c);
  dcpi_plan_cache_put(&c, entry(3, 1));
  dcpi_plan_entry *e = dcpi_plan_cache_get(&c, key_of(3));
  dcpi_err err;
  dcpi_err_clear(&err);
  assert_null(dcpi_plan_entry_global(&c, e, &err));
  assert_int_equal(err.code, DCP_EINVAL);
  dcpi_plan_cache_release(&c, e);
  dcpi_plan_cache_clear(&c);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get_put_lru),
      cmocka_unit_test(test_borrowed_entry_survives_replacement),
      cmocka_unit_test(test_one_slot_per_key),
      cmocka_unit_test(test_shared_flag),
      cmocka_unit_test(test_serialised_roundtrip),
      cmocka_unit_test(test_entry_without_plans_has_no_global_plan),
  };
  return TU_RUN(tests, NULL, NULL);
}
