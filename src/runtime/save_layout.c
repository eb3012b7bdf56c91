/* save_layout.c — the per-rank planning path of a save (save_layout.h).
 *
 * Offer (one per rank, gathered at rank 0): varint nmesh, then per mesh
 * the rank's tensors use (ascending key): u64 key (XXH3-64 of the mesh:
 * ndim, extents, ranks), u64 digest lo, hi (XXH3-128 of its tensors there
 * in fqn order: fqn, dtype, shape, tensor_map, flat, flat dims), u8
 * described; described (the rank is the mesh's first): varint ndim,
 * extents, ranks, varint ntensors, per tensor varint len, fqn, varint
 * dtype, varint ndim, extents, masks, varint flat (0: sharded, else 1 +
 * the flat dims); then the rank's bytes items (save_layout_bytes.h). Rank 0
 * recomputes each description's digest and checks
 * every member sent that digest under that key: then every member's
 * tensors on the mesh are exactly the described ones. */
#include "runtime/save_layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "model/box.h"
#include "model/layout.h"
#include "model/state.h"
#include "runtime/save_layout_bytes.h"

/* ---- every rank ---------------------------------------------------------- */

bool dcpi_save_layout_eligible(const dcp_state *st, const dcpi_local_plan *lp) {
  if (!st || !lp || !st->ntensors) return false;
  for (size_t i = 0; i < dcpi_local_plan_tensor_count(lp); i++) {
    dcpi_lp_tensor_view v;
    if (dcpi_local_plan_tensor(lp, i, &v) || !v.layout) return false;
  }
  for (size_t i = 0; i < st->ntensors; i++) {
    const dcpi_tensor_item *t = &st->tensors[i];
    const dcp_layout *l = t->layout ? t->layout : t->flat;
    if (!l || l->by_rank[l->nranks - 1].rank >= st->world_size) return false;
  }
  return true;
}

dcpi_layout_tensor *dcpi_save_layout_tensors(const dcp_state *st) {
  dcpi_layout_tensor *t = malloc((st->ntensors ? st->ntensors : 1) * sizeof *t);
  for (size_t i = 0; t && i < st->ntensors; i++) {
    const dcpi_tensor_item *ti = &st->tensors[i];
    t[i] = (dcpi_layout_tensor){.fqn = ti->fqn, .fqn_len = ti->fqn_len, .dtype = ti->dtype,
                                .ndim = ti->ndim, .shape = ti->shape,
                                .layout = ti->layout ? ti->layout : ti->flat,
                                .flat = !ti->layout && ti->flat,
                                .flat_dims = ti->layout ? 0 : ti->flat_dims};
  }
  return t;
}

uint64_t dcpi_layout_mesh_key(const dcp_layout *l) {
  XXH3_state_t *s = XXH3_createState();
  if (!s) return 0;
  XXH3_64bits_reset(s);
  uint64_t nd = l->mesh_ndim;
  XXH3_64bits_update(s, &nd, sizeof nd);
  XXH3_64bits_update(s, l->mesh_shape, l->mesh_ndim * sizeof *l->mesh_shape);
  XXH3_64bits_update(s, l->ranks, (size_t)l->nranks * sizeof *l->ranks);
  uint64_t k = XXH3_64bits_digest(s);
  XXH3_freeState(s);
  return k;
}

XXH128_hash_t dcpi_layout_digest(const dcpi_layout_tensor *const *ts, size_t n,
                                 const dcpi_save_opts *opts) {
  XXH3_state_t *s = XXH3_createState();
  XXH128_hash_t h = {0, 0};
  if (!s) return h;
  XXH3_128bits_reset(s);
  uint64_t o[2] = {(uint64_t)opts->policy, opts->block_size}; /* they shape the split */
  XXH3_128bits_update(s, o, sizeof o);
  for (size_t i = 0; i < n; i++) {
    const dcpi_layout_tensor *t = ts[i];
    uint64_t w[5] = {t->fqn_len, (uint64_t)t->dtype, t->ndim, t->flat, t->flat_dims};
    XXH3_128bits_update(s, w, sizeof w);
    XXH3_128bits_update(s, t->fqn, t->fqn_len);
    XXH3_128bits_update(s, t->shape, t->ndim * sizeof *t->shape);
    XXH3_128bits_update(s, t->layout->tensor_map, t->ndim * sizeof *t->layout->tensor_map);
  }
  h = XXH3_128bits_digest(s);
  XXH3_freeState(s);
  return h;
}

