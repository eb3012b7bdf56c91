/* rt.h — the runtime's shared pieces: one save or load operation (dcpi_rt),
 * its collective and storage wrappers, and block encoding. The runtime is
 * the only layer that does I/O or communication, and it does both through
 * the plugins of the context. */
#ifndef DCP_RUNTIME_RT_H
#define DCP_RUNTIME_RT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "core/ctx.h"
#include "dcp_plugin.h"
#include "runtime/files.h"


/* One save or load in progress on this rank. */
typedef struct dcpi_rt {
  dcp_ctx *ctx;
  const char *path;
  dcp_storage *st; /* NULL until dcpi_rt_open_storage */
  dcp_io_stats io0; /* storage counters when opened */
  dcpi_err err;     /* the operation's outcome */
  double t0;
  _Atomic int data_file_gone; /* a load found a data file missing (the block
                                 reader sets it, from any thread) */
} dcpi_rt;

/* Seconds on a monotonic clock. */
double dcpi_now(void);

/* Start an operation on ctx over the checkpoint at path (not opened yet). */
void dcpi_rt_begin(dcpi_rt *rt, dcp_ctx *ctx, const char *path);

/* End it: close storage, fill ctx->stats' storage counters and total time,
 * report rt->err on the context, and return its code. */
dcp_status dcpi_rt_end(dcpi_rt *rt);

/* ---- collectives (all collective over the context's ranks) ------------- */

/* Agree on an outcome after a phase: every rank passes its local status;
 * when any rank failed, every rank gets the lowest failing rank's code and
 * message (prefixed "rank R: " on the others) in rt->err, and the code is
 * returned on all. A failure of the collective itself is returned as is. */
dcp_status dcpi_rt_agree(dcpi_rt *rt, dcp_status local);

/* dcpi_rt_agree that also checks that every rank passed the same value
 * (>= 0: an option that decides which collectives follow, a hash of the
 * checkpoint's path): one allreduce of {first failure, value, -value}
 * (dcpi_rt_agree runs after it, to share a failure's message, only when a
 * rank failed: a failure wins over different values). Ranks that differ
 * get DCP_EINVAL on every rank ("the ranks passed different <what>"),
 * before any of them takes a collective the others do not. It is the
 * first collective of a save and of a load, so a rank that refuses its
 * arguments calls it too (with any value): a plain dcpi_rt_agree there
 * would meet the others' agreement with another size. */
dcp_status dcpi_rt_agree_value(dcpi_rt *rt, dcp_status local, int64_t value, const char *what);

dcp_status dcpi_rt_bcast(dcpi_rt *rt, void *buf, size_t len, int32_t root);
/* Element-wise reduction (DCP_REDUCE_*) of n int64 values in place. */
dcp_status dcpi_rt_allreduce(dcpi_rt *rt, int64_t *vals, size_t n, uint32_t op);
/* Broadcast len bytes at root's buf to the group ranks[0..n) (ascending,
 * root and this rank among them); collective over the group only. The
 * collective must have DCP_COLL_CAP_GROUPS (DCP_EINVAL otherwise). */
dcp_status dcpi_rt_group_bcast(dcpi_rt *rt, const int32_t *ranks, size_t n, void *buf,
                               size_t len, int32_t root);
dcp_status dcpi_rt_allgather(dcpi_rt *rt, const void *send, size_t len, void *recv);
/* Gather variable-sized buffers at root: *out (root only, malloc'd) gets
 * them back to back, lens[i] (root only, world entries, malloc'd in *lens)
 * rank i's length. */
dcp_status dcpi_rt_gather_bytes(dcpi_rt *rt, const void *send, size_t len, int32_t root,
                                uint8_t **out, size_t **lens);
/* Scatter from root: root passes world buffers (bufs[i], lens[i]); every
 * rank receives its own into *out (malloc'd), *out_len. */
dcp_status dcpi_rt_scatter_bytes(dcpi_rt *rt, const uint8_t *const *bufs, const size_t *lens,
                                 int32_t root, uint8_t **out, size_t *out_len);

