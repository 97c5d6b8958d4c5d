/*
 * gf.c - libgreenckpt_gf: all parity pieces of an erasure code over GF(2^8) in one pass.
 *
 * Why: level 3 computes parity pieces as sums of products of data bytes by fixed coefficients
 * in GF(2^8) (Reed-Solomon), or plain XOR (every coefficient 1). zfec does this a byte at a
 * time through a 64 KiB product table; here each coefficient c is two 16-entry tables, the
 * products of c with the low and with the high nibble of a byte (multiplication distributes
 * over XOR), so that 32 bytes are multiplied by two byte shuffles (AVX2 `vpshufb`, the method
 * of ISA-L and Plank's GF-Complete), with a portable loop where AVX2 is absent. The tables
 * come from the caller, who takes them from zfec itself: the parity written is zfec's, byte
 * for byte, and zfec still decodes it (greenckpt.ckpt.redundancy.erasure, through
 * greenckpt.native.gf).
 *
 * All m parity pieces are made in one pass over the data (gce_encode), as ISA-L's
 * gf_Nvect_dot_prod does: every 32 bytes of every data piece are loaded once, multiplied into
 * up to ROWS accumulators held in registers, and each parity vector is stored once. Computing
 * one parity row per call read the data m times and read-modify-wrote the output once per
 * data piece after zeroing it: 0.25-0.39x ISA-L's speed (docs/design/checkpointer.md).
 */
#define _DEFAULT_SOURCE /* madvise under -std=c99 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GCE_AVX2 1
#endif

#define MAX_ROWS 256 /* m at most (zfec codes at most 256 pieces in all; XOR has k unbounded) */
#define ROWS 6         /* parity rows per pass: accumulators that stay in the 16 registers */
#define CHUNK 16384    /* bytes per piece worked on while they stay in the cache, when m > ROWS */
#define HUGE_FROM (4u << 20) /* outputs this long are asked for huge pages, as NumPy's arrays */

/* Ask the kernel for transparent huge pages under out[0..len) (the whole pages inside it).
 * Why: a fresh output (an uninitialised bytearray from gf.py) is first touched here, and
 * faulting it in 4 KiB pages, each zeroed by the kernel, cost more than encoding into it
 * (about 3 GB/s against 13 on the VM of docs/design/checkpointer.md); NumPy does the same for
 * every array of 4 MiB or more. Only a hint: where THP is off, or the pages are there
 * already, nothing changes. */
static void advise_huge(uint8_t *out, size_t len) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;
    if (page <= 0 || len < HUGE_FROM) return;
    lo = ((uintptr_t)out + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    hi = ((uintptr_t)out + len) & ~((uintptr_t)page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
#else
    (void)out;
    (void)len;
#endif
}

/* The pieces of one stretch [start, end) of the output where the same inputs are present:
 * src[j] are the present inputs, tab[j] their row-0 tables (row r at tab[j] + r * stride). */
struct stretch {
    int n;
    const uint8_t **src;
    const uint8_t **tab;
    size_t stride;
};

/* out_r[start..end) = sum over j of c_rj * src_j, rows r < rows, a byte at a time. Row by
 * row over a short stretch (<= CHUNK bytes): its inputs stay in the cache between rows. */
static void dot_portable(const struct stretch *s, size_t first, int rows, uint8_t *const *out,
                         size_t start, size_t end) {
    int r, j;
    size_t b;
    for (r = 0; r < rows; ++r) {
        uint8_t *o = out[r];
        for (j = 0; j < s->n; ++j) {
            const uint8_t *lo = s->tab[j] + first + (size_t)r * s->stride, *hi = lo + 16;
            const uint8_t *x = s->src[j];
            if (j == 0)
                for (b = start; b < end; ++b) o[b] = (uint8_t)(lo[x[b] & 15] ^ hi[x[b] >> 4]);
            else
                for (b = start; b < end; ++b) o[b] ^= (uint8_t)(lo[x[b] & 15] ^ hi[x[b] >> 4]);
        }
    }
}

#ifdef GCE_AVX2
/* c * x for 32 bytes x split into their nibbles xl, xh; c's tables at t (lo[16], hi[16]). */
__attribute__((target("avx2"), always_inline)) static inline __m256i
mul_avx2(const uint8_t *t, __m256i xl, __m256i xh) {
    const __m256i tl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
    const __m256i th = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(t + 16)));
    return _mm256_xor_si256(_mm256_shuffle_epi8(tl, xl), _mm256_shuffle_epi8(th, xh));
}

/* The 32-byte vectors of [start, end) (end - start a multiple of 32) for R <= ROWS rows from
 * row `first`'s tables. R is a constant where this is inlined, so the R accumulators are
 * named registers (a loop over an array of them was kept in memory by GCC) and the rows
 * unroll; each input vector is loaded once for all rows. */
