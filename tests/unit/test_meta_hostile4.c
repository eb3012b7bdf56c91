/* test_meta_hostile4.c — format 4 .metadata that passes every checksum but
 * lies in its content (docs/format.md, "Derived chunk lists", "Skip
 * tables"). Each case is crafted byte by byte around one tensor "t" (U8
 * [8, 6]) whose data files hold the real bytes, with the section, list,
 * header and window checksums recomputed, so only the structural checks
 * can refuse it. For every case: opening, every chunk read alone on a fresh
 * view, the whole-list decode, a dcp_load and a dcp_verify of the checkpoint give OK or
 * the expected code (DCP_ECORRUPT, the reason named), never a crash (ASan)
 * and never an OK load with a wrong element. With DCP_META_SEEDS_DIR=DIR
 * every crafted file is also written to DIR (fuzz seeds). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metadata/derive.h"
#include "metadata/view.h"
#include "model/grid.h"
#include "test_hostile_kit.h"

#define H4_MAXC 64
#define H4_ROWS 8
#define H4_COLS 6
#define H4_NUMEL (H4_ROWS * H4_COLS)
#define LOC_SELF (DCPI_RF_FILE_EXPLICIT | DCPI_RF_OFF_ABS)

/* One crafted tensor list: its form and header, the skip interval, the
 * index's chunk count, and the entries actually written (a box per entry,
 * written only for a LISTED list; location flags with explicit values). */
typedef struct h4 {
  uint8_t form;
  uint64_t n[2], c[2], k[2], f;
  uint64_t every;
  uint64_t count;
  size_t nent;
  uint64_t off[H4_MAXC][2], size[H4_MAXC][2];
  uint8_t loc[H4_MAXC];
  uint64_t file[H4_MAXC], foff[H4_MAXC], cks[H4_MAXC];
  uint64_t shape[2];     /* 0: [8, 6] */
  uint32_t block_size;   /* 0: the file's default (1 MiB); else explicit */
  int64_t delta_add[8]; /* added to skip delta j (tampering; resealed) */
  uint64_t delta_set[8]; /* non-zero: skip delta j is this */
} h4;

/* Element (i, j) of "t", as the data files hold it. */
static uint8_t value(uint64_t i, uint64_t j) { return (uint8_t)(i * H4_COLS + j + 1); }

/* The bytes of box b of h, row-major (numel of them into out). */
static size_t box_bytes(const h4 *h, size_t b, uint8_t *out) {
  size_t n = 0;
  for (uint64_t i = h->off[b][0]; i < h->off[b][0] + h->size[b][0]; i++)
    for (uint64_t j = h->off[b][1]; j < h->off[b][1] + h->size[b][1]; j++) out[n++] = value(i, j);
  return n;
}

/* Give every entry of h a self-contained location (file b % 2, packed)
 * and the checksum of its true bytes. */
static void place(h4 *h) {
  uint64_t end[2] = {0, 0};
  uint8_t tmp[H4_NUMEL];
  for (size_t b = 0; b < h->nent; b++) {
    size_t n = box_bytes(h, b, tmp);
    h->loc[b] = LOC_SELF;
    h->file[b] = b % 2;
    h->foff[b] = end[b % 2];
    end[b % 2] += n;
    h->cks[b] = XXH3_64bits(tmp, n);
  }
  h->count = h->nent;
}

static const uint64_t shape[2] = {H4_ROWS, H4_COLS};

/* h's entries: the boxes of fl in generation order (h->nent of them). */
static void flat_boxes(h4 *h, const dcpi_flat *fl) {
  dcpi_flat_pos p;
  dcpi_flat_seek(fl, 0, &p);
  for (size_t b = 0; b < h->nent; b++, dcpi_flat_next(fl, &p)) {
    int64_t o[2], s[2];
    dcpi_flat_box(&p, 2, o, s);
    for (int d = 0; d < 2; d++) h->off[b][d] = (uint64_t)o[d], h->size[b][d] = (uint64_t)s[d];
  }
}

/* GRID baseline: 2 x 3 cells of 4 x 2 (6 chunks), skip interval 2 (three
 * windows). */
