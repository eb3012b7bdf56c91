/* The `dcp` command, run through sh -c from the build tree (build/bin/dcp):
 * output text and exit status of every subcommand on fixtures written here. */
#include "ckpt_files.h"
#include "testutil.h"

#include <jansson.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "st_writer.h"

static char g_dcp[PATH_MAX], g_dir[PATH_MAX];
static char g_out[1 << 16], g_err[1 << 16];

static void slurp_into(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  buf[n] = '\0';
  if (f) fclose(f);
}

/* Run `dcp ARGS` in the test directory; stdout and stderr land in g_out and
 * g_err; returns the exit status. */
static int dcp_env(const char *env, const char *args) {
  char cmd[PATH_MAX * 3];
  snprintf(cmd, sizeof cmd, "sh -c 'cd \"%s\" && %s \"%s\" %s >out.txt 2>err.txt'", g_dir, env,
           g_dcp, args);
  int st = system(cmd);
  char p[PATH_MAX + 16];
  snprintf(p, sizeof p, "%s/out.txt", g_dir);
  slurp_into(p, g_out, sizeof g_out);
  snprintf(p, sizeof p, "%s/err.txt", g_dir);
  slurp_into(p, g_err, sizeof g_err);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

static int dcp(const char *args) { return dcp_env("", args); }

static void expect(const char *args, int rc, const char *in_out) {
  int got = dcp(args);
  if (got != rc || (in_out && !strstr(g_out, in_out)))
    fprintf(stderr, "dcp %s -> %d\nstdout:\n%s\nstderr:\n%s\n", args, got, g_out, g_err);
  assert_int_equal(got, rc);
  if (in_out) assert_non_null(strstr(g_out, in_out));
}

static char *at(const char *name) {
  static char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  return p;
}

static float g_w[40 * 30];
static uint16_t g_b[30];

static int setup(void **state) {
  (void)state;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(n > 0);
  exe[n] = '\0';
  snprintf(g_dcp, sizeof g_dcp, "%s/../bin/dcp", dirname(exe));
  snprintf(g_dir, sizeof g_dir, "/tmp/dcp-cli-XXXXXX");
  assert_non_null(mkdtemp(g_dir));
  for (int i = 0; i < 40 * 30; i++) g_w[i] = (float)i / 8;
  st_fill(g_b, sizeof g_b, 5);
  st_tensor t[2] = {{.name = "enc.w", .dtype = "F32", .ndim = 2, .shape = {40, 30}, .data = g_w,
                     .nbytes = sizeof g_w},
                    {.name = "enc.b", .dtype = "BF16", .ndim = 1, .shape = {30}, .data = g_b,
                     .nbytes = sizeof g_b}};
  const char *k[] = {"format"}, *v[] = {"pt"};
  mkdir(at("src"), 0755);
  assert_int_equal(st_write(at("src/m.safetensors"), t, 2, k, v, 1), 0);
  g_w[7] += 0.25f; /* a second model that differs in one element */
  assert_int_equal(st_write(at("other.safetensors"), t, 2, k, v, 1), 0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  tu_remove_tree(g_dir);
  return 0;
}

static void test_help_and_usage(void **state) {
  (void)state;
  expect("--help", 0, "commands:");
  const char *cmds[] = {"ls", "inspect", "verify", "import", "export", "diff"};
  for (size_t i = 0; i < 6; i++) assert_non_null(strstr(g_out, cmds[i]));
  for (size_t i = 0; i < 6; i++) {
    char args[64], want[64];
    snprintf(args, sizeof args, "%s --help", cmds[i]);
    snprintf(want, sizeof want, "usage: dcp %s", cmds[i]);
    expect(args, 0, want);
    assert_non_null(strstr(g_out, "exit status"));
  }
  assert_int_equal(dcp(""), 2);
  assert_int_equal(dcp("frobnicate"), 2);
  assert_int_equal(dcp("ls"), 2);
  assert_int_equal(dcp("ls a b"), 2);
  assert_int_equal(dcp("import src/m.safetensors"), 2); /* no --to */
  assert_int_equal(dcp("verify ck --bogus"), 2);
  assert_int_equal(dcp("export ck --to out --max-shard-size 5XB"), 2);
  assert_int_equal(dcp("ls nowhere"), 3);
  assert_non_null(strstr(g_err, "nowhere"));
  /* dcp help COMMAND is COMMAND --help; every help lists the common options */
  expect("help ls", 0, "usage: dcp ls");
  assert_non_null(strstr(g_out, "--quiet"));
  assert_non_null(strstr(g_out, "--json"));
  assert_null(strstr(g_out, "commands:"));
  expect("help diff", 0, "usage: dcp diff");
  expect("help", 0, "commands:");
  assert_int_equal(dcp("help frobnicate"), 2);
  assert_int_equal(dcp("help ls extra"), 2);
  expect("--help", 0, "--version");
  expect("--version", 0, "dcp ");
  expect("verify --help", 0, "3 error");
  assert_non_null(strstr(g_out, "1 problems found"));
  assert_non_null(strstr(g_out, ".metadata")); /* a damaged .metadata is under 1 */
}

static json_t *json_out(void) {
  json_error_t je;
  json_t *root = json_loads(g_out, 0, &je);
  if (!root) fprintf(stderr, "not one JSON object (%s):\n%s\n", je.text, g_out);
  assert_non_null(root);
  return root;
}

static const char *jstr(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static json_int_t jint(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }

static void test_import_inspect_verify(void **state) {
  (void)state;
  expect("import src/m.safetensors --to ck", 0, "imported");
  assert_string_equal(g_err, ""); /* no progress when stderr is not a terminal */
  expect("import src/m.safetensors --to ck", 3, NULL); /* already committed */
  assert_non_null(strstr(g_err, "committed checkpoint exists"));
  expect("ls ck", 0, "enc.w\tF32\t[40, 30]\t1\t4800\t-\n");
  assert_non_null(strstr(g_out, "enc.b\tBF16\t[30]\t1\t60\t-\n"));
  expect("inspect ck", 0, "format = pt");
  assert_non_null(strstr(g_out, "data-00000."));
  assert_non_null(strstr(g_out, "world size   1"));
  expect("inspect ck --json", 0, NULL);
  json_error_t je;
  json_t *root = json_loads(g_out, 0, &je);
  assert_non_null(root);
  assert_string_equal(json_string_value(json_object_get(json_object_get(root, "key_values"),
                                                        "format")), "pt");
  assert_int_equal(json_array_size(json_object_get(root, "tensors")), 2);
  json_decref(root);
  expect("verify ck", 0, ": OK");
  /* --json: one object, with command, exit_code and error on every command */
  expect("ls ck --json", 0, NULL);
  root = json_out();
  assert_string_equal(jstr(root, "command"), "ls");
  assert_int_equal(jint(root, "exit_code"), 0);
  assert_true(json_is_null(json_object_get(root, "error")));
  json_t *t0 = json_array_get(json_object_get(root, "tensors"), 1);
  assert_string_equal(jstr(t0, "fqn"), "enc.w");
  assert_int_equal(jint(t0, "bytes"), 4800);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(t0, "shape"), 1)), 30);
  json_decref(root);
  expect("verify ck --json", 0, NULL);
  root = json_out();
  assert_true(json_is_true(json_object_get(root, "ok")));
  assert_int_equal(jint(root, "tensors"), 2);
  assert_int_equal(jint(root, "problems"), 0);
  json_decref(root);
  expect("ls nowhere --json", 3, NULL);
  root = json_out();
  assert_int_equal(jint(root, "exit_code"), 3);
  assert_non_null(strstr(jstr(json_object_get(root, "error"), "message"), "nowhere"));
  json_decref(root);
  expect("inspect ck --json", 0, NULL);
  root = json_out();
  assert_string_equal(jstr(root, "command"), "inspect");
  assert_int_equal(jint(root, "format_version") > 0, 1);
  json_decref(root);
  expect("import src/m.safetensors --to src --link", 0, "(linked)");
  expect("verify src", 0, ": OK");
  expect("import src/m.safetensors --to elsewhere --link", 3, NULL);
}

