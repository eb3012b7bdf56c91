/* name.h — the one rule for fqns and bytes-item keys, applied wherever a
 * name enters the library: the state (dcp_state_add_*), the metadata
 * builder and decoder, the per-rank metadata merge (through the decoder)
 * and safetensors import.
 *
 * A name is 1..DCP_MAX_NAME bytes of valid UTF-8 (shortest form, no
 * surrogates) with no NUL, no control character (U+0000..U+001F, U+007F),
 * no '/' or '\\' and no "..". Names never become file paths, but they do
 * become keys of exported safetensors files, lines of `dcp inspect` and
 * paths in other tools (PyTorch's DCP keys, a user's own dump scripts), so
 * path separators and parent references are refused up front rather than
 * trusted to every consumer. */
#ifndef DCP_MODEL_NAME_H
#define DCP_MODEL_NAME_H

#include <stddef.h>

#include "base/err.h"

/* Check the len bytes at name (which may hold an embedded NUL: lengths
 * that arrive with the bytes are checked as given). On a violation, fails
 * err with `code` and a message "<what> <rule> at byte <i>" (plus a
 * printable prefix of the name when there is one) and returns code;
 * DCP_OK otherwise. `what` names the name's role ("tensor fqn", ...). */
dcp_status dcpi_name_check(const char *name, size_t len, const char *what, dcp_status code,
                           dcpi_err *err);

/* The rule only: NULL when the len bytes at name are a valid name, else a
 * static description of the first rule broken ("contains '/'", ...) with
 * its byte offset in *at. */
const char *dcpi_name_violation(const char *name, size_t len, size_t *at);

/* Where the len bytes at s stop being valid UTF-8 (shortest form, no
 * surrogates; any code point, controls included): the byte offset of the
 * first invalid sequence, or len when all of it is valid. For strings that
 * are not names (key/value values) but must still be UTF-8, as dcp.h says
 * of every string, because they become JSON (safetensors __metadata__,
 * `dcp inspect --json`). */
size_t dcpi_utf8_valid_prefix(const char *s, size_t len);

#endif
