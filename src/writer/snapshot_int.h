/* snapshot_int.h — what the writer's snapshot store (snapshot.c) lends the
 * peer replication (snap_peer.c), and nothing else uses. */
#ifndef DCP_WRITER_SNAPSHOT_INT_H
#define DCP_WRITER_SNAPSHOT_INT_H

#include "writer/snapshot.h"

/* The newest snapshot of origin for path: its table into *r (owned by the
 * caller: dcpi_snap_reply_free) and a duplicate of its memfd (*fd, the
 * caller closes it). false, *fd -1, when there is none. */
bool dcpi_snap_lookup(dcpi_snap_store *s, int32_t origin, const char *path,
                      dcpi_snap_reply *r, int *fd);

/* Keep a copy of origin's snapshot of path that arrived from a peer: the
 * memfd fd (taken over) with the files of r (taken over, r is emptied),
 * evicting as for the store's own. */
void dcpi_snap_adopt(dcpi_snap_store *s, int32_t origin, const char *path, int fd,
                     dcpi_snap_reply *r);

#endif
