/* train/checkpoint.c: checkpoints as safetensors (see checkpoint.h): writing one file, or one
 * stage's shard (a file in the same form, holding that stage's tensors; the sharded writer around
 * it is checkpoint_shards.c), and the checks of the metadata and checksums every reader makes
 * (the loading itself is checkpoint_load.c). The format tag stays "baton-checkpoint-1": the
 * checksum, batches_per_epoch, the records a resume checks (graph, loss_scale: checkpoint.h) and
 * the sharded layout are additions that older readers ignore or cannot open (an index is not
 * safetensors). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/strutil.h"
#include "graph/describe.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/ckpt_source.h"

#define FORMAT_TAG "baton-checkpoint-1"
#define CRC_PREFIX "crc32c."
#define META_CRC_KEY CRC_PREFIX "__metadata__"
#define MAX_OPTIMIZER_SLOTS 64
#define GRAPH_KEY "graph"
#define LOSS_SCALE_KEY "loss_scale"
#define LOSS_SCALE_CLEAN_KEY "loss_scale_clean_steps"

static size_t param_bytes(const bt_engine *e, const bt_param_info *p)
{
    return (size_t)bt_shape_numel(&p->shape) * bt_dtype_size(bt_engine_dtype(e));
}

/* ---- metadata pairs and their checksum ---- */

typedef struct meta_pair {
    char *key, *value;
} meta_pair;

typedef struct meta_list {
    meta_pair *pairs;
    int n, cap;
} meta_list;

/* Appends (key, value), taking both (malloc'ed; NULL means allocation failed). */
static bt_status meta_add(meta_list *l, char *key, char *value)
{
    if (key && value && l->n == l->cap) {
        meta_pair *grown = realloc(l->pairs, sizeof *l->pairs * (size_t)(l->cap * 2 + 16));
        if (grown) {
            l->pairs = grown;
            l->cap = l->cap * 2 + 16;
        }
    }
    if (!key || !value || l->n == l->cap) {
        free(key);
        free(value);
        return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    }
    l->pairs[l->n++] = (meta_pair){key, value};
    return BT_OK;
}

static void meta_free(meta_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->pairs[i].key), free(l->pairs[i].value);
    free(l->pairs);
}

static int cmp_pair(const void *a, const void *b)
{
    return strcmp(((const meta_pair *)a)->key, ((const meta_pair *)b)->key);
}

static uint32_t crc_pair(uint32_t crc, const char *key, const char *value)
{
    crc = bt_crc32c(crc, key, strlen(key) + 1);
    return bt_crc32c(crc, value, strlen(value) + 1);
}

static char *crc_text(uint32_t crc) { return bt_strfmt("%08" PRIx32, crc); }

/* What a resume must match beyond the training state (checkpoint.h, bt_checkpoint_records):
 * the graph's description and f16's loss scale, appended to ml. */
static bt_status add_record_pairs(meta_list *ml, const bt_engine *e, const bt_graph *g)
{
    char *graph = NULL;
    BT_TRY(bt_graph_describe(g, &graph));
    BT_TRY(meta_add(ml, bt_strdup(GRAPH_KEY), graph));
    double scale;
    int64_t clean;
    if (!bt_engine_loss_scale(e, &scale, &clean)) return BT_OK;
    BT_TRY(meta_add(ml, bt_strdup(LOSS_SCALE_KEY), bt_strfmt("%.17g", scale)));
    return meta_add(ml, bt_strdup(LOSS_SCALE_CLEAN_KEY), bt_strfmt("%" PRId64, clean));
}

/* The training state's metadata pairs (format, model, step, ...) and the records, appended to ml. */
static bt_status add_state_pairs(meta_list *ml, const bt_engine *e, const bt_graph *g, const bt_checkpoint_meta *meta,
                                 int slots)
{
    BT_TRY(add_record_pairs(ml, e, g));
    BT_TRY(meta_add(ml, bt_strdup("format"), bt_strdup(FORMAT_TAG)));
    BT_TRY(meta_add(ml, bt_strdup("model"), bt_strdup(meta->model)));
    BT_TRY(meta_add(ml, bt_strdup("step"), bt_strfmt("%" PRId64, meta->step)));
    BT_TRY(meta_add(ml, bt_strdup("epoch"), bt_strfmt("%" PRId64, meta->epoch)));
    BT_TRY(meta_add(ml, bt_strdup("batch_index"), bt_strfmt("%" PRId64, meta->batch_index)));
    if (meta->batches_per_epoch > 0)
        BT_TRY(meta_add(ml, bt_strdup("batches_per_epoch"), bt_strfmt("%" PRId64, meta->batches_per_epoch)));
    if (meta->batch > 0) BT_TRY(meta_add(ml, bt_strdup("batch"), bt_strfmt("%" PRId64, meta->batch)));
    BT_TRY(meta_add(ml, bt_strdup("seed"), bt_strfmt("%" PRIu64, meta->seed)));
    return meta_add(ml, bt_strdup("optimizer_slots"), bt_strfmt("%d", slots));
}

