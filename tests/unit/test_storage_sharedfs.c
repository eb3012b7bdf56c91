/* The sharedfs storage plugin (dcp-storage-sharedfs.so): the hashed
 * subdirectory fan-out on disk, listing and renames across subdirectories,
 * O_DIRECT by default, bounded retries with backoff and ESTALE reopen,
 * exclusive creation (DCP_FILE_EXCL) in the fan-out, plus the scenarios
 * shared with posix. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "storage_testutil.h"

static stu_plugin sp;

/* Load the module once for the group. */
static int setup(void **state) {
  (void)state;
  stu_load(&sp, "sharedfs");
  return 0;
}

/* Unload it. */
static int teardown(void **state) {
  (void)state;
  stu_unload(&sp);
  return 0;
}

/* The subdirectory of root that holds name, or -1: found by looking. */
static int find_bucket(const char *root, const char *name) {
  int found = -1;
  for (int b = 0; b < 1000; b++) {
    char sub[16], dir[STU_PATH], path[STU_PATH];
    snprintf(sub, sizeof sub, "d%03d", b);
    stu_path(dir, sizeof dir, root, sub);
    stu_path(path, sizeof path, dir, name);
    struct stat sb;
    if (lstat(path, &sb) == 0) {
      assert_int_equal(found, -1); /* in exactly one place */
      found = b;
    }
  }
  return found;
}

/* Where sharedfs keeps name: write it through the plugin, see where it
 * landed, remove it again (the subdirectory stays). */
static void sfs_locate(const stu_plugin *p, const char *root, const char *name, char *dir,
                       size_t n) {
  dcp_storage *st = stu_open(p, root, 0, "direct=0");
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(p->p->file_open(st, name, DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(p->p->file_close(f, &err), DCP_OK);
  int b = find_bucket(root, name);
  assert_true(b >= 0 && b < 256);
  assert_int_equal(p->p->remove(st, name, &err), DCP_OK);
  p->p->close(st);
  char sub[16];
  snprintf(sub, sizeof sub, "d%03d", b);
  stu_path(dir, n, root, sub);
}

static void test_table(void **state) {
  (void)state;
  assert_int_equal(sp.p->caps,
                   DCP_STORAGE_CAP_DIRECT | DCP_STORAGE_CAP_SHARED_FS | DCP_STORAGE_CAP_EXCL);
}

/* Write n small files named rank-NNNNN.data. */
static void put_ranks(dcp_storage *st, int n) {
  dcp_plugin_err err = {{0}};
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "rank-%05d.data", i);
    dcp_storage_file *f;
    assert_int_equal(sp.p->file_open(st, name, DCP_FILE_WRITE, &f, &err), DCP_OK);
    assert_int_equal(sp.p->file_write(f, name, strlen(name), &err), DCP_OK);
    assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  }
}

/* Root holds only dNNN directories, at most 256 of them; returns how many. */
static int check_root_entries(const char *root) {
  DIR *d = opendir(root);
  assert_non_null(d);
  int subdirs = 0;
  for (struct dirent *de; (de = readdir(d));) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    unsigned b;
    char tail;
    if (sscanf(de->d_name, "d%3u%c", &b, &tail) != 1 || strlen(de->d_name) != 4 || b > 255)
      fail_msg("unexpected entry in root: %s", de->d_name);
    subdirs++;
  }
  closedir(d);
  return subdirs;
}

/* 300 "ranks": files land in subdirectories (never in root), spread over
 * many of them, each in exactly one; a new backend finds them all (the
 * hash is stable) and list returns the logical names. */
static void test_fanout_layout(void **state) {
  (void)state;
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, NULL, parent, root);
  put_ranks(st, 300);
  assert_int_equal(sp.p->sync_dir(st, &(dcp_plugin_err){{0}}), DCP_OK);
  sp.p->close(st);
  int subdirs = check_root_entries(root);
  assert_true(subdirs > 100); /* 300 names over 256 buckets: ~175 expected */
  int per_bucket[256] = {0};
  for (int i = 0; i < 300; i++) {
    char name[32];
    snprintf(name, sizeof name, "rank-%05d.data", i);
    int b = find_bucket(root, name);
    assert_true(b >= 0 && b < 256);
    assert_true(++per_bucket[b] <= 12);
  }
  st = stu_open(&sp, root, 0, NULL);
  char buf[32];
  dcp_storage_file *f;
  dcp_plugin_err err = {{0}};
  assert_int_equal(sp.p->file_open(st, "rank-00123.data", DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp.p->file_read(f, buf, 15, 0, &err), DCP_OK);
  assert_memory_equal(buf, "rank-00123.data", 15);
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  int n = 0;
  assert_int_equal(sp.p->list(st, stu_count_cb, &n, &err), DCP_OK);
  assert_int_equal(n, 300);
  sp.p->close(st);
  stu_rmrf(parent);
}

