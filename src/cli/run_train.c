/* cli/run_train.c: the display of `baton run` for training on data: a configuration table at the
 * start, a progress bar on a terminal or one plain line per step otherwise (loss, lr, step ms,
 * samples/s, or tokens/s for a language model; bubble), evaluation and checkpoint lines, and a final summary with accuracy,
 * throughput and memory per stage. With --log-format jsonl every line is a JSON object instead
 * (a number that is not finite is written null). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run.h"
#include "core/strutil.h"
#include "core/util.h"
#include "cpu/blas.h"
#include "cpu/conv_onednn.h"
#include "optim/loss_scale.h"
#include "train/lm.h"
#include "train/trainer.h"

typedef struct display {
    const bt_run_opts *o;
    int64_t first_step;
    double *step_ms;
    int64_t n_steps;
    double loss_avg;
    int have_avg;
    double last_accuracy, last_eval_loss;
    int evaluated;
    const bt_engine *e;
    bt_cli_metrics *mt;   /* stage shares per step, and the TensorBoard file */
    double t0_ms;         /* when the first step of this run started (for the bar's ETA) */
    int64_t tokens;       /* a language model's tokens per sample (seq_len): its step lines give
                             tokens/s; 0 for other models (samples/s) */
} display;

static const char *optimizer_text(const bt_optimizer_config *c, char *buf, size_t size)
{
    if (c->kind == BT_OPT_ADAMW)
        snprintf(buf, size, "adamw lr %g, betas (%g, %g), weight decay %g", c->lr, c->beta1, c->beta2,
                 c->weight_decay);
    else
        snprintf(buf, size, "sgd lr %g, momentum %g%s, weight decay %g", c->lr, c->momentum,
                 c->nesterov ? " (nesterov)" : "", c->weight_decay);
    return buf;
}

static const char *data_text(const bt_data_source *d, char *buf, size_t size)
{
    switch (d->kind) {
    case BT_DATA_NONE: snprintf(buf, size, "none"); break;
    case BT_DATA_SYNTHETIC: snprintf(buf, size, "synthetic, %lld samples", (long long)d->samples); break;
    case BT_DATA_IDX: snprintf(buf, size, "idx %s", d->images); break;
    case BT_DATA_NPY:
        if (d->n_inputs > 0) {
            size_t used = (size_t)snprintf(buf, size, "npy");
            for (int i = 0; i < d->n_inputs && used < size; i++)
                used += (size_t)snprintf(buf + used, size - used, "%s %s: %s", i ? "," : "", d->input_names[i],
                                         d->input_files[i]);
        } else {
            snprintf(buf, size, "npy %s", d->images);
        }
        break;
    case BT_DATA_TEXT: snprintf(buf, size, "text %s (%s vocabulary)", d->path, d->bytes ? "byte" : "character"); break;
    case BT_DATA_TOKENS: snprintf(buf, size, "tokens %s", d->path); break;
    }
    return buf;
}

