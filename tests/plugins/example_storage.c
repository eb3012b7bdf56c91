/* example_storage.c — a complete, minimal storage plugin: an in-memory
 * file store. It is the sample of docs/plugins.md.
 *
 * Built as dcp-storage-example.so, it exports one symbol, dcp_plugin_entry,
 * which hands libdcp the const table at the end of this file. It needs
 * nothing from libdcp itself (only the constants and types of
 * dcp_plugin.h), so it links against nothing but libc.
 *
 * Semantics, chosen to be simple and safe under threads:
 *  - every backend (open) is its own empty store; cfg->root is only a label,
 *    and its files vanish with close. It is a demonstration, not a store;
 *  - file data is immutable once published. A WRITE handle fills a private
 *    buffer which file_close publishes under the name (replacing any older
 *    file), like an object store: a file appears when its writer closes it;
 *  - a READ handle holds a reference to the data it opened, so file_read
 *    needs no lock and may run on many threads at once, and a concurrent
 *    rename or remove never pulls the bytes from under a reader;
 *  - one mutex per backend guards the file list, reference counts and
 *    counters, so every function may be called from any thread. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* strdup, pthreads: a plugin builds on its own */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_plugin.h"

/* The entry must be visible in the .so even under -fvisibility=hidden:
 * DCP_PLUGIN_EXPORT (dcp_plugin.h) says so. */
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);

/* A file's bytes, shared by the store and its readers; freed with the last
 * reference. refs is guarded by the backend's lock. */
typedef struct blob {
  unsigned char *data;
  size_t len, refs;
} blob;

/* One named file of the store (a singly linked list: a demo needs no map). */
typedef struct entry {
  char *name;
  blob *data;
  struct entry *next;
} entry;

struct dcp_storage {
  pthread_mutex_t lock; /* guards files, every blob's refs, and stats */
  entry *files;
  dcp_io_stats stats;
};

struct dcp_storage_file {
  dcp_storage *st;
  uint32_t mode;  /* DCP_FILE_READ or DCP_FILE_WRITE */
  char *name;     /* WRITE: where file_close publishes the data */
  blob *data;     /* READ: a reference; WRITE: the private buffer */
  size_t cap;     /* WRITE: bytes allocated at data->data */
};

/* Every error path leaves a reason the core can show to the user:
 * dcp_plugin_fail (dcp_plugin.h) formats it into err and returns the code. */

/* The ABI's name rule: 1..255 bytes of [A-Za-z0-9._-], not "." or "..".
 * The library only ever passes such names; checking anyway is what keeps a
 * path-based backend inside its directory. */
