/* tests/test_optim.c: optimizer kernels, clipping helpers and learning-rate schedules
 * (src/optim/optim.h, src/optim/lr_schedule.h). Two independent references: numbers printed by
 * PyTorch 1.13 (torch.optim.SGD / AdamW in float64, torch.nn.utils.clip_grad_norm_) pasted in as
 * literals, and the update formulas written out step by step in double inside the tests. Schedule
 * values are worked out by hand in the comments. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "bt_test.h"
#include "core/error.h"
#include "optim/lr_schedule.h"
#include "optim/optim.h"

static const double w0[3] = {1.0, -2.0, 0.5};
static const double grads[3][3] = {{0.5, -1.0, 2.0}, {-0.3, 0.2, 0.1}, {1.0, 1.0, -1.0}};

/* After each of the three steps, from PyTorch 1.13 (float64). */
static const double torch_sgd_momentum[3][3] = {
    /* SGD(lr=0.1, momentum=0.9, weight_decay=0.01) */
    {0.94899999999999995, -1.8979999999999999, 0.29949999999999999},
    {0.93215099999999995, -1.8243019999999999, 0.10875049999999999},
    {0.81605474899999997, -1.856149498, 0.036967199499999978},
};
static const double torch_sgd_nesterov[3][3] = {
    /* SGD(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True) */
    {0.90310000000000001, -1.8062, 0.11904999999999999},
    {0.91707411000000005, -1.75814822, -0.06258119500000002},
    {0.71172115819100001, -1.885186716382, -0.026823221229500021},
};
static const double torch_sgd_plain[3][3] = {
    /* SGD(lr=0.1, weight_decay=0.01) */
    {0.94899999999999995, -1.8979999999999999, 0.29949999999999999},
    {0.978051, -1.916102, 0.28920049999999997},
    {0.87707294899999999, -2.014185898, 0.38891129949999997},
};
static const double torch_adamw[3][3] = {
    /* AdamW(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1) */
    {0.98900000020000001, -1.9880000001, 0.48950000004999999},
    {0.98609601989397755, -1.9809017393989494, 0.48194649629355613},
    {0.97884503749410567, -1.9805765235106552, 0.47943658265015099},
};

static bt_optimizer_config sgd_config(double lr, double momentum, int nesterov, double wd)
{
    bt_optimizer_config c;
    memset(&c, 0, sizeof c);
    c.kind = BT_OPT_SGD;
    c.lr = lr;
    c.momentum = momentum;
    c.nesterov = nesterov;
    c.weight_decay = wd;
    return c;
}

static bt_optimizer_config adamw_config(double lr, double b1, double b2, double eps, double wd)
{
    bt_optimizer_config c;
    memset(&c, 0, sizeof c);
    c.kind = BT_OPT_ADAMW;
    c.lr = lr;
    c.beta1 = b1;
    c.beta2 = b2;
    c.eps = eps;
    c.weight_decay = wd;
    return c;
}

static int close_to(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fmax(1.0, fabs(want));
}

/* Runs three steps of cfg in f64 and f32 from w0 with grads[] and compares with expect[step]. */
static void run_three_steps(const bt_optimizer_config *cfg, const double expect[3][3])
{
    double w[3], s0[3] = {0}, s1[3] = {0};
    float wf[3], f0[3] = {0}, f1[3] = {0};
    double *state[2] = {s0, s1};
    float *fstate[2] = {f0, f1};
    memcpy(w, w0, sizeof w);
    for (int i = 0; i < 3; i++) wf[i] = (float)w0[i];
    for (int t = 1; t <= 3; t++) {
        bt_optim_step_args a = {cfg->lr, t, 1.0};
        float gf[3];
        for (int i = 0; i < 3; i++) gf[i] = (float)grads[t - 1][i];
        CU_ASSERT_EQUAL_FATAL(bt_optim_step_f64(cfg, &a, 3, w, grads[t - 1], state), BT_OK);
        CU_ASSERT_EQUAL_FATAL(bt_optim_step_f32(cfg, &a, 3, wf, gf, fstate), BT_OK);
        for (int i = 0; i < 3; i++) {
            CU_ASSERT(close_to(w[i], expect[t - 1][i], 1e-13));
            CU_ASSERT(close_to(wf[i], expect[t - 1][i], 2e-6));
            if (!close_to(w[i], expect[t - 1][i], 1e-13) ||
                !close_to(wf[i], expect[t - 1][i], 2e-6))
                printf("\n    step %d [%d]: f64 %.17g f32 %.9g want %.17g", t, i, w[i], wf[i],
                       expect[t - 1][i]);
        }
    }
}

