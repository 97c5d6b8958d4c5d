/*
 * standins.h - the public signatures of FTI 1.6, SCR 3.x and VeloC that the stand-in libraries
 * export (tests/native/test_intercept.py), and the call log they write.
 *
 * Why stand-ins: the interposition library must be tested on every machine, and FTI, SCR and
 * VeloC are rarely installed. Each stand-in exports the same symbols with the same
 * signatures, appends what it was called with to $STANDIN_LOG, sets a distinctive errno and
 * returns distinctive values, so a test can compare a run under the interposer with one
 * without it. Built with mpicc (-DHAVE_MPI) for MPI runs, or with cc and a stand-in MPI_Comm.
 */
#ifndef STANDINS_H
#define STANDINS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef HAVE_MPI
#include <mpi.h>
#else
typedef int MPI_Comm;
#define MPI_COMM_WORLD ((MPI_Comm)0x44000000)
#endif

/* FTI 1.6 (include/fti.h) */
#define FTI_SCES 0
#define FTI_NSCS (-1)
#define FTI_DONE 1
typedef int fti_id_t;
extern fti_id_t FTI_CHAR, FTI_SHRT, FTI_INTG, FTI_LONG, FTI_UCHR, FTI_USHT, FTI_UINT, FTI_ULNG,
    FTI_SFLT, FTI_DBLE, FTI_LDBE;
int FTI_Init(const char *configFile, MPI_Comm globalComm);
int FTI_InitType(fti_id_t *type, int size);
fti_id_t FTI_InitCompositeType(const char *name, size_t size, void *h5g);
int FTI_Protect(int id, void *ptr, int64_t count, fti_id_t tid);
int FTI_Checkpoint(int id, int level);
int FTI_Recover(void);
int FTI_Snapshot(void);
int FTI_RecoverVarInit(void);
int FTI_RecoverVar(int id);
int FTI_RecoverVarFinalize(void);
int FTI_Finalize(void);

/* SCR 3.x (src/scr.h) */
#define SCR_SUCCESS 0
#define SCR_MAX_FILENAME 1024
#define SCR_FLAG_CHECKPOINT (1 << 0)
#define SCR_FLAG_OUTPUT (1 << 1)
int SCR_Init(void);
int SCR_Finalize(void);
int SCR_Route_file(const char *name, char *file);
int SCR_Have_restart(int *flag, char *name);
int SCR_Start_restart(char *name);
int SCR_Complete_restart(int valid);
int SCR_Start_checkpoint(void);
int SCR_Complete_checkpoint(int valid);
int SCR_Start_output(const char *name, int flags);
int SCR_Complete_output(int valid);

/* VeloC (include/veloc.h) */
#define VELOC_SUCCESS 0
#define VELOC_FAILURE (-1)
#define VELOC_MAX_NAME 1024
int VELOC_Init(MPI_Comm comm, const char *cfg_file);
int VELOC_Finalize(int cleanup);
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Mem_unprotect(int id);
int VELOC_Route_file(const char *original, char *routed);
int VELOC_Checkpoint_begin(const char *name, int version);
int VELOC_Checkpoint_mem(void);
int VELOC_Checkpoint_end(int success);
int VELOC_Checkpoint(const char *name, int version);
int VELOC_Restart_test(const char *name, int version);
int VELOC_Restart_begin(const char *name, int version);
int VELOC_Recover_mem(void);
int VELOC_Restart_end(int success);
int VELOC_Restart(const char *name, int version);

/* Append one line to $STANDIN_LOG (nothing when unset). */
#define STANDIN_LOG(...)                                    \
    do {                                                    \
        const char *log_ = getenv("STANDIN_LOG");           \
        FILE *f_ = log_ ? fopen(log_, "a") : NULL;          \
        if (f_ != NULL) {                                   \
            fprintf(f_, __VA_ARGS__);                       \
            fputc('\n', f_);                                \
            fclose(f_);                                     \
        }                                                   \
    } while (0)

