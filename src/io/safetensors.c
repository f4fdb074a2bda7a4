/* io/safetensors.c: the safetensors writer (jansson header, atomic write) and the validating,
 * memory-mapped reader (see safetensors.h for the format and the checks).
 * Invariants of an open bt_st_file: the whole file is mapped read-only; every tensor lies inside
 * the data area; tensors[] is sorted by offset and tiles the data area exactly; by_name[] holds the
 * same tensors sorted by name; names and dtype strings point into the kept JSON header. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

/* ---- dtypes ---- */

typedef struct st_dtype_info {
    const char *name;
    size_t size;
    int known;
    bt_dtype dtype;
} st_dtype_info;

/* Every dtype of the safetensors format with a whole number of bytes per element. */
static const st_dtype_info st_dtypes[] = {
    {"F32", 4, 1, BT_F32},     {"F64", 8, 1, BT_F64},     {"I32", 4, 1, BT_I32},
    {"BF16", 2, 1, BT_BF16},   {"F16", 2, 1, BT_F16},     {"BOOL", 1, 0, BT_F32},
    {"U8", 1, 0, BT_F32},      {"I8", 1, 0, BT_F32},      {"I16", 2, 0, BT_F32},
    {"U16", 2, 0, BT_F32},     {"U32", 4, 0, BT_F32},     {"I64", 8, 0, BT_F32},
    {"U64", 8, 0, BT_F32},     {"F8_E4M3", 1, 0, BT_F32}, {"F8_E5M2", 1, 0, BT_F32},
    {"F8_E8M0", 1, 0, BT_F32},
};

static const st_dtype_info *st_dtype_lookup(const char *name)
{
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return &st_dtypes[i];
    return NULL;
}

const char *bt_st_dtype_name(bt_dtype dtype)
{
    switch (dtype) {
    case BT_F32: return "F32";
    case BT_F64: return "F64";
    case BT_I32: return "I32";
    case BT_BF16: return "BF16";
    case BT_F16: return "F16";
    }
    return NULL;
}

/* numel and bytes of a shape, or -1 when they overflow or a dim is negative. */
static int shape_bytes(const bt_shape *shape, size_t elem, int64_t *numel, uint64_t *bytes)
{
    uint64_t n = 1;
    for (int i = 0; i < shape->ndim; i++) {
        if (shape->dim[i] < 0) return -1;
        if (__builtin_mul_overflow(n, (uint64_t)shape->dim[i], &n)) return -1;
    }
    if (n > (uint64_t)INT64_MAX) return -1;
    uint64_t b;
    if (__builtin_mul_overflow(n, (uint64_t)elem, &b)) return -1;
    *numel = (int64_t)n;
    *bytes = b;
    return 0;
}

/* ---- writer ---- */

typedef struct st_entry {
    char *name;
    bt_dtype dtype;
    bt_shape shape;
    uint64_t nbytes;
    const void *data;
} st_entry;

struct bt_st_writer {
    st_entry *entries;
    int n, cap;
    json_t *names;    /* set of the names added so far (values are null) */
    json_t *metadata; /* object: key -> string */
};

bt_status bt_st_writer_create(bt_st_writer **out)
{
    bt_st_writer *w = calloc(1, sizeof *w);
    *out = NULL;
    if (!w) return bt_error(BT_ERR_NOMEM, "safetensors writer: out of memory");
    w->names = json_object();
    w->metadata = json_object();
    if (!w->names || !w->metadata) {
        bt_st_writer_destroy(w);
        return bt_error(BT_ERR_NOMEM, "safetensors writer: out of memory");
    }
    *out = w;
    return BT_OK;
}

void bt_st_writer_destroy(bt_st_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->entries[i].name);
    free(w->entries);
    json_decref(w->names);
    json_decref(w->metadata);
    free(w);
}

