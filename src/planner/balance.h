/* balance.h — assign each item to one of its holders so that the bytes per
 * rank stay balanced. Serves both write dedup (who writes a replicated
 * chunk) and read dedup (who reads for a replica group). Pure. */
#ifndef DCP_PLANNER_BALANCE_H
#define DCP_PLANNER_BALANCE_H

#include "base/err.h"

typedef enum dcpi_balance_policy {
  DCPI_BALANCE_LEAST_LOADED = 0, /* greedy LPT over the holders */
  DCPI_BALANCE_LOWEST_RANK = 1   /* always the lowest holder (the article's
                                    save_to_minimum_rank) */
} dcpi_balance_policy;

typedef struct dcpi_balance_item {
  int64_t bytes;          /* >= 0 */
  uint64_t key;           /* tie-break: items with equal (holders, bytes)
                             are taken in ascending key order; give each item
                             a distinct key (e.g. its canonical index) */
  uint32_t nholders;      /* >= 1 */
  const int32_t *holders; /* ascending, distinct ranks in [0, world_size) */
} dcpi_balance_item;

/* Choose owner[i] among items[i].holders for every item.
 *
 * LEAST_LOADED: single-holder items are assigned first (they have no
 * choice); then the others in order of (fewest holders, largest bytes, key),
 * each to its currently least-loaded holder, ties to the lowest rank.
 * Deterministic: depends only on the input.
 *
 * load (world_size entries, may be NULL) receives the bytes assigned to each
 * rank. Errors: DCP_EINVAL (a holder out of range, not ascending, NULL, no
 * holders, negative bytes, world_size < 1), DCP_EOVERFLOW (a rank's load
 * exceeds INT64_MAX), DCP_ENOMEM. On error owner and load are unspecified. */
dcp_status dcpi_balance(const dcpi_balance_item *items, size_t n, int32_t world_size,
                        dcpi_balance_policy policy, int32_t *owner, int64_t *load,
                        dcpi_err *err);

/* dcpi_balance starting from base[r] bytes already on each rank (base may be
 * NULL for zeros; world_size entries, each >= 0); load then includes base.
 * The result equals dcpi_balance over these items plus single-holder items
 * carrying the base bytes, without materialising those: the save planner
 * assigns its millions of single-holder chunks itself and balances only the
 * replicated ones. Errors: as dcpi_balance, DCP_EINVAL for a negative base. */
dcp_status dcpi_balance_from(const dcpi_balance_item *items, size_t n, int32_t world_size,
                             dcpi_balance_policy policy, const int64_t *base, int32_t *owner,
                             int64_t *load, dcpi_err *err);

#endif
