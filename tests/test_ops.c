/* tests/test_ops.c: the built-in ops (src/ops/) against independent references.
 *   - every op's backward against central finite differences in f64, for every float input and
 *     parameter, batch > 1, conv/pool with strides and padding (the gradients are pre-filled, so
 *     a backward that overwrites instead of adding fails);
 *   - every op's forward against a naive formula written here (conv2d as its nested loops,
 *     layernorm by hand, ...) and against numbers computed by hand;
 *   - shape-rule errors (bad shapes, dtypes, arguments) and their messages; run-time errors (a
 *     label or an index out of range) as BT_ERR_INVALID_ARG with a message;
 *   - f32 against f64; dropout's reproducibility, rate and inference identity;
 *   - decoding one position at a time (attention's KV cache, rope, pos_embedding) against the
 *     forward's rows, at every position of every sample;
 *   - conv2d over a batch larger than one of its chunks (against loops of its definition) and
 *     maxpool2d's choice among tied maxima and NaN, which decides where its gradient goes;
 *   - the harness itself: a deliberately wrong backward must fail the gradient check.
 * Ops run outside any graph through tests/op_check.h. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bt_test.h"
#include "baton/status.h"
#include "op_cases.h"
#include "op_check.h"
#include "ops/ops.h"

/* Sets up L for case c with float type real and fills its index inputs. */
static int setup_case(oc_layer *L, const op_case *c, bt_dtype real)
{
    if (!c) return -1;
    bt_status st = oc_setup(L, c->op, c->args, c->n_in, c->shape, c->dtype, c->batch, real);
    if (st != BT_OK) {
        printf("\n  %s: setup failed: %s\n", c->label, bt_last_error());
        return -1;
    }
    for (int i = 0; i < c->n_in; i++) {
        if (c->dtype[i] != I) continue;
        /* the shape rule declares the range the case table draws from (bt_infer_int_range) */
        if (L->ctx.int_hi[i] != c->index_range) {
            printf("\n  %s: input %d declares integers in [0, %lld), the case uses [0, %d)\n",
                   c->label, i, (long long)L->ctx.int_hi[i], c->index_range);
            oc_free(L);
            return -1;
        }
        oc_fill(L, &L->in[i], 0, c->index_range);
    }
    return 0;
}

/* ---- registry ------------------------------------------------------------------------------- */

/* Every built-in op (the registry's list, not one kept here) is complete, found by name, and has
 * a row in the shared case table; every row names a known op. */
static void test_builtin_table(void)
{
    int n = 0;
    const bt_op_def *const *ops = bt_builtin_ops(&n);
    CU_ASSERT(n >= 19);
    CU_ASSERT(bt_op_count() >= n);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_PTR_NOT_NULL(ops[i]->infer);
        CU_ASSERT_PTR_NOT_NULL(ops[i]->cpu_forward);
        CU_ASSERT_PTR_NOT_NULL(ops[i]->cpu_backward);
        CU_ASSERT_PTR_NOT_NULL(ops[i]->help);
        CU_ASSERT(ops[i]->min_inputs >= 1 && ops[i]->max_inputs >= ops[i]->min_inputs);
        const bt_op_def *d = bt_op_find(ops[i]->name);
        CU_ASSERT(d != NULL && strcmp(d->name, ops[i]->name) == 0);
        CU_ASSERT(bt_op_at(i) == d); /* built-ins first, in the list's order */
    }
    /* the registry's built-ins (iterated through the public API) each have a case row */
    for (int i = 0; i < n; i++) {
        const bt_op_def *d = bt_op_at(i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        int rows = 0; /* rows the CPU tests run (the CUDA test runs the big ones too) */
        for (int k = 0; k < op_cases_count; k++)
            rows += strcmp(op_cases[k].op, d->name) == 0 && !op_cases[k].big;
        if (rows == 0) printf("\n  built-in op '%s' has no row in tests/op_cases.c\n", d->name);
        CU_ASSERT(rows > 0);
    }
    for (int k = 0; k < op_cases_count; k++) CU_ASSERT_PTR_NOT_NULL(bt_op_find(op_cases[k].op));
}

/* ---- 1. backward against finite differences ------------------------------------------------- */

static void test_gradients(void)
{
    for (int k = 0; k < op_cases_count; k++) {
        if (op_cases[k].big) continue;
        oc_layer L;
        char msg[256];
        if (setup_case(&L, &op_cases[k], BT_F64)) {
            CU_FAIL("setup");
            continue;
        }
        int bad = oc_gradcheck(&L, 1e-6, 1e-6, msg, sizeof msg);
        if (bad != 0) printf("\n  gradient %s: %s\n", op_cases[k].label, msg);
        CU_ASSERT_EQUAL(bad, 0);
        oc_free(&L);
    }
}

/* mse towards a target that takes no gradient, dropout in inference, and the backward asked for
 * input gradients only or parameter gradients only (the zero-bubble B/W split). */
static void test_gradients_partial(void)
{
    char msg[256];
    oc_layer L;
    /* mse with the target's gradient unwanted */
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("mse"), BT_F64) == 0);
    CU_ASSERT_STRING_EQUAL(L.op->name, "mse");
    free(L.in_grad[1].data);
    L.in_grad[1].data = NULL;
    CU_ASSERT_EQUAL(oc_gradcheck(&L, 1e-6, 1e-6, msg, sizeof msg), 0);
    oc_free(&L);
    /* dropout in inference: identity, gradient passes through */
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("dropout"), BT_F64) == 0);
    L.training = 0;
    CU_ASSERT_EQUAL(oc_gradcheck(&L, 1e-6, 1e-6, msg, sizeof msg), 0);
    oc_free(&L);

    /* linear, conv2d, layernorm: input-only and parameter-only backwards equal the full one */
    const char *which[] = {"linear", "conv2d k(3,2) s(2,1) p(1,0)", "layernorm"};
    for (int w = 0; w < 3; w++) {
        oc_layer full, part;
        const op_case *c = op_case_named(which[w]);
        CU_ASSERT_FATAL(setup_case(&full, c, BT_F64) == 0);
        CU_ASSERT_FATAL(setup_case(&part, c, BT_F64) == 0);
        CU_ASSERT(oc_forward(&full) == BT_OK && oc_backward(&full) == BT_OK);
        CU_ASSERT(oc_forward(&part) == BT_OK);
        /* inputs only: parameter gradient array absent */
        bt_op_call call = {.batch = part.batch, .n_in = part.n_in, .in = part.in, .out = &part.out,
                           .n_params = part.n_params, .param = part.param, .param_grad = NULL,
                           .out_grad = &part.out_grad, .in_grad = part.in_grad,
                           .saved = part.saved, .workspace = part.workspace,
                           .config = part.ctx.config, .seed = part.seed, .training = 1};
        CU_ASSERT(part.op->cpu_backward(&call) == BT_OK);
        for (int j = 0; j < part.n_params; j++)
            CU_ASSERT_EQUAL(oc_get(&part.param_grad[j], 0), 0.0);
        /* parameters only: input gradient not wanted */
        bt_tensor no_in = part.in_grad[0];
        no_in.data = NULL;
        call.param_grad = part.param_grad;
        call.in_grad = &no_in;
        CU_ASSERT(part.op->cpu_backward(&call) == BT_OK);
        double worst = 0;
        for (int j = 0; j < full.n_params; j++)
            for (int64_t e = 0; e < bt_tensor_numel(&full.param_grad[j]); e++)
                worst = fmax(worst, fabs(oc_get(&full.param_grad[j], e) -
                                         oc_get(&part.param_grad[j], e)));
        for (int64_t e = 0; e < bt_tensor_numel(&full.in_grad[0]); e++)
            worst = fmax(worst, fabs(oc_get(&full.in_grad[0], e) - oc_get(&part.in_grad[0], e)));
        if (!(worst < 1e-12)) printf("\n  partial backward %s: differs by %g\n", c->label, worst);
        CU_ASSERT(worst < 1e-12);
        oc_free(&full);
        oc_free(&part);
    }
}

/* The harness must be able to fail: a custom op whose backward is off by a factor fails the
 * check, and one whose backward overwrites instead of adding fails too. */
static bt_status square_infer(bt_infer_ctx *ctx)
{
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), bt_infer_input_dtype(ctx, 0));
}
static bt_status square_forward(const bt_op_call *call)
{
    const double *x = call->in[0].data;
    double *y = call->out->data;
    for (int64_t i = 0; i < bt_tensor_numel(call->out); i++) y[i] = x[i] * x[i];
    return BT_OK;
}
static bt_status square_backward_ok(const bt_op_call *call)
{
    const double *x = call->in[0].data, *dy = call->out_grad->data;
    double *dx = call->in_grad[0].data;
    for (int64_t i = 0; i < bt_tensor_numel(call->out_grad); i++) dx[i] += 2 * x[i] * dy[i];
    return BT_OK;
}
static bt_status square_backward_wrong(const bt_op_call *call)
{
    const double *x = call->in[0].data, *dy = call->out_grad->data;
    double *dx = call->in_grad[0].data;
    for (int64_t i = 0; i < bt_tensor_numel(call->out_grad); i++) dx[i] += 2.01 * x[i] * dy[i];
    return BT_OK;
}
static bt_status square_backward_overwrites(const bt_op_call *call)
{
    const double *x = call->in[0].data, *dy = call->out_grad->data;
    double *dx = call->in_grad[0].data;
    for (int64_t i = 0; i < bt_tensor_numel(call->out_grad); i++) dx[i] = 2 * x[i] * dy[i];
    return BT_OK;
}

static void test_gradcheck_can_fail(void)
{
    const struct {
        const char *name;
        bt_op_fn backward;
        int should_pass;
    } defs[] = {{"test.square_ok", square_backward_ok, 1},
                {"test.square_wrong", square_backward_wrong, 0},
                {"test.square_overwrites", square_backward_overwrites, 0}};
    for (int k = 0; k < 3; k++) {
        bt_op_def d = {.name = defs[k].name, .min_inputs = 1, .max_inputs = 1,
                       .infer = square_infer, .cpu_forward = square_forward,
                       .cpu_backward = defs[k].backward};
        CU_ASSERT_FATAL(bt_op_register(&d) == BT_OK);
        oc_layer L;
        bt_shape s = SH(4);
        bt_dtype dt = F;
        char msg[256];
        CU_ASSERT_FATAL(oc_setup(&L, defs[k].name, "", 1, &s, &dt, 2, BT_F64) == BT_OK);
        int bad = oc_gradcheck(&L, 1e-6, 1e-6, msg, sizeof msg);
        CU_ASSERT_EQUAL(bad == 0, defs[k].should_pass);
        oc_free(&L);
    }
}

/* ---- 2. forward against independent formulas ------------------------------------------------ */

static double in_at(const oc_layer *L, int i, int64_t e) { return oc_get(&L->in[i], e); }
static double par_at(const oc_layer *L, int j, int64_t e) { return oc_get(&L->param[j], e); }
static int64_t numel_in(const oc_layer *L, int i) { return bt_tensor_numel(&L->in[i]); }

