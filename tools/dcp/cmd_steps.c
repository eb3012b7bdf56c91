/* cmd_steps.c — `dcp steps ROOT [--json]` and `dcp gc ROOT --keep-last N
 * [--keep-every M] [--dry-run] [--json]`: the step directories of a
 * checkpoint manager's root (docs/manager.md), and its retention run by
 * hand. Options go through the shared parser (cli_parse), the result
 * through cli_json_finish. */
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

/* The parsed command line: the shared options, then gc's numbers. */
typedef struct steps_args {
  cli_args c;
  const char *root;
  uint64_t keep_last, keep_every;
} steps_args;

/* Usage error: the reason, then the command's usage, on stderr. */
static bool usage_error(const char *cmd, const char *help, const char *why) {
  fprintf(stderr, "dcp %s: %s\n\n%s", cmd, why, help);
  return false;
}

/* gc's --keep-last (required, 1 .. UINT32_MAX) and --keep-every (1 ..). */
static bool parse_policy(const char *help, steps_args *a) {
  char why[160];
  if (!a->c.keep_last) return usage_error("gc", help, "--keep-last N is required");
  if (!cli_parse_count(a->c.keep_last, 1, UINT32_MAX, &a->keep_last)) {
    snprintf(why, sizeof why, "--keep-last takes a whole number from 1 to %" PRIu32 ", not '%s'",
             UINT32_MAX, a->c.keep_last);
    return usage_error("gc", help, why);
  }
  if (a->c.keep_every && !cli_parse_count(a->c.keep_every, 1, INT64_MAX, &a->keep_every)) {
    snprintf(why, sizeof why, "--keep-every takes a whole number >= 1, not '%s'",
             a->c.keep_every);
    return usage_error("gc", help, why);
  }
  return true;
}

/* The command line of `dcp steps` (gc false) or `dcp gc`. False after a
 * usage error was printed; a->c.help set means print the help. */
static bool parse(const char *cmd, const char *help, int argc, char **argv, bool gc,
                  steps_args *a) {
  *a = (steps_args){.root = NULL};
  if (!cli_parse(cmd, argc, argv, gc ? "keep-last,keep-every,dry-run" : "", &a->c)) return false;
  if (a->c.help) return true;
  if (!a->c.npos) return usage_error(cmd, help, "ROOT is missing");
  if (a->c.npos > 1) {
    char why[300];
    snprintf(why, sizeof why, "one ROOT only ('%.200s' is extra)", a->c.pos[1]);
    return usage_error(cmd, help, why);
  }
  a->root = a->c.pos[0];
  return !gc || parse_policy(help, a);
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
            (a->c.quiet || a->c.json ? DCP_MANAGER_QUIET : 0);
  if (!read_only) {
    o.keep_last = (uint32_t)a->keep_last;
    o.keep_every = a->keep_every;
  }
  if (!read_only) { /* a writable open creates a missing root: gc must not */
    dcp_manager_options ro = o;
    ro.flags = DCP_MANAGER_READ_ONLY | DCP_MANAGER_QUIET;
    if ((*s = dcp_manager_open(*ctx, a->root, &ro, m))) return CLI_ERROR;
    dcp_manager_free(*m);
    *m = NULL;
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
  if (!parse("steps", steps_help, argc, argv, false, &a)) return CLI_USAGE;
  if (a.c.help) return fputs(steps_help, stdout), CLI_OK;
  dcp_ctx *ctx = NULL;
  dcp_manager *m = NULL;
  dcp_status s;
  int rc = open_manager("steps", &a, true, &ctx, &m, &s);
  dcp_step_info *v = NULL;
  size_t n = 0;
  if (!rc && (s = list_all(m, &v, &n))) rc = CLI_ERROR;
  int64_t latest = rc ? -1 : read_latest(a.root);
  if (a.c.json) {
    json_t *o = cli_json_new("steps");
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
    rc = cli_json_finish(o, rc, ctx, s);
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
  if (!parse("gc", gc_help, argc, argv, true, &a)) return CLI_USAGE;
  if (a.c.help) return fputs(gc_help, stdout), CLI_OK;
  dcp_ctx *ctx = NULL;
  dcp_manager *m = NULL;
  dcp_status s;
  int rc = open_manager("gc", &a, false, &ctx, &m, &s);
  /* what the policy deletes, from the listing just before the run */
  dcp_step_info *v = NULL;
  size_t n = 0;
  if (!rc && (s = list_all(m, &v, &n))) rc = CLI_ERROR;
  bool listed = !rc; /* v is NULL for an empty root */
  dcp_manager_gc_report r = {.struct_size = sizeof r};
  if (!rc && (s = dcp_manager_gc(m, a.c.dry_run ? DCP_GC_DRY_RUN : 0, &r))) rc = CLI_ERROR;
  /* a step the policy deleted and that is still listed was not deleted */
  dcp_step_info *after = NULL;
  size_t nafter = 0;
  if (listed && !a.c.dry_run && list_all(m, &after, &nafter)) nafter = 0;
  for (size_t i = 0; listed && !a.c.dry_run && i < n; i++)
    for (size_t j = 0; !v[i].keep && j < nafter; j++)
      if (after[j].step == v[i].step) v[i].keep = -1; /* still there */
  free(after);
  if (a.c.json) {
    json_t *o = cli_json_new("gc");
    json_object_set_new(o, "root", json_string(a.root));
    json_object_set_new(o, "dry_run", json_boolean(a.c.dry_run));
    json_object_set_new(o, "keep_last", json_integer((json_int_t)a.keep_last));
    json_object_set_new(o, "keep_every", a.keep_every ? json_integer((json_int_t)a.keep_every) : json_null());
    if (listed) {
      json_t *del = json_array(), *kept = json_array();
      for (size_t i = 0; i < n; i++)
        json_array_append_new(v[i].keep == 0 ? del : kept, json_integer(v[i].step));
      json_object_set_new(o, a.c.dry_run ? "would_delete" : "deleted", del);
      json_object_set_new(o, "kept", kept);
      json_object_set_new(o, "failed", json_integer((json_int_t)r.failed));
      json_object_set_new(o, "kept_bytes", json_integer((json_int_t)r.kept_bytes));
    }
    rc = cli_json_finish(o, rc, ctx, s);
  } else {
    for (size_t i = 0; listed && i < n; i++)
      if (v[i].keep <= 0)
        printf("%s\t%" PRId64 "\t%s\n",
               v[i].keep < 0 ? "not deleted" : a.c.dry_run ? "would delete" : "deleted", v[i].step,
               v[i].note);
    if (rc) rc = ctx ? cli_fail("gc", ctx, s) : rc;
  }
  free(v);
  dcp_manager_free(m);
  dcp_ctx_free(ctx);
  return rc;
}
