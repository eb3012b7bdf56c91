/* read_groups.c — canonical grouping of identical read requests, and one
 * reader per group through the shared balancer. */
#include "planner/read_groups.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "model/box.h"

/* One (rank, key) pair, with the fqn replaced by its canonical rank among
 * the distinct fqns so sorting compares integers, not strings. */
typedef struct req {
  uint32_t name;
  uint32_t ndim;
  const int64_t *offset, *size;
  int64_t bytes;
  int32_t rank;
} req;

/* Compare keys only (not rank or bytes): fqn, ndim, offset, size. */
static int cmp_key(const req *a, const req *b) {
  if (a->name != b->name) return a->name < b->name ? -1 : 1;
  if (a->ndim != b->ndim) return a->ndim < b->ndim ? -1 : 1;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->offset[d] != b->offset[d]) return a->offset[d] < b->offset[d] ? -1 : 1;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d]) return a->size[d] < b->size[d] ? -1 : 1;
  return 0;
}

/* Key, then rank: a total order up to exact duplicates, so qsort's lack of
 * stability cannot leak arrival order into the result. */
static int cmp_req(const void *pa, const void *pb) {
  const req *a = pa, *b = pb;
  int c = cmp_key(a, b);
  if (c) return c;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

/* qsort order of owned fqn copies: bytewise, as the groups are sorted. */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A key must name an fqn, have a valid box and non-negative bytes. */
static dcp_status check_key(const dcpi_read_key *k, int32_t rank, dcpi_err *err) {
  if (!k->fqn || k->ndim > DCP_MAX_NDIM || (k->ndim && (!k->offset || !k->size)) ||
      k->bytes < 0)
    return dcpi_fail(err, DCP_EINVAL, "read groups: rank %d has a malformed request", rank);
  for (uint32_t d = 0; d < k->ndim; d++)
    if (k->offset[d] < 0 || k->size[d] < 0)
      return dcpi_fail(err, DCP_EINVAL, "read groups: rank %d: '%s' has a negative box", rank,
                       k->fqn);
  return DCP_OK;
}

/* Ranks in range and each at most once; keys well formed; count pairs. */
static dcp_status check_input(const dcpi_rank_requests *ranks, size_t nranks, int32_t ws,
                              size_t *total, dcpi_err *err) {
  if (ws < 1 || (nranks && !ranks))
    return dcpi_fail(err, DCP_EINVAL, "read groups: world size %d or requests NULL", ws);
  unsigned char *seen = calloc((size_t)ws, 1);
  if (!seen) return dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory");
  dcp_status rc = DCP_OK;
  size_t n = 0;
  for (size_t i = 0; i < nranks && !rc; i++) {
    int32_t r = ranks[i].rank;
    if (r < 0 || r >= ws || seen[r]) {
      rc = dcpi_fail(err, DCP_EINVAL, "read groups: rank %d out of range or repeated", r);
      break;
    }
    seen[r] = 1;
    if (ranks[i].nkeys && !ranks[i].keys)
      rc = dcpi_fail(err, DCP_EINVAL, "read groups: rank %d keys NULL", r);
    for (size_t k = 0; k < ranks[i].nkeys && !rc; k++) rc = check_key(&ranks[i].keys[k], r, err);
    n += ranks[i].nkeys;
  }
  free(seen);
  *total = n;
  return rc;
}

/* Intern the fqns, then renumber them in bytewise order, so the ids (and
 * everything sorted by them) do not depend on which rank came first.
 * Fills g->names (owned copies, sorted) and ids (one per pair, in input
 * order). */
static dcp_status intern_names(const dcpi_rank_requests *ranks, size_t nranks,
                               dcpi_read_groups *g, uint32_t *ids) {
  dcpi_strmap map = {0};
  const char **first = NULL;
  size_t cap = 0, n = 0, p = 0;
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < nranks && !rc; i++)
    for (size_t k = 0; k < ranks[i].nkeys && !rc; k++, p++) {
      const char *s = ranks[i].keys[k].fqn;
      uint32_t v;
      int put = dcpi_strmap_put(&map, s, strlen(s), (uint32_t)n, &v);
      if (put < 0 || (put == 0 && DCPI_RESERVE(first, cap, n + 1))) {
        rc = DCP_ENOMEM;
      } else if (put == 0) {
        first[n] = s;
        ids[p] = (uint32_t)n++;
      } else {
        ids[p] = v;
      }
    }
  char **sorted = rc ? NULL : calloc(n ? n : 1, sizeof *sorted);
  uint32_t *rank_of = rc ? NULL : malloc((n ? n : 1) * sizeof *rank_of);
  if (!rc && (!sorted || !rank_of)) rc = DCP_ENOMEM;
  for (size_t i = 0; i < n && !rc; i++)
    if (!(sorted[i] = strdup(first[i]))) rc = DCP_ENOMEM;
  g->names = sorted;
  g->nnames = sorted ? n : 0;
  if (!rc) {
    /* provisional id i → sorted position, via the map keyed by the copies */
    dcpi_sort(sorted, n, sizeof *sorted, cmp_str);
    for (size_t i = 0; i < n; i++) {
      uint32_t v;
      dcpi_strmap_get(&map, sorted[i], strlen(sorted[i]), &v);
      rank_of[v] = (uint32_t)i;
    }
    for (size_t q = 0; q < p; q++) ids[q] = rank_of[ids[q]];
  }
  free(rank_of);
  free(first);
  dcpi_strmap_free(&map);
  return rc;
}

