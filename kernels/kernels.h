/* kernels/kernels.h: the CUDA kernels' C interface. Every launcher queues its work on the stream
 * it is given and returns at once with the launch's cudaError_t (cudaSuccess, or the error of a
 * bad configuration; faults inside a kernel surface at the next synchronising call). Only the
 * CUDA backend (src/cuda/) includes this header; .cu files implement it, one per op family. Each
 * family's .cu also holds the glue from a bt_op_call to these launchers (bt_cuda_<op>_forward /
 * _backward, cuda/ops_cuda.h), compiled by nvcc as C-style code with C linkage.
 *
 * Conventions, the same as the CPU kernels' (baton/op.h, src/ops/):
 *   - pointers are device memory; n, rows, cols... count elements; dt is BT_F32 or BT_F64 (any
 *     other dtype returns cudaErrorInvalidValue without launching), and every float array of one
 *     call has that dtype;
 *   - "_acc" and the backward launchers ADD into their outputs (y += ...); the others overwrite;
 *   - reductions accumulate in double, like the CPU reference;
 *   - a launcher given nothing to do (n == 0) returns cudaSuccess without launching.
 * Run-time errors a kernel detects in data (an embedding index or a label out of range) are
 * recorded in a bt_k_fault in device memory that the backend reads back at its next sync. */
#ifndef BT_KERNELS_H
#define BT_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "baton/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- run-time faults ------------------------------------------------------------------------ */

typedef enum bt_k_fault_kind {
    BT_K_FAULT_NONE = 0,
    BT_K_FAULT_EMBEDDING_INDEX = 1, /* value: the index; limit: the vocabulary size */
    BT_K_FAULT_LABEL = 2            /* value: the label; limit: the number of classes */
} bt_k_fault_kind;

/* The first fault raised since the record was last cleared (zeroed); later ones are dropped. */
typedef struct bt_k_fault {
    int kind;          /* bt_k_fault_kind */
    int value;         /* the offending index or label */
    long long position; /* its position in the micro-batch's index/label tensor */
    long long limit;   /* the exclusive upper bound it broke */
} bt_k_fault;

/* ---- elementwise.cu ------------------------------------------------------------------------- */

/* y = a + b */
cudaError_t bt_k_add(cudaStream_t s, bt_dtype dt, const void *a, const void *b, void *y,
                     int64_t n);
/* y = a * b */
cudaError_t bt_k_mul(cudaStream_t s, bt_dtype dt, const void *a, const void *b, void *y,
                     int64_t n);
/* y += x */
cudaError_t bt_k_acc(cudaStream_t s, bt_dtype dt, const void *x, void *y, int64_t n);
/* y += x * w */
cudaError_t bt_k_acc_mul(cudaStream_t s, bt_dtype dt, const void *x, const void *w, void *y,
                         int64_t n);
/* y (rows, cols): every row = row (cols) */
cudaError_t bt_k_fill_rows(cudaStream_t s, bt_dtype dt, const void *row, void *y, int64_t rows,
                           int64_t cols);
/* y (cols) += column sums of x (rows, cols) */
cudaError_t bt_k_colsum_acc(cudaStream_t s, bt_dtype dt, const void *x, void *y, int64_t rows,
                            int64_t cols);

/* ---- activation.cu -------------------------------------------------------------------------- */

typedef enum bt_k_activation {
    BT_K_RELU = 0,
    BT_K_GELU = 1,    /* exact: x Phi(x) with erf */
    BT_K_TANH = 2,
    BT_K_SIGMOID = 3,
    BT_K_SILU = 4,    /* x sigmoid(x) */
    BT_K_GELU_TANH = 5 /* PyTorch's tanh approximation: x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) */
} bt_k_activation;

/* y = f(x) */
cudaError_t bt_k_activation_forward(cudaStream_t s, bt_dtype dt, bt_k_activation f,
                                    const void *x, void *y, int64_t n);
