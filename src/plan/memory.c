/* plan/memory.c: the one memory model (see memory.h). Every size here is what exec/layout.c
 * allocates, computed in the order it lays the buffers out; change one only with the other, and
 * the engine's assertion after allocating catches a difference. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph_internal.h"
#include "plan/memory.h"

void bt_memory_params_init(bt_memory_params *p)
{
    memset(p, 0, sizeof *p);
    p->microbatch_size = 1;
    p->microbatches = 1;
    p->dtype = BT_F32;
    p->precision = BT_F32;
    p->training = 1;
}

static size_t align_up(size_t n) { return (n + BT_MEMORY_ALIGN - 1) & ~(size_t)(BT_MEMORY_ALIGN - 1); }

size_t bt_memory_value_bytes(const bt_graph *g, const bt_memory_params *mp, int v)
{
    const bt_value *val = &g->values[v];
    bt_dtype dt = val->dtype == BT_I32 ? BT_I32 : mp->dtype;
    return (size_t)mp->microbatch_size * (size_t)bt_shape_numel(&val->shape) * bt_dtype_size(dt);
}

static int host_path(const bt_plan *plan, const bt_memory_params *mp, int from, int to)
{
    return mp->host_path && mp->host_path[from * plan->stages + to];
}

static int is_outgoing(const bt_plan *plan, int stage, int value)
{
    for (int c = 0; c < plan->n_crossings; c++)
        if (plan->crossings[c].src == stage && plan->crossings[c].value == value) return 1;
    return 0;
}

/* Bytes of one message from stage a to b (activations), or the gradients going back (grad). */
static size_t message_bytes(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int a, int b,
                            int grad)
{
    size_t bytes = 0;
    for (int c = 0; c < plan->n_crossings; c++) {
        const bt_crossing *x = &plan->crossings[c];
        if (x->src != a || x->dst != b) continue;
        if (grad && g->values[x->value].dtype == BT_I32) continue;
        bytes += bt_memory_value_bytes(g, mp, x->value);
    }
    return bytes;
}

int bt_memory_node_recomputed(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s,
                              int node)
{
    const bt_node *n = &g->nodes[node];
    int on = mp->recompute ? mp->recompute[n->layer] : g->layers[n->layer].recompute;
    /* a split backward's W reads activations after later micro-batches' B reused the shared
     * recompute region: the engine recomputes again before W (worker.c) */
    return on && !is_outgoing(plan, s, n->out);
}

int bt_memory_node_has_wgrad(const bt_graph *g, int node)
{
    const bt_node *n = &g->nodes[node];
    return n->n_params > 0 && n->op && n->op->cpu_backward_weight != NULL;
}

/* Whether node's W stash can live in the slot space of node's own output: once the node's B has
 * run nothing reads that value again (its consumers on the stage ran their backward before it,
 * later stages hold their own copies), unless a consumer on the stage reads it as its input
 * after that B: one that defers a W, or one that is recomputed (the recomputation before W,
 * worker.c, reruns its forward from the value). Op W kernels never read `out` (op.h). */
static int stash_in_place(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s,
                          int node)
{
    int first = plan->first_node[s], end = first + plan->n_stage_nodes[s];
    if (node - first >= BT_MEMORY_MAX_STAGE_NODES) return 0;
    for (int j = first; j < end; j++) {
        const bt_node *c = &g->nodes[j];
        int reads_later = bt_memory_node_has_wgrad(g, j) || bt_memory_node_recomputed(g, plan, mp, s, j);
        for (int i = 0; i < c->n_in; i++)
            if (c->in[i] == g->nodes[node].out && reads_later) return 0;
    }
    return 1;
}