/* Sort the pairs and cut them into groups: fills g->groups (without
 * readers), the member pool and the coordinates. */
static dcp_status form_groups(req *rq, size_t n, dcpi_read_groups *g, dcpi_err *err) {
  dcpi_sort(rq, n, sizeof *rq, cmp_req);
  size_t ng = 0, ncoord = 0;
  for (size_t i = 0; i < n; i++)
    if (i == 0 || cmp_key(&rq[i - 1], &rq[i])) ng++, ncoord += 2 * (size_t)rq[i].ndim;
  g->groups = calloc(ng ? ng : 1, sizeof *g->groups);
  g->coords = malloc((ncoord ? ncoord : 1) * sizeof *g->coords);
  g->member_pool = malloc((n ? n : 1) * sizeof *g->member_pool);
  if (!g->groups || !g->coords || !g->member_pool)
    return dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory for %zu groups", ng);
  size_t gi = 0, nm = 0, nc = 0;
  for (size_t i = 0; i < n; i++) {
    const req *r = &rq[i];
    if (i == 0 || cmp_key(&rq[i - 1], r)) {
      int64_t *c = g->coords + nc;
      if (r->ndim) memcpy(c, r->offset, r->ndim * sizeof *c);
      if (r->ndim) memcpy(c + r->ndim, r->size, r->ndim * sizeof *c);
      nc += 2 * (size_t)r->ndim;
      g->groups[gi++] = (dcpi_read_group){.fqn = g->names[r->name], .ndim = r->ndim,
                                          .offset = c, .size = c + r->ndim, .bytes = r->bytes,
                                          .members = g->member_pool + nm};
    } else if (r->bytes != rq[i - 1].bytes) {
      char box[512];
      return dcpi_fail(err, DCP_EMISMATCH,
                       "read groups: '%s' box %s is %lld bytes for rank %d, %lld for rank %d",
                       g->names[r->name], dcpi_box_str(r->ndim, r->offset, r->size, box,
                                                       sizeof box),
                       (long long)rq[i - 1].bytes, rq[i - 1].rank, (long long)r->bytes, r->rank);
    } else if (r->rank == rq[i - 1].rank) {
      continue; /* the same rank asked twice: one member */
    }
    dcpi_read_group *grp = &g->groups[gi - 1];
    g->member_pool[nm++] = r->rank;
    grp->nmembers++;
  }
  g->ngroups = ng;
  return DCP_OK;
}

/* Of the ranks members[0..n), those on the hosts that hold the most of
 * them (in the given order, into out: n entries), and their number. O(n^2)
 * in the members of one group, which are few next to the data they share. */
