/* name.c — the fqn / bytes-key rule (see name.h). */
#include "model/name.h"

#include <string.h>

/* Length of the UTF-8 sequence at s (at most `left` bytes available):
 * validated, shortest form, no surrogates; 0 when it is invalid. */
static size_t utf8_seq(const unsigned char *s, size_t left) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  size_t n;
  unsigned min, cp;
  if ((c & 0xE0) == 0xC0) n = 2, min = 0x80, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, min = 0x800, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, min = 0x10000, cp = c & 0x07;
  else return 0;
  if (n > left) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

/* The rule broken by the single byte at s[i], or NULL. ".." needs the
 * byte after it, so it is checked here too (i + 1 < len). */
static const char *byte_violation(const unsigned char *s, size_t i, size_t len) {
  if (s[i] == 0) return "contains a NUL byte";
  if (s[i] < 0x20 || s[i] == 0x7F) return "contains a control character";
  if (s[i] == '/') return "contains '/'";
  if (s[i] == '\\') return "contains '\\'";
  if (s[i] == '.' && i + 1 < len && s[i + 1] == '.') return "contains \"..\"";
  return NULL;
}

size_t dcpi_utf8_valid_prefix(const char *s, size_t len) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < len;) {
    size_t n = utf8_seq(u + i, len - i);
    if (!n) return i;
    i += n;
  }
  return len;
}

const char *dcpi_name_violation(const char *name, size_t len, size_t *at) {
  *at = 0;
  if (!name) return "is NULL";
  if (len == 0) return "is empty";
  if (len > DCP_MAX_NAME) {
    *at = DCP_MAX_NAME;
    return "is longer than DCP_MAX_NAME (4096) bytes";
  }
  const unsigned char *s = (const unsigned char *)name;
  for (size_t i = 0; i < len;) {
    const char *why = byte_violation(s, i, len);
    size_t n = why ? 0 : utf8_seq(s + i, len - i);
    if (!why && !n) why = "is not valid UTF-8";
    if (why) {
      *at = i;
      return why;
    }
    i += n;
  }
  return NULL;
}

/* The whole name into buf for a message, quoted by the caller: printable
 * ASCII and valid UTF-8 sequences as they are, any other byte (a control
 * character, a NUL, a stray byte) as \xNN, so no hostile byte is echoed;
 * cut with "..." when it does not fit in cap. */
static const char *shown_name(const char *name, size_t len, char *buf, size_t cap) {
  const unsigned char *s = (const unsigned char *)name;
  size_t o = 0, i = 0;
  while (i < len) {
    size_t n = s[i] >= 0x20 && s[i] != 0x7F ? utf8_seq(s + i, len - i) : 0;
    size_t need = n ? n : 4;
    if (o + need + 4 > cap) {
      memcpy(buf + o, "...", 4);
      return buf;
    }
    if (n) memcpy(buf + o, s + i, n);
    else {
      static const char hex[] = "0123456789abcdef";
      buf[o] = '\\', buf[o + 1] = 'x', buf[o + 2] = hex[s[i] >> 4], buf[o + 3] = hex[s[i] & 15];
    }
    o += need;
    i += n ? n : 1;
  }
  buf[o] = '\0';
  return buf;
}

dcp_status dcpi_name_check(const char *name, size_t len, const char *what, dcp_status code,
                           dcpi_err *err) {
  size_t at;
  const char *why = dcpi_name_violation(name, len, &at);
  if (!why) return DCP_OK;
  if (!name || len == 0) return dcpi_fail(err, code, "%s %s", what, why);
  char shown[256];
  shown_name(name, len > DCP_MAX_NAME ? DCP_MAX_NAME : len, shown, sizeof shown);
  if (len > DCP_MAX_NAME) return dcpi_fail(err, code, "%s '%s' %s", what, shown, why);
  return dcpi_fail(err, code, "%s '%s' %s at byte %zu (fqns and keys must be UTF-8 without "
                   "NUL, control characters, '/', '\\' or \"..\")", what, shown, why, at);
}
