/* plan/profile.h: measured costs of a model's layers, the input of the optimal planner.
 *
 * A profile holds, per layer: forward, backward and optimizer-step times (median of `repeats`
 * timed runs after `warmup` untimed ones) of one micro-batch on one device of each kind named in
 * the device list, measured by running the layer's nodes through the backend table on buffers the
 * profiler allocates itself; and the bytes the planner's memory model needs: parameters,
 * gradients, optimizer state, activations kept per sample (every node output plus the state the
 * forward saves for the backward), the layer's output per sample, and the bytes per sample that
 * cross a cut placed right after the layer (skip connections included: every value produced at
 * or before the layer and read after it). Between every ordered pair of listed devices it holds a
 * transfer rate, measured the way the executor moves a message: device -> host buffer -> device
 * (on cpu:N that is two memcpys).
 *
 * Invariants: layers are in graph order and match the graph they were measured on (names and
 * ops; bt_profile_check_graph); every time and byte count is finite and >= 0; kinds[] holds each
 * device kind once; times[l * n_kinds + k] is layer l on kind k.
 *
 * Files are JSON (jansson): bt_profile_save writes atomically, bt_profile_load rejects anything
 * malformed with a message naming the file and the field ("layers[2].times.cpu.fwd_ms").
 *
 * Data flow: `baton profile` measures and saves; `baton plan` and `partition: profile` (plan.c,
 * through placement.h) turn a profile into a partition problem. Reads the graph and the backend
 * table; nothing in exec/ or above is imported. */
#ifndef BT_PLAN_PROFILE_H
#define BT_PLAN_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/config.h"
#include "baton/graph.h"
#include "baton/status.h"

#define BT_PROFILE_MAX_KINDS 4
#define BT_PROFILE_DEVICE_LEN 32

typedef struct bt_profile_time {
    double fwd_ms, bwd_ms;   /* one micro-batch through the layer's nodes */
    double step_ms;          /* one optimizer update of the layer's parameters (0 without) */
} bt_profile_time;

typedef struct bt_profile_layer {
    char *name;
    char *op;
    char *act;                          /* NULL if none */
    int64_t params;                     /* parameter elements */
    uint64_t param_bytes, grad_bytes, optimizer_bytes;
    uint64_t activation_bytes_per_sample; /* node outputs + saved state */
    uint64_t output_bytes_per_sample;     /* the layer's own output value */
    uint64_t cut_bytes_per_sample;        /* what crosses a cut right after this layer */
} bt_profile_layer;

typedef struct bt_profile_transfer {
    char from[BT_PROFILE_DEVICE_LEN], to[BT_PROFILE_DEVICE_LEN];
    uint64_t bytes;                     /* message size measured */
    double gb_per_s;                    /* 1e9 bytes per second, > 0 */
} bt_profile_transfer;

typedef struct bt_profile {
    char *model;                        /* the model's name */
    int n_devices;
    char devices[BT_MAX_STAGES][BT_PROFILE_DEVICE_LEN];
    int n_kinds;
    char kinds[BT_PROFILE_MAX_KINDS][16];                     /* "cpu", "cuda" */
    char measured_on[BT_PROFILE_MAX_KINDS][BT_PROFILE_DEVICE_LEN]; /* the device of each kind */
    int64_t batch;                      /* samples per step */
    int microbatches;
    int64_t microbatch_size;            /* batch / microbatches: the size every time is for */
    int training;                       /* 0: forward only (bwd_ms, step_ms and grads are 0) */
    char optimizer[16];                 /* "adamw", "sgd", "sgd-momentum", "none" */
    int threads, repeats, warmup;
    int n_layers;
    bt_profile_layer *layers;           /* [n_layers] */
    bt_profile_time *times;             /* [n_layers * n_kinds] */
    int n_transfers;
    bt_profile_transfer *transfers;     /* [n_transfers] */
} bt_profile;

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
} bt_profile_params;

/* Defaults: devices "cpu:0", batch 32, 1 micro-batch, training, AdamW, 10 repeats after 2
 * warm-ups, 1 thread, 8 MiB transfers, seed 0. */
void bt_profile_params_init(bt_profile_params *params);

/* Splits "cpu:0, cpu:1" into devices[] (each checked with bt_device_parse); *n receives the
 * count. BT_ERR_INVALID_ARG for an empty entry, a bad device or more than max. */
bt_status bt_profile_parse_devices(const char *list, char (*devices)[BT_PROFILE_DEVICE_LEN], int max,
                                   int *n);

/* Measures graph (a model named model_name, may be NULL) on the devices of params. The caller
 * owns *out (bt_profile_destroy). BT_ERR_INVALID_ARG for bad parameters (batch not divisible by
 * microbatches, training an untrainable graph); backend statuses pass through. */
bt_status bt_profile_measure(const bt_graph *graph, const char *model_name,
                             const bt_profile_params *params, bt_profile **out);
/* Frees a profile; accepts NULL and half-built profiles. */
void bt_profile_destroy(bt_profile *profile);

/* Writes the profile as JSON to path (atomically: readers see the old file or the new). */
bt_status bt_profile_save(const bt_profile *profile, const char *path);
/* Reads and validates a profile file. BT_ERR_IO naming the file and the offending field. */
bt_status bt_profile_load(const char *path, bt_profile **out);

/* BT_ERR_MODEL unless the profile's layers are the graph's (same count, names and ops, in order);
 * the message names what differs and `what` (the profile's file name, or NULL). */
bt_status bt_profile_check_graph(const bt_profile *profile, const bt_graph *graph, const char *what);

/* Index of a device kind ("cpu") in profile->kinds, or -1. */
int bt_profile_kind_index(const bt_profile *profile, const char *kind);
/* Times of layer l on kind k. */
const bt_profile_time *bt_profile_time_at(const bt_profile *profile, int layer, int kind);
/* GB/s from device `from` to `to`: the measured pair, else the slowest pair measured between the
 * same two kinds, else 0 (unknown). */
double bt_profile_rate(const bt_profile *profile, const char *from, const char *to);

#endif
