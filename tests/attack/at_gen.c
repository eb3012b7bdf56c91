/* at_gen.c — the attack tests' model generator (at_gen.h). */
#include "at_gen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int at_quiet;
uint64_t at_perm_salt;

/* splitmix64 of x: the one mixing function of the generator. */
static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t next(rng *r) { return r->s = mix(r->s); }

/* Uniform in [0, n) (n >= 1). */
static int64_t below(rng *r, int64_t n) { return n <= 1 ? 0 : (int64_t)(next(r) % (uint64_t)n); }

static rng rng_of(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  rng r = {mix(a ^ mix(b ^ mix(c ^ mix(d))))};
  return r;
}

static const int64_t extents[] = {0, 1, 1, 2, 3, 5, 7, 11, 13, 17, 31, 97};

static int64_t numel_of(uint32_t ndim, const int64_t *shape) {
  int64_t n = 1;
  for (uint32_t d = 0; d < ndim; d++) n *= shape[d];
  return n;
}

/* One tensor's shape: mostly small odd extents, sometimes one long
 * dimension with tiny others; at most ~40k elements. */
static void gen_shape(rng *r, at_tensor *t) {
  t->ndim = (uint32_t)below(r, AT_NDIM + 1);
  int long_dim = below(r, 5) == 0 && t->ndim > 0 ? (int)below(r, t->ndim) : -1;
  for (;;) {
    for (uint32_t d = 0; d < t->ndim; d++)
      t->shape[d] = (int)d == long_dim ? 20011 + below(r, 3) * 2
                                       : extents[below(r, (int64_t)(sizeof extents / sizeof *extents))];
    if (long_dim >= 0)
      for (uint32_t d = 0; d < t->ndim; d++)
        if ((int)d != long_dim && t->shape[d] > 2) t->shape[d] = 1 + below(r, 2);
    if (numel_of(t->ndim, t->shape) <= 40000) return;
  }
}

void at_model_gen(at_model *m, uint64_t seed) {
  memset(m, 0, sizeof *m);
  m->seed = seed;
  rng r = rng_of(seed, 1, 2, 3);
  m->ntensors = 6 + (size_t)below(&r, AT_MAX_TENSORS - 5);
  int first_dt = (int)below(&r, DCP_DTYPE_END_ - 1);
  for (size_t i = 0; i < m->ntensors; i++) {
    at_tensor *t = &m->t[i];
    /* names sort differently from their declaration order */
    snprintf(t->fqn, sizeof t->fqn, "m%02u.t%zu", (unsigned)below(&r, 100), i);
    t->dtype = (dcp_dtype)(1 + (first_dt + (int)i) % (DCP_DTYPE_END_ - 1));
    gen_shape(&r, t);
  }
  m->rep_len = (size_t)below(&r, 4) == 0 ? 0 : (size_t)below(&r, 300);
}

uint8_t at_byte(const at_model *m, size_t t, int64_t elem, size_t byte) {
  return (uint8_t)mix(m->seed * 131 + t * 0x100000001b3ull + (uint64_t)elem * 17 + byte);
}

uint8_t at_item_byte(const at_model *m, int32_t rank, size_t i) {
  return (uint8_t)mix(m->seed ^ 0xabcdefull ^ ((uint64_t)(rank + 2) << 40) ^ i);
}

size_t at_per_rank_len(const at_model *m, int32_t rank) {
  return 1 + (size_t)((m->seed + (uint64_t)rank * 7) % 50);
}

/* A random permutation of 0..n-1 into p (n <= 64). */
static void perm(rng *r, int32_t n, int32_t *p) {
  for (int32_t i = 0; i < n; i++) p[i] = i;
  for (int32_t i = n - 1; i > 0; i--) {
    int32_t j = (int32_t)below(r, i + 1), x = p[i];
    p[i] = p[j];
    p[j] = x;
  }
}

/* A layout over every rank: a 1-d or 2-d mesh (size-1 dims too) with
 * permuted ranks, each mesh dim sharding a random tensor dim or none; or
 * (one in four) a 1-d mesh of some of the ranks, which the others lack. */
