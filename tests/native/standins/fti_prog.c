/* Calls FTI as an application does (argv[1]: FTI's configuration file). */
#include <errno.h>

#include "standins.h"

int main(int argc, char **argv) {
    static double a[1000];
    static int b[10];
    static char c[5 * 24];
    fti_id_t t = 0;
    PROG_INIT(argc, argv);
    CALL(FTI_Init(argv[1], MPI_COMM_WORLD));
    CALL(FTI_InitType(&t, 24));
    CALL(FTI_Protect(0, a, 1000, FTI_DBLE));
    CALL(FTI_Protect(1, b, 10, FTI_INTG));
    CALL(FTI_Protect(2, c, 5, t));
    CALL(FTI_Checkpoint(1, 1));
    CALL(FTI_Checkpoint(2, 4));
    CALL(FTI_Checkpoint(3, 3));
    CALL(FTI_Protect(0, a, 500, FTI_DBLE));
    CALL(FTI_Checkpoint(4, 8));
    CALL(FTI_Snapshot());
    CALL(FTI_Snapshot());
    STANDIN_STAGGER_BEGIN(); /* each recovery: one rank after the other, when asked */
    CALL(FTI_Snapshot());
    STANDIN_STAGGER_END();
    STANDIN_STAGGER_BEGIN();
    CALL(FTI_Recover());
    STANDIN_STAGGER_END();
    STANDIN_STAGGER_BEGIN();
    CALL(FTI_RecoverVarInit());
    CALL(FTI_RecoverVar(0));
    CALL(FTI_RecoverVarFinalize());
    STANDIN_STAGGER_END();
    CALL(FTI_Finalize());
    PROG_END();
    return 0;
}
