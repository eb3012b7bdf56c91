/* local_plan.c — building a rank's local save plan, item by item or from a
 * dcp_state, and putting it in canonical order. */
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "model/box.h"
#include "model/state.h"
#include "planner/local_plan_int.h"

/* ---- options ----------------------------------------------------------- */

void dcpi_save_opts_init(dcpi_save_opts *opts) {
  *opts = (dcpi_save_opts){.policy = DCPI_BALANCE_LEAST_LOADED,
                           .flags = 0,
                           .block_size = DCPI_SAVE_DEFAULT_BLOCK_SIZE};
}

dcp_status dcpi_save_opts_check(const dcpi_save_opts *opts, dcpi_err *err) {
  if (!opts) return dcpi_fail(err, DCP_EINVAL, "save options are NULL");
  if (opts->policy != DCPI_BALANCE_LEAST_LOADED && opts->policy != DCPI_BALANCE_LOWEST_RANK)
    return dcpi_fail(err, DCP_EINVAL, "save options: unknown policy %d", (int)opts->policy);
  if (opts->block_size == 0) return dcpi_fail(err, DCP_EINVAL, "save options: block size 0");
  return DCP_OK;
}

bool dcpi_save_opts_equal(const dcpi_save_opts *a, const dcpi_save_opts *b) {
  return a->policy == b->policy && a->flags == b->flags && a->block_size == b->block_size;
}

/* ---- create / free ----------------------------------------------------- */

dcp_status dcpi_local_plan_create(int32_t rank, int32_t world_size, const dcpi_save_opts *opts,
                                  dcpi_local_plan **out, dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "local plan: out is NULL");
  *out = NULL;
  if (world_size < 1 || rank < 0 || rank >= world_size)
    return dcpi_fail(err, DCP_EINVAL, "local plan: rank %d out of range for world size %d",
                     rank, world_size);
  dcpi_save_opts o;
  dcpi_save_opts_init(&o);
  if (opts) o = *opts;
  dcp_status rc = dcpi_save_opts_check(&o, err);
  if (rc) return rc;
  dcpi_local_plan *lp = calloc(1, sizeof *lp);
  if (!lp) return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory");
  lp->rank = rank;
  lp->world_size = world_size;
  lp->opts = o;
  *out = lp;
  return DCP_OK;
}

void dcpi_local_plan_free(dcpi_local_plan *lp) {
  if (!lp) return;
  free(lp->names);
  free(lp->pool);
  free(lp->tensors);
  free(lp->bytes);
  free(lp->pending);
  free(lp->chunk_tensor);
  free(lp->chunk_source);
  free(lp);
}

/* ---- adding items ------------------------------------------------------ */

/* Copy name (len bytes) and a NUL into the names pool; *at gets its offset. */
static dcp_status push_name(dcpi_local_plan *lp, const char *name, size_t len, uint64_t *at,
                            dcpi_err *err) {
  if (DCPI_RESERVE(lp->names, lp->names_cap, lp->names_len + len + 1))
    return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory for '%s'", name);
  memcpy(lp->names + lp->names_len, name, len + 1);
  *at = lp->names_len;
  lp->names_len += len + 1;
  return DCP_OK;
}

/* Append n int64 values to the pool; *at gets their index. */
static dcp_status push_i64(dcpi_local_plan *lp, const int64_t *v, size_t n, uint64_t *at,
                           dcpi_err *err) {
  /* One spare element keeps the pool allocated even when every tensor is
   * 0-d, so pointer arithmetic on it is always defined. */
  if (DCPI_RESERVE(lp->pool, lp->pool_cap, lp->pool_len + n + 1))
    return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory for boxes");
  if (n) memcpy(lp->pool + lp->pool_len, v, n * sizeof *v);
  *at = lp->pool_len;
  lp->pool_len += n;
  return DCP_OK;
}

static dcp_status check_open(const dcpi_local_plan *lp, dcpi_err *err) {
  if (!lp) return dcpi_fail(err, DCP_EINVAL, "local plan is NULL");
  if (lp->finished) return dcpi_fail(err, DCP_EINVAL, "local plan is already finished");
  return DCP_OK;
}

