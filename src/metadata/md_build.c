/* md_build.c — the metadata builder: validated, copying add functions.
 *
 * Every add either fully succeeds or leaves the builder as it was: inputs
 * are validated and copied into fresh allocations first, and only then
 * linked in (maps are updated last, after the arrays have room). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "metadata/codec.h"
#include "metadata/md_int.h"
#include "model/box.h"
#include "model/name.h"

/* Duplicate n bytes of s as a NUL-terminated string, or NULL on ENOMEM. */
static char *dup_bytes(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

/* Free the arrays a ref owns. */
static void ref_free(dcpi_md_ref *r) {
  free(r->checksums);
  free(r->lens);
}

dcp_status dcpi_md_create(dcpi_md **out) {
  if (!out) return DCP_EINVAL;
  *out = calloc(1, sizeof **out);
  if (!*out) return DCP_ENOMEM;
  (*out)->world_size = 1;
  (*out)->version = DCPI_FORMAT_VERSION;
  (*out)->part_rank = -1;
  return DCP_OK;
}

/* Free one tensor's fqn and chunks. */
static void tensor_free(dcpi_md_tensor *t) {
  free(t->chunks);
  free(t->boxes);
  free(t->fqn);
}

void dcpi_md_free(dcpi_md *md) {
  if (!md) return;
  for (size_t i = 0; i < md->nfiles; i++) free(md->files[i].name);
  for (size_t i = 0; i < md->nmeshes; i++) free(md->meshes[i].ranks);
  for (size_t i = 0; i < md->ntensors; i++) tensor_free(&md->tensors[i]);
  for (size_t i = 0; i < md->nbytes; i++) {
    free(md->bytes[i].ident);
    ref_free(&md->bytes[i].ref);
  }
  for (size_t i = 0; i < md->nbkeys; i++) free(md->bkeys[i].key);
  free(md->bkeys);
  for (size_t i = 0; i < md->nkvs; i++) {
    free(md->kvs[i].key);
    free(md->kvs[i].value);
  }
  free(md->cks);
  free(md->files);
  free(md->meshes);
  free(md->tensors);
  free(md->bytes);
  free(md->kvs);
  dcpi_strmap_free(&md->file_names);
  dcpi_strmap_free(&md->names);
  dcpi_strmap_free(&md->bytes_ids);
  dcpi_strmap_free(&md->kv_keys);
  free(md);
}

dcp_status dcpi_md_set_world(dcpi_md *md, int32_t world_size, dcpi_err *err) {
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  if (world_size < 1)
    return dcpi_fail(err, DCP_EINVAL, "world size %d must be >= 1", (int)world_size);
  md->world_size = world_size;
  return DCP_OK;
}

dcp_status dcpi_md_set_format_version(dcpi_md *md, uint32_t version, dcpi_err *err) {
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  if (version < 2 || version > DCPI_FORMAT_VERSION)
    return dcpi_fail(err, DCP_EINVAL, "cannot write metadata format version %u (2 to %u)",
                     version, DCPI_FORMAT_VERSION);
  md->version = version;
  return DCP_OK;
}

dcp_status dcpi_md_set_identity(dcpi_md *md, const uint8_t id[DCPI_SAVE_ID_LEN],
                                uint64_t generation, int32_t part_rank, dcpi_err *err) {
  if (!md || !id) return dcpi_fail(err, DCP_EINVAL, "metadata builder or id is NULL");
  if (part_rank < -1) return dcpi_fail(err, DCP_EINVAL, "part rank %d", (int)part_rank);
  memcpy(md->save_id, id, DCPI_SAVE_ID_LEN);
  md->generation = generation;
  md->part_rank = part_rank;
  return DCP_OK;
}

dcp_status dcpi_md_set_file_length(dcpi_md *md, uint32_t id, uint64_t length, dcpi_err *err) {
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  if (id >= md->nfiles) return dcpi_fail(err, DCP_ENOTFOUND, "no file %u", id);
  md->files[id].length = length;
  return DCP_OK;
}

/* strlen(s), but at most max (strnlen is POSIX, not C11). */
static size_t bounded_len(const char *s, size_t max) {
  size_t n = 0;
  while (n < max && s[n]) n++;
  return n;
}

/* Check an fqn or key: non-NULL, 1..DCP_MAX_NAME bytes. *len gets strlen. */
static dcp_status check_name(const char *name, const char *what, size_t *len, dcpi_err *err) {
  if (!name) return dcpi_fail(err, DCP_EINVAL, "%s is NULL", what);
  *len = bounded_len(name, DCP_MAX_NAME + 1);
  if (*len == 0) return dcpi_fail(err, DCP_ENAME, "%s is empty", what);
  if (*len > DCP_MAX_NAME)
    return dcpi_fail(err, DCP_ENAME, "%s is longer than %d bytes", what, DCP_MAX_NAME);
  return DCP_OK;
}

/* Check an fqn or bytes key: check_name, then the full name rule
 * (model/name.h), so a builder fed from a decoded file, an import or a
 * merge holds only names a state could have declared. */
static dcp_status check_item_name(const char *name, const char *what, size_t *len,
                                  dcpi_err *err) {
  dcp_status rc = check_name(name, what, len, err);
  return rc != DCP_OK ? rc : dcpi_name_check(name, *len, what, DCP_ENAME, err);
}

/* Map a strmap_put failure (negative status) to a reported error. */
static dcp_status map_fail(int rc, dcpi_err *err) {
  return dcpi_fail(err, (dcp_status)rc, "cannot grow a metadata name index");
}

dcp_status dcpi_md_add_file(dcpi_md *md, const char *name, uint32_t *id, dcpi_err *err) {
  size_t len;
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  dcp_status s = check_name(name, "file name", &len, err);
  if (s != DCP_OK) return s;
  /* The runtime opens these names inside the checkpoint directory: anything
   * that could walk out of it is refused here and by the decoder. */
  if (memchr(name, '/', len) || memchr(name, '\\', len) || strcmp(name, ".") == 0 ||
      strcmp(name, "..") == 0)
    return dcpi_fail(err, DCP_ENAME, "file name '%s' is not a plain file name", name);
  uint32_t prev;
  if (dcpi_strmap_get(&md->file_names, name, len, &prev))
    return dcpi_fail(err, DCP_EEXIST, "file '%s' is already file %u", name, prev);
  if (md->nfiles >= UINT32_MAX) return dcpi_fail(err, DCP_EOVERFLOW, "too many files");
  if ((s = DCPI_RESERVE(md->files, md->cap_files, md->nfiles + 1)) != DCP_OK)
    return dcpi_fail(err, s, "cannot grow the file table");
  char *copy = dup_bytes(name, len);
  if (!copy) return dcpi_fail(err, DCP_ENOMEM, "cannot copy file name");
  int rc = dcpi_strmap_put(&md->file_names, copy, len, (uint32_t)md->nfiles, NULL);
  if (rc < 0) {
    free(copy);
    return map_fail(rc, err);
  }
  md->files[md->nfiles] = (dcpi_md_file){copy, len, 0};
  if (id) *id = (uint32_t)md->nfiles;
  md->nfiles++;
  return DCP_OK;
}

/* Check a mesh's extents and return its rank count in *n. */
static dcp_status check_mesh_shape(uint32_t ndim, const int64_t *shape, size_t *n, dcpi_err *err) {
  if (ndim < 1 || ndim > DCP_MAX_MESH_NDIM)
    return dcpi_fail(err, DCP_EINVAL, "mesh ndim %u is not in 1..%d", ndim, DCP_MAX_MESH_NDIM);
  if (!shape) return dcpi_fail(err, DCP_EINVAL, "mesh shape is NULL");
  int64_t prod = 1;
  for (uint32_t d = 0; d < ndim; d++) {
    if (shape[d] < 1)
      return dcpi_fail(err, DCP_EINVAL, "mesh extent %u is %lld, must be >= 1", d,
                       (long long)shape[d]);
    if (!dcpi_mul_i64(prod, shape[d], &prod) || prod > INT32_MAX)
      return dcpi_fail(err, DCP_EOVERFLOW, "mesh has more than %d ranks", INT32_MAX);
  }
  *n = (size_t)prod;
  return DCP_OK;
}

/* qsort comparator for int32 ranks. */
static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Fill *out with a sorted copy-check of ranks: non-negative and distinct.
 * ranks NULL means 0..n-1. *out is a malloc'd copy in the given order. */
static dcp_status copy_mesh_ranks(const int32_t *ranks, size_t n, int32_t **out, dcpi_err *err) {
  int32_t *copy = malloc(n * sizeof *copy);
  int32_t *sorted = malloc(n * sizeof *sorted);
  if (!copy || !sorted) {
    free(copy);
    free(sorted);
    return dcpi_fail(err, DCP_ENOMEM, "cannot copy mesh ranks");
  }
  for (size_t i = 0; i < n; i++) copy[i] = ranks ? ranks[i] : (int32_t)i;
  memcpy(sorted, copy, n * sizeof *copy);
  dcpi_sort(sorted, n, sizeof *sorted, cmp_i32);
  dcp_status rc = DCP_OK;
  if (sorted[0] < 0) rc = dcpi_fail(err, DCP_EINVAL, "mesh rank %d is negative", (int)sorted[0]);
  for (size_t i = 1; rc == DCP_OK && i < n; i++)
    if (sorted[i] == sorted[i - 1])
      rc = dcpi_fail(err, DCP_EINVAL, "mesh rank %d appears twice", (int)sorted[i]);
  free(sorted);
  if (rc != DCP_OK) {
    free(copy);
    return rc;
  }
  *out = copy;
  return DCP_OK;
}

dcp_status dcpi_md_add_mesh(dcpi_md *md, uint32_t ndim, const int64_t *shape,
                            const int32_t *ranks, uint32_t *id, dcpi_err *err) {
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  size_t n = 0;
  dcp_status rc = check_mesh_shape(ndim, shape, &n, err);
  if (rc != DCP_OK) return rc;
  if (md->nmeshes >= INT32_MAX) return dcpi_fail(err, DCP_EOVERFLOW, "too many meshes");
  if ((rc = DCPI_RESERVE(md->meshes, md->cap_meshes, md->nmeshes + 1)) != DCP_OK)
    return dcpi_fail(err, rc, "cannot grow the mesh table");
  dcpi_md_mesh m = {.ndim = ndim, .nranks = n};
  memcpy(m.shape, shape, ndim * sizeof *shape);
  if ((rc = copy_mesh_ranks(ranks, n, &m.ranks, err)) != DCP_OK) return rc;
  md->meshes[md->nmeshes] = m;
  if (id) *id = (uint32_t)md->nmeshes;
  md->nmeshes++;
  return DCP_OK;
}

/* Check a tensor's dtype, ndim and shape (extents >= 0, byte size fits). */
static dcp_status check_tensor_geometry(const char *fqn, dcp_dtype dtype, uint32_t ndim,
                                        const int64_t *shape, dcpi_err *err) {
  size_t esize = dcp_dtype_size(dtype);
  if (esize == 0) return dcpi_fail(err, DCP_EINVAL, "tensor '%s': invalid dtype %d", fqn, (int)dtype);
  if (ndim > DCP_MAX_NDIM)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': ndim %u exceeds %d", fqn, ndim, DCP_MAX_NDIM);
  if (ndim > 0 && !shape) return dcpi_fail(err, DCP_EINVAL, "tensor '%s': shape is NULL", fqn);
  for (uint32_t d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': extent %u is negative", fqn, d);
  int64_t numel, bytes; /* the count first: a zero extent anywhere makes it 0 */
  if (dcpi_numel(ndim, shape, &numel) || !dcpi_mul_i64(numel, (int64_t)esize, &bytes))
    return dcpi_fail(err, DCP_EOVERFLOW, "tensor '%s': byte size overflows int64", fqn);
  return DCP_OK;
}

/* Check a tensor_map against mesh m: masks name existing mesh dimensions,
 * and each mesh dimension shards at most one tensor dimension. */
static dcp_status check_tensor_map(const char *fqn, uint32_t ndim, const uint32_t *map,
                                   const dcpi_md_mesh *m, dcpi_err *err) {
  if (ndim > 0 && !map) return dcpi_fail(err, DCP_EINVAL, "tensor '%s': tensor_map is NULL", fqn);
  uint32_t valid = m->ndim >= 32 ? UINT32_MAX : ((1u << m->ndim) - 1);
  uint32_t used = 0;
  for (uint32_t d = 0; d < ndim; d++) {
    if (map[d] & ~valid)
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': tensor_map[%u] = 0x%x names a mesh "
                       "dimension beyond the mesh's %u", fqn, d, map[d], m->ndim);
    if (map[d] & used)
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': tensor_map[%u] reuses a mesh dimension",
                       fqn, d);
    used |= map[d];
  }
  return DCP_OK;
}

