/* cli/cli.h: the baton command-line tool's subcommands and shared helpers. Only main() decides
 * the exit code: 0 success, 2 usage or model error, 1 runtime failure. */
#ifndef BT_CLI_H
#define BT_CLI_H

#include <stdio.h>

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
int bt_cmd_predict(int argc, char **argv);
int bt_cmd_generate(int argc, char **argv);
int bt_cmd_tokenize(int argc, char **argv);
int bt_cmd_import(int argc, char **argv);

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
/* Prints "baton CMD: <bt_last_error()>" to stderr, control characters escaped. */
void bt_cli_print_error(const char *cmd);

/* Terminal output of strings a user or a file gave (names, paths, messages that quote them):
 * control characters (below 0x20, and 0x7f) are written as \xNN, so no escape sequence or
 * carriage return from a model file reaches the terminal. */
void bt_cli_print_escaped(FILE *f, const char *s);
/* The same into buf (truncated to size); returns buf, for printf's %s. */
const char *bt_cli_escape(const char *s, char *buf, size_t size);

/* Upper bounds of integer options (the model file's own limits where it has the same key). */
#define BT_CLI_MAX_BATCH (1LL << 30)      /* train.batch */
#define BT_CLI_MAX_EPOCHS 1000000         /* train.epochs */
#define BT_CLI_MAX_STEPS 1000000000LL     /* one timing slot per step is kept */
#define BT_CLI_MAX_THREADS 256
#define BT_CLI_MAX_REPEATS 100000

/* s as a JSON string literal, quotes included. */
void bt_cli_print_json_string(FILE *f, const char *s);
/* 1 when s can name a file in the working directory as it is: 1 to 200 bytes, no '/', '\\' or
 * control character, not starting with '.' (so never "..", nor hidden). Default output names made
 * from a model's name must pass (`name: ../../tmp/x` must not write outside the directory). */
int bt_cli_plain_file_name(const char *s);

/* Integer options, parsed strictly: an optional '-' and decimal digits only, no overflow, within
 * [lo, hi]. Otherwise prints "baton CMD: OPTION: must be a positive integer, got 0" (the range in
 * words: "an integer from LO to HI", ...; the text quoted unless it is digits) and the one-line
 * hint, and returns BT_EXIT_USAGE; BT_EXIT_OK on success. Every integer option of every command goes
 * through these. */
int bt_cli_parse_int(const char *cmd, const char *option, const char *text, long long lo, long long hi,
                     long long *out);
int bt_cli_parse_int32(const char *cmd, const char *option, const char *text, int lo, int hi, int *out);
/* Any option's bad value: "baton CMD: OPTION: must be RANGE, got TEXT" and the hint. Returns
 * BT_EXIT_USAGE. */
int bt_cli_bad_value(const char *cmd, const char *option, const char *range, const char *text);
/* The one-line hint after an option error: "(baton CMD --help lists the options ...)". */
void bt_cli_hint(const char *cmd);
/* For getopt's '?' and ':' (with opterr = 0 and a leading ':' in the option string): prints
 * "baton CMD: unknown option '--x'" or "baton CMD: --x needs a value" and the hint, not the
 * whole help. Returns BT_EXIT_USAGE. */
int bt_cli_bad_option(const char *cmd, int argc, char **argv, int opt);
/* 0 to 2^64-1 (--seed). */
int bt_cli_parse_u64(const char *cmd, const char *option, const char *text, unsigned long long *out);

/* Options shared by check and run: model path, overrides and the flags that beat the file. */
typedef struct bt_cli_model_opts {
    const char *path;
    const char *overrides[64];
    int n_overrides;
    const char *devices;
    int stages;
    int microbatches;
    const char *schedule;
    int virtual_stages;       /* --virtual (interleaved-1f1b); 0: the file's */
    const char *balance;
    const char *layout;
    const char *partition;
    const char *plugins[16];     /* --plugin LIB.so, loaded before the model (plugin.c) */
    int n_plugins;
    const char *recompute;       /* --recompute none | stage | LAYER,LAYER (beats train.recompute) */
    long long batch;             /* --batch (run, predict): beats train.batch of a model that trains, so
                                    --microbatches is checked against it; 0: the file's */
} bt_cli_model_opts;

/* --plugin (plugin.c): add remembers a library (at most 16); load dlopens each and calls its
 * bt_status baton_plugin_register(void). Exit codes; messages name cmd and the library. */
