/* train/generate.c: autoregressive sampling (baton/generate.h). With the KV cache the tokens
 * stream through the engine's stages (exec/decode.c, the one decoder: each stage runs its own
 * layers one position at a time with its caches); this file owns what is not the pipeline's: the
 * model's shape (token input, logits), each prompt's context window and random stream, sampling,
 * and the timing. It runs on the logits stage's thread through the decode callback. Without the
 * cache the engine's own forward runs the whole window per token. bt_generate_score reads a
 * window through the same decoder and scores every position. Across processes the callback runs
 * on the logits stage's rank only; its samples, times and scores then go to every rank
 * (bt_engine_decode_share), so every rank returns the same results. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/generate.h"
#include "core/error.h"
#include "core/util.h"
#include "exec/decode.h"
#include "graph/graph_internal.h"

/* What the sampler needs to know of the model. */
typedef struct lm_shape {
    const bt_graph *g;
    bt_dtype dt;
    int64_t T, vocab;
    int idx_value, logits_node, label_value;
} lm_shape;

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

/* The model's token input, labels and logits, and that every value up to the logits runs along
 * the sequence (one row per position), which decoding one position at a time needs. */
static bt_status lm_shape_init(lm_shape *m, bt_engine *e, const bt_graph *g)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->dt = bt_engine_dtype(e);
    BT_TRY(find_lm(g, &m->idx_value, &m->label_value, &m->logits_node, &m->T, &m->vocab));
    for (int v = 0; v < g->n_values; v++) {
        const bt_value *val = &g->values[v];
        if (val->shape.ndim >= 1 && val->shape.dim[0] != m->T && val->producer >= 0 && val->producer <= m->logits_node)
            return bt_error(BT_ERR_MODEL, "generate: value '%s' is shaped %s, not [T = %lld, ...]: only models whose "
                            "values all run along the sequence decode one position at a time",
                            val->name, bt_shape_format(&val->shape, (char[128]){0}, 128), (long long)m->T);
    }
    return BT_OK;
}

static double logit_at(const lm_shape *d, const void *row, int64_t i)
{
    return d->dt == BT_F64 ? ((const double *)row)[i] : ((const float *)row)[i];
}

static int by_value_descending(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The ids sampling draws from: [0, V), or [0, p->vocab) when the tokenizer is smaller. */
static int64_t sample_ids(const lm_shape *d, const bt_generate_params *p)
{
    return p->vocab > 0 && p->vocab < d->vocab ? p->vocab : d->vocab;
}

/* Temperature 0: the largest logit, the lowest id among equals. */
static int32_t argmax(const lm_shape *d, const void *row, int64_t V)
{
    int32_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logit_at(d, row, i) > logit_at(d, row, best)) best = (int32_t)i;
    return best;
}

/* Samples from logits row (its first sample_ids entries) at temperature and top_k; w: scratch of
 * 2 x vocab doubles. top_k keeps the logits at or above the k-th largest (ties included). */
