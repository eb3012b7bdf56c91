/* options.c — the arguments of save, async_save and load: the context, the
 * state (checked to belong to it), the path (file-system encoded) and the
 * keyword options mapped onto dcp_save_options / dcp_load_options. */
#include "pydcp.h"

#include <string.h>

/* kv (None or a mapping of str to str) into a->keys/values, keeping the
 * UTF-8 strings alive in a->kv_keep. */
static int parse_kv(PyObject *kv, dcpi_py_save_args *a) {
  if (!kv || kv == Py_None) return 0;
  PyObject *items = PyMapping_Items(kv);
  if (!items) return -1;
  Py_ssize_t n = PyList_GET_SIZE(items);
  a->keys = PyMem_Calloc((size_t)n + 1, sizeof *a->keys);
  a->values = PyMem_Calloc((size_t)n + 1, sizeof *a->values);
  if (!a->keys || !a->values || !(a->kv_keep = Py_NewRef(items))) {
    Py_DECREF(items);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *k, *v;
    if (!PyArg_ParseTuple(PyList_GET_ITEM(items, i), "UU;kv must map str to str", &k, &v) ||
        !(a->keys[i] = dcpi_py_utf8(k, "kv key")) || !(a->values[i] = dcpi_py_utf8(v, "kv value"))) {
      Py_DECREF(items);
      return -1;
    }
  }
  /* the UTF-8 forms are cached in the str objects, which `items` holds */
  Py_DECREF(items);
  a->opts.nkv = (size_t)n;
  a->opts.kv_keys = a->keys;
  a->opts.kv_values = a->values;
  return 0;
}

/* ctx and state objects checked; the state must belong to ctx. */
static int check_pair(PyObject *ctx_obj, PyObject *state_obj, int for_load, dcpi_py_ctx **c,
                      dcpi_py_state **s) {
  if (!(*c = dcpi_py_ctx_usable(ctx_obj))) return -1;
  if (!(*s = dcpi_py_state_check(state_obj, *c, for_load))) return -1;
  return 0;
}

int dcpi_py_save_args_parse(PyObject *args, PyObject *kwargs, dcpi_py_save_args *a) {
  static char *kw[] = {"ctx",        "state",      "path",   "overwrite", "compress", "flags",
                       "block_size", "zstd_level", "policy", "kv",        "save_id",
                       "check_replicas", NULL};
  memset(a, 0, sizeof *a);
  dcp_save_options_init(&a->opts);
  PyObject *ctx_obj, *state_obj, *kv = NULL, *flags_obj = NULL, *block_obj = NULL,
           *id_obj = NULL;
  int overwrite = 0, compress = 0, zstd_level = 0, policy = (int)a->opts.policy, check = 0;
  uint64_t flags = 0, block_size = 0, save_id = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|$ppOOiiOOp", kw, &ctx_obj, &state_obj,
                                   &a->path, &overwrite, &compress, &flags_obj, &block_obj,
                                   &zstd_level, &policy, &kv, &id_obj, &check) ||
      dcpi_py_uint_arg(flags_obj, "flags", UINT32_MAX, &flags) ||
      dcpi_py_uint_arg(block_obj, "block_size", UINT32_MAX, &block_size) ||
      dcpi_py_uint_arg(id_obj, "save_id", UINT64_MAX, &save_id))
    return -1;
  a->opts.save_id = save_id;
  if (!PyUnicode_FSConverter(a->path, &a->path_bytes)) return -1;
  if (check_pair(ctx_obj, state_obj, 0, &a->ctx, &a->state)) return -1;
  a->opts.flags = (uint32_t)flags | (overwrite ? DCP_SAVE_OVERWRITE : 0u) | (compress ? DCP_SAVE_COMPRESS : 0u) |
                  (check ? DCP_SAVE_CHECK_REPLICAS : 0u);
  if (block_size) a->opts.block_size = (uint32_t)block_size;
  if (zstd_level) a->opts.zstd_level = zstd_level;
  a->opts.policy = (dcp_policy)policy;
  return parse_kv(kv, a);
}

void dcpi_py_save_args_free(dcpi_py_save_args *a) {
  Py_CLEAR(a->path_bytes);
  Py_CLEAR(a->kv_keep);
  PyMem_Free(a->keys);
  PyMem_Free(a->values);
  a->keys = a->values = NULL;
}

int dcpi_py_load_args_parse(PyObject *args, PyObject *kwargs, dcpi_py_load_args *a) {
  static char *kw[] = {"ctx",           "state", "path", "flags", "read_dedup", "reader_policy",
                       "max_inflight_bytes", NULL};
  memset(a, 0, sizeof *a);
  dcp_load_options_init(&a->opts);
  PyObject *ctx_obj, *state_obj, *path, *flags_obj = NULL, *inflight_obj = NULL;
  uint64_t flags = 0, inflight = 0;
  int dedup = (int)a->opts.read_dedup, policy = (int)a->opts.reader_policy;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|$OiiO", kw, &ctx_obj, &state_obj, &path,
                                   &flags_obj, &dedup, &policy, &inflight_obj) ||
      dcpi_py_uint_arg(flags_obj, "flags", UINT32_MAX, &flags) ||
      dcpi_py_uint_arg(inflight_obj, "max_inflight_bytes", INT64_MAX, &inflight))
    return -1;
  if (!PyUnicode_FSConverter(path, &a->path_bytes)) return -1;
  if (check_pair(ctx_obj, state_obj, 1, &a->ctx, &a->state)) return -1;
  a->opts.flags = (uint32_t)flags;
  a->opts.read_dedup = (dcp_read_dedup)dedup;
  a->opts.reader_policy = (dcp_policy)policy;
  a->opts.max_inflight_bytes = inflight;
  return 0;
}

void dcpi_py_load_args_free(dcpi_py_load_args *a) { Py_CLEAR(a->path_bytes); }