__attribute__((target("avx2"), always_inline)) static inline void
dot_avx2_rows(const struct stretch *s, size_t first, const int R, uint8_t *const *out,
              size_t start, size_t end) {
    const __m256i mask = _mm256_set1_epi8(0x0f);
    const uint8_t *const *src = s->src, *const *tab = s->tab;
    const size_t stride = s->stride;
    const int n = s->n;
    uint8_t *const o0 = out[0], *const o1 = R > 1 ? out[1] : NULL;
    uint8_t *const o2 = R > 2 ? out[2] : NULL, *const o3 = R > 3 ? out[3] : NULL;
    uint8_t *const o4 = R > 4 ? out[4] : NULL, *const o5 = R > 5 ? out[5] : NULL;
    size_t b;
    int j;
#define GCE_SPLIT(j)                                                                       \
    const __m256i x = _mm256_loadu_si256((const __m256i *)(src[j] + b));                   \
    const __m256i xl = _mm256_and_si256(x, mask);                                         \
    const __m256i xh = _mm256_and_si256(_mm256_srli_epi16(x, 4), mask);                   \
    const uint8_t *t = tab[j] + first
    for (b = start; b < end; b += 32) {
        __m256i a0, a1 = _mm256_setzero_si256(), a2 = a1, a3 = a1, a4 = a1, a5 = a1;
        {
            GCE_SPLIT(0);
            a0 = mul_avx2(t, xl, xh);
            if (R > 1) a1 = mul_avx2(t + stride, xl, xh);
            if (R > 2) a2 = mul_avx2(t + 2 * stride, xl, xh);
            if (R > 3) a3 = mul_avx2(t + 3 * stride, xl, xh);
            if (R > 4) a4 = mul_avx2(t + 4 * stride, xl, xh);
            if (R > 5) a5 = mul_avx2(t + 5 * stride, xl, xh);
        }
        for (j = 1; j < n; ++j) {
            GCE_SPLIT(j);
            a0 = _mm256_xor_si256(a0, mul_avx2(t, xl, xh));
            if (R > 1) a1 = _mm256_xor_si256(a1, mul_avx2(t + stride, xl, xh));
            if (R > 2) a2 = _mm256_xor_si256(a2, mul_avx2(t + 2 * stride, xl, xh));
            if (R > 3) a3 = _mm256_xor_si256(a3, mul_avx2(t + 3 * stride, xl, xh));
            if (R > 4) a4 = _mm256_xor_si256(a4, mul_avx2(t + 4 * stride, xl, xh));
            if (R > 5) a5 = _mm256_xor_si256(a5, mul_avx2(t + 5 * stride, xl, xh));
        }
        _mm256_storeu_si256((__m256i *)(o0 + b), a0);
        if (R > 1) _mm256_storeu_si256((__m256i *)(o1 + b), a1);
        if (R > 2) _mm256_storeu_si256((__m256i *)(o2 + b), a2);
        if (R > 3) _mm256_storeu_si256((__m256i *)(o3 + b), a3);
        if (R > 4) _mm256_storeu_si256((__m256i *)(o4 + b), a4);
        if (R > 5) _mm256_storeu_si256((__m256i *)(o5 + b), a5);
    }
#undef GCE_SPLIT
}

/* Plain XOR of the inputs (one row, every coefficient 1: the scheme "xor"), 64 bytes a step. */
__attribute__((target("avx2"))) static void xor_avx2(const struct stretch *s, uint8_t *out,
                                                      size_t start, size_t end) {
    size_t b;
    int j;
    for (b = start; b + 64 <= end; b += 64) {
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(s->src[0] + b));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(s->src[0] + b + 32));
        for (j = 1; j < s->n; ++j) {
            a0 = _mm256_xor_si256(a0, _mm256_loadu_si256((const __m256i *)(s->src[j] + b)));
            a1 = _mm256_xor_si256(a1, _mm256_loadu_si256((const __m256i *)(s->src[j] + b + 32)));
        }
        _mm256_storeu_si256((__m256i *)(out + b), a0);
        _mm256_storeu_si256((__m256i *)(out + b + 32), a1);
    }
    for (; b + 32 <= end; b += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s->src[0] + b));
        for (j = 1; j < s->n; ++j)
            a = _mm256_xor_si256(a, _mm256_loadu_si256((const __m256i *)(s->src[j] + b)));
        _mm256_storeu_si256((__m256i *)(out + b), a);
    }
}