/* Check that name is not yet an fqn or bytes key. */
static dcp_status check_unused_name(const dcpi_md *md, const char *name, size_t len,
                                    const char *what, dcpi_err *err) {
  uint32_t v;
  if (!dcpi_strmap_get(&md->names, name, len, &v)) return DCP_OK;
  return dcpi_fail(err, DCP_EEXIST, "%s '%s' is already used by a %s", what, name,
                   (v & DCPI_MD_BYTES_BIT) ? "bytes item" : "tensor");
}

/* Validate the mesh part of add_tensor (md_int.h). */
dcp_status dcpi_md_check_tensor_mesh(const dcpi_md *md, const char *fqn, uint32_t ndim,
                                    int32_t mesh, const uint32_t *map, dcpi_err *err) {
  if (mesh < -1) return dcpi_fail(err, DCP_EINVAL, "tensor '%s': mesh %d is invalid", fqn, (int)mesh);
  if (mesh < 0) return DCP_OK;
  if ((size_t)mesh >= md->nmeshes)
    return dcpi_fail(err, DCP_ENOTFOUND, "tensor '%s': mesh %d does not exist (%zu meshes)", fqn,
                     (int)mesh, md->nmeshes);
  return check_tensor_map(fqn, ndim, map, &md->meshes[mesh], err);
}

