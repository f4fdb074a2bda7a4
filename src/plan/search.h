/* plan/search.h: planning the whole layout, not pipelining included. For a model and a batch,
 * the search tries every combination of
 *   - the number of stages p (1 .. the candidate devices, the layers, max_stages),
 *   - BLAS threads per stage t (CPU devices: p x t <= cores, one count for all stages, as
 *     OpenBLAS has one per process; other devices: 1),
 *   - micro-batches m (powers of two dividing the batch, up to 32, unless listed),
 *   - the schedule (every training kind src/sched offers: bt_schedule_kinds), and for interleaved
 *     1F1B its virtual chunks per device v (2 .. BT_SEARCH_MAX_VIRTUAL, where the micro-batches
 *     come in groups of the devices and the model has units for p x v logical stages; v = 1 is
 *     plain 1F1B, searched as such); zbv with its 2 chunks per device where the model has units
 *     for 2p logical stages,
 *   - recomputation (none, and every layer when the model trains),
 * cuts each one optimally (placement.h: the partition DP, then the simulator on the chosen
 * stages), and keeps the fastest that fits in memory. Costs come from measured profiles, one per
 * (micro-batch size, threads) point the search considers (bt_search_points lists them): GEMM
 * efficiency falls with smaller micro-batches and changes with threads, so nothing is scaled
 * from another size. The caller measures (src/profile: bt_profile_measure_points); plan code
 * never opens a device.
 *
 * Data flow: profiles in (from the caller), placement.h + sched.h used, candidates out. */
#ifndef BT_PLAN_SEARCH_H
#define BT_PLAN_SEARCH_H

#include <stdint.h>

#include "baton/config.h"
#include "baton/graph.h"
#include "plan/placement.h"
#include "plan/profile.h"

#define BT_SEARCH_MAX_CHOICES 16
#define BT_SEARCH_MAX_VIRTUAL 4

typedef struct bt_search_params {
    const bt_graph *graph;      /* for the memory model (required) */
    int64_t batch;              /* samples per step */
    int training;               /* 0: forward only (the stream schedule, no recomputation) */
    bt_dtype dtype;             /* the engine's (f32, or f64: memory priced at 8 bytes) */
    bt_dtype precision;
    int optimizer_slots;
    const char *devices;        /* candidate devices in pipeline order; p stages use the first p */
    int max_stages;             /* 0: no limit beyond the devices and layers */
    int cores;                  /* CPU cores the stages' BLAS threads share (>= 1) */
    int threads;                /* > 0: only this thread count */
    int n_microbatches;         /* 0: the defaults above */
    int microbatches[BT_SEARCH_MAX_CHOICES];
    int n_schedules;            /* 0: every training kind src/sched offers */
    bt_schedule_kind schedules[BT_SEARCH_MAX_CHOICES];
    int recompute;              /* -2: search none and every layer; -1: the graph's own layer flags
                                   only (a model file that chose); 0: none; 1: every layer */
    uint64_t memory;            /* bytes per device; 0: the device's own (placement.h) */
} bt_search_params;

void bt_search_params_init(bt_search_params *params);

/* One measurement the search needs: the model's layers at this micro-batch size and thread count. */
typedef struct bt_search_point {
    int64_t microbatch_size;
    int threads;
} bt_search_point;

#define BT_SEARCH_MAX_POINTS (BT_SEARCH_MAX_CHOICES * 8)

/* The points the search will read, each once, into out[max]; *n their count. BT_ERR_INVALID_ARG
 * for parameters that leave nothing to try (no micro-batch count divides the batch, no devices). */
bt_status bt_search_points(const bt_search_params *params, bt_search_point *out, int max, int *n);

typedef struct bt_search_candidate {
    int stages, threads, microbatches; /* stages: devices used (interleaved: each runs `chunks`) */
    int chunks;                 /* interleaved 1F1B's v; 1 otherwise */
    int recompute;              /* 0 none, 1 every layer, -1 the graph's own flags */
    bt_schedule_kind schedule;
    double step_ms, bubble;     /* predicted; 0 when it could not be placed */
    uint64_t peak_bytes;        /* the largest stage's memory (equal times: the smaller wins) */
    int first_layer[BT_MAX_STAGES + 1]; /* the cuts chosen for it: stages x chunks logical stages */
    int fits;                   /* 1: placed within memory */
    char why[160];              /* when not: the reason */
} bt_search_candidate;

typedef struct bt_search_result {
    int n;
    bt_search_candidate *cand;  /* [n] every combination tried, in search order */
    int best;                   /* index of the fastest that fits; -1: none */
    int best_single, best_multi; /* fastest fitting one-stage / several-stage layouts; -1: none */
    bt_placement placement;     /* the best one, described (stages, cuts, YAML) */
    char devices[BT_MAX_STAGES * 33]; /* the best one's devices */
    char candidates[BT_MAX_STAGES * 33]; /* every candidate device (a layout of p stages: the first p) */
} bt_search_result;

/* Searches with profiles[i] measured at points[i] (as bt_search_points listed them; each must be
 * of graph, with batch params->batch). BT_ERR_NOMEM when nothing fits (the message names the
 * closest candidate's reason); the result then still lists every candidate. The caller frees out
 * with bt_search_result_clear. */
bt_status bt_search_layouts(const bt_search_params *params, const bt_search_point *points,
                            const bt_profile *const *profiles, int n_points, bt_search_result *out);
void bt_search_result_clear(bt_search_result *res);

#endif
