/* tests/test_cuda_build.c: the CUDA backend's checks that need no GPU (they pass with or without
 * one; tests/test_cuda.c has the ones that run kernels):
 *   - every built-in op has CUDA forward and backward kernels once they are attached, and opening
 *     the backend attaches them even where no GPU exists;
 *   - the op configs the CUDA kernels read (src/ops/op_configs.h, shared with the CPU kernels)
 *     hold what each shape rule stores (size and values), and the saved/workspace sizes the
 *     shape rules declare are the ones the CUDA kernels rely on;
 *   - without a GPU, open fails with BT_ERR_UNSUPPORTED or BT_ERR_BACKEND and a message naming
 *     the device and the CUDA error, leaving nothing open; with one, it opens and describes it;
 *   - a built-in CUDA kernel called outside the backend fails with a message, not a crash;
 *   - device enumeration (src/cuda/devices.h) reports "no GPU" the same way. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "bt_test.h"
#include "cuda/devices.h"
#include "ops/op_configs.h"
#include "cuda/ops_cuda.h"
#include "op_check.h"
#include "ops/ops.h"

#define SH(...)                                                             \
    {.ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
     .dim = {__VA_ARGS__}}
#define SCALAR {.ndim = 0}

/* 1 with *err set where cudaGetDeviceCount reports no usable GPU. */
static int no_gpu(cudaError_t *err)
{
    int n = 0;
    *err = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    return *err != cudaSuccess || n == 0;
}

static void test_kernels_attached(void)
{
    CU_ASSERT_EQUAL(bt_cuda_attach_kernels(), BT_OK);
    CU_ASSERT_EQUAL(bt_cuda_attach_kernels(), BT_OK); /* idempotent */
    int n = 0;
    const bt_op_def *const *builtins = bt_builtin_ops(&n);
    CU_ASSERT(n >= 18);
    for (int i = 0; i < n; i++) {
        const bt_op_def *op = bt_op_find(builtins[i]->name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(op);
        if (!op->cuda_forward || !op->cuda_backward)
            printf("\n  op '%s' has no CUDA kernels\n", op->name);
        CU_ASSERT_PTR_NOT_NULL(op->cuda_forward);
        CU_ASSERT_PTR_NOT_NULL(op->cuda_backward);
    }
}

static void test_backend_table(void)
{
    const bt_backend *be = bt_backend_find("cuda");
    CU_ASSERT_PTR_NOT_NULL_FATAL(be);
    CU_ASSERT_STRING_EQUAL(be->name, "cuda");
    CU_ASSERT(be->open && be->close && be->bind_thread && be->alloc && be->free && be->zero &&
              be->copy && be->to_host && be->from_host && be->accumulate && be->run_op &&
              be->sum_squares && be->optimizer_update && be->sync && be->describe);
    /* the executor's transfers, timing and mixed precision need all of these */
    CU_ASSERT(be->event_create && be->event_destroy && be->event_record && be->stream_wait &&
              be->event_elapsed && be->host_alloc && be->host_free && be->copy_async &&
              be->copy_peer && be->peer_access && be->round_to);
    CU_ASSERT_EQUAL(be->copies_overlap, 1);
    be->close(NULL); /* accepts NULL */
}

static void test_open(void)
{
    const bt_backend *be = bt_backend_find("cuda");
    CU_ASSERT_PTR_NOT_NULL_FATAL(be);
    cudaError_t err;
    bt_device *dev = (bt_device *)&dev; /* must be reset to NULL on failure */
    bt_clear_error();
    bt_status st = be->open(0, 1, &dev);
    if (no_gpu(&err)) {
        printf("\n  no GPU (%s): open must fail cleanly\n  message: %s\n",
               cudaGetErrorString(err), bt_last_error());
        CU_ASSERT(st == BT_ERR_UNSUPPORTED || st == BT_ERR_BACKEND);
        CU_ASSERT_PTR_NULL(dev);
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "cuda:0"));
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "GPU"));
        if (err != cudaSuccess)
            CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), cudaGetErrorString(err)));
    } else {
        CU_ASSERT_EQUAL_FATAL(st, BT_OK);
        const char *d = be->describe(dev);
        printf("\n  opened %s\n", d);
        CU_ASSERT_EQUAL(strncmp(d, "cuda:0 (", 8), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(d, ", sm_"));
        CU_ASSERT_PTR_NOT_NULL(strstr(d, " GiB)"));
        be->close(dev);
    }
    /* an index no machine has */
    dev = (bt_device *)&dev;
    st = be->open(1000, 1, &dev);
    CU_ASSERT(st == BT_ERR_INVALID_ARG || st == BT_ERR_UNSUPPORTED || st == BT_ERR_BACKEND);
    CU_ASSERT_PTR_NULL(dev);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "cuda:1000"));
    /* opening attached the kernels, GPU or not */
    CU_ASSERT_PTR_NOT_NULL(bt_op_find("linear")->cuda_forward);
}

