/* main.c — the `dcp` command: look inside, check and convert checkpoints.
 * A thin layer over dcp.h; see docs/cli.md. A command is one row of the
 * table below (its function takes argc/argv after its name and prints its
 * own --help); `dcp help NAME` runs NAME --help. */
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

static const command *find(const char *name) {
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(name, commands[i].name)) return &commands[i];
  return NULL;
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: dcp COMMAND [ARGS] [--json] [--quiet] [--help]\n"
          "       dcp help COMMAND\n"
          "       dcp --version\n\n"
          "Look inside, check and convert libdcp checkpoints.\n\ncommands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n`dcp help COMMAND` or `dcp COMMAND --help` describes one command;\n"
          "docs/cli.md describes them all, with their JSON.\n\n"
          "options of every command:\n" CLI_COMMON_OPTIONS
          "  --version    print the version of dcp and libdcp\n\n"
          "exit status: 0 ok (diff: equal, verify: intact)\n"
          "             1 diff: differences or damaged tensors; verify: problems found\n"
          "             2 usage error\n"
          "             3 error: not found, I/O, a newer format, ...\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      (!strcmp(argv[1], "help") && argc == 2)) {
    usage(stdout);
    return CLI_OK;
  }
  if (!strcmp(argv[1], "help")) { /* dcp help COMMAND */
    const command *c = find(argv[2]);
    if (c && argc == 3) return c->fn(1, (char *[]){"--help", NULL});
    fprintf(stderr, "dcp help: %s '%s'\n\n", c ? "one command, got more after" : "unknown command",
            argv[2]);
    usage(stderr);
    return CLI_USAGE;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("dcp %s\n", dcp_version_string());
    return CLI_OK;
  }
  const command *c = find(argv[1]);
  if (c) return c->fn(argc - 2, argv + 2);
  fprintf(stderr, "dcp: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return CLI_USAGE;
}
