/* load_int.h — internals of dcp_load shared by its three files:
 *
 *   load.c        the driver: metadata, planning, bytes items, agreements;
 *   load_groups.c read dedup: who reads what (replica groups from the
 *                 layouts or from one exchange of request keys, one reader
 *                 per group) and the broadcast schedule;
 *   load_exec.c   reading chunks, and running the schedule: a reader thread
 *                 reads and verifies ahead while the calling thread
 *                 broadcasts;
 *   load_share.c  partial-overlap sharing: where several ranks' reads of
 *                 one saved chunk cover the same granules, one reads them
 *                 once and sends each of the others its piece (run before
 *                 the broadcasts).
 *
 * The schedule is a list of broadcast units, one group_bcast each, in one
 * global order that every rank derives identically from group-intrinsic
 * data (members, reader, size class, key hash), so the group broadcasts of
 * different ranks never cross (deadlock freedom: the smallest unfinished
 * unit in that order always has all its members waiting on it). */
#ifndef DCP_RUNTIME_LOAD_INT_H
#define DCP_RUNTIME_LOAD_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "model/state.h"
#include "planner/load_plan.h"
#include "planner/read_groups.h"
#include "runtime/rt.h"

#define DCPI_LOAD_PACK_BYTES (1u << 20)            /* items below this are packed */
#define DCPI_LOAD_DEFAULT_INFLIGHT (256ull << 20)  /* max_inflight_bytes default */

/* How this rank gets a destination chunk. */
enum { DCPI_CHUNK_OWN = 0,  /* reads it for itself (no group, or dedup off) */
       DCPI_CHUNK_READ = 1, /* reads it for its group and broadcasts it */
       DCPI_CHUNK_RECV = 2  /* receives it from its group's reader */ };

/* Where the groups came from (dcp_stats.dedup_path). */
enum { DCPI_DEDUP_NONE = 0, DCPI_DEDUP_LAYOUT = 1, DCPI_DEDUP_EXCHANGE = 2 };

/* One group_bcast: chunks items[first, first+count) of this rank, all of
 * one group's member list and reader, back to back in a pack buffer when
 * packed, else (count 1) straight from/into the chunk's memory. */
typedef struct dcpi_bcast_unit {
  const int32_t *members; /* ascending; points into the schedule */
  uint32_t nmembers;
  int32_t reader;
  size_t first, count;
  int64_t bytes;
  bool packed;
} dcpi_bcast_unit;

typedef struct dcpi_load_sched {
  uint32_t path;           /* DCPI_DEDUP_* */
  size_t nchunks;
  uint8_t *role;           /* nchunks: DCPI_CHUNK_* */
  uint32_t *items;         /* chunk indices of the units, unit by unit */
  size_t nitems;
  dcpi_bcast_unit *units;  /* in the global order */
  size_t nunits;
  int32_t *members;        /* owned member lists behind the units */
  int64_t max_pack;        /* largest packed unit (pack buffer size) */
  uint64_t ngroups;        /* groups of >= 2 ranks this rank is in */
  int64_t read_bytes;      /* payload this rank reads (own + for groups) */
  /* working memory of dcpi_load_exec, allocated before the schedule's
   * agreement so that no rank fails to allocate once broadcasts begin */
  uint8_t *pack;           /* max_pack bytes */
  size_t *runits;          /* nunits */
  uint32_t *own;           /* nchunks */
  /* partial-overlap sharing (load_share.c); share NULL: none */
  dcpi_share_plan *share;  /* every rank's needs and the groups */
  int64_t *share_words;    /* every rank's need records (see load_share.c) */
  size_t *share_rec;       /* per need of share (canonical): its record's word */
  uint8_t *skip;           /* per overlap of the load plan: 1 = a share group
                              serves it (the chunk's own read leaves it out) */
  uint8_t *share_buf;      /* share_buf_len bytes: pieces sent or received */
  int64_t share_buf_len;
  int64_t share_read;      /* bytes this rank reads for share groups */
} dcpi_load_sched;

