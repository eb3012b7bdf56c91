/* format.h — constants of the .metadata binary format (docs/format.md).
 * Shared by the encoder and the decoder; changing any value changes the
 * format and needs a new DCPI_FORMAT_VERSION. */
#ifndef DCP_METADATA_FORMAT_H
#define DCP_METADATA_FORMAT_H

#include <stdint.h>

#define DCPI_FORMAT_VERSION 4u /* written; 1, 2 and 3 are still read (2 and 3 written on request) */
#define DCPI_MAGIC "\x89" "DCPM\r\n\x1a" /* 8 bytes, no NUL counted */
#define DCPI_MAGIC_LEN 8u

#define DCPI_HEADER_SIZE 32u    /* magic, version, flags, total length, count, reserved */
#define DCPI_DIRENT_SIZE 32u    /* id, reserved, offset, length, xxh3 */
#define DCPI_TRAILER_SIZE 8u    /* xxh3 of every byte before it */

/* Section ids, in the order they appear in the directory and in the file. */
enum {
  DCPI_SEC_STRINGS = 1,
  DCPI_SEC_FILES = 2,
  DCPI_SEC_MESHES = 3,
  DCPI_SEC_TENSORS = 4,
  DCPI_SEC_CHUNKS = 5,
  DCPI_SEC_BYTES = 6,
  DCPI_SEC_KV = 7,
  DCPI_SEC_SAVE = 8,     /* since version 2: the save's identity, file lengths */
  DCPI_SEC_COUNT = 8,    /* in the version written */
  DCPI_SEC_COUNT_V1 = 7
};

/* Sections of a file of format version v (1 to 4). */
#define DCPI_SEC_COUNT_OF(v) ((v) == 1u ? (unsigned)DCPI_SEC_COUNT_V1 : (unsigned)DCPI_SEC_COUNT)
/* Where the sections start in a file with n directory entries. */
#define DCPI_SECTIONS_AT(n) (DCPI_HEADER_SIZE + (size_t)(n) * DCPI_DIRENT_SIZE)
#define DCPI_SECTIONS_START DCPI_SECTIONS_AT(DCPI_SEC_COUNT)
#define DCPI_SAVE_ID_LEN 16u /* bytes of a save identity's id */

/* Per-ref flag byte (chunk entries and bytes items). */
#define DCPI_RF_FILE_MASK 0x03u    /* how the file index is found: */
#define DCPI_RF_FILE_SAME 0x00u    /*   previous ref's file */
#define DCPI_RF_FILE_NEXT 0x01u    /*   previous ref's file + 1 */
#define DCPI_RF_FILE_EXPLICIT 0x02u /*  varint follows */
#define DCPI_RF_OFF_MASK 0x0cu     /* how the file offset is found: */
#define DCPI_RF_OFF_END 0x00u      /*   previous ref's offset + stored length */
#define DCPI_RF_OFF_SAME 0x04u     /*   previous ref's offset */
#define DCPI_RF_OFF_DELTA 0x08u    /*   zigzag varint added to previous offset */
#define DCPI_RF_OFF_ABS 0x0cu      /*   varint follows */
#define DCPI_RF_SAME_SIZE 0x10u    /* chunk: box size = previous chunk's size */
#define DCPI_RF_CODING_DEFAULT 0x20u /* codec and block size = the file's default */
#define DCPI_RF_BOX_PREDICTED 0x40u  /* chunk: box offset = next grid position */
#define DCPI_RF_RESERVED 0x80u       /* must be zero */
#define DCPI_RF_BOX_BITS (DCPI_RF_SAME_SIZE | DCPI_RF_BOX_PREDICTED)

/* Smallest encodings, used to bound counts before allocating. */
#define DCPI_MIN_STRING 2u  /* length varint + NUL */
#define DCPI_MIN_FILE 3u    /* name, codec, block size */
#define DCPI_MIN_MESH 3u    /* ndim, one extent, one rank */
#define DCPI_MIN_TENSOR 14u /* fqn, dtype, ndim, mesh, count, length, 8-byte xxh3 */
#define DCPI_MIN_CHUNK 9u   /* flags + at least one 8-byte block checksum */
#define DCPI_MIN_BYTES 5u   /* key, scope, rank, flags, raw length */
#define DCPI_MIN_KV 2u      /* key, value */
#define DCPI_MIN_FILE_LEN 1u /* a file length varint (save section) */

/* Version 4 derived lists: the byte offset of every DCPI_SKIP_EVERY-th
 * entry (the interval the encoder writes; a reader takes any >= 1), whose
 * entry is self-contained (file EXPLICIT, offset ABS), and the xxh3 of
 * each window of that many entries, so one chunk is read and verified
 * alone. */
#define DCPI_SKIP_EVERY 128u
#define DCPI_RF_SELF_CONTAINED (DCPI_RF_FILE_EXPLICIT | DCPI_RF_OFF_ABS)

#endif
