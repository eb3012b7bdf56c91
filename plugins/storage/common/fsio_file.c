/*
 * fsio_file.c — open files of the shared file-system engine: sequential
 * appends (through an aligned staging buffer when O_DIRECT is on),
 * thread-safe positional reads, fsync, and recovery from transient errors.
 *
 * O_DIRECT needs aligned offsets, lengths and buffers. Writes therefore go
 * into a posix_memalign'ed staging buffer whose size is a multiple of
 * FSIO_ALIGN and leave it as whole aligned blocks at aligned offsets; the
 * unaligned tail (at sync or close) is written with O_DIRECT cleared
 * (fcntl) and kept staged, so the next block write still starts aligned and
 * simply rewrites those bytes. Reads with O_DIRECT go through a bounce
 * buffer covering the aligned range around the request.
 */
#define _GNU_SOURCE /* O_DIRECT */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsio.h"

/* Largest single transfer: Linux moves at most ~2 GiB per call anyway; an
 * aligned 1 GiB keeps O_DIRECT continuations aligned. */
#define XFER_MAX ((size_t)1 << 30)

struct dcp_storage_file {
  fsio_core *c;
  uint32_t mode;          /* DCP_FILE_READ or DCP_FILE_WRITE */
  int fd;                 /* replaced only by reopen(), under the write lock */
  atomic_int direct;      /* O_DIRECT currently set on fd */
  int want_direct;        /* write side: re-enable O_DIRECT after a tail write */
  pthread_rwlock_t lock;  /* readers share fd; a reopen after ESTALE excludes them */
  unsigned gen;           /* bumped by every reopen, so racing readers reopen once */
  int failed;             /* write side: sticky status of a failed write */
  uint64_t off;           /* write side without staging: next append offset */
  uint64_t wb_off;        /* write side without staging: writeback started below this */
  int wb_off_ok;          /* 0 once sync_file_range is refused: no early writeback */
  unsigned char *stage;   /* write side with O_DIRECT: staging buffer, else NULL */
  size_t stage_len;       /* bytes staged */
  size_t stage_synced;    /* leading staged bytes already written (a tail) */
  uint64_t stage_off;     /* file offset of stage[0], aligned while direct */
  char name[FSIO_NAME_MAX + 1];
};

typedef enum { XFER_READ, XFER_WRITE, XFER_SYNC } xfer_kind;

/* ---- opening ----------------------------------------------------------------- */

/* After open: only regular files are ours (a planted fifo, device or
 * directory is refused), and O_NONBLOCK — there only so that opening a
 * fifo cannot hang — is cleared again. */
static int check_regular(fsio_core *c, int fd, const char *name, dcp_plugin_err *err) {
  struct stat sb;
  int e = fstat(fd, &sb) ? errno : 0;
  if (!e && !S_ISREG(sb.st_mode)) {
    char path[FSIO_PATH_MAX];
    c->ops->path_of(c, name, path, sizeof path);
    close(fd);
    return dcp_plugin_fail(err, DCP_EIO, "open %s: not a regular file", path);
  }
  int fl = e ? -1 : fcntl(fd, F_GETFL);
  if (!e && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)) e = errno;
  if (!e) return DCP_OK;
  close(fd);
  return fsio_fail_errno(c, err, e, "open", name);
}

/* The refusal of a symlink inside the checkpoint directory: DCP_EIO with
 * a message that says what it is, so nobody goes looking for a loop. */
static int symlink_error(fsio_core *c, const char *name, dcp_plugin_err *err) {
  char path[FSIO_PATH_MAX];
  c->ops->path_of(c, name, path, sizeof path);
  return dcp_plugin_fail(err, DCP_EIO,
                         "open %s: is a symbolic link; libdcp never follows links inside a "
                         "checkpoint directory (the directory itself may be one)",
                         path);
}

