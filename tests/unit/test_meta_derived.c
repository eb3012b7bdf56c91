/* test_meta_derived.c — derived chunk lists (format version 3,
 * docs/format.md "Derived chunk lists"): on random grids, flat ranges and
 * irregular partitions, the chunks a view derives equal, element by
 * element, the explicit list that was added; the same content written as
 * version 2 (every list listed) still reads to the same chunks; a save
 * through the public API with one layout loads byte for byte with another. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta_gen.h"
#include "metadata/derive.h"
#include "metadata/meta.h"
#include "metadata/view.h"
#include "runtime/commit.h"
#include "testutil.h"

#define MAXC 4096 /* chunks per generated tensor */
#define ND 3      /* dimensions at most */
#define PINNED_ENCODING_HASH 0xf0b6050d800ab3dfull /* test_encoding_pinned */

typedef struct xchunk {
  int64_t off[ND], size[ND]; /* zero past ndim: whole-array compares order right */
  uint32_t file;
  uint64_t offset, cks[2];
  uint32_t block_size;
} xchunk;

typedef struct xtensor {
  uint32_t ndim;
  int64_t shape[ND];
  size_t n;
  xchunk c[MAXC];
  int64_t mesh_cells[ND]; /* > 0: record a mesh whose layout has these cells */
  int expect_derived;     /* the encoder must find a GRID or FLAT form */
} xtensor;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

static void push(xtensor *t, const int64_t *off, const int64_t *size) {
  assert_true(t->n < MAXC);
  xchunk *c = &t->c[t->n++];
  memset(c, 0, sizeof *c);
  memcpy(c->off, off, t->ndim * sizeof *off);
  memcpy(c->size, size, t->ndim * sizeof *size);
}

/* Per dimension the sub-cell boundaries of n outer cells split k ways,
 * computed the plain way (the reference for dcpi_grid). */
static int cuts_1d(int64_t e, int64_t n, int64_t k, int64_t *start, int64_t *len) {
  int64_t c = ceil_div(e, n);
  int m = 0;
  for (int64_t o = 0; o < e; o += c) {
    int64_t s = e - o < c ? e - o : c, q = ceil_div(s, k);
    for (int64_t p = 0; p < s; p += q) start[m] = o + p, len[m++] = s - p < q ? s - p : q;
  }
  return m;
}

/* A random grid: every product of per-dimension sub-cells. */
static void gen_grid(tu_rng *rng, xtensor *t) {
  int64_t st[ND][64], ln[ND][64];
  int m[ND];
  size_t total = 1;
  do {
    t->ndim = (uint32_t)tu_rng_range(rng, 1, ND);
    total = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
      t->shape[d] = tu_rng_range(rng, 1, 40);
      m[d] = cuts_1d(t->shape[d], tu_rng_range(rng, 1, 5), tu_rng_range(rng, 1, 4), st[d], ln[d]);
      total *= (size_t)m[d];
    }
  } while (total < 2 || total > MAXC);
  t->n = 0;
  for (size_t i = 0; i < total; i++) {
    int64_t off[ND], size[ND];
    size_t r = i;
    for (uint32_t d = t->ndim; d-- > 0;) {
      off[d] = st[d][r % (size_t)m[d]], size[d] = ln[d][r % (size_t)m[d]];
      r /= (size_t)m[d];
    }
    push(t, off, size);
  }
  t->expect_derived = 1;
}

/* Random flat ranges: the tensor's layout cells (cells per dim), each cut
 * into f ranges of ceil(numel/f) elements, every range through the public
 * dcp_flat_to_boxes. */
static void push_flat(xtensor *t, int64_t f);

static void gen_flat(tu_rng *rng, xtensor *t) {
  do {
    t->ndim = (uint32_t)tu_rng_range(rng, 1, ND);
    for (uint32_t d = 0; d < t->ndim; d++) {
      t->shape[d] = tu_rng_range(rng, 1, 24);
      t->mesh_cells[d] = tu_rng_range(rng, 1, 3);
    }
    push_flat(t, tu_rng_range(rng, 1, 9));
  } while (t->n < 2);
  t->expect_derived = t->n < MAXC - 64; /* complete: every cell cut */
  if (tu_rng_range(rng, 0, 3) == 0) memset(t->mesh_cells, 0, sizeof t->mesh_cells), t->expect_derived = 0;
}

