/* train/lm.c: the language-model training loop (see lm.h): windows of a token array as the
 * source of the loop both training loops share (train_loop.c). Across processes each rank draws
 * the windows of every global batch as one process does and fills only its replica's rows, and
 * only the inputs its stage reads (the first stage the tokens, the last the labels); the
 * evaluation feeds whole batches, each replica's last stage scores its rows, and the engine
 * shares every per-sample loss, so every rank reports the global mean. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/strutil.h"
#include "core/util.h"
#include "graph/graph_internal.h"
#include "train/checkpoint.h"
#include "io/columns.h"
#include "train/lm.h"
#include "train/train_loop.h"

/* Evaluation windows: at most this many batches, spread evenly over the validation split. */
#define BT_LM_EVAL_BATCHES 200

struct bt_lm {
    const bt_model *model;
    bt_engine *engine;
    bt_trainer_opts opts;
    const char *idx_name, *label_name;
    int seq_len;
    int64_t batch, total_steps;
    bt_vocab vocab;
    int have_vocab;
    uint16_t *train, *val; /* train owns the buffer when val points into it */
    size_t n_train, n_val;
    int val_owned;
    int32_t *idx, *label;  /* (batch, T) */
    bt_dir_lock *ckpt_lock; /* held while checkpoint_dir is ours */
    int64_t stopped_at;     /* the step after which opts.stop ended the run, or 0 */
    int64_t first_step;     /* steps already taken (a resumed run's data position) */
    int64_t per_epoch;      /* steps per pass over the training split (its windows / batch, + 1) */
    bt_weights_report init_report;
    int has_init_report;
    double *losses;        /* (batch) */
    int64_t first_row, rows; /* this rank's rows of a global batch (bt_engine_feed_rows) */
    int read_idx, read_label; /* whether this rank's stage reads the tokens, the labels */
    int local_feeds;       /* the training feeds hold this rank's rows and inputs only */
};

int bt_lm_wanted(const bt_model *m)
{
    return m->data.train.kind == BT_DATA_TEXT || m->data.train.kind == BT_DATA_TOKENS;
}

static bt_status load_tokens_from(bt_lm *t, const bt_data_source *src, int build, uint16_t **out, size_t *n);

/* Tokens of a source: a text file through the vocabulary (built from it when build is set), or
 * a token shard. A file that cannot be read or is not what its type says is a bad argument
 * (BT_ERR_INVALID_ARG: `baton run` exits 2), as for every data file. */
static bt_status load_tokens(bt_lm *t, const bt_data_source *src, int build, uint16_t **out, size_t *n)
{
    bt_status st = load_tokens_from(t, src, build, out, n);
    if (st == BT_ERR_IO) st = bt_error(BT_ERR_INVALID_ARG, "%s", bt_last_error()); /* the message kept */
    return st;
}

static bt_status load_tokens_from(bt_lm *t, const bt_data_source *src, int build, uint16_t **out, size_t *n)
{
    if (src->kind == BT_DATA_TOKENS) return bt_tokens_read_bin(src->path, out, n);
    if (src->kind != BT_DATA_TEXT)
        return bt_error(BT_ERR_INVALID_ARG, "data.eval: a language model evaluates on type text or tokens");
    unsigned char *text = NULL;
    BT_TRY(bt_text_read(src->path, &text, n));
    if (build) {
        bt_vocab_build(text, *n, src->bytes, &t->vocab);
        t->have_vocab = 1;
    }
    *out = malloc(*n * sizeof **out + 2);
    bt_status st = *out ? bt_vocab_encode(&t->vocab, text, *n, *out) : bt_error(BT_ERR_NOMEM, "out of memory");
    if (st != BT_OK) bt_error_context(st, "%s", src->path);
    free(text);
    return st;
}

/* The fewest token ids an integer input of the model takes (embedding's num: int_hi), and the
 * layer that takes them; 0 when no input declares a range. */
static int64_t token_limit(const bt_graph *g, const char **layer)
{
    int64_t limit = 0;
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < g->nodes[n].n_in; k++) {
            const int64_t hi = g->nodes[n].int_hi[k];
            if (g->values[g->nodes[n].in[k]].dtype == BT_I32 && hi > 0 && (limit == 0 || hi < limit)) {
                limit = hi;
                *layer = g->layers[g->nodes[n].layer].name;
            }
        }
    return limit;
}

