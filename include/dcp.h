/*
 * dcp.h — public API of libdcp, distributed checkpoints for large training jobs.
 *
 * Conventions
 *  - Every fallible function returns a dcp_status: DCP_OK (0) or a negative
 *    error code. dcp_is_error() tests it; dcp_strerror() names it. Functions
 *    that take a dcp_ctx also leave a detailed message on that context
 *    (dcp_ctx_last_error()).
 *  - Handles are opaque. Every *_create has a *_free; *_free(NULL) is a no-op.
 *  - The caller owns tensor memory. The library never frees what it did not
 *    allocate and never keeps a pointer past the documented lifetime.
 *  - Strings are UTF-8, NUL-terminated, and copied on the way in.
 *  - Integer shapes and offsets are int64_t; every product is checked for
 *    overflow (DCP_EOVERFLOW).
 *  - I/O goes through the context's storage plugin only.
 */
#ifndef DCP_H
#define DCP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DCP_BUILDING_LIBRARY) && defined(__GNUC__)
#define DCP_API __attribute__((visibility("default")))
#else
#define DCP_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */

#define DCP_VERSION_MAJOR 0
#define DCP_VERSION_MINOR 3
#define DCP_VERSION_PATCH 0
#define DCP_VERSION_NUMBER \
  (DCP_VERSION_MAJOR * 10000 + DCP_VERSION_MINOR * 100 + DCP_VERSION_PATCH)

/* The version of the library actually linked, as MAJOR*10000+MINOR*100+PATCH.
 * Compare with DCP_VERSION_NUMBER to detect a header/library mismatch. */
DCP_API unsigned dcp_version_number(void);

/* The linked library's version as a static string, e.g. "0.3.0". */
DCP_API const char *dcp_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/* Values are stable: new codes are only ever appended. */
typedef enum dcp_status {
  DCP_OK = 0,
  DCP_EINVAL = -1,     /* an argument is invalid (NULL, out of range, ...) */
  DCP_ENOMEM = -2,     /* an allocation failed */
  DCP_EOVERFLOW = -3,  /* a size, shape or offset product overflows int64 */
  DCP_ECORRUPT = -4,   /* encoded data is malformed or fails its checksum */
  DCP_EVERSION = -5,   /* encoded data has an unsupported format version */
  DCP_EMISMATCH = -6,  /* dtype/shape of one fqn differs between sources */
  DCP_EBOUNDS = -7,    /* a box lies outside its tensor's global shape */
  DCP_EOVERLAP = -8,   /* distinct boxes of one fqn overlap */
  DCP_EEXIST = -9,     /* an item or chunk with that key already exists */
  DCP_ENOTFOUND = -10, /* no such fqn, key, rank or index */
  DCP_ESCOPE = -11,    /* a bytes item's scope clashes or cannot be honoured */
  DCP_ENAME = -12,     /* an fqn or key is empty, too long or not allowed */
  DCP_EINCOMPLETE = -13, /* a tensor or region is not fully covered by chunks,
                            or a checkpoint has no committed .metadata */
  DCP_EIO = -14,         /* a storage operation failed */
  DCP_ENOSPC = -15,      /* the storage is full */
  DCP_ETIMEDOUT = -16,   /* a wait passed the configured deadline */
  DCP_EPEER = -17,       /* another rank failed; this rank's part was fine */
  DCP_EPLUGIN = -18,     /* a plugin could not be found, loaded or accepted */
  /* -- since 0.3 -- */
  DCP_EBUSY = -19,       /* another save holds the checkpoint directory's lease */
  DCP_ESTALE = -20,      /* the checkpoint changed under this save (a newer save
                            committed, or this save's lease was lost) */
  DCP_EREPLICA = -21     /* the holders of a replicated box hold different
                            bytes (memory corruption: dcp_check_replicas) */
} dcp_status;

/* Non-zero when s is an error (negative). */
DCP_API int dcp_is_error(dcp_status rc);

/* A short static description of a status code ("corrupt data", ...). Never
 * NULL; unknown codes give "unknown status". */
DCP_API const char *dcp_strerror(dcp_status rc);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct dcp_ctx dcp_ctx;

/* Configuration of a context. Initialise with dcp_ctx_config_init() before
 * setting fields: struct_size lets later versions append fields without
 * breaking callers compiled against this one. */
typedef struct dcp_ctx_config {
  uint32_t struct_size; /* sizeof(dcp_ctx_config), set by init */
  int32_t rank;         /* this process's global rank (default 0); with a
                           collective that knows it (mpi), that one wins */
  int32_t world_size;   /* number of ranks (default 1); likewise, but a
                           value above 1 that the collective contradicts
                           is an error (DCP_EINVAL). The one field where 0
                           is refused, not defaulted: a forgotten world
                           size must not become a silent world of one */
  /* -- since 0.2 -- */
  const char *storage;         /* storage plugin name (default "posix") */
  const char *storage_options; /* its "key=value,..." options, or NULL */
  const char *coll;            /* collective plugin: "single" (default),
                                  "mpi", "file", ... */
  const char *coll_options;    /* its options, or NULL */
  void *coll_native;           /* backend handle (an MPI_Comm*), or NULL */
  const char *rendezvous;      /* shared directory of the file collective */
  int64_t timeout_ms;          /* deadline of every wait (0: the default,
                                  300000) */
  const char *plugin_path;     /* colon-separated directories searched for
                                  plugins before DCP_PLUGIN_PATH, or NULL */
  /* -- since 0.3 -- */
  int64_t lease_ms;            /* how long the directory lease of a save
                                  outlives a holder that stopped renewing it
                                  (stalled, or crashed on another host);
                                  50..86400000, 0: 30000.
                                  docs/reliability.md */
} dcp_ctx_config;

/* Fill cfg with defaults (rank 0 of a world of 1). */
DCP_API void dcp_ctx_config_init(dcp_ctx_config *cfg);

/* Create a context. cfg may be NULL for the defaults (rank 0 of 1, the
 * built-in "single" collective). With a collective plugin the context opens
 * it here (for "file" and "mpi" that is collective over the ranks) and takes
 * rank and world size from it. The storage plugin is looked up here when
 * named, else at the first save or load ("posix").
 * Without a collective, world_size > 1 makes a detached rank: it builds
 * states and layouts as that rank (tools, simulations), and dcp_save saves
 * without coordination (its own <rank>.metadata, merged by dcp_load once
 * every rank has saved; docs/save-load.md), but it cannot load
 * (DCP_EINVAL: a load needs the collective).
 * A world_size above 1 that a collective contradicts is DCP_EINVAL.
 * Errors: DCP_EINVAL (cfg->struct_size too small, world_size < 1, rank out of
 * [0, world_size), timeout_ms < 0, lease_ms outside 50..86400000 and not 0),
 * DCP_EPLUGIN (a plugin not found or refused), the collective's open errors
 * (DCP_ETIMEDOUT, DCP_EIO, ...), DCP_ENOMEM. On error *out is NULL and
 * dcp_ctx_create_error() says why. */
DCP_API dcp_status dcp_ctx_create(const dcp_ctx_config *cfg, dcp_ctx **out);

/* Why the calling thread's last dcp_ctx_create failed ("" after a success):
 * a plugin not found (with the paths searched), a collective that could not
 * open, ... Valid until that thread's next dcp_ctx_create. */
DCP_API const char *dcp_ctx_create_error(void);

/* Free a context. Objects created from it must be freed first. */
DCP_API void dcp_ctx_free(dcp_ctx *ctx);

/* This context's rank and world size. */
DCP_API int32_t dcp_ctx_rank(const dcp_ctx *ctx);
DCP_API int32_t dcp_ctx_world_size(const dcp_ctx *ctx);

/* The message left by the last failing call that took this context, or ""
 * when none failed. The string is owned by the context and valid until the
 * next call that takes it. */
DCP_API const char *dcp_ctx_last_error(const dcp_ctx *ctx);

/* The status of the last failing call that took this context (DCP_OK when
 * none failed). */
