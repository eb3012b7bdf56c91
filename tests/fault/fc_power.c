/* fc_power.c — the power-loss campaign (docs/reliability.md, "Power
 * loss"): seeded trials that run a sequence of saves through the fault
 * plugin with its journal on, cut the power after some operation, rebuild
 * the disk a real power loss could leave (fc_crash.c) and load it with a
 * clean context, byte for byte against the model saved at each step.
 *
 *   fault_campaign power --seq single|overwrite|steps [--async 1]
 *                  [--world W] [--strict-overwrite 0|1] [--strict-mkdir 0|1]
 *                  [--in-place 0|1] [--lying-fs fsync|syncdir] [--variants V]
 *                  --dir D --plugins P [--trials N] [--seed S]
 *
 * Sequences (--seq):
 *   single     one save into a fresh directory
 *   overwrite  a save, then a second one with DCP_SAVE_OVERWRITE over it
 *   steps      2..4 saves into step-1, step-2, ... (a training manager),
 *              resuming from the newest step that loads
 * --in-place 1 overwrites with DCP_SAVE_IN_PLACE too (the old checkpoint
 * is un-committed first: LOST-OLD is then its documented price, so run it
 * with --strict-overwrite 0; WRONG still fails). --async saves through the
 * writer process; --world W > 1 saves with W detached ranks (no
 * collective: each commits its own part; the ranks of a generation save
 * one after the other, in a random order, and half the trials keep the
 * REPLICATED item the same across generations, as a config that does not
 * change between steps, so that a merge of two saves' parts is not caught
 * by that item alone), loaded whole by a world of one (the PER_RANK items
 * are left out: they need the saving world).
 *
 * Each trial: (1) a probe run of the sequence to its end, whose journal
 * must describe exactly the files on disk and whose every save succeeds;
 * (2) a run in a fresh directory whose power is cut after operation k,
 * k uniform over the probe's operations (or never): the process dies in
 * the plugin, and every process sharing the journal dies at its next
 * storage call; its journal too must describe the disk; (3) two more cut
 * points replayed from the probe's journal. Each cut is checked as the
 * disk stands (the processes died, the page cache survived) and as V
 * random power-loss states. One state in two also gets a load of a
 * directory that loads, through the fault plugin with one flaky storage
 * operation (an EIO, a short read, zeros or garbage in the buffer, a
 * flipped bit, a lying file size).
 * Only the posix inner plugin: the model knows one flat directory a root.
 *
 * The oracle, per checkpoint directory, at the cut (a save "returned" when
 * its end mark, written right after it returned, precedes the cut):
 *   - the newest save into it returned OK: it loads exactly (else
 *     LOST-NEW: a power loss took a checkpoint whose save had returned);
 *   - it had begun and not returned: it loads exactly, or the checkpoint
 *     the directory held before it (an earlier save that had returned)
 *     loads exactly, or — only when there was none — the load fails with a
 *     status and a message; a failure although an earlier save had
 *     committed there is LOST-OLD, a failure of the promise unless
 *     --strict-overwrite 0;
 *   - OK with any other bytes is WRONG, always a failure.
 * A load under a storage fault fails with a message or returns exactly
 * what the clean load returned.
 *
 * --lying-fs fsync|syncdir checks the oracle itself: the plugin ignores
 * those syncs, so saves that returned OK must be seen lost (LOST-NEW is
 * then expected, and required at least once, and LOST-OLD allowed); WRONG
 * still fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fc.h"

#define MAX_GENS 4
#define MAX_SAVES (MAX_GENS * FC_MAX_WORLD)
#define EXIT_POWER_OFF 42 /* a run's process that saw the power go off */
#define MAX_FAILS 12      /* failures described in full */

/* ---- the sequence of a trial ----------------------------------------------------- */

typedef struct pgen {
  int dir;
  uint32_t gen;
  uint32_t flags;
  int first, count; /* its saves (one per rank) */
} pgen;

