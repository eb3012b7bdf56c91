/*
 * dcp-coll-mpi — collectives over MPI.
 *
 * Communicator: a duplicate (MPI_Comm_idup) of *(MPI_Comm *)cfg->native, or
 * of MPI_COMM_WORLD when native is NULL, so that library traffic never
 * matches the application's messages. The duplicate has MPI_ERRORS_RETURN:
 * MPI errors become DCP_EIO with MPI_Error_string's text. MPI is initialised
 * (MPI_THREAD_MULTIPLE requested) only when nobody did yet; then the last
 * close finalises it, unless a communicator failed (see "Close" below).
 *
 * Deadlines: every operation is started in its nonblocking form and polled
 * with MPI_Testall, back to back for a while and then with a short backoff
 * (SPIN_NS below), until it completes or timeout_ms
 * passes (DCP_ETIMEDOUT). A started collective cannot be cancelled, so after
 * a timeout the communicator is unusable: later calls return DCP_EPEER.
 *
 * Caller memory: no function touches the caller's buffers after it returns,
 * whatever it returns. MPI never sees them: every call stages its data
 * through a bounce buffer owned by the communicator (at most "bounce=N"
 * bytes, default 64 MiB, one round at a time): a send copies the caller's
 * bytes in before the round starts, a receive copies them out once the
 * round has completed. A round that times out (or fails) is abandoned with
 * its requests, and the bounce buffer goes with it: a late peer's message
 * then lands in plugin memory. Abandoned rounds are kept until MPI reports
 * them complete, across close if need be (a process-wide list, tested again
 * at every open and close), and freed once MPI is finalised. Cost: one copy
 * of every byte moved, and a data volume above the bounce size moves in
 * successive rounds under the call's one deadline.
 *
 * Large buffers: MPI counts are int. Every message is cut into pieces of at
 * most min(max_msg, bounce) bytes (option "max_msg=N", default 1 GiB): a
 * round of bcast holds Ibcast pieces, one of allgather an Iallgather of an
 * equal piece of every rank's part (then scattered to rank i's place at
 * i*len), one of allreduce an Iallreduce of a slice of the values. gatherv
 * and scatterv go point to point (MPI_Isend/MPI_Irecv in pieces): only the
 * root knows every length, so the ranks could not agree on a split of
 * MPI_Igatherv's int displacements, while each pair of ranks cuts its own
 * stream into the same pieces (the root may pack the pieces of several
 * ranks into one round; a rank's pieces stay in order). Collective and
 * point-to-point traffic on one communicator never match each other, and
 * MPI's non-overtaking order keeps pieces of successive calls apart. The
 * ranks must agree on max_msg and bounce.
 *
 * Groups: group_bcast is a binomial tree over the group's members, point
 * to point on the communicator (tag TAG_GROUP), every wait under the call's
 * one deadline: round by round, a member receives a slice from its parent
 * into the bounce buffer, copies it out, and forwards the same bounce bytes
 * to its children. Not a sub-communicator per group:
 * MPI_Comm_create_group has no nonblocking form, so a group's first
 * broadcast would wait without a deadline for a member that never comes
 * (tests/integration: scenario.mpi.nohang.load_stall_group). Calls on
 * groups that share two ranks reach those ranks in the same order (the
 * collective contract), so the messages between them match in order.
 *
 * Close frees the communicator when nothing of it is pending (otherwise its
 * handle is left to MPI, and its abandoned rounds to the process-wide
 * list). MPI_Finalize is collective over the whole job and would wait
 * forever for a stalled peer, so the plugin finalises only at the last close
 * of a process where no communicator has ever failed: once one did, MPI
 * stays initialised, close returns at once, and it is up to the program to
 * exit (under mpirun a process that exits without MPI_Finalize ends the job
 * and mpirun kills the stalled rank) or to call MPI_Abort.
 *
 * Host id (the table's host_id, for read dedup): common/cc_host.h, computed
 * at open, the id the gloo and file collectives report too. Not MPI's node
 * numbering: MPI_Comm_split_type is collective with no deadline, and
 * neither it nor MPI_Get_processor_name (the host name) tells apart
 * network namespaces of one machine, between which traffic is network
 * traffic.
 */
#include <limits.h>
#include <sched.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cc_host.h"
#include "cc_opts.h"
#include "dcp_plugin.h"

