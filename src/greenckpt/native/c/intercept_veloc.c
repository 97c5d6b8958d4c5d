/*
 * intercept_veloc.c - VeloC's checkpoint and restart calls, announced to greenckpt.
 *
 * Signatures are VeloC's public C API (include/veloc.h). Phases: VELOC_Checkpoint and
 * VELOC_Restart (one call each), and VELOC_Checkpoint_begin ... _end, VELOC_Restart_begin ...
 * _end (a phase spanning two calls in the calling thread); one VeloC may implement the first
 * through the second, and the phase is still announced once. Level: none. The blocking part
 * of a VeloC checkpoint writes the node-local scratch; whether erasure coding and the copy to
 * the persistent file system run then or later in VeloC's back-end depends on its mode and
 * intervals, which the application does not see. Bytes: the memory this process protected
 * (VELOC_Mem_protect's count times base_size, all of it even for a selective checkpoint),
 * plus for files the size of those routed (VELOC_Route_file) in the previous phase, measured
 * when it ended, or GREENCKPT_INTERCEPT_BYTES before the first, or 1 when there is nothing.
 * Path: `scratch` of the configuration file given to VELOC_Init, else the current directory.
 * Advice: VeloC has no run-time setting for parallelism; it is not applied, the runtime
 * records it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>

#include "intercept.h"

#define VELOC_SUCCESS 0
#define VELOC_FAILURE (-1)

typedef void *gci_comm; /* MPI_Comm, passed on unchanged: see intercept_fti.c */

typedef int (*init_fn)(gci_comm, const char *);
typedef int (*init_single_fn)(unsigned int, const char *);
typedef int (*protect_fn)(int, void *, size_t, size_t);
typedef int (*int_fn)(int);
typedef int (*void_fn)(void);
typedef int (*named_fn)(const char *, int);
typedef int (*route_fn)(const char *, char *);

#define GCI_FAMILY "VeloC" /* the library a missing function's line names (REAL) */

static char g_scratch[GCI_PATH_MAX];
static int64_t g_file_bytes;  /* files routed in the previous phase (0: none yet) */
static __thread int tl_open;  /* a begin/end phase is open in this thread */

static void read_config(const char *cfg_file) {
    char dir[GCI_PATH_MAX];
    gci_set_path(g_scratch, gci_config_value(cfg_file, "scratch", dir, sizeof dir) ? NULL : dir);
}

int VELOC_Init(gci_comm comm, const char *cfg_file) {
    REAL(init_fn, VELOC_Init);
    if (real_ == NULL) return VELOC_FAILURE;
    int result = real_(comm, cfg_file);
    read_config(cfg_file);
    return result;
}

int VELOC_Init_single(unsigned int id, const char *cfg_file) {
    REAL(init_single_fn, VELOC_Init_single);
    if (real_ == NULL) return VELOC_FAILURE;
    int result = real_(id, cfg_file);
    read_config(cfg_file);
    return result;
}

int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size) {
    REAL(protect_fn, VELOC_Mem_protect);
    if (real_ == NULL) return VELOC_FAILURE;
    int result = real_(id, ptr, count, base_size);
    if (result == VELOC_SUCCESS) gci_protect(GCI_VELOC, id, (int64_t)(count * base_size));
    return result;
}

int VELOC_Mem_unprotect(int id) {
    REAL(int_fn, VELOC_Mem_unprotect);
    if (real_ == NULL) return VELOC_FAILURE;
    int result = real_(id);
    if (result == VELOC_SUCCESS) gci_unprotect(GCI_VELOC, id);
    return result;
}

int VELOC_Mem_clear(void) {
    REAL(void_fn, VELOC_Mem_clear);
    if (real_ == NULL) return VELOC_FAILURE;
    int result = real_();
    if (result == VELOC_SUCCESS) gci_clear(GCI_VELOC);
    return result;
}

static const char *path(void) { return *g_scratch ? g_scratch : gci_cwd(); }

static int64_t bytes(void) {
    int64_t files = __atomic_load_n(&g_file_bytes, __ATOMIC_RELAXED);
    int64_t total = gci_protected(GCI_VELOC) + files;
    return total > 0 ? total : gci_env_bytes(1);
}

/* A one-call phase: VELOC_Checkpoint, VELOC_Restart. */
static int whole(int kind, named_fn real, const char *name, int version) {
    int announced = gci_open("veloc", kind, GREENCKPT_NO_LEVEL, path(), bytes());
    int result = real(name, version);
    gci_close(announced, kind, result == VELOC_SUCCESS);
    return result;
}

/* The first call of a two-call phase; a refused begin ends the phase at once. */
static int opening(int kind, named_fn real, const char *name, int version) {
    int announced = gci_open_split("veloc", kind, GREENCKPT_NO_LEVEL, path(), bytes());
    int result = real(name, version);
    if (result != VELOC_SUCCESS) {
        if (announced) { /* a refused second begin leaves the phase in progress alone */
            gci_route_measure(GCI_ROUTE_VELOC);
            gci_close_split(kind, 0);
        }
    } else if (announced) {
        tl_open = 1;
    }
    return result;
}

/* The second: routed files are measured before VeloC's call, which may move them. */
static int closing(int kind, int_fn real, int success) {
    int64_t files = tl_open ? gci_route_measure(GCI_ROUTE_VELOC) : 0;
    int result = real(success);
    if (files > 0) __atomic_store_n(&g_file_bytes, files, __ATOMIC_RELAXED);
    tl_open = 0;
    gci_close_split(kind, success && result == VELOC_SUCCESS);
    return result;
}

int VELOC_Checkpoint(const char *name, int version) {
    REAL(named_fn, VELOC_Checkpoint);
    if (real_ == NULL) return VELOC_FAILURE;
    return whole(GREENCKPT_CHECKPOINT, real_, name, version);
}

int VELOC_Restart(const char *name, int version) {
    REAL(named_fn, VELOC_Restart);
    if (real_ == NULL) return VELOC_FAILURE;
    return whole(GREENCKPT_RESTART, real_, name, version);
}

int VELOC_Checkpoint_begin(const char *name, int version) {
    REAL(named_fn, VELOC_Checkpoint_begin);
    if (real_ == NULL) return VELOC_FAILURE;
    return opening(GREENCKPT_CHECKPOINT, real_, name, version);
}

int VELOC_Checkpoint_end(int success) {
    REAL(int_fn, VELOC_Checkpoint_end);
    if (real_ == NULL) return VELOC_FAILURE;
    return closing(GREENCKPT_CHECKPOINT, real_, success);
}

int VELOC_Restart_begin(const char *name, int version) {
    REAL(named_fn, VELOC_Restart_begin);
    if (real_ == NULL) return VELOC_FAILURE;
    return opening(GREENCKPT_RESTART, real_, name, version);
}

int VELOC_Restart_end(int success) {
    REAL(int_fn, VELOC_Restart_end);
    if (real_ == NULL) return VELOC_FAILURE;
    return closing(GREENCKPT_RESTART, real_, success);
}

/* Not a phase: the routed path of a file of the open phase is kept to be measured. */
int VELOC_Route_file(const char *original, char *routed) {
    REAL(route_fn, VELOC_Route_file);
    if (real_ == NULL) return VELOC_FAILURE;
    int result = real_(original, routed);
    if (result == VELOC_SUCCESS && tl_open) gci_route_add(GCI_ROUTE_VELOC, routed);
    return result;
}
