/* tests/test_trace.c: traces of real runs. A 3-stage 1F1B run (m=4, with a residual that skips a
 * stage) is traced for two steps and the Chrome JSON is read back with jansson: one X slice per
 * executed instruction, slices of a track never overlap, every flow start has exactly one end and
 * both sit inside the SEND and the matching RECV (same kind, micro-batch, stages the channels
 * join), process/thread metadata and activation counters are present, and the counters peak at
 * the engine's own activation peak. The SVG renders with rsvg-convert when it is installed. A
 * hand-made trace whose times come from the simulator checks the per-stage shares and that the
 * prediction reproduces the simulated step exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"
#include "exec/exec_internal.h"
#include "trace/trace.h"

#define IN 8
#define HID 16
#define CLASSES 4
#define BATCH 16
#define M 4
#define P 3
#define STEPS 2

static bt_graph *residual_graph(void) { return bt_test_residual_graph(IN, HID, CLASSES); }

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, size, "%s/baton-test-trace-%d-%s", dir ? dir : "/tmp", (int)getpid(), name);
    return buf;
}

/* A traced run shared by the tests below (built once). */
typedef struct traced_run {
    bt_graph *g;
    bt_engine *e;
    bt_trace *t;
    int sched_len_sum;         /* sum of the schedule's list lengths */
} traced_run;

static traced_run run;

static void make_run(void)
{
    if (run.t) return;
    run.g = residual_graph();
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.devices = "cpu:0,cpu:1,cpu:2";
    p.parallel.stages = P;
    p.parallel.microbatches = M;
    p.parallel.schedule = BT_SCHEDULE_1F1B;
    p.parallel.partition = BT_PARTITION_BALANCE;
    p.parallel.n_balance = P;
    p.parallel.balance[0] = 1, p.parallel.balance[1] = 2, p.parallel.balance[2] = 4; /* fc1 | fc2, ln | skip.. */
    p.batch = BATCH;
    p.optimizer.kind = BT_OPT_SGD;
    p.optimizer.lr = 0.1;
    p.watchdog_s = 20;
    CU_ASSERT_FATAL(bt_engine_create(run.g, &p, &run.e) == BT_OK);
    CU_ASSERT_FATAL(bt_trace_create(&run.t) == BT_OK);
    float x[BATCH * IN];
    int32_t label[BATCH];
    srand(3);
    for (int i = 0; i < BATCH * IN; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < BATCH; i++) label[i] = rand() % CLASSES;
    bt_feed feeds[2] = {{"x", x, BT_F32}, {"label", label, BT_I32}};
    for (int step = 0; step < STEPS; step++) {
        bt_step_result r;
        CU_ASSERT_FATAL(bt_engine_train_step(run.e, feeds, 2, &r) == BT_OK);
        CU_ASSERT_FATAL(bt_trace_add_step(run.t, run.e) == BT_OK);
    }
    const bt_schedule *sched = bt_engine_last_schedule(run.e);
    for (int s = 0; s < P; s++) run.sched_len_sum += sched->len[s];
}

/* ---- reading the JSON back -------------------------------------------------------------------- */

typedef struct slice {
    int pid, tid, step, mb;
    double ts, dur;
    const char *name, *layers;
} slice;

typedef struct parsed {
    json_t *root;
    slice *x;
    int n_x;
    json_t *flow_s[1024], *flow_f[1024];
    int n_s, n_f;
    int process_names, thread_names, counters;
    double counter_max[P + 1];
} parsed;

static double num(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    CU_ASSERT_FATAL(json_is_number(v));
    return json_number_value(v);
}

