/* test_hostile_geometry.c — hostile shapes and boxes: element counts and
 * byte sizes that overflow int64, negative extents, boxes that are
 * negative, overflow, leave the shape or overlap, ndim mismatches — at
 * dcp_state_add_*, in the metadata decoder (crafted .metadata), on disk
 * (a .metadata whose chunks overlap) and in safetensors import. Each gets
 * its specific status and a message that names the dimension or box. */
#include "test_hostile_kit.h"

#include "metadata/meta.h"
#include "st_writer.h"

/* Declarations: overflow of the element count and of the byte size,
 * negative extents, too many dimensions. */
static void test_state_shapes(void **state) {
  hk_fixture *f = *state;
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t count[3] = {INT64_MAX / 2, 2, 2}, bytes[1] = {INT64_MAX / 4}, neg[2] = {3, -7};
  int64_t huge[2] = {(int64_t)1 << 32, (int64_t)1 << 32};
  assert_int_equal(dcp_state_add_tensor(st, "count", DCP_U8, 3, count), DCP_EOVERFLOW);
  hk_msg_has(f->ctx, "count", "overflows int64", NULL);
  assert_int_equal(dcp_state_add_tensor(st, "huge", DCP_U8, 2, huge), DCP_EOVERFLOW);
  assert_int_equal(dcp_state_add_tensor(st, "bytes", DCP_F64, 1, bytes), DCP_EOVERFLOW);
  hk_msg_has(f->ctx, "byte size", NULL, NULL);
  assert_int_equal(dcp_state_add_tensor(st, "neg", DCP_F32, 2, neg), DCP_EINVAL);
  hk_msg_has(f->ctx, "negative extent -7 in dim 1", NULL, NULL);
  int64_t many[DCP_MAX_NDIM + 1] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "many", DCP_F32, DCP_MAX_NDIM + 1, many), DCP_EINVAL);
  hk_msg_has(f->ctx, "exceeds DCP_MAX_NDIM", NULL, NULL);
  /* the same checks guard a sharded declaration */
  int64_t mesh[1] = {1};
  uint32_t map[1] = {0};
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(f->ctx, 1, mesh, NULL, 1, map, &l), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(st, "bytes", DCP_F64, 1, bytes, l, &bytes), DCP_EOVERFLOW);
  int64_t two[2] = {2, 2};
  assert_int_equal(dcp_state_add_sharded(st, "ndim", DCP_F32, 2, two, l, two), DCP_EINVAL);
  hk_msg_has(f->ctx, "layout maps 1 dims, tensor has 2", NULL, NULL);
  assert_int_equal(dcp_state_tensor_count(st), 0); /* nothing half-declared */
  dcp_layout_free(l);
  dcp_state_free(st);
}

/* Chunks: negative, overflowing, out of bounds, overlapping; flat ranges
 * outside their region and regions of the wrong ndim. */
static void test_state_boxes(void **state) {
  hk_fixture *f = *state;
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t shape[2] = {4, 6};
  float data[24] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  static const struct {
    int64_t off[2], size[2];
    dcp_status want;
    const char *msg;
  } cases[] = {
      {{-1, 0}, {1, 1}, DCP_EINVAL, "negative offset -1"},
      {{0, 0}, {1, -2}, DCP_EINVAL, "size -2 in dim 1"},
      {{INT64_MAX, 0}, {1, 1}, DCP_EOVERFLOW, "offset+size overflows int64 in dim 0"},
      {{0, INT64_MAX - 1}, {1, 2}, DCP_EOVERFLOW, "in dim 1"},
      {{3, 0}, {2, 6}, DCP_EBOUNDS, "box ends at 5 in dim 0, extent is 4"},
      {{0, 6}, {1, 1}, DCP_EBOUNDS, "in dim 1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(dcp_state_add_chunk(st, "w", cases[i].off, cases[i].size, data),
                     cases[i].want);
    hk_msg_has(f->ctx, "w: ", cases[i].msg, NULL);
  }
  int64_t o1[2] = {0, 0}, s1[2] = {2, 3}, o2[2] = {1, 2}, s2[2] = {2, 2};
  assert_int_equal(dcp_state_add_chunk(st, "w", o1, s1, data), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o2, s2, data), DCP_EOVERLAP);
  hk_msg_has(f->ctx, "chunk [1:3, 2:4] overlaps chunk [0:2, 0:3]", NULL, NULL);
  dcp_box region = {.ndim = 1, .offset = {0}, .size = {4}};
  assert_int_equal(dcp_state_add_flat(st, "w", &region, 0, 4, data), DCP_EINVAL);
  hk_msg_has(f->ctx, "region has ndim 1, tensor has 2", NULL, NULL);
  dcp_box r2 = {.ndim = 2, .offset = {2, 0}, .size = {2, 6}};
  assert_int_equal(dcp_state_add_flat(st, "w", &r2, 10, 3, data), DCP_EBOUNDS);
  hk_msg_has(f->ctx, "exceeds the region's 12 elements", NULL, NULL);
  assert_int_equal(dcp_state_add_flat(st, "w", &r2, -1, 3, data), DCP_EINVAL);
  assert_int_equal(dcp_state_add_flat(st, "w", &r2, INT64_MAX, 1, data), DCP_EOVERFLOW);
  dcp_box r3 = {.ndim = 2, .offset = {3, 0}, .size = {2, 6}};
  assert_int_equal(dcp_state_add_flat(st, "w", &r3, 0, 1, data), DCP_EBOUNDS);
  dcp_state_free(st);
  /* the public box helpers */
  dcp_box b = {.ndim = 2, .offset = {0, 0}, .size = {INT64_MAX, 2}};
  int64_t n;
  assert_int_equal(dcp_box_numel(&b, &n), DCP_EOVERFLOW);
  b.size[0] = -1;
  assert_int_equal(dcp_box_numel(&b, &n), DCP_EINVAL);
  b.ndim = DCP_MAX_NDIM + 1;
  assert_int_equal(dcp_box_numel(&b, &n), DCP_EINVAL);
}

