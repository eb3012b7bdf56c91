/* test_hostile_fs.c — hostile file-system state and hostile worlds:
 *  - symbolic links planted inside a checkpoint (or export) directory are
 *    never followed, for writes or reads: the operation fails naming the
 *    link and the file it points to is untouched; the checkpoint directory
 *    itself may be (or pass through) a link;
 *  - worlds that do not match: a config the collective contradicts, ranks
 *    outside the world, and per-rank metadata (coordination "none") that is
 *    missing, duplicated, from different worlds or claims another rank's
 *    items;
 *  - bytes items whose scopes clash between ranks, or whose REPLICATED
 *    copies differ (merge), and the same clash in a coordinated save of two
 *    forked ranks over the file collective. */
#include "test_hostile_kit.h"
#include "ckpt_files.h"
#include "runtime/files.h"

#include <sys/wait.h>

#include "metadata/meta.h"

static const char PRECIOUS[] = "precious bytes outside the checkpoint";

/* A small state on ctx: tensor "w" F32 [8] whole, bytes "step". */
static dcp_state *small_state(dcp_ctx *ctx, float *w, uint64_t *step) {
  dcp_state *st;
  int64_t shape[1] = {8}, zero[1] = {0};
  for (int i = 0; i < 8; i++) w[i] = (float)i * 0.5f;
  *step = 77;
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", zero, shape, w), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, step, 8), DCP_OK);
  return st;
}

static dcp_status save_small(dcp_ctx *ctx, const char *path) {
  float w[8];
  uint64_t step;
  dcp_state *st = small_state(ctx, w, &step);
  dcp_status rc = dcp_save(ctx, st, path, NULL);
  dcp_state_free(st);
  return rc;
}

/* Load "w" and "step" from path and check their values. */
static dcp_status load_small(dcp_ctx *ctx, const char *path) {
  float w[8] = {0}, want[8];
  uint64_t step = 0, want_step;
  dcp_state *st = small_state(ctx, want, &want_step);
  dcp_state_free(st);
  int64_t shape[1] = {8}, zero[1] = {0};
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_F32, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", zero, shape, w), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "step", DCP_SCOPE_REPLICATED, &step, 8), DCP_OK);
  dcp_status rc = dcp_load(ctx, st, path, NULL);
  dcp_state_free(st);
  if (rc == DCP_OK) {
    assert_memory_equal(w, want, sizeof w);
    assert_int_equal(step, want_step);
  }
  return rc;
}


/* Plant ckpt/name as a symlink to f->outside (which holds PRECIOUS). */
static void plant_link(hk_fixture *f, const char *dir, const char *name) {
  char p[PATH_MAX + 32];
  hk_write_file(f->outside, PRECIOUS, strlen(PRECIOUS));
  mkdir(dir, 0777);
  assert_int_equal(symlink(f->outside, hk_path(p, sizeof p, dir, name)), 0);
}

/* A save meets a symlink at the metadata or the directory's lease: it
 * fails naming the link, writes nothing through it, and commits nothing.
 * One planted at a name a save of 0.2 would have written (its data file,
 * its temporary metadata) is a leftover now: a save's own names are
 * unpredictable (they carry its random id), so the save goes on and never
 * follows it. */
static void test_symlink_on_save(void **state) {
  hk_fixture *f = *state;
  const char *names[] = {".metadata", ".lock", "data-00000.dcp", ".metadata.tmp"};
  char p[PATH_MAX + 32];
  for (size_t i = 0; i < 4; i++) {
    plant_link(f, f->ckpt, names[i]);
    bool refused = i < 2;
    assert_int_equal(save_small(f->ctx, f->ckpt), refused ? DCP_EIO : DCP_OK);
    if (refused) hk_msg_has(f->ctx, names[i], "symbolic link", NULL);
    assert_true(hk_file_is(f->outside, PRECIOUS));
    struct stat sb;
    if (refused) { /* the link itself is left alone */
      assert_int_equal(lstat(hk_path(p, sizeof p, f->ckpt, names[i]), &sb), 0);
      assert_true(S_ISLNK(sb.st_mode));
    }
    if (i > 0) assert_true(hk_exists(hk_path(p, sizeof p, f->ckpt, ".metadata")) != refused);
    if (!refused) assert_int_equal(load_small(f->ctx, f->ckpt), DCP_OK);
    tu_remove_tree(f->ckpt);
  }
}

