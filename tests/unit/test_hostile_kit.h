/* test_hostile_kit.h — fixture and helpers shared by the hostile-input
 * tests (test_hostile_*.c): a scratch directory with a posix context,
 * small file helpers, a crafted-metadata assembler (valid checksums,
 * hostile content) and message checks. Header-only (static), so each test
 * file stays one executable. */
#ifndef DCP_TEST_HOSTILE_KIT_H
#define DCP_TEST_HOSTILE_KIT_H

#include "testutil.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/wire.h"
#include "metadata/format.h"

typedef struct hk_fixture {
  char dir[PATH_MAX];          /* scratch root, removed by teardown */
  char ckpt[PATH_MAX + 16];    /* dir/ckpt */
  char outside[PATH_MAX + 16]; /* dir/outside: a file no save may touch */
  char plugins[PATH_MAX];
  dcp_ctx *ctx;                /* rank 0 of 1, posix storage */
} hk_fixture;

static inline int hk_setup(void **state) {
  hk_fixture *f = calloc(1, sizeof *f);
  assert_non_null(f);
  f->ctx = tu_scratch_ctx("dcp-hostile", f->dir, sizeof f->dir, f->plugins, sizeof f->plugins);
  snprintf(f->ckpt, sizeof f->ckpt, "%s/ckpt", f->dir);
  snprintf(f->outside, sizeof f->outside, "%s/outside", f->dir);
  *state = f;
  return 0;
}

static inline int hk_teardown(void **state) {
  hk_fixture *f = *state;
  dcp_ctx_free(f->ctx);
  tu_remove_tree(f->dir);
  free(f);
  return 0;
}

/* dir/name into buf. */
static inline const char *hk_path(char *buf, size_t cap, const char *dir, const char *name) {
  snprintf(buf, cap, "%s/%s", dir, name);
  return buf;
}

/* Write len bytes to path (created or truncated). */
static inline void hk_write_file(const char *path, const void *data, size_t len) {
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, len, fp), len);
  assert_int_equal(fclose(fp), 0);
}

/* The whole file at path (malloc'd, *len bytes), or NULL when absent. */
static inline uint8_t *hk_read_file(const char *path, size_t *len) {
  *len = 0;
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
  assert_non_null(p);
  assert_int_equal(fread(p, 1, (size_t)n, fp), (size_t)n);
  fclose(fp);
  *len = (size_t)n;
  return p;
}

/* 1 when the file at path holds exactly the NUL-terminated text. */
static inline int hk_file_is(const char *path, const char *text) {
  size_t len = 0;
  uint8_t *p = hk_read_file(path, &len);
  int same = p && len == strlen(text) && memcmp(p, text, len) == 0;
  free(p);
  return same;
}

/* 1 when path exists (a link is not followed). */
static inline int hk_exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* Assert that the context's last message contains every needle (a NULL
 * ends the list), printing it otherwise. */
static inline void hk_msg_has(dcp_ctx *ctx, const char *n1, const char *n2, const char *n3) {
  const char *msg = dcp_ctx_last_error(ctx);
  if (getenv("HK_VERBOSE")) fprintf(stderr, "# %s\n", msg); /* to read the messages */
  const char *needles[3] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (needles[i] && !strstr(msg, needles[i])) {
      fprintf(stderr, "message '%s' lacks '%s'\n", msg, needles[i]);
      fail();
    }
}

/* ---- crafted metadata ----------------------------------------------------- */

/* One tensor with one chunk (and optionally one bytes item), every field
 * settable, assembled with valid section and file checksums so that only
 * the decoder's content checks can refuse it. */
typedef struct hk_craft {
  const char *fqn;
  size_t fqn_len;      /* bytes of fqn (may hold a NUL) */
  const char *bkey;    /* NULL: no bytes item */
  size_t bkey_len;
  uint8_t dtype;       /* DCP_U8 unless set */
  uint32_t ndim;       /* 1 unless set; above 4 only the first 4 dims are written */
  uint64_t shape[4];   /* [4] unless set */
  uint64_t box_off[4]; /* [0] unless set */
  uint64_t box_size[4];/* the shape unless set */
} hk_craft;

/* Append a string table entry of n bytes. */
static inline void hk_w_str(dcpi_wbuf *w, const char *s, size_t n) {
  dcpi_w_varint(w, n);
  dcpi_w_bytes(w, s, n);
  dcpi_w_u8(w, 0);
}

/* Header, directory, sections and trailer around the section bodies. */
static inline uint8_t *hk_assemble(dcpi_wbuf *sec, size_t *len) {
  uint8_t head[DCPI_SECTIONS_START] = {0};
  memcpy(head, DCPI_MAGIC, DCPI_MAGIC_LEN);
  dcpi_put_u32(head + 8, DCPI_FORMAT_VERSION);
  dcpi_put_u32(head + 24, DCPI_SEC_COUNT);
  uint64_t pos = DCPI_SECTIONS_START;
  static const uint8_t none[1];
  for (unsigned i = 1; i <= DCPI_SEC_COUNT; i++) {
    uint8_t *d = head + DCPI_HEADER_SIZE + (i - 1) * DCPI_DIRENT_SIZE;
    dcpi_put_u32(d, i);
    dcpi_put_u64(d + 8, pos);
    dcpi_put_u64(d + 16, sec[i].len);
    dcpi_put_u64(d + 24, XXH3_64bits(sec[i].len ? (const void *)sec[i].data : none, sec[i].len));
    pos += sec[i].len;
  }
  dcpi_put_u64(head + 16, pos + DCPI_TRAILER_SIZE);
  dcpi_wbuf out = {0};
  dcpi_w_bytes(&out, head, sizeof head);
  for (unsigned i = 1; i <= DCPI_SEC_COUNT; i++) dcpi_w_bytes(&out, sec[i].data, sec[i].len);
  dcpi_w_u64(&out, XXH3_64bits(out.data, out.len));
  assert_int_equal(out.status, DCP_OK);
  for (unsigned i = 1; i <= DCPI_SEC_COUNT; i++) dcpi_wbuf_free(&sec[i]);
  *len = out.len;
  return out.data;
}