DCP_API dcp_status dcp_ctx_last_status(const dcp_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Dtypes                                                                   */
/* ------------------------------------------------------------------------ */

/* The safetensors element types. Values are stored on disk: stable. */
typedef enum dcp_dtype {
  DCP_DTYPE_INVALID = 0,
  DCP_BOOL = 1,
  DCP_U8 = 2,
  DCP_I8 = 3,
  DCP_I16 = 4,
  DCP_U16 = 5,
  DCP_I32 = 6,
  DCP_U32 = 7,
  DCP_I64 = 8,
  DCP_U64 = 9,
  DCP_F16 = 10,
  DCP_BF16 = 11,
  DCP_F32 = 12,
  DCP_F64 = 13,
  DCP_F8_E4M3 = 14,
  DCP_F8_E5M2 = 15,
  DCP_F8_E8M0 = 16,
  DCP_C64 = 17,
  DCP_DTYPE_END_ /* one past the last valid value */
} dcp_dtype;

/* Bytes per element of dt, or 0 when dt is not a valid dtype. */
DCP_API size_t dcp_dtype_size(dcp_dtype dt);

/* The safetensors name of dt ("BF16", ...), or NULL when dt is invalid. */
DCP_API const char *dcp_dtype_name(dcp_dtype dt);

/* The dtype whose safetensors name is name (exact, case-sensitive), or
 * DCP_DTYPE_INVALID. */
DCP_API dcp_dtype dcp_dtype_from_name(const char *name);

/* ------------------------------------------------------------------------ */
/* Boxes                                                                    */
/* ------------------------------------------------------------------------ */

#define DCP_MAX_NDIM 16

/* An N-d half-open region [offset, offset+size) per dimension of a tensor's
 * global shape. Entries at and past ndim are ignored. A box with a zero size
 * in any dimension is empty. A 0-d box (scalar) has one element.
 * Frozen: never grows; a later version adds a new struct (the library
 * fills boxes for the caller: dcp_layout_box, dcp_flat_to_boxes, ...). */
typedef struct dcp_box {
  uint32_t ndim;
  int64_t offset[DCP_MAX_NDIM];
  int64_t size[DCP_MAX_NDIM];
} dcp_box;

/* Number of elements of box into *numel.
 * Errors: DCP_EINVAL (NULL, ndim > DCP_MAX_NDIM, negative offset or size),
 * DCP_EOVERFLOW (offset+size or the product exceeds INT64_MAX). */
DCP_API dcp_status dcp_box_numel(const dcp_box *box, int64_t *numel);

/* Intersection of a and b into *out (which may alias either).
 * Returns 1 when the intersection is non-empty, 0 when it is empty (then
 * *out has ndim set and a zero size where the boxes miss), and DCP_EINVAL
 * when the boxes have different ndim or either is invalid. */
DCP_API int dcp_box_intersect(const dcp_box *a, const dcp_box *b, dcp_box *out);

/* Decompose a flat element range of a row-major region into boxes.
 *
 * The region is the box `region` of a tensor (the whole tensor when its
 * offset is 0 and its size is the global shape; a tensor-parallel shard
 * otherwise). Elements [flat_begin, flat_begin+flat_count) of the region's
 * row-major order are covered exactly, in order, by the boxes written to
 * out[0..*count), expressed in the tensor's global coordinates. At most
 * 2*ndim-1 boxes are produced (1 for ndim 0), so out must hold that many;
 * cap is its capacity. flat_count 0 gives *count 0.
 * Errors: DCP_EINVAL (NULL, invalid region, cap too small), DCP_EBOUNDS (the
 * range exceeds the region), DCP_EOVERFLOW. */
DCP_API dcp_status dcp_flat_to_boxes(const dcp_box *region, int64_t flat_begin,
                                     int64_t flat_count, dcp_box *out,
                                     size_t cap, size_t *count);

/* ------------------------------------------------------------------------ */
/* Layouts                                                                  */
/* ------------------------------------------------------------------------ */

/* A layout says how one tensor is spread over a device mesh: the mesh's shape,
 * the global rank at each mesh coordinate (row-major), and a tensor_map that
 * gives, for each tensor dimension, the set of mesh dimensions that shard it.
 *
 * tensor_map[d] is a bit mask: bit m set means mesh dimension m shards tensor
 * dimension d; 0 means dimension d is not sharded. When several mesh
 * dimensions shard one tensor dimension, they combine in mesh order (lower
 * mesh dimension = more significant), like a row-major index. A mesh
 * dimension shards at most one tensor dimension. Mesh dimensions that shard
 * nothing replicate the tensor: ranks that differ only there form a replica
 * group and hold the identical box.
 *
 * Splits are ceil-divided: with n shards of extent E, shard i covers
 * [min(i*c, E), min((i+1)*c, E)) where c = ceil(E/n), so trailing shards may
 * be smaller or empty. */
typedef struct dcp_layout dcp_layout;

#define DCP_MAX_MESH_NDIM 16

/* Create a layout.
 *  mesh_ndim   1..DCP_MAX_MESH_NDIM
 *  mesh_shape  mesh_ndim extents, each >= 1
 *  mesh_ranks  prod(mesh_shape) distinct non-negative global ranks in
 *              row-major mesh order, or NULL for 0..n-1
 *  tensor_ndim 0..DCP_MAX_NDIM, tensor_map tensor_ndim masks (NULL when 0)
 * Arrays are copied. Errors (message on ctx, which may be NULL): DCP_EINVAL
 * (bad extents, duplicate or negative ranks, a mask naming a mesh dimension
 * that does not exist or one already used), DCP_EOVERFLOW, DCP_ENOMEM. */
DCP_API dcp_status dcp_layout_create(dcp_ctx *ctx, uint32_t mesh_ndim,
                                     const int64_t *mesh_shape,
                                     const int32_t *mesh_ranks,
                                     uint32_t tensor_ndim,
                                     const uint32_t *tensor_map,
                                     dcp_layout **out);

DCP_API void dcp_layout_free(dcp_layout *layout);

/* The box that `rank` holds of a tensor with this layout and global_shape
 * (tensor_ndim extents). Computed locally, no communication.
 * Errors: DCP_EINVAL (NULL, negative extent), DCP_ENOTFOUND (rank is not in
 * the mesh). */
DCP_API dcp_status dcp_layout_box(const dcp_layout *layout,
                                  const int64_t *global_shape, int32_t rank,
                                  dcp_box *out);

/* The replica group of `rank`: every rank of the mesh whose coordinates
 * equal rank's on all sharding mesh dimensions (rank included), in
 * ascending order. They hold the identical box. (With uneven splits, ranks
 * of different shards may each hold an empty box; those are not one group.) Sets *count to the
 * group's size and writes the first min(cap, *count) ranks to out; pass cap
 * 0 (out may then be NULL) to query the size.
 * Errors: DCP_EINVAL (NULL layout or count, NULL out with cap > 0),
 * DCP_ENOTFOUND (rank not in the mesh). */
DCP_API dcp_status dcp_layout_replica_group(const dcp_layout *layout,
                                            int32_t rank, int32_t *out,
                                            size_t cap, size_t *count);

/* The flat shard of `rank` for a tensor saved with
 * dcp_state_add_flat_sharded (ZeRO / FSDP style): its cell is the box
 * dcp_layout_box gives (the mesh dims in tensor_map shard the tensor); the
 * mesh dims in flat_dims (a mask, bit k: mesh dim k; none of them may
 * shard the tensor; 0: every mesh dim that shards nothing) cut the cell,
 * flattened row-major, into ceil-divided ranges, one per combination of
 * their coordinates (combined in mesh order: lower mesh dimension more
 * significant), and the rank holds the range of its coordinates; the
 * remaining mesh dims replicate it (e.g. the optimizer state of a
 * TP-replicated parameter, cut over DP only). Writes the cell to *cell
 * (may be NULL) and the range [*flat_begin, *flat_begin + *flat_count) of
 * the cell's elements (trailing ranges may be smaller or empty): what the
 * caller's buffer holds, contiguous. Computed locally.
 * Errors: DCP_EINVAL (NULL, negative extent, bad flat_dims), DCP_EOVERFLOW
 * (the shape's element count overflows), DCP_ENOTFOUND (rank is not in
 * the mesh). */
DCP_API dcp_status dcp_layout_flat_range(const dcp_layout *layout,
                                         const int64_t *global_shape, uint32_t flat_dims,
                                         int32_t rank, dcp_box *cell, int64_t *flat_begin,
                                         int64_t *flat_count);

/* ------------------------------------------------------------------------ */
/* State: what a rank saves or loads                                        */
/* ------------------------------------------------------------------------ */

/* A state holds this rank's tensor items (fqn, dtype, global shape, local
 * chunks) and bytes items. It stores pointers to caller memory, which must
 * stay valid and unchanged while the state is used by a save or load. */
typedef struct dcp_state dcp_state;

/* Scope of a bytes item. Values are stored on disk: stable. */
typedef enum dcp_scope {
  DCP_SCOPE_REPLICATED = 0, /* one copy; every rank that has it holds the same */
  DCP_SCOPE_PER_RANK = 1    /* one copy per saving rank */
} dcp_scope;

#define DCP_MAX_NAME 4096 /* longest fqn or key in bytes, NUL excluded */

/* Create an empty state for ctx's rank. Errors: DCP_EINVAL, DCP_ENOMEM. */
DCP_API dcp_status dcp_state_create(dcp_ctx *ctx, dcp_state **out);

DCP_API void dcp_state_free(dcp_state *st);

/* Declare a tensor item. fqn: 1..DCP_MAX_NAME bytes of valid UTF-8 with no
 * control characters (U+0000..U+001F, U+007F), no '/' or '\' and no ".."
 * ("model.layers.0.weight" is the usual form); the same rule holds for
 * bytes keys, for names decoded from a .metadata and for tensor names
 * imported from safetensors. shape: ndim non-negative extents (NULL when
 * ndim is 0).
 * Errors: DCP_ENAME (the message names the rule broken and the byte
 * offset), DCP_EINVAL (bad dtype or ndim), DCP_EOVERFLOW (element
 * count or byte size overflows), DCP_EEXIST (fqn already declared in this
 * state, as a tensor or bytes item), DCP_ENOMEM. */
DCP_API dcp_status dcp_state_add_tensor(dcp_state *st, const char *fqn,
                                        dcp_dtype dtype, uint32_t ndim,
                                        const int64_t *shape);

/* Add a local chunk of a declared tensor: the box [offset, offset+size) of
 * its global shape, whose elements are at data, contiguous and row-major.
 * data may be NULL only for an empty box. Several chunks per tensor are
 * allowed; they must not overlap each other.
 * Errors: DCP_ENOTFOUND (fqn not declared), DCP_EBOUNDS (box outside the
 * shape), DCP_EOVERLAP (overlaps an earlier chunk of this state),
 * DCP_EINVAL, DCP_ENOMEM. */
DCP_API dcp_status dcp_state_add_chunk(dcp_state *st, const char *fqn,
                                       const int64_t *offset,
                                       const int64_t *size, void *data);

/* Add the flat element range [flat_begin, flat_begin+flat_count) of the
 * row-major region `region` (see dcp_flat_to_boxes) of a declared tensor,
 * whose elements are at data, contiguous. It becomes up to 2*ndim-1 chunks
 * pointing into data. region NULL means the whole tensor.
 * Errors: as dcp_state_add_chunk and dcp_flat_to_boxes. */
DCP_API dcp_status dcp_state_add_flat(dcp_state *st, const char *fqn,
                                      const dcp_box *region,
                                      int64_t flat_begin, int64_t flat_count,
                                      void *data);

/* Declare a tensor and add this rank's chunk of it as given by layout (see
 * dcp_layout_box). The layout is copied and kept with the item, so planning
 * can know every rank's box without communication.
 * Errors: as dcp_state_add_tensor, plus DCP_ENOTFOUND (this rank is not in
 * the layout's mesh) and DCP_EINVAL (layout and ndim disagree). */
DCP_API dcp_status dcp_state_add_sharded(dcp_state *st, const char *fqn,
                                         dcp_dtype dtype, uint32_t ndim,
                                         const int64_t *shape,
                                         const dcp_layout *layout, void *data);

/* Declare a tensor and add this rank's flat shard of it as given by layout
 * and flat_dims (see dcp_layout_flat_range): data holds the range's
 * elements, contiguous (NULL only for an empty range); it becomes up to
 * 2*ndim-1 chunks pointing into data. Every rank of the mesh can compute
 * every member's range, so a save whose states hold only layout tensors
 * (these and dcp_state_add_sharded's) and bytes items plans per rank
 * without gathering plans (docs/planner.md, "Flat layouts"), and the
 * metadata stores the tensor as the flat ranges of its layout's cells.
 * Loading into such a state fills the rank's range from any saved layout.
 * Errors: as dcp_state_add_sharded, plus DCP_EINVAL (bad flat_dims). */
DCP_API dcp_status dcp_state_add_flat_sharded(dcp_state *st, const char *fqn,
                                              dcp_dtype dtype, uint32_t ndim,
                                              const int64_t *shape,
                                              const dcp_layout *layout, uint32_t flat_dims,
                                              void *data);

/* Add a bytes item: an opaque blob of len bytes at data (NULL when len 0).
 * key follows the fqn rule (see dcp_state_add_tensor) and shares the fqns'
 * namespace.
 * Errors: DCP_ENAME, DCP_EINVAL (bad scope), DCP_EEXIST, DCP_ENOMEM. */
DCP_API dcp_status dcp_state_add_bytes(dcp_state *st, const char *key,
                                       dcp_scope scope, void *data,
                                       size_t len);

/* Number of tensor items and of bytes items in the state. */
DCP_API size_t dcp_state_tensor_count(const dcp_state *st);
DCP_API size_t dcp_state_bytes_count(const dcp_state *st);

/* ------------------------------------------------------------------------ */
/* Metadata view                                                            */
/* ------------------------------------------------------------------------ */

/* A read-only view of a checkpoint's global index (.metadata, format in
 * docs/format.md). Opening checks the magic, version, every section bound and
 * the whole-file checksum; tensor chunk lists are decoded on first access,
 * per tensor, so a reader that needs a few fqns pays for those only. A view
 * is not safe to use from several threads at once. */
typedef struct dcp_meta dcp_meta;

/* How the bytes of a storage ref are encoded. Values are stored: stable. */
typedef enum dcp_codec {
  DCP_CODEC_NONE = 0, /* blocks stored raw */
  DCP_CODEC_ZSTD = 1, /* each block a zstd frame, or raw when that is not
                         smaller; checksums of the decoded bytes (read only:
                         written by libdcp 0.2 before ZSTD_CHECKED) */
  DCP_CODEC_ZSTD_CHECKED = 2 /* as ZSTD, but each checksum covers the block as
                                stored, and each frame carries zstd's own
                                checksum of what it decodes to: every stored
                                bit is checked (what dcp_save writes) */
} dcp_codec;

/* Where the bytes of one chunk or bytes item are stored. The raw bytes are cut
 * into blocks of block_size (the last may be shorter); each block is stored
 * at the next position of the file, encoded by codec, and carries an xxh3-64
 * checksum: of its raw bytes, or of its stored bytes for
 * DCP_CODEC_ZSTD_CHECKED. Pointers are owned by the view.
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_storage_ref {
  uint32_t file;           /* index into the file table */
  dcp_codec codec;
  uint32_t block_size;     /* raw bytes per block, >= 1 */
  uint64_t offset;         /* file offset of the first stored block */
  uint64_t stored_length;  /* bytes occupied in the file */
  uint64_t raw_length;     /* bytes once decoded */
  uint64_t block_count;    /* ceil(raw_length / block_size) */
  const uint64_t *block_checksums;      /* block_count entries */
  const uint64_t *block_stored_lengths; /* block_count entries, or NULL when
                                           codec is DCP_CODEC_NONE */
} dcp_storage_ref;

