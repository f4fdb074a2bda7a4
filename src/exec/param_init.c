/* exec/param_init.c: deterministic initial weights. Every parameter's values are drawn from a
 * stream seeded by the engine's seed and the parameter's name, never its position, so placement
 * (which stage, which device, in which order stages are built) never changes the initial weights.
 * A tied parameter (bt_graph_tie) draws its source's values, so the two copies start equal.
 * Runs once per parameter at creation, after its buffer was allocated (exec/layout.c). */
#include <math.h>
#include <stdlib.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/exec_internal.h"

static double next_unit(uint64_t *state)
{
    *state = bt_mix64(*state);
    return (double)(*state >> 11) * 0x1.0p-53;
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static double init_value(const bt_param *p, uint64_t *rng)
{
    switch (p->init) {
    case BT_INIT_ZEROS: return 0;
    case BT_INIT_ONES: return 1;
    case BT_INIT_UNIFORM_FAN_IN: {
        double bound = p->fan_in > 0 ? 1.0 / sqrt((double)p->fan_in) : 0;
        return (2 * next_unit(rng) - 1) * bound;
    }
    case BT_INIT_NORMAL: {
        double u1 = next_unit(rng), u2 = next_unit(rng);
        if (u1 < 1e-300) u1 = 1e-300;
        double std = p->init_arg > 0 ? p->init_arg : 1.0;
        return std * sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
    }
    }
    return 0;
}

bt_status bt_param_init(bt_engine *e, bt_stage *st, bt_param_store *ps)
{
    const bt_param *p = &e->graph->params[ps->param];
    if (p->tied_to >= 0) p = &e->graph->params[p->tied_to]; /* a tied copy starts as its source */
    size_t bytes = ps->numel * bt_dtype_size(e->dtype);
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return bt_error(BT_ERR_NOMEM, "initialising '%s': out of memory", p->name);
    uint64_t rng = bt_mix64(e->params.seed) ^ name_hash(p->name);
    for (size_t i = 0; i < ps->numel; i++) {
        double v = init_value(p, &rng);
        if (e->dtype == BT_F64) ((double *)host)[i] = v;
        else ((float *)host)[i] = (float)v;
    }
    bt_status s = st->be->from_host(st->dev, ps->w, host, bytes);
    free(host);
    return s;
}
