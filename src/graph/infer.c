/* graph/infer.c: the context an op's shape rule runs in. Before the rule runs, the layer's
 * arguments are checked against the op's bt_arg_spec (unknown names, missing required ones, wrong
 * types, out-of-range numbers), so a rule only reads arguments that are known to be well formed.
 * Every message is prefixed with the layer's position and name. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph_internal.h"
#include "graph/infer.h"

void bt_format_layer_prefix(char *buf, size_t size, const char *layer_name, bt_src_loc loc)
{
    size_t used = 0;
    buf[0] = '\0';
    if (loc.file && loc.line > 0)
        used = (size_t)snprintf(buf, size, "%s:%d:%d: ", loc.file, loc.line, loc.col);
    else if (loc.file)
        used = (size_t)snprintf(buf, size, "%s: ", loc.file);
    if (layer_name && used < size) snprintf(buf + used, size - used, "layer '%s': ", layer_name);
}

void bt_infer_ctx_init(bt_infer_ctx *ctx, const bt_op_def *op, const bt_args *args, int n_in,
                       const bt_shape *shapes, const bt_dtype *dtypes, const char *layer_name,
                       bt_src_loc loc)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->op = op;
    ctx->args = args;
    ctx->n_in = n_in;
    for (int i = 0; i < n_in && i < BT_MAX_INPUTS; i++) {
        ctx->in_shape[i] = shapes[i];
        ctx->in_dtype[i] = dtypes[i];
    }
    ctx->layer_name = layer_name;
    ctx->loc = loc;
}

static bt_status ctx_error(const bt_infer_ctx *ctx, bt_status status, const char *fmt, ...)
{
    char prefix[512], msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bt_format_layer_prefix(prefix, sizeof prefix, ctx->layer_name, ctx->loc);
    return bt_error(status, "%s%s", prefix, msg);
}

static int in_range(const bt_arg_spec *spec, double v)
{
    return spec->min > spec->max || (v >= spec->min && v <= spec->max);
}

static bt_status check_one_arg(const bt_infer_ctx *ctx, const bt_arg_spec *spec,
                               const bt_arg_value *v)
{
    const char *op = ctx->op->name;
    int type_ok = v->type == spec->type || (spec->type == BT_ARG_FLOAT && v->type == BT_ARG_INT) ||
                  (spec->type == BT_ARG_INTS && v->type == BT_ARG_INT);
    if (!type_ok)
        return ctx_error(ctx, BT_ERR_MODEL, "%s argument '%s' must be %s", op, spec->name,
                         bt_arg_type_name(spec->type));
    if (spec->type == BT_ARG_INTS) {
        for (int k = 0; k < v->n; k++)
            if (!in_range(spec, (double)v->ints[k]))
                return ctx_error(ctx, BT_ERR_MODEL,
                                 "%s argument '%s' = %lld is out of range [%g, %g]", op,
                                 spec->name, (long long)v->ints[k], spec->min, spec->max);
    } else if (spec->type == BT_ARG_INT) {
        if (!in_range(spec, (double)v->i))
            return ctx_error(ctx, BT_ERR_MODEL, "%s argument '%s' = %lld is out of range [%g, %g]",
                             op, spec->name, (long long)v->i, spec->min, spec->max);
    } else if (spec->type == BT_ARG_FLOAT) {
        if (!isfinite(v->f) || !in_range(spec, v->f))
            return ctx_error(ctx, BT_ERR_MODEL, "%s argument '%s' = %g is out of range [%g, %g]",
                             op, spec->name, v->f, spec->min, spec->max);
    }
    return BT_OK;
}

static bt_status check_args(const bt_infer_ctx *ctx)
{
    const bt_op_def *op = ctx->op;
    const bt_args *args = ctx->args;
    for (int i = 0; args && i < args->n; i++) {
        const bt_arg_spec *spec = NULL;
        for (int k = 0; k < op->n_args; k++)
            if (strcmp(op->args[k].name, args->v[i].name) == 0) spec = &op->args[k];
        if (!spec) {
            char accepted[512] = "";
            size_t used = 0;
            for (int k = 0; k < op->n_args && used < sizeof accepted; k++)
                used += (size_t)snprintf(accepted + used, sizeof accepted - used, "%s%s",
                                         k ? ", " : "", op->args[k].name);
            return ctx_error(ctx, BT_ERR_MODEL, "op '%s' has no argument '%s' (accepted: %s)",
                             op->name, args->v[i].name, op->n_args ? accepted : "none");
        }
        BT_TRY(check_one_arg(ctx, spec, &args->v[i]));
    }
    for (int k = 0; k < op->n_args; k++)
        if (op->args[k].required && !bt_args_get(args, op->args[k].name))
            return ctx_error(ctx, BT_ERR_MODEL, "op '%s' needs argument '%s'", op->name,
                             op->args[k].name);
    return BT_OK;
}

bt_status bt_infer_ctx_run(bt_infer_ctx *ctx)
{
    const bt_op_def *op = ctx->op;
    if (ctx->n_in < op->min_inputs || ctx->n_in > op->max_inputs) {
        if (op->min_inputs == op->max_inputs)
            return ctx_error(ctx, BT_ERR_SHAPE, "op '%s' takes %d input%s, got %d", op->name,
                             op->min_inputs, op->min_inputs == 1 ? "" : "s", ctx->n_in);
        return ctx_error(ctx, BT_ERR_SHAPE, "op '%s' takes %d to %d inputs, got %d", op->name,
                         op->min_inputs, op->max_inputs, ctx->n_in);
    }
    BT_TRY(check_args(ctx));
    BT_TRY(op->infer(ctx));
    if (!ctx->has_output)
        return ctx_error(ctx, BT_ERR_INTERNAL, "op '%s' shape rule set no output", op->name);
    return BT_OK;
}

/* ---- accessors used by shape rules ------------------------------------------------------------ */

