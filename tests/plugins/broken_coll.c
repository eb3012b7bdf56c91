/* broken_coll.c — a collective plugin (dcp-coll-nogroup.so) that claims
 * DCP_COLL_CAP_GROUPS but leaves group_bcast NULL: the loader must refuse
 * it. Its other functions are stubs that nothing may call. */
#include "dcp_plugin.h"

static int c_open(const dcp_coll_config *c, dcp_comm **o, dcp_plugin_err *e) {
  (void)c, (void)o, (void)e;
  return DCP_EIO;
}
static void c_close(dcp_comm *c) { (void)c; }
static int32_t c_id(const dcp_comm *c) { return c ? 0 : -1; }
static int c_barrier(dcp_comm *c, dcp_plugin_err *e) {
  (void)c, (void)e;
  return DCP_EIO;
}
static int c_bcast(dcp_comm *c, void *b, size_t l, int32_t r, dcp_plugin_err *e) {
  (void)c, (void)b, (void)l, (void)r, (void)e;
  return DCP_EIO;
}
static int c_allgather(dcp_comm *c, const void *s, size_t l, void *r, dcp_plugin_err *e) {
  (void)c, (void)s, (void)l, (void)r, (void)e;
  return DCP_EIO;
}
static int c_gatherv(dcp_comm *c, const void *s, size_t l, void *r, const size_t *ls,
                     int32_t root, dcp_plugin_err *e) {
  (void)c, (void)s, (void)l, (void)r, (void)ls, (void)root, (void)e;
  return DCP_EIO;
}
static int c_scatterv(dcp_comm *c, const void *s, const size_t *ls, void *r, size_t l,
                      int32_t root, dcp_plugin_err *e) {
  (void)c, (void)s, (void)ls, (void)r, (void)l, (void)root, (void)e;
  return DCP_EIO;
}
static int c_allreduce(dcp_comm *c, int64_t *v, size_t n, uint32_t op, dcp_plugin_err *e) {
  (void)c, (void)v, (void)n, (void)op, (void)e;
  return DCP_EIO;
}

static const dcp_coll_plugin table = {
    .abi_version = DCP_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(dcp_coll_plugin),
    .name = "nogroup",
    .caps = DCP_COLL_CAP_GROUPS, /* the lie */
    .open = c_open,
    .close = c_close,
    .rank = c_id,
    .size = c_id,
    .barrier = c_barrier,
    .bcast = c_bcast,
    .allgather = c_allgather,
    .gatherv = c_gatherv,
    .scatterv = c_scatterv,
    .allreduce_i64 = c_allreduce,
    .group_bcast = NULL,
};

DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind);
DCP_PLUGIN_EXPORT const void *dcp_plugin_entry(uint32_t kind) {
  return kind == DCP_PLUGIN_COLL ? &table : NULL;
}