/* 2-D argument of the layer: one value or [h, w], dflt when absent. */
static void pair_arg(const oc_layer *L, const char *name, int64_t dflt0, int64_t dflt1,
                     int64_t out[2])
{
    int64_t v[BT_ARG_MAX_INTS];
    int n = bt_infer_arg_ints(&L->ctx, name, BT_ARG_MAX_INTS, v);
    out[0] = n ? v[0] : dflt0;
    out[1] = n == 2 ? v[1] : n ? v[0] : dflt1;
}

/* The fused activation of linear and conv2d (act: relu): max(y, 0) over the whole output. */
static void ref_fused_act(const oc_layer *L, double *y, int64_t n)
{
    const char *act = bt_infer_arg_string(&L->ctx, "act", NULL);
    if (!act) return;
    CU_ASSERT_STRING_EQUAL(act, "relu");
    for (int64_t e = 0; e < n; e++) y[e] = fmax(y[e], 0);
}

static void ref_linear(const oc_layer *L, double *y)
{
    const int64_t in = L->param[0].dim[1], out = L->param[0].dim[0], rows = numel_in(L, 0) / in;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out; o++) {
            double s = L->n_params > 1 ? par_at(L, 1, o) : 0;
            for (int64_t i = 0; i < in; i++)
                s += in_at(L, 0, r * in + i) * par_at(L, 0, o * in + i);
            y[r * out + o] = s;
        }
    ref_fused_act(L, y, rows * out);
}

static void ref_add(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) y[e] = in_at(L, 0, e) + in_at(L, 1, e);
}
static void ref_mul(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) y[e] = in_at(L, 0, e) * in_at(L, 1, e);
}
static void ref_relu(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) y[e] = fmax(in_at(L, 0, e), 0);
}
static void ref_gelu(const oc_layer *L, double *y)
{
    const int tanh_form = strcmp(bt_infer_arg_string(&L->ctx, "approx", "none"), "tanh") == 0;
    for (int64_t e = 0; e < numel_in(L, 0); e++) {
        double x = in_at(L, 0, e);
        if (tanh_form) /* PyTorch's approximate='tanh' as written in its documentation */
            y[e] = 0.5 * x * (1 + tanh(sqrt(2 / acos(-1.0)) * (x + 0.044715 * pow(x, 3))));
        else
            y[e] = x * 0.5 * erfc(-x / sqrt(2.0)); /* x Phi(x) */
    }
}
static void ref_tanh(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) {
        double x = in_at(L, 0, e);
        y[e] = (exp(x) - exp(-x)) / (exp(x) + exp(-x));
    }
}
static void ref_sigmoid(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) y[e] = 1 / (1 + exp(-in_at(L, 0, e)));
}
static void ref_silu(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) {
        double x = in_at(L, 0, e);
        y[e] = x / (1 + exp(-x));
    }
}
/* silu(first half) * second half of every row */
static void ref_swiglu(const oc_layer *L, double *y)
{
    const int64_t d = L->in[0].dim[L->in[0].ndim - 1], rows = numel_in(L, 0) / d, h = d / 2;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < h; j++) {
            const double g = in_at(L, 0, r * d + j), u = in_at(L, 0, r * d + h + j);
            y[r * h + j] = g / (1 + exp(-g)) * u;
        }
}
static void ref_softmax(const oc_layer *L, double *y)
{
    const int64_t d = L->in[0].dim[L->in[0].ndim - 1], rows = numel_in(L, 0) / d;
    for (int64_t r = 0; r < rows; r++) {
        double z = 0;
        for (int64_t j = 0; j < d; j++) z += exp(in_at(L, 0, r * d + j));
        for (int64_t j = 0; j < d; j++) y[r * d + j] = exp(in_at(L, 0, r * d + j)) / z;
    }
}
static void ref_layernorm(const oc_layer *L, double *y)
{
    const int64_t d = L->in[0].dim[L->in[0].ndim - 1], rows = numel_in(L, 0) / d;
    const double eps = bt_infer_arg_float(&L->ctx, "eps", 1e-5);
    for (int64_t r = 0; r < rows; r++) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < d; j++) mean += in_at(L, 0, r * d + j) / (double)d;
        for (int64_t j = 0; j < d; j++) {
            double c = in_at(L, 0, r * d + j) - mean;
            var += c * c / (double)d;
        }
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = (in_at(L, 0, r * d + j) - mean) / sqrt(var + eps) * par_at(L, 0, j) +
                           par_at(L, 1, j);
    }
}
static void ref_copy(const oc_layer *L, double *y)
{
    for (int64_t e = 0; e < numel_in(L, 0); e++) y[e] = in_at(L, 0, e);
}

/* conv2d by its definition: seven nested loops. */
static void ref_conv2d(const oc_layer *L, double *y)
{
    const bt_tensor *x = &L->in[0], *w = &L->param[0];
    const int64_t B = x->dim[0], C = x->dim[1], H = x->dim[2], W = x->dim[3];
    const int64_t O = w->dim[0], KH = w->dim[2], KW = w->dim[3];
    const int64_t HO = L->out.dim[2], WO = L->out.dim[3];
    int64_t s[2], p[2];
    pair_arg(L, "stride", 1, 1, s);
    pair_arg(L, "padding", 0, 0, p);
    for (int64_t n = 0; n < B; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < HO; oh++)
                for (int64_t ow = 0; ow < WO; ow++) {
                    double acc = L->n_params > 1 ? par_at(L, 1, o) : 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < KH; i++)
                            for (int64_t j = 0; j < KW; j++) {
                                int64_t ih = oh * s[0] - p[0] + i, iw = ow * s[1] - p[1] + j;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                acc += in_at(L, 0, ((n * C + c) * H + ih) * W + iw) *
                                       par_at(L, 0, ((o * C + c) * KH + i) * KW + j);
                            }
                    y[((n * O + o) * HO + oh) * WO + ow] = acc;
                }
    ref_fused_act(L, y, B * O * HO * WO);
}

static void ref_pool(const oc_layer *L, double *y, int is_max)
{
    const bt_tensor *x = &L->in[0];
    const int64_t B = x->dim[0], C = x->dim[1], H = x->dim[2], W = x->dim[3];
    const int64_t HO = L->out.dim[2], WO = L->out.dim[3];
    int64_t k[2], s[2], p[2];
    pair_arg(L, "kernel", 0, 0, k);
    pair_arg(L, "stride", k[0], k[1], s);
    pair_arg(L, "padding", 0, 0, p);
    for (int64_t n = 0; n < B * C; n++)
        for (int64_t oh = 0; oh < HO; oh++)
            for (int64_t ow = 0; ow < WO; ow++) {
                double acc = is_max ? -INFINITY : 0;
                for (int64_t i = 0; i < k[0]; i++)
                    for (int64_t j = 0; j < k[1]; j++) {
                        int64_t ih = oh * s[0] - p[0] + i, iw = ow * s[1] - p[1] + j;
                        double v = (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                       ? (is_max ? -INFINITY : 0)
                                       : in_at(L, 0, (n * H + ih) * W + iw);
                        acc = is_max ? fmax(acc, v) : acc + v;
                    }
                y[(n * HO + oh) * WO + ow] = is_max ? acc : acc / (double)(k[0] * k[1]);
            }
}
static void ref_maxpool2d(const oc_layer *L, double *y) { ref_pool(L, y, 1); }
static void ref_avgpool2d(const oc_layer *L, double *y) { ref_pool(L, y, 0); }

static void ref_embedding(const oc_layer *L, double *y)
{
    const int64_t dim = L->param[0].dim[1];
    for (int64_t t = 0; t < numel_in(L, 0); t++)
        for (int64_t j = 0; j < dim; j++)
            y[t * dim + j] = par_at(L, 0, (int64_t)in_at(L, 0, t) * dim + j);
}

/* Dropout's mask is random: every output must be 0 or x / (1 - p); the zeros are taken from the
 * output, the kept values are checked. */
static void ref_dropout(const oc_layer *L, double *y)
{
    const double p = bt_infer_arg_float(&L->ctx, "p", 0.5);
    for (int64_t e = 0; e < numel_in(L, 0); e++)
        y[e] = oc_get(&L->out, e) == 0 ? 0 : in_at(L, 0, e) / (1 - p);
}

static void ref_mse(const oc_layer *L, double *y)
{
    const int64_t per = numel_in(L, 0) / L->batch;
    for (int64_t n = 0; n < L->batch; n++) {
        double s = 0;
        for (int64_t e = n * per; e < (n + 1) * per; e++)
            s += pow(in_at(L, 0, e) - in_at(L, 1, e), 2);
        y[n] = s / (double)per;
    }
}

static void ref_cross_entropy(const oc_layer *L, double *y)
{
    const int64_t c = L->in[0].dim[L->in[0].ndim - 1], np = numel_in(L, 1) / L->batch;
    for (int64_t n = 0; n < L->batch; n++) {
        double s = 0;
        for (int64_t q = n * np; q < (n + 1) * np; q++) {
            double z = 0;
            for (int64_t j = 0; j < c; j++) z += exp(in_at(L, 0, q * c + j));
            s += -log(exp(in_at(L, 0, q * c + (int64_t)in_at(L, 1, q))) / z);
        }
        y[n] = s / (double)np;
    }
}

/* heads, kv_heads and head_dim of an attention or rope case on rows of width w */
static void ref_heads(const oc_layer *L, int64_t w, int64_t *h, int64_t *kvh, int64_t *hd)
{
    *h = bt_infer_arg_int(&L->ctx, "heads", 1);
    *kvh = bt_infer_arg_int(&L->ctx, "kv_heads", *h);
    *hd = bt_infer_arg_int(&L->ctx, "head_dim", w / (*h + 2 * *kvh));
}

/* attention by its definition: per sample and query head the full T x T score matrix of its kv
 * head (HF's repeat_kv: query head h of heads / kv_heads per group reads kv head h / that),
 * masked (causal, and outside the window), softmax in double, times v. */
static void ref_attention(const oc_layer *L, double *y)
{
    const int64_t T = L->in[0].dim[1], W = L->in[0].dim[2];
    int64_t H, KVH, hd;
    ref_heads(L, W, &H, &KVH, &hd);
    const int64_t C = H * hd, window = bt_infer_arg_int(&L->ctx, "window", 0);
    const int causal = bt_infer_arg_bool(&L->ctx, "causal", 1);
    double *s = calloc((size_t)T, sizeof *s);
    for (int64_t n = 0; n < L->batch; n++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t kv = h / (H / KVH), kcol = C + kv * hd, vcol = C + KVH * hd + kv * hd;
            for (int64_t i = 0; i < T; i++) {
                double mx = -INFINITY, z = 0;
                for (int64_t j = 0; j < T; j++) {
                    double dot = 0;
                    for (int64_t c = 0; c < hd; c++)
                        dot += in_at(L, 0, (n * T + i) * W + h * hd + c) *
                               in_at(L, 0, (n * T + j) * W + kcol + c);
                    const int seen = (!causal || j <= i) && (window == 0 || i - j < window);
                    s[j] = seen ? dot / sqrt((double)hd) : -INFINITY;
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j < T; j++) z += exp(s[j] - mx);
                for (int64_t c = 0; c < hd; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < T; j++)
                        acc += exp(s[j] - mx) / z * in_at(L, 0, (n * T + j) * W + vcol + c);
                    y[(n * T + i) * C + h * hd + c] = acc;
                }
            }
        }
    free(s);
}

