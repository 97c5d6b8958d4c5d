/*
 * heat2d.c - a 2-D heat-distribution code in C and MPI that checkpoints itself and tells
 * greenckpt's runtime when it does (issue 16 item 5; the C twin of examples/heat2d.py).
 *
 * Why it exists: most checkpointing codes are C or Fortran with their own checkpoint files.
 * This one shows the whole contract on such a code: its own atomic per-rank files, a commit
 * only when every rank's file is durable, the phases announced through greenckpt_mpi.h (node
 * leaders speak for their node's bytes), the advised number of concurrent writers honoured,
 * and after a kill a restart plus the rework up to where the failed run had got. The field
 * is updated by the same expression whatever the decomposition, and the checkpoint holds it
 * exactly, so a killed and restarted run ends with the same bits as a failure-free one: the
 * printed checksum proves it. Without `greenckpt run` every greenckpt call is a no-op.
 *
 * Build and run (examples/c/README.md):
 *     mpicc $(greenckpt config --cflags --libs) examples/c/heat2d.c -o heat2d
 *     greenckpt run -o R -- mpiexec -n 4 ./heat2d --ckpt-dir ckpt --interval 50
 * Checkpoint files are in host byte order: a restart must run on the same kind of machine.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "greenckpt_mpi.h"

#define HOT 100.0   /* the first row (the hot edge) */
#define SOURCE 75.0 /* the fixed heat source in the middle of the plate */
#define MAGIC UINT64_C(0x31544145484b4347) /* "GCKHEAT1" read little-endian */
#define HEADER_WORDS 8                     /* magic, iteration, nx, ny, first, rows, ranks, 0 */
#define MARKER "heat2d.latest"
#define PATH_LEN 4096

typedef struct {
    long nx, ny, iterations, interval, ranks_per_node, kill_at, kill_rank, level, trace;
    const char *dir;
} options;

typedef struct {
    long nx, ny, first, rows; /* this rank holds global rows first .. first + rows - 1 */
    double *u;                /* (rows + 2) x ny: a halo row above and below the owned rows */
    double *next;             /* rows x ny: the sweep's output */
    double *value;            /* rows x ny: the fixed cells' temperatures */
    unsigned char *fixed;     /* rows x ny: 1 where a cell never changes */
} grid;

typedef struct {
    int rank, size, node_rank, node_size, trace;
    greenckpt_mpi g;
} job;

/* ------------------------------------------------------------------------ small helpers */

/* FNV-1a, 64 bits: enough to catch a torn or damaged file, and written here so the example
 * needs nothing beyond libc. `h` chains calls over several buffers (start: fnv_init()). */
static uint64_t fnv_init(void) { return UINT64_C(0xcbf29ce484222325); }

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* A greenckpt call's status: an error is reported in one line (by the node's leader, whose
 * status every rank of the node received) and the run goes on - energy accounting is never a
 * reason to stop the computation. */
static void check(const job *j, const char *what, int status) {
    if (status < 0 && j->g.leader)
        fprintf(stderr, "heat2d: rank %d: %s: %s; going on\n", j->rank, what,
                greenckpt_strerror(status));
}

/* read() or write() all `n` bytes (either may do less than asked, or be interrupted).
 * Returns 0, or -1 on an error or an end of file before `n` bytes. */