/* The chunks of t's mesh cells each cut into f flat ranges. */
static void push_flat(xtensor *t, int64_t f) {
  {
    t->n = 0;
    int64_t c[ND], n[ND], cells = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
      c[d] = ceil_div(t->shape[d], t->mesh_cells[d]);
      n[d] = ceil_div(t->shape[d], c[d]);
      cells *= n[d];
    }
    for (int64_t cell = 0; cell < cells && t->n + 64 < MAXC; cell++) {
      dcp_box region = {.ndim = t->ndim};
      int64_t r = cell, numel = 1;
      for (uint32_t d = t->ndim; d-- > 0;) {
        region.offset[d] = (r % n[d]) * c[d];
        region.size[d] = t->shape[d] - region.offset[d] < c[d] ? t->shape[d] - region.offset[d] : c[d];
        numel *= region.size[d];
        r /= n[d];
      }
      int64_t per = ceil_div(numel, f);
      for (int64_t b = 0; b < numel; b += per) {
        dcp_box out[2 * ND];
        size_t nb;
        assert_int_equal(dcp_flat_to_boxes(&region, b, numel - b < per ? numel - b : per, out,
                                           2 * ND, &nb), DCP_OK);
        for (size_t i = 0; i < nb; i++) push(t, out[i].offset, out[i].size);
      }
    }
  }
}

/* An irregular partition: random guillotine cuts of the whole tensor. */
static void cut(tu_rng *rng, xtensor *t, int64_t *off, int64_t *size, int depth) {
  uint32_t d = (uint32_t)tu_rng_range(rng, 0, (int64_t)t->ndim - 1);
  if (depth == 0 || size[d] < 2 || t->n + 2 >= MAXC) {
    push(t, off, size);
    return;
  }
  int64_t at = tu_rng_range(rng, 1, size[d] - 1), o2[ND], s2[ND];
  memcpy(o2, off, sizeof o2), memcpy(s2, size, sizeof s2);
  s2[d] = at;
  cut(rng, t, o2, s2, depth - 1);
  o2[d] = off[d] + at, s2[d] = size[d] - at;
  cut(rng, t, o2, s2, depth - 1);
}

static void gen_irregular(tu_rng *rng, xtensor *t) {
  do {
    t->ndim = (uint32_t)tu_rng_range(rng, 1, ND);
    for (uint32_t d = 0; d < t->ndim; d++) t->shape[d] = tu_rng_range(rng, 2, 30);
    int64_t off[ND] = {0}, size[ND];
    memcpy(size, t->shape, sizeof size);
    t->n = 0;
    cut(rng, t, off, size, (int)tu_rng_range(rng, 2, 7));
  } while (t->n < 2);
}

static int cmp_x(const void *a, const void *b) {
  const xchunk *x = a, *y = b;
  for (int d = 0; d < ND; d++)
    if (x->off[d] != y->off[d]) return x->off[d] < y->off[d] ? -1 : 1;
  for (int d = 0; d < ND; d++)
    if (x->size[d] != y->size[d]) return x->size[d] < y->size[d] ? -1 : 1;
  return 0;
}

/* Random storage: files, offsets, block sizes and checksums per chunk. */
static void give_refs(tu_rng *rng, xtensor *t) {
  uint64_t end[4] = {0};
  for (size_t i = 0; i < t->n; i++) {
    xchunk *c = &t->c[i];
    c->file = (uint32_t)tu_rng_range(rng, 0, 3);
    c->offset = tu_rng_range(rng, 0, 2) ? end[c->file] : (uint64_t)tu_rng_range(rng, 0, 1 << 20);
    c->block_size = tu_rng_range(rng, 0, 4) ? 1u << 20 : 4096;
    c->cks[0] = tu_rng_next(rng), c->cks[1] = tu_rng_next(rng);
    int64_t bytes = 2;
    for (uint32_t d = 0; d < t->ndim; d++) bytes *= c->size[d];
    end[c->file] = c->offset + (uint64_t)bytes;
  }
}

/* Encode t (chunks added in a shuffled order) as format `version`. */
static void *encode(tu_rng *rng, const xtensor *t, uint32_t version, size_t *len) {
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_format_version(md, version, &err), DCP_OK);
  int32_t mesh = -1;
  uint32_t map[ND] = {0};
  if (t->mesh_cells[0] > 0) {
    int64_t world = 1;
    for (uint32_t d = 0; d < t->ndim; d++) world *= t->mesh_cells[d], map[d] = 1u << d;
    assert_int_equal(dcpi_md_set_world(md, (int32_t)world, &err), DCP_OK);
    assert_int_equal(dcpi_md_add_mesh(md, t->ndim, t->mesh_cells, NULL, NULL, &err), DCP_OK);
    mesh = 0;
  }
  for (int f = 0; f < 4; f++) {
    char name[16];
    snprintf(name, sizeof name, "f%d", f);
    assert_int_equal(dcpi_md_add_file(md, name, NULL, &err), DCP_OK);
  }
  uint32_t tid;
  assert_int_equal(dcpi_md_add_tensor(md, "t", DCP_BF16, t->ndim, t->shape, mesh,
                                      mesh >= 0 ? map : NULL, &tid, &err), DCP_OK);
  size_t *order = malloc(t->n * sizeof *order);
  for (size_t i = 0; i < t->n; i++) order[i] = i;
  for (size_t i = t->n; i-- > 1;) {
    size_t j = (size_t)tu_rng_range(rng, 0, (int64_t)i), x = order[i];
    order[i] = order[j], order[j] = x;
  }
  for (size_t k = 0; k < t->n; k++) {
    const xchunk *c = &t->c[order[k]];
    int64_t raw = 2;
    for (uint32_t d = 0; d < t->ndim; d++) raw *= c->size[d];
    dcp_storage_ref ref = {.file = c->file, .codec = DCP_CODEC_NONE, .block_size = c->block_size,
                           .offset = c->offset, .stored_length = (uint64_t)raw,
                           .raw_length = (uint64_t)raw,
                           .block_count = ((uint64_t)raw + c->block_size - 1) / c->block_size,
                           .block_checksums = NULL};
    uint64_t cks[64];
    for (uint64_t b = 0; b < ref.block_count && b < 64; b++) cks[b] = c->cks[b & 1] + b;
    assert_true(ref.block_count <= 64);
    ref.block_checksums = cks;
    assert_int_equal(dcpi_md_add_chunk(md, tid, c->off, c->size, &ref, &err), DCP_OK);
  }
  free(order);
  void *buf;
  assert_int_equal(dcpi_md_encode(md, &buf, len, &err), DCP_OK);
  dcpi_md_free(md);
  return buf;
}

