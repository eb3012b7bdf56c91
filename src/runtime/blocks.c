/* blocks.c — the data-file block layer. An item's raw bytes are cut into
 * blocks of block_size; each block is stored raw or, when compression is on
 * and it pays, as one zstd frame (with zstd's own checksum of its content),
 * and gets an xxh3-64 of its bytes as stored — so a flipped bit anywhere in
 * a stored block is found, even one zstd would decode past.
 * Writes are gathered into large sequential appends; reads fetch only the
 * blocks a request touches and verify each before handing it on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

#include "base/checked.h"
#include "metadata/codec.h"
#include "runtime/load_source.h"
#include "runtime/rt.h"

#define WRITE_BUFFER (16u << 20) /* appends are gathered up to this size */
/* Raw bytes handed to a sink at a time. Small enough that the window stays
 * in the CPU's caches between the read into it and the copy out of it,
 * and costs few page faults per load (8 MiB against 64 MiB: the resharded
 * dcp-bench load took ~20% less CPU, docs/benchmarks.md). */
#define READ_WINDOW (8u << 20)

void dcpi_ref_free(dcpi_ref *r) {
  if (!r) return;
  free(r->checksums);
  free(r->stored_lens);
  r->checksums = r->stored_lens = NULL;
}

/* ---- writer ------------------------------------------------------------- */

struct dcpi_block_writer {
  dcpi_rt *rt;
  dcp_storage_file *f;
  uint32_t block_size;
  bool compress;
  int level;
  ZSTD_CCtx *zc;
  uint8_t *zbuf; /* one compressed block */
  size_t zcap;
  uint8_t *buf; /* pending appends */
  size_t len;
  uint64_t offset; /* bytes appended to the file so far (incl. pending) */
};

dcp_status dcpi_block_writer_open(dcpi_rt *rt, const char *name, uint32_t block_size,
                                  bool compress, int level, dcpi_block_writer **out,
                                  dcpi_err *err) {
  dcpi_block_writer *w = calloc(1, sizeof *w);
  if (!w) return dcpi_fail(err, DCP_ENOMEM, "out of memory for a block writer");
  *w = (dcpi_block_writer){.rt = rt, .block_size = block_size, .compress = compress,
                           .level = level};
  w->buf = malloc(WRITE_BUFFER);
  if (compress) {
    w->zcap = ZSTD_compressBound(block_size);
    w->zbuf = malloc(w->zcap);
    w->zc = ZSTD_createCCtx();
    if (w->zc && (ZSTD_isError(ZSTD_CCtx_setParameter(w->zc, ZSTD_c_compressionLevel, level)) ||
                  ZSTD_isError(ZSTD_CCtx_setParameter(w->zc, ZSTD_c_checksumFlag, 1)))) {
      dcpi_block_writer_close(w, false, NULL);
      return dcpi_fail(err, DCP_EINVAL, "zstd refuses compression level %d", level);
    }
  }
  if (!w->buf || (compress && (!w->zbuf || !w->zc))) {
    dcpi_block_writer_close(w, false, NULL);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for a block writer");
  }
  dcp_status rc = dcpi_rt_file_open(rt, name, DCP_FILE_WRITE, &w->f, err);
  if (rc) {
    w->f = NULL;
    dcpi_block_writer_close(w, false, NULL);
    return rc;
  }
  *out = w;
  return DCP_OK;
}

static dcp_status flush(dcpi_block_writer *w, dcpi_err *err) {
  if (!w->len) return DCP_OK;
  dcp_status rc = dcpi_rt_file_write(w->rt, w->f, w->buf, w->len, err);
  w->len = 0;
  return rc;
}

/* Append bytes to the file: small pieces are gathered, large ones go
 * straight from the caller's memory (no copy). */
