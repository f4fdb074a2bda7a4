/* io/columns.c: datasets for any input signature (see columns.h): npy files per input with exact
 * conversion and shape checks (only the columns asked for; rows left in a file of the column's own
 * type for the loader to read), synthetic columns, and the view of a classic (inputs, labels)
 * dataset. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/util.h"
#include "io/columns.h"
#include "io/npy.h"

void bt_columns_free(bt_columns *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_cols; i++) {
        if (c->col[i].rows_in_file) {
            close(c->col[i].file_fd);
        } else if (c->col[i].owned) {
            free(c->col[i].data);
        }
    }
    memset(c, 0, sizeof *c);
}

static bt_status alloc_cols(const bt_column *spec, int n_spec, int64_t n, bt_columns *out)
{
    memset(out, 0, sizeof *out);
    if (n_spec < 1 || n_spec > BT_COLUMNS_MAX)
        return bt_error(BT_ERR_INVALID_ARG, "a dataset needs 1 to %d inputs, not %d", BT_COLUMNS_MAX, n_spec);
    out->n = n;
    for (int c = 0; c < n_spec; c++) {
        out->col[c] = spec[c];
        out->col[c].data = malloc((size_t)n * (size_t)spec[c].numel * bt_dtype_size(spec[c].dtype) + 1);
        out->col[c].owned = 1;
        out->n_cols = c + 1;
        if (!out->col[c].data) {
            bt_columns_free(out);
            return bt_error(BT_ERR_NOMEM, "data: cannot allocate %lld samples of input '%s'", (long long)n,
                            spec[c].name);
        }
    }
    return BT_OK;
}

/* ---- npy per input ----------------------------------------------------------------------------- */

static const char *npy_dims(const bt_npy *a, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(");
    for (int d = 0; d < a->ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)a->dim[d]);
    if (used < size) snprintf(buf + used, size - used, a->ndim == 1 ? ",)" : ")");
    return buf;
}

static const char *wanted_dims(const bt_column *c, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "(N");
    for (int d = 0; d < c->shape.ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, ", %lld", (long long)c->shape.dim[d]);
    if (used < size) snprintf(buf + used, size - used, c->shape.ndim ? ")" : ",)");
    return buf;
}

/* Element i of a as a double, and whether it is an integer type. */
static double npy_at(const bt_npy *a, int64_t i, int64_t *as_int, int *is_int)
{
    switch (a->type) {
    case BT_NPY_F4: *is_int = 0; return ((const float *)a->data)[i];
    case BT_NPY_F8: *is_int = 0; return ((const double *)a->data)[i];
    case BT_NPY_I4: *is_int = 1; *as_int = ((const int32_t *)a->data)[i]; return (double)*as_int;
    case BT_NPY_I8: *is_int = 1; *as_int = ((const int64_t *)a->data)[i]; return (double)*as_int;
    case BT_NPY_U1: *is_int = 1; *as_int = ((const uint8_t *)a->data)[i]; return (double)*as_int;
    }
    *is_int = 0;
    return 0;
}

/* Bytes of a file read at once when its rows stay in the file. */
#define BT_COLUMNS_CHECK_CHUNK ((size_t)4 << 20)

/* Converts elements [first, first + count) of the file, held in a->data from its start, into
 * column c (data allocated), exactly or not at all; with c->data NULL only checks them. */
static bt_status convert(const char *path, const bt_npy *a, bt_column *c, int64_t first, int64_t count)
{
    const int check_only = c->data == NULL;
    for (int64_t k = 0; k < count; k++) {
        const int64_t i = first + k;
        int64_t iv = 0;
        int is_int;
        double v = npy_at(a, k, &iv, &is_int);
        int64_t sample = c->numel ? i / c->numel : 0, element = c->numel ? i % c->numel : 0;
        if (!is_int && !isfinite(v))
            return bt_error(BT_ERR_INVALID_ARG, "%s: sample %lld, element %lld is %s: data must be finite", path,
                            (long long)sample, (long long)element, isnan(v) ? "NaN" : "infinite");
        if (c->dtype == BT_I32) {
            if (!is_int) {
                if (v != floor(v) || v < INT32_MIN || v > INT32_MAX)
                    return bt_error(BT_ERR_INVALID_ARG,
                                    "%s: sample %lld, element %lld is %.17g, which is not an integer: input '%s' "
                                    "takes i32 values",
                                    path, (long long)sample, (long long)element, v, c->name);
                iv = (int64_t)v;
            }
            if (iv < INT32_MIN || iv > INT32_MAX || (c->int_hi > 0 && (iv < 0 || iv >= c->int_hi))) {
                if (c->int_hi > 0)
                    return bt_error(BT_ERR_INVALID_ARG,
                                    "%s: sample %lld, element %lld is %lld: input '%s' takes values in [0, %lld)",
                                    path, (long long)sample, (long long)element, (long long)iv, c->name,
                                    (long long)c->int_hi);
                return bt_error(BT_ERR_INVALID_ARG, "%s: sample %lld, element %lld is %lld, past the i32 range",
                                path, (long long)sample, (long long)element, (long long)iv);
            }
            if (!check_only) ((int32_t *)c->data)[i] = (int32_t)iv;
        } else if (c->dtype == BT_F64) {
            if (is_int && (iv > (INT64_C(1) << 53) || iv < -(INT64_C(1) << 53)))
                return bt_error(BT_ERR_INVALID_ARG,
                                "%s: sample %lld, element %lld is %lld, which float64 cannot hold exactly", path,
                                (long long)sample, (long long)element, (long long)iv);
            if (!check_only) ((double *)c->data)[i] = v;
        } else {
            float f = (float)v;
            if ((double)f != v)
                return bt_error(BT_ERR_INVALID_ARG,
                                "%s: sample %lld, element %lld is %.17g, which float32 cannot hold exactly (input "
                                "'%s' is f32): write the file as float32 (x.astype(np.float32)) or use dtype: f64",
                                path, (long long)sample, (long long)element, v, c->name);
            if (!check_only) ((float *)c->data)[i] = f;
        }
    }
    return BT_OK;
}

