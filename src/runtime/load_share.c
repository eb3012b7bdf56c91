/* load_share.c — partial-overlap sharing for dcp_load: where the reads of
 * several ranks (or of one rank's several chunks) cover the same granules
 * (checksum blocks) of one saved chunk, one rank reads the union once,
 * verifies it and sends each of the others exactly the bytes it needs.
 *
 * A need is one overlap of a chunk that this rank reads (role OWN or READ:
 * replica groups are formed first, so a replica receives its whole chunk
 * from its group's reader as before). Each rank describes its needs in a
 * record of int64 words, so that a reader can cut the piece of another
 * rank's overlap out of the saved chunk's bytes:
 *
 *   key_hi key_lo lo hi bytes seq ndim elem | src_offset[ndim] size[ndim] src_size[ndim]
 *
 * (the saved chunk: a hash of fqn and chunk index; [lo, hi) its granules
 * covering the overlap; bytes the overlap's; seq its index in the rank's
 * load plan; the overlap's box inside the saved chunk and the chunk's
 * extents). A rank's message is [failed, nrec, records...]; the
 * messages go through two allgathers (word counts, then the messages padded
 * to the longest) and every rank builds the same dcpi_share_plan from
 * them. A piece is the overlap's elements packed row-major (the overlap
 * as its own box), so exactly the bytes needed cross the collective. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "metadata/view.h"
#include "model/box.h"
#include "model/layout.h"
#include "runtime/load_int.h"

enum { W_KHI, W_KLO, W_LO, W_HI, W_BYTES, W_SEQ, W_NDIM, W_ELEM, W_HEAD };
enum { M_FAILED, M_NREC, M_HEAD };

/* ---- this rank's needs --------------------------------------------------- */

/* The granules [*lo, *hi) of ref that cover ov's bytes. */
static void granules(const dcp_storage_ref *ref, const dcpi_overlap *ov, int64_t *lo, int64_t *hi) {
  int64_t bs = ref->block_size ? (int64_t)ref->block_size : 1, end = (int64_t)ref->raw_length;
  *lo = ov->src_first / bs * bs;
  *hi = (ov->src_last + bs - 1) / bs * bs;
  if (*hi > end) *hi = end;
}

/* Whether overlap i of plan is a need of this rank: its chunk is read here. */
static bool is_need(const dcp_state *st, const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                    size_t i) {
  const dcpi_overlap *ov = &plan->overlaps[i];
  uint8_t role = sc->role[ov->dest_chunk];
  return ov->bytes > 0 && st->chunks[ov->dest_chunk].nbytes > 0 && role != DCPI_CHUNK_RECV;
}

/* This rank's message (see the top comment) into *out (*nwords words). */
static dcp_status own_message(dcp_meta *m, const dcp_state *st, const dcpi_load_plan *plan,
                              const dcpi_load_sched *sc, int64_t **out, size_t *nwords,
                              dcpi_err *err) {
  size_t cap = M_HEAD;
  for (size_t i = 0; i < plan->noverlaps; i++)
    if (is_need(st, plan, sc, i)) cap += W_HEAD + 3 * (size_t)plan->overlaps[i].ndim;
  int64_t *w = calloc(cap, sizeof *w);
  if (!w) return dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory for %zu need words", cap);
  size_t at = M_HEAD;
  for (size_t i = 0; i < plan->noverlaps; i++) {
    if (!is_need(st, plan, sc, i)) continue;
    const dcpi_overlap *ov = &plan->overlaps[i];
    const dcpi_tensor_item *t = &st->tensors[ov->tensor];
    dcp_chunk_info ci;
    const char *file;
    dcp_status rc = dcpi_load_saved_of(m, st, ov, &ci, &file, err);
    if (rc) {
      free(w);
      return rc;
    }
    int64_t idx = ov->saved_chunk, none = -1, lo, hi;
    dcpi_load_key k = dcpi_load_key_of(t->fqn, t->fqn_len, 1, &idx, &none, 0);
    granules(&ci.ref, ov, &lo, &hi);
    int64_t *r = w + at;
    r[W_KHI] = (int64_t)k.h1, r[W_KLO] = (int64_t)k.h2, r[W_LO] = lo, r[W_HI] = hi;
    r[W_BYTES] = ov->bytes, r[W_SEQ] = (int64_t)i, r[W_NDIM] = ov->ndim, r[W_ELEM] = ov->elem_size;
    for (uint32_t d = 0; d < ov->ndim; d++) {
      r[W_HEAD + d] = ov->src_offset[d];
      r[W_HEAD + ov->ndim + d] = ov->size[d];
      r[W_HEAD + 2 * ov->ndim + d] = ov->src_size[d];
    }
    at += W_HEAD + 3 * (size_t)ov->ndim;
    w[M_NREC]++;
  }
  *out = w;
  *nwords = at;
  return DCP_OK;
}

