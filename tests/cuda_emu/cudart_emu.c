/* tests/cuda_emu/cudart_emu.c: a stand-in for the CUDA runtime (libcudart), compiled against the
 * real CUDA headers so that the sources in src/cuda link against it unchanged in emulated test
 * builds. Only the entry points baton calls are here (found with nm -u on src/cuda, kernels/ and
 * the GPU tests), each with the checks a desk-check cannot do reliably:
 *
 *  - device memory comes from a tracked table, poisoned with 0xFF bytes (a NaN in every float
 *    type) and framed by guard zones that are checked at free and at every synchronisation;
 *    freeing an unknown pointer is an error; pinned host memory (cudaHostAlloc) is tracked too;
 *  - copies check their kind against where the pointers really live (device of which GPU, pinned,
 *    pageable), that device ranges lie inside one allocation, and the current device against the
 *    stream's; asynchronous copies follow CUDA's rules for pageable memory (H2D staged at once,
 *    D2H into pageable memory returns when done);
 *  - streams belong to the device current at creation; a wait on an event never recorded (a no-op
 *    in CUDA, so an ordering bug) is a fault; timing on an event created without it fails;
 *  - BT_EMU_MODE=sync (default) runs everything at once in the calling thread; BT_EMU_MODE=async
 *    gives each stream a host thread and a queue, with random delays (BT_EMU_SEED) before tasks,
 *    events completing when their stream reaches them and real waits;
 *  - BT_EMU_GPUS=N pretend GPUs with properties, peer access and per-device memory accounting.
 *
 * Not modelled: the legacy default stream's implicit synchronisation with blocking streams (baton
 * creates only non-blocking streams), graphs, managed memory, texture objects. Faults go through
 * bt_emu_fault (emu_runtime.h): printed at once, returned by the next call, fatal at exit. This
 * file is test infrastructure, longer than 600 lines because the runtime is one unit of state. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu_runtime.h"

/* Under AddressSanitizer the guard zones are poisoned too, so an out-of-bounds read or write is
 * reported at once with its stack; the guard check still covers builds without it. */
#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#define GUARD_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define GUARD_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define GUARD_POISON(p, n) ((void)(p), (void)(n))
#define GUARD_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define EMU_MAX_GPUS 8
#define EMU_GUARD 256       /* bytes of guard zone before each allocation (and at least after) */
#define EMU_POISON 0xFF     /* fresh memory: NaN in f32, f64, bf16 and f16 */
#define EMU_GUARD_BYTE 0xFB /* guard zones */
#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556454eu

/* ---- configuration and faults ------------------------------------------------------------- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_async, g_gpus = 1, g_delay_us = 200, g_fatal = 1;
static unsigned long long g_seed = 1;
static size_t g_mem_total = (size_t)4096 << 20;

static atomic_uint g_faults;
static atomic_int g_pending;
static pthread_mutex_t g_fault_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_fault_msg[1024];

static _Thread_local int t_dev;
static _Thread_local cudaError_t t_last = cudaSuccess;

static void inject_from_env(void);

static void exit_check(void)
{
    unsigned n = atomic_load(&g_faults);
    if (n == 0 || !g_fatal) return;
    fprintf(stderr, "baton cuda emulator: %u fault%s recorded (last: %s); failing the process\n",
            n, n == 1 ? "" : "s", g_fault_msg);
    fflush(stderr);
    _exit(1);
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void emu_init_once(void)
{
    const char *mode = getenv("BT_EMU_MODE");
    if (mode && strcmp(mode, "async") == 0) g_async = 1;
    else if (mode && *mode && strcmp(mode, "sync") != 0)
        fprintf(stderr, "baton cuda emulator: BT_EMU_MODE=%s unknown (sync|async); using sync\n",
                mode);
    g_gpus = env_int("BT_EMU_GPUS", 1);
    if (g_gpus < 0) g_gpus = 0;
    if (g_gpus > EMU_MAX_GPUS) g_gpus = EMU_MAX_GPUS;
    g_delay_us = env_int("BT_EMU_DELAY_US", 200);
    if (g_delay_us < 0) g_delay_us = 0;
    const char *seed = getenv("BT_EMU_SEED");
    if (seed && *seed) g_seed = strtoull(seed, NULL, 0);
    int mb = env_int("BT_EMU_MEM_MB", 4096);
    if (mb > 0) g_mem_total = (size_t)mb << 20;
    g_fatal = env_int("BT_EMU_FAULTS_FATAL", 1) != 0;
    inject_from_env();
    atexit(exit_check);
}

static void emu_init(void) { pthread_once(&g_once, emu_init_once); }

static void fault_v(int pending, const char *fmt, va_list ap)
{
    char msg[sizeof g_fault_msg];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "baton cuda emulator: fault: %s\n", msg);
    pthread_mutex_lock(&g_fault_mu);
    memcpy(g_fault_msg, msg, sizeof msg);
    pthread_mutex_unlock(&g_fault_mu);
    atomic_fetch_add(&g_faults, 1);
    if (pending) atomic_store(&g_pending, 1);
}

void bt_emu_fault(const char *fmt, ...)
{
    va_list ap;
    emu_init();
    va_start(ap, fmt);
    fault_v(1, fmt, ap);
    va_end(ap);
}

unsigned bt_emu_faults_take(char *msg, size_t msg_size)
{
    emu_init();
    pthread_mutex_lock(&g_fault_mu);
    if (msg && msg_size) snprintf(msg, msg_size, "%s", g_fault_msg);
    g_fault_msg[0] = 0;
    pthread_mutex_unlock(&g_fault_mu);
    atomic_store(&g_pending, 0);
    return atomic_exchange(&g_faults, 0);
}

/* A fault CUDA would answer with an error code: returned at once, not left pending. */
static cudaError_t fail(cudaError_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fault_v(0, fmt, ap);
    va_end(ap);
    t_last = code;
    return code;
}

