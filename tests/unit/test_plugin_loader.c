/* The plugin loader and registry, the built-in "single" collective, and the
 * example storage plugin's table end to end.
 *
 * The fixtures live in DCP_TEST_PLUGIN_DIR (tests/plugins/CMakeLists.txt),
 * which is on no default search path. The registry is process-wide and
 * never forgets, so the order of the tests matters where noted: a plugin
 * loaded once stays cached, and registered names stay registered. */
#define _GNU_SOURCE /* dladdr, Dl_info */
#include "testutil.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/plugin.h"

#ifndef DCP_TEST_PLUGIN_DIR
#error "DCP_TEST_PLUGIN_DIR must name the fixture directory"
#endif

#define DIR DCP_TEST_PLUGIN_DIR

/* Fail unless err's message contains want (showing the message if not). */
static void expect_msg(const dcpi_err *err, const char *want) {
  if (!strstr(err->msg, want)) fail_msg("message \"%s\" lacks \"%s\"", err->msg, want);
}

/* find (kind, name) with extra_path; returns the status, err filled. */
static dcp_status find(uint32_t kind, const char *name, const char *extra, const void **t,
                       dcpi_err *err) {
  dcpi_err_clear(err);
  return dcpi_plugin_find(kind, name, extra, t, err);
}

static int group_setup(void **state) {
  (void)state;
  unsetenv("DCP_PLUGIN_PATH"); /* the caller's environment must not leak in */
  return 0;
}

/* ---- names and arguments ---------------------------------------------- */

static void test_names(void **state) {
  (void)state;
  assert_true(dcpi_plugin_name_ok("posix"));
  assert_true(dcpi_plugin_name_ok("a_1"));
  char longest[DCPI_PLUGIN_NAME_MAX + 2];
  memset(longest, 'a', sizeof longest);
  longest[DCPI_PLUGIN_NAME_MAX] = '\0';
  assert_true(dcpi_plugin_name_ok(longest));
  longest[DCPI_PLUGIN_NAME_MAX] = 'a';
  longest[DCPI_PLUGIN_NAME_MAX + 1] = '\0';
  assert_false(dcpi_plugin_name_ok(longest));
  const char *bad[] = {"", "Posix", "a-b", "a.b", "../x", "a b", "é"};
  const void *t;
  dcpi_err err;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_false(dcpi_plugin_name_ok(bad[i]));
    assert_int_equal(find(DCP_PLUGIN_STORAGE, bad[i], NULL, &t, &err), DCP_EINVAL);
    assert_null(t);
    expect_msg(&err, "invalid storage plugin name");
  }
  assert_int_equal(find(DCP_PLUGIN_STORAGE, longest, NULL, &t, &err), DCP_EINVAL);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, NULL, NULL, &t, &err), DCP_EINVAL);
  assert_int_equal(find(7, "posix", NULL, &t, &err), DCP_EINVAL);
  expect_msg(&err, "unknown plugin kind 7");
  assert_int_equal(find(DCP_PLUGIN_COLL, "single", NULL, NULL, &err), DCP_EINVAL);
}

/* ---- the single collective -------------------------------------------- */

static void test_single_is_builtin(void **state) {
  (void)state;
  const void *t;
  dcpi_err err;
  /* Found with no search path at all, and passes the checks plugins get. */
  assert_int_equal(find(DCP_PLUGIN_COLL, "single", "/nonexistent", &t, &err), DCP_OK);
  assert_ptr_equal(t, dcpi_coll_single());
  assert_int_equal(dcpi_plugin_check(DCP_PLUGIN_COLL, t, "single", "builtin", &err), DCP_OK);
  const dcp_coll_plugin *c = t;
  assert_int_equal(c->caps, DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS);
  /* Only the collective kind has it. */
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "single", "/nonexistent", &t, &err), DCP_EPLUGIN);
}

/* Open the single collective with rank and world, expecting want. */
static int single_open(int32_t rank, int32_t world, dcp_comm **out, dcp_plugin_err *perr) {
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = rank, .world_size = world,
                         .timeout_ms = 1000};
  return dcpi_coll_single()->open(&cfg, out, perr);
}

