/* property.c — random layouts saved one way and loaded another, every byte
 * checked, over real ranks (forked over the file collective, or mpirun).
 *
 *   dcp_property run|save|load --dir D [--rendezvous R] [--trainer-coll mpi]
 *                [--writer-coll file|gloo|none] --seed S --rounds N [--save-world W]
 *
 * run saves and loads each round; save only saves, and load (by another
 * world, --save-world naming the one that saved) only loads, so a
 * checkpoint of 3 ranks is checked by 5, or by 1.
 *
 * Every rank draws the same case from (S, round): one or two meshes over
 * all ranks or a subset (1-3 dims, ranks permuted), up to five tensors of
 * 0-3 dims (uneven, empty and multi-block extents), each held by a layout
 * (dcp_state_add_sharded, random tensor_map masks), as a flat shard
 * (dcp_state_add_flat_sharded, random flat dims), as hand-added chunks of
 * a random grid, each box on a random set of ranks (which sends the save
 * through the gathered plan), or whole on every rank; a replicated and a
 * per-rank bytes item; random block size, policy, compression and replica
 * check; a sync or an async save, staged blocking or in the background
 * (the state freed as soon as it returns, the buffers overwritten after
 * the fence), some saved twice with DCP_SAVE_OVERWRITE. Then every tensor (or some of them)
 * is loaded into another random placement with a random read dedup mode,
 * and every loaded byte is compared with the value function of its global
 * element. A case that fails prints its seed and round. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async_kit.h"
#include "dcp.h"
#include "rank_check.h"

#define MAXT 5
#define MAXD 3
#define MAXCUT 3 /* parts per dim of a hand-added grid */
#define MAXW 64

typedef enum kind { K_SHARDED, K_FLAT, K_HAND, K_WHOLE, K_KINDS } kind;
static const char *const kind_name[] = {"sharded", "flat", "hand", "whole"};

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static uint64_t next(rng *r) { return r->s = mix(r->s); }
/* Uniform in [lo, hi]. */
static int64_t range(rng *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(next(r) % (uint64_t)(hi - lo + 1));
}

typedef struct mesh {
  uint32_t ndim;
  int64_t shape[MAXD];
  int32_t ranks[MAXW];
  int32_t n;
} mesh;

/* How one side (the save or the load) holds one tensor. */
typedef struct place {
  kind k;
  int mesh; /* K_SHARDED, K_FLAT: which of the side's meshes */
  uint32_t map[MAXD], flat_dims;
  int nparts[MAXD];
  int64_t cut[MAXD][MAXCUT + 1]; /* K_HAND: part p of dim d is [cut[p], cut[p+1]) */
  uint64_t holders;              /* K_HAND: seeds who holds each box */
} place;

typedef struct tensor {
  char fqn[32];
  dcp_dtype dt;
  uint32_t ndim;
  int64_t shape[MAXD];
} tensor;

typedef struct side {
  mesh meshes[2];
  int nmeshes;
  place p[MAXT];
} side;

typedef struct kase {
  int nt;
  tensor t[MAXT];
  side save, load;
  uint32_t block_size, flags;
  dcp_policy policy;
  int async, background, twice, load_mask;
  int hole; /* a hand-added tensor whose first non-empty box nobody saves (-1: none) */
  int corrupt;  /* rank 0 damages a data file before the load: 1 flips a byte, 2 cuts it */
  int bad_load; /* before the real load, one every rank gets wrong the same way: */
                /* 1 a tensor of another dtype, 2 one the checkpoint lacks, 0 none */
  dcp_read_dedup dedup;
  uint32_t load_flags; /* DCP_LOAD_METADATA_PER_RANK, DCP_LOAD_NO_PIPELINE */
  dcp_policy reader_policy;
  uint64_t max_inflight; /* 0: the default; 1: one item at a time */
} kase;

static const dcp_dtype dtypes[] = {DCP_U8, DCP_I16, DCP_BF16, DCP_F32, DCP_I64, DCP_C64};

/* A mesh of world's ranks or of a subset: its size's prime factors spread
 * over 1-3 dims, ranks shuffled half the time. */
