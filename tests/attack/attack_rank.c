/* attack_rank — one rank of a coordinated attack run over the file
 * collective (run as N forked ranks by dcp_launch, which sets
 * DCP_TEST_RANK / DCP_TEST_WORLD).
 *
 *   attack_rank --dir CKPT --rendezvous RDV --seed S MODE [options]
 *
 * MODE:
 *   --save          save the model of seed S (at_gen.h) as this world holds it
 *   --load W        load it (saved by a world of W) with another decomposition,
 *                   check every byte (0xEE-filled buffers), rank 0 dcp_verify
 *   --clash KIND    rank world-1 declares one fqn differently (dtype, shape,
 *                   ndim, bytes: a bytes item where the others have a tensor,
 *                   scope: PER_RANK where the others have REPLICATED,
 *                   len: another length of a replicated bytes item,
 *                   overlap: a box partially overlapping another rank's,
 *                   opt_compress, opt_block, opt_policy, opt_replicas:
 *                   another DCP_SAVE_COMPRESS, block_size, policy or
 *                   DCP_SAVE_CHECK_REPLICAS in its save options, path:
 *                   it saves into DIR.elsewhere):
 *                   every rank's save must fail, with the same code, no hang
 *   --load-clash KIND  a load where rank world-1 disagrees (dedup: another
 *                   read_dedup; dtype/shape: its tensor declared differently,
 *                   a local error; meta: DCP_LOAD_METADATA_PER_RANK on that
 *                   rank alone) — every rank fails, none hangs
 * options: --salt N (decomposition), --overwrite, --compress, --dedup on|off,
 *   --async (the save is a dcp_async_save; buffers scribbled right after),
 *   --perm-salt N (only which rank holds which shard changes), loads:
 *   --meta-per-rank, --no-pipeline, --inflight BYTES, --coll file|gloo|mpi|none
 *   (default file; mpi: run under mpirun, no --rendezvous needed; none:
 *   a detached rank, whose save is uncoordinated: give --save-id N)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "at_gen.h"
#include "rank_check.h"

typedef struct args {
  const char *dir, *rdv, *clash, *load_clash, *dedup, *coll;
  uint64_t seed, salt;
  int save, load_world, overwrite, compress, async, meta_per_rank, no_pipeline;
  uint64_t inflight, save_id;
} args;

static void parse(int argc, char **argv, args *a) {
  memset(a, 0, sizeof *a);
  a->salt = 1;
  a->dedup = "auto";
  a->coll = "file";
  for (int i = 1; i < argc; i++) {
    const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(k, "--save")) a->save = 1;
    else if (!strcmp(k, "--overwrite")) a->overwrite = 1;
    else if (!strcmp(k, "--compress")) a->compress = 1;
    else if (!strcmp(k, "--async")) a->async = 1;
    else if (!strcmp(k, "--meta-per-rank")) a->meta_per_rank = 1;
    else if (!strcmp(k, "--no-pipeline")) a->no_pipeline = 1;
    else if (v && !strcmp(k, "--inflight")) a->inflight = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(k, "--save-id")) a->save_id = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(k, "--perm-salt")) at_perm_salt = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(k, "--dir")) a->dir = v, i++;
    else if (v && !strcmp(k, "--rendezvous")) a->rdv = v, i++;
    else if (v && !strcmp(k, "--seed")) a->seed = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(k, "--salt")) a->salt = strtoull(v, NULL, 10), i++;
    else if (v && !strcmp(k, "--load")) a->load_world = atoi(v), i++;
    else if (v && !strcmp(k, "--clash")) a->clash = v, i++;
    else if (v && !strcmp(k, "--load-clash")) a->load_clash = v, i++;
    else if (v && !strcmp(k, "--dedup")) a->dedup = v, i++;
    else if (v && !strcmp(k, "--coll")) a->coll = v, i++;
    else CHECK(0, "unknown argument %s", k);
  }
  CHECK(a->dir && (a->rdv || !strcmp(a->coll, "mpi")), "--dir and --rendezvous are needed");
}

static dcp_ctx *open_ctx(const args *a) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.coll = strcmp(a->coll, "none") ? a->coll : NULL; /* none: a detached rank */
  cfg.timeout_ms = 20000;
  if (strcmp(a->coll, "mpi")) { /* file, gloo: forked by dcp_launch */
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    CHECK(r && w, "run under dcp_launch");
    cfg.rank = atoi(r);
    cfg.world_size = atoi(w);
    cfg.rendezvous = a->rdv;
  }
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  CHECK(rc == DCP_OK, "ctx_create: %s: %s", dcp_strerror(rc), dcp_ctx_create_error());
  g_rank = dcp_ctx_rank(ctx);
  return ctx;
}

static dcp_save_options save_opts(const args *a) {
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.block_size = 4096 + (uint32_t)(a->seed % 5) * 1021;
  if (a->overwrite) o.flags |= DCP_SAVE_OVERWRITE;
  if (a->compress) o.flags |= DCP_SAVE_COMPRESS;
  o.save_id = a->save_id;
  return o;
}

