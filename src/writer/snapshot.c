/* snapshot.c — the writer's snapshot store (snapshot.h): keeping a save's
 * data files in a memfd, the budget, the server thread that answers GET
 * and STOP, and lingering after the trainer is gone. */
#define _GNU_SOURCE /* memfd_create, F_ADD_SEALS */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/ctx.h"
#include "runtime/files.h"
#include "runtime/rt.h"
#include "writer/proto.h"
#include "writer/snapshot_int.h"

#define DEFAULT_LINGER_MS (10 * 60 * 1000)
#define READ_PIECE ((size_t)64 << 20)
#define TAKEOVER_MS 3000 /* how long a new writer waits for a lingering one to go */

struct dcpi_snap {
  char *path;
  int32_t origin; /* the rank whose files these are (a peer's copy: not us) */
  uint64_t meta_hash;
  int fd; /* the memfd: the files back to back */
  uint64_t size;
  dcpi_snap_file *files;
  size_t nfiles;
};

static void snap_free(dcpi_snap *p) {
  if (!p) return;
  for (size_t i = 0; i < p->nfiles; i++) free(p->files[i].name);
  free(p->files);
  if (p->fd >= 0) close(p->fd);
  free(p->path);
  free(p);
}

void dcpi_snap_store_init(dcpi_snap_store *s, uint32_t keep, uint64_t budget, int64_t linger_ms,
                          const char *job) {
  memset(s, 0, sizeof *s);
  s->keep = keep;
  long pages = sysconf(_SC_PHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
  s->budget = budget ? budget : (pages > 0 && pg > 0 ? (uint64_t)pages * (uint64_t)pg / 4 : 0);
  s->linger_ms = linger_ms > 0 ? linger_ms : DEFAULT_LINGER_MS;
  s->job = strdup(job ? job : "");
  s->rank = -1;
  s->listen_fd = -1;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
}

/* Drop every snapshot. Caller holds s->mu. */
static void drop_all(dcpi_snap_store *s) {
  for (size_t i = 0; i < s->nsnaps; i++) snap_free(s->snaps[i]);
  free(s->snaps);
  s->snaps = NULL;
  s->nsnaps = 0;
  s->bytes = 0;
}

/* ---- building a snapshot -------------------------------------------------- */

/* Read file `name` (length bytes) of the checkpoint into dst. */
static dcp_status read_back(dcpi_rt *rt, const char *name, uint8_t *dst, uint64_t length,
                            dcpi_err *err) {
  dcp_storage_file *f = NULL;
  dcp_status rc = dcpi_rt_file_open(rt, name, DCP_FILE_READ, &f, err);
  for (uint64_t at = 0; !rc && at < length; at += READ_PIECE) {
    size_t n = length - at < READ_PIECE ? (size_t)(length - at) : READ_PIECE;
    rc = dcpi_rt_file_read(rt, f, dst + at, n, at, err);
  }
  dcpi_err ignored;
  if (f) dcpi_rt_file_close(rt, f, &ignored);
  return rc;
}

/* The files of m written by rank (data-<rank>.<tag>.dcp) into p->files,
 * their offsets in the memfd and p->size. */
static dcp_status pick_files(dcpi_snap *p, const dcp_meta *m, int32_t rank, dcpi_err *err) {
  size_t n = dcp_meta_file_count(m);
  p->files = calloc(n ? n : 1, sizeof *p->files);
  if (!p->files) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    const char *name;
    uint64_t len = 0;
    dcpi_file_name parsed;
    if (dcp_meta_file(m, i, &name) || dcpi_name_parse(name, &parsed) != DCPI_FILE_DATA ||
        parsed.rank != rank || dcp_meta_file_length(m, i, &len))
      continue;
    dcpi_snap_file *f = &p->files[p->nfiles];
    if (!(f->name = strdup(name))) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
    f->offset = p->size;
    f->length = len;
    p->nfiles++;
    p->size += len;
  }
  return DCP_OK;
}

