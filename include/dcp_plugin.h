/*
 * dcp_plugin.h — the stable plugin ABI of libdcp (version 1).
 *
 * Every access to a checkpoint's files goes through a *storage* plugin and
 * all cross-rank traffic through a *collective* plugin; the core's own
 * system calls are process plumbing only (the async writer's process,
 * shared memory and pipe, and the host identity a directory lease records).
 * A plugin is a shared object that exports one entry
 * symbol, DCP_PLUGIN_ENTRY_SYMBOL, returning a pointer to a const table:
 *
 *     const void *dcp_plugin_entry(uint32_t kind);
 *
 * It returns the table of that kind (DCP_PLUGIN_STORAGE or DCP_PLUGIN_COLL),
 * or NULL when the object does not provide one. Every table starts with the
 * same four fields — abi_version, struct_size, name, caps — followed by
 * function pointers. The core checks abi_version == DCP_PLUGIN_ABI_VERSION
 * and struct_size >= the size of the version-1 table; later versions only
 * append fields (the way sqlite3_vfs grows), so a newer table is accepted
 * and fields past an older struct_size are treated as absent.
 *
 * Conventions for every function pointer:
 *  - returns a dcp_status (0 ok, negative error); on error it writes a
 *    NUL-terminated reason into err->msg (which the core copies to the
 *    context's last error) and leaves outputs unspecified;
 *  - handles are opaque to the core and owned by the plugin; the core frees
 *    them only through the table's close functions;
 *  - names passed to storage functions are made by the library, never from
 *    user input: 1..255 bytes of [A-Za-z0-9._-], not "." or "..". A plugin
 *    must still reject anything else with DCP_ENAME (defence in depth: no
 *    path ever leaves the checkpoint directory).
 * See docs/plugins.md for a plugin author's guide.
 */
#ifndef DCP_PLUGIN_H
#define DCP_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dcp.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DCP_PLUGIN_ABI_VERSION 1
#define DCP_PLUGIN_ENTRY_SYMBOL "dcp_plugin_entry"

/* Kinds of plugin table. */
#define DCP_PLUGIN_STORAGE 1u
#define DCP_PLUGIN_COLL 2u

/* The signature of the entry symbol. */
typedef const void *(*dcp_plugin_entry_fn)(uint32_t kind);

/* Where a plugin function leaves the reason for an error.
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_plugin_err {
  char msg[512];
} dcp_plugin_err;

/* ------------------------------------------------------------------------ */
/* Plugin author's kit                                                      */
/* ------------------------------------------------------------------------ */

/* Header-only helpers (macros and static inline functions: nothing here is
 * a symbol of libdcp, so a plugin still links against libc only). They
 * compile as C11 and C++11 and later. Like the tables, this section only
 * grows. docs/plugins.md, "Plugin author's kit". */

/* The attribute that exports the entry symbol from a module built with
 * hidden visibility (-fvisibility=hidden: export the entry and nothing
 * else). Put it on the declaration:
 *
 *     DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);
 *
 * (in C++: extern "C" DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(...)). */
#if defined(_WIN32) || defined(__CYGWIN__)
#define DCP_PLUGIN_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define DCP_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define DCP_PLUGIN_EXPORT
#endif

/* printf-style format checking of a plugin's own message helpers:
 * FMT is the 1-based index of the format parameter, ARGS that of the first
 * variadic argument (0 for a va_list function). */
#if defined(__GNUC__)
#define DCP_PLUGIN_FORMAT(FMT, ARGS) __attribute__((format(printf, FMT, ARGS)))
#else
#define DCP_PLUGIN_FORMAT(FMT, ARGS)
#endif

/* Non-zero when the struct at ptr, whose uint32_t struct_size its producer
 * set to the sizeof it was built with (the configs and tables here, the
 * option and output structs of dcp.h), is large enough to hold `field` of
 * `type` (the type as this header declares it). Read a field of a config
 * the core passes in (dcp_storage_config, dcp_coll_config) only when this
 * holds, and use its default otherwise:
 *
 *     const char *opts = DCP_HAS_FIELD(cfg, dcp_coll_config, options)
 *                            ? cfg->options : NULL;
 *
 * ptr must not be NULL. */
#define DCP_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof((ptr)->field))

/* Format a reason into err->msg (truncated to fit, always NUL-terminated)
 * and return code, so that an error path is one statement:
 *
 *     if (!buf) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
 *
 * err may be NULL (nothing is written). dcp_plugin_vfail takes a va_list,
 * for helpers of a plugin's own that add context (errno text, a path). */
