/* mgr_kit.c — see mgr_kit.h. */
#include "mgr_kit.h"

#include <inttypes.h>
#include <string.h>

uint32_t mk_value(int64_t step, int64_t i) {
  uint64_t x = (uint64_t)step * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull + 1;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 29;
  return (uint32_t)x;
}

void mk_model_init(mk_model *m, dcp_ctx *ctx) {
  memset(m, 0, sizeof *m);
  m->rank = dcp_ctx_rank(ctx);
  m->world = dcp_ctx_world_size(ctx);
  m->len = MK_NUMEL / m->world;
  m->off = m->rank * m->len;
  m->w = calloc((size_t)m->len, sizeof *m->w);
  MK_CHECK(m->w, "out of memory");
  MK_CHECK(dcp_state_create(ctx, &m->st) == DCP_OK, "state: %s", dcp_ctx_last_error(ctx));
  int64_t shape[1] = {MK_NUMEL}, off[1] = {m->off}, size[1] = {m->len};
  MK_CHECK(dcp_state_add_tensor(m->st, "w", DCP_U32, 1, shape) == DCP_OK, "add w");
  MK_CHECK(dcp_state_add_chunk(m->st, "w", off, size, m->w) == DCP_OK, "add chunk");
  MK_CHECK(dcp_state_add_bytes(m->st, "step", DCP_SCOPE_REPLICATED, m->tag, sizeof m->tag) ==
               DCP_OK,
           "add bytes");
}

void mk_model_free(mk_model *m) {
  dcp_state_free(m->st);
  free(m->w);
}

static void tag_of(char tag[20], int64_t step) {
  char buf[32];
  snprintf(buf, sizeof buf, "%020" PRId64, step);
  memcpy(tag, buf, 20);
}

void mk_model_fill(mk_model *m, int64_t step) {
  for (int64_t i = 0; i < m->len; i++) m->w[i] = mk_value(step, m->off + i);
  tag_of(m->tag, step);
}

int mk_model_is(const mk_model *m, int64_t step) {
  char t[20];
  tag_of(t, step);
  if (memcmp(t, m->tag, 20)) return 0;
  for (int64_t i = 0; i < m->len; i++)
    if (m->w[i] != mk_value(step, m->off + i)) return 0;
  return 1;
}

dcp_ctx *mk_ctx(int32_t rank, int32_t world, const char *rdv, int64_t timeout_ms,
                int64_t lease_ms) {
  dcp_ctx_config cfg;
  dcp_ctx_config_init(&cfg);
  cfg.timeout_ms = timeout_ms;
  cfg.lease_ms = lease_ms;
  if (world > 1) {
    cfg.coll = "file";
    cfg.rendezvous = rdv;
    cfg.rank = rank;
    cfg.world_size = world;
  }
  dcp_ctx *ctx;
  if (dcp_ctx_create(&cfg, &ctx)) {
    fprintf(stderr, "rank %d: ctx: %s\n", rank, dcp_ctx_create_error());
    exit(1);
  }
  if (world > 1 && dcp_async_set_coordination(ctx, "file", rdv, NULL)) {
    fprintf(stderr, "rank %d: coordination: %s\n", rank, dcp_ctx_last_error(ctx));
    exit(1);
  }
  return ctx;
}
