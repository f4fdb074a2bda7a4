/* tests/test_schedules.c: the executor under interleaved 1F1B, ZB-H1 and ZBV against the same model
 * run as one stage. The model is deep enough for 8 logical stages (11 layers: linear, layernorm, a
 * residual from fc1 that crosses every cut but the first), trained three SGD steps on CPU stages;
 * losses and every parameter must match the one-stage run within 1e-6 relative (f32). Interleaved
 * puts logical stage l on cpu:(l mod P) with virtual 2 (and 3; and with P = 1 all logical stages on
 * one device); ZB-H1 splits every linear and layernorm backward into B and W; ZBV puts logical
 * stage l on cpu:l (l < P) or cpu:(2P-1-l), 2P stages on P devices, B and W split. Measured activation
 * memory follows each schedule's bound (bt_schedule_slot_bound); ZB-H1 and ZBV give the same bits as
 * 1F1B on the same logical stages; the W stashes sit where the memory model says; and a device's
 * stages run their instructions one at a time in the device's order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"
#include <pthread.h>
#include <time.h>

#include "core/turns.h"
#include "exec/exec_internal.h"
#include "sched/sched.h"

#define IN 8
#define HID 16
#define CLASSES 4
#define BATCH 24 /* splits into 4, 6 and 8 micro-batches */
#define LAYERS 11

static bt_graph *deep_residual_graph(void)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in = IN;
    bt_layer_desc d;
    const char *skip_in[] = {"fc4", "fc1"}, *loss_in[] = {"head", "label"};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, &in, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_int(a, "out", HID);
    const struct {
        const char *name, *op, *act;
    } layers[] = {{"fc1", "linear", "tanh"}, {"fc2", "linear", "relu"}, {"ln1", "layernorm", NULL},
                  {"fc3", "linear", "relu"}, {"fc4", "linear", "tanh"}};
    for (int i = 0; i < 5; i++) {
        bt_layer_desc_init(&d), d.name = layers[i].name, d.op = layers[i].op, d.act = layers[i].act;
        if (strcmp(layers[i].op, "linear") == 0) d.args = a;
        CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    }
    bt_layer_desc_init(&d), d.name = "skip", d.op = "add", d.inputs = skip_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc5", d.op = "linear", d.args = a, d.act = "gelu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "ln2", d.op = "layernorm";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc6", d.op = "linear", d.args = a, d.act = "relu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_set_int(a, "out", CLASSES);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    CU_ASSERT_EQUAL(bt_graph_num_layers(g), LAYERS);
    return g;
}

/* Layers per logical stage: fc1 alone first, so the residual from fc1 crosses stages. */
static const int balances[9][8] = {
    {0}, {11}, {1, 10}, {1, 5, 5}, {1, 3, 3, 4}, {1, 2, 3, 2, 3}, {1, 2, 2, 2, 2, 2}, {1, 1, 2, 2, 1, 2, 2},
    {1, 1, 1, 2, 1, 2, 1, 2},
};

typedef struct batch_data {
    float x[BATCH * IN];
    int32_t label[BATCH];
    bt_feed feeds[2];
} batch_data;

static void make_batch(batch_data *b, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < BATCH * IN; i++) b->x[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < BATCH; i++) b->label[i] = rand() % CLASSES;
    b->feeds[0] = (bt_feed){"x", b->x, BT_F32};
    b->feeds[1] = (bt_feed){"label", b->label, BT_I32};
}

/* devices cpu:0..cpu:(devices-1); stages = devices * v logical stages, cut by balances. */
static void params_for(bt_engine_params *p, int devices, int v, int m, bt_schedule_kind kind)
{
    static char list[64];
    bt_engine_params_init(p);
    list[0] = '\0';
    for (int d = 0; d < devices; d++) {
        char one[16];
        snprintf(one, sizeof one, "%scpu:%d", d ? "," : "", d);
        strcat(list, one);
    }
    int stages = devices * v;
    p->parallel.devices = list;
    p->parallel.stages = stages;
    p->parallel.virtual_stages = v;
    p->parallel.microbatches = m;
    p->parallel.schedule = kind;
    p->parallel.partition = BT_PARTITION_BALANCE;
    p->parallel.n_balance = stages;
    for (int s = 0; s < stages; s++) p->parallel.balance[s] = balances[stages][s];
    p->batch = BATCH;
    p->seed = 42;
    p->threads = 1;
    p->optimizer.kind = BT_OPT_SGD;
    p->optimizer.lr = 0.1;
    p->optimizer.momentum = 0.9;
    p->optimizer.weight_decay = 0.01;
    p->watchdog_s = 20;
}