static void draw_mesh(rng *r, int32_t world, mesh *m) {
  int32_t n = range(r, 0, 3) == 0 ? (int32_t)range(r, 1, world) : world;
  m->ndim = (uint32_t)range(r, 1, MAXD);
  for (uint32_t d = 0; d < m->ndim; d++) m->shape[d] = 1;
  int32_t left = n;
  for (int32_t f = 2; left > 1; f++)
    while (left % f == 0) left /= f, m->shape[range(r, 0, m->ndim - 1)] *= f;
  int32_t all[MAXW];
  for (int32_t i = 0; i < world; i++) all[i] = i;
  for (int32_t i = world - 1; i > 0 && range(r, 0, 1); i--) {
    int32_t j = (int32_t)range(r, 0, i), x = all[i];
    all[i] = all[j], all[j] = x;
  }
  m->n = n;
  memcpy(m->ranks, all, (size_t)n * sizeof *all);
}

static void draw_tensor(rng *r, int i, tensor *t) {
  snprintf(t->fqn, sizeof t->fqn, "m.%d.w%d", i % 2, i);
  t->dt = dtypes[range(r, 0, sizeof dtypes / sizeof *dtypes - 1)];
  t->ndim = (uint32_t)range(r, 0, MAXD);
  static const int64_t most[MAXD + 1] = {0, 3000, 70, 17};
  for (uint32_t d = 0; d < t->ndim; d++)
    t->shape[d] = range(r, 0, 12) == 0 ? 0 : range(r, 1, most[t->ndim]);
}

/* A random placement of t on side s. */
static void draw_place(rng *r, const side *s, const tensor *t, place *p) {
  memset(p, 0, sizeof *p);
  p->k = (kind)range(r, 0, K_KINDS - 1);
  p->mesh = (int)range(r, 0, s->nmeshes - 1);
  const mesh *m = &s->meshes[p->mesh];
  uint32_t used = 0;
  for (uint32_t d = 0; d < t->ndim; d++) /* each mesh dim on at most one tensor dim */
    for (uint32_t k = 0; k < m->ndim; k++)
      if (!(used >> k & 1) && range(r, 0, 2) == 0) p->map[d] |= 1u << k, used |= 1u << k;
  uint32_t free_dims = ((1u << m->ndim) - 1) & ~used;
  p->flat_dims = free_dims & (uint32_t)next(r); /* 0: every free dim */
  for (uint32_t d = 0; d < t->ndim; d++) {
    int n = (int)range(r, 1, MAXCUT);
    p->nparts[d] = n;
    p->cut[d][0] = 0, p->cut[d][n] = t->shape[d];
    for (int c = 1; c < n; c++) p->cut[d][c] = range(r, 0, t->shape[d]);
    for (int a = 1; a < n; a++) /* sorted */
      for (int b = a; b > 1 && p->cut[d][b - 1] > p->cut[d][b]; b--) {
        int64_t x = p->cut[d][b];
        p->cut[d][b] = p->cut[d][b - 1], p->cut[d][b - 1] = x;
      }
  }
  p->holders = next(r);
}

static void draw_side(rng *r, int32_t world, const kase *c, side *s) {
  s->nmeshes = (int)range(r, 1, 2);
  for (int i = 0; i < s->nmeshes; i++) draw_mesh(r, world, &s->meshes[i]);
  for (int i = 0; i < c->nt; i++) draw_place(r, s, &c->t[i], &s->p[i]);
}

static int64_t numel(uint32_t ndim, const int64_t *size) {
  int64_t n = 1;
  for (uint32_t d = 0; d < ndim; d++) n *= size[d];
  return n;
}

/* The case of (seed, round): saved by save_world ranks, loaded by
 * load_world (the save side is drawn first, so it does not depend on the
 * load world). */
