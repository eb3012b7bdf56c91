/* test_meta_corrupt.c — the metadata view refuses malformed input cleanly:
 * truncations, bit flips (with and without re-sealed checksums), and crafted
 * files whose checksums are valid but whose content is hostile. */
#include <xxhash.h>

#include "meta_reseal.h"

#include "meta_gen.h"
#include "metadata/format.h"
#include "metadata/view.h"
#include "base/wire.h"

/* A moderately rich encoded sample: tensors, zstd and raw refs, bytes, kv. */
static void *sample(size_t *len) {
  tu_rng rng;
  tu_rng_seed(&rng, 12345);
  g_model *m = malloc(sizeof *m);
  assert_non_null(m);
  do g_make_model(&rng, m, 6);
  while (m->nt < 4 || m->nb < 3 || m->nk < 2 || m->nmeshes < 1);
  void *buf = g_encode(m, NULL, len);
  free(m);
  return buf;
}

/* Open buf and, when that works, touch every chunk and table entry. Returns
 * the open status; *chunk_fail counts chunk accesses that failed (each must
 * be DCP_ECORRUPT). Never crashes on any input (ASan/UBSan check that). */
static dcp_status open_and_walk(const void *buf, size_t len, size_t *chunk_fail) {
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(NULL, &ctx), DCP_OK);
  dcp_meta *v = (dcp_meta *)&v; /* must be reset to NULL on failure */
  dcp_status rc = dcp_meta_open_memory(ctx, buf, len, &v);
  *chunk_fail = 0;
  if (rc != DCP_OK) {
    assert_null(v);
    assert_true(strlen(dcp_ctx_last_error(ctx)) > 0);
    assert_int_equal(dcp_ctx_last_status(ctx), rc);
  }
  for (size_t t = 0; v && t < dcp_meta_tensor_count(v); t++) {
    dcp_tensor_info ti;
    assert_int_equal(dcp_meta_tensor(v, t, &ti), DCP_OK);
    for (uint64_t c = 0; c < ti.chunk_count; c++) {
      dcp_chunk_info ci;
      dcp_status cs = dcp_meta_chunk(v, t, c, &ci);
      if (cs != DCP_OK) {
        assert_int_equal(cs, DCP_ECORRUPT);
        (*chunk_fail)++;
        break;
      }
      for (uint64_t b = 0; b < ci.ref.block_count; b++) (void)ci.ref.block_checksums[b];
    }
  }
  for (size_t i = 0; v && i < dcp_meta_bytes_count(v); i++) {
    dcp_bytes_info bi;
    assert_int_equal(dcp_meta_bytes(v, i, &bi), DCP_OK);
    assert_true(strlen(bi.key) > 0);
  }
  dcp_meta_free(v);
  dcp_ctx_free(ctx);
  return rc;
}


/* Every proper prefix of an encoding is refused as corrupt. */
static void test_truncation(void **state) {
  (void)state;
  size_t len, fails;
  uint8_t *buf = sample(&len);
  assert_int_equal(open_and_walk(buf, len, &fails), DCP_OK);
  assert_int_equal(fails, 0);
  for (size_t n = 0; n < len; n++) {
    uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
    memcpy(copy, buf, n);
    assert_int_equal(open_and_walk(copy, n, &fails), DCP_ECORRUPT);
    free(copy);
  }
  /* And a longer buffer (trailing garbage) too. */
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, buf, len);
  longer[len] = 0;
  assert_int_equal(open_and_walk(longer, len + 1, &fails), DCP_ECORRUPT);
  free(longer);
  free(buf);
}

/* Single bit flips are all caught: DCP_EVERSION exactly when the flip turns
 * the version field (bytes 8..11) into a number above the current one,
 * DCP_ECORRUPT otherwise (including version 0); at open, at the first
 * access of the chunk list the flip is in, or (the trailer and the chunks
 * section's directory checksum, which no access reads) by the whole-file
 * check dcp_verify makes. */
