/* graph/op_call.h: the bt_op_call of one graph node, built the same way by everyone who runs an op
 * outside its own kernels: the executor's worker (src/exec/worker.c) and the profiler
 * (src/profile/measure.c). The caller says where the node's data lives (bt_op_call_data: device
 * pointers it resolved from its own memory layout); this fills the tensors (micro-batch as dim[0]
 * of every value, parameters without a batch dimension, i32 values stay i32, float values take
 * the caller's dtype) and every field of the call that follows from the graph.
 *
 * Left to the caller: seed, training, precision (and whatever a backend adds per device); threads
 * and stream are the backend's. Invariant: the call points into *tensors, which must outlive it.
 *
 * Data flow: graph (node, values, params) + caller's pointers -> bt_op_call -> backend run_op. */
#ifndef BT_GRAPH_OP_CALL_H
#define BT_GRAPH_OP_CALL_H

#include <stdint.h>

#include "baton/op.h"
#include "graph/graph_internal.h"

/* Where one node's data is for one call. */
typedef struct bt_op_call_data {
    void *in[BT_MAX_INPUTS];           /* the node's input values, (batch, ...) each */
    void *out;                         /* its output value, (batch, ...) */
    void *param[BT_MAX_PARAMS];        /* the weights the op reads */
    void *param_grad[BT_MAX_PARAMS];   /* backward: where parameter gradients are added */
    void *saved;                       /* batch * saved_per_sample bytes */
    void *workspace;
    void *out_grad;                    /* backward: the output's gradient */
    void *in_grad[BT_MAX_INPUTS];      /* backward: input gradients; NULL: none wanted */
} bt_op_call_data;

/* The tensors a call points into. */
typedef struct bt_op_call_tensors {
    bt_tensor in[BT_MAX_INPUTS], out;
    bt_tensor param[BT_MAX_PARAMS], param_grad[BT_MAX_PARAMS];
    bt_tensor out_grad, in_grad[BT_MAX_INPUTS];
} bt_op_call_tensors;

/* Builds the call of graph node `node` on a micro-batch of `batch` samples, float tensors in
 * `dtype` (BT_F32 or BT_F64). backward 0: param_grad, out_grad and in_grad stay NULL. Zeroes
 * *call first; seed, training and precision are 0 until the caller sets them. */
void bt_op_call_build(const bt_graph *graph, int node, int64_t batch, bt_dtype dtype, int backward,
                      const bt_op_call_data *data, bt_op_call_tensors *tensors, bt_op_call *call);

#endif
