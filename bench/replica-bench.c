/* replica-bench — the cost of the replica check (DCP_SAVE_CHECK_REPLICAS,
 * dcp_check_replicas) against a save without it, in one run.
 *
 *   replica-bench [--ranks N] [--dp D] [--mb M] [--reps R] [--dir DIR]
 *
 * Forks N ranks over the file collective (defaults: 4 ranks, dp 2, 64 MiB
 * per rank, 3 repetitions, a fresh directory under /tmp). Every rank holds
 * one f32 tensor of M MiB, split over N/D tensor-parallel shards and
 * replicated D times, so each box has D holders: one writes it, all hash
 * it. The saves with and without the check alternate (overwriting one
 * checkpoint), the best of R each is reported, with the standalone check's
 * time and its collective bytes on rank 0, and the ratio of the two saves. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dcp.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define DIE(...) (fprintf(stderr, "replica-bench: " __VA_ARGS__), fputc('\n', stderr), _exit(1))

static void must(dcp_status rc, dcp_ctx *ctx, const char *what) {
  if (rc) DIE("%s: %s (%s)", what, dcp_strerror(rc), ctx ? dcp_ctx_last_error(ctx) : "");
}

static void rank_main(int rank, int world, int dp, int mb, int reps, const char *dir) {
  char rdv[4200], ckpt[4200];
  snprintf(rdv, sizeof rdv, "%s/rdv", dir);
  snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank, cfg.world_size = world, cfg.coll = "file", cfg.rendezvous = rdv;
  dcp_ctx *ctx;
  dcp_status rc = dcp_ctx_create(&cfg, &ctx);
  if (rc) DIE("ctx: %s: %s", dcp_strerror(rc), dcp_ctx_create_error());
  size_t n = (size_t)mb << 18; /* floats */
  float *x = malloc(n * sizeof *x);
  if (!x) DIE("out of memory");
  int64_t tp = world / dp, mesh[2] = {dp, tp}, shape[1] = {(int64_t)n * tp};
  for (size_t i = 0; i < n; i++) x[i] = (float)((rank % tp) * 7 + (int)(i % 1000));
  uint32_t map[1] = {1u << 1};
  dcp_layout *l;
  dcp_state *st;
  must(dcp_layout_create(ctx, 2, mesh, NULL, 1, map, &l), ctx, "layout");
  must(dcp_state_create(ctx, &st), ctx, "state");
  must(dcp_state_add_sharded(st, "x", DCP_F32, 1, shape, l, x), ctx, "tensor");
  double best[3] = {1e30, 1e30, 1e30};
  dcp_replica_report rep = {.struct_size = sizeof rep};
  for (int r = 0; r < reps; r++)
    for (int c = 0; c < 3; c++) {
      dcp_save_options o;
      dcp_save_options_init(&o);
      o.flags = DCP_SAVE_OVERWRITE | (c == 1 ? DCP_SAVE_CHECK_REPLICAS : 0u);
      double t0 = now_s();
      if (c < 2) must(dcp_save(ctx, st, ckpt, &o), ctx, "save");
      else must(dcp_check_replicas(ctx, st, 0, &rep), ctx, "check");
      double t = now_s() - t0;
      if (t < best[c]) best[c] = t;
    }
  if (rank == 0)
    printf("replica-bench: %d ranks, dp %d, %d MiB per rank: save %.3f s, save with "
           "DCP_SAVE_CHECK_REPLICAS %.3f s (ratio %.3f); dcp_check_replicas alone %.3f s, "
           "%llu boxes, %llu collective bytes on rank 0\n",
           world, dp, mb, best[0], best[1], best[1] / best[0], best[2],
           (unsigned long long)rep.boxes_checked, (unsigned long long)rep.exchange_bytes);
  dcp_state_free(st);
  dcp_layout_free(l);
  dcp_ctx_free(ctx);
  free(x);
  fflush(stdout);
  _exit(0);
}

int main(int argc, char **argv) {
  int world = 4, dp = 2, mb = 64, reps = 3;
  char tmpl[] = "/tmp/replica-bench-XXXXXX";
  const char *dir = NULL;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ranks")) world = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dp")) dp = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--mb")) mb = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
    else {
      fprintf(stderr, "usage: replica-bench [--ranks N] [--dp D] [--mb M] [--reps R] [--dir DIR]\n");
      return 2;
    }
  }
  if (world < 1 || dp < 1 || world % dp || mb < 1 || reps < 1) {
    fprintf(stderr, "replica-bench: want ranks a multiple of dp, mb and reps >= 1\n");
    return 2;
  }
  if (!dir && !(dir = mkdtemp(tmpl))) return perror("mkdtemp"), 1;
  char rdv[4200];
  snprintf(rdv, sizeof rdv, "%s/rdv", dir);
  mkdir(dir, 0755);
  mkdir(rdv, 0755);
  fflush(stdout);
  for (int r = 0; r < world; r++) {
    pid_t p = fork();
    if (p < 0) return perror("fork"), 1;
    if (p == 0) rank_main(r, world, dp, mb, reps, dir);
  }
  int bad = 0, st;
  while (wait(&st) > 0) bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  if (!strncmp(dir, "/tmp/replica-bench-", 19)) {
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) bad = 1;
  }
  return bad;
}