/* Checks the values of column c's file (header a) through a buffer and keeps the file open for the
 * loader's reads of rows (c->rows_in_file). */
static bt_status rows_in_file(const char *path, const bt_npy *a, bt_column *c)
{
    bt_status st = BT_OK;
    const size_t esz = bt_npy_type_size(a->type), per = BT_COLUMNS_CHECK_CHUNK / esz;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    void *buf = malloc(per * esz);
    if (fd < 0 || !buf) {
        st = fd < 0 ? bt_error(BT_ERR_IO, "%s: %s", path, strerror(errno)) : bt_error(BT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int64_t first = 0; first < a->numel; first += (int64_t)per) {
        size_t cnt = (size_t)(a->numel - first) < per ? (size_t)(a->numel - first) : per, got = 0;
        while (got < cnt * esz) {
            ssize_t r = pread(fd, (char *)buf + got, cnt * esz - got, (off_t)(a->data_offset + (size_t)first * esz + got));
            if (r <= 0) {
                st = bt_error(BT_ERR_IO, "%s: %s", path, r < 0 ? strerror(errno) : "shorter than its header says");
                goto fail;
            }
            got += (size_t)r;
        }
        bt_npy part = *a;
        part.data = buf;
        BT_TRY_GOTO(st, convert(path, &part, c, first, (int64_t)cnt), fail);
    }
    free(buf);
    c->rows_in_file = 1;
    c->file_fd = fd;
    c->file_offset = a->data_offset;
    return BT_OK;
fail:
    free(buf);
    if (fd >= 0) close(fd);
    return st;
}

/* The column dtype whose values are an npy type's own: the file can be mapped as the column. */
static int same_type(bt_npy_type t, bt_dtype d)
{
    return (t == BT_NPY_F4 && d == BT_F32) || (t == BT_NPY_F8 && d == BT_F64) || (t == BT_NPY_I4 && d == BT_I32);
}

/* how: 0 checks the header only (data NULL), 1 reads and converts, 2 leaves the rows in a file of
 * the column's own type (rows_in_file; other types are read and converted). */
static bt_status load_one(const char *path, bt_column *c, int64_t *n, int how)
{
    bt_npy a;
    char got[160], want[160];
    BT_TRY(how == 1 ? bt_npy_read(path, &a) : bt_npy_read_header(path, &a));
    bt_status st = BT_OK;
    int fits = a.ndim == c->shape.ndim + 1;
    for (int d = 0; fits && d < c->shape.ndim; d++) fits = a.dim[d + 1] == c->shape.dim[d];
    if (!fits) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: shape %s does not fit input '%s' (per sample %s): expected %s", path,
                      npy_dims(&a, got, sizeof got), c->name, bt_shape_format(&c->shape, want, 64),
                      wanted_dims(c, want + 64, sizeof want - 64));
        goto done;
    }
    if (*n >= 0 && a.dim[0] != *n) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: %lld samples, but the other inputs' files have %lld", path,
                      (long long)a.dim[0], (long long)*n);
        goto done;
    }
    *n = a.dim[0];
    if (how == 0) goto done;
    if (how == 2 && same_type(a.type, c->dtype)) {
        st = rows_in_file(path, &a, c);
        goto done;
    }
    if (how == 2) { /* converted into memory: read it whole */
        bt_npy_free(&a);
        BT_TRY(bt_npy_read(path, &a));
    }
    c->data = malloc((size_t)a.numel * bt_dtype_size(c->dtype) + 1);
    c->owned = 1;
    if (!c->data) {
        st = bt_error(BT_ERR_NOMEM, "%s: cannot allocate %lld elements", path, (long long)a.numel);
        goto done;
    }
    st = convert(path, &a, c, 0, *n * c->numel);
