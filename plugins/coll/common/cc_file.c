/* cc_file.c — safe files in a rendezvous directory (cc_file.h). */
#include "cc_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dcp_plugin.h"

#define TMP_TRIES 8 /* fresh names tried when one exists (practically never) */

/* Mixes x the way splitmix64 does (a fallback for a missing entropy source
 * only). */
static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* 8 bytes from /dev/urandom into *v; 0 on success. */
static int urandom64(uint64_t *v) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, v, sizeof *v);
  close(fd);
  return n == (ssize_t)sizeof *v ? 0 : -1;
}

uint64_t dcpi_cc_random64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v && urandom64(&v) != 0) {
    static uint64_t counter; /* only distinguishes calls within one process */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = mix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16) ^
              (uint64_t)(uintptr_t)&v ^ ++counter);
  }
  return v ? v : 1;
}

/* Writes all len bytes of p to fd; 0, or -1 with errno set. */
static int write_all(int fd, const void *p, size_t len) {
  const unsigned char *b = p;
  while (len > 0) {
    ssize_t w = write(fd, b, len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    b += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Creates a fresh temporary next to path (its name in tmp, cap bytes):
 * O_EXCL with a random suffix, so it is never an existing file or a link.
 * Returns the fd, or -1 with errno set. */
static int create_tmp(const char *path, char *tmp, size_t cap) {
  for (int i = 0; i < TMP_TRIES; i++) {
    int n = snprintf(tmp, cap, "%s.tmp.%016llx", path, (unsigned long long)dcpi_cc_random64());
    if (n < 0 || (size_t)n >= cap) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1; /* errno is EEXIST */
}

int dcpi_cc_write_file(const char *path, const void *a, size_t alen, const void *b, size_t blen,
                       dcp_plugin_err *err) {
  char tmp[4096 + 32];
  int fd = create_tmp(path, tmp, sizeof tmp);
  if (fd < 0)
    return dcp_plugin_fail(err, DCP_EIO, "create a temporary for %s: %s", path, strerror(errno));
  int bad = (alen && write_all(fd, a, alen)) || (blen && write_all(fd, b, blen));
  int saved = errno;
  if (close(fd) != 0 && !bad) {
    bad = 1;
    saved = errno;
  }
  if (!bad && rename(tmp, path) == 0) return DCP_OK; /* replaces a link, not its target */
  if (!bad) saved = errno;
  unlink(tmp);
  return dcp_plugin_fail(err, saved == ENOSPC ? DCP_ENOSPC : DCP_EIO, "write %s: %s", path,
                         strerror(saved));
}

int dcpi_cc_open_file(const char *path, int *fd, uint64_t *size, dcp_plugin_err *err) {
  /* O_NONBLOCK: a fifo planted at the name must not block the open */
  int f = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (f < 0) {
    if (errno == ENOENT) return DCPI_CC_ABSENT;
    if (errno == ELOOP || errno == ENXIO) return DCPI_CC_ODD; /* a link; a fifo, a socket */
    return dcp_plugin_fail(err, DCP_EIO, "open %s: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(f, &st) != 0) {
    int e = errno;
    close(f);
    return dcp_plugin_fail(err, DCP_EIO, "stat %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(f);
    return DCPI_CC_ODD;
  }
  *fd = f;
  *size = (uint64_t)st.st_size;
  return DCPI_CC_PRESENT;
}

int dcpi_cc_read_small(const char *path, void *buf, size_t cap, size_t *len,
                       dcp_plugin_err *err) {
  int fd = -1;
  uint64_t size = 0;
  int rc = dcpi_cc_open_file(path, &fd, &size, err);
  if (rc != DCPI_CC_PRESENT) return rc;
  size_t got = 0;
  while (got < cap) {
    ssize_t r = read(fd, (char *)buf + got, cap - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      return dcp_plugin_fail(err, DCP_EIO, "read %s: %s", path, strerror(e));
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  char extra;
  int longer = got == cap && read(fd, &extra, 1) == 1;
  close(fd);
  if (longer) return DCPI_CC_ODD;
  *len = got;
  return DCPI_CC_PRESENT;
}

int dcpi_cc_create_empty(const char *path, dcp_plugin_err *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return dcp_plugin_fail(err, DCP_EIO, "create %s: %s", path, strerror(errno));
  close(fd);
  return DCP_OK;
}

void dcpi_cc_remove_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return; /* gone, or a link: not ours to follow */
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlinkat(fd, e->d_name, 0);
  closedir(d); /* closes fd */
  rmdir(dir);
}
