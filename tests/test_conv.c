/* tests/test_conv.c: conv2d on oneDNN (cpu/conv_onednn.c) against im2col + GEMM, and the choice
 * between them (BATON_CPU_CONV, bt_conv_choose). Checked, through the op's own CPU kernels:
 *   - f32: forward, input, weight and bias gradients on oneDNN equal the im2col path's within
 *     float rounding: every element within 1e-5 x (the largest magnitude of that tensor in an
 *     f64 reference, at least 1) of the f64 im2col reference, both f32 paths alike; the shapes
 *     cover strides, paddings, kernels of unequal sides, outputs that leave input rows unread
 *     (oneDNN's right padding negative), a 1x1 conv with and without stride, no bias, a fused
 *     relu, width 1, batch 1 and the CNN's second layer; the backward adds into gradients
 *     pre-filled with random values (the kernel contract);
 *   - gradients by central finite differences on oneDNN in f32 (conv is linear in x and w, so
 *     the differences are exact up to f32 rounding: h 0.05, tolerance 2e-3);
 *   - bf16 (`precision: bf16`, operands already bf16 values): oneDNN's bf16 convolution against
 *     the f64 reference over the same operands within 1e-3 of the tensor's scale (products
 *     exact, f32 accumulation; 1e-3 leaves room for an implementation that rounds partial sums
 *     to bf16 once, at 2^-8 ~ 4e-3 it would fail), and the im2col bf16 path likewise; the
 *     forward's output is a bf16 value on both paths (the kernel rounds it), compared after
 *     taking off that final rounding (at most half an ulp, 2^-8 of the value);
 *   - a call on oneDNN runs on the thread count it is given (1, then 2);
 *   - a forced path is the path every call takes and is recorded as forced; under auto each
 *     shape and pass is timed once and its choice kept (a second call does not time again), with
 *     times for both paths; a choice for one shape does not answer another, nor the forward's
 *     the backward's (a backward without an input gradient is a pass of its own). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "core/half.h"
#include "cpu/blas.h"
#include "cpu/blocked16.h"
#include "cpu/conv_onednn.h"
#include "op_check.h"

#ifdef BATON_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

typedef struct conv_case {
    const char *label, *args;
    int64_t c, h, w, batch;
} conv_case;

static const conv_case cases[] = {
    {"k3 p1", "out=5 kernel=3 padding=1", 3, 8, 8, 4},
    {"k(3,2) s(2,1) p(1,0)", "out=3 kernel=3,2 stride=2,1 padding=1,0", 2, 7, 6, 3},
    {"k3 s2 p2 no bias", "out=2 kernel=3 stride=2 padding=2 bias=false", 2, 5, 5, 2},
    {"k(2,3) s(3,2) p(0,1), last row unread", "out=4 kernel=2,3 stride=3,2 padding=0,1", 3, 9, 7, 2},
    {"k(5,3) p(2,1) no bias", "out=2 kernel=5,3 padding=2,1 bias=false", 2, 6, 5, 2},
    {"k3 p1 width 1", "out=2 kernel=3 padding=1", 2, 3, 1, 2},
    {"k3 p1 batch 1 relu", "out=6 kernel=3 padding=1 act=relu", 4, 9, 9, 1},
    {"1x1", "out=6 kernel=1", 4, 5, 5, 3},
    {"1x1 s2 relu", "out=2 kernel=1 stride=2 act=relu", 3, 6, 5, 2},
    {"fashion-cnn conv2", "out=64 kernel=3 padding=1 act=relu", 32, 14, 14, 4},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

static int skip_onednn(void)
{
    if (bt_cpu_conv_onednn_available()) return 0;
    printf("\n  this baton has no oneDNN: nothing to compare ");
    return 1;
}

/* values of every float tensor a conv2d call reads or writes, as doubles */
typedef struct conv_result {
    double *t[4];   /* y, dx, dw, db */
    int64_t n[4];
} conv_result;

static void result_free(conv_result *r)
{
    for (int i = 0; i < 4; i++) free(r->t[i]);
    memset(r, 0, sizeof *r);
}

