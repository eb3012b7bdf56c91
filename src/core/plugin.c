/* plugin.c — the plugin registry and the dlopen loader (see plugin.h).
 *
 * The registry is process-wide state (one of the few: docs/layers.md lists
 * them) because a plugin table is a process-wide resource (a shared object is loaded once per process however
 * many contexts use it), and dcp_plugin_register has no context to hang a
 * table on. It is a small array guarded by a mutex; entries are never
 * removed, and the objects they point into are never unloaded. */
#define _GNU_SOURCE /* dladdr, Dl_info */
#include "core/plugin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/checked.h"

/* One known table: registered (explicitly, wins) or loaded (the cache). */
typedef struct plugin_entry {
  uint32_t kind;
  int registered;
  char name[DCPI_PLUGIN_NAME_MAX + 1];
  const void *table;
} plugin_entry;

static struct {
  pthread_mutex_t lock;
  plugin_entry *items;
  size_t count, cap;
} registry = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

/* The size of a version-1 table: the end of its last v1 field. Pinned to
 * that field rather than sizeof, so fields appended by later versions of the
 * header do not raise the minimum that old plugins must meet. */
#define V1_STORAGE_SIZE \
  (offsetof(dcp_storage_plugin, get_stats) + sizeof(((dcp_storage_plugin *)0)->get_stats))
#define V1_COLL_SIZE \
  (offsetof(dcp_coll_plugin, group_bcast) + sizeof(((dcp_coll_plugin *)0)->group_bcast))

/* "storage" / "coll" for messages and file names, NULL for an unknown kind. */
static const char *kind_name(uint32_t kind) {
  if (kind == DCP_PLUGIN_STORAGE) return "storage";
  if (kind == DCP_PLUGIN_COLL) return "coll";
  return NULL;
}

/* Bounded scan: a name that is too long is refused at the 65th byte. */
int dcpi_plugin_name_ok(const char *name) {
  if (!name) return 0;
  size_t n = 0;
  for (; name[n]; n++) {
    char c = name[n];
    if (n >= DCPI_PLUGIN_NAME_MAX) return 0;
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return 0;
  }
  return n > 0;
}

/* ------------------------------------------------------------------------ */
/* Validation                                                               */
/* ------------------------------------------------------------------------ */

/* The common header of both table kinds, read through the table's own type
 * (the object really is one of the two). */
typedef struct table_head {
  uint32_t abi_version, struct_size;
  const char *name;
} table_head;

/* Read abi_version and struct_size; name only once struct_size says the
 * table is a whole v1 table (a too-small table may end before it). */
static table_head read_head(uint32_t kind, const void *table, size_t v1_size) {
  table_head h = {0, 0, NULL};
  if (kind == DCP_PLUGIN_STORAGE) {
    const dcp_storage_plugin *s = table;
    h.abi_version = s->abi_version;
    h.struct_size = s->struct_size;
    if (h.abi_version == DCP_PLUGIN_ABI_VERSION && h.struct_size >= v1_size) h.name = s->name;
  } else {
    const dcp_coll_plugin *c = table;
    h.abi_version = c->abi_version;
    h.struct_size = c->struct_size;
    if (h.abi_version == DCP_PLUGIN_ABI_VERSION && h.struct_size >= v1_size) h.name = c->name;
  }
  return h;
}

/* Check version, size and name of a table whose kind is known valid. The
 * version comes first: a table of another ABI may lay out everything after
 * it differently. */
static dcp_status check_head(uint32_t kind, const void *table, const char *expect_name,
                             const char *where, dcpi_err *err) {
  size_t v1 = kind == DCP_PLUGIN_STORAGE ? V1_STORAGE_SIZE : V1_COLL_SIZE;
  table_head h = read_head(kind, table, v1);
  if (h.abi_version != DCP_PLUGIN_ABI_VERSION)
    return dcpi_fail(err, DCP_EPLUGIN,
                     "%s: plugin ABI version %u, but this libdcp supports version %d", where,
                     h.abi_version, DCP_PLUGIN_ABI_VERSION);
  if (h.struct_size < v1)
    return dcpi_fail(err, DCP_EPLUGIN,
                     "%s: struct_size %u is smaller than the version-1 %s table (%zu bytes)",
                     where, h.struct_size, kind_name(kind), v1);
  if (!h.name || !h.name[0]) return dcpi_fail(err, DCP_EPLUGIN, "%s: table has no name", where);
  if (!dcpi_plugin_name_ok(h.name))
    return dcpi_fail(err, DCP_EPLUGIN, "%s: table name \"%.*s\" is not [a-z0-9_]{1,%d}", where,
                     DCPI_PLUGIN_NAME_MAX + 1, h.name, DCPI_PLUGIN_NAME_MAX);
  if (expect_name && strcmp(h.name, expect_name) != 0)
    return dcpi_fail(err, DCP_EPLUGIN, "%s: table is named \"%s\", expected \"%s\"", where,
                     h.name, expect_name);
  return DCP_OK;
}