static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess) t_last = e;
    return e;
}

static int take_pending(void) { return atomic_exchange(&g_pending, 0); }

/* ---- injected failures (bt_emu_fail_call, BT_EMU_FAIL=api:n) ---------------------------- */

static pthread_mutex_t g_inject_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_inject_api[64];
static int g_inject_left;

void bt_emu_fail_call(const char *api, int nth)
{
    pthread_mutex_lock(&g_inject_mu);
    snprintf(g_inject_api, sizeof g_inject_api, "%s", api ? api : "");
    g_inject_left = api && nth > 0 ? nth : 0;
    pthread_mutex_unlock(&g_inject_mu);
}

int bt_emu_injected(const char *api)
{
    int hit = 0;
    pthread_mutex_lock(&g_inject_mu);
    if (g_inject_left > 0 && strcmp(api, g_inject_api) == 0 && --g_inject_left == 0) {
        hit = 1;
        g_inject_api[0] = 0;
    }
    pthread_mutex_unlock(&g_inject_mu);
    return hit;
}

static void inject_from_env(void)
{
    const char *v = getenv("BT_EMU_FAIL");
    if (!v || !*v) return;
    char api[64];
    const char *colon = strchr(v, ':');
    size_t len = colon ? (size_t)(colon - v) : strlen(v);
    if (len >= sizeof api) len = sizeof api - 1;
    memcpy(api, v, len);
    api[len] = 0;
    bt_emu_fail_call(api, colon ? atoi(colon + 1) : 1);
}

/* The error an injected failure of api returns: what CUDA would say for the likely cause. */
static cudaError_t injected_error(const char *api)
{
    if (strcmp(api, "cudaSetDevice") == 0) return cudaErrorInvalidDevice;
    if (strcmp(api, "cudaGetDeviceCount") == 0) return cudaErrorNoDevice;
    if (strcmp(api, "cudaMalloc") == 0 || strcmp(api, "cudaHostAlloc") == 0)
        return cudaErrorMemoryAllocation;
    return cudaErrorUnknown;
}

/* At the start of every runtime call that reports errors: an injected failure, else a fault left
 * pending by a kernel or a stream thread. */
#define ENTER()                                                                                   \
    do {                                                                                          \
        emu_init();                                                                               \
        if (bt_emu_injected(__func__)) return ret(injected_error(__func__));                      \
        if (take_pending()) return ret(cudaErrorLaunchFailure);                                   \
    } while (0)

int bt_emu_async(void)
{
    emu_init();
    return g_async;
}

int bt_emu_current_device(void) { return t_dev; }

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- memory table ------------------------------------------------------------------------- */

enum { MEM_DEVICE = 1, MEM_PINNED = 2 };
enum { LOC_PAGEABLE, LOC_PINNED, LOC_DEVICE, LOC_BAD };

typedef struct {
    char *block; /* what malloc returned: guard, user bytes, tail guard */
    char *base;  /* what the caller got */
    size_t bytes, total;
    int kind, dev;
} emu_alloc;

static pthread_mutex_t g_mem_mu = PTHREAD_MUTEX_INITIALIZER;
static emu_alloc *g_allocs; /* sorted by block */
static size_t g_nallocs, g_cap;
static size_t g_used[EMU_MAX_GPUS];
static int g_peer[EMU_MAX_GPUS][EMU_MAX_GPUS];

static const char *kind_name(int kind) { return kind == MEM_DEVICE ? "device" : "pinned host"; }

/* Index of the allocation whose block holds p, or -1. Caller holds g_mem_mu. */
static long find_block(const void *p)
{
    size_t lo = 0, hi = g_nallocs;
    const char *c = p;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < g_allocs[mid].block) hi = mid;
        else if (c >= g_allocs[mid].block + g_allocs[mid].total) lo = mid + 1;
        else return (long)mid;
    }
    return -1;
}

