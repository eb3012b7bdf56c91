/* cc_codec.h — the byte formats of the rendezvous files that the file and
 * gloo collectives share, and the decoders of what a peer (or anyone who
 * can write into the directory) left there. Pure functions over bytes, so
 * that a fuzz target (tests/fuzz/fuzz_coll_handshake.c) can compile this
 * file alone.
 *
 * A record is a payload followed by a 32-byte trailer (little endian):
 *
 *     u64 payload length | u64 XXH3_64bits(payload) | u32 op | u32 0 |
 *     "DCPFXCH1"
 *
 * A file without a valid trailer (too short, wrong magic) is "not there
 * yet" (a writer's rename makes it appear whole, so this is a stranger's
 * file); a well-formed trailer whose length disagrees with the file, or a
 * checksum that disagrees with the payload, is DCP_ECORRUPT.
 *
 * Handshake payloads: a hello is {u64 nonce, u32 world} (op 1); a session
 * is {u64 session id, u32 world, u64 nonce of rank r for r in [0, world)}
 * (op 2; rank 0's slot is 0). Internal (hidden symbols). */
#ifndef DCP_COLL_COMMON_CC_CODEC_H
#define DCP_COLL_COMMON_CC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DCPI_CC_TRAILER_SIZE 32
#define DCPI_CC_MAGIC "DCPFXCH1"
#define DCPI_CC_OP_HELLO 1u
#define DCPI_CC_OP_SESSION 2u
#define DCPI_CC_HELLO_SIZE 12   /* u64 nonce, u32 world */
#define DCPI_CC_SESSION_HEAD 12 /* u64 session id, u32 world; then a u64 per rank */
#define DCPI_CC_WORLD_MAX (1 << 24) /* the largest world a session can name */

/* Little-endian stores and loads: files may be read on another host. */
void dcpi_cc_put64(unsigned char *p, uint64_t v);
void dcpi_cc_put32(unsigned char *p, uint32_t v);
uint64_t dcpi_cc_get64(const unsigned char *p);
uint32_t dcpi_cc_get32(const unsigned char *p);

/* XXH3-64 of a payload; len 0 never touches p. */
uint64_t dcpi_cc_hash(const void *p, size_t len);

/* What a trailer says. */
typedef struct dcpi_cc_trailer {
  uint64_t plen, hash;
  uint32_t op;
} dcpi_cc_trailer;

/* Fills tr (DCPI_CC_TRAILER_SIZE bytes) for a payload of len bytes. */
void dcpi_cc_trailer_make(unsigned char *tr, uint32_t op, const void *payload, size_t len);

/* Parses the trailer tr of a file of size bytes (tr: its last
 * DCPI_CC_TRAILER_SIZE bytes, NULL when the file is shorter): 0 when there
 * is no valid trailer (not there yet), 1 with *out set, or DCP_ECORRUPT (a
 * well-formed trailer whose length disagrees with the file's) with a
 * message naming path. */
int dcpi_cc_trailer_parse(const unsigned char *tr, uint64_t size, const char *path,
                          dcpi_cc_trailer *out, dcp_plugin_err *err);

/* Bytes of a whole hello record, and of a session record for world ranks
 * (0 when world is out of [1, DCPI_CC_WORLD_MAX]). */
#define DCPI_CC_HELLO_RECORD (DCPI_CC_HELLO_SIZE + DCPI_CC_TRAILER_SIZE)
size_t dcpi_cc_session_record(int32_t world);

/* Writes a whole hello record (DCPI_CC_HELLO_RECORD bytes) into out. */
void dcpi_cc_hello_encode(unsigned char *out, uint64_t nonce, int32_t world);
/* Writes a whole session record (dcpi_cc_session_record(world) bytes);
 * nonces has world entries. */
void dcpi_cc_session_encode(unsigned char *out, uint64_t session, int32_t world,
                            const uint64_t *nonces);

/* What a decoder found in a record (besides DCP_ECORRUPT). */
enum {
  DCPI_CC_NOT_OURS = 0, /* no valid record yet, another op or size, or for
                           another world (*other_world set, when decodable) */
  DCPI_CC_OURS = 1      /* for this world (and, a session, this rank's nonce) */
};

