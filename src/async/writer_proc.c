/* writer_proc.c — the writer process seen from the trainer: finding the
 * executable, spawning it (posix_spawn, never fork), the join thread that
 * reads its DONE messages, and reaping it. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "async/async_int.h"
#include "runtime/plan_cache.h"
#include "writer/proto.h"

extern char **environ;

#define WRITER_NAME "dcp-writer"
#define WRITER_FD 3 /* the socket's number in the writer */

void dcpi_lib_dir(char *buf, size_t cap) {
  Dl_info info;
  buf[0] = '\0';
  if (!dladdr((void *)&dcpi_lib_dir, &info) || !info.dli_fname || info.dli_fname[0] != '/')
    return;
  snprintf(buf, cap, "%s", info.dli_fname);
  char *slash = strrchr(buf, '/');
  if (slash) *slash = '\0';
}

/* Try dir/rel; on success the path is in buf. `tried` collects misses. */
static int try_path(char *buf, size_t cap, const char *dir, const char *rel, char *tried,
                    size_t tcap) {
  int n = snprintf(buf, cap, "%s/%s", dir, rel);
  if (n > 0 && (size_t)n < cap && access(buf, X_OK) == 0) return 1;
  size_t used = strlen(tried);
  if (used + 4 < tcap) snprintf(tried + used, tcap - used, "%s%s/%s", used ? ", " : "", dir, rel);
  return 0;
}

static int find_on_path(char *buf, size_t cap, char *tried, size_t tcap) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char *copy = strdup(path), *save = NULL;
  int found = 0;
  for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && !found;
       d = strtok_r(NULL, ":", &save))
    found = d[0] && try_path(buf, cap, d, WRITER_NAME, tried, tcap);
  free(copy);
  return found;
}

dcp_status dcpi_writer_find(char *buf, size_t cap, dcpi_err *err) {
  const char *env = getenv("DCP_WRITER");
  if (env && env[0]) {
    if (access(env, X_OK) == 0 && snprintf(buf, cap, "%s", env) < (int)cap) return DCP_OK;
    return dcpi_fail(err, DCP_ENOTFOUND, "DCP_WRITER=%s is not an executable file", env);
  }
  char lib[1024], tried[1024] = "";
  dcpi_lib_dir(lib, sizeof lib);
  static const char *const rel[] = {"../bin/" WRITER_NAME, "../libexec/" WRITER_NAME,
                                    "../libexec/dcp/" WRITER_NAME, WRITER_NAME};
  for (size_t i = 0; lib[0] && i < sizeof rel / sizeof rel[0]; i++)
    if (try_path(buf, cap, lib, rel[i], tried, sizeof tried)) return DCP_OK;
#ifdef DCP_WRITER_INSTALL_PATH
  if (access(DCP_WRITER_INSTALL_PATH, X_OK) == 0 &&
      snprintf(buf, cap, "%s", DCP_WRITER_INSTALL_PATH) < (int)cap)
    return DCP_OK;
#endif
  if (find_on_path(buf, cap, tried, sizeof tried)) return DCP_OK;
  return dcpi_fail(err, DCP_ENOTFOUND,
                   "the async writer " WRITER_NAME " was not found (set DCP_WRITER); tried %s",
                   tried[0] ? tried : "(nothing: no library directory, no PATH)");
}

/* Spawn attributes: own process group (a signal to the trainer's group
 * does not reach the writer), default dispositions, empty mask. */