/* rope's inverse frequency of pair i of hd, written from Meta's Llama 3.1 description (the
 * wavelength's band against the original context), independently of bt_rope_inv_freq. */
static double ref_rope_freq(const oc_layer *L, int64_t i, int64_t hd)
{
    const double theta = bt_infer_arg_float(&L->ctx, "theta", 10000);
    const double f = exp(-log(theta) * (double)(2 * i) / (double)hd);
    if (!bt_infer_arg_string(&L->ctx, "scaling", NULL)) return f;
    const double factor = bt_infer_arg_float(&L->ctx, "factor", NAN);
    const double lo = bt_infer_arg_float(&L->ctx, "low_freq_factor", NAN);
    const double hi = bt_infer_arg_float(&L->ctx, "high_freq_factor", NAN);
    const double ctx = bt_infer_arg_float(&L->ctx, "original_max_position_embeddings", NAN);
    const double wavelen = 2 * acos(-1.0) / f;
    if (wavelen * hi < ctx) return f;             /* high frequencies: kept */
    if (wavelen * lo > ctx) return f / factor;    /* low frequencies: interpolated by factor */
    const double smooth = (ctx / wavelen - lo) / (hi - lo);
    return smooth * f + (1 - smooth) * (f / factor);
}

/* rope as Hugging Face writes it: per head x * cos + rotate_half(x) * sin, where rotate_half(x)
 * = [-x2, x1] and cos, sin repeat the hd/2 angles position * f_i twice; q and k heads (the first
 * heads + kv_heads), v copied. */
static void ref_rope(const oc_layer *L, double *y)
{
    const int64_t T = L->in[0].dim[1], W = L->in[0].dim[2];
    int64_t H, KVH, hd;
    ref_heads(L, W, &H, &KVH, &hd);
    for (int64_t n = 0; n < L->batch; n++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t col = 0; col < W; col++) {
                const int64_t e = (n * T + t) * W + col, head = col / hd, j = col % hd;
                if (head >= H + KVH) {
                    y[e] = in_at(L, 0, e);
                    continue;
                }
                const double angle = (double)t * ref_rope_freq(L, j % (hd / 2), hd);
                const double rot = j < hd / 2 ? -in_at(L, 0, e + hd / 2) : in_at(L, 0, e - hd / 2);
                y[e] = in_at(L, 0, e) * cos(angle) + rot * sin(angle);
            }
}

static void ref_pos_embedding(const oc_layer *L, double *y)
{
    const int64_t tc = numel_in(L, 0) / L->batch;
    for (int64_t e = 0; e < numel_in(L, 0); e++) y[e] = in_at(L, 0, e) + par_at(L, 0, e % tc);
}

static void ref_matmul(const oc_layer *L, double *y)
{
    const bt_tensor *a = &L->in[0], *b = &L->in[1];
    const int64_t M = a->dim[a->ndim - 2], K = a->dim[a->ndim - 1], N = b->dim[b->ndim - 1];
    const int64_t mats = numel_in(L, 0) / (M * K);
    for (int64_t q = 0; q < mats; q++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += in_at(L, 0, (q * M + i) * K + k) * in_at(L, 1, (q * K + k) * N + j);
                y[(q * M + i) * N + j] = acc;
            }
}

static void ref_transpose(const oc_layer *L, double *y)
{
    const bt_tensor *x = &L->in[0];
    const int64_t R = x->dim[x->ndim - 2], C = x->dim[x->ndim - 1], mats = numel_in(L, 0) / (R * C);
    for (int64_t q = 0; q < mats; q++)
        for (int64_t i = 0; i < R; i++)
            for (int64_t j = 0; j < C; j++) y[q * R * C + j * R + i] = in_at(L, 0, q * R * C + i * C + j);
}

static void ref_split(const oc_layer *L, double *y)
{
    const int64_t d = L->in[0].dim[L->in[0].ndim - 1], rows = numel_in(L, 0) / d;
    const int64_t parts = bt_infer_arg_int(&L->ctx, "parts", 1), w = d / parts;
    const int64_t at = bt_infer_arg_int(&L->ctx, "index", 0) * w;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < w; j++) y[r * w + j] = in_at(L, 0, r * d + at + j);
}

static void ref_concat(const oc_layer *L, double *y)
{
    const int64_t wa = L->in[0].dim[L->in[0].ndim - 1], wb = L->in[1].dim[L->in[1].ndim - 1];
    const int64_t rows = numel_in(L, 0) / wa;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < wa; j++) y[r * (wa + wb) + j] = in_at(L, 0, r * wa + j);
        for (int64_t j = 0; j < wb; j++) y[r * (wa + wb) + wa + j] = in_at(L, 1, r * wb + j);
    }
}

static void ref_rmsnorm(const oc_layer *L, double *y)
{
    const int64_t d = L->in[0].dim[L->in[0].ndim - 1], rows = numel_in(L, 0) / d;
    const double eps = bt_infer_arg_float(&L->ctx, "eps", 1e-5);
    for (int64_t r = 0; r < rows; r++) {
        double ms = 0;
        for (int64_t j = 0; j < d; j++) ms += pow(in_at(L, 0, r * d + j), 2) / (double)d;
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = in_at(L, 0, r * d + j) / sqrt(ms + eps) * par_at(L, 0, j);
    }
}

static const struct {
    const char *op;
    void (*ref)(const oc_layer *, double *);
} refs[] = {
    {"linear", ref_linear},       {"add", ref_add},
    {"mul", ref_mul},             {"relu", ref_relu},
    {"gelu", ref_gelu},           {"tanh", ref_tanh},
    {"sigmoid", ref_sigmoid},     {"silu", ref_silu},
    {"softmax", ref_softmax},
    {"layernorm", ref_layernorm}, {"flatten", ref_copy},
    {"reshape", ref_copy},        {"conv2d", ref_conv2d},
    {"maxpool2d", ref_maxpool2d}, {"avgpool2d", ref_avgpool2d},
    {"embedding", ref_embedding}, {"dropout", ref_dropout},
    {"mse", ref_mse},             {"cross_entropy", ref_cross_entropy},
    {"attention", ref_attention}, {"pos_embedding", ref_pos_embedding},
    {"rope", ref_rope},           {"swiglu", ref_swiglu},
    {"matmul", ref_matmul},       {"transpose", ref_transpose},
    {"split", ref_split},         {"concat", ref_concat},
    {"rmsnorm", ref_rmsnorm},
};

static void test_forward_reference(void)
{
    for (int k = 0; k < op_cases_count; k++) {
        if (op_cases[k].big) continue;
        oc_layer L;
        void (*ref)(const oc_layer *, double *) = NULL;
        for (size_t r = 0; r < sizeof refs / sizeof refs[0]; r++)
            if (strcmp(refs[r].op, op_cases[k].op) == 0) ref = refs[r].ref;
        CU_ASSERT_FATAL(ref != NULL);
        if (setup_case(&L, &op_cases[k], BT_F64)) {
            CU_FAIL("setup");
            continue;
        }
        CU_ASSERT_FATAL(oc_forward(&L) == BT_OK);
        const int64_t n = bt_tensor_numel(&L.out);
        double *want = calloc((size_t)n, sizeof *want);
        CU_ASSERT_FATAL(want != NULL);
        ref(&L, want);
        double worst = 0;
        int64_t at = 0;
        for (int64_t e = 0; e < n; e++) {
            double err = fabs(oc_get(&L.out, e) - want[e]) / fmax(1, fabs(want[e]));
            if (!(err <= worst)) {
                worst = err;
                at = e;
            }
        }
        if (!(worst < 1e-12))
            printf("\n  forward %s: element %lld is %.17g, expected %.17g\n", op_cases[k].label,
                   (long long)at, oc_get(&L.out, at), want[at]);
        CU_ASSERT(worst < 1e-12);
        /* shapes: output is the batch followed by the inferred per-sample shape */
        CU_ASSERT_EQUAL(L.out.dim[0], op_cases[k].batch);
        free(want);
        oc_free(&L);
    }
}

/* Runs op on one f64 sample with the given input values (and parameters if params != NULL) and
 * compares the output with expected values written down by hand. */
static void check_hand(const char *op, const char *args, int n_in, const bt_shape *shapes,
                       const bt_dtype *dtypes, const double *const *inputs,
                       const double *const *params, const double *expected, int64_t n_out,
                       double tol)
{
    oc_layer L;
    CU_ASSERT_FATAL(oc_setup(&L, op, args, n_in, shapes, dtypes, 1, BT_F64) == BT_OK);
    for (int i = 0; i < n_in; i++)
        for (int64_t e = 0; e < numel_in(&L, i); e++) oc_set(&L.in[i], e, inputs[i][e]);
    for (int j = 0; params && j < L.n_params; j++)
        for (int64_t e = 0; e < bt_tensor_numel(&L.param[j]); e++)
            oc_set(&L.param[j], e, params[j][e]);
    CU_ASSERT_FATAL(oc_forward(&L) == BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_tensor_numel(&L.out), n_out);
    for (int64_t e = 0; e < n_out; e++) {
        double got = oc_get(&L.out, e);
        const int same_nan = isnan(got) && isnan(expected[e]);
        if (!same_nan && !(fabs(got - expected[e]) <= tol)) {
            printf("\n  %s %s: element %lld is %.17g, expected %.17g\n", op, args, (long long)e,
                   got, expected[e]);
            CU_FAIL("hand-computed value");
        }
    }
    oc_free(&L);
}

