/* exec/decode.c: autoregressive decoding through the engine's stages (exec/decode.h). A decode
 * run is a job without a schedule (BT_JOB_DECODE): every stage's worker, on its own device with
 * the engine's own weights for its layers, loops over the items its inbox hands it.
 *
 * Per stage and item (a sequence's rows [pos, pos + n)): each row runs through the stage's nodes
 * (up to the logits node) with run_op(BT_RUN_DECODE) and the row's position, on any backend
 * (CPU or GPU: the backend's runs_decode says which ops it can decode, and a stage holding one it
 * cannot is refused before anything runs); a node with a decode kernel (attention) keeps the
 * sequence's cache, allocated per (node, sequence) on the stage's device. Under mixed precision
 * the rows are computed as the forward computes them: the parameters' rounded compute copies,
 * call->precision set (bf16/f16 GEMMs), every row an op writes rounded to the precision. The rows
 * of every value a later stage reads are written into that stage's buffer for
 * the sequence (T rows per value), directly when the two stages share memory (the `local` path:
 * the backend's copy on the sender's compute stream, behind the kernels that wrote the row),
 * else through a host buffer (every other path: the sender's to_host, a device-to-host copy on a
 * GPU that returns once done, and the receiver's from_host before it runs the item; decoding
 * moves [1, C] rows, too small for the peer and staged paths to pay). Once the device is idle
 * (the backend's sync, so every queued copy has landed) the item is posted to
 * every later stage that reads from this one; a stage takes an item once every stage sending to it
 * has posted it (the engine's channels say which values and which pairs). The logits stage copies
 * the logits to the host and calls the caller's callback, whose next item goes back to stage 0.
 *
 * Invariants: a sequence has at most one item in the pipeline, so its buffer slot on a boundary
 * and its caches are touched by one stage at a time and inboxes hold at most n_seqs entries;
 * sequences share no state (saved state and workspace are per stage and used one row at a
 * time), so a sequence's numbers do not depend on the others or on the stage count. Waits are
 * bounded by the engine's watchdog and stop on its abort flag.
 *
 * Across processes (D = 1, one rank per stage) every rank sets up the same boundaries and the same
 * items, but only its own stage's buffers; a boundary between ranks is `remote`: the sender writes
 * the item's rows position-major into the boundary's message buffer and sends it with the item's
 * header and tokens (decode_dist.c), where a local sender would post; the logits rank sends each
 * next item back to stage 0's rank, and a finish to every other rank once every sequence is done.
 * The rank's one decoding worker takes the messages itself while it waits (next_ready_polling):
 * each becomes the sequence's current item, its rows are copied into the boundary's buffer on the
 * device, and it is posted as a local sender's. Rows are computed by the same code in the same
 * order either way, so a rank's tokens equal one process's.
 *
 * About 650 lines, above the house's 600: the worker loop, its set-up and the two ways an item
 * arrives (a local post, a message from another rank) share the run's private structs, which
 * another branch (GPU decoding) is changing; the MPI side itself is in decode_dist.c. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/decode.h"
#include "exec/decode_dist.h"
#include "exec/exec_internal.h"

#define DEC_ALIGN 64

/* One boundary (from -> to) of the decode: the engine channel's values, T rows each per sequence. */
typedef struct dchan {
    int from, to;
    int n_values;
    int values[BT_MAX_CHANNEL_VALUES];
    size_t row_bytes[BT_MAX_CHANNEL_VALUES];
    size_t off[BT_MAX_CHANNEL_VALUES]; /* in a sequence's slot */
    size_t slot_bytes;
    int local;                         /* the sender writes buf itself (shared memory) */
    int remote;                        /* the two stages run on different ranks (decode_dist.c) */
    size_t roff[BT_MAX_CHANNEL_VALUES], row_sum; /* a position's row of each value in a message */
    unsigned char *buf;                /* [n_seqs][slot_bytes] on the receiver's device */
    unsigned char *host;               /* [n_seqs][slot_bytes] host staging when not local */
} dchan;

