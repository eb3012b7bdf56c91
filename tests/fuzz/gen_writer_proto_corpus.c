/* gen_writer_proto_corpus.c — writes the seed corpus of fuzz_writer_proto:
 * whole frames (header + payload) of SAVE jobs (one refused), DONE outcomes and PLAN
 * cache entries, as the trainer and dcp-writer send them.
 * Usage: gen_writer_proto_corpus DIR (writes DIR/seed_*). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/wire.h"
#include "runtime/plan_cache.h"
#include "writer/proto.h"

static void emit(const char *dir, const char *name, uint16_t type, uint8_t *payload,
                 size_t len) {
  uint8_t hdr[DCPI_WP_HEADER];
  dcpi_wp_header(hdr, type, payload, len);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(hdr, 1, sizeof hdr, f) != sizeof hdr ||
      (len && fwrite(payload, 1, len, f) != len) || fclose(f) != 0) {
    fprintf(stderr, "gen_writer_proto_corpus: cannot write %s\n", path);
    exit(1);
  }
  free(payload);
}

/* A job with two tensors (one chunked in two boxes), a bytes item and
 * key/values, coordinated over the file collective. */
static void emit_job(const char *dir, const char *name, int with_items, int refused) {
  char *keys[] = {"step", "framework"}, *values[] = {"100", "pt"};
  dcpi_wp_tensor tensors[2] = {{.fqn = "layers.0.weight", .dtype = DCP_F32, .ndim = 2,
                                .shape = {8, 4}},
                               {.fqn = "bias", .dtype = DCP_BF16, .ndim = 1, .shape = {4}}};
  dcpi_wp_chunk chunks[3] = {
      {.tensor = 0, .box = {2, {0, 0}, {4, 4}}, .offset = 0, .nbytes = 64},
      {.tensor = 0, .box = {2, {4, 0}, {4, 4}}, .offset = 64, .nbytes = 64},
      {.tensor = 1, .box = {1, {0}, {4}}, .offset = 128, .nbytes = 8}};
  dcpi_wp_bytes bytes[1] = {{.key = "rng", .scope = DCP_SCOPE_PER_RANK, .offset = 136, .len = 16}};
  dcpi_wp_job j = {.seq = 7, .path = "/ckpt/step-100", .flags = DCP_SAVE_COMPRESS,
                   .block_size = 1 << 20, .policy = 0, .zstd_level = 3, .nkv = 2,
                   .kv_keys = keys, .kv_values = values, .pool_size = 4096,
                   .coord = {.coll = "file", .coll_options = "job=dcpwriter", .rendezvous = "/rdv",
                             .rank = 1, .world_size = 4, .timeout_ms = 300000}};
  if (with_items) {
    j.ntensors = 2, j.tensors = tensors;
    j.nchunks = 3, j.chunks = chunks;
    j.nbytes = 1, j.bytes = bytes;
  }
  uint8_t *p;
  size_t len;
  if (dcpi_wp_job_encode(&j, &p, &len) != DCP_OK) exit(1);
  if (refused && dcpi_wp_job_refuse(&p, &len, DCP_EIO, "async save: the copy callback failed"))
    exit(1);
  emit(dir, name, DCPI_WP_SAVE, p, len);
}

/* A plan cache entry; with world > 0 as rank 0 keeps it (every rank's
 * encoded plan; opaque bytes here: the entry carries them as they are). */
static void emit_plan(const char *dir, const char *name, int32_t world) {
  uint8_t assignment[6] = {2, 0, 1, 1, 0, 3};
  uint8_t plans[10] = {'D', 'C', 'P', 'L', 'P', 'L', 'A', 'N', 1, 0};
  size_t lens[2] = {4, 6};
  dcpi_plan_entry e = {.key = {.lo = 0x0123456789abcdefull, .hi = 0xfedcba9876543210ull},
                       .generation = 3, .assignment = assignment,
                       .assignment_len = sizeof assignment, .world = world,
                       .plans = world ? plans : NULL, .plan_lens = world ? lens : NULL};
  dcpi_wbuf w = {0};
  dcpi_plan_entry_encode(&e, &w);
  if (w.status) exit(1);
  emit(dir, name, DCPI_WP_PLAN, w.data, w.len);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  emit_job(argv[1], "seed_save", 1, 0);
  emit_job(argv[1], "seed_save_empty", 0, 0);
  emit_job(argv[1], "seed_save_refused", 1, 1);
  dcp_stats stats = {.struct_size = sizeof stats, .bytes_written = 1 << 20, .write_ops = 3,
                     .plan_s = 0.25, .total_s = 1.5, .plan_cache_hit = 1};
  uint8_t *p;
  size_t len;
  if (dcpi_wp_done_encode(7, DCP_OK, "", &stats, &p, &len) != DCP_OK) return 1;
  emit(argv[1], "seed_done_ok", DCPI_WP_DONE, p, len);
  if (dcpi_wp_done_encode(8, DCP_ENOSPC, "rank 2: write: no space left", NULL, &p, &len))
    return 1;
  emit(argv[1], "seed_done_error", DCPI_WP_DONE, p, len);
  emit_plan(argv[1], "seed_plan", 0);
  emit_plan(argv[1], "seed_plan_rank0", 2);
  return 0;
}