/* Sorts ml and appends the checksum pair of everything in it. */
static bt_status seal_pairs(meta_list *ml)
{
    qsort(ml->pairs, (size_t)ml->n, sizeof *ml->pairs, cmp_pair);
    uint32_t crc = 0;
    for (int i = 0; i < ml->n; i++) crc = crc_pair(crc, ml->pairs[i].key, ml->pairs[i].value);
    return meta_add(ml, bt_strdup(META_CRC_KEY), crc_text(crc));
}

bt_status bt_checkpoint_index_pairs(const bt_engine *e, const bt_graph *g, const bt_checkpoint_meta *meta, int *n,
                                    char ***keys, char ***values)
{
    meta_list ml = {0};
    *n = 0;
    *keys = *values = NULL;
    bt_status st = add_state_pairs(&ml, e, g, meta, bt_engine_optimizer_slots(e));
    if (st == BT_OK) st = seal_pairs(&ml);
    if (st == BT_OK) {
        *keys = calloc((size_t)ml.n + 1, sizeof **keys);
        *values = calloc((size_t)ml.n + 1, sizeof **values);
        if (!*keys || !*values) st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    }
    if (st != BT_OK) {
        free(*keys);
        free(*values);
        *keys = *values = NULL;
        meta_free(&ml);
        return st;
    }
    for (int i = 0; i < ml.n; i++) (*keys)[i] = ml.pairs[i].key, (*values)[i] = ml.pairs[i].value;
    *n = ml.n;
    free(ml.pairs);
    return BT_OK;
}

int bt_checkpoint_param_in_shard(const bt_engine *e, const bt_param_info *p, int stage)
{
    int s;
    if (p->tied_to) return 0; /* stored once, under its source's name */
    return stage < 0 || (bt_engine_param_stage(e, p->name, &s) == BT_OK && s == stage);
}

static bt_status write_tensors(const bt_engine *e, const bt_graph *g, const char *path, const bt_checkpoint_meta *meta,
                               int stage)
{
    bt_status st = BT_OK;
    bt_st_writer *w = NULL;
    meta_list ml = {0};
    int n = bt_graph_num_params(g), slots = bt_engine_optimizer_slots(e);
    void **bufs = calloc((size_t)n * (size_t)(slots + 1) + 1, sizeof *bufs);
    char **names = calloc((size_t)n * (size_t)slots + 1, sizeof *names);
    if (!bufs || !names) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    BT_TRY_GOTO(st, bt_st_writer_create(&w), done);
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        if (!bt_checkpoint_param_in_shard(e, &p, stage)) continue;
        size_t bytes = param_bytes(e, &p);
        for (int s = 0; s <= slots; s++) {
            void *buf = bufs[i * (slots + 1) + s] = malloc(bytes ? bytes : 1);
            const char *tensor = p.name;
            if (!buf) {
                st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
                goto done;
            }
            if (s == 0) {
                BT_TRY_GOTO(st, bt_engine_read_param(e, p.name, buf, bytes), done);
            } else {
                char *name = names[i * slots + s - 1] =
                    bt_strfmt("optimizer.%s.%s", p.name, bt_engine_optimizer_slot_name(e, s - 1));
                if (!name) {
                    st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
                    goto done;
                }
                BT_TRY_GOTO(st, bt_engine_read_state(e, p.name, s - 1, buf, bytes), done);
                tensor = name;
            }
            BT_TRY_GOTO(st, bt_st_writer_add(w, tensor, bt_engine_dtype(e), &p.shape, buf), done);
            BT_TRY_GOTO(st, meta_add(&ml, bt_strfmt(CRC_PREFIX "%s", tensor), crc_text(bt_crc32c(0, buf, bytes))),
                        done);
        }
    }
    BT_TRY_GOTO(st, add_state_pairs(&ml, e, g, meta, slots), done);
    BT_TRY_GOTO(st, seal_pairs(&ml), done);
    for (int i = 0; i < ml.n; i++)
        BT_TRY_GOTO(st, bt_st_writer_add_metadata(w, ml.pairs[i].key, ml.pairs[i].value), done);
    st = bt_st_writer_write(w, path);
