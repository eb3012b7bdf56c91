/* cc_store.c — the rendezvous store over TCP (cc_store.h). */
#define _GNU_SOURCE
#include "cc_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cc_codec.h"
#include "cc_file.h"
#include "cc_handshake.h"
#include "dcp_plugin.h"

#define RETRY_MIN_NS 10000000LL  /* 10 ms between connection attempts at first */
#define RETRY_MAX_NS 200000000LL /* 200 ms at most */
#define SERVE_POLL_MS 20         /* the server's stop flag is looked at this often */
#define REPLY_WAIT_MS 2000       /* the most a reply may block the server */
#define EXTRA_CONNS 16           /* connections beyond the world's, for strangers */
#define MISSING_SHOWN 8

/* ---- addresses ------------------------------------------------------------ */

int dcpi_cc_split_hostport(const char *hp, char *host, uint16_t *port, dcp_plugin_err *err) {
  const char *colon, *h = hp;
  size_t hlen;
  if (!hp || !*hp) return dcp_plugin_fail(err, DCP_EINVAL, "store: empty address");
  if (hp[0] == '[') {
    const char *close = strchr(hp, ']');
    if (!close || close[1] != ':')
      return dcp_plugin_fail(err, DCP_EINVAL, "store=%s: want [ADDR]:PORT", hp);
    h = hp + 1;
    hlen = (size_t)(close - h);
    colon = close + 1;
  } else {
    colon = strrchr(hp, ':');
    if (!colon) return dcp_plugin_fail(err, DCP_EINVAL, "store=%s: want HOST:PORT", hp);
    hlen = (size_t)(colon - hp);
    if (memchr(hp, ':', hlen))
      return dcp_plugin_fail(err, DCP_EINVAL, "store=%s: an IPv6 address goes in brackets", hp);
  }
  if (hlen == 0 || hlen > DCPI_CC_HOST_MAX)
    return dcp_plugin_fail(err, DCP_EINVAL, "store=%s: the host must be 1..%d bytes", hp,
                           DCPI_CC_HOST_MAX);
  const char *p = colon + 1;
  unsigned long v = 0;
  size_t digits = strspn(p, "0123456789");
  if (digits == 0 || digits > 5 || p[digits] || (v = strtoul(p, NULL, 10)) < 1 || v > 65535)
    return dcp_plugin_fail(err, DCP_EINVAL, "store=%s: the port must be 1..65535", hp);
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  *port = (uint16_t)v;
  return DCP_OK;
}

/* getaddrinfo for host:port (TCP): DCP_OK with *res, or DCP_EINVAL. */
static int resolve(const char *host, uint16_t port, int passive, struct addrinfo **res,
                   dcp_plugin_err *err) {
  char ps[8];
  snprintf(ps, sizeof ps, "%u", (unsigned)port);
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  int rc = getaddrinfo(host, ps, &hints, res);
  if (rc != 0)
    return dcp_plugin_fail(err, DCP_EINVAL, "store host %s does not resolve: %s", host,
                           gai_strerror(rc));
  return DCP_OK;
}

/* The numeric form of a socket address into out (cap bytes). */
static void numeric(const struct sockaddr *sa, socklen_t len, char *out, size_t cap) {
  if (getnameinfo(sa, len, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
    snprintf(out, cap, "?");
}

int dcpi_cc_route_addr(const char *host, uint16_t port, char *out, size_t cap,
                       dcp_plugin_err *err) {
  struct addrinfo *res = NULL;
  int rc = resolve(host, port, 0, &res, err);
  if (rc) return rc;
  int last = 0;
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = errno;
      continue;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
      close(fd);
      numeric((struct sockaddr *)&ss, sl, out, cap);
      freeaddrinfo(res);
      return DCP_OK;
    }
    last = errno;
    close(fd);
  }
  freeaddrinfo(res);
  return dcp_plugin_fail(err, DCP_EIO, "no local address routes to the store host %s: %s", host,
                         strerror(last ? last : EHOSTUNREACH));
}

/* ---- frames --------------------------------------------------------------- */

