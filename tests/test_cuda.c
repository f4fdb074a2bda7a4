/* tests/test_cuda.c: the CUDA backend against the CPU reference, on a GPU. Skips (exit 77,
 * saying why) where cudaGetDeviceCount fails or finds no device; fails instead where
 * BT_REQUIRE_GPU is set (scripts/gpu-check.sh).
 *
 * What is compared, and how closely (err = |gpu - cpu| / max(1, |cpu|) per element):
 *   - every case of the shared table (tests/op_cases.c, the CPU tests' rows and larger ones),
 *     forward and backward, f32 and f64, on random inputs: the op runs on the
 *     CPU through tests/op_check.h and on cuda:0 through the backend's run_op with the same
 *     inputs, parameters, output gradient and PRE-FILLED random input/parameter gradients (so a
 *     backward that overwrites instead of adding fails). Outputs and every gradient must agree
 *     within 1e-4 (f32) or 1e-10 (f64): the GPU sums in a different order (block reductions,
 *     atomics in column sums and embedding gradients, cuBLAS/cuDNN GEMM blocking, fused
 *     multiply-adds) but accumulates reductions in double as the CPU does. Sizes go past one
 *     block (rows of 1000, 5000-element samples, 1200-row column sums) to reach the multi-warp
 *     and multi-chunk paths. Dropout's mask and maxpool's argmax must match exactly.
 *   - conv2d both through cuDNN (where built) and through the im2col + cuBLAS path (a second
 *     device handle opened with BATON_CUDNN=0, chunks of samples per GEMM); the cuDNN one must
 *     actually have used cuDNN for f32, and running the cases again makes no new cuDNN plan.
 *   - partial backwards (no input gradient, no parameter gradients) and inference dropout.
 *   - data errors: an embedding index or a label out of range is reported by the next sync /
 *     to_host as BT_ERR_INVALID_ARG with the CPU's wording, then cleared.
 *   - the backend's own entries: alloc (and a clean BT_ERR_NOMEM for an impossible size),
 *     zero, copy, to_host/from_host, accumulate (exact), sum_squares (1e-10 relative), and
 *     optimizer_update against bt_optim_update for SGD (plain, momentum, Nesterov, weight decay)
 *     and AdamW over three steps with a gradient scale (1e-5 f32, 1e-12 f64, weights and state);
 *     run_op of an op without CUDA kernels fails with BT_ERR_UNSUPPORTED.
 *   - mixed precision per op: the GEMM ops (linear; conv2d through cuDNN and through the GEMM
 *     path) with call->precision bf16 and f16 (cublasGemmEx's tensor-core compute types) on
 *     operands already rounded to that precision, as the executor guarantees, against the f32 CPU
 *     kernel on the same rounded values: the conversions are exact and products exact in f32, so
 *     the f32 tolerance holds.
 *   - cuDNN that cannot start (BATON_CUDNN=broken acts as if cudnnCreate failed): the device still
 *     opens, says so in its description and in bt_gpu_info, and conv2d takes the GEMM path.
 *   - determinism: sum_squares, bt_k_colsum_acc (linear's bias gradient), and the embedding,
 *     layernorm and cross-entropy kernels give the same bits on every run (the emulator runs
 *     blocks in varying orders, so atomics would differ); embedding's weight gradient equals the
 *     CPU's exactly (same order of additions).
 *   - peer access between two GPUs (where there are two): asked twice, the same answer, and no
 *     CUDA error left behind (enabled once per direction).
 *   - decoding (run_op(BT_RUN_DECODE), op->cuda_decode): attention's KV-cache kernel position by
 *     position over contexts of 9, 131 and 300 rows (no multiple of the CPU tile or the kernel's
 *     128-key chunk), multi-head, grouped-query and multi-query, with and without windows (one
 *     longer than a chunk), f32 and f64, against the CPU decode entry (TOL) and both against the
 *     CPU forward's rows of the whole causal window; the caches equal bit for bit; non-causal
 *     attention and a position past the context refused alike; pos_embedding's row exact; rope's
 *     row at each position (llama3 scaling) against the CPU decode and forward. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "bt_test.h"
#include "core/half.h"
#include "cuda/conv_cudnn.h"
#include "cuda/devices.h"
#include "cuda/ops_cuda.h"
#include "op_cases.h"
#include "op_check.h"
#include "ops/op_configs.h"
#include "optim/optim.h"

#define TOL_F32 1e-4
#define TOL_F64 1e-10

static const bt_backend *be;
static bt_dtype precision = BT_F32; /* call->precision of the op runs (f32 cases only) */
static bt_device *gpu;      /* cuda:0, with cuDNN where the build has it */
static bt_device *gpu_gemm; /* cuda:0 again, without cuDNN (BATON_CUDNN=0) */

/* ---- device buffers ------------------------------------------------------------------------- */

static size_t tensor_bytes(const bt_tensor *t)
{
    return (size_t)bt_tensor_numel(t) * bt_dtype_size(t->dtype);
}

/* A device buffer of bytes holding host (or 0xFF bytes where host is NULL); NULL on failure. */
static void *device_buffer(bt_device *d, const void *host, size_t bytes)
{
    void *p = NULL;
    if (be->alloc(d, bytes ? bytes : 1, &p) != BT_OK) {
        printf("\n  alloc: %s\n", bt_last_error());
        return NULL;
    }
    if (bytes == 0) return p;
    void *poison = NULL;
    if (!host) {
        poison = malloc(bytes);
        if (!poison) return p;
        memset(poison, 0xFF, bytes);
        host = poison;
    }
    if (be->from_host(d, p, host, bytes) != BT_OK) printf("\n  from_host: %s\n", bt_last_error());
    free(poison);
    return p;
}

/* The GPU twin of an oc_layer: the same tensors in device memory. */
typedef struct gpu_layer {
    bt_device *dev;
    bt_tensor in[BT_MAX_INPUTS], in_grad[BT_MAX_INPUTS];
    bt_tensor out, out_grad;
    bt_tensor param[BT_MAX_PARAMS], param_grad[BT_MAX_PARAMS];
    void *saved, *workspace;
} gpu_layer;

static void mirror(bt_device *d, bt_tensor *dst, const bt_tensor *src, int copy_values)
{
    *dst = *src;
    if (src->data) dst->data = device_buffer(d, copy_values ? src->data : NULL, tensor_bytes(src));
}

static void gpu_free(gpu_layer *G)
{
    if (!G->dev) return;
    for (int i = 0; i < BT_MAX_INPUTS; i++) {
        be->free(G->dev, G->in[i].data);
        be->free(G->dev, G->in_grad[i].data);
    }
    for (int j = 0; j < BT_MAX_PARAMS; j++) {
        be->free(G->dev, G->param[j].data);
        be->free(G->dev, G->param_grad[j].data);
    }
    be->free(G->dev, G->out.data);
    be->free(G->dev, G->out_grad.data);
    be->free(G->dev, G->saved);
    be->free(G->dev, G->workspace);
    memset(G, 0, sizeof *G);
}

