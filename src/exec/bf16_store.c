/* exec/bf16_store.c: activations kept as bf16 (precision bf16 on a CPU stage; plan/memory.h).
 *
 * Under mixed precision every value a slot keeps is a bf16 value held in an f32 (the worker
 * rounds each fed input, activation and complete gradient), so its upper 16 bits hold it exactly.
 * On a stage with bf16 storage (need.bf16_kept) each such value has a bf16 copy per slot and one
 * f32 working copy in the work region, which is what value_offset points at: ops read and write
 * only working copies, and this file moves values between the two:
 *   - after a forward wrote mb's value (an op's output, a fed input, a host-path receive) and the
 *     worker rounded it: stored into mb's slot (the backend's store_bf16, which fails on a value
 *     that is not a bf16 value: a bug, never a silent change);
 *   - before an op (forward, recomputation, backward, W), a send or the output copy reads mb's
 *     value: loaded from the slot unless the working copy holds mb's already (work_tag).
 * Values whose working copies share space (the memory model gives two values the same space only
 * when no node of the stage needs both) invalidate each other's tags when one is written. A split
 * backward's W stash of a node whose output is kept this way is bf16 as well: B stores the rounded
 * output gradient straight into the slot, W loads it into the output's working copy (W never reads
 * the output, and no value live at that node shares its space). The results are those of f32
 * slots bit for bit: every conversion is exact. */
#include <stdlib.h>

#include "core/error.h"
#include "exec/exec_internal.h"

bt_status bt_store_init(bt_stage *st, const bt_graph *g)
{
    st->n_kept = 0;
    if (!st->need.bf16_kept) return BT_OK;
    st->kept_values = calloc((size_t)g->n_values + 1, sizeof *st->kept_values);
    st->work_tag = calloc((size_t)g->n_values + 1, sizeof *st->work_tag);
    if (!st->kept_values || !st->work_tag) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int v = 0; v < g->n_values; v++) {
        st->work_tag[v] = -1;
        if (st->kept_offset[v] >= 0) st->kept_values[st->n_kept++] = v;
    }
    return BT_OK;
}

void bt_store_forget(bt_stage *st)
{
    for (int i = 0; i < st->n_kept; i++) st->work_tag[st->kept_values[i]] = -1;
}

static size_t elements(const bt_engine *e, int v)
{
    return (size_t)e->mb_size * (size_t)bt_shape_numel(&e->graph->values[v].shape);
}

/* Whether the working copies of a and b share bytes: [value_offset, + 4 bytes an element). */
static int overlaps(const bt_engine *e, const bt_stage *st, int a, int b)
{
    size_t a0 = (size_t)st->value_offset[a], a1 = a0 + 4 * elements(e, a);
    size_t b0 = (size_t)st->value_offset[b], b1 = b0 + 4 * elements(e, b);
    return a0 < b1 && b0 < a1;
}

/* v's working copy now holds micro-batch tag's value (-1: none's, a stash): the copies sharing
 * its space hold nothing usable any more. */
static void claim(const bt_engine *e, bt_stage *st, int v, int tag)
{
    for (int i = 0; i < st->n_kept; i++) {
        int u = st->kept_values[i];
        if (u != v && st->work_tag[u] >= 0 && overlaps(e, st, u, v)) st->work_tag[u] = -1;
    }
    st->work_tag[v] = tag;
}

static int kept(const bt_stage *st, int v) { return st->n_kept && st->kept_offset[v] >= 0; }

bt_status bt_store_load(bt_engine *e, bt_stage *st, int mb, int v)
{
    if (!kept(st, v) || st->work_tag[v] == mb) return BT_OK;
    BT_TRY(st->be->load_bf16(st->dev, bt_slot_value(st, mb, v), bt_slot_at(st, mb, (size_t)st->kept_offset[v]),
                             elements(e, v)));
    claim(e, st, v, mb);
    return BT_OK;
}

bt_status bt_store_load_node(bt_engine *e, bt_stage *st, int k, int mb, int with_out)
{
    if (!st->n_kept) return BT_OK;
    const bt_node *n = &e->graph->nodes[st->first_node + k];
    for (int i = 0; i < n->n_in; i++) BT_TRY(bt_store_load(e, st, mb, n->in[i]));
    if (with_out) BT_TRY(bt_store_load(e, st, mb, n->out));
    return BT_OK;
}

bt_status bt_store_wrote(bt_engine *e, bt_stage *st, int mb, int v)
{
    if (!kept(st, v)) return BT_OK;
    claim(e, st, v, mb);
    bt_status s = st->be->store_bf16(st->dev, bt_slot_at(st, mb, (size_t)st->kept_offset[v]), bt_slot_value(st, mb, v),
                                     elements(e, v));
    if (s != BT_OK)
        return bt_error_context(s, "keeping value '%s' as bf16", e->graph->values[v].name);
    return BT_OK;
}

int bt_store_stash_kept(const bt_stage *st, const bt_graph *g, int k)
{
    return st->node_wgrad_offset[k] != BT_MEMORY_NO_WGRAD && kept(st, g->nodes[st->first_node + k].out);
}

bt_status bt_store_stash(bt_engine *e, bt_stage *st, int k, int mb, const float *grad)
{
    int v = e->graph->nodes[st->first_node + k].out;
    bt_status s = st->be->store_bf16(st->dev, bt_slot_at(st, mb, st->node_wgrad_offset[k]), grad, elements(e, v));
    if (s != BT_OK)
        return bt_error_context(s, "keeping the gradient of '%s' for W as bf16", e->graph->values[v].name);
    return BT_OK;
}

bt_status bt_store_load_stash(bt_engine *e, bt_stage *st, int k, int mb)
{
    int v = e->graph->nodes[st->first_node + k].out;
    claim(e, st, v, -1);
    return st->be->load_bf16(st->dev, bt_slot_value(st, mb, v), bt_slot_at(st, mb, st->node_wgrad_offset[k]),
                             elements(e, v));
}