/* The token input, the label input and T, from the graph: two i32 inputs shaped [T], the label
 * the loss's second input. */
static bt_status inspect(bt_lm *t)
{
    const bt_graph *g = t->model->graph;
    if (!bt_graph_is_trainable(g))
        return bt_error(BT_ERR_MODEL, "%s: the last layer is not a loss, so there is nothing to train", t->model->path);
    const bt_node *loss = &g->nodes[g->n_nodes - 1];
    if (g->n_inputs != 2 || loss->n_in != 2)
        return bt_error(BT_ERR_MODEL, "%s: text data feeds a model with two i32 inputs (tokens [T], labels [T] read "
                        "by the loss); this one has %d inputs", t->model->path, g->n_inputs);
    for (int i = 0; i < 2; i++) {
        const bt_value *v = &g->values[g->inputs[i]];
        if (v->dtype != BT_I32 || v->shape.ndim != 1)
            return bt_error(BT_ERR_MODEL, "%s: text data needs i32 inputs shaped [T]; input '%s' is not", t->model->path,
                            v->name);
        if (g->inputs[i] == loss->in[1])
            t->label_name = v->name;
        else
            t->idx_name = v->name;
        t->seq_len = (int)v->shape.dim[0];
    }
    if (!t->idx_name || !t->label_name)
        return bt_error(BT_ERR_MODEL, "%s: the loss's second input must be a model input (the labels)", t->model->path);
    /* the vocabulary must fit every consumer's declared range (embedding's num) */
    const char *layer = NULL;
    const int64_t limit = token_limit(g, &layer);
    if (limit > 0 && t->vocab.size > limit)
        return bt_error(BT_ERR_MODEL, "%s: the text has %d distinct tokens but '%s' takes %lld (raise its num or "
                        "out to at least %d)", t->model->path, t->vocab.size, layer, (long long)limit, t->vocab.size);
    return BT_OK;
}

bt_status bt_lm_check_vocab_file(const bt_model *m, const bt_vocab *v, const char *path)
{
    const bt_graph *g = m->graph;
    const char *layer = NULL;
    const int64_t limit = token_limit(g, &layer);
    if (limit > 0 && v->size > limit)
        return bt_error(BT_ERR_INVALID_ARG, "%s:1: %d entries, more than the %lld token ids the model's '%s' takes "
                        "(a vocabulary of another model?)", path, v->size, (long long)limit, layer);
    const bt_node *loss = g->n_nodes ? &g->nodes[g->n_nodes - 1] : NULL;
    const bt_value *logits = loss && loss->n_in == 2 ? &g->values[loss->in[0]] : NULL;
    if (logits && logits->shape.ndim >= 1 && v->size > logits->shape.dim[logits->shape.ndim - 1])
        return bt_error(BT_ERR_INVALID_ARG, "%s:1: %d entries, more than the %lld logits of the model's '%s'", path,
                        v->size, (long long)logits->shape.dim[logits->shape.ndim - 1], logits->name);
    return BT_OK;
}

/* Loads and splits the tokens and checks them against the model (t->model, t->batch set). */
static bt_status load_data(bt_lm *t)
{
    const bt_model *m = t->model;
    const bt_data_source *src = &m->data.train;
    size_t n = 0;
    uint16_t *all = NULL;
    BT_TRY(load_tokens(t, src, 1, &all, &n));
    t->train = all;
    if (m->data.eval.kind != BT_DATA_NONE) {
        t->n_train = n;
        t->val_owned = 1;
        BT_TRY(load_tokens(t, &m->data.eval, 0, &t->val, &t->n_val));
    } else {
        t->n_val = (size_t)((double)n * src->val_fraction);
        t->n_train = n - t->n_val;
        t->val = all + t->n_train;
    }
    if (!t->have_vocab) { /* token shards: the vocabulary is whatever the model takes */
        t->vocab.size = 0;
        for (size_t i = 0; i < n; i++) t->vocab.size = all[i] + 1 > t->vocab.size ? all[i] + 1 : t->vocab.size;
    }
    BT_TRY(inspect(t));
    if (t->n_train <= (size_t)t->seq_len + 1 || t->n_val <= (size_t)t->seq_len + 1) {
        return bt_error(BT_ERR_INVALID_ARG, "%s: %zu training and %zu validation tokens; each needs more than T + 1 = %d",
                        src->path, t->n_train, t->n_val, t->seq_len + 1);
    }
    return BT_OK;
}

