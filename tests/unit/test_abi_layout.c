/* test_abi_layout.c — pins the binary interface of the public headers.
 *
 * A program or plugin built against one libdcp header must keep working
 * with a library built from another of the same ABI (dcp.h's struct_size
 * rule; dcp_plugin.h's append-only tables, version 1). Nothing else stops
 * an edit from moving a field, so this file states the layout of every
 * public struct of include/dcp.h and include/dcp_plugin.h (sizeof,
 * _Alignof, and every member's offset and size), the numeric value of every
 * public enumerator and #define that is part of the ABI (status codes,
 * dtypes, scopes, codecs, policies, flags, capability bits, the plugin
 * kinds and DCP_PLUGIN_ABI_VERSION), and the type of every function pointer
 * of the plugin tables and of the public callback typedefs.
 *
 * Each expectation is a literal, checked twice: by _Static_assert at file
 * scope, so a change fails the BUILD, and at run time, so that a build
 * with -DDCP_ABI_LAYOUT_RUNTIME_ONLY lists every difference at once (what
 * to do when a change is deliberate: an appended field or value adds lines
 * here; anything that changes an existing line breaks the ABI).
 *
 * Sizes and offsets are those of LP64 Linux (x86-64 and aarch64 agree for
 * these structs; so do riscv64, ppc64le and s390x). Elsewhere only the
 * values and signatures are checked, and the layout test says it skipped.
 * Not pinned: DCP_VERSION_* (they change with every release) and
 * DCP_DTYPE_END_ (one past the last dtype: it moves when one is appended).
 *
 * Also here: the plugin author's kit of dcp_plugin.h (DCP_HAS_FIELD,
 * dcp_plugin_fail, DCP_PLUGIN_ENTRY_SYMBOL) at run time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "testutil.h"

#include "dcp.h"
#include "dcp_plugin.h"

/* ---- the expectations ---------------------------------------------------- */

/* S(type, sizeof, _Alignof), then F(type, member, offsetof, sizeof member)
 * for every member in declaration order. LP64 values. */
