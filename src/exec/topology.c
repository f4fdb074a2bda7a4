/* exec/topology.c: how the stages are connected. Once the devices are open, each ordered pair of
 * stages gets a transfer path (exec/transfer.c decides which); then one channel per direction is
 * built between every pair of stages that exchange values, and always between neighbours
 * (possibly empty), so the chain order the schedule validator assumes holds for skip connections
 * too. A message holds the values in crossing order; its size is the memory model's
 * (plan/memory.h), so channel buffers are what the admission check counted. Values that arrive by
 * a device path are read in place from the channel's buffer (bt_slot_value). */
#include <stdlib.h>

#include "core/error.h"
#include "exec/exec_internal.h"

bt_status bt_topology_paths(bt_engine *e)
{
    e->paths = calloc((size_t)e->stages * (size_t)e->stages, sizeof *e->paths);
    if (!e->paths) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int a = 0; a < e->stages; a++)
        for (int b = 0; b < e->stages; b++)
            if (a != b) e->paths[a * e->stages + b] = bt_transfer_path_for(e, a, b);
    return BT_OK;
}

bt_transfer_path bt_topology_path(const bt_engine *e, int from, int to)
{
    return e->paths[from * e->stages + to];
}

/* Adds channel dir (0: activations a -> b, 1: gradients b -> a) carrying values[n_values]. */
static bt_status add_channel(bt_engine *e, int a, int b, int dir, const int *values, int n_values)
{
    bt_channel *ch = &e->channels[e->n_channels];
    BT_TRY(bt_channel_init(ch, dir ? b : a, dir ? a : b, dir, e->params.parallel.microbatches));
    e->n_channels++;
    ch->path = bt_topology_path(e, ch->from, ch->to);
    for (int k = 0; k < n_values; k++) {
        const bt_value *v = &e->graph->values[values[k]];
        if (dir && v->dtype == BT_I32) continue;
        ch->value_off[ch->n_values] = ch->msg_bytes;
        ch->values[ch->n_values++] = values[k];
        ch->msg_bytes += bt_memory_value_bytes(e->graph, &e->memory, values[k]);
    }
    BT_TRY(bt_transfer_setup(e, ch));
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
    if (!dir) {
        from->out_act[from->n_out_act++] = ch;
        to->in_act[to->n_in_act++] = ch;
        for (int k = 0; k < ch->n_values && ch->path != BT_PATH_HOST; k++) {
            to->recv_from[ch->values[k]] = ch;
            to->recv_off[ch->values[k]] = ch->value_off[k];
        }
    } else {
        from->out_grad[from->n_out_grad++] = ch;
        to->in_grad[to->n_in_grad++] = ch;
    }
    return BT_OK;
}

bt_status bt_topology_build_channels(bt_engine *e)
{
    int p = e->stages;
    int cap = 2 * p * p + 2;
    e->channels = calloc((size_t)cap, sizeof *e->channels);
    if (!e->channels) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int s = 0; s < p; s++) {
        bt_stage *st = &e->stage[s];
        st->recv_from = calloc((size_t)e->graph->n_values + 1, sizeof *st->recv_from);
        st->recv_off = calloc((size_t)e->graph->n_values + 1, sizeof *st->recv_off);
        if (!st->recv_from || !st->recv_off) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    }
    for (int a = 0; a < p; a++) {
        for (int b = a + 1; b < p; b++) {
            int n_values = 0, values[BT_MAX_CHANNEL_VALUES];
            for (int c = 0; c < e->plan->n_crossings; c++) {
                const bt_crossing *x = &e->plan->crossings[c];
                if (x->src != a || x->dst != b) continue;
                if (n_values == BT_MAX_CHANNEL_VALUES)
                    return bt_error(BT_ERR_UNSUPPORTED, "more than %d values cross from stage %d to %d",
                                    BT_MAX_CHANNEL_VALUES, a, b);
                values[n_values++] = x->value;
            }
            if (n_values == 0 && b != a + 1) continue;
            for (int dir = 0; dir < (e->params.training ? 2 : 1); dir++)
                BT_TRY(add_channel(e, a, b, dir, values, n_values));
        }
    }
    return BT_OK;
}