static uint32_t host_candidates(const int32_t *members, uint32_t n, const uint64_t *host_of,
                                int32_t *out) {
  uint32_t best = 0, k = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = 0;
    for (uint32_t j = 0; j < n; j++) c += host_of[members[j]] == host_of[members[i]];
    if (c > best) best = c;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t c = 0;
    for (uint32_t j = 0; j < n; j++) c += host_of[members[j]] == host_of[members[i]];
    if (c == best) out[k++] = members[i];
  }
  return k;
}

/* One reader per group through the shared balancer (key = group id, the
 * canonical position, so ties break the same way everywhere), among the
 * members of the groups' best hosts when host_of is given. Writes the
 * readers and load only when it succeeds. */
static dcp_status choose_readers(dcpi_read_groups *g, const uint64_t *host_of,
                                 dcpi_balance_policy policy, dcpi_err *err) {
  size_t ng = g->ngroups, nm = 0;
  for (size_t i = 0; i < ng; i++) nm += g->groups[i].nmembers;
  dcpi_balance_item *items = malloc((ng ? ng : 1) * sizeof *items);
  int32_t *owner = malloc((ng ? ng : 1) * sizeof *owner);
  int32_t *cand = host_of ? malloc((nm ? nm : 1) * sizeof *cand) : NULL;
  int64_t *load = calloc((size_t)g->world_size, sizeof *load);
  dcp_status rc = DCP_OK;
  if (!items || !owner || !load || (host_of && !cand)) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory");
  } else {
    size_t at = 0;
    for (size_t i = 0; i < ng; i++) {
      const dcpi_read_group *grp = &g->groups[i];
      items[i] = (dcpi_balance_item){grp->bytes, i, grp->nmembers, grp->members};
      if (host_of) {
        items[i].nholders = host_candidates(grp->members, grp->nmembers, host_of, cand + at);
        items[i].holders = cand + at;
        at += items[i].nholders;
      }
    }
    rc = dcpi_balance(items, ng, g->world_size, policy, owner, load, err);
    for (size_t i = 0; i < ng && !rc; i++) g->groups[i].reader = owner[i];
  }
  if (!rc) {
    free(g->load);
    g->load = load;
  } else {
    free(load);
  }
  free(items);
  free(owner);
  free(cand);
  return rc;
}

/* Per-rank CSR lists of the groups it reads and the ones it receives. */
static dcp_status index_ranks(dcpi_read_groups *g) {
  size_t ws = (size_t)g->world_size, nm = 0;
  for (size_t i = 0; i < g->ngroups; i++) nm += g->groups[i].nmembers;
  g->read_first = calloc(ws + 1, sizeof *g->read_first);
  g->recv_first = calloc(ws + 1, sizeof *g->recv_first);
  g->read_list = malloc((g->ngroups ? g->ngroups : 1) * sizeof *g->read_list);
  g->recv_list = malloc((nm ? nm : 1) * sizeof *g->recv_list);
  size_t *fr = calloc(ws, sizeof *fr), *fv = calloc(ws, sizeof *fv);
  dcp_status rc = DCP_ENOMEM;
  if (g->read_first && g->recv_first && g->read_list && g->recv_list && fr && fv) {
    for (size_t i = 0; i < g->ngroups; i++)
      for (uint32_t m = 0; m < g->groups[i].nmembers; m++) {
        int32_t r = g->groups[i].members[m];
        (r == g->groups[i].reader ? g->read_first : g->recv_first)[r + 1]++;
      }
    for (size_t r = 0; r < ws; r++) {
      g->read_first[r + 1] += g->read_first[r];
      g->recv_first[r + 1] += g->recv_first[r];
      fr[r] = g->read_first[r];
      fv[r] = g->recv_first[r];
    }
    for (size_t i = 0; i < g->ngroups; i++) /* ascending group ids per rank */
      for (uint32_t m = 0; m < g->groups[i].nmembers; m++) {
        int32_t r = g->groups[i].members[m];
        if (r == g->groups[i].reader)
          g->read_list[fr[r]++] = (uint32_t)i;
        else
          g->recv_list[fv[r]++] = (uint32_t)i;
      }
    rc = DCP_OK;
  }
  free(fr);
  free(fv);
  return rc;
}