/* A hard link planted at the data file or the temporary metadata (or a
 * snapshot made with `cp -l`): the save writes a fresh file under that
 * name and the other name keeps its bytes. */
static void test_hardlink_on_save(void **state) {
  hk_fixture *f = *state;
  const char *names[] = {"data-00000.dcp", ".metadata.tmp"};
  char p[PATH_MAX + 64];
  for (size_t i = 0; i < 2; i++) {
    tu_remove_tree(f->ckpt);
    hk_write_file(f->outside, PRECIOUS, strlen(PRECIOUS));
    assert_int_equal(mkdir(f->ckpt, 0777), 0);
    assert_int_equal(link(f->outside, hk_path(p, sizeof p, f->ckpt, names[i])), 0);
    assert_int_equal(save_small(f->ctx, f->ckpt), DCP_OK);
    assert_true(hk_file_is(f->outside, PRECIOUS));
    assert_int_equal(load_small(f->ctx, f->ckpt), DCP_OK);
  }
  /* overwriting a checkpoint whose files a snapshot shares */
  char snap[PATH_MAX + 32], cmd[3 * PATH_MAX];
  hk_path(snap, sizeof snap, f->dir, "snap");
  snprintf(cmd, sizeof cmd, "cp -al '%s' '%s'", f->ckpt, snap);
  assert_int_equal(system(cmd), 0);
  size_t before_len = 0, after_len = 0;
  assert_true(ck_data_file(snap, 0, p, sizeof p));
  uint8_t *before = hk_read_file(p, &before_len);
  float w[8];
  uint64_t step;
  dcp_state *st = small_state(f->ctx, w, &step);
  w[3] = -1; /* different data */
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  assert_int_equal(dcp_save(f->ctx, st, f->ckpt, &o), DCP_OK);
  dcp_state_free(st);
  uint8_t *after = hk_read_file(p, &after_len);
  assert_int_equal(before_len, after_len);
  assert_memory_equal(before, after, before_len);
  assert_int_equal(load_small(f->ctx, snap), DCP_OK); /* the snapshot still loads */
  free(before);
  free(after);
}

/* A load, a metadata view and a verify meet a symlinked .metadata or data
 * file (pointing at a perfectly valid copy outside): all refuse it. */
static void test_symlink_on_load(void **state) {
  hk_fixture *f = *state;
  char p[PATH_MAX + 32];
  for (size_t i = 0; i < 2; i++) {
    tu_remove_tree(f->ckpt);
    assert_int_equal(save_small(f->ctx, f->ckpt), DCP_OK);
    assert_int_equal(load_small(f->ctx, f->ckpt), DCP_OK);
    char data[256] = ".metadata";
    if (i) assert_int_equal(ck_find(f->ckpt, "data-00000.", ".dcp", data, sizeof data), 1);
    const char *names[] = {".metadata", data};
    hk_path(p, sizeof p, f->ckpt, names[i]);
    assert_int_equal(rename(p, f->outside), 0);
    assert_int_equal(symlink(f->outside, p), 0);
    size_t before_len = 0;
    uint8_t *before = hk_read_file(f->outside, &before_len);
    assert_int_equal(load_small(f->ctx, f->ckpt), DCP_EIO);
    hk_msg_has(f->ctx, names[i], "is a symbolic link", NULL);
    dcp_verify_report rep = {.struct_size = sizeof rep};
    assert_true(dcp_is_error(dcp_verify(f->ctx, f->ckpt, &rep)));
    assert_non_null(strstr(dcp_ctx_last_error(f->ctx), "symbolic link"));
    dcp_meta *m = NULL;
    dcp_status ms = dcp_meta_open(f->ctx, f->ckpt, &m);
    if (i == 0) {
      assert_int_equal(ms, DCP_EIO);
      hk_msg_has(f->ctx, "symbolic link", NULL, NULL);
    }
    dcp_meta_free(m);
    size_t after_len = 0;
    uint8_t *after = hk_read_file(f->outside, &after_len);
    assert_int_equal(before_len, after_len);
    assert_memory_equal(before, after, before_len);
    free(before);
    free(after);
  }
}

