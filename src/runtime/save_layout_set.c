/* save_layout_set.c — rank 0's side of the per-rank planning path
 * (save_layout.h): decode every rank's offer, check that every member of
 * every mesh agrees with the mesh's description and that no tensor is on
 * two meshes, count the pieces each tensor's layout gives, and at the
 * commit find each reported piece from its offset and account for every
 * piece exactly once (a bit per slot; no table of pieces). Every offer is a peer's
 * message: nothing in it is trusted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/checked.h"
#include "base/strmap.h"
#include "model/box.h"
#include "model/layout.h"
#include "model/state.h"
#include "runtime/save_layout.h"
#include "runtime/save_layout_bytes.h"

typedef struct ls_mesh {
  uint64_t key, dlo, dhi; /* as described */
  int32_t describer;
  dcp_layout *layout; /* the mesh (tensor ndim 0) */
  uint32_t md_id;
  int64_t members; /* member entries seen */
} ls_mesh;

typedef struct ls_tensor {
  char *fqn;
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim, mesh, tid;
  int64_t shape[DCP_MAX_NDIM];
  uint32_t map[DCP_MAX_NDIM];
  bool flat;
  uint32_t flat_dims;
  dcpi_piece_space space; /* its pieces, found by offset */
  uint64_t seen_at;       /* its slots' first bit in seen */
  uint64_t npieces, taken;
} ls_tensor;

typedef struct ls_keyidx {
  uint64_t key;
  uint32_t mesh;
} ls_keyidx;

typedef struct ls_entry {
  int32_t rank;
  uint64_t key, dlo, dhi;
} ls_entry;

struct dcpi_layout_set {
  int32_t world;
  const dcpi_save_opts *opts; /* rank 0's, while building */
  ls_mesh *meshes;
  size_t nmeshes, meshes_cap;
  ls_tensor *tensors;
  size_t ntensors, tensors_cap;
  ls_entry *entries;
  size_t nentries, entries_cap;
  ls_keyidx *by_key; /* nmeshes: mesh indices in key order */
  uint64_t *seen;    /* a bit per slot of every tensor: taken */
  dcpi_strmap names; /* fqn → tensor index (keys borrowed from tensors) */
  dcpi_lbytes bytes; /* every rank's bytes items */
};

void dcpi_layout_set_free(dcpi_layout_set *ls) {
  if (!ls) return;
  for (size_t m = 0; m < ls->nmeshes; m++) dcp_layout_free(ls->meshes[m].layout);
  for (size_t t = 0; t < ls->ntensors; t++) free(ls->tensors[t].fqn);
  dcpi_strmap_free(&ls->names);
  dcpi_lbytes_free(&ls->bytes);
  free(ls->meshes), free(ls->by_key), free(ls->tensors), free(ls->entries), free(ls->seen);
  free(ls);
}

#define OOM(err) dcpi_fail(err, DCP_ENOMEM, "layout plan: out of memory")
#define BAD(err, r) dcpi_fail(err, DCP_ECORRUPT, "malformed layout offer from rank %d", (int)(r))

/* "[2, 2] of ranks 0, 1, 2, 3" (up to 8 ranks) into buf. */
static const char *mesh_str(const dcp_layout *l, char *buf, size_t cap) {
  char s[128];
  int n = snprintf(buf, cap, "%s of ranks", dcpi_shape_str(l->mesh_ndim, l->mesh_shape, s, sizeof s));
  for (int64_t p = 0; p < l->nranks && p < 8 && n > 0 && (size_t)n < cap; p++)
    n += snprintf(buf + n, cap - (size_t)n, "%s %d", p ? "," : "", l->ranks[p]);
  if (l->nranks > 8 && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, ", ...");
  return buf;
}

/* ---- decoding ------------------------------------------------------------ */

static bool get_small(dcpi_rbuf *r, uint64_t max, uint64_t *v) {
  return dcpi_r_varint(r, v) && *v <= max;
}

