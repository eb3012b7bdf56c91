/* session.h — the writer process's side of a SAVE job: its own context
 * (kept across jobs while the coordination config is unchanged) and the
 * state rebuilt over the pool mapping. */
#ifndef DCP_WRITER_SESSION_H
#define DCP_WRITER_SESSION_H

#include "runtime/plan_cache.h"
#include "writer/proto.h"

typedef struct dcpi_wsession {
  dcp_ctx *ctx;
  dcpi_wp_coord coord; /* owned copy of the config ctx was made with */
  /* plan cache entries from the trainer that arrived before a context
   * existed to hold them */
  dcpi_plan_entry *inbox[DCPI_PLAN_CACHE_SLOTS];
  size_t ninbox;
} dcpi_wsession;

void dcpi_wsession_init(dcpi_wsession *s);

/* Close the context. */
void dcpi_wsession_free(dcpi_wsession *s);

/* Keep a plan cache entry from the trainer (ownership passes): into the
 * context's cache, or the inbox until there is a context. */
void dcpi_wsession_take_plan(dcpi_wsession *s, dcpi_plan_entry *e);

/* Send the trainer the context's plan cache entries it has not seen
 * (before the DONE of a save that made one). Errors: as dcpi_wp_send. */
dcp_status dcpi_wsession_share_plans(dcpi_wsession *s, int sock, dcpi_err *err);

/* Free the context and the inbox (the end of the session). */
void dcpi_wsession_end(dcpi_wsession *s);

/* Open the session's context for the coordination config c now (an OPEN
 * from dcp_async_prepare), so that the first SAVE finds it (and the
 * writers' collective) ready; a context for the same config is kept.
 * Errors: as dcp_ctx_create (the first SAVE then tries again). */
dcp_status dcpi_wsession_open(dcpi_wsession *s, const dcpi_wp_coord *c, dcpi_err *err);

/* Save job's state, whose data lies in the pool mapped at base, with
 * dcp_save on the session's context (created or re-created for job's
 * coordination config). The outcome into err (code DCP_OK on success). */
void dcpi_wsession_save(dcpi_wsession *s, const dcpi_wp_job *job, const uint8_t *base,
                        dcpi_err *err);

#endif
