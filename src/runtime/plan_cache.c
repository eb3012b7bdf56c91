/* plan_cache.c — a few slots of (plan key → global plan pieces), LRU,
 * locked and reference counted; entries serialise for the trainer ↔ writer
 * exchange (see plan_cache.h). */
#include "runtime/plan_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/ctx.h"

/* ---- entries ------------------------------------------------------------ */

dcpi_plan_entry *dcpi_plan_entry_new(dcpi_plan_key key, int64_t generation,
                                     uint8_t *assignment, size_t assignment_len,
                                     int32_t world, uint8_t *plans, size_t *plan_lens,
                                     dcpi_global_plan *gp) {
  dcpi_plan_entry *e = calloc(1, sizeof *e);
  if (!e) {
    free(assignment), free(plans), free(plan_lens);
    dcpi_global_plan_free(gp);
    return NULL;
  }
  *e = (dcpi_plan_entry){.key = key, .generation = generation, .assignment = assignment,
                         .assignment_len = assignment_len, .world = world, .plans = plans,
                         .plan_lens = plan_lens, .gp = gp, .refs = 1};
  return e;
}

static void entry_free(dcpi_plan_entry *e) {
  free(e->assignment);
  free(e->plans);
  free(e->plan_lens);
  dcpi_global_plan_free(e->gp);
  free(e);
}

void dcpi_plan_entry_drop(dcpi_plan_entry *e) {
  if (e) entry_free(e);
}

/* Drop one reference. Caller holds c->mu. */
static void unref_locked(dcpi_plan_entry *e) {
  if (e && --e->refs == 0) entry_free(e);
}

/* The cache's lock; no-ops for no cache (NULL: a context's cache that could
 * not be allocated, whose entries only their creator holds). */
static void lock(dcpi_plan_cache *c) {
  if (c) pthread_mutex_lock(&c->mu);
}

static void unlock(dcpi_plan_cache *c) {
  if (c) pthread_mutex_unlock(&c->mu);
}

/* ---- the cache ---------------------------------------------------------- */

void dcpi_plan_cache_init(dcpi_plan_cache *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
}

void dcpi_plan_cache_clear(dcpi_plan_cache *c) {
  if (!c) return;
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++) unref_locked(c->slots[i]);
  pthread_mutex_destroy(&c->mu);
  memset(c, 0, sizeof *c);
}

dcpi_plan_entry *dcpi_plan_cache_get(dcpi_plan_cache *c, dcpi_plan_key key) {
  dcpi_plan_entry *found = NULL;
  if (!c) return NULL;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS && !found; i++) {
    dcpi_plan_entry *e = c->slots[i];
    if (e && dcpi_plan_key_equal(e->key, key)) {
      e->stamp = ++c->clock;
      e->refs++;
      found = e;
    }
  }
  pthread_mutex_unlock(&c->mu);
  return found;
}

void dcpi_plan_cache_release(dcpi_plan_cache *c, dcpi_plan_entry *e) {
  if (!e) return;
  lock(c);
  unref_locked(e);
  unlock(c);
}

/* The slot e goes to: the one of its key, else an empty one, else the
 * least recently used. Caller holds c->mu. */
static int slot_for_locked(const dcpi_plan_cache *c, dcpi_plan_key key) {
  int empty = -1, victim = 0;
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++) {
    const dcpi_plan_entry *e = c->slots[i];
    if (e && dcpi_plan_key_equal(e->key, key)) return i; /* never two of one key */
    if (!e && empty < 0) empty = i;
    if (e && c->slots[victim] && e->stamp < c->slots[victim]->stamp) victim = i;
  }
  return empty >= 0 ? empty : victim;
}

void dcpi_plan_cache_put(dcpi_plan_cache *c, dcpi_plan_entry *e) {
  if (!e) return;
  if (!c) {
    unref_locked(e); /* no cache to keep it */
    return;
  }
  pthread_mutex_lock(&c->mu);
  int i = slot_for_locked(c, e->key);
  dcpi_plan_entry *old = c->slots[i];
  if (old && dcpi_plan_key_equal(old->key, e->key) && old->generation == e->generation) {
    old->shared = old->shared || e->shared; /* the same plan: keep the one in use */
    old->stamp = ++c->clock;
    unref_locked(e);
  } else {
    unref_locked(old);
    e->stamp = ++c->clock;
    c->slots[i] = e;
  }
  pthread_mutex_unlock(&c->mu);
}