char *bt_lm_vocab_path(const char *checkpoint)
{
    size_t n = strlen(checkpoint);
    if ((n > 12 && strcmp(checkpoint + n - 12, ".safetensors") == 0) ||
        (n > 11 && strcmp(checkpoint + n - 11, ".index.json") == 0)) {
        const char *slash = strrchr(checkpoint, '/');
        return slash ? bt_strfmt("%.*s/vocab.txt", (int)(slash - checkpoint), checkpoint) : bt_strdup("vocab.txt");
    }
    return bt_strfmt("%s/vocab.txt", checkpoint);
}

/* " ('c')" for a printable byte, "" otherwise: into buf. */
static const char *show_byte(int b, char *buf, size_t size)
{
    if (b > 0x20 && b < 0x7f && b != '\'') snprintf(buf, size, " ('%c')", b);
    else buf[0] = '\0';
    return buf;
}

/* The vocabulary recorded at path (read strictly) is the text's, or the first entry that differs
 * is named: BT_ERR_INVALID_ARG, prefixed by what (which record, and why it must match). */
static bt_status same_vocab(const bt_lm *t, const char *path, const char *what)
{
    bt_vocab rec;
    bt_status st = bt_vocab_load(path, &rec);
    if (st != BT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", bt_last_error());
        return bt_error(BT_ERR_INVALID_ARG, "%s: %s", what, msg);
    }
    const bt_vocab *v = &t->vocab;
    int k = 0;
    while (k < rec.size && k < v->size && rec.byte[k] == v->byte[k]) k++;
    if (k == rec.size && k == v->size) return BT_OK;
    char a[16], b[16];
    const char *text = t->model->data.train.path;
    if (k < rec.size && k < v->size)
        return bt_error(BT_ERR_INVALID_ARG, "%s: %s differs from the vocabulary of %s: entry %d is byte 0x%02x%s there, "
                        "0x%02x%s in the text", what, path, text, k, rec.byte[k], show_byte(rec.byte[k], a, sizeof a),
                        v->byte[k], show_byte(v->byte[k], b, sizeof b));
    if (k < rec.size)
        return bt_error(BT_ERR_INVALID_ARG, "%s: %s differs from the vocabulary of %s: entry %d is byte 0x%02x%s there, "
                        "and the text has only %d entries", what, path, text, k, rec.byte[k],
                        show_byte(rec.byte[k], a, sizeof a), v->size);
    return bt_error(BT_ERR_INVALID_ARG, "%s: %s differs from the vocabulary of %s: the text's entry %d (byte 0x%02x%s) "
                    "is not there (it has %d entries)", what, path, text, k, v->byte[k],
                    show_byte(v->byte[k], b, sizeof b), rec.size);
}

/* The resumed checkpoint's vocabulary (vocab.txt beside it, which its run wrote before step 1) is
 * the text's: the same ids must name the same bytes, or the weights would read another text. */
static bt_status resume_vocab(const bt_lm *t)
{
    char *path = bt_lm_vocab_path(t->opts.resume);
    if (!path) return bt_error(BT_ERR_NOMEM, "out of memory");
    struct stat sb;
    bt_status st = BT_OK;
    if (stat(path, &sb) != 0)
        st = bt_error(BT_ERR_INVALID_ARG, "%s has no vocab.txt beside it (%s: %s): the vocabulary its run trained with "
                      "is unknown, so the text's cannot be checked against it; copy that run's vocab.txt there",
                      t->opts.resume, path, strerror(errno));
    else
        st = same_vocab(t, path, "the text's vocabulary must be the one the resumed run trained with");
    free(path);
    return st;
}

/* Rank 0, checkpoint_dir given: DIR/vocab.txt is the text's vocabulary. Written (atomically) when
 * missing, before step 1, so every checkpoint in DIR has it beside it; never overwritten when it
 * holds another (the checkpoints already there were trained with that one). */
