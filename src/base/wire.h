/* wire.h — little-endian fixed-width and LEB128 varint encoding into a
 * growable buffer, and bounds-checked reading from a byte range. */
#ifndef DCP_BASE_WIRE_H
#define DCP_BASE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

/* A growable output buffer. Errors are sticky: after the first failed
 * allocation every write is a no-op and status holds DCP_ENOMEM (or
 * DCP_EOVERFLOW), so callers check once at the end. All-zero is empty. */
typedef struct dcpi_wbuf {
  uint8_t *data;
  size_t len, cap;
  dcp_status status;
} dcpi_wbuf;

void dcpi_wbuf_free(dcpi_wbuf *w);
void dcpi_w_bytes(dcpi_wbuf *w, const void *p, size_t n);
void dcpi_w_u8(dcpi_wbuf *w, uint8_t v);
void dcpi_w_u32(dcpi_wbuf *w, uint32_t v);
void dcpi_w_u64(dcpi_wbuf *w, uint64_t v);
/* Append n 8-byte little-endian values (v may be NULL when n is 0). */
void dcpi_w_u64s(dcpi_wbuf *w, const uint64_t *v, size_t n);
void dcpi_w_varint(dcpi_wbuf *w, uint64_t v);
/* Signed value as a zigzag varint (small magnitudes → few bytes). */
void dcpi_w_zigzag(dcpi_wbuf *w, int64_t v);

/* Store / load fixed-width little-endian values at p (no bounds check: the
 * caller has checked that 4 or 8 bytes are there). */
void dcpi_put_u32(uint8_t *p, uint32_t v);
void dcpi_put_u64(uint8_t *p, uint64_t v);
uint32_t dcpi_get_u32(const uint8_t *p);
uint64_t dcpi_get_u64(const uint8_t *p);

/* A read cursor over [p, p+len). Readers return false, and leave pos
 * unchanged, when the value does not fit in what remains. */
typedef struct dcpi_rbuf {
  const uint8_t *p;
  size_t len, pos;
} dcpi_rbuf;

static inline size_t dcpi_r_left(const dcpi_rbuf *r) { return r->len - r->pos; }
bool dcpi_r_u8(dcpi_rbuf *r, uint8_t *v);
bool dcpi_r_u64(dcpi_rbuf *r, uint64_t *v);
/* Also false for an overlong encoding (a final 0x00 byte after the first) or
 * one that exceeds 64 bits, so every value has exactly one encoding. */
bool dcpi_r_varint(dcpi_rbuf *r, uint64_t *v);
bool dcpi_r_zigzag(dcpi_rbuf *r, int64_t *v);

#endif