/* A fifo or a directory planted where .metadata or a data file should
 * be: refused as "not a regular file" without blocking on the fifo. */
static void test_special_files(void **state) {
  hk_fixture *f = *state;
  char p[PATH_MAX + 32];
  for (size_t i = 0; i < 2; i++)
    for (int kind = 0; kind < 2; kind++) {
      tu_remove_tree(f->ckpt);
      assert_int_equal(save_small(f->ctx, f->ckpt), DCP_OK);
      char data[256] = ".metadata";
      if (i) assert_int_equal(ck_find(f->ckpt, "data-00000.", ".dcp", data, sizeof data), 1);
      const char *names[] = {".metadata", data};
      hk_path(p, sizeof p, f->ckpt, names[i]);
      assert_int_equal(unlink(p), 0);
      assert_int_equal(kind ? mkdir(p, 0777) : mkfifo(p, 0666), 0);
      assert_int_equal(load_small(f->ctx, f->ckpt), DCP_EIO);
      hk_msg_has(f->ctx, names[i], "not a regular file", NULL);
    }
}

/* The checkpoint path itself may be a link, or pass through one (a
 * cluster's /ckpt -> /mnt/lustre/...): saving and loading work, and the
 * files land in the real directory. */
static void test_symlinked_checkpoint_dir(void **state) {
  hk_fixture *f = *state;
  char real[PATH_MAX + 32], link[PATH_MAX + 32], via[PATH_MAX + 64], p[PATH_MAX + 96];
  hk_path(real, sizeof real, f->dir, "real");
  hk_path(link, sizeof link, f->dir, "link");
  assert_int_equal(mkdir(real, 0777), 0);
  assert_int_equal(symlink(real, link), 0);
  assert_int_equal(save_small(f->ctx, link), DCP_OK); /* the path is the link */
  assert_int_equal(load_small(f->ctx, link), DCP_OK);
  assert_true(hk_exists(hk_path(p, sizeof p, real, ".metadata")));
  hk_path(via, sizeof via, link, "inner"); /* the path passes through it */
  assert_int_equal(save_small(f->ctx, via), DCP_OK);
  assert_int_equal(load_small(f->ctx, via), DCP_OK);
  hk_path(p, sizeof p, real, "inner/.metadata");
  assert_true(hk_exists(p));
}

/* Export meets a link at its temporary name (refused, target untouched)
 * or at its final name (replaced by the rename: the link itself goes, the
 * target stays untouched). */
static void test_symlink_on_export(void **state) {
  hk_fixture *f = *state;
  char out[PATH_MAX + 32], p[PATH_MAX + 64];
  hk_path(out, sizeof out, f->dir, "export");
  assert_int_equal(save_small(f->ctx, f->ckpt), DCP_OK);
  plant_link(f, out, "model.safetensors.tmp");
  assert_int_equal(dcp_export_safetensors(f->ctx, f->ckpt, out, 0), DCP_EIO);
  hk_msg_has(f->ctx, "model.safetensors.tmp", "is a symbolic link", NULL);
  assert_true(hk_file_is(f->outside, PRECIOUS));
  assert_false(hk_exists(hk_path(p, sizeof p, out, "model.safetensors")));
  assert_int_equal(unlink(hk_path(p, sizeof p, out, "model.safetensors.tmp")), 0);
  assert_int_equal(symlink(f->outside, hk_path(p, sizeof p, out, "model.safetensors")), 0);
  assert_int_equal(dcp_export_safetensors(f->ctx, f->ckpt, out, 0), DCP_OK);
  struct stat sb;
  assert_int_equal(lstat(p, &sb), 0);
  assert_true(S_ISREG(sb.st_mode));
  assert_true(hk_file_is(f->outside, PRECIOUS));
}

/* The sharedfs layout keeps files in hashed subdirectories (dNNN): links
 * planted at the buckets (all of them: a save's names, and so its buckets,
 * are unpredictable) are refused the same way, and the outside directory
 * stays empty. A link planted inside a bucket at a 0.2 data file name is a
 * leftover the save never writes through. */