/* dcp.h */
#define DCP_H_STRUCTS(S, F)                       \
  S(dcp_ctx_config, 88, 8)                        \
  F(dcp_ctx_config, struct_size, 0, 4)            \
  F(dcp_ctx_config, rank, 4, 4)                   \
  F(dcp_ctx_config, world_size, 8, 4)             \
  F(dcp_ctx_config, storage, 16, 8)               \
  F(dcp_ctx_config, storage_options, 24, 8)       \
  F(dcp_ctx_config, coll, 32, 8)                  \
  F(dcp_ctx_config, coll_options, 40, 8)          \
  F(dcp_ctx_config, coll_native, 48, 8)           \
  F(dcp_ctx_config, rendezvous, 56, 8)            \
  F(dcp_ctx_config, timeout_ms, 64, 8)            \
  F(dcp_ctx_config, plugin_path, 72, 8)           \
  F(dcp_ctx_config, lease_ms, 80, 8)              \
  S(dcp_box, 264, 8)                              \
  F(dcp_box, ndim, 0, 4)                          \
  F(dcp_box, offset, 8, 128)                      \
  F(dcp_box, size, 136, 128)                      \
  S(dcp_storage_ref, 64, 8)                       \
  F(dcp_storage_ref, file, 0, 4)                  \
  F(dcp_storage_ref, codec, 4, 4)                 \
  F(dcp_storage_ref, block_size, 8, 4)            \
  F(dcp_storage_ref, offset, 16, 8)               \
  F(dcp_storage_ref, stored_length, 24, 8)        \
  F(dcp_storage_ref, raw_length, 32, 8)           \
  F(dcp_storage_ref, block_count, 40, 8)          \
  F(dcp_storage_ref, block_checksums, 48, 8)      \
  F(dcp_storage_ref, block_stored_lengths, 56, 8) \
  S(dcp_tensor_info, 152, 8)                      \
  F(dcp_tensor_info, fqn, 0, 8)                   \
  F(dcp_tensor_info, dtype, 8, 4)                 \
  F(dcp_tensor_info, ndim, 12, 4)                 \
  F(dcp_tensor_info, shape, 16, 128)              \
  F(dcp_tensor_info, chunk_count, 144, 8)         \
  S(dcp_chunk_info, 328, 8)                       \
  F(dcp_chunk_info, box, 0, 264)                  \
  F(dcp_chunk_info, ref, 264, 64)                 \
  S(dcp_bytes_info, 80, 8)                        \
  F(dcp_bytes_info, key, 0, 8)                    \
  F(dcp_bytes_info, scope, 8, 4)                  \
  F(dcp_bytes_info, rank, 12, 4)                  \
  F(dcp_bytes_info, ref, 16, 64)                  \
  S(dcp_save_identity, 32, 8)                     \
  F(dcp_save_identity, id, 0, 16)                 \
  F(dcp_save_identity, generation, 16, 8)         \
  F(dcp_save_identity, part_rank, 24, 4)          \
  S(dcp_mesh_info, 24, 8)                         \
  F(dcp_mesh_info, ndim, 0, 4)                    \
  F(dcp_mesh_info, shape, 8, 8)                   \
  F(dcp_mesh_info, ranks, 16, 8)                  \
  S(dcp_save_options, 56, 8)                      \
  F(dcp_save_options, struct_size, 0, 4)          \
  F(dcp_save_options, flags, 4, 4)                \
  F(dcp_save_options, block_size, 8, 4)           \
  F(dcp_save_options, zstd_level, 12, 4)          \
  F(dcp_save_options, policy, 16, 4)              \
  F(dcp_save_options, nkv, 24, 8)                 \
  F(dcp_save_options, kv_keys, 32, 8)             \
  F(dcp_save_options, kv_values, 40, 8)           \
  F(dcp_save_options, save_id, 48, 8)             \
  S(dcp_load_options, 24, 8)                      \
  F(dcp_load_options, struct_size, 0, 4)          \
  F(dcp_load_options, flags, 4, 4)                \
  F(dcp_load_options, read_dedup, 8, 4)           \
  F(dcp_load_options, reader_policy, 12, 4)       \
  F(dcp_load_options, max_inflight_bytes, 16, 8)  \
  S(dcp_stats, 224, 8)                            \
  F(dcp_stats, struct_size, 0, 4)                 \
  F(dcp_stats, plan_s, 8, 8)                      \
  F(dcp_stats, write_s, 16, 8)                    \
  F(dcp_stats, commit_s, 24, 8)                   \
  F(dcp_stats, read_s, 32, 8)                     \
  F(dcp_stats, total_s, 40, 8)                    \
  F(dcp_stats, bytes_written, 48, 8)              \
  F(dcp_stats, write_ops, 56, 8)                  \
  F(dcp_stats, bytes_read, 64, 8)                 \
  F(dcp_stats, read_ops, 72, 8)                   \
  F(dcp_stats, sync_ops, 80, 8)                   \
  F(dcp_stats, meta_ops, 88, 8)                   \
  F(dcp_stats, coll_bytes, 96, 8)                 \
  F(dcp_stats, coll_ops, 104, 8)                  \
  F(dcp_stats, items_written, 112, 8)             \
  F(dcp_stats, data_bytes, 120, 8)                \
  F(dcp_stats, data_read_bytes, 128, 8)           \
  F(dcp_stats, read_payload_bytes, 136, 8)        \
  F(dcp_stats, dedup_sent_bytes, 144, 8)          \
  F(dcp_stats, dedup_recv_bytes, 152, 8)          \
  F(dcp_stats, dedup_groups, 160, 8)              \
  F(dcp_stats, dedup_path, 168, 4)                \
  F(dcp_stats, plan_cache_hit, 172, 4)            \
  F(dcp_stats, plan_coll_bytes, 176, 8)           \
  F(dcp_stats, mem_read_bytes, 184, 8)            \
  F(dcp_stats, mem_fallback_bytes, 192, 8)        \
  F(dcp_stats, mem_tier, 200, 4)                  \
  F(dcp_stats, peer_recv_bytes, 208, 8)           \
  F(dcp_stats, save_plan_path, 216, 4)            \
  S(dcp_memtier_options, 40, 8)                   \
  F(dcp_memtier_options, struct_size, 0, 4)       \
  F(dcp_memtier_options, keep, 4, 4)              \
  F(dcp_memtier_options, budget_bytes, 8, 8)      \
  F(dcp_memtier_options, linger_ms, 16, 8)        \
  F(dcp_memtier_options, job, 24, 8)              \
  F(dcp_memtier_options, replicas, 32, 4)         \
  F(dcp_memtier_options, peer_jump, 36, 4)        \
  S(dcp_verify_report, 576, 8)                    \
  F(dcp_verify_report, struct_size, 0, 4)         \
  F(dcp_verify_report, tensors, 8, 8)             \
  F(dcp_verify_report, chunks, 16, 8)             \
  F(dcp_verify_report, bytes_items, 24, 8)        \
  F(dcp_verify_report, blocks, 32, 8)             \
  F(dcp_verify_report, bytes, 40, 8)              \
  F(dcp_verify_report, problems, 48, 8)           \
  F(dcp_verify_report, first_status, 56, 4)       \
  F(dcp_verify_report, first_problem, 60, 512)    \
  S(dcp_manager_options, 80, 8)                   \
  F(dcp_manager_options, struct_size, 0, 4)       \
  F(dcp_manager_options, flags, 4, 4)             \
  F(dcp_manager_options, keep_last, 8, 4)         \
  F(dcp_manager_options, keep_every, 16, 8)       \
  F(dcp_manager_options, max_bytes, 24, 8)        \
  F(dcp_manager_options, keep_steps, 32, 8)       \
  F(dcp_manager_options, nkeep_steps, 40, 8)      \
  F(dcp_manager_options, keep_fn, 48, 8)          \
  F(dcp_manager_options, keep_arg, 56, 8)         \
  F(dcp_manager_options, log_fn, 64, 8)           \
  F(dcp_manager_options, log_arg, 72, 8)          \
  S(dcp_step_info, 192, 8)                        \
  F(dcp_step_info, step, 0, 8)                    \
  F(dcp_step_info, state, 8, 4)                   \
  F(dcp_step_info, bytes, 16, 8)                  \
  F(dcp_step_info, keep, 24, 4)                   \
  F(dcp_step_info, note, 28, 160)                 \
  S(dcp_manager_gc_report, 560, 8)                \
  F(dcp_manager_gc_report, struct_size, 0, 4)     \
  F(dcp_manager_gc_report, status, 4, 4)          \
  F(dcp_manager_gc_report, deleted, 8, 8)         \
  F(dcp_manager_gc_report, kept, 16, 8)           \
  F(dcp_manager_gc_report, failed, 24, 8)         \
  F(dcp_manager_gc_report, kept_bytes, 32, 8)     \
  F(dcp_manager_gc_report, over_budget, 40, 4)    \
  F(dcp_manager_gc_report, message, 44, 512)     \
  S(dcp_replica_report, 552, 8)                   \
  F(dcp_replica_report, struct_size, 0, 4)        \
  F(dcp_replica_report, status, 4, 4)             \
  F(dcp_replica_report, boxes_checked, 8, 8)      \
  F(dcp_replica_report, mismatches, 16, 8)        \
  F(dcp_replica_report, hashed_bytes, 24, 8)      \
  F(dcp_replica_report, exchange_bytes, 32, 8)    \
  F(dcp_replica_report, message, 40, 512)

