/* files.c — the names a save gives its files (files.h). */
#include "runtime/files.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <xxhash.h>

dcp_status dcpi_save_id_random(uint8_t id[16]) {
  size_t got = 0;
  while (got < 16) {
    ssize_t n = getrandom(id + got, 16 - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return DCP_EIO;
    got += (size_t)n;
  }
  id[15] |= 1; /* never all zero: zero means "no identity" */
  return DCP_OK;
}

void dcpi_save_id_of_tag(uint64_t save_id, int32_t world, uint8_t id[16]) {
  /* the caller's id in the clear (so the tag shows it), then a hash that
   * also binds the world, so two worlds' parts never look alike */
  uint64_t mix[2] = {save_id, (uint64_t)(uint32_t)world};
  uint64_t h = XXH3_64bits(mix, sizeof mix) | 1;
  for (int i = 0; i < 8; i++) id[i] = (uint8_t)(save_id >> (56 - 8 * i));
  for (int i = 0; i < 8; i++) id[8 + i] = (uint8_t)(h >> (56 - 8 * i));
}

void dcpi_tag_of(const uint8_t id[16], char tag[DCPI_TAG_LEN + 1]) {
  static const char hex[] = "0123456789abcdef";
  for (unsigned i = 0; i < DCPI_TAG_LEN / 2; i++) {
    tag[2 * i] = hex[id[i] >> 4];
    tag[2 * i + 1] = hex[id[i] & 15];
  }
  tag[DCPI_TAG_LEN] = '\0';
}

void dcpi_name_data(char *out, int32_t rank, uint64_t seq, const char *tag) {
  if (seq) snprintf(out, DCPI_NAME_MAX, "data-%05d.%" PRIu64 ".%s.dcp", (int)rank, seq, tag);
  else snprintf(out, DCPI_NAME_MAX, "data-%05d.%s.dcp", (int)rank, tag);
}

void dcpi_name_part(char *out, int32_t rank, int32_t world, uint64_t seq, const char *tag) {
  snprintf(out, DCPI_NAME_MAX, "%d-of-%d.%" PRIu64 ".%s.metadata", (int)rank, (int)world, seq,
           tag);
}

void dcpi_name_metadata_tmp(char *out, const char *tag) {
  snprintf(out, DCPI_NAME_MAX, ".metadata.%s.tmp", tag);
}

void dcpi_name_rank_lease(char *out, int32_t rank) {
  snprintf(out, DCPI_NAME_MAX, DCPI_COORD_LEASE ".%d", (int)rank);
}

/* Whether s is exactly DCPI_TAG_LEN lowercase hex digits. */
static bool is_tag(const char *s) {
  if (strlen(s) != DCPI_TAG_LEN) return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

/* Parse the fields sscanf finds, then accept only when formatting them
 * again gives the name back (no leading zeros, signs or spaces slip by). */
static bool parse_data(const char *name, dcpi_file_name *o) {
  char again[DCPI_NAME_MAX];
  int rank = -1;
  unsigned long long seq = 0;
  if (sscanf(name, "data-%d.%llu.%16[0-9a-f].dcp", &rank, &seq, o->tag) == 3 && rank >= 0 &&
      seq > 0 && is_tag(o->tag)) {
    dcpi_name_data(again, rank, seq, o->tag);
    if (strcmp(again, name) == 0) return o->rank = rank, o->seq = seq, true;
  }
  if (sscanf(name, "data-%d.%16[0-9a-f].dcp", &rank, o->tag) == 2 && rank >= 0 &&
      is_tag(o->tag)) {
    dcpi_name_data(again, rank, 0, o->tag);
    if (strcmp(again, name) == 0) return o->rank = rank, o->seq = 0, true;
  }
  o->tag[0] = '\0';
  return false;
}

static bool parse_part(const char *name, dcpi_file_name *o, bool *tmp) {
  char again[DCPI_NAME_MAX];
  int rank = -1, world = 0;
  unsigned long long seq = 0;
  if (sscanf(name, "%d-of-%d.%llu.%16[0-9a-f].metadata", &rank, &world, &seq, o->tag) != 4 ||
      rank < 0 || world < 1 || rank >= world || seq == 0 || !is_tag(o->tag)) {
    o->tag[0] = '\0';
    return false;
  }
  dcpi_name_part(again, rank, world, seq, o->tag);
  size_t n = strlen(again);
  *tmp = strcmp(name + (strncmp(again, name, n) == 0 ? n : 0), ".tmp") == 0;
  if (strcmp(again, name) != 0 && !*tmp) {
    o->tag[0] = '\0';
    return false;
  }
  o->rank = rank, o->world = world, o->seq = seq;
  return true;
}

static bool parse_legacy(const char *name, dcpi_file_name *o) {
  int rank = -1, end = 0;
  char again[DCPI_NAME_MAX];
  if (strcmp(name, ".metadata.tmp") == 0) return o->kind = DCPI_FILE_LEGACY_TMP, true;
  if (sscanf(name, "data-%d.dcp%n", &rank, &end) == 1 && rank >= 0 && name[end] == '\0') {
    snprintf(again, sizeof again, "data-%05d.dcp", rank);
    if (strcmp(again, name) == 0) return o->kind = DCPI_FILE_LEGACY_DATA, o->rank = rank, true;
  }
  end = 0;
  if (sscanf(name, "%d.metadata%n", &rank, &end) == 1 && rank >= 0) {
    snprintf(again, sizeof again, "%d.metadata", rank);
    size_t n = strlen(again);
    if (strncmp(again, name, n) != 0) return false;
    if (name[n] == '\0') return o->kind = DCPI_FILE_LEGACY_PART, o->rank = rank, true;
    if (strcmp(name + n, ".tmp") == 0) return o->kind = DCPI_FILE_LEGACY_TMP, o->rank = rank, true;
  }
  return false;
}

dcpi_file_kind dcpi_name_parse(const char *name, dcpi_file_name *out) {
  dcpi_file_name o;
  memset(&o, 0, sizeof o);
  o.rank = -1;
  bool tmp = false;
  char again[DCPI_NAME_MAX];
  if (!name || strlen(name) >= DCPI_NAME_MAX) {
    /* too long to be ours */
  } else if (strncmp(name, ".metadata.", 10) == 0 && strlen(name) == 10 + DCPI_TAG_LEN + 4 &&
             sscanf(name + 10, "%16[0-9a-f]", o.tag) == 1 && is_tag(o.tag)) {
    dcpi_name_metadata_tmp(again, o.tag);
    o.kind = strcmp(again, name) == 0 ? DCPI_FILE_TMP : DCPI_FILE_OTHER;
  } else if (parse_data(name, &o)) {
    o.kind = DCPI_FILE_DATA;
  } else if (parse_part(name, &o, &tmp)) {
    o.kind = tmp ? DCPI_FILE_TMP : DCPI_FILE_PART;
  } else if (!parse_legacy(name, &o)) {
    o.kind = DCPI_FILE_OTHER;
  }
  if (o.kind == DCPI_FILE_OTHER) {
    memset(&o, 0, sizeof o);
    o.rank = -1;
  }
  if (out) *out = o;
  return o.kind;
}

bool dcpi_name_is_save_file(const char *name) {
  return dcpi_name_parse(name, NULL) != DCPI_FILE_OTHER;
}
