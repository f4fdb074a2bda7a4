/* core/half.h: bf16 and f16 rounding and conversion for mixed precision and 16-bit files.
 *
 * Mixed precision keeps tensors f32 in memory and rounds values to the compute precision: an f32
 * rounded "to bf16" or "to f16" is the f32 holding the nearest bf16/f16 value, so it converts to
 * that format exactly. Rounding is IEEE 754 round to nearest, ties to even, as a hardware
 * conversion does (x86 F16C, CUDA's __float2bfloat16_rn / __float2half_rn):
 *
 *   bf16 (8 exponent bits, 7 fraction bits): the f32 range; values at or beyond max + half an ulp
 *        (3.3961e38, the tie rounds up to the even 0x7f80) become infinity; f32 subnormals round
 *        to bf16 subnormals.
 *   f16  (5 exponent bits, 10 fraction bits): |x| >= 65520 (65504 + half an ulp) becomes
 *        infinity; below 2^-14 values round to the subnormal grid of 2^-24, and |x| <= 2^-25 (half
 *        the smallest subnormal; the tie goes to the even zero) becomes a zero of x's sign.
 *
 * Signs are kept (negative zero stays negative zero), infinities stay infinities, and a NaN stays
 * a NaN: it is made quiet and keeps the top of its payload that fits the 16-bit format, as the
 * hardware conversions do.
 *
 * The scalar functions and bt_round_array_portable assume the default floating-point
 * environment (round to nearest): the f16 subnormal path rounds with one float addition. */
#ifndef BT_CORE_HALF_H
#define BT_CORE_HALF_H

#include <stddef.h>
#include <stdint.h>

#include "baton/tensor.h"

/* x rounded to the nearest bf16 / f16 value, as an f32. */
float bt_round_bf16(float x);
float bt_round_f16(float x);

/* Rounds x[0..n) in place to precision: BT_BF16 or BT_F16 as the scalar functions; BT_F32 (and
 * any other dtype) leaves x alone. On x86-64 CPUs with F16C the f16 case uses the hardware
 * conversion (identical results); otherwise, and for bf16, a branch-free loop the compiler
 * vectorises. */
void bt_round_array(bt_dtype precision, float *x, size_t n);

/* dst[0..n) = x[0..n) rounded to precision as bt_round_array does (BT_F32: copied), in one pass;
 * dst and x do not overlap. */
void bt_round_copy(bt_dtype precision, float *restrict dst, const float *restrict x, size_t n);

/* bt_round_array without the F16C path (the fallback, kept callable so tests check it too). */
void bt_round_array_portable(bt_dtype precision, float *x, size_t n);

/* 1 when bt_round_array takes the F16C path for f16 on this CPU. */
int bt_round_f16_hw(void);

/* Bit-level conversions (safetensors BF16/F16 tensors). To 16 bits: rounded as above. From 16
 * bits: exact (every bf16 and f16 value, subnormals included, is an f32). */
uint16_t bt_f32_to_bf16_bits(float x);
float bt_bf16_bits_to_f32(uint16_t bits);
uint16_t bt_f32_to_f16_bits(float x);
float bt_f16_bits_to_f32(uint16_t bits);

/* Storage of values that are already bf16 (activations under precision bf16, exec/bf16_store.c):
 * bt_bf16_pack writes the upper half of each of x[0..n) into dst and returns the OR of the lower
 * halves it dropped, 0 exactly when every x[i] was a bf16 value (so the packing was exact);
 * bt_bf16_unpack writes them back as f32 (always exact). Plain loops over uint32 that vectorise:
 * no rounding is needed, since truncating a bf16 value is exact. */
uint32_t bt_bf16_pack(uint16_t *dst, const float *x, size_t n);
void bt_bf16_unpack(float *dst, const uint16_t *src, size_t n);

#endif
