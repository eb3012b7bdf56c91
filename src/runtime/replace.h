/* replace.h — what a coordinated save replaces, and when it may.
 *
 * A save records the checkpoint it found when it started (its "base": the
 * committed .metadata's bytes, or none), and commits only while that is
 * still what the directory holds: a save that started before another one
 * committed, or an orphaned writer finishing late, finds the base changed
 * and fails with DCP_ESTALE instead of replacing a newer checkpoint. After
 * its commit, the files of every other save are removed. Rank 0 only. */
#ifndef DCP_RUNTIME_REPLACE_H
#define DCP_RUNTIME_REPLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/rt.h"

typedef struct dcpi_base {
  bool committed;      /* a .metadata was there */
  uint64_t len, hash;  /* its length and xxh3 */
  uint64_t generation; /* its identity's generation; 0 when it has none */
  bool parts;          /* parts of an uncoordinated save are there */
} dcpi_base;

/* Read what the directory holds now into *out. Errors: storage errors. */
dcp_status dcpi_base_read(dcpi_rt *rt, dcpi_base *out, dcpi_err *err);

/* DCP_OK when the directory still holds b's checkpoint; DCP_ESTALE (the
 * message says what is there now) when another save committed since. */
dcp_status dcpi_base_unchanged(dcpi_rt *rt, const dcpi_base *b, dcpi_err *err);

/* Un-commit the base before an in-place overwrite: remove .metadata (and
 * every other save's files), then sync the directory. */
dcp_status dcpi_base_remove(dcpi_rt *rt, dcpi_err *err);

/* After a commit: remove every save file (files.h) that is not a data file
 * of the save tagged `keep_tag` (NULL: keep none). Best effort: the
 * checkpoint is committed, a failure here is not an error of the save. */
void dcpi_remove_other_saves(dcpi_rt *rt, const char *keep_tag);

#endif
