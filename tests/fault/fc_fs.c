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
  dcp_status rc = dcp_meta_open(ctx, path, &meta);
  FC_CHECK(rc == DCP_OK, "metadata of %s: %s (%s)", path, dcp_strerror(rc),
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
  for (size_t i = 0; i < have.n; i++) /* .plan: the optional recorded plan (docs/format.md) */
    FC_CHECK(names_has(&want, have.v[i]) || !strcmp(have.v[i], ".plan"),
             "leftover file '%s' in %s (not referenced by its .metadata)", have.v[i], path);
  for (size_t i = 0; i < want.n; i++)
    FC_CHECK(names_has(&have, want.v[i]), "file '%s' referenced by %s/.metadata is missing",
             want.v[i], path);
  names_free(&want);
  names_free(&have);
}

/* One line of the fault plugin's operation log. */
typedef struct op_line {
  int rank;
  char kind[16], name[256], name2[256];
} op_line;

static size_t parse_log(char *text, op_line **out) {
  size_t n = 0, cap = 0;
  op_line *v = NULL;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      v = realloc(v, cap * sizeof *v);
      FC_CHECK(v, "out of memory");
    }
    v[n].name2[0] = '\0';
    FC_CHECK(sscanf(line, "%d %15s %255s %255s", &v[n].rank, v[n].kind, v[n].name, v[n].name2) >= 3,
             "bad operation log line '%s'", line);
    n++;
  }
  *out = v;
  return n;
}

/* The first line at or after `from` of rank `rank` with kind (and name,
 * when not NULL); n when there is none. */
static size_t find_op(const op_line *v, size_t n, size_t from, int rank, const char *kind,
                      const char *name) {
  for (size_t i = from; i < n; i++)
    if (v[i].rank == rank && !strcmp(v[i].kind, kind) && (!name || !strcmp(v[i].name, name)))
      return i;
  return n;
}

/* The metadata's temporary name: .metadata.tmp, or .metadata.<id>.tmp
 * when the save names its files by its identity. */
static bool is_metadata_tmp(const char *name) {
  size_t n = strlen(name);
  return !strncmp(name, ".metadata.", 10) && n >= 13 && !strcmp(name + n - 4, ".tmp");
}

void fc_check_commit_order(const char *log_path) {
  char *text = fc_read_file(log_path);
  FC_CHECK(text, "no operation log at %s", log_path);
  op_line *v;
  size_t n = parse_log(text, &v);
  size_t commit = n;
  for (size_t i = 0; i < n && commit == n; i++)
    if (v[i].rank == 0 && !strcmp(v[i].kind, "rename") && is_metadata_tmp(v[i].name) &&
        !strcmp(v[i].name2, ".metadata"))
      commit = i;
  FC_CHECK(commit < n, "%s: no rename of .metadata.tmp to .metadata", log_path);
  size_t synced = find_op(v, n, 0, 0, "sync", v[commit].name);
  FC_CHECK(synced < commit, "%s: .metadata.tmp is renamed before it is synced", log_path);
  FC_CHECK(find_op(v, n, commit + 1, 0, "syncdir", NULL) < n,
           "%s: no directory sync after the rename of .metadata", log_path);
  /* overwriting: the old .metadata is removed and that made durable before
   * any rank opens a data file for writing */
  size_t uncommit = find_op(v, n, 0, 0, "remove", ".metadata");
  if (uncommit < commit) {
    size_t durable = find_op(v, n, uncommit + 1, 0, "syncdir", NULL);
    for (size_t i = 0; i < n; i++)
      if (!strcmp(v[i].kind, "open") && !strcmp(v[i].name2, "w") &&
          !strncmp(v[i].name, "data-", 5))
        FC_CHECK(durable < i, "%s: rank %d writes %s before the old .metadata is durably "
                 "removed", log_path, v[i].rank, v[i].name);
  }
  /* every data file: synced, then its directory entry synced, by the rank
   * that wrote it, all before the commit */
  for (size_t i = 0; i < n; i++) {
    if (strcmp(v[i].kind, "open") || strcmp(v[i].name2, "w") || strncmp(v[i].name, "data-", 5))
      continue;
    size_t s = find_op(v, n, i + 1, v[i].rank, "sync", v[i].name);
    size_t d = find_op(v, n, s + 1, v[i].rank, "syncdir", NULL);
    FC_CHECK(s < commit, "%s: rank %d's %s is not synced before the commit", log_path,
             v[i].rank, v[i].name);
    FC_CHECK(d < commit, "%s: rank %d's directory entry of %s is not synced before the commit "
             "(a crash after the save returned could lose the file)", log_path, v[i].rank,
             v[i].name);
  }
  free(v);
  free(text);
}