typedef struct dstage {
    bt_stage *st;
    int first, last;                   /* nodes [first, last] run here (none: last < first) */
    void **row;                        /* [n_values] one row on the device: values produced here */
    int reads_tokens;
    int32_t *tok_dev;                  /* [T] the item's tokens on the device */
    void **saved, **ws, **cache;       /* [n_nodes of the graph], NULL outside [first, last] */
    size_t *cache_bytes;               /* per sequence */
    dchan **src;                       /* [n_values] the boundary a value arrives by, or NULL */
    int n_in, n_out;
    dchan *out[BT_MAX_STAGES];
    void *logits_host;                 /* the logits stage: [T][V] host rows */
    /* inbox: sequences ready to run here, first in first out */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sync_ready;
    int *fifo, head, count;
    atomic_int queued;                 /* count, for spinning without the mutex */
    int *arrived;                      /* [n_seqs] posts received for the pending item */
    /* statistics */
    double busy_ms;
    int64_t items;
} dstage;

struct bt_decode_run {
    bt_engine *e;
    const bt_decode_params *p;
    int P;                             /* stages 0..P-1 decode; the logits node is on P-1 */
    int64_t T;
    size_t es;                         /* the engine's float size */
    dstage stage[BT_MAX_STAGES];
    int n_ch;
    dchan *ch;
    bt_decode_item *item;              /* [n_seqs] each sequence's current item */
    int done;                          /* sequences finished (the logits stage only) */
    atomic_int finished;               /* every sequence is done */
    bt_decode_link *link;              /* across ranks: the messages between them, else NULL */
    int32_t *tok_store;                /* across ranks: [n_seqs][T] the tokens of items that arrived */
};

static size_t align_up(size_t n) { return (n + DEC_ALIGN - 1) / DEC_ALIGN * DEC_ALIGN; }

/* Bytes of one position's row of value v. */
static size_t row_bytes(const struct bt_decode_run *r, int v)
{
    const bt_value *val = &r->e->graph->values[v];
    int64_t n = val->shape.ndim ? bt_shape_numel(&val->shape) / val->shape.dim[0] : 1;
    return (size_t)n * (val->dtype == BT_I32 ? 4 : r->es);
}

static int stage_of_node(const bt_engine *e, int node)
{
    for (int s = 0; s < e->stages; s++)
        if (node >= e->stage[s].first_node && node < e->stage[s].first_node + e->stage[s].n_nodes) return s;
    return -1;
}

