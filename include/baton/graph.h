/* baton/graph.h: a model as a layer graph. A graph has named inputs (per-sample shapes) and an
 * ordered list of layers; each layer applies one op to earlier values (inputs or layer outputs) and
 * produces one value named after the layer. Shapes are inferred as each layer is added, so a
 * reference to a later layer cannot exist and every error names the layer (and its YAML position
 * when the loader built it). Parameters are named PyTorch-style: "<layer>.<suffix>" ("fc1.weight",
 * Linear weights shaped [out, in]). The last layer is the graph's output; when it is a loss op
 * (scalar per sample) the graph can be trained. */
#ifndef BATON_GRAPH_H
#define BATON_GRAPH_H

#include <stdint.h>

#include "baton/api.h"
#include "baton/args.h"
#include "baton/config.h"
#include "baton/op.h"
#include "baton/status.h"
#include "baton/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_graph bt_graph;

/* Where a layer came from, for messages: file, 1-based line and column (0: unknown). */
typedef struct bt_src_loc {
    const char *file;
    int line, col;
} bt_src_loc;

typedef struct bt_layer_desc {
    const char *name;            /* unique; becomes the value name and the parameter prefix */
    const char *op;              /* op name, see bt_op_find */
    const char *const *inputs;   /* names of earlier values; n_inputs == 0: the previous layer */
    int n_inputs;
    const bt_args *args;         /* may be NULL */
    const char *act;             /* optional activation applied after the op: relu, gelu, ... */
    int stage;                   /* pipeline stage the layer is pinned to; -1: the plan decides */
    bt_src_loc loc;              /* optional */
} bt_layer_desc;

/* Fills desc with defaults (no inputs, no args, no act, stage -1). */
BT_API void bt_layer_desc_init(bt_layer_desc *desc);

/* Creates an empty graph owned by the caller (free with bt_graph_destroy). */
BT_API bt_status bt_graph_create(bt_graph **out);
/* Frees a graph; accepts NULL. */
BT_API void bt_graph_destroy(bt_graph *graph);

/* Declares a model input with its per-sample shape (ndim 0: one scalar per sample). */
BT_API bt_status bt_graph_add_input(bt_graph *graph, const char *name, int ndim, const int64_t *dims,
                                    bt_dtype dtype);
/* Appends a layer, checks its arguments against the op's specification and infers its shape.
 * All strings are copied. On failure the graph is unchanged and bt_last_error() says why. */
BT_API bt_status bt_graph_add_layer(bt_graph *graph, const bt_layer_desc *desc);

/* ---- queries (indices are stable; strings are owned by the graph) ---------------------------- */

typedef struct bt_layer_info {
    const char *name;
    const char *op;
    const char *act;             /* NULL if none */
    bt_shape shape;              /* per-sample output shape */
    bt_dtype dtype;
    int64_t n_params;            /* parameter elements */
    int stage;                   /* pinned stage or -1 */
    int recompute;               /* 1: activations recomputed before backward (see below) */
    int n_inputs;
    const char *inputs[BT_MAX_INPUTS];
    bt_src_loc loc;
} bt_layer_info;

typedef struct bt_param_info {
    const char *name;            /* "fc1.weight" */
    bt_shape shape;
    int layer;                   /* index of the owning layer */
    const char *tied_to;         /* the parameter this one is tied to (bt_graph_tie), or NULL */
} bt_param_info;

typedef struct bt_input_info {
    const char *name;
    bt_shape shape;
    bt_dtype dtype;
} bt_input_info;

BT_API int bt_graph_num_inputs(const bt_graph *graph);
BT_API bt_status bt_graph_input(const bt_graph *graph, int i, bt_input_info *out);
BT_API int bt_graph_num_layers(const bt_graph *graph);
BT_API bt_status bt_graph_layer(const bt_graph *graph, int i, bt_layer_info *out);
/* Index of the layer with that name, or -1. */
BT_API int bt_graph_find_layer(const bt_graph *graph, const char *name);
BT_API int bt_graph_num_params(const bt_graph *graph);
BT_API bt_status bt_graph_param(const bt_graph *graph, int i, bt_param_info *out);
/* Total parameter elements; a tied pair (bt_graph_tie) counts once, as in PyTorch. */
BT_API int64_t bt_graph_total_params(const bt_graph *graph);
/* Ties parameter `param` to the earlier parameter `source` (same shape): both start from the
 * source's initial values, their gradients are summed before every update (across stages too,
 * each stage keeping its own copy), so the copies stay bit-identical, and checkpoints store the
 * tensor once, under the source's name (`tie: wte` on a language model's head). */
BT_API bt_status bt_graph_tie(bt_graph *graph, const char *param, const char *source);
/* Activation recomputation: layer's (layer -1: every layer's) outputs and saved state are not
 * kept per micro-batch during forward but recomputed, from the values the stage keeps, just
 * before the micro-batch's backward (on = 0 turns it off). A value sent to a later stage is always
 * kept. Results are bit-identical (dropout masks come from the same seeds); the stage keeps one
 * shared copy of the recomputed values instead of one per micro-batch in flight, and each
 * backward pays the recomputed layers' forward again (docs/recompute.md). Set it before
 * bt_engine_create. */
BT_API bt_status bt_graph_set_recompute(bt_graph *graph, int layer, int on);
/* 1 when the last layer produces one scalar per sample (a loss), so the graph can train. */
BT_API int bt_graph_is_trainable(const bt_graph *graph);

#ifdef __cplusplus
}
#endif
#endif