dcp_status dcpi_md_add_tensor(dcpi_md *md, const char *fqn, dcp_dtype dtype, uint32_t ndim,
                              const int64_t *shape, int32_t mesh, const uint32_t *tensor_map,
                              uint32_t *tid, dcpi_err *err) {
  size_t len;
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  dcp_status s = check_item_name(fqn, "tensor fqn", &len, err);
  if (s == DCP_OK) s = check_tensor_geometry(fqn, dtype, ndim, shape, err);
  if (s == DCP_OK) s = dcpi_md_check_tensor_mesh(md, fqn, ndim, mesh, tensor_map, err);
  if (s == DCP_OK) s = check_unused_name(md, fqn, len, "tensor fqn", err);
  if (s != DCP_OK) return s;
  if (md->ntensors >= DCPI_MD_BYTES_BIT) return dcpi_fail(err, DCP_EOVERFLOW, "too many tensors");
  if ((s = DCPI_RESERVE(md->tensors, md->cap_tensors, md->ntensors + 1)) != DCP_OK)
    return dcpi_fail(err, s, "cannot grow the tensor table");
  dcpi_md_tensor t = {.fqn_len = len, .dtype = dtype, .ndim = ndim, .mesh = mesh};
  if (ndim) memcpy(t.shape, shape, ndim * sizeof *shape);
  if (mesh >= 0 && ndim) memcpy(t.tensor_map, tensor_map, ndim * sizeof *tensor_map);
  if (!(t.fqn = dup_bytes(fqn, len))) return dcpi_fail(err, DCP_ENOMEM, "cannot copy fqn");
  int rc = dcpi_strmap_put(&md->names, t.fqn, len, (uint32_t)md->ntensors, NULL);
  if (rc < 0) {
    free(t.fqn);
    return map_fail(rc, err);
  }
  md->tensors[md->ntensors] = t;
  if (tid) *tid = (uint32_t)md->ntensors;
  md->ntensors++;
  return DCP_OK;
}

