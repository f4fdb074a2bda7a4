/* ops/rope_tmpl.h: the rope kernels for one float type (see ops/real.h and ops/rope.c). Every
 * call first lists the inverse frequencies (bt_rope_inv_freq) in the workspace; each row then
 * gets the cosines and sines of its position's angles beside them. Rows are (width) wide; the
 * first `rotated` heads of hd are turned, the rest copied (forward) or passed back (backward). */

/* cs, sn (hd/2): cos and sin of position pos times each inverse frequency inv (hd/2). */
static void R(rope_angles)(const bt_rope_config *cf, const double *inv, int64_t pos, double *cs,
                           double *sn)
{
    for (int64_t i = 0; i < cf->hd / 2; i++) {
        const double a = (double)pos * inv[i];
        cs[i] = cos(a);
        sn[i] = sin(a);
    }
}

/* One row: y = the row x rotated. */
static void R(rope_row)(const bt_rope_config *cf, const double *cs, const double *sn,
                        const REAL *restrict x, REAL *restrict y)
{
    const int64_t half = cf->hd / 2, turned = cf->rotated * cf->hd;
    for (int64_t h = 0; h < cf->rotated; h++) {
        const REAL *xh = x + h * cf->hd;
        REAL *yh = y + h * cf->hd;
        for (int64_t i = 0; i < half; i++) {
            const double x0 = xh[i], x1 = xh[i + half];
            yh[i] = (REAL)(x0 * cs[i] - x1 * sn[i]);
            yh[i + half] = (REAL)(x1 * cs[i] + x0 * sn[i]);
        }
    }
    memcpy(y + turned, x + turned, (size_t)(cf->width - turned) * sizeof *y);
}

/* One row's gradient: dx += the row dy rotated back (the rotation's transpose). */
static void R(rope_row_grad)(const bt_rope_config *cf, const double *cs, const double *sn,
                             const REAL *restrict dy, REAL *restrict dx)
{
    const int64_t half = cf->hd / 2, turned = cf->rotated * cf->hd;
    for (int64_t h = 0; h < cf->rotated; h++) {
        const REAL *gh = dy + h * cf->hd;
        REAL *dh = dx + h * cf->hd;
        for (int64_t i = 0; i < half; i++) {
            const double g0 = gh[i], g1 = gh[i + half];
            dh[i] += (REAL)(g0 * cs[i] + g1 * sn[i]);
            dh[i + half] += (REAL)(g1 * cs[i] - g0 * sn[i]);
        }
    }
    for (int64_t j = turned; j < cf->width; j++) dx[j] += dy[j];
}

/* The workspace's three arrays of hd/2 doubles: inverse frequencies (filled), cosines, sines. */
static double *R(rope_workspace)(const bt_op_call *call, double **cs, double **sn)
{
    const bt_rope_config *cf = call->config;
    const int64_t half = cf->hd / 2;
    double *inv = call->workspace;
    for (int64_t i = 0; i < half; i++) inv[i] = bt_rope_inv_freq(cf, i);
    *cs = inv + half;
    *sn = inv + 2 * half;
    return inv;
}

static bt_status R(rope_forward)(const bt_op_call *call)
{
    const bt_rope_config *cf = call->config;
    double *cs, *sn;
    const double *inv = R(rope_workspace)(call, &cs, &sn);
    const REAL *x = call->in[0].data;
    REAL *y = call->out->data;
    for (int64_t n = 0; n < call->batch; n++)
        for (int64_t t = 0; t < cf->t; t++) {
            const int64_t r = n * cf->t + t;
            R(rope_angles)(cf, inv, t, cs, sn);
            R(rope_row)(cf, cs, sn, x + r * cf->width, y + r * cf->width);
        }
    return BT_OK;
}

static bt_status R(rope_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_rope_config *cf = call->config;
    double *cs, *sn;
    const double *inv = R(rope_workspace)(call, &cs, &sn);
    const REAL *dy = call->out_grad->data;
    REAL *dx = call->in_grad[0].data;
    for (int64_t n = 0; n < call->batch; n++)
        for (int64_t t = 0; t < cf->t; t++) {
            const int64_t r = n * cf->t + t;
            R(rope_angles)(cf, inv, t, cs, sn);
            R(rope_row_grad)(cf, cs, sn, dy + r * cf->width, dx + r * cf->width);
        }
    return BT_OK;
}

/* One row at position call->position. */
static bt_status R(rope_decode)(const bt_op_call *call)
{
    const bt_rope_config *cf = call->config;
    if (call->position < 0)
        return bt_op_error(BT_ERR_INVALID_ARG, "rope: position %lld is negative", (long long)call->position);
    double *cs, *sn;
    const double *inv = R(rope_workspace)(call, &cs, &sn);
    R(rope_angles)(cf, inv, call->position, cs, sn);
    R(rope_row)(cf, cs, sn, call->in[0].data, call->out->data);
    return BT_OK;
}