static void parse_trace(const char *path, parsed *out)
{
    memset(out, 0, sizeof *out);
    json_error_t err;
    out->root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!out->root) printf("\n  %s:%d: %s\n", path, err.line, err.text);
    CU_ASSERT_FATAL(out->root != NULL);
    json_t *events = json_object_get(out->root, "traceEvents");
    CU_ASSERT_FATAL(json_is_array(events));
    out->x = calloc(json_array_size(events), sizeof *out->x);
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        const char *name = json_string_value(json_object_get(ev, "name"));
        CU_ASSERT_FATAL(ph != NULL && name != NULL);
        int pid = (int)num(ev, "pid");
        CU_ASSERT_FATAL(pid >= 1 && pid <= P);
        if (strcmp(ph, "X") == 0) {
            slice *s = &out->x[out->n_x++];
            json_t *args = json_object_get(ev, "args");
            s->pid = pid;
            s->tid = (int)num(ev, "tid");
            s->ts = num(ev, "ts");
            s->dur = num(ev, "dur");
            s->name = name;
            s->mb = (int)num(args, "microbatch");
            s->step = (int)num(args, "step");
            s->layers = json_string_value(json_object_get(args, "layers"));
            CU_ASSERT(json_is_integer(json_object_get(args, "bytes")));
        } else if (strcmp(ph, "s") == 0 && out->n_s < 1024) {
            out->flow_s[out->n_s++] = ev;
        } else if (strcmp(ph, "f") == 0 && out->n_f < 1024) {
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(ev, "bp")), "e");
            out->flow_f[out->n_f++] = ev;
        } else if (strcmp(ph, "M") == 0) {
            const char *v = json_string_value(json_object_get(json_object_get(ev, "args"), "name"));
            if (strcmp(name, "process_name") == 0) {
                char want[64];
                snprintf(want, sizeof want, "stage %d (cpu:%d)", pid - 1, pid - 1);
                CU_ASSERT_STRING_EQUAL(v, want);
                out->process_names++;
            } else if (strcmp(name, "thread_name") == 0) {
                int tid = (int)num(ev, "tid");
                CU_ASSERT_STRING_EQUAL(v, tid == 0 ? "compute" : "transfers");
                out->thread_names++;
            }
        } else if (strcmp(ph, "C") == 0) {
            double b = num(json_object_get(ev, "args"), "bytes");
            if (b > out->counter_max[pid]) out->counter_max[pid] = b;
            out->counters++;
        }
    }
}

static int cmp_slice(const void *a, const void *b)
{
    const slice *x = a, *y = b;
    if (x->pid != y->pid) return x->pid - y->pid;
    if (x->tid != y->tid) return x->tid - y->tid;
    return (x->ts > y->ts) - (x->ts < y->ts);
}

/* The X slice on (pid, tid 1) that contains ts, or NULL. */
static const slice *enclosing(const parsed *pr, int pid, double ts)
{
    for (int i = 0; i < pr->n_x; i++) {
        const slice *s = &pr->x[i];
        if (s->pid == pid && s->tid == 1 && s->ts <= ts + 1e-6 && ts <= s->ts + s->dur + 1e-6) return s;
    }
    return NULL;
}

