/* tests/test_mixed_precision.c: precision bf16 and f16 in the engine, on the CPU (the reference the
 * GPU is compared with in tests/test_cuda_engine.c).
 *   - bf16: every activation an op produces (but the loss) is a bf16 value, the run still learns,
 *     and it is not the f32 run; master weights stay f32 (they take values bf16 cannot hold);
 *   - f16 with a loss scale that overflows: the step is skipped (parameters, optimizer step
 *     counter and learning-rate position unchanged), the scale halves on every skipped step, and
 *     training resumes once the scale is small enough; the reported gradient norm is unscaled;
 *   - a pipelined bf16 run equals the one-stage bf16 run (rounding happens per op, not per stage);
 *   - fed inputs are rounded like every other operand: a bf16/f16 run fed values neither can hold
 *     equals the run fed those values pre-rounded (three training steps and a forward); under f16
 *     a fed value that would round to infinity (|x| >= 65520) is refused naming input, sample and
 *     value, while 65519 (which rounds to 65504) is taken;
 *   - bad settings are refused: a precision that is not a float type, mixed precision with f64
 *     master weights, a negative loss scale. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "core/half.h"
#include "engine_runs.h"

static void test_bf16_rounds_activations(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result f32, bf16;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &f32);
    p.precision = BT_BF16;
    run_three_steps(g, &p, &bf16);
    CU_ASSERT(bf16.loss[2] < bf16.loss[0]);
    CU_ASSERT(!identical(&f32, &bf16));
    /* the master weights moved by f32-sized updates: most are not bf16 values */
    size_t n = bf16.sizes[0] / sizeof(float), not_bf16 = 0;
    for (size_t i = 0; i < n; i++) not_bf16 += bt_round_bf16(bf16.params[0][i]) != bf16.params[0][i];
    CU_ASSERT(not_bf16 > n / 2);

    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 4);
    float logits[BATCH * CLASSES], ln[BATCH * HID];
    CU_ASSERT_FATAL(bt_engine_forward_layer(e, b.feeds, 2, "head", logits, NULL) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_forward_layer(e, b.feeds, 2, "ln", ln, NULL) == BT_OK);
    int rounded = 1;
    for (int i = 0; i < BATCH * CLASSES; i++) rounded &= bt_round_bf16(logits[i]) == logits[i];
    for (int i = 0; i < BATCH * HID; i++) rounded &= bt_round_bf16(ln[i]) == ln[i];
    CU_ASSERT(rounded);
    bt_engine_destroy(e);
    free_result(&f32);
    free_result(&bf16);
    bt_graph_destroy(g);
}

static void test_bf16_pipeline_matches_single_stage(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result one, three;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    run_three_steps(g, &p, &one);
    engine_params(&p, 3, 1, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    run_three_steps(g, &p, &three);
    CU_ASSERT(identical(&one, &three));
    free_result(&one);
    free_result(&three);
    bt_graph_destroy(g);
}

static void test_f16_overflow_skips_steps(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.precision = BT_F16;
    p.loss_scale = 0x1p40; /* gradients of order 2^36: far past f16's 65504 */
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    float w0[HID * IN], w[HID * IN];
    CU_ASSERT_FATAL(bt_engine_read_param(e, "fc1.weight", w0, sizeof w0) == BT_OK);
    batch_data b;
    make_batch(&b, 21);
    double scale = p.loss_scale;
    int skipped = 0, applied = 0;
    for (int i = 0; i < 60 && applied < 3; i++) {
        bt_step_result r;
        CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, &r) == BT_OK);
        CU_ASSERT_EQUAL(r.loss_scale, scale);
        if (r.skipped) {
            CU_ASSERT_EQUAL(applied, 0); /* the scale only comes down until steps go through */
            skipped++;
            scale /= 2;
            CU_ASSERT_EQUAL(bt_engine_step(e), 0);
            CU_ASSERT_FATAL(bt_engine_read_param(e, "fc1.weight", w, sizeof w) == BT_OK);
            CU_ASSERT(memcmp(w, w0, sizeof w) == 0);
        } else {
            applied++;
            CU_ASSERT_EQUAL(bt_engine_step(e), applied);
            CU_ASSERT(isfinite(r.grad_norm) && r.grad_norm > 0 && r.grad_norm < 1e3);
        }
    }
    CU_ASSERT(skipped >= 10);
    CU_ASSERT_EQUAL(applied, 3);
    CU_ASSERT_FATAL(bt_engine_read_param(e, "fc1.weight", w, sizeof w) == BT_OK);
    CU_ASSERT(memcmp(w, w0, sizeof w) != 0);
    bt_engine_destroy(e);

    /* a scale that never overflows here: no step skipped, and the result reports it */
    p.loss_scale = 1024;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    bt_step_result r;
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, &r) == BT_OK);
    CU_ASSERT_EQUAL(r.skipped, 0);
    CU_ASSERT_EQUAL(r.loss_scale, 1024);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* The loss scale cancels out: f16 at scale 1024 and at 4096 give the same weights up to f16
 * rounding of the scaled gradients, and f32 runs report scale 1 and never skip. */
