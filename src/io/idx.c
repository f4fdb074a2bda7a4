/* io/idx.c: the IDX reader (through zlib's gz* calls, which read gzipped and plain files alike)
 * and the images + labels pair loader (see idx.h). A header's dims are never trusted with memory:
 * a plain file must hold the bytes its dims promise before anything is allocated (checked with
 * fstat), a gzip file must be big enough that it could (deflate expands at most 1032:1), and the
 * data buffer grows with what is actually read, so a 22-byte header claiming 4 GB costs nothing
 * but an error. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"
#include "io/idx.h"

void bt_idx_free(bt_idx *idx)
{
    if (!idx) return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

void bt_dataset_free(bt_dataset *ds)
{
    if (!ds) return;
    free(ds->inputs);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* Reads exactly size bytes; *got gets the count actually read. A gzip error sets the message. */
static bt_status gz_read_full(gzFile gz, const char *path, void *buf, uint64_t size, uint64_t *got)
{
    unsigned char *p = buf;
    *got = 0;
    while (*got < size) {
        uint64_t left = size - *got;
        unsigned chunk = left > (1u << 30) ? (1u << 30) : (unsigned)left;
        int n = gzread(gz, p + *got, chunk);
        if (n < 0) {
            int errnum = 0;
            const char *msg = gzerror(gz, &errnum);
            if (errnum == Z_ERRNO) msg = strerror(errno);
            /* a corrupt stream is a bad file (the data's fault), a failing read an I/O error */
            return bt_error(errnum == Z_ERRNO ? BT_ERR_IO : BT_ERR_INVALID_ARG, "%s: read error after %llu bytes: %s",
                            path, (unsigned long long)*got, msg);
        }
        if (n == 0) break;
        *got += (uint64_t)n;
    }
    return BT_OK;
}

/* deflate's largest expansion: a stream of n compressed bytes decompresses to at most about
 * 1032 n bytes. Used only to refuse impossible headers early; the growing read below is the
 * real guarantee. */
#define BT_GZIP_MAX_RATIO 1100

/* Reads numel data bytes into a buffer that grows (doubling, from 1 MiB) with what arrives, so
 * memory follows the file, never the header. *data gets the buffer; *got the count read. */
static bt_status read_data(gzFile gz, const char *path, uint64_t numel, unsigned char **data, uint64_t *got)
{
    uint64_t cap = numel < (1u << 20) ? numel : (1u << 20);
    unsigned char *buf = malloc(cap ? (size_t)cap : 1);
    *got = 0;
    *data = NULL;
    if (!buf) return bt_error(BT_ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)cap);
    while (*got < numel) {
        if (*got == cap) {
            uint64_t grown = cap * 2 < numel ? cap * 2 : numel;
            unsigned char *b = realloc(buf, (size_t)grown);
            if (!b) {
                free(buf);
                return bt_error(BT_ERR_NOMEM, "%s: cannot allocate %llu bytes", path, (unsigned long long)grown);
            }
            buf = b;
            cap = grown;
        }
        uint64_t want = cap - *got, n = 0;
        bt_status st = gz_read_full(gz, path, buf + *got, want, &n);
        if (st != BT_OK) {
            free(buf);
            return st;
        }
        *got += n;
        if (n < want) break; /* end of file */
    }
    *data = buf;
    return BT_OK;
}

