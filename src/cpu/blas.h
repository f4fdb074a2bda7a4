/* cpu/blas.h: the BLAS baton uses on the CPU, loaded at run time. On first use baton picks
 * OpenBLAS kernels for the running CPU (setting OPENBLAS_CORETYPE when the user has not and the
 * CPU supports them; Debian's OpenBLAS 0.3.21 does not recognise newer Xeons and otherwise falls
 * back to kernels about 5x slower), then opens OpenBLAS. Without OpenBLAS a plain C GEMM is used.
 * Row-major only. Thread-safe. */
#ifndef BT_CPU_BLAS_H
#define BT_CPU_BLAS_H

#include "baton/status.h"
#include "baton/tensor.h"

/* Loads the BLAS once; later calls return the first result. */
bt_status bt_blas_init(void);
/* "OpenBLAS 0.3.21 (SkylakeX kernels, 1 thread)" or "builtin GEMM". */
const char *bt_blas_describe(void);
/* Claims OpenBLAS's thread count (one per process in its pthreads build) for one more CPU device:
 * sets it to *threads (< 1: 1) when no device holds it; else a strict claim must ask for the
 * count in effect (BT_ERR_UNSUPPORTED naming both) and a preference takes it. *threads is the
 * count the device got. With f32 GEMMs on oneDNN (bt_cpu_f32_onednn) every device keeps its own
 * count (OpenBLAS then serves f64 only, at the first device's count). Each successful claim is
 * released once. Thread-safe. */
bt_status bt_blas_claim_threads(int *threads, int strict);
void bt_blas_release_threads(void);

/* ---- f32 GEMMs: oneDNN (threads per calling thread) or OpenBLAS (gemm_f32.c) ---------------- */

/* Chooses, once per process, the library bt_sgemm uses: oneDNN's sgemm (auto, where the build has
 * oneDNN) or OpenBLAS; BATON_CPU_F32 (auto | onednn | openblas) forces one. BT_ERR_UNSUPPORTED
 * when the forced one cannot be had or the value is unknown. */
bt_status bt_cpu_f32_init(void);
/* 1 when bt_sgemm runs on oneDNN with the calling thread's bound count. */
int bt_cpu_f32_onednn(void);
/* "f32 GEMMs on oneDNN (threads per device)", or the OpenBLAS line, or the error. */
const char *bt_cpu_f32_describe(void);
/* The calling thread's f32 GEMMs run with this many threads (oneDNN path); the CPU backend binds
 * every op call to its device's count. 0: unbound (OpenMP's own count). */
void bt_blas_bind_threads(int threads);
/* oneDNN's sgemm on the calling thread's count: 0, or -1 when not on that path (or it failed;
 * the caller then uses OpenBLAS). */
int bt_gemm_f32_onednn(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                       int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* The largest thread count an f32 GEMM on oneDNN has run with since the last reset (tests), and
 * how a GEMM on that path records its count. */
int bt_gemm_f32_threads_seen(int reset);
void bt_gemm_f32_note_threads(int used);
/* C = alpha op(A) op(B) + beta C (+ bias in every row, then max(C, 0) if relu) with f32 operands
 * read in place, on `threads` OpenMP threads, by a oneDNN matmul primitive cached per shape and
 * thread (gemm_bf16.c): 0, or -1 when it cannot (no oneDNN, an empty product, a oneDNN failure;
 * the caller then computes C another way). */
int bt_gemm_dnnl_f32(int threads, int trans_a, int trans_b, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, const float *bias,
                     int relu, float *c, int ldc);

/* C = alpha * op(A) * op(B) + beta * C, row-major. op(A) is M x K, op(B) is K x N, C is M x N.
 * lda, ldb, ldc are row strides of A, B, C as stored. */
void bt_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);
void bt_dgemm(int trans_a, int trans_b, int m, int n, int k, double alpha, const double *a, int lda,
              const double *b, int ldb, double beta, double *c, int ldc);

/* ---- bf16 matrix products (gemm_bf16.c) ------------------------------------------------------- */

/* Chooses, once per process, how `precision: bf16` multiplies on this CPU: oneDNN on AMX, oneDNN on
 * AVX512-BF16, or the rounded operands through sgemm; BATON_CPU_BF16 (auto | amx | avx512_bf16 |
 * f32) forces one. BT_ERR_UNSUPPORTED when the forced path cannot be had (or the value is unknown). */
bt_status bt_cpu_bf16_init(void);
/* "bf16 on AMX (oneDNN brg:avx512_core_amx)", or the reason for the f32 path. */
const char *bt_cpu_bf16_describe(void);
/* 1 when bf16 GEMMs run in bf16 (oneDNN), 0 when in f32. */
int bt_cpu_bf16_native(void);
/* C = alpha op(A) op(B) + beta C like bt_sgemm, for a kernel computing at `precision` with
 * `threads` threads: under BT_BF16 with a native path A and B (whose values must be bf16 values,
 * as mixed precision guarantees; others are rounded) are multiplied in bf16 with f32 accumulation on
 * `threads` OpenMP threads of the calling thread; otherwise bt_sgemm. */
void bt_gemm_at(bt_dtype precision, int threads, int trans_a, int trans_b, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                int ldc);
/* bt_gemm_at where operand A (param & BT_GEMM_PARAM_A) or B (BT_GEMM_PARAM_B) is a parameter's
 * compute copy: memory that only backend calls write (the engine's refresh after an update). Its
 * bf16 conversion is kept until bt_gemm_bf16_forget is told of a write to that memory. */
#define BT_GEMM_PARAM_A 1
#define BT_GEMM_PARAM_B 2
void bt_gemm_param(bt_dtype precision, int threads, int param, int trans_a, int trans_b, int m,
                   int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc);
/* C (m, n) = op(A) op(B) + bias (n, added to every row), then max(C, 0) if relu, like
 * bt_gemm_param: on oneDNN bias and relu are applied in the matmul's epilogue (one pass over C);
 * otherwise C's rows are set to the bias, bt_gemm_param adds the product (beta 1), the f32 kernels'
 * arithmetic, and a pass applies the relu. */
void bt_gemm_bias(bt_dtype precision, int threads, int param, int trans_a, int trans_b, int m,
                  int n, int k, const float *a, int lda, const float *b, int ldb, const float *bias,
                  int relu, float *c, int ldc);
/* Marks the kept bf16 conversions of parameters overlapping [ptr, ptr + bytes) out of date (the
 * next GEMM reading one converts it again, into the buffer it keeps): every CPU backend call that
 * writes memory calls it (round_copy refreshes them as it writes instead: cpu/bf16_params.h).
 * Cheap when nothing up to date is kept. Thread-safe. */
void bt_gemm_bf16_forget(const void *ptr, size_t bytes);
/* Drops them, buffers and all: the backend's free calls it. Thread-safe. */
void bt_gemm_bf16_release(const void *ptr, size_t bytes);
/* Parameter conversions made by GEMMs so far, and kept copies rewritten in place by round_copy
 * (tests: a weight is converted once per write, by one or the other). */
long long bt_gemm_bf16_conversions(void);
long long bt_gemm_bf16_refreshes(void);
/* 0: convert parameters on every call like other operands (tests compare the two); 1: keep them. */
void bt_gemm_bf16_param_cache(int enable);
/* The calling thread's first bt_gemm_at failure since the last call (a status with its message),
 * or BT_OK; clears it. The CPU backend checks it after every op. */
bt_status bt_gemm_take_error(void);
/* The largest thread count a bf16 GEMM has run with since the last reset (tests); reset: 1 clears. */
int bt_gemm_bf16_threads_seen(int reset);

#endif
