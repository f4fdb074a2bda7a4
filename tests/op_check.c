/* tests/op_check.c: see op_check.h. Buffers the kernels must fill (output, saved, workspace) are
 * poisoned with 0xFF bytes (NaN for floats) so a kernel that leaves an element unwritten or reads
 * scratch before writing it shows up as NaN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_check.h"

static uint64_t oc_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double oc_uniform(uint64_t *s) { return (double)(oc_next(s) >> 11) * 0x1.0p-53; }

bt_args *oc_args(const char *spec)
{
    bt_args *args = NULL;
    char buf[512];
    if (bt_args_create(&args) != BT_OK) return NULL;
    if (!spec) return args;
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) goto fail;
        *eq = '\0';
        const char *name = tok, *val = eq + 1;
        char *end;
        bt_status st;
        if (strcmp(val, "true") == 0 || strcmp(val, "false") == 0) {
            st = bt_args_set_bool(args, name, val[0] == 't');
        } else if (strchr(val, ',')) {
            int64_t v[BT_ARG_MAX_INTS];
            int n = 0;
            for (const char *p = val; *p && n < BT_ARG_MAX_INTS; n++) {
                v[n] = strtoll(p, &end, 10);
                p = *end == ',' ? end + 1 : end;
            }
            st = bt_args_set_ints(args, name, n, v);
        } else if (strtod(val, &end), *val && *end == '\0') {
            if (strpbrk(val, ".eE"))
                st = bt_args_set_float(args, name, strtod(val, NULL));
            else
                st = bt_args_set_int(args, name, strtoll(val, NULL, 10));
        } else {
            st = bt_args_set_string(args, name, val);
        }
        if (st != BT_OK) goto fail;
    }
    return args;
fail:
    bt_args_destroy(args);
    return NULL;
}

double oc_get(const bt_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case BT_F32: return ((const float *)t->data)[i];
    case BT_F64: return ((const double *)t->data)[i];
    case BT_I32: return ((const int32_t *)t->data)[i];
    default: return NAN;
    }
}

void oc_set(bt_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case BT_F32: ((float *)t->data)[i] = (float)v; break;
    case BT_F64: ((double *)t->data)[i] = v; break;
    case BT_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    default: break;
    }
}

void oc_fill(oc_layer *L, bt_tensor *t, double lo, double hi)
{
    const int64_t n = bt_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double u = lo + (hi - lo) * oc_uniform(&L->rng);
        oc_set(t, i, t->dtype == BT_I32 ? floor(u) : u);
    }
}

void oc_zero(bt_tensor *t)
{
    if (t->data) memset(t->data, 0, (size_t)bt_tensor_numel(t) * bt_dtype_size(t->dtype));
}

/* Allocates t: dtype, and shape s with the batch prepended when batch >= 0. */
static int oc_tensor(bt_tensor *t, bt_dtype dtype, int64_t batch, const bt_shape *s)
{
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    if (batch >= 0) t->dim[t->ndim++] = batch;
    for (int k = 0; k < s->ndim; k++) t->dim[t->ndim++] = s->dim[k];
    size_t bytes = (size_t)bt_tensor_numel(t) * bt_dtype_size(dtype);
    t->data = malloc(bytes ? bytes : 1);
    if (!t->data) return -1;
    memset(t->data, 0, bytes);
    return 0;
}

static void *oc_poisoned(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p) memset(p, 0xFF, bytes);
    return p;
}

