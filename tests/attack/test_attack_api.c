/* test_attack_api — hostile arguments at the API's edges: key/values that
 * are not UTF-8 or repeat a key, ranged reads and flat ranges whose ends
 * overflow, views indexed out of range. Each must be a specific status,
 * nothing committed, never a crash; and what a save accepts, export,
 * import and `dcp inspect --json` must carry through unchanged. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta_reseal.h"
#include "testutil.h"

static float g_w[6] = {1, 2, 3, 4, 5, 6};

/* A state of one tensor "w" [6] F32. */
static dcp_state *small_state(dcp_ctx *ctx) {
  dcp_state *st;
  int64_t n = 6, o = 0;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, &n), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", &o, &n, g_w), DCP_OK);
  return st;
}

static dcp_status save_kv(dcp_ctx *ctx, const char *dir, size_t n, const char **k,
                          const char **v) {
  dcp_state *st = small_state(ctx);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.nkv = n, o.kv_keys = k, o.kv_values = v;
  dcp_status rc = dcp_save(ctx, st, dir, &o);
  dcp_state_free(st);
  return rc;
}

/* Export f->ckpt to safetensors in DIR/st and import that back (copied)
 * into out = DIR/<name>. */
static void export_import(const tu_fixture *f, const char *name, char *out, size_t cap) {
  char st_dir[PATH_MAX + 16], st_file[PATH_MAX + 48];
  snprintf(st_dir, sizeof st_dir, "%s/st", f->dir);
  snprintf(st_file, sizeof st_file, "%s/model.safetensors", st_dir);
  snprintf(out, cap, "%s/%s", f->dir, name);
  assert_int_equal(dcp_export_safetensors(f->ctx, f->ckpt, st_dir, 0), DCP_OK);
  assert_int_equal(dcp_import_safetensors(f->ctx, st_file, out, 0), DCP_OK);
}

/* Whether dir holds a committed .metadata. */
static int committed(const char *dir) {
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/.metadata", dir);
  FILE *f = fopen(p, "rb");
  if (f) fclose(f);
  return f != NULL;
}

/* A value that is not UTF-8 is refused at save (it used to be saved, and
 * then `dcp export` failed "cannot build a header" and `dcp inspect --json`
 * left the key out); a repeated key is DCP_EEXIST; values with quotes,
 * backslashes, newlines and control characters survive save, export and
 * import unchanged. */
static void test_kv_values(void **state) {
  tu_fixture *f = *state;
  const char *k1[] = {"ok", "bad"}, *v1[] = {"fine", "\xff\xfe"};
  assert_int_equal(save_kv(f->ctx, f->ckpt, 2, k1, v1), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "UTF-8"));
  assert_false(committed(f->ckpt));
  const char *v2[] = {"fine", "\xc3\x28"}; /* a cut 2-byte sequence */
  assert_int_equal(save_kv(f->ctx, f->ckpt, 2, k1, v2), DCP_EINVAL);
  const char *v3[] = {"fine", "\xed\xa0\x80"}; /* a surrogate */
  assert_int_equal(save_kv(f->ctx, f->ckpt, 2, k1, v3), DCP_EINVAL);
  const char *k4[] = {"a", "a"}, *v4[] = {"1", "2"};
  assert_int_equal(save_kv(f->ctx, f->ckpt, 2, k4, v4), DCP_EEXIST);
  assert_false(committed(f->ckpt));
  const char *k5[] = {"q", "ctl", "cjk"}, *v5[] = {"a\"b\\c\n}{", "x\x01\x1f\x7fy", "\xe6\xad\xa5"};
  assert_int_equal(save_kv(f->ctx, f->ckpt, 3, k5, v5), DCP_OK);
  char back[PATH_MAX + 16];
  export_import(f, "back", back, sizeof back);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, back, &m), DCP_OK);
  size_t seen = 0;
  for (size_t i = 0; i < dcp_meta_kv_count(m); i++) {
    const char *k, *v;
    assert_int_equal(dcp_meta_kv(m, i, &k, &v), DCP_OK);
    for (size_t j = 0; j < 3; j++)
      if (!strcmp(k, k5[j])) assert_string_equal(v, v5[j]), seen++;
  }
  assert_int_equal(seen, 3);
  dcp_meta_free(m);
}