static inline int dcp_plugin_vfail(dcp_plugin_err *err, int code, const char *fmt,
                                   va_list ap) DCP_PLUGIN_FORMAT(3, 0);
static inline int dcp_plugin_fail(dcp_plugin_err *err, int code, const char *fmt, ...)
    DCP_PLUGIN_FORMAT(3, 4);

static inline int dcp_plugin_vfail(dcp_plugin_err *err, int code, const char *fmt,
                                   va_list ap) {
  if (err) vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  return code;
}

static inline int dcp_plugin_fail(dcp_plugin_err *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dcp_plugin_vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

/* ------------------------------------------------------------------------ */
/* Storage                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct dcp_storage dcp_storage;           /* one checkpoint directory */
typedef struct dcp_storage_file dcp_storage_file; /* one open file in it */

/* What a storage backend is opened on. Fields past struct_size are absent. */
typedef struct dcp_storage_config {
  uint32_t struct_size;
  const char *root;    /* the checkpoint directory (created when missing if
                          DCP_STORAGE_CREATE is set in flags) */
  uint32_t flags;      /* DCP_STORAGE_* below */
  int32_t rank;        /* the opening rank and world, for fan-out schemes */
  int32_t world_size;
  const char *options; /* plugin-specific "key=value,key=value", or NULL */
} dcp_storage_config;

#define DCP_STORAGE_CREATE 1u /* create root (one level) if it does not exist */
#define DCP_STORAGE_DIRECT 2u /* use O_DIRECT-style unbuffered I/O if possible */
#define DCP_STORAGE_AUX 4u    /* since 0.3: an auxiliary handle (the directory
                                 lease, a look at what is committed) beside
                                 the one a save or load does its I/O on;
                                 plugins may treat it like any other */

/* Capability flags of a storage table. */
#define DCP_STORAGE_CAP_DIRECT 1u     /* honours DCP_STORAGE_DIRECT */
#define DCP_STORAGE_CAP_SHARED_FS 2u  /* built for shared file systems */
/* -- since libdcp 0.3 (ABI 1, appended) -- */
#define DCP_STORAGE_CAP_EXCL 4u       /* file_open honours DCP_FILE_EXCL, atomically
                                         also between hosts of a shared file
                                         system (the directory lease needs it) */

/* file_open modes. */
#define DCP_FILE_READ 1u  /* read-only, random access through file_read */
#define DCP_FILE_WRITE 2u /* create or truncate; sequential appends */
/* -- since libdcp 0.3 (ABI 1, appended) -- */
#define DCP_FILE_EXCL 4u  /* with DCP_FILE_WRITE only: create the file, failing
                             with DCP_EEXIST when the name exists in any form
                             (a file, a symbolic link — never followed —, a
                             directory); exactly one of several racing creators
                             succeeds, on every host (O_CREAT|O_EXCL|O_NOFOLLOW).
                             The core passes it only to tables whose caps have
                             DCP_STORAGE_CAP_EXCL; others may reject it with
                             DCP_EINVAL. */

/* I/O counters of a backend since it was opened, filled by the plugin's
 * get_stats into the core's struct.
 * Frozen: never grows. Its size-carrying successor is dcp_io_stats2, filled
 * by the optional get_stats2 (docs/plugins.md, "Storage contract"). */
typedef struct dcp_io_stats {
  uint64_t bytes_written, write_ops;
  uint64_t bytes_read, read_ops;
  uint64_t sync_ops;  /* file and directory syncs */
  uint64_t meta_ops;  /* opens, renames, removes, sizes, listings */
  uint64_t retries;   /* operations retried after a transient error */
} dcp_io_stats;

/* -- since libdcp 0.3 (ABI 1, appended) -- */
/* The counters again, carrying their size so that they can grow: the core
 * sets struct_size to the size it was built with, and get_stats2 fills the
 * fields that DCP_HAS_FIELD(out, dcp_io_stats2, field) says are there and
 * no byte past struct_size. Grows by appending fields. */
typedef struct dcp_io_stats2 {
  uint32_t struct_size; /* set by the core, never by the plugin */
  uint32_t reserved;    /* 0 */
  uint64_t bytes_written, write_ops;
  uint64_t bytes_read, read_ops;
  uint64_t sync_ops, meta_ops, retries; /* as in dcp_io_stats */
} dcp_io_stats2;

