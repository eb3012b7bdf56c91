/* async_kit.h — what the async test programs share: their command line,
 * the trainer's context, and the row-split tensor their models hold. */
#ifndef DCP_TEST_ASYNC_KIT_H
#define DCP_TEST_ASYNC_KIT_H

#include <stddef.h>
#include <stdint.h>

#include "dcp.h"

typedef struct ak_args {
  const char *mode, *dir, *rdv;
  const char *writer_coll;  /* how the writers coordinate (default "file") */
  const char *trainer_coll; /* the trainer's own collective: "file" (forked
                               ranks, the default), "gloo" or "mpi" (under
                               mpirun) */
  const char *trainer_opts; /* its options (gloo: "store=HOST:PORT"), or NULL */
  const char *writer_opts;  /* the writers' collective's options, or NULL */
  long timeout_ms;          /* deadline of every wait (default 60 s) */
  long lease_ms;            /* the directory lease's (default: the library's) */
} ak_args;

/* PROGRAM MODE --dir D [--rendezvous R] [--writer-coll C] [--writer-opts O]
 * [--trainer-coll file|gloo|mpi] [--trainer-opts O] [--timeout-ms MS]
 * [--lease-ms MS] into *a; exits 2
 * without --dir.
 * Creates the directory D. */
void ak_parse(int argc, char **argv, ak_args *a);

/* The trainer's context: the mpi collective under mpirun (trainer_coll
 * "mpi"), the file collective in rdv for ranks forked by dcp_launch
 * (DCP_TEST_RANK / DCP_TEST_WORLD), else a world of one; with more than
 * one rank the writers coordinate over writer_coll in rdv. Exits 1 with the
 * reason on failure. */
dcp_ctx *ak_open_ctx(const ak_args *a);

/* The rows of an [nrows, ncols] f32 tensor that rank `rank` of world holds,
 * ceil-divided (the last ranks may hold fewer, or none): the first at
 * *row0, *rows of them, in *w (zeroed, never NULL); and *big, nbig bytes,
 * when nbig > 0 (else NULL). Exits 1 when out of memory. */
void ak_rows_alloc(int rank, int world, int64_t nrows, int64_t ncols, size_t nbig,
                   int64_t *row0, int64_t *rows, float **w, uint8_t **big);

/* Declare on st the f32 tensor "w" [nrows, ncols] with this rank's rows
 * (row0, rows at w) as its chunk and, when big is not NULL, the u8 tensor
 * "big" of nbig bytes, whole. Exits 1 on an error, with ctx's reason. */
void ak_rows_add(dcp_ctx *ctx, dcp_state *st, int64_t nrows, int64_t ncols, int64_t row0,
                 int64_t rows, float *w, uint8_t *big, size_t nbig);

/* 1 when process pid ends (is gone, or a zombie not reaped yet) within
 * ms milliseconds, else 0 (polls /proc/PID/stat). */
int ak_gone_within(int pid, long ms);

#endif