static void keep(conv_result *r, int i, const bt_tensor *t)
{
    if (!t || !t->data) return;
    r->n[i] = bt_tensor_numel(t);
    r->t[i] = malloc((size_t)r->n[i] * sizeof(double));
    for (int64_t e = 0; e < r->n[i]; e++) r->t[i][e] = oc_get(t, e);
}

/* Runs case c in `real` on `path` (forced) at `precision`: the forward, then the backward into
 * gradients pre-filled from seed 99 (the same for every run), from the same seeded values. With
 * bf16_values the inputs, weights and output gradient are rounded to bf16 first. */
static void run_case(const conv_case *c, bt_dtype real, int path, bt_dtype precision,
                     int bf16_values, conv_result *r)
{
    oc_layer L;
    bt_shape s = {.ndim = 3, .dim = {c->c, c->h, c->w}};
    bt_dtype dt = BT_F64;
    memset(r, 0, sizeof *r);
    CU_ASSERT_FATAL(oc_setup(&L, "conv2d", c->args, 1, &s, &dt, c->batch, real) == BT_OK);
    L.training = 1;
    L.precision = precision;
    if (bf16_values) {
        bt_tensor *ts[] = {&L.in[0], &L.param[0], &L.out_grad};
        for (int k = 0; k < 3; k++)
            for (int64_t e = 0; e < bt_tensor_numel(ts[k]); e++)
                oc_set(ts[k], e, bt_round_bf16((float)oc_get(ts[k], e)));
    }
    L.rng = 99;
    oc_fill(&L, &L.in_grad[0], -1, 1);
    for (int j = 0; j < L.n_params; j++) oc_fill(&L, &L.param_grad[j], -1, 1);
    bt_cpu_conv_force(path);
    CU_ASSERT_FATAL(oc_forward(&L) == BT_OK);
    keep(r, 0, &L.out);
    CU_ASSERT_FATAL(oc_backward(&L) == BT_OK);
    keep(r, 1, &L.in_grad[0]);
    keep(r, 2, &L.param_grad[0]);
    if (L.n_params > 1) keep(r, 3, &L.param_grad[1]);
    bt_cpu_conv_force(-2);
    oc_free(&L);
}

/* The worst |got - ref| / max(1, max |ref|) over the four tensors; names the tensor in *which.
 * y_rounded: got's forward output y was rounded to bf16 by the kernel (mixed precision: conv2d
 * rounds its own output, ops/conv.c): each element must be a bf16 value, and that rounding (at
 * most half an ulp: 2^-8 |y| with bf16's 8 significant bits) is taken off before the comparison,
 * which then bounds the accumulation's error as for the gradients. */
static double worst_of(const conv_result *got, const conv_result *ref, const char **which, int y_rounded)
{
    static const char *names[4] = {"y", "dx", "dw", "db"};
    double w = 0;
    *which = "-";
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(got->n[i], ref->n[i]);
        if (got->n[i] != ref->n[i] || !ref->t[i]) continue;
        double scale = 1;
        for (int64_t e = 0; e < ref->n[i]; e++) scale = fmax(scale, fabs(ref->t[i][e]));
        for (int64_t e = 0; e < ref->n[i]; e++) {
            double diff = fabs(got->t[i][e] - ref->t[i][e]);
            if (i == 0 && y_rounded) {
                CU_ASSERT((double)bt_round_bf16((float)got->t[i][e]) == got->t[i][e]);
                diff = fmax(0, diff - ldexp(fabs(got->t[i][e]), -8));
            }
            const double d = diff / scale;
            if (d > w) w = d, *which = names[i];
        }
    }
    return w;
}

static double worst(const conv_result *got, const conv_result *ref, const char **which)
{
    return worst_of(got, ref, which, 0);
}

static void test_f32_against_im2col(void)
{
    if (skip_onednn()) return;
    for (int k = 0; k < N_CASES; k++) {
        conv_result ref, im, dnn;
        const char *wi, *wd;
        run_case(&cases[k], BT_F64, BT_CONV_IM2COL, BT_F32, 0, &ref);
        run_case(&cases[k], BT_F32, BT_CONV_IM2COL, BT_F32, 0, &im);
        run_case(&cases[k], BT_F32, BT_CONV_ONEDNN, BT_F32, 0, &dnn);
        const double ei = worst(&im, &ref, &wi), ed = worst(&dnn, &ref, &wd);
        printf("\n  %-40s im2col %.1e (%s), onednn %.1e (%s)", cases[k].label, ei, wi, ed, wd);
        CU_ASSERT(ei <= 1e-5);
        CU_ASSERT(ed <= 1e-5);
        result_free(&ref), result_free(&im), result_free(&dnn);
    }
    printf("\n  ");
}