typedef struct run_result {
    double loss[3];
    int n;
    float *params[32];
    size_t sizes[32];
} run_result;

static int run_three_steps(const bt_graph *g, const bt_engine_params *p, run_result *r)
{
    bt_engine *e = NULL;
    memset(r, 0, sizeof *r);
    if (bt_engine_create(g, p, &e) != BT_OK) {
        printf("\n  engine_create: %s\n", bt_last_error());
        return 0;
    }
    for (int step = 0; step < 3; step++) {
        batch_data b;
        make_batch(&b, 100); /* one batch: the loss must fall */
        bt_step_result res;
        if (bt_engine_train_step(e, b.feeds, 2, &res) != BT_OK) {
            printf("\n  train_step: %s\n", bt_last_error());
            bt_engine_destroy(e);
            return 0;
        }
        r->loss[step] = res.loss;
    }
    r->n = bt_test_read_params(e, g, r->params, r->sizes, (int)(sizeof r->params / sizeof r->params[0]));
    bt_engine_destroy(e);
    return 1;
}

static void free_result(run_result *r)
{
    for (int i = 0; i < r->n; i++) free(r->params[i]);
}

/* The worst relative error of losses and parameters against the reference. */
static double worst_error(const run_result *r, const run_result *ref)
{
    double worst = 0;
    for (int s = 0; s < 3; s++)
        worst = fmax(worst, fabs(r->loss[s] - ref->loss[s]) / fmax(fabs(ref->loss[s]), 1e-3));
    for (int i = 0; i < r->n; i++) {
        const float *a = r->params[i], *b = ref->params[i];
        double diff = 0, scale = 0;
        for (size_t j = 0; j < r->sizes[i] / sizeof(float); j++) {
            diff = fmax(diff, fabs((double)a[j] - b[j]));
            scale = fmax(scale, fabs((double)b[j]));
        }
        worst = fmax(worst, scale > 0 ? diff / scale : diff);
    }
    return worst;
}

static void reference(const bt_graph *g, run_result *ref)
{
    bt_engine_params p;
    params_for(&p, 1, 1, 1, BT_SCHEDULE_1F1B);
    CU_ASSERT_FATAL(run_three_steps(g, &p, ref));
    CU_ASSERT(ref->loss[2] < ref->loss[0]); /* it learns */
}

static void check_against(const bt_graph *g, const run_result *ref, int devices, int v, int m,
                          bt_schedule_kind kind)
{
    bt_engine_params p;
    run_result r;
    params_for(&p, devices, v, m, kind);
    int ran = run_three_steps(g, &p, &r);
    CU_ASSERT(ran);
    if (!ran) return;
    double err = worst_error(&r, ref);
    if (!(err <= 1e-6))
        printf("\n  %s devices %d virtual %d m %d: worst relative error %.3g\n", bt_schedule_name(kind),
               devices, v, m, err);
    CU_ASSERT(err <= 1e-6);
    free_result(&r);
}

static void test_interleaved_matches_single_stage(void)
{
    bt_graph *g = deep_residual_graph();
    run_result ref;
    reference(g, &ref);
    const int cases[][2] = {{2, 4}, {2, 8}, {3, 6}, {4, 4}, {4, 8}, {1, 4}}; /* devices, m */
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        check_against(g, &ref, cases[c][0], 2, cases[c][1], BT_SCHEDULE_INTERLEAVED_1F1B);
    /* three chunks per device: 6 logical stages on 2 devices, and 3 on one */
    check_against(g, &ref, 2, 3, 4, BT_SCHEDULE_INTERLEAVED_1F1B);
    check_against(g, &ref, 1, 3, 4, BT_SCHEDULE_INTERLEAVED_1F1B);
    free_result(&ref);
    bt_graph_destroy(g);
}

