/* ops/embedding_tmpl.h: embedding and pos_embedding kernels for one float type (see ops/real.h). */

#include "ops/vec_tmpl.h"

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

static bt_status R(pos_embedding_forward)(const bt_op_call *call)
{
    const bt_pos_embedding_config *cf = call->config;
    const int64_t tc = cf->t * cf->c;
    const REAL *w = call->param[0].data; /* (num, C): rows 0..T-1 are used */
    for (int64_t n = 0; n < call->batch; n++)
        R(vec_add)((const REAL *)call->in[0].data + n * tc, w, (REAL *)call->out->data + n * tc,
                   tc);
    return BT_OK;
}

static bt_status R(pos_embedding_backward)(const bt_op_call *call)
{
    const bt_pos_embedding_config *cf = call->config;
    const int64_t tc = cf->t * cf->c;
    const REAL *dy = call->out_grad->data; /* (batch, T, C) */
    REAL *dx = BT_OPS_WANTS(&call->in_grad[0]) ? call->in_grad[0].data : NULL;
    REAL *dw = call->param_grad && BT_OPS_WANTS(&call->param_grad[0])
                   ? call->param_grad[0].data : NULL;
    for (int64_t n = 0; n < call->batch; n++) {
        if (dx) R(vec_acc)(dy + n * tc, dx + n * tc, tc);
        if (dw) R(vec_acc)(dy + n * tc, dw, tc);
    }
    return BT_OK;
}

/* one position: y = x + weight[position] */
static bt_status R(pos_embedding_decode)(const bt_op_call *call)
{
    const bt_pos_embedding_config *cf = call->config;
    if (call->position < 0 || call->position >= cf->num)
        return bt_op_error(BT_ERR_INVALID_ARG, "pos_embedding: position %lld is outside the table of %lld",
                           (long long)call->position, (long long)cf->num);
    R(vec_add)(call->in[0].data, (const REAL *)call->param[0].data + call->position * cf->c, call->out->data,
               cf->c);
    return BT_OK;
}