static void test_f32_gradcheck(void)
{
    if (skip_onednn()) return;
    char msg[256];
    for (int k = 0; k < N_CASES; k++) {
        if (strstr(cases[k].args, "relu")) continue; /* a kink: finite differences need f64 */
        if (cases[k].c * cases[k].h * cases[k].w * cases[k].batch > 2000) continue; /* slow */
        oc_layer L;
        bt_shape s = {.ndim = 3, .dim = {cases[k].c, cases[k].h, cases[k].w}};
        bt_dtype dt = BT_F64;
        CU_ASSERT_FATAL(oc_setup(&L, "conv2d", cases[k].args, 1, &s, &dt, cases[k].batch, BT_F32) == BT_OK);
        L.training = 1;
        bt_cpu_conv_force(BT_CONV_ONEDNN);
        const int bad = oc_gradcheck(&L, 0.05, 2e-3, msg, sizeof msg);
        bt_cpu_conv_force(-2);
        if (bad) printf("\n  %s: %d bad, %s", cases[k].label, bad, msg);
        CU_ASSERT_EQUAL(bad, 0);
        oc_free(&L);
    }
}

static void test_bf16(void)
{
    if (skip_onednn()) return;
    printf("\n  bf16 path: %s", bt_cpu_bf16_describe());
    bt_gemm_bf16_param_cache(0); /* the layers' weights are freed without telling gemm_bf16.c */
    for (int k = 0; k < N_CASES; k++) {
        conv_result ref, im, dnn;
        const char *wi, *wd;
        run_case(&cases[k], BT_F64, BT_CONV_IM2COL, BT_F32, 1, &ref);
        run_case(&cases[k], BT_F32, BT_CONV_IM2COL, BT_BF16, 1, &im);
        run_case(&cases[k], BT_F32, BT_CONV_ONEDNN, BT_BF16, 1, &dnn);
        const double ei = worst_of(&im, &ref, &wi, 1), ed = worst_of(&dnn, &ref, &wd, 1);
        printf("\n  %-40s im2col %.1e (%s), onednn %.1e (%s)", cases[k].label, ei, wi, ed, wd);
        CU_ASSERT(ei <= 1e-3);
        CU_ASSERT(ed <= 1e-3);
        result_free(&ref), result_free(&im), result_free(&dnn);
    }
    bt_gemm_bf16_param_cache(1);
    printf("\n  ");
}

/* Runs case c's forward once on the path the choice gives (no force). */
static void forward_auto(const conv_case *c, int64_t batch)
{
    oc_layer L;
    bt_shape s = {.ndim = 3, .dim = {c->c, c->h, c->w}};
    bt_dtype dt = BT_F64;
    CU_ASSERT_FATAL(oc_setup(&L, "conv2d", c->args, 1, &s, &dt, batch, BT_F32) == BT_OK);
    L.training = 1;
    CU_ASSERT(oc_forward(&L) == BT_OK);
    oc_free(&L);
}