typedef struct keyed {
  uint64_t key;
  const dcpi_layout_tensor *t;
} keyed;

static int cmp_keyed(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  size_t n = a->t->fqn_len < b->t->fqn_len ? a->t->fqn_len : b->t->fqn_len;
  int c = memcmp(a->t->fqn, b->t->fqn, n);
  return c ? c : (a->t->fqn_len > b->t->fqn_len) - (a->t->fqn_len < b->t->fqn_len);
}

static void put_description(dcpi_wbuf *w, const dcpi_layout_tensor *const *ts, size_t n) {
  const dcp_layout *l = ts[0]->layout;
  dcpi_w_varint(w, l->mesh_ndim);
  for (uint32_t m = 0; m < l->mesh_ndim; m++) dcpi_w_varint(w, (uint64_t)l->mesh_shape[m]);
  for (int64_t p = 0; p < l->nranks; p++) dcpi_w_varint(w, (uint64_t)l->ranks[p]);
  dcpi_w_varint(w, n);
  for (size_t i = 0; i < n; i++) {
    const dcpi_layout_tensor *t = ts[i];
    dcpi_w_varint(w, t->fqn_len);
    dcpi_w_bytes(w, t->fqn, t->fqn_len);
    dcpi_w_varint(w, (uint64_t)t->dtype);
    dcpi_w_varint(w, t->ndim);
    for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, (uint64_t)t->shape[d]);
    for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, t->layout->tensor_map[d]);
    dcpi_w_varint(w, t->flat ? 1 + (uint64_t)t->flat_dims : 0);
  }
}

/* One mesh of the offer: the run ks[0..n) of one key. */
static void put_mesh(dcpi_wbuf *w, const keyed *ks, size_t n, int32_t rank,
                     const dcpi_save_opts *opts) {
  const dcpi_layout_tensor **ts = malloc(n * sizeof *ts);
  if (!ts) {
    w->status = DCP_ENOMEM;
    return;
  }
  for (size_t i = 0; i < n; i++) ts[i] = ks[i].t;
  XXH128_hash_t h = dcpi_layout_digest(ts, n, opts);
  bool first = ts[0]->layout->ranks[0] == rank;
  dcpi_w_u64(w, ks[0].key);
  dcpi_w_u64(w, h.low64);
  dcpi_w_u64(w, h.high64);
  dcpi_w_u8(w, first);
  if (first) put_description(w, ts, n);
  free(ts);
}

void dcpi_save_layout_offer(const dcp_state *st, const dcpi_save_opts *opts, dcpi_wbuf *out) {
  dcpi_layout_tensor *t = dcpi_save_layout_tensors(st);
  keyed *ks = malloc((st->ntensors ? st->ntensors : 1) * sizeof *ks);
  if (!t || !ks) {
    free(t), free(ks);
    out->status = DCP_ENOMEM;
    return;
  }
  for (size_t i = 0; i < st->ntensors; i++) ks[i] = (keyed){dcpi_layout_mesh_key(t[i].layout), &t[i]};
  dcpi_sort(ks, st->ntensors, sizeof *ks, cmp_keyed);
  size_t nmesh = 0;
  for (size_t i = 0; i < st->ntensors; i++) nmesh += i == 0 || ks[i].key != ks[i - 1].key;
  dcpi_w_varint(out, nmesh);
  for (size_t i = 0, j; i < st->ntensors; i = j) {
    for (j = i + 1; j < st->ntensors && ks[j].key == ks[i].key; j++) {}
    put_mesh(out, ks + i, j - i, st->rank, opts);
  }
  dcpi_lbytes_put_offer(st, out);
  free(t), free(ks);
}

uint64_t dcpi_layout_piece_key(uint32_t ndim, const int64_t *shape, const int64_t *off) {
  uint64_t lin = 0;
  for (uint32_t d = 0; d < ndim; d++) lin = lin * (uint64_t)shape[d] + (uint64_t)off[d];
  return lin;
}
