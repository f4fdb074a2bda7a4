/* train/checkpoint_load.c: loading a checkpoint into an engine (see checkpoint.h): resume
 * (weights, optimizer state, step) and weights alone (--init, predict, generate), from one file or
 * a sharded checkpoint alike (train/ckpt_source.h). Loading checks the whole checkpoint (checksums,
 * metadata, then the tensors against the graph) first and only then writes into the engine, so a
 * rejected checkpoint leaves the engine as it was (a resume also compares the model graph the
 * checkpoint recorded, and restores f16's loss scale, before any tensor is written); it writes
 * only the stages this process runs (across processes, its own stage), so no rank needs memory
 * for the others. A tied copy (bt_graph_tie) reads its source's tensor; a file that holds the
 * copy's own tensor too (PyTorch's lm_head.weight beside the embedding) is accepted only where
 * the two are bitwise equal, else refused naming both (BT_ERR_INVALID_ARG), never ignored. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/half.h"
#include "core/strutil.h"
#include "graph/describe.h"
#include "train/checkpoint.h"
#include "train/ckpt_source.h"

static size_t param_bytes(const bt_engine *e, const bt_param_info *p)
{
    return (size_t)bt_shape_numel(&p->shape) * bt_dtype_size(bt_engine_dtype(e));
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

static bt_status check_tensor(const bt_ckpt_source *src, const char *name, const bt_shape *want, int halves)
{
    const bt_st_file *f = NULL;
    const bt_st_tensor *t = bt_ckpt_source_find(src, name, &f);
    char a[64], b[64];
    if (!t) return bt_error(BT_ERR_IO, "%s: tensor '%s' is missing", src->path, name);
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
static bt_status read_converted(const bt_ckpt_source *src, const char *name, bt_dtype dtype, void *dst, size_t n)
{
    const bt_st_file *f = NULL;
    const bt_st_tensor *t = bt_ckpt_source_find(src, name, &f);
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

/* 1 when this process runs the stage of parameter name (a resume writes only those). */
static int runs_param(const bt_engine *e, const char *name)
{
    int s;
    return bt_engine_param_stage(e, name, &s) == BT_OK && bt_engine_runs_stage(e, s);
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

/* Where the file holds tensor copy (a tied parameter's own name, or one of its optimizer state
 * tensors) beside source's: the two must be the same bytes, the same dtype and shape. */
static bt_status check_tied_copy(const bt_ckpt_source *src, const char *copy, const char *source)
{
    const bt_st_file *f = NULL;
    const bt_st_tensor *c = bt_ckpt_source_find(src, copy, &f), *s = bt_ckpt_source_find(src, source, NULL);
    if (!c || !s) return BT_OK;
    int same = c->known == s->known && strcmp(c->st_dtype, s->st_dtype) == 0 && shapes_equal(&c->shape, &s->shape) &&
               c->nbytes == s->nbytes && memcmp(c->data, s->data, c->nbytes) == 0;
    if (same) return BT_OK;
    return bt_error(BT_ERR_INVALID_ARG,
                    "%s: tensor '%s' differs from '%s', to which the model ties it (one weight, stored once): "
                    "remove '%s' from the file, or untie the layer",
                    bt_st_path(f), copy, source, copy);
}

/* check_tied_copy for parameter p (tied) and its optimizer state tensors. */
static bt_status check_tied_param(const bt_engine *e, const bt_ckpt_source *src, const bt_param_info *p, int slots)
{
    char copy[512], source[512];
    BT_TRY(check_tied_copy(src, p->name, p->tied_to));
    for (int s = 0; s < slots; s++) {
        snprintf(copy, sizeof copy, "optimizer.%s.%s", p->name, bt_engine_optimizer_slot_name(e, s));
        snprintf(source, sizeof source, "optimizer.%s.%s", p->tied_to, bt_engine_optimizer_slot_name(e, s));
        BT_TRY(check_tied_copy(src, copy, source));
    }
    return BT_OK;
}

/* Every tensor the model needs is there with its shape and a readable dtype, and the source holds
 * no other (optimizer state aside when slots is 0). */
static bt_status check_tensors(const bt_engine *e, const bt_graph *g, const bt_ckpt_source *src, int slots, int halves)
{
    int n = bt_graph_num_params(g);
    char full[512];
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        const char *stored = p.tied_to ? p.tied_to : p.name; /* a tied copy is stored under its source */
        BT_TRY(check_tensor(src, stored, &p.shape, halves));
        if (p.tied_to) BT_TRY(check_tied_param(e, src, &p, slots));
        for (int s = 0; s < slots; s++) {
            snprintf(full, sizeof full, "optimizer.%s.%s", stored, bt_engine_optimizer_slot_name(e, s));
            BT_TRY(check_tensor(src, full, &p.shape, halves));
        }
    }
    for (int i = 0; i < bt_ckpt_source_count(src); i++) {
        const bt_st_file *f = NULL;
        const char *name = bt_ckpt_source_at(src, i, &f)->name;
        if (!is_model_tensor(g, name, slots, e) && (slots > 0 || strncmp(name, "optimizer.", 10) != 0))
            return bt_error(BT_ERR_IO, "%s: tensor '%s' matches no parameter of the model", bt_st_path(f), name);
    }
    return BT_OK;
}