/* A required function pointer, by field name and presence. */
typedef struct fn_field {
  const char *field;
  int present;
} fn_field;

#define FN(t, f) {#f, (t)->f != NULL}

/* The first missing field of fields[0..n), as an error. */
static dcp_status check_fields(const fn_field *fields, size_t n, const char *where,
                               dcpi_err *err) {
  for (size_t i = 0; i < n; i++)
    if (!fields[i].present)
      return dcpi_fail(err, DCP_EPLUGIN, "%s: required function %s is NULL", where,
                       fields[i].field);
  return DCP_OK;
}

/* Every function of a storage table is required. */
static dcp_status check_storage_fns(const dcp_storage_plugin *s, const char *where,
                                    dcpi_err *err) {
  const fn_field f[] = {FN(s, open),      FN(s, close),      FN(s, file_open), FN(s, file_write),
                        FN(s, file_read), FN(s, file_sync),  FN(s, file_close), FN(s, file_size),
                        FN(s, rename),    FN(s, remove),     FN(s, sync_dir),  FN(s, list),
                        FN(s, get_stats)};
  return check_fields(f, sizeof f / sizeof f[0], where, err);
}

/* Every function of a collective table is required except group_bcast,
 * which must be present exactly when caps promises it. */
static dcp_status check_coll_fns(const dcp_coll_plugin *c, const char *where, dcpi_err *err) {
  const fn_field f[] = {FN(c, open),      FN(c, close),         FN(c, rank),
                        FN(c, size),      FN(c, barrier),       FN(c, bcast),
                        FN(c, allgather), FN(c, gatherv),       FN(c, scatterv),
                        FN(c, allreduce_i64)};
  dcp_status rc = check_fields(f, sizeof f / sizeof f[0], where, err);
  if (rc) return rc;
  if ((c->caps & DCP_COLL_CAP_GROUPS) && !c->group_bcast)
    return dcpi_fail(err, DCP_EPLUGIN,
                     "%s: required function group_bcast is NULL but caps has "
                     "DCP_COLL_CAP_GROUPS",
                     where);
  return DCP_OK;
}

dcp_status dcpi_plugin_check(uint32_t kind, const void *table, const char *expect_name,
                             const char *where, dcpi_err *err) {
  if (!kind_name(kind)) return dcpi_fail(err, DCP_EINVAL, "unknown plugin kind %u", kind);
  if (!table) return dcpi_fail(err, DCP_EINVAL, "%s: NULL table", where);
  dcp_status rc = check_head(kind, table, expect_name, where, err);
  if (rc) return rc;
  if (kind == DCP_PLUGIN_STORAGE) return check_storage_fns(table, where, err);
  return check_coll_fns(table, where, err);
}

/* ------------------------------------------------------------------------ */
/* Registry (callers hold registry.lock)                                    */
/* ------------------------------------------------------------------------ */

/* The entry for (kind, name, registered), or NULL. */
static plugin_entry *registry_get(uint32_t kind, const char *name, int registered) {
  for (size_t i = 0; i < registry.count; i++) {
    plugin_entry *e = &registry.items[i];
    if (e->kind == kind && e->registered == registered && strcmp(e->name, name) == 0) return e;
  }
  return NULL;
}

/* Record table for (kind, name). A registered table replaces an earlier
 * registration; a loaded one keeps the first table cached (two threads may
 * race to load the same object). *used is the table now in the entry. */
