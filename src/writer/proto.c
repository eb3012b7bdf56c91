/* proto.c — encoding and bounds-checked decoding of the writer protocol's
 * payloads and frame headers (see proto.h). */
#include "writer/proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/wire.h"
#include "model/layout.h"

/* ---- encoding ----------------------------------------------------------- */

static void w_str(dcpi_wbuf *w, const char *s) {
  if (!s) {
    dcpi_w_varint(w, 0);
    return;
  }
  size_t n = strlen(s);
  dcpi_w_varint(w, (uint64_t)n + 1); /* 0 encodes NULL */
  dcpi_w_bytes(w, s, n);
}

static void w_coord(dcpi_wbuf *w, const dcpi_wp_coord *c) {
  w_str(w, c->coll);
  w_str(w, c->coll_options);
  w_str(w, c->rendezvous);
  dcpi_w_zigzag(w, c->rank);
  dcpi_w_zigzag(w, c->world_size);
  dcpi_w_zigzag(w, c->timeout_ms);
  dcpi_w_zigzag(w, c->lease_ms);
  w_str(w, c->storage);
  w_str(w, c->storage_options);
  w_str(w, c->plugin_path);
}

static void w_box(dcpi_wbuf *w, const dcp_box *b) {
  dcpi_w_varint(w, b->ndim);
  for (uint32_t d = 0; d < b->ndim && d < DCP_MAX_NDIM; d++) {
    dcpi_w_zigzag(w, b->offset[d]);
    dcpi_w_zigzag(w, b->size[d]);
  }
}

/* A layout: 0, or 1 (sharded) / 2 (flat-sharded) then mesh shape, ranks
 * and the tensor map, and for 2 the flat dims. */
static void w_layout(dcpi_wbuf *w, const dcpi_wp_tensor *t) {
  const dcp_layout *l = t->layout;
  dcpi_w_varint(w, !l ? 0 : t->flat ? 2 : 1);
  if (!l) return;
  dcpi_w_varint(w, l->mesh_ndim);
  for (uint32_t m = 0; m < l->mesh_ndim; m++) dcpi_w_zigzag(w, l->mesh_shape[m]);
  for (int64_t r = 0; r < l->nranks; r++) dcpi_w_zigzag(w, l->ranks[r]);
  dcpi_w_varint(w, l->tensor_ndim);
  for (uint32_t d = 0; d < l->tensor_ndim; d++) dcpi_w_varint(w, l->tensor_map[d]);
  if (t->flat) dcpi_w_varint(w, t->flat_dims);
}

static void w_items(dcpi_wbuf *w, const dcpi_wp_job *j) {
  dcpi_w_varint(w, j->ntensors);
  for (size_t i = 0; i < j->ntensors; i++) {
    const dcpi_wp_tensor *t = &j->tensors[i];
    w_str(w, t->fqn);
    dcpi_w_varint(w, t->dtype);
    dcpi_w_varint(w, t->ndim);
    for (uint32_t d = 0; d < t->ndim && d < DCP_MAX_NDIM; d++) dcpi_w_zigzag(w, t->shape[d]);
    w_layout(w, t);
  }
  dcpi_w_varint(w, j->nchunks);
  for (size_t i = 0; i < j->nchunks; i++) {
    dcpi_w_varint(w, j->chunks[i].tensor);
    w_box(w, &j->chunks[i].box);
    dcpi_w_varint(w, j->chunks[i].offset);
    dcpi_w_varint(w, j->chunks[i].nbytes);
  }
  dcpi_w_varint(w, j->nbytes);
  for (size_t i = 0; i < j->nbytes; i++) {
    w_str(w, j->bytes[i].key);
    dcpi_w_varint(w, j->bytes[i].scope);
    dcpi_w_varint(w, j->bytes[i].offset);
    dcpi_w_varint(w, j->bytes[i].len);
  }
}

