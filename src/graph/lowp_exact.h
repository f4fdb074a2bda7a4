/* graph/lowp_exact.h: which mixed-precision roundings cannot change a bit, from the ops'
 * lowp_exact (baton/op.h), decided on the graph alone; the executor (exec/worker_nodes.c) adds
 * what only a placement knows (the consumer on the same stage, no gradient coming back through a
 * channel), the profiler (profile/layer_run.c) assumes a value and its consumer share a stage.
 *
 * Data flow: graph (nodes, values, ops) -> worker and profiler, which then skip those passes. */
#ifndef BT_GRAPH_LOWP_EXACT_H
#define BT_GRAPH_LOWP_EXACT_H

#include "baton/status.h"
#include "baton/tensor.h"
#include "graph/graph_internal.h"

/* BATON_ROUND_SKIP: *on = 1 (unset, empty or "1": skip what these functions say is exact) or 0
 * ("0": round every value, the reference); another value is BT_ERR_INVALID_ARG naming it. */
bt_status bt_lowp_skip_enabled(int *on);

/* 1 when node `node`'s output, as its op writes it from inputs that are values of precision
 * (BT_BF16, BT_F16), is one too: its op says so for the forward, and it neither reads nor
 * writes the graph's output (the loss, never rounded). 0 under BT_F32. */
int bt_lowp_output_exact(const bt_graph *g, int node, bt_dtype precision, const char *backend);

/* The node that alone writes value v's gradient, exact (a value of precision, given its own
 * output gradient is one: that output is not the loss), or -1: v is a float value other than
 * the loss, read by exactly one input of exactly one node, that input takes a gradient, and the
 * node's op says its backward writes exact input gradients into a zeroed buffer. Whether that
 * node is on v's stage, and whether a channel adds into v's gradient, is the caller's to check. */
int bt_lowp_grad_writer(const bt_graph *g, int v, bt_dtype precision, const char *backend);

#endif
