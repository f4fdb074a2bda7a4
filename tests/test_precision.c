/* tests/test_precision.c: bf16/f16 rounding and conversion (src/core/half.h) and the dynamic loss
 * scaler (src/optim/loss_scale.h).
 *
 * References, independent of the code under test:
 *   - bit patterns worked out by hand in the comments (f32: 1 sign, 8 exponent bits biased by 127,
 *     23 fraction bits; bf16 keeps the top 16 bits; f16 keeps 10 fraction bits, exponent bias 15,
 *     subnormals on the grid of 2^-24);
 *   - every one of the 65536 bf16 and f16 bit patterns decoded with ldexp: each value must round to
 *     itself, and each midpoint between neighbours must round to the neighbour with the even bit
 *     pattern (just above and below it, to the nearer one);
 *   - the array paths (F16C where the CPU has it, and the portable loop on its own) against the
 *     scalar functions on a million floats built to hit every branch: random bit patterns, the f16
 *     range, exact ties, thresholds, NaNs and infinities, unaligned starts and ragged tails. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "bt_test.h"
#include "core/half.h"
#include "core/util.h"
#include "optim/loss_scale.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float flt(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int failures_shown;

/* Asserts that round(in) has the bit pattern want; prints the first mismatches. */
static void expect(const char *what, float (*round)(float), uint32_t in, uint32_t want)
{
    const uint32_t got = bits(round(flt(in)));
    if (got != want && failures_shown++ < 20)
        printf("\n  %s(0x%08x = %.9g) = 0x%08x, want 0x%08x", what, (unsigned)in,
               (double)flt(in), (unsigned)got, (unsigned)want);
    CU_ASSERT_EQUAL(got, want);
}

#define BF16(in, want) expect("bt_round_bf16", bt_round_bf16, in, want)
#define F16(in, want) expect("bt_round_f16", bt_round_f16, in, want)

/* ---- hand-derived bit patterns -------------------------------------------------------------- */

static void test_bf16_cases(void)
{
    /* bf16's ulp at 1 is 2^-7 = 0x10000 in f32 fraction bits; half an ulp is 0x8000 */
    BF16(0x3f800000, 0x3f800000); /* 1 */
    BF16(0x3f808000, 0x3f800000); /* 1 + 2^-8: tie, 0x3f80 is even: down */
    BF16(0x3f818000, 0x3f820000); /* tie between 0x3f81 (odd) and 0x3f82: up */
    BF16(0x3f808001, 0x3f810000); /* just above the tie: up */
    BF16(0x3f807fff, 0x3f800000); /* just below: down */
    BF16(0xbf808000, 0xbf800000); /* the same tie, negative */
    BF16(0xbf818000, 0xbf820000);
    BF16(0x3fff8000, 0x40000000); /* tie at 0x3fff (odd): carries into the exponent, 2.0 */
    BF16(0x3fffffff, 0x40000000); /* 1.9999999 -> 2 */
    BF16(0x7f7f0000, 0x7f7f0000); /* max finite bf16, 3.3895e38 */
    BF16(0x7f7f7fff, 0x7f7f0000); /* below max + half an ulp */
    BF16(0x7f7f8000, 0x7f800000); /* max + half an ulp: tie, 0x7f7f odd: infinity */
    BF16(0x7f7fffff, 0x7f800000); /* FLT_MAX -> infinity */
    BF16(0xff7fffff, 0xff800000);
    BF16(0x7f800000, 0x7f800000); /* infinities stay */
    BF16(0xff800000, 0xff800000);
    BF16(0x00000000, 0x00000000);
    BF16(0x80000000, 0x80000000); /* negative zero stays negative */
    BF16(0x00000001, 0x00000000); /* smallest f32 subnormal -> 0 */
    BF16(0x00008000, 0x00000000); /* tie with even 0 */
    BF16(0x80008000, 0x80000000);
    BF16(0x00008001, 0x00010000); /* smallest bf16 subnormal, 2^-133 */
    BF16(0x00018000, 0x00020000); /* tie, 0x0001 odd: up */
    BF16(0x007fffff, 0x00800000); /* largest f32 subnormal -> smallest normal */
    BF16(0x7fc00000, 0x7fc00000); /* quiet NaN */
    BF16(0x7f800001, 0x7fc00000); /* signalling NaN, payload below bf16: quiet NaN, not inf */
    BF16(0x7fbfffff, 0x7fff0000); /* signalling NaN: quieted, payload's top kept */
    BF16(0xffc12345, 0xffc10000); /* sign and payload's top kept */
}