static void test_forward_hand_values(void)
{
    {   /* linear: x [1, 2], W [[1, 0], [0, 1], [1, 1]], b [0.5, -1, 0] */
        bt_shape s = SH(2);
        bt_dtype d = F;
        const double x[] = {1, 2}, w[] = {1, 0, 0, 1, 1, 1}, b[] = {0.5, -1, 0};
        const double want[] = {1.5, 1, 3};
        check_hand("linear", "out=3", 1, &s, &d, (const double *[]){x}, (const double *[]){w, b},
                   want, 3, 1e-15);
    }
    {   /* gelu at -1, 0, 1 (PyTorch: F.gelu) */
        bt_shape s = SH(3);
        bt_dtype d = F;
        const double x[] = {-1, 0, 1};
        const double want[] = {-0.15865525393145707, 0, 0.8413447460685429};
        check_hand("gelu", "", 1, &s, &d, (const double *[]){x}, NULL, want, 3, 1e-15);
    }
    {   /* gelu approx=tanh at -3, -1, 0, 0.5, 1, 2.5, and the gradient of the sum of its outputs
         * (PyTorch 1.13: F.gelu(x, approximate='tanh') in float64, and its autograd) */
        bt_shape s = SH(6);
        bt_dtype d = F;
        const double x[] = {-3, -1, 0, 0.5, 1, 2.5};
        const double want[] = {-0.0036373920817729943, -0.15880800939172324, 0.0,
                               0.34571400982514394,    0.8411919906082768,   2.484915733910001};
        const double dwant[] = {-0.011584166630969648, -0.08296408384578252, 0.5,
                                0.8673699035346424,    1.0829640838457826,   1.037951576212666};
        check_hand("gelu", "approx=tanh", 1, &s, &d, (const double *[]){x}, NULL, want, 6, 1e-15);
        oc_layer L;
        CU_ASSERT_FATAL(oc_setup(&L, "gelu", "approx=tanh", 1, &s, &d, 1, BT_F64) == BT_OK);
        for (int e = 0; e < 6; e++) {
            oc_set(&L.in[0], e, x[e]);
            oc_set(&L.out_grad, e, 1);
        }
        oc_zero(&L.in_grad[0]);
        CU_ASSERT_FATAL(oc_forward(&L) == BT_OK && oc_backward(&L) == BT_OK);
        for (int e = 0; e < 6; e++) {
            if (!(fabs(oc_get(&L.in_grad[0], e) - dwant[e]) <= 1e-15))
                printf("\n  gelu tanh gradient at %g: %.17g, PyTorch %.17g\n", x[e], oc_get(&L.in_grad[0], e),
                       dwant[e]);
            CU_ASSERT(fabs(oc_get(&L.in_grad[0], e) - dwant[e]) <= 1e-15);
        }
        oc_free(&L);
    }
    {   /* silu = x sigmoid(x) at 0, 1, -2, 3, -0.5 (40-digit decimal arithmetic), and its
         * derivative s (1 + x (1 - s)) there, the gradient of the sum of the outputs */
        bt_shape s = SH(5);
        bt_dtype d = F;
        const double x[] = {0, 1, -2, 3, -0.5};
        const double want[] = {0, 0.73105857863000487925, -0.23840584404423511188,
                               2.8577223804672996574, -0.18877033439907271768};
        const double dwant[] = {0.5, 0.92767051187148673179, -0.090784248784895478757,
                                1.0881041060151696171, 0.26003881269734819083};
        check_hand("silu", "", 1, &s, &d, (const double *[]){x}, NULL, want, 5, 1e-15);
        oc_layer L;
        CU_ASSERT_FATAL(oc_setup(&L, "silu", "", 1, &s, &d, 1, BT_F64) == BT_OK);
        for (int e = 0; e < 5; e++) {
            oc_set(&L.in[0], e, x[e]);
            oc_set(&L.out_grad, e, 1);
        }
        oc_zero(&L.in_grad[0]);
        CU_ASSERT_FATAL(oc_forward(&L) == BT_OK && oc_backward(&L) == BT_OK);
        for (int e = 0; e < 5; e++) CU_ASSERT(fabs(oc_get(&L.in_grad[0], e) - dwant[e]) <= 1e-15);
        oc_free(&L);
    }
    {   /* softmax of [1, 2, 3] and, stably, of [1000, 1001] */
        bt_shape s = SH(3);
        bt_dtype d = F;
        const double x[] = {1, 2, 3};
        const double want[] = {0.09003057317038046, 0.24472847105479767, 0.6652409557748219};
        check_hand("softmax", "", 1, &s, &d, (const double *[]){x}, NULL, want, 3, 1e-15);
        bt_shape s2 = SH(2);
        const double x2[] = {1000, 1001};
        const double want2[] = {0.2689414213699951, 0.7310585786300049};
        check_hand("softmax", "", 1, &s2, &d, (const double *[]){x2}, NULL, want2, 2, 1e-15);
        const double x3[] = {-1001, -1000};
        check_hand("softmax", "", 1, &s2, &d, (const double *[]){x3}, NULL, want2, 2, 1e-15);
    }
    {   /* layernorm of [1, 2, 3, 4]: mean 2.5, variance 1.25; weight [1, 2, 1, 1], bias 0.5 */
        bt_shape s = SH(4);
        bt_dtype d = F;
        const double x[] = {1, 2, 3, 4}, w[] = {1, 2, 1, 1}, b[] = {0.5, 0.5, 0.5, 0.5};
        const double r = 1 / sqrt(1.25 + 1e-5);
        const double want[] = {-1.5 * r + 0.5, -0.5 * r * 2 + 0.5, 0.5 * r + 0.5, 1.5 * r + 0.5};
        check_hand("layernorm", "", 1, &s, &d, (const double *[]){x}, (const double *[]){w, b},
                   want, 4, 1e-14);
    }
    {   /* conv2d of [[1..9]] with a 2x2 kernel of ones: stride 1; and stride 2 padding 1 */
        bt_shape s = SH(1, 3, 3);
        bt_dtype d = F;
        const double x[] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w[] = {1, 1, 1, 1}, b[] = {0};
        const double want[] = {12, 16, 24, 28};
        check_hand("conv2d", "out=1 kernel=2", 1, &s, &d, (const double *[]){x},
                   (const double *[]){w, b}, want, 4, 1e-15);
        const double want2[] = {1, 5, 11, 28};
        check_hand("conv2d", "out=1 kernel=2 stride=2 padding=1", 1, &s, &d,
                   (const double *[]){x}, (const double *[]){w, b}, want2, 4, 1e-15);
    }
    {   /* maxpool2d of 0..15 in 4x4 with 2x2 windows; avgpool2d 3x3 padding 1 of ones counts
         * the padding (4/9 at corners, 6/9 at edges) */
        bt_shape s = SH(1, 4, 4);
        bt_dtype d = F;
        double x[16];
        for (int i = 0; i < 16; i++) x[i] = i;
        const double want[] = {5, 7, 13, 15};
        check_hand("maxpool2d", "kernel=2", 1, &s, &d, (const double *[]){x}, NULL, want, 4, 0);
        /* a NaN in a window propagates to its output, as in PyTorch */
        x[4] = NAN;
        const double want_nan[] = {NAN, 7, 13, 15};
        check_hand("maxpool2d", "kernel=2", 1, &s, &d, (const double *[]){x}, NULL, want_nan, 4, 0);
        bt_shape s3 = SH(1, 3, 3);
        const double ones[] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        const double want3[] = {4. / 9, 6. / 9, 4. / 9, 6. / 9, 1, 6. / 9, 4. / 9, 6. / 9, 4. / 9};
        check_hand("avgpool2d", "kernel=3 stride=1 padding=1", 1, &s3, &d,
                   (const double *[]){ones}, NULL, want3, 9, 1e-15);
    }
    {   /* mse of [1, 2, 3] against [1, 0, 0] is 13/3 */
        bt_shape s[] = {SH(3), SH(3)};
        bt_dtype d[] = {F, F};
        const double p[] = {1, 2, 3}, t[] = {1, 0, 0};
        const double want[] = {13.0 / 3};
        check_hand("mse", "", 2, s, d, (const double *[]){p, t}, NULL, want, 1, 1e-15);
    }
    {   /* cross_entropy: [0, 0] label 0 is log 2; [1000, 0] label 1 is 1000 (stable) */
        bt_shape s[] = {SH(2), SCALAR};
        bt_dtype d[] = {F, I};
        const double x[] = {0, 0}, l0[] = {0};
        const double want[] = {0.6931471805599453};
        check_hand("cross_entropy", "", 2, s, d, (const double *[]){x, l0}, NULL, want, 1, 1e-15);
        const double x2[] = {1000, 0}, l1[] = {1};
        const double want2[] = {1000};
        check_hand("cross_entropy", "", 2, s, d, (const double *[]){x2, l1}, NULL, want2, 1, 1e-12);
    }
    {   /* embedding picks rows; flatten keeps i32 indices */
        bt_shape s = SH(3);
        bt_dtype d = I;
        const double ids[] = {2, 0, 2}, w[] = {10, 11, 20, 21, 30, 31};
        const double want[] = {30, 31, 10, 11, 30, 31};
        check_hand("embedding", "num=3 dim=2", 1, &s, &d, (const double *[]){ids},
                   (const double *[]){w}, want, 6, 0);
        bt_shape s2 = SH(2, 2);
        const double v[] = {7, -3, 5, 1};
        check_hand("flatten", "", 1, &s2, &d, (const double *[]){v}, NULL, v, 4, 0);
    }
}

/* ---- 3. errors ------------------------------------------------------------------------------ */

