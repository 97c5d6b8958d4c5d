/*
 * intercept_fti.c - FTI's checkpoint and recovery calls, announced to greenckpt's runtime.
 *
 * Signatures are FTI 1.6's public API (include/fti.h). Levels: FTI's L1..L4 are greenckpt's
 * L1..L4 (node-local, partner copy, erasure code, global file system); FTI's differential
 * levels (FTI_L1_DCP..FTI_L4_DCP = 5..8) are their base level, FTI_L4_H5_SINGLE (9) is L4; a
 * recovery's level is not published by FTI, so it is announced with none. Bytes: what this
 * process protected (FTI_Protect's count times the type's size), which is what FTI writes or
 * reads for it (before FTI's own metadata). Paths: ckpt_dir (L1..L3, recovery) and glbl_dir
 * (L4) of the configuration file given to FTI_Init, else the current directory.
 * FTI_Snapshot is not wrapped: the checkpoint or recovery it decides on is announced by the
 * FTI_Checkpoint or FTI_Recover it calls (through libfti's exported symbols).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "intercept.h"

#define FTI_SCES 0
#define FTI_NSCS (-1)
#define FTI_DONE 1

typedef int fti_id_t; /* as in fti.h */

/* MPI_Comm is an int with MPICH and a pointer with Open MPI. This library is built without
 * mpi.h, so FTI_Init's communicator is taken and passed on as a pointer-sized value: on the
 * x86-64 and AArch64 calling conventions both travel in the same integer register, which is
 * forwarded unchanged. */
typedef void *gci_comm;

typedef int (*init_fn)(const char *, gci_comm);
typedef int (*protect_fn)(int, void *, int64_t, fti_id_t);
typedef int (*init_type_fn)(fti_id_t *, int);
typedef fti_id_t (*composite_fn)(const char *, size_t, void *);
typedef int (*checkpoint_fn)(int, int);
typedef int (*void_fn)(void);

#define GCI_FAMILY "FTI" /* the library a missing function's line names (REAL) */

static char g_local[GCI_PATH_MAX];  /* ckpt_dir: levels 1..3 and recovery */
static char g_global[GCI_PATH_MAX]; /* glbl_dir: level 4 */

int FTI_Init(const char *configFile, gci_comm globalComm) {
    char dir[GCI_PATH_MAX];
    REAL(init_fn, FTI_Init);
    if (real_ == NULL) return FTI_NSCS;
    int result = real_(configFile, globalComm);
    gci_set_path(g_local, gci_config_value(configFile, "ckpt_dir", dir, sizeof dir) ? NULL : dir);
    gci_set_path(g_global, gci_config_value(configFile, "glbl_dir", dir, sizeof dir) ? NULL : dir);
    return result;
}

/* The size of one element of FTI type `tid`: a type the application made (FTI_InitType,
 * FTI_InitCompositeType, recorded by their wrappers) or one of FTI's predefined ones, whose
 * ids FTI_Init stores in the exported variables FTI_CHAR ... FTI_LDBE. Unknown: 1 byte. */
static int64_t type_size(fti_id_t tid) {
    static const struct {
        const char *name;
        int64_t size;
    } predefined[] = {
        {"FTI_CHAR", sizeof(char)},          {"FTI_SHRT", sizeof(short)},
        {"FTI_INTG", sizeof(int)},           {"FTI_LONG", sizeof(long)},
        {"FTI_UCHR", sizeof(unsigned char)}, {"FTI_USHT", sizeof(unsigned short)},
        {"FTI_UINT", sizeof(unsigned int)},  {"FTI_ULNG", sizeof(unsigned long)},
        {"FTI_SFLT", sizeof(float)},         {"FTI_DBLE", sizeof(double)},
        {"FTI_LDBE", sizeof(long double)},
    };
    int64_t size;
    size_t i;
    if (gci_lookup(GCI_FTI_TYPES, tid, &size) == 0) return size;
    for (i = 0; i < sizeof predefined / sizeof predefined[0]; ++i) {
        const fti_id_t *id = dlsym(RTLD_DEFAULT, predefined[i].name);
        if (id != NULL && *id == tid) return predefined[i].size;
    }
    return 1;
}

int FTI_InitType(fti_id_t *type, int size) {
    REAL(init_type_fn, FTI_InitType);
    if (real_ == NULL) return FTI_NSCS;
    int result = real_(type, size);
    if (result == FTI_SCES && type != NULL) gci_protect(GCI_FTI_TYPES, *type, size);
    return result;
}

fti_id_t FTI_InitCompositeType(const char *name, size_t size, void *h5g) {
    REAL(composite_fn, FTI_InitCompositeType);
    if (real_ == NULL) return FTI_NSCS;
    fti_id_t id = real_(name, size, h5g);
    if (id != FTI_NSCS) gci_protect(GCI_FTI_TYPES, id, (int64_t)size);
    return id;
}

int FTI_Protect(int id, void *ptr, int64_t count, fti_id_t tid) {
    REAL(protect_fn, FTI_Protect);
    if (real_ == NULL) return FTI_NSCS;
    int result = real_(id, ptr, count, tid);
    int saved = errno;
    if (result == FTI_SCES) gci_protect(GCI_FTI, id, count * type_size(tid));
    errno = saved;
    return result;
}

/* greenckpt's level for FTI's level id (see the file's comment). */
static int level_of(int level) {
    if (level >= 1 && level <= 4) return level;
    if (level >= 5 && level <= 8) return level - 4;
    return level == 9 ? 4 : GREENCKPT_NO_LEVEL;
}

int FTI_Checkpoint(int id, int level) {
    REAL(checkpoint_fn, FTI_Checkpoint);
    if (real_ == NULL) return FTI_NSCS;
    int ours = level_of(level);
    const char *path = ours == 4 ? g_global : g_local;
    int announced = gci_open("fti", GREENCKPT_CHECKPOINT, ours, *path ? path : gci_cwd(),
                             gci_protected(GCI_FTI));
    int result = real_(id, level);
    gci_close(announced, GREENCKPT_CHECKPOINT, result == FTI_DONE || result == FTI_SCES);
    return result;
}

int FTI_Recover(void) {
    REAL(void_fn, FTI_Recover);
    if (real_ == NULL) return FTI_NSCS;
    int announced = gci_open("fti", GREENCKPT_RESTART, GREENCKPT_NO_LEVEL,
                             *g_local ? g_local : gci_cwd(), gci_protected(GCI_FTI));
    int result = real_();
    gci_close(announced, GREENCKPT_RESTART, result == FTI_SCES);
    return result;
}

/* FTI_RecoverVarInit ... FTI_RecoverVar ... FTI_RecoverVarFinalize: one restart phase, of the
 * bytes protected (the variables recovered are a subset FTI does not tell in advance). */
int FTI_RecoverVarInit(void) {
    REAL(void_fn, FTI_RecoverVarInit);
    if (real_ == NULL) return FTI_NSCS;
    int announced = gci_open_split("fti", GREENCKPT_RESTART, GREENCKPT_NO_LEVEL,
                                   *g_local ? g_local : gci_cwd(), gci_protected(GCI_FTI));
    int result = real_();
    if (result != FTI_SCES && announced) gci_close_split(GREENCKPT_RESTART, 0);
    return result;
}

int FTI_RecoverVarFinalize(void) {
    REAL(void_fn, FTI_RecoverVarFinalize);
    if (real_ == NULL) return FTI_NSCS;
    int result = real_();
    gci_close_split(GREENCKPT_RESTART, result == FTI_SCES);
    return result;
}
