/* fc_trial.c — one trial of the fault campaign, in three phases:
 *
 *   prev   save generation 2t+1 to <trial>/prev without faults; the fault
 *          plugin's probe records how many operations of each kind (and
 *          how many bytes) such a save makes on each rank, and its
 *          operation log must show the durable commit order
 *   fault  save generation 2t+2 to <trial>/next with one fault, chosen by
 *          the trial's seed among the operations the probe counted, on one
 *          rank: EIO, ENOSPC, a short write, a torn (lying) write, or
 *          SIGKILL before/after an operation or at a byte offset
 *   check  prev must load byte-exact; next must load byte-exact or be
 *          refused with a specific status (never load wrong bytes); every
 *          rank's save must have failed alike when one failed; a clean
 *          save over next then succeeds (in the durable order), loads
 *          byte-exact and leaves only the files its .metadata references;
 *          one trial in three also loads prev with a failing operation
 *
 * One trial in four overwrites instead: the faulted save goes over prev
 * itself (DCP_SAVE_OVERWRITE, which keeps prev until the new commit), and
 * prev must then load as the old generation, the new one, or be refused —
 * never a mix of the two.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fc.h"

#define KILL_PERCENT 20
#define FC_KILLED ((dcp_status)1) /* no rank lived to report a status */

static const char *const save_kinds[] = {"mount", "open",   "write",   "sync", "close",
                                         "size",  "rename", "remove", "syncdir", "list"};
#define NKINDS (sizeof save_kinds / sizeof save_kinds[0])

/* The trial's random stream for fault choices (same on every rank). */
static fc_rng fault_rng(const fc_env *env, long t) {
  fc_rng r = {env->seed * 0x100000001b3ull + (uint64_t)t * 0x9e3779b97f4a7c15ull + 1};
  return r;
}

/* Whether trial t's faulted save overwrites prev in place. */
static bool overwrites(const fc_env *env, long t) {
  fc_rng r = fault_rng(env, t);
  r.s ^= 0x0e5e0e5eull;
  return fc_range(&r, 0, 3) == 0;
}

bool fc_trial_kills(const fc_env *env, long t) {
  fc_rng r = fault_rng(env, t);
  return fc_range(&r, 0, 99) < KILL_PERCENT;
}

/* The rank whose storage fails in trial t. */
static int fault_rank(const fc_env *env, long t) {
  fc_rng r = fault_rng(env, t);
  fc_next(&r);
  return (int)fc_range(&r, 0, (uint64_t)env->world - 1);
}

/* The fault of trial t on its faulty rank, from that rank's probe. */
static void choose_fault(const fc_env *env, long t, const char *probe, fc_fault *f) {
  fc_rng r = fault_rng(env, t);
  f->kill = fc_range(&r, 0, 99) < KILL_PERCENT;
  f->rank = (int)fc_range(&r, 0, (uint64_t)env->world - 1);
  uint64_t bytes = fc_probe_count(probe, "bytes");
  int how = (int)fc_range(&r, 0, 2);
  if (f->kill && how == 0 && bytes > 0) {
    snprintf(f->spec, sizeof f->spec, "kill=%llu",
             (unsigned long long)fc_range(&r, 0, bytes - 1));
    return;
  }
  const char *kinds[NKINDS];
  uint64_t counts[NKINDS];
  size_t n = 0;
  for (size_t k = 0; k < NKINDS; k++) {
    uint64_t c = fc_probe_count(probe, save_kinds[k]);
    if (c) kinds[n] = save_kinds[k], counts[n++] = c;
  }
  FC_CHECK(n > 0, "the probe counted no operations: %s", probe);
  size_t k = (size_t)fc_range(&r, 0, n - 1);
  uint64_t nth = fc_range(&r, 1, counts[k]);
  const char *action;
  if (f->kill) {
    action = how == 2 ? "killafter" : "kill";
  } else if (strcmp(kinds[k], "write") == 0) {
    static const char *const w[] = {"eio", "enospc", "short", "torn", "torn"};
    action = w[fc_range(&r, 0, 4)];
  } else {
    action = fc_range(&r, 0, 1) ? "eio" : "enospc";
  }
  snprintf(f->spec, sizeof f->spec, "fail=%s:%llu:%s", kinds[k], (unsigned long long)nth,
           action);
}

