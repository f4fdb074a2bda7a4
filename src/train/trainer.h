/* train/trainer.h: training a model for real. A trainer owns the datasets and loaders of a model's
 * data: section (synthetic when it has none), drives an engine step by step, evaluates on the eval
 * set through the forward-only schedule (accuracy from the loss layer's logits), writes
 * checkpoints, and resumes exactly from one. It reports through a callback and never prints. */
#ifndef BT_TRAIN_TRAINER_H
#define BT_TRAIN_TRAINER_H

#include <stdint.h>

#include "baton/engine.h"
#include "baton/model.h"
#include "baton/train.h"

/* The trainer's interface is public: baton/train.h. */

#endif
