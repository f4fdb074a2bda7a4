/* cli/run_log.c: the JSON records of `baton run`, built with jansson (so a name or path holding
 * '"' or '\' is escaped, never pasted), and where they go: to stdout with --log-format jsonl, and
 * to the --log-file FILE whatever the terminal shows (the progress bar or text lines). One record
 * per line; numbers are written with 9 significant digits (a float32 loss survives the trip), and
 * a number that is not finite is written null. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/run.h"
#include "dist/dist.h"

json_t *bt_cli_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

int bt_cli_log_open(bt_run_opts *o)
{
    /* under a launcher rank 0 alone writes the job's log (run_dist.c); the others must not even
     * open it, since "w" truncates and their file system may not be rank 0's */
    if (!o->log_file || (bt_dist_launched(NULL) > 1 && bt_dist_launched_rank() != 0)) return BT_EXIT_OK;
    o->log = fopen(o->log_file, "w");
    if (!o->log) {
        char shown[1024];
        fprintf(stderr, "baton run: --log-file %s: cannot create it: %s\n",
                bt_cli_escape(o->log_file, shown, sizeof shown), strerror(errno));
        return BT_EXIT_USAGE;
    }
    return BT_EXIT_OK;
}

int bt_cli_log_close(bt_run_opts *o)
{
    if (!o->log) return BT_EXIT_OK;
    int bad = ferror(o->log);
    bad |= fclose(o->log) != 0;
    o->log = NULL;
    if (bad) {
        char shown[1024];
        fprintf(stderr, "baton run: --log-file %s: writing it failed\n", bt_cli_escape(o->log_file, shown, sizeof shown));
        return BT_EXIT_RUNTIME;
    }
    return BT_EXIT_OK;
}

void bt_cli_record(const bt_run_opts *o, json_t *rec)
{
    if (!rec) return;
    size_t flags = JSON_REAL_PRECISION(9) | JSON_ENSURE_ASCII;
    if (o->jsonl) {
        json_dumpf(rec, stdout, flags);
        fputc('\n', stdout);
        fflush(stdout);
    }
    if (o->log) {
        json_dumpf(rec, o->log, flags);
        fputc('\n', o->log);
        fflush(o->log);
    }
    json_decref(rec);
}

int bt_cli_log_step(const bt_run_opts *o, int64_t step, int64_t first, int64_t total)
{
    return o->log_every <= 1 || step % o->log_every == 0 || step == total || step == first + 1;
}
