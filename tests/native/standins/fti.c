/* libfti.so stand-in: FTI 1.6's public calls, logged, with distinctive results and errno.
 * FTI_Snapshot decides as FTI does (nothing, or a checkpoint through FTI_Checkpoint, or a
 * recovery through FTI_Recover), calling them through their exported symbols. */
#include <errno.h>
#include <string.h>

#include "standins.h"

fti_id_t FTI_CHAR, FTI_SHRT, FTI_INTG, FTI_LONG, FTI_UCHR, FTI_USHT, FTI_UINT, FTI_ULNG,
    FTI_SFLT, FTI_DBLE, FTI_LDBE;
static fti_id_t next_type;
static int snapshots;

int FTI_Init(const char *configFile, MPI_Comm globalComm) {
    fti_id_t *ids[] = {&FTI_CHAR, &FTI_SHRT, &FTI_INTG, &FTI_LONG, &FTI_UCHR, &FTI_USHT,
                       &FTI_UINT, &FTI_ULNG, &FTI_SFLT, &FTI_DBLE, &FTI_LDBE};
    size_t i;
    for (i = 0; i < sizeof ids / sizeof ids[0]; ++i) *ids[i] = (fti_id_t)(3 * i + 5);
    next_type = 100;
    STANDIN_LOG("FTI_Init %s world=%d", configFile, globalComm == MPI_COMM_WORLD);
    errno = 101;
    return FTI_SCES;
}

int FTI_InitType(fti_id_t *type, int size) {
    *type = next_type++;
    STANDIN_LOG("FTI_InitType size=%d -> %d", size, *type);
    errno = 102;
    return FTI_SCES;
}

fti_id_t FTI_InitCompositeType(const char *name, size_t size, void *h5g) {
    STANDIN_LOG("FTI_InitCompositeType %s size=%zu h5g=%d", name, size, h5g != NULL);
    return next_type++;
}

int FTI_Protect(int id, void *ptr, int64_t count, fti_id_t tid) {
    STANDIN_LOG("FTI_Protect id=%d ptr=%d count=%lld tid=%d", id, ptr != NULL, (long long)count,
                tid);
    errno = 103;
    return count < 0 ? FTI_NSCS : FTI_SCES;
}

int FTI_Checkpoint(int id, int level) {
    STANDIN_LOG("FTI_Checkpoint id=%d level=%d", id, level);
    STANDIN_SYNC();
    errno = 104;
    return level == 3 ? FTI_NSCS : FTI_DONE; /* level 3 fails here */
}

int FTI_Recover(void) {
    STANDIN_LOG("FTI_Recover");
    STANDIN_RECOVERY_SYNC();
    errno = 105;
    return FTI_SCES;
}

int FTI_Snapshot(void) {
    int result = FTI_SCES;
    snapshots += 1;
    STANDIN_LOG("FTI_Snapshot %d", snapshots);
    if (snapshots == 2) result = FTI_Checkpoint(70 + snapshots, 2);
    if (snapshots == 3) result = FTI_Recover();
    errno = 106;
    return result;
}

int FTI_RecoverVarInit(void) {
    STANDIN_LOG("FTI_RecoverVarInit");
    errno = 107;
    return FTI_SCES;
}

int FTI_RecoverVar(int id) {
    STANDIN_LOG("FTI_RecoverVar %d", id);
    return FTI_SCES;
}

int FTI_RecoverVarFinalize(void) {
    STANDIN_LOG("FTI_RecoverVarFinalize");
    STANDIN_RECOVERY_SYNC();
    errno = 108;
    return FTI_SCES;
}

int FTI_Finalize(void) {
    STANDIN_LOG("FTI_Finalize");
    return FTI_SCES;
}
