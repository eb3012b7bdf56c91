/* plan_cache.c — a few slots of (plan key → global plan pieces), LRU. */
#include "runtime/plan_cache.h"

#include <stdlib.h>
#include <string.h>

dcpi_plan_entry *dcpi_plan_cache_find(dcpi_plan_cache *c, dcpi_plan_key key) {
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++) {
    dcpi_plan_entry *e = &c->slots[i];
    if (e->generation > 0 && dcpi_plan_key_equal(e->key, key)) {
      e->stamp = ++c->clock;
      return e;
    }
  }
  return NULL;
}

static void entry_free(dcpi_plan_entry *e) {
  free(e->assignment);
  dcpi_global_plan_free(e->gp);
  memset(e, 0, sizeof *e);
}

bool dcpi_plan_cache_put(dcpi_plan_cache *c, dcpi_plan_key key, int64_t generation,
                         const uint8_t *assignment, size_t len, dcpi_global_plan *gp) {
  dcpi_plan_entry *victim = &c->slots[0];
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++) {
    dcpi_plan_entry *e = &c->slots[i];
    if (e->generation > 0 && dcpi_plan_key_equal(e->key, key)) {
      victim = e; /* replace an older plan of the same key */
      break;
    }
    if (e->stamp < victim->stamp) victim = e;
  }
  entry_free(victim);
  uint8_t *copy = malloc(len ? len : 1);
  if (!copy) return false;
  if (len) memcpy(copy, assignment, len);
  *victim = (dcpi_plan_entry){.key = key, .generation = generation, .assignment = copy,
                              .assignment_len = len, .gp = gp, .stamp = ++c->clock};
  return true;
}

void dcpi_plan_cache_clear(dcpi_plan_cache *c) {
  if (!c) return;
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++) entry_free(&c->slots[i]);
}
