/* train/ckpt_index.c: reading and writing the index of a sharded checkpoint (see ckpt_index.h),
 * with jansson. The reader copies everything out of the JSON tree and sorts it, so lookups are
 * binary searches and the tree is freed before returning. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"
#include "train/ckpt_index.h"

void bt_ckpt_index_free(bt_ckpt_index *x)
{
    if (!x) return;
    for (int i = 0; i < x->n_meta; i++) free(x->keys[i]), free(x->values[i]);
    for (int i = 0; i < x->n; i++) free(x->map[i].tensor), free(x->map[i].file);
    for (int i = 0; i < x->n_files; i++) free(x->files[i]);
    free(x->keys);
    free(x->values);
    free(x->map);
    free(x->files);
    free(x->path);
    memset(x, 0, sizeof *x);
    x->total_size = -1;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const bt_ckpt_index_entry *)a)->tensor, ((const bt_ckpt_index_entry *)b)->tensor);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A shard name must stay inside the index's directory. */
static int plain_file_name(const char *s)
{
    return s[0] && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static bt_status parse_metadata(const char *path, json_t *meta, bt_ckpt_index *x)
{
    if (!json_is_object(meta)) return bt_error(BT_ERR_IO, "%s: \"metadata\" is not an object", path);
    size_t n = json_object_size(meta);
    x->keys = calloc(n + 1, sizeof *x->keys);
    x->values = calloc(n + 1, sizeof *x->values);
    if (!x->keys || !x->values) return bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(meta, key, v) {
        if (strcmp(key, "total_size") == 0) {
            if (!json_is_integer(v) || json_integer_value(v) < 0)
                return bt_error(BT_ERR_IO, "%s: metadata \"total_size\" is not a byte count", path);
            x->total_size = json_integer_value(v);
            continue;
        }
        if (!json_is_string(v)) continue; /* another writer's addition: baton reads only strings */
        x->keys[x->n_meta] = bt_strdup(key);
        x->values[x->n_meta] = bt_strdup(json_string_value(v));
        if (!x->keys[x->n_meta] || !x->values[x->n_meta]) {
            free(x->keys[x->n_meta]);
            free(x->values[x->n_meta]);
            return bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
        }
        x->n_meta++;
    }
    /* sort the pairs by key (keys are unique: duplicates were refused) */
    for (int i = 1; i < x->n_meta; i++)
        for (int j = i; j > 0 && strcmp(x->keys[j - 1], x->keys[j]) > 0; j--) {
            char *k = x->keys[j], *val = x->values[j];
            x->keys[j] = x->keys[j - 1], x->values[j] = x->values[j - 1];
            x->keys[j - 1] = k, x->values[j - 1] = val;
        }
    return BT_OK;
}

static bt_status parse_weight_map(const char *path, json_t *wm, bt_ckpt_index *x)
{
    if (!json_is_object(wm)) return bt_error(BT_ERR_IO, "%s: \"weight_map\" is not an object", path);
    size_t n = json_object_size(wm);
    x->map = calloc(n + 1, sizeof *x->map);
    x->files = calloc(n + 1, sizeof *x->files);
    if (!x->map || !x->files) return bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!key[0]) return bt_error(BT_ERR_IO, "%s: the weight map has a tensor with an empty name", path);
        if (!json_is_string(v))
            return bt_error(BT_ERR_IO, "%s: the weight map's entry for tensor '%s' is not a file name", path, key);
        const char *file = json_string_value(v);
        if (!plain_file_name(file))
            return bt_error(BT_ERR_IO,
                            "%s: tensor '%s' is mapped to '%.200s', which is not a file name beside the index", path,
                            key, file);
        x->map[x->n].tensor = bt_strdup(key);
        x->map[x->n].file = bt_strdup(file);
        if (!x->map[x->n].tensor || !x->map[x->n].file) {
            free(x->map[x->n].tensor);
            free(x->map[x->n].file);
            return bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
        }
        x->n++;
    }
    qsort(x->map, (size_t)x->n, sizeof *x->map, cmp_entry);
    for (int i = 0; i < x->n; i++) {
        const char *f = x->map[i].file;
        int seen = 0;
        for (int k = 0; k < x->n_files && !seen; k++) seen = strcmp(x->files[k], f) == 0;
        if (seen) continue;
        if (!(x->files[x->n_files] = bt_strdup(f))) return bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
        x->n_files++;
    }
    qsort(x->files, (size_t)x->n_files, sizeof *x->files, cmp_str);
    return BT_OK;
}