static dcp_status append(dcpi_block_writer *w, const void *p, size_t n, dcpi_err *err) {
  if (n == 0) return DCP_OK; /* an empty item may have no memory at all (p NULL) */
  w->offset += n;
  if (n >= WRITE_BUFFER / 2) {
    dcp_status rc = flush(w, err);
    return rc ? rc : dcpi_rt_file_write(w->rt, w->f, p, n, err);
  }
  if (w->len + n > WRITE_BUFFER) {
    dcp_status rc = flush(w, err);
    if (rc) return rc;
  }
  memcpy(w->buf + w->len, p, n);
  w->len += n;
  return DCP_OK;
}

/* Store one block: compressed when that is smaller, else raw; *stored is
 * what it occupies in the file and *sum the xxh3 of those bytes. */
static dcp_status put_block(dcpi_block_writer *w, const uint8_t *p, size_t n, uint64_t *stored,
                            uint64_t *sum, dcpi_err *err) {
  if (w->compress) {
    size_t c = ZSTD_compress2(w->zc, w->zbuf, w->zcap, p, n);
    if (ZSTD_isError(c))
      return dcpi_fail(err, DCP_EIO, "zstd compression failed: %s", ZSTD_getErrorName(c));
    if (c < n) {
      *stored = c;
      *sum = XXH3_64bits(w->zbuf, c);
      return append(w, w->zbuf, c, err);
    }
  }
  *stored = n;
  *sum = XXH3_64bits(p, n);
  return append(w, p, n, err);
}

uint32_t dcpi_block_size_for(uint64_t len, uint64_t row_bytes, uint32_t max) {
  if (len <= DCPI_GRANULE_MIN || max <= DCPI_GRANULE_MIN) return max;
  if (row_bytes == 0 || row_bytes > len) row_bytes = 1;
  uint64_t rows = len / row_bytes;
  uint64_t min_rows = (DCPI_GRANULE_MIN + row_bytes - 1) / row_bytes;
  uint64_t max_rows = max / row_bytes;
  if (max_rows == 0) return max; /* a row larger than a block: no alignment */
  /* rows per block: the first exact cut into DCPI_GRANULES..4x as many
   * blocks that fits the bounds, so halves, quarters ... of the rows start
   * on a block; else about DCPI_GRANULES blocks */
  uint64_t per = 0;
  for (uint64_t k = DCPI_GRANULES; k <= 4 * DCPI_GRANULES && !per; k++)
    if (rows % k == 0 && rows / k >= min_rows && rows / k <= max_rows) per = rows / k;
  if (!per) {
    per = (rows + DCPI_GRANULES - 1) / DCPI_GRANULES;
    if (per < min_rows) per = min_rows;
    if (per > max_rows) per = max_rows;
  }
  uint64_t bs = per * row_bytes;
  return bs >= len ? max : (uint32_t)bs; /* one block either way: keep the default */
}

dcp_status dcpi_block_writer_put(dcpi_block_writer *w, const void *data, uint64_t len,
                                 dcpi_ref *ref, dcpi_err *err) {
  return dcpi_block_writer_put_rows(w, data, len, 0, ref, err);
}