/* Milliseconds to poll until deadline_ns, at most cap_ms (-1: none). */
static int poll_ms(int64_t deadline_ns, int cap_ms) {
  int64_t left = (deadline_ns - dcpi_cc_now_ns() + 999999) / 1000000;
  if (left < 0) left = 0;
  return cap_ms >= 0 && left > cap_ms ? cap_ms : (int)left;
}

/* Sends all len bytes on the non-blocking fd by deadline_ns: 0, or an
 * errno (ETIMEDOUT at the deadline). */
static int send_all(int fd, const unsigned char *p, size_t len, int64_t deadline_ns) {
  while (len > 0) {
    ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      len -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    struct pollfd pf = {fd, POLLOUT, 0};
    int ms = poll_ms(deadline_ns, -1);
    if (ms == 0) return ETIMEDOUT;
    if (poll(&pf, 1, ms) < 0 && errno != EINTR) return errno;
  }
  return 0;
}

/* Encodes m as a frame and sends it: 0 or an errno. */
static int send_msg(int fd, const dcpi_cc_smsg *m, int64_t deadline_ns) {
  size_t n = dcpi_cc_smsg_encode(NULL, m);
  if (!n) return EINVAL;
  unsigned char *buf = malloc(4 + n);
  if (!buf) return ENOMEM;
  dcpi_cc_put32(buf, (uint32_t)n);
  dcpi_cc_smsg_encode(buf + 4, m);
  int rc = send_all(fd, buf, 4 + n, deadline_ns);
  free(buf);
  return rc;
}

/* Receives exactly len bytes by deadline_ns: 0, an errno, or EPIPE when the
 * peer closed. */
static int recv_all(int fd, unsigned char *p, size_t len, int64_t deadline_ns) {
  while (len > 0) {
    ssize_t r = recv(fd, p, len, 0);
    if (r > 0) {
      p += r;
      len -= (size_t)r;
      continue;
    }
    if (r == 0) return EPIPE;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
    struct pollfd pf = {fd, POLLIN, 0};
    int ms = poll_ms(deadline_ns, -1);
    if (ms == 0) return ETIMEDOUT;
    if (poll(&pf, 1, ms) < 0 && errno != EINTR) return errno;
  }
  return 0;
}

/* Receives one frame into *rec (malloc'd) and decodes it into *m: 0, an
 * errno, or EPROTO when the bytes are not a store message. */
static int recv_msg(int fd, int64_t deadline_ns, unsigned char **rec, dcpi_cc_smsg *m) {
  unsigned char hdr[4];
  *rec = NULL;
  int rc = recv_all(fd, hdr, sizeof hdr, deadline_ns);
  if (rc) return rc;
  uint32_t n = dcpi_cc_get32(hdr);
  if (n < DCPI_CC_TRAILER_SIZE || n > DCPI_CC_FRAME_MAX) return EPROTO;
  unsigned char *buf = malloc(n);
  if (!buf) return ENOMEM;
  rc = recv_all(fd, buf, n, deadline_ns);
  if (!rc && dcpi_cc_smsg_decode(buf, n, "store", m, NULL) != DCPI_CC_OURS) rc = EPROTO;
  if (rc) {
    free(buf);
    return rc;
  }
  *rec = buf;
  return 0;
}

/* ---- the store ------------------------------------------------------------ */

typedef struct kv {
  unsigned char *key, *val;
  size_t klen, vlen;
} kv;

/* One connection at the server. */
typedef struct conn {
  int fd;
  int32_t rank;   /* from its hello; -1 before */
  uint64_t nonce;
  unsigned char hdr[4];
  size_t have;    /* bytes of the current frame received (header included) */
  uint32_t need;  /* the frame's record length, once the header is in */
  unsigned char *rec;
} conn;

