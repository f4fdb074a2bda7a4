/* cli/cli.h: the baton command-line tool's subcommands and shared helpers. Only main() decides
 * the exit code: 0 success, 2 usage or model error, 1 runtime failure. */
#ifndef BT_CLI_H
#define BT_CLI_H

#include "baton.h"

#define BT_EXIT_OK 0
#define BT_EXIT_RUNTIME 1
#define BT_EXIT_USAGE 2

int bt_cmd_check(int argc, char **argv);
int bt_cmd_run(int argc, char **argv);
int bt_cmd_ops(int argc, char **argv);
int bt_cmd_devices(int argc, char **argv);
int bt_cmd_profile(int argc, char **argv);
int bt_cmd_plan(int argc, char **argv);
int bt_cmd_plot(int argc, char **argv);

/* --trace / --timeline of `baton run` (run_trace.c). Every function accepts a NULL tracer (no
 * tracing asked for) and does nothing. */
typedef struct bt_cli_tracer bt_cli_tracer;
/* Turns the engine's recording on when a path is given; *out stays NULL otherwise. Exit code. */
int bt_cli_tracer_start(bt_engine *e, const char *json_path, const char *svg_path, bt_cli_tracer **out);
/* Adds the engine's last step to the trace (call after every step). Exit code. */
int bt_cli_tracer_step(bt_cli_tracer *t);
/* Prints the predicted vs measured step time and each stage's busy/transfer/idle shares. */
void bt_cli_tracer_summary(const bt_cli_tracer *t, int jsonl, double measured_ms);
/* Writes the JSON and SVG files. Exit code. */
int bt_cli_tracer_write(bt_cli_tracer *t, int jsonl);
void bt_cli_tracer_destroy(bt_cli_tracer *t);

/* Exit code for a failed call: 2 for model and argument errors, 1 otherwise. */
int bt_cli_exit_code(bt_status status);
/* Prints "baton CMD: <bt_last_error()>" to stderr and returns the exit code for status. */
int bt_cli_fail(const char *cmd, bt_status status);

/* Options shared by check and run: model path, overrides and the flags that beat the file. */
typedef struct bt_cli_model_opts {
    const char *path;
    const char *overrides[64];
    int n_overrides;
    const char *devices;
    int stages;
    int microbatches;
    const char *schedule;
    const char *balance;
    const char *layout;
    const char *partition;
} bt_cli_model_opts;

/* Takes argv[first..] after the options: KEY=VALUE overrides and one model path. Returns
 * BT_EXIT_OK, or prints a message naming cmd and returns BT_EXIT_USAGE. */
int bt_cli_take_positional(const char *cmd, int argc, char **argv, int first, bt_cli_model_opts *o);
/* Loads the model and applies the flags; on failure prints the error and returns the exit code. */
int bt_cli_load_model(const char *cmd, const bt_cli_model_opts *opts, bt_model **out);
/* Parses a byte count: "512M", "2G", "1.5GiB", "4096". Returns 1 on success. */
int bt_cli_parse_bytes(const char *s, unsigned long long *out);
/* Formats 1863690 as "1,863,690". */
const char *bt_cli_group(long long v, char *buf, size_t size);
/* Formats bytes as "12.3 MiB". */
const char *bt_cli_bytes(double bytes, char *buf, size_t size);

#endif