bt_status bt_memory_bf16_mode(int *mode)
{
    const char *v = getenv("BATON_BF16_STASH");
    if (!v || !*v || strcmp(v, "auto") == 0) *mode = BT_KEEP_AUTO;
    else if (strcmp(v, "1") == 0) *mode = BT_KEEP_BF16;
    else if (strcmp(v, "0") == 0) *mode = BT_KEEP_F32;
    else
        return bt_error(BT_ERR_INVALID_ARG, "BATON_BF16_STASH=%s: expected auto, 1 (activations kept as bf16 "
                        "on every CPU stage under precision bf16) or 0 (kept as f32)", v);
    return BT_OK;
}

/* A floating value the executor rounds under mixed precision: every one but the graph's output
 * (the loss, kept exact). In a slot under bf16 storage it is kept as bf16. */
static int rounded_value(const bt_graph *g, int v)
{
    return g->values[v].dtype != BT_I32 && v != bt_graph_output_value(g);
}

static size_t half_bytes(const bt_graph *g, const bt_memory_params *mp, int v)
{
    return (size_t)mp->microbatch_size * (size_t)bt_shape_numel(&g->values[v].shape) * 2;
}

/* The values a stage keeps as bf16 under bf16 storage, with the stage-local nodes between which
 * each one's working copy is live: [first, last], and its offset in the work region. The arrays
 * hold kept_candidates() entries (on the caller's stack: one stage's values). */
typedef struct kept_list {
    int n;
    int *value, *first, *last, *active;
    size_t *offset;
} kept_list;

/* Adds v, live from stage-local node `first`: to its last reader on the stage, or to the stage's
 * end when a later stage reads it (the send reads it after the forward). */
static void kept_add(const bt_graph *g, const bt_plan *plan, int s, int v, int first, kept_list *k)
{
    int begin = plan->first_node[s], n = plan->n_stage_nodes[s], last = first;
    for (int j = first; j < n; j++)
        for (int i = 0; i < g->nodes[begin + j].n_in; i++)
            if (g->nodes[begin + j].in[i] == v) last = j;
    if (is_outgoing(plan, s, v)) last = n - 1;
    k->value[k->n] = v, k->first[k->n] = first, k->last[k->n] = last;
    k->n++;
}

/* Working copies: first fit in offset order among the copies live at the same time (the values
 * come in order of `first`). Returns the region's bytes. */
static size_t place_working(const bt_graph *g, const bt_memory_params *mp, kept_list *k)
{
    int *active = k->active, n_active = 0; /* the live copies, by offset */
    size_t total = 0;
    for (int j = 0; j < k->n; j++) {
        int keep = 0;
        for (int a = 0; a < n_active; a++)
            if (k->last[active[a]] >= k->first[j]) active[keep++] = active[a];
        n_active = keep;
        size_t bytes = bt_memory_value_bytes(g, mp, k->value[j]), at = 0;
        int pos = 0;
        for (; pos < n_active; pos++) {
            int a = active[pos];
            if (k->offset[a] >= at + bytes) break;
            size_t end = align_up(k->offset[a] + bt_memory_value_bytes(g, mp, k->value[a]));
            if (end > at) at = end;
        }
        k->offset[j] = at;
        memmove(&active[pos + 1], &active[pos], (size_t)(n_active - pos) * sizeof *active);
        active[pos] = j;
        n_active++;
        if (align_up(at + bytes) > total) total = align_up(at + bytes);
    }
    return total;
}

/* The values stage s would keep as bf16: a bound on kept_list. */
static int kept_candidates(const bt_plan *plan, int s)
{
    int n = plan->n_stage_nodes[s];
    for (int c = 0; c < plan->n_crossings; c++)
        n += plan->crossings[c].dst == s;
    return n;
}

/* Slot layout: received values (unless read in place), kept node outputs, their saved state, then
 * (split backward) the output-gradient stashes of the nodes with a deferred W that cannot reuse
 * their own output's space (stash_in_place); after the slot, the recompute region (one copy,
 * addressed from slot_bytes on): recomputed nodes' outputs and saved state; then (compact: bf16
 * storage) the work region of the kept values' f32 working copies. */
