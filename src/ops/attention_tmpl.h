/* ops/attention_tmpl.h: the fused attention kernels for one float type (see ops/real.h and
 * ops/attention.c). Per sample and query head h, q is a strided view of the input (row stride
 * ld = (heads + 2 kv_heads) hd, at column h hd), k and v of kv head g = h / (heads / kv_heads) (at
 * columns c + g hd and c + kv_heads hd + g hd); o and do of the output (row stride c). Workspace:
 * s (block x block scores, then probabilities), dp (block x block), acc (block x hd), the
 * running maximum m, sum l and D of a query tile, and D of every row; all as REAL. */

/* Number of key rows query tile [i0, i1) looks at. */
static inline int64_t R(att_keys)(const bt_attention_config *cf, int64_t i1)
{
    return cf->causal ? i1 : cf->t;
}

/* The first key tile (a multiple of the tile edge) query tile [i0, ...) looks at: the tile of its
 * first row's first key (0 without a window). */
static inline int64_t R(att_first_tile)(const bt_attention_config *cf, int64_t i0)
{
    return bt_attention_first_key(cf, i0) / cf->block * cf->block;
}

/* The keys query row qi sees within key tile [j0, j0 + nk): tile columns [*lo, *lim). */
static inline void R(att_row_keys)(const bt_attention_config *cf, int64_t qi, int64_t j0, int64_t nk,
                                   int64_t *lo, int64_t *lim)
{
    int64_t hi = nk;
    if (cf->causal && qi - j0 + 1 < hi) hi = qi - j0 + 1;
    if (hi < 0) hi = 0;
    int64_t first = bt_attention_first_key(cf, qi) - j0;
    if (first < 0) first = 0;
    *lo = first < hi ? first : hi;
    *lim = hi;
}

/* x[j] = exp(x[j] - shift) for j < n, through EXP_V (real.h: vectorised in f32, in AVX-512
 * where the CPU has it). */
BT_OPS_VCLONES static void R(attn_exp_shift)(REAL *restrict x, REAL shift, int64_t n)
{
    BT_OPS_VLOOP(j, n, x[j] = EXP_V(x[j] - shift););
}

static bt_status R(attention_forward)(const bt_op_call *call)
{
    const bt_attention_config *cf = call->config;
    const int64_t T = cf->t, C = cf->c, hd = cf->hd, B = cf->block, ld = cf->ld;
    const int64_t group = cf->heads / cf->kv_heads, kvw = bt_attention_kv_width(cf);
    REAL *s = call->workspace;  /* (B, B) */
    REAL *acc = s + 2 * B * B;  /* (B, hd) */
    REAL *m = acc + B * hd, *l = m + B; /* (B) each */
    double *lse = call->saved;  /* (batch, heads, T); may be NULL in inference */
    for (int64_t n = 0; n < call->batch; n++)
        for (int64_t h = 0; h < cf->heads; h++) {
            const REAL *x = (const REAL *)call->in[0].data + n * T * ld;
            const int64_t g = h / group;
            const REAL *q = x + h * hd, *k = x + C + g * hd, *v = x + C + kvw + g * hd;
            REAL *o = (REAL *)call->out->data + n * T * C + h * hd;
            for (int64_t i0 = 0; i0 < T; i0 += B) {
                const int64_t nq = T - i0 < B ? T - i0 : B, keys = R(att_keys)(cf, i0 + nq);
                memset(acc, 0, (size_t)(nq * hd) * sizeof *acc);
                for (int64_t i = 0; i < nq; i++) {
                    m[i] = -INFINITY;
                    l[i] = 0;
                }
                for (int64_t j0 = R(att_first_tile)(cf, i0); j0 < keys; j0 += B) {
                    const int64_t nk = keys - j0 < B ? keys - j0 : B;
                    /* s (nq, nk) = scale q k^T */
                    GEMM(0, 1, (int)nq, (int)nk, (int)hd, (REAL)cf->scale, q + i0 * ld, (int)ld,
                         k + j0 * ld, (int)ld, 0, s, (int)B);
                    for (int64_t i = 0; i < nq; i++) {
                        REAL *si = s + i * B;
                        /* only keys [lo, lim) of the tile count (the causal mask, the window) */
                        int64_t lo, lim;
                        R(att_row_keys)(cf, i0 + i, j0, nk, &lo, &lim);
                        REAL mx = m[i];
                        for (int64_t j = lo; j < lim; j++) mx = si[j] > mx ? si[j] : mx;
                        /* a row with no key yet (a window starting in a later tile) has nothing
                         * to rescale */
                        const REAL corr = mx == -INFINITY ? 1 : EXP(m[i] - mx);
                        double sum = 0;
                        R(attn_exp_shift)(si + lo, mx, lim - lo);
                        for (int64_t j = lo; j < lim; j++) sum += si[j];
                        for (int64_t j = 0; j < lo; j++) si[j] = 0;
                        for (int64_t j = lim; j < nk; j++) si[j] = 0;
                        l[i] = l[i] * corr + (REAL)sum;
                        m[i] = mx;
                        REAL *ai = acc + i * hd;
                        for (int64_t c = 0; c < hd; c++) ai[c] *= corr;
                    }
                    /* acc (nq, hd) += p (nq, nk) v (nk, hd) */
                    GEMM(0, 0, (int)nq, (int)hd, (int)nk, 1, s, (int)B, v + j0 * ld, (int)ld, 1,
                         acc, (int)hd);
                }
                for (int64_t i = 0; i < nq; i++) {
                    REAL *oi = o + (i0 + i) * C;
                    const REAL inv = 1 / l[i];
                    for (int64_t c = 0; c < hd; c++) oi[c] = acc[i * hd + c] * inv;
                    if (lse) lse[(n * cf->heads + h) * T + i0 + i] = (double)m[i] + log((double)l[i]);
                }
            }
        }
    return BT_OK;
}