dcp_status dcpi_block_writer_put_rows(dcpi_block_writer *w, const void *data, uint64_t len,
                                      uint64_t row_bytes, dcpi_ref *ref, dcpi_err *err) {
  uint32_t bsz = row_bytes ? dcpi_block_size_for(len, row_bytes, w->block_size) : w->block_size;
  uint64_t nblocks = (len + bsz - 1) / bsz;
  *ref = (dcpi_ref){.offset = w->offset, .raw_length = len, .block_count = nblocks,
                    .block_size = bsz,
                    .codec = w->compress ? DCP_CODEC_ZSTD_CHECKED : DCP_CODEC_NONE};
  ref->checksums = malloc((nblocks ? nblocks : 1) * sizeof *ref->checksums);
  if (w->compress) ref->stored_lens = malloc((nblocks ? nblocks : 1) * sizeof *ref->stored_lens);
  if (!ref->checksums || (w->compress && !ref->stored_lens)) {
    dcpi_ref_free(ref);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for %llu block checksums",
                     (unsigned long long)nblocks);
  }
  const uint8_t *p = data;
  if (!w->compress) {
    /* Raw blocks are contiguous in the file as in memory: checksum them,
     * then append the item whole, so a large one is written straight from
     * the caller's memory with no copy. */
    for (uint64_t b = 0; b < nblocks; b++) {
      size_t n = (size_t)(b + 1 < nblocks ? bsz : len - b * bsz);
      ref->checksums[b] = XXH3_64bits(p + b * bsz, n);
    }
    ref->stored_length = len;
    dcp_status rc = append(w, data, (size_t)len, err);
    if (rc) dcpi_ref_free(ref);
    return rc;
  }
  for (uint64_t b = 0; b < nblocks; b++) {
    size_t n = (size_t)(b + 1 < nblocks ? bsz : len - b * bsz);
    const uint8_t *blk = p + b * bsz;
    uint64_t stored = 0;
    dcp_status rc = put_block(w, blk, n, &stored, &ref->checksums[b], err);
    if (rc) {
      dcpi_ref_free(ref);
      return rc;
    }
    if (ref->stored_lens) ref->stored_lens[b] = stored;
    ref->stored_length += stored;
  }
  return DCP_OK;
}

uint64_t dcpi_block_writer_length(const dcpi_block_writer *w) { return w->offset; }

dcp_status dcpi_block_writer_close(dcpi_block_writer *w, bool sync, dcpi_err *err) {
  dcp_status rc = DCP_OK;
  if (w->f) {
    dcpi_err ignored;
    rc = sync ? flush(w, err) : DCP_OK;
    if (!rc && sync) rc = dcpi_rt_file_sync(w->rt, w->f, err);
    dcp_status c = dcpi_rt_file_close(w->rt, w->f, rc || !err ? &ignored : err);
    if (!rc && sync) rc = c;
  }
  ZSTD_freeCCtx(w->zc);
  free(w->zbuf);
  free(w->buf);
  free(w);
  return rc;
}

/* ---- reader ------------------------------------------------------------- */

typedef struct open_file {
  char *name;
  dcp_storage_file *f;
} open_file;

/* A merged read: [start, start+len) of one file, fetched in one go for
 * several adjacent requests (dcpi_block_prefetch). */
typedef struct span {
  dcp_storage_file *f;
  uint64_t start, len;
  uint8_t *data;
} span;

struct dcpi_block_reader {
  dcpi_rt *rt;
  dcpi_load_source *src; /* asked before storage (NULL: none) */
  ZSTD_DCtx *zd;
  uint8_t *raw, *stored; /* one window of raw and of stored bytes */
  size_t raw_cap, stored_cap;
  open_file *files; /* opened on first use, closed at free */
  size_t nfiles, files_cap;
  span *spans; /* prefetched, until dcpi_block_prefetch_drop */
  size_t nspans, spans_cap;
};

dcp_status dcpi_block_reader_create(dcpi_rt *rt, dcpi_block_reader **out, dcpi_err *err) {
  dcpi_block_reader *r = calloc(1, sizeof *r);
  if (!r || !(r->zd = ZSTD_createDCtx())) {
    free(r);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for a block reader");
  }
  r->rt = rt;
  *out = r;
  return DCP_OK;
}

void dcpi_block_reader_free(dcpi_block_reader *r) {
  if (!r) return;
  for (size_t i = 0; i < r->nfiles; i++) {
    dcpi_err ignored;
    dcpi_rt_file_close(r->rt, r->files[i].f, &ignored);
    free(r->files[i].name);
  }
  free(r->files);
  dcpi_block_prefetch_drop(r);
  free(r->spans);
  ZSTD_freeDCtx(r->zd);
  free(r->raw);
  free(r->stored);
  free(r);
}

