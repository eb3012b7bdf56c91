/* attack_manager — attacks on the checkpoint manager's root (one rank):
 *
 *   attack_manager orphan --dir D    a killed job's orphaned async writer
 *                 commits its step (100) after the restarted job opened
 *                 the root and resumed an older one (10); the restarted
 *                 job's next durable steps (50, 60) must survive their own
 *                 retention, `latest` must name a committed step, and the
 *                 orphan's step must load exact
 *   attack_manager parts --dir D     saves (sync, async) into incomplete steps
 *                 that hold one rank's part of a crashed uncoordinated save
 *   attack_manager chdir --dir D     a relative root, then the working
 *                 directory changes: steps, latest and retention stay in the
 *                 root that was opened
 *   attack_manager corrupt-newest --dir D   the newest step's .metadata goes
 *                 corrupt: resume takes the one before, retention never
 *                 deletes it, no save goes into it; then the newest step's
 *                 data goes bad: a verifying resume falls back
 *   attack_manager zombie-lease --dir D   (disabled: src/runtime/lease.c)
 *                 a job that held the root is killed and not reaped yet: a
 *                 new manager should take its lease at once
 *   attack_manager hand --dir D      entries made by hand: step-N a file,
 *                 a directory of garbage, a corrupt .metadata, another
 *                 job's checkpoint; `latest`, `latest.tmp` and `.plan` as
 *                 links to files outside the root; a save into an existing
 *                 step; a second manager: nothing outside the root changes,
 *                 no foreign or corrupt step is deleted or loaded, `latest`
 *                 ends a regular file naming the newest durable step
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "async/async_int.h"
#include "dcp.h"
#include "mgr_kit.h"

#define OKM(expr, ctx) \
  MK_CHECK((expr) == DCP_OK, "%s: %s", #expr, dcp_ctx_last_error(ctx))

static const char *g_dir;

/* The state of step in the manager's root, by a fresh listing. */
static dcp_step_state state_of(dcp_manager *m, int64_t step, int *found) {
  dcp_step_info info[64];
  size_t n = 0;
  MK_CHECK(dcp_manager_list(m, info, 64, &n) == DCP_OK && n <= 64, "list");
  for (size_t i = 0; i < n; i++)
    if (info[i].step == step) {
      *found = 1;
      return info[i].state;
    }
  *found = 0;
  return DCP_STEP_INCOMPLETE;
}

static int committed(dcp_manager *m, int64_t step) {
  int found;
  dcp_step_state s = state_of(m, step, &found);
  return found && s == DCP_STEP_COMMITTED;
}

