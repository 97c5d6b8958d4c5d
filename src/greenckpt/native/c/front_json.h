/*
 * front_json.h - just enough JSON for the native front (front.c) to read a request line.
 *
 * Why not a JSON library: the front only needs a few top-level members of a flat object
 * (event, kind, scope, and an end's ok/node/seconds) and must not add a dependency beyond
 * libc; anything it cannot read is passed to the runtime, which parses it fully.
 */
#ifndef GREENCKPT_FRONT_JSON_H
#define GREENCKPT_FRONT_JSON_H

#include <stddef.h>

/* The value of top-level member `key` in the object line[0..n): its first byte and length;
 * 0 when absent or when the object is malformed before it. */
int gcf_member(const char *line, size_t n, const char *key, const char **val, size_t *vlen);

/* Whether the value v[0..n) is exactly the text `lit` (e.g. `true`, `"begin"`). */
int gcf_is_literal(const char *v, size_t n, const char *lit);

/* Whether v[0..n) is a JSON number >= 0 (`integer`: without fraction or exponent). */
int gcf_non_negative_number(const char *v, size_t n, int integer);

#endif