dcp_status dcpi_wp_job_encode(const dcpi_wp_job *j, uint8_t **out, size_t *len) {
  dcpi_wbuf w = {0};
  dcpi_w_varint(&w, j->seq);
  w_str(&w, j->path);
  w_str(&w, j->cwd);
  dcpi_w_varint(&w, j->flags);
  dcpi_w_varint(&w, j->block_size);
  dcpi_w_varint(&w, j->policy);
  dcpi_w_zigzag(&w, j->zstd_level);
  dcpi_w_varint(&w, j->save_id);
  dcpi_w_varint(&w, j->has_base);
  dcpi_w_varint(&w, j->base_committed);
  dcpi_w_varint(&w, j->base_len);
  dcpi_w_varint(&w, j->base_head);
  dcpi_w_varint(&w, j->base_rank_seq);
  dcpi_w_varint(&w, j->base_parts_hash);
  dcpi_w_varint(&w, j->nkv);
  for (size_t i = 0; i < j->nkv; i++) {
    w_str(&w, j->kv_keys[i]);
    w_str(&w, j->kv_values[i]);
  }
  w_coord(&w, &j->coord);
  dcpi_w_varint(&w, j->pool_size);
  w_items(&w, j);
  dcpi_w_zigzag(&w, j->refused); /* last: dcpi_wp_job_refuse rewrites it */
  w_str(&w, j->refused_msg);
  if (w.status) {
    dcp_status rc = w.status; /* the free clears it */
    dcpi_wbuf_free(&w);
    return rc;
  }
  *out = w.data;
  *len = w.len;
  return DCP_OK;
}

/* ---- decoding ----------------------------------------------------------- */

typedef struct rd {
  dcpi_rbuf r;
  dcpi_err *err;
  dcp_status st;
} rd;

static bool bad(rd *d, const char *what) {
  if (!d->st) d->st = dcpi_fail(d->err, DCP_ECORRUPT, "writer protocol: bad %s", what);
  return false;
}

static bool r_u64(rd *d, uint64_t *v, const char *what) {
  return d->st ? false : (dcpi_r_varint(&d->r, v) ? true : bad(d, what));
}

static bool r_u32(rd *d, uint32_t *v, const char *what) {
  uint64_t x;
  if (!r_u64(d, &x, what)) return false;
  if (x > UINT32_MAX) return bad(d, what);
  *v = (uint32_t)x;
  return true;
}

static bool r_i64(rd *d, int64_t *v, const char *what) {
  return d->st ? false : (dcpi_r_zigzag(&d->r, v) ? true : bad(d, what));
}

static bool r_i32(rd *d, int32_t *v, const char *what) {
  int64_t x;
  if (!r_i64(d, &x, what)) return false;
  if (x < INT32_MIN || x > INT32_MAX) return bad(d, what);
  *v = (int32_t)x;
  return true;
}

/* A count of items of at least min_size encoded bytes each. */
static bool r_count(rd *d, size_t *n, size_t min_size, const char *what) {
  uint64_t x;
  if (!r_u64(d, &x, what)) return false;
  if (x > dcpi_r_left(&d->r) / min_size) return bad(d, what);
  *n = (size_t)x;
  return true;
}

static bool r_str(rd *d, char **s, const char *what) {
  uint64_t n;
  *s = NULL;
  if (!r_u64(d, &n, what)) return false;
  if (n == 0) return true;
  if (n - 1 > dcpi_r_left(&d->r)) return bad(d, what);
  size_t len = (size_t)(n - 1);
  const uint8_t *p = d->r.p + d->r.pos;
  if (memchr(p, 0, len)) return bad(d, what);
  if (!(*s = malloc(len + 1))) {
    d->st = dcpi_fail(d->err, DCP_ENOMEM, "out of memory");
    return false;
  }
  memcpy(*s, p, len);
  (*s)[len] = '\0';
  d->r.pos += len;
  return true;
}

static bool r_coord(rd *d, dcpi_wp_coord *c) {
  return r_str(d, &c->coll, "coll") && r_str(d, &c->coll_options, "coll options") &&
         r_str(d, &c->rendezvous, "rendezvous") && r_i32(d, &c->rank, "rank") &&
         r_i32(d, &c->world_size, "world size") && r_i64(d, &c->timeout_ms, "timeout") &&
         r_i64(d, &c->lease_ms, "lease") &&
         r_str(d, &c->storage, "storage") && r_str(d, &c->storage_options, "storage options") &&
         r_str(d, &c->plugin_path, "plugin path");
}

