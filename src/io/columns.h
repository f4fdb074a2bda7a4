/* io/columns.h: a dataset for any input signature: one column per model input, each with its own
 * dtype (f32, f64 or i32) and per-sample shape, all with the same number of samples. The trainer
 * fills one from npy files named per input (`data: {train: {type: npy, inputs: {x: x.npy, ...}}}`),
 * from synthetic data shaped like the declaration, or as a view of a classic (inputs, labels)
 * bt_dataset; the loader (io/loader.h) gathers batches of every column with one permutation.
 *
 * Conversions are exact or refused: a file's values must be representable in the column's dtype
 * (an '<f8' 0.1 is not an f32; an integer past 2^24 is not an f32; 2.5 is not an i32), floats must
 * be finite, and an integer column with a declared range (a class count, a vocabulary: the
 * consumer's bt_infer_int_range) must hold values in [0, range). Every error names the file, and
 * for a value the sample and the element. A file's shape must be (N, *declared shape). */
#ifndef BT_IO_COLUMNS_H
#define BT_IO_COLUMNS_H

#include <stdint.h>

#include "baton/config.h"
#include "baton/status.h"
#include "baton/tensor.h"
#include "io/idx.h"

#define BT_COLUMNS_MAX BT_DATA_MAX_INPUTS

typedef struct bt_column {
    char name[64];         /* the model input it feeds */
    bt_dtype dtype;        /* BT_F32, BT_F64 or BT_I32 */
    bt_shape shape;        /* per sample, as declared */
    int64_t numel;         /* elements per sample */
    int64_t int_hi;        /* i32: values must lie in [0, int_hi); 0: any i32 */
    void *data;            /* (n, numel), row-major; NULL in a spec, and for a column not loaded */
    int owned;             /* data is freed by bt_columns_free */
    int rows_in_file;      /* data is NULL: the loader reads each row it gathers from file_fd at
                              file_offset + row x row bytes (the fd is closed by bt_columns_free) */
    int file_fd;
    uint64_t file_offset;
} bt_column;

typedef struct bt_columns {
    int n_cols;
    bt_column col[BT_COLUMNS_MAX];
    int64_t n;             /* samples */
} bt_columns;

/* Loads src (type npy with inputs:) for the columns spec describes (one per model input, data
 * NULL): every spec column must be named by a file, and every file must name a spec column. The
 * caller owns out (bt_columns_free); on failure *out is zeroed.
 *
 * use NULL: every column is read into memory. Otherwise only what is read is held: a column with
 * use[c] = 0 has its file's header checked (shape, sample count) and data NULL; a column with
 * use[c] = 1 whose file is already in the column's dtype ('<f4' for f32, '<i4' for i32, '<f8' for
 * f64) stays in the file: its values are checked as the file is read through a 4 MiB buffer, and
 * the loader reads each row it gathers from the file (rows_in_file), so the resident memory holds
 * no rows but the batches' (a rank of a data-parallel job: its replica's rows). Other file types
 * are converted into memory. */
bt_status bt_columns_load_npy(const bt_data_source *src, const bt_column *spec, int n_spec,
                              const unsigned char *use, bt_columns *out);

/* n synthetic samples shaped like spec: floats uniform in [-1, 1], integers uniform in
 * [0, int_hi) ([0, 2) without a range). seed picks the stream, split (0 train, 1 eval) keeps the
 * eval samples apart from the training ones. */
bt_status bt_columns_synthetic(const bt_column *spec, int n_spec, int64_t n, uint64_t seed, int split,
                               bt_columns *out);

/* A view of a classic dataset as the two columns spec[input_col] (its float samples) and
 * spec[label_col] (its labels), in spec's order; spec[input_col].dtype BT_F64 converts the
 * samples (owned), BT_F32 borrows them (ds must then outlive out). */
bt_status bt_columns_from_dataset(const bt_dataset *ds, const bt_column *spec, int n_spec, int input_col,
                                  int label_col, bt_columns *out);

/* Frees owned data and zeroes *c; accepts NULL and zeroed structs. */
void bt_columns_free(bt_columns *c);

#endif
