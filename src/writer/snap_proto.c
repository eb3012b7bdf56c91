/* snap_proto.c — the memory tier's rendezvous (an abstract unix socket per
 * user, job and rank) and the payloads of its messages (snapshot.h). */
#define _GNU_SOURCE /* struct ucred */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/wire.h"
#include "writer/snapshot.h"

#define NAME_MAX_LEN 200u  /* job strings and file names are bounded */
#define PATH_MAX_LEN 4096u
#define FILES_MAX 4096u

void dcpi_snap_name(char *out, size_t cap, const char *job, int32_t rank, uid_t uid) {
  const char *j = job ? job : "";
  snprintf(out, cap, "dcp-mem.%u.%016llx.%d", (unsigned)uid,
           (unsigned long long)XXH3_64bits(j, strlen(j)), (int)rank);
}

/* The address of name in the abstract namespace, and its length. */
static socklen_t address(const char *name, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (n > sizeof a->sun_path - 2) n = sizeof a->sun_path - 2;
  memcpy(a->sun_path + 1, name, n); /* sun_path[0] == 0: abstract */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

dcp_status dcpi_snap_listen(const char *name, int *fd, dcpi_err *err) {
  struct sockaddr_un a;
  socklen_t alen = address(name, &a);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return dcpi_fail(err, DCP_EIO, "snapshot socket: %s", strerror(errno));
  if (bind(s, (struct sockaddr *)&a, alen) != 0 || listen(s, 16) != 0) {
    int e = errno;
    close(s);
    return dcpi_fail(err, e == EADDRINUSE ? DCP_EBUSY : DCP_EIO, "snapshot socket @%s: %s",
                     name, strerror(e));
  }
  *fd = s;
  return DCP_OK;
}

dcp_status dcpi_snap_connect(const char *name, int64_t timeout_ms, int *fd, dcpi_err *err) {
  struct sockaddr_un a;
  socklen_t alen = address(name, &a);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return dcpi_fail(err, DCP_EIO, "snapshot socket: %s", strerror(errno));
  struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (connect(s, (struct sockaddr *)&a, alen) != 0) {
    int e = errno;
    close(s);
    return dcpi_fail(err, e == ECONNREFUSED || e == ENOENT ? DCP_ENOTFOUND : DCP_EIO,
                     "no writer at @%s: %s", name, strerror(e));
  }
  struct ucred cred;
  socklen_t clen = sizeof cred;
  if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != getuid()) {
    close(s);
    return dcpi_fail(err, DCP_EPEER, "the process at @%s is not this user's", name);
  }
  *fd = s;
  return DCP_OK;
}

/* ---- payloads ------------------------------------------------------------ */

/* A string: its length as a varint, then its bytes (no NUL). */
static void put_text(dcpi_wbuf *w, const char *s) {
  size_t n = s ? strlen(s) : 0;
  dcpi_w_varint(w, n);
  dcpi_w_bytes(w, s, n);
}

/* The reading side: the first failure sticks, the rest is skipped. */
typedef struct cursor {
  dcpi_rbuf r;
  dcp_status rc;
  dcpi_err *err;
} cursor;

static bool bad(cursor *c, const char *what) {
  if (!c->rc) c->rc = dcpi_fail(c->err, DCP_ECORRUPT, "snapshot message: bad %s", what);
  return false;
}

static uint64_t get_num(cursor *c, uint64_t max, const char *what) {
  uint64_t v = 0;
  if (!c->rc && (!dcpi_r_varint(&c->r, &v) || v > max)) bad(c, what);
  return c->rc ? 0 : v;
}

static char *get_text(cursor *c, size_t max, const char *what) {
  uint64_t n = get_num(c, max, what);
  if (c->rc) return NULL;
  if (n > dcpi_r_left(&c->r)) return bad(c, what), NULL;
  const char *at = (const char *)c->r.p + c->r.pos;
  if (memchr(at, '\0', (size_t)n)) return bad(c, what), NULL;
  char *s = malloc((size_t)n + 1);
  if (!s) {
    c->rc = dcpi_fail(c->err, DCP_ENOMEM, "out of memory");
    return NULL;
  }
  memcpy(s, at, (size_t)n);
  s[n] = '\0';
  c->r.pos += (size_t)n;
  return s;
}

static dcp_status finish(cursor *c) {
  if (!c->rc && dcpi_r_left(&c->r)) bad(c, "length (trailing bytes)");
  return c->rc;
}