/* See fsio.h. O_NOFOLLOW: a symlink planted in the checkpoint directory is
 * refused (ELOOP, reported as "is a symbolic link", DCP_EIO) instead of
 * followed out of it, also with O_CREAT | O_TRUNC: its target is never
 * created, truncated or written. EINVAL with O_DIRECT is
 * the file system declining unbuffered I/O (tmpfs before Linux 6.6, some
 * FUSE and network file systems): we count it and go on buffered. */
int fsio_open_at(fsio_core *c, int dirfd, const char *name, int flags, int *direct, int *fd,
                 dcp_plugin_err *err) {
  unsigned attempt = 0;
  flags |= O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  for (;;) {
    int e = fsio_inject(c, FSIO_SITE_OPEN);
    if (!e) {
      *fd = openat(dirfd, name, flags | (*direct ? O_DIRECT : 0), 0666);
      if (*fd >= 0) return check_regular(c, *fd, name, err);
      e = errno;
    }
    *fd = -1;
    if (e == EINVAL && *direct) {
      *direct = 0;
      fsio_count(&c->stats.direct_fallbacks, 1);
      continue;
    }
    if (e == ELOOP && fsio_is_symlink_at(dirfd, name)) return symlink_error(c, name, err);
    if (!fsio_retry(c, e, &attempt)) return fsio_fail_errno(c, err, e, "open", name);
  }
}

/* Replace a stale fd with a fresh open of the same name (close-to-open:
 * the new handle sees the file as the server has it now). Only the first
 * of several racing threads reopens; the others see gen moved on. */
static int reopen(dcp_storage_file *f, unsigned gen, dcp_plugin_err *err) {
  int rc = DCP_OK;
  pthread_rwlock_wrlock(&f->lock);
  if (f->gen == gen) {
    int dirfd, fd, direct = atomic_load(&f->direct);
    rc = f->c->ops->dir_of(f->c, f->name, 0, &dirfd, err);
    int flags = f->mode == DCP_FILE_WRITE ? O_WRONLY : O_RDONLY;
    if (!rc) rc = fsio_open_at(f->c, dirfd, f->name, flags, &direct, &fd, err);
    if (!rc) {
      close(f->fd);
      f->fd = fd;
      atomic_store(&f->direct, direct);
      if (!direct) f->want_direct = 0;
      f->gen++;
      fsio_count(&f->c->stats.reopens, 1);
    }
  }
  pthread_rwlock_unlock(&f->lock);
  return rc;
}

/* Set or clear O_DIRECT on the open fd. */
static int set_direct(dcp_storage_file *f, int on, dcp_plugin_err *err) {
  pthread_rwlock_wrlock(&f->lock);
  int fl = fcntl(f->fd, F_GETFL);
  int e = fl < 0 ? errno : 0;
  if (!e && fcntl(f->fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) < 0) e = errno;
  if (!e) atomic_store(&f->direct, on);
  pthread_rwlock_unlock(&f->lock);
  return e ? fsio_fail_errno(f->c, err, e, "fcntl O_DIRECT", f->name) : DCP_OK;
}

/* ---- transfers with retries --------------------------------------------------- */

/* One system call on the current fd, under the shared lock so a reopen
 * cannot close the fd (and the number be reused) under our feet. */
static ssize_t xfer_once(dcp_storage_file *f, xfer_kind k, void *p, size_t n, uint64_t off,
                         unsigned *gen, int *e) {
  pthread_rwlock_rdlock(&f->lock);
  *gen = f->gen;
  ssize_t r = -1;
  *e = fsio_inject(f->c, FSIO_SITE_IO);
  if (!*e) {
    if (k == XFER_READ)
      r = pread(f->fd, p, n, (off_t)off);
    else if (k == XFER_WRITE)
      r = pwrite(f->fd, p, n, (off_t)off);
    else
      r = fsync(f->fd);
    *e = r < 0 ? errno : 0;
  }
  pthread_rwlock_unlock(&f->lock);
  return r;
}

/* After errno e: EINVAL with O_DIRECT set means the file system refuses it
 * for this I/O, so drop to buffered and go on; ESTALE (shared FS) means a
 * fresh open; other transients just back off. 0 to try again. */