/* ---- every rank's needs -------------------------------------------------- */

/* Parse rank r's message (words [0, n) of msg) into needs (appended at
 * *nn) and their record positions (word index into the whole buffer at
 * msg_at). Bounds are checked: a peer's words are data. */
static dcp_status parse_message(const int64_t *msg, size_t n, size_t msg_at, int32_t r,
                                dcpi_share_need *needs, size_t *rec, size_t *nn, dcpi_err *err) {
  if (n < M_HEAD || msg[M_NREC] < 0)
    return dcpi_fail(err, DCP_ECORRUPT, "read dedup: rank %d sent a malformed need list", r);
  size_t at = M_HEAD;
  for (int64_t k = 0; k < msg[M_NREC]; k++) {
    const int64_t *x = msg + at;
    if (at + W_HEAD > n || x[W_NDIM] < 0 || x[W_NDIM] > DCP_MAX_NDIM || x[W_SEQ] < 0 ||
        x[W_SEQ] > UINT32_MAX || at + W_HEAD + 3 * (size_t)x[W_NDIM] > n)
      return dcpi_fail(err, DCP_ECORRUPT, "read dedup: rank %d sent a malformed need", r);
    needs[*nn] = (dcpi_share_need){r, (uint32_t)x[W_SEQ], (uint64_t)x[W_KHI], (uint64_t)x[W_KLO],
                                   x[W_LO], x[W_HI], x[W_BYTES]};
    rec[(*nn)++] = msg_at + at;
    at += W_HEAD + 3 * (size_t)x[W_NDIM];
  }
  return DCP_OK;
}

/* Index into needs (sorted by rank, then seq: the parse order) of (r, seq). */
static size_t find_need(const dcpi_share_need *needs, size_t n, int32_t r, uint32_t seq) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (needs[mid].rank < r || (needs[mid].rank == r && needs[mid].seq < seq))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* The plan from every rank's parsed needs: built once to learn which needs
 * stay alone, then again with each rank's alone bytes as its base, so the
 * readers balance what every rank reads in all. */
static dcp_status build_plan(const dcpi_share_need *needs, size_t n, int32_t world,
                             dcpi_balance_policy policy, const uint64_t *hosts,
                             int64_t *base, dcpi_share_plan **out, dcpi_err *err) {
  dcpi_share_plan *p = NULL;
  dcp_status rc = dcpi_share_plan_build(needs, n, world, policy, NULL, hosts, &p, err);
  if (rc || !p->ngroups) {
    *out = p;
    return rc;
  }
  for (size_t i = 0; i < p->nneeds; i++)
    if (p->group_of[i] < 0) base[p->needs[i].rank] += p->needs[i].hi - p->needs[i].lo;
  dcpi_share_plan_free(p);
  return dcpi_share_plan_build(needs, n, world, policy, base, hosts, out, err);
}

/* Bytes of the largest buffer this rank needs: for a group it reads, the
 * pieces of all other ranks; for one it receives from, its own pieces. */
static int64_t buffer_need(const dcpi_share_plan *p, int32_t rank, int64_t *read) {
  int64_t most = 0;
  *read = 0;
  for (size_t g = 0; g < p->ngroups; g++) {
    const dcpi_share_group *grp = &p->groups[g];
    int64_t out = 0, in = 0;
    for (size_t k = grp->first; k < grp->first + grp->count; k++) {
      if (p->needs[k].rank != rank) out += p->needs[k].bytes;
      else in += p->needs[k].bytes;
    }
    int64_t b = grp->reader == rank ? out : (grp->reader != rank && in ? in : 0);
    if (grp->reader == rank) *read += grp->hi - grp->lo;
    if (b > most) most = b;
  }
  return most;
}