typedef struct psave {
  int gen; /* index into gens */
  int rank;
} psave;

typedef struct pseq {
  int ndirs;
  char dirs[MAX_GENS][16];
  int ngens;
  pgen g[MAX_GENS];
  int nsaves;
  psave s[MAX_SAVES];
} pseq;

static void make_seq(const fc_power_args *a, fc_rng *r, pseq *q) {
  uint32_t overwrite = DCP_SAVE_OVERWRITE;
#ifdef DCP_SAVE_IN_PLACE
  if (a->in_place) overwrite |= DCP_SAVE_IN_PLACE;
#else
  FC_CHECK(!a->in_place, "--in-place: this libdcp has no DCP_SAVE_IN_PLACE");
#endif
  memset(q, 0, sizeof *q);
  int n = !strcmp(a->seq, "single") ? 1 : !strcmp(a->seq, "overwrite") ? 2
                                                                       : (int)fc_range(r, 2, 4);
  bool steps = !strcmp(a->seq, "steps");
  q->ndirs = steps ? n : 1;
  for (int d = 0; d < q->ndirs; d++)
    snprintf(q->dirs[d], sizeof q->dirs[d], steps ? "step-%d" : "ckpt", d + 1);
  for (int k = 0; k < n; k++) {
    pgen *g = &q->g[q->ngens++];
    *g = (pgen){.dir = steps ? k : 0, .gen = (uint32_t)k + 1,
                .flags = !steps && k > 0 ? overwrite : 0, .first = q->nsaves,
                .count = a->world};
    int order[FC_MAX_WORLD];
    for (int i = 0; i < a->world; i++) order[i] = i;
    for (int i = a->world - 1; i > 0; i--) {
      int k2 = (int)fc_range(r, 0, (uint64_t)i), tmp = order[i];
      order[i] = order[k2], order[k2] = tmp;
    }
    for (int i = 0; i < a->world; i++) q->s[q->nsaves++] = (psave){k, order[i]};
  }
}

/* ---- a run (in a forked child) ----------------------------------------------------- */

static dcp_ctx *run_ctx(const fc_power_args *a, const char *opts, int rank) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = "fault";
  cfg.storage_options = opts;
  cfg.plugin_path = a->plugins;
  cfg.timeout_ms = 60000;
  if (a->world > 1) cfg.rank = rank, cfg.world_size = a->world; /* detached */
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  FC_CHECK(rc == DCP_OK, "context: %s (%s)", dcp_strerror(rc), dcp_ctx_create_error());
  return ctx;
}

/* The saves of q into <run>/ck, journaled into <run>/journal, the power
 * cut after operation cut (0: never). Marks: "begin I" before save I,
 * "end I STATUS" after it returned. */
static void run_child(const fc_power_args *a, const fc_model *m, const pseq *q, const char *run,
                      uint64_t cut) {
  char ctl[4300], journal[4300], opts[4400], text[4600];
  snprintf(ctl, sizeof ctl, "%s/ctl", run);
  snprintf(journal, sizeof journal, "%s/journal", run);
  snprintf(text, sizeof text, "journal=%s\ncut=%llu\n%s%s\n", journal, (unsigned long long)cut,
           a->lying_fs ? "lie=" : "", a->lying_fs ? a->lying_fs : "");
  fc_write_file(ctl, text);
  snprintf(opts, sizeof opts, "inner=posix,ctl=%s", ctl);
  dcp_ctx *ctx[FC_MAX_WORLD] = {0};
  for (int r = 0; r < a->world; r++) ctx[r] = run_ctx(a, opts, r);
  for (int i = 0; i < q->nsaves; i++) {
    const pgen *g = &q->g[q->s[i].gen];
    char path[4400];
    snprintf(path, sizeof path, "%s/ck/%s", run, q->dirs[g->dir]);
    snprintf(text, sizeof text, "begin %d", i);
    if (!fc_journal_mark(journal, text)) _exit(EXIT_POWER_OFF);
    dcp_status rc = fc_save(ctx[q->s[i].rank], m, g->gen, path, g->flags, a->async);
    snprintf(text, sizeof text, "end %d %d %.3000s", i, (int)rc,
             rc ? dcp_ctx_last_error(ctx[q->s[i].rank]) : "");
    if (!fc_journal_mark(journal, text)) _exit(EXIT_POWER_OFF);
  }
  for (int r = 0; r < a->world; r++) {
    dcp_async_shutdown(ctx[r]);
    dcp_ctx_free(ctx[r]);
  }
  exit(0); /* not _exit: leak checks run at exit */
}

