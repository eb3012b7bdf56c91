/* fx_codec.c — byte formats of the file-exchange collective (fx_codec.h). */
#include "fx_codec.h"

#include <string.h>

#include "dcp_plugin.h"

int dcpi_fx_accept(const dcpi_fx_trailer *t, const dcpi_fx_expect *e, dcp_plugin_err *err) {
  if (t->op != e->op && t->op == OP_CLOSE && e->op != OP_CLOSE && !e->lenient)
    return dcp_plugin_fail(err, DCP_EPEER, "rank %d closed its collective (it is shutting "
                           "down) while this rank waits in op %u (%s)", (int)e->from, e->op,
                           e->path);
  if (t->op != e->op)
    return e->lenient ? DCPI_FX_ABSENT
                      : dcp_plugin_fail(err, DCP_EINVAL,
                                        "%s holds op %u, expected %u (ranks called "
                                        "different collectives)",
                                        e->path, t->op, e->op);
  if (e->has_data && t->plen != (uint64_t)e->len)
    return e->lenient ? DCPI_FX_ABSENT
                      : dcp_plugin_fail(err, DCP_EINVAL,
                                        "rank %d sent %llu bytes, expected %zu "
                                        "(mismatched arguments) in %s",
                                        (int)e->from, (unsigned long long)t->plen, e->len, e->path);
  return DCPI_FX_PRESENT;
}

int dcpi_fx_verify(const dcpi_fx_trailer *t, const void *p, const dcpi_fx_expect *e,
                   dcp_plugin_err *err) {
  if (dcpi_cc_hash(p, (size_t)t->plen) != t->hash)
    return dcp_plugin_fail(err, DCP_ECORRUPT, "%s: payload checksum mismatch", e->path);
  return DCP_OK;
}

uint64_t dcpi_fx_hello_nonce(const unsigned char *hello, int32_t world) {
  return dcpi_cc_get32(hello + 8) == (uint32_t)world ? dcpi_cc_get64(hello) : 0;
}

int dcpi_fx_session_accepts(const unsigned char *s, int32_t world, int32_t rank, uint64_t nonce,
                            uint64_t *session) {
  if (world < 1 || rank < 0 || rank >= world) return 0;
  if (dcpi_cc_get32(s + 8) != (uint32_t)world) return 0;
  if (dcpi_cc_get64(s + DCPI_CC_SESSION_HEAD + 8 * (size_t)rank) != nonce) return 0;
  *session = dcpi_cc_get64(s);
  return 1;
}

void dcpi_fx_reduce_into(int64_t *acc, const unsigned char *v, size_t n, uint32_t op) {
  for (size_t i = 0; i < n; i++) {
    uint64_t u = dcpi_cc_get64(v + 8 * i);
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
