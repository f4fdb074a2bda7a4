/* tests/op_cases.h: the one table of op test cases (shapes, arguments, batch, index ranges) that
 * the CPU op tests (tests/test_ops.c: finite differences, naive references) and the CUDA tests
 * (tests/test_cuda.c: the GPU against the CPU) both run. Every built-in op needs at least one row
 * (test_ops fails otherwise); rows marked `big` reach the GPU's multi-block paths and are too
 * large for finite differences, so only the CUDA test runs them. */
#ifndef BT_TESTS_OP_CASES_H
#define BT_TESTS_OP_CASES_H

#include <stdint.h>

#include "baton/tensor.h"

#define F BT_F64 /* "the float type" in case tables; f32 runs map it to BT_F32 */
#define I BT_I32
#define SH(...)                                                             \
    {.ndim = (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), \
     .dim = {__VA_ARGS__}}
#define SCALAR {.ndim = 0}

/* One op configuration run by the generic tests. */
typedef struct op_case {
    const char *label;
    const char *op;
    const char *args;
    int n_in;
    bt_shape shape[2];
    bt_dtype dtype[2];
    int64_t batch;
    int index_range; /* i32 inputs are drawn from [0, index_range): the range the op declares */
    int big;         /* GPU sizes: the CUDA test only */
} op_case;

extern const op_case op_cases[];
extern const int op_cases_count;

/* The case labelled label; NULL (and a line printed) if there is none. */
const op_case *op_case_named(const char *label);

#endif
