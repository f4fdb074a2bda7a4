/* cli/run_infer.c: `baton run` on a model without train: (inference). What only training means is
 * refused before anything runs (exit 2, naming the flag): --checkpoint-dir, --checkpoint-every,
 * --keep-last, --checkpoint-shards, --resume, --init-partial, --eval-every, --epochs, and a schedule other than stream. --init loads weights. The
 * batches come from the model's data: (data.eval, else data.train) streamed once through the
 * forward-only schedule (train/predict.c), or are synthetic when asked (--synthetic, or
 * data: synthetic); a model with neither is refused rather than fed made-up inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run.h"
#include "core/strutil.h"
#include "core/util.h"
#include "train/checkpoint.h"
#include "train/predict.h"

static int refuse(const bt_model *m, const char *what)
{
    char path[512];
    fprintf(stderr, "baton run: %s: %s has no train: section, so it runs forward only and %s has nothing to do\n",
            what, bt_cli_escape(m->path, path, sizeof path), what);
    return BT_EXIT_USAGE;
}

int bt_cli_infer_check(const bt_run_opts *o, const bt_model *m)
{
    if (m->train.enabled) return BT_EXIT_OK;
    if (o->checkpoint_dir) return refuse(m, "--checkpoint-dir");
    if (o->checkpoint_every >= 0) return refuse(m, "--checkpoint-every");
    if (o->resume) return refuse(m, "--resume");
    if (o->keep_last >= 0) return refuse(m, "--keep-last");
    if (o->checkpoint_shards) return refuse(m, "--checkpoint-shards");
    if (o->init_partial) return refuse(m, "--init-partial (an inference run loads every weight with --init)");
    if (o->eval_every >= 0) return refuse(m, "--eval-every");
    if (o->epochs > 0) return refuse(m, "--epochs");
    if (m->parallel.schedule != BT_SCHEDULE_STREAM) {
        char path[512];
        fprintf(stderr,
                "baton run: %s %s trains, but %s has no train: section: an inference run uses the forward-only "
                "schedule stream\n",
                o->model.schedule ? "--schedule" : "parallel.pipeline.schedule",
                bt_schedule_name(m->parallel.schedule), bt_cli_escape(m->path, path, sizeof path));
        return BT_EXIT_USAGE;
    }
    const bt_data_source *src = m->data.eval.kind != BT_DATA_NONE ? &m->data.eval : &m->data.train;
    if (!o->synthetic && src->kind == BT_DATA_NONE) {
        char path[512];
        fprintf(stderr,
                "baton run: %s has no data: to stream: give data: {eval: {type: npy, inputs: {...}}}, or ask for "
                "made-up inputs with --synthetic (or data: synthetic)\n",
                bt_cli_escape(m->path, path, sizeof path));
        return BT_EXIT_USAGE;
    }
    if (!o->synthetic && src->kind != BT_DATA_SYNTHETIC && o->steps > 0) {
        fprintf(stderr, "baton run: --steps: an inference run streams its data once; leave --steps out, or use "
                        "--synthetic to run a number of made-up batches\n");
        return BT_EXIT_USAGE;
    }
    return BT_EXIT_OK;
}

typedef struct infer_display {
    const bt_run_opts *o;
    double *ms;                /* [batches], allocated at the first batch; NULL: no memory */
    int64_t n;
} infer_display;

static void on_batch(int64_t k, int64_t batches, const bt_step_result *r, void *user)
{
    infer_display *d = user;
    if (k == 0) d->ms = calloc((size_t)batches, sizeof *d->ms);
    if (d->ms) d->ms[d->n++] = r->step_ms;
    bt_cli_tracer_step(d->o->tracer);
    bt_cli_record(d->o, json_pack("{s:I, s:o, s:o, s:o, s:o}", "step", (json_int_t)k + 1, "step_ms",
                                  bt_cli_json_num(r->step_ms), "latency_ms", bt_cli_json_num(r->step_ms),
                                  "samples_per_s", bt_cli_json_num(r->samples_per_s), "bubble",
                                  bt_cli_json_num(r->bubble)));
    if (!d->o->jsonl)
        printf("batch %*lld/%lld  latency %8.2f ms  %9.0f samples/s  bubble %4.1f%%\n", batches > 999 ? 5 : 3,
               (long long)k + 1, (long long)batches, r->step_ms, r->samples_per_s, 100 * r->bubble);
    fflush(stdout);
}

int bt_cli_infer(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p)
{
    bt_status st;
    if (o->init && (st = bt_checkpoint_load_weights(e, m->graph, o->init)) != BT_OK) return bt_cli_fail("run", st);
    const bt_data_source *src = m->data.eval.kind != BT_DATA_NONE ? &m->data.eval : &m->data.train;
    if (o->synthetic || src->kind == BT_DATA_SYNTHETIC) return -1;
    bt_predict_opts po;
    memset(&po, 0, sizeof po);
    po.source = src;
    po.seed = o->seed;
    char name[512];
    if (!o->jsonl)
        printf("inference %s: %d stage%s, %d micro-batch%s, schedule stream, batch %lld, data %s\n",
               bt_cli_escape(m->name ? m->name : m->path, name, sizeof name), bt_engine_num_stages(e),
               bt_engine_num_stages(e) == 1 ? "" : "s", p->parallel.microbatches,
               p->parallel.microbatches == 1 ? "" : "es", (long long)p->batch,
               src == &m->data.eval ? "data.eval" : "data.train");
    infer_display d = {.o = o};
    bt_predict_report rep;
    st = bt_predict_run(m, e, &po, on_batch, &d, &rep);
    int rc = BT_EXIT_OK;
    if (st != BT_OK) rc = bt_cli_fail("run", st);
    else if (!d.ms) {
        fprintf(stderr, "baton run: out of memory\n");
        rc = BT_EXIT_RUNTIME;
    } else {
        if (!o->jsonl)
            printf("\n%lld samples in %lld batches: latency p50 %.2f ms, p99 %.2f ms\n", (long long)rep.samples,
                   (long long)rep.batches, rep.p50_ms, rep.p99_ms);
        bt_cli_print_summary(o, e, bt_median(d.ms, (int)d.n), p->batch);
        bt_cli_print_conv_choices(o, m->graph);
    }
    free(d.ms);
    return rc;
}
