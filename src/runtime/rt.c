/* rt.c — an operation's life cycle and its collective wrappers. Every
 * collective goes through here so the statistics count it and a plugin
 * error becomes a dcpi_err with the plugin's reason. */
#include "runtime/rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/plugin.h"

double dcpi_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dcpi_rt_begin(dcpi_rt *rt, dcp_ctx *ctx, const char *path) {
  memset(rt, 0, sizeof *rt);
  rt->ctx = ctx;
  rt->path = path;
  rt->t0 = dcpi_now();
  memset(&ctx->stats, 0, sizeof ctx->stats);
  ctx->stats.struct_size = sizeof ctx->stats;
  dcpi_err_clear(&rt->err);
}

dcp_status dcpi_rt_end(dcpi_rt *rt) {
  dcp_stats *s = &rt->ctx->stats;
  if (rt->st) {
    dcp_io_stats io;
    dcpi_storage_stats(rt->ctx->storage, rt->st, &io);
    s->bytes_written = io.bytes_written - rt->io0.bytes_written;
    s->write_ops = io.write_ops - rt->io0.write_ops;
    s->bytes_read = io.bytes_read - rt->io0.bytes_read;
    s->read_ops = io.read_ops - rt->io0.read_ops;
    s->sync_ops = io.sync_ops - rt->io0.sync_ops;
    s->meta_ops = io.meta_ops - rt->io0.meta_ops;
    rt->ctx->storage->close(rt->st);
    rt->st = NULL;
  }
  s->total_s = dcpi_now() - rt->t0;
  return dcpi_ctx_report(rt->ctx, &rt->err);
}

/* Turn a collective plugin's result into a status, counting the call. */
static dcp_status coll_done(dcpi_rt *rt, int rc, const dcp_plugin_err *perr, const char *op,
                            uint64_t bytes) {
  rt->ctx->stats.coll_ops++;
  rt->ctx->stats.coll_bytes += bytes;
  if (rc == DCP_OK) return DCP_OK;
  return dcpi_plugin_status(rc, perr, rt->ctx->coll->name, op, &rt->err);
}

dcp_status dcpi_rt_bcast(dcpi_rt *rt, void *buf, size_t len, int32_t root) {
  dcp_plugin_err perr = {{0}};
  int rc = rt->ctx->coll->bcast(rt->ctx->comm, buf, len, root, &perr);
  return coll_done(rt, rc, &perr, "bcast", len);
}

dcp_status dcpi_rt_allreduce(dcpi_rt *rt, int64_t *vals, size_t n, uint32_t op) {
  dcp_plugin_err perr = {{0}};
  int rc = rt->ctx->coll->allreduce_i64(rt->ctx->comm, vals, n, op, &perr);
  return coll_done(rt, rc, &perr, "allreduce", n * sizeof *vals);
}

dcp_status dcpi_rt_group_bcast(dcpi_rt *rt, const int32_t *ranks, size_t n, void *buf,
                               size_t len, int32_t root) {
  const dcp_coll_plugin *c = rt->ctx->coll;
  if (!(c->caps & DCP_COLL_CAP_GROUPS) || !c->group_bcast)
    return dcpi_fail(&rt->err, DCP_EINVAL, "collective '%s' has no group broadcast", c->name);
  dcp_plugin_err perr = {{0}};
  int rc = c->group_bcast(rt->ctx->comm, ranks, n, buf, len, root, &perr);
  return coll_done(rt, rc, &perr, "group_bcast", len);
}

dcp_status dcpi_rt_allgather(dcpi_rt *rt, const void *send, size_t len, void *recv) {
  dcp_plugin_err perr = {{0}};
  int rc = rt->ctx->coll->allgather(rt->ctx->comm, send, len, recv, &perr);
  return coll_done(rt, rc, &perr, "allgather", len * (size_t)rt->ctx->world_size);
}

/* The wire form of an agreement: who failed first, with what. */
typedef struct failure_msg {
  int32_t code;
  char msg[DCPI_ERR_MSG_MAX - 16];
} failure_msg;

dcp_status dcpi_rt_agree(dcpi_rt *rt, dcp_status local) {
  dcp_ctx *ctx = rt->ctx;
  int64_t first = local ? ctx->rank : INT64_MAX;
  dcp_plugin_err perr = {{0}};
  int rc = ctx->coll->allreduce_i64(ctx->comm, &first, 1, DCP_REDUCE_MIN, &perr);
  dcp_status s = coll_done(rt, rc, &perr, "allreduce", sizeof first);
  if (s) return s;
  if (first == INT64_MAX) return DCP_OK;
  failure_msg fm = {0};
  if (first == ctx->rank) {
    fm.code = local;
    const char *why = rt->err.msg[0] ? rt->err.msg : dcp_strerror(local);
    size_t n = strlen(why);
    if (n > sizeof fm.msg - 1) n = sizeof fm.msg - 1; /* long reasons are cut */
    memcpy(fm.msg, why, n);
  }
  if ((s = dcpi_rt_bcast(rt, &fm, sizeof fm, (int32_t)first))) return s;
  fm.msg[sizeof fm.msg - 1] = '\0';
  if (first != ctx->rank)
    dcpi_fail(&rt->err, (dcp_status)fm.code, "rank %lld: %s", (long long)first, fm.msg);
  return rt->err.code = (dcp_status)fm.code;
}