static void slot_layout(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s, int compact,
                        const bt_stage_layout *layout, bt_stage_memory *out)
{
    int *value_offset = layout ? layout->value_offset : NULL, *kept_offset = layout ? layout->kept_offset : NULL;
    size_t *saved_offset = layout ? layout->saved_offset : NULL, *wgrad_offset = layout ? layout->wgrad_offset : NULL;
    int cap = compact ? kept_candidates(plan, s) : 1;
    int kv[cap], kf[cap], kl[cap], ka[cap];
    size_t ko[cap];
    kept_list kept = {0, kv, kf, kl, ka, ko};
    size_t off = 0;
    for (int c = 0; c < plan->n_crossings; c++) {
        const bt_crossing *x = &plan->crossings[c];
        if (x->dst != s) continue;
        if (value_offset) value_offset[x->value] = (int)off;
        if (x->src >= 0 && !host_path(plan, mp, x->src, s)) continue; /* read in place */
        if (compact && rounded_value(g, x->value)) {
            if (kept_offset) kept_offset[x->value] = (int)off;
            kept_add(g, plan, s, x->value, 0, &kept);
            off = align_up(off + half_bytes(g, mp, x->value));
        } else {
            off = align_up(off + bt_memory_value_bytes(g, mp, x->value));
        }
    }
    size_t roff = 0; /* in the recompute region */
    size_t out_offset[BT_MEMORY_MAX_STAGE_NODES];
    out->n_recomputed = 0;
    for (int pass = 0; pass < 2; pass++) /* 0: outputs, 1: saved state */
        for (int k = 0; k < plan->n_stage_nodes[s]; k++) {
            int node = plan->first_node[s] + k;
            const bt_node *n = &g->nodes[node];
            int rec = bt_memory_node_recomputed(g, plan, mp, s, node);
            int half = pass == 0 && compact && !rec && rounded_value(g, n->out);
            size_t bytes = pass == 0 ? (half ? half_bytes(g, mp, n->out) : bt_memory_value_bytes(g, mp, n->out))
                                     : n->saved_per_sample * (size_t)mp->microbatch_size;
            size_t *o = rec ? &roff : &off;
            if (pass == 0) {
                if (half) {
                    if (kept_offset) kept_offset[n->out] = (int)*o;
                    kept_add(g, plan, s, n->out, k, &kept);
                } else if (value_offset) {
                    value_offset[n->out] = (int)*o; /* rebased below */
                }
                if (k < BT_MEMORY_MAX_STAGE_NODES) out_offset[k] = *o;
                size_t w = n->ws_per_sample * (size_t)mp->microbatch_size + n->ws_fixed;
                if (w > out->workspace) out->workspace = w;
                out->n_recomputed += rec;
            } else if (saved_offset) {
                saved_offset[k] = *o;
            }
            *o = align_up(*o + bytes);
        }
    for (int k = 0; k < plan->n_stage_nodes[s]; k++) {
        int node = plan->first_node[s] + k;
        int stash = mp->training && mp->split_backward && bt_memory_node_has_wgrad(g, node);
        int rec = bt_memory_node_recomputed(g, plan, mp, s, node);
        /* a recomputed node's output lives in the shared recompute region, which the recompute
         * before W rewrites: its stash takes room in the slot */
        if (stash && !rec && stash_in_place(g, plan, mp, s, node)) {
            if (wgrad_offset) wgrad_offset[k] = out_offset[k];
            continue;
        }
        if (wgrad_offset) wgrad_offset[k] = stash ? off : BT_MEMORY_NO_WGRAD;
        int out = g->nodes[node].out, half = compact && !rec && rounded_value(g, out);
        if (stash) off = align_up(off + (half ? half_bytes(g, mp, out) : bt_memory_value_bytes(g, mp, out)));
    }
    out->slot_bytes = off;
    out->recompute_bytes = roff;
    out->bf16_kept = compact;
    out->work_bytes = compact ? place_working(g, mp, &kept) : 0;
    for (int k = 0; k < plan->n_stage_nodes[s]; k++) { /* recompute-region offsets follow the slot */
        int node = plan->first_node[s] + k;
        if (!bt_memory_node_recomputed(g, plan, mp, s, node)) continue;
        if (value_offset) value_offset[g->nodes[node].out] += (int)off;
        if (saved_offset) saved_offset[k] += off;
    }
    for (int j = 0; value_offset && j < kept.n; j++) /* working copies follow the recompute region */
        value_offset[kept.value[j]] = (int)(off + roff + kept.offset[j]);
}

