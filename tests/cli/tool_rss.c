/* tool_rss.c — the peak resident memory of `dcp import`, `export` and
 * `diff` on one large F32 tensor, against a bound that does not grow with
 * the tensor (docs/cli.md, "Memory"). Not a timing test: it counts bytes.
 *
 *   dcp_tool_rss DCP DIR MIB LIMIT_MIB
 *
 * writes DIR/src.safetensors (one [rows, 65536] F32 tensor of MIB MiB, in
 * 1 MiB pieces), imports it (row chunks of 64 MiB), saves the same values
 * through dcp_save as 4 column chunks (every window of an export or diff
 * then takes a part of each), and runs, each as its own process measured
 * with wait4's ru_maxrss: import, export of both checkpoints, and diff of
 * the two (which must find them equal). Fails (exit 1) when a command fails
 * or one peaks above LIMIT_MIB; prints a table of the peaks either way.
 * This process holds no large buffer when it starts a command (a child's
 * peak includes what it inherited before exec). */
#define _DEFAULT_SOURCE /* wait4, realpath */

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dcp.h"

#define COLS 65536 /* elements per row: 256 KiB */

static float value(int64_t r, int64_t c) { return (float)((r * 131 + c * 7) % 1000) * 0.5f; }

static int write_source(const char *path, int64_t rows) {
  char hdr[256];
  uint64_t bytes = (uint64_t)rows * COLS * 4;
  int n = snprintf(hdr, sizeof hdr,
                   "{\"w\":{\"dtype\":\"F32\",\"shape\":[%lld,%d],\"data_offsets\":[0,%llu]}}",
                   (long long)rows, COLS, (unsigned long long)bytes);
  while (n % 8) hdr[n++] = ' ';
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  uint8_t len[8];
  for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)n >> (8 * i));
  int bad = fwrite(len, 1, 8, f) != 8 || fwrite(hdr, 1, (size_t)n, f) != (size_t)n;
  float *row = malloc(COLS * sizeof *row);
  for (int64_t r = 0; r < rows && row && !bad; r++) {
    for (int64_t c = 0; c < COLS; c++) row[c] = value(r, c);
    bad = fwrite(row, sizeof *row, COLS, f) != COLS;
  }
  free(row);
  return fclose(f) || bad || !row ? -1 : 0;
}

/* The same tensor saved as 4 column chunks. */
static int save_columns(const char *path, int64_t rows) {
  dcp_ctx *ctx = NULL;
  dcp_state *st = NULL;
  float *part[4] = {0};
  int64_t shape[2] = {rows, COLS}, w = COLS / 4;
  int rc = dcp_ctx_create(NULL, &ctx) || dcp_state_create(ctx, &st) ||
           dcp_state_add_tensor(st, "w", DCP_F32, 2, shape);
  for (int k = 0; k < 4 && !rc; k++) {
    if (!(part[k] = malloc((size_t)(rows * w) * sizeof(float)))) rc = 1;
    for (int64_t r = 0; r < rows && !rc; r++)
      for (int64_t c = 0; c < w; c++) part[k][r * w + c] = value(r, k * w + c);
    int64_t off[2] = {0, k * w}, size[2] = {rows, w};
    if (!rc) rc = dcp_state_add_chunk(st, "w", off, size, part[k]);
  }
  if (!rc) rc = dcp_save(ctx, st, path, NULL);
  if (rc && ctx) fprintf(stderr, "save: %s\n", dcp_ctx_last_error(ctx));
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  for (int k = 0; k < 4; k++) free(part[k]); /* unmapped: not inherited below */
  return rc;
}

/* Run dcp with args in dir; *kib its peak RSS. Returns its exit status. */
static int run(const char *dcp, const char *dir, const char *const *args, long *kib) {
  pid_t pid = fork();
  if (pid == 0) {
    const char *argv[8] = {dcp};
    for (int i = 0; args[i] && i < 6; i++) argv[i + 1] = args[i];
    if (chdir(dir)) _exit(126);
    execv(dcp, (char *const *)argv);
    _exit(127);
  }
  int st = 0;
  struct rusage ru;
  if (pid < 0 || wait4(pid, &st, 0, &ru) != pid) return -1;
  *kib = ru.ru_maxrss;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s DCP DIR MIB LIMIT_MIB\n", argv[0]);
    return 2;
  }
  char dcp[4096]; /* the commands run in dir: a relative path would not reach it */
  if (!realpath(argv[1], dcp)) {
    fprintf(stderr, "%s: %s\n", argv[1], strerror(errno));
    return 2;
  }
  const char *dir = argv[2];
  long mib = atol(argv[3]), limit = atol(argv[4]);
  int64_t rows = mib * 4; /* a row is 256 KiB */
  char src[4096], cols[4096];
  snprintf(src, sizeof src, "%s/src.safetensors", dir);
  snprintf(cols, sizeof cols, "%s/cols", dir);
  if (mib < 1 || write_source(src, rows) || save_columns(cols, rows)) {
    fprintf(stderr, "cannot write the fixtures in %s: %s\n", dir, strerror(errno));
    return 1;
  }
  static const struct {
    const char *what;
    const char *args[6];
    int want;
  } steps[] = {
      {"import (64 MiB row chunks)", {"import", "src.safetensors", "--to", "rows", "-q"}, 0},
      {"export of the row chunks", {"export", "rows", "--to", "out-rows", "-q"}, 0},
      {"export of 4 column chunks", {"export", "cols", "--to", "out-cols", "-q"}, 0},
      {"diff rows vs columns", {"diff", "rows", "cols", "-q"}, 0},
  };
  int failed = 0;
  printf("tensor: F32 [%lld, %d], %ld MiB; bound %ld MiB\n", (long long)rows, COLS, mib, limit);
  printf("%-28s %10s  %s\n", "command", "peak RSS", "");
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    long kib = 0;
    int rc = run(dcp, dir, steps[i].args, &kib);
    bool over = kib > limit * 1024;
    printf("%-28s %6.1f MiB  %s\n", steps[i].what, (double)kib / 1024,
           rc != steps[i].want ? "FAILED (exit status)" : over ? "OVER THE BOUND" : "ok");
    if (rc != steps[i].want || over) failed = 1;
  }
  return failed;
}
