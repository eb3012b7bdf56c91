#include "base/checked.h"

#include <stdlib.h>

dcp_status dcpi_reserve(void **buf, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return DCP_OK;
  size_t next = *cap ? *cap : 8;
  while (next < need) {
    if (next > SIZE_MAX / 2) return DCP_EOVERFLOW;
    next *= 2;
  }
  if (elem && next > SIZE_MAX / elem) return DCP_EOVERFLOW;
  void *grown = realloc(*buf, next * elem);
  if (!grown) return DCP_ENOMEM;
  *buf = grown;
  *cap = next;
  return DCP_OK;
}
