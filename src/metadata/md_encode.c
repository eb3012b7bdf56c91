/* md_encode.c — deterministic encoding of a dcpi_md (docs/format.md).
 *
 * Each section body is written into its own buffer (the string table fills
 * while the others are written, and the tensor index needs the chunk lists'
 * lengths and hashes), then the header, directory, bodies and trailer are
 * assembled. Items are sorted first, so insertion order never shows. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/checked.h"
#include "metadata/common.h"
#include "base/parallel.h"
#include "base/radix.h"
#include "metadata/codec.h"
#include "metadata/derive.h"
#include "metadata/format.h"
#include "metadata/md_int.h"
#include "base/wire.h"

/* A file's most common (codec, block size): refs matching it skip both. */
typedef struct file_default {
  uint8_t codec;
  uint32_t block_size;
} file_default;

/* What the previous ref of a list left behind, for the location predictions. */
typedef struct ref_prev {
  uint32_t file;
  uint64_t offset, end;
} ref_prev;

typedef struct enc {
  const dcpi_md *md;
  dcpi_err *err;
  dcpi_strmap smap;  /* string → index in the table; borrows md's strings */
  dcpi_wbuf strings; /* table entries, without the leading count */
  uint32_t nstrings;
  file_default *defaults; /* per file */
  unsigned threads;        /* for the chunk lists; 0: by their count */
  dcpi_wbuf sec[DCPI_SEC_COUNT + 1]; /* bodies by section id (index 0 unused) */
} enc;

/* xxh3 of n bytes at p; p may be NULL when n is 0 (no pointer arithmetic
 * on NULL is ever done by callers for that case). */
static uint64_t hash_of(const uint8_t *p, size_t n) {
  static const uint8_t empty[1];
  return XXH3_64bits(n ? p : empty, n);
}

/* Index of string s in the table, adding it on first use. Returns false on
 * allocation failure (status recorded in the strings buffer). */
static bool intern(enc *e, const char *s, size_t len, uint64_t *idx) {
  uint32_t v;
  if (dcpi_strmap_get(&e->smap, s, len, &v)) {
    *idx = v;
    return true;
  }
  int rc = dcpi_strmap_put(&e->smap, s, len, e->nstrings, NULL);
  if (rc < 0) {
    e->strings.status = (dcp_status)rc;
    return false;
  }
  dcpi_w_varint(&e->strings, len);
  dcpi_w_bytes(&e->strings, s, len);
  dcpi_w_u8(&e->strings, 0);
  *idx = e->nstrings++;
  return true;
}

/* Write the string index of s into w. */
static void w_string(enc *e, dcpi_wbuf *w, const char *s, size_t len) {
  uint64_t idx = 0;
  if (intern(e, s, len, &idx)) dcpi_w_varint(w, idx);
}

/* One (file, codec, block size) use, to find each file's most common coding. */
typedef struct coding_use {
  uint32_t file, block_size;
  uint8_t codec;
} coding_use;

/* qsort comparator: by file, then codec, then block size. */
static int cmp_use(const void *pa, const void *pb) {
  const coding_use *a = pa, *b = pb;
  if (a->file != b->file) return a->file < b->file ? -1 : 1;
  if (a->codec != b->codec) return a->codec < b->codec ? -1 : 1;
  return (a->block_size > b->block_size) - (a->block_size < b->block_size);
}

/* Note ref coding u in the per-file scan: the first coding a file uses,
 * and whether any of its refs uses another (state: 0 unused, 1 one
 * coding, 2 mixed). */
static void note_use(file_default *first, uint8_t *state, coding_use u) {
  if (state[u.file] == 0) {
    first[u.file] = (file_default){u.codec, u.block_size};
    state[u.file] = 1;
  } else if (state[u.file] == 1 &&
             (first[u.file].codec != u.codec || first[u.file].block_size != u.block_size)) {
    state[u.file] = 2;
  }
}

/* Coding use of chunk c of tensor t, and of bytes item b. */
static coding_use chunk_use(const dcpi_md_tensor *t, size_t c) {
  const dcpi_md_chunk *r = &t->chunks[c];
  return (coding_use){r->file, r->block_size, r->codec};
}
static coding_use bytes_use(const dcpi_md_bytes *b) {
  return (coding_use){b->ref.file, b->ref.block_size, (uint8_t)b->ref.codec};
}

/* Gather the coding uses of the refs whose file has state 2 (mixed) into
 * a new array of *n entries. */
static coding_use *gather_uses(const dcpi_md *md, const uint8_t *state, size_t *n) {
  size_t total = md->nchunks_total + md->nbytes, k = 0;
  coding_use *u = malloc((total ? total : 1) * sizeof *u);
  if (!u) return NULL;
  for (size_t t = 0; t < md->ntensors; t++)
    for (size_t c = 0; c < md->tensors[t].nchunks; c++) {
      coding_use x = chunk_use(&md->tensors[t], c);
      if (state[x.file] == 2) u[k++] = x;
    }
  for (size_t b = 0; b < md->nbytes; b++) {
    coding_use x = bytes_use(&md->bytes[b]);
    if (state[x.file] == 2) u[k++] = x;
  }
  *n = k;
  return u;
}

