/* safetensors import (copied and linked), export (one file and shards),
 * dcp_read_tensor and dcp_verify, on one rank with the posix plugin.
 * Fixtures are written here by tests/support/st_writer.c. */
#include "testutil.h"
#include "ckpt_files.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "convert/safetensors.h"
#include "st_writer.h"

typedef struct fixture {
  char dir[PATH_MAX];
  dcp_ctx *ctx;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  char plugins[PATH_MAX];
  f->ctx = tu_scratch_ctx("dcp-conv", f->dir, sizeof f->dir, plugins, sizeof plugins);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  dcp_ctx_free(f->ctx);
  tu_remove_tree(f->dir);
  free(f);
  return 0;
}

static char *path_of(const fixture *f, const char *name) {
  static char p[4][PATH_MAX + 256];
  static int k;
  k = (k + 1) % 4;
  size_t n = strlen(f->dir);
  assert_true(n + strlen(name) + 2 < sizeof p[k]);
  memcpy(p[k], f->dir, n);
  p[k][n] = '/';
  strcpy(p[k] + n + 1, name);
  return p[k];
}


static dcp_status check(fixture *f, dcp_status rc) {
  if (rc) fprintf(stderr, "  (%s) %s\n", dcp_strerror(rc), dcp_ctx_last_error(f->ctx));
  return rc;
}

/* A safetensors file read back with the library's parser. */
typedef struct st_file {
  uint8_t *buf;
  size_t len;
  dcpi_st_header *h;
} st_file;

static void st_open(const char *path, st_file *sf) {
  sf->buf = tu_read_file(path, &sf->len);
  uint64_t hlen;
  dcpi_err err;
  assert_int_equal(dcpi_st_header_len(sf->buf, sf->len, &hlen, &err), DCP_OK);
  assert_int_equal(hlen % 8, 0);
  dcp_status rc = dcpi_st_parse((const char *)sf->buf + 8, (size_t)hlen, sf->len - 8 - hlen,
                               &sf->h, &err);
  if (rc) fprintf(stderr, "%s\n", err.msg);
  assert_int_equal(rc, DCP_OK);
}

static void st_close(st_file *sf) {
  dcpi_st_header_free(sf->h);
  free(sf->buf);
}

static const dcpi_st_tensor *st_find(const st_file *sf, const char *name) {
  for (size_t i = 0; i < sf->h->ntensors; i++)
    if (strcmp(sf->h->tensors[i].name, name) == 0) return &sf->h->tensors[i];
  return NULL;
}

/* The source tensor t is in sf with the same dtype, shape and bytes. */
static void expect_tensor(const st_file *sf, const st_tensor *t) {
  const dcpi_st_tensor *e = st_find(sf, t->name);
  assert_non_null(e);
  assert_string_equal(dcp_dtype_name(e->dtype), t->dtype);
  assert_int_equal(e->ndim, t->ndim);
  for (uint32_t d = 0; d < t->ndim; d++) assert_int_equal(e->shape[d], t->shape[d]);
  assert_int_equal(e->end - e->begin, t->nbytes);
  if (t->nbytes) assert_memory_equal(sf->buf + sf->h->data_start + e->begin, t->data, t->nbytes);
}

/* ---- all dtypes, copied import, single-file export ----------------------- */

enum { NDT = DCP_DTYPE_END_ - 1 };

static void make_all_dtypes(st_tensor *t, uint8_t **bufs) {
  for (int k = 0; k < NDT; k++) {
    dcp_dtype dt = (dcp_dtype)(k + 1);
    static char names[NDT][32];
    snprintf(names[k], sizeof names[k], "layer.%02d.%s", k, dcp_dtype_name(dt));
    t[k] = (st_tensor){.name = names[k], .dtype = dcp_dtype_name(dt), .ndim = 2,
                       .shape = {3 + k, 5}};
    t[k].nbytes = (size_t)(3 + k) * 5 * dcp_dtype_size(dt);
    bufs[k] = malloc(t[k].nbytes);
    st_fill(bufs[k], t[k].nbytes, (uint32_t)k);
    if (dt == DCP_BOOL)
      for (size_t i = 0; i < t[k].nbytes; i++) bufs[k][i] &= 1;
    t[k].data = bufs[k];
  }
}

static void test_roundtrip_all_dtypes(void **state) {
  fixture *f = *state;
  st_tensor t[NDT + 2];
  uint8_t *bufs[NDT];
  make_all_dtypes(t, bufs);
  static float scalar = 3.5f;
  t[NDT] = (st_tensor){.name = "scalar", .dtype = "F32", .ndim = 0, .data = &scalar,
                       .nbytes = 4};
  t[NDT + 1] = (st_tensor){.name = "empty", .dtype = "F16", .ndim = 2, .shape = {0, 7}};
  const char *keys[] = {"format", "step"}, *vals[] = {"pt", "1000"};
  assert_int_equal(st_write(path_of(f, "src.safetensors"), t, NDT + 2, keys, vals, 2), 0);

  assert_int_equal(check(f, dcp_import_safetensors(f->ctx, path_of(f, "src.safetensors"),
                                                   path_of(f, "ckpt"), 0)), DCP_OK);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(check(f, dcp_verify(f->ctx, path_of(f, "ckpt"), &rep)), DCP_OK);
  assert_int_equal(rep.tensors, NDT + 2);
  assert_int_equal(rep.problems, 0);
  /* importing again over a committed checkpoint is refused */
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "src.safetensors"),
                                          path_of(f, "ckpt"), 0), DCP_EEXIST);

  assert_int_equal(check(f, dcp_export_safetensors(f->ctx, path_of(f, "ckpt"),
                                                   path_of(f, "out"), 0)), DCP_OK);
  st_file sf;
  st_open(path_of(f, "out/model.safetensors"), &sf);
  assert_int_equal(sf.h->ntensors, NDT + 2);
  for (int k = 0; k < NDT + 2; k++) expect_tensor(&sf, &t[k]);
  assert_int_equal(sf.h->nkv, 2);
  assert_string_equal(sf.h->kv_keys[0], "format");
  assert_string_equal(sf.h->kv_values[0], "pt");
  assert_string_equal(sf.h->kv_keys[1], "step");
  assert_string_equal(sf.h->kv_values[1], "1000");
  st_close(&sf);
  for (int k = 0; k < NDT; k++) free(bufs[k]);
}