static void plan_layout(rng *g, const at_tensor *t, int32_t world, at_hold *h) {
  h->kind = AT_LAYOUT;
  int32_t a = 1;
  for (int32_t d = 2; d < world; d++)
    if (world % d == 0 && below(g, 2)) a = d;
  int shape_kind = (int)below(g, 4);
  h->mesh_ndim = shape_kind == 0 ? 1 : 2;
  h->mesh[0] = shape_kind == 0 ? world : shape_kind == 1 ? 1 : shape_kind == 2 ? world : a;
  h->mesh[1] = shape_kind == 0 ? 1 : world / h->mesh[0];
  rng pg = rng_of(next(g), at_perm_salt, 5, 6);
  perm(&pg, world, h->mesh_ranks);
  if (below(g, 4) == 0) { /* a mesh of some ranks only: the others lack it */
    h->mesh_ndim = 1;
    h->mesh[0] = 1 + below(g, world), h->mesh[1] = 1;
  }
  memset(h->map, 0, sizeof h->map);
  for (uint32_t md = 0; md < h->mesh_ndim && t->ndim > 0; md++) {
    int64_t td = below(g, t->ndim + 1);
    if (td < t->ndim) h->map[td] |= 1u << md;
  }
}

/* Sorted cut points c[0] = 0 <= ... <= c[n] = total into c. */
static void cuts(rng *g, int64_t total, int n, int64_t *c) {
  c[0] = 0;
  c[n] = total;
  for (int i = 1; i < n; i++) c[i] = below(g, total + 1);
  for (int i = 1; i < n; i++) /* insertion sort of c[1..n) */
    for (int j = i; j > 1 && c[j - 1] > c[j]; j--) {
      int64_t x = c[j];
      c[j] = c[j - 1];
      c[j - 1] = x;
    }
}

static void whole_box(const at_tensor *t, dcp_box *b) {
  memset(b, 0, sizeof *b);
  b->ndim = t->ndim;
  for (uint32_t d = 0; d < t->ndim; d++) b->size[d] = t->shape[d];
}

static void add_box(at_hold *h, const dcp_box *b) {
  for (size_t i = 0; i < h->nbox; i++) /* one empty piece cut twice */
    if (!memcmp(&h->box[i], b, sizeof *b)) return;
  if (h->nbox < AT_MAX_PIECES) h->box[h->nbox++] = *b;
}

/* Saving: a grid of pieces over dims 0 and last, each piece held by one
 * owner and sometimes a replica; or the whole tensor on a subset. */
static void plan_pieces(rng *g, const at_tensor *t, int32_t world, int32_t rank, at_hold *h) {
  h->kind = AT_BOXES;
  dcp_box whole;
  whole_box(t, &whole);
  if (t->ndim == 0 || below(g, 4) == 0) { /* on some ranks only */
    int32_t first = (int32_t)below(g, world), n = 1 + (int32_t)below(g, world);
    for (int32_t k = 0; k < n; k++)
      if ((first + k) % world == rank) add_box(h, &whole);
    return;
  }
  uint32_t dl = t->ndim - 1;
  int n0 = 1 + (int)below(g, world + 2), n1 = dl > 0 ? 1 + (int)below(g, 3) : 1;
  int64_t c0[16], c1[16];
  cuts(g, t->shape[0], n0, c0);
  cuts(g, t->shape[dl], n1, c1);
  for (int i = 0; i < n0; i++)
    for (int j = 0; j < n1; j++) {
      dcp_box b = whole;
      b.offset[0] = c0[i], b.size[0] = c0[i + 1] - c0[i];
      if (dl > 0) b.offset[dl] = c1[j], b.size[dl] = c1[j + 1] - c1[j];
      int32_t owner = (int32_t)below(g, world), rep = (int32_t)below(g, world);
      int replicated = below(g, 3) == 0;
      if (owner == rank || (replicated && rep == rank)) add_box(h, &b);
    }
}

/* Loading: up to 3 disjoint pieces of one random sub-box (rank-local). */
static void plan_sub(rng *g, const at_tensor *t, at_hold *h) {
  h->kind = AT_BOXES;
  dcp_box b;
  whole_box(t, &b);
  for (uint32_t d = 0; d < t->ndim; d++) {
    b.offset[d] = below(g, t->shape[d] + 1);
    b.size[d] = below(g, t->shape[d] - b.offset[d] + 1);
    if (below(g, 3) == 0) b.offset[d] = 0, b.size[d] = t->shape[d];
  }
  if (t->ndim == 0) {
    add_box(h, &b);
    return;
  }
  int n = 1 + (int)below(g, 3);
  int64_t c[4];
  cuts(g, b.size[0], n, c);
  int64_t off0 = b.offset[0];
  for (int i = 0; i < n; i++) {
    b.offset[0] = off0 + c[i], b.size[0] = c[i + 1] - c[i];
    if (below(g, 4) != 0) add_box(h, &b);
  }
}

