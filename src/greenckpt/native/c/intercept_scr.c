/*
 * intercept_scr.c - SCR's output, checkpoint, flush and restart work, announced to greenckpt.
 *
 * Signatures are SCR 3.x's public API (src/scr.h), with the older SCR_Start_checkpoint /
 * SCR_Complete_checkpoint pair. Why this much modelling: the application's calls do not show
 * what SCR does with a dataset; SCR's settings do (src/scr.c and src/scr_reddesc.c of SCR
 * 3.1, whose behaviour a real 3.1.0 showed: issue 30). So the settings are read as SCR reads
 * them at SCR_Init (src/scr_param.c: environment, then the user file SCR_CONF_FILE or
 * SCR_PREFIX/.scrconf, then what the application set with SCR_Config, which is wrapped, then
 * /etc/scr.conf), never by calling into SCR (its SCR_Config query is collective):
 *  - SCR_CACHE_BYPASS (default 1): a dataset is written straight to SCR_PREFIX/<name>, so a
 *    checkpoint is L4 at the prefix; with 0 it goes to the cache (SCR_CACHE_BASE, default
 *    /dev/shm) at the level of SCR_COPY_TYPE (compared without case; default XOR): SINGLE 1,
 *    PARTNER 2, XOR/RS 3, another value (FILE: descriptors) none. SCR forces SINGLE when every
 *    rank is on one node; the interposer learns that from the launcher (one_node), and says
 *    no level when it cannot tell.
 *  - a cached checkpoint is flushed to the prefix inside SCR_Complete_output when it is also
 *    output, or when SCR_FLUSH (default 10) divides its checkpoint number; SCR_Finalize
 *    flushes the latest checkpoint when SCR_FLUSH > 0 and it is still only in cache. Those
 *    calls are announced as flush phases (L4, the prefix); an asynchronous flush
 *    (SCR_FLUSH_ASYNC=1) runs in the background and is not announced.
 *  - a restart's work happens before the application reads: SCR_Init rebuilds from the cache
 *    when its cache index (SCR_CNTL_BASE/USER/scr.JOBID/cindex.scrinfo) exists, and
 *    SCR_Have_restart fetches from the prefix when SCR_PREFIX/.scr/index.scr exists. The
 *    restart phase begins there and lasts to SCR_Complete_restart; it fails when SCR then
 *    has no checkpoint to offer, and ends at the next dataset or SCR_Finalize when the
 *    application reads none.
 * Bytes: SCR is told a dataset's files one by one (SCR_Route_file) after it starts, so a
 * checkpoint's begin carries the previous dataset's routed size, a flush the size of the
 * dataset it flushes; before any dataset completed, GREENCKPT_INTERCEPT_BYTES, else unknown
 * (GREENCKPT_UNKNOWN_BYTES: the report says so). An output-only dataset is not announced.
 * Advice: SCR's flush width can be set only before SCR_Init, identically on every process, so
 * the advised parallelism is not applied; the runtime records it.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "intercept.h"

#define SCR_SUCCESS 0
#define SCR_FAILURE 1 /* SCR's error code (src/scr_util.h) */
#define SCR_FLAG_CHECKPOINT (1 << 0)
#define SCR_FLAG_OUTPUT (1 << 1)
#define APP_MAX 64 /* settings an application may give SCR_Config before SCR_Init */

typedef int (*start_output_fn)(const char *, int);
typedef int (*start_restart_fn)(char *);
typedef int (*int_fn)(int);
typedef int (*void_fn)(void);
typedef int (*route_fn)(const char *, char *);
typedef int (*have_fn)(int *, char *);
typedef const char *(*config_fn)(const char *);

#define GCI_FAMILY "SCR" /* the library a missing function's line names (REAL) */

