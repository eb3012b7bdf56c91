/* load_exec.c — reading destination chunks, and running a read-dedup
 * schedule: readers read (and verify) straight into their own destination
 * chunks, then broadcast them to their group; small chunks of one group go
 * as one packed broadcast.
 *
 * Pipeline: a reader thread reads the units this rank broadcasts, in
 * schedule order, while the calling thread runs the broadcasts; it may run
 * ahead by max_inflight bytes (read, not yet broadcast) and fills waits with
 * the chunks the rank reads for itself. Only the calling thread talks to
 * other ranks; only the reader thread touches the storage, the metadata
 * view and the block reader while it runs. The two share a mutex-protected
 * progress record, and a chunk is handed from one thread to the other only
 * through it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "metadata/view.h"
#include "model/box.h"
#include "core/progress.h"
#include "runtime/load_int.h"

/* ---- reading one chunk ---------------------------------------------------- */

dcp_status dcpi_load_copy_runs(void *arg, uint64_t raw_off, const uint8_t *data, size_t len,
                               dcpi_err *err) {
  (void)err;
  const dcpi_overlap_sink *os = arg;
  dcpi_run_iter it;
  dcpi_run run;
  int64_t lo = (int64_t)raw_off, hi = lo + (int64_t)len;
  dcpi_run_iter_init(&it, os->ov);
  while (dcpi_run_iter_next(&it, &run)) {
    int64_t a = run.src_off > lo ? run.src_off : lo;
    int64_t b = run.src_off + run.len < hi ? run.src_off + run.len : hi;
    if (a < b) memcpy(os->dest + run.dest_off + (a - run.src_off), data + (a - lo), (size_t)(b - a));
  }
  return DCP_OK;
}

dcp_status dcpi_load_file_of(dcp_meta *m, const dcp_storage_ref *ref, const char **name,
                             dcpi_err *err) {
  if (dcp_meta_file(m, ref->file, name))
    return dcpi_fail(err, DCP_ECORRUPT, "metadata names data file %u, which it lacks", ref->file);
  return DCP_OK;
}

/* Whether an overlap can be read straight into its destination: raw
 * blocks, one contiguous run, starting on a block boundary and ending on
 * one or at the item's end (so the blocks read are exactly the bytes
 * copied, and each can be verified in place). */
static bool direct_ok(const dcpi_overlap *ov, const dcp_storage_ref *ref) {
  uint64_t bs = ref->block_size, first = (uint64_t)ov->src_first, last = (uint64_t)ov->src_last;
  return ref->codec == DCP_CODEC_NONE && dcpi_overlap_run_count(ov) == 1 && first % bs == 0 &&
         (last % bs == 0 || last == ref->raw_length) && last > first;
}

dcp_status dcpi_load_saved_of(dcp_meta *m, const dcp_state *st, const dcpi_overlap *ov,
                              dcp_chunk_info *ci, const char **file, dcpi_err *err) {
  const dcpi_tensor_item *t = &st->tensors[st->chunks[ov->dest_chunk].tensor];
  size_t ti;
  dcp_status rc = dcp_meta_find_tensor(m, t->fqn, &ti);
  if (!rc) rc = dcp_meta_chunk(m, ti, ov->saved_chunk, ci);
  if (rc) return dcpi_fail(err, rc, "tensor '%s': saved chunk %u unavailable", t->fqn, ov->saved_chunk);
  return dcpi_load_file_of(m, &ci->ref, file, err);
}

