/* cpu/blas.c: GEMM for the CPU backend. OpenBLAS is opened at run time rather than linked, so
 * baton can pick its kernels before OpenBLAS initialises: Debian's OpenBLAS 0.3.21 does not
 * recognise recent Xeons and falls back to SSE kernels about 5x slower. When the user has not set
 * OPENBLAS_CORETYPE (or BATON_BLAS_CORETYPE, which wins), baton sets it from the CPU's features
 * (AVX-512 F/BW/DQ/VL: SkylakeX; AVX2+FMA: Haswell; core/cpu_isa.c) just before the dlopen. Under
 * BATON_CPU_ISA=avx2 it is Haswell whatever OPENBLAS_CORETYPE says (BATON_BLAS_CORETYPE still
 * wins), so the cap reaches OpenBLAS too. If OpenBLAS is missing
 * a plain C GEMM keeps everything correct, only slower; bt_blas_describe says which is in use.
 * bt_sgemm goes to oneDNN's sgemm first where gemm_f32.c chose that path (threads per device). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "core/cpu_isa.h"
#include "core/error.h"
#include "cpu/blas.h"

#ifndef BATON_OPENBLAS_SONAME
#define BATON_OPENBLAS_SONAME "libopenblas.so.0"
#endif

enum { CBLAS_ROW_MAJOR = 101, CBLAS_NO_TRANS = 111, CBLAS_TRANS = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
                         const double *, int, double, double *, int);
typedef void (*set_threads_fn)(int);
typedef char *(*corename_fn)(void);

static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static sgemm_fn blas_sgemm;
static dgemm_fn blas_dgemm;
static set_threads_fn blas_set_threads;
static char blas_desc[256] = "builtin GEMM (OpenBLAS not loaded)";
static pthread_mutex_t threads_mu = PTHREAD_MUTEX_INITIALIZER;
static int threads_now;   /* OpenBLAS's count (set to 1 on load); fixed while threads_users > 0 */
static int threads_users; /* open devices relying on it */

static const char *coretype_for_cpu(void)
{
    switch (bt_cpu_isa_level()) {
    case BT_ISA_AVX512: return "SkylakeX";
    case BT_ISA_AVX2: return "Haswell";
    default: return NULL;
    }
}

static void blas_load(void)
{
    const char *chosen = getenv("BATON_BLAS_CORETYPE");
    const char *user = getenv("OPENBLAS_CORETYPE");
    void *already = dlopen(BATON_OPENBLAS_SONAME, RTLD_NOW | RTLD_NOLOAD);
    if (!already) {
        if (chosen && *chosen) setenv("OPENBLAS_CORETYPE", chosen, 1);
        else if ((!user || bt_cpu_isa_capped()) && (chosen = coretype_for_cpu()))
            setenv("OPENBLAS_CORETYPE", chosen, 1);
    } else {
        dlclose(already);
    }
    void *h = dlopen(BATON_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    blas_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
    blas_dgemm = (dgemm_fn)dlsym(h, "cblas_dgemm");
    blas_set_threads = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
    corename_fn corename = (corename_fn)dlsym(h, "openblas_get_corename");
    if (!blas_sgemm || !blas_dgemm) {
        blas_sgemm = NULL;
        blas_dgemm = NULL;
        return;
    }
    if (blas_set_threads) blas_set_threads(1);
    threads_now = 1; /* before any claim: pthread_once orders it */
    snprintf(blas_desc, sizeof blas_desc, "OpenBLAS (%s kernels%s)",
             corename ? corename() : "default", already ? ", loaded before baton" : "");
}

bt_status bt_blas_init(void)
{
    pthread_once(&blas_once, blas_load);
    return BT_OK;
}

const char *bt_blas_describe(void)
{
    bt_blas_init();
    return blas_desc;
}

/* OpenBLAS's thread count is one number for the process (its pthreads build reads it on every
 * call), so it is set here only, under a mutex, when the first CPU device claims it; later devices
 * must ask for the same count. Worker threads never write it: concurrent writes were a race, and
 * "threads per device" was whichever worker wrote last. */

bt_status bt_blas_claim_threads(int *threads, int strict)
{
    bt_blas_init();
    int n = *threads < 1 ? 1 : *threads;
    bt_status st = BT_OK;
    const int per_device = bt_cpu_f32_onednn(); /* f32 on OpenMP teams per calling thread */
    pthread_mutex_lock(&threads_mu);
    if (threads_users > 0 && !strict && !per_device) n = threads_now;
    *threads = n;
    if (threads_users > 0 && n != threads_now && !per_device) {
        st = bt_error(BT_ERR_UNSUPPORTED,
                      "OpenBLAS has one thread count per process and the CPU devices already open use %d: "
                      "cannot open one with %d",
                      threads_now, n);
    } else {
        if (threads_users == 0 && n != threads_now) {
            if (blas_set_threads) blas_set_threads(n);
            threads_now = n;
        }
        threads_users++;
    }
    pthread_mutex_unlock(&threads_mu);
    return st;
}

void bt_blas_release_threads(void)
{
    pthread_mutex_lock(&threads_mu);
    if (threads_users > 0) threads_users--;
    pthread_mutex_unlock(&threads_mu);
}

/* Plain C GEMM used without OpenBLAS: i-k-j order over a row-major C so the inner loop runs
 * contiguously over B's and C's rows. */
#define BT_DEFINE_FALLBACK_GEMM(NAME, T)                                                         \
    static void NAME(int ta, int tb, int m, int n, int k, T alpha, const T *a, int lda,          \
                     const T *b, int ldb, T beta, T *c, int ldc)                                 \
    {                                                                                            \
        for (int i = 0; i < m; i++) {                                                            \
            T *crow = c + (size_t)i * ldc;                                                       \
            for (int j = 0; j < n; j++) crow[j] = beta == 0 ? 0 : beta * crow[j];                \
            for (int p = 0; p < k; p++) {                                                        \
                T av = alpha * (ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]);           \
                if (av == 0) continue;                                                           \
                if (!tb) {                                                                       \
                    const T *brow = b + (size_t)p * ldb;                                         \
                    for (int j = 0; j < n; j++) crow[j] += av * brow[j];                         \
                } else {                                                                         \
                    for (int j = 0; j < n; j++) crow[j] += av * b[(size_t)j * ldb + p];          \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }

BT_DEFINE_FALLBACK_GEMM(fallback_sgemm, float)
BT_DEFINE_FALLBACK_GEMM(fallback_dgemm, double)

void bt_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc)
{
    bt_blas_init();
    if (m == 0 || n == 0) return;
    if (k > 0 && bt_gemm_f32_onednn(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) == 0)
        return;
    if (blas_sgemm)
        blas_sgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
    else
        fallback_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void bt_dgemm(int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a,
              int lda, const double *b, int ldb, double beta, double *c, int ldc)
{
    bt_blas_init();
    if (m == 0 || n == 0) return;
    if (blas_dgemm)
        blas_dgemm(CBLAS_ROW_MAJOR, trans_a ? CBLAS_TRANS : CBLAS_NO_TRANS,
                   trans_b ? CBLAS_TRANS : CBLAS_NO_TRANS, m, n, k, alpha, a, lda, b, ldb, beta, c,
                   ldc);
    else
        fallback_dgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