static dcp_status read_mesh(dcpi_rbuf *r, int32_t rank, int32_t world, dcp_layout **out,
                            dcpi_err *err) {
  uint64_t nd, v;
  int64_t shape[DCP_MAX_MESH_NDIM], n = 1;
  if (!get_small(r, DCP_MAX_MESH_NDIM, &nd) || nd < 1) return BAD(err, rank);
  for (uint64_t m = 0; m < nd; m++) {
    if (!get_small(r, (uint64_t)world, &v) || v < 1) return BAD(err, rank);
    shape[m] = (int64_t)v;
    if (!dcpi_mul_i64(n, shape[m], &n) || n > world) return BAD(err, rank);
  }
  int32_t *ranks = malloc((size_t)n * sizeof *ranks);
  if (!ranks) return OOM(err);
  bool ok = true;
  for (int64_t p = 0; ok && p < n; p++) {
    ok = get_small(r, (uint64_t)world - 1, &v);
    ranks[p] = (int32_t)v;
  }
  dcp_status rc = ok ? dcpi_layout_create((uint32_t)nd, shape, ranks, 0, NULL, out, err)
                     : BAD(err, rank);
  free(ranks);
  return rc == DCP_ENOMEM ? rc : rc ? BAD(err, rank) : DCP_OK;
}

static dcp_status read_tensor(dcpi_layout_set *ls, dcpi_rbuf *r, int32_t rank, uint32_t mesh,
                              dcpi_err *err) {
  uint64_t len, dt, nd, v;
  if (!get_small(r, DCP_MAX_NAME, &len) || len > dcpi_r_left(r)) return BAD(err, rank);
  if (DCPI_RESERVE(ls->tensors, ls->tensors_cap, ls->ntensors + 1)) return OOM(err);
  ls_tensor *t = &ls->tensors[ls->ntensors];
  *t = (ls_tensor){.fqn = malloc((size_t)len + 1), .fqn_len = (size_t)len, .mesh = mesh};
  if (!t->fqn) return OOM(err);
  ls->ntensors++;
  memcpy(t->fqn, r->p + r->pos, (size_t)len);
  t->fqn[len] = 0;
  r->pos += (size_t)len;
  if (!get_small(r, DCP_DTYPE_END_ - 1, &dt) || !get_small(r, DCP_MAX_NDIM, &nd))
    return BAD(err, rank);
  t->dtype = (dcp_dtype)dt, t->ndim = (uint32_t)nd;
  for (uint32_t d = 0; d < t->ndim; d++) {
    if (!get_small(r, INT64_MAX, &v)) return BAD(err, rank);
    t->shape[d] = (int64_t)v;
  }
  for (uint32_t d = 0; d < t->ndim; d++) {
    if (!get_small(r, UINT32_MAX, &v)) return BAD(err, rank);
    t->map[d] = (uint32_t)v;
  }
  if (!get_small(r, (uint64_t)UINT32_MAX + 1, &v)) return BAD(err, rank);
  t->flat = v > 0;
  t->flat_dims = v > 0 ? (uint32_t)(v - 1) : 0;
  dcp_status rc = dcpi_check_tensor_decl(t->fqn, t->dtype, t->ndim, t->shape, err);
  const dcp_layout *mesh_l = ls->meshes[mesh].layout;
  if (!rc) rc = dcpi_layout_check_map(mesh_l->mesh_ndim, t->ndim, t->map, err);
  if (!rc && t->flat) {
    /* the flat dims must be the resolved ones: existing, sharding nothing */
    dcp_layout view = *mesh_l;
    view.tensor_ndim = t->ndim;
    memcpy(view.tensor_map, t->map, t->ndim * sizeof *t->map);
    uint32_t dims;
    if (dcpi_layout_flat_dims(&view, t->flat_dims, &dims, NULL) || dims != t->flat_dims)
      return BAD(err, rank);
  }
  return rc;
}

/* A tensor of ls as a planner layout tensor; view receives its layout
 * (the mesh's, with the tensor's map; arrays borrowed from the mesh). */
static dcpi_layout_tensor as_layout_tensor(const dcpi_layout_set *ls, const ls_tensor *t,
                                           dcp_layout *view) {
  *view = *ls->meshes[t->mesh].layout;
  view->tensor_ndim = t->ndim;
  memcpy(view->tensor_map, t->map, t->ndim * sizeof *t->map);
  return (dcpi_layout_tensor){.fqn = t->fqn, .fqn_len = t->fqn_len, .dtype = t->dtype,
                              .ndim = t->ndim, .shape = t->shape, .layout = view,
                              .flat = t->flat, .flat_dims = t->flat_dims};
}

/* The description of a mesh by its first rank: mesh, tensors; its key
 * and digest must be what the rank sent. */
