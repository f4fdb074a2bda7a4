/* ops/dropout.c: `dropout` (arg p in [0, 1), default 0.5). In training each element is kept with
 * probability 1 - p and scaled by 1 / (1 - p); in inference (call->training == 0) it is the
 * identity. The keep decision for element i of a micro-batch is a pure function of (call->seed,
 * i) through splitmix64, so it is reproducible for a seed and independent of threading or
 * chunking. The forward saves the mask (one byte per element) for the backward. */
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

/* splitmix64's output function: a bijective mix of x. */
static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* mask[i] = 1 where element i is kept: its 32-bit uniform draw u satisfies u >= p 2^32. The draws
 * of elements 2j and 2j+1 are the low and high halves of splitmix64(key + j), key being the mixed
 * seed (so neighbouring seeds do not give shifted copies of one mask). */
static void dropout_mask(uint64_t seed, double p, int64_t n, unsigned char *restrict mask)
{
    const uint64_t key = splitmix64(seed);
    const uint32_t threshold = (uint32_t)(p * 4294967296.0); /* p < 1, so < 2^32 */
    int64_t j = 0;
    for (; 2 * j + 1 < n; j++) {
        const uint64_t h = splitmix64(key + (uint64_t)j);
        mask[2 * j] = (uint32_t)h >= threshold;
        mask[2 * j + 1] = (uint32_t)(h >> 32) >= threshold;
    }
    if (2 * j < n) mask[2 * j] = (uint32_t)splitmix64(key + (uint64_t)j) >= threshold;
}

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/dropout_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/dropout_tmpl.h"

BT_OPS_DISPATCH("dropout", dropout_forward, call->out->dtype)
BT_OPS_DISPATCH("dropout", dropout_backward, call->out_grad->dtype)

static bt_status dropout_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "dropout", &dtype);
    if (st != BT_OK) return st;
    bt_dropout_config cfg = {.p = bt_infer_arg_float(ctx, "p", 0.5)};
    if (!(cfg.p >= 0 && cfg.p < 1))
        return bt_infer_error(ctx, "dropout: p must be in [0, 1), got %g", cfg.p);
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if ((st = bt_infer_set_output(ctx, x, dtype)) != BT_OK) return st;
    bt_infer_set_saved(ctx, (size_t)bt_shape_numel(x));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec dropout_args[] = {
    {"p", BT_ARG_FLOAT, 0, 0, 1, "probability of zeroing an element, in [0, 1) (default 0.5)"},
};

const bt_op_def bt_op_dropout = {
    .name = "dropout",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = dropout_args,
    .n_args = 1,
    .infer = dropout_infer,
    .cpu_forward = dropout_forward,
    .cpu_backward = dropout_backward,
    .help = "zeroes elements with probability p in training, scaling the rest by 1/(1-p)",
};