static void test_single_ops(void **state) {
  (void)state;
  const dcp_coll_plugin *c = dcpi_coll_single();
  dcp_plugin_err perr = {{0}};
  dcp_comm *comm = NULL;
  assert_int_equal(single_open(0, 2, &comm, &perr), DCP_EINVAL);
  assert_non_null(strstr(perr.msg, "world of one"));
  assert_null(comm);
  assert_int_equal(single_open(1, 1, &comm, &perr), DCP_EINVAL);
  assert_int_equal(single_open(0, 1, &comm, &perr), DCP_OK);
  assert_int_equal(c->rank(comm), 0);
  assert_int_equal(c->size(comm), 1);
  assert_int_equal(c->barrier(comm, &perr), DCP_OK);

  char buf[8] = "abcdefg", recv[8] = {0};
  assert_int_equal(c->bcast(comm, buf, sizeof buf, 0, &perr), DCP_OK);
  assert_string_equal(buf, "abcdefg");
  assert_int_equal(c->bcast(comm, buf, sizeof buf, 1, &perr), DCP_EINVAL);
  assert_int_equal(c->allgather(comm, buf, sizeof buf, recv, &perr), DCP_OK);
  assert_memory_equal(recv, buf, sizeof buf);
  assert_int_equal(c->allgather(comm, buf, sizeof buf, buf, &perr), DCP_OK); /* in place */

  size_t lens[1] = {4};
  memset(recv, 0, sizeof recv);
  assert_int_equal(c->gatherv(comm, buf, 4, recv, lens, 0, &perr), DCP_OK);
  assert_memory_equal(recv, "abcd", 4);
  assert_int_equal(c->gatherv(comm, buf, 5, recv, lens, 0, &perr), DCP_EINVAL);
  assert_int_equal(c->gatherv(comm, buf, 4, recv, lens, 3, &perr), DCP_EINVAL);
  memset(recv, 0, sizeof recv);
  assert_int_equal(c->scatterv(comm, buf + 4, lens, recv, 4, 0, &perr), DCP_OK);
  assert_memory_equal(recv, "efg", 4);
  assert_int_equal(c->scatterv(comm, buf, lens, recv, 3, 0, &perr), DCP_EINVAL);
  assert_int_equal(c->gatherv(comm, NULL, 0, NULL, (size_t[]){0}, 0, &perr), DCP_OK);

  int64_t v[3] = {-5, 0, INT64_MAX};
  for (uint32_t op = DCP_REDUCE_MIN; op <= DCP_REDUCE_SUM; op++) {
    assert_int_equal(c->allreduce_i64(comm, v, 3, op, &perr), DCP_OK);
    assert_true(v[0] == -5 && v[1] == 0 && v[2] == INT64_MAX);
  }
  assert_int_equal(c->allreduce_i64(comm, v, 3, 99, &perr), DCP_EINVAL);
  assert_int_equal(c->allreduce_i64(comm, NULL, 0, DCP_REDUCE_SUM, &perr), DCP_OK);

  int32_t group[2] = {0, 1};
  assert_int_equal(c->group_bcast(comm, group, 1, buf, sizeof buf, 0, &perr), DCP_OK);
  assert_int_equal(c->group_bcast(comm, group, 2, buf, sizeof buf, 0, &perr), DCP_EINVAL);
  assert_int_equal(c->group_bcast(comm, group + 1, 1, buf, sizeof buf, 1, &perr), DCP_EINVAL);
  c->close(comm);

  /* A config from an older header that ends before rank: world of one. */
  dcp_coll_config tiny = {.struct_size = sizeof(uint32_t)};
  assert_int_equal(c->open(&tiny, &comm, &perr), DCP_OK);
  c->close(comm);
}

/* ---- finding plugins on disk ------------------------------------------ */

/* In a child (the cache must not have the example yet, and a child's cache
 * dies with it): DCP_PLUGIN_PATH alone finds the example. */
