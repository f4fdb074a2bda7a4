/* cli/cmd_run.c: `baton run MODEL.yaml`: builds an engine from the model and its parallel
 * section, then trains (a model with train:) or streams inference (without), on synthetic data:
 * float inputs uniform in [-1, 1], integer inputs uniform over the range their consumer's shape
 * rule declares (bt_infer_int_range: a class count, a vocabulary). Prints one line per step
 * (or one JSON object per step with --log-format jsonl) and a per-stage summary at the end. */
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "core/strutil.h"
#include "core/util.h"
#include "cli/run.h"
#include "cli/outputs.h"
#include "cli/run_dist.h"
#include "optim/loss_scale.h"
#include "graph/graph_internal.h"

typedef bt_run_opts run_opts;

static void run_usage(FILE *f)
{
    fprintf(f,
            "usage: baton run MODEL.yaml [KEY=VALUE ...] [options]\n"
            "\n"
            "Trains the model (when it has a train: section) or streams inference through its\n"
            "pipeline, printing loss, step time, throughput and bubble per step.\n"
            "\n"
            "options:\n"
            "  --devices LIST        devices, one per stage: cpu:0,cpu:1\n"
            "  --stages N            number of pipeline stages\n"
            "  --partition P         uniform | params | profile: how layers are cut into stages\n"
            "  --balance N,N,...     layers per stage, e.g. 3,2\n"
            "  --layout SPEC         layers per stage by name: \"fc1,fc2|head,loss\"\n"
            "  --microbatches M      micro-batches per step\n"
            "  --schedule S          gpipe | 1f1b | interleaved-1f1b | zb-h1 | zbv (training),\n"
            "                        stream (inference)\n"
            "  --virtual V           interleaved-1f1b: model chunks per device (stages = devices x V;\n"
            "                        zbv: 2, its own)\n"
            "  --recompute R         none | stage | LAYER,LAYER: recompute these layers' activations\n"
            "                        before backward instead of keeping them (beats train.recompute)\n"
            "  --steps N             steps to run (default: train.steps, else the epochs)\n"
            "  --epochs N            passes over the training data (beats train.epochs)\n"
            "  --eval-every N        evaluate every N steps (0: only at the end)\n"
            "  --checkpoint-dir DIR  write DIR/checkpoint-<step>.safetensors, DIR/checkpoint.safetensors\n"
            "                        the latest (created like mkdir -p; one run per DIR)\n"
            "  --checkpoint-every N  checkpoint every N steps too (default: only at the end)\n"
            "  --keep-last N         numbered checkpoints kept in DIR (default 1; 0: all)\n"
            "  --checkpoint-shards   write each checkpoint as one shard per stage, in parallel, and an\n"
            "                        index (DIR/checkpoint-<step>.safetensors.index.json); under mpirun\n"
            "                        checkpoints are always sharded (docs/checkpoints.md)\n"
            "  --resume DIR          continue exactly from DIR's latest checkpoint (or a file)\n"
            "  --init FILE           start from weights in a safetensors file or checkpoint DIR\n"
            "                        (PyTorch names; F32, F64, F16 or BF16)\n"
            "  --init-partial FILE   the same, loading what matches and listing what it skipped\n"
            "  --synthetic           made-up data shaped like the declared inputs, in place of data:\n"
            "                        (without data: and without this flag, a run is refused)\n"
            "  --batch N             samples per step (beats train.batch)\n"
            "  --seed N              seed for initialisation, data and dropout (default 0)\n"
            "  --threads N           BLAS threads of each CPU stage (default: the cores shared\n"
            "                        out among the stages); one count for all CPU stages, as\n"
            "                        OpenBLAS has one per process\n"
            "  --watchdog SECONDS    stop a run where a stage waits, or runs one instruction,\n"
            "                        longer than this (default 60, at most 1e9)\n"
            "  --memory BYTES        memory each device may hold, e.g. 512M or 2G; a plan that\n"
            "                        needs more is refused before anything runs\n"
            "  --transfer MODE       auto (default) | staged | host | nccl: how stages hand messages\n"
            "                        on; staged forces the pinned-host path (across processes:\n"
            "                        mpi-staged), host the synchronous one, nccl NCCL between GPU\n"
            "                        stages on different ranks (an error where it cannot)\n"
            "  --dp D                D data-parallel replicas across processes (beats\n"
            "                        parallel.data): mpirun -np D*P baton run ... --dp D\n"
            "  --trace FILE.json     record every step as a Chrome/Perfetto trace\n"
            "  --timeline FILE.svg   draw the last step as an SVG timeline\n"
            "  --tensorboard DIR     write TensorBoard event files to DIR (beats\n"
            "                        train.tensorboard): watch with tensorboard --logdir\n"
            "  --log-format F        text (default) | jsonl\n"
            "  --log-every N         a step line (or record) every N steps, and the first and last\n"
            "  --log-file FILE       write the JSON records to FILE too, whatever the terminal shows\n"
            "  --plugin LIB.so       load a library of custom ops first (its\n"
            "                        baton_plugin_register registers them)\n"
            "  -h, --help            this help\n"
            "KEY=VALUE overrides any field of the file, e.g. train.optimizer.lr=3e-4\n");
}

