/* save_layout_bytes.c — bytes items on the per-rank planning path
 * (save_layout_bytes.h). Every offer is a peer's message: nothing in it is
 * trusted. */
#include "runtime/save_layout_bytes.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"

#define BAD(err, r) dcpi_fail(err, DCP_ECORRUPT, "malformed layout offer from rank %d", (int)(r))

void dcpi_lbytes_put_offer(const dcp_state *st, dcpi_wbuf *out) {
  dcpi_w_varint(out, st->nbytes);
  for (size_t i = 0; i < st->nbytes; i++) {
    const dcpi_bytes_item *b = &st->bytes[i];
    dcpi_w_varint(out, b->key_len);
    dcpi_w_bytes(out, b->key, b->key_len);
    dcpi_w_u8(out, (uint8_t)b->scope);
    dcpi_w_varint(out, b->len);
  }
}

dcp_status dcpi_lbytes_read(dcpi_lbytes *b, dcpi_rbuf *r, int32_t rank, dcpi_err *err) {
  uint64_t n, klen, len;
  uint8_t scope;
  if (!dcpi_r_varint(r, &n) || n > dcpi_r_left(r)) return BAD(err, rank);
  for (uint64_t i = 0; i < n; i++) {
    if (!dcpi_r_varint(r, &klen) || klen == 0 || klen > DCP_MAX_NAME || klen > dcpi_r_left(r))
      return BAD(err, rank);
    const char *key = (const char *)r->p + r->pos;
    r->pos += (size_t)klen;
    if (!dcpi_r_u8(r, &scope) || scope > DCP_SCOPE_PER_RANK || !dcpi_r_varint(r, &len) ||
        len > INT64_MAX)
      return BAD(err, rank);
    char *copy = malloc((size_t)klen + 1);
    if (!copy || DCPI_RESERVE(b->items, b->cap, b->n + 1)) {
      free(copy);
      return dcpi_fail(err, DCP_ENOMEM, "layout plan: out of memory for bytes items");
    }
    memcpy(copy, key, (size_t)klen);
    copy[klen] = 0;
    b->items[b->n++] = (dcpi_lbytes_item){.key = copy, .key_len = (size_t)klen, .rank = rank,
                                          .index = (uint32_t)i, .scope = scope,
                                          .length = len};
    dcp_status rc = dcpi_check_name(copy, "bytes key", err);
    if (rc || strlen(copy) != klen) return BAD(err, rank); /* a NUL inside, or the rule */
  }
  return DCP_OK;
}

