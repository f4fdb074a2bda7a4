/* cpu/gemm_bf16.c: the matrix products of `precision: bf16` on the CPU, and the oneDNN matmul
 * primitives (cached per shape and thread) that also run the f32 path's GEMMs (bt_gemm_dnnl_f32,
 * f32 operands read in place; gemm_f32.c chooses that path). Under mixed precision
 * every operand a GEMM reads is already a bf16 value held in f32 (worker.c rounds activations,
 * gradients and the parameters' compute copies), so the products can run in bf16 with f32
 * accumulation without changing what is computed, only the order of the f32 sums.
 *
 * Paths, chosen once per process at run time (bt_cpu_bf16_init), never at build time alone:
 *   - oneDNN on AMX (brgemm, avx512_core_amx) where the CPU has AMX-BF16;
 *   - oneDNN on AVX512-BF16 (brgemm, avx512_core_bf16) where it has that but no AMX;
 *   - "f32": the rounded operands multiplied by OpenBLAS's sgemm (the reference: a product of
 *     two bf16 values is exact in f32), on CPUs with neither, or in a build without oneDNN.
 * BATON_CPU_BF16 = auto (default) | amx | avx512_bf16 | f32 forces one (tests run the f32 and
 * AVX512-BF16 paths on an AMX machine this way); a forced path the CPU or build cannot give is an
 * error when the first CPU device opens, never a silent fallback. BATON_CPU_ISA=avx2
 * (core/cpu_isa.c) limits oneDNN to AVX2 here, before its first use, for the whole process (conv2d
 * included: conv_onednn.c creates its engines after this choice), so bf16 runs the "f32" path as
 * on an AVX2-only CPU.
 *
 * The oneDNN path converts A and B to bf16 in a per-thread buffer (rounding to nearest even,
 * exact for the values it is given), then runs a cached matmul primitive writing C in f32 (beta
 * through a sum post-op, alpha through an output scale). An operand the caller marks as a
 * parameter (bt_gemm_param: a layer's weight compute copy, which changes only when the engine
 * refreshes it after an update) is converted once and kept in a process-wide cache
 * (cpu/bf16_params.c) until its memory is written. bt_gemm_bias
 * adds a bias in the matmul's epilogue (linear's forward) instead of a pass that writes it first,
 * and a fused relu after it.
 *
 * oneDNN threads through OpenMP, whose thread count is per calling thread: each call sets it to
 * the device's count, so `--threads` is honoured per device here (OpenBLAS has one count per process, see blas.c). A oneDNN failure is
 * kept per thread and returned by bt_gemm_take_error (the backend's run_op checks it after every
 * op); C is then computed by sgemm so it is never left undefined. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "core/cpu_isa.h"
#include "core/error.h"
#include "core/util.h"
#include "cpu/bf16_params.h"
#include "cpu/blas.h"

#ifdef BATON_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
/* libgomp's, declared here so that no OpenMP compiler flag is needed (oneDNN's runtime is OpenMP) */
extern void omp_set_num_threads(int n);
extern int omp_get_max_threads(void);
#endif

enum { PATH_F32 = 0, PATH_AVX512 = 1, PATH_AMX = 2 };

static pthread_once_t bf16_once = PTHREAD_ONCE_INIT;
static int bf16_path = PATH_F32;
static char bf16_desc[200] = "bf16 operands multiplied in f32 (OpenBLAS)";
static char bf16_error[300]; /* non-empty: BATON_CPU_BF16 asked for what cannot be had */
static atomic_int threads_seen;

#ifdef BATON_HAVE_DNNL
static dnnl_engine_t dnnl_eng;

/* The implementation oneDNN picks for a small bf16 matmul ("brg:avx512_core_amx"), or NULL. */
static const char *probe_impl(void)
{
    static char impl_copy[64];
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t dims = {64, 64}, strides = {64, 1};
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = NULL;
    if (dnnl_memory_desc_init_by_strides(&a, 2, dims, dnnl_bf16, strides) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&b, 2, dims, dnnl_bf16, strides) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&c, 2, dims, dnnl_f32, strides) != dnnl_success)
        return NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) != dnnl_success) return NULL;
    if (dnnl_primitive_desc_create(&pd, &md, NULL, dnnl_eng, NULL) != dnnl_success) return NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(impl_copy, sizeof impl_copy, "%s", impl);
    else
        impl_copy[0] = 0;
    dnnl_primitive_desc_destroy(pd);
    return impl_copy[0] ? impl_copy : NULL;
}
#endif