/* The chunk of t's sorted list with the box of ci (it must have one). */
static const xchunk *find_x(const xtensor *t, const dcp_chunk_info *ci) {
  xchunk key;
  memset(&key, 0, sizeof key);
  memcpy(key.off, ci->box.offset, t->ndim * sizeof *key.off);
  memcpy(key.size, ci->box.size, t->ndim * sizeof *key.size);
  const xchunk *c = bsearch(&key, t->c, t->n, sizeof *t->c, cmp_x);
  assert_non_null(c);
  return c;
}

/* Compare chunk i of view v with t's list: the same position in versions
 * 2 and 3 (sorted), the chunk of the same box in version 4 (a FLAT list is
 * in generation order there), each of t's chunks once (seen). */
static void check_chunk(const xtensor *t, dcp_meta *v, size_t i, uint32_t version,
                        unsigned char *seen) {
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(v, 0, i, &ci), DCP_OK);
  const xchunk *c = version >= 4 ? find_x(t, &ci) : &t->c[i];
  if (seen) {
    assert_false(seen[c - t->c]);
    seen[c - t->c] = 1;
  }
  for (uint32_t d = 0; d < t->ndim; d++) {
    assert_int_equal(ci.box.offset[d], c->off[d]);
    assert_int_equal(ci.box.size[d], c->size[d]);
  }
  assert_int_equal(ci.ref.file, c->file);
  assert_int_equal(ci.ref.offset, c->offset);
  assert_int_equal(ci.ref.block_size, c->block_size);
  for (uint64_t b = 0; b < ci.ref.block_count; b++)
    assert_int_equal(ci.ref.block_checksums[b], c->cks[b & 1] + b);
}

/* Open buf and compare every chunk with t's sorted list; returns the form.
 * Version 4: first in a random order on a fresh view (each chunk from its
 * skip window, the list never decoded whole), then again after a decode
 * of the whole list. */
static int check_view(tu_rng *rng, const xtensor *t, const void *buf, size_t len,
                      uint32_t version) {
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  assert_int_equal(dcp_meta_format_version(v), version);
  dcp_tensor_info info;
  assert_int_equal(dcp_meta_tensor(v, 0, &info), DCP_OK);
  assert_int_equal(info.chunk_count, t->n);
  unsigned char *seen = calloc(t->n, 1);
  for (size_t k = 0; version >= 4 && k < t->n; k++)
    check_chunk(t, v, (size_t)tu_rng_range(rng, 0, (int64_t)t->n - 1), version, NULL);
  const int64_t *bo, *bs;
  dcpi_err err;
  assert_int_equal(dcpi_meta_chunk_boxes(v, 0, &bo, &bs, &err), DCP_OK);
  for (size_t i = 0; i < t->n; i++) check_chunk(t, v, i, version, seen);
  free(seen);
  dcpi_form fm;
  assert_int_equal(dcpi_meta_chunk_form(v, 0, &fm, &err), DCP_OK);
  dcp_meta_free(v);
  return fm.kind;
}

typedef void (*gen_fn)(tu_rng *, xtensor *);

/* Many random tensors of one generator: derived == explicit, v2 == v3;
 * counts the forms the encoder chose into forms[]. */