/* After the plan: this rank's skip flags and working memory. */
static dcp_status take_plan(const dcpi_load_plan *plan, int32_t rank, dcpi_load_sched *sc,
                            dcpi_err *err) {
  const dcpi_share_plan *p = sc->share;
  sc->skip = calloc(plan->noverlaps ? plan->noverlaps : 1, 1);
  sc->share_buf_len = buffer_need(p, rank, &sc->share_read);
  /* zeroed: after a failed read its pieces still go out, never
   * uninitialised bytes */
  sc->share_buf = calloc(sc->share_buf_len ? (size_t)sc->share_buf_len : 1, 1);
  if (!sc->skip || !sc->share_buf)
    return dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory for %lld bytes of pieces",
                     (long long)sc->share_buf_len);
  for (size_t i = 0; i < p->nneeds; i++)
    if (p->group_of[i] >= 0 && p->needs[i].rank == rank) sc->skip[p->needs[i].seq] = 1;
  return DCP_OK;
}

/* The most bytes the padded needs exchange may put on each rank. Sharing
 * saves storage reads, never correctness, so a world whose padded lists
 * would exceed it (10,000 ranks with a few hundred needs each would be
 * hundreds of MB on every rank) reads without sharing. */
#define DCPI_SHARE_EXCHANGE_MAX ((size_t)64 << 20)

/* Every rank's message through two allgathers into *all (world * most
 * words, rank r's at r * most; *most the longest). When the padded lists
 * would exceed DCPI_SHARE_EXCHANGE_MAX bytes the second allgather is
 * skipped (every rank decides the same from the first): *all stays NULL
 * and *most 0. */
static dcp_status exchange(dcpi_rt *rt, const int64_t *mine, size_t n, int64_t **all,
                           size_t *most) {
  size_t world = (size_t)rt->ctx->world_size;
  int64_t len = (int64_t)n, *lens = malloc(world * sizeof *lens);
  if (!lens) return dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory");
  dcp_status rc = dcpi_rt_allgather(rt, &len, sizeof len, lens);
  *most = 0;
  for (size_t r = 0; !rc && r < world; r++)
    if ((size_t)lens[r] > *most) *most = (size_t)lens[r];
  if (!rc && *most > DCPI_SHARE_EXCHANGE_MAX / sizeof(int64_t) / world) {
    *most = 0; /* too large to exchange: nobody shares */
    free(lens);
    return DCP_OK;
  }
  int64_t *send = NULL;
  if (!rc) {
    /* a failure here leaves the peers to their deadline in the allgather */
    send = calloc(*most, sizeof *send);
    *all = malloc(*most * world * sizeof **all);
    if (!send || !*all)
      rc = dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory for %zu x %zu need words",
                     *most, world);
  }
  if (!rc) {
    memcpy(send, mine, n * sizeof *mine);
    rc = dcpi_rt_allgather(rt, send, *most * sizeof *send, *all);
  }
  free(lens);
  free(send);
  return rc;
}

/* Parse every message and build the plan into sc. */
static dcp_status plan_from(dcpi_rt *rt, const int64_t *all, size_t most,
                            dcpi_balance_policy policy, const uint64_t *hosts,
                            dcpi_load_sched *sc, bool *any_failed) {
  int32_t world = rt->ctx->world_size;
  size_t total = 0;
  *any_failed = false;
  for (int32_t r = 0; r < world; r++) {
    const int64_t *msg = all + (size_t)r * most;
    *any_failed |= msg[M_FAILED] != 0;
    if (msg[M_NREC] > 0) total += (size_t)msg[M_NREC];
  }
  if (*any_failed) return DCP_OK;
  dcpi_share_need *needs = malloc((total ? total : 1) * sizeof *needs);
  sc->share_rec = malloc((total ? total : 1) * sizeof *sc->share_rec);
  int64_t *base = calloc((size_t)world, sizeof *base);
  dcp_status rc = needs && sc->share_rec && base
                      ? DCP_OK
                      : dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory for %zu needs", total);
  size_t nn = 0;
  size_t *rec = rc ? NULL : malloc((total ? total : 1) * sizeof *rec);
  if (!rc && !rec) rc = dcpi_fail(&rt->err, DCP_ENOMEM, "read dedup: out of memory");
  for (int32_t r = 0; !rc && r < world; r++)
    rc = parse_message(all + (size_t)r * most, most, (size_t)r * most, r, needs, rec, &nn,
                       &rt->err);
  if (!rc) rc = build_plan(needs, nn, world, policy, hosts, base, &sc->share, &rt->err);
  /* the canonical needs' records */
  for (size_t i = 0; !rc && i < sc->share->nneeds; i++) {
    const dcpi_share_need *x = &sc->share->needs[i];
    sc->share_rec[i] = rec[find_need(needs, nn, x->rank, x->seq)];
  }
  free(needs);
  free(rec);
  free(base);
  return rc;
}

