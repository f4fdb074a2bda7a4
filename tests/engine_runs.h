/* tests/engine_runs.h: the small training runs the engine tests compare with each other: the
 * residual graph of test_models.h, a fixed batch per step, CPU stages with balances that make the
 * residual skip a stage, three optimizer steps, and the ways two runs are compared. */
#ifndef BT_TEST_ENGINE_RUNS_H
#define BT_TEST_ENGINE_RUNS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"

#define IN 8
#define HID 16
#define CLASSES 4

static inline bt_graph *residual_graph(void) { return bt_test_residual_graph(IN, HID, CLASSES); }

/* One layer of chain_graph: a linear layer of `out` features (with an optional act), or a
 * one-input op (a custom op under test) when out is 0. */
typedef struct chain_layer {
    const char *name, *op, *act;
    int64_t out;
} chain_layer;

/* x (IN) -> layers[0..n) -> head (linear, CLASSES) -> loss = cross_entropy(head, label). */
static inline bt_graph *chain_graph(const chain_layer *layers, int n)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in = IN;
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc d;
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, &in, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    for (int i = 0; i < n; i++) {
        bt_layer_desc_init(&d), d.name = layers[i].name, d.op = layers[i].op, d.act = layers[i].act;
        if (layers[i].out > 0) bt_args_set_int(a, "out", layers[i].out), d.args = a;
        CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    }
    bt_args_set_int(a, "out", CLASSES);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    return g;
}

#define BATCH 16

typedef struct batch_data {
    float x[BATCH * IN];
    int32_t label[BATCH];
    bt_feed feeds[2];
} batch_data;

static inline void make_batch(batch_data *b, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < BATCH * IN; i++) b->x[i] = (float)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < BATCH; i++) b->label[i] = rand() % CLASSES;
    b->feeds[0] = (bt_feed){"x", b->x, BT_F32};
    b->feeds[1] = (bt_feed){"label", b->label, BT_I32};
}

/* Balances that put fc1 alone on stage 0 so `skip` (which reads fc1) sits two or more stages on. */
static const int balances[5][4] = {{0}, {7}, {1, 6}, {1, 2, 4}, {1, 1, 2, 3}};

static inline void engine_params(bt_engine_params *p, int stages, int m, bt_schedule_kind kind)
{
    static char devices[64];
    bt_engine_params_init(p);
    devices[0] = '\0';
    for (int s = 0; s < stages; s++) {
        char one[16];
        snprintf(one, sizeof one, "%scpu:%d", s ? "," : "", s);
        strcat(devices, one);
    }
    p->parallel.devices = devices;
    p->parallel.stages = stages;
    p->parallel.microbatches = m;
    p->parallel.schedule = kind;
    p->parallel.partition = BT_PARTITION_BALANCE;
    p->parallel.n_balance = stages;
    for (int s = 0; s < stages; s++) p->parallel.balance[s] = balances[stages][s];
    p->batch = BATCH;
    p->seed = 42;
    p->optimizer.kind = BT_OPT_SGD;
    p->optimizer.lr = 0.1;
    p->optimizer.momentum = 0.9;
    p->optimizer.weight_decay = 0.01;
    p->watchdog_s = 20;
}

typedef struct run_result {
    double loss[3];
    int n;
    float *params[16];
    size_t sizes[16];
} run_result;

static inline void run_three_steps(const bt_graph *g, const bt_engine_params *p, run_result *r)
{
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(g, p, &e);
    if (st != BT_OK) printf("\n  engine_create: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    for (int step = 0; step < 3; step++) {
        batch_data b;
        make_batch(&b, 100 + (unsigned)step);
        bt_step_result res;
        st = bt_engine_train_step(e, b.feeds, 2, &res);
        if (st != BT_OK) printf("\n  train_step: %s\n", bt_last_error());
        CU_ASSERT_FATAL(st == BT_OK);
        r->loss[step] = res.loss;
    }
    r->n = bt_test_read_params(e, g, r->params, r->sizes, (int)(sizeof r->params / sizeof r->params[0]));
    bt_engine_destroy(e);
}

static inline void free_result(run_result *r)
{
    for (int i = 0; i < r->n; i++) free(r->params[i]);
}

static inline int close_rel(double a, double b, double rel)
{
    double scale = fmax(fabs(a), fabs(b));
    return fabs(a - b) <= rel * fmax(scale, 1e-3);
}

/* max |a - b| / max |b| over one tensor: float32 sums taken in another order (micro-batches)
 * differ by rounding, which this measures against the tensor's scale. */
static inline double tensor_rel_error(const float *a, const float *b, size_t n)
{
    double diff = 0, scale = 0;
    for (size_t j = 0; j < n; j++) {
        diff = fmax(diff, fabs((double)a[j] - b[j]));
        scale = fmax(scale, fabs((double)b[j]));
    }
    return scale > 0 ? diff / scale : diff;
}

/* With m = 1 the split must not change a single bit: each stage runs the same kernels on the same
 * data. */
static inline int identical(const run_result *a, const run_result *b)
{
    int same = memcmp(a->loss, b->loss, sizeof a->loss) == 0;
    for (int i = 0; i < a->n; i++) same &= memcmp(a->params[i], b->params[i], a->sizes[i]) == 0;
    return same;
}

#endif