/* One tensor of a view, filled by dcp_meta_tensor.
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_tensor_info {
  const char *fqn;
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[DCP_MAX_NDIM];
  uint64_t chunk_count;
} dcp_tensor_info;

/* One saved chunk of a tensor, filled by dcp_meta_chunk.
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_chunk_info {
  dcp_box box;
  dcp_storage_ref ref;
} dcp_chunk_info;

/* One saved bytes item, filled by dcp_meta_bytes.
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_bytes_info {
  const char *key;
  dcp_scope scope;
  int32_t rank; /* saving rank for DCP_SCOPE_PER_RANK, -1 for replicated */
  dcp_storage_ref ref;
} dcp_bytes_info;

/* Open a view of an encoded metadata buffer. The buffer is copied; the
 * caller may free it afterwards. Format version 4 is opened without a pass
 * over the whole buffer: chunk lists are verified when first used, the
 * trailer by dcp_verify.
 * Errors (reason on ctx, which may be NULL): DCP_ECORRUPT (bad magic,
 * truncated, a bound or count that does not fit, checksum mismatch),
 * DCP_EVERSION (a newer format), DCP_ENOMEM. On error *out is NULL. */
DCP_API dcp_status dcp_meta_open_memory(dcp_ctx *ctx, const void *data,
                                        size_t len, dcp_meta **out);

DCP_API void dcp_meta_free(dcp_meta *meta);

/* Format version of the encoded buffer and the save-time world size. */
DCP_API uint32_t dcp_meta_format_version(const dcp_meta *meta);
DCP_API int32_t dcp_meta_world_size(const dcp_meta *meta);

/* Tensors, sorted by fqn (bytewise). */
DCP_API size_t dcp_meta_tensor_count(const dcp_meta *meta);
/* Errors: DCP_ENOTFOUND (index out of range). */
DCP_API dcp_status dcp_meta_tensor(const dcp_meta *meta, size_t index,
                                   dcp_tensor_info *out);
/* Index of the tensor named fqn (binary search). Errors: DCP_ENOTFOUND. */
DCP_API dcp_status dcp_meta_find_tensor(const dcp_meta *meta, const char *fqn,
                                        size_t *index);

/* Chunk `chunk` of tensor `tensor`, chunks sorted by box offset
 * (lexicographic), except the flat (ZeRO/FSDP) ranges of a layout's cells
 * in format version 4: cell by cell, range by range (docs/format.md,
 * "Derived chunk lists"). Decodes that tensor's chunk list on first use
 * (a version 4 grid or flat list: only the window of 128 chunks that holds
 * this one, verified by its own checksum).
 * Errors: DCP_ENOTFOUND (index out of range), DCP_ECORRUPT (the tensor's
 * chunk list is malformed), DCP_ENOMEM. */
DCP_API dcp_status dcp_meta_chunk(dcp_meta *meta, size_t tensor, size_t chunk,
                                  dcp_chunk_info *out);

/* Bytes items, sorted by (key, rank). Errors: DCP_ENOTFOUND. */
DCP_API size_t dcp_meta_bytes_count(const dcp_meta *meta);
DCP_API dcp_status dcp_meta_bytes(const dcp_meta *meta, size_t index,
                                  dcp_bytes_info *out);

/* Data files, referenced by dcp_storage_ref.file. Errors: DCP_ENOTFOUND. */
DCP_API size_t dcp_meta_file_count(const dcp_meta *meta);
DCP_API dcp_status dcp_meta_file(const dcp_meta *meta, size_t index,
                                 const char **name);

/* The length in bytes the save recorded for data file index (since format
 * version 2; dcp_verify checks it). Errors: DCP_EINVAL (NULL), DCP_ENOTFOUND
 * (no such file, or a version-1 checkpoint that recorded none). */
DCP_API dcp_status dcp_meta_file_length(const dcp_meta *meta, size_t index,
                                        uint64_t *length);

/* Which save wrote a checkpoint (format version 2; docs/reliability.md).
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_save_identity {
  uint8_t id[16];      /* random per save (an uncoordinated save: from its
                          save_id option), never all zero */
  uint64_t generation; /* 1 for a directory's first save, then one more than
                          the checkpoint the save replaced */
  int32_t part_rank;   /* -1: a whole checkpoint; else the rank whose part of
                          an uncoordinated save this metadata is */
} dcp_save_identity;

/* The identity of the save that wrote meta. Errors: DCP_EINVAL (NULL),
 * DCP_ENOTFOUND (a version-1 checkpoint, or metadata built without one). */
DCP_API dcp_status dcp_meta_identity(const dcp_meta *meta, dcp_save_identity *out);

/* One save-time mesh of a checkpoint: the device mesh a save's layouts were
 * built on (dcp_layout_create), recorded once per distinct mesh by saves
 * since 0.3 (format 3). The arrays belong to the view and live until
 * dcp_meta_free. Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_mesh_info {
  uint32_t ndim;        /* 1..DCP_MAX_MESH_NDIM */
  const int64_t *shape; /* ndim extents */
  const int32_t *ranks; /* prod(shape) save-time ranks, row-major mesh order */
} dcp_mesh_info;

/* Number of save-time meshes (0 for checkpoints saved without layouts,
 * imports, and formats before 3). */
DCP_API size_t dcp_meta_mesh_count(const dcp_meta *meta);

/* Mesh `index`. Errors: DCP_EINVAL (NULL), DCP_ENOTFOUND (index out of
 * range). */
DCP_API dcp_status dcp_meta_mesh(const dcp_meta *meta, size_t index, dcp_mesh_info *out);

/* The layout tensor `tensor` was saved with: *mesh gets its mesh's index
 * and tensor_map (may be NULL) the tensor's ndim masks, as given to
 * dcp_layout_create (bit k: mesh dimension k shards that tensor dimension).
 * Errors: DCP_EINVAL (NULL meta or mesh), DCP_ENOTFOUND (no such tensor, or
 * one saved without a layout: its chunks were added by hand, imported, or
 * merged from parts). */
DCP_API dcp_status dcp_meta_tensor_layout(const dcp_meta *meta, size_t tensor, size_t *mesh,
                                          uint32_t *tensor_map);

/* User key/values (step, framework, ...), sorted by key. */
DCP_API size_t dcp_meta_kv_count(const dcp_meta *meta);
DCP_API dcp_status dcp_meta_kv(const dcp_meta *meta, size_t index,
                               const char **key, const char **value);


/* ------------------------------------------------------------------------ */
/* Save and load                                                            */
/* ------------------------------------------------------------------------ */

/* Who writes an item that several ranks hold. Values are stable. */
typedef enum dcp_policy {
  DCP_POLICY_BALANCED = 0,   /* balance bytes written (read) across holders */
  DCP_POLICY_LOWEST_RANK = 1 /* always the lowest holder */
} dcp_policy;

#define DCP_SAVE_OVERWRITE 1u /* replace a committed checkpoint at path: the
                                 old one stays loadable until the new one
                                 commits, and its files are removed after */