static void *mem_new(size_t bytes, int kind, int dev)
{
    size_t span = (bytes + 255) / 256 * 256;
    size_t total = EMU_GUARD + span + EMU_GUARD;
    char *block = aligned_alloc(256, total);
    if (!block) return NULL;
    memset(block, EMU_GUARD_BYTE, total);
    memset(block + EMU_GUARD, EMU_POISON, bytes);
    pthread_mutex_lock(&g_mem_mu);
    if (g_nallocs == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 64;
        emu_alloc *n = realloc(g_allocs, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&g_mem_mu);
            free(block);
            return NULL;
        }
        g_allocs = n;
        g_cap = cap;
    }
    size_t i = g_nallocs;
    while (i > 0 && g_allocs[i - 1].block > block) {
        g_allocs[i] = g_allocs[i - 1];
        i--;
    }
    g_allocs[i] = (emu_alloc){block, block + EMU_GUARD, bytes, total, kind, dev};
    g_nallocs++;
    GUARD_POISON(block, EMU_GUARD);
    GUARD_POISON(block + EMU_GUARD + bytes, total - EMU_GUARD - bytes);
    pthread_mutex_unlock(&g_mem_mu);
    return block + EMU_GUARD;
}

/* Checks one allocation's guard zones; reports and repairs damage. Caller holds g_mem_mu. */
static int guard_check(emu_alloc *a, const char *when)
{
    int bad = 0;
    for (int side = 0; side < 2; side++) {
        char *g = side ? a->base + a->bytes : a->block;
        size_t n = side ? (size_t)(a->block + a->total - g) : EMU_GUARD;
        GUARD_UNPOISON(g, n);
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)g[i] != EMU_GUARD_BYTE) {
                bt_emu_fault("%s: out-of-bounds write %s the %s allocation of %zu bytes at %p "
                             "(cuda:%d): byte %s%zu was written",
                             when, side ? "past the end of" : "before the start of",
                             kind_name(a->kind), a->bytes, (void *)a->base, a->dev,
                             side ? "+" : "-", side ? a->bytes + i : EMU_GUARD - i);
                memset(g, EMU_GUARD_BYTE, n);
                bad = 1;
                break;
            }
        GUARD_POISON(g, n);
    }
    return bad;
}

static void guards_check_all(const char *when)
{
    pthread_mutex_lock(&g_mem_mu);
    for (size_t i = 0; i < g_nallocs; i++) guard_check(&g_allocs[i], when);
    pthread_mutex_unlock(&g_mem_mu);
}

/* Removes the allocation starting at p of the given kind; 0 when there is none. */
static int mem_delete(void *p, int kind, const char *api, int *dev_out, size_t *bytes_out)
{
    pthread_mutex_lock(&g_mem_mu);
    long i = find_block(p);
    if (i < 0 || g_allocs[i].base != (char *)p || g_allocs[i].kind != kind) {
        pthread_mutex_unlock(&g_mem_mu);
        return 0;
    }
    emu_alloc a = g_allocs[i];
    guard_check(&a, api);
    memmove(&g_allocs[i], &g_allocs[i + 1], (g_nallocs - (size_t)i - 1) * sizeof *g_allocs);
    g_nallocs--;
    GUARD_UNPOISON(a.block, a.total);
    pthread_mutex_unlock(&g_mem_mu);
    *dev_out = a.dev;
    *bytes_out = a.bytes;
    free(a.block);
    return 1;
}

typedef struct {
    int loc, dev;
    char why[200];
} emu_loc;

/* Where [p, p + n) lives: a device or pinned range inside one allocation, pageable host memory,
 * or LOC_BAD (it starts in an allocation's guard zone or runs past its end). */
static emu_loc locate(const void *p, size_t n)
{
    emu_loc l = {LOC_PAGEABLE, -1, ""};
    pthread_mutex_lock(&g_mem_mu);
    long i = find_block(p);
    if (i < 0 && n > 0) i = find_block((const char *)p + n - 1);
    if (i >= 0) {
        const emu_alloc *a = &g_allocs[i];
        const char *c = p;
        l.dev = a->dev;
        if (c >= a->base && c + n <= a->base + a->bytes && c + n >= c) {
            l.loc = a->kind == MEM_DEVICE ? LOC_DEVICE : LOC_PINNED;
        } else {
            l.loc = LOC_BAD;
            snprintf(l.why, sizeof l.why,
                     "[%p, +%zu) is not inside the %s allocation of %zu bytes at %p (cuda:%d): "
                     "it starts at offset %td",
                     p, n, kind_name(a->kind), a->bytes, (void *)a->base, a->dev, c - a->base);
        }
    }
    pthread_mutex_unlock(&g_mem_mu);
    return l;
}

int bt_emu_is_device_range(const void *p, size_t bytes, int dev)
{
    if (!p) return 0;
    emu_loc l = locate(p, bytes ? bytes : 1);
    return l.loc == LOC_DEVICE && (dev < 0 || l.dev == dev);
}

static const char *loc_name(const emu_loc *l)
{
    static const char *names[] = {"pageable host memory", "pinned host memory", "device memory",
                                  "a bad range"};
    return names[l->loc];
}

/* ---- streams ------------------------------------------------------------------------------ */

typedef struct emu_task {
    bt_emu_task_fn fn;
    void *arg;
    struct emu_task *next;
} emu_task;

