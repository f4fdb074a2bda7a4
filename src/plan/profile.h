/* plan/profile.h: the cost table the optimal planner reads: struct bt_profile (opaque in the
 * public baton/profile.h) and its queries. Nothing here measures or opens a device: measuring
 * lives in src/profile (measure.c, layer_run.c), the JSON file format in src/profile/profile_file.c.
 *
 * A profile holds, per layer: forward, backward and optimizer-step times (median of `repeats`
 * timed runs after `warmup` untimed ones) of one micro-batch on one device of each kind named in
 * the device list; and the bytes the planner's memory model needs: parameters, gradients,
 * optimizer state, activations kept per sample (every node output plus the state the forward
 * saves for the backward), the layer's output per sample, and the bytes per sample that cross a
 * cut placed right after the layer (skip connections included: every value produced at or before
 * the layer and read after it). Between every ordered pair of listed devices it holds a transfer
 * rate, measured the way the executor moves a message: device -> host buffer -> device (on cpu:N
 * that is two memcpys).
 *
 * Invariants: layers are in graph order and match the graph they were measured on (names and
 * ops; bt_profile_check_graph); every time and byte count is finite and >= 0; kinds[] holds each
 * device kind once; times[l * n_kinds + k] is layer l on kind k.
 *
 * Data flow: src/profile measures or loads -> bt_profile -> placement.h (`baton plan`, and
 * plan.c for `partition: profile` through bt_parallel_config.profile). Reads the graph only. */
#ifndef BT_PLAN_PROFILE_H
#define BT_PLAN_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/config.h"
#include "baton/graph.h"
#include "baton/profile.h"
#include "baton/status.h"

#define BT_PROFILE_MAX_KINDS 4
#define BT_PROFILE_DEVICE_LEN 32

typedef struct bt_profile_time {
    double fwd_ms, bwd_ms;   /* one micro-batch through the layer's nodes */
    double step_ms;          /* one optimizer update of the layer's parameters (0 without) */
    /* the backward split as zero-bubble schedules run it: B (input gradients, and the fused
     * backward of nodes without a weight kernel) and W (the deferred weight gradients); measured
     * separately, so b_ms + w_ms is close to bwd_ms but not equal to it. Profiles written before
     * they existed read as b_ms = bwd_ms, w_ms = 0. */
    double b_ms, w_ms;
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

/* One ping-pong measurement between two ranks of a job (`baton profile` under mpirun): a message
 * of `bytes` bytes took oneway_ms from from_rank to to_rank (half the median round trip). */
typedef struct bt_profile_link {
    int from_rank, to_rank;
    uint64_t bytes;
    double oneway_ms;                   /* > 0 */
} bt_profile_link;

#define BT_PROFILE_MAX_LINKS 256

struct bt_profile {
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
    bt_dtype precision;                 /* the compute precision measured: BT_F32, BT_BF16 or
                                           BT_F16 (the file's "precision"; f32 in older files) */
    int threads, repeats, warmup;
    int n_layers;
    bt_profile_layer *layers;           /* [n_layers] */
    bt_profile_time *times;             /* [n_layers * n_kinds] */
    int n_transfers;
    bt_profile_transfer *transfers;     /* [n_transfers] */
    int n_links;                        /* 0: measured in one process */
    bt_profile_link *links;             /* [n_links] */
    double handoff_ms;                  /* a turn hand-off between two stage threads on one device
                                           (bt_profile_measure_handoff); 0 in older files */
};

/* The kind of a device name: "cpu" of "cpu:1" (truncated to size - 1). */
void bt_profile_device_kind(const char *device, char *kind, size_t size);
/* Index of a device kind ("cpu") in profile->kinds, or -1. */
int bt_profile_kind_index(const bt_profile *profile, const char *kind);
/* Times of layer l on kind k. */
const bt_profile_time *bt_profile_time_at(const bt_profile *profile, int layer, int kind);
/* GB/s from device `from` to `to`: the measured pair, else the slowest pair measured between the
 * same two kinds, else 0 (unknown). */
double bt_profile_rate(const bt_profile *profile, const char *from, const char *to);

/* The link between ranks as the planner prices it: for every measured pair of ranks, latency = the
 * one-way time of its smallest message and bandwidth = the slope between its smallest and largest
 * (GB/s = 1e9 bytes/s); the slowest pair's of each. 0 when the profile has no links. */
int bt_profile_link_model(const bt_profile *profile, double *latency_ms, double *gb_per_s);
/* ms for a message of `bytes` over that link: latency + bytes / bandwidth (0 bytes: 0 ms). */
double bt_profile_link_ms(double latency_ms, double gb_per_s, double bytes);

#endif
