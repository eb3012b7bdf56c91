/* safetensors.c — strict safetensors header parsing and header building
 * (format in safetensors.h), JSON through libjansson. */
#include "convert/safetensors.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "model/name.h"

dcp_status dcpi_st_header_len(const uint8_t prefix[8], uint64_t file_size, uint64_t *header_len,
                              dcpi_err *err) {
  if (file_size < 8)
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: file of %llu bytes has no 8-byte header size",
                     (unsigned long long)file_size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | prefix[i];
  if (n > DCPI_ST_MAX_HEADER)
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: header size %llu exceeds the limit of %u bytes",
                     (unsigned long long)n, DCPI_ST_MAX_HEADER);
  if (n > file_size - 8)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "safetensors: header size %llu runs past the end of the %llu-byte file "
                     "(truncated?)", (unsigned long long)n, (unsigned long long)file_size);
  if (n < 2) return dcpi_fail(err, DCP_ECORRUPT, "safetensors: header size %llu is too small",
                              (unsigned long long)n);
  *header_len = n;
  return DCP_OK;
}

void dcpi_st_header_free(dcpi_st_header *h) {
  if (!h) return;
  for (size_t i = 0; i < h->ntensors; i++) free(h->tensors[i].name);
  for (size_t i = 0; i < h->nkv; i++) free(h->kv_keys[i]), free(h->kv_values[i]);
  free(h->tensors);
  free(h->kv_keys);
  free(h->kv_values);
  free(h);
}

/* A non-negative JSON integer into *v. */
static int get_uint(const json_t *j, uint64_t *v) {
  if (!json_is_integer(j) || json_integer_value(j) < 0) return 0;
  *v = (uint64_t)json_integer_value(j);
  return 1;
}

static dcp_status parse_shape(const char *name, const json_t *shape, dcpi_st_tensor *t,
                              int64_t *numel, dcpi_err *err) {
  if (!json_is_array(shape))
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s': shape is not an array", name);
  size_t nd = json_array_size(shape);
  if (nd > DCP_MAX_NDIM)
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s': %zu dimensions (at most %d)",
                     name, nd, DCP_MAX_NDIM);
  t->ndim = (uint32_t)nd;
  *numel = 1;
  for (size_t d = 0; d < nd; d++) {
    uint64_t e;
    if (!get_uint(json_array_get(shape, d), &e) || e > INT64_MAX)
      return dcpi_fail(err, DCP_ECORRUPT,
                       "safetensors: tensor '%s': extent %zu is not a non-negative integer", name, d);
    t->shape[d] = (int64_t)e;
    if (!dcpi_mul_i64(*numel, (int64_t)e, numel))
      return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s': element count overflows",
                       name);
  }
  return DCP_OK;
}

static dcp_status parse_offsets(const char *name, const json_t *offs, uint64_t data_len,
                                dcpi_st_tensor *t, dcpi_err *err) {
  if (!json_is_array(offs) || json_array_size(offs) != 2 ||
      !get_uint(json_array_get(offs, 0), &t->begin) || !get_uint(json_array_get(offs, 1), &t->end))
    return dcpi_fail(err, DCP_ECORRUPT,
                     "safetensors: tensor '%s': data_offsets is not [begin, end] of non-negative "
                     "integers", name);
  if (t->begin > t->end || t->end > data_len)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "safetensors: tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte "
                     "data region", name, (unsigned long long)t->begin,
                     (unsigned long long)t->end, (unsigned long long)data_len);
  return DCP_OK;
}

/* Names follow the fqn rule of dcp_state_add_tensor (model/name.h), so a
 * load can ask for them and a hostile file cannot smuggle a path or a
 * control sequence into a checkpoint: DCP_ENAME naming the rule and byte.
 * jansson hands keys over NUL-terminated and refuses "\u0000" in them. */
static dcp_status check_name(const char *name, dcpi_err *err) {
  return dcpi_name_check(name, strlen(name), "safetensors: tensor name", DCP_ENAME, err);
}