static h4 grid_base(void) {
  h4 h;
  memset(&h, 0, sizeof h);
  h.form = DCPI_FORM_GRID;
  h.n[0] = 2, h.c[0] = 4, h.n[1] = 3, h.c[1] = 2, h.k[0] = h.k[1] = 1;
  h.every = 2;
  dcpi_grid g;
  int64_t n[2] = {2, 3}, c[2] = {4, 2}, k[2] = {1, 1}, sh[2] = {H4_ROWS, H4_COLS};
  assert_int_equal(dcpi_grid_init(&g, 2, sh, n, c, k, H4_MAXC, NULL), DCP_OK);
  h.nent = (size_t)g.count;
  for (size_t b = 0; b < h.nent; b++) {
    int64_t o[2], s[2];
    dcpi_grid_box(&g, (int64_t)b, o, s);
    for (int d = 0; d < 2; d++) h.off[b][d] = (uint64_t)o[d], h.size[b][d] = (uint64_t)s[d];
  }
  place(&h);
  return h;
}

/* FLAT baseline: one cell (the whole tensor) cut into 5 flat ranges of 10
 * elements (mid-row starts: several boxes a range), in generation order,
 * skip interval 3. */
static h4 flat_base(void) {
  h4 h;
  memset(&h, 0, sizeof h);
  h.form = DCPI_FORM_FLAT;
  h.n[0] = h.n[1] = 1, h.c[0] = H4_ROWS, h.c[1] = H4_COLS, h.k[0] = h.k[1] = 1, h.f = 5;
  h.every = 3;
  dcpi_grid g;
  dcpi_flat fl;
  int64_t one[2] = {1, 1}, c[2] = {H4_ROWS, H4_COLS};
  assert_int_equal(dcpi_grid_init(&g, 2, c, one, c, one, H4_MAXC, NULL), DCP_OK);
  assert_int_equal(dcpi_flat_init(&fl, &g, 5, H4_MAXC, NULL), DCP_OK);
  h.nent = (size_t)fl.count;
  flat_boxes(&h, &fl);
  place(&h);
  return h;
}

/* LISTED baseline: the grid's six boxes, listed (sorted). */
static h4 listed_base(void) {
  h4 h = grid_base();
  h.form = DCPI_FORM_LISTED;
  return h;
}

/* Entry b of h (flags, location, coding, its block checksums; a LISTED
 * entry also its explicit size and offset). */
static void w_entry(const h4 *h, size_t b, dcpi_wbuf *w) {
  dcpi_w_u8(w, (uint8_t)(h->loc[b] | (h->block_size ? 0 : DCPI_RF_CODING_DEFAULT)));
  if (h->form == DCPI_FORM_LISTED) {
    for (int d = 0; d < 2; d++) dcpi_w_varint(w, h->size[b][d]);
    for (int d = 0; d < 2; d++) dcpi_w_varint(w, h->off[b][d]);
  }
  if ((h->loc[b] & DCPI_RF_FILE_MASK) == DCPI_RF_FILE_EXPLICIT) dcpi_w_varint(w, h->file[b]);
  if ((h->loc[b] & DCPI_RF_OFF_MASK) == DCPI_RF_OFF_ABS) dcpi_w_varint(w, h->foff[b]);
  if ((h->loc[b] & DCPI_RF_OFF_MASK) == DCPI_RF_OFF_DELTA) dcpi_w_zigzag(w, (int64_t)h->foff[b]);
  uint64_t raw = h->size[b][0] * h->size[b][1], blocks = 1;
  if (h->block_size) {
    dcpi_w_u8(w, DCP_CODEC_NONE);
    dcpi_w_varint(w, h->block_size);
    blocks = (raw + h->block_size - 1) / h->block_size;
  }
  for (uint64_t k = 0; k < blocks; k++) dcpi_w_u64(w, h->cks[b] + k);
}

/* The skip table of a derived list, its window checksums (over the cuts
 * its deltas make, where they lie inside the entries) and the header's. */
