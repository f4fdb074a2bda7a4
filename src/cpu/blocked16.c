/* cpu/blocked16.c: NCHW f32 <-> nChw16c copies with a pass fused into each (cpu/blocked16.h).
 *
 * A 16-channel block of one sample is an [HW, 16] matrix in nChw16c and 16 rows of HW in NCHW:
 * each copy moves 16 pixels of 16 channels at a time, 16 vectors transposed in registers (three
 * rounds of in-lane unpacks and shuffles, one across lanes), with masked loads and stores for the
 * last pixels of a row and for channels past C. The scalar loops below are the same copies one
 * element at a time, what the functions do on a CPU without AVX-512; conv_onednn.c keeps oneDNN's
 * reorders there, so only the tests run them (bt_blocked16_force_scalar). */
#include <stdatomic.h>
#include <string.h>

#include "core/cpu_isa.h"
#include "core/half.h"
#include "core/util.h"
#include "cpu/blocked16.h"

static atomic_int force_scalar;

void bt_blocked16_force_scalar(int on) { atomic_store(&force_scalar, on); }

static void from_nchw_scalar(const float *src, void *dst, int bf16, int64_t n, int64_t c, int64_t hw,
                             int threads)
{
    const int64_t cb = (c + 15) / 16;
    BT_PARALLEL_FOR(threads)
    for (int64_t b = 0; b < n * cb; b++) {
        const int64_t s = b / cb, c0 = b % cb * 16;
        for (int64_t p = 0; p < hw; p++)
            for (int64_t j = 0; j < 16; j++) {
                const float v = c0 + j < c ? src[(s * c + c0 + j) * hw + p] : 0.0f;
                const int64_t at = (b * hw + p) * 16 + j;
                if (bf16) ((uint16_t *)dst)[at] = bt_f32_to_bf16_bits(v);
                else ((float *)dst)[at] = v;
            }
    }
}

static void to_nchw_scalar(const void *src, int bf16, float *dst, int mode, int64_t n, int64_t c,
                           int64_t hw, int threads)
{
    const int64_t cb = (c + 15) / 16;
    BT_PARALLEL_FOR(threads)
    for (int64_t b = 0; b < n * cb; b++) {
        const int64_t s = b / cb, c0 = b % cb * 16, cn = c - c0 < 16 ? c - c0 : 16;
        for (int64_t j = 0; j < cn; j++)
            for (int64_t p = 0; p < hw; p++) {
                const int64_t at = (b * hw + p) * 16 + j;
                const float v = bf16 ? bt_bf16_bits_to_f32(((const uint16_t *)src)[at]) : ((const float *)src)[at];
                float *d = &dst[(s * c + c0 + j) * hw + p];
                *d = mode == BT_BLOCKED16_ADD ? *d + v : mode == BT_BLOCKED16_ROUND_BF16 ? bt_round_bf16(v) : v;
            }
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

int bt_blocked16_available(void) { return bt_cpu_isa_level() >= BT_ISA_AVX512; }

/* r[0..15] transposed: element j of r[i] becomes element i of r[j]. */
AVX512 static inline void transpose16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 16; i += 8)
        for (int j = 0; j < 4; j++) {
            t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
            t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
        }
    for (int j = 0; j < 8; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
    }
}

/* core/half.c's round_bf16_u on 16 lanes: the f32 bit patterns of the nearest bf16 values. */
AVX512 static inline __m512i round_bf16_v(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    const __m512i q = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_and_si512(_mm512_mask_blend_epi32(nan, r, q), _mm512_set1_epi32((int)0xffff0000u));
}

/* The (sample, channel block) pair b of a copy (the blocks are what the threads share: the
 * OpenMP loops call these, since Clang does not give an outlined parallel region its function's
 * target). */