static int xfer_recover(dcp_storage_file *f, int e, unsigned gen, unsigned *attempt,
                        const char *op, dcp_plugin_err *err) {
  if (e == EINVAL && atomic_load(&f->direct)) {
    fsio_count(&f->c->stats.direct_fallbacks, 1);
    f->want_direct = 0;
    return set_direct(f, 0, err);
  }
  if (!fsio_retry(f->c, e, attempt)) return fsio_fail_errno(f->c, err, e, op, f->name);
  return e == ESTALE ? reopen(f, gen, err) : DCP_OK;
}

/* Move len bytes at off, looping over partial transfers. Returns the bytes
 * moved (fewer only when a read meets end of file) or a negative status. */
static int64_t xfer(dcp_storage_file *f, xfer_kind k, void *buf, size_t len, uint64_t off,
                    dcp_plugin_err *err) {
  const char *op = k == XFER_READ ? "read" : "write";
  if (off > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - off)
    return fsio_fail_errno(f->c, err, EFBIG, op, f->name);
  size_t done = 0;
  unsigned attempt = 0, gen;
  while (done < len) {
    size_t n = len - done < XFER_MAX ? len - done : XFER_MAX;
    int e;
    ssize_t r = xfer_once(f, k, (char *)buf + done, n, off + done, &gen, &e);
    if (r > 0) {
      done += (size_t)r;
      /* a short O_DIRECT read that leaves us unaligned is the end of file */
      if (k == XFER_READ && atomic_load(&f->direct) && done % FSIO_ALIGN) break;
      continue;
    }
    if (r == 0 && k == XFER_READ) break;
    if (r == 0) return fsio_fail_errno(f->c, err, EIO, "write (no progress)", f->name);
    int rc = xfer_recover(f, e, gen, &attempt, op, err);
    if (rc) return rc;
  }
  return (int64_t)done;
}

/* fsync the file, with the same recovery as transfers. */
static int sync_fd(dcp_storage_file *f, dcp_plugin_err *err) {
  unsigned attempt = 0, gen;
  for (;;) {
    int e;
    if (xfer_once(f, XFER_SYNC, NULL, 0, 0, &gen, &e) == 0) return DCP_OK;
    int rc = xfer_recover(f, e, gen, &attempt, "fsync", err);
    if (rc) return rc;
  }
}

/* Write all of p at off. */
static int write_at(dcp_storage_file *f, const void *p, size_t n, uint64_t off,
                    dcp_plugin_err *err) {
  int64_t r = xfer(f, XFER_WRITE, (void *)p, n, off, err);
  return r < 0 ? (int)r : DCP_OK;
}

/* ---- early writeback ----------------------------------------------------------- */

/* Buffered appends start the page cache's writeback of every WRITEBACK_STEP
 * bytes as soon as they are written (sync_file_range WRITE: queue the
 * dirty pages for the disk, do not wait), so the disk works while later
 * bytes are still being copied in, and the final fsync finds little left
 * instead of the whole file. Without it nothing is written back until the
 * fsync, unless the file passes the kernel's dirty thresholds. */
#define WRITEBACK_STEP ((uint64_t)32 << 20)

/* Start writeback of [wb_off, off) rounded down to whole steps. Only a
 * head start: errors surface at fsync, which waits for every page; a file
 * system or kernel that refuses the call (ENOSYS, EINVAL, ESPIPE) turns it
 * off for the file. */
static void writeback_start(dcp_storage_file *f) {
  if (!f->wb_off_ok || f->off - f->wb_off < WRITEBACK_STEP) return;
  uint64_t end = f->off - (f->off - f->wb_off) % WRITEBACK_STEP;
#ifdef SYNC_FILE_RANGE_WRITE
  pthread_rwlock_rdlock(&f->lock);
  int r = sync_file_range(f->fd, (off_t)f->wb_off, (off_t)(end - f->wb_off),
                          SYNC_FILE_RANGE_WRITE);
  int e = r ? errno : 0;
  pthread_rwlock_unlock(&f->lock);
  if (e == ENOSYS || e == EINVAL || e == ESPIPE || e == EOPNOTSUPP) f->wb_off_ok = 0;
#else
  f->wb_off_ok = 0;
#endif
  f->wb_off = end;
}

