/* tests/cuda_emu/cublas_emu.c: a stand-in for cuBLAS, compiled against the real cublas_v2.h, for
 * emulated test builds (see cudart_emu.c). It has the calls baton makes: handles bound to the
 * device current at creation, streams, math mode, workspace, and column-major GEMM in f32 (Sgemm,
 * rounding its inputs to tf32 under CUBLAS_TF32_TENSOR_OP_MATH), f64 (Dgemm) and f32 with
 * reduced-precision compute (GemmEx with CUBLAS_COMPUTE_32F_FAST_16BF / _FAST_16F / _FAST_TF32:
 * the inputs are rounded to bf16 / f16 / tf32 with round-to-nearest-even, and the products
 * accumulate in f32, so the precision path really loses precision).
 *
 * Each call checks what cuBLAS checks (dimensions, lda >= max(1, rows of op(A)), ldb, ldc, the
 * operation codes; CUBLAS_STATUS_INVALID_VALUE) and what a desk-check cannot (that A, B and C are
 * device memory of the handle's device, whole, and that the current device is the handle's); each
 * failure is also a fault through bt_emu_fault with a clear message. The GEMM runs as a task on
 * the handle's stream (bt_emu_stream_enqueue); alpha and beta are read at the call (host pointer
 * mode). With beta == 0, C is not read, as in cuBLAS (poisoned memory stays harmless). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "emu_runtime.h"

#define HANDLE_MAGIC 0x43424c53u

struct cublasContext {
    unsigned magic;
    int device, destroyed;
    cudaStream_t stream;
    void *workspace;
    size_t workspace_bytes;
    cublasMath_t math;
};

/* Records a fault naming the call and returns st. */
#define BAD(st, api, fmt, ...) (bt_emu_fault("%s: " fmt, api, __VA_ARGS__), (st))

