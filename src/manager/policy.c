/* policy.c — the retention decision (policy.h). Pure. */
#include "manager/policy.h"

bool dcpi_verdict_deletes(dcpi_verdict v) {
  return v == DCPI_DELETE_OLD || v == DCPI_DELETE_BYTES || v == DCPI_DELETE_ABANDONED;
}

const char *dcpi_verdict_name(dcpi_verdict v) {
  switch (v) {
  case DCPI_KEEP_NEWEST: return "the newest durable step";
  case DCPI_KEEP_PINNED: return "pinned";
  case DCPI_KEEP_EVERY: return "a multiple of keep_every";
  case DCPI_KEEP_LAST: return "among the keep_last newest";
  case DCPI_KEEP_PENDING: return "a save is writing it";
  case DCPI_KEEP_CORRUPT: return "corrupt steps are left for inspection";
  case DCPI_KEEP_FOREIGN: return "not the manager's";
  case DCPI_KEEP_INCOMPLETE: return "incomplete directories are kept (keep_incomplete)";
  case DCPI_DELETE_OLD: return "older than the keep_last newest";
  case DCPI_DELETE_BYTES: return "over max_bytes";
  case DCPI_DELETE_ABANDONED: return "an abandoned save";
  }
  return "unknown";
}

static bool state_known(dcp_step_state s) {
  return s == DCP_STEP_COMMITTED || s == DCP_STEP_PENDING || s == DCP_STEP_INCOMPLETE ||
         s == DCP_STEP_CORRUPT || s == DCP_STEP_FOREIGN;
}

dcp_status dcpi_retention_decide(const dcpi_retention *p, const dcpi_step_entry *steps, size_t n,
                                 dcpi_verdict *out, dcpi_decision_summary *sum) {
  if (!p || (n && (!steps || !out))) return DCP_EINVAL;
  int64_t anchor = -1;
  for (size_t i = 0; i < n; i++) {
    if (steps[i].step < 0 || !state_known(steps[i].state)) return DCP_EINVAL;
    if (i && steps[i].step <= steps[i - 1].step) return DCP_EINVAL;
    if (steps[i].state == DCP_STEP_COMMITTED) anchor = steps[i].step;
  }

  /* committed steps, newest first: rank among them decides keep_last */
  uint64_t newer = 0; /* committed steps newer than i */
  for (size_t k = n; k-- > 0;) {
    const dcpi_step_entry *e = &steps[k];
    switch (e->state) {
    case DCP_STEP_PENDING: out[k] = DCPI_KEEP_PENDING; continue;
    case DCP_STEP_CORRUPT: out[k] = DCPI_KEEP_CORRUPT; continue;
    case DCP_STEP_FOREIGN: out[k] = DCPI_KEEP_FOREIGN; continue;
    case DCP_STEP_INCOMPLETE:
      out[k] = p->keep_incomplete ? DCPI_KEEP_INCOMPLETE : DCPI_DELETE_ABANDONED;
      continue;
    case DCP_STEP_COMMITTED: break;
    }
    if (e->step == anchor)
      out[k] = DCPI_KEEP_NEWEST;
    else if (e->pinned)
      out[k] = DCPI_KEEP_PINNED;
    else if (p->keep_every && (uint64_t)e->step % p->keep_every == 0)
      out[k] = DCPI_KEEP_EVERY;
    else if (p->keep_last == 0 || newer < p->keep_last)
      out[k] = DCPI_KEEP_LAST;
    else
      out[k] = DCPI_DELETE_OLD;
    newer++;
  }

  /* the byte budget: oldest steps kept by keep_last alone go first */
  uint64_t kept = 0;
  for (size_t i = 0; i < n; i++)
    if (steps[i].state == DCP_STEP_COMMITTED && !dcpi_verdict_deletes(out[i]))
      kept = kept + steps[i].bytes < kept ? UINT64_MAX : kept + steps[i].bytes;
  if (p->max_bytes)
    for (size_t i = 0; i < n && kept > p->max_bytes; i++)
      if (out[i] == DCPI_KEEP_LAST) {
        out[i] = DCPI_DELETE_BYTES;
        kept -= steps[i].bytes;
      }

  if (sum) {
    sum->deleted = 0;
    for (size_t i = 0; i < n; i++) sum->deleted += dcpi_verdict_deletes(out[i]);
    sum->kept_bytes = kept;
    sum->over_budget = p->max_bytes && kept > p->max_bytes;
    sum->anchor = anchor;
  }
  return DCP_OK;
}