dcp_status dcpi_read_groups_build(const dcpi_rank_requests *ranks, size_t nranks,
                                  int32_t world_size, dcpi_balance_policy policy,
                                  dcpi_read_groups **out, dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "read groups: out is NULL");
  *out = NULL;
  size_t n = 0;
  dcp_status rc = check_input(ranks, nranks, world_size, &n, err);
  if (rc) return rc;
  if (n > UINT32_MAX) return dcpi_fail(err, DCP_EOVERFLOW, "read groups: too many requests");
  dcpi_read_groups *g = calloc(1, sizeof *g);
  uint32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  req *rq = malloc((n ? n : 1) * sizeof *rq);
  if (!g || !ids || !rq || intern_names(ranks, nranks, g, ids)) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory for %zu requests", n);
  } else {
    g->world_size = world_size;
    size_t p = 0;
    for (size_t i = 0; i < nranks; i++)
      for (size_t k = 0; k < ranks[i].nkeys; k++, p++) {
        const dcpi_read_key *key = &ranks[i].keys[k];
        rq[p] = (req){ids[p], key->ndim, key->offset, key->size, key->bytes, ranks[i].rank};
      }
    if (!(rc = form_groups(rq, n, g, err)) && !(rc = choose_readers(g, NULL, policy, err)) &&
        index_ranks(g))
      rc = dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory");
  }
  free(ids);
  free(rq);
  if (rc)
    dcpi_read_groups_free(g);
  else
    *out = g;
  return rc;
}

dcp_status dcpi_read_groups_prefer_hosts(dcpi_read_groups *g, const uint64_t *host_of,
                                         dcpi_balance_policy policy, dcpi_err *err) {
  if (!g || !host_of) return dcpi_fail(err, DCP_EINVAL, "read groups: NULL groups or hosts");
  size_t ng = g->ngroups, ws = (size_t)g->world_size;
  int32_t *old = malloc((ng ? ng : 1) * sizeof *old);
  int64_t *old_load = malloc(ws * sizeof *old_load);
  dcp_status rc = DCP_OK;
  if (!old || !old_load) {
    rc = dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory");
  } else {
    for (size_t i = 0; i < ng; i++) old[i] = g->groups[i].reader;
    memcpy(old_load, g->load, ws * sizeof *old_load);
    rc = choose_readers(g, host_of, policy, err);
  }
  if (!rc) {
    size_t *rf = g->read_first, *vf = g->recv_first;
    uint32_t *rl = g->read_list, *vl = g->recv_list;
    g->read_first = g->recv_first = NULL;
    g->read_list = g->recv_list = NULL;
    if (index_ranks(g)) { /* out of memory: g as it was */
      free(g->read_first), free(g->recv_first), free(g->read_list), free(g->recv_list);
      g->read_first = rf, g->recv_first = vf, g->read_list = rl, g->recv_list = vl;
      for (size_t i = 0; i < ng; i++) g->groups[i].reader = old[i];
      memcpy(g->load, old_load, ws * sizeof *old_load);
      rc = dcpi_fail(err, DCP_ENOMEM, "read groups: out of memory");
    } else {
      free(rf), free(vf), free(rl), free(vl);
    }
  }
  free(old);
  free(old_load);
  return rc;
}

void dcpi_read_groups_free(dcpi_read_groups *g) {
  if (!g) return;
  for (size_t i = 0; i < g->nnames; i++) free(g->names[i]);
  free(g->names);
  free(g->groups);
  free(g->coords);
  free(g->member_pool);
  free(g->load);
  free(g->read_first);
  free(g->read_list);
  free(g->recv_first);
  free(g->recv_list);
  free(g);
}

dcp_status dcpi_read_groups_rank(const dcpi_read_groups *g, int32_t rank,
                                 dcpi_rank_reads *out) {
  if (!g || !out) return DCP_EINVAL;
  if (rank < 0 || rank >= g->world_size) return DCP_ENOTFOUND;
  size_t r = (size_t)rank;
  *out = (dcpi_rank_reads){
      .reads = g->read_list + g->read_first[r], .nreads = g->read_first[r + 1] - g->read_first[r],
      .recvs = g->recv_list + g->recv_first[r], .nrecvs = g->recv_first[r + 1] - g->recv_first[r],
      .bytes_read = g->load[r]};
  return DCP_OK;
}

