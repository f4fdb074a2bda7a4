/* exec/worker_nodes.c: what a worker's compute instructions run on its stage's nodes (worker.c
 * interprets the instruction list): FWD feeds the graph inputs into micro-batch mb's slot and
 * runs every node's forward, its output rounded under mixed precision; BWD runs the nodes'
 * backward in reverse, with a split backward (zero bubble) only the input gradients, stashing
 * what the deferred W reads; W runs those weight gradients. Activation recomputation reruns the
 * recomputed nodes' forward just before a BWD (recompute), sharing forward_node with FWD. The op
 * calls are built by prepare_call from the stage's memory layout (layout.c). A rounding that
 * cannot change a bit is skipped: an output its op writes exact, a gradient exactly one exact
 * consumer wrote (bt_worker_plan_exact, op.h's lowp_exact). A custom op's kernel (bt_op_register:
 * a plugin's) is checked after each call: NaN or infinity it writes from finite operands is an
 * error naming it there (custom_forward_finite, custom_backward_finite), not a non-finite gradient
 * found at the step, whose message would point at the data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "core/error.h"
#include "exec/exec_internal.h"
#include "graph/lowp_exact.h"
#include "graph/op_call.h"
#include "graph/op_registry.h"
#include "optim/optim.h"

static bt_dtype value_dtype(const bt_engine *e, const bt_value *v)
{
    return v->dtype == BT_I32 ? BT_I32 : e->dtype;
}

static size_t value_row_bytes(const bt_engine *e, const bt_value *v)
{
    return (size_t)bt_shape_numel(&v->shape) * bt_dtype_size(value_dtype(e, v));
}

static int node_input_wants_grad(const bt_engine *e, const bt_stage *st, const bt_node *n, int i)
{
    if (n->no_grad_mask & (1u << i)) return 0;
    return st->grad_offset[n->in[i]] >= 0;
}

/* What a call computes: the forward, the backward (under a split backward, B: no parameter
 * gradients for the nodes whose W comes later), or the deferred W (no input gradients, the output
 * gradient from the slot's stash). */
enum { PHASE_FWD = 0, PHASE_BWD = 1, PHASE_WGT = 2 };

static int node_defers_wgrad(const bt_stage *st, int k)
{
    return st->node_wgrad_offset[k] != BT_MEMORY_NO_WGRAD;
}

static void *wgrad_stash(const bt_stage *st, int k, int mb)
{
    return st->slots + (size_t)st->slot_of[mb] * st->slot_bytes + st->node_wgrad_offset[k];
}

/* Builds the call of node k on micro-batch mb (bt_op_call_build, the profiler's builder too). */
static void prepare_call(bt_engine *e, bt_stage *st, int k, int mb, int phase, bt_op_call *call,
                         bt_op_call_tensors *t)
{
    int backward = phase != PHASE_FWD;
    const bt_graph *g = e->graph;
    const bt_node *n = &g->nodes[st->first_node + k];
    bt_op_call_data d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < n->n_in; i++) d.in[i] = bt_slot_value(st, mb, n->in[i]);
    d.out = bt_slot_value(st, mb, n->out);
    for (int j = 0; j < n->n_params; j++) {
        bt_param_store *ps = st->node_params[k][j];
        d.param[j] = ps->w_lp ? ps->w_lp : ps->w;
        d.param_grad[j] = phase == PHASE_BWD && node_defers_wgrad(st, k) ? NULL : ps->g;
    }
    d.saved = bt_slot_at(st, mb, st->node_saved_offset[k]);
    d.workspace = st->workspace;
    if (phase == PHASE_BWD) {
        d.out_grad = st->grads + st->grad_offset[n->out];
        for (int i = 0; i < n->n_in; i++)
            d.in_grad[i] = node_input_wants_grad(e, st, n, i) ? st->grads + st->grad_offset[n->in[i]] : NULL;
    } else if (phase == PHASE_WGT) {
        /* the in_grad stay NULL; a bf16 stash is loaded into the output's working copy */
        d.out_grad = bt_store_stash_kept(st, g, k) ? d.out : wgrad_stash(st, k, mb);
        d.out = NULL; /* op.h: W never reads out, whose space may hold the stash */
    }
    bt_op_call_build(g, st->first_node + k, e->mb_size, e->dtype, backward, &d, t, call);
    call->precision = e->params.precision;
    call->seed = bt_mix64(e->params.seed ^ bt_mix64((uint64_t)e->step * 1000003ULL +
                                                        (uint64_t)mb * 7919ULL +
                                                        (uint64_t)(st->first_node + k)));
}