static cublasStatus_t handle_check(cublasHandle_t h, const char *api)
{
    if (!h || h->magic != HANDLE_MAGIC || h->destroyed) {
        bt_emu_fault("%s: %p is not a live cuBLAS handle", api, (void *)h);
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    if (bt_emu_current_device() != h->device) {
        bt_emu_fault("%s: the handle belongs to cuda:%d but the current device is cuda:%d", api,
                     h->device, bt_emu_current_device());
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    if (bt_emu_injected("cublasCreate")) return CUBLAS_STATUS_NOT_INITIALIZED;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    struct cublasContext *h = calloc(1, sizeof *h);
    if (!h) return CUBLAS_STATUS_ALLOC_FAILED;
    h->magic = HANDLE_MAGIC;
    h->device = bt_emu_current_device();
    h->math = CUBLAS_DEFAULT_MATH;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    if (!handle || handle->magic != HANDLE_MAGIC || handle->destroyed) {
        bt_emu_fault("cublasDestroy: %p is not a live cuBLAS handle", (void *)handle);
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    /* cuBLAS synchronises the handle's work before releasing it (a stream destroyed already has
     * run its work: nothing to wait for) */
    int prev = bt_emu_current_device();
    if (cudaSetDevice(handle->device) == cudaSuccess &&
        bt_emu_stream_device(handle->stream) == handle->device)
        (void)cudaStreamSynchronize(handle->stream);
    (void)cudaSetDevice(prev);
    handle->magic = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    cublasStatus_t st = handle_check(handle, "cublasSetStream");
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    int dev = bt_emu_stream_device(stream);
    if (dev != handle->device) {
        bt_emu_fault("cublasSetStream: stream %p %s, but the handle belongs to cuda:%d",
                     (void *)stream, dev < 0 ? "is not a live stream" : "belongs to another GPU",
                     handle->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    cublasStatus_t st = handle_check(handle, "cublasGetStream");
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    cublasStatus_t st = handle_check(handle, "cublasSetMathMode");
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    handle->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    cublasStatus_t st = handle_check(handle, "cublasGetMathMode");
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void *workspace, size_t bytes)
{
    cublasStatus_t st = handle_check(handle, "cublasSetWorkspace");
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (bytes && !bt_emu_is_device_range(workspace, bytes, handle->device)) {
        bt_emu_fault("cublasSetWorkspace: [%p, +%zu) is not device memory of cuda:%d", workspace,
                     bytes, handle->device);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (((uintptr_t)workspace & 255) != 0) {
        bt_emu_fault("cublasSetWorkspace: %p is not 256-byte aligned", workspace);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
    }
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "an invalid numeric value was used as an argument (see the emulator's fault "
               "message on stderr)";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}

/* ---- GEMM --------------------------------------------------------------------------------- */

enum { RND_NONE, RND_BF16, RND_F16, RND_TF32 };

/* Keeps `mant` explicit mantissa bits of x, round-to-nearest-even; the exponent range is f32's. */
static float round_mantissa(float x, int mant)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7F800000u) == 0x7F800000u) return x; /* inf, NaN */
    int drop = 23 - mant;
    uint32_t half = 1u << (drop - 1), lsb = (u >> drop) & 1u;
    u += half - 1 + lsb;
    u &= ~((1u << drop) - 1);
    memcpy(&x, &u, 4);
    return x;
}

/* IEEE binary16: 10 mantissa bits, subnormals below 2^-14, overflow to infinity from 65520. */
static float round_f16(float x)
{
    if (isnan(x)) return x;
    float a = fabsf(x);
    if (a >= 65520.0f) return copysignf(INFINITY, x);
    float r;
    if (a < 6.103515625e-05f) { /* 2^-14: quantum 2^-24 */
        r = nearbyintf(a * 16777216.0f) / 16777216.0f;
    } else {
        int ex;
        (void)frexpf(a, &ex);                  /* a = m * 2^ex, m in [0.5, 1) */
        float q = ldexpf(1.0f, ex - 11);       /* 10 explicit bits below the leading one */
        r = nearbyintf(a / q) * q;
    }
    return copysignf(r, x);
}

static float round_in(float x, int mode)
{
    switch (mode) {
    case RND_BF16: return round_mantissa(x, 7);
    case RND_F16: return round_f16(x);
    case RND_TF32: return round_mantissa(x, 10);
    default: return x;
    }
}

typedef struct {
    int f64, rnd;
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    double alpha, beta;
    const void *a, *b;
    void *c;
} gemm_task;

static void gemm_run(void *p)
{
    const gemm_task *t = p;
    for (int j = 0; j < t->n; j++)
        for (int i = 0; i < t->m; i++) {
            if (t->f64) {
                const double *a = t->a, *b = t->b;
                double *c = t->c, acc = 0;
                for (int l = 0; l < t->k; l++) {
                    double av = t->ta == CUBLAS_OP_N ? a[i + (size_t)l * t->lda]
                                                     : a[l + (size_t)i * t->lda];
                    double bv = t->tb == CUBLAS_OP_N ? b[l + (size_t)j * t->ldb]
                                                     : b[j + (size_t)l * t->ldb];
                    acc += av * bv;
                }
                double *cij = &c[i + (size_t)j * t->ldc];
                *cij = t->beta == 0 ? t->alpha * acc : t->alpha * acc + t->beta * *cij;
            } else {
                const float *a = t->a, *b = t->b;
                float *c = t->c, acc = 0;
                for (int l = 0; l < t->k; l++) {
                    float av = t->ta == CUBLAS_OP_N ? a[i + (size_t)l * t->lda]
                                                    : a[l + (size_t)i * t->lda];
                    float bv = t->tb == CUBLAS_OP_N ? b[l + (size_t)j * t->ldb]
                                                    : b[j + (size_t)l * t->ldb];
                    acc += round_in(av, t->rnd) * round_in(bv, t->rnd);
                }
                float *cij = &c[i + (size_t)j * t->ldc];
                float al = (float)t->alpha, be = (float)t->beta;
                *cij = be == 0 ? al * acc : al * acc + be * *cij;
            }
        }
}

static int op_ok(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; }

/* Bytes a column-major rows x cols matrix with leading dimension ld spans. */
static size_t span(int rows, int cols, int ld, size_t es)
{
    if (rows == 0 || cols == 0) return 0;
    return ((size_t)(cols - 1) * (size_t)ld + (size_t)rows) * es;
}

static cublasStatus_t gemm_common(const char *api, cublasHandle_t h, int f64, int rnd,
                                  cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                  double alpha, const void *a, int lda, const void *b, int ldb,
                                  double beta, void *c, int ldc)
{
    cublasStatus_t st = handle_check(h, api);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (bt_emu_injected(api)) return CUBLAS_STATUS_EXECUTION_FAILED;
    const cublasStatus_t inv = CUBLAS_STATUS_INVALID_VALUE;
    if (!op_ok(ta) || !op_ok(tb))
        return BAD(inv, api, "unsupported operation codes (%d, %d)", (int)ta, (int)tb);
    if (m < 0 || n < 0 || k < 0)
        return BAD(inv, api, "negative dimension (m = %d, n = %d, k = %d)", m, n, k);
    const int arows = ta == CUBLAS_OP_N ? m : k, acols = ta == CUBLAS_OP_N ? k : m;
    const int brows = tb == CUBLAS_OP_N ? k : n, bcols = tb == CUBLAS_OP_N ? n : k;
    if (lda < (arows > 1 ? arows : 1))
        return BAD(inv, api, "lda = %d is below max(1, rows of op(A)) = %d (m=%d n=%d k=%d)",
                   lda, arows > 1 ? arows : 1, m, n, k);
    if (ldb < (brows > 1 ? brows : 1))
        return BAD(inv, api, "ldb = %d is below max(1, rows of op(B)) = %d (m=%d n=%d k=%d)",
                   ldb, brows > 1 ? brows : 1, m, n, k);
    if (ldc < (m > 1 ? m : 1))
        return BAD(inv, api, "ldc = %d is below max(1, m) = %d", ldc, m > 1 ? m : 1);
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const size_t es = f64 ? 8 : 4;
    const struct {
        const char *name;
        const void *p;
        size_t bytes;
    } mats[] = {{"A", a, k ? span(arows, acols, lda, es) : 0},
                {"B", b, k ? span(brows, bcols, ldb, es) : 0},
                {"C", c, span(m, n, ldc, es)}};
    for (int i = 0; i < 3; i++)
        if (mats[i].bytes && !bt_emu_is_device_range(mats[i].p, mats[i].bytes, h->device)) {
            bt_emu_fault("%s: %s = [%p, +%zu) (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d) is not inside "
                         "one device allocation of the handle's GPU cuda:%d",
                         api, mats[i].name, mats[i].p, mats[i].bytes, m, n, k, lda, ldb, ldc,
                         h->device);
            return inv;
        }
    gemm_task *t = malloc(sizeof *t);
    if (!t) return CUBLAS_STATUS_ALLOC_FAILED;
    *t = (gemm_task){f64, rnd, ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c};
    if (bt_emu_stream_enqueue(h->stream, gemm_run, t) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}

/* alpha and beta: host pointer mode; a pointer into device memory is a mistake. */
static int scalar_ok(const char *api, const void *alpha, const void *beta)
{
    if (!alpha || !beta || bt_emu_is_device_range(alpha, 1, -1) ||
        bt_emu_is_device_range(beta, 1, -1)) {
        bt_emu_fault("%s: alpha and beta must be host pointers (CUBLAS_POINTER_MODE_HOST)", api);
        return 0;
    }
    return 1;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float *alpha,
                           const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc)
{
    if (!scalar_ok("cublasSgemm", alpha, beta)) return CUBLAS_STATUS_INVALID_VALUE;
    /* CUBLAS_TF32_TENSOR_OP_MATH lets Sgemm round its inputs to tf32 */
    const int tf32 = handle && handle->magic == HANDLE_MAGIC &&
                     (handle->math & 0xF) == CUBLAS_TF32_TENSOR_OP_MATH;
    return gemm_common("cublasSgemm", handle, 0, tf32 ? RND_TF32 : RND_NONE, transa, transb, m, n,
                       k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}

cublasStatus_t cublasDgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const double *alpha,
                           const double *A, int lda, const double *B, int ldb, const double *beta,
                           double *C, int ldc)
{
    if (!scalar_ok("cublasDgemm", alpha, beta)) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_common("cublasDgemm", handle, 1, RND_NONE, transa, transb, m, n, k, *alpha, A,
                       lda, B, ldb, *beta, C, ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo)
{
    const char *api = "cublasGemmEx";
    int rnd;
    (void)algo;
    switch (computeType) {
    case CUBLAS_COMPUTE_32F: rnd = RND_NONE; break;
    case CUBLAS_COMPUTE_32F_FAST_16BF: rnd = RND_BF16; break;
    case CUBLAS_COMPUTE_32F_FAST_16F: rnd = RND_F16; break;
    case CUBLAS_COMPUTE_32F_FAST_TF32: rnd = RND_TF32; break;
    default:
        bt_emu_fault("%s: compute type %d is not emulated", api, (int)computeType);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (Atype != CUDA_R_32F || Btype != CUDA_R_32F || Ctype != CUDA_R_32F) {
        bt_emu_fault("%s: only CUDA_R_32F A, B and C are emulated (got %d, %d, %d)", api,
                     (int)Atype, (int)Btype, (int)Ctype);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!scalar_ok(api, alpha, beta)) return CUBLAS_STATUS_INVALID_VALUE;
    return gemm_common(api, handle, 0, rnd, transa, transb, m, n, k, *(const float *)alpha, A, lda,
                       B, ldb, *(const float *)beta, C, ldc);
}
