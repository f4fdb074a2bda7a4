/* train/trainer.c: the training loop (see trainer.h). Any input signature trains: the data is one
 * column per model input (io/columns.h), from npy files named per input, synthetic columns shaped
 * like the declaration, or, for the classic signature (one float input, one integer label), an
 * IDX or npy (images, labels) pair or the synthetic teacher task. Accuracy is scored where the
 * loss's second input is a model input holding class indices into its first input's last
 * dimension. Without an eval source, synthetic data holds out an eval set; files are evaluated
 * on the training set, and the eval events say so (bt_train_event.on_train). Nothing non-finite passes silently: the engine stops a step
 * whose gradients are not finite, the trainer a loss or an eval loss that is not, and no
 * checkpoint is written unless every weight and optimizer buffer is finite, so a diverged run
 * never overwrites the last good checkpoint (BT_ERR_NUMERIC in every case). The step, evaluation
 * and checkpoint loop is train_loop.c's, which the language-model loop (lm.c) runs too; this file
 * is its source of batches (columns through the loader) and its evaluation. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "core/util.h"
#include "core/error.h"
#include "core/strutil.h"
#include "graph/graph_internal.h"
#include "io/columns.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "train/checkpoint.h"
#include "train/train_loop.h"
#include "optim/lr_schedule.h"
#include "train/trainer.h"

struct bt_trainer {
    const bt_model *model;
    bt_engine *engine;
    bt_trainer_opts opts;
    bt_column spec[BT_COLUMNS_MAX]; /* one per model input, in the graph's order */
    int n_spec;
    int input_col, label_col;  /* classic signature: the float input and the i32 label; else -1 */
    int score_col;             /* the column holding the loss's class labels, or -1 */
    const char *logits_layer;  /* layer whose output the loss reads as logits, or NULL */
    int n_classes;
    bt_dataset train, eval;    /* classic sources (IDX, npy pairs, the teacher task) */
    bt_columns train_cols, eval_cols;
    int has_eval;
    int eval_on_train;         /* no eval source: evaluation reads the training set */
    bt_loader *train_loader, *eval_loader;
    int local_feeds;           /* the train loader gives this rank's rows and inputs only */
    bt_dir_lock *ckpt_lock;    /* held while checkpoint_dir is ours */
    bt_host_memory host_mem;   /* the loaders' buffers: the engine's page-locked memory */
    int64_t total_steps, first_step; /* first_step: batches already consumed (the data position) */
    int64_t saved_step;        /* the step of the last checkpoint this run wrote or resumed, -1: none */
    void *logits;              /* (batch, classes), engine dtype */
    void *losses;              /* (batch), engine dtype */
    int64_t stopped_at;        /* the step after which opts.stop stopped the run; 0: none */
    bt_weights_report init_report;
    int has_init_report;
};

/* Exclusive upper bound a consumer's shape rule declared for an integer value (a class count, a
 * vocabulary), or 0. */
static int64_t int_range(const bt_graph *g, int value)
{
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (g->nodes[i].in[k] == value && g->nodes[i].int_hi[k] > 0) return g->nodes[i].int_hi[k];
    return 0;
}

