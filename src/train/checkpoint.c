/* train/checkpoint.c: checkpoints as safetensors (see checkpoint.h). Loading checks the whole
 * file (checksums, metadata, then the tensors against the graph) first and only then writes into
 * the engine, so a rejected file leaves the engine as it was. The format tag stays
 * "baton-checkpoint-1": the checksum and batches_per_epoch keys are additions that older readers
 * ignore. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/half.h"
#include "core/strutil.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

#define FORMAT_TAG "baton-checkpoint-1"
#define CRC_PREFIX "crc32c."
#define META_CRC_KEY CRC_PREFIX "__metadata__"
#define MAX_OPTIMIZER_SLOTS 64

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

bt_status bt_checkpoint_write_file(const bt_engine *e, const bt_graph *g, const char *path,
                                   const bt_checkpoint_meta *meta)
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
        if (p.tied_to) continue; /* stored once, under its source's name */
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
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("format"), bt_strdup(FORMAT_TAG)), done);
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("model"), bt_strdup(meta->model)), done);
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("step"), bt_strfmt("%" PRId64, meta->step)), done);
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("epoch"), bt_strfmt("%" PRId64, meta->epoch)), done);
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("batch_index"), bt_strfmt("%" PRId64, meta->batch_index)), done);
    if (meta->batches_per_epoch > 0)
        BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("batches_per_epoch"), bt_strfmt("%" PRId64, meta->batches_per_epoch)),
                    done);
    if (meta->batch > 0)
        BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("batch"), bt_strfmt("%" PRId64, meta->batch)), done);
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("seed"), bt_strfmt("%" PRIu64, meta->seed)), done);
    BT_TRY_GOTO(st, meta_add(&ml, bt_strdup("optimizer_slots"), bt_strfmt("%d", slots)), done);
    qsort(ml.pairs, (size_t)ml.n, sizeof *ml.pairs, cmp_pair);
    uint32_t crc = 0;
    for (int i = 0; i < ml.n; i++) {
        crc = crc_pair(crc, ml.pairs[i].key, ml.pairs[i].value);
        BT_TRY_GOTO(st, bt_st_writer_add_metadata(w, ml.pairs[i].key, ml.pairs[i].value), done);
    }
    char crc_buf[16];
    snprintf(crc_buf, sizeof crc_buf, "%08" PRIx32, crc);
    BT_TRY_GOTO(st, bt_st_writer_add_metadata(w, META_CRC_KEY, crc_buf), done);
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

/* 1 for the dtypes a parameter can be read from: F32 and F64, and with halves F16 and BF16. */
static int readable_dtype(const bt_st_tensor *t, int halves)
{
    if (!t->known) return 0;
    return t->dtype == BT_F32 || t->dtype == BT_F64 || (halves && (t->dtype == BT_F16 || t->dtype == BT_BF16));
}

static bt_status check_tensor(const bt_st_file *f, const char *name, const bt_shape *want, int halves)
{
    const bt_st_tensor *t = bt_st_find(f, name);
    char a[64], b[64];
    if (!t) return bt_error(BT_ERR_IO, "%s: tensor '%s' is missing", bt_st_path(f), name);
    if (!readable_dtype(t, halves))
        return bt_error(BT_ERR_IO, "%s: tensor '%s' has dtype %s (%s expected)", bt_st_path(f), name, t->st_dtype,
                        halves ? "F32, F64, F16 or BF16" : "F32 or F64");
    if (!shapes_equal(&t->shape, want))
        return bt_error(BT_ERR_IO, "%s: tensor '%s' has shape %s but the model's is %s", bt_st_path(f), name,
                        bt_shape_format(&t->shape, a, sizeof a), bt_shape_format(want, b, sizeof b));
    return BT_OK;
}

/* Element i of a tensor of dtype at p (unaligned-safe), as a double. */
static double element(const unsigned char *p, bt_dtype dtype, size_t i)
{
    switch (dtype) {
    case BT_F64: {
        double v;
        memcpy(&v, p + i * 8, 8);
        return v;
    }
    case BT_F16:
    case BT_BF16: {
        uint16_t bits;
        memcpy(&bits, p + i * 2, 2);
        return dtype == BT_F16 ? bt_f16_bits_to_f32(bits) : bt_bf16_bits_to_f32(bits);
    }
    default: {
        float v;
        memcpy(&v, p + i * 4, 4);
        return v;
    }
    }
}

/* Copies tensor name into dst in dtype (F32 or F64), converting from F32, F64, F16 or BF16 (every
 * F16 and BF16 value is exact in F32). */
