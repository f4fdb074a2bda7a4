/* io/npy.c: the .npy reader (a small parser for the header's dict literal), the writer, and the
 * inputs + labels pair loader (see npy.h). Invariant of a bt_npy filled by bt_npy_read:
 * nbytes == numel * bt_npy_type_size(type) and data holds exactly that many bytes. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/npy.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAX_HEADER (1u << 20)

static const struct {
    const char *descr;
    size_t size;
} npy_types[] = {
    [BT_NPY_F4] = {"<f4", 4}, [BT_NPY_F8] = {"<f8", 8}, [BT_NPY_I4] = {"<i4", 4},
    [BT_NPY_I8] = {"<i8", 8}, [BT_NPY_U1] = {"|u1", 1},
};
#define N_NPY_TYPES ((int)(sizeof npy_types / sizeof npy_types[0]))

size_t bt_npy_type_size(bt_npy_type type)
{
    return (int)type >= 0 && (int)type < N_NPY_TYPES ? npy_types[type].size : 0;
}

const char *bt_npy_type_descr(bt_npy_type type)
{
    return (int)type >= 0 && (int)type < N_NPY_TYPES ? npy_types[type].descr : "?";
}

void bt_npy_free(bt_npy *a)
{
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

/* ---- header parsing ---- */

typedef struct hdr_parser {
    const char *p, *end;
    const char *path;
} hdr_parser;

static void skip_ws(hdr_parser *h)
{
    while (h->p < h->end && isspace((unsigned char)*h->p)) h->p++;
}

