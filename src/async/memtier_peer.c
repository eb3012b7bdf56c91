/* memtier_peer.c — the peer tier of a restore (docs/recovery.md): a rank
 * whose own snapshot is gone (its host was lost) pulls the copy a peer's
 * writer holds, through the trainer's collective, before the load reads.
 * The writers put those copies there after each save (writer/snap_peer.c)
 * with the same placement: replica k of rank r on rank r + k*J. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "async/async_int.h"

/* The copies this rank's writer holds of the ranks it is a peer of:
 * flags[k] (k = 1..R) set when it holds origin r - k*J's, its table and
 * memfd in held[k], hfd[k]; flags[0]: this rank has its own snapshot. */
static void look_up_copies(dcpi_rt *rt, const dcp_memtier_options *o, uint64_t meta_hash,
                           int32_t j, int32_t *flags, dcpi_snap_reply *held, int *hfd) {
  dcp_ctx *ctx = rt->ctx;
  for (uint32_t k = 1; k <= o->replicas; k++) {
    int32_t origin = dcpi_snap_peer(ctx->rank, k, -j, ctx->world_size);
    hfd[k] = -1;
    memset(&held[k], 0, sizeof held[k]);
    flags[k] = origin != ctx->rank &&
               dcpi_memtier_get(ctx, o->job, rt->path, origin, meta_hash, &held[k], &hfd[k]) ==
                   DCP_MEMTIER_USED;
  }
}

/* The first replica k of origin that its peer holds (0: none), given every
 * rank's flags (per entries each). */
static uint32_t holder_of(const int32_t *all, size_t per, int32_t origin, uint32_t replicas,
                          int32_t j, int32_t w) {
  for (uint32_t k = 1; k <= replicas; k++) {
    int32_t h = dcpi_snap_peer(origin, k, j, w);
    if (h != origin && all[(size_t)h * per + k]) return k;
  }
  return 0;
}

void dcpi_memtier_pull(dcpi_rt *rt, const dcp_memtier_options *o, uint64_t meta_hash,
                       dcpi_load_source **out, uint32_t *state) {
  dcp_ctx *ctx = rt->ctx;
  int32_t w = ctx->world_size, me = ctx->rank, j = 1;
  size_t per = (size_t)o->replicas + 1;
  int32_t *flags = calloc(per, sizeof *flags), *all = calloc((size_t)w * per, sizeof *all);
  dcpi_snap_reply *held = calloc(per, sizeof *held);
  int *hfd = calloc(per, sizeof *hfd);
  /* an allocation that fails still takes part, with nothing to offer */
  dcp_status rc = dcpi_snap_jump(rt, o->peer_jump, &j);
  int32_t none[1] = {0};
  if (flags && held && hfd) {
    flags[0] = *out != NULL;
    look_up_copies(rt, o, meta_hash, j, flags, held, hfd);
  }
  if (!rc && all) rc = dcpi_rt_allgather(rt, flags ? flags : none, per * sizeof *flags, all);
  /* one transfer per rank without its own snapshot, in rank order (the
   * smallest unfinished one always has both its ranks waiting on it) */
  for (int32_t origin = 0; !rc && all && origin < w; origin++) {
    uint32_t k = all[(size_t)origin * per] ? 0 : holder_of(all, per, origin, o->replicas, j, w);
    int32_t h = k ? dcpi_snap_peer(origin, k, j, w) : -1;
    if (!k || (me != h && me != origin)) continue;
    dcpi_snap_reply got;
    int got_fd;
    bool sending = me == h && held;
    rc = dcpi_snap_transfer(rt, h, origin, sending ? &held[k] : NULL, sending ? hfd[k] : -1,
                            UINT64_MAX, &got, &got_fd);
    if (rc || got_fd < 0) continue;
    uint64_t size = got.size;
    dcpi_load_source *src = dcpi_memsrc_new(got_fd, &got);
    if (!src) {
      close(got_fd);
      dcpi_snap_reply_free(&got);
      continue;
    }
    *out = src;
    *state = DCP_MEMTIER_PEER;
    ctx->stats.peer_recv_bytes = size;
  }
  for (size_t k = 1; held && hfd && k < per; k++) {
    if (hfd[k] >= 0) close(hfd[k]);
    dcpi_snap_reply_free(&held[k]);
  }
  free(flags), free(all), free(held), free(hfd);
}