static bt_status read_converted(const bt_st_file *f, const char *name, bt_dtype dtype, void *dst, size_t n)
{
    const bt_st_tensor *t = bt_st_find(f, name);
    if (t->dtype == dtype) return bt_st_read(f, name, dtype, &t->shape, dst, n * bt_dtype_size(dtype));
    if ((size_t)t->numel != n || t->nbytes != n * bt_dtype_size(t->dtype))
        return bt_error(BT_ERR_IO, "%s: tensor '%s' has %lld elements, %zu expected", bt_st_path(f), name,
                        (long long)t->numel, n);
    for (size_t i = 0; i < n; i++) {
        double v = element(t->data, t->dtype, i);
        if (dtype == BT_F32) ((float *)dst)[i] = (float)v;
        else ((double *)dst)[i] = v;
    }
    return BT_OK;
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

static bt_status restore(bt_engine *e, const bt_graph *g, const bt_st_file *f, int slots, int halves)
{
    int n = bt_graph_num_params(g);
    char full[512];
    /* check everything first */
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        const char *stored = p.tied_to ? p.tied_to : p.name; /* a tied copy is stored under its source */
        BT_TRY(check_tensor(f, stored, &p.shape, halves));
        for (int s = 0; s < slots; s++) {
            snprintf(full, sizeof full, "optimizer.%s.%s", stored, bt_engine_optimizer_slot_name(e, s));
            BT_TRY(check_tensor(f, full, &p.shape, halves));
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
        const char *stored = p.tied_to ? p.tied_to : p.name; /* a tied copy reads its source */
        bt_status st = read_converted(f, stored, bt_engine_dtype(e), buf, numel);
        if (st == BT_OK) st = bt_engine_write_param(e, p.name, buf, bytes);
        for (int s = 0; s < slots && st == BT_OK; s++) {
            snprintf(full, sizeof full, "optimizer.%s.%s", stored, bt_engine_optimizer_slot_name(e, s));
            st = read_converted(f, full, bt_engine_dtype(e), buf, numel);
            if (st == BT_OK) st = bt_engine_write_state(e, p.name, s, buf, bytes);
        }
        free(buf);
        BT_TRY(st);
    }
    return BT_OK;
}

/* A decimal count: digits only (no sign, no spaces), at most INT64_MAX. */
static bt_status meta_count(const bt_st_file *f, const char *key, int optional, uint64_t max, uint64_t *out)
{
    const char *v = bt_st_metadata(f, key);
    uint64_t x = 0;
    *out = 0;
    if (!v) return optional ? BT_OK : bt_error(BT_ERR_IO, "%s: metadata '%s' is missing", bt_st_path(f), key);
    for (const char *c = v; *c; c++) {
        if (*c < '0' || *c > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (uint64_t)(*c - '0'), &x) ||
            x > max)
            return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a count from 0 to %llu", bt_st_path(f), key,
                            v, (unsigned long long)max);
    }
    if (!*v) return bt_error(BT_ERR_IO, "%s: metadata '%s' is empty", bt_st_path(f), key);
    *out = x;
    return BT_OK;
}

/* 1 when the file carries checksums (any "crc32c." key). */
static int has_checksums(const bt_st_file *f)
{
    for (int i = 0; i < bt_st_metadata_count(f); i++) {
        const char *key, *value;
        bt_st_metadata_at(f, i, &key, &value);
        if (strncmp(key, CRC_PREFIX, strlen(CRC_PREFIX)) == 0) return 1;
    }
    return 0;
}

