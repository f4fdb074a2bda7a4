/* baton/data.h: reading and writing arrays of samples from C: NumPy .npy files and IDX files (the
 * MNIST format, gzipped or plain), the formats `data:` sections name. A program that drives an
 * engine itself reads its inputs and labels with these and hands batches to bt_engine_train_step
 * or bt_engine_forward as bt_feed; the trainer (baton/train.h) does the same from a model's data:
 * section. Values are converted to the dtype asked for only where that is exact: integers to
 * I32 when they fit, integers to floats when the float holds them (|v| <= 2^24 for F32), F64 to
 * F32 when the value survives the round trip, anything to F64 from F32 or I32; floats never
 * become integers. A value that does not convert is refused, naming the file and its index. */
#ifndef BATON_DATA_H
#define BATON_DATA_H

#include <stdint.h>

#include "baton/api.h"
#include "baton/status.h"
#include "baton/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BT_ARRAY_MAX_DIMS 8

/* A dense row-major array; dim[0] is the sample count of a data file. */
typedef struct bt_array {
    bt_dtype dtype;          /* BT_F32, BT_F64 or BT_I32 */
    int ndim;                /* 0 for a scalar */
    int64_t dim[BT_ARRAY_MAX_DIMS];
    int64_t numel;
    void *data;              /* owned by the array (free with bt_array_free) */
} bt_array;

/* Reads path (.npy: '<f4', '<f8', '<i4', '<i8', '|u1', C order; IDX: unsigned bytes, the format
 * told by the file's first bytes, not its name) into *out as dtype (BT_F32, BT_F64 or BT_I32).
 * IDX bytes are read as their values 0..255 (the trainer scales images by 1/255; this does not).
 * A missing file is BT_ERR_INVALID_ARG; a malformed one BT_ERR_IO naming it. The caller owns *out
 * (bt_array_free); on failure it is zeroed. */
BT_API bt_status bt_array_read(const char *path, bt_dtype dtype, bt_array *out);
/* Writes a as a version 1.0 .npy file, atomically (a temporary file renamed over path). */
BT_API bt_status bt_array_write_npy(const char *path, const bt_array *a);
/* Frees the data and zeroes *a; accepts NULL. */
BT_API void bt_array_free(bt_array *a);

#ifdef __cplusplus
}
#endif
#endif
