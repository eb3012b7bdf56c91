/* cc_opts.c — option strings (cc_opts.h). */
#include "cc_opts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp_plugin.h"

static const char NAME_CHARS[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

/* "a, b, c": the known keys, for a message (cap bytes). */
static void known_list(const dcpi_cc_opt *known, size_t n, char *out, size_t cap) {
  size_t used = 0;
  out[0] = '\0';
  for (size_t i = 0; i < n && used + 1 < cap; i++) {
    size_t k = strlen(known[i].key);
    if (used + k + 3 > cap) break;
    if (i) {
      memcpy(out + used, ", ", 2);
      used += 2;
    }
    memcpy(out + used, known[i].key, k + 1);
    used += k;
  }
}

/* Stores the value v (vlen bytes) of option o, checked against its kind. */
static int set_value(const dcpi_cc_opt *o, const char *v, size_t vlen, const char *who,
                     dcp_plugin_err *err) {
  if (o->kind == DCPI_CC_OPT_SIZE) {
    char num[32];
    char *end = NULL;
    if (vlen == 0 || vlen >= sizeof num || v[0] == '-' || v[0] == '+') goto bad_size;
    memcpy(num, v, vlen);
    num[vlen] = '\0';
    errno = 0;
    unsigned long long x = strtoull(num, &end, 10);
    if (errno || *end || x < o->lo || x > o->hi) goto bad_size;
    *(uint64_t *)o->out = (uint64_t)x;
    return DCP_OK;
  bad_size:
    return dcp_plugin_fail(err, DCP_EINVAL, "%s%s must be a decimal number in [%llu, %llu]", who,
                           o->key, (unsigned long long)o->lo, (unsigned long long)o->hi);
  }
  if (vlen == 0 || vlen > o->max)
    return dcp_plugin_fail(err, DCP_EINVAL, "%s%s= must be 1..%zu bytes", who, o->key, o->max);
  if (o->kind == DCPI_CC_OPT_NAME && strspn(v, NAME_CHARS) < vlen)
    return dcp_plugin_fail(err, DCP_EINVAL, "%s%s=\"%.*s\": want 1..%zu of [A-Za-z0-9_-]", who,
                           o->key, (int)vlen, v, o->max);
  memcpy(o->out, v, vlen);
  ((char *)o->out)[vlen] = '\0';
  return DCP_OK;
}

/* Parses one non-empty item (ilen bytes at item). */
static int parse_item(const char *item, size_t ilen, const dcpi_cc_opt *known, size_t n,
                      const char *who, dcp_plugin_err *err) {
  const char *eq = memchr(item, '=', ilen);
  if (!eq)
    return dcp_plugin_fail(err, DCP_EINVAL, "%soption \"%.*s\" is not key=value", who, (int)ilen,
                           item);
  size_t klen = (size_t)(eq - item);
  for (size_t i = 0; i < n; i++) {
    if (strlen(known[i].key) != klen || memcmp(known[i].key, item, klen) != 0) continue;
    int rc = set_value(&known[i], eq + 1, ilen - klen - 1, who, err);
    if (!rc && known[i].given) *known[i].given = 1;
    return rc;
  }
  char list[200];
  known_list(known, n, list, sizeof list);
  return dcp_plugin_fail(err, DCP_EINVAL, "%sunknown option \"%.*s\" (known: %s)", who, (int)klen,
                         item, list);
}

int dcpi_cc_parse_options(const char *opts, const dcpi_cc_opt *known, size_t n, const char *who,
                          dcp_plugin_err *err) {
  char pre[80] = ""; /* "who: ", or nothing */
  if (who && *who) snprintf(pre, sizeof pre, "%s: ", who);
  who = pre;
  while (opts && *opts) {
    size_t ilen = strcspn(opts, ",");
    if (ilen) {
      int rc = parse_item(opts, ilen, known, n, who, err);
      if (rc) return rc;
    }
    opts += ilen;
    if (*opts == ',') opts++;
  }
  return DCP_OK;
}
