/* ops/loss_tmpl.h: mse and cross_entropy kernels for one float type (see ops/real.h). Sums
 * accumulate in double. */

static bt_status R(mse_forward)(const bt_op_call *call)
{
    const int64_t per = call->batch ? bt_tensor_numel(&call->in[0]) / call->batch : 0;
    const REAL *p = call->in[0].data; /* (B, per) */
    const REAL *t = call->in[1].data; /* (B, per) */
    REAL *y = call->out->data;        /* (B) */
    for (int64_t n = 0; n < call->batch; n++) {
        const REAL *restrict pn = p + n * per, *restrict tn = t + n * per;
        double sum = 0;
        for (int64_t i = 0; i < per; i++) {
            const double d = (double)pn[i] - tn[i];
            sum += d * d;
        }
        y[n] = (REAL)(sum / (double)per);
    }
    return BT_OK;
}

static bt_status R(mse_backward)(const bt_op_call *call)
{
    const int64_t per = call->batch ? bt_tensor_numel(&call->in[0]) / call->batch : 0;
    const REAL *p = call->in[0].data;      /* (B, per) */
    const REAL *t = call->in[1].data;      /* (B, per) */
    const REAL *dy = call->out_grad->data; /* (B) */
    for (int k = 0; k < 2; k++) {
        if (!BT_OPS_WANTS(&call->in_grad[k])) continue;
        REAL *dx = call->in_grad[k].data;  /* (B, per) */
        const double sign = k == 0 ? 1.0 : -1.0;
        for (int64_t n = 0; n < call->batch; n++) {
            /* d/dp mean((p - t)^2) = 2 (p - t) / per */
            const REAL g = (REAL)(sign * 2.0 * dy[n] / (double)per);
            const REAL *restrict pn = p + n * per, *restrict tn = t + n * per;
            REAL *restrict dxn = dx + n * per;
            for (int64_t i = 0; i < per; i++) dxn[i] += g * (pn[i] - tn[i]);
        }
    }
    return BT_OK;
}

/* log sum exp of one row of c logits, stable. */
static double R(logsumexp)(const REAL *restrict x, int64_t c)
{
    REAL max = x[0];
    for (int64_t j = 1; j < c; j++) max = x[j] > max ? x[j] : max;
    double sum = 0;
    for (int64_t j = 0; j < c; j++) sum += EXP(x[j] - max);
    return (double)max + log(sum);
}

static bt_status R(cross_entropy_forward)(const bt_op_call *call)
{
    const bt_cross_entropy_config *cf = call->config;
    const int64_t c = cf->classes, np = cf->positions;
    const REAL *x = call->in[0].data;        /* (B, positions, C) */
    const int32_t *label = call->in[1].data; /* (B, positions) */
    REAL *y = call->out->data;               /* (B) */
    for (int64_t n = 0; n < call->batch; n++) {
        double sum = 0;
        for (int64_t q = n * np; q < (n + 1) * np; q++) {
            if (label[q] < 0 || label[q] >= c)
                return bt_ops_cross_entropy_bad_label(q, label[q], c);
            const REAL *xr = x + q * c;
            sum += R(logsumexp)(xr, c) - xr[label[q]];
        }
        y[n] = (REAL)(sum / (double)np);
    }
    return BT_OK;
}

static bt_status R(cross_entropy_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_cross_entropy_config *cf = call->config;
    const int64_t c = cf->classes, np = cf->positions;
    const REAL *x = call->in[0].data;        /* (B, positions, C) */
    const int32_t *label = call->in[1].data; /* (B, positions) */
    const REAL *dy = call->out_grad->data;   /* (B) */
    REAL *dx = call->in_grad[0].data;        /* (B, positions, C) */
    for (int64_t n = 0; n < call->batch; n++) {
        const double g = dy[n] / (double)np;
        for (int64_t q = n * np; q < (n + 1) * np; q++) {
            if (label[q] < 0 || label[q] >= c)
                return bt_ops_cross_entropy_bad_label(q, label[q], c);
            const REAL *restrict xr = x + q * c;
            REAL *restrict dxr = dx + q * c;
            /* d/dx_j = g (softmax_j - [j == label]) */
            const REAL lse = (REAL)R(logsumexp)(xr, c), gr = (REAL)g;
            for (int64_t j = 0; j < c; j++) dxr[j] += gr * EXP(xr[j] - lse);
            dxr[label[q]] -= gr;
        }
    }
    return BT_OK;
}
