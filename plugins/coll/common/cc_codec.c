/* cc_codec.c — rendezvous records and handshake payloads (cc_codec.h). */
#include "cc_codec.h"

#include <string.h>
#include <xxhash.h>

#include "dcp_plugin.h"

void dcpi_cc_put64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

void dcpi_cc_put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t dcpi_cc_get64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint32_t dcpi_cc_get32(const unsigned char *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint64_t dcpi_cc_hash(const void *p, size_t len) {
  return len ? XXH3_64bits(p, len) : XXH3_64bits("", 0);
}

void dcpi_cc_trailer_make(unsigned char *tr, uint32_t op, const void *payload, size_t len) {
  dcpi_cc_put64(tr, (uint64_t)len);
  dcpi_cc_put64(tr + 8, dcpi_cc_hash(payload, len));
  dcpi_cc_put32(tr + 16, op);
  dcpi_cc_put32(tr + 20, 0);
  memcpy(tr + 24, DCPI_CC_MAGIC, 8);
}

int dcpi_cc_trailer_parse(const unsigned char *tr, uint64_t size, const char *path,
                          dcpi_cc_trailer *out, dcp_plugin_err *err) {
  if (!tr || size < DCPI_CC_TRAILER_SIZE) return 0;
  if (memcmp(tr + 24, DCPI_CC_MAGIC, 8) != 0) return 0;
  out->plen = dcpi_cc_get64(tr);
  out->hash = dcpi_cc_get64(tr + 8);
  out->op = dcpi_cc_get32(tr + 16);
  if (out->plen != size - DCPI_CC_TRAILER_SIZE)
    return dcp_plugin_fail(err, DCP_ECORRUPT, "%s: trailer says %llu payload bytes, file has %llu",
                           path, (unsigned long long)out->plen,
                           (unsigned long long)(size - DCPI_CC_TRAILER_SIZE));
  return 1;
}

size_t dcpi_cc_session_record(int32_t world) {
  if (world < 1 || world > DCPI_CC_WORLD_MAX) return 0;
  return DCPI_CC_SESSION_HEAD + 8 * (size_t)world + DCPI_CC_TRAILER_SIZE;
}

void dcpi_cc_hello_encode(unsigned char *out, uint64_t nonce, int32_t world) {
  dcpi_cc_put64(out, nonce);
  dcpi_cc_put32(out + 8, (uint32_t)world);
  dcpi_cc_trailer_make(out + DCPI_CC_HELLO_SIZE, DCPI_CC_OP_HELLO, out, DCPI_CC_HELLO_SIZE);
}

void dcpi_cc_session_encode(unsigned char *out, uint64_t session, int32_t world,
                            const uint64_t *nonces) {
  size_t plen = DCPI_CC_SESSION_HEAD + 8 * (size_t)world;
  dcpi_cc_put64(out, session);
  dcpi_cc_put32(out + 8, (uint32_t)world);
  for (int32_t r = 0; r < world; r++)
    dcpi_cc_put64(out + DCPI_CC_SESSION_HEAD + 8 * (size_t)r, r ? nonces[r] : 0);
  dcpi_cc_trailer_make(out + plen, DCPI_CC_OP_SESSION, out, plen);
}

/* The trailer of a record of op: 1 with *t set, 0 when there is no valid
 * record of that op, or DCP_ECORRUPT. */
static int record_of(const unsigned char *rec, size_t len, uint32_t op, const char *path,
                     dcpi_cc_trailer *t, dcp_plugin_err *err) {
  const unsigned char *tr = len >= DCPI_CC_TRAILER_SIZE ? rec + len - DCPI_CC_TRAILER_SIZE : NULL;
  int rc = dcpi_cc_trailer_parse(tr, len, path, t, err);
  return rc == 1 && t->op != op ? 0 : rc;
}

/* DCP_OK when the payload matches the trailer's checksum. */
static int verify(const unsigned char *rec, const dcpi_cc_trailer *t, const char *path,
                  dcp_plugin_err *err) {
  if (dcpi_cc_hash(rec, (size_t)t->plen) != t->hash)
    return dcp_plugin_fail(err, DCP_ECORRUPT, "%s: payload checksum mismatch", path);
  return DCP_OK;
}

int dcpi_cc_hello_decode(const unsigned char *rec, size_t len, int32_t world, const char *path,
                         uint64_t *nonce, uint32_t *other_world, dcp_plugin_err *err) {
  dcpi_cc_trailer t;
  int rc = record_of(rec, len, DCPI_CC_OP_HELLO, path, &t, err);
  if (rc != 1 || t.plen != DCPI_CC_HELLO_SIZE) return rc < 0 ? rc : DCPI_CC_NOT_OURS;
  if ((rc = verify(rec, &t, path, err))) return rc;
  uint32_t w = dcpi_cc_get32(rec + 8);
  uint64_t n = dcpi_cc_get64(rec);
  if (w != (uint32_t)world || n == 0) {
    if (w != (uint32_t)world && other_world) *other_world = w;
    return DCPI_CC_NOT_OURS;
  }
  *nonce = n;
  return DCPI_CC_OURS;
}

int dcpi_cc_session_decode(const unsigned char *rec, size_t len, int32_t world, int32_t rank,
                           uint64_t nonce, const char *path, uint64_t *session,
                           uint32_t *other_world, dcp_plugin_err *err) {
  dcpi_cc_trailer t;
  size_t want = dcpi_cc_session_record(world);
  if (!want || rank < 0 || rank >= world) return DCPI_CC_NOT_OURS;
  int rc = record_of(rec, len, DCPI_CC_OP_SESSION, path, &t, err);
  if (rc != 1) return rc < 0 ? rc : DCPI_CC_NOT_OURS;
  if (t.plen != want - DCPI_CC_TRAILER_SIZE) { /* another world's (unverified, for a message) */
    if (t.plen >= DCPI_CC_SESSION_HEAD && other_world) *other_world = dcpi_cc_get32(rec + 8);
    return DCPI_CC_NOT_OURS;
  }
  if ((rc = verify(rec, &t, path, err))) return rc;
  uint32_t w = dcpi_cc_get32(rec + 8);
  if (w != (uint32_t)world) {
    if (other_world) *other_world = w;
    return DCPI_CC_NOT_OURS;
  }
  if (dcpi_cc_get64(rec + DCPI_CC_SESSION_HEAD + 8 * (size_t)rank) != nonce) return DCPI_CC_NOT_OURS;
  *session = dcpi_cc_get64(rec);
  return DCPI_CC_OURS;
}
