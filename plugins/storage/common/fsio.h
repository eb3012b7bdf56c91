/*
 * fsio.h — the file-system engine shared by the posix and sharedfs storage
 * plugins. Each plugin compiles plugins/storage/common/fsio*.c into its own
 * module (nothing here is exported: the modules are built with hidden
 * visibility), and supplies only what differs between them: where a name
 * lives (one flat directory, or a hashed subdirectory), how directories are
 * made durable, and how a listing walks them.
 *
 * A plugin's `struct dcp_storage` must begin with an fsio_core member, so
 * that a dcp_storage pointer converts to a pointer to its core (C11 6.7.2.1:
 * a pointer to a structure, suitably converted, points to its first member).
 * The file functions below have the exact signatures of the
 * dcp_storage_plugin table and go straight into it.
 *
 * Counters count successful operations: write_ops / read_ops are calls of
 * file_write / file_read, bytes_* are the bytes those calls moved (the
 * logical bytes, whatever the staging did underneath), meta_ops are opens,
 * renames, removes, sizes and listings, sync_ops are file_sync and sync_dir
 * calls, retries are individual retried system calls.
 */
#ifndef DCP_FSIO_H
#define DCP_FSIO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#define FSIO_ALIGN 4096u       /* O_DIRECT alignment of offsets, lengths, buffers */
#define FSIO_NAME_MAX 255u     /* longest valid name */
#define FSIO_PATH_MAX 4352u    /* display paths in messages (root + subdir + name) */
#define FSIO_STAGE_DEFAULT (4u << 20)

/* A private kind for dcp_plugin_entry: returns the fsio_diag table below.
 * Tests use it to see what the ABI does not show (fallbacks, O_DIRECT). */
#define FSIO_DIAG_KIND 0x44494147u /* "DIAG" */

/* Sites where a test can inject errors (option inject=SITE:ERRNO:COUNT). */
enum { FSIO_SITE_OPEN = 1, FSIO_SITE_IO = 2 };

typedef struct fsio_core fsio_core;

/* What a plugin provides to the engine. */
typedef struct fsio_ops {
  /* The directory fd that holds `name`, created first when `create`. The fd
   * stays owned by the backend. Errors as file_open's. */
  int (*dir_of)(fsio_core *c, const char *name, int create, int *dirfd,
                dcp_plugin_err *err);
  /* Note that the directory of `name` changed (sync_dir's work list), or NULL. */
  void (*touch)(fsio_core *c, const char *name);
  /* The path of `name` as shown in messages. */
  void (*path_of)(const fsio_core *c, const char *name, char *buf, size_t n);
} fsio_ops;

/* Which errors are retried, how often and how patiently. */
typedef struct fsio_policy {
  unsigned max_retries;    /* retries after the first try */
  unsigned backoff_us;     /* first sleep; doubles per retry */
  unsigned backoff_max_us; /* sleep cap */
  int shared_fs;           /* EAGAIN and ESTALE are transient too */
  int close_to_open;       /* file_size opens the file (fresh attributes) */
} fsio_policy;

/* Counters, atomic so that concurrent readers of one file count right. */
typedef struct fsio_stats {
  _Atomic uint64_t bytes_written, write_ops, bytes_read, read_ops;
  _Atomic uint64_t sync_ops, meta_ops, retries, direct_fallbacks, reopens;
} fsio_stats;

/* A countdown of injected errors at one site. */
typedef struct fsio_fault {
  int site;
  int err;
  _Atomic int left;
} fsio_fault;

struct fsio_core {
  const fsio_ops *ops;
  char *root;        /* as given, for messages */
  int rootfd;        /* O_DIRECTORY fd of root: every name is opened under it */
  int direct;        /* try O_DIRECT on file opens */
  size_t stage_size; /* O_DIRECT staging / bounce buffer size, FSIO_ALIGN multiple */
  fsio_policy policy;
  fsio_stats stats;
  fsio_fault fault;
};

/* Diagnostics for tests (FSIO_DIAG_KIND). */
typedef struct fsio_diag {
  uint32_t version; /* 2 */
  uint64_t (*direct_fallbacks)(const dcp_storage *st);
  int (*file_is_direct)(const dcp_storage_file *f); /* O_DIRECT set on its fd */
  uint64_t (*reopens)(const dcp_storage *st);       /* fds replaced after ESTALE */
  /* version 2: the offset below which a buffered write file's early
   * writeback was started, 0 when none was (or the kernel refused it) */
  uint64_t (*writeback_started)(const dcp_storage_file *f);
} fsio_diag;
extern const fsio_diag fsio_diag_table;
/* fsio_diag.file_is_direct (fsio_file.c, which knows the file structure). */
int fsio_diag_file_is_direct(const dcp_storage_file *f);
/* fsio_diag.writeback_started (fsio_file.c). */
uint64_t fsio_diag_writeback_started(const dcp_storage_file *f);

/* The storage table of a plugin built on the engine: the plugin supplies
 * its name, caps and the functions that depend on its layout. */