/* A memfd of p->size bytes holding p's files, read from storage. */
static dcp_status fill(dcpi_snap *p, dcpi_rt *rt, dcpi_err *err) {
  p->fd = memfd_create("dcp-snapshot", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (p->fd < 0) return dcpi_fail(err, DCP_ENOMEM, "memfd_create: %s", strerror(errno));
  if (p->size == 0) return DCP_OK;
  if (ftruncate(p->fd, (off_t)p->size) != 0)
    return dcpi_fail(err, DCP_ENOMEM, "ftruncate to %llu bytes: %s",
                     (unsigned long long)p->size, strerror(errno));
  uint8_t *m = mmap(NULL, (size_t)p->size, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (m == MAP_FAILED) return dcpi_fail(err, DCP_ENOMEM, "mmap: %s", strerror(errno));
  dcp_status rc = DCP_OK;
  for (size_t i = 0; !rc && i < p->nfiles; i++)
    rc = read_back(rt, p->files[i].name, m + p->files[i].offset, p->files[i].length, err);
  munmap(m, (size_t)p->size);
  /* a reader's mapping can never lose pages under it */
  fcntl(p->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  return rc;
}

/* The snapshot of this rank's part of the checkpoint at path, as its
 * committed .metadata now describes it. */
static dcp_status build(dcp_ctx *ctx, const char *path, int32_t rank, uint64_t budget,
                        dcpi_snap **out, dcpi_err *err) {
  dcpi_rt rt = {.ctx = ctx, .path = path};
  dcpi_err_clear(&rt.err);
  uint8_t *data = NULL;
  size_t len = 0;
  dcp_meta *m = NULL;
  dcpi_snap *p = calloc(1, sizeof *p);
  dcp_status rc = p && (p->path = strdup(path)) ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "no memory");
  if (p) p->fd = -1;
  if (!rc) rc = dcpi_rt_open_storage(&rt, 0) ? dcpi_fail(err, rt.err.code, "%s", rt.err.msg) : 0;
  if (!rc) rc = dcpi_rt_read_file(&rt, DCPI_METADATA_NAME, &data, &len, err);
  if (!rc && dcp_meta_open_memory(ctx, data, len, &m))
    rc = dcpi_fail(err, DCP_ECORRUPT, "its .metadata: %s", dcp_ctx_last_error(ctx));
  if (!rc) p->meta_hash = XXH3_64bits(data, len);
  if (!rc) rc = pick_files(p, m, rank, err);
  if (!rc && p->size > budget)
    rc = dcpi_fail(err, DCP_ENOMEM, "%llu bytes, over the budget of %llu",
                   (unsigned long long)p->size, (unsigned long long)budget);
  if (!rc) rc = fill(p, &rt, err);
  if (p) p->origin = rank;
  dcp_meta_free(m);
  free(data);
  if (rt.st) ctx->storage->close(rt.st);
  if (rc) snap_free(p), p = NULL;
  *out = p;
  return rc;
}

/* How many snapshots of origin s holds. Caller holds s->mu. */
static size_t count_of(const dcpi_snap_store *s, int32_t origin) {
  size_t n = 0;
  for (size_t i = 0; i < s->nsnaps; i++) n += s->snaps[i]->origin == origin;
  return n;
}

/* Drop snapshot i. Caller holds s->mu. */
static void drop_at(dcpi_snap_store *s, size_t i) {
  s->bytes -= s->snaps[i]->size;
  snap_free(s->snaps[i]);
  memmove(s->snaps + i, s->snaps + i + 1, (--s->nsnaps - i) * sizeof *s->snaps);
}

/* Add p as the newest; drop snapshots of the same origin and path, then
 * the oldest of p's origin while more than keep are held, then the oldest
 * of all while the budget is exceeded. Nothing once a STOP came (it may
 * come while p was being read). */
static void add(dcpi_snap_store *s, dcpi_snap *p) {
  pthread_mutex_lock(&s->mu);
  dcpi_snap **grown = s->stopped ? NULL : realloc(s->snaps, (s->nsnaps + 1) * sizeof *grown);
  if (!grown) {
    pthread_mutex_unlock(&s->mu);
    snap_free(p);
    return;
  }
  s->snaps = grown;
  for (size_t i = s->nsnaps; i-- > 0;)
    if (s->snaps[i]->origin == p->origin && strcmp(s->snaps[i]->path, p->path) == 0)
      drop_at(s, i);
  s->snaps[s->nsnaps++] = p;
  s->bytes += p->size;
  for (size_t i = 0; i < s->nsnaps && count_of(s, p->origin) > s->keep;)
    if (s->snaps[i]->origin == p->origin) drop_at(s, i);
    else i++;
  while (s->nsnaps && s->bytes > s->budget) drop_at(s, 0);
  pthread_mutex_unlock(&s->mu);
}

bool dcpi_snap_lookup(dcpi_snap_store *s, int32_t origin, const char *path,
                      dcpi_snap_reply *r, int *fd) {
  memset(r, 0, sizeof *r);
  *fd = -1;
  pthread_mutex_lock(&s->mu);
  dcpi_snap *p = NULL;
  for (size_t i = s->nsnaps; !p && i-- > 0;)
    if (s->snaps[i]->origin == origin && strcmp(s->snaps[i]->path, path) == 0) p = s->snaps[i];
  bool ok = p && (r->files = calloc(p->nfiles ? p->nfiles : 1, sizeof *r->files)) &&
            (*fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0)) >= 0;
  for (size_t i = 0; ok && i < p->nfiles; i++) {
    r->files[i] = p->files[i];
    ok = (r->files[i].name = strdup(p->files[i].name)) != NULL;
    r->nfiles += ok;
  }
  if (ok) {
    r->meta_hash = p->meta_hash;
    r->size = p->size;
    r->state = DCP_MEMTIER_USED;
  }
  pthread_mutex_unlock(&s->mu);
  if (!ok) {
    dcpi_snap_reply_free(r);
    if (*fd >= 0) close(*fd), *fd = -1;
  }
  return ok;
}

void dcpi_snap_adopt(dcpi_snap_store *s, int32_t origin, const char *path, int fd,
                     dcpi_snap_reply *r) {
  dcpi_snap *p = calloc(1, sizeof *p);
  if (!p || !(p->path = strdup(path))) {
    free(p);
    close(fd);
    dcpi_snap_reply_free(r);
    return;
  }
  p->origin = origin;
  p->meta_hash = r->meta_hash;
  p->fd = fd;
  p->size = r->size;
  p->files = r->files;
  p->nfiles = r->nfiles;
  r->files = NULL;
  r->nfiles = 0;
  dcpi_snap_reply_free(r);
  add(s, p);
}

/* ---- the server ------------------------------------------------------------ */

static void answer(int c, dcpi_snap_reply *r, int fd) {
  uint8_t *p;
  size_t len;
  dcpi_err ignored;
  if (dcpi_snap_reply_encode(r, &p, &len)) return;
  dcpi_wp_send(c, DCPI_WP_SNAP, p, len, fd, &ignored);
  free(p);
}

/* A GET: the snapshot with q's metadata hash (a copy of its memfd sent
 * along), or what else the store has of q's path. */
static void serve_get(dcpi_snap_store *s, int c, const dcpi_snap_req *q, dcpi_snap_reply *r) {
  int fd = -1;
  pthread_mutex_lock(&s->mu);
  r->state = DCP_MEMTIER_NONE;
  for (size_t i = s->nsnaps; i-- > 0;) {
    dcpi_snap *p = s->snaps[i];
    if (p->origin != q->origin) continue;
    if (p->meta_hash == q->meta_hash && (fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0)) >= 0) {
      *r = (dcpi_snap_reply){r->job, r->rank, r->uid, DCP_MEMTIER_USED, p->meta_hash, p->size,
                             p->files, p->nfiles};
      break;
    }
    if (q->path && strcmp(p->path, q->path) == 0) r->state = DCP_MEMTIER_STALE;
  }
  answer(c, r, fd); /* under the lock: r points into the snapshot */
  pthread_mutex_unlock(&s->mu);
  if (fd >= 0) close(fd);
}

