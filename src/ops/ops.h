/* ops/ops.h: the built-in ops and what their implementations share. Each op family lives in one
 * .c file that defines its bt_op_def(s): argument specification, shape rule, CPU forward and
 * backward; ops/builtin_ops.def lists them. The registry (graph/op_registry.c) copies the table
 * bt_builtin_ops returns; besides it, only the CUDA attach table (cuda/ops_cuda.c, expanded from
 * the same list) refers to a built-in op by symbol.
 *
 * Kernels are written once per family in a template (<family>_tmpl.h) that builds against REAL,
 * R(name) and the other names ops/real.h defines, and the .c file includes it twice, for f32 and
 * f64. A kernel picks its instance from the runtime dtype of the tensors it is handed (the
 * engine's compute dtype), so buffers the shape rule sizes for floats (saved statistics,
 * workspace) are sized for BT_OPS_REAL_MAX bytes per element, enough for either type. */
#ifndef BT_OPS_OPS_H
#define BT_OPS_OPS_H

#include <stddef.h>

#include "baton/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The built-in op definitions, in listing order; *n receives their count. Static storage. */
const bt_op_def *const *bt_builtin_ops(int *n);

/* bt_op_linear, bt_op_add, ...: one per row of ops/builtin_ops.def. */
#define BT_BUILTIN_OP(op) extern const bt_op_def bt_op_##op;
#include "ops/builtin_ops.def"

/* Bytes per float element that float-sized saved/workspace buffers reserve (see above). */
#define BT_OPS_REAL_MAX sizeof(double)

/* Largest value an integer size argument may take (arg spec ranges). */
#define BT_OPS_DIM_MAX 1e9

/* "[3, 4]" in a temporary buffer that lives until the end of the enclosing full expression's
 * block: for messages only. */
#define BT_OPS_SHAPE(shape) bt_shape_format((shape), (char[128]){0}, 128)

/* ---- shape-rule helpers (ops_util.c); they fail through bt_infer_error naming the op ---- */

/* Input i must be f32 or f64. */
bt_status bt_ops_need_float(bt_infer_ctx *ctx, const char *op, int i);
/* bt_op_def.lowp_exact of ops whose kernels (CPU and CUDA) only select, copy or mask elements,
 * forward and backward (relu, flatten, reshape): always exact. */
int bt_ops_lowp_selects(const void *config, bt_dtype precision, int pass, const char *backend);
/* Every input must be f32 or f64, all of the same dtype; *dtype receives it. */
bt_status bt_ops_same_float(bt_infer_ctx *ctx, const char *op, bt_dtype *dtype);
/* The args heads, kv_heads (default heads, dividing it) and head_dim (default w / (heads + 2
 * kv_heads)) of attention and rope, whose input rows of width w are q | k | v: heads, kv_heads
 * and kv_heads heads of head_dim each. Fails naming the op where w is not that. */
bt_status bt_ops_qkv_heads(bt_infer_ctx *ctx, const char *op, int64_t w, int64_t *heads,
                           int64_t *kv_heads, int64_t *hd);
/* The `act` argument of linear and conv2d: "relu" (BT_OPS_ACT_RELU, fused into the output) or
 * absent (BT_OPS_ACT_NONE); anything else is an error naming it. */
bt_status bt_ops_fused_act(bt_infer_ctx *ctx, const char *op, int *act);
/* Inputs a and b must have identical shapes. */
bt_status bt_ops_same_shape(bt_infer_ctx *ctx, const char *op, int a, int b);
/* Input i must have exactly ndim dimensions; what names them in the message ("[C, H, W]"). */
bt_status bt_ops_need_ndim(bt_infer_ctx *ctx, const char *op, int i, int ndim, const char *what);
/* A 2-D size argument given as one integer or [h, w]; absent: dflt. */
bt_status bt_ops_pair_arg(bt_infer_ctx *ctx, const char *op, const char *name,
                          const int64_t dflt[2], int64_t out[2]);