static void run_cases(gen_fn gen, uint64_t seed, int cases, size_t *forms, size_t *saved) {
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(seed));
  xtensor *t = calloc(1, sizeof *t);
  for (int k = 0; k < cases; k++) {
    memset(t, 0, sizeof *t);
    gen(&rng, t);
    qsort(t->c, t->n, sizeof t->c[0], cmp_x);
    give_refs(&rng, t);
    size_t l4, l3, l2;
    void *b4 = encode(&rng, t, 4, &l4), *b3 = encode(&rng, t, 3, &l3);
    void *b2 = encode(&rng, t, 2, &l2);
    int form = check_view(&rng, t, b4, l4, 4);
    if (t->expect_derived) assert_int_not_equal(form, DCPI_FORM_LISTED);
    forms[form]++;
    assert_int_equal(check_view(&rng, t, b3, l3, 3), form);
    assert_int_equal(check_view(&rng, t, b2, l2, 2), DCPI_FORM_LISTED);
    *saved += l2 - l4 < l2 ? l2 - l4 : 0;
    free(b4), free(b3), free(b2);
  }
  free(t);
}

/* FNV-1a of n bytes, folded into h. */
static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
  return h;
}

/* The encoder's bytes are pinned: 60 random tensors of each generator
 * (seeds fixed, DCP_TEST_SEED ignored), chunks added shuffled, files
 * mixing two block sizes, encoded as versions 4, 3 and 2, hash to the
 * value the encoder of 0.3 (fc5199d) gave. A speed-up of the encoder
 * must keep it; a deliberate format change updates it and says so. */
static void test_encoding_pinned(void **state) {
  (void)state;
  static const gen_fn gens[] = {gen_grid, gen_flat, gen_irregular};
  uint64_t h = 0xcbf29ce484222325ull;
  xtensor *t = calloc(1, sizeof *t);
  for (size_t g = 0; g < sizeof gens / sizeof *gens; g++) {
    tu_rng rng;
    tu_rng_seed(&rng, 19100 + g);
    for (int k = 0; k < 60; k++) {
      memset(t, 0, sizeof *t);
      gens[g](&rng, t);
      qsort(t->c, t->n, sizeof t->c[0], cmp_x);
      give_refs(&rng, t);
      for (uint32_t version = 4; version >= 2; version--) {
        size_t len;
        void *buf = encode(&rng, t, version, &len);
        h = fnv1a(h, buf, len);
        free(buf);
      }
    }
  }
  free(t);
  printf("# pinned encodings: fnv1a %016llx\n", (unsigned long long)h);
  assert_int_equal(h, PINNED_ENCODING_HASH);
}

static void test_random_grids(void **state) {
  (void)state;
  size_t forms[DCPI_FORM_COUNT] = {0}, saved = 0;
  run_cases(gen_grid, 19001, 400, forms, &saved);
  printf("# grids: %zu grid, %zu flat, %zu listed; %zu bytes saved\n", forms[1], forms[2],
         forms[0], saved);
  assert_int_equal(forms[DCPI_FORM_GRID], 400); /* every grid is found */
}

static void test_random_flat(void **state) {
  (void)state;
  size_t forms[DCPI_FORM_COUNT] = {0}, saved = 0;
  run_cases(gen_flat, 19002, 400, forms, &saved);
  printf("# flat ranges: %zu grid, %zu flat, %zu listed; %zu bytes saved\n", forms[1], forms[2],
         forms[0], saved);
  /* ranges that are whole rows are a grid; mid-row ones need FLAT; a list
   * stays LISTED only when its cells are unknown (no mesh) */
  assert_true(forms[DCPI_FORM_FLAT] > 100);
}

static void test_random_irregular(void **state) {
  (void)state;
  size_t forms[DCPI_FORM_COUNT] = {0}, saved = 0;
  run_cases(gen_irregular, 19003, 400, forms, &saved);
  printf("# irregular: %zu grid, %zu flat, %zu listed\n", forms[1], forms[2], forms[0]);
  assert_true(forms[DCPI_FORM_LISTED] > 200); /* guillotine cuts are rarely a grid */
}

/* ---- version 4 skip tables ------------------------------------------------ */

/* Read a varint at *at of p (a test-side reader of what the encoder wrote). */
static uint64_t rd_var(const uint8_t *p, size_t *at) {
  uint64_t v = 0;
  for (unsigned s = 0;; s += 7) {
    uint8_t b = p[(*at)++];
    v |= (uint64_t)(b & 0x7f) << s;
    if (!(b & 0x80)) return v;
  }
}

/* Write v as a varint of exactly n bytes at p (may be overlong). */
static void wr_var(uint8_t *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++, v >>= 7) p[i] = (uint8_t)((v & 0x7f) | (i + 1 < n ? 0x80 : 0));
}

/* Where the skip table of the one tensor's list of a version 4 file is:
 * the list, the interval's byte, each delta's position and length, and the
 * header checksum's position. */
typedef struct skip_at {
  size_t list_at, every_at, nskip, at[64], len[64], header_sum_at;
  uint64_t delta[64];
} skip_at;

