/* The posix storage plugin (dcp-storage-posix.so, dlopen'ed from the build
 * tree): round trips buffered and with O_DIRECT, errors, names, symlinks,
 * rename/remove/list, counters, options, injected faults, the flat layout,
 * exclusive creation (DCP_FILE_EXCL). */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "testutil.h"

#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "storage_testutil.h"

static stu_plugin sp;

/* Load the module once for the group. */
static int setup(void **state) {
  (void)state;
  stu_load(&sp, "posix");
  return 0;
}

/* Unload it. */
static int teardown(void **state) {
  (void)state;
  stu_unload(&sp);
  return 0;
}

/* posix keeps every file directly in root. */
static void posix_locate(const stu_plugin *p, const char *root, const char *name, char *dir,
                         size_t n) {
  (void)p, (void)name;
  snprintf(dir, n, "%s", root);
}

static void test_table(void **state) {
  (void)state;
  assert_int_equal(sp.p->caps, DCP_STORAGE_CAP_DIRECT | DCP_STORAGE_CAP_EXCL);
  assert_non_null(sp.p->open);
  assert_non_null(sp.p->get_stats);
}

static void test_roundtrip_tmp(void **state) {
  (void)state;
  stu_case_roundtrip(&sp, "/tmp", NULL, (6u << 20) + 12345, 1);
}

static void test_roundtrip_disk_small_buffer(void **state) {
  (void)state;
  stu_case_roundtrip(&sp, NULL, "direct=1,buffer_mib=1", (5u << 20) + 777, 2);
}

static void test_direct_flag(void **state) {
  (void)state;
  stu_case_direct(&sp, DCP_STORAGE_DIRECT, NULL);
}

static void test_direct_option(void **state) {
  (void)state;
  stu_case_direct(&sp, 0, "direct=1");
}

static void test_writeback(void **state) {
  (void)state;
  stu_case_writeback(&sp, NULL);
}

static void test_direct_fallback(void **state) {
  (void)state;
  stu_case_direct_fallback(&sp);
}

/* Without the flag or option, posix uses the page cache. */
static void test_buffered_by_default(void **state) {
  (void)state;
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, NULL, parent, root);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp.p->file_open(st, "a.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp.diag->file_is_direct(f), 0);
  assert_int_equal(sp.p->file_write(f, "hello", 5, &err), DCP_OK);
  assert_int_equal(sp.p->file_close(f, &err), DCP_OK);
  char path[STU_PATH + 16];
  stu_path(path, sizeof path, root, "a.bin"); /* flat layout */
  struct stat sb;
  assert_int_equal(lstat(path, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_int_equal(sb.st_size, 5);
  sp.p->close(st);
  stu_rmrf(parent);
}

/* On a local file system EAGAIN is not transient: no retry, DCP_EIO. */
static void test_eagain_not_retried(void **state) {
  (void)state;
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(&sp, NULL, "inject=io:eagain:1", parent, root);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp.p->file_open(st, "a.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp.p->file_write(f, "hello", 5, &err), DCP_EIO);
  assert_non_null(strstr(err.msg, "a.bin"));
  assert_int_equal(sp.p->file_close(f, &err), DCP_EIO);
  assert_int_equal(stu_stats(&sp, st).retries, 0);
  sp.p->close(st);
  stu_rmrf(parent);
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
  stu_case_symlink(&sp, NULL, posix_locate);
}

static void test_rename_remove_list(void **state) {
  (void)state;
  stu_case_rename_remove_list(&sp, NULL);
}

static void test_stats(void **state) {
  (void)state;
  stu_case_stats(&sp, NULL);
  stu_case_stats(&sp, "direct=1");
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
  stu_case_concurrent_reads(&sp, "direct=1");
}

static void test_excl(void **state) {
  (void)state;
  stu_case_excl(&sp, posix_locate, NULL);
  stu_case_excl(&sp, posix_locate, "direct=1");
  stu_case_excl_race(&sp, NULL);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_table),
      cmocka_unit_test(test_roundtrip_tmp),
      cmocka_unit_test(test_roundtrip_disk_small_buffer),
      cmocka_unit_test(test_direct_flag),
      cmocka_unit_test(test_direct_option),
      cmocka_unit_test(test_direct_fallback),
      cmocka_unit_test(test_writeback),
      cmocka_unit_test(test_buffered_by_default),
      cmocka_unit_test(test_eagain_not_retried),
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
