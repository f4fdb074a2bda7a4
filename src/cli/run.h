/* cli/run.h: what `baton run` was asked to do, shared by cmd_run.c (options, inference, the
 * generic synthetic loop) and run_train.c (training on data with evaluation and checkpoints). */
#ifndef BT_CLI_RUN_H
#define BT_CLI_RUN_H

#include "cli/cli.h"

typedef struct bt_run_opts {
    bt_cli_model_opts model;
    long long steps;
    int epochs;
    unsigned long long seed;
    int jsonl;
    int threads;
    long long batch;
    double watchdog_s;
    unsigned long long device_memory; /* --memory: bytes each device may hold; 0: what it has free */
    long long eval_every;        /* -1: unset (use the model's train.eval_every) */
    long long checkpoint_every;  /* -1: unset */
    const char *checkpoint_dir;
    const char *resume;
    const char *init;
    int synthetic;               /* ignore the data: section */
    int progress;                /* draw a progress bar (stdout is a terminal) */
    const char *trace_path;      /* --trace FILE.json */
    const char *timeline_path;   /* --timeline FILE.svg */
    int transfer;                /* --transfer: bt_transfer_mode */
    bt_cli_tracer *tracer;       /* set while a traced run is under way */
} bt_run_opts;

/* Trains m on its data with engine e; prints the run display. Returns the exit code, or -1 when
 * the model's inputs do not fit a (samples, labels) data source (the caller then falls back to
 * generic synthetic inputs). */
int bt_cli_train(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p);
/* The per-stage memory and throughput summary printed at the end of a run. */
void bt_cli_print_summary(const bt_run_opts *o, const bt_engine *e, double median_ms, int64_t batch);

#endif
