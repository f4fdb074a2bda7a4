/* train/trainer.h: training a model for real. A trainer owns the datasets and loaders of a model's
 * data: section (one column per model input, any signature; a model without data.train is
 * refused: synthetic data only when the section asks for it), drives an engine step by step,
 * evaluates on the eval set through the forward-only schedule (accuracy from the loss layer's
 * logits), writes checkpoints, and resumes exactly from one. It reports through a callback and never prints. */
#ifndef BT_TRAIN_TRAINER_H
#define BT_TRAIN_TRAINER_H

#include <stdint.h>

#include "baton/engine.h"
#include "baton/model.h"

typedef struct bt_trainer bt_trainer;

typedef struct bt_trainer_opts {
    int64_t steps;             /* 0: epochs x batches per epoch */
    int epochs;                /* used when steps is 0 */
    int64_t eval_every;        /* steps; 0: only at the end; -1: never */
    int64_t checkpoint_every;  /* steps; 0: only at the end (when checkpoint_dir is set) */
    const char *checkpoint_dir;
    const char *resume;        /* checkpoint dir or file to continue from, or NULL */
    const char *init;          /* safetensors weights to start from, or NULL */
    uint64_t seed;
    int prefetch;              /* batches prepared ahead; 0: 2 */
} bt_trainer_opts;

typedef enum bt_train_event_kind { BT_EV_STEP, BT_EV_EVAL, BT_EV_CHECKPOINT } bt_train_event_kind;

typedef struct bt_train_event {
    bt_train_event_kind kind;
    int64_t step, total_steps; /* step: 1-based index of the step just done */
    int64_t epoch;
    const bt_step_result *result;      /* BT_EV_STEP */
    double accuracy, loss;             /* BT_EV_EVAL (accuracy NaN when the loss is not a classifier) */
    int64_t samples;                   /* BT_EV_EVAL: samples evaluated */
    double eval_ms;
    const char *path;                  /* BT_EV_CHECKPOINT */
    int on_train;                      /* BT_EV_EVAL: measured on the training set (no eval source) */
} bt_train_event;

typedef void (*bt_train_callback)(const bt_train_event *ev, void *user);

/* Loads the data for model and prepares to drive engine (both must outlive the trainer). Locks
 * opts->checkpoint_dir for as long as the trainer lives (a directory another run writes is
 * refused, BT_ERR_INVALID_ARG, naming its pid and host). Applies opts->init and opts->resume; a
 * checkpoint whose seed, model, batches per epoch or data position do not fit this run is
 * refused before the engine is changed. */
bt_status bt_trainer_create(const bt_model *model, bt_engine *engine, const bt_trainer_opts *opts,
                            bt_trainer **out);
void bt_trainer_destroy(bt_trainer *trainer);
/* Steps the trainer will run in total, and where it starts (after a resume). */
int64_t bt_trainer_total_steps(const bt_trainer *trainer);
int64_t bt_trainer_first_step(const bt_trainer *trainer);
int64_t bt_trainer_train_samples(const bt_trainer *trainer);
/* 1 when there is no eval source and evaluation reads the training set (files without data.eval;
 * synthetic data holds an eval set out instead). */
int bt_trainer_evaluates_on_train(const bt_trainer *trainer);
/* 1 when the resumed checkpoint is already at or past the last step (a run asked for fewer
 * steps than it holds): bt_trainer_run then does nothing (no step, evaluation or checkpoint), so
 * the checkpoint file is left exactly as it is, keeping its data position. */
int bt_trainer_nothing_to_do(const bt_trainer *trainer);
/* Scores rows of logits (classes per row, in dtype BT_F32 or BT_F64) against labels the way
 * evaluation does: adds each row's cross-entropy (computed in double) to *loss_sum and each
 * correct argmax to *correct. `baton predict` uses it, so it reproduces an eval exactly. */
void bt_score_logits(const void *logits, bt_dtype dtype, int64_t rows, int classes, const int32_t *labels,
                     double *loss_sum, int64_t *correct);
/* Runs the remaining steps, evaluations and checkpoints. */
bt_status bt_trainer_run(bt_trainer *trainer, bt_train_callback cb, void *user);
/* Evaluates once on the eval set (or the training set when there is none: see
 * bt_trainer_evaluates_on_train). */
bt_status bt_trainer_evaluate(bt_trainer *trainer, double *accuracy, double *loss, int64_t *samples);

#endif
