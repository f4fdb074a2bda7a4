/* cuda/op_configs.h: the built-in ops' private kernel configurations (what each shape rule in
 * src/ops/<family>.c stores with bt_infer_set_config and the kernels read as call->config), as
 * the CUDA kernels read them, and the buffer sizes those shape rules declare that the CUDA
 * kernels rely on. The structs are private to the src/ops/ files; these copies must keep their
 * layout. tests/test_cuda_build.c runs every shape rule and checks that these structs decode its
 * config (size and field values) and that the declared sizes agree, so a change on either side
 * fails a test that needs no GPU. Plain C, no CUDA types. */
#ifndef BT_CUDA_OP_CONFIGS_H
#define BT_CUDA_OP_CONFIGS_H

#include <stddef.h>
#include <stdint.h>

/* src/ops/linear.c: linear_config */
typedef struct bt_cuda_linear_config {
    int64_t in, out;
    int bias;
} bt_cuda_linear_config;

/* src/ops/softmax.c: softmax_config */
typedef struct bt_cuda_softmax_config {
    int64_t d;
} bt_cuda_softmax_config;

/* src/ops/layernorm.c: layernorm_config; saved holds (mean, rstd) as two doubles per row */
typedef struct bt_cuda_layernorm_config {
    int64_t d;
    double eps;
} bt_cuda_layernorm_config;

/* src/ops/conv.c: conv_config */
typedef struct bt_cuda_conv_config {
    int64_t c, h, w;
    int64_t out, ho, wo;
    int64_t kh, kw, sh, sw, ph, pw;
    int bias;
    int pointwise;
} bt_cuda_conv_config;

/* src/ops/pool.c: pool_config; maxpool saves one int32 argmax per output element */
typedef struct bt_cuda_pool_config {
    int64_t c, h, w, ho, wo;
    int64_t kh, kw, sh, sw, ph, pw;
} bt_cuda_pool_config;

/* src/ops/embedding.c: embedding_config */
typedef struct bt_cuda_embedding_config {
    int64_t num, dim;
} bt_cuda_embedding_config;

/* src/ops/dropout.c: dropout_config; saved holds one mask byte per element */
typedef struct bt_cuda_dropout_config {
    double p;
} bt_cuda_dropout_config;

/* src/ops/loss.c: cross_entropy_config */
typedef struct bt_cuda_cross_entropy_config {
    int64_t classes;
    int64_t positions;
} bt_cuda_cross_entropy_config;

/* The workspace conv2d's shape rule declares (fixed bytes, none per sample): a column matrix
 * and its gradient, (c kh kw, ho wo) each, sized for doubles; none for a pointwise conv. */
static inline size_t bt_cuda_conv_workspace(const bt_cuda_conv_config *cf)
{
    if (cf->pointwise) return 0;
    return 2 * (size_t)(cf->c * cf->kh * cf->kw * cf->ho * cf->wo) * sizeof(double);
}

#endif