/* One column per model input, the classic pair if the signature is one, and the logits layer. */
static bt_status inspect_graph(bt_trainer *t)
{
    const bt_graph *g = t->model->graph;
    if (!bt_graph_is_trainable(g))
        return bt_error(BT_ERR_MODEL, "%s: the last layer is not a loss, so there is nothing to train",
                        t->model->path ? t->model->path : "model");
    if (g->n_inputs > BT_COLUMNS_MAX)
        return bt_error(BT_ERR_UNSUPPORTED, "training from data takes at most %d inputs; this model has %d",
                        BT_COLUMNS_MAX, g->n_inputs);
    const bt_node *loss = &g->nodes[g->n_nodes - 1];
    int n_float = 0, n_int = 0;
    t->input_col = t->label_col = t->score_col = -1;
    for (int i = 0; i < g->n_inputs; i++) {
        const bt_value *v = &g->values[g->inputs[i]];
        bt_column *c = &t->spec[i];
        memset(c, 0, sizeof *c);
        snprintf(c->name, sizeof c->name, "%s", v->name);
        c->dtype = v->dtype == BT_I32 ? BT_I32 : bt_engine_dtype(t->engine);
        c->shape = v->shape;
        c->numel = bt_shape_numel(&v->shape);
        c->int_hi = v->dtype == BT_I32 ? int_range(g, g->inputs[i]) : 0;
        if (v->dtype == BT_I32) n_int++, t->label_col = i;
        else n_float++, t->input_col = i;
    }
    t->n_spec = g->n_inputs;
    if (!(g->n_inputs == 2 && n_float == 1 && n_int == 1)) t->input_col = t->label_col = -1;
    const bt_value *logits = &g->values[loss->in[0]];
    t->n_classes = logits->shape.ndim ? (int)logits->shape.dim[logits->shape.ndim - 1] : 1;
    /* A loss whose second input is a model input holding class indices into its first input's
     * last dimension (the range its shape rule declares, as cross_entropy's does) scores accuracy
     * on that input, one class per sample. */
    if (loss->n_in > 1 && loss->int_hi[1] == t->n_classes && logits->producer >= 0)
        for (int i = 0; i < g->n_inputs; i++)
            if (g->inputs[i] == loss->in[1] && t->spec[i].numel == 1) t->score_col = i;
    if (t->score_col >= 0) t->logits_layer = g->layers[g->nodes[logits->producer].layer].name;
    return BT_OK;
}

/* The inputs' names, "image (f32 [784]), label (i32 [])", for messages. */
static const char *signature(const bt_trainer *t, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < t->n_spec && used < size; i++) {
        char shape[64];
        used += (size_t)snprintf(buf + used, size - used, "%s%s (%s %s)", i ? ", " : "", t->spec[i].name,
                                 bt_dtype_name(t->spec[i].dtype), bt_shape_format(&t->spec[i].shape, shape, sizeof shape));
    }
    return buf;
}

/* Loads one source into cols (ds holds a classic source's arrays); use (NULL: all) names the
 * columns to hold (npy files per input: the others' files are checked, not read). */
static bt_status load_source(bt_trainer *t, const bt_data_source *src, const char *what, int split,
                             const unsigned char *use, bt_dataset *ds, bt_columns *cols)
{
    char sig[512];
    int classic = t->input_col >= 0;
    if (src->kind == BT_DATA_NPY && src->n_inputs > 0) {
        bt_status st = bt_columns_load_npy(src, t->spec, t->n_spec, use, cols);
        return st == BT_OK ? BT_OK : bt_error_context(st, "%s", what);
    }
    if (src->kind == BT_DATA_SYNTHETIC && !classic)
        return bt_columns_synthetic(t->spec, t->n_spec, src->samples > 0 ? src->samples : 10000, t->opts.seed, split,
                                    cols);
    if (!classic)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s: images: and labels: feed a model with one float input and one integer label; this "
                        "model's inputs are %s: name a file per input (type: npy, inputs: {name: file.npy, ...})",
                        what, signature(t, sig, sizeof sig));
    int64_t numel = t->spec[t->input_col].numel;
    BT_TRY(bt_dataset_load_part(src, numel, t->n_classes, t->opts.seed, split, !use || use[t->input_col], ds));
    return bt_columns_from_dataset(ds, t->spec, t->n_spec, t->input_col, t->label_col, cols);
}

static bt_status engine_host_alloc(void *ctx, size_t bytes, void **out)
{
    return bt_engine_host_alloc(ctx, bytes, out);
}

static void engine_host_free(void *ctx, void *ptr) { bt_engine_host_free(ctx, ptr); }

