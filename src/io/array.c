/* io/array.c: the public array readers of baton/data.h over io/npy.c and io/idx.c: the file's
 * dtype converted to the one asked for, exactly or not at all (see data.h for the rules). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "baton/data.h"
#include "core/error.h"
#include "io/idx.h"
#include "io/npy.h"

void bt_array_free(bt_array *a)
{
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* Element i of src (type t) as a double, and whether it is an integer type. */
static double npy_element(const void *src, bt_npy_type t, int64_t i)
{
    switch (t) {
    case BT_NPY_F4: return ((const float *)src)[i];
    case BT_NPY_F8: return ((const double *)src)[i];
    case BT_NPY_I4: return ((const int32_t *)src)[i];
    case BT_NPY_I8: return (double)((const int64_t *)src)[i];
    default: return ((const uint8_t *)src)[i];
    }
}

/* Converts n elements of src (type t) into a->data as a->dtype, exactly. */
static bt_status convert(const char *path, const void *src, bt_npy_type t, int64_t n, bt_array *a)
{
    int is_float = t == BT_NPY_F4 || t == BT_NPY_F8;
    if (is_float && a->dtype == BT_I32)
        return bt_error(BT_ERR_INVALID_ARG, "%s: holds floats (%s), which are not read as integers", path,
                        bt_npy_type_descr(t));
    a->data = malloc((size_t)n * bt_dtype_size(a->dtype) + 1);
    if (!a->data) return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++) {
        if (t == BT_NPY_I8) { /* beyond double's 2^53: compare as integers */
            int64_t v = ((const int64_t *)src)[i];
            int ok = a->dtype == BT_I32 ? v >= INT32_MIN && v <= INT32_MAX
                     : a->dtype == BT_F32 ? v >= -(1LL << 24) && v <= (1LL << 24)
                                          : v >= -(1LL << 53) && v <= (1LL << 53);
            if (!ok)
                return bt_error(BT_ERR_INVALID_ARG, "%s: element %lld is %lld, which %s does not hold exactly", path,
                                (long long)i, (long long)v, bt_dtype_name(a->dtype));
        }
        double v = npy_element(src, t, i);
        switch (a->dtype) {
        case BT_F64: ((double *)a->data)[i] = v; break;
        case BT_I32: ((int32_t *)a->data)[i] = (int32_t)v; break;
        default: {
            float f = (float)v;
            if ((double)f != v && !(isnan(v) && isnan(f)))
                return bt_error(BT_ERR_INVALID_ARG, "%s: element %lld is %.17g, which F32 does not hold exactly",
                                path, (long long)i, v);
            ((float *)a->data)[i] = f;
        }
        }
    }
    return BT_OK;
}

/* 1 when path starts with the .npy magic. */
static int is_npy(const char *path)
{
    unsigned char magic[6] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return got == sizeof magic && memcmp(magic, "\x93NUMPY", 6) == 0;
}

bt_status bt_array_read(const char *path, bt_dtype dtype, bt_array *out)
{
    memset(out, 0, sizeof *out);
    if (dtype != BT_F32 && dtype != BT_F64 && dtype != BT_I32)
        return bt_error(BT_ERR_INVALID_ARG, "%s: arrays are read as F32, F64 or I32, not %s", path, bt_dtype_name(dtype));
    struct stat sb;
    if (stat(path, &sb) != 0) return bt_error(BT_ERR_INVALID_ARG, "%s: %s", path, strerror(errno));
    bt_status st;
    out->dtype = dtype;
    if (is_npy(path)) {
        bt_npy a;
        BT_TRY(bt_npy_read(path, &a));
        out->ndim = a.ndim;
        memcpy(out->dim, a.dim, sizeof a.dim);
        out->numel = a.numel;
        st = convert(path, a.data, a.type, a.numel, out);
        bt_npy_free(&a);
    } else {
        bt_idx x;
        BT_TRY(bt_idx_read(path, &x));
        out->ndim = x.ndim;
        for (int i = 0; i < x.ndim; i++) out->dim[i] = x.dim[i];
        out->numel = x.numel;
        st = convert(path, x.data, BT_NPY_U1, x.numel, out);
        bt_idx_free(&x);
    }
    if (st != BT_OK) bt_array_free(out);
    return st;
}

bt_status bt_array_write_npy(const char *path, const bt_array *a)
{
    if (!a || a->ndim < 0 || a->ndim > BT_ARRAY_MAX_DIMS || !a->data)
        return bt_error(BT_ERR_INVALID_ARG, "%s: not an array to write", path);
    return bt_npy_write(path, a->dtype, a->ndim, a->dim, a->data);
}
