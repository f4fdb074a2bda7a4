/* ops/rope.c: `rope`, rotary position embedding (RoFormer's) in Hugging Face's rotate-half layout,
 * on the q | k | v rows that `attention` reads: input and output [T, (heads + 2 kv_heads) hd],
 * args heads, kv_heads and head_dim as attention's (ops_util.c), theta (HF rope_theta, default
 * 10000) and, for rope_scaling of rope_type llama3, scaling: llama3 with factor,
 * low_freq_factor, high_freq_factor and original_max_position_embeddings (HF's names; all four
 * required with it, refused without it). q's and k's heads are rotated (ops/op_configs.h,
 * bt_rope_config: pairs (i, i + hd/2) turned by position * f_i, f_i from bt_rope_inv_freq), v's
 * copied, so the output feeds attention directly and a graph needs no split or concat for it.
 *
 * Position: a row's index in its sample's sequence; decoding one row, the call's position (the
 * length of what the KV cache holds), so decode needs no cache of its own. Angles, their cosines
 * and sines and each rotated pair are computed in double and rounded once. The backward is the
 * inverse rotation (the transpose), exact. No parameters. */
#include <math.h>
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/rope_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/rope_tmpl.h"

BT_OPS_DISPATCH("rope", rope_forward, call->out->dtype)
BT_OPS_DISPATCH("rope", rope_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("rope", rope_decode, call->out->dtype)

/* The llama3 scaling arguments: all four with scaling: llama3, none without it. */
static bt_status rope_scaling(bt_infer_ctx *ctx, bt_rope_config *cfg)
{
    static const char *const names[] = {"factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings"};
    const char *scaling = bt_infer_arg_string(ctx, "scaling", NULL);
    if (scaling && strcmp(scaling, "llama3") != 0)
        return bt_infer_error(ctx, "rope: scaling must be \"llama3\" (HF rope_scaling's rope_type; "
                                   "leave it out for none), got \"%s\"",
                              scaling);
    cfg->llama3 = scaling != NULL;
    double v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = bt_infer_arg_float(ctx, names[i], NAN);
        if (cfg->llama3 && isnan(v[i]))
            return bt_infer_error(ctx, "rope: scaling: llama3 needs %s", names[i]);
        if (!cfg->llama3 && !isnan(v[i]))
            return bt_infer_error(ctx, "rope: %s is a parameter of scaling: llama3, which was not given",
                                  names[i]);
    }
    if (!cfg->llama3) return BT_OK;
    if (!(v[2] > v[1]))
        return bt_infer_error(ctx, "rope: high_freq_factor (%g) must be larger than low_freq_factor (%g)",
                              v[2], v[1]);
    cfg->factor = v[0];
    cfg->low_freq_factor = v[1];
    cfg->high_freq_factor = v[2];
    cfg->original_max_position_embeddings = v[3];
    return BT_OK;
}

static bt_status rope_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "rope", &dtype);
    if (st != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (x->ndim != 2)
        return bt_infer_error(ctx, "rope expects an input shaped [T, (heads + 2 kv_heads) * head_dim], got %s",
                              BT_OPS_SHAPE(x));
    bt_rope_config cfg = {.t = x->dim[0], .width = x->dim[1], .theta = bt_infer_arg_float(ctx, "theta", 10000.0)};
    int64_t heads, kv_heads;
    if ((st = bt_ops_qkv_heads(ctx, "rope", x->dim[1], &heads, &kv_heads, &cfg.hd)) != BT_OK) return st;
    if (cfg.hd % 2 != 0)
        return bt_infer_error(ctx, "rope: head_dim (%lld) must be even (its halves are rotated in pairs)",
                              (long long)cfg.hd);
    cfg.rotated = heads + kv_heads;
    if ((st = rope_scaling(ctx, &cfg)) != BT_OK) return st;
    if ((st = bt_infer_set_output(ctx, x, dtype)) != BT_OK) return st;
    /* the inverse frequencies, and one position's cosines and sines */
    bt_infer_set_workspace(ctx, 0, (size_t)(3 * (cfg.hd / 2)) * sizeof(double));
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec rope_args[] = {
    {"heads", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "query heads, as attention's"},
    {"kv_heads", BT_ARG_INT, 0, 1, BT_OPS_DIM_MAX, "key/value heads, as attention's (default heads)"},
    {"head_dim", BT_ARG_INT, 0, 1, BT_OPS_DIM_MAX, "channels per head, even, as attention's"},
    {"theta", BT_ARG_FLOAT, 0, 1e-300, 1e300, "base of the frequencies (HF rope_theta; default 10000)"},
    {"scaling", BT_ARG_STRING, 0, 1, 0, "llama3: HF rope_scaling of rope_type llama3 (default none)"},
    {"factor", BT_ARG_FLOAT, 0, 1e-300, 1e300, "llama3 scaling: factor"},
    {"low_freq_factor", BT_ARG_FLOAT, 0, 1e-300, 1e300, "llama3 scaling: low_freq_factor"},
    {"high_freq_factor", BT_ARG_FLOAT, 0, 1e-300, 1e300, "llama3 scaling: high_freq_factor"},
    {"original_max_position_embeddings", BT_ARG_FLOAT, 0, 1, 1e300,
     "llama3 scaling: the context the frequencies were trained for"},
};

const bt_op_def bt_op_rope = {
    .name = "rope",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = rope_args,
    .n_args = 9,
    .infer = rope_infer,
    .cpu_forward = rope_forward,
    .cpu_backward = rope_backward,
    .help = "rotary position embedding (HF rotate-half) of q and k in [T, (heads + 2 kv_heads) hd]; "
            "v copied",
    .cpu_decode = rope_decode,
};