/* dcp_plugin.h */
#define DCP_PLUGIN_H_STRUCTS(S, F)         \
  S(dcp_plugin_err, 512, 1)                \
  F(dcp_plugin_err, msg, 0, 512)           \
  S(dcp_storage_config, 40, 8)             \
  F(dcp_storage_config, struct_size, 0, 4) \
  F(dcp_storage_config, root, 8, 8)        \
  F(dcp_storage_config, flags, 16, 4)      \
  F(dcp_storage_config, rank, 20, 4)       \
  F(dcp_storage_config, world_size, 24, 4) \
  F(dcp_storage_config, options, 32, 8)    \
  S(dcp_io_stats, 56, 8)                   \
  F(dcp_io_stats, bytes_written, 0, 8)     \
  F(dcp_io_stats, write_ops, 8, 8)         \
  F(dcp_io_stats, bytes_read, 16, 8)       \
  F(dcp_io_stats, read_ops, 24, 8)         \
  F(dcp_io_stats, sync_ops, 32, 8)         \
  F(dcp_io_stats, meta_ops, 40, 8)         \
  F(dcp_io_stats, retries, 48, 8)          \
  S(dcp_io_stats2, 64, 8)                  \
  F(dcp_io_stats2, struct_size, 0, 4)      \
  F(dcp_io_stats2, reserved, 4, 4)         \
  F(dcp_io_stats2, bytes_written, 8, 8)    \
  F(dcp_io_stats2, write_ops, 16, 8)       \
  F(dcp_io_stats2, bytes_read, 24, 8)      \
  F(dcp_io_stats2, read_ops, 32, 8)        \
  F(dcp_io_stats2, sync_ops, 40, 8)        \
  F(dcp_io_stats2, meta_ops, 48, 8)        \
  F(dcp_io_stats2, retries, 56, 8)         \
  S(dcp_storage_plugin, 136, 8)            \
  F(dcp_storage_plugin, abi_version, 0, 4) \
  F(dcp_storage_plugin, struct_size, 4, 4) \
  F(dcp_storage_plugin, name, 8, 8)        \
  F(dcp_storage_plugin, caps, 16, 8)       \
  F(dcp_storage_plugin, open, 24, 8)       \
  F(dcp_storage_plugin, close, 32, 8)      \
  F(dcp_storage_plugin, file_open, 40, 8)  \
  F(dcp_storage_plugin, file_write, 48, 8) \
  F(dcp_storage_plugin, file_read, 56, 8)  \
  F(dcp_storage_plugin, file_sync, 64, 8)  \
  F(dcp_storage_plugin, file_close, 72, 8) \
  F(dcp_storage_plugin, file_size, 80, 8)  \
  F(dcp_storage_plugin, rename, 88, 8)     \
  F(dcp_storage_plugin, remove, 96, 8)     \
  F(dcp_storage_plugin, sync_dir, 104, 8)  \
  F(dcp_storage_plugin, list, 112, 8)      \
  F(dcp_storage_plugin, get_stats, 120, 8) \
  F(dcp_storage_plugin, get_stats2, 128, 8) \
  S(dcp_coll_config, 48, 8)                \
  F(dcp_coll_config, struct_size, 0, 4)    \
  F(dcp_coll_config, rank, 4, 4)           \
  F(dcp_coll_config, world_size, 8, 4)     \
  F(dcp_coll_config, native, 16, 8)        \
  F(dcp_coll_config, rendezvous, 24, 8)    \
  F(dcp_coll_config, timeout_ms, 32, 8)    \
  F(dcp_coll_config, options, 40, 8)       \
  S(dcp_coll_plugin, 120, 8)               \
  F(dcp_coll_plugin, abi_version, 0, 4)    \
  F(dcp_coll_plugin, struct_size, 4, 4)    \
  F(dcp_coll_plugin, name, 8, 8)           \
  F(dcp_coll_plugin, caps, 16, 8)          \
  F(dcp_coll_plugin, open, 24, 8)          \
  F(dcp_coll_plugin, close, 32, 8)         \
  F(dcp_coll_plugin, rank, 40, 8)          \
  F(dcp_coll_plugin, size, 48, 8)          \
  F(dcp_coll_plugin, barrier, 56, 8)       \
  F(dcp_coll_plugin, bcast, 64, 8)         \
  F(dcp_coll_plugin, allgather, 72, 8)     \
  F(dcp_coll_plugin, gatherv, 80, 8)       \
  F(dcp_coll_plugin, scatterv, 88, 8)      \
  F(dcp_coll_plugin, allreduce_i64, 96, 8) \
  F(dcp_coll_plugin, group_bcast, 104, 8)  \
  F(dcp_coll_plugin, host_id, 112, 8)

