/* baton/generate.h: sampling text from a trained language model (a model whose loss reads
 * logits [T, V] and whose token input is i32 [T]: models/gpt-shakespeare.yaml).
 *
 * With the KV cache (the default) the tokens stream through the engine's pipeline stages: each
 * stage runs its own layers with its own weights one position at a time, keeping per sequence
 * the caches of its own layers (attention: the keys and values of the positions so far;
 * bt_op_def.cpu_decode), and hands the position's activations [1, C] (a prompt's [n, C]) to the
 * next stage; the last stage's logits are sampled and the token goes back to the first stage.
 * With several prompts (bt_generate_batch) the stages work on different prompts at once: with P
 * stages and at least P prompts every stage is busy. Decoding computes in f32 (f64 engines: f64)
 * from the master weights, on CPU stages (a GPU stage is refused where a layer needs a decoding
 * cache). Without the cache every token runs the whole context window through the engine's
 * forward (batch 1, the forward-only schedule), prompt after prompt. The context is the model's
 * T: once it is full, the cache keeps its last T/2 tokens and reads them again, while the window
 * slides; so the two give the same tokens while the prompt and the new tokens fit in T.
 *
 * Sampling: prompt i of a batch draws from the random stream of seed + i (the stream
 * bt_generate uses for one prompt with that seed), so its tokens do not depend on the other
 * prompts, on their number or on the stage count: `--seed S` with prompts P0, P1
 * gives P1 the tokens `--seed S+1` gives P1 alone. */
#ifndef BATON_GENERATE_H
#define BATON_GENERATE_H

#include <stdint.h>

#include "baton/api.h"
#include "baton/engine.h"
#include "baton/graph.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_generate_params {
    int64_t tokens;         /* tokens to generate after the prompt (>= 0) */
    double temperature;     /* > 0; 1: the model's distribution; 0: greedy (the most likely token,
                               the lowest id among equal logits; top_k and seed do not matter) */
    int top_k;              /* sample among the k most likely tokens; 0: all */
    uint64_t seed;
    int kv_cache;           /* 1: decode with caches; 0: recompute the window every token */
    int64_t vocab;          /* sample only ids below this (a tokenizer smaller than the model's V
                               logits: the ids above it name no token); 0: all V */
} bt_generate_params;

typedef struct bt_generate_stats {
    double prompt_ms;       /* reading the prompt (a batch's total: until every prompt was read) */
    double generate_ms;     /* producing the new tokens (a batch's total: the whole run, prompts
                               included, since prompts are read while others generate) */
    double tokens_per_s;    /* new tokens per second of generate_ms */
    int stages;             /* the pipeline stages the tokens streamed through (0: no KV cache) */
    double busy;            /* a batch's total: the stages' mean share of generate_ms spent
                               computing (1: no bubble); 0 without the KV cache */
} bt_generate_stats;

/* Defaults: 100 tokens, temperature 1, top_k 0, seed 0, kv_cache 1, vocab 0. */
BT_API void bt_generate_params_init(bt_generate_params *params);

/* Samples params->tokens tokens after prompt[0..n_prompt) (n_prompt >= 1) into out (caller's
 * array of params->tokens entries) with the weights of engine (built from graph; without the
 * cache its batch must be 1). Tokens outside the model's vocabulary (params->vocab, when set) are
 * refused. */
BT_API bt_status bt_generate(bt_engine *engine, const bt_graph *graph, const int32_t *prompt, int64_t n_prompt,
                             const bt_generate_params *params, int32_t *out, bt_generate_stats *stats);

/* Samples params->tokens tokens after each of n_prompts prompts (prompts[i][0..n_prompt[i]),
 * n_prompt[i] >= 1) into out[i] (caller's arrays of params->tokens entries), all prompts in flight
 * through the pipeline at once; prompt i samples with seed params->seed + i. per_prompt (NULL or
 * n_prompts entries): each prompt's figures (prompt_ms from the start of the run, generate_ms from
 * its first new token to its last); total (NULL or one): the run's. Tokens outside the vocabulary
 * are refused, naming the prompt. */
BT_API bt_status bt_generate_batch(bt_engine *engine, const bt_graph *graph, int n_prompts,
                                   const int32_t *const *prompts, const int64_t *n_prompt,
                                   const bt_generate_params *params, int32_t *const *out,
                                   bt_generate_stats *per_prompt, bt_generate_stats *total);

/* The mean per-token loss (-log p of each next token) the decoder with its caches assigns to
 * tokens[0..n) (2 <= n <= T + 1), decoded through the stages as bt_generate does: what the
 * engine's forward reports on the same window. */
BT_API bt_status bt_generate_score(bt_engine *engine, const bt_graph *graph, const int32_t *tokens, int64_t n,
                                   double *mean_loss);

#ifdef __cplusplus
}
#endif
#endif