static dcp_status parse_tensor(const char *name, const json_t *v, uint64_t data_len,
                               dcpi_st_tensor *t, dcpi_err *err) {
  dcp_status rc = check_name(name, err);
  if (rc) return rc;
  if (!json_is_object(v))
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s' is not an object", name);
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)v, key, val) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s': unknown field '%.100s'",
                       name, key);
  }
  const json_t *dt = json_object_get(v, "dtype");
  t->dtype = json_is_string(dt) ? dcp_dtype_from_name(json_string_value(dt)) : DCP_DTYPE_INVALID;
  if (t->dtype == DCP_DTYPE_INVALID)
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s': unknown dtype %s%.40s%s", name,
                     json_is_string(dt) ? "'" : "", json_is_string(dt) ? json_string_value(dt)
                     : "(missing or not a string)", json_is_string(dt) ? "'" : "");
  int64_t numel = 0, bytes = 0;
  if ((rc = parse_shape(name, json_object_get(v, "shape"), t, &numel, err))) return rc;
  if ((rc = parse_offsets(name, json_object_get(v, "data_offsets"), data_len, t, err))) return rc;
  if (!dcpi_mul_i64(numel, (int64_t)dcp_dtype_size(t->dtype), &bytes))
    return dcpi_fail(err, DCP_ECORRUPT, "safetensors: tensor '%s': byte size of the shape (%s) "
                     "overflows int64", name, dcp_dtype_name(t->dtype));
  if ((uint64_t)bytes != t->end - t->begin)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "safetensors: tensor '%s': shape and dtype %s need %lld bytes but "
                     "data_offsets span %llu", name, dcp_dtype_name(t->dtype), (long long)bytes,
                     (unsigned long long)(t->end - t->begin));
  if (!(t->name = strdup(name))) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  return DCP_OK;
}

static int cmp_span(const void *a, const void *b) {
  const dcpi_st_tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Spans must tile the data region: ordered, no overlap, no gap. */
static dcp_status check_spans(const dcpi_st_header *h, dcpi_err *err) {
  uint64_t at = 0;
  for (size_t i = 0; i < h->ntensors; i++) {
    const dcpi_st_tensor *t = &h->tensors[i];
    if (t->begin < at)
      return dcpi_fail(err, DCP_ECORRUPT,
                       "safetensors: tensor '%s': span [%llu, %llu) overlaps tensor '%s'", t->name,
                       (unsigned long long)t->begin, (unsigned long long)t->end,
                       h->tensors[i - 1].name);
    if (t->begin > at)
      return dcpi_fail(err, DCP_ECORRUPT,
                       "safetensors: tensor '%s': gap of %llu bytes before its span at %llu",
                       t->name, (unsigned long long)(t->begin - at), (unsigned long long)t->begin);
    at = t->end;
  }
  if (at != h->data_len)
    return dcpi_fail(err, DCP_ECORRUPT,
                     "safetensors: tensors cover %llu bytes of the %llu-byte data region "
                     "(trailing bytes or truncated file)", (unsigned long long)at,
                     (unsigned long long)h->data_len);
  return DCP_OK;
}

/* What a JSON value is, for messages. */
static const char *json_kind(const json_t *j) {
  switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
  }
}

#define RESERVED_WHY                                                                   \
  "(safetensors reserves the key '" DCPI_ST_METADATA_KEY "' for string-to-string " \
  "metadata; it cannot name a tensor)"

typedef struct kv_pair {
  char *key, *value;
} kv_pair;

static int cmp_pair(const void *a, const void *b) {
  return strcmp(((const kv_pair *)a)->key, ((const kv_pair *)b)->key);
}

/* Keys and values sorted together by key. qsort, not an insertion sort: a
 * hostile 100 MB header holds millions of entries, in any order. Keys are
 * unique (duplicates are refused by the parser), so the order is total. */