#define DEFAULT_MAX_MSG (1u << 30)
#define DEFAULT_BOUNCE (64u << 20)
/* Polling a wait: MPI moves data only inside MPI_Testall (Open MPI's
 * shared-memory transport pushes a few 32 KiB fragments per call when the
 * kernel's single-copy path is off), so a wait that sleeps between polls
 * moves data at the pace of its sleeps: with sleeps growing to 1 ms, a
 * one-host broadcast ran at ~125 MiB/s and a resharded dcp-bench load
 * with read dedup at 0.08x the disk's read speed (0.45-0.63x spinning;
 * docs/benchmarks.md, "MPI waits"). So a wait first polls back to back
 * for SPIN_NS, yielding the CPU between polls (ranks may share cores),
 * then sleeps between polls, 2 us doubling up to POLL_MAX_NS, so a peer
 * that comes late still gets its transfer at a few hundred MiB/s while an
 * idle wait costs ~10,000 wake-ups a second. */
#define SPIN_NS 100000000LL     /* 100 ms */
#define POLL_MIN_NS 2000LL      /* 2 us */
#define POLL_MAX_NS 100000LL    /* 100 us */
#define TAG_GATHERV 0x4463
#define TAG_SCATTERV 0x4464
#define TAG_GROUP 0x4465
#define P2P "MPI_Isend/MPI_Irecv" /* what a point-to-point round waits for */

/* The requests of one round. Once abandoned (timed out or failed), it also
 * owns the bounce buffer they read from or write into, until MPI reports
 * every request complete. */
typedef struct batch {
  struct batch *next;
  unsigned char *bounce; /* owned once abandoned; NULL before */
  size_t n, cap;         /* requests started, room */
  MPI_Request req[];
} batch;

struct dcp_comm {
  MPI_Comm comm;
  int rank, size;
  int64_t timeout_ms;
  size_t max_msg;        /* the largest piece of one MPI call */
  size_t bounce_max;     /* the most bytes one round stages */
  unsigned char *bounce; /* the staging buffer (grown on demand) */
  size_t bounce_cap;
  int counted;           /* counted in g.open */
  int broken;            /* an operation failed or was abandoned */
  char why[160];         /* the first failure's message, for later refusals */
  batch *abandoned;      /* rounds that may still complete */
  uint64_t host;         /* host_id (cc_host.h) */
};

/* Process-wide state, guarded by mu: whether MPI is ours to finalise, how
 * many communicators are open, whether one ever failed, and the abandoned
 * rounds of closed communicators. */
static struct {
  pthread_mutex_t mu;
  int ours, open, poisoned;
  batch *graves;
} g = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, NULL};

