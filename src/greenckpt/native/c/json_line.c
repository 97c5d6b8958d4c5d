/*
 * json_line.c - the few JSON readings of one wire-format line (see json_line.h).
 */
#include "json_line.h"

#include <string.h>

static const char *blanks(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) ++p;
    return p;
}

/* Past the JSON string starting at the quote p; NULL if it does not end before `end`. */
static const char *skip_string(const char *p, const char *end) {
    for (++p; p < end; ++p) {
        if (*p == '\\') ++p;
        else if (*p == '"') return p + 1;
    }
    return NULL;
}

/* Past the JSON value starting at p (a string, a number or literal, or an object or array
 * skipped by depth); NULL if malformed or cut short. */
static const char *skip_value(const char *p, const char *end) {
    int depth = 0;
    do {
        p = blanks(p, end);
        if (p >= end) return NULL;
        if (*p == '"') {
            p = skip_string(p, end);
            if (p == NULL) return NULL;
        } else if (*p == '{' || *p == '[') {
            ++depth;
            ++p;
        } else if (*p == '}' || *p == ']') {
            if (--depth < 0) return NULL;
            ++p;
        } else if (*p == ',' || *p == ':') {
            if (depth == 0) return NULL;
            ++p;
        } else {
            while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ':' && *p != ' ' &&
                   *p != '\t' && *p != '\r' && *p != '\n')
                ++p;
        }
    } while (depth > 0);
    return p;
}

/* The value of top-level member `key` in the object line[0..n): its first byte and length;
 * 0 when absent or when the object is malformed before it. */
int gcj_member(const char *line, size_t n, const char *key, const char **val, size_t *vlen) {
    const char *p = blanks(line, line + n), *end = line + n;
    size_t klen = strlen(key);
    if (p >= end || *p++ != '{') return 0;
    for (;;) {
        const char *name, *name_end, *v;
        p = blanks(p, end);
        if (p >= end || *p != '"') return 0;
        name = p + 1;
        name_end = skip_string(p, end);
        if (name_end == NULL) return 0;
        p = blanks(name_end, end);
        if (p >= end || *p++ != ':') return 0;
        v = blanks(p, end);
        p = skip_value(v, end);
        if (p == NULL) return 0;
        if ((size_t)(name_end - 1 - name) == klen && memcmp(name, key, klen) == 0) {
            *val = v;
            *vlen = (size_t)(p - v);
            return 1;
        }
        p = blanks(p, end);
        if (p >= end || *p != ',') return 0;
        ++p;
    }
}

int gcj_is_literal(const char *v, size_t n, const char *lit) {
    return n == strlen(lit) && memcmp(v, lit, n) == 0;
}

/* A JSON number >= 0 (what "node" and "seconds" must be): digits, one '.', an exponent. */
int gcj_non_negative_number(const char *v, size_t n, int integer) {
    size_t i = 0;
    int digits = 0;
    if (n == 0) return 0;
    while (i < n && v[i] >= '0' && v[i] <= '9') ++i, ++digits;
    if (!digits || n > 30) return 0;
    if (integer) return i == n && (v[0] != '0' || n == 1);
    if (i < n && v[i] == '.') {
        ++i;
        while (i < n && v[i] >= '0' && v[i] <= '9') ++i;
    }
    if (i < n && (v[i] == 'e' || v[i] == 'E')) {
        ++i;
        if (i < n && (v[i] == '+' || v[i] == '-')) ++i;
        if (i == n) return 0;
        while (i < n && v[i] >= '0' && v[i] <= '9') ++i;
    }
    return i == n;
}

