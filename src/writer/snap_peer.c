/* snap_peer.c — peer replication of the memory tier (snapshot.h): the
 * placement (replica k of rank r on rank r + k*J), moving one snapshot
 * between two ranks over a collective's group broadcast, and the writers'
 * exchange after each kept save. The trainer's restore pulls with the same
 * transfer (async/memtier_peer.c). */
#define _GNU_SOURCE /* memfd_create */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/ctx.h"
#include "writer/snapshot_int.h"

#define PIECE ((uint64_t)64 << 20) /* bytes per broadcast */

int32_t dcpi_snap_peer(int32_t r, uint32_t k, int32_t j, int32_t w) {
  int64_t at = ((int64_t)r + (int64_t)k * j) % w;
  return (int32_t)(at < 0 ? at + w : at);
}

dcp_status dcpi_snap_jump(dcpi_rt *rt, int32_t j, int32_t *out) {
  dcp_ctx *ctx = rt->ctx;
  int32_t w = ctx->world_size;
  *out = 1;
  if (j > 0) {
    *out = j % w ? j : 1;
    return DCP_OK;
  }
  if (!DCP_HAS_FIELD(ctx->coll, dcp_coll_plugin, host_id) || !ctx->coll->host_id) return DCP_OK;
  uint64_t mine = ctx->coll->host_id(ctx->comm), *all = malloc((size_t)w * sizeof *all);
  if (!all) return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
  dcp_status rc = dcpi_rt_allgather(rt, &mine, sizeof mine, all);
  int32_t same = 0;
  for (int32_t i = 0; !rc && i < w; i++) same += all[i] == mine;
  free(all);
  if (!rc && same > 0 && same % w) *out = same;
  return rc;
}

/* Broadcast size bytes in pieces: from / into the mapping at base, or,
 * where the sender could not map its memfd (base NULL), zeros from a
 * bounce buffer (the receiver's block checksums refuse them). */
static dcp_status move_bytes(dcpi_rt *rt, const int32_t pair[2], uint8_t *base, uint64_t size,
                             int32_t root) {
  uint8_t *zeros = base ? NULL : calloc(1, (size_t)(size < PIECE ? size : PIECE) + 1);
  if (!base && !zeros) return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
  dcp_status rc = DCP_OK;
  for (uint64_t at = 0; !rc && at < size; at += PIECE) {
    uint64_t n = size - at < PIECE ? size - at : PIECE;
    rc = dcpi_rt_group_bcast(rt, pair, 2, base ? base + at : zeros, (size_t)n, root);
  }
  free(zeros);
  return rc;
}

/* The receiving side's memfd of size bytes, mapped (NULL: none). */
static uint8_t *make_target(uint64_t size, int *fd) {
  *fd = memfd_create("dcp-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  void *m = MAP_FAILED;
  if (*fd >= 0 && ftruncate(*fd, (off_t)size) == 0)
    m = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  if (m != MAP_FAILED) return m;
  if (*fd >= 0) close(*fd);
  *fd = -1;
  return NULL;
}

dcp_status dcpi_snap_transfer(dcpi_rt *rt, int32_t root, int32_t other,
                              const dcpi_snap_reply *mine, int fd, uint64_t limit,
                              dcpi_snap_reply *got, int *fd_out) {
  int32_t pair[2] = {root < other ? root : other, root < other ? other : root};
  bool sending = rt->ctx->rank == root;
  dcpi_snap_reply none = {.state = DCP_MEMTIER_NONE};
  uint8_t *table = NULL, *base = NULL;
  size_t tlen = 0;
  memset(got, 0, sizeof *got);
  *fd_out = -1;
  /* 1. the table (a reply with no files when root has nothing) */
  if (sending && dcpi_snap_reply_encode(mine && fd >= 0 ? mine : &none, &table, &tlen))
    tlen = 0; /* out of memory: the receiver takes it as nothing */
  uint64_t n = tlen;
  dcp_status rc = dcpi_rt_group_bcast(rt, pair, 2, &n, sizeof n, root);
  if (!rc && !sending && !(table = malloc(n ? (size_t)n : 1))) n = 0;
  if (!rc) rc = dcpi_rt_group_bcast(rt, pair, 2, table ? table : (uint8_t *)&n, (size_t)n, root);
  /* 2. the receiver says whether it takes it, and maps its target */
  uint64_t size = 0, take = 0;
  dcpi_err ignored;
  if (!rc && !sending && n && !dcpi_snap_reply_decode(table, (size_t)n, got, &ignored) &&
      got->state == DCP_MEMTIER_USED && got->size <= limit)
    take = got->size == 0 || (base = make_target(got->size, fd_out)) != NULL;
  if (!rc) rc = dcpi_rt_group_bcast(rt, pair, 2, &take, sizeof take, other);
  if (!rc && take && sending) {
    size = mine->size;
    base = size ? mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0) : NULL;
    if (base == MAP_FAILED) base = NULL;
  }
  if (!rc && take && !sending) size = got->size;
  /* 3. the bytes */
  if (!rc && take && size) rc = move_bytes(rt, pair, base, size, root);
  if (base) munmap(base, (size_t)size);
  free(table);
  if (!sending && (rc || !take)) {
    dcpi_snap_reply_free(got);
    if (*fd_out >= 0) close(*fd_out), *fd_out = -1;
  }
  return rc;
}

/* Whether a STOP came (then copies are passed on but not kept). */
static bool stopped(dcpi_snap_store *s) {
  pthread_mutex_lock(&s->mu);
  bool v = s->stopped;
  pthread_mutex_unlock(&s->mu);
  return v;
}

dcp_status dcpi_snap_replicate(dcpi_snap_store *s, dcp_ctx *ctx, const char *path,
                               int32_t rank) {
  int32_t w = ctx ? ctx->world_size : 1, j = 1;
  if (!s->keep || !s->replicas || w < 2 || !ctx->comm) return DCP_OK;
  dcpi_rt rt = {.ctx = ctx, .path = path};
  dcpi_err_clear(&rt.err);
  dcpi_snap_reply mine;
  int fd;
  bool have = dcpi_snap_lookup(s, rank, path, &mine, &fd);
  dcp_status rc = dcpi_snap_jump(&rt, s->jump, &j);
  /* one transfer per (replica, sender), in that order on every rank: the
   * smallest unfinished pair always has both its ranks waiting on it */
  for (uint32_t k = 1; !rc && k <= s->replicas; k++)
    for (int32_t src = 0; !rc && src < w; src++) {
      int32_t dst = dcpi_snap_peer(src, k, j, w);
      if (dst == src || (rank != src && rank != dst)) continue;
      dcpi_snap_reply got;
      int got_fd;
      rc = dcpi_snap_transfer(&rt, src, dst, have ? &mine : NULL, fd, s->budget, &got, &got_fd);
      if (!rc && got_fd >= 0 && !stopped(s)) dcpi_snap_adopt(s, src, path, got_fd, &got);
      else if (got_fd >= 0) close(got_fd), dcpi_snap_reply_free(&got);
    }
  if (rc)
    fprintf(stderr, "dcp-writer (rank %d): peer replication of %s stopped: %s\n", (int)rank,
            path, rt.err.msg);
  if (have) close(fd), dcpi_snap_reply_free(&mine);
  return rc;
}
