/* snapshot.h — the memory tier in the writer process (docs/recovery.md):
 * after each persisted save the writer keeps this rank's data files in a
 * memfd (the newest K saves, within a byte budget) and answers requests
 * for them on an abstract unix socket named after the user, the job and
 * the rank, so that a trainer restarted on the same host reads them from
 * memory. The socket and the memfds are the process's own: when the writer
 * ends, for whatever reason, the kernel frees them (no stale segment is
 * ever left behind). The messages are writer-protocol frames
 * (writer/proto.h: SNAP_GET, SNAP, SNAP_STOP); their payloads are coded
 * here. */
#ifndef DCP_WRITER_SNAPSHOT_H
#define DCP_WRITER_SNAPSHOT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/err.h"
#include "runtime/rt.h"
#include "dcp.h"

/* ---- the rendezvous ------------------------------------------------------ */

/* The abstract socket address (without its leading NUL) of the writer of
 * job and rank for user uid, into out (cap >= 64): a hash of the job, so
 * any job string fits. */
void dcpi_snap_name(char *out, size_t cap, const char *job, int32_t rank, uid_t uid);

/* Bind a listening socket at name (SOCK_CLOEXEC). Errors: DCP_EBUSY (the
 * name is taken), DCP_EIO. */
dcp_status dcpi_snap_listen(const char *name, int *fd, dcpi_err *err);

/* Connect to name, with send/receive timeouts of timeout_ms, and check
 * that the peer runs as this user. Errors: DCP_ENOTFOUND (nobody
 * listens), DCP_EPEER (another user's socket), DCP_EIO. */
dcp_status dcpi_snap_connect(const char *name, int64_t timeout_ms, int *fd, dcpi_err *err);

/* ---- messages ------------------------------------------------------------ */

/* A request: GET the snapshot whose committed metadata hashes to
 * meta_hash (path: the checkpoint the caller loads), or STOP. job and rank
 * say whom the caller expects to reach. */
typedef struct dcpi_snap_req {
  char *job, *path;
  int32_t rank;
  int32_t origin;  /* whose snapshot: rank itself, or a peer whose copy
                      this writer holds (peer replication) */
  uint64_t meta_hash;
} dcpi_snap_req;

/* One data file in a snapshot's memfd. */
typedef struct dcpi_snap_file {
  char *name;
  uint64_t offset, length;
} dcpi_snap_file;

/* The answer: who answers, what it found (DCP_MEMTIER_USED: the snapshot
 * below, passed as a memfd of size bytes; DCP_MEMTIER_STALE: one of path,
 * of another save; DCP_MEMTIER_NONE: nothing) and, when found, its files. */
typedef struct dcpi_snap_reply {
  char *job;
  int32_t rank;
  uint32_t uid;
  uint32_t state;
  uint64_t meta_hash, size;
  dcpi_snap_file *files;
  size_t nfiles;
} dcpi_snap_reply;

dcp_status dcpi_snap_req_encode(const dcpi_snap_req *q, uint8_t **out, size_t *len);
/* Errors: DCP_ECORRUPT (malformed: bounds, trailing bytes), DCP_ENOMEM. */
dcp_status dcpi_snap_req_decode(const uint8_t *p, size_t len, dcpi_snap_req *q, dcpi_err *err);
void dcpi_snap_req_free(dcpi_snap_req *q);

dcp_status dcpi_snap_reply_encode(const dcpi_snap_reply *r, uint8_t **out, size_t *len);
/* Also DCP_ECORRUPT for a file outside [0, size) or an unknown state. */
dcp_status dcpi_snap_reply_decode(const uint8_t *p, size_t len, dcpi_snap_reply *r,
                                  dcpi_err *err);
void dcpi_snap_reply_free(dcpi_snap_reply *r);

/* ---- the writer's store -------------------------------------------------- */

typedef struct dcpi_snap dcpi_snap; /* one kept save */