static int32_t sample(const lm_shape *d, const void *row, const bt_generate_params *p, uint64_t *rng, double *w)
{
    const int64_t V = sample_ids(d, p);
    if (p->temperature == 0) return argmax(d, row, V);
    double mx = -INFINITY; /* exp((l - max) / temperature) <= 1: finite at any temperature above 0 */
    for (int64_t i = 0; i < V; i++) mx = fmax(mx, logit_at(d, row, i));
    double cut = -INFINITY;
    if (p->top_k > 0 && p->top_k < V) { /* the k-th largest logit */
        double *sorted = w + V;
        for (int64_t i = 0; i < V; i++) sorted[i] = logit_at(d, row, i);
        qsort(sorted, (size_t)V, sizeof *sorted, by_value_descending);
        cut = sorted[p->top_k - 1];
    }
    double z = 0;
    for (int64_t i = 0; i < V; i++) {
        const double l = logit_at(d, row, i);
        w[i] = l < cut ? 0 : exp((l - mx) / p->temperature);
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
    return pick;
}

void bt_generate_params_init(bt_generate_params *p)
{
    memset(p, 0, sizeof *p);
    p->tokens = 100;
    p->temperature = 1.0;
    p->kv_cache = 1;
}


/* Prompt i's random stream: the one a single prompt with seed + i uses. */
static uint64_t prompt_rng(uint64_t seed, int i) { return bt_mix64((seed + (uint64_t)i) ^ 0x67656e); }

static bt_status check_args(const bt_generate_params *p, int n_prompts, const int32_t *const *prompts,
                            const int64_t *n_prompt, int32_t *const *out)
{
    if (!p || n_prompts < 1 || !prompts || !n_prompt || p->tokens < 0 || (p->tokens > 0 && !out))
        return bt_error(BT_ERR_INVALID_ARG, "bt_generate: at least one prompt and the output arrays are needed");
    for (int i = 0; i < n_prompts; i++)
        if (!prompts[i] || n_prompt[i] < 1 || (p->tokens > 0 && !out[i]))
            return bt_error(BT_ERR_INVALID_ARG, "bt_generate: prompt %d needs at least one token and an output array", i);
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return bt_error(BT_ERR_INVALID_ARG, "generate: temperature must be a finite number >= 0 (0: greedy), got %g",
                        p->temperature);
    if (p->top_k < 0) return bt_error(BT_ERR_INVALID_ARG, "generate: top_k must be >= 0, got %d", p->top_k);
    if (p->vocab < 0) return bt_error(BT_ERR_INVALID_ARG, "generate: vocab must be >= 0, got %lld", (long long)p->vocab);
    return BT_OK;
}

/* Without the cache: the engine's forward on the last T tokens (padded with token 0), batch 1. */
static bt_status generate_window(bt_engine *e, const lm_shape *d, const int32_t *prompt, int64_t n_prompt,
                                 const bt_generate_params *p, uint64_t rng, int32_t *out, bt_generate_stats *stats)
{
    const bt_graph *g = d->g;
    if (bt_engine_batch(e) != 1)
        return bt_error(BT_ERR_INVALID_ARG, "generate: without the KV cache the engine's batch must be 1, not %lld",
                        (long long)bt_engine_batch(e));
    const int64_t T = d->T, total = n_prompt + p->tokens;
    int32_t *seq = malloc((size_t)total * sizeof *seq), *win = calloc((size_t)T, sizeof *win),
            *lab = calloc((size_t)T, sizeof *lab);
    void *logits = malloc((size_t)(T * d->vocab) * bt_dtype_size(d->dt));
    double *scratch = malloc((size_t)(2 * d->vocab) * sizeof *scratch);
    bt_status st = BT_OK;
    if (!seq || !win || !lab || !logits || !scratch) {
        st = bt_error(BT_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
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
            sample(d, (const char *)logits + (size_t)((len - 1) * d->vocab) * bt_dtype_size(d->dt), p, &rng, scratch);
    }
    stats->generate_ms = bt_now_ms() - t0;
    if (stats->generate_ms > 0) stats->tokens_per_s = (double)p->tokens / (stats->generate_ms / 1000);
done:
    free(seq), free(win), free(lab), free(logits), free(scratch);
    return st;
}

/* One prompt's state while it streams through the stages (touched by the logits stage only). */
typedef struct gen_seq {
    int32_t *ctx;          /* [T] the context window */
    int64_t len;           /* tokens in it */
    int64_t k;             /* tokens generated */
    uint64_t rng;
    int32_t *out;
    double first_ms, last_ms;
} gen_seq;

typedef struct gen_run {
    const lm_shape *m;
    const bt_generate_params *p;
    gen_seq *seq;
    double *scratch;       /* sample()'s, used by the logits stage's thread only */
    double t0;
} gen_run;

/* The decode callback: samples the next token from the last row's logits and says what to read
 * next: the token at the next position, or (window full) its last T/2 tokens and the token again
 * from position 0. */
static bt_status on_logits(void *ctx, int q, const void *logits, int64_t rows, bt_decode_item *next)
{
    gen_run *run = ctx;
    gen_seq *s = &run->seq[q];
    const int64_t T = run->m->T;
    (void)rows;
    s->last_ms = bt_now_ms();
    if (s->k == 0) s->first_ms = s->last_ms;
    if (s->k == run->p->tokens) {
        next->done = 1;
        return BT_OK;
    }
    const int32_t tok = sample(run->m, logits, run->p, &s->rng, run->scratch);
    s->out[s->k++] = tok;
    if (s->k == run->p->tokens) {
        next->done = 1;
        return BT_OK;
    }
    if (s->len == T) { /* the window is full: keep its last half and read it again */
        memmove(s->ctx, s->ctx + T - T / 2, (size_t)(T / 2) * sizeof *s->ctx);
        s->len = T / 2;
        s->ctx[s->len++] = tok;
        *next = (bt_decode_item){.tokens = s->ctx, .pos = 0, .n = s->len, .reset = 1};
        return BT_OK;
    }
    s->ctx[s->len] = tok;
    *next = (bt_decode_item){.tokens = s->ctx + s->len, .pos = s->len, .n = 1};
    s->len++;
    return BT_OK;
}

/* Across processes the callback ran on the logits stage's rank: every rank gets its samples and
 * each prompt's times (relative to the start, as that rank measured them). */
static bt_status share_results(bt_engine *e, gen_run *run, int n_prompts, int32_t *const *out)
{
    if (bt_engine_ranks(e) == 1) return BT_OK;
    const size_t k = out ? (size_t)run->p->tokens : 0, per = 2 * sizeof(double) + k * sizeof(int32_t);
    unsigned char *buf = malloc((size_t)n_prompts * per + 1);
    if (!buf) return bt_error(BT_ERR_NOMEM, "generate: out of memory");
    for (int i = 0; i < n_prompts; i++) {
        const double t[2] = {run->seq[i].first_ms - run->t0, run->seq[i].last_ms - run->t0};
        memcpy(buf + (size_t)i * per, t, sizeof t);
        if (k) memcpy(buf + (size_t)i * per + sizeof t, out[i], k * sizeof(int32_t));
    }
    bt_status st = bt_engine_decode_share(e, run->m->logits_node, buf, (size_t)n_prompts * per);
    for (int i = 0; st == BT_OK && i < n_prompts; i++) {
        double t[2];
        memcpy(t, buf + (size_t)i * per, sizeof t);
        run->seq[i].first_ms = run->t0 + t[0];
        run->seq[i].last_ms = run->t0 + t[1];
        if (k) memcpy(out[i], buf + (size_t)i * per + sizeof t, k * sizeof(int32_t));
    }
    free(buf);
    return st;
}

static bt_status generate_pipelined(bt_engine *e, const lm_shape *m, int n_prompts, const int32_t *const *prompts,
                                    const int64_t *n_prompt, const bt_generate_params *p, int32_t *const *out,
                                    bt_generate_stats *per_prompt, bt_generate_stats *total)
{
    const int64_t T = m->T;
    if (n_prompts < 1) return bt_error(BT_ERR_INVALID_ARG, "generate: no prompts");
    gen_run run = {.m = m, .p = p, .seq = calloc((size_t)n_prompts, sizeof *run.seq),
                   .scratch = malloc((size_t)(2 * m->vocab) * sizeof *run.scratch)};
    bt_decode_item *first = calloc((size_t)n_prompts, sizeof *first);
    bt_status st = BT_OK;
    if (!run.seq || !first || !run.scratch) {
        st = bt_error(BT_ERR_NOMEM, "generate: out of memory");
        goto done;
    }
    for (int i = 0; i < n_prompts; i++) {
        gen_seq *s = &run.seq[i];
        if (!(s->ctx = malloc((size_t)T * sizeof *s->ctx))) {
            st = bt_error(BT_ERR_NOMEM, "generate: out of memory");
            goto done;
        }
        s->len = n_prompt[i] > T ? T : n_prompt[i]; /* the context: the prompt's last T tokens */
        memcpy(s->ctx, prompts[i] + n_prompt[i] - s->len, (size_t)s->len * sizeof *s->ctx);
        s->rng = prompt_rng(p->seed, i);
        s->out = out ? out[i] : NULL;
        first[i] = (bt_decode_item){.tokens = s->ctx, .pos = 0, .n = s->len, .reset = 1};
    }
    bt_decode_params dp = {.token_value = m->idx_value, .logits_node = m->logits_node, .n_seqs = n_prompts,
                           .first = first, .on_logits = on_logits, .ctx = &run};
    bt_decode_stats ds;
    run.t0 = bt_now_ms();
    BT_TRY_GOTO(st, bt_engine_decode(e, &dp, &ds), done);
    BT_TRY_GOTO(st, share_results(e, &run, n_prompts, out), done);
    double busy = 0, last_first = 0;
    for (int s = 0; s < ds.stages; s++) busy += ds.busy_ms[s];
    for (int i = 0; i < n_prompts; i++) {
        const gen_seq *s = &run.seq[i];
        if (s->first_ms - run.t0 > last_first) last_first = s->first_ms - run.t0;
        if (!per_prompt) continue;
        bt_generate_stats *ps = &per_prompt[i];
        ps->prompt_ms = s->first_ms - run.t0;
        ps->generate_ms = s->last_ms - s->first_ms;
        ps->tokens_per_s = ps->generate_ms > 0 ? (double)p->tokens / (ps->generate_ms / 1000) : 0;
        ps->stages = ds.stages;
    }
    if (total) {
        total->prompt_ms = last_first;
        total->generate_ms = ds.wall_ms;
        total->tokens_per_s = ds.wall_ms > 0 ? (double)p->tokens * n_prompts / (ds.wall_ms / 1000) : 0;
        total->stages = ds.stages;
        total->busy = ds.wall_ms > 0 ? busy / ((double)ds.stages * ds.wall_ms) : 0;
    }
done:
    for (int i = 0; run.seq && i < n_prompts; i++) free(run.seq[i].ctx);
    free(run.seq), free(first), free(run.scratch);
    return st;
}

bt_status bt_generate_batch(bt_engine *e, const bt_graph *g, int n_prompts, const int32_t *const *prompts,
                            const int64_t *n_prompt, const bt_generate_params *p, int32_t *const *out,
                            bt_generate_stats *per_prompt, bt_generate_stats *total)
{
    if (per_prompt && n_prompts > 0) memset(per_prompt, 0, (size_t)n_prompts * sizeof *per_prompt);
    if (total) memset(total, 0, sizeof *total);
    if (!e || !g) return bt_error(BT_ERR_INVALID_ARG, "bt_generate: NULL engine or graph");
    BT_TRY(check_args(p, n_prompts, prompts, n_prompt, out));
    lm_shape m;
    BT_TRY(lm_shape_init(&m, e, g));
    if (p->vocab > m.vocab)
        return bt_error(BT_ERR_INVALID_ARG, "generate: a vocabulary of %lld tokens is larger than the model's %lld logits",
                        (long long)p->vocab, (long long)m.vocab);
    const int64_t ids = sample_ids(&m, p);
    for (int q = 0; q < n_prompts; q++)
        for (int64_t i = 0; i < n_prompt[q]; i++)
            if (prompts[q][i] < 0 || prompts[q][i] >= ids) {
                char which[32] = "";
                if (n_prompts > 1) snprintf(which, sizeof which, "prompt %d: ", q);
                return bt_error(BT_ERR_INVALID_ARG, "generate: %sprompt token %d at %lld is outside the vocabulary of %lld",
                                which, (int)prompts[q][i], (long long)i, (long long)ids);
            }
    if (p->kv_cache) return generate_pipelined(e, &m, n_prompts, prompts, n_prompt, p, out, per_prompt, total);
    double t0 = bt_now_ms();
    for (int q = 0; q < n_prompts; q++) {
        bt_generate_stats one;
        memset(&one, 0, sizeof one);
        BT_TRY(generate_window(e, &m, prompts[q], n_prompt[q], p, prompt_rng(p->seed, q), out[q], &one));
        if (per_prompt) per_prompt[q] = one;
    }
    if (total) {
        total->generate_ms = bt_now_ms() - t0;
        if (total->generate_ms > 0) total->tokens_per_s = (double)p->tokens * n_prompts / (total->generate_ms / 1000);
    }
    return BT_OK;
}

bt_status bt_generate(bt_engine *e, const bt_graph *g, const int32_t *prompt, int64_t n_prompt,
                      const bt_generate_params *p, int32_t *out, bt_generate_stats *stats)
{
    bt_generate_stats one, total;
    bt_status st = bt_generate_batch(e, g, 1, &prompt, &n_prompt, p, &out, &one, &total);
    if (stats) {
        *stats = one;
        stats->busy = total.busy;
    }
    return st;
}

/* Scoring: every row's logits of one window, -log p of the next token summed. */
typedef struct score_run {
    const lm_shape *m;
    const int32_t *tokens;
    int64_t n;
    double sum;
} score_run;

static bt_status on_score_logits(void *ctx, int q, const void *logits, int64_t rows, bt_decode_item *next)
{
    score_run *s = ctx;
    const size_t es = bt_dtype_size(s->m->dt);
    (void)q;
    for (int64_t i = 0; i < rows; i++) {
        const void *row = (const char *)logits + (size_t)(i * s->m->vocab) * es;
        double mx = -INFINITY, z = 0;
        for (int64_t v = 0; v < s->m->vocab; v++) mx = fmax(mx, logit_at(s->m, row, v));
        for (int64_t v = 0; v < s->m->vocab; v++) z += exp(logit_at(s->m, row, v) - mx);
        s->sum += mx + log(z) - logit_at(s->m, row, s->tokens[i + 1]);
    }
    next->done = 1;
    return BT_OK;
}

bt_status bt_generate_score(bt_engine *e, const bt_graph *g, const int32_t *tokens, int64_t n, double *mean_loss)
{
    if (!e || !g || !tokens || !mean_loss) return bt_error(BT_ERR_INVALID_ARG, "bt_generate_score: NULL argument");
    lm_shape m;
    BT_TRY(lm_shape_init(&m, e, g));
    if (n < 2 || n > m.T + 1)
        return bt_error(BT_ERR_INVALID_ARG, "generate: scoring takes 2 to T + 1 = %lld tokens, got %lld",
                        (long long)m.T + 1, (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m.vocab)
            return bt_error(BT_ERR_INVALID_ARG, "generate: token %d is outside the vocabulary", (int)tokens[i]);
    score_run s = {.m = &m, .tokens = tokens, .n = n};
    bt_decode_item first = {.tokens = tokens, .pos = 0, .n = n - 1, .reset = 1, .all_logits = 1};
    bt_decode_params dp = {.token_value = m.idx_value, .logits_node = m.logits_node, .n_seqs = 1, .first = &first,
                           .on_logits = on_score_logits, .ctx = &s};
    BT_TRY(bt_engine_decode(e, &dp, NULL));
    BT_TRY(bt_engine_decode_share(e, m.logits_node, &s.sum, sizeof s.sum)); /* across processes: the logits rank's */
    *mean_loss = s.sum / (double)(n - 1);
    return BT_OK;
}
