/* baton/profile.h: measured costs of a model's layers, the input of `partition: profile`.
 *
 * Planning never opens a device: a plan cut by measured costs reads them from a bt_profile the
 * caller made first, by measuring (bt_profile_measure, or bt_profile_measure_for_plan for the
 * quick measurement `partition: profile` asks for) or by loading a `baton profile` file
 * (bt_profile_load), and hands it over in bt_parallel_config.profile. A plan asked for
 * BT_PARTITION_PROFILE on more than one stage without one fails with BT_ERR_INVALID_ARG.
 *
 * A profile holds, per layer, forward, backward and optimizer-step times of one micro-batch on
 * one device of each kind named, the bytes the planner's memory model needs, and the transfer
 * rate between every ordered pair of devices (docs/profiling.md). The struct is opaque here. */
#ifndef BATON_PROFILE_H
#define BATON_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/api.h"
#include "baton/config.h"
#include "baton/graph.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_profile bt_profile;

typedef struct bt_profile_params {
    const char *devices;                /* "cpu:0,cpu:1": one measurement per kind, rates per pair */
    int64_t batch;                      /* samples per step */
    int microbatches;                   /* the micro-batch measured is batch / microbatches */
    int training;                       /* 1: measure backward and optimizer step too */
    bt_optimizer_config optimizer;      /* decides optimizer-state bytes */
    int repeats;                        /* timed runs per measurement (median) */
    int warmup;                         /* untimed runs first */
    int threads;                        /* compute threads per device */
    size_t transfer_bytes;              /* message size for the transfer rates */
    uint64_t seed;                      /* fills the buffers */
    int fastest;                        /* 1: keep each layer's fastest run, not the median (a
                                           busy machine only ever slows a run down) */
    int handoff_repeats;                /* training: alternations measuring the turn hand-off
                                           (bt_profile_measure_handoff, up to 64); 0: not
                                           measured, the profile's handoff_ms is 0 */
    bt_dtype precision;                 /* the compute precision measured, as the engine's
                                           bt_engine_params.precision: BT_F32, BT_BF16 or BT_F16
                                           (ops get it in their call, activations and complete
                                           gradients are rounded to it, weights read through a
                                           rounded copy); the profile records it */
} bt_profile_params;

/* Defaults: devices "cpu:0", batch 32, 1 micro-batch, training, AdamW, 10 repeats after 2
 * warm-ups, 1 thread, 8 MiB transfers, seed 0, 5 hand-off alternations, precision f32. */
BT_API void bt_profile_params_init(bt_profile_params *params);

/* Measures graph (a model named model_name, may be NULL) on the devices of params: opens them,
 * runs every layer alone through the backend, closes them. The caller owns *out
 * (bt_profile_destroy). BT_ERR_INVALID_ARG for bad parameters (batch not divisible by
 * microbatches, training an untrainable graph); backend statuses pass through. */
BT_API bt_status bt_profile_measure(const bt_graph *graph, const char *model_name,
                             const bt_profile_params *params, bt_profile **out);

/* What a turn hand-off between two stage threads on one device costs, in ms (*ms >= 0): wake-up
 * latency and a cold cache, which interleaved 1F1B pays at nearly every instruction and which no
 * instruction's own time contains. Measured with `devices` pairs of threads passing turns the
 * way the engine does (1 to BT_PROFILE_MAX_HANDOFF_DEVICES), against the same work without
 * hand-offs, median of `repeats` alternations. bt_profile_measure stores it in the profile
 * (handoff_ms), so it refuses a training profile of more devices than that before it measures
 * anything (BT_ERR_INVALID_ARG). */
#define BT_PROFILE_MAX_HANDOFF_DEVICES 16
BT_API bt_status bt_profile_measure_handoff(int devices, int repeats, double *ms);

/* The quick measurement behind `partition: profile`: graph measured briefly (micro-batches of 32
 * samples, AdamW state, 3 repeats after 1 warm-up; training unless parallel->schedule is the
 * stream schedule or the graph has no loss) on the devices parallel names, one per stage, at
 * `precision` (the engine's bt_engine_params.precision; a forward-only measurement takes it too,
 * pass BT_F32 where the engine serves in f32). *out is NULL when the plan needs no costs (another
 * partition, layers pinned with stage:, or one stage): the result can always be stored in
 * parallel->profile. The caller owns *out. BT_ERR_INVALID_ARG for a precision other than f32,
 * bf16 or f16. */
BT_API bt_status bt_profile_measure_for_plan(const bt_graph *graph, const bt_parallel_config *parallel,
                                      bt_dtype precision, bt_profile **out);

/* Writes the profile as JSON to path (atomically: readers see the old file or the new). */
BT_API bt_status bt_profile_save(const bt_profile *profile, const char *path);
/* Reads and validates a profile file. BT_ERR_IO naming the file and the offending field. */
BT_API bt_status bt_profile_load(const char *path, bt_profile **out);
/* BT_ERR_MODEL unless the profile's layers are the graph's (same count, names and ops, in order);
 * the message names what differs and `what` (the profile's file name, or NULL). */
BT_API bt_status bt_profile_check_graph(const bt_profile *profile, const bt_graph *graph, const char *what);
/* BT_ERR_MODEL unless the profile was measured at `precision` (the precision the model
 * trains, or serves, at): f32 costs do not price a bf16 model. The message names `what` (the
 * profile's file name, or NULL), the profile's precision and the one asked for. */
BT_API bt_status bt_profile_check_precision(const bt_profile *profile, bt_dtype precision, const char *what);
/* The compute precision a profile was measured at (BT_F32 for files written before profiles
 * recorded it). */
BT_API bt_dtype bt_profile_precision(const bt_profile *profile);
/* Frees a profile; accepts NULL and half-built profiles. */
BT_API void bt_profile_destroy(bt_profile *profile);

#ifdef __cplusplus
}
#endif

#endif