void at_rank_plan(const at_model *m, size_t t, int32_t world, int32_t rank, int saving,
                  uint64_t salt, at_hold *out) {
  memset(out, 0, sizeof *out);
  const at_tensor *ten = &m->t[t];
  rng g = rng_of(m->seed, t, (uint64_t)world * 2 + (uint64_t)saving, salt);
  rng local = rng_of(m->seed ^ 0x77, t, (uint64_t)rank, salt);
  int kind = (int)below(&g, saving ? 3 : 4);
  int64_t numel = numel_of(ten->ndim, ten->shape);
  if (kind == 0) {
    plan_layout(&g, ten, world, out);
  } else if (kind == 1 && ten->ndim > 0) {
    out->kind = AT_FLAT;
    if (saving) {
      int64_t c[65];
      int32_t order[64];
      cuts(&g, numel, world, c);
      rng pg = rng_of(next(&g), at_perm_salt, 7, 8);
      perm(&pg, world, order); /* which rank holds which range */
      out->flat_begin = c[order[rank]], out->flat_count = c[order[rank] + 1] - c[order[rank]];
    } else {
      out->flat_begin = below(&local, numel + 1);
      out->flat_count = below(&local, numel - out->flat_begin + 1);
    }
  } else if (saving) {
    plan_pieces(&g, ten, world, rank, out);
  } else if (below(&local, 6) == 0) {
    out->kind = AT_ABSENT;
  } else {
    plan_sub(&local, ten, out);
  }
}

size_t at_box_bytes(const at_model *m, size_t t, const dcp_box *b) {
  int64_t n = 1;
  for (uint32_t d = 0; d < b->ndim; d++) n *= b->size[d];
  return (size_t)n * dcp_dtype_size(m->t[t].dtype);
}

/* The global row-major index of the k-th element of box b of tensor t. */
static int64_t global_index(const at_tensor *t, const dcp_box *b, int64_t k) {
  int64_t g = 0, stride = 1;
  for (uint32_t d = t->ndim; d-- > 0;) {
    int64_t c = b->size[d] ? k % b->size[d] : 0;
    k = b->size[d] ? k / b->size[d] : 0;
    g += (b->offset[d] + c) * stride;
    stride *= t->shape[d];
  }
  return g;
}

void at_fill(const at_model *m, size_t t, const dcp_box *b, uint8_t *buf) {
  size_t es = dcp_dtype_size(m->t[t].dtype), n = at_box_bytes(m, t, b) / es;
  for (size_t k = 0; k < n; k++) {
    int64_t g = global_index(&m->t[t], b, (int64_t)k);
    for (size_t j = 0; j < es; j++) buf[k * es + j] = at_byte(m, t, g, j);
  }
}

int64_t at_check(const at_model *m, size_t t, const dcp_box *b, const uint8_t *buf) {
  size_t es = dcp_dtype_size(m->t[t].dtype), n = at_box_bytes(m, t, b) / es;
  for (size_t k = 0; k < n; k++) {
    int64_t g = global_index(&m->t[t], b, (int64_t)k);
    for (size_t j = 0; j < es; j++)
      if (buf[k * es + j] != at_byte(m, t, g, j)) return (int64_t)(k * es + j);
  }
  return -1;
}

/* The flat range [begin, begin+count) of tensor t as the box of a 1-d view. */
static dcp_box flat_view(int64_t begin, int64_t count) {
  dcp_box b;
  memset(&b, 0, sizeof b);
  b.ndim = 1;
  b.offset[0] = begin;
  b.size[0] = count;
  return b;
}

static struct at_buf *new_buf(at_bufs *bufs, size_t len, int saving) {
  struct at_buf *b = &bufs->b[bufs->n++];
  memset(b, 0, sizeof *b);
  b->len = len;
  b->p = malloc(len ? len : 1);
  if (b->p && !saving) memset(b->p, 0xEE, len);
  return b;
}

/* The layout of h, or NULL (message on stderr). */
static dcp_layout *make_layout(dcp_ctx *ctx, const at_tensor *t, const at_hold *h) {
  dcp_layout *l = NULL;
  dcp_status rc = dcp_layout_create(ctx, h->mesh_ndim, h->mesh, h->mesh_ranks, t->ndim,
                                    t->ndim ? h->map : NULL, &l);
  if (rc) fprintf(stderr, "layout of %s: %s\n", t->fqn, dcp_ctx_last_error(ctx));
  return l;
}

