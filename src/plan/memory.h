/* plan/memory.h: the one memory model. What a pipeline stage holds, per lifetime class, and where
 * every value and node state sits inside one activation slot. The engine lays out and allocates its
 * buffers from this (exec/layout.c), refuses a plan that does not fit from it, and `baton plan`
 * prints it for the stages it chooses (placement.c); bt_memory_layer gives one layer's share, the
 * per-layer bytes a profile records. One function computes a stage, so they cannot disagree: after
 * allocating, the engine asserts that it allocated exactly these bytes.
 *
 * A stage's device memory (bytes, each buffer rounded as allocated):
 *   weights      master weights, plus a rounded compute copy under mixed precision
 *   gradients    parameter gradients (training)
 *   optimizer    optimizer state, optimizer_slots buffers per parameter (training)
 *   activations  n_slots activation slots of slot_bytes each: every value the stage reads or
 *                produces (values arriving by a device path excepted: they are read in place from
 *                the channel buffer), each rounded up to 64 bytes, then every node's saved state,
 *                then (split backward, zero-bubble schedules) for every node with a separate
 *                weight gradient a copy of its output's gradient, kept from B until its W: in
 *                the space of the node's own output, dead once B has run, unless a node on the
 *                stage whose W comes later reads that output (then a space of its own);
 *                nodes of recomputed layers (bt_graph_set_recompute) are left out of the slots
 *                and take one shared recompute region instead (recompute_bytes), unless their
 *                output is sent to a later stage: their values are rebuilt from the slot's kept
 *                values just before the micro-batch's backward
 *                bf16 storage (training under precision bf16 on a stage whose backend can,
 *                bf16_kept): the floating values a slot keeps (every one the executor rounds, so
 *                all but the graph's output) take 2 bytes an element in the slot, as the upper
 *                halves of their f32 values (exact: they are bf16 values), and one f32 working
 *                copy each in a work region after the recompute region (work_bytes) where the ops
 *                read and write them; two values share working space when no node of the stage
 *                needs both (each value is live from its producer, or node 0 for a received or
 *                fed one, to its last reader on the stage, or the stage's end if it is sent on).
 *                Saved state stays as the op wrote it. A stage uses it where it takes fewer bytes
 *                (BT_KEEP_AUTO) or always (BT_KEEP_BF16); activations_f32 is the f32 figure
 *   value_grads  one set of value gradients, the stage's outgoing values first (training)
 *   workspace    the largest workspace one node asks for
 *   loss_seed    one micro-batch of the loss gradient's seed
 *   recv_buffers channel buffers on this device, a whole step's micro-batches: activations from
 *                earlier stages and (training) gradients from later ones, unless that channel
 *                goes through host memory
 *   recv_scratch (training) a device buffer for the largest gradient message arriving through
 *                host memory
 * and host memory it charges to the host: host_channels, the host-path channel buffers it sends
 * into. Pinned host buffers for losses and staging chunks are not counted.
 *
 * Data flow: graph + plan (layer -> stage, crossings) + the schedule's slot counts in; sizes and
 * offsets out. Never allocates device memory, never sees exec/. */
#ifndef BT_PLAN_MEMORY_H
#define BT_PLAN_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "baton/config.h"
#include "baton/status.h"
#include "baton/graph.h"
#include "plan/plan.h"

/* Every buffer in a slot and in the value gradients starts on this boundary. */
#define BT_MEMORY_ALIGN 64

typedef struct bt_memory_params {
    int64_t microbatch_size;   /* samples per micro-batch, >= 1 */
    int microbatches;          /* per step: channel buffers hold every one */
    bt_dtype dtype;            /* BT_F32 or BT_F64: floating values and parameters */
    bt_dtype precision;        /* BT_F32, or BT_BF16 / BT_F16: parameters keep a compute copy */
    int training;              /* 0: no gradients, optimizer state or gradient channels */
    int optimizer_slots;       /* state buffers per parameter (training) */
    const int *n_slots;        /* [stages]: activation slots (bt_schedule_max_inflight); NULL: 1 */
    /* [stages * stages]: nonzero at [a * stages + b] when messages from stage a to b go through
     * host memory (different backends, or forced); NULL: none do */
    const unsigned char *host_path;
    int split_backward;        /* the schedule defers weight gradients (W): slots keep their stash */
    /* [graph layers]: 1 where the layer is recomputed; NULL: the graph's own flags
     * (bt_graph_set_recompute). The planner prices recomputation choices through it. */
    const unsigned char *recompute;
    /* [stages]: whether a stage may keep its activations as bf16 (BT_KEEP_*; only training with
     * dtype f32 and precision bf16 takes it); NULL: none does. The engine allows it on backends
     * with store_bf16 (cpu), by BATON_BF16_STASH (bt_memory_bf16_mode). */
    const unsigned char *bf16_kept;
} bt_memory_params;

