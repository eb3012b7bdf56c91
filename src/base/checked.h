/* checked.h — overflow-checked int64 arithmetic and growable arrays. */
#ifndef DCP_BASE_CHECKED_H
#define DCP_BASE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "dcp.h"

/* qsort that accepts an empty array given as NULL: C leaves qsort(NULL, 0, ...)
 * undefined, and the growable arrays here stay NULL until something is
 * appended. */
static inline void dcpi_sort(void *base, size_t n, size_t size,
                             int (*cmp)(const void *, const void *)) {
  if (n > 1) qsort(base, n, size, cmp);
}

/* *out = a * b; false when it overflows int64. */
static inline bool dcpi_mul_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* *out = a + b; false when it overflows int64. */
static inline bool dcpi_add_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* Ensure *buf (of *cap elements of elem bytes) holds at least need elements,
 * growing geometrically. Returns DCP_OK, DCP_EOVERFLOW or DCP_ENOMEM; on
 * failure *buf and *cap are unchanged. */
dcp_status dcpi_reserve(void **buf, size_t *cap, size_t need, size_t elem);

/* Type-safe wrapper: DCPI_RESERVE(vec.items, vec.cap, n). */
#define DCPI_RESERVE(ptr, cap, need) \
  dcpi_reserve((void **)&(ptr), &(cap), (need), sizeof *(ptr))

#endif