/* A data file that does not exist is a usage error (the model or a flag names it), not an I/O
 * failure: BT_ERR_INVALID_ARG naming the key. */
static bt_status check_files(const bt_data_source *src, const char *what)
{
    const char *files[2] = {src->images, src->labels}, *keys[2] = {"images", "labels"};
    if (src->kind != BT_DATA_IDX && src->kind != BT_DATA_NPY) return BT_OK;
    struct stat sb;
    for (int i = 0; i < 2; i++)
        if (files[i] && stat(files[i], &sb) != 0)
            return bt_error(BT_ERR_INVALID_ARG, "%s.%s: %s: %s", what, keys[i], files[i], strerror(errno));
    for (int i = 0; i < src->n_inputs; i++)
        if (src->input_files[i] && stat(src->input_files[i], &sb) != 0)
            return bt_error(BT_ERR_INVALID_ARG, "%s.inputs.%s: %s: %s", what, src->input_names[i],
                            src->input_files[i], strerror(errno));
    return BT_OK;
}

static bt_status load_data(bt_trainer *t)
{
    const bt_data_config *d = &t->model->data;
    bt_data_source train = d->train;
    if (train.kind == BT_DATA_NONE)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s has no data.train: give data: {train: {type: npy, inputs: {...}}} (or idx), or ask for "
                        "made-up data with data: synthetic (the baton command: --synthetic)",
                        t->model->path ? t->model->path : "the model");
    BT_TRY(check_files(&train, "data.train"));
    BT_TRY(check_files(&d->eval, "data.eval"));
    /* one rank of a job across processes reads its replica's rows of each global batch, and only
     * the inputs its stage reads; it holds only those inputs (io/columns.h). The evaluation feeds
     * whole batches of them, and every rank scores the shared logits with the labels (score_col). */
    int64_t batch = bt_engine_batch(t->engine), first, rows;
    unsigned char use[BT_COLUMNS_MAX], use_eval[BT_COLUMNS_MAX];
    int all = 1;
    bt_engine_feed_rows(t->engine, &first, &rows);
    for (int c = 0; c < t->n_spec; c++) {
        all &= use[c] = (unsigned char)bt_engine_reads_input(t->engine, t->spec[c].name);
        use_eval[c] = use[c] || c == t->score_col;
    }
    t->local_feeds = rows < batch || !all;
    int eval_on_train = d->eval.kind == BT_DATA_NONE && train.kind != BT_DATA_SYNTHETIC;
    BT_TRY(load_source(t, &train, "data.train", 0, eval_on_train ? use_eval : use, &t->train, &t->train_cols));
    if (d->eval.kind != BT_DATA_NONE) {
        BT_TRY(load_source(t, &d->eval, "data.eval", 1, use_eval, &t->eval, &t->eval_cols));
        t->has_eval = 1;
    } else if (train.kind == BT_DATA_SYNTHETIC) {
        bt_data_source held_out = train;
        held_out.samples = train.samples / 5 > 0 ? train.samples / 5 : 1;
        BT_TRY(load_source(t, &held_out, "data.train", 1, use_eval, &t->eval, &t->eval_cols));
        t->has_eval = 1;
    } else {
        t->eval_on_train = 1;
    }
    int prefetch = t->opts.prefetch > 0 ? t->opts.prefetch : 2;
    t->host_mem = (bt_host_memory){.alloc = engine_host_alloc, .free = engine_host_free, .ctx = t->engine};
    if (t->local_feeds)
        BT_TRY(bt_loader_create_shard(&t->train_cols, batch, first, rows, use, train.shuffle, 1, t->opts.seed, prefetch,
                                      &t->host_mem, &t->train_loader));
    else
        BT_TRY(bt_loader_create_columns(&t->train_cols, batch, train.shuffle, 1, t->opts.seed, prefetch, &t->host_mem,
                                        &t->train_loader));
    const bt_columns *ev = t->has_eval ? &t->eval_cols : &t->train_cols;
    BT_TRY(bt_loader_create_shard(ev, batch, 0, batch, use_eval, 0, 0, 0, prefetch, &t->host_mem, &t->eval_loader));
    return BT_OK;
}