/* ---- partial-overlap sharing ------------------------------------------- */

/* Canonical order of needs: saved chunk, range, rank, seq. */
static int cmp_need(const void *pa, const void *pb) {
  const dcpi_share_need *a = pa, *b = pb;
  if (a->key_hi != b->key_hi) return a->key_hi < b->key_hi ? -1 : 1;
  if (a->key_lo != b->key_lo) return a->key_lo < b->key_lo ? -1 : 1;
  if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
  if (a->hi != b->hi) return a->hi < b->hi ? -1 : 1;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  return (a->seq > b->seq) - (a->seq < b->seq);
}

static int cmp_rank_seq(const void *pa, const void *pb) {
  const dcpi_share_need *a = pa, *b = pb;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  return (a->seq > b->seq) - (a->seq < b->seq);
}

static int cmp_i32(const void *pa, const void *pb) {
  int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
  return (a > b) - (a < b);
}

/* Every need well formed; no (rank, seq) twice (checked on sorted, a copy
 * the caller then re-sorts canonically). */
static dcp_status check_needs(dcpi_share_need *v, size_t n, int32_t ws, dcpi_err *err) {
  for (size_t i = 0; i < n; i++) {
    const dcpi_share_need *x = &v[i];
    if (x->rank < 0 || x->rank >= ws || x->lo < 0 || x->lo >= x->hi || x->bytes < 0)
      return dcpi_fail(err, DCP_EINVAL, "share plan: need %u of rank %d is malformed "
                       "(range [%lld, %lld), %lld bytes, world %d)", x->seq, x->rank,
                       (long long)x->lo, (long long)x->hi, (long long)x->bytes, ws);
  }
  dcpi_sort(v, n, sizeof *v, cmp_rank_seq);
  for (size_t i = 1; i < n; i++)
    if (!cmp_rank_seq(&v[i - 1], &v[i]))
      return dcpi_fail(err, DCP_EINVAL, "share plan: rank %d gives need %u twice", v[i].rank,
                       v[i].seq);
  return DCP_OK;
}

/* The components of the sorted needs: runs of one saved chunk whose ranges
 * overlap the union so far; those of >= 2 needs become groups (readers
 * unset), the others get group_of -1. */
static dcp_status form_components(dcpi_share_plan *p, dcpi_err *err) {
  size_t n = p->nneeds, ng = 0;
  p->groups = malloc((n ? n : 1) * sizeof *p->groups);
  if (!p->groups) return dcpi_fail(err, DCP_ENOMEM, "share plan: out of memory");
  for (size_t i = 0; i < n;) {
    const dcpi_share_need *a = &p->needs[i];
    size_t j = i + 1;
    int64_t hi = a->hi;
    while (j < n && p->needs[j].key_hi == a->key_hi && p->needs[j].key_lo == a->key_lo &&
           p->needs[j].lo < hi) {
      if (p->needs[j].hi > hi) hi = p->needs[j].hi;
      j++;
    }
    for (size_t k = i; k < j; k++) p->group_of[k] = j - i >= 2 ? (int64_t)ng : -1;
    if (j - i >= 2)
      p->groups[ng++] = (dcpi_share_group){a->key_hi, a->key_lo, a->lo, hi, -1, 0, i, j - i};
    i = j;
  }
  p->ngroups = ng;
  return DCP_OK;
}

/* Each group's distinct ranks, ascending, into one pool (*pool, with
 * *first[g] the start of group g's, nranks set). */
