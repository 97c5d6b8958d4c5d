/*
 * intercept_common.c - what every wrapper of libgreenckpt_intercept shares (see intercept.h).
 *
 * Why these rules: the wrapped library's behaviour must not change. So a wrapper announces
 * around the real call but never alters its arguments or result, puts errno back as the real
 * function left it, and announces only the outermost wrapped call of a thread (FTI_Snapshot
 * calls FTI_Checkpoint; a VeloC build may call VELOC_Checkpoint_begin from VELOC_Checkpoint):
 * one phase, announced once. Nothing here aborts: a missing symbol is one line on stderr and
 * the wrapper returns the library's own error code.
 */
#define _GNU_SOURCE
#include "intercept.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static __thread int tl_depth;             /* wrapped calls running in this thread */
static __thread int tl_split[GC_NKINDS];  /* a split phase of this kind is open here */

void *gci_real(const char *family, const char *name) {
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn == NULL)
        fprintf(stderr,
                "greenckpt intercept: %s is not in any library this program loaded (is %s "
                "linked?); the call returns %s's error code\n",
                name, family, family);
    return fn;
}

void *gci_real_once(struct gci_real_slot *slot, const char *family, const char *name) {
    int state = 0;
    void *fn;
    if (__atomic_load_n(&slot->state, __ATOMIC_ACQUIRE) == 2) return slot->fn;
    if (!__atomic_compare_exchange_n(&slot->state, &state, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return state == 2 ? slot->fn : dlsym(RTLD_NEXT, name);
    fn = gci_real(family, name);
    slot->fn = fn;
    __atomic_store_n(&slot->state, 2, __ATOMIC_RELEASE);
    return fn;
}

/* A family is one of the comma-separated names in GREENCKPT_INTERCEPT (or any when unset).
 * The variable is read at each call: cheap next to a checkpoint, and no init order issue. */
int gci_enabled(const char *family) {
    const char *list = getenv("GREENCKPT_INTERCEPT");
    size_t n = strlen(family);
    const char *p;
    if (list == NULL || *list == '\0') return 1;
    for (p = list; (p = strstr(p, family)) != NULL; p += n) {
        int starts = p == list || p[-1] == ',';
        int ends = p[n] == '\0' || p[n] == ',';
        if (starts && ends) return 1;
    }
    return 0;
}

int gci_depth(void) { return tl_depth; }

/* greenckpt_begin pushed a frame (which needs its end) unless it refused the arguments or
 * the state (EINVAL, ESTATE) or the process (EFORK); ERUNTIME still pushed one. */
static int pushed(int status) { return status >= 0 || status == GREENCKPT_ERUNTIME; }

static int announce(const char *family, int kind, int level, const char *path, int64_t bytes) {
    int status;
    if (!gci_enabled(family) || tl_split[kind]) return 0;
    if (bytes != GREENCKPT_UNKNOWN_BYTES && bytes < 1) bytes = 1;
    status = greenckpt_begin(kind, level, path, bytes, NULL);
    return pushed(status);
}

int gci_open(const char *family, int kind, int level, const char *path, int64_t bytes) {
    int saved = errno;
    int announced = tl_depth == 0 ? announce(family, kind, level, path, bytes) : 0;
    tl_depth += 1;
    errno = saved;
    return announced;
}

void gci_close(int announced, int kind, int ok) {
    int saved = errno;
    tl_depth -= 1;
    if (announced) greenckpt_end(kind, ok);
    errno = saved;
}

int gci_open_split(const char *family, int kind, int level, const char *path, int64_t bytes) {
    int saved = errno;
    int announced = tl_depth == 0 ? announce(family, kind, level, path, bytes) : 0;
    if (announced) tl_split[kind] = 1;
    errno = saved;
    return announced;
}

void gci_close_split(int kind, int ok) {
    int saved = errno;
    if (tl_split[kind]) {
        tl_split[kind] = 0;
        greenckpt_end(kind, ok);
    }
    errno = saved;
}

/* ------------------------------------------------------------------ protected sizes */

struct gci_entry {
    int id;
    int64_t bytes;
};

static pthread_mutex_t g_table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gci_entry *g_tables[GCI_NTABLES];
static size_t g_counts[GCI_NTABLES], g_caps[GCI_NTABLES];

/* Set (or replace: FTI and VeloC let an id be protected again with a new size) an entry.
 * Allocation failure only loses the entry: the estimate gets smaller, nothing breaks. */
void gci_protect(enum gci_table t, int id, int64_t bytes) {
    size_t i;
    int saved = errno;
    pthread_mutex_lock(&g_table_lock);
    for (i = 0; i < g_counts[t] && g_tables[t][i].id != id; ++i) continue;
    if (i == g_counts[t]) {
        if (g_counts[t] == g_caps[t]) {
            size_t cap = g_caps[t] ? 2 * g_caps[t] : 16;
            struct gci_entry *grown = realloc(g_tables[t], cap * sizeof *grown);
            if (grown == NULL) goto done;
            g_tables[t] = grown;
            g_caps[t] = cap;
        }
        g_counts[t] += 1;
    }
    g_tables[t][i].id = id;
    g_tables[t][i].bytes = bytes;
done:
    pthread_mutex_unlock(&g_table_lock);
    errno = saved;
}

void gci_unprotect(enum gci_table t, int id) {
    size_t i;
    pthread_mutex_lock(&g_table_lock);
    for (i = 0; i < g_counts[t]; ++i)
        if (g_tables[t][i].id == id) {
            g_tables[t][i] = g_tables[t][g_counts[t] - 1];
            g_counts[t] -= 1;
            break;
        }
    pthread_mutex_unlock(&g_table_lock);
}

void gci_clear(enum gci_table t) {
    pthread_mutex_lock(&g_table_lock);
    g_counts[t] = 0;
    pthread_mutex_unlock(&g_table_lock);
}

int64_t gci_protected(enum gci_table t) {
    int64_t sum = 0;
    size_t i;
    pthread_mutex_lock(&g_table_lock);
    for (i = 0; i < g_counts[t]; ++i) sum += g_tables[t][i].bytes;
    pthread_mutex_unlock(&g_table_lock);
    return sum;
}

int gci_lookup(enum gci_table t, int id, int64_t *bytes) {
    int found = -1;
    size_t i;
    pthread_mutex_lock(&g_table_lock);
    for (i = 0; i < g_counts[t] && found != 0; ++i)
        if (g_tables[t][i].id == id) {
            *bytes = g_tables[t][i].bytes;
            found = 0;
        }
    pthread_mutex_unlock(&g_table_lock);
    return found;
}

/* ------------------------------------------------------------------ routed files */

static char **g_routes[GCI_NROUTES];
static size_t g_nroutes[GCI_NROUTES], g_route_caps[GCI_NROUTES];

void gci_route_add(enum gci_route w, const char *path) {
    char *copy;
    size_t i;
    int saved = errno;
    if (path == NULL || *path == '\0') return;
    pthread_mutex_lock(&g_table_lock);
    for (i = 0; i < g_nroutes[w]; ++i) /* a file routed twice is written once */
        if (strcmp(g_routes[w][i], path) == 0) goto done;
    if (g_nroutes[w] == g_route_caps[w]) {
        size_t cap = g_route_caps[w] ? 2 * g_route_caps[w] : 16;
        char **grown = realloc(g_routes[w], cap * sizeof *grown);
        if (grown == NULL) goto done;
        g_routes[w] = grown;
        g_route_caps[w] = cap;
    }
    copy = strdup(path);
    if (copy != NULL) g_routes[w][g_nroutes[w]++] = copy;
done:
    pthread_mutex_unlock(&g_table_lock);
    errno = saved;
}

int64_t gci_route_measure(enum gci_route w) {
    int64_t sum = 0;
    struct stat st;
    size_t i;
    int saved = errno;
    pthread_mutex_lock(&g_table_lock);
    for (i = 0; i < g_nroutes[w]; ++i) {
        if (stat(g_routes[w][i], &st) == 0 && S_ISREG(st.st_mode)) sum += (int64_t)st.st_size;
        free(g_routes[w][i]);
    }
    g_nroutes[w] = 0;
    pthread_mutex_unlock(&g_table_lock);
    errno = saved;
    return sum;
}

/* ------------------------------------------------------------------ configuration */

int64_t gci_env_bytes(int64_t fallback) {
    const char *text = getenv("GREENCKPT_INTERCEPT_BYTES");
    char *end;
    long long v;
    int saved = errno;
    if (text == NULL || *text == '\0') return fallback;
    v = strtoll(text, &end, 10);
    errno = saved;
    return (*end == '\0' && v > 0) ? (int64_t)v : fallback;
}

static char *trim(char *s) {
    char *e;
    while (*s == ' ' || *s == '\t') ++s;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) --e;
    *e = '\0';
    return s;
}

int gci_config_value(const char *file, const char *key, char *out, size_t size) {
    char line[GCI_PATH_MAX + 256];
    int found = -1;
    int saved = errno;
    FILE *f = file != NULL ? fopen(file, "r") : NULL;
    if (f == NULL) {
        errno = saved;
        return -1;
    }
    while (found != 0 && fgets(line, sizeof line, f) != NULL) {
        char *eq = strchr(line, '=');
        char *name = trim(line);
        if (*name == '#' || *name == ';' || *name == '[' || eq == NULL) continue;
        *eq = '\0';
        if (strcmp(trim(name), key) != 0) continue;
        name = trim(eq + 1);
        if (*name != '\0' && strlen(name) < size) {
            memcpy(out, name, strlen(name) + 1);
            found = 0;
        }
    }
    fclose(f);
    errno = saved;
    return found;
}

const char *gci_cwd(void) {
    static __thread char buf[GCI_PATH_MAX];
    int saved = errno;
    const char *cwd = getcwd(buf, sizeof buf) != NULL ? buf : ".";
    errno = saved;
    return cwd;
}

void gci_set_path(char *dst, const char *src) {
    const char *from = (src != NULL && *src != '\0') ? src : gci_cwd();
    snprintf(dst, GCI_PATH_MAX, "%s", from);
}