AVX512 static void from_nchw_block(const float *src, void *dst, int bf16, int64_t b, int64_t c, int64_t hw)
{
    const int64_t cb = (c + 15) / 16;
    const int64_t s = b / cb, c0 = b % cb * 16, cn = c - c0 < 16 ? c - c0 : 16;
    const float *in = src + (s * c + c0) * hw; /* channel c0 + j at in + j hw */
    for (int64_t p = 0; p < hw; p += 16) {
        const int64_t np = hw - p < 16 ? hw - p : 16;
        const __mmask16 m = (__mmask16)((1u << np) - 1);
        __m512 r[16];
        for (int64_t j = 0; j < 16; j++)
            r[j] = j < cn ? _mm512_maskz_loadu_ps(m, in + j * hw + p) : _mm512_setzero_ps();
        transpose16(r);
        const int64_t at = (b * hw + p) * 16;
        for (int64_t i = 0; i < np; i++) {
            if (bf16)
                _mm256_storeu_si256((__m256i *)((uint16_t *)dst + at + i * 16),
                                    _mm512_cvtepi32_epi16(_mm512_srli_epi32(round_bf16_v(r[i]), 16)));
            else
                _mm512_storeu_ps((float *)dst + at + i * 16, r[i]);
        }
    }
}

AVX512 static void to_nchw_block(const void *src, int bf16, float *dst, int mode, int64_t b, int64_t c,
                                 int64_t hw)
{
    const int64_t cb = (c + 15) / 16;
    const int64_t s = b / cb, c0 = b % cb * 16, cn = c - c0 < 16 ? c - c0 : 16;
    float *out = dst + (s * c + c0) * hw;
    for (int64_t p = 0; p < hw; p += 16) {
        const int64_t np = hw - p < 16 ? hw - p : 16;
        const __mmask16 m = (__mmask16)((1u << np) - 1);
        __m512 r[16];
        const int64_t at = (b * hw + p) * 16;
        for (int64_t i = 0; i < 16; i++)
            if (i >= np)
                r[i] = _mm512_setzero_ps();
            else if (bf16) /* bf16 bits widened: the upper half of an f32 */
                r[i] = _mm512_castsi512_ps(_mm512_slli_epi32(
                    _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)src + at + i * 16))), 16));
            else
                r[i] = _mm512_loadu_ps((const float *)src + at + i * 16);
        transpose16(r);
        for (int64_t j = 0; j < cn; j++) {
            float *d = out + j * hw + p;
            __m512 v = r[j];
            if (mode == BT_BLOCKED16_ROUND_BF16) v = _mm512_castsi512_ps(round_bf16_v(v));
            else if (mode == BT_BLOCKED16_ADD) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, d), v);
            _mm512_mask_storeu_ps(d, m, v);
        }
    }
}

void bt_blocked16_from_nchw(const float *src, void *dst, int bf16, int64_t n, int64_t c, int64_t hw,
                            int threads)
{
    if (!bt_blocked16_available() || atomic_load(&force_scalar)) {
        from_nchw_scalar(src, dst, bf16, n, c, hw, threads);
        return;
    }
    const int64_t blocks = n * ((c + 15) / 16);
    BT_PARALLEL_FOR(threads)
    for (int64_t b = 0; b < blocks; b++) from_nchw_block(src, dst, bf16, b, c, hw);
}

void bt_blocked16_to_nchw(const void *src, int bf16, float *dst, int mode, int64_t n, int64_t c,
                          int64_t hw, int threads)
{
    if (!bt_blocked16_available() || atomic_load(&force_scalar)) {
        to_nchw_scalar(src, bf16, dst, mode, n, c, hw, threads);
        return;
    }
    const int64_t blocks = n * ((c + 15) / 16);
    BT_PARALLEL_FOR(threads)
    for (int64_t b = 0; b < blocks; b++) to_nchw_block(src, bf16, dst, mode, b, c, hw);
}

#else

int bt_blocked16_available(void) { return 0; }

void bt_blocked16_from_nchw(const float *src, void *dst, int bf16, int64_t n, int64_t c, int64_t hw,
                            int threads)
{
    from_nchw_scalar(src, dst, bf16, n, c, hw, threads);
}

void bt_blocked16_to_nchw(const void *src, int bf16, float *dst, int mode, int64_t n, int64_t c,
                          int64_t hw, int threads)
{
    to_nchw_scalar(src, bf16, dst, mode, n, c, hw, threads);
}

#endif