/* SCR's settings as resolved at SCR_Init (SCR allows changing them only before it). */
static struct {
    int bypass, flush, async, level;
    char cache[GCI_PATH_MAX], prefix[GCI_PATH_MAX], cindex[GCI_PATH_MAX + 600];
} g_scr;
static int g_resolved;
static char *g_app[APP_MAX];    /* "KEY=VALUE" given to SCR_Config by the application */
static int g_ckpt_id;           /* checkpoints started since SCR_Init (SCR numbers them 1..) */
static int64_t g_last_bytes;    /* the previous dataset's routed bytes (0: none yet) */
static int64_t g_cached_bytes;  /* the latest checkpoint, in cache only (-1: none) */
static int g_restart_asked;     /* SCR_Have_restart was called since SCR_Init */
static __thread int tl_open;    /* a dataset started in this thread: its files are measured */
static __thread int tl_flush;   /* ... and SCR flushes it inside its Complete call */
static __thread int tl_cached;  /* ... and stays in cache (not bypass) */
static __thread int tl_restart; /* a restart phase is open in this thread */
static __thread int tl_counted; /* the start being called numbered a checkpoint */

/* ------------------------------------------------------------------ SCR's settings */

static int app_value(const char *key, char *out, size_t size) {
    size_t n = strlen(key);
    int i;
    for (i = APP_MAX - 1; i >= 0; --i) /* the latest setting wins */
        if (g_app[i] != NULL && strncmp(g_app[i], key, n) == 0 && g_app[i][n] == '=') {
            if (g_app[i][n + 1] == '\0' || strlen(g_app[i] + n + 1) >= size) return -1;
            memcpy(out, g_app[i] + n + 1, strlen(g_app[i] + n + 1) + 1);
            return 0;
        }
    return -1;
}

/* An application's SCR_Config("KEY=VALUE") (one level; "KEY=" unsets). Queries are not kept. */
static void app_set(const char *text) {
    const char *eq = text != NULL ? strchr(text, '=') : NULL;
    int i;
    if (eq == NULL || strchr(text, ' ') != NULL) return;
    for (i = 0; i < APP_MAX; ++i)
        if (g_app[i] != NULL && strncmp(g_app[i], text, (size_t)(eq - text) + 1) == 0) {
            free(g_app[i]);
            g_app[i] = NULL;
        }
    for (i = 0; i < APP_MAX && g_app[i] != NULL; ++i) continue;
    if (i < APP_MAX && eq[1] != '\0') g_app[i] = strdup(text);
}

/* A setting as SCR 3.1 resolves it (scr_param_get); 0 when found. */
static int param(const char *key, char *out, size_t size) {
    char file[GCI_PATH_MAX + 16];
    const char *env = getenv(key);
    if (env != NULL && strlen(env) < size) {
        memcpy(out, env, strlen(env) + 1);
        return 0;
    }
    if (getenv("SCR_CONF_FILE") != NULL)
        snprintf(file, sizeof file, "%s", getenv("SCR_CONF_FILE"));
    else if (app_value("SCR_CONF_FILE", file, sizeof file) != 0) {
        char prefix[GCI_PATH_MAX];
        if (getenv("SCR_PREFIX") != NULL)
            snprintf(prefix, sizeof prefix, "%s", getenv("SCR_PREFIX"));
        else if (app_value("SCR_PREFIX", prefix, sizeof prefix) != 0)
            snprintf(prefix, sizeof prefix, "%s", gci_cwd());
        snprintf(file, sizeof file, "%s/.scrconf", prefix);
    }
    if (gci_config_value(file, key, out, size) == 0) return 0;
    if (app_value(key, out, size) == 0) return 0;
    return gci_config_value("/etc/scr.conf", key, out, size);
}

static int param_int(const char *key, int fallback) {
    char value[64];
    return param(key, value, sizeof value) == 0 ? atoi(value) : fallback;
}

static void param_path(const char *key, const char *fallback, char *out) {
    char value[GCI_PATH_MAX];
    gci_set_path(out, param(key, value, sizeof value) == 0 ? value : fallback);
}