static void test_zb_h1_matches_single_stage(void)
{
    bt_graph *g = deep_residual_graph();
    run_result ref;
    reference(g, &ref);
    for (int p = 2; p <= 4; p++)
        for (int m = 4; m <= 8; m += 4) {
            check_against(g, &ref, p, 1, m, BT_SCHEDULE_ZB_H1);
            /* B and W are the fused backward's arithmetic, accumulated in the same micro-batch
             * order: the same placement under 1F1B gives the same bits */
            bt_engine_params p1, pz;
            run_result a, b;
            params_for(&p1, p, 1, m, BT_SCHEDULE_1F1B);
            params_for(&pz, p, 1, m, BT_SCHEDULE_ZB_H1);
            CU_ASSERT_FATAL(run_three_steps(g, &p1, &a) && run_three_steps(g, &pz, &b));
            int same = memcmp(a.loss, b.loss, sizeof a.loss) == 0;
            for (int i = 0; i < a.n; i++) same &= memcmp(a.params[i], b.params[i], a.sizes[i]) == 0;
            if (!same) printf("\n  zb-h1 p %d m %d differs from 1f1b in some bit\n", p, m);
            CU_ASSERT(same);
            free_result(&a);
            free_result(&b);
        }
    free_result(&ref);
    bt_graph_destroy(g);
}

/* ZBV on P = 2, 3, 4 devices (4, 6, 8 logical stages in a V, the residual from fc1 crossing
 * stages and devices), m = 4 and 8: the one-stage run within 1e-6, and bit for bit the 1F1B run of
 * the same 2P logical stages (one device each): every stage computes the same B and W arithmetic
 * and accumulates its weight gradients in micro-batch order. The engine places the stages by the
 * schedule's map (cpu:0 runs stages 0 and 2P-1). */
static void test_zbv_matches_single_stage(void)
{
    bt_graph *g = deep_residual_graph();
    run_result ref;
    reference(g, &ref);
    for (int P = 2; P <= 4; P++)
        for (int m = 4; m <= 8; m += 4) {
            check_against(g, &ref, P, 2, m, BT_SCHEDULE_ZBV);
            bt_engine_params p1, pz;
            run_result a, b;
            params_for(&p1, 2 * P, 1, m, BT_SCHEDULE_1F1B); /* (params_for's device list is static) */
            CU_ASSERT_FATAL(run_three_steps(g, &p1, &a));
            params_for(&pz, P, 2, m, BT_SCHEDULE_ZBV);
            CU_ASSERT_FATAL(run_three_steps(g, &pz, &b));
            int same = memcmp(a.loss, b.loss, sizeof a.loss) == 0;
            for (int i = 0; i < a.n; i++) same &= memcmp(a.params[i], b.params[i], a.sizes[i]) == 0;
            if (!same) printf("\n  zbv P %d m %d differs from 1f1b on %d stages in some bit\n", P, m, 2 * P);
            CU_ASSERT(same);
            free_result(&a);
            free_result(&b);
        }
    bt_engine_params p;
    bt_engine *e = NULL;
    params_for(&p, 3, 2, 4, BT_SCHEDULE_ZBV);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    const char *want[] = {"cpu:0", "cpu:1", "cpu:2", "cpu:2", "cpu:1", "cpu:0"};
    for (int s = 0; s < 6; s++) CU_ASSERT_STRING_EQUAL(e->stage[s].device_name, want[s]);
    CU_ASSERT_EQUAL(e->turn_devices, 3);
    bt_engine_destroy(e);
    /* zbv takes exactly two chunks per device, and says so */
    params_for(&p, 2, 2, 4, BT_SCHEDULE_ZBV);
    p.parallel.virtual_stages = 1;
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_MODEL);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "schedule zbv runs 2 chunks per device: virtual must be 2, got 1");
    free_result(&ref);
    bt_graph_destroy(g);
}

/* Interleaved needs micro-batches in groups of the devices: 3 devices and 4 or 8 micro-batches is
 * an error that says so, and so is virtual with another schedule. */
static void test_interleaved_shape_errors(void)
{
    bt_graph *g = deep_residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    params_for(&p, 3, 2, 4, BT_SCHEDULE_INTERLEAVED_1F1B);
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "interleaved-1f1b runs micro-batches in groups of the 3 devices: "
                                            "4 micro-batches is not a multiple of 3");
    params_for(&p, 2, 2, 4, BT_SCHEDULE_ZB_H1);
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "only interleaved-1f1b and zbv run several chunks per device"));
    bt_graph_destroy(g);
}