/* ---- a large tensor becomes several chunks; read back whole ------------- */

static void test_large_tensor_chunks(void **state) {
  fixture *f = *state;
  size_t rows = 1100, cols = 16 * 1024; /* 1100 x 64 KiB = ~69 MiB: over the window */
  size_t n = rows * cols * 4;
  uint8_t *data = malloc(n), *back = malloc(n);
  st_fill(data, n, 7);
  st_tensor t = {.name = "big", .dtype = "F32", .ndim = 2, .shape = {(int64_t)rows,
                 (int64_t)cols}, .data = data, .nbytes = n};
  assert_int_equal(st_write(path_of(f, "big.safetensors"), &t, 1, NULL, NULL, 0), 0);
  assert_int_equal(check(f, dcp_import_safetensors(f->ctx, path_of(f, "big.safetensors"),
                                                   path_of(f, "ckpt"), 0)), DCP_OK);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, path_of(f, "ckpt"), &m), DCP_OK);
  dcp_tensor_info ti;
  assert_int_equal(dcp_meta_tensor(m, 0, &ti), DCP_OK);
  assert_true(ti.chunk_count >= 2);
  memset(back, 0, n);
  assert_int_equal(check(f, dcp_read_tensor(f->ctx, path_of(f, "ckpt"), m, 0, back, n)), DCP_OK);
  assert_memory_equal(back, data, n);
  assert_int_equal(dcp_read_tensor(f->ctx, path_of(f, "ckpt"), m, 0, back, n - 1), DCP_EINVAL);
  dcp_meta_free(m);
  free(data);
  free(back);
}

/* ---- sharded sets: import an index, export by max shard size ------------- */

static void write_index(const char *path, const char *const *names, const char *const *files,
                        size_t n) {
  json_t *root = json_object(), *wm = json_object(), *md = json_object();
  for (size_t i = 0; i < n; i++) json_object_set_new(wm, names[i], json_string(files[i]));
  json_object_set_new(md, "total_size", json_integer(0));
  json_object_set_new(root, "metadata", md);
  json_object_set_new(root, "weight_map", wm);
  assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
  json_decref(root);
}

static void test_sharded(void **state) {
  fixture *f = *state;
  st_tensor t[6];
  uint8_t bufs[6][4000];
  static char names[6][16];
  for (int k = 0; k < 6; k++) {
    snprintf(names[k], sizeof names[k], "t%d", k);
    t[k] = (st_tensor){.name = names[k], .dtype = k % 2 ? "BF16" : "F32", .ndim = 2,
                       .shape = {10 + k, 20}, .data = bufs[k]};
    t[k].nbytes = (size_t)(10 + k) * 20 * (k % 2 ? 2 : 4);
    st_fill(bufs[k], t[k].nbytes, 100u + (uint32_t)k);
  }
  const char *keys[] = {"format"}, *vals[] = {"pt"};
  assert_int_equal(st_write(path_of(f, "m-1.safetensors"), t, 3, keys, vals, 1), 0);
  assert_int_equal(st_write(path_of(f, "m-2.safetensors"), t + 3, 3, keys, vals, 1), 0);
  const char *tn[6] = {"t0", "t1", "t2", "t3", "t4", "t5"};
  const char *fn[6] = {"m-1.safetensors", "m-1.safetensors", "m-1.safetensors",
                       "m-2.safetensors", "m-2.safetensors", "m-2.safetensors"};
  write_index(path_of(f, "m.safetensors.index.json"), tn, fn, 6);
  assert_int_equal(check(f, dcp_import_safetensors(f->ctx, path_of(f, "m.safetensors.index.json"),
                                                   path_of(f, "ckpt"), 0)), DCP_OK);
  /* export in shards of at most 2500 bytes: several files and an index */
  assert_int_equal(check(f, dcp_export_safetensors(f->ctx, path_of(f, "ckpt"), path_of(f, "out"),
                                                   2500)), DCP_OK);
  json_error_t je;
  json_t *idx = json_load_file(path_of(f, "out/model.safetensors.index.json"), 0, &je);
  assert_non_null(idx);
  json_t *wm = json_object_get(idx, "weight_map");
  assert_int_equal(json_object_size(wm), 6);
  size_t total = 0;
  for (int k = 0; k < 6; k++) total += t[k].nbytes;
  assert_int_equal(json_integer_value(json_object_get(json_object_get(idx, "metadata"),
                                                      "total_size")), total);
  const char *first = json_string_value(json_object_get(wm, "t0"));
  assert_non_null(strstr(first, "model-00001-of-0000"));
  for (int k = 0; k < 6; k++) {
    char p[64];
    snprintf(p, sizeof p, "out/%s", json_string_value(json_object_get(wm, names[k])));
    st_file sf;
    st_open(path_of(f, p), &sf);
    expect_tensor(&sf, &t[k]);
    assert_int_equal(sf.h->nkv, 1);
    assert_true(sf.h->data_len <= 2500 || sf.h->ntensors == 1);
    st_close(&sf);
  }
  json_decref(idx);
  /* the exported set imports back (through its own index) */
  assert_int_equal(check(f, dcp_import_safetensors(f->ctx,
                                                   path_of(f, "out/model.safetensors.index.json"),
                                                   path_of(f, "ckpt2"), 0)), DCP_OK);
  assert_int_equal(check(f, dcp_verify(f->ctx, path_of(f, "ckpt2"), NULL)), DCP_OK);
  /* an index naming a tensor its shard lacks is corrupt */
  const char *fn_bad[6] = {"m-1.safetensors", "m-1.safetensors", "m-2.safetensors",
                           "m-2.safetensors", "m-2.safetensors", "m-2.safetensors"};
  write_index(path_of(f, "bad.safetensors.index.json"), tn, fn_bad, 6);
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "bad.safetensors.index.json"),
                                          path_of(f, "ckpt3"), 0), DCP_ECORRUPT);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "t2"));
  /* shards whose __metadata__ disagree on a key: corrupt, naming both */
  const char *other[] = {"np"};
  assert_int_equal(st_write(path_of(f, "m-3.safetensors"), t + 3, 3, keys, other, 1), 0);
  const char *fn3[6] = {"m-1.safetensors", "m-1.safetensors", "m-1.safetensors",
                        "m-3.safetensors", "m-3.safetensors", "m-3.safetensors"};
  write_index(path_of(f, "kv.safetensors.index.json"), tn, fn3, 6);
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "kv.safetensors.index.json"),
                                          path_of(f, "ckpt4"), 0), DCP_ECORRUPT);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx),
                         "key 'format' differs between shards 'm-1.safetensors' and "
                         "'m-3.safetensors'"));
}