/* Writes the checked tensors into the stages this process runs. */
static bt_status write_tensors(bt_engine *e, const bt_graph *g, const bt_ckpt_source *src, int slots)
{
    int n = bt_graph_num_params(g);
    char full[512];
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        if (!runs_param(e, p.name)) continue;
        size_t numel = (size_t)bt_shape_numel(&p.shape), bytes = param_bytes(e, &p);
        void *buf = malloc(bytes + 1);
        if (!buf) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        const char *stored = p.tied_to ? p.tied_to : p.name; /* a tied copy reads its source */
        bt_status st = read_converted(src, stored, bt_engine_dtype(e), buf, numel);
        if (st == BT_OK) st = bt_engine_write_param(e, p.name, buf, bytes);
        for (int s = 0; s < slots && st == BT_OK; s++) {
            snprintf(full, sizeof full, "optimizer.%s.%s", stored, bt_engine_optimizer_slot_name(e, s));
            st = read_converted(src, full, bt_engine_dtype(e), buf, numel);
            if (st == BT_OK) st = bt_engine_write_state(e, p.name, s, buf, bytes);
        }
        free(buf);
        BT_TRY(st);
    }
    return BT_OK;
}

static bt_status restore(bt_engine *e, const bt_graph *g, const bt_ckpt_source *src, int slots, int halves)
{
    BT_TRY(check_tensors(e, g, src, slots, halves));
    return write_tensors(e, g, src, slots);
}

/* Longest stretch of a description line quoted in a message. */
#define QUOTE_MAX 400

/* The graph the checkpoint recorded equals this one (when it recorded one), or the first line that
 * differs is named. */
static bt_status check_graph(const bt_ckpt_source *src, const bt_graph *g, const char *recorded)
{
    if (!recorded) return BT_OK; /* written before the record existed: names and shapes were checked */
    char *ours = NULL;
    BT_TRY(bt_graph_describe(g, &ours));
    const char *a, *b;
    size_t na, nb;
    const int line = bt_graph_describe_diff(recorded, ours, &a, &na, &b, &nb);
    bt_status st = BT_OK;
    if (line)
        st = bt_error(BT_ERR_INVALID_ARG,
                      "%s was saved by another model graph (parameter names and shapes alone agree): line %d of its "
                      "description is '%.*s', this model's is '%.*s'; a resumed run continues the same model (to "
                      "start another from these weights, load them with --init)",
                      src->path, line, a ? (int)(na < QUOTE_MAX ? na : QUOTE_MAX) : 11, a ? a : "(no line)",
                      b ? (int)(nb < QUOTE_MAX ? nb : QUOTE_MAX) : 9, b ? b : "(no line)");
    free(ours);
    return st;
}

/* f16's loss scaler as the checkpoint left it; nothing to restore in another precision, or from a
 * checkpoint without the record (the scaler starts from train.loss_scale). */
static bt_status restore_loss_scale(bt_engine *e, const bt_checkpoint_records *rec)
{
    double scale;
    int64_t clean;
    if (!rec->has_loss_scale || !bt_engine_loss_scale(e, &scale, &clean)) return BT_OK;
    return bt_engine_set_loss_scale(e, rec->loss_scale, rec->loss_scale_clean_steps);
}