static bool r_ndim(rd *d, uint32_t *ndim, const char *what) {
  return r_u32(d, ndim, what) && (*ndim <= DCP_MAX_NDIM || bad(d, what));
}

static bool r_alloc(rd *d, void **p, size_t n, size_t size) {
  if (n == 0) return true;
  if (!(*p = calloc(n, size))) {
    d->st = dcpi_fail(d->err, DCP_ENOMEM, "out of memory");
    return false;
  }
  return true;
}

/* A layout as w_layout wrote it, validated by the layout builder. The
 * rank count is bounded by the bytes left before anything is allocated. */
static bool r_layout(rd *d, dcpi_wp_tensor *t) {
  uint64_t has;
  uint32_t mesh_ndim, tensor_ndim, map[DCP_MAX_NDIM];
  int64_t shape[DCP_MAX_MESH_NDIM];
  if (!r_u64(d, &has, "layout flag")) return false;
  if (has == 0) return true;
  if ((has != 1 && has != 2) || !r_u32(d, &mesh_ndim, "mesh ndim")) return bad(d, "layout flag");
  if (mesh_ndim == 0 || mesh_ndim > DCP_MAX_MESH_NDIM) return bad(d, "mesh ndim");
  uint64_t nranks = 1;
  for (uint32_t m = 0; m < mesh_ndim; m++) {
    if (!r_i64(d, &shape[m], "mesh shape")) return false;
    if (shape[m] < 1 || (uint64_t)shape[m] > dcpi_r_left(&d->r) / nranks)
      return bad(d, "mesh shape");
    nranks *= (uint64_t)shape[m];
  }
  int32_t *ranks = NULL;
  if (!r_alloc(d, (void **)&ranks, (size_t)nranks, sizeof *ranks)) return false;
  bool ok = true;
  for (uint64_t r = 0; ok && r < nranks; r++) ok = r_i32(d, &ranks[r], "mesh rank");
  ok = ok && r_ndim(d, &tensor_ndim, "layout ndim");
  for (uint32_t k = 0; ok && k < tensor_ndim; k++) ok = r_u32(d, &map[k], "tensor map");
  t->flat = has == 2;
  if (ok && t->flat) ok = r_u32(d, &t->flat_dims, "flat dims");
  if (ok && tensor_ndim != t->ndim) ok = bad(d, "layout ndim");
  dcpi_err why;
  if (ok && dcpi_layout_create(mesh_ndim, shape, ranks, tensor_ndim, map, &t->layout, &why)) {
    d->st = dcpi_fail(d->err, DCP_ECORRUPT, "writer protocol: bad layout of '%.200s': %.200s",
                      t->fqn, why.msg);
    ok = false;
  }
  free(ranks);
  return ok;
}

static bool r_tensor(rd *d, dcpi_wp_tensor *t) {
  if (!r_str(d, &t->fqn, "fqn") || !t->fqn) return bad(d, "fqn");
  if (!r_u32(d, &t->dtype, "dtype") || !r_ndim(d, &t->ndim, "tensor ndim")) return false;
  for (uint32_t k = 0; k < t->ndim; k++)
    if (!r_i64(d, &t->shape[k], "shape")) return false;
  return r_layout(d, t);
}

/* A [offset, offset+len) range that lies inside the pool. */
static bool r_range(rd *d, uint64_t pool, uint64_t *off, uint64_t *len, const char *what) {
  if (!r_u64(d, off, what) || !r_u64(d, len, what)) return false;
  if (*off > pool || *len > pool - *off) return bad(d, what);
  return true;
}

static bool r_chunk(rd *d, const dcpi_wp_job *j, dcpi_wp_chunk *c) {
  if (!r_u32(d, &c->tensor, "chunk tensor")) return false;
  if (c->tensor >= j->ntensors) return bad(d, "chunk tensor");
  if (!r_ndim(d, &c->box.ndim, "chunk ndim")) return false;
  for (uint32_t k = 0; k < c->box.ndim; k++)
    if (!r_i64(d, &c->box.offset[k], "box") || !r_i64(d, &c->box.size[k], "box")) return false;
  return r_range(d, j->pool_size, &c->offset, &c->nbytes, "chunk range");
}