/* The step `latest` names (-1: no such file or not "step-N\n"). */
static int64_t latest_of(const char *root) {
  char p[700], buf[64] = "";
  snprintf(p, sizeof p, "%s/latest", root);
  struct stat sb;
  if (lstat(p, &sb) != 0 || !S_ISREG(sb.st_mode)) return -1;
  FILE *f = fopen(p, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  long long v;
  return sscanf(buf, "step-%lld\n", &v) == 1 ? (int64_t)v : -1;
}

/* Load step through m and check its values. */
static void load_is(dcp_manager *m, dcp_ctx *ctx, int64_t step) {
  mk_model md;
  mk_model_init(&md, ctx);
  OKM(dcp_manager_load(m, step, md.st, NULL), ctx);
  MK_CHECK(mk_model_is(&md, step), "step %" PRId64 " loads other values", step);
  mk_model_free(&md);
}

static void save_step(dcp_manager *m, dcp_ctx *ctx, mk_model *md, int64_t step) {
  mk_model_fill(md, step);
  OKM(dcp_manager_save(m, step, md->st, NULL), ctx);
}

/* A manager of root on ctx: keep_last as given, quiet. */
static dcp_manager *open_manager(dcp_ctx *ctx, const char *root, uint32_t keep_last) {
  dcp_manager_options mo;
  dcp_manager_options_init(&mo);
  mo.keep_last = keep_last;
  mo.flags = DCP_MANAGER_QUIET;
  dcp_manager *m;
  OKM(dcp_manager_open(ctx, root, &mo, &m), ctx);
  return m;
}

/* ---- orphan ------------------------------------------------------------------ */

/* The killed job: step 10 durable, step 100 staged (its writer delayed),
 * the writer's pid into pidfile, then SIGKILL. */
static void doomed_job(const char *root, const char *pidfile) {
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  dcp_manager *m = open_manager(ctx, root, 1);
  mk_model md;
  mk_model_init(&md, ctx);
  save_step(m, ctx, &md, 10);
  setenv("DCP_WRITER_DELAY_MS", "1500", 1); /* the writer is spawned now */
  mk_model_fill(&md, 100);
  OKM(dcp_manager_save_async(m, 100, md.st, NULL), ctx);
  FILE *f = fopen(pidfile, "w");
  MK_CHECK(f, "pidfile");
  fprintf(f, "%d\n", (int)dcpi_async_writer_pid(ctx));
  fclose(f);
  raise(SIGKILL);
}

static int run_orphan(void) {
  char root[600], pidfile[600], marker[700];
  snprintf(root, sizeof root, "%s/root", g_dir);
  snprintf(pidfile, sizeof pidfile, "%s/writer.pid", g_dir);
  snprintf(marker, sizeof marker, "%s/step-100/.metadata", root);
  pid_t job = fork();
  MK_CHECK(job >= 0, "fork");
  if (job == 0) doomed_job(root, pidfile);
  int status;
  MK_CHECK(waitpid(job, &status, 0) == job && WIFSIGNALED(status), "the doomed job");
  FILE *f = fopen(pidfile, "r");
  int wpid = 0;
  MK_CHECK(f && fscanf(f, "%d", &wpid) == 1 && wpid > 0, "the orphan's pid");
  fclose(f);
  /* hold the orphan until the restarted job has resumed */
  MK_CHECK(kill(wpid, SIGSTOP) == 0, "stop the orphan");
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  dcp_manager *m = open_manager(ctx, root, 1);
  int64_t step;
  OKM(dcp_manager_resume(m, 0, &step), ctx);
  MK_CHECK(step == 10, "resumed %" PRId64 ", not 10 (the orphan committed early)", step);
  load_is(m, ctx, 10);
  /* the orphan goes on and commits step 100 */
  MK_CHECK(kill(wpid, SIGCONT) == 0, "resume the orphan");
  for (int i = 0; i < 600 && access(marker, F_OK) != 0; i++) usleep(50000);
  MK_CHECK(access(marker, F_OK) == 0, "the orphan never committed step 100");
  mk_model md;
  mk_model_init(&md, ctx);
  for (int64_t s = 50; s <= 60; s += 10) {
    save_step(m, ctx, &md, s);
    MK_CHECK(committed(m, s), "step %" PRId64 " was durable and is gone", s);
    MK_CHECK(latest_of(root) == s, "latest names %" PRId64 ", not %" PRId64, latest_of(root), s);
    load_is(m, ctx, s);
  }
  MK_CHECK(committed(m, 100), "the orphan's step 100");
  load_is(m, ctx, 100);
  MK_CHECK(!committed(m, 50), "step 50: keep_last 1 keeps only the newest of this job");
  mk_model_free(&md);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  printf("orphan: steps 50 and 60 survive their retention beside the orphan's step 100\n");
  return 0;
}

/* ---- hand-made entries -------------------------------------------------------- */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  MK_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "write %s", path);
}

static int same_text(const char *path, const char *text) {
  char buf[256] = "";
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return !strcmp(buf, text);
}

