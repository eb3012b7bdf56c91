/* mgr_kit.h — what the manager tests share: a small model whose every
 * value is a function of the step (so a loaded step is checked bit for
 * bit), the contexts, and a few checks. */
#ifndef DCP_TEST_MGR_KIT_H
#define DCP_TEST_MGR_KIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dcp.h"

#define MK_NUMEL 96 /* global elements of the tensor "w" (divisible by 1..4) */

#define MK_CHECK(cond, ...)                                          \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                  \
      fprintf(stderr, "\n");                                         \
      exit(3);                                                       \
    }                                                                \
  } while (0)

/* A rank's part of the model: its block of "w" and the replicated bytes
 * item "step" (the step in decimal, zero-padded to 20 bytes). */
typedef struct mk_model {
  dcp_state *st;
  int32_t rank, world;
  int64_t off, len;    /* this rank's block of w */
  uint32_t *w;         /* len values */
  char tag[20];
} mk_model;

/* The value of element i of w at step. */
uint32_t mk_value(int64_t step, int64_t i);

/* The model of ctx's rank (its block of w; world 1: all of it). */
void mk_model_init(mk_model *m, dcp_ctx *ctx);
void mk_model_free(mk_model *m);

/* Fill the model with step's values. */
void mk_model_fill(mk_model *m, int64_t step);

/* Whether the model holds exactly step's values (after a load). */
int mk_model_is(const mk_model *m, int64_t step);

/* A context: the file collective in rdv when world > 1 (rank, world as
 * given), else a world of one; the writers over "file" in rdv. Exits 1 on
 * failure. */
dcp_ctx *mk_ctx(int32_t rank, int32_t world, const char *rdv, int64_t timeout_ms,
                int64_t lease_ms);

#endif