/* --to creates the missing parents; the non-terminal progress mode prints
 * lines (every report with DCP_PROGRESS_INTERVAL=0), --quiet none. */
static void test_parents_progress_json(void **state) {
  (void)state;
  expect("import src/m.safetensors --to deep/er/ck --json", 0, NULL);
  json_t *root = json_out();
  assert_string_equal(jstr(root, "command"), "import");
  assert_string_equal(jstr(root, "checkpoint"), "deep/er/ck");
  assert_true(json_is_false(json_object_get(root, "linked")));
  json_decref(root);
  expect("verify deep/er/ck", 0, ": OK");
  expect("export deep/er/ck --to far/away/out", 0, "exported");
  struct stat sb;
  assert_int_equal(stat(at("far/away/out/model.safetensors"), &sb), 0);
  FILE *f = fopen(at("plain"), "w");
  fclose(f);
  expect("export ck --to plain/x/y", 3, NULL);
  assert_non_null(strstr(g_err, "plain"));
  assert_int_equal(dcp_env("DCP_PROGRESS_INTERVAL=0", "verify ck"), 0);
  assert_non_null(strstr(g_err, "dcp verify: 100% 4.7 KiB of 4.7 KiB"));
  assert_int_equal(dcp_env("DCP_PROGRESS_INTERVAL=0", "export ck --to out-p"), 0);
  assert_non_null(strstr(g_err, "dcp export: 100%"));
  assert_int_equal(dcp_env("DCP_PROGRESS_INTERVAL=0", "export ck --to out-q -q"), 0);
  assert_string_equal(g_err, "");
  assert_string_equal(g_out, "");
  expect("verify ck", 0, NULL); /* default interval: a short run prints no line */
  assert_string_equal(g_err, "");
}