static void w_skip(const h4 *h, const dcpi_wbuf *ent, const size_t *pos, dcpi_wbuf *list) {
  dcpi_w_varint(list, h->every);
  if (!h->every) return;
  uint64_t m = (h->count - 1) / h->every;
  assert_true(m < 8);
  size_t cut[10], prev = 0;
  cut[0] = 0;
  for (uint64_t j = 1; j <= m; j++) {
    size_t at = j * h->every < h->nent ? pos[j * h->every] : ent->len;
    uint64_t delta = h->delta_set[j - 1] ? h->delta_set[j - 1]
                                         : (uint64_t)((int64_t)(at - prev) + h->delta_add[j - 1]);
    dcpi_w_varint(list, delta);
    cut[j] = cut[j - 1] + (size_t)delta;
    prev = at;
  }
  cut[m + 1] = ent->len;
  for (uint64_t j = 0; m && j <= m; j++) {
    bool inside = cut[j] <= cut[j + 1] && cut[j + 1] <= ent->len;
    dcpi_w_u64(list, inside ? XXH3_64bits(ent->data + cut[j], cut[j + 1] - cut[j]) : 0);
  }
  if (m) dcpi_w_u64(list, XXH3_64bits(list->data, list->len));
}

/* h's whole chunk list. */
static void w_list(const h4 *h, dcpi_wbuf *list) {
  dcpi_wbuf ent = {0};
  size_t pos[H4_MAXC + 1];
  for (size_t b = 0; b < h->nent; b++) {
    pos[b] = ent.len;
    w_entry(h, b, &ent);
  }
  dcpi_w_u8(list, h->form);
  for (int d = 0; h->form != DCPI_FORM_LISTED && d < 2; d++) {
    dcpi_w_varint(list, h->n[d]);
    dcpi_w_varint(list, h->c[d]);
    if (h->form == DCPI_FORM_GRID) dcpi_w_varint(list, h->k[d]);
  }
  if (h->form == DCPI_FORM_FLAT) dcpi_w_varint(list, h->f);
  if (h->form != DCPI_FORM_LISTED) w_skip(h, &ent, pos, list);
  dcpi_w_bytes(list, ent.data, ent.len);
  assert_int_equal(ent.status, DCP_OK);
  dcpi_wbuf_free(&ent);
}

/* The .metadata of h: files d0 and d1, world 1, tensor "t" U8 [8, 6]. */
static uint8_t *craft(const h4 *h, size_t *len) {
  dcpi_wbuf sec[DCPI_SEC_COUNT + 1];
  memset(sec, 0, sizeof sec);
  dcpi_wbuf *w = &sec[DCPI_SEC_STRINGS];
  dcpi_w_varint(w, 3);
  hk_w_str(w, "d0", 2);
  hk_w_str(w, "d1", 2);
  hk_w_str(w, "t", 1);
  w = &sec[DCPI_SEC_FILES];
  dcpi_w_varint(w, 2);
  for (int f = 0; f < 2; f++) {
    dcpi_w_varint(w, (uint64_t)f);
    dcpi_w_u8(w, DCP_CODEC_NONE);
    dcpi_w_varint(w, 1u << 20);
  }
  dcpi_w_varint(&sec[DCPI_SEC_MESHES], 1); /* world */
  dcpi_w_varint(&sec[DCPI_SEC_MESHES], 0);
  dcpi_wbuf list = {0};
  w_list(h, &list);
  w = &sec[DCPI_SEC_TENSORS];
  dcpi_w_varint(w, 1);
  dcpi_w_varint(w, 2); /* fqn "t" */
  dcpi_w_u8(w, DCP_U8);
  dcpi_w_varint(w, 2);
  dcpi_w_varint(w, h->shape[0] ? h->shape[0] : shape[0]);
  dcpi_w_varint(w, h->shape[0] ? h->shape[1] : shape[1]);
  dcpi_w_varint(w, 0); /* no mesh */
  dcpi_w_varint(w, h->count);
  dcpi_w_varint(w, list.len);
  dcpi_w_u64(w, XXH3_64bits(list.data, list.len));
  dcpi_w_bytes(&sec[DCPI_SEC_CHUNKS], list.data, list.len);
  dcpi_wbuf_free(&list);
  dcpi_w_varint(&sec[DCPI_SEC_BYTES], 0);
  dcpi_w_varint(&sec[DCPI_SEC_KV], 0);
  w = &sec[DCPI_SEC_SAVE];
  for (int i = 0; i < 16; i++) dcpi_w_u8(w, 0);
  dcpi_w_varint(w, 0); /* generation */
  dcpi_w_varint(w, 0); /* whole checkpoint */
  dcpi_w_varint(w, 2);
  dcpi_w_varint(w, 0);
  dcpi_w_varint(w, 0);
  return hk_assemble(sec, len);
}