bt_status oc_setup(oc_layer *L, const char *op_name, const char *spec, int n_in,
                   const bt_shape *shapes, const bt_dtype *dtypes, int64_t batch, bt_dtype real)
{
    bt_dtype in_dtype[BT_MAX_INPUTS];
    bt_status st = BT_OK;
    memset(L, 0, sizeof *L);
    L->rng = 12345;
    L->batch = batch;
    L->real = real;
    L->n_in = n_in;
    L->seed = 42;
    L->training = 1;
    L->op = bt_op_find(op_name);
    if (!L->op) return BT_ERR_INVALID_ARG;
    if (!(L->args = oc_args(spec))) return BT_ERR_INVALID_ARG;
    for (int i = 0; i < n_in; i++) in_dtype[i] = dtypes[i] == BT_F64 ? real : dtypes[i];
    bt_infer_ctx_init(&L->ctx, L->op, L->args, n_in, shapes, in_dtype, "L", (bt_src_loc){0});
    if ((st = bt_infer_ctx_run(&L->ctx)) != BT_OK) goto fail;
    st = BT_ERR_NOMEM;
    const int float_out = L->ctx.out_dtype == BT_F32 || L->ctx.out_dtype == BT_F64;
    const bt_dtype out_dtype = float_out ? real : L->ctx.out_dtype;
    for (int i = 0; i < n_in; i++) {
        if (oc_tensor(&L->in[i], in_dtype[i], batch, &shapes[i])) goto fail;
        if (in_dtype[i] == BT_I32 || (L->ctx.no_grad_mask >> i & 1u)) {
            L->in_grad[i] = L->in[i];
            L->in_grad[i].data = NULL;
        } else if (oc_tensor(&L->in_grad[i], in_dtype[i], batch, &shapes[i])) {
            goto fail;
        }
        if (in_dtype[i] != BT_I32) oc_fill(L, &L->in[i], -1, 1);
    }
    if (oc_tensor(&L->out, out_dtype, batch, &L->ctx.out_shape)) goto fail;
    memset(L->out.data, 0xFF, (size_t)bt_tensor_numel(&L->out) * bt_dtype_size(out_dtype));
    if (oc_tensor(&L->out_grad, out_dtype, batch, &L->ctx.out_shape)) goto fail;
    if (float_out) oc_fill(L, &L->out_grad, -1, 1);
    L->n_params = L->ctx.n_params;
    for (int j = 0; j < L->n_params; j++) {
        if (oc_tensor(&L->param[j], real, -1, &L->ctx.params[j].shape)) goto fail;
        if (oc_tensor(&L->param_grad[j], real, -1, &L->ctx.params[j].shape)) goto fail;
        oc_fill(L, &L->param[j], -1, 1);
    }
    if (!(L->saved = oc_poisoned(L->ctx.saved_per_sample * (size_t)batch))) goto fail;
    if (!(L->workspace = oc_poisoned(L->ctx.ws_per_sample * (size_t)batch + L->ctx.ws_fixed)))
        goto fail;
    return BT_OK;
fail:
    oc_free(L);
    return st;
}

void oc_free(oc_layer *L)
{
    for (int i = 0; i < BT_MAX_INPUTS; i++) {
        if (L->in_grad[i].data != L->in[i].data) free(L->in_grad[i].data);
        free(L->in[i].data);
    }
    for (int j = 0; j < BT_MAX_PARAMS; j++) {
        free(L->param[j].data);
        free(L->param_grad[j].data);
    }
    free(L->out.data);
    free(L->out_grad.data);
    free(L->saved);
    free(L->workspace);
    bt_args_destroy(L->args);
    memset(L, 0, sizeof *L);
}

static bt_op_call oc_call(oc_layer *L)
{
    bt_op_call call = {
        .batch = L->batch,
        .n_in = L->n_in,
        .in = L->in,
        .out = &L->out,
        .n_params = L->n_params,
        .param = L->param,
        .param_grad = L->param_grad,
        .out_grad = &L->out_grad,
        .in_grad = L->in_grad,
        .saved = L->saved,
        .workspace = L->workspace,
        .config = L->ctx.config,
        .seed = L->seed,
        .training = L->training,
        .threads = L->threads > 0 ? L->threads : 1,
        .precision = L->precision,
    };
    return call;
}

bt_status oc_forward(oc_layer *L)
{
    bt_op_call call = oc_call(L);
    call.param_grad = NULL;
    call.out_grad = NULL;
    call.in_grad = NULL;
    return L->op->cpu_forward(&call);
}

bt_status oc_backward(oc_layer *L)
{
    bt_op_call call = oc_call(L);
    return L->op->cpu_backward(&call);
}

/* sum(out * out_grad) after a forward: the scalar whose gradient the backward computes. */
static int oc_objective(oc_layer *L, double *value)
{
    if (oc_forward(L) != BT_OK) return -1;
    const int64_t n = bt_tensor_numel(&L->out);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += oc_get(&L->out, i) * oc_get(&L->out_grad, i);
    *value = sum;
    return 0;
}