static void print_config(const bt_run_opts *o, const bt_model *m, const bt_engine *e, const bt_engine_params *p,
                         const bt_trainer *t)
{
    char buf[512], num[32];
    bt_cli_record(o, json_pack("{s:b, s:s, s:i, s:i, s:s, s:I, s:I, s:I, s:I}", "config", 1, "model",
                               m->name ? m->name : "", "stages", bt_engine_num_stages(e), "microbatches",
                               p->parallel.microbatches, "schedule", bt_schedule_name(p->parallel.schedule),
                               "batch", (json_int_t)p->batch, "steps", (json_int_t)bt_trainer_total_steps(t),
                               "train_samples", (json_int_t)bt_trainer_train_samples(t), "params",
                               (json_int_t)bt_graph_total_params(m->graph)));
    if (o->jsonl) return;
    char name[256];
    printf("baton run %s\n", bt_cli_escape(m->path, buf, sizeof buf));
    printf("  model         %s, %d layers, %s parameters\n", bt_cli_escape(m->name ? m->name : "?", name, sizeof name),
           bt_graph_num_layers(m->graph), bt_cli_group(bt_graph_total_params(m->graph), num, sizeof num));
    for (int s = 0; s < bt_engine_num_stages(e); s++) {
        bt_stage_info si;
        bt_layer_info first, last;
        bt_engine_stage(e, s, &si);
        bt_graph_layer(m->graph, si.first_layer, &first);
        bt_graph_layer(m->graph, si.first_layer + si.n_layers - 1, &last);
        printf("  stage %-7d %s: %s%s%s (%s parameters)\n", s, si.device, first.name, si.n_layers > 1 ? " .. " : "",
               si.n_layers > 1 ? last.name : "", bt_cli_group(si.n_params, num, sizeof num));
    }
    printf("  pipeline      %s", bt_schedule_name(p->parallel.schedule));
    if (p->parallel.virtual_stages > 1) printf(" (virtual %d stages per device)", p->parallel.virtual_stages);
    printf(", %d micro-batches of %lld\n", p->parallel.microbatches,
           (long long)(p->batch / p->parallel.microbatches));
    printf("  optimizer     %s\n", optimizer_text(&p->optimizer, buf, sizeof buf));
    const char *lr[] = {"constant", "step", "cosine"};
    printf("  lr schedule   %s", lr[p->lr_schedule.kind]);
    if (p->lr_schedule.warmup_steps) printf(", %lld warm-up steps", (long long)p->lr_schedule.warmup_steps);
    printf("%s\n", p->clip_norm > 0 ? ", gradients clipped by global norm" : "");
    printf("  data          %s (%lld samples)\n", data_text(&m->data.train, buf, sizeof buf),
           (long long)bt_trainer_train_samples(t));
    if (m->data.eval.kind != BT_DATA_NONE) printf("  eval          %s\n", data_text(&m->data.eval, buf, sizeof buf));
    else if (bt_trainer_evaluates_on_train(t))
        printf("  eval          the training set (no data.eval: the accuracy is not a held-out one)\n");
    printf("  steps         %lld of batch %lld%s\n", (long long)bt_trainer_total_steps(t), (long long)p->batch,
           bt_trainer_first_step(t) ? " (resumed)" : "");
    printf("  blas          %s\n", bt_blas_describe());
    int cpu_stages = 0;
    for (int s = 0; s < bt_engine_num_stages(e); s++) {
        bt_stage_info si;
        bt_engine_stage(e, s, &si);
        cpu_stages += strncmp(si.device, "cpu", 3) == 0;
    }
    if (cpu_stages) printf("  f32 on cpu    %s\n", bt_cpu_f32_describe());
    if (cpu_stages) printf("  conv on cpu   %s\n", bt_cpu_conv_describe());
    if (p->precision == BT_BF16 && cpu_stages)
        printf("  bf16 on cpu   %s\n", bt_cpu_bf16_describe());
    printf("\n");
}

/* "step N skipped: gradients overflowed at loss scale S; scale now S/2" (the scaler halves it, to 1
 * at least). */
static const char *skip_text(int64_t step, const bt_step_result *r, char *buf, size_t size)
{
    bt_loss_scale_format_skip(step, r->loss_scale, fmax(1.0, r->loss_scale / 2), buf, size);
    return buf;
}

