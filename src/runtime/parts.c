/* parts.c — the parts of uncoordinated saves in a directory (parts.h). */
#include "runtime/parts.h"

#include <stdlib.h>
#include <string.h>

#include "base/checked.h"

typedef struct scan {
  dcpi_parts *p;
  size_t cap;
} scan;

static int on_name(void *arg, const char *name) {
  scan *sc = arg;
  dcpi_file_name fn;
  dcpi_file_kind k = dcpi_name_parse(name, &fn);
  if (k == DCPI_FILE_LEGACY_PART) sc->p->legacy = true;
  if (k != DCPI_FILE_PART) return 0;
  if (DCPI_RESERVE(sc->p->all, sc->cap, sc->p->nall + 1)) return DCP_ENOMEM;
  dcpi_part *pt = &sc->p->all[sc->p->nall++];
  memcpy(pt->tag, fn.tag, sizeof pt->tag);
  pt->world = fn.world, pt->rank = fn.rank, pt->seq = fn.seq;
  return 0;
}

/* (tag, world) identifies a save. */
static int cmp_save(const dcpi_part *a, const dcpi_part *b) {
  int c = strcmp(a->tag, b->tag);
  if (c) return c;
  return (a->world > b->world) - (a->world < b->world);
}

/* qsort: by save, then rank, then seq descending (a rank's newest first). */
static int cmp_part(const void *pa, const void *pb) {
  const dcpi_part *a = pa, *b = pb;
  int c = cmp_save(a, b);
  if (c) return c;
  if (a->rank != b->rank) return (a->rank > b->rank) - (a->rank < b->rank);
  return (a->seq < b->seq) - (a->seq > b->seq);
}

dcp_status dcpi_parts_group(dcpi_parts *p, dcpi_err *err) {
  if (p->nall) dcpi_sort(p->all, p->nall, sizeof *p->all, cmp_part);
  /* Compact: one part per (save, rank), the newest. */
  size_t w = 0;
  for (size_t i = 0; i < p->nall; i++)
    if (!w || cmp_save(&p->all[w - 1], &p->all[i]) || p->all[w - 1].rank != p->all[i].rank)
      p->all[w++] = p->all[i];
  p->nall = w;
  size_t cap = 0;
  for (size_t i = 0; i < p->nall;) {
    size_t j = i;
    while (j < p->nall && cmp_save(&p->all[i], &p->all[j]) == 0) j++;
    if (DCPI_RESERVE(p->saves, cap, p->nsaves + 1))
      return dcpi_fail(err, DCP_ENOMEM, "out of memory for the parts of %zu saves", p->nsaves);
    /* ranks are < world (files.c checks), distinct after the compaction */
    p->saves[p->nsaves++] = (dcpi_part_save){&p->all[i], j - i,
                                             (int64_t)(j - i) == (int64_t)p->all[i].world};
    i = j;
  }
  return DCP_OK;
}

dcp_status dcpi_parts_scan(dcpi_rt *rt, dcpi_parts *out, dcpi_err *err) {
  memset(out, 0, sizeof *out);
  scan sc = {out, 0};
  dcp_status rc = dcpi_rt_list(rt, on_name, &sc, err);
  if (rc == DCP_ENOMEM) dcpi_fail(err, rc, "out of memory listing %s", rt->path);
  if (!rc) rc = dcpi_parts_group(out, err);
  if (rc) dcpi_parts_free(out);
  return rc;
}

void dcpi_parts_free(dcpi_parts *p) {
  free(p->all);
  free(p->saves);
  memset(p, 0, sizeof *p);
}

const dcpi_part *dcpi_parts_of_rank(const dcpi_part_save *s, int32_t rank) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->parts[mid].rank == rank) return &s->parts[mid];
    if (s->parts[mid].rank < rank) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

const dcpi_part_save *dcpi_parts_newest_complete(const dcpi_parts *p, int32_t rank) {
  const dcpi_part_save *best = NULL;
  uint64_t best_seq = 0;
  for (size_t i = 0; i < p->nsaves; i++) {
    const dcpi_part_save *s = &p->saves[i];
    const dcpi_part *mine = s->complete ? dcpi_parts_of_rank(s, rank) : NULL;
    if (mine && mine->seq > best_seq) best = s, best_seq = mine->seq;
  }
  return best;
}

uint64_t dcpi_parts_max_seq(const dcpi_parts *p, int32_t rank) {
  uint64_t m = 0;
  for (size_t i = 0; i < p->nall; i++)
    if (p->all[i].rank == rank && p->all[i].seq > m) m = p->all[i].seq;
  return m;
}