/* Checks the checkpoint's metadata against this run (seed, model, data position) before loading
 * it, then loads it and seeks the data. The run continues at the checkpoint's data position; its
 * step counter (optimizer steps) may be smaller where f16 steps were skipped. */
static bt_status resume(bt_trainer *t, int64_t per_epoch)
{
    const char *path = t->opts.resume;
    bt_checkpoint_meta meta;
    char model[sizeof meta.model];
    int64_t position;
    snprintf(model, sizeof model, "%s", t->model->name ? t->model->name : "");
    BT_TRY(bt_checkpoint_resume_meta(path, t->opts.seed, model, &meta));
    if (meta.batch > 0 && meta.batch != bt_engine_batch(t->engine))
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s was saved by a run of batch %lld, but this run has batch %lld: each step would read "
                        "other samples than the saved data position means, so it cannot continue exactly; resume "
                        "with batch %lld, or start a new run from its weights with --init %s",
                        path, (long long)meta.batch, (long long)bt_engine_batch(t->engine), (long long)meta.batch,
                        path);
    if (meta.batches_per_epoch && meta.batches_per_epoch != per_epoch)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s was saved by a run of %lld batches per epoch, but this run has %lld (were the data or "
                        "the batch size changed?): it cannot continue exactly",
                        path, (long long)meta.batches_per_epoch, (long long)per_epoch);
    if (meta.batch_index >= per_epoch)
        return bt_error(BT_ERR_INVALID_ARG, "%s: data position %lld is past an epoch of %lld batches", path,
                        (long long)meta.batch_index, (long long)per_epoch);
    if (__builtin_mul_overflow(meta.epoch, per_epoch, &position) || __builtin_add_overflow(position, meta.batch_index, &position))
        return bt_error(BT_ERR_INVALID_ARG, "%s: data position epoch %lld is past any run", path, (long long)meta.epoch);
    if (meta.step > position)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s: inconsistent checkpoint: step %lld is past its data position (epoch %lld, batch %lld of "
                        "%lld), though every step reads one batch",
                        path, (long long)meta.step, (long long)meta.epoch, (long long)meta.batch_index,
                        (long long)per_epoch);
    t->first_step = position;
    BT_TRY(bt_checkpoint_resume(t->engine, t->model->graph, path, &meta));
    if (t->opts.checkpoint_dir && strcmp(t->opts.checkpoint_dir, path) == 0) t->saved_step = meta.step;
    return bt_loader_seek(t->train_loader, meta.epoch, meta.batch_index);
}

void bt_trainer_opts_init(bt_trainer_opts *opts) { memset(opts, 0, sizeof *opts); }

/* The bytes of one checkpoint of this model: parameters and optimizer state, and room for the
 * header. */
static size_t checkpoint_bytes(const bt_trainer *t)
{
    size_t per = bt_dtype_size(bt_engine_dtype(t->engine)) * (size_t)(bt_engine_optimizer_slots(t->engine) + 1);
    return (size_t)bt_graph_total_params(t->model->graph) * per + 64 * 1024 +
           (size_t)bt_graph_num_params(t->model->graph) * 512;
}