static void test_choice(void)
{
    bt_conv_choice ch[8];
    char text[400];
    /* forced: recorded as forced, whatever the timing would say */
    bt_conv_choices_reset();
    bt_cpu_conv_force(BT_CONV_IM2COL);
    forward_auto(&cases[0], 4);
    bt_cpu_conv_force(-2);
    CU_ASSERT_EQUAL_FATAL(bt_conv_choices(ch, 8), 1);
    CU_ASSERT_EQUAL(ch[0].path, BT_CONV_IM2COL);
    CU_ASSERT(ch[0].forced);
    if (bt_cpu_conv_onednn_available()) {
        bt_conv_choices_reset();
        bt_cpu_conv_force(BT_CONV_ONEDNN);
        forward_auto(&cases[0], 4);
        bt_cpu_conv_force(-2);
        CU_ASSERT_EQUAL_FATAL(bt_conv_choices(ch, 8), 1);
        CU_ASSERT_EQUAL(ch[0].path, BT_CONV_ONEDNN);
        CU_ASSERT(ch[0].forced);
    }
    /* auto: timed once per shape, both paths (where the build has oneDNN) */
    bt_conv_choices_reset();
    bt_cpu_conv_force(-1);
    forward_auto(&cases[9], 4);
    CU_ASSERT_EQUAL_FATAL(bt_conv_choices(ch, 8), 1);
    bt_conv_choice_format(&ch[0], text, sizeof text);
    printf("\n  %s\n  ", text);
    CU_ASSERT(!ch[0].forced);
    CU_ASSERT_EQUAL(ch[0].pass, BT_CONV_FORWARD);
    CU_ASSERT(ch[0].ms[BT_CONV_IM2COL] > 0);
    if (bt_cpu_conv_onednn_available()) {
        CU_ASSERT(ch[0].ms[BT_CONV_ONEDNN] > 0);
        CU_ASSERT_EQUAL(ch[0].path, ch[0].ms[BT_CONV_ONEDNN] < ch[0].ms[BT_CONV_IM2COL]
                                        ? BT_CONV_ONEDNN : BT_CONV_IM2COL);
    }
    const double ms0 = ch[0].ms[BT_CONV_IM2COL];
    forward_auto(&cases[9], 4); /* the same shape: the kept choice */
    CU_ASSERT_EQUAL(bt_conv_choices(ch, 8), 1);
    CU_ASSERT_EQUAL(ch[0].ms[BT_CONV_IM2COL], ms0);
    forward_auto(&cases[9], 2); /* another micro-batch: another shape */
    CU_ASSERT_EQUAL(bt_conv_choices(ch, 8), 2);
    { /* the backward of the first shape, without and with the input gradient: two more passes */
        oc_layer L;
        bt_shape s = {.ndim = 3, .dim = {cases[9].c, cases[9].h, cases[9].w}};
        bt_dtype dt = BT_F64;
        CU_ASSERT_FATAL(oc_setup(&L, "conv2d", cases[9].args, 1, &s, &dt, 4, BT_F32) == BT_OK);
        L.training = 1;
        void *dx = L.in_grad[0].data;
        L.in_grad[0].data = NULL;
        CU_ASSERT(oc_backward(&L) == BT_OK);
        CU_ASSERT_EQUAL_FATAL(bt_conv_choices(ch, 8), 3);
        CU_ASSERT_EQUAL(ch[2].pass, BT_CONV_GRAD_WEIGHTS);
        L.in_grad[0].data = dx;
        CU_ASSERT(oc_backward(&L) == BT_OK);
        CU_ASSERT_EQUAL_FATAL(bt_conv_choices(ch, 8), 4);
        CU_ASSERT_EQUAL(ch[3].pass, BT_CONV_GRAD_INPUT | BT_CONV_GRAD_WEIGHTS);
        for (int i = 2; i < 4; i++) {
            bt_conv_choice_format(&ch[i], text, sizeof text);
            printf("%s\n  ", text);
            CU_ASSERT(ch[i].ms[BT_CONV_IM2COL] > 0);
        }
        oc_free(&L);
    }
    bt_cpu_conv_force(-2);
    bt_conv_choices_reset();
}

/* bt_conv_choose's timing callback for test_preload: counts calls, 1 ms for every path. */
static bt_status count_time(void *ctx, int path, double *ms)
{
    (void)path;
    ++*(int *)ctx;
    *ms = 1;
    return BT_OK;
}

/* Choices preloaded from a record (a resumed run's) are taken as recorded and never timed; the
 * first record of a shape wins; a recorded shape no call meets stays unused; unrecorded shapes
 * are timed as before; a forced path still wins. */
