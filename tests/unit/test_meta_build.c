/* test_meta_build.c — every validation of the metadata builder returns its
 * documented code, leaves a reason, and leaves the builder unchanged. */
#include "meta_gen.h"

/* A builder with world 8, files "a" and "b", mesh 0 of 2x2 and tensor 0
 * "w" (F32, [4, 6]). */
static dcpi_md *fixture(void) {
  dcpi_md *md;
  dcpi_err err;
  const int64_t mshape[2] = {2, 2}, shape[2] = {4, 6};
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, 8, &err), DCP_OK);
  uint32_t id;
  assert_int_equal(dcpi_md_add_file(md, "a", &id, &err), DCP_OK);
  assert_int_equal(id, 0);
  assert_int_equal(dcpi_md_add_file(md, "b", &id, &err), DCP_OK);
  assert_int_equal(id, 1);
  assert_int_equal(dcpi_md_add_mesh(md, 2, mshape, NULL, &id, &err), DCP_OK);
  assert_int_equal(id, 0);
  assert_int_equal(dcpi_md_add_tensor(md, "w", DCP_F32, 2, shape, -1, NULL, &id, &err), DCP_OK);
  assert_int_equal(id, 0);
  return md;
}

/* A valid ref of raw bytes, one block, uncompressed, in file 0. */
static dcp_storage_ref ref_of(uint64_t raw, const uint64_t *cks) {
  dcp_storage_ref r = {.file = 0, .codec = DCP_CODEC_NONE, .block_size = 1024,
                       .offset = 0, .stored_length = raw, .raw_length = raw,
                       .block_count = raw ? 1 : 0, .block_checksums = cks};
  return r;
}

/* Assert status s == want with a non-empty reason in err. */
#define EXPECT(want, call)                      \
  do {                                          \
    dcpi_err_clear(&err);                       \
    assert_int_equal((call), (want));           \
    assert_int_equal(err.code, (want));         \
    assert_true(strlen(err.msg) > 0);           \
  } while (0)

