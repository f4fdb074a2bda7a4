/* tests/test_cuda_emu_rt.c: the CUDA runtime and cuBLAS stand-ins of the emulator
 * (tests/cuda_emu/cudart_emu.c, cublas_emu.c) on their own, without baton: every check they make
 * is shown catching a planted fault (a wrong leading dimension, a wrong memcpy kind, a pointer of
 * another GPU, a stream of another GPU, a wait on an event never recorded, timing on an event
 * without it, an out-of-bounds write into a guard zone, freeing an unknown pointer), and healthy
 * use is shown passing with correct results. Started without BT_EMU_MODE, the program runs itself
 * twice, synchronously and asynchronously (two pretend GPUs, random delays), and the asynchronous
 * run shows stream ordering: a copy on stream B that does not wait for stream A's event sees stale
 * data, one that waits sees the new data, and pageable/pinned host memory follow CUDA's rules.
 * Injected failures (bt_emu_fail_call) are shown too. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bt_test.h"
#include "cuda_emu/emu_runtime.h"

static char msg[1024];

/* Exactly the faults a planted bug should raise: at least one, the last naming `what`. */
#define EXPECT_FAULT(what)                                                                        \
    do {                                                                                          \
        unsigned n_ = bt_emu_faults_take(msg, sizeof msg);                                        \
        CU_ASSERT(n_ >= 1);                                                                       \
        if (!strstr(msg, what)) fprintf(stderr, "expected a fault naming '%s', got '%s'\n",     \
                                        what, msg);                                               \
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, what));                                                \
    } while (0)
#define EXPECT_NO_FAULT() CU_ASSERT_EQUAL(bt_emu_faults_take(msg, sizeof msg), 0)

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int gpus(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/* ---- kernels stand-ins: tasks queued like launches ---------------------------------------- */

typedef struct {
    float *p;
    long index;
    float value;
    int delay_ms;
} poke_arg;

static void poke_run(void *a)
{
    poke_arg *k = a;
    if (k->delay_ms) sleep_ms(k->delay_ms);
    if (k->p) k->p[k->index] = k->value;
}

static cudaError_t poke(cudaStream_t s, float *p, long index, float value, int delay_ms)
{
    poke_arg *k = malloc(sizeof *k);
    *k = (poke_arg){p, index, value, delay_ms};
    return bt_emu_stream_enqueue(s, poke_run, k);
}

static void fault_run(void *a)
{
    (void)a;
    bt_emu_fault("planted fault from a kernel");
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_memory_poison_and_table(void)
{
    size_t free0, total, free1;
    float *d = NULL, h[16];
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&free0, &total), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&d, sizeof h), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&free1, &total), cudaSuccess);
    CU_ASSERT_EQUAL(free0 - free1, sizeof h);
    CU_ASSERT_EQUAL((uintptr_t)d % 256, 0);
    CU_ASSERT_EQUAL(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 16; i++) CU_ASSERT(isnan(h[i])); /* unwritten memory reads as NaN */
    CU_ASSERT(bt_emu_is_device_range(d, sizeof h, 0));
    CU_ASSERT(bt_emu_is_device_range(d + 4, 8, -1));
    CU_ASSERT(!bt_emu_is_device_range(d, sizeof h + 1, 0)); /* runs past the end */
    CU_ASSERT(!bt_emu_is_device_range(d - 1, 4, 0));        /* starts in the front guard */
    CU_ASSERT(!bt_emu_is_device_range(h, sizeof h, -1));    /* host memory */
    CU_ASSERT(!bt_emu_is_device_range(d, 4, 1));            /* another device */
    EXPECT_NO_FAULT();
    /* planted: freeing a host pointer, freeing twice */
    CU_ASSERT_EQUAL(cudaFree(h), cudaErrorInvalidValue);
    EXPECT_FAULT("cudaFree");
    CU_ASSERT_EQUAL(cudaFree(d), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&free1, &total), cudaSuccess);
    CU_ASSERT_EQUAL(free1, free0);
    CU_ASSERT_EQUAL(cudaFree(d), cudaErrorInvalidValue);
    EXPECT_FAULT("freed already");
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaErrorInvalidValue);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    /* out of memory is an error, not a fault */
    void *huge = NULL;
    CU_ASSERT_EQUAL(cudaMalloc(&huge, (size_t)1 << 50), cudaErrorMemoryAllocation);
    CU_ASSERT_PTR_NULL(huge);
    (void)cudaGetLastError();
    EXPECT_NO_FAULT();
    /* pinned memory: its own table */
    void *pin = NULL;
    CU_ASSERT_EQUAL(cudaHostAlloc(&pin, 64, cudaHostAllocPortable), cudaSuccess);
    CU_ASSERT(!bt_emu_is_device_range(pin, 64, -1));
    CU_ASSERT_EQUAL(cudaFree(pin), cudaErrorInvalidValue);
    EXPECT_FAULT("cudaFree");
    CU_ASSERT_EQUAL(cudaFreeHost(pin), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFreeHost(pin), cudaErrorInvalidValue);
    EXPECT_FAULT("cudaFreeHost");
    (void)cudaGetLastError();
}

