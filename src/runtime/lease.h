/* lease.h — the directory lease: one writer per checkpoint directory, also
 * between hosts of a shared file system, that a crashed holder cannot keep
 * forever (docs/save-load.md, "The directory lease").
 *
 * A lease is a small file in the checkpoint directory (".lock" for a
 * coordinated save, ".lock.<rank>" for an uncoordinated rank: files.h)
 * holding one text record: a 128-bit random nonce (the identity of one
 * acquisition), the holder's host name and pid, its expiry as wall-clock
 * milliseconds, its TTL and grace, and a renewal counter. While it is
 * held, a thread of the holder renews it every ttl/3 through a storage
 * handle of its own.
 *
 * Assumptions, and what follows from them:
 *  - Clock skew. Expiries are wall-clock times compared on other hosts, so
 *    the clocks of the hosts sharing a directory must differ by less than
 *    the grace (DCPI_LEASE_GRACE_MAX_MS = 2 s, or ttl/2 when that is less;
 *    recorded in the file). A lease is broken only once the breaker's
 *    clock is past expiry + grace.
 *  - Exclusive create. The storage plugin's DCP_FILE_EXCL is atomic on
 *    every host (posix; sharedfs on NFSv3+ or Lustre). A plugin without
 *    DCP_STORAGE_CAP_EXCL gets no lease: dcpi_lease_acquire returns DCP_OK
 *    with a lease that is not enforced (dcpi_lease_enforced false), whose
 *    check always passes — old plugins keep working as before.
 *  - Bounded steps. A breaker must replace the record it judged expired
 *    within "the step bound" (ttl/10, 10 ms..1 s) of reading it, and a
 *    creator must write its record within the same bound of creating the
 *    file; whoever measures (on its own monotonic clock) that it took
 *    longer does not claim the lease. Winners of a break wait twice the
 *    bound before claiming, so two breakers never both hold it.
 *  - A stalled holder (stopped, swapped out, paused in a debugger, a
 *    hung NFS server) loses its lease once it is past expiry: its own
 *    check fails (DCP_ESTALE, "expired") even when nobody took the lease,
 *    its renewal thread marks it lost and never takes it back, and if
 *    another process took it, both the check and the renewal see a record
 *    that is not theirs. The lease does not fence storage writes: a holder
 *    stalled in the middle of writing files resumes writing them until it
 *    next checks. Callers therefore check right before they commit, and
 *    must not let two saves share file names (the save identity in every
 *    file name does that).
 * The guarantees: at most one holder passes dcpi_lease_check at any time;
 * while no process stalls for longer than the step bound, no two hold the
 * lease at all (every holder's check passes); a crashed or stalled holder
 * blocks the directory for at most ttl + grace + twice the step bound after
 * its last renewal.
 *
 * A lease belongs to the process that acquired it: after fork() the child
 * must not use the parent's lease (its renewal thread does not exist
 * there) and should take its own. */
#ifndef DCP_RUNTIME_LEASE_H
#define DCP_RUNTIME_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "runtime/rt.h"

#define DCPI_LEASE_TTL_DEFAULT_MS DCPI_DEFAULT_LEASE_MS /* ttl_ms 0 means this */
#define DCPI_LEASE_TTL_MIN_MS DCPI_LEASE_MS_MIN
#define DCPI_LEASE_TTL_MAX_MS DCPI_LEASE_MS_MAX
#define DCPI_LEASE_GRACE_MAX_MS 2000           /* grace = min(this, ttl/2) */
#define DCPI_LEASE_RECORD_MAX 512              /* bytes of a record file */

typedef struct dcpi_lease dcpi_lease;

