/* ops/op_configs.h: the private configurations the built-in ops' shape rules store with
 * bt_infer_set_config and their kernels read as call->config, for the CPU kernels (src/ops/) and
 * the CUDA kernels (src/cuda/) alike, plus the buffer sizes both sides must agree on. One
 * definition, so a shape rule and a kernel on either device cannot drift apart. Plain C. */
#ifndef BT_OPS_OP_CONFIGS_H
#define BT_OPS_OP_CONFIGS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/op.h"

/* A helper the CUDA kernels call too (nvcc: host and device code; plain C elsewhere). */
#ifdef __CUDACC__
#define BT_OPS_HOST_DEVICE __host__ __device__
#else
#define BT_OPS_HOST_DEVICE
#endif

/* Every config must fit what bt_infer_set_config copies (BT_OP_CONFIG_MAX): checked at compile
 * time, on the CUDA side (nvcc compiles this header as C++) as on the CPU side. */
#ifdef __cplusplus
#define BT_OPS_CONFIG_FITS(type) \
    static_assert(sizeof(type) <= BT_OP_CONFIG_MAX, #type " exceeds BT_OP_CONFIG_MAX")
#else
#define BT_OPS_CONFIG_FITS(type) \
    _Static_assert(sizeof(type) <= BT_OP_CONFIG_MAX, #type " exceeds BT_OP_CONFIG_MAX")
#endif

/* An activation fused into linear's or conv2d's output (arg `act`; the graph lowers a layer's
 * `act: relu` to it): the forward applies it to the output in place, the backward masks the
 * output gradient in place with it (from the output: relu(z) > 0 exactly where z > 0), so W of a
 * split backward, which copies the gradient after B, gets the masked one. */
#define BT_OPS_ACT_NONE 0
#define BT_OPS_ACT_RELU 1

typedef struct bt_linear_config {
    int64_t in, out;
    int bias;
    int act;                /* BT_OPS_ACT_* */
} bt_linear_config;
BT_OPS_CONFIG_FITS(bt_linear_config);

typedef struct bt_softmax_config {
    int64_t d; /* length of the last dimension */
} bt_softmax_config;
BT_OPS_CONFIG_FITS(bt_softmax_config);

/* saved holds (mean, rstd) as two doubles per row */
typedef struct bt_layernorm_config {
    int64_t d;
    double eps;
} bt_layernorm_config;
BT_OPS_CONFIG_FITS(bt_layernorm_config);

typedef struct bt_conv_config {
    int64_t c, h, w;        /* input */
    int64_t out, ho, wo;    /* output */
    int64_t kh, kw, sh, sw, ph, pw;
    int bias;
    int pointwise;          /* 1x1, stride 1, no padding: im2col is the identity */
    int act;                /* BT_OPS_ACT_* */
} bt_conv_config;
BT_OPS_CONFIG_FITS(bt_conv_config);

/* maxpool saves one int32 argmax per output element */
typedef struct bt_pool_config {
    int64_t c, h, w, ho, wo;
    int64_t kh, kw, sh, sw, ph, pw;
} bt_pool_config;
BT_OPS_CONFIG_FITS(bt_pool_config);

typedef struct bt_embedding_config {
    int64_t num, dim;
} bt_embedding_config;
BT_OPS_CONFIG_FITS(bt_embedding_config);

/* saved holds one mask byte per element */
typedef struct bt_dropout_config {
    double p;
} bt_dropout_config;
BT_OPS_CONFIG_FITS(bt_dropout_config);

typedef struct bt_cross_entropy_config {
    int64_t classes;   /* C */
    int64_t positions; /* labels per sample */
} bt_cross_entropy_config;
BT_OPS_CONFIG_FITS(bt_cross_entropy_config);

/* attention: input [T, (heads + 2 kv_heads) hd] (q | k | v: the heads of each side by side),
 * output [T, heads hd]; query head h reads kv head h / (heads / kv_heads) (grouped-query
 * attention, HF's repeat_kv; kv_heads = heads is multi-head attention on [T, 3C]). saved holds
 * the log-sum-exp of every (query head, query) row as a double; tiles of `block` x `block` scores.
 * A causal query i sees keys j in (i - window, i] (window 0: [0, i]). */
typedef struct bt_attention_config {
    int64_t t, c, heads, hd; /* c = heads * hd: the output's width, and where k starts */
    int64_t block;           /* tile edge: query and key rows per tile */
    int causal;
    double scale;            /* 1 / sqrt(hd) */
    int64_t kv_heads;        /* divides heads */
    int64_t ld;              /* the input's row: c + 2 kv_heads hd */
    int64_t window;          /* keys a causal query sees, its own included; 0: all before it */
} bt_attention_config;
BT_OPS_CONFIG_FITS(bt_attention_config);

/* Width of the keys (and of the values) in an input row: kv_heads * hd. The KV cache of one
 * sequence holds T rows of it for the keys, then T for the values. */
static inline int64_t bt_attention_kv_width(const bt_attention_config *cf)
{
    return cf->kv_heads * cf->hd;
}

/* The first key a causal query i sees: i - window + 1, or 0 (no window, or i < window). */
BT_OPS_HOST_DEVICE static inline int64_t bt_attention_first_key(const bt_attention_config *cf, int64_t i)
{
    return cf->window > 0 && i - cf->window + 1 > 0 ? i - cf->window + 1 : 0;
}

/* Workspace the attention kernels declare (fixed bytes, sized for doubles): scores and their
 * gradient tiles, the output accumulator of a query tile, and per-row statistics. */
static inline size_t bt_attention_workspace_bytes(const bt_attention_config *cf)
{
    const int64_t b = cf->block;
    return (size_t)(2 * b * b + b * cf->hd + 3 * b + cf->t) * sizeof(double);
}

/* pos_embedding: x [T, C] + weight[0:T] */
typedef struct bt_pos_embedding_config {
    int64_t t, c, num;
} bt_pos_embedding_config;
BT_OPS_CONFIG_FITS(bt_pos_embedding_config);

/* rope: rotary position embedding in Hugging Face's rotate-half layout on the q | k | v rows that
 * attention reads ([T, (heads + 2 kv_heads) hd]): the first `rotated` = heads + kv_heads heads of
 * hd (q and k) are rotated, the rest (v) copied. In head dimensions (i, i + hd/2), i < hd/2, the
 * row of position p is turned by the angle p f_i: y_i = x_i cos - x_{i+hd/2} sin, y_{i+hd/2} =
 * x_{i+hd/2} cos + x_i sin. Position = the row's index in its sample's sequence (decoding: the
 * call's position). */
typedef struct bt_rope_config {
    int64_t t, width, rotated, hd; /* hd even */
    double theta;                  /* HF rope_theta */
    int llama3;                    /* rope_scaling of rope_type llama3: the four numbers below */
    double factor, low_freq_factor, high_freq_factor, original_max_position_embeddings;
} bt_rope_config;
BT_OPS_CONFIG_FITS(bt_rope_config);

/* f_i, the inverse frequency of head dimensions (i, i + hd/2): 1 / theta^(2i / hd), and under
 * llama3 scaling (Meta's Llama 3.1 formula) that divided by factor where its wavelength 2 pi / f_i
 * is longer than original_max_position_embeddings / low_freq_factor, kept where it is shorter than
 * original_max_position_embeddings / high_freq_factor, and in between (1 - s) f_i / factor + s f_i
 * with s = (original_max_position_embeddings / wavelength - low_freq_factor) / (high_freq_factor -
 * low_freq_factor). In double; the CPU and CUDA kernels both call this one definition. */
BT_OPS_HOST_DEVICE static inline double bt_rope_inv_freq(const bt_rope_config *cf, int64_t i)
{
    const double f = 1.0 / pow(cf->theta, (double)(2 * i) / (double)cf->hd);
    if (!cf->llama3) return f;
    const double two_pi = 6.28318530717958647692;
    const double wavelen = two_pi / f, old = cf->original_max_position_embeddings;
    if (wavelen < old / cf->high_freq_factor) return f;
    if (wavelen > old / cf->low_freq_factor) return f / cf->factor;
    const double s = (old / wavelen - cf->low_freq_factor) / (cf->high_freq_factor - cf->low_freq_factor);
    return (1 - s) * f / cf->factor + s * f;
}

/* swiglu: rows of [gate | up], each half wide: y = silu(gate) * up */
typedef struct bt_swiglu_config {
    int64_t half;
} bt_swiglu_config;
BT_OPS_CONFIG_FITS(bt_swiglu_config);

/* gelu: the exact erf form, or PyTorch's tanh approximation (HF's gelu_new, gelu_pytorch_tanh) */
#define BT_OPS_GELU_ERF 0
#define BT_OPS_GELU_TANH 1
typedef struct bt_gelu_config {
    int approx; /* BT_OPS_GELU_* */
} bt_gelu_config;
BT_OPS_CONFIG_FITS(bt_gelu_config);

/* matmul: per sample `lead` pairs of matrices a (m, k) b (k, n) -> (m, n); transpose: `lead`
 * matrices (r, c) -> (c, r) */
typedef struct bt_matmul_config {
    int64_t lead, m, k, n;
} bt_matmul_config;
BT_OPS_CONFIG_FITS(bt_matmul_config);

/* The forwards of matmul, transpose, split and concat count their matrices and rows from the
 * call's tensors, not from the config (batch * lead, batch * rows): the two agree in every call
 * but a decoding one (bt_generate), where a value [T, ...] arrives as the one position's row
 * [1, ...] and T was one of the leading dims. Whole matrices of `per` elements in t, or -1 where
 * t does not hold a whole number of them (a matmul whose matrices span the sequence: it cannot
 * decode one position alone). */
static inline int64_t bt_ops_whole(const bt_tensor *t, int64_t per)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dim[i];
    return per > 0 && n % per == 0 ? n / per : -1;
}

/* split and concat on the last dimension: rows of the inputs (everything but the last dim), the
 * output's last dim and each input's width and offset into it (concat), or the input's width and
 * the chunk's width and offset (split: n_in 1, width[0] the chunk). */
#define BT_CONCAT_MAX 8
typedef struct bt_concat_config {
    int64_t rows, d;               /* d: the wide side's last dim */
    int n;                         /* pieces */
    int64_t width[BT_CONCAT_MAX];  /* piece widths */
    int64_t offset[BT_CONCAT_MAX]; /* piece offsets in the wide side */
} bt_concat_config;
BT_OPS_CONFIG_FITS(bt_concat_config);

/* conv2d's CPU kernels work on chunks of samples. Columns (S Ho Wo) a chunk aims for, measured on
 * fashion-cnn's two convs (OpenBLAS, one thread, 2026-11-22): chunks of 256 to 2048 columns ran
 * equally fast; at 4096 conv1's backward (a 9-row column matrix) took 1.6x as long, and 16384 or
 * a whole micro-batch of 128 samples (where the matrices outgrow the caches) took 1.7x as long as
 * 2048. */
#define BT_CONV_CHUNK_COLUMNS 2048
/* Most bytes the chunk matrices may take (one sample gets a chunk of its own whatever it needs). */
#define BT_CONV_WORKSPACE_BUDGET ((int64_t)32 << 20)

/* Samples per chunk, the same for every micro-batch (the last chunk of a call may be smaller). */
static inline int64_t bt_conv_chunk_samples(const bt_conv_config *cf)
{
    const int64_t howo = cf->ho * cf->wo;
    const int64_t bytes_per_sample = (cf->c * cf->kh * cf->kw + cf->out) * howo * (int64_t)sizeof(double);
    int64_t n = (BT_CONV_CHUNK_COLUMNS + howo - 1) / howo;
    if (n > BT_CONV_WORKSPACE_BUDGET / bytes_per_sample) n = BT_CONV_WORKSPACE_BUDGET / bytes_per_sample;
    return n > 1 ? n : 1;
}

/* The workspace conv2d declares (fixed bytes, none per sample), sized for doubles: one chunk's
 * column matrix and its (out, S Ho Wo) output, but at least one sample's column matrix and its
 * gradient, which the CUDA GEMM path uses. None for a pointwise conv. */
static inline size_t bt_conv_workspace_bytes(const bt_conv_config *cf)
{
    if (cf->pointwise) return 0;
    const int64_t ckk = cf->c * cf->kh * cf->kw, howo = cf->ho * cf->wo;
    const int64_t chunk = bt_conv_chunk_samples(cf) * (ckk + cf->out) * howo; /* col + ycol */
    const int64_t one_sample = 2 * ckk * howo;                                   /* col + dcol */
    return (size_t)(chunk > one_sample ? chunk : one_sample) * sizeof(double);
}

#endif
