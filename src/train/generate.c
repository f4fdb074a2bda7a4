/* train/generate.c: autoregressive sampling (baton/generate.h). The decoder walks the graph's
 * nodes up to the logits (the loss's first input) for one position at a time: every value shaped
 * [T, ...] per sample holds one row, each op runs through cpu_decode when it has one (attention,
 * with its KV cache; pos_embedding, at the position) and cpu_forward otherwise, on host copies of
 * the engine's weights. Without the cache the engine's own forward runs the whole window. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "baton/generate.h"
#include "core/error.h"
#include "core/util.h"
#include "graph/graph_internal.h"

typedef struct decoder {
    const bt_graph *g;
    bt_dtype dt;
    int64_t T, vocab;
    int idx_value, logits_node, label_value;
    void **value;          /* [n_values] one position's row (inputs: one i32) */
    void **param;          /* [n_params] host copies of the weights */
    void **saved, **ws, **cache; /* [n_nodes] */
    size_t *cache_bytes;
} decoder;

static void decoder_free(decoder *d)
{
    for (int i = 0; d->value && i < d->g->n_values; i++) free(d->value[i]);
    for (int i = 0; d->param && i < d->g->n_params; i++) free(d->param[i]);
    for (int i = 0; d->saved && i < d->g->n_nodes; i++) {
        free(d->saved[i]);
        free(d->ws[i]);
        free(d->cache[i]);
    }
    free(d->value), free(d->param), free(d->saved), free(d->ws), free(d->cache), free(d->cache_bytes);
}

/* The token input, the labels and the logits node of a language model. */
static bt_status find_lm(const bt_graph *g, int *idx_value, int *label_value, int *logits_node, int64_t *T,
                         int64_t *vocab)
{
    const bt_node *loss = g->n_nodes ? &g->nodes[g->n_nodes - 1] : NULL;
    if (!loss || loss->n_in != 2 || g->values[loss->in[0]].producer < 0)
        return bt_error(BT_ERR_MODEL, "generate: the model must end in a loss of (logits, labels)");
    const bt_value *logits = &g->values[loss->in[0]];
    *logits_node = logits->producer;
    *label_value = loss->in[1];
    *idx_value = -1;
    for (int i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] != *label_value) *idx_value = g->inputs[i];
    if (*idx_value < 0 || g->n_inputs != 2 || g->values[*idx_value].dtype != BT_I32 ||
        g->values[*idx_value].shape.ndim != 1 || logits->shape.ndim != 2)
        return bt_error(BT_ERR_MODEL, "generate: the model needs an i32 token input [T], labels, and logits [T, V]");
    *T = g->values[*idx_value].shape.dim[0];
    *vocab = logits->shape.dim[1];
    return BT_OK;
}

static bt_status decoder_init(decoder *d, bt_engine *e, const bt_graph *g)
{
    memset(d, 0, sizeof *d);
    d->g = g;
    d->dt = bt_engine_dtype(e);
    BT_TRY(find_lm(g, &d->idx_value, &d->label_value, &d->logits_node, &d->T, &d->vocab));
    const size_t es = bt_dtype_size(d->dt);
    d->value = calloc((size_t)g->n_values, sizeof *d->value);
    d->param = calloc((size_t)g->n_params + 1, sizeof *d->param);
    d->saved = calloc((size_t)g->n_nodes, sizeof *d->saved);
    d->ws = calloc((size_t)g->n_nodes, sizeof *d->ws);
    d->cache = calloc((size_t)g->n_nodes, sizeof *d->cache);
    d->cache_bytes = calloc((size_t)g->n_nodes, sizeof *d->cache_bytes);
    if (!d->value || !d->param || !d->saved || !d->ws || !d->cache || !d->cache_bytes)
        return bt_error(BT_ERR_NOMEM, "generate: out of memory");
    for (int v = 0; v < g->n_values; v++) {
        const bt_value *val = &g->values[v];
        if (val->shape.ndim >= 1 && val->shape.dim[0] != d->T && val->producer >= 0 && val->producer <= d->logits_node)
            return bt_error(BT_ERR_MODEL, "generate: value '%s' is shaped %s, not [T = %lld, ...]: only models whose "
                            "values all run along the sequence decode one position at a time",
                            val->name, bt_shape_format(&val->shape, (char[128]){0}, 128), (long long)d->T);
        const int64_t row = val->shape.ndim ? bt_shape_numel(&val->shape) / val->shape.dim[0] : 1;
        d->value[v] = calloc((size_t)row + 1, val->dtype == BT_I32 ? 4 : es);
        if (!d->value[v]) return bt_error(BT_ERR_NOMEM, "generate: out of memory");
    }
    for (int p = 0; p < g->n_params; p++) {
        const size_t bytes = (size_t)bt_shape_numel(&g->params[p].shape) * es;
        if (!(d->param[p] = malloc(bytes + 1))) return bt_error(BT_ERR_NOMEM, "generate: out of memory");
        BT_TRY(bt_engine_read_param(e, g->params[p].name, d->param[p], bytes));
    }
    for (int n = 0; n <= d->logits_node; n++) {
        const bt_node *node = &g->nodes[n];
        d->saved[n] = calloc(node->saved_per_sample + 1, 1);
        d->ws[n] = calloc(node->ws_per_sample + node->ws_fixed + 1, 1);
        if (node->op->decode_cache_bytes) d->cache_bytes[n] = node->op->decode_cache_bytes(node->config);
        d->cache[n] = calloc(d->cache_bytes[n] + 1, 1);
        if (!d->saved[n] || !d->ws[n] || !d->cache[n]) return bt_error(BT_ERR_NOMEM, "generate: out of memory");
    }
    return BT_OK;
}

