/* ops/concat_tmpl.h: split and concat kernels for one float type (see ops/real.h). The wide side
 * is (batch * rows, d); piece p occupies columns [offset[p], offset[p] + width[p]). */

#include "ops/vec_tmpl.h"

static bt_status R(split_forward)(const bt_op_call *call)
{
    const bt_concat_config *cf = call->config;
    const int64_t rows = bt_ops_whole(&call->in[0], cf->d), w = cf->width[0]; /* batch * rows but decoding */
    const REAL *x = (const REAL *)call->in[0].data + cf->offset[0];
    REAL *y = call->out->data;
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * w, x + r * cf->d, (size_t)w * sizeof *y);
    return BT_OK;
}

static bt_status R(split_backward)(const bt_op_call *call)
{
    if (!BT_OPS_WANTS(&call->in_grad[0])) return BT_OK;
    const bt_concat_config *cf = call->config;
    const int64_t rows = call->batch * cf->rows, w = cf->width[0];
    const REAL *dy = call->out_grad->data;
    REAL *dx = (REAL *)call->in_grad[0].data + cf->offset[0];
    for (int64_t r = 0; r < rows; r++) R(vec_acc)(dy + r * w, dx + r * cf->d, w);
    return BT_OK;
}

static bt_status R(concat_forward)(const bt_op_call *call)
{
    const bt_concat_config *cf = call->config;
    const int64_t rows = bt_ops_whole(call->out, cf->d); /* batch * rows but decoding */
    REAL *y = call->out->data;
    for (int p = 0; p < cf->n; p++) {
        const REAL *x = call->in[p].data;
        const int64_t w = cf->width[p];
        for (int64_t r = 0; r < rows; r++)
            memcpy(y + r * cf->d + cf->offset[p], x + r * w, (size_t)w * sizeof *y);
    }
    return BT_OK;
}

static bt_status R(concat_backward)(const bt_op_call *call)
{
    const bt_concat_config *cf = call->config;
    const int64_t rows = call->batch * cf->rows;
    const REAL *dy = call->out_grad->data;
    for (int p = 0; p < cf->n; p++) {
        if (!BT_OPS_WANTS(&call->in_grad[p])) continue;
        REAL *dx = call->in_grad[p].data;
        const int64_t w = cf->width[p];
        for (int64_t r = 0; r < rows; r++) R(vec_acc)(dy + r * cf->d + cf->offset[p], dx + r * w, w);
    }
    return BT_OK;
}