static void wake_all(struct bt_decode_run *r)
{
    for (int s = 0; s < r->P; s++) {
        dstage *d = &r->stage[s];
        pthread_mutex_lock(&d->mu);
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
}

/* Under d->mu. */
static void push_ready(dstage *d, int seq, int n_seqs)
{
    d->fifo[(d->head + d->count) % n_seqs] = seq;
    d->count++;
    atomic_store_explicit(&d->queued, d->count, memory_order_release);
    pthread_cond_broadcast(&d->cv);
}

/* One sender's post of seq's item to stage d; the item is ready once every sender posted. */
static void post_item(struct bt_decode_run *r, dstage *d, int seq, int counted)
{
    pthread_mutex_lock(&d->mu);
    if (!counted || ++d->arrived[seq] == d->n_in) {
        d->arrived[seq] = 0;
        push_ready(d, seq, r->p->n_seqs);
    }
    pthread_mutex_unlock(&d->mu);
}

/* ---- set-up and teardown (on the calling thread) ---------------------------------------------- */

static void free_run(struct bt_decode_run *r)
{
    bt_engine *e = r->e;
    for (int c = 0; r->ch && c < r->n_ch; c++) {
        dchan *ch = &r->ch[c];
        bt_stage *to = &e->stage[ch->to];
        if (ch->buf) to->be->free(to->dev, ch->buf);
        free(ch->host);
    }
    free(r->ch);
    for (int s = 0; s < r->P; s++) {
        dstage *d = &r->stage[s];
        bt_stage *st = d->st;
        for (int v = 0; d->row && v < e->graph->n_values; v++)
            if (d->row[v]) st->be->free(st->dev, d->row[v]);
        for (int n = 0; d->saved && n < e->graph->n_nodes; n++) {
            if (d->saved[n]) st->be->free(st->dev, d->saved[n]);
            if (d->ws[n]) st->be->free(st->dev, d->ws[n]);
            if (d->cache[n]) st->be->free(st->dev, d->cache[n]);
        }
        if (d->tok_dev) st->be->free(st->dev, d->tok_dev);
        free(d->row), free(d->saved), free(d->ws), free(d->cache), free(d->cache_bytes), free(d->src);
        free(d->fifo), free(d->arrived), free(d->logits_host);
        if (d->sync_ready) {
            pthread_mutex_destroy(&d->mu);
            pthread_cond_destroy(&d->cv);
        }
    }
    free(r->item);
    bt_decode_link_destroy(r->link);
    free(r->tok_store);
}

static bt_status dev_alloc(dstage *d, size_t bytes, void **out)
{
    BT_TRY(d->st->be->alloc(d->st->dev, bytes ? bytes : DEC_ALIGN, out));
    return d->st->be->zero(d->st->dev, *out, bytes ? bytes : DEC_ALIGN);
}

static bt_status setup_stage(struct bt_decode_run *r, int s)
{
    bt_engine *e = r->e;
    const bt_graph *g = e->graph;
    dstage *d = &r->stage[s];
    const int n_seqs = r->p->n_seqs;
    d->st = &e->stage[s];
    d->first = d->st->first_node;
    d->last = d->st->first_node + d->st->n_nodes - 1;
    if (d->last > r->p->logits_node) d->last = r->p->logits_node;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->sync_ready = 1;
    atomic_init(&d->queued, 0);
    if (!bt_stage_is_local(e, s)) return BT_OK; /* another rank runs it */
    d->row = calloc((size_t)g->n_values, sizeof *d->row);
    d->src = calloc((size_t)g->n_values, sizeof *d->src);
    d->saved = calloc((size_t)g->n_nodes, sizeof *d->saved);
    d->ws = calloc((size_t)g->n_nodes, sizeof *d->ws);
    d->cache = calloc((size_t)g->n_nodes, sizeof *d->cache);
    d->cache_bytes = calloc((size_t)g->n_nodes, sizeof *d->cache_bytes);
    d->fifo = calloc((size_t)n_seqs, sizeof *d->fifo);
    d->arrived = calloc((size_t)n_seqs, sizeof *d->arrived);
    if (!d->row || !d->src || !d->saved || !d->ws || !d->cache || !d->cache_bytes || !d->fifo || !d->arrived)
        return bt_error(BT_ERR_NOMEM, "decode: out of memory");
    const bt_backend *be = d->st->be;
    for (int n = d->first; n <= d->last; n++) {
        const bt_node *node = &g->nodes[n];
        if (!be->runs_decode || !be->runs_decode(node->op))
            return bt_error(BT_ERR_UNSUPPORTED, "decode: layer '%s' (op %s) has no %s kernel for the %s backend; "
                            "stage %d is on %s", g->layers[node->layer].name, node->op->name,
                            node->op->cpu_decode ? "decode (its cache of past positions)" : "forward", be->name, s,
                            d->st->device_name);
        BT_TRY(dev_alloc(d, node->saved_per_sample, &d->saved[n]));
        BT_TRY(dev_alloc(d, node->ws_per_sample + node->ws_fixed, &d->ws[n]));
        if (node->op->decode_cache_bytes) d->cache_bytes[n] = align_up(node->op->decode_cache_bytes(node->config));
        BT_TRY(dev_alloc(d, d->cache_bytes[n] * (size_t)n_seqs, &d->cache[n]));
        BT_TRY(dev_alloc(d, row_bytes(r, node->out), &d->row[node->out]));
        for (int i = 0; i < node->n_in; i++)
            if (node->in[i] == r->p->token_value) d->reads_tokens = 1;
    }
    if (d->reads_tokens) BT_TRY(dev_alloc(d, (size_t)r->T * sizeof(int32_t), (void **)&d->tok_dev));
    if (s == r->P - 1) {
        d->logits_host = malloc((size_t)r->T * row_bytes(r, g->nodes[r->p->logits_node].out) + 1);
        if (!d->logits_host) return bt_error(BT_ERR_NOMEM, "decode: out of memory for the logits");
    }
    return BT_OK;
}

/* The boundaries: the engine's activation channels between decoding stages. */
static bt_status setup_channels(struct bt_decode_run *r)
{
    bt_engine *e = r->e;
    r->ch = calloc((size_t)e->n_channels + 1, sizeof *r->ch);
    if (!r->ch) return bt_error(BT_ERR_NOMEM, "decode: out of memory");
    for (int c = 0; c < e->n_channels; c++) {
        const bt_channel *ec = &e->channels[c];
        if (ec->grad || ec->to >= r->P) continue;
        dchan *ch = &r->ch[r->n_ch++];
        dstage *from = &r->stage[ec->from], *to = &r->stage[ec->to];
        ch->from = ec->from;
        ch->to = ec->to;
        ch->n_values = ec->n_values;
        for (int k = 0; k < ec->n_values; k++) {
            const int v = ec->values[k];
            if (bt_stage_is_local(e, ec->from) && !from->row[v])
                return bt_error(BT_ERR_INTERNAL, "decode: value '%s' crosses from stage %d, which does not compute it",
                                e->graph->values[v].name, ec->from);
            ch->values[k] = v;
            ch->row_bytes[k] = row_bytes(r, v);
            ch->off[k] = ch->slot_bytes;
            ch->slot_bytes += align_up((size_t)r->T * ch->row_bytes[k]);
            ch->roff[k] = ch->row_sum;
            ch->row_sum += ch->row_bytes[k];
            if (to->src) to->src[v] = ch;
        }
        ch->remote = !bt_stage_is_local(e, ch->from) || !bt_stage_is_local(e, ch->to);
        ch->local = !ch->remote && bt_topology_path(e, ch->from, ch->to) == BT_PATH_LOCAL;
        const size_t total = ch->slot_bytes * (size_t)r->p->n_seqs;
        if (bt_stage_is_local(e, ch->to)) BT_TRY(dev_alloc(to, total, (void **)&ch->buf));
        if (!ch->local && !ch->remote && !(ch->host = malloc(total + 1)))
            return bt_error(BT_ERR_NOMEM, "decode: out of memory");
        if (ch->remote) BT_TRY(bt_decode_link_add(r->link, (int)(ch - r->ch), ch->from, ch->to, ch->row_sum));
        if (from->n_out >= BT_MAX_STAGES) return bt_error(BT_ERR_INTERNAL, "decode: too many boundaries");
        from->out[from->n_out++] = ch;
        to->n_in++;
    }
    return BT_OK;
}

/* Every input of the decoding nodes is the tokens, a value computed on the stage, or one that
 * arrives by a boundary. */
static bt_status check_inputs(struct bt_decode_run *r)
{
    const bt_graph *g = r->e->graph;
    for (int s = 0; s < r->P; s++) {
        dstage *d = &r->stage[s];
        if (!bt_stage_is_local(r->e, s)) continue;
        for (int n = d->first; n <= d->last; n++)
            for (int i = 0; i < g->nodes[n].n_in; i++) {
                const int v = g->nodes[n].in[i];
                if (v != r->p->token_value && !d->row[v] && !d->src[v])
                    return bt_error(BT_ERR_MODEL, "decode: layer '%s' reads '%s', which is not the tokens and is not "
                                    "computed before the logits", g->layers[g->nodes[n].layer].name,
                                    g->values[v].name);
            }
    }
    return BT_OK;
}

/* ---- the workers' loop --------------------------------------------------------------------------- */

/* Value v's row i of seq's item on stage d, as a (1, 1, rest...) tensor. */
static void row_tensor(const struct bt_decode_run *r, const dstage *d, int seq, int v, int64_t i, bt_tensor *t)
{
    const bt_value *val = &r->e->graph->values[v];
    memset(t, 0, sizeof *t);
    if (v == r->p->token_value) t->data = d->tok_dev + i;
    else if (d->row[v]) t->data = d->row[v];
    else {
        const dchan *ch = d->src[v];
        int k = 0;
        while (ch->values[k] != v) k++;
        t->data = ch->buf + (size_t)seq * ch->slot_bytes + ch->off[k] + (size_t)i * ch->row_bytes[k];
    }
    t->dtype = val->dtype == BT_I32 ? BT_I32 : r->e->dtype;
    t->ndim = val->shape.ndim + 1;
    t->dim[0] = 1;
    for (int k = 0; k < val->shape.ndim; k++) t->dim[k + 1] = k == 0 ? 1 : val->shape.dim[k];
}

static bt_status run_node(struct bt_decode_run *r, dstage *d, int n, int seq, int64_t i, int64_t pos)
{
    const bt_graph *g = r->e->graph;
    const bt_node *node = &g->nodes[n];
    bt_stage *st = d->st;
    bt_tensor in[BT_MAX_INPUTS], out, param[BT_MAX_PARAMS];
    for (int k = 0; k < node->n_in; k++) row_tensor(r, d, seq, node->in[k], i, &in[k]);
    row_tensor(r, d, seq, node->out, i, &out);
    for (int j = 0; j < node->n_params; j++) {
        const bt_param *p = &g->params[node->params[j]];
        memset(&param[j], 0, sizeof param[j]);
        const bt_param_store *ps = st->node_params[n - st->first_node][j];
        param[j].data = ps->w_lp ? ps->w_lp : ps->w; /* what the forward reads: the rounded copy, if any */
        param[j].dtype = r->e->dtype;
        param[j].ndim = p->shape.ndim;
        for (int k = 0; k < p->shape.ndim; k++) param[j].dim[k] = p->shape.dim[k];
    }
    bt_op_call call = {.batch = 1, .n_in = node->n_in, .in = in, .out = &out, .n_params = node->n_params,
                       .param = param, .saved = d->saved[n], .workspace = d->ws[n], .config = node->config,
                       .precision = r->e->params.precision, .position = pos,
                       .cache = d->cache_bytes[n] ? (unsigned char *)d->cache[n] + (size_t)seq * d->cache_bytes[n] : NULL};
    bt_status s = bt_backend_run_op(st->be, st->dev, node->op, BT_RUN_DECODE, &call);
    /* mixed precision: the row rounded as the forward rounds every activation (exec/worker.c) */
    const bt_value *ov = &g->values[node->out];
    if (s == BT_OK && call.precision != BT_F32 && ov->dtype != BT_I32)
        s = st->be->round_to(st->dev, call.precision, out.data, row_bytes(r, node->out) / sizeof(float));
    if (s != BT_OK) return bt_error_context(s, "decode: layer '%s'", g->layers[node->layer].name);
    return BT_OK;
}

/* Runs seq's current item on stage d and hands it on. */
static bt_status run_item(struct bt_decode_run *r, dstage *d, int seq)
{
    const bt_graph *g = r->e->graph;
    bt_stage *st = d->st;
    const bt_backend *be = st->be;
    const bt_decode_item *it = &r->item[seq];
    double t0 = bt_now_ms();
    if (it->reset)
        for (int n = d->first; n <= d->last; n++)
            if (d->cache_bytes[n])
                BT_TRY(be->zero(st->dev, (unsigned char *)d->cache[n] + (size_t)seq * d->cache_bytes[n], d->cache_bytes[n]));
    if (d->reads_tokens)
        BT_TRY(be->from_host(st->dev, d->tok_dev, it->tokens, (size_t)it->n * sizeof(int32_t)));
    for (int s = 0; s < r->P; s++) /* messages through host memory into this stage */
        for (int c = 0; c < r->stage[s].n_out; c++) {
            const dchan *ch = r->stage[s].out[c];
            if (ch->to != st->index || ch->local || ch->remote) continue; /* remote: copied on arrival */
            for (int k = 0; k < ch->n_values; k++) {
                const size_t at = (size_t)seq * ch->slot_bytes + ch->off[k];
                BT_TRY(be->from_host(st->dev, ch->buf + at, ch->host + at, (size_t)it->n * ch->row_bytes[k]));
            }
        }
    const int logits_stage = st->index == r->P - 1;
    const int lv = g->nodes[r->p->logits_node].out;
    const size_t lrow = row_bytes(r, lv);
    unsigned char *msg_rows[BT_MAX_STAGES] = {0}; /* across ranks: each boundary's message */
    for (int c = 0; c < d->n_out; c++)
        if (d->out[c]->remote) BT_TRY(bt_decode_link_rows(r->link, (int)(d->out[c] - r->ch), seq, &msg_rows[c]));
    for (int64_t i = 0; i < it->n; i++) {
        for (int n = d->first; n <= d->last; n++) BT_TRY(run_node(r, d, n, seq, i, it->pos + i));
        atomic_fetch_add_explicit(&r->e->progress, 1, memory_order_relaxed); /* the host's watchdog */
        for (int c = 0; c < d->n_out; c++) {
            const dchan *ch = d->out[c];
            for (int k = 0; k < ch->n_values; k++) {
                const size_t at = (size_t)seq * ch->slot_bytes + ch->off[k] + (size_t)i * ch->row_bytes[k];
                const void *row = d->row[ch->values[k]];
                if (ch->remote)
                    BT_TRY(be->to_host(st->dev, msg_rows[c] + (size_t)i * ch->row_sum + ch->roff[k], row, ch->row_bytes[k]));
                else if (ch->local) BT_TRY(be->copy(st->dev, ch->buf + at, row, ch->row_bytes[k]));
                else BT_TRY(be->to_host(st->dev, ch->host + at, row, ch->row_bytes[k]));
            }
        }
        if (logits_stage && (it->all_logits || i == it->n - 1))
            BT_TRY(be->to_host(st->dev, (unsigned char *)d->logits_host + (it->all_logits ? (size_t)i * lrow : 0),
                               d->row[lv], lrow));
    }
    BT_TRY(be->sync(st->dev));
    d->busy_ms += bt_now_ms() - t0;
    d->items++;
    for (int c = 0; c < d->n_out; c++) {
        if (d->out[c]->remote) BT_TRY(bt_decode_link_send_rows(r->link, (int)(d->out[c] - r->ch), seq, it));
        else post_item(r, &r->stage[d->out[c]->to], seq, 1);
    }
    if (!logits_stage) return BT_OK;
    bt_decode_item next;
    memset(&next, 0, sizeof next);
    BT_TRY(r->p->on_logits(r->p->ctx, seq, d->logits_host, it->all_logits ? it->n : 1, &next));
    if (next.done) {
        if (++r->done == r->p->n_seqs) {
            atomic_store(&r->finished, 1);
            wake_all(r);
            if (r->link) BT_TRY(bt_decode_link_send_finish(r->link));
        }
        return BT_OK;
    }
    if (next.n < 1 || next.pos < 0 || next.pos + next.n > r->T || (next.reset && next.pos != 0) || !next.tokens)
        return bt_error(BT_ERR_INTERNAL, "decode: sequence %d's next item (rows %lld + %lld) is not within T = %lld",
                        seq, (long long)next.pos, (long long)next.n, (long long)r->T);
    r->item[seq] = next;
    if (!bt_stage_is_local(r->e, 0)) return bt_decode_link_send_item(r->link, seq, &next);
    post_item(r, &r->stage[0], seq, 0);
    return BT_OK;
}

/* Across ranks: a message taken from another rank (decode_dist.c): the item's header and tokens
 * become seq's current item here, its rows go into the boundary's buffer on this stage's device,
 * and the item is posted as a local sender's would be (an item for stage 0 counts no sender). */
static bt_status on_arrival(void *ctx, int id, const bt_decode_head *h, const int32_t *tokens,
                            const unsigned char *rows)
{
    struct bt_decode_run *r = ctx;
    const int seq = h->seq;
    int32_t *tok = r->tok_store + (size_t)seq * (size_t)r->T;
    memcpy(tok, tokens, (size_t)h->n * sizeof *tok);
    r->item[seq] = (bt_decode_item){.tokens = tok, .pos = h->pos, .n = h->n, .reset = h->reset,
                                    .all_logits = h->all_logits};
    if (id < 0) {
        post_item(r, &r->stage[0], seq, 0);
        return BT_OK;
    }
    const dchan *ch = &r->ch[id];
    dstage *d = &r->stage[ch->to];
    for (int64_t i = 0; i < h->n; i++)
        for (int k = 0; k < ch->n_values; k++)
            BT_TRY(d->st->be->from_host(d->st->dev,
                                        ch->buf + (size_t)seq * ch->slot_bytes + ch->off[k] + (size_t)i * ch->row_bytes[k],
                                        rows + (size_t)i * ch->row_sum + ch->roff[k], ch->row_bytes[k]));
    post_item(r, d, seq, 1);
    return BT_OK;
}

/* Spins up to DEC_SPIN_MS for an item before sleeping, as channel.c does: a hand-off between
 * stages on their own cores then costs a cache-line transfer instead of a futex wake-up, which
 * on a busy machine takes longer than a stage's work on one position. */
#define DEC_SPIN_MS 0.05

static void spin_for_item(const struct bt_decode_run *r, const dstage *d)
{
    const double t0 = bt_now_ms();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&d->queued, memory_order_acquire) > 0 || atomic_load(&r->finished) ||
            atomic_load(&r->e->abort))
            return;
        if ((i & 63) == 63 && bt_now_ms() - t0 > DEC_SPIN_MS) return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* Waits for the next ready sequence: its index, -1 when every sequence is done, -2 on abort. */
