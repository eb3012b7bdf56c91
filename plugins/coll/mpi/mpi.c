/*
 * dcp-coll-mpi — collectives over MPI.
 *
 * Communicator: a duplicate (MPI_Comm_idup) of *(MPI_Comm *)cfg->native, or
 * of MPI_COMM_WORLD when native is NULL, so that library traffic never
 * matches the application's messages. The duplicate has MPI_ERRORS_RETURN:
 * MPI errors become DCP_EIO with MPI_Error_string's text. MPI is initialised
 * (MPI_THREAD_MULTIPLE requested) only when nobody did yet, and then
 * finalised on close.
 *
 * Deadlines: every operation is started in its nonblocking form and polled
 * with MPI_Testall and a short backoff until it completes or timeout_ms
 * passes (DCP_ETIMEDOUT). A started collective cannot be cancelled, so after
 * a timeout the communicator is unusable: later calls return DCP_EPEER, and
 * close frees it only if the abandoned requests have completed meanwhile
 * (otherwise it is leaked, and MPI is not finalised, which would hang).
 *
 * Large buffers: MPI counts and displacements are int. Every message is cut
 * into pieces of at most max_msg bytes (option "max_msg=N", default 1 GiB):
 * several Ibcast/Iallreduce calls, allgather pieces received through a
 * datatype resized to the per-rank stride (MPI_Aint extent). gatherv and
 * scatterv go point to point (MPI_Isend/MPI_Irecv, pieces of max_msg): only
 * the root knows every length, so the ranks could not agree on a split of
 * MPI_Igatherv's int displacements, while each pair of ranks can agree on
 * its own pieces. Collective and point-to-point traffic on one communicator
 * never match each other, and MPI's non-overtaking order keeps pieces of
 * successive calls apart.
 *
 * Groups: group_bcast is a binomial tree over the group's members, point
 * to point on the communicator (tag TAG_GROUP, pieces of max_msg), every
 * wait under the call's one deadline: a member receives from its parent,
 * then sends to its children. Not a sub-communicator per group:
 * MPI_Comm_create_group has no nonblocking form, so a group's first
 * broadcast would wait without a deadline for a member that never comes
 * (tests/integration: scenario.mpi.nohang.load_stall_group). Calls on
 * groups that share two ranks reach those ranks in the same order (the
 * collective contract), so the messages between them match in order.
 */
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcp_plugin.h"

#define DEFAULT_MAX_MSG (1u << 30)
#define POLL_MIN_NS 2000LL      /* 2 us */
#define POLL_MAX_NS 1000000LL   /* 1 ms */
#define TAG_GATHERV 0x4463
#define TAG_SCATTERV 0x4464
#define TAG_GROUP 0x4465

struct dcp_comm {
  MPI_Comm comm;
  int rank, size;
  int64_t timeout_ms;
  size_t max_msg;
  int we_initialized; /* MPI_Init_thread was ours: finalise on close */
  int broken;         /* an operation was abandoned */
  char why[160];      /* the first failure's message, for later refusals */
  int lost;           /* abandoned requests we could not keep track of */
  MPI_Request *pending; /* requests abandoned by a timeout */
  size_t npending;
};

