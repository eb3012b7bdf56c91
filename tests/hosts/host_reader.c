/* host_reader.c — which rank reads for a read-dedup group, on ranks spread
 * over hosts (tests/hosts/run.sh, case host_readers):
 *
 *   dcp_host_reader --coll mpi|file|gloo --dir CKPT --out PREFIX
 *                   [--rendezvous DIR] [--coll-options OPTS]
 *
 * Every rank holds the same NT tensors whole (replicated), saves them,
 * then loads them back with read dedup on: each tensor is one group of
 * every rank, and one member reads it for the others. The rank writes
 * "PREFIX.RANK" = "<payload bytes read> <bytes sent> <bytes received>
 * <dedup path>" (dcp_stats of the load) for the harness, which checks
 * that no rank away from the host of most ranks read anything. Equal
 * tensors make a host-blind balancer spread the reads over every rank,
 * so the check fails when the collective gives no host ids.
 * Rank and world: from the collective (mpi), else $DCP_TEST_RANK and
 * $DCP_TEST_WORLD. Exit 0 when the load verified, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp.h"

#define NT 8
#define SIDE 64

typedef struct args {
  const char *coll, *dir, *out, *rendezvous, *opts;
} args;

static int die(const char *what, dcp_ctx *ctx, dcp_status rc) {
  fprintf(stderr, "host_reader: %s: %s: %s\n", what, dcp_strerror(rc),
          ctx ? dcp_ctx_last_error(ctx) : dcp_ctx_create_error());
  return 1;
}

static int parse(int argc, char **argv, args *a) {
  *a = (args){0};
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--coll")) a->coll = v;
    else if (!strcmp(k, "--dir")) a->dir = v;
    else if (!strcmp(k, "--out")) a->out = v;
    else if (!strcmp(k, "--rendezvous")) a->rendezvous = v;
    else if (!strcmp(k, "--coll-options")) a->opts = v;
    else return fprintf(stderr, "host_reader: unknown argument %s\n", k), 1;
  }
  if (!a->coll || !a->dir || !a->out)
    return fprintf(stderr, "host_reader: --coll, --dir and --out are required\n"), 1;
  return 0;
}

static dcp_status open_ctx(const args *a, dcp_ctx **ctx) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  if (strcmp(a->coll, "mpi")) {
    const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
    cfg.rank = r ? atoi(r) : 0;
    cfg.world_size = w ? atoi(w) : 1;
  }
  cfg.coll = a->coll;
  cfg.coll_options = a->opts;
  cfg.rendezvous = a->rendezvous;
  cfg.timeout_ms = 60000;
  return dcp_ctx_create(&cfg, ctx);
}

/* A state of the NT tensors over data (NT * SIDE * SIDE floats). */
static dcp_status make_state(dcp_ctx *ctx, float *data, dcp_state **st) {
  dcp_status rc = dcp_state_create(ctx, st);
  const int64_t shape[2] = {SIDE, SIDE}, zero[2] = {0, 0};
  for (int t = 0; !rc && t < NT; t++) {
    char fqn[16];
    snprintf(fqn, sizeof fqn, "t%d", t);
    rc = dcp_state_add_tensor(*st, fqn, DCP_F32, 2, shape);
    if (!rc) rc = dcp_state_add_chunk(*st, fqn, zero, shape, data + (size_t)t * SIDE * SIDE);
  }
  return rc;
}

/* Save the tensors, load them back with read dedup on, check the values;
 * the load's statistics into *out. */
static int save_and_load(dcp_ctx *ctx, const char *dir, dcp_stats *out) {
  size_t n = (size_t)NT * SIDE * SIDE;
  float *src = malloc(n * sizeof *src), *dst = calloc(n, sizeof *dst);
  dcp_state *st = NULL, *back = NULL;
  int bad = !src || !dst;
  for (size_t i = 0; !bad && i < n; i++) src[i] = (float)(i % 9973) * 0.5f;
  dcp_status rc = bad ? DCP_ENOMEM : make_state(ctx, src, &st);
  dcp_save_options so;
  dcp_save_options_init(&so);
  so.flags = DCP_SAVE_OVERWRITE;
  if (!rc) rc = dcp_save(ctx, st, dir, &so);
  if (!rc) rc = make_state(ctx, dst, &back);
  dcp_load_options lo;
  dcp_load_options_init(&lo);
  lo.read_dedup = DCP_READ_DEDUP_ON;
  if (!rc) rc = dcp_load(ctx, back, dir, &lo);
  if (rc) bad = die("save and load", ctx, rc);
  if (!bad && memcmp(src, dst, n * sizeof *src)) {
    fprintf(stderr, "host_reader: loaded values differ\n");
    bad = 1;
  }
  out->struct_size = sizeof *out;
  if (!bad && (rc = dcp_ctx_stats(ctx, out))) bad = die("stats", ctx, rc);
  dcp_state_free(back);
  dcp_state_free(st);
  free(src);
  free(dst);
  return bad;
}

int main(int argc, char **argv) {
  args a;
  if (parse(argc, argv, &a)) return 2;
  dcp_ctx *ctx = NULL;
  dcp_status rc = open_ctx(&a, &ctx);
  if (rc) return die("context", NULL, rc);
  dcp_stats st;
  int bad = save_and_load(ctx, a.dir, &st);
  if (!bad) {
    char path[4200];
    snprintf(path, sizeof path, "%s.%d", a.out, (int)dcp_ctx_rank(ctx));
    FILE *f = fopen(path, "w");
    bad = !f || fprintf(f, "%llu %llu %llu %u\n", (unsigned long long)st.read_payload_bytes,
                        (unsigned long long)st.dedup_sent_bytes,
                        (unsigned long long)st.dedup_recv_bytes, st.dedup_path) < 0;
    if (f && fclose(f)) bad = 1;
    if (bad) fprintf(stderr, "host_reader: cannot write %s\n", path);
  }
  dcp_ctx_free(ctx);
  return bad;
}