bt_status bt_ckpt_index_parse(const char *path, const char *json, size_t len, bt_ckpt_index *x)
{
    memset(x, 0, sizeof *x);
    x->total_size = -1;
    if (!(x->path = bt_strdup(path))) return bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return bt_error(BT_ERR_IO, "%s:%d:%d: not a checkpoint index: %s", path, jerr.line, jerr.column, jerr.text);
    bt_status st = BT_OK;
    if (!json_is_object(root)) {
        st = bt_error(BT_ERR_IO, "%s: not a checkpoint index (the JSON is not an object)", path);
        goto done;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "metadata") != 0 && strcmp(key, "weight_map") != 0) {
            st = bt_error(BT_ERR_IO, "%s: unknown key \"%.100s\" (an index has \"metadata\" and \"weight_map\")", path,
                          key);
            goto done;
        }
    }
    json_t *wm = json_object_get(root, "weight_map"), *meta = json_object_get(root, "metadata");
    if (!wm) {
        st = bt_error(BT_ERR_IO, "%s: not a checkpoint index (no \"weight_map\")", path);
        goto done;
    }
    if (meta) BT_TRY_GOTO(st, parse_metadata(path, meta, x), done);
    BT_TRY_GOTO(st, parse_weight_map(path, wm, x), done);
done:
    json_decref(root);
    return st;
}

bt_status bt_ckpt_index_read(const char *path, bt_ckpt_index *out)
{
    memset(out, 0, sizeof *out);
    out->total_size = -1;
    FILE *f = fopen(path, "rb");
    if (!f) return bt_error(BT_ERR_IO, "%s: cannot open the checkpoint index: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    bt_status st = BT_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= ((size_t)256 << 20)) {
                st = bt_error(BT_ERR_IO, "%s: the checkpoint index is larger than 256 MiB", path);
                break;
            }
            char *grown = realloc(buf, cap = cap * 2 + 65536);
            if (!grown) {
                st = bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
                break;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) st = bt_error(BT_ERR_IO, "%s: cannot read the checkpoint index", path);
            break;
        }
    }
    fclose(f);
    if (st == BT_OK) st = bt_ckpt_index_parse(path, buf, len, out);
    free(buf);
    return st;
}

const char *bt_ckpt_index_file_of(const bt_ckpt_index *x, const char *tensor)
{
    bt_ckpt_index_entry key = {.tensor = (char *)tensor};
    const bt_ckpt_index_entry *e = x->n ? bsearch(&key, x->map, (size_t)x->n, sizeof *x->map, cmp_entry) : NULL;
    return e ? e->file : NULL;
}

const char *bt_ckpt_index_meta(const bt_ckpt_index *x, const char *key)
{
    for (int i = 0; i < x->n_meta; i++)
        if (strcmp(x->keys[i], key) == 0) return x->values[i];
    return NULL;
}

bt_status bt_ckpt_index_write(const char *path, int64_t total_size, int n_meta, const char *const *keys,
                              const char *const *values, int n, const char *const *tensors,
                              const char *const *files)
{
    bt_status st = BT_OK;
    char *text = NULL;
    bt_atomic_file *af = NULL;
    json_t *root = json_object(), *meta = json_object(), *wm = json_object();
    if (!root || !meta || !wm || json_object_set(root, "metadata", meta) || json_object_set(root, "weight_map", wm) ||
        json_object_set_new(meta, "total_size", json_integer(total_size))) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
        goto done;
    }
    for (int i = 0; i < n_meta; i++)
        if (json_object_set_new(meta, keys[i], json_string(values[i]))) {
            st = bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory (or metadata '%s' is not UTF-8)", keys[i]);
            goto done;
        }
    for (int i = 0; i < n; i++) {
        if (!plain_file_name(files[i])) {
            st = bt_error(BT_ERR_INVALID_ARG, "checkpoint index: shard '%s' is not a plain file name", files[i]);
            goto done;
        }
        if (json_object_get(wm, tensors[i])) {
            st = bt_error(BT_ERR_INVALID_ARG, "checkpoint index: tensor '%s' is listed twice", tensors[i]);
            goto done;
        }
        if (json_object_set_new(wm, tensors[i], json_string(files[i]))) {
            st = bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
            goto done;
        }
    }
    text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint index: out of memory");
        goto done;
    }
    BT_TRY_GOTO(st, bt_atomic_file_open(path, &af), done);
    BT_TRY_GOTO(st, bt_atomic_file_write(af, text, strlen(text)), done);
    BT_TRY_GOTO(st, bt_atomic_file_write(af, "\n", 1), done);
    st = bt_atomic_file_commit(af);
    af = NULL;
done:
    bt_atomic_file_abort(af);
    free(text);
    json_decref(meta);
    json_decref(wm);
    json_decref(root);
    return st;
}
