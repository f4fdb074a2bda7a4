/* baton/train.h: training a model on its data, and checkpoints, from C: what `baton run` does.
 *
 * A trainer owns the datasets and loaders of a model's data: section (one column per model input,
 * any signature; a model without data.train is refused: synthetic data only when the section asks
 * for it), drives an engine step by step, evaluates through the forward-only schedule, writes checkpoints and resumes exactly from
 * one. It never prints: it reports through a callback. Checkpoints are safetensors files with
 * PyTorch names ("fc1.weight", Linear weights [out, in]), optimizer state as
 * "optimizer.<param>.<slot>", and the step, data position, batch size and seed in the metadata;
 * nothing in them depends on the placement (saved from 2 stages, resumed on 3). A checkpoint
 * directory holds "checkpoint-<step>.safetensors" files (the last keep_last of them) and
 * "checkpoint.safetensors", a hard link to the newest: give the directory to resume from the
 * latest. A sharded checkpoint (every job across processes, or on request) is one safetensors
 * shard per stage plus an index in Hugging Face's form, "checkpoint-<step>.safetensors.index.json",
 * with "checkpoint.safetensors.index.json" the link to the newest; every reader below takes either
 * layout (the directory, the index or the file). See docs/c-api.md (Training) and
 * docs/checkpoints.md. */
#ifndef BATON_TRAIN_H
#define BATON_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "baton/api.h"
#include "baton/engine.h"
#include "baton/model.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- checkpoints ---- */

typedef struct bt_checkpoint_meta {
    int64_t step;              /* optimizer steps taken */
    int64_t epoch;             /* data position of the next batch */
    int64_t batch_index;
    int64_t batches_per_epoch; /* of the run that saved it; 0 in checkpoints older than the field */
    int64_t batch;             /* samples per step of the run that saved it; 0: not recorded */
    uint64_t seed;
    char model[128];
} bt_checkpoint_meta;

/* Writes dir/checkpoint-<position>.safetensors (position: epoch x batches_per_epoch +
 * batch_index, or step when batches_per_epoch is 0) with the engine's parameters, optimizer state
 * and meta, atomically, creates dir and its parents when missing, and points
 * dir/checkpoint.safetensors at it. Keeps every older numbered file. An engine that is one rank of
 * a job across processes writes a sharded checkpoint instead (bt_checkpoint_save_sharded), and
 * then every rank must call it. */
BT_API bt_status bt_checkpoint_save(const bt_engine *engine, const bt_graph *graph, const char *dir,
                                    const bt_checkpoint_meta *meta);
/* The same checkpoint as shards: dir/checkpoint-<position>-<s>-of-<P>.safetensors, one per stage
 * with tensors, written in parallel by the stages' owners (bt_engine_owns_stage: in one process a
 * thread per stage), then, once every shard is complete, dir/checkpoint-<position>.safetensors
 * .index.json (Hugging Face's form: metadata with total_size and the training state, and
 * weight_map from each tensor to its shard) atomically, and dir/checkpoint.safetensors.index.json
 * pointed at it. Collective across processes (every rank calls it). */
BT_API bt_status bt_checkpoint_save_sharded(bt_engine *engine, const bt_graph *graph, const char *dir,
                                            const bt_checkpoint_meta *meta);
/* Restores parameters, optimizer state and the step counter from dir's latest checkpoint (or a
 * .safetensors path) and fills meta. Every parameter must be present with its exact shape and
 * checksum; anything missing, extra, mismatched or corrupt is refused, naming it, before the
 * engine is changed. */
BT_API bt_status bt_checkpoint_resume(bt_engine *engine, const bt_graph *graph, const char *path,
                                      bt_checkpoint_meta *meta);
/* Reads and cross-checks only the metadata of the checkpoint at path (dir or file). */
BT_API bt_status bt_checkpoint_read_meta(const char *path, bt_checkpoint_meta *meta);
/* Loads parameters only (no optimizer state, no step) from a checkpoint directory or any
 * safetensors file with PyTorch names: F32, F64, F16 and BF16 tensors are converted to the
 * engine's dtype. Every parameter must be there with its shape, and every tensor of the file must
 * be a parameter (or optimizer state), or nothing is loaded. A path that does not exist is
 * BT_ERR_INVALID_ARG. */
BT_API bt_status bt_checkpoint_load_weights(bt_engine *engine, const bt_graph *graph, const char *path);

/* What a partial load did. skipped: one line per tensor of the file not loaded ("name: why");
 * missing: the parameters the file did not give (they keep their initial values). */
typedef struct bt_weights_report {
    int loaded;
    int n_skipped, n_missing;
    char **skipped, **missing;
} bt_weights_report;
/* Loads every parameter the file has under the same name and shape and lists the rest in
 * *report (the caller frees it with bt_weights_report_free, also after a failure). */
BT_API bt_status bt_checkpoint_load_weights_partial(bt_engine *engine, const bt_graph *graph, const char *path,
                                                    bt_weights_report *report);