static void test_sgd_against_pytorch(void)
{
    bt_optimizer_config c = sgd_config(0.1, 0.9, 0, 0.01);
    run_three_steps(&c, torch_sgd_momentum);
    c = sgd_config(0.1, 0.9, 1, 0.01);
    run_three_steps(&c, torch_sgd_nesterov);
    c = sgd_config(0.1, 0.0, 0, 0.01);
    run_three_steps(&c, torch_sgd_plain);
}

static void test_adamw_against_pytorch(void)
{
    bt_optimizer_config c = adamw_config(0.01, 0.9, 0.999, 1e-8, 0.1);
    run_three_steps(&c, torch_adamw);
}

/* SGD momentum and Nesterov, the formula written out by hand for element 0 (w0 = 1, g = 0.5,
 * -0.3, 1; lr 0.1, momentum 0.9, wd 0.01):
 *   step 1: g' = 0.5 + 0.01 * 1 = 0.51;      buf = 0.51;                 w = 1 - 0.051 = 0.949
 *   step 2: g' = -0.3 + 0.00949 = -0.29051;  buf = 0.459 - 0.29051 = 0.16849;  w = 0.932151
 *   Nesterov step 1: d = 0.51 + 0.9 * 0.51 = 0.969;  w = 1 - 0.0969 = 0.9031 */
static void test_sgd_by_hand(void)
{
    bt_optimizer_config c = sgd_config(0.1, 0.9, 0, 0.01);
    double w[1] = {1.0}, buf[1] = {123.0}; /* garbage: the first step must overwrite buf */
    double *state[1] = {buf};
    bt_optim_step_args a = {0.1, 1, 1.0};
    double g1[1] = {0.5}, g2[1] = {-0.3};
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 1, w, g1, state), BT_OK);
    CU_ASSERT(close_to(buf[0], 0.51, 1e-15));
    CU_ASSERT(close_to(w[0], 0.949, 1e-15));
    a.t = 2;
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 1, w, g2, state), BT_OK);
    CU_ASSERT(close_to(buf[0], 0.16849, 1e-14));
    CU_ASSERT(close_to(w[0], 0.932151, 1e-14));

    c.nesterov = 1;
    w[0] = 1.0;
    a.t = 1;
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 1, w, g1, state), BT_OK);
    CU_ASSERT(close_to(w[0], 0.9031, 1e-15));
}

/* AdamW with hyperparameters where eps and the bias corrections matter, against the formula
 * written out in double, three steps. */
static void test_adamw_formula(void)
{
    const double lr = 0.05, b1 = 0.8, b2 = 0.99, eps = 1e-3, wd = 0.05;
    bt_optimizer_config c = adamw_config(lr, b1, b2, eps, wd);
    double w[3], m[3] = {0}, v[3] = {0};
    float wf[3], mf[3] = {0}, vf[3] = {0};
    double *st[2] = {m, v};
    float *stf[2] = {mf, vf};
    double rw[3], rm[3] = {0}, rv[3] = {0};
    memcpy(w, w0, sizeof w);
    memcpy(rw, w0, sizeof rw);
    for (int i = 0; i < 3; i++) wf[i] = (float)w0[i];
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < 3; i++) {
            double g = grads[t - 1][i];
            rw[i] = rw[i] - lr * wd * rw[i];
            rm[i] = b1 * rm[i] + (1 - b1) * g;
            rv[i] = b2 * rv[i] + (1 - b2) * g * g;
            double mhat = rm[i] / (1 - pow(b1, t));
            double vhat = rv[i] / (1 - pow(b2, t));
            rw[i] = rw[i] - lr * mhat / (sqrt(vhat) + eps);
        }
        bt_optim_step_args a = {lr, t, 1.0};
        float gf[3];
        for (int i = 0; i < 3; i++) gf[i] = (float)grads[t - 1][i];
        CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 3, w, grads[t - 1], st), BT_OK);
        CU_ASSERT_EQUAL(bt_optim_step_f32(&c, &a, 3, wf, gf, stf), BT_OK);
        for (int i = 0; i < 3; i++) {
            CU_ASSERT(close_to(w[i], rw[i], 1e-13));
            CU_ASSERT(close_to(m[i], rm[i], 1e-15));
            CU_ASSERT(close_to(v[i], rv[i], 1e-15));
            CU_ASSERT(close_to(wf[i], rw[i], 2e-6));
        }
    }
    /* The first AdamW step moves each weight by about lr (mhat/sqrt(vhat) = sign(g)), less for
     * eps: element 0 went 1 -> 1 - 0.0025 (decay) - 0.05 * 0.5 / (0.5 + 1e-3). */
    double w1 = 1.0 - lr * wd * 1.0 - lr * 0.5 / (0.5 + eps);
    double x[1] = {1.0}, g[1] = {0.5}, mm[1] = {0}, vv[1] = {0};
    double *s1[2] = {mm, vv};
    bt_optim_step_args a = {lr, 1, 1.0};
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 1, x, g, s1), BT_OK);
    CU_ASSERT(close_to(x[0], w1, 1e-15));
}