static int accept(hdr_parser *h, char c)
{
    skip_ws(h);
    if (h->p < h->end && *h->p == c) {
        h->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string (no escapes: the keys and descrs we accept need none) into buf. */
static int parse_str(hdr_parser *h, char *buf, size_t size)
{
    skip_ws(h);
    if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return 0;
    char q = *h->p++;
    size_t n = 0;
    while (h->p < h->end && *h->p != q) {
        if (*h->p == '\\' || n + 1 >= size) return 0;
        buf[n++] = *h->p++;
    }
    if (h->p >= h->end) return 0;
    h->p++;
    buf[n] = '\0';
    return 1;
}

static int parse_bool(hdr_parser *h, int *out)
{
    skip_ws(h);
    size_t left = (size_t)(h->end - h->p);
    if (left >= 4 && memcmp(h->p, "True", 4) == 0) {
        h->p += 4;
        *out = 1;
        return 1;
    }
    if (left >= 5 && memcmp(h->p, "False", 5) == 0) {
        h->p += 5;
        *out = 0;
        return 1;
    }
    return 0;
}

/* A tuple of non-negative ints: (), (5,), (3, 4) (a trailing L from Python 2 is allowed). */
static bt_status parse_shape(hdr_parser *h, bt_npy *a)
{
    if (!accept(h, '('))
        return bt_error(BT_ERR_INVALID_ARG, "%s: header: 'shape' is not a tuple", h->path);
    a->ndim = 0;
    while (!accept(h, ')')) {
        skip_ws(h);
        if (h->p >= h->end || !isdigit((unsigned char)*h->p))
            return bt_error(BT_ERR_INVALID_ARG, "%s: header: 'shape' holds something other than "
                            "non-negative integers", h->path);
        if (a->ndim == BT_NPY_MAX_DIMS)
            return bt_error(BT_ERR_INVALID_ARG, "%s: more than %d dims", h->path, BT_NPY_MAX_DIMS);
        uint64_t v = 0;
        while (h->p < h->end && isdigit((unsigned char)*h->p)) {
            v = v * 10 + (uint64_t)(*h->p++ - '0');
            if (v > ((uint64_t)1 << 62))
                return bt_error(BT_ERR_INVALID_ARG, "%s: header: a dim in 'shape' is absurdly large",
                                h->path);
        }
        if (h->p < h->end && *h->p == 'L') h->p++;
        a->dim[a->ndim++] = (int64_t)v;
        if (accept(h, ',')) continue;
        if (!accept(h, ')'))
            return bt_error(BT_ERR_INVALID_ARG, "%s: header: 'shape' tuple is malformed", h->path);
        break;
    }
    return BT_OK;
}

static bt_status parse_header(const char *path, const char *text, size_t len, bt_npy *a)
{
    hdr_parser h = {text, text + len, path};
    char key[32], descr[32] = "";
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
    if (!accept(&h, '{')) return bt_error(BT_ERR_INVALID_ARG, "%s: header is not a dict", path);
    while (!accept(&h, '}')) {
        if (!parse_str(&h, key, sizeof key) || !accept(&h, ':'))
            return bt_error(BT_ERR_INVALID_ARG, "%s: header: malformed dict", path);
        if (strcmp(key, "descr") == 0) {
            if (!parse_str(&h, descr, sizeof descr))
                return bt_error(BT_ERR_INVALID_ARG, "%s: header: 'descr' is not a simple string (structured "
                                "dtypes are not supported)", path);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (!parse_bool(&h, &fortran))
                return bt_error(BT_ERR_INVALID_ARG, "%s: header: 'fortran_order' is not True or False",
                                path);
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            BT_TRY(parse_shape(&h, a));
            have_shape = 1;
        } else {
            return bt_error(BT_ERR_INVALID_ARG, "%s: header: unexpected key '%s'", path, key);
        }
        if (accept(&h, ',')) continue;
        if (!accept(&h, '}')) return bt_error(BT_ERR_INVALID_ARG, "%s: header: malformed dict", path);
        break;
    }
    skip_ws(&h);
    if (h.p != h.end) return bt_error(BT_ERR_INVALID_ARG, "%s: header: text after the dict", path);
    if (!have_descr || !have_fortran || !have_shape)
        return bt_error(BT_ERR_INVALID_ARG, "%s: header lacks '%s'", path,
                        !have_descr ? "descr" : !have_fortran ? "fortran_order" : "shape");
    int type = -1;
    for (int i = 0; i < N_NPY_TYPES; i++)
        if (strcmp(descr, npy_types[i].descr) == 0) type = i;
    if (type < 0)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s: dtype '%s' is not supported (only '<f4', '<f8', '<i4', '<i8', '|u1')",
                        path, descr);
    if (fortran)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s: fortran_order is True; only C-order arrays are supported (save "
                        "np.ascontiguousarray(a))",
                        path);
    a->type = (bt_npy_type)type;
    return BT_OK;
}

/* ---- reading ---- */

static bt_status read_npy(const char *path, int header_only, bt_npy *out);

bt_status bt_npy_read(const char *path, bt_npy *out) { return read_npy(path, 0, out); }
bt_status bt_npy_read_header(const char *path, bt_npy *out) { return read_npy(path, 1, out); }

static bt_status read_npy(const char *path, int header_only, bt_npy *out)
{
    bt_status st = BT_OK;
    FILE *fp = NULL;
    char *header = NULL;
    unsigned char pre[12];
    struct stat sb;
    memset(out, 0, sizeof *out);
    if (!path) return bt_error(BT_ERR_INVALID_ARG, "npy: NULL path");
    fp = fopen(path, "rb");
    if (!fp || fstat(fileno(fp), &sb) != 0) {
        st = bt_error(BT_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (fread(pre, 1, 8, fp) != 8 || memcmp(pre, NPY_MAGIC, 6) != 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: not a .npy file (bad magic)", path);
        goto fail;
    }
    unsigned major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: .npy format version %u.%u is not supported (1.0, 2.0, 3.0)",
                      path, major, minor);
        goto fail;
    }
    size_t len_bytes = major == 1 ? 2 : 4;
    if (fread(pre + 8, 1, len_bytes, fp) != len_bytes) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: truncated in the header length", path);
        goto fail;
    }
    uint32_t hlen = pre[8] | (uint32_t)pre[9] << 8;
    if (len_bytes == 4) hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    if (hlen > NPY_MAX_HEADER) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: header length %u exceeds %u", path, (unsigned)hlen,
                      NPY_MAX_HEADER);
        goto fail;
    }
    header = malloc(hlen + 1u);
    if (!header) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (fread(header, 1, hlen, fp) != hlen) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: truncated in the header", path);
        goto fail;
    }
    header[hlen] = '\0';
    if (hlen == 0 || header[hlen - 1] != '\n') {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: header does not end with a newline", path);
        goto fail;
    }
    BT_TRY_GOTO(st, parse_header(path, header, hlen, out), fail);
    uint64_t numel = 1;
    for (int d = 0; d < out->ndim; d++)
        if (__builtin_mul_overflow(numel, (uint64_t)out->dim[d], &numel) ||
            numel > ((uint64_t)1 << 40)) {
            st = bt_error(BT_ERR_INVALID_ARG, "%s: absurd shape (too many elements)", path);
            goto fail;
        }
    uint64_t nbytes = numel * bt_npy_type_size(out->type);
    uint64_t start = 6 + 2 + len_bytes + hlen;
    uint64_t have = size >= start ? size - start : 0;
    if (have != nbytes) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: %s: shape needs %llu data bytes, the file has %llu", path,
                      have < nbytes ? "truncated" : "size mismatch", (unsigned long long)nbytes,
                      (unsigned long long)have);
        goto fail;
    }
    out->numel = (int64_t)numel;
    out->nbytes = (size_t)nbytes;
    out->data_offset = (size_t)start;
    if (header_only) goto done;
    out->data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!out->data) {
        st = bt_error(BT_ERR_NOMEM, "%s: cannot allocate %llu bytes", path,
                      (unsigned long long)nbytes);
        goto fail;
    }
    if (nbytes && fread(out->data, 1, (size_t)nbytes, fp) != nbytes) {
        st = bt_error(BT_ERR_IO, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
done:
    free(header);
    fclose(fp);
    return BT_OK;
fail:
    free(header);
    if (fp) fclose(fp);
    bt_npy_free(out);
    return st;
}

/* ---- writing ---- */

bt_status bt_npy_write(const char *path, bt_dtype dtype, int ndim, const int64_t *dims,
                       const void *data)
{
    bt_status st = BT_OK;
    bt_atomic_file *f = NULL;
    const char *descr;
    char dict[64 + 24 * BT_NPY_MAX_DIMS];
    char header[sizeof dict + 128];
    if (!path || ndim < 0 || ndim > BT_NPY_MAX_DIMS || (ndim > 0 && !dims))
        return bt_error(BT_ERR_INVALID_ARG, "npy: invalid arguments writing %s",
                        path ? path : "(null)");
    switch (dtype) {
    case BT_F32: descr = "<f4"; break;
    case BT_F64: descr = "<f8"; break;
    case BT_I32: descr = "<i4"; break;
    default:
        return bt_error(BT_ERR_INVALID_ARG, "%s: npy writer takes f32, f64 or i32, not %s", path,
                        bt_dtype_name(dtype));
    }
    uint64_t numel = 1;
    size_t n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, "
                                "'shape': (", descr);
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)dims[d], &numel))
            return bt_error(BT_ERR_INVALID_ARG, "%s: invalid shape", path);
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%s%lld", d ? ", " : "",
                              (long long)dims[d]);
    }
    snprintf(dict + n, sizeof dict - n, "%s), }", ndim == 1 ? "," : "");
    uint64_t nbytes = numel * bt_dtype_size(dtype);
    if (nbytes && !data) return bt_error(BT_ERR_INVALID_ARG, "%s: NULL data", path);

    /* Version 1.0: 10-byte preamble; pad with spaces so preamble + header is a multiple of 64,
     * the header ending in '\n'. */
    size_t dict_len = strlen(dict);
    size_t total = (10 + dict_len + 1 + 63) / 64 * 64;
    size_t hlen = total - 10;
    memcpy(header, NPY_MAGIC "\x01\x00", 8);
    header[8] = (char)(hlen & 0xff);
    header[9] = (char)(hlen >> 8);
    memcpy(header + 10, dict, dict_len);
    memset(header + 10 + dict_len, ' ', hlen - dict_len - 1);
    header[total - 1] = '\n';
    BT_TRY_GOTO(st, bt_atomic_file_open(path, &f), fail);
    BT_TRY_GOTO(st, bt_atomic_file_write(f, header, total), fail);
    BT_TRY_GOTO(st, bt_atomic_file_write(f, data, (size_t)nbytes), fail);
    st = bt_atomic_file_commit(f);
    return st;