static int name_ok(const char *n) {
  size_t len = strlen(n);
  if (len == 0 || len > 255 || !strcmp(n, ".") || !strcmp(n, "..")) return 0;
  return strspn(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == len;
}

/* The link pointing at `name`'s entry (so callers can unlink it), or at the
 * list's NULL end. Caller holds the lock. */
static entry **find(dcp_storage *st, const char *name) {
  entry **p = &st->files;
  while (*p && strcmp((*p)->name, name) != 0) p = &(*p)->next;
  return p;
}

/* Drop one reference to b (NULL allowed). Caller holds the lock. */
static void unref(blob *b) {
  if (b && --b->refs == 0) {
    free(b->data);
    free(b);
  }
}

/* Unlink and free *link's entry. Caller holds the lock. */
static void drop(entry **link) {
  entry *e = *link;
  *link = e->next;
  unref(e->data);
  free(e->name);
  free(e);
}

/* ---- backend ---------------------------------------------------------- */

static int ex_open(const dcp_storage_config *cfg, dcp_storage **out, dcp_plugin_err *err) {
  /* Accept configs from older, shorter headers: read only fields that fit. */
  if (!DCP_HAS_FIELD(cfg, dcp_storage_config, flags) || !cfg->root)
    return dcp_plugin_fail(err, DCP_EINVAL, "config lacks a root");
  if (DCP_HAS_FIELD(cfg, dcp_storage_config, options) && cfg->options && cfg->options[0])
    return dcp_plugin_fail(err, DCP_EINVAL, "unknown options \"%s\" (example takes none)",
                           cfg->options);
  dcp_storage *st = calloc(1, sizeof *st);
  if (!st) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  pthread_mutex_init(&st->lock, NULL);
  *out = st;
  return DCP_OK;
}

static void ex_close(dcp_storage *st) {
  while (st->files) drop(&st->files);
  pthread_mutex_destroy(&st->lock);
  free(st);
}

/* ---- files ------------------------------------------------------------ */

/* READ takes a reference to the published data; WRITE starts an empty
 * private buffer (nothing is visible until file_close). */
static int ex_file_open(dcp_storage *st, const char *name, uint32_t mode, dcp_storage_file **out,
                        dcp_plugin_err *err) {
  if (!name_ok(name)) return dcp_plugin_fail(err, DCP_ENAME, "bad file name \"%.255s\"", name);
  if (mode != DCP_FILE_READ && mode != DCP_FILE_WRITE)
    return dcp_plugin_fail(err, DCP_EINVAL, "bad mode %u", mode);
  dcp_storage_file *f = calloc(1, sizeof *f);
  if (!f) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  f->st = st;
  f->mode = mode;
  int rc = DCP_OK;
  pthread_mutex_lock(&st->lock);
  st->stats.meta_ops++;
  entry *e = *find(st, name);
  if (mode == DCP_FILE_READ && e) {
    f->data = e->data;
    f->data->refs++;
  } else if (mode == DCP_FILE_READ) {
    rc = dcp_plugin_fail(err, DCP_ENOTFOUND, "no file \"%s\"", name);
  } else if (!(f->name = strdup(name)) || !(f->data = calloc(1, sizeof *f->data))) {
    rc = dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  } else {
    f->data->refs = 1;
  }
  pthread_mutex_unlock(&st->lock);
  if (rc != DCP_OK) {
    free(f->name);
    free(f->data);
    free(f);
    return rc;
  }
  *out = f;
  return DCP_OK;
}

/* Append, doubling the buffer; a store in memory is full when memory is. */
static int ex_file_write(dcp_storage_file *f, const void *buf, size_t len,
                         dcp_plugin_err *err) {
  if (f->mode != DCP_FILE_WRITE)
    return dcp_plugin_fail(err, DCP_EINVAL, "file is not open for writing");
  blob *b = f->data;
  if (len > SIZE_MAX / 2 - b->len) return dcp_plugin_fail(err, DCP_ENOSPC, "file too large");
  if (b->len + len > f->cap) {
    size_t cap = f->cap ? f->cap : 4096;
    while (cap < b->len + len) cap *= 2;
    unsigned char *p = realloc(b->data, cap);
    if (!p) return dcp_plugin_fail(err, DCP_ENOSPC, "out of memory for %zu bytes", cap);
    b->data = p;
    f->cap = cap;
  }
  if (len) memcpy(b->data + b->len, buf, len);
  b->len += len;
  pthread_mutex_lock(&f->st->lock);
  f->st->stats.bytes_written += len;
  f->st->stats.write_ops++;
  pthread_mutex_unlock(&f->st->lock);
  return DCP_OK;
}

/* No lock for the bytes: published data never changes, and f holds it. */
static int ex_file_read(dcp_storage_file *f, void *buf, size_t len, uint64_t offset,
                        dcp_plugin_err *err) {
  const blob *b = f->data;
  if (f->mode != DCP_FILE_READ)
    return dcp_plugin_fail(err, DCP_EINVAL, "file is not open for reading");
  if (offset > b->len || len > b->len - offset)
    return dcp_plugin_fail(err, DCP_ECORRUPT, "read of %zu bytes at %llu past the end (%zu bytes)",
                           len, (unsigned long long)offset, b->len);
  if (len) memcpy(buf, b->data + offset, len);
  pthread_mutex_lock(&f->st->lock);
  f->st->stats.bytes_read += len;
  f->st->stats.read_ops++;
  pthread_mutex_unlock(&f->st->lock);
  return DCP_OK;
}

/* Memory is as durable as it gets here; count the call like a real fsync. */
static int ex_file_sync(dcp_storage_file *f, dcp_plugin_err *err) {
  (void)err;
  pthread_mutex_lock(&f->st->lock);
  f->st->stats.sync_ops++;
  pthread_mutex_unlock(&f->st->lock);
  return DCP_OK;
}

/* Publish a WRITE file under its name (replacing an older one), release a
 * READ file's reference; free f either way, as the ABI requires. */
static int ex_file_close(dcp_storage_file *f, dcp_plugin_err *err) {
  dcp_storage *st = f->st;
  int rc = DCP_OK;
  pthread_mutex_lock(&st->lock);
  if (f->mode == DCP_FILE_WRITE) {
    entry **link = find(st, f->name);
    if (!*link && (*link = calloc(1, sizeof **link))) {
      (*link)->name = f->name; /* the new entry takes over the name */
      f->name = NULL;
    }
    if (*link) {
      unref((*link)->data);
      (*link)->data = f->data; /* hand our reference to the store */
      f->data = NULL;
    } else {
      rc = dcp_plugin_fail(err, DCP_ENOMEM, "out of memory publishing the file");
    }
  }
  unref(f->data);
  pthread_mutex_unlock(&st->lock);
  free(f->name);
  free(f);
  return rc;
}

/* ---- names ------------------------------------------------------------ */

static int ex_file_size(dcp_storage *st, const char *name, uint64_t *size, dcp_plugin_err *err) {
  if (!name_ok(name)) return dcp_plugin_fail(err, DCP_ENAME, "bad file name \"%.255s\"", name);
  pthread_mutex_lock(&st->lock);
  st->stats.meta_ops++;
  entry *e = *find(st, name);
  if (e) *size = e->data->len;
  pthread_mutex_unlock(&st->lock);
  return e ? DCP_OK : dcp_plugin_fail(err, DCP_ENOTFOUND, "no file \"%s\"", name);
}

/* Atomic by construction: one critical section swaps the names. */
static int ex_rename(dcp_storage *st, const char *from, const char *to, dcp_plugin_err *err) {
  if (!name_ok(from) || !name_ok(to)) return dcp_plugin_fail(err, DCP_ENAME, "bad file name");
  char *copy = strdup(to);
  if (!copy) return dcp_plugin_fail(err, DCP_ENOMEM, "out of memory");
  int rc = DCP_OK;
  pthread_mutex_lock(&st->lock);
  st->stats.meta_ops++;
  entry **src = find(st, from);
  if (!*src) {
    rc = dcp_plugin_fail(err, DCP_ENOTFOUND, "no file \"%s\"", from);
  } else if (strcmp(from, to) != 0) {
    entry **dst = find(st, to);
    if (*dst) drop(dst); /* replace `to` */
    src = find(st, from); /* dropping dst may have changed the link to src */
    free((*src)->name);
    (*src)->name = copy;
    copy = NULL;
  }
  pthread_mutex_unlock(&st->lock);
  free(copy);
  return rc;
}

static int ex_remove(dcp_storage *st, const char *name, dcp_plugin_err *err) {
  if (!name_ok(name)) return dcp_plugin_fail(err, DCP_ENAME, "bad file name \"%.255s\"", name);
  pthread_mutex_lock(&st->lock);
  st->stats.meta_ops++;
  entry **link = find(st, name);
  int found = *link != NULL;
  if (found) drop(link);
  pthread_mutex_unlock(&st->lock);
  return found ? DCP_OK : dcp_plugin_fail(err, DCP_ENOTFOUND, "no file \"%s\"", name);
}

static int ex_sync_dir(dcp_storage *st, dcp_plugin_err *err) {
  (void)err;
  pthread_mutex_lock(&st->lock);
  st->stats.sync_ops++;
  pthread_mutex_unlock(&st->lock);
  return DCP_OK;
}

/* Copy the names under the lock, then call fn without it: fn may call back
 * into the backend (remove what it lists, say) without deadlocking. */
static int ex_list(dcp_storage *st, int (*fn)(void *arg, const char *name), void *arg,
                   dcp_plugin_err *err) {
  size_t n = 0, copied = 0;
  pthread_mutex_lock(&st->lock);
  st->stats.meta_ops++;
  for (entry *e = st->files; e; e = e->next) n++;
  char **names = calloc(n ? n : 1, sizeof *names);
  for (entry *e = st->files; names && e && (names[copied] = strdup(e->name)); e = e->next)
    copied++;
  pthread_mutex_unlock(&st->lock);
  int rc = (!names || copied < n) ? dcp_plugin_fail(err, DCP_ENOMEM, "out of memory") : DCP_OK;
  for (size_t k = 0; rc == DCP_OK && k < n; k++) rc = fn(arg, names[k]);
  for (size_t k = 0; k < copied; k++) free(names[k]);
  free(names);
  return rc;
}

/* get_stats takes a const backend, but reading the counters still needs the
 * lock; the object itself was allocated non-const, so the cast is sound. */
static void ex_get_stats(const dcp_storage *cst, dcp_io_stats *out) {
  dcp_storage *st = (dcp_storage *)cst;
  pthread_mutex_lock(&st->lock);
  *out = st->stats;
  pthread_mutex_unlock(&st->lock);
}

/* ---- the table -------------------------------------------------------- */

/* abi_version and struct_size first: they are what libdcp checks before it
 * reads anything else. The table is const and lives as long as the .so. */
static const dcp_storage_plugin example_table = {
    .abi_version = DCP_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(dcp_storage_plugin),
    .name = "example", /* must match the file name dcp-storage-example.so */
    .caps = 0,         /* neither O_DIRECT nor shared-FS tricks */
    .open = ex_open,
    .close = ex_close,
    .file_open = ex_file_open,
    .file_write = ex_file_write,
    .file_read = ex_file_read,
    .file_sync = ex_file_sync,
    .file_close = ex_file_close,
    .file_size = ex_file_size,
    .rename = ex_rename,
    .remove = ex_remove,
    .sync_dir = ex_sync_dir,
    .list = ex_list,
    .get_stats = ex_get_stats,
};

/* One object may provide several kinds; this one only has storage. */
const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_STORAGE ? &example_table : NULL;
}
