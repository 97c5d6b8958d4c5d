/* What both peer harnesses of benchmarks/bench_peers.py time and write the same way
 * (bench_veloc.c, bench_fti.c): the clock, the CPU-seconds, the data and the RESULT line.
 * Included by each (one translation unit each: static functions). */
#ifndef GREENCKPT_BENCH_COMMON_H
#define GREENCKPT_BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* This process's CPU-seconds, user + system, every thread. */
static double cpu(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + 1e-6 * (double)u.ru_utime.tv_usec +
           (double)u.ru_stime.tv_sec + 1e-6 * (double)u.ru_stime.tv_usec;
}

/* n pseudo-random bytes from seed: xorshift64*, incompressible for zstd/lz4. */
static void fill(unsigned char *buf, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        uint64_t v = x * 0x2545F4914F6CDD1DULL;
        memcpy(buf + i, &v, 8);
    }
    for (; i < n; i++) buf[i] = (unsigned char)(i * 131u + seed);
}

static char result[4096];

/* One cell into the RESULT line, which rank 0 prints at the end (VeloC logs to stdout too). */
static void emit(const char *name, double secs, double cpus) {
    size_t n = strlen(result);
    snprintf(result + n, sizeof result - n, "%s\"%s\": [%.6f, %.6f]", n ? ", " : "", name, secs,
             cpus);
}

#endif