int bt_cli_add_plugin(const char *cmd, bt_cli_model_opts *o, const char *path);
int bt_cli_load_plugins(const char *cmd, const bt_cli_model_opts *o);

/* Takes argv[first..] after the options: KEY=VALUE overrides and one model path. Returns
 * BT_EXIT_OK, or prints a message naming cmd and returns BT_EXIT_USAGE. */
int bt_cli_take_positional(const char *cmd, int argc, char **argv, int first, bt_cli_model_opts *o);
/* Loads the model and applies the flags; on failure prints the error and returns the exit code. */
int bt_cli_load_model(const char *cmd, const bt_cli_model_opts *opts, bt_model **out);
/* A command that uses a model's weights refuses a Hugging Face directory whose checkpoint baton
 * cannot use as it is (bt_model_hf_check_weights), generate any directory (its prompts need the
 * directory's tokenizer, not wired into generate yet) and run (training: fine-tuning is not built
 * yet): exit 2 saying why, never a run on random weights. Frees *m then. */
int bt_cli_refuse_hf_weights(const char *cmd, bt_model **m, int training);
/* Parses a byte count: "512M", "2G", "1.5GiB", "4096". Returns 1 on success. */
int bt_cli_parse_bytes(const char *s, unsigned long long *out);
/* Formats 1863690 as "1,863,690". */
const char *bt_cli_group(long long v, char *buf, size_t size);
/* Formats bytes as "12.3 MiB". */
const char *bt_cli_bytes(double bytes, char *buf, size_t size);

/* ---- parallel: auto (auto.c) ---------------------------------------------------------------- */

struct bt_search_params;
struct bt_search_result;
/* What a resolved `parallel: auto` chose beyond the parallel config: the BLAS threads per stage
 * (the model's config now owns the strings it points to; the fields below stay for a failure). */
typedef struct bt_cli_auto {
    int threads;                 /* 0: parallel was not auto */
    int recompute;               /* the chosen recomputation (-1: the file's own flags) */
    char *devices, *layout;
} bt_cli_auto;
/* When m says parallel: auto, measures and searches, and rewrites m->parallel (and the graph's
 * recomputation) to the fastest layout; threads > 0 fixes the thread count. With try_top, the few
 * fastest predictions are first built and timed for a few steps each, alternating, and the
 * fastest measured runs. Prints the choice when verbose. Exit code. */
int bt_cli_resolve_auto(const char *cmd, bt_model *m, int threads, int verbose, int try_top, bt_cli_auto *a);
/* The same for serving (forward_only: the stream schedule, no trials), another batch (> 0), or
 * devices offering `memory` bytes each (> 0, as --memory). */
int bt_cli_resolve_auto_for(const char *cmd, bt_model *m, int threads, int verbose, int try_top, int forward_only,
                            int64_t batch, uint64_t memory, bt_cli_auto *a);
/* auto_record.c: writes the layout an auto model was resolved to as DIR/auto-layout.txt (creating
 * DIR), so that a resume from DIR takes the same layout. Exit code. */
int bt_cli_auto_record(const char *dir, const bt_parallel_config *cfg, int threads, int recompute);
/* For `--resume WHERE` on an auto model: when WHERE's directory has the record, sets m->parallel to
 * it (auto_layout 0), *threads and *recompute, *found = 1 and prints the layout; without a record,
 * says that the layout is chosen again (*found = 0). Exit code. */
int bt_cli_auto_recall(const char *resume, bt_model *m, int *threads, int *recompute, int *found);
void bt_cli_auto_clear(bt_cli_auto *a);
/* The search's parameters for m: candidate devices (NULL or "auto": one cpu:N per core), fixed
 * threads (0: search). */
void bt_cli_auto_params(const bt_model *m, const char *devices, int threads, struct bt_search_params *sp);
/* Measures and searches (repeats per measurement; 0: 3). Exit code; *r is cleared by the caller. */
int bt_cli_auto_search(const char *cmd, const bt_model *m, const struct bt_search_params *sp, int repeats,
                       struct bt_search_result *r);
/* The table of the best layout per (stages, schedule, recompute) when full, then the choice and how
 * it compares with the best one-stage or pipelined layout. */
void bt_cli_auto_report(const struct bt_search_result *r, int64_t batch, int full);

#endif