/* ---- storage ------------------------------------------------------------ */

/* Open the context's storage plugin on rt->path with flags DCP_STORAGE_*. */
dcp_status dcpi_rt_open_storage(dcpi_rt *rt, uint32_t flags);

/* Wrappers that turn a plugin error into rt-style errors in err. */
dcp_status dcpi_rt_file_open(dcpi_rt *rt, const char *name, uint32_t mode,
                             dcp_storage_file **f, dcpi_err *err);
dcp_status dcpi_rt_file_write(dcpi_rt *rt, dcp_storage_file *f, const void *buf, size_t len,
                              dcpi_err *err);
dcp_status dcpi_rt_file_read(dcpi_rt *rt, dcp_storage_file *f, void *buf, size_t len,
                             uint64_t off, dcpi_err *err);
dcp_status dcpi_rt_file_sync(dcpi_rt *rt, dcp_storage_file *f, dcpi_err *err);
dcp_status dcpi_rt_file_close(dcpi_rt *rt, dcp_storage_file *f, dcpi_err *err);
dcp_status dcpi_rt_file_size(dcpi_rt *rt, const char *name, uint64_t *size, dcpi_err *err);
dcp_status dcpi_rt_rename(dcpi_rt *rt, const char *from, const char *to, dcpi_err *err);
dcp_status dcpi_rt_remove(dcpi_rt *rt, const char *name, dcpi_err *err);
dcp_status dcpi_rt_sync_dir(dcpi_rt *rt, dcpi_err *err);
dcp_status dcpi_rt_list(dcpi_rt *rt, int (*fn)(void *arg, const char *name), void *arg,
                        dcpi_err *err);

/* Read a whole file into a malloc'd buffer (*data, *len). A file that a
 * rename replaces while it is read (a save committing a new .metadata
 * under a load) is read again, up to 4 times, so that the bytes are all of
 * one file, never a cut of one measured by another's size. A file above
 * 1 MiB that begins like a .metadata but whose header gives another length
 * is DCP_ECORRUPT before it is read whole. */
dcp_status dcpi_rt_read_file(dcpi_rt *rt, const char *name, uint8_t **data, size_t *len,
                             dcpi_err *err);
/* Write a whole file durably under `name`: to a temporary name, sync,
 * rename into place, sync the directory. */
dcp_status dcpi_rt_write_file_atomic(dcpi_rt *rt, const char *name, const char *tmp_name,
                                     const void *data, size_t len, dcpi_err *err);

/* ---- blocks ------------------------------------------------------------- */

/* Where one item's bytes went (the owned form of a dcp_storage_ref). */
typedef struct dcpi_ref {
  uint64_t offset, stored_length, raw_length, block_count;
  uint32_t block_size;
  dcp_codec codec;
  uint64_t *checksums;     /* block_count, owned */
  uint64_t *stored_lens;   /* block_count when codec is ZSTD, owned */
} dcpi_ref;

void dcpi_ref_free(dcpi_ref *r);

/* Streams items into one data file, block by block: xxh3 per raw block,
 * optional zstd per block, buffered into large sequential writes. */
typedef struct dcpi_block_writer dcpi_block_writer;

dcp_status dcpi_block_writer_open(dcpi_rt *rt, const char *name, uint32_t block_size,
                                  bool compress, int level, dcpi_block_writer **out,
                                  dcpi_err *err);
/* Append len bytes at data as one item, in blocks of the writer's block
 * size; *ref describes where they went. */
dcp_status dcpi_block_writer_put(dcpi_block_writer *w, const void *data, uint64_t len,
                                 dcpi_ref *ref, dcpi_err *err);
/* The same for an item made of rows of row_bytes each (a chunk: the bytes
 * of one index of its first dimension; 0: no rows), in blocks of
 * dcpi_block_size_for(len, row_bytes, the writer's block size). */