/* Peak micro-batches each stage held, measured by the executor, against the schedule's bound:
 * ZB-H1 min(p, m) on every stage (1F1B's peak), ZBV its per-chunk bound, interleaved the slots its
 * schedule states, and
 * each interleaved device (its stages together, in the device's order) Megatron's warm-up + 1. */
static void test_activation_memory_follows_bounds(void)
{
    bt_graph *g = deep_residual_graph();
    for (int k = 0; k < 3; k++) {
        bt_schedule_kind kind = k == 2 ? BT_SCHEDULE_ZBV : k ? BT_SCHEDULE_INTERLEAVED_1F1B : BT_SCHEDULE_ZB_H1;
        int v = k ? 2 : 1;
        for (int devices = 2; devices <= 4; devices++) {
            int m = devices == 3 ? 6 : 8;
            bt_engine_params p;
            bt_engine *e = NULL;
            params_for(&p, devices, v, m, kind);
            CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
            batch_data b;
            make_batch(&b, 7);
            CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
            int stages = devices * v;
            for (int s = 0; s < stages; s++) {
                bt_memory_stats mem;
                CU_ASSERT_FATAL(bt_engine_memory(e, s, &mem) == BT_OK);
                int want = k == 1 ? e->train_sched->slots[s] : bt_schedule_slot_bound(kind, stages, m, v, s);
                if (mem.peak_microbatches != want)
                    printf("\n  %s devices %d stage %d holds %d, want %d\n", bt_schedule_name(kind), devices, s,
                           mem.peak_microbatches, want);
                CU_ASSERT_EQUAL(mem.peak_microbatches, want);
                CU_ASSERT(mem.activation_peak <= mem.activations);
            }
            if (k == 1) /* per device, walking its order: forwards add one, backwards free one */
                for (int d = 0; d < devices; d++) {
                    int n = 0, *st = NULL, *ix = NULL, live = 0, peak = 0;
                    CU_ASSERT_FATAL(bt_schedule_device_order(e->train_sched, d, &n, &st, &ix) == BT_OK);
                    for (int i = 0; i < n; i++) {
                        bt_instr_kind ik = e->train_sched->list[st[i]][ix[i]].kind;
                        if (ik == BT_I_FWD && ++live > peak) peak = live;
                        if (ik == BT_I_BWD) live--;
                    }
                    CU_ASSERT_EQUAL(peak, bt_schedule_slot_bound(kind, stages, m, v, d));
                    free(st);
                    free(ix);
                }
            bt_engine_destroy(e);
        }
    }
    bt_graph_destroy(g);
}

/* ZB-H1 defers W for exactly the nodes with parameters whose op gives a weight kernel (the seven
 * linear and two layernorm layers; activations, add and the loss keep a fused backward), each with
 * an output-gradient stash in the slot; 1F1B's slots have none. The stashes of fc1, fc4, fc5 and
 * head reuse their own outputs' space (read only by an activation's or the loss's B); fc2, fc3
 * and fc6 carry their relu fused, so their outputs feed ln1, fc4 and head directly, whose W reads
 * them, and the layernorms' outputs feed fc3 and fc6: those five take space of their own, so the
 * slot of stage 1 grows by exactly five 16-wide values per sample, stage 0's (fc1 alone) not at
 * all. */
static void test_w_nodes_and_stashes(void)
{
    bt_graph *g = deep_residual_graph();
    size_t slot_bytes[2][2];
    for (int k = 0; k < 2; k++) {
        bt_engine_params p;
        params_for(&p, 2, 1, 4, k ? BT_SCHEDULE_ZB_H1 : BT_SCHEDULE_1F1B);
        bt_engine *e = NULL;
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
        int stashes = 0, in_place = 0;
        for (int s = 0; s < e->stages; s++) {
            const bt_stage *st = &e->stage[s];
            slot_bytes[k][s] = st->slot_bytes;
            for (int n = 0; n < st->n_nodes; n++) {
                if (st->node_wgrad_offset[n] == BT_MEMORY_NO_WGRAD) continue;
                stashes++;
                int out = g->nodes[st->first_node + n].out;
                in_place += st->node_wgrad_offset[n] == (size_t)st->value_offset[out];
            }
        }
        CU_ASSERT_EQUAL(stashes, k ? 9 : 0);
        CU_ASSERT_EQUAL(in_place, k ? 4 : 0);
        bt_engine_destroy(e);
    }
    size_t value = (size_t)(BATCH / 4) * HID * sizeof(float); /* 64-byte aligned already */
    CU_ASSERT_EQUAL(slot_bytes[1][0], slot_bytes[0][0]);
    CU_ASSERT_EQUAL(slot_bytes[1][1], slot_bytes[0][1] + 5 * value);
    bt_graph_destroy(g);
}

