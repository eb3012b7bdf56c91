/* coll_single.c — the built-in "single" collective: a world of one.
 *
 * Rank 0 of size 1, so every collective degenerates: a broadcast from the
 * root leaves the root's buffer as it is, gathers and scatters are one copy,
 * a reduction over one rank is the identity. It is compiled into the core
 * (dcpi_plugin_find returns it without a shared object), so a single-process
 * save or load needs no plugin on disk. Arguments are still checked as a
 * real collective would (root and group must name rank 0, lengths must
 * agree), so code tested on one rank does not pass by accident. */
#include <stdlib.h>
#include <string.h>

#include "core/plugin.h"

/* The communicator carries nothing; it exists so open/close pair up like
 * every other backend's (and ASan sees a leak when close is forgotten). */
struct dcp_comm {
  int32_t rank;
};

/* Open the world of one. Errors: DCP_EINVAL (NULL arguments; a config that
 * asks for a rank other than 0 or a world larger than one — world_size 0
 * means "not given"), DCP_ENOMEM. */
static int single_open(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err) {
  if (!cfg || !out) return dcp_plugin_fail(err, DCP_EINVAL, "NULL config or output");
  *out = NULL;
  if (DCP_HAS_FIELD(cfg, dcp_coll_config, world_size) && cfg->world_size > 1)
    return dcp_plugin_fail(err, DCP_EINVAL,
                           "the single collective serves a world of one rank; "
                           "use \"mpi\" or \"file\" for more");
  if (DCP_HAS_FIELD(cfg, dcp_coll_config, rank) && cfg->rank != 0)
    return dcp_plugin_fail(err, DCP_EINVAL, "rank must be 0");
  dcp_comm *c = calloc(1, sizeof *c);
  if (!c) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  *out = c;
  return DCP_OK;
}

/* Free the communicator (NULL allowed). */
static void single_close(dcp_comm *c) { free(c); }

/* Rank 0 of 1; -1 for a NULL communicator, which the core never passes. */
static int32_t single_rank(const dcp_comm *c) { return c ? 0 : -1; }

static int32_t single_size(const dcp_comm *c) { return c ? 1 : -1; }

/* Nobody to wait for. */
static int single_barrier(dcp_comm *c, dcp_plugin_err *err) {
  return c ? DCP_OK : dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
}

/* Common checks: a communicator and root 0. */
static int check_root(const dcp_comm *c, int32_t root, dcp_plugin_err *err) {
  if (!c) return dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
  if (root != 0) return dcp_plugin_fail(err, DCP_EINVAL, "root must be rank 0 in a world of one");
  return DCP_OK;
}

/* Copy len bytes (memmove: callers may pass the same buffer for both). */
static int copy(void *dst, const void *src, size_t len, dcp_plugin_err *err) {
  if (len == 0) return DCP_OK;
  if (!dst || !src) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (dst != src) memmove(dst, src, len);
  return DCP_OK;
}

/* The root's buffer already holds the root's bytes. */
static int single_bcast(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err) {
  (void)buf;
  (void)len;
  return check_root(c, root, err);
}

/* recv (size*len = len bytes) receives this rank's send. */
static int single_allgather(dcp_comm *c, const void *send, size_t len, void *recv,
                            dcp_plugin_err *err) {
  int rc = check_root(c, 0, err);
  return rc ? rc : copy(recv, send, len, err);
}

/* lens[0] is rank 0's length as the root expects it: it must be len. */
static int single_gatherv(dcp_comm *c, const void *send, size_t len, void *recv,
                          const size_t *lens, int32_t root, dcp_plugin_err *err) {
  int rc = check_root(c, root, err);
  if (rc) return rc;
  if (!lens || lens[0] != len) return dcp_plugin_fail(err, DCP_EINVAL, "lens[0] differs from len");
  return copy(recv, send, len, err);
}

/* Rank 0 receives its lens[0] = len bytes from the front of send. */
static int single_scatterv(dcp_comm *c, const void *send, const size_t *lens, void *recv,
                           size_t len, int32_t root, dcp_plugin_err *err) {
  int rc = check_root(c, root, err);
  if (rc) return rc;
  if (!lens || lens[0] != len) return dcp_plugin_fail(err, DCP_EINVAL, "lens[0] differs from len");
  return copy(recv, send, len, err);
}

/* min, max or sum over one rank is the value itself. */
static int single_allreduce_i64(dcp_comm *c, int64_t *vals, size_t n, uint32_t op,
                                dcp_plugin_err *err) {
  int rc = check_root(c, 0, err);
  if (rc) return rc;
  if (op != DCP_REDUCE_MIN && op != DCP_REDUCE_MAX && op != DCP_REDUCE_SUM)
    return dcp_plugin_fail(err, DCP_EINVAL, "unknown reduction");
  if (n && !vals) return dcp_plugin_fail(err, DCP_EINVAL, "NULL values");
  return DCP_OK;
}

/* The only possible group is {0}. */
static int single_group_bcast(dcp_comm *c, const int32_t *ranks, size_t n, void *buf,
                              size_t len, int32_t root, dcp_plugin_err *err) {
  int rc = check_root(c, root, err);
  if (rc) return rc;
  if (n != 1 || !ranks || ranks[0] != 0)
    return dcp_plugin_fail(err, DCP_EINVAL, "the only group in a world of one is {0}");
  return single_bcast(c, buf, len, root, err);
}

/* Validated like any plugin table by the loader tests (dcpi_plugin_check). */
static const dcp_coll_plugin single_table = {
    .abi_version = DCP_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(dcp_coll_plugin),
    .name = "single",
    .caps = DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS,
    .open = single_open,
    .close = single_close,
    .rank = single_rank,
    .size = single_size,
    .barrier = single_barrier,
    .bcast = single_bcast,
    .allgather = single_allgather,
    .gatherv = single_gatherv,
    .scatterv = single_scatterv,
    .allreduce_i64 = single_allreduce_i64,
    .group_bcast = single_group_bcast,
};

/* The table, for dcpi_plugin_find. */
const dcp_coll_plugin *dcpi_coll_single(void) { return &single_table; }