/* bf16_kept values: f32 slots; bf16 where the stage's activations take fewer bytes; bf16 always. */
enum { BT_KEEP_F32 = 0, BT_KEEP_AUTO = 1, BT_KEEP_BF16 = 2 };

/* BATON_BF16_STASH from the environment: unset or "auto" BT_KEEP_AUTO, "1" BT_KEEP_BF16, "0"
 * BT_KEEP_F32; anything else is BT_ERR_INVALID_ARG naming it. */
bt_status bt_memory_bf16_mode(int *mode);

/* Defaults: one micro-batch of one sample, f32, f32 precision, training, no optimizer state, one
 * slot per stage, no host paths. */
void bt_memory_params_init(bt_memory_params *params);

typedef struct bt_stage_memory {
    size_t weights, gradients, optimizer;
    size_t activations, value_grads, workspace, loss_seed, recv_buffers, recv_scratch;
    size_t device_total;       /* the sum of the classes above */
    size_t host_channels;      /* host memory: host-path channel buffers this stage sends into */
    int n_slots;
    size_t slot_bytes;         /* one activation slot (kept values and state only) */
    size_t recompute_bytes;    /* the shared region of recomputed values and state (in activations) */
    int bf16_kept;             /* 1: the slots keep floating values as bf16, worked on in work_bytes */
    size_t work_bytes;         /* bf16_kept: the f32 working copies, after the recompute region */
    size_t activations_f32;    /* what activations would be with f32 slots (= activations when
                                  bf16_kept is 0), and one such slot */
    size_t slot_bytes_f32;
    int n_recomputed;          /* the stage's nodes that are recomputed */
    size_t outgoing_grad_bytes; /* the head of value_grads a gradient receive zeroes */
    int64_t n_params;          /* parameter elements */
} bt_stage_memory;

/* Offsets into one slot and into the value gradients; the caller owns the arrays. */
typedef struct bt_stage_layout {
    /* [graph values]: offset in a slot, or -1 if the stage never sees it; an offset at or past
     * slot_bytes is in the recompute region (offset - slot_bytes), as for saved_offset */
    int *value_offset;
    int *grad_offset;          /* [graph values]: offset in the value gradients, or -1 */
    size_t *saved_offset;      /* [stage nodes]: each node's saved state in a slot */
    size_t *wgrad_offset;      /* [stage nodes]: the output-gradient stash W reads, in a slot;
                                  BT_MEMORY_NO_WGRAD where the node has no deferred W (may be NULL);
                                  where the node's output is kept as bf16, the stash is bf16 too */
    /* [graph values]: bf16_kept: the offset of the value's bf16 copy in a slot, -1 where it is
     * not kept as bf16 (value_offset is then its working copy's, in the work region); may be NULL */
    int *kept_offset;
} bt_stage_layout;

#define BT_MEMORY_NO_WGRAD ((size_t)-1)
/* A stash reuses its node's output space only among a stage's first this many nodes. */
#define BT_MEMORY_MAX_STAGE_NODES 4096

/* Whether node runs a deferred weight gradient (W) under a split backward: its op gives a
 * backward_weight and it has parameters. */
int bt_memory_node_has_wgrad(const bt_graph *graph, int node);
/* Whether node (a graph node index on stage `stage`) is recomputed before backward: its layer is
 * marked (params->recompute, else the graph's flag) and its output is not sent to a later stage.
 * Under a split backward it is recomputed again before W (exec/worker.c). */
int bt_memory_node_recomputed(const bt_graph *graph, const bt_plan *plan, const bt_memory_params *params,
                              int stage, int node);

/* One micro-batch of value: i32 values stay i32, floating ones take params->dtype. */
size_t bt_memory_value_bytes(const bt_graph *graph, const bt_memory_params *params, int value);

/* The memory of stage `stage` of plan, and (layout not NULL) where each value lives. */
void bt_memory_stage(const bt_graph *graph, const bt_plan *plan, const bt_memory_params *params, int stage,
                     bt_stage_memory *out, bt_stage_layout *layout);

/* The activation bytes of a stage laid out as m with `live` micro-batches in flight: live slots,
 * and once any is live the shared regions (recomputation's, bf16's working copies). m->activations
 * is this for all its slots; the engine's measured peak (bt_memory_stats.activation_peak) and
 * `baton check`'s activations column are this too, so the two cannot disagree. */
size_t bt_memory_activations_live(const bt_stage_memory *m, int live);

/* One layer's share of a stage's memory on its own: the per-layer bytes a profile records. */
typedef struct bt_layer_memory {
    int64_t n_params;          /* parameter elements */
    size_t weights, gradients, optimizer; /* as in bt_stage_memory */
    size_t activation_bytes_per_sample;   /* node outputs + saved state, per sample */
    size_t output_bytes_per_sample;       /* the layer's own output value */
    size_t workspace;          /* the largest node workspace for one micro-batch */
} bt_layer_memory;

void bt_memory_layer(const bt_graph *graph, int layer, const bt_memory_params *params, bt_layer_memory *out);

#endif
