/* manager.c — dcp_manager_*: steps under a root, the latest pointer,
 * retention and auto-resume (dcp.h, docs/manager.md).
 *
 * Rank 0 does every piece of root-level I/O (the root's lease, latest,
 * listing for decisions, deletions) and broadcasts what it decided; the
 * other ranks only save and load their parts. Every collective call here
 * is made by every rank in the same order, whatever rank 0 found, so a
 * failure on rank 0 reaches the others as a status, never as a hang. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ctx.h"
#include "manager/manager_int.h"
#include "manager/policy.h"
#include "manager/steps.h"
#include "runtime/lease.h"
#include "runtime/plan_persist.h"
#include "runtime/rt.h"

/* ---- helpers ---------------------------------------------------------------- */

void dcpi_manager_log(dcp_manager *m, const char *fmt, ...) {
  if (m->opts.flags & DCP_MANAGER_QUIET || m->ctx->rank != 0) return;
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (m->opts.log_fn)
    m->opts.log_fn(m->opts.log_arg, line);
  else
    fprintf(stderr, "dcp manager: %s\n", line);
}

/* Every rank's outcome of a phase: as dcpi_rt_agree (the lowest failing
 * rank's code and message on every rank), into err. */
dcp_status dcpi_manager_agree(dcp_manager *m, dcp_status local, dcpi_err *err) {
  dcpi_rt rt = {.ctx = m->ctx, .path = m->root};
  rt.err = *err;
  if (!local) dcpi_err_clear(&rt.err);
  dcp_status rc = dcpi_rt_agree(&rt, local);
  *err = rt.err;
  if (rc && !err->code) err->code = rc;
  return rc;
}

dcp_status dcpi_manager_bcast(dcp_manager *m, void *buf, size_t len, dcpi_err *err) {
  dcpi_rt rt = {.ctx = m->ctx, .path = m->root};
  dcpi_err_clear(&rt.err);
  dcp_status rc = dcpi_rt_bcast(&rt, buf, len, 0);
  if (rc) *err = rt.err;
  return rc;
}

static dcp_status report(dcp_manager *m, dcpi_err *err) {
  return dcpi_ctx_report(m->ctx, err);
}

const char *dcp_step_state_name(dcp_step_state s) {
  switch (s) {
  case DCP_STEP_COMMITTED: return "committed";
  case DCP_STEP_PENDING: return "pending";
  case DCP_STEP_INCOMPLETE: return "incomplete";
  case DCP_STEP_CORRUPT: return "corrupt";
  case DCP_STEP_FOREIGN: return "foreign";
  }
  return "unknown";
}

void dcp_manager_options_init(dcp_manager_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof *opts);
  opts->struct_size = sizeof *opts;
}

/* ---- open / free -------------------------------------------------------------- */

#define KNOWN_FLAGS \
  (DCP_MANAGER_READ_ONLY | DCP_MANAGER_NO_AUTO_GC | DCP_MANAGER_KEEP_INCOMPLETE | \
   DCP_MANAGER_QUIET | DCP_MANAGER_DEFER_FENCE)

/* Rank 0's part of the open: the root and its lease. */
static dcp_status open_root(dcp_manager *m, dcpi_err *err) {
  struct stat sb;
  if (stat(m->root, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode))
      return dcpi_fail(err, DCP_EINVAL, "the manager's root %s is not a directory", m->root);
  } else if (errno != ENOENT) {
    return dcpi_fail(err, DCP_EIO, "cannot stat the root %s: %s", m->root, strerror(errno));
  } else if (m->opts.flags & DCP_MANAGER_READ_ONLY) {
    return dcpi_fail(err, DCP_ENOTFOUND, "the root %s does not exist", m->root);
  }
  if (m->opts.flags & DCP_MANAGER_READ_ONLY) return DCP_OK;
  m->rt.ctx = m->ctx;
  m->rt.path = m->root;
  dcpi_err_clear(&m->rt.err);
  dcp_status rc = dcpi_rt_open_storage(&m->rt, DCP_STORAGE_CREATE);
  if (!rc) rc = dcpi_lease_acquire(&m->rt, DCPI_MANAGER_LEASE, m->ctx->lease_ms, &m->lease, &m->rt.err);
  if (rc) {
    if (rc == DCP_EBUSY)
      dcpi_fail(err, rc, "another checkpoint manager holds the root %s: %s", m->root, m->rt.err.msg);
    else
      dcpi_fail(err, rc, "%s", m->rt.err.msg);
  }
  return rc;
}

