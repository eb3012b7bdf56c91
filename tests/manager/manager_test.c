/* manager_test.c — the checkpoint manager over real ranks (docs/manager.md).
 *
 *   manager_test basic --dir D [--rendezvous R] [--mpi]
 *       every rank (forked by dcp_launch over the file collective, or
 *       under mpirun) saves steps sync and async with a retention policy,
 *       and checks latest, the listing, resume, bit-exact loads, and the
 *       bad input of the issue: a root that is a file, two managers on one
 *       root, a symlinked step, a step someone else wrote, an abandoned
 *       directory, a corrupt step, a non-canonical name, steps that go back.
 *
 *   manager_test fence --dir D [--rendezvous R]
 *       DCP_MANAGER_DEFER_FENCE under background staging: save_async
 *       returns while the copy is still held back (a copy callback that
 *       waits to be released), dcp_manager_fence waits for it, buffers
 *       changed after the fence never reach the step, and the next save
 *       and wait fence an unfenced save themselves.
 *
 * The crash trials and the preemption test are in manager_crash.c. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdatomic.h>
#include <time.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mgr_kit.h"

typedef struct args {
  const char *dir, *rdv;
  int mpi;
} args;

static int log_lines;
static void count_log(void *arg, const char *line) {
  (void)arg;
  log_lines++;
  fprintf(stderr, "[log] %s\n", line);
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  MK_CHECK(f, "create %s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

static int exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* Flip one byte at offset off of path (negative: from the end). */
static void flip(const char *path, long off) {
  int fd = open(path, O_RDWR);
  MK_CHECK(fd >= 0, "open %s", path);
  struct stat sb;
  fstat(fd, &sb);
  off_t at = off >= 0 ? off : sb.st_size + off;
  unsigned char b;
  MK_CHECK(pread(fd, &b, 1, at) == 1, "read");
  b ^= 0x40;
  MK_CHECK(pwrite(fd, &b, 1, at) == 1, "write");
  close(fd);
}

static int64_t latest_of(const char *root) {
  char path[4200], buf[64] = "";
  snprintf(path, sizeof path, "%s/latest", root);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int64_t step = -1;
  if (fgets(buf, sizeof buf, f)) sscanf(buf, "step-%" SCNd64, &step);
  fclose(f);
  return step;
}

/* The state of step in m's listing, or -1 when absent. */
static int state_of(dcp_manager *m, int64_t step, int *keep) {
  dcp_step_info v[64];
  size_t n = 0;
  MK_CHECK(dcp_manager_list(m, v, 64, &n) == DCP_OK, "list");
  for (size_t i = 0; i < n && i < 64; i++)
    if (v[i].step == step) {
      if (keep) *keep = v[i].keep;
      return (int)v[i].state;
    }
  return -1;
}

/* The data file of a step (the first data-*.dcp). */
static void data_file_of(const char *root, int64_t step, char *out, size_t cap) {
  char cmd[4400];
  snprintf(cmd, sizeof cmd, "ls %s/step-%" PRId64 "/ | grep '^data-' | head -1", root, step);
  FILE *p = popen(cmd, "r");
  MK_CHECK(p, "popen");
  char name[256] = "";
  MK_CHECK(fgets(name, sizeof name, p), "no data file in step %" PRId64, step);
  pclose(p);
  name[strcspn(name, "\n")] = '\0';
  snprintf(out, cap, "%s/step-%" PRId64 "/%s", root, step, name);
}

static void save_ok(dcp_manager *m, mk_model *md, int64_t step, int async) {
  mk_model_fill(md, step);
  dcp_status rc = async ? dcp_manager_save_async(m, step, md->st, NULL)
                       : dcp_manager_save(m, step, md->st, NULL);
  MK_CHECK(rc == DCP_OK, "save %" PRId64 ": %s", step, dcp_strerror(rc));
  if (async) {
    memset(md->w, 0xee, (size_t)md->len * sizeof *md->w); /* staged: free to change */
    MK_CHECK(dcp_manager_pending_step(m) == step, "pending");
  }
}

static void load_is(dcp_manager *m, mk_model *md, int64_t step) {
  memset(md->w, 0, (size_t)md->len * sizeof *md->w);
  memset(md->tag, 0, sizeof md->tag);
  dcp_status rc = dcp_manager_load(m, step, md->st, NULL);
  MK_CHECK(rc == DCP_OK, "load %" PRId64 ": %s", step, dcp_strerror(rc));
  MK_CHECK(mk_model_is(md, step), "step %" PRId64 " does not load bit for bit", step);
}