static void test_f16_cases(void)
{
    /* f16's ulp at 1 is 2^-10 = 0x2000 in f32 fraction bits; half an ulp is 0x1000 */
    F16(0x3f800000, 0x3f800000); /* 1 */
    F16(0x3f801000, 0x3f800000); /* 1 + 2^-11: tie, even: down */
    F16(0x3f803000, 0x3f804000); /* 1 + 3 2^-11: tie between odd 1 + 2^-10 and 1 + 2^-9: up */
    F16(0x3f801001, 0x3f802000); /* just above the tie */
    F16(0x3f800fff, 0x3f800000); /* just below */
    F16(0xbf803000, 0xbf804000);
    F16(0x3ffff000, 0x40000000); /* 2 - 2^-11: tie at odd 2 - 2^-10: carries to 2 */
    F16(0x477fe000, 0x477fe000); /* 65504, max finite f16 */
    F16(0x477fef00, 0x477fe000); /* 65519 -> 65504 */
    F16(0x477fefff, 0x477fe000); /* 65519.998 -> 65504 */
    F16(0x477ff000, 0x7f800000); /* 65520 = 65504 + half an ulp: tie, odd: infinity */
    F16(0xc77ff000, 0xff800000); /* -65520 -> -infinity */
    F16(0xc77fef00, 0xc77fe000); /* -65519 -> -65504 */
    F16(0x47800000, 0x7f800000); /* 65536 */
    F16(0x501502f9, 0x7f800000); /* 1e10 */
    F16(0x7f7fffff, 0x7f800000); /* FLT_MAX */
    F16(0x7f800000, 0x7f800000);
    F16(0xff800000, 0xff800000);
    F16(0x38800000, 0x38800000); /* 2^-14, smallest normal */
    F16(0x38801000, 0x38800000); /* 2^-14 + 2^-25: tie, even: down */
    F16(0x38803000, 0x38804000); /* 2^-14 + 3 2^-25: tie, odd: up */
    /* subnormals: multiples of 2^-24 */
    F16(0x33800000, 0x33800000); /* 2^-24, smallest subnormal */
    F16(0x33000000, 0x00000000); /* 2^-25 = half of it: tie with even 0: +0 */
    F16(0xb3000000, 0x80000000); /* -2^-25 -> -0 */
    F16(0x33000001, 0x33800000); /* just above 2^-25 -> 2^-24 */
    F16(0x32800000, 0x00000000); /* 2^-26 -> 0 */
    F16(0x00000001, 0x00000000); /* f32 subnormal -> 0 */
    F16(0x80000001, 0x80000000);
    F16(0x33c00000, 0x34000000); /* 3 2^-25 = 1.5 2^-24: tie between 1 (odd) and 2: 2^-23 */
    F16(0x34200000, 0x34000000); /* 5 2^-25 = 2.5 2^-24: tie between 2 (even) and 3: 2^-23 */
    F16(0x34600000, 0x34800000); /* 7 2^-25 = 3.5 2^-24: tie, 3 odd: 4 2^-24 = 2^-22 */
    F16(0x387fc000, 0x387fc000); /* 1023 2^-24, largest subnormal */
    F16(0x387fe000, 0x38800000); /* 1023.5 2^-24: tie, 1023 odd: 2^-14 */
    F16(0x387ff000, 0x38800000); /* 2^-14 - 2^-26 -> 2^-14 */
    F16(0x387fdfff, 0x387fc000); /* just below 1023.5 2^-24 */
    F16(0x00000000, 0x00000000);
    F16(0x80000000, 0x80000000); /* negative zero stays negative */
    F16(0x7fc00000, 0x7fc00000);
    F16(0x7f800001, 0x7fc00000); /* payload below f16's: quiet NaN, not inf */
    F16(0x7fbfffff, 0x7fffe000); /* quieted, payload's top 10 bits kept */
    F16(0xffc12345, 0xffc12000);
}

