/* model.h — the checkpoints the corruption campaign damages: their
 * tensors and bytes items (every value a function of its position, so a
 * load can be checked byte for byte), how each is saved (ranks forked over
 * the file collective, or detached ranks with no collective) and how each
 * is loaded back whole. */
#ifndef DCP_CORRUPT_MODEL_H
#define DCP_CORRUPT_MODEL_H

#include <stdbool.h>
#include <stddef.h>

#include "dcp.h"

/* Where the program finds plugins and keeps its files. */
typedef struct cm_env {
  const char *plugins; /* directory of the build's plugins */
  const char *work;    /* scratch directory, owned by the campaign */
} cm_env;

/* One of the campaign's checkpoints. */
typedef enum cm_kind {
  CM_COORDINATED = 0, /* 3 ranks, file collective, zstd blocks, one .metadata */
  CM_UNCOORDINATED,   /* 2 detached ranks, raw blocks, <rank>.metadata each */
  CM_KINDS
} cm_kind;

/* World size of a kind's save. */
int cm_world(cm_kind k);

/* Save checkpoint k into dir (which must not hold one yet). Returns 0 on
 * success, else prints why and returns -1. */
int cm_save(const cm_env *env, cm_kind k, const char *dir);

/* The outcome of a load: its status and the context's message. */
typedef struct cm_result {
  dcp_status status;
  char msg[1024];
  bool exact; /* DCP_OK and every byte equals what was saved */
} cm_result;

/* Load everything of checkpoint k at dir that a world of one can load
 * (every tensor whole, the REPLICATED bytes items) with ctx, a context of
 * one rank, and compare it with what was saved. */
void cm_load_whole(dcp_ctx *ctx, cm_kind k, const char *dir, cm_result *out);

/* Whether kind k has PER_RANK bytes items (a world of one cannot load
 * them: cm_load_per_rank does, with the saving world). */
bool cm_has_per_rank(cm_kind k);

/* Load the PER_RANK bytes items of checkpoint k at dir with the saving
 * world (ranks forked over the file collective) and compare them; out
 * gets rank 0's outcome (every rank agrees on the status). */
void cm_load_per_rank(const cm_env *env, cm_kind k, const char *dir, cm_result *out);

#endif
