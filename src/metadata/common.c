/* common.c — see common.h. */
#include "metadata/common.h"

#include <string.h>

int dcpi_md_cmp_bytes(const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  if (c) return c;
  return (alen > blen) - (alen < blen);
}

int dcpi_md_cmp_i64(const int64_t *a, const int64_t *b, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

void dcpi_md_predict_offset(uint32_t ndim, const int64_t *shape, const int64_t *prev_off,
                            const int64_t *prev_size, bool first, int64_t *out) {
  if (first) {
    for (uint32_t d = 0; d < ndim; d++) out[d] = 0;
    return;
  }
  for (uint32_t d = 0; d < ndim; d++) out[d] = prev_off[d];
  for (uint32_t d = ndim; d-- > 0;) {
    out[d] += prev_size[d];
    if (out[d] < shape[d] || d == 0) return;
    out[d] = 0; /* wrapped: carry into the previous dimension */
  }
}
