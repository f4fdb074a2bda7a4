/* ops/activation_tmpl.h: relu, gelu, tanh, sigmoid, silu and swiglu kernels for one float type
 * (see ops/real.h). Forward: y = f(x); backward: dx += dy * f'(x), with f' computed from x.
 *
 * gelu's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), is computed as
 * x / (1 + exp(-2u)) (1 + tanh(u) = 2 sigmoid(2u), an identity): no cancellation where tanh(u)
 * is near -1, and it vectorises through EXP_V. Its derivative: s + x s (1 - s) 2 u'(x), s =
 * sigmoid(2u), u' = sqrt(2/pi) (1 + 3 0.044715 x^2). */

#ifndef BT_ACTIVATION_CONSTANTS
#define BT_ACTIVATION_CONSTANTS
#define BT_SQRT1_2 0.70710678118654752440    /* 1/sqrt(2) */
#define BT_INV_SQRT_2PI 0.39894228040143267794 /* 1/sqrt(2 pi) */
#define BT_SQRT_2_PI 0.79788456080286535588   /* sqrt(2/pi) */
#define BT_GELU_CUBIC 0.044715               /* the tanh form's cubic coefficient */
#endif

/* The operands of one activation call: n elements of x, y (forward) or dy, dx (backward). */
#define ACT_FORWARD_SETUP                                \
    const int64_t n = bt_tensor_numel(call->out);        \
    const REAL *restrict x = call->in[0].data;           \
    REAL *restrict y = call->out->data
#define ACT_BACKWARD_SETUP                               \
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;  \
    const int64_t n = bt_tensor_numel(call->out_grad);   \
    const REAL *restrict x = call->in[0].data;           \
    const REAL *restrict dy = call->out_grad->data;      \
    REAL *restrict dx = call->in_grad[0].data

/* relu's loops take restrict parameters so they vectorise (see ops/vec_tmpl.h). */
static inline void R(relu_loop)(const REAL *restrict x, REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = x[i] > 0 ? x[i] : 0;);
}

static inline void R(relu_grad_loop)(const REAL *restrict x, const REAL *restrict dy,
                                     REAL *restrict dx, int64_t n)
{
    BT_OPS_VLOOP(i, n, {
        const REAL g = dy[i]; /* loaded unconditionally so the select if-converts */
        dx[i] += x[i] > 0 ? g : 0;
    });
}

static bt_status R(relu_forward)(const bt_op_call *call)
{
    R(relu_loop)(call->in[0].data, call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status R(relu_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    R(relu_grad_loop)(call->in[0].data, call->out_grad->data, call->in_grad[0].data,
                      bt_tensor_numel(call->out_grad));
    return BT_OK;
}

/* gelu's loops use ERF_V and EXP_V (real.h), which vectorise in f32, in AVX-512 where the CPU
 * has it (BT_OPS_VCLONES, ops/fastmath.h). */
BT_OPS_VCLONES static void R(gelu_loop)(const REAL *restrict x, REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = (REAL)0.5 * x[i] * (1 + ERF_V(x[i] * (REAL)BT_SQRT1_2)););
}

BT_OPS_VCLONES static void R(gelu_grad_loop)(const REAL *restrict x, const REAL *restrict dy,
                                             REAL *restrict dx, int64_t n)
{
    BT_OPS_VLOOP(i, n, {
        /* d/dx [x Phi(x)] = Phi(x) + x phi(x) */
        const REAL cdf = (REAL)0.5 * (1 + ERF_V(x[i] * (REAL)BT_SQRT1_2));
        const REAL pdf = (REAL)BT_INV_SQRT_2PI * EXP_V((REAL)-0.5 * x[i] * x[i]);
        dx[i] += dy[i] * (cdf + x[i] * pdf);
    });
}

BT_OPS_VCLONES static void R(gelu_tanh_loop)(const REAL *restrict x, REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, {
        const REAL u2 = (REAL)(2 * BT_SQRT_2_PI) * (x[i] + (REAL)BT_GELU_CUBIC * x[i] * x[i] * x[i]);
        y[i] = x[i] / (1 + EXP_V(-u2));
    });
}

BT_OPS_VCLONES static void R(gelu_tanh_grad_loop)(const REAL *restrict x, const REAL *restrict dy,
                                                  REAL *restrict dx, int64_t n)
{
    BT_OPS_VLOOP(i, n, {
        const REAL x2 = x[i] * x[i];
        const REAL u2 = (REAL)(2 * BT_SQRT_2_PI) * (x[i] + (REAL)BT_GELU_CUBIC * x2 * x[i]);
        const REAL s = 1 / (1 + EXP_V(-u2));
        const REAL du2 = (REAL)(2 * BT_SQRT_2_PI) * (1 + (REAL)(3 * BT_GELU_CUBIC) * x2);
        dx[i] += dy[i] * (s + x[i] * s * (1 - s) * du2);
    });
}

