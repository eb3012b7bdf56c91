/* manager_crash.c — the manager's crash trials and preemption save
 * (docs/manager.md).
 *
 *   manager_crash trials --dir D --world W --trials N --seed S
 *       N seeded trials on one root, one training run that keeps being
 *       killed: each trial forks W trainer ranks (file collective when
 *       W > 1, writers over file exchange) that resume from the newest
 *       loadable step (checking it bit for bit), then save six more steps,
 *       sync or async at random, keep_last 1 or 2 and, in some trials,
 *       keep_every 3, with a pause inside every deletion in half the trials
 *       (DCP_MANAGER_DELETE_DELAY_MS). The harness SIGKILLs every rank at a
 *       random moment — and in half the trials their async writers too;
 *       otherwise an orphaned writer may finish and commit on its own
 *       (every tenth trial, and the last, runs to its end instead) — and
 *       then checks, with a read-only manager: every committed step
 *       verifies and loads bit for bit, the newest loadable step is at
 *       least the newest step a trainer reported durable (so a durable step
 *       always survives), and latest, when there, names a committed step
 *       no newer than that.
 *
 *   manager_crash preempt --dir D --world W --rounds N --seed S
 *       each round forks W ranks that train without periodic saves and have
 *       the manager's SIGTERM handler; the harness sends SIGTERM to one
 *       random rank at a random moment; every rank must agree at the next
 *       step boundary, take the preemption save and exit 0, and the step
 *       they saved must be latest and load bit for bit. Then one round
 *       SIGKILLs a rank instead: the others' agreement must fail by the
 *       deadline (no hang) and they save nothing.
 *
 * The harness is a child subreaper, so writers orphaned by a killed
 * trainer are its children: it finds and kills (or waits for) them. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "async/async_int.h"
#include "mgr_kit.h"

typedef struct args {
  const char *mode, *dir;
  int world, trials, rounds;
  uint64_t seed;
} args;

static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR) {
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The pids whose parent is `parent` (from /proc), into out (cap). */
static int children_of(pid_t parent, pid_t *out, int cap) {
  DIR *d = opendir("/proc");
  if (!d) return 0;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d)) && n < cap) {
    pid_t pid = (pid_t)atoi(de->d_name);
    if (pid <= 0) continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    char *p = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
    char state;
    int ppid;
    if (p && sscanf(p + 1, " %c %d", &state, &ppid) == 2 && ppid == parent && state != 'Z')
      out[n++] = pid;
  }
  closedir(d);
  return n;
}

/* Reap every child of the harness; kill those still running after
 * limit_s (orphaned writers finishing their job), or at once. */
static void reap_all(double limit_s) {
  double t0 = now_s();
  for (;;) {
    int status;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
    pid_t kids[64];
    int n = children_of(getpid(), kids, 64);
    if (n == 0) {
      if (waitpid(-1, &status, WNOHANG) <= 0) return;
      continue;
    }
    if (now_s() - t0 >= limit_s)
      for (int i = 0; i < n; i++) kill(kids[i], SIGKILL);
    sleep_ms(2);
  }
}

/* ---- the trainer of one trial (a forked rank) ------------------------------ */

typedef struct trial_cfg {
  const char *root, *rdv;
  int32_t rank, world;
  uint32_t keep_last;
  uint64_t keep_every, seed;
  int report_fd; /* rank 0: "durable N" lines */
} trial_cfg;

static void say(int fd, const char *fmt, int64_t v) {
  char line[64];
  int n = snprintf(line, sizeof line, fmt, v);
  if (fd >= 0 && write(fd, line, (size_t)n) != n) _exit(9);
}

