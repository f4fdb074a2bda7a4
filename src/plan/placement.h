/* plan/placement.h: from a profile to a placement. A profile's measured per-layer costs and bytes
 * become a bt_partition_problem (one device slot per listed device, stage k on device k unless
 * the order may be permuted); bt_partition_optimal chooses the cuts; the chosen stages are then
 * priced again with the schedule simulator to predict the step time, the bubble and each stage's
 * idle share, and rendered as the `parallel:` YAML to paste into the model file.
 *
 * Cost model (per micro-batch of the planned size, docs/profiling.md):
 *   - compute of layer l on device d: (fwd + bwd) of l on d's kind, scaled linearly from the
 *     profile's micro-batch size to the planned one;
 *   - transfer after layer l: cut bytes of l (skip connections included) x micro-batch size,
 *     once forward and once backward when training, at the slowest measured rate between the
 *     planned devices (GB/s = 1e9 bytes/s); unknown rates count as free and are reported;
 *   - memory of a stage: the search adds up per-layer bytes from the profile (parameters,
 *     gradients and optimizer state, plus activations times the micro-batches the schedule keeps
 *     in flight there); when the graph is given, the chosen placement's stages are priced again
 *     with the memory model the engine allocates from (plan/memory.h: slots, value gradients,
 *     workspace, channel buffers), which is what the report shows and what must fit;
 *   - device capacity: --memory when given, else for cpu devices the machine's physical memory
 *     shared equally by the cpu devices of the plan (they share one host), else unlimited.
 *   - across processes (cross_rank): every boundary also pays the link between ranks measured by
 *     `baton profile` under mpirun, latency + bytes / bandwidth per message;
 * The simulator adds the optimizer step (the slowest stage's) and splits transfers by direction.
 *
 * Data flow: profile.h -> here -> partition.h + sched.h; `baton plan` prints the result and
 * plan.c uses bt_placement_cut for `partition: profile`. Never prints or measures. */
#ifndef BT_PLAN_PLACEMENT_H
#define BT_PLAN_PLACEMENT_H

#include <stdint.h>

#include "baton/config.h"
#include "baton/graph.h"
#include "baton/status.h"
#include "plan/partition.h"
#include "plan/profile.h"

typedef struct bt_placement_params {
    const char *devices;        /* one per stage, in pipeline order: "cpu:0,cpu:1" */
    int microbatches;           /* 0: the profile's */
    bt_schedule_kind schedule;
    uint64_t memory;            /* bytes each device offers; 0: the device's own */
    int permute;                /* 1: the planner may reorder the devices along the pipeline */
    /* The model itself, for the engine's memory model (NULL: the profile's per-layer sums):
     * stage memory is then exactly what bt_engine_create allocates for these stages. */
    const bt_graph *graph;
    bt_dtype dtype;             /* the engine's dtype (f32) */
    bt_dtype precision;         /* f32, bf16 or f16 (compute copies of the weights) */
    int optimizer_slots;        /* state buffers per parameter when training */
    /* Activation recomputation (docs/recompute.md): -1 as the graph's layer flags (none without
     * a graph), 0 none, 1 every layer (train.recompute: stage). A recomputed layer's forward is
     * paid again in each backward (a stage's bwd_ms includes it) and, with a graph, the memory
     * model keeps one shared copy of its activations instead of one per micro-batch in flight. */
    int recompute;
    /* A job across processes (docs/distributed.md): 1 puts every stage on its own rank, so every
     * boundary between stages also crosses the link between ranks, priced from the profile's
     * links (bt_profile_link_model: latency + bytes / bandwidth per message, once forward and
     * once backward when training) on top of the same-process transfer; a profile without links
     * is then an error. 0: one process. */
    int cross_rank;
    int64_t batch;              /* samples per step of this pipeline (a replica's share); 0: the profile's */
} bt_placement_params;

/* Defaults: devices "cpu:0", the profile's micro-batches, 1F1B, devices' own memory, no
 * permutation, no graph (f32, f32 precision, no optimizer state). */
void bt_placement_params_init(bt_placement_params *params);

