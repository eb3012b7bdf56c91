/* view.c — opening a metadata buffer: header, directory and checksum checks,
 * eager decoding of the small tables (strings, files, meshes, tensor index,
 * bytes items, key/values), and the accessors over them. Chunk lists are
 * decoded lazily (view_chunks.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "base/err.h"
#include "base/strmap.h"
#include "metadata/codec.h"
#include "metadata/common.h"
#include "metadata/format.h"
#include "metadata/view.h"
#include "model/box.h"
#include "model/name.h"

/* Position and length of one section within the buffer. */
typedef struct sec_range {
  size_t off, len;
} sec_range;

/* Start a cursor over section range s of m's buffer, described by where. */
static void dec_init(dcpi_dec *d, const dcp_meta *m, sec_range s, const char *where,
                     dcpi_err *err) {
  d->r = (dcpi_rbuf){m->buf + s.off, s.len, 0};
  d->err = err;
  d->item = -1;
  d->kind = d->name = NULL;
  snprintf(d->where, sizeof d->where, "%s", where);
}

/* Fail unless the cursor consumed its whole range (the section's, no
 * longer an item's). */
static dcp_status dec_end(dcpi_dec *d) {
  d->item = -1;
  if (dcpi_r_left(&d->r) == 0) return DCP_OK;
  return dcpi_dec_fail(d, "%zu trailing bytes", dcpi_r_left(&d->r));
}

/* ---- header and directory --------------------------------------------- */

/* The name of each section in messages, by id (as in the decoders'). */
static const char *const sec_names[DCPI_SEC_COUNT + 1] = {
    "", "strings section", "files section", "meshes section", "tensors section",
    "chunks section", "bytes section", "key/value section", "save section"};

/* Which part of a buffer of len bytes (len >= DCPI_SECTIONS_START +
 * DCPI_TRAILER_SIZE) holds byte offset at: header, directory, the section
 * the directory places there, or the trailer. Used to name where a
 * truncation cuts the file. */
static const char *part_at(const uint8_t *p, size_t len, unsigned nsec, uint64_t at) {
  if (at < DCPI_HEADER_SIZE) return "header";
  if (at < DCPI_SECTIONS_AT(nsec)) return "directory";
  if (at >= len - DCPI_TRAILER_SIZE) return "trailer";
  for (unsigned i = 0; i < nsec; i++) {
    const uint8_t *d = p + DCPI_HEADER_SIZE + (size_t)i * DCPI_DIRENT_SIZE;
    uint64_t off = dcpi_get_u64(d + 8), slen = dcpi_get_u64(d + 16);
    if (at >= off && at - off < slen) return sec_names[i + 1];
  }
  return "sections";
}

/* Where the directory says the last section ends (the trailer's offset
 * when the directory is intact). */
static uint64_t sections_end(const uint8_t *p, unsigned nsec) {
  const uint8_t *d = p + DCPI_HEADER_SIZE + (size_t)(nsec - 1) * DCPI_DIRENT_SIZE;
  uint64_t off = dcpi_get_u64(d + 8), slen = dcpi_get_u64(d + 16);
  return off + slen < off ? UINT64_MAX : off + slen;
}

/* After the whole-file checksum failed: name the part that is damaged.
 * Every byte is pinned by some check: the header fields by their required
 * values (magic, version and total length are checked before this), the
 * directory by contiguity and ids, each section by its own xxh3 in the
 * directory. So when the header and the directory hold and every section
 * matches its checksum, the damage is in the trailer itself. */
static const char *locate_damage(const uint8_t *p, size_t len, unsigned nsec, char *buf,
                                 size_t cap) {
  if (dcpi_get_u32(p + 12) != 0 || dcpi_get_u32(p + 24) != nsec || dcpi_get_u32(p + 28) != 0)
    return "header";
  size_t pos = DCPI_SECTIONS_AT(nsec), end = len - DCPI_TRAILER_SIZE;
  for (unsigned i = 0; i < nsec; i++) {
    const uint8_t *d = p + DCPI_HEADER_SIZE + (size_t)i * DCPI_DIRENT_SIZE;
    uint64_t off = dcpi_get_u64(d + 8), slen = dcpi_get_u64(d + 16);
    if (dcpi_get_u32(d) != i + 1 || dcpi_get_u32(d + 4) != 0 || off != pos || slen > end - pos)
      return "directory";
    if (dcpi_mv_hash(p + off, (size_t)slen) != dcpi_get_u64(d + 24)) {
      /* the section's bytes and its checksum in the directory disagree:
       * either may be the damaged one */
      snprintf(buf, cap, "%s (or its checksum in the directory)", sec_names[i + 1]);
      return buf;
    }
    pos += (size_t)slen;
  }
  return pos == end ? "trailer" : "directory";
}

/* Check magic, version, total length and (before version 4) the trailer
 * checksum. Every message names the part of the file at fault (header,
 * directory, a section or the trailer). Version 4 leaves the trailer to
 * dcpi_meta_check_whole: its header and directory are pinned by their
 * checks (no single flip of version 4 reads as an older version), each
 * small section by its checksum at open, and each chunk list by its own
 * checksum when it is first used. */
