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
int bt_cmd_profile(int argc, char **argv);
int bt_cmd_plan(int argc, char **argv);

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

/* Loads the model and applies the flags; on failure prints the error and returns the exit code. */
int bt_cli_load_model(const char *cmd, const bt_cli_model_opts *opts, bt_model **out);
/* Formats 1863690 as "1,863,690". */
const char *bt_cli_group(long long v, char *buf, size_t size);
/* Formats bytes as "12.3 MiB". */
const char *bt_cli_bytes(double bytes, char *buf, size_t size);

#endif