/* Whether node n's kernel is checked for NaN and infinity it makes: custom ops only (the built-ins
 * are baton's, tested), and not under f16, where overflow to infinity is the loss scaler's to
 * handle (the step is skipped). One reduction per tensor checked, on the node's device. */
static int checks_finite(const bt_engine *e, const bt_node *n)
{
    return e->params.precision != BT_F16 && bt_op_is_custom(n->op);
}

/* *finite = 0 when floating tensor t holds NaN or infinity (an i32 or absent one is finite). */
static bt_status tensor_finite(bt_stage *st, const bt_tensor *t, int *finite)
{
    *finite = 1;
    if (!t->data || (t->dtype != BT_F32 && t->dtype != BT_F64)) return BT_OK;
    const void *x = t->data;
    size_t n = (size_t)bt_tensor_numel(t);
    double sumsq = 0;
    BT_TRY(st->be->sum_squares(st->dev, t->dtype, &x, &n, 1, &sumsq));
    *finite = isfinite(sumsq);
    return BT_OK;
}

/* *finite = 1 when every input of the call is finite. */
static bt_status inputs_finite(bt_stage *st, const bt_node *n, const bt_op_call_tensors *t, int *finite)
{
    *finite = 1;
    for (int i = 0; i < n->n_in && *finite; i++) BT_TRY(tensor_finite(st, &t->in[i], finite));
    return BT_OK;
}

/* " at step N" of a training step (the engine's numeric errors name the step), else "". */
static const char *step_text(const bt_engine *e, int training, char *buf, size_t size)
{
    if (!training) return "";
    snprintf(buf, size, " at step %lld", (long long)e->step + 1);
    return buf;
}

/* After a checked node's forward: a non-finite output from finite inputs is the op's doing. */
static bt_status custom_forward_finite(const bt_engine *e, bt_stage *st, const bt_node *n, const bt_op_call_tensors *t,
                                       int training)
{
    char at[48];
    int out_ok, in_ok;
    BT_TRY(tensor_finite(st, &t->out, &out_ok));
    if (out_ok) return BT_OK;
    BT_TRY(inputs_finite(st, n, t, &in_ok));
    if (!in_ok) return BT_OK; /* it was handed NaN: whoever made it is named, or the step finds it */
    return bt_error(BT_ERR_NUMERIC, "op '%s' (a custom op) wrote NaN or infinity into its output from finite inputs%s",
                    n->op->name, step_text(e, training, at, sizeof at));
}

/* Before a checked node's backward: bit i of *mask set where input gradient i is wanted and finite
 * (so a non-finite one afterwards is this call's doing). */
static bt_status finite_grads(bt_stage *st, const bt_node *n, const bt_op_call_tensors *t, unsigned *mask)
{
    *mask = 0;
    for (int i = 0; i < n->n_in; i++) {
        int ok = 0;
        if (t->in_grad[i].data) BT_TRY(tensor_finite(st, &t->in_grad[i], &ok));
        if (ok) *mask |= 1u << i;
    }
    return BT_OK;
}

/* After a checked node's backward: an input gradient finite before the call and not after, from a
 * finite output gradient and finite inputs, is the op's doing. */
static bt_status custom_backward_finite(const bt_engine *e, bt_stage *st, const bt_node *n, const bt_op_call_tensors *t,
                                        unsigned before)
{
    char at[48];
    for (int i = 0; i < n->n_in; i++) {
        int ok, given;
        if (!(before & (1u << i))) continue;
        BT_TRY(tensor_finite(st, &t->in_grad[i], &ok));
        if (ok) continue;
        BT_TRY(tensor_finite(st, &t->out_grad, &given));
        if (given) BT_TRY(inputs_finite(st, n, t, &given));
        if (!given) return BT_OK;
        return bt_error(BT_ERR_NUMERIC, "op '%s' (a custom op) wrote NaN or infinity into the gradient of its input %d "
                        "from a finite output gradient and finite inputs%s", n->op->name, i,
                        step_text(e, 1, at, sizeof at));
    }
    return BT_OK;
}