static void test_scale_cancels_out(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result a, b;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    p.precision = BT_F16;
    p.loss_scale = 1024;
    run_three_steps(g, &p, &a);
    p.loss_scale = 4096;
    run_three_steps(g, &p, &b);
    double worst = 0;
    for (int i = 0; i < a.n; i++) {
        double err = tensor_rel_error(a.params[i], b.params[i], a.sizes[i] / sizeof(float));
        if (err > worst) worst = err;
    }
    CU_ASSERT(worst < 1e-2);
    free_result(&a);
    free_result(&b);

    bt_engine *e = NULL;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data d;
    make_batch(&d, 1);
    bt_step_result r;
    CU_ASSERT_FATAL(bt_engine_train_step(e, d.feeds, 2, &r) == BT_OK);
    CU_ASSERT_EQUAL(r.loss_scale, 1);
    CU_ASSERT_EQUAL(r.skipped, 0);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* Three steps and a forward of g under p, fed x (scaled by `scale`) either as generated or
 * pre-rounded to p's precision; the losses, the weights and the logits. */
static void run_fed(const bt_graph *g, const bt_engine_params *p, int pre_round, run_result *r,
                    float *logits)
{
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, p, &e) == BT_OK);
    batch_data b;
    for (int step = 0; step < 4; step++) {
        make_batch(&b, 200 + (unsigned)step);
        for (int i = 0; i < BATCH * IN; i++) {
            b.x[i] = b.x[i] * 3.0f + 1e-3f; /* 24 significant bits: neither bf16 nor f16 */
            if (pre_round) b.x[i] = p->precision == BT_BF16 ? bt_round_bf16(b.x[i]) : bt_round_f16(b.x[i]);
        }
        if (step == 3) break;
        bt_step_result res;
        CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, &res) == BT_OK);
        r->loss[step] = res.loss;
    }
    CU_ASSERT_FATAL(bt_engine_forward_layer(e, b.feeds, 2, "head", logits, NULL) == BT_OK);
    r->n = bt_test_read_params(e, g, r->params, r->sizes, (int)(sizeof r->params / sizeof r->params[0]));
    bt_engine_destroy(e);
}

static void test_feeds_are_rounded(void)
{
    bt_graph *g = residual_graph();
    const bt_dtype precisions[] = {BT_BF16, BT_F16};
    for (int k = 0; k < 2; k++) {
        for (int stages = 1; stages <= 2; stages++) {
            bt_engine_params p;
            engine_params(&p, stages, 2, BT_SCHEDULE_1F1B);
            p.precision = precisions[k];
            p.loss_scale = 1024;
            run_result raw, rounded;
            float l_raw[BATCH * CLASSES], l_rounded[BATCH * CLASSES];
            run_fed(g, &p, 0, &raw, l_raw);
            run_fed(g, &p, 1, &rounded, l_rounded);
            CU_ASSERT(identical(&raw, &rounded));
            CU_ASSERT(memcmp(l_raw, l_rounded, sizeof l_raw) == 0);
            free_result(&raw);
            free_result(&rounded);
        }
    }
    bt_graph_destroy(g);
}

static void test_f16_feed_overflow_refused(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.precision = BT_F16;
    p.loss_scale = 1;
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 7);
    b.x[0] = 65519.0f; /* rounds to 65504: taken */
    bt_step_result r;
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, &r), BT_OK);
    CU_ASSERT_EQUAL(bt_engine_step(e), 1);
    b.x[(BATCH / 2 + 1) * IN + 3] = -70000.0f; /* sample 9, in the second micro-batch */
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, &r), BT_ERR_INVALID_ARG);
    printf("\n  %s\n", bt_last_error());
    CU_ASSERT(strstr(bt_last_error(), "input 'x', sample 9, element 3 is -70000") != NULL);
    CU_ASSERT(strstr(bt_last_error(), "f16") != NULL);
    CU_ASSERT_EQUAL(bt_engine_step(e), 1); /* nothing applied */
    float logits[BATCH * CLASSES];
    CU_ASSERT_EQUAL(bt_engine_forward_layer(e, b.feeds, 2, "head", logits, NULL), BT_ERR_INVALID_ARG);
    bt_engine_destroy(e);
    /* bf16 holds f32's range: the same feed is taken */
    p.precision = BT_BF16;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, &r), BT_OK);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static void test_bad_settings_refused(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    p.precision = BT_I32;
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "precision") != NULL);
    p.precision = BT_BF16;
    p.dtype = BT_F64;
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "f32 master weights") != NULL);
    p.dtype = BT_F32;
    p.precision = BT_F16;
    p.loss_scale = -1;
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "loss_scale") != NULL);
    CU_ASSERT_PTR_NULL(e);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"bf16 rounds activations, keeps f32 masters", test_bf16_rounds_activations},
        {"bf16 pipeline = one stage", test_bf16_pipeline_matches_single_stage},
        {"f16 overflow skips steps and halves the scale", test_f16_overflow_skips_steps},
        {"the loss scale cancels out", test_scale_cancels_out},
        {"fed inputs are rounded: raw feed = pre-rounded feed", test_feeds_are_rounded},
        {"an f16 feed that would overflow is refused", test_f16_feed_overflow_refused},
        {"bad precision settings are refused", test_bad_settings_refused},
        {NULL, NULL}};
    return bt_test_main("mixed_precision", cases);
}
