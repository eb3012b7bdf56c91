/* read_groups.h — read dedup: ranks that want the identical (fqn, box) form
 * a group, and one member per group reads it (then broadcasts it to the
 * others).
 *
 * Input: every rank's request keys, as one exchange delivers them (per rank
 * a list of (fqn, box, bytes), ranks in any arrival order). Output: the
 * groups in canonical order (fqn bytewise, then ndim, box offset, box size),
 * each with its reader and its members ascending; the bytes each rank reads;
 * and per rank which groups it reads and which it receives. The reader is
 * chosen by dcpi_balance (LEAST_LOADED balances bytes read across ranks;
 * LOWEST_RANK is the article's behaviour); when the collective tells hosts
 * apart, dcpi_read_groups_prefer_hosts then keeps it on the host of most
 * of the group's members. Pure; the output depends only on
 * the set of (rank, key) pairs, never on arrival order.
 *
 * Share groups (dcpi_share_plan_build, below) extend this to partial
 * overlaps: ranks needing different parts of one saved chunk whose granule
 * ranges overlap get one reader for the union, who sends each its piece. */
#ifndef DCP_PLANNER_READ_GROUPS_H
#define DCP_PLANNER_READ_GROUPS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "planner/balance.h"

/* One request: the box [offset, offset+size) (ndim each) of fqn, whose
 * transfer costs `bytes`. Pointers are borrowed for the build call. */
typedef struct dcpi_read_key {
  const char *fqn;
  uint32_t ndim;
  const int64_t *offset;
  const int64_t *size;
  int64_t bytes;
} dcpi_read_key;

/* What one rank asks for. */
typedef struct dcpi_rank_requests {
  int32_t rank;
  size_t nkeys;
  const dcpi_read_key *keys;
} dcpi_rank_requests;

/* A group: every rank that asked for (fqn, box). Arrays owned by the plan. */
typedef struct dcpi_read_group {
  const char *fqn;
  uint32_t ndim;
  const int64_t *offset;
  const int64_t *size;
  int64_t bytes;
  int32_t reader;          /* one of the members */
  uint32_t nmembers;
  const int32_t *members;  /* ascending, distinct */
} dcpi_read_group;

typedef struct dcpi_read_groups {
  int32_t world_size;
  size_t ngroups;
  dcpi_read_group *groups; /* canonical order; index = the group's id */
  int64_t *load;           /* world_size: bytes each rank reads */
  size_t *read_first;      /* world_size+1 CSR into read_list: */
  uint32_t *read_list;     /*   groups the rank reads, ascending */
  size_t *recv_first;      /* world_size+1 CSR into recv_list: */
  uint32_t *recv_list;     /*   groups it belongs to but does not read */
  char **names;            /* owned storage: distinct fqns, */
  size_t nnames;
  int64_t *coords;         /*   boxes, */
  int32_t *member_pool;    /*   and member lists */
} dcpi_read_groups;

/* Group the requests of nranks ranks (each rank at most once, in
 * [0, world_size)) and choose one reader per group under policy. A rank
 * that lists the same key twice is one member. Every member of a group must
 * give the same bytes. Errors: DCP_EINVAL (rank out of range or repeated,
 * NULL or malformed key, negative bytes), DCP_EMISMATCH (members disagree
 * on a group's bytes; message names fqn and box), DCP_ENOMEM. On error
 * *out is NULL. */
dcp_status dcpi_read_groups_build(const dcpi_rank_requests *ranks, size_t nranks,
                                  int32_t world_size, dcpi_balance_policy policy,
                                  dcpi_read_groups **out, dcpi_err *err);

/* Re-chooses every group's reader of g (built by dcpi_read_groups_build)
 * knowing each rank's host: host_of[r] (world_size entries) is an id of
 * rank r's host. The reader is a member on a host that holds the most
 * members of the group (the most receivers then get the data without
 * leaving their host); among the members of every host tied for the most,
 * the balancer chooses under policy as before. With every rank on one host,
 * or one member per host, the result equals the host-blind one. Pure and
 * deterministic (depends only on g's groups, host_of and policy); g's
 * loads and per-rank lists are rebuilt. Errors: DCP_EINVAL (NULL), DCP_ENOMEM
 * (g is then unchanged). */
