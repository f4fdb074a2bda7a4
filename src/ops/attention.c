/* ops/attention.c: `attention`, multi-head self-attention fused into one op, in the manner of
 * FlashAttention. Input [T, (heads + 2 kv_heads) hd] as one `linear` produces it: q, k and v side
 * by side, q of heads heads, k and v of kv_heads heads each, hd wide (nanoGPT's c_attn split:
 * [T, 3C] with kv_heads = heads; Hugging Face's q_proj | k_proj | v_proj rows); output [T,
 * heads hd], the heads' results side by side (ready for the projection). args: heads, kv_heads
 * (default heads; divides it: query head h reads kv head h / (heads / kv_heads), grouped-query
 * attention as HF's repeat_kv, 1 is multi-query), head_dim (default: what the input's width
 * leaves), causal (default true: query t sees keys 0..t), window (causal only: query t sees the
 * last `window` keys, t - window < j <= t, its own included: Mistral's sliding_window; 0 or
 * absent: all), block (tile edge, default 64). Scores are scaled by 1 / sqrt(hd).
 *
 * The CPU kernels never hold more than one block x block tile of a head's T x T scores: the
 * forward walks key tiles with an online softmax (running maximum and sum per query row) and
 * saves each row's log-sum-exp (one double per head and position); the backward recomputes each
 * tile's probabilities from it, with D = rowsum(dO * O) read from the output, as FlashAttention-2
 * does. Tiles are GEMMs through cpu/blas.h; tiles wholly outside a window are skipped. Decoding
 * keeps a KV cache of kv_heads heads. No parameters: the projections are `linear` layers, and
 * rotary embeddings a `rope` layer before this one (ops/rope.c). */
#include <math.h>
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/attention_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/attention_tmpl.h"

BT_OPS_DISPATCH("attention", attention_forward, call->out->dtype)
BT_OPS_DISPATCH("attention", attention_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("attention", attention_decode, call->out->dtype)

/* The KV cache of one sequence: keys then values, T rows of kv_heads * hd each, sized for
 * doubles. */
static size_t attention_cache_bytes(const void *config)
{
    const bt_attention_config *cf = config;
    return (size_t)(2 * cf->t * bt_attention_kv_width(cf)) * sizeof(double);
}

static bt_status attention_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "attention", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim != 2)
        return bt_infer_error(ctx,
                              "attention expects an input shaped [T, (heads + 2 kv_heads) * "
                              "head_dim], got %s",
                              BT_OPS_SHAPE(x));
    bt_attention_config cfg = {.t = x->dim[0],
                               .block = bt_infer_arg_int(ctx, "block", 64),
                               .causal = bt_infer_arg_bool(ctx, "causal", 1),
                               .window = bt_infer_arg_int(ctx, "window", 0)};
    if ((st = bt_ops_qkv_heads(ctx, "attention", x->dim[1], &cfg.heads, &cfg.kv_heads, &cfg.hd)) != BT_OK)
        return st;
    cfg.c = cfg.heads * cfg.hd;
    cfg.ld = x->dim[1];
    if (cfg.window > 0 && !cfg.causal)
        return bt_infer_error(ctx, "attention: window = %lld needs causal attention (causal: false "
                                   "was given)",
                              (long long)cfg.window);
    cfg.scale = 1.0 / sqrt((double)cfg.hd);
    if (cfg.block > cfg.t) cfg.block = cfg.t;
    bt_shape y = {.ndim = 2, .dim = {cfg.t, cfg.c}};
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    bt_infer_set_saved(ctx, (size_t)(cfg.heads * cfg.t) * sizeof(double));
    /* per sample: D of every (head, row) for the CUDA backward; fixed: the CPU kernels' tiles */
    bt_infer_set_workspace(ctx, (size_t)(cfg.heads * cfg.t) * sizeof(double),
                           bt_attention_workspace_bytes(&cfg));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec attention_args[] = {
    {"heads", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "query heads (HF num_attention_heads)"},
    {"kv_heads", BT_ARG_INT, 0, 1, BT_OPS_DIM_MAX,
     "key/value heads, dividing heads (HF num_key_value_heads; default heads)"},
    {"head_dim", BT_ARG_INT, 0, 1, BT_OPS_DIM_MAX,
     "channels per head (default: the input's width / (heads + 2 kv_heads))"},
    {"causal", BT_ARG_BOOL, 0, 0, 0, "mask keys after the query (default true)"},
    {"window", BT_ARG_INT, 0, 0, BT_OPS_DIM_MAX,
     "a causal query sees its last `window` keys, its own included (HF sliding_window; 0: all)"},
    {"block", BT_ARG_INT, 0, 1, 4096, "tile edge of the fused CPU kernel (default 64)"},
};

const bt_op_def bt_op_attention = {
    .name = "attention",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = attention_args,
    .n_args = 6,
    .infer = attention_infer,
    .cpu_forward = attention_forward,
    .cpu_backward = attention_backward,
    .help = "self-attention of [T, (heads + 2 kv_heads) hd] (q | k | v) to [T, heads hd]; "
            "grouped-query, optional sliding window; fused, tiled",
    .cpu_decode = attention_decode,
    .decode_cache_bytes = attention_cache_bytes,
};
