/*
 * dcp-coll-gloo — collectives over Gloo's TCP transport (Debian's libgloo).
 *
 * A C++17 shim behind the C plugin table: every entry point catches every
 * C++ exception and returns a dcp_status with the exception's message
 * (a gloo timeout becomes DCP_ETIMEDOUT, a peer that closed its connection
 * DCP_EPEER, anything else DCP_EIO). After a failed collective the
 * communicator is broken: later calls return DCP_EPEER at once.
 *
 * Options ("key=value,..."): job=NAME (default "dcp", [A-Za-z0-9_-]{1,64}),
 * store=HOST:PORT (rendezvous over TCP instead of a directory, below),
 * host=ADDR (the address this rank listens on) or iface=NAME (a network
 * interface; host and iface are exclusive). Without either, a rank listens
 * on the address of its interface that routes toward the store's host
 * (with store=), or on 127.0.0.1 (a directory: one host).
 *
 * Rendezvous over TCP (store=HOST:PORT, common/cc_store.h): rank 0 serves
 * a key-value store at HOST:PORT for the length of open, the others connect
 * with retries until the deadline; its hello/welcome handshake (a nonce per
 * rank, a fresh session id, the job name and world size checked) does what
 * the directory's handshake does, and gloo's full-mesh connect goes through
 * that store (TcpStore below). No directory is used (cfg->rendezvous is
 * ignored). After the gloo barrier rank 0 stops serving and closes the
 * port.
 *
 * Rendezvous (in cfg->rendezvous, created when missing). Gloo's rendezvous
 * store must never see the keys of an earlier (possibly crashed) run of the
 * same job, so open first agrees on a fresh session S with the handshake
 * the file collective uses (common/cc_handshake.h, files "<job>.gloo.hello.<r>"
 * and "<job>.gloo.session"): rank 0 creates the directory "<job>.gloo.<S>"
 * before it publishes S; a rank that accepted S acks with
 * "<job>.gloo.<S>/ack.<r>"; rank 0 re-reads the hellos of the ranks that
 * have not acked (a stale hello it read may have been replaced) and, once
 * every rank has acked, removes the session file. Then every rank connects
 * the full mesh through a key-value store of files in "<job>.gloo.<S>"
 * ("key.<hex of the key>", DirStore below), a gloo barrier proves that
 * every rank is done with the store, and rank 0 removes the whole session
 * directory.
 * An open that succeeds on every rank leaves the rendezvous directory as it
 * found it. A run that crashes during open can leave its hellos and session
 * file (ignored and replaced by the next run) and one "<job>.gloo.<S>"
 * directory (never looked at again: safe to delete).
 *
 * Deadlines: the whole open is bounded by timeout_ms, every wait in it by
 * what is left of it. Gloo's own FileStore would not do: its wait(keys)
 * keeps a 30 s default, which its full-mesh connect uses, and it measures
 * its timeouts in whole seconds; so the store is the shim's own, and every
 * one of its waits ends at the open's deadline. Gloo's pairs wait up to 5
 * times the context's timeout for a connection, so the connect runs with a
 * fifth of what is left. Each collective passes timeout_ms to gloo.
 *
 * Ops: barrier, bcast, allgather and allreduce_i64 are gloo's collectives.
 * gatherv, scatterv and group_bcast are point-to-point over unbound buffers:
 * every message is an 8-byte length header followed by the payload (when
 * not empty) on the next slot, so a length that disagrees with what the
 * receiver expects is detected (DCP_EINVAL after draining the payload)
 * instead of confusing the transport. gatherv's root posts every receive at
 * once and copies its own part; scatterv's root posts every send at once;
 * group_bcast's root sends to each member of the group (a flat tree), on a
 * slot derived from a hash of the group's ranks (cached per group). Slots
 * carry the prefix 0xDC in their top byte, out of the range gloo's own
 * collectives use (prefixes 0x01..0x08). Messages between two ranks on one
 * slot are matched in order, which is what collective call order gives.
 *
 * Files: every rendezvous file (hello, session, ack, store key) is written
 * through a fresh O_EXCL temporary with a random name and renamed into
 * place, and read with O_NOFOLLOW, regular files only (common/cc_file.h):
 * a link planted in the directory is never written through or read.
 *
 * Host id (the table's host_id, for read dedup): common/cc_host.h, the
 * same id the mpi and file collectives report.
 *
 * SIGPIPE: gloo writes to its sockets without MSG_NOSIGNAL, so a write to a
 * peer that has exited would kill this process. Every entry point blocks
 * SIGPIPE on its thread while gloo runs (the device's event-loop thread,
 * started during open, inherits that mask) and consumes a SIGPIPE it raised
 * before restoring the mask: the write fails with EPIPE instead, and the
 * call returns DCP_EPEER.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "cc_file.h"
#include "cc_handshake.h"
#include "cc_host.h"
#include "cc_opts.h"
#include "cc_store.h"
#include "dcp_plugin.h"

extern "C" DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using UB = std::unique_ptr<gloo::transport::UnboundBuffer>;

constexpr size_t kJobMax = 64;
constexpr size_t kHostMax = 255;
constexpr uint64_t kSlotPrefix = 0xDCull << 56;

// Ops, for slots of point-to-point messages.
enum : uint64_t { OP_GATHERV = 1, OP_SCATTERV = 2, OP_GROUP = 3 };

// A failure with its dcp_status, thrown inside the shim only.
struct Fail {
  int code;
  std::string msg;
};

[[noreturn]] __attribute__((format(printf, 2, 3))) void fail(int code, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw Fail{code, buf};
}

// One timeout for a whole call, possibly spanning several waits.
struct Deadline {
  Clock::time_point end;
  explicit Deadline(int64_t timeout_ms) : end(Clock::now() + ms(timeout_ms)) {}
  bool passed() const { return Clock::now() >= end; }
  // What is left, at least 1 ms (gloo treats 0 as "no timeout"); past
  // the deadline, DCP_ETIMEDOUT "timed out <what>".
  ms left(const char *what) const {
    auto now = Clock::now();
    if (now >= end) fail(DCP_ETIMEDOUT, "timed out %s", what);
    auto l = std::chrono::duration_cast<ms>(end - now);
    return l.count() < 1 ? ms(1) : l;
  }
};

// What is left of d for gloo's connect, which waits up to five times its
// context's timeout for a peer's connection (at least 1 ms).
ms connect_timeout(const Deadline &d) {
  ms l = d.left("before connecting");
  return l.count() >= 5 ? l / 5 : ms(1);
}

bool has(const std::string &s, const char *needle) { return s.find(needle) != std::string::npos; }

// The dcp_status for a gloo exception's message.
int classify(const std::string &m) {
  if (has(m, "imed out") || has(m, "imeout")) return DCP_ETIMEDOUT;
  if (has(m, "losed by peer") || has(m, "onnection reset") || has(m, "roken pipe") ||
      has(m, "onnection refused") || has(m, "ECONNRESET") || has(m, "EPIPE"))
    return DCP_EPEER;
  return DCP_EIO;
}

std::string hex64(uint64_t v) {
  char b[17];
  snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

// mkdir -p; 0 or errno.
int mkdirs(const std::string &path) {
  std::string cur;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    cur = path.substr(0, j);
    if (!cur.empty() && mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) return errno;
    i = j + 1;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// Writes data to path atomically and safely (common/cc_file.h: a fresh
// O_EXCL temporary, never through a link, then a rename).
void write_atomic(const std::string &path, const std::string &data) {
  dcp_plugin_err e;
  if (int rc = dcpi_cc_write_file(path.c_str(), data.data(), data.size(), nullptr, 0, &e))
    fail(rc, "%s", e.msg);
}

// The contents of a regular file at path into out; false when it is absent,
// a link or not a regular file (never followed), or unreadable.
bool read_small(const std::string &path, std::string &out) {
  int fd = -1;
  uint64_t size = 0;
  if (dcpi_cc_open_file(path.c_str(), &fd, &size, nullptr) != DCPI_CC_PRESENT) return false;
  out.assign((size_t)size, '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = read(fd, &out[got], out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  out.resize(got);
  return got == (size_t)size;
}

// Removes a flat directory and its files (best effort; a link at dir is
// not followed).
void remove_tree(const std::string &dir) { dcpi_cc_remove_dir(dir.c_str()); }

void sleep_poll() { std::this_thread::sleep_for(ms(5)); }

// The key-value store gloo's connectFullMesh rendezvous through: one file
// per key in the session directory, written atomically; every wait ends at
// the open's deadline (see "Deadlines" above), whatever timeout gloo asks.
class DirStore : public gloo::rendezvous::Store {
 public:
  DirStore(std::string dir, const Deadline &d, int64_t timeout_ms)
      : dir_(std::move(dir)), d_(d), timeout_ms_(timeout_ms) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    write_atomic(path(key), std::string(data.begin(), data.end()));
  }

  std::vector<char> get(const std::string &key) override {
    wait({key});
    std::string text;
    if (!read_small(path(key), text)) fail(DCP_EIO, "cannot read store key %s", key.c_str());
    return std::vector<char>(text.begin(), text.end());
  }

  void wait(const std::vector<std::string> &keys) override { wait(keys, ms(timeout_ms_)); }

  // Polls until every key exists, until the open's deadline (DCP_ETIMEDOUT
  // naming the missing keys: ranks). Gloo's timeout is not ours: it is the
  // context's, a fifth of what was left (connect_timeout).
  void wait(const std::vector<std::string> &keys, const ms &) override {
    for (;;) {
      std::string missing;
      for (const auto &k : keys)
        if (access(path(k).c_str(), F_OK) != 0) missing += (missing.empty() ? "" : ", ") + k;
      if (missing.empty()) return;
      if (d_.passed())
        fail(DCP_ETIMEDOUT, "timed out after %lld ms waiting for the address of rank(s) %s",
             (long long)timeout_ms_, missing.c_str());
      sleep_poll();
    }
  }

 private:
  // "key.<hex of the key's bytes>": any key becomes a plain file name.
  std::string path(const std::string &key) const {
    std::string p = dir_ + "/key.";
    char b[3];
    for (unsigned char ch : key) {
      snprintf(b, sizeof b, "%02x", ch);
      p += b;
    }
    return p;
  }

  std::string dir_;
  const Deadline &d_;
  int64_t timeout_ms_;
};

// The key-value store gloo's connectFullMesh rendezvous through with
// store=HOST:PORT: common/cc_store.h, polled until the open's deadline.
class TcpStore : public gloo::rendezvous::Store {
 public:
  TcpStore(dcpi_cc_store *s, const Deadline &d, int64_t timeout_ms)
      : s_(s), d_(d), timeout_ms_(timeout_ms) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    dcp_plugin_err e;
    if (int rc = dcpi_cc_store_set(s_, key.data(), key.size(), data.data(), data.size(), &e))
      fail(rc, "%s", e.msg);
  }

  std::vector<char> get(const std::string &key) override {
    for (;;) {
      unsigned char *v = nullptr;
      size_t n = 0;
      if (lookup(key, &v, &n)) {
        std::vector<char> out(v, v + n);
        free(v);
        return out;
      }
      pause(key);
    }
  }

  void wait(const std::vector<std::string> &keys) override { wait(keys, ms(timeout_ms_)); }

  // Polls until every key exists, until the open's deadline (see DirStore).
  void wait(const std::vector<std::string> &keys, const ms &) override {
    for (const auto &k : keys) {
      for (;;) {
        unsigned char *v = nullptr;
        size_t n = 0;
        bool there = lookup(k, &v, &n);
        free(v);
        if (there) break;
        pause(k);
      }
    }
  }

 private:
  bool lookup(const std::string &key, unsigned char **v, size_t *n) {
    dcp_plugin_err e;
    int rc = dcpi_cc_store_get(s_, key.data(), key.size(), v, n, &e);
    if (rc < 0) fail(rc, "%s", e.msg);
    return rc == 1;
  }
  void pause(const std::string &key) {
    if (d_.passed())
      fail(DCP_ETIMEDOUT, "timed out after %lld ms waiting for the address of rank(s) %s",
           (long long)timeout_ms_, key.c_str());
    std::this_thread::sleep_for(ms(2));
  }

  dcpi_cc_store *s_;
  const Deadline &d_;
  int64_t timeout_ms_;
};

// "a, b, c" for at most 8 ranks.
std::string rank_list(const std::vector<int> &v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; i++) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > 8) s += " and " + std::to_string(v.size() - 8) + " more";
  return s;
}

}  // namespace

struct dcp_comm {
  int32_t rank = 0, size = 0;
  int64_t timeout_ms = 0;
  std::string dir, job = "dcp", host, iface, store;
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::Context> ctx;
  bool broken = false;
  std::string why;                             // the failure that broke it
  std::map<std::vector<int32_t>, uint64_t> groups;  // group -> slot key
  uint64_t host_key = 1;                            // host_id (cc_host.h)
};

namespace {

std::string path_in(const dcp_comm *c, const std::string &name) { return c->dir + "/" + name; }
std::string session_dir(const dcp_comm *c, uint64_t s) {
  return path_in(c, c->job + ".gloo." + hex64(s));
}

// Throws a common-code failure (rc < 0) as a Fail.
void check(int rc, const dcp_plugin_err &e) {
  if (rc < 0) throw Fail{rc, e.msg};
}

// The handshake state of this rank (common/cc_handshake.h), its prefix
// kept alive alongside.
struct Handshake {
  std::string prefix;
  dcpi_cc_hs h{};
  Handshake(const dcp_comm *c, int64_t deadline_ns) : prefix(c->job + ".gloo.") {
    h.dir = c->dir.c_str();
    h.prefix = prefix.c_str();
    h.rank = c->rank;
    h.world = c->size;
    h.deadline_ns = deadline_ns;
    h.timeout_ms = c->timeout_ms;
    dcp_plugin_err e;
    check(dcpi_cc_hs_init(&h, &e), e);
  }
  ~Handshake() { dcpi_cc_hs_free(&h); }
  Handshake(const Handshake &) = delete;
  Handshake &operator=(const Handshake &) = delete;
};

// Rank 0 until every rank has acked session S in sdir, rescanning the
// hellos of the others meanwhile (step 4 of the handshake).
void await_acks(dcp_comm *c, Handshake &hs, const std::string &sdir, const Deadline &d) {
  std::vector<unsigned char> acked((size_t)c->size, 0);
  acked[0] = 1;
  for (;;) {
    std::vector<int> missing;
    for (int r = 1; r < c->size; r++) {
      if (!acked[(size_t)r] && access((sdir + "/ack." + std::to_string(r)).c_str(), F_OK) == 0)
        acked[(size_t)r] = 1;
      if (!acked[(size_t)r]) missing.push_back(r);
    }
    if (missing.empty()) return;
    dcp_plugin_err e;
    check(dcpi_cc_hs_rescan(&hs.h, acked.data(), &e), e);
    if (d.passed())
      fail(DCP_ETIMEDOUT, "timed out after %lld ms waiting for rank(s) %s to join session %s",
           (long long)c->timeout_ms, rank_list(missing).c_str(), hex64(hs.h.session).c_str());
    sleep_poll();
  }
}

// The handshake at rank 0: returns S with its directory made.
uint64_t handshake_root(dcp_comm *c, Handshake &hs, const Deadline &d) {
  std::string sdir = session_dir(c, hs.h.session);
  if (mkdir(sdir.c_str(), 0777) != 0)
    fail(DCP_EIO, "cannot create %s: %s", sdir.c_str(), strerror(errno));
  try {
    dcp_plugin_err e;
    check(dcpi_cc_hs_collect(&hs.h, &e), e);
    check(dcpi_cc_hs_publish(&hs.h, &e), e);
    await_acks(c, hs, sdir, d);
    dcpi_cc_hs_retire(&hs.h);
    return hs.h.session;
  } catch (...) {
    dcpi_cc_hs_retire(&hs.h);
    remove_tree(sdir);
    throw;
  }
}

// The handshake at rank r > 0: returns S, acked.
uint64_t handshake_member(dcp_comm *c, Handshake &hs) {
  dcp_plugin_err e;
  check(dcpi_cc_hs_join(&hs.h, &e), e);
  std::string ack = session_dir(c, hs.h.session) + "/ack." + std::to_string(c->rank);
  check(dcpi_cc_create_empty(ack.c_str(), &e), e);
  return hs.h.session;
}

// Parses the options (common/cc_opts.h): job=NAME, host=ADDR, iface=NAME.
void parse_options(dcp_comm *c, const char *opts) {
  char job[kJobMax + 1] = "dcp", host[kHostMax + 1] = "", iface[kHostMax + 1] = "";
  char store[kHostMax + 8] = "";
  const dcpi_cc_opt known[] = {
      {"job", DCPI_CC_OPT_NAME, kJobMax, 0, 0, job, nullptr},
      {"host", DCPI_CC_OPT_TEXT, kHostMax, 0, 0, host, nullptr},
      {"iface", DCPI_CC_OPT_TEXT, kHostMax, 0, 0, iface, nullptr},
      {"store", DCPI_CC_OPT_TEXT, kHostMax + 7, 0, 0, store, nullptr},
  };
  dcp_plugin_err e;
  if (dcpi_cc_parse_options(opts, known, sizeof known / sizeof *known, nullptr, &e))
    fail(DCP_EINVAL, "%s", e.msg);
  c->job = job;
  c->host = host;
  c->iface = iface;
  c->store = store;
  if (!c->host.empty() && !c->iface.empty()) fail(DCP_EINVAL, "host= and iface= are exclusive");
}

// Blocks SIGPIPE on this thread for its lifetime (see the top comment);
// a SIGPIPE that became pending meanwhile is consumed, one that was
// pending before is left alone.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    was_pending_ = pending();
  }
  ~NoSigpipe() {
    struct timespec zero = {0, 0};
    if (!was_pending_ && pending()) sigtimedwait(&pipe_, nullptr, &zero);
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe &) = delete;
  NoSigpipe &operator=(const NoSigpipe &) = delete;

 private:
  bool pending() {
    sigset_t p;
    sigemptyset(&p);
    return sigpending(&p) == 0 && sigismember(&p, SIGPIPE);
  }
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

// Runs fn, turning every exception into a status; a failure breaks c.
template <typename F>
int guarded(dcp_comm *c, dcp_plugin_err *err, const char *op, F &&fn) {
  if (c->broken)
    return dcp_plugin_fail(err, DCP_EPEER, "communicator broken by an earlier failure: %s",
                           c->why.c_str());
  NoSigpipe no_sigpipe;
  int code = DCP_OK;
  std::string msg;
  try {
    fn();
    return DCP_OK;
  } catch (const Fail &f) {
    code = f.code, msg = f.msg;
  } catch (const gloo::IoException &e) {
    code = classify(e.what()), msg = e.what();
  } catch (const std::bad_alloc &) {
    code = DCP_ENOMEM, msg = "out of memory";
  } catch (const std::exception &e) {  // gloo::EnforceNotMet, gloo::Exception, ...
    code = classify(e.what()), msg = e.what();
  } catch (...) {
    code = DCP_EIO, msg = "unknown C++ exception";
  }
  c->broken = true;
  c->why = std::string(op) + ": " + msg;  // names the op: later calls are other ops
  return dcp_plugin_fail(err, code, "%s", msg.c_str());
}

// Argument checks before any traffic: a failure here does not break c.
#define ARGCHECK(cond, ...)                                            \
  do {                                                                 \
    if (!(cond)) return dcp_plugin_fail(err, DCP_EINVAL, __VA_ARGS__); \
  } while (0)

uint64_t slot_of(uint64_t op, uint64_t key) {
  return kSlotPrefix | ((op & 0x7f) << 49) | ((key & ((1ull << 48) - 1)) << 1);
}

// An outgoing message: length header on slot, payload on slot + 1.
struct Out {
  uint64_t hdr = 0;
  int peer = -1;
  UB hb, db;
};

void post_send(gloo::Context &ctx, Out &m, int peer, uint64_t slot, const void *p, size_t len) {
  m.hdr = len;
  m.peer = peer;
  m.hb = ctx.createUnboundBuffer(&m.hdr, sizeof m.hdr);
  m.hb->send(peer, slot);
  if (len) {
    m.db = ctx.createUnboundBuffer(const_cast<void *>(p), len);
    m.db->send(peer, slot + 1);
  }
}

// "sending to rank 3" (or receiving) for the messages of a wait.
std::string peer_what(const char *verb, int peer) {
  return std::string(verb) + " rank " + std::to_string(peer);
}

void wait_send(Out &m, const Deadline &d) {
  std::string what = peer_what("sending to", m.peer);
  if (!m.hb->waitSend(d.left(what.c_str()))) fail(DCP_EIO, "send to rank %d aborted", m.peer);
  if (m.db && !m.db->waitSend(d.left(what.c_str())))
    fail(DCP_EIO, "send to rank %d aborted", m.peer);
}

// An incoming message of an expected length into dst.
struct In {
  uint64_t hdr = 0;
  int peer = -1;
  uint64_t slot = 0;
  void *dst = nullptr;
  size_t expect = 0;
  UB hb, db;
  std::vector<char> scratch;  // a payload of the wrong length, drained
};

void post_recv_hdr(gloo::Context &ctx, In &m, int peer, uint64_t slot, void *dst, size_t expect) {
  m.peer = peer, m.slot = slot, m.dst = dst, m.expect = expect;
  m.hb = ctx.createUnboundBuffer(&m.hdr, sizeof m.hdr);
  m.hb->recv(peer, slot);
}

// Waits for the header and posts the payload's receive; false on a length
// mismatch (the payload is then drained into scratch).
bool wait_hdr_post_data(gloo::Context &ctx, In &m, const Deadline &d) {
  std::string what = peer_what("receiving from", m.peer);
  if (!m.hb->waitRecv(d.left(what.c_str())))
    fail(DCP_EIO, "receive from rank %d aborted", m.peer);
  bool ok = m.hdr == m.expect;
  if (m.hdr) {
    void *p = m.dst;
    if (!ok) {
      m.scratch.resize((size_t)m.hdr);
      p = m.scratch.data();
    }
    m.db = ctx.createUnboundBuffer(p, (size_t)m.hdr);
    m.db->recv(m.peer, m.slot + 1);
  }
  return ok;
}

void wait_data(In &m, const Deadline &d) {
  if (m.db && !m.db->waitRecv(d.left(peer_what("receiving from", m.peer).c_str())))
    fail(DCP_EIO, "receive from rank %d aborted", m.peer);
}

// ---------------------------------------------------------------------------
// The table's functions
// ---------------------------------------------------------------------------

// The address this rank listens on: host=, iface= (in attr), or the one
// that routes toward the store's host.
gloo::transport::tcp::attr listen_attr(const dcp_comm *c, const char *store_host, uint16_t port) {
  gloo::transport::tcp::attr attr;
  if (!c->iface.empty()) {
    attr.iface = c->iface;
  } else if (!c->host.empty()) {
    attr.hostname = c->host;
  } else if (store_host) {
    char addr[64];
    dcp_plugin_err e;
    if (int rc = dcpi_cc_route_addr(store_host, port, addr, sizeof addr, &e)) fail(rc, "%s", e.msg);
    attr.hostname = addr;
  } else {
    attr.hostname = "127.0.0.1";
  }
  return attr;
}

// Open with store=HOST:PORT: the session through the TCP store, then the
// mesh, then a barrier before rank 0 stops serving.
void open_tcp(dcp_comm *c) {
  char host[DCPI_CC_HOST_MAX + 1];
  uint16_t port = 0;
  dcp_plugin_err e;
  if (dcpi_cc_split_hostport(c->store.c_str(), host, &port, &e)) fail(DCP_EINVAL, "%s", e.msg);
  Deadline d(c->timeout_ms);
  gloo::transport::tcp::attr attr = listen_attr(c, host, port);
  dcpi_cc_store_cfg sc{};
  sc.host = host;
  sc.port = port;
  sc.job = c->job.c_str();
  sc.rank = c->rank;
  sc.world = c->size;
  sc.deadline_ns = dcpi_cc_now_ns() + c->timeout_ms * 1000000LL;
  sc.timeout_ms = c->timeout_ms;
  dcpi_cc_store *st = nullptr;
  if (int rc = dcpi_cc_store_open(&sc, &st, &e)) fail(rc, "%s", e.msg);
  std::unique_ptr<dcpi_cc_store, void (*)(dcpi_cc_store *)> hold(st, dcpi_cc_store_close);
  c->dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->size);
  ctx->setTimeout(connect_timeout(d));
  {
    TcpStore store(st, d, c->timeout_ms);
    ctx->connectFullMesh(store, c->dev);
  }
  if (c->rank != 0) hold.reset();  // done with the store; rank 0 serves until the barrier
  ctx->setTimeout(ms(c->timeout_ms));
  c->ctx = ctx;
  if (c->size > 1) {
    gloo::BarrierOptions b(c->ctx);
    b.setTimeout(d.left("before the barrier"));
    gloo::barrier(b);
  }
}

int g_open(const dcp_coll_config *cfg, dcp_comm **out, dcp_plugin_err *err) {
  if (!out) return dcp_plugin_fail(err, DCP_EINVAL, "out is NULL");
  *out = nullptr;
  if (!cfg || !DCP_HAS_FIELD(cfg, dcp_coll_config, timeout_ms))
    return dcp_plugin_fail(err, DCP_EINVAL, "config too small or NULL");
  if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
    return dcp_plugin_fail(err, DCP_EINVAL, "rank %d of world %d is out of range",
                           (int)cfg->rank, (int)cfg->world_size);
  if (cfg->timeout_ms <= 0 || cfg->timeout_ms > INT64_MAX / 1000000)
    return dcp_plugin_fail(err, DCP_EINVAL, "timeout_ms must be > 0 (got %lld)",
                           (long long)cfg->timeout_ms);
  const char *opts = DCP_HAS_FIELD(cfg, dcp_coll_config, options) ? cfg->options : nullptr;
  dcp_comm *c = nullptr;
  try {
    c = new dcp_comm;
  } catch (...) {
    return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  }
  c->rank = cfg->rank;
  c->size = cfg->world_size;
  c->timeout_ms = cfg->timeout_ms;
  c->host_key = dcpi_cc_host_id();
  int rc = guarded(c, err, "open", [&] {
    parse_options(c, opts);
    if (!c->store.empty()) {
      open_tcp(c);
      return;
    }
    if (!cfg->rendezvous || !*cfg->rendezvous)
      fail(DCP_EINVAL, "the gloo collective needs a rendezvous directory or store=HOST:PORT");
    c->dir = cfg->rendezvous;
    Deadline d(c->timeout_ms);
    Handshake hs(c, dcpi_cc_now_ns() + c->timeout_ms * 1000000LL);
    if (int e = mkdirs(c->dir))
      fail(DCP_EIO, "cannot create rendezvous directory %s: %s", c->dir.c_str(), strerror(e));
    uint64_t s = c->rank == 0 ? handshake_root(c, hs, d) : handshake_member(c, hs);
    std::string sdir = session_dir(c, s);
    try {
      gloo::transport::tcp::attr attr = listen_attr(c, nullptr, 0);
      c->dev = gloo::transport::tcp::CreateDevice(attr);
      auto ctx = std::make_shared<gloo::rendezvous::Context>(c->rank, c->size);
      ctx->setTimeout(connect_timeout(d));
      {
        DirStore store(sdir, d, c->timeout_ms);
        ctx->connectFullMesh(store, c->dev);
      }
      ctx->setTimeout(ms(c->timeout_ms));
      c->ctx = ctx;
      gloo::BarrierOptions b(c->ctx);
      b.setTimeout(d.left("before the barrier"));
      gloo::barrier(b);
    } catch (...) {
      if (c->rank == 0) remove_tree(sdir);
      throw;
    }
    if (c->rank == 0) remove_tree(sdir);  // every rank is past the store
  });
  if (rc != DCP_OK) {
    NoSigpipe no_sigpipe;
    try {
      c->ctx.reset();
      c->dev.reset();
    } catch (...) {
    }
    delete c;
    return rc;
  }
  *out = c;
  return DCP_OK;
}

void g_close(dcp_comm *c) {
  if (!c) return;
  NoSigpipe no_sigpipe;
  try {
    c->ctx.reset();
    c->dev.reset();
  } catch (...) {
  }
  delete c;
}

int32_t g_rank(const dcp_comm *c) { return c->rank; }
uint64_t g_host_id(const dcp_comm *c) { return c->host_key; }
int32_t g_size(const dcp_comm *c) { return c->size; }

int g_barrier(dcp_comm *c, dcp_plugin_err *err) {
  return guarded(c, err, "barrier", [&] {
    if (c->size == 1) return;
    gloo::BarrierOptions o(c->ctx);
    o.setTimeout(ms(c->timeout_ms));
    gloo::barrier(o);
  });
}

int g_bcast(dcp_comm *c, void *buf, size_t len, int32_t root, dcp_plugin_err *err) {
  ARGCHECK(root >= 0 && root < c->size, "root %d out of range", (int)root);
  ARGCHECK(buf || !len, "buf is NULL");
  return guarded(c, err, "bcast", [&] {
    if (c->size == 1 || len == 0) return;
    gloo::BroadcastOptions o(c->ctx);
    o.setOutput(static_cast<uint8_t *>(buf), len);
    o.setRoot(root);
    o.setTimeout(ms(c->timeout_ms));
    gloo::broadcast(o);
  });
}

int g_allgather(dcp_comm *c, const void *send, size_t len, void *recv, dcp_plugin_err *err) {
  ARGCHECK((send && recv) || !len, "NULL buffer");
  ARGCHECK(len <= SIZE_MAX / (size_t)c->size, "%zu bytes times %d ranks overflows", len,
           (int)c->size);
  return guarded(c, err, "allgather", [&] {
    if (len == 0) return;
    if (c->size == 1) {
      memmove(recv, send, len);
      return;
    }
    gloo::AllgatherOptions o(c->ctx);
    o.setInput(const_cast<uint8_t *>(static_cast<const uint8_t *>(send)), len);
    o.setOutput(static_cast<uint8_t *>(recv), len * (size_t)c->size);
    o.setTimeout(ms(c->timeout_ms));
    gloo::allgather(o);
  });
}

/* The root's side of gatherv / scatterv: lens given, its own entry equal
 * to its len, a total that fits, and a buffer (buf) for a non-empty total. */