static int trainer(const trial_cfg *c) {
  dcp_ctx *ctx = mk_ctx(c->rank, c->world, c->rdv, 4000, 400);
  mk_model md;
  mk_model_init(&md, ctx);
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.keep_last = c->keep_last;
  o.keep_every = c->keep_every;
  o.flags = DCP_MANAGER_QUIET;
  dcp_manager *m = NULL;
  dcp_status rc;
  for (int tries = 0; (rc = dcp_manager_open(ctx, c->root, &o, &m)) == DCP_EBUSY && tries < 200;
       tries++)
    sleep_ms(10); /* the killed trainer's root lease: broken once seen dead */
  /* a collective that timed out on a loaded machine is not the manager's
   * failure: this trial's trainer gives up (exit 1, counted) */
#define GIVE_UP(s) \
  if ((s) == DCP_ETIMEDOUT || (s) == DCP_EPEER) _exit(1)
  GIVE_UP(rc);
  MK_CHECK(rc == DCP_OK, "rank %d: open: %s", c->rank, dcp_ctx_last_error(ctx));
  int64_t step = -1;
  rc = dcp_manager_resume(m, 0, &step);
  GIVE_UP(rc);
  MK_CHECK(rc == DCP_OK || rc == DCP_ENOTFOUND, "resume: %s", dcp_ctx_last_error(ctx));
  if (step >= 0) {
    rc = dcp_manager_load(m, step, md.st, NULL);
    GIVE_UP(rc);
    MK_CHECK(rc == DCP_OK, "load %" PRId64 ": %s", step, dcp_ctx_last_error(ctx));
    MK_CHECK(mk_model_is(&md, step), "resumed step %" PRId64 " is not bit for bit", step);
  }
  say(c->report_fd, "ready %" PRId64 "\n", step);
  rng = c->seed * 7 + 3;
  int64_t first = step < 0 ? 1 : step + 1;
  for (int64_t k = first; k < first + 6; k++) {
    mk_model_fill(&md, k);
    /* the previous async save first, so that its outcome is known here */
    int64_t prev = dcp_manager_pending_step(m);
    if (prev >= 0) {
      rc = dcp_manager_wait(m, -1);
      if (rc) break; /* a peer gone (an earlier trial's leftovers): stop */
      say(c->report_fd, "durable %" PRId64 "\n", prev);
    }
    int async = rnd() % 3 != 0;
    rc = async ? dcp_manager_save_async(m, k, md.st, NULL) : dcp_manager_save(m, k, md.st, NULL);
    /* a save may meet what a killed trial left (a writer's lease, a slow
     * peer): not an error of the manager; this trainer stops there */
    MK_CHECK(rc == DCP_OK || rc == DCP_EBUSY || rc == DCP_ESTALE || rc == DCP_EPEER ||
                 rc == DCP_ETIMEDOUT,
             "rank %d: save %" PRId64 ": %s: %s", c->rank, k, dcp_strerror(rc),
             dcp_ctx_last_error(ctx));
    if (rc) break;
    if (!async) say(c->report_fd, "durable %" PRId64 "\n", k);
  }
  int64_t last = dcp_manager_pending_step(m);
  if (last >= 0 && dcp_manager_wait(m, -1) == DCP_OK)
    say(c->report_fd, "durable %" PRId64 "\n", last);
  dcp_manager_free(m);
  mk_model_free(&md);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}

/* ---- the harness's checks ----------------------------------------------------- */

static dcp_ctx *solo_ctx(void) { return mk_ctx(0, 1, NULL, 10000, 400); }

/* After a trial: every committed step verifies and loads exactly; the
 * newest loadable is at least durable; latest names a committed step. */
static int mid_delete; /* incomplete steps older than the newest committed: a
                          deletion killed between its un-commit and its end */

