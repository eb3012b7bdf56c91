/* codec.h — what a storage ref's codec implies (docs/format.md, "refs").
 * One place for the rules, so the encoder, the decoder, the commit and the
 * block reader agree. */
#ifndef DCP_METADATA_CODEC_H
#define DCP_METADATA_CODEC_H

#include <stdbool.h>
#include <stdint.h>

#include "dcp.h"

/* A codec value this version reads and writes. */
static inline bool dcpi_codec_known(uint32_t c) { return c <= DCP_CODEC_ZSTD_CHECKED; }

/* Blocks are zstd frames (or raw where that was not smaller), so each has a
 * stored length of its own. */
static inline bool dcpi_codec_zstd(uint32_t c) {
  return c == DCP_CODEC_ZSTD || c == DCP_CODEC_ZSTD_CHECKED;
}

/* Each block's checksum covers the bytes as stored in the file (else the
 * decoded bytes; for raw blocks the two are the same). */
static inline bool dcpi_codec_sums_stored(uint32_t c) { return c == DCP_CODEC_ZSTD_CHECKED; }

#endif
