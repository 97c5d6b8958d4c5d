/*
 * phase_driver.c - drives libgreenckpt from a script on the command line, for the tests.
 *
 *   b KIND LEVEL PATH BYTES   greenckpt_begin (PATH "-" is NULL); prints status and advice
 *   e KIND OK                 greenckpt_end
 *   q KIND                    greenckpt_io_processes
 *   n NODE                    greenckpt_set_node
 *   a                         greenckpt_attached
 *   f KIND                    fork; the child calls greenckpt_begin(KIND, ...) and exits
 *   t THREADS REPS            THREADS threads each begin/end a checkpoint REPS times
 *   r                         print the last error message of this thread
 *   w                         wait for a line on standard input (the test acts meanwhile)
 *
 * Every call's result is one line on stdout, "op kind -> status [io=N]".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "greenckpt.h"

static int g_reps;

static void *worker(void *arg) {
    long failures = 0;
    int i, io;
    (void)arg;
    for (i = 0; i < g_reps; ++i) {
        if (greenckpt_begin(GREENCKPT_CHECKPOINT, 1, "/tmp", 100, &io) < 0) ++failures;
        if (greenckpt_end(GREENCKPT_CHECKPOINT, 1) < 0) ++failures;
    }
    return (void *)failures;
}

static int threads(int n, int reps) {
    pthread_t tids[64];
    long failures = 0;
    int i;
    g_reps = reps;
    for (i = 0; i < n && i < 64; ++i) pthread_create(&tids[i], NULL, worker, NULL);
    for (i = 0; i < n && i < 64; ++i) {
        void *out;
        pthread_join(tids[i], &out);
        failures += (long)out;
    }
    return (int)failures;
}

int main(int argc, char **argv) {
    int i = 1, io, status;
    while (i < argc) {
        const char *op = argv[i++];
        if (strcmp(op, "b") == 0 && i + 4 <= argc) {
            const char *path = strcmp(argv[i + 2], "-") == 0 ? NULL : argv[i + 2];
            io = -7;
            status = greenckpt_begin(atoi(argv[i]), atoi(argv[i + 1]), path,
                                     strtoll(argv[i + 3], NULL, 10), &io);
            printf("b %s -> %d io=%d\n", argv[i], status, io);
            i += 4;
        } else if (strcmp(op, "e") == 0 && i + 2 <= argc) {
            printf("e %s -> %d\n", argv[i], greenckpt_end(atoi(argv[i]), atoi(argv[i + 1])));
            i += 2;
        } else if (strcmp(op, "q") == 0 && i + 1 <= argc) {
            printf("q %s -> %d\n", argv[i], greenckpt_io_processes(atoi(argv[i])));
            i += 1;
        } else if (strcmp(op, "n") == 0 && i + 1 <= argc) {
            printf("n %s -> %d\n", argv[i], greenckpt_set_node(atoi(argv[i])));
            i += 1;
        } else if (strcmp(op, "a") == 0) {
            printf("a -> %d\n", greenckpt_attached());
        } else if (strcmp(op, "f") == 0 && i + 1 <= argc) {
            pid_t child;
            fflush(stdout);
            child = fork();
            if (child == 0) {
                printf("f %s -> %d\n", argv[i],
                       greenckpt_begin(atoi(argv[i]), 1, "/tmp", 100, NULL));
                fflush(stdout);
                _exit(0);
            }
            waitpid(child, NULL, 0);
            i += 1;
        } else if (strcmp(op, "t") == 0 && i + 2 <= argc) {
            printf("t -> %d failures\n", threads(atoi(argv[i]), atoi(argv[i + 1])));
            i += 2;
        } else if (strcmp(op, "w") == 0) {
            char line[16];
            printf("w\n");
            fflush(stdout);
            if (fgets(line, sizeof line, stdin) == NULL) return 3;
            continue;
        } else if (strcmp(op, "r") == 0) {
            printf("r -> %s\n", greenckpt_last_error());
        } else {
            fprintf(stderr, "phase_driver: bad script at '%s'\n", op);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