typedef struct oc_worst {
    double err, analytic, numeric;
    const char *what;
    int index;
    int64_t element;
    int bad;
} oc_worst;

/* Checks one tensor x (an input or parameter) against its analytic gradient g (already with the
 * pre-fill g0 subtracted, as a double array). */
static int oc_check_tensor(oc_layer *L, bt_tensor *x, const double *g, double h, double tol,
                           const char *what, int index, oc_worst *w)
{
    const int64_t n = bt_tensor_numel(x);
    for (int64_t e = 0; e < n; e++) {
        const double x0 = oc_get(x, e);
        double fp, fm;
        oc_set(x, e, x0 + h);
        if (oc_objective(L, &fp)) return -1;
        oc_set(x, e, x0 - h);
        if (oc_objective(L, &fm)) return -1;
        oc_set(x, e, x0);
        const double numeric = (fp - fm) / (2 * h);
        const double err = fabs(g[e] - numeric) / fmax(1.0, fabs(numeric));
        if (!(err <= tol)) w->bad++;
        if (!(err <= w->err)) {
            *w = (oc_worst){err, g[e], numeric, what, index, e, w->bad};
        }
    }
    return 0;
}

int oc_gradcheck(oc_layer *L, double h, double tol, char *msg, size_t size)
{
    double *g0[BT_MAX_INPUTS + BT_MAX_PARAMS] = {0};
    bt_tensor *grads[BT_MAX_INPUTS + BT_MAX_PARAMS];
    int ng = 0, result = -1;
    oc_worst w = {0};
    snprintf(msg, size, "kernel failed");
    for (int i = 0; i < L->n_in; i++) grads[ng++] = &L->in_grad[i];
    for (int j = 0; j < L->n_params; j++) grads[ng++] = &L->param_grad[j];
    /* pre-fill every gradient with random values; the analytic gradient is what the backward
     * added on top */
    for (int k = 0; k < ng; k++) {
        if (!grads[k]->data) continue;
        const int64_t n = bt_tensor_numel(grads[k]);
        if (!(g0[k] = malloc((size_t)n * sizeof(double)))) goto done;
        oc_fill(L, grads[k], -1, 1);
        for (int64_t e = 0; e < n; e++) g0[k][e] = oc_get(grads[k], e);
    }
    if (oc_forward(L) != BT_OK || oc_backward(L) != BT_OK) goto done;
    for (int k = 0; k < ng; k++) {
        if (!grads[k]->data) continue;
        const int64_t n = bt_tensor_numel(grads[k]);
        for (int64_t e = 0; e < n; e++) g0[k][e] = oc_get(grads[k], e) - g0[k][e];
    }
    for (int k = 0; k < ng; k++) {
        if (!grads[k]->data) continue;
        const int is_in = k < L->n_in;
        bt_tensor *x = is_in ? &L->in[k] : &L->param[k - L->n_in];
        if (oc_check_tensor(L, x, g0[k], h, tol, is_in ? "input" : "param",
                            is_in ? k : k - L->n_in, &w))
            goto done;
    }
    result = w.bad;
    if (w.what)
        snprintf(msg, size, "%d bad; worst: %s %d element %lld analytic %.10g numeric %.10g",
                 w.bad, w.what, w.index, (long long)w.element, w.analytic, w.numeric);
    else
        snprintf(msg, size, "nothing to check");
done:
    for (int k = 0; k < ng; k++) free(g0[k]);
    return result;
}

void oc_copy_values(oc_layer *dst, const oc_layer *src)
{
    for (int i = 0; i < src->n_in; i++) {
        const int64_t n = bt_tensor_numel(&src->in[i]);
        for (int64_t e = 0; e < n; e++) oc_set(&dst->in[i], e, oc_get(&src->in[i], e));
    }
    for (int j = 0; j < src->n_params; j++) {
        const int64_t n = bt_tensor_numel(&src->param[j]);
        for (int64_t e = 0; e < n; e++) oc_set(&dst->param[j], e, oc_get(&src->param[j], e));
    }
    const int64_t n = bt_tensor_numel(&src->out_grad);
    for (int64_t e = 0; e < n; e++) oc_set(&dst->out_grad, e, oc_get(&src->out_grad, e));
}
