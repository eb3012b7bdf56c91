/* test_hostile_names.c — the fqn / bytes-key rule (src/model/name.h) holds
 * everywhere a name enters: dcp_state_add_*, the metadata builder, the
 * metadata decoder (a crafted .metadata) and safetensors import (a crafted
 * header). Every refusal carries the rule broken and the byte where. */
#include "test_hostile_kit.h"

#include "metadata/meta.h"
#include "model/name.h"
#include "st_writer.h"

/* A name that breaks the rule, the rule's words in the message and the
 * byte offset reported. */
typedef struct bad_name {
  const char *name;
  const char *rule;
  size_t at;
} bad_name;

static const bad_name BAD[] = {
    {"layer/0/weight", "contains '/'", 5},
    {"/abs", "contains '/'", 0},
    {"win\\path", "contains '\\'", 3},
    {"..", "contains \"..\"", 0},
    {"a..b", "contains \"..\"", 1},
    {"params/../kernel", "contains '/'", 6},
    {"up..", "contains \"..\"", 2},
    {"tab\there", "control character", 3},
    {"esc\x1b[31m", "control character", 3},
    {"del\x7f", "control character", 3},
    {"bad\xc3(", "not valid UTF-8", 3},
    {"overlong\xc0\xaf", "not valid UTF-8", 8},
    {"trunc\xe2\x82", "not valid UTF-8", 5},
    {"", "is empty", 0},
};
#define NBAD (sizeof BAD / sizeof BAD[0])

/* Names at the edge of the rule that must stay legal. */
static const char *const GOOD[] = {"model.layers.0.self_attn.q_proj.weight", ".hidden", "a.",
                                   "x-y_z:1", "层.权重", "emoji.\xf0\x9f\x98\x80", "a.b.c.d"};

/* Every bad name is refused by each state entry point with DCP_ENAME and a
 * message naming the rule and the byte; the good ones are accepted. */
static void test_state_names(void **state) {
  hk_fixture *f = *state;
  int64_t shape[1] = {2}, mesh[1] = {1};
  uint32_t map[1] = {0};
  dcp_layout *l;
  assert_int_equal(dcp_layout_create(f->ctx, 1, mesh, NULL, 1, map, &l), DCP_OK);
  float data[2] = {1, 2};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  char at[32];
  for (size_t i = 0; i < NBAD; i++) {
    snprintf(at, sizeof at, "at byte %zu", BAD[i].at);
    if (!BAD[i].name[0]) snprintf(at, sizeof at, "empty");
    assert_int_equal(dcp_state_add_tensor(st, BAD[i].name, DCP_F32, 1, shape), DCP_ENAME);
    hk_msg_has(f->ctx, "tensor fqn", BAD[i].rule, at);
    assert_int_equal(dcp_state_add_sharded(st, BAD[i].name, DCP_F32, 1, shape, l, data),
                     DCP_ENAME);
    hk_msg_has(f->ctx, BAD[i].rule, at, NULL);
    assert_int_equal(dcp_state_add_bytes(st, BAD[i].name, DCP_SCOPE_REPLICATED, data, 4),
                     DCP_ENAME);
    hk_msg_has(f->ctx, "bytes key", BAD[i].rule, at);
  }
  assert_int_equal(dcp_state_tensor_count(st) + dcp_state_bytes_count(st), 0);
  for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++)
    assert_int_equal(dcp_state_add_tensor(st, GOOD[i], DCP_F32, 1, shape), DCP_OK);
  dcp_state_free(st);
  dcp_layout_free(l);
}

/* A megabyte-long name is refused by its length without being copied, and
 * the message does not echo a megabyte. */
static void test_huge_name(void **state) {
  hk_fixture *f = *state;
  size_t n = 1u << 20;
  char *huge = malloc(n + 1);
  assert_non_null(huge);
  memset(huge, 'w', n);
  huge[n] = '\0';
  int64_t shape[1] = {1};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, huge, DCP_F32, 1, shape), DCP_ENAME);
  hk_msg_has(f->ctx, "longer than DCP_MAX_NAME", NULL, NULL);
  assert_true(strlen(dcp_ctx_last_error(f->ctx)) < 512);
  assert_int_equal(dcp_state_add_bytes(st, huge, DCP_SCOPE_PER_RANK, huge, 1), DCP_ENAME);
  dcp_state_free(st);
  free(huge);
}

/* The rule on length-carrying names: an embedded NUL is refused where a
 * C string could not even express it. */
