/* cli/cmd_plot.c: `baton plot RUN.jsonl [RUN2.jsonl ...] [-o report.svg]`: the JSON records of
 * `baton run --log-format jsonl` as one SVG report (trace/report_svg.c): loss, eval loss and
 * accuracy, throughput and bubble against step, and each stage's busy / transfer / idle shares,
 * several runs overlaid in one colour each, labelled by file name and what the run was. Stage
 * shares come from the run's summary record; a run cut short (no summary) averages its step
 * records' shares. Lines that are not JSON objects (a text log mixed in) are errors naming the
 * file and line. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/outputs.h"
#include "core/error.h"
#include "core/strutil.h"
#include "trace/report.h"

static void plot_usage(FILE *f)
{
    fprintf(f, "usage: baton plot RUN.jsonl [RUN2.jsonl ...] [-o report.svg] [--title TEXT]\n"
               "\n"
               "Draws the JSON records of `baton run --log-format jsonl` as an SVG report: loss (and\n"
               "eval loss and accuracy), throughput and bubble against step, and each stage's busy,\n"
               "transfer and idle shares. Several runs are overlaid, one colour each.\n"
               "\n"
               "options:\n"
               "  -o, --output FILE   the SVG to write (default report.svg)\n"
               "  --title TEXT        the report's title\n");
}

static double num(const json_t *o, const char *key, int *ok)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) {
        *ok = 0;
        return 0;
    }
    return json_number_value(v);
}

/* Adds one record to run; sums holds the per-stage shares of step records (for a run with no
 * summary). */
static bt_status add_record(bt_report_run *run, const json_t *r, bt_report_stage **sums, int *n_sums, int *steps,
                            int *have_summary)
{
    int ok = 1;
    if (json_is_true(json_object_get(r, "summary"))) {
        json_t *stages = json_object_get(r, "stages");
        size_t n = json_array_size(stages);
        bt_report_stage *st = calloc(n ? n : 1, sizeof *st);
        if (!st) return bt_error(BT_ERR_NOMEM, "out of memory");
        for (size_t s = 0; s < n; s++) {
            json_t *o = json_array_get(stages, s);
            st[s] = (bt_report_stage){num(o, "busy", &ok), num(o, "transfer", &ok), num(o, "idle", &ok)};
        }
        free(run->stage);
        run->stage = st;
        run->n_stages = (int)n;
        *have_summary = 1;
        return ok ? BT_OK : bt_error(BT_ERR_IO, "a summary stage lacks busy, transfer or idle");
    }
    if (json_is_true(json_object_get(r, "eval"))) {
        double step = num(r, "step", &ok), loss = num(r, "loss", &ok);
        if (!ok) return bt_error(BT_ERR_IO, "an eval record lacks step or loss");
        BT_TRY(bt_report_series_add(&run->eval_loss, step, loss));
        json_t *acc = json_object_get(r, "accuracy");
        if (json_is_number(acc)) BT_TRY(bt_report_series_add(&run->eval_accuracy, step, json_number_value(acc)));
        return BT_OK;
    }
    if (!json_object_get(r, "step") || json_object_get(r, "checkpoint")) return BT_OK;
    double step = num(r, "step", &ok);
    if (!ok) return bt_error(BT_ERR_IO, "a step record's step is not a number");
    json_t *loss = json_object_get(r, "loss");
    if (json_is_number(loss)) BT_TRY(bt_report_series_add(&run->loss, step, json_number_value(loss)));
    json_t *v = json_object_get(r, "samples_per_s");
    if (json_is_number(v)) BT_TRY(bt_report_series_add(&run->samples_per_s, step, json_number_value(v)));
    v = json_object_get(r, "bubble");
    if (json_is_number(v)) BT_TRY(bt_report_series_add(&run->bubble, step, json_number_value(v)));
    json_t *stages = json_object_get(r, "stages");
    size_t n = json_array_size(stages);
    if (n) {
        if ((int)n > *n_sums) {
            bt_report_stage *g = realloc(*sums, n * sizeof *g);
            if (!g) return bt_error(BT_ERR_NOMEM, "out of memory");
            memset(g + *n_sums, 0, (n - (size_t)*n_sums) * sizeof *g);
            *sums = g;
            *n_sums = (int)n;
        }
        for (size_t s = 0; s < n; s++) {
            json_t *o = json_array_get(stages, s);
            (*sums)[s].busy += num(o, "busy", &ok);
            (*sums)[s].transfer += num(o, "transfer", &ok);
            (*sums)[s].idle += num(o, "idle", &ok);
        }
        (*steps)++;
    }
    return BT_OK;
}

