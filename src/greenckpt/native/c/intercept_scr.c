/*
 * intercept_scr.c - SCR's output, checkpoint and restart calls, announced to greenckpt.
 *
 * Signatures are SCR 3.x's public API (src/scr.h), with the older SCR_Start_checkpoint /
 * SCR_Complete_checkpoint pair. A phase spans Start_... to Complete_... in the calling thread.
 * Levels: SCR picks its redundancy from its configuration, which the application does not
 * see; greenckpt announces the level it can know: a checkpoint dataset with SCR_FLAG_OUTPUT
 * (written through to the prefix file system before Complete_output returns) is L4; an
 * output-only dataset (no SCR_FLAG_CHECKPOINT) is not announced at all; a checkpoint-only
 * dataset is the level of SCR_COPY_TYPE from the environment when it is set there (SINGLE 1,
 * PARTNER 2, XOR or RS 3), else none (FILE: descriptors choose per checkpoint, which the
 * application does not see); a restart has none. Bytes: SCR is told a
 * dataset's files one by one (SCR_Route_file) after it starts, so the size announced at the
 * start is the previous dataset's, measured when it completed (the routed files' sizes);
 * before the first one, GREENCKPT_INTERCEPT_BYTES, else 1 (unknown). Path: SCR_CACHE_BASE or
 * SCR_PREFIX from the environment, else the current directory.
 * Advice: SCR's flush width (SCR_FLUSH_WIDTH) can be set only before SCR_Init, by the same
 * call on every process, so the advised parallelism is not applied; the runtime records it.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "intercept.h"

#define SCR_SUCCESS 0
#define SCR_FAILURE 1 /* SCR's error code (src/scr_util.h) */
#define SCR_FLAG_CHECKPOINT (1 << 0)
#define SCR_FLAG_OUTPUT (1 << 1)

typedef int (*start_output_fn)(const char *, int);
typedef int (*start_restart_fn)(char *);
typedef int (*int_fn)(int);
typedef int (*void_fn)(void);
typedef int (*route_fn)(const char *, char *);

#define REAL(type, name)                                                        \
    static type real_;                                                          \
    static int looked_;                                                         \
    if (!__atomic_load_n(&looked_, __ATOMIC_ACQUIRE)) {                         \
        real_ = (type)gci_real("SCR", #name);                                   \
        __atomic_store_n(&looked_, 1, __ATOMIC_RELEASE);                        \
    }

static int64_t g_last_bytes;  /* the previous dataset's routed bytes (0: none yet) */
static __thread int tl_open;  /* a dataset started in this thread: its files are measured */

static const char *scr_path(void) {
    const char *cache = getenv("SCR_CACHE_BASE");
    const char *prefix = getenv("SCR_PREFIX");
    if (cache != NULL && *cache != '\0') return cache;
    if (prefix != NULL && *prefix != '\0') return prefix;
    return gci_cwd();
}

static int64_t estimate(void) {
    int64_t last = __atomic_load_n(&g_last_bytes, __ATOMIC_RELAXED);
    return last > 0 ? last : gci_env_bytes(1);
}

/* The level of a dataset started with `flags` (see the file's comment). */
static int level_of(int flags) {
    const char *copy = getenv("SCR_COPY_TYPE");
    if (flags & SCR_FLAG_OUTPUT) return 4;
    if (copy == NULL) return GREENCKPT_NO_LEVEL;
    if (strcmp(copy, "SINGLE") == 0) return 1;
    if (strcmp(copy, "PARTNER") == 0) return 2;
    if (strcmp(copy, "XOR") == 0 || strcmp(copy, "RS") == 0) return 3;
    return GREENCKPT_NO_LEVEL; /* FILE: the config file's descriptors decide, per checkpoint */
}

/* A dataset starts (before SCR's call): announce it; its routed files are collected. 1 when
 * this call opened the phase (not when one of its kind is already open in this thread). */
static int starting(int kind, int level) {
    int announced = gci_open_split("scr", kind, level, scr_path(), estimate());
    if (announced) tl_open = 1;
    return announced;
}

/* After SCR's start call: if SCR refused to start the dataset this call announced, that phase
 * is over at once; a refused second start leaves the dataset really in progress alone. */
static void start_result(int kind, int result, int announced) {
    if (result == SCR_SUCCESS || !announced) return;
    tl_open = 0;
    gci_route_measure(GCI_ROUTE_SCR); /* forget what was routed */
    gci_close_split(kind, 0);
}

/* Complete_output/_checkpoint/_restart: the routed files are measured before SCR's call (which
 * may move or flush them), become the next estimate, and the phase ends. */
static int complete(int kind, int valid, int_fn real) {
    int open = tl_open;
    int64_t bytes = open ? gci_route_measure(GCI_ROUTE_SCR) : 0;
    int result = real(valid);
    if (bytes > 0) __atomic_store_n(&g_last_bytes, bytes, __ATOMIC_RELAXED);
    tl_open = 0;
    gci_close_split(kind, valid && result == SCR_SUCCESS);
    return result;
}

int SCR_Start_output(const char *name, int flags) {
    REAL(start_output_fn, SCR_Start_output);
    if (real_ == NULL) return SCR_FAILURE;
    /* an output-only dataset (results, not a checkpoint) is not a checkpoint phase */
    int announced = flags & SCR_FLAG_CHECKPOINT ? starting(GREENCKPT_CHECKPOINT, level_of(flags))
                                                : 0;
    int result = real_(name, flags);
    start_result(GREENCKPT_CHECKPOINT, result, announced);
    return result;
}

int SCR_Complete_output(int valid) {
    REAL(int_fn, SCR_Complete_output);
    if (real_ == NULL) return SCR_FAILURE;
    return complete(GREENCKPT_CHECKPOINT, valid, real_);
}

int SCR_Start_checkpoint(void) {
    REAL(void_fn, SCR_Start_checkpoint);
    if (real_ == NULL) return SCR_FAILURE;
    int announced = starting(GREENCKPT_CHECKPOINT, level_of(SCR_FLAG_CHECKPOINT));
    int result = real_();
    start_result(GREENCKPT_CHECKPOINT, result, announced);
    return result;
}

int SCR_Complete_checkpoint(int valid) {
    REAL(int_fn, SCR_Complete_checkpoint);
    if (real_ == NULL) return SCR_FAILURE;
    return complete(GREENCKPT_CHECKPOINT, valid, real_);
}

int SCR_Start_restart(char *name) {
    REAL(start_restart_fn, SCR_Start_restart);
    if (real_ == NULL) return SCR_FAILURE;
    int announced = starting(GREENCKPT_RESTART, GREENCKPT_NO_LEVEL);
    int result = real_(name);
    start_result(GREENCKPT_RESTART, result, announced);
    return result;
}

int SCR_Complete_restart(int valid) {
    REAL(int_fn, SCR_Complete_restart);
    if (real_ == NULL) return SCR_FAILURE;
    return complete(GREENCKPT_RESTART, valid, real_);
}

/* Not a phase: the routed path of a file of the open dataset is kept to be measured. */
int SCR_Route_file(const char *name, char *file) {
    REAL(route_fn, SCR_Route_file);
    if (real_ == NULL) return SCR_FAILURE;
    int result = real_(name, file);
    if (result == SCR_SUCCESS && tl_open) gci_route_add(GCI_ROUTE_SCR, file);
    return result;
}
