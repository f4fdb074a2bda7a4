/* baton/op.h: what an op is. Every op, built-in or registered from C, is one bt_op_def: a name,
 * the arguments it accepts, a shape rule, and forward/backward kernels per backend. After
 * bt_op_register a custom op ("myproj.swish") is usable from the C graph API and from YAML alike.
 *
 * Kernel conventions (all backends):
 *   - in[i], out, and the per-sample shapes of the graph gain the micro-batch as dim[0];
 *   - forward writes out (and may fill `saved` for its own backward);
 *   - backward ADDS into in_grad[i] and param_grad[j] (values feeding several layers, and gradients
 *     accumulated over micro-batches, rely on this); in_grad[i].data is NULL where input i needs
 *     no gradient (data inputs, labels); an op with a backward_weight (split backward, below)
 *     must also skip a param_grad[j] whose .data is NULL;
 *   - backward may overwrite out_grad (nothing reads it after the op's backward; W of a split
 *     backward gets B's out_grad as B left it): the built-in linear and conv2d with a fused relu
 *     mask it in place;
 *   - both return BT_OK or a status with a message set through bt_op_error. */
#ifndef BATON_OP_H
#define BATON_OP_H

#include <stddef.h>
#include <stdint.h>

#include "baton/api.h"
#include "baton/args.h"
#include "baton/status.h"
#include "baton/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BT_MAX_INPUTS 8
#define BT_MAX_PARAMS 4
/* Most bytes a shape rule may store with bt_infer_set_config. */
#define BT_OP_CONFIG_MAX 256

/* How a parameter is initialised (deterministically from the seed and the parameter's name). */
typedef enum bt_init {
    BT_INIT_ZEROS = 0,
    BT_INIT_ONES = 1,
    BT_INIT_UNIFORM_FAN_IN = 2, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's Linear/Conv default */
    BT_INIT_NORMAL = 3          /* N(0, arg^2); arg defaults to 1 */
} bt_init;

/* ---- shape rule ------------------------------------------------------------------------------ */

typedef struct bt_infer_ctx bt_infer_ctx;

BT_API int bt_infer_num_inputs(const bt_infer_ctx *ctx);
/* Per-sample shape and dtype of input i. */
BT_API const bt_shape *bt_infer_input_shape(const bt_infer_ctx *ctx, int i);
BT_API bt_dtype bt_infer_input_dtype(const bt_infer_ctx *ctx, int i);
/* Argument accessors: the value given, or dflt where the layer did not give it. */
BT_API int64_t bt_infer_arg_int(const bt_infer_ctx *ctx, const char *name, int64_t dflt);
BT_API double bt_infer_arg_float(const bt_infer_ctx *ctx, const char *name, double dflt);
BT_API int bt_infer_arg_bool(const bt_infer_ctx *ctx, const char *name, int dflt);
/* Copies up to max values into out and returns how many were given (0 if absent). */
BT_API int bt_infer_arg_ints(const bt_infer_ctx *ctx, const char *name, int max, int64_t *out);
BT_API const char *bt_infer_arg_string(const bt_infer_ctx *ctx, const char *name, const char *dflt);

/* Declares the per-sample output shape and dtype. Must be called once. */
BT_API bt_status bt_infer_set_output(bt_infer_ctx *ctx, const bt_shape *shape, bt_dtype dtype);
/* Declares a parameter "<layer>.<suffix>" with its full shape; fan_in is used by
 * BT_INIT_UNIFORM_FAN_IN, init_arg by BT_INIT_NORMAL (std). Parameters keep declaration order. */
BT_API bt_status bt_infer_add_param(bt_infer_ctx *ctx, const char *suffix, const bt_shape *shape,
                                    bt_init init, int64_t fan_in, double init_arg);
/* Bytes the forward keeps for the backward, per sample of the micro-batch (masks, statistics). */
BT_API void bt_infer_set_saved(bt_infer_ctx *ctx, size_t bytes_per_sample);
/* Scratch bytes one kernel call needs: per_sample * batch + fixed. Not kept between calls. */
BT_API void bt_infer_set_workspace(bt_infer_ctx *ctx, size_t bytes_per_sample, size_t bytes_fixed);
/* Private per-layer configuration the kernels read as call->config (copied, at most
 * BT_OP_CONFIG_MAX bytes). */
BT_API bt_status bt_infer_set_config(bt_infer_ctx *ctx, const void *config, size_t size);
/* Marks input i as one that never receives a gradient (an index, a label). */
BT_API void bt_infer_no_grad(bt_infer_ctx *ctx, int i);
/* Declares that integer input i holds values in [0, hi) (hi >= 1): a vocabulary, a class count.
 * Kept per node; tools that make up data (`baton run` without a data section) draw from it. */
