/* options.c — the public option structs as the runtime uses them
 * (options.h): one place for save (sync and async) and load. */
#include "runtime/options.h"

#include <stddef.h>
#include <string.h>

#include "base/sized.h"
#include "model/name.h"
#include "runtime/load_int.h"
#include "planner/save_plan.h"
#include "runtime/rt.h"

void dcp_save_options_init(dcp_save_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->block_size = DCPI_SAVE_DEFAULT_BLOCK_SIZE;
  o->zstd_level = DCPI_DEFAULT_ZSTD_LEVEL;
  o->policy = DCP_POLICY_BALANCED;
}

/* Every key/value value is a string of valid UTF-8 (dcp.h: strings are
 * UTF-8): it becomes JSON in exported safetensors headers and in `dcp
 * inspect --json`, where invalid bytes could not be written. Keys follow
 * the name rule, checked by the metadata builder.
 * Errors: DCP_EINVAL naming the key and the byte offset. */
static dcp_status check_kv_values(const dcp_save_options *o, dcpi_err *err) {
  for (size_t k = 0; k < o->nkv; k++) {
    const char *v = o->kv_values[k];
    if (!v) continue; /* the builder refuses it, naming the key */
    size_t len = strlen(v), ok = dcpi_utf8_valid_prefix(v, len);
    if (ok != len)
      return dcpi_fail(err, DCP_EINVAL, "save options: the value of key/value %zu is not valid "
                       "UTF-8 at byte %zu", k, ok);
  }
  return DCP_OK;
}

dcp_status dcpi_save_options_effective(const dcp_save_options *in, dcp_save_options *out,
                                       dcpi_err *err) {
  dcp_save_options_init(out);
  if (!dcpi_sized_merge(out, sizeof *out, in, DCPI_SIZE_THROUGH(dcp_save_options, flags)))
    return dcpi_fail(err, DCP_EINVAL, "save options: struct_size %u too small", in->struct_size);
  if (out->flags & ~(uint32_t)(DCP_SAVE_OVERWRITE | DCP_SAVE_COMPRESS | DCP_SAVE_IN_PLACE |
                              DCP_SAVE_CHECK_REPLICAS))
    return dcpi_fail(err, DCP_EINVAL, "save options: unknown flags 0x%x", out->flags);
  if (!out->block_size) out->block_size = DCPI_SAVE_DEFAULT_BLOCK_SIZE; /* 0: the default */
  if (!out->zstd_level) out->zstd_level = DCPI_DEFAULT_ZSTD_LEVEL;
  if (out->block_size < 4096 || out->block_size > (1u << 30))
    return dcpi_fail(err, DCP_EINVAL, "save options: block_size %u not in [4 KiB, 1 GiB]",
                     out->block_size);
  if (out->policy != DCP_POLICY_BALANCED && out->policy != DCP_POLICY_LOWEST_RANK)
    return dcpi_fail(err, DCP_EINVAL, "save options: unknown policy %d", (int)out->policy);
  if (out->nkv && (!out->kv_keys || !out->kv_values))
    return dcpi_fail(err, DCP_EINVAL, "save options: nkv %zu with NULL arrays", out->nkv);
  return check_kv_values(out, err);
}

void dcp_load_options_init(dcp_load_options *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->read_dedup = DCP_READ_DEDUP_AUTO;
  o->reader_policy = DCP_POLICY_BALANCED;
  o->max_inflight_bytes = DCPI_LOAD_DEFAULT_INFLIGHT;
}

dcp_status dcpi_load_options_effective(const dcp_load_options *in, dcp_load_options *out,
                                       dcpi_err *err) {
  dcp_load_options_init(out);
  if (!dcpi_sized_merge(out, sizeof *out, in, DCPI_SIZE_THROUGH(dcp_load_options, flags)))
    return dcpi_fail(err, DCP_EINVAL, "load options: struct_size %u too small", in->struct_size);
  if (out->flags & ~(uint32_t)(DCP_LOAD_METADATA_PER_RANK | DCP_LOAD_NO_PIPELINE))
    return dcpi_fail(err, DCP_EINVAL, "load options: unknown flags 0x%x", out->flags);
  if ((unsigned)out->read_dedup > DCP_READ_DEDUP_ON)
    return dcpi_fail(err, DCP_EINVAL, "load options: unknown read_dedup %u",
                     (unsigned)out->read_dedup);
  if ((unsigned)out->reader_policy > DCP_POLICY_LOWEST_RANK)
    return dcpi_fail(err, DCP_EINVAL, "load options: unknown reader_policy %u",
                     (unsigned)out->reader_policy);
  if (!out->max_inflight_bytes) out->max_inflight_bytes = DCPI_LOAD_DEFAULT_INFLIGHT;
  return DCP_OK;
}