static void test_find_via_env(void **state) {
  (void)state;
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("DCP_PLUGIN_PATH", "/nonexistent::" DIR, 1);
    const void *t;
    dcpi_err err;
    int ok = find(DCP_PLUGIN_STORAGE, "example", NULL, &t, &err) == DCP_OK &&
             strcmp(((const dcp_storage_plugin *)t)->name, "example") == 0;
    if (!ok) fprintf(stderr, "child: %s\n", err.msg);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* extra_path finds it too, and the second lookup is the cached table even
 * with no path at all. */
static void test_find_via_extra_path(void **state) {
  (void)state;
  const void *t, *again;
  dcpi_err err;
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "example", NULL, &t, &err), DCP_EPLUGIN);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "example", "/nonexistent:" DIR, &t, &err), DCP_OK);
  assert_string_equal(((const dcp_storage_plugin *)t)->name, "example");
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "example", NULL, &again, &err), DCP_OK);
  assert_ptr_equal(t, again);
}

static void test_not_found_lists_paths(void **state) {
  (void)state;
  const void *t;
  dcpi_err err;
  setenv("DCP_PLUGIN_PATH", "/nonexistent/env1:/nonexistent/env2", 1);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "nosuch", "/nonexistent/x1:/nonexistent/x2", &t, &err),
                   DCP_EPLUGIN);
  assert_int_equal(err.code, DCP_EPLUGIN);
  expect_msg(&err, "storage plugin \"nosuch\" not found");
  expect_msg(&err, "dcp-storage-nosuch.so");
  /* In search order: extra_path, then DCP_PLUGIN_PATH. */
  const char *order[] = {"/nonexistent/x1", "/nonexistent/x2", "/nonexistent/env1",
                         "/nonexistent/env2"};
  const char *at = err.msg;
  for (size_t i = 0; i < 4; i++) {
    const char *p = strstr(at, order[i]);
    if (!p) fail_msg("\"%s\" missing or out of order in \"%s\"", order[i], err.msg);
    at = p;
  }
  unsetenv("DCP_PLUGIN_PATH");
  assert_int_equal(find(DCP_PLUGIN_COLL, "nosuch", NULL, &t, &err), DCP_EPLUGIN);
  expect_msg(&err, "dcp-coll-nosuch.so");

  /* A path too long for the message is cut with a count of what is left. */
  char many[4096] = "";
  for (int i = 0; i < 60; i++) {
    char dir[64];
    snprintf(dir, sizeof dir, "%s/nonexistent/directory%02d", i ? ":" : "", i);
    strcat(many, dir);
  }
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "nosuch", many, &t, &err), DCP_EPLUGIN);
  expect_msg(&err, "/nonexistent/directory00");
  expect_msg(&err, "more");
  expect_msg(&err, "DCP_PLUGIN_PATH");
}

/* Expect find(storage, name, DIR) to fail with DCP_EPLUGIN and a message
 * holding each of the NULL-terminated wants. */
static void expect_broken(uint32_t kind, const char *name, const char *const *wants) {
  const void *t = (const void *)1;
  dcpi_err err;
  assert_int_equal(find(kind, name, DIR, &t, &err), DCP_EPLUGIN);
  assert_null(t);
  for (; *wants; wants++) expect_msg(&err, *wants);
}

