/* sized.h — the public structs that begin with `uint32_t struct_size`:
 * reading a caller's struct that may be shorter (an older header) or
 * longer (a newer one) than the library's, in one way everywhere.
 *
 * Input structs (options, configs) are merged: the library's copy starts
 * at its defaults and the caller's known prefix overwrites them, so a field
 * the caller's header lacks keeps its default. Output structs (stats,
 * reports) are filled up to the caller's size and keep the caller's
 * struct_size, so a newer library never writes past an older caller. */
#ifndef DCP_BASE_SIZED_H
#define DCP_BASE_SIZED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether a struct of type `type` at ptr, of ptr->struct_size bytes, has
 * `field` (the library-side twin of dcp_plugin.h's DCP_HAS_FIELD). */
#define DCPI_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof((ptr)->field))

/* The size a struct must at least have: up to and including `field`. */
#define DCPI_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* Merge the caller's struct `in` (NULL: nothing to merge) over `out`, the
 * library's full-size copy (out_size bytes) already set to its defaults.
 * Returns false, touching nothing, when in's struct_size is below min_size
 * (the fields every version has). Afterwards out->struct_size is out_size. */
bool dcpi_sized_merge(void *out, size_t out_size, const void *in, size_t min_size);

/* Copy the library's full struct `full` (full_size bytes) into the caller's
 * `out`, as far as out's struct_size reaches; out keeps its struct_size.
 * Returns false, touching nothing, when out's struct_size is below 4 (it
 * cannot even hold the size). */
bool dcpi_sized_fill(void *out, const void *full, size_t full_size);

#endif