/* Copies L's current values (inputs, parameters, output gradient, gradient pre-fills) to the
 * device; output, saved and workspace are poisoned with NaN bytes. */
static void gpu_setup(bt_device *d, const oc_layer *L, gpu_layer *G)
{
    memset(G, 0, sizeof *G);
    G->dev = d;
    for (int i = 0; i < L->n_in; i++) {
        mirror(d, &G->in[i], &L->in[i], 1);
        mirror(d, &G->in_grad[i], &L->in_grad[i], 1);
    }
    for (int j = 0; j < L->n_params; j++) {
        mirror(d, &G->param[j], &L->param[j], 1);
        mirror(d, &G->param_grad[j], &L->param_grad[j], 1);
    }
    mirror(d, &G->out, &L->out, 0);
    mirror(d, &G->out_grad, &L->out_grad, 1);
    G->saved = device_buffer(d, NULL, L->ctx.saved_per_sample * (size_t)L->batch);
    G->workspace =
        device_buffer(d, NULL, L->ctx.ws_per_sample * (size_t)L->batch + L->ctx.ws_fixed);
}

static bt_op_call gpu_call(const oc_layer *L, gpu_layer *G, int backward)
{
    bt_op_call call = {
        .batch = L->batch,
        .n_in = L->n_in,
        .in = G->in,
        .out = &G->out,
        .n_params = L->n_params,
        .param = G->param,
        .param_grad = backward ? G->param_grad : NULL,
        .out_grad = backward ? &G->out_grad : NULL,
        .in_grad = backward ? G->in_grad : NULL,
        .saved = G->saved,
        .workspace = G->workspace,
        .config = L->ctx.config,
        .seed = L->seed,
        .training = L->training,
        .threads = 1,
        .precision = precision,
    };
    return call;
}

/* Runs the op's forward or backward on the GPU and waits; BT_OK or the failure, printed. */
static bt_status gpu_run(const oc_layer *L, gpu_layer *G, int backward)
{
    bt_op_call call = gpu_call(L, G, backward);
    bt_status st = be->run_op(G->dev, L->op, backward, &call);
    if (st == BT_OK) st = be->sync(G->dev);
    if (st != BT_OK)
        printf("\n  %s %s on the GPU: %s\n", L->op->name, backward ? "backward" : "forward",
               bt_last_error());
    return st;
}

/* Compares host tensor want with its device twin; returns the number of elements off by more
 * than tol and prints the worst. */
static int compare(const char *label, const char *what, const bt_tensor *want,
                   const bt_tensor *got_dev, bt_device *d, double tol)
{
    const int64_t n = bt_tensor_numel(want);
    const size_t bytes = tensor_bytes(want);
    bt_tensor got = *want;
    got.data = malloc(bytes ? bytes : 1);
    if (!got.data) return -1;
    if (be->to_host(d, got.data, got_dev->data, bytes) != BT_OK) {
        printf("\n  %s %s: to_host: %s\n", label, what, bt_last_error());
        free(got.data);
        return -1;
    }
    int bad = 0;
    double worst = 0;
    int64_t at = -1;
    for (int64_t e = 0; e < n; e++) {
        const double w = oc_get(want, e), g = oc_get(&got, e);
        const double err = fabs(g - w) / fmax(1.0, fabs(w));
        if (!(err <= tol)) bad++;
        if (!(err <= worst)) {
            worst = err;
            at = e;
        }
    }
    if (bad)
        printf("\n  %s %s: %d of %lld elements off; worst element %lld: gpu %.10g cpu %.10g\n",
               label, what, bad, (long long)n, (long long)at, oc_get(&got, at),
               oc_get(want, at));
    free(got.data);
    return bad;
}

/* Compares bytes of host memory want with device memory got exactly. */
static int compare_bytes(const char *label, const char *what, const void *want,
                         const void *got_dev, size_t bytes, bt_device *d)
{
    unsigned char *got = malloc(bytes ? bytes : 1);
    if (!got) return -1;
    int bad = be->to_host(d, got, got_dev, bytes) != BT_OK || memcmp(got, want, bytes) != 0;
    if (bad) printf("\n  %s %s: differs from the CPU's\n", label, what);
    free(got);
    return bad;
}

/* ---- op cases ------------------------------------------------------------------------------- */

/* Which gradients a run asks for. */
enum { WANT_ALL = 0, NO_INPUT_GRAD = 1, NO_PARAM_GRADS = 2 };

/* Sets up L for case c (float type real), fills its index inputs and pre-fills its gradients;
 * drops the gradients `want` excludes. 0 on success. */
static int setup_case(oc_layer *L, const op_case *c, bt_dtype real, int want)
{
    if (!c) return -1;
    bt_status st = oc_setup(L, c->op, c->args, c->n_in, c->shape, c->dtype, c->batch, real);
    if (st != BT_OK) {
        printf("\n  %s: setup failed: %s\n", c->label, bt_last_error());
        return -1;
    }
    for (int i = 0; i < c->n_in; i++)
        if (c->dtype[i] == I) oc_fill(L, &L->in[i], 0, c->index_range);
    for (int i = 0; i < L->n_in; i++) {
        if (!L->in_grad[i].data) continue;
        if (want & NO_INPUT_GRAD) {
            free(L->in_grad[i].data);
            L->in_grad[i].data = NULL;
        } else {
            oc_fill(L, &L->in_grad[i], -1, 1);
        }
    }
    for (int j = 0; j < L->n_params; j++) {
        if (want & NO_PARAM_GRADS) {
            free(L->param_grad[j].data);
            L->param_grad[j].data = NULL;
        } else {
            oc_fill(L, &L->param_grad[j], -1, 1);
        }
    }
    return 0;
}

