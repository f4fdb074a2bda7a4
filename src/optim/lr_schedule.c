/* optim/lr_schedule.c: constant, step and cosine learning-rate schedules with linear warm-up
 * (formulas in lr_schedule.h). Stateless. */
#include <math.h>

#include "core/error.h"
#include "optim/lr_schedule.h"

bt_status bt_lr_schedule_validate(const bt_lr_schedule_config *s, double base_lr,
                                  int64_t total_steps)
{
    if (!s) return bt_error(BT_ERR_INVALID_ARG, "lr schedule: NULL config");
    if (s->warmup_steps < 0)
        return bt_error(BT_ERR_INVALID_ARG, "lr schedule: warmup_steps %lld must be >= 0",
                        (long long)s->warmup_steps);
    switch (s->kind) {
    case BT_LR_CONSTANT: return BT_OK;
    case BT_LR_STEP:
        if (s->step_size < 1)
            return bt_error(BT_ERR_INVALID_ARG, "lr schedule: step_size %lld must be >= 1",
                            (long long)s->step_size);
        if (!(s->gamma > 0) || !isfinite(s->gamma))
            return bt_error(BT_ERR_INVALID_ARG, "lr schedule: gamma %g must be finite and > 0",
                            s->gamma);
        return BT_OK;
    case BT_LR_COSINE:
        if (total_steps <= s->warmup_steps)
            return bt_error(BT_ERR_INVALID_ARG,
                            "lr schedule: cosine needs total steps (%lld) greater than "
                            "warmup_steps (%lld)",
                            (long long)total_steps, (long long)s->warmup_steps);
        if (!(s->min_lr >= 0 && s->min_lr <= base_lr))
            return bt_error(BT_ERR_INVALID_ARG, "lr schedule: min_lr %g must be in [0, lr = %g]",
                            s->min_lr, base_lr);
        return BT_OK;
    }
    return bt_error(BT_ERR_INVALID_ARG, "lr schedule: unknown kind %d", (int)s->kind);
}

double bt_lr_at(const bt_lr_schedule_config *s, double base_lr, int64_t step, int64_t total_steps)
{
    const double pi = 3.14159265358979323846;
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return base_lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t since = step - s->warmup_steps;
    switch (s->kind) {
    case BT_LR_CONSTANT: return base_lr;
    case BT_LR_STEP:
        if (s->step_size < 1) return base_lr;
        return base_lr * pow(s->gamma, (double)(since / s->step_size));
    case BT_LR_COSINE: {
        int64_t span = total_steps - 1 - s->warmup_steps;
        if (span < 1) span = 1;
        double p = total_steps <= s->warmup_steps ? 1.0 : (double)since / (double)span;
        if (p > 1.0) p = 1.0;
        return s->min_lr + 0.5 * (base_lr - s->min_lr) * (1.0 + cos(pi * p));
    }
    }
    return base_lr;
}
