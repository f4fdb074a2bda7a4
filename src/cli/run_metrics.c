/* cli/run_metrics.c: what `baton run` measures per step beyond bt_step_result, and where it goes
 * besides the terminal. Per stage, the busy / transfer / idle shares of the step just done (the
 * engine keeps running totals; the difference since the last step or evaluation is this step's)
 * and the peak bytes; they join the JSON step record ("stages": [...]) and, with --tensorboard DIR
 * (or train.tensorboard), a TensorBoard event file together with the step's loss, lr, gradient
 * norm, step time, samples/s and bubble, each evaluation's loss and accuracy, and the run's
 * configuration as a text summary. The JSON record and the event file are written from the same
 * numbers, so tests/tensorboard.sh can hold one against the other.
 *
 * One writer per run: today this process is the run. When runs span several processes (MPI),
 * only rank 0 may open the writer (bt_cli_metrics_open); the other ranks must pass no directory. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/run.h"
#include "core/error.h"
#include "metrics/tb_writer.h"

struct bt_cli_metrics {
    int stages;
    bt_time_stats *prev;        /* the engine's running totals at the last step or evaluation */
    bt_cli_stage_step *now;     /* this step's shares */
    bt_tb_writer *tb;           /* NULL without --tensorboard */
    int failed;                 /* a write failed: reported once, the run exits 1 */
};

const char *bt_cli_tensorboard_dir(const bt_run_opts *o, const bt_model *m)
{
    return o->tensorboard ? o->tensorboard : m->train.tensorboard;
}

/* The first part of dir (dir itself, or a parent) that exists and is not a directory, copied into
 * bad; 0 when there is none (what does not exist yet the writer creates). */
static int not_a_directory(const char *dir, char *bad, size_t size)
{
    size_t len = strlen(dir);
    for (size_t i = 1; i <= len; i++) {
        if (dir[i] != '/' && dir[i] != '\0') continue;
        struct stat sb;
        snprintf(bad, size, "%.*s", (int)i, dir);
        if (stat(bad, &sb) != 0) return 0; /* missing from here on: made by the writer */
        if (!S_ISDIR(sb.st_mode)) return 1;
    }
    return 0;
}

int bt_cli_tensorboard_check(const bt_run_opts *o, const bt_model *m)
{
    const char *dir = bt_cli_tensorboard_dir(o, m), *what = o->tensorboard ? "--tensorboard" : "train.tensorboard";
    char bad[1024], shown[1024], part[1024];
    if (!dir) return BT_EXIT_OK;
    if (!bt_tb_available()) {
        fprintf(stderr, "baton run: %s: %s\n", what, bt_tb_unavailable_reason());
        return BT_EXIT_USAGE;
    }
    if (!not_a_directory(dir, bad, sizeof bad)) return BT_EXIT_OK;
    bt_cli_escape(dir, shown, sizeof shown);
    if (strcmp(bad, dir) == 0)
        fprintf(stderr, "baton run: %s %s: not a directory (event files go into a directory)\n", what, shown);
    else
        fprintf(stderr, "baton run: %s %s: %s is not a directory\n", what, shown,
                bt_cli_escape(bad, part, sizeof part));
    return BT_EXIT_USAGE;
}