/* Crafted .metadata with valid checksums: shapes whose byte size or
 * element count overflows are refused at open (tensors section); boxes
 * that leave the shape, overflow or are empty when their chunk is read
 * (chunks section, naming the tensor and chunk). */
static void test_decoder_geometry(void **state) {
  hk_fixture *f = *state;
  dcp_status chunk;
  hk_craft c = hk_base();
  assert_int_equal(hk_open_craft(f->ctx, &c, &chunk), DCP_OK);
  assert_int_equal(chunk, DCP_OK);
  hk_craft t = c; /* F64 of 2^61 elements: 2^64 bytes */
  t.dtype = DCP_F64;
  t.shape[0] = (uint64_t)1 << 61;
  assert_int_equal(hk_open_craft(f->ctx, &t, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "tensors section", "overflows int64", NULL);
  t = c; /* 2^32 x 2^32 elements */
  t.ndim = 2;
  t.shape[0] = t.shape[1] = (uint64_t)1 << 32;
  t.box_size[0] = 4, t.box_size[1] = 1;
  assert_int_equal(hk_open_craft(f->ctx, &t, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "tensors section", "overflows int64", NULL);
  t = c; /* an extent past INT64_MAX ("negative" as int64) */
  t.shape[0] = (uint64_t)INT64_MAX + 1;
  assert_int_equal(hk_open_craft(f->ctx, &t, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "tensors section", "extent", NULL);
  t = c;
  t.ndim = DCP_MAX_NDIM + 1;
  assert_int_equal(hk_open_craft(f->ctx, &t, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "ndim", NULL, NULL);
  static const struct {
    uint64_t off, size;
    const char *msg;
  } boxes[] = {
      {0, 5, "exceeds extent 4"},
      {2, 3, "exceeds extent 4"},
      {(uint64_t)INT64_MAX, 1, "exceeds extent 4"},
      {(uint64_t)INT64_MAX + 1, 1, "box offset"},
      {0, (uint64_t)INT64_MAX + 1, "box size"},
      {0, 0, "empty box"},
  };
  for (size_t i = 0; i < sizeof boxes / sizeof boxes[0]; i++) {
    t = c;
    t.box_off[0] = boxes[i].off;
    t.box_size[0] = boxes[i].size;
    assert_int_equal(hk_open_craft(f->ctx, &t, &chunk), DCP_OK);
    assert_int_equal(chunk, DCP_ECORRUPT);
    hk_msg_has(f->ctx, "chunks section, tensor 0 ('t'), chunk 0", boxes[i].msg, NULL);
  }
}

/* Save "w" U8 [4] as chunks [0,2) and [2,4), then rewrite its .metadata
 * so the second chunk claims box [shift, shift+2) (same length, same data
 * and checksums: only the geometry lies). */
static void save_and_shift(hk_fixture *f, int64_t shift) {
  uint8_t data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4}, o1[1] = {0}, o2[1] = {2}, sz[1] = {2};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_U8, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o1, sz, data), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o2, sz, data + 2), DCP_OK);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_state_free(st);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  dcpi_md *md;
  dcpi_err err;
  uint32_t file, tid;
  const char *name;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcp_meta_file(m, 0, &name), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md, name, &file, &err), DCP_OK);
  assert_int_equal(dcpi_md_add_tensor(md, "w", DCP_U8, 1, shape, -1, NULL, &tid, &err), DCP_OK);
  for (size_t c = 0; c < 2; c++) {
    dcp_chunk_info ci;
    assert_int_equal(dcp_meta_chunk(m, 0, c, &ci), DCP_OK);
    if (ci.box.offset[0] == 2) ci.box.offset[0] = shift;
    assert_int_equal(dcpi_md_add_chunk(md, tid, ci.box.offset, ci.box.size, &ci.ref, &err),
                     DCP_OK);
  }
  void *enc;
  size_t len;
  assert_int_equal(dcpi_md_encode(md, &enc, &len, &err), DCP_OK);
  char p[PATH_MAX + 32];
  hk_write_file(hk_path(p, sizeof p, f->ckpt, ".metadata"), enc, len);
  free(enc);
  dcpi_md_free(md);
  dcp_meta_free(m);
}