static dcp_status registry_put(uint32_t kind, const char *name, int registered,
                               const void *table, const void **used) {
  plugin_entry *e = registry_get(kind, name, registered);
  if (e) {
    if (registered) e->table = table;
    *used = e->table;
    return DCP_OK;
  }
  dcp_status rc = DCPI_RESERVE(registry.items, registry.cap, registry.count + 1);
  if (rc) return rc;
  e = &registry.items[registry.count++];
  e->kind = kind;
  e->registered = registered;
  snprintf(e->name, sizeof e->name, "%s", name); /* name_ok: it fits */
  e->table = table;
  *used = table;
  return DCP_OK;
}

/* The table cached for (kind, name, registered), or NULL; takes the lock. */
static const void *registry_lookup(uint32_t kind, const char *name, int registered) {
  pthread_mutex_lock(&registry.lock);
  const plugin_entry *e = registry_get(kind, name, registered);
  const void *t = e ? e->table : NULL;
  pthread_mutex_unlock(&registry.lock);
  return t;
}

/* registry_put under the lock; ENOMEM becomes a message. */
static dcp_status registry_store(uint32_t kind, const char *name, int registered,
                                 const void *table, const void **used, dcpi_err *err) {
  pthread_mutex_lock(&registry.lock);
  dcp_status rc = registry_put(kind, name, registered, table, used);
  pthread_mutex_unlock(&registry.lock);
  if (rc) return dcpi_fail(err, rc, "cannot record %s plugin \"%s\": out of memory",
                           kind_name(kind), name);
  return DCP_OK;
}

dcp_status dcpi_plugin_register(uint32_t kind, const void *table, dcpi_err *err) {
  const char *kn = kind_name(kind);
  if (!kn) return dcpi_fail(err, DCP_EINVAL, "unknown plugin kind %u", kind);
  if (!table) return dcpi_fail(err, DCP_EINVAL, "NULL %s table", kn);
  char where[32];
  snprintf(where, sizeof where, "registered %s table", kn);
  dcp_status rc = dcpi_plugin_check(kind, table, NULL, where, err);
  if (rc) return rc;
  const char *name = read_head(kind, table, 0).name;
  const void *used;
  return registry_store(kind, name, 1, table, &used, err);
}

/* The public entry point (dcp_plugin.h): the reason of a failure has no
 * context to go to, so only the status is returned. */
dcp_status dcp_plugin_register(uint32_t kind, const void *table) {
  dcpi_err err;
  dcpi_err_clear(&err);
  return dcpi_plugin_register(kind, table, &err);
}

/* ------------------------------------------------------------------------ */
/* Search path                                                              */
/* ------------------------------------------------------------------------ */

/* The directories to search, in order, without duplicates (owned strings). */
typedef struct dir_list {
  char **v;
  size_t n, cap;
} dir_list;

/* Free the strings and the array. */
static void dirs_free(dir_list *d) {
  for (size_t i = 0; i < d->n; i++) free(d->v[i]);
  free(d->v);
}

/* Append the len bytes at dir unless empty or already listed. */
static dcp_status dirs_add(dir_list *d, const char *dir, size_t len) {
  if (len == 0) return DCP_OK; /* "a::b" — an empty entry means nothing */
  for (size_t i = 0; i < d->n; i++)
    if (strlen(d->v[i]) == len && memcmp(d->v[i], dir, len) == 0) return DCP_OK;
  dcp_status rc = DCPI_RESERVE(d->v, d->cap, d->n + 1);
  if (rc) return rc;
  char *s = malloc(len + 1);
  if (!s) return DCP_ENOMEM;
  memcpy(s, dir, len);
  s[len] = '\0';
  d->v[d->n++] = s;
  return DCP_OK;
}

/* Append every directory of a colon-separated list (NULL: none). */
static dcp_status dirs_add_list(dir_list *d, const char *list) {
  while (list && *list) {
    const char *colon = strchr(list, ':');
    size_t len = colon ? (size_t)(colon - list) : strlen(list);
    dcp_status rc = dirs_add(d, list, len);
    if (rc) return rc;
    list = colon ? colon + 1 : NULL;
  }
  return DCP_OK;
}

/* Append <dir of libdcp>/dcp and <dir of libdcp>. dladdr on an object of
 * this library names the file it was loaded from: libdcp.so, or the
 * executable when the core is linked statically (then it is argv[0]). Only
 * an absolute name is used: a relative one is relative to a working
 * directory that may have changed since, and loading code from wherever
 * the process happens to stand is not a search path anyone chose. */