static void bf16_choose(void)
{
    const char *want = getenv("BATON_CPU_BF16");
    if (!want || !*want) want = "auto";
    if (strcmp(want, "auto") && strcmp(want, "amx") && strcmp(want, "avx512_bf16") &&
        strcmp(want, "f32")) {
        snprintf(bf16_error, sizeof bf16_error,
                 "BATON_CPU_BF16=%s: expected auto, amx, avx512_bf16 or f32", want);
        return;
    }
    if (bt_cpu_isa_check() != BT_OK) {
        snprintf(bf16_error, sizeof bf16_error, "%s", bt_last_error());
        return;
    }
#ifdef BATON_HAVE_DNNL /* the cap first: it binds the f32 GEMMs on oneDNN too */
    if (bt_cpu_isa_capped() && (strcmp(want, "amx") == 0 || strcmp(want, "avx512_bf16") == 0)) {
        snprintf(bf16_error, sizeof bf16_error,
                 "BATON_CPU_BF16=%s: BATON_CPU_ISA=avx2 limits oneDNN to AVX2, which has no bf16 "
                 "matmul (use BATON_CPU_BF16=auto or f32)",
                 want);
        return;
    }
    if (bt_cpu_isa_capped() && dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success) {
        snprintf(bf16_error, sizeof bf16_error,
                 "BATON_CPU_ISA=avx2: oneDNN was already in use and cannot be limited");
        return;
    }
#endif
    if (strcmp(want, "f32") == 0) {
        snprintf(bf16_desc, sizeof bf16_desc,
                 "bf16 operands multiplied in f32 (OpenBLAS; forced by BATON_CPU_BF16=f32)");
        return;
    }
#ifdef BATON_HAVE_DNNL
    if (strcmp(want, "avx512_bf16") == 0 &&
        dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core_bf16) != dnnl_success) {
        snprintf(bf16_error, sizeof bf16_error,
                 "BATON_CPU_BF16=avx512_bf16: oneDNN was already in use and cannot be limited");
        return;
    }
    if (dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) != dnnl_success) {
        snprintf(bf16_error, sizeof bf16_error, "oneDNN: cannot create its CPU engine");
        return;
    }
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *impl = probe_impl();
    const int native = impl && strstr(impl, "ref") == NULL;
    if (native && strstr(impl, "amx") && isa == dnnl_cpu_isa_avx512_core_amx)
        bf16_path = PATH_AMX;
    else if (native && strstr(impl, "bf16") && (isa == dnnl_cpu_isa_avx512_core_bf16 ||
                                                isa == dnnl_cpu_isa_avx512_core_amx))
        bf16_path = PATH_AVX512;
    if ((strcmp(want, "amx") == 0 && bf16_path != PATH_AMX) ||
        (strcmp(want, "avx512_bf16") == 0 && bf16_path != PATH_AVX512)) {
        snprintf(bf16_error, sizeof bf16_error,
                 "BATON_CPU_BF16=%s: this CPU does not offer it (oneDNN's bf16 matmul here: %s)",
                 want, impl ? impl : "none");
        bf16_path = PATH_F32;
        return;
    }
    if (bf16_path == PATH_AMX)
        snprintf(bf16_desc, sizeof bf16_desc, "bf16 on AMX (oneDNN %s)", impl);
    else if (bf16_path == PATH_AVX512)
        snprintf(bf16_desc, sizeof bf16_desc, "bf16 on AVX512-BF16 (oneDNN %s)", impl);
    else
        snprintf(bf16_desc, sizeof bf16_desc,
                 "bf16 operands multiplied in f32 (OpenBLAS): no AMX or AVX512-BF16 %s "
                 "(oneDNN offers %s)",
                 bt_cpu_isa_capped() ? "under BATON_CPU_ISA=avx2" : "on this CPU",
                 impl ? impl : "no bf16 matmul");