/* A path under $STANDIN_DIR (else the current directory) for a routed file. */
#define STANDIN_ROUTE(out, name) \
    snprintf((out), SCR_MAX_FILENAME, "%s/%s", getenv("STANDIN_DIR") ? getenv("STANDIN_DIR") : ".", (name))

/* For the test programs: one line per call with its result and errno afterwards. */
#define CALL(expr)                                                 \
    do {                                                           \
        int r_;                                                    \
        errno = 0;                                                 \
        r_ = (expr);                                               \
        printf("%s -> %d errno=%d\n", #expr, r_, errno);           \
        STANDIN_SYNC();                                            \
    } while (0)

/* Under MPI the ranks meet inside each stand-in checkpoint or recovery and after each call
 * of a test program, as real FTI's collective phases do: every rank's phase then overlaps the
 * other ranks' same phase and no other, so the runtime merges them the same way every run. */
#ifdef HAVE_MPI
#define STANDIN_SYNC()                                      \
    do {                                                    \
        if (!standin_staggering) MPI_Barrier(MPI_COMM_WORLD); \
    } while (0)
#else
#define STANDIN_SYNC() ((void)0)
#endif

/* STANDIN_STAGGER_US=N (under MPI): the ranks run the calls between STANDIN_STAGGER_BEGIN()
 * and STANDIN_STAGGER_END() one after another, rank r starting N microseconds after rank r-1
 * has finished them (a ring of messages), and the stand-ins' recoveries meet in no barrier.
 * That is a level-1 recovery as real FTI, SCR and VeloC do it on each rank without any
 * collective: the ranks' restart announcements never overlap, yet belong to one restart.
 * Inside the section CALL does not meet the other ranks either. Unset: nothing changes. */
#ifdef HAVE_MPI
static int standin_staggering __attribute__((unused));
#define STANDIN_STAGGER_US() (getenv("STANDIN_STAGGER_US") ? atoi(getenv("STANDIN_STAGGER_US")) : -1)
#define STANDIN_STAGGER_BEGIN()                                                     \
    do {                                                                            \
        int r_, token_ = 0;                                                         \
        double t_;                                                                  \
        if (STANDIN_STAGGER_US() < 0) break;                                        \
        MPI_Barrier(MPI_COMM_WORLD);                                                \
        MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                         \
        if (r_ > 0)                                                                 \
            MPI_Recv(&token_, 1, MPI_INT, r_ - 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE); \
        for (t_ = MPI_Wtime(); MPI_Wtime() - t_ < 1e-6 * STANDIN_STAGGER_US();) {   \
        }                                                                           \
        standin_staggering = 1;                                                     \
    } while (0)
#define STANDIN_STAGGER_END()                                                       \
    do {                                                                            \
        int r_, n_, token_ = 0;                                                     \
        if (STANDIN_STAGGER_US() < 0) break;                                        \
        standin_staggering = 0;                                                     \
        MPI_Comm_rank(MPI_COMM_WORLD, &r_);                                         \
        MPI_Comm_size(MPI_COMM_WORLD, &n_);                                         \
        if (r_ + 1 < n_) MPI_Send(&token_, 1, MPI_INT, r_ + 1, 77, MPI_COMM_WORLD);   \
        MPI_Barrier(MPI_COMM_WORLD);                                                \
    } while (0)
/* A stand-in recovery's barrier, left out when the recoveries are staggered. */
#define STANDIN_RECOVERY_SYNC() \
    do {                        \
        if (STANDIN_STAGGER_US() < 0) MPI_Barrier(MPI_COMM_WORLD); \
    } while (0)
#else
#define STANDIN_STAGGER_BEGIN() ((void)0)
#define STANDIN_STAGGER_END() ((void)0)
#define STANDIN_RECOVERY_SYNC() ((void)0)
#endif

#ifdef HAVE_MPI
#define PROG_INIT(argc, argv) MPI_Init(&(argc), &(argv))
#define PROG_END() MPI_Finalize()
#else
#define PROG_INIT(argc, argv) ((void)(argc), (void)(argv))
#define PROG_END() ((void)0)
#endif

#endif /* STANDINS_H */