static void on_event(const bt_train_event *ev, void *user)
{
    display *d = user;
    const bt_run_opts *o = d->o;
    if (ev->kind == BT_EV_STEP) {
        const bt_step_result *r = ev->result;
        char msg[160];
        bt_cli_tracer_step(o->tracer);
        bt_cli_metrics_step(d->mt, d->e, ev->step, r);
        d->step_ms[d->n_steps++] = r->step_ms;
        d->loss_avg = d->have_avg ? 0.95 * d->loss_avg + 0.05 * r->loss : r->loss;
        d->have_avg = 1;
        int shown = bt_cli_log_step(o, ev->step, d->first_step, ev->total_steps);
        if (shown && (o->jsonl || o->log)) {
            json_t *rec = json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "step", (json_int_t)ev->step, "epoch",
                                    (json_int_t)ev->epoch, "loss", bt_cli_json_num(r->loss), "lr",
                                    bt_cli_json_num(r->lr), "grad_norm", bt_cli_json_num(r->grad_norm), "step_ms",
                                    bt_cli_json_num(r->step_ms), "samples_per_s", bt_cli_json_num(r->samples_per_s),
                                    "bubble", bt_cli_json_num(r->bubble));
            if (rec && d->tokens > 0)
                json_object_set_new(rec, "tokens_per_s", bt_cli_json_num(r->samples_per_s * (double)d->tokens));
            if (rec && r->loss_scale != 1) {
                json_object_set_new(rec, "loss_scale", bt_cli_json_num(r->loss_scale));
                json_object_set_new(rec, "skipped", json_boolean(r->skipped));
            }
            json_t *stages = bt_cli_metrics_json(d->mt);
            if (rec && stages) json_object_set_new(rec, "stages", stages);
            else json_decref(stages);
            bt_cli_record(o, rec);
        }
        if (o->jsonl) {
        } else if (o->progress) {
            if (r->skipped) printf("\n%s\n", skip_text(ev->step, r, msg, sizeof msg));
            bt_cli_progress(ev->step, d->first_step, ev->total_steps, ev->epoch, r, d->loss_avg,
                            (bt_now_ms() - d->t0_ms) / 1000, d->tokens);
        } else if (shown || r->skipped) {
            if (r->skipped) printf("%s\n", skip_text(ev->step, r, msg, sizeof msg));
            if (shown)
                printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %.2f ms  %.0f %s/s  bubble %.1f%%\n",
                       (long long)ev->step, (long long)ev->total_steps, (long long)ev->epoch + 1, r->loss, r->lr,
                       r->step_ms, r->samples_per_s * (double)(d->tokens > 0 ? d->tokens : 1),
                       d->tokens > 0 ? "tokens" : "samples", 100 * r->bubble);
        }
    } else if (ev->kind == BT_EV_EVAL) {
        d->last_accuracy = ev->accuracy;
        d->last_eval_loss = ev->loss;
        d->evaluated = 1;
        bt_cli_metrics_eval(d->mt, d->e, ev->step, ev->loss, ev->accuracy);
        json_t *rec = json_pack("{s:b, s:I, s:o}", "eval", 1, "step", (json_int_t)ev->step, "loss",
                                bt_cli_json_num(ev->loss));
        if (rec && !isnan(ev->accuracy)) json_object_set_new(rec, "accuracy", bt_cli_json_num(ev->accuracy));
        if (rec) {
            json_object_set_new(rec, "samples", json_integer((json_int_t)ev->samples));
            json_object_set_new(rec, "eval_ms", bt_cli_json_num(ev->eval_ms));
            if (ev->on_train) json_object_set_new(rec, "on_train", json_true());
        }
        bt_cli_record(o, rec);
        if (!o->jsonl) {
            if (o->progress && ev->step != ev->total_steps) printf("\n");
            printf("eval  step %lld%s: ", (long long)ev->step,
                   ev->on_train ? " (on the training set: the model has no data.eval)" : "");
            if (!isnan(ev->accuracy)) printf("accuracy %.2f%%  ", 100 * ev->accuracy);
            printf("loss %.4f  (%lld samples, %.0f ms)\n", ev->loss, (long long)ev->samples, ev->eval_ms);
        }
    } else if (ev->kind == BT_EV_CHECKPOINT) {
        bt_cli_record(o, json_pack("{s:s, s:I}", "checkpoint", ev->path, "step", (json_int_t)ev->step));
        if (!o->jsonl) {
            char shown[1024];
            if (o->progress && ev->step != ev->total_steps) printf("\n");
            printf("checkpoint step %lld -> %s\n", (long long)ev->step, bt_cli_escape(ev->path, shown, sizeof shown));
        }
    }
    fflush(stdout);
}

static void print_stopped(const bt_run_opts *o, int sig, int64_t step, int64_t total, const char *dir,
                          const char *continue_with);
static void print_init_report(const bt_run_opts *o, const bt_weights_report *r);