/* The defaults of the mixed files (state 2): sort their uses and take
 * each file's most frequent coding, ties to the smallest. */
static dcp_status mixed_defaults(enc *e, const uint8_t *state) {
  const dcpi_md *md = e->md;
  size_t n = 0;
  coding_use *u = gather_uses(md, state, &n);
  size_t *best = calloc(md->nfiles ? md->nfiles : 1, sizeof *best);
  if (!u || !best) {
    free(u), free(best);
    return dcpi_fail(e->err, DCP_ENOMEM, "cannot compute file coding defaults");
  }
  dcpi_sort(u, n, sizeof *u, cmp_use);
  for (size_t i = 0, j; i < n; i = j) {
    for (j = i + 1; j < n && cmp_use(&u[i], &u[j]) == 0; j++) {
    }
    if (j - i > best[u[i].file]) {
      best[u[i].file] = j - i;
      e->defaults[u[i].file] = (file_default){u[i].codec, u[i].block_size};
    }
  }
  free(best), free(u);
  return DCP_OK;
}

/* Fill e->defaults: per file the most frequent coding, ties to the smallest
 * (codec, block size); a file no ref uses gets (NONE, 1). One scan finds
 * the files whose refs all share a coding (the usual case: that coding);
 * only the refs of the other files are sorted (sorting every ref was a
 * seventh of the encode at 102,400 ranks). */
static dcp_status compute_defaults(enc *e) {
  const dcpi_md *md = e->md;
  size_t nf = md->nfiles ? md->nfiles : 1;
  e->defaults = malloc(nf * sizeof *e->defaults);
  uint8_t *state = calloc(nf, 1);
  if (!e->defaults || !state) {
    free(state);
    return dcpi_fail(e->err, DCP_ENOMEM, "cannot compute file coding defaults");
  }
  for (size_t f = 0; f < md->nfiles; f++) e->defaults[f] = (file_default){DCP_CODEC_NONE, 1};
  for (size_t t = 0; t < md->ntensors; t++)
    for (size_t c = 0; c < md->tensors[t].nchunks; c++)
      note_use(e->defaults, state, chunk_use(&md->tensors[t], c));
  for (size_t b = 0; b < md->nbytes; b++) note_use(e->defaults, state, bytes_use(&md->bytes[b]));
  bool mixed = false;
  for (size_t f = 0; f < md->nfiles; f++) mixed |= state[f] == 2;
  dcp_status rc = mixed ? mixed_defaults(e, state) : DCP_OK;
  free(state);
  return rc;
}

/* Number of bytes the varint encoding of v takes. */
static unsigned varint_size(uint64_t v) {
  unsigned n = 1;
  while (v >>= 7) n++;
  return n;
}

/* The flag bits for a ref's file, offset and coding, given the previous ref. */
static uint8_t loc_flags(const enc *e, const dcpi_md_ref *r, const ref_prev *p) {
  uint8_t f = 0;
  if (r->file == p->file) f = DCPI_RF_FILE_SAME;
  else if (r->file == p->file + 1) f = DCPI_RF_FILE_NEXT;
  else f = DCPI_RF_FILE_EXPLICIT;
  if (r->offset == p->end) {
    f |= DCPI_RF_OFF_END;
  } else if (r->offset == p->offset) {
    f |= DCPI_RF_OFF_SAME;
  } else {
    /* Both are <= INT64_MAX, so the difference fits in int64. */
    int64_t delta = (int64_t)r->offset - (int64_t)p->offset;
    uint64_t zz = ((uint64_t)delta << 1) ^ (delta < 0 ? UINT64_MAX : 0);
    f |= varint_size(zz) < varint_size(r->offset) ? DCPI_RF_OFF_DELTA : DCPI_RF_OFF_ABS;
  }
  const file_default *d = &e->defaults[r->file];
  if ((uint8_t)r->codec == d->codec && r->block_size == d->block_size) f |= DCPI_RF_CODING_DEFAULT;
  return f;
}

/* Write the explicit location fields that flags f call for, and advance p. */
static void w_loc(dcpi_wbuf *w, uint8_t f, const dcpi_md_ref *r, ref_prev *p) {
  if ((f & DCPI_RF_FILE_MASK) == DCPI_RF_FILE_EXPLICIT) dcpi_w_varint(w, r->file);
  if ((f & DCPI_RF_OFF_MASK) == DCPI_RF_OFF_DELTA)
    dcpi_w_zigzag(w, (int64_t)r->offset - (int64_t)p->offset);
  else if ((f & DCPI_RF_OFF_MASK) == DCPI_RF_OFF_ABS)
    dcpi_w_varint(w, r->offset);
  if (!(f & DCPI_RF_CODING_DEFAULT)) {
    dcpi_w_u8(w, (uint8_t)r->codec);
    dcpi_w_varint(w, r->block_size);
  }
  *p = (ref_prev){r->file, r->offset, r->offset + r->stored_length};
}

