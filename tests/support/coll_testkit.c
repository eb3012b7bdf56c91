/* See coll_testkit.h. */
#include "testutil.h"

#include "coll_testkit.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const dcp_coll_plugin *ctk_P;
int ctk_rank = -1;
char ctk_dir[PATH_MAX];

const size_t CTK_SIZES[3] = {0, 1, MIB};

const dcp_coll_plugin *ctk_load_plugin(const char *name, int optional) {
  char exe[PATH_MAX], path[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return NULL;
  *slash = '\0';
  snprintf(path, sizeof path, "%s/../lib/dcp/dcp-coll-%s.so", exe, name);
  if (optional && access(path, F_OK) != 0) {
    fprintf(stderr, "%s not built: skipping\n", path);
    return NULL;
  }
  return ctk_load_path(path);
}

const dcp_coll_plugin *ctk_load_path(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return NULL;
  }
  dcp_plugin_entry_fn entry = (dcp_plugin_entry_fn)dlsym(h, DCP_PLUGIN_ENTRY_SYMBOL);
  return entry ? entry(DCP_PLUGIN_COLL) : NULL;
}

void ctk_sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

double ctk_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void ctk_fill(unsigned char *p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++) p[i] = (unsigned char)(seed * 131u + i * 7u + (i >> 9));
}

int ctk_matches(const unsigned char *p, size_t len, unsigned seed) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != (unsigned char)(seed * 131u + i * 7u + (i >> 9))) return 0;
  return 1;
}

int ctk_count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

void ctk_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  char path[PATH_MAX + 300];
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
      ctk_remove_dir(path);
    else
      unlink(path);
  }
  if (d) closedir(d);
  rmdir(dir);
}

void ctk_fresh_dir(const char *prefix) {
  snprintf(ctk_dir, sizeof ctk_dir, "/tmp/%s-XXXXXX", prefix);
  assert_non_null(mkdtemp(ctk_dir));
}

int ctk_open_comm(int rank, int world, int64_t timeout_ms, const char *opts, dcp_comm **c,
                  dcp_plugin_err *err) {
  dcp_coll_config cfg = {.struct_size = sizeof cfg, .rank = rank, .world_size = world,
                         .rendezvous = ctk_dir, .timeout_ms = timeout_ms, .options = opts};
  return ctk_P->open(&cfg, c, err);
}

int ctk_run_ranks(int world, ctk_scenario_fn fn, void *arg) {
  pid_t pids[16];
  fflush(NULL);
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      ctk_rank = r;
      alarm(60);
      _exit(fn(r, world, arg));
    }
    if (pids[r] < 0) return world;
  }
  int failed = 0;
  for (int r = 0; r < world; r++) {
    int st = 0;
    if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "rank %d of %d failed (status 0x%x)\n", r, world, st);
      failed++;
    }
  }
  return failed;
}

int ctk_check_allgather(dcp_comm *c, int rank, int world) {
  dcp_plugin_err err = {{0}};
  for (int s = 0; s < 3; s++) {
    size_t len = CTK_SIZES[s];
    unsigned char *send = malloc(len + 1), *recv = malloc(len * (size_t)world + 1);
    CHECK(send && recv);
    ctk_fill(send, len, (unsigned)(100 + rank));
    CHECK_RC(ctk_P->allgather(c, send, len, recv, &err), DCP_OK);
    for (int r = 0; r < world; r++)
      CHECK(ctk_matches(recv + (size_t)r * len, len, (unsigned)(100 + r)));
    free(send);
    free(recv);
  }
  return 0;
}