static void test_guard_zones(void)
{
    float *d = NULL;
    cudaStream_t s;
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&d, 10 * sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL(poke(s, d, 9, 1.0f, 0), cudaSuccess); /* the last element: fine */
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_NO_FAULT();
#if defined(__SANITIZE_ADDRESS__)
    /* the guard zones are poisoned for AddressSanitizer, which would stop the planted writes */
    CU_ASSERT_EQUAL(cudaFree(d), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(s), cudaSuccess);
    return;
#endif
    /* planted: a kernel writes one element past the end, then one before the start */
    CU_ASSERT_EQUAL(poke(s, d, 10, 1.0f, 0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
    EXPECT_FAULT("past the end");
    CU_ASSERT_EQUAL(poke(s, d, -1, 1.0f, 0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    EXPECT_FAULT("before the start");
    /* caught at free too */
    CU_ASSERT_EQUAL(poke(s, d, 12, 1.0f, 0), cudaSuccess);
    (void)cudaFree(d);
    EXPECT_FAULT("past the end");
    /* a copy into the guard zone is refused before it writes */
    CU_ASSERT_EQUAL(cudaMalloc((void **)&d, 10 * sizeof(float)), cudaSuccess);
    float h[4] = {1, 2, 3, 4};
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d + 8, h, sizeof h, cudaMemcpyHostToDevice, s),
                    cudaErrorInvalidValue);
    EXPECT_FAULT("not inside");
    CU_ASSERT_EQUAL(cudaMemsetAsync(d + 8, 0, sizeof h, s), cudaErrorInvalidValue);
    EXPECT_FAULT("not inside");
    CU_ASSERT_EQUAL(cudaFree(d), cudaSuccess);
    /* a kernel's fault is returned by the next call that reports errors */
    CU_ASSERT_EQUAL(bt_emu_stream_enqueue(s, fault_run, NULL), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaErrorLaunchFailure);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    EXPECT_FAULT("planted fault from a kernel");
    /* ... and by cudaGetLastError, as a launcher's check after an asynchronous launch */
    CU_ASSERT_EQUAL(bt_emu_stream_enqueue(s, fault_run, NULL), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
    EXPECT_FAULT("planted fault from a kernel");
    CU_ASSERT_EQUAL(cudaStreamDestroy(s), cudaSuccess);
    /* planted: a destroyed stream */
    CU_ASSERT_EQUAL(poke(s, NULL, 0, 0, 0), cudaErrorInvalidResourceHandle);
    EXPECT_FAULT("not a live stream");
    (void)cudaGetLastError();
}

static void test_memcpy_kinds(void)
{
    float *d = NULL, *pin = NULL, h[8], back[8];
    cudaStream_t s;
    for (int i = 0; i < 8; i++) h[i] = (float)i;
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&d, sizeof h), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMallocHost((void **)&pin, sizeof h), cudaSuccess);
    /* healthy round trips through pageable and pinned memory */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, s), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(pin, d, sizeof h, cudaMemcpyDeviceToHost, s), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaSuccess);
    CU_ASSERT_EQUAL(memcmp(pin, h, sizeof h), 0);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(back, d, sizeof h, cudaMemcpyDefault, s), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s), cudaSuccess);
    CU_ASSERT_EQUAL(memcmp(back, h, sizeof h), 0);
    EXPECT_NO_FAULT();
    /* planted: wrong kinds */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(back, h, sizeof h, cudaMemcpyHostToDevice, s),
                    cudaErrorInvalidValue);
    EXPECT_FAULT("kind cudaMemcpyHostToDevice");
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyDeviceToHost, s),
                    cudaErrorInvalidValue);
    EXPECT_FAULT("kind cudaMemcpyDeviceToHost");
    CU_ASSERT_EQUAL(cudaMemcpyAsync(pin, d, sizeof h, cudaMemcpyDeviceToDevice, s),
                    cudaErrorInvalidValue);
    EXPECT_FAULT("pinned host memory");
    /* planted: memset of host memory */
    CU_ASSERT_EQUAL(cudaMemsetAsync(back, 0, sizeof back, s), cudaErrorInvalidValue);
    EXPECT_FAULT("not device memory");
    (void)cudaGetLastError();
    CU_ASSERT_EQUAL(cudaFree(d), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFreeHost(pin), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(s), cudaSuccess);
}