static int run_hand(void) {
  char root[600], out[600], p[800], q[800];
  snprintf(root, sizeof root, "%s/root", g_dir);
  snprintf(out, sizeof out, "%s/outside", g_dir);
  mkdir(root, 0755);
  mkdir(out, 0755);
  static const char *const victims[] = {"latest", "latest.tmp", ".plan", ".plan.tmp"};
  for (int i = 0; i < 4; i++) { /* links out of the root at the names the manager writes */
    snprintf(p, sizeof p, "%s/%s.victim", out, victims[i]);
    write_file(p, "keep me\n");
    snprintf(q, sizeof q, "%s/%s", root, victims[i]);
    MK_CHECK(symlink(p, q) == 0, "symlink %s", q);
  }
  snprintf(p, sizeof p, "%s/step-500", root); /* a file */
  write_file(p, "not a step\n");
  snprintf(p, sizeof p, "%s/step-700", root); /* a corrupt .metadata */
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/step-700/.metadata", root);
  write_file(p, "DCPMETA? not really\n");
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  mk_model md;
  mk_model_init(&md, ctx);
  mk_model_fill(&md, 800); /* another job's checkpoint at step-800 (no dcp.step) */
  snprintf(p, sizeof p, "%s/step-800", root);
  OKM(dcp_save(ctx, md.st, p, NULL), ctx);
  dcp_manager_options mo;
  dcp_manager_options_init(&mo);
  mo.keep_last = 1;
  mo.flags = DCP_MANAGER_QUIET;
  dcp_manager *m, *second;
  OKM(dcp_manager_open(ctx, root, &mo, &m), ctx);
  MK_CHECK(dcp_manager_open(ctx, root, &mo, &second) == DCP_EBUSY, "a second manager opened");
  int64_t step;
  MK_CHECK(dcp_manager_resume(m, 0, &step) == DCP_ENOTFOUND, "resumed %" PRId64, step);
  for (int64_t s = 10; s <= 30; s += 10) {
    save_step(m, ctx, &md, s);
    MK_CHECK(latest_of(root) == s, "latest names %" PRId64 " after step %" PRId64,
             latest_of(root), s);
  }
  /* into existing steps: committed, older, a file, corrupt, foreign */
  mk_model_fill(&md, 30);
  MK_CHECK(dcp_manager_save(m, 30, md.st, NULL) == DCP_EINVAL, "step 30 again");
  MK_CHECK(dcp_manager_save(m, 20, md.st, NULL) == DCP_EINVAL, "step 20 (older)");
  MK_CHECK(dcp_manager_save(m, 500, md.st, NULL) == DCP_EINVAL, "into the file step-500");
  MK_CHECK(dcp_manager_save(m, 700, md.st, NULL) == DCP_EEXIST, "into the corrupt step-700");
  MK_CHECK(dcp_manager_save(m, 800, md.st, NULL) == DCP_EINVAL, "into the foreign step-800");
  /* a directory of garbage at a new step: incomplete, saved over */
  snprintf(p, sizeof p, "%s/step-900", root);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/step-900/data-0.0123456789abcdef.dcp", root);
  write_file(p, "garbage");
  save_step(m, ctx, &md, 900);
  load_is(m, ctx, 900);
  OKM(dcp_manager_resume(m, 0, &step), ctx);
  MK_CHECK(step == 900, "resumed %" PRId64, step);
  MK_CHECK(latest_of(root) == 900, "latest names %" PRId64, latest_of(root));
  dcp_manager_gc_report r = {.struct_size = sizeof r};
  OKM(dcp_manager_gc(m, 0, &r), ctx);
  int found;
  MK_CHECK(!committed(m, 30), "step 30 kept with keep_last 1");
  MK_CHECK(state_of(m, 700, &found) == DCP_STEP_CORRUPT && found, "step-700 not corrupt");
  MK_CHECK(state_of(m, 800, &found) == DCP_STEP_FOREIGN && found, "step-800 not foreign");
  MK_CHECK(state_of(m, 500, &found) == DCP_STEP_FOREIGN && found, "step-500 not foreign");
  snprintf(p, sizeof p, "%s/step-500", root);
  MK_CHECK(same_text(p, "not a step\n"), "the file step-500 changed");
  for (int i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s.victim", out, victims[i]);
    MK_CHECK(same_text(p, "keep me\n"), "%s was written through a link", p);
  }
  dcp_manager_free(m);
  dcp_manager_free(NULL);
  OKM(dcp_manager_open(ctx, root, &mo, &second), ctx); /* the lease went with the first */
  dcp_manager_free(second);
  mk_model_free(&md);
  dcp_ctx_free(ctx);
  printf("hand: files, garbage, corrupt and foreign steps and outside links survive\n");
  return 0;
}


/* ---- an incomplete step holding a crashed uncoordinated save's part ----------- */

/* Rank 0 of a world of two, detached (no collective): its part of an
 * uncoordinated save of gen into path; rank 1 never saves (it crashed). */
static void half_uncoordinated(const char *path, int64_t gen) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = 0;
  cfg.world_size = 2;
  dcp_ctx *ctx;
  MK_CHECK(dcp_ctx_create(&cfg, &ctx) == DCP_OK, "detached ctx: %s", dcp_ctx_create_error());
  mk_model md;
  mk_model_init(&md, ctx);
  mk_model_fill(&md, gen);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.save_id = 77;
  OKM(dcp_save(ctx, md.st, path, &so), ctx);
  mk_model_free(&md);
  dcp_ctx_free(ctx);
}

