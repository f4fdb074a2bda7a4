/* plan/plan.h: a model cut into stages and placed on devices. A plan assigns every layer to exactly
 * one stage, stages hold contiguous runs of layers in graph order, and each stage names its device.
 * It also lists every value that crosses a cut (producer stage -> consumer stage, straight to the
 * consumer even when it skips stages) so the executor can build channels and `baton check` can
 * print the bytes per boundary. Built from the parallel config (uniform, params, balance, layout,
 * per-layer stage:) and validated before anything runs. */
#ifndef BT_PLAN_H
#define BT_PLAN_H

#include <stddef.h>

#include "baton/config.h"
#include "baton/graph.h"

typedef struct bt_crossing {
    int value;                 /* graph value id */
    int src, dst;              /* producing stage (or -1 for a graph input) and consuming stage */
    size_t bytes_per_sample;
} bt_crossing;

typedef struct bt_plan {
    int stages;
    int n_layers;
    int *layer_stage;          /* [n_layers] */
    int first_layer[BT_MAX_STAGES], n_stage_layers[BT_MAX_STAGES];
    int first_node[BT_MAX_STAGES], n_stage_nodes[BT_MAX_STAGES];
    char device[BT_MAX_STAGES][32];
    int n_crossings;
    bt_crossing *crossings;    /* stage-to-stage values and the inputs each stage reads */
} bt_plan;

/* Builds a plan for graph from cfg. devices "auto" means one cpu:N per stage (stages 0: one). A
 * device list sets the stage count when cfg->stages is 0 and must match it otherwise. Errors
 * (too many stages, balance not summing to the layer count, a layout naming an unknown or
 * misordered layer, pinned stages out of order) return BT_ERR_MODEL with a message.
 * BT_PARTITION_PROFILE reads the costs in cfg->profile and never measures: without them (and more
 * than one stage) it is BT_ERR_INVALID_ARG naming what is missing; a profile of another graph is
 * BT_ERR_MODEL. */
bt_status bt_plan_build(const bt_graph *graph, const bt_parallel_config *cfg, bt_plan **out);

/* The devices a plan of cfg would use, one per stage (devices "auto": cpu:0..cpu:stages-1), and
 * the stage count; the same checks and messages as bt_plan_build. */
bt_status bt_plan_resolve_devices(const bt_parallel_config *cfg, int n_layers, char (*device)[32],
                                  int *n_stages);
/* 1 when bt_plan_build would cut graph by measured costs: partition profile, no layer pinned with
 * stage:, more than one stage. The caller then measures (bt_profile_measure_for_plan) first. */
int bt_plan_needs_profile(const bt_graph *graph, const bt_parallel_config *cfg);
/* Splits "cpu:0, cpu:1" into device[] (names only: a kind's syntax is checked where devices are
 * opened); returns the count, or -1 for an empty or overlong entry or more than max. */
int bt_plan_split_devices(const char *list, char (*device)[32], int max);
/* The reverse: device[0..n) joined as "cpu:0,cpu:1" into list (BT_MAX_STAGES * 33 bytes hold
 * any n <= BT_MAX_STAGES). */
void bt_plan_join_devices(const char (*device)[32], int n, char *list, size_t size);
/* The plan whose stage k holds layers [first_layer[k], first_layer[k+1]) (first_layer[0] = 0,
 * first_layer[stages] = the layer count, no stage empty), devices unnamed: how `baton plan`
 * prices a placement with the memory model. BT_ERR_INVALID_ARG for cuts that are not that. */
bt_status bt_plan_from_cuts(const bt_graph *graph, int stages, const int *first_layer, bt_plan **out);
void bt_plan_destroy(bt_plan *plan);

/* Bytes per sample stage s sends to later stages (what it holds: plan/memory.h). */
size_t bt_plan_send_bytes(const bt_plan *plan, int stage);

#endif
