/* plan_share.c — the plan cache shared over the writer protocol: PLAN
 * frames carry cache entries one side made and the other has not seen, so
 * a plan made by a sync save serves the next async save and the reverse. */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/plan_cache.h"
#include "writer/proto.h"

dcp_status dcpi_wp_send_plans(int sock, dcpi_plan_cache *c, dcpi_err *err) {
  dcpi_plan_entry *e[DCPI_PLAN_CACHE_SLOTS];
  size_t n = dcpi_plan_cache_take_unshared(c, e, DCPI_PLAN_CACHE_SLOTS);
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < n; i++) {
    dcpi_wbuf w = {0};
    dcpi_plan_entry_encode(e[i], &w);
    if (!rc && !w.status) rc = dcpi_wp_send(sock, DCPI_WP_PLAN, w.data, w.len, -1, err);
    dcpi_wbuf_free(&w);
    dcpi_plan_cache_release(c, e[i]);
  }
  return rc;
}

dcp_status dcpi_wp_plan_decode(const uint8_t *p, size_t len, dcpi_plan_entry **out,
                               dcpi_err *err) {
  dcp_status rc = dcpi_plan_entry_decode(p, len, out, err);
  if (rc == DCP_ECORRUPT) {
    char why[DCPI_ERR_MSG_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    dcpi_fail(err, rc, "writer protocol: bad PLAN: %.400s", why);
  }
  return rc;
}