/* Items in (key, rank) order, by pointer. */
static int cmp_key_rank(const void *pa, const void *pb) {
  const dcpi_lbytes_item *a = *(const dcpi_lbytes_item *const *)pa,
                         *b = *(const dcpi_lbytes_item *const *)pb;
  size_t n = a->key_len < b->key_len ? a->key_len : b->key_len;
  int c = memcmp(a->key, b->key, n);
  if (c || a->key_len != b->key_len) return c ? c : a->key_len < b->key_len ? -1 : 1;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

static const char *scope_name(uint8_t s) {
  return s == DCP_SCOPE_REPLICATED ? "REPLICATED" : "PER_RANK";
}

/* The run of one key (sorted[0..n), lowest rank first): one scope,
 * replicas of one length, no tensor of that name; its writers. */
static dcp_status settle_key(dcpi_lbytes_item **run, size_t n, const dcpi_strmap *tensor_names,
                             dcpi_err *err) {
  const dcpi_lbytes_item *f = run[0];
  uint32_t v;
  if (dcpi_strmap_get(tensor_names, f->key, f->key_len, &v))
    return dcpi_fail(err, DCP_EMISMATCH, "'%s' is a tensor but a bytes item on rank %d", f->key,
                     f->rank);
  for (size_t k = 0; k < n; k++) {
    const dcpi_lbytes_item *x = run[k];
    if (k && x->rank == run[k - 1]->rank) return BAD(err, x->rank); /* one key twice */
    if (x->scope != f->scope)
      return dcpi_fail(err, DCP_ESCOPE, "bytes '%s': %s on rank %d but %s on rank %d", f->key,
                       scope_name(f->scope), f->rank, scope_name(x->scope), x->rank);
    if (f->scope == DCP_SCOPE_REPLICATED && x->length != f->length)
      return dcpi_fail(err, DCP_ESCOPE,
                       "bytes '%s': replicated with length %llu on rank %d but %llu on rank %d",
                       f->key, (unsigned long long)f->length, f->rank,
                       (unsigned long long)x->length, x->rank);
    /* a replicated item once, by its lowest holder; a per-rank one by each */
    run[k]->writes = f->scope == DCP_SCOPE_PER_RANK || k == 0;
  }
  return DCP_OK;
}

dcp_status dcpi_lbytes_settle(dcpi_lbytes *b, const dcpi_strmap *tensor_names, dcpi_err *err) {
  dcpi_lbytes_item **sorted = malloc((b->n ? b->n : 1) * sizeof *sorted);
  if (!sorted) return dcpi_fail(err, DCP_ENOMEM, "layout plan: out of memory for bytes items");
  for (size_t i = 0; i < b->n; i++) sorted[i] = &b->items[i];
  dcpi_sort(sorted, b->n, sizeof *sorted, cmp_key_rank);
  dcp_status rc = DCP_OK;
  for (size_t i = 0, j; !rc && i < b->n; i = j) {
    for (j = i + 1; j < b->n && sorted[j]->key_len == sorted[i]->key_len &&
                    !memcmp(sorted[j]->key, sorted[i]->key, sorted[i]->key_len);
         j++) {
    }
    rc = settle_key(sorted + i, j - i, tensor_names, err);
  }
  free(sorted);
  return rc;
}

/* The first item of rank (items are in rank order), or b->n. */
static size_t first_of(const dcpi_lbytes *b, int32_t rank) {
  size_t lo = 0, hi = b->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (b->items[mid].rank < rank) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void dcpi_lbytes_assignment(const dcpi_lbytes *b, int32_t rank, bool ok, dcpi_wbuf *out) {
  dcpi_w_u8(out, ok);
  if (!ok) return;
  size_t at = first_of(b, rank), end = at;
  while (end < b->n && b->items[end].rank == rank) end++;
  dcpi_w_varint(out, end - at);
  for (size_t i = at; i < end; i++) dcpi_w_u8(out, b->items[i].writes);
}

dcp_status dcpi_lbytes_parse_assignment(const uint8_t *msg, size_t len, size_t n, bool *ok,
                                        uint8_t **writes, dcpi_err *err) {
  dcpi_rbuf r = {msg, len, 0};
  uint8_t flag;
  uint64_t count;
  *writes = NULL;
  if (!dcpi_r_u8(&r, &flag) || flag > 1)
    return dcpi_fail(err, DCP_ECORRUPT, "malformed layout plan from rank 0");
  *ok = flag;
  if (!flag) return DCP_OK;
  if (!dcpi_r_varint(&r, &count) || count != n || dcpi_r_left(&r) != n)
    return dcpi_fail(err, DCP_ECORRUPT, "malformed layout plan from rank 0 (%zu bytes items here)",
                     n);
  if (n && !(*writes = malloc(n)))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for the bytes items' plan");
  for (size_t i = 0; i < n; i++) (*writes)[i] = msg[r.pos + i] == 1;
  return DCP_OK;
}

dcp_status dcpi_lbytes_take(dcpi_lbytes *b, dcpi_md *md, int32_t rank, uint64_t index,
                            const dcp_storage_ref *ref, dcpi_err *err) {
  size_t at = first_of(b, rank) + (size_t)(index < b->n ? index : b->n);
  dcpi_lbytes_item *x = at < b->n ? &b->items[at] : NULL;
  if (!x || x->rank != rank || x->index != index || !x->writes || x->seen ||
      ref->raw_length != x->length)
    return dcpi_fail(err, DCP_ECORRUPT, "rank %d reported an unknown or repeated bytes item",
                     rank);
  x->seen = 1;
  return dcpi_md_add_bytes(md, x->key, (dcp_scope)x->scope,
                           x->scope == DCP_SCOPE_PER_RANK ? rank : -1, ref, err);
}

dcp_status dcpi_lbytes_complete(const dcpi_lbytes *b, dcpi_err *err) {
  for (size_t i = 0; i < b->n; i++)
    if (b->items[i].writes && !b->items[i].seen)
      return dcpi_fail(err, DCP_EINCOMPLETE,
                       "bytes '%s' of rank %d was not written (this save is not committed)",
                       b->items[i].key, b->items[i].rank);
  return DCP_OK;
}

void dcpi_lbytes_free(dcpi_lbytes *b) {
  for (size_t i = 0; i < b->n; i++) free(b->items[i].key);
  free(b->items);
  *b = (dcpi_lbytes){0};
}