static dcp_status add_layout(dcp_ctx *ctx, const at_model *m, size_t t, const at_hold *h,
                             int32_t rank, int saving, dcp_state *st, at_bufs *bufs) {
  const at_tensor *ten = &m->t[t];
  dcp_layout *l = make_layout(ctx, ten, h);
  if (!l) return DCP_EINVAL;
  dcp_box b;
  dcp_status rc = dcp_layout_box(l, ten->shape, rank, &b);
  if (rc == DCP_ENOTFOUND) rc = DCP_OK; /* not in its mesh: this rank lacks the tensor */
  else if (rc == DCP_OK) {
    struct at_buf *x = new_buf(bufs, at_box_bytes(m, t, &b), saving);
    x->t = t, x->box = b;
    if (saving) at_fill(m, t, &b, x->p);
    rc = dcp_state_add_sharded(st, ten->fqn, ten->dtype, ten->ndim, ten->shape, l, x->p);
  }
  dcp_layout_free(l);
  return rc;
}

static dcp_status add_flat(const at_model *m, size_t t, const at_hold *h, int saving,
                           dcp_state *st, at_bufs *bufs) {
  const at_tensor *ten = &m->t[t];
  size_t es = dcp_dtype_size(ten->dtype);
  struct at_buf *x = new_buf(bufs, (size_t)h->flat_count * es, saving);
  x->t = t, x->flat = 1, x->flat_begin = h->flat_begin;
  x->box = flat_view(h->flat_begin, h->flat_count);
  for (int64_t k = 0; saving && k < h->flat_count; k++)
    for (size_t j = 0; j < es; j++) x->p[k * (int64_t)es + (int64_t)j] = at_byte(m, t, h->flat_begin + k, j);
  dcp_status rc = dcp_state_add_tensor(st, ten->fqn, ten->dtype, ten->ndim, ten->shape);
  return rc ? rc : dcp_state_add_flat(st, ten->fqn, NULL, h->flat_begin, h->flat_count, x->p);
}

static dcp_status add_boxes(const at_model *m, size_t t, const at_hold *h, int saving,
                            dcp_state *st, at_bufs *bufs) {
  const at_tensor *ten = &m->t[t];
  dcp_status rc = dcp_state_add_tensor(st, ten->fqn, ten->dtype, ten->ndim, ten->shape);
  for (size_t i = 0; rc == DCP_OK && i < h->nbox; i++) {
    struct at_buf *x = new_buf(bufs, at_box_bytes(m, t, &h->box[i]), saving);
    x->t = t, x->box = h->box[i];
    if (saving) at_fill(m, t, &x->box, x->p);
    rc = dcp_state_add_chunk(st, ten->fqn, x->box.offset, x->box.size, x->p);
  }
  return rc;
}

static dcp_status add_items(const at_model *m, int32_t rank, int saving, int per_rank,
                            dcp_state *st, at_bufs *bufs) {
  struct at_buf *x = new_buf(bufs, m->rep_len, saving);
  x->t = SIZE_MAX, x->item_rank = -1;
  for (size_t i = 0; saving && i < m->rep_len; i++) x->p[i] = at_item_byte(m, -1, i);
  dcp_status rc = dcp_state_add_bytes(st, "at.rng", DCP_SCOPE_REPLICATED, m->rep_len ? x->p : NULL,
                                      m->rep_len);
  if (rc || !per_rank) return rc;
  size_t n = at_per_rank_len(m, rank);
  x = new_buf(bufs, n, saving);
  x->t = SIZE_MAX, x->item_rank = rank;
  for (size_t i = 0; saving && i < n; i++) x->p[i] = at_item_byte(m, rank, i);
  return dcp_state_add_bytes(st, "at.rank", DCP_SCOPE_PER_RANK, x->p, n);
}

dcp_status at_build(dcp_ctx *ctx, const at_model *m, int32_t world, int32_t rank, int saving,
                    uint64_t salt, int with_items, int per_rank, dcp_state *st, at_bufs *bufs) {
  bufs->n = 0;
  dcp_status rc = DCP_OK;
  for (size_t t = 0; rc == DCP_OK && t < m->ntensors; t++) {
    at_hold h;
    at_rank_plan(m, t, world, rank, saving, salt, &h);
    if (h.kind == AT_LAYOUT) rc = add_layout(ctx, m, t, &h, rank, saving, st, bufs);
    else if (h.kind == AT_FLAT) rc = add_flat(m, t, &h, saving, st, bufs);
    else if (h.kind == AT_BOXES && h.nbox) rc = add_boxes(m, t, &h, saving, st, bufs);
    if (rc) fprintf(stderr, "rank %d: building %s: %s: %s\n", rank, m->t[t].fqn,
                    dcp_strerror(rc), dcp_ctx_last_error(ctx));
  }
  if (rc == DCP_OK && with_items) rc = add_items(m, rank, saving, per_rank, st, bufs);
  return rc;
}

