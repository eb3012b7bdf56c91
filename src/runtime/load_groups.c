/* load_groups.c — read dedup for dcp_load: which ranks want the identical
 * (fqn, box), who of them reads it, and the order of the broadcasts.
 *
 * A request key is a 128-bit hash of (fqn, box) and the chunk's bytes.
 * Groups come from the layouts, locally, when every rank's chunks carry
 * one (each rank synthesizes every rank's requests for its own layout
 * tensors), checked by one small all-reduce; otherwise from one exchange of
 * the keys (two allgathers). Either way dcpi_read_groups_build forms the
 * groups and balances the readers, so both paths give the same answer.
 * When the collective tells hosts apart (its table's host_id) and the
 * ranks are on more than one host, one more allgather brings every rank's
 * host id, and each group's reader is then chosen among the members on the
 * host of most of its members (dcpi_read_groups_prefer_hosts). */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/checked.h"
#include "model/layout.h"
#include "runtime/load_int.h"

void dcpi_load_sched_free(dcpi_load_sched *sc) {
  if (!sc) return;
  free(sc->role);
  free(sc->items);
  free(sc->units);
  free(sc->members);
  free(sc->pack);
  free(sc->runits);
  free(sc->own);
  dcpi_share_plan_free(sc->share);
  free(sc->share_words);
  free(sc->share_rec);
  free(sc->skip);
  free(sc->share_buf);
  memset(sc, 0, sizeof *sc);
}

/* ---- keys and groups ---------------------------------------------------- */

dcpi_load_key dcpi_load_key_of(const char *fqn, size_t fqn_len, uint32_t ndim,
                               const int64_t *offset, const int64_t *size, int64_t bytes) {
  /* hash of the fqn, then of (that hash, ndim, box) */
  XXH128_hash_t hf = XXH3_128bits(fqn, fqn_len);
  uint64_t buf[3 + 2 * DCP_MAX_NDIM];
  size_t n = 0;
  buf[n++] = hf.high64;
  buf[n++] = hf.low64;
  buf[n++] = ndim;
  for (uint32_t d = 0; d < ndim && d < DCP_MAX_NDIM; d++) buf[n++] = (uint64_t)offset[d];
  for (uint32_t d = 0; d < ndim && d < DCP_MAX_NDIM; d++) buf[n++] = (uint64_t)size[d];
  XXH128_hash_t h = XXH3_128bits(buf, n * sizeof *buf);
  return (dcpi_load_key){h.high64, h.low64, bytes};
}

static const int64_t ZERO2[2] = {0, 0};

dcp_status dcpi_load_groups_build(const dcpi_load_key *const *keys, const size_t *nkeys,
                                  int32_t world, dcpi_balance_policy policy,
                                  dcpi_read_groups **out, dcpi_err *err) {
  size_t total = 0;
  for (int32_t r = 0; r < world; r++) total += nkeys[r];
  dcpi_rank_requests *req = calloc((size_t)world, sizeof *req);
  dcpi_read_key *rk = malloc((total ? total : 1) * sizeof *rk);
  int64_t *coords = malloc((total ? total : 1) * 2 * sizeof *coords);
  dcp_status rc = DCP_OK;
  *out = NULL;
  if (!req || !rk || !coords) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory for %zu request keys", total);
  } else {
    size_t at = 0;
    for (int32_t r = 0; r < world; r++) {
      req[r] = (dcpi_rank_requests){r, nkeys[r], rk + at};
      for (size_t i = 0; i < nkeys[r]; i++, at++) {
        /* the hash as an anonymous 2-d box (offsets must be non-negative) */
        coords[2 * at] = (int64_t)(keys[r][i].h1 >> 1);
        coords[2 * at + 1] = (int64_t)(keys[r][i].h2 >> 1);
        rk[at] = (dcpi_read_key){"", 2, coords + 2 * at, ZERO2, keys[r][i].bytes};
      }
    }
    rc = dcpi_read_groups_build(req, (size_t)world, world, policy, out, err);
  }
  free(req);
  free(rk);
  free(coords);
  return rc;
}