static dcp_status check_header(const uint8_t *p, size_t len, uint32_t *version, dcpi_err *err) {
  if (len < DCPI_MAGIC_LEN + 4)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: %zu bytes is too short for a header",
                     len);
  if (memcmp(p, DCPI_MAGIC, DCPI_MAGIC_LEN) != 0)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "corrupt metadata: bad magic in the header (not a libdcp .metadata)");
  *version = dcpi_get_u32(p + 8);
  if (*version == 0)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: format version 0 in the header is "
                     "invalid");
  if (*version > DCPI_FORMAT_VERSION)
    return dcpi_fail(err, DCP_EVERSION, "metadata format version %u (header) is newer than the "
                     "supported version %u", *version, DCPI_FORMAT_VERSION);
  uint64_t total = len >= 24 ? dcpi_get_u64(p + 16) : 0;
  unsigned nsec = DCPI_SEC_COUNT_OF(*version);
  size_t start = DCPI_SECTIONS_AT(nsec);
  if (len < start + DCPI_TRAILER_SIZE)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: truncated inside the %s (%zu bytes)",
                     len < DCPI_HEADER_SIZE       ? "header"
                     : len < start ? "directory"
                     : total >= start + DCPI_TRAILER_SIZE
                         ? part_at(p, (size_t)total, nsec, len)
                         : "sections",
                     len);
  if (total != len && sections_end(p, nsec) == len - DCPI_TRAILER_SIZE)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: the header says %llu bytes, the "
                     "file and its directory %zu (a damaged header)", (unsigned long long)total,
                     len);
  if (total > len)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: truncated inside the %s: the header "
                     "says %llu bytes, the file has %zu", part_at(p, (size_t)total, nsec, len),
                     (unsigned long long)total, len);
  if (total != len)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: the header says %llu bytes, the file "
                     "has %zu (padded after the trailer)",
                     (unsigned long long)total, len);
  uint64_t want = dcpi_get_u64(p + len - DCPI_TRAILER_SIZE);
  char where[80];
  if (DCPI_CHECKSUMS_ENFORCED && *version < 4 && dcpi_mv_hash(p, len - DCPI_TRAILER_SIZE) != want)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: whole-file checksum mismatch, the "
                     "damage is in the %s", locate_damage(p, len, nsec, where, sizeof where));
  if (dcpi_get_u32(p + 12) != 0 || dcpi_get_u32(p + 28) != 0)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: reserved header field is not zero");
  if (dcpi_get_u32(p + 24) != nsec)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: %u sections in the header, version %u "
                     "has %u", dcpi_get_u32(p + 24), *version, nsec);
  return DCP_OK;
}

/* Check directory entry i: id, contiguous placement within the file, and
 * (unless lazy: the chunks section of version 4, whose lists carry their
 * own checksums) the section's xxh3. *pos is where the section must start;
 * it advances. */
static dcp_status check_dirent(const uint8_t *p, size_t len, unsigned i, bool lazy, size_t *pos,
                               sec_range *out, dcpi_err *err) {
  const uint8_t *d = p + DCPI_HEADER_SIZE + (size_t)i * DCPI_DIRENT_SIZE;
  uint32_t id = dcpi_get_u32(d);
  uint64_t off = dcpi_get_u64(d + 8), slen = dcpi_get_u64(d + 16);
  size_t end = len - DCPI_TRAILER_SIZE;
  if (id != i + 1 || dcpi_get_u32(d + 4) != 0)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: directory entry %u has id %u (want "
                     "%u) or a non-zero reserved field", i, id, i + 1);
  if (off != *pos || slen > end - *pos)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: directory: section %u at [%llu, +%llu) "
                     "is not contiguous at %zu within the %zu section bytes", id,
                     (unsigned long long)off, (unsigned long long)slen, *pos, end);
  if (DCPI_CHECKSUMS_ENFORCED && !(lazy && id == DCPI_SEC_CHUNKS) &&
      dcpi_mv_hash(p + off, (size_t)slen) != dcpi_get_u64(d + 24))
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: %s checksum mismatch (the damage is "
                     "in the section or in its checksum in the directory)", sec_names[id]);
  *out = (sec_range){(size_t)off, (size_t)slen};
  *pos += (size_t)slen;
  return DCP_OK;
}

/* Check the whole directory; secs[id] gets each section's range. */
static dcp_status check_directory(const uint8_t *p, size_t len, unsigned nsec, bool lazy,
                                  sec_range *secs, dcpi_err *err) {
  size_t pos = DCPI_SECTIONS_AT(nsec);
  for (unsigned i = 0; i < nsec; i++) {
    dcp_status rc = check_dirent(p, len, i, lazy, &pos, &secs[i + 1], err);
    if (rc != DCP_OK) return rc;
  }
  if (pos != len - DCPI_TRAILER_SIZE)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: %zu unclaimed bytes before the "
                     "trailer", len - DCPI_TRAILER_SIZE - pos);
  return DCP_OK;
}

/* ---- strings ---------------------------------------------------------- */

/* Decode the string table: each entry a length, the bytes, and a NUL. The
 * strings then point into the buffer copy, terminated in place. */