dcpi_global_plan *dcpi_plan_entry_global(dcpi_plan_cache *c, dcpi_plan_entry *e,
                                         dcpi_err *err) {
  lock(c);
  dcpi_global_plan *gp = e->gp;
  unlock(c);
  if (gp) return gp;
  if (e->world <= 0 || !e->plans) {
    dcpi_fail(err, DCP_EINVAL, "plan cache: the entry has no global plan");
    return NULL;
  }
  /* Built outside the lock (it can take a while at scale); a concurrent
   * builder's result wins and ours is dropped. */
  if (dcpi_global_plan_from_encoded(e->plans, e->plan_lens, e->world, &gp, err)) return NULL;
  lock(c);
  if (e->gp) {
    dcpi_global_plan_free(gp);
    gp = e->gp;
  } else {
    e->gp = gp;
  }
  unlock(c);
  return gp;
}

size_t dcpi_plan_cache_take_unshared(dcpi_plan_cache *c, dcpi_plan_entry **out, size_t cap) {
  size_t n = 0;
  if (!c) return 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS && n < cap; i++) {
    dcpi_plan_entry *e = c->slots[i];
    if (!e || e->shared) continue;
    e->shared = true;
    e->refs++;
    out[n++] = e;
  }
  pthread_mutex_unlock(&c->mu);
  return n;
}

void dcpi_plan_cache_unshare_all(dcpi_plan_cache *c) {
  if (!c) return;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < DCPI_PLAN_CACHE_SLOTS; i++)
    if (c->slots[i]) c->slots[i]->shared = false;
  pthread_mutex_unlock(&c->mu);
}

/* ---- a context's cache --------------------------------------------------- */

/* The state this layer attaches to a context (core/ctx.h): its cache. */
typedef struct ctx_plans {
  dcpi_ctx_ext ext; /* first member: the context holds a pointer to it */
  dcpi_plan_cache cache;
} ctx_plans;

static void ctx_plans_release(dcpi_ctx_ext *ext) {
  ctx_plans *p = (ctx_plans *)ext;
  dcpi_plan_cache_clear(&p->cache);
  free(p);
}

dcpi_plan_cache *dcpi_ctx_plan_cache(dcp_ctx *ctx) {
  dcpi_ctx_ext *e = dcpi_ctx_ext_get(ctx, DCPI_CTX_PLANS);
  if (!e) {
    ctx_plans *p = malloc(sizeof *p);
    if (!p) return NULL;
    p->ext.release = ctx_plans_release;
    dcpi_plan_cache_init(&p->cache);
    e = dcpi_ctx_ext_attach(ctx, DCPI_CTX_PLANS, &p->ext);
    if (e != &p->ext) ctx_plans_release(&p->ext); /* another thread's came first */
  }
  return &((ctx_plans *)e)->cache;
}

/* ---- serialised form ---------------------------------------------------- */
/*
 *   u64 key.lo | u64 key.hi | zigzag generation | varint assignment length |
 *   assignment | zigzag world (0: no plans) | world × varint plan length |
 *   the plans back to back
 */

void dcpi_plan_entry_encode(const dcpi_plan_entry *e, dcpi_wbuf *w) {
  dcpi_w_u64(w, e->key.lo);
  dcpi_w_u64(w, e->key.hi);
  dcpi_w_zigzag(w, e->generation);
  dcpi_w_varint(w, e->assignment_len);
  dcpi_w_bytes(w, e->assignment, e->assignment_len);
  int32_t world = e->plans ? e->world : 0;
  dcpi_w_zigzag(w, world);
  size_t total = 0;
  for (int32_t r = 0; r < world; r++) {
    dcpi_w_varint(w, e->plan_lens[r]);
    total += e->plan_lens[r];
  }
  dcpi_w_bytes(w, e->plans, total);
}

/* n bytes at r's position, copied into a new buffer (at least 1 byte). */
static uint8_t *take_bytes(dcpi_rbuf *r, size_t n) {
  if (n > dcpi_r_left(r)) return NULL;
  uint8_t *p = malloc(n ? n : 1);
  if (p && n) memcpy(p, r->p + r->pos, n);
  if (p) r->pos += n;
  return p;
}