static void draw_case(uint64_t seed, int round, int32_t save_world, int32_t load_world, kase *c) {
  rng r = {mix(seed * 1000003u + (uint64_t)round)};
  memset(c, 0, sizeof *c);
  c->nt = (int)range(&r, 1, MAXT);
  for (int i = 0; i < c->nt; i++) draw_tensor(&r, i, &c->t[i]);
  draw_side(&r, save_world, c, &c->save);
  rng lr = {mix(r.s ^ 0x6c6f6164)}; /* the load side from its own stream: the draws */
                                    /* after it do not depend on the load world */
  draw_side(&lr, load_world, c, &c->load);
  static const uint32_t blocks[] = {4096, 8192, 1u << 20};
  c->block_size = blocks[range(&r, 0, 2)];
  c->flags = range(&r, 0, 3) == 0 ? DCP_SAVE_COMPRESS : 0;
  c->policy = range(&r, 0, 1) ? DCP_POLICY_BALANCED : DCP_POLICY_LOWEST_RANK;
  c->async = range(&r, 0, 2) == 0;
  c->background = c->async && range(&r, 0, 1);
  if (range(&r, 0, 4) == 0) c->flags |= DCP_SAVE_CHECK_REPLICAS;
  c->twice = range(&r, 0, 3) == 0;
  c->load_mask = range(&r, 0, 2) == 0 ? (int)range(&r, 1, (1 << c->nt) - 1) : (1 << c->nt) - 1;
  c->dedup = (dcp_read_dedup)range(&r, 0, 2);
  c->load_flags = (uint32_t)range(&r, 0, 3) & (DCP_LOAD_METADATA_PER_RANK | DCP_LOAD_NO_PIPELINE);
  c->reader_policy = range(&r, 0, 1) ? DCP_POLICY_BALANCED : DCP_POLICY_LOWEST_RANK;
  static const uint64_t inflight[] = {0, 1, 4096};
  c->max_inflight = inflight[range(&r, 0, 2)];
  c->bad_load = range(&r, 0, 5) == 0 ? (int)range(&r, 1, 2) : 0;
  c->corrupt = range(&r, 0, 3) == 0 ? (int)range(&r, 1, 2) : 0;
  c->hole = -1;
  for (int i = 0; i < c->nt && c->hole < 0; i++)
    if (c->save.p[i].k == K_HAND && numel(c->t[i].ndim, c->t[i].shape) > 0 && range(&r, 0, 3) == 0) {
      c->hole = i; /* every rank loads it whole: every rank's load must fail */
      c->load.p[i].k = K_WHOLE;
      c->load_mask |= 1 << i;
    }
}

/* ---- values: byte b of global element g of tensor i, for salt ---------- */

static uint8_t value(int i, uint64_t g, size_t b, uint64_t salt) {
  return (uint8_t)(mix(salt ^ ((uint64_t)i << 56) ^ g) >> (8 * (b % 8)));
}

/* The global row-major index of the element at coordinates x of t. */
static uint64_t global_index(const tensor *t, const int64_t *x) {
  uint64_t g = 0;
  for (uint32_t d = 0; d < t->ndim; d++) g = g * (uint64_t)t->shape[d] + (uint64_t)x[d];
  return g;
}


/* Fill (or, check, compare) count elements of t starting at element first
 * of the region (off, size) flattened row-major, at buf. Returns the
 * number of bytes that differ. */
static size_t span(const tensor *t, int i, const int64_t *off, const int64_t *size, int64_t first,
                   int64_t count, uint8_t *buf, uint64_t salt, int check) {
  size_t es = dcp_dtype_size(t->dt), bad = 0;
  for (int64_t e = 0; e < count; e++) {
    int64_t x[MAXD], lin = first + e;
    for (uint32_t d = t->ndim; d-- > 0;) x[d] = off[d] + lin % size[d], lin /= size[d];
    uint64_t g = global_index(t, x);
    for (size_t b = 0; b < es; b++) {
      uint8_t v = value(i, g, b, salt);
      if (check) bad += buf[(size_t)e * es + b] != v;
      else buf[(size_t)e * es + b] = v;
    }
  }
  return bad;
}

/* ---- building a state ------------------------------------------------ */

typedef struct held {
  int tensor;
  int64_t off[MAXD], size[MAXD], first, count; /* the elements [first, +count) of the box */
  uint8_t *buf;
} held;

typedef struct rank_state {
  dcp_state *st;
  held h[MAXT * 32];
  int nh;
  dcp_layout *layouts[MAXT];
  uint8_t step[8], rng_item[3 * MAXW];
  size_t rng_len;
} rank_state;