static void test_json_trace(void)
{
    make_run();
    char path[256];
    tmp_path("trace.json", path, sizeof path);
    CU_ASSERT_FATAL(bt_trace_write_json(run.t, path) == BT_OK);
    parsed pr;
    parse_trace(path, &pr);

    /* one slice per executed instruction: by hand, 1F1B with p=3, m=4 runs 4 F + 4 B per stage,
     * 4 receives and 4 sends per direction where a neighbour exists, and one STEP */
    CU_ASSERT_EQUAL(run.sched_len_sum, 17 + 25 + 17);
    CU_ASSERT_EQUAL(pr.n_x, STEPS * run.sched_len_sum);

    /* names in the 1F3 notation of the slice's own stage; layers per stage */
    for (int i = 0; i < pr.n_x; i++) {
        const slice *s = &pr.x[i];
        CU_ASSERT(s->name[0] == '0' + (s->pid - 1));
        char kind = s->name[1];
        CU_ASSERT((strchr("FBU", kind) != NULL) == (s->tid == 0));
        if (kind != 'U') CU_ASSERT(atoi(s->name + 2) == s->mb);
        const char *want = s->pid == 1 ? "fc1" : s->pid == 2 ? "fc2..ln" : "skip..loss";
        CU_ASSERT_STRING_EQUAL(s->layers, want);
    }

    /* no overlap on a track; steps follow each other */
    qsort(pr.x, (size_t)pr.n_x, sizeof *pr.x, cmp_slice);
    double end_of_step0 = 0, start_of_step1 = INFINITY;
    for (int i = 0; i < pr.n_x; i++) {
        const slice *s = &pr.x[i];
        CU_ASSERT(s->dur >= 0);
        if (i > 0 && pr.x[i - 1].pid == s->pid && pr.x[i - 1].tid == s->tid) {
            double prev_end = pr.x[i - 1].ts + pr.x[i - 1].dur;
            if (prev_end > s->ts + 1e-6) printf("\n  overlap on pid %d tid %d at %.3f\n", s->pid, s->tid, s->ts);
            CU_ASSERT(prev_end <= s->ts + 1e-6);
        }
        if (s->step == 0 && s->ts + s->dur > end_of_step0) end_of_step0 = s->ts + s->dur;
        if (s->step == 1 && s->ts < start_of_step1) start_of_step1 = s->ts;
    }
    CU_ASSERT(end_of_step0 <= start_of_step1 + 1e-6);

    /* flows: stage 0's activations reach stages 1 and 2 (the skip), stage 1's reach 2; gradients
     * go back the same ways: (2 + 1 + 2 + 1) arrows per micro-batch per step */
    CU_ASSERT_EQUAL(pr.n_s, STEPS * M * 6);
    CU_ASSERT_EQUAL(pr.n_f, pr.n_s);
    for (int i = 0; i < pr.n_s; i++) {
        json_t *s = pr.flow_s[i], *f = NULL;
        json_int_t id = json_integer_value(json_object_get(s, "id"));
        int ends = 0;
        for (int j = 0; j < pr.n_f; j++)
            if (json_integer_value(json_object_get(pr.flow_f[j], "id")) == id) f = pr.flow_f[j], ends++;
        CU_ASSERT_EQUAL_FATAL(ends, 1);
        double s_ts = num(s, "ts"), f_ts = num(f, "ts");
        CU_ASSERT(s_ts <= f_ts);
        int grad = strcmp(json_string_value(json_object_get(s, "name")), "gradients") == 0;
        const slice *send = enclosing(&pr, (int)num(s, "pid"), s_ts);
        const slice *recv = enclosing(&pr, (int)num(f, "pid"), f_ts);
        CU_ASSERT_FATAL(send != NULL && recv != NULL);
        CU_ASSERT_EQUAL(send->name[1], grad ? 's' : 'S');
        CU_ASSERT_EQUAL(recv->name[1], grad ? 'r' : 'R');
        CU_ASSERT_EQUAL(send->mb, recv->mb);
        CU_ASSERT_EQUAL(send->step, recv->step);
        CU_ASSERT(grad ? recv->pid < send->pid : recv->pid > send->pid);
    }

    /* metadata and counters; the counter peaks where the engine says activations peak */
    CU_ASSERT_EQUAL(pr.process_names, P);
    CU_ASSERT_EQUAL(pr.thread_names, 2 * P);
    CU_ASSERT(pr.counters >= STEPS * P * 2 * M);
    for (int s = 0; s < P; s++) {
        bt_memory_stats mem;
        CU_ASSERT_FATAL(bt_engine_memory(run.e, s, &mem) == BT_OK);
        CU_ASSERT(mem.activation_peak > 0);
        CU_ASSERT(pr.counter_max[s + 1] == (double)mem.activation_peak);
        CU_ASSERT_EQUAL(mem.peak_microbatches, P - s); /* 1F1B: min(p - s, m) */
    }
    free(pr.x);
    json_decref(pr.root);
    unlink(path);
}

static void test_svg_timeline(void)
{
    make_run();
    char svg[256], png[256], cmd[700];
    tmp_path("timeline.svg", svg, sizeof svg);
    tmp_path("timeline.png", png, sizeof png);
    CU_ASSERT_FATAL(bt_trace_write_svg(run.t, svg) == BT_OK);
    FILE *f = fopen(svg, "rb");
    CU_ASSERT_FATAL(f != NULL);
    char *text = calloc(1 << 20, 1);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    CU_ASSERT(n > 0 && strncmp(text, "<?xml", 5) == 0);
    CU_ASSERT(strstr(text, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\"") != NULL);
    CU_ASSERT(strstr(text, "</svg>\n") != NULL);
    int rects = 0;
    for (const char *p = text; (p = strstr(p, "<rect")); p++) rects++;
    CU_ASSERT(rects >= run.sched_len_sum); /* every instruction of the last step is drawn */
    CU_ASSERT(strstr(text, "stage 2 (cpu:2)") != NULL);
    free(text);
    if (system("command -v rsvg-convert >/dev/null 2>&1") != 0) {
        printf("\n  note: rsvg-convert not found (Debian: librsvg2-bin); the SVG was not rendered\n");
    } else {
        snprintf(cmd, sizeof cmd, "rsvg-convert -o '%s' '%s'", png, svg);
        CU_ASSERT_EQUAL(system(cmd), 0);
        f = fopen(png, "rb");
        CU_ASSERT_FATAL(f != NULL);
        unsigned char head[8] = {0};
        CU_ASSERT_EQUAL(fread(head, 1, 8, f), 8);
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fclose(f);
        CU_ASSERT(memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0);
        CU_ASSERT(size > 1000);
        unlink(png);
    }
    unlink(svg);
}

