/* campaign.c — the corruption campaign (ctest reliability.corruption_campaign).
 *
 * Two small but varied checkpoints are saved once (model.c): one by 3
 * ranks over the file collective with zstd blocks (raw and compressed
 * blocks, several chunks per rank, flat shards, replicated and per-rank
 * bytes items, one .metadata), one by 2 ranks with no collective (raw
 * blocks, one part per rank). Then every trial damages one byte
 * position of one of their files, data or metadata — a single flipped bit,
 * or the file cut short there — and checks that
 *   - dcp_load of the whole state (and, when a PER_RANK bytes item is hit,
 *     a load by the saving world) fails with DCP_ECORRUPT (DCP_EVERSION
 *     for a flip in the header's version field), naming the damaged
 *     tensor and box, bytes item, or metadata file and part;
 *   - dcp_verify fails the same way; on a sample, so does `dcp verify`.
 * A load that succeeds is a failure of the campaign ("undetected", or
 * "silently wrong" when its bytes differ). Half the trials pick a byte of
 * all the files uniformly, half go round the regions (each chunk, bytes
 * item and metadata part in turn) so that small ones are hit too.
 *
 * usage: corrupt_campaign PLUGIN_DIR WORK_DIR DCP_CLI [TRIALS [SEED]]
 * ($DCP_TEST_SEED overrides SEED.) Exit status 0 only with no failure. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model.h"
#include "regions.h"

#define DEFAULT_TRIALS 1200
#define CLI_EVERY 10  /* one trial in this many also runs `dcp verify` */
#define SHOWN_FAILURES 20

typedef struct trial {
  int n;
  int file;
  uint64_t at;
  bool truncate;
  int bit;
} trial;

typedef struct tally {
  int trials, flips, truncations, data, meta;
  int loads, world_loads, verifies, clis;
  int undetected, wrong, unclear, harmless, unread;
  int failed, last_failed; /* trials with a failed check; the last one */
} tally;

typedef struct campaign {
  cm_env env;
  const char *cli;
  char pristine[CM_KINDS][4096], live[CM_KINDS][4096];
  rg_map map;
  dcp_ctx *ctx; /* a world of one: loads and verifies */
  uint64_t rng;
  tally t;
} campaign;

