/* train/predict.h: serving a model on data: batches of npy files (one per input, or a model's
 * data: source) streamed through an engine's forward-only schedule, across all its stages, with
 * the chosen layer's outputs gathered (and written as .npy), accuracy and loss where labels are
 * given, and the latency of every batch. `baton predict` and `baton run` on a model without
 * train: are its callers; it never prints.
 *
 * Scoring is the trainer's own (bt_score_logits, the per-sample losses of the loss layer), over
 * the same batches (in order, the last one padded), so predict on a checkpoint reproduces the
 * accuracy and loss its training run reported at the end, to the bit, with the same batch and
 * micro-batches. A model whose last layer is a loss needs its label input fed to run at all:
 * without labels the label input is fed zeros (a valid class) and no loss or accuracy is
 * reported. */
#ifndef BT_TRAIN_PREDICT_H
#define BT_TRAIN_PREDICT_H

#include <stdint.h>

#include "baton/config.h"
#include "baton/engine.h"
#include "baton/model.h"

typedef struct bt_predict_opts {
    int n_inputs;              /* npy files, one per input */
    const char *input_names[BT_DATA_MAX_INPUTS]; /* NULL: the model's one input other than labels */
    const char *input_files[BT_DATA_MAX_INPUTS];
    const char *labels;        /* npy of the loss's label input, or NULL */
    const bt_data_source *source; /* instead of files: a data: source (npy, idx, synthetic) */
    const char *output_layer;  /* NULL: the logits a classifier's loss reads, else the last layer */
    const char *output_path;   /* write every sample's output here (.npy), or NULL */
    uint64_t seed;             /* synthetic sources */
} bt_predict_opts;

typedef struct bt_predict_report {
    int64_t samples, batches;
    double total_ms;           /* the batches' latencies added up */
    double samples_per_s;      /* samples / total_ms */
    double p50_ms, p99_ms;     /* per-batch latency percentiles (nearest rank) */
    int has_loss;              /* labels were fed */
    double loss;               /* mean over the samples */
    double accuracy;           /* NaN unless the output is a classifier's logits and labels were fed */
    char output_layer[64];     /* the layer whose outputs were gathered ("" for the model's output) */
    bt_shape output_shape;     /* per sample */
} bt_predict_report;

/* Called after every batch (index from 0); may be NULL. */
typedef void (*bt_predict_callback)(int64_t index, int64_t batches, const bt_step_result *r, void *user);

/* Streams the data through engine (built for model->graph; its batch is the batch size) and fills
 * report. Errors name the file, the input and the shape (BT_ERR_INVALID_ARG for data that does
 * not fit the model). */
bt_status bt_predict_run(const bt_model *model, bt_engine *engine, const bt_predict_opts *opts,
                         bt_predict_callback cb, void *user, bt_predict_report *report);

#endif