static void find_skip(const uint8_t *buf, const xtensor *t, skip_at *s) {
  const uint8_t *dir = buf + DCPI_HEADER_SIZE + (DCPI_SEC_CHUNKS - 1) * DCPI_DIRENT_SIZE;
  size_t p = s->list_at = (size_t)dcpi_get_u64(dir + 8);
  assert_int_equal(buf[p++], DCPI_FORM_FLAT);
  for (uint32_t d = 0; d < 2 * t->ndim + 1; d++) rd_var(buf, &p); /* n, c per dim; f */
  s->every_at = p;
  uint64_t every = rd_var(buf, &p);
  assert_int_equal(every, DCPI_SKIP_EVERY);
  s->nskip = (t->n - 1) / every;
  assert_true(s->nskip >= 2 && s->nskip <= 64);
  for (size_t j = 0; j < s->nskip; j++) {
    s->at[j] = p;
    s->delta[j] = rd_var(buf, &p);
    s->len[j] = p - s->at[j];
  }
  s->header_sum_at = p + 8 * (s->nskip + 1); /* after the window checksums */
}

/* The window checksums as the (tampered) skip offsets cut the entries, the
 * list's header checksum, its checksum (the last 8 bytes of the one-tensor
 * index), then every section checksum and the trailer: so the tampering
 * reaches the structural checks. */
static void reseal_list(uint8_t *buf, size_t len, const skip_at *sk) {
  const uint8_t *ch = buf + DCPI_HEADER_SIZE + (DCPI_SEC_CHUNKS - 1) * DCPI_DIRENT_SIZE;
  const uint8_t *tn = buf + DCPI_HEADER_SIZE + (DCPI_SEC_TENSORS - 1) * DCPI_DIRENT_SIZE;
  size_t co = (size_t)dcpi_get_u64(ch + 8), cn = (size_t)dcpi_get_u64(ch + 16);
  size_t to = (size_t)dcpi_get_u64(tn + 8), tl = (size_t)dcpi_get_u64(tn + 16);
  size_t list_end = co + cn, cut[66];
  cut[0] = sk->header_sum_at + 8;
  for (size_t j = 0, at = sk->at[0]; j < sk->nskip; j++) cut[j + 1] = cut[j] + rd_var(buf, &at);
  cut[sk->nskip + 1] = list_end;
  for (size_t j = 0; j <= sk->nskip; j++)
    if (cut[j] <= cut[j + 1] && cut[j + 1] <= list_end)
      dcpi_put_u64(buf + sk->header_sum_at - 8 * (sk->nskip + 1 - j),
                   XXH3_64bits(buf + cut[j], cut[j + 1] - cut[j]));
  dcpi_put_u64(buf + sk->header_sum_at,
               XXH3_64bits(buf + sk->list_at, sk->header_sum_at - sk->list_at));
  dcpi_put_u64(buf + to + tl - 8, XXH3_64bits(buf + co, cn));
  g_reseal(buf, len);
}

/* Open buf: every chunk, read alone (its window) on a fresh view, either
 * fails as corrupt or is exactly t's; the whole list must fail to decode.
 * Returns how many single reads failed. */
static size_t check_hostile(const xtensor *t, const uint8_t *buf, size_t len) {
  dcp_meta *v;
  dcpi_err err;
  size_t failed = 0;
  for (size_t i = 0; i < t->n; i++) {
    assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
    dcp_chunk_info ci;
    dcp_status rc = dcp_meta_chunk(v, 0, i, &ci);
    if (rc == DCP_OK) {
      const xchunk *c = find_x(t, &ci);
      assert_int_equal(ci.ref.offset, c->offset);
      assert_int_equal(ci.ref.file, c->file);
      assert_int_equal(ci.ref.block_checksums[0], c->cks[0]);
    } else {
      assert_int_equal(rc, DCP_ECORRUPT);
      failed++;
    }
    dcp_meta_free(v);
  }
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  const int64_t *o, *s;
  assert_int_equal(dcpi_meta_chunk_boxes(v, 0, &o, &s, &err), DCP_ECORRUPT);
  printf("#   %s\n", err.msg);
  dcp_meta_free(v);
  return failed;
}

/* A skip table that disagrees with its entries (an offset moved inside an
 * entry, two offsets swapped, one below the smallest entries, one past the
 * list, another interval) is corrupt: the whole list never decodes, a
 * window read alone fails or (a window the damage does not reach) gives
 * the right chunk, and nothing is read outside the buffer (ASan). */
/* A 40 x 30 tensor over 2 column cells, each cut into 150 flat ranges
 * (360 chunks: a FLAT list of 3 skip windows), encoded as version 4. */
static uint8_t *three_windows(tu_rng *rng, xtensor **out, size_t *len) {
  xtensor *t = *out = calloc(1, sizeof *t);
  t->ndim = 2, t->shape[0] = 40, t->shape[1] = 30, t->mesh_cells[0] = 1, t->mesh_cells[1] = 2;
  push_flat(t, 150);
  qsort(t->c, t->n, sizeof t->c[0], cmp_x);
  give_refs(rng, t);
  return encode(rng, t, 4, len);
}