static int transfer(int fd, void *data, size_t n, int writing) {
    char *p = data;
    while (n > 0) {
        ssize_t k = writing ? write(fd, p, n) : read(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* A rename is durable only once the directory holding the new name is on disk. */
static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY), rc;
    if (fd < 0) return -1;
    rc = fsync(fd);
    close(fd);
    return rc;
}

/* Write `n` parts to `path` atomically: a temporary file in the same directory, fsync,
 * rename over `path`, fsync the directory. A crash leaves either the old file or the new
 * one, never a torn one. Returns 0, or -1 with errno set and no temporary file left. */
static int write_atomic(const char *dir, const char *path, const void *const *parts,
                        const size_t *sizes, int n) {
    char tmp[PATH_LEN];
    int fd, err;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    for (int i = 0; i < n; i++)
        if (transfer(fd, (void *)parts[i], sizes[i], 1) != 0) goto fail;
    if (fsync(fd) != 0) goto fail;
    if (close(fd) != 0) {
        fd = -1;
        goto fail;
    }
    fd = -1;
    if (rename(tmp, path) != 0) goto fail;
    return fsync_dir(dir);
fail:
    err = errno;
    if (fd >= 0) close(fd);
    unlink(tmp);
    errno = err;
    return -1;
}

static void block_path(char *out, const options *o, long iteration, int rank) {
    snprintf(out, PATH_LEN, "%s/heat2d.%ld.rank%d", o->dir, iteration, rank);
}

/* ------------------------------------------------------------------------ options */

static void usage(FILE *to) {
    fprintf(to,
            "usage: heat2d [--nx ROWS] [--ny COLS] [--iterations N] [--interval K]\n"
            "              [--ckpt-dir DIR] [--level 1|4] [--ranks-per-node N]\n"
            "              [--kill-at ITER [--kill-rank R]] [--trace]\n"
            "Jacobi relaxation of a ROWS x COLS plate (default 256 x 256, 1000 iterations),\n"
            "checkpointed every K iterations (default 100; 0: never) into DIR (default\n"
            "heat2d-ckpt), announced to greenckpt as level 1 (DIR is node-local, default) or\n"
            "4 (DIR is on a shared file system). A committed checkpoint in DIR is restarted\n"
            "from. --ranks-per-node N emulates nodes of N ranks (0: nodes are hosts).\n"
            "--kill-at ITER: rank R (default 0) kills itself (SIGKILL) after iteration ITER,\n"
            "in a run that did not restart (the same command, run again, restarts and ends).\n"
            "--trace: a line per rank and checkpoint or restart: its write/read wave, when.\n");
}

/* One option's integer value; on a bad one, `why` receives what would be right. */
static void parse_long(const char *name, const char *text, long min, long *out, char *why) {
    char *end;
    long v;
    errno = 0;
    v = text == NULL ? 0 : strtol(text, &end, 10);
    if (text == NULL || *text == '\0' || *end != '\0' || errno != 0 || v < min)
        snprintf(why, 256, "%s needs an integer >= %ld, got '%s'", name, min,
                 text == NULL ? "" : text);
    else
        *out = v;
}

/* Fill `o` from the command line. Returns 0, 1 for --help, or 2 after a one-line message
 * (only rank 0 speaks, so that a bad option is reported once for the whole job). */
static int parse_options(int argc, char **argv, options *o, int rank, int size) {
    static const char *names[] = {"--nx",           "--ny",      "--iterations", "--interval",
                                  "--ranks-per-node", "--kill-at", "--kill-rank",  "--level"};
    long *slots[] = {&o->nx,      &o->ny,      &o->iterations, &o->interval, &o->ranks_per_node,
                     &o->kill_at, &o->kill_rank, &o->level};
    const long mins[] = {3, 3, 0, 0, 0, 1, 0, 1};
    char why[256] = "";
    *o = (options){256, 256, 1000, 100, 0, -1, 0, 1, 0, "heat2d-ckpt"};
    for (int i = 1; i < argc && why[0] == '\0'; i++) {
        int known = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            if (rank == 0) usage(stdout);
            return 1;
        }
        if (strcmp(argv[i], "--trace") == 0) {
            o->trace = 1;
            continue;
        }
        if (strcmp(argv[i], "--ckpt-dir") == 0 && i + 1 < argc && argv[i + 1][0] != '\0') {
            o->dir = argv[++i];
            continue;
        }
        for (size_t k = 0; k < sizeof names / sizeof names[0] && !known; k++) {
            if (strcmp(argv[i], names[k]) != 0) continue;
            known = 1;
            parse_long(names[k], i + 1 < argc ? argv[++i] : NULL, mins[k], slots[k], why);
        }
        if (!known)
            snprintf(why, sizeof why, "unknown option or missing value '%s' (--help lists them)",
                     argv[i]);
    }
    if (why[0] == '\0' && o->level != 1 && o->level != 4)
        snprintf(why, sizeof why, "--level must be 1 (node-local) or 4 (shared), got %ld",
                 o->level);
    if (why[0] == '\0' && o->nx < size)
        snprintf(why, sizeof why, "--nx (%ld) must be at least the number of ranks (%d)", o->nx,
                 size);
    if (why[0] == '\0' && o->kill_at > 0 && o->kill_rank >= size)
        snprintf(why, sizeof why, "--kill-rank (%ld) must be a rank, 0 .. %d", o->kill_rank,
                 size - 1);
    if (why[0] != '\0' && rank == 0) fprintf(stderr, "heat2d: %s\n", why);
    return why[0] != '\0' ? 2 : 0;
}

