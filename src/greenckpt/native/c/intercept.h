/*
 * intercept.h - shared parts of libgreenckpt_intercept (internal; not installed for users).
 *
 * Why: the wrappers of FTI, SCR and VeloC differ only in which calls open and close a phase
 * and where its level, path and bytes come from. Finding the real function, announcing exactly
 * once per outermost call, keeping errno, the table of protected sizes and reading a library's
 * configuration file are the same for all three, so they live in intercept_common.c.
 */
#ifndef GREENCKPT_INTERCEPT_H
#define GREENCKPT_INTERCEPT_H

#include <stddef.h>
#include <stdint.h>

#include "greenckpt.h"
#include "internal.h"

#define GCI_PATH_MAX 4096

/* The real function `name` (the next definition after this library), or NULL after one line
 * on stderr saying it is missing. `family` names the library in that line. */
void *gci_real(const char *family, const char *name);

/* One wrapped function's real definition, looked up at its first call (gci_real_once). */
struct gci_real_slot {
    void *fn;
    int state; /* 0: not looked up, 1: being looked up, 2: fn is the answer */
};

/* gci_real, once per slot: the first caller looks up and publishes the answer (release;
 * readers acquire); a thread arriving during that lookup does its own dlsym (the same answer,
 * no second stderr line) instead of reading a pointer still being written. No lock: a fork
 * in the middle cannot leave one held. */
void *gci_real_once(struct gci_real_slot *slot, const char *family, const char *name);

/* In a wrapper, before anything else: `real_`, the real `name` of function pointer type
 * `type` (NULL when missing). The file defines GCI_FAMILY, the library's name in messages. */
#define REAL(type, name)                                                                   \
    static struct gci_real_slot real_slot_;                                                \
    type real_ = (type)gci_real_once(&real_slot_, GCI_FAMILY, #name)

/* Whether the wrappers of `family` ("fti", "scr", "veloc") announce phases: all of them when
 * GREENCKPT_INTERCEPT is unset, else only the families it names (comma-separated). */
int gci_enabled(const char *family);

/* An announced call. gci_open() is called before the real function and gci_close() after it,
 * always in pairs: the outermost call of this thread announces a begin (when its family is
 * enabled); calls nested inside it (a library calling its own wrapped entry points) do not.
 * Both keep errno as they found it. Returns 1 when this call announced the begin. */
int gci_open(const char *family, int kind, int level, const char *path, int64_t bytes);
void gci_close(int announced, int kind, int ok);

/* The same for a phase that spans two calls (VELOC_Checkpoint_begin ... _end): begin is
 * announced by gci_open_split() unless an announced call is running in this thread; the phase
 * stays open, without holding the guard, until gci_close_split(). Returns 1 when announced. */
int gci_open_split(const char *family, int kind, int level, const char *path, int64_t bytes);
void gci_close_split(int kind, int ok);

/* Thread-local nesting depth of wrapped calls (0: not inside any). */
int gci_depth(void);

/* Sizes protected by the application, keyed by (table, id): set, remove, clear, sum. */
enum gci_table { GCI_FTI = 0, GCI_VELOC = 1, GCI_FTI_TYPES = 2, GCI_NTABLES = 3 };
void gci_protect(enum gci_table table, int id, int64_t bytes);
void gci_unprotect(enum gci_table table, int id);
void gci_clear(enum gci_table table);
int64_t gci_protected(enum gci_table table);
int gci_lookup(enum gci_table table, int id, int64_t *bytes); /* 0: found, -1: not */

/* Files routed during an open phase (SCR_Route_file, VELOC_Route_file), whose sizes are
 * measured when it ends and become the next phase's estimate. */
enum gci_route { GCI_ROUTE_SCR = 0, GCI_ROUTE_VELOC = 1, GCI_NROUTES = 2 };
void gci_route_add(enum gci_route which, const char *path);
int64_t gci_route_measure(enum gci_route which); /* sum of sizes; forgets the list */

/* GREENCKPT_INTERCEPT_BYTES (a positive integer), or `fallback` when unset or invalid. A
 * size below 1 given to gci_open/gci_open_split is announced as 1, except
 * GREENCKPT_UNKNOWN_BYTES, which the report shows as unknown. */
int64_t gci_env_bytes(int64_t fallback);

/* The value of `key` in an INI-like configuration file ("key = value" lines, '#' or ';'
 * comments, sections ignored) copied into out; 0 when found, -1 otherwise (out unchanged). */
int gci_config_value(const char *file, const char *key, char *out, size_t size);

/* The current directory (or "." when it cannot be read), a default path for announcements. */
const char *gci_cwd(void);

/* Copy `src` into `dst` (size GCI_PATH_MAX), or the current directory when src is NULL/"" */
void gci_set_path(char *dst, const char *src);

#endif /* GREENCKPT_INTERCEPT_H */