/* Check one bytes item buffer. */
static int check_item(const at_model *m, const struct at_buf *x, int32_t rank) {
  for (size_t i = 0; i < x->len; i++)
    if (x->p[i] != at_item_byte(m, x->item_rank, i)) {
      if (at_quiet) return -1;
      fprintf(stderr, "rank %d: bytes item %s: byte %zu wrong\n", rank,
              x->item_rank < 0 ? "at.rng" : "at.rank", i);
      return -1;
    }
  return 0;
}

int at_verify(const at_model *m, const at_bufs *bufs, int32_t rank) {
  for (size_t i = 0; i < bufs->n; i++) {
    const struct at_buf *x = &bufs->b[i];
    if (x->t == SIZE_MAX) {
      if (check_item(m, x, rank)) return -1;
      continue;
    }
    size_t es = dcp_dtype_size(m->t[x->t].dtype);
    int64_t bad = -1;
    if (x->flat) {
      for (int64_t k = 0; bad < 0 && k < x->box.size[0]; k++)
        for (size_t j = 0; j < es; j++)
          if (x->p[k * (int64_t)es + (int64_t)j] != at_byte(m, x->t, x->flat_begin + k, j)) {
            bad = k * (int64_t)es + (int64_t)j;
            break;
          }
    } else {
      bad = at_check(m, x->t, &x->box, x->p);
    }
    if (bad >= 0 && at_quiet) return -1;
    if (bad >= 0) {
      fprintf(stderr, "rank %d: seed %llu: %s (%s, ndim %u)%s box offset0 %lld size0 %lld: byte %lld wrong\n",
              rank, (unsigned long long)m->seed, m->t[x->t].fqn, dcp_dtype_name(m->t[x->t].dtype),
              m->t[x->t].ndim, x->flat ? " flat" : "", (long long)x->box.offset[0],
              (long long)x->box.size[0], (long long)bad);
      return -1;
    }
  }
  return 0;
}

void at_free_bufs(at_bufs *bufs) {
  for (size_t i = 0; i < bufs->n; i++) free(bufs->b[i].p);
  bufs->n = 0;
}

dcp_status at_state_new(dcp_ctx *ctx, const at_model *m, int32_t world, int32_t rank, int saving,
                        uint64_t salt, int items, dcp_state **st, at_bufs **bufs) {
  *st = NULL;
  *bufs = calloc(1, sizeof **bufs);
  if (!*bufs) return DCP_ENOMEM;
  dcp_status rc = dcp_state_create(ctx, st);
  if (!rc)
    rc = at_build(ctx, m, world, rank, saving, salt, items & AT_ITEMS, items & AT_PER_RANK, *st,
                  *bufs);
  if (rc) {
    at_state_free(*st, *bufs);
    *st = NULL, *bufs = NULL;
  }
  return rc;
}

void at_state_free(dcp_state *st, at_bufs *bufs) {
  dcp_state_free(st);
  if (bufs) at_free_bufs(bufs);
  free(bufs);
}

dcp_status at_save(dcp_ctx *ctx, const at_model *m, int32_t world, int32_t rank, const char *dir,
                   const dcp_save_options *opts) {
  dcp_state *st;
  at_bufs *b;
  dcp_status rc = at_state_new(ctx, m, world, rank, 1, 1, AT_ITEMS | AT_PER_RANK, &st, &b);
  if (!rc) rc = dcp_save(ctx, st, dir, opts);
  at_state_free(st, b);
  return rc;
}

dcp_status at_load_all(dcp_ctx *ctx, const at_model *m, int per_rank, const char *dir,
                       int *wrong) {
  dcp_state *st;
  at_bufs *b;
  *wrong = 0;
  dcp_status rc =
      at_state_new(ctx, m, 1, 0, 0, 1, AT_ITEMS | (per_rank ? AT_PER_RANK : 0), &st, &b);
  if (!rc) rc = dcp_load(ctx, st, dir, NULL);
  if (!rc) *wrong = at_verify(m, b, 0) != 0;
  at_state_free(st, b);
  return rc;
}
