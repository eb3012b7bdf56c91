/* cmd_convert.c — `dcp import`, `dcp export` and `dcp verify`. */
#include <inttypes.h>
#include <stdio.h>

#include "cli.h"

static const char import_help[] =
    "usage: dcp import SRC --to CKPT [--link] [--json] [--quiet]\n\n"
    "Import safetensors into a checkpoint. SRC is a .safetensors file or the\n"
    "*.safetensors.index.json of a sharded set. The data is copied into CKPT in\n"
    "checksummed blocks, 64 MiB at a time; with --link only CKPT/.metadata is\n"
    "written, pointing into the .safetensors files themselves, so CKPT must be\n"
    "their directory. Missing parent directories of CKPT are created.\n"
    "__metadata__ entries become the checkpoint's key/values. SRC and the shards\n"
    "an index names may be symbolic links (the Hugging Face cache's snapshots/);\n"
    "they are followed for reading; --link refuses them (no load follows links).\n\n"
    "options:\n"
    "  --to CKPT    the checkpoint directory to create (required)\n"
    "  --link       link instead of copying (CKPT = SRC's directory)\n" CLI_COMMON_OPTIONS
    "\nexit status: 0 imported, 2 usage, 3 error (malformed input, I/O, ...)\n";

int cmd_import(int argc, char **argv) {
  cli_args a;
  if (!cli_parse("import", argc, argv, "to,link", &a)) return CLI_USAGE;
  if (a.help) return fputs(import_help, stdout), CLI_OK;
  if (a.npos != 1 || !a.to) return fputs(import_help, stderr), CLI_USAGE;
  if (!cli_make_parents("import", a.to)) return CLI_ERROR;
  dcp_ctx *ctx = cli_context("import", a.quiet);
  if (!ctx) return CLI_ERROR;
  dcp_status s = dcp_import_safetensors(ctx, a.pos[0], a.to, a.link ? DCP_IMPORT_LINK : 0);
  int rc = s ? cli_fail("import", ctx, s) : CLI_OK;
  cli_progress_done();
  if (a.json) {
    json_t *o = cli_json_new("import");
    json_object_set_new(o, "source", json_string(a.pos[0]));
    json_object_set_new(o, "checkpoint", json_string(a.to));
    json_object_set_new(o, "linked", json_boolean(a.link));
    rc = cli_json_finish(o, rc, ctx, s);
  } else if (!s && !a.quiet) {
    printf("imported %s into %s%s\n", a.pos[0], a.to, a.link ? " (linked)" : "");
  }
  dcp_ctx_free(ctx);
  return rc;
}

static const char export_help[] =
    "usage: dcp export CKPT --to DIR [--max-shard-size SIZE] [--json] [--quiet]\n\n"
    "Export a checkpoint to safetensors: DIR/model.safetensors, or with\n"
    "--max-shard-size shards model-00001-of-0000N.safetensors and\n"
    "model.safetensors.index.json. Tensors are streamed 32 MiB at a time, so\n"
    "memory stays bounded whatever their size. Missing parent directories of\n"
    "DIR are created. Bytes items are not exported.\n\n"
    "options:\n"
    "  --to DIR                 the output directory (required)\n"
    "  --max-shard-size SIZE    e.g. 5GB, 500MiB, 1000000 (bytes of data per file)\n"
    CLI_COMMON_OPTIONS
    "\nexit status: 0 exported, 2 usage, 3 error (including a damaged checkpoint)\n";

