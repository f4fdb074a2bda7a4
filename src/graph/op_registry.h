/* graph/op_registry.h: the process-wide table of ops, built-ins first (src/ops/builtin.c), then
 * custom ops registered through bt_op_register. Backends attach their kernels to built-in ops
 * here at start-up (the CUDA backend fills cuda_forward/cuda_backward/cuda_decode). */
#ifndef BT_GRAPH_OP_REGISTRY_H
#define BT_GRAPH_OP_REGISTRY_H

#include "baton/op.h"

/* Loads the built-in ops once; thread-safe. */
bt_status bt_op_registry_init(void);
/* 1 for an op registered through bt_op_register (a plugin's, an application's), 0 for a built-in:
 * custom names are dotted (bt_op_register requires it), built-in ones never are. */
int bt_op_is_custom(const bt_op_def *op);
/* Attaches CUDA kernels to the registry's copy of the built-in op builtin (a definition
 * bt_builtin_ops lists: &bt_op_linear, ...): forward, backward, and decode (NULL for an op without
 * cpu_decode). BT_ERR_INTERNAL if it is not one. */
bt_status bt_op_registry_set_cuda(const bt_op_def *builtin, bt_op_fn forward, bt_op_fn backward,
                                  bt_op_fn decode);

#endif
