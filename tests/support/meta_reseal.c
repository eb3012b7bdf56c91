/* meta_reseal.c — see meta_reseal.h. */
#include "meta_reseal.h"

#include <xxhash.h>

#include "base/wire.h"
#include "metadata/format.h"

void tu_meta_reseal(uint8_t *p, size_t len) {
  if (len < DCPI_SECTIONS_START + DCPI_TRAILER_SIZE) return;
  for (unsigned i = 0; i < DCPI_SEC_COUNT; i++) {
    uint8_t *d = p + DCPI_HEADER_SIZE + i * DCPI_DIRENT_SIZE;
    uint64_t off = dcpi_get_u64(d + 8), n = dcpi_get_u64(d + 16);
    if (off <= len && n <= len - off) dcpi_put_u64(d + 24, XXH3_64bits(p + off, (size_t)n));
  }
  dcpi_put_u64(p + len - 8, XXH3_64bits(p, len - 8));
}
