/* ops/conv_tmpl.h: conv2d kernels for one float type (see ops/real.h). A chunk of S samples is
 * unfolded into one column matrix (C kh kw, S Ho Wo): row (c, ki, kj), column (s, oh, ow) holds
 * x[s, c, oh sh - ph + ki, ow sw - pw + kj], or 0 where that falls in the padding. Each sample
 * fills its own Ho Wo columns, so the rows of one matrix are ld = S Ho Wo apart.
 *
 * Where sh = sw = 1 and Wo = W (a "same"-width unit-stride conv, the common 3x3 padding-1 case),
 * the valid part of a column row is one shifted run of the input plane: row (c, ki, kj) at
 * (oh, ow) is plane[(oh, ow) + (ki - ph, kj - pw)], and consecutive output rows are W apart in
 * both. im2col then copies that run at once and zeroes the positions that wrapped around an edge
 * (the padding columns); col2im zeroes the same positions of the gradient and adds the run back.
 * Otherwise both go output row by output row.
 *
 * A fused relu (cfg->act) is applied to each output plane as it is written; its backward masks
 * the output gradient in place from the output before anything reads it (ops/op_configs.h). */

#include "ops/vec_tmpl.h"

/* y = x + c */
static inline void R(conv_add_scalar)(const REAL *restrict x, REAL c, REAL *restrict y,
                                      int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = x[i] + c;);
}

/* Whether im2col and col2im can treat a column row as one shifted run of the input plane. */
static inline int R(conv_flat)(const bt_conv_config *cf)
{
    return cf->sh == 1 && cf->sw == 1 && cf->wo == cf->w;
}

/* Zeroes the columns [ow0, ow1) of the output rows [oh_lo, oh_hi) of a column row laid out
 * (Ho, Wo), column by column: as short runs per output row GCC would turn them into a memset
 * call each, which costs more than the stores. */
static inline void R(conv_zero_columns)(const bt_conv_config *cf, REAL *restrict row, int64_t ow0,
                                        int64_t ow1, int64_t oh_lo, int64_t oh_hi)
{
    for (int64_t ow = ow0; ow < ow1; ow++)
        for (int64_t oh = oh_lo; oh < oh_hi; oh++) row[oh * cf->wo + ow] = 0;
}

/* Zeroes, in a column row laid out (Ho, Wo), the positions [0, lo) and [hi, Wo) (lo <= hi) of
 * the output rows [oh_lo, oh_hi) and every position of the other output rows. */
static void R(conv_zero_outside)(const bt_conv_config *cf, REAL *restrict row, int64_t oh_lo,
                                 int64_t oh_hi, int64_t lo, int64_t hi)
{
    const int64_t wo = cf->wo;
    if (oh_lo > 0) memset(row, 0, (size_t)(oh_lo * wo) * sizeof *row);
    R(conv_zero_columns)(cf, row, 0, lo, oh_lo, oh_hi);
    R(conv_zero_columns)(cf, row, hi, wo, oh_lo, oh_hi);
    if (oh_hi < cf->ho) memset(row + oh_hi * wo, 0, (size_t)((cf->ho - oh_hi) * wo) * sizeof *row);
}

/* Unfolds one sample x (C, H, W) into its Ho Wo columns of col, whose rows are ld apart. */
static void R(im2col)(const bt_conv_config *cf, const REAL *restrict x, REAL *restrict col,
                      int64_t ld)
{
    const int flat = R(conv_flat)(cf);
    for (int64_t c = 0; c < cf->c; c++)
        for (int64_t ki = 0; ki < cf->kh; ki++) {
            int64_t oh_lo, oh_hi;
            bt_ops_valid_range(cf->h, ki, cf->sh, cf->ph, cf->ho, &oh_lo, &oh_hi);
            for (int64_t kj = 0; kj < cf->kw; kj++) {
                int64_t ow_lo, ow_hi;
                bt_ops_valid_range(cf->w, kj, cf->sw, cf->pw, cf->wo, &ow_lo, &ow_hi);
                REAL *crow = col + ((c * cf->kh + ki) * cf->kw + kj) * ld; /* (Ho, Wo) */
                if (flat) {
                    /* x index of (c, ih, iw) for output (oh, ow) is shift + oh Wo + ow */
                    const int64_t shift = (c * cf->h - cf->ph + ki) * cf->w - cf->pw + kj;
                    const int64_t first = oh_lo * cf->wo + ow_lo;
                    const int64_t end = oh_hi > oh_lo && ow_hi > ow_lo
                                            ? (oh_hi - 1) * cf->wo + ow_hi : first;
                    if (end > first)
                        memcpy(crow + first, x + (shift + first),
                               (size_t)(end - first) * sizeof *crow);
                    R(conv_zero_outside)(cf, crow, oh_lo, oh_hi, ow_lo, ow_hi);
                    continue;
                }
                for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                    REAL *restrict dst = crow + oh * cf->wo;
                    /* x index of (c, ih, iw) with iw = ow sw - pw + kj is base + ow sw */
                    const int64_t ih = oh * cf->sh - cf->ph + ki;
                    const int64_t base = (c * cf->h + ih) * cf->w - cf->pw + kj;
                    if (cf->sw == 1)
                        memcpy(dst + ow_lo, x + (base + ow_lo),
                               (size_t)(ow_hi - ow_lo) * sizeof *dst);
                    else
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++) dst[ow] = x[base + ow * cf->sw];
                }
                R(conv_zero_outside)(cf, crow, oh_lo, oh_hi, ow_lo, ow_hi);
            }
        }
}

