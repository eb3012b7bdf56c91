/* parts.h — the parts of uncoordinated saves in a checkpoint directory.
 *
 * A save without a collective has no commit of the whole: every rank
 * commits its own part (<rank>-of-<world>.<seq>.<tag>.metadata, files.h).
 * Parts with the same tag and world belong to one save; that save is
 * *complete* when every rank 0..world-1 has committed its part, and only a
 * complete save is ever loaded. Each rank keeps its part of the newest
 * complete save until a newer one is complete, so a rank that dies before
 * its turn (or a load that runs before it) leaves the previous checkpoint
 * loadable, never a mix of two.
 *
 * Saves are ordered by the seq of one rank's parts (each rank numbers its
 * parts 1, 2, ... in the order it saved them; ranks of one job save in the
 * same order). Pure over a listing of names: dcpi_parts_scan does the
 * listing, everything else is computation. */
#ifndef DCP_RUNTIME_PARTS_H
#define DCP_RUNTIME_PARTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/files.h"
#include "runtime/rt.h"

/* One committed part, by its name. */
typedef struct dcpi_part {
  char tag[DCPI_TAG_LEN + 1];
  int32_t world, rank;
  uint64_t seq;
} dcpi_part;

/* One save: the parts of one (tag, world), one per rank at most (a rank
 * with two parts of the same tag — a reused save_id — counts its newest). */
typedef struct dcpi_part_save {
  const dcpi_part *parts; /* sorted by rank, into dcpi_parts.all */
  size_t n;               /* distinct ranks present */
  bool complete;          /* n == world */
} dcpi_part_save;

typedef struct dcpi_parts {
  dcpi_part *all; /* every part, sorted by (tag, world, rank, seq descending) */
  size_t nall;
  dcpi_part_save *saves;
  size_t nsaves;
  bool legacy; /* a 0.2 <rank>.metadata is there */
} dcpi_parts;

/* List rt's directory and group its parts. Errors: storage errors, DCP_ENOMEM. */
dcp_status dcpi_parts_scan(dcpi_rt *rt, dcpi_parts *out, dcpi_err *err);

/* Group parts already in p->all (tests use this to skip the listing). */
dcp_status dcpi_parts_group(dcpi_parts *p, dcpi_err *err);

void dcpi_parts_free(dcpi_parts *p);

/* rank's part of save s, or NULL. */
const dcpi_part *dcpi_parts_of_rank(const dcpi_part_save *s, int32_t rank);

/* The newest complete save as `rank` orders them (by its parts' seq), or
 * NULL when no save is complete. */
const dcpi_part_save *dcpi_parts_newest_complete(const dcpi_parts *p, int32_t rank);

/* The highest seq among rank's parts (0: none). */
uint64_t dcpi_parts_max_seq(const dcpi_parts *p, int32_t rank);

#endif
