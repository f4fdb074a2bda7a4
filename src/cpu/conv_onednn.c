/* cpu/conv_onednn.c: conv2d through oneDNN's convolution primitives (cpu/conv_onednn.h says what
 * and why; which calls take this path is cpu/conv_choice.c's).
 *
 * Each primitive (forward with bias and relu as post-op; backward data; backward weights with the
 * bias gradient) is built with "any" layouts, so oneDNN picks its preferred (blocked) layout, and
 * every argument whose layout or type differs from baton's NCHW f32 is copied: inputs into a
 * buffer before the primitive, outputs out of one after it. A gradient output is always written to
 * a buffer and added to the caller's gradient (the kernel contract: backward adds). Under bf16 the
 * input copies convert f32 to bf16 (round to nearest even, exact for the bf16 values mixed
 * precision hands over: what the bf16 GEMM path does). Activations and their gradients in
 * nChw16c, the layout oneDNN picks for them on AVX-512, are copied by cpu/blocked16.c, which
 * fuses the forward output's rounding (below) and the gradient's addition into the copy; the rest
 * (weights, biases, other layouts, CPUs without AVX-512) by oneDNN reorders, a gradient's with a
 * sum post-op. The backward's output gradient dy is copied once: the backward-weights primitive
 * reads the backward-data primitive's copy where their layouts agree. (A fused relu's backward
 * mask folded into dy's copy measured no faster than ops/conv.c's pass in place before it: the
 * copy then reads two tensors and does more work per element, and the pass runs in cache.)
 *
 * baton's output size rounds down (Ho = (H + 2p - k) / s + 1); oneDNN wants the right padding
 * that makes the sizes agree, which is negative when the last rows of the input are never read:
 * those rows are then left out of the input descriptor (a strided view), and their gradient is 0.
 *
 * Under mixed precision (bf16, f16) the forward's output holds values of the precision, so the
 * executor skips its rounding pass (ops/conv.c's lowp_exact). A bf16 forward with native bf16
 * writes bf16 itself (half the bytes to write and to copy out): oneDNN rounds its f32 sums to
 * nearest even with VCVTNEPS2BF16, which flushes subnormal results to zero where baton's rounding
 * (core/half.c) keeps them; its bf16 dot products (VDPBF16PS) already read subnormal operands as
 * zero (checked on the development CPU: the smallest bf16 subnormal times 2^100 gives 0), so
 * the path was never exact in that range, and its results agree with im2col's within rounding,
 * not bit for bit, as before. Otherwise the copy out rounds (arg_out: fused into the copy out of
 * nChw16c for bf16, a pass after it for f16).
 *
 * Primitives, their buffers and the stream are per calling thread (a stage's worker), cached by
 * shape (LRU, CONV_CACHE entries); building one costs a millisecond or more, running it does not
 * allocate. OpenMP's thread count is set to the call's `threads` first, as gemm_bf16.c does. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "core/error.h"
#include "core/half.h"
#include "core/util.h"
#include "cpu/blas.h"
#include "cpu/blocked16.h"
#include "cpu/conv_onednn.h"

#ifdef BATON_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
extern void omp_set_num_threads(int n);
extern int omp_get_max_threads(void);
#endif

/* ---- the oneDNN primitives --------------------------------------------------------------------- */

#ifdef BATON_HAVE_DNNL

enum { KIND_FWD = 0, KIND_BWD_DATA = 1, KIND_BWD_WEIGHTS = 2 };
#define CONV_CACHE 16
#define MAX_ARGS 5

typedef struct conv_key {
    int64_t n, c, h, w, out, ho, wo, kh, kw, sh, sw, ph, pw;
    int bias, relu, bf16, threads, kind;
} conv_key;

