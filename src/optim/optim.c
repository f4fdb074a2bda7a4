/* optim/optim.c: SGD (momentum, Nesterov, L2) and AdamW update kernels in f32 and f64, and the
 * clipping helpers (formulas in optim.h). The per-type kernels are one body instantiated twice by
 * a macro, so the f32 and f64 paths cannot drift apart. */
#include <math.h>

#include "core/error.h"
#include "core/util.h"
#include "optim/optim.h"

bt_status bt_optim_validate(const bt_optimizer_config *cfg)
{
    if (!cfg) return bt_error(BT_ERR_INVALID_ARG, "optimizer: NULL config");
    if (!(cfg->lr >= 0) || !isfinite(cfg->lr))
        return bt_error(BT_ERR_INVALID_ARG, "optimizer: lr %g must be finite and >= 0", cfg->lr);
    if (!(cfg->weight_decay >= 0) || !isfinite(cfg->weight_decay))
        return bt_error(BT_ERR_INVALID_ARG, "optimizer: weight_decay %g must be finite and >= 0",
                        cfg->weight_decay);
    switch (cfg->kind) {
    case BT_OPT_SGD:
        if (!(cfg->momentum >= 0 && cfg->momentum < 1))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer: sgd momentum %g must be in [0, 1)",
                            cfg->momentum);
        if (cfg->nesterov && !(cfg->momentum > 0))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer: sgd nesterov needs momentum > 0");
        return BT_OK;
    case BT_OPT_ADAMW:
        if (!(cfg->beta1 >= 0 && cfg->beta1 < 1))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer: adamw beta1 %g must be in [0, 1)",
                            cfg->beta1);
        if (!(cfg->beta2 >= 0 && cfg->beta2 < 1))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer: adamw beta2 %g must be in [0, 1)",
                            cfg->beta2);
        if (!(cfg->eps > 0) || !isfinite(cfg->eps))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer: adamw eps %g must be finite and > 0",
                            cfg->eps);
        return BT_OK;
    }
    return bt_error(BT_ERR_INVALID_ARG, "optimizer: unknown kind %d", (int)cfg->kind);
}

int bt_optim_state_count(const bt_optimizer_config *cfg)
{
    switch (cfg->kind) {
    case BT_OPT_SGD: return cfg->momentum > 0 ? 1 : 0;
    case BT_OPT_ADAMW: return 2;
    }
    return 0;
}

static bt_status check_args(const bt_optimizer_config *cfg, const bt_optim_step_args *args,
                            int64_t n, const void *w, const void *g, const void *const *state)
{
    if (!cfg || !args || n < 0 || (n > 0 && (!w || !g)))
        return bt_error(BT_ERR_INVALID_ARG, "optimizer step: NULL or negative argument");
    if (cfg->kind != BT_OPT_SGD && cfg->kind != BT_OPT_ADAMW)
        return bt_error(BT_ERR_INVALID_ARG, "optimizer step: unknown kind %d", (int)cfg->kind);
    if (args->t < 1)
        return bt_error(BT_ERR_INVALID_ARG, "optimizer step: t is %lld, must be >= 1",
                        (long long)args->t);
    int k = bt_optim_state_count(cfg);
    for (int i = 0; i < k; i++)
        if (!state || (n > 0 && !state[i]))
            return bt_error(BT_ERR_INVALID_ARG, "optimizer step: state array %d missing", i);
    return BT_OK;
}

/* T is float or double; SQRT the matching square root. The loops are compiled for AVX2 and
 * AVX-512 too (BT_VCLONES; static: GCC 12 exports a non-static function's clone dispatcher
 * whatever its visibility): elementwise IEEE arithmetic, so every copy gives the same bits. */
