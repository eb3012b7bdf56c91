/* memtier.c — the trainer's side of the memory tier (docs/recovery.md):
 * dcp_memtier_set / dcp_memtier_stop, the options the async writer is
 * spawned with, and the snapshot source dcp_load asks (runtime/
 * load_source.h): it finds this rank's writer on the host by job and rank
 * (writer/snapshot.h), asks it for the snapshot of the metadata being
 * loaded, and reads the memfd it gets back with pread (the kernel copies
 * from the direct map: no page table of the snapshot to build, no fault per
 * page, no mapping left in the trainer). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "async/async_int.h"
#include "base/sized.h"
#include "runtime/load_source.h"
#include "writer/proto.h"
#include "writer/snapshot.h"

#define ASK_TIMEOUT_MS 5000 /* a writer that does not answer in time is not used */

typedef struct memtier {
  dcpi_load_tier tier; /* first member: the slot holds a pointer to it */
  dcp_ctx *ctx;
  dcp_memtier_options o; /* o.job points at job */
  char *job;
} memtier;

/* A snapshot's memfd, as a load source. */
typedef struct memsrc {
  dcpi_load_source src; /* first member */
  int fd;
  dcpi_snap_reply r;   /* the files */
  _Atomic int *gone;   /* per file: rejected after a checksum mismatch */
} memsrc;

