/* plan_codec.c — canonical byte encoding of a finished local plan (for the
 * plan gather, and the input of the plan key), and its bounds-checked
 * decoder.
 *
 * Layout (varints are LEB128, zz = zigzag varint, see metadata/wire.h):
 *   "DCPLPLAN" u32le version=1
 *   varint rank, world_size, policy, flags, block_size
 *   varint ntensors, then per tensor (fqn order):
 *     varint len, len name bytes, varint dtype word (the dtype, | 0x100
 *     for a layout tensor: dcpi_local_plan_mark_layout), varint ndim,
 *     ndim varint extents, varint nchunks,
 *     per chunk (canonical order): ndim zz offsets, ndim zz sizes
 *   varint nbytes, then per bytes item (key order):
 *     varint len, len key bytes, varint scope, varint length
 *   u64le XXH3-64 of every byte before it
 * Every field is length-prefixed or fixed by an earlier field, so the
 * encoding is unambiguous; varints have one encoding each, so it is
 * canonical. Boxes are zigzag because a plan records them unvalidated. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/wire.h"
#include "planner/local_plan_int.h"

#define PLAN_MAGIC "DCPLPLAN"
#define PLAN_VERSION 1u
#define HEADER_LEN 12 /* magic + version */
#define TRAILER_LEN 8 /* checksum */
#define LAYOUT_BIT 0x100u /* in a tensor's dtype word */

static void encode_tensors(const dcpi_local_plan *lp, dcpi_wbuf *w) {
  dcpi_w_varint(w, lp->ntensors);
  for (size_t i = 0; i < lp->ntensors; i++) {
    const dcpi_lp_tensor *t = &lp->tensors[i];
    dcpi_w_varint(w, t->name_len);
    dcpi_w_bytes(w, lp->names + t->name_at, t->name_len);
    dcpi_w_varint(w, t->dtype | (t->layout ? LAYOUT_BIT : 0));
    dcpi_w_varint(w, t->ndim);
    for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, (uint64_t)lp->pool[t->shape_at + d]);
    dcpi_w_varint(w, t->nchunks);
    const int64_t *box = lp->pool + t->boxes_at;
    for (size_t k = 0; k < (size_t)t->nchunks * 2 * t->ndim; k++) dcpi_w_zigzag(w, box[k]);
  }
}

static void encode_bytes(const dcpi_local_plan *lp, dcpi_wbuf *w) {
  dcpi_w_varint(w, lp->nbytes);
  for (size_t i = 0; i < lp->nbytes; i++) {
    const dcpi_lp_bytes *b = &lp->bytes[i];
    dcpi_w_varint(w, b->name_len);
    dcpi_w_bytes(w, lp->names + b->name_at, b->name_len);
    dcpi_w_varint(w, b->scope);
    dcpi_w_varint(w, (uint64_t)b->length);
  }
}

dcp_status dcpi_local_plan_encode(const dcpi_local_plan *lp, uint8_t **data, size_t *len,
                                  dcpi_err *err) {
  if (!lp || !data || !len) return dcpi_fail(err, DCP_EINVAL, "plan encode: NULL argument");
  if (!lp->finished) return dcpi_fail(err, DCP_EINVAL, "plan encode: plan is not finished");
  dcpi_wbuf w = {0};
  dcpi_w_bytes(&w, PLAN_MAGIC, 8);
  dcpi_w_u32(&w, PLAN_VERSION);
  dcpi_w_varint(&w, (uint64_t)lp->rank);
  dcpi_w_varint(&w, (uint64_t)lp->world_size);
  dcpi_w_varint(&w, (uint64_t)lp->opts.policy);
  dcpi_w_varint(&w, lp->opts.flags);
  dcpi_w_varint(&w, lp->opts.block_size);
  encode_tensors(lp, &w);
  encode_bytes(lp, &w);
  if (!w.status) dcpi_w_u64(&w, XXH3_64bits(w.data, w.len));
  if (w.status) {
    dcpi_wbuf_free(&w);
    return dcpi_fail(err, DCP_ENOMEM, "plan encode: out of memory");
  }
  *data = w.data;
  *len = w.len;
  return DCP_OK;
}

/* ---- decoding ---------------------------------------------------------- */

typedef struct decoder {
  dcpi_rbuf r;
  dcpi_local_plan *lp;
  dcpi_err *err;
  char name[DCP_MAX_NAME + 1];
} decoder;

