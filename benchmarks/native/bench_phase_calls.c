/* bench_phase_calls.c - time N greenckpt_begin/greenckpt_end pairs (for bench_phase_api.py).
 * Prints: "<calls> <wall seconds> <cpu seconds of this process>". */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "greenckpt.h"

static double now(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000, i, bad = 0;
    const char *path = argc > 2 ? argv[2] : "/tmp";
    double wall, cpu;
    int io;
    greenckpt_attached(); /* connect (or find no runtime) before timing */
    wall = now(CLOCK_MONOTONIC);
    cpu = now(CLOCK_PROCESS_CPUTIME_ID);
    for (i = 0; i < n; ++i) {
        bad += greenckpt_begin(GREENCKPT_CHECKPOINT, 1, path, 1 << 20, &io) < 0;
        bad += greenckpt_end(GREENCKPT_CHECKPOINT, 1) < 0;
    }
    wall = now(CLOCK_MONOTONIC) - wall;
    cpu = now(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    printf("%ld %.9f %.9f %ld\n", 2 * n, wall, cpu, bad);
    return bad != 0;
}
