/* safetensors.h — strict parsing and writing of safetensors headers.
 *
 * A safetensors file is: an 8-byte little-endian header length N, N bytes
 * of a UTF-8 JSON object (the header), then the data region. The header maps
 * each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets relative to the data region) and may hold "__metadata__", an
 * object of string values. The parser is strict: every violation of the
 * format is DCP_ECORRUPT with the reason and, where there is one, the tensor
 * name. JSON is parsed by libjansson. No I/O here: bytes in, bytes out. */
#ifndef DCP_CONVERT_SAFETENSORS_H
#define DCP_CONVERT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "dcp.h"

#define DCPI_ST_MAX_HEADER (100u * 1000u * 1000u) /* 100 MB, as the spec's reader */

/* The header key the format reserves for the file's string-to-string
 * metadata: it can never name a tensor. */
#define DCPI_ST_METADATA_KEY "__metadata__"

typedef struct dcpi_st_tensor {
  char *name; /* owned */
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[DCP_MAX_NDIM];
  uint64_t begin, end; /* byte span within the data region */
} dcpi_st_tensor;

typedef struct dcpi_st_header {
  dcpi_st_tensor *tensors; /* sorted by begin (file order) */
  size_t ntensors;
  char **kv_keys, **kv_values; /* __metadata__, sorted by key; owned */
  size_t nkv;
  uint64_t header_len; /* N */
  uint64_t data_start; /* 8 + N: file offset of the data region */
  uint64_t data_len;   /* bytes of the data region */
} dcpi_st_header;

/* Check the 8-byte prefix of a file of file_size bytes and set *header_len.
 * Errors: DCP_ECORRUPT (file shorter than 8 bytes, header length over
 * DCPI_ST_MAX_HEADER or past the end of the file). */
dcp_status dcpi_st_header_len(const uint8_t prefix[8], uint64_t file_size, uint64_t *header_len,
                              dcpi_err *err);

/* Parse the header JSON (json_len bytes at json) of a file whose data
 * region has data_len bytes; header_len is recorded in *out, which is
 * malloc'd (free with dcpi_st_header_free). Checks: valid UTF-8 JSON object
 * without duplicate keys; per tensor a known dtype, a shape of at most
 * DCP_MAX_NDIM non-negative extents, data_offsets [begin, end] with
 * begin <= end <= data_len and end - begin = numel * dtype size; spans
 * ordered without overlaps or gaps and covering the data region;
 * __metadata__ an object of strings. Errors: DCP_ECORRUPT (reason and
 * tensor name in err), DCP_ENOMEM. On error *out is NULL. */
dcp_status dcpi_st_parse(const char *json, size_t json_len, uint64_t data_len,
                         dcpi_st_header **out, dcpi_err *err);

void dcpi_st_header_free(dcpi_st_header *h);

/* One tensor to write into a header (spans relative to the data region). */
typedef struct dcpi_st_out {
  const char *name;
  dcp_dtype dtype;
  uint32_t ndim;
  const int64_t *shape;
  uint64_t begin, end;
} dcpi_st_out;

/* Build the 8-byte length prefix and header JSON for n tensors and nkv
 * metadata entries (none: no __metadata__) into *out (malloc'd, *len bytes,
 * a multiple of 8 so the data region stays aligned; padded with spaces).
 * Errors: DCP_ENAME (a tensor named __metadata__), DCP_EINVAL (two tensors
 * or two metadata keys with one name, an invalid dtype or a string that is
 * not UTF-8), DCP_ENOMEM. */
dcp_status dcpi_st_build_header(const dcpi_st_out *t, size_t n, const char *const *kv_keys,
                                const char *const *kv_values, size_t nkv, uint8_t **out,
                                size_t *len, dcpi_err *err);

#endif
