/* fault_campaign — seeded fault-injection trials over sync and async saves
 * (docs/reliability.md, "Faults during a save").
 *
 *   fault_campaign sync|async --dir D --plugins P [--world 1..4]
 *                  [--trials N] [--seed S] [--inner posix|sharedfs]
 *   fault_campaign power --seq single|overwrite|steps [--async 1] [--world W]
 *                  [--strict-overwrite 0|1] [--strict-mkdir 0|1] [--in-place 0|1]
 *                  [--lying-fs fsync|syncdir] [--variants V] --dir D --plugins P
 *                  [--trials N] [--seed S]
 *
 * (power: the power-loss campaign, fc_power.c.)
 *
 * Every trial (fc_trial.c) saves a good checkpoint, saves the next one with
 * one injected fault through the "fault" storage plugin (P holds
 * dcp-storage-fault.so), then checks that the good one loads byte-exact,
 * that the faulted one loads byte-exact or is refused with a specific
 * status, and that a clean save over it succeeds and leaves no leftovers.
 * With --world N > 1 the trials run on N forked ranks over the file
 * collective: a long-lived world for the trials whose fault is an error,
 * and a fresh world per phase for those that kill a process (a dead rank
 * leaves its world's collective broken by design). At the end the
 * campaign prints its trial counts and the number of undetected failures,
 * which is always 0: the first one fails the process at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fc.h"

#define LONG_TIMEOUT_MS 60000
#define KILL_TIMEOUT_MS 3000 /* the survivors of a killed rank wait this long */

typedef struct args {
  const char *mode, *dir, *plugins, *inner;
  int world;
  long trials;
  uint64_t seed;
} args;

/* A context of this rank; NULL when tolerant and it cannot be created. */
static dcp_ctx *open_ctx(const fc_env *env, const args *a, const char *rdv, long timeout_ms,
                         bool tolerant, dcp_status *why) {
  char opts[4600];
  fc_storage_options(env, a->inner, opts, sizeof opts);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = "fault";
  cfg.storage_options = opts;
  cfg.plugin_path = a->plugins;
  cfg.timeout_ms = timeout_ms;
  if (env->world > 1) {
    cfg.coll = "file";
    cfg.rendezvous = rdv;
    cfg.rank = env->rank;
    cfg.world_size = env->world;
  }
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  if (rc && tolerant) return *why = rc, NULL;
  FC_CHECK(rc == DCP_OK, "context: %s (%s)", dcp_strerror(rc), dcp_ctx_create_error());
  if (env->world > 1)
    FC_CHECK(dcp_async_set_coordination(ctx, "file", rdv, NULL) == DCP_OK, "coordination: %s",
             dcp_ctx_last_error(ctx));
  return ctx;
}

static void close_ctx(dcp_ctx *ctx) {
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
}

/* One process, every trial in one context. */
static void run_single(fc_env *env, const args *a) {
  dcp_status why;
  dcp_ctx *ctx = open_ctx(env, a, NULL, LONG_TIMEOUT_MS, false, &why);
  for (long t = 0; t < a->trials; t++) fc_trial(env, ctx, t, FC_PHASE_ALL);
  close_ctx(ctx);
}

/* Trials [first, last) in a fresh world of forked ranks, the given phases
 * each. A rank may die of SIGKILL only when `kill` (the trial's fault
 * phase kills a process). */