/* A language model on text (data: type text or tokens, train/lm.c): the same display. */
static int train_lm(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p,
                    const bt_trainer_opts *to)
{
    bt_lm *t = NULL;
    bt_status st = bt_lm_create(m, e, to, &t);
    if (st != BT_OK) return bt_cli_fail("run", st);
    if (bt_lm_first_step(t) >= bt_lm_total_steps(t)) {
        fprintf(stderr,
                "baton run: nothing to do: %s is at step %lld and this run has %lld steps; the checkpoint is "
                "left as it is (pass --steps above %lld to train on)\n",
                o->resume, (long long)bt_lm_first_step(t), (long long)bt_lm_total_steps(t),
                (long long)bt_lm_first_step(t));
        bt_lm_destroy(t);
        return BT_EXIT_OK;
    }
    int64_t n_train, n_val;
    int vocab;
    bt_lm_sizes(t, &n_train, &n_val, &vocab);
    bt_engine_set_total_steps(e, bt_lm_total_steps(t));
    char buf[512];
    if (!o->jsonl)
        printf("training %s: %d stage%s, %d micro-batch%s, schedule %s, batch %lld, %s: %lld training and %lld "
               "validation tokens, vocabulary %d\n",
               m->name, bt_engine_num_stages(e), bt_engine_num_stages(e) > 1 ? "s" : "", p->parallel.microbatches,
               p->parallel.microbatches > 1 ? "es" : "", bt_schedule_name(p->parallel.schedule), (long long)p->batch,
               data_text(&m->data.train, buf, sizeof buf), (long long)n_train, (long long)n_val, vocab);
    if (!o->jsonl && bt_lm_first_step(t) > 0)
        printf("resumed from %s at step %lld of %lld\n", bt_cli_escape(o->resume, buf, sizeof buf),
               (long long)bt_lm_first_step(t), (long long)bt_lm_total_steps(t));
    bt_input_info in0;
    bt_graph_input(m->graph, 0, &in0);
    display d = {.o = o, .first_step = bt_lm_first_step(t), .e = e, .tokens = in0.shape.dim[0]};
    d.step_ms = calloc((size_t)(bt_lm_total_steps(t) + 1), sizeof *d.step_ms);
    if (!d.step_ms) {
        bt_lm_destroy(t);
        fprintf(stderr, "baton run: out of memory\n");
        return BT_EXIT_RUNTIME;
    }
    int rc = bt_cli_metrics_open(o, m, e, p, d.first_step, bt_lm_total_steps(t), &d.mt);
    if (rc == BT_EXIT_OK) {
        print_init_report(o, bt_lm_init_report(t));
        bt_cli_stop_begin();
        d.t0_ms = bt_now_ms();
        st = bt_lm_run(t, on_event, &d);
        int sig = bt_cli_stop_end();
        int64_t stopped = bt_lm_stopped_at(t);
        if (st == BT_OK && stopped) print_stopped(o, sig, stopped, bt_lm_total_steps(t), to->checkpoint_dir, "--resume");
        if (st == BT_OK && stopped) rc = 128 + sig;
        if (st != BT_OK) {
            if (o->progress) printf("\n");
            rc = bt_cli_fail("run", st);
        } else if (d.n_steps > 0 && !stopped) {
            double median = bt_median(d.step_ms, (int)d.n_steps);
            if (!o->jsonl && d.evaluated)
                printf("\nfinal: validation loss %.4f, %lld steps, %.0f tokens/s (median step)\n", d.last_eval_loss,
                       (long long)d.n_steps, (double)p->batch * (double)in0.shape.dim[0] / (median / 1000));
            bt_cli_print_summary(o, e, median, p->batch);
            bt_cli_print_conv_choices(o, m->graph);
        }
        int mrc = bt_cli_metrics_close(d.mt);
        if (rc == BT_EXIT_OK) rc = mrc;
    }
    free(d.step_ms);
    bt_lm_destroy(t);
    return rc;
}

/* What --init-partial loaded, and every tensor it skipped and parameter it did not fill. */
static void print_init_report(const bt_run_opts *o, const bt_weights_report *r)
{
    if (!r) return;
    FILE *f = o->jsonl ? stderr : stdout;
    fprintf(f, "init %s: loaded %d parameters, skipped %d tensors, %d parameters keep their initial values\n",
            o->init, r->loaded, r->n_skipped, r->n_missing);
    for (int i = 0; i < r->n_skipped; i++) {
        fprintf(f, "  skipped ");
        bt_cli_print_escaped(f, r->skipped[i]);
        fputc('\n', f);
    }
    for (int i = 0; i < r->n_missing; i++) {
        fprintf(f, "  not in the file: ");
        bt_cli_print_escaped(f, r->missing[i]);
        fputc('\n', f);
    }
}

/* continue_with: the flag that picks the run up from dir ("--resume"). */
static void print_stopped(const bt_run_opts *o, int sig, int64_t step, int64_t total, const char *dir,
                          const char *continue_with)
{
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    bt_cli_record(o, json_pack("{s:s, s:I, s:I}", "interrupted", name, "step", (json_int_t)step, "total_steps",
                               (json_int_t)total));
    if (!o->jsonl) {
        if (o->progress) printf("\n");
        printf("interrupted by %s after step %lld of %lld", name, (long long)step, (long long)total);
        if (dir) {
            char shown[1024];
            printf("; continue with %s %s", continue_with, bt_cli_escape(dir, shown, sizeof shown));
        } else
            printf(" (no checkpoint directory: the weights are not saved)");
        printf("\n");
    }
    fflush(stdout);
}