struct dcpi_cc_store {
  dcpi_cc_store_cfg cfg;
  char host[DCPI_CC_HOST_MAX + 1], job[DCPI_CC_JOB_MAX + 1];
  uint64_t session;
  /* rank > 0: the connection */
  int fd;
  /* rank 0: the server */
  int lfd;
  int any;        /* bound every address: the store's host is not this one */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t lock; /* guards everything below */
  int stop, formed;
  conn *conns;
  size_t nconns, cap_conns;
  conn **by_rank; /* world entries: the connection that said hello as rank r */
  kv *kvs;
  size_t nkv, cap_kv;
};

uint64_t dcpi_cc_store_session(const dcpi_cc_store *s) { return s->session; }

static kv *kv_find(dcpi_cc_store *s, const void *key, size_t klen) {
  for (size_t i = 0; i < s->nkv; i++)
    if (s->kvs[i].klen == klen && !memcmp(s->kvs[i].key, key, klen)) return &s->kvs[i];
  return NULL;
}

/* Sets key under s->lock: 0 or ENOMEM. */
static int kv_set(dcpi_cc_store *s, const void *key, size_t klen, const void *val, size_t vlen) {
  unsigned char *v = malloc(vlen ? vlen : 1);
  if (!v) return ENOMEM;
  if (vlen) memcpy(v, val, vlen);
  kv *e = kv_find(s, key, klen);
  if (e) {
    free(e->val);
    e->val = v, e->vlen = vlen;
    return 0;
  }
  if (s->nkv == s->cap_kv) {
    size_t cap = s->cap_kv ? 2 * s->cap_kv : 16;
    kv *n = realloc(s->kvs, cap * sizeof *n);
    if (!n) return free(v), ENOMEM;
    s->kvs = n, s->cap_kv = cap;
  }
  unsigned char *k = malloc(klen);
  if (!k) return free(v), ENOMEM;
  memcpy(k, key, klen);
  s->kvs[s->nkv++] = (kv){k, v, klen, vlen};
  return 0;
}

/* Closes connection i (the last one takes its place). */
static void drop(dcpi_cc_store *s, size_t i) {
  conn *c = &s->conns[i];
  if (c->rank > 0 && s->by_rank[c->rank] == c) s->by_rank[c->rank] = NULL;
  close(c->fd);
  free(c->rec);
  size_t last = --s->nconns;
  if (i != last) {
    s->conns[i] = s->conns[last];
    if (s->conns[i].rank > 0 && s->by_rank[s->conns[i].rank] == &s->conns[last])
      s->by_rank[s->conns[i].rank] = &s->conns[i];
  }
}

/* Refuses the peer on c (best effort) with a reason and a text. */
static void refuse(int fd, uint32_t reason, const char *text) {
  dcpi_cc_smsg m;
  memset(&m, 0, sizeof m);
  m.op = DCPI_CC_OP_S_REFUSE;
  m.reason = reason;
  m.data = (const unsigned char *)text;
  m.data_len = strlen(text) > DCPI_CC_TEXT_MAX ? DCPI_CC_TEXT_MAX : strlen(text);
  send_msg(fd, &m, dcpi_cc_now_ns() + REPLY_WAIT_MS * 1000000LL);
}

/* Every rank has said hello: draw S and welcome each. Under s->lock. */
static void form(dcpi_cc_store *s) {
  s->session = dcpi_cc_random64();
  for (int32_t r = 1; r < s->cfg.world; r++) {
    conn *c = s->by_rank[r];
    dcpi_cc_smsg m;
    memset(&m, 0, sizeof m);
    m.op = DCPI_CC_OP_S_WELCOME;
    m.session = s->session;
    m.world = (uint32_t)s->cfg.world;
    m.rank = (uint32_t)r;
    m.nonce = c->nonce;
    send_msg(c->fd, &m, dcpi_cc_now_ns() + REPLY_WAIT_MS * 1000000LL);
  }
  s->formed = 1;
}

/* Handles the decoded message m from connection i: 0, or -1 when the
 * connection is to be dropped. Under s->lock. */