static void test_broken_plugins(void **state) {
  (void)state;
  expect_broken(DCP_PLUGIN_STORAGE, "garbage",
                (const char *[]){"cannot load storage plugin \"garbage\"",
                                 "dcp-storage-garbage.so", NULL});
  expect_broken(DCP_PLUGIN_STORAGE, "noentry",
                (const char *[]){"dcp-storage-noentry.so", "dcp_plugin_entry", NULL});
  expect_broken(DCP_PLUGIN_STORAGE, "nulltable",
                (const char *[]){"dcp-storage-nulltable.so", "provides no storage table", NULL});
  char have[32], want[32];
  snprintf(have, sizeof have, "version %d,", DCP_PLUGIN_ABI_VERSION + 41);
  snprintf(want, sizeof want, "supports version %d", DCP_PLUGIN_ABI_VERSION);
  expect_broken(DCP_PLUGIN_STORAGE, "badabi",
                (const char *[]){"dcp-storage-badabi.so", have, want, NULL});
  size_t v1 = offsetof(dcp_storage_plugin, get_stats) + sizeof(void (*)(void));
  snprintf(have, sizeof have, "struct_size %zu", v1 - sizeof(void (*)(void)));
  snprintf(want, sizeof want, "(%zu bytes)", v1);
  expect_broken(DCP_PLUGIN_STORAGE, "badsize",
                (const char *[]){"dcp-storage-badsize.so", have, want, NULL});
  expect_broken(DCP_PLUGIN_STORAGE, "nullfn",
                (const char *[]){"dcp-storage-nullfn.so", "file_read is NULL", NULL});
  expect_broken(DCP_PLUGIN_STORAGE, "badname",
                (const char *[]){"named \"other\"", "expected \"badname\"", NULL});
  expect_broken(DCP_PLUGIN_COLL, "nogroup",
                (const char *[]){"group_bcast is NULL", "DCP_COLL_CAP_GROUPS", NULL});
  /* Failures are not cached: asking again gives the same answer. */
  expect_broken(DCP_PLUGIN_STORAGE, "nullfn", (const char *[]){"file_read", NULL});
}

/* The first existing file decides, and extra_path comes before
 * DCP_PLUGIN_PATH: a directory in extra_path holding a "nullfn" that is
 * really the badabi object shadows the real nullfn on DCP_PLUGIN_PATH. */
static void test_search_order(void **state) {
  (void)state;
  char tmp[] = "/tmp/dcp_plugin_order_XXXXXX";
  assert_non_null(mkdtemp(tmp));
  char link[256];
  snprintf(link, sizeof link, "%s/dcp-storage-nullfn.so", tmp);
  assert_int_equal(symlink(DIR "/dcp-storage-badabi.so", link), 0);
  setenv("DCP_PLUGIN_PATH", DIR, 1);
  const void *t;
  dcpi_err err;
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "nullfn", tmp, &t, &err), DCP_EPLUGIN);
  expect_msg(&err, tmp);
  expect_msg(&err, "plugin ABI version");
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "nullfn", "/nonexistent", &t, &err), DCP_EPLUGIN);
  expect_msg(&err, DIR "/dcp-storage-nullfn.so");
  expect_msg(&err, "file_read is NULL");
  unsetenv("DCP_PLUGIN_PATH");
  unlink(link);
  /* A collective-only object under a storage name has no storage table. */
  snprintf(link, sizeof link, "%s/dcp-storage-nogroup.so", tmp);
  assert_int_equal(symlink(DIR "/dcp-coll-nogroup.so", link), 0);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "nogroup", tmp, &t, &err), DCP_EPLUGIN);
  expect_msg(&err, "provides no storage table");
  unlink(link);
  rmdir(tmp);
}

/* The directory of the libdcp actually loaded (here: the executable, the
 * core being linked statically) comes before the compiled-in install
 * directory, which is last: a plugin of another prefix never shadows the
 * one next to the library in use. */
static void test_self_before_install_dir(void **state) {
  (void)state;
  /* The object the loader lives in, found the way the loader finds it
   * (dladdr; here the test program, which links the core statically).
   * Not /proc/self/exe: under valgrind that is valgrind's own binary. */
  Dl_info info;
  assert_true(dladdr((void *)dcpi_plugin_find, &info) && info.dli_fname);
  if (info.dli_fname[0] != '/') {
    print_message("skipped: the program's path (%s) is not absolute, so the loader does not "
                  "search next to it\n", info.dli_fname);
    skip();
  }
  char exe[4096];
  snprintf(exe, sizeof exe, "%s", info.dli_fname);
  *strrchr(exe, '/') = '\0';
  const void *t;
  dcpi_err err;
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "nosuch", NULL, &t, &err), DCP_EPLUGIN);
  char self_sub[4200], self_then[4200];
  snprintf(self_sub, sizeof self_sub, " in %s/dcp, ", exe);
  snprintf(self_then, sizeof self_then, "/dcp, %s, ", exe);
  expect_msg(&err, self_sub);  /* first, without extra_path or $DCP_PLUGIN_PATH */
  expect_msg(&err, self_then); /* then the directory itself, then more: */
  const char *rest = strstr(err.msg, self_then) + strlen(self_then);
  const char *end = strstr(rest, " (set");
  assert_non_null(end);
  assert_true(end > rest && end - rest >= 4 && !strncmp(end - 4, "/dcp", 4)); /* <libdir>/dcp */
}

