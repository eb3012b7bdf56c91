/* session.h — the writer process's side of a SAVE job: its own context
 * (kept across jobs while the coordination config is unchanged) and the
 * state rebuilt over the pool mapping. */
#ifndef DCP_WRITER_SESSION_H
#define DCP_WRITER_SESSION_H

#include "writer/proto.h"

typedef struct dcpi_wsession {
  dcp_ctx *ctx;
  dcpi_wp_coord coord; /* owned copy of the config ctx was made with */
} dcpi_wsession;

void dcpi_wsession_init(dcpi_wsession *s);

/* Close the context. */
void dcpi_wsession_free(dcpi_wsession *s);

/* Save job's state, whose data lies in the pool mapped at base, with
 * dcp_save on the session's context (created or re-created for job's
 * coordination config). The outcome into err (code DCP_OK on success). */
void dcpi_wsession_save(dcpi_wsession *s, const dcpi_wp_job *job, const uint8_t *base,
                        dcpi_err *err);

#endif