typedef struct conv_arg {
    int arg;                   /* DNNL_ARG_* of the primitive */
    int out;                   /* written by the primitive */
    int add;                   /* an output added to the caller's (a gradient) */
    dnnl_memory_t user;        /* the caller's f32 NCHW memory; handle set per call */
    dnnl_memory_t prim;        /* what the primitive reads or writes: user itself, or buf */
    dnnl_primitive_t reorder;  /* user -> buf (inputs), buf -> user (outputs, gradients added) */
    void *buf;
    /* buf is nChw16c and user dense NCHW: copied by cpu/blocked16.c instead of a reorder
     * (blocked16 = 1; then reorder is NULL): [n, c, hw], bf16 1 where buf holds bf16 */
    int blocked16, bf16;
    int64_t n, c, hw;
} conv_arg;

typedef struct conv_entry {
    conv_key key;
    dnnl_primitive_t prim;
    conv_arg arg[MAX_ARGS];
    int n_arg;
    uint64_t used;
} conv_entry;

typedef struct conv_tls {
    conv_entry entry[CONV_CACHE];
    int n;
    uint64_t clock;
    dnnl_engine_t eng;
    dnnl_stream_t stream;
} conv_tls;

static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static atomic_int threads_seen;

static void entry_clear(conv_entry *e)
{
    if (e->prim) dnnl_primitive_destroy(e->prim);
    for (int i = 0; i < e->n_arg; i++) {
        conv_arg *a = &e->arg[i];
        if (a->reorder) dnnl_primitive_destroy(a->reorder);
        if (a->prim && a->prim != a->user) dnnl_memory_destroy(a->prim);
        if (a->user) dnnl_memory_destroy(a->user);
        free(a->buf);
    }
    memset(e, 0, sizeof *e);
}

static void tls_free(void *p)
{
    conv_tls *t = p;
    if (!t) return;
    for (int i = 0; i < t->n; i++) entry_clear(&t->entry[i]);
    if (t->stream) dnnl_stream_destroy(t->stream);
    if (t->eng) dnnl_engine_destroy(t->eng);
    free(t);
}

static void tls_make_key(void) { pthread_key_create(&tls_key, tls_free); }