static const struct {
    const char *op, *args;
    int n_in;
    bt_shape shape[2];
    bt_dtype dtype[2];
    bt_status status;
    const char *message;
} error_cases[] = {
    {"linear", "out=3", 1, {SCALAR}, {BT_F32}, BT_ERR_SHAPE,
     "linear expects its input's last dimension to hold the features (rank >= 1), got []"},
    {"linear", "", 1, {SH(4)}, {BT_F32}, BT_ERR_MODEL, "op 'linear' needs argument 'out'"},
    {"linear", "out=0", 1, {SH(4)}, {BT_F32}, BT_ERR_MODEL, "'out' = 0 is out of range"},
    {"linear", "out=3 width=2", 1, {SH(4)}, {BT_F32}, BT_ERR_MODEL, "has no argument 'width'"},
    {"linear", "out=3", 1, {SH(4)}, {BT_I32}, BT_ERR_SHAPE,
     "linear: input 0 has dtype i32; expected f32 or f64"},
    {"add", "", 2, {SH(10), SH(12)}, {BT_F32, BT_F32}, BT_ERR_SHAPE,
     "add: shapes [10] and [12] differ"},
    {"add", "", 2, {SH(2, 3), SH(3, 2)}, {BT_F32, BT_F32}, BT_ERR_SHAPE,
     "add: shapes [2, 3] and [3, 2] differ"},
    {"add", "", 2, {SH(4), SH(4)}, {BT_F32, BT_F64}, BT_ERR_SHAPE,
     "add: inputs mix dtypes f32 and f64"},
    {"mul", "", 1, {SH(4)}, {BT_F32}, BT_ERR_SHAPE, "op 'mul' takes 2 inputs, got 1"},
    {"relu", "", 1, {SH(4)}, {BT_I32}, BT_ERR_SHAPE, "relu: input 0 has dtype i32"},
    {"softmax", "axis=0", 1, {SH(3, 4)}, {BT_F32}, BT_ERR_SHAPE,
     "softmax: only the last axis is supported (axis -1 or 1), got axis 0 for input [3, 4]"},
    {"layernorm", "eps=0.0", 1, {SH(4)}, {BT_F32}, BT_ERR_SHAPE,
     "layernorm: eps must be > 0, got 0"},
    {"layernorm", "eps=-1.0", 1, {SH(4)}, {BT_F32}, BT_ERR_MODEL, "'eps' = -1 is out of range"},
    {"attention", "heads=4 kv_heads=3", 1, {SH(7, 30)}, {BT_F32}, BT_ERR_SHAPE,
     "attention: heads = 4 is not a multiple of kv_heads = 3"},
    {"attention", "heads=2 kv_heads=1", 1, {SH(5, 13)}, {BT_F32}, BT_ERR_SHAPE,
     "attention: the input's last dimension (13) must be (heads + 2 kv_heads) * head_dim, a "
     "multiple of 2 + 2 * 1 = 4"},
    {"attention", "heads=2 head_dim=4", 1, {SH(5, 18)}, {BT_F32}, BT_ERR_SHAPE,
     "attention: the input's last dimension (18) must be (heads + 2 kv_heads) * head_dim = (2 + "
     "2 * 2) * 4 = 24"},
    {"attention", "heads=2 window=2 causal=false", 1, {SH(5, 18)}, {BT_F32}, BT_ERR_SHAPE,
     "attention: window = 2 needs causal attention"},
    {"attention", "heads=2 window=-1", 1, {SH(5, 18)}, {BT_F32}, BT_ERR_MODEL,
     "'window' = -1 is out of range"},
    {"attention", "heads=1", 1, {SH(6)}, {BT_F32}, BT_ERR_SHAPE,
     "attention expects an input shaped [T, (heads + 2 kv_heads) * head_dim], got [6]"},
    {"rope", "heads=1", 1, {SH(4, 9)}, {BT_F32}, BT_ERR_SHAPE,
     "rope: head_dim (3) must be even"},
    {"rope", "heads=2 kv_heads=4", 1, {SH(4, 20)}, {BT_F32}, BT_ERR_SHAPE,
     "rope: heads = 2 is not a multiple of kv_heads = 4"},
    {"rope", "heads=1 scaling=yarn", 1, {SH(4, 6)}, {BT_F32}, BT_ERR_SHAPE,
     "rope: scaling must be \"llama3\" (HF rope_scaling's rope_type; leave it out for none), got "
     "\"yarn\""},
    {"rope", "heads=1 scaling=llama3 factor=8.0 low_freq_factor=1.0 high_freq_factor=4.0", 1,
     {SH(4, 6)}, {BT_F32}, BT_ERR_SHAPE,
     "rope: scaling: llama3 needs original_max_position_embeddings"},
    {"rope", "heads=1 low_freq_factor=1.0", 1, {SH(4, 6)}, {BT_F32}, BT_ERR_SHAPE,
     "rope: low_freq_factor is a parameter of scaling: llama3, which was not given"},
    {"rope",
     "heads=1 scaling=llama3 factor=8.0 low_freq_factor=4.0 high_freq_factor=4.0 "
     "original_max_position_embeddings=64",
     1, {SH(4, 6)}, {BT_F32}, BT_ERR_SHAPE,
     "rope: high_freq_factor (4) must be larger than low_freq_factor (4)"},
    {"rope", "heads=1 theta=0.0", 1, {SH(4, 6)}, {BT_F32}, BT_ERR_MODEL,
     "'theta' = 0 is out of range"},
    {"swiglu", "", 1, {SH(3, 5)}, {BT_F32}, BT_ERR_SHAPE,
     "swiglu expects a last dimension 2I (gate | up), got [3, 5]"},
    {"gelu", "approx=erf", 1, {SH(3)}, {BT_F32}, BT_ERR_SHAPE,
     "gelu: approx must be \"none\" (the erf form) or \"tanh\", got \"erf\""},
    {"reshape", "shape=4,2", 1, {SH(6)}, {BT_F32}, BT_ERR_SHAPE,
     "reshape: cannot reshape [6] (6 elements) to [4, 2] (8 elements)"},
    {"reshape", "shape=-1,-1", 1, {SH(6)}, {BT_F32}, BT_ERR_SHAPE,
     "reshape: shape [-1, -1] has more than one -1"},
    {"reshape", "shape=0,6", 1, {SH(6)}, {BT_F32}, BT_ERR_SHAPE,
     "reshape: shape [0, 6] has dimension 0 = 0 (must be >= 1 or -1)"},
    {"reshape", "shape=2,-1", 1, {SH(7)}, {BT_F32}, BT_ERR_SHAPE,
     "reshape: cannot reshape [7] (7 elements) to [2, -1]: 7 is not a multiple of 2"},
    {"reshape", "", 1, {SH(6)}, {BT_F32}, BT_ERR_MODEL, "needs argument 'shape'"},
    {"conv2d", "out=2 kernel=3", 1, {SH(3, 4)}, {BT_F32}, BT_ERR_SHAPE,
     "conv2d expects input 0 shaped [C, H, W], got [3, 4]"},
    {"conv2d", "out=2 kernel=5", 1, {SH(1, 3, 3)}, {BT_F32}, BT_ERR_SHAPE,
     "conv2d: kernel [5, 5] is larger than the padded input [3, 3] (input [1, 3, 3], padding "
     "[0, 0])"},
    {"conv2d", "out=2 kernel=5,1 padding=1", 1, {SH(1, 2, 3)}, {BT_F32}, BT_ERR_SHAPE,
     "conv2d: kernel [5, 1] is larger than the padded input [4, 5]"},
    {"conv2d", "out=2 kernel=1,2,3", 1, {SH(1, 3, 3)}, {BT_F32}, BT_ERR_SHAPE,
     "conv2d: 'kernel' takes one integer or [h, w], got 3 values"},
    {"conv2d", "out=2 kernel=3 stride=0", 1, {SH(1, 3, 3)}, {BT_F32}, BT_ERR_MODEL,
     "'stride' = 0 is out of range"},
    {"conv2d", "kernel=3", 1, {SH(1, 3, 3)}, {BT_F32}, BT_ERR_MODEL, "needs argument 'out'"},
    {"maxpool2d", "kernel=3 padding=2", 1, {SH(1, 8, 8)}, {BT_F32}, BT_ERR_SHAPE,
     "maxpool2d: padding [2, 2] must be at most half the kernel [3, 3]"},
    {"avgpool2d", "kernel=4", 1, {SH(2, 3, 8)}, {BT_F32}, BT_ERR_SHAPE,
     "avgpool2d: kernel [4, 4] is larger than the padded input [3, 8]"},
    {"maxpool2d", "", 1, {SH(1, 4, 4)}, {BT_F32}, BT_ERR_MODEL, "needs argument 'kernel'"},
    {"embedding", "num=10 dim=4", 1, {SH(3)}, {BT_F32}, BT_ERR_SHAPE,
     "embedding expects i32 indices, got dtype f32"},
    {"embedding", "num=10 dim=4 dtype=f16", 1, {SH(3)}, {BT_I32}, BT_ERR_SHAPE,
     "embedding: dtype must be \"f32\" or \"f64\", got \"f16\""},
    {"embedding", "dim=4", 1, {SH(3)}, {BT_I32}, BT_ERR_MODEL, "needs argument 'num'"},
    {"dropout", "p=1.0", 1, {SH(3)}, {BT_F32}, BT_ERR_SHAPE, "dropout: p must be in [0, 1), got 1"},
    {"dropout", "p=1.5", 1, {SH(3)}, {BT_F32}, BT_ERR_MODEL, "'p' = 1.5 is out of range"},
    {"mse", "", 2, {SH(3), SH(4)}, {BT_F32, BT_F32}, BT_ERR_SHAPE,
     "mse: shapes [3] and [4] differ"},
    {"cross_entropy", "", 2, {SCALAR, SCALAR}, {BT_F32, BT_I32}, BT_ERR_SHAPE,
     "cross_entropy expects logits shaped [C], got []"},
    {"cross_entropy", "", 2, {SH(5), SCALAR}, {BT_F32, BT_F32}, BT_ERR_SHAPE,
     "cross_entropy expects i32 labels, got dtype f32"},
    {"cross_entropy", "", 2, {SH(5), SH(2)}, {BT_F32, BT_I32}, BT_ERR_SHAPE,
     "cross_entropy: labels shaped [2] do not fit logits [5] (expected labels shaped [])"},
    {"cross_entropy", "", 2, {SH(5), SCALAR}, {BT_I32, BT_I32}, BT_ERR_SHAPE,
     "cross_entropy: input 0 has dtype i32"},
};

static void test_shape_errors(void)
{
    for (size_t k = 0; k < sizeof error_cases / sizeof error_cases[0]; k++) {
        oc_layer L;
        bt_clear_error();
        bt_status st = oc_setup(&L, error_cases[k].op, error_cases[k].args, error_cases[k].n_in,
                                error_cases[k].shape, error_cases[k].dtype, 2, BT_F64);
        const char *msg = bt_last_error();
        int ok = st == error_cases[k].status && strstr(msg, error_cases[k].message) != NULL &&
                 strncmp(msg, "layer 'L': ", 11) == 0;
        if (!ok)
            printf("\n  %s %s: status %d (want %d), message \"%s\"\n    want \"%s\"\n",
                   error_cases[k].op, error_cases[k].args, (int)st, (int)error_cases[k].status,
                   msg, error_cases[k].message);
        CU_ASSERT(ok);
        if (st == BT_OK) oc_free(&L);
    }
}

/* A message may quote the current one (core/status.c formats into a temporary first): an op's
 * bt_op_error(st, "%s: %s", what, bt_last_error()) reads the old message whole, short or as long
 * as the buffer holds. */
static void test_error_quotes_itself(void)
{
    bt_op_error(BT_ERR_INVALID_ARG, "text: byte 0x5a at offset 1366 is not in the vocabulary of 15");
    CU_ASSERT_EQUAL(bt_op_error(BT_ERR_INVALID_ARG, "%s: %s", "ev.txt", bt_last_error()), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "ev.txt: text: byte 0x5a at offset 1366 is not in the vocabulary of 15");
    char longer[1500];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    bt_op_error(BT_ERR_IO, "%s", longer);
    bt_op_error(BT_ERR_IO, "%s|%s", bt_last_error(), "end");
    CU_ASSERT_EQUAL(strlen(bt_last_error()), sizeof longer - 1 + 4);
    CU_ASSERT_EQUAL(strncmp(bt_last_error(), longer, sizeof longer - 1), 0);
    CU_ASSERT_STRING_EQUAL(bt_last_error() + sizeof longer - 1, "|end");
}

static void test_runtime_errors(void)
{
    oc_layer L;
    /* embedding: index 7 in a vocabulary of 5, and -1 */
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("embedding"), BT_F64) == 0);
    CU_ASSERT_STRING_EQUAL(L.op->name, "embedding");
    oc_set(&L.in[0], 5, 7);
    bt_clear_error();
    CU_ASSERT_EQUAL(oc_forward(&L), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "index 7 at position 5"));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "vocabulary of 5"));
    oc_set(&L.in[0], 5, -1);
    CU_ASSERT_EQUAL(oc_forward(&L), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "index -1"));
    CU_ASSERT_EQUAL(oc_backward(&L), BT_ERR_INVALID_ARG);
    oc_free(&L);
    /* cross_entropy: label 5 with 5 classes, in the forward and the backward */
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("cross_entropy"), BT_F64) == 0);
    CU_ASSERT_STRING_EQUAL(L.op->name, "cross_entropy");
    oc_set(&L.in[1], 2, 5);
    bt_clear_error();
    CU_ASSERT_EQUAL(oc_forward(&L), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "label 5 at position 2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "5 classes"));
    CU_ASSERT_EQUAL(oc_backward(&L), BT_ERR_INVALID_ARG);
    oc_free(&L);
    /* a dtype without a CPU kernel */
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("relu"), BT_F64) == 0);
    L.out.dtype = BT_F16;
    CU_ASSERT_EQUAL(oc_forward(&L), BT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "relu: no CPU kernel for dtype f16"));
    L.out.dtype = BT_F64;
    oc_free(&L);
}

