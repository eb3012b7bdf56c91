/* cc_store.h — a rendezvous over TCP instead of a shared directory: a
 * small key-value store that rank 0 of a group serves at HOST:PORT while
 * the group's collective opens (gloo's option store=HOST:PORT).
 *
 *   rank 0:  binds HOST:PORT (or, when HOST is not an address of this host,
 *            every address at PORT), serves from a thread, and waits until
 *            every rank 1..W-1 has said hello;
 *   rank r:  connects, retrying until the deadline (rank 0 may start
 *            later), and says hello {random nonce, world, rank, job};
 *   rank 0:  once every rank has said hello, draws a fresh session id S and
 *            welcomes each rank with {S, world, rank, its nonce}; a rank
 *            accepts only a welcome that echoes its own nonce, world and
 *            rank. Then set/get requests name S.
 *
 * Strangers: a hello of another job or world size, or a rank out of range,
 * is refused (and the connection closed); bytes that are not a store
 * message close the connection; a request naming another session, or sent
 * before the session formed, is refused. A newer hello of a rank replaces
 * the older one (the older connection is refused "replaced": a stale
 * process of an earlier run cannot keep the fresh rank out), and a rank
 * whose connection closes before the session forms no longer counts. Once
 * the session has formed, newcomers are refused. A refused rank retries
 * until its deadline, and its timeout says what it was told.
 *
 * The wire format is cc_codec.h's (store messages). Every wait ends at the
 * caller's deadline (DCP_ETIMEDOUT, naming the missing ranks at rank 0 and
 * the last thing seen at the others). A port already in use at rank 0 is
 * DCP_EIO saying so at once. Messages name no plugin. Internal (hidden
 * symbols). */
#ifndef DCP_COLL_COMMON_CC_STORE_H
#define DCP_COLL_COMMON_CC_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DCPI_CC_HOST_MAX 255

/* Splits "HOST:PORT" or "[V6ADDR]:PORT" into host (DCPI_CC_HOST_MAX + 1
 * bytes) and port (1..65535): DCP_OK or DCP_EINVAL naming hp. */
int dcpi_cc_split_hostport(const char *hp, char *host, uint16_t *port, dcp_plugin_err *err);

/* The numeric address of this host's interface that routes toward
 * host:port (a UDP socket connected there, then getsockname: no packet is
 * sent) into out (cap bytes, 64 is enough): DCP_OK, DCP_EINVAL (host does
 * not resolve) or DCP_EIO (no route), naming host. */
int dcpi_cc_route_addr(const char *host, uint16_t port, char *out, size_t cap,
                       dcp_plugin_err *err);

typedef struct dcpi_cc_store dcpi_cc_store;

/* What a rank opens the store with. */
typedef struct dcpi_cc_store_cfg {
  const char *host;    /* the store's host (rank 0 listens there) */
  uint16_t port;
  const char *job;     /* 1..DCPI_CC_JOB_MAX of [A-Za-z0-9_-] */
  int32_t rank, world;
  int64_t deadline_ns; /* dcpi_cc_now_ns() + the open's timeout */
  int64_t timeout_ms;  /* the open's timeout, for messages */
} dcpi_cc_store_cfg;

/* Opens this rank's side and returns once the session has formed (every
 * rank said hello and was welcomed). *out is freed with
 * dcpi_cc_store_close. DCP_OK, DCP_EINVAL (bad cfg), DCP_EIO (rank 0
 * cannot listen: the port in use, ...), DCP_ETIMEDOUT, DCP_ENOMEM. */
int dcpi_cc_store_open(const dcpi_cc_store_cfg *cfg, dcpi_cc_store **out, dcp_plugin_err *err);

/* The session id S that rank 0 drew (never 0). */
uint64_t dcpi_cc_store_session(const dcpi_cc_store *s);

/* Sets key (klen bytes, 1..DCPI_CC_KEY_MAX) to the vlen bytes at val
 * (a later set replaces). DCP_OK, DCP_EINVAL, DCP_EPEER (the store's
 * connection closed), DCP_ETIMEDOUT, DCP_ENOMEM. */
int dcpi_cc_store_set(dcpi_cc_store *s, const void *key, size_t klen, const void *val,
                      size_t vlen, dcp_plugin_err *err);

/* Looks key up once (no waiting): 1 with *val (malloc'd, the caller frees;
 * non-NULL also for an empty value) and *vlen set, 0 when it is not set
 * yet, or a negative status as for set. */
int dcpi_cc_store_get(dcpi_cc_store *s, const void *key, size_t klen, unsigned char **val,
                      size_t *vlen, dcp_plugin_err *err);

/* Rank 0: stops serving and closes the listener and every connection
 * (call it once every rank is done with the store); others: closes the
 * connection. NULL is a no-op. */
void dcpi_cc_store_close(dcpi_cc_store *s);

#ifdef __cplusplus
}
#endif
#endif