static void test_bits(void)
{
    CU_ASSERT_EQUAL(bt_f32_to_bf16_bits(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(bt_f32_to_bf16_bits(flt(0x3f818000)), 0x3f82);
    CU_ASSERT_EQUAL(bt_f32_to_bf16_bits(flt(0x7f7f8000)), 0x7f80);
    CU_ASSERT_EQUAL(bt_f32_to_bf16_bits(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(bt_f32_to_bf16_bits(flt(0xffc12345)), 0xffc1);
    CU_ASSERT_EQUAL(bits(bt_bf16_bits_to_f32(0x7f7f)), 0x7f7f0000);
    CU_ASSERT_EQUAL(bits(bt_bf16_bits_to_f32(0x0001)), 0x00010000);
    CU_ASSERT_EQUAL(bits(bt_bf16_bits_to_f32(0xc040)), 0xc0400000); /* -3 */

    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(1.0f), 0x3c00);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(-2.0f), 0xc000);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(65504.0f), 0x7bff);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(65519.0f), 0x7bff);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(65520.0f), 0x7c00);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(-INFINITY), 0xfc00);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x38800000)), 0x0400); /* 2^-14 */
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x387fc000)), 0x03ff); /* 1023 2^-24 */
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x387fe000)), 0x0400); /* tie -> 2^-14 */
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x33800000)), 0x0001); /* 2^-24 */
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x33c00000)), 0x0002); /* 1.5 2^-24 */
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x33000000)), 0x0000); /* 2^-25 */
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0xb3000000)), 0x8000);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x7fc00000)), 0x7e00);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0xffc12345)), 0xfe09);
    CU_ASSERT_EQUAL(bt_f32_to_f16_bits(flt(0x7f800001)), 0x7e00);
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0x0001)), 0x33800000);
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0x03ff)), 0x387fc000);
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0x8400)), 0xb8800000); /* -2^-14 */
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0x7bff)), 0x477fe000);
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0xfc00)), 0xff800000);
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0x7e00)), 0x7fc00000);
    CU_ASSERT_EQUAL(bits(bt_f16_bits_to_f32(0x3555)), 0x3eaaa000); /* 0.333251953125 */
}

/* ---- exhaustive over the 16-bit formats ----------------------------------------------------- */

/* The value of a 16-bit pattern with ebits exponent bits (5: f16, 8: bf16), decoded with ldexp;
 * the pattern just past the largest finite one gives 2^(emax+1), the would-be next value. */
static double decode16(uint32_t h, int ebits)
{
    const int mbits = 15 - ebits, bias = (1 << (ebits - 1)) - 1;
    const uint32_t emask = (1u << ebits) - 1;
    const uint32_t e = (h >> mbits) & emask, m = h & ((1u << mbits) - 1);
    const double sign = (h & 0x8000u) ? -1.0 : 1.0;
    if (e == emask) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp((double)m, 1 - bias - mbits);
    return sign * ldexp((double)((1u << mbits) + m), (int)e - bias - mbits);
}

