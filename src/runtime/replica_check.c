/* replica_check.c — compare every holder's copy of each replicated box
 * (replica_check.h). The exchange: every rank sends rank 0 its hash list
 * (u64 chunk count, then one xxh3-64 per chunk of its local plan in
 * canonical order, then one per bytes item: 8 bytes per holding), rank 0
 * compares per write item of the global plan and broadcasts a fixed-size
 * verdict (status, counts, message). Nothing else crosses the wire. */
#include "runtime/replica_check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "base/checked.h"
#include "base/sized.h"
#include "core/ctx.h"
#include "model/state.h"
#include "runtime/plan_cache.h"
#include "runtime/rt.h"

static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* This rank's hash list; *hashed gets the bytes hashed. NULL: no memory. */
static uint8_t *hash_list(const dcp_state *st, const dcpi_local_plan *lp, size_t *len,
                          uint64_t *hashed) {
  size_t nc = dcpi_local_plan_chunk_count(lp), nb = dcpi_local_plan_bytes_count(lp);
  *len = 8 * (1 + nc + nb);
  uint8_t *out = malloc(*len);
  if (!out) return NULL;
  put_u64(out, nc);
  *hashed = 0;
  for (size_t c = 0; c < nc; c++) {
    dcpi_lp_chunk_view cv;
    uint64_t h = 0;
    if (!dcpi_local_plan_chunk(lp, c, &cv)) {
      const dcpi_chunk_item *ci = &st->chunks[cv.source];
      size_t n = ci->data ? (size_t)ci->nbytes : 0;
      h = XXH3_64bits(ci->data, n);
      *hashed += n;
    }
    put_u64(out + 8 * (1 + c), h);
  }
  for (size_t b = 0; b < nb; b++) {
    dcpi_lp_bytes_view bv;
    uint64_t h = 0;
    if (!dcpi_local_plan_bytes(lp, b, &bv)) {
      const dcpi_bytes_item *bi = &st->bytes[bv.source];
      h = XXH3_64bits(bi->data, bi->data ? bi->len : 0);
      *hashed += bi->data ? bi->len : 0;
    }
    put_u64(out + 8 * (1 + nc + b), h);
  }
  return out;
}

/* ---- rank 0: the comparison ---------------------------------------------- */

typedef struct lists {
  const uint8_t *all;
  const size_t *lens;
  size_t *starts; /* world: offset of each rank's list in all */
  int32_t world;
} lists;

/* Holder rank's hash of its chunk (bytes: its bytes item) `idx`. */
static bool hash_of(const lists *l, int32_t rank, uint32_t idx, bool bytes, uint64_t *h) {
  if (rank < 0 || rank >= l->world || l->lens[rank] < 8) return false;
  const uint8_t *p = l->all + l->starts[rank];
  uint64_t nc = get_u64(p), n = l->lens[rank] / 8 - 1;
  if (nc > n) return false;
  uint64_t at = bytes ? nc + idx : idx;
  if ((bytes ? n - nc : nc) <= idx) return false;
  *h = get_u64(p + 8 * (1 + at));
  return true;
}

typedef struct copy {
  uint64_t hash;
  int32_t rank;
} copy;