/* dx += dy * f'(x) */
cudaError_t bt_k_activation_backward(cudaStream_t s, bt_dtype dt, bt_k_activation f,
                                     const void *x, const void *dy, void *dx, int64_t n);
/* g = 0 + (y > 0 ? g : 0) in place: the backward of a relu fused into linear or conv2d, from its
 * output y (ops/op_configs.h) */
cudaError_t bt_k_relu_mask(cudaStream_t s, bt_dtype dt, const void *y, void *g, int64_t n);

/* ---- softmax.cu: over the last dimension, rows of d ----------------------------------------- */

cudaError_t bt_k_softmax_forward(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                 int64_t rows, int64_t d);
/* dx += p * (dy - <dy, p>), p = softmax(x) recomputed */
cudaError_t bt_k_softmax_backward(cudaStream_t s, bt_dtype dt, const void *x, const void *dy,
                                  void *dx, int64_t rows, int64_t d);

/* ---- layernorm.cu: over the last dimension, rows of d --------------------------------------- */

/* y = (x - mean) rstd w + b; stats (rows, 2) doubles (mean, rstd) are written unless NULL. */
cudaError_t bt_k_layernorm_forward(cudaStream_t s, bt_dtype dt, const void *x, const void *w,
                                   const void *b, void *y, double *stats, int64_t rows,
                                   int64_t d, double eps);
/* From the forward's stats: dx, dw, db += their gradients; any of the three may be NULL. */
cudaError_t bt_k_layernorm_backward(cudaStream_t s, bt_dtype dt, const void *x, const void *w,
                                    const void *dy, const double *stats, void *dx, void *dw,
                                    void *db, int64_t rows, int64_t d);

/* ---- embedding.cu: ids (n) int32, w (num, dim), y (n, dim) ---------------------------------- */

/* y = rows of w; an index outside [0, num) writes zeros and raises BT_K_FAULT_EMBEDDING_INDEX. */
cudaError_t bt_k_embedding_forward(cudaStream_t s, bt_dtype dt, const int32_t *ids,
                                   const void *w, void *y, int64_t n, int64_t num, int64_t dim,
                                   bt_k_fault *fault);
/* dw[ids[t]] += dy[t] (atomically: indices repeat); bad indices are skipped and raised. */
cudaError_t bt_k_embedding_backward(cudaStream_t s, bt_dtype dt, const int32_t *ids,
                                    const void *dy, void *dw, int64_t n, int64_t num,
                                    int64_t dim, bt_k_fault *fault);

/* ---- loss.cu: one value per sample --------------------------------------------------------- */

/* y (batch) = mean over per elements of (p - t)^2 */
cudaError_t bt_k_mse_forward(cudaStream_t s, bt_dtype dt, const void *p, const void *t, void *y,
                             int64_t batch, int64_t per);
/* dx (batch, per) += sign * 2 dy[n] / per * (p - t); sign +1 for the prediction, -1 the target */
cudaError_t bt_k_mse_backward(cudaStream_t s, bt_dtype dt, const void *p, const void *t,
                              const void *dy, void *dx, double sign, int64_t batch, int64_t per);
/* x (batch, positions, classes), label (batch, positions) int32; y (batch) = mean over the
 * positions of logsumexp(x) - x[label]. A label outside [0, classes) raises BT_K_FAULT_LABEL and
 * contributes nothing. */
cudaError_t bt_k_cross_entropy_forward(cudaStream_t s, bt_dtype dt, const void *x,
                                       const int32_t *label, void *y, int64_t batch,
                                       int64_t positions, int64_t classes, double *part,
                                       int64_t part_n, bt_k_fault *fault);
/* dx += dy[n] / positions * (softmax(x) - onehot(label)) */
cudaError_t bt_k_cross_entropy_backward(cudaStream_t s, bt_dtype dt, const void *x,
                                        const int32_t *label, const void *dy, void *dx,
                                        int64_t batch, int64_t positions, int64_t classes,
                                        bt_k_fault *fault);