/* The gradients of kv head g's keys and values gather every query head of its group: each query
 * head adds its share into the same columns, heads in ascending order. */
static bt_status R(attention_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    if (!call->saved)
        return bt_op_error(BT_ERR_INTERNAL,
                           "attention: backward without the forward's saved statistics");
    const bt_attention_config *cf = call->config;
    const int64_t T = cf->t, C = cf->c, hd = cf->hd, B = cf->block, ld = cf->ld;
    const int64_t group = cf->heads / cf->kv_heads, kvw = bt_attention_kv_width(cf);
    const REAL scale = (REAL)cf->scale;
    REAL *p = call->workspace; /* (B, B) */
    REAL *dp = p + B * B;      /* (B, B) */
    REAL *dd = dp + B * B + B * hd + 3 * B; /* (T): D = rowsum(do * o) */
    const double *lse = call->saved;
    for (int64_t n = 0; n < call->batch; n++)
        for (int64_t h = 0; h < cf->heads; h++) {
            const REAL *x = (const REAL *)call->in[0].data + n * T * ld;
            const int64_t g = h / group;
            const REAL *q = x + h * hd, *k = x + C + g * hd, *v = x + C + kvw + g * hd;
            REAL *dx = (REAL *)call->in_grad[0].data + n * T * ld;
            REAL *dq = dx + h * hd, *dk = dx + C + g * hd, *dv = dx + C + kvw + g * hd;
            const REAL *o = (const REAL *)call->out->data + n * T * C + h * hd;
            const REAL *dout = (const REAL *)call->out_grad->data + n * T * C + h * hd;
            const double *lh = lse + (n * cf->heads + h) * T;
            for (int64_t i = 0; i < T; i++) {
                double d = 0;
                for (int64_t c = 0; c < hd; c++) d += (double)dout[i * C + c] * o[i * C + c];
                dd[i] = (REAL)d;
            }
            for (int64_t i0 = 0; i0 < T; i0 += B) {
                const int64_t nq = T - i0 < B ? T - i0 : B, keys = R(att_keys)(cf, i0 + nq);
                for (int64_t j0 = R(att_first_tile)(cf, i0); j0 < keys; j0 += B) {
                    const int64_t nk = keys - j0 < B ? keys - j0 : B;
                    /* p (nq, nk) = exp(scale q k^T - lse), masked */
                    GEMM(0, 1, (int)nq, (int)nk, (int)hd, scale, q + i0 * ld, (int)ld,
                         k + j0 * ld, (int)ld, 0, p, (int)B);
                    for (int64_t i = 0; i < nq; i++) {
                        int64_t lo, lim;
                        R(att_row_keys)(cf, i0 + i, j0, nk, &lo, &lim);
                        const REAL li = (REAL)lh[i0 + i];
                        REAL *pi = p + i * B;
                        R(attn_exp_shift)(pi + lo, li, lim - lo);
                        for (int64_t j = 0; j < lo; j++) pi[j] = 0;
                        for (int64_t j = lim; j < nk; j++) pi[j] = 0;
                    }
                    /* dv (nk, hd) += p^T do */
                    GEMM(1, 0, (int)nk, (int)hd, (int)nq, 1, p, (int)B, dout + i0 * C, (int)C, 1,
                         dv + j0 * ld, (int)ld);
                    /* dp (nq, nk) = do v^T; ds = p (dp - D) in place */
                    GEMM(0, 1, (int)nq, (int)nk, (int)hd, 1, dout + i0 * C, (int)C, v + j0 * ld,
                         (int)ld, 0, dp, (int)B);
                    for (int64_t i = 0; i < nq; i++) {
                        const REAL di = dd[i0 + i];
                        REAL *pi = p + i * B, *dpi = dp + i * B;
                        for (int64_t j = 0; j < nk; j++) dpi[j] = pi[j] * (dpi[j] - di);
                    }
                    /* dq (nq, hd) += scale ds k; dk (nk, hd) += scale ds^T q */
                    GEMM(0, 0, (int)nq, (int)hd, (int)nk, scale, dp, (int)B, k + j0 * ld, (int)ld,
                         1, dq + i0 * ld, (int)ld);
                    GEMM(1, 0, (int)nk, (int)hd, (int)nq, scale, dp, (int)B, q + i0 * ld, (int)ld,
                         1, dk + j0 * ld, (int)ld);
                }
            }
        }
    return BT_OK;
}