static int next_ready(struct bt_decode_run *r, bt_worker *w, dstage *d, bt_status *timeout)
{
    bt_engine *e = r->e;
    double limit_ms = e->params.watchdog_s * 1000.0, t0 = bt_now_ms();
    int seq = -2;
    atomic_store(&w->waiting, 1);
    spin_for_item(r, d);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        if (atomic_load(&e->abort)) break;
        if (d->count > 0) {
            seq = d->fifo[d->head];
            d->head = (d->head + 1) % r->p->n_seqs;
            d->count--;
            atomic_store_explicit(&d->queued, d->count, memory_order_relaxed);
            break;
        }
        if (atomic_load(&r->finished)) {
            seq = -1;
            break;
        }
        if (bt_now_ms() - t0 > limit_ms) {
            *timeout = bt_error(BT_ERR_TIMEOUT, "watchdog: decode: stage %d (%s) waited %.1f s for its next item",
                                d->st->index, d->st->device_name, (bt_now_ms() - t0) / 1000.0);
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L; /* re-check the abort flag at least every 50 ms */
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    }
    pthread_mutex_unlock(&d->mu);
    atomic_store(&w->waiting, 0);
    return seq;
}

/* next_ready across ranks: this rank's stage is the only one here, and its items arrive as messages,
 * which this thread takes itself between polls (no other thread would wake it). Polls at once for
 * DEC_SPIN_MS after the last arrival, as the one-process spin does (never sched_yield: on a busy
 * machine a yield gives the core away for a whole time slice of every other runnable process,
 * which made a token's round trip between two ranks cost milliseconds), then every
 * DEC_POLL_SLEEP_US. */
