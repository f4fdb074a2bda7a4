/* core/half.c: bf16 and f16 rounding on f32 bit patterns (see half.h).
 *
 * bf16 keeps the top 16 bits of an f32: adding 0x7fff plus the lowest kept bit and truncating is
 * round to nearest even, and a carry out of the fraction moves into the exponent (up to infinity)
 * on its own. f16 keeps 10 fraction bits the same way (0xfff plus the lowest kept bit 13) down to
 * 2^-14; below it the f16 grid is fixed at 2^-24, and adding then subtracting 0.5f (whose ulp is
 * 2^-24) rounds to that grid with the FPU's round to nearest even. Both are written as selects
 * over uint32 values without branches, so the array loops vectorise. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "core/half.h"
#include "core/util.h"

#if defined(__FAST_MATH__)
#error "core/half.c needs IEEE float arithmetic: (x + 0.5f) - 0.5f must not be simplified"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BT_HALF_F16C 1
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#endif

static inline uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The f32 bit pattern of the bf16 value nearest to u. */
static inline uint32_t round_bf16_u(uint32_t u)
{
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    const uint32_t q = (u | 0x00400000u) & 0xffff0000u;                 /* quiet NaN */
    const uint32_t nan = 0u - (uint32_t)((u & 0x7fffffffu) > 0x7f800000u); /* all ones if NaN */
    return (r & ~nan) | (q & nan);
}

/* The f32 bit pattern of the f16 value nearest to u. */
static inline uint32_t round_f16_u(uint32_t u)
{
    const uint32_t s = u & 0x80000000u, a = u & 0x7fffffffu;
    /* normal range: 11 significant bits; rounded up to 2^16 or beyond: infinity */
    const uint32_t n = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
    const uint32_t big = 0u - (uint32_t)(n >= 0x47800000u);
    /* below 2^-14: the grid of 2^-24 */
    const uint32_t d = f2u((u2f(a) + 0.5f) - 0.5f);
    const uint32_t tiny = 0u - (uint32_t)(a < 0x38800000u);
    /* NaN: quiet, the top of its payload */
    const uint32_t q = (a | 0x00400000u) & 0xffffe000u;
    const uint32_t nan = 0u - (uint32_t)(a > 0x7f800000u);
    uint32_t r = (n & ~big) | (0x7f800000u & big);
    r = (r & ~tiny) | (d & tiny);
    r = (r & ~nan) | (q & nan);
    return r | s;
}

float bt_round_bf16(float x) { return u2f(round_bf16_u(f2u(x))); }

float bt_round_f16(float x) { return u2f(round_f16_u(f2u(x))); }

/* The array loops work in blocks of BLOCK with a fixed trip count, which GCC vectorises even at
 * -O2 (whose cost model refuses loops that would need a scalar epilogue), then the tail. */
#define BLOCK 16
#define ROUND_BODY(dst, x, n, round_u)                 \
    size_t i = 0;                                      \
    for (; i + BLOCK <= n; i += BLOCK)                 \
        for (size_t j = 0; j < BLOCK; j++) {           \
            uint32_t u;                                \
            memcpy(&u, x + i + j, sizeof u);           \
            u = round_u(u);                            \
            memcpy(dst + i + j, &u, sizeof u);         \
        }                                              \
    for (; i < n; i++) {                               \
        uint32_t u;                                    \
        memcpy(&u, x + i, sizeof u);                   \
        u = round_u(u);                                \
        memcpy(dst + i, &u, sizeof u);                 \
    }

/* name_loop rounds x in place; name_copy writes x rounded to dst in one pass */
#define ROUND_LOOPS(name, round_u)                                                          \
    BT_VCLONES static void name##_loop(float *restrict x, size_t n) { ROUND_BODY(x, x, n, round_u) } \
    BT_VCLONES static void name##_copy(float *restrict dst, const float *restrict x, size_t n) \
    {                                                                                       \
        ROUND_BODY(dst, x, n, round_u)                                                      \
    }

ROUND_LOOPS(round_bf16, round_bf16_u)
ROUND_LOOPS(round_f16, round_f16_u)