static void test_rule_with_lengths(void **state) {
  (void)state;
  size_t at;
  assert_null(dcpi_name_violation("a.b", 3, &at));
  assert_string_equal(dcpi_name_violation("a\0b", 3, &at), "contains a NUL byte");
  assert_int_equal(at, 1);
  assert_non_null(strstr(dcpi_name_violation("ab\xe2", 3, &at), "UTF-8")); /* cut sequence */
  assert_int_equal(at, 2);
  assert_non_null(dcpi_name_violation("x", DCP_MAX_NAME + 1, &at));
  dcpi_err err;
  assert_int_equal(dcpi_name_check("a/b", 3, "key", DCP_ECORRUPT, &err), DCP_ECORRUPT);
  assert_non_null(strstr(err.msg, "key 'a/b' contains '/' at byte 1"));
}

/* The metadata builder (fed by imports and merges) applies the same rule to
 * fqns and bytes keys. */
static void test_builder_names(void **state) {
  (void)state;
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  int64_t shape[1] = {4};
  uint32_t file;
  assert_int_equal(dcpi_md_add_file(md, "data-00000.dcp", &file, &err), DCP_OK);
  for (size_t i = 0; i < NBAD; i++) {
    assert_int_equal(dcpi_md_add_tensor(md, BAD[i].name, DCP_U8, 1, shape, -1, NULL, NULL, &err),
                     DCP_ENAME);
    assert_non_null(strstr(err.msg, BAD[i].rule));
  }
  uint64_t ck = 0;
  dcp_storage_ref r = {.file = file, .block_size = 16, .stored_length = 1, .raw_length = 1,
                       .block_count = 1, .block_checksums = &ck};
  assert_int_equal(dcpi_md_add_bytes(md, "opt/state", DCP_SCOPE_REPLICATED, -1, &r, &err),
                   DCP_ENAME);
  assert_non_null(strstr(err.msg, "bytes key 'opt/state' contains '/' at byte 3"));
  assert_int_equal(dcpi_md_tensor_count(md) + dcpi_md_bytes_count(md), 0);
  dcpi_md_free(md);
}

/* A .metadata whose fqn breaks the rule (valid checksums, otherwise valid)
 * is DCP_ECORRUPT naming the tensors section, the rule and the byte; the
 * same for a bytes key and the bytes section. A legal name opens. */