/* Write the data files of baseline h (its true bytes at its locations). */
static void write_data(hk_fixture *f, const h4 *h) {
  uint8_t file[2][H4_NUMEL], tmp[H4_NUMEL];
  size_t end[2] = {0, 0};
  for (size_t b = 0; b < h->nent; b++) {
    size_t n = box_bytes(h, b, tmp);
    memcpy(file[h->file[b]] + h->foff[b], tmp, n);
    end[h->file[b]] = h->foff[b] + n;
  }
  char p[PATH_MAX + 32];
  mkdir(f->ckpt, 0755);
  hk_write_file(hk_path(p, sizeof p, f->ckpt, "d0"), file[0], end[0]);
  hk_write_file(hk_path(p, sizeof p, f->ckpt, "d1"), file[1], end[1]);
}

/* Load all of "t" from f->ckpt; an OK load must have every element right. */
static dcp_status load_t(hk_fixture *f) {
  uint8_t dst[H4_NUMEL];
  memset(dst, 0, sizeof dst);
  int64_t sh[2] = {H4_ROWS, H4_COLS}, zero[2] = {0, 0};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "t", DCP_U8, 2, sh), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "t", zero, sh, dst), DCP_OK);
  dcp_status rc = dcp_load(f->ctx, st, f->ckpt, NULL);
  dcp_state_free(st);
  for (int i = 0; rc == DCP_OK && i < H4_ROWS; i++)
    for (int j = 0; j < H4_COLS; j++) assert_int_equal(dst[i * H4_COLS + j], value(i, j));
  return rc;
}

/* Every chunk read alone on a fresh view, then the whole list: each OK or
 * DCP_ECORRUPT; returns DCP_ECORRUPT when any refused. An OK chunk of a
 * list that decodes whole must be the same chunk either way. */
static dcp_status view_all(const uint8_t *buf, size_t len, uint64_t count) {
  dcp_status worst = DCP_OK;
  for (uint64_t c = 0; c < count; c++) {
    dcp_meta *m;
    assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &m), DCP_OK);
    dcp_chunk_info ci;
    dcp_status rc = dcp_meta_chunk(m, 0, (size_t)c, &ci);
    assert_true(rc == DCP_OK || rc == DCP_ECORRUPT);
    if (rc != DCP_OK) worst = rc;
    dcp_meta_free(m);
  }
  dcp_meta *m;
  dcpi_err err;
  dcpi_err_clear(&err);
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &m), DCP_OK);
  const int64_t *o, *s;
  dcp_status rc = count ? dcpi_meta_chunk_boxes(m, 0, &o, &s, &err) : DCP_OK;
  assert_true(rc == DCP_OK || rc == DCP_ECORRUPT);
  if (rc != DCP_OK) worst = rc;
  dcp_meta_free(m);
  return worst;
}

/* With DCP_META_SEEDS_DIR set, each crafted file is also written there as
 * seed_h4_<n>.bin: seeds for fuzz_meta_decode (tests/fuzz/corpus/meta). */
static void save_seed(const uint8_t *buf, size_t len) {
  static int n;
  const char *dir = getenv("DCP_META_SEEDS_DIR");
  if (!dir) return;
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/seed_h4_%02d.bin", dir, n++);
  hk_write_file(p, buf, len);
}

/* Craft h over baseline base's data, then: opening succeeds (the list is
 * not read at open), the view and the load give `want` (DCP_OK: the load
 * returns every element right), and the load's message holds `needle`. */