/* ---- linked import, then a resharded load straight from the file -------- */

enum { LR = 37, LC = 29 };

static void test_linked_load(void **state) {
  fixture *f = *state;
  static float w[LR * LC];
  for (int i = 0; i < LR * LC; i++) w[i] = (float)i * 0.5f;
  static uint16_t b[LC];
  st_fill(b, sizeof b, 3);
  st_tensor t[2] = {{.name = "w", .dtype = "F32", .ndim = 2, .shape = {LR, LC}, .data = w,
                     .nbytes = sizeof w},
                    {.name = "b", .dtype = "BF16", .ndim = 1, .shape = {LC}, .data = b,
                     .nbytes = sizeof b}};
  mkdir(path_of(f, "model"), 0755);
  const char *keys[] = {"format"}, *vals[] = {"pt"};
  assert_int_equal(st_write(path_of(f, "model/x.safetensors"), t, 2, keys, vals, 1), 0);
  /* the checkpoint must be the directory of the files */
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "model/x.safetensors"),
                                          path_of(f, "elsewhere"), DCP_IMPORT_LINK), DCP_EINVAL);
  assert_int_equal(check(f, dcp_import_safetensors(f->ctx, path_of(f, "model/x.safetensors"),
                                                   path_of(f, "model/"), DCP_IMPORT_LINK)),
                   DCP_OK);
  assert_int_equal(ck_find(path_of(f, "model"), "data-", ".dcp", NULL, 0), 0); /* nothing copied */
  assert_int_equal(check(f, dcp_verify(f->ctx, path_of(f, "model"), NULL)), DCP_OK);

  /* load w as three uneven column bands and b whole */
  static float c0[LR * 10], c1[LR * 10], c2[LR * 9];
  uint16_t bb[LC] = {0};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t shape[2] = {LR, LC}, sz0[2] = {LR, 10}, sz2[2] = {LR, 9};
  int64_t o0[2] = {0, 0}, o1[2] = {0, 10}, o2[2] = {0, 20}, bs[1] = {LC}, z[1] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o0, sz0, c0), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o1, sz0, c1), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", o2, sz2, c2), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "b", DCP_BF16, 1, bs), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "b", z, bs, bb), DCP_OK);
  assert_int_equal(check(f, dcp_load(f->ctx, st, path_of(f, "model"), NULL)), DCP_OK);
  for (int i = 0; i < LR; i++)
    for (int j = 0; j < LC; j++) {
      float v = j < 10 ? c0[i * 10 + j] : j < 20 ? c1[i * 10 + j - 10] : c2[i * 9 + j - 20];
      assert_true(v == w[i * LC + j]);
    }
  assert_memory_equal(bb, b, sizeof b);
  dcp_state_free(st);

  /* a changed byte in the original file is caught by verify */
  FILE *fp = fopen(path_of(f, "model/x.safetensors"), "r+b");
  fseek(fp, -(long)sizeof b - 3, SEEK_END); /* in w, just before b */
  fputc(0x5a ^ fgetc(fp), fp);
  fclose(fp);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(dcp_verify(f->ctx, path_of(f, "model"), &rep), DCP_ECORRUPT);
  assert_true(rep.problems >= 1);
  assert_non_null(strstr(rep.first_problem, "tensor 'w'"));
}