static dcp_status group_ranks(dcpi_share_plan *p, int32_t **pool, size_t **first,
                              dcpi_err *err) {
  *pool = malloc((p->nneeds ? p->nneeds : 1) * sizeof **pool);
  *first = malloc((p->ngroups + 1) * sizeof **first);
  if (!*pool || !*first) return dcpi_fail(err, DCP_ENOMEM, "share plan: out of memory");
  size_t at = 0;
  for (size_t g = 0; g < p->ngroups; g++) {
    dcpi_share_group *grp = &p->groups[g];
    int32_t *r = *pool + at;
    for (size_t k = 0; k < grp->count; k++) r[k] = p->needs[grp->first + k].rank;
    dcpi_sort(r, grp->count, sizeof *r, cmp_i32);
    uint32_t u = 0;
    for (size_t k = 0; k < grp->count; k++)
      if (!u || r[u - 1] != r[k]) r[u++] = r[k];
    grp->nranks = u;
    (*first)[g] = at;
    at += u;
  }
  (*first)[p->ngroups] = at;
  return DCP_OK;
}

/* The readers: the balancer over each group's ranks (or, with host_of,
 * those on its best hosts), key = the group's canonical index. */
static dcp_status choose_share_readers(dcpi_share_plan *p, dcpi_balance_policy policy,
                                       const int64_t *base, const uint64_t *host_of,
                                       dcpi_err *err) {
  int32_t *pool = NULL, *cand = NULL, *owner = NULL;
  size_t *first = NULL, ng = p->ngroups;
  dcpi_balance_item *items = NULL;
  dcp_status rc = group_ranks(p, &pool, &first, err);
  if (!rc) {
    items = malloc((ng ? ng : 1) * sizeof *items);
    owner = malloc((ng ? ng : 1) * sizeof *owner);
    cand = malloc((first[ng] ? first[ng] : 1) * sizeof *cand);
    if (!items || !owner || !cand) rc = dcpi_fail(err, DCP_ENOMEM, "share plan: out of memory");
  }
  for (size_t g = 0; !rc && g < ng; g++) {
    const dcpi_share_group *grp = &p->groups[g];
    const int32_t *r = pool + first[g];
    uint32_t k = grp->nranks;
    if (host_of) {
      k = host_candidates(r, grp->nranks, host_of, cand + first[g]);
      r = cand + first[g];
    }
    items[g] = (dcpi_balance_item){grp->hi - grp->lo, g, k, r};
  }
  if (!rc) rc = dcpi_balance_from(items, ng, p->world_size, policy, base, owner, p->load, err);
  for (size_t g = 0; !rc && g < ng; g++) p->groups[g].reader = owner[g];
  free(pool), free(first), free(items), free(owner), free(cand);
  return rc;
}

dcp_status dcpi_share_plan_build(const dcpi_share_need *needs, size_t n, int32_t world_size,
                                 dcpi_balance_policy policy, const int64_t *base,
                                 const uint64_t *host_of, dcpi_share_plan **out,
                                 dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "share plan: NULL output");
  *out = NULL;
  if ((n && !needs) || world_size < 1)
    return dcpi_fail(err, DCP_EINVAL, "share plan: NULL needs or world of %d", world_size);
  dcpi_share_plan *p = calloc(1, sizeof *p);
  if (!p) return dcpi_fail(err, DCP_ENOMEM, "share plan: out of memory");
  p->world_size = world_size;
  p->nneeds = n;
  p->needs = malloc((n ? n : 1) * sizeof *p->needs);
  p->group_of = malloc((n ? n : 1) * sizeof *p->group_of);
  p->load = calloc((size_t)world_size, sizeof *p->load);
  dcp_status rc = p->needs && p->group_of && p->load
                      ? DCP_OK
                      : dcpi_fail(err, DCP_ENOMEM, "share plan: out of memory for %zu needs", n);
  if (!rc) {
    if (n) memcpy(p->needs, needs, n * sizeof *needs);
    rc = check_needs(p->needs, n, world_size, err);
  }
  if (!rc) {
    dcpi_sort(p->needs, n, sizeof *p->needs, cmp_need);
    rc = form_components(p, err);
  }
  if (!rc) rc = choose_share_readers(p, policy, base, host_of, err);
  if (rc) {
    dcpi_share_plan_free(p);
    return rc;
  }
  *out = p;
  return DCP_OK;
}

void dcpi_share_plan_free(dcpi_share_plan *p) {
  if (!p) return;
  free(p->needs);
  free(p->group_of);
  free(p->groups);
  free(p->load);
  free(p);
}