static int64_t check_root(const char *root, int64_t durable, int trial) {
  dcp_ctx *ctx = solo_ctx();
  mk_model md;
  mk_model_init(&md, ctx);
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.flags = DCP_MANAGER_READ_ONLY | DCP_MANAGER_QUIET;
  dcp_manager *m;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_OK, "trial %d: open", trial);
  dcp_step_info v[64];
  size_t n = 0;
  MK_CHECK(dcp_manager_list(m, v, 64, &n) == DCP_OK && n <= 64, "trial %d: list", trial);
  int64_t newest = -1;
  for (size_t i = 0; i < n; i++) {
    MK_CHECK(v[i].state != DCP_STEP_CORRUPT && v[i].state != DCP_STEP_FOREIGN,
             "trial %d: step %" PRId64 " is %s: %s", trial, v[i].step,
             dcp_step_state_name(v[i].state), v[i].note);
    if (v[i].state != DCP_STEP_COMMITTED) continue;
    char path[4200];
    dcp_manager_step_path(m, v[i].step, path, sizeof path);
    dcp_verify_report rep = {.struct_size = sizeof rep};
    MK_CHECK(dcp_verify(ctx, path, &rep) == DCP_OK,
             "trial %d: committed step %" PRId64 " does not verify: %s", trial, v[i].step,
             rep.first_problem);
    MK_CHECK(dcp_manager_load(m, v[i].step, md.st, NULL) == DCP_OK && mk_model_is(&md, v[i].step),
             "trial %d: committed step %" PRId64 " does not load bit for bit", trial, v[i].step);
    newest = v[i].step;
  }
  for (size_t i = 0; i < n; i++) mid_delete += v[i].state == DCP_STEP_INCOMPLETE && v[i].step < newest;
  int64_t step = -1;
  dcp_status rc = dcp_manager_resume(m, DCP_RESUME_VERIFY, &step);
  MK_CHECK(rc == DCP_OK || (rc == DCP_ENOTFOUND && durable < 0), "trial %d: resume: %s", trial,
           dcp_strerror(rc));
  MK_CHECK(step == newest, "trial %d: resume %" PRId64 ", newest committed %" PRId64, trial, step,
           newest);
  MK_CHECK(step >= durable, "trial %d: the newest loadable step %" PRId64
           " is older than durable step %" PRId64, trial, step, durable);
  char path[4200], buf[64] = "";
  snprintf(path, sizeof path, "%s/latest", root);
  FILE *f = fopen(path, "r");
  if (f) {
    int64_t latest = -1;
    if (fgets(buf, sizeof buf, f)) sscanf(buf, "step-%" SCNd64, &latest);
    fclose(f);
    int found = 0;
    for (size_t i = 0; i < n; i++) found |= v[i].step == latest && v[i].state == DCP_STEP_COMMITTED;
    MK_CHECK(found && latest <= step, "trial %d: latest names step %" PRId64
             ", which is not committed or newer than %" PRId64, trial, latest, step);
  }
  dcp_manager_free(m);
  mk_model_free(&md);
  dcp_ctx_free(ctx);
  return step;
}

