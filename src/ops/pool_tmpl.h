/* ops/pool_tmpl.h: maxpool2d and avgpool2d kernels for one float type (see ops/real.h). Every
 * (sample, channel) plane is independent; a window's rows and columns are clipped to the input,
 * which is what -inf (max) or zero (avg) padding amounts to. */

static bt_status R(maxpool2d_forward)(const bt_op_call *call)
{
    const pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL *x = call->in[0].data; /* (B C, H, W) */
    REAL *y = call->out->data;        /* (B C, Ho, Wo) */
    int32_t *arg = call->saved;       /* (B C, Ho, Wo); may be NULL */
    for (int64_t pl = 0; pl < planes; pl++) {
        const REAL *xp = x + pl * hw;
        for (int64_t oh = 0; oh < cf->ho; oh++) {
            int64_t h0, h1;
            pool_span(oh, cf->sh, cf->ph, cf->kh, cf->h, &h0, &h1);
            for (int64_t ow = 0; ow < cf->wo; ow++) {
                int64_t w0, w1;
                pool_span(ow, cf->sw, cf->pw, cf->kw, cf->w, &w0, &w1);
                REAL best = -INFINITY;
                int64_t at = h0 * cf->w + w0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) {
                        const REAL v = xp[ih * cf->w + iw];
                        if (v > best || v != v) { /* NaN propagates, as in PyTorch */
                            best = v;
                            at = ih * cf->w + iw;
                        }
                    }
                const int64_t oi = pl * howo + oh * cf->wo + ow;
                y[oi] = best;
                if (arg) arg[oi] = (int32_t)at;
            }
        }
    }
    return BT_OK;
}

static bt_status R(maxpool2d_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL *dy = call->out_grad->data; /* (B C, Ho, Wo) */
    const int32_t *arg = call->saved;      /* (B C, Ho, Wo) */
    REAL *dx = call->in_grad[0].data;      /* (B C, H, W) */
    for (int64_t pl = 0; pl < planes; pl++) {
        REAL *dxp = dx + pl * hw;
        const REAL *dyp = dy + pl * howo;
        const int32_t *ap = arg + pl * howo;
        for (int64_t i = 0; i < howo; i++) dxp[ap[i]] += dyp[i];
    }
    return BT_OK;
}

static bt_status R(avgpool2d_forward)(const bt_op_call *call)
{
    const pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL inv = (REAL)(1.0 / (double)(cf->kh * cf->kw));
    const REAL *x = call->in[0].data; /* (B C, H, W) */
    REAL *y = call->out->data;        /* (B C, Ho, Wo) */
    for (int64_t pl = 0; pl < planes; pl++) {
        const REAL *xp = x + pl * hw;
        for (int64_t oh = 0; oh < cf->ho; oh++) {
            int64_t h0, h1;
            pool_span(oh, cf->sh, cf->ph, cf->kh, cf->h, &h0, &h1);
            for (int64_t ow = 0; ow < cf->wo; ow++) {
                int64_t w0, w1;
                pool_span(ow, cf->sw, cf->pw, cf->kw, cf->w, &w0, &w1);
                REAL sum = 0;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) sum += xp[ih * cf->w + iw];
                y[pl * howo + oh * cf->wo + ow] = sum * inv;
            }
        }
    }
    return BT_OK;
}

static bt_status R(avgpool2d_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL inv = (REAL)(1.0 / (double)(cf->kh * cf->kw));
    const REAL *dy = call->out_grad->data; /* (B C, Ho, Wo) */
    REAL *dx = call->in_grad[0].data;      /* (B C, H, W) */
    for (int64_t pl = 0; pl < planes; pl++) {
        REAL *dxp = dx + pl * hw;
        for (int64_t oh = 0; oh < cf->ho; oh++) {
            int64_t h0, h1;
            pool_span(oh, cf->sh, cf->ph, cf->kh, cf->h, &h0, &h1);
            for (int64_t ow = 0; ow < cf->wo; ow++) {
                int64_t w0, w1;
                pool_span(ow, cf->sw, cf->pw, cf->kw, cf->w, &w0, &w1);
                const REAL g = dy[pl * howo + oh * cf->wo + ow] * inv;
                for (int64_t ih = h0; ih < h1; ih++)
                    for (int64_t iw = w0; iw < w1; iw++) dxp[ih * cf->w + iw] += g;
            }
        }
    }
    return BT_OK;
}