static uint8_t *hold(rank_state *rs, int i, const int64_t *off, const int64_t *size,
                     int64_t first, int64_t count, const tensor *t) {
  CHECK(rs->nh < (int)(sizeof rs->h / sizeof *rs->h), "too many chunks");
  held *h = &rs->h[rs->nh++];
  h->tensor = i, h->first = first, h->count = count;
  memcpy(h->off, off, t->ndim * sizeof *off);
  memcpy(h->size, size, t->ndim * sizeof *size);
  h->buf = count ? malloc((size_t)count * dcp_dtype_size(t->dt)) : NULL;
  CHECK(!count || h->buf, "out of memory");
  return h->buf;
}

static int in_mesh(const mesh *m, int32_t rank) {
  for (int32_t i = 0; i < m->n; i++)
    if (m->ranks[i] == rank) return 1;
  return 0;
}

/* Whether rank holds box number b of a hand placement: on the save side
 * every box has at least one holder (so the checkpoint covers the tensor),
 * on the load side a rank loads about half the boxes. */
static int holds_box(const place *p, uint64_t b, int32_t rank, int32_t world, int saving) {
  uint64_t h = mix(p->holders ^ b);
  if (saving && (int32_t)(h % (uint64_t)world) == rank) return 1; /* the box's first holder */
  return (mix(h ^ (uint64_t)rank) & 3) == 0;
}

/* Add tensor i to rs's state as placement p says (salt: the values). */
static void add_tensor(dcp_ctx *ctx, rank_state *rs, const side *s, const tensor *t, int i,
                       int32_t rank, int32_t world, int saving, int hole, uint64_t salt) {
  const place *p = &s->p[i];
  const mesh *m = &s->meshes[p->mesh];
  int64_t zero[MAXD] = {0};
  if (p->k == K_SHARDED || p->k == K_FLAT) {
    if (!in_mesh(m, rank)) return; /* not on this tensor's mesh: does not hold it */
    OK(dcp_layout_create(ctx, m->ndim, m->shape, m->ranks, t->ndim, p->map, &rs->layouts[i]), ctx);
    if (p->k == K_SHARDED) {
      dcp_box box;
      OK(dcp_layout_box(rs->layouts[i], t->shape, rank, &box), ctx);
      int64_t n = numel(t->ndim, box.size);
      uint8_t *buf = hold(rs, i, box.offset, box.size, 0, n, t);
      if (saving) span(t, i, box.offset, box.size, 0, n, buf, salt, 0);
      OK(dcp_state_add_sharded(rs->st, t->fqn, t->dt, t->ndim, t->shape, rs->layouts[i], buf), ctx);
    } else {
      dcp_box cell;
      int64_t begin, count;
      OK(dcp_layout_flat_range(rs->layouts[i], t->shape, p->flat_dims, rank, &cell, &begin, &count),
         ctx);
      uint8_t *buf = hold(rs, i, cell.offset, cell.size, begin, count, t);
      if (saving) span(t, i, cell.offset, cell.size, begin, count, buf, salt, 0);
      OK(dcp_state_add_flat_sharded(rs->st, t->fqn, t->dt, t->ndim, t->shape, rs->layouts[i],
                                    p->flat_dims, buf), ctx);
    }
    return;
  }
  OK(dcp_state_add_tensor(rs->st, t->fqn, t->dt, t->ndim, t->shape), ctx);
  if (p->k == K_WHOLE) {
    int64_t n = numel(t->ndim, t->shape);
    if (n == 0) return;
    uint8_t *buf = hold(rs, i, zero, t->shape, 0, n, t);
    if (saving) span(t, i, zero, t->shape, 0, n, buf, salt, 0);
    OK(dcp_state_add_chunk(rs->st, t->fqn, zero, t->shape, buf), ctx);
    return;
  }
  uint64_t nboxes = 1;
  for (uint32_t d = 0; d < t->ndim; d++) nboxes *= (uint64_t)p->nparts[d];
  int holed = !(saving && hole);
  for (uint64_t b = 0; b < nboxes; b++) {
    int64_t off[MAXD], size[MAXD];
    uint64_t q = b;
    for (uint32_t d = t->ndim; d-- > 0;) {
      int part = (int)(q % (uint64_t)p->nparts[d]);
      q /= (uint64_t)p->nparts[d];
      off[d] = p->cut[d][part], size[d] = p->cut[d][part + 1] - p->cut[d][part];
    }
    int64_t n = numel(t->ndim, size);
    if (n == 0) continue;
    if (!holed) { /* the hole: this box is in no rank's state */
      holed = 1;
      continue;
    }
    if (!holds_box(p, b, rank, world, saving)) continue;
    uint8_t *buf = hold(rs, i, off, size, 0, n, t);
    if (saving) span(t, i, off, size, 0, n, buf, salt, 0);
    OK(dcp_state_add_chunk(rs->st, t->fqn, off, size, buf), ctx);
  }
}

