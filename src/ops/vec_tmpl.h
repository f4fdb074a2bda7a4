/* ops/vec_tmpl.h: elementwise array loops for one float type (see ops/real.h), shared by the op
 * templates. They take their arrays as restrict parameters and run through BT_OPS_VLOOP: GCC at
 * -O2 vectorises a loop only when it needs no run-time alias check, and it learns that from
 * restrict parameters (also once inlined), not from restrict locals loaded out of a struct. An
 * output may not overlap an input; read-only inputs may be the same array. */

#include <string.h>

#include "core/util.h" /* BT_PARALLEL_FOR */

/* y = a + b */
static inline void R(vec_add)(const REAL *restrict a, const REAL *restrict b, REAL *restrict y,
                              int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = a[i] + b[i];);
}

/* y = a * b */
static inline void R(vec_mul)(const REAL *restrict a, const REAL *restrict b, REAL *restrict y,
                              int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = a[i] * b[i];);
}

/* y = max(y, 0) in place (a fused relu) */
static inline void R(vec_relu)(REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = y[i] > 0 ? y[i] : 0;);
}

/* g = 0 + (y > 0 ? g : 0) in place: a fused relu's backward, from its output y. The 0 + makes a
 * masked -0 a +0, exactly what relu's own backward accumulates into a zeroed gradient. The
 * selection is a bit mask (all ones where y > 0) ANDed into g's bits: GCC does not if-convert
 * the ?: for the baseline x86-64 target, and a branch on y > 0 mispredicts half the time (it
 * was a tenth of fashion-cnn's step, and conv2's backward took 19 ms instead of 12). */
static inline void R(vec_relu_mask)(const REAL *restrict y, REAL *restrict g, int64_t n)
{
    BT_OPS_VLOOP(i, n, {
        UREAL bits;
        memcpy(&bits, &g[i], sizeof bits);
        bits &= -(UREAL)(y[i] > 0);
        REAL v;
        memcpy(&v, &bits, sizeof v);
        g[i] = (REAL)0 + v;
    });
}

/* vec_relu_mask over `threads` threads, in blocks of whole cache lines (BT_PARALLEL_FOR) */
static inline void R(vec_relu_mask_par)(const REAL *y, REAL *g, int64_t n, int threads)
{
    const int64_t line = 64 / (int64_t)sizeof(REAL); /* elements per cache line */
    const int64_t per = threads > 1 ? (n / threads + line) / line * line : n;
    const int64_t blocks = per > 0 ? (n + per - 1) / per : 0;
    BT_PARALLEL_FOR(threads)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t at = b * per, len = n - at < per ? n - at : per;
        R(vec_relu_mask)(y + at, g + at, len);
    }
}

/* y += x */
static inline void R(vec_acc)(const REAL *restrict x, REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] += x[i];);
}

/* y += x * w */
static inline void R(vec_acc_mul)(const REAL *restrict x, const REAL *restrict w,
                                  REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] += x[i] * w[i];);
}

/* y = x * scale where mask is 1, 0 where it is 0 */
static inline void R(vec_mask_scale)(const REAL *restrict x, const unsigned char *restrict mask,
                                     REAL scale, REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = x[i] * (scale * (REAL)mask[i]););
}

/* y += x * scale where mask is 1 */
static inline void R(vec_acc_mask_scale)(const REAL *restrict x,
                                         const unsigned char *restrict mask, REAL scale,
                                         REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] += x[i] * (scale * (REAL)mask[i]););
}

/* sum of x in double. Eight independent partial sums keep the adds pipelined (a reduction is
 * not vectorised without -ffast-math); the order is fixed, so the result is deterministic. */
static inline double R(vec_sum)(const REAL *restrict x, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += x[i + k];
    double s = 0;
    for (; i < n; i++) s += x[i];
    return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* sum of (x - c)^2 in double, as vec_sum. */
static inline double R(vec_sumsq_centered)(const REAL *restrict x, double c, int64_t n)
{
    double acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) {
            const double d = x[i + k] - c;
            acc[k] += d * d;
        }
    double s = 0;
    for (; i < n; i++) s += (x[i] - c) * (x[i] - c);
    return s + ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* y = v */
static inline void R(vec_fill)(REAL v, REAL *restrict y, int64_t n)
{
    BT_OPS_VLOOP(i, n, y[i] = v;);
}