static dcp_status read_description(dcpi_layout_set *ls, dcpi_rbuf *r, int32_t rank,
                                   const ls_entry *e, dcpi_err *err) {
  char a[256];
  if (DCPI_RESERVE(ls->meshes, ls->meshes_cap, ls->nmeshes + 1)) return OOM(err);
  ls_mesh *m = &ls->meshes[ls->nmeshes];
  *m = (ls_mesh){.key = e->key, .dlo = e->dlo, .dhi = e->dhi, .describer = rank};
  dcp_status rc = read_mesh(r, rank, ls->world, &m->layout, err);
  if (rc) return rc;
  uint32_t mi = (uint32_t)ls->nmeshes++;
  uint64_t n;
  if (!get_small(r, dcpi_r_left(r), &n) || n == 0 || m->layout->ranks[0] != rank)
    return BAD(err, rank);
  size_t first = ls->ntensors;
  for (uint64_t i = 0; !rc && i < n; i++) rc = read_tensor(ls, r, rank, mi, err);
  if (rc) return rc;
  const dcpi_layout_tensor **ts = malloc((size_t)n * sizeof *ts);
  dcpi_layout_tensor *lt = malloc((size_t)n * sizeof *lt);
  dcp_layout *views = malloc((size_t)n * sizeof *views);
  if (!ts || !lt || !views) rc = OOM(err);
  for (size_t i = 0; !rc && i < n; i++) {
    lt[i] = as_layout_tensor(ls, &ls->tensors[first + i], &views[i]);
    ts[i] = &lt[i];
  }
  XXH128_hash_t h = {0, 0};
  if (!rc) h = dcpi_layout_digest(ts, (size_t)n, ls->opts);
  free(ts), free(lt), free(views);
  if (!rc && dcpi_layout_mesh_key(ls->meshes[mi].layout) != e->key) rc = BAD(err, rank);
  if (!rc && (h.low64 != e->dlo || h.high64 != e->dhi))
    rc = dcpi_fail(err, DCP_EMISMATCH,
                   "layout plan: mesh %s: rank %d saves with other options (policy or block "
                   "size) than rank 0 (nothing was written)",
                   mesh_str(ls->meshes[mi].layout, a, sizeof a), rank);
  return rc;
}

static dcp_status read_offer(dcpi_layout_set *ls, const uint8_t *msg, size_t len, int32_t rank,
                             dcpi_err *err) {
  dcpi_rbuf r = {msg, len, 0};
  uint64_t n;
  if (!get_small(&r, len, &n)) return BAD(err, rank);
  dcp_status rc = DCP_OK;
  uint64_t prev = 0;
  for (uint64_t i = 0; !rc && i < n; i++) {
    ls_entry e = {.rank = rank};
    uint8_t described;
    if (!dcpi_r_u64(&r, &e.key) || !dcpi_r_u64(&r, &e.dlo) || !dcpi_r_u64(&r, &e.dhi) ||
        !dcpi_r_u8(&r, &described) || described > 1 || (i && e.key <= prev))
      return BAD(err, rank); /* keys strictly ascending: one entry per mesh */
    prev = e.key;
    if (DCPI_RESERVE(ls->entries, ls->entries_cap, ls->nentries + 1)) return OOM(err);
    ls->entries[ls->nentries++] = e;
    if (described) rc = read_description(ls, &r, rank, &e, err);
  }
  if (!rc) rc = dcpi_lbytes_read(&ls->bytes, &r, rank, err);
  return rc ? rc : dcpi_r_left(&r) ? BAD(err, rank) : DCP_OK;
}

/* ---- agreement ----------------------------------------------------------- */

static ls_mesh *find_mesh(dcpi_layout_set *ls, uint64_t key) {
  size_t lo = 0, hi = ls->nmeshes;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ls->by_key[mid].key < key) lo = mid + 1;
    else hi = mid;
  }
  return lo < ls->nmeshes && ls->by_key[lo].key == key ? &ls->meshes[ls->by_key[lo].mesh] : NULL;
}

static int cmp_keyidx(const void *pa, const void *pb) {
  const ls_keyidx *a = pa, *b = pb;
  return (a->key > b->key) - (a->key < b->key);
}

/* The key index of the meshes; two descriptions of one key are corrupt. */
static dcp_status index_meshes(dcpi_layout_set *ls, dcpi_err *err) {
  ls->by_key = malloc((ls->nmeshes ? ls->nmeshes : 1) * sizeof *ls->by_key);
  if (!ls->by_key) return OOM(err);
  for (size_t m = 0; m < ls->nmeshes; m++)
    ls->by_key[m] = (ls_keyidx){ls->meshes[m].key, (uint32_t)m};
  dcpi_sort(ls->by_key, ls->nmeshes, sizeof *ls->by_key, cmp_keyidx);
  for (size_t m = 1; m < ls->nmeshes; m++)
    if (ls->by_key[m].key == ls->by_key[m - 1].key)
      return BAD(err, ls->meshes[ls->by_key[m].mesh].describer);
  return DCP_OK;
}