static uint64_t next_rand(campaign *c) {
  uint64_t x = (c->rng += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- files ----------------------------------------------------------------- */

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  char buf[1 << 16];
  size_t n;
  int rc = in && out ? 0 : -1;
  while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
    if (fwrite(buf, 1, n, out) != n) rc = -1;
  if (in) fclose(in);
  if (out && fclose(out)) rc = -1;
  return rc;
}

static void file_path(const campaign *c, const rg_file *f, bool live, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", live ? c->live[f->kind] : c->pristine[f->kind], f->name);
}

/* Make the live copy of every mapped file equal to the pristine one. */
static int restore(const campaign *c, int file) {
  char a[4200], b[4200];
  file_path(c, &c->map.files[file], false, a, sizeof a);
  file_path(c, &c->map.files[file], true, b, sizeof b);
  return copy_file(a, b);
}

static int damage(const campaign *c, const trial *tr) {
  char p[4200];
  file_path(c, &c->map.files[tr->file], true, p, sizeof p);
  if (tr->truncate) return truncate(p, (off_t)tr->at);
  int fd = open(p, O_RDWR);
  uint8_t byte;
  int rc = fd >= 0 && pread(fd, &byte, 1, (off_t)tr->at) == 1 ? 0 : -1;
  byte ^= (uint8_t)(1u << tr->bit);
  if (!rc && pwrite(fd, &byte, 1, (off_t)tr->at) != 1) rc = -1;
  if (fd >= 0) close(fd);
  return rc;
}

/* ---- expectations ------------------------------------------------------------ */

/* The regions a trial damages: the one holding the flipped bit; for a cut,
 * every item that loses bytes, or the metadata part where the file now
 * ends (what the reader sees). */
static int affected(const campaign *c, const trial *tr, const rg_region **out, int cap) {
  const rg_file *f = &c->map.files[tr->file];
  if (!tr->truncate || f->meta) {
    out[0] = rg_find(&c->map, tr->file, tr->at);
    return out[0] ? 1 : 0;
  }
  int n = 0;
  for (int i = 0; i < c->map.nregions && n < cap; i++) {
    const rg_region *r = &c->map.regions[i];
    if (r->file == tr->file && r->end > tr->at) out[n++] = r;
  }
  return n;
}

static bool status_ok(const trial *tr, const rg_region *r, dcp_status rc) {
  return rc == DCP_ECORRUPT || (rc == DCP_EVERSION && r->version && !tr->truncate);
}

/* Whether a failure (s, msg) names one of the regions rs (filtered by
 * want_per_rank: -1 any, else regions with per_rank == want_per_rank). */
static bool names_one(const trial *tr, const rg_region **rs, int n, int want_per_rank,
                      dcp_status rc, const char *msg, bool for_verify) {
  for (int i = 0; i < n; i++) {
    const rg_region *r = rs[i];
    if (want_per_rank >= 0 && r->type != RG_META && r->per_rank != (bool)want_per_rank) continue;
    if (!status_ok(tr, r, rc)) continue;
    if (!strstr(msg, r->need[0]) || !strstr(msg, r->need[1])) continue;
    if (for_verify && r->verify_need[0] && !strstr(msg, r->verify_need)) continue;
    return true;
  }
  return false;
}

static bool any_of(const rg_region **rs, int n, bool per_rank) {
  for (int i = 0; i < n; i++)
    if (rs[i]->type == RG_META || rs[i]->per_rank == per_rank) return true;
  return false;
}

/* ---- reporting ----------------------------------------------------------------- */

static void failure(campaign *c, const trial *tr, const char *check, const char *why,
                    dcp_status rc, const char *msg) {
  int shown = c->t.undetected + c->t.wrong + c->t.unclear;
  if (c->t.last_failed != tr->n) c->t.failed++;
  c->t.last_failed = tr->n;
  if (!strcmp(why, "undetected"))
    c->t.undetected++;
  else if (!strcmp(why, "silently wrong"))
    c->t.wrong++;
  else
    c->t.unclear++;
  if (shown >= SHOWN_FAILURES) return;
  const rg_file *f = &c->map.files[tr->file];
  const rg_region *r = rg_find(&c->map, tr->file, tr->at);
  fprintf(stderr, "FAIL trial %d: %s (bit %d) of %s/%s at %" PRIu64 " (%s, +%" PRIu64 "): %s %s: %s: %s\n",
          tr->n, tr->truncate ? "cut" : "flip", tr->bit, c->live[f->kind], f->name, tr->at,
          r ? r->what : "?", r ? tr->at - r->start : 0, check, why, dcp_strerror(rc), msg);
}

/* Judge one check's outcome. */
static void judge(campaign *c, const trial *tr, const rg_region **rs, int n, int per_rank,
                  const char *check, const cm_result *res, bool for_verify) {
  if (res->status == DCP_OK)
    failure(c, tr, check, res->exact ? "undetected" : "silently wrong", res->status, "");
  else if (!names_one(tr, rs, n, per_rank, res->status, res->msg, for_verify))
    failure(c, tr, check, "unclear error", res->status, res->msg);
}

/* ---- checks ---------------------------------------------------------------------- */

static void run_verify(campaign *c, cm_kind k, cm_result *res) {
  dcp_verify_report rep = {.struct_size = sizeof rep};
  *res = (cm_result){.status = dcp_verify(c->ctx, c->live[k], &rep), .exact = true};
  snprintf(res->msg, sizeof res->msg, "%s", rep.first_problem);
  if (res->status != rep.first_status) res->status = DCP_EINVAL; /* inconsistent report */
  c->t.verifies++;
}

/* `dcp verify DIR`: exit status 1 (verification failed) or 3 (another
 * error: a newer version), and its output names the damage. */
static void check_cli(campaign *c, const trial *tr, const rg_region **rs, int n, cm_kind k) {
  char out[4200];
  snprintf(out, sizeof out, "%s/cli.out", c->env.work);
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
    execl(c->cli, c->cli, "verify", c->live[k], (char *)NULL);
    _exit(127);
  }
  int st = 0;
  cm_result res = {.status = DCP_EIO};
  if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st))
    res.status = WEXITSTATUS(st) == 1 ? DCP_ECORRUPT : WEXITSTATUS(st) == 3 ? DCP_EVERSION
                 : WEXITSTATUS(st) == 0 ? DCP_OK : DCP_EIO;
  FILE *f = fopen(out, "rb");
  size_t got = f ? fread(res.msg, 1, sizeof res.msg - 1, f) : 0;
  res.msg[got] = '\0';
  if (f) fclose(f);
  res.exact = true;
  c->t.clis++;
  judge(c, tr, rs, n, -1, "dcp verify (CLI)", &res, true);
}