/* ---- dropout.cu ----------------------------------------------------------------------------- */

/* The CPU kernel's mask (src/ops/dropout.c) for seed: mask[i] = 1 where the 32-bit draw of
 * element i is >= threshold (= p 2^32); y = x * scale * mask. */
cudaError_t bt_k_dropout_forward(cudaStream_t s, bt_dtype dt, const void *x, unsigned char *mask,
                                 void *y, int64_t n, uint64_t seed, uint32_t threshold,
                                 double scale);
/* dx += dy * scale * mask */
cudaError_t bt_k_dropout_backward(cudaStream_t s, bt_dtype dt, const void *dy,
                                  const unsigned char *mask, void *dx, int64_t n, double scale);

/* ---- optim.cu: the formulas of src/optim/optim.h -------------------------------------------- */

/* SGD; buf is the momentum buffer (unused and may be NULL when momentum == 0); first: t == 1. */
cudaError_t bt_k_sgd(cudaStream_t s, bt_dtype dt, void *w, const void *g, void *buf, int64_t n,
                     double lr, double weight_decay, double momentum, int nesterov, int first,
                     double grad_scale);
/* AdamW at 1-based step t with moments m, v. */
cudaError_t bt_k_adamw(cudaStream_t s, bt_dtype dt, void *w, const void *g, void *m, void *v,
                       int64_t n, double lr, double weight_decay, double beta1, double beta2,
                       double eps, int64_t t, double grad_scale);
/* *out (one double in device memory) += sum of x^2; the caller zeroes it before a reduction.
 * Deterministic (two ordered passes, no atomics): part is device scratch of BT_K_SUMSQ_PARTS
 * doubles for the per-block partial sums (reusable by the next call on the same stream). */
#define BT_K_SUMSQ_PARTS 1024
cudaError_t bt_k_sum_squares(cudaStream_t s, bt_dtype dt, const void *x, int64_t n, double *part,
                             double *out);

/* ---- pool.cu: planes = batch * channels, each (h, w) -> (ho, wo) ---------------------------- */

typedef struct bt_k_window {
    int64_t h, w, ho, wo;    /* input and output plane sizes */
    int64_t kh, kw, sh, sw, ph, pw;
} bt_k_window;

/* y = window maxima (padding counts as -inf, NaN wins); arg (int32, may be NULL) = the index
 * ih * w + iw of each maximum in its plane, the first one in row-major order on ties. */
cudaError_t bt_k_maxpool_forward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                 int64_t planes, const void *x, void *y, int32_t *arg);
/* dx[arg] += dy */
cudaError_t bt_k_maxpool_backward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                  int64_t planes, const void *dy, const int32_t *arg, void *dx);
/* y = window sums / (kh kw) (padding counts as zeros) */
cudaError_t bt_k_avgpool_forward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                 int64_t planes, const void *x, void *y);
/* dx += dy / (kh kw) over every window covering the element */
cudaError_t bt_k_avgpool_backward(cudaStream_t s, bt_dtype dt, const bt_k_window *win,
                                  int64_t planes, const void *dy, void *dx);

/* ---- conv.cu: helpers of the GEMM convolution (a chunk of S samples at a time) ------------- */

/* col (c kh kw, S ho wo) = unfolded x (S, c, h, w); zeros where the window falls in the padding. */
cudaError_t bt_k_im2col(cudaStream_t s, bt_dtype dt, const bt_k_window *win, int64_t c,
                        int64_t samples, const void *x, void *col);
/* dx (S, c, h, w) += col (c kh kw, S ho wo) folded back (padding positions dropped). */
cudaError_t bt_k_col2im_acc(cudaStream_t s, bt_dtype dt, const bt_k_window *win, int64_t c,
                            int64_t samples, const void *col, void *dx);
/* to_chunk 1: m (out, S plane) = y (S, out, plane) rearranged; to_chunk 0: y = m rearranged,
 * plus b[o] per output channel where b is not NULL. */