/* What the shape rules declare: parameters (names, shapes, init, fan-in), no-grad inputs. */
static void test_declarations(void)
{
    oc_layer L;
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("linear"), BT_F64) == 0); /* out=3 on [2, 4] */
    CU_ASSERT_EQUAL(L.ctx.out_shape.ndim, 2);
    CU_ASSERT(L.ctx.out_shape.dim[0] == 2 && L.ctx.out_shape.dim[1] == 3);
    CU_ASSERT_EQUAL(L.ctx.n_params, 2);
    CU_ASSERT_STRING_EQUAL(L.ctx.params[0].suffix, "weight");
    CU_ASSERT(L.ctx.params[0].shape.ndim == 2 && L.ctx.params[0].shape.dim[0] == 3 &&
              L.ctx.params[0].shape.dim[1] == 4);
    CU_ASSERT(L.ctx.params[0].init == BT_INIT_UNIFORM_FAN_IN && L.ctx.params[0].fan_in == 4);
    CU_ASSERT_STRING_EQUAL(L.ctx.params[1].suffix, "bias");
    CU_ASSERT(L.ctx.params[1].shape.ndim == 1 && L.ctx.params[1].shape.dim[0] == 3);
    CU_ASSERT(L.ctx.params[1].init == BT_INIT_UNIFORM_FAN_IN && L.ctx.params[1].fan_in == 4);
    oc_free(&L);
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("linear rank1 no bias"), BT_F64) == 0);
    CU_ASSERT_EQUAL(L.ctx.n_params, 1);
    oc_free(&L);
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("conv2d k(3,2) s(2,1) p(1,0)"), BT_F64) == 0);
    CU_ASSERT(L.ctx.out_shape.ndim == 3 && L.ctx.out_shape.dim[0] == 3 &&
              L.ctx.out_shape.dim[1] == 3 && L.ctx.out_shape.dim[2] == 5);
    CU_ASSERT(L.ctx.params[0].shape.ndim == 4 && L.ctx.params[0].shape.dim[0] == 3 &&
              L.ctx.params[0].shape.dim[1] == 2 && L.ctx.params[0].shape.dim[2] == 3 &&
              L.ctx.params[0].shape.dim[3] == 2);
    CU_ASSERT(L.ctx.params[0].fan_in == 12 && L.ctx.params[1].fan_in == 12);
    oc_free(&L);
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("layernorm"), BT_F64) == 0); /* [3, 6] */
    CU_ASSERT(L.ctx.params[0].init == BT_INIT_ONES && L.ctx.params[0].shape.dim[0] == 6);
    CU_ASSERT(L.ctx.params[1].init == BT_INIT_ZEROS && L.ctx.params[1].shape.dim[0] == 6);
    oc_free(&L);
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("embedding"), BT_F64) == 0); /* 5 x 3 on [4] */
    CU_ASSERT(L.ctx.out_shape.ndim == 2 && L.ctx.out_shape.dim[0] == 4 &&
              L.ctx.out_shape.dim[1] == 3);
    CU_ASSERT(L.ctx.params[0].init == BT_INIT_NORMAL && L.ctx.params[0].init_arg == 1.0);
    CU_ASSERT(L.ctx.params[0].shape.dim[0] == 5 && L.ctx.params[0].shape.dim[1] == 3);
    CU_ASSERT_EQUAL(L.ctx.no_grad_mask, 1u);
    oc_free(&L);
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("cross_entropy"), BT_F64) == 0);
    CU_ASSERT_EQUAL(L.ctx.out_shape.ndim, 0);
    CU_ASSERT_EQUAL(L.ctx.no_grad_mask, 2u);
    oc_free(&L);
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("mse"), BT_F64) == 0);
    CU_ASSERT_EQUAL(L.ctx.out_shape.ndim, 0);
    CU_ASSERT_EQUAL(L.ctx.no_grad_mask, 0u);
    oc_free(&L);
    /* reshape with -1, and the per-sample shape's dtype following the input */
    bt_shape s = SH(2, 3, 4);
    bt_dtype d = BT_F32;
    CU_ASSERT_FATAL(oc_setup(&L, "reshape", "shape=-1,2", 1, &s, &d, 1, BT_F32) == BT_OK);
    CU_ASSERT(L.ctx.out_shape.ndim == 2 && L.ctx.out_shape.dim[0] == 12 &&
              L.ctx.out_shape.dim[1] == 2 && L.ctx.out_dtype == BT_F32);
    oc_free(&L);
    d = BT_I32;
    CU_ASSERT_FATAL(oc_setup(&L, "flatten", "", 1, &s, &d, 1, BT_F32) == BT_OK);
    CU_ASSERT(L.ctx.out_shape.ndim == 1 && L.ctx.out_shape.dim[0] == 24);
    CU_ASSERT(L.ctx.out_dtype == BT_I32 && L.ctx.no_grad_mask == 1u);
    oc_free(&L);
    /* maxpool's stride defaults to the kernel: [2, 7, 9] with k3 -> [2, 2, 3] */
    bt_shape p = SH(2, 7, 9);
    d = BT_F64;
    CU_ASSERT_FATAL(oc_setup(&L, "maxpool2d", "kernel=3", 1, &p, &d, 1, BT_F64) == BT_OK);
    CU_ASSERT(L.ctx.out_shape.dim[0] == 2 && L.ctx.out_shape.dim[1] == 2 &&
              L.ctx.out_shape.dim[2] == 3);
    oc_free(&L);
}

/* ---- decoding: one position at a time (cpu_decode) against the forward ------------------- */

/* Every case of an op with a decode kernel (attention with its KV cache, rope, pos_embedding),
 * causal where the op has the choice: each sample decoded alone, position by position from a
 * zeroed cache (decode_cache_bytes), gives the forward's row at every position (f64 within 1e-12,
 * f32 within 1e-5: the decode sums in double where the forward's tiles sum in f32). */
static void check_decode_case(const op_case *c, bt_dtype real)
{
    oc_layer L;
    CU_ASSERT_FATAL(setup_case(&L, c, real) == 0);
    CU_ASSERT_FATAL(oc_forward(&L) == BT_OK);
    const int64_t T = L.in[0].dim[1], w_in = L.in[0].dim[2], w_out = L.out.dim[2];
    const size_t es = bt_dtype_size(real);
    const size_t cache_bytes = L.op->decode_cache_bytes ? L.op->decode_cache_bytes(L.ctx.config) : 0;
    unsigned char *cache = malloc(cache_bytes ? cache_bytes : 1), *row = malloc((size_t)w_out * es);
    CU_ASSERT_FATAL(cache && row);
    const double tol = real == BT_F64 ? 1e-12 : 1e-5;
    double worst = 0;
    for (int64_t n = 0; n < L.batch; n++) {
        memset(cache, 0, cache_bytes ? cache_bytes : 1);
        for (int64_t p = 0; p < T; p++) {
            bt_tensor in = {.data = (char *)L.in[0].data + (size_t)((n * T + p) * w_in) * es,
                            .dtype = real, .ndim = 3, .dim = {1, 1, w_in}};
            bt_tensor out = {.data = row, .dtype = real, .ndim = 3, .dim = {1, 1, w_out}};
            bt_op_call call = {.batch = 1, .n_in = 1, .in = &in, .out = &out,
                               .n_params = L.n_params, .param = L.param, .workspace = L.workspace,
                               .config = L.ctx.config, .threads = 1, .position = p,
                               .cache = cache_bytes ? cache : NULL};
            bt_status st = L.op->cpu_decode(&call);
            if (st != BT_OK) printf("\n  %s decode: %s\n", c->label, bt_last_error());
            CU_ASSERT_FATAL(st == BT_OK);
            for (int64_t e = 0; e < w_out; e++) {
                const double want = oc_get(&L.out, (n * T + p) * w_out + e);
                worst = fmax(worst, fabs(oc_get(&out, e) - want) / fmax(1, fabs(want)));
            }
        }
    }
    if (!(worst <= tol))
        printf("\n  %s [%s]: decode vs forward %.3g\n", c->label, bt_dtype_name(real), worst);
    CU_ASSERT(worst <= tol);
    free(cache);
    free(row);
    oc_free(&L);
}

static void test_decode_matches_forward(void)
{
    int cases = 0;
    for (int k = 0; k < op_cases_count; k++) {
        const op_case *c = &op_cases[k];
        const bt_op_def *op = bt_op_find(c->op);
        if (c->big || !op->cpu_decode || strstr(c->args, "causal=false")) continue;
        CU_ASSERT_FATAL(c->n_in == 1 && c->shape[0].ndim == 2); /* [T, ...] rows */
        check_decode_case(c, BT_F64);
        check_decode_case(c, BT_F32);
        cases++;
    }
    CU_ASSERT(cases >= 9); /* the attention, rope and pos_embedding rows */
    /* a negative position: rope refuses (attention's refusals: test_cuda, alike on both) */
    oc_layer L;
    CU_ASSERT_FATAL(setup_case(&L, op_case_named("rope"), BT_F64) == 0);
    const int64_t w = L.in[0].dim[2];
    bt_tensor in = {.data = L.in[0].data, .dtype = BT_F64, .ndim = 3, .dim = {1, 1, w}};
    bt_tensor out = {.data = L.out.data, .dtype = BT_F64, .ndim = 3, .dim = {1, 1, w}};
    bt_op_call call = {.batch = 1, .n_in = 1, .in = &in, .out = &out, .workspace = L.workspace,
                       .config = L.ctx.config, .threads = 1, .position = -1};
    CU_ASSERT_EQUAL(L.op->cpu_decode(&call), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "rope: position -1 is negative"));
    oc_free(&L);
}

/* ---- 4. f32 against f64; dropout ---------------------------------------------------------- */

static double rel_diff(const bt_tensor *a, const bt_tensor *b, int64_t *at)
{
    double worst = 0;
    for (int64_t e = 0; e < bt_tensor_numel(a); e++) {
        double d = fabs(oc_get(a, e) - oc_get(b, e)) / fmax(1, fabs(oc_get(b, e)));
        if (!(d <= worst)) {
            worst = d;
            *at = e;
        }
    }
    return worst;
}

static void test_f32_matches_f64(void)
{
    for (int k = 0; k < op_cases_count; k++) {
        if (op_cases[k].big) continue;
        oc_layer L64, L32;
        if (setup_case(&L64, &op_cases[k], BT_F64) || setup_case(&L32, &op_cases[k], BT_F32)) {
            CU_FAIL("setup");
            continue;
        }
        oc_copy_values(&L32, &L64); /* f64 values rounded to f32 */
        oc_copy_values(&L64, &L32); /* ... and the same rounded values back in f64 */
        CU_ASSERT(oc_forward(&L64) == BT_OK && oc_backward(&L64) == BT_OK);
        CU_ASSERT(oc_forward(&L32) == BT_OK && oc_backward(&L32) == BT_OK);
        int64_t at = 0;
        double worst = rel_diff(&L32.out, &L64.out, &at);
        for (int i = 0; i < L64.n_in; i++)
            if (L64.in_grad[i].data)
                worst = fmax(worst, rel_diff(&L32.in_grad[i], &L64.in_grad[i], &at));
        for (int j = 0; j < L64.n_params; j++)
            worst = fmax(worst, rel_diff(&L32.param_grad[j], &L64.param_grad[j], &at));
        if (!(worst < 2e-6))
            printf("\n  f32 vs f64 %s: relative difference %g\n", op_cases[k].label, worst);
        CU_ASSERT(worst < 2e-6);
        oc_free(&L64);
        oc_free(&L32);
    }
}

