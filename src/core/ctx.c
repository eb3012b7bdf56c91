/* ctx.c — context lifetime and its last-error slot. */
#include "core/ctx.h"

#include <stdlib.h>
#include <string.h>

void dcp_ctx_config_init(dcp_ctx_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->struct_size = sizeof *cfg;
  cfg->rank = 0;
  cfg->world_size = 1;
}

dcp_status dcp_ctx_create(const dcp_ctx_config *cfg, dcp_ctx **out) {
  if (!out) return DCP_EINVAL;
  *out = NULL;
  dcp_ctx_config defaults;
  if (!cfg) {
    dcp_ctx_config_init(&defaults);
    cfg = &defaults;
  }
  /* struct_size guards against a caller compiled with an older, shorter
   * config: fields it does not have keep their defaults. */
  if (cfg->struct_size < offsetof(dcp_ctx_config, world_size) + sizeof cfg->world_size)
    return DCP_EINVAL;
  if (cfg->world_size < 1 || cfg->rank < 0 || cfg->rank >= cfg->world_size)
    return DCP_EINVAL;
  dcp_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return DCP_ENOMEM;
  ctx->rank = cfg->rank;
  ctx->world_size = cfg->world_size;
  *out = ctx;
  return DCP_OK;
}

void dcp_ctx_free(dcp_ctx *ctx) { free(ctx); }

int32_t dcp_ctx_rank(const dcp_ctx *ctx) { return ctx ? ctx->rank : -1; }

int32_t dcp_ctx_world_size(const dcp_ctx *ctx) { return ctx ? ctx->world_size : 0; }

const char *dcp_ctx_last_error(const dcp_ctx *ctx) { return ctx ? ctx->last_error : ""; }

dcp_status dcp_ctx_last_status(const dcp_ctx *ctx) { return ctx ? ctx->last_status : DCP_EINVAL; }

dcp_status dcpi_ctx_report(dcp_ctx *ctx, const dcpi_err *err) {
  if (ctx && err->code != DCP_OK) {
    ctx->last_status = err->code;
    memcpy(ctx->last_error, err->msg, sizeof ctx->last_error);
    ctx->last_error[sizeof ctx->last_error - 1] = '\0';
  }
  return err->code;
}