/* The newest committed step (rank 0: a scan; -1 when none). */
static int64_t newest_committed(dcp_manager *m) {
  dcpi_step_scan *v = NULL;
  size_t n = 0;
  dcpi_err e;
  dcpi_err_clear(&e);
  int64_t newest = -1;
  if (dcpi_steps_scan(m->ctx, m->root, -1, &v, &n, &e) == DCP_OK)
    for (size_t i = 0; i < n; i++)
      if (v[i].state == DCP_STEP_COMMITTED) newest = v[i].step;
  free(v);
  return newest;
}

/* root as an absolute path (malloc'd; NULL when out of memory or the
 * working directory is unknown): the root is a POSIX directory, and the
 * caller may change its working directory while the manager is open, so a
 * relative root is resolved once, here. */
static char *absolute_root(const char *root) {
  if (root[0] == '/') return strdup(root);
  char *cwd = getcwd(NULL, 0);
  size_t n = cwd ? strlen(cwd) + strlen(root) + 2 : 0;
  char *out = cwd ? malloc(n) : NULL;
  if (out) snprintf(out, n, "%s/%s", cwd, root);
  free(cwd);
  return out;
}

dcp_status dcp_manager_open(dcp_ctx *ctx, const char *root, const dcp_manager_options *opts,
                            dcp_manager **out) {
  if (out) *out = NULL;
  if (!ctx || !out) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (!root || !root[0] || strlen(root) > 4000) {
    dcpi_fail(&err, DCP_EINVAL, "the manager's root is empty or too long");
    return dcpi_ctx_report(ctx, &err);
  }
  if (opts && opts->struct_size < sizeof(uint32_t) * 2) {
    dcpi_fail(&err, DCP_EINVAL, "dcp_manager_options.struct_size %u is too small",
              opts->struct_size);
    return dcpi_ctx_report(ctx, &err);
  }
  if (!ctx->coll) {
    dcpi_fail(&err, DCP_EINVAL, "a checkpoint manager needs a context with a collective "
                                "(this rank is detached)");
    return dcpi_ctx_report(ctx, &err);
  }
  dcp_manager *m = calloc(1, sizeof *m);
  if (m && (m->root = absolute_root(root)) && strlen(m->root) > 4000) {
    free(m->root);
    free(m);
    dcpi_fail(&err, DCP_EINVAL, "the manager's root %s is too long once absolute", root);
    return dcpi_ctx_report(ctx, &err);
  }
  if (!m || !m->root) {
    free(m);
    dcpi_fail(&err, DCP_ENOMEM, "out of memory opening a manager");
    return dcpi_ctx_report(ctx, &err);
  }
  m->ctx = ctx;
  m->pending_step = -1;
  m->newest = -1;
  dcp_manager_options_init(&m->opts);
  if (opts) memcpy(&m->opts, opts, opts->struct_size < sizeof m->opts ? opts->struct_size : sizeof m->opts);
  m->opts.struct_size = sizeof m->opts;
  m->last_gc.struct_size = sizeof m->last_gc;
  dcp_status rc = DCP_OK;
  if (m->opts.flags & ~KNOWN_FLAGS)
    rc = dcpi_fail(&err, DCP_EINVAL, "unknown dcp_manager_options.flags 0x%x", m->opts.flags);
  else if (m->opts.nkeep_steps && !m->opts.keep_steps)
    rc = dcpi_fail(&err, DCP_EINVAL, "nkeep_steps %zu with NULL keep_steps", m->opts.nkeep_steps);
  if (!rc && m->opts.nkeep_steps) {
    int64_t *k = malloc(m->opts.nkeep_steps * sizeof *k);
    if (!k)
      rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory copying keep_steps");
    else {
      memcpy(k, m->opts.keep_steps, m->opts.nkeep_steps * sizeof *k);
      m->keep = k;
      m->opts.keep_steps = k;
    }
  }
  if (!rc && ctx->rank == 0) {
    rc = open_root(m, &err);
    if (!rc) m->newest = newest_committed(m);
  }
  rc = dcpi_manager_agree(m, rc, &err);
  if (!rc) {
    int64_t nw = m->newest;
    rc = dcpi_manager_bcast(m, &nw, sizeof nw, &err);
    m->newest = nw;
  }
  if (rc) {
    dcp_manager_free(m);
    return dcpi_ctx_report(ctx, &err);
  }
  *out = m;
  return DCP_OK;
}

