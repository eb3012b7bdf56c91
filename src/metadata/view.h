/* view.h — internals of the read-only metadata view (dcp_meta), shared by
 * the eager table decoder (view.c) and the lazy chunk-list decoder
 * (view_chunks.c), plus the bounds-checked decoding primitives they use. */
#ifndef DCP_METADATA_VIEW_H
#define DCP_METADATA_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "dcp.h"
#include "base/wire.h"
#include "metadata/derive.h"

/* A fuzzer cannot forge xxh3 checksums, so in fuzzing builds (the libFuzzer
 * convention macro) mismatches are ignored and the structural checks behind
 * them get exercised. Never defined in a normal build. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define DCPI_CHECKSUMS_ENFORCED 0
#else
#define DCPI_CHECKSUMS_ENFORCED 1
#endif

typedef struct dcpi_mv_string {
  const char *s; /* into the view's buffer copy, NUL-terminated there */
  size_t len;
} dcpi_mv_string;

typedef struct dcpi_mv_file {
  const char *name;
  uint8_t codec;       /* default coding of refs into this file */
  uint32_t block_size;
  uint64_t length;     /* bytes (save section), 0 when unknown (version 1) */
} dcpi_mv_file;

typedef struct dcpi_mv_mesh {
  uint32_t ndim;
  int64_t *shape; /* owned */
  int32_t *ranks; /* owned, nranks */
  size_t nranks;
} dcpi_mv_mesh;

/* A decoded storage ref; its block arrays live in a u64 vector of the owner
 * (chunk list or bytes section), found by index so the vectors may grow. */
typedef struct dcpi_mv_ref {
  uint64_t offset, stored_length, raw_length, block_count;
  size_t cks_at, lens_at;
  uint32_t file, block_size;
  uint8_t codec;
} dcpi_mv_ref;

typedef struct dcpi_u64vec {
  uint64_t *v;
  size_t n, cap;
} dcpi_u64vec;

/* One tensor's chunk list, decoded on first access. */
typedef struct dcpi_mv_chunks {
  int64_t *offs;     /* nchunks*ndim box offsets, row-major (chunk c at c*ndim) */
  int64_t *sizes;    /* nchunks*ndim box sizes, same layout */
  dcpi_mv_ref *refs; /* per chunk */
  dcpi_u64vec cks, lens;
  dcpi_form form; /* how the boxes were found (version 3: derived or listed) */
} dcpi_mv_chunks;

/* What a chunk list's header says (decoded on first use, after its
 * checksum): its form and, in version 4, the skip table of a derived list;
 * plus the window of refs last decoded from it (dcp_meta_chunk without the
 * whole list). */
typedef struct dcpi_mv_head {
  dcpi_form form;
  dcpi_flat flat;       /* a FLAT form's arithmetic (version 4) */
  uint64_t every;       /* skip interval (>= 1 in version 4 derived lists; else 0) */
  uint64_t *skip;       /* nskip: byte offset, within the entries, of entry every*(j+1) */
  size_t nskip;
  uint64_t *wcks;       /* nskip + 1: xxh3 of each window's entry bytes */
  size_t entries_at;    /* where the entries start within the list */
  dcpi_mv_chunks *win;  /* entries [win_first, win_first + win_n), or NULL */
  uint64_t win_first, win_n;
} dcpi_mv_head;

typedef struct dcpi_mv_tensor {
  const char *fqn;
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[DCP_MAX_NDIM];
  int32_t mesh;
  uint32_t tensor_map[DCP_MAX_NDIM];
  uint64_t nchunks;
  size_t list_off, list_len; /* within the chunks section */
  uint64_t list_hash;
  dcpi_mv_chunks *chunks; /* NULL until decoded */
  dcpi_mv_head *head;     /* NULL until the list's header is decoded */
} dcpi_mv_tensor;

typedef struct dcpi_mv_bytes {
  const char *key;
  size_t key_len;
  dcp_scope scope;
  int32_t rank;
  dcpi_mv_ref ref;
} dcpi_mv_bytes;