/* ---- staging ------------------------------------------------------------------ */

/* Write the staged tail (less than one block) through the page cache:
 * O_DIRECT cannot write it. It stays staged; stage_synced remembers it is
 * on file. When the file stays open, O_DIRECT is set again for the blocks
 * to come. */
static int write_tail(dcp_storage_file *f, int closing, dcp_plugin_err *err) {
  int rc = atomic_load(&f->direct) ? set_direct(f, 0, err) : DCP_OK;
  if (!rc) rc = write_at(f, f->stage, f->stage_len, f->stage_off, err);
  if (!rc && !closing && f->want_direct) rc = set_direct(f, 1, err);
  if (!rc) f->stage_synced = f->stage_len;
  return rc;
}

/* Write out everything staged: whole blocks with O_DIRECT (all of it once
 * O_DIRECT was dropped), then the tail if it is not on file yet. */
static int stage_drain(dcp_storage_file *f, int closing, dcp_plugin_err *err) {
  size_t whole = f->stage_len;
  if (atomic_load(&f->direct)) whole &= ~(size_t)(FSIO_ALIGN - 1);
  if (whole) {
    int rc = write_at(f, f->stage, whole, f->stage_off, err);
    if (rc) return rc;
    memmove(f->stage, f->stage + whole, f->stage_len - whole);
    f->stage_len -= whole;
    f->stage_off += whole;
    f->stage_synced = 0; /* a tail is shorter than a block: it went with it */
  }
  return f->stage_len > f->stage_synced ? write_tail(f, closing, err) : DCP_OK;
}

/* Append to the staging buffer, writing it out each time it fills. */
static int stage_put(dcp_storage_file *f, const unsigned char *p, size_t len,
                     dcp_plugin_err *err) {
  size_t cap = f->c->stage_size;
  while (len > 0) {
    size_t n = cap - f->stage_len < len ? cap - f->stage_len : len;
    memcpy(f->stage + f->stage_len, p, n);
    f->stage_len += n;
    p += n;
    len -= n;
    if (f->stage_len == cap) {
      int rc = stage_drain(f, 0, err);
      if (rc) return rc;
    }
  }
  return DCP_OK;
}

/* ---- table functions ---------------------------------------------------------- */

/* Allocate the file object around an open fd. */
static int file_new(fsio_core *c, const char *name, uint32_t mode, int fd, int direct,
                    dcp_storage_file **out, dcp_plugin_err *err) {
  dcp_storage_file *f = calloc(1, sizeof *f);
  void *stage = NULL;
  int no_stage = mode == DCP_FILE_WRITE && direct &&
                 posix_memalign(&stage, FSIO_ALIGN, c->stage_size) != 0;
  if (no_stage) stage = NULL; /* unspecified after a failure */
  if (!f || no_stage || pthread_rwlock_init(&f->lock, NULL) != 0) {
    free(stage);
    free(f);
    close(fd);
    return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory opening %s", name);
  }
  f->c = c;
  f->mode = mode;
  f->fd = fd;
  atomic_init(&f->direct, direct);
  f->want_direct = direct;
  f->stage = stage;
  f->wb_off_ok = mode == DCP_FILE_WRITE && !stage;
  memcpy(f->name, name, strlen(name) + 1);
  *out = f;
  return DCP_OK;
}

/* Open name for writing from empty. An existing file with other hard
 * links (planted to point at a file outside the checkpoint, or a snapshot
 * made with `cp -l` / `rsync --link-dest`) is not truncated through: its
 * name is unlinked and a fresh file created in its place, so the other
 * names keep their bytes. (Not O_EXCL: some file systems create the file
 * before refusing O_DIRECT, and the buffered retry must find it.) A name
 * that is linked again in between is refused. Symlinks are refused by
 * fsio_open_at. */
