/* cc_host.h — the host id every collective reports through its table's
 * host_id (include/dcp_plugin.h): equal for the ranks of one host, one
 * network stack of one machine, and different otherwise. It is computed
 * locally, so ranks agree on it without a message: the same machine, boot
 * and network namespace give the same id in every process. */
#ifndef DCPI_CC_HOST_H
#define DCPI_CC_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FNV-1a 64 of this machine's host name, the kernel's boot id (one per
 * machine and boot: tells apart machines that share a host name) and the
 * device and inode of /proc/self/ns/net (one per network namespace:
 * containers or namespaces on one machine are hosts of their own, as
 * their traffic to each other is network traffic). What cannot be read
 * is left out of the hash. Never 0. No errors. */
uint64_t dcpi_cc_host_id(void);

#ifdef __cplusplus
}
#endif
#endif
