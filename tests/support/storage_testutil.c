/* storage_testutil.c — see storage_testutil.h. */
#define _GNU_SOURCE /* O_DIRECT, nftw */

#include "storage_testutil.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- loading ---------------------------------------------------------------- */

/* $DCP_TEST_PLUGIN_DIR, else ../lib/dcp next to the test binary. */
static void plugin_dir(char *out, size_t n) {
  const char *env = getenv("DCP_TEST_PLUGIN_DIR");
  if (env && *env) {
    snprintf(out, n, "%s", env);
    return;
  }
  char exe[STU_PATH];
  ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
  assert_true(k > 0);
  exe[k] = '\0';
  snprintf(out, n, "%s/../lib/dcp", dirname(exe));
}

/* See storage_testutil.h. */
void stu_load(stu_plugin *sp, const char *name) {
  char dir[STU_PATH], path[STU_PATH + 64];
  plugin_dir(dir, sizeof dir);
  char leaf[64];
  snprintf(leaf, sizeof leaf, "dcp-storage-%s.so", name);
  stu_path(path, sizeof path, dir, leaf);
  sp->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!sp->dl) fail_msg("dlopen %s: %s", path, dlerror());
  void *sym = dlsym(sp->dl, DCP_PLUGIN_ENTRY_SYMBOL);
  assert_non_null(sym);
  dcp_plugin_entry_fn entry;
  memcpy(&entry, &sym, sizeof entry); /* object → function pointer, as dlsym intends */
  sp->p = entry(DCP_PLUGIN_STORAGE);
  sp->diag = entry(FSIO_DIAG_KIND);
  assert_non_null(sp->p);
  assert_non_null(sp->diag);
  assert_null(entry(DCP_PLUGIN_COLL));
  assert_int_equal(sp->p->abi_version, DCP_PLUGIN_ABI_VERSION);
  assert_true(sp->p->struct_size >= sizeof(dcp_storage_plugin));
  assert_string_equal(sp->p->name, name);
  assert_int_equal(sp->diag->version, 2);
}

/* See storage_testutil.h. */
void stu_unload(stu_plugin *sp) {
  if (sp->dl) dlclose(sp->dl);
  sp->dl = NULL;
}

/* ---- directories ------------------------------------------------------------ */

/* See storage_testutil.h. */
void stu_path(char *out, size_t n, const char *dir, const char *leaf) {
  int k = snprintf(out, n, "%s/%s", dir, leaf);
  if (k < 0 || (size_t)k >= n) fail_msg("path too long: %s/%s", dir, leaf);
}

/* See storage_testutil.h. */
void stu_tmpdir(const char *base, char *out, size_t n) {
  char alt[STU_PATH];
  if (!base) {
    base = "/var/tmp";
    if (access(base, W_OK) != 0) {
      plugin_dir(alt, sizeof alt); /* the build tree is on a real disk */
      base = alt;
    }
  }
  stu_path(out, n, base, "dcp-stor-XXXXXX");
  if (!mkdtemp(out)) fail_msg("mkdtemp %s: %s", out, strerror(errno));
}

/* nftw callback: remove whatever it is (FTW_PHYS: links themselves). */
static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)sb, (void)ftw;
  return type == FTW_DP ? rmdir(path) : unlink(path);
}

/* See storage_testutil.h. */
void stu_rmrf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* Collected lines of a snapshot. */
static struct {
  char **lines;
  size_t n, cap, skip;
} snap;

/* nftw callback of stu_snapshot: "relative-path type size". */
static int snap_one(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
  (void)ftw;
  if (snap.n == snap.cap) {
    snap.cap = snap.cap ? 2 * snap.cap : 64;
    snap.lines = realloc(snap.lines, snap.cap * sizeof *snap.lines);
    assert_non_null(snap.lines);
  }
  char line[STU_PATH + 64];
  snprintf(line, sizeof line, "%s %d %lld", path + snap.skip, type, (long long)sb->st_size);
  snap.lines[snap.n] = strdup(line);
  assert_non_null(snap.lines[snap.n]);
  snap.n++;
  return 0;
}

/* qsort comparator of strings. */
static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* See storage_testutil.h. (Not thread-safe: tests call it from one thread.) */
char *stu_snapshot(const char *dir) {
  snap.n = 0;
  snap.skip = strlen(dir);
  assert_int_equal(nftw(dir, snap_one, 16, FTW_PHYS), 0);
  qsort(snap.lines, snap.n, sizeof *snap.lines, cmp_str);
  size_t total = 1;
  for (size_t i = 0; i < snap.n; i++) total += strlen(snap.lines[i]) + 1;
  char *out = calloc(1, total);
  assert_non_null(out);
  for (size_t i = 0; i < snap.n; i++) {
    strcat(strcat(out, snap.lines[i]), "\n");
    free(snap.lines[i]);
  }
  free(snap.lines);
  memset(&snap, 0, sizeof snap);
  return out;
}

