/* train/ckpt_source.c: a checkpoint opened for reading, one file or an index and its shards (see
 * ckpt_source.h). Lookups by tensor name go through the index's sorted map (or the file's own
 * table); the tensor counts stay small (two or three per parameter), so the linear walks over
 * the shards are cheap. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/strutil.h"
#include "train/ckpt_source.h"

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

void bt_ckpt_source_close(bt_ckpt_source *s)
{
    if (!s) return;
    bt_st_close(s->single);
    for (int i = 0; s->shards && i < s->index.n_files; i++) bt_st_close(s->shards[i]);
    free(s->shards);
    bt_ckpt_index_free(&s->index);
    free(s->keys);
    free(s->values);
    free(s->path);
    free(s);
}

/* The data position a checkpoint's metadata records (epoch x batches_per_epoch + batch_index, or
 * the step in files older than batches_per_epoch); -1 when unreadable. */
static long long position_of(const char *step, const char *epoch, const char *index, const char *per)
{
    if (per && epoch && index) return atoll(epoch) * atoll(per) + atoll(index);
    return step ? atoll(step) : -1;
}

static long long file_position(const char *path)
{
    bt_st_file *f = NULL;
    if (bt_st_open(path, &f) != BT_OK) return -1;
    long long p = position_of(bt_st_metadata(f, "step"), bt_st_metadata(f, "epoch"), bt_st_metadata(f, "batch_index"),
                              bt_st_metadata(f, "batches_per_epoch"));
    bt_st_close(f);
    return p;
}

static long long index_position(const char *path)
{
    bt_ckpt_index x;
    long long p = -1;
    if (bt_ckpt_index_read(path, &x) == BT_OK)
        p = position_of(bt_ckpt_index_meta(&x, "step"), bt_ckpt_index_meta(&x, "epoch"),
                        bt_ckpt_index_meta(&x, "batch_index"), bt_ckpt_index_meta(&x, "batches_per_epoch"));
    bt_ckpt_index_free(&x);
    return p;
}

bt_status bt_ckpt_source_latest(const char *dir, char **out)
{
    char *single = bt_strfmt("%s/checkpoint.safetensors", dir), *index = bt_strfmt("%s/" BT_CHECKPOINT_INDEX, dir);
    *out = NULL;
    if (!single || !index) {
        free(single);
        free(index);
        return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    }
    struct stat sb;
    int has_single = stat(single, &sb) == 0, has_index = stat(index, &sb) == 0;
    /* both: a directory written by runs of both layouts; the writer points the new one before it
     * removes the old, so after a crash in between, the later position is the newest */
    if (has_single && has_index) {
        if (index_position(index) >= file_position(single)) has_single = 0;
        else has_index = 0;
    }
    if (has_index) *out = index, free(single);
    else if (has_single) *out = single, free(index);
    else free(single), free(index);
    if (*out) return BT_OK;
    /* else a Hugging Face directory's weights: one model.safetensors (its tensors carry the
     * checkpoint's names, which the model file of the directory uses: model/hf_import.c) */
    char *hf = bt_strfmt("%s/model.safetensors", dir), *hf_index = bt_strfmt("%s/model.safetensors.index.json", dir);
    if (!hf || !hf_index) {
        free(hf);
        free(hf_index);
        return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    }
    const int has_hf = stat(hf, &sb) == 0, has_hf_index = stat(hf_index, &sb) == 0;
    free(hf_index);
    if (has_hf) {
        *out = hf;
        return BT_OK;
    }
    free(hf);
    if (has_hf_index)
        return bt_error(BT_ERR_UNSUPPORTED,
                        "%s: a sharded Hugging Face checkpoint (model.safetensors.index.json): baton "
                        "does not read its shards yet",
                        dir);
    return BT_OK;
}