static void test_real_run_shares(void)
{
    make_run();
    for (int s = 0; s < P; s++) {
        bt_trace_stage_stats ss;
        CU_ASSERT_FATAL(bt_trace_stage_summary(run.t, s, &ss) == BT_OK);
        CU_ASSERT(ss.busy > 0 && ss.busy <= 1);
        CU_ASSERT(ss.transfer >= 0 && ss.idle >= 0);
        CU_ASSERT(fabs(ss.busy + ss.transfer + ss.idle - 1) < 1e-9);
        CU_ASSERT(ss.fwd_ms > 0 && ss.bwd_ms > 0);
    }
    double predicted, measured;
    CU_ASSERT_FATAL(bt_trace_predict(run.t, &predicted, &measured) == BT_OK);
    CU_ASSERT(predicted > 0 && measured > 0);
    bt_trace *other = NULL;
    CU_ASSERT_FATAL(bt_trace_create(&other) == BT_OK);
    CU_ASSERT_EQUAL(bt_trace_predict(other, &predicted, &measured), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_trace_write_svg(other, "/nonexistent/x.svg"), BT_ERR_INVALID_ARG);
    bt_trace_destroy(other);
}

/* ---- a trace made from the simulator: exact shares and prediction ------------------------------ */

static void test_simulated_trace(void)
{
    const int p = 2, m = 3;
    double fwd[2] = {1.0, 2.0}, bwd[2] = {2.0, 4.0};
    bt_schedule *sched = NULL;
    bt_sim_result sim;
    CU_ASSERT_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, p, m, &sched) == BT_OK);
    bt_sim_costs costs = {fwd, bwd, NULL, NULL, 0.5};
    CU_ASSERT_FATAL(bt_simulate(sched, &costs, &sim) == BT_OK);

    bt_trace *t = NULL;
    CU_ASSERT_FATAL(bt_trace_create(&t) == BT_OK);
    t->stages = p;
    t->stage = calloc((size_t)p, sizeof *t->stage);
    t->steps = calloc(1, sizeof *t->steps);
    t->n_steps = t->cap_steps = 1;
    for (int s = 0; s < p; s++) {
        snprintf(t->stage[s].device, sizeof t->stage[s].device, "cpu:%d", s);
        snprintf(t->stage[s].layers, sizeof t->stage[s].layers, "l%d", s);
        t->stage[s].slot_bytes = 1000;
        if (s + 1 < p) t->stage[s].act_to[t->stage[s].n_act_to++] = s + 1;
        if (s > 0) t->stage[s].grad_to[t->stage[s].n_grad_to++] = s - 1;
    }
    bt_trace_step *st = &t->steps[0];
    st->kind = BT_SCHEDULE_1F1B;
    st->microbatches = m;
    st->training = 1;
    st->n = calloc((size_t)p, sizeof *st->n);
    st->ev = calloc((size_t)p, sizeof *st->ev);
    for (int s = 0; s < p; s++) {
        st->n[s] = sched->len[s];
        st->ev[s] = calloc((size_t)sched->len[s], sizeof **st->ev);
        for (int i = 0; i < sched->len[s]; i++) {
            bt_trace_ev *ev = &st->ev[s][i];
            ev->ins = sched->list[s][i];
            /* the simulator gives a RECV's completion; it starts when the previous one ended */
            ev->start_ms = i ? sim.end[s][i - 1] : 0;
            ev->end_ms = sim.end[s][i];
            if (ev->end_ms > st->wall_ms) st->wall_ms = ev->end_ms;
        }
    }
    for (int s = 0; s < p; s++) {
        bt_trace_stage_stats ss;
        CU_ASSERT_FATAL(bt_trace_stage_summary(t, s, &ss) == BT_OK);
        CU_ASSERT(fabs(ss.busy - sim.busy[s] / sim.step_time) < 1e-12);
        CU_ASSERT(fabs(ss.transfer) < 1e-12); /* sends take no time, receives copy nothing */
        CU_ASSERT(fabs(ss.fwd_ms - fwd[s]) < 1e-12 && fabs(ss.bwd_ms - bwd[s]) < 1e-12);
        CU_ASSERT(fabs(ss.step_ms - 0.5) < 1e-12);
    }
    double predicted, measured;
    CU_ASSERT_FATAL(bt_trace_predict(t, &predicted, &measured) == BT_OK);
    CU_ASSERT(fabs(measured - sim.step_time) < 1e-12);
    CU_ASSERT(fabs(predicted - sim.step_time) < 1e-9);

    /* the JSON of this trace: m sends per direction, one arrow each */
    char path[256];
    tmp_path("sim.json", path, sizeof path);
    CU_ASSERT_FATAL(bt_trace_write_json(t, path) == BT_OK);
    json_t *root = json_load_file(path, 0, NULL);
    CU_ASSERT_FATAL(root != NULL);
    size_t i;
    json_t *ev;
    int starts = 0;
    json_array_foreach(json_object_get(root, "traceEvents"), i, ev)
        starts += strcmp(json_string_value(json_object_get(ev, "ph")), "s") == 0;
    CU_ASSERT_EQUAL(starts, 2 * m);
    json_decref(root);
    unlink(path);
    bt_trace_destroy(t);
    bt_sim_result_free(&sim);
    bt_schedule_destroy(sched);
}