bt_status bt_checkpoint_resume(bt_engine *e, const bt_graph *g, const char *path, bt_checkpoint_meta *meta)
{
    bt_ckpt_source *src = NULL;
    memset(meta, 0, sizeof *meta);
    BT_TRY(bt_ckpt_source_open(path, &src));
    bt_status st = BT_OK;
    bt_checkpoint_meta m;
    BT_TRY_GOTO(st, bt_checkpoint_verify_source(src, &m), done);
    int slots = atoi(bt_ckpt_source_meta(src, "optimizer_slots")); /* validated: 0..MAX_OPTIMIZER_SLOTS */
    if (slots != bt_engine_optimizer_slots(e)) {
        st = bt_error(BT_ERR_IO, "%s: saved with %d optimizer state tensors per parameter, but this "
                      "optimizer keeps %d (was the optimizer changed?)",
                      src->path, slots, bt_engine_optimizer_slots(e));
        goto done;
    }
    bt_checkpoint_records rec;
    BT_TRY_GOTO(st, bt_checkpoint_parse_records(src, &rec), done);
    BT_TRY_GOTO(st, check_tensors(e, g, src, slots, 0), done);
    BT_TRY_GOTO(st, check_graph(src, g, rec.graph), done);
    BT_TRY_GOTO(st, restore_loss_scale(e, &rec), done); /* refused before anything else changes */
    BT_TRY_GOTO(st, write_tensors(e, g, src, slots), done);
    BT_TRY_GOTO(st, bt_engine_set_step(e, m.step), done);
    *meta = m;
done:
    bt_ckpt_source_close(src);
    return st;
}

/* Opens the weights at path (a checkpoint directory, an index or a safetensors file) and verifies
 * their checksums, where the files have them; a sharded checkpoint's metadata too. A missing path
 * is BT_ERR_INVALID_ARG (a usage error). */
static bt_status open_weights(const char *path, bt_ckpt_source **src)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bt_error(BT_ERR_INVALID_ARG, "%s: no weights there: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char *latest = NULL;
        BT_TRY(bt_ckpt_source_latest(path, &latest));
        int found = latest != NULL;
        free(latest);
        if (!found)
            return bt_error(BT_ERR_INVALID_ARG, "%s: no weights there (neither %s nor %s in it)", path,
                            BT_CHECKPOINT_FILE, BT_CHECKPOINT_INDEX);
    }
    BT_TRY(bt_ckpt_source_open(path, src));
    bt_checkpoint_meta m;
    bt_status st = BT_OK;
    if (!(*src)->single && bt_ckpt_source_meta(*src, "format")) st = bt_checkpoint_verify_source(*src, &m);
    for (int i = 0; st == BT_OK && i < bt_ckpt_source_files(*src); i++) /* any safetensors: no metadata needed */
        st = bt_checkpoint_verify_tensors(bt_ckpt_source_file(*src, i));
    if (st != BT_OK) {
        bt_ckpt_source_close(*src);
        *src = NULL;
    }
    return st;
}

bt_status bt_checkpoint_load_weights(bt_engine *e, const bt_graph *g, const char *path)
{
    bt_ckpt_source *src = NULL;
    BT_TRY(open_weights(path, &src));
    bt_status st = restore(e, g, src, 0, 1);
    bt_ckpt_source_close(src);
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
    bt_ckpt_source *src = NULL;
    bt_status st = BT_OK;
    void *buf = NULL;
    memset(report, 0, sizeof *report);
    BT_TRY(open_weights(path, &src));
    for (int i = 0; i < bt_graph_num_params(g); i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        const char *stored = p.tied_to ? p.tied_to : p.name; /* a tied copy loads its source, as restore */
        const bt_st_tensor *t = bt_ckpt_source_find(src, stored, NULL);
        char a[64], b[64];
        if (p.tied_to) BT_TRY_GOTO(st, check_tied_copy(src, p.name, p.tied_to), fail);
        if (!t && p.tied_to && bt_ckpt_source_find(src, p.name, NULL))
            BT_TRY_GOTO(st, report_add(&report->skipped, &report->n_skipped,
                                       bt_strfmt("%s: tied to %s, which the file lacks (a tied pair loads from %s)",
                                                 p.name, p.tied_to, p.tied_to)), fail);
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
        BT_TRY_GOTO(st, read_converted(src, stored, bt_engine_dtype(e), buf, numel), fail);
        if (runs_param(e, p.name)) BT_TRY_GOTO(st, bt_engine_write_param(e, p.name, buf, bytes), fail);
        report->loaded++;
    }
    for (int i = 0; i < bt_ckpt_source_count(src); i++) {
        const char *name = bt_ckpt_source_at(src, i, NULL)->name;
        if (strncmp(name, "optimizer.", 10) == 0 || is_model_tensor(g, name, 0, e)) continue;
        BT_TRY_GOTO(st, report_add(&report->skipped, &report->n_skipped,
                                   bt_strfmt("%s: no parameter of the model has this name", name)), fail);
    }
    free(buf);
    bt_ckpt_source_close(src);
    return BT_OK;
fail:
    free(buf);
    bt_ckpt_source_close(src);
    bt_weights_report_free(report);
    return st;
}