static dcp_status read_overlap(dcpi_block_reader *br, dcp_meta *m, const dcp_state *st,
                               const dcpi_overlap *ov, dcpi_err *err) {
  const dcpi_chunk_item *dest = &st->chunks[ov->dest_chunk];
  const dcpi_tensor_item *t = &st->tensors[dest->tensor];
  dcp_chunk_info ci;
  const char *file;
  dcp_status rc = dcpi_load_saved_of(m, st, ov, &ci, &file, err);
  if (rc) return rc;
  char what[512], box[256];
  snprintf(what, sizeof what, "tensor '%.200s' chunk %s", t->fqn,
           dcpi_box_str(ci.box.ndim, ci.box.offset, ci.box.size, box, sizeof box));
  if (direct_ok(ov, &ci.ref)) {
    dcpi_run_iter it;
    dcpi_run run;
    dcpi_run_iter_init(&it, ov);
    dcpi_run_iter_next(&it, &run);
    return dcpi_block_read_into(br, file, &ci.ref, (uint64_t)run.src_off,
                                (uint64_t)(run.src_off + run.len), (uint8_t *)dest->data + run.dest_off,
                                what, err);
  }
  dcpi_overlap_sink os = {ov, dest->data};
  return dcpi_block_read(br, file, &ci.ref, (uint64_t)ov->src_first, (uint64_t)ov->src_last,
                         what, dcpi_load_copy_runs, &os, err);
}

/* Announce overlaps [a, b) of a chunk (except those skip flags) to the
 * block reader, so that those adjacent in one data file are fetched in one
 * read. */
static dcp_status prefetch_overlaps(dcpi_block_reader *br, dcp_meta *m, const dcp_state *st,
                                    const dcpi_load_plan *plan, size_t a, size_t b,
                                    const uint8_t *skip, dcpi_err *err) {
  size_t n = 0;
  uint32_t *pick = malloc((b - a) * sizeof *pick);
  for (size_t i = a; pick && i < b; i++)
    if (!skip || !skip[i]) pick[n++] = (uint32_t)i;
  dcpi_block_req *reqs = malloc((n ? n : 1) * sizeof *reqs);
  dcp_storage_ref *refs = malloc((n ? n : 1) * sizeof *refs);
  dcp_status rc = pick && reqs && refs ? DCP_OK : dcpi_fail(err, DCP_ENOMEM, "out of memory");
  for (size_t i = 0; !rc && i < n; i++) {
    const dcpi_overlap *ov = &plan->overlaps[pick[i]];
    dcp_chunk_info ci;
    const char *file;
    if (!(rc = dcpi_load_saved_of(m, st, ov, &ci, &file, err))) {
      refs[i] = ci.ref;
      reqs[i] = (dcpi_block_req){file, &refs[i], (uint64_t)ov->src_first, (uint64_t)ov->src_last};
    }
  }
  if (!rc && n > 1) rc = dcpi_block_prefetch(br, reqs, n, err);
  free(pick);
  free(reqs);
  free(refs);
  return rc;
}

dcp_status dcpi_load_read_chunk(dcpi_block_reader *br, dcp_meta *m, const dcp_state *st,
                                const dcpi_load_plan *plan, size_t chunk, const uint8_t *skip,
                                uint64_t *bytes, dcpi_err *err) {
  size_t a = plan->chunk_first[chunk], b = plan->chunk_first[chunk + 1];
  dcp_status rc = b - a > 1 ? prefetch_overlaps(br, m, st, plan, a, b, skip, err) : DCP_OK;
  uint64_t done = 0;
  for (size_t i = a; !rc && i < b; i++) {
    if (skip && skip[i]) continue; /* a share group brings it */
    rc = read_overlap(br, m, st, &plan->overlaps[i], err);
    done += (uint64_t)plan->overlaps[i].bytes;
  }
  dcpi_block_prefetch_drop(br);
  if (bytes) *bytes = done;
  return rc;
}

/* ---- running a schedule --------------------------------------------------- */

typedef struct exec {
  /* fixed while the thread runs */
  dcp_meta *m;
  const dcp_state *st;
  const dcpi_load_plan *plan;
  const dcpi_load_sched *sc;
  dcpi_block_reader *br;
  size_t *runits; /* the units this rank reads for, in schedule order */
  size_t nr;
  uint32_t *own;  /* the chunks it reads for itself */
  size_t nown;
  int64_t max_inflight;
  dcp_ctx *ctx;         /* for DCP_PHASE_LOAD_READ reports */
  uint64_t total;       /* the bytes of runits and own */
  /* shared, under mu */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  size_t read_done;     /* runits[0, read_done) are read */
  int64_t read_bytes;   /* their bytes */
  int64_t sent_bytes;   /* bytes of those the caller has broadcast */
  bool exited, stop;
  /* the reader's own (read by the caller after the join) */
  dcp_status rs;
  dcpi_err rerr;
  uint64_t payload;
  size_t own_next;
} exec;