/* Exclusive upper bound for the integer input value: the shape rule of a consumer declared it
 * (bt_infer_int_range: a vocabulary, a class count); 2 where none did. */
static int64_t int_input_range(const bt_graph *g, int value)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const bt_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] == value && n->int_hi[k] > 0) return n->int_hi[k];
    }
    return 2;
}

void bt_cli_synth_free(bt_cli_synth *d)
{
    for (int i = 0; i < d->n; i++) free(d->buf[i]);
}

int bt_cli_synth_make(const bt_graph *g, int64_t batch, uint64_t seed, bt_cli_synth *d)
{
    memset(d, 0, sizeof *d);
    uint64_t rng = seed * 0x2545f4914f6cdd1dULL + 1;
    for (int i = 0; i < g->n_inputs; i++) {
        const bt_value *v = &g->values[g->inputs[i]];
        int64_t n = batch * bt_shape_numel(&v->shape);
        d->buf[i] = malloc((size_t)n * 4 + 4);
        if (!d->buf[i]) return -1;
        d->n = i + 1;
        if (v->dtype == BT_I32) {
            int64_t range = int_input_range(g, g->inputs[i]);
            int32_t *p = d->buf[i];
            for (int64_t k = 0; k < n; k++) p[k] = (int32_t)(bt_rng_next(&rng) % (uint64_t)range);
        } else {
            float *p = d->buf[i];
            for (int64_t k = 0; k < n; k++) p[k] = (float)((double)(bt_rng_next(&rng) >> 11) * 0x1.0p-52 - 1.0);
        }
        d->feeds[i] = (bt_feed){.name = v->name, .data = d->buf[i], .dtype = v->dtype == BT_I32 ? BT_I32 : BT_F32};
    }
    return 0;
}

static void print_step(const run_opts *o, long long step, long long steps, const bt_step_result *r, int training,
                       const bt_cli_metrics *mt)
{
    if (o->jsonl || o->log) {
        json_t *rec;
        if (training) {
            rec = json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b}", "step", (json_int_t)step, "loss",
                            bt_cli_json_num(r->loss), "lr", bt_cli_json_num(r->lr), "grad_norm",
                            bt_cli_json_num(r->grad_norm), "step_ms", bt_cli_json_num(r->step_ms), "samples_per_s",
                            bt_cli_json_num(r->samples_per_s), "bubble", bt_cli_json_num(r->bubble), "loss_scale",
                            bt_cli_json_num(r->loss_scale), "skipped", r->skipped);
            json_t *stages = bt_cli_metrics_json(mt);
            if (rec && stages) json_object_set_new(rec, "stages", stages);
            else json_decref(stages);
        } else
            rec = json_pack("{s:I, s:o, s:o, s:o, s:o}", "step", (json_int_t)step, "step_ms",
                            bt_cli_json_num(r->step_ms), "latency_ms", bt_cli_json_num(r->step_ms), "samples_per_s",
                            bt_cli_json_num(r->samples_per_s), "bubble", bt_cli_json_num(r->bubble));
        bt_cli_record(o, rec);
    }
    if (o->jsonl) {
    } else if (training) {
        if (r->skipped) {
            char msg[160];
            bt_loss_scale_format_skip(step, r->loss_scale, fmax(1.0, r->loss_scale / 2), msg, sizeof msg);
            printf("%s\n", msg);
        }
        printf("step %*lld/%lld  loss %.4f  lr %.2e  %8.2f ms  %9.0f samples/s  bubble %4.1f%%\n",
               (int)(steps > 999 ? 5 : 3), step, steps, r->loss, r->lr, r->step_ms,
               r->samples_per_s, 100 * r->bubble);
    } else {
        printf("batch %*lld/%lld  latency %8.2f ms  %9.0f samples/s  bubble %4.1f%%\n",
               (int)(steps > 999 ? 5 : 3), step, steps, r->step_ms, r->samples_per_s, 100 * r->bubble);
    }
    fflush(stdout);
}