int64_t dcpi_load_groups_find(const dcpi_read_groups *g, const dcpi_load_key *k) {
  int64_t a = (int64_t)(k->h1 >> 1), b = (int64_t)(k->h2 >> 1);
  size_t lo = 0, hi = g->ngroups;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const int64_t *o = g->groups[mid].offset;
    if (o[0] < a || (o[0] == a && o[1] < b))
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < g->ngroups && g->groups[lo].offset[0] == a && g->groups[lo].offset[1] == b)
    return (int64_t)lo;
  return -1;
}

/* ---- the layout path ---------------------------------------------------- */

static int64_t chunk_key_bytes(const dcpi_chunk_item *c) { return c->nbytes; }

/* true when chunk c of st is exactly the box its tensor's layout gives st's
 * rank. */
static bool is_layout_chunk(const dcp_state *st, const dcpi_chunk_item *c) {
  const dcpi_tensor_item *t = &st->tensors[c->tensor];
  if (!t->layout) return false;
  int64_t pos = dcpi_layout_position(t->layout, st->rank);
  if (pos < 0) return false;
  int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM];
  dcpi_layout_box_at(t->layout, t->shape, pos, off, sz);
  return !memcmp(off, c->box.offset, t->ndim * sizeof *off) &&
         !memcmp(sz, c->box.size, t->ndim * sizeof *sz);
}

dcp_status dcpi_load_layout_groups(const dcp_state *st, int32_t world,
                                   dcpi_balance_policy policy, bool *usable,
                                   dcpi_read_groups **out, dcpi_err *err) {
  *usable = false;
  *out = NULL;
  for (size_t i = 0; i < st->nchunks; i++)
    if (chunk_key_bytes(&st->chunks[i]) > 0 && !is_layout_chunk(st, &st->chunks[i]))
      return DCP_OK; /* a chunk added by hand: only an exchange knows who else has it */
  /* For every layout tensor, each mesh position's box is a request of the
   * rank there. */
  size_t *count = calloc((size_t)world, sizeof *count);
  bool *used = calloc(st->ntensors ? st->ntensors : 1, sizeof *used);
  dcp_status rc = DCP_OK;
  if (!count || !used) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
    goto out;
  }
  /* every tensor declared with a layout, even where this rank's box is
   * empty: its replicas then see the same set and balance alike */
  for (size_t t = 0; t < st->ntensors; t++) used[t] = st->tensors[t].layout != NULL;
  for (size_t t = 0; t < st->ntensors; t++) {
    if (!used[t]) continue;
    const dcp_layout *l = st->tensors[t].layout;
    for (int64_t p = 0; p < l->nranks; p++) {
      if (l->ranks[p] >= world) goto out; /* a mesh beyond this world: exchange */
      count[l->ranks[p]]++;
    }
  }
  size_t total = 0;
  for (int32_t r = 0; r < world; r++) total += count[r];
  dcpi_load_key *pool = malloc((total ? total : 1) * sizeof *pool);
  dcpi_load_key **keys = calloc((size_t)world, sizeof *keys);
  size_t *n = calloc((size_t)world, sizeof *n);
  if (!pool || !keys || !n) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory for %zu layout requests", total);
  } else {
    size_t at = 0;
    for (int32_t r = 0; r < world; r++) {
      keys[r] = pool + at;
      at += count[r];
    }
    for (size_t t = 0; t < st->ntensors; t++) {
      if (!used[t]) continue;
      const dcpi_tensor_item *ti = &st->tensors[t];
      const dcp_layout *l = ti->layout;
      int64_t es = (int64_t)dcp_dtype_size(ti->dtype);
      for (int64_t p = 0; p < l->nranks; p++) {
        int64_t off[DCP_MAX_NDIM], sz[DCP_MAX_NDIM], numel = 1;
        dcpi_layout_box_at(l, ti->shape, p, off, sz);
        for (uint32_t d = 0; d < ti->ndim; d++) numel *= sz[d]; /* <= the shape's numel */
        if (numel == 0) continue;
        int32_t r = l->ranks[p];
        keys[r][n[r]++] = dcpi_load_key_of(ti->fqn, ti->fqn_len, ti->ndim, off, sz, numel * es);
      }
    }
    rc = dcpi_load_groups_build((const dcpi_load_key *const *)keys, n, world, policy, out, err);
    if (!rc) *usable = true;
  }
  free(pool);
  free(keys);
  free(n);