done:
    bt_st_writer_destroy(w);
    meta_free(&ml);
    for (int i = 0; bufs && i < n * (slots + 1); i++) free(bufs[i]);
    for (int i = 0; names && i < n * slots; i++) free(names[i]);
    free(bufs);
    free(names);
    return st;
}

bt_status bt_checkpoint_write_file(const bt_engine *e, const bt_graph *g, const char *path,
                                   const bt_checkpoint_meta *meta)
{
    return write_tensors(e, g, path, meta, -1);
}

bt_status bt_checkpoint_write_shard(const bt_engine *e, const bt_graph *g, const char *path,
                                    const bt_checkpoint_meta *meta, int stage)
{
    return write_tensors(e, g, path, meta, stage);
}

/* The metadata of one file, or of a checkpoint (its file's, or its index's): what the checks
 * below read. */
typedef struct meta_view {
    const bt_st_file *f;
    const bt_ckpt_source *src;
} meta_view;

static const char *mv_path(const meta_view *v) { return v->f ? bt_st_path(v->f) : v->src->path; }
static int mv_count(const meta_view *v) { return v->f ? bt_st_metadata_count(v->f) : v->src->n_meta; }
static const char *mv_get(const meta_view *v, const char *key)
{
    return v->f ? bt_st_metadata(v->f, key) : bt_ckpt_source_meta(v->src, key);
}
static void mv_at(const meta_view *v, int i, const char **key, const char **value)
{
    if (v->f) bt_st_metadata_at(v->f, i, key, value);
    else *key = v->src->keys[i], *value = v->src->values[i];
}

/* A decimal count: digits only (no sign, no spaces), at most INT64_MAX. */
static bt_status meta_count(const meta_view *f, const char *key, int optional, uint64_t max, uint64_t *out)
{
    const char *v = mv_get(f, key);
    uint64_t x = 0;
    *out = 0;
    if (!v) return optional ? BT_OK : bt_error(BT_ERR_IO, "%s: metadata '%s' is missing", mv_path(f), key);
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (uint64_t)(*c - '0'), &x) ||
            x > max)
            return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a count from 0 to %llu", mv_path(f), key,
                            v, (unsigned long long)max);
    }
    if (!*v) return bt_error(BT_ERR_IO, "%s: metadata '%s' is empty", mv_path(f), key);
    *out = x;
    return BT_OK;
}

/* 1 when the file carries checksums (any "crc32c." key). */
static int has_checksums(const meta_view *f)
{
    for (int i = 0; i < mv_count(f); i++) {
        const char *key, *value;
        mv_at(f, i, &key, &value);
        if (strncmp(key, CRC_PREFIX, strlen(CRC_PREFIX)) == 0) return 1;
    }
    return 0;
}

