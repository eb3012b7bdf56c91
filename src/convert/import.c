/* import.c — dcp_import_safetensors: safetensors (one file or a sharded set
 * with its index.json) into a checkpoint, copied into checksummed blocks or
 * linked (a .metadata whose refs point into the .safetensors files). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "base/checked.h"
#include "convert/cv.h"
#include "metadata/meta.h"
#include "runtime/commit.h"
#include "runtime/files.h"
#include "runtime/lease.h"

typedef struct source {
  char *file;       /* as named: the source's file name, or a weight_map value */
  char *dir, *name; /* where it is read: a symbolic link resolved (cv.h) */
  bool linked;      /* file is a symbolic link */
  dcpi_st_header *h;
  uint32_t file_id; /* in the metadata file table (link mode) */
} source;

typedef struct import_job {
  dcp_ctx *ctx;
  uint32_t flags;
  char *sdir, *sname; /* the source path as given */
  char *idir, *iname; /* the index.json, a symbolic link resolved */
  dcpi_rt src;        /* storage on the directory of the file being read */
  dcpi_rt dst;
  source *srcs;
  size_t nsrc, cap_src;
  dcpi_md *md;
  dcpi_block_writer *w;
  uint32_t data_file;
  dcpi_identity ident;             /* the import is a save: it has one */
  char data_name[DCPI_NAME_MAX];   /* of a copy's data file */
  dcpi_lease *lease;               /* the checkpoint directory's */
  uint8_t *buf; /* one window */
  dcpi_cv_progress pr;
  dcpi_err err;
} import_job;

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

static bool plain_name(const char *s) {
  return *s && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") && strcmp(s, "..");
}

/* ---- sources ------------------------------------------------------------------ */

/* Point j->src at directory dir. Sources resolved through links may lie in
 * several directories; consecutive ones usually share one. */
static dcp_status src_at(import_job *j, const char *dir) {
  if (j->src.st && strcmp(j->src.path, dir) == 0) return DCP_OK;
  dcpi_cv_close(&j->src);
  return dcpi_cv_open(&j->src, j->ctx, dir, 0, &j->err);
}

static dcp_status push_source(import_job *j, const char *file) {
  if (j->nsrc == j->cap_src) {
    size_t cap = j->cap_src ? 2 * j->cap_src : 4;
    source *p = realloc(j->srcs, cap * sizeof *p);
    if (!p) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
    j->srcs = p, j->cap_src = cap;
  }
  j->srcs[j->nsrc] = (source){.file = strdup(file)};
  if (!j->srcs[j->nsrc].file) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
  j->nsrc++;
  return DCP_OK;
}

static int cmp_source(const void *a, const void *b) {
  return strcmp(((const source *)a)->file, ((const source *)b)->file);
}

/* Sorted, each file once. The weight_map names a file once per tensor and a
 * hostile index may name millions of distinct files: sort, no pairwise
 * search. */
static void unique_sources(import_job *j) {
  if (j->nsrc > 1) dcpi_sort(j->srcs, j->nsrc, sizeof *j->srcs, cmp_source);
  size_t k = 0;
  for (size_t i = 0; i < j->nsrc; i++) {
    if (k && strcmp(j->srcs[k - 1].file, j->srcs[i].file) == 0)
      free(j->srcs[i].file);
    else
      j->srcs[k++] = j->srcs[i];
  }
  j->nsrc = k;
}

/* A linked checkpoint names its files inside the checkpoint directory,
 * where every load opens them without following links: a link there
 * would make a checkpoint that no load can read. */
static dcp_status check_linkable(import_job *j, const source *src) {
  if (!(j->flags & DCP_IMPORT_LINK) || !src->linked) return DCP_OK;
  return dcpi_fail(&j->err, DCP_EINVAL,
                   "import --link: '%s' is a symbolic link, and a load never follows links "
                   "inside a checkpoint directory: import it as a copy (without --link), or "
                   "link in the directory that holds the files themselves ('%s')",
                   src->file, src->dir);
}