/* `dcp inspect` of a checkpoint whose key/value values hold an escape
 * sequence (saved as they are) and bytes that are not UTF-8 (a .metadata
 * written before save refused them, or tampered with; resealed here): the
 * text shows them as \xNN, never echoing the escape to the terminal, and
 * --json keeps every key (it used to leave the non-UTF-8 one out). */
static void test_inspect_hostile_kv(void **state) {
  tu_fixture *f = *state;
  const char *k[] = {"esc", "raw"}, *v[] = {"a\x1b[2Jb", "PLACEHOLDER"};
  assert_int_equal(save_kv(f->ctx, f->ckpt, 2, k, v), DCP_OK);
  char p[PATH_MAX + 32];
  snprintf(p, sizeof p, "%s/.metadata", f->ckpt);
  size_t n;
  uint8_t *b = tu_read_file(p, &n);
  uint8_t *at = memmem(b, n, "PLACEHOLDER", 11);
  assert_non_null(at);
  at[0] = 0xff, at[1] = 0xfe; /* not UTF-8 */
  tu_meta_reseal(b, n);
  FILE *fp = fopen(p, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(b, 1, n, fp), n);
  assert_int_equal(fclose(fp), 0);
  free(b);
  char tu[PATH_MAX], cmd[8 * PATH_MAX];
  tu_plugin_dir(tu, sizeof tu);
  snprintf(cmd, sizeof cmd, "'%s/../../bin/dcp' inspect '%s' | grep -q \"$(printf '\\033')\" && exit 1; "
           "'%s/../../bin/dcp' inspect '%s' | grep -qF 'raw = \\xff\\xfeACEHOLDER' && "
           "'%s/../../bin/dcp' inspect '%s' --json | python3 -c \"import json,sys; "
           "d=json.load(sys.stdin)['key_values']; b=chr(92); "
           "sys.exit(0 if d['esc'] == 'a'+chr(27)+'[2Jb' and "
           "d['raw'] == b+'xff'+b+'xfeACEHOLDER' else 1)\"", tu, f->ckpt, tu, f->ckpt, tu, f->ckpt);
  assert_int_equal(system(cmd), 0);
}

/* Ranged reads whose end wraps around, flat ranges whose end overflows,
 * views indexed past their end. */
static void test_range_edges(void **state) {
  tu_fixture *f = *state;
  dcp_state *st = small_state(f->ctx);
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, NULL), DCP_OK);
  dcp_state_free(st);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  uint8_t buf[64];
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, 0, UINT64_MAX - 3, buf, 8),
                   DCP_EINVAL);
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, 0, 20, buf, 8), DCP_EINVAL);
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, 0, 8, buf, SIZE_MAX - 4),
                   DCP_EINVAL);
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, 0, 24, buf, 0), DCP_OK);
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, 0, 4, buf, 20), DCP_OK);
  assert_memory_equal(buf, (const uint8_t *)g_w + 4, 20);
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, 1, 0, buf, 4), DCP_ENOTFOUND);
  assert_int_equal(dcp_read_tensor_range(f->ctx, f->ckpt, m, SIZE_MAX, 0, buf, 4),
                   DCP_ENOTFOUND);
  assert_int_equal(dcp_read_tensor(f->ctx, f->ckpt, m, 0, buf, 23), DCP_EINVAL);
  dcp_chunk_info ci;
  assert_int_equal(dcp_meta_chunk(m, 0, 1, &ci), DCP_ENOTFOUND);
  assert_int_equal(dcp_meta_chunk(m, SIZE_MAX, 0, &ci), DCP_ENOTFOUND);
  const char *name;
  assert_int_equal(dcp_meta_file(m, SIZE_MAX, &name), DCP_ENOTFOUND);
  dcp_meta_free(m);
  dcp_box region = {.ndim = 2, .size = {INT64_MAX, 2}}, out[3];
  size_t n;
  assert_true(dcp_flat_to_boxes(&region, 0, 4, out, 3, &n) < 0); /* numel overflows */
  region.size[0] = 3;
  assert_true(dcp_flat_to_boxes(&region, INT64_MAX, 1, out, 3, &n) < 0); /* EOVERFLOW */
  assert_true(dcp_flat_to_boxes(&region, 1, INT64_MAX, out, 3, &n) < 0);
  assert_true(dcp_flat_to_boxes(&region, -1, 2, out, 3, &n) < 0);
  assert_true(dcp_flat_to_boxes(&region, 1, -1, out, 3, &n) < 0);
  st = small_state(f->ctx);
  int64_t sh = 6;
  assert_int_equal(dcp_state_add_tensor(st, "v", DCP_F32, 1, &sh), DCP_OK);
  assert_true(dcp_state_add_flat(st, "v", NULL, 5, INT64_MAX, g_w) < 0);
  dcp_state_free(st);
}