/* A name the fqn rule refuses is quoted whole in the message. */
static void test_bad_name_quoted_whole(void **state) {
  (void)state;
  float v[2] = {1, 2};
  st_tensor t = {.name = "model/layer.weight", .dtype = "F32", .ndim = 1, .shape = {2},
                 .data = v, .nbytes = sizeof v};
  assert_int_equal(st_write(at("slash.safetensors"), &t, 1, NULL, NULL, 0), 0);
  expect("import slash.safetensors --to slash", 3, NULL);
  assert_non_null(strstr(g_err, "'model/layer.weight' contains '/' at byte 5"));
}

static void test_export_diff(void **state) {
  (void)state;
  expect("export ck --to out", 0, "exported");
  struct stat sb;
  assert_int_equal(stat(at("out/model.safetensors"), &sb), 0);
  expect("export ck --to shards --max-shard-size 1KB", 0, NULL);
  assert_int_equal(stat(at("shards/model.safetensors.index.json"), &sb), 0);
  assert_int_equal(stat(at("shards/model-00002-of-00002.safetensors"), &sb), 0);
  expect("import shards/model.safetensors.index.json --to ck2 -q", 0, NULL);
  assert_string_equal(g_out, "");
  expect("diff ck ck2", 0, "2 equal, 0 different");
  assert_int_equal(dcp_env("DCP_PROGRESS_INTERVAL=0", "diff ck ck2"), 0); /* its own progress */
  assert_non_null(strstr(g_err, "dcp diff: 100% 9.5 KiB of 9.5 KiB")); /* both sides' bytes */
  assert_int_equal(dcp_env("DCP_PROGRESS_INTERVAL=0", "diff ck ck2 -q"), 0);
  assert_string_equal(g_err, "");
  expect("diff ck src", 0, "equal\tenc.w\n"); /* copied vs linked */
  expect("import other.safetensors --to ck3", 0, NULL);
  expect("diff ck ck3", 1, "different\tenc.w\tmax abs diff 0.25\n");
  assert_non_null(strstr(g_out, "equal\tenc.b\n"));
  expect("diff --quiet ck ck3", 1, "1 equal, 1 different");
  assert_null(strstr(g_out, "equal\tenc.b"));
  assert_int_equal(dcp("diff ck missing"), 3);
  st_tensor t = {.name = "enc.b", .dtype = "BF16", .ndim = 2, .shape = {15, 2}, .data = g_b,
                 .nbytes = sizeof g_b};
  assert_int_equal(st_write(at("reshaped.safetensors"), &t, 1, NULL, NULL, 0), 0);
  expect("import reshaped.safetensors --to ck4", 0, NULL);
  expect("diff ck ck4", 1, "different\tenc.b\tshape: BF16 [30] vs BF16 [15, 2]\n");
  assert_non_null(strstr(g_out, "only in A\tenc.w\n"));
  expect("diff ck ck3 --json", 1, NULL);
  json_t *root = json_out();
  assert_string_equal(jstr(root, "command"), "diff");
  json_t *ts = json_object_get(root, "tensors");
  assert_int_equal(json_array_size(ts), 2);
  assert_string_equal(jstr(json_array_get(ts, 0), "status"), "equal");
  json_t *d = json_array_get(ts, 1);
  assert_string_equal(jstr(d, "fqn"), "enc.w");
  assert_string_equal(jstr(d, "status"), "different");
  assert_string_equal(jstr(d, "reason"), "values");
  assert_true(json_real_value(json_object_get(d, "max_abs_diff")) == 0.25);
  assert_int_equal(jint(json_object_get(root, "summary"), "different"), 1);
  assert_int_equal(jint(root, "exit_code"), 1);
  assert_true(json_is_null(json_object_get(root, "error")));
  json_decref(root);
}

