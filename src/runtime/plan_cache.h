/* plan_cache.h — the save plan cache of a context.
 *
 * A save whose every rank has the same local plan as in an earlier save
 * (same fqns, dtypes, shapes, boxes, scopes, world and options: the
 * XXH3-128 plan key) reuses that save's global plan: no gather or scatter
 * of plans, one tiny agreement instead. Entries are tagged with a
 * generation that identifies the global plan they belong to (a hash of all
 * ranks' encoded plans, made by rank 0), so ranks never mix entries of
 * different saves. A key covers geometry, never data, so a cache entry
 * cannot go stale: changed shapes or sharding change the key.
 *
 * An entry is serialisable (dcpi_plan_entry_encode): on rank 0 it keeps
 * every rank's encoded local plan, from which the global plan is rebuilt
 * where it arrives without one. That is how the trainer and its writer
 * process share one cache: each side sends the other the entries it has not
 * shared yet (docs/async.md). The cache is locked, because a trainer's join
 * thread adds entries while a save may be using others; entries are
 * reference counted, so one in use survives its eviction.
 *
 * A context's cache (dcpi_ctx_plan_cache) is made on first use and attached
 * to the context, which holds it as an opaque pointer and frees it in
 * dcp_ctx_free (core/ctx.h). The functions below take a NULL cache (one that
 * could not be allocated) as a cache that keeps nothing: the cache is an
 * optimisation, never an error. */
#ifndef DCP_RUNTIME_PLAN_CACHE_H
#define DCP_RUNTIME_PLAN_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/wire.h"
#include "dcp.h"
#include "planner/save_plan.h"

#define DCPI_PLAN_CACHE_SLOTS 4

typedef struct dcpi_plan_entry {
  dcpi_plan_key key;   /* this rank's local plan key */
  int64_t generation;  /* >= 1 */
  uint8_t *assignment; /* what this rank writes (owned) */
  size_t assignment_len;
  /* Rank 0 only (world > 0): every rank's encoded local plan, back to
   * back, plan_lens[r] bytes each, as gathered; and the global plan built
   * from them, NULL until built (read and set under the cache's lock). */
  int32_t world;
  uint8_t *plans;
  size_t *plan_lens;
  dcpi_global_plan *gp;
  /* Cache bookkeeping (under the lock). */
  uint32_t refs;  /* the cache's slot + every borrower */
  bool shared;    /* the other side (trainer or writer) has it */
  uint64_t stamp; /* for replacing the least recently used */
} dcpi_plan_entry;

typedef struct dcpi_plan_cache {
  pthread_mutex_t mu;
  dcpi_plan_entry *slots[DCPI_PLAN_CACHE_SLOTS];
  uint64_t clock;
} dcpi_plan_cache;

/* ctx's plan cache, made and attached to ctx on first use; NULL when out of
 * memory (see above). It lives until dcp_ctx_free. */
dcpi_plan_cache *dcpi_ctx_plan_cache(dcp_ctx *ctx);

/* Initialise an empty cache / free every entry and the lock (c may be NULL
 * for clear; entries still borrowed must have been released). */
void dcpi_plan_cache_init(dcpi_plan_cache *c);
void dcpi_plan_cache_clear(dcpi_plan_cache *c);

/* A new entry (refs 1, not shared) that takes ownership of assignment,
 * plans and plan_lens (plans/plan_lens NULL and world 0 off rank 0) and,
 * when not NULL, of gp. On allocation failure returns NULL and frees what it
 * was given. */
dcpi_plan_entry *dcpi_plan_entry_new(dcpi_plan_key key, int64_t generation,
                                     uint8_t *assignment, size_t assignment_len,
                                     int32_t world, uint8_t *plans, size_t *plan_lens,
                                     dcpi_global_plan *gp);

/* Free an entry that no cache holds (the result of dcpi_plan_entry_new or
 * _decode before it is put). NULL is a no-op. */
void dcpi_plan_entry_drop(dcpi_plan_entry *e);

/* The entry for key with a reference for the caller, or NULL. Marks it
 * used. Release with dcpi_plan_cache_release. */
dcpi_plan_entry *dcpi_plan_cache_get(dcpi_plan_cache *c, dcpi_plan_key key);

/* Drop a reference taken by dcpi_plan_cache_get (e may be NULL). */
void dcpi_plan_cache_release(dcpi_plan_cache *c, dcpi_plan_entry *e);

/* Store e (the caller's reference passes to the cache), replacing an entry
 * of the same key or else the least recently used one. An entry of the same
 * key and generation already there is kept instead and e is dropped (the
 * two are equal; the kept one is marked shared when e is). */
void dcpi_plan_cache_put(dcpi_plan_cache *c, dcpi_plan_entry *e);

/* Rank 0's global plan of e: the one built, or built now from e's plans
 * and kept in e. NULL (with the reason in err) when e has no plans or they
 * do not decode. The result lives as long as e. */
dcpi_global_plan *dcpi_plan_entry_global(dcpi_plan_cache *c, dcpi_plan_entry *e,
                                         dcpi_err *err);

/* Up to cap entries not yet shared, each with a reference for the caller,
 * marked shared; returns how many. */
size_t dcpi_plan_cache_take_unshared(dcpi_plan_cache *c, dcpi_plan_entry **out, size_t cap);

/* Mark every entry not shared (the other side was replaced). */
void dcpi_plan_cache_unshare_all(dcpi_plan_cache *c);

/* Append e's serialised form to w (errors show in w->status). */
void dcpi_plan_entry_encode(const dcpi_plan_entry *e, dcpi_wbuf *w);

/* Decode one serialised entry (all of p[0..len)) into a new entry, marked
 * shared. Errors: DCP_ECORRUPT (malformed, out of bounds, trailing bytes),
 * DCP_ENOMEM. */
dcp_status dcpi_plan_entry_decode(const uint8_t *p, size_t len, dcpi_plan_entry **out,
                                  dcpi_err *err);

/* Rank 0: decode every rank's encoded plan (back to back, lens[r] bytes
 * each) and build the global plan. Errors: as the plan decoder and
 * builder, the message naming the rank whose plan is bad. */
dcp_status dcpi_global_plan_from_encoded(const uint8_t *all, const size_t *lens, int32_t world,
                                         dcpi_global_plan **out, dcpi_err *err);

#endif
