/* ops/embedding_tmpl.h: embedding kernels for one float type (see ops/real.h). */

static bt_status R(embedding_forward)(const bt_op_call *call)
{
    const bt_embedding_config *cf = call->config;
    const int64_t n = bt_tensor_numel(&call->in[0]);
    const int32_t *ids = call->in[0].data; /* (n) */
    const REAL *w = call->param[0].data;   /* (num, dim) */
    REAL *y = call->out->data;             /* (n, dim) */
    for (int64_t t = 0; t < n; t++) {
        if (ids[t] < 0 || ids[t] >= cf->num) return bt_ops_embedding_bad_index(t, ids[t], cf->num);
        memcpy(y + t * cf->dim, w + (int64_t)ids[t] * cf->dim, (size_t)cf->dim * sizeof *y);
    }
    return BT_OK;
}

static bt_status R(embedding_backward)(const bt_op_call *call)
{
    if (!call->param_grad || !BT_OPS_WANTS(&call->param_grad[0])) return BT_OK;
    const bt_embedding_config *cf = call->config;
    const int64_t n = bt_tensor_numel(&call->in[0]);
    const int32_t *ids = call->in[0].data;  /* (n) */
    const REAL *dy = call->out_grad->data;  /* (n, dim) */
    REAL *dw = call->param_grad[0].data;    /* (num, dim) */
    for (int64_t t = 0; t < n; t++) {
        if (ids[t] < 0 || ids[t] >= cf->num) return bt_ops_embedding_bad_index(t, ids[t], cf->num);
        REAL *restrict row = dw + (int64_t)ids[t] * cf->dim;
        const REAL *restrict g = dy + t * cf->dim;
        for (int64_t j = 0; j < cf->dim; j++) row[j] += g[j];
    }
    return BT_OK;
}