#else
    if (strcmp(want, "auto") != 0) {
        snprintf(bf16_error, sizeof bf16_error,
                 "BATON_CPU_BF16=%s: this baton was built without oneDNN (libdnnl-dev)", want);
        return;
    }
    snprintf(bf16_desc, sizeof bf16_desc,
             "bf16 operands multiplied in f32 (OpenBLAS): this baton was built without oneDNN");
#endif
}

bt_status bt_cpu_bf16_init(void)
{
    pthread_once(&bf16_once, bf16_choose);
    if (bf16_error[0]) return bt_error(BT_ERR_UNSUPPORTED, "%s", bf16_error);
    return BT_OK;
}

const char *bt_cpu_bf16_describe(void)
{
    pthread_once(&bf16_once, bf16_choose);
    return bf16_error[0] ? bf16_error : bf16_desc;
}

int bt_cpu_bf16_native(void)
{
    pthread_once(&bf16_once, bf16_choose);
    return bf16_path != PATH_F32;
}

int bt_gemm_bf16_threads_seen(int reset)
{
    return reset ? atomic_exchange(&threads_seen, 0) : atomic_load(&threads_seen);
}

/* ---- the oneDNN path: per-thread primitives and conversion buffers -------------------------- */

#ifdef BATON_HAVE_DNNL

/* Primitives kept per thread: every shape, transpose and epilogue of a stage's GEMMs (three a
 * linear layer and micro-batch size, f32 and bf16 alike since the f32 path runs here too); a
 * miss rebuilds one from oneDNN's own primitive cache (20-90 us). */
#define GEMM_CACHE 64

typedef struct gemm_key {
    int ta, tb, m, n, k, ldc, threads;
    float alpha, beta;
    int bias;     /* 1: C = op(A) op(B) + bias, the bias (n) added in the epilogue */
    int relu;     /* 1: then relu, in the epilogue too */
    int f32;      /* 1: f32 operands read in place (strides lda, ldb); 0: bf16, converted, packed */
    int lda, ldb; /* f32 keys only */
} gemm_key;

typedef struct gemm_entry {
    gemm_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, bias;
    uint64_t used;
} gemm_entry;

typedef struct gemm_tls {
    gemm_entry entry[GEMM_CACHE];
    int n;
    uint64_t clock;
    dnnl_stream_t stream;
    uint16_t *buf; /* A then B in bf16 */
    size_t cap;    /* elements */
    char error[256];
} gemm_tls;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;

static void entry_clear(gemm_entry *e)
{
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->a) dnnl_memory_destroy(e->a);
    if (e->b) dnnl_memory_destroy(e->b);
    if (e->c) dnnl_memory_destroy(e->c);
    if (e->bias) dnnl_memory_destroy(e->bias);
    memset(e, 0, sizeof *e);
}

static void tls_free(void *p)
{
    gemm_tls *t = p;
    if (!t) return;
    for (int i = 0; i < t->n; i++) entry_clear(&t->entry[i]);
    if (t->stream) dnnl_stream_destroy(t->stream);
    free(t->buf);
    free(t);
}

static void tls_make_key(void) { pthread_key_create(&tls_key, tls_free); }