/* rs's state of side s (the tensors in mask; the per-rank bytes item only
 * when per_rank: a load by another world cannot have it). */
static void build(dcp_ctx *ctx, rank_state *rs, const kase *c, const side *s, int saving,
                  int mask, int per_rank, uint64_t salt) {
  int32_t rank = dcp_ctx_rank(ctx), world = dcp_ctx_world_size(ctx);
  memset(rs, 0, sizeof *rs);
  OK(dcp_state_create(ctx, &rs->st), ctx);
  for (int i = 0; i < c->nt; i++)
    if (mask >> i & 1) add_tensor(ctx, rs, s, &c->t[i], i, rank, world, saving, c->hole == i, salt);
  rs->rng_len = 3 * (size_t)(rank + 1);
  for (size_t b = 0; saving && b < sizeof rs->step; b++) rs->step[b] = value(99, 0, b, salt);
  for (size_t b = 0; saving && b < rs->rng_len; b++) rs->rng_item[b] = value(98, (uint64_t)rank, b, salt);
  OK(dcp_state_add_bytes(rs->st, "step", DCP_SCOPE_REPLICATED, rs->step, sizeof rs->step), ctx);
  if (per_rank)
    OK(dcp_state_add_bytes(rs->st, "rng", DCP_SCOPE_PER_RANK, rs->rng_item, rs->rng_len), ctx);
  else
    rs->rng_len = 0;
}

static void scribble(rank_state *rs, const kase *c) {
  for (int k = 0; k < rs->nh; k++)
    if (rs->h[k].count)
      memset(rs->h[k].buf, 0xA5, (size_t)rs->h[k].count * dcp_dtype_size(c->t[rs->h[k].tensor].dt));
  memset(rs->step, 0xA5, sizeof rs->step);
  memset(rs->rng_item, 0xA5, rs->rng_len);
}

static void release(rank_state *rs) {
  dcp_state_free(rs->st);
  for (int k = 0; k < rs->nh; k++) free(rs->h[k].buf);
  for (int i = 0; i < MAXT; i++) dcp_layout_free(rs->layouts[i]);
}

/* ---- one round -------------------------------------------------------- */

static void describe(const kase *c, int32_t rank) {
  if (rank != 0) return;
  printf("  %d tensors, block %u, %s%s%s%s%s, dedup %d:", c->nt, c->block_size,
         c->policy == DCP_POLICY_BALANCED ? "balanced" : "lowest",
         c->flags & DCP_SAVE_COMPRESS ? ", zstd" : "",
         c->flags & DCP_SAVE_CHECK_REPLICAS ? ", replica check" : "",
         !c->async ? ", sync" : c->background ? ", async (background)" : ", async",
         c->twice ? ", saved twice" : "", (int)c->dedup);
  printf(" load flags %u, %s reader, in flight %llu;", c->load_flags,
         c->reader_policy == DCP_POLICY_BALANCED ? "balanced" : "lowest",
         (unsigned long long)c->max_inflight);
  if (c->hole >= 0) printf(" (%s has a box nobody saves)", c->t[c->hole].fqn);
  if (c->corrupt) printf(" (a data file %s)", c->corrupt == 1 ? "with a byte flipped" : "cut short");
  if (c->bad_load) printf(" (a load %s first)", c->bad_load == 1 ? "of another dtype" : "of a missing tensor");
  for (int i = 0; i < c->nt; i++) {
    printf(" %s[", c->t[i].fqn);
    for (uint32_t d = 0; d < c->t[i].ndim; d++) printf("%s%lld", d ? "x" : "", (long long)c->t[i].shape[d]);
    printf(" %s->%s]", kind_name[c->save.p[i].k],
           c->load_mask >> i & 1 ? kind_name[c->load.p[i].k] : "-");
  }
  for (int s = 0; s < 2; s++) {
    const side *sd = s ? &c->load : &c->save;
    for (int k = 0; k < sd->nmeshes; k++) {
      printf(" %s mesh %d [", s ? "load" : "save", k);
      for (uint32_t d = 0; d < sd->meshes[k].ndim; d++) printf("%s%lld", d ? "x" : "", (long long)sd->meshes[k].shape[d]);
      printf("] ranks");
      for (int32_t r = 0; r < sd->meshes[k].n; r++) printf(" %d", sd->meshes[k].ranks[r]);
    }
  }
  printf("\n");
  fflush(stdout);
}