static bt_status tls_get(conv_tls **out)
{
    pthread_once(&tls_once, tls_make_key);
    conv_tls *t = pthread_getspecific(tls_key);
    if (t) {
        *out = t;
        return BT_OK;
    }
    if (!(t = calloc(1, sizeof *t))) return bt_error(BT_ERR_NOMEM, "conv2d on oneDNN: out of memory");
    /* oneDNN's ISA limits (BATON_CPU_ISA, BATON_CPU_BF16) are set there, before any engine exists;
     * its error is the device open's to report, which always runs it first */
    const bt_status chosen = bt_cpu_bf16_init();
    if (chosen != BT_OK) {
        free(t);
        return chosen;
    }
    if (dnnl_engine_create(&t->eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&t->stream, t->eng, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(tls_key, t) != 0) {
        tls_free(t);
        return bt_error(BT_ERR_BACKEND, "oneDNN: cannot create a CPU engine and stream");
    }
    *out = t;
    return BT_OK;
}

#define TRY(call, what)                                                                          \
    do {                                                                                         \
        dnnl_status_t rc_ = (call);                                                              \
        if (rc_ != dnnl_success) {                                                               \
            st = bt_error(BT_ERR_BACKEND, "oneDNN: %s failed (status %d) for conv2d %s", what,   \
                          (int)rc_, shape);                                                      \
            goto fail;                                                                           \
        }                                                                                        \
    } while (0)

/* The caller's f32 memory of a (N, C, H, W) tensor whose first h rows and w columns are read:
 * a view with the full tensor's strides. */
static dnnl_status_t user_md4(dnnl_memory_desc_t *md, int64_t n, int64_t c, int64_t h_full,
                              int64_t w_full, int64_t h, int64_t w)
{
    dnnl_dims_t dims = {n, c, h, w}, strides = {c * h_full * w_full, h_full * w_full, w_full, 1};
    return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

/* Whether a copy between user_md (f32) and prim_md is one of cpu/blocked16.c's: user dense NCHW,
 * prim nChw16c (one inner block of 16 channels, the channels padded to a multiple of 16, nothing
 * else padded or offset) in f32 or bf16, and the CPU runs those copies with AVX-512. */
static int blocked16_pair(const dnnl_memory_desc_t *u, const dnnl_memory_desc_t *p)
{
    if (!bt_blocked16_available() || u->ndims != 4 || p->ndims != 4 || u->data_type != dnnl_f32 ||
        (p->data_type != dnnl_f32 && p->data_type != dnnl_bf16) || u->format_kind != dnnl_blocked ||
        p->format_kind != dnnl_blocked || u->offset0 != 0 || p->offset0 != 0 ||
        p->extra.flags != 0 || u->extra.flags != 0)
        return 0;
    const dnnl_dim_t n = u->dims[0], c = u->dims[1], h = u->dims[2], w = u->dims[3], cb = (c + 15) / 16;
    const dnnl_blocking_desc_t *ub = &u->format_desc.blocking, *pb = &p->format_desc.blocking;
    for (int i = 0; i < 4; i++)
        if (p->dims[i] != u->dims[i] || p->padded_offsets[i] != 0 || u->padded_offsets[i] != 0 ||
            u->padded_dims[i] != u->dims[i] || (i != 1 && p->padded_dims[i] != p->dims[i]))
            return 0;
    return ub->inner_nblks == 0 && ub->strides[0] == c * h * w && ub->strides[1] == h * w &&
           ub->strides[2] == w && ub->strides[3] == 1 && pb->inner_nblks == 1 &&
           pb->inner_blks[0] == 16 && pb->inner_idxs[0] == 1 && p->padded_dims[1] == cb * 16 &&
           pb->strides[3] == 16 && pb->strides[2] == 16 * w && pb->strides[1] == 16 * h * w &&
           pb->strides[0] == 16 * h * w * cb && n > 0;
}

/* One argument: the caller's memory (user_md) and the primitive's (prim_md); a copy between
 * them where they differ or where the output is added to the caller's: cpu/blocked16.c's where
 * it applies (blocked16_pair), a reorder otherwise. */
static bt_status arg_build(conv_tls *t, conv_entry *e, int which, const dnnl_memory_desc_t *user_md,
                           const dnnl_memory_desc_t *prim_md, int out, int add, const char *shape)
{
    bt_status st = BT_OK;
    conv_arg *a = &e->arg[e->n_arg++];
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    a->arg = which, a->out = out, a->add = add;
    TRY(dnnl_memory_create(&a->user, user_md, t->eng, DNNL_MEMORY_NONE), "memory_create");
    if (!add && dnnl_memory_desc_equal(user_md, prim_md)) {
        a->prim = a->user;
        return BT_OK;
    }
    const size_t bytes = (dnnl_memory_desc_get_size(prim_md) + 63) & ~(size_t)63;
    if (!(a->buf = aligned_alloc(64, bytes ? bytes : 64)))
        return bt_error(BT_ERR_NOMEM, "conv2d on oneDNN: out of memory (%zu bytes)", bytes);
    TRY(dnnl_memory_create(&a->prim, prim_md, t->eng, a->buf), "memory_create");
    if (blocked16_pair(user_md, prim_md)) {
        a->blocked16 = 1, a->bf16 = prim_md->data_type == dnnl_bf16;
        a->n = user_md->dims[0], a->c = user_md->dims[1], a->hw = user_md->dims[2] * user_md->dims[3];
        return BT_OK;
    }
    TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    if (add) {
        TRY(dnnl_post_ops_create(&po), "post_ops_create");
        TRY(dnnl_post_ops_append_sum(po, 1.0f), "post_ops_append_sum");
        TRY(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    if (out)
        TRY(dnnl_reorder_primitive_desc_create(&rpd, prim_md, t->eng, user_md, t->eng, attr),
            "reorder_primitive_desc_create");
    else
        TRY(dnnl_reorder_primitive_desc_create(&rpd, user_md, t->eng, prim_md, t->eng, attr),
            "reorder_primitive_desc_create");
    TRY(dnnl_primitive_create(&a->reorder, rpd), "primitive_create(reorder)");
fail:
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

/* An input argument's copy into the primitive's buffer, from the caller's memory ptr. */
static bt_status arg_in(conv_tls *t, const conv_entry *e, const conv_arg *a, const void *ptr)
{
    if (a->blocked16) {
        bt_blocked16_from_nchw(ptr, a->buf, a->bf16, a->n, a->c, a->hw, e->key.threads);
        return BT_OK;
    }
    dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->user}, {DNNL_ARG_TO, a->prim}};
    if (dnnl_primitive_execute(a->reorder, t->stream, 2, r) != dnnl_success)
        return bt_error(BT_ERR_BACKEND, "oneDNN: a conv2d input reorder failed to run");
    return BT_OK;
}

/* An output argument's copy out of the primitive's buffer into the caller's memory y (added
 * where a->add), after the primitive finished. round BT_BF16 or BT_F16 (the forward's output
 * under mixed precision): y rounded as the executor's round_to would round it (bt_round_array), so
 * conv2d's forward declares its output exact (ops/conv.c, lowp_exact) and the worker skips that
 * pass: nothing to do where the primitive wrote bf16 (a->bf16), fused into the copy out of
 * nChw16c for bf16 otherwise (blocked16.c), a pass after the copy where neither applies. */
static bt_status arg_out(conv_tls *t, const conv_entry *e, const conv_arg *a, bt_dtype round, float *y)
{
    if (dnnl_stream_wait(t->stream) != dnnl_success)
        return bt_error(BT_ERR_BACKEND, "oneDNN: waiting for a conv2d failed");
    if (a->blocked16 && (round == BT_F32 || round == BT_BF16)) {
        const int mode = a->add                      ? BT_BLOCKED16_ADD
                         : round == BT_BF16 && !a->bf16 ? BT_BLOCKED16_ROUND_BF16
                                                      : BT_BLOCKED16_COPY;
        bt_blocked16_to_nchw(a->buf, a->bf16, y, mode, a->n, a->c, a->hw, e->key.threads);
        return BT_OK;
    }
    if (a->blocked16) {
        bt_blocked16_to_nchw(a->buf, a->bf16, y, BT_BLOCKED16_COPY, a->n, a->c, a->hw, e->key.threads);
    } else if (a->reorder) {
        dnnl_exec_arg_t r[2] = {{DNNL_ARG_FROM, a->prim}, {DNNL_ARG_TO, a->user}};
        if (dnnl_primitive_execute(a->reorder, t->stream, 2, r) != dnnl_success ||
            dnnl_stream_wait(t->stream) != dnnl_success)
            return bt_error(BT_ERR_BACKEND, "oneDNN: a conv2d output reorder failed to run");
    }
    if (round != BT_F32) {
        const int64_t planes = e->key.n * e->key.out, hw = e->key.ho * e->key.wo;
        BT_PARALLEL_FOR(e->key.threads)
        for (int64_t p = 0; p < planes; p++) bt_round_array(round, y + p * hw, (size_t)hw);
    }
    return BT_OK;
}

/* The effective input rows/columns and right padding of one axis (see the opening comment). */
static void axis(int64_t in, int64_t k, int64_t s, int64_t p, int64_t o, int64_t *in_used,
                 int64_t *pad_r)
{
    const int64_t last = (o - 1) * s - p + k - 1; /* last input index a window reaches */
    if (last >= in - 1) *in_used = in, *pad_r = last - (in - 1);
    else *in_used = last + 1, *pad_r = 0;
}

static bt_status entry_build(conv_tls *t, const conv_key *k, conv_entry **out)
{
    bt_status st = BT_OK;
    char shape[160];
    snprintf(shape, sizeof shape, "[%lld, %lld, %lld, %lld] k%lldx%lld s%lldx%lld p%lldx%lld -> %lld (%s)",
             (long long)k->n, (long long)k->c, (long long)k->h, (long long)k->w, (long long)k->kh,
             (long long)k->kw, (long long)k->sh, (long long)k->sw, (long long)k->ph,
             (long long)k->pw, (long long)k->out, k->bf16 ? "bf16" : "f32");
    conv_entry *e = NULL;
    if (t->n < CONV_CACHE) {
        e = &t->entry[t->n++];
    } else {
        e = &t->entry[0];
        for (int i = 1; i < CONV_CACHE; i++)
            if (t->entry[i].used < e->used) e = &t->entry[i];
        entry_clear(e);
    }
    memcpy(&e->key, k, sizeof *k); /* padding too: keys are compared with memcmp */
    const dnnl_data_type_t dt = k->bf16 ? dnnl_bf16 : dnnl_f32;
    int64_t h_used, w_used, pr_h, pr_w;
    axis(k->h, k->kh, k->sh, k->ph, k->ho, &h_used, &pr_h);
    axis(k->w, k->kw, k->sw, k->pw, k->wo, &w_used, &pr_w);
    dnnl_dims_t src_d = {k->n, k->c, h_used, w_used}, wei_d = {k->out, k->c, k->kh, k->kw};
    dnnl_dims_t dst_d = {k->n, k->out, k->ho, k->wo}, bias_d = {k->out};
    dnnl_dims_t strides = {k->sh, k->sw}, pad_l = {k->ph, k->pw}, pad_r = {pr_h, pr_w};
    dnnl_memory_desc_t src, wei, dst, bias, f32_src, f32_wei, f32_dst;
    dnnl_memory_desc_t u_src, u_wei, u_dst, u_bias;
    dnnl_convolution_desc_t fd, bd;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t fpd = NULL, pd = NULL;
    TRY(dnnl_memory_desc_init_by_tag(&src, 4, src_d, dt, dnnl_format_tag_any), "memory_desc(src)");
    TRY(dnnl_memory_desc_init_by_tag(&wei, 4, wei_d, dt, dnnl_format_tag_any), "memory_desc(weights)");
    TRY(dnnl_memory_desc_init_by_tag(&dst, 4, dst_d, dt, dnnl_format_tag_any), "memory_desc(dst)");
    TRY(dnnl_memory_desc_init_by_tag(&f32_src, 4, src_d, dnnl_f32, dnnl_format_tag_any), "memory_desc(src)");
    TRY(dnnl_memory_desc_init_by_tag(&f32_wei, 4, wei_d, dnnl_f32, dnnl_format_tag_any), "memory_desc(weights)");
    TRY(dnnl_memory_desc_init_by_tag(&f32_dst, 4, dst_d, dnnl_f32, dnnl_format_tag_any), "memory_desc(dst)");
    TRY(dnnl_memory_desc_init_by_tag(&bias, 1, bias_d, dnnl_f32, dnnl_x), "memory_desc(bias)");
    TRY(user_md4(&u_src, k->n, k->c, k->h, k->w, h_used, w_used), "memory_desc(x)");
    TRY(dnnl_memory_desc_init_by_tag(&u_wei, 4, wei_d, dnnl_f32, dnnl_oihw), "memory_desc(w)");
    TRY(dnnl_memory_desc_init_by_tag(&u_dst, 4, dst_d, dnnl_f32, dnnl_nchw), "memory_desc(y)");
    u_bias = bias;
    /* the forward (the backward's hint): dst f32, but bf16 for a bf16 forward (see the header) */
    const int fwd_bias = k->kind == KIND_BWD_DATA ? 0 : k->bias;
    TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &src,
                                           &wei, fwd_bias ? &bias : NULL,
                                           k->kind == KIND_FWD && k->bf16 ? &dst : &f32_dst, strides,
                                           pad_l, pad_r),
        "convolution_forward_desc_init");
    TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    if (k->kind == KIND_FWD && k->relu) {
        TRY(dnnl_post_ops_create(&po), "post_ops_create");
        TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f), "append_eltwise(relu)");
        TRY(dnnl_primitive_attr_set_post_ops(attr, po), "set_post_ops");
    }
    TRY(dnnl_primitive_desc_create(&fpd, &fd, attr, t->eng, NULL), "primitive_desc_create(forward)");
    if (k->kind == KIND_FWD) {
        TRY(dnnl_primitive_create(&e->prim, fpd), "primitive_create(forward)");
        if ((st = arg_build(t, e, DNNL_ARG_SRC, &u_src, dnnl_primitive_desc_query_md(fpd, dnnl_query_src_md, 0), 0, 0, shape)) != BT_OK ||
            (st = arg_build(t, e, DNNL_ARG_WEIGHTS, &u_wei, dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 0), 0, 0, shape)) != BT_OK ||
            (k->bias && (st = arg_build(t, e, DNNL_ARG_BIAS, &u_bias, dnnl_primitive_desc_query_md(fpd, dnnl_query_weights_md, 1), 0, 0, shape)) != BT_OK) ||
            (st = arg_build(t, e, DNNL_ARG_DST, &u_dst, dnnl_primitive_desc_query_md(fpd, dnnl_query_dst_md, 0), 1, 0, shape)) != BT_OK)
            goto fail;
    } else if (k->kind == KIND_BWD_DATA) {
        TRY(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &f32_src, &wei,
                                                     &dst, strides, pad_l, pad_r),
            "convolution_backward_data_desc_init");
        TRY(dnnl_primitive_desc_create(&pd, &bd, NULL, t->eng, fpd), "primitive_desc_create(backward data)");
        TRY(dnnl_primitive_create(&e->prim, pd), "primitive_create(backward data)");
        if ((st = arg_build(t, e, DNNL_ARG_DIFF_DST, &u_dst, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0), 0, 0, shape)) != BT_OK ||
            (st = arg_build(t, e, DNNL_ARG_WEIGHTS, &u_wei, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0), 0, 0, shape)) != BT_OK ||
            (st = arg_build(t, e, DNNL_ARG_DIFF_SRC, &u_src, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_src_md, 0), 1, 1, shape)) != BT_OK)
            goto fail;
    } else {
        TRY(dnnl_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &src, &f32_wei,
                                                        k->bias ? &bias : NULL, &dst, strides,
                                                        pad_l, pad_r),
            "convolution_backward_weights_desc_init");
        TRY(dnnl_primitive_desc_create(&pd, &bd, NULL, t->eng, fpd), "primitive_desc_create(backward weights)");
        TRY(dnnl_primitive_create(&e->prim, pd), "primitive_create(backward weights)");
        if ((st = arg_build(t, e, DNNL_ARG_SRC, &u_src, dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0), 0, 0, shape)) != BT_OK ||
            (st = arg_build(t, e, DNNL_ARG_DIFF_DST, &u_dst, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_dst_md, 0), 0, 0, shape)) != BT_OK ||
            (st = arg_build(t, e, DNNL_ARG_DIFF_WEIGHTS, &u_wei, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 0), 1, 1, shape)) != BT_OK ||
            (k->bias && (st = arg_build(t, e, DNNL_ARG_DIFF_BIAS, &u_bias, dnnl_primitive_desc_query_md(pd, dnnl_query_diff_weights_md, 1), 1, 1, shape)) != BT_OK))
            goto fail;
    }
    if (pd) dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_desc_destroy(fpd);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    *out = e;
    return BT_OK;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (po) dnnl_post_ops_destroy(po);
    if (attr) dnnl_primitive_attr_destroy(attr);
    entry_clear(e); /* a zeroed key (n = 0) matches no call; the slot is reused first */
    return st;
}

