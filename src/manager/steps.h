/* steps.h — the step directories of a manager's root: their names, what
 * each holds (its dcp_step_state, with the reason), and their removal.
 *
 * A step directory is ROOT/step-N, N in canonical decimal (no sign, no
 * leading zero, at most INT64_MAX); any other name in the root is not a
 * step and is never touched. The root is listed with POSIX calls (the
 * storage ABI has no directory listing); inside a step, the commit check
 * goes through the context's storage plugin (dcp_meta_open), and a
 * deletion works under a directory handle opened with O_NOFOLLOW, so a
 * step replaced by a symbolic link is never followed. */
#ifndef DCP_MANAGER_STEPS_H
#define DCP_MANAGER_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "dcp.h"

#define DCPI_STEP_NOTE_MAX 160u
#define DCPI_STEP_KEY "dcp.step"          /* the user key/value a step records */
#define DCPI_MANAGER_LEASE ".dcp-manager.lock"
#define DCPI_LATEST_NAME "latest"
#define DCPI_LATEST_TMP "latest.tmp"

/* The step of a directory name: "step-N" -> N; -1 for any other name. */
int64_t dcpi_step_parse(const char *name);

/* The step a "dcp.step" value names (canonical decimal), or -1. */
int64_t dcpi_step_parse_value(const char *value);

/* "step-N" into out (cap >= 32). */
void dcpi_step_name(char *out, size_t cap, int64_t step);

/* One step directory as a scan found it. */
typedef struct dcpi_step_scan {
  int64_t step;
  dcp_step_state state;
  uint64_t bytes;
  char note[DCPI_STEP_NOTE_MAX];
} dcpi_step_scan;

/* Scan root: every step directory, sorted by step, into *out (malloc'd,
 * *n entries; NULL when none). The step `pending` (-1: none) is reported
 * pending without being opened (this manager's async save is writing it).
 * Leaves the context's last error as it was.
 * Errors: DCP_EIO (root unreadable), DCP_ENOMEM. */
dcp_status dcpi_steps_scan(dcp_ctx *ctx, const char *root, int64_t pending,
                           dcpi_step_scan **out, size_t *n, dcpi_err *err);

/* The state of one step directory (as dcpi_steps_scan). */
void dcpi_step_examine(dcp_ctx *ctx, const char *root, int64_t step, dcpi_step_scan *out);

/* Delete step directory `step` of root: take its directory lease (a live
 * writer: DCP_EBUSY, nothing removed), remove its commit markers
 * (.metadata, parts) and sync the directory, then remove everything else
 * and the directory itself, and sync the root. A crash at any point leaves
 * the step incomplete (no commit marker) or gone, never half-committed.
 * Errors: DCP_EBUSY, DCP_EINVAL (not a directory, or a symbolic link),
 * DCP_EIO. */
dcp_status dcpi_step_delete(dcp_ctx *ctx, const char *root, int64_t step, dcpi_err *err);

/* Sync the root directory itself (after creating or removing a step). */
dcp_status dcpi_root_sync(const char *root, dcpi_err *err);

#endif
