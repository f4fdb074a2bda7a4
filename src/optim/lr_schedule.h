/* optim/lr_schedule.h: the learning rate for each optimizer step, from bt_lr_schedule_config
 * (include/baton/config.h) and the optimizer's base lr. A pure function of the step number, so a
 * run resumed from a checkpoint at step s continues with exactly the rates it would have used.
 *
 * step is 0-based (the step about to run: 0 for the first), W = warmup_steps, T = total_steps,
 * lr the base rate:
 *
 *   warm-up, any kind, when step < W:   lr * (step + 1) / W
 *       (the first step uses lr / W; step W - 1 reaches lr)
 *   afterwards, with s = step - W (steps since the warm-up ended):
 *   constant:  lr
 *   step:      lr * gamma^floor(s / step_size)
 *   cosine:    min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * p)),
 *              p = min(1, s / max(1, T - 1 - W))
 *       (lr at s = 0; min_lr at the last step, step T - 1, and beyond, when T - 1 > W)
 *
 * Data flow: the engine evaluates bt_lr_at once per step and passes the value to the optimizer
 * kernels (optim/optim.h) and back to the caller in bt_step_result.lr. */
#ifndef BT_TRAIN_LR_SCHEDULE_H
#define BT_TRAIN_LR_SCHEDULE_H

#include <stdint.h>

#include "baton/config.h"
#include "baton/status.h"

/* Checks a schedule against the run's horizon: known kind, warmup_steps >= 0; step: step_size >= 1
 * and gamma > 0; cosine: total_steps > warmup_steps and 0 <= min_lr <= base_lr.
 * BT_ERR_INVALID_ARG naming the field otherwise. */
bt_status bt_lr_schedule_validate(const bt_lr_schedule_config *s, double base_lr,
                                  int64_t total_steps);

/* The learning rate for 0-based step (formulas above). Meant for validated schedules; a step
 * schedule with step_size < 1 never decays and a cosine one with total_steps <= warmup_steps
 * sits at min_lr after the warm-up. Negative steps count as step 0. */
double bt_lr_at(const bt_lr_schedule_config *s, double base_lr, int64_t step, int64_t total_steps);

#endif
