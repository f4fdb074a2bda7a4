/* ops/pool.c: `maxpool2d` and `avgpool2d` on per-sample [C, H, W] inputs, output [C, Ho, Wo]
 * with Ho = (H + 2 ph - kh) / sh + 1 (floor, as PyTorch's default). stride defaults to the
 * kernel; padding (at most half the kernel, as PyTorch requires) counts as -inf for max and as
 * zeros for avg, whose divisor is always kh kw (PyTorch's count_include_pad=True). maxpool saves
 * the argmax of every output (int32, index ih W + iw within its channel) for the backward. */
#include <math.h>

#include "core/cpu_isa.h"
#include "core/util.h"
#include "ops/op_configs.h"
#include "ops/ops.h"

/* The input indices [*i0, *i1) that window position o covers along one axis. */
static inline void pool_span(int64_t o, int64_t stride, int64_t pad, int64_t k, int64_t in,
                             int64_t *i0, int64_t *i1)
{
    const int64_t start = o * stride - pad;
    *i0 = start < 0 ? 0 : start;
    *i1 = start + k > in ? in : start + k;
}

/* maxpool's 2x2 stride-2 windows in f32 with AVX-512, below: whether this CPU has it. */
#if defined(__GNUC__) && defined(__x86_64__)
#define POOL_AVX512 1
static void maxpool_row_2x2_avx512(const float *restrict xp, int64_t w, int64_t wo, int64_t oh,
                                   float *restrict y, int32_t *restrict arg);
static void maxpool_back_2x2_avx512(const float *restrict dy, const int32_t *restrict arg, int64_t w,
                                    int64_t wo, int64_t oh, float *restrict dxp);
static int pool_avx512(void) { return bt_cpu_isa_level() >= BT_ISA_AVX512; }
#else
#define maxpool_row_2x2_avx512 maxpool_row_2x2_f32
static int pool_avx512(void) { return 0; }
#endif

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/pool_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/pool_tmpl.h"

#ifdef POOL_AVX512
#include <immintrin.h>

/* maxpool_row_2x2_f32 (ops/pool_tmpl.h) 16 windows at a time: the two input rows' 32 elements
 * under 16 windows are loaded (masked at the row's end, so nothing past it is read) and split into
 * the windows' four corners a, b (row 2 oh) and c, d (row 2 oh + 1); the comparison tree is
 * argmax_2x2's, in masks: b wins its pair only if b > a, d only if d > c, the bottom pair only if
 * its winner exceeds the top's. So ties go to the first element, and the output is the chosen
 * element itself. Windows whose sum is NaN (a NaN, or infinities of both signs) are redone by the
 * scalar window_argmax_nan, as the scalar row does; the results are its, bit for bit. */
__attribute__((target("avx512f"))) static void maxpool_row_2x2_avx512(const float *restrict xp, int64_t w,
                                                                      int64_t wo, int64_t oh,
                                                                      float *restrict y,
                                                                      int32_t *restrict arg)
{
    const int64_t row = 2 * oh * w;
    const float *r0 = xp + row, *r1 = r0 + w;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1)), one = _mm512_set1_epi32(1);
    const __m512i below = _mm512_set1_epi32((int32_t)w);
    for (int64_t ow = 0; ow < wo; ow += 16) {
        const unsigned n = (unsigned)(wo - ow < 16 ? wo - ow : 16); /* windows in this vector */
        const __mmask16 lo = (__mmask16)(n >= 8 ? 0xffffu : (1u << 2 * n) - 1);
        const __mmask16 hi = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
        const __mmask16 out = (__mmask16)((1u << n) - 1);
        const float *p0 = r0 + 2 * ow, *p1 = r1 + 2 * ow;
        const __m512 top_lo = _mm512_maskz_loadu_ps(lo, p0), top_hi = _mm512_maskz_loadu_ps(hi, p0 + 16);
        const __m512 bot_lo = _mm512_maskz_loadu_ps(lo, p1), bot_hi = _mm512_maskz_loadu_ps(hi, p1 + 16);
        const __m512 a = _mm512_permutex2var_ps(top_lo, even, top_hi);
        const __m512 b = _mm512_permutex2var_ps(top_lo, odd, top_hi);
        const __m512 c = _mm512_permutex2var_ps(bot_lo, even, bot_hi);
        const __m512 d = _mm512_permutex2var_ps(bot_lo, odd, bot_hi);
        const __mmask16 b_wins = _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ);
        const __mmask16 d_wins = _mm512_cmp_ps_mask(d, c, _CMP_GT_OQ);
        const __m512 top = _mm512_mask_blend_ps(b_wins, a, b), bottom = _mm512_mask_blend_ps(d_wins, c, d);
        const __mmask16 bottom_wins = _mm512_cmp_ps_mask(bottom, top, _CMP_GT_OQ);
        _mm512_mask_storeu_ps(y + ow, out, _mm512_mask_blend_ps(bottom_wins, top, bottom));
        if (arg) {
            const __m512i at_top = _mm512_maskz_mov_epi32(b_wins, one);
            const __m512i at_bottom = _mm512_mask_add_epi32(below, d_wins, below, one);
            const __m512i base = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(row + 2 * ow)), even);
            const __m512i at = _mm512_add_epi32(base, _mm512_mask_blend_epi32(bottom_wins, at_top, at_bottom));
            _mm512_mask_storeu_epi32(arg + ow, out, at);
        }
        const __m512 sum = _mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d));
        for (unsigned nan = _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q) & out; nan; nan &= nan - 1) {
            const int64_t o = ow + __builtin_ctz(nan);
            const int64_t at = window_argmax_nan_f32(xp, w, 2 * oh, 2 * oh + 2, 2 * o, 2 * o + 2);
            y[o] = xp[at];
            if (arg) arg[o] = (int32_t)at;
        }
    }
}

