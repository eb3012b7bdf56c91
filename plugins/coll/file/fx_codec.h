/* fx_codec.h — the byte formats of the file-exchange collective (file.c
 * describes the protocol): every file is a record of common/cc_codec.h
 * (payload + 32-byte trailer); this adds the checks of a record against
 * what a round expects and the allreduce decoding. Pure functions over
 * bytes that a peer wrote, kept apart from the file I/O so that a fuzz
 * target (tests/fuzz/fuzz_coll_file.c) can compile this file (with
 * cc_codec.c) alone. Internal to the plugin (hidden
 * symbols). */
#ifndef DCP_COLL_FILE_FX_CODEC_H
#define DCP_COLL_FILE_FX_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "cc_codec.h"
#include "dcp_plugin.h"

/* The record format is the common one; these names are its, kept for this
 * plugin's code, its fuzz target and its corpus generator. */
#define DCPI_FX_TRAILER_SIZE DCPI_CC_TRAILER_SIZE
#define DCPI_FX_MAGIC DCPI_CC_MAGIC
#define DCPI_FX_HELLO_SIZE DCPI_CC_HELLO_SIZE
#define DCPI_FX_SESSION_HEAD DCPI_CC_SESSION_HEAD
#define dcpi_fx_put64 dcpi_cc_put64
#define dcpi_fx_put32 dcpi_cc_put32
#define dcpi_fx_get64 dcpi_cc_get64
#define dcpi_fx_get32 dcpi_cc_get32
#define dcpi_fx_payload_hash dcpi_cc_hash
#define dcpi_fx_trailer_make dcpi_cc_trailer_make
#define dcpi_fx_trailer_parse dcpi_cc_trailer_parse
typedef dcpi_cc_trailer dcpi_fx_trailer;

/* Outcome of looking at one file (besides negative statuses);
 * dcpi_fx_trailer_parse returns them too. */
enum { DCPI_FX_ABSENT = 0, DCPI_FX_PRESENT = 1 };

/* The op stored in each trailer; a mismatch means the ranks disagree on the
 * order of calls, except a peer's OP_CLOSE: that rank left the collective
 * (its process is shutting down) while this one still calls. */
enum {
  OP_HELLO = 1, OP_SESSION, OP_OPEN, OP_BARRIER, OP_BCAST, OP_ALLGATHER,
  OP_GATHERV, OP_SCATTERV, OP_ALLREDUCE, OP_GROUP, OP_CLOSE, OP_DONE
};

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
 * mismatch), DCP_EPEER (the writing rank closed its collective: it left)
 * or DCP_EINVAL (the ranks called different collectives, or with
 * different sizes). */
int dcpi_fx_accept(const dcpi_fx_trailer *t, const dcpi_fx_expect *e, dcp_plugin_err *err);

/* Check the payload p (t->plen bytes, read from e->path) against the
 * trailer's checksum: DCP_OK or DCP_ECORRUPT. */
int dcpi_fx_verify(const dcpi_fx_trailer *t, const void *p, const dcpi_fx_expect *e,
                   dcp_plugin_err *err);

/* The nonce of a hello payload (DCPI_FX_HELLO_SIZE bytes), 0 when it is
 * for another world size than world. (The plugin's handshake decodes whole
 * records with dcpi_cc_hello_decode; this payload-level view is its fuzz
 * target's.) */
uint64_t dcpi_fx_hello_nonce(const unsigned char *hello, int32_t world);

/* Whether a session payload s (DCPI_FX_SESSION_HEAD + 8 * world bytes) is
 * this job's: its world is world and it echoes nonce for rank. Sets
 * *session when it is. (Payload-level, as dcpi_fx_hello_nonce.) */
int dcpi_fx_session_accepts(const unsigned char *s, int32_t world, int32_t rank, uint64_t nonce,
                            uint64_t *session);

/* acc[i] = op(acc[i], v[i]) for the n little-endian int64 values at v.
 * SUM wraps around (two's complement, like MPI implementations) instead of
 * overflowing; op is a DCP_REDUCE_* value (others act as SUM). */
void dcpi_fx_reduce_into(int64_t *acc, const unsigned char *v, size_t n, uint32_t op);

#endif