static dcp_status dec_strings(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "strings section", err);
  uint64_t n = 0, len = 0;
  dcp_status rc = dcpi_dec_count(&d, DCPI_MIN_STRING, "string count", &n);
  if (rc != DCP_OK) return rc;
  if (!(m->strings = malloc((n ? n : 1) * sizeof *m->strings)) ||
      !(m->name_ok = calloc(n ? n : 1, 1)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot hold %llu strings", (unsigned long long)n);
  for (uint64_t i = 0; i < n; i++) {
    d.item = (int64_t)i, d.kind = "string";
    if ((rc = dcpi_dec_var(&d, dcpi_r_left(&d.r), "string length", &len)) != DCP_OK) return rc;
    const char *p = (const char *)d.r.p + d.r.pos;
    if (len == dcpi_r_left(&d.r)) return dcpi_dec_fail(&d, "no room for the terminating NUL");
    if (memchr(p, '\0', (size_t)len)) return dcpi_dec_fail(&d, "embedded NUL byte");
    if (p[len] != '\0') return dcpi_dec_fail(&d, "missing terminating NUL");
    m->strings[i] = (dcpi_mv_string){p, (size_t)len};
    m->nstrings = (size_t)i + 1;
    d.r.pos += (size_t)len + 1;
  }
  return dec_end(&d);
}

/* Resolve a string index read from d; fails when out of range. */
static dcp_status dec_string(dcpi_dec *d, const dcp_meta *m, const char *what,
                             const dcpi_mv_string **out) {
  uint64_t idx = 0;
  dcp_status rc = dcpi_dec_var(d, UINT64_MAX, what, &idx);
  if (rc != DCP_OK) return rc;
  if (idx >= m->nstrings)
    return dcpi_dec_fail(d, "%s: string index %llu out of range (%zu strings)", what,
                         (unsigned long long)idx, m->nstrings);
  *out = &m->strings[idx];
  return DCP_OK;
}

/* Resolve a string index that must be a valid fqn or key (1..DCP_MAX_NAME). */
static dcp_status dec_name(dcpi_dec *d, const dcp_meta *m, const char *what,
                           const dcpi_mv_string **out) {
  dcp_status rc = dec_string(d, m, what, out);
  if (rc != DCP_OK) return rc;
  if ((*out)->len == 0 || (*out)->len > DCP_MAX_NAME)
    return dcpi_dec_fail(d, "%s has length %zu, not in 1..%d", what, (*out)->len, DCP_MAX_NAME);
  return DCP_OK;
}

/* Resolve a string index that must be an fqn or bytes key: dec_name, then
 * the name rule of dcp_state_add_* (model/name.h), so a hostile file cannot
 * hand a reader a name no saver could have written. Each string is checked
 * once (a per-rank bytes key is used by every rank's item). */
static dcp_status dec_item_name(dcpi_dec *d, const dcp_meta *m, const char *what,
                                const dcpi_mv_string **out) {
  dcp_status rc = dec_name(d, m, what, out);
  if (rc != DCP_OK) return rc;
  size_t at, idx = (size_t)(*out - m->strings);
  if (m->name_ok[idx]) return DCP_OK;
  const char *why = dcpi_name_violation((*out)->s, (*out)->len, &at);
  if (why) return dcpi_dec_fail(d, "%s %s at byte %zu", what, why, at);
  m->name_ok[idx] = 1;
  return DCP_OK;
}

/* ---- files ------------------------------------------------------------ */

/* Check that a file name is a plain name that stays inside the checkpoint
 * directory, and that it is not a duplicate (names indexed in seen). */
static dcp_status check_file_name(dcpi_dec *d, const dcpi_mv_string *n, dcpi_strmap *seen) {
  if (memchr(n->s, '/', n->len) || memchr(n->s, '\\', n->len) || strcmp(n->s, ".") == 0 ||
      strcmp(n->s, "..") == 0)
    return dcpi_dec_fail(d, "file name is not a plain file name");
  int rc = dcpi_strmap_put(seen, n->s, n->len, 0, NULL);
  if (rc < 0) return dcpi_fail(d->err, (dcp_status)rc, "cannot index file names");
  if (rc == 1) return dcpi_dec_fail(d, "duplicate file name");
  return DCP_OK;
}

/* Decode one file table entry: name, default codec, default block size. */
static dcp_status dec_file_entry(dcpi_dec *d, const dcp_meta *m, dcpi_strmap *seen,
                                 dcpi_mv_file *f) {
  const dcpi_mv_string *name;
  uint64_t bs = 0;
  dcp_status rc = dec_name(d, m, "file name", &name);
  if (rc == DCP_OK) rc = check_file_name(d, name, seen);
  if (rc == DCP_OK) rc = dcpi_dec_u8(d, "default codec", &f->codec);
  if (rc == DCP_OK && !dcpi_codec_known(f->codec)) rc = dcpi_dec_fail(d, "unknown codec %u", f->codec);
  if (rc == DCP_OK) rc = dcpi_dec_var(d, UINT32_MAX, "default block size", &bs);
  if (rc == DCP_OK && bs == 0) rc = dcpi_dec_fail(d, "default block size 0");
  if (rc != DCP_OK) return rc;
  f->name = name->s;
  f->block_size = (uint32_t)bs;
  f->length = 0; /* from the save section, when there is one */
  return DCP_OK;
}

/* Decode the file table. */
static dcp_status dec_files(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "files section", err);
  uint64_t n = 0;
  dcp_status rc = dcpi_dec_count(&d, DCPI_MIN_FILE, "file count", &n);
  if (rc == DCP_OK && n > UINT32_MAX) rc = dcpi_dec_fail(&d, "more than 2^32 files");
  if (rc != DCP_OK) return rc;
  if (!(m->files = malloc((n ? n : 1) * sizeof *m->files)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot hold %llu files", (unsigned long long)n);
  dcpi_strmap seen = {0};
  for (uint64_t i = 0; i < n && rc == DCP_OK; i++) {
    d.item = (int64_t)i, d.kind = "file";
    rc = dec_file_entry(&d, m, &seen, &m->files[i]);
    if (rc == DCP_OK) m->nfiles = (size_t)i + 1;
  }
  dcpi_strmap_free(&seen);
  return rc != DCP_OK ? rc : dec_end(&d);
}

/* ---- meshes ----------------------------------------------------------- */

/* qsort comparator for int32 ranks. */
static int cmp_rank(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

/* Fail unless the n ranks are distinct (checked on a sorted copy). */
static dcp_status check_distinct(dcpi_dec *d, const int32_t *ranks, size_t n) {
  int32_t *sorted = malloc((n ? n : 1) * sizeof *sorted);
  if (!sorted) return dcpi_fail(d->err, DCP_ENOMEM, "cannot check mesh ranks");
  memcpy(sorted, ranks, n * sizeof *sorted);
  dcpi_sort(sorted, n, sizeof *sorted, cmp_rank);
  size_t dup = 0;
  for (size_t i = 1; i < n && !dup; i++)
    if (sorted[i] == sorted[i - 1]) dup = i;
  int32_t r = dup ? sorted[dup] : 0;
  free(sorted);
  return dup ? dcpi_dec_fail(d, "rank %d appears twice", (int)r) : DCP_OK;
}

/* Decode a mesh's extents; *n gets prod(shape), checked against the bytes
 * left (each rank takes at least one byte) before anything is allocated. */
static dcp_status dec_mesh_shape(dcpi_dec *d, dcpi_mv_mesh *mesh, size_t *n) {
  uint64_t ndim = 0, e = 0;
  dcp_status rc = dcpi_dec_var(d, DCP_MAX_MESH_NDIM, "mesh ndim", &ndim);
  if (rc == DCP_OK && ndim == 0) rc = dcpi_dec_fail(d, "mesh ndim 0");
  if (rc != DCP_OK) return rc;
  if (!(mesh->shape = malloc(ndim * sizeof *mesh->shape)))
    return dcpi_fail(d->err, DCP_ENOMEM, "cannot hold a mesh shape");
  mesh->ndim = (uint32_t)ndim;
  int64_t prod = 1;
  for (uint32_t k = 0; k < mesh->ndim; k++) {
    if ((rc = dcpi_dec_var(d, INT64_MAX, "mesh extent", &e)) != DCP_OK) return rc;
    if (e == 0) return dcpi_dec_fail(d, "mesh extent %u is 0", k);
    if (!dcpi_mul_i64(prod, (int64_t)e, &prod) || (uint64_t)prod > dcpi_r_left(&d->r))
      return dcpi_dec_fail(d, "mesh of more ranks than the %zu bytes left can hold",
                           dcpi_r_left(&d->r));
    mesh->shape[k] = (int64_t)e;
  }
  *n = (size_t)prod;
  return DCP_OK;
}

/* Decode one mesh: extents, then prod(extents) distinct ranks < world. */
static dcp_status dec_mesh(dcpi_dec *d, const dcp_meta *m, dcpi_mv_mesh *mesh) {
  size_t n = 0;
  dcp_status rc = dec_mesh_shape(d, mesh, &n);
  if (rc != DCP_OK) return rc;
  if (!(mesh->ranks = malloc(n * sizeof *mesh->ranks)))
    return dcpi_fail(d->err, DCP_ENOMEM, "cannot hold %zu mesh ranks", n);
  for (size_t r = 0; r < n; r++) {
    uint64_t v;
    if ((rc = dcpi_dec_var(d, (uint64_t)m->world_size - 1, "mesh rank", &v)) != DCP_OK) return rc;
    mesh->ranks[r] = (int32_t)v;
  }
  mesh->nranks = n;
  return check_distinct(d, mesh->ranks, n);
}

/* Decode the world size and the mesh table. */
static dcp_status dec_meshes(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "meshes section", err);
  uint64_t world = 0, n = 0;
  dcp_status rc = dcpi_dec_var(&d, INT32_MAX, "world size", &world);
  if (rc == DCP_OK && world == 0) rc = dcpi_dec_fail(&d, "world size 0");
  if (rc == DCP_OK) rc = dcpi_dec_count(&d, DCPI_MIN_MESH, "mesh count", &n);
  if (rc == DCP_OK && n > INT32_MAX) rc = dcpi_dec_fail(&d, "more than INT32_MAX meshes");
  if (rc != DCP_OK) return rc;
  m->world_size = (int32_t)world;
  if (!(m->meshes = calloc(n ? n : 1, sizeof *m->meshes)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot hold %llu meshes", (unsigned long long)n);
  for (uint64_t i = 0; i < n; i++) {
    d.item = (int64_t)i, d.kind = "mesh";
    m->nmeshes = (size_t)i + 1; /* counted first: a half-decoded mesh is freed too */
    if ((rc = dec_mesh(&d, m, &m->meshes[i])) != DCP_OK) return rc;
  }
  return dec_end(&d);
}

/* ---- tensor index ------------------------------------------------------ */

/* Decode a tensor's dtype, ndim and shape; its byte size must fit int64. */
static dcp_status dec_tensor_geometry(dcpi_dec *d, dcpi_mv_tensor *t) {
  uint8_t dt = 0;
  uint64_t ndim = 0, e = 0;
  dcp_status rc = dcpi_dec_u8(d, "dtype", &dt);
  if (rc == DCP_OK && dcp_dtype_size((dcp_dtype)dt) == 0) rc = dcpi_dec_fail(d, "invalid dtype %u", dt);
  if (rc == DCP_OK) rc = dcpi_dec_var(d, DCP_MAX_NDIM, "ndim", &ndim);
  if (rc != DCP_OK) return rc;
  t->dtype = (dcp_dtype)dt;
  t->ndim = (uint32_t)ndim;
  for (uint32_t k = 0; k < t->ndim; k++) {
    if ((rc = dcpi_dec_var(d, INT64_MAX, "extent", &e)) != DCP_OK) return rc;
    t->shape[k] = (int64_t)e;
  }
  int64_t numel, bytes; /* the count first: a zero extent anywhere makes it 0 */
  if (dcpi_numel(t->ndim, t->shape, &numel) ||
      !dcpi_mul_i64(numel, (int64_t)dcp_dtype_size(t->dtype), &bytes))
    return dcpi_dec_fail(d, "byte size of the shape overflows int64");
  return DCP_OK;
}

/* Decode a tensor's mesh reference and tensor_map (masks of existing mesh
 * dimensions, each mesh dimension used at most once). */
static dcp_status dec_tensor_layout(dcpi_dec *d, const dcp_meta *m, dcpi_mv_tensor *t) {
  uint64_t mesh = 0, mask = 0;
  dcp_status rc = dcpi_dec_var(d, m->nmeshes, "mesh index + 1", &mesh);
  if (rc != DCP_OK) return rc;
  t->mesh = (int32_t)mesh - 1;
  if (t->mesh < 0) return DCP_OK;
  uint32_t mdim = m->meshes[t->mesh].ndim, used = 0;
  uint64_t valid = ((uint64_t)1 << mdim) - 1;
  for (uint32_t k = 0; k < t->ndim; k++) {
    if ((rc = dcpi_dec_var(d, valid, "tensor_map mask", &mask)) != DCP_OK) return rc;
    if (mask & used) return dcpi_dec_fail(d, "tensor_map[%u] reuses a mesh dimension", k);
    used |= (uint32_t)mask;
    t->tensor_map[k] = (uint32_t)mask;
  }
  return DCP_OK;
}

/* Decode a tensor's chunk count and chunk-list length and hash; the list
 * must fit at *cursor of the chunks section, which then advances. */
static dcp_status dec_tensor_list(dcpi_dec *d, const dcp_meta *m, dcpi_mv_tensor *t,
                                  size_t *cursor) {
  uint64_t n = 0, len = 0;
  dcp_status rc = dcpi_dec_var(d, UINT64_MAX, "chunk count", &n);
  if (rc == DCP_OK) rc = dcpi_dec_var(d, m->chunks_len - *cursor, "chunk list length", &len);
  if (rc == DCP_OK && n > len / DCPI_MIN_CHUNK)
    rc = dcpi_dec_fail(d, "%llu chunks cannot fit in a %llu-byte chunk list",
                      (unsigned long long)n, (unsigned long long)len);
  if (rc == DCP_OK) rc = dcpi_dec_u64(d, "chunk list xxh3", &t->list_hash);
  if (rc != DCP_OK) return rc;
  t->nchunks = n;
  t->list_off = *cursor;
  t->list_len = (size_t)len;
  *cursor += (size_t)len;
  return DCP_OK;
}

/* Decode one tensor index entry; fqns must be strictly increasing. */
static dcp_status dec_tensor(dcpi_dec *d, const dcp_meta *m, size_t i, size_t *cursor) {
  dcpi_mv_tensor *t = &m->tensors[i];
  const dcpi_mv_string *fqn = NULL;
  memset(t, 0, sizeof *t);
  dcp_status rc = dec_item_name(d, m, "fqn", &fqn);
  if (rc != DCP_OK) return rc;
  d->name = fqn->s;
  t->fqn = fqn->s;
  t->fqn_len = fqn->len;
  if (i > 0 && dcpi_md_cmp_bytes(m->tensors[i - 1].fqn, m->tensors[i - 1].fqn_len, t->fqn,
                                 t->fqn_len) >= 0)
    return dcpi_dec_fail(d, "fqns are not strictly increasing");
  rc = dec_tensor_geometry(d, t);
  if (rc == DCP_OK) rc = dec_tensor_layout(d, m, t);
  if (rc == DCP_OK) rc = dec_tensor_list(d, m, t, cursor);
  return rc;
}

/* Decode the tensor index; the chunk lists must tile the chunks section. */
static dcp_status dec_tensors(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "tensors section", err);
  uint64_t n = 0;
  dcp_status rc = dcpi_dec_count(&d, DCPI_MIN_TENSOR, "tensor count", &n);
  if (rc != DCP_OK) return rc;
  if (!(m->tensors = malloc((n ? n : 1) * sizeof *m->tensors)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot hold %llu tensors", (unsigned long long)n);
  size_t cursor = 0;
  for (uint64_t i = 0; i < n; i++) {
    d.item = (int64_t)i, d.kind = "tensor", d.name = NULL;
    if ((rc = dec_tensor(&d, m, (size_t)i, &cursor)) != DCP_OK) return rc;
    m->ntensors = (size_t)i + 1;
  }
  if ((rc = dec_end(&d)) != DCP_OK) return rc;
  if (cursor != m->chunks_len)
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: chunk lists cover %zu of the %zu "
                     "bytes of the chunks section", cursor, m->chunks_len);
  return DCP_OK;
}

/* ---- bytes items ------------------------------------------------------ */

/* Decode a bytes item's scope and rank (stored + 1; 0 for replicated). */
static dcp_status dec_scope_rank(dcpi_dec *d, const dcp_meta *m, dcpi_mv_bytes *b) {
  uint8_t scope = 0;
  uint64_t r = 0;
  dcp_status rc = dcpi_dec_u8(d, "scope", &scope);
  if (rc == DCP_OK && scope > DCP_SCOPE_PER_RANK) rc = dcpi_dec_fail(d, "unknown scope %u", scope);
  if (rc == DCP_OK) rc = dcpi_dec_var(d, (uint64_t)m->world_size, "rank + 1", &r);
  if (rc != DCP_OK) return rc;
  b->scope = (dcp_scope)scope;
  if ((b->scope == DCP_SCOPE_REPLICATED) != (r == 0))
    return dcpi_dec_fail(d, "rank + 1 = %llu does not fit scope %u", (unsigned long long)r, scope);
  b->rank = (int32_t)r - 1;
  return DCP_OK;
}

/* Check bytes item i against item i-1: (key, rank) strictly increasing and
 * one scope per key. */
static dcp_status check_bytes_order(dcpi_dec *d, const dcp_meta *m, size_t i) {
  if (i == 0) return DCP_OK;
  const dcpi_mv_bytes *a = &m->bytes[i - 1], *b = &m->bytes[i];
  int c = dcpi_md_cmp_bytes(a->key, a->key_len, b->key, b->key_len);
  if (c == 0 && a->scope != b->scope) return dcpi_dec_fail(d, "key used with both scopes");
  if (c > 0 || (c == 0 && a->rank >= b->rank))
    return dcpi_dec_fail(d, "bytes items are not strictly increasing by (key, rank)");
  return DCP_OK;
}

/* Decode one bytes item: key, scope, rank, then its storage ref. */
static dcp_status dec_bytes_item(dcpi_dec *d, dcp_meta *m, size_t i, dcpi_dec_prev *p) {
  dcpi_mv_bytes *b = &m->bytes[i];
  const dcpi_mv_string *key = NULL;
  uint8_t flags = 0;
  dcp_status rc = dec_item_name(d, m, "bytes key", &key);
  if (rc != DCP_OK) return rc;
  d->name = key->s;
  b->key = key->s;
  b->key_len = key->len;
  if ((rc = dec_scope_rank(d, m, b)) != DCP_OK) return rc;
  if ((rc = check_bytes_order(d, m, i)) != DCP_OK) return rc;
  if ((rc = dcpi_dec_u8(d, "ref flags", &flags)) != DCP_OK) return rc;
  if (flags & (DCPI_RF_RESERVED | DCPI_RF_BOX_BITS))
    return dcpi_dec_fail(d, "ref flags 0x%02x has bits a bytes item may not use", flags);
  if ((rc = dcpi_dec_loc(d, m, flags, p, &b->ref)) != DCP_OK) return rc;
  if ((rc = dcpi_dec_var(d, INT64_MAX, "raw length", &b->ref.raw_length)) != DCP_OK) return rc;
  return dcpi_dec_blocks(d, &b->ref, &m->bytes_cks, &m->bytes_lens, p);
}

/* Decode the bytes items section. */
static dcp_status dec_bytes(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "bytes section", err);
  uint64_t n = 0;
  dcp_status rc = dcpi_dec_count(&d, DCPI_MIN_BYTES, "bytes item count", &n);
  if (rc != DCP_OK) return rc;
  if (!(m->bytes = malloc((n ? n : 1) * sizeof *m->bytes)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot hold %llu bytes items", (unsigned long long)n);
  dcpi_dec_prev p = {0, 0, 0};
  for (uint64_t i = 0; i < n; i++) {
    d.item = (int64_t)i, d.kind = "item", d.name = NULL;
    memset(&m->bytes[i], 0, sizeof m->bytes[i]);
    if ((rc = dec_bytes_item(&d, m, (size_t)i, &p)) != DCP_OK) return rc;
    m->nbytes = (size_t)i + 1;
  }
  return dec_end(&d);
}

/* ---- user key/values -------------------------------------------------- */

/* Decode the key/value section; keys strictly increasing. */
static dcp_status dec_kvs(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "key/value section", err);
  uint64_t n = 0;
  dcp_status rc = dcpi_dec_count(&d, DCPI_MIN_KV, "key/value count", &n);
  if (rc != DCP_OK) return rc;
  if (!(m->kvs = malloc((n ? n : 1) * sizeof *m->kvs)))
    return dcpi_fail(err, DCP_ENOMEM, "cannot hold %llu key/values", (unsigned long long)n);
  const dcpi_mv_string *key = NULL, *value = NULL, *prev = NULL;
  for (uint64_t i = 0; i < n; i++) {
    d.item = (int64_t)i, d.kind = "entry";
    if ((rc = dec_name(&d, m, "key", &key)) != DCP_OK) return rc;
    if ((rc = dec_string(&d, m, "value", &value)) != DCP_OK) return rc;
    if (prev && dcpi_md_cmp_bytes(prev->s, prev->len, key->s, key->len) >= 0)
      return dcpi_dec_fail(&d, "keys are not strictly increasing");
    m->kvs[i] = (dcpi_mv_kv){key->s, value->s};
    m->nkvs = (size_t)i + 1;
    prev = key;
  }
  return dec_end(&d);
}

/* ---- save identity (version 2) ------------------------------------------ */

/* Decode the save section: id, generation, part rank, and one length per
 * file of the files section. */
static dcp_status dec_save(dcp_meta *m, sec_range sr, dcpi_err *err) {
  dcpi_dec d;
  dec_init(&d, m, sr, "save section", err);
  uint64_t gen = 0, part = 0, n = 0;
  if (dcpi_r_left(&d.r) < DCPI_SAVE_ID_LEN) return dcpi_dec_fail(&d, "no room for the save id");
  memcpy(m->save_id, d.r.p + d.r.pos, DCPI_SAVE_ID_LEN);
  d.r.pos += DCPI_SAVE_ID_LEN;
  dcp_status rc = dcpi_dec_var(&d, UINT64_MAX, "generation", &gen);
  if (rc == DCP_OK) rc = dcpi_dec_var(&d, (uint64_t)m->world_size, "part rank + 1", &part);
  if (rc == DCP_OK) rc = dcpi_dec_count(&d, DCPI_MIN_FILE_LEN, "file length count", &n);
  if (rc == DCP_OK && n != m->nfiles)
    rc = dcpi_dec_fail(&d, "%llu file lengths for %zu files", (unsigned long long)n, m->nfiles);
  for (size_t f = 0; rc == DCP_OK && f < m->nfiles; f++)
    rc = dcpi_dec_var(&d, INT64_MAX, "file length", &m->files[f].length);
  if (rc != DCP_OK) return rc;
  m->generation = gen;
  m->part_rank = (int32_t)part - 1;
  return dec_end(&d);
}

/* ---- open / free ------------------------------------------------------ */

void dcp_meta_free(dcp_meta *m) {
  if (!m) return;
  for (size_t i = 0; i < m->nmeshes; i++) {
    free(m->meshes[i].shape);
    free(m->meshes[i].ranks);
  }
  for (size_t i = 0; i < m->ntensors; i++) {
    dcpi_mv_chunks_free(m->tensors[i].chunks);
    dcpi_mv_head_free(m->tensors[i].head);
  }
  free(m->strings);
  free(m->name_ok);
  free(m->files);
  free(m->meshes);
  free(m->tensors);
  free(m->bytes);
  free(m->bytes_cks.v);
  free(m->bytes_lens.v);
  free(m->kvs);
  free(m->buf);
  free(m);
}

/* Decode every eager table of m, whose buffer has been checked. */
static dcp_status dec_tables(dcp_meta *m, const sec_range *secs, dcpi_err *err) {
  m->chunks_off = secs[DCPI_SEC_CHUNKS].off;
  m->chunks_len = secs[DCPI_SEC_CHUNKS].len;
  dcp_status rc = dec_strings(m, secs[DCPI_SEC_STRINGS], err);
  if (rc == DCP_OK) rc = dec_files(m, secs[DCPI_SEC_FILES], err);
  if (rc == DCP_OK) rc = dec_meshes(m, secs[DCPI_SEC_MESHES], err);
  if (rc == DCP_OK) rc = dec_tensors(m, secs[DCPI_SEC_TENSORS], err);
  if (rc == DCP_OK) rc = dec_bytes(m, secs[DCPI_SEC_BYTES], err);
  if (rc == DCP_OK) rc = dec_kvs(m, secs[DCPI_SEC_KV], err);
  if (rc == DCP_OK && m->version >= 2) rc = dec_save(m, secs[DCPI_SEC_SAVE], err);
  return rc;
}

/* Check data, give it to a new view (a copy unless owned: then the view
 * takes the malloc'd buffer itself, on success only) and decode the
 * tables. */
static dcp_status open_view(dcp_ctx *ctx, const void *data, size_t len, bool owned,
                            dcp_meta **out, dcpi_err *err) {
  uint32_t version = 0;
  sec_range secs[DCPI_SEC_COUNT + 1];
  dcp_status rc = check_header(data, len, &version, err);
  if (rc == DCP_OK)
    rc = check_directory(data, len, DCPI_SEC_COUNT_OF(version), version >= 4, secs, err);
  if (rc != DCP_OK) return rc;
  dcp_meta *m = calloc(1, sizeof *m);
  if (!m || !(m->buf = owned ? (uint8_t *)data : malloc(len))) {
    free(m);
    return dcpi_fail(err, DCP_ENOMEM, "cannot copy %zu bytes of metadata", len);
  }
  if (!owned) memcpy(m->buf, data, len);
  m->len = len;
  m->version = version;
  m->part_rank = -1;
  m->ctx = ctx;
  if ((rc = dec_tables(m, secs, err)) != DCP_OK) {
    if (owned) m->buf = NULL; /* still the caller's */
    dcp_meta_free(m);
    return rc;
  }
  *out = m;
  return DCP_OK;
}

dcp_status dcp_meta_open_memory(dcp_ctx *ctx, const void *data, size_t len, dcp_meta **out) {
  dcpi_err err;
  dcpi_err_clear(&err);
  if (!out || (!data && len > 0)) {
    dcpi_fail(&err, DCP_EINVAL, "dcp_meta_open_memory: NULL argument");
    if (out) *out = NULL;
    return dcpi_ctx_report(ctx, &err);
  }
  *out = NULL;
  static const uint8_t empty[1];
  if (!data) data = empty; /* len is 0: fails as too short, without a NULL offset */
  open_view(ctx, data, len, false, out, &err);
  return dcpi_ctx_report(ctx, &err);
}

dcp_status dcpi_meta_open_owned(dcp_ctx *ctx, uint8_t *data, size_t len, dcp_meta **out) {
  dcpi_err err;
  dcpi_err_clear(&err);
  *out = NULL;
  if (!data) dcpi_fail(&err, DCP_EINVAL, "dcpi_meta_open_owned: NULL buffer");
  else open_view(ctx, data, len, true, out, &err);
  return dcpi_ctx_report(ctx, &err);
}

dcp_status dcpi_meta_check_whole(const dcp_meta *m, dcpi_err *err) {
  if (!m) return dcpi_fail(err, DCP_EINVAL, "no metadata view");
  const uint8_t *p = m->buf;
  size_t len = m->len;
  unsigned nsec = DCPI_SEC_COUNT_OF(m->version);
  char where[80];
  if (DCPI_CHECKSUMS_ENFORCED &&
      dcpi_mv_hash(p, len - DCPI_TRAILER_SIZE) != dcpi_get_u64(p + len - DCPI_TRAILER_SIZE))
    return dcpi_fail(err, DCP_ECORRUPT, "corrupt metadata: whole-file checksum mismatch, the "
                     "damage is in the %s", locate_damage(p, len, nsec, where, sizeof where));
  return DCP_OK;
}

/* ---- accessors -------------------------------------------------------- */

uint32_t dcp_meta_format_version(const dcp_meta *m) { return m ? m->version : 0; }
int32_t dcp_meta_world_size(const dcp_meta *m) { return m ? m->world_size : 0; }
size_t dcp_meta_tensor_count(const dcp_meta *m) { return m ? m->ntensors : 0; }
size_t dcp_meta_bytes_count(const dcp_meta *m) { return m ? m->nbytes : 0; }
size_t dcp_meta_file_count(const dcp_meta *m) { return m ? m->nfiles : 0; }
size_t dcpi_meta_mesh_count(const dcp_meta *m) { return m ? m->nmeshes : 0; }
size_t dcp_meta_kv_count(const dcp_meta *m) { return m ? m->nkvs : 0; }

dcp_status dcp_meta_tensor(const dcp_meta *m, size_t index, dcp_tensor_info *out) {
  if (!m || !out) return DCP_EINVAL;
  if (index >= m->ntensors) return DCP_ENOTFOUND;
  const dcpi_mv_tensor *t = &m->tensors[index];
  memset(out, 0, sizeof *out);
  out->fqn = t->fqn;
  out->dtype = t->dtype;
  out->ndim = t->ndim;
  memcpy(out->shape, t->shape, sizeof out->shape);
  out->chunk_count = t->nchunks;
  return DCP_OK;
}

int32_t dcpi_meta_tensor_layout(const dcp_meta *m, size_t index, uint32_t *tensor_map) {
  const dcpi_mv_tensor *t = &m->tensors[index];
  if (t->mesh >= 0) memcpy(tensor_map, t->tensor_map, t->ndim * sizeof *tensor_map);
  return t->mesh;
}

dcp_status dcp_meta_find_tensor(const dcp_meta *m, const char *fqn, size_t *index) {
  if (!m || !fqn || !index) return DCP_EINVAL;
  size_t len = strlen(fqn), lo = 0, hi = m->ntensors;
  while (lo < hi) { /* the index is sorted: checked when it was decoded */
    size_t mid = lo + (hi - lo) / 2;
    int c = dcpi_md_cmp_bytes(m->tensors[mid].fqn, m->tensors[mid].fqn_len, fqn, len);
    if (c == 0) {
      *index = mid;
      return DCP_OK;
    }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return DCP_ENOTFOUND;
}

dcp_status dcp_meta_bytes(const dcp_meta *m, size_t index, dcp_bytes_info *out) {
  if (!m || !out) return DCP_EINVAL;
  if (index >= m->nbytes) return DCP_ENOTFOUND;
  const dcpi_mv_bytes *b = &m->bytes[index];
  memset(out, 0, sizeof *out);
  out->key = b->key;
  out->scope = b->scope;
  out->rank = b->rank;
  dcpi_mv_fill_ref(&b->ref, &m->bytes_cks, &m->bytes_lens, &out->ref);
  return DCP_OK;
}

dcp_status dcp_meta_file(const dcp_meta *m, size_t index, const char **name) {
  if (!m || !name) return DCP_EINVAL;
  if (index >= m->nfiles) return DCP_ENOTFOUND;
  *name = m->files[index].name;
  return DCP_OK;
}

dcp_status dcp_meta_file_length(const dcp_meta *m, size_t index, uint64_t *length) {
  if (!m || !length) return DCP_EINVAL;
  if (index >= m->nfiles || m->files[index].length == 0) return DCP_ENOTFOUND;
  *length = m->files[index].length;
  return DCP_OK;
}

dcp_status dcp_meta_identity(const dcp_meta *m, dcp_save_identity *out) {
  static const uint8_t none[16];
  if (!m || !out) return DCP_EINVAL;
  if (m->version < 2 || memcmp(m->save_id, none, sizeof none) == 0) return DCP_ENOTFOUND;
  memcpy(out->id, m->save_id, sizeof out->id);
  out->generation = m->generation;
  out->part_rank = m->part_rank;
  return DCP_OK;
}

dcp_status dcpi_meta_mesh(const dcp_meta *m, size_t index, dcpi_mesh_info *out) {
  if (!m || !out) return DCP_EINVAL;
  if (index >= m->nmeshes) return DCP_ENOTFOUND;
  out->ndim = m->meshes[index].ndim;
  out->shape = m->meshes[index].shape;
  out->ranks = m->meshes[index].ranks;
  return DCP_OK;
}

dcp_status dcp_meta_kv(const dcp_meta *m, size_t index, const char **key, const char **value) {
  if (!m || !key || !value) return DCP_EINVAL;
  if (index >= m->nkvs) return DCP_ENOTFOUND;
  *key = m->kvs[index].key;
  *value = m->kvs[index].value;
  return DCP_OK;
}