/* Mixed precision: rounds a float value (an activation an op just wrote, a complete gradient, or
 * a fed input) to the compute precision. */
static bt_status round_value(bt_engine *e, bt_stage *st, void *data, const bt_value *v)
{
    if (e->params.precision == BT_F32 || v->dtype == BT_I32 || !data) return BT_OK;
    size_t n = (size_t)e->mb_size * (size_t)bt_shape_numel(&v->shape);
    return st->be->round_to(st->dev, e->params.precision, data, n);
}

/* BT_EXACT_GRAD beyond the graph's rule (bt_lowp_grad_writer): the one node that writes value v's
 * gradient is on this stage (and takes it: the stage keeps that gradient), and no channel adds
 * into it (v crosses to no stage). Its zeroed buffer then holds exactly what that node wrote. */
static int grad_exact(const bt_engine *e, const bt_stage *st, int v)
{
    const bt_graph *g = e->graph;
    int c = bt_lowp_grad_writer(g, v, e->params.precision, st->be->name);
    if (c < st->first_node || c >= st->first_node + st->n_nodes) return 0;
    for (int x = 0; x < e->plan->n_crossings; x++)
        if (e->plan->crossings[x].value == v) return 0;
    return st->grad_offset[v] >= 0;
}

bt_status bt_worker_plan_exact(const bt_engine *e, bt_stage *st)
{
    int on = 0;
    BT_TRY(bt_lowp_skip_enabled(&on));
    for (int k = 0; k < st->n_nodes; k++) {
        st->exact[k] = 0;
        if (!on || e->params.precision == BT_F32) continue;
        if (bt_lowp_output_exact(e->graph, st->first_node + k, e->params.precision, st->be->name))
            st->exact[k] |= BT_EXACT_OUT;
        if (grad_exact(e, st, e->graph->nodes[st->first_node + k].out)) st->exact[k] |= BT_EXACT_GRAD;
    }
    return BT_OK;
}

/* f16: a finite fed value that would round to infinity (|x| >= 65520) is refused, not spread. */
static bt_status check_f16_feed(const bt_engine *e, const bt_value *v, const float *x, int mb)
{
    const size_t per = (size_t)bt_shape_numel(&v->shape), n = (size_t)e->mb_size * per;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) >= 65520.0f)
            return bt_error(BT_ERR_INVALID_ARG, "input '%s', sample %lld, element %zu is %g: "
                            "beyond f16's range (largest 65504), so precision f16 would make it "
                            "infinity (scale the data, or use bf16 or f32)", v->name,
                            (long long)mb * e->mb_size + (long long)(i / per), i % per,
                            (double)x[i]);
    return BT_OK;
}

/* Copies micro-batch mb of each fed input into its slot, rounded under mixed precision like every
 * other operand (so the GPU's bf16/f16 GEMM conversions are exact for feeds too). */
static bt_status feed_inputs(bt_engine *e, bt_stage *st, int mb)
{
    for (int c = 0; c < e->plan->n_crossings; c++) {
        const bt_crossing *x = &e->plan->crossings[c];
        if (x->dst != st->index || x->src != -1) continue;
        const bt_value *v = &e->graph->values[x->value];
        size_t row = value_row_bytes(e, v);
        const unsigned char *src =
            e->feed_ptr[v->input_index] + (size_t)mb * (size_t)e->mb_size * row;
        void *slot = bt_slot_value(st, mb, x->value);
        if (e->params.precision == BT_F16 && v->dtype != BT_I32)
            BT_TRY(check_f16_feed(e, v, (const float *)src, mb));
        BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_H2D, slot, src,
                                  (size_t)e->mb_size * row));
        BT_TRY(round_value(e, st, slot, v));
        BT_TRY(bt_store_wrote(e, st, mb, x->value));
    }
    return BT_OK;
}

/* Before micro-batch mb overwrites its slot, the copies that still read the slot's previous
 * micro-batch must be done (device paths copy on another stream). */
