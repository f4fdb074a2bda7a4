/* tests/cuda_emu/emu_threads.c: the emulator's CUDA thread model (emu_threads.h). Every CUDA
 * thread of a block is a fiber (ucontext, its own stack with a guard page) of the host thread
 * that runs the grid; fibers yield only at collective points, where this scheduler checks what
 * the hardware would not forgive:
 *   - a __syncthreads that only part of the block reaches (the others exited, or wait elsewhere),
 *     and threads of one block waiting at different __syncthreads call sites;
 *   - a warp shuffle whose mask names lanes that are not in the block (a full-mask shuffle in a
 *     partial last warp), or lanes that exited, or lanes of one warp at different shuffles;
 *   - launch limits (bt_emu_check_launch).
 * Which runnable thread goes next is BT_EMU_ORDER's choice (forward, reverse, random with
 * BT_EMU_SEED), so one warp runs ahead of the others up to its next barrier: a reduction that
 * lost a barrier reads shared memory the other warps have not written yet (dynamic shared
 * memory is poisoned with 0xff bytes before every block; static __shared__ keeps an earlier
 * block's values). Faults go to bt_emu_fault (emu_runtime.h) and end the grid.
 * BT_EMU_STACK_KB sets the fibers' stack size (default 256). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "emu_threads.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "emu_runtime.h"

/* Under AddressSanitizer every switch between stacks is announced, or ASan takes a fiber's
 * frames for overflows of the host thread's stack. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ASAN_START(save, bottom, size) __sanitizer_start_switch_fiber(save, bottom, size)
#define ASAN_FINISH(save, bottom, size) __sanitizer_finish_switch_fiber(save, bottom, size)
#else
#define ASAN_START(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define ASAN_FINISH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

__thread uint3 bt_emu_thread_idx;
__thread uint3 bt_emu_block_idx;
__thread dim3 bt_emu_block_dim;
__thread dim3 bt_emu_grid_dim;


enum { F_RUN, F_BAR, F_WARP, F_DONE };
enum { ORDER_FORWARD, ORDER_REVERSE, ORDER_RANDOM };

typedef struct fiber {
    ucontext_t ctx;
    uint3 tid;
    int state;
    /* at a warp collective: the call site, mask, and the value to exchange */
    const char *file;
    int line;
    unsigned mask;
    int kind, arg, width;
    size_t size;
    void *val;
    void *asan_fake; /* ASan's fake stack of the fiber while it is switched out */
} fiber;

typedef struct warp_state {
    unsigned arrived;
    const char *file;
    int line;
} warp_state;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int configured, order;
    unsigned long seed, grids;
    size_t stack_size, page;
    fiber *f;
    char *stacks;
    unsigned cap; /* fibers (and stacks) allocated */
    ucontext_t sched;
    const void *sched_bottom; /* the scheduler's stack, for ASan */
    size_t sched_size;
    void *sched_fake;
    unsigned n, cur, lo, hi; /* threads of the block, running fiber, runnable hints */
    unsigned long rng;
    int aborted;
    unsigned bar_count;
    const char *bar_file;
    int bar_line;
    warp_state warps[32];
    void (*body)(void *);
    void *ctx;
    unsigned char *dyn;
    size_t dyn_size;
} S;

static void configure(void)
{
    if (S.configured) return;
    const char *o = getenv("BT_EMU_ORDER"), *seed = getenv("BT_EMU_SEED");
    const char *kb = getenv("BT_EMU_STACK_KB");
    S.order = ORDER_FORWARD;
    if (o && !strcmp(o, "reverse"))
        S.order = ORDER_REVERSE;
    else if (o && !strcmp(o, "random"))
        S.order = ORDER_RANDOM;
    else if (o && *o && strcmp(o, "forward"))
        fprintf(stderr, "cuda emulator: BT_EMU_ORDER=%s is not forward, reverse or random\n", o);
    S.seed = seed ? strtoul(seed, NULL, 10) : 1;
    S.stack_size = (kb ? strtoul(kb, NULL, 10) : 256) * 1024;
    if (S.stack_size < 16384) S.stack_size = 16384;
    S.page = (size_t)sysconf(_SC_PAGESIZE);
    S.stack_size = (S.stack_size + S.page - 1) / S.page * S.page;
    S.configured = 1;
}