/* Runs case c on device d against the CPU; returns the number of mismatching elements (or -1). */
static int check_case(const op_case *c, bt_dtype real, int want, int training, bt_device *d)
{
    oc_layer L;
    gpu_layer G;
    char label[160];
    int bad = 0;
    const double tol = real == BT_F32 ? TOL_F32 : TOL_F64;
    snprintf(label, sizeof label, "%s [%s%s%s%s]", c->label, bt_dtype_name(real),
             want & NO_INPUT_GRAD ? ", no input grad" : "",
             want & NO_PARAM_GRADS ? ", no param grads" : "", training ? "" : ", inference");
    if (setup_case(&L, c, real, want)) return -1;
    L.training = training;
    if (precision != BT_F32) { /* the executor's guarantee: every float operand is rounded */
        if (real != BT_F32) {
            oc_free(&L);
            return 0;
        }
        for (int i = 0; i < L.n_in; i++)
            if (L.in[i].dtype == BT_F32)
                bt_round_array(precision, L.in[i].data, (size_t)bt_tensor_numel(&L.in[i]));
        for (int j = 0; j < L.n_params; j++)
            bt_round_array(precision, L.param[j].data, (size_t)bt_tensor_numel(&L.param[j]));
        bt_round_array(precision, L.out_grad.data, (size_t)bt_tensor_numel(&L.out_grad));
        snprintf(label + strlen(label), sizeof label - strlen(label), " precision %s",
                 bt_dtype_name(precision));
    }
    gpu_setup(d, &L, &G);
    if (oc_forward(&L) != BT_OK || oc_backward(&L) != BT_OK) {
        printf("\n  %s: CPU kernel failed: %s\n", label, bt_last_error());
        bad = -1;
        goto done;
    }
    if (gpu_run(&L, &G, 0) != BT_OK) {
        bad = -1;
        goto done;
    }
    bad += compare(label, "output", &L.out, &G.out, d, tol);
    if (strcmp(c->op, "dropout") == 0 && training)
        bad += compare_bytes(label, "mask", L.saved, G.saved, L.ctx.saved_per_sample * L.batch, d);
    if (strcmp(c->op, "maxpool2d") == 0)
        bad += compare_bytes(label, "argmax", L.saved, G.saved, L.ctx.saved_per_sample * L.batch,
                             d);
    if (gpu_run(&L, &G, 1) != BT_OK) {
        bad = -1;
        goto done;
    }
    for (int i = 0; i < L.n_in; i++)
        if (L.in_grad[i].data) {
            char what[32];
            snprintf(what, sizeof what, "input %d gradient", i);
            bad += compare(label, what, &L.in_grad[i], &G.in_grad[i], d, tol);
        }
    for (int j = 0; j < L.n_params; j++)
        if (L.param_grad[j].data) {
            char what[32];
            snprintf(what, sizeof what, "param %d gradient", j);
            bad += compare(label, what, &L.param_grad[j], &G.param_grad[j], d, tol);
        }
done:
    gpu_free(&G);
    oc_free(&L);
    return bad;
}

static void run_cases(const char *op_prefix, bt_device *d, int want, int training)
{
    static const bt_dtype reals[] = {BT_F32, BT_F64};
    for (int k = 0; k < op_cases_count; k++) {
        if (op_prefix && strncmp(op_cases[k].op, op_prefix, strlen(op_prefix)) != 0) continue;
        for (int r = 0; r < 2; r++)
            CU_ASSERT_EQUAL(check_case(&op_cases[k], reals[r], want, training, d), 0);
    }
}

static void test_every_op(void) { run_cases(NULL, gpu, WANT_ALL, 1); }

static void test_partial_backwards(void)
{
    static const char *ops[] = {"linear", "conv2d", "layernorm", "softmax", "mul", "mse"};
    for (int k = 0; k < (int)(sizeof ops / sizeof ops[0]); k++) {
        run_cases(ops[k], gpu, NO_INPUT_GRAD, 1);
        run_cases(ops[k], gpu, NO_PARAM_GRADS, 1);
    }
}

static void test_dropout_inference(void) { run_cases("dropout", gpu, WANT_ALL, 0); }

static void test_conv_paths(void)
{
    const int64_t before = bt_cuda_device_exec(gpu)->cudnn_convs;
    run_cases("conv2d", gpu, WANT_ALL, 1);
    run_cases("conv2d", gpu_gemm, WANT_ALL, 1);
    const int64_t used = bt_cuda_device_exec(gpu)->cudnn_convs - before;
    printf("\n  conv2d calls through cuDNN: %lld (GEMM-path device: %lld)\n", (long long)used,
           (long long)bt_cuda_device_exec(gpu_gemm)->cudnn_convs);
    CU_ASSERT_EQUAL(bt_cuda_device_exec(gpu_gemm)->cudnn_convs, 0);
#ifdef BATON_HAVE_CUDNN
    CU_ASSERT(used > 0);
    /* plans are made once per call shape: running every case again makes none */
    const int64_t plans = bt_cudnn_plans_made(bt_cuda_device_exec(gpu));
    run_cases("conv2d", gpu, WANT_ALL, 1);
    CU_ASSERT(plans > 0);
    CU_ASSERT_EQUAL(bt_cudnn_plans_made(bt_cuda_device_exec(gpu)), plans);
#endif
}

/* ---- data errors ---------------------------------------------------------------------------- */

static void test_data_errors(void)
{
    oc_layer L;
    gpu_layer G;
    /* embedding index 9 in a table of 5 */
    CU_ASSERT_EQUAL_FATAL(setup_case(&L, op_case_named("embedding"), BT_F32, WANT_ALL), 0);
    oc_set(&L.in[0], 5, 9);
    gpu_setup(gpu, &L, &G);
    bt_op_call call = gpu_call(&L, &G, 0);
    CU_ASSERT_EQUAL(be->run_op(gpu, L.op, 0, &call), BT_OK); /* queued; found on the device */
    CU_ASSERT_EQUAL(be->sync(gpu), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "embedding: index 9 at position 5"));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "vocabulary of 5"));
    CU_ASSERT_EQUAL(be->sync(gpu), BT_OK); /* reported once, then cleared */
    gpu_free(&G);
    oc_free(&L);
    /* a negative label, found by the next copy to the host */
    CU_ASSERT_EQUAL_FATAL(setup_case(&L, op_case_named("cross_entropy"), BT_F64, WANT_ALL), 0);
    oc_set(&L.in[1], 2, -1);
    gpu_setup(gpu, &L, &G);
    call = gpu_call(&L, &G, 0);
    CU_ASSERT_EQUAL(be->run_op(gpu, L.op, 0, &call), BT_OK);
    double loss[4];
    CU_ASSERT_EQUAL(be->to_host(gpu, loss, G.out.data, sizeof loss), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "cross_entropy: label -1 at position 2"));
    CU_ASSERT_EQUAL(be->sync(gpu), BT_OK);
    gpu_free(&G);
    oc_free(&L);
}

static bt_status cpu_only_kernel(const bt_op_call *call) { return BT_OK; }

static void test_op_without_cuda(void)
{
    const bt_op_def def = {.name = "test.cpu_only", .min_inputs = 1, .max_inputs = 1,
                           .cpu_forward = cpu_only_kernel, .cpu_backward = cpu_only_kernel};
    bt_op_call call = {.batch = 1};
    CU_ASSERT_EQUAL(be->run_op(gpu, &def, 0, &call), BT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "op 'test.cpu_only' has no CUDA"));
    CU_ASSERT_EQUAL(be->run_op(gpu, &def, 1, &call), BT_ERR_UNSUPPORTED);
}

/* ---- backend entries ------------------------------------------------------------------------ */