/* The partition problem for a profile, with the arrays it points into. */
typedef struct bt_placement_problem {
    bt_partition_problem pr;    /* pr.cost etc. point into the arrays below */
    int n_devices;
    char devices[BT_MAX_STAGES][BT_PROFILE_DEVICE_LEN];
    int kind[BT_MAX_STAGES];    /* the profile kind each device runs as */
    uint64_t capacity[BT_MAX_STAGES];
    int capacity_known[BT_MAX_STAGES];
    double *cost, *xfer;        /* [devices * layers], [layers] */
    uint64_t *static_bytes, *act_bytes; /* [layers] */
    int training;
    int64_t batch, microbatch_size;
    double time_scale;          /* planned micro-batch size / profiled one */
    double xfer_gb_per_s;       /* rate the planner assumed (0: unknown, transfers free) */
    int cross_rank;             /* every boundary crosses ranks: the link term below applies */
    double link_latency_ms, link_gb_per_s;
} bt_placement_problem;

/* Builds the problem. BT_ERR_INVALID_ARG when a device's kind was not profiled, the profile's
 * batch does not split into the micro-batches, or there are more devices than layers. */
bt_status bt_placement_problem_build(const bt_profile *profile, const bt_placement_params *params,
                                     bt_placement_problem *out);
/* Frees the arrays; accepts a zeroed or half-built problem. */
void bt_placement_problem_free(bt_placement_problem *pb);

typedef struct bt_placement_stage {
    int first_layer, n_layers;
    char device[BT_PROFILE_DEVICE_LEN];
    int64_t params;
    uint64_t static_bytes;      /* parameters + gradients + optimizer state */
    uint64_t activation_bytes;  /* per micro-batch in flight (with a graph: one activation slot) */
    int inflight;
    uint64_t peak_bytes;        /* static + inflight x activations; with a graph, the memory
                                 * model's device total (buffers and workspace included) */
    uint64_t capacity;          /* UINT64_MAX: unknown */
    double fwd_ms, bwd_ms, step_ms;     /* per micro-batch (step: per step); bwd_ms includes
                                         * recomputation (recompute_ms of it) */
    double recompute_ms;
    double b_ms, w_ms;                  /* split backward (zb-h1): the input-gradient part B
                                         * (with recomputation) and the weight-gradient part W */
    double send_act_ms, send_grad_ms;   /* to the next / previous stage (the link's part included) */
    double link_act_ms, link_grad_ms;   /* cross_rank: the link's part of them */
    double stage_ms;            /* what the planner balanced: compute + outgoing transfer */
    double idle;                /* predicted idle share of the step, 0..1 */
} bt_placement_stage;

typedef struct bt_placement {
    int stages, microbatches;
    int64_t batch, microbatch_size;
    bt_schedule_kind schedule;
    double time_scale;
    bt_placement_stage stage[BT_MAX_STAGES];
    double bottleneck_ms;       /* the largest stage_ms */
    double step_ms, bubble;     /* simulated step time and bubble */
    int recompute;              /* 1: some layer is recomputed (the params' choice or the graph's) */
    int unknown_rates;          /* 1: some transfer rate was not in the profile (counted free) */
    char *layout;               /* "a,b|c|d" */
    char *yaml;                 /* the parallel: section to paste */
} bt_placement;

/* The optimal placement of the profile on params->devices, simulated. The caller frees out with
 * bt_placement_clear. bt_partition_optimal's statuses pass through (a placement that fits no
 * device's memory names the stage, device and bytes). */
bt_status bt_placement_plan(const bt_profile *profile, const bt_placement_params *params,
                            bt_placement *out);
/* The same report for given cuts (first_layer[stages + 1]) with stage k on device k: prices a
 * hand-made or uniform placement for comparison. Memory is not enforced. */
bt_status bt_placement_evaluate(const bt_profile *profile, const bt_placement_params *params,
                                const int *first_layer, bt_placement *out);
/* Frees the strings of a placement; accepts a zeroed one. */
void bt_placement_clear(bt_placement *pl);

/* `partition: profile`: the optimal cut of the n devices (one per stage, cfg's schedule) for the
 * measured costs in profile, written to first_layer[n + 1]. Measures nothing. */
bt_status bt_placement_cut(const bt_profile *profile, const bt_parallel_config *cfg,
                           const char (*devices)[32], int n, int *first_layer);

#endif
