/* async_kit.c — see async_kit.h. */
#include "async_kit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

void ak_parse(int argc, char **argv, ak_args *a) {
  *a = (ak_args){.mode = argc > 1 ? argv[1] : ""};
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--dir")) a->dir = argv[i + 1];
    else if (!strcmp(argv[i], "--rendezvous")) a->rdv = argv[i + 1];
    else if (!strcmp(argv[i], "--writer-coll")) a->writer_coll = argv[i + 1];
    else if (!strcmp(argv[i], "--trainer-coll")) a->trainer_coll = argv[i + 1];
    else if (!strcmp(argv[i], "--trainer-opts")) a->trainer_opts = argv[i + 1];
    else if (!strcmp(argv[i], "--writer-opts")) a->writer_opts = argv[i + 1];
    else if (!strcmp(argv[i], "--timeout-ms")) a->timeout_ms = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--lease-ms")) a->lease_ms = atol(argv[i + 1]);
  }
  if (!a->dir) {
    fprintf(stderr, "usage: %s MODE --dir D [--rendezvous R] [--writer-coll C] "
                    "[--trainer-coll mpi] [--timeout-ms MS] [--lease-ms MS]\n", argv[0]);
    exit(2);
  }
  mkdir(a->dir, 0755);
}

dcp_ctx *ak_open_ctx(const ak_args *a) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.timeout_ms = a->timeout_ms > 0 ? a->timeout_ms : 60000;
  cfg.lease_ms = a->lease_ms > 0 ? a->lease_ms : 0;
  const char *r = getenv("DCP_TEST_RANK"), *w = getenv("DCP_TEST_WORLD");
  if (a->trainer_coll && !strcmp(a->trainer_coll, "mpi")) {
    cfg.coll = "mpi";
  } else if ((a->rdv || a->trainer_opts) && r && w) {
    cfg.coll = a->trainer_coll ? a->trainer_coll : "file";
    cfg.coll_options = a->trainer_opts;
    cfg.rendezvous = a->rdv;
    cfg.rank = atoi(r);
    cfg.world_size = atoi(w);
  }
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  if (rc) {
    fprintf(stderr, "rank %s: ctx: %s\n", r ? r : "0", dcp_ctx_create_error());
    exit(1);
  }
  if (dcp_ctx_world_size(ctx) > 1 &&
      (rc = dcp_async_set_coordination(ctx, a->writer_coll ? a->writer_coll : "file", a->rdv,
                                      a->writer_opts))) {
    fprintf(stderr, "rank %d: set coordination: %s\n", dcp_ctx_rank(ctx), dcp_strerror(rc));
    exit(1);
  }
  return ctx;
}

void ak_rows_alloc(int rank, int world, int64_t nrows, int64_t ncols, size_t nbig,
                   int64_t *row0, int64_t *rows, float **w, uint8_t **big) {
  int64_t per = (nrows + world - 1) / world;
  *row0 = per * rank < nrows ? per * rank : nrows;
  *rows = *row0 + per < nrows ? per : nrows - *row0;
  *w = calloc((size_t)(*rows * ncols) + 1, sizeof **w);
  *big = nbig ? malloc(nbig) : NULL;
  if (!*w || (nbig && !*big)) {
    fprintf(stderr, "rank %d: out of memory\n", rank);
    exit(1);
  }
}

/* Exits 1 unless rc is DCP_OK. */
static void must(dcp_ctx *ctx, dcp_status rc, const char *what) {
  if (!rc) return;
  fprintf(stderr, "rank %d: %s: %s: %s\n", dcp_ctx_rank(ctx), what, dcp_strerror(rc),
          dcp_ctx_last_error(ctx));
  exit(1);
}

void ak_rows_add(dcp_ctx *ctx, dcp_state *st, int64_t nrows, int64_t ncols, int64_t row0,
                 int64_t rows, float *w, uint8_t *big, size_t nbig) {
  int64_t shape[2] = {nrows, ncols}, off[2] = {row0, 0}, size[2] = {rows, ncols};
  must(ctx, dcp_state_add_tensor(st, "w", DCP_F32, 2, shape), "declare w");
  must(ctx, dcp_state_add_chunk(st, "w", off, size, w), "add w's rows");
  if (!big) return;
  int64_t bshape[1] = {(int64_t)nbig}, boff[1] = {0};
  must(ctx, dcp_state_add_tensor(st, "big", DCP_U8, 1, bshape), "declare big");
  must(ctx, dcp_state_add_chunk(st, "big", boff, bshape, big), "add big");
}

int ak_gone_within(int pid, long ms) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  for (long waited = 0; waited <= ms; waited += 10) {
    FILE *f = fopen(path, "r"); /* afresh each time: /proc text is read once */
    char state = 'X';
    if (f && fscanf(f, "%*d (%*[^)]) %c", &state) != 1) state = 'X';
    if (f) fclose(f);
    if (state == 'Z' || state == 'X') return 1;
    nanosleep(&(struct timespec){0, 10000000}, NULL);
  }
  return 0;
}