static void test_memory(void)
{
    enum { N = 1001 };
    float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f - 7;
    void *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(be->alloc(gpu, sizeof host, &a), BT_OK);
    CU_ASSERT_EQUAL_FATAL(be->alloc(gpu, sizeof host, &b), BT_OK);
    CU_ASSERT_EQUAL(be->from_host(gpu, a, host, sizeof host), BT_OK);
    CU_ASSERT_EQUAL(be->copy(gpu, b, a, sizeof host), BT_OK);
    CU_ASSERT_EQUAL(be->to_host(gpu, back, b, sizeof back), BT_OK);
    CU_ASSERT_EQUAL(memcmp(back, host, sizeof host), 0);
    CU_ASSERT_EQUAL(be->zero(gpu, b, 10 * sizeof(float)), BT_OK);
    CU_ASSERT_EQUAL(be->to_host(gpu, back, b, sizeof back), BT_OK);
    CU_ASSERT(back[0] == 0 && back[9] == 0 && back[10] == host[10]);
    be->free(gpu, a);
    be->free(gpu, b);
    be->free(gpu, NULL);
    /* an impossible allocation fails cleanly and says how much is free */
    void *huge = (void *)&huge;
    CU_ASSERT_EQUAL(be->alloc(gpu, (size_t)1 << 50, &huge), BT_ERR_NOMEM);
    CU_ASSERT_PTR_NULL(huge);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "free of"));
    /* and leaves the device usable */
    CU_ASSERT_EQUAL(be->alloc(gpu, 64, &a), BT_OK);
    CU_ASSERT_EQUAL(be->sync(gpu), BT_OK);
    be->free(gpu, a);
}

static void test_accumulate_and_sum_squares(void)
{
    enum { N = 1000003 };
    static const bt_dtype dts[] = {BT_F32, BT_F64};
    for (int k = 0; k < 2; k++) {
        const bt_dtype dt = dts[k];
        const size_t es = bt_dtype_size(dt);
        unsigned char *x = malloc(N * es), *y = malloc(N * es), *back = malloc(N * es);
        CU_ASSERT_FATAL(x && y && back);
        for (int i = 0; i < N; i++) {
            const double xv = sin(i * 0.37) * 3, yv = cos(i * 0.11);
            if (dt == BT_F32) {
                ((float *)x)[i] = (float)xv;
                ((float *)y)[i] = (float)yv;
            } else {
                ((double *)x)[i] = xv;
                ((double *)y)[i] = yv;
            }
        }
        void *dx = device_buffer(gpu, x, N * es), *dy = device_buffer(gpu, y, N * es);
        CU_ASSERT_EQUAL(be->accumulate(gpu, dt, dy, dx, N), BT_OK);
        CU_ASSERT_EQUAL(be->to_host(gpu, back, dy, N * es), BT_OK);
        int bad = 0;
        for (int i = 0; i < N; i++) {
            if (dt == BT_F32)
                bad += ((float *)back)[i] != ((float *)y)[i] + ((float *)x)[i];
            else
                bad += ((double *)back)[i] != ((double *)y)[i] + ((double *)x)[i];
        }
        CU_ASSERT_EQUAL(bad, 0);
        double got = -1;
        const void *arrays[2] = {dx, dy};
        size_t counts[2] = {N, 0};
        CU_ASSERT_EQUAL(be->sum_squares(gpu, dt, arrays, counts, 1, &got), BT_OK);
        const double want = dt == BT_F32 ? bt_optim_sumsq_f32((const float *)x, N)
                                         : bt_optim_sumsq_f64((const double *)x, N);
        CU_ASSERT(fabs(got - want) <= 1e-10 * want);
        CU_ASSERT_EQUAL(be->sum_squares(gpu, dt, arrays, counts + 1, 1, &got), BT_OK);
        CU_ASSERT_EQUAL(got, 0);
        /* several arrays in one call: their sums add (dy now holds x + y) */
        counts[1] = N;
        const double want_y = dt == BT_F32 ? bt_optim_sumsq_f32((const float *)back, N)
                                           : bt_optim_sumsq_f64((const double *)back, N);
        CU_ASSERT_EQUAL(be->sum_squares(gpu, dt, arrays, counts, 2, &got), BT_OK);
        CU_ASSERT(fabs(got - (want + want_y)) <= 1e-10 * (want + want_y));
        be->free(gpu, dx);
        be->free(gpu, dy);
        free(x);
        free(y);
        free(back);
    }
}

/* max over i of |a - b| / max(1, |b|) for n values of dt */
static double max_err(bt_dtype dt, const void *a, const void *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = dt == BT_F32 ? ((const float *)a)[i] : ((const double *)a)[i];
        const double y = dt == BT_F32 ? ((const float *)b)[i] : ((const double *)b)[i];
        const double e = fabs(x - y) / fmax(1.0, fabs(y));
        worst = e > worst || e != e ? e : worst;
    }
    return worst;
}