/* Every member entry names a described mesh that has the rank, with the
 * description's digest; every member of every mesh sent one. */
static dcp_status check_members(dcpi_layout_set *ls, dcpi_err *err) {
  char a[256];
  for (size_t i = 0; i < ls->nentries; i++) {
    const ls_entry *e = &ls->entries[i];
    ls_mesh *m = find_mesh(ls, e->key);
    if (!m)
      return dcpi_fail(err, DCP_EMISMATCH,
                       "layout plan: rank %d lays out tensors on a mesh whose first rank does "
                       "not lay out any tensor on it (the ranks disagree on a layout; nothing "
                       "was written)", e->rank);
    if (dcpi_layout_position(m->layout, e->rank) < 0) return BAD(err, e->rank);
    if (e->dlo != m->dlo || e->dhi != m->dhi)
      return dcpi_fail(err, DCP_EMISMATCH,
                       "layout plan: mesh %s: the layout tensors of rank %d differ from those "
                       "of rank %d (fqn, dtype, shape, tensor_map or save options; nothing was "
                       "written)",
                       mesh_str(m->layout, a, sizeof a), e->rank, m->describer);
    m->members++;
  }
  for (size_t k = 0; k < ls->nmeshes; k++) {
    const ls_mesh *m = &ls->meshes[k];
    if (m->members == m->layout->nranks) continue;
    for (int64_t p = 0; p < m->layout->nranks; p++) {
      int32_t r = m->layout->ranks[p];
      bool sent = false;
      for (size_t i = 0; i < ls->nentries && !sent; i++)
        sent = ls->entries[i].rank == r && ls->entries[i].key == m->key;
      if (!sent)
        return dcpi_fail(err, DCP_EMISMATCH,
                         "layout plan: mesh %s: rank %d has none of the tensors rank %d lays "
                         "out on it (nothing was written)",
                         mesh_str(m->layout, a, sizeof a), r, m->describer);
    }
  }
  return DCP_OK;
}

static int cmp_tensor(const void *pa, const void *pb) {
  const ls_tensor *a = pa, *b = pb;
  size_t n = a->fqn_len < b->fqn_len ? a->fqn_len : b->fqn_len;
  int c = memcmp(a->fqn, b->fqn, n);
  return c ? c : (a->fqn_len > b->fqn_len) - (a->fqn_len < b->fqn_len);
}

/* Tensors in fqn order, each on one mesh only; the name map. */
static dcp_status sort_tensors(dcpi_layout_set *ls, dcpi_err *err) {
  dcpi_sort(ls->tensors, ls->ntensors, sizeof *ls->tensors, cmp_tensor);
  for (size_t t = 0; t < ls->ntensors; t++) {
    const ls_tensor *x = &ls->tensors[t];
    if (t && !cmp_tensor(x - 1, x))
      return dcpi_fail(err, DCP_EMISMATCH,
                       "layout plan: tensor '%s' is laid out on two meshes (one of rank %d, "
                       "one of rank %d; nothing was written)", x->fqn,
                       ls->meshes[x[-1].mesh].describer, ls->meshes[x->mesh].describer);
    if (dcpi_strmap_put(&ls->names, x->fqn, x->fqn_len, (uint32_t)t, NULL) < 0) return OOM(err);
  }
  return DCP_OK;
}

/* ---- pieces -------------------------------------------------------------- */

/* Tensors whose pieces are alike: same dtype, shape, flat rule, mesh shape
 * and map (the pieces depend on the mesh's shape, not on its ranks). */
typedef struct ls_alike {
  const ls_tensor *t;
  const dcp_layout *mesh;
  uint32_t index;
} ls_alike;

static int cmp_alike(const void *pa, const void *pb) {
  const ls_alike *a = pa, *b = pb;
  const ls_tensor *x = a->t, *y = b->t;
  if (x->dtype != y->dtype) return x->dtype < y->dtype ? -1 : 1;
  if (x->ndim != y->ndim) return x->ndim < y->ndim ? -1 : 1;
  if (x->flat != y->flat) return x->flat < y->flat ? -1 : 1;
  if (x->flat_dims != y->flat_dims) return x->flat_dims < y->flat_dims ? -1 : 1;
  if (a->mesh->mesh_ndim != b->mesh->mesh_ndim) return a->mesh->mesh_ndim < b->mesh->mesh_ndim ? -1 : 1;
  int c = memcmp(x->shape, y->shape, x->ndim * sizeof *x->shape);
  if (!c) c = memcmp(x->map, y->map, x->ndim * sizeof *x->map);
  if (!c) c = memcmp(a->mesh->mesh_shape, b->mesh->mesh_shape, a->mesh->mesh_ndim * sizeof(int64_t));
  if (c) return c;
  return (a->index > b->index) - (a->index < b->index);
}