void fc_storage_options(const fc_env *env, const char *inner, char *out, size_t cap) {
  snprintf(out, cap, "inner=%s,inner_opts=%s,ctl=%s/ctl.%d", inner,
           strcmp(inner, "sharedfs") == 0 ? "direct=0" : "", env->dir, env->rank);
}

/* ---- paths ----------------------------------------------------------------- */

typedef struct paths {
  char trial[4096], prev[4200], next[4200], ctl[4200]; /* ctl: this rank's control file */
} paths;

static void paths_of(const fc_env *env, long t, paths *p) {
  snprintf(p->trial, sizeof p->trial, "%s/t%05ld", env->dir, t);
  snprintf(p->prev, sizeof p->prev, "%s/prev", p->trial);
  snprintf(p->next, sizeof p->next, "%s/next", p->trial);
  snprintf(p->ctl, sizeof p->ctl, "%s/ctl.%d", env->dir, env->rank);
}

/* Where the fault plugin notes the faults that fired on rank's backends. */
static void fired_path(const fc_env *env, int rank, char *out, size_t cap) {
  snprintf(out, cap, "%s/ctl.%d.fired", env->dir, rank);
}

/* Where trial t's faulted save goes. */
static const char *target_of(const fc_env *env, long t, const paths *p) {
  return overwrites(env, t) ? p->prev : p->next;
}

/* <trial>/<name>.<rank>, or <trial>/<name> for rank -1. */
static void trial_file(const paths *p, const char *name, int rank, char *out, size_t cap) {
  if (rank >= 0)
    snprintf(out, cap, "%s/%s.%d", p->trial, name, rank);
  else
    snprintf(out, cap, "%s/%s", p->trial, name);
}

/* ---- phases ------------------------------------------------------------------- */

/* Save prev cleanly, keep this rank's probe, check the commit order. */
static void phase_prev(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                       const paths *p) {
  fc_mkdir(p->trial);
  char ctl[4400], log[4300];
  trial_file(p, "oplog", -1, log, sizeof log);
  snprintf(ctl, sizeof ctl, "probe=1\nlog=%s\n", log);
  fc_write_file(p->ctl, ctl);
  dcp_status rc = fc_save(ctx, m, (uint32_t)(2 * t + 1), p->prev, 0, env->async);
  unlink(p->ctl);
  FC_CHECK(rc == DCP_OK, "the clean save of prev failed: %s (%s)", dcp_strerror(rc),
           dcp_ctx_last_error(ctx));
  /* rank 0 committed last: every rank's operations of the save are logged */
  if (env->rank == 0) fc_check_commit_order(log);
  char probe[4300], kept[4300];
  snprintf(probe, sizeof probe, "%s.probe.%d", p->ctl, env->rank);
  trial_file(p, "probe", env->rank, kept, sizeof kept);
  FC_CHECK(rename(probe, kept) == 0, "no probe at %s: %s", probe, strerror(errno));
}

/* <trial>/status.<rank>: "<code> <message>" of this rank's faulted save. */
static void write_status(const paths *p, int rank, dcp_status rc, const char *msg) {
  char path[4300], text[1200];
  trial_file(p, "status", rank, path, sizeof path);
  snprintf(text, sizeof text, "%d %.1000s\n", (int)rc, msg);
  for (char *c = strchr(text, ' ') + 1; *c && c[1]; c++)
    if (*c == '\n') *c = ' ';
  fc_write_file(path, text);
}

/* Sync, one rank, a killing fault: the save runs in a child, which dies. */
static void save_in_child(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                          const paths *p) {
  fflush(NULL);
  pid_t pid = fork();
  FC_CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    dcp_status rc = fc_save(ctx, m, (uint32_t)(2 * t + 2), target_of(env, t, p),
                           overwrites(env, t) ? DCP_SAVE_OVERWRITE : 0, false);
    write_status(p, env->rank, rc, dcp_ctx_last_error(ctx));
    _exit(0); /* the parent owns ctx: no exit handlers here */
  }
  int ws;
  FC_CHECK(waitpid(pid, &ws, 0) == pid, "waitpid: %s", strerror(errno));
  FC_CHECK((WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) || (WIFEXITED(ws) && !WEXITSTATUS(ws)),
           "the saving child ended with status 0x%x", ws);
}

/* The faulted save (the faulty rank writes its control file and records
 * the fault in <trial>/fault); every surviving rank records its outcome. */