/* ---- plugin results ---------------------------------------------------- */

static void test_plugin_status(void **state) {
  (void)state;
  dcpi_err err;
  dcp_plugin_err perr = {{0}};
  dcpi_err_clear(&err);
  assert_int_equal(dcpi_plugin_status(0, &perr, "posix", "write", &err), DCP_OK);
  assert_int_equal(err.code, DCP_OK);

  snprintf(perr.msg, sizeof perr.msg, "disk on fire");
  assert_int_equal(dcpi_plugin_status(DCP_EIO, &perr, "posix", "write", &err), DCP_EIO);
  assert_string_equal(err.msg, "posix: write: disk on fire");

  perr.msg[0] = '\0'; /* no reason given: the code's name stands in */
  assert_int_equal(dcpi_plugin_status(DCP_ENOSPC, &perr, "posix", "write", &err), DCP_ENOSPC);
  assert_string_equal(err.msg, "posix: write: storage full");
  assert_int_equal(dcpi_plugin_status(DCP_ETIMEDOUT, NULL, "mpi", NULL, &err), DCP_ETIMEDOUT);
  assert_string_equal(err.msg, "mpi: deadline passed");

  assert_int_equal(dcpi_plugin_status(7, &perr, "posix", "open", &err), DCP_EPLUGIN);
  expect_msg(&err, "posix: open: returned 7, which is not a dcp_status");
  snprintf(perr.msg, sizeof perr.msg, "oops");
  assert_int_equal(dcpi_plugin_status(-999, &perr, NULL, "open", &err), DCP_EPLUGIN);
  assert_string_equal(err.msg, "plugin: open: returned -999, which is not a dcp_status: oops");

  memset(perr.msg, 'x', sizeof perr.msg); /* no terminator: must not be overrun */
  assert_int_equal(dcpi_plugin_status(DCP_EIO, &perr, "posix", "read", &err), DCP_EIO);
  assert_true(strlen(err.msg) < sizeof err.msg);
  expect_msg(&err, "posix: read: xxxx");
}

/* ---- the example storage plugin, end to end --------------------------- */

/* Collects list() names into a '|'-joined, sorted-by-insertion string. */
typedef struct names {
  char buf[256];
  int calls, stop_after;
} names;

static int collect(void *arg, const char *name) {
  names *n = arg;
  strcat(n->buf, name);
  strcat(n->buf, "|");
  return ++n->calls == n->stop_after ? 42 : 0;
}

/* The example's table, loaded through extra_path (cached after the first). */
static const dcp_storage_plugin *example(void) {
  const void *t = NULL;
  dcpi_err err;
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "example", DIR, &t, &err), DCP_OK);
  return t;
}

/* Open a backend of the example on "/mem". */
static dcp_storage *example_open(const dcp_storage_plugin *p) {
  dcp_storage_config cfg = {.struct_size = sizeof cfg, .root = "/mem",
                            .flags = DCP_STORAGE_CREATE, .world_size = 1};
  dcp_plugin_err perr = {{0}};
  dcp_storage *st = NULL;
  assert_int_equal(p->open(&cfg, &st, &perr), DCP_OK);
  cfg.options = "fast=1";
  dcp_storage *bad = NULL;
  assert_int_equal(p->open(&cfg, &bad, &perr), DCP_EINVAL);
  assert_non_null(strstr(perr.msg, "fast=1"));
  return st;
}

