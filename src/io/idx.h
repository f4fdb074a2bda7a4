/* io/idx.h: IDX files (the MNIST / Fashion-MNIST format) and the labelled dataset they load into.
 *
 * An IDX file is a big-endian u32 magic 0x0000TTNN (TT the element type, NN the number of dims),
 * NN big-endian u32 dims, then the elements row-major. baton reads unsigned-byte files (TT = 0x08)
 * with 1 to BT_IDX_MAX_DIMS dims: 0x00000803 images (n, rows, cols) and 0x00000801 labels (n).
 * Files may be gzipped or plain (zlib's gzread reads both). The reader is strict: the data must be
 * exactly the size the dims give, with nothing after it.
 *
 * Data flow: the engine's data source (config `data: {type: idx, images: ..., labels: ...}`) calls
 * bt_idx_load_pair once per split and then slices batches out of the bt_dataset. */
#ifndef BT_IO_IDX_H
#define BT_IO_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "baton/tensor.h"

#define BT_IDX_MAX_DIMS 4
/* Largest element count accepted (16 GiB of bytes): bigger dims are treated as corrupt. */
#define BT_IDX_MAX_ELEMENTS ((uint64_t)1 << 34)

typedef struct bt_idx {
    uint8_t *data;                 /* owned; numel bytes, row-major */
    int ndim;                      /* 1..BT_IDX_MAX_DIMS */
    int64_t dim[BT_IDX_MAX_DIMS];
    int64_t numel;
} bt_idx;

/* Reads an unsigned-byte IDX file, gzipped or plain. On success the caller owns out->data (free
 * with bt_idx_free); on failure *out is zeroed. Errors name the file: a file that is not an IDX
 * file this reader takes is BT_ERR_INVALID_ARG (bad input, as a data file named by a model is an
 * argument: bad magic, unsupported element type, absurd dims (a zero dim after the first, or more
 * than BT_IDX_MAX_ELEMENTS elements), truncated data, trailing bytes, corrupt gzip stream);
 * BT_ERR_IO only where opening or reading it fails. */
bt_status bt_idx_read(const char *path, bt_idx *out);
/* The magic and dims only (out->data NULL): what a rank that never reads the elements checks. */
bt_status bt_idx_read_header(const char *path, bt_idx *out);
/* Frees the data and zeroes *idx; accepts NULL and zeroed structs. */
void bt_idx_free(bt_idx *idx);

/* A labelled dataset in memory: n samples of sample_shape float inputs and one class each. */
typedef struct bt_dataset {
    float *inputs;        /* owned; (n, sample_numel) row-major; NULL when loaded without them */
    int32_t *labels;      /* owned; (n), each in [0, n_classes) */
    int64_t n;
    bt_shape sample_shape; /* per sample, e.g. [28, 28] for IDX images */
    int64_t sample_numel;
    int n_classes;
} bt_dataset;

/* Loads an images file (n, rows, cols, ... at least 2 dims) and a labels file (n), checks that
 * the counts match and that every label is below n_classes (the error names the labels file, the
 * index and the value), and converts the images to float32 x / 255, in [0, 1]. The caller owns
 * out (free with bt_dataset_free); on failure *out is zeroed. */
bt_status bt_idx_load_pair(const char *images_path, const char *labels_path, int n_classes,
                           bt_dataset *out);
/* inputs = 0: the labels only (out->inputs NULL; the images file's header is checked, its
 * elements are not read): a rank whose stage never reads the images. inputs = 1: the above. */
bt_status bt_idx_load_pair_part(const char *images_path, const char *labels_path, int n_classes, int inputs,
                                bt_dataset *out);
/* Frees the arrays and zeroes *ds; accepts NULL and zeroed structs. */
void bt_dataset_free(bt_dataset *ds);

#endif
