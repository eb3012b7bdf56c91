#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t dcpi_hash_bytes(const void *data, size_t len) { return XXH3_64bits(data, len); }

void dcpi_strmap_free(dcpi_strmap *m) {
  free(m->slots);
  m->slots = NULL;
  m->cap = m->count = 0;
}

static size_t find_slot(const dcpi_strmap_slot *slots, size_t cap, const char *key,
                        size_t len, uint64_t hash) {
  size_t i = (size_t)hash & (cap - 1);
  while (slots[i].key) {
    if (slots[i].hash == hash && slots[i].len == len && memcmp(slots[i].key, key, len) == 0)
      return i;
    i = (i + 1) & (cap - 1);
  }
  return i;
}

int dcpi_strmap_get(const dcpi_strmap *m, const char *key, size_t len, uint32_t *value) {
  if (!m->cap) return 0;
  const dcpi_strmap_slot *s = &m->slots[find_slot(m->slots, m->cap, key, len,
                                                   dcpi_hash_bytes(key, len))];
  if (!s->key) return 0;
  *value = s->value;
  return 1;
}

static int grow(dcpi_strmap *m) {
  size_t cap = m->cap ? m->cap * 2 : 64;
  if (cap > SIZE_MAX / sizeof(dcpi_strmap_slot)) return DCP_EOVERFLOW;
  dcpi_strmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return DCP_ENOMEM;
  for (size_t i = 0; i < m->cap; i++) {
    const dcpi_strmap_slot *s = &m->slots[i];
    if (s->key) slots[find_slot(slots, cap, s->key, s->len, s->hash)] = *s;
  }
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return 0;
}

int dcpi_strmap_put(dcpi_strmap *m, const char *key, size_t len, uint32_t value,
                    uint32_t *existing) {
  /* Keep the load factor at or below 1/2 so probes stay short. */
  if ((m->count + 1) * 2 > m->cap) {
    int rc = grow(m);
    if (rc) return rc;
  }
  uint64_t hash = dcpi_hash_bytes(key, len);
  dcpi_strmap_slot *s = &m->slots[find_slot(m->slots, m->cap, key, len, hash)];
  if (s->key) {
    if (existing) *existing = s->value;
    return 1;
  }
  s->key = key;
  s->len = len;
  s->hash = hash;
  s->value = value;
  m->count++;
  return 0;
}
