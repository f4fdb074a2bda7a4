/* cpu/gemm_f32.c: which library multiplies f32 matrices on the CPU, and the per-thread GEMM
 * thread count that makes `--threads` a per-device count for f32 too.
 *
 * OpenBLAS (pthreads build, the one Debian installs by default) has one thread count for the
 * whole process, and two stage workers calling it at once share one pool, so "N threads per
 * device" cannot be true through it. oneDNN's sgemm threads through OpenMP, whose count belongs
 * to the calling thread: each stage worker runs its GEMMs on a team of its own device's size.
 * Paths, chosen once per process when the first CPU device opens:
 *   - "onednn": bt_sgemm runs a oneDNN matmul primitive (bt_gemm_dnnl_f32, cached per shape in
 *     gemm_bf16.c; dnnl_sgemm if one cannot be built) with the calling thread's count
 *     (bt_blas_bind_threads; the CPU backend binds each op call to its device's count);
 *   - "openblas": OpenBLAS's cblas_sgemm with its one process-wide count (blas.c), as before.
 * BATON_CPU_F32 = auto | onednn | openblas chooses; auto is onednn where the build has oneDNN.
 * On 1 thread oneDNN's sgemm ran the MLP's shapes at 26-53 GFLOP/s against OpenBLAS SkylakeX's
 * 28-54 (AMD EPYC, load 11; bench/RESULTS.md). f64 GEMMs (the tests' reference dtype) stay on
 * OpenBLAS. A forced path that cannot be had (no oneDNN in the build) fails the device's open.
 * The two libraries sum in different orders: f32 results differ between the paths by float
 * rounding, and are deterministic on each. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "core/error.h"
#include "cpu/blas.h"

#ifdef BATON_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
/* libgomp's, declared here so that no OpenMP compiler flag is needed (oneDNN's runtime is OpenMP) */
extern void omp_set_num_threads(int n);
extern int omp_get_max_threads(void);
#endif

static pthread_once_t f32_once = PTHREAD_ONCE_INIT;
static int f32_onednn;
static char f32_error[200];
static __thread int bound_threads; /* 0: not bound (a direct caller: OpenMP's own count) */
static atomic_int f32_threads_seen;

static void f32_choose(void)
{
    const char *want = getenv("BATON_CPU_F32");
    if (!want || !*want) want = "auto";
    if (strcmp(want, "auto") && strcmp(want, "onednn") && strcmp(want, "openblas")) {
        snprintf(f32_error, sizeof f32_error,
                 "BATON_CPU_F32=%s: expected auto, onednn or openblas", want);
        return;
    }
#ifdef BATON_HAVE_DNNL
    f32_onednn = strcmp(want, "openblas") != 0;
#else
    if (strcmp(want, "onednn") == 0)
        snprintf(f32_error, sizeof f32_error,
                 "BATON_CPU_F32=onednn: this baton was built without oneDNN (libdnnl-dev)");
#endif
}

bt_status bt_cpu_f32_init(void)
{
    pthread_once(&f32_once, f32_choose);
    if (f32_error[0]) return bt_error(BT_ERR_UNSUPPORTED, "%s", f32_error);
    return BT_OK;
}

int bt_cpu_f32_onednn(void)
{
    pthread_once(&f32_once, f32_choose);
    return f32_onednn;
}

const char *bt_cpu_f32_describe(void)
{
    pthread_once(&f32_once, f32_choose);
    if (f32_error[0]) return f32_error;
    return f32_onednn ? "f32 GEMMs on oneDNN (threads per device)"
                      : "f32 GEMMs on OpenBLAS (one thread count per process)";
}

void bt_blas_bind_threads(int threads) { bound_threads = threads > 0 ? threads : 0; }

void bt_gemm_f32_note_threads(int used)
{
    int seen = atomic_load(&f32_threads_seen);
    while (used > seen && !atomic_compare_exchange_weak(&f32_threads_seen, &seen, used)) {}
}

int bt_gemm_f32_threads_seen(int reset)
{
    return reset ? atomic_exchange(&f32_threads_seen, 0) : atomic_load(&f32_threads_seen);
}

int bt_gemm_f32_onednn(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       int lda, const float *b, int ldb, float beta, float *c, int ldc)
{
#ifdef BATON_HAVE_DNNL
    if (!bt_cpu_f32_onednn()) return -1;
    if (bound_threads > 0 && omp_get_max_threads() != bound_threads)
        omp_set_num_threads(bound_threads);
    const int used = omp_get_max_threads();
    bt_gemm_f32_note_threads(used);
    /* oneDNN's matmul primitive (brgemm kernels, cached per shape in gemm_bf16.c) beat its
     * dnnl_sgemm by up to 1.5x on the MLP's shapes with 2 threads (256x1024x1024 with B
     * transposed: 209 against 137 GFLOP/s); dnnl_sgemm stays for a primitive that fails */
    if (bt_gemm_dnnl_f32(used, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, NULL, 0, c, ldc) == 0)
        return 0;
    return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb,
                      beta, c, ldc) == dnnl_success ? 0 : -1;
#else
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc;
    return -1;
#endif
}