struct CUstream_st {
    unsigned magic;
    int device, destroyed, is_default, id;
    unsigned flags;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    emu_task *head, *tail;
    unsigned long long queued, done, rng;
    int running;
    pthread_t thread;
    struct CUstream_st *next_all;
};

static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static struct CUstream_st *g_streams;          /* every stream ever made: never freed */
static struct CUstream_st *g_default[EMU_MAX_GPUS];
static int g_stream_ids;

static unsigned long long rng_next(unsigned long long *s)
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void *stream_main(void *p)
{
    struct CUstream_st *s = p;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->destroyed) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        emu_task *t = s->head;
        s->head = t->next;
        if (!s->head) s->tail = NULL;
        unsigned long long r = rng_next(&s->rng);
        pthread_mutex_unlock(&s->mu);
        if (g_delay_us > 0 && (r & 1)) {
            struct timespec ts = {0, (long)((r >> 8) % (unsigned long long)g_delay_us) * 1000L};
            nanosleep(&ts, NULL);
        }
        t->fn(t->arg);
        free(t->arg);
        free(t);
        pthread_mutex_lock(&s->mu);
        s->done++;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static struct CUstream_st *stream_new(int dev, unsigned flags, int is_default)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->magic = STREAM_MAGIC;
    s->device = dev;
    s->flags = flags;
    s->is_default = is_default;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_mutex_lock(&g_streams_mu);
    s->id = ++g_stream_ids;
    s->rng = g_seed * 0x100000001B3ull + (unsigned long long)s->id;
    s->next_all = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_streams_mu);
    if (g_async) {
        if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
            s->destroyed = 1; /* stays listed (never freed) but unusable */
            return NULL;
        }
        s->running = 1;
    }
    return s;
}

/* The stream behind a handle (0 and the special handles: the current device's default stream),
 * or NULL for an invalid or destroyed one. */
static struct CUstream_st *stream_get(cudaStream_t h)
{
    if (h == 0 || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        int d = t_dev;
        if (d < 0 || d >= g_gpus) return NULL;
        pthread_mutex_lock(&g_streams_mu);
        struct CUstream_st *s = g_default[d];
        pthread_mutex_unlock(&g_streams_mu);
        if (!s) {
            s = stream_new(d, 0, 1);
            pthread_mutex_lock(&g_streams_mu);
            if (g_default[d]) s = g_default[d]; /* another thread won; ours stays idle */
            else g_default[d] = s;
            pthread_mutex_unlock(&g_streams_mu);
        }
        return s;
    }
    struct CUstream_st *s = (struct CUstream_st *)h;
    if (s->magic != STREAM_MAGIC || s->destroyed) return NULL;
    return s;
}

int bt_emu_stream_device(cudaStream_t h)
{
    emu_init();
    struct CUstream_st *s = stream_get(h);
    return s ? s->device : -1;
}

static void stream_push(struct CUstream_st *s, bt_emu_task_fn fn, void *arg)
{
    if (!g_async) {
        fn(arg);
        free(arg);
        return;
    }
    emu_task *t = malloc(sizeof *t);
    if (!t) {
        bt_emu_fault("out of host memory for a stream task");
        return;
    }
    *t = (emu_task){fn, arg, NULL};
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = t;
    else s->head = t;
    s->tail = t;
    s->queued++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits until everything queued on s so far has run. */
static void stream_drain(struct CUstream_st *s)
{
    if (!g_async) return;
    pthread_mutex_lock(&s->mu);
    unsigned long long target = s->queued;
    while (s->done < target) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

static void device_drain(int dev)
{
    pthread_mutex_lock(&g_streams_mu);
    struct CUstream_st *list = g_streams;
    pthread_mutex_unlock(&g_streams_mu);
    for (struct CUstream_st *s = list; s; s = s->next_all)
        if ((dev < 0 || s->device == dev) && !s->destroyed) stream_drain(s);
}

/* Resolves a stream for an operation issued by the calling thread: it must exist and belong to
 * the current device. */
static cudaError_t stream_for_call(cudaStream_t h, const char *api, struct CUstream_st **out)
{
    struct CUstream_st *s = stream_get(h);
    *out = s;
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "%s: stream %p is not a live stream", api,
                    (void *)h);
    if (s->device != t_dev)
        return fail(cudaErrorInvalidResourceHandle,
                    "%s: stream %p belongs to cuda:%d but the current device is cuda:%d", api,
                    (void *)h, s->device, t_dev);
    return cudaSuccess;
}

cudaError_t bt_emu_stream_enqueue(cudaStream_t stream, bt_emu_task_fn fn, void *arg)
{
    struct CUstream_st *s;
    emu_init();
    cudaError_t e = stream_for_call(stream, "kernel launch", &s);
    if (e != cudaSuccess) {
        free(arg);
        return e;
    }
    stream_push(s, fn, arg);
    return cudaSuccess;
}

/* ---- devices ------------------------------------------------------------------------------ */

static int dev_ok(int d) { return d >= 0 && d < g_gpus; }

cudaError_t cudaGetDeviceCount(int *count)
{
    ENTER();
    if (!count) return ret(cudaErrorInvalidValue);
    *count = g_gpus;
    return g_gpus ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device)
{
    ENTER();
    if (!dev_ok(device)) return ret(cudaErrorInvalidDevice);
    t_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
    ENTER();
    if (!device) return ret(cudaErrorInvalidValue);
    *device = t_dev;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    ENTER();
    if (!prop) return ret(cudaErrorInvalidValue);
    if (!dev_ok(device)) return ret(cudaErrorInvalidDevice);
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "baton emulated GPU");
    prop->totalGlobalMem = g_mem_total;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerBlock = 65536;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->canMapHostMemory = 1;
    prop->concurrentKernels = 1;
    prop->asyncEngineCount = 2;
    prop->unifiedAddressing = 1;
    prop->memoryBusWidth = 5120;
    prop->l2CacheSize = 50 * 1024 * 1024;
    prop->pciBusID = 0x10 + device;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    ENTER();
    if (!pciBusId || len <= 0) return ret(cudaErrorInvalidValue);
    if (!dev_ok(device)) return ret(cudaErrorInvalidDevice);
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", 0x10 + device);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    ENTER();
    if (!free_bytes || !total) return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&g_mem_mu);
    *total = g_mem_total;
    *free_bytes = g_mem_total - g_used[t_dev];
    pthread_mutex_unlock(&g_mem_mu);
    return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
    ENTER();
    if (!can) return ret(cudaErrorInvalidValue);
    if (!dev_ok(device) || !dev_ok(peer)) return ret(cudaErrorInvalidDevice);
    *can = device != peer;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    ENTER();
    if (flags != 0) return ret(cudaErrorInvalidValue);
    if (!dev_ok(peer) || peer == t_dev) return ret(cudaErrorInvalidDevice);
    pthread_mutex_lock(&g_mem_mu);
    int already = g_peer[t_dev][peer];
    g_peer[t_dev][peer] = 1;
    pthread_mutex_unlock(&g_mem_mu);
    return already ? ret(cudaErrorPeerAccessAlreadyEnabled) : cudaSuccess;
}

