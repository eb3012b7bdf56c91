/* cmd_steps.c — `dcp steps ROOT [--json]` and `dcp gc ROOT --keep-last N
 * [--keep-every M] [--dry-run] [--json]`: the step directories of a
 * checkpoint manager's root (docs/manager.md), and its retention run by
 * hand. Options are parsed here (the shared parser knows no numbers). */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char steps_help[] =
    "usage: dcp steps ROOT [--json] [--quiet]\n\n"
    "The step directories of a checkpoint manager's root, ascending, one per\n"
    "line with four tab-separated columns (NOTE '-' for a committed step):\n"
    "  STEP  STATE  BYTES  NOTE\n"
    "STATE is committed, pending (a save is writing it), incomplete (a crashed\n"
    "save or deletion: never loaded), corrupt (its .metadata fails its checks)\n"
    "or foreign (not the manager's: a symbolic link, a file, a checkpoint\n"
    "without its step record); NOTE says why. Then 'latest\\tstep-N' when\n"
    "ROOT/latest exists. Read only: works beside a running job.\n\n"
    "options:\n"
    "  --json       one JSON object on stdout instead of text (docs/cli.md)\n"
    "  -q, --quiet  no log lines on stderr\n"
    "  -h, --help   this help\n"
    "\nexit status: 0 ok, 2 usage, 3 error (no such root, unreadable)\n";

static const char gc_help[] =
    "usage: dcp gc ROOT --keep-last N [--keep-every M] [--dry-run] [--json] [--quiet]\n\n"
    "Apply a retention policy to a checkpoint manager's root: keep the N newest\n"
    "committed steps (N >= 1) and, with --keep-every, every step that is a\n"
    "multiple of M; delete the other committed steps and the incomplete\n"
    "directories (crashed saves). The newest committed step is never deleted;\n"
    "pending, corrupt and foreign steps are never touched. Each deletion\n"
    "removes the step's commit marker first. Takes the root's lease: a running\n"
    "job's manager makes it fail (exit 3). One line per deleted step:\n"
    "  deleted  STEP  REASON        ('would delete' with --dry-run)\n\n"
    "options:\n"
    "  --keep-last N   the newest committed steps kept (required, >= 1)\n"
    "  --keep-every M  also keep multiples of M (M >= 1)\n"
    "  --dry-run       decide and print, delete nothing\n"
    "  --json          one JSON object on stdout instead of text (docs/cli.md)\n"
    "  -q, --quiet     no log lines on stderr\n"
    "  -h, --help      this help\n"
    "\nexit status: 0 ok, 2 usage, 3 error (no such root, another manager holds\n"
    "it, a deletion failed)\n";

typedef struct steps_args {
  const char *root;
  bool json, quiet, help, dry_run;
  long long keep_last, keep_every;
} steps_args;

/* A non-negative decimal integer. */
static bool parse_count(const char *s, long long *out) {
  if (!s || !*s) return false;
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*end || v < 0) return false;
  *out = v;
  return true;
}

static bool parse(const char *cmd, int argc, char **argv, bool gc, steps_args *a) {
  *a = (steps_args){.keep_last = -1, .keep_every = 0};
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    const char *val = NULL;
    char name[32] = "";
    if (!strncmp(s, "--", 2)) {
      const char *eq = strchr(s, '=');
      size_t n = eq ? (size_t)(eq - s) : strlen(s);
      if (n >= sizeof name) n = sizeof name - 1;
      memcpy(name, s, n);
      name[n] = '\0';
      val = eq ? eq + 1 : NULL;
    }
    if (!strcmp(s, "--json")) a->json = true;
    else if (!strcmp(s, "-q") || !strcmp(s, "--quiet")) a->quiet = true;
    else if (!strcmp(s, "-h") || !strcmp(s, "--help")) a->help = true;
    else if (gc && !strcmp(s, "--dry-run")) a->dry_run = true;
    else if (gc && (!strcmp(name, "--keep-last") || !strcmp(name, "--keep-every"))) {
      if (!val) val = i + 1 < argc ? argv[++i] : NULL;
      long long *dst = !strcmp(name, "--keep-last") ? &a->keep_last : &a->keep_every;
      if (!parse_count(val, dst)) {
        fprintf(stderr, "dcp %s: %s needs a non-negative integer, not '%s'\n", cmd, name,
                val ? val : "");
        return false;
      }
    } else if (s[0] == '-' && s[1]) {
      fprintf(stderr, "dcp %s: unknown option '%s'\n", cmd, s);
      return false;
    } else if (!a->root) {
      a->root = s;
    } else {
      fprintf(stderr, "dcp %s: one ROOT only ('%s' is extra)\n", cmd, s);
      return false;
    }
  }
  if (a->help) return true;
  if (!a->root) {
    fprintf(stderr, "dcp %s: ROOT is missing\n", cmd);
    return false;
  }
  if (gc && a->keep_last < 0) {
    fprintf(stderr, "dcp gc: --keep-last N is required\n");
    return false;
  }
  if (gc && a->keep_last == 0) {
    fprintf(stderr, "dcp gc: --keep-last 0 would keep no step (the newest durable one is "
                    "kept anyway): give N >= 1\n");
    return false;
  }
  if (gc && a->keep_last > (long long)UINT32_MAX) {
    fprintf(stderr, "dcp gc: --keep-last %lld is too large\n", a->keep_last);
    return false;
  }
  return true;
}