int ctk_check_allreduce(dcp_comm *c, int rank, int world, size_t many_n) {
  dcp_plugin_err err = {{0}};
  int64_t v[3] = {rank, -rank, (int64_t)rank * rank}, expect_sum = 0;
  for (int r = 0; r < world; r++) expect_sum += (int64_t)r * r;
  CHECK_RC(ctk_P->allreduce_i64(c, v, 3, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK(v[0] == (int64_t)world * (world - 1) / 2 && v[1] == -v[0] && v[2] == expect_sum);
  int64_t m[2] = {rank + 5, INT64_MIN + rank};
  CHECK_RC(ctk_P->allreduce_i64(c, m, 2, DCP_REDUCE_MIN, &err), DCP_OK);
  CHECK(m[0] == 5 && m[1] == INT64_MIN);
  int64_t x[2] = {rank + 5, INT64_MIN + rank};
  CHECK_RC(ctk_P->allreduce_i64(c, x, 2, DCP_REDUCE_MAX, &err), DCP_OK);
  CHECK(x[0] == world + 4 && x[1] == INT64_MIN + world - 1);
  if (many_n > 0) { /* many values (e.g. more than one segment of gloo's ring) */
    int64_t *many = malloc(many_n * sizeof *many);
    CHECK(many);
    for (size_t i = 0; i < many_n; i++) many[i] = (int64_t)i * (rank + 1);
    CHECK_RC(ctk_P->allreduce_i64(c, many, many_n, DCP_REDUCE_SUM, &err), DCP_OK);
    for (size_t i = 0; i < many_n; i++) CHECK(many[i] == (int64_t)i * world * (world + 1) / 2);
    free(many);
  }
  CHECK_RC(ctk_P->allreduce_i64(c, NULL, 0, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK_RC(ctk_P->allreduce_i64(c, x, 1, 99, &err), DCP_EINVAL);
  return 0;
}

/* A peer that dies under a point-to-point op (coll_testkit.h). */
int ctk_scenario_exits_p2p(int rank, int world, void *arg) {
  const ctk_p2p_case *k = arg;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, k->timeout_ms, NULL, &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  int last = world - 1;
  if (rank == last) { /* gone without close, once the others left the barrier */
    ctk_sleep_ms(100);
    _exit(0);
  }
  unsigned char buf[64] = {0};
  int32_t all[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  double t0 = ctk_now_ms();
  int rc = k->op == 0   ? ctk_P->gatherv(c, buf, 8, NULL, NULL, last, &err)
           : k->op == 1 ? ctk_P->scatterv(c, NULL, NULL, buf, 8, last, &err)
           : k->op == 2 ? ctk_P->group_bcast(c, all, (size_t)world, buf, 8, last, &err)
                        : ctk_P->group_bcast(c, all, (size_t)world, buf, 8, 0, &err);
  int needs_dead = k->op != 0 && k->op != 3; /* receives from it */
  if (rc == DCP_OK && !needs_dead) rc = ctk_P->barrier(c, &err);
  double el = ctk_now_ms() - t0;
  if (getenv("DCP_TEST_VERBOSE"))
    fprintf(stderr, "rank %d op %d: %d after %.0f ms: %s\n", rank, k->op, rc, el, err.msg);
  CHECK(rc == DCP_EPEER || rc == DCP_ETIMEDOUT, "op %d: %d (%s)", k->op, rc, err.msg);
  CHECK(el < (double)k->timeout_ms + 2000, "op %d: %.0f ms", k->op, el);
  CHECK(!k->want || strstr(err.msg, k->want), "op %d: \"%s\" lacks \"%s\"", k->op, err.msg,
        k->want);
  ctk_P->close(c);
  return 0;
}

/* A stale session of an earlier job must not be taken (coll_testkit.h). */
int ctk_scenario_stale(int rank, int world, void *arg) {
  int late_root = *(const int *)arg;
  if ((rank == 0) == late_root) ctk_sleep_ms(300);
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, world, 5000, NULL, &c, &err), DCP_OK);
  CHECK_RC(ctk_P->barrier(c, &err), DCP_OK);
  int64_t v = rank;
  CHECK_RC(ctk_P->allreduce_i64(c, &v, 1, DCP_REDUCE_SUM, &err), DCP_OK);
  CHECK(v == (int64_t)world * (world - 1) / 2);
  ctk_P->close(c);
  return 0;
}

int ctk_scenario_two_jobs(int idx, int world, void *arg) {
  (void)world;
  const char *const *jobs = arg;
  int rank = idx % 2, job = idx / 2;
  ctk_rank = idx;
  dcp_plugin_err err = {{0}};
  dcp_comm *c = NULL;
  CHECK_RC(ctk_open_comm(rank, 2, 5000, jobs[job], &c, &err), DCP_OK);
  unsigned char send[64], recv[128];
  for (int i = 0; i < 5; i++) {
    ctk_fill(send, sizeof send, (unsigned)(job * 100 + rank + i));
    CHECK_RC(ctk_P->allgather(c, send, sizeof send, recv, &err), DCP_OK);
    CHECK(ctk_matches(recv, 64, (unsigned)(job * 100 + i)) &&
          ctk_matches(recv + 64, 64, (unsigned)(job * 100 + 1 + i)));
  }
  ctk_P->close(c);
  return 0;
}

/* ---- planted-link victims ------------------------------------------------ */

#define CTK_VICTIM_TEXT "a file outside the rendezvous directory: never to change\n"

void ctk_victim_make(char *victim) {
  char dir[64];
  snprintf(dir, sizeof dir, "/tmp/dcp-victim-XXXXXX");
  assert_non_null(mkdtemp(dir));
  snprintf(victim, PATH_MAX, "%s/victim", dir);
  FILE *f = fopen(victim, "w");
  assert_non_null(f);
  fputs(CTK_VICTIM_TEXT, f);
  assert_int_equal(fclose(f), 0);
}

int ctk_victim_intact(const char *victim) {
  char buf[256] = "";
  FILE *f = fopen(victim, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strcmp(buf, CTK_VICTIM_TEXT) == 0;
}

void ctk_victim_drop(const char *victim) {
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", victim);
  *strrchr(dir, '/') = '\0';
  ctk_remove_dir(dir);
}

void ctk_plant_link(const char *name, const char *target) {
  char path[PATH_MAX + 160];
  snprintf(path, sizeof path, "%s/%s", ctk_dir, name);
  assert_int_equal(symlink(target, path), 0);
}