/* Runs the entry on the caller's pointers (one per argument, in the order built; NULL for an
 * output: not wanted, its copy out is skipped); round BT_BF16 or BT_F16: the forward's output is
 * rounded to it (arg_out), BT_F32: not. given (NULL, or one per argument): an input's memory in
 * the primitive's own layout already (another entry's copy of the same tensor), used as it is. */
static bt_status entry_run(conv_tls *t, conv_entry *e, void *const *ptr, bt_dtype round,
                           const dnnl_memory_t *given)
{
    dnnl_exec_arg_t args[MAX_ARGS];
    for (int i = 0; i < e->n_arg; i++) {
        conv_arg *a = &e->arg[i];
        args[i].arg = a->arg, args[i].memory = a->prim;
        if (given && given[i]) {
            args[i].memory = given[i];
            continue;
        }
        if (ptr[i] && dnnl_memory_set_data_handle(a->user, ptr[i]) != dnnl_success)
            return bt_error(BT_ERR_BACKEND, "oneDNN: memory_set_data_handle failed (conv2d)");
        bt_status st = !a->out && a->prim != a->user ? arg_in(t, e, a, ptr[i]) : BT_OK;
        if (st != BT_OK) return st;
    }
    if (dnnl_primitive_execute(e->prim, t->stream, e->n_arg, args) != dnnl_success)
        return bt_error(BT_ERR_BACKEND, "oneDNN: a conv2d primitive failed to run");
    for (int i = 0; i < e->n_arg; i++) {
        conv_arg *a = &e->arg[i];
        if (!a->out || !ptr[i]) continue;
        const bt_dtype r = a->arg == DNNL_ARG_DST ? round : BT_F32;
        if (a->prim == a->user && r == BT_F32) continue;
        bt_status st = arg_out(t, e, a, r, ptr[i]);
        if (st != BT_OK) return st;
    }
    if (dnnl_stream_wait(t->stream) != dnnl_success)
        return bt_error(BT_ERR_BACKEND, "oneDNN: waiting for a conv2d failed");
    return BT_OK;
}

