/* fc.h — the fault campaign (tests/fault): a seeded model, its saves and
 * loads, the control files of the "fault" storage plugin, and the trial
 * phases. See fault_campaign.c for the campaign's shape. */
#ifndef DCP_TESTS_FAULT_FC_H
#define DCP_TESTS_FAULT_FC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

/* Fail the process (exit 1) with a message naming the rank and trial. */
#define FC_CHECK(c, ...)                                     \
  do {                                                       \
    if (!(c)) fc_die(__FILE__, __LINE__, __VA_ARGS__);       \
  } while (0)
void fc_die(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
extern int fc_rank;     /* this process's rank, for messages */
extern long fc_cur_trial; /* the trial under way, for messages */

/* ---- seeded randomness ---------------------------------------------------- */

typedef struct fc_rng {
  uint64_t s;
} fc_rng;
uint64_t fc_next(fc_rng *r);
/* Uniform in [lo, hi]. */
uint64_t fc_range(fc_rng *r, uint64_t lo, uint64_t hi);

/* ---- the model ------------------------------------------------------------ */

#define FC_MAX_TENSORS 5 /* up to 4 small ones and one large */

typedef struct fc_tensor {
  char fqn[32];
  dcp_dtype dtype;
  int64_t rows, cols;
  bool replicated; /* every rank holds it whole (else split by rows) */
} fc_tensor;

/* The geometry of a trial's model and its save options: the same on every
 * rank (derived from the trial seed alone). */
typedef struct fc_model {
  uint64_t seed;
  int world;
  int ntensors;
  fc_tensor t[FC_MAX_TENSORS];
  size_t cfg_len, rng_len; /* a replicated and a per-rank bytes item */
  uint32_t block_size;
  bool compress, low_entropy;
} fc_model;

void fc_model_make(fc_model *m, uint64_t seed, int world);

/* This rank's buffers of a model: filled with generation gen's values, or
 * poisoned (to load into). */
typedef struct fc_bufs {
  uint8_t *t[FC_MAX_TENSORS];
  uint8_t *cfg, *rng;
} fc_bufs;

void fc_bufs_fill(const fc_model *m, int rank, uint32_t gen, fc_bufs *b);
void fc_bufs_poison(const fc_model *m, int rank, fc_bufs *b);
void fc_bufs_free(fc_bufs *b);
/* Whether b holds exactly generation gen's values of this rank. */
bool fc_bufs_equal(const fc_model *m, int rank, uint32_t gen, const fc_bufs *b);

/* Save generation gen of m to path (async through the writer process when
 * async is set) and return the outcome (the wait's, for async). */
dcp_status fc_save(dcp_ctx *ctx, const fc_model *m, uint32_t gen, const char *path,
                   uint32_t flags, bool async);
/* Load path into fresh buffers; *exact tells whether they hold generation
 * gen (meaningful when the load returned DCP_OK). */
dcp_status fc_load(dcp_ctx *ctx, const fc_model *m, uint32_t gen, const char *path,
                   bool *exact);

/* Load path; *which is 0 when the buffers hold generation gen_a, 1 for
 * gen_b, -1 for neither (meaningful when the load returned DCP_OK). */
dcp_status fc_load_either(dcp_ctx *ctx, const fc_model *m, uint32_t gen_a, uint32_t gen_b,
                          const char *path, int *which);

/* ---- files ------------------------------------------------------------------ */

void fc_write_file(const char *path, const char *text);
/* The file's text (malloc'd), or NULL when it does not exist. */
char *fc_read_file(const char *path);
void fc_mkdir(const char *path);
/* Operation counts of the plugin's probe file: kind name -> count. */
uint64_t fc_probe_count(const char *probe_text, const char *kind);
/* The committed checkpoint at path holds exactly .metadata and the data
 * files its metadata names, nothing else (recursively; sharedfs keeps files
 * in subdirectories). Fails the process otherwise, naming the extra or
 * missing file. */
void fc_check_files(dcp_ctx *ctx, const char *path);

/* The fault plugin's operation log of one committed save (log= of the
 * control file) shows the durable commit order: every data file synced and
 * its directory entry synced by the rank that wrote it, then .metadata.tmp
 * synced, renamed to .metadata and the directory synced; when the save
 * replaced a committed checkpoint, the removal of its .metadata durable
 * before any data file is opened. Fails the process otherwise. */
void fc_check_commit_order(const char *log_path);

/* ---- trials ------------------------------------------------------------------ */

/* The phases of a trial; a trial runs all three in one world unless its
 * fault kills a process (then each runs in a fresh world). */
#define FC_PHASE_PREV 1u  /* save the previous checkpoint, probing op counts */
#define FC_PHASE_FAULT 2u /* the save with the injected fault */
#define FC_PHASE_CHECK 4u /* load both, retry, check leftovers */
#define FC_PHASE_ALL 7u

#define FC_MAX_WORLD 4

/* Where a trial runs. */
typedef struct fc_env {
  const char *dir;     /* the campaign's work directory */
  const char *plugins; /* where dcp-storage-fault.so is */
  uint64_t seed;
  bool async;       /* saves through the writer process */
  int rank, world;  /* world 1: single process; at most FC_MAX_WORLD */
  bool fork_kills;  /* sync, one rank: a kill trial's fault phase runs in a
                       forked child */
  long resync_ms;   /* > 0: after a killing fault phase, wait until this
                       long after its start, so the ranks whose wait ended
                       early (their writer died) meet the others, which
                       waited for the deadline, in the next collective */
} fc_env;

/* The fault a trial injects, derived from its seed. */
typedef struct fc_fault {
  int rank;         /* the rank whose storage fails */
  bool kill;        /* the process dies (SIGKILL) */
  char spec[128];   /* the control-file text */
} fc_fault;

/* Whether trial t of env's campaign kills a process (known before the
 * probe: the driver needs it to plan worlds). */
bool fc_trial_kills(const fc_env *env, long t);

/* Storage options of a context of this rank: the fault plugin over inner,
 * controlled by <dir>/ctl.<rank>. */
void fc_storage_options(const fc_env *env, const char *inner, char *out, size_t cap);

/* Run the given phases of trial t on ctx (a context whose storage is the
 * fault plugin, see fc_storage_options). Fails the process on any
 * undetected failure; rank 0 appends the trial's outcome to
 * <dir>/results. */
void fc_trial(const fc_env *env, dcp_ctx *ctx, long t, unsigned phases);

/* The fault phase of trial t on a rank whose context could not be created
 * (a world of short deadline under load): record s as its save's outcome. */
void fc_trial_no_context(const fc_env *env, long t, dcp_status s, const char *msg);

#endif
