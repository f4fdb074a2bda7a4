/* bench/bench_schedules.c: one model as 2 pipeline devices under 1F1B, interleaved 1F1B (virtual
 * 2), ZB-H1 and ZBV, measured against the simulator's prediction for each. Never part of `make check`;
 * build with `make bench`.
 *
 *   bench_schedules [--steps N] [--rounds R] [--microbatches M] [--batch B] [--width W]
 *
 * The model is `deep`: W -> six W-wide linear+relu layers -> 10 -> cross-entropy (default W 1024),
 * AdamW, synthetic data, f32, on cpu:0 and cpu:1 with one BLAS thread each. Cuts give each device
 * three of the wide layers under every schedule: 1F1B and ZB-H1 balance 3 | 5 (fc1-fc3 | fc4-fc6,
 * head, loss); interleaved 2 | 2 | 1 | 3 over 4 logical stages (device 0: fc1-fc2 and fc5;
 * device 1: fc3-fc4 and fc6, head, loss); ZBV 2 | 2 | 1 | 3 in a V (device 0: fc1-fc2 and fc6,
 * head, loss; device 1: fc3-fc4 and fc5). The engines run in turn, R rounds of N measured steps
 * each (after 2 warm-up steps per round), so load changes hit all of them alike.
 *
 * Per schedule it prints:
 *   measured  the median step time (median over rounds of each round's median) and the bubble,
 *             1 - (time the devices computed or copied) / (devices x step time), from the
 *             device-timed records of every measured step (src/trace), the optimizer's wait at its
 *             barrier counted as idle;
 *   predicted the simulator (bt_simulate) run on the schedule with each stage's median F, B, W and
 *             optimizer-step times from the same records, each copy added to the compute it
 *             follows (the CPU stage performs its own copies): the step time and bubble the
 *             schedule itself implies for those costs; pred(mean) the same with the mean F, B
 *             and W times (which keep the tail that preemptions add on a loaded machine);
 *   predicted with the turn hand-off between a device's stage threads priced as `baton profile`
 *   measures it (bt_profile_measure_handoff, once per round beside the engines, median kept;
 *   it only matters for interleaved and ZBV, the schedules with several stages per device), and
 *   beside it the hand-off gaps each of their traces shows (median and mean time from the end of
 *   one stage's instruction to the start of the device's next, on another stage) and pred(gap),
 *   the prediction with that schedule's own median gap as the hand-off cost;
 *   and their ratio, and each schedule's step time and bubble against 1F1B's (the peer measured in
 *   the same run; bench/compare_schedules.sh adds PyTorch on the same model).
 * BENCH_VERBOSE=1 also prints each stage's median F, B, W, optimizer and copy times; BENCH_ONLY=k
 * runs only the k-th schedule (0 1f1b, 1 interleaved, 2 zb-h1, 3 zbv), to look at one alone. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "core/util.h"
#include "exec/step_view.h"
#include "sched/sched.h"
#include "trace/trace.h"

static void die(const char *what)
{
    fprintf(stderr, "bench_schedules: %s: %s\n", what, bt_last_error());
    exit(1);
}

#include "bench_graphs.h"

#define N_KINDS 4
#define MAX_ROUNDS 64

typedef struct bench_run {
    const char *name;
    bt_schedule_kind kind;
    int virtual_stages;
    int n_balance;
    int balance[4];
    bt_engine *engine;
    bt_trace *trace;
    double round_ms[MAX_ROUNDS];
    /* per stage: summed F, B and W times and counts over the measured steps (the means) */
    double sum[8][3];
    int count[8][3];
    double *gaps;       /* hand-off gaps seen in the traces (interleaved) */
    int n_gaps, cap_gaps;
} bench_run;

/* The last step's hand-off gaps: on each device, consecutive instructions (turn order) of two
 * different stages (a receive's record starts before it waits for data, so its gap is the
 * hand-off alone). */