/* Whether c's save is uncoordinated: async, by writers that do not talk
 * (each commits its rank's part; nobody can see a gap between parts). */
static int uncoordinated(const ak_args *a, const kase *c, int32_t world) {
  return c->async && world > 1 && a->writer_coll && !strcmp(a->writer_coll, "none");
}

/* Every rank here once every rank got here: a sync save of one byte per
 * rank (async saves coordinated "none" commit each rank's part on its own:
 * a load must wait for all of them). */
static void barrier(dcp_ctx *ctx, const ak_args *a) {
  char path[600];
  uint8_t one = 1;
  snprintf(path, sizeof path, "%s/barrier", a->dir);
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  OK(dcp_state_add_bytes(st, "b", DCP_SCOPE_PER_RANK, &one, 1), ctx);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  OK(dcp_save(ctx, st, path, &o), ctx);
  dcp_state_free(st);
}

/* Save c's save side into path; returns the save's status (an async
 * one's from its wait). */
static dcp_status save_once(dcp_ctx *ctx, const ak_args *a, const kase *c, const char *path,
                            uint64_t salt, int overwrite) {
  dcp_status rc;
  rank_state rs;
  build(ctx, &rs, c, &c->save, 1, (1 << c->nt) - 1, 1, salt);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.block_size = c->block_size;
  o.flags = c->flags | (overwrite ? DCP_SAVE_OVERWRITE : 0);
  o.policy = c->policy;
  if (c->async) {
    dcp_async *h;
    OK(dcp_async_set_staging(ctx, c->background ? DCP_ASYNC_STAGE_BACKGROUND
                                                : DCP_ASYNC_STAGE_BLOCKING), ctx);
    if (a->writer_coll && !strcmp(a->writer_coll, "none") && (o.flags & DCP_SAVE_CHECK_REPLICAS)) {
      h = NULL; /* writers that do not coordinate cannot compare replicas: refused at once */
      CHECK(dcp_async_save(ctx, rs.st, path, &o, &h) == DCP_EINVAL && !h,
            "an uncoordinated async save with DCP_SAVE_CHECK_REPLICAS was not refused");
      o.flags &= ~DCP_SAVE_CHECK_REPLICAS;
    }
    OK(dcp_async_save(ctx, rs.st, path, &o, &h), ctx);
    dcp_state_free(rs.st); /* allowed once the save returned, in either mode */
    rs.st = NULL;
    OK(dcp_async_fence(h), ctx);
    scribble(&rs, c); /* staged already: the checkpoint must not see this */
    rc = dcp_async_wait(h);
    dcp_async_free(h);
    if (uncoordinated(a, c, dcp_ctx_world_size(ctx))) barrier(ctx, a);
  } else {
    rc = dcp_save(ctx, rs.st, path, &o);
  }
  release(&rs);
  return rc;
}

/* The salt of the values the round's checkpoint ends with. */
static uint64_t final_salt(uint64_t seed, int round, const kase *c) {
  uint64_t salt = mix(seed ^ (uint64_t)round);
  return c->twice ? mix(salt) : salt;
}