#define DEC_POLL_SLEEP_US 20

static int next_ready_polling(struct bt_decode_run *r, bt_worker *w, dstage *d, bt_status *err)
{
    bt_engine *e = r->e;
    const double limit_ms = e->params.watchdog_s * 1000.0;
    double t0 = bt_now_ms();
    int seq = -2;
    atomic_store(&w->waiting, 1);
    for (;;) {
        if (atomic_load(&e->abort)) break;
        int arrived = 0, fin = 0;
        bt_status s = bt_decode_link_poll(r->link, on_arrival, r, &arrived, &fin);
        if (s != BT_OK) {
            *err = s;
            break;
        }
        if (fin) atomic_store(&r->finished, 1);
        pthread_mutex_lock(&d->mu);
        if (d->count > 0) {
            seq = d->fifo[d->head];
            d->head = (d->head + 1) % r->p->n_seqs;
            d->count--;
            atomic_store_explicit(&d->queued, d->count, memory_order_relaxed);
        }
        pthread_mutex_unlock(&d->mu);
        if (seq >= 0) break;
        if (atomic_load(&r->finished)) {
            seq = -1;
            break;
        }
        const double now = bt_now_ms();
        if (arrived) t0 = now; /* a part of an item (one sender of several) is progress */
        if (now - t0 > limit_ms) {
            char me[96], peers[400];
            e->ranks->describe_stage(e, d->st->index, me, sizeof me);
            bt_decode_link_peers(r->link, peers, sizeof peers);
            *err = bt_error(BT_ERR_TIMEOUT, "watchdog: decode: after %.1f s, %s waits for its next item from %s "
                            "(lost, or stuck: see that rank's own message)", (now - t0) / 1000.0, me,
                            peers[0] ? peers : "no rank");
            break;
        }
        if (now - t0 < DEC_SPIN_MS) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            nanosleep(&(struct timespec){0, DEC_POLL_SLEEP_US * 1000L}, NULL);
        }
    }
    atomic_store(&w->waiting, 0);
    return seq;
}