static void test_skip_table_hostile(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(19004));
  xtensor *t;
  size_t len;
  uint8_t *buf = three_windows(&rng, &t, &len), *bad = malloc(len);
  assert_int_equal(check_view(&rng, t, buf, len, 4), DCPI_FORM_FLAT);
  skip_at s;
  find_skip(buf, t, &s);
  assert_int_equal(s.len[0], 2);
  for (int k = 0; k < 5; k++) {
    memcpy(bad, buf, len);
    if (k == 0) wr_var(bad + s.at[0], s.delta[0] + 1, 2); /* inside an entry */
    if (k == 1) wr_var(bad + s.at[0], s.delta[0] + s.delta[1], 2), wr_var(bad + s.at[1], 9 * 128, 2);
    if (k == 2) wr_var(bad + s.at[1], 9 * 128 - 1, 2); /* fewer bytes than 128 entries take */
    if (k == 3) wr_var(bad + s.at[s.nskip - 1], 16383, 2); /* past the list */
    if (k == 4) bad[s.every_at] = 127;                    /* another interval */
    reseal_list(bad, len, &s);
    printf("# skip table case %d: %zu of %zu single reads refused\n", k, check_hostile(t, bad, len),
           t->n);
  }
  free(buf), free(bad), free(t);
}

/* Every byte of a version 4 file with a 3-window FLAT list, one bit flipped
 * each: caught at open, at the first read of the list (whichever window
 * the reads start with: every chunk is read alone on a fresh view, the
 * damaged window's and the header's checksums fail), or, in the trailer and
 * the chunks section's directory checksum, by the whole-file check. */
static void test_flip_every_byte(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(19005));
  xtensor *t;
  size_t len, seen[3] = {0};
  uint8_t *buf = three_windows(&rng, &t, &len);
  for (size_t at = 0; at < len; at++) {
    g_catch when = g_where_caught(buf, len, at);
    buf[at] ^= (uint8_t)(1u << (at % 8));
    dcp_meta *v;
    dcp_status rc = dcp_meta_open_memory(NULL, buf, len, &v);
    assert_int_equal(rc == DCP_OK, when != G_AT_OPEN);
    size_t failed = 0;
    for (size_t c = 0; v && c < t->n; c++) {
      dcp_chunk_info ci;
      dcp_status cs = dcp_meta_chunk(v, 0, (c * 97) % t->n, &ci);
      assert_true(cs == DCP_OK || cs == DCP_ECORRUPT);
      failed += cs != DCP_OK;
      if (failed) break;
    }
    if (when == G_AT_ACCESS) assert_true(failed > 0);
    if (when == G_BY_WHOLE) {
      dcpi_err err;
      assert_int_equal(failed, 0);
      assert_int_equal(dcpi_meta_check_whole(v, &err), DCP_ECORRUPT);
    }
    dcp_meta_free(v);
    seen[when]++;
    buf[at] ^= (uint8_t)(1u << (at % 8));
  }
  printf("# %zu bytes flipped: %zu caught at open, %zu at the first read, %zu by the whole-file "
         "check\n", len, seen[G_AT_OPEN], seen[G_AT_ACCESS], seen[G_BY_WHOLE]);
  free(buf), free(t);
}

/* ---- through the public API: save with one layout, load with another ---- */

typedef tu_fixture fixture;
static int setup(void **state) { return tu_fixture_setup(state, "dcp-derived"); }
static int teardown(void **state) { return tu_fixture_teardown(state); }

enum { R = 24, C = 10 };
static float value(int64_t i, int64_t j) { return (float)(i * 100 + j) + 0.5f; }

/* Copy the box (off, size) of the R x C tensor into buf. */
static void fill(float *buf, const int64_t *off, const int64_t *size) {
  for (int64_t i = 0; i < size[0]; i++)
    for (int64_t j = 0; j < size[1]; j++) buf[i * size[1] + j] = value(off[0] + i, off[1] + j);
}