/* {"command", "exit_code", "error"} as docs/cli.md's convention has them. */
static int finish_json(json_t *o, int rc, dcp_ctx *ctx, dcp_status s) {
  json_object_set_new(o, "exit_code", json_integer(rc));
  if (s) {
    json_t *e = json_object();
    json_object_set_new(e, "status", json_integer(s));
    json_object_set_new(e, "reason", json_string(dcp_strerror(s)));
    json_object_set_new(e, "message", json_string(ctx ? dcp_ctx_last_error(ctx) : ""));
    json_object_set_new(o, "error", e);
  } else {
    json_object_set_new(o, "error", json_null());
  }
  char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(o);
  if (!text || printf("%s\n", text) < 0) rc = CLI_ERROR;
  free(text);
  return rc;
}

/* The listing (malloc'd) of m into *v, *n. */
static dcp_status list_all(dcp_manager *m, dcp_step_info **v, size_t *n) {
  *v = NULL;
  size_t cap = 0;
  for (;;) {
    dcp_status rc = dcp_manager_list(m, *v, cap, n);
    if (rc || *n <= cap) return rc;
    free(*v);
    cap = *n + 8;
    if (!(*v = malloc(cap * sizeof **v))) return DCP_ENOMEM;
  }
}

/* The step ROOT/latest names, or -1. */
static int64_t read_latest(const char *root) {
  char path[4200], buf[64] = "";
  snprintf(path, sizeof path, "%s/latest", root);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int64_t step = -1;
  if (fgets(buf, sizeof buf, f) && sscanf(buf, "step-%" SCNd64, &step) != 1) step = -1;
  fclose(f);
  return step;
}

static int open_manager(const char *cmd, const steps_args *a, bool read_only, dcp_ctx **ctx,
                        dcp_manager **m, dcp_status *s) {
  *m = NULL;
  *s = DCP_OK;
  if (!(*ctx = cli_context(cmd, true))) return CLI_ERROR;
  dcp_manager_options o;
  dcp_manager_options_init(&o);
  o.flags = (read_only ? DCP_MANAGER_READ_ONLY : DCP_MANAGER_NO_AUTO_GC) |
            (a->quiet || a->json ? DCP_MANAGER_QUIET : 0);
  if (!read_only) {
    o.keep_last = (uint32_t)a->keep_last;
    o.keep_every = (uint64_t)a->keep_every;
  }
  *s = dcp_manager_open(*ctx, a->root, &o, m);
  return *s ? CLI_ERROR : CLI_OK;
}

/* What `dcp steps` says of a step: why it is not committed, else nothing
 * (the read-only listing has no policy to report). */
static const char *note_of(const dcp_step_info *v) {
  return v->state == DCP_STEP_COMMITTED ? "" : v->note;
}

