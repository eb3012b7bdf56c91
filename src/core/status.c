/* status.c — version query and status code names. */
#include "dcp.h"

#define DCPI_STR2(x) #x
#define DCPI_STR(x) DCPI_STR2(x)

unsigned dcp_version_number(void) { return DCP_VERSION_NUMBER; }

const char *dcp_version_string(void) {
  return DCPI_STR(DCP_VERSION_MAJOR) "." DCPI_STR(DCP_VERSION_MINOR) "." DCPI_STR(
      DCP_VERSION_PATCH);
}

int dcp_is_error(dcp_status rc) { return rc < 0; }

const char *dcp_strerror(dcp_status rc) {
  switch (rc) {
    case DCP_OK: return "ok";
    case DCP_EINVAL: return "invalid argument";
    case DCP_ENOMEM: return "out of memory";
    case DCP_EOVERFLOW: return "size arithmetic overflows int64";
    case DCP_ECORRUPT: return "corrupt data";
    case DCP_EVERSION: return "unsupported format version";
    case DCP_EMISMATCH: return "dtype or shape mismatch";
    case DCP_EBOUNDS: return "box out of tensor bounds";
    case DCP_EOVERLAP: return "overlapping boxes";
    case DCP_EEXIST: return "already exists";
    case DCP_ENOTFOUND: return "not found";
    case DCP_ESCOPE: return "bytes item scope conflict";
    case DCP_ENAME: return "invalid name";
    case DCP_EINCOMPLETE: return "incomplete (not fully covered or not committed)";
    case DCP_EIO: return "storage I/O error";
    case DCP_ENOSPC: return "storage full";
    case DCP_ETIMEDOUT: return "deadline passed";
    case DCP_EPEER: return "another rank failed";
    case DCP_EPLUGIN: return "plugin error";
    case DCP_EBUSY: return "checkpoint directory busy (another save holds it)";
    case DCP_ESTALE: return "checkpoint changed under this save";
    case DCP_EREPLICA: return "replicas of a box differ between ranks";
  }
  return "unknown status";
}