#ifdef BT_HALF_F16C
/* vcvtps2ph with an explicit round-to-nearest-even immediate, then back: 8 floats at a time. */
__attribute__((target("avx,f16c"))) static void round_f16_f16c(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    }
    round_f16_loop(x + i, n - i);
}
#endif

#ifdef BT_HALF_F16C
/* CPUID leaf 1: F16C (ecx bit 29) and AVX (bit 28), with the OS saving the YMM registers
 * (OSXSAVE, bit 27, and XCR0's SSE and AVX state bits). */
static int detect_f16c(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned need = (1u << 27) | (1u << 28) | (1u << 29);
    if ((c & need) != need) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    return (lo & 6u) == 6u;
}
#endif

int bt_round_f16_hw(void)
{
#ifdef BT_HALF_F16C
    static atomic_int cached = -1; /* -1 until the first call; racing first calls agree */
    int hw = atomic_load_explicit(&cached, memory_order_relaxed);
    if (hw < 0) {
        hw = detect_f16c();
        atomic_store_explicit(&cached, hw, memory_order_relaxed);
    }
    return hw;
#else
    return 0;
#endif
}

void bt_round_array_portable(bt_dtype precision, float *x, size_t n)
{
    if (precision == BT_BF16)
        round_bf16_loop(x, n);
    else if (precision == BT_F16)
        round_f16_loop(x, n);
}

void bt_round_array(bt_dtype precision, float *x, size_t n)
{
#ifdef BT_HALF_F16C
    if (precision == BT_F16 && bt_round_f16_hw()) {
        round_f16_f16c(x, n);
        return;
    }
#endif
    bt_round_array_portable(precision, x, n);
}

void bt_round_copy(bt_dtype precision, float *restrict dst, const float *restrict x, size_t n)
{
    if (precision == BT_BF16)
        round_bf16_copy(dst, x, n);
    else if (precision == BT_F16)
        round_f16_copy(dst, x, n);
    else if (n)
        memcpy(dst, x, n * sizeof *x);
}

uint16_t bt_f32_to_bf16_bits(float x) { return (uint16_t)(round_bf16_u(f2u(x)) >> 16); }

float bt_bf16_bits_to_f32(uint16_t bits) { return u2f((uint32_t)bits << 16); }

/* static: GCC 12 exports a non-static function's clone dispatcher whatever its visibility */
BT_VCLONES static uint32_t bf16_pack(uint16_t *restrict dst, const float *restrict x, size_t n)
{
    uint32_t low = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = f2u(x[i]);
        dst[i] = (uint16_t)(u >> 16);
        low |= u & 0xffffu;
    }
    return low;
}

BT_VCLONES static void bf16_unpack(float *restrict dst, const uint16_t *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = u2f((uint32_t)src[i] << 16);
}

uint32_t bt_bf16_pack(uint16_t *restrict dst, const float *restrict x, size_t n) { return bf16_pack(dst, x, n); }

void bt_bf16_unpack(float *restrict dst, const uint16_t *restrict src, size_t n) { bf16_unpack(dst, src, n); }

uint16_t bt_f32_to_f16_bits(float x)
{
    const uint32_t r = round_f16_u(f2u(x));
    const uint16_t s = (uint16_t)((r >> 16) & 0x8000u);
    const uint32_t a = r & 0x7fffffffu;
    if (a >= 0x7f800000u) /* infinity, or a NaN (already quiet) */
        return (uint16_t)(s | 0x7c00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x38800000u) /* normal: rebias the exponent by 127 - 15 */
        return (uint16_t)(s | ((a - (112u << 23)) >> 13));
    return (uint16_t)(s | (uint16_t)(u2f(a) * 0x1p24f)); /* subnormal: a multiple of 2^-24 */
}

float bt_f16_bits_to_f32(uint16_t bits)
{
    const uint32_t s = (uint32_t)(bits & 0x8000u) << 16;
    const uint32_t e = (bits >> 10) & 0x1fu, m = bits & 0x3ffu;
    uint32_t u;
    if (e == 0)
        u = f2u((float)m * 0x1p-24f);
    else if (e == 31)
        u = 0x7f800000u | (m << 13);
    else
        u = ((e + 112u) << 23) | (m << 13);
    return u2f(u | s);
}