/* Decodes the len bytes of a hello file for a world of world ranks: OURS
 * with *nonce (never 0) set, NOT_OURS (a hello naming another world sets
 * *other_world), or DCP_ECORRUPT with a message naming path. */
int dcpi_cc_hello_decode(const unsigned char *rec, size_t len, int32_t world, const char *path,
                         uint64_t *nonce, uint32_t *other_world, dcp_plugin_err *err);

/* Decodes the len bytes of a session file as rank `rank` of world ranks
 * whose hello carried nonce: OURS with *session set when it names this
 * world and echoes nonce for rank, NOT_OURS (a session of another world
 * sets *other_world), or DCP_ECORRUPT. */
int dcpi_cc_session_decode(const unsigned char *rec, size_t len, int32_t world, int32_t rank,
                           uint64_t nonce, const char *path, uint64_t *session,
                           uint32_t *other_world, dcp_plugin_err *err);


/* ---- the TCP store's messages (cc_store.h) -------------------------------
 * On the wire every message is a frame: u32 length of the record that
 * follows, then a record (payload + trailer) as above, of op:
 *   3 hello   {u64 nonce, u32 world, u32 rank, u32 job length, job}
 *   4 welcome {u64 session, u32 world, u32 rank, u64 the hello's nonce}
 *   5 refuse  {u32 reason, text}: the store will not serve this peer
 *   6 set     {u64 session, u32 key length, key, value}
 *   7 get     {u64 session, u32 key length, key}
 *   8 value   {u32 present, value}: the answer to set (present 1, no
 *             value) and get (present 0: not set yet)
 * A hello's job is 1..DCPI_CC_JOB_MAX of [A-Za-z0-9_-]; keys are
 * 1..DCPI_CC_KEY_MAX bytes; a record is at most DCPI_CC_FRAME_MAX bytes. */
#define DCPI_CC_OP_S_HELLO 3u
#define DCPI_CC_OP_S_WELCOME 4u
#define DCPI_CC_OP_S_REFUSE 5u
#define DCPI_CC_OP_S_SET 6u
#define DCPI_CC_OP_S_GET 7u
#define DCPI_CC_OP_S_VALUE 8u
#define DCPI_CC_JOB_MAX 64
#define DCPI_CC_KEY_MAX 1024
#define DCPI_CC_TEXT_MAX 400
#define DCPI_CC_FRAME_MAX (64u << 20)

/* Why a store refused a peer. */
enum {
  DCPI_CC_REFUSE_JOB = 1,     /* another job or world size */
  DCPI_CC_REFUSE_RANK = 2,    /* a rank out of range */
  DCPI_CC_REFUSE_FORMED = 3,  /* the session has formed: no newcomers */
  DCPI_CC_REFUSE_SESSION = 4, /* a request naming another session, or too early */
  DCPI_CC_REFUSE_REPLACED = 5 /* a newer hello of the same rank replaced this one */
};

/* One store message, decoded or to encode. Pointers point into the record
 * (decoded) or at the caller's bytes (to encode). */
typedef struct dcpi_cc_smsg {
  uint32_t op;
  uint64_t nonce, session; /* hello, welcome; welcome, set, get */
  uint32_t world, rank;    /* hello, welcome */
  uint32_t reason;         /* refuse */
  uint32_t present;        /* value */
  const unsigned char *job, *key, *data; /* hello; set, get; refuse text, set and value bytes */
  size_t job_len, key_len, data_len;
} dcpi_cc_smsg;

/* The record's size for m (0 when a field is out of range: a job or key
 * too long, text over DCPI_CC_TEXT_MAX, a record over DCPI_CC_FRAME_MAX,
 * an unknown op); with out non-NULL (room for that size) writes it. */
size_t dcpi_cc_smsg_encode(unsigned char *out, const dcpi_cc_smsg *m);

/* Decodes a record of len bytes: DCPI_CC_OURS with *m set (pointers into
 * rec), DCPI_CC_NOT_OURS (no valid trailer, an op that is not a store
 * message, or a payload whose fields do not add up: a stranger's bytes),
 * or DCP_ECORRUPT (a checksum mismatch) with a message naming who. */
int dcpi_cc_smsg_decode(const unsigned char *rec, size_t len, const char *who, dcpi_cc_smsg *m,
                        dcp_plugin_err *err);

#ifdef __cplusplus
}
#endif
#endif
