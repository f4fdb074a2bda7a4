/* ops/softmax_tmpl.h: softmax kernels for one float type (see ops/real.h). Every row of d
 * elements is independent; the sum of exponentials accumulates in double. */

/* p = softmax(x) for one row of d elements. */
static void R(softmax_row)(const REAL *restrict x, REAL *restrict p, int64_t d)
{
    REAL max = x[0];
    for (int64_t j = 1; j < d; j++) max = x[j] > max ? x[j] : max;
    double sum = 0;
    for (int64_t j = 0; j < d; j++) {
        p[j] = EXP(x[j] - max);
        sum += p[j];
    }
    const REAL inv = (REAL)(1.0 / sum);
    for (int64_t j = 0; j < d; j++) p[j] *= inv;
}

static bt_status R(softmax_forward)(const bt_op_call *call)
{
    const int64_t d = ((const bt_softmax_config *)call->config)->d;
    const int64_t rows = bt_tensor_numel(call->out) / d;
    const REAL *x = call->in[0].data; /* (rows, d) */
    REAL *y = call->out->data;        /* (rows, d) */
    for (int64_t r = 0; r < rows; r++) R(softmax_row)(x + r * d, y + r * d, d);
    return BT_OK;
}

static bt_status R(softmax_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const int64_t d = ((const bt_softmax_config *)call->config)->d;
    const int64_t rows = bt_tensor_numel(call->out_grad) / d;
    const REAL *x = call->in[0].data;        /* (rows, d) */
    const REAL *dy = call->out_grad->data;   /* (rows, d) */
    REAL *dx = call->in_grad[0].data;        /* (rows, d) */
    REAL *restrict p = call->workspace;      /* (d) */
    for (int64_t r = 0; r < rows; r++) {
        const REAL *restrict dyr = dy + r * d;
        REAL *restrict dxr = dx + r * d;
        R(softmax_row)(x + r * d, p, d);
        double dot = 0;
        for (int64_t j = 0; j < d; j++) dot += (double)dyr[j] * p[j];
        /* dx = p * (dy - <dy, p>) */
        for (int64_t j = 0; j < d; j++) dxr[j] += p[j] * (dyr[j] - (REAL)dot);
    }
    return BT_OK;
}