#define DCP_SAVE_COMPRESS 2u  /* zstd-compress each block (kept raw when that
                                 does not make it smaller) */
#define DCP_SAVE_IN_PLACE 4u  /* with DCP_SAVE_OVERWRITE: un-commit and remove
                                 the old checkpoint before writing (once the
                                 plan and any replica check passed), so that
                                 the directory never holds both (less space; no
                                 checkpoint at path until the new one commits) */
#define DCP_SAVE_CHECK_REPLICAS 8u /* before writing, compare every holder's
                                 copy of each replicated box and bytes item
                                 (dcp_check_replicas): a mismatch fails the
                                 save with DCP_EREPLICA, nothing written or
                                 committed (async saves: their writers check
                                 the staged copies). Needs a collective (a
                                 detached rank: DCP_EINVAL) */

typedef struct dcp_save_options {
  uint32_t struct_size; /* sizeof(dcp_save_options), set by init */
  uint32_t flags;       /* DCP_SAVE_* */
  uint32_t block_size;  /* raw bytes per checksummed block, 4 KiB to 1 GiB
                           (DCP_EINVAL otherwise; default 4 MiB, also for
                           0) */
  int32_t zstd_level;   /* with DCP_SAVE_COMPRESS (default 3, also for 0) */
  dcp_policy policy;    /* default DCP_POLICY_BALANCED */
  size_t nkv;           /* user key/values stored in .metadata (step, ...):
                           keys follow the fqn rule, values are valid
                           UTF-8 (else DCP_EINVAL: they become JSON) */
  const char *const *kv_keys;
  const char *const *kv_values;
  /* -- since 0.3 -- */
  uint64_t save_id;     /* an uncoordinated save's identity (a detached
                           rank, or async coordination "none" without a
                           trainer collective): the same on every rank of
                           one save and different between saves, e.g. the
                           step; 0 (default) is refused there. Ignored by
                           coordinated saves, which make their own. */
} dcp_save_options;

/* Fill opts with the defaults. */
DCP_API void dcp_save_options_init(dcp_save_options *opts);

/* Save st as a checkpoint in the directory path (created, one level, when
 * missing). Collective over the context's ranks: every rank calls it with
 * its own state and the same path and options (the same string: a rank
 * that passes another path, or another DCP_SAVE_CHECK_REPLICAS, makes the
 * save DCP_EINVAL on every rank, nothing committed).
 *
 * Replicated chunks (the same (fqn, box) on several ranks) are written once;
 * each rank streams what it was assigned into its own data file in
 * checksummed blocks, syncs it, and the coordinator commits .metadata
 * atomically (temporary name, sync, rename, directory sync). A checkpoint
 * without .metadata does not exist. An error on any rank makes every rank
 * return an error (the failing rank's code; the message names that rank).
 *
 * Every save has an identity (a random id and a generation, recorded in
 * .metadata and in the name of every file it writes), holds the
 * directory's lease while it runs (one save per directory at a time, also
 * across hosts of a shared file system), and commits only over the
 * checkpoint it saw when it started: a save that finds the directory taken
 * fails with DCP_EBUSY before writing anything, and one that finds at
 * commit time that another save committed meanwhile (or that it lost its
 * lease while stalled) fails with DCP_ESTALE and commits nothing
 * (docs/reliability.md).
 * path may be, or pass through, a symbolic link; an entry inside the
 * directory that is one (a planted data file, .metadata or temporary name)
 * is never followed: the save (or a load) fails with DCP_EIO, "... is a
 * symbolic link", and the link's target is left untouched.
 * Errors: DCP_EEXIST (a committed checkpoint is at path and
 * DCP_SAVE_OVERWRITE is not set), DCP_EBUSY, DCP_ESTALE, DCP_EREPLICA (with
 * DCP_SAVE_CHECK_REPLICAS: two holders of a replicated box differ), DCP_EINVAL (an
 * uncoordinated save without save_id), the planner's DCP_EMISMATCH, DCP_EOVERLAP,
 * DCP_EBOUNDS, DCP_EINCOMPLETE, DCP_ESCOPE, DCP_EOVERFLOW, storage errors
 * DCP_EIO, DCP_ENOSPC, collective errors DCP_ETIMEDOUT, DCP_EPEER,
 * DCP_EINVAL, DCP_ENOMEM. opts may be NULL for the defaults. */
DCP_API dcp_status dcp_save(dcp_ctx *ctx, dcp_state *st, const char *path,
                            const dcp_save_options *opts);


#define DCP_LOAD_METADATA_PER_RANK 1u /* every rank reads .metadata itself
                                         instead of rank 0 broadcasting it */
#define DCP_LOAD_NO_PIPELINE 2u       /* read dedup: read everything first,
                                         then broadcast (no reader thread
                                         overlapping reads with broadcasts) */

/* Read dedup (dcp_load_options.read_dedup): ranks that load the identical
 * (fqn, box) form a group; one member reads it and broadcasts it to the
 * others. Values are stable. */
typedef enum dcp_read_dedup {
  DCP_READ_DEDUP_AUTO = 0, /* when the collective has DCP_COLL_CAP_BULK and
                              DCP_COLL_CAP_GROUPS (mpi, gloo) and the ranks
                              span more than one host; otherwise every rank
                              reads for itself (file exchange; every rank on
                              one host, where the page cache already reads a
                              shared block from storage once and a copy from
                              it is cheaper than a broadcast) */
  DCP_READ_DEDUP_OFF = 1,  /* every rank reads everything it loads */
  DCP_READ_DEDUP_ON = 2    /* whenever the collective has DCP_COLL_CAP_GROUPS,
                              even without an efficient bulk path or on one
                              host (storage without a shared page cache:
                              O_DIRECT, some network file systems), with
                              partial-overlap sharing */
} dcp_read_dedup;

typedef struct dcp_load_options {
  uint32_t struct_size; /* sizeof(dcp_load_options), set by init */
  uint32_t flags;       /* DCP_LOAD_* */
  /* -- read dedup -- every rank must pass the same read_dedup and
     reader_policy (DCP_EINVAL on all ranks otherwise) */
  dcp_read_dedup read_dedup;   /* default DCP_READ_DEDUP_AUTO */
  dcp_policy reader_policy;    /* who reads for a group: DCP_POLICY_BALANCED
                                  (default: balance bytes read across ranks)
                                  or DCP_POLICY_LOWEST_RANK */
  uint64_t max_inflight_bytes; /* how far reads may run ahead of the
                                  broadcasts, in bytes read and not yet
                                  broadcast (at least one item always may);
                                  default 256 MiB, 0 = default */
} dcp_load_options;

/* Fill opts with the defaults. */
DCP_API void dcp_load_options_init(dcp_load_options *opts);

/* Load the checkpoint at path into st: every chunk of every tensor item is
 * filled from the saved chunks it intersects (any saved layout: resharding
 * happens here), reading only the blocks it needs and verifying each
 * block's checksum; bytes items get their saved bytes (PER_RANK ones the
 * bytes this rank saved). Collective over the context's ranks.
 * With read dedup (see dcp_read_dedup) each distinct (fqn, box) that
 * several ranks load is read by one of them, balanced across ranks, and
 * broadcast to the others; reads overlap the broadcasts (a reader thread)
 * unless DCP_LOAD_NO_PIPELINE is set.
 * A load assembles files of one save only. One that runs while a save
 * replaces the checkpoint loads the old checkpoint, or starts over on the
 * new one when the old one's files are removed under it (at most 4 times,
 * then DCP_ESTALE).
 * An uncoordinated checkpoint (parts per rank) loads as the newest save
 * every rank of its world committed; parts of other saves are never mixed
 * in, and copies of a replicated chunk or bytes item that differ between
 * ranks are DCP_EMISMATCH / DCP_ESCOPE.
 * Errors: DCP_EINCOMPLETE (no committed .metadata, or a chunk not covered by
 * the checkpoint), DCP_ENOTFOUND (an fqn or key the checkpoint lacks),
 * DCP_EMISMATCH (dtype, shape or bytes length differs), DCP_ESCOPE (a
 * PER_RANK item with another world size), DCP_ECORRUPT (a checksum or the
 * metadata fails; the message names file, fqn and box), DCP_EIO,
 * DCP_ETIMEDOUT, DCP_EPEER, DCP_EINVAL, DCP_ENOMEM. A failed load may have
 * written parts of the destination buffers. opts may be NULL. */
DCP_API dcp_status dcp_load(dcp_ctx *ctx, dcp_state *st, const char *path,
                            const dcp_load_options *opts);

/* Open a view of the committed .metadata of the checkpoint at path, read on
 * this rank alone (not collective). Errors: DCP_EINCOMPLETE (not committed),
 * DCP_ENOTFOUND (no such directory), DCP_ECORRUPT, DCP_EVERSION, DCP_EIO,
 * DCP_ENOMEM. The view must be freed before ctx. */
DCP_API dcp_status dcp_meta_open(dcp_ctx *ctx, const char *path, dcp_meta **out);

/* What the last dcp_save or dcp_load on a context did, on this rank.
 * Grows (fields are appended): the caller's struct_size says how much of
 * it the library writes. */