static void test_preload(void)
{
    const int other = bt_cpu_conv_onednn_available() ? BT_CONV_ONEDNN : BT_CONV_IM2COL;
    bt_conv_choice rec[3], ch[8];
    memset(rec, 0, sizeof rec);
    bt_conv_config cf = {.c = 32, .h = 14, .w = 14, .out = 64, .ho = 14, .wo = 14, .kh = 3, .kw = 3,
                         .sh = 1, .sw = 1, .ph = 1, .pw = 1, .bias = 1};
    for (int i = 0; i < 3; i++) {
        rec[i].cfg = cf, rec[i].batch = 8, rec[i].precision = BT_F32, rec[i].threads = 1;
        rec[i].pass = BT_CONV_FORWARD, rec[i].path = other;
    }
    rec[1].path = BT_CONV_IM2COL + BT_CONV_ONEDNN - other; /* the same shape again: not taken */
    rec[2].batch = 99;                                    /* a shape no call meets */
    bt_conv_choices_reset();
    bt_cpu_conv_force(-1);
    CU_ASSERT_EQUAL(bt_conv_choices_preload(rec, 3), 2);
    int calls = 0, path = -1;
    CU_ASSERT(bt_conv_choose(&cf, 8, BT_F32, 1, BT_CONV_FORWARD, count_time, &calls, &path) == BT_OK);
    CU_ASSERT_EQUAL(calls, 0);
    CU_ASSERT_EQUAL(path, other);
    CU_ASSERT_EQUAL_FATAL(bt_conv_choices(ch, 8), 2);
    CU_ASSERT(ch[0].recorded && ch[0].used && !ch[0].forced);
    CU_ASSERT(ch[1].recorded && !ch[1].used);
    CU_ASSERT_EQUAL(ch[0].ms[BT_CONV_IM2COL], -1);
    char text[400];
    bt_conv_choice_format(&ch[0], text, sizeof text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "from the checkpoint's record"));
    /* an unrecorded pass of the same shape is timed */
    CU_ASSERT(bt_conv_choose(&cf, 8, BT_F32, 1, BT_CONV_GRAD_WEIGHTS, count_time, &calls, &path) == BT_OK);
    CU_ASSERT(calls > 0);
    CU_ASSERT_EQUAL(bt_conv_choices(ch, 8), 3);
    CU_ASSERT(!ch[2].recorded);
    /* a forced path wins over the record */
    bt_cpu_conv_force(BT_CONV_IM2COL);
    CU_ASSERT(bt_conv_choose(&cf, 8, BT_F32, 1, BT_CONV_FORWARD, count_time, &calls, &path) == BT_OK);
    CU_ASSERT_EQUAL(path, BT_CONV_IM2COL);
    bt_cpu_conv_force(-2);
    bt_conv_choices_reset();
}

/* Each call runs on the threads it is given (the device's count), as the GEMMs do. */
static void test_threads(void)
{
    if (skip_onednn()) return;
    oc_layer L;
    bt_shape s = {.ndim = 3, .dim = {cases[9].c, cases[9].h, cases[9].w}};
    bt_dtype dt = BT_F64;
    CU_ASSERT_FATAL(oc_setup(&L, "conv2d", cases[9].args, 1, &s, &dt, 4, BT_F32) == BT_OK);
    for (int threads = 1; threads <= 2; threads++) {
        bt_conv_onednn_threads_seen(1);
        CU_ASSERT(bt_conv_onednn_forward((const bt_conv_config *)L.ctx.config, 4, BT_F32, threads, L.in[0].data,
                                         L.param[0].data, L.param[1].data, L.out.data) == BT_OK);
        CU_ASSERT(bt_conv_onednn_backward((const bt_conv_config *)L.ctx.config, 4, BT_F32, threads, L.in[0].data,
                                          L.param[0].data, L.out_grad.data, L.in_grad[0].data,
                                          L.param_grad[0].data, L.param_grad[1].data) == BT_OK);
        CU_ASSERT_EQUAL(bt_conv_onednn_threads_seen(0), threads);
    }
    oc_free(&L);
}

/* cpu/blocked16.c's copies between NCHW f32 and nChw16c: into the blocked layout as f32 and as
 * bf16 (rounded as core/half.c rounds), out of it as a copy, rounded to bf16 and added, each
 * against the layout's index formula element by element, and the f32 copies against oneDNN's own
 * reorders byte for byte (padding channels zero); on the AVX-512 loops and the scalar ones, 1 and
 * 3 threads, channels that fill no block or part of one, pixel counts off the vector's 16, and
 * values that test the rounding: NaN, infinities, subnormals, -0, ties. */