/* grad_scale multiplies the gradient first: a step with g and scale s equals one with g * s. */
static void test_grad_scale(void)
{
    /* AdamW is nearly invariant to the gradient's scale; a large eps makes the scale visible. */
    bt_optimizer_config cfgs[2] = {sgd_config(0.1, 0.9, 1, 0.01),
                                   adamw_config(0.01, 0.9, 0.999, 0.1, 0.1)};
    for (int k = 0; k < 2; k++) {
        double wa[3], wb[3], wc[3], sa0[3] = {0}, sa1[3] = {0}, sb0[3] = {0}, sb1[3] = {0};
        double sc0[3] = {0}, sc1[3] = {0};
        double *sa[2] = {sa0, sa1}, *sb[2] = {sb0, sb1}, *sc[2] = {sc0, sc1};
        memcpy(wa, w0, sizeof wa);
        memcpy(wb, w0, sizeof wb);
        memcpy(wc, w0, sizeof wc);
        for (int t = 1; t <= 3; t++) {
            double gs[3];
            for (int i = 0; i < 3; i++) gs[i] = grads[t - 1][i] * 0.25;
            bt_optim_step_args scaled = {cfgs[k].lr, t, 0.25}, plain = {cfgs[k].lr, t, 1.0};
            CU_ASSERT_EQUAL(bt_optim_step_f64(&cfgs[k], &scaled, 3, wa, grads[t - 1], sa), BT_OK);
            CU_ASSERT_EQUAL(bt_optim_step_f64(&cfgs[k], &plain, 3, wb, gs, sb), BT_OK);
            CU_ASSERT_EQUAL(bt_optim_step_f64(&cfgs[k], &plain, 3, wc, grads[t - 1], sc), BT_OK);
        }
        for (int i = 0; i < 3; i++) CU_ASSERT(close_to(wa[i], wb[i], 1e-15));
        /* And the scale did change the result. */
        CU_ASSERT(!close_to(wa[0], wc[0], 1e-6));
    }
}

static void test_state_and_validation(void)
{
    bt_optimizer_config c = sgd_config(0.1, 0.0, 0, 0);
    CU_ASSERT_EQUAL(bt_optim_state_count(&c), 0);
    c.momentum = 0.9;
    CU_ASSERT_EQUAL(bt_optim_state_count(&c), 1);
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_OK);
    c = adamw_config(1e-3, 0.9, 0.999, 1e-8, 0.01);
    CU_ASSERT_EQUAL(bt_optim_state_count(&c), 2);
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_OK);

    c.beta2 = 1.0;
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "beta2"));
    c.beta2 = 0.999;
    c.eps = 0;
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "eps"));
    c.eps = 1e-8;
    c.lr = -1;
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "lr"));
    c.lr = NAN;
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    c = sgd_config(0.1, 0.0, 1, 0);
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "nesterov"));
    c = sgd_config(0.1, 1.0, 0, 0);
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    c = sgd_config(0.1, 0.5, 0, -0.1);
    CU_ASSERT_EQUAL(bt_optim_validate(&c), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "weight_decay"));

    /* Step arguments. */
    c = adamw_config(1e-3, 0.9, 0.999, 1e-8, 0.01);
    double w[2] = {1, 2}, g[2] = {1, 1}, m[2] = {0};
    double *one_state[2] = {m, NULL};
    bt_optim_step_args a = {1e-3, 0, 1.0};
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 2, w, g, one_state), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "t is 0"));
    a.t = 1;
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 2, w, g, one_state), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "state array 1 missing"));
    CU_ASSERT_EQUAL(w[0], 1.0); /* nothing was touched */
    c = sgd_config(0.1, 0.0, 0, 0);
    CU_ASSERT_EQUAL(bt_optim_step_f64(&c, &a, 2, w, g, NULL), BT_OK);
    CU_ASSERT(close_to(w[0], 1.0 - 0.001, 1e-15)); /* args->lr, not cfg->lr, is used */
}