void dcpi_snap_stop(dcpi_snap_store *s) {
  pthread_mutex_lock(&s->mu);
  s->stopped = true;
  drop_all(s);
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* One connection: one request, one answer. */
static void serve(dcpi_snap_store *s, int c) {
  uint16_t type;
  uint8_t *p = NULL;
  size_t len;
  dcpi_err err;
  dcpi_snap_req q;
  if (dcpi_wp_recv(c, &type, &p, &len, NULL, &err)) return;
  bool ok = (type == DCPI_WP_SNAP_GET || type == DCPI_WP_SNAP_STOP) &&
            !dcpi_snap_req_decode(p, len, &q, &err);
  free(p);
  if (!ok) return;
  dcpi_snap_reply r = {.job = s->job, .rank = s->rank, .uid = (uint32_t)getuid()};
  /* a request for another job or rank learns who answers, nothing else */
  bool mine = strcmp(q.job, s->job) == 0 && q.rank == s->rank;
  r.state = mine ? DCP_MEMTIER_NONE : DCP_MEMTIER_REFUSED;
  if (mine && type == DCPI_WP_SNAP_GET) {
    serve_get(s, c, &q, &r);
  } else {
    if (mine) dcpi_snap_stop(s); /* STOP */
    answer(c, &r, -1);
  }
  dcpi_snap_req_free(&q);
}

static void *server_main(void *arg) {
  dcpi_snap_store *s = arg;
  for (;;) {
    int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0 && (errno == EINTR || errno == ECONNABORTED)) continue;
    if (c < 0) break; /* shut down by dcpi_snap_store_free */
    struct ucred cred;
    socklen_t clen = sizeof cred;
    struct timeval tv = {2, 0}; /* a stuck client cannot hold the server */
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (!getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &clen) && cred.uid == getuid())
      serve(s, c);
    close(c);
  }
  return NULL;
}

