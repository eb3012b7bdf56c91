/* fc_crash.c — the power-loss model: the fault plugin's journal
 * (fc_journal.h) replayed into the state of the disk a power cut after
 * operation k could leave.
 *
 * The model, per file (an inode: renames move it between names):
 *  - what a file_sync made durable stays: the content at its last sync;
 *  - each write since then is, independently, kept whole, dropped, torn
 *    (a prefix of random length kept) or zero-filled (the file grew but
 *    the data never came: the region reads as zeros);
 *  - a write open that truncated the file since its last sync may or may
 *    not have reached the disk: if not, the old synced content is the
 *    base and the writes of both epochs land on it (a sector-level
 *    adversary; a real file system does no worse).
 * Per directory (a root: the checkpoint directory of a backend):
 *  - what sync_dir made durable stays: the names and the inodes they
 *    point to at the root's last sync_dir (by any process);
 *  - the creates, renames and removes since then are either a prefix of
 *    them (an ordered journal, like ext4's) or each one independently kept
 *    or rolled back; a rename is atomic either way: the inode is under
 *    the old name or the new one, never both nor neither;
 *  - a root the journal saw created (the backend's open made it) exists
 *    after its first sync_dir (the journal commit that sync makes carries
 *    the mkdir too, as on ext4 and xfs); before that it may be lost with
 *    everything in it. With strict_mkdir it is never durable: nothing in
 *    the storage ABI syncs the parent, so by POSIX the directory itself
 *    may vanish however much was synced inside it.
 * Everything not touched since its last sync is as it was. The journal
 * starts from empty roots (the campaign gives every run fresh ones). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fc.h"
#include "fc_journal.h"

#define GROW(v, n, cap)                                              \
  do {                                                               \
    if ((n) == (cap)) {                                              \
      (cap) = (cap) ? 2 * (cap) : 16;                                \
      (v) = realloc((v), (cap) * sizeof *(v));                       \
      FC_CHECK((v), "out of memory");                                \
    }                                                                \
  } while (0)

/* ---- the journal ------------------------------------------------------------- */

typedef struct jrec {
  uint32_t type;
  uint64_t seq, handle, offset, len;
  char *root, *name, *name2; /* NUL-terminated copies ("" when absent) */
  const uint8_t *data;       /* into the raw journal */
} jrec;

struct fc_journal {
  uint8_t *raw;
  size_t rawlen;
  jrec *v;
  size_t n, cap;
  uint64_t ops;
};

static char *dup_len(const uint8_t *p, size_t n) {
  char *s = malloc(n + 1);
  FC_CHECK(s, "out of memory");
  memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

fc_journal *fc_journal_load(const char *path) {
  fc_journal *j = calloc(1, sizeof *j);
  FC_CHECK(j, "out of memory");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  FC_CHECK(fd >= 0, "journal %s: %s", path, strerror(errno));
  struct stat sb;
  FC_CHECK(fstat(fd, &sb) == 0, "journal %s: %s", path, strerror(errno));
  j->rawlen = (size_t)sb.st_size;
  j->raw = malloc(j->rawlen ? j->rawlen : 1);
  FC_CHECK(j->raw, "out of memory");
  for (size_t got = 0; got < j->rawlen;) {
    ssize_t r = pread(fd, j->raw + got, j->rawlen - got, (off_t)got);
    FC_CHECK(r > 0, "journal %s: %s", path, r < 0 ? strerror(errno) : "short read");
    got += (size_t)r;
  }
  close(fd);
  for (size_t at = 0; at < j->rawlen;) {
    fcj_rec h;
    FC_CHECK(j->rawlen - at >= sizeof h, "journal %s: a torn record at %zu", path, at);
    memcpy(&h, j->raw + at, sizeof h);
    size_t body = (size_t)h.n_root + h.n_name + h.n_name2 + (size_t)h.len;
    FC_CHECK(h.magic == FCJ_MAGIC && h.type > 0 && h.type < FCJ_TYPE_END &&
                 j->rawlen - at - sizeof h >= body,
             "journal %s: a bad record at %zu", path, at);
    const uint8_t *p = j->raw + at + sizeof h;
    GROW(j->v, j->n, j->cap);
    jrec *r = &j->v[j->n++];
    *r = (jrec){.type = h.type, .seq = h.seq, .handle = h.handle, .offset = h.offset,
                .len = h.len};
    r->root = dup_len(p, h.n_root), p += h.n_root;
    r->name = dup_len(p, h.n_name), p += h.n_name;
    r->name2 = dup_len(p, h.n_name2), p += h.n_name2;
    r->data = p;
    if (h.type != FCJ_MARK) {
      FC_CHECK(h.seq == j->ops + 1, "journal %s: operation %llu after %llu", path,
               (unsigned long long)h.seq, (unsigned long long)j->ops);
      j->ops = h.seq;
    }
    at += sizeof h + body;
  }
  return j;
}

void fc_journal_free(fc_journal *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n; i++) free(j->v[i].root), free(j->v[i].name), free(j->v[i].name2);
  free(j->v);
  free(j->raw);
  free(j);
}