static void test_symlink_sharedfs(void **state) {
  hk_fixture *f = *state;
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.storage = "sharedfs", cfg.storage_options = "direct=0", cfg.plugin_path = f->plugins;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  assert_int_equal(save_small(ctx, f->ckpt), DCP_OK);
  char bucket[16] = "", rel[PATH_MAX + 64], p[PATH_MAX + 64], cmd[3 * PATH_MAX];
  int found = 0;
  for (unsigned b = 0; b < 256; b++) { /* the data file is in one bucket */
    snprintf(rel, sizeof rel, "%s/d%03u", f->ckpt, b);
    found += ck_find(rel, "data-00000.", ".dcp", NULL, 0);
  }
  assert_int_equal(found, 1);
  char outdir[PATH_MAX + 32];
  hk_path(outdir, sizeof outdir, f->dir, "outdir");
  assert_int_equal(mkdir(outdir, 0777), 0);
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", f->ckpt, f->ckpt);
  assert_int_equal(system(cmd), 0);
  for (unsigned b = 0; b < 256; b++) {
    snprintf(bucket, sizeof bucket, "d%03u", b);
    assert_int_equal(symlink(outdir, hk_path(p, sizeof p, f->ckpt, bucket)), 0);
  }
  assert_int_equal(save_small(ctx, f->ckpt), DCP_EIO);
  hk_msg_has(ctx, "is a symbolic link", NULL, NULL);
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", outdir);
  assert_int_equal(system(cmd), 0); /* nothing was written through the links */
  snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s/d000'", f->ckpt, f->ckpt);
  assert_int_equal(system(cmd), 0);
  hk_write_file(f->outside, PRECIOUS, strlen(PRECIOUS));
  assert_int_equal(symlink(f->outside, hk_path(p, sizeof p, f->ckpt, "d000/data-00000.dcp")), 0);
  assert_int_equal(save_small(ctx, f->ckpt), DCP_OK);
  assert_true(hk_file_is(f->outside, PRECIOUS));
  assert_int_equal(load_small(ctx, f->ckpt), DCP_OK);
  dcp_ctx_free(ctx);
}

/* ---- worlds ------------------------------------------------------------ */

/* A detached rank of a world (no collective): saves with coordination
 * "none" (its own part of the checkpoint). */
static dcp_ctx *detached(hk_fixture *f, int32_t rank, int32_t world) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank, cfg.world_size = world, cfg.plugin_path = f->plugins;
  dcp_ctx *ctx;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_OK);
  return ctx;
}

/* Configs the world contradicts are refused when the context is made. */
static void test_world_config(void **state) {
  hk_fixture *f = *state;
  dcp_ctx_config cfg;
  dcp_ctx *ctx = NULL;
  dcp_ctx_config_init(&cfg);
  cfg.plugin_path = f->plugins;
  cfg.coll = "single";
  cfg.world_size = 2;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  assert_null(ctx);
  assert_non_null(strstr(dcp_ctx_create_error(), "world of one"));
  cfg.coll = NULL;
  cfg.rank = 2; /* rank index == world */
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  assert_non_null(strstr(dcp_ctx_create_error(), "rank 2 is not in a world of 2"));
  cfg.rank = -1;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
  cfg.rank = 0, cfg.world_size = 0;
  assert_int_equal(dcp_ctx_create(&cfg, &ctx), DCP_EINVAL);
}

/* The save_id of the uncoordinated saves below. */
static uint64_t g_save_id = 7;

/* Save rank `rank` of `world` (detached) into f->ckpt as save g_save_id:
 * tensor "w" U8 [2*world], this rank's two elements, per-rank bytes "rng";
 * plus a bytes item `key` in `scope` holding `value` when key is not NULL. */