static void fail_worker(struct bt_decode_run *r, bt_worker *w, bt_status s)
{
    w->status = s;
    snprintf(w->error, sizeof w->error, "%s", bt_last_error());
    atomic_store(&r->e->abort, 1);
    wake_all(r);
}

void bt_decode_worker(bt_engine *e, bt_worker *w)
{
    struct bt_decode_run *r = e->decode;
    w->status = BT_OK;
    w->error[0] = '\0';
    if (!r || w->stage >= r->P) return; /* stages after the logits' do not decode */
    dstage *d = &r->stage[w->stage];
    for (;;) {
        bt_status timeout = BT_OK;
        int seq = r->link ? next_ready_polling(r, w, d, &timeout) : next_ready(r, w, d, &timeout);
        if (seq == -1) break;
        if (seq == -2) {
            if (timeout != BT_OK) fail_worker(r, w, timeout);
            else if (w->status == BT_OK) {
                w->status = BT_ERR_INTERNAL;
                snprintf(w->error, sizeof w->error, "decode: stage %d stopped: another stage failed", w->stage);
            }
            break;
        }
        bt_status s = run_item(r, d, seq);
        if (s != BT_OK) {
            fail_worker(r, w, s);
            break;
        }
    }
}

bt_status bt_engine_decode(bt_engine *e, const bt_decode_params *p, bt_decode_stats *stats)
{
    BT_TRY(bt_engine_check_usable(e));
    if (!p || p->n_seqs < 1 || !p->first || !p->on_logits)
        return bt_error(BT_ERR_INVALID_ARG, "decode: no sequences or no callback");
    if (e->dist.on && e->dist.layout.data > 1)
        return bt_error(BT_ERR_UNSUPPORTED, "decode: the job has D = %d data-parallel replicas; decoding runs one "
                        "pipeline (D = 1: as many ranks as stages)", e->dist.layout.data);
    const bt_graph *g = e->graph;
    if (p->logits_node < 0 || p->logits_node >= g->n_nodes || p->token_value < 0 || p->token_value >= g->n_values)
        return bt_error(BT_ERR_INVALID_ARG, "decode: logits node or token value out of range");
    struct bt_decode_run r;
    memset(&r, 0, sizeof r);
    r.e = e;
    r.p = p;
    r.P = stage_of_node(e, p->logits_node) + 1;
    r.T = g->values[p->token_value].shape.dim[0];
    r.es = bt_dtype_size(e->dtype);
    atomic_init(&r.finished, 0);
    bt_status st = BT_OK;
    r.item = malloc((size_t)p->n_seqs * sizeof *r.item);
    if (!r.item) {
        st = bt_error(BT_ERR_NOMEM, "decode: out of memory");
        goto done;
    }
    for (int q = 0; q < p->n_seqs; q++) {
        const bt_decode_item *it = &p->first[q];
        if (it->n < 1 || it->pos != 0 || it->n > r.T || !it->reset || !it->tokens) {
            st = bt_error(BT_ERR_INVALID_ARG, "decode: sequence %d must start at position 0 with 1 to T = %lld rows "
                          "and reset", q, (long long)r.T);
            goto done;
        }
        r.item[q] = *it;
    }
    if (e->dist.on) {
        r.tok_store = malloc((size_t)p->n_seqs * (size_t)r.T * sizeof *r.tok_store + 1);
        if (!r.tok_store) {
            st = bt_error(BT_ERR_NOMEM, "decode: out of memory");
            goto done;
        }
        BT_TRY_GOTO(st, bt_decode_link_create(e, p->n_seqs, r.T, r.P - 1, e->n_channels, &r.link), done);
    }
    for (int s = 0; s < r.P; s++) BT_TRY_GOTO(st, setup_stage(&r, s), done);
    BT_TRY_GOTO(st, setup_channels(&r), done);
    BT_TRY_GOTO(st, check_inputs(&r), done);
    if (r.link) BT_TRY_GOTO(st, bt_decode_link_start(r.link), done);
    if (bt_stage_is_local(e, 0)) /* every rank knows the first items: stage 0's takes them */
        for (int q = 0; q < p->n_seqs; q++) push_ready(&r.stage[0], q, p->n_seqs); /* no worker runs yet */
    double t0 = bt_now_ms();
    e->decode = &r;
    st = bt_engine_run_plain_job(e, BT_JOB_DECODE);
    e->decode = NULL;
    if (r.link) {
        bt_status end = bt_decode_link_end(r.link, st == BT_OK);
        if (st == BT_OK) st = end;
    }
    bt_decode_stats ds;
    memset(&ds, 0, sizeof ds);
    ds.stages = r.P;
    ds.wall_ms = bt_now_ms() - t0;
    for (int s = 0; s < r.P; s++) {
        ds.busy_ms[s] = r.stage[s].busy_ms;
        ds.items[s] = r.stage[s].items;
    }
    /* across ranks, every stage's figures from its own rank; a collective, so no rank starts
     * another run (whose messages its peers' receives of this one could take) before every rank
     * ended this one */
    const int me = e->dist.layout.stage;
    if (st == BT_OK && e->dist.on)
        st = bt_decode_dist_stats(e, r.P, me < r.P ? r.stage[me].busy_ms : 0, me < r.P ? r.stage[me].items : 0, &ds);
    if (stats) *stats = ds;
    if (st != BT_OK && e->dist.on)
        st = bt_error_context(st, "rank %d (stage %d, replica %d)", e->dist.layout.rank, e->dist.layout.stage,
                              e->dist.layout.replica);
done:
    if (!atomic_load(&e->abandoned)) free_run(&r); /* a stuck worker may still use the buffers */
    return st;
}
