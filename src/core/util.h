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
/* BT_PARALLEL_FOR_EACH(threads): the same for a few iterations of unequal cost (a stage's
 * tensors), handed out one at a time (schedule(dynamic, 1)); each still writes only its own
 * outputs, so the results do not depend on which thread ran which. */
#if defined(_OPENMP) && !defined(__SANITIZE_THREAD__)
#define BT_PARALLEL_FOR(threads) \
    BT_PRAGMA(omp parallel for num_threads(threads) if ((threads) > 1) schedule(static))
#define BT_PARALLEL_FOR_EACH(threads) \
    BT_PRAGMA(omp parallel for num_threads(threads) if ((threads) > 1) schedule(dynamic, 1))
#else
#define BT_PARALLEL_FOR(threads)
#define BT_PARALLEL_FOR_EACH(threads)
#endif

/* BT_VCLONES before a loop function compiles it also for AVX2+FMA and AVX-512 (x86-64-v3, -v4),
 * the copy chosen once at load time by the CPU (GCC's target_clones, an ifunc): the build's
 * baseline is SSE2, 4 floats a vector. The build is ISO C (-std=c11), where GCC does not contract
 * a * b + c into an FMA, so a loop of IEEE operations (+ - * / sqrt, integer bit work) gives the
 * same bits in every copy; only code calling FMA itself would differ between machines. Only on
 * static functions: GCC 12 exports a non-static one's dispatcher (an ifunc) whatever its
 * visibility, so an extern entry calls a static cloned loop. Not under
 * the sanitizers: a ThreadSanitizer program with an ifunc crashes at start (its resolver runs
 * before TSan is set up; seen with GCC 12), so sanitizer builds run the SSE2 copy. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__) && defined(__linux__)
#define BT_VCLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BT_VCLONES
#endif

#endif
