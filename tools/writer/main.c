/* dcp-writer — the writer process of async saves (docs/async.md).
 *
 *   dcp-writer --fd N [--keep K --budget BYTES --linger MS --job JOB
 *                      --replicas R --jump J]
 *
 * Spawned by libdcp with one end of a socketpair as descriptor N. Reads
 * SAVE jobs (src/writer/proto.h), each with the staging pool's memfd
 * attached; for each it maps the pool read-only, builds a state whose
 * chunks point into the mapping and runs dcp_save through its own context
 * (its own collective: "single", "file", ...), then answers DONE with the
 * status and message. An OPEN (dcp_async_prepare) opens that context ahead
 * of the first job. It exits when the trainer's end closes and no job is
 * pending, so a job received before the trainer died is still finished and
 * committed. With --keep (the memory tier, docs/recovery.md) it keeps
 * this rank's data files of its last K persisted saves in memory, answers
 * a restarted trainer's requests for them, and outlives its trainer by up
 * to --linger ms (or until a STOP). Test hooks: DCP_WRITER_DELAY_MS sleeps
 * before each job; DCP_WRITER_FAULT=rebuild-once:R makes rank R's writer
 * find its first job's first chunk one byte longer than its box, so that
 * writer cannot rebuild the state and refuses that save. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "writer/proto.h"
#include "writer/session.h"
#include "writer/snapshot.h"

/* The value of option `name`, or NULL. */
static const char *arg_of(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return NULL;
}

static int parse_fd(int argc, char **argv) {
  const char *v = arg_of(argc, argv, "--fd");
  return v ? atoi(v) : -1;
}

/* The memory tier's options (off without --keep; no peers without
 * --replicas). */
static void parse_keep(int argc, char **argv, dcpi_snap_store *store) {
  const char *k = arg_of(argc, argv, "--keep"), *b = arg_of(argc, argv, "--budget");
  const char *l = arg_of(argc, argv, "--linger"), *r = arg_of(argc, argv, "--replicas");
  const char *j = arg_of(argc, argv, "--jump");
  dcpi_snap_store_init(store, k ? (uint32_t)strtoul(k, NULL, 10) : 0,
                       b ? strtoull(b, NULL, 10) : 0, l ? strtoll(l, NULL, 10) : 0,
                       arg_of(argc, argv, "--job"));
  store->replicas = r ? (uint32_t)strtoul(r, NULL, 10) : 0;
  store->jump = j ? (int32_t)strtol(j, NULL, 10) : 0;
}

static void test_delay(void) {
  const char *d = getenv("DCP_WRITER_DELAY_MS");
  long ms = d ? atol(d) : 0;
  if (ms <= 0) return;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* DCP_WRITER_FAULT (see the top): damage job as asked, once per process. */
static void test_fault(dcpi_wp_job *job) {
  static int done;
  const char *f = getenv("DCP_WRITER_FAULT");
  const char *prefix = "rebuild-once:";
  if (done || !f || strncmp(f, prefix, strlen(prefix)) || job->refused || !job->nchunks) return;
  if (atoi(f + strlen(prefix)) != job->coord.rank) return;
  done = 1;
  job->chunks[0].nbytes++;
}

/* Map the pool read-only, after checking it is as large as the job says. */
static dcp_status map_pool(int fd, uint64_t size, const uint8_t **base, dcpi_err *err) {
  struct stat sb;
  *base = NULL;
  if (fd < 0) return dcpi_fail(err, DCP_EINVAL, "dcp-writer: SAVE without a pool descriptor");
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < size)
    return dcpi_fail(err, DCP_ECORRUPT, "dcp-writer: pool smaller than the job's %llu bytes",
                     (unsigned long long)size);
  if (size == 0) return DCP_OK;
  void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED)
    return dcpi_fail(err, DCP_ENOMEM, "dcp-writer: mmap of the pool: %s", strerror(errno));
  *base = m;
  return DCP_OK;
}

/* Run one SAVE payload; the reply's status and message into err, the
 * job's path (malloc'd, NULL when undecodable) and rank into *path, *rank. */
