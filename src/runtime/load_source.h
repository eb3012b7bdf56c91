/* load_source.h — where a load's data-file bytes may come from besides
 * storage: a source of byte ranges of data files (the memory tier's
 * snapshot, docs/recovery.md), asked per read before storage, and the
 * provider a higher layer attaches to the context to open one per load.
 *
 * A source serves file bytes, not tensors: the planner, resharding and the
 * block checksums run unchanged over whatever it returns. A block whose
 * checksum fails is read again from storage and the source stops serving
 * that file, so a source can make a load slower, never wrong. */
#ifndef DCP_RUNTIME_LOAD_SOURCE_H
#define DCP_RUNTIME_LOAD_SOURCE_H

#include <stdatomic.h>
#include <stdint.h>

#include "core/ctx.h"
#include "runtime/rt.h"

typedef struct dcpi_load_source dcpi_load_source;
struct dcpi_load_source {
  /* Copy bytes [off, off+len) of data file `file` (a name of the
   * checkpoint's file table) into dst and return true; false when the
   * source does not hold all of them, rejected the file, or cannot read
   * them. dst NULL: only say whether it holds them. Called from any thread
   * of the load. */
  bool (*read)(dcpi_load_source *self, const char *file, uint64_t off, uint64_t len,
               uint8_t *dst);
  /* A block of `file` served by the source failed its checksum: later
   * spans of that file return NULL. Called from any thread. */
  void (*reject)(dcpi_load_source *self, const char *file);
  /* Release the source (after the load). */
  void (*close)(dcpi_load_source *self);
  _Atomic uint64_t served;   /* bytes handed to the load */
  _Atomic uint64_t rejected; /* of those, bytes whose block failed */
};

/* The provider in ctx->ext[DCPI_CTX_TIER] (a higher layer attaches it).
 * open: a source for the load rt (of rt->path) whose committed metadata
 * (the bytes the load uses) has XXH3-64 meta_hash, into *out (NULL: none),
 * and what became of the snapshot (DCP_MEMTIER_*) into *state. Called on
 * every rank of the load (it may run collectives over rt: peer pulls); it
 * never fails a load: a provider that cannot help says so in *state. */
typedef struct dcpi_load_tier dcpi_load_tier;
struct dcpi_load_tier {
  dcpi_ctx_ext ext; /* first member */
  void (*open)(dcpi_load_tier *self, dcpi_rt *rt, uint64_t meta_hash, dcpi_load_source **out,
               uint32_t *state);
};

/* Have r ask src (NULL: none) before storage for every read; r does not
 * own it. Reads it served count in src->served; a block from it that fails
 * its checksum is read again from storage (src->rejected). */
void dcpi_block_reader_set_source(dcpi_block_reader *r, dcpi_load_source *src);

#endif