static bt_status wait_slot_free(bt_stage *st, int mb)
{
    int slot = st->slot_of[mb], prev = st->slot_owner[slot];
    st->slot_owner[slot] = mb;
    if (prev < 0 || prev == mb) return BT_OK;
    for (int c = 0; c < st->n_out_act; c++) {
        bt_channel *ch = st->out_act[c];
        if (bt_channel_has_events(ch) && ch->pending[prev])
            BT_TRY(st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->sent[prev]));
    }
    return BT_OK;
}

/* The forward of node k on micro-batch mb, its output rounded under mixed precision. */
static bt_status forward_node(bt_engine *e, bt_stage *st, int k, int mb, int training, const char *what)
{
    const bt_graph *g = e->graph;
    const bt_node *n = &g->nodes[st->first_node + k];
    bt_op_call_tensors t;
    bt_op_call call;
    prepare_call(e, st, k, mb, PHASE_FWD, &call, &t);
    call.training = training;
    bt_status s = bt_store_load_node(e, st, k, mb, 0);
    if (s == BT_OK) s = bt_backend_run_op(st->be, st->dev, n->op, 0, &call);
    if (atomic_load(&e->abandoned)) return BT_ERR_TIMEOUT; /* engine_job.c: leave the graph alone */
    if (s == BT_OK && checks_finite(e, n)) s = custom_forward_finite(e, st, n, &t, training);
    if (s == BT_OK && n->out != e->loss_value && !(st->exact[k] & BT_EXACT_OUT))
        s = round_value(e, st, t.out.data, &g->values[n->out]);
    if (s == BT_OK) s = bt_store_wrote(e, st, mb, n->out);
    if (s != BT_OK)
        return bt_error_context(s, "stage %d, %s of layer '%s' (micro-batch %d)", st->index, what,
                                g->layers[n->layer].name, mb);
    return BT_OK;
}

bt_status bt_worker_forward(bt_engine *e, bt_stage *st, int mb, int training)
{
    const bt_graph *g = e->graph;
    BT_TRY(wait_slot_free(st, mb));
    BT_TRY(feed_inputs(e, st, mb));
    for (int k = 0; k < st->n_nodes; k++) BT_TRY(forward_node(e, st, k, mb, training, "forward"));
    if (e->out_ptr && st->value_offset[e->out_value] >= 0 &&
        g->values[e->out_value].producer >= st->first_node &&
        g->values[e->out_value].producer < st->first_node + st->n_nodes) {
        size_t row = value_row_bytes(e, &g->values[e->out_value]);
        size_t bytes = (size_t)e->mb_size * row;
        BT_TRY(bt_store_load(e, st, mb, e->out_value));
        BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_D2H,
                                  (unsigned char *)e->out_ptr + (size_t)mb * bytes,
                                  bt_slot_value(st, mb, e->out_value), bytes));
    }
    if ((training || e->has_loss) && st->index == e->stages - 1) {
        size_t bytes = (size_t)e->mb_size * bt_dtype_size(e->dtype);
        BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_D2H,
                                  (unsigned char *)st->loss_host + (size_t)mb * bytes,
                                  bt_slot_value(st, mb, e->loss_value), bytes));
    }
    return BT_OK;
}

/* Activation recomputation: rebuilds the recomputed nodes' values and saved state of micro-batch
 * mb in the recompute region, in graph order, from the values its slot kept. The same call (seed
 * from step, micro-batch and node) gives the same dropout mask, so the backward that follows sees
 * exactly what the forward computed. */
static bt_status recompute(bt_engine *e, bt_stage *st, int mb)
{
    if (!st->need.n_recomputed) return BT_OK;
    for (int k = 0; k < st->n_nodes; k++)
        if (st->recomputed[k]) BT_TRY(forward_node(e, st, k, mb, 1, "recomputation"));
    return BT_OK;
}