/* Ask the writer holding name to stop (a lingering one of an earlier
 * trainer of this job and rank). */
static void stop_other(const char *name, const char *job, int32_t rank) {
  int c;
  dcpi_err err;
  if (dcpi_snap_connect(name, 2000, &c, &err)) return;
  uint8_t *p, *back = NULL;
  size_t len;
  uint16_t type;
  dcpi_snap_req q = {.job = (char *)job, .rank = rank};
  if (!dcpi_snap_req_encode(&q, &p, &len)) {
    if (!dcpi_wp_send(c, DCPI_WP_SNAP_STOP, p, len, -1, &err))
      dcpi_wp_recv(c, &type, &back, &len, NULL, &err);
    free(p);
    free(back);
  }
  close(c);
}

/* Bind the rendezvous of s->rank, taking it over from a lingering writer,
 * and start the server. */
static void start_server(dcpi_snap_store *s) {
  char name[128];
  dcpi_err err;
  dcpi_snap_name(name, sizeof name, s->job, s->rank, getuid());
  dcp_status rc = dcpi_snap_listen(name, &s->listen_fd, &err);
  for (int waited = 0; rc == DCP_EBUSY && waited < TAKEOVER_MS; waited += 50) {
    if (waited == 0) stop_other(name, s->job, s->rank);
    nanosleep(&(struct timespec){0, 50000000}, NULL);
    rc = dcpi_snap_listen(name, &s->listen_fd, &err);
  }
  if (rc) {
    fprintf(stderr, "dcp-writer: memory tier off: %s\n", err.msg);
    return;
  }
  s->server_started = pthread_create(&s->server, NULL, server_main, s) == 0;
  if (!s->server_started) close(s->listen_fd), s->listen_fd = -1;
}

void dcpi_snap_keep(dcpi_snap_store *s, dcp_ctx *ctx, const char *path, int32_t rank) {
  pthread_mutex_lock(&s->mu);
  bool stopped = s->stopped;
  pthread_mutex_unlock(&s->mu);
  if (!s->keep || !ctx || stopped) return;
  if (s->rank < 0) s->rank = rank;
  dcpi_snap *p = NULL;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (build(ctx, path, rank, s->budget, &p, &err)) {
    fprintf(stderr, "dcp-writer (rank %d): not kept in memory: %s: %s\n", (int)rank, path,
            err.msg);
    return;
  }
  add(s, p);
  if (s->listen_fd < 0) start_server(s);
}

void dcpi_snap_linger(dcpi_snap_store *s) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += s->linger_ms / 1000;
  until.tv_nsec += (s->linger_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  pthread_mutex_lock(&s->mu);
  while (s->nsnaps && !s->stopped && s->server_started &&
         pthread_cond_timedwait(&s->cv, &s->mu, &until) != ETIMEDOUT) {
  }
  pthread_mutex_unlock(&s->mu);
}

void dcpi_snap_store_free(dcpi_snap_store *s) {
  if (s->listen_fd >= 0) shutdown(s->listen_fd, SHUT_RDWR); /* accept returns */
  if (s->server_started) pthread_join(s->server, NULL);
  if (s->listen_fd >= 0) close(s->listen_fd);
  drop_all(s);
  free(s->job);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  memset(s, 0, sizeof *s);
  s->listen_fd = -1;
}
