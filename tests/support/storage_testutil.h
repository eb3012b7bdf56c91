/* storage_testutil.h — helpers and shared scenarios for the storage plugin
 * tests (test_storage_posix.c, test_storage_sharedfs.c). The plugins are
 * dlopen'ed from the build tree: $DCP_TEST_PLUGIN_DIR when set, else
 * <directory of the test binary>/../lib/dcp. Include after testutil.h. */
#ifndef DCP_STORAGE_TESTUTIL_H
#define DCP_STORAGE_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"
#include "testutil.h"
/* fsio_diag and FSIO_DIAG_KIND: the modules' private diagnostics table. */
#include "../../plugins/storage/common/fsio.h"

#define STU_PATH 4096

/* A loaded plugin. */
typedef struct stu_plugin {
  void *dl;
  const dcp_storage_plugin *p;
  const fsio_diag *diag;
} stu_plugin;

/* Where a name is stored on disk: writes root's directory holding `name`
 * into dir (the plugin under test knows its layout). */
typedef void (*stu_locate_fn)(const stu_plugin *sp, const char *root, const char *name,
                              char *dir, size_t n);

/* dlopen dcp-storage-<name>.so and fetch its tables (fails the test if absent). */
void stu_load(stu_plugin *sp, const char *name);
void stu_unload(stu_plugin *sp);

/* mkdtemp under base ("/tmp", "/var/tmp"); base NULL: a directory on a
 * disk file system (/var/tmp, else next to the test binary). */
void stu_tmpdir(const char *base, char *out, size_t n);
/* out = dir + "/" + leaf; fails the test if it does not fit. */
void stu_path(char *out, size_t n, const char *dir, const char *leaf);
/* rm -rf (no symlinks followed). */
void stu_rmrf(const char *path);

/* DCP_FILE_EXCL: a new name is created, an existing one (EXCL or plain) and
 * a symlink at the name (live or dangling; placed where locate says) are
 * DCP_EEXIST with contents and targets untouched; only WRITE | EXCL is
 * valid; never O_DIRECT. */
void stu_case_excl(const stu_plugin *sp, stu_locate_fn locate, const char *options);
/* Six processes racing to create forty names: exactly one creator each. */
void stu_case_excl_race(const stu_plugin *sp, const char *options);
/* A sorted, newline-joined recursive listing of dir (relative paths, with
 * type and size), for "nothing changed here" checks. Caller frees. */
char *stu_snapshot(const char *dir);
/* 1 when open(O_DIRECT) of a new file in dir works (else EINVAL fallback). */
int stu_direct_supported(const char *dir);

/* A fresh parent directory under base (see stu_tmpdir) and root =
 * parent/ckpt (not created). */
void stu_scratch(const char *base, char *parent, char *root);
/* stu_scratch, then open a backend on root with DCP_STORAGE_CREATE. */
dcp_storage *stu_fresh(const stu_plugin *sp, const char *base, const char *options,
                       char *parent, char *root);
/* Open a backend on root (asserting success). */
dcp_storage *stu_open(const stu_plugin *sp, const char *root, uint32_t flags,
                      const char *options);
/* A list callback counting names into *(int *)arg. */
int stu_count_cb(void *arg, const char *name);
/* n pseudo-random bytes. */
void stu_fill(tu_rng *r, unsigned char *buf, size_t n);
/* Write data to name in uneven pieces (1..max_piece bytes), with a
 * file_sync halfway and at the end, then close. Returns the piece count. */
size_t stu_write(const stu_plugin *sp, dcp_storage *st, const char *name,
                 const unsigned char *data, size_t len, size_t max_piece, tu_rng *r);
/* Open name for reading, check its size, read it whole and at `nreads`
 * random offsets/lengths and compare with data. Returns bytes read. */
uint64_t stu_verify(const stu_plugin *sp, dcp_storage *st, const char *name,
                    const unsigned char *data, size_t len, int nreads, tu_rng *r);

/* Shared scenarios: each opens its own backend on a fresh directory under
 * base (NULL: disk) with these options and cleans up. */
void stu_case_roundtrip(const stu_plugin *sp, const char *base, const char *options,
                        size_t len, uint64_t seed);
void stu_case_errors(const stu_plugin *sp, const char *options);
void stu_case_names(const stu_plugin *sp, const char *options);
void stu_case_symlink(const stu_plugin *sp, const char *options, stu_locate_fn locate);
void stu_case_rename_remove_list(const stu_plugin *sp, const char *options);
void stu_case_stats(const stu_plugin *sp, const char *options);
void stu_case_options(const stu_plugin *sp);
void stu_case_inject(const stu_plugin *sp, const char *options);
void stu_case_concurrent_reads(const stu_plugin *sp, const char *options);
/* O_DIRECT round trips with unaligned sizes on a disk directory; expects
 * O_DIRECT on the fds when the file system supports it (probed). */
void stu_case_direct(const stu_plugin *sp, uint32_t flags, const char *options);
/* Buffered fallback when O_DIRECT is refused at open or at a write. */
void stu_case_direct_fallback(const stu_plugin *sp);
/* Buffered appends (options must leave O_DIRECT off) start the page
 * cache's writeback at every whole 32 MiB written; data reads back. */
void stu_case_writeback(const stu_plugin *sp, const char *options);
/* Join options: "a" + "b" → "a,b" (either may be NULL or empty), static buffer. */
const char *stu_opts(const char *a, const char *b);
/* Read back a whole file's stats. */
dcp_io_stats stu_stats(const stu_plugin *sp, const dcp_storage *st);

#endif