void dcp_manager_free(dcp_manager *m) {
  if (!m) return;
  if (m->pending) {
    dcp_async_wait(m->pending);
    dcp_async_free(m->pending);
  }
  dcpi_manager_signals_release(m);
  dcpi_lease_release(m->lease);
  if (m->rt.st) m->ctx->storage->close(m->rt.st);
  free(m->keep);
  free(m->root);
  free(m);
}

dcp_status dcp_manager_step_path(const dcp_manager *m, int64_t step, char *buf, size_t cap) {
  if (!m || !buf || step < 0) return DCP_EINVAL;
  int n = snprintf(buf, cap, "%s/step-%" PRId64, m->root, step);
  return n < 0 || (size_t)n >= cap ? DCP_EINVAL : DCP_OK;
}

int64_t dcp_manager_pending_step(const dcp_manager *m) {
  return m && m->pending ? m->pending_step : -1;
}

/* ---- listing and retention ------------------------------------------------------ */

/* Whether the caller's list or predicate keeps step. */
static bool pinned(const dcp_manager *m, int64_t step) {
  for (size_t i = 0; i < m->opts.nkeep_steps; i++)
    if (m->opts.keep_steps[i] == step) return true;
  return m->opts.keep_fn && m->opts.keep_fn(m->opts.keep_arg, step);
}

dcp_status dcpi_manager_decide(dcp_manager *m, const dcpi_step_scan *v, size_t n,
                               dcpi_verdict *verdicts, dcpi_decision_summary *sum) {
  dcpi_step_entry *e = n ? malloc(n * sizeof *e) : NULL;
  if (n && !e) return DCP_ENOMEM;
  /* The newest step this manager made durable (or found at open) is kept
   * like a pinned one: a committed step newer than it that appeared since
   * (a killed job's orphaned writer finishing its step) would otherwise be
   * the anchor, and retention would delete the step `latest` just named. */
  for (size_t i = 0; i < n; i++)
    e[i] = (dcpi_step_entry){
        .step = v[i].step, .state = v[i].state, .bytes = v[i].bytes,
        .pinned = v[i].state == DCP_STEP_COMMITTED &&
                  (pinned(m, v[i].step) || v[i].step == m->newest)};
  dcpi_retention p = {.keep_last = m->opts.keep_last, .keep_every = m->opts.keep_every,
                      .max_bytes = m->opts.max_bytes,
                      .keep_incomplete = (m->opts.flags & DCP_MANAGER_KEEP_INCOMPLETE) != 0};
  dcp_status rc = dcpi_retention_decide(&p, e, n, verdicts, sum);
  free(e);
  return rc;
}

/* "a: b" (or the one that is not empty) into out, cut to cap. */
static void join_note(char *out, size_t cap, const char *a, const char *b) {
  size_t n = 0;
  for (const char *p = a; *p && n + 1 < cap; p++) out[n++] = *p;
  if (a[0] && b[0])
    for (const char *p = ": "; *p && n + 1 < cap; p++) out[n++] = *p;
  for (const char *p = b; *p && n + 1 < cap; p++) out[n++] = *p;
  out[n] = '\0';
}

