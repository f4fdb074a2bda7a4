/* cpu/bf16_params.h: bf16 conversion of GEMM operands and the process-wide cache of parameters'
 * bf16 copies (cpu/bf16_params.c), shared by the bf16 GEMMs (gemm_bf16.c) and the backend's
 * writes (backend_cpu.c). The public side of the cache (forget, release, the counters) is in
 * cpu/blas.h. */
#ifndef BT_CPU_BF16_PARAMS_H
#define BT_CPU_BF16_PARAMS_H

#include <stddef.h>
#include <stdint.h>

/* dst (rows, cols) = src (rows, cols; row stride ld) in bf16, rounded to nearest even (a NaN
 * kept, made quiet), the rows shared among `threads` (OpenMP) when large enough to repay it. */
void bt_bf16_convert(const float *src, int rows, int cols, int ld, uint16_t *dst, int threads);

/* A kept bf16 copy of a parameter operand. */
typedef struct bt_bf16_param bt_bf16_param;

/* The bf16 copy of a parameter operand (rows, cols; stride ld), converted now unless kept and up
 * to date; NULL when it cannot be kept (the caller converts the operand itself). The copy is
 * neither changed nor freed until bt_bf16_param_release. */
bt_bf16_param *bt_bf16_param_acquire(const float *src, int rows, int cols, int ld, int threads);
const uint16_t *bt_bf16_param_data(const bt_bf16_param *p);
void bt_bf16_param_release(bt_bf16_param *p);

/* Rewriting parameters' compute copies in place (the backend's round_copy): begin marks every
 * kept copy overlapping [dst, dst + n) out of date, as bt_gemm_bf16_forget does, and takes hold
 * of those that lie wholly inside it as contiguous rows (at most BT_BF16_REFRESH of them); after
 * the writer has written a block [at, at + len) of dst, block converts that block's part of each
 * into its copy (while the values are still in cache); end marks them up to date and lets go.
 * Every element of [dst, dst + n) must be written and passed to block exactly once between begin
 * and end; blocks may run on several threads at once. The copies are bit for bit what acquire
 * would convert. */
#define BT_BF16_REFRESH 128 /* the cache holds at most 128 copies (bf16_params.c) */
typedef struct bt_bf16_refresh {
    int n;
    bt_bf16_param *p[BT_BF16_REFRESH];
} bt_bf16_refresh;
void bt_bf16_refresh_begin(bt_bf16_refresh *r, const float *dst, size_t n);
void bt_bf16_refresh_block(const bt_bf16_refresh *r, const float *at, size_t len);
void bt_bf16_refresh_end(bt_bf16_refresh *r);

#endif