int bt_emu_peer_enabled(int from, int to)
{
    if (from == to) return 1;
    if (!dev_ok(from) || !dev_ok(to)) return 0;
    pthread_mutex_lock(&g_mem_mu);
    int v = g_peer[from][to];
    pthread_mutex_unlock(&g_mem_mu);
    return v;
}

cudaError_t cudaDeviceSynchronize(void)
{
    ENTER();
    device_drain(t_dev);
    guards_check_all("cudaDeviceSynchronize");
    return take_pending() ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

/* ---- errors ------------------------------------------------------------------------------- */

cudaError_t cudaGetLastError(void)
{
    emu_init();
    if (take_pending()) {
        t_last = cudaSuccess;
        return cudaErrorLaunchFailure;
    }
    cudaError_t e = t_last;
    t_last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    emu_init();
    return atomic_load(&g_pending) ? cudaErrorLaunchFailure : t_last;
}

static const struct {
    cudaError_t e;
    const char *name, *text;
} g_errors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled",
     "peer access is already enabled"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure",
     "unspecified launch failure (a fault found by the baton CUDA emulator: see stderr)"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error (injected by the baton CUDA emulator)"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
};

const char *cudaGetErrorName(cudaError_t error)
{
    for (size_t i = 0; i < sizeof g_errors / sizeof *g_errors; i++)
        if (g_errors[i].e == error) return g_errors[i].name;
    return "cudaErrorUnknown";
}

const char *cudaGetErrorString(cudaError_t error)
{
    for (size_t i = 0; i < sizeof g_errors / sizeof *g_errors; i++)
        if (g_errors[i].e == error) return g_errors[i].text;
    return "unknown error";
}

