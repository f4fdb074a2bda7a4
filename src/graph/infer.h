/* graph/infer.h: running an op's shape rule outside a graph. The graph builder uses it for every
 * node; tests use it to get the config, parameter shapes and buffer sizes a kernel expects. */
#ifndef BT_GRAPH_INFER_H
#define BT_GRAPH_INFER_H

#include "baton/graph.h"
#include "baton/op.h"
#include "graph/graph_internal.h"

typedef struct bt_infer_param {
    char suffix[32];
    bt_shape shape;
    bt_init init;
    int64_t fan_in;
    double init_arg;
} bt_infer_param;

struct bt_infer_ctx {
    const bt_op_def *op;
    const bt_args *args;         /* may be NULL */
    int n_in;
    bt_shape in_shape[BT_MAX_INPUTS];
    bt_dtype in_dtype[BT_MAX_INPUTS];
    const char *layer_name;
    bt_src_loc loc;
    /* results */
    int has_output;
    bt_shape out_shape;
    bt_dtype out_dtype;
    int n_params;
    bt_infer_param params[BT_MAX_PARAMS];
    size_t saved_per_sample, ws_per_sample, ws_fixed;
    unsigned char config[BT_OP_CONFIG_MAX];
    size_t config_size;
    unsigned no_grad_mask;
    int64_t int_hi[BT_MAX_INPUTS]; /* bt_infer_int_range; 0: not declared */
};

/* Prepares ctx for op applied to n_in inputs; layer_name and loc only label messages. */
void bt_infer_ctx_init(bt_infer_ctx *ctx, const bt_op_def *op, const bt_args *args, int n_in,
                       const bt_shape *shapes, const bt_dtype *dtypes, const char *layer_name,
                       bt_src_loc loc);
/* Checks the arguments against the op's specification, then runs its shape rule. */
bt_status bt_infer_ctx_run(bt_infer_ctx *ctx);

/* Writes "file:line:col: layer 'name': " (or the parts that are known) into buf. */
void bt_format_layer_prefix(char *buf, size_t size, const char *layer_name, bt_src_loc loc);

#endif