/* Write a ref's per-block checksums and, for zstd, stored lengths. */
static void w_blocks(dcpi_wbuf *w, const dcpi_md_ref *r) {
  dcpi_w_u64s(w, r->checksums, (size_t)r->block_count);
  if (dcpi_codec_zstd(r->codec))
    for (uint64_t b = 0; b < r->block_count; b++) dcpi_w_varint(w, r->lens[b]);
}

/* A chunk of a tensor, as the encoder sorts them. */
typedef struct chunk_at {
  const dcpi_md_tensor *t;
  size_t c;
} chunk_at;

/* qsort comparator for chunks of one tensor: box offset, then size,
 * lexicographic. */
static int cmp_chunk(const void *pa, const void *pb) {
  const chunk_at *a = pa, *b = pb;
  uint32_t nd = a->t->ndim;
  int c = dcpi_md_cmp_i64(dcpi_md_chunk_off(a->t, a->c), dcpi_md_chunk_off(b->t, b->c), nd);
  return c ? c : dcpi_md_cmp_i64(dcpi_md_chunk_size(a->t, a->c), dcpi_md_chunk_size(b->t, b->c), nd);
}

/* Chunk c of t as a full ref, its arrays borrowed: from md's pool, or for
 * one block from the record itself (md_int.h); the raw length and block
 * count follow from the box (dcpi_md_add_chunk). */
static dcpi_md_ref chunk_ref(const dcpi_md *md, const dcpi_md_tensor *t, size_t c) {
  dcpi_md_chunk *k = &t->chunks[c];
  uint64_t raw = dcp_dtype_size(t->dtype);
  for (uint32_t d = 0; d < t->ndim; d++) raw *= (uint64_t)dcpi_md_chunk_size(t, c)[d];
  uint64_t blocks = (raw - 1) / k->block_size + 1; /* a chunk is never empty */
  uint64_t *cks = blocks == 1 ? &k->cks : md->cks + k->cks;
  uint64_t *lens = blocks == 1 ? &k->stored_length : cks + blocks;
  return (dcpi_md_ref){k->file, (dcp_codec)k->codec, k->block_size, k->offset, k->stored_length,
                       raw, blocks, cks, dcpi_codec_zstd((dcp_codec)k->codec) ? lens : NULL};
}

/* Sort order[0..n) of t's chunks as cmp_chunk does, by stable radix
 * passes over the box's coordinates from the last size to the first
 * offset (precomputed keys, no comparator: the qsort was a third of the
 * encode at 10,240 ranks). false when it cannot (out of memory, or a
 * negative coordinate, which the unsigned keys would misorder): the
 * caller then sorts with qsort. */
static bool radix_sort_chunks(const dcpi_md_tensor *t, chunk_at *order, size_t n) {
  uint32_t nd = t->ndim;
  uint64_t max = 0;
  for (size_t c = 0; c < n; c++)
    for (uint32_t d = 0; d < nd; d++) {
      int64_t o = dcpi_md_chunk_off(t, c)[d], z = dcpi_md_chunk_size(t, c)[d];
      if (o < 0 || z < 0) return false;
      if ((uint64_t)o > max) max = (uint64_t)o;
      if ((uint64_t)z > max) max = (uint64_t)z;
    }
  dcpi_kv64 *a = malloc(n * sizeof *a), *tmp = malloc(n * sizeof *tmp);
  if (!a || !tmp) {
    free(a), free(tmp);
    return false;
  }
  dcpi_kv64 *cur = a, *other = tmp;
  for (size_t i = 0; i < n; i++) cur[i].val = i;
  for (uint32_t k = 2 * nd; k-- > 0;) {
    for (size_t i = 0; i < n; i++) {
      size_t c = (size_t)cur[i].val;
      cur[i].key = (uint64_t)(k >= nd ? dcpi_md_chunk_size(t, c)[k - nd] : dcpi_md_chunk_off(t, c)[k]);
    }
    dcpi_kv64 *res = dcpi_radix_sort_kv(cur, other, n, max);
    other = res == cur ? other : cur;
    cur = res;
  }
  for (size_t i = 0; i < n; i++) order[i] = (chunk_at){t, (size_t)cur[i].val};
  free(a), free(tmp);
  return true;
}

/* Per-tensor state while writing its chunk list. */
typedef struct list_state {
  ref_prev loc;
  const int64_t *prev_off, *prev_size;
} list_state;

/* Write chunk c's entry of tensor t; derived (the list's form gives the
 * box) writes no box fields and sets no box bits; self_contained (a skip
 * point of version 4) writes its file and offset explicitly. */
