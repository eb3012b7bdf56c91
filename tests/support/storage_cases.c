/* storage_cases.c — scenarios shared by the storage plugin tests (see
 * storage_testutil.h). Each one builds its own directory and removes it. */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage_testutil.h"

/* ---- small helpers ---------------------------------------------------------- */

/* See storage_testutil.h. */
const char *stu_opts(const char *a, const char *b) {
  static char bufs[4][512];
  static unsigned next;
  char *out = bufs[next++ % 4];
  int both = a && *a && b && *b;
  snprintf(out, sizeof bufs[0], "%s%s%s", a ? a : "", both ? "," : "", b ? b : "");
  return out;
}

/* See storage_testutil.h. */
dcp_io_stats stu_stats(const stu_plugin *sp, const dcp_storage *st) {
  dcp_io_stats s;
  memset(&s, 0xff, sizeof s); /* every field must be written */
  sp->p->get_stats(st, &s);
  if (DCP_HAS_FIELD(sp->p, dcp_storage_plugin, get_stats2) && sp->p->get_stats2) {
    /* The size-carrying counters agree with the frozen ones ... */
    dcp_io_stats2 s2;
    memset(&s2, 0xff, sizeof s2);
    s2.struct_size = sizeof s2;
    sp->p->get_stats2(st, &s2);
    assert_int_equal(s2.struct_size, sizeof s2);
    assert_int_equal(s2.bytes_written, s.bytes_written);
    assert_int_equal(s2.write_ops, s.write_ops);
    assert_int_equal(s2.bytes_read, s.bytes_read);
    assert_int_equal(s2.read_ops, s.read_ops);
    assert_int_equal(s2.sync_ops, s.sync_ops);
    assert_int_equal(s2.meta_ops, s.meta_ops);
    assert_int_equal(s2.retries, s.retries);
    /* ... and a caller built with a shorter struct gets no byte past it. */
    memset(&s2, 0xab, sizeof s2);
    s2.struct_size = (uint32_t)offsetof(dcp_io_stats2, write_ops);
    sp->p->get_stats2(st, &s2);
    assert_int_equal(s2.bytes_written, s.bytes_written);
    const unsigned char *tail = (const unsigned char *)&s2 + offsetof(dcp_io_stats2, write_ops);
    for (size_t i = 0; i < sizeof s2 - offsetof(dcp_io_stats2, write_ops); i++)
      assert_int_equal(tail[i], 0xab);
  }
  return s;
}

/* Write a small file with fixed contents. */
static void put(const stu_plugin *sp, dcp_storage *st, const char *name, const void *data,
                size_t n) {
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_open(st, name, DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_write(f, data, n, &err), DCP_OK);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
}

/* Read a whole small file (up to cap bytes) into out; returns its size. */
static size_t get(const stu_plugin *sp, dcp_storage *st, const char *name, void *out,
                  size_t cap) {
  dcp_plugin_err err = {{0}};
  uint64_t size;
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_size(st, name, &size, &err), DCP_OK);
  assert_true(size <= cap);
  assert_int_equal(sp->p->file_open(st, name, DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_read(f, out, (size_t)size, 0, &err), DCP_OK);
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
  return (size_t)size;
}

/* Random data of len bytes (caller frees). */
static unsigned char *random_data(tu_rng *r, size_t len) {
  unsigned char *d = malloc(len ? len : 1);
  assert_non_null(d);
  stu_fill(r, d, len);
  return d;
}

/* ---- round trip ------------------------------------------------------------- */

/* Write, verify, reopen the backend (no CREATE) and verify again. */
static void roundtrip_one(const stu_plugin *sp, dcp_storage **st, const char *root,
                          const char *options, const char *name, size_t len, tu_rng *r) {
  unsigned char *data = random_data(r, len);
  stu_write(sp, *st, name, data, len, len / 7 + 4099, r);
  stu_verify(sp, *st, name, data, len, 100, r);
  sp->p->close(*st);
  *st = stu_open(sp, root, 0, options);
  stu_verify(sp, *st, name, data, len, 20, r);
  free(data);
}