static void cleanup(void)
{
    bt_trace_destroy(run.t);
    bt_engine_destroy(run.e);
    bt_graph_destroy(run.g);
    memset(&run, 0, sizeof run);
}

/* ---- the STEP barrier comes from exec ---------------------------------------------------------- */

/* Whether STEP was a barrier is exec's to say (bt_engine_step_view): the worker waits there for
 * every stage's sum of squares on every training step (a step is all or nothing, and the global
 * gradient norm is checked before any update), so the trace must count that wait as idle with or
 * without clipping and f16 loss scaling. Before the trace read it from exec it marked the
 * barrier only under clipping. */
static void test_step_barrier_from_exec(void)
{
    static const struct {
        double clip;
        bt_dtype precision;
        int barrier;
    } cases[] = {{0, BT_F32, 1}, {1.0, BT_F32, 1}, {0, BT_F16, 1}, {1.0, BT_F16, 1}};
    float x[BATCH * IN];
    int32_t label[BATCH];
    for (int i = 0; i < BATCH * IN; i++) x[i] = (float)((i * 37) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < BATCH; i++) label[i] = i % CLASSES;
    bt_feed feeds[2] = {{"x", x, BT_F32}, {"label", label, BT_I32}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        bt_graph *g = residual_graph();
        bt_engine *e = NULL;
        bt_trace *t = NULL;
        bt_engine_params p;
        bt_engine_params_init(&p);
        p.parallel.devices = "cpu:0,cpu:1";
        p.parallel.microbatches = 2;
        p.batch = BATCH;
        p.optimizer.kind = BT_OPT_SGD;
        p.optimizer.lr = 0.1;
        p.clip_norm = cases[c].clip;
        p.precision = cases[c].precision;
        p.watchdog_s = 20;
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
        CU_ASSERT_FATAL(bt_trace_create(&t) == BT_OK);
        bt_step_result r;
        CU_ASSERT_FATAL(bt_engine_train_step(e, feeds, 2, &r) == BT_OK);
        CU_ASSERT_FATAL(bt_trace_add_step(t, e) == BT_OK);
        if (t->steps[0].barrier != cases[c].barrier)
            printf("\n  clip %g, %s: the trace says barrier %d, the worker %s\n", cases[c].clip,
                   bt_dtype_name(cases[c].precision), t->steps[0].barrier,
                   cases[c].barrier ? "waited" : "did not wait");
        CU_ASSERT_EQUAL(t->steps[0].barrier, cases[c].barrier);
        CU_ASSERT_FATAL(bt_engine_forward(e, feeds, 2, NULL, &r) == BT_OK);
        CU_ASSERT_FATAL(bt_trace_add_step(t, e) == BT_OK);
        CU_ASSERT_EQUAL(t->steps[1].barrier, 0); /* inference has no STEP to wait at */
        bt_trace_destroy(t);
        bt_engine_destroy(e);
        bt_graph_destroy(g);
    }
}