dcp_status dcp_manager_list(dcp_manager *m, dcp_step_info *out, size_t cap, size_t *count) {
  if (!m || !count || (cap && !out)) return DCP_EINVAL;
  *count = 0;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcpi_step_scan *v = NULL;
  size_t n = 0;
  dcp_status rc = dcpi_steps_scan(m->ctx, m->root, dcp_manager_pending_step(m), &v, &n, &err);
  dcpi_verdict *vd = NULL;
  if (!rc && n && !(vd = malloc(n * sizeof *vd))) rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory");
  if (!rc && dcpi_manager_decide(m, v, n, vd, NULL))
    rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory deciding retention");
  if (!rc) {
    *count = n;
    for (size_t i = 0; i < n && i < cap; i++) {
      out[i] = (dcp_step_info){.step = v[i].step, .state = v[i].state, .bytes = v[i].bytes,
                               .keep = !dcpi_verdict_deletes(vd[i])};
      /* the state's reason, or (committed steps) the policy's verdict */
      const char *why = vd[i] == DCPI_KEEP_LAST && !m->opts.keep_last
                            ? "no count limit"
                            : dcpi_verdict_name(vd[i]);
      if (v[i].note[0])
        join_note(out[i].note, sizeof out[i].note, v[i].note, "");
      else
        join_note(out[i].note, sizeof out[i].note,
                  dcpi_verdict_deletes(vd[i]) ? "delete" : "keep", why);
    }
  }
  free(vd);
  free(v);
  return report(m, &err);
}

/* Rank 0: decide and (unless dry) delete, filling *r. */
static void gc_local(dcp_manager *m, bool dry, dcp_manager_gc_report *r) {
  dcpi_err err;
  dcpi_err_clear(&err);
  dcpi_step_scan *v = NULL;
  size_t n = 0;
  dcpi_verdict *vd = NULL;
  dcpi_decision_summary sum = {0};
  dcp_status rc = dcpi_steps_scan(m->ctx, m->root, dcp_manager_pending_step(m), &v, &n, &err);
  if (!rc && n && !(vd = malloc(n * sizeof *vd))) rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory");
  if (!rc && dcpi_manager_decide(m, v, n, vd, &sum))
    rc = dcpi_fail(&err, DCP_ENOMEM, "out of memory deciding retention");
  if (rc) {
    r->status = rc;
    snprintf(r->message, sizeof r->message, "%s", err.msg);
    free(v);
    free(vd);
    return;
  }
  r->kept_bytes = sum.kept_bytes;
  r->over_budget = sum.over_budget;
  if (sum.over_budget)
    dcpi_manager_log(m, "retention: %" PRIu64 " bytes kept, over max_bytes %" PRIu64
                        " (the steps the rules keep need more)",
                     sum.kept_bytes, m->opts.max_bytes);
  for (size_t i = 0; i < n; i++) {
    if (!dcpi_verdict_deletes(vd[i])) {
      r->kept++;
      continue;
    }
    if (dry) {
      r->deleted++;
      continue;
    }
    dcpi_err e;
    dcpi_err_clear(&e);
    dcp_status d = dcpi_step_delete(m->ctx, m->root, v[i].step, &e);
    if (d) {
      r->failed++;
      r->kept++;
      dcpi_manager_log(m, "step %" PRId64 " not deleted: %s", v[i].step, e.msg);
      if (!r->status) {
        r->status = d;
        snprintf(r->message, sizeof r->message, "%s", e.msg);
      }
    } else {
      r->deleted++;
      dcpi_manager_log(m, "step %" PRId64 " deleted (%s)", v[i].step, dcpi_verdict_name(vd[i]));
    }
  }
  free(v);
  free(vd);
}

