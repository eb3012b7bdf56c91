/* cli.c — option parsing, context, progress, parent directories, the
 * --json result and sizes for `dcp`. */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static bool allows(const char *allowed, const char *name) {
  if (!strcmp(name, "json")) return true; /* every command */
  size_t n = strlen(name);
  for (const char *p = allowed; (p = strstr(p, name)); p += n)
    if ((p == allowed || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return true;
  return false;
}

static bool set_option(cli_args *a, const char *name, const char *value) {
  if (!strcmp(name, "to")) a->to = value;
  else if (!strcmp(name, "max-shard-size")) a->max_shard = value;
  else if (!strcmp(name, "keep-last")) a->keep_last = value;
  else if (!strcmp(name, "keep-every")) a->keep_every = value;
  else if (!strcmp(name, "json")) a->json = true;
  else if (!strcmp(name, "link")) a->link = true;
  else if (!strcmp(name, "dry-run")) a->dry_run = true;
  else return false;
  return true;
}

static bool takes_value(const char *name) {
  return !strcmp(name, "to") || !strcmp(name, "max-shard-size") || !strcmp(name, "keep-last") ||
         !strcmp(name, "keep-every");
}

/* One "--name[=value]" at argv[*i] (advancing *i over a separate value). */
static bool parse_long(const char *cmd, int argc, char **argv, int *i, const char *allowed,
                       cli_args *a) {
  const char *arg = argv[*i];
  char name[64];
  const char *eq = strchr(arg + 2, '='), *value = NULL;
  size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), arg + 2);
  if (!allows(allowed, name))
    return fprintf(stderr, "dcp %s: unknown option '%s'\n", cmd, arg), false;
  if (takes_value(name)) {
    value = eq ? eq + 1 : (*i + 1 < argc ? argv[++*i] : NULL);
    if (!value || !*value)
      return fprintf(stderr, "dcp %s: option --%s needs a value\n", cmd, name), false;
  } else if (eq) {
    return fprintf(stderr, "dcp %s: option --%s takes no value\n", cmd, name), false;
  }
  return set_option(a, name, value);
}

bool cli_parse(const char *cmd, int argc, char **argv, const char *allowed, cli_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 0; i < argc; i++) {
    const char *arg = argv[i];
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
      a->help = true;
    } else if (!strcmp(arg, "-q") || !strcmp(arg, "--quiet")) {
      a->quiet = true;
    } else if (!strncmp(arg, "--", 2) && arg[2]) {
      if (!parse_long(cmd, argc, argv, &i, allowed, a)) return false;
    } else if (arg[0] == '-' && arg[1] && arg[1] != '-') {
      return fprintf(stderr, "dcp %s: unknown option '%s'\n", cmd, arg), false;
    } else if (a->npos == 2) {
      return fprintf(stderr, "dcp %s: unexpected argument '%s'\n", cmd, arg), false;
    } else {
      a->pos[a->npos++] = arg;
    }
  }
  return true;
}

bool cli_parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out) {
  if (!s || !isdigit((unsigned char)*s)) return false;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (*end || errno == ERANGE || v < min || v > max) return false;
  *out = v;
  return true;
}

/* ---- progress ----------------------------------------------------------- */

/* One display on stderr: a bar redrawn in place on a terminal, else (for
 * logs) a line every `interval` seconds. */
typedef struct progress {
  bool on, tty;
  double interval;
  const char *label;
  double t0, last;
  uint64_t done, total;
  bool drawn; /* a bar is on the current line */
} progress;

static progress g_progress;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void draw(progress *p, const char *label, uint64_t done, uint64_t total) {
  double t = now();
  if (!p->label || strcmp(p->label, label)) { /* a new phase */
    if (p->drawn) fputc('\n', stderr);
    p->drawn = false;
    p->label = label;
    p->t0 = p->last = t;
  }
  bool end = done >= total;
  if (p->tty ? t - p->last < 0.2 && !end : t - p->last < p->interval) return;
  p->last = t;
  double el = t - p->t0, rate = el > 0 ? (double)done / el : 0;
  double eta = rate > 0 && total > done ? (double)(total - done) / rate : 0;
  int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
  char hd[32], ht[32], hr[32];
  cli_human(done, hd, sizeof hd);
  cli_human(total, ht, sizeof ht);
  cli_human((uint64_t)rate, hr, sizeof hr);
  if (!p->tty) {
    fprintf(stderr, "dcp %s: %d%% %s of %s, %s/s, ETA %d:%02d\n", label, pct, hd, ht, hr,
            (int)eta / 60, (int)eta % 60);
    return;
  }
  char bar[31];
  int fill = pct * 30 / 100;
  for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
  bar[30] = '\0';
  fprintf(stderr, "\r%s [%s] %3d%% %s  %s/s  ETA %d:%02d ", label, bar, pct, hd, hr,
          (int)eta / 60, (int)eta % 60);
  p->drawn = true;
}