static int env_int(const char *name) {
    const char *v = getenv(name);
    return v != NULL && *v != '\0' ? atoi(v) : -1;
}

/* Whether every rank runs on one node (1), not (0), or cannot be told (-1), from what the
 * launcher exports: Open MPI's and MPICH Hydra's world and local sizes, a Slurm step's node
 * count; none of them: a process started alone (an MPI singleton), one node. */
static int one_node(void) {
    int world = env_int("OMPI_COMM_WORLD_SIZE"), local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    int nodes = env_int("SLURM_STEP_NUM_NODES");
    if (world < 0) {
        world = env_int("PMI_SIZE");
        local = env_int("MPI_LOCALNRANKS");
    }
    if (world > 0 && local > 0) return world == local;
    if (nodes > 0) return nodes == 1;
    if (world > 1 || getenv("PMIX_RANK") != NULL || getenv("PMI_RANK") != NULL) return -1;
    return 1;
}

/* The level SCR_COPY_TYPE gives a cached checkpoint, as SCR applies it (see the top). */
static int copy_level(void) {
    char type[64] = "XOR";
    int level, single;
    param("SCR_COPY_TYPE", type, sizeof type);
    if (strcasecmp(type, "SINGLE") == 0) return 1;
    if (strcasecmp(type, "PARTNER") == 0) level = 2;
    else if (strcasecmp(type, "XOR") == 0 || strcasecmp(type, "RS") == 0) level = 3;
    else return GREENCKPT_NO_LEVEL; /* FILE: the descriptors decide, per checkpoint */
    single = one_node();
    return single == 1 ? 1 : single == 0 ? level : GREENCKPT_NO_LEVEL;
}