static dcp_status corrupt(decoder *d, const char *what) {
  return dcpi_fail(d->err, DCP_ECORRUPT, "plan decode: %s at byte %zu", what,
                   d->r.pos + HEADER_LEN);
}

/* A varint no larger than max. Enumerations are range-checked here, before
 * any conversion to their enum type. */
static dcp_status get_u(decoder *d, uint64_t max, const char *what, uint64_t *v) {
  if (!dcpi_r_varint(&d->r, v) || *v > max) return corrupt(d, what);
  return DCP_OK;
}

/* A length-prefixed name into d->name, NUL-terminated. */
static dcp_status get_name(decoder *d) {
  uint64_t n;
  dcp_status rc = get_u(d, DCP_MAX_NAME, "bad name length", &n);
  if (rc) return rc;
  if (n > dcpi_r_left(&d->r)) return corrupt(d, "truncated name");
  memcpy(d->name, d->r.p + d->r.pos, n);
  d->name[n] = '\0';
  d->r.pos += n;
  return DCP_OK;
}

/* A builder error on decoded input means the input was bad: report it as
 * DCP_ECORRUPT with the builder's reason (memory errors stay ENOMEM). */
static dcp_status rebrand(decoder *d, dcp_status rc) {
  if (!rc || rc == DCP_ENOMEM) return rc;
  if (!d->err) return DCP_ECORRUPT;
  char why[DCPI_ERR_MSG_MAX];
  memcpy(why, d->err->msg, sizeof why);
  why[sizeof why - 1] = '\0';
  return dcpi_fail(d->err, DCP_ECORRUPT, "plan decode: %s", why);
}

static dcp_status get_chunks(decoder *d, uint32_t index, uint32_t ndim) {
  uint64_t n;
  /* Each chunk takes at least 2*ndim bytes; a 0-d tensor has at most one
   * (its only box), so no count can ask for more than the input holds. */
  uint64_t max = ndim ? dcpi_r_left(&d->r) / (2 * ndim) : 1;
  dcp_status rc = get_u(d, max, "bad chunk count", &n);
  for (uint64_t k = 0; k < n && !rc; k++) {
    int64_t box[2 * DCP_MAX_NDIM];
    for (uint32_t j = 0; j < 2 * ndim; j++)
      if (!dcpi_r_zigzag(&d->r, &box[j])) return corrupt(d, "truncated box");
    rc = rebrand(d, dcpi_local_plan_add_chunk(d->lp, index, box, box + ndim, d->err));
  }
  return rc;
}

static dcp_status get_tensor(decoder *d) {
  uint64_t dtype = 0, ndim = 0;
  int64_t shape[DCP_MAX_NDIM];
  dcp_status rc = get_name(d);
  if (!rc) rc = get_u(d, LAYOUT_BIT | (DCP_DTYPE_END_ - 1), "bad dtype", &dtype);
  if (!rc && (dtype & ~LAYOUT_BIT) >= DCP_DTYPE_END_) rc = corrupt(d, "bad dtype");
  if (!rc) rc = get_u(d, DCP_MAX_NDIM, "bad ndim", &ndim);
  for (uint64_t k = 0; k < ndim && !rc; k++) {
    uint64_t e;
    rc = get_u(d, INT64_MAX, "bad extent", &e);
    shape[k] = (int64_t)e;
  }
  uint32_t index;
  if (!rc)
    rc = rebrand(d, dcpi_local_plan_add_tensor(d->lp, d->name, (dcp_dtype)(dtype & ~LAYOUT_BIT),
                                               (uint32_t)ndim, shape, &index, d->err));
  if (!rc && (dtype & LAYOUT_BIT))
    rc = rebrand(d, dcpi_local_plan_mark_layout(d->lp, index, d->err));
  return rc ? rc : get_chunks(d, index, (uint32_t)ndim);
}

static dcp_status get_bytes_item(decoder *d) {
  uint64_t scope, length;
  dcp_status rc = get_name(d);
  if (!rc) rc = get_u(d, DCP_SCOPE_PER_RANK, "bad scope", &scope);
  if (!rc) rc = get_u(d, INT64_MAX, "bad bytes length", &length);
  if (!rc)
    rc = rebrand(d, dcpi_local_plan_add_bytes(d->lp, d->name, (dcp_scope)scope,
                                              (int64_t)length, d->err));
  return rc;
}