/* Finds or builds the entry for (cf, batch, ...) of `kind` on the calling thread, and sets
 * OpenMP's count for the call. */
static bt_status entry_for(const bt_conv_config *cf, int64_t batch, bt_dtype precision, int threads,
                           int kind, int bias, conv_tls **tp, conv_entry **out)
{
    conv_tls *t = NULL;
    bt_status st = tls_get(&t);
    if (st != BT_OK) return st;
    if (threads < 1) threads = 1;
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    const int used = omp_get_max_threads(); /* what oneDNN will run this call with */
    int seen = atomic_load(&threads_seen);
    while (used > seen && !atomic_compare_exchange_weak(&threads_seen, &seen, used)) {}
    conv_key k;
    memset(&k, 0, sizeof k);
    k.n = batch, k.c = cf->c, k.h = cf->h, k.w = cf->w, k.out = cf->out, k.ho = cf->ho;
    k.wo = cf->wo, k.kh = cf->kh, k.kw = cf->kw, k.sh = cf->sh, k.sw = cf->sw, k.ph = cf->ph;
    k.pw = cf->pw, k.bias = bias, k.relu = kind == KIND_FWD && cf->act == BT_OPS_ACT_RELU;
    k.bf16 = precision == BT_BF16 && bt_cpu_bf16_native();
    k.threads = threads, k.kind = kind;
    *tp = t;
    for (int i = 0; i < t->n; i++)
        if (memcmp(&t->entry[i].key, &k, sizeof k) == 0) {
            t->entry[i].used = ++t->clock;
            *out = &t->entry[i];
            return BT_OK;
        }
    if ((st = entry_build(t, &k, out)) != BT_OK) return st;
    (*out)->used = ++t->clock;
    return BT_OK;
}