static void test_file_and_mesh_errors(void **state) {
  (void)state;
  dcpi_md *md = fixture();
  dcpi_err err;
  EXPECT(DCP_EINVAL, dcpi_md_set_world(md, 0, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_file(md, NULL, NULL, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_file(md, "", NULL, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_file(md, "x/y", NULL, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_file(md, "..", NULL, &err));
  EXPECT(DCP_EEXIST, dcpi_md_add_file(md, "a", NULL, &err));
  assert_int_equal(dcpi_md_file_count(md), 2);
  const int64_t bad[2] = {2, 0}, ok[2] = {2, 2}, huge[2] = {1 << 20, 1 << 20};
  const int32_t neg[4] = {0, 1, -1, 3}, dup[4] = {0, 1, 1, 3};
  EXPECT(DCP_EINVAL, dcpi_md_add_mesh(md, 0, ok, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_mesh(md, DCP_MAX_MESH_NDIM + 1, ok, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_mesh(md, 2, NULL, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_mesh(md, 2, bad, NULL, NULL, &err));
  EXPECT(DCP_EOVERFLOW, dcpi_md_add_mesh(md, 2, huge, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_mesh(md, 2, ok, neg, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_mesh(md, 2, ok, dup, NULL, &err));
  assert_int_equal(dcpi_md_mesh_count(md), 1);
  /* A mesh rank outside the world is caught when encoding. */
  const int32_t far[4] = {0, 1, 2, 9};
  assert_int_equal(dcpi_md_add_mesh(md, 2, ok, far, NULL, &err), DCP_OK);
  void *buf = (void *)&buf;
  size_t len;
  EXPECT(DCP_EINVAL, dcpi_md_encode(md, &buf, &len, &err));
  assert_null(buf);
  dcpi_md_free(md);
}

static void test_tensor_errors(void **state) {
  (void)state;
  dcpi_md *md = fixture();
  dcpi_err err;
  const int64_t shape[2] = {4, 6}, neg[2] = {4, -1}, big[2] = {INT64_MAX / 2, 3};
  const uint32_t map_ok[2] = {1, 2}, map_far[2] = {4, 0}, map_reuse[2] = {1, 1};
  char longname[DCP_MAX_NAME + 2];
  memset(longname, 'x', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(NULL, "t", DCP_F32, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, NULL, DCP_F32, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_tensor(md, "", DCP_F32, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_tensor(md, longname, DCP_F32, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_EEXIST, dcpi_md_add_tensor(md, "w", DCP_F32, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_DTYPE_INVALID, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_DTYPE_END_, 2, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, DCP_MAX_NDIM + 1, shape, -1, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, 2, NULL, -1, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, 2, neg, -1, NULL, NULL, &err));
  EXPECT(DCP_EOVERFLOW, dcpi_md_add_tensor(md, "t", DCP_F32, 2, big, -1, NULL, NULL, &err));
  EXPECT(DCP_ENOTFOUND, dcpi_md_add_tensor(md, "t", DCP_F32, 2, shape, 3, map_ok, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, 2, shape, -2, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, 2, shape, 0, NULL, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, 2, shape, 0, map_far, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_tensor(md, "t", DCP_F32, 2, shape, 0, map_reuse, NULL, &err));
  assert_int_equal(dcpi_md_tensor_count(md), 1);
  assert_int_equal(dcpi_md_add_tensor(md, "t", DCP_F32, 2, shape, 0, map_ok, NULL, &err), DCP_OK);
  dcpi_md_free(md);
}

static void test_chunk_errors(void **state) {
  (void)state;
  dcpi_md *md = fixture();
  dcpi_err err;
  const uint64_t cks[4] = {1, 2, 3, 4};
  const int64_t off[2] = {0, 0}, sz[2] = {2, 3}, negsz[2] = {-1, 3}, out[2] = {5, 3};
  const int64_t empty[2] = {2, 0}, ovf[2] = {INT64_MAX, 1}, far[2] = {0, 4};
  dcp_storage_ref r = ref_of(24, cks);
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(NULL, 0, off, sz, &r, &err));
  EXPECT(DCP_ENOTFOUND, dcpi_md_add_chunk(md, 1, off, sz, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, NULL, sz, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, NULL, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, negsz, &r, &err));
  EXPECT(DCP_EBOUNDS, dcpi_md_add_chunk(md, 0, off, out, &r, &err));
  EXPECT(DCP_EBOUNDS, dcpi_md_add_chunk(md, 0, far, sz, &r, &err));
  EXPECT(DCP_EOVERFLOW, dcpi_md_add_chunk(md, 0, ovf, sz, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, empty, &r, &err));
  dcp_storage_ref bad = ref_of(23, cks); /* 2x3 F32 is 24 bytes */
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  bad = r;
  bad.file = 2;
  EXPECT(DCP_ENOTFOUND, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  assert_non_null(strstr(err.msg, "tensor 'w' chunk")); /* the reason names the chunk */
  bad = r;
  bad.block_count = 2; /* 24 bytes in blocks of 1024 is one block */
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  bad = r;
  bad.block_size = 0;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  bad = r;
  bad.codec = (dcp_codec)7;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  bad = r;
  bad.block_checksums = NULL;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  bad = r;
  bad.stored_length = 20; /* uncompressed must store raw_length */
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  bad = r;
  bad.offset = INT64_MAX;
  EXPECT(DCP_EOVERFLOW, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  /* zstd: lengths required, each in [1, block raw], summing to stored. */
  uint64_t lens[2] = {10, 5};
  bad = r;
  bad.codec = DCP_CODEC_ZSTD;
  bad.block_size = 16;
  bad.block_count = 2;
  bad.stored_length = 15;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err)); /* lens NULL */
  bad.block_stored_lengths = lens;
  bad.stored_length = 14;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err)); /* sum 15 != 14 */
  lens[1] = 9; /* the last block holds 8 raw bytes */
  bad.stored_length = 19;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  lens[1] = 0;
  bad.stored_length = 10;
  EXPECT(DCP_EINVAL, dcpi_md_add_chunk(md, 0, off, sz, &bad, &err));
  assert_int_equal(dcpi_md_chunk_count(md), 0);
  lens[1] = 8;
  bad.stored_length = 18;
  assert_int_equal(dcpi_md_add_chunk(md, 0, off, sz, &bad, &err), DCP_OK);
  /* The same box twice is caught when encoding. */
  assert_int_equal(dcpi_md_add_chunk(md, 0, off, sz, &r, &err), DCP_OK);
  void *buf;
  size_t len;
  EXPECT(DCP_EEXIST, dcpi_md_encode(md, &buf, &len, &err));
  EXPECT(DCP_EINVAL, dcpi_md_encode(md, NULL, &len, &err));
  dcpi_md_free(md);
}

/* Four 2x3 chunks of "w" in md (one of them zstd), in the order given. */
static void add_quarters(dcpi_md *md, const int *order) {
  dcpi_err err;
  const uint64_t cks[2] = {7, 8};
  uint64_t lens[2] = {9, 8};
  for (int k = 0; k < 4; k++) {
    int q = order[k];
    const int64_t off[2] = {2 * (q / 2), 3 * (q % 2)}, sz[2] = {2, 3};
    dcp_storage_ref r = ref_of(24, cks);
    r.offset = 24 * (uint64_t)q;
    if (q == 3) {
      r.codec = DCP_CODEC_ZSTD, r.block_size = 16, r.block_count = 2;
      r.stored_length = 17, r.block_stored_lengths = lens;
    }
    assert_int_equal(dcpi_md_add_chunk(md, 0, off, sz, &r, &err), DCP_OK);
  }
}

/* A reservation changes capacity only: errors as documented, and chunks
 * added past it (or with none) encode to the same bytes. */
static void test_reserve_chunks(void **state) {
  (void)state;
  dcpi_err err;
  dcpi_md *md = fixture(), *plain = fixture();
  EXPECT(DCP_EINVAL, dcpi_md_reserve_chunks(NULL, 0, 4, &err));
  EXPECT(DCP_ENOTFOUND, dcpi_md_reserve_chunks(md, 1, 4, &err));
  EXPECT(DCP_EOVERFLOW, dcpi_md_reserve_chunks(md, 0, SIZE_MAX / 2, &err));
  assert_int_equal(dcpi_md_reserve_chunks(md, 0, 2, &err), DCP_OK);
  assert_int_equal(dcpi_md_reserve_chunks(md, 0, 1, &err), DCP_OK); /* never shrinks */
  const int shuffled[4] = {2, 0, 3, 1}, sorted[4] = {0, 1, 2, 3};
  add_quarters(md, shuffled);
  add_quarters(plain, sorted);
  void *a, *b;
  size_t la, lb;
  assert_int_equal(dcpi_md_encode(md, &a, &la, &err), DCP_OK);
  assert_int_equal(dcpi_md_encode(plain, &b, &lb, &err), DCP_OK);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  dcp_meta *v;
  assert_int_equal(dcp_meta_open_memory(NULL, a, la, &v), DCP_OK);
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(v, 0, 3, &ci), DCP_OK); /* the zstd one: box (2, 3) */
  assert_int_equal(ci.box.offset[0], 2);
  assert_int_equal(ci.ref.codec, DCP_CODEC_ZSTD);
  assert_int_equal(ci.ref.block_count, 2);
  assert_int_equal(ci.ref.block_checksums[1], 8);
  assert_int_equal(ci.ref.block_stored_lengths[0], 9);
  assert_int_equal(ci.ref.stored_length, 17);
  dcp_meta_free(v);
  free(a), free(b);
  dcpi_md_free(md);
  dcpi_md_free(plain);
}

static void test_bytes_and_kv_errors(void **state) {
  (void)state;
  dcpi_md *md = fixture();
  dcpi_err err;
  const uint64_t cks[1] = {7};
  dcp_storage_ref r = ref_of(5, cks), empty = ref_of(0, NULL);
  EXPECT(DCP_EINVAL, dcpi_md_add_bytes(md, NULL, DCP_SCOPE_REPLICATED, -1, &r, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_bytes(md, "", DCP_SCOPE_REPLICATED, -1, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_bytes(md, "s", (dcp_scope)2, -1, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_bytes(md, "s", DCP_SCOPE_REPLICATED, 0, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_bytes(md, "s", DCP_SCOPE_PER_RANK, -1, &r, &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_bytes(md, "s", DCP_SCOPE_REPLICATED, -1, NULL, &err));
  EXPECT(DCP_EEXIST, dcpi_md_add_bytes(md, "w", DCP_SCOPE_REPLICATED, -1, &r, &err));
  dcp_storage_ref bad = r;
  bad.block_count = 0;
  EXPECT(DCP_EINVAL, dcpi_md_add_bytes(md, "s", DCP_SCOPE_REPLICATED, -1, &bad, &err));
  assert_int_equal(dcpi_md_bytes_count(md), 0);
  assert_int_equal(dcpi_md_add_bytes(md, "s", DCP_SCOPE_PER_RANK, 3, &r, &err), DCP_OK);
  assert_int_equal(dcpi_md_add_bytes(md, "s", DCP_SCOPE_PER_RANK, 4, &empty, &err), DCP_OK);
  EXPECT(DCP_EEXIST, dcpi_md_add_bytes(md, "s", DCP_SCOPE_PER_RANK, 3, &r, &err));
  EXPECT(DCP_ESCOPE, dcpi_md_add_bytes(md, "s", DCP_SCOPE_REPLICATED, -1, &r, &err));
  EXPECT(DCP_EEXIST, dcpi_md_add_tensor(md, "s", DCP_U8, 0, NULL, -1, NULL, NULL, &err));
  assert_int_equal(dcpi_md_add_bytes(md, "r", DCP_SCOPE_REPLICATED, -1, &r, &err), DCP_OK);
  EXPECT(DCP_EEXIST, dcpi_md_add_bytes(md, "r", DCP_SCOPE_REPLICATED, -1, &r, &err));
  EXPECT(DCP_ESCOPE, dcpi_md_add_bytes(md, "r", DCP_SCOPE_PER_RANK, 0, &r, &err));
  assert_int_equal(dcpi_md_bytes_count(md), 3);
  EXPECT(DCP_EINVAL, dcpi_md_add_kv(md, NULL, "v", &err));
  EXPECT(DCP_EINVAL, dcpi_md_add_kv(md, "k", NULL, &err));
  EXPECT(DCP_ENAME, dcpi_md_add_kv(md, "", "v", &err));
  assert_int_equal(dcpi_md_add_kv(md, "k", "v", &err), DCP_OK);
  EXPECT(DCP_EEXIST, dcpi_md_add_kv(md, "k", "other", &err));
  assert_int_equal(dcpi_md_kv_count(md), 1);
  /* A per-rank item outside the world is caught when encoding. */
  assert_int_equal(dcpi_md_add_bytes(md, "s", DCP_SCOPE_PER_RANK, 8, &r, &err), DCP_OK);
  void *buf;
  size_t len;
  EXPECT(DCP_EINVAL, dcpi_md_encode(md, &buf, &len, &err));
  dcpi_md_free(md);
  dcpi_md_free(NULL);
  assert_int_equal(dcpi_md_create(NULL), DCP_EINVAL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_file_and_mesh_errors),
      cmocka_unit_test(test_tensor_errors),
      cmocka_unit_test(test_chunk_errors),
      cmocka_unit_test(test_reserve_chunks),
      cmocka_unit_test(test_bytes_and_kv_errors),
  };
  return TU_RUN(tests, NULL, NULL);
}
