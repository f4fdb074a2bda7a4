/* ops/real.h: the names an op template (<family>_tmpl.h) builds against, for one float type.
 * Include it after defining BT_REAL_BITS as 32 or 64; it replaces whatever an earlier inclusion
 * defined, so a .c file instantiates its template twice:
 *     #define BT_REAL_BITS 32 / #include "ops/real.h" / #include "ops/x_tmpl.h"
 *     #undef BT_REAL_BITS / #define BT_REAL_BITS 64 / #include "ops/real.h" / ... again.
 * REAL is the element type (UREAL the unsigned integer of its width), R(name) the instance's function name, GEMM the BLAS call (GEMM_AT(call,
 * ...) the one at the call's precision: bf16 GEMMs on oneDNN, see cpu/blas.h; GEMM_W(call,
 * BT_GEMM_PARAM_A or _B, ...) the same with that operand a parameter, whose conversion is kept), and the
 * math names map to the float or double libm functions; EXP_V and ERF_V are the f32 vectorisable
 * approximations of ops/fastmath.h (libm's exp and erf for f64). Reductions accumulate in double. */
#include <math.h>
#include <stdint.h>

#include "cpu/blas.h"
#include "ops/fastmath.h"

#undef REAL
#undef UREAL
#undef R
#undef GEMM
#undef GEMM_AT
#undef GEMM_W
#undef EXP
#undef LOG
#undef TANH
#undef ERF
#undef SQRT
#undef EXP_V
#undef ERF_V

#if BT_REAL_BITS == 32
#define REAL float
#define UREAL uint32_t /* an unsigned integer as wide as REAL (bit masks) */
#define R(name) name##_f32
#define GEMM bt_sgemm
#define GEMM_AT(call, ...) bt_gemm_at((call)->precision, (call)->threads, __VA_ARGS__)
#define GEMM_W(call, which, ...) bt_gemm_param((call)->precision, (call)->threads, which, __VA_ARGS__)
#define EXP expf
#define LOG logf
#define TANH tanhf
#define ERF erff
#define SQRT sqrtf
#define EXP_V bt_fast_expf /* vectorisable, within 2 ulp (ops/fastmath.h) */
#define ERF_V bt_fast_erff /* vectorisable, absolute error < 5.3e-7 */
#elif BT_REAL_BITS == 64
#define REAL double
#define UREAL uint64_t
#define R(name) name##_f64
#define GEMM bt_dgemm
#define GEMM_AT(call, ...) bt_dgemm(__VA_ARGS__)
#define GEMM_W(call, which, ...) bt_dgemm(__VA_ARGS__)
#define EXP exp
#define LOG log
#define TANH tanh
#define ERF erf
#define SQRT sqrt
#define EXP_V exp
#define ERF_V erf
#else
#error "define BT_REAL_BITS as 32 or 64 before including ops/real.h"
#endif
