/* pool.c — the memfd staging pool and the default (parallel) copy. */
#define _GNU_SOURCE /* memfd_create */
#include "async/pool.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define POOL_ALIGN ((size_t)2 << 20) /* grow in 2 MiB steps */
#define PAR_MIN ((size_t)64 << 20)   /* copies this large use threads */
#define PAR_THREADS 4

void dcpi_pool_init(dcpi_pool *p) {
  memset(p, 0, sizeof *p);
  p->fd = -1;
}

/* Touch one byte per page so the writes of staging never fault. */
static void prefault(uint8_t *base, size_t from, size_t to) {
  long pg = sysconf(_SC_PAGESIZE);
  size_t step = pg > 0 ? (size_t)pg : 4096;
  for (size_t off = from; off < to; off += step) ((volatile uint8_t *)base)[off] = 0;
}

static dcp_status pool_create(dcpi_pool *p, dcpi_err *err) {
  p->fd = memfd_create("dcp-staging", MFD_CLOEXEC);
  if (p->fd < 0) return dcpi_fail(err, DCP_EIO, "staging pool: memfd_create: %s", strerror(errno));
  p->creations++;
  return DCP_OK;
}

dcp_status dcpi_pool_reserve(dcpi_pool *p, size_t need, dcpi_err *err) {
  if (p->fd >= 0 && need <= p->size) return DCP_OK;
  if (need > SIZE_MAX - POOL_ALIGN) return dcpi_fail(err, DCP_ENOMEM, "staging pool too large");
  size_t size = (need + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN;
  if (size == 0) size = POOL_ALIGN;
  dcp_status rc = p->fd < 0 ? pool_create(p, err) : DCP_OK;
  if (rc) return rc;
  if (p->base) {
    munmap(p->base, p->size);
    p->base = NULL;
    p->growths++;
  }
  if (ftruncate(p->fd, (off_t)size) != 0)
    return dcpi_fail(err, DCP_ENOMEM, "staging pool: ftruncate to %zu bytes: %s", size,
                     strerror(errno));
  void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, p->fd, 0);
  if (m == MAP_FAILED) {
    p->size = 0;
    return dcpi_fail(err, DCP_ENOMEM, "staging pool: mmap of %zu bytes: %s", size,
                     strerror(errno));
  }
  p->base = m;
  p->size = size;
  prefault(p->base, 0, size);
  return DCP_OK;
}

void dcpi_pool_free(dcpi_pool *p) {
  if (p->base) munmap(p->base, p->size);
  if (p->fd >= 0) close(p->fd);
  dcpi_pool_init(p);
}

typedef struct copy_part {
  uint8_t *dst;
  const uint8_t *src;
  size_t len;
} copy_part;

static void *copy_main(void *arg) {
  copy_part *c = arg;
  memcpy(c->dst, c->src, c->len);
  return NULL;
}

void dcpi_parallel_memcpy(void *dst, const void *src, size_t len) {
  if (len < PAR_MIN) {
    if (len) memcpy(dst, src, len);
    return;
  }
  copy_part parts[PAR_THREADS];
  pthread_t th[PAR_THREADS];
  int started[PAR_THREADS] = {0};
  size_t per = (len / PAR_THREADS + 4095) & ~(size_t)4095;
  for (int i = 0; i < PAR_THREADS; i++) {
    size_t off = per * (size_t)i < len ? per * (size_t)i : len;
    size_t n = len - off < per ? len - off : per;
    parts[i] = (copy_part){(uint8_t *)dst + off, (const uint8_t *)src + off, n};
    if (i > 0 && n) started[i] = pthread_create(&th[i], NULL, copy_main, &parts[i]) == 0;
    if (i > 0 && n && !started[i]) copy_main(&parts[i]);
  }
  copy_main(&parts[0]);
  for (int i = 1; i < PAR_THREADS; i++)
    if (started[i]) pthread_join(th[i], NULL);
}