/* Resolve every source (relative to the directory the source path names,
 * as the Hugging Face cache's snapshot links are) and read its header. */
static dcp_status read_headers(import_job *j) {
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < j->nsrc && !rc; i++) {
    source *src = &j->srcs[i];
    rc = dcpi_cv_resolve_source(j->sdir, src->file, &src->dir, &src->name, &src->linked, &j->err);
    if (!rc) rc = check_linkable(j, src);
    if (!rc) rc = src_at(j, src->dir);
    if (!rc) rc = dcpi_cv_read_st_header(&j->src, src->name, src->file, &src->h, &j->err);
  }
  return rc;
}

/* Every tensor of every shard is mapped to that shard, and the index maps
 * no more tensors than the shards hold. */
static dcp_status check_index(import_job *j, const json_t *wm) {
  size_t total = 0;
  for (size_t i = 0; i < j->nsrc; i++) {
    const dcpi_st_header *h = j->srcs[i].h;
    total += h->ntensors;
    for (size_t t = 0; t < h->ntensors; t++) {
      const json_t *v = json_object_get(wm, h->tensors[t].name);
      if (!v || strcmp(json_string_value(v), j->srcs[i].file))
        return dcpi_fail(&j->err, DCP_ECORRUPT,
                         "%s: tensor '%s' of shard '%s' is not mapped to it by the weight_map",
                         j->sname, h->tensors[t].name, j->srcs[i].file);
    }
  }
  if (total != json_object_size(wm))
    return dcpi_fail(&j->err, DCP_ECORRUPT,
                     "%s: the weight_map names %zu tensors but the shards hold %zu", j->sname,
                     json_object_size(wm), total);
  return DCP_OK;
}

/* The shard files the weight_map names, each once. An empty map is refused:
 * an index of no tensors is a broken or partial download far more often
 * than a model, and an empty checkpoint would hide that. */
static dcp_status index_shards(import_job *j, const json_t *wm) {
  if (!json_object_size(wm))
    return dcpi_fail(&j->err, DCP_ECORRUPT,
                     "%s: the weight_map is empty: the index names no tensors (an incomplete "
                     "download?)", j->sname);
  const char *key;
  json_t *v;
  dcp_status rc = DCP_OK;
  json_object_foreach((json_t *)wm, key, v) {
    if (!json_is_string(v) || !plain_name(json_string_value(v)))
      return dcpi_fail(&j->err, DCP_ECORRUPT,
                       "%s: weight_map entry '%.200s' is not a plain file name", j->sname, key);
    if ((rc = push_source(j, json_string_value(v)))) return rc;
  }
  unique_sources(j);
  return DCP_OK;
}

static dcp_status read_shards(import_job *j, const json_t *root) {
  const json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
  if (!json_is_object(wm))
    return dcpi_fail(&j->err, DCP_ECORRUPT, "%s: no weight_map object", j->sname);
  dcp_status rc = index_shards(j, wm);
  if (!rc) rc = read_headers(j);
  return rc ? rc : check_index(j, wm);
}

static dcp_status read_index(import_job *j) {
  uint64_t size = 0;
  uint8_t *data = NULL;
  size_t len = 0;
  bool linked;
  dcp_status rc = dcpi_cv_resolve_source(j->sdir, j->sname, &j->idir, &j->iname, &linked, &j->err);
  if (!rc) rc = src_at(j, j->idir);
  if (!rc) rc = dcpi_rt_file_size(&j->src, j->iname, &size, &j->err);
  if (!rc && size > DCPI_ST_MAX_HEADER)
    rc = dcpi_fail(&j->err, DCP_ECORRUPT, "%s: index of %llu bytes is too large", j->sname,
                  (unsigned long long)size);
  if (!rc) rc = dcpi_rt_read_file(&j->src, j->iname, &data, &len, &j->err);
  if (rc) return rc;
  json_error_t jerr;
  json_t *root = json_loadb((const char *)data, len, JSON_REJECT_DUPLICATES, &jerr);
  free(data);
  if (!root)
    return dcpi_fail(&j->err, DCP_ECORRUPT, "%s: not valid JSON: %s (line %d)", j->sname,
                     jerr.text, jerr.line);
  rc = read_shards(j, root);
  json_decref(root);
  return rc;
}