static int mode_basic(const args *a) {
  int32_t rank = 0, world = 1;
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  dcp_ctx *ctx;
  if (a->mpi) {
    dcp_ctx_config cfg;
    dcp_ctx_config_init(&cfg);
    cfg.coll = "mpi";
    cfg.timeout_ms = 60000;
    MK_CHECK(dcp_ctx_create(&cfg, &ctx) == DCP_OK, "%s", dcp_ctx_create_error());
    if (dcp_ctx_world_size(ctx) > 1)
      MK_CHECK(dcp_async_set_coordination(ctx, "file", a->rdv, NULL) == DCP_OK, "coordination");
  } else {
    if (r && w) rank = atoi(r), world = atoi(w);
    ctx = mk_ctx(rank, world, a->rdv, 60000, 0);
  }
  rank = dcp_ctx_rank(ctx);
  mk_model md;
  mk_model_init(&md, ctx);
  char root[4096], afile[4096], outside[4096], path[4300];
  snprintf(root, sizeof root, "%s/root", a->dir);
  snprintf(afile, sizeof afile, "%s/afile", a->dir);
  snprintf(outside, sizeof outside, "%s/outside", a->dir);
  if (rank == 0) {
    mkdir(a->dir, 0755);
    write_file(afile, "not a directory\n");
  }

  /* a root that is a file: refused on every rank */
  dcp_manager *m = NULL, *m2 = NULL, *ro = NULL;
  MK_CHECK(dcp_manager_open(ctx, afile, NULL, &m) == DCP_EINVAL && !m, "root is a file");
  MK_CHECK(strstr(dcp_ctx_last_error(ctx), "not a directory"), "%s", dcp_ctx_last_error(ctx));
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.flags = 0x100;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_EINVAL, "unknown flags");

  dcp_manager_options_init(&o);
  o.keep_last = 2;
  o.keep_every = 4;
  o.log_fn = count_log;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_OK, "open: %s", dcp_ctx_last_error(ctx));
  /* two managers on one root */
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m2) == DCP_EBUSY && !m2, "second manager: %s",
           dcp_ctx_last_error(ctx));
  MK_CHECK(strstr(dcp_ctx_last_error(ctx), "another checkpoint manager"), "%s",
           dcp_ctx_last_error(ctx));

  /* steps 1..6, sync and async; latest moves only once a step is durable */
  for (int64_t step = 1; step <= 6; step++) {
    int async = step % 2;
    save_ok(m, &md, step, async);
    if (async) {
      /* staged, not durable: latest and retention have not moved, however
       * far the writer got (they move in the wait) */
      if (rank == 0) MK_CHECK(latest_of(root) == step - 1 || step == 1, "latest before wait");
      MK_CHECK(state_of(m, step, NULL) == DCP_STEP_PENDING, "pending step listed");
      if (step == 5)
        MK_CHECK(state_of(m, 3, NULL) == DCP_STEP_COMMITTED, "step 3 deleted before 5 is durable");
      MK_CHECK(dcp_manager_wait(m, -1) == DCP_OK, "wait: %s", dcp_ctx_last_error(ctx));
    }
    if (rank == 0) MK_CHECK(latest_of(root) == step, "latest %" PRId64, latest_of(root));
    dcp_manager_gc_report g = {.struct_size = sizeof g};
    MK_CHECK(dcp_manager_gc_result(m, &g) == DCP_OK && g.status == DCP_OK, "gc %s", g.message);
  }
  /* keep_last 2 and keep_every 4: 4, 5, 6 */
  for (int64_t step = 1; step <= 6; step++) {
    int st = state_of(m, step, NULL);
    if (step >= 4)
      MK_CHECK(st == DCP_STEP_COMMITTED, "step %" PRId64 " state %d", step, st);
    else
      MK_CHECK(st == -1, "step %" PRId64 " should be deleted (state %d)", step, st);
  }
  /* steps that do not move forward, the reserved key */
  MK_CHECK(dcp_manager_save(m, 6, md.st, NULL) == DCP_EINVAL, "step 6 again");
  MK_CHECK(dcp_manager_save(m, 3, md.st, NULL) == DCP_EINVAL, "step 3");
  MK_CHECK(dcp_manager_save(m, -2, md.st, NULL) == DCP_EINVAL, "negative step");
  dcp_save_options so;
  dcp_save_options_init(&so);
  const char *kk[] = {"user.lr", "dcp.step"}, *vv[] = {"0.1", "99"};
  so.nkv = 2;
  so.kv_keys = kk;
  so.kv_values = vv;
  MK_CHECK(dcp_manager_save(m, 7, md.st, &so) == DCP_EINVAL, "reserved key");
  so.nkv = 1; /* the user's own key/values are kept beside the step's */
  mk_model_fill(&md, 7);
  MK_CHECK(dcp_manager_save(m, 7, md.st, &so) == DCP_OK, "save 7 with kv");
  dcp_manager_step_path(m, 7, path, sizeof path);
  dcp_meta *meta;
  MK_CHECK(dcp_meta_open(ctx, path, &meta) == DCP_OK, "meta");
  int seen = 0;
  for (size_t i = 0; i < dcp_meta_kv_count(meta); i++) {
    const char *k, *v;
    dcp_meta_kv(meta, i, &k, &v);
    seen += !strcmp(k, "user.lr") && !strcmp(v, "0.1");
    seen += 2 * (!strcmp(k, "dcp.step") && !strcmp(v, "7"));
  }
  dcp_meta_free(meta);
  MK_CHECK(seen == 3, "kv in the metadata (%d)", seen);

  /* resume and a bit-exact load */
  int64_t step = -1;
  MK_CHECK(dcp_manager_resume(m, 0, &step) == DCP_OK && step == 7, "resume %" PRId64, step);
  load_is(m, &md, 7);

  /* hostile neighbours: an abandoned directory, a symlinked step, a
   * non-canonical name, a checkpoint someone else wrote */
  if (rank == 0) {
    snprintf(path, sizeof path, "%s/step-8", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/step-8/data-00000.0123456789abcdef.dcp", root);
    write_file(path, "half a save\n");
    mkdir(outside, 0755);
    snprintf(path, sizeof path, "%s/precious", outside);
    write_file(path, "keep me\n");
    snprintf(path, sizeof path, "%s/step-9", root);
    MK_CHECK(symlink(outside, path) == 0, "symlink");
    snprintf(path, sizeof path, "%s/step-08", root);
    mkdir(path, 0755);
  }
  snprintf(path, sizeof path, "%s/step-100", root);
  mk_model_fill(&md, 100);
  MK_CHECK(dcp_save(ctx, md.st, path, NULL) == DCP_OK, "plain save: %s", dcp_ctx_last_error(ctx));
  int keep = -1;
  MK_CHECK(state_of(m, 8, &keep) == DCP_STEP_INCOMPLETE && keep == 0, "step 8");
  MK_CHECK(state_of(m, 9, &keep) == DCP_STEP_FOREIGN && keep == 1, "step 9 (link)");
  MK_CHECK(state_of(m, 100, &keep) == DCP_STEP_FOREIGN && keep == 1, "step 100 (foreign)");
  log_lines = 0;
  MK_CHECK(dcp_manager_resume(m, 0, &step) == DCP_OK && step == 7, "resume skips %" PRId64, step);
  if (rank == 0) MK_CHECK(log_lines >= 3, "skipped steps are logged (%d)", log_lines);
  /* saving into a link or over someone else's checkpoint: refused */
  MK_CHECK(dcp_manager_save(m, 9, md.st, NULL) == DCP_EINVAL, "save into the link");
  MK_CHECK(dcp_manager_save(m, 100, md.st, NULL) == DCP_EINVAL, "save over step 100");

  /* the next durable save's retention: 8 (abandoned) and 5 go; 4 (every
   * 4th), 7, 10, the link, step-08 and the foreign step stay */
  save_ok(m, &md, 10, 1);
  MK_CHECK(dcp_manager_wait(m, -1) == DCP_OK, "wait 10");
  MK_CHECK(state_of(m, 8, NULL) == -1, "step 8 cleaned");
  MK_CHECK(state_of(m, 5, NULL) == -1 && state_of(m, 6, NULL) == -1, "5, 6 deleted");
  MK_CHECK(state_of(m, 4, NULL) == DCP_STEP_COMMITTED, "4 kept");
  MK_CHECK(state_of(m, 7, NULL) == DCP_STEP_COMMITTED, "7 kept");
  MK_CHECK(state_of(m, 9, NULL) == DCP_STEP_FOREIGN, "link kept");
  MK_CHECK(state_of(m, 100, NULL) == DCP_STEP_FOREIGN, "100 kept");
  snprintf(path, sizeof path, "%s/precious", outside);
  MK_CHECK(exists(path), "the link's target is untouched");
  snprintf(path, sizeof path, "%s/step-08", root);
  MK_CHECK(exists(path), "a non-step name is untouched");

  /* a dry run counts and deletes nothing */
  dcp_manager_gc_report g = {.struct_size = sizeof g};
  MK_CHECK(dcp_manager_gc(m, DCP_GC_DRY_RUN, &g) == DCP_OK && g.deleted == 0, "dry run");

  /* a corrupt .metadata: never loaded, never deleted; a corrupt data file:
   * caught by DCP_RESUME_VERIFY, which falls back */
  save_ok(m, &md, 11, 0);
  if (rank == 0) {
    snprintf(path, sizeof path, "%s/step-11/.metadata", root);
    flip(path, 40);
  }
  MK_CHECK(dcp_manager_gc(m, DCP_GC_DRY_RUN, &g) == DCP_OK, "barrier");
  MK_CHECK(state_of(m, 11, &keep) == DCP_STEP_CORRUPT && keep == 1, "step 11 corrupt");
  MK_CHECK(dcp_manager_resume(m, 0, &step) == DCP_OK && step == 10, "resume past corrupt");
  save_ok(m, &md, 12, 0);
  if (rank == 0) {
    data_file_of(root, 12, path, sizeof path);
    flip(path, -3);
  }
  MK_CHECK(dcp_manager_gc(m, DCP_GC_DRY_RUN, &g) == DCP_OK, "barrier");
  MK_CHECK(state_of(m, 12, NULL) == DCP_STEP_COMMITTED, "12 still looks committed");
  MK_CHECK(dcp_manager_resume(m, 0, &step) == DCP_OK && step == 12, "resume 12");
  MK_CHECK(dcp_manager_resume(m, DCP_RESUME_VERIFY, &step) == DCP_OK && step == 10,
           "verified resume falls back to 10 (%" PRId64 ")", step);
  load_is(m, &md, 10);

  /* a read-only manager beside the writer: lists and loads, never writes */
  dcp_manager_options_init(&o);
  o.flags = DCP_MANAGER_READ_ONLY | DCP_MANAGER_QUIET;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &ro) == DCP_OK, "read-only open");
  MK_CHECK(dcp_manager_save(ro, 20, md.st, NULL) == DCP_EINVAL, "read-only save");
  MK_CHECK(dcp_manager_gc(ro, 0, NULL) == DCP_EINVAL, "read-only gc");
  MK_CHECK(dcp_manager_resume(ro, 0, &step) == DCP_OK && step == 12, "read-only resume");
  dcp_manager_free(ro);

  /* the lease goes with the manager: a new one opens and knows the steps */
  dcp_manager_free(m);
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_OK, "reopen");
  MK_CHECK(dcp_manager_save(m, 12, md.st, NULL) == DCP_EINVAL, "reopened: read-only");
  dcp_manager_free(m);
  dcp_manager_options_init(&o);
  o.flags = DCP_MANAGER_QUIET;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_OK, "reopen read-write");
  MK_CHECK(dcp_manager_save(m, 12, md.st, NULL) == DCP_EINVAL, "the newest step is known");
  dcp_manager_free(m);

  mk_model_free(&md);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  if (rank == 0) printf("manager basic: ok (world %d)\n", world);
  return 0;
}

