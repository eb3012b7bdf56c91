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

/* ---- the TCP store's messages ------------------------------------------- */

static const char JOB_CHARS[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

static int job_ok(const unsigned char *job, size_t len) {
  if (len < 1 || len > DCPI_CC_JOB_MAX) return 0;
  for (size_t i = 0; i < len; i++)
    if (!job[i] || !memchr(JOB_CHARS, job[i], sizeof JOB_CHARS - 1)) return 0;
  return 1;
}

/* The payload's size for m, 0 when out of range. */
static size_t smsg_payload(const dcpi_cc_smsg *m) {
  size_t n;
  switch (m->op) {
    case DCPI_CC_OP_S_HELLO:
      if (!job_ok(m->job, m->job_len)) return 0;
      return 20 + m->job_len;
    case DCPI_CC_OP_S_WELCOME:
      return 24;
    case DCPI_CC_OP_S_REFUSE:
      return m->data_len <= DCPI_CC_TEXT_MAX ? 4 + m->data_len : 0;
    case DCPI_CC_OP_S_SET:
    case DCPI_CC_OP_S_GET:
      if (m->key_len < 1 || m->key_len > DCPI_CC_KEY_MAX) return 0;
      n = 12 + m->key_len;
      if (m->op == DCPI_CC_OP_S_GET) return n;
      return m->data_len <= DCPI_CC_FRAME_MAX - DCPI_CC_TRAILER_SIZE - n ? n + m->data_len : 0;
    case DCPI_CC_OP_S_VALUE:
      return m->data_len <= DCPI_CC_FRAME_MAX - DCPI_CC_TRAILER_SIZE - 4 ? 4 + m->data_len : 0;
    default:
      return 0;
  }
}

size_t dcpi_cc_smsg_encode(unsigned char *out, const dcpi_cc_smsg *m) {
  size_t plen = smsg_payload(m);
  if (!plen) return 0;
  if (!out) return plen + DCPI_CC_TRAILER_SIZE;
  unsigned char *p = out;
  switch (m->op) {
    case DCPI_CC_OP_S_HELLO:
      dcpi_cc_put64(p, m->nonce);
      dcpi_cc_put32(p + 8, m->world);
      dcpi_cc_put32(p + 12, m->rank);
      dcpi_cc_put32(p + 16, (uint32_t)m->job_len);
      memcpy(p + 20, m->job, m->job_len);
      break;
    case DCPI_CC_OP_S_WELCOME:
      dcpi_cc_put64(p, m->session);
      dcpi_cc_put32(p + 8, m->world);
      dcpi_cc_put32(p + 12, m->rank);
      dcpi_cc_put64(p + 16, m->nonce);
      break;
    case DCPI_CC_OP_S_REFUSE:
      dcpi_cc_put32(p, m->reason);
      if (m->data_len) memcpy(p + 4, m->data, m->data_len);
      break;
    case DCPI_CC_OP_S_SET:
    case DCPI_CC_OP_S_GET:
      dcpi_cc_put64(p, m->session);
      dcpi_cc_put32(p + 8, (uint32_t)m->key_len);
      memcpy(p + 12, m->key, m->key_len);
      if (m->op == DCPI_CC_OP_S_SET && m->data_len) memcpy(p + 12 + m->key_len, m->data, m->data_len);
      break;
    default: /* DCPI_CC_OP_S_VALUE */
      dcpi_cc_put32(p, m->present);
      if (m->data_len) memcpy(p + 4, m->data, m->data_len);
      break;
  }
  dcpi_cc_trailer_make(out + plen, m->op, out, plen);
  return plen + DCPI_CC_TRAILER_SIZE;
}

int dcpi_cc_smsg_decode(const unsigned char *rec, size_t len, const char *who, dcpi_cc_smsg *m,
                        dcp_plugin_err *err) {
  dcpi_cc_trailer t;
  const unsigned char *tr = len >= DCPI_CC_TRAILER_SIZE ? rec + len - DCPI_CC_TRAILER_SIZE : NULL;
  int rc = dcpi_cc_trailer_parse(tr, len, who, &t, err);
  if (rc != 1) return rc < 0 ? rc : DCPI_CC_NOT_OURS;
  if (t.op < DCPI_CC_OP_S_HELLO || t.op > DCPI_CC_OP_S_VALUE) return DCPI_CC_NOT_OURS;
  if ((rc = verify(rec, &t, who, err))) return rc;
  size_t plen = (size_t)t.plen;
  memset(m, 0, sizeof *m);
  m->op = t.op;
  switch (t.op) {
    case DCPI_CC_OP_S_HELLO:
      if (plen < 20) return DCPI_CC_NOT_OURS;
      m->nonce = dcpi_cc_get64(rec);
      m->world = dcpi_cc_get32(rec + 8);
      m->rank = dcpi_cc_get32(rec + 12);
      m->job_len = dcpi_cc_get32(rec + 16);
      m->job = rec + 20;
      if (m->job_len != plen - 20 || !job_ok(m->job, m->job_len) || m->nonce == 0)
        return DCPI_CC_NOT_OURS;
      break;
    case DCPI_CC_OP_S_WELCOME:
      if (plen != 24) return DCPI_CC_NOT_OURS;
      m->session = dcpi_cc_get64(rec);
      m->world = dcpi_cc_get32(rec + 8);
      m->rank = dcpi_cc_get32(rec + 12);
      m->nonce = dcpi_cc_get64(rec + 16);
      break;
    case DCPI_CC_OP_S_REFUSE:
      if (plen < 4 || plen - 4 > DCPI_CC_TEXT_MAX) return DCPI_CC_NOT_OURS;
      m->reason = dcpi_cc_get32(rec);
      m->data = rec + 4;
      m->data_len = plen - 4;
      break;
    case DCPI_CC_OP_S_SET:
    case DCPI_CC_OP_S_GET:
      if (plen < 12) return DCPI_CC_NOT_OURS;
      m->session = dcpi_cc_get64(rec);
      m->key_len = dcpi_cc_get32(rec + 8);
      m->key = rec + 12;
      if (m->key_len < 1 || m->key_len > DCPI_CC_KEY_MAX || m->key_len > plen - 12)
        return DCPI_CC_NOT_OURS;
      m->data = rec + 12 + m->key_len;
      m->data_len = plen - 12 - m->key_len;
      if (t.op == DCPI_CC_OP_S_GET && m->data_len) return DCPI_CC_NOT_OURS;
      break;
    default: /* DCPI_CC_OP_S_VALUE */
      if (plen < 4) return DCPI_CC_NOT_OURS;
      m->present = dcpi_cc_get32(rec);
      if (m->present > 1) return DCPI_CC_NOT_OURS;
      m->data = rec + 4;
      m->data_len = plen - 4;
      break;
  }
  return DCPI_CC_OURS;
}