static dcp_status save_none(hk_fixture *f, int32_t rank, int32_t world, const char *key,
                            dcp_scope scope, uint64_t value) {
  dcp_ctx *ctx = detached(f, rank, world);
  dcp_state *st;
  uint8_t w[2] = {(uint8_t)(10 * rank), (uint8_t)(10 * rank + 1)};
  uint64_t rng = 1000 + (uint64_t)rank;
  int64_t shape[1] = {2 * world}, off[1] = {2 * rank}, sz[1] = {2};
  assert_int_equal(dcp_state_create(ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_U8, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", off, sz, w), DCP_OK);
  assert_int_equal(dcp_state_add_bytes(st, "rng", DCP_SCOPE_PER_RANK, &rng, 8), DCP_OK);
  if (key) assert_int_equal(dcp_state_add_bytes(st, key, scope, &value, 8), DCP_OK);
  dcp_save_options o;
  dcp_save_options_init(&o);
  o.flags = DCP_SAVE_OVERWRITE;
  o.save_id = g_save_id;
  dcp_status rc = dcp_save(ctx, st, f->ckpt, &o);
  if (rc) fprintf(stderr, "save rank %d: %s\n", rank, dcp_ctx_last_error(ctx));
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  return rc;
}

/* Load "w" of a world of 2 (4 elements) on f->ctx, plus bytes `key`
 * (REPLICATED) when not NULL into *value. */
static dcp_status load_none(hk_fixture *f, const char *key, uint64_t *value) {
  uint8_t w[4];
  int64_t shape[1] = {4}, zero[1] = {0};
  dcp_state *st;
  assert_int_equal(dcp_state_create(f->ctx, &st), DCP_OK);
  assert_int_equal(dcp_state_add_tensor(st, "w", DCP_U8, 1, shape), DCP_OK);
  assert_int_equal(dcp_state_add_chunk(st, "w", zero, shape, w), DCP_OK);
  if (key) assert_int_equal(dcp_state_add_bytes(st, key, DCP_SCOPE_REPLICATED, value, 8), DCP_OK);
  dcp_status rc = dcp_load(f->ctx, st, f->ckpt, NULL);
  dcp_state_free(st);
  if (rc == DCP_OK) assert_true(w[0] == 0 && w[1] == 1 && w[2] == 10 && w[3] == 11);
  return rc;
}

/* Copy the file ckpt/from to ckpt/to. */
static void copy_in_ckpt(hk_fixture *f, const char *from, const char *to) {
  char a[PATH_MAX + 128], b[PATH_MAX + 128];
  size_t len = 0;
  uint8_t *p = hk_read_file(hk_path(a, sizeof a, f->ckpt, from), &len);
  assert_non_null(p);
  hk_write_file(hk_path(b, sizeof b, f->ckpt, to), p, len);
  free(p);
}

/* Remove the checkpoint directory. */
static void wipe(hk_fixture *f) { tu_remove_tree(f->ckpt); }

/* The name of rank's part of save g_save_id (seq 1) in a world. */
static void part_name(int32_t rank, int32_t world, char *out) {
  uint8_t id[16];
  char tag[DCPI_TAG_LEN + 1];
  dcpi_save_id_of_tag(g_save_id, world, id);
  dcpi_tag_of(id, tag);
  dcpi_name_part(out, rank, world, 1, tag);
}

/* Parts that are missing, from another world, from another save, or copied
 * under another rank's name: a load takes only the newest save that every
 * rank of its world committed, and refuses a part that is not what its
 * name says. */
static void test_rank_files(void **state) {
  hk_fixture *f = *state;
  g_save_id = 7;
  assert_int_equal(save_none(f, 0, 2, NULL, 0, 0), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_EINCOMPLETE); /* rank 1 missing */
  hk_msg_has(f->ctx, "world of 2", "(1)", "no complete checkpoint");
  assert_int_equal(save_none(f, 1, 2, NULL, 0, 0), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_OK);
  /* a stale rank 2 of a world of 3 next to the world of 2: another save,
   * incomplete, never mixed in */
  assert_int_equal(save_none(f, 2, 3, NULL, 0, 0), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_OK);
  /* rank 0 moves on to save 8, rank 1 does not: save 7 still loads */
  g_save_id = 8;
  assert_int_equal(save_none(f, 0, 2, NULL, 0, 0), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_OK);
  dcp_meta *m;
  dcp_save_identity id;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_OK);
  assert_int_equal(dcp_meta_identity(m, &id), DCP_OK);
  assert_int_equal(id.id[7], 7); /* the caller's save_id, in the clear */
  dcp_meta_free(m);
  /* rank 1's part from a world of 3 next to rank 0's of a world of 2 */
  wipe(f);
  g_save_id = 7;
  assert_int_equal(save_none(f, 0, 2, NULL, 0, 0), DCP_OK);
  assert_int_equal(save_none(f, 1, 3, NULL, 0, 0), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_EINCOMPLETE);
  /* rank 0's part copied under rank 1's name */
  wipe(f);
  assert_int_equal(save_none(f, 0, 2, NULL, 0, 0), DCP_OK);
  char from[DCPI_NAME_MAX], to[DCPI_NAME_MAX];
  part_name(0, 2, from);
  part_name(1, 2, to);
  copy_in_ckpt(f, from, to);
  assert_int_equal(load_none(f, NULL, NULL), DCP_ECORRUPT);
  hk_msg_has(f->ctx, to, "is not the part its name says", "rank 0");
}

/* Write rank 1's part of save g_save_id by hand: a world of 2 whose only
 * item is the per-rank bytes "rng" of rank `claimed`. */
static void forge_rank1(hk_fixture *f, int32_t claimed) {
  dcpi_md *md;
  dcpi_err err;
  uint32_t file;
  uint64_t ck = 0;
  uint8_t id[16];
  char tag[DCPI_TAG_LEN + 1], data[DCPI_NAME_MAX], part[DCPI_NAME_MAX];
  dcpi_save_id_of_tag(g_save_id, 2, id);
  dcpi_tag_of(id, tag);
  dcpi_name_data(data, 1, 1, tag);
  dcpi_name_part(part, 1, 2, 1, tag);
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, 2, &err), DCP_OK);
  assert_int_equal(dcpi_md_set_identity(md, id, 1, 1, &err), DCP_OK);
  assert_int_equal(dcpi_md_add_file(md, data, &file, &err), DCP_OK);
  dcp_storage_ref r = {.file = file, .block_size = 8, .stored_length = 8, .raw_length = 8,
                       .block_count = 1, .block_checksums = &ck};
  assert_int_equal(dcpi_md_add_bytes(md, "rng", DCP_SCOPE_PER_RANK, claimed, &r, &err), DCP_OK);
  void *enc;
  size_t len;
  assert_int_equal(dcpi_md_encode(md, &enc, &len, &err), DCP_OK);
  char p[2 * PATH_MAX];
  hk_write_file(hk_path(p, sizeof p, f->ckpt, part), enc, len);
  free(enc);
  dcpi_md_free(md);
}