/* The records of a stage whose job starts late (as if preempted while it set up its timing): every
 * receive still ends after its send began. The stage's clock offset once came from two separate
 * clock reads, and a preemption between them shifted the whole stage back in time; under load
 * that made test_json_trace's flow check fail about one run in eight. */
static void test_late_stage_keeps_causality(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    bt_engine_params_init(&p);
    p.parallel.devices = "cpu:0,cpu:1,cpu:2";
    p.parallel.stages = P;
    p.parallel.microbatches = M;
    p.parallel.schedule = BT_SCHEDULE_1F1B;
    p.parallel.partition = BT_PARTITION_BALANCE;
    p.parallel.n_balance = P;
    p.parallel.balance[0] = 1, p.parallel.balance[1] = 2, p.parallel.balance[2] = 4;
    p.batch = BATCH;
    p.optimizer.kind = BT_OPT_SGD;
    p.optimizer.lr = 0.1;
    p.watchdog_s = 20;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    float x[BATCH * IN];
    int32_t label[BATCH];
    for (int i = 0; i < BATCH * IN; i++) x[i] = (float)(i % 7) / 7.0f - 0.5f;
    for (int i = 0; i < BATCH; i++) label[i] = i % CLASSES;
    bt_feed feeds[2] = {{"x", x, BT_F32}, {"label", label, BT_I32}};
    for (int late = 0; late < P; late++) {
        e->test_start_delay_stage = late;
        e->test_start_delay_ms = 30;
        CU_ASSERT_FATAL(bt_engine_train_step(e, feeds, 2, NULL) == BT_OK);
        const bt_schedule *sched = bt_engine_last_schedule(e);
        int pairs = 0;
        for (int d = 0; d < P; d++)
            for (int j = 0; j < e->worker[d].n_trace; j++) {
                const bt_trace_rec *recv = &e->worker[d].trace[j];
                const bt_instr *ri = &sched->list[d][recv->instr];
                if (ri->kind != BT_I_RECV_ACT && ri->kind != BT_I_RECV_GRAD) continue;
                bt_instr_kind send_kind = ri->kind == BT_I_RECV_ACT ? BT_I_SEND_ACT : BT_I_SEND_GRAD;
                for (int s = 0; s < P; s++) { /* the neighbour on the chain sends it (see sched.h) */
                    if (s != (send_kind == BT_I_SEND_ACT ? d - 1 : d + 1)) continue;
                    for (int k = 0; k < e->worker[s].n_trace; k++) {
                        const bt_trace_rec *send = &e->worker[s].trace[k];
                        const bt_instr *si = &sched->list[s][send->instr];
                        if (si->kind != send_kind || si->mb != ri->mb) continue;
                        pairs++;
                        if (recv->end_ms < send->start_ms)
                            printf("\n  stage %d late: stage %d's receive of mb %d ends at %.3f ms, before stage "
                                   "%d's send starts at %.3f ms\n",
                                   late, d, ri->mb, recv->end_ms, s, send->start_ms);
                        CU_ASSERT(recv->end_ms >= send->start_ms);
                    }
                }
            }
        CU_ASSERT(pairs >= 2 * M * (P - 1));
    }
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"chrome trace of a 3-stage run", test_json_trace},
        {"a stage that starts late keeps sends before receives", test_late_stage_keeps_causality},
        {"svg timeline renders", test_svg_timeline},
        {"time shares and prediction of a real run", test_real_run_shares},
        {"trace from the simulator: exact shares and prediction", test_simulated_trace},
        {"STEP barrier as exec ran it (f16 loss scaling, clipping)", test_step_barrier_from_exec},
        {NULL, NULL}};
    int rc = bt_test_main("trace", cases);
    cleanup();
    return rc;
}