/* One line per stage boundary and direction that carried data: its path and measured rate. */
/* Stages that keep activations as bf16 (precision bf16 on a CPU): the peak beside the f32 one. */
static void print_bf16_kept(const bt_engine *e)
{
    int any = 0;
    for (int s = 0; s < bt_engine_num_stages(e); s++) {
        bt_memory_stats m;
        char a[32], b[32];
        bt_engine_memory(e, s, &m);
        if (!m.bf16_kept) continue;
        if (!any++) printf("  activations kept as bf16 (bf16 slots + f32 working copies; f32 slots would hold):");
        printf(" stage %d %s (f32 %s)", s, bt_cli_bytes((double)m.activation_peak, a, sizeof a),
               bt_cli_bytes((double)m.activation_peak_f32, b, sizeof b));
    }
    if (any) printf("\n");
}

static void print_boundaries(const bt_engine *e)
{
    int shown = 0;
    for (int i = 0; i < bt_engine_num_boundaries(e); i++) {
        bt_boundary_stats b;
        char per[32];
        bt_engine_boundary(e, i, &b);
        if (b.message_bytes == 0 || b.messages == 0) continue;
        if (!shown++) printf("  %-9s %-11s %-7s %13s %12s\n", "boundary", "carries", "path", "per message", "rate");
        char rate[32] = "-";
        if (b.copy_ms > 0) snprintf(rate, sizeof rate, "%.2f GB/s", b.bytes / b.copy_ms / 1e6);
        printf("  %d -> %-4d %-11s %-7s %13s %12s\n", b.from, b.to, b.grad ? "gradients" : "activations",
               bt_transfer_path_name(b.path), bt_cli_bytes((double)b.message_bytes, per, sizeof per), rate);
    }
}