/* A value's one-position tensor: (1, 1, rest...) for [T, rest...]. */
static void row_tensor(const decoder *d, int v, bt_tensor *t)
{
    const bt_value *val = &d->g->values[v];
    memset(t, 0, sizeof *t);
    t->data = d->value[v];
    t->dtype = val->dtype == BT_I32 ? BT_I32 : d->dt;
    t->ndim = val->shape.ndim + 1;
    t->dim[0] = 1;
    for (int k = 0; k < val->shape.ndim; k++) t->dim[k + 1] = k == 0 ? 1 : val->shape.dim[k];
}

/* Runs position pos with token tok; the logits row is then d->value[logits]. */
static bt_status decode_step(decoder *d, int64_t pos, int32_t tok)
{
    const bt_graph *g = d->g;
    if (tok < 0 || tok >= d->vocab)
        return bt_error(BT_ERR_INVALID_ARG, "generate: token %d is outside the vocabulary of %lld", (int)tok,
                        (long long)d->vocab);
    *(int32_t *)d->value[d->idx_value] = tok;
    for (int n = 0; n <= d->logits_node; n++) {
        const bt_node *node = &g->nodes[n];
        bt_tensor in[BT_MAX_INPUTS], out, param[BT_MAX_PARAMS];
        for (int i = 0; i < node->n_in; i++) row_tensor(d, node->in[i], &in[i]);
        row_tensor(d, node->out, &out);
        for (int j = 0; j < node->n_params; j++) {
            const bt_param *p = &g->params[node->params[j]];
            memset(&param[j], 0, sizeof param[j]);
            param[j].data = d->param[node->params[j]];
            param[j].dtype = d->dt;
            param[j].ndim = p->shape.ndim;
            for (int k = 0; k < p->shape.ndim; k++) param[j].dim[k] = p->shape.dim[k];
        }
        bt_op_call call = {.batch = 1, .n_in = node->n_in, .in = in, .out = &out, .n_params = node->n_params,
                           .param = param, .saved = d->saved[n], .workspace = d->ws[n], .config = node->config,
                           .threads = 1, .precision = BT_F32, .position = pos, .cache = d->cache[n]};
        bt_status st = node->op->cpu_decode ? node->op->cpu_decode(&call) : node->op->cpu_forward(&call);
        if (st != BT_OK) return bt_error(st, "generate: layer '%s': %s", g->layers[node->layer].name, bt_last_error());
    }
    return BT_OK;
}

static double logit_at(const decoder *d, const void *row, int64_t i)
{
    return d->dt == BT_F64 ? ((const double *)row)[i] : ((const float *)row)[i];
}