static dcp_status get_file(dcpi_block_reader *r, const char *name, dcp_storage_file **f,
                           dcpi_err *err) {
  for (size_t i = 0; i < r->nfiles; i++)
    if (strcmp(r->files[i].name, name) == 0) {
      *f = r->files[i].f;
      return DCP_OK;
    }
  if (DCPI_RESERVE(r->files, r->files_cap, r->nfiles + 1))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  open_file *of = &r->files[r->nfiles];
  if (!(of->name = strdup(name))) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  dcp_status rc = dcpi_rt_file_open(r->rt, name, DCP_FILE_READ, &of->f, err);
  if (rc) {
    if (rc == DCP_ENOTFOUND) r->rt->data_file_gone = 1;
    free(of->name);
    return rc;
  }
  r->nfiles++;
  *f = of->f;
  return DCP_OK;
}

static dcp_status grow(uint8_t **buf, size_t *cap, size_t need, dcpi_err *err) {
  if (need <= *cap) return DCP_OK;
  uint8_t *p = realloc(*buf, need);
  if (!p) return dcpi_fail(err, DCP_ENOMEM, "out of memory for a %zu-byte read", need);
  *buf = p;
  *cap = need;
  return DCP_OK;
}

/* Raw length of block b of ref. */
static size_t block_raw_len(const dcp_storage_ref *ref, uint64_t b) {
  uint64_t start = b * ref->block_size, left = ref->raw_length - start;
  return (size_t)(left < ref->block_size ? left : ref->block_size);
}

/* Decode blocks [b0, b1) whose stored bytes are at r->stored into r->raw,
 * verifying each checksum: of the stored bytes before decoding them
 * (ZSTD_CHECKED), or of the decoded bytes (NONE, and ZSTD of 0.2). */
static dcp_status decode_blocks(dcpi_block_reader *r, const char *file,
                                const dcp_storage_ref *ref, uint64_t b0, uint64_t b1,
                                const char *what, dcpi_err *err) {
  size_t at_stored = 0, at_raw = 0;
  bool zstd = dcpi_codec_zstd(ref->codec), sums_stored = dcpi_codec_sums_stored(ref->codec);
  for (uint64_t b = b0; b < b1; b++) {
    size_t raw = block_raw_len(ref, b);
    size_t stored = zstd ? (size_t)ref->block_stored_lengths[b] : raw;
    uint8_t *dst = r->raw + at_raw;
    const uint8_t *src = zstd ? r->stored + at_stored : dst;
    if (sums_stored && XXH3_64bits(src, stored) != ref->block_checksums[b])
      return dcpi_fail(err, DCP_ECORRUPT,
                       "checksum mismatch in %s/%s, block %llu (file offset %llu) of %s",
                       r->rt->path, file, (unsigned long long)b,
                       (unsigned long long)(ref->offset + at_stored), what);
    if (stored == raw) {
      if (zstd) memcpy(dst, src, raw);
    } else {
      size_t n = ZSTD_decompressDCtx(r->zd, dst, raw, r->stored + at_stored, stored);
      if (ZSTD_isError(n) || n != raw)
        return dcpi_fail(err, DCP_ECORRUPT,
                         "corrupt data in %s/%s, block %llu of %s: zstd: %s", r->rt->path, file,
                         (unsigned long long)b, what,
                         ZSTD_isError(n) ? ZSTD_getErrorName(n) : "wrong decoded size");
    }
    if (!sums_stored && XXH3_64bits(dst, raw) != ref->block_checksums[b])
      return dcpi_fail(err, DCP_ECORRUPT,
                       "checksum mismatch in %s/%s, block %llu (file offset %llu) of %s",
                       r->rt->path, file, (unsigned long long)b,
                       (unsigned long long)(ref->offset + at_stored), what);
    at_stored += stored;
    at_raw += raw;
  }
  return DCP_OK;
}

void dcpi_block_reader_set_source(dcpi_block_reader *r, dcpi_load_source *src) {
  r->src = src;
}

/* Read len bytes of file (opened as f) at off: from the reader's source
 * when from_src is non-NULL and the source holds them (*from_src true),
 * from a prefetched span when one holds them, else from storage. A storage
 * error (a file cut short is DCP_ECORRUPT) gets the item being read,
 * `what`, in front of its message. */