static void test_verify_corrupt(void **state) {
  (void)state;
  expect("import src/m.safetensors --to bad", 0, NULL);
  char data[PATH_MAX];
  assert_true(ck_data_file(at("bad"), 0, data, sizeof data));
  FILE *f = fopen(data, "r+b");
  assert_non_null(f);
  fseek(f, 10, SEEK_SET);
  fputc(0x77 ^ fgetc(f), f);
  fclose(f);
  expect("verify bad", 1, "FAILED: 1 problem(s)");
  assert_non_null(strstr(g_out, "enc.w"));
  assert_non_null(strstr(g_out, "checksum mismatch"));
  expect("export bad --to badout", 3, NULL);
  assert_non_null(strstr(g_err, "enc.w"));
  expect("verify bad --json", 1, NULL);
  json_t *root = json_out();
  assert_true(json_is_false(json_object_get(root, "ok")));
  assert_int_equal(jint(root, "problems"), 1);
  assert_non_null(strstr(jstr(root, "first_problem"), "checksum mismatch"));
  assert_true(json_is_null(json_object_get(root, "error")));
  json_decref(root);
  expect("verify nothing-here", 3, NULL); /* no checkpoint: could not check */
  expect("verify nothing-here --json", 3, NULL);
  root = json_out();
  assert_false(json_is_null(json_object_get(root, "error")));
  json_decref(root);
}

/* diff reports a damaged tensor and goes on with the next one: enc.b (the
 * first in fqn order) is corrupt on side A, enc.w is still compared. */
static void test_diff_goes_on_after_damage(void **state) {
  (void)state;
  expect("import src/m.safetensors --to badb", 0, NULL);
  char data[PATH_MAX];
  assert_true(ck_data_file(at("badb"), 0, data, sizeof data));
  FILE *f = fopen(data, "r+b");
  assert_non_null(f);
  fseek(f, 4800 + 10, SEEK_SET); /* enc.b's bytes follow enc.w's 4800 */
  int c = fgetc(f);
  fseek(f, 4800 + 10, SEEK_SET);
  fputc(0x5a ^ c, f);
  fclose(f);
  expect("diff badb ck", 1, "unreadable\tenc.b\tA: ");
  assert_non_null(strstr(g_out, "checksum mismatch"));
  assert_non_null(strstr(g_out, "equal\tenc.w\n"));
  assert_non_null(strstr(g_out, "1 equal, 0 different, 0 only in A, 0 only in B, 1 unreadable"));
  expect("diff ck badb --json", 1, NULL);
  json_t *root = json_out();
  json_t *b = json_array_get(json_object_get(root, "tensors"), 0);
  assert_string_equal(jstr(b, "status"), "unreadable");
  assert_string_equal(jstr(b, "side"), "B");
  assert_non_null(strstr(jstr(b, "error"), "checksum mismatch"));
  assert_string_equal(jstr(json_array_get(json_object_get(root, "tensors"), 1), "status"),
                      "equal");
  json_decref(root);
  /* a .metadata that fails its checks is a verify problem (1), not an error */
  char meta[PATH_MAX * 2];
  snprintf(meta, sizeof meta, "%s/.metadata", at("badb"));
  f = fopen(meta, "r+b");
  assert_non_null(f);
  fseek(f, 20, SEEK_SET);
  c = fgetc(f);
  fseek(f, 20, SEEK_SET);
  fputc(0x11 ^ c, f);
  fclose(f);
  expect("verify badb", 1, "FAILED");
  expect("ls badb", 3, NULL);
  expect("diff badb ck", 3, NULL); /* a side that cannot be opened */
}

/* A checkpoint saved from layouts shows its mesh, and each tensor its mesh
 * and tensor_map, through the public accessors and in `dcp inspect` (text
 * and --json); a tensor whose chunks were added by hand has no layout. */