fail:
    bt_atomic_file_abort(f);
    return st;
}

/* ---- data sets ---- */

/* Element i of an integer array as int64. */
static int64_t int_at(const bt_npy *a, int64_t i)
{
    switch (a->type) {
    case BT_NPY_I4: {
        int32_t v;
        memcpy(&v, (const char *)a->data + 4 * i, 4);
        return v;
    }
    case BT_NPY_I8: {
        int64_t v;
        memcpy(&v, (const char *)a->data + 8 * i, 8);
        return v;
    }
    case BT_NPY_U1: return ((const uint8_t *)a->data)[i];
    default: return -1;
    }
}

bt_status bt_npy_load_pair(const char *inputs_path, const char *labels_path, int n_classes,
                           bt_dataset *out)
{
    return bt_npy_load_pair_part(inputs_path, labels_path, n_classes, 1, out);
}

bt_status bt_npy_load_pair_part(const char *inputs_path, const char *labels_path, int n_classes, int inputs,
                                bt_dataset *out)
{
    bt_status st = BT_OK;
    bt_npy x = {0}, y = {0};
    memset(out, 0, sizeof *out);
    if (n_classes < 1) return bt_error(BT_ERR_INVALID_ARG, "npy: n_classes %d < 1", n_classes);
    BT_TRY_GOTO(st, inputs ? bt_npy_read(inputs_path, &x) : bt_npy_read_header(inputs_path, &x), fail);
    BT_TRY_GOTO(st, bt_npy_read(labels_path, &y), fail);
    if (x.ndim < 1 || x.ndim - 1 > BT_MAX_DIMS) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: inputs need 1 to %d dims (n, ...), the file has %d",
                      inputs_path, BT_MAX_DIMS + 1, x.ndim);
        goto fail;
    }
    if (x.type != BT_NPY_F4 && x.type != BT_NPY_F8 && x.type != BT_NPY_U1) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: inputs of dtype '%s'; expected '<f4', '<f8' or '|u1'",
                      inputs_path, bt_npy_type_descr(x.type));
        goto fail;
    }
    if (y.ndim != 1 || (y.type != BT_NPY_I4 && y.type != BT_NPY_I8 && y.type != BT_NPY_U1)) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: labels must be a 1-dim integer array, not %d dims of '%s'",
                      labels_path, y.ndim, bt_npy_type_descr(y.type));
        goto fail;
    }
    if (x.dim[0] != y.dim[0]) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s has %lld samples but %s has %lld labels", inputs_path,
                      (long long)x.dim[0], labels_path, (long long)y.dim[0]);
        goto fail;
    }
    for (int64_t i = 0; i < y.numel; i++) {
        int64_t v = int_at(&y, i);
        if (v < 0 || v >= n_classes) {
            st = bt_error(BT_ERR_INVALID_ARG, "%s: label %lld is %lld, not in [0, %d)", labels_path,
                          (long long)i, (long long)v, n_classes);
            goto fail;
        }
    }
    out->n = x.dim[0];
    out->n_classes = n_classes;
    out->sample_shape.ndim = x.ndim - 1;
    for (int d = 1; d < x.ndim; d++) out->sample_shape.dim[d - 1] = x.dim[d];
    out->sample_numel = bt_shape_numel(&out->sample_shape);
    if (inputs) out->inputs = malloc((size_t)(x.numel ? x.numel : 1) * sizeof *out->inputs);
    out->labels = malloc((size_t)(out->n ? out->n : 1) * sizeof *out->labels);
    if ((inputs && !out->inputs) || !out->labels) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", inputs_path);
        goto fail;
    }
    for (int64_t i = 0; inputs && i < x.numel; i++) {
        double v;
        if (x.type == BT_NPY_U1)
            out->inputs[i] = (float)((const uint8_t *)x.data)[i] / 255.0f;
        else if (x.type == BT_NPY_F4)
            out->inputs[i] = ((const float *)x.data)[i];
        else
            out->inputs[i] = (float)((const double *)x.data)[i];
        if (isfinite(out->inputs[i])) continue;
        /* a NaN or an infinity would pass through the model unnoticed (ReLU hides it from the loss)
         * and poison the weights: refuse it here, where the file and the sample are known */
        v = x.type == BT_NPY_F4 ? ((const float *)x.data)[i] : ((const double *)x.data)[i];
        int64_t numel = out->sample_numel ? out->sample_numel : 1;
        if (isfinite(v))
            st = bt_error(BT_ERR_INVALID_ARG, "%s: sample %lld, element %lld is %g, outside float32's range",
                          inputs_path, (long long)(i / numel), (long long)(i % numel), v);
        else
            st = bt_error(BT_ERR_INVALID_ARG, "%s: sample %lld, element %lld is %s: data must be finite",
                          inputs_path, (long long)(i / numel), (long long)(i % numel),
                          isnan(v) ? "NaN" : v > 0 ? "+infinity" : "-infinity");
        goto fail;
    }
    for (int64_t i = 0; i < out->n; i++) out->labels[i] = (int32_t)int_at(&y, i);
    bt_npy_free(&x);
    bt_npy_free(&y);
    return BT_OK;
fail:
    bt_npy_free(&x);
    bt_npy_free(&y);
    bt_dataset_free(out);
    return st;
}
