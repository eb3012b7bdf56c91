/* replace.c — what a coordinated save replaces, and when it may (replace.h). */
#include "runtime/replace.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "runtime/files.h"
#include "runtime/parts.h"

/* A listing of the directory's save files. */
typedef struct listing {
  char **names;
  size_t n, cap;
  bool parts;
  uint64_t parts_hash; /* sum of the part names' hashes: any listing order */
} listing;

static int collect(void *arg, const char *name) {
  listing *l = arg;
  dcpi_file_kind k = dcpi_name_parse(name, NULL);
  if (k == DCPI_FILE_OTHER) return 0;
  if (k == DCPI_FILE_PART || k == DCPI_FILE_LEGACY_PART) {
    l->parts = true;
    l->parts_hash += XXH3_64bits(name, strlen(name));
  }
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **p = realloc(l->names, cap * sizeof *p);
    if (!p) return DCP_ENOMEM;
    l->names = p, l->cap = cap;
  }
  return (l->names[l->n] = strdup(name)) ? (l->n++, 0) : DCP_ENOMEM;
}

static void listing_free(listing *l) {
  for (size_t i = 0; i < l->n; i++) free(l->names[i]);
  free(l->names);
}

static uint64_t head_hash(const uint8_t *data, size_t len) {
  return XXH3_64bits(data, len < DCPI_BASE_HEAD ? len : DCPI_BASE_HEAD);
}

bool dcpi_base_same(const dcpi_base *a, const dcpi_base *b) {
  return a->committed == b->committed && a->len == b->len && a->head == b->head &&
         a->parts_hash == b->parts_hash && a->rank_seq == b->rank_seq;
}

/* The directory's parts: whether there are any, and their names' hash. */
static dcp_status list_parts(dcpi_rt *rt, dcpi_base *out, dcpi_err *err) {
  listing l = {0};
  dcp_status rc = dcpi_rt_list(rt, collect, &l, err);
  out->parts = l.parts;
  out->parts_hash = l.parts_hash;
  listing_free(&l);
  return rc;
}

dcp_status dcpi_base_read(dcpi_rt *rt, dcpi_base *out, dcpi_err *err) {
  memset(out, 0, sizeof *out);
  uint8_t *data = NULL;
  size_t len = 0;
  dcpi_err probe;
  dcp_status rc = dcpi_rt_read_file(rt, DCPI_METADATA_NAME, &data, &len, &probe);
  if (rc == DCP_OK) {
    out->committed = true;
    out->len = len;
    out->head = head_hash(data, len);
    dcp_meta *m = NULL;
    dcp_save_identity id;
    /* a damaged one is still "the checkpoint there": replaced only when
     * asked, and only if nobody changed it meanwhile */
    if (dcp_meta_open_memory(NULL, data, len, &m) == DCP_OK && dcp_meta_identity(m, &id) == DCP_OK)
      out->generation = id.generation;
    dcp_meta_free(m);
    free(data);
  } else if (rc != DCP_ENOTFOUND) {
    return dcpi_fail(err, rc, "%s", probe.msg);
  }
  return list_parts(rt, out, err);
}

dcp_status dcpi_base_peek(dcpi_rt *rt, int32_t rank, dcpi_base *out, dcpi_err *err) {
  memset(out, 0, sizeof *out);
  uint64_t size = 0;
  dcpi_err probe;
  dcp_status rc = dcpi_rt_file_size(rt, DCPI_METADATA_NAME, &size, &probe);
  if (rc == DCP_OK) {
    uint8_t head[DCPI_BASE_HEAD];
    size_t n = size < sizeof head ? (size_t)size : sizeof head;
    dcp_storage_file *f;
    if ((rc = dcpi_rt_file_open(rt, DCPI_METADATA_NAME, DCP_FILE_READ, &f, err))) return rc;
    rc = dcpi_rt_file_read(rt, f, head, n, 0, err);
    dcpi_err ignored;
    dcpi_rt_file_close(rt, f, &ignored);
    if (rc) return rc;
    out->committed = true, out->len = size, out->head = head_hash(head, n);
  } else if (rc != DCP_ENOTFOUND) {
    return dcpi_fail(err, rc, "%s", probe.msg);
  }
  if ((rc = list_parts(rt, out, err))) return rc;
  if (rank < 0) return DCP_OK;
  dcpi_parts p;
  if ((rc = dcpi_parts_scan(rt, &p, err))) return rc;
  out->rank_seq = dcpi_parts_max_seq(&p, rank);
  dcpi_parts_free(&p);
  return DCP_OK;
}

dcp_status dcpi_base_unchanged(dcpi_rt *rt, const dcpi_base *b, dcpi_err *err) {
  dcpi_base now;
  dcp_status rc = dcpi_base_read(rt, &now, err);
  if (rc) return rc;
  if (dcpi_base_same(&now, b)) return DCP_OK;
  if (now.committed == b->committed && now.len == b->len && now.head == b->head)
    return dcpi_fail(err, DCP_ESTALE,
                     "a save without a collective committed parts at %s while this save ran; "
                     "this save is not committed", rt->path);
  if (!now.committed)
    return dcpi_fail(err, DCP_ESTALE,
                     "the checkpoint at %s was removed while this save ran (by another save "
                     "or by hand); this save is not committed", rt->path);
  return dcpi_fail(err, DCP_ESTALE,
                   "another save committed at %s while this save ran (generation %llu is there "
                   "now; this save started over %s); this save is not committed", rt->path,
                   (unsigned long long)now.generation,
                   b->committed ? "an older checkpoint" : "an empty directory");
}

dcp_status dcpi_base_remove(dcpi_rt *rt, dcpi_err *err) {
  dcpi_err probe;
  dcp_status rc = dcpi_rt_remove(rt, DCPI_METADATA_NAME, &probe);
  if (rc && rc != DCP_ENOTFOUND) return dcpi_fail(err, rc, "%s", probe.msg);
  /* no checkpoint is committed now: the parts of an uncoordinated one go
   * first (so none is ever half there), then data */
  listing l = {0};
  if ((rc = dcpi_rt_list(rt, collect, &l, err))) {
    listing_free(&l);
    return rc;
  }
  for (int pass = 0; pass < 2 && !rc; pass++)
    for (size_t i = 0; i < l.n && !rc; i++) {
      dcpi_file_kind k = dcpi_name_parse(l.names[i], NULL);
      bool part = k == DCPI_FILE_PART || k == DCPI_FILE_LEGACY_PART;
      if (part != (pass == 0)) continue;
      rc = dcpi_rt_remove(rt, l.names[i], &probe);
      if (rc == DCP_ENOTFOUND) rc = DCP_OK;
      else if (rc) dcpi_fail(err, rc, "%s", probe.msg);
    }
  listing_free(&l);
  return rc ? rc : dcpi_rt_sync_dir(rt, err);
}

void dcpi_remove_other_saves(dcpi_rt *rt, const char *keep_tag) {
  listing l = {0};
  dcpi_err ignored;
  if (dcpi_rt_list(rt, collect, &l, &ignored) == DCP_OK)
    for (size_t i = 0; i < l.n; i++) {
      dcpi_file_name fn;
      bool keep = dcpi_name_parse(l.names[i], &fn) == DCPI_FILE_DATA && fn.seq == 0 && keep_tag &&
                  strcmp(fn.tag, keep_tag) == 0;
      if (!keep) dcpi_rt_remove(rt, l.names[i], &ignored);
    }
  listing_free(&l);
}
