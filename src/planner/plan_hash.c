/* plan_hash.c — the plan-cache key of a local plan.
 *
 * The key is XXH3-128 of the plan's canonical encoding (plan_codec.c) minus
 * its trailing checksum. The encoding is unambiguous (every variable-length
 * field is length-prefixed) and covers every fqn, dtype, shape, box, bytes
 * key, scope and length, the rank, the world size and the options, so two
 * plans that differ in any of these differ in their encoded bytes and can
 * only share a key through a 128-bit hash collision. Bytes lengths are
 * included because a replicated item's length fixes file offsets; a
 * per-rank one's is included too, for the same reason. */
#include <stdlib.h>
#include <xxhash.h>

#include "planner/save_plan.h"

dcp_status dcpi_plan_hash(const dcpi_local_plan *lp, dcpi_plan_key *out, dcpi_err *err) {
  if (!out) return dcpi_fail(err, DCP_EINVAL, "plan hash: out is NULL");
  uint8_t *data;
  size_t len;
  dcp_status rc = dcpi_local_plan_encode(lp, &data, &len, err);
  if (rc) return rc;
  XXH128_hash_t h = XXH3_128bits(data, len - sizeof(uint64_t));
  free(data);
  out->lo = h.low64;
  out->hi = h.high64;
  return DCP_OK;
}

bool dcpi_plan_key_equal(dcpi_plan_key a, dcpi_plan_key b) { return a.lo == b.lo && a.hi == b.hi; }