/* Every tensor's piece count, counted once per kind of tensor: a model's
 * layers repeat the same shapes on meshes of the same shape. */
static dcp_status count_pieces(dcpi_layout_set *ls, dcpi_err *err) {
  ls_alike *a = malloc((ls->ntensors ? ls->ntensors : 1) * sizeof *a);
  if (!a) return OOM(err);
  for (size_t i = 0; i < ls->ntensors; i++)
    a[i] = (ls_alike){&ls->tensors[i], ls->meshes[ls->tensors[i].mesh].layout, (uint32_t)i};
  dcpi_sort(a, ls->ntensors, sizeof *a, cmp_alike);
  for (size_t i = 0; i < ls->ntensors; i++) {
    ls_tensor *t = &ls->tensors[a[i].index];
    ls_alike x = a[i], prev = i ? a[i - 1] : x;
    prev.index = x.index;
    if (i && !cmp_alike(&prev, &x)) {
      t->npieces = ls->tensors[a[i - 1].index].npieces;
      continue;
    }
    dcp_layout view;
    dcpi_layout_tensor lt = as_layout_tensor(ls, t, &view);
    t->npieces = dcpi_piece_count(&t->space, &lt);
  }
  free(a);
  return DCP_OK;
}

/* Every tensor's piece space, a bit per slot, and its piece count. Nothing
 * is listed: the commit finds each reported piece from its offset. */
static dcp_status plan_pieces(dcpi_layout_set *ls, const dcpi_save_opts *opts, dcpi_err *err) {
  uint64_t bits = 0;
  for (size_t i = 0; i < ls->ntensors; i++) {
    ls_tensor *t = &ls->tensors[i];
    dcp_layout view;
    dcpi_layout_tensor lt = as_layout_tensor(ls, t, &view);
    dcp_status rc = dcpi_piece_space_init(&lt, ls->world, opts, &t->space, err);
    if (rc) return rc;
    t->seen_at = bits;
    if (t->space.nslots > UINT64_MAX - bits - 63) return OOM(err);
    bits += t->space.nslots;
  }
  if (bits / 64 + 1 > SIZE_MAX / sizeof *ls->seen) return OOM(err);
  ls->seen = calloc((size_t)(bits / 64 + 1), sizeof *ls->seen);
  if (!ls->seen) return OOM(err);
  return count_pieces(ls, err);
}

dcp_status dcpi_layout_set_build(const uint8_t *all, const size_t *lens, int32_t world,
                                 const dcpi_save_opts *opts, dcpi_layout_set **out,
                                 dcpi_err *err) {
  *out = NULL;
  dcpi_layout_set *ls = calloc(1, sizeof *ls);
  if (!ls) return OOM(err);
  ls->world = world;
  ls->opts = opts;
  dcp_status rc = DCP_OK;
  size_t at = 0;
  for (int32_t r = 0; !rc && r < world; at += lens[r], r++)
    rc = read_offer(ls, all + at, lens[r], r, err);
  if (!rc) rc = index_meshes(ls, err);
  if (!rc) rc = check_members(ls, err);
  if (!rc) rc = sort_tensors(ls, err);
  if (!rc) rc = dcpi_lbytes_settle(&ls->bytes, &ls->names, err);
  if (!rc) rc = plan_pieces(ls, opts, err);
  if (rc) {
    dcpi_layout_set_free(ls);
    return rc;
  }
  *out = ls;
  return DCP_OK;
}

/* ---- commit -------------------------------------------------------------- */

dcp_status dcpi_layout_set_add_tensors(dcpi_layout_set *ls, dcpi_md *md, dcpi_err *err) {
  dcp_status rc = DCP_OK;
  for (size_t m = 0; !rc && m < ls->nmeshes; m++) {
    const dcp_layout *l = ls->meshes[m].layout;
    rc = dcpi_md_intern_mesh(md, l->mesh_ndim, l->mesh_shape, l->ranks, &ls->meshes[m].md_id, err);
  }
  for (size_t i = 0; !rc && i < ls->ntensors; i++) {
    ls_tensor *t = &ls->tensors[i];
    rc = dcpi_md_add_tensor(md, t->fqn, t->dtype, t->ndim, t->shape,
                            (int32_t)ls->meshes[t->mesh].md_id, t->map, &t->tid, err);
  }
  return rc;
}