/* An MPI error as DCP_EIO with MPI's own description. */
static int mpi_fail(dcp_plugin_err *err, const char *what, int mrc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(mrc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", mrc);
  return dcp_plugin_fail(err, DCP_EIO, "%s: %s", what, text);
}

/* Monotonic clock in nanoseconds. */
static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sleeps ns nanoseconds (once; an early wake-up only polls sooner). */
static void sleep_ns(int64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
  nanosleep(&ts, NULL);
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------------ */
/* Rounds: requests over the bounce buffer                                  */
/* ------------------------------------------------------------------------ */

/* Marks c broken (and the process poisoned: MPI_Finalize could now wait
 * forever), keeping the first failure's message (err's, when given) for the
 * refusals that follow. Returns code. */
static int broke(dcp_comm *c, int code, const dcp_plugin_err *err) {
  c->broken = 1;
  if (!c->why[0] && err) snprintf(c->why, sizeof c->why, "%.150s", err->msg); /* may cut */
  pthread_mutex_lock(&g.mu);
  g.poisoned = 1;
  pthread_mutex_unlock(&g.mu);
  return code;
}

/* A batch with room for cap requests (at least one), none started; NULL
 * with err set when out of memory. */
static batch *batch_new(size_t cap, dcp_plugin_err *err) {
  cap = cap ? cap : 1;
  batch *b = cap > (SIZE_MAX - sizeof *b) / sizeof(MPI_Request)
                 ? NULL : malloc(sizeof *b + cap * sizeof(MPI_Request));
  if (!b) {
    dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
    return NULL;
  }
  b->next = NULL;
  b->bounce = NULL;
  b->n = 0;
  b->cap = cap;
  return b;
}

/* The bounce buffer with room for n bytes (nothing is kept from an earlier
 * call); NULL with err set when out of memory. */
static unsigned char *bounce_get(dcp_comm *c, size_t n, dcp_plugin_err *err) {
  if (n <= c->bounce_cap && c->bounce) return c->bounce;
  free(c->bounce);
  c->bounce = malloc(n ? n : 1);
  c->bounce_cap = c->bounce ? n : 0;
  if (!c->bounce)
    dcp_plugin_fail(err, DCP_ENOMEM, "out of memory (%zu-byte bounce buffer)", n);
  return c->bounce;
}

/* Gives up on b's requests: b takes the bounce buffer they use (the
 * communicator gets a new one if it is ever used again, which it is not:
 * it is broken) and joins c's abandoned rounds. */
static void abandon(dcp_comm *c, batch *b) {
  b->bounce = c->bounce;
  c->bounce = NULL;
  c->bounce_cap = 0;
  b->next = c->abandoned;
  c->abandoned = b;
}

/* Waits for b's requests until deadline, then empties b for the next round.
 * mrc is the status of starting them: an error abandons the round (some
 * pieces may be in flight: the peers are now out of step). On a timeout or
 * error the round is abandoned: b then belongs to c and *bp becomes NULL. */
static int round_wait(dcp_comm *c, batch **bp, int mrc, int64_t deadline, const char *what,
                      dcp_plugin_err *err) {
  batch *b = *bp;
  int64_t backoff = POLL_MIN_NS, spin_until = now_ns() + SPIN_NS;
  int rc = DCP_OK;
  for (;;) {
    int done = 0;
    if (mrc == MPI_SUCCESS) mrc = MPI_Testall((int)b->n, b->req, &done, MPI_STATUSES_IGNORE);
    if (mrc != MPI_SUCCESS) {
      rc = broke(c, mpi_fail(err, what, mrc), err);
      break;
    }
    if (done) {
      b->n = 0;
      return DCP_OK;
    }
    int64_t left = deadline - now_ns();
    if (left <= 0) {
      rc = broke(c,
                 dcp_plugin_fail(err, DCP_ETIMEDOUT,
                                 "%s timed out after %lld ms (a peer did not join); the "
                                 "communicator is unusable from now on",
                                 what, (long long)c->timeout_ms),
                 err);
      break;
    }
    if (now_ns() < spin_until) {
      sched_yield();
      continue;
    }
    sleep_ns(backoff < left ? backoff : left);
    if (backoff < POLL_MAX_NS) backoff *= 2;
  }
  abandon(c, b);
  *bp = NULL;
  return rc;
}

/* Deadline timeout_ms from now. */
static int64_t deadline_of(const dcp_comm *c) {
  return now_ns() + c->timeout_ms * 1000000LL;
}

/* Refuses calls on a NULL or broken communicator. */
static int check_usable(const dcp_comm *c, dcp_plugin_err *err) {
  if (!c) return dcp_plugin_fail(err, DCP_EINVAL, "NULL communicator");
  if (c->broken)
    return dcp_plugin_fail(err, DCP_EPEER,
                           "communicator unusable after an earlier failure (%s)",
                           c->why[0] ? c->why : "timeout or error");
  return DCP_OK;
}

/* Number of pieces of at most max bytes in len bytes. */
static size_t pieces(size_t len, size_t max) {
  return len / max + (len % max != 0);
}

/* The largest piece of one MPI call: max_msg, and never more than a round. */
static size_t piece_of(const dcp_comm *c) {
  return min_sz(c->max_msg, c->bounce_max);
}

/* Starts point-to-point pieces (of piece_of(c)) of the len bytes at buf
 * to or from peer, appending their requests to b. */
static int post_pieces(dcp_comm *c, batch *b, int is_send, unsigned char *buf, size_t len,
                       int peer, int tag) {
  size_t p = piece_of(c);
  for (size_t off = 0; off < len; off += p) {
    int k = (int)min_sz(p, len - off);
    int mrc = is_send ? MPI_Isend(buf + off, k, MPI_BYTE, peer, tag, c->comm, &b->req[b->n])
                      : MPI_Irecv(buf + off, k, MPI_BYTE, peer, tag, c->comm, &b->req[b->n]);
    if (mrc != MPI_SUCCESS) return mrc;
    b->n++;
  }
  return MPI_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */

/* Barrier: MPI_Ibarrier (no data, so no bounce buffer). */
static int m_barrier(dcp_comm *c, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  batch *b = batch_new(1, err);
  if (!b) return DCP_ENOMEM;
  int mrc = MPI_Ibarrier(c->comm, &b->req[b->n]);
  if (mrc == MPI_SUCCESS) b->n++;
  rc = round_wait(c, &b, mrc, deadline_of(c), "MPI_Ibarrier", err);
  free(b);
  return rc;
}

/* Bcast: rounds of up to bounce_max bytes, each Ibcast pieces of the
 * bounce buffer; the root copies in, the others copy out. */
static int m_bcast(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (root < 0 || root >= c->size)
    return dcp_plugin_fail(err, DCP_EINVAL, "bad root %d", (int)root);
  if (!buf && len) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (len == 0) return DCP_OK;
  size_t step = min_sz(len, c->bounce_max), p = piece_of(c);
  batch *b = batch_new(pieces(step, p), err);
  unsigned char *bb = b ? bounce_get(c, step, err) : NULL;
  if (!bb) {
    free(b);
    return DCP_ENOMEM;
  }
  int64_t deadline = deadline_of(c);
  for (size_t off = 0; off < len && rc == DCP_OK; off += step) {
    size_t n = min_sz(step, len - off);
    int mrc = MPI_SUCCESS;
    if (c->rank == root) memcpy(bb, (char *)buf + off, n);
    for (size_t at = 0; at < n && mrc == MPI_SUCCESS; at += p) {
      mrc = MPI_Ibcast(bb + at, (int)min_sz(p, n - at), MPI_BYTE, root, c->comm, &b->req[b->n]);
      if (mrc == MPI_SUCCESS) b->n++;
    }
    rc = round_wait(c, &b, mrc, deadline, "MPI_Ibcast", err);
    if (rc == DCP_OK && c->rank != root) memcpy((char *)buf + off, bb, n);
  }
  free(b);
  return rc;
}

/* Allgather: rounds of one Iallgather (in place in the bounce buffer) of k
 * bytes of every rank's part, then rank i's k bytes go to i*len + off. */
static int m_allgather(dcp_comm *c, const void *send, size_t len, void *recv,
                       dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (len && (!send || !recv)) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (len > (size_t)PTRDIFF_MAX / (size_t)c->size)
    return dcp_plugin_fail(err, DCP_EOVERFLOW, "allgather size overflows");
  if (len == 0) return DCP_OK;
  size_t w = (size_t)c->size, k = min_sz(min_sz(len, c->max_msg), c->bounce_max / w);
  k = k ? k : 1; /* a world larger than the bounce size: one byte per rank */
  batch *b = batch_new(1, err);
  unsigned char *bb = b ? bounce_get(c, k * w, err) : NULL;
  if (!bb) {
    free(b);
    return DCP_ENOMEM;
  }
  int64_t deadline = deadline_of(c);
  for (size_t off = 0; off < len && rc == DCP_OK; off += k) {
    size_t n = min_sz(k, len - off);
    memcpy(bb + (size_t)c->rank * n, (const char *)send + off, n);
    int mrc = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, bb, (int)n, MPI_BYTE, c->comm,
                             &b->req[0]);
    if (mrc == MPI_SUCCESS) b->n = 1;
    rc = round_wait(c, &b, mrc, deadline, "MPI_Iallgather", err);
    for (size_t r = 0; rc == DCP_OK && r < w; r++)
      memcpy((char *)recv + r * len + off, bb + r * n, n);
  }
  free(b);
  return rc;
}

/* One point-to-point stream of a gatherv, scatterv or group_bcast: len
 * bytes of caller memory at user, to or from each of npeers peers (the
 * same bytes to each; a receive has one peer). */
typedef struct stream {
  unsigned char *user;
  size_t len;
  const int *peers;
  size_t npeers;
  int one; /* the peer, when peers points here */
} stream;

/* Where the next piece of a stream list starts. */
typedef struct cursor {
  size_t si, off;
} cursor;

/* Copies the received pieces from `from` up to `to` out of the bounce
 * buffer into the callers' buffers, in the order they were packed. */
static void copy_out(const dcp_comm *c, const stream *s, cursor from, cursor to,
                     const unsigned char *bb) {
  size_t p = piece_of(c), used = 0;
  while (from.si < to.si || (from.si == to.si && from.off < to.off)) {
    if (from.off >= s[from.si].len) {
      from.si++, from.off = 0;
      continue;
    }
    size_t k = min_sz(p, s[from.si].len - from.off);
    memcpy(s[from.si].user + from.off, bb + used, k);
    used += k;
    from.off += k;
  }
}

/* Packs the next pieces of the streams from *cur into the bounce buffer
 * (copying them in for a send) and starts them, until the round is full or
 * the streams end; advances *cur. Returns the MPI status of the starts. */
static int pack_round(dcp_comm *c, batch *b, int is_send, const stream *s, size_t ns,
                      cursor *cur, unsigned char *bb, int tag) {
  size_t p = piece_of(c), used = 0;
  int mrc = MPI_SUCCESS;
  while (cur->si < ns && mrc == MPI_SUCCESS) {
    const stream *st = &s[cur->si];
    if (cur->off >= st->len) {
      cur->si++, cur->off = 0;
      continue;
    }
    size_t k = min_sz(p, st->len - cur->off);
    if (used + k > c->bounce_max) break; /* pieces are never split: both sides cut alike */
    if (is_send) memcpy(bb + used, st->user + cur->off, k);
    for (size_t i = 0; i < st->npeers && mrc == MPI_SUCCESS; i++)
      mrc = post_pieces(c, b, is_send, bb + used, k, st->peers[i], tag);
    used += k;
    cur->off += k;
  }
  return mrc;
}

/* Moves the streams' bytes in rounds through the bounce buffer (all sends
 * or all receives) under one deadline. */
static int p2p_rounds(dcp_comm *c, int is_send, const stream *s, size_t ns, int tag,
                      int64_t deadline, const char *what, dcp_plugin_err *err) {
  size_t total = 0, nreq = 0, p = piece_of(c);
  for (size_t i = 0; i < ns; i++) {
    total += s[i].len; /* the callers' buffers exist: no overflow */
    nreq += pieces(s[i].len, p) * s[i].npeers;
  }
  if (total == 0) return DCP_OK;
  batch *b = batch_new(nreq, err);
  unsigned char *bb = b ? bounce_get(c, min_sz(total, c->bounce_max), err) : NULL;
  if (!bb) {
    free(b);
    return DCP_ENOMEM;
  }
  cursor cur = {0, 0};
  int rc = DCP_OK;
  while (cur.si < ns && rc == DCP_OK) {
    cursor from = cur;
    int mrc = pack_round(c, b, is_send, s, ns, &cur, bb, tag);
    rc = round_wait(c, &b, mrc, deadline, what, err);
    if (rc == DCP_OK && !is_send) copy_out(c, s, from, cur, bb);
  }
  free(b);
  return rc;
}

/* A single-peer stream. */
static stream stream_one(unsigned char *user, size_t len, int peer) {
  stream s = {.user = user, .len = len, .npeers = 1, .one = peer};
  return s;
}

/* Root side of gatherv/scatterv: a stream with every other rank of lens[i]
 * bytes at buf + offset; its own part is copied. */
static int root_exchange(dcp_comm *c, int is_send, unsigned char *buf, const size_t *lens,
                         unsigned char *own, int tag, const char *what, dcp_plugin_err *err) {
  size_t off = 0;
  for (int i = 0; i < c->size; i++) {
    if (lens[i] > SIZE_MAX - off)
      return dcp_plugin_fail(err, DCP_EOVERFLOW, "lengths overflow");
    off += lens[i];
  }
  stream *s = malloc((size_t)c->size * sizeof *s);
  if (!s) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  size_t ns = 0;
  off = 0;
  for (int i = 0; i < c->size; off += lens[i++]) {
    if (i != c->rank) {
      s[ns] = stream_one(buf + off, lens[i], i);
      s[ns].peers = &s[ns].one;
      ns++;
    } else if (lens[i]) {
      if (is_send) memcpy(own, buf + off, lens[i]);
      else memcpy(buf + off, own, lens[i]);
    }
  }
  int rc = p2p_rounds(c, is_send, s, ns, tag, deadline_of(c), what, err);
  free(s);
  return rc;
}

/* Non-root side of gatherv/scatterv: one stream of len bytes with root. */
static int leaf_exchange(dcp_comm *c, int is_send, unsigned char *buf, size_t len, int root,
                         int tag, const char *what, dcp_plugin_err *err) {
  stream s = stream_one(buf, len, root);
  s.peers = &s.one;
  return p2p_rounds(c, is_send, &s, 1, tag, deadline_of(c), what, err);
}

/* Gatherv: point-to-point pieces to the root (see the header comment). */
static int m_gatherv(dcp_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                     int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (root < 0 || root >= c->size)
    return dcp_plugin_fail(err, DCP_EINVAL, "bad root %d", (int)root);
  if (len && !send) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  unsigned char *mine = (unsigned char *)(uintptr_t)send; /* only ever read */
  if (c->rank != root) return leaf_exchange(c, 1, mine, len, root, TAG_GATHERV, P2P, err);
  if (!lens || lens[root] != len || (!recv && len))
    return dcp_plugin_fail(err, DCP_EINVAL, "gatherv lens/recv invalid at root");
  return root_exchange(c, 0, recv, lens, mine, TAG_GATHERV, P2P, err);
}

/* Scatterv: point-to-point pieces from the root. */
static int m_scatterv(dcp_comm *c, const void *send, const size_t *lens, void *recv, size_t len,
                      int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (root < 0 || root >= c->size)
    return dcp_plugin_fail(err, DCP_EINVAL, "bad root %d", (int)root);
  if (len && !recv) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (c->rank != root) return leaf_exchange(c, 0, recv, len, root, TAG_SCATTERV, P2P, err);
  if (!lens || lens[root] != len)
    return dcp_plugin_fail(err, DCP_EINVAL, "scatterv lens invalid");
  size_t total = 0;
  for (int i = 0; i < c->size; i++) total += lens[i] > SIZE_MAX - total ? SIZE_MAX : lens[i];
  if (total && !send) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  unsigned char *all = (unsigned char *)(uintptr_t)send; /* only ever read */
  return root_exchange(c, 1, all, lens, recv, TAG_SCATTERV, P2P, err);
}

/* Allreduce: rounds of one Iallreduce in place in the bounce buffer, at
 * most min(max_msg, bounce) / 8 values each. */
static int m_allreduce(dcp_comm *c, int64_t *vals, size_t n, uint32_t op, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  MPI_Op mop = op == DCP_REDUCE_MIN ? MPI_MIN : op == DCP_REDUCE_MAX ? MPI_MAX : MPI_SUM;
  if (op < DCP_REDUCE_MIN || op > DCP_REDUCE_SUM)
    return dcp_plugin_fail(err, DCP_EINVAL, "unknown reduce op %u", op);
  if (n && !vals) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (n == 0) return DCP_OK;
  size_t per = piece_of(c) / 8 ? piece_of(c) / 8 : 1, step = min_sz(n, per);
  batch *b = batch_new(1, err);
  unsigned char *bb = b ? bounce_get(c, step * 8, err) : NULL;
  if (!bb) {
    free(b);
    return DCP_ENOMEM;
  }
  int64_t deadline = deadline_of(c);
  for (size_t off = 0; off < n && rc == DCP_OK; off += step) {
    size_t k = min_sz(step, n - off);
    memcpy(bb, vals + off, k * 8);
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, bb, (int)k, MPI_INT64_T, mop, c->comm, &b->req[0]);
    if (mrc == MPI_SUCCESS) b->n = 1;
    rc = round_wait(c, &b, mrc, deadline, "MPI_Iallreduce", err);
    if (rc == DCP_OK) memcpy(vals + off, bb, k * 8);
  }
  free(b);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Groups                                                                   */
/* ------------------------------------------------------------------------ */

/* The relay of group_bcast: round by round, the parent's slice arrives in
 * the bounce buffer (or the root copies its own in), is copied out, and the
 * same bounce bytes go to every child. parent < 0 at the root. */
static int group_relay(dcp_comm *c, unsigned char *buf, size_t len, int parent,
                       const int *children, size_t nchildren, dcp_plugin_err *err) {
  size_t step = min_sz(len, c->bounce_max), per = pieces(step, piece_of(c));
  batch *b = batch_new(per * (nchildren > 1 ? nchildren : 1), err);
  unsigned char *bb = b ? bounce_get(c, step, err) : NULL;
  if (!bb) {
    free(b);
    return DCP_ENOMEM;
  }
  int64_t deadline = deadline_of(c);
  int rc = DCP_OK;
  for (size_t off = 0; off < len && rc == DCP_OK; off += step) {
    size_t n = min_sz(step, len - off);
    if (parent < 0) {
      memcpy(bb, buf + off, n);
    } else {
      rc = round_wait(c, &b, post_pieces(c, b, 0, bb, n, parent, TAG_GROUP), deadline,
                      P2P, err);
      if (rc) break;
      memcpy(buf + off, bb, n);
    }
    int mrc = MPI_SUCCESS;
    for (size_t i = 0; i < nchildren && mrc == MPI_SUCCESS; i++)
      mrc = post_pieces(c, b, 1, bb, n, children[i], TAG_GROUP);
    rc = round_wait(c, &b, mrc, deadline, P2P, err);
  }
  free(b);
  return rc;
}

/* Checks a group (ascending ranks in range containing this rank and root)
 * and finds this rank's and root's positions in it. */
static int group_check(const dcp_comm *c, const int32_t *ranks, size_t n, int32_t root,
                       size_t *self, size_t *sub_root, dcp_plugin_err *err) {
  if (!ranks || n == 0 || n > (size_t)c->size)
    return dcp_plugin_fail(err, DCP_EINVAL, "bad group");
  *self = *sub_root = n;
  for (size_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->size || (i && ranks[i] <= ranks[i - 1]))
      return dcp_plugin_fail(err, DCP_EINVAL, "group ranks must ascend within [0, %d)",
                             c->size);
    if (ranks[i] == c->rank) *self = i;
    if (ranks[i] == root) *sub_root = i;
  }
  if (*self == n || *sub_root == n)
    return dcp_plugin_fail(err, DCP_EINVAL, "group lacks this rank or root");
  return DCP_OK;
}

/* group_bcast: the binomial tree of the header comment. In positions
 * relative to the root (rel), a member's parent is rel with its lowest set
 * bit cleared and its children are rel + 2^k for every 2^k below that bit
 * (every 2^k for the root) that stays within the group. */
static int m_group_bcast(dcp_comm *c, const int32_t *ranks, size_t n, void *buf, size_t len,
                         int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  size_t self = 0, sub_root = 0;
  if ((rc = group_check(c, ranks, n, root, &self, &sub_root, err))) return rc;
  if (!buf && len) return dcp_plugin_fail(err, DCP_EINVAL, "NULL buffer");
  if (n == 1 || len == 0) return DCP_OK;
  size_t rel = (self + n - sub_root) % n;
  int parent = rel ? ranks[((rel & (rel - 1)) + sub_root) % n] : -1;
  int children[64];
  size_t nchildren = 0;
  for (size_t bit = 1; bit < n && !(rel & bit) && rel + bit < n; bit <<= 1)
    children[nchildren++] = ranks[(rel + bit + sub_root) % n];
  return group_relay(c, buf, len, parent, children, nchildren, err);
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                           */
/* ------------------------------------------------------------------------ */

/* Parses "max_msg=N" (1 <= N <= INT_MAX) and "bounce=N" (bytes staged per
 * round, N >= 1) with the collectives' common parser (common/cc_opts.h);
 * anything else is DCP_EINVAL. */
static int parse_options(dcp_comm *c, const char *opts, dcp_plugin_err *err) {
  uint64_t max_msg = DEFAULT_MAX_MSG, bounce = DEFAULT_BOUNCE;
  const dcpi_cc_opt known[] = {
      {.key = "max_msg", .kind = DCPI_CC_OPT_SIZE, .lo = 1, .hi = INT_MAX, .out = &max_msg},
      {.key = "bounce", .kind = DCPI_CC_OPT_SIZE, .lo = 1, .hi = SIZE_MAX / 4, .out = &bounce},
  };
  int rc = dcpi_cc_parse_options(opts, known, sizeof known / sizeof *known, NULL, err);
  c->max_msg = (size_t)max_msg;
  c->bounce_max = (size_t)bounce;
  return rc;
}

static void reap(batch **list);

/* Initialises MPI unless someone already did (then it is not ours), and
 * counts c among the open communicators. Frees the abandoned rounds of
 * closed communicators that have completed since. */
static int ensure_mpi(dcp_comm *c, dcp_plugin_err *err) {
  int init = 0, fin = 0, rc = DCP_OK;
  pthread_mutex_lock(&g.mu);
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) {
    rc = dcp_plugin_fail(err, DCP_EIO, "MPI is already finalised");
  } else if (!init) {
    int provided = 0;
    int mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (mrc != MPI_SUCCESS) rc = mpi_fail(err, "MPI_Init_thread", mrc);
    else g.ours = 1;
  } else {
    reap(&g.graves);
  }
  if (rc == DCP_OK) {
    g.open++;
    c->counted = 1;
  }
  pthread_mutex_unlock(&g.mu);
  return rc;
}

/* Duplicates the base communicator. cfg->rank and world_size are ignored:
 * MPI knows them, and callers leave the context's defaults there. */
static int attach(dcp_comm *c, const dcp_coll_config *cfg, dcp_plugin_err *err) {
  int has_native = DCP_HAS_FIELD(cfg, dcp_coll_config, native);
  MPI_Comm base = has_native && cfg->native ? *(MPI_Comm *)cfg->native : MPI_COMM_WORLD;
  int rank = 0, size = 0;
  if (base == MPI_COMM_NULL)
    return dcp_plugin_fail(err, DCP_EINVAL, "native is MPI_COMM_NULL");
  MPI_Comm_rank(base, &rank);
  MPI_Comm_size(base, &size);
  c->rank = rank;
  c->size = size;
  batch *b = batch_new(1, err);
  if (!b) return DCP_ENOMEM;
  int mrc = MPI_Comm_idup(base, &c->comm, &b->req[0]);
  if (mrc != MPI_SUCCESS) {
    free(b);
    c->comm = MPI_COMM_NULL;
    return mpi_fail(err, "MPI_Comm_idup", mrc);
  }
  b->n = 1;
  int rc = round_wait(c, &b, MPI_SUCCESS, deadline_of(c), "MPI_Comm_idup", err);
  free(b);
  if (rc == DCP_OK) MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  return rc;
}

static void m_close(dcp_comm *c);

/* Opens the communicator (collective over the base communicator). */
static int m_open(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err) {
  if (!cfg || !out) return dcp_plugin_fail(err, DCP_EINVAL, "NULL argument");
  *out = NULL;
  if (!DCP_HAS_FIELD(cfg, dcp_coll_config, timeout_ms))
    return dcp_plugin_fail(err, DCP_EINVAL, "config too small");
  if (cfg->timeout_ms <= 0 || cfg->timeout_ms > INT64_MAX / 1000000)
    return dcp_plugin_fail(err, DCP_EINVAL, "timeout_ms must be > 0");
  dcp_comm *c = calloc(1, sizeof *c);
  if (!c) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  c->comm = MPI_COMM_NULL;
  c->timeout_ms = cfg->timeout_ms;
  c->host = dcpi_cc_host_id();
  int has_opts = DCP_HAS_FIELD(cfg, dcp_coll_config, options);
  int rc = parse_options(c, has_opts ? cfg->options : NULL, err);
  if (!rc) rc = ensure_mpi(c, err);
  if (!rc) rc = attach(c, cfg, err);
  if (rc) {
    m_close(c);
    return rc;
  }
  *out = c;
  return DCP_OK;
}

/* Frees the batches of *list whose requests have all completed; keeps the
 * others (a test that fails keeps its batch too). */
static void reap(batch **list) {
  while (*list) {
    batch *b = *list;
    int done = 0;
    if (MPI_Testall((int)b->n, b->req, &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS && done) {
      *list = b->next;
      free(b->bounce);
      free(b);
    } else {
      list = &b->next;
    }
  }
}

/* Frees every batch of list (MPI is finalised: nothing writes any more). */
static void free_all(batch *list) {
  while (list) {
    batch *next = list->next;
    free(list->bounce);
    free(list);
    list = next;
  }
}

/* Appends list to the process-wide graves (g.mu held). */
static void bury(batch *list) {
  batch **end = &g.graves;
  while (*end) end = &(*end)->next;
  *end = list;
}

/* Frees the communicator, or leaves it and its abandoned rounds pending
 * (see "Close" in the header comment); finalises MPI at the last close
 * when the plugin initialised it and nothing ever failed. Not collective
 * unless it finalises MPI. */
static void m_close(dcp_comm *c) {
  if (!c) return;
  int init = 0, fin = 0;
  pthread_mutex_lock(&g.mu);
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    reap(&c->abandoned);
    reap(&g.graves);
    if (c->abandoned) bury(c->abandoned); /* a late peer may still complete them */
    else if (c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
    c->abandoned = NULL;
  }
  free_all(c->abandoned);
  if (fin) {
    free_all(g.graves);
    g.graves = NULL;
  }
  int last = c->counted && --g.open == 0;
  if (last && g.ours && !g.poisoned && init && !fin) {
    free_all(g.graves); /* nothing pending: poisoned otherwise */
    g.graves = NULL;
    MPI_Finalize();
  }
  pthread_mutex_unlock(&g.mu);
  free(c->bounce);
  free(c);
}

/* Accessors. */
static int32_t m_rank(const dcp_comm *c) { return c ? c->rank : -1; }
static int32_t m_size(const dcp_comm *c) { return c ? c->size : 0; }
static uint64_t m_host_id(const dcp_comm *c) { return c ? c->host : 0; }

static const dcp_coll_plugin mpi_plugin = {
    .abi_version = DCP_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(dcp_coll_plugin),
    .name = "mpi",
    .caps = DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS,
    .open = m_open,
    .close = m_close,
    .rank = m_rank,
    .size = m_size,
    .barrier = m_barrier,
    .bcast = m_bcast,
    .allgather = m_allgather,
    .gatherv = m_gatherv,
    .scatterv = m_scatterv,
    .allreduce_i64 = m_allreduce,
    .group_bcast = m_group_bcast,
    .host_id = m_host_id,
};

/* The plugin's only exported symbol. */
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);
const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_COLL ? &mpi_plugin : NULL;
}