static void test_decoder_names(void **state) {
  hk_fixture *f = *state;
  dcp_status chunk;
  hk_craft c = hk_base();
  c.fqn = "model.w";
  c.fqn_len = 7;
  c.bkey = "step";
  c.bkey_len = 4;
  assert_int_equal(hk_open_craft(f->ctx, &c, &chunk), DCP_OK);
  assert_int_equal(chunk, DCP_OK);
  char at[32];
  for (size_t i = 0; i < NBAD; i++) {
    if (!BAD[i].name[0]) continue; /* empty: the length check below */
    snprintf(at, sizeof at, "at byte %zu", BAD[i].at);
    hk_craft t = c;
    t.fqn = BAD[i].name;
    t.fqn_len = strlen(BAD[i].name);
    assert_int_equal(hk_open_craft(f->ctx, &t, &chunk), DCP_ECORRUPT);
    hk_msg_has(f->ctx, "tensors section", BAD[i].rule, at);
    hk_craft b = c;
    b.bkey = BAD[i].name;
    b.bkey_len = strlen(BAD[i].name);
    assert_int_equal(hk_open_craft(f->ctx, &b, &chunk), DCP_ECORRUPT);
    hk_msg_has(f->ctx, "bytes section", BAD[i].rule, at);
  }
  /* embedded NUL: refused by the string table already */
  hk_craft n = c;
  n.fqn = "a\0b";
  n.fqn_len = 3;
  assert_int_equal(hk_open_craft(f->ctx, &n, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "strings section", "NUL", NULL);
  /* empty and over-long names */
  n.fqn = "";
  n.fqn_len = 0;
  assert_int_equal(hk_open_craft(f->ctx, &n, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "tensors section", "length 0", NULL);
  char *longname = malloc(DCP_MAX_NAME + 1);
  memset(longname, 'x', DCP_MAX_NAME + 1);
  n.fqn = longname;
  n.fqn_len = DCP_MAX_NAME + 1;
  assert_int_equal(hk_open_craft(f->ctx, &n, &chunk), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "tensors section", "length 4097", NULL);
  n.fqn_len = DCP_MAX_NAME; /* the limit itself is fine */
  assert_int_equal(hk_open_craft(f->ctx, &n, &chunk), DCP_OK);
  free(longname);
}

/* Import a safetensors file whose header is `header` (one U8 tensor of 4
 * bytes named by the caller) into f->ckpt. */
static dcp_status import_header(hk_fixture *f, const char *header) {
  char src[PATH_MAX + 32];
  hk_path(src, sizeof src, f->dir, "in.safetensors");
  const uint8_t data[4] = {1, 2, 3, 4};
  assert_int_equal(st_write_raw(src, strlen(header), header, data, 4), 0);
  return dcp_import_safetensors(f->ctx, src, f->ckpt, 0);
}

/* Tensor names of a hostile safetensors file: DCP_ENAME with the rule and
 * byte for path-like names and control characters, DCP_ECORRUPT for what
 * is not even valid JSON (a NUL escape, invalid UTF-8); nothing is
 * committed, and no file appears outside the checkpoint. A legal name
 * imports. */
static void test_safetensors_names(void **state) {
  hk_fixture *f = *state;
  static const struct {
    const char *json_name; /* as written in the JSON text */
    dcp_status want;
    const char *rule;
  } cases[] = {
      {"../evil", DCP_ENAME, "contains \"..\" at byte 0"},
      {"a/b", DCP_ENAME, "contains '/' at byte 1"},
      {"a\\\\b", DCP_ENAME, "contains '\\' at byte 1"},
      {"x\\u0001y", DCP_ENAME, "control character at byte 1"},
      {"x\\u001b", DCP_ENAME, "control character at byte 1"},
      {"a\\u0000b", DCP_ECORRUPT, "not valid JSON"},
      {"bad\xff", DCP_ECORRUPT, "not valid JSON"},
  };
  char header[512], p[PATH_MAX + 32];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(header, sizeof header,
             "{\"%s\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
             cases[i].json_name);
    assert_int_equal(import_header(f, header), cases[i].want);
    hk_msg_has(f->ctx, cases[i].rule, NULL, NULL);
    assert_false(hk_exists(hk_path(p, sizeof p, f->ckpt, ".metadata")));
    assert_false(hk_exists(hk_path(p, sizeof p, f->dir, "evil")));
  }
  snprintf(header, sizeof header,
           "{\"model.embed.weight\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}");
  assert_int_equal(import_header(f, header), DCP_OK);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  dcp_tensor_info ti;
  assert_int_equal(dcp_meta_tensor(m, 0, &ti), DCP_OK);
  assert_string_equal(ti.fqn, "model.embed.weight");
  dcp_meta_free(m);
}

/* Names at the edge of the rule survive a save and a load. */
static void test_good_names_roundtrip(void **state) {
  hk_fixture *f = *state;
  size_t n = sizeof GOOD / sizeof GOOD[0];
  float src[8][2], dst[8][2];
  int64_t shape[1] = {2}, zero[1] = {0};
  dcp_state *st, *ld;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_create(f->ctx, &ld), DCP_OK);
  for (size_t i = 0; i < n; i++) {
    src[i][0] = (float)i, src[i][1] = (float)-i;
    dst[i][0] = dst[i][1] = 99;
    assert_int_equal(dcp_state_add_tensor(st, GOOD[i], DCP_F32, 1, shape), DCP_OK);
    assert_int_equal(dcp_state_add_chunk(st, GOOD[i], zero, shape, src[i]), DCP_OK);
    assert_int_equal(dcp_state_add_tensor(ld, GOOD[i], DCP_F32, 1, shape), DCP_OK);
    assert_int_equal(dcp_state_add_chunk(ld, GOOD[i], zero, shape, dst[i]), DCP_OK);
  }
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, NULL), DCP_OK);
  assert_int_equal(dcp_load(f->ctx, ld, f->ckpt, NULL), DCP_OK);
  for (size_t i = 0; i < n; i++) assert_true(dst[i][0] == (float)i && dst[i][1] == (float)-i);
  dcp_state_free(st);
  dcp_state_free(ld);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_state_names, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_huge_name, hk_setup, hk_teardown),
      cmocka_unit_test(test_rule_with_lengths),
      cmocka_unit_test(test_builder_names),
      cmocka_unit_test_setup_teardown(test_decoder_names, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_safetensors_names, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_good_names_roundtrip, hk_setup, hk_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
