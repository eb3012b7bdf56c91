/* cmd_diff.c — `dcp diff A B`: tensor-by-tensor comparison of two
 * checkpoints, whatever their shardings. Each common tensor is streamed
 * from both sides in windows (dcp_read_tensor_range), so memory holds two
 * windows whatever the tensor's size; a tensor that cannot be read on
 * either side is reported and the comparison goes on. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DIFF_WINDOW (16u << 20) /* bytes of a tensor compared at a time, per side */

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

/* "[d0, d1, ...]" into buf. */
static const char *shape_text(const dcp_tensor_info *t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (uint32_t d = 0; d < t->ndim && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, d ? ", " : "", t->shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

static uint64_t nbytes(const dcp_tensor_info *t) {
  uint64_t n = dcp_dtype_size(t->dtype);
  for (uint32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
  return n;
}

typedef struct side {
  const char *path;
  dcp_meta *m;
  uint8_t *buf; /* one window */
} side;

/* The outcome of one tensor. */
typedef enum { EQUAL, DIFFERENT, ONLY_A, ONLY_B, UNREADABLE } verdict;
static const char *const verdict_text[] = {"equal", "different", "only in A", "only in B",
                                           "unreadable"};
static const char *const verdict_json[] = {"equal", "different", "only_a", "only_b",
                                           "unreadable"};

typedef struct result {
  verdict v;
  const char *fqn;
  const char *why;    /* different: "dtype", "shape" or "values" */
  bool has_max;       /* different values of a float dtype */
  double max;         /* their max abs difference */
  char side;          /* unreadable: 'A' or 'B' */
  dcp_status status;  /* unreadable: why */
  char message[512];
} result;

typedef struct diff_run {
  dcp_ctx *ctx;
  side a, b;
  cli_args args;
  size_t count[5];
  bool hard_error; /* a tensor failed for another reason than damage */
  json_t *tensors; /* --json */
} diff_run;

static double max_abs(dcp_dtype dt, const uint8_t *x, const uint8_t *y, size_t n, double max) {
  size_t count = n / dcp_dtype_size(dt);
  for (size_t i = 0; i < count; i++) {
    double p = elem(dt, x, i), q = elem(dt, y, i);
    double d = isnan(p) || isnan(q) ? (isnan(p) && isnan(q) ? 0 : INFINITY) : fabs(p - q);
    if (d > max) max = d;
  }
  return max;
}

/* Read window [at, at + n) of tensor i of s; on failure fill r. */
static bool read_side(diff_run *d, side *s, char name, size_t i, uint64_t at, size_t n,
                      result *r) {
  dcp_status rc = dcp_read_tensor_range(d->ctx, s->path, s->m, i, at, s->buf, n);
  if (!rc) return true;
  r->v = UNREADABLE;
  r->side = name;
  r->status = rc;
  snprintf(r->message, sizeof r->message, "%s", dcp_ctx_last_error(d->ctx));
  if (rc != DCP_ECORRUPT && rc != DCP_EINCOMPLETE) d->hard_error = true;
  return false;
}

/* Compare tensors ia of A and ib of B window by window. */
static void compare(diff_run *d, size_t ia, size_t ib, result *r) {
  dcp_tensor_info ta, tb;
  dcp_meta_tensor(d->a.m, ia, &ta);
  dcp_meta_tensor(d->b.m, ib, &tb);
  r->v = EQUAL;
  if (!same_geometry(&ta, &tb)) {
    r->v = DIFFERENT;
    r->why = ta.dtype != tb.dtype ? "dtype" : "shape";
    char sa[160], sb[160];
    snprintf(r->message, sizeof r->message, "%s %s vs %s %s", dcp_dtype_name(ta.dtype),
             shape_text(&ta, sa, sizeof sa), dcp_dtype_name(tb.dtype),
             shape_text(&tb, sb, sizeof sb));
    return;
  }
  uint64_t total = nbytes(&ta);
  bool fl = is_float(ta.dtype);
  uint64_t win = DIFF_WINDOW - DIFF_WINDOW % dcp_dtype_size(ta.dtype);
  for (uint64_t at = 0; at < total; at += win) {
    size_t n = (size_t)(total - at < win ? total - at : win);
    if (!read_side(d, &d->a, 'A', ia, at, n, r) || !read_side(d, &d->b, 'B', ib, at, n, r))
      return;
    cli_progress_add(2 * (uint64_t)n);
    if (!memcmp(d->a.buf, d->b.buf, n)) continue;
    r->v = DIFFERENT;
    r->why = "values";
    if (!fl) continue; /* keep reading: a damaged block later is still reported */
    r->max = max_abs(ta.dtype, d->a.buf, d->b.buf, n, r->has_max ? r->max : 0);
    r->has_max = true;
  }
}

static json_t *number_or_word(double v) {
  return isfinite(v) ? json_real(v) : json_string(isnan(v) ? "nan" : "inf");
}

static void report(diff_run *d, const result *r) {
  d->count[r->v]++;
  if (d->args.json) {
    json_t *o = json_object();
    json_object_set_new(o, "fqn", json_string(r->fqn));
    json_object_set_new(o, "status", json_string(verdict_json[r->v]));
    if (r->v == DIFFERENT) {
      json_object_set_new(o, "reason", json_string(r->why));
      json_object_set_new(o, "max_abs_diff", r->has_max ? number_or_word(r->max) : json_null());
    }
    if (r->v == UNREADABLE) {
      json_object_set_new(o, "side", json_string(r->side == 'A' ? "A" : "B"));
      json_object_set_new(o, "error", json_string(r->message));
    }
    json_array_append_new(d->tensors, o);
    return;
  }
  if (r->v == EQUAL && d->args.quiet) return;
  cli_progress_done();
  printf("%s\t%s", verdict_text[r->v], r->fqn);
  if (r->v == DIFFERENT && r->has_max) printf("\tmax abs diff %g", r->max);
  else if (r->v == DIFFERENT) printf("\t%s%s%s", r->why, *r->message ? ": " : "", r->message);
  if (r->v == UNREADABLE) printf("\t%c: %s", r->side, r->message);
  putchar('\n');
}

/* Bytes the walk will read: every common tensor of one geometry, twice. */
static uint64_t work(diff_run *d) {
  size_t na = dcp_meta_tensor_count(d->a.m), nb = dcp_meta_tensor_count(d->b.m), i = 0, j = 0;
  uint64_t total = 0;
  while (i < na && j < nb) {
    dcp_tensor_info ta, tb;
    dcp_meta_tensor(d->a.m, i, &ta);
    dcp_meta_tensor(d->b.m, j, &tb);
    int c = strcmp(ta.fqn, tb.fqn);
    if (!c && same_geometry(&ta, &tb)) total += 2 * nbytes(&ta);
    i += c <= 0, j += c >= 0;
  }
  return total;
}

static int walk(diff_run *d) {
  size_t na = dcp_meta_tensor_count(d->a.m), nb = dcp_meta_tensor_count(d->b.m), i = 0, j = 0;
  cli_progress_start("diff", work(d));
  while (i < na || j < nb) {
    dcp_tensor_info ta, tb;
    result r = {.v = EQUAL};
    if (i < na) dcp_meta_tensor(d->a.m, i, &ta);
    if (j < nb) dcp_meta_tensor(d->b.m, j, &tb);
    int c = i == na ? 1 : j == nb ? -1 : strcmp(ta.fqn, tb.fqn);
    if (c < 0) {
      r.v = ONLY_A, r.fqn = ta.fqn, i++;
    } else if (c > 0) {
      r.v = ONLY_B, r.fqn = tb.fqn, j++;
    } else {
      r.fqn = ta.fqn;
      compare(d, i++, j++, &r);
    }
    report(d, &r);
  }
  cli_progress_done();
  const size_t *n = d->count;
  if (!d->args.json)
    printf("%zu equal, %zu different, %zu only in A, %zu only in B, %zu unreadable\n", n[EQUAL],
           n[DIFFERENT], n[ONLY_A], n[ONLY_B], n[UNREADABLE]);
  if (d->hard_error) return CLI_ERROR;
  return n[DIFFERENT] || n[ONLY_A] || n[ONLY_B] || n[UNREADABLE] ? CLI_DIFF : CLI_OK;
}

static const char diff_help[] =
    "usage: dcp diff A B [--json] [--quiet]\n\n"
    "Compare checkpoints A and B tensor by tensor, whatever their shardings. One\n"
    "tab-separated line per tensor (names never hold a tab):\n"
    "  equal       NAME\n"
    "  different   NAME  max abs diff X      (F32, F64, F16, BF16 values)\n"
    "  different   NAME  values | dtype: A vs B | shape: A vs B\n"
    "  only in A   NAME\n"
    "  only in B   NAME\n"
    "  unreadable  NAME  A|B: why          (damaged or missing data; diff goes on)\n"
    "then a summary line. Tensors are streamed 16 MiB at a time from each side,\n"
    "so memory stays bounded whatever their size. Bytes items are not compared.\n\n"
    "options:\n" CLI_COMMON_OPTIONS "               (--quiet: no 'equal' lines)\n"
    "\nexit status: 0 all equal, 1 differences or damaged tensors, 2 usage,\n"
    "             3 error (a checkpoint cannot be opened, or I/O while reading)\n";

int cmd_diff(int argc, char **argv) {
  diff_run d = {0};
  if (!cli_parse("diff", argc, argv, "", &d.args)) return CLI_USAGE;
  if (d.args.help) return fputs(diff_help, stdout), CLI_OK;
  if (d.args.npos != 2) return fputs(diff_help, stderr), CLI_USAGE;
  if (!(d.ctx = cli_context("diff", d.args.quiet))) return CLI_ERROR;
  d.a.path = d.args.pos[0], d.b.path = d.args.pos[1];
  d.a.buf = malloc(DIFF_WINDOW);
  d.b.buf = malloc(DIFF_WINDOW);
  dcp_status s = d.a.buf && d.b.buf ? DCP_OK : DCP_ENOMEM;
  if (!s) s = dcp_meta_open(d.ctx, d.a.path, &d.a.m);
  if (!s) s = dcp_meta_open(d.ctx, d.b.path, &d.b.m);
  if (d.args.json) d.tensors = json_array();
  int rc = s ? cli_fail("diff", d.ctx, s) : walk(&d);
  if (d.args.json) {
    json_t *o = cli_json_new("diff"), *sum = json_object();
    json_object_set_new(o, "a", json_string(d.a.path));
    json_object_set_new(o, "b", json_string(d.b.path));
    json_object_set_new(o, "tensors", d.tensors);
    for (int v = EQUAL; v <= UNREADABLE; v++)
      json_object_set_new(sum, verdict_json[v], json_integer((json_int_t)d.count[v]));
    json_object_set_new(o, "summary", sum);
    rc = cli_json_finish(o, rc, d.ctx, s);
  }
  dcp_meta_free(d.a.m);
  dcp_meta_free(d.b.m);
  free(d.a.buf);
  free(d.b.buf);
  dcp_ctx_free(d.ctx);
  return rc;
}
