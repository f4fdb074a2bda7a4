/* train/checkpoint.c: checkpoints as safetensors (see checkpoint.h). Loading checks the whole
 * file against the graph first and only then writes into the engine, so a rejected file leaves
 * the engine as it was. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

#define FORMAT_TAG "baton-checkpoint-1"

static size_t param_bytes(const bt_engine *e, const bt_param_info *p)
{
    return (size_t)bt_shape_numel(&p->shape) * bt_dtype_size(bt_engine_dtype(e));
}

static bt_status add_meta_i64(bt_st_writer *w, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return bt_st_writer_add_metadata(w, key, buf);
}

static bt_status make_dir(const char *dir)
{
    if (mkdir(dir, 0777) == 0 || errno == EEXIST) return BT_OK;
    return bt_error(BT_ERR_IO, "%s: cannot create the checkpoint directory: %s", dir, strerror(errno));
}

bt_status bt_checkpoint_save(const bt_engine *e, const bt_graph *g, const char *dir,
                             const bt_checkpoint_meta *meta)
{
    bt_status st = BT_OK;
    bt_st_writer *w = NULL;
    int n = bt_graph_num_params(g), slots = bt_engine_optimizer_slots(e);
    void **bufs = calloc((size_t)n * (size_t)(slots + 1) + 1, sizeof *bufs);
    char **names = calloc((size_t)n * (size_t)slots + 1, sizeof *names);
    char *path = NULL;
    if (!bufs || !names) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    BT_TRY_GOTO(st, make_dir(dir), done);
    BT_TRY_GOTO(st, bt_st_writer_create(&w), done);
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        size_t bytes = param_bytes(e, &p);
        for (int s = 0; s <= slots; s++) {
            void *buf = bufs[i * (slots + 1) + s] = malloc(bytes ? bytes : 1);
            if (!buf) {
                st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
                goto done;
            }
            if (s == 0) {
                BT_TRY_GOTO(st, bt_engine_read_param(e, p.name, buf, bytes), done);
                BT_TRY_GOTO(st, bt_st_writer_add(w, p.name, bt_engine_dtype(e), &p.shape, buf), done);
            } else {
                char *name = names[i * slots + s - 1] =
                    malloc(strlen(p.name) + 64);
                if (!name) {
                    st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
                    goto done;
                }
                sprintf(name, "optimizer.%s.%s", p.name, bt_engine_optimizer_slot_name(e, s - 1));
                BT_TRY_GOTO(st, bt_engine_read_state(e, p.name, s - 1, buf, bytes), done);
                BT_TRY_GOTO(st, bt_st_writer_add(w, name, bt_engine_dtype(e), &p.shape, buf), done);
            }
        }
    }
    BT_TRY_GOTO(st, bt_st_writer_add_metadata(w, "format", FORMAT_TAG), done);
    BT_TRY_GOTO(st, bt_st_writer_add_metadata(w, "model", meta->model), done);
    BT_TRY_GOTO(st, add_meta_i64(w, "step", meta->step), done);
    BT_TRY_GOTO(st, add_meta_i64(w, "epoch", meta->epoch), done);
    BT_TRY_GOTO(st, add_meta_i64(w, "batch_index", meta->batch_index), done);
    BT_TRY_GOTO(st, add_meta_i64(w, "seed", (int64_t)meta->seed), done);
    BT_TRY_GOTO(st, add_meta_i64(w, "optimizer_slots", slots), done);
    path = malloc(strlen(dir) + sizeof BT_CHECKPOINT_FILE + 2);
    if (!path) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    sprintf(path, "%s/%s", dir, BT_CHECKPOINT_FILE);
    st = bt_st_writer_write(w, path);
done:
    bt_st_writer_destroy(w);
    for (int i = 0; bufs && i < n * (slots + 1); i++) free(bufs[i]);
    for (int i = 0; names && i < n * slots; i++) free(names[i]);
    free(bufs);
    free(names);
    free(path);
    return st;
}

/* Opens dir/checkpoint.safetensors, or path itself when it is a file. */
static bt_status open_checkpoint(const char *path, bt_st_file **f)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char *file = malloc(strlen(path) + sizeof BT_CHECKPOINT_FILE + 2);
        if (!file) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        sprintf(file, "%s/%s", path, BT_CHECKPOINT_FILE);
        bt_status st = bt_st_open(file, f);
        free(file);
        return st;
    }
    return bt_st_open(path, f);
}

static int shapes_equal(const bt_shape *a, const bt_shape *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dim[i] != b->dim[i]) return 0;
    return 1;
}

static bt_status check_tensor(const bt_st_file *f, const char *name, const bt_shape *want)
{
    const bt_st_tensor *t = bt_st_find(f, name);
    char a[64], b[64];
    if (!t) return bt_error(BT_ERR_IO, "%s: tensor '%s' is missing", bt_st_path(f), name);
    if (!t->known || (t->dtype != BT_F32 && t->dtype != BT_F64))
        return bt_error(BT_ERR_IO, "%s: tensor '%s' has dtype %s (F32 or F64 expected)", bt_st_path(f), name,
                        t->st_dtype);
    if (!shapes_equal(&t->shape, want))
        return bt_error(BT_ERR_IO, "%s: tensor '%s' has shape %s but the model's is %s", bt_st_path(f), name,
                        bt_shape_format(&t->shape, a, sizeof a), bt_shape_format(want, b, sizeof b));
    return BT_OK;
}