/* The stored checksum under key, which must be eight lowercase hex digits. */
static bt_status stored_crc(const bt_st_file *f, const char *key, const char *what, uint32_t *out)
{
    const char *v = bt_st_metadata(f, key);
    uint32_t x = 0;
    if (!v)
        return bt_error(BT_ERR_IO, "%s: %s has no checksum ('%s' is missing) though the file has others",
                        bt_st_path(f), what, key);
    for (int i = 0; i < 8; i++) {
        char c = v[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a CRC-32C (8 hex digits)", bt_st_path(f), key, v);
        x = x << 4 | (uint32_t)(c <= '9' ? c - '0' : c - 'a' + 10);
    }
    if (v[8]) return bt_error(BT_ERR_IO, "%s: metadata '%s' = '%.40s' is not a CRC-32C (8 hex digits)", bt_st_path(f), key, v);
    *out = x;
    return BT_OK;
}

static bt_status verify_meta_checksum(const bt_st_file *f)
{
    if (!has_checksums(f)) return BT_OK;
    uint32_t want, crc = 0;
    BT_TRY(stored_crc(f, META_CRC_KEY, "the metadata", &want));
    for (int i = 0; i < bt_st_metadata_count(f); i++) { /* sorted by key */
        const char *key, *value;
        bt_st_metadata_at(f, i, &key, &value);
        if (strcmp(key, META_CRC_KEY) != 0) crc = crc_pair(crc, key, value);
    }
    if (crc != want)
        return bt_error(BT_ERR_IO, "%s: the metadata is corrupt (its CRC-32C is %08" PRIx32 ", the file records %08" PRIx32 ")",
                        bt_st_path(f), crc, want);
    return BT_OK;
}

bt_status bt_checkpoint_verify_tensors(const bt_st_file *f)
{
    if (!has_checksums(f)) return BT_OK;
    BT_TRY(verify_meta_checksum(f));
    for (int i = 0; i < bt_st_count(f); i++) {
        const bt_st_tensor *t = bt_st_at(f, i);
        char *key = bt_strfmt(CRC_PREFIX "%s", t->name), what[160];
        uint32_t want;
        if (!key) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        snprintf(what, sizeof what, "tensor '%.100s'", t->name);
        bt_status st = stored_crc(f, key, what, &want);
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

bt_status bt_checkpoint_parse_meta(const bt_st_file *f, bt_checkpoint_meta *meta)
{
    const char *tag = bt_st_metadata(f, "format"), *model = bt_st_metadata(f, "model");
    uint64_t step, epoch, index, per_epoch, seed, slots, batch;
    memset(meta, 0, sizeof *meta);
    if (!tag || strcmp(tag, FORMAT_TAG) != 0)
        return bt_error(BT_ERR_IO, "%s: not a baton checkpoint (metadata format is '%.40s', expected '%s')",
                        bt_st_path(f), tag ? tag : "(none)", FORMAT_TAG);
    BT_TRY(verify_meta_checksum(f));
    BT_TRY(meta_count(f, "step", 0, INT64_MAX, &step));
    BT_TRY(meta_count(f, "epoch", 0, INT64_MAX, &epoch));
    BT_TRY(meta_count(f, "batch_index", 0, INT64_MAX, &index));
    BT_TRY(meta_count(f, "batches_per_epoch", 1, INT64_MAX, &per_epoch));
    BT_TRY(meta_count(f, "batch", 1, INT64_MAX, &batch));
    BT_TRY(meta_count(f, "seed", 0, UINT64_MAX, &seed));
    BT_TRY(meta_count(f, "optimizer_slots", 0, MAX_OPTIMIZER_SLOTS, &slots));
    if (model && strlen(model) >= sizeof meta->model)
        return bt_error(BT_ERR_IO, "%s: metadata 'model' is longer than %d bytes", bt_st_path(f), (int)sizeof meta->model - 1);
    if (bt_st_metadata(f, "batches_per_epoch")) {
        uint64_t position;
        if (per_epoch == 0)
            return bt_error(BT_ERR_IO, "%s: metadata 'batches_per_epoch' is 0", bt_st_path(f));
        if (index >= per_epoch)
            return bt_error(BT_ERR_IO, "%s: inconsistent metadata: batch_index %llu is past an epoch of %llu batches",
                            bt_st_path(f), (unsigned long long)index, (unsigned long long)per_epoch);
        if (__builtin_mul_overflow(epoch, per_epoch, &position) || __builtin_add_overflow(position, index, &position) ||
            position > INT64_MAX)
            return bt_error(BT_ERR_IO, "%s: inconsistent metadata: epoch %llu of %llu batches is past any run",
                            bt_st_path(f), (unsigned long long)epoch, (unsigned long long)per_epoch);
        if (step > position)
            return bt_error(BT_ERR_IO, "%s: inconsistent metadata: step %llu is past its data position (epoch %llu, "
                            "batch %llu of %llu), though every step reads one batch",
                            bt_st_path(f), (unsigned long long)step, (unsigned long long)epoch,
                            (unsigned long long)index, (unsigned long long)per_epoch);
    }
    meta->step = (int64_t)step;
    meta->epoch = (int64_t)epoch;
    meta->batch_index = (int64_t)index;
    meta->batches_per_epoch = (int64_t)per_epoch;
    meta->batch = (int64_t)batch;
    meta->seed = seed;
    snprintf(meta->model, sizeof meta->model, "%s", model ? model : "");
    return BT_OK;
}

bt_status bt_checkpoint_read_meta(const char *path, bt_checkpoint_meta *meta)
{
    bt_st_file *f = NULL;
    BT_TRY(open_checkpoint(path, &f));
    bt_status st = bt_checkpoint_parse_meta(f, meta);
    bt_st_close(f);
    return st;
}

bt_status bt_checkpoint_resume(bt_engine *e, const bt_graph *g, const char *path, bt_checkpoint_meta *meta)
{
    bt_st_file *f = NULL;
    memset(meta, 0, sizeof *meta);
    BT_TRY(open_checkpoint(path, &f));
    bt_status st = BT_OK;
    bt_checkpoint_meta m;
    BT_TRY_GOTO(st, bt_checkpoint_parse_meta(f, &m), done);
    BT_TRY_GOTO(st, bt_checkpoint_verify_tensors(f), done);
    int slots = atoi(bt_st_metadata(f, "optimizer_slots")); /* validated: 0..MAX_OPTIMIZER_SLOTS */
    if (slots != bt_engine_optimizer_slots(e)) {
        st = bt_error(BT_ERR_IO, "%s: saved with %d optimizer state tensors per parameter, but this "
                      "optimizer keeps %d (was the optimizer changed?)",
                      bt_st_path(f), slots, bt_engine_optimizer_slots(e));
        goto done;
    }
    BT_TRY_GOTO(st, restore(e, g, f, slots, 0), done);
    BT_TRY_GOTO(st, bt_engine_set_step(e, m.step), done);
    *meta = m;
done:
    bt_st_close(f);
    return st;
}

/* Opens the weights at path (a checkpoint directory or a safetensors file) and verifies their
 * checksums, where the file has them. A missing path is BT_ERR_INVALID_ARG (a usage error). */
static bt_status open_weights(const char *path, bt_st_file **f)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bt_error(BT_ERR_INVALID_ARG, "%s: no weights there: %s", path, strerror(errno));
    BT_TRY(open_checkpoint(path, f));
    bt_status st = bt_checkpoint_verify_tensors(*f);
    if (st != BT_OK) {
        bt_st_close(*f);
        *f = NULL;
    }
    return st;
}

bt_status bt_checkpoint_load_weights(bt_engine *e, const bt_graph *g, const char *path)
{
    bt_st_file *f = NULL;
    BT_TRY(open_weights(path, &f));
    bt_status st = restore(e, g, f, 0, 1);
    bt_st_close(f);
    return st;
}

void bt_weights_report_free(bt_weights_report *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_skipped; i++) free(r->skipped[i]);
    for (int i = 0; i < r->n_missing; i++) free(r->missing[i]);
    free(r->skipped);
    free(r->missing);
    memset(r, 0, sizeof *r);
}

/* Appends a malloc'ed line (NULL: out of memory) to list. */
static bt_status report_add(char ***list, int *n, char *line)
{
    char **grown = line ? realloc(*list, sizeof **list * (size_t)(*n + 1)) : NULL;
    if (!grown) {
        free(line);
        return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    }
    *list = grown;
    (*list)[(*n)++] = line;
    return BT_OK;
}

bt_status bt_checkpoint_load_weights_partial(bt_engine *e, const bt_graph *g, const char *path,
                                             bt_weights_report *report)
{
    bt_st_file *f = NULL;
    bt_status st = BT_OK;
    void *buf = NULL;
    memset(report, 0, sizeof *report);
    BT_TRY(open_weights(path, &f));
    for (int i = 0; i < bt_graph_num_params(g); i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        const char *stored = p.name;
        const bt_st_tensor *t = bt_st_find(f, stored);
        if (!t && p.tied_to) t = bt_st_find(f, stored = p.tied_to); /* a tied copy: its source */
        char a[64], b[64];
        if (!t) {
            BT_TRY_GOTO(st, report_add(&report->missing, &report->n_missing, bt_strdup(p.name)), fail);
            continue;
        }
        if (!readable_dtype(t, 1) || !shapes_equal(&t->shape, &p.shape)) {
            char *why = !readable_dtype(t, 1)
                            ? bt_strfmt("%s: dtype %s", p.name, t->st_dtype)
                            : bt_strfmt("%s: shape %s, the model's is %s", p.name,
                                        bt_shape_format(&t->shape, a, sizeof a), bt_shape_format(&p.shape, b, sizeof b));
            BT_TRY_GOTO(st, report_add(&report->skipped, &report->n_skipped, why), fail);
            BT_TRY_GOTO(st, report_add(&report->missing, &report->n_missing, bt_strdup(p.name)), fail);
            continue;
        }
        size_t numel = (size_t)bt_shape_numel(&p.shape), bytes = param_bytes(e, &p);
        void *grown = realloc(buf, bytes + 1);
        if (!grown) {
            st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
            goto fail;
        }
        buf = grown;
        BT_TRY_GOTO(st, read_converted(f, stored, bt_engine_dtype(e), buf, numel), fail);
        BT_TRY_GOTO(st, bt_engine_write_param(e, p.name, buf, bytes), fail);
        report->loaded++;
    }
    for (int i = 0; i < bt_st_count(f); i++) {
        const char *name = bt_st_at(f, i)->name;
        if (strncmp(name, "optimizer.", 10) == 0 || is_model_tensor(g, name, 0, e)) continue;
        BT_TRY_GOTO(st, report_add(&report->skipped, &report->n_skipped,
                                   bt_strfmt("%s: no parameter of the model has this name", name)), fail);
    }
    free(buf);
    bt_st_close(f);
    return BT_OK;
fail:
    free(buf);
    bt_st_close(f);
    bt_weights_report_free(report);
    return st;
}