/* Check that a ref's block structure is consistent with its raw length and
 * codec, and that it names an existing file. `what` names the owner. */
static dcp_status check_ref(const dcpi_md *md, const dcp_storage_ref *ref, const char *what,
                            dcpi_err *err) {
  if (ref->file >= md->nfiles)
    return dcpi_fail(err, DCP_ENOTFOUND, "%s: file %u does not exist (%zu files)", what,
                     ref->file, md->nfiles);
  if (!dcpi_codec_known(ref->codec))
    return dcpi_fail(err, DCP_EINVAL, "%s: invalid codec %d", what, (int)ref->codec);
  if (ref->block_size < 1) return dcpi_fail(err, DCP_EINVAL, "%s: block size is 0", what);
  if (ref->raw_length > INT64_MAX || ref->offset > INT64_MAX || ref->stored_length > INT64_MAX ||
      ref->offset + ref->stored_length > INT64_MAX)
    return dcpi_fail(err, DCP_EOVERFLOW, "%s: offset + stored length exceeds INT64_MAX", what);
  uint64_t blocks = ref->raw_length ? (ref->raw_length - 1) / ref->block_size + 1 : 0;
  if (ref->block_count != blocks)
    return dcpi_fail(err, DCP_EINVAL, "%s: block_count %llu, but raw length %llu in blocks of %u "
                     "needs %llu", what, (unsigned long long)ref->block_count,
                     (unsigned long long)ref->raw_length, ref->block_size,
                     (unsigned long long)blocks);
  if (blocks && !ref->block_checksums)
    return dcpi_fail(err, DCP_EINVAL, "%s: block_checksums is NULL", what);
  if (ref->codec == DCP_CODEC_NONE && ref->stored_length != ref->raw_length)
    return dcpi_fail(err, DCP_EINVAL, "%s: uncompressed, but stored length %llu != raw length "
                     "%llu", what, (unsigned long long)ref->stored_length,
                     (unsigned long long)ref->raw_length);
  return DCP_OK;
}