static dcp_status decode_plans(dcpi_rbuf *r, int32_t *world, uint8_t **plans, size_t **lens,
                               dcpi_err *err) {
  int64_t w;
  if (!dcpi_r_zigzag(r, &w) || w < 0 || (uint64_t)w > dcpi_r_left(r))
    return dcpi_fail(err, DCP_ECORRUPT, "plan cache entry: bad world size");
  *world = (int32_t)w;
  if (w == 0) return DCP_OK;
  if (!(*lens = malloc((size_t)w * sizeof **lens)))
    return dcpi_fail(err, DCP_ENOMEM, "plan cache entry: out of memory");
  size_t total = 0;
  for (int64_t k = 0; k < w; k++) {
    uint64_t n;
    if (!dcpi_r_varint(r, &n) || n > dcpi_r_left(r) - total)
      return dcpi_fail(err, DCP_ECORRUPT, "plan cache entry: bad length of rank %lld's plan",
                       (long long)k);
    (*lens)[k] = (size_t)n;
    total += (size_t)n;
  }
  if (!(*plans = take_bytes(r, total)))
    return dcpi_fail(err, DCP_ECORRUPT, "plan cache entry: plans truncated");
  return DCP_OK;
}

dcp_status dcpi_plan_entry_decode(const uint8_t *p, size_t len, dcpi_plan_entry **out,
                                  dcpi_err *err) {
  *out = NULL;
  dcpi_rbuf r = {p, len, 0};
  dcpi_plan_key key;
  int64_t gen;
  uint64_t alen;
  if (!dcpi_r_u64(&r, &key.lo) || !dcpi_r_u64(&r, &key.hi) || !dcpi_r_zigzag(&r, &gen) ||
      gen < 1 || !dcpi_r_varint(&r, &alen) || alen > dcpi_r_left(&r))
    return dcpi_fail(err, DCP_ECORRUPT, "plan cache entry: bad header");
  uint8_t *assignment = take_bytes(&r, (size_t)alen), *plans = NULL;
  size_t *lens = NULL;
  int32_t world = 0;
  dcp_status rc = assignment ? decode_plans(&r, &world, &plans, &lens, err)
                            : dcpi_fail(err, DCP_ENOMEM, "plan cache entry: out of memory");
  if (!rc && dcpi_r_left(&r) != 0)
    rc = dcpi_fail(err, DCP_ECORRUPT, "plan cache entry: trailing bytes");
  if (rc) {
    free(assignment), free(plans), free(lens);
    return rc;
  }
  *out = dcpi_plan_entry_new(key, gen, assignment, (size_t)alen, world, plans, lens, NULL);
  if (!*out) return dcpi_fail(err, DCP_ENOMEM, "plan cache entry: out of memory");
  (*out)->shared = true;
  return DCP_OK;
}

/* ---- rebuilding a global plan ------------------------------------------- */

dcp_status dcpi_global_plan_from_encoded(const uint8_t *all, const size_t *lens, int32_t world,
                                         dcpi_global_plan **out, dcpi_err *err) {
  *out = NULL;
  dcpi_local_plan **plans = calloc((size_t)world, sizeof *plans);
  if (!plans) return dcpi_fail(err, DCP_ENOMEM, "out of memory for %d plans", world);
  dcp_status rc = DCP_OK;
  size_t at = 0;
  for (int32_t r = 0; r < world && !rc; at += lens[r], r++) {
    rc = dcpi_local_plan_decode(all + at, lens[r], &plans[r], err);
    if (rc) {
      char why[DCPI_ERR_MSG_MAX]; /* err->msg cannot be its own format argument */
      memcpy(why, err->msg, sizeof why);
      dcpi_fail(err, rc, "plan of rank %d: %.400s", r, why);
    }
  }
  if (!rc)
    rc = dcpi_global_plan_build((const dcpi_local_plan *const *)plans, (size_t)world, NULL, out,
                               err);
  for (int32_t r = 0; r < world; r++) dcpi_local_plan_free(plans[r]);
  free(plans);
  return rc;
}
