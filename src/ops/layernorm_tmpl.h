/* ops/layernorm_tmpl.h: layernorm kernels for one float type (see ops/real.h). saved holds
 * (mean, rstd) per row as doubles; statistics accumulate in double. */

static bt_status R(layernorm_forward)(const bt_op_call *call)
{
    const layernorm_config *cfg = call->config;
    const int64_t d = cfg->d, rows = bt_tensor_numel(call->out) / d;
    const REAL *x = call->in[0].data;                    /* (rows, d) */
    const REAL *restrict w = call->param[0].data;        /* (d) */
    const REAL *restrict b = call->param[1].data;        /* (d) */
    REAL *y = call->out->data;                           /* (rows, d) */
    double *stats = call->saved;                         /* (rows, 2); may be NULL */
    for (int64_t r = 0; r < rows; r++) {
        const REAL *restrict xr = x + r * d;
        REAL *restrict yr = y + r * d;
        double sum = 0, sq = 0;
        for (int64_t j = 0; j < d; j++) sum += xr[j];
        const double mean = sum / (double)d;
        for (int64_t j = 0; j < d; j++) {
            double c = xr[j] - mean;
            sq += c * c;
        }
        const double rstd = 1.0 / sqrt(sq / (double)d + cfg->eps);
        const REAL m = (REAL)mean, s = (REAL)rstd;
        for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - m) * s * w[j] + b[j];
        if (stats) {
            stats[2 * r] = mean;
            stats[2 * r + 1] = rstd;
        }
    }
    return BT_OK;
}

static bt_status R(layernorm_backward)(const bt_op_call *call)
{
    const layernorm_config *cfg = call->config;
    const int64_t d = cfg->d, rows = bt_tensor_numel(call->out_grad) / d;
    const REAL *x = call->in[0].data;                    /* (rows, d) */
    const REAL *restrict w = call->param[0].data;        /* (d) */
    const REAL *dy = call->out_grad->data;               /* (rows, d) */
    const double *stats = call->saved;                   /* (rows, 2) */
    REAL *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    REAL *restrict dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                            ? call->param_grad[0].data : NULL;
    REAL *restrict db = call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                            ? call->param_grad[1].data : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const REAL *restrict xr = x + r * d;
        const REAL *restrict dyr = dy + r * d;
        const REAL m = (REAL)stats[2 * r], s = (REAL)stats[2 * r + 1];
        if (dw)
            for (int64_t j = 0; j < d; j++) dw[j] += dyr[j] * (xr[j] - m) * s;
        if (db)
            for (int64_t j = 0; j < d; j++) db[j] += dyr[j];
        if (!dx) continue;
        /* g = dy * w; dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) */
        double sum_g = 0, sum_gx = 0;
        for (int64_t j = 0; j < d; j++) {
            REAL g = dyr[j] * w[j];
            sum_g += g;
            sum_gx += (double)g * ((xr[j] - m) * s);
        }
        const REAL mg = (REAL)(sum_g / (double)d), mgx = (REAL)(sum_gx / (double)d);
        REAL *restrict dxr = dx + r * d;
        for (int64_t j = 0; j < d; j++) {
            REAL xhat = (xr[j] - m) * s;
            dxr[j] += s * (dyr[j] * w[j] - mg - xhat * mgx);
        }
    }
    return BT_OK;
}