static void collect_gaps(bench_run *r)
{
    const bt_schedule *sched = bt_engine_last_schedule(r->engine);
    if (sched->devices >= sched->stages) return;
    for (int d = 0; d < sched->devices; d++) {
        int n = 0, *st = NULL, *ix = NULL;
        if (bt_schedule_device_order(sched, d, &n, &st, &ix) != BT_OK) die("device order");
        for (int i = 1; i < n; i++) {
            if (st[i] == st[i - 1]) continue;
            bt_instr_kind k = sched->list[st[i]][ix[i]].kind;
            if (k == BT_I_STEP) continue; /* handed on before the previous one ended */
            int na = 0, nb = 0;
            const bt_trace_rec *a = bt_engine_trace(r->engine, st[i - 1], &na);
            const bt_trace_rec *b = bt_engine_trace(r->engine, st[i], &nb);
            const bt_trace_rec *ra = NULL, *rb = NULL;
            for (int q = 0; q < na; q++) if (a[q].instr == ix[i - 1]) ra = &a[q];
            for (int q = 0; q < nb; q++) if (b[q].instr == ix[i]) rb = &b[q];
            if (!ra || !rb) continue;
            if (r->n_gaps == r->cap_gaps) {
                r->cap_gaps = r->cap_gaps ? 2 * r->cap_gaps : 256;
                r->gaps = realloc(r->gaps, sizeof *r->gaps * (size_t)r->cap_gaps);
                if (!r->gaps) die("out of memory");
            }
            r->gaps[r->n_gaps++] = rb->start_ms - ra->end_ms;
        }
        free(st);
        free(ix);
    }
}

