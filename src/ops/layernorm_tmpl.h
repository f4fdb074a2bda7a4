/* ops/layernorm_tmpl.h: layernorm kernels for one float type (see ops/real.h). saved holds
 * (mean, rstd) per row as doubles; statistics accumulate in double. The per-element row loops
 * take restrict parameters so they vectorise (see ops/vec_tmpl.h). */

#include "ops/vec_tmpl.h"

/* y = (x - m) s w + b over one row */
static inline void R(ln_apply)(const REAL *restrict x, REAL m, REAL s, const REAL *restrict w,
                               const REAL *restrict b, REAL *restrict y, int64_t d)
{
    BT_OPS_VLOOP(j, d, y[j] = (x[j] - m) * s * w[j] + b[j];);
}

/* dw += dy (x - m) s over one row */
static inline void R(ln_acc_dw)(const REAL *restrict x, REAL m, REAL s, const REAL *restrict dy,
                                REAL *restrict dw, int64_t d)
{
    BT_OPS_VLOOP(j, d, dw[j] += dy[j] * (x[j] - m) * s;);
}

/* dx += s (dy w - mg - xhat mgx), xhat = (x - m) s, over one row */
static inline void R(ln_acc_dx)(const REAL *restrict x, REAL m, REAL s, const REAL *restrict dy,
                                const REAL *restrict w, REAL mg, REAL mgx, REAL *restrict dx,
                                int64_t d)
{
    BT_OPS_VLOOP(j, d, dx[j] += s * (dy[j] * w[j] - mg - (x[j] - m) * s * mgx););
}

/* sum(g) and sum(g xhat) over one row, g = dy w, xhat = (x - m) s; as vec_sum. */
static inline void R(ln_grad_sums)(const REAL *restrict x, REAL m, REAL s, const REAL *restrict dy,
                                   const REAL *restrict w, int64_t d, double *sum_g,
                                   double *sum_gx)
{
    double ag[4] = {0}, agx[4] = {0};
    int64_t j = 0;
    for (; j + 4 <= d; j += 4)
        for (int k = 0; k < 4; k++) {
            const double g = (double)dy[j + k] * w[j + k];
            ag[k] += g;
            agx[k] += g * ((double)(x[j + k] - m) * s);
        }
    double sg = 0, sgx = 0;
    for (; j < d; j++) {
        const double g = (double)dy[j] * w[j];
        sg += g;
        sgx += g * ((double)(x[j] - m) * s);
    }
    *sum_g = sg + (ag[0] + ag[1]) + (ag[2] + ag[3]);
    *sum_gx = sgx + (agx[0] + agx[1]) + (agx[2] + agx[3]);
}

static bt_status R(layernorm_forward)(const bt_op_call *call)
{
    const bt_layernorm_config *cfg = call->config;
    const int64_t d = cfg->d, rows = bt_tensor_numel(call->out) / d;
    const REAL *x = call->in[0].data;    /* (rows, d) */
    const REAL *w = call->param[0].data; /* (d) */
    const REAL *b = call->param[1].data; /* (d) */
    REAL *y = call->out->data;           /* (rows, d) */
    double *stats = call->saved;         /* (rows, 2); may be NULL */
    for (int64_t r = 0; r < rows; r++) {
        const REAL *xr = x + r * d;
        const double mean = R(vec_sum)(xr, d) / (double)d;
        const double rstd = 1.0 / sqrt(R(vec_sumsq_centered)(xr, mean, d) / (double)d + cfg->eps);
        R(ln_apply)(xr, (REAL)mean, (REAL)rstd, w, b, y + r * d, d);
        if (stats) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = rstd;
        }
    }
    return BT_OK;
}

static bt_status R(layernorm_backward)(const bt_op_call *call)
{
    const bt_layernorm_config *cfg = call->config;
    const int64_t d = cfg->d, rows = bt_tensor_numel(call->out_grad) / d;
    const REAL *x = call->in[0].data;      /* (rows, d) */
    const REAL *w = call->param[0].data;   /* (d) */
    const REAL *dy = call->out_grad->data; /* (rows, d) */
    const double *stats = call->saved;     /* (rows, 2) */
    REAL *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    REAL *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                   ? call->param_grad[0].data : NULL;
    REAL *db = call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                   ? call->param_grad[1].data : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const REAL *xr = x + r * d, *dyr = dy + r * d;
        const REAL m = (REAL)stats[2 * r], s = (REAL)stats[2 * r + 1];
        if (dw) R(ln_acc_dw)(xr, m, s, dyr, dw, d);
        if (db) R(vec_acc)(dyr, db, d);
        if (!dx) continue;
        /* g = dy w; dx = rstd (g - mean(g) - xhat mean(g xhat)) */
        double sum_g, sum_gx;
        R(ln_grad_sums)(xr, m, s, dyr, w, d, &sum_g, &sum_gx);
        R(ln_acc_dx)(xr, m, s, dyr, w, (REAL)(sum_g / (double)d), (REAL)(sum_gx / (double)d),
                     dx + r * d, d);
    }
    return BT_OK;
}

/* y = x s w over one row */
static inline void R(rms_apply)(const REAL *restrict x, REAL s, const REAL *restrict w,
                                REAL *restrict y, int64_t d)
{
    BT_OPS_VLOOP(j, d, y[j] = x[j] * s * w[j];);
}

static bt_status R(rmsnorm_forward)(const bt_op_call *call)
{
    const bt_layernorm_config *cfg = call->config;
    const int64_t d = cfg->d, rows = bt_tensor_numel(call->out) / d;
    const REAL *x = call->in[0].data;    /* (rows, d) */
    const REAL *w = call->param[0].data; /* (d) */
    REAL *y = call->out->data;           /* (rows, d) */
    double *rstd_saved = call->saved;    /* (rows); may be NULL */
    for (int64_t r = 0; r < rows; r++) {
        const REAL *xr = x + r * d;
        const double rstd = 1.0 / sqrt(R(vec_sumsq_centered)(xr, 0.0, d) / (double)d + cfg->eps);
        R(rms_apply)(xr, (REAL)rstd, w, y + r * d, d);
        if (rstd_saved) rstd_saved[r] = rstd;
    }
    return BT_OK;
}

/* dx = s (g - xhat mean(g xhat)), g = dy w, xhat = x s; dw += dy xhat */
static bt_status R(rmsnorm_backward)(const bt_op_call *call)
{
    const bt_layernorm_config *cfg = call->config;
    const int64_t d = cfg->d, rows = bt_tensor_numel(call->out_grad) / d;
    const REAL *x = call->in[0].data;      /* (rows, d) */
    const REAL *w = call->param[0].data;   /* (d) */
    const REAL *dy = call->out_grad->data; /* (rows, d) */
    const double *rstd = call->saved;      /* (rows) */
    REAL *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    REAL *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                   ? call->param_grad[0].data : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const REAL *xr = x + r * d, *dyr = dy + r * d;
        const REAL s = (REAL)rstd[r];
        if (dw) R(ln_acc_dw)(xr, 0, s, dyr, dw, d);
        if (!dx) continue;
        double sum_g, sum_gx;
        R(ln_grad_sums)(xr, 0, s, dyr, w, d, &sum_g, &sum_gx);
        R(ln_acc_dx)(xr, 0, s, dyr, w, 0, (REAL)(sum_gx / (double)d), dx + r * d, d);
    }
    return BT_OK;
}