static uint64_t run_job(dcpi_wsession *s, const uint8_t *p, size_t len, int pool_fd,
                        dcpi_err *err, char **path, int32_t *rank) {
  dcpi_wp_job job;
  const uint8_t *base = NULL;
  dcp_status rc = dcpi_wp_job_decode(p, len, &job, err);
  if (!rc && !job.refused) rc = map_pool(pool_fd, job.pool_size, &base, err); /* refused: none */
  if (!rc) {
    test_delay();
    test_fault(&job);
    dcpi_wsession_save(s, &job, base, err);
  }
  if (base) munmap((void *)base, (size_t)job.pool_size);
  uint64_t seq = job.seq;
  *path = rc ? NULL : strdup(job.path);
  *rank = job.coord.rank;
  dcpi_wp_job_free(&job);
  return seq;
}

static void reply(int sock, uint64_t seq, const dcpi_err *err, const dcp_ctx *ctx) {
  uint8_t *p;
  size_t len;
  dcpi_err ignored;
  dcp_stats stats = {.struct_size = sizeof stats};
  if (!ctx || dcp_ctx_stats(ctx, &stats)) stats = (dcp_stats){0};
  if (dcpi_wp_done_encode(seq, err->code, err->msg, &stats, &p, &len)) return;
  dcpi_wp_send(sock, DCPI_WP_DONE, p, len, -1, &ignored); /* trainer may be gone */
  free(p);
}

int main(int argc, char **argv) {
  int sock = parse_fd(argc, argv);
  if (sock < 0) {
    fprintf(stderr, "usage: dcp-writer --fd N (started by libdcp, not by hand)\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN); /* a dead trainer must not kill the writer */
  dcpi_wsession s;
  dcpi_wsession_init(&s);
  dcpi_snap_store store;
  parse_keep(argc, argv, &store);
  int rc = 0;
  for (;;) {
    uint16_t type;
    uint8_t *p;
    size_t len;
    int pool_fd;
    dcpi_err err;
    dcpi_err_clear(&err);
    dcp_status st = dcpi_wp_recv(sock, &type, &p, &len, &pool_fd, &err);
    if (st == DCP_ENOTFOUND) break; /* trainer closed: nothing pending */
    if (!st && type == DCPI_WP_PLAN && pool_fd < 0) {
      dcpi_plan_entry *e;
      st = dcpi_wp_plan_decode(p, len, &e, &err);
      free(p);
      if (!st) dcpi_wsession_take_plan(&s, e);
      if (!st) continue;
      fprintf(stderr, "dcp-writer: %s\n", err.msg);
      rc = 1;
      break;
    }
    if (!st && type == DCPI_WP_BYE && pool_fd < 0) {
      /* a clean shutdown: no restart will come for the snapshots */
      free(p);
      dcpi_snap_stop(&store);
      break;
    }
    if (!st && type == DCPI_WP_OPEN && pool_fd < 0) {
      /* dcp_async_prepare: open the context (and the collective) now; a
       * failure is left for the first SAVE to try again and report */
      dcpi_wp_coord c;
      if (!dcpi_wp_open_decode(p, len, &c, &err)) dcpi_wsession_open(&s, &c, &err);
      dcpi_wp_coord_free(&c);
      free(p);
      continue;
    }
    if (st || type != DCPI_WP_SAVE) {
      fprintf(stderr, "dcp-writer: %s\n", st ? err.msg : "unexpected message");
      free(p);
      if (pool_fd >= 0) close(pool_fd);
      rc = 1;
      break;
    }
    char *path = NULL;
    int32_t rank = 0;
    uint64_t seq = run_job(&s, p, len, pool_fd, &err, &path, &rank);
    free(p);
    if (pool_fd >= 0) close(pool_fd);
    dcpi_err ignored;
    dcpi_wsession_share_plans(&s, sock, &ignored); /* the trainer may be gone */
    reply(sock, seq, &err, s.ctx);
    /* after the DONE: the trainer does not wait for the copy */
    if (!err.code && path) dcpi_snap_keep(&store, s.ctx, path, rank);
    /* a failed collective is broken: reopen the context at the next job */
    if (!err.code && path && dcpi_snap_replicate(&store, s.ctx, path, rank))
      dcpi_wsession_free(&s);
    free(path);
  }
  dcpi_snap_linger(&store); /* the trainer is gone: a restart may come */
  dcpi_snap_store_free(&store);
  dcpi_wsession_end(&s);
  close(sock);
  return rc;
}
