/* ops/attention.c: `attention`, multi-head self-attention fused into one op, in the manner of
 * FlashAttention. Input [T, 3C] as one `linear` to 3C produces it (q, k and v side by side, each
 * C = heads * hd wide with the heads side by side, as nanoGPT's c_attn splits it); output [T, C],
 * the heads' results side by side (ready for the projection). args: heads (C divisible by it),
 * causal (default true: query t sees keys 0..t), block (tile edge, default 64).
 *
 * The CPU kernels never hold more than one block x block tile of a head's T x T scores: the
 * forward walks key tiles with an online softmax (running maximum and sum per query row) and
 * saves each row's log-sum-exp (one double per head and position); the backward recomputes each
 * tile's probabilities from it, with D = rowsum(dO * O) read from the output, as FlashAttention-2
 * does. Tiles are GEMMs through cpu/blas.h. No parameters: the projections are `linear` layers. */
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

/* The KV cache of one sequence: keys then values, T rows of C each, sized for doubles. */
static size_t attention_cache_bytes(const void *config)
{
    const bt_attention_config *cf = config;
    return (size_t)(2 * cf->t * cf->c) * sizeof(double);
}

static bt_status attention_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "attention", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim != 2)
        return bt_infer_error(ctx, "attention expects an input shaped [T, 3C], got %s",
                              BT_OPS_SHAPE(x));
    const int64_t heads = bt_infer_arg_int(ctx, "heads", 1);
    if (x->dim[1] % 3 != 0)
        return bt_infer_error(ctx,
                              "attention: the input's last dimension (%lld) must be 3C (q, k, v "
                              "side by side)",
                              (long long)x->dim[1]);
    const int64_t c = x->dim[1] / 3;
    if (c % heads != 0)
        return bt_infer_error(ctx, "attention: C = %lld is not divisible by heads = %lld",
                              (long long)c, (long long)heads);
    bt_attention_config cfg = {.t = x->dim[0],
                               .c = c,
                               .heads = heads,
                               .hd = c / heads,
                               .block = bt_infer_arg_int(ctx, "block", 64),
                               .causal = bt_infer_arg_bool(ctx, "causal", 1)};
    cfg.scale = 1.0 / sqrt((double)cfg.hd);
    if (cfg.block > cfg.t) cfg.block = cfg.t;
    bt_shape y = {.ndim = 2, .dim = {cfg.t, c}};
    if ((st = bt_infer_set_output(ctx, &y, dtype)) != BT_OK) return st;
    bt_infer_set_saved(ctx, (size_t)(cfg.heads * cfg.t) * sizeof(double));
    /* per sample: D of every (head, row) for the CUDA backward; fixed: the CPU kernels' tiles */
    bt_infer_set_workspace(ctx, (size_t)(cfg.heads * cfg.t) * sizeof(double),
                           bt_attention_workspace_bytes(&cfg));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec attention_args[] = {
    {"heads", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "number of heads (divides C)"},
    {"causal", BT_ARG_BOOL, 0, 0, 0, "mask keys after the query (default true)"},
    {"block", BT_ARG_INT, 0, 1, 4096, "tile edge of the fused CPU kernel (default 64)"},
};

const bt_op_def bt_op_attention = {
    .name = "attention",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = attention_args,
    .n_args = 3,
    .infer = attention_infer,
    .cpu_forward = attention_forward,
    .cpu_backward = attention_backward,
    .help = "multi-head self-attention of [T, 3C] (q | k | v) to [T, C]; fused, tiled",
    .cpu_decode = attention_decode,
    .decode_cache_bytes = attention_cache_bytes,
};
