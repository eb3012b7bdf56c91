/* cli.c — option parsing, context, progress and sizes for `dcp`. */
#include "cli.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static bool allows(const char *allowed, const char *name) {
  size_t n = strlen(name);
  for (const char *p = allowed; (p = strstr(p, name)); p += n)
    if ((p == allowed || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
  return false;
}

static bool set_option(cli_args *a, const char *name, const char *value) {
  if (!strcmp(name, "to")) a->to = value;
  else if (!strcmp(name, "max-shard-size")) a->max_shard = value;
  else if (!strcmp(name, "json")) a->json = true;
  else if (!strcmp(name, "link")) a->link = true;
  else return false;
  return true;
}

static bool takes_value(const char *name) {
  return !strcmp(name, "to") || !strcmp(name, "max-shard-size");
}

bool cli_parse(int argc, char **argv, const char *allowed, cli_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      a->help = true;
      continue;
    }
    if (!strcmp(arg, "-q") || !strcmp(arg, "--quiet")) {
      a->quiet = true;
      continue;
    }
    if (strncmp(arg, "--", 2) || !arg[2]) {
      if (a->npos == 2) return fprintf(stderr, "dcp: unexpected argument '%s'\n", arg), false;
      a->pos[a->npos++] = arg;
      continue;
    }
    char name[64];
    const char *eq = strchr(arg + 2, '='), *value = NULL;
    size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
    snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), arg + 2);
    if (!allows(allowed, name)) return fprintf(stderr, "dcp: unknown option '%s'\n", arg), false;
    if (takes_value(name)) {
      value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
      if (!value || !*value) return fprintf(stderr, "dcp: option --%s needs a value\n", name), false;
    } else if (eq) {
      return fprintf(stderr, "dcp: option --%s takes no value\n", name), false;
    }
    set_option(a, name, value);
  }
  return true;
}

/* ---- progress ----------------------------------------------------------- */

typedef struct progress {
  const char *label;
  double t0, last;
  bool drawn;
} progress;

static progress g_progress;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void draw(void *arg, uint64_t done, uint64_t total) {
  progress *p = arg;
  double t = now();
  if (t - p->last < 0.2 && done < total) return;
  p->last = t;
  double el = t - p->t0, rate = el > 0 ? (double)done / el : 0;
  double eta = rate > 0 && total > done ? (double)(total - done) / rate : 0;
  int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
  char bar[31];
  int fill = pct * 30 / 100;
  for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
  bar[30] = '\0';
  char hd[32], hr[32];
  fprintf(stderr, "\r%s [%s] %3d%% %s  %s/s  ETA %d:%02d ", p->label, bar, pct,
          cli_human(done, hd, sizeof hd), cli_human((uint64_t)rate, hr, sizeof hr),
          (int)eta / 60, (int)eta % 60);
  p->drawn = true;
}

void cli_progress_done(void) {
  if (g_progress.drawn) fputc('\n', stderr);
  g_progress.drawn = false;
}

dcp_ctx *cli_context(const char *label, bool quiet) {
  dcp_ctx *ctx = NULL;
  if (dcp_ctx_create(NULL, &ctx) != DCP_OK) {
    fprintf(stderr, "dcp: %s\n", dcp_ctx_create_error());
    return NULL;
  }
  if (!quiet && isatty(STDERR_FILENO)) {
    g_progress = (progress){.label = label, .t0 = now()};
    dcp_ctx_set_progress(ctx, draw, &g_progress);
  }
  return ctx;
}

int cli_fail(const char *cmd, dcp_ctx *ctx, dcp_status s) {
  cli_progress_done();
  const char *msg = ctx ? dcp_ctx_last_error(ctx) : "";
  fprintf(stderr, "dcp %s: %s%s%s\n", cmd, dcp_strerror(s), *msg ? ": " : "", msg);
  return CLI_ERROR;
}

/* ---- sizes ------------------------------------------------------------------ */

bool cli_parse_size(const char *s, uint64_t *out) {
  char *end;
  if (!s || !isdigit((unsigned char)*s)) return false;
  double v = strtod(s, &end);
  static const struct { const char *unit; double mult; } units[] = {
      {"", 1}, {"b", 1}, {"k", 1e3}, {"kb", 1e3}, {"m", 1e6}, {"mb", 1e6}, {"g", 1e9},
      {"gb", 1e9}, {"t", 1e12}, {"tb", 1e12}, {"kib", 1024.0}, {"mib", 1048576.0},
      {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  while (*end == ' ') end++;
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (!strcasecmp(end, units[i].unit)) {
      double b = v * units[i].mult;
      if (b < 1 || b > 1.8e19) return false;
      *out = (uint64_t)b;
      return true;
    }
  return false;
}

const char *cli_human(uint64_t n, char *buf, unsigned cap) {
  static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)n;
  int k = 0;
  while (v >= 1024 && k < 5) v /= 1024, k++;
  if (k == 0) snprintf(buf, cap, "%llu B", (unsigned long long)n);
  else snprintf(buf, cap, "%.1f %s", v, u[k]);
  return buf;
}