/* A rank's metadata may hold only its own per-rank items: rank 1's file
 * claiming rank 0's "rng" is refused (it would shadow or duplicate it). */
static void test_rank_claims_other_rank(void **state) {
  hk_fixture *f = *state;
  assert_int_equal(save_none(f, 0, 2, NULL, 0, 0), DCP_OK);
  forge_rank1(f, 0);
  assert_int_equal(load_none(f, NULL, NULL), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "rank 1's metadata holds per-rank bytes item 'rng' of rank 0", NULL, NULL);
}

/* A per-rank metadata file whose fqn breaks the name rule (valid
 * checksums): the merge refuses it through the decoder, naming the file
 * and the section. */
static void test_rank_file_hostile_name(void **state) {
  hk_fixture *f = *state;
  hk_craft c = hk_base();
  c.fqn = "../../etc/w";
  c.fqn_len = strlen(c.fqn);
  size_t len;
  uint8_t *buf = hk_craft_meta(&c, &len);
  char p[PATH_MAX + 32];
  assert_int_equal(mkdir(f->ckpt, 0777), 0);
  hk_write_file(hk_path(p, sizeof p, f->ckpt, "0.metadata"), buf, len);
  free(buf);
  dcp_meta *m = NULL;
  assert_int_equal(dcp_meta_open(f->ctx, f->ckpt, &m), DCP_ECORRUPT);
  hk_msg_has(f->ctx, "0.metadata", "tensors section", "contains \"..\" at byte 0");
  assert_null(m);
}

/* A 0.metadata naming a world of 2^31-1 (every other rank missing): the
 * load says so after a few probes instead of stat-ing two billion names. */
static void test_rank_file_huge_world(void **state) {
  hk_fixture *f = *state;
  dcpi_md *md;
  dcpi_err err;
  assert_int_equal(dcpi_md_create(&md), DCP_OK);
  assert_int_equal(dcpi_md_set_world(md, INT32_MAX, &err), DCP_OK);
  void *enc;
  size_t len;
  assert_int_equal(dcpi_md_encode(md, &enc, &len, &err), DCP_OK);
  char p[PATH_MAX + 32];
  assert_int_equal(mkdir(f->ckpt, 0777), 0);
  hk_write_file(hk_path(p, sizeof p, f->ckpt, "0.metadata"), enc, len);
  free(enc);
  dcpi_md_free(md);
  assert_int_equal(load_none(f, NULL, NULL), DCP_EINCOMPLETE);
  hk_msg_has(f->ctx, "world of 2147483647", "at least 9 rank(s)", "(1, 2, 3, 4, 5, 6, 7, 8, ...)");
}