static bool seen_bit(const dcpi_layout_set *ls, uint64_t bit) {
  return ls->seen[bit / 64] >> (bit % 64) & 1;
}

dcp_status dcpi_layout_set_take(dcpi_layout_set *ls, dcpi_md *md, int32_t rank, const char *fqn,
                                size_t fqn_len, uint64_t key, const dcp_storage_ref *ref,
                                dcpi_err *err) {
  uint32_t ti;
  if (!dcpi_strmap_get(&ls->names, fqn, fqn_len, &ti))
    return dcpi_fail(err, DCP_ECORRUPT, "rank %d reported a piece of an unknown tensor", rank);
  ls_tensor *t = &ls->tensors[ti];
  dcp_layout view;
  dcpi_layout_tensor lt = as_layout_tensor(ls, t, &view);
  int64_t box[2 * DCP_MAX_NDIM], nbytes;
  uint64_t slot;
  if (!dcpi_piece_locate(&t->space, &lt, key, box, &nbytes, &slot) ||
      seen_bit(ls, t->seen_at + slot) || ref->raw_length != (uint64_t)nbytes)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "rank %d reported an unknown or repeated piece of tensor '%s'", rank, t->fqn);
  uint64_t bit = t->seen_at + slot;
  ls->seen[bit / 64] |= 1ull << (bit % 64);
  t->taken++;
  return dcpi_md_add_chunk(md, t->tid, box, box + t->ndim, ref, err);
}

void dcpi_layout_set_assignment(const dcpi_layout_set *ls, int32_t rank, dcpi_wbuf *out) {
  static const dcpi_lbytes none;
  dcpi_lbytes_assignment(ls ? &ls->bytes : &none, rank, ls != NULL, out);
}

dcp_status dcpi_layout_set_take_bytes(dcpi_layout_set *ls, dcpi_md *md, int32_t rank,
                                      uint64_t index, const dcp_storage_ref *ref, dcpi_err *err) {
  return dcpi_lbytes_take(&ls->bytes, md, rank, index, ref, err);
}

/* The first piece of a tensor that was not taken, for the message. */
typedef struct missing_walk {
  const dcpi_layout_set *ls;
  const ls_tensor *t;
  const dcpi_layout_tensor *lt;
  int64_t box[2 * DCP_MAX_NDIM];
} missing_walk;

static dcp_status on_missing(void *arg, const int64_t *box, int64_t nbytes, uint32_t piece,
                             uint32_t npieces) {
  (void)nbytes, (void)piece, (void)npieces;
  missing_walk *mw = arg;
  const ls_tensor *t = mw->t;
  int64_t found[2 * DCP_MAX_NDIM], fb;
  uint64_t slot;
  uint64_t key = dcpi_layout_piece_key(t->ndim, t->shape, box);
  if (dcpi_piece_locate(&t->space, mw->lt, key, found, &fb, &slot) &&
      seen_bit(mw->ls, t->seen_at + slot))
    return DCP_OK;
  memcpy(mw->box, box, 2 * t->ndim * sizeof *box);
  return DCP_EINCOMPLETE; /* stops the walk */
}

dcp_status dcpi_layout_set_complete(const dcpi_layout_set *ls, dcpi_err *err) {
  for (size_t i = 0; i < ls->ntensors; i++) {
    const ls_tensor *t = &ls->tensors[i];
    if (t->taken == t->npieces) continue; /* each taken once, each a piece: all of them */
    dcp_layout view;
    dcpi_layout_tensor lt = as_layout_tensor(ls, t, &view);
    missing_walk mw = {.ls = ls, .t = t, .lt = &lt};
    char b[256] = "?";
    if (dcpi_layout_pieces(&lt, ls->world, &t->space.opts, on_missing, &mw, NULL) ==
        DCP_EINCOMPLETE)
      dcpi_box_str(t->ndim, mw.box, mw.box + t->ndim, b, sizeof b);
    return dcpi_fail(err, DCP_EINCOMPLETE,
                     "tensor '%s': piece %s of its layout was not written (this save is not "
                     "committed)", t->fqn, b);
  }
  return dcpi_lbytes_complete(&ls->bytes, err);
}