int cmd_steps(int argc, char **argv) {
  steps_args a;
  if (!parse("steps", argc, argv, false, &a)) return CLI_USAGE;
  if (a.help) return fputs(steps_help, stdout), CLI_OK;
  dcp_ctx *ctx = NULL;
  dcp_manager *m = NULL;
  dcp_status s;
  int rc = open_manager("steps", &a, true, &ctx, &m, &s);
  dcp_step_info *v = NULL;
  size_t n = 0;
  if (!rc && (s = list_all(m, &v, &n))) rc = CLI_ERROR;
  int64_t latest = rc ? -1 : read_latest(a.root);
  if (a.json) {
    json_t *o = json_object();
    json_object_set_new(o, "command", json_string("steps"));
    json_object_set_new(o, "root", json_string(a.root));
    if (!rc) {
      json_t *arr = json_array();
      for (size_t i = 0; i < n; i++) {
        json_t *e = json_object();
        json_object_set_new(e, "step", json_integer(v[i].step));
        json_object_set_new(e, "state", json_string(dcp_step_state_name(v[i].state)));
        json_object_set_new(e, "bytes", json_integer((json_int_t)v[i].bytes));
        json_object_set_new(e, "note", json_string(note_of(&v[i])));
        json_array_append_new(arr, e);
      }
      json_object_set_new(o, "steps", arr);
      json_object_set_new(o, "latest", latest >= 0 ? json_integer(latest) : json_null());
    }
    rc = finish_json(o, rc, ctx, s);
  } else if (rc) {
    rc = ctx ? cli_fail("steps", ctx, s) : rc;
  } else {
    for (size_t i = 0; i < n; i++)
      printf("%" PRId64 "\t%s\t%" PRIu64 "\t%s\n", v[i].step, dcp_step_state_name(v[i].state),
             v[i].bytes, note_of(&v[i])[0] ? note_of(&v[i]) : "-");
    if (latest >= 0) printf("latest\tstep-%" PRId64 "\n", latest);
  }
  free(v);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  return rc;
}

int cmd_gc(int argc, char **argv) {
  steps_args a;
  if (!parse("gc", argc, argv, true, &a)) return CLI_USAGE;
  if (a.help) return fputs(gc_help, stdout), CLI_OK;
  dcp_ctx *ctx = NULL;
  dcp_manager *m = NULL;
  dcp_status s;
  int rc = open_manager("gc", &a, false, &ctx, &m, &s);
  /* what the policy deletes, from the listing just before the run */
  dcp_step_info *v = NULL;
  size_t n = 0;
  if (!rc && (s = list_all(m, &v, &n))) rc = CLI_ERROR;
  dcp_manager_gc_report r = {.struct_size = sizeof r};
  if (!rc && (s = dcp_manager_gc(m, a.dry_run ? DCP_GC_DRY_RUN : 0, &r))) rc = CLI_ERROR;
  /* a step the policy deleted and that is still listed was not deleted */
  dcp_step_info *after = NULL;
  size_t nafter = 0;
  if (v && !a.dry_run && list_all(m, &after, &nafter)) nafter = 0;
  for (size_t i = 0; v && !a.dry_run && i < n; i++)
    for (size_t j = 0; !v[i].keep && j < nafter; j++)
      if (after[j].step == v[i].step) v[i].keep = -1; /* still there */
  free(after);
  if (a.json) {
    json_t *o = json_object();
    json_object_set_new(o, "command", json_string("gc"));
    json_object_set_new(o, "root", json_string(a.root));
    json_object_set_new(o, "dry_run", json_boolean(a.dry_run));
    json_object_set_new(o, "keep_last", json_integer(a.keep_last));
    json_object_set_new(o, "keep_every", a.keep_every ? json_integer(a.keep_every) : json_null());
    if (v) {
      json_t *del = json_array(), *kept = json_array();
      for (size_t i = 0; i < n; i++)
        json_array_append_new(v[i].keep == 0 ? del : kept, json_integer(v[i].step));
      json_object_set_new(o, a.dry_run ? "would_delete" : "deleted", del);
      json_object_set_new(o, "kept", kept);
      json_object_set_new(o, "failed", json_integer((json_int_t)r.failed));
      json_object_set_new(o, "kept_bytes", json_integer((json_int_t)r.kept_bytes));
    }
    rc = finish_json(o, rc, ctx, s);
  } else {
    for (size_t i = 0; v && i < n; i++)
      if (v[i].keep <= 0)
        printf("%s\t%" PRId64 "\t%s\n",
               v[i].keep < 0 ? "not deleted" : a.dry_run ? "would delete" : "deleted", v[i].step,
               v[i].note);
    if (rc) rc = ctx ? cli_fail("gc", ctx, s) : rc;
  }
  free(v);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  return rc;
}
