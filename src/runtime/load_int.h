/* load_int.h — internals of dcp_load shared by its three files:
 *
 *   load.c        the driver: metadata, planning, bytes items, agreements;
 *   load_groups.c read dedup: who reads what (replica groups from the
 *                 layouts or from one exchange of request keys, one reader
 *                 per group) and the broadcast schedule;
 *   load_exec.c   reading chunks, and running the schedule: a reader thread
 *                 reads and verifies ahead while the calling thread
 *                 broadcasts.
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
 * schedule (every chunk OWN when dedup is off or unavailable). Ends with an
 * agreement: the outcome is the same on every rank. */
dcp_status dcpi_load_schedule(dcpi_rt *rt, const dcp_state *st, const dcp_load_options *o,
                              dcpi_load_sched *sc);

/* ---- load_exec.c -------------------------------------------------------- */

/* The name of ref's data file. Errors: DCP_ECORRUPT (not in the table). */
dcp_status dcpi_load_file_of(dcp_meta *m, const dcp_storage_ref *ref, const char **name,
                             dcpi_err *err);

/* Read destination chunk `chunk` of st (all its overlaps in plan) through
 * br, verifying every block. */
dcp_status dcpi_load_read_chunk(dcpi_block_reader *br, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, size_t chunk, dcpi_err *err);

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

#endif