/* Scopes across per-rank metadata: a key REPLICATED on one rank and
 * PER_RANK on the other, and REPLICATED copies that differ, are
 * DCP_ESCOPE; identical copies load. */
static void test_scope_clash_merge(void **state) {
  hk_fixture *f = *state;
  uint64_t v = 0;
  assert_int_equal(save_none(f, 0, 2, "opt", DCP_SCOPE_REPLICATED, 5), DCP_OK);
  assert_int_equal(save_none(f, 1, 2, "opt", DCP_SCOPE_PER_RANK, 5), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_ESCOPE);
  hk_msg_has(f->ctx, "'opt'", "REPLICATED", "PER_RANK");
  wipe(f);
  assert_int_equal(save_none(f, 0, 2, "opt", DCP_SCOPE_PER_RANK, 5), DCP_OK);
  assert_int_equal(save_none(f, 1, 2, "opt", DCP_SCOPE_REPLICATED, 5), DCP_OK);
  assert_int_equal(load_none(f, NULL, NULL), DCP_ESCOPE);
  wipe(f);
  assert_int_equal(save_none(f, 0, 2, "step", DCP_SCOPE_REPLICATED, 41), DCP_OK);
  assert_int_equal(save_none(f, 1, 2, "step", DCP_SCOPE_REPLICATED, 42), DCP_OK);
  assert_int_equal(load_none(f, "step", &v), DCP_ESCOPE);
  hk_msg_has(f->ctx, "replicated bytes item 'step' differs between rank 0", "rank 1",
             "different contents");
  wipe(f);
  assert_int_equal(save_none(f, 0, 2, "step", DCP_SCOPE_REPLICATED, 42), DCP_OK);
  assert_int_equal(save_none(f, 1, 2, "step", DCP_SCOPE_REPLICATED, 42), DCP_OK);
  assert_int_equal(load_none(f, "step", &v), DCP_OK);
  assert_int_equal(v, 42);
}

/* What the two forked ranks of a coordinated save disagree on. */
typedef enum clash {
  CLASH_SCOPE,    /* "opt" REPLICATED on rank 0, PER_RANK on rank 1 */
  CLASH_OVERLAP,  /* "w" [4]: rank 0 holds [0,3), rank 1 [2,4) */
  CLASH_SHAPE,    /* "w": [4] on rank 0, [5] on rank 1 */
  CLASH_COVERAGE, /* "w" [4]: rank 0 [0,1), rank 1 [2,4): element 1 nobody's */
  CLASH_REPLICA,  /* "opt" REPLICATED on both ranks, 9 on rank 0, 10 on rank 1 */
} clash;

/* Rank `rank`'s items for clash k. */
static int clash_items(dcp_state *st, int32_t rank, clash k, uint64_t *v, uint8_t *w) {
  int64_t shape[1] = {k == CLASH_SHAPE && rank ? 5 : 4};
  int64_t off[1] = {rank ? 2 : 0}, sz[1] = {rank ? 2 : (k == CLASH_OVERLAP ? 3 : 2)};
  if (k == CLASH_COVERAGE && !rank) sz[0] = 1;
  if (k == CLASH_SCOPE)
    return dcp_state_add_bytes(st, "opt", rank ? DCP_SCOPE_PER_RANK : DCP_SCOPE_REPLICATED, v, 8);
  if (k == CLASH_REPLICA) {
    *v += (uint64_t)rank;
    return dcp_state_add_bytes(st, "opt", DCP_SCOPE_REPLICATED, v, 8);
  }
  return dcp_state_add_tensor(st, "w", DCP_U8, 1, shape) ||
         dcp_state_add_chunk(st, "w", off, sz, w);
}

/* One forked rank of a coordinated save over the file collective with
 * clash k. Exit code 0 when its save returned `want` naming the item. */
