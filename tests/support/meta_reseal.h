/* meta_reseal.h — make a tampered .metadata pass its checksums, so that a
 * test's change reaches the decoder's structural checks (or a tool's
 * output) instead of the whole-file checksum. */
#ifndef DCP_TEST_META_RESEAL_H
#define DCP_TEST_META_RESEAL_H

#include <stddef.h>
#include <stdint.h>

/* Recompute every section checksum (where the directory still makes sense)
 * and the trailer of the len bytes at p, in place. */
void tu_meta_reseal(uint8_t *p, size_t len);

#endif
