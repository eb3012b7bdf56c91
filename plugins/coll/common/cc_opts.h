/* cc_opts.h — the "key=value,key=value" option strings of the collective
 * plugins (dcp_coll_config.options), parsed against a table of the keys a
 * plugin knows. Empty items are skipped; a key given twice keeps its last
 * value; an item without '=', an unknown key or a bad value is DCP_EINVAL
 * with a message that names it (and, for an unknown key, the known ones).
 * Internal (hidden symbols). */
#ifndef DCP_COLL_COMMON_CC_OPTS_H
#define DCP_COLL_COMMON_CC_OPTS_H

#include <stddef.h>
#include <stdint.h>

#include "dcp_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a value must be. */
typedef enum dcpi_cc_opt_kind {
  DCPI_CC_OPT_NAME, /* 1..max of [A-Za-z0-9_-] (safe in a file name) */
  DCPI_CC_OPT_TEXT, /* 1..max bytes, anything but ',' */
  DCPI_CC_OPT_SIZE  /* a decimal number in [lo, hi] */
} dcpi_cc_opt_kind;

/* One key a plugin knows, and where its value goes. */
typedef struct dcpi_cc_opt {
  const char *key;
  dcpi_cc_opt_kind kind;
  size_t max;      /* NAME, TEXT: the most bytes; out has room for max + 1 */
  uint64_t lo, hi; /* SIZE: the range */
  void *out;       /* NAME, TEXT: a char array (NUL-terminated); SIZE: a uint64_t */
  int *given;      /* set to 1 when the key appears (NULL: not wanted) */
} dcpi_cc_opt;

/* Parses opts (NULL: none) against known[0..n); who, when not NULL or
 * empty, starts every message ("who: ..."). The collectives pass NULL: the
 * core's "<plugin>: open: " is context enough. DCP_OK or DCP_EINVAL. */
int dcpi_cc_parse_options(const char *opts, const dcpi_cc_opt *known, size_t n, const char *who,
                          dcp_plugin_err *err);

#ifdef __cplusplus
}
#endif
#endif