void bt_cli_print_summary(const run_opts *o, const bt_engine *e, double median_ms, int64_t batch)
{
    bt_cli_dist_gather(e); /* across processes: every stage's own statistics, on every rank */
    json_t *stages = json_array(), *boundaries = json_array();
    for (int s = 0; stages && s < bt_engine_num_stages(e); s++) {
        bt_memory_stats m;
        bt_stage_info si;
        bt_time_stats t;
        bt_engine_memory(e, s, &m);
        bt_engine_stage(e, s, &si);
        bt_engine_time(e, s, &t);
        double wall = t.wall_ms > 0 ? t.wall_ms : 1;
        json_array_append_new(stages, json_pack("{s:i, s:s, s:I, s:I, s:I, s:b, s:i, s:o, s:o, s:o}", "stage", s,
                                                "device", si.device, "peak_bytes", (json_int_t)m.peak,
                                                "activation_peak_bytes", (json_int_t)m.activation_peak,
                                                "activation_peak_f32_bytes", (json_int_t)m.activation_peak_f32,
                                                "activations_bf16", m.bf16_kept, "peak_microbatches",
                                                m.peak_microbatches, "busy", bt_cli_json_num(t.busy_ms / wall),
                                                "transfer", bt_cli_json_num(t.transfer_ms / wall), "idle",
                                                bt_cli_json_num(t.idle_ms / wall)));
    }
    for (int i = 0; boundaries && i < bt_engine_num_boundaries(e); i++) {
        bt_boundary_stats b;
        bt_engine_boundary(e, i, &b);
        json_array_append_new(boundaries, json_pack("{s:i, s:i, s:s, s:s, s:I, s:I, s:o}", "from", b.from, "to", b.to,
                                                    "what", b.grad ? "gradients" : "activations", "path",
                                                    bt_transfer_path_name(b.path), "message_bytes",
                                                    (json_int_t)b.message_bytes, "messages", (json_int_t)b.messages,
                                                    "gb_per_s",
                                                    bt_cli_json_num(b.copy_ms > 0 ? b.bytes / b.copy_ms / 1e6 : 0.0)));
    }
    bt_cli_record(o, json_pack("{s:b, s:o, s:o, s:o, s:o}", "summary", 1, "median_step_ms", bt_cli_json_num(median_ms),
                               "samples_per_s",
                               bt_cli_json_num(median_ms > 0 ? (double)batch * 1000 / median_ms : 0), "stages",
                               stages ? stages : json_null(), "boundaries", boundaries ? boundaries : json_null()));
    if (o->jsonl) {
        bt_cli_dist_summary(o, e);
        bt_cli_tracer_summary(o->tracer, 1, median_ms);
        return;
    }
    printf("\nmedian step %.2f ms, %.0f samples/s\n", median_ms, median_ms > 0 ? (double)batch * 1000 / median_ms : 0);
    printf("  %-5s %-8s %11s %11s %11s %11s %12s %9s %6s %6s %6s\n", "stage", "device", "weights", "gradients",
           "optimizer", "peak", "activations", "in flight", "busy", "xfer", "idle");
    for (int s = 0; s < bt_engine_num_stages(e); s++) {
        bt_memory_stats m;
        bt_stage_info si;
        char a[32], b[32], c[32], d[32], f[32];
        bt_engine_memory(e, s, &m);
        bt_engine_stage(e, s, &si);
        bt_time_stats t;
        bt_engine_time(e, s, &t);
        double wall = t.wall_ms > 0 ? t.wall_ms : 1;
        printf("  %-5d %-8s %11s %11s %11s %11s %12s %9d %5.1f%% %5.1f%% %5.1f%%\n", s, si.device,
               bt_cli_bytes((double)m.weights, a, sizeof a), bt_cli_bytes((double)m.gradients, b, sizeof b),
               bt_cli_bytes((double)m.optimizer, c, sizeof c), bt_cli_bytes((double)m.peak, d, sizeof d),
               bt_cli_bytes((double)m.activation_peak, f, sizeof f), m.peak_microbatches, 100 * t.busy_ms / wall,
               100 * t.transfer_ms / wall, 100 * t.idle_ms / wall);
    }
    print_bf16_kept(e);
    print_boundaries(e);
    bt_cli_dist_summary(o, e);
    bt_cli_tracer_summary(o->tracer, 0, median_ms);
}

static int run_steps(const run_opts *o, bt_model *m, bt_engine *e, const bt_engine_params *params);

/* Creates the engine, runs (traced when asked), writes the trace files. */
static int run_resolved(const run_opts *opts, bt_model *m, int auto_threads);

static int run_model(const run_opts *opts, bt_model *m)
{
    int was_auto = m->parallel.auto_layout, threads = 0, rec = -1, found = 0, rc = BT_EXIT_OK;
    if ((rc = bt_cli_dist_refuse_auto("run", m, opts->dp)) != BT_EXIT_OK) return rc;
    if (was_auto && opts->resume && m->train.enabled) { /* the layout the first run chose (auto_record.c) */
        rc = bt_cli_auto_recall(opts->resume, m, &threads, &rec, &found);
        if (rc != BT_EXIT_OK) return rc;
        if (found && rec >= 0) {
            bt_status st = bt_graph_set_recompute(m->graph, -1, rec);
            if (st != BT_OK) return bt_cli_fail("run", st);
        }
    }
    if (!found) {
        bt_cli_auto au; /* parallel: auto: measured and chosen now */
        rc = bt_cli_resolve_auto_for("run", m, opts->threads, !opts->jsonl, 1, 0, opts->batch, opts->device_memory,
                                     &au);
        threads = au.threads;
        rec = au.recompute;
        bt_cli_auto_clear(&au);
        if (rc != BT_EXIT_OK) return rc;
    }
    const char *dir = opts->checkpoint_dir ? opts->checkpoint_dir : m->train.checkpoint_dir;
    if (was_auto && m->train.enabled && dir) {
        rc = bt_cli_auto_record(dir, &m->parallel, threads, rec);
        if (rc != BT_EXIT_OK) return rc;
    }
    return run_resolved(opts, m, threads);
}