/* Index or file is told by the name as given: a link's target (a cache
 * blob named by its hash) says nothing. */
static dcp_status read_sources(import_job *j) {
  if (ends_with(j->sname, ".index.json")) return read_index(j);
  dcp_status rc = push_source(j, j->sname);
  return rc ? rc : read_headers(j);
}

/* ---- metadata ----------------------------------------------------------------- */

typedef struct kv_ref {
  const char *key, *value;
  size_t src; /* index in j->srcs */
} kv_ref;

static int cmp_kv_ref(const void *a, const void *b) {
  const kv_ref *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  return c ? c : (x->src > y->src) - (x->src < y->src);
}

/* __metadata__ of every shard; a key in several shards must agree. All
 * entries are sorted by key and compared with their neighbour: shards of a
 * hostile set may each hold millions of keys, so no search per key. */
static dcp_status add_kvs(import_job *j) {
  size_t n = 0;
  for (size_t i = 0; i < j->nsrc; i++) n += j->srcs[i].h->nkv;
  if (!n) return DCP_OK;
  kv_ref *r = malloc(n * sizeof *r);
  if (!r) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
  n = 0;
  for (size_t i = 0; i < j->nsrc; i++)
    for (size_t k = 0; k < j->srcs[i].h->nkv; k++)
      r[n++] = (kv_ref){j->srcs[i].h->kv_keys[k], j->srcs[i].h->kv_values[k], i};
  dcpi_sort(r, n, sizeof *r, cmp_kv_ref);
  dcp_status rc = DCP_OK;
  for (size_t i = 0; i < n && !rc; i++) {
    if (!i || strcmp(r[i].key, r[i - 1].key))
      rc = dcpi_md_add_kv(j->md, r[i].key, r[i].value, &j->err);
    else if (strcmp(r[i].value, r[i - 1].value))
      rc = dcpi_fail(&j->err, DCP_ECORRUPT,
                    "__metadata__ key '%.200s' differs between shards '%s' and '%s'", r[i].key,
                    j->srcs[r[i - 1].src].file, j->srcs[r[i].src].file);
  }
  free(r);
  return rc;
}

static dcp_status add_ref_chunk(import_job *j, uint32_t tid, const dcp_box *box,
                                const dcp_storage_ref *ref) {
  return dcpi_md_add_chunk(j->md, tid, box->offset, box->size, ref, &j->err);
}

/* ---- copy --------------------------------------------------------------------- */

/* Window of count elements from flat, already in j->buf: its boxes become
 * chunks in the data file. */
static dcp_status put_window(import_job *j, uint32_t tid, const dcpi_st_tensor *t,
                             int64_t flat, int64_t count) {
  dcp_box whole = {.ndim = t->ndim}, boxes[2 * DCP_MAX_NDIM];
  memcpy(whole.size, t->shape, sizeof t->shape);
  size_t nb = 0, es = dcp_dtype_size(t->dtype), at = 0;
  dcp_status rc = dcp_flat_to_boxes(&whole, flat, count, boxes, 2 * DCP_MAX_NDIM, &nb);
  if (rc) return dcpi_fail(&j->err, rc, "tensor '%s': cannot cut window", t->name);
  for (size_t b = 0; b < nb && !rc; b++) {
    int64_t n;
    dcp_box_numel(&boxes[b], &n);
    dcpi_ref r;
    if ((rc = dcpi_block_writer_put(j->w, j->buf + at, (uint64_t)n * es, &r, &j->err))) break;
    dcp_storage_ref ref = {.file = j->data_file, .codec = r.codec, .block_size = r.block_size,
                           .offset = r.offset, .stored_length = r.stored_length,
                           .raw_length = r.raw_length, .block_count = r.block_count,
                           .block_checksums = r.checksums, .block_stored_lengths = r.stored_lens};
    rc = add_ref_chunk(j, tid, &boxes[b], &ref);
    dcpi_ref_free(&r);
    at += (size_t)n * es;
  }
  return rc;
}