dcp_status dcp_manager_gc(dcp_manager *m, uint32_t flags, dcp_manager_gc_report *out) {
  if (!m) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (out && out->struct_size < sizeof(uint32_t) * 2) {
    dcpi_fail(&err, DCP_EINVAL, "dcp_manager_gc_report.struct_size %u is too small",
              out->struct_size);
    return report(m, &err);
  }
  bool dry = flags & DCP_GC_DRY_RUN;
  if ((flags & ~DCP_GC_DRY_RUN) || (!dry && (m->opts.flags & DCP_MANAGER_READ_ONLY))) {
    dcpi_fail(&err, DCP_EINVAL, (flags & ~DCP_GC_DRY_RUN) ? "unknown dcp_manager_gc flags"
                                                           : "a read-only manager deletes nothing "
                                                             "(DCP_GC_DRY_RUN only)");
    return report(m, &err);
  }
  dcp_manager_gc_report r = {.struct_size = sizeof r};
  if (m->ctx->rank == 0) gc_local(m, dry, &r);
  dcp_status rc = dcpi_manager_bcast(m, &r, sizeof r, &err);
  if (rc) return report(m, &err);
  r.message[sizeof r.message - 1] = '\0';
  if (out) {
    size_t len = out->struct_size < sizeof r ? out->struct_size : sizeof r;
    uint32_t ss = out->struct_size;
    memcpy(out, &r, len);
    out->struct_size = ss;
  }
  if (r.status) dcpi_fail(&err, r.status, "%s", r.message);
  return report(m, &err);
}

dcp_status dcp_manager_gc_result(const dcp_manager *m, dcp_manager_gc_report *out) {
  if (!m || !out || out->struct_size < sizeof(uint32_t) * 2) return DCP_EINVAL;
  size_t len = out->struct_size < sizeof m->last_gc ? out->struct_size : sizeof m->last_gc;
  uint32_t ss = out->struct_size;
  memcpy(out, &m->last_gc, len);
  out->struct_size = ss;
  return DCP_OK;
}

/* ---- saving ------------------------------------------------------------------------ */

/* Rank 0: write `name` in the root atomically through the temporary tmp.
 * The root is this manager's (it holds the lease), so whatever sits at
 * the temporary name — a crashed write's leftover, a symbolic link or
 * another non-file that the storage plugin refuses to open — is removed
 * first (the link itself, never its target): it must not block `latest`
 * (and with it retention) for good. */
static dcp_status write_root_file(dcp_manager *m, const char *name, const char *tmp,
                                  const void *data, size_t len, dcpi_err *err) {
  dcpi_err ignored;
  dcpi_rt_remove(&m->rt, tmp, &ignored);
  return dcpi_rt_write_file_atomic(&m->rt, name, tmp, data, len, err);
}

/* Rank 0: the step's recorded save plan (.plan) becomes the root's, so that
 * a restarted job's first save into a new step directory finds it there
 * (the save looks next to its checkpoint, then in the parent directory:
 * runtime/plan_persist.h). Best effort: a missing copy only costs the
 * restarted job one plan gather. */
static void keep_plan(dcp_manager *m, int64_t step) {
  char path[4200];
  dcp_manager_step_path(m, step, path, sizeof path);
  dcpi_rt srt = {.ctx = m->ctx, .path = path};
  dcpi_err_clear(&srt.err);
  dcpi_err ignored;
  uint8_t *data = NULL;
  size_t len = 0;
  if (!dcpi_rt_open_storage(&srt, 0) &&
      !dcpi_plan_file_read(&srt, &data, &len, &ignored)) {
    /* a run whose geometry holds writes the same plan every step: the
     * file's own trailing checksum tells, and the root's copy stays */
    uint64_t sum = dcpi_get_u64(data + len - 8);
    if (sum != m->root_plan_sum &&
        !write_root_file(m, DCPI_PLAN_FILE_NAME, DCPI_PLAN_FILE_TMP, data, len, &ignored))
      m->root_plan_sum = sum;
  }
  if (srt.st) m->ctx->storage->close(srt.st);
  free(data);
}