void dcp_memtier_options_init(dcp_memtier_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

static void tier_release(dcpi_ctx_ext *ext) {
  memtier *t = (memtier *)ext;
  free(t->job);
  free(t);
}

static memtier *tier_of(dcp_ctx *ctx) {
  return (memtier *)dcpi_ctx_ext_get(ctx, DCPI_CTX_TIER);
}

const dcp_memtier_options *dcpi_memtier_options_of(dcp_ctx *ctx) {
  memtier *t = tier_of(ctx);
  return t && t->o.keep ? &t->o : NULL;
}

/* ---- the source --------------------------------------------------------- */

/* Read exactly len bytes of the memfd at off into dst. */
static bool pread_all(int fd, uint8_t *dst, uint64_t len, uint64_t off) {
  while (len) {
    ssize_t n = pread(fd, dst, len, (off_t)off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    dst += n, off += (uint64_t)n, len -= (uint64_t)n;
  }
  return true;
}

static bool src_read(dcpi_load_source *self, const char *file, uint64_t off, uint64_t len,
                     uint8_t *dst) {
  memsrc *m = (memsrc *)self;
  for (size_t i = 0; i < m->r.nfiles; i++) {
    const dcpi_snap_file *f = &m->r.files[i];
    if (strcmp(f->name, file)) continue;
    if (atomic_load(&m->gone[i]) || off > f->length || len > f->length - off) return false;
    return !dst || pread_all(m->fd, dst, len, f->offset + off);
  }
  return false;
}

static void src_reject(dcpi_load_source *self, const char *file) {
  memsrc *m = (memsrc *)self;
  for (size_t i = 0; i < m->r.nfiles; i++)
    if (!strcmp(m->r.files[i].name, file)) atomic_store(&m->gone[i], 1);
}

static void src_close(dcpi_load_source *self) {
  memsrc *m = (memsrc *)self;
  close(m->fd);
  dcpi_snap_reply_free(&m->r);
  free((void *)m->gone);
  free(m);
}

/* A source over the memfd fd of reply r (both taken over on success). */
static memsrc *src_map(int fd, dcpi_snap_reply *r) {
  if (fd < 0) return NULL;
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < r->size) return NULL;
  memsrc *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->gone = calloc(r->nfiles ? r->nfiles : 1, sizeof *m->gone);
  if (!m->gone) {
    free(m);
    return NULL;
  }
  m->fd = fd;
  m->r = *r;
  memset(r, 0, sizeof *r);
  m->src.read = src_read;
  m->src.reject = src_reject;
  m->src.close = src_close;
  return m;
}

/* ---- asking the writer ---------------------------------------------------- */

dcpi_load_source *dcpi_memsrc_new(int fd, dcpi_snap_reply *r) {
  memsrc *m = src_map(fd, r);
  return m ? &m->src : NULL;
}

dcp_status dcpi_memtier_ask(dcp_ctx *ctx, const char *job, uint16_t type, const char *path,
                            int32_t origin, uint64_t meta_hash, dcpi_snap_reply *r, int *fd,
                            dcpi_err *err) {
  char name[128];
  int c;
  dcpi_snap_name(name, sizeof name, job, ctx->rank, getuid());
  dcp_status rc = dcpi_snap_connect(name, ASK_TIMEOUT_MS, &c, err);
  if (rc) return rc;
  dcpi_snap_req q = {.job = (char *)job, .path = (char *)path, .rank = ctx->rank,
                     .origin = origin, .meta_hash = meta_hash};
  uint8_t *p = NULL;
  size_t len;
  uint16_t got;
  rc = dcpi_snap_req_encode(&q, &p, &len) ? dcpi_fail(err, DCP_ENOMEM, "out of memory")
                                          : dcpi_wp_send(c, type, p, len, -1, err);
  free(p);
  p = NULL;
  if (!rc) rc = dcpi_wp_recv(c, &got, &p, &len, fd, err);
  if (!rc && got != DCPI_WP_SNAP) rc = dcpi_fail(err, DCP_ECORRUPT, "unexpected answer %u", got);
  if (!rc) rc = dcpi_snap_reply_decode(p, len, r, err);
  free(p);
  close(c);
  return rc;
}

uint32_t dcpi_memtier_get(dcp_ctx *ctx, const char *job, const char *path, int32_t origin,
                          uint64_t meta_hash, dcpi_snap_reply *r, int *fd) {
  dcpi_err err;
  *fd = -1;
  dcp_status rc = dcpi_memtier_ask(ctx, job, DCPI_WP_SNAP_GET, path, origin, meta_hash, r, fd,
                                   &err);
  if (rc) {
    if (*fd >= 0) close(*fd), *fd = -1;
    return rc == DCP_ENOTFOUND ? DCP_MEMTIER_NONE : DCP_MEMTIER_REFUSED;
  }
  /* the answer must come from this job's writer of this rank and user */
  bool ours = r->job && strcmp(r->job, job) == 0 && r->rank == ctx->rank &&
              r->uid == (uint32_t)getuid();
  uint32_t state = ours ? r->state : DCP_MEMTIER_REFUSED;
  if (state == DCP_MEMTIER_USED && (r->meta_hash != meta_hash || *fd < 0))
    state = DCP_MEMTIER_REFUSED;
  if (state != DCP_MEMTIER_USED) {
    dcpi_snap_reply_free(r);
    if (*fd >= 0) close(*fd), *fd = -1;
  }
  return state;
}

static void tier_open(dcpi_load_tier *self, dcpi_rt *rt, uint64_t meta_hash,
                      dcpi_load_source **out, uint32_t *state) {
  memtier *t = (memtier *)self;
  dcpi_snap_reply r;
  int fd;
  *out = NULL;
  if (!t->o.keep) return; /* *state stays DCP_MEMTIER_OFF */
  *state = dcpi_memtier_get(t->ctx, t->job, rt->path, t->ctx->rank, meta_hash, &r, &fd);
  if (*state == DCP_MEMTIER_USED && !(*out = dcpi_memsrc_new(fd, &r))) {
    *state = DCP_MEMTIER_NONE;
    close(fd);
    dcpi_snap_reply_free(&r);
  }
  if (t->o.replicas && t->ctx->world_size > 1) /* collective: every rank */
    dcpi_memtier_pull(rt, &t->o, meta_hash, out, state);
}

/* ---- the public calls ----------------------------------------------------- */

dcp_status dcp_memtier_set(dcp_ctx *ctx, const dcp_memtier_options *o) {
  if (!ctx) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  memtier *t = calloc(1, sizeof *t);
  if (!t) return dcpi_ctx_report(ctx, (dcpi_fail(&err, DCP_ENOMEM, "out of memory"), &err));
  dcp_memtier_options_init(&t->o);
  dcp_status rc = DCP_OK;
  if (!o || !dcpi_sized_merge(&t->o, sizeof t->o, o, DCPI_SIZE_THROUGH(dcp_memtier_options, job)))
    rc = dcpi_fail(&err, DCP_EINVAL, "dcp_memtier_set: NULL options or struct_size too small");
  else if (t->o.linger_ms < 0)
    rc = dcpi_fail(&err, DCP_EINVAL, "dcp_memtier_set: linger_ms %lld < 0",
                   (long long)t->o.linger_ms);
  const char *job = t->o.job ? t->o.job : getenv("DCP_JOB_ID");
  if (!rc && !(t->job = strdup(job ? job : "")))
    rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory");
  if (rc) {
    tier_release(&t->tier.ext);
    return dcpi_ctx_report(ctx, &err);
  }
  t->o.job = t->job;
  t->ctx = ctx;
  t->tier.ext.release = tier_release;
  t->tier.open = tier_open;
  /* a new setting replaces the old (not while a load asks it: set it
   * before loading, as any option) */
  dcpi_ctx_ext *old = dcpi_ctx_ext_detach(ctx, DCPI_CTX_TIER);
  if (old) old->release(old);
  dcpi_ctx_ext *held = dcpi_ctx_ext_attach(ctx, DCPI_CTX_TIER, &t->tier.ext);
  if (held != &t->tier.ext) tier_release(&t->tier.ext);
  return DCP_OK;
}

dcp_status dcp_memtier_stop(dcp_ctx *ctx) {
  if (!ctx) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  memtier *t = tier_of(ctx);
  if (!t) {
    dcpi_fail(&err, DCP_EINVAL, "dcp_memtier_stop: no memory tier set on this context");
    return dcpi_ctx_report(ctx, &err);
  }
  dcpi_snap_reply r;
  dcp_status rc = dcpi_memtier_ask(ctx, t->job, DCPI_WP_SNAP_STOP, NULL, ctx->rank, 0, &r, NULL,
                                   &err);
  if (rc == DCP_ENOTFOUND) return DCP_OK; /* nobody to stop */
  if (!rc) dcpi_snap_reply_free(&r);
  if (rc) dcpi_fail(&err, DCP_EIO, "dcp_memtier_stop: %s", err.msg);
  return rc ? dcpi_ctx_report(ctx, &err) : DCP_OK;
}