uint64_t fc_journal_ops(const fc_journal *j) { return j->ops; }

/* Whether record r is part of the state at cut: operations up to cut, and
 * the marks written before operation cut began (a mark after the cut's
 * operation was never written: its process was gone). */
static bool visible(const jrec *r, uint64_t cut) {
  if (cut == FC_CUT_ALL) return true;
  return r->type == FCJ_MARK ? r->seq < cut : r->seq <= cut;
}

size_t fc_journal_marks(const fc_journal *j, uint64_t cut, const char **texts,
                        uint64_t *seqs, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < j->n; i++) {
    const jrec *r = &j->v[i];
    if (r->type != FCJ_MARK || !visible(r, cut)) continue;
    if (n < cap) texts[n] = (const char *)r->data, seqs[n] = r->seq;
    n++;
  }
  return n;
}

static const char *const type_names[FCJ_TYPE_END] = {"?", "mkdir", "open-w", "write", "fsync",
                                                     "rename", "remove", "syncdir", "mark"};

/* The last path component of root (for messages). */
static const char *leaf(const char *root) {
  const char *s = strrchr(root, '/');
  return s ? s + 1 : root;
}

void fc_journal_describe(const fc_journal *j, uint64_t seq, char *out, size_t cap) {
  if (seq == 0 || seq == FC_CUT_ALL) {
    snprintf(out, cap, "%s", seq ? "after the last operation and every return" : "before any operation");
    return;
  }
  for (size_t i = 0; i < j->n; i++) {
    const jrec *r = &j->v[i];
    if (r->type == FCJ_MARK || r->seq != seq) continue;
    snprintf(out, cap, "op %llu/%llu %s %s%s%s%s%s", (unsigned long long)seq,
             (unsigned long long)j->ops, type_names[r->type], leaf(r->root),
             r->name[0] ? "/" : "", r->name, r->name2[0] ? " -> " : "", r->name2);
    return;
  }
  snprintf(out, cap, "op %llu (not in the journal)", (unsigned long long)seq);
}

bool fc_journal_removed_after(const fc_journal *j, uint64_t cut, const char *root,
                              uint64_t after_seq, bool (*match)(const char *name)) {
  for (size_t i = 0; i < j->n; i++) {
    const jrec *r = &j->v[i];
    if (r->type == FCJ_REMOVE && visible(r, cut) && r->seq > after_seq &&
        strcmp(r->root, root) == 0 && match(r->name))
      return true;
  }
  return false;
}