static void test_optimizers(void)
{
    enum { N = 4099 };
    bt_optimizer_config cfgs[5];
    memset(cfgs, 0, sizeof cfgs);
    cfgs[0] = (bt_optimizer_config){.kind = BT_OPT_SGD, .lr = 0.1, .weight_decay = 0.01};
    cfgs[1] = (bt_optimizer_config){.kind = BT_OPT_SGD, .lr = 0.05, .momentum = 0.9};
    cfgs[2] = (bt_optimizer_config){.kind = BT_OPT_SGD, .lr = 0.05, .weight_decay = 0.001,
                                    .momentum = 0.8, .nesterov = 1};
    cfgs[3] = (bt_optimizer_config){.kind = BT_OPT_ADAMW, .lr = 1e-3, .weight_decay = 0.01,
                                    .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    cfgs[4] = (bt_optimizer_config){.kind = BT_OPT_ADAMW, .lr = 3e-2, .beta1 = 0.5, .beta2 = 0.9,
                                    .eps = 1e-6};
    static const bt_dtype dts[] = {BT_F32, BT_F64};
    for (int c = 0; c < 5; c++)
        for (int k = 0; k < 2; k++) {
            const bt_optimizer_config *cfg = &cfgs[c];
            const bt_dtype dt = dts[k];
            const size_t es = bt_dtype_size(dt), bytes = N * es;
            const double tol = dt == BT_F32 ? 1e-5 : 1e-12;
            const int ns = bt_optim_state_count(cfg);
            CU_ASSERT_EQUAL_FATAL(bt_optim_validate(cfg), BT_OK);
            void *w = calloc(N, es), *g = calloc(N, es), *back = calloc(N, es);
            void *state[BT_OPTIM_MAX_STATE] = {0}, *dstate[BT_OPTIM_MAX_STATE] = {0};
            for (int s = 0; s < ns; s++) state[s] = calloc(N, es);
            void *dw = NULL, *dg = NULL;
            int bad = 0;
            for (int step = 1; step <= 3; step++) {
                for (int i = 0; i < N; i++) {
                    const double wv = sin(i * 0.7) * 0.5, gv = cos(i * 1.3 + step) * 0.2;
                    if (dt == BT_F32) {
                        if (step == 1) ((float *)w)[i] = (float)wv;
                        ((float *)g)[i] = (float)gv;
                    } else {
                        if (step == 1) ((double *)w)[i] = wv;
                        ((double *)g)[i] = gv;
                    }
                }
                if (step == 1) {
                    dw = device_buffer(gpu, w, bytes);
                    dg = device_buffer(gpu, g, bytes);
                    for (int s = 0; s < ns; s++) dstate[s] = device_buffer(gpu, state[s], bytes);
                } else {
                    CU_ASSERT_EQUAL(be->from_host(gpu, dg, g, bytes), BT_OK);
                }
                CU_ASSERT_EQUAL(bt_optim_update(cfg, dt, w, g, state, N, cfg->lr, step, 0.5),
                                BT_OK);
                CU_ASSERT_EQUAL(be->optimizer_update(gpu, cfg, dt, dw, dg, dstate, N, cfg->lr,
                                                     step, 0.5),
                                BT_OK);
                CU_ASSERT_EQUAL(be->to_host(gpu, back, dw, bytes), BT_OK);
                double e = max_err(dt, back, w, N);
                for (int s = 0; s < ns; s++) {
                    void *sb = calloc(N, es);
                    CU_ASSERT_EQUAL(be->to_host(gpu, sb, dstate[s], bytes), BT_OK);
                    const double es_err = max_err(dt, sb, state[s], N);
                    e = es_err > e ? es_err : e;
                    free(sb);
                }
                if (!(e <= tol)) {
                    printf("\n  optimizer %d (%s) %s step %d: max error %g\n", c,
                           cfg->kind == BT_OPT_SGD ? "sgd" : "adamw", bt_dtype_name(dt), step, e);
                    bad++;
                }
            }
            CU_ASSERT_EQUAL(bad, 0);
            be->free(gpu, dw);
            be->free(gpu, dg);
            for (int s = 0; s < ns; s++) {
                be->free(gpu, dstate[s]);
                free(state[s]);
            }
            free(w);
            free(g);
            free(back);
        }
    /* a missing state array is an error, not a crash */
    void *none[2] = {NULL, NULL};
    CU_ASSERT_EQUAL(be->optimizer_update(gpu, &cfgs[3], BT_F32, none[0], none[0], none, 10, 0.1,
                                         1, 1.0),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(be->optimizer_update(gpu, &cfgs[3], BT_I32, NULL, NULL, none, 10, 0.1, 1,
                                         1.0),
                    BT_ERR_UNSUPPORTED);
}

/* No usable GPU: a skip (77), or a failure (1) where BT_REQUIRE_GPU is set to anything but "" or
 * "0" (scripts/gpu-check.sh sets it: on a GPU machine a broken driver must not pass as a skip). */
static int no_gpu(const char *test, cudaError_t err)
{
    const char *req = getenv("BT_REQUIRE_GPU");
    const int required = req && *req && strcmp(req, "0") != 0;
    printf("%s: %s: no usable GPU (cudaGetDeviceCount: %s)%s\n", test,
           required ? "FAILED" : "SKIPPED",
           err != cudaSuccess ? cudaGetErrorString(err) : "0 devices",
           required ? "; BT_REQUIRE_GPU is set, so a GPU must be here" : "");
    return required ? 1 : BT_TEST_SKIP;
}

/* 1 when the device tensors a and b hold the same bytes (n bytes). */
static int same_device_bytes(bt_device *d, const void *a, const void *b, size_t n)
{
    unsigned char *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
    int same = x && y && be->to_host(d, x, a, n) == BT_OK && be->to_host(d, y, b, n) == BT_OK &&
               memcmp(x, y, n) == 0;
    free(x);
    free(y);
    return same;
}

/* Runs case `label` (f32) twice on the GPU from the same values; the outputs and every gradient
 * must be the same bits. */
static void check_repeatable(const char *label)
{
    oc_layer L;
    gpu_layer A, B;
    CU_ASSERT_EQUAL_FATAL(setup_case(&L, op_case_named(label), BT_F32, WANT_ALL), 0);
    gpu_setup(gpu, &L, &A);
    gpu_setup(gpu, &L, &B);
    CU_ASSERT_EQUAL(gpu_run(&L, &A, 0), BT_OK);
    CU_ASSERT_EQUAL(gpu_run(&L, &A, 1), BT_OK);
    CU_ASSERT_EQUAL(gpu_run(&L, &B, 0), BT_OK);
    CU_ASSERT_EQUAL(gpu_run(&L, &B, 1), BT_OK);
    int same = same_device_bytes(gpu, A.out.data, B.out.data, tensor_bytes(&L.out));
    for (int i = 0; i < L.n_in; i++)
        if (L.in_grad[i].data)
            same &= same_device_bytes(gpu, A.in_grad[i].data, B.in_grad[i].data,
                                      tensor_bytes(&L.in_grad[i]));
    for (int j = 0; j < L.n_params; j++)
        same &= same_device_bytes(gpu, A.param_grad[j].data, B.param_grad[j].data,
                                  tensor_bytes(&L.param_grad[j]));
    if (!same) printf("\n  %s: two runs differ\n", label);
    CU_ASSERT(same);
    gpu_free(&A);
    gpu_free(&B);
    oc_free(&L);
}

/* The reductions that used atomics give the same bits on every run (under the emulator, with
 * blocks in any order): sum_squares, and linear's bias gradient (column sums over 5000 rows). */
static void test_deterministic_reductions(void)
{
    enum { N = 300007, ROWS = 5000, COLS = 37 };
    float *x = malloc(N * sizeof(float)), *dy = malloc(ROWS * COLS * sizeof(float));
    CU_ASSERT_FATAL(x && dy);
    for (int i = 0; i < N; i++) x[i] = (float)(sin(i * 0.37) * 1e3 + 1e-3 * cos(i * 1.1));
    for (int i = 0; i < ROWS * COLS; i++) dy[i] = (float)(cos(i * 0.13) * 1e4 + 1e-2 * sin(i * 0.7));
    void *dx = device_buffer(gpu, x, N * sizeof(float));
    void *ddy = device_buffer(gpu, dy, ROWS * COLS * sizeof(float));
    void *db = device_buffer(gpu, NULL, COLS * sizeof(float));
    const void *arrays[1] = {dx};
    size_t counts[1] = {N};
    double first = 0, again = 0;
    float b0[COLS], b1[COLS];
    for (int round = 0; round < 4; round++) {
        CU_ASSERT_EQUAL(be->sum_squares(gpu, BT_F32, arrays, counts, 1, round ? &again : &first),
                        BT_OK);
        if (round) CU_ASSERT(memcmp(&first, &again, sizeof first) == 0);
        CU_ASSERT_EQUAL(be->zero(gpu, db, sizeof b0), BT_OK);
        CU_ASSERT_EQUAL(bt_k_colsum_acc(bt_cuda_device_exec(gpu)->stream, BT_F32, ddy, db, ROWS,
                                        COLS),
                        cudaSuccess);
        CU_ASSERT_EQUAL(be->to_host(gpu, round ? b1 : b0, db, sizeof b0), BT_OK);
        if (round) CU_ASSERT(memcmp(b0, b1, sizeof b0) == 0);
    }
    be->free(gpu, dx);
    be->free(gpu, ddy);
    be->free(gpu, db);
    free(x);
    free(dy);
    /* and the ops whose kernels used atomics: every output and gradient, twice */
    static const char *cases[] = {"linear many rows", "embedding repeats",
                                  "layernorm d=777 600 rows", "cross_entropy C=1000",
                                  "cross_entropy [T, C]"};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) check_repeatable(cases[k]);
    /* embedding's weight gradient adds in the CPU's order: the same bits as the CPU */
    oc_layer L;
    gpu_layer G;
    CU_ASSERT_EQUAL_FATAL(setup_case(&L, op_case_named("embedding repeats"), BT_F32, WANT_ALL), 0);
    gpu_setup(gpu, &L, &G);
    CU_ASSERT_EQUAL(oc_forward(&L), BT_OK);
    CU_ASSERT_EQUAL(oc_backward(&L), BT_OK);
    CU_ASSERT_EQUAL(gpu_run(&L, &G, 0), BT_OK);
    CU_ASSERT_EQUAL(gpu_run(&L, &G, 1), BT_OK);
    CU_ASSERT_EQUAL(compare("embedding repeats", "exact weight gradient", &L.param_grad[0],
                            &G.param_grad[0], gpu, 0.0),
                    0);
    gpu_free(&G);
    oc_free(&L);
}

static void test_gemm_precisions(void)
{
    static const bt_dtype precs[] = {BT_BF16, BT_F16};
    for (int k = 0; k < 2; k++) {
        precision = precs[k];
        run_cases("linear", gpu, WANT_ALL, 1);
        run_cases("conv2d", gpu, WANT_ALL, 1);
        run_cases("conv2d", gpu_gemm, WANT_ALL, 1);
    }
    precision = BT_F32;
}

/* ---- decoding: one position with the sequence's cache (op->cuda_decode) ---------------------- */

static double rel_err(bt_dtype dt, const void *got, const void *want, size_t i)
{
    const double a = dt == BT_F64 ? ((const double *)got)[i] : ((const float *)got)[i];
    const double b = dt == BT_F64 ? ((const double *)want)[i] : ((const float *)want)[i];
    return fabs(a - b) / fmax(1.0, fabs(b));
}

/* attention's CUDA decode against the CPU's decode entry, position by position through a whole
 * context of T rows (T = 9 and 131: no multiple of the CPU tile, 4, nor of the kernel's chunk of
 * 128 keys), and both against the row of the CPU forward over the whole causal window: rows within
 * TOL, the KV caches (kv_heads heads) equal bit for bit (appending copies values). Grouped-query
 * and multi-query heads and windows shorter than T (also shorter than a chunk, and longer). Non-
 * causal: both refuse, with the same words (a query would see keys not generated yet). */
static void check_attention_decode(bt_dtype dt, int64_t T, int64_t heads, int64_t kv_heads, int64_t hd,
                                   int64_t window)
{
    const bt_op_def *op = bt_op_find("attention");
    CU_ASSERT_FATAL(op && op->cpu_decode && op->cuda_decode && op->decode_cache_bytes);
    const int64_t C = heads * hd, kvw = kv_heads * hd, W = C + 2 * kvw;
    bt_attention_config cf = {.t = T, .c = C, .heads = heads, .hd = hd, .block = 4, .causal = 1,
                              .kv_heads = kv_heads, .ld = W, .window = window};
    cf.scale = 1.0 / sqrt((double)hd);
    const size_t es = bt_dtype_size(dt), row_in = (size_t)W * es, row_out = (size_t)C * es;
    const size_t cache_bytes = op->decode_cache_bytes(&cf);
    CU_ASSERT_EQUAL(cache_bytes, (size_t)(2 * T * kvw) * sizeof(double));
    unsigned char *x = malloc((size_t)T * row_in), *fwd = malloc((size_t)T * row_out);
    unsigned char *cpu_row = malloc(row_out), *gpu_row = malloc(row_out);
    unsigned char *cpu_cache = calloc(1, cache_bytes), *gpu_cache_back = malloc(cache_bytes);
    void *ws = malloc(bt_attention_workspace_bytes(&cf)), *lse = malloc((size_t)(heads * T) * sizeof(double));
    CU_ASSERT_FATAL(x && fwd && cpu_row && gpu_row && cpu_cache && gpu_cache_back && ws && lse);
    unsigned seed = (unsigned)(T * 31 + heads + 7 * kv_heads + 3 * window);
    for (int64_t i = 0; i < T * W; i++) {
        seed = seed * 1103515245u + 12345u;
        const double v = ((double)((seed >> 8) & 0xffff) / 32768.0 - 1.0) * 2.0; /* [-2, 2) */
        if (dt == BT_F64) ((double *)x)[i] = v;
        else ((float *)x)[i] = (float)v;
    }
    /* the reference: the CPU forward over the whole window */
    bt_tensor tin = {.data = x, .dtype = dt, .ndim = 3, .dim = {1, T, W}};
    bt_tensor tout = {.data = fwd, .dtype = dt, .ndim = 3, .dim = {1, T, C}};
    bt_op_call full = {.batch = 1, .n_in = 1, .in = &tin, .out = &tout, .config = &cf, .saved = lse,
                       .workspace = ws, .threads = 1};
    CU_ASSERT_FATAL(op->cpu_forward(&full) == BT_OK);
    void *d_x = device_buffer(gpu, NULL, row_in), *d_y = device_buffer(gpu, NULL, row_out);
    void *d_cache = device_buffer(gpu, NULL, cache_bytes);
    CU_ASSERT_FATAL(d_x && d_y && d_cache);
    CU_ASSERT_FATAL(be->zero(gpu, d_cache, cache_bytes) == BT_OK);
    double worst_gpu = 0, worst_fwd = 0;
    for (int64_t p = 0; p < T; p++) {
        bt_tensor ci = {.data = x + (size_t)p * row_in, .dtype = dt, .ndim = 3, .dim = {1, 1, W}};
        bt_tensor co = {.data = cpu_row, .dtype = dt, .ndim = 3, .dim = {1, 1, C}};
        bt_op_call cc = {.batch = 1, .n_in = 1, .in = &ci, .out = &co, .config = &cf, .position = p,
                         .cache = cpu_cache, .threads = 1};
        CU_ASSERT_FATAL(op->cpu_decode(&cc) == BT_OK);
        CU_ASSERT_FATAL(be->from_host(gpu, d_x, ci.data, row_in) == BT_OK);
        bt_tensor gi = ci, go = co;
        gi.data = d_x;
        go.data = d_y;
        bt_op_call gc = {.batch = 1, .n_in = 1, .in = &gi, .out = &go, .config = &cf, .position = p,
                         .cache = d_cache};
        bt_status st = be->run_op(gpu, op, BT_RUN_DECODE, &gc);
        if (st != BT_OK) printf("\n  decode: %s\n", bt_last_error());
        CU_ASSERT_FATAL(st == BT_OK);
        CU_ASSERT_FATAL(be->to_host(gpu, gpu_row, d_y, row_out) == BT_OK);
        for (int64_t c = 0; c < C; c++) {
            worst_gpu = fmax(worst_gpu, rel_err(dt, gpu_row, cpu_row, (size_t)c));
            worst_fwd = fmax(worst_fwd, rel_err(dt, cpu_row, fwd + (size_t)p * row_out, (size_t)c));
        }
    }
    const double tol = dt == BT_F64 ? TOL_F64 : TOL_F32;
    printf("\n  attention decode %s, T %lld, %lld heads (%lld kv) of %lld, window %lld: GPU vs CPU decode "
           "%.3g, CPU decode vs forward %.3g",
           bt_dtype_name(dt), (long long)T, (long long)heads, (long long)kv_heads, (long long)hd,
           (long long)window, worst_gpu, worst_fwd);
    CU_ASSERT(worst_gpu <= tol);
    CU_ASSERT(worst_fwd <= tol);
    CU_ASSERT_FATAL(be->to_host(gpu, gpu_cache_back, d_cache, cache_bytes) == BT_OK);
    CU_ASSERT(memcmp(gpu_cache_back, cpu_cache, (size_t)(2 * T * kvw) * es) == 0);
    /* a position outside the context, and non-causal attention: refused alike */
    bt_tensor gi = {.data = d_x, .dtype = dt, .ndim = 3, .dim = {1, 1, W}};
    bt_tensor go = {.data = d_y, .dtype = dt, .ndim = 3, .dim = {1, 1, C}};
    bt_op_call gc = {.batch = 1, .n_in = 1, .in = &gi, .out = &go, .config = &cf, .position = T, .cache = d_cache};
    CU_ASSERT(be->run_op(gpu, op, BT_RUN_DECODE, &gc) == BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "is outside the context of"));
    cf.causal = 0;
    gc.position = 0;
    CU_ASSERT(be->run_op(gpu, op, BT_RUN_DECODE, &gc) == BT_ERR_UNSUPPORTED);
    char gpu_msg[256];
    snprintf(gpu_msg, sizeof gpu_msg, "%s", bt_last_error());
    bt_tensor ci = {.data = x, .dtype = dt, .ndim = 3, .dim = {1, 1, W}};
    bt_tensor co = {.data = cpu_row, .dtype = dt, .ndim = 3, .dim = {1, 1, C}};
    bt_op_call cc = {.batch = 1, .n_in = 1, .in = &ci, .out = &co, .config = &cf, .cache = cpu_cache};
    CU_ASSERT(op->cpu_decode(&cc) == BT_ERR_UNSUPPORTED);
    CU_ASSERT_STRING_EQUAL(gpu_msg, bt_last_error());
    be->free(gpu, d_x);
    be->free(gpu, d_y);
    be->free(gpu, d_cache);
    free(x), free(fwd), free(cpu_row), free(gpu_row), free(cpu_cache), free(gpu_cache_back), free(ws), free(lse);
}