/* One position p of one sequence with its KV cache: k and v of row p (kv_heads heads) are
 * stored, then each query head attends to the rows its causal window sees (0..p, or the last
 * `window` of them) in one pass. Non-causal attention cannot decode: a query would see keys not
 * yet generated. */
static bt_status R(attention_decode)(const bt_op_call *call)
{
    const bt_attention_config *cf = call->config;
    const int64_t C = cf->c, hd = cf->hd, p = call->position;
    const int64_t group = cf->heads / cf->kv_heads, kvw = bt_attention_kv_width(cf);
    if (!cf->causal)
        return bt_op_error(BT_ERR_UNSUPPORTED, "attention: causal: false cannot decode one position at a time");
    if (p < 0 || p >= cf->t)
        return bt_op_error(BT_ERR_INVALID_ARG, "attention: position %lld is outside the context of %lld",
                           (long long)p, (long long)cf->t);
    REAL *kc = call->cache, *vc = kc + cf->t * kvw; /* (T, kv_heads hd) each */
    const REAL *x = call->in[0].data;               /* q | k | v of position p */
    REAL *y = call->out->data;                      /* (C) */
    memcpy(kc + p * kvw, x + C, (size_t)kvw * sizeof *kc);
    memcpy(vc + p * kvw, x + C + kvw, (size_t)kvw * sizeof *vc);
    const int64_t first = bt_attention_first_key(cf, p);
    for (int64_t h = 0; h < cf->heads; h++) {
        const REAL *q = x + h * hd;
        const int64_t g = h / group;
        double mx = -INFINITY, z = 0;
        double acc[1024];
        double *a = hd <= 1024 ? acc : NULL;
        if (!a) return bt_op_error(BT_ERR_UNSUPPORTED, "attention: decoding takes heads of at most 1024 channels");
        for (int64_t c = 0; c < hd; c++) a[c] = 0;
        for (int64_t j = first; j <= p; j++) {
            const REAL *k = kc + j * kvw + g * hd, *v = vc + j * kvw + g * hd;
            double s = 0;
            for (int64_t c = 0; c < hd; c++) s += (double)q[c] * (double)k[c];
            s *= cf->scale;
            if (s > mx) { /* online softmax: rescale what was summed so far */
                const double corr = exp(mx - s);
                z *= corr;
                for (int64_t c = 0; c < hd; c++) a[c] *= corr;
                mx = s;
            }
            const double e = exp(s - mx);
            z += e;
            for (int64_t c = 0; c < hd; c++) a[c] += e * (double)v[c];
        }
        for (int64_t c = 0; c < hd; c++) y[h * hd + c] = (REAL)(a[c] / z);
    }
    return BT_OK;
}