static void test_devices_and_peers(void)
{
    struct cudaDeviceProp prop;
    char bus[32];
    int n = gpus(), can = -1;
    CU_ASSERT(n >= 1);
    CU_ASSERT_EQUAL(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    CU_ASSERT_STRING_EQUAL(prop.name, "baton emulated GPU");
    CU_ASSERT_EQUAL(prop.major, 9);
    CU_ASSERT_EQUAL(prop.minor, 0);
    CU_ASSERT(prop.totalGlobalMem > 0);
    CU_ASSERT_EQUAL(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaSetDevice(n), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    if (n < 2) return;
    CU_ASSERT_EQUAL(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
    CU_ASSERT_EQUAL(can, 1);
    CU_ASSERT_EQUAL(cudaDeviceCanAccessPeer(&can, 0, 0), cudaSuccess);
    CU_ASSERT_EQUAL(can, 0);

    float *d0, *d1, h[4] = {1, 2, 3, 4};
    cudaStream_t s0, s1;
    size_t f0a, f0b, f1a, f1b, tot;
    CU_ASSERT_EQUAL(cudaSetDevice(1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&f1a, &tot), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&d1, sizeof h), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&f1b, &tot), cudaSuccess);
    CU_ASSERT_EQUAL(f1a - f1b, sizeof h);
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&f0a, &tot), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&d0, sizeof h), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemGetInfo(&f0b, &tot), cudaSuccess);
    CU_ASSERT_EQUAL(f0a - f0b, sizeof h); /* per-device accounting */
    CU_ASSERT(bt_emu_is_device_range(d1, sizeof h, 1));
    CU_ASSERT(!bt_emu_is_device_range(d1, sizeof h, 0));
    /* planted: a pointer of cuda:1 in a copy on a cuda:0 stream */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d1, h, sizeof h, cudaMemcpyHostToDevice, s0),
                    cudaErrorInvalidValue);
    EXPECT_FAULT("device memory of cuda:1");
    /* planted: a stream of cuda:1 while cuda:0 is current */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d1, h, sizeof h, cudaMemcpyHostToDevice, s1),
                    cudaErrorInvalidResourceHandle);
    EXPECT_FAULT("current device is cuda:0");
    CU_ASSERT_EQUAL(poke(s1, d1, 0, 1, 0), cudaErrorInvalidResourceHandle);
    EXPECT_FAULT("current device is cuda:0");
    /* device to device across GPUs needs peer access; the peer copy does not */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d0, h, sizeof h, cudaMemcpyHostToDevice, s0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d1, d0, sizeof h, cudaMemcpyDeviceToDevice, s0),
                    cudaErrorInvalidValue);
    EXPECT_FAULT("peer access");
    CU_ASSERT_EQUAL(cudaMemcpyPeerAsync(d1, 1, d0, 0, sizeof h, s0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyPeerAsync(d1, 0, d0, 0, sizeof h, s0), cudaErrorInvalidValue);
    EXPECT_FAULT("not device memory of cuda:0");
    CU_ASSERT_EQUAL(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    (void)cudaGetLastError();
    CU_ASSERT_EQUAL(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(d1, d0, sizeof h, cudaMemcpyDeviceToDevice, s0), cudaSuccess);
    EXPECT_NO_FAULT();
    float back[4];
    CU_ASSERT_EQUAL(cudaSetDevice(1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(s0), cudaSuccess); /* any device may wait on it */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(back, d1, sizeof h, cudaMemcpyDeviceToHost, s1), cudaSuccess);
    CU_ASSERT_EQUAL(memcmp(back, h, sizeof h), 0); /* D2H into pageable memory: done on return */
    CU_ASSERT_EQUAL(cudaFree(d1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(s1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(d0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(s0), cudaSuccess);
    EXPECT_NO_FAULT();
}

static void test_events(void)
{
    cudaStream_t s;
    cudaEvent_t t0, t1, order, never;
    float ms = -1;
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventCreateWithFlags(&t0, cudaEventDefault), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventCreateWithFlags(&t1, cudaEventDefault), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventCreateWithFlags(&order, cudaEventDisableTiming), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventCreateWithFlags(&never, cudaEventDisableTiming), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventRecord(t0, s), cudaSuccess);
    CU_ASSERT_EQUAL(poke(s, NULL, 0, 0, 5), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventRecord(t1, s), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventRecord(order, s), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventSynchronize(t1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventQuery(t1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
    CU_ASSERT(ms >= 4.0f);
    CU_ASSERT_EQUAL(cudaStreamWaitEvent(s, order, 0), cudaSuccess);
    EXPECT_NO_FAULT();
    /* planted: timing on an event created without it */
    CU_ASSERT_EQUAL(cudaEventElapsedTime(&ms, t0, order), cudaErrorInvalidResourceHandle);
    EXPECT_FAULT("cudaEventDisableTiming");
    /* planted: a wait on an event never recorded (a no-op in CUDA) */
    CU_ASSERT_EQUAL(cudaStreamWaitEvent(s, never, 0), cudaErrorInvalidResourceHandle);
    EXPECT_FAULT("never recorded");
    (void)cudaGetLastError();
    CU_ASSERT_EQUAL(cudaEventDestroy(never), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventRecord(never, s), cudaErrorInvalidResourceHandle);
    EXPECT_FAULT("not a live event");
    (void)cudaGetLastError();
    if (gpus() >= 2) { /* planted: an event of cuda:0 recorded on a stream of cuda:1 */
        cudaStream_t s1;
        CU_ASSERT_EQUAL(cudaSetDevice(1), cudaSuccess);
        CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
        CU_ASSERT_EQUAL(cudaEventRecord(t0, s1), cudaErrorInvalidResourceHandle);
        EXPECT_FAULT("belongs to cuda:0");
        CU_ASSERT_EQUAL(cudaStreamWaitEvent(s1, t1, 0), cudaSuccess); /* cross-GPU waits: fine */
        CU_ASSERT_EQUAL(cudaStreamSynchronize(s1), cudaSuccess);
        CU_ASSERT_EQUAL(cudaStreamDestroy(s1), cudaSuccess);
        CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
        (void)cudaGetLastError();
    }
    CU_ASSERT_EQUAL(cudaEventDestroy(t0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventDestroy(t1), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventDestroy(order), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_NO_FAULT();
}

/* Column-major reference: C = op(A) op(B) with inputs through round_fn. */
static void ref_gemm(int ta, int tb, int m, int n, int k, const float *a, int lda, const float *b,
                     int ldb, float *c, int ldc, float (*round_fn)(float))
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float acc = 0;
            for (int l = 0; l < k; l++) {
                float av = ta ? a[l + i * lda] : a[i + l * lda];
                float bv = tb ? b[j + l * ldb] : b[l + j * ldb];
                acc += round_fn(av) * round_fn(bv);
            }
            c[i + j * ldc] = acc;
        }
}

static float ident(float x) { return x; }

static float bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    memcpy(&x, &u, 4);
    return x;
}

static float tf32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
    memcpy(&x, &u, 4);
    return x;
}

static void test_cublas(void)
{
    enum { M = 5, N = 3, K = 4 };
    float a[M * K], b[K * N], c[M * N], ref[M * N];
    float *da, *db, *dc;
    cublasHandle_t h;
    cudaStream_t s;
    const float one = 1, zero = 0;
    for (int i = 0; i < M * K; i++) a[i] = 1.0f + (float)i / 3.0f;
    for (int i = 0; i < K * N; i++) b[i] = 0.5f - (float)i / 7.0f;
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&da, sizeof a), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&db, sizeof b), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&dc, sizeof c), cudaSuccess); /* poisoned: NaN */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(da, a, sizeof a, cudaMemcpyHostToDevice, s), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(db, b, sizeof b, cudaMemcpyHostToDevice, s), cudaSuccess);
    /* C (5x3) = A (5x4) B (4x3); beta = 0 does not read the poisoned C */
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero,
                                dc, M),
                    CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(c, dc, sizeof c, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ref_gemm(0, 0, M, N, K, a, M, b, K, ref, M, ident);
    for (int i = 0; i < M * N; i++) CU_ASSERT_DOUBLE_EQUAL(c[i], ref[i], 1e-5);
    /* transposed: C (5x3) = A^T B^T with A stored 4x5 (lda 4) and B stored 3x4 (ldb 3) */
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, M, N, K, &one, da, K, db, N, &zero,
                                dc, M),
                    CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(c, dc, sizeof c, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ref_gemm(1, 1, M, N, K, a, K, b, N, ref, M, ident);
    for (int i = 0; i < M * N; i++) CU_ASSERT_DOUBLE_EQUAL(c[i], ref[i], 1e-5);
    /* bf16 compute: inputs rounded, so the result differs from f32 and equals the rounded one */
    CU_ASSERT_EQUAL(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, CUDA_R_32F, M, db,
                                 CUDA_R_32F, K, &zero, dc, CUDA_R_32F, M,
                                 CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(c, dc, sizeof c, cudaMemcpyDeviceToHost, s), cudaSuccess);
    float exact[M * N];
    ref_gemm(0, 0, M, N, K, a, M, b, K, exact, M, ident);
    ref_gemm(0, 0, M, N, K, a, M, b, K, ref, M, bf16);
    int differs = 0;
    for (int i = 0; i < M * N; i++) {
        CU_ASSERT_DOUBLE_EQUAL(c[i], ref[i], 1e-6);
        differs |= fabsf(c[i] - exact[i]) > 1e-4f;
    }
    CU_ASSERT(differs);
    /* Sgemm under CUBLAS_TF32_TENSOR_OP_MATH rounds its inputs to tf32 */
    CU_ASSERT_EQUAL(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K, &zero,
                                dc, M),
                    CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(c, dc, sizeof c, cudaMemcpyDeviceToHost, s), cudaSuccess);
    ref_gemm(0, 0, M, N, K, a, M, b, K, ref, M, tf32);
    for (int i = 0; i < M * N; i++) CU_ASSERT_DOUBLE_EQUAL(c[i], ref[i], 1e-6);
    CU_ASSERT_EQUAL(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), CUBLAS_STATUS_SUCCESS);
    /* f16 compute: above 65504 an input becomes infinity */
    float big = 70000.0f;
    CU_ASSERT_EQUAL(cudaMemcpyAsync(da, &big, sizeof big, cudaMemcpyHostToDevice, s), cudaSuccess);
    CU_ASSERT_EQUAL(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, da, CUDA_R_32F, 1, da,
                                 CUDA_R_32F, 1, &zero, dc, CUDA_R_32F, 1,
                                 CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_GEMM_DEFAULT),
                    CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(c, dc, sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
    CU_ASSERT(isinf(c[0]));
    EXPECT_NO_FAULT();
    /* planted: a wrong leading dimension (lda below the rows of A) */
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M - 1, db, K,
                                &zero, dc, M),
                    CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_FAULT("lda = 4");
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, M, N, K, &one, da, M, db, K - 1,
                                &zero, dc, M),
                    CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_FAULT("ldb");
    /* planted: a leading dimension that is legal but reads past the end of A */
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M + 1, db, K,
                                &zero, dc, M),
                    CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_FAULT("A = ");
    /* planted: a host pointer as B */
    CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, b, K, &zero,
                                dc, M),
                    CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_FAULT("B = ");
    if (gpus() >= 2) {
        float *d1;
        CU_ASSERT_EQUAL(cudaSetDevice(1), cudaSuccess);
        CU_ASSERT_EQUAL(cudaMalloc((void **)&d1, sizeof c), cudaSuccess);
        /* planted: the current device is not the handle's */
        CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K,
                                    &zero, dc, M),
                        CUBLAS_STATUS_INVALID_VALUE);
        EXPECT_FAULT("current device is cuda:1");
        CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
        /* planted: C on another GPU */
        CU_ASSERT_EQUAL(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, da, M, db, K,
                                    &zero, d1, M),
                        CUBLAS_STATUS_INVALID_VALUE);
        EXPECT_FAULT("C = ");
        CU_ASSERT_EQUAL(cudaFree(d1), cudaSuccess);
    }
    CU_ASSERT_EQUAL(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaFree(da), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(db), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(dc), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_NO_FAULT();
}

