/* TEST ONLY: a fake libnvidia-ml exporting the NVML calls greenckpt's GPU lever binds.
 *
 * Why a C library and not a Python stand-in: greenckpt.platform.nvml loads the real NVML with
 * ctypes, so the tests load this file the same way (GREENCKPT_NVML_LIBRARY) and exercise the
 * real binding: argument types, out-pointers, return codes, nvmlErrorString. Its state lives in
 * the text file named by FAKE_NVML_STATE, read before and written after every call, so a change
 * made by a process that is then SIGKILLed stays there for a later process, as on a real GPU.
 * tests/platform/fake_nvml.py writes and reads that file; its format, one item per line:
 *
 *   init <rc>                              return code of nvmlInit_v2 (0: success)
 *   fail <function> <rc> <index>           that call on GPU <index> (-1: any) returns <rc>
 *   gpu <uuid> <name> <app_mem> <app_gr> <def_mem> <def_gr> <limit_mw> <min_mw> <max_mw>
 *       <def_limit_mw> <n_mem> then per memory clock: <mem> <n_gr> <gr>...   (one line)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define MAX_GPUS 8
#define MAX_MEM 8
#define MAX_GR 64
#define MAX_FAILS 16

struct gpu {
    char uuid[96], name[96];
    unsigned app_mem, app_gr, def_mem, def_gr, limit, min_limit, max_limit, def_limit;
    unsigned n_mem, mem[MAX_MEM], n_gr[MAX_MEM], gr[MAX_MEM][MAX_GR];
};
struct fail { char fn[64]; int rc, index; };

static struct gpu gpus[MAX_GPUS];
static struct fail fails[MAX_FAILS];
static unsigned n_gpus, n_fails;
static int init_rc, inits;

static int load(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    FILE *f = path ? fopen(path, "r") : NULL;
    char word[64];
    if (!f) return 0;
    n_gpus = n_fails = 0;
    init_rc = 0;
    while (fscanf(f, "%63s", word) == 1) {
        if (!strcmp(word, "init")) {
            if (fscanf(f, "%d", &init_rc) != 1) break;
        } else if (!strcmp(word, "fail") && n_fails < MAX_FAILS) {
            struct fail *x = &fails[n_fails++];
            if (fscanf(f, "%63s %d %d", x->fn, &x->rc, &x->index) != 3) break;
        } else if (!strcmp(word, "gpu") && n_gpus < MAX_GPUS) {
            struct gpu *g = &gpus[n_gpus++];
            if (fscanf(f, "%95s %95s %u %u %u %u %u %u %u %u %u", g->uuid, g->name, &g->app_mem,
                       &g->app_gr, &g->def_mem, &g->def_gr, &g->limit, &g->min_limit,
                       &g->max_limit, &g->def_limit, &g->n_mem) != 11 || g->n_mem > MAX_MEM)
                break;
            for (unsigned m = 0; m < g->n_mem; m++) {
                if (fscanf(f, "%u %u", &g->mem[m], &g->n_gr[m]) != 2 || g->n_gr[m] > MAX_GR)
                    break;
                for (unsigned k = 0; k < g->n_gr[m]; k++)
                    if (fscanf(f, "%u", &g->gr[m][k]) != 1) break;
            }
        }
    }
    fclose(f);
    return 1;
}

static void save(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    char tmp[4096];
    FILE *f;
    if (!path) return;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (!(f = fopen(tmp, "w"))) return;
    fprintf(f, "init %d\n", init_rc);
    for (unsigned i = 0; i < n_fails; i++)
        fprintf(f, "fail %s %d %d\n", fails[i].fn, fails[i].rc, fails[i].index);
    for (unsigned i = 0; i < n_gpus; i++) {
        struct gpu *g = &gpus[i];
        fprintf(f, "gpu %s %s %u %u %u %u %u %u %u %u %u", g->uuid, g->name, g->app_mem,
                g->app_gr, g->def_mem, g->def_gr, g->limit, g->min_limit, g->max_limit,
                g->def_limit, g->n_mem);
        for (unsigned m = 0; m < g->n_mem; m++) {
            fprintf(f, " %u %u", g->mem[m], g->n_gr[m]);
            for (unsigned k = 0; k < g->n_gr[m]; k++) fprintf(f, " %u", g->gr[m][k]);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    rename(tmp, path); /* atomic: a reader never sees half a file */
}

/* The state and the checks every device call starts with: initialised, a known handle, and
 * no injected failure for this call on this GPU. */