static gemm_tls *tls_get(void)
{
    pthread_once(&tls_once, tls_make_key);
    gemm_tls *t = pthread_getspecific(tls_key);
    if (t) return t;
    t = calloc(1, sizeof *t);
    if (!t) return NULL;
    if (dnnl_stream_create(&t->stream, dnnl_eng, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(tls_key, t) != 0) {
        if (t->stream) dnnl_stream_destroy(t->stream);
        free(t);
        return NULL;
    }
    return t;
}

static int key_equal(const gemm_key *a, const gemm_key *b)
{
    return a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->ldc == b->ldc && a->threads == b->threads && a->alpha == b->alpha &&
           a->beta == b->beta && a->bias == b->bias && a->relu == b->relu && a->f32 == b->f32 &&
           a->lda == b->lda && a->ldb == b->ldb;
}

#define DNNL_TRY(call, what)                                                                     \
    do {                                                                                         \
        if ((call) != dnnl_success) {                                                            \
            snprintf(t->error, sizeof t->error, "oneDNN: %s failed for %s GEMM %dx%dx%d",       \
                     what, key->f32 ? "an f32" : "a bf16", key->m, key->n, key->k);              \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)

/* A matmul primitive for the key, with memory objects whose data handles each call sets. */
static gemm_entry *entry_build(gemm_tls *t, const gemm_key *key)
{
    gemm_entry *e = NULL;
    if (t->n < GEMM_CACHE) {
        e = &t->entry[t->n++];
    } else {
        e = &t->entry[0];
        for (int i = 1; i < GEMM_CACHE; i++)
            if (t->entry[i].used < e->used) e = &t->entry[i];
        entry_clear(e);
    }
    e->key = *key;
    dnnl_memory_desc_t a, b, c, bias;
    dnnl_dims_t da = {key->m, key->k}, db = {key->k, key->n}, dc = {key->m, key->n};
    dnnl_dims_t dbias = {1, key->n}, sbias = {key->n, 1};
    /* bf16 operands are converted into packed buffers; f32 ones are read where they are */
    const int lda = key->f32 ? key->lda : key->ta ? key->m : key->k;
    const int ldb = key->f32 ? key->ldb : key->tb ? key->k : key->n;
    const dnnl_data_type_t ab = key->f32 ? dnnl_f32 : dnnl_bf16;
    dnnl_dims_t sa = {key->ta ? 1 : lda, key->ta ? lda : 1};
    dnnl_dims_t sb = {key->tb ? 1 : ldb, key->tb ? ldb : 1};
    dnnl_dims_t sc = {key->ldc, 1};
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_matmul_desc_t md;
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&a, 2, da, ab, sa), "memory_desc_init(A)");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&b, 2, db, ab, sb), "memory_desc_init(B)");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc), "memory_desc_init(C)");
    if (key->bias)
        DNNL_TRY(dnnl_memory_desc_init_by_strides(&bias, 2, dbias, dnnl_f32, sbias), "memory_desc_init(bias)");
    DNNL_TRY(dnnl_matmul_desc_init(&md, &a, &b, key->bias ? &bias : NULL, &c), "matmul_desc_init");
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    if (key->alpha != 1)
        DNNL_TRY(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key->alpha), "output scales");
    if (key->beta != 0 || key->relu) {
        DNNL_TRY(dnnl_post_ops_create(&po), "post_ops_create");
        if (key->beta != 0) DNNL_TRY(dnnl_post_ops_append_sum(po, key->beta), "post_ops_append_sum");
        if (key->relu)
            DNNL_TRY(dnnl_post_ops_append_eltwise(po, 1, dnnl_eltwise_relu, 0, 0), "append_eltwise(relu)");
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    DNNL_TRY(dnnl_primitive_desc_create(&pd, &md, attr, dnnl_eng, NULL), "primitive_desc_create");
    DNNL_TRY(dnnl_primitive_create(&e->prim, pd), "primitive_create");
    DNNL_TRY(dnnl_memory_create(&e->a, &a, dnnl_eng, DNNL_MEMORY_NONE), "memory_create(A)");
    DNNL_TRY(dnnl_memory_create(&e->b, &b, dnnl_eng, DNNL_MEMORY_NONE), "memory_create(B)");
    DNNL_TRY(dnnl_memory_create(&e->c, &c, dnnl_eng, DNNL_MEMORY_NONE), "memory_create(C)");
    if (key->bias)
        DNNL_TRY(dnnl_memory_create(&e->bias, &bias, dnnl_eng, DNNL_MEMORY_NONE), "memory_create(bias)");
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    return e;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    entry_clear(e); /* a zero key (m = 0) matches no call; the slot is reused first */
    return NULL;
}

static int gemm_dnnl_run(gemm_tls *t, const gemm_key *key, gemm_entry *e, bt_bf16_param *pa,
                         bt_bf16_param *pb, const float *a, int lda, const float *b, int ldb,
                         const float *bias, float *c);