/* Samples from logits row (vocab entries) at temperature and top_k. */
static int32_t sample(const decoder *d, const void *row, const bt_generate_params *p, uint64_t *rng)
{
    const int64_t V = d->vocab;
    double *w = malloc((size_t)V * sizeof *w);
    if (!w) return 0;
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; i++) mx = fmax(mx, logit_at(d, row, i) / p->temperature);
    double cut = -INFINITY;
    if (p->top_k > 0 && p->top_k < V) { /* the k-th largest logit: count how many exceed each */
        for (int64_t i = 0; i < V; i++) {
            int64_t above = 0;
            for (int64_t j = 0; j < V; j++) above += logit_at(d, row, j) > logit_at(d, row, i);
            if (above < p->top_k) cut = cut > -INFINITY ? fmin(cut, logit_at(d, row, i)) : logit_at(d, row, i);
        }
    }
    double z = 0;
    for (int64_t i = 0; i < V; i++) {
        const double l = logit_at(d, row, i);
        w[i] = l < cut ? 0 : exp(l / p->temperature - mx);
        z += w[i];
    }
    double u = (double)(bt_rng_next(rng) >> 11) * 0x1.0p-53 * z, acc = 0;
    int32_t pick = (int32_t)(V - 1);
    for (int64_t i = 0; i < V; i++) {
        acc += w[i];
        if (u < acc && w[i] > 0) {
            pick = (int32_t)i;
            break;
        }
    }
    free(w);
    return pick;
}

void bt_generate_params_init(bt_generate_params *p)
{
    memset(p, 0, sizeof *p);
    p->tokens = 100;
    p->temperature = 1.0;
    p->kv_cache = 1;
}

/* Restarts the caches and reads ctx[0..n) (n <= T) from position 0. */
static bt_status prefill(decoder *d, const int32_t *ctx, int64_t n)
{
    for (int i = 0; i <= d->logits_node; i++) memset(d->cache[i], 0, d->cache_bytes[i]);
    for (int64_t i = 0; i < n; i++) BT_TRY(decode_step(d, i, ctx[i]));
    return BT_OK;
}

static bt_status check_args(const bt_generate_params *p, int64_t n_prompt, const int32_t *prompt, const int32_t *out)
{
    if (!p || !prompt || n_prompt < 1 || p->tokens < 0 || (p->tokens > 0 && !out))
        return bt_error(BT_ERR_INVALID_ARG, "bt_generate: a prompt of at least one token and an output array are needed");
    if (!(p->temperature > 0) || !isfinite(p->temperature))
        return bt_error(BT_ERR_INVALID_ARG, "generate: temperature must be > 0, got %g", p->temperature);
    if (p->top_k < 0) return bt_error(BT_ERR_INVALID_ARG, "generate: top_k must be >= 0, got %d", p->top_k);
    return BT_OK;
}