out:
  free(count);
  free(used);
  return rc;
}

/* A 60-bit hash of everything members must agree on about group i. */
static uint64_t group_hash(const dcpi_read_group *grp) {
  uint64_t head[5] = {(uint64_t)grp->offset[0], (uint64_t)grp->offset[1], (uint64_t)grp->bytes,
                      (uint64_t)(uint32_t)grp->reader, grp->nmembers};
  uint64_t seed = XXH3_64bits(head, sizeof head);
  return XXH3_64bits_withSeed(grp->members, grp->nmembers * sizeof *grp->members, seed) >> 4;
}

void dcpi_load_agreement_lanes(const dcpi_read_groups *g, int32_t rank,
                               const dcpi_load_key *keys, size_t nkeys, int64_t a[3],
                               int64_t b[3]) {
  for (int l = 0; l < 3; l++) a[l] = b[l] = 0;
  for (size_t i = 0; i < nkeys; i++) {
    int64_t gi = dcpi_load_groups_find(g, &keys[i]);
    if (gi < 0) { /* cannot happen for a rank's own keys; make it visible */
      a[0] += 1;
      continue;
    }
    const dcpi_read_group *grp = &g->groups[gi];
    uint64_t h = group_hash(grp);
    for (int l = 0; l < 3; l++) {
      int64_t lane = (int64_t)((h >> (20 * l)) & 0xFFFFF);
      a[l] += lane;
      if (grp->reader == rank) b[l] += lane * (int64_t)grp->nmembers;
    }
  }
}

/* ---- the schedule ------------------------------------------------------- */

typedef struct entry {
  const dcpi_read_group *grp;
  uint32_t chunk;
  int64_t bytes;
} entry;

/* The global order of broadcasts: by member list, reader, size class
 * (small ones together, so they pack), then key. Group-intrinsic only. */
static int cmp_entry(const void *pa, const void *pb) {
  const dcpi_read_group *a = ((const entry *)pa)->grp, *b = ((const entry *)pb)->grp;
  if (a->nmembers != b->nmembers) return a->nmembers < b->nmembers ? -1 : 1;
  for (uint32_t i = 0; i < a->nmembers; i++)
    if (a->members[i] != b->members[i]) return a->members[i] < b->members[i] ? -1 : 1;
  if (a->reader != b->reader) return a->reader < b->reader ? -1 : 1;
  int big_a = a->bytes >= DCPI_LOAD_PACK_BYTES, big_b = b->bytes >= DCPI_LOAD_PACK_BYTES;
  if (big_a != big_b) return big_a < big_b ? -1 : 1;
  for (int d = 0; d < 2; d++)
    if (a->offset[d] != b->offset[d]) return a->offset[d] < b->offset[d] ? -1 : 1;
  return 0;
}

static bool same_run(const dcpi_read_group *a, const dcpi_read_group *b) {
  return a->nmembers == b->nmembers && a->reader == b->reader &&
         !memcmp(a->members, b->members, a->nmembers * sizeof *a->members);
}

