/* cli/run_train.c: the display of `baton run` for training on data: a configuration table at the
 * start, a progress bar on a terminal or one plain line per step otherwise (loss, lr, step ms,
 * samples/s, bubble), evaluation and checkpoint lines, and a final summary with accuracy,
 * throughput and memory per stage. With --log-format jsonl every line is a JSON object instead
 * (a number that is not finite is written null). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run.h"
#include "core/strutil.h"
#include "core/util.h"
#include "cpu/blas.h"
#include "optim/loss_scale.h"
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
    }
    return buf;
}

static void print_config(const bt_run_opts *o, const bt_model *m, const bt_engine *e, const bt_engine_params *p,
                         const bt_trainer *t)
{
    char buf[512], num[32];
    if (o->jsonl) {
        printf("{\"config\": true, \"model\": ");
        bt_cli_print_json_string(stdout, m->name ? m->name : "");
        printf(", \"stages\": %d, \"microbatches\": %d, \"schedule\": \"%s\", "
               "\"batch\": %lld, \"steps\": %lld, \"train_samples\": %lld, \"params\": %lld}\n",
               bt_engine_num_stages(e), p->parallel.microbatches,
               bt_schedule_name(p->parallel.schedule), (long long)p->batch, (long long)bt_trainer_total_steps(t),
               (long long)bt_trainer_train_samples(t), (long long)bt_graph_total_params(m->graph));
        return;
    }
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
    printf("  pipeline      %s, %d micro-batches of %lld\n", bt_schedule_name(p->parallel.schedule),
           p->parallel.microbatches, (long long)(p->batch / p->parallel.microbatches));
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
    printf("  blas          %s\n\n", bt_blas_describe());
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
        if (o->jsonl) {
            printf("{\"step\": %lld, \"epoch\": %lld, \"loss\": %s, \"lr\": %s, \"grad_norm\": %s, "
                   "\"step_ms\": %s, \"samples_per_s\": %s, \"bubble\": %s",
                   (long long)ev->step, (long long)ev->epoch, bt_json_num(r->loss, 'g', 9).s,
                   bt_json_num(r->lr, 'g', 6).s, bt_json_num(r->grad_norm, 'g', 6).s,
                   bt_json_num(r->step_ms, 'f', 3).s, bt_json_num(r->samples_per_s, 'f', 1).s,
                   bt_json_num(r->bubble, 'f', 4).s);
            if (r->loss_scale != 1)
                printf(", \"loss_scale\": %s, \"skipped\": %s", bt_json_num(r->loss_scale, 'g', 6).s,
                       r->skipped ? "true" : "false");
            bt_cli_metrics_json_stages(d->mt);
            printf("}\n");
        } else if (o->progress) {
            if (r->skipped) printf("\n%s\n", skip_text(ev->step, r, msg, sizeof msg));
            int width = 28, filled = (int)(width * ev->step / (ev->total_steps ? ev->total_steps : 1));
            char bar[64];
            for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '-';
            bar[width] = '\0';
            printf("\r[%s] %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %6.1f ms  %7.0f samples/s  bubble %4.1f%% ", bar,
                   (long long)ev->step, (long long)ev->total_steps, (long long)ev->epoch + 1, d->loss_avg, r->lr,
                   r->step_ms, r->samples_per_s, 100 * r->bubble);
            if (ev->step == ev->total_steps) printf("\n");
        } else {
            if (r->skipped) printf("%s\n", skip_text(ev->step, r, msg, sizeof msg));
            printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %.2f ms  %.0f samples/s  bubble %.1f%%\n",
                   (long long)ev->step, (long long)ev->total_steps, (long long)ev->epoch + 1, r->loss, r->lr,
                   r->step_ms, r->samples_per_s, 100 * r->bubble);
        }
    } else if (ev->kind == BT_EV_EVAL) {
        d->last_accuracy = ev->accuracy;
        d->last_eval_loss = ev->loss;
        d->evaluated = 1;
        bt_cli_metrics_eval(d->mt, d->e, ev->step, ev->loss, ev->accuracy);
        if (o->jsonl) {
            printf("{\"eval\": true, \"step\": %lld, \"loss\": %s", (long long)ev->step,
                   bt_json_num(ev->loss, 'g', 9).s);
            if (!isnan(ev->accuracy)) printf(", \"accuracy\": %s", bt_json_num(ev->accuracy, 'f', 6).s);
            printf(", \"samples\": %lld, \"eval_ms\": %s%s}\n", (long long)ev->samples,
                   bt_json_num(ev->eval_ms, 'f', 1).s, ev->on_train ? ", \"on_train\": true" : "");
        } else {
            if (o->progress && ev->step != ev->total_steps) printf("\n");
            printf("eval  step %lld%s: ", (long long)ev->step,
                   ev->on_train ? " (on the training set: the model has no data.eval)" : "");
            if (!isnan(ev->accuracy)) printf("accuracy %.2f%%  ", 100 * ev->accuracy);
            printf("loss %.4f  (%lld samples, %.0f ms)\n", ev->loss, (long long)ev->samples, ev->eval_ms);
        }
    } else if (ev->kind == BT_EV_CHECKPOINT) {
        if (o->jsonl)
            printf("{\"checkpoint\": \"%s\", \"step\": %lld}\n", ev->path, (long long)ev->step);
        else {
            if (o->progress && ev->step != ev->total_steps) printf("\n");
            printf("checkpoint step %lld -> %s\n", (long long)ev->step, ev->path);
        }
    }
    fflush(stdout);
}

int bt_cli_train(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p)
{
    bt_trainer_opts to;
    memset(&to, 0, sizeof to);
    to.steps = o->steps > 0 ? o->steps : m->train.steps;
    to.epochs = o->epochs > 0 ? o->epochs : m->train.epochs;
    to.eval_every = o->eval_every >= 0 ? o->eval_every : m->train.eval_every;
    to.checkpoint_every = o->checkpoint_every >= 0 ? o->checkpoint_every : m->train.checkpoint_every;
    to.checkpoint_dir = o->checkpoint_dir ? o->checkpoint_dir : m->train.checkpoint_dir;
    to.resume = o->resume;
    to.init = o->init;
    to.seed = o->seed;
    bt_model local = *m;
    if (o->synthetic) {
        bt_data_config_init(&local.data);
        local.data.train.kind = BT_DATA_SYNTHETIC;
        local.data.train.samples = 10000;
        local.data.train.shuffle = 1;
    }
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
    st = bt_trainer_run(t, on_event, &d);
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
    }
    int mrc = bt_cli_metrics_close(d.mt);
    if (rc == BT_EXIT_OK) rc = mrc;
    free(d.step_ms);
    bt_trainer_destroy(t);
    return rc;
}