/* Run q in <run> in a child; returns whether the power went off. */
static bool run(const fc_power_args *a, const fc_model *m, const pseq *q, const char *run_dir,
                uint64_t cut) {
  char path[4300];
  fc_mkdir(run_dir);
  snprintf(path, sizeof path, "%s/ck", run_dir);
  fc_mkdir(path);
  snprintf(path, sizeof path, "%s/journal", run_dir);
  fc_journal_prepare(path);
  fflush(NULL);
  pid_t pid = fork();
  FC_CHECK(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) run_child(a, m, q, run_dir, cut);
  int ws;
  FC_CHECK(waitpid(pid, &ws, 0) == pid, "waitpid: %s", strerror(errno));
  bool off = fc_journal_power_off(path);
  bool killed = WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL;
  bool clean = WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
  bool saw_off = WIFEXITED(ws) && WEXITSTATUS(ws) == EXIT_POWER_OFF;
  FC_CHECK(off ? (killed || saw_off || clean) : clean,
           "the run in %s (cut %llu) ended with status 0x%x%s", run_dir, (unsigned long long)cut,
           ws, off ? " after the power cut" : "");
  return off;
}

/* ---- the state at a cut ------------------------------------------------------------ */

typedef struct gstate {
  bool begun, done;
  uint64_t end_seq; /* the last of its end marks */
  bool failed;      /* a save returned an error (there is no fault but the cut) */
  char why[400];
} gstate;

static void gen_states(const fc_journal *j, uint64_t cut, const pseq *q, gstate *gs) {
  const char *texts[2 * MAX_SAVES + 4];
  uint64_t seqs[2 * MAX_SAVES + 4];
  size_t n = fc_journal_marks(j, cut, texts, seqs, 2 * MAX_SAVES + 4);
  FC_CHECK(n <= 2 * (size_t)q->nsaves, "%zu marks for %d saves", n, q->nsaves);
  int ended_ok[MAX_GENS] = {0};
  memset(gs, 0, MAX_GENS * sizeof *gs);
  for (size_t k = 0; k < n; k++) {
    int i = -1, st = 0, used = 0;
    if (sscanf(texts[k], "begin %d", &i) == 1) {
      FC_CHECK(i >= 0 && i < q->nsaves, "bad mark '%s'", texts[k]);
      gs[q->s[i].gen].begun = true;
    } else {
      FC_CHECK(sscanf(texts[k], "end %d %d %n", &i, &st, &used) == 2 && i >= 0 && i < q->nsaves,
               "bad mark '%s'", texts[k]);
      gstate *g = &gs[q->s[i].gen];
      if (st == DCP_OK) {
        ended_ok[q->s[i].gen]++;
        if (seqs[k] > g->end_seq || !g->end_seq) g->end_seq = seqs[k];
      } else if (!g->failed) {
        g->failed = true;
        snprintf(g->why, sizeof g->why, "save %d (rank %d) failed: %s (%s)", i, q->s[i].rank,
                 dcp_strerror((dcp_status)st), texts[k] + used);
      }
    }
  }
  for (int g = 0; g < q->ngens; g++) gs[g].done = ended_ok[g] == q->g[g].count;
}

/* ---- the campaign ------------------------------------------------------------------- */