static unsigned long next_random(void)
{
    /* xorshift64* */
    S.rng ^= S.rng >> 12;
    S.rng ^= S.rng << 25;
    S.rng ^= S.rng >> 27;
    return S.rng * 2685821657736338717ul;
}

/* Room for n fibers: stacks of stack_size, each above a PROT_NONE guard page. */
static int reserve(unsigned n)
{
    if (n <= S.cap) return 0;
    const size_t slot = S.stack_size + S.page;
    fiber *f = realloc(S.f, n * sizeof *f);
    if (!f) return -1;
    S.f = f;
    if (S.stacks) munmap(S.stacks, S.cap * slot);
    S.stacks = mmap(NULL, n * slot, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    if (S.stacks == MAP_FAILED) {
        S.stacks = NULL;
        S.cap = 0;
        return -1;
    }
    for (unsigned i = 0; i < n; i++) mprotect(S.stacks + i * slot, S.page, PROT_NONE);
    S.cap = n;
    return 0;
}

int bt_emu_check_launch(dim3 g, dim3 b, size_t dyn_smem, const char *kernel)
{
    const char *why = NULL;
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z)
        why = "a grid or block dimension is 0";
    else if (b.x > 1024 || b.y > 1024 || b.z > 64)
        why = "a block dimension is above its limit (1024, 1024, 64)";
    else if ((unsigned long long)b.x * b.y * b.z > 1024)
        why = "more than 1024 threads per block";
    else if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        why = "a grid dimension is above its limit (2^31-1, 65535, 65535)";
    else if (dyn_smem > 48 * 1024)
        why = "more than 48 KiB of dynamic shared memory";
    if (!why) return 0;
    bt_emu_fault("launch of %s with grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of shared memory: "
                 "%s",
                 kernel ? kernel : "a kernel", g.x, g.y, g.z, b.x, b.y, b.z, dyn_smem, why);
    return -1;
}

