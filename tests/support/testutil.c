#include "testutil.h"

#include <fnmatch.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void tu_rng_seed(tu_rng *r, uint64_t seed) { r->state = seed; }

uint64_t tu_rng_next(tu_rng *r) {
  uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t tu_rng_range(tu_rng *r, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  if (span == 0) return (int64_t)tu_rng_next(r);
  return lo + (int64_t)(tu_rng_next(r) % span);
}

uint64_t tu_seed(uint64_t fallback) {
  static int printed;
  const char *env = getenv("DCP_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 0) : fallback;
  if (!printed) {
    printf("# seed %llu (set DCP_TEST_SEED to replay)\n", (unsigned long long)seed);
    printed = 1;
  }
  return seed;
}

int64_t tu_linear(uint32_t ndim, const int64_t *sz, const int64_t *c) {
  int64_t idx = 0;
  for (uint32_t d = 0; d < ndim; d++) idx = idx * sz[d] + c[d];
  return idx;
}

int tu_box_contains(const dcp_box *b, const int64_t *p) {
  for (uint32_t d = 0; d < b->ndim; d++)
    if (p[d] < b->offset[d] || p[d] >= b->offset[d] + b->size[d]) return 0;
  return 1;
}

void tu_plugin_dir(char *out, size_t cap) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(n > 0);
  exe[n] = '\0';
  snprintf(out, cap, "%s/../lib/dcp", dirname(exe));
}

dcp_ctx *tu_scratch_ctx(const char *prefix, char *dir, size_t dir_cap, char *plugins,
                        size_t plugins_cap) {
  snprintf(dir, dir_cap, "/tmp/%s-XXXXXX", prefix);
  assert_non_null(mkdtemp(dir));
  tu_plugin_dir(plugins, plugins_cap);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = "posix";
  cfg.plugin_path = plugins;
  dcp_ctx *ctx = NULL;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  if (rc) fprintf(stderr, "%s\n", dcp_ctx_create_error());
  assert_int_equal(rc, DCP_OK);
  return ctx;
}

uint8_t *tu_read_file(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  assert_non_null(fp);
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  assert_true(n >= 0);
  uint8_t *buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
  fclose(fp);
  *len = (size_t)n;
  return buf;
}

void tu_remove_tree(const char *dir) {
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* See testutil.h. cmocka's own filter matches with * and ? only, like
 * fnmatch without special cases, so counting matches here tells a typo
 * (nothing would run, and the program would pass) from a real selection. */
int tu_main(int argc, char **argv, const char *group, const struct CMUnitTest *tests, size_t n,
            CMFixtureFunction setup, CMFixtureFunction teardown) {
  const char *pattern = argc > 1 ? argv[1] : getenv("DCP_TEST_FILTER");
  if (argc > 2 || (pattern && !strcmp(pattern, "--help"))) {
    fprintf(stderr, "usage: %s [--list | PATTERN]\n", argv[0]);
    return 2;
  }
  if (pattern && !strcmp(pattern, "--list")) {
    for (size_t i = 0; i < n; i++) printf("%s\n", tests[i].name);
    return 0;
  }
  if (pattern && *pattern) {
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) hits += fnmatch(pattern, tests[i].name, 0) == 0;
    if (!hits) {
      fprintf(stderr, "%s: no test matches '%s' (--list shows them)\n", argv[0], pattern);
      return 2;
    }
    cmocka_set_test_filter(pattern);
  }
  return _cmocka_run_group_tests(group, tests, n, setup, teardown);
}

int tu_fixture_setup(void **state, const char *prefix) {
  tu_fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->ctx = tu_scratch_ctx(prefix, f->dir, sizeof f->dir, f->plugins, sizeof f->plugins);
  snprintf(f->ckpt, sizeof f->ckpt, "%s/ckpt", f->dir);
  *state = f;
  return 0;
}

int tu_fixture_teardown(void **state) {
  tu_fixture *f = *state;
  dcp_ctx_free(f->ctx);
  tu_remove_tree(f->dir);
  free(f);
  return 0;
}