static int open_for_write(fsio_core *c, int dirfd, const char *name, int *direct, int *fd,
                          dcp_plugin_err *err) {
  for (int attempt = 0;; attempt++) {
    int rc = fsio_open_at(c, dirfd, name, O_WRONLY | O_CREAT, direct, fd, err);
    if (rc) return rc;
    struct stat sb;
    int e = fstat(*fd, &sb) ? errno : 0;
    if (!e && sb.st_nlink <= 1) {
      if (sb.st_size == 0 || ftruncate(*fd, 0) == 0) return DCP_OK;
      e = errno;
    }
    close(*fd);
    *fd = -1;
    if (e) return fsio_fail_errno(c, err, e, "truncate", name);
    if (attempt > 0) {
      char path[FSIO_PATH_MAX];
      c->ops->path_of(c, name, path, sizeof path);
      return dcp_plugin_fail(err, DCP_EIO, "open %s: has other hard links again after unlinking it",
                             path);
    }
    if (unlinkat(dirfd, name, 0) != 0) return fsio_fail_errno(c, err, errno, "unlink", name);
  }
}

/* Create name exclusively (DCP_FILE_EXCL): O_CREAT | O_EXCL, which fails
 * with EEXIST when the name exists as anything — a symlink included, whose
 * target is then neither followed, created nor touched (O_NOFOLLOW is
 * implied by O_EXCL and given anyway) — and which is atomic between hosts
 * on NFSv3+ and Lustre: exactly one of several racing creators wins. Never
 * O_DIRECT: a file system that refuses it after creating the file would
 * make the buffered retry fail with EEXIST; the files made this way (the
 * directory lease) are small. Transient errors are retried as for any
 * open; should such a retry meet EEXIST because the failed attempt did
 * create the file after all, the caller sees DCP_EEXIST for an empty file
 * of its own, which the lease treats like any empty lease file. */
static int open_excl(fsio_core *c, int dirfd, const char *name, int *fd, dcp_plugin_err *err) {
  unsigned attempt = 0;
  for (;;) {
    int e = fsio_inject(c, FSIO_SITE_OPEN);
    if (!e) {
      *fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (*fd >= 0) return DCP_OK;
      e = errno;
    }
    *fd = -1;
    if (e == EEXIST) {
      char path[FSIO_PATH_MAX];
      c->ops->path_of(c, name, path, sizeof path);
      return dcp_plugin_fail(err, DCP_EEXIST, "create %s exclusively: %s", path,
                             fsio_is_symlink_at(dirfd, name)
                                 ? "the name exists as a symbolic link (not followed)"
                                 : strerror(e));
    }
    if (!fsio_retry(c, e, &attempt)) return fsio_fail_errno(c, err, e, "create", name);
  }
}

/* See dcp_plugin.h. A READ open is always a fresh open(2) of the name,
 * never a reused handle: on NFS that is what makes a file written by
 * another client visible (close-to-open consistency). */
int fsio_file_open(dcp_storage *st, const char *name, uint32_t mode, dcp_storage_file **out,
                   dcp_plugin_err *err) {
  fsio_core *c = fsio_core_of(st);
  if (!out) return dcp_plugin_fail(err, DCP_EINVAL, "file_open: NULL out");
  *out = NULL;
  int rc = fsio_check_name(name, err);
  if (rc) return rc;
  int excl = mode == (DCP_FILE_WRITE | DCP_FILE_EXCL);
  if (excl) mode = DCP_FILE_WRITE;
  else if (mode != DCP_FILE_READ && mode != DCP_FILE_WRITE)
    return dcp_plugin_fail(err, DCP_EINVAL, "file_open: bad mode %u", (unsigned)mode);
  int dirfd, fd, direct = excl ? 0 : c->direct;
  rc = c->ops->dir_of(c, name, mode == DCP_FILE_WRITE, &dirfd, err);
  if (!rc && excl) rc = open_excl(c, dirfd, name, &fd, err);
  else if (!rc && mode == DCP_FILE_WRITE) rc = open_for_write(c, dirfd, name, &direct, &fd, err);
  else if (!rc) rc = fsio_open_at(c, dirfd, name, O_RDONLY, &direct, &fd, err);
  if (!rc) rc = file_new(c, name, mode, fd, direct, out, err);
  if (rc) return rc;
  if (mode == DCP_FILE_WRITE && c->ops->touch) c->ops->touch(c, name);
  fsio_count(&c->stats.meta_ops, 1);
  return DCP_OK;
}