/* See storage_testutil.h. */
void stu_case_roundtrip(const stu_plugin *sp, const char *base, const char *options,
                        size_t len, uint64_t seed) {
  char parent[STU_PATH], root[STU_PATH];
  tu_rng r;
  tu_rng_seed(&r, tu_seed(seed));
  dcp_storage *st = stu_fresh(sp, base, options, parent, root);
  roundtrip_one(sp, &st, root, options, "big.bin", len, &r);
  const size_t odd[] = {0, 1, 4095, 4096, 4097, 3 * 4096 + 17};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
    char name[32];
    snprintf(name, sizeof name, "odd-%zu.bin", odd[i]);
    roundtrip_one(sp, &st, root, options, name, odd[i], &r);
  }
  sp->p->close(st);
  stu_rmrf(parent);
}

/* ---- errors ----------------------------------------------------------------- */

/* Missing root: ENOTFOUND without CREATE; bad configs: EINVAL. */
static void errors_open(const stu_plugin *sp, const char *parent, const char *options) {
  char root[STU_PATH];
  stu_path(root, sizeof root, parent, "missing");
  dcp_storage_config cfg = {sizeof cfg, root, 0, 0, 1, options};
  dcp_storage *st = NULL;
  dcp_plugin_err err = {{0}};
  assert_int_equal(sp->p->open(&cfg, &st, &err), DCP_ENOTFOUND);
  assert_non_null(strstr(err.msg, "missing"));
  struct stat sb;
  assert_int_not_equal(stat(root, &sb), 0); /* not created */
  assert_int_equal(sp->p->open(NULL, &st, &err), DCP_EINVAL);
  cfg.root = NULL;
  assert_int_equal(sp->p->open(&cfg, &st, &err), DCP_EINVAL);
  cfg.root = root;
  cfg.struct_size = 4;
  assert_int_equal(sp->p->open(&cfg, &st, &err), DCP_EINVAL);
}

