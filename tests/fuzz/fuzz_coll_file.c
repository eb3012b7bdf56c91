/* fuzz_coll_file.c — libFuzzer target for what the file-exchange
 * collective decodes from files its peers wrote (plugins/coll/file,
 * fx_codec.c, compiled here directly). Input: two bytes choosing what the
 * round expects (op, whether it wants data and how much, leniency, the
 * world size), then the bytes of the file. The trailer is parsed and checked against
 * the expectation, the payload verified, and the payload decoders that
 * round would run (hello, session, allreduce) are run on it whatever the
 * checksum says, so mutated payloads reach them. Properties checked: a
 * present file's length agrees with its trailer, an accepted payload has
 * the expected size, and a trailer made for a payload always parses and
 * verifies. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fx_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The ops (fx_codec.h) that carry a decoded payload: OP_HELLO, OP_SESSION,
 * OP_ALLREDUCE. */

static void decode_payload(uint32_t op, const unsigned char *p, size_t len, int32_t world) {
  volatile uint64_t sink = 0;
  if (op == OP_HELLO && len == DCPI_FX_HELLO_SIZE) sink += dcpi_fx_hello_nonce(p, world);
  if (op == OP_SESSION && len == DCPI_FX_SESSION_HEAD + 8 * (size_t)world)
    for (int32_t r = 0; r < world; r++) {
      uint64_t s = 0, nonce = dcpi_fx_get64(p + DCPI_FX_SESSION_HEAD + 8 * (size_t)r);
      if (!dcpi_fx_session_accepts(p, world, r, nonce, &s) && dcpi_fx_get32(p + 8) == (uint32_t)world)
        __builtin_trap(); /* its own echoed nonce must be accepted */
      sink += s;
    }
  if (op == OP_ALLREDUCE && len % 8 == 0 && len > 0) {
    size_t n = len / 8;
    int64_t *acc = calloc(n, sizeof *acc);
    if (!acc) return;
    for (uint32_t rop = DCP_REDUCE_MIN; rop <= DCP_REDUCE_SUM; rop++) dcpi_fx_reduce_into(acc, p, n, rop);
    sink += (uint64_t)acc[0];
    free(acc);
  }
  (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  /* data[0]: bits 0-3 op - 1, 4 wants data, 5 expects the file's own
   * length (else the op's fixed size), 6 lenient; data[1]: world - 1 */
  uint8_t sel = data[0];
  int32_t world = 1 + (data[1] & 7);
  const unsigned char *file = data + 2;
  size_t fsize = size - 2;
  dcpi_fx_expect e = {.path = "fuzz", .from = 1, .op = 1 + (sel & 0x0f) % 12,
                      .has_data = (sel >> 4) & 1, .lenient = (sel >> 6) & 1};
  dcp_plugin_err err = {{0}};
  dcpi_fx_trailer t = {0};
  const unsigned char *tr = fsize >= DCPI_FX_TRAILER_SIZE ? file + fsize - DCPI_FX_TRAILER_SIZE : NULL;
  int rc = dcpi_fx_trailer_parse(tr, fsize, e.path, &t, &err);
  if (rc == DCPI_FX_PRESENT) {
    if (t.plen != fsize - DCPI_FX_TRAILER_SIZE) __builtin_trap();
    e.len = (size_t)t.plen;
    if (!(sel & 0x20)) e.len = e.op == OP_HELLO ? DCPI_FX_HELLO_SIZE
                              : DCPI_FX_SESSION_HEAD + 8 * (size_t)world;
    rc = dcpi_fx_accept(&t, &e, &err);
    if (rc == DCPI_FX_PRESENT && e.has_data && t.plen != e.len) __builtin_trap();
    /* a peer's closing file where another op is due: that peer left */
    int closed = t.op == OP_CLOSE && e.op != OP_CLOSE && !e.lenient;
    if (closed != (rc == DCP_EPEER)) __builtin_trap();
    if (rc != DCPI_FX_PRESENT && rc != DCPI_FX_ABSENT && rc != DCP_EINVAL && !closed)
      __builtin_trap();
    if (rc == DCPI_FX_PRESENT) {
      rc = dcpi_fx_verify(&t, file, &e, &err);
      if (rc != DCP_OK && rc != DCP_ECORRUPT) __builtin_trap();
      decode_payload(t.op, file, (size_t)t.plen, world);
    }
  } else if (rc != DCPI_FX_ABSENT && rc != DCP_ECORRUPT) {
    __builtin_trap();
  }
  /* a trailer made for the payload part always parses and verifies */
  size_t plen = fsize >= DCPI_FX_TRAILER_SIZE ? fsize - DCPI_FX_TRAILER_SIZE : fsize;
  unsigned char made[DCPI_FX_TRAILER_SIZE];
  dcpi_fx_trailer_make(made, e.op, file, plen);
  if (dcpi_fx_trailer_parse(made, plen + DCPI_FX_TRAILER_SIZE, e.path, &t, &err) != DCPI_FX_PRESENT ||
      t.op != e.op || dcpi_fx_verify(&t, file, &e, &err) != DCP_OK)
    __builtin_trap();
  return 0;
}