/* Header fields and the plan they create. */
static dcp_status get_header(decoder *d) {
  uint64_t rank, world, policy, flags, block;
  dcp_status rc = get_u(d, INT32_MAX, "bad rank", &rank);
  if (!rc) rc = get_u(d, INT32_MAX, "bad world size", &world);
  if (!rc) rc = get_u(d, DCPI_BALANCE_LOWEST_RANK, "bad policy", &policy);
  if (!rc) rc = get_u(d, UINT32_MAX, "bad flags", &flags);
  if (!rc) rc = get_u(d, UINT32_MAX, "bad block size", &block);
  if (rc) return rc;
  dcpi_save_opts o = {.policy = (dcpi_balance_policy)policy, .flags = (uint32_t)flags,
                      .block_size = (uint32_t)block};
  return rebrand(d, dcpi_local_plan_create((int32_t)rank, (int32_t)world, &o, &d->lp, d->err));
}

static dcp_status get_body(decoder *d) {
  uint64_t n = 0;
  dcp_status rc = get_header(d);
  if (!rc) rc = get_u(d, dcpi_r_left(&d->r), "bad tensor count", &n);
  for (uint64_t i = 0; i < n && !rc; i++) rc = get_tensor(d);
  if (!rc) rc = get_u(d, dcpi_r_left(&d->r), "bad bytes count", &n);
  for (uint64_t i = 0; i < n && !rc; i++) rc = get_bytes_item(d);
  if (!rc && dcpi_r_left(&d->r)) rc = corrupt(d, "trailing bytes");
  if (!rc) rc = rebrand(d, dcpi_local_plan_finish(d->lp, d->err));
  return rc;
}

/* The decoded plan must re-encode to the very same bytes: this rejects
 * any non-canonical order or duplicate without a separate check. */
static dcp_status check_canonical(decoder *d, const uint8_t *data, size_t len) {
  uint8_t *again;
  size_t n;
  dcp_status rc = dcpi_local_plan_encode(d->lp, &again, &n, d->err);
  if (rc) return rc;
  bool same = n == len && memcmp(again, data, len) == 0;
  free(again);
  return same ? DCP_OK
              : dcpi_fail(d->err, DCP_ECORRUPT, "plan decode: encoding is not canonical");
}

static dcp_status check_frame(const uint8_t *p, size_t len, dcpi_err *err) {
  if (len < HEADER_LEN + TRAILER_LEN)
    return dcpi_fail(err, DCP_ECORRUPT, "plan decode: %zu bytes is too short", len);
  if (memcmp(p, PLAN_MAGIC, 8))
    return dcpi_fail(err, DCP_ECORRUPT, "plan decode: bad magic");
  uint32_t v = dcpi_get_u32(p + 8);
  if (v > PLAN_VERSION)
    return dcpi_fail(err, DCP_EVERSION, "plan decode: version %u is newer than %u", v,
                     PLAN_VERSION);
  if (v != PLAN_VERSION) return dcpi_fail(err, DCP_ECORRUPT, "plan decode: bad version %u", v);
  if (dcpi_get_u64(p + len - TRAILER_LEN) != XXH3_64bits(p, len - TRAILER_LEN))
    return dcpi_fail(err, DCP_ECORRUPT, "plan decode: checksum mismatch");
  return DCP_OK;
}

dcp_status dcpi_local_plan_decode(const void *data, size_t len, dcpi_local_plan **out,
                                  dcpi_err *err) {
  if (!out || (!data && len)) return dcpi_fail(err, DCP_EINVAL, "plan decode: NULL argument");
  *out = NULL;
  const uint8_t *p = data;
  dcp_status rc = check_frame(p, len, err);
  if (rc) return rc;
  decoder *d = malloc(sizeof *d); /* the name buffer is too big for the stack */
  if (!d) return dcpi_fail(err, DCP_ENOMEM, "plan decode: out of memory");
  d->r = (dcpi_rbuf){.p = p + HEADER_LEN, .len = len - HEADER_LEN - TRAILER_LEN};
  d->lp = NULL;
  d->err = err;
  rc = get_body(d);
  if (!rc) rc = check_canonical(d, p, len);
  if (rc) dcpi_local_plan_free(d->lp);
  else *out = d->lp;
  free(d);
  return rc;
}