static void exhaustive(int ebits, float (*round)(float), float (*from_bits)(uint16_t),
                       uint16_t (*to_bits)(float), const char *name)
{
    const int mbits = 15 - ebits;
    const uint32_t inf = ((1u << ebits) - 1) << mbits; /* 0x7c00 or 0x7f80 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const double v = decode16(h, ebits);
        const float f = (float)v;
        int b;
        if (isnan(v))
            b = !isnan(from_bits((uint16_t)h)) || !isnan(round(from_bits((uint16_t)h)));
        else
            b = (double)f != v || bits(from_bits((uint16_t)h)) != bits(f) ||
                bits(round(f)) != bits(f) || to_bits(f) != h;
        if (b && failures_shown++ < 5) printf("\n  %s: pattern 0x%04x", name, (unsigned)h);
        bad += b;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* midpoints between each finite non-negative pattern h and h + 1 (the next, or infinity) */
    bad = 0;
    for (uint32_t h = 0; h < inf; h++) {
        const double lo = decode16(h, ebits);
        const double hi = h + 1 < inf ? decode16(h + 1, ebits) : ldexp(1.0, (1 << (ebits - 1)));
        const float mid = (float)((lo + hi) / 2);
        if ((double)mid != (lo + hi) / 2) bad++; /* every midpoint is an f32 */
        const uint32_t even = (h & 1u) ? h + 1 : h;
        const float want_even = even < inf ? (float)decode16(even, ebits) : INFINITY;
        const float want_hi = h + 1 < inf ? (float)hi : INFINITY;
        const float want_lo = (float)lo;
        const int b = bits(round(mid)) != bits(want_even) ||
                      bits(round(-mid)) != bits(-want_even) ||
                      bits(round(nextafterf(mid, INFINITY))) != bits(want_hi) ||
                      bits(round(nextafterf(mid, 0.0f))) != bits(want_lo) ||
                      bits(round(-nextafterf(mid, 0.0f))) != bits(-want_lo);
        if (b && failures_shown++ < 5)
            printf("\n  %s: midpoint above 0x%04x (%.9g) -> %.9g, want %.9g", name, (unsigned)h,
                   (double)mid, (double)round(mid), (double)want_even);
        bad += b;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_f16_exhaustive(void)
{
    exhaustive(5, bt_round_f16, bt_f16_bits_to_f32, bt_f32_to_f16_bits, "f16");
}

static void test_bf16_exhaustive(void)
{
    exhaustive(8, bt_round_bf16, bt_bf16_bits_to_f32, bt_f32_to_bf16_bits, "bf16");
}

/* ---- the array paths against the scalar functions ------------------------------------------- */

#define SWEEP_N 1000000

/* Values that exercise every branch of both formats. */
static void fill_sweep(float *x, size_t n, uint64_t seed)
{
    static const uint32_t special[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
        0x7fbfffff, 0xffc12345, 0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0x477ff000, 0x477fefff,
        0xc77ff000, 0x47800000, 0x38800000, 0x387fe000, 0x387fdfff, 0x33000000, 0x33000001,
        0x00000001, 0x007fffff, 0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x3ffff000};
    const size_t nspecial = sizeof special / sizeof special[0];
    for (size_t i = 0; i < n; i++) {
        const uint64_t r = bt_rng_next(&seed);
        uint32_t u = (uint32_t)r;
        const uint32_t sign = (uint32_t)(r >> 32) & 0x80000000u;
        switch ((r >> 40) % 6) {
        case 0: /* any bit pattern: NaNs, infinities, subnormals, every exponent */
            break;
        case 1: /* the f16 range and a little beyond: exponents 96..146 */
            u = sign | ((96u + (uint32_t)((r >> 48) % 51)) << 23) | (u & 0x7fffffu);
            break;
        case 2: /* f16 ties: the 13 dropped bits exactly half */
            u = sign | ((96u + (uint32_t)((r >> 48) % 51)) << 23) | (u & 0x7fe000u) | 0x1000u;
            break;
        case 3: /* bf16 ties at any exponent */
            u = (u & 0xffff0000u) | 0x8000u;
            break;
        case 4: /* one ulp either side of a tie */
            u = sign | ((96u + (uint32_t)((r >> 48) % 51)) << 23) | (u & 0x7f6000u) | 0x1000u;
            u += (r >> 56) & 1 ? 1 : (uint32_t)-1;
            break;
        default:
            u = special[(r >> 48) % nspecial] ^ sign;
            break;
        }
        x[i] = flt(u);
    }
}

static int compare(const char *what, const float *in, const float *got, size_t n,
                   float (*round)(float))
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        if (bits(got[i]) != bits(round(in[i]))) {
            if (bad++ < 5)
                printf("\n  %s: 0x%08x -> 0x%08x, scalar 0x%08x", what, (unsigned)bits(in[i]),
                       (unsigned)bits(got[i]), (unsigned)bits(round(in[i])));
        }
    return bad;
}

static void test_array_sweep(void)
{
    float *in = malloc(SWEEP_N * sizeof *in), *a = malloc(SWEEP_N * sizeof *a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    fill_sweep(in, SWEEP_N, 42);
    printf(" [F16C path %s] ", bt_round_f16_hw() ? "on" : "off");
    const bt_dtype prec[2] = {BT_BF16, BT_F16};
    float (*const scalar[2])(float) = {bt_round_bf16, bt_round_f16};
    void (*const paths[2])(bt_dtype, float *, size_t) = {bt_round_array,
                                                         bt_round_array_portable};
    const char *names[2][2] = {{"bf16 array", "bf16 portable"}, {"f16 array", "f16 portable"}};
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++) {
            memcpy(a, in, SWEEP_N * sizeof *a);
            paths[k](prec[p], a, SWEEP_N);
            CU_ASSERT_EQUAL(compare(names[p][k], in, a, SWEEP_N, scalar[p]), 0);
            /* unaligned starts and every tail length around the vector widths */
            for (size_t off = 0; off < 5; off++)
                for (size_t len = 0; len < 40; len++) {
                    memcpy(a, in, 64 * sizeof *a);
                    paths[k](prec[p], a + off, len);
                    CU_ASSERT_EQUAL(compare(names[p][k], in + off, a + off, len, scalar[p]), 0);
                    /* nothing outside [off, off + len) touched */
                    CU_ASSERT_EQUAL(memcmp(a, in, off * sizeof *a), 0);
                    CU_ASSERT_EQUAL(memcmp(a + off + len, in + off + len,
                                           (64 - off - len) * sizeof *a),
                                    0);
                }
        }
    /* f32 and the other dtypes leave the values alone, NaN payloads included */
    const bt_dtype keep[3] = {BT_F32, BT_F64, BT_I32};
    for (int k = 0; k < 3; k++) {
        memcpy(a, in, SWEEP_N * sizeof *a);
        bt_round_array(keep[k], a, SWEEP_N);
        CU_ASSERT_EQUAL(memcmp(a, in, SWEEP_N * sizeof *a), 0);
        bt_round_array_portable(keep[k], a, SWEEP_N);
        CU_ASSERT_EQUAL(memcmp(a, in, SWEEP_N * sizeof *a), 0);
    }
    free(in);
    free(a);
}

/* The CPU backend's round_to shares the array among the device's threads (BT_PARALLEL_FOR in
 * blocks): on 1, 2 and 3 threads every value is the scalar function's, lengths the blocks do not
 * divide evenly included, and nothing past the end is touched. */
static void test_round_to_threads(void)
{
    const bt_backend *be = bt_cpu_backend();
    float *in = malloc(SWEEP_N * sizeof *in), *a = malloc(SWEEP_N * sizeof *a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    fill_sweep(in, SWEEP_N, 7);
    for (int threads = 1; threads <= 3; threads++) {
        bt_device *dev = NULL;
        CU_ASSERT_FATAL(be->open(0, -threads, &dev) == BT_OK); /* as many as the machine allows */
        const size_t lens[] = {SWEEP_N - 1, 1001, 47, 1};
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            memcpy(a, in, SWEEP_N * sizeof *a);
            CU_ASSERT(be->round_to(dev, BT_BF16, a, lens[k]) == BT_OK);
            CU_ASSERT_EQUAL(compare("bf16 round_to", in, a, lens[k], bt_round_bf16), 0);
            CU_ASSERT_EQUAL(memcmp(a + lens[k], in + lens[k], (SWEEP_N - lens[k]) * sizeof *a), 0);
        }
        be->close(dev);
    }
    free(in);
    free(a);
}

/* round_copy (the compute copies' refresh) on 1, 2 and 3 threads: dst is what round_to gives in
 * place, for bf16, f16 and f32 (a copy), src is left alone and nothing past dst's end is written. */
static void test_round_copy_threads(void)
{
    const bt_backend *be = bt_cpu_backend();
    CU_ASSERT_PTR_NOT_NULL_FATAL(be->round_copy);
    float *in = malloc(SWEEP_N * sizeof *in), *a = malloc(SWEEP_N * sizeof *a),
          *keep = malloc(SWEEP_N * sizeof *keep), *want = malloc(SWEEP_N * sizeof *want);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in && a && keep && want);
    fill_sweep(in, SWEEP_N, 11);
    memcpy(keep, in, SWEEP_N * sizeof *in);
    const bt_dtype precs[] = {BT_BF16, BT_F16, BT_F32};
    for (int threads = 1; threads <= 3; threads++) {
        bt_device *dev = NULL;
        CU_ASSERT_FATAL(be->open(0, -threads, &dev) == BT_OK);
        const size_t lens[] = {SWEEP_N - 1, 100003, 1001, 1};
        for (size_t p = 0; p < 3; p++)
            for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
                memcpy(want, in, SWEEP_N * sizeof *want);
                bt_round_array(precs[p], want, lens[k]);
                for (size_t i = 0; i < SWEEP_N; i++) a[i] = -1.0f;
                CU_ASSERT(be->round_copy(dev, precs[p], a, in, lens[k]) == BT_OK);
                CU_ASSERT_EQUAL(memcmp(a, want, lens[k] * sizeof *a), 0);
                CU_ASSERT(a[lens[k]] == -1.0f);
                CU_ASSERT_EQUAL(memcmp(in, keep, SWEEP_N * sizeof *in), 0);
            }
        CU_ASSERT(be->round_copy(dev, BT_I32, a, in, 4) == BT_ERR_INVALID_ARG);
        be->close(dev);
    }
    free(in);
    free(a);
    free(keep);
    free(want);
}