static int mode_trials(const args *a) {
  char root[4096];
  snprintf(root, sizeof root, "%s/root", a->dir);
  mkdir(a->dir, 0755);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int64_t durable = -1; /* the newest step a trainer reported durable */
  int kills = 0, completed = 0, kept_writers = 0, gave_up = 0;
  double t0 = now_s();
  for (int t = 0; t < a->trials; t++) {
    rng = a->seed * 1000003 + (uint64_t)t * 7919 + 1;
    for (int i = 0; i < 4; i++) rnd();
    char rdv[4200];
    snprintf(rdv, sizeof rdv, "%s/rdv-%d", a->dir, t);
    mkdir(rdv, 0755);
    int fds[2];
    MK_CHECK(pipe(fds) == 0, "pipe");
    trial_cfg c = {.root = root, .rdv = rdv, .world = a->world,
                   .keep_last = 1 + (uint32_t)(rnd() % 2),
                   .keep_every = rnd() % 4 == 0 ? 3 : 0, .seed = rnd()};
    int delay = rnd() % 2;
    long kill_ms = (long)(rnd() % 150);
    int kill_writers = rnd() % 2;
    pid_t pids[8];
    for (int r = 0; r < a->world; r++) {
      pids[r] = fork();
      MK_CHECK(pids[r] >= 0, "fork");
      if (pids[r] == 0) {
        close(fds[0]);
        if (delay) setenv("DCP_MANAGER_DELETE_DELAY_MS", "3", 1);
        c.rank = r;
        c.report_fd = r == 0 ? fds[1] : -1;
        _exit(trainer(&c));
      }
    }
    close(fds[1]);
    /* wait until the trainers resumed, let them run, then kill every rank
     * (and maybe their writers) */
    char buf[8192];
    size_t have = 0;
    double limit = now_s() + 20;
    while (!memmem(buf, have, "ready", 5) && now_s() < limit) {
      struct pollfd pf = {.fd = fds[0], .events = POLLIN};
      if (poll(&pf, 1, 50) <= 0) continue;
      ssize_t len = read(fds[0], buf + have, sizeof buf - 1 - have);
      if (len <= 0) break;
      have += (size_t)len;
    }
    /* every tenth trial and the last run to their end, so that durable
     * steps exist however slow the machine is */
    if (t % 10 == 9 || t == a->trials - 1) kill_ms = 600000;
    double end = now_s() + kill_ms / 1000.0;
    int alive = a->world;
    int failed = 0;
    while (now_s() < end && alive > 0) {
      int status;
      pid_t p = waitpid(-1, &status, WNOHANG);
      for (int r = 0; r < a->world; r++)
        if (p == pids[r]) {
          alive--;
          pids[r] = 0;
          if (WIFEXITED(status) && WEXITSTATUS(status) == 1) gave_up++;
          else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
        }
      if (p <= 0) sleep_ms(1);
    }
    MK_CHECK(!failed, "trial %d: a trainer failed before the kill", t);
    if (alive > 0) {
      kills++;
      pid_t writers[64];
      int nw = 0;
      for (int r = 0; r < a->world; r++)
        if (pids[r] > 0) nw += children_of(pids[r], writers + nw, 64 - nw);
      for (int r = 0; r < a->world; r++)
        if (pids[r] > 0) kill(pids[r], SIGKILL);
      if (kill_writers)
        for (int i = 0; i < nw; i++) kill(writers[i], SIGKILL);
      else
        kept_writers += nw > 0;
    } else {
      completed++;
    }
    /* reap the trainers; orphaned writers get a few seconds to finish */
    reap_all(kill_writers ? 0.0 : 8.0);
    ssize_t len;
    while ((len = read(fds[0], buf + have, sizeof buf - 1 - have)) > 0) have += (size_t)len;
    close(fds[0]);
    buf[have] = '\0';
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
      int64_t d;
      if (sscanf(line, "durable %" SCNd64, &d) == 1 && d > durable) durable = d;
    }
    check_root(root, durable, t);
  }
  printf("manager crash trials: %d trials (world %d), %d killed (%d left their writers to "
         "finish), %d ran to the end, %d sighting(s) of a deletion killed midway, %d trainer(s) "
         "gave up on a timed-out collective; newest durable step %" PRId64 "; %.1f s\n",
         a->trials, a->world, kills, kept_writers, completed, mid_delete, gave_up, durable,
         now_s() - t0);
  MK_CHECK(durable >= 0, "no step was ever reported durable");
  return 0;
}

/* ---- preemption ------------------------------------------------------------------ */

static int preempt_rank(const char *root, const char *rdv, int32_t rank, int32_t world,
                        int expect_dead_peer) {
  dcp_ctx *ctx = mk_ctx(rank, world, rdv, expect_dead_peer ? 3000 : 20000, 400);
  mk_model md;
  mk_model_init(&md, ctx);
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.flags = DCP_MANAGER_QUIET;
  o.keep_last = 2;
  dcp_manager *m = NULL;
  dcp_status rc;
  for (int tries = 0; (rc = dcp_manager_open(ctx, root, &o, &m)) == DCP_EBUSY && tries < 200;
       tries++)
    sleep_ms(10);
  MK_CHECK(rc == DCP_OK, "open: %s", dcp_ctx_last_error(ctx));
  MK_CHECK(dcp_manager_install_signal_handler(m) == DCP_OK, "handler");
  int64_t step = -1;
  rc = dcp_manager_resume(m, 0, &step);
  int64_t k = step < 0 ? 1 : step + 1;
  /* ready: the harness may signal from now on */
  if (rank == 0) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ready", rdv);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
  }
  for (int iter = 0; iter < 20000; iter++, k++) {
    mk_model_fill(&md, k); /* a training step */
    sleep_ms(1);
    int go = 0;
    rc = dcp_manager_should_save(m, &go);
    if (rc) {
      MK_CHECK(expect_dead_peer, "rank %d: should_save: %s", rank, dcp_ctx_last_error(ctx));
      MK_CHECK((rc == DCP_ETIMEDOUT || rc == DCP_EPEER) && !go, "status %s", dcp_strerror(rc));
      MK_CHECK(strstr(dcp_ctx_last_error(ctx), "no preemption save"), "%s",
               dcp_ctx_last_error(ctx));
      _exit(5); /* the clear error, no hang; the context's collective is broken */
    }
    if (!go) continue;
    rc = dcp_manager_save_now(m, k, md.st, NULL, 20000);
    MK_CHECK(rc == DCP_OK, "rank %d: preemption save %" PRId64 ": %s", rank, k,
             dcp_ctx_last_error(ctx));
    if (rank == 0) printf("preempted at step %" PRId64 "\n", k);
    fflush(stdout);
    dcp_manager_free(m);
    mk_model_free(&md);
    dcp_async_shutdown(ctx);
    dcp_ctx_free(ctx);
    return 0;
  }
  return 4; /* never signalled */
}

