/* gen_coll_handshake_corpus.c — writes the seed corpus of
 * fuzz_coll_handshake: hello and session records as the file and gloo
 * collectives write them, each after the selector byte that the target
 * reads first (its header comment), and a few a stranger might leave;
 * and the TCP store's messages (selector bit 7).
 * Usage: gen_coll_handshake_corpus DIR (writes DIR/seed_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cc_codec.h"

/* Writes the selector for (world, rank, session) and len bytes of rec to
 * DIR/name. */
static void emit(const char *dir, const char *name, int world, int rank, int session,
                 const unsigned char *rec, size_t len) {
  unsigned char sel = (unsigned char)(((world - 1) & 7) | ((rank & 7) << 3) | (session ? 0x40 : 0));
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(&sel, 1, 1, f) != 1 || (len && fwrite(rec, 1, len, f) != len) ||
      fclose(f) != 0) {
    fprintf(stderr, "gen_coll_handshake_corpus: cannot write %s\n", path);
    exit(1);
  }
}

/* Writes the store selector (bit 7) and len bytes of rec to DIR/name. */
static void emit_store(const char *dir, const char *name, const unsigned char *rec, size_t len) {
  char path[1024];
  unsigned char sel = 0x80;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(&sel, 1, 1, f) != 1 || fwrite(rec, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "gen_coll_handshake_corpus: cannot write %s\n", path);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  unsigned char hello[DCPI_CC_HELLO_RECORD];
  dcpi_cc_hello_encode(hello, 0x1234567890abcdefull, 4);
  emit(dir, "seed_hello", 4, 1, 0, hello, sizeof hello);
  emit(dir, "seed_hello_other_world", 2, 1, 0, hello, sizeof hello);
  emit(dir, "seed_hello_truncated", 4, 1, 0, hello, sizeof hello - 5);
  uint64_t nonces[4] = {0, 0x1111222233334444ull, 0x5555666677778888ull, 0x99990000aaaabbbbull};
  unsigned char session[DCPI_CC_SESSION_HEAD + 8 * 4 + DCPI_CC_TRAILER_SIZE];
  dcpi_cc_session_encode(session, 0xfeedfacecafebeefull, 4, nonces);
  emit(dir, "seed_session", 4, 2, 1, session, sizeof session);
  emit(dir, "seed_session_other_world", 3, 2, 1, session, sizeof session);
  session[DCPI_CC_SESSION_HEAD + 8] ^= 1; /* rank 1's nonce: the checksum no longer matches */
  emit(dir, "seed_session_corrupt", 4, 1, 1, session, sizeof session);
  const char text[] = "DCPGLOO1 4 deadbeef 3e9 3ea 3eb\n"; /* an older gloo shim's format */
  emit(dir, "seed_text", 4, 1, 1, (const unsigned char *)text, sizeof text - 1);
  /* the TCP store's messages, one of each op */
  const unsigned char job[] = "dcp", key[] = "1", val[] = "addresses";
  dcpi_cc_smsg msgs[6] = {
      {.op = DCPI_CC_OP_S_HELLO, .nonce = 0x77, .world = 4, .rank = 2, .job = job, .job_len = 3},
      {.op = DCPI_CC_OP_S_WELCOME, .session = 0x99, .world = 4, .rank = 2, .nonce = 0x77},
      {.op = DCPI_CC_OP_S_REFUSE, .reason = DCPI_CC_REFUSE_JOB, .data = val, .data_len = 9},
      {.op = DCPI_CC_OP_S_SET, .session = 0x99, .key = key, .key_len = 1, .data = val, .data_len = 9},
      {.op = DCPI_CC_OP_S_GET, .session = 0x99, .key = key, .key_len = 1},
      {.op = DCPI_CC_OP_S_VALUE, .present = 1, .data = val, .data_len = 9},
  };
  for (int i = 0; i < 6; i++) {
    unsigned char rec[256];
    char name[32];
    size_t n = dcpi_cc_smsg_encode(rec, &msgs[i]);
    snprintf(name, sizeof name, "seed_store_%d", (int)msgs[i].op);
    emit_store(dir, name, rec, n);
  }
  return 0;
}