/* ---- memory ------------------------------------------------------------------------------- */

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    ENTER();
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = NULL;
    if (!dev_ok(t_dev)) return ret(cudaErrorInvalidDevice);
    if (size == 0) return cudaSuccess;
    pthread_mutex_lock(&g_mem_mu);
    int fits = size <= g_mem_total - g_used[t_dev];
    if (fits) g_used[t_dev] += size;
    pthread_mutex_unlock(&g_mem_mu);
    if (!fits) return ret(cudaErrorMemoryAllocation);
    void *p = mem_new(size, MEM_DEVICE, t_dev);
    if (!p) {
        pthread_mutex_lock(&g_mem_mu);
        g_used[t_dev] -= size;
        pthread_mutex_unlock(&g_mem_mu);
        return ret(cudaErrorMemoryAllocation);
    }
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    emu_init();
    int pending = take_pending();
    if (ptr) {
        emu_loc l = locate(ptr, 1);
        if (l.loc == LOC_DEVICE || l.loc == LOC_BAD) device_drain(l.dev); /* implicit sync */
        int dev = -1;
        size_t bytes = 0;
        if (!mem_delete(ptr, MEM_DEVICE, "cudaFree", &dev, &bytes))
            return fail(cudaErrorInvalidValue,
                        "cudaFree(%p): not a pointer cudaMalloc returned, or freed already (%s)",
                        ptr, loc_name(&l));
        pthread_mutex_lock(&g_mem_mu);
        g_used[dev] -= bytes;
        pthread_mutex_unlock(&g_mem_mu);
    }
    return pending ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    ENTER();
    if (!ptr) return ret(cudaErrorInvalidValue);
    *ptr = NULL;
    const unsigned known = cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
    if (flags & ~known)
        return ret(cudaErrorInvalidValue);
    if (size == 0) return cudaSuccess;
    if (size > ((size_t)1 << 40)) return ret(cudaErrorMemoryAllocation);
    void *p = mem_new(size, MEM_PINNED, -1);
    if (!p) return ret(cudaErrorMemoryAllocation);
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr)
{
    emu_init();
    int pending = take_pending();
    if (ptr) {
        device_drain(-1); /* implicit sync */
        int dev;
        size_t bytes;
        if (!mem_delete(ptr, MEM_PINNED, "cudaFreeHost", &dev, &bytes)) {
            emu_loc l = locate(ptr, 1);
            return fail(cudaErrorInvalidValue,
                        "cudaFreeHost(%p): not a pointer cudaHostAlloc returned, or freed "
                        "already (%s)",
                        ptr, loc_name(&l));
        }
    }
    return pending ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

/* ---- copies ------------------------------------------------------------------------------- */

typedef struct {
    void *dst;
    const void *src;
    size_t n;
    int value, is_set;
    void *staging; /* owned: pageable source staged at call time */
} copy_task;

static void copy_run(void *p)
{
    copy_task *t = p;
    if (t->is_set) memset(t->dst, t->value, t->n);
    else memcpy(t->dst, t->staging ? t->staging : t->src, t->n);
    free(t->staging);
}

static const char *kind_text(enum cudaMemcpyKind k)
{
    switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
    }
    return "an invalid kind";
}

/* A device range used by an operation on stream s: on s's device, or on a peer it enabled. */
static cudaError_t check_device_side(const char *api, const char *what, const emu_loc *l,
                                     const void *p, const struct CUstream_st *s, int peer_ok)
{
    if (l->dev == s->device) return cudaSuccess;
    if (peer_ok && bt_emu_peer_enabled(s->device, l->dev)) return cudaSuccess;
    return fail(cudaErrorInvalidValue,
                "%s: %s %p is device memory of cuda:%d but the stream belongs to cuda:%d%s", api,
                what, p, l->dev, s->device,
                peer_ok ? " (and peer access to it was not enabled)" : "");
}

static cudaError_t copy_common(const char *api, void *dst, const void *src, size_t n,
                               enum cudaMemcpyKind kind, cudaStream_t stream, int blocking)
{
    struct CUstream_st *s;
    cudaError_t e = stream_for_call(stream, api, &s);
    if (e != cudaSuccess) return e;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return fail(cudaErrorInvalidMemcpyDirection, "%s: invalid kind %d", api, (int)kind);
    if (n == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue, "%s: a NULL pointer", api);
    emu_loc ld = locate(dst, n), ls = locate(src, n);
    if (ld.loc == LOC_BAD) return fail(cudaErrorInvalidValue, "%s: destination %s", api, ld.why);
    if (ls.loc == LOC_BAD) return fail(cudaErrorInvalidValue, "%s: source %s", api, ls.why);
    const char *d0 = dst, *s0 = src;
    if (d0 < s0 + n && s0 < d0 + n)
        return fail(cudaErrorInvalidValue, "%s: source %p and destination %p overlap (%zu bytes)",
                    api, src, dst, n);
    int dd = ld.loc == LOC_DEVICE, sd = ls.loc == LOC_DEVICE;
    enum cudaMemcpyKind actual = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                    : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (kind != cudaMemcpyDefault && kind != actual)
        return fail(cudaErrorInvalidValue,
                    "%s: kind %s, but the source %p is %s%s and the destination %p is %s%s", api,
                    kind_text(kind), src, loc_name(&ls), sd ? " of a GPU" : "", dst,
                    loc_name(&ld), dd ? " of a GPU" : "");
    /* H2D/D2H must touch the stream's own GPU; D2D may reach a peer that was enabled */
    if (dd && (e = check_device_side(api, "destination", &ld, dst, s, sd)) != cudaSuccess)
        return e;
    if (sd && (e = check_device_side(api, "source", &ls, src, s, dd)) != cudaSuccess) return e;

