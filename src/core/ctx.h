/* ctx.h — the context's internals, shared by the public wrappers and the
 * layers above core: identity, the collective it owns, the storage plugin it
 * opens per checkpoint, the last error and the last operation's statistics,
 * and the state higher layers attach to it (ext: the save plan cache, the
 * async writer), which the core holds as opaque pointers and frees through
 * the function each one carries (docs/layers.md). */
#ifndef DCP_CORE_CTX_H
#define DCP_CORE_CTX_H

#include <stdatomic.h>

#include "base/err.h"
#include "dcp_plugin.h"

#define DCPI_DEFAULT_TIMEOUT_MS 300000
#define DCPI_DEFAULT_LEASE_MS 30000
#define DCPI_LEASE_MS_MIN 50                  /* what a lease may last */
#define DCPI_LEASE_MS_MAX (24 * 3600 * 1000)

/* The head of a state a higher layer attaches to a context (its first
 * member): all the core knows of it. release frees the whole state; the
 * core calls it from dcp_ctx_free. */
typedef struct dcpi_ctx_ext dcpi_ctx_ext;
struct dcpi_ctx_ext {
  void (*release)(dcpi_ctx_ext *self);
};

/* The slots of ctx->ext, in the order dcp_ctx_free releases them. */
typedef enum dcpi_ctx_slot {
  DCPI_CTX_ASYNC, /* async/: the writer process, its join thread and staging
                     pool (first: the join thread adds to the plan cache) */
  DCPI_CTX_PLANS, /* runtime/plan_cache.c: the save plan cache */
  DCPI_CTX_TIER,  /* async/memtier.c: the memory tier's options and the
                     snapshot source dcp_load asks (runtime/load_source.h) */
  DCPI_CTX_NSLOTS
} dcpi_ctx_slot;

struct dcp_ctx {
  dcpi_err last; /* first member: the last error, written by dcpi_ctx_report
                    (base/err.c) from layers that do not see this struct */
  int32_t rank;
  int32_t world_size;
  int64_t timeout_ms;
  int64_t lease_ms; /* directory lease of a save (dcp_ctx_config.lease_ms) */
  const dcp_coll_plugin *coll; /* "single" by default; NULL for a detached
                                  rank (world_size > 1 without a collective) */
  dcp_comm *comm;
  const dcp_storage_plugin *storage;
  char *storage_options; /* owned copy, or NULL */
  char *plugin_path;     /* owned copy of the config's, or NULL */
  dcp_stats stats;       /* of the last save or load */
  dcp_progress_fn progress; /* conversions and verification; NULL: none */
  void *progress_arg;
  dcp_phase_progress_fn phase_progress; /* by phase (core/progress.h); NULL: none */
  void *phase_progress_arg;
  _Atomic(dcpi_ctx_ext *) ext[DCPI_CTX_NSLOTS]; /* NULL until attached */
};

/* The state attached to ctx in slot, or NULL. */
dcpi_ctx_ext *dcpi_ctx_ext_get(dcp_ctx *ctx, dcpi_ctx_slot slot);

/* Attach ext in slot unless the slot already holds a state (another thread
 * attached one first): returns what the slot holds after the call, ext or
 * that other state, in which case the caller releases its own ext. */
dcpi_ctx_ext *dcpi_ctx_ext_attach(dcp_ctx *ctx, dcpi_ctx_slot slot, dcpi_ctx_ext *ext);

/* Take the state out of slot (NULL when empty): the caller releases it. */
dcpi_ctx_ext *dcpi_ctx_ext_detach(dcp_ctx *ctx, dcpi_ctx_slot slot);

#endif