/* Two names in different subdirectories (from the rank names). */
static void two_buckets(const char *root, char *a, char *b) {
  int ba = find_bucket(root, "rank-00000.data");
  strcpy(a, "rank-00000.data");
  for (int i = 1; i < 300; i++) {
    snprintf(b, 32, "rank-%05d.data", i);
    if (find_bucket(root, b) != ba) return;
  }
  fail_msg("all names in one bucket");
}

/* rename across subdirectories replaces the target atomically and moves
 * the file into the target name's subdirectory. */
static void test_rename_across_subdirs(void **state) {
  (void)state;
  char parent[STU_PATH], root[STU_PATH], a[32], b[32], buf[32];
  dcp_storage *st = stu_fresh(&sp, NULL, NULL, parent, root);
  put_ranks(st, 300);
  two_buckets(root, a, b);
  int bb = find_bucket(root, b);
  dcp_plugin_err err = {{0}};
  assert_int_equal(sp.p->rename(st, a, b, &err), DCP_OK);
  assert_int_equal(find_bucket(root, a), -1);
  assert_int_equal(find_bucket(root, b), bb);
  dcp_storage_file *f;
  assert_int_equal(sp.p->file_open(st, b, DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp.p->file_read(f, buf, 15, 0, &err), DCP_OK);
  assert_memory_equal(buf, a, 15); /* a's contents under b's name */
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  int n = 0;
  assert_int_equal(sp.p->list(st, stu_count_cb, &n, &err), DCP_OK);
  assert_int_equal(n, 299);
  assert_int_equal(sp.p->sync_dir(st, &err), DCP_OK);
  sp.p->close(st);
  stu_rmrf(parent);
}

/* O_DIRECT is the default (and direct=0 turns it off). */
static void test_direct_default(void **state) {
  (void)state;
  stu_case_direct(&sp, 0, NULL);
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, "direct=0", parent, root);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp.p->file_open(st, "x", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp.diag->file_is_direct(f), 0);
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  sp.p->close(st);
  stu_rmrf(parent);
}

static void test_writeback(void **state) {
  (void)state;
  stu_case_writeback(&sp, "direct=0");
}

static void test_direct_fallback(void **state) {
  (void)state;
  stu_case_direct_fallback(&sp);
}

/* Write (and read back) 5 MiB + 5 with these options; returns the backend's
 * retries and reopens. */
static void estale_run(const char *wopts, const char *ropts, uint64_t *retries,
                       uint64_t *reopens) {
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, wopts, parent, root);
  tu_rng r;
  tu_rng_seed(&r, 3);
  size_t len = (5u << 20) + 5;
  unsigned char *data = malloc(len);
  assert_non_null(data);
  stu_fill(&r, data, len);
  stu_write(&sp, st, "s.bin", data, len, 1u << 20, &r);
  retries[0] = stu_stats(&sp, st).retries;
  reopens[0] = sp.diag->reopens(st);
  sp.p->close(st);
  st = stu_open(&sp, root, 0, ropts);
  stu_verify(&sp, st, "s.bin", data, len, 20, &r);
  retries[1] = stu_stats(&sp, st).retries;
  reopens[1] = sp.diag->reopens(st);
  sp.p->close(st);
  free(data);
  stu_rmrf(parent);
}

/* ESTALE: the handle is replaced by a fresh open and the I/O retried, for
 * writers (at a block write) and readers alike; data stays intact. */
static void test_estale_reopens(void **state) {
  (void)state;
  uint64_t retries[2], reopens[2];
  estale_run("inject=io:estale:3", "inject=io:estale:2", retries, reopens);
  assert_int_equal(retries[0], 3);
  assert_int_equal(reopens[0], 3);
  assert_int_equal(retries[1], 2);
  assert_int_equal(reopens[1], 2);
  estale_run("direct=0,inject=open:estale:2", "inject=open:eagain:1", retries, reopens);
  assert_int_equal(retries[0], 2);
  assert_int_equal(reopens[0], 0);
  assert_int_equal(retries[1], 1);
}

/* Milliseconds elapsed since t0. */
static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* A write that keeps failing with EAGAIN: `want` retries with backoff,
 * then DCP_EIO; returns the elapsed milliseconds. */
static double eagain_exhausts(const char *options, uint64_t want) {
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, options, parent, root);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp.p->file_open(st, "busy.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_int_equal(sp.p->file_write(f, "data", 4, &err), DCP_EIO);
  double ms = ms_since(&t0);
  assert_non_null(strstr(err.msg, "busy.bin"));
  assert_int_equal(stu_stats(&sp, st).retries, want);
  assert_int_equal(sp.p->file_close(f, &err), DCP_EIO);
  sp.p->close(st);
  stu_rmrf(parent);
  return ms;
}

/* Retries are bounded (5 by default, retries=N) with exponential backoff:
 * 1+2+4+8+16 ms before giving up. */
