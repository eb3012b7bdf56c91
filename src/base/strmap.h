/* strmap.h — an open-addressing hash map from byte strings to uint32 values.
 *
 * Keys are borrowed: the map stores the caller's pointer and length, which
 * must outlive the map. Used to intern fqns (state, planner, metadata). */
#ifndef DCP_BASE_STRMAP_H
#define DCP_BASE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

typedef struct dcpi_strmap_slot {
  const char *key; /* NULL: empty slot */
  size_t len;
  uint64_t hash;
  uint32_t value;
} dcpi_strmap_slot;

typedef struct dcpi_strmap {
  dcpi_strmap_slot *slots;
  size_t cap; /* power of two, or 0 */
  size_t count;
} dcpi_strmap;

/* 64-bit hash of a byte string (xxh3). */
uint64_t dcpi_hash_bytes(const void *data, size_t len);

/* An empty map is all-zero; dcpi_strmap_free releases it. */
void dcpi_strmap_free(dcpi_strmap *m);

/* Look up key. Returns 1 and sets *value when found, else 0. */
int dcpi_strmap_get(const dcpi_strmap *m, const char *key, size_t len, uint32_t *value);

/* Insert key → value unless present. Sets *existing to the stored value and
 * returns 1 when the key was already there (the map is unchanged), returns 0
 * after inserting, or a negative dcp_status (DCP_ENOMEM, DCP_EOVERFLOW). */
int dcpi_strmap_put(dcpi_strmap *m, const char *key, size_t len, uint32_t value,
                    uint32_t *existing);

#endif
