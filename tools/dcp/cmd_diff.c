/* cmd_diff.c — `dcp diff A B`: tensor-by-tensor comparison of two
 * checkpoints, whatever their shardings: each common tensor is loaded whole
 * from each side, one tensor at a time. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  float v = e == 0 ? ldexpf((float)m, -24)
            : e == 31 ? (m ? NAN : INFINITY)
                      : ldexpf((float)(m | 0x400), e - 25);
  return h & 0x8000 ? -v : v;
}

/* Element i of a float buffer as a double. */
static double elem(dcp_dtype dt, const uint8_t *p, size_t i) {
  switch (dt) {
  case DCP_F32: {
    float f;
    memcpy(&f, p + 4 * i, 4);
    return f;
  }
  case DCP_F64: {
    double d;
    memcpy(&d, p + 8 * i, 8);
    return d;
  }
  case DCP_F16: {
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return half_to_float(h);
  }
  default: { /* BF16 */
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  }
}

static bool is_float(dcp_dtype dt) {
  return dt == DCP_F32 || dt == DCP_F64 || dt == DCP_F16 || dt == DCP_BF16;
}

static bool same_geometry(const dcp_tensor_info *a, const dcp_tensor_info *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (uint32_t d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

typedef struct side {
  const char *path;
  dcp_meta *m;
  uint8_t *buf;
  size_t cap;
} side;

static dcp_status load(dcp_ctx *ctx, side *s, size_t i, size_t n) {
  if (n > s->cap) {
    uint8_t *p = realloc(s->buf, n);
    if (!p) return DCP_ENOMEM;
    s->buf = p, s->cap = n;
  }
  return dcp_read_tensor(ctx, s->path, s->m, i, s->buf, n);
}

/* Compare one common tensor: 0 equal, 1 different, -1 error (printed). */
static int compare(dcp_ctx *ctx, side *a, size_t ia, side *b, size_t ib, bool quiet) {
  dcp_tensor_info ta, tb;
  dcp_meta_tensor(a->m, ia, &ta);
  dcp_meta_tensor(b->m, ib, &tb);
  if (!same_geometry(&ta, &tb)) {
    printf("different  %s  (dtype or shape: %s/%u-d vs %s/%u-d)\n", ta.fqn,
           dcp_dtype_name(ta.dtype), ta.ndim, dcp_dtype_name(tb.dtype), tb.ndim);
    return 1;
  }
  uint64_t n = dcp_dtype_size(ta.dtype);
  for (uint32_t d = 0; d < ta.ndim; d++) n *= (uint64_t)ta.shape[d];
  dcp_status s = load(ctx, a, ia, (size_t)n);
  if (!s) s = load(ctx, b, ib, (size_t)n);
  if (s) return cli_fail("diff", ctx, s), -1;
  if (!n || !memcmp(a->buf, b->buf, (size_t)n)) {
    if (!quiet) printf("equal      %s\n", ta.fqn);
    return 0;
  }
  printf("different  %s", ta.fqn);
  if (is_float(ta.dtype)) {
    size_t count = (size_t)n / dcp_dtype_size(ta.dtype);
    double max = 0;
    for (size_t i = 0; i < count; i++) {
      double x = elem(ta.dtype, a->buf, i), y = elem(ta.dtype, b->buf, i);
      double d = isnan(x) || isnan(y) ? (isnan(x) && isnan(y) ? 0 : INFINITY) : fabs(x - y);
      if (d > max || (isnan(d) && !isnan(max))) max = d;
    }
    printf("  max abs diff %g", max);
  }
  putchar('\n');
  return 1;
}

static const char diff_help[] =
    "usage: dcp diff A B [--quiet]\n\n"
    "Compare checkpoints A and B tensor by tensor, whatever their shardings: each\n"
    "line says equal, different (with the max abs difference for F32, F64, F16\n"
    "and BF16) or only in A / only in B. --quiet prints only the differences.\n"
    "exit status: 0 all equal, 1 differences, 2 usage, 3 error\n";

static int walk(dcp_ctx *ctx, side *a, side *b, bool quiet) {
  size_t na = dcp_meta_tensor_count(a->m), nb = dcp_meta_tensor_count(b->m), i = 0, j = 0;
  size_t equal = 0, diff = 0, only_a = 0, only_b = 0;
  while (i < na || j < nb) {
    dcp_tensor_info ta, tb;
    if (i < na) dcp_meta_tensor(a->m, i, &ta);
    if (j < nb) dcp_meta_tensor(b->m, j, &tb);
    int c = i == na ? 1 : j == nb ? -1 : strcmp(ta.fqn, tb.fqn);
    if (c < 0) {
      printf("only in A  %s\n", ta.fqn), only_a++, i++;
    } else if (c > 0) {
      printf("only in B  %s\n", tb.fqn), only_b++, j++;
    } else {
      int r = compare(ctx, a, i++, b, j++, quiet);
      if (r < 0) return CLI_ERROR;
      r ? diff++ : equal++;
    }
  }
  printf("%zu equal, %zu different, %zu only in A, %zu only in B\n", equal, diff, only_a, only_b);
  return diff || only_a || only_b ? CLI_DIFF : CLI_OK;
}

int cmd_diff(int argc, char **argv) {
  cli_args a;
  if (!cli_parse(argc, argv, "", &a)) return CLI_USAGE;
  if (a.help) return fputs(diff_help, stdout), CLI_OK;
  if (a.npos != 2) return fputs(diff_help, stderr), CLI_USAGE;
  dcp_ctx *ctx = cli_context("diff", true);
  if (!ctx) return CLI_ERROR;
  side sa = {.path = a.pos[0]}, sb = {.path = a.pos[1]};
  int rc = CLI_OK;
  dcp_status s = dcp_meta_open(ctx, sa.path, &sa.m);
  if (!s) s = dcp_meta_open(ctx, sb.path, &sb.m);
  rc = s ? cli_fail("diff", ctx, s) : walk(ctx, &sa, &sb, a.quiet);
  dcp_meta_free(sa.m);
  dcp_meta_free(sb.m);
  free(sa.buf);
  free(sb.buf);
  dcp_ctx_free(ctx);
  return rc;
}
