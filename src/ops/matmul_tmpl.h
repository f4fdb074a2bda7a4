/* ops/matmul_tmpl.h: matmul and transpose kernels for one float type (see ops/real.h). Each
 * sample holds cf->lead matrices; every GEMM is one of them. */

static bt_status R(matmul_forward)(const bt_op_call *call)
{
    const bt_matmul_config *cf = call->config;
    const int64_t M = cf->m, K = cf->k, N = cf->n, mats = bt_ops_whole(call->out, M * N);
    if (mats < 0 || bt_ops_whole(&call->in[0], M * K) != mats || bt_ops_whole(&call->in[1], K * N) != mats)
        return bt_ops_matmul_rows_error("matmul");
    const REAL *a = call->in[0].data, *b = call->in[1].data; /* (mats, M, K), (mats, K, N) */
    REAL *y = call->out->data;                               /* (mats, M, N) */
    for (int64_t q = 0; q < mats; q++)
        GEMM(0, 0, (int)M, (int)N, (int)K, 1, a + q * M * K, (int)K, b + q * K * N, (int)N, 0,
             y + q * M * N, (int)N);
    return BT_OK;
}

static bt_status R(matmul_backward)(const bt_op_call *call)
{
    const bt_matmul_config *cf = call->config;
    const int64_t M = cf->m, K = cf->k, N = cf->n, mats = call->batch * cf->lead;
    const REAL *a = call->in[0].data, *b = call->in[1].data, *dy = call->out_grad->data;
    REAL *da = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    REAL *db = BT_OPS_WANTS(&call->in_grad[1]) ? call->in_grad[1].data : NULL;
    for (int64_t q = 0; q < mats; q++) {
        if (da) /* da (M, K) += dy (M, N) b^T */
            GEMM(0, 1, (int)M, (int)K, (int)N, 1, dy + q * M * N, (int)N, b + q * K * N, (int)N, 1,
                 da + q * M * K, (int)K);
        if (db) /* db (K, N) += a^T dy */
            GEMM(1, 0, (int)K, (int)N, (int)M, 1, a + q * M * K, (int)K, dy + q * M * N, (int)N, 1,
                 db + q * K * N, (int)N);
    }
    return BT_OK;
}

/* y (c, r) = x (r, c)^T for each of mats matrices; acc: add instead of writing */
static void R(transpose_run)(const REAL *x, REAL *y, int64_t mats, int64_t r, int64_t c, int acc)
{
    for (int64_t q = 0; q < mats; q++) {
        const REAL *xq = x + q * r * c;
        REAL *yq = y + q * r * c;
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < c; j++) {
                if (acc)
                    yq[j * r + i] += xq[i * c + j];
                else
                    yq[j * r + i] = xq[i * c + j];
            }
    }
}

static bt_status R(transpose_forward)(const bt_op_call *call)
{
    const bt_matmul_config *cf = call->config;
    const int64_t mats = bt_ops_whole(&call->in[0], cf->m * cf->n);
    if (mats < 0) return bt_ops_matmul_rows_error("transpose");
    R(transpose_run)(call->in[0].data, call->out->data, mats, cf->m, cf->n, 0);
    return BT_OK;
}

static bt_status R(transpose_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_matmul_config *cf = call->config;
    /* dx (m, n) += dy (n, m)^T */
    R(transpose_run)(call->out_grad->data, call->in_grad[0].data, call->batch * cf->lead, cf->n,
                     cf->m, 1);
    return BT_OK;
}