/* Take the lease file `name` (1..160 bytes of [A-Za-z0-9._-], not "." or
 * "..", e.g. ".lock" or ".lock.<rank>"; the lease also makes temporaries
 * "<name>.t-<16 hex>-<n>") in the checkpoint directory rt's
 * storage is open on (dcpi_rt_open_storage first; the lease opens its own
 * handle of the same plugin on rt->path with the context's storage
 * options and never touches rt->st). ttl_ms: how long a holder that stops
 * renewing keeps the lease, DCPI_LEASE_TTL_MIN_MS..DCPI_LEASE_TTL_MAX_MS,
 * or 0 for DCPI_LEASE_TTL_DEFAULT_MS. Does not wait for a live holder:
 * DCP_EBUSY at once, with a message naming the holder (host, pid, when the
 * lease expires, when it can be broken). An expired lease (its holder
 * stopped renewing: crashed, killed, stalled) is broken, which takes up to
 * 2 * the step bound; an empty or unreadable lease file (a holder that died
 * between creating and writing it, or one writing it right now) is read
 * again after twice the step bound and broken when unchanged.
 * On success *out is the lease, held and renewed until dcpi_lease_release.
 * When the plugin lacks DCP_STORAGE_CAP_EXCL, *out is a lease that is not
 * enforced (see above) and nothing is written.
 * Errors: DCP_EBUSY, DCP_EINVAL (arguments, storage not open), DCP_ENOMEM,
 * storage errors (DCP_EIO — e.g. a symbolic link planted at the name,
 * which is never followed —, DCP_ENOSPC); *out is NULL then. */
dcp_status dcpi_lease_acquire(dcpi_rt *rt, const char *name, int64_t ttl_ms, dcpi_lease **out,
                              dcpi_err *err);

/* Is the lease still ours and not about to expire? Reads the lease file
 * (it must hold our record) and requires more than ttl/4 left before our
 * expiry, so that a commit right after it finishes before anybody may
 * break the lease. DCP_ESTALE otherwise, saying why (taken over by whom,
 * removed, expired because this process stalled or its renewals failed —
 * with the last renewal error); once it failed it keeps failing. Storage
 * errors reading the file are returned as they are. Always DCP_OK for a
 * lease that is not enforced. Thread-safe against the renewal thread; call
 * it from one thread at a time. */
dcp_status dcpi_lease_check(dcpi_lease *l, dcpi_err *err);

/* Whether the lease is enforced (the plugin has DCP_STORAGE_CAP_EXCL). */
bool dcpi_lease_enforced(const dcpi_lease *l);

/* Stop renewing, remove the lease file if it still holds our record, and
 * free the lease. NULL is a no-op. A lease lost to another holder is left
 * alone; one this process overwrote while stalled is removed (after the
 * step bound, so breakers that judged the older record have acted). */
void dcpi_lease_release(dcpi_lease *l);

/* ---- the record (exposed for tests and tools) ---------------------------- */

typedef struct dcpi_lease_record {
  uint8_t nonce[16];    /* one acquisition's identity */
  char host[65];        /* the holder's host name ([A-Za-z0-9._-], cut at 64) */
  int64_t pid;
  int64_t expires_ms;   /* wall clock (ms since the epoch) */
  int64_t ttl_ms, grace_ms;
  uint64_t renewals;
  /* where pid means something: the holder's boot (32 hex digits of the
   * kernel's boot_id, "" when unknown) and pid namespace (inode, 0 when
   * unknown). A holder of this boot and namespace whose pid is gone is
   * dead: its lease is broken at once instead of after its expiry. */
  char boot[33];
  uint64_t pidns;
} dcpi_lease_record;

/* The record as its file holds it: one line,
 *   dcp-lease 1 nonce=<32 hex> host=<h> pid=<p> expires_ms=<ms> ttl_ms=<ms>
 *   grace_ms=<ms> renewals=<n>[ boot=<32 hex> pidns=<n>]\n
 * Returns its length (< cap), or 0 when it does not fit. */
size_t dcpi_lease_record_format(const dcpi_lease_record *r, char *buf, size_t cap);

/* Parse a record file's bytes strictly (exactly the format above, values
 * in range). true on success. */
bool dcpi_lease_record_parse(const char *buf, size_t len, dcpi_lease_record *r);

/* Wall-clock milliseconds since the epoch. */
int64_t dcpi_lease_wall_ms(void);

/* Whether process pid of this pid namespace has exited: no such pid, or a
 * zombie (exited, not yet reaped by its parent: a container init that never
 * waits, a trainer that killed its writer) with no live thread left. A
 * process whose main thread exited while others run also shows state Z
 * but keeps tasks: it counts as alive. Anything unreadable counts as alive
 * (the safe direction: the lease then waits for its expiry). */
bool dcpi_pid_gone(int64_t pid);

#endif
