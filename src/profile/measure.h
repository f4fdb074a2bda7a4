/* profile/measure.h: measuring a model's layers on devices, the step that `partition: profile`,
 * `baton profile` and `baton plan` take before any planning (the public face is baton/profile.h;
 * the cost table it fills is plan/profile.h).
 *
 * This module sits beside exec, not inside plan: it opens devices and runs ops through the
 * backend table (src/backend), building each call with the worker's own builder
 * (graph/op_call.h), so plan stays a pure function of the graph and a cost table. Nothing below
 * it includes it; its callers are the CLI and C API users (docs/architecture.md).
 *
 * Files: measure.c (the model: bytes per layer, kinds, transfers, the quick measurement),
 * layer_run.c (one layer alone on one device: a small executor), profile_file.c (the JSON file). */
#ifndef BT_PROFILE_MEASURE_H
#define BT_PROFILE_MEASURE_H

#include <stddef.h>

#include "backend/backend.h"
#include "baton/profile.h"
#include "graph/graph_internal.h"
#include "plan/profile.h"

/* Micro-batch size and repeats of the quick measurement behind `partition: profile`. */
#define BT_PROFILE_QUICK_MICROBATCH 32
#define BT_PROFILE_QUICK_REPEATS 3

/* Splits "cpu:0, cpu:1" into devices[] (each checked with bt_device_parse); *n receives the
 * count. BT_ERR_INVALID_ARG for an empty entry, a bad device or more than max. */
bt_status bt_profile_parse_devices(const char *list, char (*devices)[BT_PROFILE_DEVICE_LEN], int max,
                                   int *n);

/* Times layer l of graph alone on an open device (forward; with pp->training backward and the
 * optimizer step too): median of pp->repeats runs after pp->warmup, micro-batch
 * pp->batch / pp->microbatches. Allocates and frees its own buffers on the device. */
bt_status bt_profile_measure_layer(const bt_graph *graph, int layer, const bt_backend *be, bt_device *dev,
                                   const bt_profile_params *pp, bt_profile_time *out);

/* Bytes of one sample of a value as the profiler stores it (i32 stays 4 bytes, floats are f32). */
size_t bt_profile_value_row_bytes(const bt_value *v);

#endif