/* Save the round's checkpoint (twice, overwriting, when the case says). */
static void save_round(dcp_ctx *ctx, const ak_args *a, const kase *c, uint64_t seed, int round) {
  char path[600];
  snprintf(path, sizeof path, "%s/round%d", a->dir, round);
  uint64_t salt = mix(seed ^ (uint64_t)round);
  kase whole = *c;
  whole.hole = -1;
  int keeps_hole = c->hole >= 0 && uncoordinated(a, c, dcp_ctx_world_size(ctx));
  dcp_status rc = save_once(ctx, a, c, path, salt, 0);
  if (c->hole >= 0 && !keeps_hole) {
    /* a coordinated save sees the gap: it fails on every rank, naming the
     * tensor, and commits nothing; then the round saves it whole */
    CHECK(rc == DCP_EINCOMPLETE && strstr(dcp_ctx_last_error(ctx), c->t[c->hole].fqn),
          "seed %llu round %d: a save of %s with a box nobody holds returned %s: %s",
          (unsigned long long)seed, round, c->t[c->hole].fqn, dcp_strerror(rc),
          dcp_ctx_last_error(ctx));
    dcp_meta *m = NULL;
    CHECK(dcp_meta_open(ctx, path, &m) == DCP_EINCOMPLETE, "the incomplete save committed");
    rc = save_once(ctx, a, &whole, path, salt, 0);
  }
  OK(rc, ctx);
  if (c->twice) OK(save_once(ctx, a, keeps_hole ? c : &whole, path, mix(salt), 1), ctx);
}

/* Damage one data file of the checkpoint at path: flip one of its bytes,
 * or (cut) truncate it to fewer bytes (file, byte and length drawn from
 * seed and round). */
static void damage(const char *path, uint64_t seed, int round, int cut) {
  char names[64][256];
  int n = 0;
  DIR *d = opendir(path);
  CHECK(d, "cannot list %s", path);
  for (struct dirent *e; (e = readdir(d)) && n < 64;)
    if (!strncmp(e->d_name, "data-", 5)) snprintf(names[n++], sizeof names[0], "%s", e->d_name);
  closedir(d);
  if (n == 0) return; /* nothing stored in data files (all empty) */
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  rng r = {mix(seed ^ ((uint64_t)round << 32) ^ 0x666c6970)};
  char file[900];
  snprintf(file, sizeof file, "%s/%s", path, names[range(&r, 0, n - 1)]);
  FILE *f = fopen(file, "r+b");
  CHECK(f, "cannot open %s", file);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  if (size > 0 && cut) {
    CHECK(truncate(file, (off_t)range(&r, 0, size - 1)) == 0, "cannot truncate %s", file);
  } else if (size > 0) {
    long at = (long)range(&r, 0, size - 1);
    fseek(f, at, SEEK_SET);
    int ch = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(ch ^ (int)range(&r, 1, 255), f);
  }
  fclose(f);
}

/* Load the round's checkpoint (saved by save_world ranks) into the case's
 * load side and compare every byte; the per-rank item only when this is
 * the saving world. */