static dcp_status dirs_add_self(dir_list *d) {
  Dl_info info;
  if (!dladdr(&registry, &info) || !info.dli_fname || info.dli_fname[0] != '/') return DCP_OK;
  const char *slash = strrchr(info.dli_fname, '/');
  size_t len = (size_t)(slash - info.dli_fname);
  char *sub = malloc(len + sizeof "/dcp");
  if (!sub) return DCP_ENOMEM;
  memcpy(sub, info.dli_fname, len);
  memcpy(sub + len, "/dcp", sizeof "/dcp");
  dcp_status rc = dirs_add(d, sub, len + 4);
  free(sub);
  if (!rc) rc = dirs_add(d, info.dli_fname, len ? len : 1); /* "/libdcp.so" → "/" */
  return rc;
}

/* Every directory to search for a plugin, in order: what the caller and
 * the environment name, then next to the libdcp actually loaded, and only
 * then the compiled-in install directory, so that an install used from
 * another prefix (or a build tree) gets its own plugins, never a stale or
 * broken one of the prefix it was configured for. */
static dcp_status dirs_collect(dir_list *d, const char *extra_path) {
  dcp_status rc = dirs_add_list(d, extra_path);
  if (!rc) rc = dirs_add_list(d, getenv("DCP_PLUGIN_PATH"));
  if (!rc) rc = dirs_add_self(d);
#ifdef DCP_PLUGIN_INSTALL_DIR
  if (!rc) rc = dirs_add_list(d, DCP_PLUGIN_INSTALL_DIR);
#endif
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */
/* ------------------------------------------------------------------------ */

/* dlsym's void * as the entry function (memcpy: ISO C has no conversion
 * between object and function pointers; POSIX guarantees they match). */
static dcp_plugin_entry_fn as_entry(void *sym) {
  dcp_plugin_entry_fn fn;
  _Static_assert(sizeof fn == sizeof sym, "function and object pointers differ in size");
  memcpy(&fn, &sym, sizeof fn);
  return fn;
}

/* Load the shared object at path and validate its table of kind, named
 * name. The object is never unloaded, even when it is rejected: its
 * constructors have run and may have registered tables that point into it. */
static dcp_status load_file(const char *path, uint32_t kind, const char *name,
                            const void **table, dcpi_err *err) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return dcpi_fail(err, DCP_EPLUGIN, "cannot load %s plugin \"%s\" from %s: %s",
                     kind_name(kind), name, path, why ? why : "dlopen failed");
  }
  dlerror(); /* clear, so a NULL from dlsym is told apart from an error */
  void *sym = dlsym(h, DCP_PLUGIN_ENTRY_SYMBOL);
  if (!sym)
    return dcpi_fail(err, DCP_EPLUGIN, "%s does not export the entry symbol %s", path,
                     DCP_PLUGIN_ENTRY_SYMBOL);
  const void *t = as_entry(sym)(kind);
  if (!t)
    return dcpi_fail(err, DCP_EPLUGIN,
                     "%s provides no %s table (the first dcp-%s-%s.so on the plugin search "
                     "path is used: set DCP_PLUGIN_PATH to choose another)",
                     path, kind_name(kind), kind_name(kind), name);
  dcp_status rc = dcpi_plugin_check(kind, t, name, path, err);
  if (rc) return rc;
  *table = t;
  return DCP_OK;
}

/* Write "<dir>/dcp-<kind>-<name>.so" into buf; 0 when it does not fit. */
static int plugin_path(char *buf, size_t cap, const char *dir, uint32_t kind, const char *name) {
  int n = snprintf(buf, cap, "%s/dcp-%s-%s.so", dir, kind_name(kind), name);
  return n > 0 && (size_t)n < cap;
}

/* The not-found error, listing the directories tried as far as the message
 * allows ("... and N more" past that). */