void dcpi_load_sched_free(dcpi_load_sched *sc);

/* ---- load_groups.c ------------------------------------------------------ */

/* One request key: a hash of (fqn, box) and the chunk's bytes. */
typedef struct dcpi_load_key {
  uint64_t h1, h2;
  int64_t bytes;
} dcpi_load_key;

/* The key of the box (offset, size) of fqn. */
dcpi_load_key dcpi_load_key_of(const char *fqn, size_t fqn_len, uint32_t ndim,
                               const int64_t *offset, const int64_t *size, int64_t bytes);

/* Groups of identical keys over the requests of every rank (keys[r] with
 * nkeys[r] entries for r in [0, world)), one reader each under policy: a
 * thin adapter over dcpi_read_groups_build (each key becomes an anonymous
 * 2-d "box" of its hash). Group i's key is group_key(g, i). */
dcp_status dcpi_load_groups_build(const dcpi_load_key *const *keys, const size_t *nkeys,
                                  int32_t world, dcpi_balance_policy policy,
                                  dcpi_read_groups **out, dcpi_err *err);

/* Index of the group of key k in g, or -1. */
int64_t dcpi_load_groups_find(const dcpi_read_groups *g, const dcpi_load_key *k);

/* Layout path, locally: when every non-empty chunk of st was added with a
 * layout (dcp_state_add_sharded) whose mesh ranks are all in [0, world),
 * the requests every rank makes for st's layout tensors, synthesized from
 * the layouts (*usable true; *out their groups under policy). Otherwise
 * *usable is false and *out NULL. */
dcp_status dcpi_load_layout_groups(const dcp_state *st, int32_t world,
                                   dcpi_balance_policy policy, bool *usable,
                                   dcpi_read_groups **out, dcpi_err *err);

/* The check that all members of every group derived locally agree on it:
 * this rank's contributions to two sums (three 20-bit lanes each): A gets
 * h(group) from every member, B gets nmembers * h(group) from its reader.
 * Summed over all ranks, A == B (w.h.p. only) when the members agree on
 * every group's key, members and reader. keys: this rank's keys. */
void dcpi_load_agreement_lanes(const dcpi_read_groups *g, int32_t rank,
                               const dcpi_load_key *keys, size_t nkeys, int64_t a[3],
                               int64_t b[3]);

/* The schedule of rank from groups g, given its keys (key i is chunk
 * chunk_of[i] of st). Pure: the same groups give every member the same
 * units in the same order. */
dcp_status dcpi_load_sched_build(const dcpi_read_groups *g, int32_t rank,
                                 const dcpi_load_key *keys, const uint32_t *chunk_of,
                                 size_t nkeys, size_t nchunks, dcpi_load_sched *sc,
                                 dcpi_err *err);

/* Collective: decide read dedup for this load and build this rank's
 * schedule (every chunk OWN when dedup is off or unavailable), with its
 * share groups (dcpi_load_share_plan) when dedup is on. Ends with an
 * agreement: the outcome is the same on every rank. */
dcp_status dcpi_load_schedule(dcpi_rt *rt, dcp_meta *m, const dcpi_saved_source *src,
                              const dcp_state *st, const dcpi_load_plan *plan,
                              const dcp_load_options *o, dcpi_load_sched *sc);

/* ---- load_share.c ------------------------------------------------------- */

/* Collective (every rank calls it at the same point once dedup is on,
 * local passing its status so far): every rank's needs (the granules of
 * each saved chunk that its OWN and READ chunks' overlaps read, with the
 * overlap's geometry) through two allgathers, then the share groups
 * (dcpi_share_plan_build under policy, readers on the hosts of most of
 * their ranks when hosts is set, balanced from the bytes each rank reads
 * alone) into sc, and the working memory. No agreement: the groups are a
 * function of the exchanged needs. Returns local when it failed, else its
 * own status (a rank that failed before sends no needs, and then no rank
 * shares). */