/* Folds one sample's Ho Wo columns of col (rows ld apart) back, adding into dx (C, H, W);
 * padding positions are dropped. On the flat path it zeroes those positions in col. */
static void R(col2im_add)(const bt_conv_config *cf, REAL *restrict col, int64_t ld,
                          REAL *restrict dx)
{
    const int flat = R(conv_flat)(cf);
    for (int64_t c = 0; c < cf->c; c++)
        for (int64_t ki = 0; ki < cf->kh; ki++) {
            int64_t oh_lo, oh_hi;
            bt_ops_valid_range(cf->h, ki, cf->sh, cf->ph, cf->ho, &oh_lo, &oh_hi);
            for (int64_t kj = 0; kj < cf->kw; kj++) {
                int64_t ow_lo, ow_hi;
                bt_ops_valid_range(cf->w, kj, cf->sw, cf->pw, cf->wo, &ow_lo, &ow_hi);
                REAL *crow = col + ((c * cf->kh + ki) * cf->kw + kj) * ld; /* (Ho, Wo) */
                if (flat) {
                    const int64_t shift = (c * cf->h - cf->ph + ki) * cf->w - cf->pw + kj;
                    const int64_t first = oh_lo * cf->wo + ow_lo;
                    const int64_t end = oh_hi > oh_lo && ow_hi > ow_lo
                                            ? (oh_hi - 1) * cf->wo + ow_hi : first;
                    R(conv_zero_outside)(cf, crow, oh_lo, oh_hi, ow_lo, ow_hi);
                    if (end > first) R(vec_acc)(crow + first, dx + (shift + first), end - first);
                    continue;
                }
                for (int64_t oh = oh_lo; oh < oh_hi; oh++) {
                    const REAL *restrict src = crow + oh * cf->wo;
                    const int64_t ih = oh * cf->sh - cf->ph + ki;
                    const int64_t base = (c * cf->h + ih) * cf->w - cf->pw + kj;
                    if (cf->sw == 1)
                        R(vec_acc)(src + ow_lo, dx + (base + ow_lo), ow_hi - ow_lo);
                    else
                        for (int64_t ow = ow_lo; ow < ow_hi; ow++)
                            dx[base + ow * cf->sw] += src[ow];
                }
            }
        }
}

/* Mixed precision: output values rounded to the call's precision as they are written (while
 * hot), as the executor would round them (ops/conv.c: conv2d's forward declares its output
 * exact). f32 tensors only: mixed precision keeps tensors f32. */
static inline void R(conv_round_out)(const bt_op_call *call, REAL *y, int64_t n)
{
#if BT_REAL_BITS == 32
    if (call->precision == BT_BF16 || call->precision == BT_F16) bt_round_array(call->precision, y, (size_t)n);
#else
    (void)call, (void)y, (void)n;
#endif
}

/* A pointwise conv is a GEMM per sample on the input itself: y_n (out, HW) = W (out, C) x_n. */
static void R(conv2d_forward_pointwise)(const bt_op_call *call)
{
    const bt_conv_config *cf = call->config;
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int ckk = (int)cf->c, o = (int)cf->out, n_out = (int)howo;
    const REAL *x = call->in[0].data;    /* (B, C, H, W) */
    const REAL *w = call->param[0].data; /* (out, C) */
    const REAL *b = cf->bias ? call->param[1].data : NULL; /* (out) */
    REAL *y = call->out->data;           /* (B, out, Ho, Wo) */
    for (int64_t n = 0; n < call->batch; n++) {
        REAL *yn = y + n * cf->out * howo;
        if (b)
            for (int64_t oc = 0; oc < cf->out; oc++) R(vec_fill)(b[oc], yn + oc * howo, howo);
        GEMM_W(call, BT_GEMM_PARAM_A, 0, 0, o, n_out, ckk, 1, w, ckk, x + n * chw, n_out, b ? 1 : 0, yn, n_out);
        if (cf->act == BT_OPS_ACT_RELU) R(vec_relu)(yn, cf->out * howo);
        R(conv_round_out)(call, yn, cf->out * howo);
    }
}