/* maxpool2d_backward_f32's loop (ops/pool_tmpl.h) over output row oh of a plane with 2x2
 * stride-2 windows, 16 windows at a time: each window's output gradient and
 * argmax are spread over the two lanes of its columns (2 ow and 2 ow + 1) in both of its rows,
 * and a lane adds the gradient only where the argmax is its own element (a masked add: the other
 * elements keep their bits, -0 included), as the scalar loop's one addition per window does. */
__attribute__((target("avx512f"))) static void maxpool_back_2x2_avx512(const float *restrict dy,
                                                                       const int32_t *restrict arg,
                                                                       int64_t w, int64_t wo, int64_t oh,
                                                                       float *restrict dxp)
{
    const int64_t row = 2 * oh * w;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i first = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
    const __m512i below = _mm512_set1_epi32((int32_t)w);
    for (int64_t ow = 0; ow < wo; ow += 16) {
        const unsigned n = (unsigned)(wo - ow < 16 ? wo - ow : 16);
        const __mmask16 in = (__mmask16)((1u << n) - 1);
        const __mmask16 lo = (__mmask16)(n >= 8 ? 0xffffu : (1u << 2 * n) - 1);
        const __mmask16 hi = (__mmask16)(n > 8 ? (1u << (2 * n - 16)) - 1 : 0);
        const __m512 g = _mm512_maskz_loadu_ps(in, dy + ow);
        const __m512i a = _mm512_maskz_loadu_epi32(in, arg + ow);
        const __m512 g_lo = _mm512_permutexvar_ps(first, g), g_hi = _mm512_permutexvar_ps(second, g);
        const __m512i a_lo = _mm512_permutexvar_epi32(first, a), a_hi = _mm512_permutexvar_epi32(second, a);
        const __m512i at = _mm512_add_epi32(_mm512_set1_epi32((int32_t)(row + 2 * ow)), lane);
        const __m512i at_hi = _mm512_add_epi32(at, _mm512_set1_epi32(16));
        for (int r = 0; r < 2; r++) { /* rows 2 oh and 2 oh + 1 */
            const __m512i off = r ? below : _mm512_setzero_si512();
            float *d = dxp + row + r * w + 2 * ow;
            const __mmask16 k_lo = lo & _mm512_cmpeq_epi32_mask(a_lo, _mm512_add_epi32(at, off));
            const __mmask16 k_hi = hi & _mm512_cmpeq_epi32_mask(a_hi, _mm512_add_epi32(at_hi, off));
            const __m512 d_lo = _mm512_maskz_loadu_ps(lo, d), d_hi = _mm512_maskz_loadu_ps(hi, d + 16);
            _mm512_mask_storeu_ps(d, k_lo, _mm512_add_ps(d_lo, g_lo));
            _mm512_mask_storeu_ps(d + 16, k_hi, _mm512_add_ps(d_hi, g_hi));
        }
    }
}
#endif