static void test_dropout(void)
{
    bt_shape s = SH(1000);
    bt_dtype d = F;
    const double p = 0.3;
    oc_layer a, b;
    CU_ASSERT_FATAL(oc_setup(&a, "dropout", "p=0.3", 1, &s, &d, 100, BT_F64) == BT_OK);
    CU_ASSERT_FATAL(oc_setup(&b, "dropout", "p=0.3", 1, &s, &d, 100, BT_F64) == BT_OK);
    oc_copy_values(&b, &a);
    const int64_t n = bt_tensor_numel(&a.out);
    /* the same seed gives the same output */
    a.seed = b.seed = 7;
    CU_ASSERT(oc_forward(&a) == BT_OK && oc_forward(&b) == BT_OK);
    CU_ASSERT(memcmp(a.out.data, b.out.data, (size_t)n * sizeof(double)) == 0);
    /* rate close to p (std of the fraction is ~0.0015 here), kept values scaled by 1/(1-p) */
    int64_t zeros = 0, bad = 0;
    for (int64_t e = 0; e < n; e++) {
        double y = oc_get(&a.out, e);
        if (y == 0)
            zeros++;
        else if (fabs(y - oc_get(&a.in[0], e) / (1 - p)) > 1e-15)
            bad++;
    }
    CU_ASSERT(fabs((double)zeros / (double)n - p) < 0.01);
    CU_ASSERT_EQUAL(bad, 0);
    /* the backward passes the gradient where kept, scaled, and nothing where dropped */
    CU_ASSERT(oc_backward(&a) == BT_OK);
    for (int64_t e = 0; e < n; e++) {
        double g = oc_get(&a.in_grad[0], e), dy = oc_get(&a.out_grad, e);
        if (oc_get(&a.out, e) == 0 ? g != 0 : fabs(g - dy / (1 - p)) > 1e-15) bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* a neighbouring seed gives a different mask, not a shifted copy of this one */
    b.seed = 8;
    CU_ASSERT(oc_forward(&b) == BT_OK);
    int64_t differ = 0, shifted_same = 0;
    for (int64_t e = 0; e < n; e++) {
        differ += (oc_get(&a.out, e) == 0) != (oc_get(&b.out, e) == 0);
        if (e + 1 < n) shifted_same += (oc_get(&a.out, e + 1) == 0) == (oc_get(&b.out, e) == 0);
    }
    /* independent masks disagree on 2 p (1 - p) = 42% of the elements */
    CU_ASSERT(fabs((double)differ / (double)n - 2 * p * (1 - p)) < 0.02);
    CU_ASSERT((double)shifted_same / (double)(n - 1) < 0.65);
    /* inference: the identity */
    a.training = 0;
    CU_ASSERT(oc_forward(&a) == BT_OK);
    CU_ASSERT(memcmp(a.out.data, a.in[0].data, (size_t)n * sizeof(double)) == 0);
    oc_free(&a);
    oc_free(&b);
    /* p = 0 in training is the identity too */
    CU_ASSERT_FATAL(oc_setup(&a, "dropout", "p=0", 1, &s, &d, 2, BT_F64) == BT_OK);
    CU_ASSERT(oc_forward(&a) == BT_OK);
    CU_ASSERT(memcmp(a.out.data, a.in[0].data, 2000 * sizeof(double)) == 0);
    oc_free(&a);
}

/* A larger conv and linear in f32 against the f64 naive references: the GEMM path (OpenBLAS or
 * the builtin fallback) with sizes past any blocking threshold. */
static void test_larger_gemm_paths(void)
{
    const op_case big[] = {
        {"conv2d big", "conv2d", "out=16 kernel=3 padding=1", 1, {SH(8, 12, 12)}, {F}, 3, 0, 1},
        {"linear big", "linear", "out=70", 1, {SH(5, 130)}, {F}, 4, 0, 1},
    };
    void (*ref[])(const oc_layer *, double *) = {ref_conv2d, ref_linear};
    for (int k = 0; k < 2; k++) {
        oc_layer L;
        CU_ASSERT_FATAL(setup_case(&L, &big[k], BT_F32) == 0);
        CU_ASSERT_FATAL(oc_forward(&L) == BT_OK);
        const int64_t n = bt_tensor_numel(&L.out);
        double *want = malloc((size_t)n * sizeof *want);
        CU_ASSERT_FATAL(want != NULL);
        ref[k](&L, want);
        double worst = 0;
        for (int64_t e = 0; e < n; e++)
            worst = fmax(worst, fabs(oc_get(&L.out, e) - want[e]) / fmax(1, fabs(want[e])));
        if (!(worst < 1e-5)) printf("\n  %s: relative difference %g\n", big[k].label, worst);
        CU_ASSERT(worst < 1e-5);
        free(want);
        oc_free(&L);
    }
}

/* ---- 5. conv2d chunks; maxpool2d's argmax -------------------------------------------------- */

/* conv2d's gradients of sum(y * out_grad) by their definition, the loops of ref_conv2d: dx
 * (B, C, H, W), dw (out, C, kh, kw) and db (out), each zeroed first. */
static void ref_conv2d_grads(const oc_layer *L, double *dx, double *dw, double *db)
{
    const bt_tensor *x = &L->in[0], *w = &L->param[0];
    const int64_t B = x->dim[0], C = x->dim[1], H = x->dim[2], W = x->dim[3];
    const int64_t O = w->dim[0], KH = w->dim[2], KW = w->dim[3];
    const int64_t HO = L->out.dim[2], WO = L->out.dim[3];
    int64_t s[2], p[2];
    pair_arg(L, "stride", 1, 1, s);
    pair_arg(L, "padding", 0, 0, p);
    memset(dx, 0, (size_t)(B * C * H * W) * sizeof *dx);
    memset(dw, 0, (size_t)(O * C * KH * KW) * sizeof *dw);
    memset(db, 0, (size_t)O * sizeof *db);
    for (int64_t n = 0; n < B; n++)
        for (int64_t o = 0; o < O; o++)
            for (int64_t oh = 0; oh < HO; oh++)
                for (int64_t ow = 0; ow < WO; ow++) {
                    const double g = oc_get(&L->out_grad, ((n * O + o) * HO + oh) * WO + ow);
                    db[o] += g;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < KH; i++)
                            for (int64_t j = 0; j < KW; j++) {
                                int64_t ih = oh * s[0] - p[0] + i, iw = ow * s[1] - p[1] + j;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                                const int64_t xi = ((n * C + c) * H + ih) * W + iw;
                                const int64_t wi = ((o * C + c) * KH + i) * KW + j;
                                dx[xi] += g * par_at(L, 0, wi);
                                dw[wi] += g * in_at(L, 0, xi);
                            }
                }
}

/* Largest |got - g0 - want| / max(1, |want|) over the n elements of t (got), g0 (NULL: zeros)
 * and want. */
static double added_diff(const bt_tensor *t, const double *g0, const double *want, int64_t n)
{
    double worst = 0;
    for (int64_t e = 0; e < n; e++) {
        const double added = oc_get(t, e) - (g0 ? g0[e] : 0);
        worst = fmax(worst, fabs(added - want[e]) / fmax(1, fabs(want[e])));
    }
    return worst;
}

/* conv2d processes a micro-batch in chunks of samples sized to a workspace budget. Batches that
 * end mid-chunk, on layers whose declared workspace cannot hold the whole batch, must give the
 * forward and the (adding) backward of the definition, in f64 and f32, on the flat unit-stride
 * path and on the row-by-row one. */
static void test_conv2d_chunks(void)
{
    const op_case big[] = {
        {"conv2d k3 p1 across chunks", "conv2d", "out=3 kernel=3 padding=1", 1, {SH(2, 24, 40)},
         {F}, 5, 0, 0},
        {"conv2d k(3,2) s(2,1) p(1,0) across chunks", "conv2d",
         "out=2 kernel=3,2 stride=2,1 padding=1,0", 1, {SH(1, 150, 60)}, {F}, 3, 0, 0},
    };
    const bt_dtype reals[] = {BT_F64, BT_F32};
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 2; r++) {
            oc_layer L;
            CU_ASSERT_FATAL(setup_case(&L, &big[k], reals[r]) == 0);
            const int64_t ckk = L.param[0].dim[1] * L.param[0].dim[2] * L.param[0].dim[3];
            const int64_t out = L.out.dim[1], howo = L.out.dim[2] * L.out.dim[3];
            /* too small for the column matrices of the whole batch: the kernels must chunk */
            CU_ASSERT_EQUAL(L.ctx.ws_per_sample, 0);
            CU_ASSERT(L.ctx.ws_fixed < (size_t)(L.batch * (ckk + out) * howo) * sizeof(double));
            const int64_t nx = bt_tensor_numel(&L.in[0]), nw = bt_tensor_numel(&L.param[0]);
            const int64_t ny = bt_tensor_numel(&L.out);
            double *y = malloc((size_t)ny * sizeof *y), *dx = malloc((size_t)nx * sizeof *dx);
            double *dw = malloc((size_t)nw * sizeof *dw), *db = malloc((size_t)out * sizeof *db);
            double *g0x = malloc((size_t)nx * sizeof *g0x), *g0w = malloc((size_t)nw * sizeof *g0w);
            double *g0b = malloc((size_t)out * sizeof *g0b);
            CU_ASSERT_FATAL(y && dx && dw && db && g0x && g0w && g0b);
            oc_fill(&L, &L.in_grad[0], -1, 1);
            oc_fill(&L, &L.param_grad[0], -1, 1);
            oc_fill(&L, &L.param_grad[1], -1, 1);
            for (int64_t e = 0; e < nx; e++) g0x[e] = oc_get(&L.in_grad[0], e);
            for (int64_t e = 0; e < nw; e++) g0w[e] = oc_get(&L.param_grad[0], e);
            for (int64_t e = 0; e < out; e++) g0b[e] = oc_get(&L.param_grad[1], e);
            CU_ASSERT_FATAL(oc_forward(&L) == BT_OK && oc_backward(&L) == BT_OK);
            ref_conv2d(&L, y);
            ref_conv2d_grads(&L, dx, dw, db);
            const double fwd = added_diff(&L.out, NULL, y, ny);
            const double bwd = fmax(added_diff(&L.in_grad[0], g0x, dx, nx),
                                    fmax(added_diff(&L.param_grad[0], g0w, dw, nw),
                                         added_diff(&L.param_grad[1], g0b, db, out)));
            /* dw and db sum 10^4 products: f32 rounding reaches ~1e-5 of values near 100 */
            const double tol = reals[r] == BT_F64 ? 1e-12 : 1e-4;
            if (!(fwd < tol && bwd < tol))
                printf("\n  %s (%s): forward differs by %g, backward by %g\n", big[k].label,
                       bt_dtype_name(reals[r]), fwd, bwd);
            CU_ASSERT(fwd < tol && bwd < tol);
            free(y), free(dx), free(dw), free(db), free(g0x), free(g0w), free(g0b);
            oc_free(&L);
        }
}

/* maxpool2d's output and the element its backward routes the gradient to: the first of tied
 * maxima, and once a window holds a NaN, its last NaN (a larger value after it does not win);
 * for 2x2 windows (their own path) and 3x3 ones. */
