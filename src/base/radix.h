/* radix.h — stable LSD radix sort of (key, value) pairs by a 64-bit key.
 * The planner and the metadata encoder sort millions of precomputed keys
 * with it instead of a comparator-driven qsort. */
#ifndef DCP_BASE_RADIX_H
#define DCP_BASE_RADIX_H

#include <stddef.h>
#include <stdint.h>

typedef struct dcpi_kv64 {
  uint64_t key;
  uint64_t val;
} dcpi_kv64;

/* Sort a[0..n) by key, stably (equal keys keep their input order), using
 * tmp[0..n) as scratch; every key must be <= max_key, which bounds the
 * digits looked at. Returns whichever of a and tmp holds the result.
 * Digits where every key agrees are skipped, and short arrays are
 * insertion-sorted in place, so small inputs stay cheap. */
dcpi_kv64 *dcpi_radix_sort_kv(dcpi_kv64 *a, dcpi_kv64 *tmp, size_t n, uint64_t max_key);

#endif
