/* cmd_convert.c — `dcp import`, `dcp export` and `dcp verify`. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

static const char import_help[] =
    "usage: dcp import SRC --to CKPT [--link] [--quiet]\n\n"
    "Import safetensors into a checkpoint. SRC is a .safetensors file or the\n"
    "*.safetensors.index.json of a sharded set. The data is copied into CKPT in\n"
    "checksummed blocks; with --link only CKPT/.metadata is written, pointing\n"
    "into the .safetensors files themselves, so CKPT must be their directory.\n"
    "__metadata__ entries become the checkpoint's key/values. SRC and the shards\n"
    "an index names may be symbolic links (the Hugging Face cache's snapshots/);\n"
    "they are followed for reading; --link refuses them (no load follows links).\n"
    "exit status: 0 imported, 2 usage, 3 error (malformed input, I/O, ...)\n";

int cmd_import(int argc, char **argv) {
  cli_args a;
  if (!cli_parse(argc, argv, "to,link", &a)) return CLI_USAGE;
  if (a.help) return fputs(import_help, stdout), CLI_OK;
  if (a.npos != 1 || !a.to) return fputs(import_help, stderr), CLI_USAGE;
  dcp_ctx *ctx = cli_context("import", a.quiet);
  if (!ctx) return CLI_ERROR;
  dcp_status s = dcp_import_safetensors(ctx, a.pos[0], a.to, a.link ? DCP_IMPORT_LINK : 0);
  int rc = s ? cli_fail("import", ctx, s) : CLI_OK;
  if (!s) {
    cli_progress_done();
    if (!a.quiet) printf("imported %s into %s%s\n", a.pos[0], a.to, a.link ? " (linked)" : "");
  }
  dcp_ctx_free(ctx);
  return rc;
}

static const char export_help[] =
    "usage: dcp export CKPT --to DIR [--max-shard-size SIZE] [--quiet]\n\n"
    "Export a checkpoint to safetensors: DIR/model.safetensors, or with\n"
    "--max-shard-size (e.g. 5GB, 500MiB) shards model-00001-of-0000N.safetensors\n"
    "and model.safetensors.index.json. Tensors are assembled one at a time.\n"
    "exit status: 0 exported, 2 usage, 3 error\n";

int cmd_export(int argc, char **argv) {
  cli_args a;
  uint64_t max = 0;
  if (!cli_parse(argc, argv, "to,max-shard-size", &a)) return CLI_USAGE;
  if (a.help) return fputs(export_help, stdout), CLI_OK;
  if (a.npos != 1 || !a.to) return fputs(export_help, stderr), CLI_USAGE;
  if (a.max_shard && !cli_parse_size(a.max_shard, &max)) {
    fprintf(stderr, "dcp export: bad size '%s' (e.g. 5GB, 500MiB, 1000000)\n", a.max_shard);
    return CLI_USAGE;
  }
  dcp_ctx *ctx = cli_context("export", a.quiet);
  if (!ctx) return CLI_ERROR;
  dcp_status s = dcp_export_safetensors(ctx, a.pos[0], a.to, max);
  int rc = s ? cli_fail("export", ctx, s) : CLI_OK;
  if (!s) {
    cli_progress_done();
    if (!a.quiet) printf("exported %s to %s\n", a.pos[0], a.to);
  }
  dcp_ctx_free(ctx);
  return rc;
}

static const char verify_help[] =
    "usage: dcp verify CKPT [--quiet]\n\n"
    "Read every block of every chunk and bytes item and check its checksum;\n"
    "check that every tensor is covered exactly once by its chunks.\n"
    "exit status: 0 intact, 1 problems found (the first is printed),\n"
    "             2 usage, 3 error (I/O, unreadable checkpoint, ...)\n";

int cmd_verify(int argc, char **argv) {
  cli_args a;
  if (!cli_parse(argc, argv, "", &a)) return CLI_USAGE;
  if (a.help) return fputs(verify_help, stdout), CLI_OK;
  if (a.npos != 1) return fputs(verify_help, stderr), CLI_USAGE;
  dcp_ctx *ctx = cli_context("verify", a.quiet);
  if (!ctx) return CLI_ERROR;
  dcp_verify_report r = {.struct_size = sizeof r};
  dcp_status s = dcp_verify(ctx, a.pos[0], &r);
  cli_progress_done();
  int rc = CLI_OK;
  if (s == DCP_ECORRUPT || s == DCP_EINCOMPLETE) {
    printf("FAILED: %" PRIu64 " problem(s); first: %s\n", r.problems, r.first_problem);
    rc = CLI_DIFF;
  } else if (s) {
    rc = cli_fail("verify", ctx, s);
  }
  if (!s || rc == CLI_DIFF)
    printf("%s: %" PRIu64 " tensors, %" PRIu64 " chunks, %" PRIu64 " bytes items, %" PRIu64
           " blocks, %" PRIu64 " bytes checked%s\n", a.pos[0], r.tensors, r.chunks,
           r.bytes_items, r.blocks, r.bytes, s ? "" : ": OK");
  dcp_ctx_free(ctx);
  return rc;
}