static void expect(hk_fixture *f, const h4 *base, const h4 *h, dcp_status want,
                   const char *needle) {
  size_t len;
  uint8_t *buf = craft(h, &len);
  save_seed(buf, len);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &m), DCP_OK);
  dcp_meta_free(m);
  dcp_status viewed = view_all(buf, len, h->count);
  write_data(f, base);
  char p[PATH_MAX + 32];
  hk_write_file(hk_path(p, sizeof p, f->ckpt, ".metadata"), buf, len);
  dcp_status loaded = load_t(f);
  printf("# view %d, load %d: %s\n", viewed, loaded, loaded ? dcp_ctx_last_error(f->ctx) : "ok");
  if (want == DCP_OK) assert_int_equal(viewed, DCP_OK);
  if (want == DCP_ECORRUPT) assert_int_equal(viewed, DCP_ECORRUPT);
  assert_int_equal(loaded, want);
  if (needle) hk_msg_has(f->ctx, needle, NULL, NULL);
  /* dcp_verify reads every list whole and every block: it agrees */
  dcp_verify_report rep = {.struct_size = sizeof rep};
  dcp_status verified = dcp_verify(f->ctx, f->ckpt, &rep);
  if (want == DCP_OK) assert_int_equal(verified, DCP_OK);
  else assert_int_not_equal(verified, DCP_OK);
  free(buf);
}

/* The baselines are valid: they open, read and load right. */
static void test_baselines(void **state) {
  hk_fixture *f = *state;
  h4 g = grid_base(), fl = flat_base(), l = listed_base();
  expect(f, &g, &g, DCP_OK, NULL);
  assert_true(fl.nent > 5); /* ranges start mid-row: more boxes than ranges */
  expect(f, &fl, &fl, DCP_OK, NULL);
  expect(f, &l, &l, DCP_OK, NULL);
}

/* GRID headers whose cells overflow int64, overrun the shape, or derive
 * another count than the index's. */
static void test_grid_headers(void **state) {
  hk_fixture *f = *state;
  const h4 g = grid_base();
  h4 h = g;
  h.n[0] = 1ull << 62; /* (n - 1) * c overflows */
  expect(f, &g, &h, DCP_ECORRUPT, "do not tile");
  h = g, h.n[1] = 4; /* 3 cells of 2 reach the extent 6: a fourth is empty */
  expect(f, &g, &h, DCP_ECORRUPT, "do not tile");
  h = g, h.c[0] = (uint64_t)INT64_MAX; /* 2 cells of INT64_MAX */
  expect(f, &g, &h, DCP_ECORRUPT, "do not tile");
  h = g, h.c[1] = 1; /* 3 cells of 1 cover half the extent */
  expect(f, &g, &h, DCP_ECORRUPT, "do not tile");
  h = g, h.k[0] = 0;
  expect(f, &g, &h, DCP_ECORRUPT, "split 0");
  h = g, h.n[1] = 0;
  expect(f, &g, &h, DCP_ECORRUPT, "grid dim 1");
  h = g, h.n[0] = (uint64_t)INT64_MAX + 1; /* past the varint limit */
  expect(f, &g, &h, DCP_ECORRUPT, "grid cells");
  h = g, h.k[0] = (uint64_t)INT64_MAX; /* pieces of one row: 24 boxes, 6 chunks */
  expect(f, &g, &h, DCP_ECORRUPT, "more boxes than the 6 allowed");
  h = g, h.n[0] = 1, h.c[0] = (uint64_t)INT64_MAX; /* one cell: 3 boxes */
  expect(f, &g, &h, DCP_ECORRUPT, "grid has 3 boxes, the index 6");
}

/* The index's chunk count against what the list holds. */
static void test_counts(void **state) {
  hk_fixture *f = *state;
  const h4 g = grid_base(), fl = flat_base(), l = listed_base();
  h4 h = g;
  h.count = 5, h.nent = 5; /* the grid has 6 */
  expect(f, &g, &h, DCP_ECORRUPT, "more boxes than the 5 allowed");
  h = g, h.count = 7; /* one entry missing */
  h.loc[6] = LOC_SELF;
  expect(f, &g, &h, DCP_ECORRUPT, "the index 7");
  h = g, h.nent = 7; /* one entry too many */
  h.loc[6] = LOC_SELF, h.file[6] = 0, h.foff[6] = 0;
  expect(f, &g, &h, DCP_ECORRUPT, NULL);
  h = fl, h.count = fl.count - 1, h.nent = fl.nent - 1;
  expect(f, &fl, &h, DCP_ECORRUPT, "flat form derives");
  h = l, h.count = 5; /* a listed list with a trailing entry */
  expect(f, &l, &h, DCP_ECORRUPT, "trailing bytes");
}

