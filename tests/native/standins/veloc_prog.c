/* Calls VeloC as an application does (argv[1]: VeloC's configuration file). */
#include <errno.h>

#include "standins.h"

int main(int argc, char **argv) {
    static double a[1000];
    static int b[10];
    char routed[VELOC_MAX_NAME] = "";
    FILE *f;
    PROG_INIT(argc, argv);
    CALL(VELOC_Init(MPI_COMM_WORLD, argv[1]));
    CALL(VELOC_Mem_protect(0, a, 1000, sizeof a[0]));
    CALL(VELOC_Mem_protect(1, b, 10, sizeof b[0]));
    CALL(VELOC_Checkpoint("heat", 1));
    CALL(VELOC_Checkpoint_begin("heat", 2));
    CALL(VELOC_Checkpoint_mem());
    CALL(VELOC_Route_file("extra.dat", routed));
    if ((f = fopen(routed, "wb")) != NULL) {
        fwrite(a, 1, 960, f);
        fclose(f);
    }
    CALL(VELOC_Checkpoint_end(1));
    CALL(VELOC_Mem_unprotect(1));
    CALL(VELOC_Checkpoint_begin("heat", -3));
    CALL(VELOC_Restart_test("heat", 0));
    STANDIN_STAGGER_BEGIN(); /* each restart: one rank after the other, when asked */
    CALL(VELOC_Restart("heat", 2));
    STANDIN_STAGGER_END();
    STANDIN_STAGGER_BEGIN();
    CALL(VELOC_Restart_begin("heat", 2));
    CALL(VELOC_Recover_mem());
    CALL(VELOC_Restart_end(0));
    STANDIN_STAGGER_END();
    CALL(VELOC_Finalize(1));
    PROG_END();
    return 0;
}