/* Adds the last step's F, B and W instruction times to r's sums. */
static void accumulate(bench_run *r)
{
    const bt_schedule *sched = bt_engine_last_schedule(r->engine);
    for (int s = 0; s < sched->stages; s++) {
        int n = 0;
        const bt_trace_rec *rec = bt_engine_trace(r->engine, s, &n);
        for (int i = 0; i < n; i++) {
            bt_instr_kind k = sched->list[s][rec[i].instr].kind;
            int c = k == BT_I_FWD ? 0 : k == BT_I_BWD ? 1 : k == BT_I_WGT ? 2 : -1;
            if (c < 0) continue;
            r->sum[s][c] += rec[i].end_ms - rec[i].start_ms;
            r->count[s][c]++;
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double handoff_ms; /* the profile's measurement (median over rounds) */

/* The 1-, 5- and 15-minute load averages, for the report. */
static const char *bench_load(void)
{
    static char buf[64];
    FILE *f = fopen("/proc/loadavg", "r");
    double a = 0, b = 0, c = 0;
    if (!f || fscanf(f, "%lf %lf %lf", &a, &b, &c) != 3) snprintf(buf, sizeof buf, "unknown");
    else snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
    if (f) fclose(f);
    return buf;
} /* the profile's measurement (median over rounds) */

/* Predicted step time and bubble: the simulator on the traced per-stage medians (as
 * bt_trace_predict; here with the bubble too). Measured bubble from the same records. */
static void analyse(bench_run *r, double *pred_ms, double *pred_bubble, double *meas_bubble, double *mean_ms,
                    double *gap_pred_ms)
{
    const bt_schedule *sched = bt_engine_last_schedule(r->engine);
    int p = sched->stages;
    double fwd[8], bwd[8], wgt[8], step = 0, used = 0;
    for (int s = 0; s < p; s++) {
        bt_trace_stage_stats ss;
        if (bt_trace_stage_summary(r->trace, s, &ss) != BT_OK) die("trace summary");
        fwd[s] = ss.fwd_ms + ss.send_act_ms + ss.recv_act_ms;
        bwd[s] = ss.bwd_ms + ss.send_grad_ms + ss.recv_grad_ms;
        wgt[s] = ss.wgt_ms;
        if (ss.step_ms > step) step = ss.step_ms;
        used += ss.busy + ss.transfer; /* fractions of the traced wall time */
        if (getenv("BENCH_VERBOSE"))
            printf("  %s stage %d: F %.3f B %.3f W %.3f step %.3f ms; sends %.3f/%.3f recvs %.3f/%.3f\n", r->name, s,
                   ss.fwd_ms, ss.bwd_ms, ss.wgt_ms, ss.step_ms, ss.send_act_ms, ss.send_grad_ms, ss.recv_act_ms,
                   ss.recv_grad_ms);
    }
    *meas_bubble = 1.0 - used / sched->devices;
    bt_sim_costs costs = {.fwd = fwd, .bwd = bwd, .wgt = wgt, .step = step, .handoff = handoff_ms};
    bt_sim_result res;
    if (bt_simulate(sched, &costs, &res) != BT_OK) die("simulate");
    *pred_ms = res.step_time;
    *pred_bubble = res.bubble;
    bt_sim_result_free(&res);
    /* the hand-off this schedule's trace shows instead of the profile's (none: one stage per device) */
    costs.handoff = r->n_gaps ? median(r->gaps, r->n_gaps) : 0;
    if (bt_simulate(sched, &costs, &res) != BT_OK) die("simulate");
    *gap_pred_ms = res.step_time;
    bt_sim_result_free(&res);
    costs.handoff = handoff_ms;
    /* the same with mean compute times: on a loaded machine preemptions make a long tail that
     * medians leave out and means keep */
    for (int s = 0; s < p; s++) {
        double *cost[3] = {&fwd[s], &bwd[s], &wgt[s]};
        bt_trace_stage_stats ss;
        if (bt_trace_stage_summary(r->trace, s, &ss) != BT_OK) die("trace summary");
        double median_of[3] = {ss.fwd_ms, ss.bwd_ms, ss.wgt_ms};
        for (int c = 0; c < 3; c++)
            if (r->count[s][c]) *cost[c] += r->sum[s][c] / r->count[s][c] - median_of[c];
    }
    if (bt_simulate(sched, &costs, &res) != BT_OK) die("simulate");
    *mean_ms = res.step_time;
    bt_sim_result_free(&res);
}

int main(int argc, char **argv)
{
    int steps = 10, rounds = 5, m = 8, width = 1024;
    long long batch = 256;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v && strcmp(argv[i], "--steps") == 0) steps = atoi(v), i++;
        else if (v && strcmp(argv[i], "--rounds") == 0) rounds = atoi(v), i++;
        else if (v && strcmp(argv[i], "--microbatches") == 0) m = atoi(v), i++;
        else if (v && strcmp(argv[i], "--batch") == 0) batch = atoll(v), i++;
        else if (v && strcmp(argv[i], "--width") == 0) width = atoi(v), i++;
        else {
            fprintf(stderr, "usage: bench_schedules [--steps N] [--rounds R] [--microbatches M] [--batch B] "
                            "[--width W]\n");
            return 2;
        }
    }
    if (steps < 1 || rounds < 1 || rounds > MAX_ROUNDS || m < 2 || m % 2 || batch % m || width < 16) {
        fprintf(stderr, "bench_schedules: need steps >= 1, 1..%d rounds, an even m >= 2 dividing the batch, "
                        "width >= 16\n", MAX_ROUNDS);
        return 2;
    }
    static bench_run runs[N_KINDS] = {
        {.name = "1f1b", .kind = BT_SCHEDULE_1F1B, .virtual_stages = 1, .n_balance = 2, .balance = {3, 5}},
        {.name = "interleaved-1f1b v2", .kind = BT_SCHEDULE_INTERLEAVED_1F1B, .virtual_stages = 2,
         .n_balance = 4, .balance = {2, 2, 1, 3}},
        {.name = "zb-h1", .kind = BT_SCHEDULE_ZB_H1, .virtual_stages = 1, .n_balance = 2, .balance = {3, 5}},
        {.name = "zbv", .kind = BT_SCHEDULE_ZBV, .virtual_stages = 2, .n_balance = 4, .balance = {2, 2, 1, 3}},
    };
    bt_graph *g = bench_dense_graph(width, width, 6);
    float *x = malloc(sizeof(float) * (size_t)batch * (size_t)width);
    int32_t *y = malloc(sizeof(int32_t) * (size_t)batch);
    if (!x || !y) die("out of memory");
    srand(1);
    for (long long i = 0; i < batch * width; i++) x[i] = (float)rand() / RAND_MAX;
    for (long long i = 0; i < batch; i++) y[i] = rand() % 10;
    bt_feed feeds[2] = {{"image", x, BT_F32}, {"label", y, BT_I32}};

    for (int k = 0; k < N_KINDS; k++) {
        bench_run *r = &runs[k];
        bt_engine_params p;
        bt_engine_params_init(&p);
        p.parallel.devices = "cpu:0,cpu:1";
        p.parallel.stages = r->n_balance;
        p.parallel.virtual_stages = r->virtual_stages;
        p.parallel.microbatches = m;
        p.parallel.schedule = r->kind;
        p.parallel.partition = BT_PARTITION_BALANCE;
        p.parallel.n_balance = r->n_balance;
        for (int s = 0; s < r->n_balance; s++) p.parallel.balance[s] = r->balance[s];
        p.batch = batch;
        p.threads = 1;
        p.optimizer.kind = BT_OPT_ADAMW;
        p.optimizer.lr = 1e-4;
        if (bt_engine_create(g, &p, &r->engine) != BT_OK) die(r->name);
        if (bt_trace_create(&r->trace) != BT_OK) die("trace");
    }
    printf("model deep: %d -> 6 x %d (relu) -> 10, batch %lld in %d micro-batches of %lld, AdamW, f32, "
           "cpu:0 + cpu:1, 1 BLAS thread each; %d rounds x %d steps, schedules in turn\n",
           width, width, batch, m, batch / m, rounds, steps);
    double handoffs[MAX_ROUNDS];
    for (int round = 0; round < rounds; round++) {
        if (bt_profile_measure_handoff(2, 9, &handoffs[round]) != BT_OK) die("hand-off");
        for (int k = 0; k < N_KINDS; k++) {
            bench_run *r = &runs[k];
            if (getenv("BENCH_ONLY") && atoi(getenv("BENCH_ONLY")) != k) continue;
            double *ms = malloc(sizeof *ms * (size_t)steps);
            if (!ms) die("out of memory");
            for (int i = 0; i < 2 + steps; i++) {
                bt_step_result res;
                if (bt_engine_train_step(r->engine, feeds, 2, &res) != BT_OK) die(r->name);
                if (i < 2) continue;
                ms[i - 2] = res.step_ms;
                if (bt_trace_add_step(r->trace, r->engine) != BT_OK) die("trace step");
                accumulate(r);
                collect_gaps(r);
            }
            r->round_ms[round] = median(ms, steps);
            free(ms);
        }
    }
    handoff_ms = median(handoffs, rounds);
    printf("load: %s; hand-off between two stage threads of a device (bt_profile_measure_handoff, median of "
           "%d rounds): %.4f ms\n", bench_load(), rounds, handoff_ms);
    for (int k = 0; k < N_KINDS; k++) {
        bench_run *r = &runs[k];
        if (!r->n_gaps) continue;
        double sum = 0, big = 0;
        for (int i = 0; i < r->n_gaps; i++) sum += r->gaps[i], big += r->gaps[i] > 0.2;
        double med = median(r->gaps, r->n_gaps); /* sorts them */
        printf("%s trace: %d hand-offs, %.1f per step, gap median %.4f ms, mean %.4f ms, p90 %.4f ms, max %.4f ms, "
               "%.1f%% above 0.2 ms\n", k == 1 ? "interleaved" : r->name, r->n_gaps,
               (double)r->n_gaps / (rounds * steps), med, sum / r->n_gaps, r->gaps[(int)(0.9 * (r->n_gaps - 1))],
               r->gaps[r->n_gaps - 1], 100.0 * big / r->n_gaps);
    }

    double base_ms = 0, base_bubble = 0;
    printf("\n%-20s %12s %10s %12s %10s %9s %11s %11s %11s %12s\n", "schedule", "measured ms", "bubble",
           "predicted ms", "bubble", "meas/pred", "pred(mean)", "pred(gap)", "vs 1f1b ms", "vs 1f1b bub");
    for (int k = 0; k < N_KINDS; k++) {
        bench_run *r = &runs[k];
        if (bt_trace_num_steps(r->trace) == 0) continue; /* BENCH_ONLY left it out */
        double meas_ms = median(r->round_ms, rounds), pred_ms, pred_bubble, meas_bubble, mean_ms, gap_pred_ms;
        analyse(r, &pred_ms, &pred_bubble, &meas_bubble, &mean_ms, &gap_pred_ms);
        if (k == 0) base_ms = meas_ms, base_bubble = meas_bubble;
        printf("%-20s %12.2f %9.1f%% %12.2f %9.1f%% %9.3f %11.2f %11.2f %10.3fx %11.2fx\n", r->name, meas_ms,
               100 * meas_bubble, pred_ms, 100 * pred_bubble, meas_ms / pred_ms, mean_ms, gap_pred_ms, meas_ms / base_ms,
               base_bubble > 0 ? meas_bubble / base_bubble : 0);
        printf("result schedule=%s measured_ms=%.3f measured_bubble=%.4f predicted_ms=%.3f predicted_bubble=%.4f "
               "predicted_mean_ms=%.3f predicted_gap_ms=%.3f handoff_ms=%.4f\n",
               bt_schedule_name(r->kind), meas_ms, meas_bubble, pred_ms, pred_bubble, mean_ms, gap_pred_ms, handoff_ms);
    }
    for (int k = 0; k < N_KINDS; k++) {
        free(runs[k].gaps);
        bt_trace_destroy(runs[k].trace);
        bt_engine_destroy(runs[k].engine);
    }
    bt_graph_destroy(g);
    free(x);
    free(y);
    return 0;
}