static int by_hash_rank(const void *a, const void *b) {
  const copy *x = a, *y = b;
  if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Append to buf (cap, at *len) without overflowing it. */
__attribute__((format(printf, 4, 5))) static void add(char *buf, size_t cap, size_t *len,
                                                      const char *fmt, ...) {
  if (*len + 1 >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

/* The ranks of copies [a, b) (sorted by rank within a hash run), at most 8. */
static void add_ranks(char *buf, size_t cap, size_t *len, const copy *c, size_t a, size_t b) {
  add(buf, cap, len, b - a == 1 ? "rank " : "ranks ");
  for (size_t k = a; k < b && k < a + 8; k++) add(buf, cap, len, "%s%d", k > a ? "," : "", c[k].rank);
  if (b - a > 8) add(buf, cap, len, " and %zu more", b - a - 8);
}

/* Describe one mismatch (copies sorted by hash, then rank) into buf:
 * what (fqn and box, or key), then each distinct copy's ranks and hash,
 * the majority first when one copy is held by more than half. */
static void describe(char *buf, size_t cap, const char *what, copy *c, size_t n) {
  size_t len = 0;
  /* the runs of equal hashes; the longest one is the candidate majority */
  size_t best = 0, best_n = 0;
  for (size_t a = 0; a < n;) {
    size_t b = a;
    while (b < n && c[b].hash == c[a].hash) b++;
    if (b - a > best_n) best = a, best_n = b - a;
    a = b;
  }
  add(buf, cap, &len, "replica mismatch in %s: ", what);
  if (n >= 3 && 2 * best_n > n) {
    add_ranks(buf, cap, &len, c, best, best + best_n);
    add(buf, cap, &len, " hold the majority copy (xxh3 %016llx, %zu of %zu holders); differing: ",
        (unsigned long long)c[best].hash, best_n, n);
  } else {
    add(buf, cap, &len, "%zu holders, %s: ", n,
        n == 2 ? "no majority of two, either copy may be the bad one" : "no majority copy");
  }
  bool first = true;
  for (size_t a = 0, shown = 0; a < n && shown < 4;) {
    size_t b = a;
    while (b < n && c[b].hash == c[a].hash) b++;
    if (!(n >= 3 && 2 * best_n > n && a == best)) {
      add(buf, cap, &len, "%s", first ? "" : "; ");
      add_ranks(buf, cap, &len, c, a, b);
      add(buf, cap, &len, " (xxh3 %016llx)", (unsigned long long)c[a].hash);
      first = false;
      shown++;
    }
    a = b;
  }
}

/* "'fqn' box [o:e, ...]" into buf. */
static void name_box(char *buf, size_t cap, const dcpi_gp_tensor *t, const dcpi_gp_item *it) {
  size_t len = 0;
  int flen = t->fqn_len > 200 ? 200 : (int)t->fqn_len;
  add(buf, cap, &len, "'%.*s%s' box [", flen, t->fqn, t->fqn_len > 200 ? "..." : "");
  for (uint32_t d = 0; d < it->ndim; d++)
    add(buf, cap, &len, "%s%lld:%lld", d ? ", " : "", (long long)it->offset[d],
        (long long)(it->offset[d] + it->size[d]));
  add(buf, cap, &len, "]");
}

typedef struct verdict {
  int64_t status;
  uint64_t checked, mismatches;
  char message[DCP_VERIFY_MSG_MAX];
} verdict;

/* Compare one item's copies: false with *bad set when a holder's hash is
 * missing from its list (a malformed list). */
static bool compare(const lists *l, uint32_t n, const int32_t *holders, const uint32_t *idx,
                    bool bytes, copy *c, bool *differ, int32_t *bad) {
  *differ = false;
  for (uint32_t k = 0; k < n; k++) {
    if (!hash_of(l, holders[k], idx[k], bytes, &c[k].hash)) {
      *bad = holders[k];
      return false;
    }
    c[k].rank = holders[k];
    if (k && c[k].hash != c[0].hash) *differ = true;
  }
  if (*differ) dcpi_sort(c, n, sizeof *c, by_hash_rank);
  return true;
}

static void judge(const dcpi_global_plan *gp, const lists *l, verdict *v) {
  copy *c = NULL;
  size_t ccap = 0;
  char what[300];
  int32_t bad = -1;
  size_t ni = dcpi_global_plan_item_count(gp), nb = dcpi_global_plan_bytes_count(gp);
  for (size_t i = 0; i < ni + nb && !v->status; i++) {
    const int32_t *holders;
    const uint32_t *idx;
    uint32_t n;
    dcpi_gp_item it;
    dcpi_gp_bytes b;
    bool bytes = i >= ni;
    if (!bytes) {
      dcpi_global_plan_item(gp, i, &it);
      if (it.piece && it.piece_offset) continue; /* the box's first piece stands for it */
      n = it.nholders, holders = it.holders, idx = it.holder_chunks;
    } else {
      dcpi_global_plan_bytes(gp, i - ni, &b);
      if (b.scope != DCP_SCOPE_REPLICATED) continue;
      n = b.nholders, holders = b.holders, idx = b.holder_items;
    }
    if (n < 2) continue;
    if (n > ccap) {
      copy *g = realloc(c, n * sizeof *c);
      if (!g) {
        v->status = DCP_ENOMEM;
        snprintf(v->message, sizeof v->message, "replica check: out of memory");
        break;
      }
      c = g, ccap = n;
    }
    bool differ;
    if (!compare(l, n, holders, idx, bytes, c, &differ, &bad)) {
      v->status = DCP_ECORRUPT;
      snprintf(v->message, sizeof v->message,
               "replica check: rank %d sent a malformed hash list", (int)bad);
      break;
    }
    v->checked++;
    if (!differ) continue;
    if (v->mismatches++) continue; /* the first one is described */
    if (!bytes) {
      dcpi_gp_tensor t;
      dcpi_global_plan_tensor(gp, it.tensor, &t);
      name_box(what, sizeof what, &t, &it);
    } else {
      int klen = b.key_len > 200 ? 200 : (int)b.key_len;
      snprintf(what, sizeof what, "replicated bytes item '%.*s%s'", klen, b.key,
               b.key_len > 200 ? "..." : "");
    }
    describe(v->message, sizeof v->message, what, c, n);
  }
  free(c);
  if (!v->status && v->mismatches > 1) {
    size_t len = strlen(v->message);
    add(v->message, sizeof v->message, &len, " (and %llu more replicated items differ)",
        (unsigned long long)(v->mismatches - 1));
  }
}

/* ---- the exchange --------------------------------------------------------- */

dcp_status dcpi_replica_check(dcpi_rt *rt, const dcp_state *st, const dcpi_local_plan *lp,
                              const dcpi_global_plan *gp, bool report_only,
                              dcp_replica_report *rep) {
  dcp_ctx *ctx = rt->ctx;
  uint64_t coll0 = ctx->stats.coll_bytes, hashed = 0;
  size_t len = 0;
  uint8_t *mine = hash_list(st, lp, &len, &hashed);
  /* a rank without memory for its list sends none: rank 0 names it */
  uint8_t *all = NULL;
  size_t *lens = NULL;
  dcp_status rc = dcpi_rt_gather_bytes(rt, mine, mine ? len : 0, 0, &all, &lens);
  free(mine);
  if (rc) return rc;
  verdict v = {0};
  if (ctx->rank == 0) {
    lists l = {all, lens, calloc((size_t)ctx->world_size, sizeof(size_t)), ctx->world_size};
    if (!l.starts || !gp) {
      v.status = DCP_ENOMEM;
      snprintf(v.message, sizeof v.message, "replica check: out of memory");
    } else {
      for (int32_t r = 1; r < l.world; r++) l.starts[r] = l.starts[r - 1] + lens[r - 1];
      judge(gp, &l, &v);
    }
    free(l.starts);
    if (!v.status && v.mismatches && !report_only) v.status = DCP_EREPLICA;
  }
  free(all);
  free(lens);
  rc = dcpi_rt_bcast(rt, &v, sizeof v, 0);
  if (rc) return rc;
  v.message[sizeof v.message - 1] = '\0';
  dcp_status verdict_s = (dcp_status)v.status;
  if (rep) {
    dcp_replica_report full = {.struct_size = sizeof full,
                               .status = verdict_s ? verdict_s
                                                   : v.mismatches ? DCP_EREPLICA : DCP_OK,
                               .boxes_checked = v.checked,
                               .mismatches = v.mismatches,
                               .hashed_bytes = hashed,
                               .exchange_bytes = ctx->stats.coll_bytes - coll0};
    memcpy(full.message, v.message, sizeof full.message);
    dcpi_sized_fill(rep, &full, sizeof full);
  }
  if (verdict_s) return dcpi_fail(&rt->err, verdict_s, "%s", v.message);
  return DCP_OK;
}

/* ---- dcp_check_replicas --------------------------------------------------- */

static dcp_status check(dcpi_rt *rt, dcp_state *st, uint32_t flags, dcp_replica_report *rep) {
  dcp_ctx *ctx = rt->ctx;
  dcpi_save_opts so;
  dcpi_save_opts_init(&so);
  dcpi_local_plan *lp = NULL;
  dcpi_global_plan *gp = NULL;
  uint8_t *enc = NULL, *all = NULL;
  size_t enc_len = 0, *lens = NULL;
  dcp_status rc = dcpi_local_plan_from_state(st, &so, &lp, &rt->err);
  if (!rc) rc = dcpi_local_plan_encode(lp, &enc, &enc_len, &rt->err);
  rc = dcpi_rt_agree(rt, rc);
  if (!rc) rc = dcpi_rt_gather_bytes(rt, enc, enc_len, 0, &all, &lens);
  free(enc);
  if (!rc) {
    dcp_status local = DCP_OK;
    if (ctx->rank == 0) local = dcpi_global_plan_from_encoded(all, lens, ctx->world_size, &gp,
                                                              &rt->err);
    rc = dcpi_rt_agree(rt, local);
  }
  free(all);
  free(lens);
  if (!rc) rc = dcpi_replica_check(rt, st, lp, gp, flags & DCP_CHECK_REPORT_ONLY, rep);
  dcpi_global_plan_free(gp);
  dcpi_local_plan_free(lp);
  return rc;
}

dcp_status dcp_check_replicas(dcp_ctx *ctx, dcp_state *st, uint32_t flags,
                              dcp_replica_report *report) {
  if (!ctx) return DCP_EINVAL;
  dcp_stats keep = ctx->stats; /* the last save's or load's, kept */
  dcpi_rt rt;
  dcpi_rt_begin(&rt, ctx, NULL);
  dcp_status rc = DCP_OK;
  if (report && report->struct_size < 4)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "check_replicas: report struct_size %u too small",
                  report->struct_size);
  else if (!st || st->ctx != ctx)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "check_replicas: the state is NULL or from another context");
  else if (flags & ~(uint32_t)DCP_CHECK_REPORT_ONLY)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "check_replicas: unknown flags 0x%x", flags);
  else if (!ctx->comm)
    rc = dcpi_fail(&rt.err, DCP_EINVAL, "check_replicas: a detached rank (no collective) has "
                  "no replicas to compare with");
  if (rc && ctx->comm) rc = dcpi_rt_agree(&rt, rc); /* the others fail too */
  if (!rc) rc = check(&rt, st, flags, report);
  if (rc && rc != DCP_EREPLICA && report && report->struct_size >= 4) {
    /* a failure before a verdict: the report says it too */
    dcp_replica_report full = {.struct_size = sizeof full, .status = rc};
    snprintf(full.message, sizeof full.message, "%s", rt.err.msg);
    dcpi_sized_fill(report, &full, sizeof full);
  }
  rc = dcpi_rt_end(&rt);
  ctx->stats = keep;
  return rc;
}