/* The untyped entry point the backends call matches the typed kernels bit for bit. */
static void test_untyped_update(void)
{
    bt_optimizer_config c = adamw_config(0.01, 0.9, 0.999, 1e-8, 0.1);
    float wa[3], wb[3], ma[3] = {0}, va[3] = {0}, mb[3] = {0}, vb[3] = {0}, g[3] = {0.5f, -1, 2};
    double wd[3], md[3] = {0}, vd[3] = {0};
    float *sa[2] = {ma, va};
    void *sb[2] = {mb, vb}, *sd[2] = {md, vd};
    for (int i = 0; i < 3; i++) wa[i] = wb[i] = (float)w0[i];
    memcpy(wd, w0, sizeof wd);
    bt_optim_step_args a = {0.01, 1, 0.5};
    CU_ASSERT_EQUAL(bt_optim_step_f32(&c, &a, 3, wa, g, sa), BT_OK);
    CU_ASSERT_EQUAL(bt_optim_update(&c, BT_F32, wb, g, sb, 3, 0.01, 1, 0.5), BT_OK);
    CU_ASSERT_EQUAL(memcmp(wa, wb, sizeof wa), 0);
    CU_ASSERT_EQUAL(memcmp(ma, mb, sizeof ma), 0);
    CU_ASSERT(wa[0] != (float)w0[0]);
    double gd[3] = {0.5, -1, 2};
    CU_ASSERT_EQUAL(bt_optim_update(&c, BT_F64, wd, gd, sd, 3, 0.01, 1, 0.5), BT_OK);
    CU_ASSERT(close_to(wd[2], wa[2], 1e-6));
    CU_ASSERT_EQUAL(bt_optim_update(&c, BT_BF16, wb, g, sb, 3, 0.01, 1, 0.5), BT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "bf16"));
}

/* The CPU backend shares a large update among the device's threads, each block the same update
 * on its own elements: on 1, 2 and 3 threads, over 3 steps, weights and state equal one call of
 * the kernel bit for bit (lengths the blocks do not divide included). An argument error is
 * reported with its message on the calling thread. */
static void test_backend_update_threads(void)
{
    const bt_optimizer_config cfgs[] = {
        sgd_config(0.1, 0, 0, 0.01), sgd_config(0.1, 0.9, 1, 0.01),
        adamw_config(0.01, 0.9, 0.999, 1e-8, 0.1),
    };
    const size_t n = 300007;
    float *w = malloc(n * sizeof *w), *wr = malloc(n * sizeof *wr), *g = malloc(n * sizeof *g);
    float *st[2], *sr[2];
    for (int i = 0; i < 2; i++) st[i] = calloc(n, sizeof(float)), sr[i] = calloc(n, sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(w && wr && g && st[0] && st[1] && sr[0] && sr[1]);
    const bt_backend *be = bt_cpu_backend();
    for (int threads = 1; threads <= 3; threads++) {
        bt_device *dev = NULL;
        CU_ASSERT_FATAL(be->open(0, -threads, &dev) == BT_OK);
        for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
            for (size_t i = 0; i < n; i++) {
                w[i] = wr[i] = (float)((double)((i * 2654435761u) % 1000) / 500.0 - 1.0);
                st[0][i] = st[1][i] = sr[0][i] = sr[1][i] = 0;
            }
            for (int64_t t = 1; t <= 3; t++) {
                for (size_t i = 0; i < n; i++) g[i] = (float)(((i + 7 * (size_t)t) % 13) * 0.25 - 1.5);
                CU_ASSERT(be->optimizer_update(dev, &cfgs[c], BT_F32, w, g, (void *const *)st, n, 0.01,
                                               t, 0.5) == BT_OK);
                CU_ASSERT(bt_optim_update(&cfgs[c], BT_F32, wr, g, (void *const *)sr, n, 0.01, t, 0.5) == BT_OK);
            }
            CU_ASSERT_EQUAL(memcmp(w, wr, n * sizeof *w), 0);
            for (int k = 0; k < bt_optim_state_count(&cfgs[c]); k++)
                CU_ASSERT_EQUAL(memcmp(st[k], sr[k], n * sizeof *w), 0);
        }
        void *one[2] = {st[0], NULL};
        CU_ASSERT(be->optimizer_update(dev, &cfgs[2], BT_F32, w, g, one, n, 0.01, 1, 1) == BT_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "state array 1 missing"));
        be->close(dev);
    }
    free(w), free(wr), free(g);
    for (int i = 0; i < 2; i++) free(st[i]), free(sr[i]);
}