/* Opens every shard of s->index (names relative to the index's directory) and checks the map. */
static bt_status open_shards(bt_ckpt_source *s)
{
    bt_ckpt_index *x = &s->index;
    const char *slash = strrchr(s->path, '/');
    int dir_len = slash ? (int)(slash - s->path) : 0;
    s->shards = calloc((size_t)x->n_files + 1, sizeof *s->shards);
    if (!s->shards) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < x->n_files; i++) {
        char *p = slash ? bt_strfmt("%.*s/%s", dir_len, s->path, x->files[i]) : bt_strdup(x->files[i]);
        if (!p) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        bt_status st = bt_st_open(p, &s->shards[i]);
        free(p);
        if (st != BT_OK) return bt_error_context(st, "%s names shard %s", s->path, x->files[i]);
    }
    /* every mapped tensor in its shard */
    for (int k = 0; k < x->n; k++) {
        int fi = 0;
        while (strcmp(x->files[fi], x->map[k].file) != 0) fi++;
        if (!bt_st_find(s->shards[fi], x->map[k].tensor))
            return bt_error(BT_ERR_IO, "%s: tensor '%s' is mapped to %s, which does not hold it (a partial or "
                            "foreign shard)", s->path, x->map[k].tensor, bt_st_path(s->shards[fi]));
    }
    /* and nothing else in any shard */
    for (int i = 0; i < x->n_files; i++)
        for (int t = 0; t < bt_st_count(s->shards[i]); t++) {
            const char *name = bt_st_at(s->shards[i], t)->name, *mapped = bt_ckpt_index_file_of(x, name);
            if (!mapped)
                return bt_error(BT_ERR_IO, "%s: shard %s holds tensor '%s', which the index does not list", s->path,
                                bt_st_path(s->shards[i]), name);
            if (strcmp(mapped, x->files[i]) != 0)
                return bt_error(BT_ERR_IO, "%s: tensor '%s' is duplicated: in shard %s and in %s, where the index "
                                "maps it", s->path, name, bt_st_path(s->shards[i]), mapped);
        }
    return BT_OK;
}

static bt_status take_metadata(bt_ckpt_source *s)
{
    int n = s->single ? bt_st_metadata_count(s->single) : s->index.n_meta;
    s->keys = calloc((size_t)n + 1, sizeof *s->keys);
    s->values = calloc((size_t)n + 1, sizeof *s->values);
    if (!s->keys || !s->values) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    for (int i = 0; i < n; i++) {
        if (s->single) bt_st_metadata_at(s->single, i, &s->keys[i], &s->values[i]);
        else s->keys[i] = s->index.keys[i], s->values[i] = s->index.values[i];
    }
    s->n_meta = n;
    return BT_OK;
}

bt_status bt_ckpt_source_open(const char *path, bt_ckpt_source **out)
{
    *out = NULL;
    bt_ckpt_source *s = calloc(1, sizeof *s);
    if (!s) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    s->index.total_size = -1;
    bt_status st = BT_OK;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        BT_TRY_GOTO(st, bt_ckpt_source_latest(path, &s->path), fail);
        if (!s->path) {
            st = bt_error(BT_ERR_IO, "%s: no checkpoint in this directory (neither %s nor checkpoint.safetensors)",
                          path, BT_CHECKPOINT_INDEX);
            goto fail;
        }
    } else if (!(s->path = bt_strdup(path))) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto fail;
    }
    if (ends_with(s->path, BT_CKPT_INDEX_SUFFIX)) {
        BT_TRY_GOTO(st, bt_ckpt_index_read(s->path, &s->index), fail);
        BT_TRY_GOTO(st, open_shards(s), fail);
    } else {
        BT_TRY_GOTO(st, bt_st_open(s->path, &s->single), fail);
    }
    BT_TRY_GOTO(st, take_metadata(s), fail);
    *out = s;
    return BT_OK;
fail:
    bt_ckpt_source_close(s);
    return st;
}

int bt_ckpt_source_files(const bt_ckpt_source *s) { return s->single ? 1 : s->index.n_files; }

const bt_st_file *bt_ckpt_source_file(const bt_ckpt_source *s, int i) { return s->single ? s->single : s->shards[i]; }

const bt_st_tensor *bt_ckpt_source_find(const bt_ckpt_source *s, const char *name, const bt_st_file **file)
{
    const bt_st_file *f = s->single;
    if (!f) {
        const char *shard = bt_ckpt_index_file_of(&s->index, name);
        if (!shard) return NULL;
        for (int i = 0; i < s->index.n_files && !f; i++)
            if (strcmp(s->index.files[i], shard) == 0) f = s->shards[i];
    }
    const bt_st_tensor *t = f ? bt_st_find(f, name) : NULL;
    if (t && file) *file = f;
    return t;
}

int bt_ckpt_source_count(const bt_ckpt_source *s)
{
    int n = 0;
    for (int i = 0; i < bt_ckpt_source_files(s); i++) n += bt_st_count(bt_ckpt_source_file(s, i));
    return n;
}

const bt_st_tensor *bt_ckpt_source_at(const bt_ckpt_source *s, int i, const bt_st_file **file)
{
    for (int k = 0; k < bt_ckpt_source_files(s); k++) {
        const bt_st_file *f = bt_ckpt_source_file(s, k);
        if (i < bt_st_count(f)) {
            if (file) *file = f;
            return bt_st_at(f, i);
        }
        i -= bt_st_count(f);
    }
    return NULL;
}

const char *bt_ckpt_source_meta(const bt_ckpt_source *s, const char *key)
{
    for (int i = 0; i < s->n_meta; i++)
        if (strcmp(s->keys[i], key) == 0) return s->values[i];
    return NULL;
}
