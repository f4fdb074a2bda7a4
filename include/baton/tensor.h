/* baton/tensor.h: element types, shapes and the plain tensor view passed to op kernels.
 * A shape in a graph is per sample (the batch dimension is implicit); a bt_tensor handed to a
 * kernel carries the batch as dim[0]. Tensors are dense and row-major; a view never owns data. */
#ifndef BATON_TENSOR_H
#define BATON_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "baton/api.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BT_MAX_DIMS 6

typedef enum bt_dtype {
    BT_F32 = 0,
    BT_F64 = 1,
    BT_I32 = 2,
    BT_BF16 = 3,
    BT_F16 = 4
} bt_dtype;

typedef struct bt_shape {
    int ndim;                  /* 0 for a scalar per sample */
    int64_t dim[BT_MAX_DIMS];
} bt_shape;

typedef struct bt_tensor {
    void *data;                /* NULL where a kernel need not produce this tensor */
    bt_dtype dtype;
    int ndim;
    int64_t dim[BT_MAX_DIMS];  /* dim[0] is the batch for activations; params have no batch */
} bt_tensor;

/* Bytes of one element of dtype. */
BT_API size_t bt_dtype_size(bt_dtype dtype);
/* "f32", "f64", "i32", "bf16", "f16". */
BT_API const char *bt_dtype_name(bt_dtype dtype);
/* Product of the dims (1 for a scalar shape). */
BT_API int64_t bt_shape_numel(const bt_shape *shape);
/* Product of a tensor's dims. */
BT_API int64_t bt_tensor_numel(const bt_tensor *t);
/* Writes "[784]" or "[32, 28, 28]" into buf (always NUL-terminated); returns buf. */
BT_API char *bt_shape_format(const bt_shape *shape, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