/* An async save of st: the writers coordinate over the file collective in
 * RDV/writers; the buffers are scribbled over (and the state freed) as
 * soon as the save returns, then its outcome is awaited. */
static void do_async(dcp_ctx *ctx, const args *a, dcp_state *st, at_bufs *b,
                     const dcp_save_options *o) {
  char wr[4200];
  snprintf(wr, sizeof wr, "%s/writers", a->rdv);
  OK(dcp_async_set_coordination(ctx, "file", wr, NULL), ctx);
  dcp_async *h = NULL;
  OK(dcp_async_save(ctx, st, a->dir, o, &h), ctx);
  for (size_t i = 0; i < b->n; i++) memset(b->b[i].p, 0xA5, b->b[i].len);
  dcp_state_free(st);
  at_free_bufs(b);
  OK(dcp_async_wait(h), ctx);
  dcp_async_free(h);
  dcp_async_shutdown(ctx);
}

static void do_save(dcp_ctx *ctx, const args *a, const at_model *m) {
  int32_t w = dcp_ctx_world_size(ctx), r = dcp_ctx_rank(ctx);
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  static at_bufs b;
  OK(at_build(ctx, m, w, r, 1, a->salt, 1, 1, st, &b), ctx);
  dcp_save_options o = save_opts(a);
  if (a->async) {
    do_async(ctx, a, st, &b, &o);
    return;
  }
  OK(dcp_save(ctx, st, a->dir, &o), ctx);
  dcp_stats sx = {.struct_size = sizeof sx};
  OK(dcp_ctx_stats(ctx, &sx), ctx);
  if (r == 0) fprintf(stderr, "save: plan cache hit %u\n", sx.plan_cache_hit);
  dcp_state_free(st);
  at_free_bufs(&b);
}

static void do_load(dcp_ctx *ctx, const args *a, const at_model *m) {
  int32_t w = dcp_ctx_world_size(ctx), r = dcp_ctx_rank(ctx);
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  static at_bufs b;
  OK(at_build(ctx, m, w, r, 0, a->salt, 1, a->load_world == w, st, &b), ctx);
  dcp_load_options o;
  dcp_load_options_init(&o);
  o.read_dedup = !strcmp(a->dedup, "on") ? DCP_READ_DEDUP_ON
                 : !strcmp(a->dedup, "off") ? DCP_READ_DEDUP_OFF
                                            : DCP_READ_DEDUP_AUTO;
  if (a->meta_per_rank) o.flags |= DCP_LOAD_METADATA_PER_RANK;
  if (a->no_pipeline) o.flags |= DCP_LOAD_NO_PIPELINE;
  if (a->inflight) o.max_inflight_bytes = a->inflight;
  OK(dcp_load(ctx, st, a->dir, &o), ctx);
  CHECK(at_verify(m, &b, r) == 0, "seed %llu: loaded bytes differ", (unsigned long long)a->seed);
  if (r == 0) {
    dcp_verify_report rep = {.struct_size = sizeof rep};
    CHECK(dcp_verify(ctx, a->dir, &rep) == DCP_OK, "verify: %s", rep.first_problem);
  }
  dcp_state_free(st);
  at_free_bufs(&b);
}

/* ---- every rank fails the same way -------------------------------------- */

/* Write this rank's status to DIR.status.RANK; rank 0 then waits (20 s at
 * most) for every rank's and checks that all are the same error. */
