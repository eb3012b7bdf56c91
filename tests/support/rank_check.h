/* rank_check.h — CHECK, the one failure macro of the test programs that run
 * as ranks (forked ranks, mpirun jobs, scenario and async programs; cmocka
 * tests use cmocka's assert_* instead). A failed check prints
 *
 *   rank R: FILE:LINE: check failed: COND[: REASON]
 *
 * (REASON: the optional printf-style arguments) and ends the rank with
 * CHECK_FAIL(). A program may define, before including this header:
 *   CHECK_RANK    the expression that names the rank (default: g_rank, a
 *                 static int the program sets once it knows its rank)
 *   CHECK_FAIL()  how a failed check ends the rank (default exit(1); an MPI
 *                 program aborts the job, a forked child _exit()s).
 * OK(expr, ctx) checks that expr returns DCP_OK and reports the status and
 * the context's last error otherwise. */
#ifndef DCP_TEST_RANK_CHECK_H
#define DCP_TEST_RANK_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "dcp.h"

#ifndef CHECK_RANK
static int g_rank = -1;
#define CHECK_RANK g_rank
#endif
#ifndef CHECK_FAIL
#define CHECK_FAIL() exit(1)
#endif

/* The ": REASON" part and the end of the line. fmt is the reason's format
 * after a space (" " alone: no reason), so that it is never empty. */
__attribute__((format(printf, 1, 2))) static inline void check_reason_(const char *fmt, ...) {
  if (fmt[1]) {
    va_list ap;
    va_start(ap, fmt);
    fputc(':', stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
  }
  fputc('\n', stderr);
  fflush(stderr);
}

#define CHECK(cond, ...)                                                                    \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "rank %d: %s:%d: check failed: %s", (int)(CHECK_RANK), __FILE__,     \
              __LINE__, #cond);                                                             \
      check_reason_(" " __VA_ARGS__);                                                        \
      CHECK_FAIL();                                                                         \
    }                                                                                       \
  } while (0)

#define OK(expr, ctx)                                                                  \
  do {                                                                                 \
    dcp_status ok_s_ = (expr);                                                         \
    CHECK(ok_s_ == DCP_OK, "%s: %s (%s)", #expr, dcp_strerror(ok_s_),                  \
          (ctx) ? dcp_ctx_last_error(ctx) : "");                                       \
  } while (0)

#endif
