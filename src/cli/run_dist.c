/* cli/run_dist.c: `baton run` as one rank of a job across processes. Decides whether this run is
 * distributed (--dp D, parallel.data: D, or a launcher's environment: mpirun, srun), brings MPI up,
 * compares every rank's record of its command line and inputs as the first collective (the ranks
 * agree, or the job ends at start-up, exit 2: cli/agree.h), checks N = D x P against the model's
 * plan (P stages) and makes this rank's layout (rank = replica x P + stage). Only rank 0 prints step lines and the summary (the others' stdout goes to
 * /dev/null; errors still reach stderr, naming the rank, stage and replica), as plain step lines:
 * never the progress bar, whose terminal under mpirun is a pty of Open MPI's, not the user's
 * (docs/distributed.md). A rank that fails
 * ends the whole job (MPI_Abort), so no rank is left waiting on it. Without MPI in the build, a
 * request for more than one process is an error naming it; a plain `baton run` never touches MPI.
 * `baton predict` comes up the same way (bt_cli_dist_setup_serving). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agree.h"
#include "cli/run_dist.h"
#include "core/error.h"
#include "dist/dist.h"
#include "exec/engine_dist.h"
#include "plan/plan.h"

static int plan_stages(const char *cmd, const bt_model *m, const bt_engine_params *p, int *out)
{
    bt_plan *plan = NULL;
    bt_status st = bt_plan_build(m->graph, &p->parallel, &plan);
    if (st != BT_OK) return bt_cli_fail(cmd, st);
    *out = plan->stages;
    bt_plan_destroy(plan);
    return BT_EXIT_OK;
}

/* What a `baton run` rank must share with the others: run's own fields (first, so a flag that
 * differs is named as given), then the engine's. */
static void run_record(const bt_run_opts *o, const bt_model *m, const bt_engine_params *p, bt_agree *a)
{
    bt_agree_str(a, "command", "run");
    bt_agree_int(a, "train.steps (--steps; 0: by epochs)", o->steps > 0 ? o->steps : (long long)m->train.steps);
    bt_agree_int(a, "train.epochs (--epochs)", o->epochs > 0 ? o->epochs : m->train.epochs);
    bt_agree_int(a, "train.eval_every (--eval-every)",
                 o->eval_every >= 0 ? o->eval_every : (long long)m->train.eval_every);
    bt_agree_int(a, "train.checkpoint_every (--checkpoint-every)",
                 o->checkpoint_every >= 0 ? o->checkpoint_every : (long long)m->train.checkpoint_every);
    bt_agree_str(a, "train.checkpoint_dir (--checkpoint-dir)",
                 o->checkpoint_dir ? o->checkpoint_dir : m->train.checkpoint_dir);
    bt_agree_int(a, "train.checkpoint_keep_last (--keep-last)",
                 o->keep_last >= 0 ? o->keep_last : m->train.checkpoint_keep_last);
    bt_agree_int(a, "--checkpoint-shards", o->checkpoint_shards);
    bt_cli_agree_weights(a, "--resume", o->resume);
    bt_cli_agree_weights(a, o->init_partial ? "--init-partial" : "--init", o->init);
    bt_agree_int(a, "--synthetic", o->synthetic);
    if (!o->synthetic) { /* --synthetic reads no data: a rank need not have the files */
        bt_cli_agree_data(a, "data.train", &m->data.train);
        bt_cli_agree_data(a, "data.eval", &m->data.eval);
    }
    /* the outputs are rank 0's to write, but every rank takes part in the trace, and one command
     * line for every rank is the rule: no rank's flag is ignored */
    bt_agree_str(a, "--trace", o->trace_path);
    bt_agree_str(a, "--timeline", o->timeline_path);
    bt_agree_str(a, "train.tensorboard (--tensorboard)", o->tensorboard ? o->tensorboard : m->train.tensorboard);
    bt_agree_str(a, "--log-file", o->log_file);
    bt_agree_str(a, "--log-format", o->jsonl ? "jsonl" : "text");
    bt_agree_int(a, "--log-every", o->log_every);
    bt_engine_agree_fields(a, m->graph, p);
}

/* After the launcher checks: MPI up, the ranks' records compared (a, and the layout: P stages of
 * the plan, D = want, or N / P for 0), this rank's layout, the other ranks' stdout to /dev/null.
 * Exit code. */