/* After step is durable on every rank: latest, then retention. Collective. */
static void finish_durable(dcp_manager *m, int64_t step) {
  if (step > m->newest) m->newest = step;
  dcpi_err err;
  dcpi_err_clear(&err);
  dcp_status rc = DCP_OK;
  if (m->ctx->rank == 0) {
    char line[40];
    int len = snprintf(line, sizeof line, "step-%" PRId64 "\n", step);
    rc = write_root_file(m, DCPI_LATEST_NAME, DCPI_LATEST_TMP, line, (size_t)len, &err);
    if (!rc) keep_plan(m, step);
  }
  rc = dcpi_manager_agree(m, rc, &err);
  memset(&m->last_gc, 0, sizeof m->last_gc);
  m->last_gc.struct_size = sizeof m->last_gc;
  if (rc) {
    /* retention would delete the step latest still names */
    m->last_gc.status = rc;
    snprintf(m->last_gc.message, sizeof m->last_gc.message,
             "latest not updated to step %" PRId64 " (retention skipped): %.400s", step,
             err.msg);
    dcpi_manager_log(m, "%s", m->last_gc.message);
    return;
  }
  if (m->opts.flags & DCP_MANAGER_NO_AUTO_GC) return;
  dcpi_err saved = m->ctx->last;
  dcp_manager_gc(m, 0, &m->last_gc);
  m->ctx->last = saved; /* the save's outcome stays the context's */
}

/* The checks every save makes before it writes (every rank the same). */
static dcp_status check_save(dcp_manager *m, int64_t step, const dcp_save_options *opts,
                             dcpi_err *err) {
  if (m->opts.flags & DCP_MANAGER_READ_ONLY)
    return dcpi_fail(err, DCP_EINVAL, "a read-only manager does not save");
  if (step < 0) return dcpi_fail(err, DCP_EINVAL, "step %" PRId64 " is negative", step);
  if (opts && opts->struct_size >= sizeof *opts && opts->nkv) {
    if (!opts->kv_keys || !opts->kv_values)
      return dcpi_fail(err, DCP_EINVAL, "nkv %zu with NULL kv_keys or kv_values", opts->nkv);
    for (size_t i = 0; i < opts->nkv; i++)
      if (opts->kv_keys[i] && !strcmp(opts->kv_keys[i], DCPI_STEP_KEY))
        return dcpi_fail(err, DCP_EINVAL, "the user key '%s' is the manager's", DCPI_STEP_KEY);
  }
  if (step <= m->newest)
    return dcpi_fail(err, DCP_EINVAL,
                     "step %" PRId64 " is not newer than the newest durable step %" PRId64, step,
                     m->newest);
  return DCP_OK;
}

/* Rank 0: the step's directory must not be a link or a file, nor being
 * written by someone else; *incomplete: it holds what a crashed save left
 * (which the save then replaces). */
static dcp_status check_dir(dcp_manager *m, int64_t step, bool *incomplete, dcpi_err *err) {
  char path[4200];
  dcp_manager_step_path(m, step, path, sizeof path);
  struct stat sb;
  *incomplete = false;
  if (lstat(path, &sb) != 0) return DCP_OK; /* a new step */
  dcpi_step_scan sc;
  dcpi_step_examine(m->ctx, m->root, step, &sc);
  if (sc.state == DCP_STEP_FOREIGN)
    return dcpi_fail(err, DCP_EINVAL, "%s is not the manager's to save into: %s", path, sc.note);
  if (sc.state == DCP_STEP_PENDING)
    return dcpi_fail(err, DCP_EBUSY, "%s is %s", path, sc.note);
  if (sc.state == DCP_STEP_COMMITTED || sc.state == DCP_STEP_CORRUPT)
    return dcpi_fail(err, DCP_EEXIST, "%s holds a checkpoint already (%s)", path,
                     dcp_step_state_name(sc.state));
  *incomplete = true; /* the save replaces what a crashed one left */
  return DCP_OK;
}