/* rope's CUDA decode: the row at each position equals the CPU decode's (within TOL: cos and sin
 * of the device's libm), and the CPU forward's row at that position; a negative position refused
 * alike. */
static void check_rope_decode(bt_dtype dt)
{
    oc_layer L;
    const op_case *c = op_case_named("rope llama3");
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT_FATAL(oc_setup(&L, c->op, c->args, c->n_in, c->shape, c->dtype, 1, dt) == BT_OK);
    CU_ASSERT_FATAL(L.op->cpu_decode && L.op->cuda_decode);
    CU_ASSERT_FATAL(oc_forward(&L) == BT_OK);
    const int64_t T = L.in[0].dim[1], w = L.in[0].dim[2];
    const size_t es = bt_dtype_size(dt), row = (size_t)w * es;
    unsigned char *cpu_row = malloc(row), *gpu_row = malloc(row);
    void *d_x = device_buffer(gpu, NULL, row), *d_y = device_buffer(gpu, NULL, row);
    void *d_ws = device_buffer(gpu, NULL, L.ctx.ws_fixed);
    CU_ASSERT_FATAL(cpu_row && gpu_row && d_x && d_y && d_ws);
    const double tol = dt == BT_F64 ? TOL_F64 : TOL_F32;
    double worst_gpu = 0, worst_fwd = 0;
    for (int64_t p = 0; p < T; p++) {
        bt_tensor ci = {.data = (char *)L.in[0].data + (size_t)p * row, .dtype = dt, .ndim = 3, .dim = {1, 1, w}};
        bt_tensor co = {.data = cpu_row, .dtype = dt, .ndim = 3, .dim = {1, 1, w}};
        bt_op_call cc = {.batch = 1, .n_in = 1, .in = &ci, .out = &co, .workspace = L.workspace,
                         .config = L.ctx.config, .threads = 1, .position = p};
        CU_ASSERT_FATAL(L.op->cpu_decode(&cc) == BT_OK);
        CU_ASSERT_FATAL(be->from_host(gpu, d_x, ci.data, row) == BT_OK);
        bt_tensor gi = ci, go = co;
        gi.data = d_x, go.data = d_y;
        bt_op_call gc = {.batch = 1, .n_in = 1, .in = &gi, .out = &go, .workspace = d_ws,
                         .config = L.ctx.config, .position = p};
        CU_ASSERT_FATAL(be->run_op(gpu, L.op, BT_RUN_DECODE, &gc) == BT_OK);
        CU_ASSERT_FATAL(be->to_host(gpu, gpu_row, d_y, row) == BT_OK);
        for (int64_t e = 0; e < w; e++) {
            worst_gpu = fmax(worst_gpu, rel_err(dt, gpu_row, cpu_row, (size_t)e));
            worst_fwd = fmax(worst_fwd, rel_err(dt, cpu_row, (char *)L.out.data + (size_t)p * row, (size_t)e));
        }
    }
    printf("\n  rope decode %s: GPU vs CPU decode %.3g, CPU decode vs forward %.3g", bt_dtype_name(dt), worst_gpu,
           worst_fwd);
    CU_ASSERT(worst_gpu <= tol);
    CU_ASSERT(worst_fwd == 0); /* the same row function at the same position */
    bt_tensor gi = {.data = d_x, .dtype = dt, .ndim = 3, .dim = {1, 1, w}};
    bt_tensor go = {.data = d_y, .dtype = dt, .ndim = 3, .dim = {1, 1, w}};
    bt_op_call gc = {.batch = 1, .n_in = 1, .in = &gi, .out = &go, .workspace = d_ws, .config = L.ctx.config,
                     .position = -2};
    CU_ASSERT(be->run_op(gpu, L.op, BT_RUN_DECODE, &gc) == BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "rope: position -2 is negative"));
    be->free(gpu, d_x);
    be->free(gpu, d_y);
    be->free(gpu, d_ws);
    free(cpu_row), free(gpu_row);
    oc_free(&L);
}