/* ---- export of a multi-chunk checkpoint with uneven shards --------------- */

static void test_export_multichunk(void **state) {
  fixture *f = *state;
  enum { R = 23, C = 11 };
  static int32_t a[R * C];
  for (int i = 0; i < R * C; i++) a[i] = i * 7 - 100;
  static double v[13];
  for (int i = 0; i < 13; i++) v[i] = i / 3.0;
  /* a as uneven row bands (9, 9, 5) with the last band split by columns */
  static int32_t p0[9 * C], p1[9 * C], p2[5 * 6], p3[5 * 5];
  for (int i = 0; i < R; i++)
    for (int j = 0; j < C; j++) {
      int32_t x = a[i * C + j];
      if (i < 9) p0[i * C + j] = x;
      else if (i < 18) p1[(i - 9) * C + j] = x;
      else if (j < 6) p2[(i - 18) * 6 + j] = x;
      else p3[(i - 18) * 5 + j - 6] = x;
    }
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t shape[2] = {R, C}, vs[1] = {13};
  int64_t o0[2] = {0, 0}, s0[2] = {9, C}, o1[2] = {9, 0}, o2[2] = {18, 0}, s2[2] = {5, 6},
          o3[2] = {18, 6}, s3[2] = {5, 5};
  assert_int_equal(dcp_state_add_tensor(st, "a", DCP_I32, 2, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "a", o0, s0, p0), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "a", o1, s0, p1), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "a", o2, s2, p2), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "a", o3, s3, p3), DCP_OK);
  int64_t zero[1] = {0}, five[1] = {5}, s5[1] = {5}, s8[1] = {8};
  assert_int_equal(dcp_state_add_tensor(st, "v", DCP_F64, 1, vs), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "v", zero, s5, v), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "v", five, s8, v + 5), DCP_OK);
  uint64_t step = 5;
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step, 8), DCP_OK);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.block_size = 4096;
  const char *k[] = {"step"}, *val[] = {"5"};
  o.nkv = 1, o.kv_keys = k, o.kv_values = val;
  assert_int_equal(check(f, dcp_save(f->ctx, st, path_of(f, "ckpt"), &o)), DCP_OK);
  dcp_state_free(st);
  assert_int_equal(check(f, dcp_export_safetensors(f->ctx, path_of(f, "ckpt"), path_of(f, "out"),
                                                   100)), DCP_OK);
  st_tensor ta = {.name = "a", .dtype = "I32", .ndim = 2, .shape = {R, C}, .data = a,
                  .nbytes = sizeof a};
  st_tensor tv = {.name = "v", .dtype = "F64", .ndim = 1, .shape = {13}, .data = v,
                  .nbytes = sizeof v};
  st_file s1, s2f;
  st_open(path_of(f, "out/model-00001-of-00002.safetensors"), &s1);
  st_open(path_of(f, "out/model-00002-of-00002.safetensors"), &s2f);
  expect_tensor(&s1, &ta);
  expect_tensor(&s2f, &tv);
  assert_string_equal(s1.h->kv_keys[0], "step");
  st_close(&s1);
  st_close(&s2f);
}

/* ---- hostile headers ------------------------------------------------------- */

typedef struct hostile {
  const char *what, *header, *reason;
  size_t data_len;
  int64_t hsize; /* -1: the header's length */
} hostile;

static const hostile cases[] = {
    {"huge header size", "{}", "exceeds the limit", 0, 1000000000000LL},
    {"header past the end", "{}", "past the end", 0, 4096},
    {"bad json", "{\"a\": {\"dtype\": \"F32\",", "not valid JSON", 0, -1},
    {"not an object", "[1, 2]", "not a JSON object", 0, -1},
    {"unknown dtype", "{\"w\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}",
     "tensor 'w': unknown dtype 'F31'", 8, -1},
    {"shape/bytes mismatch", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
     "tensor 'w': shape and dtype F32 need 12 bytes", 8, -1},
    {"overlap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
     "tensor 'b': span [2, 6) overlaps tensor 'a'", 6, -1},
    {"gap",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}",
     "tensor 'b': gap of 2 bytes", 10, -1},
    {"trailing bytes", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     "cover 4 bytes of the 9-byte", 9, -1},
    {"truncated data", "{\"a\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]}}",
     "tensor 'a': data_offsets [0, 16] outside the 5-byte", 5, -1},
    {"negative extent", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,0]}}",
     "tensor 'a': extent 0", 0, -1},
    {"duplicate key",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}}",
     "duplicate", 0, -1},
    {"metadata not strings", "{\"__metadata__\":{\"step\":5}}",
     "entry 'step' is a number, not a string", 0, -1},
    /* __metadata__ is reserved for a string -> string map: anything else,
     * a tensor entry by that name included, is refused and says why */
    {"metadata not an object", "{\"__metadata__\":[1]}",
     "__metadata__ is an array, not an object of strings", 0, -1},
    {"tensor named __metadata__",
     "{\"__metadata__\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]}}",
     "safetensors reserves the key '__metadata__' for string-to-string metadata", 8, -1},
    {"invalid utf-8", "{\"\xff\xfe\":{}}", "not valid JSON", 0, -1},
    {"extra field",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0],\"x\":1}}",
     "unknown field 'x'", 0, -1},
};