static void w_chunk(const enc *e, dcpi_wbuf *w, const dcpi_md_tensor *t, size_t c, list_state *ls,
                    bool derived, bool self_contained) {
  const int64_t *off = dcpi_md_chunk_off(t, c), *size = dcpi_md_chunk_size(t, c);
  dcpi_md_ref ref = chunk_ref(e->md, t, c);
  uint8_t f = loc_flags(e, &ref, &ls->loc);
  if (self_contained)
    f = (uint8_t)((f & ~(DCPI_RF_FILE_MASK | DCPI_RF_OFF_MASK)) | DCPI_RF_SELF_CONTAINED);
  if (derived) {
    dcpi_w_u8(w, f);
  } else {
    int64_t pred[DCP_MAX_NDIM];
    dcpi_md_predict_offset(t->ndim, t->shape, ls->prev_off, ls->prev_size, ls->prev_off == NULL,
                           pred);
    if (dcpi_md_cmp_i64(size, ls->prev_size, t->ndim) == 0) f |= DCPI_RF_SAME_SIZE;
    if (dcpi_md_cmp_i64(off, pred, t->ndim) == 0) f |= DCPI_RF_BOX_PREDICTED;
    dcpi_w_u8(w, f);
    if (!(f & DCPI_RF_SAME_SIZE))
      for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, (uint64_t)size[d]);
    if (!(f & DCPI_RF_BOX_PREDICTED))
      for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, (uint64_t)off[d]);
  }
  w_loc(w, f, &ref, &ls->loc);
  w_blocks(w, &ref);
  ls->prev_off = off;
  ls->prev_size = size;
}

/* The outer cells of t's layout (cells per tensor dimension: the product
 * of the mesh extents its mask names) into cells; false without a mesh. */
static bool layout_cells(const dcpi_md *md, const dcpi_md_tensor *t, int64_t *cells) {
  if (t->mesh < 0 || (size_t)t->mesh >= md->nmeshes) return false;
  const dcpi_md_mesh *mesh = &md->meshes[t->mesh];
  for (uint32_t d = 0; d < t->ndim; d++) {
    cells[d] = 1;
    for (uint32_t k = 0; k < mesh->ndim; k++)
      if (t->tensor_map[d] & (1u << k)) cells[d] *= mesh->shape[k];
  }
  return true;
}

/* Choose the form of t's sorted list (version 3) and write its form byte
 * and header. With gen (room for t's chunk count) and a FLAT form, gen[j]
 * is the position in order[] of the j-th chunk in generation order. */
static dcp_status w_form(const enc *e, dcpi_wbuf *w, const dcpi_md_tensor *t, const chunk_at *order,
                         dcpi_form *fm, uint32_t *gen) {
  size_t n = t->nchunks, nd = t->ndim;
  memset(fm, 0, sizeof *fm);
  if (n >= 2 && nd >= 1) {
    /* the builder's boxes as they are when already in order (the usual
     * case), else one copy in sorted order */
    bool in_place = true;
    for (size_t c = 0; c < n && in_place; c++) in_place = order[c].c == c;
    int64_t *copy = in_place ? NULL : malloc(n * 2 * nd * sizeof *copy), cells[DCP_MAX_NDIM];
    if (!in_place && !copy) return dcpi_fail(e->err, DCP_ENOMEM, "cannot examine chunks");
    for (size_t c = 0; !in_place && c < n; c++)
      memcpy(copy + 2 * nd * c, dcpi_md_chunk_off(t, order[c].c), 2 * nd * sizeof *copy);
    const int64_t *boxes = in_place ? t->boxes : copy;
    bool has_cells = layout_cells(e->md, t, cells);
    dcp_status rc = dcpi_derive_detect(t->ndim, t->shape, n, boxes, boxes + nd, 2 * nd,
                                       has_cells ? cells : NULL, fm, gen, e->err);
    free(copy);
    if (rc != DCP_OK) return rc;
  }
  dcpi_w_u8(w, (uint8_t)fm->kind);
  for (uint32_t d = 0; fm->kind != DCPI_FORM_LISTED && d < nd; d++) {
    dcpi_w_varint(w, (uint64_t)fm->grid.n[d]);
    dcpi_w_varint(w, (uint64_t)fm->grid.c[d]);
    if (fm->kind == DCPI_FORM_GRID) dcpi_w_varint(w, (uint64_t)fm->grid.k[d]);
  }
  if (fm->kind == DCPI_FORM_FLAT) dcpi_w_varint(w, (uint64_t)fm->f);
  return DCP_OK;
}

/* Version 4 FLAT lists are in generation order (model/grid.h): reorder
 * the sorted order[] into it, gen[] as w_form found it. */
static dcp_status flat_order(const enc *e, const dcpi_md_tensor *t, const uint32_t *gen,
                             chunk_at *order) {
  size_t n = t->nchunks;
  chunk_at *by_gen = malloc(n * sizeof *by_gen);
  if (!by_gen) return dcpi_fail(e->err, DCP_ENOMEM, "cannot order %zu chunks", n);
  for (size_t j = 0; j < n; j++) by_gen[j] = order[gen[j]];
  memcpy(order, by_gen, n * sizeof *by_gen);
  free(by_gen);
  return DCP_OK;
}

/* Write the entries of t's derived list in order[] behind a version 4
 * skip table: var interval; per interval-th entry (not the first) its byte
 * offset within the entries, as a delta from the previous one; then, when
 * there is more than one window, the xxh3 of each window of entries
 * between those offsets and the xxh3 of the list's header (from its form
 * byte at `start` of w, up to here). A list of one window is read whole. */