static bt_status R(conv2d_forward_im2col)(const bt_op_call *call)
{
    const bt_conv_config *cf = call->config;
    if (cf->pointwise) {
        R(conv2d_forward_pointwise)(call);
        return BT_OK;
    }
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw, chunk = bt_conv_chunk_samples(cf);
    const REAL *x = call->in[0].data;    /* (B, C, H, W) */
    const REAL *w = call->param[0].data; /* (out, C kh kw) */
    const REAL *b = cf->bias ? call->param[1].data : NULL; /* (out) */
    REAL *y = call->out->data;           /* (B, out, Ho, Wo) */
    REAL *col = call->workspace;         /* (C kh kw, S Ho Wo) */
    REAL *ycol = col + ckk * chunk * howo; /* (out, S Ho Wo) */
    for (int64_t n0 = 0; n0 < call->batch; n0 += chunk) {
        const int64_t s_n = call->batch - n0 < chunk ? call->batch - n0 : chunk;
        const int64_t ld = s_n * howo;
        for (int64_t s = 0; s < s_n; s++) R(im2col)(cf, x + (n0 + s) * chw, col + s * howo, ld);
        GEMM_W(call, BT_GEMM_PARAM_A, 0, 0, (int)cf->out, (int)ld, (int)ckk, 1, w, (int)ckk, col, (int)ld, 0, ycol,
             (int)ld);
        /* (out, S Ho Wo) -> (S, out, Ho Wo), adding the bias */
        for (int64_t s = 0; s < s_n; s++)
            for (int64_t oc = 0; oc < cf->out; oc++) {
                const REAL *src = ycol + oc * ld + s * howo;
                REAL *dst = y + ((n0 + s) * cf->out + oc) * howo;
                if (b)
                    R(conv_add_scalar)(src, b[oc], dst, howo);
                else
                    memcpy(dst, src, (size_t)howo * sizeof *dst);
                if (cf->act == BT_OPS_ACT_RELU) R(vec_relu)(dst, howo);
                R(conv_round_out)(call, dst, howo);
            }
    }
    return BT_OK;
}

/* sum of x[0, n): float-type partial sums in 16 lanes over blocks of at most 256 elements (which
 * GCC vectorises), each block's added up in double. */
static double R(conv_sum)(const REAL *restrict x, int64_t n)
{
    double sum = 0;
    int64_t i = 0;
    while (n - i >= 16) {
        const int64_t m = n - i < 256 ? (n - i) & ~(int64_t)15 : 256;
        REAL lane[16] = {0};
        for (int64_t j = i; j < i + m; j += 16)
            for (int k = 0; k < 16; k++) lane[k] += x[j + k];
        for (int k = 0; k < 16; k++) sum += lane[k];
        i += m;
    }
    for (; i < n; i++) sum += x[i];
    return sum;
}

/* The pointwise backward, per sample: dW += dY_n x_n^T, dx_n += W^T dY_n, db += dY_n summed. */
static void R(conv2d_backward_pointwise)(const bt_op_call *call, REAL *dx, REAL *dw, REAL *db)
{
    const bt_conv_config *cf = call->config;
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int ckk = (int)cf->c, o = (int)cf->out, n_out = (int)howo;
    const REAL *x = call->in[0].data;      /* (B, C, H, W) */
    const REAL *w = call->param[0].data;   /* (out, C) */
    const REAL *dy = call->out_grad->data; /* (B, out, Ho, Wo) */
    for (int64_t oc = 0; db && oc < cf->out; oc++) {
        double sum = 0;
        for (int64_t n = 0; n < call->batch; n++)
            sum += R(conv_sum)(dy + (n * cf->out + oc) * howo, howo);
        db[oc] += (REAL)sum;
    }
    for (int64_t n = 0; n < call->batch; n++) {
        const REAL *dyn = dy + n * cf->out * howo;
        if (dw) GEMM_AT(call, 0, 1, o, ckk, n_out, 1, dyn, n_out, x + n * chw, n_out, 1, dw, ckk);
        if (dx) GEMM_W(call, BT_GEMM_PARAM_A, 1, 0, ckk, n_out, o, 1, w, ckk, dyn, n_out, 1, dx + n * chw, n_out);
    }
}