static bool r_bytes(rd *d, const dcpi_wp_job *j, dcpi_wp_bytes *b) {
  if (!r_str(d, &b->key, "key") || !b->key) return bad(d, "key");
  return r_u32(d, &b->scope, "scope") &&
         r_range(d, j->pool_size, &b->offset, &b->len, "bytes range");
}

static bool r_items(rd *d, dcpi_wp_job *j) {
  if (!r_count(d, &j->ntensors, 3, "tensor count") ||
      !r_alloc(d, (void **)&j->tensors, j->ntensors, sizeof *j->tensors))
    return false;
  for (size_t i = 0; i < j->ntensors; i++)
    if (!r_tensor(d, &j->tensors[i])) return false;
  if (!r_count(d, &j->nchunks, 4, "chunk count") ||
      !r_alloc(d, (void **)&j->chunks, j->nchunks, sizeof *j->chunks))
    return false;
  for (size_t i = 0; i < j->nchunks; i++)
    if (!r_chunk(d, j, &j->chunks[i])) return false;
  if (!r_count(d, &j->nbytes, 4, "bytes count") ||
      !r_alloc(d, (void **)&j->bytes, j->nbytes, sizeof *j->bytes))
    return false;
  for (size_t i = 0; i < j->nbytes; i++)
    if (!r_bytes(d, j, &j->bytes[i])) return false;
  return true;
}

static bool r_kv(rd *d, dcpi_wp_job *j) {
  if (!r_count(d, &j->nkv, 2, "kv count") ||
      !r_alloc(d, (void **)&j->kv_keys, j->nkv, sizeof(char *)) ||
      !r_alloc(d, (void **)&j->kv_values, j->nkv, sizeof(char *)))
    return false;
  for (size_t i = 0; i < j->nkv; i++)
    if (!r_str(d, &j->kv_keys[i], "kv key") || !r_str(d, &j->kv_values[i], "kv value") ||
        !j->kv_keys[i] || !j->kv_values[i])
      return bad(d, "kv");
  return true;
}

dcp_status dcpi_wp_job_decode(const uint8_t *p, size_t len, dcpi_wp_job *j, dcpi_err *err) {
  memset(j, 0, sizeof *j);
  rd d = {{p, len, 0}, err, DCP_OK};
  bool ok = r_u64(&d, &j->seq, "seq") && r_str(&d, &j->path, "path") && j->path &&
            r_str(&d, &j->cwd, "cwd") &&
            r_u32(&d, &j->flags, "flags") && r_u32(&d, &j->block_size, "block size") &&
            r_u32(&d, &j->policy, "policy") && r_i32(&d, &j->zstd_level, "zstd level") &&
            r_u64(&d, &j->save_id, "save id") && r_u32(&d, &j->has_base, "base") &&
            r_u32(&d, &j->base_committed, "base") && r_u64(&d, &j->base_len, "base") &&
            r_u64(&d, &j->base_head, "base") && r_u64(&d, &j->base_rank_seq, "base") &&
            r_u64(&d, &j->base_parts_hash, "base") &&
            r_kv(&d, j) && r_coord(&d, &j->coord) && r_u64(&d, &j->pool_size, "pool size") &&
            r_items(&d, j) && r_i32(&d, &j->refused, "refusal") &&
            r_str(&d, &j->refused_msg, "refusal");
  if (ok && !j->path) ok = bad(&d, "path");
  if (ok && dcpi_r_left(&d.r) != 0) ok = bad(&d, "trailing bytes");
  if (!ok && !d.st) bad(&d, "path");
  return d.st;
}

/* ---- OPEN ------------------------------------------------------------- */