dcp_status dcpi_load_share_plan(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, dcpi_balance_policy policy,
                                const uint64_t *hosts, dcpi_load_sched *sc, dcp_status local) {
  int64_t *mine = NULL, *all = NULL, failed[M_HEAD] = {1, 0};
  size_t n = M_HEAD, most = 0;
  dcp_status rc = local ? local : own_message(m, st, plan, sc, &mine, &n, &rt->err);
  if (rc) n = M_HEAD; /* tell the others: nobody shares */
  dcp_status c = exchange(rt, rc ? failed : mine, n, &all, &most);
  bool any_failed = false;
  if (!c && all) c = plan_from(rt, all, most, policy, hosts, sc, &any_failed);
  if (!c && sc->share && !rc) {
    if (sc->share->ngroups) {
      sc->share_words = all;
      all = NULL;
      c = take_plan(plan, rt->ctx->rank, sc, &rt->err);
    } else { /* nothing shared: no share phase */
      dcpi_share_plan_free(sc->share);
      sc->share = NULL;
    }
  }
  free(mine);
  free(all);
  return rc ? rc : c;
}

/* ---- running the groups -------------------------------------------------- */

static const int64_t *record(const dcpi_load_sched *sc, size_t i) {
  return sc->share_words + sc->share_rec[i];
}

/* A piece as its reader cuts it: the overlap of a need's record with the
 * saved chunk as source and the piece itself (its box, row-major) as
 * destination. */
typedef struct piece_geo {
  dcpi_overlap ov;
  int64_t zero[DCP_MAX_NDIM];
} piece_geo;

/* Set g from record r; false when r does not fit the saved chunk ci (its
 * extents, box inside them, bytes = the box's). */
static bool piece_of(const int64_t *r, const dcp_chunk_info *ci, piece_geo *g) {
  uint32_t nd = (uint32_t)r[W_NDIM];
  const int64_t *off = r + W_HEAD, *sz = r + W_HEAD + nd, *ssz = r + W_HEAD + 2 * nd;
  int64_t numel = 1;
  if (nd != ci->box.ndim || r[W_ELEM] <= 0) return false;
  for (uint32_t d = 0; d < nd; d++) {
    if (ssz[d] != ci->box.size[d] || off[d] < 0 || sz[d] < 0 || off[d] > ssz[d] - sz[d])
      return false;
    numel *= sz[d];
  }
  if (numel * r[W_ELEM] != r[W_BYTES]) return false;
  memset(g, 0, sizeof *g);
  g->ov = (dcpi_overlap){.ndim = nd, .elem_size = r[W_ELEM], .size = sz, .src_offset = off,
                         .src_size = ssz, .dest_offset = g->zero, .dest_size = sz,
                         .bytes = r[W_BYTES]};
  return true;
}

/* The smallest rank above `after` among group grp's needs other than
 * skip's, or -1. */
static int32_t next_rank(const dcpi_share_plan *p, const dcpi_share_group *grp, int32_t after,
                         int32_t skip) {
  int32_t best = -1;
  for (size_t k = grp->first; k < grp->first + grp->count; k++) {
    int32_t r = p->needs[k].rank;
    if (r > after && r != skip && (best < 0 || r < best)) best = r;
  }
  return best;
}

/* Bytes of rank r's pieces in grp. */
static int64_t rank_bytes(const dcpi_share_plan *p, const dcpi_share_group *grp, int32_t r) {
  int64_t b = 0;
  for (size_t k = grp->first; k < grp->first + grp->count; k++)
    if (p->needs[k].rank == r) b += p->needs[k].bytes;
  return b;
}

typedef struct multi_sink {
  dcpi_overlap_sink *t;
  size_t n;
} multi_sink;

static dcp_status copy_all(void *arg, uint64_t raw_off, const uint8_t *data, size_t len,
                           dcpi_err *err) {
  const multi_sink *ms = arg;
  for (size_t i = 0; i < ms->n; i++) dcpi_load_copy_runs(&ms->t[i], raw_off, data, len, err);
  return DCP_OK;
}

