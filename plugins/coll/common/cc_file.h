/* cc_file.h — files in a rendezvous directory, shared by the collectives
 * that meet through one (file, gloo). Other processes, possibly other
 * users, can write into that directory, so nothing here follows a symbolic
 * link or writes into a file it did not create:
 *  - a file is written to a fresh temporary "<name>.tmp.<16 random hex>"
 *    created with O_CREAT | O_EXCL | O_NOFOLLOW (never an existing file,
 *    never through a link), then renamed to its name: a link planted at the
 *    name is replaced, its target untouched;
 *  - a reader opens with O_NOFOLLOW | O_NONBLOCK and reads regular files
 *    only: a link, a fifo or a directory at the name is reported as
 *    DCPI_CC_ODD, never read, never waited on.
 * Internal to the plugins (hidden symbols, a static library). */
#ifndef DCP_COLL_COMMON_CC_FILE_H
#define DCP_COLL_COMMON_CC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Outcomes of looking at a file (besides negative statuses). */
enum {
  DCPI_CC_ABSENT = 0,  /* no such file (yet) */
  DCPI_CC_PRESENT = 1, /* a regular file, opened or read */
  DCPI_CC_ODD = 2      /* a symbolic link or not a regular file: refused */
};

/* A non-zero random 64-bit number: getrandom(), else /dev/urandom, else a
 * mix of the clock, the pid and an address (never 0: 0 marks "none"). */
uint64_t dcpi_cc_random64(void);

/* Writes the alen bytes at a and then the blen bytes at b (either may be 0)
 * to path atomically, as described above. DCP_OK, or DCP_EIO / DCP_ENOSPC
 * with a message naming the file. */
int dcpi_cc_write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                       dcp_plugin_err *err);

/* Opens path for reading (see above): DCPI_CC_PRESENT with *fd (to close)
 * and *size set, DCPI_CC_ABSENT, DCPI_CC_ODD, or DCP_EIO with a message. */
int dcpi_cc_open_file(const char *path, int *fd, uint64_t *size, dcp_plugin_err *err);

/* Reads all of path into buf (cap bytes): DCPI_CC_PRESENT with *len set,
 * DCPI_CC_ABSENT, DCPI_CC_ODD (also a file longer than cap), or DCP_EIO. */
int dcpi_cc_read_small(const char *path, void *buf, size_t cap, size_t *len,
                       dcp_plugin_err *err);

/* Creates the empty file path; fails (DCP_EIO naming it) when the name
 * exists in any form, a link included. */
int dcpi_cc_create_empty(const char *path, dcp_plugin_err *err);

/* Removes every entry of the flat directory dir, then dir itself (best
 * effort). A link at dir is not followed: nothing outside is removed. */
void dcpi_cc_remove_dir(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