dcp_status dcpi_wp_open_encode(const dcpi_wp_coord *c, uint8_t **out, size_t *len) {
  dcpi_wbuf w = {0};
  w_coord(&w, c);
  if (w.status) {
    dcp_status rc = w.status;
    dcpi_wbuf_free(&w);
    return rc;
  }
  *out = w.data;
  *len = w.len;
  return DCP_OK;
}

dcp_status dcpi_wp_open_decode(const uint8_t *p, size_t len, dcpi_wp_coord *c, dcpi_err *err) {
  memset(c, 0, sizeof *c);
  rd d = {{p, len, 0}, err, DCP_OK};
  bool ok = r_coord(&d, c);
  if (ok && dcpi_r_left(&d.r) != 0) ok = bad(&d, "trailing bytes after OPEN");
  if (!ok && !d.st) bad(&d, "OPEN");
  return d.st;
}

void dcpi_wp_coord_free(dcpi_wp_coord *c) {
  free(c->coll), free(c->coll_options), free(c->rendezvous);
  free(c->storage), free(c->storage_options), free(c->plugin_path);
  memset(c, 0, sizeof *c);
}

dcp_status dcpi_wp_job_refuse(uint8_t **p, size_t *len, dcp_status code, const char *msg) {
  /* a job not refused ends with zigzag(0) and an absent string: 0, 0 */
  if (!code || *len < 2 || (*p)[*len - 2] != 0 || (*p)[*len - 1] != 0) return DCP_EINVAL;
  dcpi_wbuf w = {0};
  dcpi_w_bytes(&w, *p, *len - 2);
  dcpi_w_zigzag(&w, code);
  w_str(&w, msg ? msg : "");
  if (w.status) {
    dcpi_wbuf_free(&w);
    return DCP_ENOMEM;
  }
  free(*p);
  *p = w.data;
  *len = w.len;
  return DCP_OK;
}

void dcpi_wp_job_free(dcpi_wp_job *j) {
  if (!j) return;
  free(j->refused_msg);
  free(j->path);
  free(j->cwd);
  for (size_t i = 0; i < j->nkv; i++) {
    if (j->kv_keys) free(j->kv_keys[i]);
    if (j->kv_values) free(j->kv_values[i]);
  }
  free(j->kv_keys);
  free(j->kv_values);
  dcpi_wp_coord_free(&j->coord);
  for (size_t i = 0; i < j->ntensors; i++) {
    free(j->tensors[i].fqn);
    dcp_layout_free(j->tensors[i].layout);
  }
  for (size_t i = 0; i < j->nbytes; i++) free(j->bytes[i].key);
  free(j->tensors), free(j->chunks), free(j->bytes);
  memset(j, 0, sizeof *j);
}

/* ---- DONE ------------------------------------------------------------- */

/* The statistics a DONE carries, in wire order. Times travel as the bit
 * patterns of their doubles. */
#define STATS_U64(X)                                                              \
  X(bytes_written) X(write_ops) X(bytes_read) X(read_ops) X(sync_ops) X(meta_ops) \
  X(coll_bytes) X(coll_ops) X(items_written) X(data_bytes) X(plan_coll_bytes)
#define STATS_F64(X) X(plan_s) X(write_s) X(commit_s) X(total_s)