static void test_save_grid_load_other(void **state) {
  fixture *f = *state;
  int64_t shape[2] = {R, C};
  static float w[R * C], m[R * C];
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  /* "w": a 4 x 2 grid of boxes (6 x 5 each); "m": ZeRO-like flat ranges of
   * 48 elements over the whole tensor (mid-row starts) */
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  for (int64_t i = 0; i < 4; i++)
    for (int64_t j = 0; j < 2; j++) {
      int64_t off[2] = {i * 6, j * 5}, size[2] = {6, 5};
      float *p = w + (i * 2 + j) * 30;
      fill(p, off, size);
      assert_int_equal(dcp_state_add_chunk(st, "w", off, size, p), DCP_OK);
    }
  assert_int_equal(dcp_state_add_tensor(st, "m", DCP_F32, 2, shape), DCP_OK);
  for (int64_t i = 0; i < R * C; i++) m[i] = value(i / C, i % C);
  dcp_box whole = {.ndim = 2, .offset = {0, 0}, .size = {R, C}};
  for (int64_t b = 0; b < R * C; b += 48)
    assert_int_equal(dcp_state_add_flat(st, "m", &whole, b, R * C - b < 48 ? R * C - b : 48, m + b),
                     DCP_OK);
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, NULL), DCP_OK);
  dcp_state_free(st);

  dcp_meta *v;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &v), DCP_OK);
  size_t tw, tm;
  dcpi_form fm;
  dcpi_err err;
  assert_int_equal(dcp_meta_find_tensor(v, "w", &tw), DCP_OK);
  assert_int_equal(dcp_meta_find_tensor(v, "m", &tm), DCP_OK);
  assert_int_equal(dcpi_meta_chunk_form(v, tw, &fm, &err), DCP_OK);
  assert_int_equal(fm.kind, DCPI_FORM_GRID);
  assert_int_equal(dcpi_meta_chunk_form(v, tm, &fm, &err), DCP_OK);
  assert_int_equal(fm.kind, DCPI_FORM_FLAT);
  dcp_meta_free(v);

  /* load: "w" as 3 row bands x full width, "m" as a 2 x 2 grid */
  static float lw[R * C], lm[R * C], want[R * C];
  memset(lw, 0, sizeof lw), memset(lm, 0, sizeof lm);
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_F32, 2, shape), DCP_OK);
  for (int64_t i = 0; i < 3; i++) {
    int64_t off[2] = {i * 8, 0}, size[2] = {8, C};
    assert_int_equal(dcp_state_add_chunk(ld, "w", off, size, lw + i * 8 * C), DCP_OK);
  }
  assert_int_equal(dcp_state_add_tensor(ld, "m", DCP_F32, 2, shape), DCP_OK);
  for (int64_t k = 0; k < 4; k++) {
    int64_t off[2] = {(k / 2) * 12, (k % 2) * 5}, size[2] = {12, 5};
    assert_int_equal(dcp_state_add_chunk(ld, "m", off, size, lm + k * 60), DCP_OK);
  }
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_OK);
  dcp_state_free(ld);
  for (int64_t i = 0; i < 3; i++) {
    int64_t off[2] = {i * 8, 0}, size[2] = {8, C};
    fill(want + i * 8 * C, off, size);
  }
  assert_memory_equal(lw, want, sizeof lw);
  for (int64_t k = 0; k < 4; k++) {
    int64_t off[2] = {(k / 2) * 12, (k % 2) * 5}, size[2] = {12, 5};
    fill(want + k * 60, off, size);
  }
  assert_memory_equal(lm, want, sizeof lm);
}

/* A save records the layouts its tensors were added with: each distinct
 * mesh once, each such tensor's mesh and tensor_map; a tensor added by
 * hand has none. (One rank: the mesh is [1], the layout's box the whole
 * tensor; the multi-rank grids are the codec's, tested above.) */
static void test_save_records_layouts(void **state) {
  fixture *f = *state;
  int64_t shape[2] = {4, 6}, mesh[2] = {1, 1};
  static float a[24], b[24], c[24];
  uint32_t map_a[2] = {1, 2}, map_b[2] = {2, 0};
  dcp_layout *la, *lb;
  assert_int_equal(dcp_layout_create(f->ctx, 2, mesh, NULL, 2, map_a, &la), DCP_OK);
  assert_int_equal(dcp_layout_create(f->ctx, 2, mesh, NULL, 2, map_b, &lb), DCP_OK);
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(st, "a", DCP_F32, 2, shape, la, a), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(st, "b", DCP_F32, 2, shape, lb, b), DCP_OK);
  int64_t zero[2] = {0, 0};
  assert_int_equal(dcp_state_add_tensor(st, "c", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "c", zero, shape, c), DCP_OK);
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, NULL), DCP_OK);
  dcp_state_free(st);
  dcp_layout_free(la), dcp_layout_free(lb);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &v), DCP_OK);
  assert_int_equal(dcpi_meta_mesh_count(v), 1); /* one distinct mesh, stored once */
  dcpi_mesh_info mi;
  assert_int_equal(dcpi_meta_mesh(v, 0, &mi), DCP_OK);
  assert_int_equal(mi.ndim, 2);
  assert_int_equal(mi.ranks[0], 0);
  size_t t;
  uint32_t map[2];
  assert_int_equal(dcp_meta_find_tensor(v, "a", &t), DCP_OK);
  assert_int_equal(dcpi_meta_tensor_layout(v, t, map), 0);
  assert_int_equal(map[0], 1), assert_int_equal(map[1], 2);
  assert_int_equal(dcp_meta_find_tensor(v, "b", &t), DCP_OK);
  assert_int_equal(dcpi_meta_tensor_layout(v, t, map), 0);
  assert_int_equal(map[0], 2), assert_int_equal(map[1], 0);
  assert_int_equal(dcp_meta_find_tensor(v, "c", &t), DCP_OK);
  assert_int_equal(dcpi_meta_tensor_layout(v, t, map), -1);
  dcp_meta_free(v);
}