/* Read one chunk unless an earlier read failed (then nothing more is read:
 * the load is failing, only the broadcasts still have to happen). */
static void read_one(exec *x, uint32_t chunk) {
  if (x->rs) return;
  uint64_t done = 0;
  x->rs = dcpi_load_read_chunk(x->br, x->m, x->st, x->plan, chunk, x->sc->skip, &done, &x->rerr);
  if (x->rs) return;
  x->payload += done;
  dcpi_progress(x->ctx, DCP_PHASE_LOAD_READ, x->payload, x->total);
}

static void read_unit(exec *x, const dcpi_bcast_unit *u) {
  for (size_t i = 0; i < u->count; i++) read_one(x, x->sc->items[u->first + i]);
}

static void *reader_main(void *arg) {
  exec *x = arg;
  pthread_mutex_lock(&x->mu);
  for (size_t k = 0; k < x->nr && !x->stop; k++) {
    const dcpi_bcast_unit *u = &x->sc->units[x->runits[k]];
    /* wait for room: nothing in flight, or this unit fits the bound */
    for (;;) {
      int64_t inflight = x->read_bytes - x->sent_bytes;
      if (x->stop || inflight == 0 || inflight + u->bytes <= x->max_inflight) break;
      if (x->own_next < x->nown) { /* fill the wait with a chunk of our own */
        uint32_t c = x->own[x->own_next++];
        pthread_mutex_unlock(&x->mu);
        read_one(x, c);
        pthread_mutex_lock(&x->mu);
      } else {
        pthread_cond_wait(&x->cv, &x->mu);
      }
    }
    if (x->stop) break;
    pthread_mutex_unlock(&x->mu);
    read_unit(x, u);
    pthread_mutex_lock(&x->mu);
    x->read_done = k + 1;
    x->read_bytes += u->bytes;
    pthread_cond_broadcast(&x->cv);
  }
  while (!x->stop && x->own_next < x->nown) {
    uint32_t c = x->own[x->own_next++];
    pthread_mutex_unlock(&x->mu);
    read_one(x, c);
    pthread_mutex_lock(&x->mu);
  }
  x->exited = true;
  pthread_cond_broadcast(&x->cv);
  pthread_mutex_unlock(&x->mu);
  return NULL;
}

/* Broadcast unit u (k: its index among the units this rank reads, when it
 * is the reader). */
static dcp_status bcast_unit(dcpi_rt *rt, exec *x, const dcpi_bcast_unit *u, uint8_t *pack,
                             dcpi_load_counts *counts) {
  const dcpi_chunk_item *chunks = x->st->chunks;
  bool reader = u->reader == rt->ctx->rank;
  void *buf = u->packed ? (void *)pack : chunks[x->sc->items[u->first]].data;
  if (u->packed && reader)
    for (size_t i = 0, at = 0; i < u->count; i++) {
      const dcpi_chunk_item *c = &chunks[x->sc->items[u->first + i]];
      memcpy(pack + at, c->data, (size_t)c->nbytes);
      at += (size_t)c->nbytes;
    }
  dcp_status rc = dcpi_rt_group_bcast(rt, u->members, u->nmembers, buf, (size_t)u->bytes,
                                     u->reader);
  if (rc) return rc;
  if (u->packed && !reader)
    for (size_t i = 0, at = 0; i < u->count; i++) {
      const dcpi_chunk_item *c = &chunks[x->sc->items[u->first + i]];
      memcpy(c->data, pack + at, (size_t)c->nbytes);
      at += (size_t)c->nbytes;
    }
  if (reader)
    counts->sent += (uint64_t)u->bytes;
  else
    counts->recv += (uint64_t)u->bytes;
  return DCP_OK;
}