typedef struct dcpi_snap_store {
  uint32_t keep;      /* 0: keep mode off (the store does nothing) */
  uint32_t replicas;  /* peers that get a copy of each snapshot */
  int32_t jump;       /* replica k of rank r goes to r + k*jump (0: derive) */
  uint64_t budget;    /* bytes */
  int64_t linger_ms;
  char *job;
  int32_t rank;       /* -1 until the first save */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  dcpi_snap **snaps;  /* oldest first */
  size_t nsnaps;
  uint64_t bytes;     /* held in all snaps */
  bool stopped;       /* a STOP came: keep nothing, do not linger */
  int listen_fd;      /* -1 until bound */
  pthread_t server;
  bool server_started;
} dcpi_snap_store;

/* A store for keep mode with the writer's options (keep 0: off; budget 0:
 * a quarter of physical memory; linger_ms 0: 10 minutes). */
void dcpi_snap_store_init(dcpi_snap_store *s, uint32_t keep, uint64_t budget, int64_t linger_ms,
                          const char *job);

/* After a persisted save of rank to path on ctx: keep this rank's data
 * files of the checkpoint path now holds, read back through ctx's storage
 * into a memfd, evicting the oldest snapshots beyond keep or the budget;
 * start answering requests (taking the socket over from a lingering
 * writer of an earlier trainer). Nothing is kept (the reason goes to
 * stderr) when the checkpoint has no .metadata (coordination "none"), the
 * save is larger than the budget, or memory runs out: a load then reads
 * storage. */
void dcpi_snap_keep(dcpi_snap_store *s, dcp_ctx *ctx, const char *path, int32_t rank);

/* A STOP (from a snapshot client, or the trainer's BYE): drop every
 * snapshot, keep none from now on, end a linger. */
void dcpi_snap_stop(dcpi_snap_store *s);

/* Peer replication, after dcpi_snap_keep on every writer (collective over
 * ctx's writers; a no-op without replicas or with one rank): this rank's
 * snapshot of path goes to its s->replicas peers, the copies of the ranks
 * it is a peer of come in and are kept like its own (same keep count per
 * origin, same budget). A failed transfer (a peer gone, over budget)
 * keeps nothing of it and is reported on stderr; a failed collective
 * returns its code (the caller reopens its context). */
dcp_status dcpi_snap_replicate(dcpi_snap_store *s, dcp_ctx *ctx, const char *path, int32_t rank);

/* ---- moving a snapshot between two ranks ------------------------------ */

/* The peer of rank r for replica k (1-based) with jump j in world w. */
int32_t dcpi_snap_peer(int32_t r, uint32_t k, int32_t j, int32_t w);

/* The jump of a placement: j when > 0, else the number of ranks on this
 * rank's host by the collective's host ids (an allgather: collective),
 * 1 when it has none; never a multiple of the world. */
dcp_status dcpi_snap_jump(dcpi_rt *rt, int32_t j, int32_t *out);

/* Collective over {root, other}: root sends the snapshot described by
 * *mine (its files; NULL: none) whose bytes are in memfd fd; the other
 * rank receives it into a new memfd (*fd_out, -1 when nothing came: none
 * sent, or over `limit` bytes, or out of memory) described by *got.
 * Every rank of the pair calls it with the same root and other. Errors:
 * the collective's. */
dcp_status dcpi_snap_transfer(dcpi_rt *rt, int32_t root, int32_t other,
                              const dcpi_snap_reply *mine, int fd, uint64_t limit,
                              dcpi_snap_reply *got, int *fd_out);

/* The trainer is gone: wait, answering requests, until a STOP or
 * linger_ms, when snapshots are held; return at once otherwise. */
void dcpi_snap_linger(dcpi_snap_store *s);

/* Stop answering, free every snapshot. */
void dcpi_snap_store_free(dcpi_snap_store *s);

#endif
