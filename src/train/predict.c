/* train/predict.c: streaming data through an engine's forward-only schedule (see predict.h). The
 * data becomes one column per model input (io/columns.h): from npy files named per input (a bare
 * file feeds the one input that is not the loss's labels), or from a data: source; a label input
 * without a file is fed zeros. The loader (io/loader.h) prepares the batches ahead, in order, the
 * last one padded; only its real rows are scored and written. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "graph/graph_internal.h"
#include "io/columns.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/npy.h"
#include "train/lm.h"
#include "train/predict.h"
#include "train/trainer.h"

typedef struct predict_data {
    bt_column spec[BT_COLUMNS_MAX];
    int n_spec;
    int label_col;             /* the loss's label input, or -1 */
    int has_labels;
    bt_columns files;          /* what the npy files or synthetic source gave (owned) */
    bt_dataset ds;             /* an images/labels source */
    bt_columns cols;           /* the view the loader reads: borrowed, or owned zeros */
} predict_data;

static void data_free(predict_data *d)
{
    bt_columns_free(&d->cols);
    bt_columns_free(&d->files);
    bt_dataset_free(&d->ds);
}

static int64_t int_range(const bt_graph *g, int value)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == value && g->nodes[i].int_hi[k] > 0) return g->nodes[i].int_hi[k];
    return 0;
}

static bt_status make_spec(const bt_graph *g, bt_dtype dtype, predict_data *d)
{
    if (g->n_inputs > BT_COLUMNS_MAX)
        return bt_error(BT_ERR_UNSUPPORTED, "predict takes at most %d inputs; this model has %d", BT_COLUMNS_MAX,
                        g->n_inputs);
    d->label_col = -1;
    const bt_node *last = &g->nodes[g->n_nodes - 1];
    for (int i = 0; i < g->n_inputs; i++) {
        const bt_value *v = &g->values[g->inputs[i]];
        bt_column *c = &d->spec[i];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", v->name);
        c->dtype = v->dtype == BT_I32 ? BT_I32 : dtype;
        c->shape = v->shape;
        c->numel = bt_shape_numel(&v->shape);
        c->int_hi = v->dtype == BT_I32 ? int_range(g, g->inputs[i]) : 0;
        if (bt_graph_is_trainable(g) && last->n_in > 1 && last->in[1] == g->inputs[i]) d->label_col = i;
    }
    d->n_spec = g->n_inputs;
    return BT_OK;
}

/* The input a bare file feeds: the only one that is not the labels. */
static bt_status sole_input(const predict_data *d, int *out)
{
    int found = -1, count = 0;
    for (int i = 0; i < d->n_spec; i++)
        if (i != d->label_col) found = i, count++;
    if (count != 1) {
        char names[512];
        size_t used = 0;
        names[0] = '\0';
        for (int i = 0; i < d->n_spec && used < sizeof names; i++)
            if (i != d->label_col)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", d->spec[i].name);
        return bt_error(BT_ERR_INVALID_ARG, "the model has %d inputs besides its labels (%s): name each file's input "
                        "(--input NAME=FILE.npy)", count, names);
    }
    *out = found;
    return BT_OK;
}

