/* ops/pool_tmpl.h: maxpool2d and avgpool2d kernels for one float type (see ops/real.h). Every
 * (sample, channel) plane is independent (the planes are shared among the device's threads,
 * BT_PARALLEL_FOR); a window's rows and columns are clipped to the input,
 * which is what -inf (max) or zero (avg) padding amounts to. maxpool's forward selects each
 * window's argmax by masks instead of branches, through a comparison tree for 2x2 windows, and
 * runs the plain branching scan only for windows that hold a NaN: on fashion-cnn's pools 5x
 * faster than that scan everywhere (bench/RESULTS.md). */

/* Index ih W + iw, within the plane xp (rows W long), of the first maximum of the window rows
 * [h0, h1) and columns [w0, w1), or of its last NaN (NaN propagates, as in PyTorch). */
static int64_t R(window_argmax_nan)(const REAL *restrict xp, int64_t w, int64_t h0, int64_t h1,
                                    int64_t w0, int64_t w1)
{
    REAL best = -INFINITY;
    int64_t at = h0 * w + w0;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            const REAL v = xp[ih * w + iw];
            if (v > best || v != v) {
                best = v;
                at = ih * w + iw;
            }
        }
    return at;
}

/* Offset (0, 1, W or W + 1) from p of the first maximum of the 2x2 window p[0], p[1], p[W],
 * p[W + 1], for a window without NaN: a tree of strict comparisons, each side preferring its
 * first element, gives the first maximum without a branch. */
static inline int64_t R(argmax_2x2)(const REAL *restrict p, int64_t w)
{
    const REAL a = p[0], b = p[1], c = p[w], d = p[w + 1];
    const REAL top = b > a ? b : a, bottom = d > c ? d : c;
    const int64_t at_top = b > a, at_bottom = w + (d > c);
    return at_top + ((at_bottom - at_top) & -(int64_t)(bottom > top));
}

/* One output row of a plane: the maxima of the windows over the input rows [h0, h1) into
 * y (Wo) and their indices into arg (Wo; NULL: not wanted). Which element of a window wins is
 * random, so the index is selected by masks, without a branch (the max itself is one
 * instruction); 2x2 windows, the common case, take argmax_2x2. Those comparisons ignore NaN: the
 * window's sum, NaN where the window holds one (or infinities of both signs), sends such a
 * window to window_argmax_nan. */
static void R(maxpool_row)(const bt_pool_config *cf, const REAL *restrict xp, int64_t h0, int64_t h1,
                           REAL *restrict y, int32_t *restrict arg)
{
    const int64_t w = cf->w;
    for (int64_t ow = 0; ow < cf->wo; ow++) {
        int64_t w0, w1;
        pool_span(ow, cf->sw, cf->pw, cf->kw, w, &w0, &w1);
        int64_t at = h0 * w + w0;
        REAL sum = 0;
        if (h1 - h0 == 2 && w1 - w0 == 2) {
            const REAL *p = xp + at;
            sum = (p[0] + p[1]) + (p[w] + p[w + 1]);
            at += R(argmax_2x2)(p, w);
        } else {
            REAL best = -INFINITY;
            for (int64_t ih = h0; ih < h1; ih++)
                for (int64_t i = ih * w + w0; i < ih * w + w1; i++) {
                    const REAL v = xp[i];
                    at += (i - at) & -(int64_t)(v > best);
                    best = v > best ? v : best;
                    sum += v;
                }
        }
        if (sum != sum) at = R(window_argmax_nan)(xp, w, h0, h1, w0, w1);
        y[ow] = xp[at];
        if (arg) arg[ow] = (int32_t)at;
    }
}

/* Output row oh of a plane for 2x2 windows at stride 2 without padding (every window whole, at
 * rows 2 oh and 2 oh + 1): maxpool_row's 2x2 case without the span arithmetic, about 1.4x faster
 * on fashion-cnn's pools. f32 on a CPU with AVX-512 takes maxpool_row_2x2_avx512 (ops/pool.c)
 * instead, 16 windows a vector, with the same results bit for bit. */