enum { O_NEW, O_OLD, O_ERROR, O_LOST_OLD, O_LOST_NEW, O_WRONG, O_NOMSG, O_COUNT };
static const char *const outcome_names[O_COUNT] = {
    "new", "old", "error", "LOST-OLD", "LOST-NEW", "WRONG", "error-without-message"};

enum { LF_ACTIONS = 9 };
static const char *const lf_specs[LF_ACTIONS] = {"mount:eio",    "open:eio",      "size:eio",
                                                 "size:lie",     "read:eio",      "read:short",
                                                 "read:zero",    "read:garbage",  "read:flip"};

typedef struct camp {
  const fc_power_args *a;
  dcp_ctx *lctx, *fctx; /* plain posix; the fault plugin (load faults) */
  char lctl[4300];
  long trial;
  fc_model m;
  pseq q;
  char tdir[4200], crash[4300];
  /* counters */
  long states, real_cuts, real_fired, replays;
  long out[O_COUNT], lost_old_uncommit, failed_saves;
  long mgr_inflight, mgr_last, mgr_older, mgr_none;
  long lf[LF_ACTIONS][3]; /* injected & fired, refused, recovered */
  long lf_wrong, lf_unfired;
  long fails;
  uint64_t ops_sum;
} camp;

static void fail_note(camp *c, const char *what, const char *detail) {
  c->fails++;
  if (c->fails <= MAX_FAILS)
    printf("  FAIL trial %ld (seed %llu): %s\n    %s\n", c->trial, (unsigned long long)c->a->seed,
           what, detail);
  else if (c->fails == MAX_FAILS + 1)
    printf("  (further failures counted, not shown)\n");
  fflush(stdout);
}

static bool is_metadata_name(const char *name) {
  int r, end = 0;
  if (!strcmp(name, ".metadata")) return true;
  return sscanf(name, "%d.metadata%n", &r, &end) == 1 && name[end] == '\0';
}

static size_t count_lines(const char *path) {
  char *text = fc_read_file(path);
  size_t n = 0;
  for (const char *p = text; p && *p; p++) n += *p == '\n';
  free(text);
  return n;
}

/* A load of path through the fault plugin with one flaky operation: it
 * fails with a message, or returns exactly what the clean load did. */
static void load_fault(camp *c, fc_rng *r, const char *path, const uint32_t *gens, int n,
                       dcp_status clean, int clean_which, const char *desc) {
  char probe_path[4400], fired_path[4400], spec[128];
  snprintf(probe_path, sizeof probe_path, "%s.probe.0", c->lctl);
  snprintf(fired_path, sizeof fired_path, "%s.fired", c->lctl);
  unlink(probe_path);
  fc_write_file(c->lctl, "probe=1\n");
  int which = -1;
  dcp_status rc = fc_load_match(c->fctx, &c->m, path, gens, n, &which);
  unlink(c->lctl);
  FC_CHECK(rc == clean && (rc != DCP_OK || which == clean_which),
           "the fault plugin without a fault changed a load of %s: %s, not %s", path,
           dcp_strerror(rc), dcp_strerror(clean));
  char *probe = fc_read_file(probe_path);
  if (!probe) return; /* the backend never opened (no directory): nothing to fault */
  int avail[LF_ACTIONS], na = 0;
  uint64_t counts[LF_ACTIONS];
  for (int k = 0; k < LF_ACTIONS; k++) {
    char kind[16];
    snprintf(kind, sizeof kind, "%.*s", (int)(strchr(lf_specs[k], ':') - lf_specs[k]),
             lf_specs[k]);
    counts[k] = fc_probe_count(probe, kind);
    if (counts[k]) avail[na++] = k;
  }
  free(probe);
  if (!na) return;
  int k = avail[fc_range(r, 0, (uint64_t)na - 1)];
  const char *colon = strchr(lf_specs[k], ':');
  snprintf(spec, sizeof spec, "fail=%.*s:%llu:%s", (int)(colon - lf_specs[k]), lf_specs[k],
           (unsigned long long)fc_range(r, 1, counts[k]), colon + 1);
  fc_write_file(c->lctl, spec);
  size_t notes = count_lines(fired_path);
  rc = fc_load_match(c->fctx, &c->m, path, gens, n, &which);
  unlink(c->lctl);
  if (count_lines(fired_path) == notes) {
    c->lf_unfired++; /* a merged read retried, say: the n-th read never came */
    return;
  }
  c->lf[k][0]++;
  char detail[8192];
  if (rc == DCP_OK) {
    if (clean == DCP_OK && which == clean_which) {
      c->lf[k][2]++;
      return;
    }
    c->lf_wrong++;
    snprintf(detail, sizeof detail, "%s with %s loaded %s (the clean load: %s, generation #%d); %.3000s",
             path, spec, which < 0 ? "wrong bytes" : "another generation", dcp_strerror(clean),
             clean_which, desc);
    fail_note(c, "WRONG: a load under a storage fault returned OK with other bytes", detail);
    return;
  }
  if (!dcp_ctx_last_error(c->fctx)[0]) {
    c->lf_wrong++;
    snprintf(detail, sizeof detail, "%s with %s: %s and no message", path, spec, dcp_strerror(rc));
    fail_note(c, "a load under a storage fault failed without a message", detail);
    return;
  }
  c->lf[k][1]++;
}

