/*
 * json_line.h - just enough JSON to read one line of the runtime's wire format: the native
 * front (front.c) reads requests with it, the C phase API (greenckpt.c) the runtime's replies.
 *
 * Why not a JSON library: both need only a few top-level members of a flat object (event,
 * kind, scope and an end's ok/node/seconds; a reply's ok, error and io_processes) and must not
 * add a dependency beyond libc; the front passes anything it cannot read to the runtime, which
 * parses it fully. The functions are hidden: the libraries that link this file do not export
 * them into the application's namespace.
 */
#ifndef GREENCKPT_JSON_LINE_H
#define GREENCKPT_JSON_LINE_H

#include <stddef.h>

#define GCJ_HIDDEN __attribute__((visibility("hidden")))

/* The value of top-level member `key` in the object line[0..n): its first byte and length;
 * 0 when absent or when the object is malformed before it. */
GCJ_HIDDEN int gcj_member(const char *line, size_t n, const char *key, const char **val,
                          size_t *vlen);

/* Whether the value v[0..n) is exactly the text `lit` (e.g. `true`, `"begin"`). */
GCJ_HIDDEN int gcj_is_literal(const char *v, size_t n, const char *lit);

/* Whether v[0..n) is a JSON number >= 0 (`integer`: without fraction or exponent). */
GCJ_HIDDEN int gcj_non_negative_number(const char *v, size_t n, int integer);

#endif
