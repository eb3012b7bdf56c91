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

/* One run of `dcp steps` or `dcp gc`: its command line, the context, the
 * manager and the listing taken right after opening it. */
typedef struct steps_run {
  const char *cmd;
  steps_args a;
  dcp_ctx *ctx;
  dcp_manager *m;
  dcp_status s;     /* the failure, or DCP_OK */
  dcp_step_info *v; /* malloc'd; NULL for an empty root */
  size_t n;
  bool listed;      /* v and n hold the listing */
} steps_run;

/* Parse argv, open the manager (read only for steps) and list its root.
 * Returns the exit code so far; *done when it is final (help or a usage
 * error: nothing was opened). */
static int run_start(steps_run *r, const char *cmd, const char *help, int argc, char **argv,
                     bool gc, bool *done) {
  *r = (steps_run){.cmd = cmd};
  *done = true;
  if (!parse(cmd, help, argc, argv, gc, &r->a)) return CLI_USAGE;
  if (r->a.c.help) return fputs(help, stdout), CLI_OK;
  *done = false;
  int rc = open_manager(cmd, &r->a, !gc, &r->ctx, &r->m, &r->s);
  if (!rc && (r->s = list_all(r->m, &r->v, &r->n))) rc = CLI_ERROR;
  r->listed = !rc;
  return rc;
}

/* Print the --json object or, on a failure, the text reason; free r.
 * Returns the exit code. */
static int run_end(steps_run *r, int rc, json_t *o) {
  if (o) rc = cli_json_finish(o, rc, r->ctx, r->s);
  else if (rc && r->ctx) rc = cli_fail(r->cmd, r->ctx, r->s);
  free(r->v);
  dcp_manager_free(r->m);
  dcp_ctx_free(r->ctx);
  return rc;
}

static json_t *steps_json(const steps_run *r, int64_t latest) {
  json_t *o = cli_json_new("steps");
  json_object_set_new(o, "root", json_string(r->a.root));
  if (!r->listed) return o;
  json_t *arr = json_array();
  for (size_t i = 0; i < r->n; i++) {
    const dcp_step_info *v = &r->v[i];
    json_t *e = json_object();
    json_object_set_new(e, "step", json_integer(v->step));
    json_object_set_new(e, "state", json_string(dcp_step_state_name(v->state)));
    json_object_set_new(e, "bytes", json_integer((json_int_t)v->bytes));
    json_object_set_new(e, "note", json_string(note_of(v)));
    json_array_append_new(arr, e);
  }
  json_object_set_new(o, "steps", arr);
  json_object_set_new(o, "latest", latest >= 0 ? json_integer(latest) : json_null());
  return o;
}

int cmd_steps(int argc, char **argv) {
  steps_run r;
  bool done;
  int rc = run_start(&r, "steps", steps_help, argc, argv, false, &done);
  if (done) return rc;
  int64_t latest = rc ? -1 : read_latest(r.a.root);
  if (r.a.c.json) return run_end(&r, rc, steps_json(&r, latest));
  for (size_t i = 0; r.listed && i < r.n; i++) {
    const dcp_step_info *v = &r.v[i];
    printf("%" PRId64 "\t%s\t%" PRIu64 "\t%s\n", v->step, dcp_step_state_name(v->state), v->bytes,
           note_of(v)[0] ? note_of(v) : "-");
  }
  if (latest >= 0) printf("latest\tstep-%" PRId64 "\n", latest);
  return run_end(&r, rc, NULL);
}

/* Mark (keep = -1) the steps the policy deleted that are still listed:
 * their deletion failed. */
static void mark_not_deleted(steps_run *r) {
  dcp_step_info *after = NULL;
  size_t nafter = 0;
  if (list_all(r->m, &after, &nafter)) nafter = 0;
  for (size_t i = 0; i < r->n; i++)
    for (size_t j = 0; !r->v[i].keep && j < nafter; j++)
      if (after[j].step == r->v[i].step) r->v[i].keep = -1;
  free(after);
}

static json_t *gc_json(const steps_run *r, const dcp_manager_gc_report *rep) {
  const steps_args *a = &r->a;
  json_t *o = cli_json_new("gc");
  json_object_set_new(o, "root", json_string(a->root));
  json_object_set_new(o, "dry_run", json_boolean(a->c.dry_run));
  json_object_set_new(o, "keep_last", json_integer((json_int_t)a->keep_last));
  json_object_set_new(o, "keep_every",
                      a->keep_every ? json_integer((json_int_t)a->keep_every) : json_null());
  if (!r->listed) return o;
  json_t *del = json_array(), *kept = json_array();
  for (size_t i = 0; i < r->n; i++)
    json_array_append_new(r->v[i].keep == 0 ? del : kept, json_integer(r->v[i].step));
  json_object_set_new(o, a->c.dry_run ? "would_delete" : "deleted", del);
  json_object_set_new(o, "kept", kept);
  json_object_set_new(o, "failed", json_integer((json_int_t)rep->failed));
  json_object_set_new(o, "kept_bytes", json_integer((json_int_t)rep->kept_bytes));
  return o;
}

int cmd_gc(int argc, char **argv) {
  steps_run r;
  bool done;
  int rc = run_start(&r, "gc", gc_help, argc, argv, true, &done);
  if (done) return rc;
  /* what the policy deletes is in the listing taken just before the run */
  bool dry = r.a.c.dry_run;
  dcp_manager_gc_report rep = {.struct_size = sizeof rep};
  if (!rc && (r.s = dcp_manager_gc(r.m, dry ? DCP_GC_DRY_RUN : 0, &rep))) rc = CLI_ERROR;
  if (r.listed && !dry) mark_not_deleted(&r);
  if (r.a.c.json) return run_end(&r, rc, gc_json(&r, &rep));
  for (size_t i = 0; r.listed && i < r.n; i++)
    if (r.v[i].keep <= 0)
      printf("%s\t%" PRId64 "\t%s\n",
             r.v[i].keep < 0 ? "not deleted" : dry ? "would delete" : "deleted", r.v[i].step,
             r.v[i].note);
  return run_end(&r, rc, NULL);
}