/* Check one crash state: the directories of the sequence under c->crash. */
static void check_state(camp *c, const fc_journal *j, uint64_t cut, const char *base,
                        fc_rng *rng, fc_rng *pick) {
  char desc[3000];
  fc_rmtree(c->crash);
  fc_crash_build(j, cut, base, c->crash, rng, c->a->strict_mkdir, desc, sizeof desc);
  c->states++;
  gstate gs[MAX_GENS];
  gen_states(j, cut, &c->q, gs);
  for (int g = 0; g < c->q.ngens; g++)
    if (gs[g].failed) {
      c->failed_saves++;
      fail_note(c, "a save failed with no fault but the power cut", gs[g].why);
    }
  /* one state in two also gets a load with a flaky operation, of a
   * directory that loads (one that does not would fail all the same) */
  bool lf_here = fc_range(pick, 0, 1) == 0;
  int lf_dir = -1, lf_any = (int)fc_range(pick, 0, (uint64_t)c->q.ndirs - 1);
  dcp_status lf_s = DCP_OK;
  int lf_which = -1, lf_nc = 0;
  uint32_t lf_cands[2];
  int newest_ok_dir = -1, newest_ok_gen = -1, last_done_dir = -1;
  for (int d = 0; d < c->q.ndirs; d++) {
    int newest = -1, prior = -1;
    for (int g = 0; g < c->q.ngens; g++) {
      if (c->q.g[g].dir != d || !gs[g].begun) continue;
      if (newest >= 0 && gs[newest].done) prior = newest;
      newest = g;
    }
    if (newest >= 0 && gs[newest].done) last_done_dir = d;
    uint32_t cands[2] = {0, 0};
    int nc = 0;
    if (newest >= 0) cands[nc++] = c->q.g[newest].gen;
    if (prior >= 0) cands[nc++] = c->q.g[prior].gen;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->crash, c->q.dirs[d]);
    int which = -1;
    dcp_status rc = fc_load_match(c->lctx, &c->m, path, cands, nc, &which);
    const char *msg = dcp_ctx_last_error(c->lctx);
    int o;
    bool new_done = newest >= 0 && gs[newest].done;
    if (rc == DCP_OK) {
      if (newest < 0 || which < 0)
        o = O_WRONG;
      else if (which == 0)
        o = O_NEW;
      else
        o = new_done ? O_LOST_NEW : O_OLD;
    } else if (!msg[0]) {
      o = O_NOMSG;
    } else {
      o = new_done ? O_LOST_NEW : prior >= 0 ? O_LOST_OLD : O_ERROR;
    }
    c->out[o]++;
    if (rc == DCP_OK && which >= 0 && d > newest_ok_dir && newest >= 0)
      newest_ok_dir = d, newest_ok_gen = which == 0 ? newest : prior;
    char detail[4000];
    snprintf(detail, sizeof detail, "%s: load %s%s%s; newest save generation %d %s, previous "
             "committed generation %d; state: %s",
             c->q.dirs[d], dcp_strerror(rc), rc ? " — " : "", rc ? msg : "",
             newest >= 0 ? (int)c->q.g[newest].gen : 0,
             newest < 0 ? "(none begun)" : new_done ? "(returned OK)" : "(in flight)",
             prior >= 0 ? (int)c->q.g[prior].gen : 0, desc);
    if (o == O_LOST_OLD) {
      char rootp[4400];
      snprintf(rootp, sizeof rootp, "%s/%s", base, c->q.dirs[d]);
      bool uncommit = fc_journal_removed_after(j, cut, rootp, gs[prior].end_seq, is_metadata_name);
      c->lost_old_uncommit += uncommit;
      if (c->a->strict_overwrite && !c->a->lying_fs)
        fail_note(c, uncommit ? "LOST-OLD: no checkpoint after the crash, although one had "
                                "committed (the overwrite had removed its metadata: in-place "
                                "un-commit)"
                              : "LOST-OLD: no checkpoint after the crash, although one had "
                                "committed",
                  detail);
    } else if (o == O_LOST_NEW && !c->a->lying_fs) {
      fail_note(c, "LOST-NEW: a save had returned OK, but after the power loss it does not load "
                "as saved", detail);
    } else if (o == O_WRONG) {
      fail_note(c, c->a->world > 1 ? "WRONG: the load returned OK with bytes of no generation "
                                     "saved there (detached ranks: parts of two saves merged?)"
                                   : "WRONG: the load returned OK with bytes of no generation "
                                     "saved there",
                detail);
    } else if (o == O_NOMSG) {
      fail_note(c, "the load failed without a message", detail);
    }
    if (lf_here && rc == DCP_OK && which >= 0 && (lf_dir < 0 || d == lf_any))
      lf_dir = d, lf_s = rc, lf_which = which, lf_nc = nc, memcpy(lf_cands, cands, sizeof cands);
  }
  if (lf_dir >= 0) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", c->crash, c->q.dirs[lf_dir]);
    load_fault(c, pick, path, lf_cands, lf_nc, lf_s, lf_which, desc);
  }
  if (!strcmp(c->a->seq, "steps")) {
    /* the manager resumes from the newest step that loads */
    if (newest_ok_dir < 0)
      c->mgr_none++;
    else if (!gs[newest_ok_gen].done)
      c->mgr_inflight++;
    else if (newest_ok_dir == last_done_dir)
      c->mgr_last++;
    else
      c->mgr_older++;
  }
}