dcp_status dcpi_block_writer_put_rows(dcpi_block_writer *w, const void *data, uint64_t len,
                                      uint64_t row_bytes, dcpi_ref *ref, dcpi_err *err);

/* The block size a save gives an item of len bytes made of rows of
 * row_bytes (0: treated as 1), with max the largest block (the save's
 * block_size). A read fetches and verifies whole blocks, so an item is cut
 * into granules that a load of some of its rows can take alone: about
 * DCPI_GRANULES blocks (an exact divisor of the rows when one is near),
 * each a whole number of rows, none below DCPI_GRANULE_MIN bytes (so
 * checksums stay under 0.05% of the data) nor above max. An item of at
 * most DCPI_GRANULE_MIN bytes, or whose row is larger than max, keeps max
 * (one block, or max-sized ones as before). Pure. */
#define DCPI_GRANULES 16u
#define DCPI_GRANULE_MIN (16u << 10)
uint32_t dcpi_block_size_for(uint64_t len, uint64_t row_bytes, uint32_t max);
/* Bytes appended to the file so far (pending ones included): its length
 * once closed. */
uint64_t dcpi_block_writer_length(const dcpi_block_writer *w);
/* Flush, sync and close the file (the writer is freed either way). */
dcp_status dcpi_block_writer_close(dcpi_block_writer *w, bool sync, dcpi_err *err);

/* Reads raw bytes of stored items back, verifying every block it touches. */
typedef struct dcpi_block_reader dcpi_block_reader;

dcp_status dcpi_block_reader_create(dcpi_rt *rt, dcpi_block_reader **out, dcpi_err *err);
void dcpi_block_reader_free(dcpi_block_reader *r);

/* Read the raw bytes [first, last) of the item stored at ref in file
 * `file` and pass them to sink in order, in windows of whole blocks:
 * sink(arg, raw_offset, data, len) gets raw bytes [raw_offset,
 * raw_offset+len) covering the request. Every block is checksummed before
 * it is handed over; a mismatch gives DCP_ECORRUPT naming the file, the
 * block and `what` (e.g. the fqn and box). */
typedef dcp_status (*dcpi_block_sink)(void *arg, uint64_t raw_offset, const uint8_t *data,
                                      size_t len, dcpi_err *err);
dcp_status dcpi_block_read(dcpi_block_reader *r, const char *file, const dcp_storage_ref *ref,
                           uint64_t first, uint64_t last, const char *what,
                           dcpi_block_sink sink, void *arg, dcpi_err *err);

/* Read the raw bytes [first, last) of an uncompressed item straight into
 * dst (last-first bytes), verifying each block there: the zero-copy path
 * for an overlap that is one contiguous run over whole blocks. first must
 * be block-aligned and last block-aligned or the item's end.
 * Errors: DCP_EINVAL (not so), DCP_ECORRUPT, storage errors. */
dcp_status dcpi_block_read_into(dcpi_block_reader *r, const char *file,
                                const dcp_storage_ref *ref, uint64_t first, uint64_t last,
                                uint8_t *dst, const char *what, dcpi_err *err);

/* One upcoming read: raw bytes [first, last) of the item at ref in file. */
typedef struct dcpi_block_req {
  const char *file;
  const dcp_storage_ref *ref;
  uint64_t first, last;
} dcpi_block_req;

/* Coalescing: fetch, in as few storage reads as possible, the blocks of the
 * small requests (<= 1 MiB of stored blocks each) whose stored ranges are
 * adjacent in one file; later dcpi_block_read calls for them are served
 * from memory. Ranges are merged only when they touch, so nothing is read
 * that no request needs. The ref pointers need only live during the call.
 * Errors: storage errors, DCP_ENOMEM. */
dcp_status dcpi_block_prefetch(dcpi_block_reader *r, const dcpi_block_req *reqs, size_t n,
                               dcpi_err *err);

/* Release what dcpi_block_prefetch holds. */
void dcpi_block_prefetch_drop(dcpi_block_reader *r);

#endif