dcp_status dcpi_local_plan_add_tensor(dcpi_local_plan *lp, const char *fqn, dcp_dtype dtype,
                                      uint32_t ndim, const int64_t *shape, uint32_t *index,
                                      dcpi_err *err) {
  dcp_status rc = check_open(lp, err);
  if (rc || (rc = dcpi_check_tensor_decl(fqn, dtype, ndim, shape, err))) return rc;
  if (lp->ntensors >= UINT32_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "local plan: too many tensors");
  if (DCPI_RESERVE(lp->tensors, lp->tensors_cap, lp->ntensors + 1))
    return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory for '%s'", fqn);
  dcpi_lp_tensor t = {.dtype = (uint32_t)dtype, .ndim = ndim, .name_len = (uint32_t)strlen(fqn)};
  if ((rc = push_name(lp, fqn, t.name_len, &t.name_at, err)) ||
      (rc = push_i64(lp, shape, ndim, &t.shape_at, err)))
    return rc;
  if (index) *index = (uint32_t)lp->ntensors;
  lp->tensors[lp->ntensors++] = t;
  return DCP_OK;
}

dcp_status dcpi_local_plan_mark_layout(dcpi_local_plan *lp, uint32_t index, dcpi_err *err) {
  dcp_status rc = check_open(lp, err);
  if (rc) return rc;
  if (index >= lp->ntensors)
    return dcpi_fail(err, DCP_ENOTFOUND, "local plan: no tensor with index %u", index);
  lp->tensors[index].layout = 1;
  return DCP_OK;
}

dcp_status dcpi_local_plan_add_chunk(dcpi_local_plan *lp, uint32_t index, const int64_t *offset,
                                     const int64_t *size, dcpi_err *err) {
  dcp_status rc = check_open(lp, err);
  if (rc) return rc;
  if (index >= lp->ntensors)
    return dcpi_fail(err, DCP_ENOTFOUND, "local plan: no tensor with index %u", index);
  uint32_t nd = lp->tensors[index].ndim;
  if (nd && (!offset || !size))
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': chunk offset or size is NULL",
                     lp->names + lp->tensors[index].name_at);
  if (lp->nchunks >= UINT32_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "local plan: too many chunks");
  if (DCPI_RESERVE(lp->pending, lp->pending_cap, lp->nchunks + 1))
    return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory for chunks");
  dcpi_lp_pending p = {.tensor = index};
  uint64_t at2;
  if ((rc = push_i64(lp, offset, nd, &p.box_at, err)) || (rc = push_i64(lp, size, nd, &at2, err)))
    return rc;
  lp->pending[lp->nchunks++] = p;
  return DCP_OK;
}

dcp_status dcpi_local_plan_add_bytes(dcpi_local_plan *lp, const char *key, dcp_scope scope,
                                     int64_t length, dcpi_err *err) {
  dcp_status rc = check_open(lp, err);
  if (rc || (rc = dcpi_check_name(key, "bytes key", err))) return rc;
  if (scope != DCP_SCOPE_REPLICATED && scope != DCP_SCOPE_PER_RANK)
    return dcpi_fail(err, DCP_EINVAL, "bytes '%s': invalid scope %d", key, (int)scope);
  if (length < 0)
    return dcpi_fail(err, DCP_EINVAL, "bytes '%s': negative length %lld", key,
                     (long long)length);
  if (lp->nbytes >= UINT32_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "local plan: too many bytes items");
  if (DCPI_RESERVE(lp->bytes, lp->bytes_cap, lp->nbytes + 1))
    return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory for '%s'", key);
  dcpi_lp_bytes b = {.scope = (uint32_t)scope, .length = length,
                     .name_len = (uint32_t)strlen(key), .source = (uint32_t)lp->nbytes};
  if ((rc = push_name(lp, key, b.name_len, &b.name_at, err))) return rc;
  lp->bytes[lp->nbytes++] = b;
  return DCP_OK;
}

/* ---- finish: canonical order ------------------------------------------- */

typedef struct name_ref {
  const char *name;
  uint32_t len;
  uint32_t index;
} name_ref;

/* Bytewise order of NUL-free strings (a prefix sorts first). */
static int cmp_names(const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  if (c) return c;
  return alen < blen ? -1 : alen > blen;
}

static int cmp_name_ref(const void *pa, const void *pb) {
  const name_ref *a = pa, *b = pb;
  return cmp_names(a->name, a->len, b->name, b->len);
}

/* The names of the tensors (or bytes items) as refs sorted bytewise; a name
 * declared twice fails with DCP_EEXIST. Caller frees *out. */