static dcp_status fetch(dcpi_block_reader *r, dcp_storage_file *f, const char *file,
                        uint8_t *dst, size_t len, uint64_t off, const char *what,
                        bool *from_src, dcpi_err *err) {
  bool held = from_src && r->src && r->src->read(r->src, file, off, len, dst);
  if (from_src) *from_src = held;
  if (held) {
    atomic_fetch_add(&r->src->served, len);
    return DCP_OK;
  }
  for (size_t i = 0; i < r->nspans; i++) {
    const span *sp = &r->spans[i];
    if (sp->f == f && off >= sp->start && off + len <= sp->start + sp->len) {
      memcpy(dst, sp->data + (off - sp->start), len);
      return DCP_OK;
    }
  }
  dcpi_err io;
  dcpi_err_clear(&io);
  dcp_status rc = dcpi_rt_file_read(r->rt, f, dst, len, off, &io);
  if (rc) dcpi_fail(err, rc, "reading %s: %s", what, io.msg);
  return rc;
}

/* A read of len bytes of file from the source failed its checksum. */
static void source_reject(dcpi_block_reader *r, const char *file, size_t len) {
  r->src->reject(r->src, file);
  atomic_fetch_add(&r->src->rejected, len);
}

/* Read and verify blocks [b0, b1) into r->raw; stored_at is the file offset
 * of block b0. */
static dcp_status read_window(dcpi_block_reader *r, dcp_storage_file *f, const char *file,
                              const dcp_storage_ref *ref, uint64_t b0, uint64_t b1,
                              uint64_t stored_at, const char *what, dcpi_err *err) {
  size_t raw = 0, stored = 0;
  for (uint64_t b = b0; b < b1; b++) {
    raw += block_raw_len(ref, b);
    stored += dcpi_codec_zstd(ref->codec) ? (size_t)ref->block_stored_lengths[b]
                                          : block_raw_len(ref, b);
  }
  dcp_status rc = grow(&r->raw, &r->raw_cap, raw, err);
  if (rc) return rc;
  /* Raw blocks are read straight into the raw window; compressed ones go
   * through the stored window first. */
  uint8_t *target = r->raw;
  if (dcpi_codec_zstd(ref->codec)) {
    if ((rc = grow(&r->stored, &r->stored_cap, stored, err))) return rc;
    target = r->stored;
  }
  bool from_src = false;
  if ((rc = fetch(r, f, file, target, stored, stored_at, what, &from_src, err))) return rc;
  if (from_src) {
    /* bytes of the source that fail their checksum are read again from
     * storage: the source can slow a load down, never make it wrong */
    dcpi_err probe;
    dcpi_err_clear(&probe);
    rc = decode_blocks(r, file, ref, b0, b1, what, &probe);
    if (rc != DCP_ECORRUPT) return rc ? dcpi_fail(err, rc, "%s", probe.msg) : DCP_OK;
    source_reject(r, file, stored);
    if ((rc = fetch(r, f, file, target, stored, stored_at, what, NULL, err))) return rc;
  }
  return decode_blocks(r, file, ref, b0, b1, what, err);
}

/* Check the blocks of [first, last) of ref read into dst; err NULL: only
 * say whether they are intact. */
static dcp_status verify_into(dcpi_block_reader *r, const char *file,
                              const dcp_storage_ref *ref, uint64_t first, uint64_t last,
                              const uint8_t *dst, const char *what, dcpi_err *err) {
  uint64_t bs = ref->block_size;
  for (uint64_t b = first / bs; b * bs < last; b++) {
    const uint8_t *blk = dst + (b * bs - first);
    if (XXH3_64bits(blk, block_raw_len(ref, b)) == ref->block_checksums[b]) continue;
    if (!err) return DCP_ECORRUPT;
    return dcpi_fail(err, DCP_ECORRUPT,
                     "checksum mismatch in %s/%s, block %llu (file offset %llu) of %s",
                     r->rt->path, file, (unsigned long long)b,
                     (unsigned long long)(ref->offset + b * bs), what);
  }
  return DCP_OK;
}