static int handle(dcpi_cc_store *s, size_t i, const dcpi_cc_smsg *m) {
  conn *c = &s->conns[i];
  char text[DCPI_CC_TEXT_MAX];
  if (m->op == DCPI_CC_OP_S_HELLO) {
    if (s->formed) {
      refuse(c->fd, DCPI_CC_REFUSE_FORMED, "the session of this store has formed already");
      return -1;
    }
    if (m->job_len != strlen(s->job) || memcmp(m->job, s->job, m->job_len) ||
        m->world != (uint32_t)s->cfg.world) {
      snprintf(text, sizeof text, "this store serves job %s with %d ranks, not job %.*s with %u",
               s->job, (int)s->cfg.world, (int)m->job_len, (const char *)m->job,
               (unsigned)m->world);
      refuse(c->fd, DCPI_CC_REFUSE_JOB, text);
      return -1;
    }
    if (m->rank < 1 || m->rank >= (uint32_t)s->cfg.world || c->rank >= 0) {
      snprintf(text, sizeof text, "rank %u is not a rank 1..%d, or said hello twice",
               (unsigned)m->rank, (int)s->cfg.world - 1);
      refuse(c->fd, DCPI_CC_REFUSE_RANK, text);
      return -1;
    }
    conn *old = s->by_rank[m->rank];
    c->rank = (int32_t)m->rank;
    c->nonce = m->nonce;
    s->by_rank[m->rank] = c;
    if (old) { /* a newer hello of this rank: the older one is stale */
      refuse(old->fd, DCPI_CC_REFUSE_REPLACED, "a newer hello of this rank replaced this one");
      old->rank = -2; /* dropped below, without touching by_rank */
      shutdown(old->fd, SHUT_RDWR);
    }
    int32_t r = 1;
    while (r < s->cfg.world && s->by_rank[r]) r++;
    if (r == s->cfg.world) form(s);
    return 0;
  }
  if (m->op == DCPI_CC_OP_S_SET || m->op == DCPI_CC_OP_S_GET) {
    if (!s->formed || m->session != s->session || c->rank < 1) {
      refuse(c->fd, DCPI_CC_REFUSE_SESSION, "a request that names no session of this store");
      return -1;
    }
    dcpi_cc_smsg v;
    memset(&v, 0, sizeof v);
    v.op = DCPI_CC_OP_S_VALUE;
    if (m->op == DCPI_CC_OP_S_SET) {
      if (kv_set(s, m->key, m->key_len, m->data, m->data_len)) return -1;
      v.present = 1;
    } else {
      kv *e = kv_find(s, m->key, m->key_len);
      if (e) v.present = 1, v.data = e->val, v.data_len = e->vlen;
    }
    return send_msg(c->fd, &v, dcpi_cc_now_ns() + REPLY_WAIT_MS * 1000000LL) ? -1 : 0;
  }
  return -1; /* a message a server never gets */
}