/* zero and copy share large buffers among the device's threads in blocks: every byte of an odd
 * length is written, and none past it. */
static void test_zero_copy_threads(void)
{
    const bt_backend *be = bt_cpu_backend();
    const size_t cap = 3u << 20;
    unsigned char *src = malloc(cap), *dst = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src && dst);
    for (size_t i = 0; i < cap; i++) src[i] = (unsigned char)(i * 131 + 7);
    for (int threads = 1; threads <= 3; threads++) {
        bt_device *dev = NULL;
        CU_ASSERT_FATAL(be->open(0, -threads, &dev) == BT_OK);
        const size_t lens[] = {cap - 1, (1u << 20) + 3, 300001, 4097, 0};
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            memset(dst, 0xAB, cap);
            CU_ASSERT(be->copy(dev, dst, src, lens[k]) == BT_OK);
            CU_ASSERT_EQUAL(memcmp(dst, src, lens[k]), 0);
            CU_ASSERT(dst[lens[k]] == 0xAB);
            CU_ASSERT(be->zero(dev, dst, lens[k]) == BT_OK);
            size_t nonzero = 0;
            for (size_t i = 0; i < lens[k]; i++) nonzero += dst[i] != 0;
            CU_ASSERT_EQUAL(nonzero, 0);
            CU_ASSERT(dst[lens[k]] == 0xAB);
        }
        be->close(dev);
    }
    free(src);
    free(dst);
}

