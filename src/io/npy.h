/* io/npy.h: NumPy .npy files, for data sets and arrays exchanged with Python.
 *
 * A .npy file is "\x93NUMPY", a major and minor version byte, the header length (u16 LE for
 * version 1.0, u32 LE for 2.0 and 3.0), then a Python dict literal such as
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * padded with spaces and ending in '\n', then the data. The reader takes versions 1.0, 2.0 and 3.0
 * (3.0 only allows a UTF-8 header, which changes nothing for these dtypes), the little-endian
 * dtypes '<f4', '<f8', '<i4', '<i8' and '|u1', C order only (fortran_order True is rejected with
 * a message), and a file whose size is exactly header plus data. The writer writes '<f4', '<f8'
 * and '<i4' arrays in C order as version 1.0 (its header never outgrows 1.0's u16 length), padded
 * so the data starts at a multiple of 64 bytes like numpy does, atomically (io/atomic_file.h).
 *
 * Data flow: `data: {type: npy, images: ..., labels: ...}` loads through bt_npy_load_pair into
 * the same bt_dataset as IDX files; tools dump activations or weights with bt_npy_write. */
#ifndef BT_IO_NPY_H
#define BT_IO_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "baton/tensor.h"
#include "io/idx.h"

#define BT_NPY_MAX_DIMS 8

typedef enum bt_npy_type {
    BT_NPY_F4 = 0, /* '<f4' */
    BT_NPY_F8 = 1, /* '<f8' */
    BT_NPY_I4 = 2, /* '<i4' */
    BT_NPY_I8 = 3, /* '<i8' */
    BT_NPY_U1 = 4  /* '|u1' */
} bt_npy_type;

typedef struct bt_npy {
    bt_npy_type type;
    int ndim;                     /* 0 for a scalar */
    int64_t dim[BT_NPY_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    void *data;                   /* owned (malloc), C order; NULL from a header read */
    size_t data_offset;           /* where the data starts in the file */
} bt_npy;

/* Bytes per element and the descr string ("<f4", ...). */
size_t bt_npy_type_size(bt_npy_type type);
const char *bt_npy_type_descr(bt_npy_type type);

/* Reads path. On success the caller owns out->data (free with bt_npy_free); on failure *out is
 * zeroed and the message names the file: BT_ERR_INVALID_ARG for a file that is not a .npy this
 * reader takes (bad input, as a data file a model names is an argument: magic, version, header,
 * a dtype other than the five, big-endian, fortran_order True, a size that is not the shape's),
 * BT_ERR_IO only where opening or reading it fails. */
bt_status bt_npy_read(const char *path, bt_npy *out);
/* The header only: type, shape, numel, nbytes and data_offset, checked against the file's size
 * as bt_npy_read does; out->data is NULL (read rows with pread at data_offset). */
bt_status bt_npy_read_header(const char *path, bt_npy *out);
/* Frees the data and zeroes *a; accepts NULL and zeroed structs. */
void bt_npy_free(bt_npy *a);

/* Writes ndim dims (0 <= ndim <= BT_NPY_MAX_DIMS) of dtype BT_F32, BT_F64 or BT_I32 from data
 * (C order) to path, atomically. */
bt_status bt_npy_write(const char *path, bt_dtype dtype, int ndim, const int64_t *dims,
                       const void *data);

/* Loads inputs (n, ...) of '<f4', '<f8' or '|u1' (u1 is scaled by 1/255 like IDX images; floats
 * are taken as they are, and must be finite in float32: NaN, infinities and '<f8' values past
 * float32's range are refused with BT_ERR_INVALID_ARG naming the file, the sample and the element)
 * and labels (n) of any integer dtype, each in [0, n_classes), into a bt_dataset (see io/idx.h).
 * Errors name the file, and for a bad label its index and value; files that do not make such a
 * pair are BT_ERR_INVALID_ARG, as bt_npy_read's bad files. */
bt_status bt_npy_load_pair(const char *inputs_path, const char *labels_path, int n_classes,
                           bt_dataset *out);
/* inputs = 0: the labels only (out->inputs NULL; the inputs file's header is checked, its data is
 * not read), for a rank whose stage never reads the inputs. */
bt_status bt_npy_load_pair_part(const char *inputs_path, const char *labels_path, int n_classes, int inputs,
                                bt_dataset *out);

#endif