/* pos_embedding's CUDA decode: x + weight[position], exactly the CPU decode's row; a position
 * past the table refused alike. */
static void check_pos_embedding_decode(void)
{
    const bt_op_def *op = bt_op_find("pos_embedding");
    CU_ASSERT_FATAL(op && op->cpu_decode && op->cuda_decode);
    enum { NUM = 7, CH = 37 };
    bt_pos_embedding_config cf = {.t = 5, .c = CH, .num = NUM};
    float w[NUM * CH], x[CH], want[CH], got[CH];
    for (int i = 0; i < NUM * CH; i++) w[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    for (int i = 0; i < CH; i++) x[i] = (float)i / 8.0f - 2.0f;
    void *d_w = device_buffer(gpu, w, sizeof w), *d_x = device_buffer(gpu, x, sizeof x);
    void *d_y = device_buffer(gpu, NULL, sizeof got);
    CU_ASSERT_FATAL(d_w && d_x && d_y);
    for (int64_t p = 0; p <= NUM; p++) {
        bt_tensor ci = {.data = x, .dtype = BT_F32, .ndim = 3, .dim = {1, 1, CH}}, cw = {.data = w, .dtype = BT_F32,
                        .ndim = 2, .dim = {NUM, CH}}, co = {.data = want, .dtype = BT_F32, .ndim = 3, .dim = {1, 1, CH}};
        bt_tensor gi = ci, gw = cw, go = co;
        gi.data = d_x, gw.data = d_w, go.data = d_y;
        bt_op_call cc = {.batch = 1, .n_in = 1, .in = &ci, .out = &co, .n_params = 1, .param = &cw, .config = &cf,
                         .position = p};
        bt_op_call gc = {.batch = 1, .n_in = 1, .in = &gi, .out = &go, .n_params = 1, .param = &gw, .config = &cf,
                         .position = p};
        const bt_status cs = op->cpu_decode(&cc), gs = be->run_op(gpu, op, BT_RUN_DECODE, &gc);
        CU_ASSERT_EQUAL(cs, gs);
        if (p == NUM) {
            CU_ASSERT_EQUAL(gs, BT_ERR_INVALID_ARG);
            CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "position 7 is outside the table of 7"));
            continue;
        }
        CU_ASSERT_FATAL(be->to_host(gpu, got, d_y, sizeof got) == BT_OK);
        CU_ASSERT(memcmp(got, want, sizeof got) == 0);
    }
    be->free(gpu, d_w);
    be->free(gpu, d_x);
    be->free(gpu, d_y);
}