static int run_resolved(const run_opts *opts, bt_model *m, int auto_threads)
{
    run_opts traced = *opts;
    const run_opts *o = &traced;
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    int training = m->train.enabled;
    p.training = training;
    p.dtype = m->dtype;
    p.optimizer = m->train.optimizer;
    p.lr_schedule = m->train.lr_schedule;
    p.clip_norm = m->train.clip_norm;
    p.batch = o->batch > 0 ? o->batch : m->train.batch;
    p.seed = o->seed;
    p.threads = o->threads > 0 ? o->threads : auto_threads;
    p.watchdog_s = o->watchdog_s;
    p.device_memory = (size_t)o->device_memory;
    p.device_memory_each = 1; /* --memory is bytes per device, as in baton plan */
    long long steps = o->steps > 0 ? o->steps : (m->train.steps > 0 ? m->train.steps : 10);
    p.total_steps = steps; /* the trainer replaces it with the horizon of its epochs */
    p.transfer = (bt_transfer_mode)o->transfer;
    p.precision = m->train.precision; /* inference too: the precision the model trains and evaluates at */
    if (training) p.loss_scale = m->train.loss_scale;
    if (training && o->resume) { /* conv2d's recorded paths, before anything is measured (run_conv_record.c) */
        int crc = bt_cli_conv_record_load(o->resume, m->graph, o->jsonl);
        if (crc != BT_EXIT_OK) return crc;
    }
    bt_profile *costs = NULL; /* partition: profile: measured here, before the plan is built */
    bt_status st = bt_profile_measure_for_plan(m->graph, &p.parallel, p.precision, &costs);
    if (st != BT_OK) return bt_cli_fail("run", st);
    p.parallel.profile = costs;
    bt_cli_dist dist; /* under mpirun: this rank's part of the job */
    int rc = bt_cli_dist_setup(o, m, &p, &dist);
    if (rc != BT_EXIT_OK) {
        bt_profile_destroy(costs);
        return bt_cli_dist_finish(&dist, rc);
    }
    bt_cli_dist_outputs(&dist, &traced, m); /* rank 0 alone writes the run's files */
    bt_engine *e = NULL;
    st = bt_cli_dist_create_engine(&dist, m, &p, &e);
    if (st != BT_OK) {
        bt_profile_destroy(costs);
        return bt_cli_dist_finish(&dist, bt_cli_fail("run", st));
    }
    rc = bt_cli_tracer_start(e, o->trace_path, o->timeline_path, &traced.tracer);
    if (rc == BT_EXIT_OK) rc = run_steps(o, m, e, &p);
    if (rc == BT_EXIT_OK) rc = bt_cli_tracer_write(traced.tracer, o->jsonl);
    bt_cli_tracer_destroy(traced.tracer);
    if (rc != BT_EXIT_OK) bt_cli_dist_finish(&dist, rc); /* a failed rank ends the job before anything waits */
    bt_engine_destroy(e);
    bt_profile_destroy(costs);
    return bt_cli_dist_finish(&dist, rc);
}

/* Trains on the model's data through the trainer, streams an inference model's data, or runs
 * synthetic inference batches when asked. */