dcp_status dcpi_load_sched_build(const dcpi_read_groups *g, int32_t rank,
                                 const dcpi_load_key *keys, const uint32_t *chunk_of,
                                 size_t nkeys, size_t nchunks, dcpi_load_sched *sc,
                                 dcpi_err *err) {
  entry *e = malloc((nkeys ? nkeys : 1) * sizeof *e);
  size_t ne = 0, nmem = 0;
  dcp_status rc = DCP_OK;
  if (!e) return dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  for (size_t i = 0; i < nkeys; i++) {
    int64_t gi = dcpi_load_groups_find(g, &keys[i]);
    if (gi < 0) {
      rc = dcpi_fail(err, DCP_EINVAL, "read dedup: chunk %u is in no group", chunk_of[i]);
      goto out;
    }
    const dcpi_read_group *grp = &g->groups[gi];
    if (grp->nmembers < 2) {
      sc->role[chunk_of[i]] = DCPI_CHUNK_OWN;
      sc->read_bytes += keys[i].bytes;
      continue;
    }
    bool reads = grp->reader == rank;
    sc->role[chunk_of[i]] = reads ? DCPI_CHUNK_READ : DCPI_CHUNK_RECV;
    if (reads) sc->read_bytes += keys[i].bytes;
    sc->ngroups++;
    e[ne++] = (entry){grp, chunk_of[i], keys[i].bytes};
  }
  dcpi_sort(e, ne, sizeof *e, cmp_entry);
  for (size_t i = 0; i < ne; i++)
    if (i == 0 || !same_run(e[i - 1].grp, e[i].grp)) nmem += e[i].grp->nmembers;
  sc->items = malloc((ne ? ne : 1) * sizeof *sc->items);
  sc->units = malloc((ne ? ne : 1) * sizeof *sc->units);
  sc->members = malloc((nmem ? nmem : 1) * sizeof *sc->members);
  if (!sc->items || !sc->units || !sc->members) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory for %zu broadcasts", ne);
    goto out;
  }
  /* Cut each run of one (members, reader) into units: an item of at least
   * DCPI_LOAD_PACK_BYTES alone, smaller ones packed until a pack reaches
   * that size. Only group data and the constant decide, so every member
   * cuts the same units. */
  size_t nm = 0;
  const int32_t *run_members = NULL;
  dcpi_bcast_unit *open = NULL; /* the pack being filled */
  for (size_t i = 0; i < ne; i++) {
    const dcpi_read_group *grp = e[i].grp;
    if (i == 0 || !same_run(e[i - 1].grp, grp)) {
      memcpy(sc->members + nm, grp->members, grp->nmembers * sizeof *grp->members);
      run_members = sc->members + nm;
      nm += grp->nmembers;
      open = NULL;
    }
    sc->items[sc->nitems] = e[i].chunk;
    if (e[i].bytes >= DCPI_LOAD_PACK_BYTES || !open) {
      dcpi_bcast_unit *u = &sc->units[sc->nunits++];
      *u = (dcpi_bcast_unit){run_members, grp->nmembers, grp->reader, sc->nitems, 1,
                             e[i].bytes, e[i].bytes < DCPI_LOAD_PACK_BYTES};
      open = u->packed ? u : NULL;
    } else {
      open->count++;
      open->bytes += e[i].bytes;
    }
    sc->nitems++;
    if (open && open->bytes >= DCPI_LOAD_PACK_BYTES) open = NULL;
  }
  for (size_t u = 0; u < sc->nunits; u++)
    if (sc->units[u].packed && sc->units[u].bytes > sc->max_pack) sc->max_pack = sc->units[u].bytes;
  (void)nchunks;
out:
  free(e);
  return rc;
}

/* ---- the collective decision -------------------------------------------- */

static bool mode_enables(uint32_t mode, uint64_t caps) {
  if (mode == DCP_READ_DEDUP_OFF || !(caps & DCP_COLL_CAP_GROUPS)) return false;
  return mode == DCP_READ_DEDUP_ON || (caps & DCP_COLL_CAP_BULK);
}

/* This rank's keys: one per non-empty chunk. */
static dcp_status own_keys(const dcp_state *st, dcpi_load_key **keys, uint32_t **chunk_of,
                           size_t *n, dcpi_err *err) {
  *keys = malloc((st->nchunks ? st->nchunks : 1) * sizeof **keys);
  *chunk_of = malloc((st->nchunks ? st->nchunks : 1) * sizeof **chunk_of);
  *n = 0;
  if (!*keys || !*chunk_of) return dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  for (size_t i = 0; i < st->nchunks; i++) {
    const dcpi_chunk_item *c = &st->chunks[i];
    if (chunk_key_bytes(c) <= 0) continue;
    const dcpi_tensor_item *t = &st->tensors[c->tensor];
    (*keys)[*n] = dcpi_load_key_of(t->fqn, t->fqn_len, t->ndim, c->box.offset, c->box.size,
                                   c->nbytes);
    (*chunk_of)[(*n)++] = (uint32_t)i;
  }
  return DCP_OK;
}

/* Every rank's host id (one allgather) when the collective can tell hosts
 * apart: *out (world entries, freed by the caller), or NULL when it cannot
 * or every rank is on one host; *one_host is set when it can and they are
 * (the same on every rank: it comes from the allgather). Called by every
 * rank at the same point (one plugin: the same table everywhere). */
