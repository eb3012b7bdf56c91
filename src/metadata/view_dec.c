/* view_dec.c — bounds-checked decoding primitives of the metadata view.
 * Every reader checks what remains before touching a byte and reports
 * DCP_ECORRUPT with the cursor's description and byte position. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "base/checked.h"
#include "metadata/codec.h"
#include "metadata/format.h"
#include "metadata/view.h"

dcp_status dcpi_dec_fail(dcpi_dec *d, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *kind = d->kind ? d->kind : "chunk";
  if (d->item >= 0 && d->name)
    return dcpi_fail(d->err, DCP_ECORRUPT, "corrupt metadata: %s, %s %lld ('%.100s') at byte "
                     "%zu: %s", d->where, kind, (long long)d->item, d->name, d->r.pos, msg);
  if (d->item >= 0)
    return dcpi_fail(d->err, DCP_ECORRUPT, "corrupt metadata: %s, %s %lld at byte %zu: %s",
                     d->where, kind, (long long)d->item, d->r.pos, msg);
  return dcpi_fail(d->err, DCP_ECORRUPT, "corrupt metadata: %s at byte %zu: %s", d->where,
                   d->r.pos, msg);
}

dcp_status dcpi_dec_var(dcpi_dec *d, uint64_t max, const char *what, uint64_t *v) {
  if (!dcpi_r_varint(&d->r, v))
    return dcpi_dec_fail(d, "%s: truncated or malformed varint", what);
  if (*v > max)
    return dcpi_dec_fail(d, "%s %llu exceeds the limit %llu", what, (unsigned long long)*v,
                         (unsigned long long)max);
  return DCP_OK;
}

dcp_status dcpi_dec_u8(dcpi_dec *d, const char *what, uint8_t *v) {
  return dcpi_r_u8(&d->r, v) ? DCP_OK : dcpi_dec_fail(d, "%s: truncated", what);
}

dcp_status dcpi_dec_u64(dcpi_dec *d, const char *what, uint64_t *v) {
  return dcpi_r_u64(&d->r, v) ? DCP_OK : dcpi_dec_fail(d, "%s: truncated", what);
}

dcp_status dcpi_dec_count(dcpi_dec *d, size_t min_size, const char *what, uint64_t *n) {
  dcp_status rc = dcpi_dec_var(d, UINT64_MAX, what, n);
  if (rc != DCP_OK) return rc;
  if (*n > dcpi_r_left(&d->r) / min_size)
    return dcpi_dec_fail(d, "%s %llu cannot fit in the %zu bytes left", what,
                         (unsigned long long)*n, dcpi_r_left(&d->r));
  return DCP_OK;
}

/* Decode the file index of a ref per its file mode. */
static dcp_status dec_file(dcpi_dec *d, const dcp_meta *m, uint8_t flags,
                           const dcpi_dec_prev *p, uint32_t *file) {
  uint64_t f = 0;
  switch (flags & DCPI_RF_FILE_MASK) {
    case DCPI_RF_FILE_SAME: f = p->file; break;
    case DCPI_RF_FILE_NEXT: f = (uint64_t)p->file + 1; break;
    case DCPI_RF_FILE_EXPLICIT: {
      dcp_status rc = dcpi_dec_var(d, UINT32_MAX, "file index", &f);
      if (rc != DCP_OK) return rc;
      break;
    }
    default: return dcpi_dec_fail(d, "reserved file mode 3 in ref flags 0x%02x", flags);
  }
  if (f >= m->nfiles)
    return dcpi_dec_fail(d, "file index %llu out of range (%zu files)", (unsigned long long)f,
                         m->nfiles);
  *file = (uint32_t)f;
  return DCP_OK;
}

/* Decode the file offset of a ref per its offset mode; result <= INT64_MAX. */
static dcp_status dec_offset(dcpi_dec *d, uint8_t flags, const dcpi_dec_prev *p, uint64_t *off) {
  int64_t delta, sum;
  switch (flags & DCPI_RF_OFF_MASK) {
    case DCPI_RF_OFF_END: *off = p->end; return DCP_OK; /* p->end checked <= INT64_MAX */
    case DCPI_RF_OFF_SAME: *off = p->offset; return DCP_OK;
    case DCPI_RF_OFF_DELTA:
      if (!dcpi_r_zigzag(&d->r, &delta)) return dcpi_dec_fail(d, "offset delta: truncated");
      if (!dcpi_add_i64((int64_t)p->offset, delta, &sum) || sum < 0)
        return dcpi_dec_fail(d, "offset delta %lld from %llu leaves [0, INT64_MAX]",
                             (long long)delta, (unsigned long long)p->offset);
      *off = (uint64_t)sum;
      return DCP_OK;
    default: return dcpi_dec_var(d, INT64_MAX, "file offset", off);
  }
}

