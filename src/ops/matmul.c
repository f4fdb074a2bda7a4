/* ops/matmul.c: products and transposes of activations (no parameters).
 *   matmul(a, b): a [..., M, K] times b [..., K, N] -> [..., M, N], the leading per-sample dims of
 *     a and b equal (one product per leading index); rank-1 operands are not promoted. Gradients
 *     flow to both: da += dy b^T, db += a^T dy.
 *   transpose(x): swaps the last two dims, [..., R, C] -> [..., C, R].
 * Kernels are GEMMs through cpu/blas.h and plain loops. The forwards count matrices from the
 * call's tensors (ops/op_configs.h, bt_ops_whole), so that decoding one position of a sequence
 * (bt_generate) runs one row's matrices where the sequence is a leading dimension, and refuses
 * where it is a matrix dimension. */
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/matmul_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/matmul_tmpl.h"

bt_status bt_ops_matmul_rows_error(const char *op)
{
    return bt_op_error(BT_ERR_UNSUPPORTED,
                       "%s: the call's tensors do not hold whole matrices: one position of a sequence "
                       "cannot be decoded alone where the sequence is one of the matrix dimensions "
                       "(only leading dimensions run along it)", op);
}

BT_OPS_DISPATCH("matmul", matmul_forward, call->out->dtype)
BT_OPS_DISPATCH("matmul", matmul_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("transpose", transpose_forward, call->out->dtype)
BT_OPS_DISPATCH("transpose", transpose_backward, call->out_grad->dtype)

static bt_status matmul_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "matmul", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *a = bt_infer_input_shape(ctx, 0), *b = bt_infer_input_shape(ctx, 1);
    int ok = a->ndim >= 2 && a->ndim == b->ndim && a->dim[a->ndim - 1] == b->dim[b->ndim - 2];
    for (int k = 0; ok && k < a->ndim - 2; k++) ok = a->dim[k] == b->dim[k];
    if (!ok)
        return bt_infer_error(ctx,
                              "matmul expects [..., M, K] and [..., K, N] with equal leading "
                              "dims, got %s and %s",
                              BT_OPS_SHAPE(a), BT_OPS_SHAPE(b));
    bt_matmul_config cfg = {.lead = 1, .m = a->dim[a->ndim - 2], .k = a->dim[a->ndim - 1],
                            .n = b->dim[b->ndim - 1]};
    for (int k = 0; k < a->ndim - 2; k++) cfg.lead *= a->dim[k];
    bt_shape y = *a;
    y.dim[y.ndim - 1] = cfg.n;
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static bt_status transpose_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "transpose", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim < 2)
        return bt_infer_error(ctx, "transpose expects at least two dimensions, got %s",
                              BT_OPS_SHAPE(x));
    bt_matmul_config cfg = {.lead = 1, .m = x->dim[x->ndim - 2], .n = x->dim[x->ndim - 1]};
    for (int k = 0; k < x->ndim - 2; k++) cfg.lead *= x->dim[k];
    bt_shape y = *x;
    y.dim[y.ndim - 2] = cfg.n;
    y.dim[y.ndim - 1] = cfg.m;
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

const bt_op_def bt_op_matmul = {
    .name = "matmul",
    .min_inputs = 2,
    .max_inputs = 2,
    .infer = matmul_infer,
    .cpu_forward = matmul_forward,
    .cpu_backward = matmul_backward,
    .help = "a [..., M, K] @ b [..., K, N] of two activations",
};

const bt_op_def bt_op_transpose = {
    .name = "transpose",
    .min_inputs = 1,
    .max_inputs = 1,
    .infer = transpose_infer,
    .cpu_forward = transpose_forward,
    .cpu_backward = transpose_backward,
    .help = "swaps the last two dimensions",
};