static dcp_status w_skipped_entries(const enc *e, dcpi_wbuf *w, size_t start, const dcpi_md_tensor *t,
                                    const chunk_at *order) {
  size_t n = t->nchunks, every = DCPI_SKIP_EVERY, prev = 0, nwin = (n - 1) / every + 1;
  size_t *at = malloc((nwin + 1) * sizeof *at);
  if (!at) return dcpi_fail(e->err, DCP_ENOMEM, "cannot encode chunk list");
  dcpi_wbuf body = {0};
  list_state ls = {{0, 0, 0}, NULL, t->shape};
  dcpi_w_varint(w, every);
  for (size_t c = 0; c < n; c++) {
    bool skip = c > 0 && c % every == 0;
    if (skip) dcpi_w_varint(w, body.len - prev), prev = body.len;
    if (c % every == 0) at[c / every] = body.len;
    w_chunk(e, &body, t, order[c].c, &ls, true, skip);
  }
  at[nwin] = body.len;
  for (size_t j = 0; body.status == DCP_OK && nwin > 1 && j < nwin; j++)
    dcpi_w_u64(w, hash_of(body.data + at[j], at[j + 1] - at[j]));
  if (w->status == DCP_OK && nwin > 1) dcpi_w_u64(w, hash_of(w->data + start, w->len - start));
  if (body.status == DCP_OK && body.len) dcpi_w_bytes(w, body.data, body.len);
  dcp_status rc = body.status;
  free(body.data), free(at);
  return rc != DCP_OK ? dcpi_fail(e->err, rc, "cannot encode chunk list") : DCP_OK;
}

/* Write tensor t's sorted chunk list at the end of w. Reads only e's md
 * and defaults (a worker's enc has nothing else) and reports to e->err. */
static dcp_status w_chunk_list(const enc *e, const dcpi_md_tensor *t, dcpi_wbuf *w) {
  chunk_at *order = malloc((t->nchunks ? t->nchunks : 1) * sizeof *order);
  if (!order) return dcpi_fail(e->err, DCP_ENOMEM, "cannot sort chunks");
  for (size_t c = 0; c < t->nchunks; c++) order[c] = (chunk_at){t, c};
  /* the builder usually adds a tensor's chunks in order already: one scan
   * then replaces the sort (a third of the encode at 10,240 ranks) */
  int ordered = 1;
  for (size_t c = 1; c < t->nchunks && ordered > 0; c++)
    ordered = cmp_chunk(&order[c - 1], &order[c]) < 0 ? 1 : -1;
  if (ordered < 0 && !radix_sort_chunks(t, order, t->nchunks))
    dcpi_sort(order, t->nchunks, sizeof *order, cmp_chunk);
  size_t start = w->len; /* w->data may still be NULL: never offset it then */
  list_state ls = {{0, 0, 0}, NULL, t->shape};
  dcp_status rc = DCP_OK;
  for (size_t c = 1; ordered < 0 && c < t->nchunks && rc == DCP_OK; c++)
    if (cmp_chunk(&order[c - 1], &order[c]) == 0)
      rc = dcpi_fail(e->err, DCP_EEXIST, "tensor '%s': two chunks have the same box", t->fqn);
  dcpi_form fm = {.kind = DCPI_FORM_LISTED};
  uint32_t *gen = NULL; /* version 4: the FLAT generation order */
  if (rc == DCP_OK && e->md->version >= 4 && t->nchunks >= 2 &&
      !(gen = malloc(t->nchunks * sizeof *gen)))
    rc = dcpi_fail(e->err, DCP_ENOMEM, "cannot order %zu chunks", t->nchunks);
  if (rc == DCP_OK && e->md->version >= 3 && t->nchunks)
    rc = w_form(e, w, t, order, &fm, gen);
  bool skipped = e->md->version >= 4 && fm.kind != DCPI_FORM_LISTED;
  if (rc == DCP_OK && skipped && fm.kind == DCPI_FORM_FLAT) rc = flat_order(e, t, gen, order);
  free(gen);
  if (rc == DCP_OK && skipped) rc = w_skipped_entries(e, w, start, t, order);
  for (size_t c = 0; c < t->nchunks && rc == DCP_OK && !skipped; c++)
    w_chunk(e, w, t, order[c].c, &ls, fm.kind != DCPI_FORM_LISTED, false);
  free(order);
  if (rc == DCP_OK && w->status != DCP_OK)
    rc = dcpi_fail(e->err, w->status, "tensor '%s': cannot encode its chunk list", t->fqn);
  return rc;
}

/* One tensor's chunk list, encoded on its own (maybe on another thread). */
typedef struct list_out {
  dcpi_wbuf w;
  uint64_t hash; /* xxh3 of w's bytes */
  dcp_status rc;
} list_out;

/* A batch of tensors whose lists are encoded in parallel. */
typedef struct list_batch {
  const enc *e;
  const dcpi_md_tensor *const *tensors;
  list_out *out;
} list_batch;

