/* files.h — the names a save gives its files, and their parsing.
 *
 * Every file a save writes carries the save's tag (16 hex digits of its
 * id), so two saves never share a file name: a metadata only ever points at
 * files of its own save, an overwrite leaves the old checkpoint's files
 * untouched until the new one commits, and an orphaned or concurrent save
 * cannot write into a file another save's metadata references.
 *
 *   .metadata                               the committed checkpoint
 *   .metadata.<tag>.tmp                     its temporary
 *   data-<rank>.<tag>.dcp                   a rank's data file (coordinated)
 *   <rank>-of-<world>.<seq>.<tag>.metadata  a rank's part of an uncoordinated
 *                                           save (seq: the part's generation
 *                                           on that rank), and its .tmp
 *   data-<rank>.<seq>.<tag>.dcp             that part's data file
 *   .lock, .lock.<rank>                     leases (src/runtime/lease.h)
 *
 * The names of version 0.2 (data-<rank>.dcp, <rank>.metadata and their
 * .tmp) are still read, and removed by a later save. Pure: no I/O. */
#ifndef DCP_RUNTIME_FILES_H
#define DCP_RUNTIME_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

#define DCPI_TAG_LEN 16u   /* hex digits of a tag */
#define DCPI_NAME_MAX 96u  /* room for any name below, NUL included */
#define DCPI_METADATA_NAME ".metadata" /* the commit marker of a checkpoint */
#define DCPI_COORD_LEASE ".lock"
#define DCPI_DATA_FILE_FMT "data-%05d.dcp" /* the 0.2 name (legacy) */

/* What a file name of a checkpoint directory is. */
typedef enum dcpi_file_kind {
  DCPI_FILE_OTHER = 0,   /* not a save's (user files, leases, .metadata) */
  DCPI_FILE_DATA,        /* data-<rank>.<tag>.dcp or data-<rank>.<seq>.<tag>.dcp */
  DCPI_FILE_PART,        /* <rank>-of-<world>.<seq>.<tag>.metadata */
  DCPI_FILE_TMP,         /* a temporary of a save: .metadata.<tag>.tmp, <part>.tmp */
  DCPI_FILE_LEGACY_DATA, /* data-<rank>.dcp (0.2) */
  DCPI_FILE_LEGACY_PART, /* <rank>.metadata (0.2) */
  DCPI_FILE_LEGACY_TMP   /* .metadata.tmp, <rank>.metadata.tmp (0.2) */
} dcpi_file_kind;

/* A parsed name; fields a kind lacks are 0 (world, seq) or "" (tag). */
typedef struct dcpi_file_name {
  dcpi_file_kind kind;
  int32_t rank, world;
  uint64_t seq;
  char tag[DCPI_TAG_LEN + 1];
} dcpi_file_name;

/* A save's identity as the runtime carries it. */
typedef struct dcpi_identity {
  uint8_t id[16];
  uint64_t generation;
  char tag[DCPI_TAG_LEN + 1]; /* dcpi_tag_of(id) */
} dcpi_identity;

/* A fresh random save id (never all zero). Errors: DCP_EIO (no entropy). */
dcp_status dcpi_save_id_random(uint8_t id[16]);

/* The id of an uncoordinated save with the caller's save_id (non-zero) in
 * a world of `world`: the same on every rank, no communication. */
void dcpi_save_id_of_tag(uint64_t save_id, int32_t world, uint8_t id[16]);

/* The tag of id: 16 lowercase hex digits of its first 8 bytes. */
void dcpi_tag_of(const uint8_t id[16], char tag[DCPI_TAG_LEN + 1]);

/* Names (out has DCPI_NAME_MAX bytes). seq 0 names a coordinated save's
 * data file; seq > 0 an uncoordinated part's. */
void dcpi_name_data(char *out, int32_t rank, uint64_t seq, const char *tag);
void dcpi_name_part(char *out, int32_t rank, int32_t world, uint64_t seq, const char *tag);
void dcpi_name_metadata_tmp(char *out, const char *tag);
void dcpi_name_rank_lease(char *out, int32_t rank);

/* Parse name (only the exact forms above: a name is accepted when
 * formatting its fields again gives it back). Returns its kind. */
dcpi_file_kind dcpi_name_parse(const char *name, dcpi_file_name *out);

/* Whether a save may remove name as a leftover of a save (data files,
 * parts, temporaries, old names); never .metadata, a lease or a user's file. */
bool dcpi_name_is_save_file(const char *name);

#endif