typedef struct dcpi_mv_kv {
  const char *key, *value;
} dcpi_mv_kv;

struct dcp_meta {
  dcp_ctx *ctx; /* where lazy decoding failures are reported; may be NULL */
  uint8_t *buf; /* owned copy of the encoded bytes */
  size_t len;
  uint32_t version;
  int32_t world_size;
  uint8_t save_id[16]; /* save section; all zero in version 1 */
  uint64_t generation; /* 0 in version 1 */
  int32_t part_rank;   /* -1: a whole checkpoint */
  dcpi_mv_string *strings;
  size_t nstrings;
  uint8_t *name_ok; /* per string: passed the fqn / key name rule already */
  dcpi_mv_file *files;
  size_t nfiles;
  dcpi_mv_mesh *meshes;
  size_t nmeshes;
  dcpi_mv_tensor *tensors;
  size_t ntensors;
  size_t chunks_off, chunks_len; /* the chunks section within buf */
  dcpi_mv_bytes *bytes;
  size_t nbytes;
  dcpi_u64vec bytes_cks, bytes_lens;
  dcpi_mv_kv *kvs;
  size_t nkvs;
};

/* Save-time meshes (saves record them since format 3, commit_layout.c): a
 * mesh of the view, and the mesh index (or -1) and tensor_map of tensor
 * `index` (tensor_map: ndim masks, written when the index is >= 0). The
 * public dcp_meta_mesh* accessors (view_mesh.c) check their arguments and
 * call these. */
typedef struct dcpi_mesh_info {
  uint32_t ndim;
  const int64_t *shape; /* ndim extents */
  const int32_t *ranks; /* prod(shape) ranks, row-major */
} dcpi_mesh_info;
size_t dcpi_meta_mesh_count(const dcp_meta *m);
dcp_status dcpi_meta_mesh(const dcp_meta *m, size_t index, dcpi_mesh_info *out);
int32_t dcpi_meta_tensor_layout(const dcp_meta *m, size_t index, uint32_t *tensor_map);

/* A decoding cursor over one section (or chunk list) with a description of
 * what is being decoded, used to make every failure message precise. */
typedef struct dcpi_dec {
  dcpi_rbuf r;
  dcpi_err *err;
  char where[192];
  int64_t item; /* when >= 0, appended to `where` as ", <kind> <item>" on
                   failure: per-item context without a printf per item */
  const char *kind; /* the item's kind ("file", "tensor"...); NULL: "chunk" */
  const char *name; /* or NULL: the item's name, appended as " ('<name>')" */
} dcpi_dec;