int bt_infer_num_inputs(const bt_infer_ctx *ctx) { return ctx->n_in; }

const bt_shape *bt_infer_input_shape(const bt_infer_ctx *ctx, int i)
{
    return (i >= 0 && i < ctx->n_in) ? &ctx->in_shape[i] : NULL;
}

bt_dtype bt_infer_input_dtype(const bt_infer_ctx *ctx, int i)
{
    return (i >= 0 && i < ctx->n_in) ? ctx->in_dtype[i] : BT_F32;
}

int64_t bt_infer_arg_int(const bt_infer_ctx *ctx, const char *name, int64_t dflt)
{
    const bt_arg_value *v = bt_args_get(ctx->args, name);
    return v ? v->i : dflt;
}

double bt_infer_arg_float(const bt_infer_ctx *ctx, const char *name, double dflt)
{
    const bt_arg_value *v = bt_args_get(ctx->args, name);
    return v ? v->f : dflt;
}

int bt_infer_arg_bool(const bt_infer_ctx *ctx, const char *name, int dflt)
{
    const bt_arg_value *v = bt_args_get(ctx->args, name);
    return v ? (int)v->i : dflt;
}

int bt_infer_arg_ints(const bt_infer_ctx *ctx, const char *name, int max, int64_t *out)
{
    const bt_arg_value *v = bt_args_get(ctx->args, name);
    if (!v) return 0;
    int n = v->n < max ? v->n : max;
    memcpy(out, v->ints, (size_t)n * sizeof *out);
    return v->n;
}

const char *bt_infer_arg_string(const bt_infer_ctx *ctx, const char *name, const char *dflt)
{
    const bt_arg_value *v = bt_args_get(ctx->args, name);
    return (v && v->type == BT_ARG_STRING) ? v->s : dflt;
}

bt_status bt_infer_set_output(bt_infer_ctx *ctx, const bt_shape *shape, bt_dtype dtype)
{
    if (shape->ndim < 0 || shape->ndim > BT_MAX_DIMS)
        return ctx_error(ctx, BT_ERR_SHAPE, "output has %d dimensions (at most %d)", shape->ndim,
                         BT_MAX_DIMS);
    for (int i = 0; i < shape->ndim; i++)
        if (shape->dim[i] < 1)
            return ctx_error(ctx, BT_ERR_SHAPE, "output dimension %d is %lld (must be >= 1)", i,
                             (long long)shape->dim[i]);
    ctx->out_shape = *shape;
    ctx->out_dtype = dtype;
    ctx->has_output = 1;
    return BT_OK;
}

bt_status bt_infer_add_param(bt_infer_ctx *ctx, const char *suffix, const bt_shape *shape,
                             bt_init init, int64_t fan_in, double init_arg)
{
    if (ctx->n_params >= BT_MAX_PARAMS)
        return ctx_error(ctx, BT_ERR_INTERNAL, "more than %d parameters", BT_MAX_PARAMS);
    if (strlen(suffix) >= sizeof ctx->params[0].suffix)
        return ctx_error(ctx, BT_ERR_INTERNAL, "parameter suffix '%s' too long", suffix);
    bt_infer_param *p = &ctx->params[ctx->n_params++];
    strcpy(p->suffix, suffix);
    p->shape = *shape;
    p->init = init;
    p->fan_in = fan_in;
    p->init_arg = init_arg;
    return BT_OK;
}

void bt_infer_set_saved(bt_infer_ctx *ctx, size_t bytes_per_sample)
{
    ctx->saved_per_sample = bytes_per_sample;
}

void bt_infer_set_workspace(bt_infer_ctx *ctx, size_t bytes_per_sample, size_t bytes_fixed)
{
    ctx->ws_per_sample = bytes_per_sample;
    ctx->ws_fixed = bytes_fixed;
}

bt_status bt_infer_set_config(bt_infer_ctx *ctx, const void *config, size_t size)
{
    if (size > BT_OP_CONFIG_MAX)
        return ctx_error(ctx, BT_ERR_INTERNAL, "config of %zu bytes exceeds %d", size,
                         BT_OP_CONFIG_MAX);
    memcpy(ctx->config, config, size);
    ctx->config_size = size;
    return BT_OK;
}

void bt_infer_no_grad(bt_infer_ctx *ctx, int i)
{
    if (i >= 0 && i < BT_MAX_INPUTS) ctx->no_grad_mask |= 1u << i;
}

bt_status bt_infer_int_range(bt_infer_ctx *ctx, int i, int64_t hi)
{
    if (i < 0 || i >= ctx->n_in || hi < 1)
        return ctx_error(ctx, BT_ERR_INTERNAL, "integer range [0, %lld) for input %d of %d",
                         (long long)hi, i, ctx->n_in);
    ctx->int_hi[i] = hi;
    return BT_OK;
}

bt_status bt_infer_error(bt_infer_ctx *ctx, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ctx_error(ctx, BT_ERR_SHAPE, "%s", msg);
}