static void load_round(dcp_ctx *ctx, const ak_args *a, const kase *c, uint64_t seed, int round,
                       int32_t save_world) {
  int32_t rank = dcp_ctx_rank(ctx);
  int same_world = save_world == dcp_ctx_world_size(ctx);
  int hole = c->hole >= 0 && uncoordinated(a, c, save_world) ? c->hole : -1;
  char path[600];
  snprintf(path, sizeof path, "%s/round%d", a->dir, round);
  uint64_t salt = final_salt(seed, round, c);
  rank_state rs;
  dcp_load_options lo;
  dcp_load_options_init(&lo);
  lo.read_dedup = c->dedup;
  lo.flags = c->load_flags;
  lo.reader_policy = c->reader_policy;
  lo.max_inflight_bytes = c->max_inflight;
  if (hole >= 0) { /* never a silent gap: every rank fails, naming the tensor */
    build(ctx, &rs, c, &c->load, 0, c->load_mask, same_world, salt);
    dcp_status rc = dcp_load(ctx, rs.st, path, &lo);
    CHECK(rc == DCP_EINCOMPLETE && strstr(dcp_ctx_last_error(ctx), c->t[hole].fqn),
          "seed %llu round %d: a load of %s, one of whose boxes nobody saved, returned %s: %s",
          (unsigned long long)seed, round, c->t[hole].fqn, dcp_strerror(rc),
          dcp_ctx_last_error(ctx));
    release(&rs);
  }
  if (c->bad_load) { /* a load that cannot be right fails on every rank, nothing silent */
    build(ctx, &rs, c, &c->load, 0, 0, same_world, salt);
    const tensor *t = &c->t[0];
    /* another dtype; for an F32 one of the same size: the check is on the dtype */
    dcp_dtype other = t->dt == DCP_F32 ? DCP_I32 : DCP_F32;
    const char *fqn = c->bad_load == 1 ? t->fqn : "m.9.ghost";
    OK(dcp_state_add_tensor(rs.st, fqn, c->bad_load == 1 ? other : t->dt, t->ndim, t->shape), ctx);
    dcp_status rc = dcp_load(ctx, rs.st, path, &lo);
    dcp_status want = c->bad_load == 1 ? DCP_EMISMATCH : DCP_ENOTFOUND;
    CHECK(rc == want && strstr(dcp_ctx_last_error(ctx), fqn),
          "seed %llu round %d: a load of %s %s returned %s: %s", (unsigned long long)seed, round,
          fqn, c->bad_load == 1 ? "with another dtype" : "(not saved)", dcp_strerror(rc),
          dcp_ctx_last_error(ctx));
    release(&rs);
  }
  int mask = hole >= 0 ? c->load_mask & ~(1 << hole) : c->load_mask;
  int corrupt = c->corrupt && hole < 0;
  if (corrupt && rank == 0) damage(path, seed, round, c->corrupt == 2); /* the others wait */
  build(ctx, &rs, c, &c->load, 0, mask, same_world, salt);
  dcp_status rc = dcp_load(ctx, rs.st, path, &lo);
  if (corrupt && rc != DCP_OK) { /* caught: fine, as long as it is called corruption */
    CHECK(rc == DCP_ECORRUPT || (c->corrupt == 2 && rc == DCP_EIO),
          "seed %llu round %d: a load of a damaged checkpoint returned %s: %s",
          (unsigned long long)seed, round, dcp_strerror(rc), dcp_ctx_last_error(ctx));
    if (rank == 0) printf("    caught: %s: %s\n", dcp_strerror(rc), dcp_ctx_last_error(ctx));
    release(&rs);
    return;
  }
  OK(rc, ctx); /* and when it succeeds, every byte below must be right */
  for (int k = 0; k < rs.nh; k++) {
    const held *h = &rs.h[k];
    const tensor *t = &c->t[h->tensor];
    size_t bad = span(t, h->tensor, h->off, h->size, h->first, h->count, h->buf, salt, 1);
    CHECK(bad == 0, "seed %llu round %d: %zu bytes of %s (%s, elements %lld+%lld of its box) "
          "differ after the load", (unsigned long long)seed, round, bad, t->fqn,
          kind_name[c->load.p[h->tensor].k], (long long)h->first, (long long)h->count);
  }
  for (size_t b = 0; b < sizeof rs.step; b++)
    CHECK(rs.step[b] == value(99, 0, b, salt), "seed %llu round %d: step differs",
          (unsigned long long)seed, round);
  for (size_t b = 0; b < rs.rng_len; b++)
    CHECK(rs.rng_item[b] == value(98, (uint64_t)rank, b, salt), "seed %llu round %d: rng differs",
          (unsigned long long)seed, round);
  release(&rs);
}

int main(int argc, char **argv) {
  uint64_t seed = 1;
  int rounds = 10, save_world = 0;
  for (int i = 1; i + 1 < argc; i++) {
    if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 10);
    if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "--save-world")) save_world = atoi(argv[i + 1]);
  }
  ak_args a;
  ak_parse(argc, argv, &a);
  int saving = !strcmp(a.mode, "run") || !strcmp(a.mode, "save");
  int loading = !strcmp(a.mode, "run") || !strcmp(a.mode, "load");
  CHECK(saving || loading, "mode %s: run, save or load", a.mode);
  dcp_ctx *ctx = ak_open_ctx(&a);
  g_rank = dcp_ctx_rank(ctx);
  int32_t world = dcp_ctx_world_size(ctx);
  if (saving || save_world <= 0) save_world = world;
  CHECK(world <= MAXW && save_world <= MAXW, "at most %d ranks", MAXW);
  if (g_rank == 0)
    printf("property: %s, seed %llu, %d rounds, saved by %d ranks%s%d\n", a.mode,
           (unsigned long long)seed, rounds, save_world, loading ? ", loaded by " : ", ",
           loading ? world : 0);
  for (int r = 0; r < rounds; r++) {
    kase c;
    draw_case(seed, r, save_world, world, &c);
    describe(&c, g_rank);
    if (saving) save_round(ctx, &a, &c, seed, r);
    if (loading) load_round(ctx, &a, &c, seed, r, save_world);
  }
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}