static dcp_status not_found(uint32_t kind, const char *name, const dir_list *d, dcpi_err *err) {
  char list[DCPI_ERR_MSG_MAX];
  size_t used = 0, budget = sizeof list - 220; /* room for the rest of the message */
  size_t i = 0;
  for (; i < d->n; i++) {
    size_t need = strlen(d->v[i]) + (i ? 2 : 0);
    if (used + need >= budget) break;
    used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", d->v[i]);
  }
  if (i < d->n) snprintf(list + used, sizeof list - used, " ... and %zu more", d->n - i);
  if (d->n == 0) snprintf(list, sizeof list, "(no directories)");
  return dcpi_fail(err, DCP_EPLUGIN,
                   "%s plugin \"%s\" not found: no dcp-%s-%s.so in %s (set DCP_PLUGIN_PATH "
                   "or plugin_path)",
                   kind_name(kind), name, kind_name(kind), name, list);
}

/* Search the directories in order; the first existing file decides. */
static dcp_status search(uint32_t kind, const char *name, const char *extra_path,
                         const void **table, dcpi_err *err) {
  dir_list d = {NULL, 0, 0};
  dcp_status rc = dirs_collect(&d, extra_path);
  if (rc) {
    dirs_free(&d);
    return dcpi_fail(err, rc, "out of memory building the plugin search path");
  }
  char path[4096];
  int found = 0;
  for (size_t i = 0; i < d.n && !found; i++) {
    if (!plugin_path(path, sizeof path, d.v[i], kind, name) || access(path, F_OK) != 0) continue;
    found = 1; /* the first existing file decides, loadable or not */
    rc = load_file(path, kind, name, table, err);
  }
  if (!found) rc = not_found(kind, name, &d, err);
  dirs_free(&d);
  return rc;
}

/* ------------------------------------------------------------------------ */
/* Lookup                                                                   */
/* ------------------------------------------------------------------------ */

/* Arguments, then registered, built-in, cached, disk (see plugin.h). */
dcp_status dcpi_plugin_find(uint32_t kind, const char *name, const char *extra_path,
                            const void **table, dcpi_err *err) {
  if (!table) return dcpi_fail(err, DCP_EINVAL, "NULL table output");
  *table = NULL;
  const char *kn = kind_name(kind);
  if (!kn) return dcpi_fail(err, DCP_EINVAL, "unknown plugin kind %u", kind);
  if (!dcpi_plugin_name_ok(name))
    return dcpi_fail(err, DCP_EINVAL, "invalid %s plugin name \"%.*s\": want [a-z0-9_]{1,%d}",
                     kn, name ? DCPI_PLUGIN_NAME_MAX + 1 : 6, name ? name : "(null)",
                     DCPI_PLUGIN_NAME_MAX);
  const void *t = registry_lookup(kind, name, 1);
  if (!t && kind == DCP_PLUGIN_COLL && strcmp(name, "single") == 0) t = dcpi_coll_single();
  if (!t) t = registry_lookup(kind, name, 0);
  if (t) {
    *table = t;
    return DCP_OK;
  }
  /* Loaded without the lock: the plugin's constructors may call
   * dcp_plugin_register, which takes it. */
  dcp_status rc = search(kind, name, extra_path, &t, err);
  if (rc) return rc;
  return registry_store(kind, name, 0, t, table, err);
}

/* ------------------------------------------------------------------------ */
/* Plugin results                                                           */
/* ------------------------------------------------------------------------ */

/* Whether rc is an error code this libdcp knows by name. */
static int known_error(int rc) {
  return rc < 0 && strcmp(dcp_strerror((dcp_status)rc), "unknown status") != 0;
}

dcp_status dcpi_plugin_status(int rc, const dcp_plugin_err *perr, const char *plugin_name,
                              const char *op, dcpi_err *err) {
  if (rc == 0) return DCP_OK;
  const char *who = plugin_name ? plugin_name : "plugin";
  const char *sep = op ? ": " : "";
  op = op ? op : "";
  /* A buggy plugin may fill msg to the brim without a terminator. */
  int mlen = perr ? (int)strnlen(perr->msg, sizeof perr->msg) : 0;
  const char *msg = mlen ? perr->msg : "";
  if (!known_error(rc))
    return dcpi_fail(err, DCP_EPLUGIN, "%s: %s%sreturned %d, which is not a dcp_status%s%.*s",
                     who, op, sep, rc, mlen ? ": " : "", mlen, msg);
  if (!mlen) return dcpi_fail(err, (dcp_status)rc, "%s: %s%s%s", who, op, sep,
                              dcp_strerror((dcp_status)rc));
  return dcpi_fail(err, (dcp_status)rc, "%s: %s%s%.*s", who, op, sep, mlen, msg);
}