#define BT_DEFINE_OPTIM_STEP(NAME, T, SQRT)                                                       \
    BT_VCLONES static void NAME##_loop(const bt_optimizer_config *cfg,                           \
                                       const bt_optim_step_args *args, int64_t n, T *w,          \
                                       const T *g, T *const *state)                              \
    {                                                                                            \
        const T lr = (T)args->lr, scale = (T)args->grad_scale, wd = (T)cfg->weight_decay;        \
        if (cfg->kind == BT_OPT_SGD) {                                                           \
            const T mom = (T)cfg->momentum;                                                      \
            if (!(cfg->momentum > 0)) {                                                          \
                for (int64_t i = 0; i < n; i++) w[i] -= lr * (g[i] * scale + wd * w[i]);         \
                return;                                                                          \
            }                                                                                    \
            T *buf = state[0];                                                                   \
            const int first = args->t == 1, nesterov = cfg->nesterov;                            \
            for (int64_t i = 0; i < n; i++) {                                                    \
                T gi = g[i] * scale + wd * w[i];                                                 \
                T b = first ? gi : mom * buf[i] + gi;                                            \
                buf[i] = b;                                                                      \
                w[i] -= lr * (nesterov ? gi + mom * b : b);                                      \
            }                                                                                    \
            return;                                                                              \
        }                                                                                        \
        /* AdamW, in PyTorch's order of operations. */                                           \
        T *m = state[0], *v = state[1];                                                          \
        const double bc1 = 1.0 - pow(cfg->beta1, (double)args->t);                               \
        const double bc2 = 1.0 - pow(cfg->beta2, (double)args->t);                               \
        const T b1 = (T)cfg->beta1, b2 = (T)cfg->beta2;                                          \
        const T one_b1 = (T)(1.0 - cfg->beta1), one_b2 = (T)(1.0 - cfg->beta2);                  \
        const T decay = (T)(1.0 - args->lr * cfg->weight_decay);                                 \
        const T step_size = (T)(args->lr / bc1), bc2_sqrt = (T)sqrt(bc2), eps = (T)cfg->eps;     \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T gi = g[i] * scale;                                                                 \
            T wi = w[i] * decay;                                                                 \
            T mi = b1 * m[i] + one_b1 * gi;                                                      \
            T vi = b2 * v[i] + one_b2 * gi * gi;                                                 \
            m[i] = mi;                                                                           \
            v[i] = vi;                                                                           \
            w[i] = wi - step_size * mi / (SQRT(vi) / bc2_sqrt + eps);                            \
        }                                                                                        \
    }                                                                                            \
    bt_status NAME(const bt_optimizer_config *cfg, const bt_optim_step_args *args, int64_t n,    \
                   T *w, const T *g, T *const *state)                                            \
    {                                                                                            \
        BT_TRY(check_args(cfg, args, n, w, g, (const void *const *)state));                      \
        NAME##_loop(cfg, args, n, w, g, state);                                                  \
        return BT_OK;                                                                            \
    }

BT_DEFINE_OPTIM_STEP(bt_optim_step_f32, float, sqrtf)
BT_DEFINE_OPTIM_STEP(bt_optim_step_f64, double, sqrt)

bt_status bt_optim_check(const bt_optimizer_config *cfg, bt_dtype dtype, const void *w, const void *g,
                         void *const *state, size_t n, int64_t step)
{
    if (dtype != BT_F32 && dtype != BT_F64)
        return bt_error(BT_ERR_UNSUPPORTED, "optimizer: parameters of dtype %s are not supported "
                        "(f32 or f64 master weights)", bt_dtype_name(dtype));
    const bt_optim_step_args args = {0, step, 1};
    return check_args(cfg, &args, (int64_t)n, w, g, (const void *const *)state);
}

bt_status bt_optim_update(const bt_optimizer_config *cfg, bt_dtype dtype, void *w, const void *g,
                          void *const *state, size_t n, double lr, int64_t step,
                          double grad_scale)
{
    bt_optim_step_args args = {lr, step, grad_scale};
    switch (dtype) {
    case BT_F32:
        return bt_optim_step_f32(cfg, &args, (int64_t)n, w, g, (float *const *)state);
    case BT_F64:
        return bt_optim_step_f64(cfg, &args, (int64_t)n, w, g, (double *const *)state);
    default:
        return bt_error(BT_ERR_UNSUPPORTED, "optimizer: parameters of dtype %s are not supported "
                        "(f32 or f64 master weights)", bt_dtype_name(dtype));
    }
}

/* Sum of squares in double over 16 interleaved partial sums, added pairwise at the end: a single
 * running sum is a chain of dependent additions (one element per add's latency, about 3 ms for
 * the 1.9 M gradients of the 784-1024-1024-10 MLP, as long as its AdamW update); 16 independent
 * ones vectorise and leave the loop bound by memory. The grouping is fixed, so the result is the
 * same on every call and every rank (it differs in the last bits from the single chain's). */
#define BT_SUMSQ_LANES 16
BT_VCLONES static double sumsq_f32(const float *x, int64_t n)
{
    double lane[BT_SUMSQ_LANES] = {0};
    int64_t i = 0;
    for (; i + BT_SUMSQ_LANES <= n; i += BT_SUMSQ_LANES)
        for (int k = 0; k < BT_SUMSQ_LANES; k++) lane[k] += (double)x[i + k] * (double)x[i + k];
    for (int k = 0; i < n; i++, k++) lane[k] += (double)x[i] * (double)x[i];
    for (int w = BT_SUMSQ_LANES / 2; w > 0; w /= 2)
        for (int k = 0; k < w; k++) lane[k] += lane[k + w];
    return lane[0];
}

double bt_optim_sumsq_f32(const float *x, int64_t n) { return sumsq_f32(x, n); }

double bt_optim_sumsq_f64(const double *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

double bt_optim_clip_scale(double norm, double max_norm)
{
    if (!(max_norm > 0)) return 1.0;
    double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? c : (isnan(c) ? c : 1.0);
}
