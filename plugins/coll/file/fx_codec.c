/* fx_codec.c — byte formats of the file-exchange collective (fx_codec.h). */
#include "fx_codec.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

int dcpi_fx_fail(dcp_plugin_err *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

void dcpi_fx_put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

void dcpi_fx_put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t dcpi_fx_get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint32_t dcpi_fx_get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint64_t dcpi_fx_payload_hash(const void *p, size_t len) {
  return len ? XXH3_64bits(p, len) : XXH3_64bits("", 0);
}

void dcpi_fx_trailer_make(unsigned char *tr, uint32_t op, const void *payload, size_t len) {
  dcpi_fx_put64(tr, (uint64_t)len);
  dcpi_fx_put64(tr + 8, dcpi_fx_payload_hash(payload, len));
  dcpi_fx_put32(tr + 16, op);
  dcpi_fx_put32(tr + 20, 0);
  memcpy(tr + 24, DCPI_FX_MAGIC, 8);
}

int dcpi_fx_trailer_parse(const unsigned char *tr, uint64_t size, const char *path,
                          dcpi_fx_trailer *out, dcp_plugin_err *err) {
  if (!tr || size < DCPI_FX_TRAILER_SIZE) return DCPI_FX_ABSENT;
  if (memcmp(tr + 24, DCPI_FX_MAGIC, 8) != 0) return DCPI_FX_ABSENT;
  out->plen = dcpi_fx_get64(tr);
  out->hash = dcpi_fx_get64(tr + 8);
  out->op = dcpi_fx_get32(tr + 16);
  if (out->plen != size - DCPI_FX_TRAILER_SIZE)
    return dcpi_fx_fail(err, DCP_ECORRUPT,
                   "file coll: %s: trailer says %llu payload bytes, file has %llu", path,
                   (unsigned long long)out->plen,
                   (unsigned long long)(size - DCPI_FX_TRAILER_SIZE));
  return DCPI_FX_PRESENT;
}

int dcpi_fx_accept(const dcpi_fx_trailer *t, const dcpi_fx_expect *e, dcp_plugin_err *err) {
  if (t->op != e->op)
    return e->lenient ? DCPI_FX_ABSENT
                      : dcpi_fx_fail(err, DCP_EINVAL,
                                "file coll: %s holds op %u, expected %u (ranks called different "
                                "collectives)", e->path, t->op, e->op);
  if (e->has_data && t->plen != (uint64_t)e->len)
    return e->lenient ? DCPI_FX_ABSENT
                      : dcpi_fx_fail(err, DCP_EINVAL,
                                "file coll: rank %d sent %llu bytes, expected %zu (mismatched "
                                "arguments) in %s", (int)e->from, (unsigned long long)t->plen,
                                e->len, e->path);
  return DCPI_FX_PRESENT;
}

int dcpi_fx_verify(const dcpi_fx_trailer *t, const void *p, const dcpi_fx_expect *e,
                   dcp_plugin_err *err) {
  if (dcpi_fx_payload_hash(p, (size_t)t->plen) != t->hash)
    return dcpi_fx_fail(err, DCP_ECORRUPT, "file coll: %s: payload checksum mismatch", e->path);
  return DCP_OK;
}

uint64_t dcpi_fx_hello_nonce(const unsigned char *hello, int32_t world) {
  return dcpi_fx_get32(hello + 8) == (uint32_t)world ? dcpi_fx_get64(hello) : 0;
}

int dcpi_fx_session_accepts(const unsigned char *s, int32_t world, int32_t rank, uint64_t nonce,
                            uint64_t *session) {
  if (world < 1 || rank < 0 || rank >= world) return 0;
  if (dcpi_fx_get32(s + 8) != (uint32_t)world) return 0;
  if (dcpi_fx_get64(s + DCPI_FX_SESSION_HEAD + 8 * (size_t)rank) != nonce) return 0;
  *session = dcpi_fx_get64(s);
  return 1;
}

void dcpi_fx_reduce_into(int64_t *acc, const unsigned char *v, size_t n, uint32_t op) {
  for (size_t i = 0; i < n; i++) {
    uint64_t u = dcpi_fx_get64(v + 8 * i);
    int64_t x;
    memcpy(&x, &u, sizeof x);
    if (op == DCP_REDUCE_MIN) {
      acc[i] = x < acc[i] ? x : acc[i];
    } else if (op == DCP_REDUCE_MAX) {
      acc[i] = x > acc[i] ? x : acc[i];
    } else {
      uint64_t a;
      memcpy(&a, &acc[i], sizeof a);
      a += u;
      memcpy(&acc[i], &a, sizeof a);
    }
  }
}