/* For the zstd codecs: each block's stored length lies in [1, its raw length]
 * and they add up to stored_length. */
static dcp_status check_block_lengths(const dcp_storage_ref *ref, const char *what, dcpi_err *err) {
  if (!dcpi_codec_zstd(ref->codec) || ref->block_count == 0) return DCP_OK;
  if (!ref->block_stored_lengths)
    return dcpi_fail(err, DCP_EINVAL, "%s: zstd ref without block_stored_lengths", what);
  uint64_t sum = 0;
  for (uint64_t b = 0; b < ref->block_count; b++) {
    uint64_t raw = b + 1 < ref->block_count ? ref->block_size
                                            : ref->raw_length - b * (uint64_t)ref->block_size;
    uint64_t l = ref->block_stored_lengths[b];
    if (l < 1 || l > raw)
      return dcpi_fail(err, DCP_EINVAL, "%s: block %llu stored length %llu not in [1, %llu]",
                       what, (unsigned long long)b, (unsigned long long)l,
                       (unsigned long long)raw);
    sum += l; /* cannot wrap: bounded by raw_length <= INT64_MAX */
  }
  if (sum != ref->stored_length)
    return dcpi_fail(err, DCP_EINVAL, "%s: block stored lengths add up to %llu, stored length "
                     "is %llu", what, (unsigned long long)sum,
                     (unsigned long long)ref->stored_length);
  return DCP_OK;
}

/* Copy ref into *out, duplicating its arrays. */
static dcp_status copy_ref(const dcp_storage_ref *ref, dcpi_md_ref *out, dcpi_err *err) {
  *out = (dcpi_md_ref){ref->file, ref->codec, ref->block_size, ref->offset, ref->stored_length,
                       ref->raw_length, ref->block_count, NULL, NULL};
  size_t n = (size_t)ref->block_count;
  if (n == 0) return DCP_OK;
  if (n > SIZE_MAX / sizeof(uint64_t))
    return dcpi_fail(err, DCP_EOVERFLOW, "too many blocks");
  out->checksums = malloc(n * sizeof(uint64_t));
  if (dcpi_codec_zstd(ref->codec)) out->lens = malloc(n * sizeof(uint64_t));
  if (!out->checksums || (dcpi_codec_zstd(ref->codec) && !out->lens)) {
    ref_free(out);
    return dcpi_fail(err, DCP_ENOMEM, "cannot copy block checksums");
  }
  memcpy(out->checksums, ref->block_checksums, n * sizeof(uint64_t));
  if (out->lens) memcpy(out->lens, ref->block_stored_lengths, n * sizeof(uint64_t));
  return DCP_OK;
}

/* Validate a full ref (consistency and block lengths) and copy it. */
static dcp_status take_ref(const dcpi_md *md, const dcp_storage_ref *ref, const char *what,
                           dcpi_md_ref *out, dcpi_err *err) {
  if (!ref) return dcpi_fail(err, DCP_EINVAL, "%s: storage ref is NULL", what);
  dcp_status rc = check_ref(md, ref, what, err);
  if (rc == DCP_OK) rc = check_block_lengths(ref, what, err);
  if (rc == DCP_OK) rc = copy_ref(ref, out, err);
  return rc;
}

/* Check a chunk's box against tensor t: non-negative, inside the shape and
 * non-empty; *raw gets its byte size. */
static dcp_status check_chunk_box(const dcpi_md_tensor *t, const int64_t *off, const int64_t *sz,
                                  uint64_t *raw, dcpi_err *err) {
  if (t->ndim > 0 && (!off || !sz))
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': chunk offset or size is NULL", t->fqn);
  int64_t bytes = (int64_t)dcp_dtype_size(t->dtype);
  for (uint32_t d = 0; d < t->ndim; d++) {
    int64_t end;
    if (off[d] < 0 || sz[d] < 0)
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': chunk dim %u has a negative offset or "
                       "size", t->fqn, d);
    if (!dcpi_add_i64(off[d], sz[d], &end))
      return dcpi_fail(err, DCP_EOVERFLOW, "tensor '%s': chunk dim %u end overflows", t->fqn, d);
    if (end > t->shape[d])
      return dcpi_fail(err, DCP_EBOUNDS, "tensor '%s': chunk dim %u [%lld, %lld) exceeds extent "
                       "%lld", t->fqn, d, (long long)off[d], (long long)end,
                       (long long)t->shape[d]);
    if (sz[d] == 0)
      return dcpi_fail(err, DCP_EINVAL, "tensor '%s': chunk is empty (dim %u); empty chunks "
                       "store nothing and are not recorded", t->fqn, d);
    bytes *= sz[d]; /* cannot overflow: bounded by the tensor's checked size */
  }
  *raw = (uint64_t)bytes;
  return DCP_OK;
}