/* The chunk list of c's single chunk: explicit size and offset, the file's
 * default coding, zero checksums. */
static inline void hk_chunk_list(const hk_craft *c, dcpi_wbuf *list) {
  uint64_t raw = dcp_dtype_size((dcp_dtype)c->dtype);
  for (uint32_t d = 0; d < c->ndim && d < 4; d++) raw *= c->box_size[d]; /* may wrap: then refused */
  dcpi_w_u8(list, 0); /* format 3: the list's form, LISTED */
  dcpi_w_u8(list, DCPI_RF_FILE_SAME | DCPI_RF_OFF_END | DCPI_RF_CODING_DEFAULT);
  for (uint32_t d = 0; d < c->ndim && d < 4; d++) dcpi_w_varint(list, c->box_size[d]);
  for (uint32_t d = 0; d < c->ndim && d < 4; d++) dcpi_w_varint(list, c->box_off[d]);
  /* block size 16; at least one checksum so the list has the minimum
   * chunk size (an empty or huge box fails before its blocks count) */
  uint64_t blocks = raw > 0 && raw < 64 ? (raw + 15) / 16 : 4;
  for (uint64_t b = 0; b < blocks; b++) dcpi_w_u64(list, 0);
}

/* Encode c: strings {"data-00000.dcp", fqn, key?}, file 0, world 1. */
static inline uint8_t *hk_craft_meta(const hk_craft *c, size_t *len) {
  dcpi_wbuf sec[DCPI_SEC_COUNT + 1];
  memset(sec, 0, sizeof sec);
  dcpi_wbuf *w = &sec[DCPI_SEC_STRINGS];
  dcpi_w_varint(w, c->bkey ? 3 : 2);
  hk_w_str(w, "data-00000.dcp", 14);
  hk_w_str(w, c->fqn, c->fqn_len);
  if (c->bkey) hk_w_str(w, c->bkey, c->bkey_len);
  w = &sec[DCPI_SEC_FILES];
  dcpi_w_varint(w, 1);
  dcpi_w_varint(w, 0);
  dcpi_w_u8(w, DCP_CODEC_NONE);
  dcpi_w_varint(w, 16);
  w = &sec[DCPI_SEC_MESHES];
  dcpi_w_varint(w, 1); /* world */
  dcpi_w_varint(w, 0); /* meshes */
  dcpi_wbuf list = {0};
  hk_chunk_list(c, &list);
  w = &sec[DCPI_SEC_TENSORS];
  dcpi_w_varint(w, 1);
  dcpi_w_varint(w, 1); /* fqn */
  dcpi_w_u8(w, c->dtype);
  dcpi_w_varint(w, c->ndim);
  for (uint32_t d = 0; d < c->ndim && d < 4; d++) dcpi_w_varint(w, c->shape[d]);
  dcpi_w_varint(w, 0); /* no mesh */
  dcpi_w_varint(w, 1); /* one chunk */
  dcpi_w_varint(w, list.len);
  dcpi_w_u64(w, XXH3_64bits(list.data, list.len));
  dcpi_w_bytes(&sec[DCPI_SEC_CHUNKS], list.data, list.len);
  dcpi_wbuf_free(&list);
  w = &sec[DCPI_SEC_BYTES];
  dcpi_w_varint(w, c->bkey ? 1 : 0);
  if (c->bkey) {
    dcpi_w_varint(w, 2);
    dcpi_w_u8(w, DCP_SCOPE_REPLICATED);
    dcpi_w_varint(w, 0);
    dcpi_w_u8(w, DCPI_RF_FILE_SAME | DCPI_RF_OFF_END | DCPI_RF_CODING_DEFAULT);
    dcpi_w_varint(w, 1); /* raw length */
    dcpi_w_u64(w, 0);
  }
  dcpi_w_varint(&sec[DCPI_SEC_KV], 0);
  w = &sec[DCPI_SEC_SAVE]; /* no identity, one file of unknown length */
  for (int i = 0; i < 16; i++) dcpi_w_u8(w, 0);
  dcpi_w_varint(w, 0); /* generation */
  dcpi_w_varint(w, 0); /* whole checkpoint */
  dcpi_w_varint(w, 1);
  dcpi_w_varint(w, 0);
  return hk_assemble(sec, len);
}

/* A baseline craft: tensor "t" U8 [4], one chunk [0, 4). */
static inline hk_craft hk_base(void) {
  hk_craft c;
  memset(&c, 0, sizeof c);
  c.fqn = "t";
  c.fqn_len = 1;
  c.dtype = DCP_U8;
  c.ndim = 1;
  c.shape[0] = 4;
  c.box_size[0] = 4;
  return c;
}

/* Open the crafted metadata on ctx; when it opens, *chunk gets the status
 * of reading its chunk (DCP_OK otherwise). Returns the open status. */
static inline dcp_status hk_open_craft(dcp_ctx *ctx, const hk_craft *c, dcp_status *chunk) {
  size_t len;
  uint8_t *buf = hk_craft_meta(c, &len);
  dcp_meta *m = NULL;
  dcp_status rc = dcp_meta_open_memory(ctx, buf, len, &m);
  *chunk = DCP_OK;
  if (rc == DCP_OK) {
    dcp_chunk_info ci;
    *chunk = dcp_meta_chunk(m, 0, 0, &ci);
  }
  dcp_meta_free(m);
  free(buf);
  return rc;
}

#endif
