/* ops/conv_tmpl.h: conv2d kernels for one float type (see ops/real.h). The column matrix of one
 * sample is (C kh kw, Ho Wo): row (c, ki, kj), column (oh, ow) holds x[c, oh sh - ph + ki,
 * ow sw - pw + kj], or 0 where that falls in the padding. */

#include "ops/vec_tmpl.h"

/* Unfolds x (C, H, W) into col (C kh kw, Ho Wo). */
static void R(im2col)(const conv_config *cf, const REAL *restrict x, REAL *restrict col)
{
    const int64_t howo = cf->ho * cf->wo;
    for (int64_t c = 0; c < cf->c; c++)
        for (int64_t ki = 0; ki < cf->kh; ki++) {
            int64_t oh_lo, oh_hi;
            bt_ops_valid_range(cf->h, ki, cf->sh, cf->ph, cf->ho, &oh_lo, &oh_hi);
            for (int64_t kj = 0; kj < cf->kw; kj++) {
                int64_t ow_lo, ow_hi;
                bt_ops_valid_range(cf->w, kj, cf->sw, cf->pw, cf->wo, &ow_lo, &ow_hi);
                REAL *crow = col + ((c * cf->kh + ki) * cf->kw + kj) * howo;
                for (int64_t oh = 0; oh < cf->ho; oh++) {
                    REAL *restrict dst = crow + oh * cf->wo;
                    if (oh < oh_lo || oh >= oh_hi) {
                        memset(dst, 0, (size_t)cf->wo * sizeof *dst);
                        continue;
                    }
                    /* x index of (c, ih, iw) with iw = ow sw - pw + kj is base + ow sw */
                    const int64_t ih = oh * cf->sh - cf->ph + ki;
                    const int64_t base = (c * cf->h + ih) * cf->w - cf->pw + kj;
                    for (int64_t ow = 0; ow < ow_lo; ow++) dst[ow] = 0;
                    for (int64_t ow = ow_lo; ow < ow_hi; ow++) dst[ow] = x[base + ow * cf->sw];
                    for (int64_t ow = ow_hi; ow < cf->wo; ow++) dst[ow] = 0;
                }
            }
        }
}

/* Folds col (C kh kw, Ho Wo) back, adding into dx (C, H, W); padding positions are dropped. */
static void R(col2im_add)(const conv_config *cf, const REAL *restrict col, REAL *restrict dx)
{
    const int64_t howo = cf->ho * cf->wo;
    for (int64_t c = 0; c < cf->c; c++)
        for (int64_t ki = 0; ki < cf->kh; ki++) {
            int64_t oh_lo, oh_hi;
            bt_ops_valid_range(cf->h, ki, cf->sh, cf->ph, cf->ho, &oh_lo, &oh_hi);
            for (int64_t kj = 0; kj < cf->kw; kj++) {
                int64_t ow_lo, ow_hi;
                bt_ops_valid_range(cf->w, kj, cf->sw, cf->pw, cf->wo, &ow_lo, &ow_hi);
                const REAL *crow = col + ((c * cf->kh + ki) * cf->kw + kj) * howo;
                for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                    const REAL *restrict src = crow + oh * cf->wo;
                    const int64_t ih = oh * cf->sh - cf->ph + ki;
                    const int64_t base = (c * cf->h + ih) * cf->w - cf->pw + kj;
                    for (int64_t ow = ow_lo; ow < ow_hi; ow++) dx[base + ow * cf->sw] += src[ow];
                }
            }
        }
}

static bt_status R(conv2d_forward)(const bt_op_call *call)
{
    const conv_config *cf = call->config;
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int ckk = (int)(cf->c * cf->kh * cf->kw), o = (int)cf->out, n_out = (int)howo;
    const REAL *x = call->in[0].data;    /* (B, C, H, W) */
    const REAL *w = call->param[0].data; /* (out, C kh kw) */
    const REAL *b = cf->bias ? call->param[1].data : NULL; /* (out) */
    REAL *y = call->out->data;           /* (B, out, Ho, Wo) */
    REAL *col = call->workspace;         /* (C kh kw, Ho Wo) unless pointwise */
    for (int64_t n = 0; n < call->batch; n++) {
        const REAL *xn = x + n * chw;
        REAL *yn = y + n * cf->out * howo;
        if (!cf->pointwise) R(im2col)(cf, xn, col);
        if (b)
            for (int64_t oc = 0; oc < cf->out; oc++) R(vec_fill)(b[oc], yn + oc * howo, howo);
        GEMM(0, 0, o, n_out, ckk, 1, w, ckk, cf->pointwise ? xn : col, n_out, b ? 1 : 0, yn,
             n_out);
    }
    return BT_OK;
}

static bt_status R(conv2d_backward)(const bt_op_call *call)
{
    const conv_config *cf = call->config;
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int ckk = (int)(cf->c * cf->kh * cf->kw), o = (int)cf->out, n_out = (int)howo;
    const REAL *x = call->in[0].data;        /* (B, C, H, W) */
    const REAL *w = call->param[0].data;     /* (out, C kh kw) */
    const REAL *dy = call->out_grad->data;   /* (B, out, Ho, Wo) */
    REAL *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    REAL *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                   ? call->param_grad[0].data : NULL;
    REAL *db = cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                   ? call->param_grad[1].data : NULL;
    REAL *col = call->workspace;                               /* (C kh kw, Ho Wo) */
    REAL *dcol = cf->pointwise ? NULL : col + (size_t)ckk * howo; /* (C kh kw, Ho Wo) */
    for (int64_t n = 0; n < call->batch; n++) {
        const REAL *xn = x + n * chw;
        const REAL *dyn = dy + n * cf->out * howo;
        if (dw) { /* dW (out, C kh kw) += dY_n col^T */
            if (!cf->pointwise) R(im2col)(cf, xn, col);
            GEMM(0, 1, o, ckk, n_out, 1, dyn, n_out, cf->pointwise ? xn : col, n_out, 1, dw, ckk);
        }
        if (db)
            for (int64_t oc = 0; oc < cf->out; oc++) {
                const REAL *restrict dyr = dyn + oc * howo;
                double sum = 0;
                for (int64_t i = 0; i < howo; i++) sum += dyr[i];
                db[oc] += (REAL)sum;
            }
        if (dx) { /* dcol (C kh kw, Ho Wo) = W^T dY_n, folded into dX_n */
            REAL *dxn = dx + n * chw;
            if (cf->pointwise) {
                GEMM(1, 0, ckk, n_out, o, 1, w, ckk, dyn, n_out, 1, dxn, n_out);
            } else {
                GEMM(1, 0, ckk, n_out, o, 1, w, ckk, dyn, n_out, 0, dcol, n_out);
                R(col2im_add)(cf, dcol, dxn);
            }
        }
    }
    return BT_OK;
}