static dcp_status copy_tensor(import_job *j, dcp_storage_file *f, const dcpi_st_header *h,
                              const dcpi_st_tensor *t, uint32_t tid) {
  size_t es = dcp_dtype_size(t->dtype);
  int64_t numel = (int64_t)((t->end - t->begin) / es), per = (int64_t)(DCPI_CV_WINDOW / es);
  dcp_status rc = DCP_OK;
  for (int64_t flat = 0; flat < numel && !rc; flat += per) {
    int64_t count = numel - flat < per ? numel - flat : per;
    uint64_t off = h->data_start + t->begin + (uint64_t)flat * es;
    rc = dcpi_rt_file_read(&j->src, f, j->buf, (size_t)count * es, off, &j->err);
    if (!rc) rc = put_window(j, tid, t, flat, count);
    dcpi_cv_progress_add(&j->pr, (uint64_t)count * es);
  }
  return rc;
}

/* ---- link --------------------------------------------------------------------- */

static dcp_status link_tensor(import_job *j, dcp_storage_file *f, const source *src,
                              const dcpi_st_tensor *t, uint32_t tid) {
  uint64_t len = t->end - t->begin, bs = DCPI_SAVE_DEFAULT_BLOCK_SIZE, nb = (len + bs - 1) / bs;
  if (!len) return DCP_OK;
  uint64_t *cks = malloc(nb * sizeof *cks);
  if (!cks) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory for block checksums");
  dcp_status rc = DCP_OK;
  uint64_t off = src->h->data_start + t->begin;
  for (uint64_t at = 0, b = 0; at < len && !rc; at += DCPI_CV_WINDOW) {
    size_t n = (size_t)(len - at < DCPI_CV_WINDOW ? len - at : DCPI_CV_WINDOW);
    if ((rc = dcpi_rt_file_read(&j->src, f, j->buf, n, off + at, &j->err))) break;
    for (size_t p = 0; p < n; p += (size_t)bs, b++)
      cks[b] = XXH3_64bits(j->buf + p, n - p < bs ? n - p : (size_t)bs);
    dcpi_cv_progress_add(&j->pr, n);
  }
  dcp_box box = {.ndim = t->ndim};
  memcpy(box.size, t->shape, sizeof t->shape);
  dcp_storage_ref ref = {.file = src->file_id, .codec = DCP_CODEC_NONE, .block_size = (uint32_t)bs,
                         .offset = off, .stored_length = len, .raw_length = len,
                         .block_count = nb, .block_checksums = cks};
  if (!rc) rc = add_ref_chunk(j, tid, &box, &ref);
  free(cks);
  return rc;
}

/* ---- driver --------------------------------------------------------------------- */

static dcp_status import_source(import_job *j, const source *src) {
  dcp_storage_file *f = NULL;
  dcp_status rc = src_at(j, src->dir);
  if (!rc) rc = dcpi_rt_file_open(&j->src, src->name, DCP_FILE_READ, &f, &j->err);
  for (size_t i = 0; i < src->h->ntensors && !rc; i++) {
    const dcpi_st_tensor *t = &src->h->tensors[i];
    uint32_t tid;
    rc = dcpi_md_add_tensor(j->md, t->name, t->dtype, t->ndim, t->shape, -1, NULL, &tid, &j->err);
    if (rc == DCP_EEXIST)
      rc = dcpi_fail(&j->err, DCP_ECORRUPT, "tensor '%s' appears in two shards", t->name);
    if (!rc)
      rc = j->flags & DCP_IMPORT_LINK ? link_tensor(j, f, src, t, tid)
                                     : copy_tensor(j, f, src->h, t, tid);
  }
  uint64_t size;
  if (!rc && (j->flags & DCP_IMPORT_LINK) &&
      !(rc = dcpi_rt_file_size(&j->src, src->name, &size, &j->err)))
    rc = dcpi_md_set_file_length(j->md, src->file_id, size, &j->err);
  dcpi_err ignored;
  if (f) dcpi_rt_file_close(&j->src, f, &ignored);
  return rc;
}