static unsigned long long gcd(unsigned long long a, unsigned long long b)
{
    while (b) {
        const unsigned long long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void fiber_main(void)
{
    ASAN_FINISH(NULL, &S.sched_bottom, &S.sched_size);
    S.body(S.ctx);
    S.f[S.cur].state = F_DONE;
    ASAN_START(NULL, S.sched_bottom, S.sched_size); /* this fiber's stack is done with */
    /* returns to S.sched through uc_link */
}

/* Back to the scheduler; it resumes this fiber when it is runnable again (never, after a
 * fault: the grid is abandoned and the fiber's stack reused). */
static void yield(void)
{
    fiber *me = &S.f[S.cur];
    ASAN_START(&me->asan_fake, S.sched_bottom, S.sched_size);
    swapcontext(&me->ctx, &S.sched);
    ASAN_FINISH(me->asan_fake, &S.sched_bottom, &S.sched_size);
}

static void fault_here(const char *what, const char *file, int line)
{
    const uint3 t = bt_emu_thread_idx, b = bt_emu_block_idx;
    bt_emu_fault("%s at %s:%d (thread (%u,%u,%u) of block (%u,%u,%u), block of %u threads)", what,
                 file, line, t.x, t.y, t.z, b.x, b.y, b.z, S.n);
    S.aborted = 1;
    yield();
}

static void make_runnable(unsigned i)
{
    S.f[i].state = F_RUN;
    if (i < S.lo) S.lo = i;
    if (i > S.hi || S.hi == (unsigned)-1) S.hi = i;
}

void bt_emu_syncthreads(const char *file, int line)
{
    if (!S.n) {
        bt_emu_fault("__syncthreads at %s:%d outside a kernel", file, line);
        return;
    }
    if (S.bar_count == 0) {
        S.bar_file = file;
        S.bar_line = line;
    } else if (S.bar_line != line || strcmp(S.bar_file, file)) {
        char what[512];
        snprintf(what, sizeof what,
                 "barrier divergence: __syncthreads reached while %u threads wait at the one at "
                 "%s:%d",
                 S.bar_count, S.bar_file, S.bar_line);
        fault_here(what, file, line);
        return;
    }
    S.f[S.cur].state = F_BAR;
    if (++S.bar_count == S.n) {
        S.bar_count = 0;
        for (unsigned i = 0; i < S.n; i++) make_runnable(i);
    }
    yield();
}

static void warp_collective(unsigned mask, void *val, size_t size, int kind, int arg, int width,
                            const char *file, int line, const char *name)
{
    fiber *me = &S.f[S.cur];
    const unsigned lane = S.cur & 31, w = S.cur >> 5;
    const unsigned lanes = S.n - w * 32 < 32 ? S.n - w * 32 : 32;
    const unsigned present = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    char what[512];
    if (!S.n) {
        bt_emu_fault("%s at %s:%d outside a kernel", name, file, line);
        return;
    }
    if (mask & ~present) {
        snprintf(what, sizeof what,
                 "%s with mask 0x%08x in a partial warp of %u lanes (lanes 0x%08x are not in the "
                 "block: blockDim not a multiple of 32)",
                 name, mask, lanes, mask & ~present);
        fault_here(what, file, line);
        return;
    }
    if (!(mask & (1u << lane))) {
        snprintf(what, sizeof what, "%s with mask 0x%08x called by lane %u, not in the mask", name,
                 mask, lane);
        fault_here(what, file, line);
        return;
    }
    if (width <= 0 || width > 32 || (width & (width - 1))) {
        snprintf(what, sizeof what, "%s with width %d (not a power of 2 up to 32)", name, width);
        fault_here(what, file, line);
        return;
    }
    warp_state *ws = &S.warps[w];
    if (ws->arrived == 0) {
        ws->file = file;
        ws->line = line;
    } else if (ws->line != line || strcmp(ws->file, file) || S.f[w * 32 + __builtin_ctz(ws->arrived)].mask != mask) {
        snprintf(what, sizeof what,
                 "warp divergence: %s (mask 0x%08x) reached while lanes 0x%08x of the warp wait at "
                 "%s:%d",
                 name, mask, ws->arrived, ws->file, ws->line);
        fault_here(what, file, line);
        return;
    }
    me->file = file;
    me->line = line;
    me->mask = mask;
    me->kind = kind;
    me->arg = arg;
    me->width = width;
    me->size = size;
    me->val = val;
    me->state = F_WARP;
    ws->arrived |= 1u << lane;
    if (ws->arrived == mask) {
        /* every lane is here: read all the values first, then deliver */
        uint64_t in[32], out[32];
        for (unsigned l = 0; l < 32; l++) {
            in[l] = 0;
            if (mask & (1u << l)) memcpy(&in[l], S.f[w * 32 + l].val, size);
        }
        for (unsigned l = 0; l < 32; l++) {
            if (!(mask & (1u << l))) continue;
            const unsigned base = l & ~(unsigned)(width - 1);
            long src = l;
            switch (kind) {
            case BT_EMU_SHFL_IDX: src = base + ((unsigned)arg & (unsigned)(width - 1)); break;
            case BT_EMU_SHFL_UP: src = (long)l - arg < (long)base ? (long)l : (long)l - arg; break;
            case BT_EMU_SHFL_DOWN: src = l + arg >= base + width ? l : l + arg; break;
            case BT_EMU_SHFL_XOR: src = (l ^ (unsigned)arg) >= base + width ? l : (l ^ (unsigned)arg); break;
            }
            /* a source lane outside the mask gives an undefined value: poison */
            out[l] = (src >= 0 && src < 32 && (mask & (1u << src))) ? in[src] : ~(uint64_t)0;
        }
        for (unsigned l = 0; l < 32; l++) {
            if (!(mask & (1u << l))) continue;
            if (size) memcpy(S.f[w * 32 + l].val, &out[l], size);
            make_runnable(w * 32 + l);
        }
        ws->arrived = 0;
    }
    yield();
}

void bt_emu_shfl(unsigned mask, void *val, size_t size, int kind, int arg, int width,
                 const char *file, int line)
{
    if (size > 8) {
        bt_emu_fault("shuffle of %zu bytes at %s:%d (at most 8)", size, file, line);
        return;
    }
    warp_collective(mask, val, size, kind, arg, width, file, line, "warp shuffle");
}

void bt_emu_syncwarp(unsigned mask, const char *file, int line)
{
    warp_collective(mask, NULL, 0, BT_EMU_SHFL_IDX, 0, 32, file, line, "__syncwarp");
}

void *bt_emu_dynamic_smem(void)
{
    return S.dyn;
}

void bt_emu_set_order(int order, unsigned long seed)
{
    pthread_mutex_lock(&g_lock);
    configure();
    S.order = order;
    S.seed = seed;
    pthread_mutex_unlock(&g_lock);
}

unsigned long bt_emu_grids_run(void)
{
    return S.grids;
}

/* The next fiber to resume, or -1 if none is runnable. */
static long pick(void)
{
    if (S.order == ORDER_RANDOM) {
        const unsigned start = (unsigned)(next_random() % S.n);
        for (unsigned k = 0; k < S.n; k++) {
            const unsigned i = (start + k) % S.n;
            if (S.f[i].state == F_RUN) return i;
        }
        return -1;
    }
    if (S.order == ORDER_REVERSE) {
        if (S.hi == (unsigned)-1) return -1;
        for (long i = S.hi; i >= 0; i--)
            if (S.f[i].state == F_RUN) {
                S.hi = (unsigned)i;
                return i;
            }
        S.hi = (unsigned)-1;
        return -1;
    }
    for (unsigned i = S.lo; i < S.n; i++)
        if (S.f[i].state == F_RUN) {
            S.lo = i;
            return i;
        }
    S.lo = S.n;
    return -1;
}

/* Nothing is runnable: the block is done, or stuck (a fault). */
static void stuck(void)
{
    unsigned done = 0, bar = 0, warp = 0;
    for (unsigned i = 0; i < S.n; i++) {
        done += S.f[i].state == F_DONE;
        bar += S.f[i].state == F_BAR;
        warp += S.f[i].state == F_WARP;
    }
    if (done == S.n) return;
    const uint3 b = bt_emu_block_idx;
    if (bar && !warp)
        bt_emu_fault("partial barrier: %u of %u threads of block (%u,%u,%u) wait at __syncthreads at "
                     "%s:%d, %u exited without reaching it",
                     bar, S.n, b.x, b.y, b.z, S.bar_file, S.bar_line, done);
    else if (warp && !bar) {
        unsigned w = 0;
        while (w < 32 && !S.warps[w].arrived) w++;
        bt_emu_fault("warp collective at %s:%d in block (%u,%u,%u): lanes 0x%08x of warp %u wait for "
                     "lanes 0x%08x that exited",
                     S.warps[w].file, S.warps[w].line, b.x, b.y, b.z, S.warps[w].arrived, w,
                     S.f[w * 32 + __builtin_ctz(S.warps[w].arrived)].mask & ~S.warps[w].arrived);
    } else
        bt_emu_fault("deadlock in block (%u,%u,%u): %u threads wait at __syncthreads (%s:%d), %u at "
                     "warp collectives, %u exited",
                     b.x, b.y, b.z, bar, S.bar_file ? S.bar_file : "?", S.bar_line, warp, done);
    S.aborted = 1;
}

/* A fresh fiber for thread i of the block (getcontext in a function of its own: -Wclobbered). */
static __attribute__((noinline)) void init_fiber(unsigned i, dim3 block)
{
    const size_t slot = S.stack_size + S.page;
    fiber *f = &S.f[i];
    f->tid.x = i % block.x;
    f->tid.y = i / block.x % block.y;
    f->tid.z = i / (block.x * block.y);
    f->state = F_RUN;
    f->asan_fake = NULL;
    getcontext(&f->ctx);
    f->ctx.uc_stack.ss_sp = S.stacks + i * slot + S.page;
    f->ctx.uc_stack.ss_size = S.stack_size;
    f->ctx.uc_link = &S.sched;
    makecontext(&f->ctx, fiber_main, 0);
}

static void run_block(dim3 block)
{
    if (S.dyn) memset(S.dyn, 0xff, S.dyn_size);
    S.bar_count = 0;
    S.bar_file = NULL;
    S.bar_line = 0;
    memset(S.warps, 0, sizeof S.warps);
    for (unsigned i = 0; i < S.n; i++) init_fiber(i, block);
    S.lo = 0;
    S.hi = S.n - 1;
    for (;;) {
        const long i = pick();
        if (i < 0) {
            stuck();
            return;
        }
        S.cur = (unsigned)i;
        bt_emu_thread_idx = S.f[i].tid;
        ASAN_START(&S.sched_fake, S.f[i].ctx.uc_stack.ss_sp, S.f[i].ctx.uc_stack.ss_size);
        swapcontext(&S.sched, &S.f[i].ctx);
        ASAN_FINISH(S.sched_fake, NULL, NULL);
        if (S.aborted) return;
    }
}

void bt_emu_run_grid(dim3 grid, dim3 block, size_t dyn_smem, void (*body)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&g_lock);
    configure();
    if (bt_emu_check_launch(grid, block, dyn_smem, NULL)) goto done;
    S.n = block.x * block.y * block.z;
    if (reserve(S.n)) {
        bt_emu_fault("cuda emulator: no memory for %u fiber stacks", S.n);
        goto done;
    }
    if (dyn_smem > S.dyn_size) {
        free(S.dyn);
        S.dyn = malloc(dyn_smem);
        S.dyn_size = S.dyn ? dyn_smem : 0;
    }
    S.body = body;
    S.ctx = ctx;
    S.aborted = 0;
    S.grids++;
    S.rng = (S.seed * 0x9e3779b97f4a7c15ul) ^ (S.grids * 0xbf58476d1ce4e5b9ul) ^ 0x94d049bb133111ebul;
    if (!S.rng) S.rng = 1;
    bt_emu_grid_dim = grid;
    bt_emu_block_dim = block;
    const unsigned long long nb = (unsigned long long)grid.x * grid.y * grid.z;
    /* random: an affine permutation of the block indices, step coprime with nb */
    unsigned long long step = 1, off = 0;
    if (S.order == ORDER_RANDOM && nb > 1) {
        off = next_random() % nb;
        do step = next_random() % nb; while (step == 0 || gcd(step, nb) != 1);
    }
    for (unsigned long long k = 0; k < nb && !S.aborted; k++) {
        unsigned long long b = k;
        if (S.order == ORDER_REVERSE) b = nb - 1 - k;
        else if (S.order == ORDER_RANDOM) b = (unsigned long long)(((unsigned __int128)k * step + off) % nb);
        bt_emu_block_idx.x = (unsigned)(b % grid.x);
        bt_emu_block_idx.y = (unsigned)(b / grid.x % grid.y);
        bt_emu_block_idx.z = (unsigned)(b / ((unsigned long long)grid.x * grid.y));
        run_block(block);
    }
    S.n = 0;
done:
    pthread_mutex_unlock(&g_lock);
}