/* Reads what connection i has: 0, or -1 to drop it. Under s->lock. */
static int on_readable(dcpi_cc_store *s, size_t i) {
  conn *c = &s->conns[i];
  for (;;) {
    unsigned char *dst;
    size_t want;
    if (c->have < 4) {
      dst = c->hdr + c->have;
      want = 4 - c->have;
    } else {
      dst = c->rec + (c->have - 4);
      want = c->need - (c->have - 4);
    }
    ssize_t r = recv(c->fd, dst, want, 0);
    if (r == 0) return -1;
    if (r < 0) return errno == EINTR ? 0 : (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    c->have += (size_t)r;
    if (c->have == 4) {
      c->need = dcpi_cc_get32(c->hdr);
      if (c->need < DCPI_CC_TRAILER_SIZE || c->need > DCPI_CC_FRAME_MAX) return -1;
      if (c->rank < 0 && c->need > 4096) return -1; /* a hello is small */
      c->rec = malloc(c->need);
      if (!c->rec) return -1;
    }
    if (c->have < 4 || c->have - 4 < c->need) continue;
    dcpi_cc_smsg m;
    int ok = dcpi_cc_smsg_decode(c->rec, c->need, "store", &m, NULL) == DCPI_CC_OURS;
    int rc = ok ? handle(s, i, &m) : -1;
    c = &s->conns[i]; /* handle does not move connections, but be plain */
    free(c->rec);
    c->rec = NULL;
    c->have = 0;
    if (rc) return rc;
  }
}

static void *serve(void *arg) {
  dcpi_cc_store *s = arg;
  size_t cap = (size_t)s->cfg.world + EXTRA_CONNS + 1;
  struct pollfd *pf = calloc(cap, sizeof *pf);
  if (!pf) return NULL;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    if (s->stop) {
      pthread_mutex_unlock(&s->lock);
      break;
    }
    size_t n = 0;
    pf[n++] = (struct pollfd){s->lfd, POLLIN, 0};
    for (size_t i = 0; i < s->nconns; i++) pf[n++] = (struct pollfd){s->conns[i].fd, POLLIN, 0};
    pthread_mutex_unlock(&s->lock);
    int k = poll(pf, n, SERVE_POLL_MS);
    if (k <= 0) continue;
    pthread_mutex_lock(&s->lock);
    /* connections first (indices match pf[1..n) as long as none is dropped) */
    for (size_t j = n; j-- > 1;) {
      size_t i = j - 1;
      if (i >= s->nconns || !(pf[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      if (s->conns[i].rank == -2 || on_readable(s, i)) drop(s, i);
    }
    for (size_t i = s->nconns; i-- > 0;)
      if (s->conns[i].rank == -2) drop(s, i); /* replaced by a newer hello */
    if (pf[0].revents & POLLIN) {
      int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0 && s->nconns + 1 >= cap) {
        close(fd); /* more than a world and some strangers: not ours */
      } else if (fd >= 0) {
        if (s->nconns == s->cap_conns) {
          /* by_rank points into conns: cap_conns is fixed at open */
          close(fd);
        } else {
          int one = 1;
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          s->conns[s->nconns++] = (conn){.fd = fd, .rank = -1};
        }
      }
    }
    pthread_mutex_unlock(&s->lock);
  }
  free(pf);
  return NULL;
}

/* Binds and listens at host:port (every address at port when host is not
 * one of this host's). */
static int listen_at(dcpi_cc_store *s, dcp_plugin_err *err) {
  struct addrinfo *res = NULL;
  int rc = resolve(s->host, s->cfg.port, 0, &res, err);
  if (rc) return rc;
  int last = 0, fd = -1, bound_any = 0;
  for (int any = 0; any < 2 && fd < 0; any++) {
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
      struct sockaddr_storage ss;
      memcpy(&ss, a->ai_addr, a->ai_addrlen);
      if (any && a->ai_family == AF_INET)
        ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
      else if (any && a->ai_family == AF_INET6)
        ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
      fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) {
        last = errno;
        continue;
      }
      int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (bind(fd, (struct sockaddr *)&ss, a->ai_addrlen) != 0 ||
          listen(fd, s->cfg.world + EXTRA_CONNS) != 0) {
        last = errno;
        close(fd);
        fd = -1;
        if (last == EADDRINUSE) break;
      }
    }
    bound_any = fd >= 0 && any;
    if (last != EADDRNOTAVAIL) break; /* only "not an address of this host" tries any */
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    s->lfd = fd;
    s->any = bound_any;
    return DCP_OK;
  }
  if (last == EADDRINUSE)
    return dcp_plugin_fail(err, DCP_EIO,
                           "store %s:%u: the port is in use (another job, torch's own store, "
                           "or this job's other group: give each group its own port)",
                           s->host, (unsigned)s->cfg.port);
  return dcp_plugin_fail(err, DCP_EIO, "store %s:%u: cannot listen: %s", s->host,
                         (unsigned)s->cfg.port, strerror(last));
}