static bool same_dir(const char *a, const char *b) {
  struct stat x, y;
  return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* The import writes its temporary metadata (both modes) and its data file
 * (a copy) into the checkpoint directory, and removes the data file on
 * failure: a source that is one of those files (or a 0.2 one a later save
 * removes as a leftover) would be destroyed. */
static dcp_status check_overwrites(import_job *j, const char *data_name) {
  char tmp[DCPI_NAME_MAX];
  dcpi_name_metadata_tmp(tmp, j->ident.tag);
  for (size_t i = 0; i < j->nsrc; i++) {
    const source *src = &j->srcs[i];
    const char *n = src->name;
    bool written = strcmp(n, tmp) == 0 || dcpi_name_is_save_file(n) ||
                   (data_name && strcmp(n, data_name) == 0);
    if (written && same_dir(src->dir, j->dst.path))
      return dcpi_fail(&j->err, DCP_EINVAL,
                       "import: source '%s' is the file '%s' that the import writes in %s; "
                       "import into another directory", src->file, n, j->dst.path);
  }
  return DCP_OK;
}

static dcp_status open_outputs(import_job *j) {
  uint64_t size;
  dcpi_err probe;
  const char *name = j->data_name;
  bool link = j->flags & DCP_IMPORT_LINK;
  dcp_status rc = dcpi_lease_acquire(&j->dst, DCPI_COORD_LEASE, j->ctx->lease_ms, &j->lease,
                                    &j->err);
  if (!rc && (rc = dcpi_save_id_random(j->ident.id)))
    return dcpi_fail(&j->err, rc, "no random bytes for the import's id");
  if (rc) return rc;
  j->ident.generation = 1; /* the directory holds no checkpoint (checked next) */
  dcpi_tag_of(j->ident.id, j->ident.tag);
  dcpi_name_data(j->data_name, 0, 0, j->ident.tag);
  rc = dcpi_rt_file_size(&j->dst, DCPI_METADATA_NAME, &size, &probe);
  if (rc == DCP_OK)
    return dcpi_fail(&j->err, DCP_EEXIST, "a committed checkpoint exists at %s", j->dst.path);
  if (rc != DCP_ENOTFOUND) return dcpi_fail(&j->err, rc, "%s", probe.msg);
  if ((rc = check_overwrites(j, link ? NULL : name))) return rc;
  if ((rc = dcpi_md_create(&j->md))) return dcpi_fail(&j->err, rc, "out of memory");
  if ((rc = dcpi_md_set_identity(j->md, j->ident.id, j->ident.generation, -1, &j->err))) return rc;
  if (link) {
    for (size_t i = 0; i < j->nsrc && !rc; i++)
      rc = dcpi_md_add_file(j->md, j->srcs[i].file, &j->srcs[i].file_id, &j->err);
    return rc;
  }
  rc = dcpi_md_add_file(j->md, name, &j->data_file, &j->err);
  return rc ? rc : dcpi_block_writer_open(&j->dst, name, DCPI_SAVE_DEFAULT_BLOCK_SIZE, false, 0, &j->w,
                                        &j->err);
}

static dcp_status commit(import_job *j) {
  dcp_status rc = DCP_OK;
  if (j->w) {
    uint64_t length = dcpi_block_writer_length(j->w);
    rc = dcpi_block_writer_close(j->w, true, &j->err);
    j->w = NULL;
    if (!rc) rc = dcpi_md_set_file_length(j->md, j->data_file, length, &j->err);
    /* the data file's entry is durable before .metadata names it */
    if (!rc) rc = dcpi_rt_sync_dir(&j->dst, &j->err);
  }
  void *enc = NULL;
  size_t len = 0;
  char tmp[DCPI_NAME_MAX];
  dcpi_name_metadata_tmp(tmp, j->ident.tag);
  if (!rc) rc = add_kvs(j);
  if (!rc) rc = dcpi_md_encode(j->md, &enc, &len, &j->err);
  if (!rc) rc = dcpi_lease_check(j->lease, &j->err);
  if (!rc) rc = dcpi_rt_write_file_atomic(&j->dst, DCPI_METADATA_NAME, tmp, enc, len, &j->err);
  free(enc);
  return rc;
}

/* Without trailing slashes ("/" stays). */
static void trim(char *p) {
  size_t n = strlen(p);
  while (n > 1 && p[n - 1] == '/') p[--n] = '\0';
}

static dcp_status check_link_dir(import_job *j, const char *ckpt) {
  char *c = strdup(ckpt);
  if (!c) return dcpi_fail(&j->err, DCP_ENOMEM, "out of memory");
  trim(c);
  trim(j->sdir);
  bool same = strcmp(c, j->sdir) == 0;
  free(c);
  return same ? DCP_OK
              : dcpi_fail(&j->err, DCP_EINVAL,
                          "import --link: the checkpoint must be the directory holding the "
                          ".safetensors files ('%s'), not '%s'", j->sdir, ckpt);
}

static dcp_status run(import_job *j, const char *src, const char *ckpt) {
  dcp_status rc = dcpi_cv_split(src, &j->sdir, &j->sname, &j->err);
  if (!rc && (j->flags & DCP_IMPORT_LINK)) rc = check_link_dir(j, ckpt);
  if (!rc) rc = dcpi_cv_open(&j->src, j->ctx, j->sdir, 0, &j->err);
  if (!rc) rc = read_sources(j);
  if (!rc) rc = dcpi_cv_open(&j->dst, j->ctx, ckpt, DCP_STORAGE_CREATE, &j->err);
  if (!rc) rc = open_outputs(j);
  if (!rc && !(j->buf = malloc(DCPI_CV_WINDOW)))
    rc = dcpi_fail(&j->err, DCP_ENOMEM, "out of memory for the copy window");
  for (size_t i = 0; i < j->nsrc && !rc; i++) j->pr.total += j->srcs[i].h->data_len;
  for (size_t i = 0; i < j->nsrc && !rc; i++) rc = import_source(j, &j->srcs[i]);
  return rc ? rc : commit(j);
}

static void job_free(import_job *j, bool failed) {
  dcpi_err ignored;
  if (j->w) dcpi_block_writer_close(j->w, false, NULL);
  if (failed && j->dst.st && !(j->flags & DCP_IMPORT_LINK) && j->md && j->data_name[0])
    dcpi_rt_remove(&j->dst, j->data_name, &ignored); /* best effort */
  dcpi_lease_release(j->lease);
  dcpi_cv_close(&j->src);
  dcpi_cv_close(&j->dst);
  for (size_t i = 0; i < j->nsrc; i++) {
    source *src = &j->srcs[i];
    free(src->file), free(src->dir), free(src->name);
    dcpi_st_header_free(src->h);
  }
  free(j->srcs);
  free(j->idir);
  free(j->iname);
  dcpi_md_free(j->md);
  free(j->buf);
  free(j->sdir);
  free(j->sname);
}

dcp_status dcp_import_safetensors(dcp_ctx *ctx, const char *src, const char *ckpt,
                                  uint32_t flags) {
  if (!ctx) return DCP_EINVAL;
  import_job j = {.ctx = ctx, .flags = flags, .pr = {.ctx = ctx, .phase = DCP_PHASE_IMPORT}};
  dcpi_err_clear(&j.err);
  dcp_status rc;
  if (!src || !*src || !ckpt || !*ckpt)
    rc = dcpi_fail(&j.err, DCP_EINVAL, "import: empty source or checkpoint path");
  else if (flags & ~DCP_IMPORT_LINK)
    rc = dcpi_fail(&j.err, DCP_EINVAL, "import: unknown flags 0x%x", flags);
  else
    rc = run(&j, src, ckpt);
  job_free(&j, rc != DCP_OK);
  return dcpi_ctx_report(ctx, &j.err);
}