bt_status bt_trainer_create(const bt_model *model, bt_engine *engine, const bt_trainer_opts *opts,
                            bt_trainer **out)
{
    bt_status st = BT_OK;
    bt_trainer *t = calloc(1, sizeof *t);
    if (!t) return bt_error(BT_ERR_NOMEM, "trainer: out of memory");
    t->model = model;
    t->engine = engine;
    t->opts = *opts;
    t->saved_step = -1;
    BT_TRY_GOTO(st, bt_train_check_opts(opts), fail);
    BT_TRY_GOTO(st, inspect_graph(t), fail);
    /* across processes rank 0 prepares and locks the directory; every stage's owner writes its shard there */
    if (opts->checkpoint_dir && bt_engine_rank(engine) == 0)
        BT_TRY_GOTO(st, bt_checkpoint_dir_prepare(opts->checkpoint_dir, checkpoint_bytes(t), &t->ckpt_lock), fail);
    BT_TRY_GOTO(st, load_data(t), fail);
    int64_t batch = bt_engine_batch(engine);
    size_t real = bt_dtype_size(bt_engine_dtype(engine));
    t->logits = malloc((size_t)batch * (size_t)t->n_classes * real);
    t->losses = malloc((size_t)batch * real);
    if (!t->logits || !t->losses) {
        st = bt_error(BT_ERR_NOMEM, "trainer: out of memory");
        goto fail;
    }
    int64_t per_epoch = bt_loader_batches_per_epoch(t->train_loader);
    t->total_steps = opts->steps > 0 ? opts->steps : (int64_t)(opts->epochs > 0 ? opts->epochs : 1) * per_epoch;
    BT_TRY_GOTO(st, bt_lr_schedule_validate(&model->train.lr_schedule, model->train.optimizer.lr, t->total_steps),
                fail);
    if (opts->init && opts->init_partial) {
        t->has_init_report = 1;
        BT_TRY_GOTO(st, bt_checkpoint_load_weights_partial(engine, model->graph, opts->init, &t->init_report), fail);
    } else if (opts->init) {
        BT_TRY_GOTO(st, bt_checkpoint_load_weights(engine, model->graph, opts->init), fail);
    }
    if (opts->resume) BT_TRY_GOTO(st, resume(t, per_epoch), fail);
    *out = t;
    return BT_OK;
fail:
    bt_trainer_destroy(t);
    return st;
}

void bt_trainer_destroy(bt_trainer *t)
{
    if (!t) return;
    bt_loader_destroy(t->train_loader);
    bt_loader_destroy(t->eval_loader);
    bt_dir_lock_release(t->ckpt_lock);
    bt_columns_free(&t->train_cols);
    bt_columns_free(&t->eval_cols);
    bt_dataset_free(&t->train);
    bt_dataset_free(&t->eval);
    bt_weights_report_free(&t->init_report);
    free(t->logits);
    free(t->losses);
    free(t);
}

int64_t bt_trainer_total_steps(const bt_trainer *t) { return t->total_steps; }
int64_t bt_trainer_first_step(const bt_trainer *t) { return t->first_step; }
int bt_trainer_nothing_to_do(const bt_trainer *t) { return t->opts.resume && t->first_step >= t->total_steps; }
int64_t bt_trainer_train_samples(const bt_trainer *t) { return t->train_cols.n; }
int bt_trainer_evaluates_on_train(const bt_trainer *t) { return t->eval_on_train; }
int64_t bt_trainer_stopped_at(const bt_trainer *t) { return t->stopped_at; }
const bt_weights_report *bt_trainer_init_report(const bt_trainer *t) { return t->has_init_report ? &t->init_report : NULL; }

/* The feeds of batch b (the columns a shard loader left out are left out); returns their count. */
static int feeds_for(const bt_trainer *t, const bt_batch *b, bt_feed *feeds)
{
    int n = 0;
    for (int c = 0; c < t->n_spec; c++)
        if (b->cols[c]) feeds[n++] = (bt_feed){t->spec[c].name, b->cols[c], t->spec[c].dtype};
    return n;
}

static double real_at(const void *p, int64_t i, bt_dtype dtype)
{
    return dtype == BT_F64 ? ((const double *)p)[i] : (double)((const float *)p)[i];
}

