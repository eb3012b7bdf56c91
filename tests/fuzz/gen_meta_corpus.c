/* gen_meta_corpus.c — writes the seed corpus of fuzz_meta_decode: a few
 * small valid encodings covering every section and ref variant.
 * Usage: gen_meta_corpus DIR (writes DIR/seed_*.bin). */
#include <stdio.h>
#include <stdlib.h>

#include "metadata/meta.h"
#include "model/box.h"

/* Abort with the reason when an add fails (the inputs here are fixed). */
static void ok(dcp_status rc, const dcpi_err *err) {
  if (rc == DCP_OK) return;
  fprintf(stderr, "gen_meta_corpus: %s\n", err->msg);
  exit(1);
}

/* Encode md into DIR/name. */
static void emit(const dcpi_md *md, const char *dir, const char *name) {
  dcpi_err err;
  void *buf;
  size_t len;
  ok(dcpi_md_encode(md, &buf, &len, &err), &err);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "gen_meta_corpus: cannot write %s\n", path);
    exit(1);
  }
  free(buf);
}

/* A tensor split into rows x cols chunks, file per column, one zstd column. */
static void add_grid(dcpi_md *md, const char *fqn, int64_t rows, int64_t cols, int32_t mesh,
                     dcpi_err *err) {
  const int64_t shape[2] = {rows * 3, cols * 2};
  const uint32_t map[2] = {1, 0};
  uint32_t tid;
  ok(dcpi_md_add_tensor(md, fqn, DCP_F16, 2, shape, mesh, mesh >= 0 ? map : NULL, &tid, err), err);
  uint64_t cks[2] = {0x1111, 0x2222}, lens[2] = {5, 4};
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      const int64_t off[2] = {r * 3, c * 2}, sz[2] = {3, 2};
      dcp_storage_ref ref = {.file = (uint32_t)(c % 2), .codec = DCP_CODEC_NONE,
                             .block_size = 64, .offset = (uint64_t)(r * 12), .stored_length = 12,
                             .raw_length = 12, .block_count = 1, .block_checksums = cks};
      if (c == cols - 1) {
        ref.codec = DCP_CODEC_ZSTD;
        ref.block_size = 8;
        ref.block_count = 2;
        ref.stored_length = 9;
        ref.block_stored_lengths = lens;
      }
      ok(dcpi_md_add_chunk(md, tid, off, sz, &ref, err), err);
    }
}

/* A 2-D tensor over mesh 0 (rows sharded by mesh dim 0, rows x 5 each)
 * whose two row shards are each cut into ranges of per elements: a FLAT
 * list (format version 3; from version 4 with a skip table when it has
 * more than 64 chunks). */
static void add_flat(dcpi_md *md, const char *fqn, int64_t rows, int64_t per, dcpi_err *err) {
  const int64_t shape[2] = {2 * rows, 5}, cell[2] = {rows, 5};
  const uint32_t map[2] = {1, 0};
  uint32_t tid;
  ok(dcpi_md_add_tensor(md, fqn, DCP_F32, 2, shape, 0, map, &tid, err), err);
  uint64_t cks = 0x3333, at = 0;
  for (int64_t r0 = 0; r0 < 2 * rows; r0 += rows)
    for (int64_t b = 0; b < rows * 5; b += per) {
      const int64_t region_off[2] = {r0, 0};
      int64_t off[6], sz[6];
      size_t n;
      int64_t cnt = rows * 5 - b < per ? rows * 5 - b : per;
      ok(dcpi_flat_to_boxes(2, region_off, cell, b, cnt, off, sz, 3, &n, err), err);
      for (size_t i = 0; i < n; i++) {
        uint64_t raw = (uint64_t)(sz[2 * i] * sz[2 * i + 1] * 4);
        dcp_storage_ref ref = {.file = (uint32_t)(b / per % 2), .codec = DCP_CODEC_NONE,
                               .block_size = 64, .offset = at, .stored_length = raw,
                               .raw_length = raw, .block_count = 1, .block_checksums = &cks};
        at += raw;
        ok(dcpi_md_add_chunk(md, tid, off + 2 * i, sz + 2 * i, &ref, err), err);
      }
    }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  dcpi_err err;
  dcpi_md *md;
  ok(dcpi_md_create(&md), &err);
  emit(md, argv[1], "seed_empty.bin");

  const int64_t mshape[2] = {2, 2};
  const int32_t ranks[4] = {3, 2, 1, 0};
  ok(dcpi_md_set_world(md, 4, &err), &err);
  ok(dcpi_md_add_file(md, "__0_0.distcp", NULL, &err), &err);
  ok(dcpi_md_add_file(md, "__1_0.distcp", NULL, &err), &err);
  ok(dcpi_md_add_mesh(md, 2, mshape, ranks, NULL, &err), &err);
  add_grid(md, "model.embed.weight", 2, 2, 0, &err);
  ok(dcpi_md_add_kv(md, "step", "1000", &err), &err);
  emit(md, argv[1], "seed_small.bin");

  uint64_t cks = 0xabcdef;
  dcp_storage_ref blob = {.file = 1, .codec = DCP_CODEC_NONE, .block_size = 4096, .offset = 1 << 20,
                          .stored_length = 40, .raw_length = 40, .block_count = 1,
                          .block_checksums = &cks};
  ok(dcpi_md_add_bytes(md, "rng", DCP_SCOPE_PER_RANK, 0, &blob, &err), &err);
  blob.offset += 40;
  ok(dcpi_md_add_bytes(md, "rng", DCP_SCOPE_PER_RANK, 3, &blob, &err), &err);
  ok(dcpi_md_add_bytes(md, "loader", DCP_SCOPE_REPLICATED, -1, &blob, &err), &err);
  add_grid(md, "model.layers.0.attn.q.weight", 4, 3, -1, &err);
  const int64_t scalar_shape[1] = {0};
  ok(dcpi_md_add_tensor(md, "model.empty", DCP_BF16, 1, scalar_shape, -1, NULL, NULL, &err), &err);
  ok(dcpi_md_add_kv(md, "framework", "torch", &err), &err);
  emit(md, argv[1], "seed_full.bin");
  ok(dcpi_md_set_format_version(md, 2, &err), &err);
  emit(md, argv[1], "seed_full_v2.bin");
  ok(dcpi_md_set_format_version(md, DCPI_FORMAT_VERSION, &err), &err);
  add_flat(md, "optim.exp_avg.model.embed.weight", 3, 5, &err);
  emit(md, argv[1], "seed_derived.bin");
  add_flat(md, "optim.exp_avg_sq.model.embed.weight", 60, 7, &err); /* 3 skip windows */
  add_grid(md, "model.layers.1.mlp.weight", 10, 9, -1, &err);      /* 2 skip windows */
  emit(md, argv[1], "seed_skip.bin");
  ok(dcpi_md_set_format_version(md, 3, &err), &err);
  emit(md, argv[1], "seed_skip_v3.bin");
  dcpi_md_free(md);
  return 0;
}