dcp_status dcpi_load_share_plan(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, dcpi_balance_policy policy,
                                const uint64_t *hosts, dcpi_load_sched *sc, dcp_status local);

/* Local, on the layout path (every chunk of st has its layout's box): plan
 * the reads of every distinct box the layouts give any rank against the
 * checkpoint (src, m) and set *possible when two of them cover a common
 * granule of one saved chunk — exactly when the share exchange would form
 * a group. When no rank finds one, every rank skips the exchange. Errors:
 * as dcpi_load_plan_build, DCP_ENOMEM. */
dcp_status dcpi_load_share_possible(const dcp_state *st, dcp_meta *m,
                                    const dcpi_saved_source *src, bool *possible,
                                    dcpi_err *err);

/* The byte runs of overlap_sink.ov that fall in one raw window of its
 * saved chunk, copied to dest: a dcpi_block_sink (load_exec.c). */
typedef struct dcpi_overlap_sink {
  const dcpi_overlap *ov;
  uint8_t *dest; /* the destination chunk's data (or a piece) */
} dcpi_overlap_sink;
dcp_status dcpi_load_copy_runs(void *arg, uint64_t raw_off, const uint8_t *data, size_t len,
                               dcpi_err *err);

/* ---- load_exec.c -------------------------------------------------------- */

/* The name of ref's data file. Errors: DCP_ECORRUPT (not in the table). */
dcp_status dcpi_load_file_of(dcp_meta *m, const dcp_storage_ref *ref, const char **name,
                             dcpi_err *err);

/* The saved chunk that overlap ov of st reads (*ci) and the name of its
 * data file (*file, owned by m). Errors: the metadata's (the tensor or
 * chunk missing, DCP_ECORRUPT for a damaged list), DCP_ECORRUPT (a file
 * index not in the table). */
dcp_status dcpi_load_saved_of(dcp_meta *m, const dcp_state *st, const dcpi_overlap *ov,
                              dcp_chunk_info *ci, const char **file, dcpi_err *err);

/* Read destination chunk `chunk` of st (its overlaps in plan, except
 * those skip flags, skip may be NULL) through br, verifying every block;
 * *bytes (may be NULL) gets the bytes of the overlaps read. */
dcp_status dcpi_load_read_chunk(dcpi_block_reader *br, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, size_t chunk, const uint8_t *skip,
                                uint64_t *bytes, dcpi_err *err);

/* What an execution did. */
typedef struct dcpi_load_counts {
  uint64_t sent, recv;     /* group broadcast payload */
  uint64_t payload;        /* bytes read from storage into chunks */
} dcpi_load_counts;

/* Run sc on this rank: read its OWN and READ chunks, broadcast every unit.
 * Every unit is broadcast even after a local read error (its members are
 * waiting), so the error reaches the others through the agreement that
 * follows; only a failing collective stops the schedule. With pipeline a
 * reader thread reads (at most max_inflight bytes ahead of the broadcasts)
 * while this thread broadcasts; without, everything is read first. Local
 * status; the message goes to rt->err. */
dcp_status dcpi_load_exec(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                          const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                          dcpi_block_reader *br, bool pipeline, uint64_t max_inflight,
                          dcpi_load_counts *counts);

/* Run sc's share groups on this rank, in their canonical order (before
 * the units): as a group's reader, read its granules once (verified),
 * fill its own overlaps and send every other rank of the group its pieces
 * (a two-rank group_bcast per rank, in rank order); as another rank of it,
 * receive its pieces and copy them into place. After a local read failure
 * (*rs, message in *rerr, the first one kept) the pieces are still sent,
 * so nobody waits: the failure reaches every rank through the agreement
 * after the load. Returns a failure of the collective only. */
dcp_status dcpi_load_share_exec(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                                dcpi_block_reader *br, dcpi_load_counts *counts,
                                dcp_status *rs, dcpi_err *rerr);

#endif