dcp_status dcpi_read_groups_prefer_hosts(dcpi_read_groups *g, const uint64_t *host_of,
                                         dcpi_balance_policy policy, dcpi_err *err);

void dcpi_read_groups_free(dcpi_read_groups *g);

/* One rank's share: the groups it reads (and sends to their other members)
 * and the groups it receives from their reader (groups[i].reader).
 * Pointers into g. */
typedef struct dcpi_rank_reads {
  const uint32_t *reads;
  size_t nreads;
  const uint32_t *recvs;
  size_t nrecvs;
  int64_t bytes_read;
} dcpi_rank_reads;

/* rank's share of g. Errors: DCP_EINVAL (NULL), DCP_ENOTFOUND (rank not in
 * [0, world_size)). A rank that asked for nothing gets empty lists. */
dcp_status dcpi_read_groups_rank(const dcpi_read_groups *g, int32_t rank,
                                 dcpi_rank_reads *out);

/* ---- partial-overlap sharing --------------------------------------------
 *
 * Ranks that each need a different part of one saved chunk would each read
 * the granules (checksum blocks) that cover their part; where those ranges
 * overlap, the same granules are read several times. A share group is a
 * maximal set of needs of one saved chunk whose granule ranges overlap
 * (connected by pairwise overlap): one of its ranks, the reader, reads the
 * union of their ranges once, verifies it, fills its own needs and sends
 * every other need its piece. Needs overlapping no other need are left to
 * their rank (read as before). So the bytes read per saved chunk are the
 * union of the granule ranges needed, and each need is served exactly once,
 * by its own read or by its group's reader. */

/* One need: rank needs `bytes` (its piece) out of the granule-aligned raw
 * bytes [lo, hi) of the saved chunk (key_hi, key_lo). seq tells apart one
 * rank's needs (distinct per rank; the runtime uses its overlap index). */
typedef struct dcpi_share_need {
  int32_t rank;
  uint32_t seq;
  uint64_t key_hi, key_lo;
  int64_t lo, hi; /* 0 <= lo < hi */
  int64_t bytes;  /* >= 0 */
} dcpi_share_need;

/* A group: needs[first, first+count) of the plan (count >= 2), the union
 * [lo, hi) of their ranges, read once by reader (one of their ranks). */
typedef struct dcpi_share_group {
  uint64_t key_hi, key_lo;
  int64_t lo, hi;
  int32_t reader;
  uint32_t nranks; /* distinct ranks among its needs */
  size_t first, count;
} dcpi_share_group;

typedef struct dcpi_share_plan {
  int32_t world_size;
  size_t nneeds;
  dcpi_share_need *needs;   /* canonical order: key, lo, hi, rank, seq */
  int64_t *group_of;        /* nneeds: the need's group, or -1 (read alone) */
  size_t ngroups;
  dcpi_share_group *groups; /* in the needs' order */
  int64_t *load;            /* world_size: base plus the groups' bytes read */
} dcpi_share_plan;

/* Form the share groups of needs[0..n) and choose each group's reader
 * among its ranks: under policy through dcpi_balance (LEAST_LOADED: the
 * group's bytes hi-lo to its least-loaded rank, starting from base[r] bytes
 * each rank reads anyway, base may be NULL; LOWEST_RANK: its lowest rank);
 * with host_of (world_size host ids, or NULL) only ranks on the host that
 * holds the most of the group's ranks are candidates. Pure and
 * deterministic: the result depends on the set of needs, never on their
 * order. Errors: DCP_EINVAL (NULL with n > 0, a rank out of range, lo < 0,
 * lo >= hi, negative bytes or base, a (rank, seq) given twice; the message
 * names it), DCP_ENOMEM. On error *out is NULL. */
dcp_status dcpi_share_plan_build(const dcpi_share_need *needs, size_t n, int32_t world_size,
                                 dcpi_balance_policy policy, const int64_t *base,
                                 const uint64_t *host_of, dcpi_share_plan **out,
                                 dcpi_err *err);

void dcpi_share_plan_free(dcpi_share_plan *p);

#endif
