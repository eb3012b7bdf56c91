/* common.h — helpers shared by the metadata encoder and decoder, so both
 * sides compute predictions and orderings identically. */
#ifndef DCP_METADATA_COMMON_H
#define DCP_METADATA_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytewise (memcmp) order of two byte strings, shorter first on a tie of
 * the common prefix: <0, 0, >0. */
int dcpi_md_cmp_bytes(const char *a, size_t alen, const char *b, size_t blen);

/* Lexicographic order of two int64 vectors of n entries: <0, 0, >0. */
int dcpi_md_cmp_i64(const int64_t *a, const int64_t *b, uint32_t n);

/* The predicted offset of the next chunk box of a tensor of the given shape:
 * the next position of a row-major walk over a regular grid, i.e. prev_off
 * advanced by prev_size in the last dimension, carrying into earlier
 * dimensions when an extent is reached. For the first chunk (first true),
 * all zeros. The caller guarantees prev_off + prev_size <= shape per
 * dimension (so nothing overflows); the result may lie outside the shape in
 * dimension 0, which simply never matches a valid box. */
void dcpi_md_predict_offset(uint32_t ndim, const int64_t *shape, const int64_t *prev_off,
                            const int64_t *prev_size, bool first, int64_t *out);

#endif
