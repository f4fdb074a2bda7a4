/* optim/loss_scale.c: the dynamic loss scaler of loss_scale.h. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>

#include "optim/loss_scale.h"

void bt_loss_scale_init(bt_loss_scale *s, double initial_scale, int64_t growth_interval)
{
    *s = (bt_loss_scale){
        .scale = initial_scale > 0 ? initial_scale : BT_LOSS_SCALE_INITIAL,
        .growth = 2.0,
        .backoff = 0.5,
        .min_scale = 1.0,
        .max_scale = 18446744073709551616.0, /* 2^64 */
        .growth_interval = growth_interval > 0 ? growth_interval : BT_LOSS_SCALE_GROWTH_INTERVAL,
    };
    if (s->scale < s->min_scale) s->scale = s->min_scale;
    if (s->scale > s->max_scale) s->scale = s->max_scale;
    s->used = s->scale;
}

int bt_loss_scale_update(bt_loss_scale *s, int finite)
{
    s->used = s->scale;
    s->steps++;
    if (!finite) {
        s->skipped++;
        s->clean = 0;
        double next = s->scale * s->backoff;
        s->scale = next < s->min_scale ? s->min_scale : next;
        return 0;
    }
    if (++s->clean >= s->growth_interval) {
        s->clean = 0;
        double next = s->scale * s->growth;
        if (next > s->max_scale) next = s->max_scale;
        if (next != s->scale) s->growths++;
        s->scale = next;
    }
    return 1;
}

int bt_loss_scale_format_skip(int64_t step, double used, double now, char *buf, size_t size)
{
    return snprintf(buf, size, "step %lld skipped: gradients overflowed at loss scale %.17g; "
                               "scale now %.17g%s",
                    (long long)step, used, now, now == used ? " (its minimum)" : "");
}

int bt_loss_scale_skip_message(const bt_loss_scale *s, int64_t step, char *buf, size_t size)
{
    return bt_loss_scale_format_skip(step, s->used, s->scale, buf, size);
}