void fc_journal_prepare(const char *path) {
  char st[4300];
  snprintf(st, sizeof st, "%s.state", path);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FC_CHECK(fd >= 0, "journal %s: %s", path, strerror(errno));
  close(fd);
  fd = open(st, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FC_CHECK(fd >= 0 && ftruncate(fd, sizeof(fcj_state)) == 0, "journal state %s: %s", st,
           strerror(errno));
  close(fd);
}

bool fc_journal_power_off(const char *path) {
  char st[4300];
  snprintf(st, sizeof st, "%s.state", path);
  int fd = open(st, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  fcj_state s = {0};
  ssize_t r = pread(fd, &s, sizeof s, 0);
  close(fd);
  return r == (ssize_t)sizeof s && s.dead;
}

bool fc_journal_mark(const char *path, const char *text) {
  char st[4300];
  snprintf(st, sizeof st, "%s.state", path);
  int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
  int sfd = open(st, O_RDWR | O_CLOEXEC);
  FC_CHECK(fd >= 0 && sfd >= 0, "journal %s: %s", path, strerror(errno));
  fcj_state *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
  FC_CHECK(s != MAP_FAILED, "journal state %s: %s", st, strerror(errno));
  close(sfd);
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  bool alive = !__atomic_load_n(&s->dead, __ATOMIC_SEQ_CST);
  if (alive) {
    size_t len = strlen(text) + 1;
    fcj_rec h = {.type = FCJ_MARK, .seq = __atomic_load_n(&s->ops, __ATOMIC_SEQ_CST), .len = len};
    FC_CHECK(fcj_append(fd, &h, NULL, NULL, NULL, text) == 0, "journal %s: %s", path,
             strerror(errno));
  }
  flock(fd, LOCK_UN);
  munmap(s, sizeof *s);
  close(fd);
  return alive;
}

/* ---- the model of the disk ---------------------------------------------------- */

typedef struct bytes {
  uint8_t *p;
  size_t n, cap;
} bytes;

static void bytes_put(bytes *b, uint64_t off, const uint8_t *data, size_t len, bool zeros) {
  size_t end = (size_t)off + len;
  if (end > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < end) cap *= 2;
    b->p = realloc(b->p, cap);
    FC_CHECK(b->p, "out of memory");
    b->cap = cap;
  }
  if (off > b->n) memset(b->p + b->n, 0, (size_t)off - b->n);
  if (zeros)
    memset(b->p + off, 0, len);
  else if (len)
    memcpy(b->p + off, data, len);
  if (end > b->n) b->n = end;
}

static void bytes_copy(bytes *dst, const bytes *src) {
  dst->n = 0;
  if (src->n) bytes_put(dst, 0, src->p, src->n, false);
}

typedef struct wr {
  uint64_t off, len;
  const uint8_t *data;
} wr;

typedef struct wrs {
  wr *v;
  size_t n, cap;
} wrs;

typedef struct inode {
  bytes cur, syn;  /* all writes so far; the content at the last file_sync */
  bool trunc;      /* truncated by a write open since the last sync */
  wrs pre, pend;   /* writes since the last sync: before that truncation, after it */
  const char *first_name;
} inode;

typedef struct bind {
  const char *name;
  size_t ino;
} bind;

typedef struct binds {
  bind *v;
  size_t n, cap;
} binds;

typedef struct dop {
  uint32_t type; /* FCJ_OPENW (a create), FCJ_RENAME, FCJ_REMOVE */
  const char *name, *name2;
  size_t ino;
} dop;

typedef struct root {
  const char *path;
  bool created, mk_synced;
  binds cur, dur;
  dop *pend;
  size_t npend, pcap;
} root;

typedef struct hmap {
  uint64_t handle;
  size_t ino;
} hmap;

typedef struct model {
  inode *inos;
  size_t ninos, icap;
  root *roots;
  size_t nroots, rcap;
  hmap *hs;
  size_t nh, hcap;
} model;

static root *root_of(model *m, const char *path) {
  for (size_t i = 0; i < m->nroots; i++)
    if (strcmp(m->roots[i].path, path) == 0) return &m->roots[i];
  GROW(m->roots, m->nroots, m->rcap);
  root *r = &m->roots[m->nroots++];
  memset(r, 0, sizeof *r);
  r->path = path;
  return r;
}

static bind *find(binds *b, const char *name) {
  for (size_t i = 0; i < b->n; i++)
    if (strcmp(b->v[i].name, name) == 0) return &b->v[i];
  return NULL;
}

static void bind_set(binds *b, const char *name, size_t ino) {
  bind *x = find(b, name);
  if (x) {
    x->ino = ino;
    return;
  }
  GROW(b->v, b->n, b->cap);
  b->v[b->n++] = (bind){name, ino};
}

/* Remove name (when it points to ino, or always when ino is SIZE_MAX). */
static void bind_del(binds *b, const char *name, size_t ino) {
  for (size_t i = 0; i < b->n; i++)
    if (strcmp(b->v[i].name, name) == 0 && (ino == SIZE_MAX || b->v[i].ino == ino)) {
      b->v[i] = b->v[--b->n];
      return;
    }
}

static void binds_copy(binds *dst, const binds *src) {
  dst->n = 0;
  for (size_t i = 0; i < src->n; i++) {
    GROW(dst->v, dst->n, dst->cap);
    dst->v[dst->n++] = src->v[i];
  }
}

static void push_dop(root *r, uint32_t type, const char *name, const char *name2, size_t ino) {
  GROW(r->pend, r->npend, r->pcap);
  r->pend[r->npend++] = (dop){type, name, name2, ino};
}

static void push_wr(wrs *w, wr x) {
  GROW(w->v, w->n, w->cap);
  w->v[w->n++] = x;
}

static size_t ino_of_handle(const model *m, uint64_t h) {
  for (size_t i = 0; i < m->nh; i++)
    if (m->hs[i].handle == h) return m->hs[i].ino;
  FC_CHECK(false, "journal: a write to unknown file handle %llu", (unsigned long long)h);
  return 0;
}

static void replay(model *m, const fc_journal *j, uint64_t cut) {
  for (size_t i = 0; i < j->n; i++) {
    const jrec *x = &j->v[i];
    if (x->type == FCJ_MARK || !visible(x, cut)) continue;
    root *r = root_of(m, x->root);
    switch (x->type) {
      case FCJ_MKDIR:
        r->created = true;
        break;
      case FCJ_OPENW: {
        bind *b = find(&r->cur, x->name);
        size_t id;
        if (b) {
          /* O_TRUNC of the same inode */
          id = b->ino;
          inode *f = &m->inos[id];
          for (size_t k = 0; k < f->pend.n; k++) push_wr(&f->pre, f->pend.v[k]);
          f->pend.n = 0;
          f->trunc = true;
          f->cur.n = 0;
        } else {
          GROW(m->inos, m->ninos, m->icap);
          id = m->ninos++;
          memset(&m->inos[id], 0, sizeof m->inos[id]);
          m->inos[id].first_name = x->name;
          bind_set(&r->cur, x->name, id);
          push_dop(r, FCJ_OPENW, x->name, NULL, id);
        }
        GROW(m->hs, m->nh, m->hcap);
        m->hs[m->nh++] = (hmap){x->seq, id};
        break;
      }
      case FCJ_WRITE: {
        inode *f = &m->inos[ino_of_handle(m, x->handle)];
        FC_CHECK(x->offset == f->cur.n, "journal: a write at %llu of %s, which holds %zu bytes",
                 (unsigned long long)x->offset, x->name, f->cur.n);
        bytes_put(&f->cur, x->offset, x->data, (size_t)x->len, false);
        push_wr(&f->pend, (wr){x->offset, x->len, x->data});
        break;
      }
      case FCJ_FSYNC: {
        inode *f = &m->inos[ino_of_handle(m, x->handle)];
        bytes_copy(&f->syn, &f->cur);
        f->pre.n = f->pend.n = 0;
        f->trunc = false;
        break;
      }
      case FCJ_RENAME: {
        bind *b = find(&r->cur, x->name);
        FC_CHECK(b, "journal: rename of %s/%s, which does not exist", r->path, x->name);
        size_t id = b->ino;
        bind_del(&r->cur, x->name, SIZE_MAX);
        bind_set(&r->cur, x->name2, id);
        push_dop(r, FCJ_RENAME, x->name, x->name2, id);
        break;
      }
      case FCJ_REMOVE: {
        bind *b = find(&r->cur, x->name);
        FC_CHECK(b, "journal: removal of %s/%s, which does not exist", r->path, x->name);
        size_t id = b->ino;
        bind_del(&r->cur, x->name, SIZE_MAX);
        push_dop(r, FCJ_REMOVE, x->name, NULL, id);
        break;
      }
      case FCJ_SYNCDIR:
        binds_copy(&r->dur, &r->cur);
        r->npend = 0;
        if (r->created) r->mk_synced = true;
        break;
    }
  }
}

static void model_free(model *m) {
  for (size_t i = 0; i < m->ninos; i++) {
    inode *f = &m->inos[i];
    free(f->cur.p), free(f->syn.p), free(f->pre.v), free(f->pend.v);
  }
  for (size_t i = 0; i < m->nroots; i++) {
    free(m->roots[i].cur.v), free(m->roots[i].dur.v), free(m->roots[i].pend);
  }
  free(m->inos), free(m->roots), free(m->hs);
}

/* ---- a crash ------------------------------------------------------------------ */

/* The unsynced writes of a list onto b, each kept, dropped, torn or
 * zero-filled. */
static void apply_writes(bytes *b, const wrs *w, fc_rng *rng) {
  for (size_t k = 0; k < w->n; k++) {
    const wr *x = &w->v[k];
    uint64_t c = fc_range(rng, 0, 9);
    if (c < 4) {
      bytes_put(b, x->off, x->data, (size_t)x->len, false);
      continue;
    }
    if (c < 6) continue; /* dropped */
    if (c < 8) {         /* torn */
      size_t keep = x->len ? (size_t)fc_range(rng, 0, x->len - 1) : 0;
      bytes_put(b, x->off, x->data, keep, false);
    } else { /* the size reached the disk, the data did not */
      bytes_put(b, x->off, NULL, (size_t)x->len, true);
    }
  }
}

/* What inode f holds after the crash; *changed when that is not what was
 * written. */
static void crash_content(const inode *f, fc_rng *rng, bytes *out, bool *changed) {
  out->n = 0;
  if (!rng) {
    bytes_copy(out, &f->cur);
    return;
  }
  bool trunc_done = f->trunc && fc_range(rng, 0, 1);
  if (!trunc_done) {
    bytes_copy(out, &f->syn);
    apply_writes(out, &f->pre, rng);
  }
  apply_writes(out, &f->pend, rng);
  *changed = out->n != f->cur.n || (out->n && memcmp(out->p, f->cur.p, out->n));
}

static void mkdirs(const char *path) {
  char tmp[4300];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      FC_CHECK(mkdir(tmp, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", tmp, strerror(errno));
      *p = '/';
    }
  FC_CHECK(mkdir(tmp, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", tmp, strerror(errno));
}

static void write_bytes(const char *path, const bytes *b) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FC_CHECK(fd >= 0, "create %s: %s", path, strerror(errno));
  for (size_t at = 0; at < b->n;) {
    ssize_t w = write(fd, b->p + at, b->n - at);
    FC_CHECK(w > 0, "write %s: %s", path, strerror(errno));
    at += (size_t)w;
  }
  FC_CHECK(close(fd) == 0, "close %s", path);
}

#define DESC_ADD(...)                                                              \
  do {                                                                             \
    size_t used_ = strlen(desc);                                                   \
    if (used_ < cap) snprintf(desc + used_, cap - used_, __VA_ARGS__);             \
  } while (0)

void fc_crash_build(const fc_journal *j, uint64_t cut, const char *base, const char *out,
                    fc_rng *rng, bool strict_mkdir, char *desc, size_t cap) {
  model m = {0};
  replay(&m, j, cut);
  desc[0] = '\0';
  fc_journal_describe(j, cut, desc, cap);
  DESC_ADD("; %s", rng ? "power lost" : "process gone, disk as written");
  size_t nbase = strlen(base);
  mkdirs(out);
  bytes content = {0};
  binds ns = {0};
  for (size_t i = 0; i < m.nroots; i++) {
    root *r = &m.roots[i];
    FC_CHECK(strncmp(r->path, base, nbase) == 0 && r->path[nbase] == '/',
             "journal: root %s is not under %s", r->path, base);
    const char *rel = r->path + nbase + 1;
    bool durable_dir = !r->created || (r->mk_synced && !strict_mkdir);
    if (rng && !durable_dir && fc_range(rng, 0, 1) == 0) {
      DESC_ADD("; %s lost (its creation never made durable)", rel);
      continue;
    }
    char dir[4300];
    snprintf(dir, sizeof dir, "%s/%s", out, rel);
    mkdirs(dir);
    if (!rng) {
      binds_copy(&ns, &r->cur);
    } else {
      binds_copy(&ns, &r->dur);
      bool ordered = fc_range(rng, 0, 1);
      size_t upto = ordered ? (size_t)fc_range(rng, 0, r->npend) : r->npend, kept = 0;
      for (size_t k = 0; k < upto; k++) {
        const dop *d = &r->pend[k];
        if (!ordered && fc_range(rng, 0, 1)) continue;
        kept++;
        if (d->type == FCJ_OPENW) bind_set(&ns, d->name, d->ino);
        if (d->type == FCJ_RENAME) bind_del(&ns, d->name, d->ino), bind_set(&ns, d->name2, d->ino);
        if (d->type == FCJ_REMOVE) bind_del(&ns, d->name, d->ino);
      }
      if (r->npend)
        DESC_ADD("; %s: %zu of %zu unsynced directory operations kept (%s)", rel, kept, r->npend,
                 ordered ? "a prefix" : "independently");
    }
    for (size_t k = 0; k < ns.n; k++) {
      bool changed = false;
      crash_content(&m.inos[ns.v[k].ino], rng, &content, &changed);
      if (changed) DESC_ADD("; %s/%s lost unsynced data", rel, ns.v[k].name);
      char path[4600];
      snprintf(path, sizeof path, "%s/%s", dir, ns.v[k].name);
      write_bytes(path, &content);
    }
  }
  free(content.p);
  free(ns.v);
  model_free(&m);
}

/* ---- trees -------------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

void fc_rmtree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0 && errno == ENOENT) return;
  FC_CHECK(nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0, "cannot remove %s: %s", path,
           strerror(errno));
}

/* Relative paths of everything under dir ("d/" for directories). */
typedef struct plist {
  char **v;
  size_t n, cap;
} plist;

static void walk(const char *top, const char *rel, plist *out) {
  char dir[4300];
  snprintf(dir, sizeof dir, "%s%s%s", top, rel[0] ? "/" : "", rel);
  DIR *d = opendir(dir);
  FC_CHECK(d, "opendir %s: %s", dir, strerror(errno));
  struct dirent *de;
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    /* the directory lease and its temporaries go through an auxiliary
     * handle the journal does not record (fault_storage.c) */
    if (!strncmp(de->d_name, ".lock", 5)) continue;
    char sub[4300], full[4600];
    snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
    snprintf(full, sizeof full, "%s/%s", top, sub);
    struct stat sb;
    FC_CHECK(lstat(full, &sb) == 0, "lstat %s: %s", full, strerror(errno));
    GROW(out->v, out->n, out->cap);
    char *e = malloc(strlen(sub) + 2);
    FC_CHECK(e, "out of memory");
    sprintf(e, "%s%s", sub, S_ISDIR(sb.st_mode) ? "/" : "");
    out->v[out->n++] = e;
    if (S_ISDIR(sb.st_mode)) walk(top, sub, out);
  }
  closedir(d);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool same_file(const char *a, const char *b) {
  char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  bool same = false;
  if (fa && fb) {
    FILE *sa = open_memstream(&x, &nx), *sb = open_memstream(&y, &ny);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fa)) > 0) fwrite(buf, 1, n, sa);
    while ((n = fread(buf, 1, sizeof buf, fb)) > 0) fwrite(buf, 1, n, sb);
    fclose(sa), fclose(sb);
    same = nx == ny && (nx == 0 || memcmp(x, y, nx) == 0);
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  free(x), free(y);
  return same;
}

bool fc_tree_same(const char *a, const char *b, char *why, size_t cap) {
  plist pa = {0}, pb = {0};
  walk(a, "", &pa);
  walk(b, "", &pb);
  qsort(pa.v, pa.n, sizeof *pa.v, cmp_str);
  qsort(pb.v, pb.n, sizeof *pb.v, cmp_str);
  bool same = true;
  size_t i = 0, k = 0;
  while (same && (i < pa.n || k < pb.n)) {
    int c = i == pa.n ? 1 : k == pb.n ? -1 : strcmp(pa.v[i], pb.v[k]);
    if (c) {
      snprintf(why, cap, "%s only in %s", c < 0 ? pa.v[i] : pb.v[k], c < 0 ? a : b);
      same = false;
      break;
    }
    size_t len = strlen(pa.v[i]);
    if (pa.v[i][len - 1] != '/') {
      char fa[4600], fb[4600];
      snprintf(fa, sizeof fa, "%s/%s", a, pa.v[i]);
      snprintf(fb, sizeof fb, "%s/%s", b, pb.v[k]);
      if (!same_file(fa, fb)) {
        snprintf(why, cap, "%s differs", pa.v[i]);
        same = false;
      }
    }
    i++, k++;
  }
  for (i = 0; i < pa.n; i++) free(pa.v[i]);
  for (k = 0; k < pb.n; k++) free(pb.v[k]);
  free(pa.v), free(pb.v);
  return same;
}