static int mode_preempt(const args *a) {
  char root[4096];
  snprintf(root, sizeof root, "%s/root", a->dir);
  mkdir(a->dir, 0755);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int64_t before = -1;
  for (int round = 0; round <= a->rounds; round++) {
    int dead = round == a->rounds; /* the last round kills a rank instead */
    if (dead && a->world < 2) break;
    rng = a->seed * 31 + (uint64_t)round + 1;
    rnd();
    char rdv[2048], ready[2100];
    snprintf(rdv, sizeof rdv, "%s/rdv-%d", a->dir, round);
    snprintf(ready, sizeof ready, "%s/ready", rdv);
    mkdir(rdv, 0755);
    pid_t pids[8];
    for (int r = 0; r < a->world; r++) {
      pids[r] = fork();
      MK_CHECK(pids[r] >= 0, "fork");
      if (pids[r] == 0) _exit(preempt_rank(root, rdv, r, a->world, dead));
    }
    struct stat sb;
    for (int i = 0; i < 20000 && stat(ready, &sb) != 0; i++) sleep_ms(1);
    sleep_ms(5 + (long)(rnd() % 60));
    int victim = (int)(rnd() % (uint64_t)a->world);
    if (dead) victim = a->world - 1;
    kill(pids[victim], dead ? SIGKILL : SIGTERM);
    double t0 = now_s();
    for (int r = 0; r < a->world; r++) {
      int status;
      MK_CHECK(waitpid(pids[r], &status, 0) == pids[r], "wait");
      if (dead && r == victim) continue;
      int want = dead ? 5 : 0;
      MK_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == want,
               "round %d: rank %d ended with %d (want exit %d)", round, r,
               WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), want);
    }
    if (dead) printf("dead rank: the others gave up after %.1f s\n", now_s() - t0);
    reap_all(dead ? 0.0 : 5.0);
    int64_t step = check_root(root, before, round);
    if (!dead) {
      MK_CHECK(step > before, "round %d: no new step (%" PRId64 ")", round, step);
      before = step;
    } else {
      MK_CHECK(step == before, "the round with a dead rank saved step %" PRId64, step);
    }
  }
  printf("manager preempt: %d rounds (world %d), newest step %" PRId64 "\n", a->rounds, a->world,
         before);
  return 0;
}

int main(int argc, char **argv) {
  args a = {.mode = argc > 1 ? argv[1] : "", .world = 1, .trials = 100, .rounds = 3, .seed = 1};
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--dir")) a.dir = argv[i + 1];
    else if (!strcmp(argv[i], "--world")) a.world = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--trials")) a.trials = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds")) a.rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) a.seed = strtoull(argv[i + 1], NULL, 10);
  }
  if (!a.dir || a.world < 1 || a.world > 4) {
    fprintf(stderr, "usage: manager_crash trials|preempt --dir D [--world W] [--trials N] "
                    "[--rounds N] [--seed S]\n");
    return 2;
  }
  if (!strcmp(a.mode, "trials")) return mode_trials(&a);
  if (!strcmp(a.mode, "preempt")) return mode_preempt(&a);
  fprintf(stderr, "manager_crash: unknown mode %s\n", a.mode);
  return 2;
}
