/* meta.h — building and encoding a checkpoint's global index (.metadata).
 *
 * The save runtime fills a dcpi_md with what was written (files, meshes,
 * tensors and their chunks, bytes items, user key/values) and encodes it into
 * the binary format of docs/format.md. Reading goes through the public
 * dcp_meta_* view (dcp.h). No I/O here: bytes in, bytes out.
 *
 * Every add function copies its inputs, validates them and leaves md
 * unchanged on error (err, which may be NULL, gets the reason). */
#ifndef DCP_METADATA_META_H
#define DCP_METADATA_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "metadata/format.h"
#include "dcp.h"

typedef struct dcpi_md dcpi_md; /* mutable in-memory metadata being built; owns copies of everything */

/* Create an empty builder (world size 1). Errors: DCP_EINVAL (out NULL),
 * DCP_ENOMEM. On error *out is NULL. */
dcp_status dcpi_md_create(dcpi_md **out);

/* Free md and everything it owns. NULL is a no-op. */
void dcpi_md_free(dcpi_md *md);

/* Set the save-time world size (default 1). Mesh ranks and per-rank bytes
 * items must lie in [0, world_size) when encoding.
 * Errors: DCP_EINVAL (NULL, world_size < 1). */
dcp_status dcpi_md_set_world(dcpi_md *md, int32_t world_size, dcpi_err *err);

/* Write format version `version` instead of DCPI_FORMAT_VERSION: 2 (every
 * chunk list listed, for readers of libdcp 0.3 and the tests that prove
 * old checkpoints still read), 3 (derived lists without skip tables, FLAT
 * chunks in (offset, size) order) or the current one. Errors: DCP_EINVAL. */
dcp_status dcpi_md_set_format_version(dcpi_md *md, uint32_t version, dcpi_err *err);

/* Record the identity of the save md describes (format version 2): a
 * 16-byte id, its generation (one more than the checkpoint it replaces; 1
 * for the first), and part_rank: -1 for a whole checkpoint, else the rank
 * whose part of an uncoordinated save this is (< the world size, checked
 * when encoding). Without a call the identity is all zero (tools, tests).
 * Errors: DCP_EINVAL (NULL, part_rank < -1). */
dcp_status dcpi_md_set_identity(dcpi_md *md, const uint8_t id[DCPI_SAVE_ID_LEN],
                                uint64_t generation, int32_t part_rank, dcpi_err *err);

/* Record the length in bytes of file id (what a verify expects to find).
 * Errors: DCP_EINVAL (NULL md), DCP_ENOTFOUND (no such file). */
dcp_status dcpi_md_set_file_length(dcpi_md *md, uint32_t id, uint64_t length, dcpi_err *err);

/* Append a data file name to the file table; *id (may be NULL) gets its index,
 * 0, 1, ... in call order. The name is a plain file name relative to the
 * checkpoint directory: 1..DCP_MAX_NAME bytes, no '/' or '\\', not "." or "..".
 * Errors: DCP_EINVAL (NULL md or name), DCP_ENAME, DCP_EEXIST (same name
 * twice), DCP_ENOMEM. */
dcp_status dcpi_md_add_file(dcpi_md *md, const char *name, uint32_t *id, dcpi_err *err);

/* Append a save-time device mesh; *id (may be NULL) gets its index, 0, 1, ...
 * ndim 1..DCP_MAX_MESH_NDIM extents >= 1; ranks holds prod(shape) distinct
 * non-negative global ranks in row-major order, or NULL for 0..n-1.
 * Errors: DCP_EINVAL, DCP_EOVERFLOW (more than INT32_MAX ranks), DCP_ENOMEM. */
dcp_status dcpi_md_add_mesh(dcpi_md *md, uint32_t ndim, const int64_t *shape,
                            const int32_t *ranks, uint32_t *id, dcpi_err *err);

/* Declare a tensor; *tid (may be NULL) gets its id (insertion order, not the
 * encoded order). mesh is a mesh id or -1; with a mesh, tensor_map holds ndim
 * masks of mesh dimensions (see dcp_layout_create), else it is ignored.
 * Errors: DCP_EINVAL (NULL, bad dtype, ndim > DCP_MAX_NDIM, negative extent,
 * bad tensor_map), DCP_ENAME (fqn breaks the name rule, model/name.h),
 * DCP_ENOTFOUND (no such mesh), DCP_EOVERFLOW (byte size overflows int64),
 * DCP_EEXIST (fqn already used by a tensor or bytes item), DCP_ENOMEM. */
dcp_status dcpi_md_add_tensor(dcpi_md *md, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                              const int64_t *shape, int32_t mesh /* -1 none */,
                              const uint32_t *tensor_map /* ndim, NULL if mesh<0 */,
                              uint32_t *tid, dcpi_err *err);

/* The id of the tensor named fqn (len bytes) into *tid, or DCP_ENOTFOUND. */
dcp_status dcpi_md_find_tensor(const dcpi_md *md, const char *fqn, size_t len, uint32_t *tid);

/* The id of the mesh (ndim, shape, ranks: prod(shape) of them) into *id,
 * adding it when md has no identical one: each distinct mesh is stored
 * once however many tensors use it. Errors as dcpi_md_add_mesh. */
