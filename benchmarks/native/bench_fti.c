/* FTI's side of benchmarks/bench_peers.py (not run by hand): one launch of a job.
 *
 *     mpiexec -n R bench_fti CONFIG write BYTES_PER_RANK SEED LOCAL_DIR GLOBAL_DIR
 *     mpiexec -n R bench_fti CONFIG restart BYTES_PER_RANK SEED LOCAL_DIR GLOBAL_DIR [CELL]
 *
 * Calls only FTI's public C API (fti.h). CONFIG sets Node_size = 1 and Local_test = 1, so
 * every rank is one emulated node with its own LOCAL_DIR/node<rank>. Every rank protects one
 * buffer of BYTES_PER_RANK pseudo-random (incompressible) bytes as FTI_CHAR.
 *
 * write:   FTI_Init; a warm-up L1 checkpoint of 1 MiB; then FTI_Checkpoint at L1, L2 (partner
 *          copy), L3 (Reed-Solomon over the group) and L4 (global directory), each timed as
 *          it returns ("L1".."L4") and with every file this rank holds under its node
 *          directory and its files in GLOBAL_DIR fsynced, with their directories ("L1+fsync"
 *          ..). FTI fsyncs the file it writes itself, not the partner copy, the encoded file
 *          nor the L4 copy. The launch ends without FTI_Finalize, as a failed run would, so
 *          FTI's configuration says "restart" and the last (L4) checkpoint stays.
 * restart: FTI_Init (which finds and checks the checkpoint files, MD5 included, and rebuilds
 *          or fetches them) and FTI_Recover (reads them into the buffer), timed together as
 *          CELL (default "restart"); the bytes are compared with the written ones. With CELL
 *          "restart-L4" the launch then takes an L1 checkpoint and again ends without
 *          FTI_Finalize, so the next launch restarts from L1; otherwise it calls FTI_Finalize
 *          (FTI removes its checkpoints).
 *
 * Each figure is the job's: last rank's end - first rank's start after a barrier
 * (CLOCK_MONOTONIC, one host), and the CPU-seconds of every rank (getrusage RUSAGE_SELF,
 * threads included). Rank 0 prints RESULT {"cell": [seconds, cpu_s], ...}.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fti.h"
#include "bench_common.h"

/* The job's seconds and CPU-seconds of a cell each rank timed from (t0, c0) to (t1, c1). */
static void job_figures(double t0, double c0, double t1, double c1, double *secs, double *cpus) {
    double start, end, used = c1 - c0;
    MPI_Allreduce(&t0, &start, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&t1, &end, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&used, cpus, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    *secs = end - start;
}

static char rank_tag[64];
static int sync_all; /* 1: every file met; 0: only files named for this rank */

static int fsync_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    int fd = -1;
    if (flag == FTW_F && (sync_all || strstr(path, rank_tag) != NULL))
        fd = open(path, O_RDONLY);
    else if (flag == FTW_D && sync_all)
        fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return 0;
}

/* fsync what this rank holds: everything under its node directory, its global files. */
static void fsync_mine(const char *local, const char *global, int rank) {
    char node[4096];
    snprintf(node, sizeof node, "%s/node%d", local, rank);
    sync_all = 1;
    nftw(node, fsync_one, 16, FTW_PHYS);
    snprintf(rank_tag, sizeof rank_tag, "-Rank%d.", rank);
    sync_all = 0;
    nftw(global, fsync_one, 16, FTW_PHYS);
    if (rank == 0) { /* the global directories once */
        sync_all = 1;
        snprintf(rank_tag, sizeof rank_tag, "%s", "\x01none\x01");
        nftw(global, fsync_one, 16, FTW_PHYS);
    }
}

static void check(int ok, const char *what) {
    if (ok != FTI_SCES && ok != FTI_DONE) { /* FTI_Checkpoint returns FTI_DONE */
        fprintf(stderr, "bench_fti: %s failed (%d)\n", what, ok);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc < 7) {
        fprintf(stderr, "usage: bench_fti CONFIG write|restart BYTES SEED LOCAL GLOBAL [CELL]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *cfg = argv[1], *local = argv[5], *global = argv[6];
    int restart = strcmp(argv[2], "restart") == 0;
    size_t bytes = strtoull(argv[3], NULL, 10);
    uint64_t seed = strtoull(argv[4], NULL, 10);
    const char *cell = argc > 7 ? argv[7] : "restart";
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (bytes > INT32_MAX) {
        if (rank == 0) fprintf(stderr, "bench_fti: FTI_Protect counts in int32_t\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *data = malloc(bytes), *copy = malloc(bytes);
    if (data == NULL || copy == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    fill(copy, bytes, seed + (uint64_t)rank);
    double t0, c0, t1, c1, secs, cpus;
    int bad = 0;

    if (!restart) {
        size_t warm_bytes = 1 << 20;
        unsigned char *warm = malloc(warm_bytes);
        fill(warm, warm_bytes, seed + 1000 + (uint64_t)rank);
        memcpy(data, copy, bytes);
        MPI_Barrier(MPI_COMM_WORLD);
        c0 = cpu(), t0 = now();
        check(FTI_Init(cfg, MPI_COMM_WORLD), "FTI_Init");
        t1 = now(), c1 = cpu();
        job_figures(t0, c0, t1, c1, &secs, &cpus);
        if (rank == 0) emit("init", secs, cpus);
        check(FTI_Protect(0, warm, (int32_t)warm_bytes, FTI_CHAR), "FTI_Protect");
        check(FTI_Checkpoint(1, 1), "FTI_Checkpoint (warm-up)");
        check(FTI_Protect(0, data, (int32_t)bytes, FTI_CHAR), "FTI_Protect");
        for (int level = 1; level <= 4; level++) {
            char name[32];
            MPI_Barrier(MPI_COMM_WORLD);
            c0 = cpu(), t0 = now();
            check(FTI_Checkpoint(level + 1, level), "FTI_Checkpoint");
            t1 = now(), c1 = cpu();
            job_figures(t0, c0, t1, c1, &secs, &cpus);
            snprintf(name, sizeof name, "L%d", level);
            if (rank == 0) emit(name, secs, cpus);
            fsync_mine(local, global, rank);
            t1 = now(), c1 = cpu();
            job_figures(t0, c0, t1, c1, &secs, &cpus);
            snprintf(name, sizeof name, "L%d+fsync", level);
            if (rank == 0) emit(name, secs, cpus);
        }
        free(warm);
    } else {
        memset(data, 0, bytes);
        MPI_Barrier(MPI_COMM_WORLD);
        c0 = cpu(), t0 = now();
        int status = FTI_Init(cfg, MPI_COMM_WORLD);
        if (status != FTI_SCES || FTI_Status() == 0) {
            fprintf(stderr, "bench_fti: FTI_Init found no checkpoint to restart from (%d)\n",
                    status);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        check(FTI_Protect(0, data, (int32_t)bytes, FTI_CHAR), "FTI_Protect");
        check(FTI_Recover(), "FTI_Recover");
        t1 = now(), c1 = cpu();
        job_figures(t0, c0, t1, c1, &secs, &cpus);
        if (rank == 0) emit(cell, secs, cpus);
        bad = memcmp(data, copy, bytes) != 0;
        if (strcmp(cell, "restart-L4") == 0) check(FTI_Checkpoint(100, 1), "FTI_Checkpoint");
        else FTI_Finalize();
    }
    if (rank == 0) {
        printf("RESULT {%s}\n", result);
        fflush(stdout);
    }
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (anybad && rank == 0) fprintf(stderr, "bench_fti: restored bytes differ\n");
    free(data);
    free(copy);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