/* opts with the step's key/value added, into *o (keys and values in kk, vv). */
static dcp_status with_step(const dcp_save_options *opts, int64_t step, dcp_save_options *o,
                            const char ***kk, const char ***vv, char *num, size_t numcap) {
  dcp_save_options_init(o);
  if (opts) memcpy(o, opts, opts->struct_size < sizeof *o ? opts->struct_size : sizeof *o);
  o->struct_size = sizeof *o;
  size_t n = o->nkv;
  *kk = malloc((n + 1) * sizeof **kk);
  *vv = malloc((n + 1) * sizeof **vv);
  if (!*kk || !*vv) return DCP_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    (*kk)[i] = o->kv_keys[i];
    (*vv)[i] = o->kv_values[i];
  }
  snprintf(num, numcap, "%" PRId64, step);
  (*kk)[n] = DCPI_STEP_KEY;
  (*vv)[n] = num;
  o->nkv = n + 1;
  o->kv_keys = *kk;
  o->kv_values = *vv;
  return DCP_OK;
}

static dcp_status save_step(dcp_manager *m, int64_t step, dcp_state *st,
                            const dcp_save_options *opts, bool async) {
  if (!m || !st) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (m->pending) {
    dcp_status p = dcp_manager_wait(m, -1);
    if (p)
      dcpi_manager_log(m, "the async save of step %" PRId64 " failed: %s", m->pending_step,
                       dcp_ctx_last_error(m->ctx));
    if (p && m->pending) return p; /* still pending: a collective failed */
  }
  dcp_status rc = check_save(m, step, opts, &err);
  if (rc) return report(m, &err);
  bool incomplete = false;
  if (m->ctx->rank == 0) rc = check_dir(m, step, &incomplete, &err);
  if ((rc = dcpi_manager_agree(m, rc, &err))) return report(m, &err);
  /* every rank saves with the same flags: a crashed save's leftovers (a
   * part of an uncoordinated save among them, which a save refuses to
   * replace unless told) are overwritten */
  int64_t redo = incomplete;
  if ((rc = dcpi_manager_bcast(m, &redo, sizeof redo, &err))) return report(m, &err);

  char path[4200], num[32];
  dcp_manager_step_path(m, step, path, sizeof path);
  dcp_save_options o;
  const char **kk = NULL, **vv = NULL;
  if (with_step(opts, step, &o, &kk, &vv, num, sizeof num)) {
    free(kk);
    free(vv);
    dcpi_fail(&err, DCP_ENOMEM, "out of memory");
    return report(m, &err);
  }
  if (redo) o.flags |= DCP_SAVE_OVERWRITE;
  if (async) {
    dcp_async *h = NULL;
    rc = dcp_async_save(m->ctx, st, path, &o, &h);
    if (!rc) {
      m->pending = h;
      m->pending_step = step;
      /* "returns after staging" also under background staging, unless the
       * caller fences (dcp_manager_fence): a staging failure is
       * dcp_manager_wait's either way */
      if (!(m->opts.flags & DCP_MANAGER_DEFER_FENCE)) (void)dcp_async_fence(h);
    }
  } else {
    rc = dcp_save(m->ctx, st, path, &o);
    if (!rc) finish_durable(m, step);
  }
  free(kk);
  free(vv);
  return rc;
}

dcp_status dcp_manager_save(dcp_manager *m, int64_t step, dcp_state *st,
                            const dcp_save_options *opts) {
  return save_step(m, step, st, opts, false);
}

dcp_status dcp_manager_save_async(dcp_manager *m, int64_t step, dcp_state *st,
                                  const dcp_save_options *opts) {
  return save_step(m, step, st, opts, true);
}

dcp_status dcp_manager_wait(dcp_manager *m, int64_t timeout_ms) {
  if (!m) return DCP_EINVAL;
  if (!m->pending) return DCP_OK;
  dcp_status local = dcp_async_wait_for(m->pending, timeout_ms);
  dcpi_err err;
  dcpi_err_clear(&err);
  if (local) {
    err.code = local;
    snprintf(err.msg, sizeof err.msg, "%s", dcp_ctx_last_error(m->ctx));
  }
  /* every rank must see the same outcome before latest moves: a rank
   * whose wait timed out while another's finished */
  dcp_status rc = dcpi_manager_agree(m, local, &err);
  int64_t step = m->pending_step;
  if (rc == DCP_ETIMEDOUT && local != DCP_ETIMEDOUT && local != DCP_OK) rc = local;
  if (rc == DCP_ETIMEDOUT) return report(m, &err); /* still pending: wait again or abort */
  dcp_async_free(m->pending);
  m->pending = NULL;
  m->pending_step = -1;
  if (rc) return report(m, &err);
  finish_durable(m, step);
  return DCP_OK;
}