static int run_steps(const run_opts *o, bt_model *m, bt_engine *e, const bt_engine_params *params)
{
    bt_engine_params p = *params;
    int training = p.training;
    bt_status st;
    long long steps = o->steps > 0 ? o->steps : (m->train.steps > 0 ? m->train.steps : 10);
    if (training) return bt_cli_train(o, m, e, &p);
    int irc = bt_cli_infer(o, m, e, &p);
    if (irc >= 0) return irc;
    bt_cli_synth data;
    bt_cli_metrics *mt = NULL; /* training: stage shares per step, and the TensorBoard file */
    int rc = training ? bt_cli_metrics_open(o, m, e, &p, 0, steps, &mt) : BT_EXIT_OK;
    if (rc != BT_EXIT_OK) return rc;
    double *times = calloc((size_t)steps, sizeof *times);
    if (!times || bt_cli_synth_make(m->graph, p.batch, o->seed, &data) != 0) {
        fprintf(stderr, "baton run: out of memory for synthetic data\n");
        free(times);
        bt_cli_metrics_close(mt);
        return BT_EXIT_RUNTIME;
    }
    if (!o->jsonl) {
        char name[1024];
        printf("%s %s: %d stage%s, %d micro-batch%s, schedule %s, batch %lld, synthetic data\n",
               training ? "training" : "inference", bt_cli_escape(m->name ? m->name : o->model.path, name, sizeof name),
               bt_engine_num_stages(e), bt_engine_num_stages(e) == 1 ? "" : "s",
               p.parallel.microbatches, p.parallel.microbatches == 1 ? "" : "es",
               bt_schedule_name(p.parallel.schedule), (long long)p.batch);
    }
    for (long long i = 0; i < steps; i++) {
        bt_step_result r;
        st = training ? bt_engine_train_step(e, data.feeds, data.n, &r)
                      : bt_engine_forward(e, data.feeds, data.n, NULL, &r);
        if (st != BT_OK) {
            rc = bt_cli_fail("run", st);
            break;
        }
        if (training && !isfinite(r.loss)) {
            fprintf(stderr, "baton run: step %lld: loss is %g; stopping\n", i + 1, r.loss);
            rc = BT_EXIT_RUNTIME;
            break;
        }
        if ((rc = bt_cli_tracer_step(o->tracer)) != BT_EXIT_OK) break;
        times[i] = r.step_ms;
        bt_cli_metrics_step(mt, e, i + 1, &r);
        print_step(o, i + 1, steps, &r, training, mt);
    }
    if (rc == BT_EXIT_OK) {
        bt_cli_print_summary(o, e, bt_median(times, (int)steps), p.batch);
        bt_cli_print_conv_choices(o, m->graph);
    }
    int mrc = bt_cli_metrics_close(mt);
    if (rc == BT_EXIT_OK) rc = mrc;
    bt_cli_synth_free(&data);
    free(times);
    return rc;
}

/* Before any output is opened: no file the run writes (--log-file, --trace, --timeline, the
 * checkpoint directory's files) may be one it reads (cli/outputs.h). The event files of
 * --tensorboard are new files (created exclusively, never over an existing one). */
static int check_outputs(const run_opts *o, const bt_model *m)
{
    bt_cli_inputs in;
    bt_cli_inputs_init(&in, "run");
    bt_cli_inputs_add_model(&in, &o->model);
    if (!o->synthetic) { /* --synthetic reads no data file */
        bt_cli_inputs_add_data(&in, "data.train", &m->data.train);
        bt_cli_inputs_add_data(&in, "data.eval", &m->data.eval);
    }
    if (o->resume) bt_cli_inputs_add_checkpoint(&in, "--resume", o->resume, 1);
    if (o->init) bt_cli_inputs_add_checkpoint(&in, o->init_partial ? "--init-partial" : "--init", o->init, 0);
    const char *dir = o->checkpoint_dir ? o->checkpoint_dir : m->train.checkpoint_dir;
    int rc = bt_cli_outputs_check(&in, "--log-file", o->log_file);
    if (rc == BT_EXIT_OK) rc = bt_cli_outputs_check(&in, "--trace", o->trace_path);
    if (rc == BT_EXIT_OK) rc = bt_cli_outputs_check(&in, "--timeline", o->timeline_path);
    if (rc == BT_EXIT_OK && m->train.enabled)
        rc = bt_cli_outputs_check_checkpoint_dir(&in, o->checkpoint_dir ? "--checkpoint-dir" : "train.checkpoint_dir",
                                                 dir);
    bt_cli_inputs_free(&in);
    return rc;
}

