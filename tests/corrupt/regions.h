/* regions.h — the map of a checkpoint's files that the corruption
 * campaign damages: which item (tensor chunk, bytes item) or which part of
 * a metadata file (header, directory, a section, trailer) every byte
 * belongs to, and what an error message about it must name. */
#ifndef DCP_CORRUPT_REGIONS_H
#define DCP_CORRUPT_REGIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "dcp.h"
#include "model.h"

#define RG_MAX_FILES 16
#define RG_MAX_REGIONS 512

/* A file of a checkpoint that trials damage. */
typedef struct rg_file {
  cm_kind kind;
  char name[64];
  bool meta; /* a .metadata or <rank>.metadata, else a data file */
  uint64_t size;
} rg_file;

typedef enum rg_type { RG_CHUNK, RG_BYTES, RG_META } rg_type;

/* [start, end) of file `file` holds one item or one metadata part. */
typedef struct rg_region {
  int file;
  uint64_t start, end;
  rg_type type;
  bool per_rank;    /* a PER_RANK bytes item: only the saving world loads it */
  bool version;     /* the header's version field: a flip may read as newer */
  bool zstd;        /* an item with zstd frames (see campaign.c, "harmless") */
  bool unread;      /* read by no load, only by dcp_verify's whole-file check: the
                       trailer and the chunks section's directory checksum of a
                       format 4 .metadata (its lists carry their own checksums) */
  char what[300];   /* the item ("'fqn' [0:8, 0:40]") or part, for reports */
  char need[2][300]; /* strings a message about it must contain */
  char verify_need[300]; /* a third one for dcp_verify ("(rank 1)"), or "" */
} rg_region;

typedef struct rg_map {
  rg_file files[RG_MAX_FILES];
  int nfiles;
  rg_region regions[RG_MAX_REGIONS];
  int nregions;
} rg_map;

/* Add the files and regions of checkpoint kind k at dir (undamaged) to
 * map: its data files from the metadata view (opened with ctx), its
 * metadata files parsed from their directories. Returns 0, or -1 after
 * printing why (the map must also show that the regions of each data file
 * tile it: a byte that no item owns could be damaged unnoticed). */
int rg_map_add(rg_map *map, dcp_ctx *ctx, cm_kind k, const char *dir);

/* The region of file f holding byte at, or NULL. */
const rg_region *rg_find(const rg_map *map, int f, uint64_t at);

#endif