int bt_cli_train(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p)
{
    bt_trainer_opts to;
    memset(&to, 0, sizeof to);
    /* flags beat the file: --epochs replaces train.steps as well as train.epochs */
    to.steps = o->steps > 0 ? o->steps : o->epochs > 0 ? 0 : m->train.steps;
    to.epochs = o->epochs > 0 ? o->epochs : m->train.epochs;
    to.eval_every = o->eval_every >= 0 ? o->eval_every : m->train.eval_every;
    to.checkpoint_every = o->checkpoint_every >= 0 ? o->checkpoint_every : m->train.checkpoint_every;
    to.checkpoint_dir = o->checkpoint_dir ? o->checkpoint_dir : m->train.checkpoint_dir;
    to.resume = o->resume;
    to.init = o->init;
    to.init_partial = o->init_partial;
    int keep = o->keep_last >= 0 ? o->keep_last : m->train.checkpoint_keep_last;
    to.keep_last = keep == 0 ? -1 : keep;
    to.checkpoint_shards = o->checkpoint_shards;
    to.seed = o->seed;
    to.stop = bt_cli_stop_flag();
    bt_model local = *m;
    if (o->synthetic) {
        bt_data_config_init(&local.data);
        local.data.train.kind = BT_DATA_SYNTHETIC;
        local.data.train.samples = 10000;
        local.data.train.shuffle = 1;
    }
    if (bt_lm_wanted(&local)) return train_lm(o, &local, e, p, &to);
    bt_trainer *t = NULL;
    bt_status st = bt_trainer_create(&local, e, &to, &t);
    if (st != BT_OK) return bt_cli_fail("run", st);
    if (bt_trainer_nothing_to_do(t)) {
        fprintf(stderr,
                "baton run: nothing to do: %s is at step %lld and this run has %lld steps; the checkpoint is "
                "left as it is (pass --steps above %lld to train on)\n",
                o->resume, (long long)bt_trainer_first_step(t), (long long)bt_trainer_total_steps(t),
                (long long)bt_trainer_first_step(t));
        bt_trainer_destroy(t);
        return BT_EXIT_OK;
    }
    bt_engine_set_total_steps(e, bt_trainer_total_steps(t));
    print_config(o, &local, e, p, t);
    display d = {.o = o, .first_step = bt_trainer_first_step(t), .e = e};
    d.step_ms = calloc((size_t)(bt_trainer_total_steps(t) + 1), sizeof *d.step_ms);
    if (!d.step_ms) {
        bt_trainer_destroy(t);
        fprintf(stderr, "baton run: out of memory\n");
        return BT_EXIT_RUNTIME;
    }
    int rc = bt_cli_metrics_open(o, &local, e, p, d.first_step, bt_trainer_total_steps(t), &d.mt);
    if (rc != BT_EXIT_OK) {
        free(d.step_ms);
        bt_trainer_destroy(t);
        return rc;
    }
    print_init_report(o, bt_trainer_init_report(t));
    bt_cli_stop_begin();
    d.t0_ms = bt_now_ms();
    st = bt_trainer_run(t, on_event, &d);
    int sig = bt_cli_stop_end();
    int64_t stopped = bt_trainer_stopped_at(t);
    if (st == BT_OK && stopped) print_stopped(o, sig, stopped, bt_trainer_total_steps(t), to.checkpoint_dir, "--resume");
    if (st != BT_OK) {
        if (o->progress) printf("\n");
        rc = bt_cli_fail("run", st);
    } else if (d.n_steps > 0) {
        double median = bt_median(d.step_ms, (int)d.n_steps);
        if (!o->jsonl && d.evaluated) {
            printf("\nfinal%s: ", bt_trainer_evaluates_on_train(t) ? " (on the training set)" : "");
            if (!isnan(d.last_accuracy)) printf("accuracy %.2f%%, ", 100 * d.last_accuracy);
            printf("eval loss %.4f, %lld steps", d.last_eval_loss, (long long)d.n_steps);
        }
        bt_cli_print_summary(o, e, median, p->batch);
        bt_cli_print_conv_choices(o, m->graph);
    }
    int mrc = bt_cli_metrics_close(d.mt);
    if (rc == BT_EXIT_OK) rc = mrc;
    if (rc == BT_EXIT_OK && stopped) rc = 128 + sig;
    free(d.step_ms);
    bt_trainer_destroy(t);
    return rc;
}