static void check_disk(const fc_journal *j, const char *base, const char *scratch) {
  char desc[3000], why[4600];
  fc_rmtree(scratch);
  fc_crash_build(j, FC_CUT_ALL, base, scratch, NULL, false, desc, sizeof desc);
  FC_CHECK(fc_tree_same(scratch, base, why, sizeof why),
           "the journal does not describe the disk of %s: %s", base, why);
  fc_rmtree(scratch);
}

static void trial(camp *c, long t) {
  const fc_power_args *a = c->a;
  c->trial = fc_cur_trial = t;
  fc_model_make(&c->m, a->seed * 1000003u + (uint64_t)t, a->world);
  fc_rng r = {a->seed * 0x100000001b3ull + (uint64_t)t * 0x9e3779b97f4a7c15ull + 7};
  c->m.static_cfg = a->world > 1 && fc_range(&r, 0, 1);
  make_seq(a, &r, &c->q);
  snprintf(c->tdir, sizeof c->tdir, "%s/t%05ld", a->dir, t);
  snprintf(c->crash, sizeof c->crash, "%s/crash", c->tdir);
  fc_rmtree(c->tdir);
  fc_mkdir(c->tdir);
  char probe[4400], real[4400], base[4500], jpath[4500], scratch[4400];
  snprintf(probe, sizeof probe, "%s/probe", c->tdir);
  snprintf(real, sizeof real, "%s/run", c->tdir);
  snprintf(scratch, sizeof scratch, "%s/model", c->tdir);

  /* (1) the probe: the whole sequence, no cut */
  FC_CHECK(!run(a, &c->m, &c->q, probe, 0), "the probe run lost power");
  snprintf(jpath, sizeof jpath, "%s/journal", probe);
  fc_journal *jp = fc_journal_load(jpath);
  snprintf(base, sizeof base, "%s/ck", probe);
  check_disk(jp, base, scratch);
  gstate gs[MAX_GENS];
  gen_states(jp, FC_CUT_ALL, &c->q, gs);
  for (int g = 0; g < c->q.ngens; g++)
    FC_CHECK(gs[g].done, "a clean save failed: %s", gs[g].why[0] ? gs[g].why : "no end mark");
  uint64_t n = fc_journal_ops(jp);
  c->ops_sum += n;

  /* (2) a real cut */
  uint64_t k = fc_range(&r, 1, n + 1);
  bool off = run(a, &c->m, &c->q, real, k <= n ? k : 0);
  snprintf(jpath, sizeof jpath, "%s/journal", real);
  fc_journal *jr = fc_journal_load(jpath);
  FC_CHECK(!off || fc_journal_ops(jr) == k, "the power went off after %llu operations, not %llu",
           (unsigned long long)fc_journal_ops(jr), (unsigned long long)k);
  snprintf(base, sizeof base, "%s/ck", real);
  check_disk(jr, base, scratch);
  c->real_cuts++;
  c->real_fired += off;
  uint64_t cut = off ? k : FC_CUT_ALL;
  check_state(c, jr, cut, base, NULL, &r);
  for (int v = 0; v < a->variants; v++) check_state(c, jr, cut, base, &r, &r);
  fc_journal_free(jr);

  /* (3) cuts replayed from the probe's journal */
  snprintf(base, sizeof base, "%s/ck", probe);
  for (int rep = 0; rep < 2; rep++) {
    uint64_t kk = fc_range(&r, 0, n + 1);
    c->replays++;
    for (int v = 0; v < a->variants; v++)
      check_state(c, jp, kk <= n ? kk : FC_CUT_ALL, base, &r, &r);
  }
  fc_journal_free(jp);
  fc_rmtree(c->tdir);
  fc_cur_trial = -1;
}

