/* async_int.h — trainer-side internals of async saves: the per-context
 * writer state (writer process, socket, join thread, staging pool), attached
 * to the context (core/ctx.h: ext[DCPI_CTX_ASYNC]), which frees it in
 * dcp_ctx_free through ext.release. */
#ifndef DCP_ASYNC_INT_H
#define DCP_ASYNC_INT_H

#include <pthread.h>
#include <sys/types.h>

#include "async/pool.h"
#include "core/ctx.h"
#include "runtime/load_source.h"
#include "writer/snapshot.h"

typedef struct dcpi_async_writer {
  dcpi_ctx_ext ext; /* first member: the context holds a pointer to it */
  dcp_ctx *ctx;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* on CLOCK_MONOTONIC (dcp_async_wait_for) */
  pid_t pid;        /* writer process, 0 when none */
  int sock;         /* our end of the socketpair, -1 when none */
  pthread_t join;   /* the only reader of sock */
  int join_started;
  int alive;        /* 0 once the join thread saw the stream end */
  int aborted;      /* dcp_async_abort killed the writer */
  int staging;      /* a dcp_async_save (or its staging thread) or a
                       dcp_async_prepare holds the pool */
  int background;   /* dcp_async_set_staging: stage on a thread */
  pthread_t stager; /* the last background staging thread */
  int stager_joinable;
  dcpi_pool pool;
  dcp_async_copy_fn copy;
  dcp_async_copy_checked_fn copy_checked; /* at most one of the two is set */
  void *copy_arg;
  char *coll, *coll_options, *rendezvous; /* writers' coordination */
  struct dcp_async *pending; /* submitted, no DONE yet */
  uint64_t seq;              /* last job submitted */
  uint64_t spawns, saves, prepares;
  int keep;         /* the writer was spawned in keep mode (memory tier) */
  unsigned refs;    /* the context's (until released) + one per live handle */
} dcpi_async_writer;

struct dcp_async {
  dcpi_async_writer *w;
  uint64_t seq;
  int staged;              /* staging over: the caller's buffers are free */
  dcp_status stage_status; /* DCP_OK: the job reached the writer */
  int done;                /* the writer's outcome (or its death) is in */
  dcp_status status;
  char msg[DCPI_ERR_MSG_MAX];
  dcp_stats stats; /* the writer's, of this save (zero if it died) */
};

/* ctx's writer state, created on first use (NULL: out of memory). */
dcpi_async_writer *dcpi_async_writer_of(dcp_ctx *ctx);

/* A new handle of w's takes a reference to it (dropped by dcp_async_free),
 * so that the handle outlives the context's release of w. */
void dcpi_async_handle_ref(dcpi_async_writer *w);

/* Find the dcp-writer executable (DCP_WRITER, next to libdcp, PATH) into
 * buf. Errors: DCP_ENOTFOUND naming the places tried. */
dcp_status dcpi_writer_find(char *buf, size_t cap, dcpi_err *err);

/* Spawn the writer with posix_spawn, connected by a socketpair, and start
 * the join thread. Errors: DCP_ENOTFOUND, DCP_EIO. */
dcp_status dcpi_writer_start(dcpi_async_writer *w, dcpi_err *err);

/* Close our end, join the join thread and reap the process (no zombie;
 * tolerates SIGCHLD set to SIG_IGN). */
void dcpi_writer_stop(dcpi_async_writer *w);

/* Wait until nothing is staging or pending, then join a finished
 * background staging thread. Caller holds w->mu (released meanwhile). */
void dcpi_async_wait_idle_locked(dcpi_async_writer *w);

/* The directory of the loaded libdcp (or of the program that embeds it)
 * into buf, "" when unknown. */
void dcpi_lib_dir(char *buf, size_t cap);

/* ctx's memory tier options when keep mode is on (dcp_memtier_set), else
 * NULL (async/memtier.c). */
const dcp_memtier_options *dcpi_memtier_options_of(dcp_ctx *ctx);

/* ---- the memory tier's trainer side (memtier.c, memtier_peer.c) ---- */

/* Send one request of type (DCPI_WP_SNAP_GET / _STOP) for origin's
 * snapshot to this rank's writer of job and take its answer (and a memfd
 * when fd is non-NULL and one came). Errors: DCP_ENOTFOUND (no writer),
 * DCP_EPEER (another user's), DCP_ECORRUPT, DCP_EIO, DCP_ETIMEDOUT. */
dcp_status dcpi_memtier_ask(dcp_ctx *ctx, const char *job, uint16_t type, const char *path,
                            int32_t origin, uint64_t meta_hash, dcpi_snap_reply *r, int *fd,
                            dcpi_err *err);

/* GET origin's snapshot of the metadata meta_hash: DCP_MEMTIER_USED with
 * *r and *fd (the caller's) when this job's writer of this rank holds it,
 * else what else happened (*fd -1, *r empty). */
uint32_t dcpi_memtier_get(dcp_ctx *ctx, const char *job, const char *path, int32_t origin,
                          uint64_t meta_hash, dcpi_snap_reply *r, int *fd);

/* A load source over memfd fd holding the files of r (both taken over;
 * NULL on failure, when nothing is taken). */
dcpi_load_source *dcpi_memsrc_new(int fd, dcpi_snap_reply *r);

/* The peer tier (collective over the load's ranks, after each looked for
 * its own snapshot: *out non-NULL when it has one): ranks with none pull
 * a copy from a peer whose local writer holds one (placement o's options),
 * which becomes *out with *state DCP_MEMTIER_PEER; the bytes pulled go to
 * the context's peer_recv_bytes. Never fails the load (a failure of the
 * collective itself stays on rt for the load to report). */
void dcpi_memtier_pull(dcpi_rt *rt, const dcp_memtier_options *o, uint64_t meta_hash,
                       dcpi_load_source **out, uint32_t *state);

/* Test accessors: the writer's pid (0: none), pool memfds created, pool
 * growths, writer spawns, async saves submitted, prepares made, the
 * pool's size. */
pid_t dcpi_async_writer_pid(dcp_ctx *ctx);
uint64_t dcpi_async_pool_creations(dcp_ctx *ctx);
uint64_t dcpi_async_pool_growths(dcp_ctx *ctx);
uint64_t dcpi_async_spawns(dcp_ctx *ctx);
uint64_t dcpi_async_saves(dcp_ctx *ctx);
uint64_t dcpi_async_prepares(dcp_ctx *ctx);
uint64_t dcpi_async_pool_size(dcp_ctx *ctx);

#endif
