/* box_index.c — a sorted sweep over one dimension with a running maximum
 * of ends: an implicit interval index over the saved chunks of one fqn. */
#include "planner/box_index.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "model/box.h"

/* The expected number of chunks a random query walks in dimension d is about
 * the number of chunks a hyperplane orthogonal to d crosses: the sum of
 * their extents in d over the span of the set in d. Pick the dimension that
 * minimises it (ties to the lower dimension, which the metadata's
 * lexicographic order leaves already sorted). Chunks spanning the whole
 * tensor in d (TP shards along another dim, DP replicas) make d useless,
 * which a count of distinct offsets alone would not see. The choice only
 * affects speed: query answers do not depend on it. */
static uint32_t choose_dim(uint32_t ndim, size_t n, const int64_t *off, const int64_t *sz) {
  uint32_t best = 0;
  double best_depth = 0;
  for (uint32_t d = 0; d < ndim; d++) {
    int64_t lo = INT64_MAX, hi = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
      const int64_t o = off[i * ndim + d], s = sz[i * ndim + d];
      if (o < lo) lo = o;
      if (o + s > hi) hi = o + s;
      sum += (double)s;
    }
    double depth = hi > lo ? sum / (double)(hi - lo) : (double)n;
    if (d == 0 || depth < best_depth) {
      best = d;
      best_depth = depth;
    }
  }
  return best;
}

/* (start, chunk) order: chunk breaks ties, so the order is total. */
static int entry_before(const dcpi_box_index_entry *a, const dcpi_box_index_entry *b) {
  return a->start < b->start || (a->start == b->start && a->chunk < b->chunk);
}

/* Stable bottom-up merge sort of e[0..n) using tmp (n entries). Inline
 * comparisons: this runs for every fqn a rank loads, so it must be cheap. */
static void sort_entries(dcpi_box_index_entry *e, dcpi_box_index_entry *tmp, size_t n) {
  dcpi_box_index_entry *src = e, *dst = tmp;
  for (size_t w = 1; w < n; w *= 2) {
    for (size_t lo = 0; lo < n; lo += 2 * w) {
      size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) dst[k++] = entry_before(&src[j], &src[i]) ? src[j++] : src[i++];
      while (i < mid) dst[k++] = src[i++];
      while (j < hi) dst[k++] = src[j++];
    }
    dcpi_box_index_entry *t = src;
    src = dst;
    dst = t;
  }
  if (src != e) memcpy(e, src, n * sizeof *e);
}

/* Sort the entries unless they already are (one linear pass), then fill in
 * the running maximum of ends. */
static dcp_status order_entries(dcpi_box_index *ix, size_t m) {
  dcpi_box_index_entry *e = ix->entries;
  size_t k = 1;
  while (k < m && entry_before(&e[k - 1], &e[k])) k++;
  if (k < m) {
    dcpi_box_index_entry *tmp = malloc(m * sizeof *tmp);
    if (!tmp) return DCP_ENOMEM;
    sort_entries(e, tmp, m);
    free(tmp);
  }
  int64_t reach = 0;
  for (size_t i = 0; i < m; i++) {
    int64_t end = ix->ndim ? e[i].start + ix->sz[(size_t)e[i].chunk * ix->ndim + ix->dim] : 1;
    if (end > reach) reach = end;
    e[i].reach = reach;
  }
  return DCP_OK;
}

dcp_status dcpi_box_index_build(dcpi_box_index *ix, uint32_t ndim, size_t count,
                                const int64_t *off, const int64_t *sz, dcpi_err *err) {
  *ix = (dcpi_box_index){.ndim = ndim, .off = off, .sz = sz};
  if (ndim > DCP_MAX_NDIM)
    return dcpi_fail(err, DCP_EINVAL, "box index: ndim %u exceeds %d", ndim, DCP_MAX_NDIM);
  if (count && ndim && (!off || !sz))
    return dcpi_fail(err, DCP_EINVAL, "box index: boxes are NULL");
  if (count > UINT32_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "box index: %zu boxes exceed 2^32", count);
  if (!count) return DCP_OK;
  ix->dim = choose_dim(ndim, count, off, sz);
  if (!(ix->entries = malloc(count * sizeof *ix->entries)))
    return dcpi_fail(err, DCP_ENOMEM, "box index: out of memory for %zu boxes", count);
  size_t m = 0;
  for (size_t i = 0; i < count; i++) {
    if (ndim && dcpi_box_is_empty(ndim, sz + i * ndim)) continue; /* never matches */
    ix->entries[m++] = (dcpi_box_index_entry){
        .start = ndim ? off[i * ndim + ix->dim] : 0, .chunk = (uint32_t)i};
  }
  ix->count = m;
  if (order_entries(ix, m)) {
    dcpi_box_index_free(ix);
    return dcpi_fail(err, DCP_ENOMEM, "box index: out of memory for %zu boxes", count);
  }
  return DCP_OK;
}

void dcpi_box_index_free(dcpi_box_index *ix) {
  if (!ix) return;
  free(ix->entries);
  ix->entries = NULL;
  ix->count = 0;
}

/* qsort order of chunk indices. */
static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Ascending chunk order makes the answer independent of the sweep
 * dimension; hit lists are short, so insertion sort unless they are not. */
static void sort_hits(uint32_t *h, size_t n) {
  if (n > 32) {
    dcpi_sort(h, n, sizeof *h, cmp_u32);
    return;
  }
  for (size_t i = 1; i < n; i++) {
    uint32_t v = h[i];
    size_t j = i;
    for (; j > 0 && h[j - 1] > v; j--) h[j] = h[j - 1];
    h[j] = v;
  }
}

/* Index of the first entry whose start is >= end. */
static size_t first_at_or_after(const dcpi_box_index *ix, int64_t end) {
  size_t lo = 0, hi = ix->count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ix->entries[mid].start < end)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

dcp_status dcpi_box_index_query(const dcpi_box_index *ix, const int64_t *q_off,
                                const int64_t *q_sz, uint32_t **hits, size_t *cap,
                                size_t *nhits) {
  const uint32_t nd = ix->ndim;
  *nhits = 0;
  if (nd && dcpi_box_is_empty(nd, q_sz)) return DCP_OK;
  int64_t q_start = nd ? q_off[ix->dim] : 0, q_end = nd ? q_off[ix->dim] + q_sz[ix->dim] : 1;
  size_t n = 0;
  /* Entries before k start before the query's end; walking down, once the
   * running maximum no longer passes the query's start, no earlier entry
   * can reach it either. */
  for (size_t k = first_at_or_after(ix, q_end); k > 0 && ix->entries[k - 1].reach > q_start;
       k--) {
    uint32_t c = ix->entries[k - 1].chunk;
    if (nd && !dcpi_boxes_overlap(nd, ix->off + (size_t)c * nd, ix->sz + (size_t)c * nd, q_off,
                                  q_sz))
      continue;
    if (n == *cap && DCPI_RESERVE(*hits, *cap, n + 1)) return DCP_ENOMEM;
    (*hits)[n++] = c;
  }
  sort_hits(*hits, n);
  *nhits = n;
  return DCP_OK;
}