static float special(uint32_t *seed, int64_t i)
{
    static const uint32_t bits[] = {0x7fc00001u, 0xff800000u, 0x7f800000u, 0x00000123u, 0x807fffffu,
                                    0x80000000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7fa00000u};
    *seed = *seed * 1664525u + 1013904223u;
    uint32_t u = *seed;
    if (i % 7 == 3) u = bits[(*seed >> 20) % 10];
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int64_t blk_at(int64_t c, int64_t hw, int64_t s, int64_t ch, int64_t p)
{
    return ((s * ((c + 15) / 16) + ch / 16) * hw + p) * 16 + ch % 16;
}

static void test_blocked16(void)
{
    static const int64_t shapes[][4] = {{3, 20, 7, 7}, {2, 32, 28, 28}, {1, 16, 1, 13}, {2, 5, 3, 3}, {1, 48, 4, 5}};
    uint32_t seed = 7;
    for (int scalar = 0; scalar < 2; scalar++) {
        bt_blocked16_force_scalar(scalar);
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            const int64_t n = shapes[k][0], c = shapes[k][1], hw = shapes[k][2] * shapes[k][3];
            const int64_t cb = (c + 15) / 16, nb = n * cb * hw * 16, nx = n * c * hw;
            const int threads = 1 + 2 * (int)(k % 2);
            float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)nx);
            float *y0 = malloc(sizeof(float) * (size_t)nx), *b = malloc(sizeof(float) * (size_t)nb);
            uint16_t *h = malloc(sizeof(uint16_t) * (size_t)nb);
            for (int64_t i = 0; i < nx; i++) x[i] = special(&seed, i), y0[i] = special(&seed, i + 1);
            for (int64_t i = 0; i < nb; i++) b[i] = special(&seed, i), h[i] = 0xabcd;
            /* into nChw16c, f32 then bf16 (b and h hold garbage before: padding must be zeroed) */
            bt_blocked16_from_nchw(x, b, 0, n, c, hw, threads);
            bt_blocked16_from_nchw(x, h, 1, n, c, hw, threads);
            int bad_f = 0, bad_h = 0, bad_widen = 0;
            for (int64_t s = 0; s < n; s++)
                for (int64_t ch = 0; ch < cb * 16; ch++)
                    for (int64_t p = 0; p < hw; p++) {
                        const float want = ch < c ? x[(s * c + ch) * hw + p] : 0.0f;
                        const int64_t at = blk_at(c, hw, s, ch, p);
                        bad_f += memcmp(&b[at], &want, sizeof want) != 0;
                        bad_h += h[at] != bt_f32_to_bf16_bits(want);
                    }
            /* out of bf16 nChw16c: widened exactly */
            bt_blocked16_to_nchw(h, 1, y, BT_BLOCKED16_COPY, n, c, hw, threads);
            for (int64_t s = 0; s < n; s++)
                for (int64_t ch = 0; ch < c; ch++)
                    for (int64_t p = 0; p < hw; p++) {
                        const float want = bt_bf16_bits_to_f32(h[blk_at(c, hw, s, ch, p)]);
                        bad_widen += memcmp(&y[(s * c + ch) * hw + p], &want, sizeof want) != 0;
                    }
            /* out of it: a copy, rounded to bf16, added */
            int bad_copy = 0, bad_round = 0, bad_add = 0;
            for (int mode = 0; mode < 3; mode++) {
                memcpy(y, y0, sizeof(float) * (size_t)nx);
                bt_blocked16_to_nchw(b, 0, y, mode, n, c, hw, threads);
                for (int64_t s = 0; s < n; s++)
                    for (int64_t ch = 0; ch < c; ch++)
                        for (int64_t p = 0; p < hw; p++) {
                            const int64_t i = (s * c + ch) * hw + p;
                            const float v = b[blk_at(c, hw, s, ch, p)];
                            const float want = mode == BT_BLOCKED16_COPY ? v
                                               : mode == BT_BLOCKED16_ROUND_BF16 ? bt_round_bf16(v) : y0[i] + v;
                            const int same = memcmp(&y[i], &want, sizeof want) == 0 || (isnan(y[i]) && isnan(want));
                            if (!same) *(mode == 0 ? &bad_copy : mode == 1 ? &bad_round : &bad_add) += 1;
                        }
            }
            if (bad_f || bad_h || bad_widen || bad_copy || bad_round || bad_add)
                printf("\n  blocked16 [%lld, %lld, %lld] (%s): wrong elements: to f32 %d, to bf16 %d; "
                       "out of bf16 %d, copy %d, rounded %d, added %d\n",
                       (long long)n, (long long)c, (long long)hw, scalar ? "scalar" : "AVX-512", bad_f, bad_h,
                       bad_widen, bad_copy, bad_round, bad_add);
            CU_ASSERT(!bad_f && !bad_h && !bad_widen && !bad_copy && !bad_round && !bad_add);
#ifdef BATON_HAVE_DNNL
            /* oneDNN's reorders between nchw and nChw16c (f32) give the same bytes */
            dnnl_engine_t eng;
            dnnl_stream_t st;
            CU_ASSERT_FATAL(dnnl_engine_create(&eng, dnnl_cpu, 0) == dnnl_success);
            CU_ASSERT_FATAL(dnnl_stream_create(&st, eng, dnnl_stream_default_flags) == dnnl_success);
            dnnl_dims_t dims = {n, c, shapes[k][2], shapes[k][3]};
            dnnl_memory_desc_t plain, blocked;
            dnnl_memory_desc_init_by_tag(&plain, 4, dims, dnnl_f32, dnnl_nchw);
            dnnl_memory_desc_init_by_tag(&blocked, 4, dims, dnnl_f32, dnnl_nChw16c);
            float *ref = malloc(sizeof(float) * (size_t)nb);
            for (int dir = 0; dir < 2; dir++) {
                const dnnl_memory_desc_t *from = dir ? &blocked : &plain, *to = dir ? &plain : &blocked;
                dnnl_primitive_desc_t pd;
                dnnl_primitive_t r;
                dnnl_memory_t mf, mt;
                CU_ASSERT_FATAL(dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, NULL) == dnnl_success);
                CU_ASSERT_FATAL(dnnl_primitive_create(&r, pd) == dnnl_success);
                memset(ref, 0x5a, sizeof(float) * (size_t)nb);
                dnnl_memory_create(&mf, from, eng, dir ? (void *)b : (void *)x);
                dnnl_memory_create(&mt, to, eng, ref);
                dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, mf}, {DNNL_ARG_TO, mt}};
                CU_ASSERT_FATAL(dnnl_primitive_execute(r, st, 2, a) == dnnl_success && dnnl_stream_wait(st) == dnnl_success);
                if (dir == 0) {
                    CU_ASSERT(memcmp(ref, b, sizeof(float) * (size_t)nb) == 0);
                } else {
                    bt_blocked16_to_nchw(b, 0, y, BT_BLOCKED16_COPY, n, c, hw, threads);
                    CU_ASSERT(memcmp(ref, y, sizeof(float) * (size_t)nx) == 0);
                }
                dnnl_memory_destroy(mf), dnnl_memory_destroy(mt), dnnl_primitive_destroy(r);
                dnnl_primitive_desc_destroy(pd);
            }
            free(ref);
            dnnl_stream_destroy(st), dnnl_engine_destroy(eng);
#endif
            free(x), free(y), free(y0), free(b), free(h);
        }
    }
    bt_blocked16_force_scalar(0);
}

int main(void)
{
    static const bt_test_case tests[] = {
        {"f32 on oneDNN = im2col within float rounding", test_f32_against_im2col},
        {"f32 gradients on oneDNN by finite differences", test_f32_gradcheck},
        {"bf16 on oneDNN and im2col within bf16 tolerance", test_bf16},
        {"the choice: forced, timed once per shape, kept", test_choice},
        {"the choice: preloaded from a record, taken untimed", test_preload},
        {"each call on the threads it is given", test_threads},
        {"blocked16 copies: the layout, the rounding, oneDNN's reorders", test_blocked16},
        {NULL, NULL},
    };
    if (bt_cpu_bf16_init() != BT_OK || bt_cpu_f32_init() != BT_OK || bt_cpu_conv_init() != BT_OK) {
        fprintf(stderr, "%s\n", bt_last_error());
        return 1;
    }
    return bt_test_main("conv", tests);
}
