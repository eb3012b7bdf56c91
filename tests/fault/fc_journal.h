/* fc_journal.h — the power-loss journal of the fault storage plugin
 * (docs/reliability.md, "Power loss"), shared by the plugin, which writes
 * one record per mutating storage operation, and the campaign, which adds
 * marks (a save began, a save returned) and replays a prefix of it into
 * the state a power cut could leave (fc_crash.c).
 *
 * The journal is one append-only file; records are a fixed header, the
 * root path, up to two names and a payload (a write's bytes, a mark's
 * text). Beside it, <journal>.state holds an fcj_state mapped shared by
 * every process that writes the journal: the count of operations so far
 * and the "power is off" flag. Every mutating operation runs under an
 * exclusive flock of the journal file, so the operations of all processes
 * (trainer, async writer, detached ranks) have one total order, the
 * record's seq, and an operation either happened before the cut (and is
 * journaled) or never happened at all. */
#ifndef DCP_TESTS_FAULT_FC_JOURNAL_H
#define DCP_TESTS_FAULT_FC_JOURNAL_H

#include <errno.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define FCJ_MAGIC 0x314a4346u /* "FCJ1" */

enum fcj_type {
  FCJ_MKDIR = 1, /* the backend's open created the root directory */
  FCJ_OPENW,     /* file_open(name, WRITE): create, or truncate an existing file */
  FCJ_WRITE,     /* file_write: `len` bytes appended at `offset` of handle's file */
  FCJ_FSYNC,     /* file_sync of handle's file */
  FCJ_RENAME,    /* rename(name, name2), replacing name2 */
  FCJ_REMOVE,    /* remove(name) */
  FCJ_SYNCDIR,   /* sync_dir of the root */
  FCJ_MARK,      /* the campaign's note (payload: text), not an operation */
  FCJ_TYPE_END
};

typedef struct fcj_rec {
  uint32_t magic, type;
  uint64_t seq;    /* operations: 1, 2, ... in the order they happened;
                      marks: the number of operations before them */
  uint64_t handle; /* FCJ_WRITE, FCJ_FSYNC: seq of the file's FCJ_OPENW */
  uint64_t offset; /* FCJ_WRITE */
  uint64_t len;    /* payload bytes after the names */
  uint32_t n_root, n_name, n_name2;
  int32_t pid;
} fcj_rec;

/* <journal>.state, mapped MAP_SHARED. */
typedef struct fcj_state {
  uint64_t ops;  /* operations journaled so far */
  uint32_t dead; /* 1 once the cut fired: every later operation kills its process */
  uint32_t pad;
} fcj_state;

/* Write all n bytes of the iovecs (the journal fd is O_APPEND and the
 * writer holds the lock, so a record is never interleaved). 0 or -1. */
static inline int fcj_writev_all(int fd, struct iovec *iov, int cnt) {
  while (cnt > 0) {
    ssize_t w = writev(fd, iov, cnt);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    while (cnt > 0 && (size_t)w >= iov->iov_len) w -= (ssize_t)iov->iov_len, iov++, cnt--;
    if (cnt > 0) iov->iov_base = (char *)iov->iov_base + w, iov->iov_len -= (size_t)w;
  }
  return 0;
}

/* Append one record (names may be NULL). */
static inline int fcj_append(int fd, fcj_rec *h, const char *root, const char *name,
                             const char *name2, const void *payload) {
  size_t nr = 0, na = 0, nb = 0;
  while (root && root[nr]) nr++;
  while (name && name[na]) na++;
  while (name2 && name2[nb]) nb++;
  h->magic = FCJ_MAGIC;
  h->n_root = (uint32_t)nr, h->n_name = (uint32_t)na, h->n_name2 = (uint32_t)nb;
  h->pid = (int32_t)getpid();
  struct iovec iov[5] = {{h, sizeof *h},
                         {(void *)root, nr},
                         {(void *)name, na},
                         {(void *)name2, nb},
                         {(void *)payload, (size_t)h->len}};
  return fcj_writev_all(fd, iov, 5);
}

#endif