static void test_retries_bounded(void **state) {
  (void)state;
  double ms = eagain_exhausts("direct=0,inject=io:eagain:100", 5);
  assert_true(ms >= 30.0);
  eagain_exhausts("direct=0,retries=2,inject=io:eagain:100", 2);
  eagain_exhausts("direct=0,retries=0,inject=io:estale:100", 0);
}

/* A READ open is a fresh open: a file replaced behind the backend's back
 * (another client) is seen at once. */
static void test_read_open_is_fresh(void **state) {
  (void)state;
  char parent[STU_PATH], root[STU_PATH], dir[STU_PATH], path[STU_PATH], tmp[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, NULL, parent, root);
  sfs_locate(&sp, root, "m.bin", dir, sizeof dir);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  char buf[8];
  assert_int_equal(sp.p->file_open(st, "m.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp.p->file_write(f, "old", 3, &err), DCP_OK);
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  stu_path(path, sizeof path, dir, "m.bin");
  stu_path(tmp, sizeof tmp, dir, "m.tmp");
  FILE *fp = fopen(tmp, "w");
  assert_non_null(fp);
  fputs("new", fp), fclose(fp);
  assert_int_equal(rename(tmp, path), 0);
  assert_int_equal(sp.p->file_open(st, "m.bin", DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp.p->file_read(f, buf, 3, 0, &err), DCP_OK);
  assert_memory_equal(buf, "new", 3);
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  sp.p->close(st);
  stu_rmrf(parent);
}

/* sync_dir fsyncs the subdirectory a create touched (the injected error
 * names it), keeps it on the list after a failure, and then root. */
static void test_sync_dir_touched(void **state) {
  (void)state;
  char parent[STU_PATH], root[STU_PATH], dir[STU_PATH];
  stu_scratch(NULL, parent, root);
  assert_int_equal(mkdir(root, 0700), 0);
  sfs_locate(&sp, root, "t.bin", dir, sizeof dir);
  dcp_storage *st = stu_open(&sp, root, 0, "inject=io:eio:2");
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp.p->sync_dir(st, &err), DCP_EIO); /* nothing touched: root */
  assert_non_null(strstr(err.msg, root));
  assert_int_equal(sp.p->file_open(st, "t.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK); /* no data: no I/O */
  assert_int_equal(sp.p->sync_dir(st, &err), DCP_EIO);
  if (!strstr(err.msg, dir)) fail_msg("'%s' not in '%s'", dir, err.msg);
  assert_int_equal(stu_stats(&sp, st).sync_ops, 0);
  assert_int_equal(sp.p->sync_dir(st, &err), DCP_OK);
  assert_int_equal(stu_stats(&sp, st).sync_ops, 1);
  sp.p->close(st);
  stu_rmrf(parent);
}

static void test_roundtrip(void **state) {
  (void)state;
  stu_case_roundtrip(&sp, NULL, NULL, (9u << 20) + 4321, 11);
  stu_case_roundtrip(&sp, "/tmp", "direct=0", (3u << 20) + 1, 12);
}

static void test_errors(void **state) {
  (void)state;
  stu_case_errors(&sp, NULL);
}

static void test_names(void **state) {
  (void)state;
  stu_case_names(&sp, NULL);
}

static void test_symlinks(void **state) {
  (void)state;
  stu_case_symlink(&sp, NULL, sfs_locate);
}

static void test_rename_remove_list(void **state) {
  (void)state;
  stu_case_rename_remove_list(&sp, NULL);
}

static void test_stats(void **state) {
  (void)state;
  stu_case_stats(&sp, NULL);
  stu_case_stats(&sp, "direct=0");
}

static void test_options(void **state) {
  (void)state;
  stu_case_options(&sp);
}

static void test_inject(void **state) {
  (void)state;
  stu_case_inject(&sp, NULL);
}

static void test_concurrent_reads(void **state) {
  (void)state;
  stu_case_concurrent_reads(&sp, NULL);
}

static void test_excl(void **state) {
  (void)state;
  stu_case_excl(&sp, sfs_locate, NULL);
  stu_case_excl(&sp, sfs_locate, "direct=1");
  stu_case_excl_race(&sp, NULL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_fanout_layout),
      cmocka_unit_test(test_rename_across_subdirs),
      cmocka_unit_test(test_direct_default),
      cmocka_unit_test(test_direct_fallback),
      cmocka_unit_test(test_writeback),
      cmocka_unit_test(test_estale_reopens),
      cmocka_unit_test(test_retries_bounded),
      cmocka_unit_test(test_read_open_is_fresh),
      cmocka_unit_test(test_sync_dir_touched),
      cmocka_unit_test(test_roundtrip),
      cmocka_unit_test(test_errors),
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_symlinks),
      cmocka_unit_test(test_rename_remove_list),
      cmocka_unit_test(test_stats),
      cmocka_unit_test(test_options),
      cmocka_unit_test(test_inject),
      cmocka_unit_test(test_concurrent_reads),
      cmocka_unit_test(test_excl),
  };
  return TU_RUN(tests, setup, teardown);
}
