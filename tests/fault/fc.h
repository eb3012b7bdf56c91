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
  bool static_cfg; /* the replicated bytes item is the same in every
                      generation (a config that does not change between
                      steps); off unless the campaign sets it */
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

/* Load path into fresh buffers of the whole model and tell which of
 * gens[0..n) they hold exactly: *which is its index (the first that
 * matches), -1 for none (meaningful when the load returned DCP_OK). With a
 * context of the model's world each rank loads its own part (PER_RANK items
 * included); with a world of one and a model of several ranks (a checkpoint
 * saved by detached ranks), every tensor whole and the REPLICATED item,
 * the PER_RANK items being another world's. */
dcp_status fc_load_match(dcp_ctx *ctx, const fc_model *m, const char *path,
                         const uint32_t *gens, int n, int *which);

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

/* ---- the power-loss journal (fc_crash.c, fc_journal.h) ----------------------------- */

#define FC_CUT_ALL UINT64_MAX /* a "cut" after the whole journal, marks included */

typedef struct fc_journal fc_journal;
/* Create an empty journal at path and its zeroed state file. */
void fc_journal_prepare(const char *path);
/* Append a mark (text) unless the power is off; false when it is. */
bool fc_journal_mark(const char *path, const char *text);
/* Whether the journal's cut fired. */
bool fc_journal_power_off(const char *path);
fc_journal *fc_journal_load(const char *path);
void fc_journal_free(fc_journal *j);
/* The number of operations journaled. */
uint64_t fc_journal_ops(const fc_journal *j);
/* The marks visible at cut (written before operation cut began): up to
 * cap of them into texts/seqs; returns how many there are. */
size_t fc_journal_marks(const fc_journal *j, uint64_t cut, const char **texts,
                        uint64_t *seqs, size_t cap);
/* "op 12/40 rename ckpt/.metadata.tmp -> .metadata" */
void fc_journal_describe(const fc_journal *j, uint64_t seq, char *out, size_t cap);
/* Whether a removal of a name match() accepts, in root, lies in
 * (after_seq, cut]. */
bool fc_journal_removed_after(const fc_journal *j, uint64_t cut, const char *root,
                              uint64_t after_seq, bool (*match)(const char *name));
/* Write under out the directories below base as a power cut after
 * operation cut could leave them (rng NULL: as the operations left them,
 * which is what the disk holds when only the processes died). desc
 * receives what was chosen. See fc_crash.c for the model. */
void fc_crash_build(const fc_journal *j, uint64_t cut, const char *base, const char *out,
                    fc_rng *rng, bool strict_mkdir, char *desc, size_t cap);
/* Whether trees a and b hold the same directories and files, byte for
 * byte; why says where they differ. */
bool fc_tree_same(const char *a, const char *b, char *why, size_t cap);
void fc_rmtree(const char *path);

/* The power-loss campaign (fc_power.c). */
typedef struct fc_power_args {
  const char *dir, *plugins;
  const char *seq; /* "single", "overwrite" or "steps" */
  bool async;
  int world; /* > 1: detached ranks, each saving its own <rank>.metadata */
  long trials;
  uint64_t seed;
  bool strict_overwrite; /* an error after a crash where a save had
                            committed before is a failure */
  bool strict_mkdir;     /* a new checkpoint directory is never durable */
  bool in_place;         /* overwrites with DCP_SAVE_IN_PLACE (un-commit first) */
  const char *lying_fs;  /* "fsync" or "syncdir": the plugin ignores those
                            syncs, and the campaign must see checkpoints
                            lost (a check of its own oracle); NULL: none */
  int variants;          /* crash states drawn per cut */
} fc_power_args;
/* Runs the campaign, prints its tables; returns the process exit status. */
int fc_power_campaign(const fc_power_args *a);

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
void fc_trial_no_context(const fc_env *env, long t, dcp_status rc, const char *msg);

#endif