    copy_task *t = calloc(1, sizeof *t);
    if (!t) return ret(cudaErrorMemoryAllocation);
    t->dst = dst;
    t->src = src;
    t->n = n;
    if (g_async && ls.loc == LOC_PAGEABLE && dd) {
        /* pageable to device: the runtime stages the source before returning */
        t->staging = malloc(n);
        if (!t->staging) {
            free(t);
            return ret(cudaErrorMemoryAllocation);
        }
        memcpy(t->staging, src, n);
    }
    stream_push(s, copy_run, t);
    /* device to pageable (and host to host): returns once the copy is done */
    if (blocking || (!dd && ld.loc == LOC_PAGEABLE)) stream_drain(s);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
    ENTER();
    return copy_common("cudaMemcpyAsync", dst, src, count, kind, stream, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    ENTER();
    return copy_common("cudaMemcpy", dst, src, count, kind, 0, 1);
}

static cudaError_t set_common(const char *api, void *dst, int value, size_t n,
                              cudaStream_t stream, int blocking)
{
    struct CUstream_st *s;
    cudaError_t e = stream_for_call(stream, api, &s);
    if (e != cudaSuccess) return e;
    if (n == 0) return cudaSuccess;
    emu_loc l = locate(dst, n);
    if (l.loc == LOC_BAD) return fail(cudaErrorInvalidValue, "%s: %s", api, l.why);
    if (l.loc != LOC_DEVICE)
        return fail(cudaErrorInvalidValue, "%s: %p is %s, not device memory", api, dst,
                    loc_name(&l));
    if ((e = check_device_side(api, "destination", &l, dst, s, 1)) != cudaSuccess) return e;
    copy_task *t = calloc(1, sizeof *t);
    if (!t) return ret(cudaErrorMemoryAllocation);
    t->dst = dst;
    t->n = n;
    t->value = value;
    t->is_set = 1;
    stream_push(s, copy_run, t);
    if (blocking) stream_drain(s);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    ENTER();
    return set_common("cudaMemsetAsync", devPtr, value, count, stream, 0);
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    ENTER();
    return set_common("cudaMemset", devPtr, value, count, 0, 1);
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice,
                                size_t count, cudaStream_t stream)
{
    struct CUstream_st *s;
    const char *api = "cudaMemcpyPeerAsync";
    ENTER();
    if (!dev_ok(dstDevice) || !dev_ok(srcDevice)) return ret(cudaErrorInvalidDevice);
    cudaError_t e = stream_for_call(stream, api, &s);
    if (e != cudaSuccess) return e;
    if (count == 0) return cudaSuccess;
    emu_loc ld = locate(dst, count), ls = locate(src, count);
    if (ld.loc != LOC_DEVICE || ld.dev != dstDevice)
        return fail(cudaErrorInvalidValue, "%s: destination %p (+%zu) is not device memory of "
                    "cuda:%d: %s%s", api, dst, count, dstDevice, loc_name(&ld),
                    ld.loc == LOC_BAD ? ld.why : "");
    if (ls.loc != LOC_DEVICE || ls.dev != srcDevice)
        return fail(cudaErrorInvalidValue, "%s: source %p (+%zu) is not device memory of "
                    "cuda:%d: %s%s", api, src, count, srcDevice, loc_name(&ls),
                    ls.loc == LOC_BAD ? ls.why : "");
    if (s->device != srcDevice && s->device != dstDevice)
        return fail(cudaErrorInvalidValue, "%s: the stream belongs to cuda:%d, neither side of "
                    "the copy (cuda:%d to cuda:%d)", api, s->device, srcDevice, dstDevice);
    copy_task *t = calloc(1, sizeof *t);
    if (!t) return ret(cudaErrorMemoryAllocation);
    t->dst = dst;
    t->src = src;
    t->n = count;
    stream_push(s, copy_run, t);
    return cudaSuccess;
}

/* ---- streams (API) ------------------------------------------------------------------------ */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    ENTER();
    if (!pStream || (flags & ~(unsigned)cudaStreamNonBlocking)) return ret(cudaErrorInvalidValue);
    if (!dev_ok(t_dev)) return ret(cudaErrorInvalidDevice);
    struct CUstream_st *s = stream_new(t_dev, flags, 0);
    if (!s) return ret(cudaErrorMemoryAllocation);
    *pStream = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    return cudaStreamCreateWithFlags(pStream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    emu_init();
    int pending = take_pending();
    struct CUstream_st *s = stream_get(stream);
    if (!s || s->is_default)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaStreamDestroy(%p): not a live stream of cudaStreamCreate", (void *)stream);
    pthread_mutex_lock(&s->mu);
    s->destroyed = 1; /* the thread runs what is queued, then ends */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->running) {
        pthread_join(s->thread, NULL);
        s->running = 0;
    }
    return pending ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    ENTER();
    struct CUstream_st *s = stream_get(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: stream %p is not a "
                    "live stream", (void *)stream);
    stream_drain(s);
    guards_check_all("cudaStreamSynchronize");
    return take_pending() ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    ENTER();
    struct CUstream_st *s = stream_get(stream);
    if (!s)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: stream %p is not a live "
                    "stream", (void *)stream);
    pthread_mutex_lock(&s->mu);
    int idle = s->done == s->queued;
    pthread_mutex_unlock(&s->mu);
    return idle ? cudaSuccess : cudaErrorNotReady;
}

/* ---- events ------------------------------------------------------------------------------- */

struct CUevent_st {
    unsigned magic;
    int device, destroyed;
    unsigned flags;
    unsigned long long recorded, completed; /* record calls issued / reached by their stream */
    double time_ms;
    struct CUevent_st *next_all;
};

static pthread_mutex_t g_ev_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_ev_cv = PTHREAD_COND_INITIALIZER;
static struct CUevent_st *g_events; /* never freed, so a destroyed handle is still recognised */