#define FSIO_TABLE(NAME, CAPS, OPEN, CLOSE, SYNC_DIR, LIST)                          \
  {                                                                                  \
    .abi_version = DCP_PLUGIN_ABI_VERSION, .struct_size = sizeof(dcp_storage_plugin), \
    .name = NAME, .caps = CAPS, .open = OPEN, .close = CLOSE,                        \
    .file_open = fsio_file_open, .file_write = fsio_file_write,                      \
    .file_read = fsio_file_read, .file_sync = fsio_file_sync,                        \
    .file_close = fsio_file_close, .file_size = fsio_file_size,                      \
    .rename = fsio_rename, .remove = fsio_remove, .sync_dir = SYNC_DIR, .list = LIST, \
    .get_stats = fsio_get_stats, .get_stats2 = fsio_get_stats2                       \
  }

/* The module's one exported symbol, for a table TABLE: the storage table,
 * or the diagnostics table for FSIO_DIAG_KIND. */
#define FSIO_ENTRY(TABLE)                                                  \
  DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);           \
  DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind) {          \
    if (kind == DCP_PLUGIN_STORAGE) return &(TABLE);                       \
    return kind == FSIO_DIAG_KIND ? (const void *)&fsio_diag_table : NULL; \
  }

/* ---- backend (fsio.c) ---------------------------------------------------- */

/* Open the core on cfg: defaults from pol and direct_default (or the
 * DCP_STORAGE_DIRECT flag), then cfg->options, then root (created under
 * DCP_STORAGE_CREATE) opened as a directory fd. */
int fsio_core_open(fsio_core *c, const fsio_ops *ops, const dcp_storage_config *cfg,
                   const fsio_policy *pol, int direct_default, dcp_plugin_err *err);
/* A plugin's open: calloc `size` bytes (its struct dcp_storage), run init
 * on them (may be NULL), then fsio_core_open on the leading core. */
int fsio_backend_open(size_t size, void (*init)(dcp_storage *st), const fsio_ops *ops,
                      const dcp_storage_config *cfg, const fsio_policy *pol,
                      int direct_default, dcp_storage **out, dcp_plugin_err *err);
/* Release what fsio_core_open acquired. */
void fsio_core_close(fsio_core *c);
/* The core of a plugin's backend (its first member). */
fsio_core *fsio_core_of(dcp_storage *st);

/* 1 when name is 1..255 bytes of [A-Za-z0-9._-] and not "." or "..". */
int fsio_name_ok(const char *name);
/* fsio_name_ok or DCP_ENAME with a message. */
int fsio_check_name(const char *name, dcp_plugin_err *err);

/* 1 when name under dirfd is a symbolic link (lstat: never followed).
 * Used to say so when an O_NOFOLLOW open fails on one. */
int fsio_is_symlink_at(int dirfd, const char *name);

/* The status for errno e: DCP_ENOSPC, DCP_ENOTFOUND or DCP_EIO. */
int fsio_errno_status(int e);
/* Fail with the status of e and "OP PATH: strerror" for name (NULL: root). */
int fsio_fail_errno(const fsio_core *c, dcp_plugin_err *err, int e, const char *op,
                    const char *name);

/* Decide whether to retry after errno e: sleeps the backoff, counts the
 * retry and returns 1, or returns 0 when e is not transient or the tries
 * are used up. *attempt starts at 0. */
int fsio_retry(fsio_core *c, int e, unsigned *attempt);
/* The injected errno for site, consuming one, or 0. */
int fsio_inject(fsio_core *c, int site);
/* Add n to a counter. */
void fsio_count(_Atomic uint64_t *ctr, uint64_t n);

/* fsync a directory fd (retrying transients); path is shown in messages
 * (NULL: root). */
int fsio_fsync_dir(fsio_core *c, int dirfd, const char *path, dcp_plugin_err *err);
/* Call fn for each regular file of dirfd whose name is valid and passes
 * accept (when not NULL); stops at fn's first non-zero value, returned. */
int fsio_list_dir(fsio_core *c, int dirfd, int (*accept)(const char *name, void *actx),
                  void *actx, int (*fn)(void *arg, const char *name), void *arg,
                  dcp_plugin_err *err);

/* ---- table functions (fsio_file.c, fsio_meta.c) -------------------------- */

int fsio_file_open(dcp_storage *st, const char *name, uint32_t mode, dcp_storage_file **out,
                   dcp_plugin_err *err);
int fsio_file_write(dcp_storage_file *f, const void *buf, size_t len, dcp_plugin_err *err);
int fsio_file_read(dcp_storage_file *f, void *buf, size_t len, uint64_t offset,
                   dcp_plugin_err *err);
int fsio_file_sync(dcp_storage_file *f, dcp_plugin_err *err);
int fsio_file_close(dcp_storage_file *f, dcp_plugin_err *err);
int fsio_file_size(dcp_storage *st, const char *name, uint64_t *size, dcp_plugin_err *err);
int fsio_rename(dcp_storage *st, const char *from, const char *to, dcp_plugin_err *err);
int fsio_remove(dcp_storage *st, const char *name, dcp_plugin_err *err);
void fsio_get_stats(const dcp_storage *st, dcp_io_stats *out);
void fsio_get_stats2(const dcp_storage *st, dcp_io_stats2 *out);

/* Open name under dirfd with flags (O_NOFOLLOW, O_CLOEXEC and O_DIRECT when
 * *direct are added), retrying transients and falling back from O_DIRECT
 * when the file system rejects it; checks it is a regular file. */
int fsio_open_at(fsio_core *c, int dirfd, const char *name, int flags, int *direct, int *fd,
                 dcp_plugin_err *err);

#endif