BT_API bt_status bt_infer_int_range(bt_infer_ctx *ctx, int i, int64_t hi);
/* Fails the shape rule with a message; the layer's name and source position are prefixed. */
BT_API bt_status bt_infer_error(bt_infer_ctx *ctx, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- kernels --------------------------------------------------------------------------------- */

typedef struct bt_op_call {
    int64_t batch;               /* samples in this micro-batch: dim[0] of in/out */
    int n_in;
    const bt_tensor *in;         /* [n_in] */
    bt_tensor *out;
    int n_params;
    const bt_tensor *param;      /* [n_params] */
    bt_tensor *param_grad;       /* [n_params]; backward only */
    const bt_tensor *out_grad;   /* backward only */
    bt_tensor *in_grad;          /* [n_in]; backward only; .data NULL: no gradient wanted */
    void *saved;                 /* batch * saved bytes_per_sample, kept from forward to backward */
    void *workspace;             /* scratch of the declared size */
    const void *config;          /* what the shape rule stored with bt_infer_set_config */
    uint64_t seed;               /* differs per layer, micro-batch and step; reproducible */
    int training;                /* 0 in inference (dropout is the identity) */
    int threads;                 /* CPU: threads this call may use */
    void *stream;                /* CUDA: the cudaStream_t to launch on; NULL on the CPU */
    bt_dtype precision;          /* BT_F32, or BT_BF16/BT_F16 under mixed precision: tensors stay
                                    f32, GEMMs may compute in this type with f32 accumulation */
    void *backend_ctx;           /* the backend's execution context for this call, set by its
                                    run_op: NULL on the CPU; on CUDA the device's handles (cuBLAS,
                                    cuDNN, fault record), which only the built-in kernels read.
                                    Custom kernels need nothing but stream. */
    /* Decoding (cpu_decode, bt_generate): one position of one sequence at a time. Values shaped
     * [T, ...] per sample arrive as [1, ...]; position is the index of that row in the sequence,
     * cache the op's state for the sequence (decode_cache_bytes, zeroed when it starts). Zero and
     * NULL in every other call. */
    int64_t position;
    void *cache;
} bt_op_call;

typedef bt_status (*bt_op_fn)(const bt_op_call *call);

/* The passes bt_op_def.lowp_exact answers for. */
#define BT_LOWP_FORWARD 0  /* the output the forward writes */
#define BT_LOWP_BACKWARD 1 /* the input gradients the backward writes */

typedef struct bt_op_def {
    const char *name;            /* "linear", or dotted for custom ops: "myproj.swish" */
    int min_inputs, max_inputs;
    const bt_arg_spec *args;     /* accepted arguments, n_args entries */
    int n_args;
    bt_status (*infer)(bt_infer_ctx *ctx);
    bt_op_fn cpu_forward, cpu_backward;   /* required */
    bt_op_fn cuda_forward, cuda_backward; /* optional; NULL: the op cannot run on a GPU */
    const char *help;
    /* Optional: the weight-gradient half of a split backward (zero-bubble schedules such as zb-h1).
     * An op that gives one promises that its backward skips every parameter gradient whose .data
     * is NULL: the schedule's B then calls backward with no parameter gradients (input gradients
     * only, on the critical path) and its W calls backward_weight later with no input gradients
     * (every in_grad[i].data NULL), adding only into param_grad. in, out_grad, saved and config are
     * the forward's, as for backward; out is not given (its space may hold out_grad). Ops without one keep a fused backward: B computes both and W
     * does nothing for them. A CUDA W is needed to run W on a GPU (NULL there: an error naming the
     * op). */
    bt_op_fn cpu_backward_weight, cuda_backward_weight;
    /* Optional, for autoregressive decoding (bt_generate): the op on one position with a cache
     * it keeps per sequence (attention keeps keys and values: a KV cache), and that cache's size
     * for a layer of the given config. An op without cpu_decode decodes with cpu_forward on the
     * one position, which is right for any op that treats positions independently. */
    bt_op_fn cpu_decode;
    size_t (*decode_cache_bytes)(const void *config);
    /* Optional: cpu_decode on a GPU (the cache in device memory; call->stream set). An op with
     * cpu_decode and no cuda_decode cannot decode on a GPU stage: bt_generate refuses the stage,
     * naming the layer. Ops without cpu_decode decode on a GPU with cuda_forward. The CUDA
     * backend attaches the built-ins' own. */
    bt_op_fn cuda_decode;
    /* Optional, for mixed precision (precision bf16 or f16, which the executor imposes by rounding
     * every activation an op writes and every complete value gradient to it): returns nonzero when
     * what this op's kernels on `backend` ("cpu", "cuda") write in `pass` is already a value of
     * `precision` (rounding it would change no bit), for a layer of the given config, provided that
     *   - BT_LOWP_FORWARD: every float input (and parameter: the executor passes the rounded
     *     compute copies) is a value of `precision`; then the output is one too. True of ops that
     *     select or copy their inputs' elements (relu, maxpool2d, flatten, reshape), or that round
     *     their output themselves (conv2d on the CPU). Not of ops that compute (scale, add,
     *     multiply) and leave it to the executor: dropout scales.
     *   - BT_LOWP_BACKWARD: out_grad is a value of `precision` and every in_grad[i] it writes holds
     *     zeros before the call (the executor only asks when this op is the value's only
     *     consumer); then each in_grad[i] it writes is a value of `precision`. True where each
     *     input-gradient element receives at most one out_grad element, unscaled, or zero (relu's
     *     mask, flatten's copy, maxpool2d whose windows do not overlap); not where two output
     *     elements add into one input element (maxpool2d with stride < kernel).
     * The executor then skips its rounding pass there (src/exec/worker_nodes.c); a wrong answer
     * silently changes results, so answer 0 when unsure. NULL: never exact (always rounded). Must
     * be a pure function of its arguments; precision is BT_BF16 or BT_F16. */
    int (*lowp_exact)(const void *config, bt_dtype precision, int pass, const char *backend);
} bt_op_def;

/* Registers a custom op for the whole process. The name must be new and contain a '.'; the
 * definition is copied (strings included). Thread-safe; typically called once at start-up. */
BT_API bt_status bt_op_register(const bt_op_def *def);
/* Finds an op by name; NULL if unknown. The definition is owned by baton. */
BT_API const bt_op_def *bt_op_find(const char *name);
/* Number of known ops and the i-th of them (built-ins first), for listings. */
BT_API int bt_op_count(void);
BT_API const bt_op_def *bt_op_at(int i);

/* Sets this thread's error message from a kernel and returns status. */
BT_API bt_status bt_op_error(bt_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