static void test_bit_flips(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(7));
  size_t len, fails, seen[3] = {0};
  uint8_t *buf = sample(&len);
  for (int i = 0; i < 4000; i++) {
    size_t bit = (size_t)tu_rng_range(&rng, 0, (int64_t)(len * 8) - 1);
    if (i < 96) bit = 64 + (size_t)i % 32; /* always cover every version bit */
    g_catch when = g_where_caught(buf, len, bit / 8);
    buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    dcp_status want = DCP_ECORRUPT;
    if (bit / 8 >= 8 && bit / 8 < 12 && dcpi_get_u32(buf + 8) > DCPI_FORMAT_VERSION)
      want = DCP_EVERSION;
    dcp_status rc = open_and_walk(buf, len, &fails);
    assert_int_equal(rc, when == G_AT_OPEN ? want : DCP_OK);
    if (when == G_AT_ACCESS) assert_true(fails > 0);
    if (when == G_BY_WHOLE) {
      dcp_meta *v;
      dcpi_err err;
      assert_int_equal(fails, 0);
      assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &v), DCP_OK);
      assert_int_equal(dcpi_meta_check_whole(v, &err), DCP_ECORRUPT);
      dcp_meta_free(v);
    }
    seen[when]++;
    buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  }
  printf("# flips caught at open %zu, at first access %zu, by the whole-file check %zu\n",
         seen[G_AT_OPEN], seen[G_AT_ACCESS], seen[G_BY_WHOLE]);
  assert_true(seen[G_AT_ACCESS] > 0);
  free(buf);
}

/* Bit flips and byte overwrites with re-sealed checksums: whatever the
 * decoder makes of them, it fails cleanly or yields a walkable view. */
static void test_resealed_flips(void **state) {
  (void)state;
  tu_rng rng;
  tu_rng_seed(&rng, tu_seed(7) + 1);
  size_t len, fails, opened = 0, refused = 0;
  uint8_t *buf = sample(&len);
  uint8_t *copy = malloc(len);
  for (int i = 0; i < 6000; i++) {
    memcpy(copy, buf, len);
    int edits = (int)tu_rng_range(&rng, 1, 3);
    for (int e = 0; e < edits; e++) {
      size_t at = (size_t)tu_rng_range(&rng, 12, (int64_t)len - 9); /* keep magic/version */
      if (tu_rng_range(&rng, 0, 1)) copy[at] ^= (uint8_t)(1u << tu_rng_range(&rng, 0, 7));
      else copy[at] = (uint8_t)tu_rng_next(&rng);
    }
    tu_meta_reseal(copy, len);
    dcp_status rc = open_and_walk(copy, len, &fails);
    assert_true(rc == DCP_OK || rc == DCP_ECORRUPT);
    if (rc == DCP_OK) opened++;
    else refused++;
  }
  printf("# resealed edits: %zu opened, %zu refused\n", opened, refused);
  assert_true(refused > 0);
  free(copy);
  free(buf);
}

/* ---- crafted files ----------------------------------------------------- */

/* Section bodies of a crafted file, by section id. */
typedef struct craft {
  dcpi_wbuf sec[DCPI_SEC_COUNT + 1];
} craft;

/* Assemble header, directory, bodies and trailer with correct checksums:
 * a format version 1 file (still read; it has no save section). */
