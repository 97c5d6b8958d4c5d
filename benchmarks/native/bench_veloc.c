/* VeloC's side of benchmarks/bench_peers.py (not run by hand): one job, one mode.
 *
 *     mpiexec -n R bench_veloc CONFIG sync|async BYTES_PER_RANK SEED [BACKEND_PID_FILE]
 *
 * Calls only VeloC's public C API (veloc.h). Every rank protects one buffer of BYTES_PER_RANK
 * pseudo-random (incompressible) bytes as region 0. A warm-up of 1 MiB under another
 * checkpoint name runs first, so the timed calls find VeloC's engine, threads and directories
 * in place, as greenckpt's worker does. In async mode the active backend must be running
 * already (bench_peers.py starts it): one that VELOC_Init starts itself, through system(),
 * inherits the launcher's output pipes, and mpiexec then waits for the daemon forever.
 *
 * Timed, each between a barrier and the last rank's end (CLOCK_MONOTONIC, one host), with
 * the CPU-seconds of every rank (getrusage RUSAGE_SELF: threads included; in sync mode the
 * engine runs in threads of one rank per host) plus, in async mode, the active backend's
 * (utime + stime from /proc/PID/stat, read by rank 0; PID from BACKEND_PID_FILE, which the
 * backend writes):
 *
 * sync:  ckpt           VELOC_Checkpoint (scratch write, then the copy to persistent)
 *        ckpt+fsync     the same, then each rank fsyncs its scratch and persistent files and
 *                       their directories (VeloC calls no fsync)
 *        restart-scratch  VELOC_Restart from the scratch copy (VeloC checks no digest)
 *        restart-persistent  each rank removes its scratch file; VELOC_Restart, which copies
 *                       the persistent file back to scratch and reads it
 * async: return         VELOC_Checkpoint (scratch write; the backend copies later)
 *        return+fsync   then each rank fsyncs its scratch file and directory
 *        wait+fsync     then VELOC_Checkpoint_wait and the fsync of the persistent file
 *
 * Rank 0 prints one line: RESULT {"cell": [seconds, cpu_s], ...}; exit status 1 on a VeloC
 * failure or restored bytes that differ from the protected ones.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "veloc.h"
#include "bench_common.h"

#define MAX_STAGES 4
#define NAME "bench"

static const char *pid_file = NULL;

/* The active backend's CPU-seconds so far (0 when there is none). */
static double backend_cpu(void) {
    if (pid_file == NULL) return 0.0;
    FILE *f = fopen(pid_file, "rb");
    if (f == NULL) return 0.0;
    pid_t pid = 0;
    size_t got = fread(&pid, sizeof pid, 1, f);
    fclose(f);
    if (got != 1 || pid <= 0) return 0.0;
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) return 0.0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* fields after the command name: 3 state ... 14 utime 15 stime */
    if (p == NULL) return 0.0;
    unsigned long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return 0.0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int fsync_path(const char *path, int flags) {
    int fd = open(path, flags);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* fsync a file and the directory holding it. */
static void fsync_file_and_dir(const char *path) {
    char dir[4096];
    if (fsync_path(path, O_RDONLY) != 0) {
        fprintf(stderr, "bench_veloc: cannot fsync %s\n", path);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = 0;
        fsync_path(dir, O_RDONLY | O_DIRECTORY);
    }
}

/* One "key" = value line of the INI file (VeloC's syntax), or "" when absent. */
static void config_value(const char *cfg, const char *key, char *out, size_t size) {
    FILE *f = fopen(cfg, "r");
    char line[4096];
    out[0] = 0;
    if (f == NULL) return;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f) != NULL) {
        char *p = line;
        while (*p == ' ') p++;
        if (strncmp(p, key, klen) != 0) continue;
        p += klen;
        while (*p == ' ') p++;
        if (*p != '=') continue;
        p++;
        while (*p == ' ') p++;
        p[strcspn(p, "\r\n")] = 0;
        snprintf(out, size, "%s", p);
        break;
    }
    fclose(f);
}

struct stage {
    double t, c;
};

/* Job-wide figures of a timed cell whose stages every rank recorded after the common start
 * (t0, c0): seconds = last rank's end of the stage - first rank's start, CPU = all ranks'. */