int check_root_lens(const dcp_comm *c, const size_t *lens, size_t len, int32_t root,
                    const void *buf, dcp_plugin_err *err) {
  ARGCHECK(lens, "lens is NULL at the root");
  ARGCHECK(lens[root] == len, "lens[%d] = %zu but the root's own length is %zu", (int)root,
           lens[root], len);
  size_t total = 0;
  for (int32_t r = 0; r < c->size; r++) {
    ARGCHECK(lens[r] <= SIZE_MAX - total, "total length overflows");
    total += lens[r];
  }
  ARGCHECK(buf || !total, "the root's buffer is NULL");
  return DCP_OK;
}

int g_gatherv(dcp_comm *c, const void *send, size_t len, void *recv, const size_t *lens,
              int32_t root, dcp_plugin_err *err) {
  ARGCHECK(root >= 0 && root < c->size, "root %d out of range", (int)root);
  ARGCHECK(send || !len, "send is NULL");
  if (c->rank == root && check_root_lens(c, lens, len, root, recv, err))
    return DCP_EINVAL;
  return guarded(c, err, "gatherv", [&] {
    Deadline d(c->timeout_ms);
    uint64_t slot = slot_of(OP_GATHERV, 0);
    if (c->rank != root) {
      Out m;
      post_send(*c->ctx, m, root, slot, send, len);
      wait_send(m, d);
      return;
    }
    std::vector<In> in((size_t)c->size);
    char *dst = static_cast<char *>(recv);
    for (int32_t r = 0; r < c->size; r++) {
      if (r == root) {
        if (len) memmove(dst, send, len);
      } else {
        post_recv_hdr(*c->ctx, in[(size_t)r], r, slot, dst, lens[r]);
      }
      dst += lens[r];
    }
    int bad = -1;
    for (int32_t r = 0; r < c->size; r++)
      if (r != root && !wait_hdr_post_data(*c->ctx, in[(size_t)r], d) && bad < 0)
        bad = r;
    for (int32_t r = 0; r < c->size; r++)
      if (r != root) wait_data(in[(size_t)r], d);
    if (bad >= 0)
      fail(DCP_EINVAL, "rank %d sent %llu bytes, lens[%d] = %zu", bad,
           (unsigned long long)in[(size_t)bad].hdr, bad, lens[bad]);
  });
}

