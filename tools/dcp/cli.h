/* cli.h — shared pieces of the `dcp` command: exit codes, option parsing,
 * the context, progress on a terminal. */
#ifndef DCP_CLI_H
#define DCP_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "dcp.h"

/* Exit codes (docs/conversion.md). */
enum {
  CLI_OK = 0,      /* success; for diff: equal; for verify: intact */
  CLI_DIFF = 1,    /* diff found differences, verify found problems */
  CLI_USAGE = 2,   /* bad command line */
  CLI_ERROR = 3    /* I/O or any other error */
};

/* Options every subcommand takes, plus up to two positional arguments and
 * the value of --to. */
typedef struct cli_args {
  const char *pos[2];
  int npos;
  const char *to;
  const char *max_shard;
  bool json, link, quiet, help;
} cli_args;

/* Parse argv (after the subcommand name). `allowed` lists the accepted
 * long options ("to,link,..."). Returns false (after printing why) on a usage
 * error. */
bool cli_parse(int argc, char **argv, const char *allowed, cli_args *a);

/* A single-rank context over the posix plugin, with progress on stderr when
 * it is a terminal and quiet is not set. NULL (after printing why) on error. */
dcp_ctx *cli_context(const char *label, bool quiet);

/* Print "dcp CMD: message" for a failing status and return CLI_ERROR (or
 * CLI_DIFF for DCP_ECORRUPT / DCP_EINCOMPLETE when verifying). */
int cli_fail(const char *cmd, dcp_ctx *ctx, dcp_status s);

/* End the progress line, if one was drawn. */
void cli_progress_done(void);

/* "5GB", "500MiB", "1024" into bytes (decimal units KB MB GB TB, binary
 * KiB MiB GiB TiB, case-insensitive). False when malformed. */
bool cli_parse_size(const char *s, uint64_t *out);

/* "1.5 GiB" etc. of n bytes into buf. */
const char *cli_human(uint64_t n, char *buf, unsigned cap);

/* Subcommands: argc/argv after the subcommand name. */
int cmd_ls(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_steps(int argc, char **argv); /* cmd_steps.c: a manager's root */
int cmd_gc(int argc, char **argv);

#endif