static int run_parts(void) {
  char root[600], p[800];
  snprintf(root, sizeof root, "%s/root", g_dir);
  mkdir(root, 0755);
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  dcp_manager *m = open_manager(ctx, root, 2);
  mk_model md;
  mk_model_init(&md, ctx);
  save_step(m, ctx, &md, 10);
  snprintf(p, sizeof p, "%s/step-50", root);
  half_uncoordinated(p, 50);
  int found;
  MK_CHECK(state_of(m, 50, &found) == DCP_STEP_INCOMPLETE && found, "step 50 not incomplete");
  /* R7: a save into an incomplete step proceeds, sync and async */
  mk_model_fill(&md, 50);
  dcp_status rc = dcp_manager_save(m, 50, md.st, NULL);
  MK_CHECK(rc == DCP_OK, "save into the incomplete step 50: %s: %s", dcp_strerror(rc),
           dcp_ctx_last_error(ctx));
  load_is(m, ctx, 50);
  snprintf(p, sizeof p, "%s/step-60", root);
  half_uncoordinated(p, 60);
  mk_model_fill(&md, 60);
  OKM(dcp_manager_save_async(m, 60, md.st, NULL), ctx);
  rc = dcp_manager_wait(m, -1);
  MK_CHECK(rc == DCP_OK, "async save into the incomplete step 60: %s: %s", dcp_strerror(rc),
           dcp_ctx_last_error(ctx));
  load_is(m, ctx, 60);
  MK_CHECK(latest_of(root) == 60, "latest names %" PRId64, latest_of(root));
  mk_model_free(&md);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  printf("parts: saves into incomplete steps holding a crashed uncoordinated part commit\n");
  return 0;
}


/* ---- a relative root, then the working directory changes ----------------------- */

static int run_chdir(void) {
  char abs_dir[PATH_MAX], elsewhere[4200], p[4400];
  MK_CHECK(realpath(g_dir, abs_dir), "realpath");
  snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", abs_dir);
  mkdir(elsewhere, 0755);
  MK_CHECK(chdir(abs_dir) == 0, "chdir");
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  dcp_manager *m = open_manager(ctx, "root", 1); /* relative */
  MK_CHECK(chdir(elsewhere) == 0, "chdir");
  mk_model md;
  mk_model_init(&md, ctx);
  save_step(m, ctx, &md, 10);
  mk_model_fill(&md, 20);
  OKM(dcp_manager_save_async(m, 20, md.st, NULL), ctx);
  OKM(dcp_manager_wait(m, -1), ctx);
  char root[4300];
  snprintf(root, sizeof root, "%s/root", abs_dir);
  MK_CHECK(latest_of(root) == 20, "latest of the root names %" PRId64, latest_of(root));
  snprintf(p, sizeof p, "%s/step-20/.metadata", root);
  MK_CHECK(access(p, F_OK) == 0, "step 20 is not in the root the manager opened");
  snprintf(p, sizeof p, "%s/step-10", root);
  MK_CHECK(access(p, F_OK) != 0, "step 10 survived keep_last 1");
  snprintf(p, sizeof p, "%s/root", elsewhere);
  MK_CHECK(access(p, F_OK) != 0, "a root appeared in the new working directory");
  int64_t step;
  OKM(dcp_manager_resume(m, 0, &step), ctx);
  MK_CHECK(step == 20, "resumed %" PRId64, step);
  load_is(m, ctx, 20);
  mk_model_free(&md);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  printf("chdir: a relative root stays the one opened when the working directory changes\n");
  return 0;
}


/* ---- a dead holder that is still a zombie ----------------------------------------- */

