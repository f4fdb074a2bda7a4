/* graph/graph_internal.h: the layer graph as the rest of baton sees it (engine, plan, loader
 * tests). A graph holds values (named tensors per sample), nodes (one op application each, in a
 * valid execution order), layers (what the user wrote: one or two nodes, the second being the
 * layer's `act:`) and parameters. Values are produced by exactly one node or are graph inputs; a
 * node only reads values created before it. Public access goes through baton/graph.h. */
#ifndef BT_GRAPH_INTERNAL_H
#define BT_GRAPH_INTERNAL_H

#include <stddef.h>

#include "baton/graph.h"
#include "baton/op.h"

typedef struct bt_arg_value {
    char *name;
    bt_arg_type type;
    int64_t i;                   /* INT, BOOL */
    double f;                    /* FLOAT (also set for INT) */
    int n;                       /* INTS */
    int64_t ints[BT_ARG_MAX_INTS];
    char *s;                     /* STRING */
} bt_arg_value;

struct bt_args {
    int n, cap;
    bt_arg_value *v;
};

/* Deep copy of src into dst (dst must be zeroed); frees with bt_args_clear. */
bt_status bt_args_copy(bt_args *dst, const bt_args *src);
void bt_args_clear(bt_args *args);
const bt_arg_value *bt_args_get(const bt_args *args, const char *name);
/* "an integer", "a number", ...: how messages name what an argument must be. */
const char *bt_arg_type_name(bt_arg_type type);

typedef struct bt_value {
    char *name;
    bt_shape shape;              /* per sample */
    bt_dtype dtype;
    int producer;                /* node index, or -1 for a graph input */
    int input_index;             /* index among graph inputs, or -1 */
} bt_value;

typedef struct bt_node {
    const bt_op_def *op;
    int layer;
    int n_in;
    int in[BT_MAX_INPUTS];       /* value ids */
    int out;                     /* value id */
    int n_params;
    int params[BT_MAX_PARAMS];   /* param ids */
    bt_args args;
    size_t saved_per_sample;
    size_t ws_per_sample, ws_fixed;
    unsigned char config[BT_OP_CONFIG_MAX];
    size_t config_size;
    unsigned no_grad_mask;       /* bit i: input i never takes a gradient */
    int64_t int_hi[BT_MAX_INPUTS]; /* > 0: integer input i holds values in [0, int_hi[i]) */
} bt_node;

typedef struct bt_layer {
    char *name;
    char *op_name;
    char *act;                   /* NULL if none */
    int first_node, n_nodes;
    int stage;
    int joins_previous;          /* 1: one partitioning unit with the layer before (a block copy's
                                    later layers; see bt_graph_join_previous) */
    int recompute;               /* 1: its activations are recomputed before backward (memory.h) */
    char *file;
    int line, col;
    int n_inputs;
    char *inputs[BT_MAX_INPUTS];
} bt_layer;

typedef struct bt_param {
    char *name;                  /* "fc1.weight" */
    bt_shape shape;
    bt_init init;
    int64_t fan_in;
    double init_arg;
    int node;
    int layer;
    int tied_to;                 /* -1, or the earlier param this one is tied to (bt_graph_tie) */
} bt_param;

struct bt_graph {
    int n_values, cap_values;
    bt_value *values;
    int n_nodes, cap_nodes;
    bt_node *nodes;
    int n_layers, cap_layers;
    bt_layer *layers;
    int n_params, cap_params;
    bt_param *params;
    int n_inputs;
    int inputs[64];              /* value ids of graph inputs */
};

/* Value id by name, or -1. */
int bt_graph_find_value(const bt_graph *g, const char *name);
/* Id of the value the last layer produces (the graph output), or -1 when empty. */
int bt_graph_output_value(const bt_graph *g);
/* Marks the last layer added as part of the previous layer's partitioning unit: the partitioners
 * (uniform, params, balance) cut only between units, so a block copy of the model file stays on
 * one stage. Called by the loader for every layer of a block copy but the first. */
void bt_graph_join_previous(bt_graph *g);

#endif