/* Load the whole of "w" into dst; returns the status. */
static dcp_status load_w(hk_fixture *f, uint8_t *dst) {
  int64_t shape[1] = {4}, zero[1] = {0};
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_U8, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", zero, shape, dst), DCP_OK);
  dcp_status rc = dcp_load(f->ctx, ld, f->ckpt, NULL);
  dcp_state_free(ld);
  return rc;
}

/* Saved chunks that overlap — alone, or with a gap that makes their
 * volumes add up to the tensor's — are refused by load and by verify;
 * a load never returns DCP_OK with an element nobody wrote. */
static void test_overlapping_saved_chunks(void **state) {
  hk_fixture *f = *state;
  uint8_t dst[4];
  save_and_shift(f, 2); /* the honest layout loads */
  memset(dst, 0, sizeof dst);
  assert_int_equal(load_w(f, dst), DCP_OK);
  assert_true(dst[0] == 1 && dst[1] == 2 && dst[2] == 3 && dst[3] == 4);
  save_and_shift(f, 1); /* [0,2) and [1,3): overlap at 1, element 3 uncovered */
  assert_int_equal(load_w(f, dst), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "'w'", "overlap", NULL);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(dcp_verify(f->ctx, f->ckpt, &rep), DCP_ECORRUPT);
  assert_non_null(strstr(rep.first_problem, "'w'"));
  /* the view refuses the list itself, naming both boxes */
  dcp_meta *m;
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  assert_int_equal(dcp_meta_chunk(m, 0, 0, &ci), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "chunks section, tensor 0 ('w')", "chunks 0 [0:2] and 1 [1:3] overlap", NULL);
  dcp_meta_free(m);
}

/* A destination of another ndim or shape than the saved tensor. */
static void test_load_geometry_mismatch(void **state) {
  hk_fixture *f = *state;
  save_and_shift(f, 2);
  uint8_t dst[4];
  int64_t shape2[2] = {2, 2}, zero2[2] = {0, 0}, shape5[1] = {5}, zero[1] = {0}, one[1] = {1};
  dcp_state *ld;
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_U8, 2, shape2), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", zero2, shape2, dst), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_EMISMATCH);
  hk_msg_has(f->ctx, "'w'", NULL, NULL);
  dcp_state_free(ld);
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(ld, "w", DCP_U8, 1, shape5), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(ld, "w", zero, one, dst), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_EMISMATCH);
  dcp_state_free(ld);
}

/* Import one U8 tensor described by `desc` (its JSON object) over `len`
 * data bytes. */
static dcp_status import_desc(hk_fixture *f, const char *desc, size_t len) {
  char src[PATH_MAX + 32], header[512];
  hk_path(src, sizeof src, f->dir, "g.safetensors");
  snprintf(header, sizeof header, "{\"t\":%s}", desc);
  uint8_t data[64] = {0};
  assert_int_equal(st_write_raw(src, strlen(header), header, data, len), 0);
  return dcp_import_safetensors(f->ctx, src, f->ckpt, 0);
}

/* safetensors headers with hostile geometry: DCP_ECORRUPT naming the
 * tensor and what is wrong; nothing is committed. */
static void test_safetensors_geometry(void **state) {
  hk_fixture *f = *state;
  static const struct {
    const char *desc;
    const char *msg;
  } cases[] = {
      {"{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}",
       "element count overflows"},
      {"{\"dtype\":\"F64\",\"shape\":[2305843009213693952],\"data_offsets\":[0,4]}",
       "byte size of the shape (F64) overflows int64"},
      {"{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}", "not a non-negative integer"},
      {"{\"dtype\":\"U8\",\"shape\":[9223372036854775808],\"data_offsets\":[0,4]}",
       "not valid JSON"},
      {"{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,4]}",
       "17 dimensions"},
      {"{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,5]}", "outside"},
      {"{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[3,1]}", "outside"},
      {"{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[-1,3]}", "data_offsets"},
      {"{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,4]}", "need 3 bytes"},
      {"{\"dtype\":\"U8\",\"shape\":4,\"data_offsets\":[0,4]}", "shape is not an array"},
  };
  char p[PATH_MAX + 32];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    assert_int_equal(import_desc(f, cases[i].desc, 4), DCP_ECORRUPT);
    hk_msg_has(f->ctx, cases[i].msg, NULL, NULL);
    assert_false(hk_exists(hk_path(p, sizeof p, f->ckpt, ".metadata")));
  }
  assert_int_equal(import_desc(f, "{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]}", 4),
                   DCP_OK);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_state_shapes, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_state_boxes, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_decoder_geometry, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_overlapping_saved_chunks, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_load_geometry_mismatch, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_safetensors_geometry, hk_setup, hk_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