/* Pipelined: the reader thread reads while this thread broadcasts each
 * unit once its reader (this rank or another) has it. Returns false when
 * no thread could be started (nothing has happened then), else true with
 * the collective's status in *cs. */
static bool run_threaded(dcpi_rt *rt, exec *x, dcpi_load_counts *counts, dcp_status *cs) {
  if (pthread_mutex_init(&x->mu, NULL)) return false;
  pthread_t tid;
  if (pthread_cond_init(&x->cv, NULL)) {
    pthread_mutex_destroy(&x->mu);
    return false;
  }
  if (pthread_create(&tid, NULL, reader_main, x)) {
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    return false;
  }
  const dcpi_load_sched *sc = x->sc;
  *cs = DCP_OK;
  size_t k = 0;
  for (size_t i = 0; i < sc->nunits && !*cs; i++) {
    const dcpi_bcast_unit *u = &sc->units[i];
    bool reader = u->reader == rt->ctx->rank;
    if (reader) {
      pthread_mutex_lock(&x->mu);
      while (x->read_done <= k && !x->exited) pthread_cond_wait(&x->cv, &x->mu);
      pthread_mutex_unlock(&x->mu);
    }
    *cs = bcast_unit(rt, x, u, sc->pack, counts);
    if (reader) {
      pthread_mutex_lock(&x->mu);
      x->sent_bytes += u->bytes;
      k++;
      pthread_cond_broadcast(&x->cv);
      pthread_mutex_unlock(&x->mu);
    }
  }
  pthread_mutex_lock(&x->mu);
  if (*cs) x->stop = true; /* a collective failed: the load is over */
  pthread_cond_broadcast(&x->cv);
  pthread_mutex_unlock(&x->mu);
  pthread_join(tid, NULL);
  pthread_cond_destroy(&x->cv);
  pthread_mutex_destroy(&x->mu);
  return true;
}

/* Read-then-broadcast: everything this rank reads, then the units. */
static dcp_status run_serial(dcpi_rt *rt, exec *x, dcpi_load_counts *counts) {
  const dcpi_load_sched *sc = x->sc;
  for (size_t k = 0; k < x->nr; k++) read_unit(x, &sc->units[x->runits[k]]);
  for (size_t i = 0; i < x->nown; i++) read_one(x, x->own[i]);
  dcp_status cs = DCP_OK;
  for (size_t i = 0; i < sc->nunits && !cs; i++) cs = bcast_unit(rt, x, &sc->units[i], sc->pack, counts);
  return cs;
}

/* Where a chunk's reads start in storage: (data file, byte offset). */
typedef struct file_pos {
  uint64_t file, off;
  uint32_t chunk;
} file_pos;

static int cmp_file_pos(const void *pa, const void *pb) {
  const file_pos *a = pa, *b = pb;
  if (a->file != b->file) return a->file < b->file ? -1 : 1;
  if (a->off != b->off) return a->off < b->off ? -1 : 1;
  return (a->chunk > b->chunk) - (a->chunk < b->chunk);
}

/* Order the chunks a rank reads for itself by where their first overlap
 * lies in storage, so that a rank reading its own data file reads it front
 * to back (sequential reads keep the kernel's read-ahead going; the save
 * wrote them in another order than the state lists them). Chunks whose
 * saved chunk cannot be found go last, in state order, for their read to
 * report. Best effort: without memory the order stays. */
