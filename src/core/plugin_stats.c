/* plugin_stats.c — a storage backend's counters through whichever entry its
 * table has: the size-carrying get_stats2 of 0.3 tables, or the frozen
 * get_stats every table has. */
#include <stddef.h>

#include "core/plugin.h"

void dcpi_storage_stats(const dcp_storage_plugin *t, const dcp_storage *st, dcp_io_stats *out) {
  if (DCP_HAS_FIELD(t, dcp_storage_plugin, get_stats2) && t->get_stats2) {
    /* Zeroed first: a plugin built against a shorter dcp_io_stats2 leaves
     * the fields it does not know untouched. */
    dcp_io_stats2 s2 = {.struct_size = sizeof s2};
    t->get_stats2(st, &s2);
    *out = (dcp_io_stats){s2.bytes_written, s2.write_ops, s2.bytes_read, s2.read_ops,
                          s2.sync_ops,      s2.meta_ops,  s2.retries};
    return;
  }
  t->get_stats(st, out);
}