static void test_hostile_headers(void **state) {
  fixture *f = *state;
  uint8_t data[64] = {0};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const hostile *c = &cases[i];
    char name[64];
    snprintf(name, sizeof name, "h%zu.safetensors", i);
    uint64_t hs = c->hsize < 0 ? strlen(c->header) : (uint64_t)c->hsize;
    assert_int_equal(st_write_raw(path_of(f, name), hs, c->header, data, c->data_len), 0);
    char ck[64];
    snprintf(ck, sizeof ck, "ck%zu", i);
    dcp_status rc = dcp_import_safetensors(f->ctx, path_of(f, name), path_of(f, ck), 0);
    const char *msg = dcp_ctx_last_error(f->ctx);
    if (rc != DCP_ECORRUPT || !strstr(msg, c->reason) || !strstr(msg, name))
      fprintf(stderr, "case '%s': %s: %s\n", c->what, dcp_strerror(rc), msg);
    assert_int_equal(rc, DCP_ECORRUPT);
    assert_non_null(strstr(msg, c->reason));
    assert_non_null(strstr(msg, name));
    struct stat sb;
    char meta[80];
    snprintf(meta, sizeof meta, "%s/.metadata", ck);
    assert_int_equal(stat(path_of(f, meta), &sb), -1);
  }
  /* a file shorter than the 8-byte size */
  FILE *fp = fopen(path_of(f, "short.safetensors"), "wb");
  fputs("abc", fp);
  fclose(fp);
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "short.safetensors"),
                                          path_of(f, "cks"), 0), DCP_ECORRUPT);
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "missing.safetensors"),
                                          path_of(f, "ckm"), 0), DCP_ENOTFOUND);
}

/* ---- verify finds corrupt blocks and missing files ------------------------- */

static void test_verify_problems(void **state) {
  fixture *f = *state;
  static float w[64 * 64];
  st_fill(w, sizeof w, 9);
  st_tensor t = {.name = "enc.w", .dtype = "F32", .ndim = 2, .shape = {64, 64}, .data = w,
                 .nbytes = sizeof w};
  assert_int_equal(st_write(path_of(f, "s.safetensors"), &t, 1, NULL, NULL, 0), 0);
  assert_int_equal(check(f, dcp_import_safetensors(f->ctx, path_of(f, "s.safetensors"),
                                                   path_of(f, "ckpt"), 0)), DCP_OK);
  char data[PATH_MAX];
  assert_true(ck_data_file(path_of(f, "ckpt"), 0, data, sizeof data));
  FILE *fp = fopen(data, "r+b");
  fseek(fp, 100, SEEK_SET);
  fputc(0x11 ^ fgetc(fp), fp);
  fclose(fp);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(dcp_verify(f->ctx, path_of(f, "ckpt"), &rep), DCP_ECORRUPT);
  assert_int_equal(rep.problems, 1);
  assert_int_equal(rep.first_status, DCP_ECORRUPT);
  assert_non_null(strstr(rep.first_problem, "checksum mismatch"));
  assert_non_null(strstr(rep.first_problem, "enc.w"));
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "enc.w"));
  /* export refuses to write corrupt data */
  assert_int_equal(dcp_export_safetensors(f->ctx, path_of(f, "ckpt"), path_of(f, "out"), 0),
                   DCP_ECORRUPT);
  unlink(data);
  assert_int_equal(dcp_verify(f->ctx, path_of(f, "ckpt"), &rep), DCP_EINCOMPLETE);
  assert_int_equal(dcp_verify(f->ctx, path_of(f, "nothing"), &rep), DCP_ENOTFOUND);
}

/* ---- __metadata__ is reserved: export refuses a tensor of that name ------ */

static void test_export_reserved_name(void **state) {
  fixture *f = *state;
  static float m[4] = {1, 2, 3, 4}, w[2] = {5, 6};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t s4[1] = {4}, s2[1] = {2}, z[1] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "__metadata__", DCP_F32, 1, s4), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "__metadata__", z, s4, m), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, s2), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", z, s2, w), DCP_OK);
  dcp_save_options o;
  dcp_save_options_init(&o);
  const char *k[] = {"step"}, *v[] = {"5"};
  o.nkv = 1, o.kv_keys = k, o.kv_values = v;
  assert_int_equal(check(f, dcp_save(f->ctx, st, path_of(f, "ckpt"), &o)), DCP_OK);
  dcp_state_free(st);
  /* one file or shards: refused before anything is written */
  for (uint64_t max = 0; max <= 8; max += 8) {
    assert_int_equal(dcp_export_safetensors(f->ctx, path_of(f, "ckpt"), path_of(f, "out"), max),
                     DCP_ENAME);
    const char *msg = dcp_ctx_last_error(f->ctx);
    assert_non_null(strstr(msg, "tensor '__metadata__'"));
    assert_non_null(strstr(msg, "reserves"));
    struct stat sb;
    assert_int_equal(stat(path_of(f, "out"), &sb), -1);
  }
  /* the header builder refuses it too, and names given twice */
  int64_t shape[1] = {2};
  dcpi_st_out t[2] = {{.name = "__metadata__", .dtype = DCP_F32, .ndim = 1, .shape = shape,
                       .begin = 0, .end = 8},
                      {.name = "a", .dtype = DCP_F32, .ndim = 1, .shape = shape, .begin = 8,
                       .end = 16}};
  uint8_t *hdr = NULL;
  size_t len = 0;
  dcpi_err err;
  assert_int_equal(dcpi_st_build_header(t, 2, NULL, NULL, 0, &hdr, &len, &err), DCP_ENAME);
  assert_non_null(strstr(err.msg, "'__metadata__'"));
  assert_null(hdr);
  t[0].name = "a";
  assert_int_equal(dcpi_st_build_header(t, 2, NULL, NULL, 0, &hdr, &len, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "tensor 'a' given twice"));
  const char *kk[] = {"x", "x"}, *kv[] = {"1", "2"};
  assert_int_equal(dcpi_st_build_header(t + 1, 1, kk, kv, 2, &hdr, &len, &err), DCP_EINVAL);
  assert_non_null(strstr(err.msg, "metadata key 'x' given twice"));
  assert_int_equal(dcpi_st_build_header(t + 1, 1, kk, kv, 1, &hdr, &len, &err), DCP_OK);
  free(hdr);
}

