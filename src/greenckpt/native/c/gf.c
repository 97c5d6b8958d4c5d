/*
 * gf.c - libgreenckpt_gf: one parity piece of an erasure code over GF(2^8), at memory speed.
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
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GCE_AVX2 1
#endif

#define BLOCK 65536 /* bytes of output worked on while it stays in the cache */

/* out[0..n) ^= c * in[0..n), c given as its nibble tables (lo[16], hi[16]) */
static void mul_add_portable(uint8_t *out, const uint8_t *in, size_t n, const uint8_t *lo,
                             const uint8_t *hi) {
    size_t b;
    for (b = 0; b < n; ++b) out[b] ^= (uint8_t)(lo[in[b] & 15] ^ hi[in[b] >> 4]);
}

static void xor_portable(uint8_t *out, const uint8_t *in, size_t n) {
    size_t b;
    for (b = 0; b < n; ++b) out[b] ^= in[b];
}

#ifdef GCE_AVX2
__attribute__((target("avx2"))) static void mul_add_avx2(uint8_t *out, const uint8_t *in,
                                                          size_t n, const uint8_t *lo,
                                                          const uint8_t *hi) {
    const __m256i tlo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)lo));
    const __m256i thi = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hi));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    size_t b = 0;
    for (; b + 32 <= n; b += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(in + b));
        __m256i l = _mm256_shuffle_epi8(tlo, _mm256_and_si256(x, mask));
        __m256i h = _mm256_shuffle_epi8(thi, _mm256_and_si256(_mm256_srli_epi16(x, 4), mask));
        __m256i o = _mm256_loadu_si256((const __m256i *)(out + b));
        _mm256_storeu_si256((__m256i *)(out + b), _mm256_xor_si256(o, _mm256_xor_si256(l, h)));
    }
    mul_add_portable(out + b, in + b, n - b, lo, hi);
}

__attribute__((target("avx2"))) static void xor_avx2(uint8_t *out, const uint8_t *in,
                                                      size_t n) {
    size_t b = 0;
    for (; b + 32 <= n; b += 32) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(in + b));
        __m256i o = _mm256_loadu_si256((const __m256i *)(out + b));
        _mm256_storeu_si256((__m256i *)(out + b), _mm256_xor_si256(o, x));
    }
    xor_portable(out + b, in + b, n - b);
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

/* out[0..len) = sum over i < k of coef_i * in_i, where in_i holds in_len[i] <= len bytes
 * (zero beyond). tables: 32 bytes per input, the products of coef_i with 0..15 and with
 * 0x00, 0x10, ..., 0xf0; a coefficient of 1 is marked by ones[i] != 0 (a plain XOR).
 * 0, or -1 when an input is longer than the output. */
int gce_combine(int k, const uint8_t *const *in, const size_t *in_len, const uint8_t *tables,
                const uint8_t *ones, uint8_t *out, size_t len) {
    size_t start;
    int i;
    for (i = 0; i < k; ++i)
        if (in_len[i] > len) return -1;
    memset(out, 0, len);
    for (start = 0; start < len; start += BLOCK) {
        size_t end = start + BLOCK < len ? start + BLOCK : len;
        for (i = 0; i < k; ++i) {
            size_t n;
            const uint8_t *lo = tables + 32 * (size_t)i, *hi = lo + 16;
            if (in_len[i] <= start) continue;
            n = (in_len[i] < end ? in_len[i] : end) - start;
#ifdef GCE_AVX2
            if (have_avx2()) {
                if (ones[i])
                    xor_avx2(out + start, in[i] + start, n);
                else
                    mul_add_avx2(out + start, in[i] + start, n, lo, hi);
                continue;
            }
#endif
            if (ones[i])
                xor_portable(out + start, in[i] + start, n);
            else
                mul_add_portable(out + start, in[i] + start, n, lo, hi);
        }
    }
    return 0;
}
