/* test_attack_files — a committed checkpoint damaged on disk: .metadata
 * truncated at every length and every byte flipped, a data file
 * truncated, flipped, swapped with another checkpoint's file of the same
 * size or an older save's, a huge sparse .metadata or data file, hostile
 * paths. A load (and dcp_verify) must either fail with a specific code or
 * return exactly the saved bytes: never DCP_OK with other bytes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "at_gen.h"
#include "base/wire.h"
#include "metadata/format.h"
#include "ckpt_files.h"
#include "testutil.h"


/* Write the n bytes at b to the file p (created or truncated). */
static void spit(const char *p, const uint8_t *b, size_t n) {
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

/* Write orig (n bytes) to p with byte `at` xor mask. */
static void spit_flipped(const char *p, uint8_t *orig, size_t n, size_t at, uint8_t mask) {
  orig[at] ^= mask;
  spit(p, orig, n);
  orig[at] ^= mask;
}

/* Save the model m at dir (one rank, one data file, 4 KiB blocks). */
static void save_model(dcp_ctx *ctx, const at_model *m, const char *dir, uint32_t flags) {
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = flags;
  o.block_size = 4096;
  dcp_status rc = at_save(ctx, m, 1, 0, dir, &o);
  if (rc) fprintf(stderr, "save: %s\n", dcp_ctx_last_error(ctx));
  assert_int_equal(rc, DCP_OK);
}

/* Load the whole model from dir: DCP_OK only with every byte right (the
 * test fails otherwise); returns the status. */
static dcp_status load_model(dcp_ctx *ctx, const at_model *m, const char *dir) {
  int wrong;
  dcp_status rc = at_load_all(ctx, m, 1, dir, &wrong);
  if (wrong) fail_msg("load returned DCP_OK with wrong bytes");
  return rc;
}

static void assert_specific(dcp_status rc, const char *what, size_t at);

/* The file p cut at every step-th length from 0 (orig, n bytes, restored
 * after): load and dcp_verify fail with a specific code, and so does
 * dcp_meta_open when p is the .metadata (is_meta). */
static void check_cuts(tu_fixture *f, const at_model *m, const char *p, const uint8_t *orig,
                       size_t n, size_t step, int is_meta) {
  for (size_t cut = 0; cut < n; cut += step) {
    spit(p, orig, cut);
    assert_specific(load_model(f->ctx, m, f->ckpt), "truncated load", cut);
    dcp_meta *mv = NULL;
    dcp_status rc = dcp_meta_open(f->ctx, f->ckpt, &mv);
    if (rc || is_meta) assert_specific(rc, "truncated meta_open", cut);
    dcp_meta_free(mv);
    assert_specific(dcp_verify(f->ctx, f->ckpt, NULL), "truncated verify", cut);
  }
  spit(p, orig, n);
}

/* Whether byte `at` of a format-4 .metadata is verified only where it is
 * used (docs/format.md, "Integrity"): a chunk list is checked by its own
 * checksums when a load first reads it, so a load that does not read the
 * damaged list (here: a tensor no rank of this load's layout needs) may
 * succeed; the trailer and the chunks section's checksum in the directory
 * are read by dcp verify alone. Either way a load that succeeds has the
 * exact bytes (load_model checks) and dcp verify fails. */
static int verified_lazily(const uint8_t *meta, size_t n, size_t at) {
  if (n < DCPI_SECTIONS_START + DCPI_TRAILER_SIZE || dcpi_get_u32(meta + 8) < 4) return 0;
  const uint8_t *chunks = meta + DCPI_HEADER_SIZE + (DCPI_SEC_CHUNKS - 1) * DCPI_DIRENT_SIZE;
  uint64_t off = dcpi_get_u64(chunks + 8), len = dcpi_get_u64(chunks + 16);
  size_t cks = (size_t)(chunks - meta) + 24;
  return at >= n - DCPI_TRAILER_SIZE || (at >= cks && at < cks + 8) ||
         (at >= off && at - off < len);
}

/* The file p with one byte flipped at every step-th offset (orig, n
 * bytes, restored after): dcp_verify fails with a specific code, and a
 * load too when p is the .metadata (is_meta); a data file's load may
 * instead return the right bytes (a flip in bytes no block covers). The
 * mask of offset `at` is 1 << (at % 8). */
static void check_flips(tu_fixture *f, const at_model *m, const char *p, uint8_t *orig,
                        size_t n, size_t step, int is_meta) {
  for (size_t at = 0; at < n; at += step) {
    spit_flipped(p, orig, n, at, (uint8_t)(1u << (at % 8)));
    dcp_status rc = load_model(f->ctx, m, f->ckpt);
    if (rc || (is_meta && !verified_lazily(orig, n, at))) assert_specific(rc, "flipped load", at);
    assert_specific(dcp_verify(f->ctx, f->ckpt, NULL), "flipped verify", at);
  }
  spit(p, orig, n);
  assert_int_equal(load_model(f->ctx, m, f->ckpt), DCP_OK);
}

/* rc is one of the codes a damaged checkpoint may give. */
static void assert_specific(dcp_status rc, const char *what, size_t at) {
  if (rc == DCP_ECORRUPT || rc == DCP_EINCOMPLETE || rc == DCP_EVERSION || rc == DCP_ENOTFOUND ||
      rc == DCP_EMISMATCH || rc == DCP_EIO)
    return;
  fail_msg("%s at %zu: %s", what, at, dcp_strerror(rc));
}

/* Save the model of seed at f->ckpt (into *m); its .metadata's path into
 * p and its bytes, returned (*n of them). */
static uint8_t *saved_metadata(tu_fixture *f, uint64_t seed, at_model *m, char *p, size_t cap,
                               size_t *n) {
  at_model_gen(m, seed);
  save_model(f->ctx, m, f->ckpt, 0);
  snprintf(p, cap, "%s/.metadata", f->ckpt);
  return tu_read_file(p, n);
}

/* .metadata cut at every length and every byte flipped: load, meta_open and
 * verify all fail with a specific code. */
static void test_metadata_damage(void **state) {
  tu_fixture *f = *state;
  at_model m;
  char p[PATH_MAX + 64];
  size_t n;
  uint8_t *orig = saved_metadata(f, 77, &m, p, sizeof p, &n);
  check_cuts(f, &m, p, orig, n, 1, 1);
  check_flips(f, &m, p, orig, n, 1, 1);
  free(orig);
}

/* The data file cut and flipped (raw and zstd): a load is right or fails,
 * dcp_verify fails. */
static void test_data_damage(void **state) {
  tu_fixture *f = *state;
  for (int z = 0; z < 2; z++) {
    at_model m;
    at_model_gen(&m, 78 + (uint64_t)z);
    tu_remove_tree(f->ckpt);
    save_model(f->ctx, &m, f->ckpt, z ? DCP_SAVE_COMPRESS : 0);
    char p[PATH_MAX + 64];
    assert_true(ck_data_file(f->ckpt, 0, p, sizeof p));
    size_t n;
    uint8_t *orig = tu_read_file(p, &n);
    size_t step = n / 97 + 1;
    check_cuts(f, &m, p, orig, n, step, 0);
    check_flips(f, &m, p, orig, n, step, 0);
    /* appended bytes: the recorded length differs */
    FILE *a = fopen(p, "ab");
    assert_non_null(a);
    fputs("tail", a);
    fclose(a);
    assert_specific(dcp_verify(f->ctx, f->ckpt, NULL), "grown data verify", n);
    spit(p, orig, n);
    assert_int_equal(load_model(f->ctx, &m, f->ckpt), DCP_OK);
    free(orig);
  }
}

/* A data file replaced by another checkpoint's file of the same size (the
 * same geometry, other values), under its own name; and by the file an
 * older save of the same directory wrote. */
static void test_data_swapped(void **state) {
  tu_fixture *f = *state;
  char other[PATH_MAX + 16], pa[PATH_MAX + 64], pb[PATH_MAX + 64];
  snprintf(other, sizeof other, "%s/other", f->dir);
  at_model m, m2;
  at_model_gen(&m, 90);
  m2 = m;
  m2.seed = 140; /* same geometry (and per-rank item length), other bytes */
  save_model(f->ctx, &m, f->ckpt, 0);
  save_model(f->ctx, &m2, other, 0);
  assert_true(ck_data_file(f->ckpt, 0, pa, sizeof pa));
  assert_true(ck_data_file(other, 0, pb, sizeof pb));
  size_t na, nb;
  uint8_t *a = tu_read_file(pa, &na), *b = tu_read_file(pb, &nb);
  assert_int_equal(na, nb);
  spit(pa, b, nb);
  assert_specific(load_model(f->ctx, &m, f->ckpt), "swapped data load", 0);
  assert_specific(dcp_verify(f->ctx, f->ckpt, NULL), "swapped data verify", 0);
  spit(pa, a, na);
  assert_int_equal(load_model(f->ctx, &m, f->ckpt), DCP_OK);
  /* an overwrite; then the older save's data file put back under the new name */
  save_model(f->ctx, &m2, f->ckpt, DCP_SAVE_OVERWRITE);
  assert_true(ck_data_file(f->ckpt, 0, pb, sizeof pb));
  spit(pb, a, na);
  assert_specific(load_model(f->ctx, &m2, f->ckpt), "older data load", 0);
  free(a);
  free(b);
}

/* A huge sparse .metadata (1 TiB) and data file: a specific error, quickly,
 * never an attempt to read or allocate all of it. */
static void test_huge_sparse(void **state) {
  tu_fixture *f = *state;
  at_model m;
  char p[PATH_MAX + 64];
  size_t n;
  uint8_t *orig = saved_metadata(f, 92, &m, p, sizeof p, &n);
  assert_int_equal(truncate(p, (off_t)1 << 40), 0);
  assert_specific(load_model(f->ctx, &m, f->ckpt), "huge metadata load", 0);
  dcp_meta *mv = NULL;
  assert_specific(dcp_meta_open(f->ctx, f->ckpt, &mv), "huge metadata open", 0);
  spit(p, orig, n);
  assert_true(ck_data_file(f->ckpt, 0, p, sizeof p));
  assert_int_equal(truncate(p, (off_t)1 << 40), 0);
  dcp_status rc = load_model(f->ctx, &m, f->ckpt); /* the blocks are intact */
  if (rc) assert_specific(rc, "huge data load", 0);
  assert_specific(dcp_verify(f->ctx, f->ckpt, NULL), "huge data verify", 0);
  free(orig);
}

/* Hostile checkpoint paths: a regular file, an over-long path, a path with
 * a NUL-free but control-character name: specific errors, no crash. */
static void test_hostile_paths(void **state) {
  tu_fixture *f = *state;
  at_model m;
  at_model_gen(&m, 93);
  char p[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/plainfile", f->dir);
  spit(p, (const uint8_t *)"x", 1);
  dcp_state *st;
  at_bufs *b;
  assert_int_equal(at_state_new(f->ctx, &m, 1, 0, 1, 1, AT_ITEMS | AT_PER_RANK, &st, &b), DCP_OK);
  dcp_status rc = dcp_save(f->ctx, st, p, NULL);
  assert_true(rc < 0);
  assert_true(rc != DCP_ENOMEM);
  size_t cap = 3 * PATH_MAX;
  char *longp = malloc(cap + 1);
  assert_non_null(longp);
  int k = snprintf(longp, cap, "%s/", f->dir);
  memset(longp + k, 'a', cap - (size_t)k);
  longp[cap] = '\0';
  rc = dcp_save(f->ctx, st, longp, NULL);
  assert_true(rc < 0);
  rc = dcp_load(f->ctx, st, longp, NULL);
  assert_true(rc < 0);
  assert_true(dcp_verify(f->ctx, longp, NULL) < 0);
  rc = dcp_save(f->ctx, st, "", NULL);
  assert_int_equal(rc, DCP_EINVAL);
  free(longp);
  at_state_free(st, b);
}

static int setup(void **state) { return tu_fixture_setup(state, "dcp-attack-files"); }

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_metadata_damage, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_data_damage, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_data_swapped, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_huge_sparse, setup, tu_fixture_teardown),
      cmocka_unit_test_setup_teardown(test_hostile_paths, setup, tu_fixture_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