/* Rank 0: listens, serves, and waits until the session forms. */
static int open_root(dcpi_cc_store *s, dcp_plugin_err *err) {
  int rc = listen_at(s, err);
  if (rc) return rc;
  s->cap_conns = (size_t)s->cfg.world + EXTRA_CONNS;
  s->conns = calloc(s->cap_conns, sizeof *s->conns);
  s->by_rank = calloc((size_t)s->cfg.world, sizeof *s->by_rank);
  if (!s->conns || !s->by_rank) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  if (s->cfg.world == 1) {
    s->session = dcpi_cc_random64();
    s->formed = 1;
    return DCP_OK;
  }
  if ((rc = pthread_create(&s->thread, NULL, serve, s)))
    return dcp_plugin_fail(err, DCP_EIO, "store: cannot start its thread: %s", strerror(rc));
  s->thread_started = 1;
  for (;;) {
    pthread_mutex_lock(&s->lock);
    int formed = s->formed;
    char list[200] = "";
    size_t missing = 0, used = 0, shown = 0;
    for (int32_t r = 1; !formed && r < s->cfg.world; r++) {
      if (s->by_rank[r]) continue;
      missing++;
      if (shown < MISSING_SHOWN && used < sizeof list) {
        int k = snprintf(list + used, sizeof list - used, "%s%d", shown ? ", " : "", (int)r);
        if (k > 0) used += (size_t)k;
        shown++;
      }
    }
    pthread_mutex_unlock(&s->lock);
    if (formed) return DCP_OK;
    if (dcpi_cc_now_ns() >= s->cfg.deadline_ns)
      return dcp_plugin_fail(err, DCP_ETIMEDOUT,
                             "timed out after %lld ms waiting for rank(s) %s%s (%zu missing) to "
                             "reach the store at %s:%u%s",
                             (long long)s->cfg.timeout_ms, list, missing > shown ? ", ..." : "",
                             missing, s->host, (unsigned)s->cfg.port,
                             s->any ? " (it is not an address of this host, so rank 0 listens on "
                                      "all of its addresses: is rank 0 running on that host?)"
                                    : "");
    dcpi_cc_sleep_ns(2000000LL);
  }
}

/* One attempt of rank r > 0: connect, hello, welcome. DCP_OK, or 1 with
 * what happened in why (retry; 2 when it was a refusal or a stranger's
 * answer, worth naming even when later attempts end otherwise), or a
 * negative status. */
static int try_join(dcpi_cc_store *s, char *why, size_t cap, dcp_plugin_err *err) {
  struct addrinfo *res = NULL;
  int rc = resolve(s->host, s->cfg.port, 0, &res, err);
  if (rc) return rc;
  int fd = -1, last = ECONNREFUSED;
  for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      last = errno;
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = errno;
    } else {
      struct pollfd pf = {fd, POLLOUT, 0};
      int soerr = 0;
      socklen_t sl = sizeof soerr;
      int k = poll(&pf, 1, poll_ms(s->cfg.deadline_ns, 1000));
      if (k == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0) break;
      last = k == 1 ? soerr : ETIMEDOUT;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    snprintf(why, cap, "connect to %s:%u: %s%s", s->host, (unsigned)s->cfg.port, strerror(last),
             last == ECONNREFUSED ? " (nobody listens there: rank 0 has not opened yet, has "
                                    "finished, or runs on another host)"
                                  : "");
    return 1;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  dcpi_cc_smsg m;
  memset(&m, 0, sizeof m);
  m.op = DCPI_CC_OP_S_HELLO;
  uint64_t nonce = dcpi_cc_random64();
  m.nonce = nonce;
  m.world = (uint32_t)s->cfg.world;
  m.rank = (uint32_t)s->cfg.rank;
  m.job = (const unsigned char *)s->job;
  m.job_len = strlen(s->job);
  unsigned char *rec = NULL;
  int e = send_msg(fd, &m, s->cfg.deadline_ns);
  if (!e) e = recv_msg(fd, s->cfg.deadline_ns, &rec, &m);
  if (!e && m.op == DCPI_CC_OP_S_WELCOME && m.nonce == nonce &&
      m.world == (uint32_t)s->cfg.world && m.rank == (uint32_t)s->cfg.rank && m.session) {
    free(rec);
    s->fd = fd;
    s->session = m.session;
    return DCP_OK;
  }
  if (!e && m.op == DCPI_CC_OP_S_REFUSE)
    snprintf(why, cap, "the store at %s:%u refused this rank: %.*s", s->host,
             (unsigned)s->cfg.port, (int)m.data_len, (const char *)m.data);
  else if (!e)
    snprintf(why, cap, "the store at %s:%u sent a welcome for another rank or hello (a stranger)",
             s->host, (unsigned)s->cfg.port);
  else if (e == EPROTO)
    snprintf(why, cap, "%s:%u does not speak the store's protocol (another service there?)",
             s->host, (unsigned)s->cfg.port);
  else
    snprintf(why, cap, "the store at %s:%u: %s", s->host, (unsigned)s->cfg.port,
             e == EPIPE ? "connection closed" : strerror(e));
  free(rec);
  close(fd);
  return e && e != EPROTO ? 1 : 2;
}