static void run_world(fc_env *env, const args *a, long first, long last, unsigned phases,
                      bool kill) {
  static int worlds;
  char rdv[4200];
  snprintf(rdv, sizeof rdv, "%s/rdv.%d", a->dir, worlds++);
  fc_mkdir(rdv);
  long timeout = kill && (phases & FC_PHASE_FAULT) ? KILL_TIMEOUT_MS : LONG_TIMEOUT_MS;
  bool tolerant = kill && phases == FC_PHASE_FAULT; /* see below */
  pid_t pids[FC_MAX_WORLD];
  fflush(NULL);
  for (int r = 0; r < env->world; r++) {
    pids[r] = fork();
    FC_CHECK(pids[r] >= 0, "fork: %s", strerror(errno));
    if (pids[r] == 0) {
      env->rank = fc_rank = r;
      env->resync_ms = env->async && kill && (phases & FC_PHASE_CHECK) ? timeout + 1000 : 0;
      /* with the short deadline of a kill trial, a loaded machine may miss
       * the rendezvous: that is a failed save too */
      dcp_status why = DCP_OK;
      dcp_ctx *ctx = open_ctx(env, a, rdv, timeout, tolerant, &why);
      if (!ctx) {
        for (long t = first; t < last; t++)
          fc_trial_no_context(env, t, why, dcp_ctx_create_error());
        _exit(0);
      }
      for (long t = first; t < last; t++) fc_trial(env, ctx, t, phases);
      close_ctx(ctx);
      exit(0); /* not _exit: leak checks run at exit */
    }
  }
  int failed = 0;
  for (int r = 0; r < env->world; r++) {
    int ws;
    FC_CHECK(waitpid(pids[r], &ws, 0) == pids[r], "waitpid: %s", strerror(errno));
    bool killed = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
    if (!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0) && !(kill && killed)) failed = 1;
  }
  fc_cur_trial = first;
  FC_CHECK(!failed, "a rank of the world for trials %ld..%ld failed (see above)", first,
           last - 1);
  fc_cur_trial = -1;
}

static void run_multi(fc_env *env, const args *a) {
  long t = 0;
  while (t < a->trials) {
    long end = t;
    while (end < a->trials && !fc_trial_kills(env, end)) end++;
    if (end > t) run_world(env, a, t, end, FC_PHASE_ALL, false);
    if (end == a->trials) break;
    run_world(env, a, end, end + 1, FC_PHASE_PREV, false);
    if (env->async) {
      /* only a writer dies: the trainers carry on in the same world, and
       * the next save respawns that writer and reopens the survivors' */
      run_world(env, a, end, end + 1, FC_PHASE_FAULT | FC_PHASE_CHECK, true);
    } else {
      run_world(env, a, end, end + 1, FC_PHASE_FAULT, true);
      run_world(env, a, end, end + 1, FC_PHASE_CHECK, false);
    }
    t = end + 1;
  }
}

/* Count the trial lines of <dir>/results and print the summary. */
static void report(const fc_env *env, const args *a) {
  char path[4200];
  snprintf(path, sizeof path, "%s/results", a->dir);
  char *text = fc_read_file(path);
  FC_CHECK(text, "no results at %s", path);
  static const char *const classes[] = {"saved", "refused", "failed-but-committed",
                                        "torn-refused", "kept-old"};
  long n = 0, fired = 0, kills = 0, load_faults = 0, load_refused = 0, per[5] = {0}, overwrites = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    n++;
    fired += strstr(line, " fired=1") != NULL;
    kills += strstr(line, " kill=1") != NULL;
    overwrites += strstr(line, " overwrite=1") != NULL;
    load_faults += strstr(line, " load_fault=fail") != NULL;
    load_refused += strstr(line, ":refused") != NULL;
    for (int c = 0; c < 5; c++) {
      char key[64];
      snprintf(key, sizeof key, " class=%s", classes[c]);
      const char *at = strstr(line, key);
      per[c] += at && (at[strlen(key)] == ' ' || at[strlen(key)] == '\0');
    }
  }
  free(text);
  printf("fault campaign (%s, %d rank%s, inner %s, seed %llu): %ld trials, %ld faults fired "
         "(%ld kills, %ld overwriting in place); outcomes: %ld refused, %ld saved, "
         "%ld failed-but-committed, %ld torn-refused, %ld kept-old; %ld loads with a failing or "
         "lying operation (%ld refused: EIO, or ECORRUPT for a lie; the others recovered "
         "byte-exact); 0 undetected\n",
         a->mode, env->world, env->world > 1 ? "s" : "", a->inner, (unsigned long long)a->seed,
         n, fired, kills, overwrites, per[1], per[0], per[2], per[3], per[4], load_faults, load_refused);
  FC_CHECK(n == a->trials, "%ld trial results for %ld trials", n, a->trials);
  /* the probe makes every fault reachable; a kill offset past a compressed
   * save's bytes is the only way to miss */
  FC_CHECK(fired * 10 >= n * 9, "only %ld of %ld faults fired", fired, n);
  /* most faults must actually fail the save (a plugin that injected
   * nothing would leave every trial "saved") */
  FC_CHECK((per[1] + per[2] + per[4]) * 2 >= n, "only %ld of %ld faulted saves failed",
           per[1] + per[2] + per[4], n);
}

