/* ckpt_files.h — finding a checkpoint's files by the shape of their names
 * (src/runtime/files.h): a save names its files after its identity, so
 * tests look them up instead of spelling them. Header-only (plain libc),
 * for unit tests and multi-process test programs alike. */
#ifndef DCP_TEST_CKPT_FILES_H
#define DCP_TEST_CKPT_FILES_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* Whether name starts with prefix and ends with suffix. */
static inline bool ck_matches(const char *name, const char *prefix, const char *suffix) {
  size_t n = strlen(name), p = strlen(prefix), s = strlen(suffix);
  return n >= p + s && strncmp(name, prefix, p) == 0 && strcmp(name + n - s, suffix) == 0;
}

/* How many files of dir match; the smallest matching name (bytewise) goes
 * to out (cap bytes) when out is not NULL and there is one. */
static inline int ck_find(const char *dir, const char *prefix, const char *suffix, char *out,
                          size_t cap) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int n = 0;
  if (out && cap) out[0] = '\0';
  for (struct dirent *e; (e = readdir(d));) {
    if (!ck_matches(e->d_name, prefix, suffix)) continue;
    if (out && cap && (!n || strcmp(e->d_name, out) < 0)) snprintf(out, cap, "%s", e->d_name);
    n++;
  }
  closedir(d);
  return n;
}

/* The path of rank's data file in dir (coordinated saves have one per
 * rank); false when there is none. */
static inline bool ck_data_file(const char *dir, int rank, char *path, size_t cap) {
  char prefix[32], name[256];
  snprintf(prefix, sizeof prefix, "data-%05d.", rank);
  if (ck_find(dir, prefix, ".dcp", name, sizeof name) < 1) return false;
  int n = snprintf(path, cap, "%s/%s", dir, name);
  return n > 0 && (size_t)n < cap;
}

/* How many committed parts of rank (uncoordinated saves) dir holds. */
static inline int ck_parts_of_rank(const char *dir, int rank) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "%d-of-", rank);
  return ck_find(dir, prefix, ".metadata", NULL, 0);
}

#endif
