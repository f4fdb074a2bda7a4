/* optim/loss_scale.h: dynamic loss scaling for f16 training, as a small state machine with no
 * engine dependency.
 *
 * f16 gradients underflow where f32 ones would not; scaling the loss gradient seed by a large
 * factor S keeps them representable, and the optimizer divides it back out (grad_scale 1/S). A
 * step whose gradients hold an infinity or a NaN is skipped (no update, optimizer state untouched)
 * and S is multiplied by backoff (halved); after growth_interval consecutive applied steps S is
 * multiplied by growth (doubled). S never goes below min_scale (1: a scale under 1 would only
 * shrink gradients further, so at 1 overflowing steps keep being skipped at scale 1) nor above
 * max_scale (2^64: the seed stays finite in f32 even when the gradients never overflow, e.g. when
 * they are all zero). The defaults are PyTorch's GradScaler's.
 *
 * Usage per step: seed the loss gradient with s.scale; after backward, finite = whether every
 * gradient is finite; if bt_loss_scale_update(&s, finite) apply the step with grad_scale
 * 1 / s.used, else report bt_loss_scale_skip_message(...). */
#ifndef BT_TRAIN_LOSS_SCALE_H
#define BT_TRAIN_LOSS_SCALE_H

#include <stddef.h>
#include <stdint.h>

#define BT_LOSS_SCALE_INITIAL 65536.0
#define BT_LOSS_SCALE_GROWTH_INTERVAL 2000

typedef struct bt_loss_scale {
    double scale;            /* the scale the next step uses */
    double used;             /* the scale the last step passed to update used */
    double growth;           /* 2 */
    double backoff;          /* 0.5 */
    double min_scale;        /* 1 */
    double max_scale;        /* 2^64 */
    int64_t growth_interval; /* 2000 */
    int64_t clean;           /* applied steps since the scale last changed (or overflowed) */
    int64_t steps;           /* steps passed to update */
    int64_t skipped;         /* of them, skipped for non-finite gradients */
    int64_t growths;         /* times the scale grew */
} bt_loss_scale;

/* Starts at initial_scale (<= 0: 65536) with growth_interval (<= 0: 2000) and the other defaults
 * above; change growth, backoff, min_scale or max_scale afterwards to taste. */
void bt_loss_scale_init(bt_loss_scale *s, double initial_scale, int64_t growth_interval);

/* Records one step that used s->scale and whose gradients were all finite (finite != 0) or not;
 * updates the scale. Returns 1 when the step should be applied, 0 when it must be skipped. */
int bt_loss_scale_update(bt_loss_scale *s, int finite);

/* After an update that returned 0: writes "step N skipped: gradients overflowed at loss scale S;
 * scale now S'" (S the scale the step used, S' the new one; " (its minimum)" appended when the
 * scale could not go lower) into buf, truncated to size; returns what snprintf returns. Scales
 * print in full ("1048576", not "1.04858e+06"). */
int bt_loss_scale_skip_message(const bt_loss_scale *s, int64_t step, char *buf, size_t size);

/* The same message from plain numbers (for a caller that has only a step's result). */
int bt_loss_scale_format_skip(int64_t step, double used, double now, char *buf, size_t size);

#endif