int main(int argc, char **argv) {
  args a = {.mode = argc > 1 ? argv[1] : "", .inner = "posix", .world = 1, .trials = 100,
            .seed = 1};
  fc_power_args pa = {.seq = "single", .strict_overwrite = true, .variants = 2};
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--seq")) pa.seq = argv[i + 1];
    else if (!strcmp(argv[i], "--async")) pa.async = atoi(argv[i + 1]) != 0;
    else if (!strcmp(argv[i], "--strict-overwrite")) pa.strict_overwrite = atoi(argv[i + 1]) != 0;
    else if (!strcmp(argv[i], "--strict-mkdir")) pa.strict_mkdir = atoi(argv[i + 1]) != 0;
    else if (!strcmp(argv[i], "--in-place")) pa.in_place = atoi(argv[i + 1]) != 0;
    else if (!strcmp(argv[i], "--lying-fs")) pa.lying_fs = argv[i + 1];
    else if (!strcmp(argv[i], "--variants")) pa.variants = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) a.dir = argv[i + 1];
    else if (!strcmp(argv[i], "--plugins")) a.plugins = argv[i + 1];
    else if (!strcmp(argv[i], "--inner")) a.inner = argv[i + 1];
    else if (!strcmp(argv[i], "--world")) a.world = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--trials")) a.trials = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--seed")) a.seed = strtoull(argv[i + 1], NULL, 10);
  }
  const char *env_seed = getenv("DCP_TEST_SEED");
  if (env_seed && *env_seed) a.seed = strtoull(env_seed, NULL, 10);
  if (!strcmp(a.mode, "power")) {
    FC_CHECK(a.dir && a.plugins && a.trials > 0, "usage: fault_campaign power --seq "
             "single|overwrite|steps --dir D --plugins P [--async 1] [--world W] [--trials N] "
             "[--seed S] [--strict-overwrite 0|1] [--strict-mkdir 0|1] [--in-place 0|1] "
             "[--lying-fs fsync|syncdir] [--variants V]");
    fc_mkdir(a.dir);
    pa.dir = a.dir, pa.plugins = a.plugins, pa.world = a.world, pa.trials = a.trials,
    pa.seed = a.seed;
    return fc_power_campaign(&pa);
  }
  bool async = !strcmp(a.mode, "async");
  FC_CHECK((async || !strcmp(a.mode, "sync")) && a.dir && a.plugins && a.trials > 0 &&
               a.world >= 1 && a.world <= FC_MAX_WORLD,
           "usage: fault_campaign sync|async --dir D --plugins P [--world 1..4] [--trials N] "
           "[--seed S] [--inner posix|sharedfs]");
  fc_mkdir(a.dir);
  char results[4200];
  snprintf(results, sizeof results, "%s/results", a.dir);
  unlink(results);
  fc_env env = {.dir = a.dir, .plugins = a.plugins, .seed = a.seed, .async = async,
                .rank = 0, .world = a.world, .fork_kills = !async && a.world == 1};
  printf("fault campaign: %s, %d rank(s), %ld trials, seed %llu (DCP_TEST_SEED replays)\n",
         a.mode, a.world, a.trials, (unsigned long long)a.seed);
  fflush(stdout);
  if (a.world == 1)
    run_single(&env, &a);
  else
    run_multi(&env, &a);
  report(&env, &a);
  return 0;
}