static uint32_t be32(const unsigned char *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

static bt_status read_idx(const char *path, int header_only, bt_idx *out);

bt_status bt_idx_read(const char *path, bt_idx *out) { return read_idx(path, 0, out); }
bt_status bt_idx_read_header(const char *path, bt_idx *out) { return read_idx(path, 1, out); }

static bt_status read_idx(const char *path, int header_only, bt_idx *out)
{
    bt_status st = BT_OK;
    gzFile gz = NULL;
    unsigned char head[4 + 4 * BT_IDX_MAX_DIMS];
    uint64_t got = 0;
    memset(out, 0, sizeof *out);
    if (!path) return bt_error(BT_ERR_INVALID_ARG, "idx: NULL path");
    int fd = open(path, O_RDONLY);
    if (fd < 0) return bt_error(BT_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = bt_error(BT_ERR_IO, "%s: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    gz = gzdopen(fd, "rb");
    if (!gz) {
        close(fd);
        return bt_error(BT_ERR_NOMEM, "%s: cannot start reading (out of memory)", path);
    }
    BT_TRY_GOTO(st, gz_read_full(gz, path, head, 4, &got), fail);
    if (got < 4) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: truncated: %llu bytes, too short for an IDX magic", path,
                      (unsigned long long)got);
        goto fail;
    }
    uint32_t magic = be32(head);
    if ((magic >> 16) != 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: bad magic 0x%08x: not an IDX file", path, (unsigned)magic);
        goto fail;
    }
    unsigned type = (magic >> 8) & 0xff, ndim = magic & 0xff;
    if (type != 0x08) {
        st = bt_error(BT_ERR_INVALID_ARG,
                      "%s: magic 0x%08x: element type 0x%02x is not supported (only unsigned "
                      "byte, 0x08)",
                      path, (unsigned)magic, type);
        goto fail;
    }
    if (ndim < 1 || ndim > BT_IDX_MAX_DIMS) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: magic 0x%08x: %u dims (expected 1 to %d)", path,
                      (unsigned)magic, ndim, BT_IDX_MAX_DIMS);
        goto fail;
    }
    BT_TRY_GOTO(st, gz_read_full(gz, path, head + 4, 4 * (uint64_t)ndim, &got), fail);
    if (got < 4 * (uint64_t)ndim) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: truncated in the dims (%u expected)", path, ndim);
        goto fail;
    }
    uint64_t numel = 1;
    out->ndim = (int)ndim;
    for (unsigned d = 0; d < ndim; d++) {
        out->dim[d] = be32(head + 4 + 4 * d);
        if (d > 0 && out->dim[d] == 0) {
            st = bt_error(BT_ERR_INVALID_ARG, "%s: absurd dims: dim %u is 0", path, d);
            goto fail;
        }
        numel *= (uint64_t)out->dim[d];
        if (numel > BT_IDX_MAX_ELEMENTS) {
            st = bt_error(BT_ERR_INVALID_ARG, "%s: absurd dims: more than %llu elements", path,
                          (unsigned long long)BT_IDX_MAX_ELEMENTS);
            goto fail;
        }
    }
    out->numel = (int64_t)numel;
    uint64_t header = 4 + 4 * (uint64_t)ndim;
    if (S_ISREG(sb.st_mode)) {
        uint64_t size = (uint64_t)sb.st_size;
        if (gzdirect(gz) && size - header < numel) {
            st = bt_error(BT_ERR_INVALID_ARG, "%s: truncated: the dims need %llu data bytes, the file has %llu",
                          path, (unsigned long long)numel, (unsigned long long)(size - header));
            goto fail;
        }
        if (!gzdirect(gz) && numel / BT_GZIP_MAX_RATIO > size) {
            st = bt_error(BT_ERR_INVALID_ARG,
                          "%s: truncated: the dims need %llu data bytes, more than %llu compressed "
                          "bytes can hold",
                          path, (unsigned long long)numel, (unsigned long long)size);
            goto fail;
        }
    }
    if (header_only) {
        gzclose(gz);
        return BT_OK;
    }
    BT_TRY_GOTO(st, read_data(gz, path, numel, &out->data, &got), fail);
    if (got < numel) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: truncated: the dims need %llu data bytes, the file has %llu",
                      path, (unsigned long long)numel, (unsigned long long)got);
        goto fail;
    }
    unsigned char extra;
    BT_TRY_GOTO(st, gz_read_full(gz, path, &extra, 1, &got), fail);
    if (got != 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: trailing bytes after the %llu data bytes the dims give", path,
                      (unsigned long long)numel);
        goto fail;
    }
    gzclose(gz);
    return BT_OK;
fail:
    if (gz) gzclose(gz);
    bt_idx_free(out);
    return st;
}

bt_status bt_idx_load_pair(const char *images_path, const char *labels_path, int n_classes,
                           bt_dataset *out)
{
    return bt_idx_load_pair_part(images_path, labels_path, n_classes, 1, out);
}

bt_status bt_idx_load_pair_part(const char *images_path, const char *labels_path, int n_classes, int inputs,
                                bt_dataset *out)
{
    bt_status st = BT_OK;
    bt_idx images = {0}, labels = {0};
    memset(out, 0, sizeof *out);
    if (n_classes < 1) return bt_error(BT_ERR_INVALID_ARG, "idx: n_classes %d < 1", n_classes);
    BT_TRY_GOTO(st, inputs ? bt_idx_read(images_path, &images) : bt_idx_read_header(images_path, &images), fail);
    BT_TRY_GOTO(st, bt_idx_read(labels_path, &labels), fail);
    if (images.ndim < 2) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: images need at least 2 dims (n, ...), the file has %d",
                      images_path, images.ndim);
        goto fail;
    }
    if (labels.ndim != 1) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: labels need 1 dim (n), the file has %d", labels_path,
                      labels.ndim);
        goto fail;
    }
    if (images.dim[0] != labels.dim[0]) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s has %lld images but %s has %lld labels", images_path,
                      (long long)images.dim[0], labels_path, (long long)labels.dim[0]);
        goto fail;
    }
    for (int64_t i = 0; i < labels.numel; i++)
        if (labels.data[i] >= n_classes) {
            st = bt_error(BT_ERR_INVALID_ARG, "%s: label %lld is %u, not below n_classes %d", labels_path,
                          (long long)i, (unsigned)labels.data[i], n_classes);
            goto fail;
        }
    out->n = images.dim[0];
    out->n_classes = n_classes;
    out->sample_shape.ndim = images.ndim - 1;
    for (int d = 1; d < images.ndim; d++) out->sample_shape.dim[d - 1] = images.dim[d];
    out->sample_numel = bt_shape_numel(&out->sample_shape);
    if (inputs) out->inputs = malloc((size_t)(images.numel ? images.numel : 1) * sizeof *out->inputs);
    out->labels = malloc((size_t)(out->n ? out->n : 1) * sizeof *out->labels);
    if ((inputs && !out->inputs) || !out->labels) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory converting %lld images", images_path,
                      (long long)out->n);
        goto fail;
    }
    for (int64_t i = 0; inputs && i < images.numel; i++) out->inputs[i] = (float)images.data[i] / 255.0f;
    for (int64_t i = 0; i < out->n; i++) out->labels[i] = labels.data[i];
    bt_idx_free(&images);
    bt_idx_free(&labels);
    return BT_OK;
fail:
    bt_idx_free(&images);
    bt_idx_free(&labels);
    bt_dataset_free(out);
    return st;
}