/* Rank r > 0: tries until the session is joined or the deadline. */
static int open_member(dcpi_cc_store *s, dcp_plugin_err *err) {
  char why[600] = "nothing tried", notable[600] = "";
  int64_t backoff = RETRY_MIN_NS;
  for (;;) {
    int rc = try_join(s, why, sizeof why, err);
    if (rc <= 0) return rc;
    if (rc == 2) memcpy(notable, why, sizeof why);
    int64_t left = s->cfg.deadline_ns - dcpi_cc_now_ns();
    if (left <= 0)
      return dcp_plugin_fail(err, DCP_ETIMEDOUT,
                             "timed out after %lld ms joining the store of rank 0 at %s:%u; "
                             "last: %s%s%s",
                             (long long)s->cfg.timeout_ms, s->host, (unsigned)s->cfg.port, why,
                             notable[0] && strcmp(notable, why) ? "; before: " : "",
                             notable[0] && strcmp(notable, why) ? notable : "");
    dcpi_cc_sleep_ns(backoff < left ? backoff : left);
    if (backoff < RETRY_MAX_NS) backoff *= 2;
  }
}

int dcpi_cc_store_open(const dcpi_cc_store_cfg *cfg, dcpi_cc_store **out, dcp_plugin_err *err) {
  *out = NULL;
  if (!cfg->host || strlen(cfg->host) > DCPI_CC_HOST_MAX || !cfg->host[0] || !cfg->port)
    return dcp_plugin_fail(err, DCP_EINVAL, "store: bad host or port");
  if (!cfg->job || !cfg->job[0] || strlen(cfg->job) > DCPI_CC_JOB_MAX)
    return dcp_plugin_fail(err, DCP_EINVAL, "store: bad job name");
  if (cfg->world < 1 || cfg->world > DCPI_CC_WORLD_MAX || cfg->rank < 0 || cfg->rank >= cfg->world)
    return dcp_plugin_fail(err, DCP_EINVAL, "store: rank %d / world %d out of range",
                           (int)cfg->rank, (int)cfg->world);
  dcpi_cc_store *s = calloc(1, sizeof *s);
  if (!s) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  s->cfg = *cfg;
  snprintf(s->host, sizeof s->host, "%s", cfg->host);
  snprintf(s->job, sizeof s->job, "%s", cfg->job);
  s->cfg.host = s->host;
  s->cfg.job = s->job;
  s->fd = s->lfd = -1;
  pthread_mutex_init(&s->lock, NULL);
  int rc = cfg->rank == 0 ? open_root(s, err) : open_member(s, err);
  if (rc) {
    dcpi_cc_store_close(s);
    return rc;
  }
  *out = s;
  return DCP_OK;
}