bt_status bt_st_writer_add(bt_st_writer *w, const char *name, bt_dtype dtype,
                           const bt_shape *shape, const void *data)
{
    int64_t numel;
    uint64_t nbytes;
    if (!w || !name || !shape) return bt_error(BT_ERR_INVALID_ARG, "safetensors: NULL argument");
    if (!*name || strcmp(name, "__metadata__") == 0)
        return bt_error(BT_ERR_INVALID_ARG, "safetensors: invalid tensor name '%s'", name);
    if (!bt_st_dtype_name(dtype))
        return bt_error(BT_ERR_INVALID_ARG, "safetensors: tensor '%s': unknown dtype %d", name,
                        (int)dtype);
    if (shape->ndim < 0 || shape->ndim > BT_MAX_DIMS ||
        shape_bytes(shape, bt_dtype_size(dtype), &numel, &nbytes) != 0)
        return bt_error(BT_ERR_INVALID_ARG, "safetensors: tensor '%s': invalid shape", name);
    if (!data && nbytes > 0)
        return bt_error(BT_ERR_INVALID_ARG, "safetensors: tensor '%s': NULL data", name);
    if (json_object_get(w->names, name))
        return bt_error(BT_ERR_INVALID_ARG, "safetensors: tensor '%s' added twice", name);
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        st_entry *e = realloc(w->entries, (size_t)cap * sizeof *e);
        if (!e) return bt_error(BT_ERR_NOMEM, "safetensors: out of memory");
        w->entries = e;
        w->cap = cap;
    }
    st_entry *e = &w->entries[w->n];
    e->name = bt_strdup(name);
    if (!e->name || json_object_set_new(w->names, name, json_null()) != 0) {
        free(e->name);
        return bt_error(BT_ERR_NOMEM, "safetensors: tensor '%s': out of memory or not UTF-8",
                        name);
    }
    e->dtype = dtype;
    e->shape = *shape;
    e->nbytes = nbytes;
    e->data = data;
    w->n++;
    return BT_OK;
}

bt_status bt_st_writer_add_metadata(bt_st_writer *w, const char *key, const char *value)
{
    if (!w || !key || !value) return bt_error(BT_ERR_INVALID_ARG, "safetensors: NULL argument");
    if (json_object_get(w->metadata, key))
        return bt_error(BT_ERR_INVALID_ARG, "safetensors: metadata key '%s' added twice", key);
    json_t *v = json_string(value);
    if (!v || json_object_set_new(w->metadata, key, v) != 0)
        return bt_error(BT_ERR_INVALID_ARG,
                        "safetensors: metadata '%s': out of memory or not UTF-8", key);
    return BT_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The "__metadata__" object with its keys inserted in sorted order (NULL on allocation failure). */
static json_t *sorted_metadata(const bt_st_writer *w)
{
    size_t n = json_object_size(w->metadata), i = 0;
    const char **keys = calloc(n + 1, sizeof *keys);
    json_t *obj = json_object();
    const char *key;
    json_t *v;
    if (!keys || !obj) goto fail;
    json_object_foreach(w->metadata, key, v) keys[i++] = key;
    qsort(keys, n, sizeof *keys, cmp_str);
    for (i = 0; i < n; i++)
        if (json_object_set(obj, keys[i], json_object_get(w->metadata, keys[i])) != 0) goto fail;
    free(keys);
    return obj;
fail:
    free(keys);
    json_decref(obj);
    return NULL;
}

/* The padded header text for w; *len gets its length (a multiple of 8). Keys appear in the order
 * the Rust safetensors library writes them: "__metadata__" first (its keys sorted), then the
 * tensors in data order, each as {"dtype", "shape", "data_offsets"}; jansson keeps insertion
 * order. */
static bt_status build_header(const bt_st_writer *w, char **out, size_t *len)
{
    bt_status st = BT_OK;
    json_t *root = json_object();
    char *text = NULL, *padded = NULL;
    uint64_t offset = 0;
    *out = NULL;
    if (!root) goto nomem;
    if (json_object_size(w->metadata) > 0 &&
        json_object_set_new(root, "__metadata__", sorted_metadata(w)) != 0)
        goto nomem;
    for (int i = 0; i < w->n; i++) {
        const st_entry *e = &w->entries[i];
        json_t *shape = json_array();
        if (!shape) goto nomem;
        for (int d = 0; d < e->shape.ndim; d++)
            if (json_array_append_new(shape, json_integer(e->shape.dim[d])) != 0) {
                json_decref(shape);
                goto nomem;
            }
        json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", bt_st_dtype_name(e->dtype),
                                  "shape", shape, "data_offsets", (json_int_t)offset,
                                  (json_int_t)(offset + e->nbytes));
        if (!entry || json_object_set_new(root, e->name, entry) != 0) goto nomem;
        offset += e->nbytes;
    }
    text = json_dumps(root, JSON_COMPACT);
    if (!text) goto nomem;
    size_t n = strlen(text);
    size_t padded_len = (n + 7) / 8 * 8;
    padded = malloc(padded_len);
    if (!padded) goto nomem;
    memcpy(padded, text, n);
    memset(padded + n, ' ', padded_len - n);
    *out = padded;
    *len = padded_len;
    goto done;
nomem:
    st = bt_error(BT_ERR_NOMEM, "safetensors: out of memory building the header");
done:
    free(text);
    json_decref(root);
    return st;
}

