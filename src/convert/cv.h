/* cv.h — shared pieces of conversion and verification (src/convert/):
 * storage on a directory outside a save or load, reading a safetensors
 * header through the storage plugin, assembling a tensor from its chunks,
 * coverage checks and progress. Everything runs on the calling rank alone. */
#ifndef DCP_CONVERT_CV_H
#define DCP_CONVERT_CV_H

#include <stdbool.h>
#include <stdint.h>

#include "convert/safetensors.h"
#include "runtime/rt.h"

#define DCPI_CV_WINDOW (64u << 20) /* bytes read or copied at a time */
/* The export's window of a tensor: with the block reader's own window over
 * the blocks it touches, this keeps an export's memory near 100 MiB. */
#define DCPI_CV_EXPORT_WINDOW (32u << 20)

/* Open the context's storage plugin on directory dir (flags DCP_STORAGE_*)
 * into *rt, without touching the context's statistics. Errors in err. */
dcp_status dcpi_cv_open(dcpi_rt *rt, dcp_ctx *ctx, const char *dir, uint32_t flags,
                        dcpi_err *err);

/* Close what dcpi_cv_open opened (no-op when it failed). */
void dcpi_cv_close(dcpi_rt *rt);

/* Split path into its directory (malloc'd; "." when it has none) and plain
 * file name (malloc'd). Errors: DCP_EINVAL (empty, or ends in '/'),
 * DCP_ENOMEM. */
dcp_status dcpi_cv_split(const char *path, char **dir, char **name, dcpi_err *err);

/* Where to read a source file named `name` in directory `dir`: a source
 * (never a checkpoint) may be a symbolic link, as the Hugging Face cache
 * lays files out (snapshots/<rev>/model.safetensors -> ../../blobs/<hash>),
 * but the storage plugins follow no link inside the directory they open. So
 * when dir/name is a link on the local file system it is resolved here to
 * the directory and name of the file it reaches (*linked = true); anything
 * else (a regular file, a missing one, a path only the plugin understands)
 * stays as named. *rdir and *rname are malloc'd. Errors: DCP_ENOTFOUND (a
 * link to nothing), DCP_EIO (a link that cannot be resolved: a loop, ...),
 * DCP_ENOMEM. */
dcp_status dcpi_cv_resolve_source(const char *dir, const char *name, char **rdir, char **rname,
                                  bool *linked, dcpi_err *err);

/* Read and strictly parse the header of the safetensors file `name` of
 * rt's directory into *out (free with dcpi_st_header_free). The reason of a
 * failure names the file as `shown` (NULL: name). */
dcp_status dcpi_cv_read_st_header(dcpi_rt *rt, const char *name, const char *shown,
                                  dcpi_st_header **out, dcpi_err *err);

/* Progress of one operation: forwards to the context's callbacks (the
 * plain one and, with its phase, the phase one). */
typedef struct dcpi_cv_progress {
  dcp_ctx *ctx;
  uint64_t done, total;
  dcp_phase phase;
} dcpi_cv_progress;

void dcpi_cv_progress_add(dcpi_cv_progress *p, uint64_t n);

/* Check that tensor ti of m is exactly covered by its chunks: boxes inside
 * the shape, stored raw lengths equal to box volume * dtype size, volumes
 * summing to the element count and no two chunks overlapping. Errors:
 * DCP_EINCOMPLETE (not covered), DCP_ECORRUPT (overlap, bad box or length),
 * DCP_ENOMEM. */
dcp_status dcpi_cv_check_coverage(dcp_meta *m, size_t ti, dcpi_err *err);

/* Assemble tensor ti of m whole into buf (len = its byte size) from its
 * chunks through br, verifying every block (coverage is checked first);
 * progress (may be NULL) counts the bytes read. */
dcp_status dcpi_cv_read_tensor(dcpi_block_reader *br, dcp_meta *m, size_t ti, uint8_t *buf,
                               size_t len, dcpi_cv_progress *progress, dcpi_err *err);

/* Bytes [offset, offset + len) of tensor ti's row-major image into buf,
 * from the chunks that hold them, verifying every block read (whole blocks
 * around the window are read and checked; nothing else). Coverage is the
 * caller's to check first (dcpi_cv_check_coverage): a window of a tensor
 * whose chunks leave a gap keeps whatever buf held there. Memory beyond buf
 * is the block reader's window over the blocks touched, never the tensor.
 * Errors: DCP_EINVAL (the window leaves the tensor), DCP_ECORRUPT, storage
 * errors. */
dcp_status dcpi_cv_read_window(dcpi_block_reader *br, dcp_meta *m, size_t ti, uint64_t offset,
                               uint8_t *buf, size_t len, dcpi_cv_progress *progress,
                               dcpi_err *err);

/* Byte size of tensor ti of m into *bytes. Errors: DCP_EOVERFLOW. */
dcp_status dcpi_cv_tensor_bytes(const dcp_meta *m, size_t ti, uint64_t *bytes, dcpi_err *err);

/* "fqn [o0:e0, o1:e1, ...]" of a chunk box into buf (cap bytes). */
void dcpi_cv_describe_box(char *buf, size_t cap, const char *fqn, const dcp_box *box);

#endif