static dcp_status sort_kvs(dcpi_st_header *h, dcpi_err *err) {
  if (h->nkv < 2) return DCP_OK;
  kv_pair *p = malloc(h->nkv * sizeof *p);
  if (!p) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; i < h->nkv; i++) p[i] = (kv_pair){h->kv_keys[i], h->kv_values[i]};
  dcpi_sort(p, h->nkv, sizeof *p, cmp_pair);
  for (size_t i = 0; i < h->nkv; i++) h->kv_keys[i] = p[i].key, h->kv_values[i] = p[i].value;
  free(p);
  return DCP_OK;
}

static dcp_status parse_metadata(const json_t *md, dcpi_st_header *h, dcpi_err *err) {
  if (!json_is_object(md))
    return dcpi_fail(err, DCP_ECORRUPT,
                     "safetensors: " DCPI_ST_METADATA_KEY " is %s, not an object of strings "
                     RESERVED_WHY, json_kind(md));
  size_t n = json_object_size(md);
  h->kv_keys = calloc(n ? n : 1, sizeof *h->kv_keys);
  h->kv_values = calloc(n ? n : 1, sizeof *h->kv_values);
  if (!h->kv_keys || !h->kv_values) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  const char *key;
  json_t *val;
  json_object_foreach((json_t *)md, key, val) {
    if (!json_is_string(val))
      return dcpi_fail(err, DCP_ECORRUPT,
                       "safetensors: " DCPI_ST_METADATA_KEY " entry '%.200s' is %s, not a string "
                       RESERVED_WHY, key, json_kind(val));
    if (!*key) return dcpi_fail(err, DCP_ECORRUPT, "safetensors: __metadata__ has an empty key");
    size_t k = h->nkv;
    h->kv_keys[k] = strdup(key);
    h->kv_values[k] = strdup(json_string_value(val));
    h->nkv++;
    if (!h->kv_keys[k] || !h->kv_values[k]) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  }
  return sort_kvs(h, err);
}

static dcp_status parse_root(const json_t *root, dcpi_st_header *h, dcpi_err *err) {
  size_t n = json_object_size(root);
  h->tensors = calloc(n ? n : 1, sizeof *h->tensors);
  if (!h->tensors) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  const char *key;
  json_t *val;
  dcp_status rc = DCP_OK;
  json_object_foreach((json_t *)root, key, val) {
    if (strcmp(key, DCPI_ST_METADATA_KEY) == 0)
      rc = parse_metadata(val, h, err);
    else if (!(rc = parse_tensor(key, val, h->data_len, &h->tensors[h->ntensors], err)))
      h->ntensors++;
    if (rc) return rc;
  }
  dcpi_sort(h->tensors, h->ntensors, sizeof *h->tensors, cmp_span);
  return check_spans(h, err);
}

dcp_status dcpi_st_parse(const char *json, size_t json_len, uint64_t data_len,
                         dcpi_st_header **out, dcpi_err *err) {
  *out = NULL;
  dcpi_st_header *h = calloc(1, sizeof *h);
  if (!h) return dcpi_fail(err, DCP_ENOMEM, "out of memory");
  h->header_len = json_len;
  h->data_start = 8 + (uint64_t)json_len;
  h->data_len = data_len;
  json_error_t jerr;
  json_t *root = json_loadb(json, json_len, JSON_REJECT_DUPLICATES, &jerr);
  dcp_status rc = DCP_OK;
  if (!root)
    rc = dcpi_fail(err, DCP_ECORRUPT, "safetensors: header is not valid JSON: %s (line %d, column %d)",
                  jerr.text, jerr.line, jerr.column);
  else if (!json_is_object(root))
    rc = dcpi_fail(err, DCP_ECORRUPT, "safetensors: header is not a JSON object");
  else
    rc = parse_root(root, h, err);
  json_decref(root);
  if (rc) {
    dcpi_st_header_free(h);
    return rc;
  }
  *out = h;
  return DCP_OK;
}

/* ---- building --------------------------------------------------------------- */