static bt_status claim_vocab(const bt_lm *t)
{
    if (!t->have_vocab || !t->opts.checkpoint_dir || bt_engine_rank(t->engine) != 0) return BT_OK;
    char *path = bt_strfmt("%s/vocab.txt", t->opts.checkpoint_dir);
    if (!path) return bt_error(BT_ERR_NOMEM, "out of memory");
    struct stat sb;
    bt_status st = stat(path, &sb) != 0 ? bt_vocab_save(&t->vocab, path)
                                        : same_vocab(t, path, "the checkpoint directory's vocab.txt is never "
                                                     "overwritten (give another --checkpoint-dir, or remove it)");
    free(path);
    return st;
}

/* Continues exactly from a checkpoint: a step's windows depend only on the seed and the step, so
 * the data position is the step count; the weights, optimizer state and step counter come from
 * the checkpoint. What would change the windows (seed, batch, the training split's size), the
 * ids' bytes (the vocabulary) or the model is refused, naming it. */
static bt_status resume(bt_lm *t)
{
    const char *path = t->opts.resume;
    bt_checkpoint_meta meta;
    BT_TRY(bt_checkpoint_resume_meta(path, t->opts.seed, t->model->name, &meta));
    if (meta.batch != t->batch)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s was saved by a run of batch %lld, but this run has batch %lld: each step would draw "
                        "other windows, so it cannot continue exactly; resume with batch %lld, or start a new run "
                        "from its weights with --init %s",
                        path, (long long)meta.batch, (long long)t->batch, (long long)meta.batch, path);
    if (meta.batches_per_epoch != t->per_epoch)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s was saved by a run of %lld steps per pass over its training split, but this run has %lld "
                        "(was the text changed?): it cannot continue exactly",
                        path, (long long)meta.batches_per_epoch, (long long)t->per_epoch);
    if (t->have_vocab) BT_TRY(resume_vocab(t));
    t->first_step = meta.epoch * meta.batches_per_epoch + meta.batch_index;
    return bt_checkpoint_resume(t->engine, t->model->graph, path, &meta);
}