/* See dcp_plugin.h. After a failed write the file's contents are unknown,
 * so every later write, sync and the close report that failure again. */
int fsio_file_write(dcp_storage_file *f, const void *buf, size_t len, dcp_plugin_err *err) {
  if (!f || f->mode != DCP_FILE_WRITE || (len && !buf))
    return dcp_plugin_fail(err, DCP_EINVAL, "file_write: not a file open for writing, or NULL buf");
  if (f->failed)
    return dcp_plugin_fail(err, f->failed, "write %s: an earlier write failed", f->name);
  int rc = f->stage ? stage_put(f, buf, len, err) : write_at(f, buf, len, f->off, err);
  if (rc) return f->failed = rc;
  if (!f->stage) {
    f->off += len;
    writeback_start(f);
  }
  fsio_count(&f->c->stats.bytes_written, len);
  fsio_count(&f->c->stats.write_ops, 1);
  return DCP_OK;
}

/* DCP_ECORRUPT for a read past the end, with the file's actual size. */
static int eof_error(dcp_storage_file *f, size_t len, uint64_t off, dcp_plugin_err *err) {
  struct stat sb;
  pthread_rwlock_rdlock(&f->lock);
  int ok = fstat(f->fd, &sb) == 0;
  pthread_rwlock_unlock(&f->lock);
  char path[FSIO_PATH_MAX];
  f->c->ops->path_of(f->c, f->name, path, sizeof path);
  return dcp_plugin_fail(err, DCP_ECORRUPT, "file %s ends at %lld, wanted %zu bytes at offset %llu",
                         path, ok ? (long long)sb.st_size : -1LL, len, (unsigned long long)off);
}

/* Read straight into buf: buffered I/O, or O_DIRECT with everything aligned. */
static int read_plain(dcp_storage_file *f, void *buf, size_t len, uint64_t off,
                      dcp_plugin_err *err) {
  int64_t r = xfer(f, XFER_READ, buf, len, off, err);
  if (r < 0) return (int)r;
  return (size_t)r < len ? eof_error(f, len, off, err) : DCP_OK;
}

/* One bounce-buffer round: the aligned blocks around [off+done, ...),
 * at most `span` bytes, copied out into dst. Advances *done. */
static int bounce_round(dcp_storage_file *f, unsigned char *bb, size_t span, unsigned char *dst,
                        size_t len, uint64_t off, size_t *done, dcp_plugin_err *err) {
  uint64_t pos = off + *done, blk = pos & ~(uint64_t)(FSIO_ALIGN - 1);
  size_t skip = (size_t)(pos - blk), rest = len - *done;
  size_t want = (skip + rest + FSIO_ALIGN - 1) & ~(size_t)(FSIO_ALIGN - 1);
  if (want > span) want = span;
  int64_t r = xfer(f, XFER_READ, bb, want, blk, err);
  if (r < 0) return (int)r;
  if ((size_t)r <= skip) return eof_error(f, len, off, err);
  size_t got = (size_t)r - skip < rest ? (size_t)r - skip : rest;
  memcpy(dst + *done, bb + skip, got);
  *done += got;
  return (size_t)r < want && *done < len ? eof_error(f, len, off, err) : DCP_OK;
}