static uint8_t *assemble(craft *c, size_t *len) {
  dcpi_wbuf out = {0};
  uint8_t head[DCPI_SECTIONS_AT(DCPI_SEC_COUNT_V1)] = {0};
  memcpy(head, DCPI_MAGIC, DCPI_MAGIC_LEN);
  dcpi_put_u32(head + 8, 1);
  dcpi_put_u32(head + 24, DCPI_SEC_COUNT_V1);
  uint64_t pos = DCPI_SECTIONS_AT(DCPI_SEC_COUNT_V1);
  for (unsigned i = 1; i <= DCPI_SEC_COUNT_V1; i++) {
    uint8_t *d = head + DCPI_HEADER_SIZE + (i - 1) * DCPI_DIRENT_SIZE;
    dcpi_put_u32(d, i);
    dcpi_put_u64(d + 8, pos);
    dcpi_put_u64(d + 16, c->sec[i].len);
    dcpi_put_u64(d + 24, XXH3_64bits(c->sec[i].data ? (void *)c->sec[i].data : (void *)head, c->sec[i].len));
    pos += c->sec[i].len;
  }
  dcpi_put_u64(head + 16, pos + 8);
  dcpi_w_bytes(&out, head, sizeof head);
  for (unsigned i = 1; i <= DCPI_SEC_COUNT_V1; i++) dcpi_w_bytes(&out, c->sec[i].data, c->sec[i].len);
  dcpi_w_u64(&out, XXH3_64bits(out.data, out.len));
  assert_int_equal(out.status, DCP_OK);
  for (unsigned i = 1; i <= DCPI_SEC_COUNT_V1; i++) dcpi_wbuf_free(&c->sec[i]);
  *len = out.len;
  return out.data;
}

/* Append a string table entry. */
static void w_str(dcpi_wbuf *w, const char *s, size_t n) {
  dcpi_w_varint(w, n);
  dcpi_w_bytes(w, s, n);
  dcpi_w_u8(w, 0);
}

/* Knobs that turn the valid baseline into one hostile variant. */
typedef struct variant {
  uint64_t string_count;   /* 0: the right count */
  int bad_nul;             /* 1: missing NUL, 2: embedded NUL */
  const char *file_name;   /* NULL: "f0" */
  uint64_t file_name_idx;  /* UINT64_MAX: right one */
  uint64_t tensor_count;   /* 0: 1 */
  uint64_t chunk_count;    /* 0: 1 */
  uint64_t list_len_add;   /* added to the list length */
  int chunk_file;          /* >= 0: explicit file index */
  int64_t chunk_size;      /* > 0: explicit box size */
  uint64_t chunk_offset;   /* > 0: explicit absolute file offset */
  int bad_list_hash;
  uint8_t extra_flags;     /* ORed into the chunk flags */
  uint64_t mesh_extent;    /* > 0: one mesh of this extent (rank 0 repeated) */
  int64_t mesh_rank;       /* rank stored in the mesh */
  uint64_t bytes_raw;      /* > 0: one bytes item of this raw length, bs 1 */
  int kv_dup;
  int overlong_varint;
} variant;

/* The baseline: strings {"f0", "t", "k"}, one file, world 1, tensor "t"
 * (U8, shape [4]) with one chunk [0, 4) at file 0 offset 0, one kv. */