/* ---- an index with an empty weight_map -------------------------------------- */

static void test_index_empty_weight_map(void **state) {
  fixture *f = *state;
  write_index(path_of(f, "e.safetensors.index.json"), NULL, NULL, 0);
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "e.safetensors.index.json"),
                                          path_of(f, "ckpt"), 0), DCP_ECORRUPT);
  const char *msg = dcp_ctx_last_error(f->ctx);
  assert_non_null(strstr(msg, "e.safetensors.index.json"));
  assert_non_null(strstr(msg, "weight_map is empty"));
  struct stat sb;
  assert_int_equal(stat(path_of(f, "ckpt/.metadata"), &sb), -1);
}

/* ---- the Hugging Face cache: sources that are symbolic links ---------------- */

static void make_link(fixture *f, const char *target, const char *name) {
  assert_int_equal(symlink(target, path_of(f, name)), 0);
}

/* The exported model.safetensors of checkpoint ck holds tensors t[0..n). */
static void expect_exported(fixture *f, const char *ck, const st_tensor *t, size_t n) {
  char out[64], file[96];
  snprintf(out, sizeof out, "%s-out", ck);
  snprintf(file, sizeof file, "%s/model.safetensors", out);
  assert_int_equal(check(f, dcp_export_safetensors(f->ctx, path_of(f, ck), path_of(f, out), 0)),
                   DCP_OK);
  st_file sf;
  st_open(path_of(f, file), &sf);
  assert_int_equal(sf.h->ntensors, n);
  for (size_t i = 0; i < n; i++) expect_tensor(&sf, &t[i]);
  st_close(&sf);
}

/* hub/blobs/<hash> hold the bytes; hub/snapshots/<rev>/ hold relative links
 * to them, the index and every shard included. */
static void make_hf_cache(fixture *f, st_tensor *t) {
  static uint8_t bufs[4][96];
  static const char *names[4] = {"emb", "l0.w", "l1.w", "head"};
  for (int k = 0; k < 4; k++) {
    t[k] = (st_tensor){.name = names[k], .dtype = "F32", .ndim = 2, .shape = {4, 6},
                       .data = bufs[k], .nbytes = sizeof bufs[k]};
    st_fill(bufs[k], sizeof bufs[k], 40u + (uint32_t)k);
  }
  assert_int_equal(mkdir(path_of(f, "hub"), 0755), 0);
  assert_int_equal(mkdir(path_of(f, "hub/blobs"), 0755), 0);
  assert_int_equal(mkdir(path_of(f, "hub/snapshots"), 0755), 0);
  const char *revs[] = {"hub/snapshots/one", "hub/snapshots/two", "hub/snapshots/bad"};
  for (int r = 0; r < 3; r++) assert_int_equal(mkdir(path_of(f, revs[r]), 0755), 0);
  const char *keys[] = {"format"}, *vals[] = {"pt"};
  assert_int_equal(st_write(path_of(f, "hub/blobs/a1"), t, 4, keys, vals, 1), 0);
  assert_int_equal(st_write(path_of(f, "hub/blobs/b1"), t, 2, keys, vals, 1), 0);
  assert_int_equal(st_write(path_of(f, "hub/blobs/b2"), t + 2, 2, keys, vals, 1), 0);
  const char *fn[4] = {"model-00001-of-00002.safetensors", "model-00001-of-00002.safetensors",
                       "model-00002-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  write_index(path_of(f, "hub/blobs/i1"), names, fn, 4);
  make_link(f, "../../blobs/a1", "hub/snapshots/one/model.safetensors");
  make_link(f, "../../blobs/b1", "hub/snapshots/two/model-00001-of-00002.safetensors");
  make_link(f, "../../blobs/b2", "hub/snapshots/two/model-00002-of-00002.safetensors");
  make_link(f, "../../blobs/i1", "hub/snapshots/two/model.safetensors.index.json");
  /* a link to a link, a link to nothing, an index whose shard is a link to nothing */
  make_link(f, "../one/model.safetensors", "hub/snapshots/bad/chain.safetensors");
  make_link(f, "../../blobs/gone", "hub/snapshots/bad/model.safetensors");
  make_link(f, "../../blobs/i1", "hub/snapshots/bad/model.safetensors.index.json");
  make_link(f, "../../blobs/gone", "hub/snapshots/bad/model-00001-of-00002.safetensors");
  make_link(f, "../../blobs/b2", "hub/snapshots/bad/model-00002-of-00002.safetensors");
}

static void test_hf_cache_links(void **state) {
  fixture *f = *state;
  st_tensor t[4];
  make_hf_cache(f, t);
  size_t blen;
  uint8_t *blob = tu_read_file(path_of(f, "hub/blobs/a1"), &blen);
  /* one file, a sharded index, a chain of links: imported as copies */
  assert_int_equal(check(f, dcp_import_safetensors(
                                f->ctx, path_of(f, "hub/snapshots/one/model.safetensors"),
                                path_of(f, "c1"), 0)), DCP_OK);
  expect_exported(f, "c1", t, 4);
  assert_int_equal(check(f, dcp_import_safetensors(
                                f->ctx, path_of(f, "hub/snapshots/two/model.safetensors.index.json"),
                                path_of(f, "c2"), 0)), DCP_OK);
  dcp_verify_report rep = {.struct_size = sizeof rep};
  assert_int_equal(check(f, dcp_verify(f->ctx, path_of(f, "c2"), &rep)), DCP_OK);
  assert_int_equal(rep.tensors, 4);
  expect_exported(f, "c2", t, 4);
  assert_int_equal(check(f, dcp_import_safetensors(
                                f->ctx, path_of(f, "hub/snapshots/bad/chain.safetensors"),
                                path_of(f, "c3"), 0)), DCP_OK);
  expect_exported(f, "c3", t, 4);
  /* links to nothing: not found, naming the link */
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "hub/snapshots/bad/model.safetensors"),
                                          path_of(f, "c4"), 0), DCP_ENOTFOUND);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "model.safetensors' is a symbolic link"));
  assert_int_equal(dcp_import_safetensors(
                       f->ctx, path_of(f, "hub/snapshots/bad/model.safetensors.index.json"),
                       path_of(f, "c5"), 0), DCP_ENOTFOUND);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "model-00001-of-00002.safetensors"));
  /* a linked import would name links inside a checkpoint: refused, nothing written */
  assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, "hub/snapshots/one/model.safetensors"),
                                          path_of(f, "hub/snapshots/one"), DCP_IMPORT_LINK),
                   DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "is a symbolic link"));
  struct stat sb;
  assert_int_equal(lstat(path_of(f, "hub/snapshots/one/.metadata"), &sb), -1);
  size_t alen;
  uint8_t *after = tu_read_file(path_of(f, "hub/blobs/a1"), &alen);
  assert_int_equal(alen, blen);
  assert_memory_equal(after, blob, blen);
  free(after);
  free(blob);
}

