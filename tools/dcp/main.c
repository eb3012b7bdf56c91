/* main.c — the `dcp` command: look inside, check and convert checkpoints.
 * A thin layer over dcp.h; see docs/conversion.md. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct command {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} command;

static const command commands[] = {
    {"ls", cmd_ls, "list the tensors and bytes items of a checkpoint"},
    {"inspect", cmd_inspect, "everything in a checkpoint's metadata (--json)"},
    {"verify", cmd_verify, "check every block checksum and the coverage of every tensor"},
    {"import", cmd_import, "safetensors (file or index.json) into a checkpoint (--link)"},
    {"export", cmd_export, "a checkpoint to safetensors (--max-shard-size)"},
    {"diff", cmd_diff, "compare two checkpoints tensor by tensor"},
    {"steps", cmd_steps, "the step directories of a checkpoint manager's root"},
    {"gc", cmd_gc, "apply a retention policy to a manager's root (--keep-last)"},
};

static void usage(FILE *out) {
  fprintf(out,
          "usage: dcp COMMAND [ARGS] [--quiet] [--help]\n\n"
          "Look inside, check and convert libdcp checkpoints.\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n`dcp COMMAND --help` describes one command.\n\n"
          "exit status: 0 ok, 1 differences found or verification failed,\n"
          "             2 usage error, 3 I/O or other error\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("dcp %s\n", dcp_version_string());
    return CLI_OK;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 2, argv + 2);
  fprintf(stderr, "dcp: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