/* Check a chunk's ref as take_ref does, naming tensor t in the message.
 * The checks run first without one: formatting the name for every chunk
 * was a fifth of building the metadata of 27 M chunks; only a ref that
 * fails is checked again to say why. */
static dcp_status check_chunk_ref(const dcpi_md *md, const dcpi_md_tensor *t,
                                  const dcp_storage_ref *ref, dcpi_err *err) {
  if (ref && check_ref(md, ref, "", NULL) == DCP_OK && check_block_lengths(ref, "", NULL) == DCP_OK)
    return DCP_OK;
  char what[96];
  snprintf(what, sizeof what, "tensor '%.60s' chunk", t->fqn);
  if (!ref) return dcpi_fail(err, DCP_EINVAL, "%s: storage ref is NULL", what);
  dcp_status rc = check_ref(md, ref, what, err);
  return rc != DCP_OK ? rc : check_block_lengths(ref, what, err);
}

dcp_status dcpi_md_add_chunk(dcpi_md *md, uint32_t tid, const int64_t *offset, const int64_t *size,
                             const dcp_storage_ref *ref, dcpi_err *err) {
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  if (tid >= md->ntensors)
    return dcpi_fail(err, DCP_ENOTFOUND, "tensor id %u does not exist (%zu tensors)", tid,
                     md->ntensors);
  dcpi_md_tensor *t = &md->tensors[tid];
  uint64_t raw = 0;
  dcp_status rc = check_chunk_box(t, offset, size, &raw, err);
  if (rc != DCP_OK) return rc;
  if (ref && ref->raw_length != raw)
    return dcpi_fail(err, DCP_EINVAL, "tensor '%s': chunk raw length %llu, box holds %llu bytes",
                     t->fqn, (unsigned long long)ref->raw_length, (unsigned long long)raw);
  if ((rc = check_chunk_ref(md, t, ref, err)) != DCP_OK) return rc;
  size_t nb = (size_t)ref->block_count, nd2 = 2 * (size_t)t->ndim;
  bool zstd = dcpi_codec_zstd(ref->codec);
  if (zstd && nb > SIZE_MAX / 2) return dcpi_fail(err, DCP_EOVERFLOW, "too many blocks");
  /* one block (a chunk has at least one): its checksum in the record, its
   * stored length is the chunk's; more: checksums, then stored lengths,
   * in the pool */
  size_t pooled = nb == 1 ? 0 : zstd ? 2 * nb : nb;
  if (DCPI_RESERVE(t->chunks, t->cap_chunks, t->nchunks + 1) ||
      DCPI_RESERVE(t->boxes, t->cap_boxes, (t->nchunks + 1) * nd2) ||
      DCPI_RESERVE(md->cks, md->cap_cks, md->ncks + pooled))
    return dcpi_fail(err, DCP_ENOMEM, "tensor '%s': cannot grow the chunk list", t->fqn);
  t->chunks[t->nchunks] = (dcpi_md_chunk){ref->offset, ref->stored_length,
                                          nb == 1 ? ref->block_checksums[0] : md->ncks,
                                          ref->file, ref->block_size, (uint8_t)ref->codec};
  if (pooled) memcpy(md->cks + md->ncks, ref->block_checksums, nb * sizeof *md->cks);
  if (pooled && zstd)
    memcpy(md->cks + md->ncks + nb, ref->block_stored_lengths, nb * sizeof *md->cks);
  md->ncks += pooled;
  if (nd2) {
    memcpy(t->boxes + t->nchunks * nd2, offset, t->ndim * sizeof *offset);
    memcpy(t->boxes + t->nchunks * nd2 + t->ndim, size, t->ndim * sizeof *size);
  }
  t->nchunks++;
  md->nchunks_total++;
  return DCP_OK;
}

/* Grow *buf (of *cap elements of elem bytes) to exactly need elements
 * when it holds fewer: a reservation, unlike DCPI_RESERVE, does not round
 * up to a power of two. */