static void agree_on_failure(dcp_ctx *ctx, const args *a, dcp_status rc, const char *what) {
  int32_t w = dcp_ctx_world_size(ctx), r = dcp_ctx_rank(ctx);
  fprintf(stderr, "rank %d: %s %s: %s: %s\n", r, what, a->clash ? a->clash : a->load_clash,
          dcp_strerror(rc), dcp_ctx_last_error(ctx));
  CHECK(rc != DCP_OK, "%s succeeded although rank %d disagrees", what, w - 1);
  char p[4200], tmp[4300];
  snprintf(p, sizeof p, "%s.status.%d", a->dir, r);
  snprintf(tmp, sizeof tmp, "%s.tmp", p);
  FILE *f = fopen(tmp, "w");
  CHECK(f && fprintf(f, "%d\n", (int)rc) > 0 && fclose(f) == 0 && rename(tmp, p) == 0, "status");
  if (r != 0) return;
  for (int32_t k = 0; k < w; k++) {
    snprintf(p, sizeof p, "%s.status.%d", a->dir, k);
    int got = 0, v = 0;
    for (int tries = 0; tries < 2000 && !got; tries++) {
      FILE *g = fopen(p, "r");
      if (g) got = fscanf(g, "%d", &v) == 1, fclose(g);
      if (!got) nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    CHECK(got, "rank %d never reported", k);
    CHECK(v == (int)rc, "rank %d failed with %s, rank 0 with %s", k,
          dcp_strerror((dcp_status)v), dcp_strerror(rc));
  }
}

/* The state of a clashing save: the model, with rank world-1 changing the
 * first tensor of ndim >= 1 (or the bytes item) as KIND says. */
static void do_clash(dcp_ctx *ctx, const args *a, at_model *m) {
  int32_t w = dcp_ctx_world_size(ctx), r = dcp_ctx_rank(ctx);
  const char *k = a->clash;
  size_t t = 0;
  while (t < m->ntensors && (m->t[t].ndim == 0 || m->t[t].shape[0] < 2)) t++;
  CHECK(t < m->ntensors, "seed %llu has no tensor to clash on", (unsigned long long)a->seed);
  int odd = r == w - 1;
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  static uint8_t blob[64];
  at_tensor *ten = &m->t[t];
  at_model mine = *m;
  if (odd && !strcmp(k, "dtype")) mine.t[t].dtype = ten->dtype == DCP_F32 ? DCP_I32 : DCP_F32;
  if (odd && !strcmp(k, "shape")) mine.t[t].shape[0] += 1;
  if (odd && !strcmp(k, "ndim")) mine.t[t].ndim = ten->ndim == 1 ? 2 : 1, mine.t[t].shape[1] = 1;
  int items = strcmp(k, "scope") && strcmp(k, "len");
  static at_bufs b;
  OK(at_build(ctx, &mine, w, r, 1, a->salt, items, 0, st, &b), ctx);
  if (!items)
    OK(dcp_state_add_bytes(st, "at.rng",
                           odd && !strcmp(k, "scope") ? DCP_SCOPE_PER_RANK : DCP_SCOPE_REPLICATED,
                           blob, odd && !strcmp(k, "len") ? 9 : 8),
       ctx);
  if (odd && !strcmp(k, "bytes")) OK(dcp_state_add_bytes(st, "clash.x", DCP_SCOPE_REPLICATED, blob, 4), ctx);
  if (!odd && !strcmp(k, "bytes")) {
    int64_t one = 1, zero = 0;
    OK(dcp_state_add_tensor(st, "clash.x", DCP_U8, 1, &one), ctx);
    OK(dcp_state_add_chunk(st, "clash.x", &zero, &one, blob), ctx);
  }
  if (!strcmp(k, "overlap")) { /* every rank [r, r+2) of one row tensor */
    int64_t n = w + 1, off = r, sz = 2;
    OK(dcp_state_add_tensor(st, "clash.rows", DCP_U8, 1, &n), ctx);
    OK(dcp_state_add_chunk(st, "clash.rows", &off, &sz, blob), ctx);
  }
  dcp_save_options o = save_opts(a);
  if (odd && !strcmp(k, "opt_compress")) o.flags ^= DCP_SAVE_COMPRESS;
  if (odd && !strcmp(k, "opt_block")) o.block_size += 4096;
  if (odd && !strcmp(k, "opt_replicas")) o.flags |= DCP_SAVE_CHECK_REPLICAS;
  if (odd && !strcmp(k, "opt_policy")) o.policy = DCP_POLICY_LOWEST_RANK;
  char elsewhere[4200]; /* path: that rank saves next to the others' directory */
  snprintf(elsewhere, sizeof elsewhere, "%s.elsewhere", a->dir);
  const char *dir = odd && !strcmp(k, "path") ? elsewhere : a->dir;
  agree_on_failure(ctx, a, dcp_save(ctx, st, dir, &o), "save");
  dcp_state_free(st);
  at_free_bufs(&b);
}

/* A load where rank world-1 disagrees (see the usage). */
static void do_load_clash(dcp_ctx *ctx, const args *a, at_model *m) {
  int32_t w = dcp_ctx_world_size(ctx), r = dcp_ctx_rank(ctx);
  int odd = r == w - 1;
  at_model mine = *m;
  if (odd && !strcmp(a->load_clash, "dtype"))
    for (size_t t = 0; t < mine.ntensors; t++) mine.t[t].dtype = mine.t[t].dtype == DCP_U8 ? DCP_I8 : DCP_U8;
  if (odd && !strcmp(a->load_clash, "shape"))
    for (size_t t = 0; t < mine.ntensors; t++)
      if (mine.t[t].ndim) mine.t[t].shape[0] += 3;
  dcp_state *st;
  OK(dcp_state_create(ctx, &st), ctx);
  static at_bufs b;
  OK(at_build(ctx, &mine, w, r, 0, a->salt, 1, 0, st, &b), ctx);
  dcp_load_options o;
  dcp_load_options_init(&o);
  if (odd && !strcmp(a->load_clash, "dedup")) o.read_dedup = DCP_READ_DEDUP_OFF;
  if (odd && !strcmp(a->load_clash, "meta")) o.flags |= DCP_LOAD_METADATA_PER_RANK;
  agree_on_failure(ctx, a, dcp_load(ctx, st, a->dir, &o), "load");
  dcp_state_free(st);
  at_free_bufs(&b);
}

int main(int argc, char **argv) {
  args a;
  parse(argc, argv, &a);
  dcp_ctx *ctx = open_ctx(&a);
  static at_model m;
  at_model_gen(&m, a.seed);
  if (a.save) do_save(ctx, &a, &m);
  if (a.load_world) do_load(ctx, &a, &m);
  if (a.clash) do_clash(ctx, &a, &m);
  if (a.load_clash) do_load_clash(ctx, &a, &m);
  dcp_ctx_free(ctx);
  return 0;
}
