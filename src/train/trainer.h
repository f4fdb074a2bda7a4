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
#include "baton/train.h"

/* The trainer's interface is public: baton/train.h. Internal: */

/* Scores rows of logits (classes per row, in dtype BT_F32 or BT_F64) against labels the way
 * evaluation does: adds each row's cross-entropy (computed in double) to *loss_sum and each
 * correct argmax to *correct. `baton predict` uses it, so it reproduces an eval exactly. */
void bt_score_logits(const void *logits, bt_dtype dtype, int64_t rows, int classes, const int32_t *labels,
                     double *loss_sum, int64_t *correct);

#endif
