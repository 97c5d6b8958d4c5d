/* libscr.so stand-in: SCR 3.x's public calls, logged, with distinctive results and errno.
 * A dataset named "bad..." is refused. It does what SCR 3.1 does with a dataset where the
 * interposer must follow it (src/scr.c, src/scr_reddesc.c): SCR_CACHE_BYPASS (default 1)
 * routes files to $SCR_PREFIX/<dataset>/, else to $SCR_CACHE_BASE/scr.dataset.<id>/;
 * SCR_COPY_TYPE (any case; default XOR) is forced to SINGLE on one node (node count:
 * SLURM_STEP_NUM_NODES, default 1), logged as real SCR does and named in the redundancy file;
 * a cached dataset is flushed (copied to the prefix) inside SCR_Complete_output when it is
 * output or SCR_FLUSH (default 10) divides its checkpoint number, and by SCR_Finalize when
 * the latest checkpoint is still only in cache; SCR_Init rebuilds from its cache index
 * ($SCR_CNTL_BASE/$USER/scr.$SCR_JOB_ID/cindex.scrinfo) and SCR_Have_restart fetches from
 * $SCR_PREFIX/.scr/index.scr. Settings: the environment, then SCR_Config "KEY=VALUE". */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <strings.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "standins.h"

/* The test's paths are short; a cut one would only fail the test, never pass it. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

const char *SCR_Config(const char *config);

#define PATH 2048
static char g_set[32][256]; /* SCR_Config settings */
static int g_nset;
static int g_bypass, g_flush, g_ckpt_id, g_dset_id, g_have_restart, g_cached;
static char g_prefix[PATH], g_cache[PATH], g_cntl[PATH], g_name[PATH], g_restart[PATH];
static char g_files[8][PATH];
static int g_nfiles, g_output, g_is_ckpt, g_single;

static void mkdirs(const char *path) { /* mkdir -p */
    char part[PATH];
    char *p;
    snprintf(part, sizeof part, "%s", path);
    for (p = part + 1; *p != '\0'; ++p)
        if (*p == '/') {
            *p = '\0';
            mkdir(part, 0700);
            *p = '/';
        }
    mkdir(part, 0700);
}

static const char *setting(const char *key, const char *fallback) {
    size_t n = strlen(key);
    int i;
    if (getenv(key) != NULL) return getenv(key);
    for (i = g_nset - 1; i >= 0; --i)
        if (strncmp(g_set[i], key, n) == 0 && g_set[i][n] == '=') return g_set[i] + n + 1;
    return fallback;
}

static void busy(void) { /* work the phases must cover */
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
}

static void put_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL) return;
    fputs(text, f);
    fclose(f);
}

static void get_text(const char *path, char *out) {
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f == NULL) return;
    if (fgets(out, PATH, f) == NULL) out[0] = '\0';
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    int c;
    while (in != NULL && out != NULL && (c = fgetc(in)) != EOF) fputc(c, out);
    if (in != NULL) fclose(in);
    if (out != NULL) fclose(out);
}

/* The dataset's files are copied to the prefix, which then lists it. */
static void flush(void) {
    char dir[PATH + 8], to[2 * PATH + 8], index[PATH + 16];
    int i;
    snprintf(dir, sizeof dir, "%s/%s", g_prefix, g_name);
    mkdir(dir, 0700);
    for (i = 0; i < g_nfiles; ++i) {
        const char *base = strrchr(g_files[i], '/');
        snprintf(to, sizeof to, "%s%s", dir, base);
        copy_file(g_files[i], to);
    }
    busy();
    snprintf(index, sizeof index, "%s/.scr/index.scr", g_prefix);
    put_text(index, g_name);
    g_cached = 0;
    STANDIN_LOG("flush %s", g_name);
}

const char *SCR_Config(const char *config) {
    STANDIN_LOG("SCR_Config %s", config);
    errno = 207;
    if (strchr(config, '=') == NULL) return setting(config, NULL);
    if (g_nset < 32) snprintf(g_set[g_nset++], sizeof g_set[0], "%s", config);
    return NULL;
}

int SCR_Init(void) {
    const char *type = setting("SCR_COPY_TYPE", "XOR");
    const char *nodes = getenv("SLURM_STEP_NUM_NODES");
    char dir[PATH + 8], cindex[PATH + 16];
    snprintf(g_prefix, sizeof g_prefix, "%s", setting("SCR_PREFIX", "."));
    snprintf(g_cache, sizeof g_cache, "%s", setting("SCR_CACHE_BASE", "/dev/shm"));
    snprintf(g_cntl, sizeof g_cntl, "%s/%s/scr.%s", setting("SCR_CNTL_BASE", "/dev/shm"),
             getenv("USER") ? getenv("USER") : "", setting("SCR_JOB_ID", "defjobid"));
    g_bypass = atoi(setting("SCR_CACHE_BYPASS", "1"));
    g_flush = atoi(setting("SCR_FLUSH", "10"));
    g_ckpt_id = g_dset_id = g_have_restart = g_cached = 0;
    g_single = nodes == NULL || atoi(nodes) == 1;
    if (g_single && strcasecmp(type, "SINGLE") != 0)
        STANDIN_LOG("SCR: Forcing copy type to SINGLE in redundancy descriptor 0");
    snprintf(dir, sizeof dir, "%s/.scr", g_prefix);
    mkdirs(dir);
    mkdirs(g_cache);
    snprintf(cindex, sizeof cindex, "%s/cindex.scrinfo", g_cntl);
    get_text(cindex, g_restart);
    if (g_restart[0] != '\0') { /* rebuild the cached datasets */
        busy();
        g_have_restart = 1;
        STANDIN_LOG("rebuild %s", g_restart);
    }
    STANDIN_LOG("SCR_Init");
    errno = 208;
    return SCR_SUCCESS;
}

