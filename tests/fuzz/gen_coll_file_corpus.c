/* gen_coll_file_corpus.c — writes the seed corpus of fuzz_coll_file: files
 * as the file-exchange collective writes them (payload + trailer), each
 * after the expectation byte that fuzz_coll_file reads first.
 * Usage: gen_coll_file_corpus DIR (writes DIR/seed_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fx_codec.h"

/* Write the two expectation bytes (see fuzz_coll_file.c), payload and its
 * trailer to DIR/name. exact: the round expects the file's own length. */
static void emit(const char *dir, const char *name, uint32_t op, int data, int exact, int world,
                 const unsigned char *payload, size_t len) {
  unsigned char sel[2] = {(unsigned char)(((op - 1) & 0x0f) | (data ? 0x10 : 0) |
                                          (exact ? 0x20 : 0)),
                          (unsigned char)((world - 1) & 7)};
  unsigned char tr[DCPI_FX_TRAILER_SIZE];
  dcpi_fx_trailer_make(tr, op, payload, len);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(sel, 1, 2, f) != 2 || (len && fwrite(payload, 1, len, f) != len) ||
      fwrite(tr, 1, sizeof tr, f) != sizeof tr || fclose(f) != 0) {
    fprintf(stderr, "gen_coll_file_corpus: cannot write %s\n", path);
    exit(1);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const char *dir = argv[1];
  unsigned char hello[DCPI_FX_HELLO_SIZE];
  dcpi_fx_put64(hello, 0x1234567890abcdefull);
  dcpi_fx_put32(hello + 8, 4);
  emit(dir, "seed_hello", 1, 1, 0, 4, hello, sizeof hello);
  unsigned char session[DCPI_FX_SESSION_HEAD + 8 * 2];
  dcpi_fx_put64(session, 0xfeedfacecafebeefull);
  dcpi_fx_put32(session + 8, 2);
  dcpi_fx_put64(session + 12, 0);
  dcpi_fx_put64(session + 20, 0x1111222233334444ull);
  emit(dir, "seed_session", 2, 1, 0, 2, session, sizeof session);
  emit(dir, "seed_barrier", 4, 0, 0, 1, NULL, 0);
  unsigned char vals[3 * 8];
  dcpi_fx_put64(vals, (uint64_t)-1);
  dcpi_fx_put64(vals + 8, 7);
  dcpi_fx_put64(vals + 16, 0x7fffffffffffffffull);
  emit(dir, "seed_allreduce", 9, 1, 1, 1, vals, sizeof vals);
  const char text[] = "a broadcast payload of some plan bytes";
  emit(dir, "seed_bcast", 5, 1, 1, 1, (const unsigned char *)text, sizeof text - 1);
  return 0;
}