/* last: the stage's last backward of the step (data parallel: buckets start as gradients finish) */
bt_status bt_worker_backward(bt_engine *e, bt_stage *st, int mb, int last)
{
    const bt_graph *g = e->graph;
    BT_TRY(recompute(e, st, mb));
    /* the gradients this stage sent back last are about to be overwritten */
    for (int c = 0; c < st->n_out_grad; c++) {
        bt_channel *ch = st->out_grad[c];
        if (bt_channel_has_events(ch) && ch->last_sent >= 0)
            BT_TRY(st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->sent[ch->last_sent]));
    }
    BT_TRY(st->be->zero(st->dev, st->grads + st->outgoing_grad_bytes,
                        st->grad_bytes - st->outgoing_grad_bytes));
    if (st->index == e->stages - 1) /* d(scaled mean loss)/d(per-sample loss), set at the job's start */
        BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_D2D,
                                  st->grads + st->grad_offset[e->loss_value], st->seed_dev,
                                  (size_t)e->mb_size * bt_dtype_size(e->dtype)));
    for (int k = st->n_nodes - 1; k >= 0; k--) {
        const bt_node *n = &g->nodes[st->first_node + k];
        bt_op_call_tensors t;
        bt_op_call call;
        prepare_call(e, st, k, mb, PHASE_BWD, &call, &t);
        call.training = 1;
        /* mixed precision: a value's gradient is rounded once it is complete, as its producer
         * reads it, so where its consumers' contributions were added (which stage) cannot matter;
         * not where it is exact already (bt_worker_plan_exact) */
        bt_status s = n->out == e->loss_value || (st->exact[k] & BT_EXACT_GRAD)
                          ? BT_OK
                          : round_value(e, st, t.out_grad.data, &g->values[n->out]);
        if (s == BT_OK) s = bt_store_load_node(e, st, k, mb, 1);
        unsigned finite_before = 0;
        const int checked = checks_finite(e, n);
        if (s == BT_OK && checked) s = finite_grads(st, n, &t, &finite_before);
        if (s == BT_OK) s = bt_backend_run_op(st->be, st->dev, n->op, 1, &call);
        if (s == BT_OK && checked) s = custom_backward_finite(e, st, n, &t, finite_before);
        /* W reads the output gradient after the next B reused the buffer: a copy in the slot, taken
         * after B (the stash may be the node's own output, which B may still read); bf16 where the
         * output is kept so */
        if (s == BT_OK && node_defers_wgrad(st, k))
            s = bt_store_stash_kept(st, g, k)
                    ? bt_store_stash(e, st, k, mb, t.out_grad.data)
                    : st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_D2D, wgrad_stash(st, k, mb),
                                         t.out_grad.data, bt_memory_value_bytes(g, &e->memory, n->out));
        if (atomic_load(&e->abandoned)) return BT_ERR_TIMEOUT; /* engine_job.c: leave the graph alone */
        if (s != BT_OK)
            return bt_error_context(s, "stage %d, backward of layer '%s' (micro-batch %d)",
                                    st->index, g->layers[n->layer].name, mb);
        /* a node whose W comes later (split backward) has its weight gradients final there */
        if (last && !node_defers_wgrad(st, k)) BT_TRY(e->ranks->grads_final(e, st, k));
    }
    return BT_OK;
}

/* W of a split backward: the weight gradients of every node that deferred them, from the
 * activations and output-gradient stashes its slot still holds. Recomputed activations are
 * rebuilt first (the shared region may hold another micro-batch's since this one's B): the same
 * seeds give the same values, so W sees what the forward computed. */
bt_status bt_worker_weight_grads(bt_engine *e, bt_stage *st, int mb, int last)
{
    const bt_graph *g = e->graph;
    BT_TRY(recompute(e, st, mb));
    for (int k = st->n_nodes - 1; k >= 0; k--) {
        if (!node_defers_wgrad(st, k)) continue;
        const bt_node *n = &g->nodes[st->first_node + k];
        bt_op_call_tensors t;
        bt_op_call call;
        prepare_call(e, st, k, mb, PHASE_WGT, &call, &t);
        call.training = 1;
        bt_status s = bt_store_load_node(e, st, k, mb, 0);
        if (s == BT_OK && bt_store_stash_kept(st, g, k)) s = bt_store_load_stash(e, st, k, mb);
        if (s == BT_OK) s = bt_backend_run_op(st->be, st->dev, n->op, BT_RUN_WEIGHT, &call);
        if (atomic_load(&e->abandoned)) return BT_ERR_TIMEOUT; /* engine_job.c: leave the graph alone */
        if (s != BT_OK)
            return bt_error_context(s, "stage %d, weight gradient of layer '%s' (micro-batch %d)",
                                    st->index, g->layers[n->layer].name, mb);
        if (last) BT_TRY(e->ranks->grads_final(e, st, k)); /* the step's last W: data parallel buckets */
    }
    return BT_OK;
}
