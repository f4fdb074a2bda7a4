/* cpu/blocked16.h: copies between baton's NCHW f32 tensors and the channel-blocked layout that
 * oneDNN's convolutions prefer (nChw16c, oneDNN's aBcd16b): element (n, c, p) of an [N, C, HW]
 * tensor at ((n * ceil(C / 16) + c / 16) * HW + p) * 16 + c % 16, the channels padded to a
 * multiple of 16. cpu/conv_onednn.c uses them in place of oneDNN's reorders, because each fuses
 * a pass the conv path needs anyway:
 *   - into the blocked layout as f32 or as bf16 (rounded to nearest even, as core/half.c rounds:
 *     subnormals kept, NaN quieted), the padding channels written as zeros;
 *   - out of it (f32, or bf16 widened exactly) as a copy, a copy rounded to bf16 (the forward's
 *     output under mixed precision: the executor's rounding pass, fused), or added to what the
 *     destination holds (a gradient).
 * 16 x 16 tiles transposed in AVX-512 registers; the (sample, 16-channel block) pairs are shared
 * among `threads` OpenMP threads. Only where the CPU has AVX-512F (bt_blocked16_available): the
 * caller keeps oneDNN's reorders elsewhere. Results are bit for bit what the reorder (and the
 * rounding pass) give, except that a bf16 conversion keeps subnormals. */
#ifndef BT_CPU_BLOCKED16_H
#define BT_CPU_BLOCKED16_H

#include <stdint.h>

enum { BT_BLOCKED16_COPY = 0, BT_BLOCKED16_ROUND_BF16 = 1, BT_BLOCKED16_ADD = 2 };

/* 1 where this build and CPU run the copies below (x86-64 with AVX-512F). */
int bt_blocked16_available(void);

/* src [n, c, hw] NCHW f32 -> dst nChw16c, f32 (bf16 = 0) or bf16 bit patterns (bf16 = 1). */
void bt_blocked16_from_nchw(const float *src, void *dst, int bf16, int64_t n, int64_t c, int64_t hw,
                            int threads);

/* src nChw16c, f32 (bf16 = 0) or bf16 bit patterns (bf16 = 1) -> dst [n, c, hw] NCHW f32: mode
 * BT_BLOCKED16_COPY, _ROUND_BF16 or _ADD. */
void bt_blocked16_to_nchw(const void *src, int bf16, float *dst, int mode, int64_t n, int64_t c,
                          int64_t hw, int threads);

/* Tests: 1 runs the scalar loops (what a CPU without AVX-512 runs) whatever the CPU; 0 undoes it. */
void bt_blocked16_force_scalar(int on);

#endif
