/* save_layout_bytes.h — bytes items on the per-rank planning path
 * (save_layout.h). A rank cannot tell by itself whether a lower rank holds
 * the same REPLICATED bytes item, so each offer lists the rank's bytes
 * items (key, scope, length); rank 0 checks them as the whole plan does
 * (one scope per key, replicas of one length, no key that is also a
 * tensor), chooses the lowest holder of each REPLICATED key as its writer
 * and sends each rank one flag per item it offered; a PER_RANK item is
 * written by its rank. At the commit every expected item must arrive once.
 *
 * Offer part (after the meshes): varint n, then per item in the state's
 * order: varint key length, key, u8 scope, varint length.
 * Assignment to a rank: u8 1 (0: rank 0 refused the offers; the agreement
 * that follows carries why), varint n, n x u8 (1: write item i). */
#ifndef DCP_RUNTIME_SAVE_LAYOUT_BYTES_H
#define DCP_RUNTIME_SAVE_LAYOUT_BYTES_H

#include <stdbool.h>
#include <stdint.h>

#include "base/strmap.h"
#include "base/wire.h"
#include "metadata/meta.h"
#include "model/state.h"

/* Every rank: append st's bytes items to its offer. */
void dcpi_lbytes_put_offer(const dcp_state *st, dcpi_wbuf *out);

/* Rank 0's view of every rank's bytes items. */
typedef struct dcpi_lbytes_item {
  char *key; /* owned, NUL-terminated */
  size_t key_len;
  int32_t rank;
  uint32_t index; /* in the rank's offer (its state's order) */
  uint8_t scope;  /* dcp_scope */
  uint8_t writes; /* this rank writes it */
  uint8_t seen;   /* its result arrived */
  uint64_t length;
} dcpi_lbytes_item;

typedef struct dcpi_lbytes {
  dcpi_lbytes_item *items; /* in (rank, index) order: offers are read by rank */
  size_t n, cap;
} dcpi_lbytes;

/* Rank 0: read rank's bytes part of its offer from r (malformed:
 * DCP_ECORRUPT naming the rank). */
dcp_status dcpi_lbytes_read(dcpi_lbytes *b, dcpi_rbuf *r, int32_t rank, dcpi_err *err);

/* Rank 0, after every offer: check the items against each other and the
 * tensor names (DCP_ESCOPE: one key with two scopes, or replicas of two
 * lengths; DCP_EMISMATCH: a key that is a tensor elsewhere) and choose the
 * writers. Deterministic. */
dcp_status dcpi_lbytes_settle(dcpi_lbytes *b, const dcpi_strmap *tensor_names, dcpi_err *err);

/* Rank 0: the assignment for `rank` (see above; ok 0 sends a refusal). */
void dcpi_lbytes_assignment(const dcpi_lbytes *b, int32_t rank, bool ok, dcpi_wbuf *out);

/* Every rank: decode its assignment for a state of n bytes items into
 * *writes (malloc'd, n flags; NULL when n is 0) and *ok. A message that
 * does not fit is DCP_ECORRUPT. */
dcp_status dcpi_lbytes_parse_assignment(const uint8_t *msg, size_t len, size_t n, bool *ok,
                                        uint8_t **writes, dcpi_err *err);

/* Rank 0 at the commit: rank wrote its item `index` to ref; recorded in md.
 * An unknown, repeated or unassigned item, or a ref of another length, is
 * DCP_ECORRUPT. */
dcp_status dcpi_lbytes_take(dcpi_lbytes *b, dcpi_md *md, int32_t rank, uint64_t index,
                            const dcp_storage_ref *ref, dcpi_err *err);

/* Rank 0: DCP_OK when every assigned item arrived, else DCP_EINCOMPLETE
 * naming it. */
dcp_status dcpi_lbytes_complete(const dcpi_lbytes *b, dcpi_err *err);

void dcpi_lbytes_free(dcpi_lbytes *b);

#endif
