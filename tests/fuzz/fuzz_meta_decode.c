/* fuzz_meta_decode.c — libFuzzer target for the metadata view: open any
 * input from memory, walk every tensor, chunk, bytes item, file, mesh and
 * key/value, and free. Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION,
 * so checksum mismatches do not stop the decoder early. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dcp.h"
#include "metadata/view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Read every byte a ref points at, so ASan sees any bad pointer. */
static uint64_t touch_ref(const dcp_storage_ref *r) {
  uint64_t acc = r->offset ^ r->stored_length ^ r->raw_length;
  for (uint64_t b = 0; b < r->block_count; b++) {
    acc ^= r->block_checksums[b];
    if (r->block_stored_lengths) acc += r->block_stored_lengths[b];
  }
  return acc;
}

/* Chunks [0, n) of tensor t, from the front or the back (a version 4
 * derived list not decoded whole: each from its skip window), stopping at
 * the first failure as a reader would. */
static uint64_t walk_chunks(dcp_meta *m, size_t t, uint64_t n, bool back) {
  uint64_t acc = 0;
  for (uint64_t k = 0; k < n; k++) {
    uint64_t c = back ? n - 1 - k : k;
    dcp_chunk_info ci;
    dcp_status rc = dcp_meta_chunk(m, t, c, &ci);
    if (rc != DCP_OK) {
      if (rc != DCP_ECORRUPT) __builtin_trap();
      break;
    }
    acc += touch_ref(&ci.ref) + (uint64_t)ci.box.ndim;
  }
  return acc;
}

/* Walk tensor t's chunks (stopping at the first failure, as a reader would). */
static uint64_t walk_tensor(dcp_meta *m, size_t t) {
  dcp_tensor_info ti;
  size_t idx;
  uint64_t acc = 0;
  if (dcp_meta_tensor(m, t, &ti) != DCP_OK) __builtin_trap();
  /* the header-only grid read (the load planner's) before the full decode */
  dcpi_grid g;
  bool grid = false;
  dcpi_err err;
  dcp_status grc = dcpi_meta_chunk_grid(m, t, &g, &grid, &err);
  if (grc != DCP_OK && grc != DCP_ECORRUPT) __builtin_trap();
  if (grc == DCP_OK && grid) acc += (uint64_t)g.count;
  dcpi_flat fl; /* the header-only FLAT read, then single chunks by window */
  bool flat = false;
  grc = dcpi_meta_chunk_flat(m, t, &fl, &flat, &err);
  if (grc != DCP_OK && grc != DCP_ECORRUPT) __builtin_trap();
  if (grc == DCP_OK && flat) acc += (uint64_t)fl.count;
  acc += walk_chunks(m, t, ti.chunk_count, true);
  const int64_t *bo, *bs; /* the whole list decoded */
  grc = dcpi_meta_chunk_boxes(m, t, &bo, &bs, &err);
  if (grc != DCP_OK && grc != DCP_ECORRUPT && grc != DCP_ENOMEM) __builtin_trap();
  if (dcp_meta_find_tensor(m, ti.fqn, &idx) != DCP_OK || idx != t) __builtin_trap();
  return acc + walk_chunks(m, t, ti.chunk_count, false);
}

/* Walk the eagerly decoded tables. */
static uint64_t walk_tables(const dcp_meta *m) {
  uint64_t acc = (uint64_t)dcp_meta_world_size(m);
  for (size_t i = 0; i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info bi;
    if (dcp_meta_bytes(m, i, &bi) != DCP_OK) __builtin_trap();
    acc += strlen(bi.key) + touch_ref(&bi.ref);
  }
  for (size_t i = 0; i < dcp_meta_file_count(m); i++) {
    const char *name;
    if (dcp_meta_file(m, i, &name) != DCP_OK) __builtin_trap();
    acc += strlen(name);
  }
  for (size_t i = 0; i < dcpi_meta_mesh_count(m); i++) {
    dcpi_mesh_info mi;
    if (dcpi_meta_mesh(m, i, &mi) != DCP_OK) __builtin_trap();
    int64_t n = 1;
    for (uint32_t d = 0; d < mi.ndim; d++) n *= mi.shape[d];
    for (int64_t r = 0; r < n; r++) acc += (uint64_t)mi.ranks[r];
  }
  for (size_t i = 0; i < dcp_meta_kv_count(m); i++) {
    const char *k, *v;
    if (dcp_meta_kv(m, i, &k, &v) != DCP_OK) __builtin_trap();
    acc += strlen(k) + strlen(v);
  }
  return acc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  dcp_ctx *ctx = NULL;
  if (dcp_ctx_create(NULL, &ctx) != DCP_OK) return 0;
  dcp_meta *m = NULL;
  dcp_status rc = dcp_meta_open_memory(ctx, data, size, &m);
  if (rc == DCP_OK) {
    dcpi_err err;
    volatile uint64_t sink = walk_tables(m) + (uint64_t)dcpi_meta_check_whole(m, &err);
    for (size_t t = 0; t < dcp_meta_tensor_count(m); t++) sink += walk_tensor(m, t);
    (void)sink;
  } else if (m != NULL || (rc != DCP_ECORRUPT && rc != DCP_EVERSION && rc != DCP_ENOMEM)) {
    __builtin_trap();
  }
  dcp_meta_free(m);
  dcp_ctx_free(ctx);
  return 0;
}