static dcp_status gather_hosts(dcpi_rt *rt, uint64_t **out, bool *one_host) {
  dcp_ctx *ctx = rt->ctx;
  *out = NULL;
  *one_host = false;
  if (!DCP_HAS_FIELD(ctx->coll, dcp_coll_plugin, host_id) || !ctx->coll->host_id) return DCP_OK;
  size_t world = (size_t)ctx->world_size;
  uint64_t mine = ctx->coll->host_id(ctx->comm);
  uint64_t *all = malloc(world * sizeof *all);
  if (!all) /* the peers are left to their deadline in the allgather */
    return dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory for %zu host ids", world);
  dcp_status rc = dcpi_rt_allgather(rt, &mine, sizeof mine, all);
  size_t same = 1;
  while (!rc && same < world && all[same] == all[0]) same++;
  if (rc || same == world) {
    *one_host = !rc;
    free(all);
    return rc;
  }
  *out = all;
  return DCP_OK;
}

/* The exchange path: every rank's keys through two allgathers (the counts,
 * then the lists padded to the longest), then the groups on every rank. */
static dcp_status exchange_groups(dcpi_rt *rt, const dcpi_load_key *keys, size_t nkeys,
                                  dcpi_balance_policy policy, dcpi_read_groups **out) {
  size_t world = (size_t)rt->ctx->world_size;
  uint64_t mine = nkeys, *counts = malloc(world * sizeof *counts);
  if (!counts) return dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory");
  dcp_status rc = dcpi_rt_allgather(rt, &mine, sizeof mine, counts);
  dcpi_load_key *send = NULL, *all = NULL;
  const dcpi_load_key **lists = NULL;
  size_t *n = NULL;
  uint64_t most = 0;
  for (size_t r = 0; !rc && r < world; r++)
    if (counts[r] > most) most = counts[r];
  if (!rc) {
    /* a failure here leaves the peers to their deadline in the allgather */
    send = calloc(most ? (size_t)most : 1, sizeof *send);
    all = malloc((most ? (size_t)most : 1) * world * sizeof *all);
    lists = malloc(world * sizeof *lists);
    n = malloc(world * sizeof *n);
    if (!send || !all || !lists || !n)
      rc = dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory for %llu x %zu keys",
                    (unsigned long long)most, world);
  }
  if (!rc) {
    if (nkeys) memcpy(send, keys, nkeys * sizeof *keys);
    rc = dcpi_rt_allgather(rt, send, (size_t)most * sizeof *send, all);
  }
  if (!rc) {
    for (size_t r = 0; r < world; r++) {
      lists[r] = all + r * (size_t)most;
      n[r] = (size_t)counts[r];
    }
    rc = dcpi_load_groups_build((const dcpi_load_key *const *)lists, n, (int32_t)world, policy,
                               out, &rt->err);
  }
  free(counts);
  free(send);
  free(all);
  free(lists);
  free(n);
  return rc;
}

enum { L_FAIL, L_MODE, L_MODE2, L_POL, L_POL2, L_NEED, L_SHARE, L_A, L_B = L_A + 3,
       L_COUNT = L_B + 3 };