/* A request of rank r > 0 and its answer (a value message). */
static int request(dcpi_cc_store *s, const dcpi_cc_smsg *m, unsigned char **val, size_t *vlen,
                   dcp_plugin_err *err) {
  unsigned char *rec = NULL;
  dcpi_cc_smsg a;
  int e = send_msg(s->fd, m, s->cfg.deadline_ns);
  if (!e) e = recv_msg(s->fd, s->cfg.deadline_ns, &rec, &a);
  if (e == ETIMEDOUT)
    return dcp_plugin_fail(err, DCP_ETIMEDOUT, "timed out after %lld ms waiting for the store at %s:%u",
                           (long long)s->cfg.timeout_ms, s->host, (unsigned)s->cfg.port);
  if (e == ENOMEM) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  if (e || a.op != DCPI_CC_OP_S_VALUE) {
    int refused = !e && a.op == DCPI_CC_OP_S_REFUSE;
    dcp_plugin_fail(err, DCP_EPEER, "the store at %s:%u: %s%.*s", s->host, (unsigned)s->cfg.port,
                    refused ? "refused: " : e ? strerror(e == EPIPE ? ECONNRESET : e)
                                              : "an unexpected answer",
                    refused ? (int)a.data_len : 0, refused ? (const char *)a.data : "");
    free(rec);
    return DCP_EPEER;
  }
  int present = (int)a.present;
  if (val && present) {
    *val = malloc(a.data_len ? a.data_len : 1);
    if (!*val) {
      free(rec);
      return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
    }
    if (a.data_len) memcpy(*val, a.data, a.data_len);
    *vlen = a.data_len;
  }
  free(rec);
  return present;
}

int dcpi_cc_store_set(dcpi_cc_store *s, const void *key, size_t klen, const void *val,
                      size_t vlen, dcp_plugin_err *err) {
  if (klen < 1 || klen > DCPI_CC_KEY_MAX || vlen > DCPI_CC_FRAME_MAX - DCPI_CC_KEY_MAX - 64)
    return dcp_plugin_fail(err, DCP_EINVAL, "store: key of %zu or value of %zu bytes", klen, vlen);
  if (s->cfg.rank == 0) {
    pthread_mutex_lock(&s->lock);
    int e = kv_set(s, key, klen, val, vlen);
    pthread_mutex_unlock(&s->lock);
    return e ? dcp_plugin_fail(err, DCP_ENOMEM, "out of memory") : DCP_OK;
  }
  dcpi_cc_smsg m;
  memset(&m, 0, sizeof m);
  m.op = DCPI_CC_OP_S_SET;
  m.session = s->session;
  m.key = key, m.key_len = klen;
  m.data = val, m.data_len = vlen;
  int rc = request(s, &m, NULL, NULL, err);
  return rc < 0 ? rc : DCP_OK;
}

int dcpi_cc_store_get(dcpi_cc_store *s, const void *key, size_t klen, unsigned char **val,
                      size_t *vlen, dcp_plugin_err *err) {
  *val = NULL;
  *vlen = 0;
  if (klen < 1 || klen > DCPI_CC_KEY_MAX)
    return dcp_plugin_fail(err, DCP_EINVAL, "store: key of %zu bytes", klen);
  if (s->cfg.rank == 0) {
    pthread_mutex_lock(&s->lock);
    kv *e = kv_find(s, key, klen);
    int present = e != NULL;
    if (e) {
      *val = malloc(e->vlen ? e->vlen : 1);
      if (*val && e->vlen) memcpy(*val, e->val, e->vlen);
      *vlen = e->vlen;
    }
    pthread_mutex_unlock(&s->lock);
    if (present && !*val) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
    return present;
  }
  dcpi_cc_smsg m;
  memset(&m, 0, sizeof m);
  m.op = DCPI_CC_OP_S_GET;
  m.session = s->session;
  m.key = key, m.key_len = klen;
  return request(s, &m, val, vlen, err);
}

void dcpi_cc_store_close(dcpi_cc_store *s) {
  if (!s) return;
  if (s->thread_started) {
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
  }
  for (size_t i = 0; i < s->nconns; i++) {
    close(s->conns[i].fd);
    free(s->conns[i].rec);
  }
  for (size_t i = 0; i < s->nkv; i++) free(s->kvs[i].key), free(s->kvs[i].val);
  if (s->lfd >= 0) close(s->lfd);
  if (s->fd >= 0) close(s->fd);
  free(s->conns);
  free(s->by_rank);
  free(s->kvs);
  pthread_mutex_destroy(&s->lock);
  free(s);
}