/* FLAT headers: no ranges, more ranges than the list holds, other cells. */
static void test_flat_headers(void **state) {
  hk_fixture *f = *state;
  const h4 fl = flat_base();
  h4 h = fl;
  h.f = 0;
  expect(f, &fl, &h, DCP_ECORRUPT, "0 ranges");
  h = fl, h.f = (uint64_t)INT64_MAX; /* ranges of one element: 48 chunks */
  expect(f, &fl, &h, DCP_ECORRUPT, "flat form derives");
  h = fl, h.f = 1; /* one range: the whole cell, one box */
  expect(f, &fl, &h, DCP_ECORRUPT, "flat form derives 1 chunks");
  h = fl, h.n[0] = 2, h.c[0] = 4; /* two cells: other ranges */
  expect(f, &fl, &h, DCP_ECORRUPT, NULL);
  h = fl, h.c[1] = 7; /* one cell wider than the tensor: (n-1)c < e <= nc holds, same cells */
  expect(f, &fl, &h, DCP_OK, NULL);
  h = fl, h.n[1] = 2, h.c[1] = 6; /* a second cell left empty */
  expect(f, &fl, &h, DCP_ECORRUPT, "do not tile");
}

/* Skip tables: interval 0, deltas out of order, past the list, a skip
 * point that is not self-contained; and the valid extremes (interval 1:
 * every entry a skip point; an interval past the count: one window). */
static void test_skip_tables(void **state) {
  hk_fixture *f = *state;
  const h4 g = grid_base(), fl = flat_base();
  h4 h = g;
  h.every = 0;
  expect(f, &g, &h, DCP_ECORRUPT, "skip interval 0");
  h = g, h.delta_set[1] = 1; /* second window start before the first's end */
  expect(f, &g, &h, DCP_ECORRUPT, "bytes for 2 entries");
  h = g, h.delta_set[1] = 1u << 20; /* past the list */
  expect(f, &g, &h, DCP_ECORRUPT, "skip offset 1048576 exceeds");
  h = g, h.delta_add[0] = 1, h.delta_add[1] = -1; /* a skip point inside an entry */
  expect(f, &g, &h, DCP_ECORRUPT, NULL);
  h = g, h.loc[2] = DCPI_RF_FILE_NEXT | DCPI_RF_OFF_END; /* predicts from window 0 */
  h.file[2] = 0;
  expect(f, &g, &h, DCP_ECORRUPT, "not explicit");
  h = g, h.every = 1; /* every entry self-contained: valid */
  expect(f, &g, &h, DCP_OK, NULL);
  h = g, h.every = UINT64_MAX; /* one window, verified by the list's xxh3 */
  expect(f, &g, &h, DCP_OK, NULL);
  h = fl, h.delta_add[0] = 9; /* FLAT: a window that starts late */
  expect(f, &fl, &h, DCP_ECORRUPT, NULL);
}

/* Locations: a predicted file index past the file table, an explicit one,
 * an offset whose end overflows int64, a delta below 0; a valid predicted
 * location inside a window loads right. */