/* The blocks of [first, last) that the source gave with a wrong checksum
 * are read again, one by one, from storage (f) into dst. */
static dcp_status repair_into(dcpi_block_reader *r, dcp_storage_file *f, const char *file,
                              const dcp_storage_ref *ref, uint64_t first, uint64_t last,
                              uint8_t *dst, const char *what, dcpi_err *err) {
  uint64_t bs = ref->block_size;
  dcp_status rc = DCP_OK;
  for (uint64_t b = first / bs; !rc && b * bs < last; b++) {
    uint8_t *blk = dst + (b * bs - first);
    size_t n = block_raw_len(ref, b);
    if (XXH3_64bits(blk, n) == ref->block_checksums[b]) continue;
    source_reject(r, file, n);
    rc = fetch(r, f, file, blk, n, ref->offset + b * bs, what, NULL, err);
  }
  return rc;
}

dcp_status dcpi_block_read_into(dcpi_block_reader *r, const char *file,
                                const dcp_storage_ref *ref, uint64_t first, uint64_t last,
                                uint8_t *dst, const char *what, dcpi_err *err) {
  uint64_t bs = ref->block_size;
  if (ref->codec != DCP_CODEC_NONE || first % bs || (last % bs && last != ref->raw_length) ||
      last > ref->raw_length || first >= last)
    return dcpi_fail(err, DCP_EINVAL, "%s: direct read of [%llu, %llu) not block-aligned", what,
                     (unsigned long long)first, (unsigned long long)last);
  dcp_storage_file *f = NULL;
  size_t len = (size_t)(last - first);
  bool from_src = false;
  dcp_status rc = get_file(r, file, &f, err);
  if (!rc) rc = fetch(r, f, file, dst, len, ref->offset + first, what, &from_src, err);
  if (!rc && from_src) rc = repair_into(r, f, file, ref, first, last, dst, what, err);
  return rc ? rc : verify_into(r, file, ref, first, last, dst, what, err);
}

dcp_status dcpi_block_read(dcpi_block_reader *r, const char *file, const dcp_storage_ref *ref,
                           uint64_t first, uint64_t last, const char *what,
                           dcpi_block_sink sink, void *arg, dcpi_err *err) {
  if (first >= last) return DCP_OK;
  if (last > ref->raw_length)
    return dcpi_fail(err, DCP_ECORRUPT, "%s: request [%llu, %llu) beyond the stored %llu bytes",
                     what, (unsigned long long)first, (unsigned long long)last,
                     (unsigned long long)ref->raw_length);
  dcp_storage_file *f = NULL;
  dcp_status rc = get_file(r, file, &f, err);
  if (rc) return rc;
  uint64_t bs = ref->block_size, b0 = first / bs, b1 = (last + bs - 1) / bs;
  uint64_t per_window = READ_WINDOW / bs ? READ_WINDOW / bs : 1;
  uint64_t stored_at = ref->offset;
  if (dcpi_codec_zstd(ref->codec))
    for (uint64_t b = 0; b < b0; b++) stored_at += ref->block_stored_lengths[b];
  else
    stored_at += b0 * bs;
  for (uint64_t w0 = b0; w0 < b1 && !rc; w0 += per_window) {
    uint64_t w1 = w0 + per_window < b1 ? w0 + per_window : b1;
    rc = read_window(r, f, file, ref, w0, w1, stored_at, what, err);
    size_t raw = 0;
    for (uint64_t b = w0; b < w1; b++) {
      raw += block_raw_len(ref, b);
      stored_at += dcpi_codec_zstd(ref->codec) ? ref->block_stored_lengths[b]
                                               : block_raw_len(ref, b);
    }
    if (!rc) rc = sink(arg, w0 * bs, r->raw, raw, err);
  }
  return rc;
}

/* ---- coalescing ----------------------------------------------------------- */

#define COALESCE_ITEM_MAX (1u << 20)  /* only pieces this small are merged */
#define COALESCE_SPAN_MAX (64u << 20) /* bytes one merged read may cover */

