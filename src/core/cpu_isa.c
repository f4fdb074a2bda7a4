/* core/cpu_isa.c: the x86-64 instruction sets baton's run-time dispatch may use, read once per
 * process: what the CPU offers, capped by BATON_CPU_ISA.
 *
 * Every kernel that picks a path by CPU feature at run time asks here (the AVX-512 pools and
 * blocked copies, OpenBLAS's core type in cpu/blas.c, oneDNN's ISA limit in cpu/gemm_bf16.c), so
 * one variable moves all of them onto the paths of a lesser CPU:
 *   BATON_CPU_ISA = auto (default: the CPU's own) | avx2 (no AVX-512 anywhere: oneDNN limited to
 *   AVX2, OpenBLAS's Haswell kernels, baton's AVX2/scalar loops)
 * That is how a suite run on an AVX-512 machine checks what an AVX2-only one would run
 * (scripts/check.sh's asan job). A cap the CPU cannot give (avx2 without AVX2 and FMA), or an
 * unknown value, is an error when the first CPU device opens (bt_cpu_isa_check), never a silent
 * fallback; until then the level reads as the CPU's, uncapped by the bad value.
 *
 * The compiler's clones (BT_VCLONES, core/util.h) are chosen by the loader from the CPU alone
 * and are not capped: their copies give the same bits by construction (ISO C, no contraction),
 * and the sanitizer jobs run the baseline copy. */
#include "core/cpu_isa.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static bt_cpu_isa isa_cpu = BT_ISA_BASELINE; /* the CPU's */
static bt_cpu_isa isa_used = BT_ISA_BASELINE; /* after the cap */
static int isa_capped;
static char isa_error[160];

static bt_cpu_isa cpu_level(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return BT_ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return BT_ISA_AVX2;
#endif
    return BT_ISA_BASELINE;
}

static void isa_read(void)
{
    isa_cpu = isa_used = cpu_level();
    const char *want = getenv("BATON_CPU_ISA");
    if (!want || !*want || strcmp(want, "auto") == 0) return;
    if (strcmp(want, "avx2") != 0) {
        snprintf(isa_error, sizeof isa_error, "BATON_CPU_ISA=%.40s: expected auto or avx2", want);
        return;
    }
    if (isa_cpu < BT_ISA_AVX2) {
        snprintf(isa_error, sizeof isa_error,
                 "BATON_CPU_ISA=avx2: this CPU does not offer AVX2 and FMA");
        return;
    }
    isa_used = BT_ISA_AVX2;
    isa_capped = isa_cpu > BT_ISA_AVX2;
}

bt_cpu_isa bt_cpu_isa_level(void)
{
    pthread_once(&isa_once, isa_read);
    return isa_used;
}

int bt_cpu_isa_capped(void)
{
    pthread_once(&isa_once, isa_read);
    return isa_capped;
}

bt_status bt_cpu_isa_check(void)
{
    pthread_once(&isa_once, isa_read);
    if (isa_error[0]) return bt_error(BT_ERR_UNSUPPORTED, "%s", isa_error);
    return BT_OK;
}

const char *bt_cpu_isa_name(bt_cpu_isa isa)
{
    return isa == BT_ISA_AVX512 ? "AVX-512" : isa == BT_ISA_AVX2 ? "AVX2+FMA" : "SSE2";
}

const char *bt_cpu_isa_describe(void)
{
    static char desc[120];
    pthread_once(&isa_once, isa_read);
    if (isa_capped)
        snprintf(desc, sizeof desc, "%s (capped by BATON_CPU_ISA=avx2; the CPU has %s)",
                 bt_cpu_isa_name(isa_used), bt_cpu_isa_name(isa_cpu));
    else
        snprintf(desc, sizeof desc, "%s", bt_cpu_isa_name(isa_used));
    return desc;
}