static nvmlReturn_t enter(const char *fn, nvmlDevice_t dev, struct gpu **out) {
    intptr_t i = (intptr_t)dev - 1;
    if (!inits) return 1; /* NVML_ERROR_UNINITIALIZED */
    load();
    if (i < 0 || (unsigned)i >= n_gpus) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    for (unsigned k = 0; k < n_fails; k++)
        if (!strcmp(fails[k].fn, fn) && (fails[k].index < 0 || fails[k].index == i))
            return fails[k].rc;
    *out = &gpus[i];
    return 0;
}

nvmlReturn_t nvmlInit_v2(void) {
    load();
    if (init_rc) return init_rc;
    inits++;
    return 0;
}

nvmlReturn_t nvmlShutdown(void) {
    if (!inits) return 1;
    inits--;
    return 0;
}

const char *nvmlErrorString(nvmlReturn_t rc) {
    switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    if (!inits) return 1;
    load();
    *count = n_gpus;
    return 0;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *dev) {
    if (!inits) return 1;
    load();
    if (index >= n_gpus) return 2;
    *dev = (nvmlDevice_t)(intptr_t)(index + 1);
    return 0;
}

static nvmlReturn_t copy_text(const char *text, char *buf, unsigned length) {
    if (strlen(text) + 1 > length) return 7; /* NVML_ERROR_INSUFFICIENT_SIZE */
    strcpy(buf, text);
    return 0;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *buf, unsigned length) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetUUID", dev, &g);
    return rc ? rc : copy_text(g->uuid, buf, length);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *buf, unsigned length) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetName", dev, &g);
    return rc ? rc : copy_text(g->name, buf, length);
}

static nvmlReturn_t pick_clock(unsigned mem, unsigned gr, int type, unsigned *out) {
    if (type == 0) *out = gr;       /* NVML_CLOCK_GRAPHICS */
    else if (type == 2) *out = mem; /* NVML_CLOCK_MEM */
    else return 2;
    return 0;
}

nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t dev, int type, unsigned *mhz) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetApplicationsClock", dev, &g);
    return rc ? rc : pick_clock(g->app_mem, g->app_gr, type, mhz);
}

nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t dev, int type, unsigned *mhz) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetDefaultApplicationsClock", dev, &g);
    return rc ? rc : pick_clock(g->def_mem, g->def_gr, type, mhz);
}

static nvmlReturn_t copy_list(const unsigned *values, unsigned n, unsigned *count, unsigned *out) {
    unsigned room = *count;
    *count = n;
    if (room < n) return 7;
    memcpy(out, values, n * sizeof *values);
    return 0;
}

nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t dev, unsigned *count,
                                                unsigned *mhz) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetSupportedMemoryClocks", dev, &g);
    return rc ? rc : copy_list(g->mem, g->n_mem, count, mhz);
}

nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t dev, unsigned mem,
                                                  unsigned *count, unsigned *mhz) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetSupportedGraphicsClocks", dev, &g);
    if (rc) return rc;
    for (unsigned m = 0; m < g->n_mem; m++)
        if (g->mem[m] == mem) return copy_list(g->gr[m], g->n_gr[m], count, mhz);
    return 6; /* NVML_ERROR_NOT_FOUND: not a supported memory clock */
}

nvmlReturn_t nvmlDeviceSetApplicationsClocks(nvmlDevice_t dev, unsigned mem, unsigned gr) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceSetApplicationsClocks", dev, &g);
    if (rc) return rc;
    for (unsigned m = 0; m < g->n_mem; m++)
        for (unsigned k = 0; g->mem[m] == mem && k < g->n_gr[m]; k++)
            if (g->gr[m][k] == gr) {
                g->app_mem = mem;
                g->app_gr = gr;
                save();
                return 0;
            }
    return 2;
}

nvmlReturn_t nvmlDeviceResetApplicationsClocks(nvmlDevice_t dev) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceResetApplicationsClocks", dev, &g);
    if (rc) return rc;
    g->app_mem = g->def_mem;
    g->app_gr = g->def_gr;
    save();
    return 0;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t dev, unsigned *mw) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetPowerManagementLimit", dev, &g);
    if (!rc) *mw = g->limit;
    return rc;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t dev, unsigned *low,
                                                          unsigned *high) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetPowerManagementLimitConstraints", dev, &g);
    if (!rc) {
        *low = g->min_limit;
        *high = g->max_limit;
    }
    return rc;
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t dev, unsigned *mw) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceGetPowerManagementDefaultLimit", dev, &g);
    if (!rc) *mw = g->def_limit;
    return rc;
}

nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nvmlDevice_t dev, unsigned mw) {
    struct gpu *g;
    nvmlReturn_t rc = enter("nvmlDeviceSetPowerManagementLimit", dev, &g);
    if (rc) return rc;
    if (mw < g->min_limit || mw > g->max_limit) return 2;
    g->limit = mw;
    save();
    return 0;
}