static dcp_status sorted_names(const dcpi_local_plan *lp, bool tensors, name_ref **out,
                               dcpi_err *err) {
  size_t n = tensors ? lp->ntensors : lp->nbytes;
  name_ref *r = malloc((n ? n : 1) * sizeof *r);
  if (!r) return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory sorting names");
  for (size_t i = 0; i < n; i++) {
    uint64_t at = tensors ? lp->tensors[i].name_at : lp->bytes[i].name_at;
    uint32_t len = tensors ? lp->tensors[i].name_len : lp->bytes[i].name_len;
    r[i] = (name_ref){lp->names + at, len, (uint32_t)i};
  }
  dcpi_sort(r, n, sizeof *r, cmp_name_ref);
  for (size_t i = 1; i < n; i++)
    if (!cmp_name_ref(&r[i - 1], &r[i])) {
      dcpi_fail(err, DCP_EEXIST, "local plan of rank %d: '%s' is declared twice", lp->rank,
                r[i].name);
      free(r);
      return DCP_EEXIST;
    }
  *out = r;
  return DCP_OK;
}

/* Tensors and bytes items share one namespace: a merge of the two sorted
 * lists finds a name in both. */
static dcp_status check_cross_names(const dcpi_local_plan *lp, const name_ref *t,
                                    const name_ref *b, dcpi_err *err) {
  size_t i = 0, j = 0;
  while (i < lp->ntensors && j < lp->nbytes) {
    int c = cmp_name_ref(&t[i], &b[j]);
    if (!c)
      return dcpi_fail(err, DCP_EEXIST,
                       "local plan of rank %d: '%s' is both a tensor and a bytes item",
                       lp->rank, t[i].name);
    if (c < 0) i++;
    else j++;
  }
  return DCP_OK;
}

typedef struct chunk_ref {
  const int64_t *box; /* ndim offsets then ndim sizes */
  uint32_t tensor;    /* canonical */
  uint32_t ndim;
  uint32_t source;
} chunk_ref;

/* (tensor, offsets, sizes): with offsets first, lexicographic order of the
 * whole 2*ndim vector is exactly "by offset, then by size". */
static int cmp_chunk_ref(const void *pa, const void *pb) {
  const chunk_ref *a = pa, *b = pb;
  if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
  for (uint32_t d = 0; d < 2 * a->ndim; d++)
    if (a->box[d] != b->box[d]) return a->box[d] < b->box[d] ? -1 : 1;
  return 0;
}

/* Sorted chunk refs (canonical tensors via rank_of[insertion index]);
 * one box twice in a tensor fails with DCP_EEXIST. Caller frees *out. */
static dcp_status sorted_chunks(const dcpi_local_plan *lp, const uint32_t *rank_of,
                                chunk_ref **out, dcpi_err *err) {
  chunk_ref *c = malloc((lp->nchunks ? lp->nchunks : 1) * sizeof *c);
  if (!c) return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory sorting chunks");
  for (size_t i = 0; i < lp->nchunks; i++) {
    const dcpi_lp_pending *p = &lp->pending[i];
    c[i] = (chunk_ref){lp->pool + p->box_at, rank_of[p->tensor], lp->tensors[p->tensor].ndim,
                       (uint32_t)i};
  }
  dcpi_sort(c, lp->nchunks, sizeof *c, cmp_chunk_ref);
  for (size_t i = 1; i < lp->nchunks; i++)
    if (!cmp_chunk_ref(&c[i - 1], &c[i])) {
      char buf[256];
      const int64_t *b = c[i].box;
      dcpi_fail(err, DCP_EEXIST, "local plan of rank %d: chunk %s added twice", lp->rank,
                dcpi_box_str(c[i].ndim, b, b + c[i].ndim, buf, sizeof buf));
      free(c);
      return DCP_EEXIST;
    }
  *out = c;
  return DCP_OK;
}

/* Rebuild tensors, pool and chunk arrays in canonical order from the sorted
 * name and chunk refs. */