dcp_status dcpi_dec_loc(dcpi_dec *d, const dcp_meta *m, uint8_t flags, const dcpi_dec_prev *p,
                        dcpi_mv_ref *out) {
  dcp_status rc = dec_file(d, m, flags, p, &out->file);
  if (rc == DCP_OK) rc = dec_offset(d, flags, p, &out->offset);
  if (rc != DCP_OK) return rc;
  if (flags & DCPI_RF_CODING_DEFAULT) {
    out->codec = m->files[out->file].codec;
    out->block_size = m->files[out->file].block_size;
    return DCP_OK;
  }
  uint64_t bs = 0;
  if ((rc = dcpi_dec_u8(d, "codec", &out->codec)) != DCP_OK) return rc;
  if (!dcpi_codec_known(out->codec)) return dcpi_dec_fail(d, "unknown codec %u", out->codec);
  if ((rc = dcpi_dec_var(d, UINT32_MAX, "block size", &bs)) != DCP_OK) return rc;
  if (bs == 0) return dcpi_dec_fail(d, "block size 0");
  out->block_size = (uint32_t)bs;
  return DCP_OK;
}

/* Append n fixed 8-byte checksums to v (the caller checked they are there). */
static dcp_status read_checksums(dcpi_dec *d, uint64_t n, dcpi_u64vec *v) {
  if (DCPI_RESERVE(v->v, v->cap, v->n + n) != DCP_OK)
    return dcpi_fail(d->err, DCP_ENOMEM, "cannot hold %llu block checksums",
                     (unsigned long long)n);
  for (uint64_t b = 0; b < n; b++) dcpi_r_u64(&d->r, &v->v[v->n++]);
  return DCP_OK;
}

/* Append n zstd block stored lengths to v, each in [1, raw length of its
 * block]; *sum gets their total. */
static dcp_status read_block_lengths(dcpi_dec *d, const dcpi_mv_ref *r, dcpi_u64vec *v,
                                     uint64_t *sum) {
  uint64_t n = r->block_count;
  if (n > dcpi_r_left(&d->r)) /* each length takes at least one byte */
    return dcpi_dec_fail(d, "%llu block lengths cannot fit", (unsigned long long)n);
  if (DCPI_RESERVE(v->v, v->cap, v->n + n) != DCP_OK)
    return dcpi_fail(d->err, DCP_ENOMEM, "cannot hold %llu block lengths", (unsigned long long)n);
  *sum = 0;
  for (uint64_t b = 0; b < n; b++) {
    uint64_t raw = b + 1 < n ? r->block_size : r->raw_length - b * (uint64_t)r->block_size;
    uint64_t l;
    dcp_status rc = dcpi_dec_var(d, raw, "block stored length", &l);
    if (rc != DCP_OK) return rc;
    if (l == 0) return dcpi_dec_fail(d, "block %llu stored length 0", (unsigned long long)b);
    v->v[v->n++] = l;
    *sum += l; /* bounded by raw_length <= INT64_MAX */
  }
  return DCP_OK;
}

dcp_status dcpi_dec_blocks(dcpi_dec *d, dcpi_mv_ref *out, dcpi_u64vec *cks, dcpi_u64vec *lens,
                           dcpi_dec_prev *p) {
  uint64_t raw = out->raw_length;
  out->block_count = raw ? (raw - 1) / out->block_size + 1 : 0;
  if (out->block_count > dcpi_r_left(&d->r) / 8)
    return dcpi_dec_fail(d, "%llu block checksums cannot fit in the %zu bytes left",
                         (unsigned long long)out->block_count, dcpi_r_left(&d->r));
  out->cks_at = cks->n;
  out->lens_at = lens->n;
  dcp_status rc = read_checksums(d, out->block_count, cks);
  if (rc != DCP_OK) return rc;
  out->stored_length = raw;
  if (dcpi_codec_zstd(out->codec) &&
      (rc = read_block_lengths(d, out, lens, &out->stored_length)) != DCP_OK)
    return rc;
  if (out->stored_length > (uint64_t)INT64_MAX - out->offset)
    return dcpi_dec_fail(d, "offset %llu + stored length %llu exceeds INT64_MAX",
                         (unsigned long long)out->offset, (unsigned long long)out->stored_length);
  *p = (dcpi_dec_prev){out->file, out->offset, out->offset + out->stored_length};
  return DCP_OK;
}

void dcpi_mv_fill_ref(const dcpi_mv_ref *r, const dcpi_u64vec *cks, const dcpi_u64vec *lens,
                      dcp_storage_ref *out) {
  out->file = r->file;
  out->codec = (dcp_codec)r->codec;
  out->block_size = r->block_size;
  out->offset = r->offset;
  out->stored_length = r->stored_length;
  out->raw_length = r->raw_length;
  out->block_count = r->block_count;
  out->block_checksums = r->block_count ? cks->v + r->cks_at : NULL;
  out->block_stored_lengths =
      (r->block_count && dcpi_codec_zstd(r->codec)) ? lens->v + r->lens_at : NULL;
}

uint64_t dcpi_mv_hash(const uint8_t *p, size_t n) {
  static const uint8_t empty[1];
  return XXH3_64bits(n ? p : empty, n);
}

void dcpi_mv_head_free(dcpi_mv_head *h) {
  if (!h) return;
  free(h->skip);
  free(h->wcks);
  dcpi_mv_chunks_free(h->win);
  free(h);
}

void dcpi_mv_chunks_free(dcpi_mv_chunks *c) {
  if (!c) return;
  free(c->offs);
  free(c->sizes);
  free(c->refs);
  free(c->cks.v);
  free(c->lens.v);
  free(c);
}