/* Keep the first local failure. */
static void note(dcp_status *rs, dcpi_err *rerr, dcp_status rc, const dcpi_err *e) {
  if (rc && !*rs) {
    *rs = rc;
    *rerr = *e;
  }
}

/* Group g, this rank its reader: read [lo, hi) once into its own overlaps
 * and the others' pieces (laid out by rank, then canonical order, in the
 * share buffer). Local status; *payload gets the own bytes filled. */
static dcp_status read_group(dcp_meta *m, const dcp_state *st, const dcpi_load_plan *plan,
                             const dcpi_load_sched *sc, dcpi_block_reader *br, size_t g,
                             int32_t me, uint64_t *payload, dcpi_err *err) {
  const dcpi_share_plan *p = sc->share;
  const dcpi_share_group *grp = &p->groups[g];
  dcpi_overlap_sink *t = malloc(grp->count * sizeof *t);
  piece_geo *geo = malloc(grp->count * sizeof *geo);
  const dcpi_overlap *mine = NULL;
  dcp_chunk_info ci;
  const char *file = NULL;
  dcp_status rc = t && geo ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  size_t n = 0;
  for (size_t k = grp->first; !rc && k < grp->first + grp->count; k++)
    if (p->needs[k].rank == me && !mine) mine = &plan->overlaps[p->needs[k].seq];
  if (!rc) rc = dcpi_load_saved_of(m, st, mine, &ci, &file, err);
  int64_t at = 0;
  for (int32_t r = next_rank(p, grp, -1, me); !rc && r >= 0; r = next_rank(p, grp, r, me))
    for (size_t k = grp->first; !rc && k < grp->first + grp->count; k++) {
      if (p->needs[k].rank != r) continue;
      if (!piece_of(record(sc, k), &ci, &geo[n]) || at + geo[n].ov.bytes > sc->share_buf_len)
        rc = dcpi_fail(err, DCP_ECORRUPT, "read dedup: rank %d's need %u does not fit saved chunk "
                       "%u of tensor '%s'", r, p->needs[k].seq, mine->saved_chunk,
                       st->tensors[mine->tensor].fqn);
      else
        t[n] = (dcpi_overlap_sink){&geo[n].ov, sc->share_buf + at}, at += geo[n].ov.bytes, n++;
    }
  for (size_t k = grp->first; !rc && k < grp->first + grp->count; k++) {
    if (p->needs[k].rank != me) continue;
    const dcpi_overlap *ov = &plan->overlaps[p->needs[k].seq];
    t[n++] = (dcpi_overlap_sink){ov, st->chunks[ov->dest_chunk].data};
    *payload += (uint64_t)ov->bytes;
  }
  if (!rc) {
    char what[512], box[256];
    snprintf(what, sizeof what, "tensor '%.200s' chunk %s (read once for %u ranks)",
             st->tensors[mine->tensor].fqn,
             dcpi_box_str(ci.box.ndim, ci.box.offset, ci.box.size, box, sizeof box), grp->nranks);
    multi_sink ms = {t, n};
    rc = dcpi_block_read(br, file, &ci.ref, (uint64_t)grp->lo, (uint64_t)grp->hi, what, copy_all,
                         &ms, err);
  }
  free(t);
  free(geo);
  return rc;
}

/* The two-rank group of a and b, ascending. */
static void pair(int32_t a, int32_t b, int32_t out[2]) {
  out[0] = a < b ? a : b;
  out[1] = a < b ? b : a;
}

/* Group g as its reader: read, then send each other rank its pieces, in
 * rank order. Returns a collective failure only. */
static dcp_status serve_group(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                              const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                              dcpi_block_reader *br, size_t g, dcpi_load_counts *counts,
                              dcp_status *rs, dcpi_err *rerr) {
  const dcpi_share_plan *p = sc->share;
  const dcpi_share_group *grp = &p->groups[g];
  int32_t me = rt->ctx->rank, members[2];
  dcpi_err e;
  dcpi_err_clear(&e);
  if (!*rs) note(rs, rerr, read_group(m, st, plan, sc, br, g, me, &counts->payload, &e), &e);
  int64_t at = 0;
  for (int32_t r = next_rank(p, grp, -1, me); r >= 0; r = next_rank(p, grp, r, me)) {
    int64_t b = rank_bytes(p, grp, r);
    pair(me, r, members);
    dcp_status cs = dcpi_rt_group_bcast(rt, members, 2, sc->share_buf + at, (size_t)b, me);
    if (cs) return cs;
    counts->sent += (uint64_t)b;
    at += b;
  }
  return DCP_OK;
}