static dcp_status rebuild(dcpi_local_plan *lp, const name_ref *tn, const chunk_ref *cr,
                          dcpi_err *err) {
  size_t nt = lp->ntensors, nc = lp->nchunks;
  dcpi_lp_tensor *tensors = malloc((nt ? nt : 1) * sizeof *tensors);
  int64_t *pool = malloc((lp->pool_len ? lp->pool_len : 1) * sizeof *pool);
  uint32_t *ctensor = malloc((nc ? nc : 1) * sizeof *ctensor);
  uint32_t *csource = malloc((nc ? nc : 1) * sizeof *csource);
  if (!tensors || !pool || !ctensor || !csource) {
    free(tensors), free(pool), free(ctensor), free(csource);
    return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory finishing");
  }
  size_t at = 0, c = 0;
  for (size_t k = 0; k < nt; k++) {
    dcpi_lp_tensor t = lp->tensors[tn[k].index];
    memcpy(pool + at, lp->pool + t.shape_at, t.ndim * sizeof *pool);
    t.shape_at = at;
    at += t.ndim;
    t.boxes_at = at;
    t.first_chunk = (uint32_t)c;
    for (; c < nc && cr[c].tensor == k; c++) {
      memcpy(pool + at, cr[c].box, 2 * t.ndim * sizeof *pool);
      at += 2 * (size_t)t.ndim;
      ctensor[c] = (uint32_t)k;
      csource[c] = cr[c].source;
    }
    t.nchunks = (uint32_t)c - t.first_chunk;
    tensors[k] = t;
  }
  free(lp->tensors), free(lp->pool), free(lp->pending);
  lp->tensors = tensors;
  lp->tensors_cap = nt;
  lp->pool = pool;
  lp->pool_len = lp->pool_cap = at;
  lp->pending = NULL;
  lp->pending_cap = 0;
  lp->chunk_tensor = ctensor;
  lp->chunk_source = csource;
  return DCP_OK;
}

static void reorder_bytes(dcpi_local_plan *lp, const name_ref *bn, dcpi_lp_bytes *tmp) {
  for (size_t k = 0; k < lp->nbytes; k++) tmp[k] = lp->bytes[bn[k].index];
  if (lp->nbytes) memcpy(lp->bytes, tmp, lp->nbytes * sizeof *tmp);
}

dcp_status dcpi_local_plan_finish(dcpi_local_plan *lp, dcpi_err *err) {
  dcp_status rc = check_open(lp, err);
  if (rc) return rc;
  name_ref *tn = NULL, *bn = NULL;
  chunk_ref *cr = NULL;
  uint32_t *rank_of = malloc((lp->ntensors ? lp->ntensors : 1) * sizeof *rank_of);
  dcpi_lp_bytes *tmp = malloc((lp->nbytes ? lp->nbytes : 1) * sizeof *tmp);
  if (!rank_of || !tmp) rc = dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory finishing");
  if (!rc) rc = sorted_names(lp, true, &tn, err);
  if (!rc) rc = sorted_names(lp, false, &bn, err);
  if (!rc) rc = check_cross_names(lp, tn, bn, err);
  if (!rc) {
    for (size_t k = 0; k < lp->ntensors; k++) rank_of[tn[k].index] = (uint32_t)k;
    rc = sorted_chunks(lp, rank_of, &cr, err);
  }
  if (!rc) rc = rebuild(lp, tn, cr, err);
  if (!rc) {
    reorder_bytes(lp, bn, tmp);
    lp->finished = true;
  }
  free(tn), free(bn), free(cr), free(rank_of), free(tmp);
  return rc;
}

/* ---- from a state ------------------------------------------------------ */

/* Mark the tensors of st that came from a layout and have no other chunk
 * (dcp_state_add_chunk may add more to any tensor): a sharded tensor's one
 * chunk, a flat one's range. (A flat range has one holder, so the rule and
 * the balancer give it the same owner either way.) */
static dcp_status mark_layouts(dcpi_local_plan *lp, const dcp_state *st, dcpi_err *err) {
  size_t *n = calloc(st->ntensors ? st->ntensors : 1, sizeof *n);
  if (!n) return dcpi_fail(err, DCP_ENOMEM, "local plan: out of memory");
  for (size_t c = 0; c < st->nchunks; c++) n[st->chunks[c].tensor]++;
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < st->ntensors && !rc; i++) {
    const dcpi_tensor_item *t = &st->tensors[i];
    if ((t->layout && n[i] == 1) || (t->flat && n[i] == t->flat_parts))
      rc = dcpi_local_plan_mark_layout(lp, (uint32_t)i, err);
  }
  free(n);
  return rc;
}