static void test_devices(void)
{
    cudaError_t err;
    int n = -1;
    bt_status st = bt_gpu_count(&n);
    if (no_gpu(&err)) {
        CU_ASSERT_EQUAL(st, BT_ERR_UNSUPPORTED);
        CU_ASSERT_EQUAL(n, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "GPU"));
        if (err != cudaSuccess)
            CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), cudaGetErrorString(err)));
        bt_gpu_info info;
        CU_ASSERT_NOT_EQUAL(bt_gpu_info_get(0, &info), BT_OK);
        return;
    }
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    CU_ASSERT(n >= 1);
    bt_gpu_info info;
    CU_ASSERT_EQUAL_FATAL(bt_gpu_info_get(0, &info), BT_OK);
    CU_ASSERT(info.name[0] != '\0');
    CU_ASSERT(info.cc_major >= 7);
    CU_ASSERT(info.total_bytes > 0 && info.free_bytes <= info.total_bytes);
    CU_ASSERT_EQUAL(bt_gpu_info_get(n, &info), BT_ERR_INVALID_ARG);
    int can[16 * 16];
    if (n <= 16) {
        CU_ASSERT_EQUAL(bt_gpu_peer_matrix(n, can), BT_OK);
        for (int a = 0; a < n; a++) CU_ASSERT_EQUAL(can[a * n + a], 0);
    }
}

/* Runs op's shape rule on (shapes, dtypes) with args spec into L; 0 on success. */
static int setup(oc_layer *L, const char *op, const char *spec, int n_in, const bt_shape *shapes,
                 const bt_dtype *dtypes)
{
    bt_status st = oc_setup(L, op, spec, n_in, shapes, dtypes, 2, BT_F32);
    if (st != BT_OK) printf("\n  %s: setup failed: %s\n", op, bt_last_error());
    return st == BT_OK ? 0 : -1;
}

