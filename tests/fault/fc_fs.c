/* fc_fs.c — the fault campaign's file helpers: control and probe files of
 * the fault plugin, and the check that a checkpoint directory holds exactly
 * what its committed metadata references. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fc.h"

void fc_write_file(const char *path, const char *text) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  FC_CHECK(f, "cannot write %s: %s", tmp, strerror(errno));
  fputs(text, f);
  FC_CHECK(fclose(f) == 0, "cannot write %s", tmp);
  /* renamed into place: a process reading it never sees half of it */
  FC_CHECK(rename(tmp, path) == 0, "cannot rename %s: %s", tmp, strerror(errno));
}

char *fc_read_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  FC_CHECK(buf, "out of memory");
  size_t got;
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      buf = realloc(buf, cap *= 2);
      FC_CHECK(buf, "out of memory");
    }
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

void fc_mkdir(const char *path) {
  FC_CHECK(mkdir(path, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
}

uint64_t fc_probe_count(const char *text, const char *kind) {
  /* the line is "mount=N open=N ... bytes=N": match " kind=" in " " + text */
  size_t n = strlen(text);
  char *line = malloc(n + 2), key[32];
  FC_CHECK(line, "out of memory");
  line[0] = ' ';
  memcpy(line + 1, text, n + 1);
  snprintf(key, sizeof key, " %s=", kind);
  const char *p = strstr(line, key);
  FC_CHECK(p, "probe has no count for %s: %s", kind, text);
  uint64_t v = strtoull(p + strlen(key), NULL, 10);
  free(line);
  return v;
}

typedef struct names {
  char **v;
  size_t n, cap;
} names;

static void names_add(names *s, const char *name) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    FC_CHECK(s->v, "out of memory");
  }
  s->v[s->n] = strdup(name);
  FC_CHECK(s->v[s->n], "out of memory");
  s->n++;
}

static bool names_has(const names *s, const char *name) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->v[i], name) == 0) return true;
  return false;
}

static void names_free(names *s) {
  for (size_t i = 0; i < s->n; i++) free(s->v[i]);
  free(s->v);
}

/* Every regular file under dir (any depth), by base name. */
static void walk_files(const char *dir, names *out) {
  DIR *d = opendir(dir);
  FC_CHECK(d, "opendir %s: %s", dir, strerror(errno));
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    struct stat sb;
    FC_CHECK(lstat(path, &sb) == 0, "lstat %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode))
      walk_files(path, out);
    else
      names_add(out, de->d_name);
  }
  closedir(d);
}

void fc_check_files(dcp_ctx *ctx, const char *path) {
  dcp_meta *meta;
  dcp_status s = dcp_meta_open(ctx, path, &meta);
  FC_CHECK(s == DCP_OK, "metadata of %s: %s (%s)", path, dcp_strerror(s),
           dcp_ctx_last_error(ctx));
  names want = {0}, have = {0};
  names_add(&want, ".metadata");
  for (size_t i = 0; i < dcp_meta_file_count(meta); i++) {
    const char *name;
    FC_CHECK(dcp_meta_file(meta, i, &name) == DCP_OK, "file %zu of %s", i, path);
    names_add(&want, name);
  }
  dcp_meta_free(meta);
  walk_files(path, &have);
  for (size_t i = 0; i < have.n; i++)
    FC_CHECK(names_has(&want, have.v[i]), "leftover file '%s' in %s (not referenced by its "
             ".metadata)", have.v[i], path);
  for (size_t i = 0; i < want.n; i++)
    FC_CHECK(names_has(&have, want.v[i]), "file '%s' referenced by %s/.metadata is missing",
             want.v[i], path);
  names_free(&want);
  names_free(&have);
}