static uint8_t *make_crafted(const variant *v, size_t *len) {
  craft c;
  memset(&c, 0, sizeof c);
  dcpi_wbuf *w = &c.sec[DCPI_SEC_STRINGS];
  if (v->overlong_varint) dcpi_w_bytes(w, "\x83\x00", 2);
  else dcpi_w_varint(w, v->string_count ? v->string_count : 3);
  const char *fname = v->file_name ? v->file_name : "f0";
  if (v->bad_nul == 1) dcpi_w_bytes(w, "\x02" "f0x", 4);
  else if (v->bad_nul == 2) dcpi_w_bytes(w, "\x02" "f\0\0", 4);
  else w_str(w, fname, strlen(fname));
  w_str(w, "t", 1);
  w_str(w, "k", 1);

  w = &c.sec[DCPI_SEC_FILES];
  dcpi_w_varint(w, 1);
  dcpi_w_varint(w, v->file_name_idx != UINT64_MAX ? v->file_name_idx : 0);
  dcpi_w_u8(w, DCP_CODEC_NONE);
  dcpi_w_varint(w, 16);

  w = &c.sec[DCPI_SEC_MESHES];
  dcpi_w_varint(w, 1);
  if (v->mesh_extent) {
    dcpi_w_varint(w, 1);
    dcpi_w_varint(w, 1);
    dcpi_w_varint(w, v->mesh_extent);
    for (int i = 0; i < 4; i++) dcpi_w_varint(w, (uint64_t)v->mesh_rank);
  } else {
    dcpi_w_varint(w, 0);
  }

  dcpi_wbuf list = {0};
  uint8_t flags = DCPI_RF_FILE_SAME | DCPI_RF_OFF_END | DCPI_RF_CODING_DEFAULT |
                  DCPI_RF_SAME_SIZE | DCPI_RF_BOX_PREDICTED;
  if (v->chunk_file >= 0) flags = (uint8_t)((flags & ~DCPI_RF_FILE_MASK) | DCPI_RF_FILE_EXPLICIT);
  if (v->chunk_size > 0) flags &= (uint8_t)~DCPI_RF_SAME_SIZE;
  if (v->chunk_offset) flags = (uint8_t)((flags & ~DCPI_RF_OFF_MASK) | DCPI_RF_OFF_ABS);
  flags |= v->extra_flags;
  dcpi_w_u8(&list, flags);
  if (v->chunk_size > 0) dcpi_w_varint(&list, (uint64_t)v->chunk_size);
  if (v->chunk_file >= 0) dcpi_w_varint(&list, (uint64_t)v->chunk_file);
  if (v->chunk_offset) dcpi_w_varint(&list, v->chunk_offset);
  dcpi_w_u64(&list, 0x1234);

  w = &c.sec[DCPI_SEC_TENSORS];
  dcpi_w_varint(w, v->tensor_count ? v->tensor_count : 1);
  dcpi_w_varint(w, 1);      /* fqn "t" */
  dcpi_w_u8(w, DCP_U8);
  dcpi_w_varint(w, 1);      /* ndim */
  dcpi_w_varint(w, 4);      /* shape */
  dcpi_w_varint(w, 0);      /* no mesh */
  dcpi_w_varint(w, v->chunk_count ? v->chunk_count : 1);
  dcpi_w_varint(w, list.len + v->list_len_add);
  dcpi_w_u64(w, XXH3_64bits(list.data, list.len) ^ (uint64_t)v->bad_list_hash);
  dcpi_w_bytes(&c.sec[DCPI_SEC_CHUNKS], list.data, list.len);
  dcpi_wbuf_free(&list);

  w = &c.sec[DCPI_SEC_BYTES];
  dcpi_w_varint(w, v->bytes_raw ? 1 : 0);
  if (v->bytes_raw) {
    dcpi_w_varint(w, 2); /* key "k" */
    dcpi_w_u8(w, DCP_SCOPE_REPLICATED);
    dcpi_w_varint(w, 0);
    dcpi_w_u8(w, DCPI_RF_FILE_SAME | DCPI_RF_OFF_END); /* explicit coding */
    dcpi_w_u8(w, DCP_CODEC_NONE);
    dcpi_w_varint(w, 1);
    dcpi_w_varint(w, v->bytes_raw);
    dcpi_w_u64(w, 0);
  }

  w = &c.sec[DCPI_SEC_KV];
  dcpi_w_varint(w, v->kv_dup ? 2 : 1);
  for (int i = 0; i < (v->kv_dup ? 2 : 1); i++) {
    dcpi_w_varint(w, 2);
    dcpi_w_varint(w, 0);
  }
  return assemble(&c, len);
}

/* A variant with every knob at its baseline value. */
static variant base(void) {
  variant v;
  memset(&v, 0, sizeof v);
  v.file_name_idx = UINT64_MAX;
  v.chunk_file = -1;
  return v;
}

/* Open the crafted variant: the open status, and (when it opens) the
 * status of chunk 0 of tensor 0 in *chunk. */
static dcp_status try_variant(const variant *v, dcp_status *chunk) {
  size_t len;
  uint8_t *buf = make_crafted(v, &len);
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(NULL, &ctx), DCP_OK);
  dcp_meta *m = NULL;
  dcp_status rc = dcp_meta_open_memory(ctx, buf, len, &m);
  *chunk = DCP_OK;
  if (rc == DCP_OK) {
    dcp_chunk_info ci;
    *chunk = dcp_meta_chunk(m, 0, 0, &ci);
    if (*chunk != DCP_OK) printf("#   chunk: %s\n", dcp_ctx_last_error(ctx));
  } else {
    printf("#   open: %s\n", dcp_ctx_last_error(ctx));
  }
  dcp_meta_free(m);
  dcp_ctx_free(ctx);
  free(buf);
  return rc;
}