/* Write `len` bytes of pattern p to name in `pieces` appends, synced. */
static void write_file(const dcp_storage_plugin *p, dcp_storage *st, const char *name,
                       size_t len, int pieces, unsigned char pat) {
  dcp_plugin_err perr;
  dcp_storage_file *f;
  assert_int_equal(p->file_open(st, name, DCP_FILE_WRITE, &f, &perr), DCP_OK);
  unsigned char *buf = malloc(len ? len : 1);
  for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(pat + i);
  size_t step = len / (size_t)pieces, done = 0;
  for (int k = 0; k < pieces; k++) {
    size_t n = k == pieces - 1 ? len - done : step;
    assert_int_equal(p->file_write(f, buf + done, n, &perr), DCP_OK);
    done += n;
  }
  assert_int_equal(p->file_sync(f, &perr), DCP_OK);
  assert_int_equal(p->file_close(f, &perr), DCP_OK);
  free(buf);
}

static void test_example_storage(void **state) {
  (void)state;
  const dcp_storage_plugin *p = example();
  dcp_storage *st = example_open(p);
  dcp_plugin_err perr;
  dcp_storage_file *f;
  uint64_t size = 0;

  write_file(p, st, "data.0", 10000, 3, 1); /* 3 writes, 1 sync */
  write_file(p, st, "meta", 5, 1, 100);     /* 1 write, 1 sync */
  assert_int_equal(p->file_size(st, "data.0", &size, &perr), DCP_OK);
  assert_int_equal(size, 10000);

  unsigned char buf[64];
  assert_int_equal(p->file_open(st, "data.0", DCP_FILE_READ, &f, &perr), DCP_OK);
  assert_int_equal(p->file_read(f, buf, 64, 5000, &perr), DCP_OK);
  for (size_t i = 0; i < 64; i++) assert_int_equal(buf[i], (unsigned char)(1 + 5000 + i));
  assert_int_equal(p->file_read(f, buf, 10, 9990, &perr), DCP_OK);
  assert_int_equal(p->file_read(f, buf, 11, 9990, &perr), DCP_ECORRUPT);
  assert_int_equal(p->file_read(f, buf, 1, UINT64_MAX, &perr), DCP_ECORRUPT);
  assert_int_equal(p->file_write(f, buf, 1, &perr), DCP_EINVAL);
  assert_int_equal(p->file_close(f, &perr), DCP_OK);

  assert_int_equal(p->file_open(st, "absent", DCP_FILE_READ, &f, &perr), DCP_ENOTFOUND);
  const char *bad[] = {"", ".", "..", "../x", "a/b", "sp ace"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    assert_int_equal(p->file_open(st, bad[i], DCP_FILE_WRITE, &f, &perr), DCP_ENAME);
    assert_int_equal(p->file_size(st, bad[i], &size, &perr), DCP_ENAME);
    assert_int_equal(p->remove(st, bad[i], &perr), DCP_ENAME);
    assert_int_equal(p->rename(st, "meta", bad[i], &perr), DCP_ENAME);
  }

  /* A write in progress is invisible until its close publishes it. */
  assert_int_equal(p->file_open(st, "tmp.meta", DCP_FILE_WRITE, &f, &perr), DCP_OK);
  assert_int_equal(p->file_write(f, "v2", 2, &perr), DCP_OK);
  assert_int_equal(p->file_size(st, "tmp.meta", &size, &perr), DCP_ENOTFOUND);
  assert_int_equal(p->file_close(f, &perr), DCP_OK);
  /* rename replaces the target atomically. */
  assert_int_equal(p->rename(st, "tmp.meta", "meta", &perr), DCP_OK);
  assert_int_equal(p->file_size(st, "tmp.meta", &size, &perr), DCP_ENOTFOUND);
  assert_int_equal(p->file_size(st, "meta", &size, &perr), DCP_OK);
  assert_int_equal(size, 2);
  assert_int_equal(p->rename(st, "tmp.meta", "x", &perr), DCP_ENOTFOUND);
  assert_int_equal(p->rename(st, "meta", "meta", &perr), DCP_OK);
  assert_int_equal(p->sync_dir(st, &perr), DCP_OK);

  names n = {.stop_after = 0};
  assert_int_equal(p->list(st, collect, &n, &perr), DCP_OK);
  assert_int_equal(n.calls, 2);
  assert_true(strstr(n.buf, "data.0|") && strstr(n.buf, "meta|"));
  names stop = {.stop_after = 1};
  assert_int_equal(p->list(st, collect, &stop, &perr), 42); /* fn's value, early */
  assert_int_equal(stop.calls, 1);

  /* A reader keeps its data alive across a remove. */
  assert_int_equal(p->file_open(st, "data.0", DCP_FILE_READ, &f, &perr), DCP_OK);
  assert_int_equal(p->remove(st, "data.0", &perr), DCP_OK);
  assert_int_equal(p->remove(st, "data.0", &perr), DCP_ENOTFOUND);
  assert_int_equal(p->file_read(f, buf, 4, 0, &perr), DCP_OK);
  assert_int_equal(buf[0], 1);
  assert_int_equal(p->file_close(f, &perr), DCP_OK);

  dcp_io_stats s;
  p->get_stats(st, &s);
  assert_int_equal(s.bytes_written, 10000 + 5 + 2);
  assert_int_equal(s.write_ops, 3 + 1 + 1);
  assert_int_equal(s.bytes_read, 64 + 10 + 4);
  assert_int_equal(s.read_ops, 3);
  assert_int_equal(s.sync_ops, 2 + 1);
  assert_true(s.meta_ops > 0);
  assert_int_equal(s.retries, 0);
  p->close(st);
}