static void test_dgemm(void)
{
    double a[6] = {1, 2, 3, 4, 5, 6}, b[2] = {1, -1}, c[3], *da, *db, *dc;
    const double one = 1, zero = 0;
    cublasHandle_t h;
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cublasCreate(&h), CUBLAS_STATUS_SUCCESS); /* the default stream */
    CU_ASSERT_EQUAL(cudaMalloc((void **)&da, sizeof a), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&db, sizeof b), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&dc, sizeof c), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice), cudaSuccess);
    /* C (3x1) = A (3x2) b */
    CU_ASSERT_EQUAL(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 1, 2, &one, da, 3, db, 2, &zero,
                                dc, 3),
                    CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < 3; i++) CU_ASSERT_DOUBLE_EQUAL(c[i], -3.0, 0);
    CU_ASSERT_EQUAL(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    CU_ASSERT_EQUAL(cudaFree(da), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(db), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(dc), cudaSuccess);
    EXPECT_NO_FAULT();
}

/* Stream A is held up by a slow kernel, then writes buf; stream B copies buf. */
static void test_injected_failures(void)
{
    void *p = NULL;
    cublasHandle_t h;
    bt_emu_fail_call("cudaSetDevice", 2);
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaErrorInvalidDevice);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaErrorInvalidDevice);
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    bt_emu_fail_call("cudaMalloc", 1);
    CU_ASSERT_EQUAL(cudaMalloc(&p, 64), cudaErrorMemoryAllocation);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_EQUAL(cudaMalloc(&p, 64), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(p), cudaSuccess);
    bt_emu_fail_call("cublasCreate", 1);
    CU_ASSERT_EQUAL(cublasCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
    bt_emu_fail_call("cudaHostAlloc", 1);
    CU_ASSERT_EQUAL(cudaMallocHost(&p, 64), cudaErrorMemoryAllocation);
    bt_emu_fail_call("cudaStreamSynchronize", 1);
    bt_emu_fail_call(NULL, 0); /* cancelled */
    CU_ASSERT_EQUAL(cudaStreamSynchronize(0), cudaSuccess);
    (void)cudaGetLastError();
    EXPECT_NO_FAULT(); /* injected failures are not faults */
}