/* E(enum type, sizeof): the enums that are struct members or returned. */
#define ENUM_SIZES(E)  \
  E(dcp_status, 4)     \
  E(dcp_dtype, 4)      \
  E(dcp_scope, 4)      \
  E(dcp_codec, 4)      \
  E(dcp_policy, 4)     \
  E(dcp_read_dedup, 4) \
  E(dcp_async_staging, 4) \
  E(dcp_phase, 4)      \
  E(dcp_step_state, 4)

/* V(name, value): every public enumerator and numeric #define of the ABI. */
#define VALUES(V)                  \
  V(DCP_OK, 0)                     \
  V(DCP_EINVAL, -1)                \
  V(DCP_ENOMEM, -2)                \
  V(DCP_EOVERFLOW, -3)             \
  V(DCP_ECORRUPT, -4)              \
  V(DCP_EVERSION, -5)              \
  V(DCP_EMISMATCH, -6)             \
  V(DCP_EBOUNDS, -7)               \
  V(DCP_EOVERLAP, -8)              \
  V(DCP_EEXIST, -9)                \
  V(DCP_ENOTFOUND, -10)            \
  V(DCP_ESCOPE, -11)               \
  V(DCP_ENAME, -12)                \
  V(DCP_EINCOMPLETE, -13)          \
  V(DCP_EIO, -14)                  \
  V(DCP_ENOSPC, -15)               \
  V(DCP_ETIMEDOUT, -16)            \
  V(DCP_EPEER, -17)                \
  V(DCP_EPLUGIN, -18)              \
  V(DCP_EBUSY, -19)                \
  V(DCP_ESTALE, -20)               \
  V(DCP_EREPLICA, -21)             \
  V(DCP_DTYPE_INVALID, 0)          \
  V(DCP_BOOL, 1)                   \
  V(DCP_U8, 2)                     \
  V(DCP_I8, 3)                     \
  V(DCP_I16, 4)                    \
  V(DCP_U16, 5)                    \
  V(DCP_I32, 6)                    \
  V(DCP_U32, 7)                    \
  V(DCP_I64, 8)                    \
  V(DCP_U64, 9)                    \
  V(DCP_F16, 10)                   \
  V(DCP_BF16, 11)                  \
  V(DCP_F32, 12)                   \
  V(DCP_F64, 13)                   \
  V(DCP_F8_E4M3, 14)               \
  V(DCP_F8_E5M2, 15)               \
  V(DCP_F8_E8M0, 16)               \
  V(DCP_C64, 17)                   \
  V(DCP_MAX_NDIM, 16)              \
  V(DCP_MAX_MESH_NDIM, 16)         \
  V(DCP_SCOPE_REPLICATED, 0)       \
  V(DCP_SCOPE_PER_RANK, 1)         \
  V(DCP_MAX_NAME, 4096)            \
  V(DCP_CODEC_NONE, 0)             \
  V(DCP_CODEC_ZSTD, 1)             \
  V(DCP_CODEC_ZSTD_CHECKED, 2)     \
  V(DCP_POLICY_BALANCED, 0)        \
  V(DCP_POLICY_LOWEST_RANK, 1)     \
  V(DCP_SAVE_OVERWRITE, 1)         \
  V(DCP_SAVE_COMPRESS, 2)          \
  V(DCP_SAVE_IN_PLACE, 4)          \
  V(DCP_SAVE_CHECK_REPLICAS, 8)    \
  V(DCP_CHECK_REPORT_ONLY, 1)      \
  V(DCP_LOAD_METADATA_PER_RANK, 1) \
  V(DCP_LOAD_NO_PIPELINE, 2)       \
  V(DCP_READ_DEDUP_AUTO, 0)        \
  V(DCP_READ_DEDUP_OFF, 1)         \
  V(DCP_READ_DEDUP_ON, 2)          \
  V(DCP_IMPORT_LINK, 1)            \
  V(DCP_VERIFY_MSG_MAX, 512)       \
  V(DCP_PLUGIN_ABI_VERSION, 1)     \
  V(DCP_PLUGIN_STORAGE, 1)         \
  V(DCP_PLUGIN_COLL, 2)            \
  V(DCP_STORAGE_CREATE, 1)         \
  V(DCP_STORAGE_DIRECT, 2)         \
  V(DCP_STORAGE_AUX, 4)            \
  V(DCP_STORAGE_CAP_DIRECT, 1)     \
  V(DCP_STORAGE_CAP_SHARED_FS, 2)  \
  V(DCP_STORAGE_CAP_EXCL, 4)       \
  V(DCP_FILE_READ, 1)              \
  V(DCP_FILE_WRITE, 2)             \
  V(DCP_FILE_EXCL, 4)              \
  V(DCP_COLL_CAP_BULK, 1)          \
  V(DCP_COLL_CAP_GROUPS, 2)        \
  V(DCP_REDUCE_MIN, 1)             \
  V(DCP_REDUCE_MAX, 2)             \
  V(DCP_REDUCE_SUM, 3)             \
  V(DCP_ASYNC_STAGE_BLOCKING, 0)   \
  V(DCP_ASYNC_STAGE_BACKGROUND, 1) \
  V(DCP_PHASE_SAVE_WRITE, 1)       \
  V(DCP_PHASE_LOAD_READ, 2)        \
  V(DCP_PHASE_IMPORT, 3)           \
  V(DCP_PHASE_EXPORT, 4)           \
  V(DCP_PHASE_VERIFY, 5)           \
  V(DCP_STEP_COMMITTED, 0)         \
  V(DCP_STEP_PENDING, 1)           \
  V(DCP_STEP_INCOMPLETE, 2)        \
  V(DCP_STEP_CORRUPT, 3)           \
  V(DCP_STEP_FOREIGN, 4)           \
  V(DCP_MANAGER_READ_ONLY, 1)      \
  V(DCP_MANAGER_NO_AUTO_GC, 2)     \
  V(DCP_MANAGER_KEEP_INCOMPLETE, 4) \
  V(DCP_MANAGER_QUIET, 8)          \
  V(DCP_RESUME_VERIFY, 1)          \
  V(DCP_GC_DRY_RUN, 1)             \
  V(DCP_MEMTIER_OFF, 0)            \
  V(DCP_MEMTIER_USED, 1)           \
  V(DCP_MEMTIER_NONE, 2)           \
  V(DCP_MEMTIER_STALE, 3)          \
  V(DCP_MEMTIER_REFUSED, 4)        \
  V(DCP_MEMTIER_PEER, 5)

