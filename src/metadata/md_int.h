/* md_int.h — the builder's in-memory representation, shared by the
 * add functions (md_build.c) and the encoder (md_encode.c). */
#ifndef DCP_METADATA_MD_INT_H
#define DCP_METADATA_MD_INT_H

#include "base/strmap.h"
#include "metadata/format.h"
#include "metadata/meta.h"

/* A storage ref with owned copies of its arrays (lens NULL for codec NONE). */
typedef struct dcpi_md_ref {
  uint32_t file;
  dcp_codec codec;
  uint32_t block_size;
  uint64_t offset, stored_length, raw_length, block_count;
  uint64_t *checksums;
  uint64_t *lens;
} dcpi_md_ref;

/* A chunk's storage ref, compactly: its box is in the tensor's box pool,
 * its raw length and block count follow from the box and block size
 * (dcpi_md_add_chunk checked they agree). A chunk of one block (most of
 * them) keeps that block's checksum here, and its stored length is the
 * chunk's: nothing in the pool, so the encoder reads a chunk from its
 * record alone (the pool is in add order, the encoder goes in tensor
 * order: a cache miss per chunk at 27 M of them). Otherwise the builder's
 * pool holds its checksums, then (zstd codecs) its stored lengths. 40
 * bytes, so a coordinator holds tens of millions (with a 2-d box, 72 a
 * chunk in all; was 104). */
typedef struct dcpi_md_chunk {
  uint64_t offset, stored_length;
  uint64_t cks; /* one block: its checksum; more: their index into dcpi_md.cks */
  uint32_t file, block_size;
  uint8_t codec;
} dcpi_md_chunk;

typedef struct dcpi_md_tensor {
  char *fqn; /* owned; the fqn map borrows it */
  size_t fqn_len;
  dcp_dtype dtype;
  uint32_t ndim;
  int64_t shape[DCP_MAX_NDIM];
  int32_t mesh;
  uint32_t tensor_map[DCP_MAX_NDIM];
  dcpi_md_chunk *chunks;
  size_t nchunks, cap_chunks;
  int64_t *boxes; /* chunk c: offset at [2*ndim*c], size at [2*ndim*c + ndim] */
  size_t cap_boxes;
} dcpi_md_tensor;

typedef struct dcpi_md_mesh {
  uint32_t ndim;
  int64_t shape[DCP_MAX_MESH_NDIM];
  int32_t *ranks; /* nranks, owned */
  size_t nranks;
} dcpi_md_mesh;

/* One record per distinct bytes key: owns the key string (which the `names`
 * map and the items borrow) and remembers the key's scope. */
typedef struct dcpi_md_bkey {
  char *key;
  size_t len;
  dcp_scope scope;
  size_t nitems; /* 0 only after an add that failed for lack of memory */
} dcpi_md_bkey;

typedef struct dcpi_md_bytes {
  const char *key; /* borrowed from its dcpi_md_bkey */
  size_t key_len;
  char *ident; /* owned: key, NUL, 4-byte rank; the (key, rank) map borrows it */
  dcp_scope scope;
  int32_t rank;
  dcpi_md_ref ref;
} dcpi_md_bytes;

typedef struct dcpi_md_kv {
  char *key, *value; /* owned */
  size_t key_len, value_len;
} dcpi_md_kv;

typedef struct dcpi_md_file {
  char *name; /* owned */
  size_t name_len;
  uint64_t length; /* bytes, 0 when unknown */
} dcpi_md_file;

struct dcpi_md {
  uint32_t version; /* format version written: DCPI_FORMAT_VERSION, or 2 */
  int32_t world_size;
  uint8_t save_id[DCPI_SAVE_ID_LEN]; /* all zero: no identity */
  uint64_t generation;
  int32_t part_rank; /* -1: the whole checkpoint */
  dcpi_md_file *files;
  size_t nfiles, cap_files;
  dcpi_md_mesh *meshes;
  size_t nmeshes, cap_meshes;
  dcpi_md_tensor *tensors;
  size_t ntensors, cap_tensors;
  dcpi_md_bytes *bytes;
  size_t nbytes, cap_bytes;
  dcpi_md_bkey *bkeys;
  size_t nbkeys, cap_bkeys;
  dcpi_md_kv *kvs;
  size_t nkvs, cap_kvs;
  size_t nchunks_total;
  uint64_t *cks; /* block checksums and zstd stored lengths of chunks of 2+ blocks */
  size_t ncks, cap_cks;
  dcpi_strmap file_names; /* name → file id */
  dcpi_strmap names;      /* tensor fqn → tid, bytes key → bkey index | BYTES_BIT */
  dcpi_strmap bytes_ids;  /* (key, rank) ident → bytes index */
  dcpi_strmap kv_keys;    /* key → kv index */
};

/* Check a tensor's mesh id (-1: none) and, with a mesh, its tensor_map:
 * masks of existing mesh dimensions, each used once (md_build.c). */
dcp_status dcpi_md_check_tensor_mesh(const dcpi_md *md, const char *fqn, uint32_t ndim,
                                     int32_t mesh, const uint32_t *map, dcpi_err *err);

/* Chunk c of t: its box offset and size (ndim each). */
static inline const int64_t *dcpi_md_chunk_off(const dcpi_md_tensor *t, size_t c) {
  return t->boxes + 2 * (size_t)t->ndim * c;
}
static inline const int64_t *dcpi_md_chunk_size(const dcpi_md_tensor *t, size_t c) {
  return t->boxes + 2 * (size_t)t->ndim * c + t->ndim;
}

/* Marks a `names` value as a bytes key record rather than a tensor id. */
#define DCPI_MD_BYTES_BIT 0x80000000u

#endif