/* Copies tensor name into dst in dtype, converting between F32 and F64. */
static bt_status read_converted(const bt_st_file *f, const char *name, bt_dtype dtype, void *dst, size_t n)
{
    const bt_st_tensor *t = bt_st_find(f, name);
    if (t->dtype == dtype) return bt_st_read(f, name, dtype, &t->shape, dst, n * bt_dtype_size(dtype));
    void *tmp = malloc(n * bt_dtype_size(t->dtype) + 1);
    if (!tmp) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    bt_status st = bt_st_read(f, name, t->dtype, &t->shape, tmp, n * bt_dtype_size(t->dtype));
    for (size_t i = 0; st == BT_OK && i < n; i++) {
        if (dtype == BT_F32) ((float *)dst)[i] = (float)((double *)tmp)[i];
        else ((double *)dst)[i] = ((float *)tmp)[i];
    }
    free(tmp);
    return st;
}

static int is_model_tensor(const bt_graph *g, const char *name, int slots, const bt_engine *e)
{
    for (int i = 0; i < bt_graph_num_params(g); i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        if (strcmp(p.name, name) == 0) return 1;
        for (int s = 0; s < slots; s++) {
            char full[512];
            snprintf(full, sizeof full, "optimizer.%s.%s", p.name, bt_engine_optimizer_slot_name(e, s));
            if (strcmp(full, name) == 0) return 1;
        }
    }
    return 0;
}

static bt_status restore(bt_engine *e, const bt_graph *g, const bt_st_file *f, int slots)
{
    int n = bt_graph_num_params(g);
    char full[512];
    /* check everything first */
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        BT_TRY(check_tensor(f, p.name, &p.shape));
        for (int s = 0; s < slots; s++) {
            snprintf(full, sizeof full, "optimizer.%s.%s", p.name, bt_engine_optimizer_slot_name(e, s));
            BT_TRY(check_tensor(f, full, &p.shape));
        }
    }
    for (int i = 0; i < bt_st_count(f); i++) {
        const char *name = bt_st_at(f, i)->name;
        if (!is_model_tensor(g, name, slots, e) && (slots > 0 || strncmp(name, "optimizer.", 10) != 0))
            return bt_error(BT_ERR_IO, "%s: tensor '%s' matches no parameter of the model", bt_st_path(f), name);
    }
    /* then write */
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        size_t numel = (size_t)bt_shape_numel(&p.shape), bytes = param_bytes(e, &p);
        void *buf = malloc(bytes + 1);
        if (!buf) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        bt_status st = read_converted(f, p.name, bt_engine_dtype(e), buf, numel);
        if (st == BT_OK) st = bt_engine_write_param(e, p.name, buf, bytes);
        for (int s = 0; s < slots && st == BT_OK; s++) {
            snprintf(full, sizeof full, "optimizer.%s.%s", p.name, bt_engine_optimizer_slot_name(e, s));
            st = read_converted(f, full, bt_engine_dtype(e), buf, numel);
            if (st == BT_OK) st = bt_engine_write_state(e, p.name, s, buf, bytes);
        }
        free(buf);
        BT_TRY(st);
    }
    return BT_OK;
}

static bt_status meta_i64(const bt_st_file *f, const char *key, int64_t *out)
{
    const char *v = bt_st_metadata(f, key);
    char *end = NULL;
    if (!v) return bt_error(BT_ERR_IO, "%s: metadata '%s' is missing", bt_st_path(f), key);
    long long x = strtoll(v, &end, 10);
    if (*v == '\0' || *end || x < 0)
        return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%s' is not a count", bt_st_path(f), key, v);
    *out = x;
    return BT_OK;
}

bt_status bt_checkpoint_resume(bt_engine *e, const bt_graph *g, const char *path, bt_checkpoint_meta *meta)
{
    bt_st_file *f = NULL;
    BT_TRY(open_checkpoint(path, &f));
    bt_status st = BT_OK;
    int64_t seed = 0, slots = 0;
    const char *tag = bt_st_metadata(f, "format");
    memset(meta, 0, sizeof *meta);
    if (!tag || strcmp(tag, FORMAT_TAG) != 0) {
        st = bt_error(BT_ERR_IO, "%s: not a baton checkpoint (metadata format is '%s', expected '%s')",
                      bt_st_path(f), tag ? tag : "(none)", FORMAT_TAG);
        goto done;
    }
    BT_TRY_GOTO(st, meta_i64(f, "step", &meta->step), done);
    BT_TRY_GOTO(st, meta_i64(f, "epoch", &meta->epoch), done);
    BT_TRY_GOTO(st, meta_i64(f, "batch_index", &meta->batch_index), done);
    BT_TRY_GOTO(st, meta_i64(f, "seed", &seed), done);
    BT_TRY_GOTO(st, meta_i64(f, "optimizer_slots", &slots), done);
    meta->seed = (uint64_t)seed;
    snprintf(meta->model, sizeof meta->model, "%s", bt_st_metadata(f, "model") ? bt_st_metadata(f, "model") : "");
    if (slots != bt_engine_optimizer_slots(e)) {
        st = bt_error(BT_ERR_IO, "%s: saved with %lld optimizer state tensors per parameter, but this "
                      "optimizer keeps %d (was the optimizer changed?)",
                      bt_st_path(f), (long long)slots, bt_engine_optimizer_slots(e));
        goto done;
    }
    BT_TRY_GOTO(st, restore(e, g, f, (int)slots), done);
    st = bt_engine_set_step(e, meta->step);
done:
    bt_st_close(f);
    return st;
}

bt_status bt_checkpoint_load_weights(bt_engine *e, const bt_graph *g, const char *path)
{
    bt_st_file *f = NULL;
    BT_TRY(bt_st_open(path, &f));
    bt_status st = restore(e, g, f, 0);
    bt_st_close(f);
    return st;
}
