/* core/util.h: small helpers every layer uses: the splitmix64 mixer behind every seeded stream in
 * baton (initial weights, dropout seeds, data order, synthetic data), a monotonic clock, and a
 * median. One definition each, so seeded streams stay the same wherever they are drawn. */
#ifndef BT_CORE_UTIL_H
#define BT_CORE_UTIL_H

#include <stdint.h>

/* splitmix64's finaliser of x + the golden-ratio increment: a well-mixed 64-bit hash of x. */
static inline uint64_t bt_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The next value of the splitmix64 stream whose state is *s (advances *s). */
static inline uint64_t bt_rng_next(uint64_t *s)
{
    uint64_t x = bt_mix64(*s);
    *s += 0x9e3779b97f4a7c15ULL;
    return x;
}

/* CLOCK_MONOTONIC in milliseconds. */
double bt_now_ms(void);

/* The median of v[0..n) (the mean of the middle two when n is even); sorts v. 0 when n < 1. */
double bt_median(double *v, int n);

/* BT_PARALLEL_FOR(threads) before a `for` loop whose iterations are independent (each writes
 * only its own outputs) runs them on `threads` OpenMP threads (an int variable or expression
 * without side effects), each taking one contiguous block of iterations (schedule(static)): the
 * results are the serial loop's, bit for bit. It is how the CPU kernels' own loops (ops/ and cpu/:
 * pools, masks, rounding) use a device's threads, in the OpenMP runtime oneDNN's kernels already
 * run on, so the two never oversubscribe the cores. One thread runs the loop when threads <= 1, in builds without
 * OpenMP (configure's AC_OPENMP), and under ThreadSanitizer (libgomp is not instrumented: its
 * barriers would read as races). */
#define BT_PRAGMA(x) _Pragma(#x)
#if defined(_OPENMP) && !defined(__SANITIZE_THREAD__)
#define BT_PARALLEL_FOR(threads) \
    BT_PRAGMA(omp parallel for num_threads(threads) if ((threads) > 1) schedule(static))
#else
#define BT_PARALLEL_FOR(threads)
#endif

#endif