/* Writes a formatted reason into err and returns code. */
static int fail(dcp_plugin_err *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* An MPI error as DCP_EIO with MPI's own description. */
static int mpi_fail(dcp_plugin_err *err, const char *what, int mrc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(mrc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", mrc);
  return fail(err, DCP_EIO, "mpi coll: %s: %s", what, text);
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

/* Marks c broken, keeping the first failure's message (err's, when given)
 * for the refusals that follow. Returns code. */
static int broke(dcp_comm *c, int code, const dcp_plugin_err *err) {
  c->broken = 1;
  if (!c->why[0] && err) snprintf(c->why, sizeof c->why, "%.150s", err->msg); /* may cut */
  return code;
}

/* Keeps requests abandoned by a timeout so close can tell whether the
 * communicator may still be freed. */
static void abandon(dcp_comm *c, MPI_Request *reqs, size_t n) {
  c->broken = 1;
  MPI_Request *p = realloc(c->pending, (c->npending + n) * sizeof *p);
  if (!p) {
    c->lost = 1; /* then close leaks the communicator, which is safe */
    return;
  }
  memcpy(p + c->npending, reqs, n * sizeof *p);
  c->pending = p;
  c->npending += n;
}

/* Polls reqs[0..n) until all complete or the deadline passes. */
static int wait_reqs(dcp_comm *c, MPI_Request *reqs, size_t n, int64_t deadline, const char *what,
                     dcp_plugin_err *err) {
  int64_t backoff = POLL_MIN_NS;
  for (;;) {
    int done = 0;
    int mrc = MPI_Testall((int)n, reqs, &done, MPI_STATUSES_IGNORE);
    if (mrc != MPI_SUCCESS) return broke(c, mpi_fail(err, what, mrc), err);
    if (done) return DCP_OK;
    int64_t left = deadline - now_ns();
    if (left <= 0) {
      abandon(c, reqs, n);
      return broke(c,
                   fail(err, DCP_ETIMEDOUT,
                        "mpi coll: %s timed out after %lld ms (a peer did not join); the "
                        "communicator is unusable from now on", what, (long long)c->timeout_ms),
                   err);
    }
    sleep_ns(backoff < left ? backoff : left);
    if (backoff < POLL_MAX_NS) backoff *= 2;
  }
}

/* Deadline timeout_ms from now. */
static int64_t deadline_of(const dcp_comm *c) {
  return now_ns() + c->timeout_ms * 1000000LL;
}

/* Refuses calls on a NULL or broken communicator. */
static int check_usable(const dcp_comm *c, dcp_plugin_err *err) {
  if (!c) return fail(err, DCP_EINVAL, "mpi coll: NULL communicator");
  if (c->broken)
    return fail(err, DCP_EPEER, "mpi coll: communicator unusable after an earlier failure (%s)",
                c->why[0] ? c->why : "timeout or error");
  return DCP_OK;
}

/* Number of pieces of at most max bytes in len bytes. */
static size_t pieces(size_t len, size_t max) {
  return len / max + (len % max != 0);
}

/* A request array of n entries (at least one), all MPI_REQUEST_NULL. */
static MPI_Request *reqs_new(size_t n, dcp_plugin_err *err) {
  MPI_Request *r = malloc((n ? n : 1) * sizeof *r);
  if (!r) {
    fail(err, DCP_ENOMEM, "mpi coll: out of memory");
    return NULL;
  }
  for (size_t i = 0; i < (n ? n : 1); i++) r[i] = MPI_REQUEST_NULL;
  return r;
}

/* Waits for reqs[0..started) after starting them, until deadline; a start
 * error (mrc) wins. Frees reqs. */
static int finish_by(dcp_comm *c, MPI_Request *reqs, size_t started, int mrc, int64_t deadline,
                     const char *what, dcp_plugin_err *err) {
  int rc;
  if (mrc != MPI_SUCCESS) {
    abandon(c, reqs, started); /* some pieces may be in flight: the peers are now out of step */
    rc = broke(c, mpi_fail(err, what, mrc), err);
  } else {
    rc = wait_reqs(c, reqs, started, deadline, what, err);
  }
  free(reqs);
  return rc;
}

/* finish_by with a deadline timeout_ms from now. */
static int finish(dcp_comm *c, MPI_Request *reqs, size_t started, int mrc, const char *what,
                  dcp_plugin_err *err) {
  return finish_by(c, reqs, started, mrc, deadline_of(c), what, err);
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */

/* Barrier: MPI_Ibarrier. */
static int m_barrier(dcp_comm *c, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  MPI_Request *r = reqs_new(1, err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_Ibarrier(c->comm, r);
  return finish(c, r, 1, mrc, "barrier", err);
}

/* Ibcast of len bytes at buf in pieces of max_msg on comm. */
static int bcast_on(dcp_comm *c, MPI_Comm comm, void *buf, size_t len, int root, const char *what,
                    dcp_plugin_err *err) {
  size_t n = pieces(len, c->max_msg), i = 0;
  MPI_Request *r = reqs_new(n, err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_SUCCESS;
  for (; i < n && mrc == MPI_SUCCESS; i++) {
    size_t off = i * c->max_msg, k = len - off < c->max_msg ? len - off : c->max_msg;
    mrc = MPI_Ibcast((char *)buf + off, (int)k, MPI_BYTE, root, comm, &r[i]);
  }
  return finish(c, r, i, mrc, what, err);
}

/* Bcast: Ibcast pieces. */
static int m_bcast(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (root < 0 || root >= c->size) return fail(err, DCP_EINVAL, "mpi coll: bad root %d", (int)root);
  if (!buf && len) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  return bcast_on(c, c->comm, buf, len, root, "bcast", err);
}

/* One allgather piece [off, off+k) of every rank's len bytes: received
 * through a k-byte type whose extent is len, so rank i's piece lands at
 * i*len + off without any int displacement. */
static int allgather_piece(dcp_comm *c, const char *send, size_t len, char *recv, size_t off,
                           size_t k, MPI_Request *req) {
  if (k == len) /* the whole part fits: a plain Iallgather */
    return MPI_Iallgather(send, (int)k, MPI_BYTE, recv, (int)k, MPI_BYTE, c->comm, req);
  MPI_Datatype contig, strided;
  int mrc = MPI_Type_contiguous((int)k, MPI_BYTE, &contig);
  if (mrc != MPI_SUCCESS) return mrc;
  mrc = MPI_Type_create_resized(contig, 0, (MPI_Aint)len, &strided);
  MPI_Type_free(&contig);
  if (mrc != MPI_SUCCESS) return mrc;
  mrc = MPI_Type_commit(&strided);
  if (mrc == MPI_SUCCESS)
    mrc = MPI_Iallgather(send + off, (int)k, MPI_BYTE, recv + off, 1, strided, c->comm, req);
  MPI_Type_free(&strided); /* a pending operation keeps its own reference */
  return mrc;
}

/* Allgather: one Iallgather per piece of max_msg bytes. */
static int m_allgather(dcp_comm *c, const void *send, size_t len, void *recv,
                       dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (len && (!send || !recv)) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  if (len > (size_t)PTRDIFF_MAX / (size_t)c->size)
    return fail(err, DCP_EOVERFLOW, "mpi coll: allgather size overflows");
  size_t n = pieces(len, c->max_msg), i = 0;
  MPI_Request *r = reqs_new(n, err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_SUCCESS;
  for (; i < n && mrc == MPI_SUCCESS; i++) {
    size_t off = i * c->max_msg, k = len - off < c->max_msg ? len - off : c->max_msg;
    mrc = allgather_piece(c, send, len, recv, off, k, &r[i]);
  }
  return finish(c, r, i, mrc, "allgather", err);
}

/* Starts point-to-point pieces of len bytes at buf to/from peer (send or
 * receive), appending requests at r[*used]. */
static int p2p_pieces(dcp_comm *c, int is_send, char *buf, size_t len, int peer, int tag,
                      MPI_Request *r, size_t *used) {
  for (size_t off = 0; off < len; off += c->max_msg) {
    size_t k = len - off < c->max_msg ? len - off : c->max_msg;
    int mrc = is_send ? MPI_Isend(buf + off, (int)k, MPI_BYTE, peer, tag, c->comm, &r[*used])
                      : MPI_Irecv(buf + off, (int)k, MPI_BYTE, peer, tag, c->comm, &r[*used]);
    if (mrc != MPI_SUCCESS) return mrc;
    (*used)++;
  }
  return MPI_SUCCESS;
}

/* Root side of gatherv/scatterv: one exchange with every other rank of
 * lens[i] bytes at buf + offset; its own part is copied. */
static int root_exchange(dcp_comm *c, int is_send, char *buf, const size_t *lens, char *own,
                         int tag, const char *what, dcp_plugin_err *err) {
  size_t n = 0, off = 0, used = 0;
  for (int i = 0; i < c->size; i++) {
    if (lens[i] > SIZE_MAX - off) return fail(err, DCP_EOVERFLOW, "mpi coll: lengths overflow");
    off += lens[i];
    if (i != c->rank) n += pieces(lens[i], c->max_msg);
  }
  MPI_Request *r = reqs_new(n, err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_SUCCESS;
  off = 0;
  for (int i = 0; i < c->size && mrc == MPI_SUCCESS; off += lens[i++]) {
    if (i != c->rank) {
      mrc = p2p_pieces(c, is_send, buf + off, lens[i], i, tag, r, &used);
    } else if (lens[i]) {
      if (is_send) memcpy(own, buf + off, lens[i]);
      else memcpy(buf + off, own, lens[i]);
    }
  }
  return finish(c, r, used, mrc, what, err);
}

/* Non-root side of gatherv/scatterv: one exchange of len bytes with root. */
static int leaf_exchange(dcp_comm *c, int is_send, char *buf, size_t len, int root, int tag,
                         const char *what, dcp_plugin_err *err) {
  size_t used = 0;
  MPI_Request *r = reqs_new(pieces(len, c->max_msg), err);
  if (!r) return DCP_ENOMEM;
  int mrc = p2p_pieces(c, is_send, buf, len, root, tag, r, &used);
  return finish(c, r, used, mrc, what, err);
}

/* Gatherv: point-to-point pieces to the root (see the header comment). */
static int m_gatherv(dcp_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
                     int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (root < 0 || root >= c->size) return fail(err, DCP_EINVAL, "mpi coll: bad root %d", (int)root);
  if (len && !send) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  if (c->rank != root)
    return leaf_exchange(c, 1, (char *)(uintptr_t)send, len, root, TAG_GATHERV, "gatherv", err);
  if (!lens || lens[root] != len || (!recv && len))
    return fail(err, DCP_EINVAL, "mpi coll: gatherv lens/recv invalid at root");
  return root_exchange(c, 0, recv, lens, (char *)(uintptr_t)send, TAG_GATHERV, "gatherv", err);
}

/* Scatterv: point-to-point pieces from the root. */
static int m_scatterv(dcp_comm *c, const void *send, const size_t *lens, void *recv, size_t len,
                      int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (root < 0 || root >= c->size) return fail(err, DCP_EINVAL, "mpi coll: bad root %d", (int)root);
  if (len && !recv) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  if (c->rank != root) return leaf_exchange(c, 0, recv, len, root, TAG_SCATTERV, "scatterv", err);
  if (!lens || lens[root] != len) return fail(err, DCP_EINVAL, "mpi coll: scatterv lens invalid");
  size_t total = 0;
  for (int i = 0; i < c->size; i++) total += lens[i] > SIZE_MAX - total ? SIZE_MAX : lens[i];
  if (total && !send) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  return root_exchange(c, 1, (char *)(uintptr_t)send, lens, recv, TAG_SCATTERV, "scatterv", err);
}

/* Allreduce: Iallreduce in place, pieces of max_msg / 8 values. */
static int m_allreduce(dcp_comm *c, int64_t *vals, size_t n, uint32_t op, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  MPI_Op mop = op == DCP_REDUCE_MIN ? MPI_MIN : op == DCP_REDUCE_MAX ? MPI_MAX : MPI_SUM;
  if (op < DCP_REDUCE_MIN || op > DCP_REDUCE_SUM)
    return fail(err, DCP_EINVAL, "mpi coll: unknown reduce op %u", op);
  if (n && !vals) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  size_t per = c->max_msg / 8 ? c->max_msg / 8 : 1, np = pieces(n, per), i = 0;
  MPI_Request *r = reqs_new(np, err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_SUCCESS;
  for (; i < np && mrc == MPI_SUCCESS; i++) {
    size_t off = i * per, k = n - off < per ? n - off : per;
    mrc = MPI_Iallreduce(MPI_IN_PLACE, vals + off, (int)k, MPI_INT64_T, mop, c->comm, &r[i]);
  }
  return finish(c, r, i, mrc, "allreduce", err);
}

/* ------------------------------------------------------------------------ */
/* Groups                                                                   */
/* ------------------------------------------------------------------------ */

/* Sends (or receives) len bytes at buf to (from) each of peers[0..npeers)
 * in pieces, tag TAG_GROUP, and waits for all of it until deadline. */
static int group_exchange(dcp_comm *c, int is_send, char *buf, size_t len, const int *peers,
                          size_t npeers, int64_t deadline, dcp_plugin_err *err) {
  size_t used = 0;
  MPI_Request *r = reqs_new(npeers * pieces(len, c->max_msg), err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_SUCCESS;
  for (size_t i = 0; i < npeers && mrc == MPI_SUCCESS; i++)
    mrc = p2p_pieces(c, is_send, buf, len, peers[i], TAG_GROUP, r, &used);
  return finish_by(c, r, used, mrc, deadline, "group_bcast", err);
}

/* group_bcast: the binomial tree of the header comment. In positions
 * relative to the root (rel), a member's parent is rel with its lowest set
 * bit cleared and its children are rel + 2^k for every 2^k below that bit
 * (every 2^k for the root) that stays within the group. */
static int m_group_bcast(dcp_comm *c, const int32_t *ranks, size_t n, void *buf, size_t len,
                         int32_t root, dcp_plugin_err *err) {
  int rc = check_usable(c, err);
  if (rc) return rc;
  if (!ranks || n == 0 || n > (size_t)c->size) return fail(err, DCP_EINVAL, "mpi coll: bad group");
  size_t self = n, sub_root = n;
  for (size_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= c->size || (i && ranks[i] <= ranks[i - 1]))
      return fail(err, DCP_EINVAL, "mpi coll: group ranks must ascend within [0, %d)", c->size);
    if (ranks[i] == c->rank) self = i;
    if (ranks[i] == root) sub_root = i;
  }
  if (self == n || sub_root == n)
    return fail(err, DCP_EINVAL, "mpi coll: group lacks this rank or root");
  if (!buf && len) return fail(err, DCP_EINVAL, "mpi coll: NULL buffer");
  if (n == 1) return DCP_OK;
  int64_t deadline = deadline_of(c);
  size_t rel = (self + n - sub_root) % n;
  if (rel) {
    int parent = ranks[((rel & (rel - 1)) + sub_root) % n];
    if ((rc = group_exchange(c, 0, buf, len, &parent, 1, deadline, err))) return rc;
  }
  int children[64];
  size_t nchildren = 0;
  for (size_t bit = 1; bit < n && !(rel & bit) && rel + bit < n; bit <<= 1)
    children[nchildren++] = ranks[(rel + bit + sub_root) % n];
  return group_exchange(c, 1, buf, len, children, nchildren, deadline, err);
}

/* ------------------------------------------------------------------------ */
/* Open and close                                                           */
/* ------------------------------------------------------------------------ */

/* Parses "max_msg=N" (1 <= N <= INT_MAX); anything else is DCP_EINVAL. */
static int parse_options(dcp_comm *c, const char *opts, dcp_plugin_err *err) {
  c->max_msg = DEFAULT_MAX_MSG;
  while (opts && *opts) {
    size_t n = strcspn(opts, ",");
    if (n > 8 && strncmp(opts, "max_msg=", 8) == 0) {
      char num[32] = "";
      char *end = NULL;
      if (n - 8 >= sizeof num) return fail(err, DCP_EINVAL, "mpi coll: bad max_msg");
      memcpy(num, opts + 8, n - 8);
      unsigned long long v = strtoull(num, &end, 10);
      if (*end || num[0] == '-' || v < 1 || v > INT_MAX)
        return fail(err, DCP_EINVAL, "mpi coll: max_msg must be in [1, %d]", INT_MAX);
      c->max_msg = (size_t)v;
    } else if (n > 0) {
      return fail(err, DCP_EINVAL, "mpi coll: unknown option '%.*s' (known: max_msg=N)", (int)n,
                  opts);
    }
    opts += n;
    if (*opts == ',') opts++;
  }
  return DCP_OK;
}

/* Initialises MPI unless someone already did (then it is not ours). */
static int ensure_mpi(dcp_comm *c, dcp_plugin_err *err) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) return fail(err, DCP_EIO, "mpi coll: MPI is already finalised");
  if (init) return DCP_OK;
  int provided = 0;
  int mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
  if (mrc != MPI_SUCCESS) return mpi_fail(err, "MPI_Init_thread", mrc);
  c->we_initialized = 1;
  return DCP_OK;
}

/* Duplicates the base communicator. cfg->rank and world_size are ignored:
 * MPI knows them, and callers leave the context's defaults there. */
static int attach(dcp_comm *c, const dcp_coll_config *cfg, dcp_plugin_err *err) {
  int has_native = cfg->struct_size >= offsetof(dcp_coll_config, native) + sizeof cfg->native;
  MPI_Comm base = has_native && cfg->native ? *(MPI_Comm *)cfg->native : MPI_COMM_WORLD;
  int rank = 0, size = 0;
  if (base == MPI_COMM_NULL) return fail(err, DCP_EINVAL, "mpi coll: native is MPI_COMM_NULL");
  MPI_Comm_rank(base, &rank);
  MPI_Comm_size(base, &size);
  c->rank = rank;
  c->size = size;
  MPI_Request *r = reqs_new(1, err);
  if (!r) return DCP_ENOMEM;
  int mrc = MPI_Comm_idup(base, &c->comm, r);
  if (mrc != MPI_SUCCESS) {
    free(r);
    c->comm = MPI_COMM_NULL;
    return mpi_fail(err, "MPI_Comm_idup", mrc);
  }
  int rc = finish(c, r, 1, MPI_SUCCESS, "open (MPI_Comm_idup)", err);
  if (rc == DCP_OK) MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  return rc;
}

static void m_close(dcp_comm *c);

/* Opens the communicator (collective over the base communicator). */
static int m_open(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err) {
  if (!cfg || !out) return fail(err, DCP_EINVAL, "mpi coll: NULL argument");
  *out = NULL;
  size_t need = offsetof(dcp_coll_config, timeout_ms) + sizeof cfg->timeout_ms;
  if (cfg->struct_size < need) return fail(err, DCP_EINVAL, "mpi coll: config too small");
  if (cfg->timeout_ms <= 0 || cfg->timeout_ms > INT64_MAX / 1000000)
    return fail(err, DCP_EINVAL, "mpi coll: timeout_ms must be > 0");
  dcp_comm *c = calloc(1, sizeof *c);
  if (!c) return fail(err, DCP_ENOMEM, "mpi coll: out of memory");
  c->comm = MPI_COMM_NULL;
  c->timeout_ms = cfg->timeout_ms;
  int has_opts = cfg->struct_size >= offsetof(dcp_coll_config, options) + sizeof cfg->options;
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

/* 1 when every abandoned request has completed since (then the
 * communicator can be freed after all). */
static int pending_done(dcp_comm *c) {
  int done = 0;
  if (c->npending == 0) return 1;
  if (MPI_Testall((int)c->npending, c->pending, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) return 0;
  return done;
}

/* Frees the communicator and, when MPI was
 * initialised here, finalises MPI (unless an abandoned operation is still
 * pending, where MPI_Finalize could hang). */
static void m_close(dcp_comm *c) {
  if (!c) return;
  int fin = 0;
  MPI_Finalized(&fin);
  int clean = !fin && !c->lost && pending_done(c);
  if (clean && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  if (clean && c->we_initialized) MPI_Finalize();
  free(c->pending);
  free(c);
}

/* Accessors. */
static int32_t m_rank(const dcp_comm *c) { return c ? c->rank : -1; }
static int32_t m_size(const dcp_comm *c) { return c ? c->size : 0; }

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
};

/* The plugin's only exported symbol. */
__attribute__((visibility("default"))) const void *dcp_plugin_entry(uint32_t kind);
const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_COLL ? &mpi_plugin : NULL;
}
