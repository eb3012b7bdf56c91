/* cc_handshake.h — the rendezvous handshake of the collectives that meet in
 * a shared directory (file, gloo). It agrees on a fresh session id S among
 * the ranks of one run, so that files of an earlier, crashed run of the
 * same job (same names) are never taken for this run's:
 *
 *   1. rank r > 0 draws a random nonce n_r and writes "<prefix>hello.<r>"
 *      = {n_r, world} (dcpi_cc_hs_join);
 *   2. rank 0 waits for the hello of every rank of this world size
 *      (dcpi_cc_hs_collect; a hello of another world size is someone
 *      else's: it waits for the right one), then writes "<prefix>session" =
 *      {S, world, n_1 .. n_{W-1}} (dcpi_cc_hs_publish);
 *   3. rank r accepts only a session file that echoes its own n_r (a stale
 *      one is ignored until it is replaced), then removes its hello and
 *      acknowledges in the plugin's own way (file: its round-0 file; gloo:
 *      an ack file in the session directory);
 *   4. while rank 0 waits for the acks, it re-reads the hellos of the ranks
 *      that have not acked and rewrites the session file when one changed
 *      (it had read a stale hello before the fresh one replaced it:
 *      dcpi_cc_hs_rescan); once every rank has acked it removes the
 *      session file (dcpi_cc_hs_retire).
 *
 * Files are records of cc_codec.h, written and read as cc_file.h says
 * (never through a link). Every wait ends at the caller's deadline with
 * DCP_ETIMEDOUT, whose message names the missing ranks, a world size
 * another rank's file claims, and a file that is a link or not a regular
 * file. Messages name no plugin (the caller adds its own prefix).
 * Internal (hidden symbols). */
#ifndef DCP_COLL_COMMON_CC_HANDSHAKE_H
#define DCP_COLL_COMMON_CC_HANDSHAKE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds on the monotonic clock (deadlines do not move with the
 * wall clock). */
int64_t dcpi_cc_now_ns(void);
/* Sleeps ns nanoseconds (restarting after signals). */
void dcpi_cc_sleep_ns(int64_t ns);

/* One rank's side of the handshake. Set the fields, then call
 * dcpi_cc_hs_init; dcpi_cc_hs_free releases what init allocated. */
typedef struct dcpi_cc_hs {
  const char *dir;     /* the rendezvous directory */
  const char *prefix;  /* every name starts with it: "<job>." or "<job>.gloo." */
  int32_t rank, world;
  int64_t deadline_ns; /* dcpi_cc_now_ns() + the open's timeout */
  int64_t timeout_ms;  /* the open's timeout, for messages */
  /* set by the handshake */
  uint64_t session;    /* rank 0: drawn at init; others: learnt by join */
  uint64_t nonce;      /* rank > 0: its hello's */
  uint64_t *nonces;    /* rank 0: every rank's hello nonce (world entries) */
  unsigned char *buf;  /* rank 0: a record of the session's size */
  size_t buf_len;
} dcpi_cc_hs;

/* Checks the fields and allocates rank 0's tables: DCP_OK, DCP_EINVAL (a
 * world, rank or name out of range) or DCP_ENOMEM. */
int dcpi_cc_hs_init(dcpi_cc_hs *h, dcp_plugin_err *err);
void dcpi_cc_hs_free(dcpi_cc_hs *h);

/* Rank 0, step 2: waits for every hello of this world. */
int dcpi_cc_hs_collect(dcpi_cc_hs *h, dcp_plugin_err *err);
/* Rank 0, step 2: writes the session file. */
int dcpi_cc_hs_publish(dcpi_cc_hs *h, dcp_plugin_err *err);
/* Rank 0, step 4, while it waits for acks: acked[r] (world entries) is
 * nonzero for the ranks that have acked. Rewrites the session file when a
 * hello of a rank not yet acked changed. */
int dcpi_cc_hs_rescan(dcpi_cc_hs *h, const unsigned char *acked, dcp_plugin_err *err);
/* Rank 0, step 4: removes the session file (also after a failure). */
void dcpi_cc_hs_retire(const dcpi_cc_hs *h);

/* Rank r > 0, steps 1 and 3: says hello, waits for a session that echoes
 * its nonce (h->session), and removes its hello whatever happens. */
int dcpi_cc_hs_join(dcpi_cc_hs *h, dcp_plugin_err *err);

#ifdef __cplusplus
}
#endif
#endif
