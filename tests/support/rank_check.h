/* rank_check.h — the failure macros of the multi-process test programs
 * (scenarios, async tests): a failed check prints the rank, the place and a
 * printf-style reason, and exits 1 so the launcher sees the rank fail.
 * Each program sets g_rank once it knows its rank. */
#ifndef DCP_TEST_RANK_CHECK_H
#define DCP_TEST_RANK_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "dcp.h"

static int g_rank = -1;

#define CHECK(cond, ...)                                                              \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "rank %d: check failed at %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                                   \
      fprintf(stderr, "\n");                                                          \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* expr must return DCP_OK; else the status and ctx's last error (ctx may be
 * NULL) are the reason. */
#define OK(expr, ctx)                                                  \
  do {                                                                 \
    dcp_status ok_s_ = (expr);                                         \
    CHECK(ok_s_ == DCP_OK, "%s: %s (%s)", #expr, dcp_strerror(ok_s_), \
          (ctx) ? dcp_ctx_last_error(ctx) : "");                       \
  } while (0)

#endif