static void sort_by_file(const exec *x, uint32_t *own, size_t n) {
  file_pos *p = n > 1 ? malloc(n * sizeof *p) : NULL;
  if (!p) return;
  for (size_t i = 0; i < n; i++) {
    p[i] = (file_pos){UINT64_MAX, 0, own[i]};
    for (size_t k = x->plan->chunk_first[own[i]]; k < x->plan->chunk_first[own[i] + 1]; k++) {
      dcp_chunk_info ci;
      const char *file;
      dcpi_err ignored;
      if ((x->sc->skip && x->sc->skip[k]) ||
          dcpi_load_saved_of(x->m, x->st, &x->plan->overlaps[k], &ci, &file, &ignored))
        continue;
      p[i].file = ci.ref.file;
      p[i].off = ci.ref.offset + (uint64_t)x->plan->overlaps[k].src_first;
      break;
    }
  }
  dcpi_sort(p, n, sizeof *p, cmp_file_pos);
  for (size_t i = 0; i < n; i++) own[i] = p[i].chunk;
  free(p);
}

/* x's lists: the units this rank reads for (x->runits) and the chunks it
 * reads for itself (x->own, *own_tmp when the schedule brought no memory
 * for it), and the bytes of both. */
static dcp_status exec_lists(dcpi_rt *rt, exec *x, uint32_t **own_tmp) {
  const dcpi_load_sched *sc = x->sc;
  const dcp_state *st = x->st;
  /* With broadcasts to run, the schedule brought the working memory
   * (allocated before its agreement); without, a failure here is local. */
  x->runits = sc->runits;
  x->own = sc->own;
  if (sc->nunits && (!x->runits || !x->own || !sc->pack))
    return dcpi_fail(&rt->err, DCP_EINVAL, "read dedup: a schedule without working memory");
  if (!x->own && !(x->own = *own_tmp = malloc((st->nchunks ? st->nchunks : 1) * sizeof *x->own)))
    return dcpi_fail(&rt->err, DCP_ENOMEM, "out of memory");
  for (size_t u = 0; u < sc->nunits; u++)
    if (sc->units[u].reader == rt->ctx->rank) x->runits[x->nr++] = u;
  for (size_t c = 0; c < st->nchunks; c++)
    if (sc->role[c] == DCPI_CHUNK_OWN && st->chunks[c].nbytes > 0) x->own[x->nown++] = (uint32_t)c;
  for (size_t k = 0; k < x->nr; k++) {
    const dcpi_bcast_unit *u = &sc->units[x->runits[k]];
    for (size_t i = 0; i < u->count; i++)
      x->total += (uint64_t)st->chunks[sc->items[u->first + i]].nbytes;
  }
  for (size_t i = 0; i < x->nown; i++) x->total += (uint64_t)st->chunks[x->own[i]].nbytes;
  sort_by_file(x, x->own, x->nown);
  return DCP_OK;
}

dcp_status dcpi_load_exec(dcpi_rt *rt, dcp_meta *m, const dcp_state *st,
                          const dcpi_load_plan *plan, const dcpi_load_sched *sc,
                          dcpi_block_reader *br, bool pipeline, uint64_t max_inflight,
                          dcpi_load_counts *counts) {
  memset(counts, 0, sizeof *counts);
  exec x = {.m = m, .st = st, .plan = plan, .sc = sc, .br = br, .ctx = rt->ctx,
            .max_inflight = max_inflight > INT64_MAX ? INT64_MAX : (int64_t)max_inflight};
  dcpi_err_clear(&x.rerr);
  uint32_t *own_tmp = NULL;
  dcp_status cs = exec_lists(rt, &x, &own_tmp);
  /* the share groups first: they complete chunks that are read or
   * broadcast below */
  if (!cs) cs = dcpi_load_share_exec(rt, m, st, plan, sc, br, counts, &x.rs, &x.rerr);
  if (!cs) {
    x.payload = counts->payload;
    bool threaded = pipeline && sc->nunits > 0 && (x.nr > 0 || x.nown > 0) &&
                    run_threaded(rt, &x, counts, &cs);
    if (!threaded) cs = run_serial(rt, &x, counts);
    counts->payload = x.payload;
  }
  free(own_tmp);
  if (cs) return cs; /* its message is in rt->err */
  if (x.rs) rt->err = x.rerr;
  return x.rs;
}
