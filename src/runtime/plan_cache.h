/* plan_cache.h — the save plan cache of a context.
 *
 * A save whose every rank has the same local plan as in an earlier save
 * (same fqns, dtypes, shapes, boxes, scopes, world and options: the
 * XXH3-128 plan key) reuses that save's global plan: no gather or scatter
 * of plans, one tiny agreement instead. Entries are tagged with a
 * generation that identifies the global plan they belong to (a hash of all
 * ranks' encoded plans, made by rank 0), so ranks never mix entries of
 * different saves. A key covers geometry, never data, so a cache entry
 * cannot go stale: changed shapes or sharding change the key. */
#ifndef DCP_RUNTIME_PLAN_CACHE_H
#define DCP_RUNTIME_PLAN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "planner/save_plan.h"

#define DCPI_PLAN_CACHE_SLOTS 4

typedef struct dcpi_plan_entry {
  dcpi_plan_key key;   /* this rank's local plan key */
  int64_t generation;  /* >= 1 when the slot is used */
  uint8_t *assignment; /* what this rank writes (owned) */
  size_t assignment_len;
  dcpi_global_plan *gp; /* rank 0 only (owned), else NULL */
  uint64_t stamp;       /* for replacing the least recently used */
} dcpi_plan_entry;

typedef struct dcpi_plan_cache {
  dcpi_plan_entry slots[DCPI_PLAN_CACHE_SLOTS];
  uint64_t clock;
} dcpi_plan_cache;

/* The entry for key, or NULL. Marks it used. */
dcpi_plan_entry *dcpi_plan_cache_find(dcpi_plan_cache *c, dcpi_plan_key key);

/* Store (key, generation, a copy of the assignment, gp) replacing the least
 * recently used slot and take ownership of gp (may be NULL): returns true.
 * On allocation failure nothing is cached and the caller keeps gp: returns
 * false (the cache is an optimisation, never an error). */
bool dcpi_plan_cache_put(dcpi_plan_cache *c, dcpi_plan_key key, int64_t generation,
                         const uint8_t *assignment, size_t len, dcpi_global_plan *gp);

/* Free every entry (c may be NULL; the struct itself is not freed). */
void dcpi_plan_cache_clear(dcpi_plan_cache *c);

#endif