static void test_maxpool2d_argmax(void)
{
    static const struct {
        const char *args;
        bt_shape shape;
        double x[18];
        int64_t n_out;
        double y[3];
        int64_t to[3]; /* the input element each output's gradient goes to */
    } windows[] = {
        /* windows {1, 3, 3, 0}, {NaN, 2, 5, NaN}, {-inf x 4} */
        {"kernel=2", SH(1, 2, 6),
         {1, 3, NAN, 2, -INFINITY, -INFINITY, 3, 0, 5, NAN, -INFINITY, -INFINITY},
         3, {3, NAN, -INFINITY}, {1, 9, 4}},
        /* windows {1, 4, 2, 4, 0, 4, -1, 4, 3}, {NaN, 9, 1, 2, NaN, 8, 9, 7, 1} */
        {"kernel=3", SH(1, 3, 6),
         {1, 4, 2, NAN, 9, 1, 4, 0, 4, 2, NAN, 8, -1, 4, 3, 9, 7, 1},
         2, {4, NAN}, {1, 10}},
    };
    const bt_dtype reals[] = {BT_F64, BT_F32};
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < 2; r++) {
            oc_layer L;
            bt_dtype d = F;
            CU_ASSERT_FATAL(oc_setup(&L, "maxpool2d", windows[k].args, 1, &windows[k].shape, &d, 1,
                                     reals[r]) == BT_OK);
            const int64_t n = bt_tensor_numel(&L.in[0]);
            for (int64_t e = 0; e < n; e++) oc_set(&L.in[0], e, windows[k].x[e]);
            CU_ASSERT_FATAL(bt_tensor_numel(&L.out) == windows[k].n_out);
            for (int64_t o = 0; o < windows[k].n_out; o++) oc_set(&L.out_grad, o, 10 * (o + 1));
            CU_ASSERT_FATAL(oc_forward(&L) == BT_OK && oc_backward(&L) == BT_OK);
            for (int64_t o = 0; o < windows[k].n_out; o++) {
                const double got = oc_get(&L.out, o), want = windows[k].y[o];
                CU_ASSERT(got == want || (isnan(got) && isnan(want)));
            }
            for (int64_t e = 0; e < n; e++) {
                double want = 0;
                for (int64_t o = 0; o < windows[k].n_out; o++)
                    if (windows[k].to[o] == e) want = 10 * (o + 1);
                if (oc_get(&L.in_grad[0], e) != want)
                    printf("\n  maxpool2d %s (%s): input gradient %lld is %g, expected %g\n",
                           windows[k].args, bt_dtype_name(reals[r]), (long long)e,
                           oc_get(&L.in_grad[0], e), want);
                CU_ASSERT(oc_get(&L.in_grad[0], e) == want);
            }
            oc_free(&L);
        }
}

/* maxpool2d's 2x2 stride-2 windows, the path with its own rows (ops/pool_tmpl.h) and, in f32 on
 * an AVX-512 CPU, 16 windows a vector (ops/pool.c): every output and the element its gradient goes
 * to against a plain scan, on row widths across the vector's edges (odd ones leave a column
 * unread), with values drawn from a few, so ties are common, among them -0, +0, infinities of
 * both signs (a NaN sum without a NaN) and NaN. The input gradient starts from values of its own
 * (-0 among them; the backward adds): each chosen element gains its window's gradient, every
 * other element keeps its bits. */
static void test_maxpool2d_2x2_rows(void)
{
    static const double pick[] = {1, 2, 2, -1, 0, -0.0, 3, 3, INFINITY, -INFINITY, NAN};
    const bt_dtype reals[] = {BT_F32, BT_F64};
    uint32_t seed = 12345;
    int bad = 0;
    for (int64_t w = 2; w <= 69 && !bad; w += (w < 36 ? 1 : 11))
        for (int r = 0; r < 2; r++) {
            const int64_t c = 2, h = 5, ho = h / 2, wo = w / 2;
            oc_layer L;
            bt_dtype d = F;
            const bt_shape shape = SH(c, h, w);
            CU_ASSERT_FATAL(oc_setup(&L, "maxpool2d", "kernel=2", 1, &shape, &d, 3, reals[r]) == BT_OK);
            const int64_t n = bt_tensor_numel(&L.in[0]), n_out = bt_tensor_numel(&L.out);
            CU_ASSERT_FATAL(n_out == L.batch * c * ho * wo);
            for (int64_t e = 0; e < n; e++) {
                seed = seed * 1664525u + 1013904223u;
                /* NaN and infinities in about 1 of 8 elements, so most windows are finite */
                const unsigned k = (seed >> 8) % 64;
                oc_set(&L.in[0], e, pick[k < 56 ? k % 8 : 8 + k % 3]);
            }
            for (int64_t o = 0; o < n_out; o++) oc_set(&L.out_grad, o, (double)(o + 1));
            double *dx0 = malloc(sizeof(double) * (size_t)n);
            for (int64_t e = 0; e < n; e++) oc_set(&L.in_grad[0], e, e % 3 ? 1000.0 * (double)e : -0.0);
            for (int64_t e = 0; e < n; e++) dx0[e] = oc_get(&L.in_grad[0], e);
            CU_ASSERT_FATAL(oc_forward(&L) == BT_OK && oc_backward(&L) == BT_OK);
            int64_t touched = 0;
            for (int64_t pl = 0; pl < L.batch * c && !bad; pl++)
                for (int64_t oh = 0; oh < ho; oh++)
                    for (int64_t ow = 0; ow < wo; ow++) {
                        const int64_t o = (pl * ho + oh) * wo + ow;
                        double best = -INFINITY;
                        int64_t at = pl * h * w + 2 * oh * w + 2 * ow;
                        for (int64_t i = 0; i < 4; i++) {
                            const int64_t e = pl * h * w + (2 * oh + i / 2) * w + 2 * ow + i % 2;
                            const double v = oc_get(&L.in[0], e);
                            if (v > best || v != v) best = v, at = e;
                        }
                        const double got = oc_get(&L.out, o);
                        const int same = got == best ? signbit(got) == signbit(best) : isnan(got) && isnan(best);
                        dx0[at] += (double)(o + 1);
                        touched++;
                        if (!same || oc_get(&L.in_grad[0], at) != dx0[at]) {
                            printf("\n  maxpool2d 2x2 W=%lld (%s): output %lld is %g (gradient to %lld: %g), "
                                   "expected %g from element %lld\n",
                                   (long long)w, bt_dtype_name(reals[r]), (long long)o, got, (long long)at,
                                   oc_get(&L.in_grad[0], at), best, (long long)at);
                            bad = 1;
                            break;
                        }
                    }
            /* and nothing else: every element's bits (-0 stays -0) */
            for (int64_t e = 0; e < n && !bad; e++) {
                const double g = oc_get(&L.in_grad[0], e);
                if (g != dx0[e] || signbit(g) != signbit(dx0[e])) {
                    printf("\n  maxpool2d 2x2 W=%lld (%s): input gradient %lld is %g, expected %g\n",
                           (long long)w, bt_dtype_name(reals[r]), (long long)e, g, dx0[e]);
                    bad = 1;
                }
            }
            CU_ASSERT(!bad && touched == n_out);
            free(dx0);
            oc_free(&L);
        }
}

/* The kernels whose own loops run on the call's threads (BT_PARALLEL_FOR: pools over planes, a
 * fused relu's backward mask in blocks) give, on 2 and 3 threads, the 1-thread results bit for
 * bit: sizes that the blocks do not divide evenly, f32 and f64. linear's fused relu stands for the
 * mask (conv2d shares it, but conv2d itself is not thread-invariant: under BATON_CPU_CONV=auto
 * each thread count times and picks its own path, and oneDNN's convolutions may split their
 * sums by thread; CI saw 2 threads differ from 1 there). */
static void test_threads_same_bits(void)
{
    static const struct {
        const char *op, *args;
        bt_shape shape;
        int64_t batch;
    } cases[] = {
        {"maxpool2d", "kernel=2", SH(3, 9, 10), 5},
        {"maxpool2d", "kernel=3 stride=2 padding=1", SH(2, 11, 7), 3},
        {"avgpool2d", "kernel=3 stride=2 padding=1", SH(2, 11, 7), 3},
        {"linear", "out=37 act=relu", SH(29), 7},
    };
    const bt_dtype reals[] = {BT_F32, BT_F64};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int r = 0; r < 2; r++)
            for (int threads = 2; threads <= 3; threads++) {
                oc_layer one, many;
                bt_dtype d = F;
                CU_ASSERT_FATAL(oc_setup(&one, cases[k].op, cases[k].args, 1, &cases[k].shape, &d,
                                         cases[k].batch, reals[r]) == BT_OK);
                CU_ASSERT_FATAL(oc_setup(&many, cases[k].op, cases[k].args, 1, &cases[k].shape, &d,
                                         cases[k].batch, reals[r]) == BT_OK);
                oc_copy_values(&many, &one);
                const size_t esz = bt_dtype_size(reals[r]);
                memcpy(many.out_grad.data, one.out_grad.data, (size_t)bt_tensor_numel(&one.out_grad) * esz);
                many.threads = threads;
                CU_ASSERT_FATAL(oc_forward(&one) == BT_OK && oc_backward(&one) == BT_OK);
                CU_ASSERT_FATAL(oc_forward(&many) == BT_OK && oc_backward(&many) == BT_OK);
                int same = !memcmp(one.out.data, many.out.data, (size_t)bt_tensor_numel(&one.out) * esz) &&
                           !memcmp(one.in_grad[0].data, many.in_grad[0].data,
                                   (size_t)bt_tensor_numel(&one.in_grad[0]) * esz);
                for (int j = 0; j < one.n_params; j++)
                    same &= !memcmp(one.param_grad[j].data, many.param_grad[j].data,
                                    (size_t)bt_tensor_numel(&one.param_grad[j]) * esz);
                if (!same)
                    printf("\n  %s %s (%s) on %d threads differs from 1 thread\n", cases[k].op,
                           cases[k].args, bt_dtype_name(reals[r]), threads);
                CU_ASSERT(same);
                oc_free(&one);
                oc_free(&many);
            }
}

int main(void)
{
    static const bt_test_case tests[] = {
        {"builtin table", test_builtin_table},
        {"backward = finite differences (f64)", test_gradients},
        {"partial backwards", test_gradients_partial},
        {"gradient check can fail", test_gradcheck_can_fail},
        {"forward = naive reference", test_forward_reference},
        {"forward = hand-computed values", test_forward_hand_values},
        {"shape-rule errors", test_shape_errors},
        {"run-time errors", test_runtime_errors},
        {"an error message quoting the current one", test_error_quotes_itself},
        {"declarations", test_declarations},
        {"f32 matches f64", test_f32_matches_f64},
        {"decode one position at a time = forward", test_decode_matches_forward},
        {"dropout", test_dropout},
        {"larger GEMM paths", test_larger_gemm_paths},
        {"conv2d across chunks", test_conv2d_chunks},
        {"maxpool2d argmax: ties, NaN", test_maxpool2d_argmax},
        {"maxpool2d 2x2 rows: every width", test_maxpool2d_2x2_rows},
        {"threads: the same bits as one thread", test_threads_same_bits},
        {NULL, NULL},
    };
    return bt_test_main("ops", tests);
}
