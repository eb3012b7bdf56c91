/* cmd_inspect.c — `dcp ls` and `dcp inspect [--json]`. */
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static uint64_t tensor_bytes(const dcp_tensor_info *t) {
  uint64_t n = dcp_dtype_size(t->dtype);
  for (uint32_t d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
  return n;
}

static void print_extents(uint32_t ndim, const int64_t *v) {
  putchar('[');
  for (uint32_t d = 0; d < ndim; d++) printf("%s%" PRId64, d ? ", " : "", v[d]);
  putchar(']');
}

static void print_shape(const dcp_tensor_info *t) { print_extents(t->ndim, t->shape); }

static const char *scope_name(dcp_scope s) {
  return s == DCP_SCOPE_PER_RANK ? "per-rank" : "replicated";
}

/* Print a mesh's ranks compactly: "0..7", "8..64 step 8", or a list (at
 * most 16, then "... (N ranks)"). */
static void print_ranks(const dcp_mesh_info *mi) {
  int64_t n = 1;
  for (uint32_t d = 0; d < mi->ndim; d++) n *= mi->shape[d];
  int64_t step = n > 1 ? (int64_t)mi->ranks[1] - mi->ranks[0] : 1;
  bool progression = step > 0;
  for (int64_t i = 1; progression && i < n; i++)
    progression = (int64_t)mi->ranks[i] - mi->ranks[i - 1] == step;
  if (progression && n > 1) {
    printf("%d..%d", (int)mi->ranks[0], (int)mi->ranks[n - 1]);
    if (step != 1) printf(" step %" PRId64, step);
    return;
  }
  for (int64_t i = 0; i < n && i < 16; i++) printf("%s%d", i ? "," : "", (int)mi->ranks[i]);
  if (n > 16) printf(",... (%" PRId64 " ranks)", n);
}

static const char ls_help[] =
    "usage: dcp ls CKPT [--json] [--quiet]\n\n"
    "One line per tensor, then per bytes item, each with the same six\n"
    "tab-separated columns (names never hold a tab):\n"
    "  NAME  TYPE  SHAPE  CHUNKS  BYTES  SCOPE\n"
    "TYPE is the dtype, or 'bytes' for a bytes item; SHAPE is [d0, d1, ...] for a\n"
    "tensor and '-' for a bytes item; SCOPE is '-' for a tensor, 'replicated' or\n"
    "'rank N' for a bytes item. --json prints the same as one object.\n\n"
    "options:\n" CLI_COMMON_OPTIONS
    "\nexit status: 0 ok, 2 usage, 3 error (no checkpoint, unreadable .metadata)\n";

static void ls_text(dcp_meta *m) {
  for (size_t i = 0; i < dcp_meta_tensor_count(m); i++) {
    dcp_tensor_info t;
    dcp_meta_tensor(m, i, &t);
    printf("%s\t%s\t", t.fqn, dcp_dtype_name(t.dtype));
    print_shape(&t);
    printf("\t%" PRIu64 "\t%" PRIu64 "\t-\n", t.chunk_count, tensor_bytes(&t));
  }
  for (size_t i = 0; i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info b;
    dcp_meta_bytes(m, i, &b);
    printf("%s\tbytes\t-\t1\t%" PRIu64 "\t", b.key, b.ref.raw_length);
    if (b.scope == DCP_SCOPE_PER_RANK) printf("rank %d\n", (int)b.rank);
    else printf("%s\n", scope_name(b.scope));
  }
}

static json_t *shape_json(const dcp_tensor_info *t) {
  json_t *shape = json_array();
  for (uint32_t d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
  return shape;
}

static json_t *bytes_json(const dcp_bytes_info *b) {
  json_t *o = json_object();
  json_object_set_new(o, "key", json_string(b->key));
  json_object_set_new(o, "scope", json_string(scope_name(b->scope)));
  json_object_set_new(o, "rank", b->rank >= 0 ? json_integer(b->rank) : json_null());
  json_object_set_new(o, "bytes", json_integer((json_int_t)b->ref.raw_length));
  return o;
}

static json_t *ls_json(dcp_meta *m, const char *path) {
  json_t *root = cli_json_new("ls"), *tensors = json_array(), *items = json_array();
  json_object_set_new(root, "checkpoint", json_string(path));
  for (size_t i = 0; m && i < dcp_meta_tensor_count(m); i++) {
    dcp_tensor_info t;
    dcp_meta_tensor(m, i, &t);
    json_t *o = json_object();
    json_object_set_new(o, "fqn", json_string(t.fqn));
    json_object_set_new(o, "dtype", json_string(dcp_dtype_name(t.dtype)));
    json_object_set_new(o, "shape", shape_json(&t));
    json_object_set_new(o, "chunks", json_integer((json_int_t)t.chunk_count));
    json_object_set_new(o, "bytes", json_integer((json_int_t)tensor_bytes(&t)));
    json_array_append_new(tensors, o);
  }
  for (size_t i = 0; m && i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info b;
    dcp_meta_bytes(m, i, &b);
    json_array_append_new(items, bytes_json(&b));
  }
  json_object_set_new(root, "tensors", tensors);
  json_object_set_new(root, "bytes_items", items);
  return root;
}

int cmd_ls(int argc, char **argv) {
  cli_args a;
  if (!cli_parse("ls", argc, argv, "", &a)) return CLI_USAGE;
  if (a.help) return fputs(ls_help, stdout), CLI_OK;
  if (a.npos != 1) return fputs(ls_help, stderr), CLI_USAGE;
  int rc = CLI_OK;
  dcp_ctx *ctx = cli_context("ls", true);
  if (!ctx) return CLI_ERROR;
  dcp_meta *m = NULL;
  dcp_status s = dcp_meta_open(ctx, a.pos[0], &m);
  if (s) rc = cli_fail("ls", ctx, s);
  if (a.json) rc = cli_json_finish(ls_json(m, a.pos[0]), rc, ctx, s);
  else if (m) ls_text(m);
  dcp_meta_free(m);
  dcp_ctx_free(ctx);
  return rc;
}

/* ---- inspect (text) ----------------------------------------------------------- */

static void text_header(dcp_meta *m, const char *path) {
  uint64_t total = 0, chunks = 0;
  for (size_t i = 0; i < dcp_meta_tensor_count(m); i++) {
    dcp_tensor_info t;
    dcp_meta_tensor(m, i, &t);
    total += tensor_bytes(&t);
    chunks += t.chunk_count;
  }
  char h[32];
  printf("checkpoint   %s\nformat       %u\nworld size   %d (at save)\n", path,
         dcp_meta_format_version(m), (int)dcp_meta_world_size(m));
  printf("tensors      %zu (%" PRIu64 " chunks, %s)\nbytes items  %zu\n",
         dcp_meta_tensor_count(m), chunks, cli_human(total, h, sizeof h),
         dcp_meta_bytes_count(m));
  printf("files        %zu\n", dcp_meta_file_count(m));
  for (size_t i = 0; i < dcp_meta_file_count(m); i++) {
    const char *n;
    dcp_meta_file(m, i, &n);
    printf("  [%zu] %s\n", i, n);
  }
  printf("meshes       %zu\n", dcp_meta_mesh_count(m));
  for (size_t i = 0; i < dcp_meta_mesh_count(m); i++) {
    dcp_mesh_info mi;
    dcp_meta_mesh(m, i, &mi);
    printf("  [%zu] ", i);
    print_extents(mi.ndim, mi.shape);
    printf(" ranks ");
    print_ranks(&mi);
    putchar('\n');
  }
  printf("key/values   %zu\n", dcp_meta_kv_count(m));
  for (size_t i = 0; i < dcp_meta_kv_count(m); i++) {
    const char *k, *v;
    dcp_meta_kv(m, i, &k, &v);
    char *e = cli_escape(v);
    printf("  %s = %s\n", k, e ? e : "(out of memory)");
    free(e);
  }
}

static void text_tensors(dcp_meta *m) {
  printf("tensors:\n");
  for (size_t i = 0; i < dcp_meta_tensor_count(m); i++) {
    dcp_tensor_info t;
    dcp_meta_tensor(m, i, &t);
    printf("  %s  %s ", t.fqn, dcp_dtype_name(t.dtype));
    print_shape(&t);
    printf("  %" PRIu64 " chunks  %" PRIu64 " bytes", t.chunk_count, tensor_bytes(&t));
    size_t mesh;
    uint32_t map[DCP_MAX_NDIM];
    if (dcp_meta_tensor_layout(m, i, &mesh, map) == DCP_OK) {
      printf("  mesh %zu map [", mesh);
      for (uint32_t d = 0; d < t.ndim; d++) printf("%s%u", d ? ", " : "", map[d]);
      putchar(']');
    }
    putchar('\n');
  }
  if (dcp_meta_bytes_count(m)) printf("bytes items:\n");
  for (size_t i = 0; i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info b;
    dcp_meta_bytes(m, i, &b);
    printf("  %s  %s", b.key, scope_name(b.scope));
    if (b.scope == DCP_SCOPE_PER_RANK) printf(" rank %d", (int)b.rank);
    printf("  %" PRIu64 " bytes\n", b.ref.raw_length);
  }
}

/* ---- inspect (json) ----------------------------------------------------------- */

static json_t *i64_array(uint32_t n, const int64_t *v) {
  json_t *a = json_array();
  for (uint32_t k = 0; k < n; k++) json_array_append_new(a, json_integer(v[k]));
  return a;
}

/* {"mesh": index, "tensor_map": [masks]} or null (saved without a layout). */
static json_t *layout_json(dcp_meta *m, size_t i, uint32_t ndim) {
  size_t mesh;
  uint32_t map[DCP_MAX_NDIM];
  if (dcp_meta_tensor_layout(m, i, &mesh, map) != DCP_OK) return json_null();
  json_t *o = json_object(), *masks = json_array();
  for (uint32_t d = 0; d < ndim; d++) json_array_append_new(masks, json_integer(map[d]));
  json_object_set_new(o, "mesh", json_integer((json_int_t)mesh));
  json_object_set_new(o, "tensor_map", masks);
  return o;
}

static json_t *meshes_json(dcp_meta *m) {
  json_t *meshes = json_array();
  for (size_t i = 0; i < dcp_meta_mesh_count(m); i++) {
    dcp_mesh_info mi;
    dcp_meta_mesh(m, i, &mi);
    int64_t n = 1;
    for (uint32_t d = 0; d < mi.ndim; d++) n *= mi.shape[d];
    json_t *o = json_object(), *ranks = json_array();
    for (int64_t r = 0; r < n; r++) json_array_append_new(ranks, json_integer(mi.ranks[r]));
    json_object_set_new(o, "shape", i64_array(mi.ndim, mi.shape));
    json_object_set_new(o, "ranks", ranks);
    json_array_append_new(meshes, o);
  }
  return meshes;
}

static json_t *tensor_json(dcp_meta *m, size_t i) {
  dcp_tensor_info t;
  dcp_meta_tensor(m, i, &t);
  json_t *o = json_object(), *shape = json_array(), *chunks = json_array();
  for (uint32_t d = 0; d < t.ndim; d++) json_array_append_new(shape, json_integer(t.shape[d]));
  for (size_t c = 0; c < t.chunk_count; c++) {
    dcp_chunk_info ci;
    if (dcp_meta_chunk(m, i, c, &ci)) break;
    json_t *co = json_object(), *off = json_array(), *sz = json_array();
    for (uint32_t d = 0; d < ci.box.ndim; d++) {
      json_array_append_new(off, json_integer(ci.box.offset[d]));
      json_array_append_new(sz, json_integer(ci.box.size[d]));
    }
    json_object_set_new(co, "offset", off);
    json_object_set_new(co, "size", sz);
    json_object_set_new(co, "file", json_integer(ci.ref.file));
    json_object_set_new(co, "file_offset", json_integer((json_int_t)ci.ref.offset));
    json_object_set_new(co, "stored_bytes", json_integer((json_int_t)ci.ref.stored_length));
    json_object_set_new(co, "codec", json_string(ci.ref.codec ? "zstd" : "none"));
    json_object_set_new(co, "blocks", json_integer((json_int_t)ci.ref.block_count));
    json_array_append_new(chunks, co);
  }
  json_object_set_new(o, "fqn", json_string(t.fqn));
  json_object_set_new(o, "dtype", json_string(dcp_dtype_name(t.dtype)));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "bytes", json_integer((json_int_t)tensor_bytes(&t)));
  json_object_set_new(o, "chunks", chunks);
  json_object_set_new(o, "layout", layout_json(m, i, t.ndim));
  return o;
}

static json_t *inspect_json(dcp_meta *m, const char *path) {
  json_t *root = cli_json_new("inspect"), *files = json_array(), *kv = json_object(), *tensors = json_array(), *bytes = json_array();
  for (size_t i = 0; i < dcp_meta_file_count(m); i++) {
    const char *n;
    dcp_meta_file(m, i, &n);
    json_array_append_new(files, json_string(n));
  }
  for (size_t i = 0; i < dcp_meta_kv_count(m); i++) {
    const char *k, *v;
    dcp_meta_kv(m, i, &k, &v);
    json_object_set_new(kv, k, cli_json_text(v));
  }
  for (size_t i = 0; i < dcp_meta_tensor_count(m); i++)
    json_array_append_new(tensors, tensor_json(m, i));
  for (size_t i = 0; i < dcp_meta_bytes_count(m); i++) {
    dcp_bytes_info b;
    dcp_meta_bytes(m, i, &b);
    json_array_append_new(bytes, bytes_json(&b));
  }
  json_object_set_new(root, "checkpoint", json_string(path));
  json_object_set_new(root, "format_version", json_integer(dcp_meta_format_version(m)));
  json_object_set_new(root, "world_size", json_integer(dcp_meta_world_size(m)));
  json_object_set_new(root, "meshes", meshes_json(m));
  json_object_set_new(root, "files", files);
  json_object_set_new(root, "key_values", kv);
  json_object_set_new(root, "tensors", tensors);
  json_object_set_new(root, "bytes_items", bytes);
  return root;
}

static const char inspect_help[] =
    "usage: dcp inspect CKPT [--json] [--quiet]\n\n"
    "Print a checkpoint's metadata: format, save-time world size, meshes\n"
    "(extents and ranks), data files, user key/values, tensors (dtype, shape,\n"
    "chunks, bytes, and the mesh and tensor_map of those saved from a layout)\n"
    "and bytes items. --json prints one JSON object with every chunk as well.\n\n"
    "options:\n" CLI_COMMON_OPTIONS
    "\nexit status: 0 ok, 2 usage, 3 error (no checkpoint, unreadable .metadata)\n";

int cmd_inspect(int argc, char **argv) {
  cli_args a;
  if (!cli_parse("inspect", argc, argv, "", &a)) return CLI_USAGE;
  if (a.help) return fputs(inspect_help, stdout), CLI_OK;
  if (a.npos != 1) return fputs(inspect_help, stderr), CLI_USAGE;
  int rc = CLI_OK;
  dcp_ctx *ctx = cli_context("inspect", true);
  if (!ctx) return CLI_ERROR;
  dcp_meta *m = NULL;
  dcp_status s = dcp_meta_open(ctx, a.pos[0], &m);
  if (s) rc = cli_fail("inspect", ctx, s);
  if (a.json) {
    rc = cli_json_finish(m ? inspect_json(m, a.pos[0]) : cli_json_new("inspect"), rc, ctx, s);
  } else if (m) {
    text_header(m, a.pos[0]);
    text_tensors(m);
  }
  dcp_meta_free(m);
  dcp_ctx_free(ctx);
  return rc;
}
