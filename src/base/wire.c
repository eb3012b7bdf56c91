/* wire.c — byte-level encoding helpers (see wire.h). */
#include "base/wire.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"

/* Release the buffer's memory and reset it to empty. */
void dcpi_wbuf_free(dcpi_wbuf *w) {
  free(w->data);
  memset(w, 0, sizeof *w);
}

/* Append n bytes from p; on allocation failure record it and drop the write. */
void dcpi_w_bytes(dcpi_wbuf *w, const void *p, size_t n) {
  if (w->status != DCP_OK || n == 0) return;
  if (n <= w->cap - w->len) { /* the common case: room already (no call to grow) */
    memcpy(w->data + w->len, p, n);
    w->len += n;
    return;
  }
  if (n > SIZE_MAX - w->len) {
    w->status = DCP_EOVERFLOW;
    return;
  }
  dcp_status rc = DCPI_RESERVE(w->data, w->cap, w->len + n);
  if (rc != DCP_OK) {
    w->status = rc;
    return;
  }
  memcpy(w->data + w->len, p, n);
  w->len += n;
}

/* Append one byte. */
void dcpi_w_u8(dcpi_wbuf *w, uint8_t v) { dcpi_w_bytes(w, &v, 1); }

/* Append a 4-byte little-endian value. */
void dcpi_w_u32(dcpi_wbuf *w, uint32_t v) {
  uint8_t b[4];
  dcpi_put_u32(b, v);
  dcpi_w_bytes(w, b, sizeof b);
}

/* Append an 8-byte little-endian value. */
void dcpi_w_u64(dcpi_wbuf *w, uint64_t v) {
  uint8_t b[8];
  dcpi_put_u64(b, v);
  dcpi_w_bytes(w, b, sizeof b);
}

/* Append n 8-byte values: room for all of them first, one check. */
void dcpi_w_u64s(dcpi_wbuf *w, const uint64_t *v, size_t n) {
  if (w->status != DCP_OK || n == 0) return;
  if (n > (SIZE_MAX - w->len) / 8) {
    w->status = DCP_EOVERFLOW;
    return;
  }
  dcp_status rc = DCPI_RESERVE(w->data, w->cap, w->len + 8 * n);
  if (rc != DCP_OK) {
    w->status = rc;
    return;
  }
  for (size_t i = 0; i < n; i++) dcpi_put_u64(w->data + w->len + 8 * i, v[i]);
  w->len += 8 * n;
}

/* Append v as unsigned LEB128: 7 bits per byte, low first, high bit = more. */
void dcpi_w_varint(dcpi_wbuf *w, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  do {
    uint8_t byte = (uint8_t)(v & 0x7f);
    v >>= 7;
    b[n++] = (uint8_t)(byte | (v ? 0x80 : 0));
  } while (v);
  dcpi_w_bytes(w, b, n);
}

/* Append v zigzag-mapped (0,-1,1,-2,... → 0,1,2,3,...) as a varint. The
 * shift is done on the unsigned value: left-shifting a negative is UB. */
void dcpi_w_zigzag(dcpi_wbuf *w, int64_t v) {
  uint64_t u = (uint64_t)v;
  dcpi_w_varint(w, (u << 1) ^ (v < 0 ? UINT64_MAX : 0));
}

void dcpi_put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

void dcpi_put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t dcpi_get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
  return v;
}

uint64_t dcpi_get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Read one byte. */
bool dcpi_r_u8(dcpi_rbuf *r, uint8_t *v) {
  if (dcpi_r_left(r) < 1) return false;
  *v = r->p[r->pos++];
  return true;
}

/* Read an 8-byte little-endian value. */
bool dcpi_r_u64(dcpi_rbuf *r, uint64_t *v) {
  if (dcpi_r_left(r) < 8) return false;
  *v = dcpi_get_u64(r->p + r->pos);
  r->pos += 8;
  return true;
}

/* Read a canonical LEB128 varint of at most 64 bits. */
bool dcpi_r_varint(dcpi_rbuf *r, uint64_t *v) {
  uint64_t acc = 0;
  size_t pos = r->pos;
  for (unsigned i = 0; i < 10; i++) {
    if (pos >= r->len) return false;
    uint8_t b = r->p[pos++];
    /* The 10th byte may only carry bit 63. */
    if (i == 9 && b > 1) return false;
    acc |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      if (b == 0 && i > 0) return false; /* overlong */
      *v = acc;
      r->pos = pos;
      return true;
    }
  }
  return false;
}

/* Read a zigzag varint back into a signed value. */
bool dcpi_r_zigzag(dcpi_rbuf *r, int64_t *v) {
  uint64_t u;
  if (!dcpi_r_varint(r, &u)) return false;
  uint64_t m = (u >> 1) ^ (0 - (u & 1));
  memcpy(v, &m, sizeof *v); /* two's complement reinterpretation, no UB */
  return true;
}