cudaError_t bt_k_chunk_planes(cudaStream_t s, bt_dtype dt, void *y, void *m, const void *b,
                              int64_t samples, int64_t out, int64_t plane, int to_chunk);
/* y (planes, plane) = b[p % channels] for plane p (the bias of a (batch, channels, ...) tensor) */
cudaError_t bt_k_fill_planes(cudaStream_t s, bt_dtype dt, const void *b, void *y, int64_t planes,
                             int64_t channels, int64_t plane);
/* db (channels) += sums of dy (batch, channels, plane) over batch and plane */
cudaError_t bt_k_channel_sum_acc(cudaStream_t s, bt_dtype dt, const void *dy, void *db,
                                 int64_t batch, int64_t channels, int64_t plane);

/* ---- precision.cu: mixed precision ---------------------------------------------------------- */

/* x (n f32 values) rounded in place to precision BT_BF16 or BT_F16 (round to nearest even, f16
 * overflow to infinity, as src/core/half.h; a NaN stays a NaN); the values stay f32. BT_F32 does
 * nothing; other dtypes return cudaErrorInvalidValue. */
cudaError_t bt_k_round(cudaStream_t s, bt_dtype precision, float *x, int64_t n);

/* ---- attention.cu, matmul.cu, concat.cu, and the newer rows of embedding.cu, layernorm.cu -- */

struct bt_attention_config;
/* attention over x (batch, T, ld) = q | k | v into y (batch, T, C), C = heads hd, ld = C + 2
 * kv_heads hd; lse (batch, heads, T) unless NULL */
cudaError_t bt_k_attention_forward(cudaStream_t s, bt_dtype dt, const void *x, void *y,
                                   double *lse, const struct bt_attention_config *cf,
                                   int64_t batch);
/* dx (batch, T, ld) += the gradient; dd: scratch of batch * heads * T doubles */
cudaError_t bt_k_attention_backward(cudaStream_t s, bt_dtype dt, const void *x, const void *y,
                                    const void *dy, const double *lse, double *dd, void *dx,
                                    const struct bt_attention_config *cf, int64_t batch);
/* one position pos of one sequence: x (ld) = q | k | v of the row; k and v are stored as row pos of
 * cache's keys and values ((T, kv_heads hd) each, keys first); y (C) = softmax over the keys the
 * window sees (0..pos without one), per query head */
cudaError_t bt_k_attention_decode(cudaStream_t s, bt_dtype dt, const void *x, void *cache, void *y,
                                  const struct bt_attention_config *cf, int64_t pos);
/* y (n) = x + w[e mod tc] */
cudaError_t bt_k_pos_embedding_forward(cudaStream_t s, bt_dtype dt, const void *x, const void *w,
                                       void *y, int64_t n, int64_t tc);
/* rmsnorm over rows of d; rstd (rows) doubles written unless NULL */
cudaError_t bt_k_rmsnorm_forward(cudaStream_t s, bt_dtype dt, const void *x, const void *w,
                                 void *y, double *rstd, int64_t rows, int64_t d, double eps);
cudaError_t bt_k_rmsnorm_backward(cudaStream_t s, bt_dtype dt, const void *x, const void *w,
                                  const void *dy, const double *rstd, void *dx, void *dw,
                                  int64_t rows, int64_t d);
/* y (mats, c, r) = (acc: +=) x (mats, r, c)^T */
cudaError_t bt_k_transpose(cudaStream_t s, bt_dtype dt, const void *x, void *y, int64_t mats,
                           int64_t r, int64_t c, int acc);
/* columns [at, at + w) of a (rows, d) array to or from a (rows, w) one (to_wide), = or += */
cudaError_t bt_k_piece(cudaStream_t s, bt_dtype dt, const void *src, void *dst, int64_t rows,
                       int64_t w, int64_t d, int64_t at, int to_wide, int acc);

#ifdef __cplusplus
}
#endif
#endif
