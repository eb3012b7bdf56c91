/* proto_io.c — sending and receiving whole writer-protocol frames over a
 * stream socket, with a descriptor passed as SCM_RIGHTS. */
#define _GNU_SOURCE /* MSG_CMSG_CLOEXEC */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "writer/proto.h"

/* sendmsg of hdr (+ fd) then the rest of buf, retrying on EINTR and short
 * writes. */
static dcp_status send_all(int sock, const uint8_t *p, size_t len, int fd_pass, dcpi_err *err) {
  size_t done = 0;
  while (done < len) {
    struct iovec iov = {.iov_base = (void *)(p + done), .iov_len = len - done};
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd_pass >= 0 && done == 0) {
      memset(&ctl, 0, sizeof ctl);
      m.msg_control = ctl.buf;
      m.msg_controllen = sizeof ctl.buf;
      struct cmsghdr *c = CMSG_FIRSTHDR(&m);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(c), &fd_pass, sizeof(int));
    }
    ssize_t n = sendmsg(sock, &m, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      return dcpi_fail(err, DCP_EPEER, "writer protocol: peer closed the socket");
    if (n < 0) return dcpi_fail(err, DCP_EIO, "writer protocol: send: %s", strerror(errno));
    done += (size_t)n;
  }
  return DCP_OK;
}

dcp_status dcpi_wp_send(int sock, uint16_t type, const uint8_t *p, size_t len, int fd_pass,
                        dcpi_err *err) {
  uint8_t *frame = malloc(DCPI_WP_HEADER + len);
  if (!frame) return dcpi_fail(err, DCP_ENOMEM, "out of memory for a %zu-byte frame", len);
  dcpi_wp_header(frame, type, p, len);
  if (len) memcpy(frame + DCPI_WP_HEADER, p, len);
  dcp_status rc = send_all(sock, frame, DCPI_WP_HEADER + len, fd_pass, err);
  free(frame);
  return rc;
}

/* Keep the first passed descriptor in *fd (when wanted); close any other. */
static void take_fds(struct msghdr *m, int *fd) {
  for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (fd && *fd < 0) *fd = f;
      else close(f);
    }
  }
}

/* Read exactly len bytes (descriptors picked up on the way). *got counts
 * what was read, so the caller tells a clean EOF from a torn frame. */
static dcp_status recv_all(int sock, uint8_t *p, size_t len, int *fd, size_t *got,
                           dcpi_err *err) {
  *got = 0;
  while (*got < len) {
    struct iovec iov = {.iov_base = p + *got, .iov_len = len - *got};
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(4 * sizeof(int))];
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                       .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ECONNRESET) n = 0;
    if (n < 0) return dcpi_fail(err, DCP_EIO, "writer protocol: recv: %s", strerror(errno));
    take_fds(&m, fd);
    if (n == 0) return dcpi_fail(err, DCP_EPEER, "writer protocol: peer closed the socket");
    *got += (size_t)n;
  }
  return DCP_OK;
}

dcp_status dcpi_wp_recv(int sock, uint16_t *type, uint8_t **p, size_t *len, int *fd,
                        dcpi_err *err) {
  uint8_t hdr[DCPI_WP_HEADER];
  size_t got;
  uint64_t n;
  *p = NULL;
  if (fd) *fd = -1;
  dcp_status rc = recv_all(sock, hdr, sizeof hdr, fd, &got, err);
  if (rc == DCP_EPEER && got == 0) return dcpi_fail(err, DCP_ENOTFOUND, "end of stream");
  if (!rc) rc = dcpi_wp_check_header(hdr, type, &n, err);
  if (!rc && !(*p = malloc(n ? (size_t)n : 1))) rc = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  if (!rc) rc = recv_all(sock, *p, (size_t)n, fd, &got, err);
  if (!rc) rc = dcpi_wp_check_payload(hdr, *p, (size_t)n, err);
  if (rc) {
    free(*p);
    *p = NULL;
    if (fd && *fd >= 0) close(*fd), *fd = -1;
    return rc;
  }
  *len = (size_t)n;
  return DCP_OK;
}