static int bring_up(const char *cmd, const bt_model *m, const bt_engine_params *p, int want, bt_agree *a,
                    double timeout_s, bt_cli_dist *d)
{
    int stages = 0;
    int rc = plan_stages(cmd, m, p, &stages);
    if (rc != BT_EXIT_OK) return rc;
    int rank = 0, size = 1;
    bt_status st = bt_dist_init(&rank, &size);
    d->mpi_up = 1;
    if (st != BT_OK) return bt_cli_fail(cmd, st);
    bt_agree_int(a, "the plan's stages (P)", stages);
    bt_agree_int(a, "parallel.data (--dp; D)", want > 0 ? want : size / stages);
    /* the first collective: ranks that differ in anything the layout depends on stop here too */
    if ((rc = bt_cli_agree(cmd, a, timeout_s, &d->mpi_up)) != BT_EXIT_OK) return rc;
    st = bt_dist_layout_make(size, rank, want > 0 ? want : 0, stages, &d->layout);
    if (st != BT_OK) {
        if (rank == 0) bt_cli_fail(cmd, st); /* every rank finds the same: one message */
        bt_dist_finalize();
        d->mpi_up = 0;
        return BT_EXIT_USAGE;
    }
    d->on = 1;
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "baton %s: rank %d: cannot redirect its output to /dev/null\n", cmd, rank);
        return BT_EXIT_RUNTIME;
    }
    return BT_EXIT_OK;
}

int bt_cli_dist_setup(const bt_run_opts *o, const bt_model *m, const bt_engine_params *p, bt_cli_dist *d)
{
    memset(d, 0, sizeof *d);
    const char *var = NULL;
    int launched = bt_dist_launched(&var);
    int want = o->dp > 0 ? o->dp : m->parallel.data;
    const char *asked = o->dp > 0 ? "--dp" : "parallel.data";
    if (launched <= 1 && want <= 1) return BT_EXIT_OK; /* one process, as always */
    if (!bt_dist_built()) {
        if (want > 1)
            fprintf(stderr, "baton run: %s %d asks for a job across processes, but this baton was built without "
                    "MPI: install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and configure again\n",
                    asked, want);
        else
            fprintf(stderr, "baton run: started as one of %d ranks (%s), but this baton was built without MPI: "
                    "install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and configure again\n",
                    launched, var);
        return BT_EXIT_USAGE;
    }
    if (launched == 0) {
        int stages = 0;
        int rc = plan_stages("run", m, p, &stages);
        if (rc != BT_EXIT_OK) return rc;
        fprintf(stderr, "baton run: %s %d asks for %d data-parallel replicas of the model's %d stages: start it as "
                "N = D x P = %d ranks, mpirun -np %d baton run ...\n",
                asked, want, want, stages, want * stages, want * stages);
        return BT_EXIT_USAGE;
    }
    bt_agree a;
    bt_agree_init(&a);
    run_record(o, m, p, &a);
    int rc = bring_up("run", m, p, want, &a, o->watchdog_s, d);
    bt_agree_free(&a);
    return rc;
}

int bt_cli_dist_setup_serving(const char *cmd, const bt_model *m, const bt_engine_params *p, bt_agree *a,
                              double timeout_s, bt_cli_dist *d)
{
    memset(d, 0, sizeof *d);
    const char *var = NULL;
    int launched = bt_dist_launched(&var);
    if (launched <= 1) return BT_EXIT_OK;
    if (!bt_dist_built()) {
        fprintf(stderr, "baton %s: started as one of %d ranks (%s), but this baton was built without MPI: "
                "install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and configure again\n",
                cmd, launched, var);
        return BT_EXIT_USAGE;
    }
    return bring_up(cmd, m, p, 0, a, timeout_s, d);
}

int bt_cli_dist_refuse_auto(const char *cmd, const bt_model *m, int dp)
{
    if (!m->parallel.auto_layout || (bt_dist_launched(NULL) <= 1 && dp <= 1 && m->parallel.data <= 1))
        return BT_EXIT_OK;
    /* every rank would measure on cores the others are measuring on, and choose on its own */
    fprintf(stderr, "baton %s: parallel: auto cannot be resolved across processes (each rank would measure "
                    "and choose its own layout): give the layout, e.g. --stages P --microbatches M, or a "
                    "parallel: section in the model file\n", cmd);
    return BT_EXIT_USAGE;
}

void bt_cli_dist_outputs(bt_cli_dist *d, bt_run_opts *o, bt_model *m)
{
    int replicas = d->on ? d->layout.data : 1;
    if (m->parallel.zero && (replicas < 2 || !m->train.enabled) && (!d->on || d->layout.rank == 0))
        /* a model file may say it for the runs that have replicas: a note, not an error */
        fprintf(stderr, "baton run: note: parallel.zero: 1 shards the optimizer state over data-parallel replicas; "
                "this run has %s, so it changes nothing\n",
                !m->train.enabled ? "no training (no optimizer state)" : "one replica (D = 1)");
    if (!d->on) return;
    /* Open MPI gives every rank a pseudo-terminal of its own, so isatty says yes even when mpirun's
     * output goes to a file or a pipe, and a rank cannot see what mpirun writes to: under a
     * launcher no rank draws the progress bar; rank 0 prints plain step lines */
    o->progress = 0;
    bt_cli_stop_under_launcher();
    if (o->trace_path || o->timeline_path) d->trace = 1; /* every rank shares its records with rank 0 */
    if (d->layout.rank == 0) return;
    /* --trace stays on: every rank traces, and rank 0 writes the job's one trace (run_trace.c) */
    o->timeline_path = NULL;
    o->tensorboard = NULL;
    m->train.tensorboard = NULL;
    o->log_file = NULL;
}

