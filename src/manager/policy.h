/* policy.h — the checkpoint manager's retention decision: which step
 * directories of a root to delete. Pure: a list of steps and their states
 * in, one verdict per step out; no I/O, no allocation, no clock.
 *
 * The rules (docs/manager.md, "Retention"):
 *  - Only committed steps older than the anchor, abandoned (incomplete)
 *    directories, and nothing else may be deleted. Pending (a save is
 *    writing them), corrupt (kept for inspection) and foreign (not the
 *    manager's: a symbolic link, a file, a checkpoint without its step
 *    record) steps are never deleted.
 *  - The anchor, the newest committed step, is always kept: a policy can
 *    never delete the newest durable checkpoint, whatever its numbers say.
 *  - A committed step is kept when it is pinned (the caller's list or
 *    predicate), a multiple of keep_every (when non-zero), or among the
 *    keep_last newest committed steps (keep_last 0: every step).
 *  - max_bytes (when non-zero) then deletes, oldest first, steps kept only
 *    by keep_last until the committed steps kept total at most max_bytes;
 *    the anchor, pinned and keep_every steps count but are never deleted
 *    for it (over_budget says when the budget cannot be met).
 *  - Incomplete directories are deleted unless keep_incomplete. */
#ifndef DCP_MANAGER_POLICY_H
#define DCP_MANAGER_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

typedef struct dcpi_retention {
  uint32_t keep_last;   /* newest committed steps kept; 0: all */
  uint64_t keep_every;  /* keep steps that are multiples of it; 0: none */
  uint64_t max_bytes;   /* bytes of committed steps kept; 0: no limit */
  bool keep_incomplete; /* never delete incomplete directories */
} dcpi_retention;

/* One step as the decision sees it. */
typedef struct dcpi_step_entry {
  int64_t step;         /* >= 0 */
  dcp_step_state state;
  uint64_t bytes;       /* size of its files */
  bool pinned;          /* the caller's keep list or predicate keeps it */
} dcpi_step_entry;

/* Why a step is kept or deleted (dcpi_verdict_name gives the words). */
typedef enum dcpi_verdict {
  DCPI_KEEP_NEWEST = 0,   /* the anchor */
  DCPI_KEEP_PINNED,       /* the caller's list or predicate */
  DCPI_KEEP_EVERY,        /* a multiple of keep_every */
  DCPI_KEEP_LAST,         /* among the keep_last newest */
  DCPI_KEEP_PENDING,      /* a save is writing it */
  DCPI_KEEP_CORRUPT,      /* its metadata does not verify: kept for inspection */
  DCPI_KEEP_FOREIGN,      /* not the manager's */
  DCPI_KEEP_INCOMPLETE,   /* incomplete, and keep_incomplete is set */
  DCPI_DELETE_OLD,        /* older than the keep_last newest */
  DCPI_DELETE_BYTES,      /* deleted to meet max_bytes */
  DCPI_DELETE_ABANDONED   /* an incomplete directory (a crashed save) */
} dcpi_verdict;

/* Whether v deletes. */
bool dcpi_verdict_deletes(dcpi_verdict v);

/* Why v keeps or deletes, a short static phrase ("the newest durable
 * step", "older than the keep_last newest", ...). */
const char *dcpi_verdict_name(dcpi_verdict v);

/* What the decision found besides the verdicts. */
typedef struct dcpi_decision_summary {
  size_t deleted;     /* verdicts that delete */
  uint64_t kept_bytes; /* bytes of the committed steps kept */
  bool over_budget;   /* max_bytes is set and kept_bytes exceeds it */
  int64_t anchor;     /* the newest committed step, -1 when none */
} dcpi_decision_summary;

/* Decide every step: steps[0..n) sorted by step, ascending, no two equal;
 * out[i] is steps[i]'s verdict. sum may be NULL.
 * Errors: DCP_EINVAL (NULL with n > 0, a negative step, steps not strictly
 * ascending, an unknown state); out is then untouched. */
dcp_status dcpi_retention_decide(const dcpi_retention *p, const dcpi_step_entry *steps, size_t n,
                                 dcpi_verdict *out, dcpi_decision_summary *sum);

#endif