typedef struct dcp_storage_plugin {
  uint32_t abi_version; /* DCP_PLUGIN_ABI_VERSION */
  uint32_t struct_size; /* sizeof(dcp_storage_plugin) as built */
  const char *name;     /* "posix", "sharedfs", ... */
  uint64_t caps;        /* DCP_STORAGE_CAP_* */

  /* Open a backend on cfg->root. Errors: DCP_ENOTFOUND (root missing and not
   * DCP_STORAGE_CREATE), DCP_EIO, DCP_EINVAL (bad options). */
  int (*open)(const dcp_storage_config *cfg, dcp_storage **out, dcp_plugin_err *err);
  /* Release the backend. Files must be closed first. */
  void (*close)(dcp_storage *st);

  /* Open `name` in mode DCP_FILE_READ, DCP_FILE_WRITE or (with
   * DCP_STORAGE_CAP_EXCL) DCP_FILE_WRITE | DCP_FILE_EXCL.
   * Errors: DCP_ENOTFOUND (READ of a missing file), DCP_EEXIST (EXCL of an
   * existing name), DCP_ENAME, DCP_EIO. */
  int (*file_open)(dcp_storage *st, const char *name, uint32_t mode,
                   dcp_storage_file **out, dcp_plugin_err *err);
  /* Append len bytes; all of them or an error (DCP_EIO, DCP_ENOSPC). */
  int (*file_write)(dcp_storage_file *f, const void *buf, size_t len, dcp_plugin_err *err);
  /* Read exactly len bytes at offset. May be called from several threads
   * at once on one file. Errors: DCP_EIO, DCP_ECORRUPT (the file ends
   * before offset+len). */
  int (*file_read)(dcp_storage_file *f, void *buf, size_t len, uint64_t offset,
                   dcp_plugin_err *err);
  /* Make the file's data durable (fsync). */
  int (*file_sync)(dcp_storage_file *f, dcp_plugin_err *err);
  /* Close and free f, whatever the result. A WRITE file's data is complete
   * on disk only after file_sync and a successful close. */
  int (*file_close)(dcp_storage_file *f, dcp_plugin_err *err);

  /* Size of `name` in bytes. Errors: DCP_ENOTFOUND, DCP_ENAME, DCP_EIO. */
  int (*file_size)(dcp_storage *st, const char *name, uint64_t *size, dcp_plugin_err *err);
  /* Atomically rename `from` to `to`, replacing `to`. */
  int (*rename)(dcp_storage *st, const char *from, const char *to, dcp_plugin_err *err);
  /* Remove `name`. Errors: DCP_ENOTFOUND, DCP_ENAME, DCP_EIO. */
  int (*remove)(dcp_storage *st, const char *name, dcp_plugin_err *err);
  /* Make creates, renames and removes in the checkpoint durable (fsync of
   * the directory, or directories). */
  int (*sync_dir)(dcp_storage *st, dcp_plugin_err *err);
  /* Call fn(arg, name) for every file of the checkpoint (names as given to
   * file_open, in no particular order); stops early and returns fn's value
   * when it returns non-zero. */
  int (*list)(dcp_storage *st, int (*fn)(void *arg, const char *name), void *arg,
              dcp_plugin_err *err);
  /* The backend's counters. */
  void (*get_stats)(const dcp_storage *st, dcp_io_stats *out);

  /* -- since libdcp 0.3 (ABI 1, appended; optional, NULL or absent: the
   * core uses get_stats) -- */
  /* The backend's counters into a size-carrying struct (see dcp_io_stats2). */
  void (*get_stats2)(const dcp_storage *st, dcp_io_stats2 *out);
} dcp_storage_plugin;

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */

typedef struct dcp_comm dcp_comm; /* one communicator over every rank */

/* What a collective backend is opened on. Fields past struct_size are absent. */
typedef struct dcp_coll_config {
  uint32_t struct_size;
  int32_t rank;           /* this rank and the world, where the backend cannot */
  int32_t world_size;     /* learn them itself (file exchange) */
  void *native;           /* backend handle, e.g. an MPI_Comm* (NULL: world) */
  const char *rendezvous; /* a directory shared by all ranks (file exchange) */
  int64_t timeout_ms;     /* every blocking call fails with DCP_ETIMEDOUT once
                             it has waited this long; > 0 */
  const char *options;    /* plugin-specific "key=value,key=value", or NULL */
} dcp_coll_config;

/* Capability flags of a collective table. */
#define DCP_COLL_CAP_BULK 1u   /* bcast of large buffers is efficient (worth
                                  reading once and broadcasting) */
#define DCP_COLL_CAP_GROUPS 2u /* group_bcast is provided */

/* allreduce_i64 operations. */
#define DCP_REDUCE_MIN 1u
#define DCP_REDUCE_MAX 2u
#define DCP_REDUCE_SUM 3u

