/* regions.c — building the campaign's region map (see regions.h). Data
 * regions come from the metadata view (every chunk's and bytes item's
 * stored range); metadata regions from the file's own header and directory,
 * laid out as docs/format.md describes. */
#include "regions.h"
#include "ckpt_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MD_HEADER 32u
#define MD_DIRENT 32u
#define MD_SECTIONS 8u /* at most: format version 1 has 7, version 2 has 8 */
#define MD_TRAILER 8u

/* Section names as the reader's messages spell them. */
static const char *const section_names[MD_SECTIONS] = {
    "strings section", "files section", "meshes section", "tensors section",
    "chunks section",  "bytes section", "key/value section", "save section"};

static uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

static uint32_t get32(const uint8_t *p) { return (uint32_t)get64(p) & 0xffffffffu; }

static int file_index(rg_map *map, cm_kind k, const char *dir, const char *name, bool meta) {
  for (int i = 0; i < map->nfiles; i++)
    if (map->files[i].kind == k && !strcmp(map->files[i].name, name)) return i;
  if (map->nfiles == RG_MAX_FILES) return -1;
  char path[4200];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (stat(path, &sb)) {
    fprintf(stderr, "corrupt campaign: %s is missing\n", path);
    return -1;
  }
  rg_file *f = &map->files[map->nfiles];
  *f = (rg_file){.kind = k, .meta = meta, .size = (uint64_t)sb.st_size};
  snprintf(f->name, sizeof f->name, "%s", name);
  return map->nfiles++;
}

static rg_region *add_region(rg_map *map, int file, uint64_t start, uint64_t end, rg_type type) {
  if (map->nregions == RG_MAX_REGIONS || end <= start) return NULL;
  rg_region *r = &map->regions[map->nregions++];
  *r = (rg_region){.file = file, .start = start, .end = end, .type = type};
  return r;
}

static void box_str(const dcp_box *b, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "[");
  for (uint32_t d = 0; d < b->ndim && n < cap; d++)
    n += (size_t)snprintf(out + n, cap - n, "%s%lld:%lld", d ? ", " : "",
                          (long long)b->offset[d], (long long)(b->offset[d] + b->size[d]));
  if (n < cap) snprintf(out + n, cap - n, "]");
}

/* The chunks and bytes items of the view m as regions of their data files. */
static int add_data_regions(rg_map *map, dcp_meta *m, cm_kind k, const char *dir) {
  for (size_t t = 0; t < dcp_meta_tensor_count(m); t++) {
    dcp_tensor_info ti;
    dcp_meta_tensor(m, t, &ti);
    for (size_t c = 0; c < ti.chunk_count; c++) {
      dcp_chunk_info ci;
      const char *name;
      if (dcp_meta_chunk(m, t, c, &ci) || dcp_meta_file(m, ci.ref.file, &name)) return -1;
      int f = file_index(map, k, dir, name, false);
      rg_region *r = f < 0 ? NULL
                           : add_region(map, f, ci.ref.offset,
                                        ci.ref.offset + ci.ref.stored_length, RG_CHUNK);
      if (!r) return -1;
      r->zstd = ci.ref.codec == DCP_CODEC_ZSTD && ci.ref.stored_length < ci.ref.raw_length;
      char box[200];
      box_str(&ci.box, box, sizeof box);
      snprintf(r->need[0], sizeof r->need[0], "'%s'", ti.fqn);
      snprintf(r->need[1], sizeof r->need[1], "%s", box);
      snprintf(r->what, sizeof r->what, "'%s' chunk %s of %s", ti.fqn, box, name);
    }
  }
  for (size_t b = 0; b < dcp_meta_bytes_count(m); b++) {
    dcp_bytes_info bi;
    const char *name;
    dcp_meta_bytes(m, b, &bi);
    if (!bi.ref.stored_length) continue; /* an empty item has no bytes */
    if (dcp_meta_file(m, bi.ref.file, &name)) return -1;
    int f = file_index(map, k, dir, name, false);
    rg_region *r = f < 0 ? NULL
                         : add_region(map, f, bi.ref.offset,
                                      bi.ref.offset + bi.ref.stored_length, RG_BYTES);
    if (!r) return -1;
    r->per_rank = bi.scope == DCP_SCOPE_PER_RANK;
    r->zstd = bi.ref.codec == DCP_CODEC_ZSTD && bi.ref.stored_length < bi.ref.raw_length;
    snprintf(r->need[0], sizeof r->need[0], "'%s'", bi.key);
    snprintf(r->need[1], sizeof r->need[1], "'%s'", bi.key);
    if (r->per_rank) snprintf(r->verify_need, sizeof r->verify_need, "(rank %d)", (int)bi.rank);
    snprintf(r->what, sizeof r->what, "bytes item '%s' (rank %d) of %s", bi.key, (int)bi.rank,
             name);
  }
  return 0;
}

static int by_start(const void *pa, const void *pb) {
  const rg_region *a = pa, *b = pb;
  if (a->file != b->file) return a->file - b->file;
  return (a->start > b->start) - (a->start < b->start);
}

