/* dtype.c — the safetensors element types and their sizes. */
#include <string.h>

#include "dcp.h"

typedef struct dtype_desc {
  const char *name;
  size_t size;
} dtype_desc;

static const dtype_desc DTYPES[DCP_DTYPE_END_] = {
    [DCP_BOOL] = {"BOOL", 1},   [DCP_U8] = {"U8", 1},
    [DCP_I8] = {"I8", 1},       [DCP_I16] = {"I16", 2},
    [DCP_U16] = {"U16", 2},     [DCP_I32] = {"I32", 4},
    [DCP_U32] = {"U32", 4},     [DCP_I64] = {"I64", 8},
    [DCP_U64] = {"U64", 8},     [DCP_F16] = {"F16", 2},
    [DCP_BF16] = {"BF16", 2},   [DCP_F32] = {"F32", 4},
    [DCP_F64] = {"F64", 8},     [DCP_F8_E4M3] = {"F8_E4M3", 1},
    [DCP_F8_E5M2] = {"F8_E5M2", 1}, [DCP_F8_E8M0] = {"F8_E8M0", 1},
    [DCP_C64] = {"C64", 8},
};

static int valid(dcp_dtype dt) { return dt > DCP_DTYPE_INVALID && dt < DCP_DTYPE_END_; }

size_t dcp_dtype_size(dcp_dtype dt) { return valid(dt) ? DTYPES[dt].size : 0; }

const char *dcp_dtype_name(dcp_dtype dt) { return valid(dt) ? DTYPES[dt].name : NULL; }

dcp_dtype dcp_dtype_from_name(const char *name) {
  if (!name) return DCP_DTYPE_INVALID;
  for (int dt = DCP_DTYPE_INVALID + 1; dt < DCP_DTYPE_END_; dt++)
    if (strcmp(DTYPES[dt].name, name) == 0) return (dcp_dtype)dt;
  return DCP_DTYPE_INVALID;
}