/* A flipped bit inside a zstd frame that zstd still decodes to exactly the
 * saved bytes (some header and table bits do not change the output): the
 * block checksums cover the decoded bytes, so nothing can see it, and
 * nothing needs to: the load is byte-exact and verify finds every block
 * sound. Counted apart; any other success is a failure. */
static bool harmless(const trial *tr, const rg_region *r, const cm_result *load,
                     const cm_result *ver) {
  return !tr->truncate && r->zstd && load->status == DCP_OK && load->exact &&
         ver->status == DCP_OK;
}

static void run_trial(campaign *c, const trial *tr) {
  const rg_file *f = &c->map.files[tr->file];
  const rg_region *rs[RG_MAX_REGIONS];
  int n = affected(c, tr, rs, RG_MAX_REGIONS);
  if (damage(c, tr) || n == 0) {
    failure(c, tr, "setup", "cannot damage", DCP_EIO, "");
    return;
  }
  c->t.trials++;
  tr->truncate ? c->t.truncations++ : c->t.flips++;
  f->meta ? c->t.meta++ : c->t.data++;
  cm_result whole = {.status = DCP_OK, .exact = true}, res;
  if (any_of(rs, n, false)) { /* something a world of one loads */
    cm_load_whole(c->ctx, f->kind, c->live[f->kind], &whole);
    c->t.loads++;
  }
  cm_result ver;
  run_verify(c, f->kind, &ver);
  if (harmless(tr, rs[0], &whole, &ver)) {
    c->t.harmless++;
    printf("  trial %d: flip (bit %d) of %s at %" PRIu64 " (%s, +%" PRIu64 "): zstd decodes "
           "it to the saved bytes (harmless)\n", tr->n, tr->bit, f->name, tr->at, rs[0]->what,
           tr->at - rs[0]->start);
  } else {
    /* a flip no load reads may load exactly; dcp_verify must still see it */
    bool unread_ok = !tr->truncate && rs[0]->unread && whole.status == DCP_OK && whole.exact;
    if (unread_ok) c->t.unread++;
    if (any_of(rs, n, false) && !unread_ok) judge(c, tr, rs, n, 0, "dcp_load", &whole, false);
    judge(c, tr, rs, n, -1, "dcp_verify", &ver, true);
    if (cm_has_per_rank(f->kind) && !rs[0]->unread && any_of(rs, n, true) && (!f->meta || tr->n % 8 == 0)) {
      cm_load_per_rank(&c->env, f->kind, c->live[f->kind], &res);
      c->t.world_loads++;
      judge(c, tr, rs, n, 1, "dcp_load (saving world)", &res, false);
    }
    if (tr->n % CLI_EVERY == 0) check_cli(c, tr, rs, n, f->kind);
  }
  if (restore(c, tr->file)) failure(c, tr, "setup", "cannot restore", DCP_EIO, "");
}

/* Trial n: even ones pick a byte of all the files uniformly, odd ones the
 * next region in turn and a byte inside it. */
static trial pick(campaign *c, int n) {
  trial tr = {.n = n};
  if (n % 2 == 0) {
    uint64_t total = 0;
    for (int i = 0; i < c->map.nfiles; i++) total += c->map.files[i].size;
    uint64_t at = next_rand(c) % total;
    for (tr.file = 0; at >= c->map.files[tr.file].size; tr.file++) at -= c->map.files[tr.file].size;
    tr.at = at;
  } else {
    const rg_region *r = &c->map.regions[(n / 2) % c->map.nregions];
    tr.file = r->file;
    tr.at = r->start + next_rand(c) % (r->end - r->start);
  }
  uint64_t x = next_rand(c);
  tr.truncate = x & 1;
  tr.bit = (int)((x >> 1) % 8);
  return tr;
}