typedef struct pending {
  dcp_storage_file *f;
  uint64_t start, end; /* stored bytes of the blocks a request touches */
} pending;

static int cmp_pending(const void *pa, const void *pb) {
  const pending *a = pa, *b = pb;
  if (a->f != b->f) return (uintptr_t)a->f < (uintptr_t)b->f ? -1 : 1;
  return (a->start > b->start) - (a->start < b->start);
}

/* Stored byte range [*start, *end) of the blocks covering raw [first, last). */
static void stored_range(const dcp_storage_ref *ref, uint64_t first, uint64_t last,
                         uint64_t *start, uint64_t *end) {
  uint64_t bs = ref->block_size, b0 = first / bs, b1 = (last + bs - 1) / bs;
  if (!dcpi_codec_zstd(ref->codec)) {
    uint64_t e = b1 * bs < ref->raw_length ? b1 * bs : ref->raw_length;
    *start = ref->offset + b0 * bs;
    *end = ref->offset + e;
    return;
  }
  uint64_t at = ref->offset;
  for (uint64_t b = 0; b < b0; b++) at += ref->block_stored_lengths[b];
  *start = at;
  for (uint64_t b = b0; b < b1; b++) at += ref->block_stored_lengths[b];
  *end = at;
}

static dcp_status add_span(dcpi_block_reader *r, dcp_storage_file *f, uint64_t start,
                           uint64_t end, dcpi_err *err) {
  if (DCPI_RESERVE(r->spans, r->spans_cap, r->nspans + 1))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  span *sp = &r->spans[r->nspans];
  *sp = (span){.f = f, .start = start, .len = end - start};
  if (!(sp->data = malloc((size_t)sp->len)))
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for a %llu-byte read",
                     (unsigned long long)sp->len);
  /* A merged read is only a shortcut: when it fails (a file cut short, an
   * I/O error), the requests are read one by one instead, so the error
   * that ends the load names the item whose bytes are missing. */
  dcpi_err ignored;
  if (dcpi_rt_file_read(r->rt, f, sp->data, (size_t)sp->len, start, &ignored)) {
    free(sp->data);
    return DCP_OK;
  }
  r->nspans++;
  return DCP_OK;
}

dcp_status dcpi_block_prefetch(dcpi_block_reader *r, const dcpi_block_req *reqs, size_t n,
                               dcpi_err *err) {
  pending *p = malloc((n ? n : 1) * sizeof *p);
  if (!p) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  size_t m = 0;
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < n && !rc; i++) {
    const dcpi_block_req *q = &reqs[i];
    if (q->first >= q->last || q->last > q->ref->raw_length) continue;
    uint64_t a, b;
    stored_range(q->ref, q->first, q->last, &a, &b);
    if (b - a > COALESCE_ITEM_MAX) continue;
    if (r->src && r->src->read(r->src, q->file, a, b - a, NULL)) continue; /* held */
    rc = get_file(r, q->file, &p[m].f, err);
    p[m].start = a, p[m].end = b;
    m++;
  }
  if (!rc) dcpi_sort(p, m, sizeof *p, cmp_pending);
  /* Merge only exactly adjacent (or overlapping) ranges: a merged read
   * never fetches a byte that no request needs. */
  for (size_t i = 0; i < m && !rc;) {
    size_t j = i + 1;
    uint64_t end = p[i].end;
    while (j < m && p[j].f == p[i].f && p[j].start <= end &&
           (p[j].end > end ? p[j].end : end) - p[i].start <= COALESCE_SPAN_MAX) {
      if (p[j].end > end) end = p[j].end;
      j++;
    }
    if (j - i > 1) rc = add_span(r, p[i].f, p[i].start, end, err);
    i = j;
  }
  free(p);
  return rc;
}

void dcpi_block_prefetch_drop(dcpi_block_reader *r) {
  for (size_t i = 0; i < r->nspans; i++) free(r->spans[i].data);
  r->nspans = 0;
}