/* The gradients from the output gradient as given (for a fused relu: already masked). */
static bt_status R(conv2d_backward_im2col)(const bt_op_call *call)
{
    const bt_conv_config *cf = call->config;
    REAL *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL; /* (B, C, H, W) */
    REAL *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                   ? call->param_grad[0].data : NULL; /* (out, C kh kw) */
    REAL *db = cf->bias && call->param_grad && BT_OPS_WANTS(&call->param_grad[1])
                   ? call->param_grad[1].data : NULL; /* (out) */
    if (cf->pointwise) {
        R(conv2d_backward_pointwise)(call, dx, dw, db);
        return BT_OK;
    }
    if (!dx && !dw && !db) return BT_OK;
    const int64_t chw = cf->c * cf->h * cf->w, howo = cf->ho * cf->wo;
    const int64_t ckk = cf->c * cf->kh * cf->kw, chunk = bt_conv_chunk_samples(cf);
    const REAL *x = call->in[0].data;      /* (B, C, H, W) */
    const REAL *w = call->param[0].data;   /* (out, C kh kw) */
    const REAL *dy = call->out_grad->data; /* (B, out, Ho, Wo) */
    REAL *col = call->workspace;           /* (C kh kw, S Ho Wo): columns, then their gradient */
    REAL *dycol = col + ckk * chunk * howo; /* (out, S Ho Wo) */
    for (int64_t n0 = 0; n0 < call->batch; n0 += chunk) {
        const int64_t s_n = call->batch - n0 < chunk ? call->batch - n0 : chunk;
        const int64_t ld = s_n * howo;
        /* (S, out, Ho Wo) -> (out, S Ho Wo) */
        for (int64_t s = 0; s < s_n; s++)
            for (int64_t oc = 0; oc < cf->out; oc++)
                memcpy(dycol + oc * ld + s * howo, dy + ((n0 + s) * cf->out + oc) * howo,
                       (size_t)howo * sizeof *dycol);
        if (db) /* db (out) += dY (out, S Ho Wo) summed along its rows */
            for (int64_t oc = 0; oc < cf->out; oc++)
                db[oc] += (REAL)R(conv_sum)(dycol + oc * ld, ld);
        if (dw) { /* dW (out, C kh kw) += dY (out, S Ho Wo) col^T */
            for (int64_t s = 0; s < s_n; s++)
                R(im2col)(cf, x + (n0 + s) * chw, col + s * howo, ld);
            GEMM_AT(call, 0, 1, (int)cf->out, (int)ckk, (int)ld, 1, dycol, (int)ld, col, (int)ld, 1, dw,
                 (int)ckk);
        }
        if (dx) { /* dcol (C kh kw, S Ho Wo) = W^T dY, folded into dX */
            GEMM_W(call, BT_GEMM_PARAM_A, 1, 0, (int)ckk, (int)ld, (int)cf->out, 1, w, (int)ckk, dycol, (int)ld, 0, col,
                 (int)ld);
            for (int64_t s = 0; s < s_n; s++)
                R(col2im_add)(cf, col + s * howo, ld, dx + (n0 + s) * chw);
        }
    }
    return BT_OK;
}

/* The forward on the path chosen for the call's shape (R(conv2d_path), ops/conv.c) */
static bt_status R(conv2d_forward)(const bt_op_call *call)
{
    int path;
    bt_status st = R(conv2d_path)(call, 0, &path);
    if (st != BT_OK) return st;
    return R(conv2d_forward_at)(call, path);
}

static bt_status R(conv2d_backward)(const bt_op_call *call)
{
    const bt_conv_config *cf = call->config;
    if (cf->act == BT_OPS_ACT_RELU) /* through the fused relu, from its output */
        R(vec_relu_mask_par)(call->out->data, call->out_grad->data, bt_tensor_numel(call->out_grad), call->threads);
    int path;
    bt_status st = R(conv2d_path)(call, 1, &path);
    if (st != BT_OK) return st;
    return R(conv2d_backward_at)(call, path);
}

/* W of a split backward: B masked the gradient W's stash copied */
static bt_status R(conv2d_backward_weight)(const bt_op_call *call)
{
    int path;
    bt_status st = R(conv2d_path)(call, 1, &path);
    if (st != BT_OK) return st;
    return R(conv2d_backward_at)(call, path);
}