/* Group g as a rank that needs some of it but does not read it: receive
 * its pieces and copy them into place. */
static dcp_status take_group(dcpi_rt *rt, const dcp_state *st, const dcpi_load_plan *plan,
                             const dcpi_load_sched *sc, size_t g, dcpi_load_counts *counts) {
  const dcpi_share_plan *p = sc->share;
  const dcpi_share_group *grp = &p->groups[g];
  int32_t me = rt->ctx->rank, members[2];
  int64_t b = rank_bytes(p, grp, me), at = 0;
  if (!b) return DCP_OK;
  pair(me, grp->reader, members);
  dcp_status cs = dcpi_rt_group_bcast(rt, members, 2, sc->share_buf, (size_t)b, grp->reader);
  if (cs) return cs;
  counts->recv += (uint64_t)b;
  for (size_t k = grp->first; k < grp->first + grp->count; k++) {
    if (p->needs[k].rank != me) continue;
    dcpi_overlap ov = plan->overlaps[p->needs[k].seq]; /* the piece as source */
    int64_t zero[DCP_MAX_NDIM] = {0};
    ov.src_offset = zero, ov.src_size = ov.size;
    dcpi_run_iter it;
    dcpi_run run;
    uint8_t *dest = st->chunks[ov.dest_chunk].data;
    dcpi_run_iter_init(&it, &ov);
    while (dcpi_run_iter_next(&it, &run))
      memcpy(dest + run.dest_off, sc->share_buf + at + run.src_off, (size_t)run.len);
    at += ov.bytes;
  }
  return DCP_OK;
}

dcp_status dcpi_load_share_exec(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                                dcpi_block_reader *br, dcpi_load_counts *counts,
                                dcp_status *rs, dcpi_err *rerr) {
  const dcpi_share_plan *p = sc->share;
  dcp_status cs = DCP_OK;
  for (size_t g = 0; p && g < p->ngroups && !cs; g++)
    cs = p->groups[g].reader == rt->ctx->rank
             ? serve_group(rt, m, st, plan, sc, br, g, counts, rs, rerr)
             : take_group(rt, st, plan, sc, g, counts);
  return cs;
}

/* ---- the layout path: can anything be shared? ------------------------------ */

/* One distinct layout box (tensor t), and one granule range of a read. */
typedef struct lbox {
  uint32_t t;
  const int64_t *off, *sz;
} lbox;

typedef struct lrange {
  uint32_t t, saved;
  int64_t lo, hi;
} lrange;

static int cmp_lbox(const void *pa, const void *pb) {
  const lbox *a = pa, *b = pb;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  /* the coordinates are zero-padded to DCP_MAX_NDIM (layout_boxes) */
  int c = memcmp(a->off, b->off, DCP_MAX_NDIM * sizeof *a->off);
  return c ? c : memcmp(a->sz, b->sz, DCP_MAX_NDIM * sizeof *a->sz);
}