int g_scatterv(dcp_comm *c, const void *send, const size_t *lens, void *recv, size_t len,
               int32_t root, dcp_plugin_err *err) {
  ARGCHECK(root >= 0 && root < c->size, "root %d out of range", (int)root);
  ARGCHECK(recv || !len, "recv is NULL");
  if (c->rank == root && check_root_lens(c, lens, len, root, send, err))
    return DCP_EINVAL;
  return guarded(c, err, "scatterv", [&] {
    Deadline d(c->timeout_ms);
    uint64_t slot = slot_of(OP_SCATTERV, 0);
    if (c->rank != root) {
      In m;
      post_recv_hdr(*c->ctx, m, root, slot, recv, len);
      bool ok = wait_hdr_post_data(*c->ctx, m, d);
      wait_data(m, d);
      if (!ok)
        fail(DCP_EINVAL, "root %d sent %llu bytes, this rank expects %zu", (int)root,
             (unsigned long long)m.hdr, len);
      return;
    }
    std::vector<Out> out((size_t)c->size);
    const char *src = static_cast<const char *>(send);
    for (int32_t r = 0; r < c->size; r++) {
      if (r == root) {
        if (len) memmove(recv, src, len);
      } else {
        post_send(*c->ctx, out[(size_t)r], r, slot, src, lens[r]);
      }
      src += lens[r];
    }
    for (int32_t r = 0; r < c->size; r++)
      if (r != root) wait_send(out[(size_t)r], d);
  });
}