static void R(maxpool_row_2x2)(const REAL *restrict xp, int64_t w, int64_t wo, int64_t oh,
                               REAL *restrict y, int32_t *restrict arg)
{
    const int64_t row = 2 * oh * w;
    for (int64_t ow = 0; ow < wo; ow++) {
        const REAL *p = xp + row + 2 * ow;
        int64_t at = row + 2 * ow + R(argmax_2x2)(p, w);
        const REAL sum = (p[0] + p[1]) + (p[w] + p[w + 1]);
        if (sum != sum) at = R(window_argmax_nan)(xp, w, 2 * oh, 2 * oh + 2, 2 * ow, 2 * ow + 2);
        y[ow] = xp[at];
        if (arg) arg[ow] = (int32_t)at;
    }
}

static bt_status R(maxpool2d_forward)(const bt_op_call *call)
{
    const bt_pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL *x = call->in[0].data; /* (B C, H, W) */
    REAL *y = call->out->data;        /* (B C, Ho, Wo) */
    int32_t *arg = call->saved;       /* (B C, Ho, Wo); may be NULL */
    const int nt = call->threads;
    if (cf->kh == 2 && cf->kw == 2 && cf->sh == 2 && cf->sw == 2 && cf->ph == 0 && cf->pw == 0) {
#if BT_REAL_BITS == 32
        void (*const row)(const REAL *, int64_t, int64_t, int64_t, REAL *, int32_t *) =
            pool_avx512() ? maxpool_row_2x2_avx512 : R(maxpool_row_2x2);
#else
        void (*const row)(const REAL *, int64_t, int64_t, int64_t, REAL *, int32_t *) = R(maxpool_row_2x2);
#endif
        BT_PARALLEL_FOR(nt)
        for (int64_t pl = 0; pl < planes; pl++)
            for (int64_t oh = 0; oh < cf->ho; oh++) {
                const int64_t oi = pl * howo + oh * cf->wo;
                row(x + pl * hw, cf->w, cf->wo, oh, y + oi, arg ? arg + oi : NULL);
            }
        return BT_OK;
    }
    BT_PARALLEL_FOR(nt)
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oh = 0; oh < cf->ho; oh++) {
            int64_t h0, h1;
            pool_span(oh, cf->sh, cf->ph, cf->kh, cf->h, &h0, &h1);
            const int64_t oi = pl * howo + oh * cf->wo;
            R(maxpool_row)(cf, x + pl * hw, h0, h1, y + oi, arg ? arg + oi : NULL);
        }
    return BT_OK;
}

static bt_status R(maxpool2d_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL *dy = call->out_grad->data; /* (B C, Ho, Wo) */
    const int32_t *arg = call->saved;      /* (B C, Ho, Wo) */
    REAL *dx = call->in_grad[0].data;      /* (B C, H, W) */
    const int nt = call->threads;
#if BT_REAL_BITS == 32 && defined(POOL_AVX512)
    /* 2x2 stride-2 windows in f32 on AVX-512: 16 windows a vector (ops/pool.c), the same bits as
     * the loop below */
    if (cf->kh == 2 && cf->kw == 2 && cf->sh == 2 && cf->sw == 2 && cf->ph == 0 && cf->pw == 0 &&
        pool_avx512()) {
        BT_PARALLEL_FOR(nt)
        for (int64_t pl = 0; pl < planes; pl++)
            for (int64_t oh = 0; oh < cf->ho; oh++) {
                const int64_t oi = pl * howo + oh * cf->wo;
                maxpool_back_2x2_avx512(dy + oi, arg + oi, cf->w, cf->wo, oh, dx + pl * hw);
            }
        return BT_OK;
    }
#endif
    BT_PARALLEL_FOR(nt)
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
    const bt_pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL inv = (REAL)(1.0 / (double)(cf->kh * cf->kw));
    const REAL *x = call->in[0].data; /* (B C, H, W) */
    REAL *y = call->out->data;        /* (B C, Ho, Wo) */
    const int nt = call->threads;
    BT_PARALLEL_FOR(nt)
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
    const bt_pool_config *cf = call->config;
    const int64_t planes = call->batch * cf->c, hw = cf->h * cf->w, howo = cf->ho * cf->wo;
    const REAL inv = (REAL)(1.0 / (double)(cf->kh * cf->kw));
    const REAL *dy = call->out_grad->data; /* (B C, Ho, Wo) */
    REAL *dx = call->in_grad[0].data;      /* (B C, H, W) */
    const int nt = call->threads;
    BT_PARALLEL_FOR(nt)
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
