/* io/safetensors.h: reading and writing safetensors files, the checkpoint format baton shares with
 * PyTorch (weights named "fc1.weight", Linear weights shaped [out, in]).
 *
 * Layout: u64 little-endian N, then N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"key": "value", ...}}
 * padded with spaces, then the data area; offsets count from the start of the data area.
 *
 * The writer collects tensors (borrowed pointers, read only when writing) and metadata pairs, then
 * writes the whole file through io/atomic_file.h: a crash mid-write leaves the previous file.
 * Its header is compact JSON as the Rust safetensors library writes it ("__metadata__" first with
 * sorted keys, then the tensors in data order, each {"dtype", "shape", "data_offsets"}), padded
 * with spaces to a multiple of 8; tensors are laid out contiguously in the order they were added,
 * so tensors added in the order the upstream library sorts them give the same bytes it writes.
 *
 * The reader maps the file and validates it completely before returning: header length at most
 * 100,000,000 and inside the file, JSON without duplicate keys, every entry a known dtype, a shape
 * of non-negative integers (at most BT_MAX_DIMS of them), data_offsets [begin, end] with
 * end - begin == numel * element size, the tensors tiling the data area with no overlap and no
 * hole, and 8 + N + last end == file size. Errors are BT_ERR_IO with messages that name the file and the
 * tensor. Tensors whose dtype baton cannot compute with (I64, U8, BOOL, ...) are listed, with
 * known == 0, so a PyTorch file with extra buffers still opens; only reading them as data fails.
 *
 * Data flow: the engine's checkpoint save hands parameter tensors to the writer; load opens a
 * file, looks parameters up by name and copies them into the engine's buffers. */
#ifndef BT_IO_SAFETENSORS_H
#define BT_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "baton/tensor.h"

#define BT_ST_MAX_HEADER 100000000ULL

/* ---- writing ---- */

typedef struct bt_st_writer bt_st_writer;

/* The caller owns *out (free with bt_st_writer_destroy). */
bt_status bt_st_writer_create(bt_st_writer **out);
/* Accepts NULL. */
void bt_st_writer_destroy(bt_st_writer *w);
/* Adds a tensor. name is copied; shape is copied; data (numel * element size bytes) is borrowed and
 * must stay valid until bt_st_writer_write returns. Names must be unique, non-empty and not
 * "__metadata__". dtype is any bt_dtype. */
bt_status bt_st_writer_add(bt_st_writer *w, const char *name, bt_dtype dtype,
                           const bt_shape *shape, const void *data);
/* Adds a "__metadata__" pair (both copied); a key given twice is an error. */
bt_status bt_st_writer_add_metadata(bt_st_writer *w, const char *key, const char *value);
/* Writes everything to path atomically (see io/atomic_file.h). The writer can be written again. */
bt_status bt_st_writer_write(const bt_st_writer *w, const char *path);

/* ---- reading ---- */

typedef struct bt_st_file bt_st_file;

typedef struct bt_st_tensor {
    const char *name;     /* owned by the bt_st_file */
    const char *st_dtype; /* the file's dtype string: "F32", "I64", ... (owned by the file) */
    int known;            /* 1 when st_dtype is one of baton's dtypes (then dtype is set) */
    bt_dtype dtype;
    bt_shape shape;
    int64_t numel;
    uint64_t offset;      /* begin, relative to the data area */
    size_t nbytes;
    const void *data;     /* inside the mapping; may be unaligned, so copy before typed access */
} bt_st_tensor;

/* Maps and validates path. The caller owns *out (free with bt_st_close). */
bt_status bt_st_open(const char *path, bt_st_file **out);
/* Unmaps; accepts NULL. Pointers obtained from the file die with it. */
void bt_st_close(bt_st_file *f);

const char *bt_st_path(const bt_st_file *f);
/* Tensors in data-offset order (for files baton wrote: the order they were added). */
int bt_st_count(const bt_st_file *f);
const bt_st_tensor *bt_st_at(const bt_st_file *f, int i);
/* NULL when there is no tensor called name. */
const bt_st_tensor *bt_st_find(const bt_st_file *f, const char *name);
/* Copies tensor name into dst (bytes must equal its size) after checking that it exists, has a
 * baton dtype equal to dtype and the shape equal to *shape (shape may be NULL to check only the
 * element count, bytes / element size). Errors name the file and the tensor. */
bt_status bt_st_read(const bt_st_file *f, const char *name, bt_dtype dtype, const bt_shape *shape,
                     void *dst, size_t bytes);

/* Metadata: the value for key, or NULL. */
const char *bt_st_metadata(const bt_st_file *f, const char *key);
int bt_st_metadata_count(const bt_st_file *f);
/* The i-th pair (sorted by key); 0 <= i < bt_st_metadata_count. */
void bt_st_metadata_at(const bt_st_file *f, int i, const char **key, const char **value);

/* "F32" for BT_F32 and so on (the safetensors spelling). */
const char *bt_st_dtype_name(bt_dtype dtype);

#endif