static dcp_status take(dcpi_wbuf *w, uint8_t **out, size_t *len) {
  if (w->status) {
    dcpi_wbuf_free(w);
    return DCP_ENOMEM;
  }
  *out = w->data;
  *len = w->len;
  return DCP_OK;
}

dcp_status dcpi_snap_req_encode(const dcpi_snap_req *q, uint8_t **out, size_t *len) {
  dcpi_wbuf w = {0};
  put_text(&w, q->job);
  put_text(&w, q->path);
  dcpi_w_zigzag(&w, q->rank);
  dcpi_w_zigzag(&w, q->origin);
  dcpi_w_u64(&w, q->meta_hash);
  return take(&w, out, len);
}

dcp_status dcpi_snap_req_decode(const uint8_t *p, size_t len, dcpi_snap_req *q, dcpi_err *err) {
  cursor c = {{p, len, 0}, DCP_OK, err};
  memset(q, 0, sizeof *q);
  q->job = get_text(&c, NAME_MAX_LEN, "job");
  q->path = get_text(&c, PATH_MAX_LEN, "path");
  int64_t rank = 0, origin = 0;
  if (!c.rc && (!dcpi_r_zigzag(&c.r, &rank) || rank < 0 || rank > INT32_MAX)) bad(&c, "rank");
  if (!c.rc && (!dcpi_r_zigzag(&c.r, &origin) || origin < 0 || origin > INT32_MAX))
    bad(&c, "origin");
  if (!c.rc && !dcpi_r_u64(&c.r, &q->meta_hash)) bad(&c, "metadata hash");
  q->rank = (int32_t)rank;
  q->origin = (int32_t)origin;
  if (finish(&c)) dcpi_snap_req_free(q);
  return c.rc;
}

void dcpi_snap_req_free(dcpi_snap_req *q) {
  free(q->job);
  free(q->path);
  memset(q, 0, sizeof *q);
}

dcp_status dcpi_snap_reply_encode(const dcpi_snap_reply *r, uint8_t **out, size_t *len) {
  dcpi_wbuf w = {0};
  put_text(&w, r->job);
  dcpi_w_zigzag(&w, r->rank);
  dcpi_w_varint(&w, r->uid);
  dcpi_w_varint(&w, r->state);
  dcpi_w_u64(&w, r->meta_hash);
  dcpi_w_varint(&w, r->size);
  dcpi_w_varint(&w, r->nfiles);
  for (size_t i = 0; i < r->nfiles; i++) {
    put_text(&w, r->files[i].name);
    dcpi_w_varint(&w, r->files[i].offset);
    dcpi_w_varint(&w, r->files[i].length);
  }
  return take(&w, out, len);
}

/* File i of the reply: a name, and a range inside the memfd. */
static void get_file(cursor *c, dcpi_snap_reply *r, size_t i) {
  dcpi_snap_file *f = &r->files[i];
  f->name = get_text(c, NAME_MAX_LEN, "file name");
  f->offset = get_num(c, r->size, "file offset");
  f->length = get_num(c, r->size - f->offset, "file length");
}

dcp_status dcpi_snap_reply_decode(const uint8_t *p, size_t len, dcpi_snap_reply *r,
                                  dcpi_err *err) {
  cursor c = {{p, len, 0}, DCP_OK, err};
  memset(r, 0, sizeof *r);
  r->job = get_text(&c, NAME_MAX_LEN, "job");
  int64_t rank = 0;
  if (!c.rc && (!dcpi_r_zigzag(&c.r, &rank) || rank < 0 || rank > INT32_MAX)) bad(&c, "rank");
  r->rank = (int32_t)rank;
  r->uid = (uint32_t)get_num(&c, UINT32_MAX, "uid");
  r->state = (uint32_t)get_num(&c, DCP_MEMTIER_REFUSED, "state");
  if (!c.rc && !dcpi_r_u64(&c.r, &r->meta_hash)) bad(&c, "metadata hash");
  r->size = get_num(&c, UINT64_MAX >> 1, "size");
  uint64_t n = get_num(&c, FILES_MAX, "file count");
  if (!c.rc && n && !(r->files = calloc((size_t)n, sizeof *r->files)))
    c.rc = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  if (!c.rc) r->nfiles = (size_t)n;
  for (size_t i = 0; !c.rc && i < r->nfiles; i++) get_file(&c, r, i);
  if (finish(&c)) dcpi_snap_reply_free(r);
  return c.rc;
}

void dcpi_snap_reply_free(dcpi_snap_reply *r) {
  for (size_t i = 0; i < r->nfiles; i++) free(r->files[i].name);
  free(r->files);
  free(r->job);
  memset(r, 0, sizeof *r);
}