static void test_decode_kernels(void)
{
    static const struct {
        int64_t t, heads, kv_heads, hd, window;
    } shapes[] = {{9, 2, 2, 8, 0},   {131, 3, 3, 24, 0},  {9, 4, 2, 8, 0},   {131, 6, 2, 16, 0},
                  {131, 4, 1, 8, 0}, {9, 2, 1, 8, 3},     {131, 4, 2, 8, 40}, {300, 2, 1, 8, 200}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        check_attention_decode(BT_F32, shapes[k].t, shapes[k].heads, shapes[k].kv_heads, shapes[k].hd,
                               shapes[k].window);
        check_attention_decode(BT_F64, shapes[k].t, shapes[k].heads, shapes[k].kv_heads, shapes[k].hd,
                               shapes[k].window);
    }
    check_pos_embedding_decode();
    check_rope_decode(BT_F32);
    check_rope_decode(BT_F64);
}

static void test_cudnn_unusable(void)
{
#ifdef BATON_HAVE_CUDNN
    bt_device *d = NULL;
    setenv("BATON_CUDNN", "broken", 1);
    bt_status st = be->open(0, 1, &d);
    bt_gpu_info info;
    bt_status ist = bt_gpu_info_get(0, &info);
    unsetenv("BATON_CUDNN");
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    be->bind_thread(d);
    printf("\n  %s\n", be->describe(d));
    CU_ASSERT_PTR_NOT_NULL(strstr(be->describe(d), "cuDNN unusable (cudnnCreate: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(be->describe(d), "conv2d takes the GEMM path"));
    CU_ASSERT_EQUAL(ist, BT_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.cudnn, "cuDNN unusable"));
    CU_ASSERT_PTR_NULL(bt_cuda_device_exec(d)->cudnn);
    run_cases("conv2d", d, WANT_ALL, 1);
    CU_ASSERT_EQUAL(bt_cuda_device_exec(d)->cudnn_convs, 0);
    be->close(d);
    be->bind_thread(gpu);
    CU_ASSERT_EQUAL(bt_gpu_info_get(0, &info), BT_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(info.cudnn, "cuDNN "));
    CU_ASSERT_PTR_NULL(strstr(info.cudnn, "unusable"));
#else
    printf("\n  (no cuDNN in this build: nothing to fall back from)\n");
#endif
}

static void test_peer_access(void)
{
    int n = 0;
    CU_ASSERT_EQUAL_FATAL(cudaGetDeviceCount(&n), cudaSuccess);
    CU_ASSERT_EQUAL(be->peer_access(gpu, gpu_gemm), 2); /* two handles on one GPU */
    if (n < 2) {
        printf("\n  (one GPU: no peer pair to enable)\n");
        return;
    }
    bt_device *other = NULL;
    CU_ASSERT_EQUAL_FATAL(be->open(1, 1, &other), BT_OK);
    int can01 = 0, can10 = 0;
    CU_ASSERT_EQUAL(cudaDeviceCanAccessPeer(&can01, 0, 1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaDeviceCanAccessPeer(&can10, 1, 0), cudaSuccess);
    const int want = can01 && can10 ? 1 : 0;
    for (int round = 0; round < 3; round++) {
        CU_ASSERT_EQUAL(be->peer_access(gpu, other), want);
        CU_ASSERT_EQUAL(be->peer_access(other, gpu), want);
        CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    }
    be->close(other);
    be->bind_thread(gpu);
}

int main(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) return no_gpu("test_cuda", e);
    be = bt_backend_find("cuda");
    if (!be || be->open(0, 1, &gpu) != BT_OK) {
        printf("test_cuda: cannot open cuda:0: %s\n", bt_last_error());
        return 1;
    }
    setenv("BATON_CUDNN", "0", 1);
    bt_status st = be->open(0, 1, &gpu_gemm);
    unsetenv("BATON_CUDNN");
    if (st != BT_OK) {
        printf("test_cuda: cannot open cuda:0 without cuDNN: %s\n", bt_last_error());
        be->close(gpu);
        return 1;
    }
    be->bind_thread(gpu);
    printf("test_cuda: on %s\n", be->describe(gpu));
    static const bt_test_case tests[] = {
        {"every op: forward and backward = CPU (f32, f64)", test_every_op},
        {"partial backwards = CPU", test_partial_backwards},
        {"dropout in inference = CPU", test_dropout_inference},
        {"conv2d through cuDNN and through im2col + cuBLAS", test_conv_paths},
        {"data errors reported at the next sync", test_data_errors},
        {"op without CUDA kernels", test_op_without_cuda},
        {"decode kernels (attention's KV cache, pos_embedding, rope) = CPU decode", test_decode_kernels},
        {"alloc, zero, copy, to/from host", test_memory},
        {"accumulate and sum_squares", test_accumulate_and_sum_squares},
        {"optimizer updates = bt_optim_update", test_optimizers},
        {"sum_squares and column sums are deterministic", test_deterministic_reductions},
        {"bf16/f16 GEMM ops (linear, conv2d both paths) = CPU", test_gemm_precisions},
        {"cuDNN that cannot start: GEMM path, said so", test_cudnn_unusable},
        {"peer access enabled once, asked any number of times", test_peer_access},
        {NULL, NULL},
    };
    int rc = bt_test_main("cuda", tests);
    be->close(gpu_gemm);
    be->close(gpu);
    return rc;
}
