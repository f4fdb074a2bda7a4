/* tests/op_check.h: running one op outside a graph, for the op tests. An oc_layer runs the op's
 * shape rule (graph/infer.h) on per-sample shapes, allocates every buffer a kernel call needs for
 * a micro-batch (inputs, output, parameters, gradients, saved, workspace), and calls the CPU
 * kernels through a bt_op_call built by hand. Float tensors use the layer's `real` dtype (f32 or
 * f64) whatever the shape rule inferred, as the engine's compute dtype does. oc_gradcheck compares
 * the backward against central finite differences of the forward. */
#ifndef BT_TESTS_OP_CHECK_H
#define BT_TESTS_OP_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "baton/args.h"
#include "baton/op.h"
#include "graph/infer.h"

typedef struct oc_layer {
    const bt_op_def *op;
    bt_args *args;             /* owned */
    bt_infer_ctx ctx;          /* the shape rule's results */
    int64_t batch;
    bt_dtype real;             /* dtype of every float tensor */
    int n_in;
    bt_tensor in[BT_MAX_INPUTS], in_grad[BT_MAX_INPUTS]; /* in_grad .data NULL: not wanted */
    bt_tensor out, out_grad;
    int n_params;
    bt_tensor param[BT_MAX_PARAMS], param_grad[BT_MAX_PARAMS];
    void *saved, *workspace;
    uint64_t seed;
    int training;
    bt_dtype precision;        /* the call's precision (0: BT_F32) */
    int threads;               /* the call's threads (0: 1) */
    uint64_t rng;              /* state of the fills */
} oc_layer;

/* Builds L for op `op_name` with args parsed from spec ("out=3 kernel=3,2 bias=false p=0.5
 * dtype=f64": true/false are booleans, a comma makes a list, a '.' or 'e' a float, other
 * numbers integers, anything else a string) on n_in inputs of per-sample shapes/dtypes (BT_F64
 * in dtypes means "the float type", which becomes real). Fills float inputs and parameters with
 * U(-1, 1), i32 inputs with 0, out_grad with U(-1, 1), gradients with 0. On a shape-rule
 * failure returns its status (bt_last_error() has the message) and leaves nothing allocated. */
bt_status oc_setup(oc_layer *L, const char *op_name, const char *spec, int n_in,
                   const bt_shape *shapes, const bt_dtype *dtypes, int64_t batch, bt_dtype real);
void oc_free(oc_layer *L);

/* Parses an argument spec as oc_setup does; NULL on a malformed spec. Caller destroys. */
bt_args *oc_args(const char *spec);

bt_status oc_forward(oc_layer *L);
bt_status oc_backward(oc_layer *L);

/* Element i of t as a double, and the reverse (any dtype). */
double oc_get(const bt_tensor *t, int64_t i);
void oc_set(bt_tensor *t, int64_t i, double v);
/* U(lo, hi) into every element of t; i32 tensors get integers in [lo, hi). */
void oc_fill(oc_layer *L, bt_tensor *t, double lo, double hi);
/* Zeroes t's elements. */
void oc_zero(bt_tensor *t);

/* Finite-difference check of every float input that takes a gradient and every parameter, with
 * step h, accepting |analytic - numeric| <= tol * max(1, |numeric|). The backward is run on
 * gradients pre-filled with random values, so a kernel that overwrites instead of adding fails.
 * Returns the number of mismatching elements (-1 if a kernel failed) and describes the worst
 * element in msg. */
int oc_gradcheck(oc_layer *L, double h, double tol, char *msg, size_t size);

/* Copies values of every input and parameter of src into dst (same shapes, any dtypes). */
void oc_copy_values(oc_layer *dst, const oc_layer *src);

#endif
