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
    void *map;             /* data lies in this read-only mapping of an npy file (unmapped by
                              bt_columns_free), or NULL */
    size_t map_bytes;
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
 * Only what is read is held: use (NULL: every column) says which columns to load; a column left
 * out has its file's header checked (shape, sample count) and data NULL. A file already in the
 * column's dtype ('<f4' for f32, '<i4' for i32, '<f8' for f64) is memory-mapped, not copied: its
 * values are checked a few MiB at a time, each part's pages given back once checked, so the
 * resident memory holds only the rows the loader gathers since (a rank of a data-parallel job:
 * its replica's rows). Other file types are converted into memory as before. */
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
