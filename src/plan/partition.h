/* plan/partition.h: cutting an ordered list of layers into contiguous pipeline stages.
 *
 * Three ways, all producing first_layer[stages + 1] with first_layer[0] = 0, first_layer[stages] =
 * layers and first_layer[k] < first_layer[k+1] (every layer in exactly one stage, no stage empty):
 * - bt_partition_uniform: equal layer counts (the remainder goes to the last stages, which hold
 *   fewer in-flight activations under 1F1B);
 * - bt_partition_by_weight: contiguous and optimal for a weight vector (parameter counts): the
 *   heaviest stage is as light as possible, and among those cuts the largest layer count is as
 *   small as possible (so zero-weight layers spread out instead of piling up);
 * - bt_partition_optimal: the planner. From measured per-layer costs on every device it chooses
 *   the cut points and which device runs which stage, minimising the bottleneck stage time
 *   (compute plus outgoing transfer) subject to every stage fitting its device's memory. Exact:
 *   a dynamic programme over (layers placed, devices used), with a bitmask over devices when their
 *   order along the pipeline is free to choose. bt_partition_brute_force enumerates every cut and
 *   every device order; it exists for the tests, which check that both agree.
 *
 * Cuts never fall where no_cut forbids (inside a block copy): the optimum, the brute force and
 * the evaluation of given cuts all respect it.
 *
 * Memory model of a stage k on device d covering layers [a, b):
 *   bytes = sum static_bytes[a..b) + inflight(k) * sum act_bytes[a..b)
 * where inflight(k) = bt_schedule_max_inflight of the schedule (kind, stages, microbatches) at
 * stage k: 1F1B min(p-k, m), GPipe m, streaming 1.
 * Stage time: sum cost[d][a..b) + (k < stages-1 ? xfer[b-1] : 0).
 *
 * Data flow: plan.c (bt_plan_build) calls the simple partitions for `partition: uniform` and
 * `partition: params`; placement.c (bt_placement_plan, bt_placement_quick_cut) feeds measured
 * costs into bt_partition_optimal for `baton plan` and `partition: profile`, and `baton plan` also
 * shows the uniform cut for comparison. The optimum reads sched/ only for the in-flight counts.
 * Nothing here sees the graph: layers are indices. */
#ifndef BT_PLAN_PARTITION_H
#define BT_PLAN_PARTITION_H

#include <stdint.h>

#include "baton/config.h"
#include "baton/status.h"

/* Devices whose order the optimal planner may permute: the search keeps 2^devices states. */
#define BT_PARTITION_MAX_PERMUTED_DEVICES 12

/* Capacity of a device without a memory limit. */
#define BT_PARTITION_UNLIMITED UINT64_MAX

typedef struct bt_partition_problem {
    int layers;                   /* L >= 1, in pipeline order */
    int devices;                  /* D >= 1: device slots (stages sharing a GPU: two slots) */
    int stages;                   /* 1 <= p <= min(L, D, BT_MAX_STAGES) */
    const double *cost;           /* [D * L]: cost[d * L + l] ms of forward + backward of layer l
                                   * for one micro-batch on device d; finite, >= 0 */
    const double *xfer;           /* [L]: ms to hand layer l's output to the next stage when a cut
                                   * follows layer l (xfer[L-1] unused); NULL: free */
    const uint64_t *static_bytes; /* [L]: parameters + gradients + optimizer state; NULL: 0 */
    const uint64_t *act_bytes;    /* [L]: activations kept per micro-batch in flight; NULL: 0 */
    const uint64_t *capacity;     /* [D]: bytes each device offers; NULL: all unlimited */
    int microbatches;             /* m >= 1 */
    bt_schedule_kind schedule;    /* decides the in-flight micro-batches per stage position */
    int permute;                  /* 0: stage k runs on device k (devices 0..p-1 are used);
                                   * 1: any p distinct devices in any order
                                   * (D <= BT_PARTITION_MAX_PERMUTED_DEVICES) */
    int chunks;                   /* model chunks per physical device (interleaved 1F1B: v, stage
                                   * k on device slot k, slots k and k + p/v the same device);
                                   * 0 or 1: one stage per device. Only the in-flight counts read
                                   * it. */
    const unsigned char *no_cut;  /* [L]: no_cut[l] = 1 forbids a cut right after layer l (inside
                                   * a repeated block of the model file: a block copy is one unit
                                   * to cut between); NULL: a cut may follow any layer */
} bt_partition_problem;

typedef struct bt_partition_plan {
    int stages;
    int first_layer[BT_MAX_STAGES + 1]; /* stage k owns layers [first_layer[k], first_layer[k+1]) */
    int device[BT_MAX_STAGES];          /* device slot that runs stage k */
    int inflight[BT_MAX_STAGES];        /* micro-batches stage k holds at once */
    double stage_time[BT_MAX_STAGES];   /* ms: compute + outgoing transfer */
    uint64_t stage_bytes[BT_MAX_STAGES];
    double bottleneck;                  /* ms: the largest stage_time */
} bt_partition_plan;

/* Fills the problem with defaults: no layers, no devices, 1 stage, 1 micro-batch, 1F1B, no
 * permutation, every pointer NULL. */
void bt_partition_problem_init(bt_partition_problem *pr);

/* The optimal placement. Ties between equally fast placements go to the one the search meets
 * first (smaller device masks, then earlier cuts); the bottleneck is what is optimal.
 * BT_ERR_INVALID_ARG for a malformed problem, or when no placement fits in memory: the message then
 * names the device and stage of the placement that comes closest, with the bytes it needs and the
 * bytes the device has. BT_ERR_NOMEM when the search tables cannot be allocated. */
bt_status bt_partition_optimal(const bt_partition_problem *pr, bt_partition_plan *out);

/* The same optimum by enumerating every cut combination and every device order (exponential; for
 * tests on small problems: at most 16 layers and 8 devices). Same statuses. */
bt_status bt_partition_brute_force(const bt_partition_problem *pr, bt_partition_plan *out);

/* Fills out (stage_time, stage_bytes, inflight, bottleneck) for the given cuts and devices, which
 * the caller sets in out->stages, out->first_layer and out->device first. Checks the cuts and
 * devices; does not check memory. Lets callers price a hand-made placement. */
bt_status bt_partition_evaluate(const bt_partition_problem *pr, bt_partition_plan *out);

/* Uniform: stage k gets layers/stages layers, the last layers % stages stages one more.
 * first_layer has room for stages + 1 entries. BT_ERR_INVALID_ARG unless 1 <= stages <= layers. */
bt_status bt_partition_uniform(int layers, int stages, int *first_layer);

/* Balanced by weight[layers] (finite, >= 0): minimises the heaviest stage, then the largest layer
 * count among those. first_layer has room for stages + 1 entries. BT_ERR_INVALID_ARG unless
 * 1 <= stages <= layers and the weights are valid. */
bt_status bt_partition_by_weight(int layers, const double *weight, int stages, int *first_layer);

#endif