static dcp_status reserve_exact(void **buf, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return DCP_OK;
  if (elem && need > SIZE_MAX / elem) return DCP_EOVERFLOW;
  void *grown = realloc(*buf, need * elem);
  if (!grown) return DCP_ENOMEM;
  *buf = grown;
  *cap = need;
  return DCP_OK;
}

dcp_status dcpi_md_reserve_chunks(dcpi_md *md, uint32_t tid, size_t n, dcpi_err *err) {
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  if (tid >= md->ntensors)
    return dcpi_fail(err, DCP_ENOTFOUND, "tensor id %u does not exist (%zu tensors)", tid,
                     md->ntensors);
  dcpi_md_tensor *t = &md->tensors[tid];
  size_t nd2 = 2 * (size_t)t->ndim;
  if (nd2 && n > SIZE_MAX / nd2) return dcpi_fail(err, DCP_EOVERFLOW, "too many chunks");
  dcp_status rc = reserve_exact((void **)&t->chunks, &t->cap_chunks, n, sizeof *t->chunks);
  if (rc == DCP_OK && nd2)
    rc = reserve_exact((void **)&t->boxes, &t->cap_boxes, n * nd2, sizeof *t->boxes);
  return rc ? dcpi_fail(err, rc, "tensor '%s': cannot reserve %zu chunks", t->fqn, n) : DCP_OK;
}

/* Check a bytes item's scope and rank, that the key is not a tensor fqn nor
 * used with the other scope, and that (key, rank) is new. */
static dcp_status check_bytes_ident(const dcpi_md *md, const char *key, size_t len,
                                    dcp_scope scope, int32_t rank, const char *ident,
                                    dcpi_err *err) {
  if (scope != DCP_SCOPE_REPLICATED && scope != DCP_SCOPE_PER_RANK)
    return dcpi_fail(err, DCP_EINVAL, "bytes item '%s': invalid scope %d", key, (int)scope);
  if ((scope == DCP_SCOPE_REPLICATED) != (rank == -1) || rank < -1)
    return dcpi_fail(err, DCP_EINVAL, "bytes item '%s': rank %d does not fit its scope (-1 "
                     "for replicated, >= 0 per rank)", key, (int)rank);
  uint32_t v;
  if (dcpi_strmap_get(&md->names, key, len, &v)) {
    if (!(v & DCPI_MD_BYTES_BIT))
      return dcpi_fail(err, DCP_EEXIST, "bytes key '%s' is already a tensor fqn", key);
    const dcpi_md_bkey *k = &md->bkeys[v & ~DCPI_MD_BYTES_BIT];
    if (k->nitems > 0 && k->scope != scope)
      return dcpi_fail(err, DCP_ESCOPE, "bytes item '%s' already exists with the other scope", key);
  }
  if (dcpi_strmap_get(&md->bytes_ids, ident, len + 5, &v))
    return dcpi_fail(err, DCP_EEXIST, "bytes item '%s' rank %d already exists", key, (int)rank);
  return DCP_OK;
}

/* Build the (key, rank) identity string: key, NUL, 4-byte little-endian rank. */
static char *make_ident(const char *key, size_t len, int32_t rank) {
  char *id = malloc(len + 5);
  if (!id) return NULL;
  memcpy(id, key, len);
  id[len] = '\0';
  uint32_t r = (uint32_t)rank;
  for (int i = 0; i < 4; i++) id[len + 1 + i] = (char)(uint8_t)(r >> (8 * i));
  return id;
}

/* Find or create the key record of a bytes key; *out gets its index. A new
 * record is committed at once and owns the key string the `names` map
 * borrows, so a later failure of the same add cannot leave that map with a
 * dangling pointer (the record then just has no items). */
static dcp_status bytes_key_record(dcpi_md *md, const char *key, size_t len, uint32_t *out,
                                   dcpi_err *err) {
  uint32_t v;
  if (dcpi_strmap_get(&md->names, key, len, &v)) {
    *out = v & ~DCPI_MD_BYTES_BIT;
    return DCP_OK;
  }
  dcp_status s = DCPI_RESERVE(md->bkeys, md->cap_bkeys, md->nbkeys + 1);
  if (s != DCP_OK) return dcpi_fail(err, s, "cannot grow the bytes key table");
  char *copy = dup_bytes(key, len);
  if (!copy) return dcpi_fail(err, DCP_ENOMEM, "cannot copy bytes key");
  int rc = dcpi_strmap_put(&md->names, copy, len, (uint32_t)md->nbkeys | DCPI_MD_BYTES_BIT, NULL);
  if (rc < 0) {
    free(copy);
    return map_fail(rc, err);
  }
  md->bkeys[md->nbkeys] = (dcpi_md_bkey){copy, len, DCP_SCOPE_REPLICATED, 0};
  *out = (uint32_t)md->nbkeys++;
  return DCP_OK;
}

