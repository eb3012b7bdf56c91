/* radix.c — stable LSD radix sort over 8-bit digits. */
#include "base/radix.h"

#include <string.h>

#define MAX_DIGITS 8
#define BUCKETS 256
#define SMALL 32 /* below this, insertion sort beats histograms */

/* Histograms of the low `digits` digit positions in one pass. */
static void histogram(const dcpi_kv64 *a, size_t n, int digits,
                      size_t count[MAX_DIGITS][BUCKETS]) {
  memset(count, 0, sizeof(size_t) * BUCKETS * (size_t)digits);
  for (size_t i = 0; i < n; i++) {
    uint64_t k = a[i].key;
    for (int d = 0; d < digits; d++) count[d][(k >> (8 * d)) & 0xFF]++;
  }
}

/* Stable scatter of src into dst by digit d, given that digit's counts. */
static void scatter(const dcpi_kv64 *src, dcpi_kv64 *dst, size_t n, int d,
                    const size_t count[BUCKETS]) {
  size_t pos[BUCKETS], sum = 0;
  for (int b = 0; b < BUCKETS; b++) {
    pos[b] = sum;
    sum += count[b];
  }
  for (size_t i = 0; i < n; i++) dst[pos[(src[i].key >> (8 * d)) & 0xFF]++] = src[i];
}

/* Stable: an element moves left only past strictly greater keys. */
static void insertion_sort(dcpi_kv64 *a, size_t n) {
  for (size_t i = 1; i < n; i++) {
    dcpi_kv64 x = a[i];
    size_t j = i;
    for (; j > 0 && a[j - 1].key > x.key; j--) a[j] = a[j - 1];
    a[j] = x;
  }
}

static int digits_of(uint64_t max_key) {
  int d = 0;
  for (; max_key; max_key >>= 8) d++;
  return d;
}

dcpi_kv64 *dcpi_radix_sort_kv(dcpi_kv64 *a, dcpi_kv64 *tmp, size_t n, uint64_t max_key) {
  if (n < SMALL) {
    insertion_sort(a, n);
    return a;
  }
  _Static_assert(sizeof(size_t) * MAX_DIGITS * BUCKETS <= 16384, "histogram fits the stack");
  size_t count[MAX_DIGITS][BUCKETS];
  int digits = digits_of(max_key);
  histogram(a, n, digits, count);
  dcpi_kv64 *src = a, *dst = tmp;
  for (int d = 0; d < digits; d++) {
    /* A digit shared by every key cannot reorder anything: skip the pass. */
    if (count[d][(src[0].key >> (8 * d)) & 0xFF] == n) continue;
    scatter(src, dst, n, d, count[d]);
    dcpi_kv64 *t = src;
    src = dst;
    dst = t;
  }
  return src;
}