/* ---- setup ------------------------------------------------------------------------- */

static int setup(campaign *c) {
  static const char *const names[CM_KINDS] = {"coordinated", "uncoordinated"};
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.plugin_path = c->env.plugins;
  if (dcp_ctx_create(&cfg, &c->ctx)) {
    fprintf(stderr, "corrupt campaign: context: %s\n", dcp_ctx_create_error());
    return -1;
  }
  for (int k = 0; k < CM_KINDS; k++) {
    snprintf(c->pristine[k], sizeof c->pristine[k], "%s/%s.pristine", c->env.work, names[k]);
    snprintf(c->live[k], sizeof c->live[k], "%s/%s", c->env.work, names[k]);
    if (cm_save(&c->env, (cm_kind)k, c->pristine[k]) || mkdir(c->live[k], 0755) ||
        rg_map_add(&c->map, c->ctx, (cm_kind)k, c->pristine[k]))
      return -1;
  }
  for (int i = 0; i < c->map.nfiles; i++)
    if (restore(c, i)) return -1;
  /* undamaged, both load exactly and verify clean */
  for (int k = 0; k < CM_KINDS; k++) {
    cm_result res;
    cm_load_whole(c->ctx, (cm_kind)k, c->live[k], &res);
    if (!res.exact) return fprintf(stderr, "undamaged %s: %s\n", names[k], res.msg), -1;
    if (cm_has_per_rank((cm_kind)k)) {
      cm_load_per_rank(&c->env, (cm_kind)k, c->live[k], &res);
      if (!res.exact) return fprintf(stderr, "undamaged %s (world): %s\n", names[k], res.msg), -1;
    }
    dcp_verify_report rep = {.struct_size = sizeof rep};
    if (dcp_verify(c->ctx, c->live[k], &rep))
      return fprintf(stderr, "undamaged %s: %s\n", names[k], rep.first_problem), -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s PLUGIN_DIR WORK_DIR DCP_CLI [TRIALS [SEED]]\n", argv[0]);
    return 2;
  }
  static campaign c;
  c.env = (cm_env){argv[1], argv[2]};
  c.cli = argv[3];
  int trials = argc > 4 ? atoi(argv[4]) : DEFAULT_TRIALS;
  const char *env_seed = getenv("DCP_TEST_SEED");
  uint64_t seed = env_seed ? strtoull(env_seed, NULL, 0)
                           : argc > 5 ? strtoull(argv[5], NULL, 0) : 20261201;
  c.rng = seed;
  c.t.last_failed = -1;
  if (setup(&c)) {
    fprintf(stderr, "corrupt campaign: setup failed\n");
    return 1;
  }
  printf("corruption campaign: seed %" PRIu64 ", %d files, %d regions\n", seed, c.map.nfiles,
         c.map.nregions);
  for (int n = 0; n < trials; n++) {
    trial tr = pick(&c, n);
    run_trial(&c, &tr);
  }
  const tally *t = &c.t;
  printf("corruption campaign: %d trials (%d bit flips, %d truncations; %d in data files, %d in "
         "metadata files)\n", t->trials, t->flips, t->truncations, t->data, t->meta);
  printf("  checks: %d whole-state loads, %d loads by the saving world, %d dcp_verify, %d `dcp "
         "verify`\n", t->loads, t->world_loads, t->verifies, t->clis);
  printf("  %d detected, %d harmless (zstd decodes the flipped frame to the saved bytes)\n",
         t->trials - t->harmless - t->failed, t->harmless);
  printf("  %d undetected, %d silently wrong, %d with an unclear error\n", t->undetected,
         t->wrong, t->unclear);
  printf("  %d flips of bytes no load reads (format 4 trailer, chunks checksum) loaded exactly, "
         "found by dcp_verify\n", t->unread);
  dcp_ctx_free(c.ctx);
  /* "harmless" needs a byte-exact load, so it cannot hide a wrong one; but
   * more than a rare few would mean zstd frames are not being checked */
  if (t->harmless * 100 > t->trials) {
    fprintf(stderr, "corrupt campaign: %d harmless trials of %d: too many\n", t->harmless,
            t->trials);
    return 1;
  }
  return t->undetected + t->wrong + t->unclear == 0 && t->trials == trials ? 0 : 1;
}