static int cmp_lrange(const void *pa, const void *pb) {
  const lrange *a = pa, *b = pb;
  if (a->t != b->t) return a->t < b->t ? -1 : 1;
  if (a->saved != b->saved) return a->saved < b->saved ? -1 : 1;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Every non-empty box the layouts of st give any rank, one per distinct
 * box (sorted per tensor), into *out (coords in *pool: each box its own
 * slot, never reused, since a kept box may point at a slot past the
 * dropped duplicates). */
static dcp_status layout_boxes(const dcp_state *st, lbox **out, size_t *n, int64_t **pool,
                               dcpi_err *err) {
  size_t cap = 0, slot = 0;
  for (size_t t = 0; t < st->ntensors; t++)
    if (st->tensors[t].layout) cap += (size_t)st->tensors[t].layout->nranks;
  *out = malloc((cap ? cap : 1) * sizeof **out);
  *pool = malloc((cap ? cap : 1) * 2 * DCP_MAX_NDIM * sizeof **pool);
  *n = 0;
  if (!*out || !*pool) return dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  for (size_t t = 0; t < st->ntensors; t++) {
    const dcpi_tensor_item *ti = &st->tensors[t];
    if (!ti->layout) continue;
    size_t first = *n;
    for (int64_t p = 0; p < ti->layout->nranks; p++) {
      int64_t *off = *pool + slot++ * 2 * DCP_MAX_NDIM, *sz = off + DCP_MAX_NDIM, numel = 1;
      memset(off, 0, 2 * DCP_MAX_NDIM * sizeof *off);
      dcpi_layout_box_at(ti->layout, ti->shape, p, off, sz);
      for (uint32_t d = 0; d < ti->ndim; d++) numel *= sz[d];
      if (numel) (*out)[(*n)++] = (lbox){(uint32_t)t, off, sz};
    }
    dcpi_sort(*out + first, *n - first, sizeof **out, cmp_lbox);
    size_t u = first;
    for (size_t i = first; i < *n; i++)
      if (i == first || cmp_lbox(&(*out)[u - 1], &(*out)[i])) (*out)[u++] = (*out)[i];
    *n = u;
  }
  return DCP_OK;
}

/* The granule ranges that reading the boxes costs, one per overlap with a
 * saved chunk, sorted; *possible: two of one saved chunk overlap. */
static dcp_status ranges_overlap(const dcp_state *st, dcp_meta *m, const dcpi_load_plan *lp,
                                 const lbox *boxes, bool *possible, dcpi_err *err) {
  lrange *r = malloc((lp->noverlaps ? lp->noverlaps : 1) * sizeof *r);
  if (!r) return dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  dcp_status rc = DCP_OK;
  for (size_t i = 0; !rc && i < lp->noverlaps; i++) {
    const dcpi_overlap *ov = &lp->overlaps[i];
    uint32_t t = boxes[ov->dest_chunk].t;
    size_t ti;
    dcp_chunk_info ci;
    rc = dcp_meta_find_tensor(m, st->tensors[t].fqn, &ti);
    if (!rc) rc = dcp_meta_chunk(m, ti, ov->saved_chunk, &ci);
    if (rc) {
      rc = dcpi_fail(err, rc, "tensor '%s': saved chunk %u unavailable", st->tensors[t].fqn,
                     ov->saved_chunk);
      break;
    }
    r[i] = (lrange){t, ov->saved_chunk, 0, 0};
    granules(&ci.ref, ov, &r[i].lo, &r[i].hi);
  }
  if (!rc) {
    dcpi_sort(r, lp->noverlaps, sizeof *r, cmp_lrange);
    int64_t hi = 0;
    for (size_t i = 0; i < lp->noverlaps && !*possible; i++) {
      bool same = i > 0 && r[i].t == r[i - 1].t && r[i].saved == r[i - 1].saved;
      *possible = same && r[i].lo < hi;
      hi = same && hi > r[i].hi ? hi : r[i].hi;
    }
  }
  free(r);
  return rc;
}

dcp_status dcpi_load_share_possible(const dcp_state *st, dcp_meta *m,
                                    const dcpi_saved_source *src, bool *possible,
                                    dcpi_err *err) {
  lbox *boxes = NULL;
  int64_t *pool = NULL;
  size_t nb = 0;
  dcpi_load_tensor *lt = malloc((st->ntensors ? st->ntensors : 1) * sizeof *lt);
  dcpi_load_chunk *lc = NULL;
  dcpi_load_plan *lp = NULL;
  *possible = false;
  dcp_status rc = lt ? layout_boxes(st, &boxes, &nb, &pool, err)
                     : dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  if (!rc && !(lc = malloc((nb ? nb : 1) * sizeof *lc)))
    rc = dcpi_fail(err, DCP_ENOMEM, "read dedup: out of memory");
  if (!rc) {
    for (size_t t = 0; t < st->ntensors; t++)
      lt[t] = (dcpi_load_tensor){st->tensors[t].fqn, st->tensors[t].dtype, st->tensors[t].ndim,
                                 st->tensors[t].shape};
    for (size_t i = 0; i < nb; i++) lc[i] = (dcpi_load_chunk){boxes[i].t, boxes[i].off, boxes[i].sz};
    rc = dcpi_load_plan_build(lt, st->ntensors, lc, nb, src, &lp, err);
  }
  if (!rc) rc = ranges_overlap(st, m, lp, boxes, possible, err);
  dcpi_load_plan_free(lp);
  free(lt), free(lc), free(boxes), free(pool);
  return rc;
}