/* The coordinator's side of the layout records, with a mesh of 4 ranks:
 * records of two tensors over one mesh give one mesh; the flat ranges of
 * a tensor whose cells that layout gives are found as FLAT; a malformed
 * record is DCP_ECORRUPT. */
static void test_layout_records(void **state) {
  fixture *f = *state;
  (void)f;
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, 4, &err), DCP_OK);
  int64_t shape[2] = {8, 6};
  uint32_t tw, tm;
  assert_int_equal(dcpi_md_add_tensor(md, "w", DCP_F32, 2, shape, -1, NULL, &tw, &err), DCP_OK);
  assert_int_equal(dcpi_md_add_tensor(md, "m", DCP_F32, 2, shape, -1, NULL, &tm, &err), DCP_OK);
  dcpi_wbuf w = {0};
  for (int k = 0; k < 2; k++) { /* the record format of commit_layout.c, by hand */
    const char *fqn = k ? "m" : "w";
    dcpi_w_u8(&w, 3);
    dcpi_w_varint(&w, 1), dcpi_w_bytes(&w, fqn, 1);
    dcpi_w_varint(&w, 2), dcpi_w_varint(&w, 4), dcpi_w_varint(&w, 1); /* mesh [4, 1] */
    for (int r = 0; r < 4; r++) dcpi_w_varint(&w, (uint64_t)r);
    dcpi_w_varint(&w, 2), dcpi_w_varint(&w, 1), dcpi_w_varint(&w, 0); /* rows by mesh dim 0 */
  }
  dcpi_rbuf r = {w.data, w.len, 0};
  uint8_t kind;
  for (int k = 0; k < 2; k++) {
    assert_true(dcpi_r_u8(&r, &kind));
    assert_int_equal(dcpi_commit_take_layout(md, &r, 0, 4, &err), DCP_OK);
  }
  assert_int_equal(dcpi_md_mesh_count(md), 1);
  r = (dcpi_rbuf){w.data, 7, 1}; /* cut short */
  assert_int_equal(dcpi_commit_take_layout(md, &r, 0, 4, &err), DCP_ECORRUPT);
  dcpi_wbuf_free(&w);
  assert_int_equal(dcpi_md_add_file(md, "f", NULL, &err), DCP_OK);
  /* "m": each 2-row cell of the layout cut into 3 ranges of 4 elements */
  uint64_t at = 0, cks = 1;
  for (int64_t cell = 0; cell < 4; cell++) {
    dcp_box region = {.ndim = 2, .offset = {cell * 2, 0}, .size = {2, 6}};
    for (int64_t b = 0; b < 12; b += 4) {
      dcp_box out[3];
      size_t nb;
      assert_int_equal(dcp_flat_to_boxes(&region, b, 4, out, 3, &nb), DCP_OK);
      for (size_t i = 0; i < nb; i++) {
        uint64_t raw = (uint64_t)(out[i].size[0] * out[i].size[1] * 4);
        dcp_storage_ref ref = {.file = 0, .codec = DCP_CODEC_NONE, .block_size = 1 << 20,
                               .offset = at, .stored_length = raw, .raw_length = raw,
                               .block_count = 1, .block_checksums = &cks};
        at += raw;
        assert_int_equal(dcpi_md_add_chunk(md, tm, out[i].offset, out[i].size, &ref, &err), DCP_OK);
      }
    }
  }
  void *buf;
  size_t len;
  assert_int_equal(dcpi_md_encode(md, &buf, &len, &err), DCP_OK);
  dcpi_md_free(md);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
  size_t t;
  dcpi_form fm;
  assert_int_equal(dcp_meta_find_tensor(v, "m", &t), DCP_OK);
  assert_int_equal(dcpi_meta_chunk_form(v, t, &fm, &err), DCP_OK);
  assert_int_equal(fm.kind, DCPI_FORM_FLAT);
  assert_int_equal(fm.f, 3);
  dcp_meta_free(v);
  free(buf);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_grids),
      cmocka_unit_test(test_random_flat),
      cmocka_unit_test(test_random_irregular),
      cmocka_unit_test(test_encoding_pinned),
      cmocka_unit_test(test_skip_table_hostile),
      cmocka_unit_test(test_flip_every_byte),
      cmocka_unit_test_setup_teardown(test_save_grid_load_other, setup, teardown),
      cmocka_unit_test_setup_teardown(test_save_records_layouts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_layout_records, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
