/* ops/builtin.c: the table of built-in ops the registry (graph/op_registry.c) loads at start-up.
 * Adding a built-in op means one definition in its family's file and one line here. */
#include "ops/ops.h"

static const bt_op_def *const builtin_ops[] = {
    &bt_op_linear,    &bt_op_add,       &bt_op_mul,       &bt_op_relu,
    &bt_op_gelu,      &bt_op_tanh,      &bt_op_sigmoid,   &bt_op_softmax,
    &bt_op_layernorm, &bt_op_flatten,   &bt_op_reshape,   &bt_op_conv2d,
    &bt_op_maxpool2d, &bt_op_avgpool2d, &bt_op_embedding, &bt_op_dropout,
    &bt_op_mse,       &bt_op_cross_entropy,
};

const bt_op_def *const *bt_builtin_ops(int *n)
{
    *n = (int)(sizeof builtin_ops / sizeof builtin_ops[0]);
    return builtin_ops;
}