/* Whether stage s holds value v in a slot or reads it from a channel: it produces it, or it
 * crosses into s. */
static int stage_sees(const bt_graph *g, const bt_plan *plan, int s, int v)
{
    int producer = g->values[v].producer, first = plan->first_node[s];
    if (producer >= first && producer < first + plan->n_stage_nodes[s]) return 1;
    for (int c = 0; c < plan->n_crossings; c++)
        if (plan->crossings[c].dst == s && plan->crossings[c].value == v) return 1;
    return 0;
}

/* Value gradients: the values the stage sends to later stages first (a gradient receive zeroes
 * exactly those), then every other floating value it holds that some node produced. */
static void grad_layout(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s,
                        int *grad_offset, bt_stage_memory *out)
{
    size_t off = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int v = 0; v < g->n_values; v++) {
            const bt_value *val = &g->values[v];
            if (val->producer < 0 || val->dtype == BT_I32 || !stage_sees(g, plan, s, v)) continue;
            if (is_outgoing(plan, s, v) != (pass == 0)) continue;
            if (grad_offset) grad_offset[v] = (int)off;
            off = align_up(off + bt_memory_value_bytes(g, mp, v));
        }
        if (pass == 0) out->outgoing_grad_bytes = off;
    }
    out->value_grads = mp->training ? off : 0;
}

static void param_bytes(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s,
                        bt_stage_memory *out)
{
    int first = plan->first_node[s], end = first + plan->n_stage_nodes[s];
    size_t dsz = bt_dtype_size(mp->dtype);
    for (int p = 0; p < g->n_params; p++)
        if (g->params[p].node >= first && g->params[p].node < end)
            out->n_params += bt_shape_numel(&g->params[p].shape);
    size_t bytes = (size_t)out->n_params * dsz;
    out->weights = bytes * (mp->precision != BT_F32 ? 2 : 1);
    out->gradients = mp->training ? bytes : 0;
    out->optimizer = mp->training ? bytes * (size_t)mp->optimizer_slots : 0;
}

/* Channel buffers this stage receives into or sends into through host memory. Channels run
 * between every pair that exchanges values (gradients back only when training). */
static void channel_bytes(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s,
                          bt_stage_memory *out)
{
    size_t m = (size_t)mp->microbatches;
    for (int o = 0; o < plan->stages; o++) {
        if (o == s) continue;
        int a = o < s ? o : s, b = o < s ? s : o; /* activations a -> b, gradients b -> a */
        size_t act = message_bytes(g, plan, mp, a, b, 0) * m;
        size_t grad = mp->training ? message_bytes(g, plan, mp, a, b, 1) : 0;
        if (o < s) { /* s receives activations from o, sends gradients to o */
            if (!host_path(plan, mp, o, s)) out->recv_buffers += act;
            if (host_path(plan, mp, s, o)) out->host_channels += grad * m;
        } else { /* s sends activations to o, receives gradients from o */
            if (host_path(plan, mp, s, o)) out->host_channels += act;
            if (!host_path(plan, mp, o, s)) out->recv_buffers += grad * m;
            else if (grad > out->recv_scratch) out->recv_scratch = grad;
        }
    }
}