bt_status bt_conv_onednn_forward(const bt_conv_config *cf, int64_t batch, bt_dtype precision,
                                 int threads, const float *x, const float *w, const float *b,
                                 float *y)
{
    conv_tls *t = NULL;
    conv_entry *e = NULL;
    bt_status st = entry_for(cf, batch, precision, threads, KIND_FWD, cf->bias && b, &t, &e);
    if (st != BT_OK) return st;
    void *ptr[MAX_ARGS] = {(void *)x, (void *)w};
    int i = 2;
    if (e->key.bias) ptr[i++] = (void *)b;
    ptr[i] = y;
    return entry_run(t, e, ptr, precision == BT_BF16 || precision == BT_F16 ? precision : BT_F32, NULL);
}

/* Whether the backward-weights entry w can read the backward-data entry d's copy of dy: both
 * copy it, into the same layout. */
static int dy_shared(const conv_entry *d, const conv_entry *w)
{
    const conv_arg *ddy = &d->arg[0], *wdy = &w->arg[1];
    const dnnl_memory_desc_t *dmd = NULL, *wmd = NULL;
    return ddy->prim != ddy->user && wdy->prim != wdy->user &&
           dnnl_memory_get_memory_desc(ddy->prim, &dmd) == dnnl_success &&
           dnnl_memory_get_memory_desc(wdy->prim, &wmd) == dnnl_success && dnnl_memory_desc_equal(dmd, wmd);
}