/* Reads past the end are DCP_ECORRUPT with the actual size in the message. */
static void errors_eof(const stu_plugin *sp, dcp_storage *st) {
  unsigned char data[10000], buf[4096];
  memset(data, 7, sizeof data);
  put(sp, st, "f", data, sizeof data);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_equal(sp->p->file_open(st, "f", DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_equal(sp->p->file_read(f, buf, 2000, 9000, &err), DCP_ECORRUPT);
  assert_non_null(strstr(err.msg, "ends at 10000, wanted 2000 bytes at offset 9000"));
  assert_int_equal(sp->p->file_read(f, buf, 1, 10000, &err), DCP_ECORRUPT);
  assert_int_equal(sp->p->file_read(f, buf, 4096, 1ull << 40, &err), DCP_ECORRUPT);
  assert_int_equal(sp->p->file_read(f, buf, 16, UINT64_MAX - 3, &err), DCP_ECORRUPT);
  assert_int_equal(sp->p->file_read(f, buf, 1000, 9000, &err), DCP_OK); /* exactly to EOF */
  assert_int_equal(sp->p->file_write(f, buf, 1, &err), DCP_EINVAL);  /* read-only handle */
  assert_int_equal(sp->p->file_close(f, &err), DCP_OK);
}

/* Missing names are DCP_ENOTFOUND everywhere, naming the file. */
static void errors_missing(const stu_plugin *sp, dcp_storage *st) {
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f = (dcp_storage_file *)&err;
  uint64_t size;
  assert_int_equal(sp->p->file_open(st, "nope", DCP_FILE_READ, &f, &err), DCP_ENOTFOUND);
  assert_null(f);
  assert_non_null(strstr(err.msg, "nope"));
  assert_int_equal(sp->p->file_size(st, "nope", &size, &err), DCP_ENOTFOUND);
  assert_int_equal(sp->p->remove(st, "nope", &err), DCP_ENOTFOUND);
  assert_int_equal(sp->p->rename(st, "nope", "other", &err), DCP_ENOTFOUND);
  assert_int_equal(sp->p->file_open(st, "x", 3, &f, &err), DCP_EINVAL);
  assert_int_equal(sp->p->file_open(st, "x", 0, &f, &err), DCP_EINVAL);
}

/* See storage_testutil.h. */
void stu_case_errors(const stu_plugin *sp, const char *options) {
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  struct stat sb;
  assert_int_equal(stat(root, &sb), 0); /* CREATE made it */
  assert_true(S_ISDIR(sb.st_mode));
  errors_open(sp, parent, options);
  errors_eof(sp, st);
  errors_missing(sp, st);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* ---- names ------------------------------------------------------------------ */

/* Every entry point refuses name with DCP_ENAME. */
static void refuse_name(const stu_plugin *sp, dcp_storage *st, const char *name) {
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f = NULL;
  uint64_t size;
  assert_int_equal(sp->p->file_open(st, name, DCP_FILE_WRITE, &f, &err), DCP_ENAME);
  assert_null(f);
  assert_int_equal(sp->p->file_open(st, name, DCP_FILE_READ, &f, &err), DCP_ENAME);
  assert_int_equal(sp->p->file_size(st, name, &size, &err), DCP_ENAME);
  assert_int_equal(sp->p->remove(st, name, &err), DCP_ENAME);
  assert_int_equal(sp->p->rename(st, "ok", name, &err), DCP_ENAME);
  assert_int_equal(sp->p->rename(st, name, "ok2", &err), DCP_ENAME);
  assert_true(strlen(err.msg) > 0);
}

/* See storage_testutil.h. */
void stu_case_names(const stu_plugin *sp, const char *options) {
  char parent[STU_PATH], root[STU_PATH], long_name[301], max_name[256];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  put(sp, st, "ok", "x", 1);
  memset(long_name, 'a', 300), long_name[300] = '\0';
  memset(max_name, 'b', 255), max_name[255] = '\0';
  const char *bad[] = {"../x", "a/b", ".", "..", "", long_name, "x\n", "/etc/passwd",
                       "a b", "a\\b", "\xc3\xa9", "..\x2fx", "~", NULL};
  char *before = stu_snapshot(parent);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) refuse_name(sp, st, bad[i]);
  char too_long[257]; /* 256 bytes, one too many */
  memset(too_long, 'b', 256), too_long[256] = '\0';
  refuse_name(sp, st, too_long);
  char *after = stu_snapshot(parent);
  assert_string_equal(before, after); /* nothing created anywhere under parent */
  put(sp, st, max_name, "y", 1); /* the longest valid name works */
  put(sp, st, "Az09._-", "z", 1);
  sp->p->close(st);
  free(before), free(after);
  stu_rmrf(parent);
}

/* ---- symlinks and foreign entries ------------------------------------------- */

/* A symlink named like a checkpoint file is never followed out of root. */
static void symlink_refused(const stu_plugin *sp, dcp_storage *st, const char *parent,
                            const char *dir) {
  char outside[STU_PATH + 16], link[STU_PATH + 16], buf[16];
  stu_path(outside, sizeof outside, parent, "outside.txt");
  stu_path(link, sizeof link, dir, "link.bin");
  FILE *fp = fopen(outside, "w");
  assert_non_null(fp);
  fputs("SECRET", fp), fclose(fp);
  assert_int_equal(symlink(outside, link), 0);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  uint64_t size;
  assert_int_not_equal(sp->p->file_open(st, "link.bin", DCP_FILE_READ, &f, &err), DCP_OK);
  assert_int_not_equal(sp->p->file_open(st, "link.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  assert_int_not_equal(sp->p->file_size(st, "link.bin", &size, &err), DCP_OK);
  fp = fopen(outside, "r");
  assert_non_null(fp);
  assert_non_null(fgets(buf, sizeof buf, fp));
  fclose(fp);
  assert_string_equal(buf, "SECRET"); /* not truncated through the link */
  assert_int_equal(sp->p->remove(st, "link.bin", &err), DCP_OK); /* the link only */
  struct stat sb;
  assert_int_equal(lstat(outside, &sb), 0);
  assert_int_not_equal(lstat(link, &sb), 0);
}

/* A dangling symlink: a WRITE open must not create its target. */
static void dangling_refused(const stu_plugin *sp, dcp_storage *st, const char *parent,
                             const char *dir) {
  char target[STU_PATH + 16], link[STU_PATH + 16];
  stu_path(target, sizeof target, parent, "created-through-link");
  stu_path(link, sizeof link, dir, "dang.bin");
  assert_int_equal(symlink(target, link), 0);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  assert_int_not_equal(sp->p->file_open(st, "dang.bin", DCP_FILE_WRITE, &f, &err), DCP_OK);
  struct stat sb;
  assert_int_not_equal(lstat(target, &sb), 0);
  assert_int_equal(unlink(link), 0);
}

/* A directory and a fifo planted under a file name: refused (never
 * blocking on the fifo), and not listed. */
static void foreign_refused(const stu_plugin *sp, dcp_storage *st, const char *dir1,
                            const char *dir2) {
  char p1[STU_PATH + 16], p2[STU_PATH + 16];
  stu_path(p1, sizeof p1, dir1, "adir");
  stu_path(p2, sizeof p2, dir2, "afifo");
  assert_int_equal(mkdir(p1, 0700), 0);
  assert_int_equal(mkfifo(p2, 0600), 0);
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f;
  uint64_t size;
  assert_int_equal(sp->p->file_open(st, "adir", DCP_FILE_READ, &f, &err), DCP_EIO);
  assert_int_equal(sp->p->file_open(st, "afifo", DCP_FILE_READ, &f, &err), DCP_EIO);
  assert_non_null(strstr(err.msg, "not a regular file"));
  assert_int_not_equal(sp->p->file_size(st, "adir", &size, &err), DCP_OK);
  int n = 0;
  assert_int_equal(sp->p->list(st, stu_count_cb, &n, &err), DCP_OK);
  assert_int_equal(n, 0);
}

/* See storage_testutil.h. */
void stu_case_symlink(const stu_plugin *sp, const char *options, stu_locate_fn locate) {
  char parent[STU_PATH], root[STU_PATH], dir[STU_PATH];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  locate(sp, root, "link.bin", dir, sizeof dir);
  symlink_refused(sp, st, parent, dir);
  locate(sp, root, "dang.bin", dir, sizeof dir);
  dangling_refused(sp, st, parent, dir);
  locate(sp, root, "adir", dir, sizeof dir);
  char dir2[STU_PATH];
  locate(sp, root, "afifo", dir2, sizeof dir2);
  foreign_refused(sp, st, dir, dir2);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* ---- rename, remove, list --------------------------------------------------- */

/* Collected names of a listing. */
typedef struct names {
  char v[64][64];
  int n;
} names;

/* list callback: collect. */
static int collect_cb(void *arg, const char *name) {
  names *ns = arg;
  assert_true(ns->n < 64 && strlen(name) < 64);
  strcpy(ns->v[ns->n++], name);
  return 0;
}

/* qsort comparator of names.v rows. */
static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

/* list callback: stop at once with 7. */
static int stop_cb(void *arg, const char *name) {
  (void)name;
  ++*(int *)arg;
  return 7;
}

/* rename replaces: new opens see the new contents, an old handle the old. */
static void rename_replaces(const stu_plugin *sp, dcp_storage *st) {
  dcp_plugin_err err = {{0}};
  char buf[16];
  put(sp, st, "a", "AAAA", 4);
  put(sp, st, "b", "BBBBBB", 6);
  dcp_storage_file *old;
  assert_int_equal(sp->p->file_open(st, "b", DCP_FILE_READ, &old, &err), DCP_OK);
  assert_int_equal(sp->p->rename(st, "a", "b", &err), DCP_OK);
  assert_int_equal(get(sp, st, "b", buf, sizeof buf), 4);
  assert_memory_equal(buf, "AAAA", 4);
  uint64_t size;
  assert_int_equal(sp->p->file_size(st, "a", &size, &err), DCP_ENOTFOUND);
  assert_int_equal(sp->p->file_read(old, buf, 6, 0, &err), DCP_OK);
  assert_memory_equal(buf, "BBBBBB", 6); /* the replaced file, intact */
  assert_int_equal(sp->p->file_close(old, &err), DCP_OK);
  assert_int_equal(sp->p->rename(st, "b", "c", &err), DCP_OK); /* to a new name */
  assert_int_equal(get(sp, st, "c", buf, sizeof buf), 4);
}

/* See storage_testutil.h. */
void stu_case_rename_remove_list(const stu_plugin *sp, const char *options) {
  char parent[STU_PATH], root[STU_PATH];
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  dcp_plugin_err err = {{0}};
  rename_replaces(sp, st);
  assert_int_equal(sp->p->remove(st, "c", &err), DCP_OK);
  assert_int_equal(sp->p->remove(st, "c", &err), DCP_ENOTFOUND);
  for (int i = 0; i < 40; i++) {
    char name[16];
    snprintf(name, sizeof name, "f-%02d", i);
    put(sp, st, name, name, strlen(name));
    if (i % 3 == 0) assert_int_equal(sp->p->remove(st, name, &err), DCP_OK);
  }
  assert_int_equal(sp->p->sync_dir(st, &err), DCP_OK);
  names ns = {.n = 0};
  assert_int_equal(sp->p->list(st, collect_cb, &ns, &err), DCP_OK);
  assert_int_equal(ns.n, 26);
  qsort(ns.v, (size_t)ns.n, sizeof ns.v[0], cmp_name);
  for (int i = 0, k = 0; i < 40; i++) {
    char name[16];
    snprintf(name, sizeof name, "f-%02d", i);
    if (i % 3) assert_string_equal(ns.v[k++], name);
  }
  int calls = 0;
  assert_int_equal(sp->p->list(st, stop_cb, &calls, &err), 7);
  assert_int_equal(calls, 1);
  sp->p->close(st);
  stu_rmrf(parent);
}

/* ---- counters --------------------------------------------------------------- */

/* See storage_testutil.h. Counts every operation and byte of a fixed
 * script: write in k pieces (2 syncs), size, read r times, rename, list,
 * remove, sync_dir. */
void stu_case_stats(const stu_plugin *sp, const char *options) {
  char parent[STU_PATH], root[STU_PATH];
  tu_rng r;
  tu_rng_seed(&r, tu_seed(77));
  dcp_storage *st = stu_fresh(sp, NULL, options, parent, root);
  dcp_io_stats s0 = stu_stats(sp, st);
  assert_int_equal(s0.bytes_written + s0.write_ops + s0.bytes_read + s0.read_ops, 0);
  assert_int_equal(s0.sync_ops + s0.meta_ops + s0.retries, 0);
  size_t len = (3u << 20) + 333;
  unsigned char *data = random_data(&r, len);
  size_t pieces = stu_write(sp, st, "s", data, len, 300000, &r);
  uint64_t bytes_read = stu_verify(sp, st, "s", data, len, 9, &r);
  dcp_plugin_err err = {{0}};
  int n = 0;
  assert_int_equal(sp->p->rename(st, "s", "t", &err), DCP_OK);
  assert_int_equal(sp->p->list(st, stu_count_cb, &n, &err), DCP_OK);
  assert_int_equal(sp->p->remove(st, "t", &err), DCP_OK);
  assert_int_equal(sp->p->sync_dir(st, &err), DCP_OK);
  dcp_io_stats s = stu_stats(sp, st);
  assert_int_equal(s.bytes_written, len);
  assert_int_equal(s.write_ops, pieces);
  assert_int_equal(s.bytes_read, bytes_read);
  assert_int_equal(s.read_ops, 10);  /* whole file + 9 random */
  assert_int_equal(s.sync_ops, 3);   /* 2 file syncs + sync_dir */
  assert_int_equal(s.meta_ops, 6);   /* open W, size, open R, rename, list, remove */
  assert_int_equal(s.retries, 0);
  free(data);
  sp->p->close(st);
  stu_rmrf(parent);
}