/* file_read from several threads at once on one file. */
typedef struct reader_arg {
  const dcp_storage_plugin *p;
  dcp_storage_file *f;
  int ok;
} reader_arg;

static void *reader(void *arg) {
  reader_arg *a = arg;
  dcp_plugin_err perr;
  unsigned char b[100];
  a->ok = 1;
  for (uint64_t off = 0; off + sizeof b <= 65536; off += 997) {
    if (a->p->file_read(a->f, b, sizeof b, off, &perr) != DCP_OK) a->ok = 0;
    for (size_t i = 0; i < sizeof b; i++)
      if (b[i] != (unsigned char)(7 + off + i)) a->ok = 0;
  }
  return NULL;
}

static void test_example_concurrent_reads(void **state) {
  (void)state;
  const dcp_storage_plugin *p = example();
  dcp_storage *st = example_open(p);
  write_file(p, st, "big", 65536, 4, 7);
  dcp_plugin_err perr;
  dcp_storage_file *f;
  assert_int_equal(p->file_open(st, "big", DCP_FILE_READ, &f, &perr), DCP_OK);
  pthread_t th[4];
  reader_arg args[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (reader_arg){p, f, 0};
    assert_int_equal(pthread_create(&th[i], NULL, reader, &args[i]), 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    assert_true(args[i].ok);
  }
  assert_int_equal(p->file_close(f, &perr), DCP_OK);
  p->close(st);
}

/* ---- static registration (last: registrations are permanent) ---------- */

/* Tables registered below must outlive the process's use of them. */
static dcp_storage_plugin reg_a, reg_b, reg_bad;
static dcp_coll_plugin reg_coll;

static void test_register_validation(void **state) {
  (void)state;
  dcpi_err err;
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, NULL), DCP_EINVAL);
  assert_int_equal(dcp_plugin_register(3, example()), DCP_EINVAL);
  reg_bad = *example();
  reg_bad.name = "regbad";
  reg_bad.abi_version = 2;
  assert_int_equal(dcpi_plugin_register(DCP_PLUGIN_STORAGE, &reg_bad, &err), DCP_EPLUGIN);
  expect_msg(&err, "registered storage table: plugin ABI version 2");
  reg_bad.abi_version = DCP_PLUGIN_ABI_VERSION;
  reg_bad.struct_size = 16;
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, &reg_bad), DCP_EPLUGIN);
  reg_bad.struct_size = sizeof reg_bad;
  reg_bad.remove = NULL;
  assert_int_equal(dcpi_plugin_register(DCP_PLUGIN_STORAGE, &reg_bad, &err), DCP_EPLUGIN);
  expect_msg(&err, "remove is NULL");
  reg_bad = *example();
  reg_bad.name = NULL;
  assert_int_equal(dcpi_plugin_register(DCP_PLUGIN_STORAGE, &reg_bad, &err), DCP_EPLUGIN);
  expect_msg(&err, "no name");
  reg_bad.name = "";
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, &reg_bad), DCP_EPLUGIN);
  reg_bad.name = "Bad-Name";
  assert_int_equal(dcpi_plugin_register(DCP_PLUGIN_STORAGE, &reg_bad, &err), DCP_EPLUGIN);
  expect_msg(&err, "Bad-Name");
  const void *t;
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "regbad", NULL, &t, &err), DCP_EPLUGIN);

  /* group_bcast: required with DCP_COLL_CAP_GROUPS, optional without. */
  reg_coll = *dcpi_coll_single();
  reg_coll.name = "nogroups";
  reg_coll.group_bcast = NULL;
  assert_int_equal(dcpi_plugin_register(DCP_PLUGIN_COLL, &reg_coll, &err), DCP_EPLUGIN);
  expect_msg(&err, "group_bcast");
  reg_coll.caps = DCP_COLL_CAP_BULK;
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_COLL, &reg_coll), DCP_OK);
  assert_int_equal(find(DCP_PLUGIN_COLL, "nogroups", NULL, &t, &err), DCP_OK);
  assert_ptr_equal(t, &reg_coll);
  reg_coll.size = NULL; /* a table of another kind is checked as that kind */
  assert_int_equal(dcpi_plugin_register(DCP_PLUGIN_COLL, &reg_coll, &err), DCP_EPLUGIN);
  expect_msg(&err, "size is NULL");
  reg_coll.size = dcpi_coll_single()->size;
}