int cmd_export(int argc, char **argv) {
  cli_args a;
  uint64_t max = 0;
  if (!cli_parse("export", argc, argv, "to,max-shard-size", &a)) return CLI_USAGE;
  if (a.help) return fputs(export_help, stdout), CLI_OK;
  if (a.npos != 1 || !a.to) return fputs(export_help, stderr), CLI_USAGE;
  if (a.max_shard && !cli_parse_size(a.max_shard, &max)) {
    fprintf(stderr, "dcp export: bad size '%s' (e.g. 5GB, 500MiB, 1000000)\n", a.max_shard);
    return CLI_USAGE;
  }
  if (!cli_make_parents("export", a.to)) return CLI_ERROR;
  dcp_ctx *ctx = cli_context("export", a.quiet);
  if (!ctx) return CLI_ERROR;
  dcp_status s = dcp_export_safetensors(ctx, a.pos[0], a.to, max);
  int rc = s ? cli_fail("export", ctx, s) : CLI_OK;
  cli_progress_done();
  if (a.json) {
    json_t *o = cli_json_new("export");
    json_object_set_new(o, "checkpoint", json_string(a.pos[0]));
    json_object_set_new(o, "output", json_string(a.to));
    json_object_set_new(o, "max_shard_bytes", max ? json_integer((json_int_t)max) : json_null());
    rc = cli_json_finish(o, rc, ctx, s);
  } else if (!s && !a.quiet) {
    printf("exported %s to %s\n", a.pos[0], a.to);
  }
  dcp_ctx_free(ctx);
  return rc;
}

static const char verify_help[] =
    "usage: dcp verify CKPT [--json] [--quiet]\n\n"
    "Read every block of every chunk and bytes item and check its checksum;\n"
    "check that every tensor is covered exactly once by its chunks and that\n"
    "every data file has the length the save wrote. Keeps going after a\n"
    "problem, counts them all and prints the first.\n\n"
    "options:\n" CLI_COMMON_OPTIONS
    "\nexit status: 0 intact,\n"
    "             1 problems found: corrupt or incomplete data, or a .metadata\n"
    "               that fails its checks (damaged, or none committed),\n"
    "             2 usage,\n"
    "             3 error: no such directory, I/O, a newer format, ...\n";

static json_t *verify_json(const char *path, const dcp_verify_report *r, dcp_status rc) {
  json_t *o = cli_json_new("verify");
  json_object_set_new(o, "checkpoint", json_string(path));
  json_object_set_new(o, "ok", json_boolean(!rc));
  json_object_set_new(o, "tensors", json_integer((json_int_t)r->tensors));
  json_object_set_new(o, "chunks", json_integer((json_int_t)r->chunks));
  json_object_set_new(o, "bytes_items", json_integer((json_int_t)r->bytes_items));
  json_object_set_new(o, "blocks", json_integer((json_int_t)r->blocks));
  json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
  json_object_set_new(o, "problems", json_integer((json_int_t)(rc ? r->problems : 0)));
  json_object_set_new(o, "first_problem", rc ? json_string(r->first_problem) : json_null());
  return o;
}

int cmd_verify(int argc, char **argv) {
  cli_args a;
  if (!cli_parse("verify", argc, argv, "", &a)) return CLI_USAGE;
  if (a.help) return fputs(verify_help, stdout), CLI_OK;
  if (a.npos != 1) return fputs(verify_help, stderr), CLI_USAGE;
  dcp_ctx *ctx = cli_context("verify", a.quiet);
  if (!ctx) return CLI_ERROR;
  dcp_verify_report r = {.struct_size = sizeof r};
  dcp_status s = dcp_verify(ctx, a.pos[0], &r);
  cli_progress_done();
  bool damaged = s == DCP_ECORRUPT || s == DCP_EINCOMPLETE;
  int rc = !s ? CLI_OK : damaged ? CLI_DIFF : CLI_ERROR;
  if (a.json) {
    rc = cli_json_finish(verify_json(a.pos[0], &r, s), rc, ctx, damaged ? DCP_OK : s);
  } else {
    if (damaged) printf("FAILED: %" PRIu64 " problem(s); first: %s\n", r.problems, r.first_problem);
    else if (s) cli_fail("verify", ctx, s);
    if (!s || damaged)
      printf("%s: %" PRIu64 " tensors, %" PRIu64 " chunks, %" PRIu64 " bytes items, %" PRIu64
             " blocks, %" PRIu64 " bytes checked%s\n", a.pos[0], r.tensors, r.chunks,
             r.bytes_items, r.blocks, r.bytes, s ? "" : ": OK");
  }
  dcp_ctx_free(ctx);
  return rc;
}