/* 0 on success; else the error is in t->error and C is untouched. param: BT_GEMM_PARAM_A/B. */
static int gemm_dnnl(gemm_tls *t, const gemm_key *key, int param, const float *a, int lda,
                     const float *b, int ldb, const float *bias, float *c)
{
    gemm_entry *e = NULL;
    for (int i = 0; i < t->n && !e; i++)
        if (key_equal(&t->entry[i].key, key)) e = &t->entry[i];
    if (!e && !(e = entry_build(t, key))) return -1;
    e->used = ++t->clock;
    if (key->f32) param = 0; /* read in place: nothing to keep */
    const int rows_a = key->ta ? key->k : key->m, cols_a = key->ta ? key->m : key->k;
    const int rows_b = key->tb ? key->n : key->k, cols_b = key->tb ? key->k : key->n;
    bt_bf16_param *pa = param & BT_GEMM_PARAM_A ? bt_bf16_param_acquire(a, rows_a, cols_a, lda, key->threads) : NULL;
    bt_bf16_param *pb = param & BT_GEMM_PARAM_B ? bt_bf16_param_acquire(b, rows_b, cols_b, ldb, key->threads) : NULL;
    const int rc = gemm_dnnl_run(t, key, e, pa, pb, a, lda, b, ldb, bias, c);
    bt_bf16_param_release(pa);
    bt_bf16_param_release(pb);
    return rc;
}

static int gemm_dnnl_run(gemm_tls *t, const gemm_key *key, gemm_entry *e, bt_bf16_param *pa,
                         bt_bf16_param *pb, const float *a, int lda, const float *b, int ldb,
                         const float *bias, float *c)
{
    const void *ha = a, *hb = b; /* f32: the operands themselves */
    if (!key->f32) {
        const size_t na = pa ? 0 : (size_t)key->m * key->k, nb = pb ? 0 : (size_t)key->k * key->n;
        if (na + nb > t->cap) {
            uint16_t *grown = realloc(t->buf, (na + nb) * sizeof *grown);
            if (!grown) {
                snprintf(t->error, sizeof t->error, "out of memory for a bf16 GEMM's operands (%zu bytes)",
                         (na + nb) * sizeof *grown);
                return -1;
            }
            t->buf = grown;
            t->cap = na + nb;
        }
        uint16_t *a16 = pa ? (uint16_t *)bt_bf16_param_data(pa) : t->buf;
        uint16_t *b16 = pb ? (uint16_t *)bt_bf16_param_data(pb) : t->buf + na;
        if (!pa) bt_bf16_convert(a, key->ta ? key->k : key->m, key->ta ? key->m : key->k, lda, a16, key->threads);
        if (!pb) bt_bf16_convert(b, key->tb ? key->n : key->k, key->tb ? key->k : key->n, ldb, b16, key->threads);
        ha = a16, hb = b16;
    }
    if (dnnl_memory_set_data_handle(e->a, (void *)ha) != dnnl_success ||
        dnnl_memory_set_data_handle(e->b, (void *)hb) != dnnl_success ||
        dnnl_memory_set_data_handle(e->c, c) != dnnl_success ||
        (key->bias && dnnl_memory_set_data_handle(e->bias, (void *)bias) != dnnl_success)) {
        snprintf(t->error, sizeof t->error, "oneDNN: memory_set_data_handle failed");
        return -1;
    }
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e->a},
                               {DNNL_ARG_WEIGHTS, e->b},
                               {DNNL_ARG_DST, e->c},
                               {DNNL_ARG_BIAS, e->bias}};
    if (dnnl_primitive_execute(e->prim, t->stream, key->bias ? 4 : 3, args) != dnnl_success ||
        dnnl_stream_wait(t->stream) != dnnl_success) {
        snprintf(t->error, sizeof t->error, "oneDNN: %s GEMM %dx%dx%d failed to run",
                 key->f32 ? "an f32" : "a bf16", key->m, key->n, key->k);
        return -1;
    }
    return 0;
}
#endif

#ifdef BATON_HAVE_DNNL
/* The calling thread's state with OpenMP set to `threads` for the call (recorded for the tests);
 * NULL (said once per thread) when there is no memory for it: the caller computes with sgemm. */
static gemm_tls *tls_for_call(int threads)
{
    static __thread int said;
    gemm_tls *t = tls_get();
    if (!t) {
        if (!said) fprintf(stderr, "baton: out of memory for bf16 GEMM state: computing in f32\n");
        said = 1;
        return NULL;
    }
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    const int used = omp_get_max_threads(); /* what oneDNN will run this call with */
    int seen = atomic_load(&threads_seen);
    while (used > seen && !atomic_compare_exchange_weak(&threads_seen, &seen, used)) {}
    return t;
}
#endif