BT_OPS_DISPATCH("maxpool2d", maxpool2d_forward, call->out->dtype)
BT_OPS_DISPATCH("maxpool2d", maxpool2d_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("avgpool2d", avgpool2d_forward, call->out->dtype)
BT_OPS_DISPATCH("avgpool2d", avgpool2d_backward, call->out_grad->dtype)

static bt_status pool_infer(bt_infer_ctx *ctx, const char *op, bt_pool_config *cfg)
{
    static const int64_t zero[2] = {0, 0};
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, op, &dtype);
    if (st != BT_OK) return st;
    if ((st = bt_ops_need_ndim(ctx, op, 0, 3, "[C, H, W]")) != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    int64_t k[2], s[2], p[2], o[2];
    if ((st = bt_ops_pair_arg(ctx, op, "kernel", zero, k)) != BT_OK) return st;
    if ((st = bt_ops_pair_arg(ctx, op, "stride", k, s)) != BT_OK) return st;
    if ((st = bt_ops_pair_arg(ctx, op, "padding", zero, p)) != BT_OK) return st;
    if (2 * p[0] > k[0] || 2 * p[1] > k[1])
        return bt_infer_error(ctx,
                              "%s: padding [%lld, %lld] must be at most half the kernel [%lld, "
                              "%lld]",
                              op, (long long)p[0], (long long)p[1], (long long)k[0],
                              (long long)k[1]);
    if ((st = bt_ops_window_out(ctx, op, x, k, s, p, o)) != BT_OK) return st;
    *cfg = (bt_pool_config){.c = x->dim[0], .h = x->dim[1], .w = x->dim[2], .ho = o[0], .wo = o[1],
                         .kh = k[0], .kw = k[1], .sh = s[0], .sw = s[1], .ph = p[0], .pw = p[1]};
    bt_shape y = {.ndim = 3, .dim = {cfg->c, cfg->ho, cfg->wo}};
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    return bt_infer_set_config(ctx, cfg, sizeof *cfg);
}

static bt_status maxpool2d_infer(bt_infer_ctx *ctx)
{
    bt_pool_config cfg;
    bt_status st = pool_infer(ctx, "maxpool2d", &cfg);
    if (st != BT_OK) return st;
    bt_infer_set_saved(ctx, (size_t)(cfg.c * cfg.ho * cfg.wo) * sizeof(int32_t));
    return BT_OK;
}

static bt_status avgpool2d_infer(bt_infer_ctx *ctx)
{
    bt_pool_config cfg;
    return pool_infer(ctx, "avgpool2d", &cfg);
}

/* Under mixed precision maxpool's output is one of its input's elements (exact); its input
 * gradient is exact where no input element lies in two windows (stride >= kernel on both axes: a
 * zeroed gradient then receives at most one output-gradient element), the same on either backend.
 * avgpool divides, so it has no lowp_exact. */
static int maxpool2d_lowp_exact(const void *config, bt_dtype precision, int pass, const char *backend)
{
    const bt_pool_config *cf = config;
    (void)precision, (void)backend;
    if (pass == BT_LOWP_FORWARD) return 1;
    return pass == BT_LOWP_BACKWARD && cf->sh >= cf->kh && cf->sw >= cf->kw;
}

static const bt_arg_spec pool_args[] = {
    {"kernel", BT_ARG_INTS, 1, 1, BT_OPS_DIM_MAX, "window: k or [kh, kw]"},
    {"stride", BT_ARG_INTS, 0, 1, BT_OPS_DIM_MAX, "stride: s or [sh, sw] (default: the kernel)"},
    {"padding", BT_ARG_INTS, 0, 0, BT_OPS_DIM_MAX, "padding: p or [ph, pw] (default 0)"},
};

const bt_op_def bt_op_maxpool2d = {
    .name = "maxpool2d",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = pool_args,
    .n_args = 3,
    .infer = maxpool2d_infer,
    .cpu_forward = maxpool2d_forward,
    .cpu_backward = maxpool2d_backward,
    .help = "2-D max pooling of [C, H, W]",
    .lowp_exact = maxpool2d_lowp_exact,
};

const bt_op_def bt_op_avgpool2d = {
    .name = "avgpool2d",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = pool_args,
    .n_args = 3,
    .infer = avgpool2d_infer,
    .cpu_forward = avgpool2d_forward,
    .cpu_backward = avgpool2d_backward,
    .help = "2-D average pooling of [C, H, W] (padding counts as zeros)",
};