/* dcpi_parallel_for job: list i of the batch, into its own buffer. The
 * reason of a failure is dropped here; w_tensors encodes that list again
 * on its own thread to report it, so the first failing tensor in fqn order
 * is the one named however the threads ran. */
static void encode_list_job(void *arg, size_t i) {
  const list_batch *b = arg;
  dcpi_err err;
  enc local = {.md = b->e->md, .err = &err, .defaults = b->e->defaults};
  list_out *o = &b->out[i];
  o->rc = w_chunk_list(&local, b->tensors[i], &o->w);
  if (o->rc == DCP_OK) o->hash = hash_of(o->w.data, o->w.len);
}

/* Write tensor t's index entry; its chunk list o goes to the chunks section. */
static dcp_status w_tensor(enc *e, const dcpi_md_tensor *t, const list_out *o) {
  dcpi_wbuf *w = &e->sec[DCPI_SEC_TENSORS];
  w_string(e, w, t->fqn, t->fqn_len);
  dcpi_w_u8(w, (uint8_t)t->dtype);
  dcpi_w_varint(w, t->ndim);
  for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, (uint64_t)t->shape[d]);
  dcpi_w_varint(w, (uint64_t)(t->mesh + 1));
  if (t->mesh >= 0)
    for (uint32_t d = 0; d < t->ndim; d++) dcpi_w_varint(w, t->tensor_map[d]);
  dcpi_w_varint(w, t->nchunks);
  dcpi_w_varint(w, o->w.len);
  dcpi_w_u64(w, o->hash);
  dcpi_w_bytes(&e->sec[DCPI_SEC_CHUNKS], o->w.data, o->w.len);
  return DCP_OK;
}

/* Tensors per parallel batch: enough to keep the threads busy, few enough
 * that the batch's separate buffers stay a small part of the section. */
#define LIST_BATCH 256
/* Below this many chunks in all, threads cost more than they save. */
#define LIST_PARALLEL_MIN ((size_t)1 << 18)
#define LIST_MAX_THREADS 8

/* Encode the chunk lists of tensors[0..n) (a batch, in fqn order) and write
 * their index entries and lists in that order. */
static dcp_status w_tensor_batch(enc *e, const dcpi_md_tensor *const *tensors, size_t n,
                                 unsigned threads) {
  list_out out[LIST_BATCH];
  memset(out, 0, n * sizeof *out);
  list_batch b = {e, tensors, out};
  dcpi_parallel_for(n, threads, encode_list_job, &b);
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < n && rc == DCP_OK; i++) {
    if (out[i].rc != DCP_OK) { /* again here, for the reason */
      dcpi_wbuf again = {0};
      rc = w_chunk_list(e, tensors[i], &again);
      dcpi_wbuf_free(&again);
      if (rc == DCP_OK) rc = dcpi_fail(e->err, out[i].rc, "tensor '%s': cannot encode its "
                                       "chunk list", tensors[i]->fqn);
    } else {
      rc = w_tensor(e, tensors[i], &out[i]);
    }
  }
  for (size_t i = 0; i < n; i++) dcpi_wbuf_free(&out[i].w);
  return rc;
}

/* qsort comparator for tensor pointers: by fqn bytewise. */
static int cmp_tensor(const void *pa, const void *pb) {
  const dcpi_md_tensor *a = *(const dcpi_md_tensor *const *)pa;
  const dcpi_md_tensor *b = *(const dcpi_md_tensor *const *)pb;
  return dcpi_md_cmp_bytes(a->fqn, a->fqn_len, b->fqn, b->fqn_len);
}

/* Write the tensor index and chunk sections, tensors sorted by fqn. */
static dcp_status w_tensors(enc *e) {
  const dcpi_md *md = e->md;
  const dcpi_md_tensor **order = malloc((md->ntensors ? md->ntensors : 1) * sizeof *order);
  if (!order) return dcpi_fail(e->err, DCP_ENOMEM, "cannot sort tensors");
  for (size_t t = 0; t < md->ntensors; t++) order[t] = &md->tensors[t];
  dcpi_sort(order, md->ntensors, sizeof *order, cmp_tensor);
  dcpi_w_varint(&e->sec[DCPI_SEC_TENSORS], md->ntensors);
  /* the lists are independent and most of the encode at scale (27 M
   * chunks at 102,400 ranks): encoded on a few threads, written in order */
  unsigned threads = e->threads ? e->threads
                     : md->nchunks_total >= LIST_PARALLEL_MIN ? dcpi_parallel_threads(LIST_MAX_THREADS)
                                                              : 1;
  dcp_status rc = DCP_OK;
  for (size_t t = 0; t < md->ntensors && rc == DCP_OK; t += LIST_BATCH) {
    size_t n = md->ntensors - t < LIST_BATCH ? md->ntensors - t : LIST_BATCH;
    rc = w_tensor_batch(e, order + t, n, threads);
  }
  free(order);
  return rc;
}