static void test_locations(void **state) {
  hk_fixture *f = *state;
  const h4 g = grid_base();
  h4 h = g;
  h.loc[1] = DCPI_RF_FILE_NEXT | DCPI_RF_OFF_ABS; /* file 0 + 1 = 1: valid */
  expect(f, &g, &h, DCP_OK, NULL);
  h = g, h.file[2] = 1, h.loc[3] = DCPI_RF_FILE_NEXT | DCPI_RF_OFF_ABS; /* file 2 of 2 */
  expect(f, &g, &h, DCP_ECORRUPT, "file index 2 out of range");
  h = g, h.file[4] = 7;
  expect(f, &g, &h, DCP_ECORRUPT, "file index 7 out of range");
  h = g, h.foff[5] = (uint64_t)INT64_MAX - 4; /* + 8 bytes */
  expect(f, &g, &h, DCP_ECORRUPT, "exceeds INT64_MAX");
  h = g, h.loc[1] = DCPI_RF_FILE_EXPLICIT | DCPI_RF_OFF_DELTA;
  h.foff[1] = (uint64_t)(int64_t)-1; /* 0 - 1 */
  expect(f, &g, &h, DCP_ECORRUPT, "leaves [0, INT64_MAX]");
  h = g, h.foff[2] = 1ull << 40; /* structurally fine, no such bytes */
  size_t len;
  uint8_t *buf = craft(&h, &len);
  write_data(f, &g);
  char p[PATH_MAX + 32];
  hk_write_file(hk_path(p, sizeof p, f->ckpt, ".metadata"), buf, len);
  dcp_status rc = load_t(f);
  printf("# offset past the data file: %s\n", dcp_ctx_last_error(f->ctx));
  assert_int_not_equal(rc, DCP_OK);
  free(buf);
}

/* LISTED boxes that repeat, overlap, leave a gap, overrun the shape or
 * overflow int64. A gap is no corruption of the list (a checkpoint may
 * hold part of a tensor), but a load of the missing elements fails. */
static void test_listed_boxes(void **state) {
  hk_fixture *f = *state;
  const h4 l = listed_base();
  h4 h = l;
  memcpy(h.off[1], h.off[0], sizeof h.off[0]); /* chunk 1 = chunk 0's box */
  expect(f, &l, &h, DCP_ECORRUPT, "not strictly increasing");
  h = l, h.off[1][1] = 1; /* [0:4, 1:3] after [0:4, 0:2] */
  expect(f, &l, &h, DCP_ECORRUPT, "overlap");
  h = l, h.off[1][0] = 1; /* [1:5, 2:4]: increasing, overlaps [0:4, 2:4] below */
  expect(f, &l, &h, DCP_ECORRUPT, NULL);
  h = l, h.off[5][1] = 5, h.size[5][1] = 2; /* past the extent 6 */
  expect(f, &l, &h, DCP_ECORRUPT, "exceeds extent");
  h = l, h.off[5][0] = (uint64_t)INT64_MAX - 1; /* offset + size overflows */
  expect(f, &l, &h, DCP_ECORRUPT, "exceeds extent");
  h = l, h.nent = h.count = 5; /* the last cell missing */
  expect(f, &l, &h, DCP_EINCOMPLETE, "not covered");
}

/* A GRID or FLAT list over a tensor of 2^35 elements, each chunk of several
 * 4 GiB blocks: every chunk reads alone and whole with the box the form
 * derives, and a load of a few elements (planned from the header alone)
 * fails cleanly on the absent data files instead of returning OK. */
static void check_huge(hk_fixture *f, h4 *h, const int64_t *lo, const int64_t *sz) {
  uint64_t end[2] = {0, 0};
  h->block_size = UINT32_MAX;
  for (size_t b = 0; b < h->nent; b++) {
    h->loc[b] = LOC_SELF, h->file[b] = b % 2, h->foff[b] = end[b % 2], h->cks[b] = b;
    end[b % 2] += h->size[b][0] * h->size[b][1];
  }
  h->count = h->nent;
  size_t len;
  uint8_t *buf = craft(h, &len);
  assert_int_equal(view_all(buf, len, h->count), DCP_OK);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &m), DCP_OK);
  for (size_t b = 0; b < h->nent; b++) {
    dcp_chunk_info ci;
    assert_int_equal(dcp_meta_chunk(m, 0, b, &ci), DCP_OK);
    for (int d = 0; d < 2; d++) {
      assert_int_equal(ci.box.offset[d], h->off[b][d]);
      assert_int_equal(ci.box.size[d], h->size[b][d]);
    }
    assert_int_equal(ci.ref.offset, h->foff[b]);
  }
  dcp_meta_free(m);
  mkdir(f->ckpt, 0755);
  char p[PATH_MAX + 32];
  hk_write_file(hk_path(p, sizeof p, f->ckpt, ".metadata"), buf, len);
  int64_t sh[2] = {(int64_t)h->shape[0], (int64_t)h->shape[1]};
  uint8_t dst[16];
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "t", DCP_U8, 2, sh), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "t", lo, sz, dst), DCP_OK);
  dcp_status rc = dcp_load(f->ctx, st, f->ckpt, NULL);
  printf("# huge load: %s\n", dcp_ctx_last_error(f->ctx));
  assert_int_not_equal(rc, DCP_OK);
  dcp_state_free(st);
  free(buf);
}