typedef struct dcp_stats {
  uint32_t struct_size; /* set by dcp_ctx_stats from the caller's value */
  double plan_s;        /* planning, incl. gathering and scattering plans */
  double write_s;       /* writing and syncing this rank's data */
  double commit_s;      /* gathering write results, writing .metadata */
  double read_s;        /* reading, verifying and copying data (load) */
  double total_s;
  uint64_t bytes_written, write_ops; /* storage counters of this rank */
  uint64_t bytes_read, read_ops;
  uint64_t sync_ops, meta_ops;
  uint64_t coll_bytes, coll_ops;     /* bytes this rank sent + received */
  uint64_t items_written;            /* chunks and bytes items written */
  uint64_t data_bytes;               /* tensor/bytes payload written or loaded */
  /* -- load read dedup -- */
  uint64_t data_read_bytes;    /* storage bytes read from data files (load;
                                  .metadata reads excluded) */
  uint64_t read_payload_bytes; /* tensor bytes this rank read from storage:
                                  its own chunks and those it read for a group */
  uint64_t dedup_sent_bytes;   /* tensor bytes it broadcast as a group's reader */
  uint64_t dedup_recv_bytes;   /* tensor bytes it received from a group's reader */
  uint64_t dedup_groups;       /* groups of >= 2 ranks it belongs to */
  uint32_t dedup_path;         /* 0: no dedup (every rank read for itself),
                                  1: groups from the layouts, 2: groups from
                                  the exchange of request keys */
  /* -- save plan cache -- */
  uint32_t plan_cache_hit;     /* 1 when this save reused a cached global
                                  plan (no gather/scatter of plans) */
  uint64_t plan_coll_bytes;    /* collective bytes of the plan phase */
  /* -- memory tier (docs/recovery.md), load -- */
  uint64_t mem_read_bytes;     /* data-file bytes read from this rank's
                                  snapshot in host memory (not storage) */
  uint64_t mem_fallback_bytes; /* bytes from that snapshot that failed
                                  their block checksum and were read again
                                  from storage */
  uint32_t mem_tier;           /* DCP_MEMTIER_*: what the load did with
                                  this rank's snapshot */
  uint64_t peer_recv_bytes;    /* bytes of this rank's snapshot pulled from a
                                  peer's memory (DCP_MEMTIER_PEER) */
  /* -- save planning (docs/planner.md, "Per-rank planning") -- */
  uint32_t save_plan_path;     /* 0: local plans gathered, a global plan
                                  built (or cached); 1: per-rank planning
                                  from layouts, one digest per mesh sent */
} dcp_stats;

/* Copy the statistics of ctx's last save or load into *out. Set
 * out->struct_size to sizeof(dcp_stats) first; fields past it are not
 * written. Errors: DCP_EINVAL. */
DCP_API dcp_status dcp_ctx_stats(const dcp_ctx *ctx, dcp_stats *out);


/* ------------------------------------------------------------------------ */
/* Conversion and verification                                              */
/* ------------------------------------------------------------------------ */

/* These functions run on the calling rank alone: they are not collective
 * and may be called on any context (a world of one is the usual case, e.g.
 * the `dcp` command). All their I/O goes through the context's storage
 * plugin; a path to a file is split into its directory (the plugin's root)
 * and its plain name. docs/conversion.md describes them. */

/* Progress of a long conversion or verification: done of total bytes of
 * tensor data. Called from the thread that runs the operation, at most a
 * few times per MiB; it must not call into the library with ctx. */