/* Appends printf-style text to a growing string; on out-of-memory the string is left NULL. */
static void cat(char **s, size_t *len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void cat(char **s, size_t *len, const char *fmt, ...)
{
    if (!*s) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *t = n < 0 ? NULL : realloc(*s, *len + (size_t)n + 1);
    if (!t) {
        free(*s);
        *s = NULL;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(t + *len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *s = t;
    *len += (size_t)n;
}

/* The configuration as a markdown table (TensorBoard's text plugin renders it). */
static char *config_markdown(const bt_model *m, const bt_engine *e, const bt_engine_params *p, int64_t first_step,
                             int64_t total_steps)
{
    size_t len = 0;
    char *s = calloc(1, 1);
    const bt_optimizer_config *opt = &p->optimizer;
    const char *lr[] = {"constant", "step", "cosine"};
    cat(&s, &len, "| setting | value |\n|---|---|\n");
    cat(&s, &len, "| model | %s |\n| file | %s |\n", m->name ? m->name : "", m->path ? m->path : "");
    cat(&s, &len, "| parameters | %lld |\n", (long long)bt_graph_total_params(m->graph));
    for (int st = 0; st < bt_engine_num_stages(e); st++) {
        bt_stage_info si;
        bt_layer_info first, last;
        bt_engine_stage(e, st, &si);
        bt_graph_layer(m->graph, si.first_layer, &first);
        bt_graph_layer(m->graph, si.first_layer + si.n_layers - 1, &last);
        cat(&s, &len, "| stage %d | %s: %s%s%s (%lld parameters) |\n", st, si.device, first.name,
            si.n_layers > 1 ? " .. " : "", si.n_layers > 1 ? last.name : "", (long long)si.n_params);
    }
    cat(&s, &len, "| schedule | %s, %d micro-batches |\n", bt_schedule_name(p->parallel.schedule),
        p->parallel.microbatches);
    cat(&s, &len, "| batch | %lld |\n| steps | %lld to %lld%s |\n", (long long)p->batch, (long long)first_step + 1,
        (long long)total_steps, first_step ? " (resumed)" : "");
    if (opt->kind == BT_OPT_ADAMW)
        cat(&s, &len, "| optimizer | adamw, lr %g, betas (%g, %g), weight decay %g |\n", opt->lr, opt->beta1,
            opt->beta2, opt->weight_decay);
    else
        cat(&s, &len, "| optimizer | sgd, lr %g, momentum %g, weight decay %g |\n", opt->lr, opt->momentum,
            opt->weight_decay);
    cat(&s, &len, "| lr schedule | %s, %lld warm-up steps |\n", lr[p->lr_schedule.kind],
        (long long)p->lr_schedule.warmup_steps);
    cat(&s, &len, "| clip norm | %g |\n| precision | %s |\n| seed | %llu |\n", p->clip_norm,
        p->precision == BT_BF16 ? "bf16" : p->precision == BT_F16 ? "f16" : "f32", (unsigned long long)p->seed);
    cat(&s, &len, "| baton | %s |\n", BATON_VERSION);
    return s;
}

int bt_cli_metrics_open(const bt_run_opts *o, const bt_model *m, const bt_engine *e, const bt_engine_params *p,
                        int64_t first_step, int64_t total_steps, bt_cli_metrics **out)
{
    *out = NULL;
    bt_cli_metrics *mt = calloc(1, sizeof *mt);
    int n = bt_engine_num_stages(e);
    if (!mt || !(mt->prev = calloc((size_t)n, sizeof *mt->prev)) || !(mt->now = calloc((size_t)n, sizeof *mt->now))) {
        bt_cli_metrics_close(mt);
        fprintf(stderr, "baton run: out of memory\n");
        return BT_EXIT_RUNTIME;
    }
    mt->stages = n;
    for (int s = 0; s < n; s++) bt_engine_time(e, s, &mt->prev[s]);
    const char *dir = bt_cli_tensorboard_dir(o, m);
    if (dir) {
        /* the run's only event writer (under MPI: rank 0's, see the opening comment) */
        bt_status st = bt_tb_writer_open(dir, &mt->tb);
        char *md = st == BT_OK ? config_markdown(m, e, p, first_step, total_steps) : NULL;
        if (st == BT_OK && !md) st = bt_error(BT_ERR_NOMEM, "out of memory");
        if (st == BT_OK) st = bt_tb_write_text(mt->tb, first_step, "config", md);
        if (st == BT_OK) st = bt_tb_flush(mt->tb);
        free(md);
        if (st != BT_OK) {
            bt_cli_metrics_close(mt);
            return bt_cli_fail("run", st);
        }
    }
    *out = mt;
    return BT_EXIT_OK;
}

/* Reports a failed write once; later writes are not tried. */
static void tb_failed(bt_cli_metrics *mt, bt_status st)
{
    if (st == BT_OK || mt->failed) return;
    mt->failed = 1;
    fprintf(stderr, "baton run: tensorboard: %s (the run goes on; it will exit 1)\n", bt_last_error());
}

/* The shares since the engine's totals in prev; then prev = now. */
static void take_shares(bt_cli_metrics *mt, const bt_engine *e)
{
    for (int s = 0; s < mt->stages; s++) {
        bt_time_stats t;
        bt_memory_stats mem;
        bt_engine_time(e, s, &t);
        bt_engine_memory(e, s, &mem);
        double wall = t.wall_ms - mt->prev[s].wall_ms;
        double busy = t.busy_ms - mt->prev[s].busy_ms, xfer = t.transfer_ms - mt->prev[s].transfer_ms;
        bt_cli_stage_step *n = &mt->now[s];
        n->busy = wall > 0 ? busy / wall : 0;
        n->transfer = wall > 0 ? xfer / wall : 0;
        n->idle = wall > 0 ? fmax(0.0, 1.0 - n->busy - n->transfer) : 0;
        n->peak_bytes = mem.peak;
        mt->prev[s] = t;
    }
}

void bt_cli_metrics_step(bt_cli_metrics *mt, const bt_engine *e, int64_t step, const bt_step_result *r)
{
    if (!mt) return;
    take_shares(mt, e);
    if (!mt->tb || mt->failed) return;
    bt_tb_scalar *v = malloc((size_t)(7 + 4 * mt->stages) * sizeof *v);
    char(*tags)[32] = malloc((size_t)(4 * mt->stages) * sizeof *tags);
    if (!v || !tags) {
        free(v);
        free(tags);
        tb_failed(mt, bt_error(BT_ERR_NOMEM, "out of memory"));
        return;
    }
    int n = 0;
    v[n++] = (bt_tb_scalar){"train/loss", r->loss};
    v[n++] = (bt_tb_scalar){"train/lr", r->lr};
    v[n++] = (bt_tb_scalar){"train/grad_norm", r->grad_norm};
    v[n++] = (bt_tb_scalar){"train/step_ms", r->step_ms};
    v[n++] = (bt_tb_scalar){"train/samples_per_s", r->samples_per_s};
    v[n++] = (bt_tb_scalar){"train/bubble", r->bubble};
    if (r->loss_scale != 1) v[n++] = (bt_tb_scalar){"train/loss_scale", r->loss_scale};
    for (int s = 0; s < mt->stages; s++) {
        const char *what[4] = {"busy", "transfer", "idle", "peak_MiB"};
        double val[4] = {mt->now[s].busy, mt->now[s].transfer, mt->now[s].idle,
                         (double)mt->now[s].peak_bytes / (1024.0 * 1024.0)};
        for (int k = 0; k < 4; k++) {
            snprintf(tags[4 * s + k], sizeof tags[0], "stage%d/%s", s, what[k]);
            v[n++] = (bt_tb_scalar){tags[4 * s + k], val[k]};
        }
    }
    bt_status st = bt_tb_write_scalars(mt->tb, step, v, n);
    if (st == BT_OK) st = bt_tb_flush(mt->tb); /* every step: a watching TensorBoard sees it now */
    free(v);
    free(tags);
    tb_failed(mt, st);
}

void bt_cli_metrics_eval(bt_cli_metrics *mt, const bt_engine *e, int64_t step, double loss, double accuracy)
{
    if (!mt) return;
    for (int s = 0; s < mt->stages; s++) bt_engine_time(e, s, &mt->prev[s]); /* the next step's shares leave it out */
    if (!mt->tb || mt->failed) return;
    bt_tb_scalar v[2] = {{"eval/loss", loss}, {"eval/accuracy", accuracy}};
    bt_status st = bt_tb_write_scalars(mt->tb, step, v, isnan(accuracy) ? 1 : 2);
    if (st == BT_OK) st = bt_tb_flush(mt->tb);
    tb_failed(mt, st);
}

json_t *bt_cli_metrics_json(const bt_cli_metrics *mt)
{
    if (!mt) return NULL;
    json_t *a = json_array();
    for (int s = 0; a && s < mt->stages; s++)
        json_array_append_new(a, json_pack("{s:o, s:o, s:o, s:I}", "busy", bt_cli_json_num(mt->now[s].busy),
                                           "transfer", bt_cli_json_num(mt->now[s].transfer), "idle",
                                           bt_cli_json_num(mt->now[s].idle), "peak_bytes",
                                           (json_int_t)mt->now[s].peak_bytes));
    return a;
}

int bt_cli_metrics_close(bt_cli_metrics *mt)
{
    if (!mt) return BT_EXIT_OK;
    int rc = mt->failed ? BT_EXIT_RUNTIME : BT_EXIT_OK;
    bt_status st = mt->failed ? BT_OK : bt_tb_writer_close(mt->tb);
    if (mt->failed) bt_tb_writer_close(mt->tb);
    if (st != BT_OK) rc = bt_cli_fail("run", st);
    free(mt->prev);
    free(mt->now);
    free(mt);
    return rc;
}
