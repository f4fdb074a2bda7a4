/* ops/builtin.c: the table of built-in ops the registry (graph/op_registry.c) loads at start-up,
 * expanded from ops/builtin_ops.def: adding a built-in op means its definition in its family's
 * file and one row there. */
#include "ops/ops.h"

static const bt_op_def *const builtin_ops[] = {
#define BT_BUILTIN_OP(op) &bt_op_##op,
#include "ops/builtin_ops.def"
};

const bt_op_def *const *bt_builtin_ops(int *n)
{
    *n = (int)(sizeof builtin_ops / sizeof builtin_ops[0]);
    return builtin_ops;
}
