/* pool.h — the staging pool of async saves: one memfd mapped MAP_SHARED,
 * pre-faulted at creation and on growth, kept across saves and passed to
 * the writer process as a descriptor. */
#ifndef DCP_ASYNC_POOL_H
#define DCP_ASYNC_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct dcpi_pool {
  int fd;          /* -1 until the first reserve */
  uint8_t *base;   /* mapping of size bytes */
  size_t size;
  uint64_t creations; /* memfds created (1 while the pool is reused) */
  uint64_t growths;   /* times it was enlarged */
} dcpi_pool;

/* An empty pool (no memory yet). */
void dcpi_pool_init(dcpi_pool *p);

/* Make the pool hold at least need bytes: create it, or grow it (the old
 * contents are not kept), pre-faulting every new page. Errors: DCP_ENOMEM,
 * DCP_EIO. */
dcp_status dcpi_pool_reserve(dcpi_pool *p, size_t need, dcpi_err *err);

/* Unmap and close. */
void dcpi_pool_free(dcpi_pool *p);

/* Copy len bytes, split over a few threads when len is large (>= 64 MiB). */
void dcpi_parallel_memcpy(void *dst, const void *src, size_t len);

#endif