/* Link a validated bytes item b (ref and ident owned by b) into md. */
static dcp_status commit_bytes(dcpi_md *md, dcpi_md_bytes *b, dcpi_err *err) {
  uint32_t k = 0;
  dcp_status s = DCPI_RESERVE(md->bytes, md->cap_bytes, md->nbytes + 1);
  if (s != DCP_OK) return dcpi_fail(err, s, "cannot grow the bytes table");
  if ((s = bytes_key_record(md, b->ident, b->key_len, &k, err)) != DCP_OK) return s;
  int rc = dcpi_strmap_put(&md->bytes_ids, b->ident, b->key_len + 5, (uint32_t)md->nbytes, NULL);
  if (rc < 0) return map_fail(rc, err);
  dcpi_md_bkey *rec = &md->bkeys[k];
  rec->scope = b->scope;
  rec->nitems++;
  b->key = rec->key;
  md->bytes[md->nbytes++] = *b;
  return DCP_OK;
}

dcp_status dcpi_md_add_bytes(dcpi_md *md, const char *key, dcp_scope scope, int32_t rank,
                             const dcp_storage_ref *ref, dcpi_err *err) {
  size_t len;
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  dcp_status rc = check_item_name(key, "bytes key", &len, err);
  if (rc != DCP_OK) return rc;
  if (md->nbytes >= UINT32_MAX - 1) return dcpi_fail(err, DCP_EOVERFLOW, "too many bytes items");
  dcpi_md_bytes b = {.key_len = len, .scope = scope, .rank = rank};
  if (!(b.ident = make_ident(key, len, rank)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot copy bytes key");
  char what[96];
  snprintf(what, sizeof what, "bytes item '%.60s'", key);
  rc = check_bytes_ident(md, key, len, scope, rank, b.ident, err);
  if (rc == DCP_OK) rc = take_ref(md, ref, what, &b.ref, err);
  if (rc == DCP_OK && (rc = commit_bytes(md, &b, err)) != DCP_OK) ref_free(&b.ref);
  if (rc != DCP_OK) free(b.ident);
  return rc;
}

dcp_status dcpi_md_add_kv(dcpi_md *md, const char *key, const char *value, dcpi_err *err) {
  size_t klen;
  if (!md) return dcpi_fail(err, DCP_EINVAL, "metadata builder is NULL");
  dcp_status s = check_name(key, "key/value key", &klen, err);
  if (s != DCP_OK) return s;
  if (!value) return dcpi_fail(err, DCP_EINVAL, "value of key '%s' is NULL", key);
  uint32_t prev;
  if (dcpi_strmap_get(&md->kv_keys, key, klen, &prev))
    return dcpi_fail(err, DCP_EEXIST, "key '%s' already has a value", key);
  if ((s = DCPI_RESERVE(md->kvs, md->cap_kvs, md->nkvs + 1)) != DCP_OK)
    return dcpi_fail(err, s, "cannot grow the key/value table");
  size_t vlen = strlen(value);
  dcpi_md_kv kv = {dup_bytes(key, klen), dup_bytes(value, vlen), klen, vlen};
  int rc = (kv.key && kv.value) ? dcpi_strmap_put(&md->kv_keys, kv.key, klen, (uint32_t)md->nkvs,
                                                  NULL)
                                : DCP_ENOMEM;
  if (rc < 0) {
    free(kv.key);
    free(kv.value);
    return dcpi_fail(err, (dcp_status)rc, "cannot store key '%s'", key);
  }
  md->kvs[md->nkvs++] = kv;
  return DCP_OK;
}

size_t dcpi_md_tensor_count(const dcpi_md *md) { return md ? md->ntensors : 0; }
size_t dcpi_md_chunk_count(const dcpi_md *md) { return md ? md->nchunks_total : 0; }
size_t dcpi_md_file_count(const dcpi_md *md) { return md ? md->nfiles : 0; }
size_t dcpi_md_mesh_count(const dcpi_md *md) { return md ? md->nmeshes : 0; }
size_t dcpi_md_bytes_count(const dcpi_md *md) { return md ? md->nbytes : 0; }
size_t dcpi_md_kv_count(const dcpi_md *md) { return md ? md->nkvs : 0; }