/* A registered name wins over the disk (even over a broken file of that
 * name, and over the cached example), and registering again replaces. */
static void test_register_wins_and_replaces(void **state) {
  (void)state;
  const dcp_storage_plugin *disk = example();
  const void *t;
  dcpi_err err;
  reg_a = *disk;
  reg_b = *disk;
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, &reg_a), DCP_OK);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "example", DIR, &t, &err), DCP_OK);
  assert_ptr_equal(t, &reg_a);
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, &reg_b), DCP_OK);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "example", DIR, &t, &err), DCP_OK);
  assert_ptr_equal(t, &reg_b);

  static dcp_storage_plugin over_broken;
  over_broken = *disk;
  over_broken.name = "badabi";
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_STORAGE, &over_broken), DCP_OK);
  assert_int_equal(find(DCP_PLUGIN_STORAGE, "badabi", DIR, &t, &err), DCP_OK);
  assert_ptr_equal(t, &over_broken);

  /* The built-in single yields only to an explicit registration. */
  static dcp_coll_plugin my_single;
  my_single = *dcpi_coll_single();
  assert_int_equal(dcp_plugin_register(DCP_PLUGIN_COLL, &my_single), DCP_OK);
  assert_int_equal(find(DCP_PLUGIN_COLL, "single", NULL, &t, &err), DCP_OK);
  assert_ptr_equal(t, &my_single);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_names),
      cmocka_unit_test(test_single_is_builtin),
      cmocka_unit_test(test_single_ops),
      cmocka_unit_test(test_find_via_env), /* before anything loads the example */
      cmocka_unit_test(test_find_via_extra_path),
      cmocka_unit_test(test_not_found_lists_paths),
      cmocka_unit_test(test_broken_plugins),
      cmocka_unit_test(test_search_order),
      cmocka_unit_test(test_self_before_install_dir),
      cmocka_unit_test(test_plugin_status),
      cmocka_unit_test(test_example_storage),
      cmocka_unit_test(test_example_concurrent_reads),
      cmocka_unit_test(test_register_validation),
      cmocka_unit_test(test_register_wins_and_replaces),
  };
  return TU_RUN(tests, group_setup, NULL);
}