bt_status bt_cli_dist_create_engine(const bt_cli_dist *d, const bt_model *m, const bt_engine_params *p,
                                    bt_engine **out)
{
    if (!d->on) return bt_engine_create(m->graph, p, out);
    BT_TRY(bt_engine_create_dist(m->graph, p, &d->layout, out));
    bt_engine_dist_trace(*out, d->trace);
    return BT_OK;
}

void bt_cli_dist_gather(const bt_engine *e)
{
    if (!bt_engine_dist_layout(e)) return;
    /* collective: every rank runs the summary (only rank 0's output is shown); the statistics are
     * the engine's own, so the summary may refresh them */
    bt_status st = bt_engine_dist_gather_stats((bt_engine *)e);
    if (st != BT_OK) bt_cli_fail("run", st);
}

void bt_cli_dist_summary(const bt_run_opts *o, const bt_engine *e)
{
    const bt_dist_layout *l = bt_engine_dist_layout(e);
    if (!l) return;
    int64_t n = 0, early = 0;
    double bytes = 0, wait_ms = 0, total_ms = 0;
    bt_engine_dist_reduce_stats(e, &n, &early, &bytes, &wait_ms, &total_ms);
    if (o->jsonl) {
        printf("{\"job\": {\"ranks\": %d, \"data\": %d, \"stages\": %d, \"allreduce\": {\"count\": %lld, "
               "\"early\": %lld, \"bytes\": %.0f, \"wait_ms\": %.3f, \"path\": \"%s\"}, \"per_rank\": [",
               l->size, l->data, l->stages, (long long)n, (long long)early, bytes, wait_ms,
               bt_transfer_path_name(bt_engine_dist_reduce_path(e)));
        for (int r = 0; r < l->size; r++) {
            bt_time_stats t;
            bt_memory_stats m;
            if (bt_engine_dist_rank_stats(e, r, &t, &m) != BT_OK) break;
            double wall = t.wall_ms > 0 ? t.wall_ms : 1;
            printf("%s{\"rank\": %d, \"replica\": %d, \"stage\": %d, \"peak_bytes\": %zu, \"busy\": %.4f, "
                   "\"transfer\": %.4f, \"idle\": %.4f}",
                   r ? ", " : "", r, r / l->stages, r % l->stages, m.peak, t.busy_ms / wall, t.transfer_ms / wall,
                   t.idle_ms / wall);
        }
        printf("]");
        bt_cli_job_rows_json(e); /* every replica's boundaries, each rank's reductions */
        printf("}}\n");
        return;
    }
    printf("  job: %d ranks = %d replica%s x %d stage%s (rank = replica x %d + stage); the stage rows above are "
           "replica 0's, each measured by its own rank; per rank (STEP's waits for other ranks count as busy):\n",
           l->size, l->data, l->data == 1 ? "" : "s", l->stages, l->stages == 1 ? "" : "s", l->stages);
    printf("  %-5s %-7s %-5s %11s %6s %6s %6s\n", "rank", "replica", "stage", "peak", "busy", "xfer", "idle");
    for (int r = 0; r < l->size; r++) {
        bt_time_stats t;
        bt_memory_stats m;
        char pk[32];
        if (bt_engine_dist_rank_stats(e, r, &t, &m) != BT_OK) break;
        double wall = t.wall_ms > 0 ? t.wall_ms : 1;
        printf("  %-5d %-7d %-5d %11s %5.1f%% %5.1f%% %5.1f%%\n", r, r / l->stages, r % l->stages,
               bt_cli_bytes((double)m.peak, pk, sizeof pk), 100 * t.busy_ms / wall, 100 * t.transfer_ms / wall,
               100 * t.idle_ms / wall);
    }
    if (n > 0)
        printf("  gradient all-reduce: %lld of rank 0's %lld bucket reductions started during the backward work\n",
               (long long)early, (long long)n);
    bt_cli_job_rows_text(e); /* the other replicas' boundaries, each rank's gradient reductions */
}

int bt_cli_dist_finish(bt_cli_dist *d, int rc)
{
    if (!d->mpi_up) return rc;
    fflush(stdout);
    fflush(stderr);
    /* the others may wait on this rank: end them all; but a run stopped by a signal stopped on
     * every rank after the same step (bt_engine_agree_stop) and ends cleanly */
    if (rc != BT_EXIT_OK && rc != 128 + SIGINT && rc != 128 + SIGTERM) bt_dist_abort(rc);
    bt_dist_finalize();
    d->mpi_up = 0;
    return rc;
}