static void resolve(void) {
    char cntl[GCI_PATH_MAX], user[256] = "", job[256] = "defjobid";
    const char *rm[] = {"FLUX_JOB_ID", "SLURM_JOBID", "PBS_JOBID", "LSB_JOBID"};
    size_t i;
    param_path("SCR_PREFIX", NULL, g_scr.prefix);
    param_path("SCR_CACHE_BASE", "/dev/shm", g_scr.cache);
    param_path("SCR_CNTL_BASE", "/dev/shm", cntl);
    if (param("SCR_USER_NAME", user, sizeof user) != 0 && getenv("USER") != NULL)
        snprintf(user, sizeof user, "%s", getenv("USER"));
    if (param("SCR_JOB_ID", job, sizeof job) != 0)
        for (i = 0; i < sizeof rm / sizeof rm[0]; ++i)
            if (getenv(rm[i]) != NULL) {
                snprintf(job, sizeof job, "%s", getenv(rm[i]));
                break;
            }
    snprintf(g_scr.cindex, sizeof g_scr.cindex, "%s/%s/scr.%s/cindex.scrinfo", cntl, user, job);
    g_scr.bypass = param_int("SCR_CACHE_BYPASS", 1);
    g_scr.flush = param_int("SCR_FLUSH", 10);
    g_scr.async = param_int("SCR_FLUSH_ASYNC", 0);
    g_scr.level = copy_level();
    g_resolved = 1;
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

static int64_t estimate(void) {
    int64_t last = __atomic_load_n(&g_last_bytes, __ATOMIC_RELAXED);
    return last > 0 ? last : gci_env_bytes(GREENCKPT_UNKNOWN_BYTES);
}

/* ------------------------------------------------------------------ restarts */

/* A restart's work starts inside SCR (Init's rebuild, Have_restart's fetch). */
static void restart_begins(int level, const char *path) {
    if (!tl_restart && gci_open_split("scr", GREENCKPT_RESTART, level, path,
                                      GREENCKPT_UNKNOWN_BYTES))
        tl_restart = 1;
}

static void restart_ends(int ok) {
    if (!tl_restart) return;
    tl_restart = 0;
    tl_open = 0;
    gci_route_measure(GCI_ROUTE_SCR);
    gci_close_split(GREENCKPT_RESTART, ok);
}

const char *SCR_Config(const char *config) {
    REAL(config_fn, SCR_Config);
    if (real_ == NULL) return NULL;
    app_set(config); /* kept before the call: SCR reads it at SCR_Init */
    return real_(config);
}

int SCR_Init(void) {
    REAL(void_fn, SCR_Init);
    int result;
    if (real_ == NULL) return SCR_FAILURE;
    resolve();
    g_ckpt_id = 0;
    g_cached_bytes = -1;
    g_restart_asked = 0;
    if (exists(g_scr.cindex)) /* SCR rebuilds what its cache index lists */
        restart_begins(GREENCKPT_NO_LEVEL, g_scr.bypass ? g_scr.prefix : g_scr.cache);
    result = real_();
    if (result != SCR_SUCCESS) restart_ends(0);
    return result;
}

int SCR_Have_restart(int *flag, char *name) {
    REAL(have_fn, SCR_Have_restart);
    char index[GCI_PATH_MAX + 16];
    int result, asked = g_restart_asked;
    if (real_ == NULL) return SCR_FAILURE;
    g_restart_asked = 1;
    snprintf(index, sizeof index, "%s/.scr/index.scr", g_scr.prefix);
    if (!asked && g_resolved && param_int("SCR_FETCH", 1) && exists(index))
        restart_begins(4, g_scr.prefix); /* a fetch from the prefix: an L4 checkpoint */
    result = real_(flag, name);
    if (!asked && (result != SCR_SUCCESS || flag == NULL || *flag == 0)) restart_ends(0);
    return result;
}

/* ------------------------------------------------------------------ datasets */

/* A dataset starts (before SCR's call): announce it; its routed files are collected. 1 when
 * this call opened the phase (not when one of its kind is already open in this thread). */
static int starting(int kind, int level, const char *path) {
    int announced = gci_open_split("scr", kind, level, path, estimate());
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

/* A checkpoint dataset starts: where SCR writes it, and whether it will flush it. */
static int checkpoint_starts(int flags) {
    restart_ends(1); /* the application read no restart */
    if (!g_resolved) resolve();
    tl_counted = !tl_open; /* a second start while one is open: SCR refuses it */
    if (tl_open) return 0;
    g_ckpt_id += 1;
    tl_cached = !g_scr.bypass;
    tl_flush = tl_cached && !g_scr.async &&
               ((flags & SCR_FLAG_OUTPUT) || (g_scr.flush > 0 && g_ckpt_id % g_scr.flush == 0));
    if (g_scr.bypass) return starting(GREENCKPT_CHECKPOINT, 4, g_scr.prefix);
    return starting(GREENCKPT_CHECKPOINT, g_scr.level, g_scr.cache);
}

/* Complete_output/_checkpoint: the routed files are measured before SCR's call (which may
 * move or flush them) and become the next estimate. When SCR flushes inside the call, the
 * checkpoint ends as the application hands the dataset over and the call is the flush. */
static int complete(int valid, int_fn real) {
    int open = tl_open, result;
    int64_t bytes = open ? gci_route_measure(GCI_ROUTE_SCR) : 0;
    int flush = open && tl_flush && valid && gci_enabled("scr");
    if (bytes > 0) __atomic_store_n(&g_last_bytes, bytes, __ATOMIC_RELAXED);
    tl_open = 0;
    if (!flush) {
        result = real(valid);
        gci_close_split(GREENCKPT_CHECKPOINT, valid && result == SCR_SUCCESS);
    } else {
        gci_close_split(GREENCKPT_CHECKPOINT, 1);
        gci_open_split("scr", GREENCKPT_FLUSH, 4, g_scr.prefix, bytes > 0 ? bytes : estimate());
        result = real(valid);
        gci_close_split(GREENCKPT_FLUSH, result == SCR_SUCCESS);
    }
    if (open && valid && result == SCR_SUCCESS)
        g_cached_bytes = tl_cached && !flush && g_scr.flush > 0 ? (bytes > 0 ? bytes : 0) : -1;
    return result;
}

int SCR_Start_output(const char *name, int flags) {
    REAL(start_output_fn, SCR_Start_output);
    if (real_ == NULL) return SCR_FAILURE;
    /* an output-only dataset (results, not a checkpoint) is not a checkpoint phase */
    int announced = flags & SCR_FLAG_CHECKPOINT ? checkpoint_starts(flags) : 0;
    int result = real_(name, flags);
    if (result != SCR_SUCCESS && tl_counted) g_ckpt_id -= 1;
    tl_counted = 0;
    start_result(GREENCKPT_CHECKPOINT, result, announced);
    return result;
}

int SCR_Complete_output(int valid) {
    REAL(int_fn, SCR_Complete_output);
    if (real_ == NULL) return SCR_FAILURE;
    return complete(valid, real_);
}

int SCR_Start_checkpoint(void) {
    REAL(void_fn, SCR_Start_checkpoint);
    if (real_ == NULL) return SCR_FAILURE;
    int announced = checkpoint_starts(SCR_FLAG_CHECKPOINT);
    int result = real_();
    if (result != SCR_SUCCESS && tl_counted) g_ckpt_id -= 1;
    tl_counted = 0;
    start_result(GREENCKPT_CHECKPOINT, result, announced);
    return result;
}

int SCR_Complete_checkpoint(int valid) {
    REAL(int_fn, SCR_Complete_checkpoint);
    if (real_ == NULL) return SCR_FAILURE;
    return complete(valid, real_);
}

int SCR_Start_restart(char *name) {
    REAL(start_restart_fn, SCR_Start_restart);
    if (real_ == NULL) return SCR_FAILURE;
    /* the restart begun inside SCR_Init or SCR_Have_restart goes on: the application reads */
    int announced = tl_restart ? 0 : starting(GREENCKPT_RESTART, GREENCKPT_NO_LEVEL,
                                              g_scr.bypass ? g_scr.prefix : g_scr.cache);
    int result = real_(name);
    if (tl_restart) tl_open = 1;
    start_result(GREENCKPT_RESTART, result, announced);
    return result;
}

int SCR_Complete_restart(int valid) {
    REAL(int_fn, SCR_Complete_restart);
    if (real_ == NULL) return SCR_FAILURE;
    int open = tl_open;
    int64_t bytes = open ? gci_route_measure(GCI_ROUTE_SCR) : 0;
    int result = real_(valid);
    if (bytes > 0) __atomic_store_n(&g_last_bytes, bytes, __ATOMIC_RELAXED);
    tl_open = 0;
    tl_restart = 0;
    gci_close_split(GREENCKPT_RESTART, valid && result == SCR_SUCCESS);
    return result;
}

/* SCR_Finalize flushes the latest checkpoint when it is still only in cache (SCR_FLUSH > 0). */
int SCR_Finalize(void) {
    REAL(void_fn, SCR_Finalize);
    int64_t cached = g_cached_bytes;
    int announced = 0, result;
    if (real_ == NULL) return SCR_FAILURE;
    restart_ends(1);
    if (cached >= 0)
        announced = gci_open("scr", GREENCKPT_FLUSH, 4, g_scr.prefix,
                             cached > 0 ? cached : GREENCKPT_UNKNOWN_BYTES);
    result = real_();
    if (cached >= 0) gci_close(announced, GREENCKPT_FLUSH, result == SCR_SUCCESS);
    g_cached_bytes = -1;
    return result;
}

/* Not a phase: the routed path of a file of the open dataset is kept to be measured. */
int SCR_Route_file(const char *name, char *file) {
    REAL(route_fn, SCR_Route_file);
    if (real_ == NULL) return SCR_FAILURE;
    int result = real_(name, file);
    if (result == SCR_SUCCESS && tl_open) gci_route_add(GCI_ROUTE_SCR, file);
    return result;
}