/* Every column from a file of files (by name), zeros for the labels when none was given. */
static bt_status from_files(const bt_predict_opts *o, predict_data *d)
{
    bt_data_source src;
    bt_column sub[BT_COLUMNS_MAX];
    int n_sub = 0, given[BT_COLUMNS_MAX] = {0};
    memset(&src, 0, sizeof src);
    src.kind = BT_DATA_NPY;
    for (int f = 0; f < o->n_inputs; f++) {
        int col = -1;
        if (!o->input_names[f]) BT_TRY(sole_input(d, &col));
        else
            for (int i = 0; i < d->n_spec; i++)
                if (strcmp(d->spec[i].name, o->input_names[f]) == 0) col = i;
        if (col < 0) {
            /* let the columns reader name the model's inputs */
            src.input_names[src.n_inputs] = o->input_names[f];
            src.input_files[src.n_inputs++] = o->input_files[f];
            return bt_columns_load_npy(&src, d->spec, d->n_spec, NULL, &d->files);
        }
        if (given[col])
            return bt_error(BT_ERR_INVALID_ARG, "input '%s' is given two files", d->spec[col].name);
        given[col] = 1;
        src.input_names[src.n_inputs] = d->spec[col].name;
        src.input_files[src.n_inputs++] = o->input_files[f];
    }
    if (o->labels) {
        if (d->label_col < 0)
            return bt_error(BT_ERR_INVALID_ARG, "labels were given, but the model's last layer is not a loss with a "
                            "label input");
        if (given[d->label_col])
            return bt_error(BT_ERR_INVALID_ARG, "input '%s' is given two files", d->spec[d->label_col].name);
        given[d->label_col] = 1;
        src.input_names[src.n_inputs] = d->spec[d->label_col].name;
        src.input_files[src.n_inputs++] = o->labels;
        d->has_labels = 1;
    }
    for (int i = 0; i < d->n_spec; i++) {
        if (given[i]) sub[n_sub++] = d->spec[i];
        else if (i != d->label_col)
            return bt_error(BT_ERR_INVALID_ARG, "no file for input '%s' (--input %s=FILE.npy)", d->spec[i].name,
                            d->spec[i].name);
    }
    if (n_sub == 0) return bt_error(BT_ERR_INVALID_ARG, "no input files given");
    BT_TRY(bt_columns_load_npy(&src, sub, n_sub, NULL, &d->files));
    return BT_OK;
}

/* An images/labels source: the images feed the one input besides the labels. */
static bt_status from_pair(const bt_data_source *src, predict_data *d)
{
    int x;
    BT_TRY(sole_input(d, &x));
    if (d->spec[x].dtype == BT_I32)
        return bt_error(BT_ERR_INVALID_ARG, "images: feed a float input; '%s' is i32", d->spec[x].name);
    int classes = d->label_col >= 0 && d->spec[d->label_col].int_hi > 0 ? (int)d->spec[d->label_col].int_hi : INT32_MAX;
    BT_TRY(bt_dataset_load(src, d->spec[x].numel, classes, 0, 1, &d->ds));
    bt_columns *f = &d->files;
    memset(f, 0, sizeof *f);
    f->n = d->ds.n;
    f->col[0] = d->spec[x];
    f->col[0].data = d->ds.inputs;
    if (d->spec[x].dtype == BT_F64) {
        size_t total = (size_t)d->ds.n * (size_t)d->spec[x].numel;
        double *v = malloc(total * sizeof *v + 1);
        if (!v) return bt_error(BT_ERR_NOMEM, "predict: out of memory");
        for (size_t i = 0; i < total; i++) v[i] = d->ds.inputs[i];
        f->col[0].data = v;
        f->col[0].owned = 1;
    }
    f->n_cols = 1;
    if (d->label_col >= 0) {
        f->col[1] = d->spec[d->label_col];
        f->col[1].data = d->ds.labels;
        f->n_cols = 2;
        d->has_labels = 1;
    }
    return BT_OK;
}

/* d->cols in the model's input order: the files' columns by name, zeros for the rest. */
static bt_status assemble(predict_data *d)
{
    bt_columns *c = &d->cols;
    memset(c, 0, sizeof *c);
    c->n = d->files.n;
    for (int i = 0; i < d->n_spec; i++) {
        c->col[i] = d->spec[i];
        c->n_cols = i + 1;
        for (int k = 0; k < d->files.n_cols; k++)
            if (strcmp(d->files.col[k].name, d->spec[i].name) == 0) c->col[i].data = d->files.col[k].data;
        if (!c->col[i].data) {
            c->col[i].data = calloc((size_t)c->n * (size_t)d->spec[i].numel, bt_dtype_size(d->spec[i].dtype));
            c->col[i].owned = 1;
            if (!c->col[i].data) return bt_error(BT_ERR_NOMEM, "predict: out of memory");
        }
    }
    return BT_OK;
}