bt_status bt_st_writer_write(const bt_st_writer *w, const char *path)
{
    bt_status st = BT_OK;
    char *header = NULL;
    size_t header_len = 0;
    bt_atomic_file *f = NULL;
    unsigned char len_le[8];
    if (!w || !path) return bt_error(BT_ERR_INVALID_ARG, "safetensors: NULL argument");
    BT_TRY_GOTO(st, build_header(w, &header, &header_len), fail);
    if (header_len > BT_ST_MAX_HEADER) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: header of %zu bytes exceeds the %llu limit", path,
                      header_len, (unsigned long long)BT_ST_MAX_HEADER);
        goto fail;
    }
    for (int i = 0; i < 8; i++) len_le[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    BT_TRY_GOTO(st, bt_atomic_file_open(path, &f), fail);
    BT_TRY_GOTO(st, bt_atomic_file_write(f, len_le, sizeof len_le), fail);
    BT_TRY_GOTO(st, bt_atomic_file_write(f, header, header_len), fail);
    for (int i = 0; i < w->n; i++)
        BT_TRY_GOTO(st, bt_atomic_file_write(f, w->entries[i].data, (size_t)w->entries[i].nbytes),
                    fail);
    st = bt_atomic_file_commit(f);
    f = NULL;
    if (st != BT_OK) goto fail;
    free(header);
    return BT_OK;
fail:
    bt_atomic_file_abort(f);
    free(header);
    return st;
}

/* ---- reader ---- */

typedef struct st_meta {
    const char *key, *value;
} st_meta;

struct bt_st_file {
    char *path;
    void *map;
    size_t map_size;
    json_t *header;
    bt_st_tensor *tensors;  /* by offset */
    bt_st_tensor **by_name; /* sorted by name */
    int n;
    st_meta *meta;          /* sorted by key */
    int n_meta;
};

void bt_st_close(bt_st_file *f)
{
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    json_decref(f->header);
    free(f->tensors);
    free(f->by_name);
    free(f->meta);
    free(f->path);
    free(f);
}