dcp_status dcpi_rt_agree_value(dcpi_rt *rt, dcp_status local, int64_t value, const char *what) {
  int64_t v[3] = {local ? rt->ctx->rank : INT64_MAX, value, -value};
  dcp_status rc = dcpi_rt_allreduce(rt, v, 3, DCP_REDUCE_MIN);
  if (rc) return rc;
  /* a rank's own failure first: it explains more than a value that a
   * refusing rank may not even have had (v is the same on every rank, so
   * every rank takes the same branch) */
  if (v[0] != INT64_MAX) return dcpi_rt_agree(rt, local);
  if (v[1] != -v[2]) return dcpi_fail(&rt->err, DCP_EINVAL, "the ranks passed different %s", what);
  return DCP_OK;
}

dcp_status dcpi_rt_gather_bytes(dcpi_rt *rt, const void *send, size_t len, int32_t root,
                                uint8_t **out, size_t **lens) {
  dcp_ctx *ctx = rt->ctx;
  size_t world = (size_t)ctx->world_size;
  uint64_t mine = len, *all = malloc(world * sizeof *all);
  *out = NULL;
  *lens = NULL;
  if (!all) return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory gathering sizes");
  dcp_status s = dcpi_rt_allgather(rt, &mine, sizeof mine, all);
  size_t total = 0, *l = NULL;
  uint8_t *buf = NULL;
  if (!s && ctx->rank == root) {
    l = malloc(world * sizeof *l);
    for (size_t i = 0; l && i < world; i++) total += (l[i] = (size_t)all[i]);
    buf = malloc(total ? total : 1);
    if (!l || !buf) s = dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory for %zu gathered bytes", total);
  }
  free(all);
  /* Every rank must enter the gather even after a local failure at root,
   * or the others would wait; root's failure then shows in the next
   * agreement. */
  if (s == DCP_ENOMEM) {
    free(l), free(buf);
    return s;
  }
  if (!s) {
    dcp_plugin_err perr = {{0}};
    int rc = ctx->coll->gatherv(ctx->comm, send, len, buf, l, root, &perr);
    s = coll_done(rt, rc, &perr, "gatherv", len + total);
  }
  if (s) {
    free(l), free(buf);
    return s;
  }
  *out = buf;
  *lens = l;
  return DCP_OK;
}

dcp_status dcpi_rt_scatter_bytes(dcpi_rt *rt, const uint8_t *const *bufs, const size_t *lens,
                                 int32_t root, uint8_t **out, size_t *out_len) {
  dcp_ctx *ctx = rt->ctx;
  size_t world = (size_t)ctx->world_size;
  uint64_t *sizes = malloc(world * sizeof *sizes), mine = 0;
  uint8_t *packed = NULL;
  size_t total = 0;
  dcp_status s = DCP_OK;
  *out = NULL;
  if (!sizes) return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory scattering");
  if (ctx->rank == root) {
    for (size_t i = 0; i < world; i++) total += (sizes[i] = lens[i]);
    if (!(packed = malloc(total ? total : 1))) s = DCP_ENOMEM;
    for (size_t i = 0, at = 0; packed && i < world; at += lens[i], i++)
      if (lens[i]) memcpy(packed + at, bufs[i], lens[i]);
  }
  /* sizes first (a scatter of fixed 8-byte values), then the payloads.
   * An allocation failure here leaves the peers to their deadline. */
  size_t *fixed = malloc(world * sizeof *fixed);
  if (!fixed) s = DCP_ENOMEM;
  for (size_t i = 0; fixed && i < world; i++) fixed[i] = sizeof(uint64_t);
  if (s) {
    free(sizes), free(packed), free(fixed);
    return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory scattering %zu bytes", total);
  }
  dcp_plugin_err perr = {{0}};
  int rc = ctx->coll->scatterv(ctx->comm, sizes, fixed, &mine, sizeof mine, root, &perr);
  s = coll_done(rt, rc, &perr, "scatterv", sizeof mine);
  size_t *plens = fixed;
  for (size_t i = 0; !s && i < world; i++) plens[i] = (size_t)sizes[i];
  uint8_t *buf = NULL;
  if (!s && !(buf = malloc(mine ? (size_t)mine : 1)))
    s = dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory for %llu bytes", (unsigned long long)mine);
  if (!s) {
    rc = ctx->coll->scatterv(ctx->comm, packed, plens, buf, (size_t)mine, root, &perr);
    s = coll_done(rt, rc, &perr, "scatterv", (size_t)mine + (ctx->rank == root ? total : 0));
  }
  free(sizes), free(packed), free(fixed);
  if (s) {
    free(buf);
    return s;
  }
  *out = buf;
  *out_len = (size_t)mine;
  return DCP_OK;
}
