/* coll_testkit.h — shared machinery for the collective-plugin unit tests
 * (test_coll_file.c, test_coll_gloo.c; tests/multirank/mpi_coll.c uses its
 * loader and payload helpers with CHECK macros of its own): plugin loading, forked ranks that
 * report through their exit code, a rendezvous directory, deterministic
 * payloads and the per-op checks both plugins must pass identically.
 * Include after testutil.h. */
#ifndef DCP_COLL_TESTKIT_H
#define DCP_COLL_TESTKIT_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "dcp_plugin.h"

/* The plugin under test (set by the test's setup), the forked child's rank
 * (for messages; -1 in the parent) and the rendezvous directory. */
extern const dcp_coll_plugin *ctk_P;
extern int ctk_rank;
extern char ctk_dir[PATH_MAX];

/* A failed CHECK (rank_check.h) ends the forked child rank with exit
 * status 1, which the parent's ctk_run reports. */
#ifndef CHECK_RANK
#define CHECK_RANK ctk_rank
#endif
#ifndef CHECK_FAIL
#define CHECK_FAIL() _exit(1)
#endif
#include "rank_check.h"

/* CHECK that a plugin call returned rc, printing its message otherwise
 * (needs a dcp_plugin_err named err in scope). */
#define CHECK_RC(call, rc)                                                        \
  do {                                                                            \
    int got_ = (call);                                                            \
    CHECK(got_ == (rc), "%s = %d (%s), want %d", #call, got_, err.msg, (int)(rc)); \
  } while (0)

#define MIB (1024u * 1024u)

/* Payload sizes every op is run with: 0, 1 and 1 MiB bytes. */
extern const size_t CTK_SIZES[3];

/* Loads ../lib/dcp/dcp-coll-<name>.so relative to this test binary and
 * returns its collective table. When optional and the file does not exist,
 * says so on stderr and returns NULL (the caller skips its tests). */
const dcp_coll_plugin *ctk_load_plugin(const char *name, int optional);
/* The collective table of the plugin at path (NULL, with a message, when it
 * does not load). */
const dcp_coll_plugin *ctk_load_path(const char *path);

/* Sleeps ms milliseconds. */
void ctk_sleep_ms(long ms);
/* Milliseconds on the monotonic clock. */
double ctk_now_ms(void);

/* Deterministic bytes for (seed, len): every rank can predict every part. */
void ctk_fill(unsigned char *p, size_t len, unsigned seed);
/* 1 when p holds ctk_fill(seed, len). */
int ctk_matches(const unsigned char *p, size_t len, unsigned seed);

/* Number of entries in dir (not . and ..), -1 if unreadable. */
int ctk_count_entries(const char *dir);
/* Removes dir with its files and flat subdirectories. */
void ctk_remove_dir(const char *dir);
/* A fresh rendezvous directory /tmp/<prefix>-XXXXXX in ctk_dir. */
void ctk_fresh_dir(const char *prefix);

/* Opens a communicator of ctk_P for rank/world on ctk_dir. */
int ctk_open_comm(int rank, int world, int64_t timeout_ms, const char *opts, dcp_comm **c,
                  dcp_plugin_err *err);

typedef int (*ctk_scenario_fn)(int rank, int world, void *arg);

/* Forks world (<= 16) children running fn (ctk_rank set) and returns the
 * number that failed (non-zero exit, signal). A child hanging past 60 s is
 * killed by alarm. */
int ctk_run_ranks(int world, ctk_scenario_fn fn, void *arg);

/* allgather of every size, rank-dependent contents. 0 on success. */
int ctk_check_allgather(dcp_comm *c, int rank, int world);
/* allreduce MIN/MAX/SUM of rank-dependent values, then (when many_n > 0)
 * a SUM of many_n values, then n = 0 and a bad op. 0 on success. */
int ctk_check_allreduce(dcp_comm *c, int rank, int world, size_t many_n);

/* Scenario for ctk_run_ranks: open after a delay (rank 0 late when *arg,
 * an int, is nonzero; else the others late), then run a few ops. A rank
 * that took a stale session of an earlier job would time out. */
int ctk_scenario_stale(int rank, int world, void *arg);

/* Scenario for ctk_run_ranks(4, ...): two jobs of two ranks share the
 * rendezvous directory at once; arg is the two jobs' option strings
 * (const char *[2]). Each job's allgathers see only its own ranks. */
int ctk_scenario_two_jobs(int idx, int world, void *arg);

/* Scenario for ctk_run_ranks(3, ...): after a barrier the last rank
 * exits (no close) while the others start the op that needs it, arg a
 * ctk_p2p_case: op 0 gatherv to it, 1 scatterv from it, 2 group_bcast
 * from it, 3 group_bcast to it from rank 0. Every other rank must get
 * DCP_EPEER or DCP_ETIMEDOUT by timeout_ms + 2 s, never hang; a rank whose
 * part of the op needs nothing from the dead one may succeed, and must
 * then fail so in the barrier that follows. The failure's message must
 * contain want (when not NULL). */
#define CTK_P2P_OPS 4
typedef struct ctk_p2p_case {
  int op;
  int64_t timeout_ms; /* the communicator's */
  const char *want;   /* in the message of the failure, or NULL */
} ctk_p2p_case;
int ctk_scenario_exits_p2p(int rank, int world, void *arg);

/* The victim of the planted-link tests: a file outside the rendezvous
 * directory, in a fresh directory of its own, that no collective may ever
 * write through. ctk_victim_make writes it (its path into victim,
 * PATH_MAX bytes); ctk_victim_intact is 1 while it holds exactly what was
 * written; ctk_victim_drop removes its directory and everything in it. */
void ctk_victim_make(char *victim);
int ctk_victim_intact(const char *victim);
void ctk_victim_drop(const char *victim);

/* Plants a symbolic link ctk_dir/<name> -> target (asserts it worked). */
void ctk_plant_link(const char *name, const char *target);

#endif