/* Write the file table: name and default coding per file, in id order. */
static void w_files(enc *e) {
  dcpi_wbuf *w = &e->sec[DCPI_SEC_FILES];
  dcpi_w_varint(w, e->md->nfiles);
  for (size_t f = 0; f < e->md->nfiles; f++) {
    w_string(e, w, e->md->files[f].name, e->md->files[f].name_len);
    dcpi_w_u8(w, e->defaults[f].codec);
    dcpi_w_varint(w, e->defaults[f].block_size);
  }
}

/* Write the world size and mesh table; every mesh rank must be < world. */
static dcp_status w_meshes(enc *e) {
  const dcpi_md *md = e->md;
  dcpi_wbuf *w = &e->sec[DCPI_SEC_MESHES];
  dcpi_w_varint(w, (uint64_t)md->world_size);
  dcpi_w_varint(w, md->nmeshes);
  for (size_t m = 0; m < md->nmeshes; m++) {
    const dcpi_md_mesh *mesh = &md->meshes[m];
    dcpi_w_varint(w, mesh->ndim);
    for (uint32_t d = 0; d < mesh->ndim; d++) dcpi_w_varint(w, (uint64_t)mesh->shape[d]);
    for (size_t r = 0; r < mesh->nranks; r++) {
      if (mesh->ranks[r] >= md->world_size)
        return dcpi_fail(e->err, DCP_EINVAL, "mesh %zu holds rank %d, outside the world of %d",
                         m, (int)mesh->ranks[r], (int)md->world_size);
      dcpi_w_varint(w, (uint64_t)mesh->ranks[r]);
    }
  }
  return DCP_OK;
}

