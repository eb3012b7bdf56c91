/* async_kit.h — what the async test programs share: their command line
 * and the trainer's context. */
#ifndef DCP_TEST_ASYNC_KIT_H
#define DCP_TEST_ASYNC_KIT_H

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

#endif