/* Output size of a 2-D sliding window over the last two dims (H, W) of input:
 * out = (in + 2 pad - kernel) / stride + 1 per axis. Fails if the kernel is larger than the padded
 * input or an output size would be < 1. */
bt_status bt_ops_window_out(bt_infer_ctx *ctx, const char *op, const bt_shape *input,
                            const int64_t kernel[2], const int64_t stride[2],
                            const int64_t pad[2], int64_t out[2]);

/* ---- kernel helpers ------------------------------------------------------------------------- */

/* The error a kernel returns for a dtype it has no instance for. */
bt_status bt_ops_bad_dtype(const char *op, bt_dtype dtype);
/* The errors for an integer input outside its range (BT_ERR_INVALID_ARG), at position `at` of the
 * micro-batch's tensor; the CPU kernels and the CUDA backend's fault reports share them. */
bt_status bt_ops_embedding_bad_index(int64_t at, int32_t index, int64_t num);
bt_status bt_ops_cross_entropy_bad_label(int64_t at, int32_t label, int64_t classes);
/* The error of matmul and transpose (CPU and CUDA) when a call's tensors do not hold whole
 * matrices (op_configs.h, bt_ops_whole): decoding one position where the sequence is a matrix
 * dimension (BT_ERR_UNSUPPORTED). */
bt_status bt_ops_matmul_rows_error(const char *op);

/* Defines `static bt_status fn(const bt_op_call *call)` that runs fn##_f32 or fn##_f64 by the
 * dtype `dtype_expr` evaluates to (an expression over `call`). */
#define BT_OPS_DISPATCH(op_name, fn, dtype_expr)                    \
    static bt_status fn(const bt_op_call *call)                     \
    {                                                               \
        switch (dtype_expr) {                                       \
        case BT_F32: return fn##_f32(call);                         \
        case BT_F64: return fn##_f64(call);                         \
        default: return bt_ops_bad_dtype(op_name, (dtype_expr));    \
        }                                                           \
    }

/* For a window axis (input length in, kernel offset k, stride, padding pad, out positions):
 * the output positions [*lo, *hi) whose input index o * stride - pad + k lies in [0, in). */
static inline void bt_ops_valid_range(int64_t in, int64_t k, int64_t stride, int64_t pad,
                                      int64_t out, int64_t *lo, int64_t *hi)
{
    const int64_t first = pad - k, last = in - 1 + pad - k; /* o * stride in [first, last] */
    *lo = first > 0 ? (first + stride - 1) / stride : 0;
    *hi = last < 0 ? 0 : last / stride + 1;
    if (*hi > out) *hi = out;
    if (*lo > *hi) *lo = *hi;
}

/* Runs the statements `body` (which use the int64_t index i) for i in [0, n): a main loop whose
 * trip count is n rounded down to a multiple of 16, then the tail. GCC 12 at -O2 (configure
 * defaults to -O3, but a user's CFLAGS may choose -O2) vectorises only loops whose trip count it
 * can prove a multiple of the vector length ("very cheap" cost model); a plain loop over n stays
 * scalar, 4-20x slower on memory-bound elementwise kernels. Keep bodies branch-free (load every
 * operand unconditionally, select with ?: or, where the baseline target cannot blend, with bit
 * masks: see vec_relu_mask in ops/vec_tmpl.h) and the arrays restrict parameters of the enclosing
 * function (see ops/vec_tmpl.h). Other compilers and -O3 vectorise either loop anyway. */
#define BT_OPS_VLOOP(i, n, body)                                     \
    do {                                                             \
        const int64_t bt_vloop_n_ = (n);                             \
        const int64_t bt_vloop_main_ = bt_vloop_n_ & ~(int64_t)15;   \
        int64_t i = 0;                                               \
        for (; i < bt_vloop_main_; i++) { body }                     \
        for (; i < bt_vloop_n_; i++) { body }                        \
    } while (0)

/* True where the caller wants a gradient in t (a tensor array entry may be absent). */
#define BT_OPS_WANTS(t) ((t) != NULL && (t)->data != NULL)

#ifdef __cplusplus
}
#endif

#endif