/* The copy callback of mode_fence: holds every copy back until the test
 * releases it (or 60 s pass: then save_async did not return before the
 * copy, which the test reports). */
static atomic_int copy_released, copy_timed_out, copies;
static void held_copy(void *arg, void *dst, const void *src, size_t len) {
  (void)arg;
  struct timespec t = {0, 10 * 1000 * 1000};
  for (int i = 0; !atomic_load(&copy_released) && i < 6000; i++) nanosleep(&t, NULL);
  if (!atomic_load(&copy_released)) atomic_store(&copy_timed_out, 1);
  atomic_fetch_add(&copies, 1);
  memcpy(dst, src, len);
}

static int mode_fence(const args *a) {
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  int32_t rank = r && w ? atoi(r) : 0, world = r && w ? atoi(w) : 1;
  dcp_ctx *ctx = mk_ctx(rank, world, a->rdv, 60000, 0);
  MK_CHECK(dcp_async_set_staging(ctx, DCP_ASYNC_STAGE_BACKGROUND) == DCP_OK, "staging");
  MK_CHECK(dcp_async_set_copy(ctx, held_copy, NULL) == DCP_OK, "copy callback");
  mk_model md;
  mk_model_init(&md, ctx);
  char root[4096];
  snprintf(root, sizeof root, "%s/root", a->dir);
  mkdir(a->dir, 0755); /* every rank: the root's parent (EEXIST is fine) */
  dcp_manager *m;
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.flags = DCP_MANAGER_QUIET | DCP_MANAGER_DEFER_FENCE;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_OK, "open: %s", dcp_ctx_last_error(ctx));
  MK_CHECK(dcp_manager_fence(NULL) == DCP_EINVAL, "fence(NULL)");
  MK_CHECK(dcp_manager_fence(m) == DCP_OK, "fence with nothing pending");

  /* step 1: returns with the copy held back; fence; then change the buffers */
  mk_model_fill(&md, 1);
  MK_CHECK(dcp_manager_save_async(m, 1, md.st, NULL) == DCP_OK, "save 1: %s",
           dcp_ctx_last_error(ctx));
  MK_CHECK(!atomic_load(&copy_timed_out), "save_async waited for the copy (no deferred fence)");
  atomic_store(&copy_released, 1);
  MK_CHECK(dcp_manager_fence(m) == DCP_OK, "fence 1: %s", dcp_ctx_last_error(ctx));
  MK_CHECK(atomic_load(&copies) > 0, "the fence returned before any copy");
  mk_model_fill(&md, 77); /* after the fence: must not reach step 1 */
  MK_CHECK(dcp_manager_wait(m, -1) == DCP_OK, "wait 1: %s", dcp_ctx_last_error(ctx));
  MK_CHECK(latest_of(root) == 1, "latest after step 1");

  /* step 2 unfenced by the caller: the next save fences and waits for it */
  atomic_store(&copy_released, 0);
  mk_model_fill(&md, 2);
  MK_CHECK(dcp_manager_save_async(m, 2, md.st, NULL) == DCP_OK, "save 2");
  MK_CHECK(!atomic_load(&copy_timed_out), "save_async 2 waited for the copy");
  atomic_store(&copy_released, 1);
  mk_model other; /* step 2's buffers stay untouched until its fence */
  mk_model_init(&other, ctx);
  mk_model_fill(&other, 3);
  MK_CHECK(dcp_manager_save_async(m, 3, other.st, NULL) == DCP_OK, "save 3");
  MK_CHECK(dcp_manager_pending_step(m) == 3, "pending 3");
  mk_model_fill(&md, 79); /* step 2 was fenced by save 3 */
  MK_CHECK(dcp_manager_wait(m, -1) == DCP_OK, "wait 3: %s", dcp_ctx_last_error(ctx));
  MK_CHECK(latest_of(root) == 3, "latest after step 3");
  mk_model_free(&other);
  for (int64_t step = 1; step <= 3; step++) load_is(m, &md, step);
  dcp_manager_free(m);
  mk_model_free(&md);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  if (rank == 0) printf("manager fence: deferred fences held, steps 1-3 bit for bit\n");
  return 0;
}

