/* train/train_loop.h: the step, evaluation and checkpoint loop that both training loops share:
 * the trainer (trainer.c, data as columns through the prefetching loader) and the language-model
 * loop (lm.c, windows of a token array). A source says how to get step k's feeds (whole global
 * batches, or this rank's rows and inputs only), how to evaluate, and what to write beside a
 * checkpoint; the loop runs the steps (a loss that is not finite stops it), agrees with the other
 * ranks on stopping after a signal (a checkpoint of the step, no evaluation), evaluates every
 * eval_every steps and at the end, and writes checkpoints every checkpoint_every steps and at the
 * end. A checkpoint is collective across processes: parallel.zero's state is gathered, each
 * stage's owner checks that its weights and optimizer state are finite (a diverged run never
 * overwrites the last good checkpoint: BT_ERR_NUMERIC naming the tensor) and writes its shard,
 * and rank 0 writes the index and reports. */
#ifndef BT_TRAIN_TRAIN_LOOP_H
#define BT_TRAIN_TRAIN_LOOP_H

#include <stdint.h>

#include "baton/engine.h"
#include "baton/model.h"
#include "baton/train.h"

typedef struct bt_train_loop {
    bt_engine *engine;
    const bt_model *model;
    const bt_trainer_opts *opts;
    int64_t total_steps;  /* the run's last step */
    int64_t first_step;   /* steps already taken (a resumed run's data position) */
    int64_t per_epoch;    /* steps per pass over the training data (the checkpoint's data position) */
    int64_t saved_step;   /* the step of the last checkpoint written or resumed; -1: none */
    int64_t stopped_at;   /* set by bt_train_loop_run: the step after which opts->stop ended it, or 0 */
    int on_train;         /* the evaluation reads the training set (said in the eval events) */
    void *src;
    /* The feeds of step (0-based) into feeds (at most BT_DATA_MAX_INPUTS), their count into
     * *n_feeds; *local = 1 when they hold only this rank's rows and inputs (bt_engine_feed_rows,
     * bt_engine_reads_input), 0 for whole global batches. */
    bt_status (*feeds)(void *src, int64_t step, bt_feed *feeds, int *n_feeds, int *local);
    /* After the step that read them (NULL: nothing to do). */
    void (*release)(void *src);
    /* The evaluation: loss, accuracy (NAN where not scored) and samples into ev. */
    bt_status (*evaluate)(void *src, bt_train_event *ev);
    /* After every rank wrote checkpoint step (NULL: nothing): lm.c writes the vocabulary. */
    bt_status (*saved)(void *src, int64_t step);
} bt_train_loop;

/* What cannot be honoured together is refused, never ignored (BT_ERR_INVALID_ARG). */
bt_status bt_train_check_opts(const bt_trainer_opts *opts);
/* Steps first_step + 1 .. total_steps with their evaluations and checkpoints (see above). */
bt_status bt_train_loop_run(bt_train_loop *l, bt_train_callback cb, void *user);

#endif