/* qsort comparator for bytes item pointers: by key bytewise, then rank. */
static int cmp_bytes_item(const void *pa, const void *pb) {
  const dcpi_md_bytes *a = *(const dcpi_md_bytes *const *)pa;
  const dcpi_md_bytes *b = *(const dcpi_md_bytes *const *)pb;
  int c = dcpi_md_cmp_bytes(a->key, a->key_len, b->key, b->key_len);
  return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

/* Write one bytes item; per-rank ranks must lie in the world. */
static dcp_status w_bytes_item(enc *e, const dcpi_md_bytes *b, ref_prev *p) {
  dcpi_wbuf *w = &e->sec[DCPI_SEC_BYTES];
  if (b->rank >= e->md->world_size)
    return dcpi_fail(e->err, DCP_EINVAL, "bytes item '%s' rank %d is outside the world of %d",
                     b->key, (int)b->rank, (int)e->md->world_size);
  w_string(e, w, b->key, b->key_len);
  dcpi_w_u8(w, (uint8_t)b->scope);
  dcpi_w_varint(w, (uint64_t)((int64_t)b->rank + 1));
  uint8_t f = loc_flags(e, &b->ref, p);
  dcpi_w_u8(w, f);
  w_loc(w, f, &b->ref, p);
  dcpi_w_varint(w, b->ref.raw_length);
  w_blocks(w, &b->ref);
  return DCP_OK;
}

/* Write the bytes items section, sorted by (key, rank). */
static dcp_status w_bytes(enc *e) {
  const dcpi_md *md = e->md;
  const dcpi_md_bytes **order = malloc((md->nbytes ? md->nbytes : 1) * sizeof *order);
  if (!order) return dcpi_fail(e->err, DCP_ENOMEM, "cannot sort bytes items");
  for (size_t b = 0; b < md->nbytes; b++) order[b] = &md->bytes[b];
  dcpi_sort(order, md->nbytes, sizeof *order, cmp_bytes_item);
  dcpi_w_varint(&e->sec[DCPI_SEC_BYTES], md->nbytes);
  ref_prev p = {0, 0, 0};
  dcp_status rc = DCP_OK;
  for (size_t b = 0; b < md->nbytes && rc == DCP_OK; b++) rc = w_bytes_item(e, order[b], &p);
  free(order);
  return rc;
}

/* qsort comparator for key/value pointers: by key bytewise. */
static int cmp_kv(const void *pa, const void *pb) {
  const dcpi_md_kv *a = *(const dcpi_md_kv *const *)pa;
  const dcpi_md_kv *b = *(const dcpi_md_kv *const *)pb;
  return dcpi_md_cmp_bytes(a->key, a->key_len, b->key, b->key_len);
}

/* Write the user key/value section, sorted by key. */
static dcp_status w_kvs(enc *e) {
  const dcpi_md *md = e->md;
  const dcpi_md_kv **order = malloc((md->nkvs ? md->nkvs : 1) * sizeof *order);
  if (!order) return dcpi_fail(e->err, DCP_ENOMEM, "cannot sort key/values");
  for (size_t k = 0; k < md->nkvs; k++) order[k] = &md->kvs[k];
  dcpi_sort(order, md->nkvs, sizeof *order, cmp_kv);
  dcpi_wbuf *w = &e->sec[DCPI_SEC_KV];
  dcpi_w_varint(w, md->nkvs);
  for (size_t k = 0; k < md->nkvs; k++) {
    w_string(e, w, order[k]->key, order[k]->key_len);
    w_string(e, w, order[k]->value, order[k]->value_len);
  }
  free(order);
  return DCP_OK;
}

/* Write the save section: identity, then every file's length (0 unknown).
 * A part's rank must lie in the world. */
static dcp_status w_save(enc *e) {
  const dcpi_md *md = e->md;
  if (md->part_rank >= md->world_size)
    return dcpi_fail(e->err, DCP_EINVAL, "part of rank %d outside the world of %d",
                     (int)md->part_rank, (int)md->world_size);
  dcpi_wbuf *w = &e->sec[DCPI_SEC_SAVE];
  dcpi_w_bytes(w, md->save_id, DCPI_SAVE_ID_LEN);
  dcpi_w_varint(w, md->generation);
  dcpi_w_varint(w, (uint64_t)(md->part_rank + 1));
  dcpi_w_varint(w, md->nfiles);
  for (size_t f = 0; f < md->nfiles; f++) dcpi_w_varint(w, md->files[f].length);
  return DCP_OK;
}

/* Write every section body (strings last: the others fill it). */
static dcp_status w_sections(enc *e) {
  dcp_status rc = compute_defaults(e);
  if (rc == DCP_OK) {
    w_files(e);
    rc = w_meshes(e);
  }
  if (rc == DCP_OK) rc = w_tensors(e);
  if (rc == DCP_OK) rc = w_bytes(e);
  if (rc == DCP_OK) rc = w_kvs(e);
  if (rc == DCP_OK) rc = w_save(e);
  if (rc != DCP_OK) return rc;
  dcpi_wbuf *w = &e->sec[DCPI_SEC_STRINGS];
  dcpi_w_varint(w, e->nstrings);
  dcpi_w_bytes(w, e->strings.data, e->strings.len);
  if (e->strings.status != DCP_OK) w->status = e->strings.status;
  for (int i = 1; i <= DCPI_SEC_COUNT; i++)
    if (e->sec[i].status != DCP_OK)
      return dcpi_fail(e->err, e->sec[i].status, "cannot grow the encoding buffer");
  return DCP_OK;
}

/* Assemble header, directory, section bodies and trailer into out. */
static dcp_status assemble(enc *e, dcpi_wbuf *out) {
  uint8_t head[DCPI_SECTIONS_START];
  memset(head, 0, sizeof head);
  memcpy(head, DCPI_MAGIC, DCPI_MAGIC_LEN);
  dcpi_put_u32(head + 8, e->md->version);
  dcpi_put_u32(head + 24, DCPI_SEC_COUNT);
  uint64_t pos = DCPI_SECTIONS_START;
  for (int i = 1; i <= DCPI_SEC_COUNT; i++) {
    uint8_t *d = head + DCPI_HEADER_SIZE + (size_t)(i - 1) * DCPI_DIRENT_SIZE;
    dcpi_put_u32(d, (uint32_t)i);
    dcpi_put_u64(d + 8, pos);
    dcpi_put_u64(d + 16, e->sec[i].len);
    dcpi_put_u64(d + 24, hash_of(e->sec[i].data, e->sec[i].len));
    pos += e->sec[i].len;
  }
  dcpi_put_u64(head + 16, pos + DCPI_TRAILER_SIZE);
  dcpi_w_bytes(out, head, sizeof head);
  for (int i = 1; i <= DCPI_SEC_COUNT; i++) dcpi_w_bytes(out, e->sec[i].data, e->sec[i].len);
  if (out->status != DCP_OK) return dcpi_fail(e->err, out->status, "cannot assemble metadata");
  dcpi_w_u64(out, hash_of(out->data, out->len));
  if (out->status != DCP_OK) return dcpi_fail(e->err, out->status, "cannot assemble metadata");
  return DCP_OK;
}

/* Release the encoder's scratch state. */
static void enc_free(enc *e) {
  dcpi_strmap_free(&e->smap);
  dcpi_wbuf_free(&e->strings);
  free(e->defaults);
  for (int i = 0; i <= DCPI_SEC_COUNT; i++) dcpi_wbuf_free(&e->sec[i]);
}

dcp_status dcpi_md_encode(const dcpi_md *md, void **out, size_t *len, dcpi_err *err) {
  return dcpi_md_encode_threads(md, 0, out, len, err);
}

dcp_status dcpi_md_encode_threads(const dcpi_md *md, unsigned threads, void **out, size_t *len,
                                  dcpi_err *err) {
  if (out) *out = NULL;
  if (len) *len = 0;
  if (!md || !out || !len) return dcpi_fail(err, DCP_EINVAL, "NULL argument to dcpi_md_encode");
  enc e;
  memset(&e, 0, sizeof e);
  e.md = md;
  e.err = err;
  e.threads = threads;
  dcpi_wbuf buf = {0};
  dcp_status rc = w_sections(&e);
  if (rc == DCP_OK) rc = assemble(&e, &buf);
  enc_free(&e);
  if (rc != DCP_OK) {
    dcpi_wbuf_free(&buf);
    return rc;
  }
  *out = buf.data;
  *len = buf.len;
  return DCP_OK;
}