/* The baseline itself is valid, so each variant fails for its own reason. */
static void test_crafted_baseline(void **state) {
  (void)state;
  variant v = base();
  size_t len;
  uint8_t *buf = make_crafted(&v, &len);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open_memory(NULL, buf, len, &m), DCP_OK);
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(m, 0, 0, &ci), DCP_OK);
  assert_int_equal(ci.box.size[0], 4);
  assert_int_equal(ci.ref.raw_length, 4);
  assert_int_equal(ci.ref.block_count, 1);
  assert_int_equal(ci.ref.block_checksums[0], 0x1234);
  const char *k, *val;
  assert_int_equal(dcp_meta_kv(m, 0, &k, &val), DCP_OK);
  assert_string_equal(k, "k");
  assert_string_equal(val, "f0");
  dcp_meta_free(m);
  free(buf);
}

#define EXPECT_OPEN_CORRUPT(field_assign)         \
  do {                                            \
    variant v = base();                           \
    field_assign;                                 \
    dcp_status cs;                                \
    printf("# %s\n", #field_assign);              \
    assert_int_equal(try_variant(&v, &cs), DCP_ECORRUPT); \
  } while (0)

#define EXPECT_CHUNK_CORRUPT(field_assign)        \
  do {                                            \
    variant v = base();                           \
    field_assign;                                 \
    dcp_status cs;                                \
    printf("# %s\n", #field_assign);              \
    assert_int_equal(try_variant(&v, &cs), DCP_OK); \
    assert_int_equal(cs, DCP_ECORRUPT);           \
  } while (0)

/* Hostile counts, lengths, names and indices, all with valid checksums. */
static void test_crafted_hostile(void **state) {
  (void)state;
  EXPECT_OPEN_CORRUPT(v.string_count = 1ull << 40);
  EXPECT_OPEN_CORRUPT(v.string_count = 4);
  EXPECT_OPEN_CORRUPT(v.bad_nul = 1);
  EXPECT_OPEN_CORRUPT(v.bad_nul = 2);
  EXPECT_OPEN_CORRUPT(v.overlong_varint = 1);
  EXPECT_OPEN_CORRUPT(v.file_name = "..");
  EXPECT_OPEN_CORRUPT(v.file_name = "a/b");
  EXPECT_OPEN_CORRUPT(v.file_name = "");
  EXPECT_OPEN_CORRUPT(v.file_name_idx = 3);
  EXPECT_OPEN_CORRUPT(v.file_name_idx = 1ull << 62);
  EXPECT_OPEN_CORRUPT(v.tensor_count = 1ull << 50);
  EXPECT_OPEN_CORRUPT(v.tensor_count = 2);
  EXPECT_OPEN_CORRUPT(v.chunk_count = 1ull << 60);
  EXPECT_OPEN_CORRUPT(v.chunk_count = 2);
  EXPECT_OPEN_CORRUPT(v.list_len_add = 1);
  EXPECT_OPEN_CORRUPT(v.list_len_add = 1ull << 63);
  EXPECT_OPEN_CORRUPT(v.mesh_extent = 1ull << 40);
  EXPECT_OPEN_CORRUPT(v.mesh_extent = 4; v.mesh_rank = 0);   /* rank repeated */
  EXPECT_OPEN_CORRUPT(v.mesh_extent = 1; v.mesh_rank = 5);   /* rank >= world */
  EXPECT_OPEN_CORRUPT(v.bytes_raw = 1ull << 62);             /* 2^62 checksums */
  EXPECT_OPEN_CORRUPT(v.bytes_raw = 2);                      /* 2 blocks, 1 checksum */
  EXPECT_OPEN_CORRUPT(v.kv_dup = 1);
  EXPECT_CHUNK_CORRUPT(v.chunk_file = 1);
  EXPECT_CHUNK_CORRUPT(v.chunk_file = 0x7fffffff);
  EXPECT_CHUNK_CORRUPT(v.chunk_size = 5);
  EXPECT_CHUNK_CORRUPT(v.chunk_offset = INT64_MAX);
  EXPECT_CHUNK_CORRUPT(v.chunk_offset = UINT64_MAX);
  EXPECT_CHUNK_CORRUPT(v.bad_list_hash = 1);
  EXPECT_CHUNK_CORRUPT(v.extra_flags = DCPI_RF_RESERVED);
  EXPECT_CHUNK_CORRUPT(v.extra_flags = DCPI_RF_FILE_MASK);    /* reserved file mode 3 */
}

/* Header and directory damage with the trailer re-sealed. */
static void test_crafted_header(void **state) {
  (void)state;
  variant v = base();
  size_t len, fails;
  uint8_t *buf = make_crafted(&v, &len);
  uint8_t *copy = malloc(len);
  struct {
    size_t at;
    uint64_t value;
    int width;
    dcp_status want;
  } cases[] = {
      {8, 0, 4, DCP_ECORRUPT},                       /* version 0 */
      {8, DCPI_FORMAT_VERSION + 1, 4, DCP_EVERSION}, /* newer version */
      {12, 1, 4, DCP_ECORRUPT},                      /* header flags */
      {16, 0, 8, DCP_ECORRUPT},                      /* total length */
      {24, 8, 4, DCP_ECORRUPT},                      /* section count */
      {32, 2, 4, DCP_ECORRUPT},                      /* first section id */
      {32 + 8, 0, 8, DCP_ECORRUPT},                  /* strings offset overlaps header */
      {32 + 16, 1ull << 40, 8, DCP_ECORRUPT},        /* strings length out of range */
      {32 + 16, 1, 8, DCP_ECORRUPT},                 /* sections no longer contiguous */
      {32 + 32 + 8, 100000, 8, DCP_ECORRUPT},        /* files offset out of range */
      {32 + 6 * 32 + 16, 0, 8, DCP_ECORRUPT},        /* kv shorter: bytes unclaimed */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    memcpy(copy, buf, len);
    if (cases[i].width == 4) dcpi_put_u32(copy + cases[i].at, (uint32_t)cases[i].value);
    else dcpi_put_u64(copy + cases[i].at, cases[i].value);
    tu_meta_reseal(copy, len);
    assert_int_equal(open_and_walk(copy, len, &fails), cases[i].want);
  }
  /* Section checksum wrong, trailer right. */
  memcpy(copy, buf, len);
  copy[32 + 24] ^= 1;
  dcpi_put_u64(copy + len - 8, XXH3_64bits(copy, len - 8));
  assert_int_equal(open_and_walk(copy, len, &fails), DCP_ECORRUPT);
  /* Bad magic. */
  memcpy(copy, buf, len);
  copy[1] = 'X';
  assert_int_equal(open_and_walk(copy, len, &fails), DCP_ECORRUPT);
  free(copy);
  free(buf);
  dcp_meta *m = (dcp_meta *)&m;
  assert_int_equal(dcp_meta_open_memory(NULL, NULL, 0, &m), DCP_ECORRUPT);
  assert_null(m);
  assert_int_equal(dcp_meta_open_memory(NULL, NULL, 5, &m), DCP_EINVAL);
  assert_int_equal(dcp_meta_open_memory(NULL, "x", 1, NULL), DCP_EINVAL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncation),
      cmocka_unit_test(test_bit_flips),
      cmocka_unit_test(test_resealed_flips),
      cmocka_unit_test(test_crafted_baseline),
      cmocka_unit_test(test_crafted_hostile),
      cmocka_unit_test(test_crafted_header),
  };
  return TU_RUN(tests, NULL, NULL);
}