dcp_status dcpi_load_schedule(dcpi_rt *rt, dcp_meta *m, const dcpi_saved_source *src,
                              const dcp_state *st, const dcpi_load_plan *plan,
                              const dcp_load_options *o, dcpi_load_sched *sc) {
  dcp_ctx *ctx = rt->ctx;
  int32_t world = ctx->world_size;
  memset(sc, 0, sizeof *sc);
  sc->nchunks = st->nchunks;
  sc->role = calloc(st->nchunks ? st->nchunks : 1, 1);
  dcp_status rc = sc->role ? DCP_OK : dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
  /* The same on every rank (one plugin): no collective at all without
   * group broadcasts. */
  if (world == 1 || !(ctx->coll->caps & DCP_COLL_CAP_GROUPS) || !ctx->coll->group_bcast)
    return rc;
  uint32_t mode = (uint32_t)o->read_dedup;
  dcpi_balance_policy policy = o->reader_policy == DCP_POLICY_LOWEST_RANK
                                   ? DCPI_BALANCE_LOWEST_RANK
                                   : DCPI_BALANCE_LEAST_LOADED;
  bool local_on = mode_enables(mode, ctx->coll->caps);
  dcpi_load_key *keys = NULL;
  uint32_t *chunk_of = NULL;
  size_t nkeys = 0;
  dcpi_read_groups *g = NULL;
  uint64_t *hosts = NULL;
  bool usable = false, one_host = false;
  int64_t v[L_COUNT] = {0};
  if (!rc && local_on) rc = own_keys(st, &keys, &chunk_of, &nkeys, &rt->err);
  if (!rc && local_on) rc = dcpi_load_layout_groups(st, world, policy, &usable, &g, &rt->err);
  if (!rc && usable) dcpi_load_agreement_lanes(g, ctx->rank, keys, nkeys, v + L_A, v + L_B);
  bool possible = true; /* share groups may form (the layout path knows) */
  if (!rc && usable) rc = dcpi_load_share_possible(st, m, src, &possible, &rt->err);
  v[L_FAIL] = rc != DCP_OK;
  v[L_MODE] = mode, v[L_MODE2] = (int64_t)mode * mode;
  v[L_POL] = policy, v[L_POL2] = (int64_t)policy * policy;
  v[L_NEED] = local_on && !usable;
  v[L_SHARE] = possible;
  dcp_status c = dcpi_rt_allreduce(rt, v, L_COUNT, DCP_REDUCE_SUM);
  if (c) {
    rc = c;
    goto out;
  }
  if (v[L_FAIL]) goto agree;
  /* all equal iff n * sum(x^2) == sum(x)^2 */
  if (v[L_MODE2] * world != v[L_MODE] * v[L_MODE] || v[L_POL2] * world != v[L_POL] * v[L_POL]) {
    rc = dcpi_fail(&rt->err, DCP_EINVAL,
                  "load: the ranks passed different read_dedup or reader_policy options");
    goto agree;
  }
  if (!local_on) goto agree; /* the same on every rank now */
  if ((rc = gather_hosts(rt, &hosts, &one_host))) goto agree;
  /* AUTO with every rank on one host reads for itself: the page cache reads
   * a block that replicas need from storage once, and copying it from there
   * costs each rank less than receiving it through the collective
   * (docs/benchmarks.md, "Read dedup on one host"); the same on every rank
   * (one_host comes from the allgather) */
  if (mode == DCP_READ_DEDUP_AUTO && one_host) goto agree;
  bool agreed = !memcmp(v + L_A, v + L_B, 3 * sizeof *v);
  if (!v[L_NEED] && agreed) {
    sc->path = DCPI_DEDUP_LAYOUT;
  } else {
    dcpi_read_groups_free(g);
    g = NULL;
    sc->path = DCPI_DEDUP_EXCHANGE;
    if ((rc = exchange_groups(rt, keys, nkeys, policy, &g))) goto agree;
  }
  /* from here every rank reaches the share exchange, failed or not */
  if (hosts) rc = dcpi_read_groups_prefer_hosts(g, hosts, policy, &rt->err);
  if (!rc) rc = dcpi_load_sched_build(g, ctx->rank, keys, chunk_of, nkeys, st->nchunks, sc, &rt->err);
  if (!rc) {
    sc->pack = malloc(sc->max_pack ? (size_t)sc->max_pack : 1);
    sc->runits = malloc((sc->nunits ? sc->nunits : 1) * sizeof *sc->runits);
    sc->own = malloc((st->nchunks ? st->nchunks : 1) * sizeof *sc->own);
    if (!sc->pack || !sc->runits || !sc->own)
      rc = dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory for the schedule");
  }
  /* the needs exchange, unless the layouts show no read could be shared
   * (the same sums on every rank: the same choice), or AUTO finds every
   * rank on one host: there the page cache already reads a shared block
   * from storage once, and re-reading it is cheaper than receiving pieces
   * through the collective (docs/benchmarks.md, "Host-aware sharing") */
  bool share_pays = mode == DCP_READ_DEDUP_ON || !one_host;
  if (share_pays && (sc->path == DCPI_DEDUP_EXCHANGE || v[L_SHARE]))
    rc = dcpi_load_share_plan(rt, m, st, plan, policy, hosts, sc, rc);
agree:
  rc = dcpi_rt_agree(rt, rc);
out:
  free(keys);
  free(chunk_of);
  free(hosts);
  dcpi_read_groups_free(g);
  return rc;
}