/* Whether expr has type T (compatible types, C11 6.5.1.1); the expression
 * is not evaluated. */
#define HAS_TYPE(expr, T) _Generic((expr), T: 1, default: 0)
#define ST_FN(field) (((const dcp_storage_plugin *)NULL)->field)
#define CO_FN(field) (((const dcp_coll_plugin *)NULL)->field)

/* T(what, expression of type 1 or 0): the function pointer types of the
 * tables (the arguments the core passes) and the public callbacks. */
#define SIGNATURES(T)                                                                              \
  T("dcp_plugin_entry_fn",                                                                         \
    HAS_TYPE((dcp_plugin_entry_fn)NULL, const void *(*)(uint32_t)))                                \
  T("dcp_progress_fn", HAS_TYPE((dcp_progress_fn)NULL, void (*)(void *, uint64_t, uint64_t)))      \
  T("dcp_phase_progress_fn",                                                                       \
    HAS_TYPE((dcp_phase_progress_fn)NULL, void (*)(void *, dcp_phase, uint64_t, uint64_t)))        \
  T("dcp_manager_keep_fn", HAS_TYPE((dcp_manager_keep_fn)NULL, int (*)(void *, int64_t)))          \
  T("dcp_manager_log_fn", HAS_TYPE((dcp_manager_log_fn)NULL, void (*)(void *, const char *)))      \
  T("dcp_async_copy_fn",                                                                           \
    HAS_TYPE((dcp_async_copy_fn)NULL, void (*)(void *, void *, const void *, size_t)))             \
  T("dcp_storage_plugin.open",                                                                     \
    HAS_TYPE(ST_FN(open), int (*)(const dcp_storage_config *, dcp_storage **, dcp_plugin_err *)))  \
  T("dcp_storage_plugin.close", HAS_TYPE(ST_FN(close), void (*)(dcp_storage *)))                   \
  T("dcp_storage_plugin.file_open",                                                                \
    HAS_TYPE(ST_FN(file_open), int (*)(dcp_storage *, const char *, uint32_t,                      \
                                       dcp_storage_file **, dcp_plugin_err *)))                    \
  T("dcp_storage_plugin.file_write",                                                               \
    HAS_TYPE(ST_FN(file_write), int (*)(dcp_storage_file *, const void *, size_t,                  \
                                        dcp_plugin_err *)))                                        \
  T("dcp_storage_plugin.file_read",                                                                \
    HAS_TYPE(ST_FN(file_read), int (*)(dcp_storage_file *, void *, size_t, uint64_t,               \
                                       dcp_plugin_err *)))                                         \
  T("dcp_storage_plugin.file_sync",                                                                \
    HAS_TYPE(ST_FN(file_sync), int (*)(dcp_storage_file *, dcp_plugin_err *)))                     \
  T("dcp_storage_plugin.file_close",                                                               \
    HAS_TYPE(ST_FN(file_close), int (*)(dcp_storage_file *, dcp_plugin_err *)))                    \
  T("dcp_storage_plugin.file_size",                                                                \
    HAS_TYPE(ST_FN(file_size), int (*)(dcp_storage *, const char *, uint64_t *,                    \
                                       dcp_plugin_err *)))                                         \
  T("dcp_storage_plugin.rename",                                                                   \
    HAS_TYPE(ST_FN(rename), int (*)(dcp_storage *, const char *, const char *,                     \
                                    dcp_plugin_err *)))                                            \
  T("dcp_storage_plugin.remove",                                                                   \
    HAS_TYPE(ST_FN(remove), int (*)(dcp_storage *, const char *, dcp_plugin_err *)))               \
  T("dcp_storage_plugin.sync_dir",                                                                 \
    HAS_TYPE(ST_FN(sync_dir), int (*)(dcp_storage *, dcp_plugin_err *)))                           \
  T("dcp_storage_plugin.list",                                                                     \
    HAS_TYPE(ST_FN(list), int (*)(dcp_storage *, int (*)(void *, const char *), void *,            \
                                  dcp_plugin_err *)))                                              \
  T("dcp_storage_plugin.get_stats",                                                                \
    HAS_TYPE(ST_FN(get_stats), void (*)(const dcp_storage *, dcp_io_stats *)))                     \
  T("dcp_storage_plugin.get_stats2",                                                               \
    HAS_TYPE(ST_FN(get_stats2), void (*)(const dcp_storage *, dcp_io_stats2 *)))                   \
  T("dcp_coll_plugin.open",                                                                        \
    HAS_TYPE(CO_FN(open), int (*)(const dcp_coll_config *, dcp_comm **, dcp_plugin_err *)))        \
  T("dcp_coll_plugin.close", HAS_TYPE(CO_FN(close), void (*)(dcp_comm *)))                         \
  T("dcp_coll_plugin.rank", HAS_TYPE(CO_FN(rank), int32_t (*)(const dcp_comm *)))                  \
  T("dcp_coll_plugin.size", HAS_TYPE(CO_FN(size), int32_t (*)(const dcp_comm *)))                  \
  T("dcp_coll_plugin.barrier", HAS_TYPE(CO_FN(barrier), int (*)(dcp_comm *, dcp_plugin_err *)))    \
  T("dcp_coll_plugin.bcast",                                                                       \
    HAS_TYPE(CO_FN(bcast), int (*)(dcp_comm *, void *, size_t, int32_t, dcp_plugin_err *)))        \
  T("dcp_coll_plugin.allgather",                                                                   \
    HAS_TYPE(CO_FN(allgather), int (*)(dcp_comm *, const void *, size_t, void *,                   \
                                       dcp_plugin_err *)))                                         \
  T("dcp_coll_plugin.gatherv",                                                                     \
    HAS_TYPE(CO_FN(gatherv), int (*)(dcp_comm *, const void *, size_t, void *, const size_t *,     \
                                     int32_t, dcp_plugin_err *)))                                  \
  T("dcp_coll_plugin.scatterv",                                                                    \
    HAS_TYPE(CO_FN(scatterv), int (*)(dcp_comm *, const void *, const size_t *, void *, size_t,    \
                                      int32_t, dcp_plugin_err *)))                                 \
  T("dcp_coll_plugin.allreduce_i64",                                                               \
    HAS_TYPE(CO_FN(allreduce_i64), int (*)(dcp_comm *, int64_t *, size_t, uint32_t,                \
                                           dcp_plugin_err *)))                                     \
  T("dcp_coll_plugin.group_bcast",                                                                 \
    HAS_TYPE(CO_FN(group_bcast), int (*)(dcp_comm *, const int32_t *, size_t, void *, size_t,      \
                                         int32_t, dcp_plugin_err *)))                              \
  T("dcp_coll_plugin.host_id", HAS_TYPE(CO_FN(host_id), uint64_t (*)(const dcp_comm *)))