/* ------------------------------------------------------------------------ the solver */

/* This rank's rows, set to the plate's initial temperatures. The split and the fixed cells
 * are those of examples/heat2d.py: the first `nx % size` ranks get one row more. */
static int grid_init(grid *gr, long nx, long ny, int rank, int size) {
    long base = nx / size, extra = nx % size;
    gr->nx = nx;
    gr->ny = ny;
    gr->rows = base + (rank < extra ? 1 : 0);
    gr->first = rank * base + (rank < extra ? rank : extra);
    gr->u = calloc((size_t)((gr->rows + 2) * ny), sizeof(double));
    gr->next = calloc((size_t)(gr->rows * ny), sizeof(double));
    gr->value = calloc((size_t)(gr->rows * ny), sizeof(double));
    gr->fixed = calloc((size_t)(gr->rows * ny), 1);
    if (!gr->u || !gr->next || !gr->value || !gr->fixed) return -1;
    for (long r = 0; r < gr->rows; r++) {
        long i = gr->first + r;
        for (long j = 0; j < ny; j++) {
            int edge = i == 0 || i == nx - 1 || j == 0 || j == ny - 1;
            int source = nx * 3 / 8 <= i && i < nx * 5 / 8 && ny / 4 <= j && j < ny / 2;
            gr->fixed[r * ny + j] = (unsigned char)(edge || source);
            gr->value[r * ny + j] = source ? SOURCE : (i == 0 ? HOT : 0.0);
        }
    }
    return 0;
}

/* Back to the initial temperatures (a restart that could not restore starts afresh). */
static void grid_reset(grid *gr) {
    memset(gr->u, 0, (size_t)((gr->rows + 2) * gr->ny) * sizeof(double));
    for (long k = 0; k < gr->rows * gr->ny; k++)
        if (gr->fixed[k]) gr->u[gr->ny + k] = gr->value[k];
}