bt_status bt_lm_create(const bt_model *m, bt_engine *e, const bt_trainer_opts *opts, bt_lm **out)
{
    *out = NULL;
    BT_TRY(bt_train_check_opts(opts));
    bt_lm *t = calloc(1, sizeof *t);
    if (!t) return bt_error(BT_ERR_NOMEM, "out of memory");
    t->model = m;
    t->engine = e;
    t->opts = *opts;
    t->batch = bt_engine_batch(e); /* --batch beats train.batch */
    bt_status st = BT_OK;
    BT_TRY_GOTO(st, load_data(t), fail);
    bt_engine_feed_rows(e, &t->first_row, &t->rows);
    t->read_idx = bt_engine_reads_input(e, t->idx_name);
    t->read_label = bt_engine_reads_input(e, t->label_name);
    t->local_feeds = t->rows < t->batch || !t->read_idx || !t->read_label;
    t->per_epoch = (int64_t)(t->n_train / ((size_t)t->seq_len * (size_t)t->batch) + 1);
    t->total_steps = opts->steps > 0 ? opts->steps : (int64_t)(opts->epochs > 0 ? opts->epochs : 1) * t->per_epoch;
    t->idx = malloc((size_t)t->batch * (size_t)t->seq_len * sizeof *t->idx);
    t->label = malloc((size_t)t->batch * (size_t)t->seq_len * sizeof *t->label);
    t->losses = malloc((size_t)t->batch * sizeof *t->losses);
    if (!t->idx || !t->label || !t->losses) {
        st = bt_error(BT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (opts->init && opts->init_partial) {
        t->has_init_report = 1;
        BT_TRY_GOTO(st, bt_checkpoint_load_weights_partial(e, m->graph, opts->init, &t->init_report), fail);
    } else if (opts->init) {
        BT_TRY_GOTO(st, bt_checkpoint_load_weights(e, m->graph, opts->init), fail);
    }
    /* the directory is created, tested and locked before step 1, as the trainer does (across
     * processes by rank 0; every stage's owner writes its shard there) */
    if (opts->checkpoint_dir && bt_engine_rank(e) == 0)
        BT_TRY_GOTO(st, bt_checkpoint_dir_open(opts->checkpoint_dir, &t->ckpt_lock), fail);
    if (opts->resume) BT_TRY_GOTO(st, resume(t), fail);
    BT_TRY_GOTO(st, claim_vocab(t), fail);
    *out = t;
    return BT_OK;
fail:
    bt_lm_destroy(t);
    return st;
}

void bt_lm_destroy(bt_lm *t)
{
    if (!t) return;
    bt_dir_lock_release(t->ckpt_lock);
    bt_weights_report_free(&t->init_report);
    free(t->train);
    if (t->val_owned) free(t->val);
    free(t->idx);
    free(t->label);
    free(t->losses);
    free(t);
}

int64_t bt_lm_total_steps(const bt_lm *t) { return t->total_steps; }
int64_t bt_lm_stopped_at(const bt_lm *t) { return t->stopped_at; }
int64_t bt_lm_first_step(const bt_lm *t) { return t->first_step; }
const bt_weights_report *bt_lm_init_report(const bt_lm *t) { return t->has_init_report ? &t->init_report : NULL; }

void bt_lm_sizes(const bt_lm *t, int64_t *train_tokens, int64_t *val_tokens, int *vocab)
{
    *train_tokens = (int64_t)t->n_train;
    *val_tokens = (int64_t)t->n_val;
    *vocab = t->vocab.size;
}

static void fill_window(const bt_lm *t, const uint16_t *tok, size_t at, int b)
{
    for (int k = 0; k < t->seq_len; k++) {
        t->idx[b * t->seq_len + k] = tok[at + (size_t)k];
        t->label[b * t->seq_len + k] = tok[at + (size_t)k + 1];
    }
}

/* The evaluation's batches: one window per T tokens of the validation split, whole batches, at
 * most BT_LM_EVAL_BATCHES, at least one. */
static int64_t eval_batches(const bt_lm *t)
{
    const size_t starts = t->n_val - (size_t)t->seq_len - 1;
    int64_t windows = (int64_t)(starts / (size_t)t->seq_len) + 1, batches = windows / t->batch;
    if (batches > BT_LM_EVAL_BATCHES) batches = BT_LM_EVAL_BATCHES;
    return batches < 1 ? 1 : batches;
}

/* Where evaluation window w of count starts: spread evenly over the validation split. */
static size_t eval_start(const bt_lm *t, int64_t w, int64_t count)
{
    const size_t starts = t->n_val - (size_t)t->seq_len - 1;
    return (size_t)((double)w * (double)starts / (double)count);
}

bt_status bt_lm_eval_columns(const bt_model *m, int64_t batch, const bt_column *spec, int n_spec, bt_columns *out)
{
    memset(out, 0, sizeof *out);
    bt_lm *t = calloc(1, sizeof *t);
    if (!t) return bt_error(BT_ERR_NOMEM, "out of memory");
    t->model = m;
    t->batch = batch;
    bt_status st = BT_OK;
    BT_TRY_GOTO(st, load_data(t), done);
    if (n_spec != 2) {
        st = bt_error(BT_ERR_MODEL, "%s: text data feeds two inputs; %d were asked for", m->path, n_spec);
        goto done;
    }
    const int64_t count = eval_batches(t) * batch;
    const size_t per = (size_t)count * (size_t)t->seq_len;
    out->n_cols = n_spec;
    out->n = count;
    for (int c = 0; c < n_spec; c++) {
        out->col[c] = spec[c];
        out->col[c].owned = 1;
        out->col[c].data = malloc(per * sizeof(int32_t));
        if (!out->col[c].data || spec[c].dtype != BT_I32 || spec[c].numel != t->seq_len) {
            st = out->col[c].data ? bt_error(BT_ERR_MODEL, "%s: input '%s' is not i32 [%d]", m->path, spec[c].name, t->seq_len)
                                  : bt_error(BT_ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    int label = strcmp(spec[1].name, t->label_name) == 0;
    int32_t *idx = out->col[label ? 0 : 1].data, *lab = out->col[label ? 1 : 0].data;
    for (int64_t w = 0; w < count; w++) {
        const size_t at = eval_start(t, w, count);
        for (int k = 0; k < t->seq_len; k++) {
            idx[(size_t)w * (size_t)t->seq_len + (size_t)k] = t->val[at + (size_t)k];
            lab[(size_t)w * (size_t)t->seq_len + (size_t)k] = t->val[at + (size_t)k + 1];
        }
    }
done:
    if (st != BT_OK) bt_columns_free(out);
    bt_lm_destroy(t);
    return st;
}

bt_status bt_lm_evaluate(bt_lm *t, double *loss, int64_t *tokens)
{
    const int64_t batches = eval_batches(t), count = batches * t->batch;
    double sum = 0;
    bt_feed feeds[] = {{t->idx_name, t->idx, BT_I32}, {t->label_name, t->label, BT_I32}};
    bt_dtype dt = bt_engine_dtype(t->engine);
    for (int64_t q = 0; q < batches; q++) {
        for (int b = 0; b < t->batch; b++) {
            const int64_t w = q * t->batch + b; /* window w of count, spread over the split */
            fill_window(t, t->val, eval_start(t, w, count), b);
        }
        bt_step_result r;
        void *out = t->losses;
        float lf[1024];
        if (dt == BT_F32 && t->batch <= 1024) out = lf;
        BT_TRY(bt_engine_forward(t->engine, feeds, 2, out, &r));
        for (int b = 0; b < t->batch; b++) sum += dt == BT_F32 && t->batch <= 1024 ? (double)lf[b] : t->losses[b];
    }
    *loss = sum / (double)count; /* each sample's loss is its mean over T positions */
    *tokens = count; /* windows (samples) of T tokens each */
    if (!isfinite(*loss)) return bt_error(BT_ERR_NUMERIC, "the validation loss is not finite (%g)", *loss);
    return BT_OK;
}

/* ---- the shared loop (train_loop.c) ---------------------------------------------------------- */

/* Step step's windows (0-based; seeded by the seed and step + 1): every rank draws the global
 * batch's offsets in order and fills its own rows [first_row, first_row + rows) at the start of
 * the buffers (with whole feeds, every row). */
static bt_status loop_feeds(void *src, int64_t step, bt_feed *feeds, int *n_feeds, int *local)
{
    bt_lm *t = src;
    const size_t starts = t->n_train - (size_t)t->seq_len - 1;
    uint64_t rng = bt_mix64(t->opts.seed ^ (0x6c6dULL + (uint64_t)(step + 1) * 0x9e3779b97f4a7c15ULL));
    const int64_t first = t->local_feeds ? t->first_row : 0, rows = t->local_feeds ? t->rows : t->batch;
    for (int64_t b = 0; b < first; b++) (void)bt_rng_next(&rng); /* the other replicas' rows before ours */
    for (int64_t b = 0; b < rows; b++) fill_window(t, t->train, (size_t)(bt_rng_next(&rng) % starts), (int)b);
    int n = 0;
    if (!t->local_feeds || t->read_idx) feeds[n++] = (bt_feed){t->idx_name, t->idx, BT_I32};
    if (!t->local_feeds || t->read_label) feeds[n++] = (bt_feed){t->label_name, t->label, BT_I32};
    *n_feeds = n;
    *local = t->local_feeds;
    return BT_OK;
}

static bt_status loop_evaluate(void *src, bt_train_event *ev)
{
    bt_lm *t = src;
    BT_TRY(bt_engine_set_local_feeds(t->engine, 0)); /* whole batches: every rank gets every loss */
    return bt_lm_evaluate(t, &ev->loss, &ev->samples);
}

/* vocab.txt beside the checkpoint (rank 0), for `baton generate` and --resume: claimed before step
 * 1; written again if it went missing since, never replaced. */
static bt_status loop_saved(void *src, int64_t step)
{
    (void)step;
    return claim_vocab(src);
}

bt_status bt_lm_run(bt_lm *t, bt_train_callback cb, void *user)
{
    bt_train_loop l = {.engine = t->engine, .model = t->model, .opts = &t->opts, .total_steps = t->total_steps,
                       .first_step = t->first_step, .per_epoch = t->per_epoch, .saved_step = -1, .src = t,
                       .feeds = loop_feeds, .evaluate = loop_evaluate, .saved = loop_saved};
    bt_status st = bt_train_loop_run(&l, cb, user);
    t->stopped_at = l.stopped_at;
    return st;
}
