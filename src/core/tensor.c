/* core/tensor.c: dtype sizes and names, shape arithmetic and formatting. */
#include <stdio.h>

#include "baton/tensor.h"

size_t bt_dtype_size(bt_dtype dtype)
{
    switch (dtype) {
    case BT_F32: return 4;
    case BT_F64: return 8;
    case BT_I32: return 4;
    case BT_BF16: return 2;
    case BT_F16: return 2;
    }
    return 0;
}

const char *bt_dtype_name(bt_dtype dtype)
{
    switch (dtype) {
    case BT_F32: return "f32";
    case BT_F64: return "f64";
    case BT_I32: return "i32";
    case BT_BF16: return "bf16";
    case BT_F16: return "f16";
    }
    return "?";
}

int64_t bt_shape_numel(const bt_shape *shape)
{
    int64_t n = 1;
    for (int i = 0; i < shape->ndim; i++) n *= shape->dim[i];
    return n;
}

int64_t bt_tensor_numel(const bt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dim[i];
    return n;
}

char *bt_shape_format(const bt_shape *shape, char *buf, size_t size)
{
    size_t used = 0;
    if (size == 0) return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < shape->ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld",
                                 (long long)shape->dim[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}
