/* fc_model.c — the fault campaign's seeded model: a few row-sharded and
 * replicated tensors of mixed dtypes plus a replicated and a per-rank
 * bytes item, whose every byte is a function of (seed, generation, item,
 * position), so a load can be compared byte for byte. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc.h"

int fc_rank;
long fc_cur_trial = -1;

void fc_die(const char *file, int line, const char *fmt, ...) {
  fprintf(stderr, "fault campaign: rank %d, trial %ld: %s:%d: ", fc_rank, fc_cur_trial, file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  exit(1);
}

/* splitmix64 */
uint64_t fc_next(fc_rng *r) {
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fc_range(fc_rng *r, uint64_t lo, uint64_t hi) {
  return lo + fc_next(r) % (hi - lo + 1);
}

void fc_model_make(fc_model *m, uint64_t seed, int world) {
  static const dcp_dtype dtypes[] = {DCP_F32, DCP_I64, DCP_U8, DCP_BF16};
  fc_rng r = {seed};
  memset(m, 0, sizeof *m);
  m->seed = seed;
  m->world = world;
  m->ntensors = (int)fc_range(&r, 1, FC_MAX_TENSORS - 1);
  for (int i = 0; i < m->ntensors; i++) {
    fc_tensor *t = &m->t[i];
    snprintf(t->fqn, sizeof t->fqn, "layer%d.w", i);
    t->dtype = dtypes[fc_range(&r, 0, 3)];
    t->rows = (int64_t)fc_range(&r, 1, 48);
    t->cols = (int64_t)fc_range(&r, 1, 400);
    t->replicated = i > 0 && fc_range(&r, 0, 3) == 0;
  }
  if (fc_range(&r, 0, 15) == 0) {
    /* one trial in 16: a tensor of 9 MiB per rank, so a data file takes
     * several writes (appends are gathered up to 16 MiB, an item of 8 MiB
     * or more goes straight from memory: src/runtime/blocks.c) */
    fc_tensor *t = &m->t[m->ntensors++];
    snprintf(t->fqn, sizeof t->fqn, "big.w");
    t->dtype = DCP_U8;
    t->rows = 2304 * (int64_t)world;
    t->cols = 4096;
  }
  m->cfg_len = (size_t)fc_range(&r, 0, 200);
  m->rng_len = (size_t)fc_range(&r, 1, 64);
  m->block_size = fc_range(&r, 0, 1) ? 4096 : 16384;
  m->compress = fc_range(&r, 0, 3) == 0;
  m->low_entropy = fc_range(&r, 0, 1);
}

/* This rank's rows of tensor t: [*row0, *row0 + *rows). */
static void my_rows(const fc_model *m, const fc_tensor *t, int rank, int64_t *row0,
                    int64_t *rows) {
  if (t->replicated) {
    *row0 = 0, *rows = t->rows;
    return;
  }
  int64_t per = (t->rows + m->world - 1) / m->world;
  int64_t a = per * rank < t->rows ? per * rank : t->rows;
  int64_t b = a + per < t->rows ? a + per : t->rows;
  *row0 = a, *rows = b - a;
}

static size_t row_bytes(const fc_tensor *t) {
  return (size_t)t->cols * dcp_dtype_size(t->dtype);
}

/* Bytes [base, base + n) of item `item` in generation gen into dst: 8 at
 * a time from one hash of (seed, gen, item, pos / 8), so a large item is
 * cheap to fill. Low-entropy models keep 2 bits a byte (zstd shrinks them). */
static void item_bytes(const fc_model *m, uint32_t gen, uint64_t item, uint64_t base,
                       uint8_t *dst, size_t n) {
  uint64_t key = m->seed ^ ((uint64_t)gen << 40) ^ (item << 56);
  uint64_t mask = m->low_entropy ? 0x0303030303030303ull : ~0ull;
  for (size_t k = 0; k < n;) {
    uint64_t pos = base + k;
    fc_rng r = {key ^ (pos / 8)};
    uint64_t w = fc_next(&r) & mask;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (pos % 8 == 0 && n - k >= 8) { /* the same bytes, a word at a time */
      memcpy(dst + k, &w, 8);
      k += 8;
      continue;
    }
#endif
    for (unsigned j = (unsigned)(pos % 8); j < 8 && k < n; j++, k++)
      dst[k] = (uint8_t)(w >> (j * 8));
  }
}

/* Size in bytes of this rank's part of tensor i, and where it starts. */
static size_t part_of(const fc_model *m, int i, int rank, size_t *base) {
  int64_t row0, rows;
  my_rows(m, &m->t[i], rank, &row0, &rows);
  *base = (size_t)row0 * row_bytes(&m->t[i]);
  return (size_t)rows * row_bytes(&m->t[i]);
}

static void alloc_bufs(const fc_model *m, int rank, fc_bufs *b) {
  memset(b, 0, sizeof *b);
  for (int i = 0; i < m->ntensors; i++) {
    int64_t row0, rows;
    my_rows(m, &m->t[i], rank, &row0, &rows);
    b->t[i] = malloc((size_t)rows * row_bytes(&m->t[i]) + 1);
    FC_CHECK(b->t[i], "out of memory");
  }
  b->cfg = malloc(m->cfg_len + 1);
  b->rng = malloc(m->rng_len + 1);
  FC_CHECK(b->cfg && b->rng, "out of memory");
}

void fc_bufs_fill(const fc_model *m, int rank, uint32_t gen, fc_bufs *b) {
  alloc_bufs(m, rank, b);
  for (int i = 0; i < m->ntensors; i++) {
    size_t base, n = part_of(m, i, rank, &base);
    item_bytes(m, gen, (uint64_t)i, base, b->t[i], n);
  }
  item_bytes(m, m->static_cfg ? 0 : gen, 10, 0, b->cfg, m->cfg_len);
  item_bytes(m, gen, 20 + (uint64_t)rank, 0, b->rng, m->rng_len);
}

void fc_bufs_poison(const fc_model *m, int rank, fc_bufs *b) {
  alloc_bufs(m, rank, b);
  for (int i = 0; i < m->ntensors; i++) {
    int64_t row0, rows;
    my_rows(m, &m->t[i], rank, &row0, &rows);
    memset(b->t[i], 0xA5, (size_t)rows * row_bytes(&m->t[i]));
  }
  memset(b->cfg, 0xA5, m->cfg_len);
  memset(b->rng, 0xA5, m->rng_len);
}

void fc_bufs_free(fc_bufs *b) {
  for (int i = 0; i < FC_MAX_TENSORS; i++) free(b->t[i]);
  free(b->cfg);
  free(b->rng);
  memset(b, 0, sizeof *b);
}

/* per_rank: compare the PER_RANK item too. */
static bool bufs_equal(const fc_model *m, int rank, uint32_t gen, const fc_bufs *b,
                       bool per_rank) {
  fc_bufs want;
  fc_bufs_fill(m, rank, gen, &want);
  bool ok = memcmp(want.cfg, b->cfg, m->cfg_len) == 0 &&
            (!per_rank || memcmp(want.rng, b->rng, m->rng_len) == 0);
  for (int i = 0; i < m->ntensors && ok; i++) {
    size_t base, n = part_of(m, i, rank, &base);
    ok = memcmp(want.t[i], b->t[i], n) == 0;
  }
  fc_bufs_free(&want);
  return ok;
}

bool fc_bufs_equal(const fc_model *m, int rank, uint32_t gen, const fc_bufs *b) {
  return bufs_equal(m, rank, gen, b, true);
}

/* The state of rank over b (pointers into b); per_rank: with the PER_RANK
 * item. */
static dcp_state *state_of(dcp_ctx *ctx, int rank, const fc_model *m, const fc_bufs *b,
                           bool per_rank) {
  dcp_state *st;
  FC_CHECK(dcp_state_create(ctx, &st) == DCP_OK, "state: %s", dcp_ctx_last_error(ctx));
  for (int i = 0; i < m->ntensors; i++) {
    const fc_tensor *t = &m->t[i];
    int64_t shape[2] = {t->rows, t->cols}, row0, rows;
    my_rows(m, t, rank, &row0, &rows);
    int64_t off[2] = {row0, 0}, size[2] = {rows, t->cols};
    FC_CHECK(dcp_state_add_tensor(st, t->fqn, t->dtype, 2, shape) == DCP_OK &&
                 dcp_state_add_chunk(st, t->fqn, off, size, rows ? b->t[i] : NULL) == DCP_OK,
             "state of %s: %s", t->fqn, dcp_ctx_last_error(ctx));
  }
  FC_CHECK(dcp_state_add_bytes(st, "cfg", DCP_SCOPE_REPLICATED, m->cfg_len ? b->cfg : NULL,
                               m->cfg_len) == DCP_OK &&
               (!per_rank ||
                dcp_state_add_bytes(st, "rng", DCP_SCOPE_PER_RANK, b->rng, m->rng_len) == DCP_OK),
           "state bytes: %s", dcp_ctx_last_error(ctx));
  return st;
}

static dcp_state *make_state(dcp_ctx *ctx, const fc_model *m, const fc_bufs *b) {
  return state_of(ctx, dcp_ctx_rank(ctx), m, b, true);
}

dcp_status fc_save(dcp_ctx *ctx, const fc_model *m, uint32_t gen, const char *path,
                   uint32_t flags, bool async) {
  fc_bufs b;
  fc_bufs_fill(m, dcp_ctx_rank(ctx), gen, &b);
  dcp_state *st = make_state(ctx, m, &b);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = flags | (m->compress ? DCP_SAVE_COMPRESS : 0);
  o.block_size = m->block_size;
#ifdef FC_HAVE_SAVE_ID
  o.save_id = gen; /* an uncoordinated save's identity (coordinated saves ignore it) */
#endif
  dcp_status rc;
  if (async) {
    dcp_async *h = NULL;
    rc = dcp_async_save(ctx, st, path, &o, &h);
    dcp_state_free(st);
    fc_bufs_free(&b); /* staged: the save must not need them any more */
    if (!rc) rc = dcp_async_wait(h);
    dcp_async_free(h);
    return rc;
  }
  rc = dcp_save(ctx, st, path, &o);
  dcp_state_free(st);
  fc_bufs_free(&b);
  return rc;
}

dcp_status fc_load(dcp_ctx *ctx, const fc_model *m, uint32_t gen, const char *path,
                   bool *exact) {
  int rank = dcp_ctx_rank(ctx);
  fc_bufs b;
  fc_bufs_poison(m, rank, &b);
  dcp_state *st = make_state(ctx, m, &b);
  dcp_status rc = dcp_load(ctx, st, path, NULL);
  dcp_state_free(st);
  *exact = fc_bufs_equal(m, rank, gen, &b);
  fc_bufs_free(&b);
  return rc;
}

dcp_status fc_load_either(dcp_ctx *ctx, const fc_model *m, uint32_t gen_a, uint32_t gen_b,
                          const char *path, int *which) {
  int rank = dcp_ctx_rank(ctx);
  fc_bufs b;
  fc_bufs_poison(m, rank, &b);
  dcp_state *st = make_state(ctx, m, &b);
  dcp_status rc = dcp_load(ctx, st, path, NULL);
  dcp_state_free(st);
  *which = fc_bufs_equal(m, rank, gen_a, &b) ? 0 : fc_bufs_equal(m, rank, gen_b, &b) ? 1 : -1;
  fc_bufs_free(&b);
  return rc;
}

dcp_status fc_load_match(dcp_ctx *ctx, const fc_model *m, const char *path,
                         const uint32_t *gens, int n, int *which) {
  bool own_world = dcp_ctx_world_size(ctx) == m->world;
  fc_model whole = *m;
  if (!own_world) {
    /* every byte of an item is a function of its position in the whole
     * tensor, so the whole model is the same model in a world of one */
    FC_CHECK(dcp_ctx_world_size(ctx) == 1, "a whole-model load needs a world of one");
    whole.world = 1;
  }
  int rank = own_world ? dcp_ctx_rank(ctx) : 0;
  fc_bufs b;
  fc_bufs_poison(&whole, rank, &b);
  dcp_state *st = state_of(ctx, rank, &whole, &b, own_world);
  dcp_status rc = dcp_load(ctx, st, path, NULL);
  dcp_state_free(st);
  *which = -1;
  for (int i = 0; i < n && *which < 0; i++)
    if (bufs_equal(&whole, rank, gens[i], &b, own_world)) *which = i;
  fc_bufs_free(&b);
  return rc;
}