/* Frees the lists and zeroes report; accepts NULL. */
BT_API void bt_weights_report_free(bt_weights_report *report);

/* ---- the trainer ---- */

typedef struct bt_trainer bt_trainer;

typedef struct bt_trainer_opts {
    int64_t steps;             /* 0: epochs x batches per epoch */
    int epochs;                /* used when steps is 0; 0: 1 */
    int64_t eval_every;        /* steps; 0: only at the end; -1: never */
    int64_t checkpoint_every;  /* steps; 0: only at the end (when checkpoint_dir is set) */
    const char *checkpoint_dir;
    int keep_last;             /* numbered checkpoints kept in checkpoint_dir; 0: 1; -1: all */
    const char *resume;        /* checkpoint dir or file to continue from, or NULL */
    const char *init;          /* weights to start from (checkpoint dir or safetensors), or NULL */
    int init_partial;          /* 1: load what of init matches, list the rest (bt_trainer_init_report) */
    uint64_t seed;
    int prefetch;              /* batches prepared ahead; 0: 2 */
    /* Checked after every step; when it is nonzero the trainer stops there: it writes a checkpoint
     * (when checkpoint_dir is set), skips the evaluation, and bt_trainer_run returns BT_OK with
     * bt_trainer_stopped_at set. A signal handler may set it. NULL: never. */
    volatile sig_atomic_t *stop;
    int checkpoint_shards;     /* 1: sharded checkpoints (one shard per stage, written in parallel, and
                                  an index) in one process too; across processes they always are */
} bt_trainer_opts;

/* Fills opts with the defaults: every field zero (steps 0 and epochs 0: one epoch; eval_every 0:
 * only at the end; keep_last 0: one checkpoint; no directory, resume, init or stop flag). */
BT_API void bt_trainer_opts_init(bt_trainer_opts *opts);

typedef enum bt_train_event_kind { BT_EV_STEP, BT_EV_EVAL, BT_EV_CHECKPOINT } bt_train_event_kind;

typedef struct bt_train_event {
    bt_train_event_kind kind;
    int64_t step, total_steps; /* step: 1-based index of the step just done */
    int64_t epoch;
    const bt_step_result *result;      /* BT_EV_STEP */
    double accuracy, loss;             /* BT_EV_EVAL (accuracy NaN when the loss is not a classifier) */
    int64_t samples;                   /* BT_EV_EVAL: samples evaluated */
    double eval_ms;
    const char *path;                  /* BT_EV_CHECKPOINT: the numbered file written */
    int on_train;                      /* BT_EV_EVAL: measured on the training set (no eval source) */
} bt_train_event;

typedef void (*bt_train_callback)(const bt_train_event *ev, void *user);

/* Loads the data for model and prepares to drive engine (both must outlive the trainer). Creates
 * and tests opts->checkpoint_dir for writing, and locks it for as long as the trainer lives (a
 * directory another run writes is refused, naming its pid and host). Applies opts->init or
 * opts->resume (both at once is refused); a checkpoint whose seed, model, batch size, batches per
 * epoch or data position do not fit this run is refused before the engine is changed. The caller
 * owns *out (free with bt_trainer_destroy). */
BT_API bt_status bt_trainer_create(const bt_model *model, bt_engine *engine, const bt_trainer_opts *opts,
                                   bt_trainer **out);
/* Accepts NULL. */
BT_API void bt_trainer_destroy(bt_trainer *trainer);
/* Steps the trainer will run in total, and where it starts (after a resume). */
BT_API int64_t bt_trainer_total_steps(const bt_trainer *trainer);
BT_API int64_t bt_trainer_first_step(const bt_trainer *trainer);
BT_API int64_t bt_trainer_train_samples(const bt_trainer *trainer);
/* 1 when there is no eval source and evaluation reads the training set (files without data.eval;
 * synthetic data holds an eval set out instead). */
BT_API int bt_trainer_evaluates_on_train(const bt_trainer *trainer);
/* 1 when the resumed checkpoint is already at or past the last step: bt_trainer_run then does
 * nothing (no step, evaluation or checkpoint), leaving the checkpoint exactly as it is. */
BT_API int bt_trainer_nothing_to_do(const bt_trainer *trainer);
/* What opts->init_partial loaded and skipped (NULL unless it was used). Owned by the trainer. */
BT_API const bt_weights_report *bt_trainer_init_report(const bt_trainer *trainer);
/* Runs the remaining steps, evaluations and checkpoints. */
BT_API bt_status bt_trainer_run(bt_trainer *trainer, bt_train_callback cb, void *user);
/* The step after which *opts->stop stopped the last bt_trainer_run; 0 when it ran to the end. */
BT_API int64_t bt_trainer_stopped_at(const bt_trainer *trainer);
/* Evaluates once on the eval set (or the training set when there is none: see
 * bt_trainer_evaluates_on_train). */
BT_API bt_status bt_trainer_evaluate(bt_trainer *trainer, double *accuracy, double *loss, int64_t *samples);

#ifdef __cplusplus
}
#endif
#endif
