/*
 * mpi_driver.c - greenckpt_mpi.h under mpiexec, for the tests: every rank begins a checkpoint
 * with (rank + 1) * 1000 bytes (rank NEG_RANK, argv[3]: -5 bytes), rank FAIL_RANK (argv[2], -1:
 * none) ends it failed, and each rank prints "rank R node N leader L begin S io I end E".
 */
#include <stdio.h>
#include <stdlib.h>

#include "greenckpt_mpi.h"

int main(int argc, char **argv) {
    greenckpt_mpi g;
    int rank, io = -1, begin, end;
    int ranks_per_node = argc > 1 ? atoi(argv[1]) : 0;
    int fail_rank = argc > 2 ? atoi(argv[2]) : -1;
    int neg_rank = argc > 3 ? atoi(argv[3]) : -1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (greenckpt_mpi_init(&g, MPI_COMM_WORLD, ranks_per_node) < 0) MPI_Abort(MPI_COMM_WORLD, 3);
    begin = greenckpt_mpi_begin(&g, GREENCKPT_CHECKPOINT, 2, "/tmp",
                                rank == neg_rank ? -5LL : (rank + 1) * 1000LL, &io);
    end = greenckpt_mpi_end(&g, GREENCKPT_CHECKPOINT, rank != fail_rank);
    printf("rank %d node %d leader %d begin %d io %d end %d\n", rank, g.node, g.leader, begin, io,
           end);
    greenckpt_mpi_free(&g);
    MPI_Finalize();
    return 0;
}