void red_sum(void *c_, const void *a_, const void *b_, size_t n) {
  auto *c = static_cast<int64_t *>(c_);
  auto *a = static_cast<const int64_t *>(a_), *b = static_cast<const int64_t *>(b_);
  for (size_t i = 0; i < n; i++) c[i] = (int64_t)((uint64_t)a[i] + (uint64_t)b[i]);
}
void red_min(void *c_, const void *a_, const void *b_, size_t n) {
  auto *c = static_cast<int64_t *>(c_);
  auto *a = static_cast<const int64_t *>(a_), *b = static_cast<const int64_t *>(b_);
  for (size_t i = 0; i < n; i++) c[i] = std::min(a[i], b[i]);
}
void red_max(void *c_, const void *a_, const void *b_, size_t n) {
  auto *c = static_cast<int64_t *>(c_);
  auto *a = static_cast<const int64_t *>(a_), *b = static_cast<const int64_t *>(b_);
  for (size_t i = 0; i < n; i++) c[i] = std::max(a[i], b[i]);
}

int g_allreduce_i64(dcp_comm *c, int64_t *vals, size_t n, uint32_t op, dcp_plugin_err *err) {
  ARGCHECK(op == DCP_REDUCE_MIN || op == DCP_REDUCE_MAX || op == DCP_REDUCE_SUM,
           "unknown op %u", (unsigned)op);
  ARGCHECK(vals || !n, "vals is NULL");
  return guarded(c, err, "allreduce_i64", [&] {
    if (n == 0 || c->size == 1) return;
    gloo::AllreduceOptions o(c->ctx);
    o.setOutput(vals, n);
    o.setReduceFunction(op == DCP_REDUCE_SUM ? red_sum : op == DCP_REDUCE_MIN ? red_min : red_max);
    o.setTimeout(ms(c->timeout_ms));
    gloo::allreduce(o);
  });
}