void bt_score_logits(const void *logits, bt_dtype dtype, int64_t rows, int classes, const int32_t *labels,
                     double *loss_sum, int64_t *correct)
{
    int C = classes;
    for (int64_t r = 0; r < rows; r++) {
        int best = 0;
        double mx = real_at(logits, r * C, dtype), sum = 0;
        for (int c = 1; c < C; c++)
            if (real_at(logits, r * C + c, dtype) > real_at(logits, r * C + best, dtype)) best = c;
        for (int c = 1; c < C; c++) mx = fmax(mx, real_at(logits, r * C + c, dtype));
        for (int c = 0; c < C; c++) sum += exp(real_at(logits, r * C + c, dtype) - mx);
        *loss_sum += mx + log(sum) - real_at(logits, r * C + labels[r], dtype);
        *correct += best == labels[r];
    }
}

bt_status bt_trainer_evaluate(bt_trainer *t, double *accuracy, double *loss, int64_t *samples)
{
    bt_status st = BT_OK;
    int64_t batches = bt_loader_batches_per_epoch(t->eval_loader), correct = 0, seen = 0;
    double loss_sum = 0;
    int C = t->n_classes;
    bt_dtype dtype = bt_engine_dtype(t->engine);
    BT_TRY(bt_loader_seek(t->eval_loader, 0, 0));
    BT_TRY(bt_engine_set_local_feeds(t->engine, 0)); /* whole batches */
    for (int64_t k = 0; k < batches && st == BT_OK; k++) {
        bt_batch b;
        BT_TRY(bt_loader_next(t->eval_loader, &b));
        bt_feed feeds[BT_COLUMNS_MAX];
        int nf = feeds_for(t, &b, feeds);
        if (t->logits_layer) {
            st = bt_engine_forward_layer(t->engine, feeds, nf, t->logits_layer, t->logits, NULL);
            if (st == BT_OK) bt_score_logits(t->logits, dtype, b.valid, C, b.cols[t->score_col], &loss_sum, &correct);
        } else {
            st = bt_engine_forward(t->engine, feeds, nf, t->losses, NULL);
            for (int64_t r = 0; st == BT_OK && r < b.valid; r++) loss_sum += real_at(t->losses, r, dtype);
        }
        seen += b.valid;
        bt_loader_release(t->eval_loader);
    }
    BT_TRY(st);
    *samples = seen;
    *loss = seen ? loss_sum / (double)seen : 0;
    *accuracy = t->logits_layer && seen ? (double)correct / (double)seen : NAN;
    return BT_OK;
}

/* ---- the shared loop (train_loop.c) ---------------------------------------------------------- */

static bt_status loop_feeds(void *src, int64_t step, bt_feed *feeds, int *n_feeds, int *local)
{
    bt_trainer *t = src;
    (void)step; /* the loader was sought to the data position: its next batch is step's */
    bt_batch b;
    BT_TRY(bt_loader_next(t->train_loader, &b));
    *n_feeds = feeds_for(t, &b, feeds);
    *local = t->local_feeds;
    return BT_OK;
}

static void loop_release(void *src) { bt_loader_release(((bt_trainer *)src)->train_loader); }

static bt_status loop_evaluate(void *src, bt_train_event *ev)
{
    return bt_trainer_evaluate(src, &ev->accuracy, &ev->loss, &ev->samples);
}

bt_status bt_trainer_run(bt_trainer *t, bt_train_callback cb, void *user)
{
    bt_train_loop l = {.engine = t->engine, .model = t->model, .opts = &t->opts, .total_steps = t->total_steps,
                       .first_step = t->first_step, .per_epoch = bt_loader_batches_per_epoch(t->train_loader),
                       .saved_step = t->saved_step, .on_train = t->eval_on_train, .src = t, .feeds = loop_feeds,
                       .release = loop_release, .evaluate = loop_evaluate};
    bt_status st = bt_train_loop_run(&l, cb, user);
    t->stopped_at = l.stopped_at;
    t->saved_step = l.saved_step;
    return st;
}