/* See storage_testutil.h. */
int stu_direct_supported(const char *dir) {
  char path[STU_PATH + 32];
  stu_path(path, sizeof path, dir, ".direct-probe");
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  int ok = fd >= 0;
  if (ok) close(fd);
  unlink(path);
  return ok;
}

/* ---- data ------------------------------------------------------------------- */

/* See storage_testutil.h. */
dcp_storage *stu_open(const stu_plugin *sp, const char *root, uint32_t flags,
                      const char *options) {
  dcp_storage_config cfg = {sizeof cfg, root, flags, 0, 1, options};
  dcp_storage *st = NULL;
  dcp_plugin_err err = {{0}};
  int rc = sp->p->open(&cfg, &st, &err);
  if (rc) fail_msg("open %s (%s): %d %s", root, options ? options : "", rc, err.msg);
  assert_non_null(st);
  return st;
}

/* See storage_testutil.h. */
void stu_scratch(const char *base, char *parent, char *root) {
  stu_tmpdir(base, parent, STU_PATH);
  stu_path(root, STU_PATH, parent, "ckpt");
}

/* See storage_testutil.h. */
dcp_storage *stu_fresh(const stu_plugin *sp, const char *base, const char *options,
                       char *parent, char *root) {
  stu_scratch(base, parent, root);
  return stu_open(sp, root, DCP_STORAGE_CREATE, options);
}

/* See storage_testutil.h. */
int stu_count_cb(void *arg, const char *name) {
  (void)name;
  ++*(int *)arg;
  return 0;
}

/* See storage_testutil.h. */
void stu_fill(tu_rng *r, unsigned char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)tu_rng_next(r);
}

/* Fail the test with the plugin's message unless rc is DCP_OK. */
static void ok_or_fail(int rc, const dcp_plugin_err *err, const char *what) {
  if (rc) fail_msg("%s: status %d: %s", what, rc, err->msg);
}

/* See storage_testutil.h. */
size_t stu_write(const stu_plugin *sp, dcp_storage *st, const char *name,
                 const unsigned char *data, size_t len, size_t max_piece, tu_rng *r) {
  dcp_plugin_err err = {{0}};
  dcp_storage_file *f = NULL;
  ok_or_fail(sp->p->file_open(st, name, DCP_FILE_WRITE, &f, &err), &err, "file_open W");
  size_t done = 0, pieces = 0;
  int synced_half = 0;
  while (done < len) {
    size_t n = (size_t)tu_rng_range(r, 1, (int64_t)max_piece);
    if (n > len - done) n = len - done;
    ok_or_fail(sp->p->file_write(f, data + done, n, &err), &err, "file_write");
    done += n;
    pieces++;
    if (!synced_half && done >= len / 2) {
      ok_or_fail(sp->p->file_sync(f, &err), &err, "file_sync (half)");
      synced_half = 1;
    }
  }
  ok_or_fail(sp->p->file_sync(f, &err), &err, "file_sync");
  ok_or_fail(sp->p->file_close(f, &err), &err, "file_close W");
  return pieces;
}

/* Read [off, off+n) and compare. */
static void read_cmp(const stu_plugin *sp, dcp_storage_file *f, const unsigned char *data,
                     size_t off, size_t n) {
  dcp_plugin_err err = {{0}};
  unsigned char *buf = malloc(n + 1);
  assert_non_null(buf);
  ok_or_fail(sp->p->file_read(f, buf + 1, n, off, &err), &err, "file_read"); /* odd address */
  if (memcmp(buf + 1, data + off, n) != 0) fail_msg("data differs in [%zu, +%zu)", off, n);
  free(buf);
}

/* See storage_testutil.h. */
uint64_t stu_verify(const stu_plugin *sp, dcp_storage *st, const char *name,
                    const unsigned char *data, size_t len, int nreads, tu_rng *r) {
  dcp_plugin_err err = {{0}};
  uint64_t size = 0, bytes = len;
  ok_or_fail(sp->p->file_size(st, name, &size, &err), &err, "file_size");
  assert_int_equal(size, len);
  dcp_storage_file *f = NULL;
  ok_or_fail(sp->p->file_open(st, name, DCP_FILE_READ, &f, &err), &err, "file_open R");
  read_cmp(sp, f, data, 0, len);
  for (int i = 0; i < nreads && len > 0; i++) {
    size_t off = (size_t)tu_rng_range(r, 0, (int64_t)len - 1);
    size_t n = (size_t)tu_rng_range(r, 1, (int64_t)(len - off));
    if (i % 2 && n > 70000) n = (size_t)tu_rng_range(r, 1, 70000); /* many small ones */
    read_cmp(sp, f, data, off, n);
    bytes += n;
  }
  ok_or_fail(sp->p->file_close(f, &err), &err, "file_close R");
  return bytes;
}