dcp_status dcpi_md_intern_mesh(dcpi_md *md, uint32_t ndim, const int64_t *shape,
                               const int32_t *ranks, uint32_t *id, dcpi_err *err);

/* true when tensor tid has a mesh already, or its ndim is not ndim (a
 * layout cannot be set on it). */
bool dcpi_md_tensor_has_layout(const dcpi_md *md, uint32_t tid, uint32_t ndim);

/* Set (or, with mesh -1, clear) the layout tensor tid was saved from: mesh
 * id and tensor_map as in dcpi_md_add_tensor. Errors: DCP_ENOTFOUND (no
 * such tensor or mesh), DCP_EINVAL (bad tensor_map). */
dcp_status dcpi_md_set_tensor_layout(dcpi_md *md, uint32_t tid, int32_t mesh,
                                     const uint32_t *tensor_map, dcpi_err *err);

/* Record that the box [offset, offset+size) of tensor tid is stored at ref.
 * The checksum and stored-length arrays are copied. The box must be
 * non-empty (an empty box stores nothing and is not recorded); ref must be
 * consistent: raw_length = numel * dtype size, block_count =
 * ceil(raw_length / block_size), stored_length = raw_length for
 * DCP_CODEC_NONE and the sum of block_stored_lengths (each in
 * [1, raw block length]) for DCP_CODEC_ZSTD.
 * Errors: DCP_EINVAL (NULL, negative or empty box, inconsistent ref),
 * DCP_ENOTFOUND (no such tensor or file), DCP_EBOUNDS (box outside the
 * shape), DCP_EOVERFLOW, DCP_ENOMEM. The same box twice is reported by
 * dcpi_md_encode (DCP_EEXIST). */
dcp_status dcpi_md_add_chunk(dcpi_md *md, uint32_t tid, const int64_t *offset, const int64_t *size,
                             const dcp_storage_ref *ref, dcpi_err *err);

/* Make room in tensor tid for n chunks in all (a hint: adds never need it;
 * a caller that knows the count, from its global plan, spares the chunk
 * arrays their regrowth: the copies and up to half their capacity idle).
 * Errors: DCP_EINVAL (NULL md), DCP_ENOTFOUND (no such tensor), DCP_EOVERFLOW,
 * DCP_ENOMEM; md is unchanged but for capacity. */
dcp_status dcpi_md_reserve_chunks(dcpi_md *md, uint32_t tid, size_t n, dcpi_err *err);

/* Record a bytes item: key with scope, rank (the saving rank for
 * DCP_SCOPE_PER_RANK, -1 for DCP_SCOPE_REPLICATED) and where it is stored
 * (ref as in dcpi_md_add_chunk, raw_length free).
 * Errors: DCP_EINVAL (NULL, bad scope or rank, inconsistent ref), DCP_ENAME,
 * DCP_ENOTFOUND (no such file), DCP_ESCOPE (key already used with the other
 * scope), DCP_EEXIST (same key and rank twice, or key used by a tensor),
 * DCP_EOVERFLOW, DCP_ENOMEM. */
dcp_status dcpi_md_add_bytes(dcpi_md *md, const char *key, dcp_scope scope, int32_t rank,
                             const dcp_storage_ref *ref, dcpi_err *err);

/* Record a user key/value (step, framework, ...). Both strings are copied.
 * Errors: DCP_EINVAL (NULL), DCP_ENAME (key empty or too long), DCP_EEXIST,
 * DCP_ENOMEM. */
dcp_status dcpi_md_add_kv(dcpi_md *md, const char *key, const char *value, dcpi_err *err);

/* Encode md into *out (malloc'd; the caller frees it) of *len bytes. The
 * encoding is deterministic: the same content gives the same bytes whatever
 * order tensors, chunks, bytes items and key/values were added in (files and
 * meshes keep their ids). Errors: DCP_EINVAL (NULL, a mesh rank or per-rank
 * bytes rank outside the world), DCP_EEXIST (two chunks of one tensor with
 * the same box), DCP_EOVERFLOW, DCP_ENOMEM. On error *out is NULL. */
dcp_status dcpi_md_encode(const dcpi_md *md, void **out, size_t *len, dcpi_err *err);

/* dcpi_md_encode on `threads` threads (0: as dcpi_md_encode chooses, which
 * is one below 256 Ki chunks, else up to 8 of the CPUs this process may
 * use). The bytes, and which error is reported (the first failing tensor
 * in fqn order), do not depend on the count: tests compare them. */
dcp_status dcpi_md_encode_threads(const dcpi_md *md, unsigned threads, void **out, size_t *len,
                                  dcpi_err *err);

/* Counts of what has been added so far (0 for NULL md). */
size_t dcpi_md_tensor_count(const dcpi_md *md);
size_t dcpi_md_chunk_count(const dcpi_md *md);
size_t dcpi_md_file_count(const dcpi_md *md);
size_t dcpi_md_mesh_count(const dcpi_md *md);
size_t dcpi_md_bytes_count(const dcpi_md *md);
size_t dcpi_md_kv_count(const dcpi_md *md);

#endif