static bt_status R(gelu_forward)(const bt_op_call *call)
{
    const bt_gelu_config *cf = call->config;
    if (cf->approx == BT_OPS_GELU_TANH)
        R(gelu_tanh_loop)(call->in[0].data, call->out->data, bt_tensor_numel(call->out));
    else
        R(gelu_loop)(call->in[0].data, call->out->data, bt_tensor_numel(call->out));
    return BT_OK;
}

static bt_status R(gelu_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_gelu_config *cf = call->config;
    if (cf->approx == BT_OPS_GELU_TANH)
        R(gelu_tanh_grad_loop)(call->in[0].data, call->out_grad->data, call->in_grad[0].data,
                               bt_tensor_numel(call->out_grad));
    else
        R(gelu_grad_loop)(call->in[0].data, call->out_grad->data, call->in_grad[0].data,
                          bt_tensor_numel(call->out_grad));
    return BT_OK;
}

static bt_status R(tanh_forward)(const bt_op_call *call)
{
    ACT_FORWARD_SETUP;
    for (int64_t i = 0; i < n; i++) y[i] = TANH(x[i]);
    return BT_OK;
}

static bt_status R(tanh_backward)(const bt_op_call *call)
{
    ACT_BACKWARD_SETUP;
    for (int64_t i = 0; i < n; i++) {
        REAL t = TANH(x[i]);
        dx[i] += dy[i] * (1 - t * t);
    }
    return BT_OK;
}

static bt_status R(sigmoid_forward)(const bt_op_call *call)
{
    ACT_FORWARD_SETUP;
    for (int64_t i = 0; i < n; i++) y[i] = 1 / (1 + EXP(-x[i]));
    return BT_OK;
}

static bt_status R(sigmoid_backward)(const bt_op_call *call)
{
    ACT_BACKWARD_SETUP;
    for (int64_t i = 0; i < n; i++) {
        REAL s = 1 / (1 + EXP(-x[i]));
        dx[i] += dy[i] * s * (1 - s);
    }
    return BT_OK;
}

static bt_status R(silu_forward)(const bt_op_call *call)
{
    ACT_FORWARD_SETUP;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * (1 / (1 + EXP(-x[i])));
    return BT_OK;
}

static bt_status R(silu_backward)(const bt_op_call *call)
{
    ACT_BACKWARD_SETUP;
    for (int64_t i = 0; i < n; i++) {
        /* d/dx [x s(x)] = s + x s (1 - s) = s (1 + x (1 - s)) */
        REAL s = 1 / (1 + EXP(-x[i]));
        dx[i] += dy[i] * (s * (1 + x[i] * (1 - s)));
    }
    return BT_OK;
}

/* swiglu on rows of [gate | up] (half wide each): the row count comes from the call's tensors, so
 * a decoding call's one row is all it touches. silu(g) = g sigmoid(g) through EXP_V. */
BT_OPS_VCLONES static void R(swiglu_row)(const REAL *restrict g, const REAL *restrict u,
                                         REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = g[i] * (1 / (1 + EXP_V(-g[i]))) * u[i];);
}

/* dg += dy u s (1 + g (1 - s)), du += dy silu(g) */
BT_OPS_VCLONES static void R(swiglu_row_grad)(const REAL *restrict g, const REAL *restrict u,
                                              const REAL *restrict dy, REAL *restrict dg,
                                              REAL *restrict du, int64_t n)
{
    BT_OPS_VLOOP(i, n, {
        const REAL s = 1 / (1 + EXP_V(-g[i]));
        dg[i] += dy[i] * u[i] * (s * (1 + g[i] * (1 - s)));
        du[i] += dy[i] * (g[i] * s);
    });
}

static bt_status R(swiglu_forward)(const bt_op_call *call)
{
    const int64_t half = ((const bt_swiglu_config *)call->config)->half;
    const int64_t rows = bt_tensor_numel(call->out) / half;
    const REAL *x = call->in[0].data;
    REAL *y = call->out->data;
    for (int64_t r = 0; r < rows; r++) R(swiglu_row)(x + 2 * r * half, x + (2 * r + 1) * half, y + r * half, half);
    return BT_OK;
}

static bt_status R(swiglu_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const int64_t half = ((const bt_swiglu_config *)call->config)->half;
    const int64_t rows = bt_tensor_numel(call->out_grad) / half;
    const REAL *x = call->in[0].data, *dy = call->out_grad->data;
    REAL *dx = call->in_grad[0].data;
    for (int64_t r = 0; r < rows; r++)
        R(swiglu_row_grad)(x + 2 * r * half, x + (2 * r + 1) * half, dy + r * half, dx + 2 * r * half,
                           dx + (2 * r + 1) * half, half);
    return BT_OK;
}

#undef ACT_FORWARD_SETUP
#undef ACT_BACKWARD_SETUP