/* Without the cache: the engine's forward on the last T tokens (padded with token 0), batch 1. */
static bt_status generate_window(bt_engine *e, decoder *d, const int32_t *prompt, int64_t n_prompt,
                                 const bt_generate_params *p, int32_t *out, bt_generate_stats *stats)
{
    const bt_graph *g = d->g;
    if (bt_engine_batch(e) != 1)
        return bt_error(BT_ERR_INVALID_ARG, "generate: without the KV cache the engine's batch must be 1, not %lld",
                        (long long)bt_engine_batch(e));
    const int64_t T = d->T, total = n_prompt + p->tokens;
    int32_t *seq = malloc((size_t)total * sizeof *seq), *win = calloc((size_t)T, sizeof *win),
            *lab = calloc((size_t)T, sizeof *lab);
    void *logits = malloc((size_t)(T * d->vocab) * bt_dtype_size(d->dt));
    bt_status st = BT_OK;
    if (!seq || !win || !lab || !logits) {
        st = bt_error(BT_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    uint64_t rng = bt_mix64(p->seed ^ 0x67656e);
    double t0 = bt_now_ms();
    bt_feed feeds[] = {{g->values[d->idx_value].name, win, BT_I32}, {g->values[d->label_value].name, lab, BT_I32}};
    const char *layer = g->layers[g->nodes[d->logits_node].layer].name;
    for (int64_t n = n_prompt; n < total; n++) {
        const int64_t first = n > T ? n - T : 0, len = n - first;
        memset(win, 0, (size_t)T * sizeof *win);
        memcpy(win, seq + first, (size_t)len * sizeof *win);
        bt_step_result r;
        BT_TRY_GOTO(st, bt_engine_forward_layer(e, feeds, 2, layer, logits, &r), done);
        seq[n] = out[n - n_prompt] =
            sample(d, (const char *)logits + (size_t)((len - 1) * d->vocab) * bt_dtype_size(d->dt), p, &rng);
    }
    stats->generate_ms = bt_now_ms() - t0;
done:
    free(seq), free(win), free(lab), free(logits);
    return st;
}

bt_status bt_generate(bt_engine *e, const bt_graph *g, const int32_t *prompt, int64_t n_prompt,
                      const bt_generate_params *p, int32_t *out, bt_generate_stats *stats)
{
    bt_generate_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!e || !g) return bt_error(BT_ERR_INVALID_ARG, "bt_generate: NULL engine or graph");
    BT_TRY(check_args(p, n_prompt, prompt, out));
    decoder d;
    bt_status st = decoder_init(&d, e, g);
    if (st != BT_OK) goto done;
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= d.vocab) {
            st = bt_error(BT_ERR_INVALID_ARG, "generate: prompt token %d at %lld is outside the vocabulary of %lld",
                          (int)prompt[i], (long long)i, (long long)d.vocab);
            goto done;
        }
    if (!p->kv_cache) {
        st = generate_window(e, &d, prompt, n_prompt, p, out, stats);
        goto done;
    }
    const int64_t T = d.T;
    int32_t *ctx = malloc((size_t)T * sizeof *ctx);
    if (!ctx) {
        st = bt_error(BT_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    uint64_t rng = bt_mix64(p->seed ^ 0x67656e);
    double t0 = bt_now_ms();
    /* the context: the prompt's last T tokens */
    int64_t len = n_prompt > T ? T : n_prompt;
    memcpy(ctx, prompt + n_prompt - len, (size_t)len * sizeof *ctx);
    st = prefill(&d, ctx, len);
    stats->prompt_ms = bt_now_ms() - t0;
    t0 = bt_now_ms();
    for (int64_t k = 0; st == BT_OK && k < p->tokens; k++) {
        const int32_t tok = sample(&d, d.value[g->nodes[d.logits_node].out], p, &rng);
        out[k] = tok;
        if (k + 1 == p->tokens) break;
        if (len == T) { /* the window is full: keep its last half and read it again */
            memmove(ctx, ctx + T - T / 2, (size_t)(T / 2) * sizeof *ctx);
            len = T / 2;
            st = prefill(&d, ctx, len);
            if (st != BT_OK) break;
        }
        ctx[len] = tok;
        st = decode_step(&d, len, tok);
        len++;
    }
    stats->generate_ms = bt_now_ms() - t0;
    free(ctx);
done:
    if (st == BT_OK && stats->generate_ms > 0) stats->tokens_per_s = (double)p->tokens / (stats->generate_ms / 1000);
    decoder_free(&d);
    return st;
}

bt_status bt_generate_score(bt_engine *e, const bt_graph *g, const int32_t *tokens, int64_t n, double *mean_loss)
{
    if (!e || !g || !tokens || !mean_loss) return bt_error(BT_ERR_INVALID_ARG, "bt_generate_score: NULL argument");
    decoder d;
    bt_status st = decoder_init(&d, e, g);
    if (st == BT_OK && (n < 2 || n > d.T + 1))
        st = bt_error(BT_ERR_INVALID_ARG, "generate: scoring takes 2 to T + 1 = %lld tokens, got %lld", (long long)d.T + 1,
                      (long long)n);
    double sum = 0;
    for (int64_t i = 0; st == BT_OK && i + 1 < n; i++) {
        st = decode_step(&d, i, tokens[i]);
        if (st != BT_OK) break;
        const void *row = d.value[g->nodes[d.logits_node].out];
        double mx = -INFINITY, z = 0;
        for (int64_t v = 0; v < d.vocab; v++) mx = fmax(mx, logit_at(&d, row, v));
        for (int64_t v = 0; v < d.vocab; v++) z += exp(logit_at(&d, row, v) - mx);
        if (tokens[i + 1] < 0 || tokens[i + 1] >= d.vocab) {
            st = bt_error(BT_ERR_INVALID_ARG, "generate: token %d is outside the vocabulary", (int)tokens[i + 1]);
            break;
        }
        sum += mx + log(z) - logit_at(&d, row, tokens[i + 1]);
    }
    if (st == BT_OK) *mean_loss = sum / (double)(n - 1);
    decoder_free(&d);
    return st;
}