static dcp_status fill_from_state(dcpi_local_plan *lp, const dcp_state *st, dcpi_err *err) {
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < st->ntensors && !rc; i++) {
    const dcpi_tensor_item *t = &st->tensors[i];
    rc = dcpi_local_plan_add_tensor(lp, t->fqn, t->dtype, t->ndim, t->shape, NULL, err);
  }
  if (!rc) rc = mark_layouts(lp, st, err);
  for (size_t i = 0; i < st->nchunks && !rc; i++) {
    const dcpi_chunk_item *c = &st->chunks[i];
    rc = dcpi_local_plan_add_chunk(lp, c->tensor, c->box.offset, c->box.size, err);
  }
  for (size_t i = 0; i < st->nbytes && !rc; i++) {
    const dcpi_bytes_item *b = &st->bytes[i];
    rc = dcpi_local_plan_add_bytes(lp, b->key, b->scope, (int64_t)b->len, err);
  }
  return rc ? rc : dcpi_local_plan_finish(lp, err);
}

dcp_status dcpi_local_plan_from_state(const dcp_state *st, const dcpi_save_opts *opts,
                                      dcpi_local_plan **out, dcpi_err *err) {
  if (!st || !out) return dcpi_fail(err, DCP_EINVAL, "local plan: state or out is NULL");
  *out = NULL;
  dcpi_local_plan *lp;
  dcp_status rc = dcpi_local_plan_create(st->rank, st->world_size, opts, &lp, err);
  if (rc) return rc;
  if ((rc = fill_from_state(lp, st, err))) {
    dcpi_local_plan_free(lp);
    return rc;
  }
  *out = lp;
  return DCP_OK;
}

/* ---- accessors --------------------------------------------------------- */

int32_t dcpi_local_plan_rank(const dcpi_local_plan *lp) { return lp->rank; }
int32_t dcpi_local_plan_world_size(const dcpi_local_plan *lp) { return lp->world_size; }
const dcpi_save_opts *dcpi_local_plan_opts(const dcpi_local_plan *lp) { return &lp->opts; }
size_t dcpi_local_plan_tensor_count(const dcpi_local_plan *lp) { return lp->ntensors; }
size_t dcpi_local_plan_chunk_count(const dcpi_local_plan *lp) { return lp->nchunks; }
size_t dcpi_local_plan_bytes_count(const dcpi_local_plan *lp) { return lp->nbytes; }

dcp_status dcpi_local_plan_tensor(const dcpi_local_plan *lp, size_t i, dcpi_lp_tensor_view *out) {
  if (!lp->finished) return DCP_EINVAL;
  if (i >= lp->ntensors) return DCP_ENOTFOUND;
  const dcpi_lp_tensor *t = &lp->tensors[i];
  *out = (dcpi_lp_tensor_view){.fqn = lp->names + t->name_at, .fqn_len = t->name_len,
                               .dtype = (dcp_dtype)t->dtype, .ndim = t->ndim,
                               .shape = lp->pool + t->shape_at, .first_chunk = t->first_chunk,
                               .nchunks = t->nchunks, .layout = t->layout != 0};
  return DCP_OK;
}

dcp_status dcpi_local_plan_chunk(const dcpi_local_plan *lp, size_t c, dcpi_lp_chunk_view *out) {
  if (!lp->finished) return DCP_EINVAL;
  if (c >= lp->nchunks) return DCP_ENOTFOUND;
  const int64_t *box = dcpi_lp_box(lp, (uint32_t)c);
  uint32_t nd = lp->tensors[lp->chunk_tensor[c]].ndim;
  *out = (dcpi_lp_chunk_view){.tensor = lp->chunk_tensor[c], .ndim = nd, .offset = box,
                              .size = box + nd, .source = lp->chunk_source[c]};
  return DCP_OK;
}

dcp_status dcpi_local_plan_bytes(const dcpi_local_plan *lp, size_t i, dcpi_lp_bytes_view *out) {
  if (!lp->finished) return DCP_EINVAL;
  if (i >= lp->nbytes) return DCP_ENOTFOUND;
  const dcpi_lp_bytes *b = &lp->bytes[i];
  *out = (dcpi_lp_bytes_view){.key = lp->names + b->name_at, .key_len = b->name_len,
                              .scope = (dcp_scope)b->scope, .length = b->length,
                              .source = b->source};
  return DCP_OK;
}
