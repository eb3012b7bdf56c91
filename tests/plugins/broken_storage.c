/* broken_storage.c — deliberately defective storage plugins for the loader
 * tests. Compiled once per defect, with one of these defined:
 *
 *   BROKEN_ABI       abi_version is DCP_PLUGIN_ABI_VERSION + 41
 *   BROKEN_SIZE      struct_size is smaller than the version-1 table
 *   BROKEN_NOENTRY   the entry symbol is missing (exported under a typo)
 *   BROKEN_NULLTABLE the entry returns NULL for every kind
 *   BROKEN_NULLFN    file_read is NULL
 *   BROKEN_NAME      the table calls itself "other"
 *
 * FIXTURE_NAME is the name in the file name (dcp-storage-<name>.so). The
 * functions are stubs: the loader must reject each table before any runs. */
#include "dcp_plugin.h"

/* Every stub fails: nothing may call them. */
static int st_open(const dcp_storage_config *c, dcp_storage **o, dcp_plugin_err *e) {
  (void)c, (void)o, (void)e;
  return DCP_EIO;
}
static void st_close(dcp_storage *s) { (void)s; }
static int st_fopen(dcp_storage *s, const char *n, uint32_t m, dcp_storage_file **o,
                    dcp_plugin_err *e) {
  (void)s, (void)n, (void)m, (void)o, (void)e;
  return DCP_EIO;
}
static int st_fwrite(dcp_storage_file *f, const void *b, size_t l, dcp_plugin_err *e) {
  (void)f, (void)b, (void)l, (void)e;
  return DCP_EIO;
}
#ifndef BROKEN_NULLFN
static int st_fread(dcp_storage_file *f, void *b, size_t l, uint64_t o, dcp_plugin_err *e) {
  (void)f, (void)b, (void)l, (void)o, (void)e;
  return DCP_EIO;
}
#endif
static int st_ffile(dcp_storage_file *f, dcp_plugin_err *e) {
  (void)f, (void)e;
  return DCP_EIO;
}
static int st_fsize(dcp_storage *s, const char *n, uint64_t *z, dcp_plugin_err *e) {
  (void)s, (void)n, (void)z, (void)e;
  return DCP_EIO;
}
static int st_rename(dcp_storage *s, const char *a, const char *b, dcp_plugin_err *e) {
  (void)s, (void)a, (void)b, (void)e;
  return DCP_EIO;
}
static int st_remove(dcp_storage *s, const char *n, dcp_plugin_err *e) {
  (void)s, (void)n, (void)e;
  return DCP_EIO;
}
static int st_syncdir(dcp_storage *s, dcp_plugin_err *e) {
  (void)s, (void)e;
  return DCP_EIO;
}
static int st_list(dcp_storage *s, int (*fn)(void *, const char *), void *a, dcp_plugin_err *e) {
  (void)s, (void)fn, (void)a, (void)e;
  return DCP_EIO;
}
static void st_stats(const dcp_storage *s, dcp_io_stats *o) { (void)s, (void)o; }

#if defined(BROKEN_ABI)
#define ABI (DCP_PLUGIN_ABI_VERSION + 41)
#else
#define ABI DCP_PLUGIN_ABI_VERSION
#endif
#if defined(BROKEN_SIZE)
#define SIZE ((uint32_t)offsetof(dcp_storage_plugin, get_stats)) /* one field short */
#else
#define SIZE ((uint32_t)sizeof(dcp_storage_plugin))
#endif
#if defined(BROKEN_NAME)
#define NAME "other"
#else
#define NAME FIXTURE_NAME
#endif
#if defined(BROKEN_NULLFN)
#define READ NULL
#else
#define READ st_fread
#endif

static const dcp_storage_plugin table = {
    .abi_version = ABI,
    .struct_size = SIZE,
    .name = NAME,
    .caps = 0,
    .open = st_open,
    .close = st_close,
    .file_open = st_fopen,
    .file_write = st_fwrite,
    .file_read = READ,
    .file_sync = st_ffile,
    .file_close = st_ffile,
    .file_size = st_fsize,
    .rename = st_rename,
    .remove = st_remove,
    .sync_dir = st_syncdir,
    .list = st_list,
    .get_stats = st_stats,
};

#if defined(BROKEN_NOENTRY)
DCP_PLUGIN_EXPORT const void *dcp_plugin_entyr(uint32_t kind); /* the typo is the defect */
DCP_PLUGIN_EXPORT const void *dcp_plugin_entyr(uint32_t kind) { return kind ? &table : NULL; }
#else
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind) {
#if defined(BROKEN_NULLTABLE)
  (void)kind;
  (void)table;
  return NULL;
#else
  return kind == DCP_PLUGIN_STORAGE ? &table : NULL;
#endif
}
#endif