int bt_gemm_dnnl_f32(int threads, int trans_a, int trans_b, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *b, int ldb, float beta, const float *bias,
                     int relu, float *c, int ldc)
{
#ifdef BATON_HAVE_DNNL
    if (m <= 0 || n <= 0 || k <= 0) return -1;
    gemm_tls *t = tls_get();
    if (!t) return -1;
    if (threads < 1) threads = 1;
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    const gemm_key key = {trans_a != 0, trans_b != 0, m, n, k, ldc, threads, alpha, beta, bias != NULL,
                          relu != 0, 1, lda, ldb};
    if (gemm_dnnl(t, &key, 0, a, lda, b, ldb, bias, c) == 0) return 0;
    t->error[0] = 0; /* the caller computes it another way */
    return -1;
#else
    (void)threads, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k, (void)alpha, (void)a;
    (void)lda, (void)b, (void)ldb, (void)beta, (void)bias, (void)relu, (void)c, (void)ldc;
    return -1;
#endif
}

void bt_gemm_at(bt_dtype precision, int threads, int trans_a, int trans_b, int m, int n, int k,
                float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c,
                int ldc)
{
    bt_gemm_param(precision, threads, 0, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
                  ldc);
}

void bt_gemm_param(bt_dtype precision, int threads, int param, int trans_a, int trans_b, int m,
                   int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                   float beta, float *c, int ldc)
{
#ifdef BATON_HAVE_DNNL
    if (precision == BT_BF16 && m > 0 && n > 0 && k > 0 && bt_cpu_bf16_native()) {
        if (threads < 1) threads = 1;
        gemm_tls *t = tls_for_call(threads);
        const gemm_key key = {trans_a != 0, trans_b != 0, m, n, k, ldc, threads, alpha, beta, 0, 0, 0, 0, 0};
        if (t && gemm_dnnl(t, &key, param, a, lda, b, ldb, NULL, c) == 0) return;
    }
#else
    (void)precision;
    (void)threads;
    (void)param;
#endif
    bt_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void bt_gemm_bias(bt_dtype precision, int threads, int param, int trans_a, int trans_b, int m,
                  int n, int k, const float *a, int lda, const float *b, int ldb, const float *bias,
                  int relu, float *c, int ldc)
{
#ifdef BATON_HAVE_DNNL
    if (precision == BT_BF16 && m > 0 && n > 0 && k > 0 && bt_cpu_bf16_native()) {
        if (threads < 1) threads = 1;
        gemm_tls *t = tls_for_call(threads);
        const gemm_key key = {trans_a != 0, trans_b != 0, m, n, k, ldc, threads, 1, 0, 1, relu != 0, 0, 0, 0};
        if (t && gemm_dnnl(t, &key, param, a, lda, b, ldb, bias, c) == 0) return;
    }
    /* f32 on oneDNN: the bias and the relu in the matmul's epilogue too */
    if (precision == BT_F32 && bt_cpu_f32_onednn() &&
        bt_gemm_dnnl_f32(threads, trans_a, trans_b, m, n, k, 1, a, lda, b, ldb, 0, bias, relu, c, ldc) == 0) {
        bt_gemm_f32_note_threads(threads < 1 ? 1 : threads);
        return;
    }
#endif
    for (int r = 0; r < m; r++) memcpy(c + (size_t)r * ldc, bias, (size_t)n * sizeof *c);
    bt_gemm_param(precision, threads, param, trans_a, trans_b, m, n, k, 1, a, lda, b, ldb, 1, c, ldc);
    if (!relu) return;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            float *v = c + (size_t)r * ldc + j;
            *v = *v > 0 ? *v : 0;
        }
}

bt_status bt_gemm_take_error(void)
{
#ifdef BATON_HAVE_DNNL
    if (pthread_once(&tls_once, tls_make_key) != 0) return BT_OK;
    gemm_tls *t = pthread_getspecific(tls_key);
    if (t && t->error[0]) {
        bt_status st = bt_error(BT_ERR_BACKEND, "%s", t->error);
        t->error[0] = 0;
        return st;
    }
#endif
    return BT_OK;
}