typedef void (*dcp_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Have dcp_import_safetensors, dcp_export_safetensors and dcp_verify on
 * ctx report progress to fn(arg, ...), or stop doing so (fn NULL). */
DCP_API void dcp_ctx_set_progress(dcp_ctx *ctx, dcp_progress_fn fn, void *arg);

#define DCP_IMPORT_LINK 1u /* write only .metadata, pointing into the
                              .safetensors files themselves (no copy) */

/* Import safetensors into a checkpoint at ckpt (created, one level, when
 * missing). src is a .safetensors file or a *.safetensors.index.json of a
 * sharded set (its weight_map names the shards, in src's directory). Every
 * header is parsed strictly (see docs/conversion.md); __metadata__ entries
 * become the checkpoint's user key/values (the same key with different
 * values in two shards is DCP_ECORRUPT).
 * Without flags, tensor data is copied into one data file in checksummed
 * blocks (tensors over 64 MiB become several chunks), then .metadata is
 * committed atomically. With DCP_IMPORT_LINK only .metadata is written: its
 * storage refs point into the .safetensors files (raw blocks whose
 * checksums are computed by reading each file once), so ckpt must be the
 * directory that holds them, and the files must not change afterwards (a
 * change is caught by the block checksums at load or verify).
 * Single rank, not collective.
 * Errors: DCP_EEXIST (a committed checkpoint is at ckpt), DCP_EINVAL (NULL
 * or empty paths, unknown flags, DCP_IMPORT_LINK with ckpt not src's
 * directory), DCP_ENAME (a tensor name breaks the fqn rule), DCP_ECORRUPT
 * (a malformed header or index: the reason names the file and the tensor),
 * DCP_ENOTFOUND (a missing file), DCP_EIO,
 * DCP_ENOSPC, DCP_ENOMEM. Message on ctx. */
DCP_API dcp_status dcp_import_safetensors(dcp_ctx *ctx, const char *src, const char *ckpt,
                                          uint32_t flags);

/* Export the checkpoint at ckpt to safetensors in the directory outdir
 * (created, one level, when missing). With max_shard_bytes 0, or when all
 * tensor data fits in one shard, writes outdir/model.safetensors; else
 * tensors (in fqn order) are packed into shards of at most max_shard_bytes
 * of data each (a larger tensor gets a shard of its own), written as
 * model-00001-of-0000N.safetensors, plus model.safetensors.index.json
 * (metadata.total_size and weight_map). User key/values become
 * __metadata__ of every file. Each tensor is streamed from its chunks in
 * 32 MiB windows (memory is bounded whatever the tensor's size), checking
 * every block checksum. Bytes items are not exported
 * (safetensors has no place for them). Each file is written under a
 * temporary name and renamed into place. Single rank, not collective.
 * Errors: DCP_EINCOMPLETE (not committed, or a tensor not fully covered),
 * DCP_ECORRUPT, DCP_EINVAL, DCP_EIO, DCP_ENOSPC, DCP_ENOMEM. */
DCP_API dcp_status dcp_export_safetensors(dcp_ctx *ctx, const char *ckpt, const char *outdir,
                                          uint64_t max_shard_bytes);

/* Read tensor number `tensor` of the view meta (opened on the checkpoint at
 * ckpt) whole into buf, row-major, len bytes (= numel * dtype size),
 * verifying every block it reads. Single rank, not collective.
 * Errors: DCP_EINVAL (NULL, len not the tensor's size), DCP_ENOTFOUND
 * (index out of range, a missing file), DCP_EINCOMPLETE (the chunks do not
 * cover the tensor), DCP_ECORRUPT (a checksum; the message names file,
 * block and fqn), DCP_EIO, DCP_ENOMEM. */
DCP_API dcp_status dcp_read_tensor(dcp_ctx *ctx, const char *ckpt, dcp_meta *meta,
                                   size_t tensor, void *buf, size_t len);

#define DCP_VERIFY_MSG_MAX 512

/* What dcp_verify found. Grows (fields are appended): the caller's
 * struct_size says how much of it the library writes. */
typedef struct dcp_verify_report {
  uint32_t struct_size;    /* sizeof(dcp_verify_report), set by the caller */
  uint64_t tensors;        /* tensors checked */
  uint64_t chunks;         /* chunks read */
  uint64_t bytes_items;    /* bytes items read */
  uint64_t blocks;         /* blocks whose checksum was checked */
  uint64_t bytes;          /* raw bytes checked */
  uint64_t problems;       /* corrupt blocks, uncovered tensors, ... */
  dcp_status first_status; /* DCP_OK, or the first problem's code */
  char first_problem[DCP_VERIFY_MSG_MAX]; /* "" or the first problem */
} dcp_verify_report;

/* Verify the checkpoint at ckpt: every block of every chunk and bytes item
 * is read and its checksum checked, and every tensor must be exactly
 * covered (its chunks' volumes sum to its element count and no two chunks
 * overlap), and no two chunks or bytes items may be stored in the same
 * bytes of a data file (a forged .metadata whose checksums all match, which
 * a load cannot tell from an honest one). Keeps going after a problem to
 * count them all. out may be NULL;
 * otherwise set out->struct_size first. Single rank, not collective.
 * Returns DCP_OK when all is well, DCP_ECORRUPT (a checksum, a chunk
 * overlap, shared stored bytes, unreadable metadata), DCP_EINCOMPLETE (not committed, a tensor
 * not covered, a missing data file), or DCP_EINVAL, DCP_EIO, DCP_ENOMEM;
 * the first problem's description is on ctx and in out. */
DCP_API dcp_status dcp_verify(dcp_ctx *ctx, const char *ckpt, dcp_verify_report *out);

/* ------------------------------------------------------------------------ */
/* Async save                                                               */
/* ------------------------------------------------------------------------ */

/* An async save returns once this rank's chunks and bytes items are copied
 * ("staged") into a reusable shared-memory pool; a writer process
 * (dcp-writer, spawned once per context with posix_spawn) then plans,
 * coordinates with the other ranks' writers, writes and commits exactly as
 * dcp_save would. docs/async.md describes the design and failure semantics.
 * The writer is found through $DCP_WRITER, else next to libdcp
 * (../bin, ../libexec, ../libexec/dcp), else $PATH. */
typedef struct dcp_async dcp_async;

/* Copies len bytes from a chunk's data (src, as given to the state) into
 * the staging pool (dst, host shared memory). Lets a framework stage device
 * memory (a D2H copy). Must be complete when it returns. */
typedef void (*dcp_async_copy_fn)(void *arg, void *dst, const void *src, size_t len);

/* Stage tensor chunks of later async saves on ctx with fn(arg, ...) instead
 * of the default (memcpy, split over a few threads for copies of 64 MiB and
 * more); fn NULL restores the default. Bytes items are always memcpy'd.
 * Errors: DCP_EINVAL (NULL ctx), DCP_ENOMEM. */
DCP_API dcp_status dcp_async_set_copy(dcp_ctx *ctx, dcp_async_copy_fn fn, void *arg);

/* A copy callback that can fail (a D2H copy that reported an error): 0
 * when the len bytes are in dst, anything else when they are not. */
typedef int (*dcp_async_copy_checked_fn)(void *arg, void *dst, const void *src, size_t len);

/* As dcp_async_set_copy, with a callback that can fail (since 0.3; a
 * dcp_async_copy_fn cannot, so a failed device copy would be saved as
 * whatever the pool held). Staging stops at the first chunk whose copy
 * returns non-zero and the save fails with DCP_EIO, its message naming the
 * chunk (index, size) and the value returned: dcp_async_save returns it in
 * blocking mode, dcp_async_fence in background mode, dcp_async_wait in
 * both; nothing is committed, the other ranks' saves fail with it too (at
 * once: the refusal reaches them through the writers' first agreement),
 * and the next async save of ctx starts as usual. Replaces a callback set
 * with dcp_async_set_copy, and the other way round; fn NULL restores the
 * default. Errors: DCP_EINVAL (NULL ctx), DCP_ENOMEM. */
DCP_API dcp_status dcp_async_set_copy_checked(dcp_ctx *ctx, dcp_async_copy_checked_fn fn,
                                              void *arg);

/* The coll value of dcp_async_set_coordination that makes the writers
 * save without talking to each other: an uncoordinated save (each writer
 * commits its own rank's part; docs/save-load.md). */
#define DCP_ASYNC_UNCOORDINATED "none"

/* How the writers of ctx's ranks coordinate: a collective plugin coll
 * ("file": file exchange in the shared directory rendezvous; "gloo"; "mpi"
 * is not offered to writers, which MPI does not launch) with its
 * rendezvous and options (NULL options: "job=dcpwriter", so the trainer's
 * own file collective may share the directory), or DCP_ASYNC_UNCOORDINATED.
 * Needed before the first async save when the world has more than one
 * rank; a world of one uses "single". Takes effect when the writer is
 * (re)started.
 * Errors: DCP_EINVAL (NULL ctx or coll), DCP_ENOMEM. */
DCP_API dcp_status dcp_async_set_coordination(dcp_ctx *ctx, const char *coll,
                                              const char *rendezvous,
                                              const char *coll_options);

/* Start an async save of st to path (see dcp_save; collective in the same
 * way: every rank calls it). Waits first for a previous async save of ctx
 * that is still persisting (the pool is reused), starts the writer when
 * there is none (or the previous one died), copies every local chunk and
 * bytes item of st into the pool, hands the job to the writer and returns:
 * st's memory may be changed or freed as soon as it returns. *out receives
 * a handle to wait on and free.
 * Errors (on ctx): DCP_EINVAL (NULL arguments, st of another context, a
 * multi-rank world without dcp_async_set_coordination), DCP_ENOTFOUND (no
 * dcp-writer; the message lists the paths tried), DCP_ENOMEM (the pool),
 * DCP_EIO, DCP_EPEER (the writer could not be reached). Errors of the save
 * itself come from dcp_async_wait. */
DCP_API dcp_status dcp_async_save(dcp_ctx *ctx, dcp_state *st, const char *path,
                                  const dcp_save_options *opts, dcp_async **out);

/* Whether h's save has finished (persisted or failed): *done 1 or 0.
 * Never blocks. Errors: DCP_EINVAL (NULL). */
DCP_API dcp_status dcp_async_test(dcp_async *h, int *done);

/* Wait until h's save has finished and return its outcome, with the same
 * semantics as dcp_save on every rank (the writers agree through their
 * collective); the message goes to the context's last error. A writer that
 * died before finishing gives DCP_EPEER. With DCP_ASYNC_UNCOORDINATED the
 * writers never talk: a rank's wait covers its own rank's part only, and
 * the checkpoint is loadable once every rank's wait has returned DCP_OK.
 * After the wait, dcp_ctx_stats reports the writer's figures of the save.
 * May be called more than once. */
DCP_API dcp_status dcp_async_wait(dcp_async *h);

/* As dcp_async_wait, with a deadline: returns DCP_ETIMEDOUT (message on
 * the context) when h's save has not finished within timeout_ms, and the
 * save goes on: wait again, or give up with dcp_async_abort. timeout_ms < 0
 * waits without limit (exactly dcp_async_wait); 0 polls.
 * Errors: DCP_EINVAL (NULL), DCP_ETIMEDOUT, or the save's own outcome. */
DCP_API dcp_status dcp_async_wait_for(dcp_async *h, int64_t timeout_ms);

/* Give up on h's save if it is still persisting: the writer process is
 * killed (SIGKILL) and reaped, and h finishes with DCP_EPEER. The
 * checkpoint being written is left uncommitted (never half-committed: a
 * later dcp_load refuses it, and the next successful save to that path
 * removes what it left); the other ranks' writers fail their collectives
 * within the context's timeout. The next async save starts a new writer.
 * Returns h's outcome (DCP_OK when the save had already finished well).
 * Errors: DCP_EINVAL (NULL), DCP_EPEER. */
DCP_API dcp_status dcp_async_abort(dcp_async *h);

/* Free a handle; waits for its save first when it is still running.
 * NULL is a no-op. */
DCP_API void dcp_async_free(dcp_async *h);

/* Wait for ctx's pending async save, stop its writer process (reaped: no
 * zombie) and free its staging pool. Call before dcp_ctx_free on a context
 * that saved asynchronously (dcp_ctx_free does it too). A no-op otherwise.
 * The wait has no deadline of its own, so that a long save is never cut
 * short at exit: to bound it, call dcp_async_wait_for and, if that times
 * out, dcp_async_abort first. Handles not freed yet stay valid after it
 * (and after dcp_ctx_free): wait, test, fence and abort return their save's
 * outcome (no message goes to a context any more), and dcp_async_free
 * frees them. */
DCP_API void dcp_async_shutdown(dcp_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Async save: background staging, the fence, prepare (since 0.3)           */
/* ------------------------------------------------------------------------ */

/* How dcp_async_save stages. Values are stable. */
typedef enum dcp_async_staging {
  DCP_ASYNC_STAGE_BLOCKING = 0,  /* default: dcp_async_save returns once the
                                    copy into the pool is done */
  DCP_ASYNC_STAGE_BACKGROUND = 1 /* dcp_async_save returns before the copy:
                                    a staging thread of the library copies
                                    (through the copy callback, if set) and
                                    hands the job to the writer;
                                    dcp_async_fence waits for that */
} dcp_async_staging;

/* Stage later async saves of ctx in mode (waits first for a save still
 * pending). With DCP_ASYNC_STAGE_BACKGROUND the caller must keep every
 * buffer the state names alive and unchanged until dcp_async_fence (or
 * dcp_async_wait or dcp_async_free, which imply it) returns for that save
 * (the state itself may be freed or changed once dcp_async_save returned:
 * the staging thread reads the buffers only):
 * call the fence before the step that mutates them (the optimizer step),
 * after the compute that only reads them. A copy callback is then called
 * on the staging thread (a framework's D2H copy must use a stream it may
 * drive from another thread, e.g. a side stream).
 * Errors: DCP_EINVAL (NULL ctx, unknown mode), DCP_ENOMEM. */
DCP_API dcp_status dcp_async_set_staging(dcp_ctx *ctx, dcp_async_staging mode);

/* Wait until h's save is staged: its bytes are in the pool and the job is
 * in the writer's hands, so the state's buffers may change (and the state
 * be freed). Blocks for the staging only, never for the writing; returns
 * at once for a save staged in blocking mode. May be called more than
 * once. dcp_async_wait (and dcp_async_test's done) imply it.
 * Errors: DCP_EINVAL (NULL), or the staging's failure, message on the
 * context: DCP_EPEER (the writer died during staging or could not be
 * reached; dcp_async_wait returns it too, nothing is committed, and the
 * next save starts a new writer), DCP_EIO. */
DCP_API dcp_status dcp_async_fence(dcp_async *h);

/* Make ctx ready for its first async save ahead of time, so that the save
 * costs no more than the later ones: start the writer process, size the
 * staging pool for st's chunks and bytes items (st may be NULL: no pool
 * yet) and pre-fault it, and have the writer open its context — and so the
 * writers' collective — while training goes on. Collective like a save:
 * every rank calls it (the writers rendezvous; a writer whose peers never
 * come fails its open at the context's timeout, and the first save tries
 * again). Waits first for a save still pending. Call it after
 * dcp_async_set_coordination; a later state that needs more grows the pool.
 * Errors (on ctx): DCP_EINVAL (NULL ctx, st of another context, a
 * multi-rank world without coordination), DCP_ENOTFOUND (no dcp-writer),
 * DCP_ENOMEM (the pool), DCP_EIO, DCP_EPEER. A failure of the writer's
 * own open is reported by the first save. */
DCP_API dcp_status dcp_async_prepare(dcp_ctx *ctx, const dcp_state *st);

/* ------------------------------------------------------------------------ */
/* Progress by phase, and ranged tensor reads                               */
/* ------------------------------------------------------------------------ */

/* What a phase progress report counts. Each phase reports bytes done of a
 * total known when the phase starts; done only grows and ends at total when
 * the phase succeeds. Values are stable (appended, never renumbered). */
typedef enum dcp_phase {
  DCP_PHASE_SAVE_WRITE = 1, /* dcp_save: this rank's chunk and bytes-item
                               bytes written to its data file */
  DCP_PHASE_LOAD_READ = 2,  /* dcp_load: bytes of this rank's chunks read
                               (for itself and for its dedup groups) */
  DCP_PHASE_IMPORT = 3,     /* dcp_import_safetensors: tensor bytes read */
  DCP_PHASE_EXPORT = 4,     /* dcp_export_safetensors: tensor bytes placed */
  DCP_PHASE_VERIFY = 5      /* dcp_verify: raw bytes checked */
} dcp_phase;

/* The phase's name ("save", "load", "import", "export", "verify"), or
 * "unknown". Static storage. */
DCP_API const char *dcp_phase_name(dcp_phase phase);

/* A phase progress callback: done of total bytes of phase. Called on the
 * thread doing the work (for a load, possibly its reader thread, never two
 * at once for one operation), after each chunk, item or window: often for
 * small chunks, so keep it cheap and rate-limit any drawing. It must not call
 * into the library with the context it reports on. */
typedef void (*dcp_phase_progress_fn)(void *arg, dcp_phase phase, uint64_t done,
                                      uint64_t total);

/* Have dcp_save, dcp_load, dcp_import_safetensors, dcp_export_safetensors
 * and dcp_verify on ctx report to fn(arg, ...), or stop (fn NULL). Each rank
 * reports its own bytes; saves of a detached rank (no collective) and async
 * saves (their writer process) report nothing. Independent of
 * dcp_ctx_set_progress: both are called when both are set. NULL ctx is a
 * no-op. Not thread-safe against a running operation on ctx. */
DCP_API void dcp_ctx_set_phase_progress(dcp_ctx *ctx, dcp_phase_progress_fn fn, void *arg);

/* Read bytes [offset, offset + len) of the row-major image of tensor number
 * `tensor` of the view meta (opened on the checkpoint at ckpt) into buf,
 * verifying every block read: only the blocks that hold those bytes are
 * read, so a tensor of any size can be streamed through a small buffer
 * (what `dcp diff` does). Coverage is checked on every call. Single rank,
 * not collective.
 * Errors: DCP_EINVAL (NULL, the range outside the tensor), DCP_ENOTFOUND
 * (index out of range, a missing file), DCP_EINCOMPLETE (the chunks do not
 * cover the tensor), DCP_ECORRUPT (a checksum; the message names file,
 * block and fqn), DCP_EIO, DCP_ENOMEM. Message on ctx. */
DCP_API dcp_status dcp_read_tensor_range(dcp_ctx *ctx, const char *ckpt, dcp_meta *meta,
                                         size_t tensor, uint64_t offset, void *buf,
                                         size_t len);

/* ------------------------------------------------------------------------ */
/* Replica check: silent data corruption across replicas                    */
/* ------------------------------------------------------------------------ */

/* A box held by several ranks (data-parallel copies, a replica group of a
 * layout) is written once, by one holder: a flipped bit in another holder's
 * memory would go unnoticed until that copy diverges the training. The
 * replica check has every holder hash its copy (xxh3-64 of the chunk's
 * bytes) and compares the hashes of each box's holders in one small
 * exchange (8 bytes per local chunk and bytes item, gathered at rank 0, and
 * a broadcast of the verdict). docs/reliability.md, "Replica corruption". */

#define DCP_CHECK_REPORT_ONLY 1u /* count and describe mismatches in the
                                    report, return DCP_OK */

/* What a replica check found. Grows (fields are appended): the caller's
 * struct_size says how much of it the library writes. */
typedef struct dcp_replica_report {
  uint32_t struct_size;    /* sizeof(dcp_replica_report), set by the caller */
  dcp_status status;       /* DCP_OK, DCP_EREPLICA (mismatches found, also
                              with DCP_CHECK_REPORT_ONLY) or the failure */
  uint64_t boxes_checked;  /* replicated boxes and bytes items compared
                              (those with 2 or more holders), all ranks */
  uint64_t mismatches;     /* of those, how many had differing copies */
  uint64_t hashed_bytes;   /* bytes this rank hashed */
  uint64_t exchange_bytes; /* collective bytes this rank sent + received */
  char message[DCP_VERIFY_MSG_MAX]; /* "" or the first mismatch: fqn (or
                              key), box, the ranks of each copy and their
                              hashes, the majority where there is one */
} dcp_replica_report;

/* Compare every holder's copy of each replicated box and REPLICATED bytes
 * item of st, without saving. Collective over the context's ranks, like
 * dcp_save (every rank passes its state; the planner's checks apply, so a
 * state dcp_save would refuse is refused here with the same error). With
 * two holders a mismatch names both; with three or more, the majority copy
 * and the ranks that differ from it (or "no majority"). flags: 0 or
 * DCP_CHECK_REPORT_ONLY. report may be NULL; it is the same on every rank
 * but for hashed_bytes and exchange_bytes. Leaves the context's save/load
 * statistics alone.
 * Errors (the same on every rank): DCP_EREPLICA (unless REPORT_ONLY; the
 * message is report->message, also on ctx), DCP_EINVAL (NULL, a state of
 * another context, unknown flags, a detached rank: no collective), the
 * planner's errors (DCP_EMISMATCH, DCP_EOVERLAP, ...), DCP_ETIMEDOUT /
 * DCP_EPEER (a rank did not take part within the context's timeout_ms),
 * DCP_ENOMEM. */
DCP_API dcp_status dcp_check_replicas(dcp_ctx *ctx, dcp_state *st, uint32_t flags,
                                      dcp_replica_report *report);

/* ------------------------------------------------------------------------ */
/* Checkpoint manager: steps, retention, latest, resume                     */
/* ------------------------------------------------------------------------ */

/* A manager keeps a training run's checkpoints under one root directory:
 * step N is the ordinary checkpoint ROOT/step-N (committed iff its
 * .metadata is there and verifies), which records its step number in the
 * user key/values ("dcp.step") beside the caller's; ROOT/latest names the
 * newest durable step; a retention policy deletes old steps. The ordering
 * rules — latest and retention move only once a step is durable (for an
 * async save: at its completion, never at staging), a step is deleted by
 * removing its commit marker first, the newest durable step is never
 * deleted — and the tests that prove them are in docs/manager.md.
 * Rank 0 decides and does the root's I/O (latest, deletions); the other
 * ranks learn every outcome through the context's collective. The root is
 * a directory of a POSIX file system (local or shared): step directories
 * are listed and removed with POSIX calls, and everything inside a step
 * goes through the context's storage plugin. */
typedef struct dcp_manager dcp_manager;

/* What a step directory holds. Values are stable. */
typedef enum dcp_step_state {
  DCP_STEP_COMMITTED = 0,  /* .metadata verifies and records this step */
  DCP_STEP_PENDING = 1,    /* a save is writing it (this manager's async save
                              not yet durable, or a live holder of its lease) */
  DCP_STEP_INCOMPLETE = 2, /* no commit marker and nobody writing: a crashed
                              save or a crashed deletion; never loaded */
  DCP_STEP_CORRUPT = 3,    /* .metadata there but unreadable or failing its
                              checksum; never loaded, never deleted */
  DCP_STEP_FOREIGN = 4     /* not the manager's: a symbolic link, not a
                              directory, or a checkpoint without (or with
                              another) step record; never touched */
} dcp_step_state;

/* A short static name of a state ("committed", ...), "unknown" otherwise. */
DCP_API const char *dcp_step_state_name(dcp_step_state s);

/* Whether to keep `step` whatever the counts say (non-zero: keep). Called
 * on rank 0 only, from the thread that called the manager. */
typedef int (*dcp_manager_keep_fn)(void *arg, int64_t step);

/* Where the manager's log lines go (a skipped step's reason, a deletion):
 * one line, no newline. NULL: stderr, prefixed "dcp manager: ". */
typedef void (*dcp_manager_log_fn)(void *arg, const char *line);

#define DCP_MANAGER_READ_ONLY 1u       /* list, resume and load only: no lease
                                          on the root, no save, no deletion */
#define DCP_MANAGER_NO_AUTO_GC 2u      /* retention only on dcp_manager_gc,
                                          never after a save */
#define DCP_MANAGER_KEEP_INCOMPLETE 4u /* never delete incomplete directories */
#define DCP_MANAGER_QUIET 8u           /* no log lines at all */
#define DCP_MANAGER_DEFER_FENCE 16u    /* dcp_manager_save_async under
                                          background staging returns before
                                          the copy is done: the caller calls
                                          dcp_manager_fence before the
                                          buffers change (since 0.3) */

typedef struct dcp_manager_options {
  uint32_t struct_size;   /* sizeof(dcp_manager_options), set by init */
  uint32_t flags;         /* DCP_MANAGER_* */
  uint32_t keep_last;     /* newest committed steps kept (default 0: all) */
  uint64_t keep_every;    /* also keep every step that is a multiple of it,
                             for good (0: none) */
  uint64_t max_bytes;     /* delete the oldest steps kept only by keep_last
                             until the committed steps total at most this
                             (0: no limit) */
  const int64_t *keep_steps; /* steps always kept (copied), or NULL */
  size_t nkeep_steps;
  dcp_manager_keep_fn keep_fn; /* also keep the steps it says, or NULL */
  void *keep_arg;
  dcp_manager_log_fn log_fn;   /* or NULL (see above) */
  void *log_arg;
} dcp_manager_options;

/* Fill opts with the defaults (keep everything, auto gc after saves). */
DCP_API void dcp_manager_options_init(dcp_manager_options *opts);

/* Open a manager over root (created, one level, when missing). Collective.
 * Unless DCP_MANAGER_READ_ONLY, rank 0 takes the root's lease
 * (ROOT/.dcp-manager.lock, the directory lease of docs/save-load.md with
 * the context's lease_ms), held until dcp_manager_free: a second manager on
 * the root, in this job or another, gets DCP_EBUSY naming the holder. The
 * context needs a collective (a detached rank is DCP_EINVAL) and must
 * outlive the manager. opts may be NULL.
 * Errors: DCP_EINVAL (NULL, empty root, a root that is not a directory,
 * bad options), DCP_EBUSY, storage errors, collective errors, DCP_ENOMEM;
 * the message is on ctx and every rank returns the same code. */
DCP_API dcp_status dcp_manager_open(dcp_ctx *ctx, const char *root,
                                    const dcp_manager_options *opts, dcp_manager **out);

/* Free a manager: wait for its pending async save (without moving latest or
 * running retention: call dcp_manager_wait first for that), release the
 * root's lease. Not collective. NULL is a no-op. */
DCP_API void dcp_manager_free(dcp_manager *m);

/* The directory of step `step` into buf (cap bytes): "ROOT/step-N".
 * Errors: DCP_EINVAL (NULL, negative step, cap too small). */
DCP_API dcp_status dcp_manager_step_path(const dcp_manager *m, int64_t step, char *buf,
                                         size_t cap);

/* Save st as step `step` (>= 0, and newer than every committed step), with
 * opts' flags, block size and user key/values (the key "dcp.step" is the
 * manager's: DCP_EINVAL), then — once the save returned DCP_OK on every
 * rank, i.e. the step is durable — point ROOT/latest at it and run the
 * retention policy (unless DCP_MANAGER_NO_AUTO_GC). Collective. Waits first
 * for a pending async save of the manager (and finishes it). Returns the
 * save's status; the retention's is in dcp_manager_gc_result.
 * Errors: dcp_save's, DCP_EINVAL (READ_ONLY, a step not newer than the
 * newest committed, the reserved key), DCP_EBUSY (the step's directory is
 * being written by someone else). */
DCP_API dcp_status dcp_manager_save(dcp_manager *m, int64_t step, dcp_state *st,
                                    const dcp_save_options *opts);

/* As dcp_manager_save, asynchronously (dcp_async_save): returns after
 * staging; latest and retention move only when the save is durable, at
 * dcp_manager_wait (or at the next save, which waits for it first).
 * Under background staging (dcp_async_set_staging) it still returns only
 * once staged, unless the manager was opened with DCP_MANAGER_DEFER_FENCE:
 * then it returns before the copy, and every buffer st names must stay
 * unchanged until dcp_manager_fence (or dcp_manager_wait, the next save or
 * dcp_manager_free, which imply it) returns.
 * Errors: as dcp_async_save, and as dcp_manager_save's checks. */
DCP_API dcp_status dcp_manager_save_async(dcp_manager *m, int64_t step, dcp_state *st,
                                          const dcp_save_options *opts);

/* Wait for the pending async save; when it succeeded on every rank, point
 * latest at its step and run retention. Returns the save's outcome
 * (DCP_OK when none is pending). Collective. timeout_ms < 0 waits without
 * limit; DCP_ETIMEDOUT leaves the save pending (wait again, or
 * dcp_manager_abort). */
DCP_API dcp_status dcp_manager_wait(dcp_manager *m, int64_t timeout_ms);

/* Give up on the pending async save (dcp_async_abort): its step stays
 * uncommitted (incomplete, cleaned by a later retention). DCP_OK when none
 * is pending or it had already finished well. Not collective. */
DCP_API dcp_status dcp_manager_abort(dcp_manager *m);

/* Wait until the pending async save is staged (dcp_async_fence): from then
 * on its state's buffers may change. Blocks for the staging only, never
 * for the writing; at once when nothing is pending or the save was staged
 * in blocking mode. What a trainer calls before the optimizer step with
 * DCP_MANAGER_DEFER_FENCE. Not collective.
 * Errors: DCP_EINVAL (NULL), or the staging's failure (as dcp_async_fence;
 * dcp_manager_wait then returns it too and latest does not move). */
DCP_API dcp_status dcp_manager_fence(dcp_manager *m);

/* The step of the pending async save, or -1 when none is pending. */
DCP_API int64_t dcp_manager_pending_step(const dcp_manager *m);

/* One step directory, filled by dcp_manager_list.
 * Frozen: never grows; a later version adds a new struct. */
typedef struct dcp_step_info {
  int64_t step;
  dcp_step_state state;
  uint64_t bytes;     /* total size of its files (0 unless committed) */
  int32_t keep;       /* 1: the policy keeps it now, 0: it would delete it */
  char note[160];     /* why it has this state or verdict ("" or a reason) */
} dcp_step_info;

/* List the step directories of the root, ascending by step, with their
 * states and what the retention policy would do with each: *count gets
 * their number and out[0..min(cap, *count)) the first of them (cap 0, out
 * NULL: count only). On this rank alone (not collective).
 * Errors: DCP_EINVAL (NULL m or count, NULL out with cap > 0), DCP_EIO (the
 * root cannot be read), DCP_ENOMEM. */
DCP_API dcp_status dcp_manager_list(dcp_manager *m, dcp_step_info *out, size_t cap,
                                    size_t *count);

#define DCP_RESUME_VERIFY 1u /* dcp_verify the chosen step (every block) and
                                fall back to an older one when it fails */

/* Auto-resume: the newest loadable step (committed and its metadata
 * verifies; with DCP_RESUME_VERIFY also every block) into *step. Newer
 * steps that are not loadable are skipped with a log line naming the reason.
 * Collective: rank 0 decides and broadcasts. Errors: DCP_ENOTFOUND (no
 * loadable step; *step is -1), DCP_EIO, collective errors. */
DCP_API dcp_status dcp_manager_resume(dcp_manager *m, uint32_t flags, int64_t *step);

/* dcp_load of step `step` into st (collective). Errors: dcp_load's,
 * DCP_EINVAL (negative step). */
DCP_API dcp_status dcp_manager_load(dcp_manager *m, int64_t step, dcp_state *st,
                                    const dcp_load_options *opts);

/* What a retention pass did. Grows (fields are appended): the caller's
 * struct_size says how much of it the library writes. */
typedef struct dcp_manager_gc_report {
  uint32_t struct_size; /* sizeof(dcp_manager_gc_report), set by the caller */
  dcp_status status;    /* DCP_OK, or the first failure (a step that could
                           not be deleted; the others were still tried) */
  uint64_t deleted;     /* step directories deleted (dry run: would be) */
  uint64_t kept;        /* step directories kept */
  uint64_t failed;      /* deletions that failed or were skipped (busy) */
  uint64_t kept_bytes;  /* bytes of the committed steps kept */
  int32_t over_budget;  /* 1: max_bytes could not be met without deleting a
                           step the rules keep */
  char message[DCP_VERIFY_MSG_MAX]; /* "" or the first failure */
} dcp_manager_gc_report;

#define DCP_GC_DRY_RUN 1u /* decide and report, delete nothing */

/* Run the retention policy now (collective): rank 0 lists the root,
 * decides, deletes (each step: its commit markers removed and the
 * directory synced first, then its files, then the directory), and every
 * rank gets the same report. out may be NULL. Returns out->status, or
 * DCP_EINVAL (READ_ONLY without DCP_GC_DRY_RUN), collective errors. */
DCP_API dcp_status dcp_manager_gc(dcp_manager *m, uint32_t flags, dcp_manager_gc_report *out);

/* The report of the retention that ran after the last durable save (a
 * zero report with status DCP_OK when none ran). Errors: DCP_EINVAL. */
DCP_API dcp_status dcp_manager_gc_result(const dcp_manager *m, dcp_manager_gc_report *out);

/* ---- preemption ("last words") ------------------------------------------ */

/* Ask for a preemption save at the next step boundary: sets a flag only,
 * so it is async-signal-safe (call it from a framework's own handler). */
DCP_API void dcp_manager_request_save(dcp_manager *m);

/* Install a handler for SIGTERM and SIGUSR1 that calls
 * dcp_manager_request_save(m) and nothing else (the previous handlers are
 * restored by dcp_manager_free). One manager per process may hold it.
 * Errors: DCP_EINVAL (NULL), DCP_EBUSY (another manager holds it), DCP_EIO
 * (sigaction failed). */
DCP_API dcp_status dcp_manager_install_signal_handler(dcp_manager *m);

/* At a step boundary: do the ranks take a preemption save now? Collective:
 * one all-reduce of every rank's flag within the context's timeout_ms; *out
 * is 1 on every rank when any rank's flag was set (the flags are then
 * cleared), else 0. A rank that does not join in time (dead, or stuck)
 * makes the others return DCP_ETIMEDOUT or DCP_EPEER with *out 0: they skip
 * the save rather than hang (docs/manager.md, "Preemption"). */
DCP_API dcp_status dcp_manager_should_save(dcp_manager *m, int *out);

/* The preemption save: an async save of step (dcp_manager_save_async),
 * then a wait of at most grace_ms for it to be durable (latest and
 * retention move then). DCP_ETIMEDOUT when the grace ran out: the save is
 * aborted, its step stays uncommitted, the previous steps are untouched.
 * Collective. */
DCP_API dcp_status dcp_manager_save_now(dcp_manager *m, int64_t step, dcp_state *st,
                                        const dcp_save_options *opts, int64_t grace_ms);

/* ------------------------------------------------------------------------ */
/* Memory tier: snapshots kept in host memory for a fast restart            */
/* ------------------------------------------------------------------------ */

/* docs/recovery.md. With keep mode on, the async writer keeps the data
 * files of this rank's last persisted saves in its own memory after each
 * save, and stays alive a while after its trainer dies; a trainer that
 * restarts on the same host finds it (by job identity and rank) and
 * dcp_load reads this rank's data files from that memory instead of
 * storage, checked by the same block checksums. Anything wrong (no writer,
 * a snapshot of another save, a checksum mismatch) reads from storage. */

/* dcp_stats.mem_tier: what a load did with the local snapshot. */
#define DCP_MEMTIER_OFF 0u      /* keep mode is off on this context */
#define DCP_MEMTIER_USED 1u     /* the snapshot matched; bytes came from it */
#define DCP_MEMTIER_NONE 2u     /* no writer of this job and rank, or it
                                   holds no snapshot of this checkpoint */
#define DCP_MEMTIER_STALE 3u    /* its snapshot is of another save of this
                                   path (another .metadata): not used */
#define DCP_MEMTIER_REFUSED 4u  /* the writer answering is not of this job,
                                   rank or user, or answered garbage */
#define DCP_MEMTIER_PEER 5u     /* no local snapshot; a peer's copy was pulled
                                   and used */

typedef struct dcp_memtier_options {
  uint32_t struct_size;  /* sizeof(dcp_memtier_options) (the init sets it) */
  uint32_t keep;         /* snapshots one writer keeps (the newest K);
                            0: keep mode off */
  uint64_t budget_bytes; /* most bytes of snapshots one writer holds (older
                            ones go first; a save larger than this is not
                            kept); 0: a quarter of physical memory */
  int64_t linger_ms;     /* how long a writer with snapshots outlives its
                            trainer (0: 10 minutes) */
  const char *job;       /* the job's identity (e.g. the scheduler's job id):
                            a restarted trainer finds only a writer of the
                            same job, rank and user. NULL: $DCP_JOB_ID, else
                            "" (any job of this user) */
  uint32_t replicas;     /* peers that also hold each rank's snapshot (the
                            writers send it over their collective after the
                            save); 0: none. The same on every rank. */
  int32_t peer_jump;     /* replica k of rank r goes to rank (r + k*J) mod
                            world; 0: J = the number of ranks on this host
                            (the collective's host ids; 1 without them) */
} dcp_memtier_options;

/* Defaults: keep 0 (off), budget 0, linger 0, job NULL. */
DCP_API void dcp_memtier_options_init(dcp_memtier_options *o);

/* Set ctx's memory tier: keep mode for the writers of its async saves
 * (a writer already running keeps the options it was started with: call
 * this before the first dcp_async_save or dcp_async_prepare), and the
 * lookup of a snapshot by dcp_load (on when keep > 0). o is copied.
 * Errors: DCP_EINVAL (NULL, a struct_size too small, linger_ms < 0). */
DCP_API dcp_status dcp_memtier_set(dcp_ctx *ctx, const dcp_memtier_options *o);

/* Ask the writer of this job and rank on this host that holds snapshots
 * (its trainer is gone, or it is ctx's own) to drop them and to exit once
 * it has no trainer: after a restarted trainer loaded, or at the end of a
 * job. Not collective. DCP_OK also when no such writer runs. Errors:
 * DCP_EINVAL (NULL, memory tier not set on ctx), DCP_EIO. */
DCP_API dcp_status dcp_memtier_stop(dcp_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* DCP_H */
