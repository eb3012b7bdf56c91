/* sized.c — merging and filling size-prefixed public structs (sized.h). */
#include "base/sized.h"

#include <string.h>

/* The struct_size at the head of a public struct (memcpy: the struct's own
 * type is not known here). */
static uint32_t size_of(const void *s) {
  uint32_t n;
  memcpy(&n, s, sizeof n);
  return n;
}

bool dcpi_sized_merge(void *out, size_t out_size, const void *in, size_t min_size) {
  if (!in) return true;
  uint32_t n = size_of(in);
  if (n < min_size || n < sizeof(uint32_t)) return false;
  memcpy(out, in, n < out_size ? n : out_size);
  uint32_t own = (uint32_t)out_size;
  memcpy(out, &own, sizeof own);
  return true;
}

bool dcpi_sized_fill(void *out, const void *full, size_t full_size) {
  uint32_t n = size_of(out);
  if (n < sizeof(uint32_t)) return false;
  memcpy(out, full, n < full_size ? n : full_size);
  memcpy(out, &n, sizeof n);
  return true;
}