static void reduce_stages(const struct stage *s, int n, double t0, double c0, double b0,
                          const double *b, double *secs, double *cpus) {
    double start;
    MPI_Allreduce(&t0, &start, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    for (int k = 0; k < n; k++) {
        double end, used = s[k].c - c0, total;
        MPI_Allreduce((void *)&s[k].t, &end, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&used, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        secs[k] = end - start;
        cpus[k] = total + (b != NULL ? b[k] - b0 : 0.0);
    }
}

static void check(int ok, const char *what) {
    if (ok != VELOC_SUCCESS) {
        fprintf(stderr, "bench_veloc: %s failed\n", what);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    if (argc < 5) {
        fprintf(stderr, "usage: bench_veloc CONFIG sync|async BYTES SEED [BACKEND_PID_FILE]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *cfg = argv[1];
    int async = strcmp(argv[2], "async") == 0;
    size_t bytes = strtoull(argv[3], NULL, 10);
    uint64_t seed = strtoull(argv[4], NULL, 10);
    pid_file = async && argc > 5 ? argv[5] : NULL;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char scratch[4096], persistent[4096], fname[8192], pname[8192];
    config_value(cfg, "scratch", scratch, sizeof scratch);
    config_value(cfg, "persistent", persistent, sizeof persistent);

    unsigned char *data = malloc(bytes), *copy = malloc(bytes);
    size_t warm_bytes = 1 << 20;
    unsigned char *warm = malloc(warm_bytes);
    if (data == NULL || copy == NULL || warm == NULL) MPI_Abort(MPI_COMM_WORLD, 1);
    fill(data, bytes, seed + (uint64_t)rank);
    memcpy(copy, data, bytes);
    fill(warm, warm_bytes, seed + 1000 + (uint64_t)rank);

    check(VELOC_Init(MPI_COMM_WORLD, cfg), "VELOC_Init");
    /* warm-up: engine threads, backend, directories */
    check(VELOC_Mem_protect(0, warm, warm_bytes, 1), "VELOC_Mem_protect");
    check(VELOC_Checkpoint("warm", 0), "VELOC_Checkpoint (warm-up)");
    check(VELOC_Checkpoint_wait(), "VELOC_Checkpoint_wait (warm-up)");
    check(VELOC_Restart("warm", 0), "VELOC_Restart (warm-up)");
    check(VELOC_Mem_protect(0, data, bytes, 1), "VELOC_Mem_protect");
    /* VeloC's file names: <dir>/<name>-<rank>-<version>.dat */
    snprintf(fname, sizeof fname, "%s/%s-%d-%d.dat", scratch, NAME, rank, 1);
    snprintf(pname, sizeof pname, "%s/%s-%d-%d.dat", persistent, NAME, rank, 1);

    struct stage s[MAX_STAGES];
    double secs[MAX_STAGES], cpus[MAX_STAGES], b[MAX_STAGES], t0, c0, b0;

    MPI_Barrier(MPI_COMM_WORLD);
    b0 = rank == 0 ? backend_cpu() : 0.0;
    c0 = cpu();
    t0 = now();
    check(VELOC_Checkpoint(NAME, 1), "VELOC_Checkpoint");
    s[0].t = now(), s[0].c = cpu(), b[0] = rank == 0 ? backend_cpu() : 0.0;
    if (!async) {
        fsync_file_and_dir(fname);
        fsync_file_and_dir(pname);
        s[1].t = now(), s[1].c = cpu();
        reduce_stages(s, 2, t0, c0, 0.0, NULL, secs, cpus);
        if (rank == 0) {
            emit("ckpt", secs[0], cpus[0]);
            emit("ckpt+fsync", secs[1], cpus[1]);
        }
    } else {
        fsync_file_and_dir(fname);
        s[1].t = now(), s[1].c = cpu(), b[1] = rank == 0 ? backend_cpu() : 0.0;
        check(VELOC_Checkpoint_wait(), "VELOC_Checkpoint_wait");
        fsync_file_and_dir(pname);
        s[2].t = now(), s[2].c = cpu(), b[2] = rank == 0 ? backend_cpu() : 0.0;
        /* only rank 0 reads the backend; b[] - b0 is added once, after the ranks' sum */
        reduce_stages(s, 3, t0, c0, b0, b, secs, cpus);
        if (rank == 0) {
            emit("return", secs[0], cpus[0]);
            emit("return+fsync", secs[1], cpus[1]);
            emit("wait+fsync", secs[2], cpus[2]);
        }
    }

    int bad = 0;
    if (!async) {
        const char *cells[2] = {"restart-scratch", "restart-persistent"};
        for (int k = 0; k < 2; k++) {
            memset(data, 0, bytes);
            if (k == 1 && unlink(fname) != 0) {
                fprintf(stderr, "bench_veloc: cannot remove %s\n", fname);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            MPI_Barrier(MPI_COMM_WORLD);
            c0 = cpu();
            t0 = now();
            int version = VELOC_Restart_test(NAME, 0);
            if (version != 1) {
                fprintf(stderr, "bench_veloc: VELOC_Restart_test found version %d\n", version);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
            check(VELOC_Restart(NAME, version), "VELOC_Restart");
            s[0].t = now(), s[0].c = cpu();
            reduce_stages(s, 1, t0, c0, 0.0, NULL, secs, cpus);
            if (rank == 0) emit(cells[k], secs[0], cpus[0]);
            bad |= memcmp(data, copy, bytes) != 0;
        }
    }
    if (rank == 0) {
        printf("RESULT {%s}\n", result);
        fflush(stdout);
    }
    int anybad = 0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (anybad && rank == 0) fprintf(stderr, "bench_veloc: restored bytes differ\n");
    VELOC_Finalize(0);
    free(data);
    free(copy);
    free(warm);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