/* The CPU backend's sum of squares takes a stage's tensors on the device's threads, each summed
 * whole and the sums added in order: on 1, 2 and 3 threads, the same bits as the kernel's sums
 * added one after another (tensors of very different sizes and scales, so another order of the
 * additions would show). */
static void test_backend_sumsq_threads(void)
{
    enum { T = 5 };
    /* a sum of exactly 1 first (2^20 values of 2^-10), then two of 0.6 of its ulp (2^-52): added
     * one by one each rounds up a whole ulp (1 + 2 ulps), added together first they round once
     * (1 + 1 ulp); then large tensors of zeros, so that the sum is taken on several threads */
    const size_t sizes[T] = {1048576, 1, 1, 803840, 10250};
    float *x[T];
    for (int t = 0; t < T; t++) {
        x[t] = malloc(sizes[t] * sizeof *x[t]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(x[t]);
        for (size_t i = 0; i < sizes[t]; i++)
            x[t][i] = t == 0 ? 0x1p-10f : t < 3 ? 1.1543e-8f : 0.0f;
    }
    double want = 0;
    for (int t = 0; t < T; t++) want += bt_optim_sumsq_f32(x[t], (int64_t)sizes[t]);
    CU_ASSERT(want == 1.0 + 0x1p-51); /* the order matters */
    const bt_backend *be = bt_cpu_backend();
    for (int threads = 1; threads <= 3; threads++) {
        bt_device *dev = NULL;
        CU_ASSERT_FATAL(be->open(0, -threads, &dev) == BT_OK);
        double got = -1;
        CU_ASSERT(be->sum_squares(dev, BT_F32, (const void *const *)x, sizes, T, &got) == BT_OK);
        CU_ASSERT_EQUAL(memcmp(&got, &want, sizeof got), 0);
        be->close(dev);
    }
    for (int t = 0; t < T; t++) free(x[t]);
}

/* The engine updates a stage's parameters in one call over their packed arrays (exec/layout.c):
 * that must equal one call per tensor bit for bit, for every kind, over several steps, tensors
 * of odd sizes (the vectorised loops' tails fall mid-array when packed). */
static void test_packed_equals_per_tensor(void)
{
    const bt_optimizer_config cfgs[] = {
        sgd_config(0.1, 0, 0, 0.01), sgd_config(0.1, 0.9, 0, 0.01), sgd_config(0.1, 0.9, 1, 0),
        adamw_config(0.01, 0.9, 0.999, 1e-8, 0.1),
    };
    enum { T = 3, N = 1 + 37 + 200 };
    const int sizes[T] = {1, 37, 200}; /* packed: [0, 1), [1, 38), [38, 238) */
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        float wp[N], wt[N], g[N], sp[2][N] = {{0}}, st[2][N] = {{0}};
        for (int i = 0; i < N; i++) {
            wp[i] = wt[i] = sinf((float)i) * 0.5f;
        }
        for (int64_t step = 1; step <= 3; step++) {
            for (int i = 0; i < N; i++) g[i] = cosf((float)(i * step)) * 0.25f;
            void *spp[2] = {sp[0], sp[1]};
            CU_ASSERT_EQUAL(bt_optim_update(&cfgs[c], BT_F32, wp, g, spp, N, 0.05, step, 0.7), BT_OK);
            for (int t = 0, off = 0; t < T; off += sizes[t++]) {
                void *stt[2] = {st[0] + off, st[1] + off};
                CU_ASSERT_EQUAL(bt_optim_update(&cfgs[c], BT_F32, wt + off, g + off, stt,
                                                (size_t)sizes[t], 0.05, step, 0.7), BT_OK);
            }
        }
        CU_ASSERT_EQUAL(memcmp(wp, wt, sizeof wp), 0);
        CU_ASSERT_EQUAL(memcmp(sp, st, sizeof sp), 0);
        CU_ASSERT(wp[5] != sinf(5.0f) * 0.5f);
    }
}