static int run_zombie_lease(void) {
  char root[600];
  snprintf(root, sizeof root, "%s/root", g_dir);
  dcp_manager_options mo;
  dcp_manager_options_init(&mo);
  mo.flags = DCP_MANAGER_QUIET;
  pid_t child = fork();
  MK_CHECK(child >= 0, "fork");
  if (child == 0) { /* a job that takes the root and is killed */
    dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
    dcp_manager *m;
    OKM(dcp_manager_open(ctx, root, &mo, &m), ctx);
    raise(SIGKILL);
  }
  /* dead, not reaped yet (as under a container's init that never waits) */
  siginfo_t info;
  MK_CHECK(waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT) == 0, "waitid");
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  dcp_manager *m;
  dcp_status rc = dcp_manager_open(ctx, root, &mo, &m);
  waitpid(child, NULL, 0);
  MK_CHECK(rc == DCP_OK, "the root of a dead (zombie) job: %s: %s", dcp_strerror(rc),
           dcp_ctx_last_error(ctx));
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  printf("zombie-lease: a dead holder's lease is taken over before it is reaped\n");
  return 0;
}


/* ---- the newest committed step goes corrupt -------------------------------------- */

/* Flip one byte of file path at offset off. */
static void flip_byte(const char *path, long off) {
  FILE *f = fopen(path, "r+b");
  MK_CHECK(f && fseek(f, off, SEEK_SET) == 0, "open %s", path);
  int c = fgetc(f);
  MK_CHECK(c != EOF && fseek(f, off, SEEK_SET) == 0 && fputc(c ^ 0x20, f) != EOF, "flip");
  fclose(f);
}

static int run_corrupt_newest(void) {
  char root[600], p[800];
  snprintf(root, sizeof root, "%s/root", g_dir);
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 30000, 0);
  dcp_manager *m = open_manager(ctx, root, 2);
  mk_model md;
  mk_model_init(&md, ctx);
  for (int64_t s = 10; s <= 30; s += 10) save_step(m, ctx, &md, s);
  dcp_manager_free(m);
  snprintf(p, sizeof p, "%s/step-30/.metadata", root); /* its metadata, then */
  flip_byte(p, 40);
  m = open_manager(ctx, root, 2);
  int64_t step;
  OKM(dcp_manager_resume(m, 0, &step), ctx);
  MK_CHECK(step == 20, "resumed %" PRId64 " past a corrupt step 30", step);
  load_is(m, ctx, 20);
  MK_CHECK(dcp_manager_save(m, 30, md.st, NULL) == DCP_EEXIST, "saved into the corrupt step");
  save_step(m, ctx, &md, 40);
  int found;
  MK_CHECK(state_of(m, 30, &found) == DCP_STEP_CORRUPT && found, "the corrupt step 30 went");
  MK_CHECK(committed(m, 20) && committed(m, 40) && !committed(m, 10), "keep_last 2 of 10, 20, 40");
  /* step 40's data goes bad: a plain resume takes it, a verifying one falls back */
  snprintf(p, sizeof p, "%s/step-40", root);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "for f in %s/data-*.dcp; do printf 'XX' | dd of=$f bs=1 seek=8 "
           "conv=notrunc status=none; done", p);
  MK_CHECK(system(cmd) == 0, "corrupt step 40's data");
  OKM(dcp_manager_resume(m, 0, &step), ctx);
  MK_CHECK(step == 40, "a plain resume took %" PRId64, step);
  OKM(dcp_manager_resume(m, DCP_RESUME_VERIFY, &step), ctx);
  MK_CHECK(step == 20, "a verifying resume took %" PRId64 ", not 20", step);
  load_is(m, ctx, 20);
  /* retention after the next save keeps 50 and 40 (bad data is not its to judge) */
  save_step(m, ctx, &md, 50);
  MK_CHECK(committed(m, 50) && state_of(m, 30, &found) == DCP_STEP_CORRUPT, "after step 50");
  mk_model_free(&md);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  printf("corrupt-newest: resume skips a corrupt newest step, retention never deletes it\n");
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 2; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "--dir")) g_dir = argv[i + 1];
  if (argc < 2 || !g_dir) {
    fprintf(stderr, "usage: attack_manager orphan|hand --dir D\n");
    return 2;
  }
  mkdir(g_dir, 0755);
  if (!strcmp(argv[1], "orphan")) return run_orphan();
  if (!strcmp(argv[1], "hand")) return run_hand();
  if (!strcmp(argv[1], "parts")) return run_parts();
  if (!strcmp(argv[1], "chdir")) return run_chdir();
  if (!strcmp(argv[1], "zombie-lease")) return run_zombie_lease();
  if (!strcmp(argv[1], "corrupt-newest")) return run_corrupt_newest();
  fprintf(stderr, "attack_manager: unknown mode '%s'\n", argv[1]);
  return 2;
}