/* Names that differ only by Unicode normalization (U+00E9 and e U+0301,
 * U+212B and U+00C5), a 4096-byte name, and the largest bytes key: each
 * its own item through save, load, export, import and inspect --json
 * (never merged, never swapped). */
static void test_name_twins(void **state) {
  tu_fixture *f = *state;
  static char longname[DCP_MAX_NAME + 1];
  memset(longname, 'n', DCP_MAX_NAME);
  longname[0] = 'L';
  const char *names[] = {"caf\xc3\xa9", "cafe\xcc\x81", "\xe2\x84\xab", "\xc3\x85", longname};
  enum { N = 5 };
  static int32_t vals[N][3], back[N][3];
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  int64_t n = 3, o = 0;
  for (int i = 0; i < N; i++) {
    for (int j = 0; j < 3; j++) vals[i][j] = i * 10 + j;
    assert_int_equal(dcp_state_add_tensor(st, names[i], DCP_I32, 1, &n), DCP_OK);
    assert_int_equal(dcp_state_add_chunk(st, names[i], &o, &n, vals[i]), DCP_OK);
  }
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, NULL), DCP_OK);
  dcp_state_free(st);
  char imp[PATH_MAX + 16];
  export_import(f, "imp", imp, sizeof imp);
  const char *dirs[] = {f->ckpt, imp};
  for (int d = 0; d < 2; d++) {
    memset(back, 0, sizeof back);
    assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
    for (int i = N; i-- > 0;) { /* declared in another order */
      assert_int_equal(dcp_state_add_tensor(st, names[i], DCP_I32, 1, &n), DCP_OK);
      assert_int_equal(dcp_state_add_chunk(st, names[i], &o, &n, back[i]), DCP_OK);
    }
    assert_int_equal(dcp_load(f->ctx, st, dirs[d], NULL), DCP_OK);
    assert_memory_equal(back, vals, sizeof vals);
    dcp_state_free(st);
  }
  char tu[PATH_MAX], cmd[3 * PATH_MAX];
  tu_plugin_dir(tu, sizeof tu); /* BUILD/lib/dcp: the dcp command is BUILD/bin/dcp */
  snprintf(cmd, sizeof cmd, "'%s/../../bin/dcp' inspect '%s' --json | python3 -c \"import json,sys; "
           "d=json.load(sys.stdin); t=[x['fqn'] for x in d['tensors']]; "
           "sys.exit(0 if len(set(t)) == %d else 1)\"", tu, imp, N);
  assert_int_equal(system(cmd), 0);
}

static int setup(void **state) { return tu_fixture_setup(state, "dcp-attack-api"); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_kv_values, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_range_edges, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_inspect_hostile_kv, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_name_twins, setup, tu_fixture_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
