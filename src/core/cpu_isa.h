/* core/cpu_isa.h: the instruction sets run-time dispatch may use (the CPU's, capped by
 * BATON_CPU_ISA); see cpu_isa.c. */
#ifndef BT_CORE_CPU_ISA_H
#define BT_CORE_CPU_ISA_H

#include "baton/status.h"

typedef enum {
    BT_ISA_BASELINE = 0, /* x86-64's SSE2, or not x86-64 */
    BT_ISA_AVX2 = 1,     /* AVX2 and FMA */
    BT_ISA_AVX512 = 2    /* AVX-512 F, BW, DQ and VL */
} bt_cpu_isa;

/* The level kernels may use: the CPU's, or AVX2 under BATON_CPU_ISA=avx2. Cheap after the first
 * call; safe from any thread. */
bt_cpu_isa bt_cpu_isa_level(void);
/* 1 when BATON_CPU_ISA lowered the level below the CPU's. */
int bt_cpu_isa_capped(void);
/* BT_ERR_UNSUPPORTED, naming the variable, for an unknown value or a cap the CPU cannot give. */
bt_status bt_cpu_isa_check(void);
const char *bt_cpu_isa_name(bt_cpu_isa isa);
/* "AVX-512", or "AVX2+FMA (capped by BATON_CPU_ISA=avx2; the CPU has AVX-512)"; static storage. */
const char *bt_cpu_isa_describe(void);

#endif