static void test_huge_tensors(void **state) {
  hk_fixture *f = *state;
  h4 h;
  memset(&h, 0, sizeof h);
  h.form = DCPI_FORM_GRID, h.every = 1;
  h.shape[0] = 1u << 20, h.shape[1] = 1u << 15;
  h.n[0] = 2, h.c[0] = 1u << 19, h.n[1] = 1, h.c[1] = 1u << 15, h.k[0] = h.k[1] = 1;
  h.nent = 2;
  for (size_t b = 0; b < 2; b++)
    h.off[b][0] = b << 19, h.off[b][1] = 0, h.size[b][0] = 1u << 19, h.size[b][1] = 1u << 15;
  int64_t lo[2] = {(1 << 20) - 1, 3}, sz[2] = {1, 4};
  check_huge(f, &h, lo, sz);
  memset(&h, 0, sizeof h);
  h.form = DCPI_FORM_FLAT, h.every = 2, h.f = 3;
  h.shape[0] = 1u << 20, h.shape[1] = (1u << 15) + 7;
  h.n[0] = h.n[1] = 1, h.c[0] = h.shape[0], h.c[1] = h.shape[1], h.k[0] = h.k[1] = 1;
  dcpi_grid g;
  dcpi_flat fl;
  int64_t one[2] = {1, 1}, c[2] = {(int64_t)h.c[0], (int64_t)h.c[1]};
  assert_int_equal(dcpi_grid_init(&g, 2, c, one, c, one, H4_MAXC, NULL), DCP_OK);
  assert_int_equal(dcpi_flat_init(&fl, &g, 3, H4_MAXC, NULL), DCP_OK);
  h.nent = (size_t)fl.count;
  assert_true(h.nent > 3);
  flat_boxes(&h, &fl);
  lo[0] = 1 << 19, lo[1] = 1 << 14; /* the middle: a range boundary near */
  check_huge(f, &h, lo, sz);
}

/* Two chunks stored in the same bytes, the second's checksum the first's:
 * every block checks out, so a load cannot tell (it returns the first
 * chunk's values for the second's box); dcp_verify refuses the checkpoint,
 * naming both. */
static void test_shared_bytes(void **state) {
  hk_fixture *f = *state;
  const h4 g = grid_base();
  h4 h = g;
  h.file[2] = h.file[0], h.foff[2] = h.foff[0], h.cks[2] = h.cks[0]; /* boxes of 8 bytes each */
  size_t len;
  uint8_t *buf = craft(&h, &len);
  write_data(f, &g);
  char p[PATH_MAX + 32];
  hk_write_file(hk_path(p, sizeof p, f->ckpt, ".metadata"), buf, len);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, &rep), DCP_ECORRUPT);
  assert_int_equal(rep.problems, 1);
  hk_msg_has(f->ctx, "are stored in the same bytes of", NULL, NULL);
  printf("# %s\n", rep.first_problem);
  /* the honest baseline verifies */
  free(buf);
  buf = craft(&g, &len);
  hk_write_file(hk_path(p, sizeof p, f->ckpt, ".metadata"), buf, len);
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, &rep), DCP_OK);
  free(buf);
}

static int setup(void **state) { return hk_setup(state); }
static int teardown(void **state) { return hk_teardown(state); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_baselines, setup, teardown),
      cmocka_unit_test_setup_teardown(test_grid_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_counts, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flat_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_skip_tables, setup, teardown),
      cmocka_unit_test_setup_teardown(test_locations, setup, teardown),
      cmocka_unit_test_setup_teardown(test_listed_boxes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_huge_tensors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_shared_bytes, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