size_t bt_memory_activations_live(const bt_stage_memory *m, int live)
{
    if (live <= 0) return 0;
    return m->slot_bytes * (size_t)live + m->recompute_bytes + m->work_bytes;
}

void bt_memory_stage(const bt_graph *g, const bt_plan *plan, const bt_memory_params *mp, int s,
                     bt_stage_memory *out, bt_stage_layout *layout)
{
    memset(out, 0, sizeof *out);
    if (layout)
        for (int v = 0; v < g->n_values; v++) {
            layout->value_offset[v] = layout->grad_offset[v] = -1;
            if (layout->kept_offset) layout->kept_offset[v] = -1;
        }
    out->n_slots = mp->n_slots && mp->n_slots[s] > 1 ? mp->n_slots[s] : 1;
    int mode = mp->bf16_kept && mp->training && mp->precision == BT_BF16 && mp->dtype == BT_F32
                   ? mp->bf16_kept[s] : BT_KEEP_F32;
    if (kept_candidates(plan, s) > BT_MEMORY_MAX_STAGE_NODES) mode = BT_KEEP_F32;
    bt_stage_memory f32, bf16;
    memset(&f32, 0, sizeof f32);
    slot_layout(g, plan, mp, s, 0, NULL, &f32);
    size_t act_f32 = f32.slot_bytes * (size_t)out->n_slots + f32.recompute_bytes;
    int compact = 0;
    if (mode != BT_KEEP_F32) {
        memset(&bf16, 0, sizeof bf16);
        slot_layout(g, plan, mp, s, 1, NULL, &bf16);
        size_t act = bf16.slot_bytes * (size_t)out->n_slots + bf16.recompute_bytes + bf16.work_bytes;
        compact = mode == BT_KEEP_BF16 || act < act_f32;
    }
    slot_layout(g, plan, mp, s, compact, layout, out);
    grad_layout(g, plan, mp, s, layout ? layout->grad_offset : NULL, out);
    param_bytes(g, plan, mp, s, out);
    channel_bytes(g, plan, mp, s, out);
    out->activations = bt_memory_activations_live(out, out->n_slots);
    out->activations_f32 = act_f32;
    out->slot_bytes_f32 = f32.slot_bytes;
    out->loss_seed = (size_t)mp->microbatch_size * bt_dtype_size(mp->dtype);
    out->device_total = out->weights + out->gradients + out->optimizer + out->activations + out->value_grads +
                        out->workspace + out->loss_seed + out->recv_buffers + out->recv_scratch;
}

void bt_memory_layer(const bt_graph *g, int l, const bt_memory_params *mp, bt_layer_memory *out)
{
    const bt_layer *ly = &g->layers[l];
    size_t dsz = bt_dtype_size(mp->dtype), mb = (size_t)mp->microbatch_size;
    memset(out, 0, sizeof *out);
    for (int k = 0; k < ly->n_nodes; k++) {
        const bt_node *n = &g->nodes[ly->first_node + k];
        for (int j = 0; j < n->n_params; j++) out->n_params += bt_shape_numel(&g->params[n->params[j]].shape);
        const bt_value *v = &g->values[n->out];
        size_t out_row = (size_t)bt_shape_numel(&v->shape) * (v->dtype == BT_I32 ? 4 : dsz);
        out->activation_bytes_per_sample += out_row + n->saved_per_sample;
        if (k == ly->n_nodes - 1) out->output_bytes_per_sample = out_row;
        size_t w = n->ws_per_sample * mb + n->ws_fixed;
        if (w > out->workspace) out->workspace = w;
    }
    size_t bytes = (size_t)out->n_params * dsz;
    out->weights = bytes * (mp->precision != BT_F32 ? 2 : 1);
    out->gradients = mp->training ? bytes : 0;
    out->optimizer = mp->training ? bytes * (size_t)mp->optimizer_slots : 0;
}