/* Every byte of every data file of kind k belongs to exactly one region. */
static int check_tiling(rg_map *map, cm_kind k) {
  qsort(map->regions, (size_t)map->nregions, sizeof *map->regions, by_start);
  for (int f = 0; f < map->nfiles; f++) {
    if (map->files[f].kind != k || map->files[f].meta) continue;
    uint64_t at = 0;
    for (int i = 0; i < map->nregions; i++) {
      const rg_region *r = &map->regions[i];
      if (r->file != f) continue;
      if (r->start != at) {
        fprintf(stderr, "corrupt campaign: %s: bytes [%llu, %llu) %s\n", map->files[f].name,
                (unsigned long long)(r->start < at ? r->start : at),
                (unsigned long long)(r->start < at ? at : r->start),
                r->start < at ? "belong to two items" : "belong to no item");
        return -1;
      }
      at = r->end;
    }
    if (at != map->files[f].size) {
      fprintf(stderr, "corrupt campaign: %s: %llu trailing bytes belong to no item\n",
              map->files[f].name, (unsigned long long)(map->files[f].size - at));
      return -1;
    }
  }
  return 0;
}

static rg_region *add_meta_part(rg_map *map, int f, uint64_t a, uint64_t b, const char *part) {
  char file[sizeof map->files[f].name];
  snprintf(file, sizeof file, "%s", map->files[f].name);
  rg_region *r = add_region(map, f, a, b, RG_META);
  if (!r) return NULL;
  snprintf(r->need[0], sizeof r->need[0], "/%s:", file);
  snprintf(r->need[1], sizeof r->need[1], "%s", part);
  snprintf(r->what, sizeof r->what, "%s of %s", part, file);
  return r;
}

/* The header, directory, sections and trailer of metadata file `name`. */
static int add_meta_regions(rg_map *map, cm_kind k, const char *dir, const char *name) {
  int f = file_index(map, k, dir, name, true);
  if (f < 0) return -1;
  uint8_t hd[MD_HEADER + MD_SECTIONS * MD_DIRENT];
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *fp = fopen(path, "rb");
  size_t got = fp ? fread(hd, 1, sizeof hd, fp) : 0;
  if (fp) fclose(fp);
  uint64_t size = map->files[f].size;
  unsigned nsec = got >= MD_HEADER ? get32(hd + 24) : 0;
  if (nsec < 7 || nsec > MD_SECTIONS || got < MD_HEADER + nsec * MD_DIRENT || get64(hd + 16) != size)
    return -1;
  /* the header, split around its version field */
  rg_region *version = NULL;
  if (!add_meta_part(map, f, 0, 8, "header") || !(version = add_meta_part(map, f, 8, 12, "header")))
    return -1;
  version->version = true;
  if (!add_meta_part(map, f, 12, MD_HEADER, "header")) return -1;
  /* format 4 opens without the whole-file pass: the chunks section's own
   * checksum (directory entry 5, bytes 24..32) and the trailer are read
   * only by dcp_verify; a merge still checks a part's whole file */
  bool lazy = get32(hd + 8) >= 4 && !strcmp(name, ".metadata");
  uint64_t cks = MD_HEADER + 4 * MD_DIRENT + 24, dir_end = MD_HEADER + nsec * MD_DIRENT;
  rg_region *unread = NULL;
  if (!lazy && !add_meta_part(map, f, MD_HEADER, dir_end, "directory")) return -1;
  if (lazy && (!add_meta_part(map, f, MD_HEADER, cks, "directory") ||
               !(unread = add_meta_part(map, f, cks, cks + 8, "directory")) ||
               !add_meta_part(map, f, cks + 8, dir_end, "directory")))
    return -1;
  if (unread) unread->unread = true;
  for (unsigned i = 0; i < nsec; i++) {
    const uint8_t *d = hd + MD_HEADER + i * MD_DIRENT;
    uint64_t off = get64(d + 8), len = get64(d + 16);
    if (len && !add_meta_part(map, f, off, off + len, section_names[i])) return -1;
  }
  rg_region *trailer = add_meta_part(map, f, size - MD_TRAILER, size, "trailer");
  if (trailer) trailer->unread = lazy;
  return trailer ? 0 : -1;
}

int rg_map_add(rg_map *map, dcp_ctx *ctx, cm_kind k, const char *dir) {
  dcp_meta *m = NULL;
  if (dcp_meta_open(ctx, dir, &m)) {
    fprintf(stderr, "corrupt campaign: %s: %s\n", dir, dcp_ctx_last_error(ctx));
    return -1;
  }
  int rc = add_data_regions(map, m, k, dir);
  dcp_meta_free(m);
  if (!rc) rc = check_tiling(map, k);
  if (k == CM_COORDINATED) {
    if (!rc) rc = add_meta_regions(map, k, dir, ".metadata");
  } else {
    char name[256], prefix[32];
    for (int r = 0; r < cm_world(k) && !rc; r++) { /* each rank's part */
      snprintf(prefix, sizeof prefix, "%d-of-", r);
      rc = ck_find(dir, prefix, ".metadata", name, sizeof name) == 1 ? 0 : -1;
      if (!rc) rc = add_meta_regions(map, k, dir, name);
    }
  }
  if (rc) fprintf(stderr, "corrupt campaign: cannot map the files of %s\n", dir);
  return rc;
}

const rg_region *rg_find(const rg_map *map, int f, uint64_t at) {
  for (int i = 0; i < map->nregions; i++) {
    const rg_region *r = &map->regions[i];
    if (r->file == f && at >= r->start && at < r->end) return r;
  }
  return NULL;
}
