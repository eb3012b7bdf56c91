/* fx_codec.h — the byte formats of the file-exchange collective (file.c
 * describes the protocol): the 32-byte trailer every file ends with, the
 * checks of a payload against what a round expects, and the payloads the
 * handshake and allreduce decode. Pure functions over bytes that a peer
 * wrote, kept apart from the file I/O so that a fuzz target
 * (tests/fuzz/fuzz_coll_file.c) can compile this file alone. Internal to
 * the plugin (hidden symbols). */
#ifndef DCP_COLL_FILE_FX_CODEC_H
#define DCP_COLL_FILE_FX_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#define DCPI_FX_TRAILER_SIZE 32
#define DCPI_FX_MAGIC "DCPFXCH1"
#define DCPI_FX_HELLO_SIZE 12 /* u64 nonce, u32 world */
#define DCPI_FX_SESSION_HEAD 12 /* u64 session id, u32 world; then a u64 nonce per rank */

/* Outcome of looking at one file (besides negative statuses). */
enum { DCPI_FX_ABSENT = 0, DCPI_FX_PRESENT = 1 };

/* Little-endian stores and loads: files may be read on another host. */
/* Write a printf-style reason into err (may be NULL) and return code: the
 * plugin's one error helper (file.c uses it too). */
int dcpi_fx_fail(dcp_plugin_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void dcpi_fx_put64(unsigned char *p, uint64_t v);
void dcpi_fx_put32(unsigned char *p, uint32_t v);
uint64_t dcpi_fx_get64(const unsigned char *p);
uint32_t dcpi_fx_get32(const unsigned char *p);

/* XXH3-64 of a payload; len 0 never touches p. */
uint64_t dcpi_fx_payload_hash(const void *p, size_t len);

/* What a trailer says. */
typedef struct dcpi_fx_trailer {
  uint64_t plen, hash;
  uint32_t op;
} dcpi_fx_trailer;

/* Fill tr (DCPI_FX_TRAILER_SIZE bytes) for a payload of len bytes. */
void dcpi_fx_trailer_make(unsigned char *tr, uint32_t op, const void *payload, size_t len);

/* Parse the trailer tr of a file of size bytes (tr: its last
 * DCPI_FX_TRAILER_SIZE bytes, NULL when the file is shorter). Returns
 * DCPI_FX_ABSENT when there is no valid trailer yet (too short, wrong
 * magic: still being written by a peer), DCPI_FX_PRESENT with *out set, or
 * DCP_ECORRUPT (a well-formed trailer whose length disagrees with the
 * file's) with a message naming path. */
int dcpi_fx_trailer_parse(const unsigned char *tr, uint64_t size, const char *path,
                          dcpi_fx_trailer *out, dcp_plugin_err *err);

/* What a round expects of one file. */
typedef struct dcpi_fx_expect {
  const char *path;
  int32_t from;  /* the rank that writes it (for messages) */
  uint32_t op;
  int has_data;  /* 0: the trailer only; else exactly len payload bytes */
  size_t len;
  int lenient;   /* a wrong op or size means "stale, not yet there" */
} dcpi_fx_expect;

/* Check a parsed trailer against e before the payload is read: the op and
 * (with data) the length. Returns DCPI_FX_PRESENT, DCPI_FX_ABSENT (lenient
 * mismatch) or DCP_EINVAL (the ranks called different collectives, or
 * with different sizes). */
int dcpi_fx_accept(const dcpi_fx_trailer *t, const dcpi_fx_expect *e, dcp_plugin_err *err);

/* Check the payload p (t->plen bytes, read from e->path) against the
 * trailer's checksum: DCP_OK or DCP_ECORRUPT. */
int dcpi_fx_verify(const dcpi_fx_trailer *t, const void *p, const dcpi_fx_expect *e,
                   dcp_plugin_err *err);

/* The nonce of a hello payload (DCPI_FX_HELLO_SIZE bytes), 0 when it is
 * for another world size than world (a stale file of another job). */
uint64_t dcpi_fx_hello_nonce(const unsigned char *hello, int32_t world);

/* Whether a session payload s (DCPI_FX_SESSION_HEAD + 8 * world bytes, as
 * the round read it) is this job's: its world is world and it echoes
 * nonce for rank. Sets *session when it is. */
int dcpi_fx_session_accepts(const unsigned char *s, int32_t world, int32_t rank, uint64_t nonce,
                            uint64_t *session);

/* acc[i] = op(acc[i], v[i]) for the n little-endian int64 values at v.
 * SUM wraps around (two's complement, like MPI implementations) instead of
 * overflowing; op is a DCP_REDUCE_* value (others act as SUM). */
void dcpi_fx_reduce_into(int64_t *acc, const unsigned char *v, size_t n, uint32_t op);

#endif
