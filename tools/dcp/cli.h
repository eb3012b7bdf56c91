/* cli.h — shared pieces of the `dcp` command: exit codes, option parsing,
 * the context, progress, parent directories and the --json result object.
 * docs/cli.md documents the command, its exit codes and its JSON. */
#ifndef DCP_CLI_H
#define DCP_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "dcp.h"

/* Exit codes: one table for every command (docs/cli.md, `dcp --help`). */
enum {
  CLI_OK = 0,    /* success; for diff: all equal; for verify: intact */
  CLI_DIFF = 1,  /* diff: differences (or a damaged tensor); verify: problems */
  CLI_USAGE = 2, /* bad command line */
  CLI_ERROR = 3  /* the command could not do its work: not found, I/O, ... */
};

/* The options every command takes, as its help prints them. */
#define CLI_COMMON_OPTIONS                                                     \
  "  --json       one JSON object on stdout instead of text (docs/cli.md)\n" \
  "  -q, --quiet  no progress, and less text (see the command)\n"            \
  "  -h, --help   this help\n"

/* Options every subcommand takes, plus up to two positional arguments and
 * the values of the commands' own options, as given (the parser reads no
 * numbers: see cli_parse_count and cli_parse_size). */
typedef struct cli_args {
  const char *pos[2];
  int npos;
  const char *to;
  const char *max_shard;
  const char *keep_last, *keep_every; /* gc */
  bool json, link, quiet, help;
  bool dry_run; /* gc */
} cli_args;

/* Parse argv (after the subcommand name). `allowed` lists the accepted
 * long options besides --json, --quiet and --help ("to,link,..."; the
 * known ones: to, link, max-shard-size, keep-last, keep-every, dry-run).
 * A lone "-" is an argument; any other word that starts with '-' and is
 * not an accepted option is an unknown option. Returns false (after
 * printing why on stderr, naming cmd) on a usage error. */
bool cli_parse(const char *cmd, int argc, char **argv, const char *allowed, cli_args *a);

/* A single-rank context over the posix plugin. Progress (of the library's
 * phases; label names the command's own) goes to stderr
 * unless quiet: a bar redrawn in place on a terminal, else a line every
 * $DCP_PROGRESS_INTERVAL seconds (default 5) for logs. NULL (after printing
 * why) on error. */
dcp_ctx *cli_context(const char *label, bool quiet);

/* Progress of work the command drives itself (diff): label, total bytes. */
void cli_progress_start(const char *label, uint64_t total);
void cli_progress_add(uint64_t n);

/* End the progress display (a bar's line), if one was drawn. */
void cli_progress_done(void);

/* Print "dcp CMD: reason: message" on stderr for a failing status and
 * return CLI_ERROR. */
int cli_fail(const char *cmd, dcp_ctx *ctx, dcp_status rc);

/* Create the missing parent directories of path (not path itself: the
 * library creates that one). False after printing why. */
bool cli_make_parents(const char *cmd, const char *path);

/* The --json result: {"command": cmd, ...}. cli_json_finish adds
 * "exit_code" and "error" (null, or {"status", "reason", "message"} for a
 * failing s, the message from ctx), prints the object and frees it; returns
 * rc (CLI_ERROR when printing fails). */
json_t *cli_json_new(const char *cmd);
int cli_json_finish(json_t *root, int rc, dcp_ctx *ctx, dcp_status s);

/* A user string (a key/value value: any bytes a checkpoint holds) made
 * safe to show: a malloc'd copy where control characters and, when s is
 * not valid UTF-8, every byte above 0x7F are written \xNN (and a
 * backslash \\), so that no terminal escape is echoed and the text is
 * valid UTF-8. NULL only when out of memory. */
char *cli_escape(const char *s);

/* A JSON string of s: s itself when it is valid UTF-8 (JSON escapes the
 * control characters), else cli_escape(s) — never NULL for a string that
 * jansson refuses, so no key is silently left out. */
json_t *cli_json_text(const char *s);

/* A whole decimal number in [min, max] into *out ("12"; no sign, no
 * spaces). False when malformed or out of range. */
bool cli_parse_count(const char *s, uint64_t min, uint64_t max, uint64_t *out);

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