/* ---- at build time ------------------------------------------------------- */

#ifndef DCP_ABI_LAYOUT_RUNTIME_ONLY
#define SA_S(type, size, align)                                          \
  _Static_assert(sizeof(type) == (size), "ABI: sizeof(" #type ") is " #size); \
  _Static_assert(_Alignof(type) == (align), "ABI: _Alignof(" #type ") is " #align);
#define SA_F(type, member, off, size)                                            \
  _Static_assert(offsetof(type, member) == (off),                                \
                 "ABI: offsetof(" #type ", " #member ") is " #off);              \
  _Static_assert(sizeof(((type *)NULL)->member) == (size),                       \
                 "ABI: sizeof " #type "." #member " is " #size);
#define SA_E(type, size) _Static_assert(sizeof(type) == (size), "ABI: sizeof(" #type ") is " #size);
#define SA_V(name, value) _Static_assert((name) == (value), "ABI: " #name " is " #value);
#define SA_T(what, same) _Static_assert(same, "ABI: the type of " what " changed");

#if defined(__LP64__)
DCP_H_STRUCTS(SA_S, SA_F)
DCP_PLUGIN_H_STRUCTS(SA_S, SA_F)
#endif
ENUM_SIZES(SA_E)
VALUES(SA_V)
SIGNATURES(SA_T)
_Static_assert(sizeof DCP_PLUGIN_ENTRY_SYMBOL == sizeof "dcp_plugin_entry",
               "ABI: DCP_PLUGIN_ENTRY_SYMBOL is \"dcp_plugin_entry\"");
#endif

/* ---- at run time --------------------------------------------------------- */

static int mismatches;

/* Count and show one difference; the test fails at its end with all shown. */
static void check(const char *what, long long got, long long want) {
  if (got == want) return;
  print_error("ABI: %s is %lld, expected %lld\n", what, got, want);
  mismatches++;
}

#define RT_S(type, size, align)                               \
  check("sizeof(" #type ")", (long long)sizeof(type), size); \
  check("_Alignof(" #type ")", (long long)_Alignof(type), align);
#define RT_F(type, member, off, size)                                                  \
  check("offsetof(" #type ", " #member ")", (long long)offsetof(type, member), off);   \
  check("sizeof " #type "." #member, (long long)sizeof(((type *)NULL)->member), size);
#define RT_E(type, size) check("sizeof(" #type ")", (long long)sizeof(type), size);
#define RT_V(name, value) check(#name, (long long)(name), value);
#define RT_T(what, same) check("the type of " what " (1: as pinned)", same, 1);

/* Every public struct, LP64 only. */
static void test_struct_layout(void **state) {
  (void)state;
#if defined(__LP64__)
  mismatches = 0;
  DCP_H_STRUCTS(RT_S, RT_F)
  DCP_PLUGIN_H_STRUCTS(RT_S, RT_F)
  assert_int_equal(mismatches, 0);
#else
  print_message("struct layouts are pinned for LP64 only: skipped on this target\n");
  skip();
#endif
}

/* Enum sizes, values, function pointer types: every target. */
static void test_values_and_signatures(void **state) {
  (void)state;
  mismatches = 0;
  ENUM_SIZES(RT_E)
  VALUES(RT_V)
  SIGNATURES(RT_T)
  assert_string_equal(DCP_PLUGIN_ENTRY_SYMBOL, "dcp_plugin_entry");
  assert_int_equal(mismatches, 0);
}

/* DCP_HAS_FIELD: a field is present exactly when it ends within struct_size. */
static void test_has_field(void **state) {
  (void)state;
  dcp_coll_config cfg = {.struct_size = sizeof cfg};
  assert_true(DCP_HAS_FIELD(&cfg, dcp_coll_config, struct_size));
  assert_true(DCP_HAS_FIELD(&cfg, dcp_coll_config, options));
  /* a caller built against a header that ended at timeout_ms */
  cfg.struct_size = (uint32_t)(offsetof(dcp_coll_config, timeout_ms) + sizeof cfg.timeout_ms);
  assert_true(DCP_HAS_FIELD(&cfg, dcp_coll_config, timeout_ms));
  assert_false(DCP_HAS_FIELD(&cfg, dcp_coll_config, options));
  /* one byte short of a field is without it */
  cfg.struct_size--;
  assert_false(DCP_HAS_FIELD(&cfg, dcp_coll_config, timeout_ms));
  assert_true(DCP_HAS_FIELD(&cfg, dcp_coll_config, rendezvous));
  cfg.struct_size = 0;
  assert_false(DCP_HAS_FIELD(&cfg, dcp_coll_config, struct_size));
  /* through a pointer to const, as a plugin's open gets it */
  const dcp_storage_config sc = {.struct_size = (uint32_t)offsetof(dcp_storage_config, options)};
  const dcp_storage_config *p = &sc;
  assert_true(DCP_HAS_FIELD(p, dcp_storage_config, world_size));
  assert_false(DCP_HAS_FIELD(p, dcp_storage_config, options));
}

/* A helper of a plugin's own that adds context, the way dcp_plugin_vfail
 * is meant to be used. */
static int fail_with_prefix(dcp_plugin_err *err, int code, const char *fmt, ...)
    DCP_PLUGIN_FORMAT(3, 4);
static int fail_with_prefix(dcp_plugin_err *err, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int rc = dcp_plugin_vfail(err, code, fmt, ap);
  va_end(ap);
  if (err) {
    char tail[sizeof err->msg];
    memcpy(tail, err->msg, sizeof tail);
    snprintf(err->msg, sizeof err->msg, "ctx: %.500s", tail);
  }
  return rc;
}

/* dcp_plugin_fail: formats, truncates to fit, returns code, NULL err ok. */
static void test_fail_helper(void **state) {
  (void)state;
  dcp_plugin_err err = {{0}};
  assert_int_equal(dcp_plugin_fail(&err, DCP_ENAME, "bad name %s (%d)", "x/y", 7), DCP_ENAME);
  assert_string_equal(err.msg, "bad name x/y (7)");
  assert_int_equal(dcp_plugin_fail(NULL, DCP_EIO, "nowhere %d", 1), DCP_EIO);
  assert_int_equal(dcp_plugin_fail(&err, DCP_OK, "%s", ""), DCP_OK);
  assert_string_equal(err.msg, "");
  char big[2000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  memset(err.msg, 'z', sizeof err.msg);
  assert_int_equal(dcp_plugin_fail(&err, DCP_ECORRUPT, "%s", big), DCP_ECORRUPT);
  assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
  assert_int_equal(fail_with_prefix(&err, DCP_ETIMEDOUT, "after %d ms", 5), DCP_ETIMEDOUT);
  assert_string_equal(err.msg, "ctx: after 5 ms");
  assert_int_equal(fail_with_prefix(NULL, DCP_EPEER, "gone"), DCP_EPEER);
}

int main(int argc, char **argv) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_struct_layout),
      cmocka_unit_test(test_values_and_signatures),
      cmocka_unit_test(test_has_field),
      cmocka_unit_test(test_fail_helper),
  };
  return TU_RUN(tests, NULL, NULL);
}
