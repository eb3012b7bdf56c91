/* proto.h — the trainer ↔ dcp-writer message protocol (docs/async.md).
 *
 * A stream of frames over a socketpair. Every frame is a 24-byte header
 *
 *     u32 magic "DCPW" | u16 version | u16 type | u64 payload length |
 *     u64 XXH3_64bits(payload)
 *
 * (little endian) followed by the payload. A SAVE frame carries the staging
 * pool's file descriptor as SCM_RIGHTS ancillary data. Decoding never trusts
 * a length or count: anything out of bounds is DCP_ECORRUPT, another
 * version DCP_EVERSION. */
#ifndef DCP_WRITER_PROTO_H
#define DCP_WRITER_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define DCPI_WP_MAGIC 0x57504344u /* "DCPW" */
#define DCPI_WP_VERSION 8u /* 2: DONE carries the save's statistics; 3: layouts, PLAN;
                              4: the save's save_id and base, the context's lease_ms;
                              5: OPEN; 6: the base's parts hash, BYE, the
                              trainer's working directory; 7: a SAVE's refusal;
                              8: flat-sharded layouts, DONE's save_plan_path */
#define DCPI_WP_HEADER 24u
#define DCPI_WP_MAX_PAYLOAD (1ull << 30) /* refuse frames above 1 GiB */

/* SAVE: trainer → writer, one job. DONE: writer → trainer, its outcome.
 * PLAN: either way, one plan cache entry the other side has not seen; the
 * trainer sends its new ones before a SAVE, the writer before a DONE.
 * OPEN: trainer → writer (dcp_async_prepare), the coordination config:
 * the writer opens its context now, ahead of the first SAVE; no reply.
 * BYE: trainer → writer, no payload, a clean shutdown (dcp_async_shutdown
 * of a keep-mode writer): drop the snapshots and exit without lingering. */
enum { DCPI_WP_SAVE = 1, DCPI_WP_DONE = 2, DCPI_WP_PLAN = 3, DCPI_WP_OPEN = 4,
       /* the memory tier's snapshot socket (writer/snapshot.h), never the
        * trainer's socketpair: GET and STOP (client → writer), SNAP (the
        * answer to both, a GET's with the snapshot's memfd) */
       DCPI_WP_SNAP_GET = 5, DCPI_WP_SNAP = 6, DCPI_WP_SNAP_STOP = 7, DCPI_WP_BYE = 8 };

/* Coordination config of the writer's own context. */
typedef struct dcpi_wp_coord {
  char *coll, *coll_options, *rendezvous; /* coll "single", "file", "gloo" */
  int32_t rank, world_size;
  int64_t timeout_ms, lease_ms;
  char *storage, *storage_options, *plugin_path; /* NULL: default / none */
} dcpi_wp_coord;

typedef struct dcpi_wp_tensor {
  char *fqn;
  uint32_t dtype, ndim;
  int64_t shape[DCP_MAX_NDIM];
  /* The tensor's layout (dcp_state_add_sharded, or the cells of
   * dcp_state_add_flat_sharded), or NULL. Borrowed from the state when
   * encoding; owned by the job after decoding. A sharded tensor's chunk is
   * its first chunk in the job; a flat one's chunks are its range's boxes,
   * one after the other. */
  dcp_layout *layout;
  uint32_t flat;      /* with layout: 1 for a flat-sharded tensor */
  uint32_t flat_dims; /* then: its resolved flat dims */
} dcpi_wp_tensor;

typedef struct dcpi_wp_chunk {
  uint32_t tensor;
  dcp_box box;
  uint64_t offset, nbytes; /* in the pool */
} dcpi_wp_chunk;

typedef struct dcpi_wp_bytes {
  char *key;
  uint32_t scope;
  uint64_t offset, len; /* in the pool */
} dcpi_wp_bytes;

/* A SAVE job: where, how, with whom, and what lies where in the pool. */
typedef struct dcpi_wp_job {
  uint64_t seq;
  char *path;
  char *cwd; /* the trainer's working directory (NULL: unknown), which the writer
               enters first: a relative path means what it means to the trainer */
  uint32_t flags, block_size, policy;
  int32_t zstd_level;
  uint64_t save_id; /* dcp_save_options.save_id (uncoordinated saves) */
  /* What the directory held when dcp_async_save was called (the trainer's
   * dcpi_base_peek; has_base 0 when this rank took none). */
  uint32_t has_base, base_committed;
  uint64_t base_len, base_head, base_rank_seq;
  uint64_t base_parts_hash; /* the names of the parts there (dcpi_base.parts_hash) */
  size_t nkv;
  char **kv_keys, **kv_values;
  dcpi_wp_coord coord;
  uint64_t pool_size;
  size_t ntensors, nchunks, nbytes;
  dcpi_wp_tensor *tensors;
  dcpi_wp_chunk *chunks;
  dcpi_wp_bytes *bytes;
  /* Non-zero: this rank's trainer refused the save (its staging failed)
   * with this status and message. The writer writes nothing and takes the
   * save's first agreement with it, so every rank's save fails with it at
   * once instead of waiting for this rank until the deadline. */
  int32_t refused;
  char *refused_msg;
} dcpi_wp_job;