int SCR_Finalize(void) {
    if (g_flush > 0 && g_cached) flush();
    STANDIN_LOG("SCR_Finalize");
    errno = 209;
    return SCR_SUCCESS;
}

int SCR_Route_file(const char *name, char *file) {
    if (g_bypass || g_dset_id == 0)
        snprintf(file, SCR_MAX_FILENAME, "%s/%s/%s", g_prefix, g_dset_id ? g_name : g_restart,
                 name);
    else
        snprintf(file, SCR_MAX_FILENAME, "%s/scr.dataset.%d/%s", g_cache, g_dset_id, name);
    if (g_dset_id != 0 && g_nfiles < 8) snprintf(g_files[g_nfiles++], PATH, "%s", file);
    STANDIN_LOG("SCR_Route_file %s", name);
    errno = 200;
    return SCR_SUCCESS;
}

int SCR_Have_restart(int *flag, char *name) {
    char index[PATH + 16];
    snprintf(index, sizeof index, "%s/.scr/index.scr", g_prefix);
    if (!g_have_restart && atoi(setting("SCR_FETCH", "1"))) {
        get_text(index, g_restart);
        if (g_restart[0] != '\0') { /* fetch from the prefix */
            busy();
            g_have_restart = 1;
            STANDIN_LOG("fetch %s", g_restart);
        }
    }
    *flag = g_have_restart;
    if (g_have_restart) strcpy(name, g_restart);
    STANDIN_LOG("SCR_Have_restart");
    errno = 210;
    return SCR_SUCCESS;
}

int SCR_Start_restart(char *name) {
    strcpy(name, g_restart);
    STANDIN_LOG("SCR_Start_restart");
    errno = 201;
    return SCR_SUCCESS;
}

int SCR_Complete_restart(int valid) {
    STANDIN_LOG("SCR_Complete_restart %d", valid);
    g_have_restart = 0;
    errno = 202;
    return valid ? SCR_SUCCESS : 1;
}

static int start(const char *name, int flags) {
    char dir[2 * PATH];
    if (g_dset_id != 0 || strncmp(name, "bad", 3) == 0) return 1;
    g_dset_id += 1;
    g_is_ckpt = (flags & SCR_FLAG_CHECKPOINT) != 0;
    g_output = (flags & SCR_FLAG_OUTPUT) != 0;
    g_ckpt_id += g_is_ckpt;
    g_nfiles = 0;
    snprintf(g_name, sizeof g_name, "%s", name);
    snprintf(dir, sizeof dir, "%s/%s", g_prefix, name);
    if (!g_bypass) snprintf(dir, sizeof dir, "%s/scr.dataset.%d", g_cache, g_dset_id);
    mkdir(dir, 0700);
    return SCR_SUCCESS;
}

static int complete(int valid) {
    char cindex[PATH + 16], marker[2 * PATH];
    if (g_dset_id == 0) return 1;
    if (valid) {
        if (!g_bypass) {
            snprintf(marker, sizeof marker, "%s/scr.dataset.%d/reddesc.er.0.%s.redset", g_cache,
                     g_dset_id, g_single ? "single" : setting("SCR_COPY_TYPE", "xor"));
            put_text(marker, "");
        }
        mkdirs(g_cntl);
        snprintf(cindex, sizeof cindex, "%s/cindex.scrinfo", g_cntl);
        if (g_is_ckpt) put_text(cindex, g_name);
        g_cached = g_is_ckpt && !g_bypass;
        if (g_bypass) {
            snprintf(cindex, sizeof cindex, "%s/.scr/index.scr", g_prefix);
            if (g_is_ckpt) put_text(cindex, g_name);
        } else if (g_output || (g_flush > 0 && g_ckpt_id % g_flush == 0)) {
            flush();
        }
    }
    g_dset_id = 0;
    return valid ? SCR_SUCCESS : 1;
}

int SCR_Start_checkpoint(void) {
    int result = start("ckpt", SCR_FLAG_CHECKPOINT);
    STANDIN_LOG("SCR_Start_checkpoint");
    errno = 203;
    return result;
}

int SCR_Complete_checkpoint(int valid) {
    int result = complete(valid);
    STANDIN_LOG("SCR_Complete_checkpoint %d", valid);
    errno = 204;
    return result;
}

int SCR_Start_output(const char *name, int flags) {
    int result = start(name, flags);
    STANDIN_LOG("SCR_Start_output %s %d", name, flags);
    errno = 205;
    return result;
}

int SCR_Complete_output(int valid) {
    int result = complete(valid);
    STANDIN_LOG("SCR_Complete_output %d", valid);
    errno = 206;
    return result;
}