/* Every function below except rank/size/close is collective: all ranks of
 * the communicator call it in the same order with matching arguments. A
 * call that cannot complete by the timeout returns DCP_ETIMEDOUT; a peer
 * that is known to be gone gives DCP_EPEER.
 *
 * Caller memory: no plugin function touches caller memory after it
 * returns, whatever it returns. The buffers a call is given (send, recv,
 * buf, vals, lens, ranks) are read and written only until the call
 * returns, also when it returns DCP_ETIMEDOUT while a peer may still send
 * or receive later: the core frees them at once. A backend whose transfers
 * cannot be cancelled stages them through memory it owns and keeps that
 * memory until they complete (dcp-coll-mpi: bounce buffers), or destroys
 * its pending operations before it returns (dcp-coll-gloo).
 *
 * Close: after any failed call on the communicator it returns at once,
 * without waiting for a peer. On a healthy communicator a backend may wait
 * for its peers, bounded by the timeout (the file exchange's closing
 * round). dcp-coll-mpi finalises an MPI it initialised itself at the last
 * close, which waits for every process of the job as MPI_Finalize does,
 * only when no communicator of the process ever failed; after a failure MPI
 * stays initialised, and the program should exit (under mpirun that ends
 * the job) or call MPI_Abort: see docs/plugins.md. */
typedef struct dcp_coll_plugin {
  uint32_t abi_version;
  uint32_t struct_size;
  const char *name; /* "mpi", "file", "single", ... */
  uint64_t caps;    /* DCP_COLL_CAP_* */

  int (*open)(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err);
  /* Free the communicator (not collective; after the last collective).
   * After a failure it returns at once (see above). */
  void (*close)(dcp_comm *c);
  int32_t (*rank)(const dcp_comm *c);
  int32_t (*size)(const dcp_comm *c);

  int (*barrier)(dcp_comm *c, dcp_plugin_err *err);
  /* root's len bytes at buf reach every rank's buf. */
  int (*bcast)(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err);
  /* Every rank contributes len bytes; recv receives size*len bytes, rank i's
   * at i*len. */
  int (*allgather)(dcp_comm *c, const void *send, size_t len, void *recv,
                   dcp_plugin_err *err);
  /* Every rank sends len bytes to root; at root, recv receives them back to
   * back in rank order and lens[i] (size entries, known to root) gives rank
   * i's length. recv and lens are ignored on other ranks. */
  int (*gatherv)(dcp_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                 int32_t root, dcp_plugin_err *err);
  /* Root sends lens[i] bytes (back to back in send) to rank i; every rank
   * receives its len bytes into recv. send and lens matter at root only. */
  int (*scatterv)(dcp_comm *c, const void *send, const size_t *lens, void *recv, size_t len,
                  int32_t root, dcp_plugin_err *err);
  /* Element-wise reduction of n int64 values in place, result on every
   * rank. The runtime uses it to agree on success after each phase. */
  int (*allreduce_i64)(dcp_comm *c, int64_t *vals, size_t n, uint32_t op,
                       dcp_plugin_err *err);
  /* Broadcast within a group: ranks (n ascending global ranks, including
   * root) call it with the same arguments; others do not call it. NULL
   * unless caps has DCP_COLL_CAP_GROUPS. */
  int (*group_bcast)(dcp_comm *c, const int32_t *ranks, size_t n, void *buf, size_t len,
                     int32_t root, dcp_plugin_err *err);
  /* -- since libdcp 0.3 (ABI 1, appended; optional, NULL or absent: the
   * backend cannot tell hosts apart) -- */
  /* A nonzero id of this rank's host: equal for ranks on one host (one
   * network stack of one machine), different otherwise. Local and cheap
   * (not collective), callable any time between open and close. Read dedup
   * keeps a group's reader on the host of most of its members
   * (docs/planner.md). dcp-coll-mpi, -gloo and -file provide it. */
  uint64_t (*host_id)(const dcp_comm *c);
} dcp_coll_plugin;

/* ------------------------------------------------------------------------ */
/* Registration                                                             */
/* ------------------------------------------------------------------------ */

/* Register a table without a shared object (embedding, tests, fault
 * injection). table is a dcp_storage_plugin or dcp_coll_plugin of the given
 * kind; it must stay valid for the life of the process. A registered name
 * takes precedence over plugins found on disk; registering a name again
 * replaces the table. Checks as for loaded plugins.
 * Errors: DCP_EINVAL (NULL, unknown kind), DCP_EPLUGIN (wrong ABI version,
 * table too small, missing function, empty name), DCP_ENOMEM. */
DCP_API dcp_status dcp_plugin_register(uint32_t kind, const void *table);

#ifdef __cplusplus
}
#endif
#endif /* DCP_PLUGIN_H */