__attribute__((target("avx2"))) static void dot_avx2(const struct stretch *s, size_t first,
                                                      int rows, uint8_t *const *out,
                                                      size_t start, size_t end) {
    switch (rows) {
    case 1: dot_avx2_rows(s, first, 1, out, start, end); break;
    case 2: dot_avx2_rows(s, first, 2, out, start, end); break;
    case 3: dot_avx2_rows(s, first, 3, out, start, end); break;
    case 4: dot_avx2_rows(s, first, 4, out, start, end); break;
    case 5: dot_avx2_rows(s, first, 5, out, start, end); break;
    default: dot_avx2_rows(s, first, ROWS, out, start, end); break;
    }
}

/* Whether every table of the stretch is coefficient 1's (x -> x): then the sum is a XOR. */
static int all_ones(const struct stretch *s) {
    int j, b;
    for (j = 0; j < s->n; ++j)
        for (b = 0; b < 16; ++b)
            if (s->tab[j][b] != b || s->tab[j][16 + b] != (uint8_t)(b << 4)) return 0;
    return 1;
}

static int forced_portable = 0;

static int have_avx2(void) {
    static int known = -1;
    if (forced_portable) return 0;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    return known;
}
#endif

/* Use the portable loop even where AVX2 is there (on != 0): to test both paths. */
void gce_force_portable(int on) {
#ifdef GCE_AVX2
    forced_portable = on != 0;
#else
    (void)on;
#endif
}

/* Which code this library runs: 2 for AVX2, 1 for the portable loop. */
int gce_simd(void) {
#ifdef GCE_AVX2
    return have_avx2() ? 2 : 1;
#else
    return 1;
#endif
}

/* Rows [0, m) of one stretch whose present inputs are s->src: chunk by chunk, row group by
 * row group (one group, so one pass over the data, when m <= ROWS). */
static void encode_stretch(const struct stretch *s, int m, uint8_t *const *out, size_t start,
                           size_t end, int simd) {
    size_t c;
    int g;
#ifdef GCE_AVX2
    const int xor = simd && m == 1 && all_ones(s);
#else
    (void)simd;
#endif
    for (c = start; c < end; c += CHUNK) {
        size_t ce = end - c > CHUNK ? c + CHUNK : end;
        for (g = 0; g < m; g += ROWS) {
            int rows = m - g < ROWS ? m - g : ROWS;
            size_t first = (size_t)g * s->stride; /* row g's tables */
#ifdef GCE_AVX2
            size_t vec_end = c + (ce - c) / 32 * 32; /* the whole vectors; a tail after */
            if (simd && vec_end > c) {
                if (xor)
                    xor_avx2(s, out[g], c, vec_end);
                else
                    dot_avx2(s, first, rows, out + g, c, vec_end);
                if (vec_end < ce) dot_portable(s, first, rows, out + g, vec_end, ce);
                continue;
            }
#endif
            dot_portable(s, first, rows, out + g, c, ce);
        }
    }
}

/* out_r[0..len) = sum over i < k of c_ri * in_i for every parity row r < m, in one pass over
 * the inputs; input i holds in_len[i] <= len bytes (zero beyond). tables: 32 bytes per (row,
 * input), row-major (row r, input i at 32 * (r * k + i)): the products of c_ri with 0..15
 * and with 0x00, 0x10, ..., 0xf0. Each output byte is written once, so out needs no zeroing.
 * 0; -1 when an input is longer than the output, k < 1 or m is not in 1..256; -2 when
 * there is no memory for k pointers. */
int gce_encode(int k, int m, const uint8_t *const *in, const size_t *in_len,
               const uint8_t *tables, uint8_t *const *out, size_t len) {
    struct stretch s;
    size_t start = 0;
    int i, r, simd = 0;
    if (k < 1 || m < 1 || m > MAX_ROWS) return -1;
    for (i = 0; i < k; ++i)
        if (in_len[i] > len) return -1;
    s.src = malloc(2 * sizeof(*s.src) * (size_t)k); /* k unbounded for XOR: not the stack */
    if (s.src == NULL) return -2;
    s.tab = s.src + k;
#ifdef GCE_AVX2
    simd = have_avx2();
#endif
    s.stride = 32 * (size_t)k;
    for (r = 0; r < m; ++r) advise_huge(out[r], len);
    /* Stretches between consecutive input lengths: in each, every input is wholly present or
     * wholly absent (zero), so the kernels never test a length. */
    while (start < len) {
        size_t end = len;
        s.n = 0;
        for (i = 0; i < k; ++i) {
            if (in_len[i] <= start) continue;
            if (in_len[i] < end) end = in_len[i];
            s.src[s.n] = in[i];
            s.tab[s.n] = tables + 32 * (size_t)i;
            ++s.n;
        }
        if (s.n == 0)
            for (r = 0; r < m; ++r) memset(out[r] + start, 0, end - start);
        else
            encode_stretch(&s, m, out, start, end, simd);
        start = end;
    }
    free(s.src);
    return 0;
}