static void phase_fault(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                        const paths *p) {
  char fired[4300], path[4300];
  fired_path(env, env->rank, fired, sizeof fired);
  unlink(fired);
  trial_file(p, "status", env->rank, path, sizeof path);
  unlink(path);
  fc_fault f = {0};
  bool mine = fault_rank(env, t) == env->rank;
  if (mine) {
    trial_file(p, "probe", env->rank, path, sizeof path);
    char *probe = fc_read_file(path);
    FC_CHECK(probe, "no probe file %s", path);
    choose_fault(env, t, probe, &f);
    free(probe);
    trial_file(p, "fault", -1, path, sizeof path);
    fc_write_file(path, f.spec);
    fc_write_file(p->ctl, f.spec);
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (mine && f.kill && env->fork_kills) {
    save_in_child(env, ctx, t, m, p);
  } else {
    dcp_status rc = fc_save(ctx, m, (uint32_t)(2 * t + 2), target_of(env, t, p),
                           overwrites(env, t) ? DCP_SAVE_OVERWRITE : 0, env->async);
    write_status(p, env->rank, rc, dcp_ctx_last_error(ctx));
  }
  unlink(p->ctl);
  if (env->resync_ms > 0 && fc_trial_kills(env, t)) {
    struct timespec until = t0;
    until.tv_sec += env->resync_ms / 1000;
    until.tv_nsec += (env->resync_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
    }
  }
}

/* What the saves of the fault phase returned, as read back from the
 * status files (rank-indexed; killed ranks have none). */
typedef struct outcome {
  bool present[FC_MAX_WORLD];
  dcp_status code[FC_MAX_WORLD];
  char msg[FC_MAX_WORLD][1100];
} outcome;

/* Every rank's recorded outcome of the faulted save. */
static void read_outcome(const fc_env *env, const paths *p, outcome *o) {
  memset(o, 0, sizeof *o);
  for (int r = 0; r < env->world; r++) {
    char path[4300];
    trial_file(p, "status", r, path, sizeof path);
    char *text = fc_read_file(path);
    if (!text) continue;
    o->present[r] = true;
    o->code[r] = (dcp_status)atoi(text);
    const char *sp = strchr(text, ' ');
    snprintf(o->msg[r], sizeof o->msg[r], "%s", sp ? sp + 1 : "");
    free(text);
  }
}

/* The status an injected error must surface as, or DCP_OK for none. */
static dcp_status injected_code(const char *spec) {
  if (strstr(spec, ":enospc")) return DCP_ENOSPC;
  if (strstr(spec, ":eio") || strstr(spec, ":short")) return DCP_EIO;
  return DCP_OK;
}

/* Every rank's save failed alike: the faulty rank's injected code, and the
 * others name the faulty rank. Returns the common status. */
static dcp_status check_agreement(const fc_env *env, const fc_fault *f, bool fired,
                                  const outcome *o) {
  dcp_status first = DCP_OK;
  bool seen = false;
  for (int r = 0; r < env->world; r++) {
    if (!o->present[r]) continue;
    if (!seen) first = o->code[r], seen = true;
    if (f->kill && fired) {
      FC_CHECK(o->code[r] != DCP_OK, "rank %d's save succeeded although a process of rank %d "
               "was killed", r, f->rank);
      continue;
    }
    FC_CHECK(o->code[r] == first, "ranks disagree on the failed save: %s on one, %s on rank %d",
             dcp_strerror(first), dcp_strerror(o->code[r]), r);
  }
  dcp_status want = injected_code(f->spec);
  if (!f->kill && first != DCP_OK && want != DCP_OK) {
    FC_CHECK(first == want, "fault %s surfaced as %s (%s)", f->spec, dcp_strerror(first),
             o->msg[f->rank]);
    for (int r = 0; r < env->world; r++) {
      char who[32];
      snprintf(who, sizeof who, "rank %d", f->rank);
      FC_CHECK(r == f->rank || strstr(o->msg[r], who), "rank %d's message does not name %s: %s",
               r, who, o->msg[r]);
    }
  }
  return seen ? first : FC_KILLED;
}

/* The faulted save's target: byte-exact (the new generation, or when
 * overwriting also the old one), or refused with a specific status.
 * *which: 0 the old generation loaded, 1 the new one. */
static dcp_status check_target(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                               const paths *p, int *which) {
  const char *target = target_of(env, t, p);
  bool ow = overwrites(env, t);
  /* a fresh directory cannot hold the old generation: compare with the new only */
  dcp_status rc = fc_load_either(ctx, m, ow ? (uint32_t)(2 * t + 1) : 0, (uint32_t)(2 * t + 2),
                                target, which);
  FC_CHECK(rc != DCP_OK || *which >= 0, "UNDETECTED: %s loaded without error but with wrong bytes",
           target);
  FC_CHECK(rc == DCP_OK || rc == DCP_EINCOMPLETE || rc == DCP_ECORRUPT || rc == DCP_ENOTFOUND,
           "loading the faulted save gave %s (%s), not a refusal", dcp_strerror(rc),
           dcp_ctx_last_error(ctx));
  FC_CHECK(rc == DCP_OK || dcp_ctx_last_error(ctx)[0], "a refusal without a message");
  if (dcp_ctx_rank(ctx) == 0 && rc != DCP_EINCOMPLETE) {
    dcp_verify_report rep = {.struct_size = sizeof rep};
    dcp_status v = dcp_verify(ctx, target, &rep);
    FC_CHECK((rc == DCP_OK) == (v == DCP_OK), "load said %s but verify said %s (%s)",
             dcp_strerror(rc), dcp_strerror(v), rep.first_problem);
  }
  return rc;
}

/* Lines in the file at path (0 when it does not exist). */
static size_t count_lines(const char *path) {
  char *text = fc_read_file(path);
  size_t n = 0;
  for (const char *c = text; c && *c; c++) n += *c == '\n';
  free(text);
  return n;
}

/* A load of prev with one failing storage operation on one rank (EIO, or
 * a short read, zeros, garbage or a flipped bit in a read's buffer, a
 * lying file size): that rank's load fails with DCP_EIO (DCP_ECORRUPT for
 * the lies too) or recovers byte-exact, and no rank ever gets wrong bytes.
 * Then, the fault gone, prev loads again. Every third trial. */
static void check_load_fault(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                             const paths *p) {
  static const char *const load_kinds[] = {"mount", "open", "size", "read"};
  fc_rng r = fault_rng(env, t);
  r.s ^= 0x10adfa17ull;
  if (fc_range(&r, 0, 2) != 0) return;
  bool exact = false;
  fc_write_file(p->ctl, "probe=1\n");
  dcp_status rc = fc_load(ctx, m, (uint32_t)(2 * t + 1), p->prev, &exact);
  unlink(p->ctl);
  FC_CHECK(rc == DCP_OK && exact, "the probing load of prev failed: %s", dcp_strerror(rc));
  char probe_path[4300], fired_at[4300], spec[128];
  snprintf(probe_path, sizeof probe_path, "%s.probe.%d", p->ctl, env->rank);
  char *probe = fc_read_file(probe_path);
  FC_CHECK(probe, "no probe of the load at %s", probe_path);
  const char *kinds[4];
  uint64_t counts[4];
  size_t n = 0;
  for (size_t k = 0; k < 4; k++) {
    uint64_t c = fc_probe_count(probe, load_kinds[k]);
    if (c) kinds[n] = load_kinds[k], counts[n++] = c;
  }
  free(probe);
  bool mine = fault_rank(env, t) == env->rank && n > 0;
  bool lie = false;
  if (mine) {
    /* an error, or a flaky file system: a short read, zeros or garbage in
     * the buffer, a flipped bit, a lying file size (fault_storage.c) */
    static const char *const read_actions[] = {"eio", "eio", "short", "zero", "garbage", "flip"};
    static const char *const size_actions[] = {"eio", "lie"};
    size_t k = (size_t)fc_range(&r, 0, n - 1);
    const char *action = "eio";
    if (!strcmp(kinds[k], "read")) action = read_actions[fc_range(&r, 0, 5)];
    if (!strcmp(kinds[k], "size")) action = size_actions[fc_range(&r, 0, 1)];
    lie = strcmp(action, "eio") != 0;
    snprintf(spec, sizeof spec, "fail=%s:%llu:%s", kinds[k],
             (unsigned long long)fc_range(&r, 1, counts[k]), action);
    fc_write_file(p->ctl, spec);
  }
  /* the notes file is not removed here: rank 0 may still be about to read
   * it for the save's fault; a new line says the load's fault fired */
  fired_path(env, env->rank, fired_at, sizeof fired_at);
  size_t notes = count_lines(fired_at);
  rc = fc_load(ctx, m, (uint32_t)(2 * t + 1), p->prev, &exact);
  unlink(p->ctl);
  FC_CHECK(rc != DCP_OK || exact, "UNDETECTED: a load with a failing storage operation gave "
           "wrong bytes");
  if (mine && count_lines(fired_at) > notes) {
    /* a failed merged read is retried piecewise (blocks.c): then the load
     * may still succeed, byte-exact (checked above) */
    FC_CHECK(rc == DCP_OK || rc == DCP_EIO || (lie && rc == DCP_ECORRUPT),
             "the load with %s returned %s (%s)", spec, dcp_strerror(rc), dcp_ctx_last_error(ctx));
    FC_CHECK(rc == DCP_OK || dcp_ctx_last_error(ctx)[0], "the load with %s failed without a "
             "message", spec);
    char done[4300], what[200];
    trial_file(p, "load_fault", -1, done, sizeof done);
    snprintf(what, sizeof what, "%s:%s", spec, rc == DCP_OK ? "recovered" : "refused");
    fc_write_file(done, what); /* read by rank 0 after the retry (a collective) */
  }
  rc = fc_load(ctx, m, (uint32_t)(2 * t + 1), p->prev, &exact);
  FC_CHECK(rc == DCP_OK && exact, "prev does not load after the load fault: %s",
           dcp_strerror(rc));
}

/* The outcome's class; fails the process on a save that reported success
 * but left no loadable checkpoint (unless its backend lied: torn) or an
 * overwriting save that succeeded without replacing the old one. */
static const char *classify(const fc_fault *f, dcp_status saved, dcp_status loaded,
                            int which) {
  bool torn = strstr(f->spec, ":torn") != NULL;
  if (loaded == DCP_OK && which == 0) {
    /* overwriting: the old checkpoint is still there, so the save must have
     * failed before it un-committed it */
    FC_CHECK(saved != DCP_OK, "an overwriting save succeeded but the old checkpoint remains");
    return "kept-old";
  }
  if (saved == DCP_OK && loaded == DCP_OK) return "saved";
  if (saved == DCP_OK) {
    FC_CHECK(torn, "the save reported success but its checkpoint is refused (%s)",
             dcp_strerror(loaded));
    return "torn-refused";
  }
  return loaded == DCP_OK ? "failed-but-committed" : "refused";
}

/* The fault trial t injected, as recorded by its faulty rank, and whether
 * it fired. */
static void recorded_fault(const fc_env *env, long t, const paths *p, fc_fault *f,
                           bool *fired) {
  *f = (fc_fault){.rank = fault_rank(env, t), .kill = fc_trial_kills(env, t)};
  char path[4300];
  trial_file(p, "fault", -1, path, sizeof path);
  char *spec = fc_read_file(path);
  FC_CHECK(spec, "no fault file %s", path);
  snprintf(f->spec, sizeof f->spec, "%s", spec);
  free(spec);
  fired_path(env, f->rank, path, sizeof path);
  char *note = fc_read_file(path);
  *fired = note != NULL;
  free(note);
}

/* The clean save after the fault, over its target: it succeeds in the
 * durable order, loads byte-exact and (rank 0 checks) leaves only the files
 * its .metadata references — whatever the failed one left is gone. */
static void retry_clean(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                        const paths *p) {
  const char *target = target_of(env, t, p);
  char ctl[4400], log[4300];
  trial_file(p, "oplog_retry", -1, log, sizeof log);
  snprintf(ctl, sizeof ctl, "log=%s\n", log);
  fc_write_file(p->ctl, ctl);
  dcp_status rc = fc_save(ctx, m, (uint32_t)(2 * t + 2), target, DCP_SAVE_OVERWRITE, env->async);
  unlink(p->ctl);
  FC_CHECK(rc == DCP_OK, "the clean save after the fault failed: %s (%s)", dcp_strerror(rc),
           dcp_ctx_last_error(ctx));
  if (env->rank == 0) fc_check_commit_order(log);
  bool exact = false;
  rc = fc_load(ctx, m, (uint32_t)(2 * t + 2), target, &exact);
  FC_CHECK(rc == DCP_OK && exact, "the clean save after the fault does not load intact: %s (%s)",
           dcp_strerror(rc), dcp_ctx_last_error(ctx));
  if (env->rank != 0) return;
  fc_check_files(ctx, target);
  if (!overwrites(env, t)) fc_check_files(ctx, p->prev);
}

/* Rank 0: append the trial's outcome to <dir>/results. */
static void record_result(const fc_env *env, long t, const paths *p, const fc_fault *f,
                          bool fired, dcp_status saved, dcp_status loaded, const char *cls) {
  char line[600], results[4200], lf[4300];
  trial_file(p, "load_fault", -1, lf, sizeof lf);
  char *load_fault = fc_read_file(lf);
  snprintf(line, sizeof line,
           "trial=%ld async=%d world=%d rank=%d kill=%d overwrite=%d fired=%d spec=%s save=%s "
           "load=%s class=%s load_fault=%s\n",
           t, env->async, env->world, f->rank, f->kill, overwrites(env, t), fired, f->spec,
           saved == FC_KILLED ? "killed" : dcp_strerror(saved), dcp_strerror(loaded), cls,
           load_fault ? load_fault : "none");
  free(load_fault);
  snprintf(results, sizeof results, "%s/results", env->dir);
  FILE *out = fopen(results, "a");
  FC_CHECK(out && fputs(line, out) >= 0 && fclose(out) == 0, "cannot append to %s", results);
}

/* Loads, agreement, load faults, the clean retry and its leftovers. */
static void phase_check(const fc_env *env, dcp_ctx *ctx, long t, const fc_model *m,
                        const paths *p) {
  unlink(p->ctl); /* a process killed by its fault left it behind */
  bool ow = overwrites(env, t);
  if (!ow) {
    bool exact = false;
    dcp_status rc = fc_load(ctx, m, (uint32_t)(2 * t + 1), p->prev, &exact);
    FC_CHECK(rc == DCP_OK && exact, "the previous checkpoint does not load intact: %s (%s)%s",
             dcp_strerror(rc), dcp_ctx_last_error(ctx), rc ? "" : ", wrong bytes");
  }
  int which = -1;
  dcp_status loaded = check_target(env, ctx, t, m, p, &which);
  fc_fault f;
  bool fired;
  recorded_fault(env, t, p, &f, &fired);
  outcome o;
  read_outcome(env, p, &o);
  dcp_status saved = check_agreement(env, &f, fired, &o);
  if (!ow) check_load_fault(env, ctx, t, m, p);
  const char *cls = classify(&f, saved, loaded, which);
  retry_clean(env, ctx, t, m, p);
  if (env->rank == 0) record_result(env, t, p, &f, fired, saved, loaded, cls);
}

/* Rank 0 removes trial t-1 (every rank is past it) to keep the disk small. */
static void drop_earlier(const fc_env *env, long t) {
  if (env->rank != 0 || t == 0) return;
  char cmd[4300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/t%05ld'", env->dir, t - 1);
  FC_CHECK(system(cmd) == 0, "cannot remove trial %ld", t - 1);
}

void fc_trial_no_context(const fc_env *env, long t, dcp_status rc, const char *msg) {
  paths p;
  paths_of(env, t, &p);
  char fired[4300];
  fired_path(env, env->rank, fired, sizeof fired);
  unlink(fired);
  if (fault_rank(env, t) == env->rank) {
    /* the fault is still recorded, though it never got a chance to fire */
    char path[4300], *probe;
    trial_file(&p, "probe", env->rank, path, sizeof path);
    FC_CHECK((probe = fc_read_file(path)), "no probe file %s", path);
    fc_fault f;
    choose_fault(env, t, probe, &f);
    free(probe);
    trial_file(&p, "fault", -1, path, sizeof path);
    fc_write_file(path, f.spec);
  }
  write_status(&p, env->rank, rc, msg);
}

void fc_trial(const fc_env *env, dcp_ctx *ctx, long t, unsigned phases) {
  fc_cur_trial = t;
  fc_model m;
  fc_model_make(&m, env->seed * 1000003u + (uint64_t)t, env->world);
  paths p;
  paths_of(env, t, &p);
  if (phases & FC_PHASE_PREV) drop_earlier(env, t);
  if (phases & FC_PHASE_PREV) phase_prev(env, ctx, t, &m, &p);
  if (phases & FC_PHASE_FAULT) phase_fault(env, ctx, t, &m, &p);
  if (phases & FC_PHASE_CHECK) phase_check(env, ctx, t, &m, &p);
  fc_cur_trial = -1;
}