static int spawn_attr(posix_spawnattr_t *a) {
  sigset_t def, none;
  sigemptyset(&none);
  sigemptyset(&def);
  sigaddset(&def, SIGPIPE);
  sigaddset(&def, SIGCHLD);
  sigaddset(&def, SIGINT);
  sigaddset(&def, SIGTERM);
  if (posix_spawnattr_init(a)) return -1;
  posix_spawnattr_setpgroup(a, 0);
  posix_spawnattr_setsigdefault(a, &def);
  posix_spawnattr_setsigmask(a, &none);
  return posix_spawnattr_setflags(
      a, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
}

static dcp_status spawn(dcpi_async_writer *w, const char *exe, int child_end, dcpi_err *err) {
  /* child_end is >= 10 and CLOEXEC: dup2 to WRITER_FD clears the flag on
   * the copy only, and the two numbers never coincide. */
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  if (posix_spawn_file_actions_init(&fa))
    return dcpi_fail(err, DCP_ENOMEM, "posix_spawn_file_actions_init failed");
  posix_spawn_file_actions_adddup2(&fa, child_end, WRITER_FD);
  int rc = spawn_attr(&attr);
  char fdarg[16], keep[16], budget[32], linger[32], reps[16], jump[16];
  snprintf(fdarg, sizeof fdarg, "%d", WRITER_FD);
  char *argv[16] = {(char *)exe, "--fd", fdarg, NULL};
  const dcp_memtier_options *mt = dcpi_memtier_options_of(w->ctx);
  if (mt) { /* keep mode: docs/recovery.md */
    snprintf(keep, sizeof keep, "%u", (unsigned)mt->keep);
    snprintf(budget, sizeof budget, "%llu", (unsigned long long)mt->budget_bytes);
    snprintf(linger, sizeof linger, "%lld", (long long)mt->linger_ms);
    snprintf(reps, sizeof reps, "%u", (unsigned)mt->replicas);
    snprintf(jump, sizeof jump, "%d", (int)mt->peer_jump);
    char *more[] = {"--keep", keep, "--budget", budget, "--linger", linger, "--job",
                    (char *)mt->job, "--replicas", reps, "--jump", jump, NULL};
    memcpy(argv + 3, more, sizeof more);
  }
  w->keep = mt != NULL;
  if (!rc) rc = posix_spawn(&w->pid, exe, &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc) {
    w->pid = 0;
    return dcpi_fail(err, DCP_EIO, "posix_spawn %s: %s", exe, strerror(rc));
  }
  return DCP_OK;
}

/* Finish the pending handle (if any, and if it is job seq or seq is 0)
 * with st/msg. Caller holds w->mu. */
static void finish_pending(dcpi_async_writer *w, uint64_t seq, dcp_status rc, const char *msg,
                           const dcp_stats *stats) {
  struct dcp_async *h = w->pending;
  if (!h || (seq && h->seq != seq)) return;
  h->status = rc;
  if (stats) h->stats = *stats;
  snprintf(h->msg, sizeof h->msg, "%s", msg);
  h->done = 1;
  w->pending = NULL;
  pthread_cond_broadcast(&w->cv);
}

/* A PLAN frame: the writer's plan cache entry joins the context's cache
 * (this is the join thread merging it), for the trainer's own saves. */
static int take_plan(dcpi_async_writer *w, const uint8_t *p, size_t len, dcpi_err *err) {
  dcpi_plan_entry *e;
  if (dcpi_wp_plan_decode(p, len, &e, err)) return 1;
  dcpi_plan_cache_put(dcpi_ctx_plan_cache(w->ctx), e);
  return 0;
}

/* One DONE or PLAN frame: post its result / keep its plan. Returns nonzero
 * to stop reading. */
static int handle_frame(dcpi_async_writer *w, uint16_t type, const uint8_t *p, size_t len,
                        dcpi_err *err) {
  uint64_t seq;
  dcp_status rc;
  char msg[DCPI_ERR_MSG_MAX];
  if (type == DCPI_WP_PLAN) return take_plan(w, p, len, err);
  if (type != DCPI_WP_DONE) return dcpi_fail(err, DCP_ECORRUPT, "unexpected message %u", type);
  dcp_stats stats;
  if (dcpi_wp_done_decode(p, len, &seq, &rc, msg, sizeof msg, &stats, err)) return 1;
  pthread_mutex_lock(&w->mu);
  finish_pending(w, seq, rc, msg, &stats);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

static void *join_main(void *arg) {
  dcpi_async_writer *w = arg;
  dcpi_err err;
  for (;;) {
    uint16_t type;
    uint8_t *p;
    size_t len;
    dcpi_err_clear(&err);
    if (dcpi_wp_recv(w->sock, &type, &p, &len, NULL, &err)) break;
    int stop = handle_frame(w, type, p, len, &err);
    free(p);
    if (stop) break;
  }
  char msg[DCPI_ERR_MSG_MAX];
  pthread_mutex_lock(&w->mu);
  if (w->aborted)
    snprintf(msg, sizeof msg, "the async save was aborted (dcp_async_abort killed the writer, "
             "pid %d): nothing was committed", (int)w->pid);
  else
    snprintf(msg, sizeof msg, "the async writer (pid %d) ended before finishing the save: %.300s",
             (int)w->pid, err.msg);
  w->alive = 0;
  finish_pending(w, 0, DCP_EPEER, msg, NULL);
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

static dcp_status make_socket(int *mine, int *child, dcpi_err *err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return dcpi_fail(err, DCP_EIO, "socketpair: %s", strerror(errno));
  *mine = sv[0];
  *child = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  close(sv[1]);
  if (*child < 0) {
    close(sv[0]);
    return dcpi_fail(err, DCP_EIO, "fcntl(F_DUPFD_CLOEXEC): %s", strerror(errno));
  }
  return DCP_OK;
}

dcp_status dcpi_writer_start(dcpi_async_writer *w, dcpi_err *err) {
  char exe[1024];
  int child = -1;
  dcp_status rc = dcpi_writer_find(exe, sizeof exe, err);
  if (!rc) rc = make_socket(&w->sock, &child, err);
  if (rc) return rc;
  rc = spawn(w, exe, child, err);
  close(child);
  /* alive is set before the join thread exists: it clears it (under the
   * lock) when the stream ends, however soon that is. */
  pthread_mutex_lock(&w->mu);
  w->alive = !rc;
  pthread_mutex_unlock(&w->mu);
  if (!rc && pthread_create(&w->join, NULL, join_main, w) != 0)
    rc = dcpi_fail(err, DCP_EIO, "cannot start the async join thread");
  else if (!rc)
    w->join_started = 1;
  if (rc) {
    dcpi_writer_stop(w);
    return rc;
  }
  w->spawns++;
  dcpi_plan_cache_unshare_all(dcpi_ctx_plan_cache(w->ctx)); /* a new writer knows no plan */
  return DCP_OK;
}

void dcpi_writer_stop(dcpi_async_writer *w) {
  if (w->sock >= 0) shutdown(w->sock, SHUT_WR); /* EOF: the writer exits */
  if (w->join_started) pthread_join(w->join, NULL);
  w->join_started = 0;
  if (w->sock >= 0) close(w->sock);
  w->sock = -1;
  while (w->pid > 0 && waitpid(w->pid, NULL, 0) < 0 && errno == EINTR) {
  }
  pthread_mutex_lock(&w->mu);
  w->pid = 0;
  w->alive = 0;
  w->aborted = 0;
  pthread_mutex_unlock(&w->mu);
}