/* clip_grad_norm_ over grads [3, 4, 12] and [0, 84] with max_norm 5, from PyTorch 1.13:
 * total norm 85, grads become [0.1764705861591696, 0.2352941148788928, 0.7058823446366784] and
 * [0, 4.941176412456748]. */
static void test_clipping(void)
{
    float a[3] = {3, 4, 12};
    double b[2] = {0, 84};
    double ss = bt_optim_sumsq_f32(a, 3) + bt_optim_sumsq_f64(b, 2);
    CU_ASSERT_EQUAL(ss, 7225.0);
    double norm = sqrt(ss);
    CU_ASSERT_EQUAL(norm, 85.0);
    double s = bt_optim_clip_scale(norm, 5.0);
    CU_ASSERT(close_to(s, 5.0 / (85.0 + 1e-6), 1e-15));
    CU_ASSERT(close_to(3 * s, 0.1764705861591696, 1e-15));
    CU_ASSERT(close_to(84 * s, 4.941176412456748, 1e-15));
    CU_ASSERT_EQUAL(bt_optim_clip_scale(3.0, 5.0), 1.0);
    /* At the bound the 1e-6 makes the scale 5 / 5.000001, just below 1. */
    CU_ASSERT(bt_optim_clip_scale(5.0, 5.0) < 1.0);
    CU_ASSERT(close_to(bt_optim_clip_scale(5.0, 5.0), 1.0, 1e-6));
    CU_ASSERT(bt_optim_clip_scale(5.0 + 1e-3, 5.0) < 1.0);
    CU_ASSERT_EQUAL(bt_optim_clip_scale(1e9, 0.0), 1.0);
    CU_ASSERT_EQUAL(bt_optim_clip_scale(INFINITY, 1.0), 0.0);
    CU_ASSERT(isnan(bt_optim_clip_scale(NAN, 1.0)));

    /* f32 squares are accumulated in double: in float, 4096^2 + 1000 * 1 stays at 2^24. */
    static float x[1001];
    x[0] = 4096.0f;
    for (int i = 1; i < 1001; i++) x[i] = 1.0f;
    CU_ASSERT_EQUAL(bt_optim_sumsq_f32(x, 1001), 16778216.0);
    CU_ASSERT_EQUAL(bt_optim_sumsq_f32(x, 0), 0.0);
}

/* ---- learning-rate schedules ---- */

static bt_lr_schedule_config sched(bt_lr_kind kind, int64_t warmup, int64_t step_size,
                                   double gamma, double min_lr)
{
    bt_lr_schedule_config s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.warmup_steps = warmup;
    s.step_size = step_size;
    s.gamma = gamma;
    s.min_lr = min_lr;
    return s;
}

static void test_lr_constant_and_warmup(void)
{
    bt_lr_schedule_config s = sched(BT_LR_CONSTANT, 0, 0, 0, 0);
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 0.1, 0), BT_OK);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 0, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 1000000, 0), 0.1);
    /* Warm-up over 4 steps: 0.1 * 1/4, 2/4, 3/4, 4/4, then 0.1. */
    s.warmup_steps = 4;
    CU_ASSERT(close_to(bt_lr_at(&s, 0.1, 0, 0), 0.025, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 0.1, 1, 0), 0.05, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 0.1, 2, 0), 0.075, 1e-15));
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 3, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 4, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 50, 0), 0.1);
}

