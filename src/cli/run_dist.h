/* cli/run_dist.h: the hooks `baton run` calls for a job across processes (run_dist.c). */
#ifndef BT_CLI_RUN_DIST_H
#define BT_CLI_RUN_DIST_H

#include "cli/cli.h"
#include "cli/run.h"
#include "dist/agree.h"
#include "dist/dist.h"

typedef struct bt_cli_dist {
    int on;                    /* this run is one rank of a job across processes */
    int mpi_up;                /* MPI was initialised (finish ends it) */
    int trace;                 /* --trace or --timeline: the ranks share their records with rank 0 */
    bt_dist_layout layout;
} bt_cli_dist;

/* Decides whether the run is distributed and brings MPI up if so. Exit code (BT_EXIT_USAGE naming
 * N, D and P for a layout that does not fit, or MPI missing from the build). */
int bt_cli_dist_setup(const bt_run_opts *o, const bt_model *m, const bt_engine_params *p, bt_cli_dist *d);
/* The same for a command that serves (predict): under a launcher, one rank per stage of N / P
 * replicas (parallel.data is training's), after the ranks compared the record a (cli/agree.h),
 * to which the layout is added; nothing in one process. Exit code, as above. */
int bt_cli_dist_setup_serving(const char *cmd, const bt_model *m, const bt_engine_params *p, bt_agree *a,
                              double timeout_s, bt_cli_dist *d);
/* parallel: auto under a launcher (or with dp or parallel.data above 1): BT_EXIT_USAGE with a message
 * saying to give the layout (every rank would measure and choose its own); else BT_EXIT_OK. */
int bt_cli_dist_refuse_auto(const char *cmd, const bt_model *m, int dp);
/* Ranks other than 0 write no trace, timeline, log or TensorBoard files: their paths are cleared in o
 * and m; rank 0's trace and timeline show every stage of replica 0 (docs/distributed.md). */
void bt_cli_dist_outputs(bt_cli_dist *d, bt_run_opts *o, bt_model *m);
/* bt_engine_create, or this rank's part of the distributed engine. */
bt_status bt_cli_dist_create_engine(const bt_cli_dist *d, const bt_model *m, const bt_engine_params *p,
                                    bt_engine **out);
/* Every rank calls both where the summary is printed: gather first (collective: each stage's
 * statistics from its own rank), then the job's line. Nothing in one process. */
void bt_cli_dist_gather(const bt_engine *e);
void bt_cli_dist_summary(const bt_run_opts *o, const bt_engine *e);
/* The summary's rows of the other replicas' boundaries and of each rank's gradient reductions
 * (path, bytes, GB/s, time hidden behind compute), as text or inside the JSON "job" record
 * (run_job_summary.c; nothing in one process). */
void bt_cli_job_rows_text(const bt_engine *e);
void bt_cli_job_rows_json(const bt_engine *e);
/* After the run: a failed rank ends the whole job (MPI_Abort, never returns); otherwise MPI is
 * finalised. Returns rc. */
int bt_cli_dist_finish(bt_cli_dist *d, int rc);

#endif
