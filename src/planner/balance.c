/* balance.c — greedy write/read load balancing over replica holders. */
#include "planner/balance.h"

#include <stdlib.h>

#include "base/checked.h"

typedef struct order_entry {
  uint32_t nholders;
  int64_t bytes;
  uint64_t key;
  size_t index;
} order_entry;

/* (fewest holders, largest bytes, smallest key): the most constrained and
 * the biggest items go first, which is what keeps the greedy within the
 * list-scheduling bound. */
static int cmp_order(const void *pa, const void *pb) {
  const order_entry *a = pa, *b = pb;
  if (a->nholders != b->nholders) return a->nholders < b->nholders ? -1 : 1;
  if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return 0;
}

static int32_t least_loaded(const dcpi_balance_item *it, const int64_t *load) {
  int32_t best = it->holders[0];
  for (uint32_t h = 1; h < it->nholders; h++)
    if (load[it->holders[h]] < load[best]) best = it->holders[h];
  return best; /* holders ascend, so strict < keeps ties at the lowest rank */
}

/* Check every item's holders and bytes; count the multi-holder ones. */
static dcp_status check_items(const dcpi_balance_item *items, size_t n, int32_t world_size,
                              size_t *nmulti, dcpi_err *err) {
  *nmulti = 0;
  for (size_t i = 0; i < n; i++) {
    const dcpi_balance_item *it = &items[i];
    if (it->nholders == 0 || !it->holders)
      return dcpi_fail(err, DCP_EINVAL, "balance: item %zu has no holder", i);
    if (it->bytes < 0)
      return dcpi_fail(err, DCP_EINVAL, "balance: item %zu has negative bytes %lld", i,
                       (long long)it->bytes);
    for (uint32_t h = 0; h < it->nholders; h++)
      if (it->holders[h] < 0 || it->holders[h] >= world_size ||
          (h && it->holders[h] <= it->holders[h - 1]))
        return dcpi_fail(err, DCP_EINVAL,
                         "balance: item %zu holder %d out of range or not ascending", i,
                         it->holders[h]);
    if (it->nholders > 1) (*nmulti)++;
  }
  return DCP_OK;
}

/* ld[r] += bytes, failing instead of overflowing. */
static dcp_status charge(int64_t *ld, int32_t r, int64_t bytes, dcpi_err *err) {
  if (!dcpi_add_i64(ld[r], bytes, &ld[r]))
    return dcpi_fail(err, DCP_EOVERFLOW, "balance: load of rank %d overflows int64", r);
  return DCP_OK;
}

/* Assign the single-holder items (and, under LOWEST_RANK, all items) and
 * collect the rest into order[0..*m). */
static dcp_status assign_fixed(const dcpi_balance_item *items, size_t n,
                               dcpi_balance_policy policy, int32_t *owner, int64_t *ld,
                               order_entry *order, size_t *m, dcpi_err *err) {
  *m = 0;
  for (size_t i = 0; i < n; i++) {
    const dcpi_balance_item *it = &items[i];
    if (it->nholders == 1 || policy == DCPI_BALANCE_LOWEST_RANK) {
      owner[i] = it->holders[0];
      dcp_status rc = charge(ld, owner[i], it->bytes, err);
      if (rc) return rc;
    } else {
      order[(*m)++] = (order_entry){it->nholders, it->bytes, it->key, i};
    }
  }
  return DCP_OK;
}

/* Sort the movable items and give each to its least-loaded holder. */
static dcp_status assign_greedy(const dcpi_balance_item *items, order_entry *order, size_t m,
                                int32_t *owner, int64_t *ld, dcpi_err *err) {
  dcpi_sort(order, m, sizeof *order, cmp_order);
  for (size_t k = 0; k < m; k++) {
    const dcpi_balance_item *it = &items[order[k].index];
    int32_t r = least_loaded(it, ld);
    owner[order[k].index] = r;
    dcp_status rc = charge(ld, r, it->bytes, err);
    if (rc) return rc;
  }
  return DCP_OK;
}

dcp_status dcpi_balance_from(const dcpi_balance_item *items, size_t n, int32_t world_size,
                             dcpi_balance_policy policy, const int64_t *base, int32_t *owner,
                             int64_t *load, dcpi_err *err) {
  if (world_size < 1) return dcpi_fail(err, DCP_EINVAL, "balance: world size %d", world_size);
  if (n && (!items || !owner)) return dcpi_fail(err, DCP_EINVAL, "balance: NULL items or owner");
  size_t nmulti;
  dcp_status rc = check_items(items, n, world_size, &nmulti, err);
  if (rc) return rc;
  for (int32_t r = 0; base && r < world_size; r++)
    if (base[r] < 0)
      return dcpi_fail(err, DCP_EINVAL, "balance: negative base load on rank %d", r);
  int64_t *ld = calloc((size_t)world_size, sizeof *ld);
  order_entry *order = malloc((nmulti ? nmulti : 1) * sizeof *order);
  if (!ld || !order) {
    free(ld);
    free(order);
    return dcpi_fail(err, DCP_ENOMEM, "balance: out of memory for %zu items", n);
  }
  for (int32_t r = 0; base && r < world_size; r++) ld[r] = base[r];
  size_t m;
  rc = assign_fixed(items, n, policy, owner, ld, order, &m, err);
  if (!rc) rc = assign_greedy(items, order, m, owner, ld, err);
  if (!rc && load)
    for (int32_t r = 0; r < world_size; r++) load[r] = ld[r];
  free(ld);
  free(order);
  return rc;
}

dcp_status dcpi_balance(const dcpi_balance_item *items, size_t n, int32_t world_size,
                        dcpi_balance_policy policy, int32_t *owner, int64_t *load,
                        dcpi_err *err) {
  return dcpi_balance_from(items, n, world_size, policy, NULL, owner, load, err);
}