/* O_DIRECT read of an unaligned request through an aligned bounce buffer
 * (per call, so concurrent readers need no shared buffer). */
static int read_bounced(dcp_storage_file *f, void *buf, size_t len, uint64_t off,
                        dcp_plugin_err *err) {
  size_t skip = (size_t)(off % FSIO_ALIGN);
  size_t span = (skip + len + FSIO_ALIGN - 1) & ~(size_t)(FSIO_ALIGN - 1);
  if (span > f->c->stage_size) span = f->c->stage_size;
  void *bb;
  if (posix_memalign(&bb, FSIO_ALIGN, span) != 0)
    return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory reading %s", f->name);
  size_t done = 0;
  int rc = DCP_OK;
  while (!rc && done < len) rc = bounce_round(f, bb, span, buf, len, off, &done, err);
  free(bb);
  return rc;
}

/* See dcp_plugin.h. Thread-safe: pread on a shared fd, atomic counters. */
int fsio_file_read(dcp_storage_file *f, void *buf, size_t len, uint64_t offset,
                   dcp_plugin_err *err) {
  if (!f || f->mode != DCP_FILE_READ || (len && !buf))
    return dcp_plugin_fail(err, DCP_EINVAL, "file_read: not a file open for reading, or NULL buf");
  if (offset > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - offset)
    return eof_error(f, len, offset, err);
  int rc = DCP_OK;
  uint64_t mis = ((uint64_t)(uintptr_t)buf | offset | len) % FSIO_ALIGN;
  if (len > 0 && atomic_load(&f->direct) && mis)
    rc = read_bounced(f, buf, len, offset, err);
  else if (len > 0)
    rc = read_plain(f, buf, len, offset, err);
  if (rc) return rc;
  fsio_count(&f->c->stats.bytes_read, len);
  fsio_count(&f->c->stats.read_ops, 1);
  return DCP_OK;
}

/* See dcp_plugin.h. The staged bytes are written first (the tail through
 * the page cache), so after this everything appended so far is durable. */
int fsio_file_sync(dcp_storage_file *f, dcp_plugin_err *err) {
  if (!f) return dcp_plugin_fail(err, DCP_EINVAL, "file_sync: NULL file");
  int rc = DCP_OK;
  if (f->mode == DCP_FILE_WRITE) {
    if (f->failed)
      return dcp_plugin_fail(err, f->failed, "sync %s: an earlier write failed", f->name);
    if (f->stage) rc = stage_drain(f, 0, err);
    if (!rc) rc = sync_fd(f, err);
    if (rc) return f->failed = rc;
  }
  fsio_count(&f->c->stats.sync_ops, 1);
  return DCP_OK;
}

/* See dcp_plugin.h. close(2) errors count: NFS reports deferred write
 * errors (EIO, ENOSPC, EDQUOT) there. EINTR from close is not an error on
 * Linux (the fd is gone either way) and must not be retried. */
int fsio_file_close(dcp_storage_file *f, dcp_plugin_err *err) {
  if (!f) return DCP_OK;
  int rc = DCP_OK;
  if (f->mode == DCP_FILE_WRITE && f->failed)
    rc = dcp_plugin_fail(err, f->failed, "close %s: an earlier write failed; file incomplete",
                         f->name);
  else if (f->mode == DCP_FILE_WRITE && f->stage)
    rc = stage_drain(f, 1, err);
  if (close(f->fd) != 0 && errno != EINTR && !rc)
    rc = fsio_fail_errno(f->c, err, errno, "close", f->name);
  pthread_rwlock_destroy(&f->lock);
  free(f->stage);
  free(f);
  return rc;
}

/* See fsio.h. */
uint64_t fsio_diag_writeback_started(const dcp_storage_file *f) {
  return f->wb_off_ok ? f->wb_off : 0;
}

int fsio_diag_file_is_direct(const dcp_storage_file *f) {
  int fl = fcntl(f->fd, F_GETFL);
  return fl >= 0 && (fl & O_DIRECT) != 0;
}