/* The stored checksum under key, which must be eight lowercase hex digits. */
static bt_status stored_crc(const meta_view *f, const char *key, const char *what, uint32_t *out)
{
    const char *v = mv_get(f, key);
    uint32_t x = 0;
    if (!v)
        return bt_error(BT_ERR_IO, "%s: %s has no checksum ('%s' is missing) though the file has others",
                        mv_path(f), what, key);
    for (int i = 0; i < 8; i++) {
        char c = v[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a CRC-32C (8 hex digits)", mv_path(f), key, v);
        x = x << 4 | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (v[8]) return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a CRC-32C (8 hex digits)", mv_path(f), key, v);
    *out = x;
    return BT_OK;
}

static bt_status verify_meta_checksum(const meta_view *f)
{
    if (!has_checksums(f)) return BT_OK;
    uint32_t want, crc = 0;
    BT_TRY(stored_crc(f, META_CRC_KEY, "the metadata", &want));
    for (int i = 0; i < mv_count(f); i++) { /* sorted by key */
        const char *key, *value;
        mv_at(f, i, &key, &value);
        if (strcmp(key, META_CRC_KEY) != 0) crc = crc_pair(crc, key, value);
    }
    if (crc != want)
        return bt_error(BT_ERR_IO, "%s: the metadata is corrupt (its CRC-32C is %08" PRIx32 ", the file records %08" PRIx32 ")",
                        mv_path(f), crc, want);
    return BT_OK;
}

bt_status bt_checkpoint_verify_tensors(const bt_st_file *f)
{
    meta_view v = {.f = f};
    if (!has_checksums(&v)) return BT_OK;
    BT_TRY(verify_meta_checksum(&v));
    for (int i = 0; i < bt_st_count(f); i++) {
        const bt_st_tensor *t = bt_st_at(f, i);
        char *key = bt_strfmt(CRC_PREFIX "%s", t->name), what[160];
        uint32_t want;
        if (!key) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        snprintf(what, sizeof what, "tensor '%.100s'", t->name);
        bt_status st = stored_crc(&v, key, what, &want);
        free(key);
        BT_TRY(st);
        uint32_t crc = bt_crc32c(0, t->data, t->nbytes);
        if (crc != want)
            return bt_error(BT_ERR_IO, "%s: tensor '%s' is corrupt: its data has CRC-32C %08" PRIx32 " but the file records %08" PRIx32,
                            bt_st_path(f), t->name, crc, want);
    }
    for (int i = 0; i < bt_st_metadata_count(f); i++) {
        const char *key, *value;
        bt_st_metadata_at(f, i, &key, &value);
        if (strncmp(key, CRC_PREFIX, strlen(CRC_PREFIX)) == 0 && strcmp(key, META_CRC_KEY) != 0 &&
            !bt_st_find(f, key + strlen(CRC_PREFIX)))
            return bt_error(BT_ERR_IO, "%s: metadata '%.100s' is the checksum of a tensor the file does not have",
                            bt_st_path(f), key);
    }
    return BT_OK;
}

/* The records (checkpoint.h): the graph's description as it is; the loss scale a number in
 * [1, 2^64] written as %.17g writes it, with its clean-step count, both or neither. */
static bt_status parse_records(const meta_view *f, bt_checkpoint_records *rec)
{
    memset(rec, 0, sizeof *rec);
    rec->graph = mv_get(f, GRAPH_KEY);
    const char *scale = mv_get(f, LOSS_SCALE_KEY), *clean = mv_get(f, LOSS_SCALE_CLEAN_KEY);
    if (!scale && !clean) return BT_OK;
    if (!scale || !clean)
        return bt_error(BT_ERR_IO, "%s: metadata '%s' is missing beside '%s'", mv_path(f),
                        scale ? LOSS_SCALE_CLEAN_KEY : LOSS_SCALE_KEY, scale ? LOSS_SCALE_KEY : LOSS_SCALE_CLEAN_KEY);
    char *end = NULL;
    const double x = strtod(scale, &end);
    if (end == scale || *end || !(x >= 1 && x <= 0x1p64) || scale[0] == ' ' || scale[0] == '+')
        return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a loss scale (a number from 1 to 2^64)",
                        mv_path(f), LOSS_SCALE_KEY, scale);
    uint64_t steps;
    BT_TRY(meta_count(f, LOSS_SCALE_CLEAN_KEY, 0, INT64_MAX, &steps));
    rec->has_loss_scale = 1;
    rec->loss_scale = x;
    rec->loss_scale_clean_steps = (int64_t)steps;
    return BT_OK;
}

bt_status bt_checkpoint_parse_records(const bt_ckpt_source *src, bt_checkpoint_records *rec)
{
    meta_view v = {.src = src};
    return parse_records(&v, rec);
}

static bt_status parse_meta(const meta_view *f, bt_checkpoint_meta *meta)
{
    const char *tag = mv_get(f, "format"), *model = mv_get(f, "model");
    uint64_t step, epoch, index, per_epoch, seed, slots, batch;
    memset(meta, 0, sizeof *meta);
    if (!tag || strcmp(tag, FORMAT_TAG) != 0)
        return bt_error(BT_ERR_IO, "%s: not a baton checkpoint (metadata format is '%.40s', expected '%s')",
                        mv_path(f), tag ? tag : "(none)", FORMAT_TAG);
    BT_TRY(verify_meta_checksum(f));
    BT_TRY(meta_count(f, "step", 0, INT64_MAX, &step));
    BT_TRY(meta_count(f, "epoch", 0, INT64_MAX, &epoch));
    BT_TRY(meta_count(f, "batch_index", 0, INT64_MAX, &index));
    BT_TRY(meta_count(f, "batches_per_epoch", 1, INT64_MAX, &per_epoch));
    BT_TRY(meta_count(f, "batch", 1, INT64_MAX, &batch));
    BT_TRY(meta_count(f, "seed", 0, UINT64_MAX, &seed));
    BT_TRY(meta_count(f, "optimizer_slots", 0, MAX_OPTIMIZER_SLOTS, &slots));
    if (model && strlen(model) >= sizeof meta->model)
        return bt_error(BT_ERR_IO, "%s: metadata 'model' is longer than %d bytes", mv_path(f), (int)sizeof meta->model - 1);
    if (mv_get(f, "batches_per_epoch")) {
        uint64_t position;
        if (per_epoch == 0)
            return bt_error(BT_ERR_IO, "%s: metadata 'batches_per_epoch' is 0", mv_path(f));
        if (index >= per_epoch)
            return bt_error(BT_ERR_IO, "%s: inconsistent metadata: batch_index %llu is past an epoch of %llu batches",
                            mv_path(f), (unsigned long long)index, (unsigned long long)per_epoch);
        if (__builtin_mul_overflow(epoch, per_epoch, &position) || __builtin_add_overflow(position, index, &position) ||
            position > INT64_MAX)
            return bt_error(BT_ERR_IO, "%s: inconsistent metadata: epoch %llu of %llu batches is past any run",
                            mv_path(f), (unsigned long long)epoch, (unsigned long long)per_epoch);
        if (step > position)
            return bt_error(BT_ERR_IO, "%s: inconsistent metadata: step %llu is past its data position (epoch %llu, "
                            "batch %llu of %llu), though every step reads one batch",
                            mv_path(f), (unsigned long long)step, (unsigned long long)epoch,
                            (unsigned long long)index, (unsigned long long)per_epoch);
    }
    bt_checkpoint_records rec;
    BT_TRY(parse_records(f, &rec));
    meta->step = (int64_t)step;
    meta->epoch = (int64_t)epoch;
    meta->batch_index = (int64_t)index;
    meta->batches_per_epoch = (int64_t)per_epoch;
    meta->batch = (int64_t)batch;
    meta->seed = seed;
    snprintf(meta->model, sizeof meta->model, "%s", model ? model : "");
    return BT_OK;
}

bt_status bt_checkpoint_parse_meta(const bt_st_file *f, bt_checkpoint_meta *meta)
{
    meta_view v = {.f = f};
    return parse_meta(&v, meta);
}

/* The checks of a whole checkpoint: its metadata; every file's checksums; and for a sharded one,
 * each shard's training state equal to the index's (a shard left from another checkpoint is
 * refused, naming it). */
bt_status bt_checkpoint_verify_source(const bt_ckpt_source *src, bt_checkpoint_meta *meta)
{
    meta_view v = {.src = src};
    BT_TRY(parse_meta(&v, meta));
    for (int i = 0; i < bt_ckpt_source_files(src); i++) {
        const bt_st_file *f = bt_ckpt_source_file(src, i);
        BT_TRY(bt_checkpoint_verify_tensors(f));
        if (src->single) continue;
        static const char *const same[] = {"format", "model", "step", "epoch", "batch_index", "batches_per_epoch",
                                           "batch", "seed", "optimizer_slots", GRAPH_KEY, LOSS_SCALE_KEY,
                                           LOSS_SCALE_CLEAN_KEY};
        for (size_t k = 0; k < sizeof same / sizeof *same; k++) {
            const char *a = bt_ckpt_source_meta(src, same[k]), *b = bt_st_metadata(f, same[k]);
            if ((a || b) && (!a || !b || strcmp(a, b) != 0))
                return bt_error(BT_ERR_IO, "%s: shard %s belongs to another checkpoint (its %s is '%.40s', the "
                                "index's '%.40s')", src->path, bt_st_path(f), same[k], b ? b : "(none)",
                                a ? a : "(none)");
        }
    }
    return BT_OK;
}

bt_status bt_checkpoint_parse_source_meta(const bt_ckpt_source *src, bt_checkpoint_meta *meta)
{
    meta_view v = {.src = src};
    return parse_meta(&v, meta);
}

bt_status bt_checkpoint_read_meta(const char *path, bt_checkpoint_meta *meta)
{
    bt_ckpt_source *src = NULL;
    memset(meta, 0, sizeof *meta);
    BT_TRY(bt_ckpt_source_open(path, &src));
    bt_status st = bt_checkpoint_parse_source_meta(src, meta);
    bt_ckpt_source_close(src);
    return st;
}