/* Over increasing f32 values up to beyond f16's range (every 97th bit pattern): rounding is
 * monotonic, idempotent, odd (round(-x) = -round(x)) and within half an ulp of the format. */
static void test_monotonic(void)
{
    int bad = 0;
    float prev16 = 0, prevb = 0;
    for (uint32_t u = 0; u < 0x47a00000u; u += 97) {
        const float x = flt(u), r16 = bt_round_f16(x), rb = bt_round_bf16(x);
        bad += r16 < prev16 || rb < prevb;
        bad += bits(bt_round_f16(r16)) != bits(r16) || bits(bt_round_bf16(rb)) != bits(rb);
        bad += bits(bt_round_f16(-x)) != (bits(r16) ^ 0x80000000u) ||
               bits(bt_round_bf16(-x)) != (bits(rb) ^ 0x80000000u);
        /* half an ulp: 2^-11 relative for normal f16, 2^-25 absolute for subnormal f16, 2^-8
         * relative for bf16 (2^-134 absolute for its subnormals); from 65520 on, infinity */
        if (x < 65520.0f)
            bad += (double)fabsf(r16 - x) > fmax((double)x * 0x1p-11, 0x1p-25);
        else
            bad += !isinf(r16);
        bad += (double)fabsf(rb - x) > fmax((double)x * 0x1p-8, 0x1p-134);
        prev16 = r16;
        prevb = rb;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ---- loss scaler ---------------------------------------------------------------------------- */

static void test_loss_scale_defaults(void)
{
    bt_loss_scale s;
    bt_loss_scale_init(&s, 0, 0);
    CU_ASSERT_EQUAL(s.scale, 65536.0);
    CU_ASSERT_EQUAL(s.growth_interval, 2000);
    CU_ASSERT_EQUAL(s.growth, 2.0);
    CU_ASSERT_EQUAL(s.backoff, 0.5);
    CU_ASSERT_EQUAL(s.min_scale, 1.0);
    CU_ASSERT_EQUAL(s.skipped, 0);
    /* 1999 clean steps keep the scale, the 2000th doubles it */
    for (int i = 0; i < 1999; i++) CU_ASSERT_EQUAL(bt_loss_scale_update(&s, 1), 1);
    CU_ASSERT_EQUAL(s.scale, 65536.0);
    CU_ASSERT_EQUAL(bt_loss_scale_update(&s, 1), 1);
    CU_ASSERT_EQUAL(s.scale, 131072.0);
    CU_ASSERT_EQUAL(s.used, 65536.0);
    CU_ASSERT_EQUAL(s.growths, 1);
    CU_ASSERT_EQUAL(s.steps, 2000);
    /* initial scales below the minimum start at it */
    bt_loss_scale_init(&s, 0.25, 10);
    CU_ASSERT_EQUAL(s.scale, 1.0);
}

static void test_loss_scale_script(void)
{
    /* interval 3, start at 1024: finite (1), non-finite (0) per step, with the scale each step
     * uses, whether it is applied, the scale after it and the skips so far */
    static const struct {
        int finite;
        double used;
        int applied;
        double after;
        int skipped;
    } script[] = {
        {1, 1024, 1, 1024, 0}, {1, 1024, 1, 1024, 0}, {1, 1024, 1, 2048, 0}, /* grows */
        {0, 2048, 0, 1024, 1},                                                /* overflow */
        {1, 1024, 1, 1024, 1}, {1, 1024, 1, 1024, 1},
        {0, 1024, 0, 512, 2}, /* overflow resets the clean count */
        {1, 512, 1, 512, 2},   {1, 512, 1, 512, 2},   {1, 512, 1, 1024, 2},
        {0, 1024, 0, 512, 3},  {0, 512, 0, 256, 4}, /* twice in a row */
        {1, 256, 1, 256, 4},   {1, 256, 1, 256, 4},   {1, 256, 1, 512, 4},
        {1, 512, 1, 512, 4},   {1, 512, 1, 512, 4},   {1, 512, 1, 1024, 4}, /* grows again */
    };
    bt_loss_scale s;
    bt_loss_scale_init(&s, 1024, 3);
    for (size_t i = 0; i < sizeof script / sizeof script[0]; i++) {
        CU_ASSERT_EQUAL(s.scale, script[i].used);
        CU_ASSERT_EQUAL(bt_loss_scale_update(&s, script[i].finite), script[i].applied);
        CU_ASSERT_EQUAL(s.used, script[i].used);
        CU_ASSERT_EQUAL(s.scale, script[i].after);
        CU_ASSERT_EQUAL(s.skipped, script[i].skipped);
        CU_ASSERT_EQUAL(s.steps, (int64_t)i + 1);
    }
    CU_ASSERT_EQUAL(s.growths, 4);

    char buf[160];
    bt_loss_scale_init(&s, 0, 0);
    bt_loss_scale_update(&s, 0);
    CU_ASSERT_EQUAL(bt_loss_scale_skip_message(&s, 12, buf, sizeof buf), (int)strlen(buf));
    CU_ASSERT_STRING_EQUAL(buf, "step 12 skipped: gradients overflowed at loss scale 65536; scale "
                                "now 32768");
    /* truncated to the buffer, the full length returned */
    char small[8];
    const int full = bt_loss_scale_skip_message(&s, 12, small, sizeof small);
    CU_ASSERT_EQUAL(full, (int)strlen(buf));
    CU_ASSERT_STRING_EQUAL(small, "step 12");
}

static void test_loss_scale_bounds(void)
{
    bt_loss_scale s;
    char buf[160];
    /* never below 1: at 1 overflowing steps are still skipped and the scale stays 1 */
    bt_loss_scale_init(&s, 4, 100);
    const double after[5] = {2, 1, 1, 1, 1};
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(bt_loss_scale_update(&s, 0), 0);
        CU_ASSERT_EQUAL(s.scale, after[i]);
    }
    CU_ASSERT_EQUAL(s.skipped, 5);
    bt_loss_scale_skip_message(&s, 5, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "step 5 skipped: gradients overflowed at loss scale 1; scale now "
                                "1 (its minimum)");
    /* large scales print in full */
    bt_loss_scale_init(&s, 4194304, 100);
    bt_loss_scale_update(&s, 0);
    bt_loss_scale_skip_message(&s, 7, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "step 7 skipped: gradients overflowed at loss scale 4194304; "
                                "scale now 2097152");
    bt_loss_scale_format_skip(3, 1048576, 524288, buf, sizeof buf);
    CU_ASSERT_STRING_EQUAL(buf, "step 3 skipped: gradients overflowed at loss scale 1048576; "
                                "scale now 524288");
    /* never above 2^64 */
    bt_loss_scale_init(&s, 0x1p63, 1);
    CU_ASSERT_EQUAL(bt_loss_scale_update(&s, 1), 1);
    CU_ASSERT_EQUAL(s.scale, 0x1p64);
    CU_ASSERT_EQUAL(bt_loss_scale_update(&s, 1), 1);
    CU_ASSERT_EQUAL(s.scale, 0x1p64);
    CU_ASSERT_EQUAL(s.growths, 1);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"bf16 rounding, hand-derived", test_bf16_cases},
        {"f16 rounding, hand-derived", test_f16_cases},
        {"16-bit conversions", test_bits},
        {"f16: all 65536 patterns and midpoints", test_f16_exhaustive},
        {"bf16: all 65536 patterns and midpoints", test_bf16_exhaustive},
        {"array paths against the scalar functions", test_array_sweep},
        {"the CPU backend's round_to on several threads", test_round_to_threads},
        {"the CPU backend's round_copy on several threads", test_round_copy_threads},
        {"the CPU backend's zero and copy on several threads", test_zero_copy_threads},
        {"monotonic, idempotent, within half an ulp", test_monotonic},
        {"loss scale defaults and growth interval", test_loss_scale_defaults},
        {"loss scale scripted steps and message", test_loss_scale_script},
        {"loss scale bounds", test_loss_scale_bounds},
        {NULL, NULL},
    };
    return bt_test_main("precision", cases);
}