/* "name.jsonl (model, 2 stages, gpipe, 4 micro-batches)". */
static char *run_label(const char *path, const json_t *config)
{
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char buf[512];
    if (config) {
        json_t *m = json_object_get(config, "model"), *sc = json_object_get(config, "schedule");
        snprintf(buf, sizeof buf, "%s (%s, %lld stage%s, %s, %lld micro-batches)", base,
                 json_is_string(m) ? json_string_value(m) : "?",
                 (long long)json_integer_value(json_object_get(config, "stages")),
                 json_integer_value(json_object_get(config, "stages")) == 1 ? "" : "s",
                 json_is_string(sc) ? json_string_value(sc) : "?",
                 (long long)json_integer_value(json_object_get(config, "microbatches")));
    } else {
        snprintf(buf, sizeof buf, "%s", base);
    }
    return bt_strdup(buf);
}

static bt_status read_run(const char *path, bt_report_run *run)
{
    FILE *f = fopen(path, "r");
    if (!f) return bt_error(BT_ERR_IO, "%s: cannot open", path);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    bt_status st = BT_OK;
    json_t *config = NULL;
    bt_report_stage *sums = NULL;
    int n_sums = 0, steps = 0, have_summary = 0, records = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        const char *c = line;
        while (*c == ' ' || *c == '\t' || *c == '\r' || *c == '\n') c++;
        if (!*c) continue;
        json_error_t err;
        json_t *r = json_loads(c, 0, &err);
        if (!json_is_object(r)) {
            json_decref(r);
            st = bt_error(BT_ERR_IO, "%s:%ld: not a JSON record (was the run logged with --log-format jsonl?)",
                          path, lineno);
            break;
        }
        records++;
        if (json_is_true(json_object_get(r, "config")) && !config) {
            config = r;
            continue;
        }
        st = add_record(run, r, &sums, &n_sums, &steps, &have_summary);
        json_decref(r);
        if (st != BT_OK) {
            st = bt_error_context(st, "%s:%ld", path, lineno);
            break;
        }
    }
    if (st == BT_OK && !records) st = bt_error(BT_ERR_IO, "%s: no records", path);
    if (st == BT_OK && !run->loss.n && !run->samples_per_s.n)
        st = bt_error(BT_ERR_IO, "%s: no step records to plot", path);
    if (st == BT_OK && !have_summary && steps) {
        for (int s = 0; s < n_sums; s++)
            sums[s] = (bt_report_stage){sums[s].busy / steps, sums[s].transfer / steps, sums[s].idle / steps};
        run->stage = sums;
        run->n_stages = n_sums;
        sums = NULL;
    }
    if (st == BT_OK && !(run->label = run_label(path, config))) st = bt_error(BT_ERR_NOMEM, "out of memory");
    free(sums);
    json_decref(config);
    free(line);
    fclose(f);
    return st;
}

int bt_cmd_plot(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"title", required_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *out = "report.svg", *title = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 't': title = optarg; break;
        case 'h': plot_usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("plot", argc, argv, c);
        }
    }
    int n = argc - optind;
    if (n < 1) {
        fprintf(stderr, "baton plot: no run given (baton plot RUN.jsonl [-o report.svg])\n");
        return BT_EXIT_USAGE;
    }
    bt_cli_inputs in; /* the report may not replace a run file it draws (cli/outputs.h) */
    bt_cli_inputs_init(&in, "plot");
    for (int i = 0; i < n; i++) bt_cli_inputs_add(&in, "a run to draw", argv[optind + i]);
    int crc = bt_cli_outputs_check(&in, "-o", out);
    bt_cli_inputs_free(&in);
    if (crc != BT_EXIT_OK) return crc;
    bt_report_run *runs = calloc((size_t)n, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "baton plot: out of memory\n");
        return BT_EXIT_RUNTIME;
    }
    int rc = BT_EXIT_OK;
    for (int i = 0; i < n && rc == BT_EXIT_OK; i++) {
        bt_status st = read_run(argv[optind + i], &runs[i]);
        if (st != BT_OK) {
            fprintf(stderr, "baton plot: %s\n", bt_last_error());
            rc = BT_EXIT_USAGE;
        }
    }
    if (rc == BT_EXIT_OK) {
        bt_status st = bt_report_write_svg(runs, n, title, out);
        if (st != BT_OK) rc = bt_cli_fail("plot", st);
        else printf("baton plot: wrote %s (%d run%s)\n", out, n, n == 1 ? "" : "s");
    }
    for (int i = 0; i < n; i++) bt_report_run_clear(&runs[i]);
    free(runs);
    return rc;
}
