/* tests/cuda_emu/emu_threads.h: the CUDA thread model of the emulator (test harness only, never
 * installed), C linkage. emu_threads.c runs every CUDA thread of a block as a fiber (ucontext) of
 * one host thread; a fiber yields only at collective points (__syncthreads, warp shuffles,
 * __syncwarp), so the order threads run in is the scheduler's choice (BT_EMU_ORDER). emu_kernel.h
 * maps the CUDA built-ins of the kernels/ .cu files onto these functions. See docs/gpu.md. */
#ifndef BT_EMU_THREADS_H
#define BT_EMU_THREADS_H

#include <stddef.h>
#include <stdint.h>

#include <vector_types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The calling fiber's built-in indices, set by the scheduler before each switch to a fiber. */
extern __thread uint3 bt_emu_thread_idx;
extern __thread uint3 bt_emu_block_idx;
extern __thread dim3 bt_emu_block_dim;
extern __thread dim3 bt_emu_grid_dim;

/* 0 if a launch of grid x block with dyn_smem bytes of dynamic shared memory is valid; otherwise
 * records a fault naming kernel (bt_emu_fault) and returns -1. Limits: block x, y <= 1024, z <=
 * 64, x*y*z <= 1024; grid x < 2^31, y, z <= 65535; no dimension 0; dynamic shared memory <= 48 KiB
 * (the default without cudaFuncSetAttribute). */
int bt_emu_check_launch(dim3 grid, dim3 block, size_t dyn_smem, const char *kernel);

/* Runs body(ctx) over grid x block, each CUDA thread a fiber of the calling host thread. Blocks
 * run one at a time in the order BT_EMU_ORDER says (forward: lowest first; reverse; random with
 * BT_EMU_SEED); within a block the scheduler always resumes the lowest (forward), highest
 * (reverse) or a random (random) runnable thread, so a warp can run ahead of the others up to
 * its next collective point. Dynamic shared memory is poisoned (0xff bytes: NaN for floats)
 * before every block. A fault (partial barrier, barrier divergence, full-mask shuffle
 * in a partial warp, deadlock) is recorded with bt_emu_fault and ends the grid. Kernels never run
 * concurrently (a process-wide lock), so static __shared__ storage is safe. */
void bt_emu_run_grid(dim3 grid, dim3 block, size_t dyn_smem, void (*body)(void *ctx), void *ctx);

/* __syncthreads() of the calling fiber; file:line names the call site (every thread of a block
 * must wait at the same one). */
void bt_emu_syncthreads(const char *file, int line);

/* __syncwarp(mask). */
void bt_emu_syncwarp(unsigned mask, const char *file, int line);

enum bt_emu_shfl_kind { BT_EMU_SHFL_IDX, BT_EMU_SHFL_UP, BT_EMU_SHFL_DOWN, BT_EMU_SHFL_XOR };

/* A warp shuffle of the calling fiber: val (size bytes, at most 8) is replaced by the value of
 * the source lane once every lane of mask has arrived. A lane of mask outside the block (a
 * partial last warp) is a fault, as is a lane of mask that exited. */
void bt_emu_shfl(unsigned mask, void *val, size_t size, int kind, int arg, int width,
                 const char *file, int line);

/* The dynamic shared memory of the running block (extern __shared__ arrays). */
void *bt_emu_dynamic_smem(void);

/* For tests of the emulator: the order (0 forward, 1 reverse, 2 random) and seed from now on,
 * instead of BT_EMU_ORDER and BT_EMU_SEED. */
void bt_emu_set_order(int order, unsigned long seed);

/* The number of kernel grids run since the process started (for tests). */
unsigned long bt_emu_grids_run(void);

#ifdef __cplusplus
}
#endif

#endif
