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
static int dcp(const char *args) {
  char cmd[PATH_MAX * 3];
  snprintf(cmd, sizeof cmd, "sh -c 'cd \"%s\" && \"%s\" %s >out.txt 2>err.txt'", g_dir, g_dcp,
           args);
  int st = system(cmd);
  char p[PATH_MAX + 16];
  snprintf(p, sizeof p, "%s/out.txt", g_dir);
  slurp_into(p, g_out, sizeof g_out);
  snprintf(p, sizeof p, "%s/err.txt", g_dir);
  slurp_into(p, g_err, sizeof g_err);
  assert_true(WIFEXITED(st));
  return WEXITSTATUS(st);
}

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
}

static void test_import_inspect_verify(void **state) {
  (void)state;
  expect("import src/m.safetensors --to ck", 0, "imported");
  assert_string_equal(g_err, ""); /* no progress when stderr is not a terminal */
  expect("import src/m.safetensors --to ck", 3, NULL); /* already committed */
  assert_non_null(strstr(g_err, "committed checkpoint exists"));
  expect("ls ck", 0, "enc.w\tF32\t[40, 30]\t1 chunks\t4800 bytes");
  assert_non_null(strstr(g_out, "enc.b\tBF16\t[30]"));
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
  expect("import src/m.safetensors --to src --link", 0, "(linked)");
  expect("verify src", 0, ": OK");
  expect("import src/m.safetensors --to elsewhere --link", 3, NULL);
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
  expect("diff ck src", 0, "equal      enc.w"); /* copied vs linked */
  expect("import other.safetensors --to ck3", 0, NULL);
  expect("diff ck ck3", 1, "different  enc.w  max abs diff 0.25");
  assert_non_null(strstr(g_out, "equal      enc.b"));
  expect("diff --quiet ck ck3", 1, "1 equal, 1 different");
  assert_null(strstr(g_out, "equal      enc.b"));
  assert_int_equal(dcp("diff ck missing"), 3);
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
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_and_usage),
      cmocka_unit_test(test_import_inspect_verify),
      cmocka_unit_test(test_export_diff),
      cmocka_unit_test(test_verify_corrupt),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