static int cmp_offset(const void *a, const void *b)
{
    const bt_st_tensor *x = a, *y = b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_name(const void *a, const void *b)
{
    const bt_st_tensor *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int cmp_meta(const void *a, const void *b)
{
    const st_meta *x = a, *y = b;
    return strcmp(x->key, y->key);
}

/* A JSON value that is a non-negative integer. */
static int json_nonneg(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

static bt_status parse_metadata(bt_st_file *f, json_t *obj)
{
    const char *key;
    json_t *v;
    if (!json_is_object(obj))
        return bt_error(BT_ERR_IO, "%s: __metadata__ is not an object", f->path);
    f->meta = calloc(json_object_size(obj) + 1, sizeof *f->meta);
    if (!f->meta) return bt_error(BT_ERR_NOMEM, "%s: out of memory", f->path);
    json_object_foreach(obj, key, v) {
        if (!json_is_string(v))
            return bt_error(BT_ERR_IO, "%s: __metadata__ '%s': value is not a string", f->path,
                            key);
        f->meta[f->n_meta].key = key;
        f->meta[f->n_meta].value = json_string_value(v);
        f->n_meta++;
    }
    qsort(f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_meta);
    return BT_OK;
}

static bt_status parse_entry(bt_st_file *f, const char *name, json_t *entry, uint64_t data_size,
                             bt_st_tensor *t)
{
    const char *p = f->path;
    if (!json_is_object(entry))
        return bt_error(BT_ERR_IO, "%s: tensor '%s': entry is not an object", p, name);
    json_t *jd = json_object_get(entry, "dtype");
    json_t *js = json_object_get(entry, "shape");
    json_t *jo = json_object_get(entry, "data_offsets");
    if (!json_is_string(jd))
        return bt_error(BT_ERR_IO, "%s: tensor '%s': missing or non-string dtype", p, name);
    const st_dtype_info *di = st_dtype_lookup(json_string_value(jd));
    if (!di)
        return bt_error(BT_ERR_IO, "%s: tensor '%s': unknown dtype '%s'", p, name,
                        json_string_value(jd));
    if (!json_is_array(js))
        return bt_error(BT_ERR_IO, "%s: tensor '%s': missing or non-array shape", p, name);
    if (json_array_size(js) > BT_MAX_DIMS)
        return bt_error(BT_ERR_IO, "%s: tensor '%s': %zu dims, baton supports at most %d", p, name,
                        json_array_size(js), BT_MAX_DIMS);
    t->name = name;
    t->st_dtype = di->name;
    t->known = di->known;
    t->dtype = di->dtype;
    t->shape.ndim = (int)json_array_size(js);
    for (int d = 0; d < t->shape.ndim; d++) {
        uint64_t v;
        if (!json_nonneg(json_array_get(js, (size_t)d), &v) || v > (uint64_t)INT64_MAX)
            return bt_error(BT_ERR_IO, "%s: tensor '%s': shape[%d] is not a non-negative integer",
                            p, name, d);
        t->shape.dim[d] = (int64_t)v;
    }
    uint64_t bytes;
    if (shape_bytes(&t->shape, di->size, &t->numel, &bytes) != 0)
        return bt_error(BT_ERR_IO, "%s: tensor '%s': shape size overflows", p, name);
    uint64_t begin, end;
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_nonneg(json_array_get(jo, 0), &begin) || !json_nonneg(json_array_get(jo, 1), &end))
        return bt_error(
            BT_ERR_IO, "%s: tensor '%s': data_offsets is not [begin, end] of non-negative integers",
            p, name);
    if (end < begin)
        return bt_error(BT_ERR_IO, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", p,
                        name, (unsigned long long)begin, (unsigned long long)end);
    if (end - begin != bytes) {
        char buf[128];
        return bt_error(
            BT_ERR_IO,
            "%s: tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape %s of "
            "%s needs %llu",
            p, name, (unsigned long long)begin, (unsigned long long)end,
            (unsigned long long)(end - begin), bt_shape_format(&t->shape, buf, sizeof buf),
            di->name, (unsigned long long)bytes);
    }
    if (end > data_size)
        return bt_error(BT_ERR_IO,
                        "%s: tensor '%s': data_offsets [%llu, %llu] run past the data area of %llu "
                        "bytes (truncated file?)",
                        p, name, (unsigned long long)begin, (unsigned long long)end,
                        (unsigned long long)data_size);
    t->offset = begin;
    t->nbytes = (size_t)bytes;
    return BT_OK;
}

bt_status bt_st_open(const char *path, bt_st_file **out)
{
    bt_status st = BT_OK;
    bt_st_file *f = NULL;
    int fd = -1;
    struct stat sb;
    *out = NULL;
    if (!path) return bt_error(BT_ERR_INVALID_ARG, "safetensors: NULL path");
    f = calloc(1, sizeof *f);
    if (!f || !(f->path = bt_strdup(path))) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        st = bt_error(BT_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = bt_error(BT_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        st = bt_error(BT_ERR_IO, "%s: truncated: %llu bytes, less than the 8-byte header length",
                      path, (unsigned long long)size);
        goto fail;
    }
    f->map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st = bt_error(BT_ERR_IO, "%s: mmap: %s", path, strerror(errno));
        goto fail;
    }
    f->map_size = (size_t)size;
    close(fd);
    fd = -1;

    const unsigned char *bytes = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    if (n > BT_ST_MAX_HEADER) {
        st = bt_error(BT_ERR_IO, "%s: header length %llu exceeds the limit of %llu bytes", path,
                      (unsigned long long)n, (unsigned long long)BT_ST_MAX_HEADER);
        goto fail;
    }
    if (n > size - 8) {
        st =
            bt_error(BT_ERR_IO,
                     "%s: truncated: header length %llu runs past the end of the file (%llu bytes)",
                     path, (unsigned long long)n, (unsigned long long)size);
        goto fail;
    }
    if (n == 0 || bytes[8] != '{') {
        st = bt_error(BT_ERR_IO, "%s: header is not a JSON object (it must start with '{')", path);
        goto fail;
    }
    json_error_t jerr;
    f->header = json_loadb((const char *)bytes + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header) {
        st = bt_error(BT_ERR_IO, "%s: header JSON: %s (at byte %d)", path, jerr.text,
                      jerr.position);
        goto fail;
    }
    if (!json_is_object(f->header)) {
        st = bt_error(BT_ERR_IO, "%s: header is not a JSON object", path);
        goto fail;
    }
    uint64_t data_size = size - 8 - n;
    size_t count = json_object_size(f->header);
    f->tensors = calloc(count + 1, sizeof *f->tensors);
    f->by_name = calloc(count + 1, sizeof *f->by_name);
    if (!f->tensors || !f->by_name) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    const char *key;
    json_t *value;
    json_object_foreach(f->header, key, value) {
        if (strcmp(key, "__metadata__") == 0) {
            BT_TRY_GOTO(st, parse_metadata(f, value), fail);
            continue;
        }
        BT_TRY_GOTO(st, parse_entry(f, key, value, data_size, &f->tensors[f->n]), fail);
        f->n++;
    }
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_offset);
    uint64_t expect = 0;
    for (int i = 0; i < f->n; i++) {
        bt_st_tensor *t = &f->tensors[i];
        if (t->offset < expect) {
            st = bt_error(BT_ERR_IO,
                          "%s: tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' (which "
                          "ends at %llu)",
                          path, t->name, (unsigned long long)t->offset,
                          (unsigned long long)(t->offset + t->nbytes), f->tensors[i - 1].name,
                          (unsigned long long)expect);
            goto fail;
        }
        if (t->offset > expect) {
            st = bt_error(BT_ERR_IO,
                          "%s: tensor '%s': hole in the data area: it begins at %llu but the "
                          "previous tensor ends at %llu",
                          path, t->name, (unsigned long long)t->offset,
                          (unsigned long long)expect);
            goto fail;
        }
        expect = t->offset + t->nbytes;
        t->data = bytes + 8 + n + t->offset;
        f->by_name[i] = t;
    }
    if (expect != data_size) {
        st = bt_error(BT_ERR_IO,
                      "%s: size mismatch: 8 + header %llu + tensor data %llu = %llu bytes, but the "
                      "file has %llu",
                      path, (unsigned long long)n, (unsigned long long)expect,
                      (unsigned long long)(8 + n + expect), (unsigned long long)size);
        goto fail;
    }
    qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    *out = f;
    return BT_OK;
fail:
    if (fd >= 0) close(fd);
    bt_st_close(f);
    return st;
}

const char *bt_st_path(const bt_st_file *f) { return f->path; }

int bt_st_count(const bt_st_file *f) { return f->n; }

const bt_st_tensor *bt_st_at(const bt_st_file *f, int i)
{
    return i >= 0 && i < f->n ? &f->tensors[i] : NULL;
}

const bt_st_tensor *bt_st_find(const bt_st_file *f, const char *name)
{
    bt_st_tensor key;
    const bt_st_tensor *kp = &key;
    key.name = name;
    bt_st_tensor **hit = bsearch(&kp, f->by_name, (size_t)f->n, sizeof *f->by_name, cmp_name);
    return hit ? *hit : NULL;
}

bt_status bt_st_read(const bt_st_file *f, const char *name, bt_dtype dtype, const bt_shape *shape,
                     void *dst, size_t bytes)
{
    char want[128], have[128];
    const bt_st_tensor *t = bt_st_find(f, name);
    if (!t) return bt_error(BT_ERR_IO, "%s: no tensor '%s'", f->path, name);
    if (!t->known || t->dtype != dtype)
        return bt_error(BT_ERR_IO, "%s: tensor '%s': dtype %s, expected %s", f->path, name,
                        t->st_dtype, bt_st_dtype_name(dtype) ? bt_st_dtype_name(dtype) : "?");
    if (shape) {
        int same = shape->ndim == t->shape.ndim;
        for (int d = 0; same && d < shape->ndim; d++) same = shape->dim[d] == t->shape.dim[d];
        if (!same)
            return bt_error(BT_ERR_IO, "%s: tensor '%s': shape %s, expected %s", f->path, name,
                            bt_shape_format(&t->shape, have, sizeof have),
                            bt_shape_format(shape, want, sizeof want));
    }
    if (bytes != t->nbytes)
        return bt_error(BT_ERR_IO, "%s: tensor '%s': %zu bytes (shape %s), destination has %zu",
                        f->path, name, t->nbytes, bt_shape_format(&t->shape, have, sizeof have),
                        bytes);
    if (bytes) memcpy(dst, t->data, bytes);
    return BT_OK;
}

const char *bt_st_metadata(const bt_st_file *f, const char *key)
{
    st_meta k = {key, NULL};
    if (f->n_meta == 0) return NULL;
    st_meta *hit = bsearch(&k, f->meta, (size_t)f->n_meta, sizeof *f->meta, cmp_meta);
    return hit ? hit->value : NULL;
}

int bt_st_metadata_count(const bt_st_file *f) { return f->n_meta; }

void bt_st_metadata_at(const bt_st_file *f, int i, const char **key, const char **value)
{
    *key = f->meta[i].key;
    *value = f->meta[i].value;
}
