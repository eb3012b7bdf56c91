/* replace.h — what a coordinated save replaces, and when it may.
 *
 * A save records the checkpoint it found when it started (its "base": the
 * committed .metadata's bytes, or none), and commits only while that is
 * still what the directory holds: a save that started before another one
 * committed, or an orphaned writer finishing late, finds the base changed
 * and fails with DCP_ESTALE instead of replacing a newer checkpoint. After
 * its commit, the files of every other save are removed. Rank 0 only.
 *
 * An async save starts when dcp_async_save is called, not when its writer
 * gets to it: the trainer takes the base's fingerprint then (a small read,
 * dcpi_base_peek), and the writer's save fails early when the directory no
 * longer holds that (an orphaned writer of a killed job, finishing after
 * the restarted job saved, must not commit its older step over it). */
#ifndef DCP_RUNTIME_REPLACE_H
#define DCP_RUNTIME_REPLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/rt.h"

/* Bytes of .metadata a fingerprint hashes: the header and the directory,
 * which holds every section's checksum (so any other save's metadata,
 * whose save section differs, has another fingerprint). */
#define DCPI_BASE_HEAD 4096u

typedef struct dcpi_base {
  bool committed;      /* a .metadata was there */
  uint64_t len, head;  /* its length, xxh3 of its first DCPI_BASE_HEAD bytes */
  uint64_t generation; /* its identity's generation; 0 when it has none (or
                          unknown: a peek) */
  bool parts;          /* parts of an uncoordinated save are there */
  uint64_t parts_hash; /* of the names of every part (any order): an
                          uncoordinated rank committing during a coordinated
                          save changes the base */
  uint64_t rank_seq;   /* an uncoordinated rank's newest part's seq (0: none) */
} dcpi_base;

/* Read what the directory holds now into *out (the whole .metadata, for
 * its generation, and a listing). Errors: storage errors. */
dcp_status dcpi_base_read(dcpi_rt *rt, dcpi_base *out, dcpi_err *err);

/* Only the fingerprint (committed, len, head, parts_hash): a stat, one
 * small read and a listing; with rank >= 0, also that rank's newest part. */
dcp_status dcpi_base_peek(dcpi_rt *rt, int32_t rank, dcpi_base *out, dcpi_err *err);

/* Whether two bases are the same checkpoint (fingerprints equal). */
bool dcpi_base_same(const dcpi_base *a, const dcpi_base *b);

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