static void test_inspect_meshes(void **state) {
  (void)state;
  char dir[PATH_MAX], plugins[PATH_MAX], ckpt[PATH_MAX + 8];
  dcp_ctx *ctx = tu_scratch_ctx("dcp-cli-mesh", dir, sizeof dir, plugins, sizeof plugins);
  snprintf(ckpt, sizeof ckpt, "%s/lay", g_dir);
  int64_t mesh[1] = {1}, wshape[2] = {4, 6}, rshape[1] = {3}, hshape[1] = {2};
  uint32_t wmap[2] = {1, 0}, rmap[1] = {0};
  float w[24] = {0}, r[3] = {1, 2, 3}, h[2] = {4, 5};
  dcp_layout *lw, *lr;
  assert_int_equal(dcp_layout_create(ctx, 1, mesh, NULL, 2, wmap, &lw), DCP_OK);
  assert_int_equal(dcp_layout_create(ctx, 1, mesh, NULL, 1, rmap, &lr), DCP_OK);
  dcp_state *st;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(st, "w", DCP_F32, 2, wshape, lw, w), DCP_OK);
  assert_int_equal(dcp_state_add_sharded(st, "r", DCP_F32, 1, rshape, lr, r), DCP_OK);
  int64_t zero[1] = {0};
  assert_int_equal(dcp_state_add_tensor(st, "h", DCP_F32, 1, hshape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "h", zero, hshape, h), DCP_OK);
  assert_int_equal(dcp_save(ctx, st, ckpt, NULL), DCP_OK);
  dcp_meta *m;
  assert_int_equal(dcp_meta_open(ctx, ckpt, &m), DCP_OK);
  assert_int_equal(dcp_meta_mesh_count(m), 1);
  dcp_mesh_info mi;
  assert_int_equal(dcp_meta_mesh(m, 0, &mi), DCP_OK);
  assert_int_equal(mi.ndim, 1);
  assert_int_equal(mi.shape[0], 1);
  assert_int_equal(mi.ranks[0], 0);
  assert_int_equal(dcp_meta_mesh(m, 1, &mi), DCP_ENOTFOUND);
  assert_int_equal(dcp_meta_mesh(m, 0, NULL), DCP_EINVAL);
  size_t iw, ih, at;
  uint32_t map[DCP_MAX_NDIM] = {9, 9};
  assert_int_equal(dcp_meta_find_tensor(m, "w", &iw), DCP_OK);
  assert_int_equal(dcp_meta_find_tensor(m, "h", &ih), DCP_OK);
  assert_int_equal(dcp_meta_tensor_layout(m, iw, &at, map), DCP_OK);
  assert_int_equal(at, 0);
  assert_int_equal(map[0], 1);
  assert_int_equal(map[1], 0);
  assert_int_equal(dcp_meta_tensor_layout(m, ih, &at, map), DCP_ENOTFOUND);
  assert_int_equal(dcp_meta_tensor_layout(m, 99, &at, NULL), DCP_ENOTFOUND);
  assert_int_equal(dcp_meta_tensor_layout(m, iw, NULL, NULL), DCP_EINVAL);
  dcp_meta_free(m);
  expect("inspect lay", 0, "meshes       1\n  [0] [1] ranks 0\n");
  assert_non_null(strstr(g_out, "  w  F32 [4, 6]  1 chunks  96 bytes  mesh 0 map [1, 0]\n"));
  assert_non_null(strstr(g_out, "  h  F32 [2]  1 chunks  8 bytes\n"));
  expect("inspect lay --json", 0, NULL);
  json_t *root = json_out();
  json_t *m0 = json_array_get(json_object_get(root, "meshes"), 0);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(m0, "shape"), 0)), 1);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(m0, "ranks"), 0)), 0);
  json_t *tensors = json_object_get(root, "tensors");
  for (size_t i = 0; i < json_array_size(tensors); i++) {
    json_t *t = json_array_get(tensors, i), *lay = json_object_get(t, "layout");
    if (!strcmp(jstr(t, "fqn"), "h")) {
      assert_true(json_is_null(lay));
      continue;
    }
    assert_int_equal(jint(lay, "mesh"), 0);
    if (!strcmp(jstr(t, "fqn"), "w"))
      assert_int_equal(json_integer_value(json_array_get(json_object_get(lay, "tensor_map"), 0)), 1);
  }
  json_decref(root);
  dcp_state_free(st);
  dcp_layout_free(lw);
  dcp_layout_free(lr);
  dcp_ctx_free(ctx);
  tu_remove_tree(dir);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_and_usage),
      cmocka_unit_test(test_import_inspect_verify),
      cmocka_unit_test(test_inspect_meshes),
      cmocka_unit_test(test_parents_progress_json),
      cmocka_unit_test(test_bad_name_quoted_whole),
      cmocka_unit_test(test_export_diff),
      cmocka_unit_test(test_verify_corrupt),
      cmocka_unit_test(test_diff_goes_on_after_damage),
  };
  return TU_RUN(tests, setup, teardown);
}