static uint64_t f64_bits(double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

static double bits_f64(uint64_t u) {
  double v;
  memcpy(&v, &u, sizeof v);
  return v;
}

dcp_status dcpi_wp_done_encode(uint64_t seq, dcp_status st, const char *msg,
                               const dcp_stats *stats, uint8_t **out, size_t *len) {
  dcpi_wbuf w = {0};
  dcp_stats none = {0};
  if (!stats) stats = &none;
  dcpi_w_varint(&w, seq);
  dcpi_w_zigzag(&w, st);
  w_str(&w, msg ? msg : "");
#define PUT_U64(f) dcpi_w_varint(&w, stats->f);
#define PUT_F64(f) dcpi_w_u64(&w, f64_bits(stats->f));
  STATS_U64(PUT_U64)
  STATS_F64(PUT_F64)
  dcpi_w_varint(&w, stats->plan_cache_hit);
  dcpi_w_varint(&w, stats->save_plan_path);
  if (w.status) {
    dcp_status rc = w.status;
    dcpi_wbuf_free(&w);
    return rc;
  }
  *out = w.data;
  *len = w.len;
  return DCP_OK;
}

dcp_status dcpi_wp_done_decode(const uint8_t *p, size_t len, uint64_t *seq, dcp_status *st,
                               char *msg, size_t msg_cap, dcp_stats *stats, dcpi_err *err) {
  rd d = {{p, len, 0}, err, DCP_OK};
  int32_t code = 0;
  char *m = NULL;
  dcp_stats got = {.struct_size = sizeof got};
  uint64_t bits, hit = 0, path = 0;
  bool ok = r_u64(&d, seq, "seq") && r_i32(&d, &code, "status") && r_str(&d, &m, "message");
#define GET_U64(f) ok = ok && r_u64(&d, &got.f, #f);
#define GET_F64(f) ok = ok && dcpi_r_u64(&d.r, &bits) && ((got.f = bits_f64(bits)), 1);
  STATS_U64(GET_U64)
  STATS_F64(GET_F64)
  ok = ok && r_u64(&d, &hit, "plan_cache_hit") && r_u64(&d, &path, "save_plan_path");
  if (ok && hit > 1) ok = bad(&d, "plan_cache_hit");
  if (ok && path > 1) ok = bad(&d, "save_plan_path");
  if (ok && (code > 0 || code < -1000)) ok = bad(&d, "status");
  if (ok && dcpi_r_left(&d.r) != 0) ok = bad(&d, "trailing bytes");
  if (!ok && d.st == DCP_OK) ok = bad(&d, "statistics");
  if (ok) {
    *st = (dcp_status)code;
    snprintf(msg, msg_cap, "%s", m ? m : "");
    got.plan_cache_hit = (uint32_t)hit;
    got.save_plan_path = (uint32_t)path;
    if (stats) *stats = got;
  }
  free(m);
  return d.st;
}

/* ---- headers ---------------------------------------------------------- */

void dcpi_wp_header(uint8_t *hdr, uint16_t type, const uint8_t *p, size_t len) {
  dcpi_put_u32(hdr, DCPI_WP_MAGIC);
  hdr[4] = (uint8_t)(DCPI_WP_VERSION & 0xff);
  hdr[5] = (uint8_t)(DCPI_WP_VERSION >> 8);
  hdr[6] = (uint8_t)(type & 0xff);
  hdr[7] = (uint8_t)(type >> 8);
  dcpi_put_u64(hdr + 8, (uint64_t)len);
  dcpi_put_u64(hdr + 16, XXH3_64bits(p, len));
}

dcp_status dcpi_wp_check_header(const uint8_t *hdr, uint16_t *type, uint64_t *len,
                                dcpi_err *err) {
  if (dcpi_get_u32(hdr) != DCPI_WP_MAGIC)
    return dcpi_fail(err, DCP_ECORRUPT, "writer protocol: bad magic");
  unsigned version = (unsigned)hdr[4] | (unsigned)hdr[5] << 8;
  if (version != DCPI_WP_VERSION)
    return dcpi_fail(err, DCP_EVERSION, "writer protocol: version %u, expected %u", version,
                     DCPI_WP_VERSION);
  *type = (uint16_t)(hdr[6] | hdr[7] << 8);
  *len = dcpi_get_u64(hdr + 8);
  if (*type < DCPI_WP_SAVE || *type > DCPI_WP_BYE)
    return dcpi_fail(err, DCP_ECORRUPT, "writer protocol: unknown message type %u", *type);
  if (*len > DCPI_WP_MAX_PAYLOAD)
    return dcpi_fail(err, DCP_ECORRUPT, "writer protocol: payload of %llu bytes",
                     (unsigned long long)*len);
  return DCP_OK;
}

dcp_status dcpi_wp_check_payload(const uint8_t *hdr, const uint8_t *p, size_t len,
                                 dcpi_err *err) {
  if (XXH3_64bits(p, len) != dcpi_get_u64(hdr + 16))
    return dcpi_fail(err, DCP_ECORRUPT, "writer protocol: payload checksum mismatch");
  return DCP_OK;
}
