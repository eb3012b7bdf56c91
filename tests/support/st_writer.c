/* st_writer.c — see st_writer.h. */
#include "st_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void st_fill(void *buf, size_t n, uint32_t seed) {
  uint8_t *p = buf;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    p[i] = (uint8_t)x;
  }
}

int st_write_raw(const char *path, uint64_t hsize, const char *header, const void *data,
                 size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  uint8_t pre[8];
  for (int i = 0; i < 8; i++) pre[i] = (uint8_t)(hsize >> (8 * i));
  int ok = fwrite(pre, 1, 8, f) == 8 && fwrite(header, 1, strlen(header), f) == strlen(header) &&
           (!len || fwrite(data, 1, len, f) == len);
  return fclose(f) == 0 && ok ? 0 : -1;
}

static size_t put(char *buf, size_t at, size_t cap, const char *s) {
  size_t n = strlen(s);
  if (at + n < cap) memcpy(buf + at, s, n + 1);
  return at + n;
}

int st_write(const char *path, const st_tensor *t, size_t n, const char *const *keys,
             const char *const *values, size_t nkv) {
  size_t cap = 1 << 20, at = 0, off = 0, total = 0;
  char *h = malloc(cap), tmp[256];
  if (!h) return -1;
  h[0] = '\0';
  at = put(h, at, cap, "{");
  if (nkv) {
    at = put(h, at, cap, "\"__metadata__\":{");
    for (size_t i = 0; i < nkv; i++) {
      snprintf(tmp, sizeof tmp, "%s\"%s\":\"%s\"", i ? "," : "", keys[i], values[i]);
      at = put(h, at, cap, tmp);
    }
    at = put(h, at, cap, n ? "}," : "}");
  }
  for (size_t i = 0; i < n; i++) {
    snprintf(tmp, sizeof tmp, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name,
             t[i].dtype);
    at = put(h, at, cap, tmp);
    for (uint32_t d = 0; d < t[i].ndim; d++) {
      snprintf(tmp, sizeof tmp, "%s%lld", d ? "," : "", (long long)t[i].shape[d]);
      at = put(h, at, cap, tmp);
    }
    snprintf(tmp, sizeof tmp, "],\"data_offsets\":[%zu,%zu]}", off, off + t[i].nbytes);
    at = put(h, at, cap, tmp);
    off += t[i].nbytes;
  }
  at = put(h, at, cap, "}");
  total = off;
  uint8_t *data = malloc(total ? total : 1);
  for (size_t i = 0, p = 0; data && i < n; p += t[i].nbytes, i++)
    if (t[i].nbytes) memcpy(data + p, t[i].data, t[i].nbytes);
  int rc = data && at < cap ? st_write_raw(path, at, h, data, total) : -1;
  free(data);
  free(h);
  return rc;
}
