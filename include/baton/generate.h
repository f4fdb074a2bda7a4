/* baton/generate.h: sampling text from a trained language model (a model whose loss reads
 * logits [T, V] and whose token input is i32 [T]: models/gpt-shakespeare.yaml).
 *
 * With the KV cache (the default) a decoder runs the graph one position at a time, each op that
 * needs history keeping its own per-sequence cache (attention: the keys and values of the
 * positions so far; bt_op_def.cpu_decode), so a new token costs one position's work. It runs on
 * the calling thread on host copies of the engine's weights (a CPU decoder: it does not stream
 * through the pipeline's stages). Without the cache every token runs the whole context window
 * through the engine's forward (batch 1, the pipeline's forward-only schedule). Both give the
 * same distribution; the context is the model's T, and a longer text keeps the last T tokens. */
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
    double temperature;     /* > 0; 1: the model's distribution */
    int top_k;              /* sample among the k most likely tokens; 0: all */
    uint64_t seed;
    int kv_cache;           /* 1: decode with caches; 0: recompute the window every token */
} bt_generate_params;

typedef struct bt_generate_stats {
    double prompt_ms;       /* reading the prompt */
    double generate_ms;     /* producing the new tokens */
    double tokens_per_s;    /* new tokens per second of generate_ms */
} bt_generate_stats;

/* Defaults: 100 tokens, temperature 1, top_k 0, seed 0, kv_cache 1. */
BT_API void bt_generate_params_init(bt_generate_params *params);

/* Samples params->tokens tokens after prompt[0..n_prompt) (n_prompt >= 1) into out (caller's
 * array of params->tokens entries) with the weights of engine (built from graph; without the
 * cache its batch must be 1). Tokens outside the model's vocabulary are refused. */
BT_API bt_status bt_generate(bt_engine *engine, const bt_graph *graph, const int32_t *prompt, int64_t n_prompt,
                             const bt_generate_params *params, int32_t *out, bt_generate_stats *stats);

/* The mean per-token loss (-log p of each next token) the decoder with its caches assigns to
 * tokens[0..n) (2 <= n <= T + 1): what the engine's forward reports on the same window. */
BT_API bt_status bt_generate_score(bt_engine *engine, const bt_graph *graph, const int32_t *tokens, int64_t n,
                                   double *mean_loss);

#ifdef __cplusplus
}
#endif
#endif