static int clash_rank(hk_fixture *f, int32_t rank, const char *rdv, clash k, dcp_status want) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.rank = rank, cfg.world_size = 2, cfg.plugin_path = f->plugins;
  cfg.coll = "file", cfg.rendezvous = rdv, cfg.timeout_ms = 30000;
  dcp_ctx *ctx;
  if (dcp_ctx_create(&cfg, &ctx)) return 10;
  dcp_state *st = NULL;
  uint64_t v = 9;
  uint8_t w[4] = {1, 2, 3, 4};
  int rc = dcp_state_create(ctx, &st) || clash_items(st, rank, k, &v, w) ? 11 : 0;
  dcp_status s = rc ? DCP_OK : dcp_save(ctx, st, f->ckpt, NULL);
  if (!rc && s != want) rc = 12;
  bool opt = k == CLASH_SCOPE || k == CLASH_REPLICA;
  if (!rc && !strstr(dcp_ctx_last_error(ctx), opt ? "'opt'" : "'w'")) rc = 13;
  if (rc) fprintf(stderr, "rank %d: rc %d, save %d: %s\n", rank, rc, s, dcp_ctx_last_error(ctx));
  else if (getenv("HK_VERBOSE")) fprintf(stderr, "# rank %d: %s\n", rank, dcp_ctx_last_error(ctx));
  dcp_state_free(st);
  dcp_ctx_free(ctx);
  return rc;
}

/* Run clash k on two forked ranks; both must get `want`, and nothing is
 * committed. */
static void run_clash(hk_fixture *f, clash k, dcp_status want) {
  char rdv[PATH_MAX + 32], p[PATH_MAX + 32], sub[16];
  snprintf(sub, sizeof sub, "rdv%d", (int)k);
  hk_path(rdv, sizeof rdv, f->dir, sub);
  assert_int_equal(mkdir(rdv, 0777), 0);
  fflush(NULL);
  pid_t kids[2];
  for (int32_t r = 0; r < 2; r++) {
    kids[r] = fork();
    assert_true(kids[r] >= 0);
    if (kids[r] == 0) _exit(clash_rank(f, r, rdv, k, want));
  }
  for (int r = 0; r < 2; r++) {
    int status;
    assert_int_equal(waitpid(kids[r], &status, 0), kids[r]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  assert_false(hk_exists(hk_path(p, sizeof p, f->ckpt, ".metadata")));
}

/* The same key REPLICATED on one rank and PER_RANK on another in a
 * coordinated save: every rank gets DCP_ESCOPE and nothing is committed. */
static void test_scope_clash_coordinated(void **state) {
  run_clash(*state, CLASH_SCOPE, DCP_ESCOPE);
}

/* A REPLICATED item whose copies differ between the ranks of a coordinated
 * save: only one copy would be written, so keeping it would be a silent
 * choice; rank 0 compares every holder's copy and the save fails on every
 * rank with DCP_ESCOPE naming the item and both ranks. */
static void test_replicas_differ_coordinated(void **state) {
  run_clash(*state, CLASH_REPLICA, DCP_ESCOPE);
}

/* Boxes of two ranks that partially overlap, shapes that differ, and
 * boxes that leave an element uncovered: every rank gets the planner's
 * status (DCP_EOVERLAP, DCP_EMISMATCH, DCP_EINCOMPLETE), nothing committed. */
static void test_box_clash_coordinated(void **state) {
  run_clash(*state, CLASH_OVERLAP, DCP_EOVERLAP);
  run_clash(*state, CLASH_SHAPE, DCP_EMISMATCH);
  run_clash(*state, CLASH_COVERAGE, DCP_EINCOMPLETE);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_symlink_on_save, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_replicas_differ_coordinated, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_hardlink_on_save, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_symlink_on_load, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_special_files, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_symlinked_checkpoint_dir, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_symlink_on_export, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_symlink_sharedfs, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_world_config, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_rank_files, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_rank_claims_other_rank, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_rank_file_hostile_name, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_rank_file_huge_world, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_scope_clash_merge, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_scope_clash_coordinated, hk_setup, hk_teardown),
      cmocka_unit_test_setup_teardown(test_box_clash_coordinated, hk_setup, hk_teardown),
  };
  return TU_RUN(tests, NULL, NULL);
}
