/* ops/embedding.c: `embedding`, a table lookup. Input: i32 indices of any per-sample shape [T...]
 * (a scalar too); output [T..., dim]; param weight [num, dim] ~ N(0, 1) like PyTorch's Embedding.
 * The index input takes no gradient. The output dtype is f32 unless args.dtype says "f64" (there
 * is no float input to follow); the kernels follow the dtype of the tensors they are handed. An
 * index outside [0, num) fails the call with BT_ERR_INVALID_ARG. args.std (default 1) sets the
 * initial weights' standard deviation (nanoGPT uses 0.02).
 * `pos_embedding`: learned position embeddings added to a float input x [T, C]: y[t] = x[t] +
 * weight[t], weight [num, C] ~ N(0, std^2) (num >= T: the longest context the table serves). */
#include <string.h>

#include "ops/op_configs.h"
#include "ops/ops.h"

/* The error for an index outside the table (the CUDA backend reports its faults with it too). */
bt_status bt_ops_embedding_bad_index(int64_t at, int32_t index, int64_t num)
{
    return bt_op_error(BT_ERR_INVALID_ARG,
                       "embedding: index %d at position %lld of the micro-batch is out of range "
                       "for a vocabulary of %lld",
                       (int)index, (long long)at, (long long)num);
}

#define BT_REAL_BITS 32
#include "ops/real.h"
#include "ops/embedding_tmpl.h"
#undef BT_REAL_BITS
#define BT_REAL_BITS 64
#include "ops/real.h"
#include "ops/embedding_tmpl.h"

BT_OPS_DISPATCH("embedding", embedding_forward, call->out->dtype)
BT_OPS_DISPATCH("embedding", embedding_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("pos_embedding", pos_embedding_forward, call->out->dtype)
BT_OPS_DISPATCH("pos_embedding", pos_embedding_backward, call->out_grad->dtype)
BT_OPS_DISPATCH("pos_embedding", pos_embedding_decode, call->out->dtype)

static bt_status embedding_infer(bt_infer_ctx *ctx)
{
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    if (bt_infer_input_dtype(ctx, 0) != BT_I32)
        return bt_infer_error(ctx, "embedding expects i32 indices, got dtype %s",
                              bt_dtype_name(bt_infer_input_dtype(ctx, 0)));
    if (x->ndim >= BT_MAX_DIMS)
        return bt_infer_error(ctx, "embedding: input %s has too many dimensions (at most %d)",
                              BT_OPS_SHAPE(x), BT_MAX_DIMS - 1);
    const char *dtype_name = bt_infer_arg_string(ctx, "dtype", "f32");
    bt_dtype dtype;
    if (strcmp(dtype_name, "f32") == 0)
        dtype = BT_F32;
    else if (strcmp(dtype_name, "f64") == 0)
        dtype = BT_F64;
    else
        return bt_infer_error(ctx, "embedding: dtype must be \"f32\" or \"f64\", got \"%s\"",
                              dtype_name);
    bt_embedding_config cfg = {.num = bt_infer_arg_int(ctx, "num", 1),
                            .dim = bt_infer_arg_int(ctx, "dim", 1)};
    bt_shape y = *x;
    y.dim[y.ndim++] = cfg.dim;
    bt_shape w = {.ndim = 2, .dim = {cfg.num, cfg.dim}};
    bt_status st = bt_infer_set_output(ctx, &y, dtype);
    if (st != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "weight", &w, BT_INIT_NORMAL, cfg.dim,
                                 bt_infer_arg_float(ctx, "std", 1.0))) != BT_OK)
        return st;
    bt_infer_no_grad(ctx, 0);
    if ((st = bt_infer_int_range(ctx, 0, cfg.num)) != BT_OK) return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec embedding_args[] = {
    {"num", BT_ARG_INT, 1, 1, 2147483647.0, "vocabulary size (rows of the table)"},
    {"dim", BT_ARG_INT, 1, 1, BT_OPS_DIM_MAX, "embedding width"},
    {"dtype", BT_ARG_STRING, 0, 1, 0, "output dtype: f32 (default) or f64"},
    {"std", BT_ARG_FLOAT, 0, 0, 1e300, "initial weights' standard deviation (default 1)"},
};

const bt_op_def bt_op_embedding = {
    .name = "embedding",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = embedding_args,
    .n_args = 4,
    .infer = embedding_infer,
    .cpu_forward = embedding_forward,
    .cpu_backward = embedding_backward,
    /* W of a split backward: the same kernel, called with no input gradients (it skips every
     * gradient whose .data is NULL, so B is it called with no parameter gradients) */
    .cpu_backward_weight = embedding_backward,
    .help = "rows of weight [num, dim] picked by i32 indices",
};

static bt_status pos_embedding_infer(bt_infer_ctx *ctx)
{
    bt_dtype dtype;
    bt_status st = bt_ops_same_float(ctx, "pos_embedding", &dtype);
    if (st != BT_OK) return st;
    if ((st = bt_ops_need_ndim(ctx, "pos_embedding", 0, 2, "[T, C]")) != BT_OK) return st;
    const bt_shape *x = bt_infer_input_shape(ctx, 0);
    bt_pos_embedding_config cfg = {.t = x->dim[0], .c = x->dim[1],
                                   .num = bt_infer_arg_int(ctx, "num", x->dim[0])};
    if (cfg.num < cfg.t)
        return bt_infer_error(ctx,
                              "pos_embedding: %lld positions in the table, the input has %lld",
                              (long long)cfg.num, (long long)cfg.t);
    bt_shape w = {.ndim = 2, .dim = {cfg.num, cfg.c}};
    if ((st = bt_infer_set_output(ctx, x, dtype)) != BT_OK) return st;
    if ((st = bt_infer_add_param(ctx, "weight", &w, BT_INIT_NORMAL, cfg.c,
                                 bt_infer_arg_float(ctx, "std", 1.0))) != BT_OK)
        return st;
    return bt_infer_set_config(ctx, &cfg, sizeof cfg);
}

static const bt_arg_spec pos_embedding_args[] = {
    {"num", BT_ARG_INT, 0, 1, 2147483647.0, "positions in the table (default: the input's T)"},
    {"std", BT_ARG_FLOAT, 0, 0, 1e300, "initial weights' standard deviation (default 1)"},
};

const bt_op_def bt_op_pos_embedding = {
    .name = "pos_embedding",
    .min_inputs = 1,
    .max_inputs = 1,
    .args = pos_embedding_args,
    .n_args = 2,
    .infer = pos_embedding_infer,
    .cpu_forward = pos_embedding_forward,
    .cpu_backward = pos_embedding_backward,
    .help = "x [T, C] + weight[0:T], learned position embeddings; weight [num, C]",
    .cpu_decode = pos_embedding_decode,
};
