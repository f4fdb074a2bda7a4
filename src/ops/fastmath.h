/* ops/fastmath.h: branch-free float exp and erf that GCC vectorises inside BT_OPS_VLOOP (libm's
 * expf/erff are scalar calls without -ffast-math, and glibc's vector variants are declared only
 * under -ffast-math). Used by the f32 instances of the op templates through real.h's EXP_V and
 * ERF_V; the f64 instances keep libm, so the float64 finite-difference tests see exact math.
 *
 * bt_fast_expf: Cephes' expf (round x log2(e) to n, reduce with ln 2 split in two, degree-6
 *   polynomial, scale by 2^n through the exponent bits): within 2 ulp of expf for x in
 *   [-87, 88]; x is clamped to that range (so exp of a very negative x is 1.6e-38, not 0, and
 *   NaN gives a number: the callers here pass -x^2 and keep x's NaN in their result).
 * bt_fast_erff: Abramowitz and Stegun 7.1.26 (erf x = 1 - t(a1 + t(a2 + ...)) e^{-x^2},
 *   t = 1/(1 + p x)), the approximation PyTorch's own vectorised CPU erf uses: the formula is
 *   within 1.5e-7 of erf; evaluated in float it is within 5.3e-7 (measured against libm's double
 *   erf every 1e-5 over [-10, 10]; worst near |x| = 0.035). */
#ifndef BT_OPS_FASTMATH_H
#define BT_OPS_FASTMATH_H

#include <stdint.h>
#include <string.h>

#include "core/util.h"

/* BT_OPS_VCLONES: the kernels' loops compiled for AVX2 and AVX-512 as well (core/util.h's
 * BT_VCLONES). */
#define BT_OPS_VCLONES BT_VCLONES

static inline float bt_fast_expf(float x)
{
    /* Clamp x to [-87, 88] on its bits: a float select is not if-converted (so not vectorised)
     * under GCC's default -ftrapping-math, an integer one is. As signed integers positive floats
     * order by value and negative ones lie below 0; as unsigned, negative floats order by
     * magnitude above 0x80000000. */
    int32_t s;
    memcpy(&s, &x, sizeof s);
    s = s > 0x42B00000 ? 0x42B00000 : s; /* x > 88 */
    uint32_t u = (uint32_t)s;
    u = u > 0xC2AE0000u ? 0xC2AE0000u : u; /* x < -87 */
    memcpy(&x, &u, sizeof x);
    /* n = round(x / ln 2): adding 1.5 * 2^23 rounds to an integer in the float's low bits */
    const float shifter = 12582912.0f;
    const float t = x * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static inline float bt_fast_erff(float x)
{
    const float ax = __builtin_fabsf(x);
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const float e = 1.0f - p * t * bt_fast_expf(-ax * ax);
    return __builtin_copysignf(e, x);
}

#endif