static void test_config_layouts(void)
{
    oc_layer L;
    {
        const bt_shape s[] = {SH(2, 4)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "linear", "out=3", 1, s, d), 0);
        const bt_linear_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->in == 4 && c->out == 3 && c->bias == 1);
        oc_free(&L);
        const bt_shape s1[] = {SH(5)};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "linear", "out=2 bias=false", 1, s1, d), 0);
        c = (const void *)L.ctx.config;
        CU_ASSERT(c->in == 5 && c->out == 2 && c->bias == 0);
        oc_free(&L);
    }
    {
        const bt_shape s[] = {SH(3, 5)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "softmax", "", 1, s, d), 0);
        const bt_softmax_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT_EQUAL(c->d, 5);
        oc_free(&L);
    }
    {
        const bt_shape s[] = {SH(3, 6)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "layernorm", "eps=0.001", 1, s, d), 0);
        const bt_layernorm_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->d == 6 && c->eps == 0.001);
        /* (mean, rstd) doubles per row: 3 rows per sample */
        CU_ASSERT_EQUAL(L.ctx.saved_per_sample, 3 * 2 * sizeof(double));
        oc_free(&L);
    }
    {
        const bt_shape s[] = {SH(2, 5, 6)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(
            setup(&L, "conv2d", "out=3 kernel=3,2 stride=2,1 padding=1,0", 1, s, d), 0);
        const bt_conv_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->c == 2 && c->h == 5 && c->w == 6 && c->out == 3 && c->ho == 3 && c->wo == 5);
        CU_ASSERT(c->kh == 3 && c->kw == 2 && c->sh == 2 && c->sw == 1 && c->ph == 1 &&
                  c->pw == 0 && c->bias == 1 && c->pointwise == 0);
        CU_ASSERT_EQUAL(L.ctx.ws_per_sample, 0);
        CU_ASSERT_EQUAL(L.ctx.ws_fixed, bt_conv_workspace_bytes(c));
        oc_free(&L);
        const bt_shape s1[] = {SH(3, 3, 2)};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "conv2d", "out=4 kernel=1 bias=false", 1, s1, d), 0);
        c = (const void *)L.ctx.config;
        CU_ASSERT(c->pointwise == 1 && c->bias == 0 && c->out == 4 && c->ho == 3 && c->wo == 2);
        CU_ASSERT_EQUAL(L.ctx.ws_fixed, bt_conv_workspace_bytes(c));
        CU_ASSERT_EQUAL(bt_conv_workspace_bytes(c), 0);
        oc_free(&L);
    }
    static const char *pools[] = {"maxpool2d", "avgpool2d"};
    for (int k = 0; k < 2; k++) {
        const bt_shape s[] = {SH(2, 5, 6)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, pools[k], "kernel=3 stride=2 padding=1", 1, s, d), 0);
        const bt_pool_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->c == 2 && c->h == 5 && c->w == 6 && c->ho == 3 && c->wo == 3);
        CU_ASSERT(c->kh == 3 && c->kw == 3 && c->sh == 2 && c->sw == 2 && c->ph == 1 &&
                  c->pw == 1);
        if (k == 0) /* int32 argmax per output */
            CU_ASSERT_EQUAL(L.ctx.saved_per_sample, 2 * 3 * 3 * sizeof(int32_t));
        oc_free(&L);
    }
    {
        const bt_shape s[] = {SH(4)};
        const bt_dtype d[] = {BT_I32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "embedding", "num=5 dim=3", 1, s, d), 0);
        const bt_embedding_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->num == 5 && c->dim == 3);
        oc_free(&L);
    }
    {
        const bt_shape s[] = {SH(4, 5)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "dropout", "p=0.3", 1, s, d), 0);
        const bt_dropout_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT_EQUAL(c->p, 0.3);
        CU_ASSERT_EQUAL(L.ctx.saved_per_sample, 20); /* one mask byte per element */
        oc_free(&L);
    }
    {
        const bt_shape s[] = {SH(3, 4), SH(3)};
        const bt_dtype d[] = {BT_F32, BT_I32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "cross_entropy", "", 2, s, d), 0);
        const bt_cross_entropy_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->classes == 4 && c->positions == 3);
        oc_free(&L);
    }
    {   /* grouped-query attention with a window: [T, (4 + 2 * 2) * 3] */
        const bt_shape s[] = {SH(7, 24)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "attention", "heads=4 kv_heads=2 window=3 block=4", 1, s, d), 0);
        const bt_attention_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->t == 7 && c->c == 12 && c->heads == 4 && c->kv_heads == 2 && c->hd == 3);
        CU_ASSERT(c->ld == 24 && c->window == 3 && c->block == 4 && c->causal == 1);
        CU_ASSERT_EQUAL(L.ctx.saved_per_sample, 4 * 7 * sizeof(double)); /* lse per query head */
        CU_ASSERT_EQUAL(L.ctx.ws_per_sample, 4 * 7 * sizeof(double));    /* D per query head */
        CU_ASSERT_EQUAL(L.op->decode_cache_bytes(c), 2 * 7 * 6 * sizeof(double)); /* kv heads */
        oc_free(&L);
    }
    {   /* rope with llama3 scaling on [T, (2 + 2 * 1) * 4] */
        const bt_shape s[] = {SH(5, 16)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "rope",
                                    "heads=2 kv_heads=1 theta=500000 scaling=llama3 factor=8 "
                                    "low_freq_factor=1 high_freq_factor=4 "
                                    "original_max_position_embeddings=8192",
                                    1, s, d),
                              0);
        const bt_rope_config *c = (const void *)L.ctx.config;
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof *c);
        CU_ASSERT(c->t == 5 && c->width == 16 && c->rotated == 3 && c->hd == 4);
        CU_ASSERT(c->theta == 500000 && c->llama3 == 1 && c->factor == 8);
        CU_ASSERT(c->low_freq_factor == 1 && c->high_freq_factor == 4);
        CU_ASSERT(c->original_max_position_embeddings == 8192);
        oc_free(&L);
    }
    {   /* gelu's form, swiglu's half */
        const bt_shape s[] = {SH(2, 6)};
        const bt_dtype d[] = {BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, "gelu", "", 1, s, d), 0);
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof(bt_gelu_config));
        CU_ASSERT_EQUAL(((const bt_gelu_config *)(const void *)L.ctx.config)->approx, BT_OPS_GELU_ERF);
        oc_free(&L);
        CU_ASSERT_EQUAL_FATAL(setup(&L, "gelu", "approx=tanh", 1, s, d), 0);
        CU_ASSERT_EQUAL(((const bt_gelu_config *)(const void *)L.ctx.config)->approx, BT_OPS_GELU_TANH);
        oc_free(&L);
        CU_ASSERT_EQUAL_FATAL(setup(&L, "swiglu", "", 1, s, d), 0);
        CU_ASSERT_EQUAL(L.ctx.config_size, sizeof(bt_swiglu_config));
        CU_ASSERT_EQUAL(((const bt_swiglu_config *)(const void *)L.ctx.config)->half, 3);
        oc_free(&L);
    }
    /* ops whose CUDA kernels read no config must keep having none */
    static const struct {
        const char *op, *args;
        int n_in;
    } plain[] = {{"add", "", 2},     {"mul", "", 2},     {"relu", "", 1},
                 {"tanh", "", 1},    {"sigmoid", "", 1},
                 {"flatten", "", 1}, {"mse", "", 2},     {"reshape", "shape=-1", 1}};
    for (int k = 0; k < (int)(sizeof plain / sizeof plain[0]); k++) {
        const bt_shape s[] = {SH(2, 3), SH(2, 3)};
        const bt_dtype d[] = {BT_F32, BT_F32};
        CU_ASSERT_EQUAL_FATAL(setup(&L, plain[k].op, plain[k].args, plain[k].n_in, s, d), 0);
        if (L.ctx.config_size != 0) printf("\n  op '%s' now has a config\n", plain[k].op);
        CU_ASSERT_EQUAL(L.ctx.config_size, 0);
        oc_free(&L);
    }
}

static void test_kernel_outside_backend(void)
{
    CU_ASSERT_EQUAL_FATAL(bt_cuda_attach_kernels(), BT_OK);
    const bt_op_def *relu = bt_op_find("relu");
    bt_tensor in = {.data = NULL, .dtype = BT_F32, .ndim = 2, .dim = {2, 3}};
    bt_tensor out = in;
    bt_op_call call = {.batch = 2, .n_in = 1, .in = &in, .out = &out};
    bt_clear_error();
    CU_ASSERT_EQUAL(relu->cuda_forward(&call), BT_ERR_INTERNAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "outside the CUDA backend"));
}

int main(void)
{
    static const bt_test_case tests[] = {
        {"every built-in op has CUDA kernels", test_kernels_attached},
        {"backend table", test_backend_table},
        {"open: clean failure without a GPU, or a described device", test_open},
        {"device enumeration", test_devices},
        {"op config layouts and buffer sizes", test_config_layouts},
        {"built-in kernel outside the backend", test_kernel_outside_backend},
        {NULL, NULL},
    };
    return bt_test_main("cuda_build", tests);
}