int bt_cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"devices", required_argument, NULL, 'd'},      {"stages", required_argument, NULL, 's'},
        {"partition", required_argument, NULL, 'P'},    {"balance", required_argument, NULL, 'B'},
        {"layout", required_argument, NULL, 'y'},
        {"microbatches", required_argument, NULL, 'm'}, {"schedule", required_argument, NULL, 'S'},
        {"steps", required_argument, NULL, 'n'},        {"seed", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},      {"batch", required_argument, NULL, 'b'},
        {"watchdog", required_argument, NULL, 'w'},     {"log-format", required_argument, NULL, 'l'},
        {"epochs", required_argument, NULL, 'E'},       {"eval-every", required_argument, NULL, 'v'},
        {"checkpoint-dir", required_argument, NULL, 'C'}, {"checkpoint-every", required_argument, NULL, 'k'},
        {"resume", required_argument, NULL, 'R'},       {"init", required_argument, NULL, 'I'},
        {"synthetic", no_argument, NULL, 'Y'},          {"memory", required_argument, NULL, 'M'},         {"trace", required_argument, NULL, 'T'},
        {"timeline", required_argument, NULL, 'L'},     {"transfer", required_argument, NULL, 'X'},
        {"tensorboard", required_argument, NULL, 'G'},  {"virtual", required_argument, NULL, 'V'},
        {"dp", required_argument, NULL, 'D'},           {"checkpoint-shards", no_argument, NULL, 'Z'},
        {"keep-last", required_argument, NULL, 'K'},    {"log-every", required_argument, NULL, 'e'},
        {"log-file", required_argument, NULL, 'F'},    {"init-partial", required_argument, NULL, 'J'},
        {"plugin", required_argument, NULL, 'U'}, {"recompute", required_argument, NULL, 'Q'},
        {"help", no_argument, NULL, 'h'},               {NULL, 0, NULL, 0}};
    run_opts o;
    memset(&o, 0, sizeof o);
    o.threads = 0;
    o.watchdog_s = 60;
    o.eval_every = -1;
    o.checkpoint_every = -1;
    o.keep_last = -1;
    o.progress = isatty(STDOUT_FILENO);
    int c, rc;
    char *end;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': o.model.devices = optarg; break;
        case 's': rc = bt_cli_parse_int32("run", "--stages", optarg, 1, BT_MAX_STAGES, &o.model.stages); if (rc != BT_EXIT_OK) return rc; break;
        case 'm': rc = bt_cli_parse_int32("run", "--microbatches", optarg, 1, BT_MAX_MICROBATCHES, &o.model.microbatches); if (rc != BT_EXIT_OK) return rc; break;
        case 'S': o.model.schedule = optarg; break;
        case 'Q': o.model.recompute = optarg; break;
        case 'V': rc = bt_cli_parse_int32("run", "--virtual", optarg, 1, BT_MAX_STAGES, &o.model.virtual_stages); if (rc != BT_EXIT_OK) return rc; break;
        case 'P': o.model.partition = optarg; break;
        case 'B': o.model.balance = optarg; break;
        case 'y': o.model.layout = optarg; break;
        case 'n': rc = bt_cli_parse_int("run", "--steps", optarg, 1, BT_CLI_MAX_STEPS, &o.steps); if (rc != BT_EXIT_OK) return rc; break;
        case 'r': rc = bt_cli_parse_u64("run", "--seed", optarg, &o.seed); if (rc != BT_EXIT_OK) return rc; break;
        case 't': rc = bt_cli_parse_int32("run", "--threads", optarg, 1, BT_CLI_MAX_THREADS, &o.threads); if (rc != BT_EXIT_OK) return rc; break;
        case 'b': rc = bt_cli_parse_int("run", "--batch", optarg, 1, BT_CLI_MAX_BATCH, &o.batch); if (rc != BT_EXIT_OK) return rc; o.model.batch = o.batch; break;
        case 'w':
            o.watchdog_s = strtod(optarg, &end);
            if (end == optarg || *end || !(o.watchdog_s > 0 && o.watchdog_s <= BT_WATCHDOG_MAX_S))
                return bt_cli_bad_value("run", "--watchdog", "seconds above 0 and at most 1e+09", optarg);
            break;
        case 'E': rc = bt_cli_parse_int32("run", "--epochs", optarg, 1, BT_CLI_MAX_EPOCHS, &o.epochs); if (rc != BT_EXIT_OK) return rc; break;
        case 'v': rc = bt_cli_parse_int("run", "--eval-every", optarg, 0, LLONG_MAX, &o.eval_every); if (rc != BT_EXIT_OK) return rc; break;
        case 'k': rc = bt_cli_parse_int("run", "--checkpoint-every", optarg, 0, LLONG_MAX, &o.checkpoint_every); if (rc != BT_EXIT_OK) return rc; break;
        case 'C': o.checkpoint_dir = optarg; break;
        case 'Z': o.checkpoint_shards = 1; break;
        case 'e': rc = bt_cli_parse_int("run", "--log-every", optarg, 1, BT_CLI_MAX_STEPS, &o.log_every); if (rc != BT_EXIT_OK) return rc; break;
        case 'F': if (!*optarg) return bt_cli_bad_value("run", "--log-file", "a file name", optarg); o.log_file = optarg; break;
        case 'R': o.resume = optarg; break;
        case 'I': o.init = optarg; o.init_partial = 0; break;
        case 'J': o.init = optarg; o.init_partial = 1; break;
        case 'K': rc = bt_cli_parse_int32("run", "--keep-last", optarg, 0, 1000000, &o.keep_last); if (rc != BT_EXIT_OK) return rc; break;
        case 'Y': o.synthetic = 1; break;
        case 'M':
            if (!bt_cli_parse_bytes(optarg, &o.device_memory))
                return bt_cli_bad_value("run", "--memory", "a byte count per device such as 512M or 2G", optarg);
            break;
        case 'T': o.trace_path = optarg; break;
        case 'D': rc = bt_cli_parse_int32("run", "--dp", optarg, 1, 4096, &o.dp); if (rc != BT_EXIT_OK) return rc; break;
        case 'L': o.timeline_path = optarg; break;
        case 'G': if (!*optarg) return bt_cli_bad_value("run", "--tensorboard", "a directory", optarg); o.tensorboard = optarg; break;
        case 'X':
            if (strcmp(optarg, "auto") == 0) o.transfer = BT_TRANSFER_AUTO;
            else if (strcmp(optarg, "staged") == 0) o.transfer = BT_TRANSFER_STAGED;
            else if (strcmp(optarg, "host") == 0) o.transfer = BT_TRANSFER_HOST;
            else if (strcmp(optarg, "nccl") == 0) o.transfer = BT_TRANSFER_NCCL;
            else
                return bt_cli_bad_value("run", "--transfer", "auto, staged, host or nccl", optarg);
            break;
        case 'l':
            if (strcmp(optarg, "jsonl") == 0) o.jsonl = 1, o.progress = 0;
            else if (strcmp(optarg, "text") == 0) o.jsonl = 0;
            else
                return bt_cli_bad_value("run", "--log-format", "text or jsonl", optarg);
            break;
        case 'U': rc = bt_cli_add_plugin("run", &o.model, optarg); if (rc != BT_EXIT_OK) return rc; break;
        case 'h': run_usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("run", argc, argv, c);
        }
    }
    int prc = bt_cli_take_positional("run", argc, argv, optind, &o.model);
    if (prc != BT_EXIT_OK) return prc;
    bt_model *m = NULL;
    rc = bt_cli_load_model("run", &o.model, &m);
    if (rc == BT_EXIT_OK) rc = bt_cli_refuse_hf_weights("run", &m, 1);
    if (rc != BT_EXIT_OK) return rc;
    if (bt_cli_tensorboard_dir(&o, m) && !m->train.enabled) {
        fprintf(stderr, "baton run: --tensorboard records training; %s has no train: section\n", o.model.path);
        rc = BT_EXIT_USAGE;
    } else {
        rc = bt_cli_tensorboard_check(&o, m);
    }
    if (rc == BT_EXIT_OK) rc = bt_cli_infer_check(&o, m);
    if (rc == BT_EXIT_OK) rc = check_outputs(&o, m);
    if (rc == BT_EXIT_OK) rc = bt_cli_log_open(&o);
    if (rc == BT_EXIT_OK) {
        rc = run_model(&o, m);
        int lrc = bt_cli_log_close(&o);
        if (rc == BT_EXIT_OK) rc = lrc;
    }
    bt_model_destroy(m);
    return rc;
}