dcp_status dcp_manager_fence(dcp_manager *m) {
  if (!m) return DCP_EINVAL;
  return m->pending ? dcp_async_fence(m->pending) : DCP_OK;
}

dcp_status dcp_manager_abort(dcp_manager *m) {
  if (!m) return DCP_EINVAL;
  if (!m->pending) return DCP_OK;
  dcp_status rc = dcp_async_abort(m->pending);
  dcp_async_free(m->pending);
  m->pending = NULL;
  m->pending_step = -1;
  return rc;
}

/* ---- resume and load ----------------------------------------------------------------- */

dcp_status dcp_manager_resume(dcp_manager *m, uint32_t flags, int64_t *step) {
  if (step) *step = -1;
  if (!m || !step) return DCP_EINVAL;
  dcpi_err err;
  dcpi_err_clear(&err);
  if (flags & ~DCP_RESUME_VERIFY) {
    dcpi_fail(&err, DCP_EINVAL, "unknown dcp_manager_resume flags 0x%x", flags);
    return report(m, &err);
  }
  int64_t chosen = -1;
  if (m->ctx->rank == 0) {
    dcpi_step_scan *v = NULL;
    size_t n = 0;
    if (dcpi_steps_scan(m->ctx, m->root, dcp_manager_pending_step(m), &v, &n, &err) == DCP_OK) {
      dcpi_err saved = m->ctx->last;
      for (size_t k = n; k-- > 0 && chosen < 0;) {
        if (v[k].state != DCP_STEP_COMMITTED) {
          dcpi_manager_log(m, "resume: skipping step %" PRId64 " (%s: %s)", v[k].step,
                           dcp_step_state_name(v[k].state), v[k].note);
          continue;
        }
        if (flags & DCP_RESUME_VERIFY) {
          char path[4200];
          dcp_manager_step_path(m, v[k].step, path, sizeof path);
          dcp_verify_report rep = {.struct_size = sizeof rep};
          dcp_status vs = dcp_verify(m->ctx, path, &rep);
          if (vs) {
            dcpi_manager_log(m, "resume: skipping step %" PRId64 " (verify: %s: %s)", v[k].step,
                             dcp_strerror(vs), rep.first_problem);
            continue;
          }
        }
        chosen = v[k].step;
      }
      m->ctx->last = saved;
    }
    free(v);
  }
  int64_t msg[2] = {chosen, err.code};
  dcp_status rc = dcpi_manager_bcast(m, msg, sizeof msg, &err);
  if (rc) return report(m, &err);
  if (msg[1]) {
    if (m->ctx->rank != 0) dcpi_fail(&err, (dcp_status)msg[1], "rank 0 could not list the root");
    return report(m, &err);
  }
  *step = msg[0];
  if (*step < 0) {
    dcpi_fail(&err, DCP_ENOTFOUND, "no loadable step under %s", m->root);
    return report(m, &err);
  }
  if (m->ctx->rank == 0) dcpi_manager_log(m, "resume: step %" PRId64, *step);
  return DCP_OK;
}

dcp_status dcp_manager_load(dcp_manager *m, int64_t step, dcp_state *st,
                            const dcp_load_options *opts) {
  if (!m || !st) return DCP_EINVAL;
  char path[4200];
  if (dcp_manager_step_path(m, step, path, sizeof path)) {
    dcpi_err err;
    dcpi_fail(&err, DCP_EINVAL, "step %" PRId64 " is not a step", step);
    return report(m, &err);
  }
  return dcp_load(m->ctx, st, path, opts);
}