static dcp_ctx *load_ctx(const fc_power_args *a, const char *storage, const char *opts) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = storage;
  cfg.storage_options = opts;
  cfg.plugin_path = a->plugins;
  cfg.timeout_ms = 60000;
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  FC_CHECK(rc == DCP_OK, "context: %s (%s)", dcp_strerror(rc), dcp_ctx_create_error());
  return ctx;
}

int fc_power_campaign(const fc_power_args *a) {
  FC_CHECK(!strcmp(a->seq, "single") || !strcmp(a->seq, "overwrite") || !strcmp(a->seq, "steps"),
           "--seq single|overwrite|steps, not '%s'", a->seq);
  FC_CHECK(a->world >= 1 && a->world <= FC_MAX_WORLD && !(a->async && a->world > 1),
           "power: --world 1..%d, and --async with one rank only", FC_MAX_WORLD);
  FC_CHECK(a->variants >= 1 && a->variants <= 16, "--variants 1..16");
  FC_CHECK(!a->lying_fs || !strcmp(a->lying_fs, "fsync") || !strcmp(a->lying_fs, "syncdir"),
           "--lying-fs fsync|syncdir");
  camp c = {.a = a};
  snprintf(c.lctl, sizeof c.lctl, "%s/lctl", a->dir);
  char opts[4400];
  snprintf(opts, sizeof opts, "inner=posix,ctl=%s", c.lctl);
  c.lctx = load_ctx(a, "posix", NULL);
  c.fctx = load_ctx(a, "fault", opts);
  const char *how = a->world > 1 ? "detached ranks" : a->async ? "async" : "sync";
  printf("power-loss campaign: %s%s, %s, %d rank(s), %ld trials, seed %llu (DCP_TEST_SEED "
         "replays), %s overwrite oracle, %s mkdir\n",
         a->seq, a->in_place ? " in place" : "", how, a->world, a->trials,
         (unsigned long long)a->seed, a->strict_overwrite ? "strict" : "lenient",
         a->strict_mkdir ? "strict" : "lenient");
  fflush(stdout);
  for (long t = 0; t < a->trials; t++) trial(&c, t);
  dcp_ctx_free(c.lctx);
  dcp_ctx_free(c.fctx);

  long lf_total = 0, lf_ref = 0, lf_rec = 0;
  for (int k = 0; k < LF_ACTIONS; k++)
    lf_total += c.lf[k][0], lf_ref += c.lf[k][1], lf_rec += c.lf[k][2];
  printf("power-loss campaign (%s%s, %s, %d rank(s), seed %llu): %ld trials, %.1f storage "
         "operations a run; %ld crash states checked (%ld real cuts, %ld of them before the end, "
         "%ld cuts replayed from the probes' journals, %d power-loss draws a cut)\n",
         a->seq, a->in_place ? " in place" : "", how, a->world, (unsigned long long)a->seed,
         a->trials, a->trials ? (double)c.ops_sum / (double)a->trials : 0.0, c.states, c.real_cuts,
         c.real_fired, c.replays, a->variants);
  printf("  outcomes per checkpoint directory:");
  for (int o = 0; o < O_COUNT; o++) printf("%s %ld %s", o ? "," : "", c.out[o], outcome_names[o]);
  printf("\n    (error: nothing had committed there; LOST-OLD%s: an error although an earlier "
         "save had committed there, %ld of them after the overwrite had removed its metadata; "
         "LOST-NEW: a save that had returned OK lost; WRONG: OK with other bytes)\n",
         a->strict_overwrite ? " [failures]" : " [allowed: --strict-overwrite 0]",
         c.lost_old_uncommit);
  if (!strcmp(a->seq, "steps"))
    printf("  manager: resumed %ld times from the step in flight, %ld from the last step whose "
           "save returned, %ld from an older one, %ld found nothing to resume\n",
           c.mgr_inflight, c.mgr_last, c.mgr_older, c.mgr_none);
  printf("  load faults: %ld fired (", lf_total);
  for (int k = 0; k < LF_ACTIONS; k++)
    printf("%s%s %ld", k ? ", " : "", lf_specs[k], c.lf[k][0]);
  printf("), %ld refused with a message, %ld recovered byte-exact, %ld wrong; %ld did not fire\n",
         lf_ref, lf_rec, c.lf_wrong, c.lf_unfired);
  if (c.failed_saves) printf("  %ld saves failed with no fault but the cut\n", c.failed_saves);
  if (a->lying_fs && !c.out[O_LOST_NEW])
    fail_note(&c, "the file system ignored every sync, yet no checkpoint was lost: the oracle "
              "cannot see a loss", a->lying_fs);
  else if (a->lying_fs)
    printf("  a file system that ignores %s: %ld checkpoints lost after their save returned, "
           "as it must be\n", a->lying_fs, c.out[O_LOST_NEW]);
  printf("  %ld failure%s\n", c.fails, c.fails == 1 ? "" : "s");
  fflush(stdout);
  return c.fails ? 1 : 0;
}