static void test_stream_ordering(void)
{
    cudaStream_t a, b;
    cudaEvent_t ready;
    float *buf, *src, *pin, out = 0, one = 1.0f, two = 2.0f;
    const int async = bt_emu_async();
    CU_ASSERT_EQUAL(cudaSetDevice(0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&buf, sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMalloc((void **)&src, sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMallocHost((void **)&pin, sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(buf, &one, sizeof one, cudaMemcpyHostToDevice, a), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(src, &two, sizeof two, cudaMemcpyHostToDevice, a), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(a), cudaSuccess);

    /* planted: B reads buf without waiting for A's event */
    CU_ASSERT_EQUAL(poke(a, NULL, 0, 0, 60), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(buf, src, sizeof(float), cudaMemcpyDeviceToDevice, a),
                    cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventRecord(ready, a), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(&out, buf, sizeof out, cudaMemcpyDeviceToHost, b),
                    cudaSuccess);
    CU_ASSERT_EQUAL(out, async ? 1.0f : 2.0f); /* stale under async: the race is visible */
    /* fixed: B waits for the event */
    CU_ASSERT_EQUAL(cudaStreamWaitEvent(b, ready, 0), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(&out, buf, sizeof out, cudaMemcpyDeviceToHost, b),
                    cudaSuccess);
    CU_ASSERT_EQUAL(out, 2.0f);
    if (async) CU_ASSERT_EQUAL(cudaEventQuery(ready), cudaSuccess);

    /* pageable H2D is staged at the call: the source may be reused at once */
    float host = 5.0f;
    CU_ASSERT_EQUAL(poke(a, NULL, 0, 0, 30), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(buf, &host, sizeof host, cudaMemcpyHostToDevice, a),
                    cudaSuccess);
    host = 6.0f;
    CU_ASSERT_EQUAL(cudaMemcpyAsync(&out, buf, sizeof out, cudaMemcpyDeviceToHost, a),
                    cudaSuccess);
    CU_ASSERT_EQUAL(out, 5.0f);
    /* pinned H2D is not: the copy reads the buffer when the stream gets there */
    *pin = 7.0f;
    CU_ASSERT_EQUAL(poke(a, NULL, 0, 0, 30), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(buf, pin, sizeof *pin, cudaMemcpyHostToDevice, a),
                    cudaSuccess);
    *pin = 8.0f; /* a bug in real code: reused before the stream is done with it */
    CU_ASSERT_EQUAL(cudaMemcpyAsync(&out, buf, sizeof out, cudaMemcpyDeviceToHost, a),
                    cudaSuccess);
    CU_ASSERT_EQUAL(out, async ? 8.0f : 7.0f);
    /* pinned D2H returns before the copy under async mode */
    *pin = 0;
    CU_ASSERT_EQUAL(poke(a, NULL, 0, 0, 30), cudaSuccess);
    CU_ASSERT_EQUAL(cudaMemcpyAsync(pin, buf, sizeof *pin, cudaMemcpyDeviceToHost, a),
                    cudaSuccess);
    if (async) CU_ASSERT_EQUAL(cudaStreamQuery(a), cudaErrorNotReady);
    CU_ASSERT_EQUAL(cudaStreamSynchronize(a), cudaSuccess);
    CU_ASSERT_EQUAL(*pin, async ? 8.0f : 7.0f);

    CU_ASSERT_EQUAL(cudaFreeHost(pin), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(buf), cudaSuccess);
    CU_ASSERT_EQUAL(cudaFree(src), cudaSuccess);
    CU_ASSERT_EQUAL(cudaEventDestroy(ready), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(a), cudaSuccess);
    CU_ASSERT_EQUAL(cudaStreamDestroy(b), cudaSuccess);
    EXPECT_NO_FAULT();
}

/* Without BT_EMU_MODE: run this program once per mode, with two pretend GPUs. */
static int run_modes(char **argv)
{
    static const char *modes[] = {"sync", "async"};
    int failed = 0;
    for (int i = 0; i < 2; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) return 99;
        if (pid == 0) {
            setenv("BT_EMU_MODE", modes[i], 1);
            setenv("BT_EMU_GPUS", "2", 1);
            setenv("BT_EMU_SEED", "7", 1);
            setenv("BT_EMU_DELAY_US", "300", 1);
            execv("/proc/self/exe", argv);
            _exit(99);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) < 0) return 99;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 99;
        printf("test_cuda_emu_rt: BT_EMU_MODE=%s: %s\n", modes[i], code ? "FAILED" : "passed");
        failed |= code != 0;
    }
    return failed;
}

int main(int argc, char **argv)
{
    (void)argc;
    if (!getenv("BT_EMU_MODE")) return run_modes(argv);
    static const bt_test_case cases[] = {
        {"memory: poison, table, free of unknown pointers", test_memory_poison_and_table},
        {"memory: guard zones catch out-of-bounds writes", test_guard_zones},
        {"copies: kinds checked against real locations", test_memcpy_kinds},
        {"devices: properties, peers, pointers and streams of another GPU",
         test_devices_and_peers},
        {"events: unrecorded waits, timing, devices", test_events},
        {"cuBLAS: results, bf16/f16 rounding, leading dimensions, pointers", test_cublas},
        {"cuBLAS: Dgemm on the default stream", test_dgemm},
        {"streams: ordering and pageable/pinned rules", test_stream_ordering},
        {"injected failures", test_injected_failures},
        {NULL, NULL},
    };
    return bt_test_main("cuda_emu_rt", cases);
}