/* Record DCP_ECORRUPT with "<where> at byte <pos>: <reason>" and return it. */
dcp_status dcpi_dec_fail(dcpi_dec *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Read a varint named what, failing unless it is <= max. */
dcp_status dcpi_dec_var(dcpi_dec *d, uint64_t max, const char *what, uint64_t *v);
dcp_status dcpi_dec_u8(dcpi_dec *d, const char *what, uint8_t *v);
dcp_status dcpi_dec_u64(dcpi_dec *d, const char *what, uint64_t *v);

/* Read an element count and check that count * min_size bytes remain, so
 * nothing is ever allocated for elements the input cannot hold. */
dcp_status dcpi_dec_count(dcpi_dec *d, size_t min_size, const char *what, uint64_t *n);

/* Location state carried from one ref to the next within a list. */
typedef struct dcpi_dec_prev {
  uint32_t file;
  uint64_t offset, end;
} dcpi_dec_prev;

/* Decode the location fields of a ref whose flag byte is flags (file mode,
 * offset mode, coding), validating the file index against the view's file
 * table. Fills out's file, offset, codec and block size. */
dcp_status dcpi_dec_loc(dcpi_dec *d, const dcp_meta *m, uint8_t flags, const dcpi_dec_prev *p,
                        dcpi_mv_ref *out);

/* Given out->raw_length and coding, decode the per-block checksums (into
 * cks) and, for zstd, stored lengths (into lens); set block_count,
 * stored_length and the array positions; check offset + stored_length
 * <= INT64_MAX and advance p. */
dcp_status dcpi_dec_blocks(dcpi_dec *d, dcpi_mv_ref *out, dcpi_u64vec *cks, dcpi_u64vec *lens,
                           dcpi_dec_prev *p);

/* Fill a public storage ref from a decoded one and its arrays. */
void dcpi_mv_fill_ref(const dcpi_mv_ref *r, const dcpi_u64vec *cks, const dcpi_u64vec *lens,
                      dcp_storage_ref *out);

/* xxh3 of n bytes at p (p may be NULL when n is 0). */
uint64_t dcpi_mv_hash(const uint8_t *p, size_t n);

/* Free a decoded chunk list. */
void dcpi_mv_chunks_free(dcpi_mv_chunks *c);

/* Free a list header (and its window). */
void dcpi_mv_head_free(dcpi_mv_head *h);

/* Decode tensor ti's chunk list if not yet done (errors as dcp_meta_chunk,
 * reported in err) and point *offs and *sizes at its boxes: nchunks*ndim
 * int64 each, chunk c at [c*ndim], owned by the view and valid as long as
 * it. The bulk path of the load runtime: no per-chunk copies. */
dcp_status dcpi_meta_chunk_boxes(dcp_meta *m, size_t ti, const int64_t **offs,
                                 const int64_t **sizes, dcpi_err *err);

/* The form of tensor ti's chunk list (DCPI_FORM_LISTED for versions 1
 * and 2), decoding the list if not yet done (errors as
 * dcpi_meta_chunk_boxes). */
dcp_status dcpi_meta_chunk_form(dcp_meta *m, size_t ti, dcpi_form *out, dcpi_err *err);

/* When tensor ti's list is a GRID (version 3 and later), its grid into
 * *out and *found true, reading only the list's header (verified by the
 * header's own xxh3 in version 4, by the list's in version 3): the load
 * planner finds the chunks meeting a box from it without decoding the
 * list. *found false otherwise. Errors: DCP_ENOTFOUND, DCP_ECORRUPT. */
dcp_status dcpi_meta_chunk_grid(dcp_meta *m, size_t ti, dcpi_grid *out, bool *found,
                                dcpi_err *err);

/* When tensor ti's list is a version 4 FLAT list (chunks in generation
 * order), its arithmetic into *out and *found true, reading only the
 * list's header (verified by its own xxh3): the load planner queries it
 * like a grid. *found false otherwise (a version 3 FLAT list is in (offset, size)
 * order: the planner gets its boxes). Errors as dcpi_meta_chunk_grid. */
dcp_status dcpi_meta_chunk_flat(dcp_meta *m, size_t ti, dcpi_flat *out, bool *found,
                                dcpi_err *err);

/* dcp_meta_open_memory without the copy: on success the view owns data
 * (a malloc'd buffer of len bytes; dcp_meta_free frees it), on failure it
 * stays the caller's. Opening a version 4 file then costs the header, the
 * directory and the small sections, not the file's length. */
dcp_status dcpi_meta_open_owned(dcp_ctx *ctx, uint8_t *data, size_t len, dcp_meta **out);

/* The whole-file checks that opening leaves out in version 4: the
 * trailer's xxh3 of every byte (and so the chunks section's checksum in
 * the directory, which no access uses); for dcp_verify. DCP_ECORRUPT names
 * the damaged part. Versions 1 to 3 passed them at open already. */
dcp_status dcpi_meta_check_whole(const dcp_meta *m, dcpi_err *err);

/* Tensor ti's global shape (ndim entries), owned by the view; ti must be in
 * range. */
const int64_t *dcpi_meta_tensor_shape(const dcp_meta *m, size_t ti);

#endif