/* The checkpoint side stays strict: a link planted where the import writes
 * is refused, its target untouched. */
static void test_hf_cache_strict_output(void **state) {
  fixture *f = *state;
  st_tensor t[4];
  make_hf_cache(f, t);
  FILE *fp = fopen(path_of(f, "victim"), "wb");
  fputs("keep me", fp);
  fclose(fp);
  const char *planted[] = {".lock", ".metadata"};
  for (int i = 0; i < 2; i++) {
    char ck[32], at[64];
    snprintf(ck, sizeof ck, "ck%d", i);
    snprintf(at, sizeof at, "%s/%s", ck, planted[i]);
    assert_int_equal(mkdir(path_of(f, ck), 0755), 0);
    make_link(f, path_of(f, "victim"), at);
    dcp_status rc = dcp_import_safetensors(
        f->ctx, path_of(f, "hub/snapshots/two/model.safetensors.index.json"), path_of(f, ck), 0);
    assert_int_equal(rc, DCP_EIO);
    assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "symbolic link"));
    size_t n;
    uint8_t *v = tu_read_file(path_of(f, "victim"), &n);
    assert_int_equal(n, 7);
    assert_memory_equal(v, "keep me", 7);
    free(v);
    struct stat sb;
    snprintf(at, sizeof at, "%s/.metadata", ck);
    assert_int_equal(lstat(path_of(f, at), &sb), i == 1 ? 0 : -1); /* nothing committed */
    if (i == 1) assert_true(S_ISLNK(sb.st_mode));
  }
}

/* ---- a source that is a file the import itself writes ----------------------- */

static void test_import_over_own_files(void **state) {
  fixture *f = *state;
  static uint8_t d[64];
  st_fill(d, sizeof d, 5);
  st_tensor t = {.name = "x", .dtype = "U8", .ndim = 1, .shape = {64}, .data = d, .nbytes = 64};
  const struct {
    const char *dir, *file;
    uint32_t flags;
  } own[] = {{"m1", "data-00000.dcp", 0}, {"m2", ".metadata.tmp", 0},
             {"m3", ".metadata.tmp", DCP_IMPORT_LINK}};
  for (int i = 0; i < 3; i++) {
    char src[64];
    snprintf(src, sizeof src, "%s/%s", own[i].dir, own[i].file);
    assert_int_equal(mkdir(path_of(f, own[i].dir), 0755), 0);
    assert_int_equal(st_write(path_of(f, src), &t, 1, NULL, NULL, 0), 0);
    size_t n0, n1;
    uint8_t *before = tu_read_file(path_of(f, src), &n0);
    assert_int_equal(dcp_import_safetensors(f->ctx, path_of(f, src), path_of(f, own[i].dir),
                                            own[i].flags), DCP_EINVAL);
    assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "that the import writes"));
    uint8_t *after = tu_read_file(path_of(f, src), &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
  }
}

