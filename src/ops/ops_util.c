/* ops/ops_util.c: checks the built-in shape rules share (float dtypes, equal shapes, ranks,
 * 2-D size arguments, the fused activation, the heads of a q | k | v row) and the kernels'
 * unsupported-dtype error. Every
 * message starts with the op's name and shows the offending values. */
#include <string.h>

#include "baton/tensor.h"
#include "ops/op_configs.h"
#include "ops/ops.h"

static int is_float(bt_dtype d) { return d == BT_F32 || d == BT_F64; }

int bt_ops_lowp_selects(const void *config, bt_dtype precision, int pass, const char *backend)
{
    (void)config, (void)precision, (void)pass, (void)backend;
    return 1;
}

bt_status bt_ops_need_float(bt_infer_ctx *ctx, const char *op, int i)
{
    bt_dtype d = bt_infer_input_dtype(ctx, i);
    if (!is_float(d))
        return bt_infer_error(ctx, "%s: input %d has dtype %s; expected f32 or f64", op, i,
                              bt_dtype_name(d));
    return BT_OK;
}

bt_status bt_ops_same_float(bt_infer_ctx *ctx, const char *op, bt_dtype *dtype)
{
    int n = bt_infer_num_inputs(ctx);
    for (int i = 0; i < n; i++) {
        bt_status st = bt_ops_need_float(ctx, op, i);
        if (st != BT_OK) return st;
        if (bt_infer_input_dtype(ctx, i) != bt_infer_input_dtype(ctx, 0))
            return bt_infer_error(ctx, "%s: inputs mix dtypes %s and %s", op,
                                  bt_dtype_name(bt_infer_input_dtype(ctx, 0)),
                                  bt_dtype_name(bt_infer_input_dtype(ctx, i)));
    }
    *dtype = bt_infer_input_dtype(ctx, 0);
    return BT_OK;
}

bt_status bt_ops_qkv_heads(bt_infer_ctx *ctx, const char *op, int64_t w, int64_t *heads,
                           int64_t *kv_heads, int64_t *hd)
{
    const int64_t h = bt_infer_arg_int(ctx, "heads", 1);
    const int64_t kvh = bt_infer_arg_int(ctx, "kv_heads", h);
    if (h % kvh != 0)
        return bt_infer_error(ctx, "%s: heads = %lld is not a multiple of kv_heads = %lld", op,
                              (long long)h, (long long)kvh);
    const int64_t per_row = h + 2 * kvh; /* heads in a row */
    const int64_t given = bt_infer_arg_int(ctx, "head_dim", 0);
    if (given > 0 && given * per_row != w)
        return bt_infer_error(ctx,
                              "%s: the input's last dimension (%lld) must be (heads + 2 kv_heads) "
                              "* head_dim = (%lld + 2 * %lld) * %lld = %lld (q, k, v side by side)",
                              op, (long long)w, (long long)h, (long long)kvh, (long long)given,
                              (long long)(given * per_row));
    if (given == 0 && w % per_row != 0)
        return bt_infer_error(ctx,
                              "%s: the input's last dimension (%lld) must be (heads + 2 kv_heads) "
                              "* head_dim, a multiple of %lld + 2 * %lld = %lld (q, k, v side by "
                              "side)",
                              op, (long long)w, (long long)h, (long long)kvh, (long long)per_row);
    *heads = h;
    *kv_heads = kvh;
    *hd = w / per_row;
    return BT_OK;
}

bt_status bt_ops_fused_act(bt_infer_ctx *ctx, const char *op, int *act)
{
    const char *name = bt_infer_arg_string(ctx, "act", NULL);
    *act = BT_OPS_ACT_NONE;
    if (!name) return BT_OK;
    if (strcmp(name, "relu") != 0)
        return bt_infer_error(ctx, "%s: act must be \"relu\" (the one activation fused into its "
                              "output; a layer's other act: values run as their own op), got \"%s\"",
                              op, name);
    *act = BT_OPS_ACT_RELU;
    return BT_OK;
}

bt_status bt_ops_same_shape(bt_infer_ctx *ctx, const char *op, int a, int b)
{
    const bt_shape *sa = bt_infer_input_shape(ctx, a), *sb = bt_infer_input_shape(ctx, b);
    int same = sa->ndim == sb->ndim;
    for (int k = 0; same && k < sa->ndim; k++) same = sa->dim[k] == sb->dim[k];
    if (!same)
        return bt_infer_error(ctx, "%s: shapes %s and %s differ", op, BT_OPS_SHAPE(sa),
                              BT_OPS_SHAPE(sb));
    return BT_OK;
}

bt_status bt_ops_need_ndim(bt_infer_ctx *ctx, const char *op, int i, int ndim, const char *what)
{
    const bt_shape *s = bt_infer_input_shape(ctx, i);
    if (s->ndim != ndim)
        return bt_infer_error(ctx, "%s expects input %d shaped %s, got %s", op, i, what,
                              BT_OPS_SHAPE(s));
    return BT_OK;
}

bt_status bt_ops_pair_arg(bt_infer_ctx *ctx, const char *op, const char *name,
                          const int64_t dflt[2], int64_t out[2])
{
    int64_t v[BT_ARG_MAX_INTS];
    int n = bt_infer_arg_ints(ctx, name, BT_ARG_MAX_INTS, v);
    if (n == 0) {
        out[0] = dflt[0];
        out[1] = dflt[1];
    } else if (n == 1) {
        out[0] = out[1] = v[0];
    } else if (n == 2) {
        out[0] = v[0];
        out[1] = v[1];
    } else {
        return bt_infer_error(ctx, "%s: '%s' takes one integer or [h, w], got %d values", op,
                              name, n);
    }
    return BT_OK;
}

bt_status bt_ops_window_out(bt_infer_ctx *ctx, const char *op, const bt_shape *input,
                            const int64_t kernel[2], const int64_t stride[2],
                            const int64_t pad[2], int64_t out[2])
{
    const int64_t h = input->dim[input->ndim - 2], w = input->dim[input->ndim - 1];
    const int64_t ph = h + 2 * pad[0], pw = w + 2 * pad[1];
    if (kernel[0] > ph || kernel[1] > pw)
        return bt_infer_error(ctx,
                              "%s: kernel [%lld, %lld] is larger than the padded input [%lld, "
                              "%lld] (input %s, padding [%lld, %lld])",
                              op, (long long)kernel[0], (long long)kernel[1], (long long)ph,
                              (long long)pw, BT_OPS_SHAPE(input), (long long)pad[0],
                              (long long)pad[1]);
    out[0] = (ph - kernel[0]) / stride[0] + 1;
    out[1] = (pw - kernel[1]) / stride[1] + 1;
    if (out[0] < 1 || out[1] < 1)
        return bt_infer_error(ctx, "%s: output size [%lld, %lld] for input %s is < 1", op,
                              (long long)out[0], (long long)out[1], BT_OPS_SHAPE(input));
    return BT_OK;
}

bt_status bt_ops_bad_dtype(const char *op, bt_dtype dtype)
{
    return bt_op_error(BT_ERR_UNSUPPORTED, "%s: no CPU kernel for dtype %s", op,
                       bt_dtype_name(dtype));
}