done:
    bt_npy_free(&a);
    return st;
}

bt_status bt_columns_load_npy(const bt_data_source *src, const bt_column *spec, int n_spec,
                              const unsigned char *use, bt_columns *out)
{
    bt_status st = BT_OK;
    memset(out, 0, sizeof *out);
    for (int f = 0; f < src->n_inputs; f++) {
        int known = 0;
        for (int c = 0; c < n_spec; c++) known |= strcmp(spec[c].name, src->input_names[f]) == 0;
        if (!known) {
            char names[512];
            size_t used = 0;
            names[0] = '\0';
            for (int c = 0; c < n_spec && used < sizeof names; c++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", c ? ", " : "", spec[c].name);
            return bt_error(BT_ERR_INVALID_ARG, "data: '%s' (%s) is not an input of the model (its inputs: %s)",
                            src->input_names[f], src->input_files[f], names);
        }
    }
    int64_t n = -1;
    for (int c = 0; c < n_spec; c++) {
        const char *path = NULL;
        for (int f = 0; f < src->n_inputs; f++)
            if (strcmp(spec[c].name, src->input_names[f]) == 0) path = src->input_files[f];
        if (!path) {
            st = bt_error(BT_ERR_INVALID_ARG, "data: no file for input '%s' (give inputs: {%s: file.npy, ...})",
                          spec[c].name, spec[c].name);
            goto fail;
        }
        out->col[c] = spec[c];
        out->col[c].data = NULL;
        out->n_cols = c + 1;
        BT_TRY_GOTO(st, load_one(path, &out->col[c], &n, !use ? 1 : use[c] ? 2 : 0), fail);
    }
    out->n = n;
    if (n < 1) {
        st = bt_error(BT_ERR_INVALID_ARG, "data: the files hold no samples");
        goto fail;
    }
    return BT_OK;
fail:
    bt_columns_free(out);
    return st;
}

/* ---- synthetic ----------------------------------------------------------------------------------- */

bt_status bt_columns_synthetic(const bt_column *spec, int n_spec, int64_t n, uint64_t seed, int split,
                               bt_columns *out)
{
    if (n < 1) return bt_error(BT_ERR_INVALID_ARG, "synthetic data needs at least 1 sample, got %lld", (long long)n);
    BT_TRY(alloc_cols(spec, n_spec, n, out));
    uint64_t rng = bt_mix64(seed ^ 0x5eed5eedULL) ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(split + 1));
    for (int c = 0; c < n_spec; c++) {
        bt_column *col = &out->col[c];
        int64_t total = n * col->numel;
        uint64_t range = col->int_hi > 0 ? (uint64_t)col->int_hi : 2;
        for (int64_t i = 0; i < total; i++) {
            uint64_t r = bt_rng_next(&rng);
            double u = (double)(r >> 11) * 0x1.0p-52 - 1.0;
            if (col->dtype == BT_I32) ((int32_t *)col->data)[i] = (int32_t)(r % range);
            else if (col->dtype == BT_F64) ((double *)col->data)[i] = u;
            else ((float *)col->data)[i] = (float)u;
        }
    }
    return BT_OK;
}

/* ---- classic datasets ------------------------------------------------------------------------------- */

bt_status bt_columns_from_dataset(const bt_dataset *ds, const bt_column *spec, int n_spec, int input_col,
                                  int label_col, bt_columns *out)
{
    memset(out, 0, sizeof *out);
    if (n_spec != 2 || input_col == label_col || input_col < 0 || label_col < 0 || input_col > 1 || label_col > 1)
        return bt_error(BT_ERR_INVALID_ARG, "bt_columns_from_dataset: a classic dataset has two columns");
    out->n = ds->n;
    out->n_cols = 2;
    out->col[input_col] = spec[input_col];
    out->col[label_col] = spec[label_col];
    out->col[label_col].data = ds->labels;
    out->col[label_col].owned = 0;
    bt_column *x = &out->col[input_col];
    x->owned = 0;
    x->data = ds->inputs;
    if (x->dtype == BT_F64 && ds->inputs) {
        size_t total = (size_t)ds->n * (size_t)ds->sample_numel;
        double *d = malloc(total * sizeof *d + 1);
        if (!d) return bt_error(BT_ERR_NOMEM, "data: cannot convert %lld samples to f64", (long long)ds->n);
        for (size_t i = 0; i < total; i++) d[i] = ds->inputs[i];
        x->data = d;
        x->owned = 1;
    }
    return BT_OK;
}