/* ---- hostile sizes: no quadratic work on a large header or index ---------- */

enum { NBIG = 100000 };

/* A file with one tensor `name` and nkv __metadata__ entries k0000000...,
 * in ascending or descending key order. */
static void write_md_heavy(fixture *f, const char *file, const char *name, int nkv,
                           bool descending) {
  json_t *root = json_object(), *md = json_object();
  for (int i = 0; i < nkv; i++) {
    char key[32];
    snprintf(key, sizeof key, "k%07d", descending ? nkv - 1 - i : i);
    json_object_set_new(md, key, json_string("v"));
  }
  json_object_set_new(root, "__metadata__", md);
  json_t *w = json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "F32", "shape", 2, "data_offsets",
                        0, 8);
  assert_non_null(w);
  json_object_set_new(root, name, w);
  char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(root);
  static const uint8_t data[8];
  assert_int_equal(st_write_raw(path_of(f, file), strlen(text), text, data, 8), 0);
  free(text);
}

/* An index mapping NBIG tensors to files s<i>.safetensors, all the same
 * file (distinct = false) or each its own; none of them exists. */
static void write_wide_index(fixture *f, const char *file, bool distinct) {
  json_t *root = json_object(), *wm = json_object();
  for (int i = 0; i < NBIG; i++) {
    char key[32], shard[48];
    snprintf(key, sizeof key, "t%07d", i);
    snprintf(shard, sizeof shard, "s%07d.safetensors", distinct ? NBIG - i : 1);
    json_object_set_new(wm, key, json_string(shard));
  }
  json_object_set_new(root, "weight_map", wm);
  assert_int_equal(json_dump_file(root, path_of(f, file), 0), 0);
  json_decref(root);
}

/* Seconds an import of src into ck takes; its status must be want. */
static double timed_import(fixture *f, const char *src, const char *ck, dcp_status want) {
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  dcp_status rc = dcp_import_safetensors(f->ctx, path_of(f, src), path_of(f, ck), 0);
  clock_gettime(CLOCK_MONOTONIC, &b);
  if (rc != want) check(f, rc);
  assert_int_equal(rc, want);
  return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

/* t, the hostile case, within a small factor of base, a case of the same
 * size that even a quadratic algorithm does in linear time. Relative, so
 * that valgrind or a loaded machine slows both alike. */
static void expect_linear(const char *what, double t, double base) {
  fprintf(stderr, "  %s: %.2f s, baseline %.2f s\n", what, t, base);
  assert_true(t < 3.0 * base + 1.0);
}

/* Three ways a hostile set of NBIG entries was quadratic (minutes here,
 * hours at the 100 MB header limit): an insertion sort of __metadata__
 * (keys in descending order), a search per key over the earlier shards'
 * metadata (two shards with the same keys), a pairwise search for repeated
 * shard names (an index naming NBIG distinct files). */
static void test_hostile_sizes(void **state) {
  fixture *f = *state;
  write_md_heavy(f, "asc.safetensors", "w", NBIG, false);
  write_md_heavy(f, "desc.safetensors", "w", NBIG, true);
  double base = timed_import(f, "asc.safetensors", "ck1", DCP_OK);
  double t = timed_import(f, "desc.safetensors", "ck2", DCP_OK);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, path_of(f, "ck2"), &m), DCP_OK);
  assert_int_equal(dcp_meta_kv_count(m), NBIG);
  dcp_meta_free(m);
  expect_linear("metadata in descending order", t, base);

  const char *tn[] = {"a", "b"}, *fn[] = {"p1.safetensors", "p2.safetensors"},
             *gn[] = {"q1.safetensors", "q2.safetensors"};
  write_md_heavy(f, "p1.safetensors", "a", NBIG, false);
  write_md_heavy(f, "p2.safetensors", "b", 0, false);
  write_index(path_of(f, "p.safetensors.index.json"), tn, fn, 2);
  write_md_heavy(f, "q1.safetensors", "a", NBIG / 2, false);
  write_md_heavy(f, "q2.safetensors", "b", NBIG / 2, false);
  write_index(path_of(f, "q.safetensors.index.json"), tn, gn, 2);
  base = timed_import(f, "p.safetensors.index.json", "ck3", DCP_OK);
  t = timed_import(f, "q.safetensors.index.json", "ck4", DCP_OK);
  expect_linear("metadata repeated in two shards", t, base);

  write_wide_index(f, "same.safetensors.index.json", false);
  write_wide_index(f, "wide.safetensors.index.json", true);
  base = timed_import(f, "same.safetensors.index.json", "ck5", DCP_ENOTFOUND);
  t = timed_import(f, "wide.safetensors.index.json", "ck6", DCP_ENOTFOUND);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "s0000001.safetensors"));
  expect_linear("index of distinct files", t, base);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_roundtrip_all_dtypes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_large_tensor_chunks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sharded, setup, teardown),
      cmocka_unit_test_setup_teardown(test_linked_load, setup, teardown),
      cmocka_unit_test_setup_teardown(test_export_multichunk, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_headers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_verify_problems, setup, teardown),
      cmocka_unit_test_setup_teardown(test_export_reserved_name, setup, teardown),
      cmocka_unit_test_setup_teardown(test_index_empty_weight_map, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hf_cache_links, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hf_cache_strict_output, setup, teardown),
      cmocka_unit_test_setup_teardown(test_import_over_own_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_hostile_sizes, setup, teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