static void test_lr_step(void)
{
    /* lr 0.1, gamma 0.5 every 3 steps: steps 0-2 0.1, 3-5 0.05, 6-8 0.025, 9 0.0125. */
    bt_lr_schedule_config s = sched(BT_LR_STEP, 0, 3, 0.5, 0);
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 0.1, 0), BT_OK);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 0, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 2, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 3, 0), 0.05);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 5, 0), 0.05);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 6, 0), 0.025);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 9, 0), 0.0125);
    /* With 2 warm-up steps the decay counts from the end of the warm-up: step 0 0.05, 1 0.1,
     * 2-4 (s = 0-2) 0.1, 5 (s = 3) 0.05. */
    s.warmup_steps = 2;
    CU_ASSERT(close_to(bt_lr_at(&s, 0.1, 0, 0), 0.05, 1e-15));
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 1, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 4, 0), 0.1);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 0.1, 5, 0), 0.05);

    s.step_size = 0;
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 0.1, 0), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "step_size"));
    s.step_size = 3;
    s.gamma = 0;
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 0.1, 0), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "gamma"));
}

static void test_lr_cosine(void)
{
    /* lr 1, min 0.1, 2 warm-up steps, 12 steps in all: span = 12 - 1 - 2 = 9.
     * step 0: 0.5; 1: 1.0; 2 (p = 0): 1.0; 5 (p = 1/3): 0.1 + 0.45 * (1 + 0.5) = 0.775;
     * 8 (p = 2/3): 0.1 + 0.45 * (1 - 0.5) = 0.325; 11 (p = 1): 0.1; 20: 0.1. */
    bt_lr_schedule_config s = sched(BT_LR_COSINE, 2, 0, 0, 0.1);
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 1.0, 12), BT_OK);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 1.0, 0, 12), 0.5);
    CU_ASSERT_EQUAL(bt_lr_at(&s, 1.0, 1, 12), 1.0);
    CU_ASSERT(close_to(bt_lr_at(&s, 1.0, 2, 12), 1.0, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 1.0, 5, 12), 0.775, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 1.0, 8, 12), 0.325, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 1.0, 11, 12), 0.1, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 1.0, 20, 12), 0.1, 1e-15));
    /* Monotone non-increasing after the warm-up. */
    int mono = 1;
    for (int64_t k = 2; k < 15; k++)
        mono &= bt_lr_at(&s, 1.0, k + 1, 12) <= bt_lr_at(&s, 1.0, k, 12);
    CU_ASSERT(mono);
    /* No warm-up, min 0, 5 steps: span 4; step 2 (p = 1/2) is half of lr. */
    s = sched(BT_LR_COSINE, 0, 0, 0, 0.0);
    CU_ASSERT(close_to(bt_lr_at(&s, 0.3, 0, 5), 0.3, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 0.3, 2, 5), 0.15, 1e-15));
    CU_ASSERT(close_to(bt_lr_at(&s, 0.3, 4, 5), 0.0, 1e-15));

    s = sched(BT_LR_COSINE, 10, 0, 0, 0.1);
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 1.0, 10), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "total steps"));
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 0.05, 100), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "min_lr"));
    s.warmup_steps = -1;
    CU_ASSERT_EQUAL(bt_lr_schedule_validate(&s, 1.0, 100), BT_ERR_INVALID_ARG);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"sgd momentum/nesterov/plain vs pytorch", test_sgd_against_pytorch},
        {"adamw vs pytorch", test_adamw_against_pytorch},
        {"sgd by hand", test_sgd_by_hand},
        {"adamw vs formula", test_adamw_formula},
        {"grad_scale", test_grad_scale},
        {"state count and validation", test_state_and_validation},
        {"untyped update entry point", test_untyped_update},
        {"one update over packed tensors = one per tensor", test_packed_equals_per_tensor},
        {"the CPU backend's update on several threads", test_backend_update_threads},
        {"the CPU backend's sum of squares on several threads", test_backend_sumsq_threads},
        {"gradient clipping", test_clipping},
        {"lr constant and warm-up", test_lr_constant_and_warmup},
        {"lr step", test_lr_step},
        {"lr cosine", test_lr_cosine},
        {NULL, NULL},
    };
    return bt_test_main("optim", cases);
}
