/* fuzz_writer_proto.c — libFuzzer target for the trainer <-> dcp-writer
 * protocol (src/writer/proto.c): the input is one frame, a 24-byte header
 * and its payload. The header is checked, the payload's checksum too, and
 * the payload is decoded as the header's message type (as its first
 * byte's choice when the header is bad, so mutated headers do not hide the
 * decoders). Properties checked: a header that passes gives a known type
 * and a bounded length; a decoded SAVE job, PLAN entry or OPEN config re-encodes,
 * decodes again, and encodes to the same bytes; a decoded DONE re-encodes
 * and decodes to the same seq, status and message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/wire.h"
#include "runtime/plan_cache.h"
#include "writer/proto.h"

/* A PLAN entry: decode, encode, decode, encode; the encodings agree. */
static void plan_roundtrip(const uint8_t *p, size_t len) {
  dcpi_err err;
  dcpi_plan_entry *a = NULL, *b = NULL;
  dcp_status rc = dcpi_wp_plan_decode(p, len, &a, &err);
  if (rc != DCP_OK) {
    if (rc != DCP_ECORRUPT && rc != DCP_ENOMEM) __builtin_trap();
    return;
  }
  dcpi_wbuf w1 = {0}, w2 = {0};
  dcpi_plan_entry_encode(a, &w1);
  if (w1.status || dcpi_wp_plan_decode(w1.data, w1.len, &b, &err) != DCP_OK) __builtin_trap();
  dcpi_plan_entry_encode(b, &w2);
  if (w2.status || w1.len != w2.len || memcmp(w1.data, w2.data, w1.len) != 0) __builtin_trap();
  dcpi_wbuf_free(&w1);
  dcpi_wbuf_free(&w2);
  dcpi_plan_entry_drop(a);
  dcpi_plan_entry_drop(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* decode, encode, decode, encode: the two encodings agree. */
static void job_roundtrip(const uint8_t *p, size_t len) {
  dcpi_err err;
  dcpi_wp_job a, b;
  dcp_status rc = dcpi_wp_job_decode(p, len, &a, &err);
  if (rc != DCP_OK) {
    if (rc != DCP_ECORRUPT && rc != DCP_ENOMEM) __builtin_trap();
    dcpi_wp_job_free(&a);
    return;
  }
  uint8_t *e1 = NULL, *e2 = NULL;
  size_t n1 = 0, n2 = 0;
  if (dcpi_wp_job_encode(&a, &e1, &n1) != DCP_OK) __builtin_trap();
  if (dcpi_wp_job_decode(e1, n1, &b, &err) != DCP_OK) __builtin_trap();
  if (b.ntensors != a.ntensors || b.nchunks != a.nchunks || b.nbytes != a.nbytes ||
      b.nkv != a.nkv || strcmp(a.path, b.path) != 0)
    __builtin_trap();
  if (dcpi_wp_job_encode(&b, &e2, &n2) != DCP_OK || n1 != n2 || memcmp(e1, e2, n1) != 0)
    __builtin_trap();
  free(e1);
  free(e2);
  dcpi_wp_job_free(&a);
  dcpi_wp_job_free(&b);
}

/* An OPEN payload that decodes re-encodes to bytes that decode again, and
 * those encode to the same bytes (the coordination config round-trips). */
static void open_roundtrip(const uint8_t *p, size_t len) {
  dcpi_err err;
  dcpi_wp_coord a, b;
  dcp_status rc = dcpi_wp_open_decode(p, len, &a, &err);
  if (rc != DCP_OK) {
    if (rc != DCP_ECORRUPT && rc != DCP_ENOMEM) __builtin_trap();
    dcpi_wp_coord_free(&a);
    return;
  }
  uint8_t *e1 = NULL, *e2 = NULL;
  size_t n1 = 0, n2 = 0;
  if (dcpi_wp_open_encode(&a, &e1, &n1) != DCP_OK) __builtin_trap();
  if (dcpi_wp_open_decode(e1, n1, &b, &err) != DCP_OK) __builtin_trap();
  if (dcpi_wp_open_encode(&b, &e2, &n2) != DCP_OK || n1 != n2 || memcmp(e1, e2, n1) != 0)
    __builtin_trap();
  free(e1);
  free(e2);
  dcpi_wp_coord_free(&a);
  dcpi_wp_coord_free(&b);
}

static void done_roundtrip(const uint8_t *p, size_t len) {
  dcpi_err err;
  uint64_t seq = 0, seq2 = 0;
  dcp_status st = DCP_OK, st2 = DCP_OK;
  char msg[256], msg2[256];
  dcp_stats stats = {.struct_size = sizeof stats}, stats2 = stats;
  dcp_status rc = dcpi_wp_done_decode(p, len, &seq, &st, msg, sizeof msg, &stats, &err);
  if (rc != DCP_OK) {
    if (rc != DCP_ECORRUPT && rc != DCP_ENOMEM) __builtin_trap();
    return;
  }
  uint8_t *e = NULL;
  size_t n = 0;
  if (dcpi_wp_done_encode(seq, st, msg, &stats, &e, &n) != DCP_OK) __builtin_trap();
  if (dcpi_wp_done_decode(e, n, &seq2, &st2, msg2, sizeof msg2, &stats2, &err) != DCP_OK ||
      seq2 != seq || st2 != st || strcmp(msg, msg2) != 0)
    __builtin_trap();
  free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < DCPI_WP_HEADER) return 0;
  dcpi_err err;
  uint16_t type = 0;
  uint64_t len = 0;
  const uint8_t *p = data + DCPI_WP_HEADER;
  size_t plen = size - DCPI_WP_HEADER;
  dcp_status rc = dcpi_wp_check_header(data, &type, &len, &err);
  if (rc == DCP_OK) {
    if (type < DCPI_WP_SAVE || type > DCPI_WP_BYE || len > DCPI_WP_MAX_PAYLOAD) __builtin_trap();
    if (len == plen) {
      rc = dcpi_wp_check_payload(data, p, plen, &err);
      if (rc != DCP_OK && rc != DCP_ECORRUPT) __builtin_trap();
    }
  } else {
    if (rc != DCP_ECORRUPT && rc != DCP_EVERSION) __builtin_trap();
    type = (uint16_t)(DCPI_WP_SAVE + data[0] % 4);
  }
  if (type == DCPI_WP_SAVE) job_roundtrip(p, plen);
  if (type == DCPI_WP_DONE) done_roundtrip(p, plen);
  if (type == DCPI_WP_PLAN) plan_roundtrip(p, plen);
  if (type == DCPI_WP_OPEN) open_roundtrip(p, plen);
  return 0;
}