static bt_status load(const bt_model *m, bt_engine *e, const bt_predict_opts *o, predict_data *d)
{
    BT_TRY(make_spec(m->graph, bt_engine_dtype(e), d));
    const bt_data_source *src = o->source;
    if (!src) BT_TRY(from_files(o, d));
    else if (src->kind == BT_DATA_NPY && src->n_inputs > 0) {
        BT_TRY(bt_columns_load_npy(src, d->spec, d->n_spec, NULL, &d->files));
        d->has_labels = d->label_col >= 0;
    } else if (src->kind == BT_DATA_SYNTHETIC) {
        BT_TRY(bt_columns_synthetic(d->spec, d->n_spec, src->samples > 0 ? src->samples : 10000, o->seed, 1, &d->files));
        d->has_labels = d->label_col >= 0;
    } else if (src->kind == BT_DATA_IDX || src->kind == BT_DATA_NPY) {
        BT_TRY(from_pair(src, d));
    } else if (src->kind == BT_DATA_TEXT || src->kind == BT_DATA_TOKENS) {
        /* a language model's validation windows, as its training run evaluated them */
        BT_TRY(bt_lm_eval_columns(m, bt_engine_batch(e), d->spec, d->n_spec, &d->files));
        d->has_labels = d->label_col >= 0;
    } else {
        return bt_error(BT_ERR_INVALID_ARG, "no data to predict on");
    }
    return assemble(d);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bt_status engine_host_alloc(void *ctx, size_t bytes, void **out) { return bt_engine_host_alloc(ctx, bytes, out); }
static void engine_host_free(void *ctx, void *ptr) { bt_engine_host_free(ctx, ptr); }

/* The output value: the named layer's, the logits of a classifier's loss, or the last layer's. */
static bt_status output_value(const bt_graph *g, const char *name, int *layer_out, int *value)
{
    int l = -1;
    if (name) {
        l = bt_graph_find_layer(g, name);
        if (l < 0) return bt_error(BT_ERR_INVALID_ARG, "--output-layer: the model has no layer '%s'", name);
    } else if (bt_graph_is_trainable(g) && g->values[g->nodes[g->n_nodes - 1].in[0]].producer >= 0) {
        l = g->nodes[g->values[g->nodes[g->n_nodes - 1].in[0]].producer].layer;
    } else {
        l = g->n_layers - 1;
    }
    const bt_layer *ly = &g->layers[l];
    *layer_out = l;
    *value = g->nodes[ly->first_node + ly->n_nodes - 1].out;
    return BT_OK;
}

bt_status bt_predict_run(const bt_model *m, bt_engine *e, const bt_predict_opts *o, bt_predict_callback cb,
                         void *user, bt_predict_report *rep)
{
    bt_status st = BT_OK;
    predict_data d;
    bt_loader *loader = NULL;
    void *out = NULL, *all = NULL, *losses = NULL;
    double *lat = NULL;
    const bt_graph *g = m->graph;
    memset(&d, 0, sizeof d);
    memset(rep, 0, sizeof *rep);
    rep->accuracy = NAN;
    int layer = 0, value = 0;
    BT_TRY(output_value(g, o->output_layer, &layer, &value));
    BT_TRY_GOTO(st, load(m, e, o, &d), done);
    const bt_value *ov = &g->values[value];
    bt_dtype odt = ov->dtype == BT_I32 ? BT_I32 : bt_engine_dtype(e);
    size_t row = (size_t)bt_shape_numel(&ov->shape) * bt_dtype_size(odt);
    snprintf(rep->output_layer, sizeof rep->output_layer, "%s", g->layers[layer].name);
    rep->output_shape = ov->shape;
    int64_t batch = bt_engine_batch(e);
    bt_host_memory mem = {.alloc = engine_host_alloc, .free = engine_host_free, .ctx = e};
    BT_TRY_GOTO(st, bt_loader_create_columns(&d.cols, batch, 0, 0, 0, 2, &mem, &loader), done);
    int64_t batches = bt_loader_batches_per_epoch(loader);
    /* accuracy: the output is the logits a cross_entropy-like loss scores against its labels */
    const bt_node *last = &g->nodes[g->n_nodes - 1];
    int classes = ov->shape.ndim ? (int)ov->shape.dim[ov->shape.ndim - 1] : 1;
    int score = d.has_labels && bt_graph_is_trainable(g) && last->in[0] == value && last->int_hi[1] == classes &&
                d.spec[d.label_col].numel == 1 && odt != BT_I32;
    out = malloc((size_t)batch * row + 1);
    losses = malloc((size_t)batch * sizeof(double) + 1);
    lat = malloc((size_t)batches * sizeof *lat + 1);
    if (o->output_path) all = malloc((size_t)d.cols.n * row + 1);
    if (!out || !losses || !lat || (o->output_path && !all)) {
        st = bt_error(BT_ERR_NOMEM, "predict: out of memory");
        goto done;
    }
    double loss_sum = 0;
    int64_t correct = 0;
    for (int64_t k = 0; k < batches; k++) {
        bt_batch b;
        BT_TRY_GOTO(st, bt_loader_next(loader, &b), done);
        bt_feed feeds[BT_COLUMNS_MAX];
        for (int c = 0; c < d.n_spec; c++) feeds[c] = (bt_feed){d.spec[c].name, b.cols[c], d.spec[c].dtype};
        bt_step_result r;
        double t0 = bt_now_ms();
        st = bt_engine_predict(e, feeds, d.n_spec, g->layers[layer].name, out, d.has_labels && !score ? losses : NULL,
                               &r);
        lat[k] = bt_now_ms() - t0;
        if (st != BT_OK) {
            bt_loader_release(loader);
            st = bt_error_context(st, "batch %lld", (long long)k);
            goto done;
        }
        if (score) bt_score_logits(out, odt, b.valid, classes, b.cols[d.label_col], &loss_sum, &correct);
        else if (d.has_labels)
            for (int64_t i = 0; i < b.valid; i++)
                loss_sum += bt_engine_dtype(e) == BT_F64 ? ((double *)losses)[i] : (double)((float *)losses)[i];
        if (all) memcpy((char *)all + (size_t)(k * batch) * row, out, (size_t)b.valid * row);
        rep->samples += b.valid;
        rep->total_ms += lat[k];
        bt_loader_release(loader);
        if (cb) cb(k, batches, &r, user);
    }
    rep->batches = batches;
    rep->samples_per_s = rep->total_ms > 0 ? (double)rep->samples * 1000.0 / rep->total_ms : 0;
    qsort(lat, (size_t)batches, sizeof *lat, cmp_double);
    rep->p50_ms = lat[(batches - 1) / 2];
    int64_t r99 = (int64_t)ceil(0.99 * (double)batches) - 1;
    rep->p99_ms = lat[r99 < 0 ? 0 : r99];
    rep->has_loss = d.has_labels;
    if (d.has_labels) rep->loss = loss_sum / (double)rep->samples;
    if (score) rep->accuracy = (double)correct / (double)rep->samples;
    if (all) {
        int64_t dims[BT_MAX_DIMS + 1];
        dims[0] = d.cols.n;
        for (int i = 0; i < ov->shape.ndim; i++) dims[i + 1] = ov->shape.dim[i];
        BT_TRY_GOTO(st, bt_npy_write(o->output_path, odt, ov->shape.ndim + 1, dims, all), done);
    }
done:
    bt_loader_destroy(loader);
    data_free(&d);
    free(out);
    free(all);
    free(losses);
    free(lat);
    return st;
}
