/* st_writer.h — a tiny independent safetensors writer for test fixtures
 * (stdio + hand-built JSON; names and values must be plain ASCII). */
#ifndef DCP_TEST_ST_WRITER_H
#define DCP_TEST_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

typedef struct st_tensor {
  const char *name;
  const char *dtype; /* safetensors name */
  uint32_t ndim;
  int64_t shape[8];
  const void *data;
  size_t nbytes;
} st_tensor;

/* Write a well-formed file: tensors back to back in the given order,
 * __metadata__ from nkv pairs (keys[i], values[i]) when nkv > 0.
 * Returns 0 on success. */
int st_write(const char *path, const st_tensor *t, size_t n, const char *const *keys,
             const char *const *values, size_t nkv);

/* Write an arbitrary file: the 8-byte size hsize (as given, even if wrong),
 * then header (strlen bytes), then len bytes of data. */
int st_write_raw(const char *path, uint64_t hsize, const char *header, const void *data,
                 size_t len);

/* Fill n bytes with a deterministic pattern from seed. */
void st_fill(void *buf, size_t n, uint32_t seed);

#endif
