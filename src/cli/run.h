/* cli/run.h: what `baton run` was asked to do, shared by cmd_run.c (options, inference, the
 * generic synthetic loop) and run_train.c (training on data with evaluation and checkpoints). */
#ifndef BT_CLI_RUN_H
#define BT_CLI_RUN_H

#include <signal.h>
#include <stdio.h>

#include <jansson.h>

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
    int init_partial;            /* --init-partial FILE: load what matches, list what was skipped */
    int keep_last;               /* --keep-last N; -1: unset (train.checkpoint_keep_last) */
    int checkpoint_shards;       /* --checkpoint-shards: sharded checkpoints in one process too */
    long long log_every;         /* --log-every N: step lines and records every N steps (0, 1: all) */
    const char *log_file;        /* --log-file FILE: JSON records, whatever the terminal shows */
    FILE *log;                   /* open while the run goes (run_log.c) */
    int synthetic;               /* ignore the data: section */
    int progress;                /* draw a progress bar (stdout is a terminal) */
    const char *trace_path;      /* --trace FILE.json */
    const char *timeline_path;   /* --timeline FILE.svg */
    int transfer;                /* --transfer: bt_transfer_mode */
    int dp;                      /* --dp D: data-parallel replicas across processes (0: unset) */
    const char *tensorboard;     /* --tensorboard DIR (beats train.tensorboard) */
    bt_cli_tracer *tracer;       /* set while a traced run is under way */
} bt_run_opts;

/* Trains m on its data with engine e; prints the run display. Returns the exit code. */
int bt_cli_train(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p);
/* A model without train: (run_infer.c). Before anything runs: BT_EXIT_USAGE, with a message naming
 * it, for a flag only training honours, a training schedule, or no data and no --synthetic. */
int bt_cli_infer_check(const bt_run_opts *o, const bt_model *m);
/* Applies --init, then streams the model's data through e and prints the display; returns the
 * exit code, or -1 when the run asked for synthetic batches (the caller's generic loop). */
int bt_cli_infer(const bt_run_opts *o, const bt_model *m, bt_engine *e, const bt_engine_params *p);
/* Per-step measurements beyond bt_step_result, and the TensorBoard event file (run_metrics.c).
 * Every function accepts a NULL bt_cli_metrics and does nothing. */
typedef struct bt_cli_stage_step {
    double busy, transfer, idle; /* shares of the stage's wall time in the step just done */
    size_t peak_bytes;
} bt_cli_stage_step;
typedef struct bt_cli_metrics bt_cli_metrics;
/* The event directory: --tensorboard, else the model's train.tensorboard, else NULL. */
const char *bt_cli_tensorboard_dir(const bt_run_opts *o, const bt_model *m);
/* BT_EXIT_USAGE (with a message) when an event directory is asked for and this build cannot write
 * event files (naming protobuf-c), or the path or one of its parents exists and is not a directory
 * (naming it, as a --checkpoint-dir FILE is); BT_EXIT_OK otherwise. Called before anything runs,
 * before the configuration table; creates nothing (the writer makes the directories). */
int bt_cli_tensorboard_check(const bt_run_opts *o, const bt_model *m);
/* Starts measuring (and opens the event file, writing the configuration, when asked). Exit code. */
int bt_cli_metrics_open(const bt_run_opts *o, const bt_model *m, const bt_engine *e, const bt_engine_params *p,
                        int64_t first_step, int64_t total_steps, bt_cli_metrics **out);
/* After each training step: this step's stage shares; the step's scalars to the event file. A
 * failed write is reported at once and makes close return BT_EXIT_RUNTIME. */
void bt_cli_metrics_step(bt_cli_metrics *mt, const bt_engine *e, int64_t step, const bt_step_result *r);
/* After an evaluation (accuracy NaN: loss only). */
void bt_cli_metrics_eval(bt_cli_metrics *mt, const bt_engine *e, int64_t step, double loss, double accuracy);
/* Closes the event file; accepts NULL. Exit code. */
int bt_cli_metrics_close(bt_cli_metrics *mt);

/* SIGINT/SIGTERM during training (run_signals.c). begin installs the handlers and returns the flag
 * the first signal sets (for bt_trainer_opts.stop); a second signal stops the process at once.
 * end puts the previous handlers back and returns the signal that set the flag, or 0. */
volatile sig_atomic_t *bt_cli_stop_begin(void);
volatile sig_atomic_t *bt_cli_stop_flag(void);
int bt_cli_stop_end(void);
/* One rank of a job under a launcher: a stop signal also makes standard output non-blocking
 * (run_signals.c says why). */
void bt_cli_stop_under_launcher(void);

/* JSON records (run_log.c): built with jansson, written to stdout under --log-format jsonl and to
 * the --log-file. bt_cli_record takes rec (NULL: nothing). bt_cli_json_num gives null for a
 * number that is not finite. bt_cli_log_step: 1 when step's line or record is shown under
 * --log-every (every Nth, the first of the run and the last). */
int bt_cli_log_open(bt_run_opts *o);
int bt_cli_log_close(bt_run_opts *o);
void bt_cli_record(const bt_run_opts *o, json_t *rec);
json_t *bt_cli_json_num(double v);
int bt_cli_log_step(const bt_run_opts *o, int64_t step, int64_t first, int64_t total);
/* The stage shares of the step just done as a JSON array ([{"busy", "transfer", "idle",
 * "peak_bytes"}, ...]); NULL without metrics. */
json_t *bt_cli_metrics_json(const bt_cli_metrics *mt);
/* The progress bar (run_progress.c): one line, redrawn, as wide as the terminal; elapsed time and
 * an ETA from this run's steps so far. tokens > 0: a language model's tokens per sample, and the
 * rate is shown in tokens/s. */
void bt_cli_progress(int64_t step, int64_t first, int64_t total, int64_t epoch, const bt_step_result *r,
                     double loss_avg, double elapsed_s, int64_t tokens);

/* Synthetic feeds for every graph input (cmd_run.c): floats uniform in [-1, 1], integers uniform
 * below the range their consumer declares. 0, or -1 when out of memory. */
typedef struct bt_cli_synth {
    int n;
    bt_feed feeds[64];
    void *buf[64];
} bt_cli_synth;
int bt_cli_synth_make(const bt_graph *g, int64_t batch, uint64_t seed, bt_cli_synth *d);
void bt_cli_synth_free(bt_cli_synth *d);

/* The per-stage memory and throughput summary printed at the end of a run. */
void bt_cli_print_summary(const bt_run_opts *o, const bt_engine *e, double median_ms, int64_t batch);
/* The conv2d path chosen for each CPU conv shape so far, naming g's layers of that shape
 * (run_conv.c); o NULL: plain text. Nothing when no conv2d ran on a CPU. */
void bt_cli_print_conv_choices(const bt_run_opts *o, const bt_graph *g);
/* conv2d's path choices kept beside checkpoints (run_conv_record.c). write: this process's record
 * in dir (DIR/conv-paths.json, or conv-paths.rank<N>.json under a launcher), when the choices
 * changed since its last write or always is set; dir NULL: nothing. load: before anything is
 * measured, preloads the records beside a --resume argument (a directory or a checkpoint file);
 * a malformed record or a path this build cannot run is BT_EXIT_USAGE naming the file. Exit codes. */
int bt_cli_conv_record_write(const char *dir, int always);
int bt_cli_conv_record_load(const char *resume, const bt_graph *g, int jsonl);

#endif
