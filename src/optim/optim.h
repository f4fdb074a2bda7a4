/* optim/optim.h: optimizer update kernels and gradient-norm clipping helpers, element-wise over
 * one contiguous array at a time. The engine calls them once per stage and step, over all of the
 * stage's parameters packed into one array (exec/layout.c): every formula below is elementwise
 * with per-call coefficients, so that equals one call per tensor bit for bit. The CUDA kernels
 * implement the same formulas and are tested against these.
 *
 * Semantics follow PyTorch (torch.optim.SGD with dampening 0, torch.optim.AdamW), with g the
 * gradient after scaling by grad_scale, lr the step's learning rate and t the 1-based step count:
 *
 *   SGD:   g' = g + weight_decay * w
 *          momentum == 0:  w -= lr * g'
 *          momentum >  0:  buf = g' on the first step (t == 1), else buf = momentum * buf + g'
 *                          d = nesterov ? g' + momentum * buf : buf;  w -= lr * d
 *   AdamW: w -= lr * weight_decay * w                          (decoupled decay, first)
 *          m = beta1 * m + (1 - beta1) * g
 *          v = beta2 * v + (1 - beta2) * g^2
 *          w -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *             (= lr * mhat / (sqrt(vhat) + eps), evaluated as PyTorch does)
 *
 * State: bt_optim_state_count(cfg) arrays of n elements per parameter tensor, of the parameter's
 * type, which the caller allocates and zeroes before the first step (SGD with momentum: buf;
 * AdamW: m, v). The f32 kernels compute in float with the scalar coefficients computed in double;
 * the f64 kernels compute in double.
 *
 * Clipping (torch.nn.utils.clip_grad_norm_): the global norm is sqrt of the sum over all gradient
 * tensors of bt_optim_sumsq_*; every gradient is then multiplied by
 * bt_optim_clip_scale(norm, max_norm) = min(1, max_norm / (norm + 1e-6)), which callers pass to the
 * step as grad_scale. */
#ifndef BT_TRAIN_OPTIM_H
#define BT_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "baton/config.h"
#include "baton/status.h"
#include "optim/lr_schedule.h" /* callers of the optim module need only this header */

#define BT_OPTIM_MAX_STATE 2

/* Checks a configuration: known kind, lr >= 0 and finite, weight_decay >= 0, SGD momentum in
 * [0, 1) and nesterov only with momentum > 0, AdamW betas in [0, 1) and eps > 0.
 * BT_ERR_INVALID_ARG with a message naming the field otherwise. */
bt_status bt_optim_validate(const bt_optimizer_config *cfg);

/* Number of state arrays per parameter tensor: SGD 1 if momentum > 0 else 0; AdamW 2. */
int bt_optim_state_count(const bt_optimizer_config *cfg);

typedef struct bt_optim_step_args {
    double lr;          /* this step's learning rate (see optim/lr_schedule.h) */
    int64_t t;          /* optimizer steps taken including this one: 1 on the first step */
    double grad_scale;  /* g is multiplied by this before use (clipping); 1 for none */
} bt_optim_step_args;

/* One update of the n elements of w from gradient g, with state[0..state_count) as described
 * above. w and the state arrays are updated in place; g is not modified. BT_ERR_INVALID_ARG when
 * t < 1, a state array is missing or the kind is unknown (the configuration itself is trusted:
 * validate it once with bt_optim_validate). */
bt_status bt_optim_step_f32(const bt_optimizer_config *cfg, const bt_optim_step_args *args,
                            int64_t n, float *w, const float *g, float *const *state);
bt_status bt_optim_step_f64(const bt_optimizer_config *cfg, const bt_optim_step_args *args,
                            int64_t n, double *w, const double *g, double *const *state);

/* The same update for a parameter of dtype BT_F32 or BT_F64 through untyped pointers, the shape
 * the backend interface's optimizer_update has (step is t, 1-based). BT_ERR_UNSUPPORTED for other
 * dtypes. */
bt_status bt_optim_update(const bt_optimizer_config *cfg, bt_dtype dtype, void *w, const void *g,
                          void *const *state, size_t n, double lr, int64_t step,
                          double grad_scale);

/* The checks bt_optim_update makes before it writes anything: BT_OK when an update of n values
 * of dtype with these arguments can run (then it cannot fail), else the error it would return.
 * For a caller that runs the update in pieces on other threads (an error's message is per
 * thread). */
bt_status bt_optim_check(const bt_optimizer_config *cfg, bt_dtype dtype, const void *w, const void *g,
                         void *const *state, size_t n, int64_t step);

/* Sum of squares of x[0..n), accumulated in double. */
double bt_optim_sumsq_f32(const float *x, int64_t n);
double bt_optim_sumsq_f64(const double *x, int64_t n);
/* min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0 (no clipping). A NaN norm gives NaN and
 * an infinite one 0, as in PyTorch; check the norm with isfinite() to skip such steps. */
double bt_optim_clip_scale(double norm, double max_norm);

#endif