/* Several stages on one device run its instructions one at a time, in the device's order: on the
 * CPU the records' host times show it (each instruction starts after the previous turn ended), and
 * the micro-batches the device holds, from the executor's own counts, peak at Megatron's bound. */
static void check_turns_in_order(bt_schedule_kind kind, int devices)
{
    bt_graph *g = deep_residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    params_for(&p, devices, 2, 8, kind);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    int violations = 0, checked = 0;
    for (int step = 0; step < 3; step++) {
        batch_data b;
        make_batch(&b, 9);
        CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
        const bt_schedule *sched = bt_engine_last_schedule(e);
        for (int d = 0; d < sched->devices; d++) {
            int n = 0, *st = NULL, *ix = NULL;
            CU_ASSERT_FATAL(bt_schedule_device_order(sched, d, &n, &st, &ix) == BT_OK);
            double *start = calloc((size_t)n, sizeof *start), *end = calloc((size_t)n, sizeof *end);
            int *live = calloc((size_t)n, sizeof *live);
            for (int s = 0; s < sched->stages; s++) {
                if (sched->device[s] != d) continue;
                int nr = 0;
                const bt_trace_rec *rec = bt_engine_trace(e, s, &nr);
                CU_ASSERT_EQUAL(nr, sched->len[s]);
                for (int i = 0; i < nr; i++) {
                    int t = sched->list[s][rec[i].instr].turn;
                    start[t] = rec[i].start_ms;
                    end[t] = rec[i].end_ms;
                    live[t] = rec[i].live;
                }
            }
            /* the micro-batches the device's stages hold together, measured after each turn:
             * at most Megatron's warm-up + 1 (zbv: 2P), and exactly that at the peak */
            int held[8] = {0}, peak = 0;
            for (int t = 0; t < n; t++) {
                int now = 0;
                held[bt_schedule_stage_chunk(sched, st[t])] = live[t];
                for (int c = 0; c < sched->chunks; c++) now += held[c];
                if (now > peak) peak = now;
            }
            int bound = kind == BT_SCHEDULE_ZBV ? 2 * sched->devices
                                                : bt_schedule_slot_bound(sched->kind, sched->stages,
                                                                         sched->microbatches, sched->chunks, d);
            CU_ASSERT_EQUAL(peak, bound);
            free(live);
            for (int t = 1; t < n; t++) {
                /* sends on the CPU record their slice on the compute stream too: all in order; a
                 * STEP hands its turn on before its barrier, so the next STEP may overlap it */
                if (sched->list[st[t]][ix[t]].kind == BT_I_STEP) continue;
                checked++;
                if (start[t] < end[t - 1]) violations++;
            }
            free(start);
            free(end);
            free(st);
            free(ix);
        }
    }
    CU_ASSERT(checked > 100);
    if (violations) printf("\n  %d of %d instructions started before the previous turn ended\n", violations, checked);
    CU_ASSERT_EQUAL(violations, 0);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static void test_device_runs_its_turns_in_order(void)
{
    check_turns_in_order(BT_SCHEDULE_INTERLEAVED_1F1B, 2);
    check_turns_in_order(BT_SCHEDULE_ZBV, 2);
    check_turns_in_order(BT_SCHEDULE_ZBV, 3);
}

/* core/turns.h: three threads take 60 turns (owner t % 3, with runs of one owner) in order, each
 * appending its turn to a log; then a thread waiting for a turn that never comes returns 0 once
 * the abort flag is raised and the sleepers woken. */
typedef struct turns_case {
    bt_turns *turns;
    int slot, n, *owner, *log, *at;
    int result;
} turns_case;

static void *turns_thread(void *arg)
{
    turns_case *c = arg;
    c->result = 1;
    for (int t = 0; t < c->n; t++) {
        if (c->owner[t] != c->slot) continue;
        if (!bt_turns_wait(c->turns, c->slot, t)) {
            c->result = 0;
            break;
        }
        c->log[(*c->at)++] = t; /* ordered by the turns themselves */
        bt_turns_pass(c->turns, t);
    }
    return NULL;
}

static void test_turns_order_and_abort(void)
{
    enum { N = 60 };
    int owner[N], log[N], at = 0;
    for (int t = 0; t < N; t++) owner[t] = (t / 2) % 3; /* pairs: a thread runs two in a row */
    atomic_bool abort_flag;
    atomic_init(&abort_flag, 0);
    bt_turns *turns = NULL;
    CU_ASSERT_FATAL(bt_turns_create(N, owner, 3, &abort_flag, &turns) == BT_OK);
    turns_case c[3];
    pthread_t tid[3];
    for (int k = 0; k < 3; k++) {
        c[k] = (turns_case){turns, k, N, owner, log, &at, -1};
        CU_ASSERT_FATAL(pthread_create(&tid[k], NULL, turns_thread, &c[k]) == 0);
    }
    for (int k = 0; k < 3; k++) pthread_join(tid[k], NULL);
    CU_ASSERT_EQUAL(at, N);
    for (int t = 0; t < N && t < at; t++) CU_ASSERT_EQUAL(log[t], t);
    for (int k = 0; k < 3; k++) CU_ASSERT_EQUAL(c[k].result, 1);
    /* abort: slot 1 waits for turn 1 while turn 0 never passes */
    bt_turns_reset(turns);
    int two[2] = {0, 1};
    bt_turns *pair = NULL;
    CU_ASSERT_FATAL(bt_turns_create(2, two, 2, &abort_flag, &pair) == BT_OK);
    turns_case w = {pair, 1, 2, two, log, &at, -1};
    at = 0;
    pthread_t waiter;
    CU_ASSERT_FATAL(pthread_create(&waiter, NULL, turns_thread, &w) == 0);
    struct timespec pause = {0, 50 * 1000000L};
    nanosleep(&pause, NULL); /* well past the spin: it sleeps */
    atomic_store(&abort_flag, 1);
    bt_turns_wake(pair);
    pthread_join(waiter, NULL);
    CU_ASSERT_EQUAL(w.result, 0);
    CU_ASSERT_EQUAL(at, 0);
    bt_turns_destroy(pair);
    bt_turns_destroy(turns);
    int bad[1] = {3};
    CU_ASSERT_EQUAL(bt_turns_create(1, bad, 2, NULL, &turns), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(turns);
}

/* ZBV with a send that never happens: the receiver's channel times out, and every stage thread
 * waiting for its device's turn stops on the abort, so the step returns BT_ERR_TIMEOUT at once
 * instead of hanging; the engine works again once the fault is gone. */
static void test_zbv_watchdog(void)
{
    bt_graph *g = deep_residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    params_for(&p, 2, 2, 4, BT_SCHEDULE_ZBV);
    p.watchdog_s = 0.5;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 3);
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    bt_engine_test_drop_send(e, 1, 1); /* stage 1 (cpu:1) never sends micro-batch 1 to stage 2 (cpu:1) */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    bt_status st = bt_engine_train_step(e, b.feeds, 2, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double waited = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    CU_ASSERT_EQUAL(st, BT_ERR_TIMEOUT);
    if (!strstr(bt_last_error(), "(2R1) waits for activations of micro-batch 1 from stage 1"))
        printf("\n  message: %s\n", bt_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "(2R1) waits for activations of micro-batch 1 from stage 1"));
    CU_ASSERT(waited < 5.0);
    bt_engine_test_drop_send(e, -1, -1);
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, NULL), BT_OK);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"interleaved 1F1B matches one stage (P 1-4, virtual 2 and 3)", test_interleaved_matches_single_stage},
        {"ZB-H1 matches one stage (p 2-4, m 4 and 8)", test_zb_h1_matches_single_stage},
        {"ZBV matches one stage (P 2-4, m 4 and 8) and 1F1B bit for bit", test_zbv_matches_single_stage},
        {"interleaved shape errors", test_interleaved_shape_errors},
        {"activation memory follows each schedule's bound", test_activation_memory_follows_bounds},
        {"W runs for the parameterised nodes, each with a stash", test_w_nodes_and_stashes},
        {"a device runs its stages' instructions in turn (interleaved, zbv)", test_device_runs_its_turns_in_order},
        {"turns: in order, and a waiter stops on abort", test_turns_order_and_abort},
        {"zbv: a lost send times out, turn waiters stop", test_zbv_watchdog},
        {NULL, NULL}};
    return bt_test_main("schedules", cases);
}