bt_status bt_conv_onednn_backward(const bt_conv_config *cf, int64_t batch, bt_dtype precision,
                                  int threads, const float *x, const float *w, const float *dy,
                                  float *dx, float *dw, float *db)
{
    conv_tls *t = NULL;
    conv_entry *data = NULL, *wts = NULL;
    bt_status st = BT_OK;
    /* both entries first (the newest entry is never the one a new entry replaces, so data stays) */
    if (dx && (st = entry_for(cf, batch, precision, threads, KIND_BWD_DATA, 0, &t, &data)) != BT_OK)
        return st;
    if ((dw || db) &&
        (st = entry_for(cf, batch, precision, threads, KIND_BWD_WEIGHTS, db != NULL, &t, &wts)) != BT_OK)
        return st;
    if (data) {
        void *ptr[MAX_ARGS] = {(void *)dy, (void *)w, dx};
        if ((st = entry_run(t, data, ptr, BT_F32, NULL)) != BT_OK) return st;
    }
    if (wts) {
        void *ptr[MAX_ARGS] = {(void *)x, (void *)dy, dw, db};
        /* dy in the layout both primitives read: copied once, by the backward data's entry */
        dnnl_memory_t given[MAX_ARGS] = {NULL};
        if (data && dy_shared(data, wts)) given[1] = data->arg[0].prim;
        st = entry_run(t, wts, ptr, BT_F32, given);
    }
    return st;
}

int bt_conv_onednn_threads_seen(int reset)
{
    return reset ? atomic_exchange(&threads_seen, 0) : atomic_load(&threads_seen);
}

#else

int bt_conv_onednn_threads_seen(int reset)
{
    (void)reset;
    return 0;
}

bt_status bt_conv_onednn_forward(const bt_conv_config *cf, int64_t batch, bt_dtype precision,
                                 int threads, const float *x, const float *w, const float *b,
                                 float *y)
{
    (void)cf, (void)batch, (void)precision, (void)threads, (void)x, (void)w, (void)b, (void)y;
    return bt_error(BT_ERR_UNSUPPORTED, "conv2d on oneDNN: this baton was built without oneDNN");
}

bt_status bt_conv_onednn_backward(const bt_conv_config *cf, int64_t batch, bt_dtype precision,
                                  int threads, const float *x, const float *w, const float *dy,
                                  float *dx, float *dw, float *db)
{
    (void)cf, (void)batch, (void)precision, (void)threads, (void)x, (void)w, (void)dy;
    (void)dx, (void)dw, (void)db;
    return bt_error(BT_ERR_UNSUPPORTED, "conv2d on oneDNN: this baton was built without oneDNN");
}

#endif
