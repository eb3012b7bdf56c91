/* testutil.h — shared helpers for the unit tests: a seeded PRNG and
 * brute-force references. Include after <cmocka.h>'s prerequisites. */
#ifndef DCP_TESTUTIL_H
#define DCP_TESTUTIL_H

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dcp.h"

/* A small deterministic PRNG (splitmix64): same seed, same sequence. */
typedef struct tu_rng {
  uint64_t state;
} tu_rng;

void tu_rng_seed(tu_rng *r, uint64_t seed);
uint64_t tu_rng_next(tu_rng *r);
/* Uniform in [lo, hi] (inclusive); hi >= lo. */
int64_t tu_rng_range(tu_rng *r, int64_t lo, int64_t hi);

/* Seed for randomised tests: $DCP_TEST_SEED when set, else `fallback`.
 * Printed once so a failure can be replayed. */
uint64_t tu_seed(uint64_t fallback);

/* Row-major linear index of coordinate c within a box of sizes sz. */
int64_t tu_linear(uint32_t ndim, const int64_t *sz, const int64_t *c);

/* 1 when point p (global coordinates) lies in box b. */
int tu_box_contains(const dcp_box *b, const int64_t *p);

/* The build tree's plugin directory: ../lib/dcp next to the test binary
 * (asserts that /proc/self/exe resolves). */
void tu_plugin_dir(char *out, size_t cap);

/* A fixture's start: a fresh scratch directory /tmp/<prefix>-XXXXXX into
 * dir, the build tree's plugin directory into plugins, and a context of
 * rank 0 of 1 on the posix storage with those plugins (the test fails if
 * any of it does not work). */
dcp_ctx *tu_scratch_ctx(const char *prefix, char *dir, size_t dir_cap, char *plugins,
                        size_t plugins_cap);

/* The whole file at path in a malloc'd buffer (one byte more than *len,
 * for a NUL); the test fails when it cannot be read. */
uint8_t *tu_read_file(const char *path, size_t *len);

/* A fixture's end: rm -rf dir (the test fails if that fails). */
void tu_remove_tree(const char *dir);

/* The fixture of the tests that save and load on one rank: a scratch
 * directory, the checkpoint path dir/ckpt (not created), the plugin
 * directory and a context of rank 0 of 1 (tu_scratch_ctx). Use as
 * cmocka's setup and teardown bodies: *state is the tu_fixture. */
typedef struct tu_fixture {
  char dir[PATH_MAX];
  char ckpt[PATH_MAX + 8];
  char plugins[PATH_MAX];
  dcp_ctx *ctx;
} tu_fixture;
int tu_fixture_setup(void **state, const char *prefix);
int tu_fixture_teardown(void **state);

/* The main of every cmocka test program, so that one test runs by name:
 *
 *   test_x                 every test of the group
 *   test_x PATTERN         only the tests whose name matches PATTERN (a glob:
 *                          * and ?, as cmocka's filter); no match is an error
 *   test_x --list          the test names, one a line
 *
 * $DCP_TEST_FILTER is taken as PATTERN when no argument is given. Returns
 * cmocka's result (the number of failed tests), or 2 on a usage error.
 * Call it as TU_RUN(tests, setup, teardown) from main(argc, argv). */
int tu_main(int argc, char **argv, const char *group, const struct CMUnitTest *tests, size_t n,
            CMFixtureFunction setup, CMFixtureFunction teardown);
#define TU_RUN(tests, setup, teardown) \
  tu_main(argc, argv, #tests, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

#endif
