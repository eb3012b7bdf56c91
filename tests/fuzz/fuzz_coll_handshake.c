/* fuzz_coll_handshake.c — libFuzzer target for the rendezvous handshake's
 * decoders (plugins/coll/common/cc_codec.c, compiled here directly): what
 * the file and gloo collectives read from hello and session files that a
 * peer — or anyone who can write into the rendezvous directory — left.
 * Input: one byte choosing the reading rank's view (bits 0-2: world - 1,
 * bits 3-5: rank, bit 6: the file is a session, else a hello; bit 7: the
 * bytes are a message of the TCP store instead, cc_store.c), then the
 * file's bytes.
 * Properties: a decoder returns one of its outcomes; an accepted hello has
 * the record's size and a nonzero nonce, and is what encoding that nonce
 * makes; an accepted session has the record's size and echoes the nonce
 * it was given; a world size is reported only for a record that was not
 * accepted; and records made by the encoders are always accepted back by
 * every rank they name. A store message that decodes encodes back to
 * exactly its payload, its pointers inside it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cc_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Checks the hello decoder on rec (len bytes) for world. */
static void check_hello(const unsigned char *rec, size_t len, int32_t world) {
  dcp_plugin_err err = {{0}};
  uint64_t nonce = 0;
  uint32_t other = 0;
  int rc = dcpi_cc_hello_decode(rec, len, world, "fuzz", &nonce, &other, &err);
  if (rc != DCPI_CC_OURS && rc != DCPI_CC_NOT_OURS && rc != DCP_ECORRUPT) __builtin_trap();
  if (rc == DCPI_CC_OURS) {
    unsigned char again[DCPI_CC_HELLO_RECORD];
    if (len != DCPI_CC_HELLO_RECORD || nonce == 0 || other != 0) __builtin_trap();
    dcpi_cc_hello_encode(again, nonce, world);
    if (memcmp(again, rec, DCPI_CC_HELLO_SIZE) != 0) __builtin_trap();
  }
  /* what a rank of this world writes is always read back */
  unsigned char made[DCPI_CC_HELLO_RECORD];
  uint64_t n = len >= 8 ? dcpi_cc_get64(rec) | 1 : 1, got = 0;
  dcpi_cc_hello_encode(made, n, world);
  if (dcpi_cc_hello_decode(made, sizeof made, world, "fuzz", &got, NULL, &err) != DCPI_CC_OURS ||
      got != n)
    __builtin_trap();
}

/* Checks the session decoder on rec (len bytes) as rank of world. */
static void check_session(const unsigned char *rec, size_t len, int32_t world, int32_t rank) {
  dcp_plugin_err err = {{0}};
  size_t want = dcpi_cc_session_record(world);
  uint64_t nonce = len >= DCPI_CC_SESSION_HEAD + 8 * (size_t)(rank + 1)
                       ? dcpi_cc_get64(rec + DCPI_CC_SESSION_HEAD + 8 * (size_t)rank) : 7;
  uint64_t session = 0;
  uint32_t other = 0;
  int rc = dcpi_cc_session_decode(rec, len, world, rank, nonce, "fuzz", &session, &other, &err);
  if (rc != DCPI_CC_OURS && rc != DCPI_CC_NOT_OURS && rc != DCP_ECORRUPT) __builtin_trap();
  if (rc == DCPI_CC_OURS && (len != want || other != 0 ||
                             dcpi_cc_get64(rec + DCPI_CC_SESSION_HEAD + 8 * (size_t)rank) != nonce))
    __builtin_trap();
  /* a session made for these nonces is accepted by every rank > 0 */
  unsigned char *made = malloc(want);
  uint64_t *nonces = calloc((size_t)world, sizeof *nonces);
  if (!made || !nonces) goto out;
  for (int32_t r = 1; r < world; r++) nonces[r] = 0x9e3779b97f4a7c15ull * (uint64_t)r + nonce;
  dcpi_cc_session_encode(made, session ^ 0x5a5a, world, nonces);
  for (int32_t r = 1; r < world; r++) {
    uint64_t s = 0;
    if (dcpi_cc_session_decode(made, want, world, r, nonces[r], "fuzz", &s, NULL, &err) !=
            DCPI_CC_OURS ||
        s != (session ^ 0x5a5a))
      __builtin_trap();
  }
out:
  free(made);
  free(nonces);
}

/* Checks the store message decoder on rec (len bytes). */
static void check_store(const unsigned char *rec, size_t len) {
  dcp_plugin_err err = {{0}};
  dcpi_cc_smsg m;
  int rc = dcpi_cc_smsg_decode(rec, len, "fuzz", &m, &err);
  if (rc != DCPI_CC_OURS && rc != DCPI_CC_NOT_OURS && rc != DCP_ECORRUPT) __builtin_trap();
  if (rc != DCPI_CC_OURS) return;
  const unsigned char *ptrs[3] = {m.job, m.key, m.data};
  size_t lens[3] = {m.job_len, m.key_len, m.data_len};
  for (int i = 0; i < 3; i++)
    if (ptrs[i] && (ptrs[i] < rec || lens[i] > len || ptrs[i] + lens[i] > rec + len))
      __builtin_trap();
  size_t n = dcpi_cc_smsg_encode(NULL, &m);
  if (n != len) __builtin_trap();
  unsigned char *again = malloc(n);
  if (!again) return;
  /* the payload (the trailer's reserved word is not looked at) */
  if (dcpi_cc_smsg_encode(again, &m) != n || memcmp(again, rec, n - DCPI_CC_TRAILER_SIZE) != 0)
    __builtin_trap();
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  int32_t world = 1 + (data[0] & 7), rank = (int32_t)((data[0] >> 3) & 7) % world;
  /* a copy of exactly the file's bytes, so that any read past them is caught */
  size_t len = size - 1;
  unsigned char *rec = malloc(len ? len : 1);
  if (!rec) return 0;
  memcpy(rec, data + 1, len);
  if (data[0] & 0x80) check_store(rec, len);
  else if (data[0] & 0x40) check_session(rec, len, world, rank);
  else check_hello(rec, len, world);
  free(rec);
  return 0;
}
