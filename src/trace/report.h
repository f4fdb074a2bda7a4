/* trace/report.h: a run report: what `baton plot` draws from the JSON records of one or more runs
 * (`baton run --log-format jsonl`). The CLI parses the records into bt_report_run; report_svg.c
 * draws them, runs overlaid in one colour each: loss (train, and eval as dashed lines with
 * markers) and eval accuracy against step, throughput and bubble against step, and each stage's
 * busy / transfer / idle shares as stacked bars. Plain data in, a file out; never prints. */
#ifndef BT_TRACE_REPORT_H
#define BT_TRACE_REPORT_H

#include <stdint.h>

#include "baton/status.h"

typedef struct bt_report_series {
    double *x, *y;   /* step, value */
    int n, cap;
} bt_report_series;

typedef struct bt_report_stage {
    double busy, transfer, idle; /* shares of the run's wall time */
} bt_report_stage;

typedef struct bt_report_run {
    char *label;                       /* legend text: the file name and what the run was */
    bt_report_series loss, eval_loss, eval_accuracy, samples_per_s, bubble;
    bt_report_stage *stage;
    int n_stages;
} bt_report_run;

/* Appends (x, y); BT_ERR_NOMEM if it cannot grow. */
bt_status bt_report_series_add(bt_report_series *s, double x, double y);
/* Frees what run holds (not run itself); accepts a zeroed run. */
void bt_report_run_clear(bt_report_run *run);
/* Draws n runs into a standalone SVG 1.1 file at path (written atomically). */
bt_status bt_report_write_svg(const bt_report_run *runs, int n, const char *title, const char *path);

#endif