/* Steps 1..5 (keep everything), an abandoned step-6 and a symlinked
 * step-7, for the `dcp steps` / `dcp gc` test (cli_steps.sh). */
static int mode_populate(const args *a) {
  dcp_ctx *ctx = mk_ctx(0, 1, NULL, 60000, 0);
  mk_model md;
  mk_model_init(&md, ctx);
  char root[4096], path[4300];
  snprintf(root, sizeof root, "%s/root", a->dir);
  mkdir(a->dir, 0755);
  dcp_manager *m;
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.flags = DCP_MANAGER_QUIET;
  MK_CHECK(dcp_manager_open(ctx, root, &o, &m) == DCP_OK, "open");
  for (int64_t step = 1; step <= 5; step++) save_ok(m, &md, step, step % 2);
  MK_CHECK(dcp_manager_wait(m, -1) == DCP_OK, "wait");
  dcp_manager_free(m);
  snprintf(path, sizeof path, "%s/step-6", root);
  mkdir(path, 0755);
  snprintf(path, sizeof path, "%s/step-7", root);
  MK_CHECK(symlink(a->dir, path) == 0, "symlink");
  mk_model_free(&md);
  dcp_async_shutdown(ctx);
  dcp_ctx_free(ctx);
  return 0;
}

int main(int argc, char **argv) {
  args a = {0};
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--dir") && i + 1 < argc) a.dir = argv[++i];
    else if (!strcmp(argv[i], "--rendezvous") && i + 1 < argc) a.rdv = argv[++i];
    else if (!strcmp(argv[i], "--mpi")) a.mpi = 1;
  }
  if (argc < 2 || !a.dir) {
    fprintf(stderr, "usage: manager_test basic --dir D [--rendezvous R] [--mpi]\n");
    return 2;
  }
  if (!strcmp(argv[1], "basic")) return mode_basic(&a);
  if (!strcmp(argv[1], "populate")) return mode_populate(&a);
  if (!strcmp(argv[1], "fence")) return mode_fence(&a);
  fprintf(stderr, "manager_test: unknown mode %s\n", argv[1]);
  return 2;
}