static json_t *tensor_json(const dcpi_st_out *t) {
  json_t *o = json_object(), *shape = json_array(), *offs = json_array();
  const char *dt = dcp_dtype_name(t->dtype);
  int bad = !o || !shape || !offs || !dt;
  for (uint32_t d = 0; !bad && d < t->ndim; d++)
    bad = json_array_append_new(shape, json_integer((json_int_t)t->shape[d]));
  bad = bad || json_array_append_new(offs, json_integer((json_int_t)t->begin)) ||
        json_array_append_new(offs, json_integer((json_int_t)t->end));
  bad = bad || json_object_set_new(o, "dtype", json_string(dt)) ||
        json_object_set(o, "shape", shape) || json_object_set(o, "data_offsets", offs);
  json_decref(shape);
  json_decref(offs);
  if (bad) json_decref(o);
  return bad ? NULL : o;
}

#define BUILD_FAILED                                                                      \
  "safetensors: cannot build a header (invalid dtype, a name or value that is not UTF-8, " \
  "or out of memory)"

static dcp_status add_metadata(json_t *root, const char *const *kk, const char *const *kv,
                               size_t nkv, dcpi_err *err) {
  json_t *md = json_object();
  dcp_status rc = md ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < nkv; i++) {
    json_t *v = NULL;
    if (json_object_get(md, kk[i]))
      rc = dcpi_fail(err, DCP_EINVAL, "safetensors: metadata key '%.200s' given twice", kk[i]);
    else if (!(v = json_string(kv[i])) || json_object_set_new(md, kk[i], v))
      rc = dcpi_fail(err, DCP_EINVAL, BUILD_FAILED);
  }
  if (!rc && json_object_set(root, DCPI_ST_METADATA_KEY, md))
    rc = dcpi_fail(err, DCP_ENOMEM, "out of memory");
  json_decref(md);
  return rc;
}

/* A tensor named __metadata__ would replace the file's metadata (or be
 * taken for it by every reader), and a second tensor of one name would
 * replace the first, leaving data that no header entry describes. */
static dcp_status add_tensors(json_t *root, const dcpi_st_out *t, size_t n, dcpi_err *err) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(t[i].name, DCPI_ST_METADATA_KEY) == 0)
      return dcpi_fail(err, DCP_ENAME,
                       "safetensors: tensor '" DCPI_ST_METADATA_KEY "' cannot be written: the "
                       "format reserves that header key for string-to-string metadata (rename "
                       "the tensor)");
    if (json_object_get(root, t[i].name))
      return dcpi_fail(err, DCP_EINVAL, "safetensors: tensor '%.200s' given twice", t[i].name);
    json_t *o = tensor_json(&t[i]);
    if (!o || json_object_set_new(root, t[i].name, o))
      return dcpi_fail(err, DCP_EINVAL, BUILD_FAILED);
  }
  return DCP_OK;
}

static dcp_status header_text(const dcpi_st_out *t, size_t n, const char *const *kk,
                              const char *const *kv, size_t nkv, char **text, dcpi_err *err) {
  *text = NULL;
  json_t *root = json_object();
  dcp_status rc = root ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "out of memory");
  if (!rc && nkv) rc = add_metadata(root, kk, kv, nkv, err);
  if (!rc) rc = add_tensors(root, t, n, err);
  if (!rc && !(*text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER)))
    rc = dcpi_fail(err, DCP_ENOMEM, "out of memory for a safetensors header");
  json_decref(root);
  return rc;
}

dcp_status dcpi_st_build_header(const dcpi_st_out *t, size_t n, const char *const *kv_keys,
                                const char *const *kv_values, size_t nkv, uint8_t **out,
                                size_t *len, dcpi_err *err) {
  *out = NULL;
  char *text = NULL;
  dcp_status rc = header_text(t, n, kv_keys, kv_values, nkv, &text, err);
  if (rc) return rc;
  size_t tl = strlen(text), hl = (tl + 7) / 8 * 8;
  uint8_t *buf = malloc(8 + hl);
  if (!buf) {
    free(text);
    return dcpi_fail(err, DCP_ENOMEM, "out of memory for a safetensors header");
  }
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, text, tl);
  memset(buf + 8 + tl, ' ', hl - tl);
  free(text);
  *out = buf;
  *len = 8 + hl;
  return DCP_OK;
}