typedef struct {
    struct CUevent_st *ev;
    unsigned long long seq;
} event_task;

static void event_record_run(void *p)
{
    event_task *t = p;
    pthread_mutex_lock(&g_ev_mu);
    if (t->ev->completed < t->seq) {
        t->ev->completed = t->seq;
        t->ev->time_ms = now_ms();
    }
    pthread_cond_broadcast(&g_ev_cv);
    pthread_mutex_unlock(&g_ev_mu);
}

static void event_wait_run(void *p)
{
    event_task *t = p;
    pthread_mutex_lock(&g_ev_mu);
    while (t->ev->completed < t->seq) pthread_cond_wait(&g_ev_cv, &g_ev_mu);
    pthread_mutex_unlock(&g_ev_mu);
}

static struct CUevent_st *event_get(cudaEvent_t h)
{
    struct CUevent_st *e = (struct CUevent_st *)h;
    if (!e || e->magic != EVENT_MAGIC || e->destroyed) return NULL;
    return e;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    ENTER();
    const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
    if (!event || (flags & ~known))
        return ret(cudaErrorInvalidValue);
    if (!dev_ok(t_dev)) return ret(cudaErrorInvalidDevice);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e) return ret(cudaErrorMemoryAllocation);
    e->magic = EVENT_MAGIC;
    e->device = t_dev;
    e->flags = flags;
    pthread_mutex_lock(&g_ev_mu);
    e->next_all = g_events;
    g_events = e;
    pthread_mutex_unlock(&g_ev_mu);
    *event = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    emu_init();
    int pending = take_pending();
    struct CUevent_st *e = event_get(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event",
                    (void *)event);
    /* CUDA lets pending records finish; waiting here keeps the record's task valid */
    pthread_mutex_lock(&g_ev_mu);
    while (e->completed < e->recorded) pthread_cond_wait(&g_ev_cv, &g_ev_mu);
    e->destroyed = 1;
    pthread_mutex_unlock(&g_ev_mu);
    return pending ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    struct CUstream_st *s;
    ENTER();
    struct CUevent_st *e = event_get(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: %p is not a live event",
                    (void *)event);
    cudaError_t err = stream_for_call(stream, "cudaEventRecord", &s);
    if (err != cudaSuccess) return err;
    if (e->device != s->device)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaEventRecord: the event belongs to cuda:%d, the stream to cuda:%d",
                    e->device, s->device);
    event_task *t = malloc(sizeof *t);
    if (!t) return ret(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&g_ev_mu);
    t->ev = e;
    t->seq = ++e->recorded;
    pthread_mutex_unlock(&g_ev_mu);
    stream_push(s, event_record_run, t);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    struct CUstream_st *s;
    ENTER();
    struct CUevent_st *e = event_get(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: %p is not a live event",
                    (void *)event);
    cudaError_t err = stream_for_call(stream, "cudaStreamWaitEvent", &s);
    if (err != cudaSuccess) return err;
    if (flags != 0 && flags != cudaEventWaitExternal) return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&g_ev_mu);
    unsigned long long seq = e->recorded;
    pthread_mutex_unlock(&g_ev_mu);
    if (seq == 0)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaStreamWaitEvent: event %p (cuda:%d) was never recorded; CUDA treats "
                    "this wait as a no-op, so it orders nothing",
                    (void *)event, e->device);
    event_task *t = malloc(sizeof *t);
    if (!t) return ret(cudaErrorMemoryAllocation);
    t->ev = e;
    t->seq = seq;
    stream_push(s, event_wait_run, t);
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    ENTER();
    struct CUevent_st *e = event_get(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: %p is not a live "
                    "event", (void *)event);
    pthread_mutex_lock(&g_ev_mu);
    unsigned long long seq = e->recorded;
    while (e->completed < seq) pthread_cond_wait(&g_ev_cv, &g_ev_mu);
    pthread_mutex_unlock(&g_ev_mu);
    guards_check_all("cudaEventSynchronize");
    return take_pending() ? ret(cudaErrorLaunchFailure) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
    ENTER();
    struct CUevent_st *e = event_get(event);
    if (!e)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: %p is not a live event",
                    (void *)event);
    pthread_mutex_lock(&g_ev_mu);
    int done = e->completed >= e->recorded;
    pthread_mutex_unlock(&g_ev_mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    ENTER();
    struct CUevent_st *a = event_get(start), *b = event_get(end);
    if (!ms) return ret(cudaErrorInvalidValue);
    if (!a || !b)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: not a live event");
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
    pthread_mutex_lock(&g_ev_mu);
    int recorded = a->recorded && b->recorded;
    int done = a->completed >= a->recorded && b->completed >= b->recorded;
    double dt = b->time_ms - a->time_ms;
    pthread_mutex_unlock(&g_ev_mu);
    if (!recorded)
        return fail(cudaErrorInvalidResourceHandle,
                    "cudaEventElapsedTime: an event was never recorded");
    if (!done) return ret(cudaErrorNotReady);
    *ms = (float)dt;
    return cudaSuccess;
}