/* Swap boundary rows with the ranks above and below (Sendrecv cannot deadlock). */
static void halos(grid *gr, int rank, int size) {
    int up = rank > 0 ? rank - 1 : MPI_PROC_NULL, down = rank < size - 1 ? rank + 1 : MPI_PROC_NULL;
    int n = (int)gr->ny;
    double *u = gr->u;
    MPI_Sendrecv(u + n, n, MPI_DOUBLE, up, 0, u + (gr->rows + 1) * n, n, MPI_DOUBLE, down, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Sendrecv(u + gr->rows * n, n, MPI_DOUBLE, down, 1, u, n, MPI_DOUBLE, up, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

/* One Jacobi sweep. Every cell's sum is grouped the same way whichever rank computes it, so
 * the field does not depend on the number of ranks or on restarts. */
static void sweep(grid *gr) {
    long n = gr->ny;
    for (long r = 0; r < gr->rows; r++) {
        const double *up = gr->u + r * n, *mid = up + n, *down = mid + n;
        double *out = gr->next + r * n;
        out[0] = mid[0];
        out[n - 1] = mid[n - 1];
        for (long j = 1; j < n - 1; j++)
            out[j] = 0.25 * ((up[j] + down[j]) + (mid[j - 1] + mid[j + 1]));
        for (long j = 0; j < n; j++)
            if (gr->fixed[r * n + j]) out[j] = gr->value[r * n + j];
    }
    memcpy(gr->u + n, gr->next, (size_t)(gr->rows * n) * sizeof(double));
}

/* ------------------------------------------------------------------------ checkpoints */

static size_t block_bytes(const grid *gr) {
    return HEADER_WORDS * sizeof(uint64_t) + (size_t)(gr->rows * gr->ny) * sizeof(double) +
           sizeof(uint64_t);
}

/* A block's header: what a restart checks before it trusts the rows that follow. */
static void header(uint64_t *h, const grid *gr, long iteration, int size) {
    const uint64_t v[HEADER_WORDS] = {MAGIC, (uint64_t)iteration, (uint64_t)gr->nx,
                                      (uint64_t)gr->ny, (uint64_t)gr->first, (uint64_t)gr->rows,
                                      (uint64_t)size, 0};
    memcpy(h, v, sizeof v);
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Run `op` on this rank in its node's turn: ranks of a node go in waves of at most `io`
 * (the runtime's advice; 0 = all at once), so no more than `io` of them touch the storage
 * together. Collective over the node. With --trace, one line per rank says which wave it was
 * in and when it ran (monotonic clock), so the waves can be seen. Returns `op`'s result. */
static int in_waves(const job *j, int io, int (*op)(void *), void *arg, const char *what,
                    long iteration) {
    int waves = io > 0 ? (j->node_size + io - 1) / io : 1, mine = io > 0 ? j->node_rank / io : 0;
    int rc = 0;
    for (int w = 0; w < waves; w++) {
        if (w == mine) {
            long long t0 = now_ns();
            rc = op(arg);
            if (j->trace)
                fprintf(stderr, "heat2d: trace rank %d node %d %s %ld wave %d/%d io %d %lld %lld\n",
                        j->rank, j->g.node, what, iteration, w + 1, waves, io, t0, now_ns());
        }
        if (waves > 1) MPI_Barrier(j->g.node_comm);
    }
    return rc;
}

typedef struct {
    const options *o;
    grid *gr;
    long iteration;
    int rank, size;
} block_io;

/* This rank's block to its file, atomically. Returns 1 when durable, 0 after one line. */
static int write_block(void *arg) {
    block_io *b = arg;
    char path[PATH_LEN];
    uint64_t h[HEADER_WORDS], sum;
    size_t data = (size_t)(b->gr->rows * b->gr->ny) * sizeof(double);
    header(h, b->gr, b->iteration, b->size);
    sum = fnv(fnv(fnv_init(), h, sizeof h), b->gr->u + b->gr->ny, data);
    {
        const void *parts[] = {h, b->gr->u + b->gr->ny, &sum};
        const size_t sizes[] = {sizeof h, data, sizeof sum};
        block_path(path, b->o, b->iteration, b->rank);
        if (write_atomic(b->o->dir, path, parts, sizes, 3) == 0) return 1;
    }
    fprintf(stderr, "heat2d: rank %d: checkpoint %ld not written: %s: %s\n", b->rank,
            b->iteration, path, strerror(errno));
    return 0;
}

/* This rank's block of checkpoint `iteration`, verified (size, header, checksum) before it
 * replaces the owned rows. Returns 1 when restored, 0 after one line. */
static int read_block(void *arg) {
    block_io *b = arg;
    char path[PATH_LEN];
    size_t n = block_bytes(b->gr), data = (size_t)(b->gr->rows * b->gr->ny) * sizeof(double);
    unsigned char *buf = malloc(n);
    uint64_t want[HEADER_WORDS], sum;
    const char *why = NULL;
    int fd;
    block_path(path, b->o, b->iteration, b->rank);
    fd = open(path, O_RDONLY);
    if (buf == NULL) why = "out of memory";
    else if (fd < 0) why = strerror(errno);
    else if (transfer(fd, buf, n, 0) != 0) why = "shorter than a block of this grid, or unreadable";
    else if (read(fd, &sum, 1) != 0) why = "longer than a block of this grid";
    if (fd >= 0) close(fd);
    header(want, b->gr, b->iteration, b->size);
    if (why == NULL && memcmp(buf, want, sizeof want) != 0) why = "not this grid's block";
    if (why == NULL) {
        memcpy(&sum, buf + n - sizeof sum, sizeof sum);
        if (fnv(fnv_init(), buf, n - sizeof sum) != sum) why = "checksum mismatch";
    }
    if (why == NULL) memcpy(b->gr->u + b->gr->ny, buf + sizeof want, data);
    else fprintf(stderr, "heat2d: rank %d: %s: %s\n", b->rank, path, why);
    free(buf);
    return why == NULL;
}

/* The committed checkpoint named by DIR/heat2d.latest, read on rank 0: its iteration and
 * level, or iteration -1 when there is none. Returns 0, or 2 when it belongs to another job
 * shape (after one line: restarting it would need the same grid and ranks). */
static int read_marker(const options *o, int size, long *iteration, long *level) {
    char path[PATH_LEN];
    long it, nx, ny, ranks, lv;
    FILE *f;
    *iteration = -1;
    *level = o->level;
    snprintf(path, sizeof path, "%s/%s", o->dir, MARKER);
    f = fopen(path, "r");
    if (f == NULL) return 0;
    if (fscanf(f, "heat2d-checkpoint iteration %ld nx %ld ny %ld ranks %ld level %ld", &it, &nx,
               &ny, &ranks, &lv) != 5) {
        fprintf(stderr, "heat2d: %s is not a heat2d checkpoint marker; starting afresh\n", path);
    } else if (nx != o->nx || ny != o->ny || ranks != size) {
        fprintf(stderr,
                "heat2d: %s holds a %ld x %ld run on %ld ranks; run with those or another "
                "--ckpt-dir\n",
                o->dir, nx, ny, ranks);
        fclose(f);
        return 2;
    } else {
        *iteration = it;
        *level = lv;
    }
    fclose(f);
    return 0;
}

/* Rank 0 commits checkpoint `iteration`: the marker is replaced atomically. Returns 1/0. */
static int write_marker(const options *o, long iteration, int size) {
    char path[PATH_LEN], text[256];
    int n = snprintf(text, sizeof text,
                     "heat2d-checkpoint iteration %ld nx %ld ny %ld ranks %d level %ld\n",
                     iteration, o->nx, o->ny, size, o->level);
    const void *parts[] = {text};
    const size_t sizes[] = {(size_t)n};
    snprintf(path, sizeof path, "%s/%s", o->dir, MARKER);
    if (write_atomic(o->dir, path, parts, sizes, 1) == 0) return 1;
    fprintf(stderr, "heat2d: checkpoint %ld not committed: %s: %s\n", iteration, path,
            strerror(errno));
    return 0;
}

/* Collective checkpoint of iteration `it`: announced with this rank's bytes, written in the
 * advised waves, committed only when every rank's file is durable (all agree, then rank 0
 * replaces the marker). The previous checkpoint's file goes once the new one is committed; a
 * failed one leaves the previous checkpoint committed. Returns 1 when committed. */
static int checkpoint(job *j, const options *o, grid *gr, long it, long previous) {
    block_io b = {o, gr, it, j->rank, j->size};
    char path[PATH_LEN];
    int io = 0, ok, all = 0, committed = 0;
    check(j, "checkpoint begin",
          greenckpt_mpi_begin(&j->g, GREENCKPT_CHECKPOINT, (int)o->level, o->dir,
                              (int64_t)block_bytes(gr), &io));
    ok = in_waves(j, io, write_block, &b, "checkpoint", it);
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all && j->rank == 0) committed = write_marker(o, it, j->size);
    MPI_Bcast(&committed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    check(j, "checkpoint end", greenckpt_mpi_end(&j->g, GREENCKPT_CHECKPOINT, committed));
    if (committed && previous >= 0 && previous != it) { /* the old one is not needed now */
        block_path(path, o, previous, j->rank);
        unlink(path);
    } else if (!committed && ok) { /* this rank's file of a checkpoint the job did not make */
        block_path(path, o, it, j->rank);
        unlink(path);
    }
    return committed;
}

/* ------------------------------------------------------------------------ restart, rework */

/* This rank's progress note: the newest iteration it completed, kept so that after a
 * restart the job knows how far the failed run had got (the rework's end). One pwrite per
 * iteration, no fsync: the note has to outlive the process, which the page cache does. */
static int note_open(const options *o, int rank) {
    char path[PATH_LEN];
    snprintf(path, sizeof path, "%s/heat2d.progress.rank%d", o->dir, rank);
    return open(path, O_RDWR | O_CREAT, 0644);
}

static void note_write(int fd, long it) {
    char text[24];
    int n = snprintf(text, sizeof text, "%20ld\n", it);
    if (fd >= 0) {
        ssize_t w = pwrite(fd, text, (size_t)n, 0); /* a lost note loses rework accounting only */
        (void)w;
    }
}

static long note_read(int fd) {
    char text[24] = {0};
    char *end;
    long v;
    if (fd < 0 || pread(fd, text, sizeof text - 1, 0) <= 0) return -1;
    v = strtol(text, &end, 10);
    return end == text ? -1 : v;
}

/* Collective restart from checkpoint `ckpt` (level `level`): announced with this rank's
 * bytes, read in the advised waves, verified on every rank. Returns 1 when restored; else
 * the grid is back to its initial state (a corrupt checkpoint is never used). */
static int restart(job *j, const options *o, grid *gr, long ckpt, long level) {
    block_io b = {o, gr, ckpt, j->rank, j->size};
    int io = 0, ok, all = 0;
    check(j, "restart begin",
          greenckpt_mpi_begin(&j->g, GREENCKPT_RESTART, (int)level, o->dir,
                              (int64_t)block_bytes(gr), &io));
    ok = in_waves(j, io, read_block, &b, "restart", ckpt);
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    check(j, "restart end", greenckpt_mpi_end(&j->g, GREENCKPT_RESTART, all));
    if (!all) grid_reset(gr);
    if (j->rank == 0)
        printf(all ? "heat2d: restarted from iteration %ld (level %ld)\n"
                   : "heat2d: checkpoint %ld (level %ld) does not verify; starting afresh\n",
               ckpt, level);
    return all;
}

/* How far the failed run had got: an iteration was completed by the job when every rank
 * noted it, so the smallest of the ranks' notes (a rank without a note cannot say and is left
 * out: one iteration too many when it was the one behind). -1: no rank knows. */
static long reached(int note_fd) {
    long mine = note_read(note_fd), least = LONG_MAX;
    if (mine < 0) mine = LONG_MAX;
    MPI_Allreduce(&mine, &least, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    return least == LONG_MAX ? -1 : least;
}

/* ------------------------------------------------------------------------ main */

/* The checksum of the whole grid, row after row: FNV-1a chained through the ranks in order
 * (each continues its upper neighbour's hash over its rows), so it is the same for any number
 * of ranks and needs no gathered copy of the grid. Collective; every rank gets it. */
static uint64_t result_checksum(const grid *gr, int rank, int size) {
    uint64_t h = fnv_init();
    if (rank > 0) MPI_Recv(&h, 1, MPI_UINT64_T, rank - 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    h = fnv(h, gr->u + gr->ny, (size_t)(gr->rows * gr->ny) * sizeof(double));
    if (rank < size - 1) MPI_Send(&h, 1, MPI_UINT64_T, rank + 1, 2, MPI_COMM_WORLD);
    MPI_Bcast(&h, 1, MPI_UINT64_T, size - 1, MPI_COMM_WORLD);
    return h;
}

/* Restore from the committed checkpoint if there is one; the iteration to go on from, and
 * in *rework_until where the failed run had got (-1: no rework to announce). */
static long recover(job *j, const options *o, grid *gr, int note_fd, long marker[2],
                    long *rework_until) {
    long got;
    *rework_until = -1;
    if (marker[0] < 0 || !restart(j, o, gr, marker[0], marker[1])) {
        note_write(note_fd, 0); /* afresh: the old run's notes count no more */
        return 0;
    }
    got = reached(note_fd);
    note_write(note_fd, got > marker[0] ? got : marker[0]);
    if (got > marker[0]) {
        *rework_until = got;
        check(j, "rework begin",
              greenckpt_mpi_begin(&j->g, GREENCKPT_REWORK, (int)marker[1], NULL, 0, NULL));
    }
    return marker[0];
}

static int solve(job *j, const options *o) {
    grid gr;
    long marker[2] = {-1, o->level}, it, rework_until, committed;
    int note_fd, status = 0;
    if (j->rank == 0) status = read_marker(o, j->size, &marker[0], &marker[1]);
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (status != 0) return status;
    MPI_Bcast(marker, 2, MPI_LONG, 0, MPI_COMM_WORLD);
    if (grid_init(&gr, o->nx, o->ny, j->rank, j->size) != 0) {
        fprintf(stderr, "heat2d: rank %d: out of memory for %ld rows\n", j->rank, gr.rows);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    grid_reset(&gr);
    note_fd = note_open(o, j->rank);
    it = recover(j, o, &gr, note_fd, marker, &rework_until);
    committed = it > 0 ? it : -1;
    while (it < o->iterations) {
        halos(&gr, j->rank, j->size);
        sweep(&gr);
        note_write(note_fd, ++it);
        /* every rank is at the same iteration: the end is collective here */
        if (it == rework_until) {
            check(j, "rework end", greenckpt_mpi_end(&j->g, GREENCKPT_REWORK, 1));
            rework_until = -1;
        }
        if (it == o->kill_at && j->rank == o->kill_rank && marker[0] < 0) {
            fprintf(stderr, "heat2d: rank %d kills itself after iteration %ld\n", j->rank, it);
            raise(SIGKILL);
        }
        if (o->interval > 0 && it % o->interval == 0 && it < o->iterations &&
            checkpoint(j, o, &gr, it, committed))
            committed = it;
    }
    if (rework_until >= 0) /* fewer iterations asked than the failed run had done */
        check(j, "rework end", greenckpt_mpi_end(&j->g, GREENCKPT_REWORK, 1));
    {
        uint64_t sum = result_checksum(&gr, j->rank, j->size);
        if (j->rank == 0)
            printf("heat2d: nx %ld ny %ld iterations %ld ranks %d checksum %016" PRIx64 "\n", o->nx,
                   o->ny, o->iterations, j->size, sum);
    }
    if (note_fd >= 0) close(note_fd);
    free(gr.u);
    free(gr.next);
    free(gr.value);
    free(gr.fixed);
    return 0;
}

int main(int argc, char **argv) {
    options o;
    job j;
    int status;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &j.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &j.size);
    status = parse_options(argc, argv, &o, j.rank, j.size);
    /* every rank: a node-local directory must exist on every node */
    if (status == 0 && mkdir(o.dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "heat2d: rank %d: cannot create --ckpt-dir %s: %s\n", j.rank, o.dir,
                strerror(errno));
        status = 2;
    }
    MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (status != 0) {
        MPI_Finalize();
        return status == 1 ? 0 : status;
    }
    /* greenckpt_mpi_init is collective; its status is set_node's (a no-op without runtime). */
    status = greenckpt_mpi_init(&j.g, MPI_COMM_WORLD, (int)o.ranks_per_node);
    MPI_Comm_rank(j.g.node_comm, &j.node_rank);
    MPI_Comm_size(j.g.node_comm, &j.node_size);
    j.trace = (int)o.trace;
    check(&j, "greenckpt_mpi_init", status);
    status = solve(&j, &o);
    greenckpt_mpi_free(&j.g);
    MPI_Finalize();
    return status;
}