int g_group_bcast(dcp_comm *c, const int32_t *ranks, size_t n, void *buf, size_t len,
                  int32_t root, dcp_plugin_err *err) {
  ARGCHECK(ranks && n >= 1 && n <= (size_t)c->size, "bad group (n = %zu)", n);
  ARGCHECK(buf || !len, "buf is NULL");
  bool self = false, has_root = false;
  for (size_t i = 0; i < n; i++) {
    ARGCHECK(ranks[i] >= 0 && ranks[i] < c->size, "rank %d out of range",
             (int)ranks[i]);
    ARGCHECK(i == 0 || ranks[i] > ranks[i - 1], "ranks are not ascending");
    self |= ranks[i] == c->rank;
    has_root |= ranks[i] == root;
  }
  ARGCHECK(self, "rank %d is not in the group", (int)c->rank);
  ARGCHECK(has_root, "root %d is not in the group", (int)root);
  return guarded(c, err, "group_bcast", [&] {
    if (n == 1) return;
    std::vector<int32_t> key(ranks, ranks + n);
    auto it = c->groups.find(key);
    if (it == c->groups.end()) {
      uint64_t h = 1469598103934665603ull;  // FNV-1a of the ranks
      for (int32_t r : key)
        for (int b = 0; b < 4; b++) h = (h ^ (((uint32_t)r >> (8 * b)) & 0xff)) * 1099511628211ull;
      it = c->groups.emplace(std::move(key), h).first;
    }
    uint64_t slot = slot_of(OP_GROUP, it->second);
    Deadline d(c->timeout_ms);
    if (c->rank == root) {
      std::vector<Out> out(n);
      for (size_t i = 0; i < n; i++)
        if (ranks[i] != root) post_send(*c->ctx, out[i], ranks[i], slot, buf, len);
      for (size_t i = 0; i < n; i++)
        if (ranks[i] != root) wait_send(out[i], d);
      return;
    }
    In m;
    post_recv_hdr(*c->ctx, m, root, slot, buf, len);
    bool ok = wait_hdr_post_data(*c->ctx, m, d);
    wait_data(m, d);
    if (!ok)
      fail(DCP_EINVAL, "root %d sent %llu bytes, this rank expects %zu", (int)root,
           (unsigned long long)m.hdr, len);
  });
}

const dcp_coll_plugin gloo_table = {
    DCP_PLUGIN_ABI_VERSION,
    sizeof(dcp_coll_plugin),
    "gloo",
    DCP_COLL_CAP_BULK | DCP_COLL_CAP_GROUPS,
    g_open,
    g_close,
    g_rank,
    g_size,
    g_barrier,
    g_bcast,
    g_allgather,
    g_gatherv,
    g_scatterv,
    g_allreduce_i64,
    g_group_bcast,
    g_host_id,
};

}  // namespace

extern "C" const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_COLL ? &gloo_table : nullptr;
}