/* Encode job into a freshly allocated payload (*out, *len).
 * Errors: DCP_ENOMEM, DCP_EOVERFLOW. */
dcp_status dcpi_wp_job_encode(const dcpi_wp_job *job, uint8_t **out, size_t *len);

/* Turn the payload (*p, *len) of a job encoded with refused 0 into the
 * same job refused with code (non-zero) and msg (*p reallocated). Used
 * after the job's borrowed strings may be gone (background staging), so
 * it edits the encoded tail instead of encoding again. Errors: DCP_EINVAL
 * (not such a payload), DCP_ENOMEM (*p unchanged). */
dcp_status dcpi_wp_job_refuse(uint8_t **p, size_t *len, dcp_status code, const char *msg);

/* Decode a SAVE payload into *job (zeroed first; free with
 * dcpi_wp_job_free even on error). Errors: DCP_ECORRUPT, DCP_ENOMEM. */
dcp_status dcpi_wp_job_decode(const uint8_t *p, size_t len, dcpi_wp_job *job, dcpi_err *err);

/* Free what dcpi_wp_job_decode allocated. */
void dcpi_wp_job_free(dcpi_wp_job *job);

/* Encode an OPEN payload (the coordination config c) into a freshly
 * allocated buffer. Errors: DCP_ENOMEM. */
dcp_status dcpi_wp_open_encode(const dcpi_wp_coord *c, uint8_t **out, size_t *len);

/* Decode an OPEN payload into *c (zeroed first; free with
 * dcpi_wp_coord_free even on error). Errors: DCP_ECORRUPT, DCP_ENOMEM. */
dcp_status dcpi_wp_open_decode(const uint8_t *p, size_t len, dcpi_wp_coord *c, dcpi_err *err);

/* Free the strings of a decoded coordination config and zero it. */
void dcpi_wp_coord_free(dcpi_wp_coord *c);

/* Encode / decode a DONE payload: job seq, status, message, and the
 * writer's dcp_stats of the save (so dcp_async_wait can report them). */
dcp_status dcpi_wp_done_encode(uint64_t seq, dcp_status rc, const char *msg,
                               const dcp_stats *stats, uint8_t **out, size_t *len);
dcp_status dcpi_wp_done_decode(const uint8_t *p, size_t len, uint64_t *seq, dcp_status *st,
                               char *msg, size_t msg_cap, dcp_stats *stats, dcpi_err *err);

/* Send every entry of c not yet shared as a PLAN frame each, marking them
 * shared. Errors: as dcpi_wp_send. */
struct dcpi_plan_cache;
dcp_status dcpi_wp_send_plans(int sock, struct dcpi_plan_cache *c, dcpi_err *err);

/* Decode a PLAN payload into a new cache entry (marked shared).
 * Errors: DCP_ECORRUPT, DCP_ENOMEM. */
struct dcpi_plan_entry;
dcp_status dcpi_wp_plan_decode(const uint8_t *p, size_t len, struct dcpi_plan_entry **out,
                               dcpi_err *err);

/* Fill hdr (DCPI_WP_HEADER bytes) for a frame of type with payload p. */
void dcpi_wp_header(uint8_t *hdr, uint16_t type, const uint8_t *p, size_t len);

/* Check a received header: magic, version, length bound. Sets *type and
 * *len. Errors: DCP_ECORRUPT, DCP_EVERSION. */
dcp_status dcpi_wp_check_header(const uint8_t *hdr, uint16_t *type, uint64_t *len,
                                dcpi_err *err);

/* Check the payload's checksum against the header's. Errors: DCP_ECORRUPT. */
dcp_status dcpi_wp_check_payload(const uint8_t *hdr, const uint8_t *p, size_t len,
                                 dcpi_err *err);

/* Send one frame on a stream socket, with fd_pass (>= 0) attached as
 * SCM_RIGHTS. Never raises SIGPIPE. Errors: DCP_EIO (peer gone: DCP_EPEER). */
dcp_status dcpi_wp_send(int sock, uint16_t type, const uint8_t *p, size_t len, int fd_pass,
                        dcpi_err *err);

/* Receive one whole frame: *type, a malloc'ed payload (*p, *len) and a
 * passed descriptor (*fd, -1 when none; may be NULL to refuse one).
 * Returns DCP_ENOTFOUND on a clean EOF before any byte of a frame,
 * DCP_EPEER on EOF inside a frame, DCP_ECORRUPT, DCP_EVERSION, DCP_EIO,
 * DCP_ENOMEM. */
dcp_status dcpi_wp_recv(int sock, uint16_t *type, uint8_t **p, size_t *len, int *fd,
                        dcpi_err *err);

#endif