static void on_phase(void *arg, dcp_phase phase, uint64_t done, uint64_t total) {
  draw(arg, dcp_phase_name(phase), done, total);
}

void cli_progress_done(void) {
  if (g_progress.drawn) fputc('\n', stderr);
  g_progress.drawn = false;
}

void cli_progress_start(const char *label, uint64_t total) {
  g_progress.done = 0;
  g_progress.total = total;
  if (g_progress.on) draw(&g_progress, label, 0, total);
}

void cli_progress_add(uint64_t n) {
  g_progress.done += n;
  if (g_progress.on && g_progress.label)
    draw(&g_progress, g_progress.label, g_progress.done, g_progress.total);
}

static double env_interval(void) {
  const char *e = getenv("DCP_PROGRESS_INTERVAL");
  char *end;
  double v = e && *e ? strtod(e, &end) : 5;
  return e && *e && (*end || v < 0) ? 5 : v;
}

dcp_ctx *cli_context(const char *label, bool quiet) {
  (void)label; /* the library's reports carry their phase's name */
  dcp_ctx *ctx = NULL;
  if (dcp_ctx_create(NULL, &ctx) != DCP_OK) {
    fprintf(stderr, "dcp: %s\n", dcp_ctx_create_error());
    return NULL;
  }
  g_progress = (progress){.on = !quiet, .tty = isatty(STDERR_FILENO) == 1,
                          .interval = env_interval()};
  if (!quiet) dcp_ctx_set_phase_progress(ctx, on_phase, &g_progress);
  return ctx;
}

int cli_fail(const char *cmd, dcp_ctx *ctx, dcp_status rc) {
  cli_progress_done();
  const char *msg = ctx ? dcp_ctx_last_error(ctx) : "";
  fprintf(stderr, "dcp %s: %s%s%s\n", cmd, dcp_strerror(rc), *msg ? ": " : "", msg);
  return CLI_ERROR;
}

/* ---- parent directories --------------------------------------------------- */

bool cli_make_parents(const char *cmd, const char *path) {
  char *p = strdup(path);
  if (!p) return fprintf(stderr, "dcp %s: out of memory\n", cmd), false;
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = '\0'; /* "a/b/" names a/b */
  char *last = strrchr(p, '/');
  bool ok = true;
  if (last && last != p) {
    *last = '\0';
    for (char *q = p + 1; ok; q++) { /* each prefix ending before a '/' */
      bool end = *q == '\0';
      if (*q != '/' && !end) continue;
      *q = '\0';
      struct stat sb;
      if (mkdir(p, 0777) && errno != EEXIST) {
        fprintf(stderr, "dcp %s: cannot create directory '%s': %s\n", cmd, p, strerror(errno));
        ok = false;
      } else if (stat(p, &sb) || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "dcp %s: '%s' is not a directory\n", cmd, p);
        ok = false;
      }
      if (end) break;
      *q = '/';
    }
  }
  free(p);
  return ok;
}

/* ---- --json ------------------------------------------------------------------- */

json_t *cli_json_new(const char *cmd) {
  json_t *root = json_object();
  if (root) json_object_set_new(root, "command", json_string(cmd));
  return root;
}

int cli_json_finish(json_t *root, int rc, dcp_ctx *ctx, dcp_status s) {
  if (!root) return CLI_ERROR;
  json_object_set_new(root, "exit_code", json_integer(rc));
  json_t *err = json_null();
  if (s) {
    err = json_object();
    json_object_set_new(err, "status", json_integer(s));
    json_object_set_new(err, "reason", json_string(dcp_strerror(s)));
    const char *msg = ctx ? dcp_ctx_last_error(ctx) : "";
    json_object_set_new(err, "message", json_string(msg && *msg ? msg : dcp_strerror(s)));
  }
  json_object_set_new(root, "error", err);
  int bad = json_dumpf(root, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  putchar('\n');
  json_decref(root);
  return bad ? CLI_ERROR : rc;
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

char *cli_escape(const char *s) {
  json_t *probe = json_string(s); /* NULL: not valid UTF-8 */
  bool utf8 = probe != NULL;
  json_decref(probe);
  size_t n = strlen(s);
  char *out = malloc(4 * n + 1), *o = out;
  if (!out) return NULL;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p < 0x20 || *p == 0x7F || (*p >= 0x80 && !utf8)) o += sprintf(o, "\\x%02x", *p);
    else if (*p == '\\') *o++ = '\\', *o++ = '\\';
    else *o++ = (char)*p;
  }
  *o = '\0';
  return out;
}

json_t *cli_json_text(const char *s) {
  json_t *j = json_string(s);
  if (j) return j;
  char *e = cli_escape(s);
  j = e ? json_string(e) : NULL;
  free(e);
  return j;
}
