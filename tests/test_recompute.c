/* tests/test_recompute.c: activation recomputation (train.recompute, a layer's recompute:,
 * bt_graph_set_recompute). With dropout on and a skip connection crossing stages, three training
 * steps with recomputation give bit-identical losses and parameters to the same run without it,
 * on 1, 2 and 3 stages under 1F1B, GPipe and ZB-H1 (whose deferred W recomputes again), and on 4 and 6
 * stages under ZBV (2 and 3 devices); the activation memory the engine reserves and the
 * peak it measures while micro-batches are live drop by the recomputed bytes times the extra
 * micro-batches a stage holds; the loader's keys and their errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "graph/graph_internal.h"
#include "plan/memory.h"

#define W 32
#define IN_W 16
#define BATCH_N 32

static const char *model_text =
    "format: 1\n"
    "inputs: {x: {shape: [16], dtype: f32}, label: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 32}, act: relu}\n"
    "  - {name: drop1, op: dropout, args: {p: 0.3}}\n"
    "  - {name: fc2, op: linear, args: {out: 32}, act: relu}\n"
    "  - {name: drop2, op: dropout, args: {p: 0.2}}\n"
    "  - {name: skip, op: add, from: [-1, fc1]}\n"
    "  - {name: fc3, op: linear, args: {out: 32}, act: gelu}\n"
    "  - {name: drop3, op: dropout, args: {p: 0.1}}\n"
    "  - {name: head, op: linear, args: {out: 4}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "train: {batch: 32, steps: 3, optimizer: {type: adamw, lr: 0.01}}\n";

static bt_model *load(const char *const *ov, int n)
{
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(model_text, strlen(model_text), "recompute.yaml", ov, n, &m);
    if (st != BT_OK) fprintf(stderr, "%s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

typedef struct run_out {
    double loss[3];
    float *params;           /* every parameter, concatenated */
    size_t n;
    bt_memory_stats mem[8];
} run_out;

/* Three steps of m on `stages` CPU stages cut by balance, m micro-batches (zbv: stages / 2
 * devices, two stages each). */
static void run(bt_model *model, int stages, const int *balance, int mbs, bt_schedule_kind kind, run_out *out)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    static const char *devs[] = {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2"};
    int zbv = kind == BT_SCHEDULE_ZBV;
    p.parallel.devices = devs[(zbv ? stages / 2 : stages) - 1];
    p.parallel.virtual_stages = zbv ? 2 : 1;
    p.parallel.stages = stages;
    p.parallel.microbatches = mbs;
    p.parallel.schedule = kind;
    p.parallel.partition = stages > 1 ? BT_PARTITION_BALANCE : BT_PARTITION_UNIFORM;
    p.parallel.n_balance = stages > 1 ? stages : 0;
    for (int s = 0; s < stages && stages > 1; s++) p.parallel.balance[s] = balance[s];
    p.optimizer = model->train.optimizer;
    p.batch = BATCH_N;
    p.seed = 7;
    p.threads = 1;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(model->graph, &p, &e);
    if (st != BT_OK) fprintf(stderr, "%s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    float x[BATCH_N * IN_W];
    int32_t label[BATCH_N];
    for (int step = 0; step < 3; step++) {
        srand(100 + (unsigned)step);
        for (int i = 0; i < BATCH_N * IN_W; i++) x[i] = (float)rand() / RAND_MAX * 2 - 1;
        for (int i = 0; i < BATCH_N; i++) label[i] = rand() % 4;
        bt_feed feeds[2] = {{"x", x, BT_F32}, {"label", label, BT_I32}};
        bt_step_result r;
        CU_ASSERT_FATAL(bt_engine_train_step(e, feeds, 2, &r) == BT_OK);
        out->loss[step] = r.loss;
    }
    out->n = 0;
    int np = bt_graph_num_params(model->graph);
    for (int i = 0; i < np; i++) {
        bt_param_info pi;
        bt_graph_param(model->graph, i, &pi);
        out->n += (size_t)bt_shape_numel(&pi.shape);
    }
    out->params = malloc(out->n * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        bt_param_info pi;
        bt_graph_param(model->graph, i, &pi);
        size_t k = (size_t)bt_shape_numel(&pi.shape);
        CU_ASSERT(bt_engine_read_param(e, pi.name, out->params + off, k * sizeof(float)) == BT_OK);
        off += k;
    }
    for (int s = 0; s < stages; s++) CU_ASSERT(bt_engine_memory(e, s, &out->mem[s]) == BT_OK);
    bt_engine_destroy(e);
}

static void expect_identical(const run_out *a, const run_out *b)
{
    for (int i = 0; i < 3; i++) CU_ASSERT(memcmp(&a->loss[i], &b->loss[i], sizeof(double)) == 0);
    CU_ASSERT_FATAL(a->n == b->n);
    CU_ASSERT(memcmp(a->params, b->params, a->n * sizeof(float)) == 0);
}

/* Bit-identical results with every layer recomputed, and with only fc2 (train.recompute.layers),
 * on 1..3 stages, 1F1B, GPipe and ZB-H1, dropout on. */
static void test_bit_identical(void)
{
    static const int bal2[] = {4, 5}, bal3[] = {2, 3, 4}; /* fc1 crosses into skip on a later stage */
    const int *bals[] = {NULL, bal2, bal3};
    const char *all[] = {"train.recompute=stage"};
    const char *some[] = {"train.recompute={layers: [fc2, drop3]}"};
    bt_model *plain = load(NULL, 0), *rec = load(all, 1), *part = load(some, 1);
    bt_layer_info li;
    CU_ASSERT(bt_graph_layer(rec->graph, 3, &li) == BT_OK && li.recompute == 1);
    CU_ASSERT(bt_graph_layer(part->graph, 2, &li) == BT_OK && li.recompute == 1);
    CU_ASSERT(bt_graph_layer(part->graph, 3, &li) == BT_OK && li.recompute == 0);
    for (int stages = 1; stages <= 3; stages++)
        for (int k = 0; k < 3; k++) {
            bt_schedule_kind kind = k == 2 ? BT_SCHEDULE_ZB_H1 : k ? BT_SCHEDULE_GPIPE : BT_SCHEDULE_1F1B;
            run_out a, b, c;
            run(plain, stages, bals[stages - 1], 4, kind, &a);
            run(rec, stages, bals[stages - 1], 4, kind, &b);
            run(part, stages, bals[stages - 1], 4, kind, &c);
            expect_identical(&a, &b);
            expect_identical(&a, &c);
            CU_ASSERT(a.loss[0] != a.loss[2]); /* it trained */
            free(a.params), free(b.params), free(c.params);
        }
    bt_model_destroy(plain), bt_model_destroy(rec), bt_model_destroy(part);
}

/* ZBV, every layer recomputed and only some, dropout on, the residual from fc1 crossing stages and
 * devices: bit-identical to ZBV without recomputation. */
static void test_zbv_bit_identical(void)
{
    static const int bal4[] = {2, 2, 2, 3}, bal6[] = {1, 1, 2, 1, 2, 2};
    const char *all[] = {"train.recompute=stage"};
    const char *some[] = {"train.recompute={layers: [fc2, drop3]}"};
    bt_model *plain = load(NULL, 0), *rec = load(all, 1), *part = load(some, 1);
    for (int stages = 4; stages <= 6; stages += 2) {
        const int *bal = stages == 4 ? bal4 : bal6;
        run_out a, b, c;
        run(plain, stages, bal, 4, BT_SCHEDULE_ZBV, &a);
        run(rec, stages, bal, 4, BT_SCHEDULE_ZBV, &b);
        run(part, stages, bal, 4, BT_SCHEDULE_ZBV, &c);
        expect_identical(&a, &b);
        expect_identical(&a, &c);
        CU_ASSERT(a.loss[0] != a.loss[2]);
        free(a.params), free(b.params), free(c.params);
    }
    bt_model_destroy(plain), bt_model_destroy(rec), bt_model_destroy(part);
}

static size_t a64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Two stages, 1F1B, 8 micro-batches: stage 0 keeps 2 micro-batches, stage 1 one. Reserved and
 * measured activation memory fall by the recomputed bytes times (micro-batches held - 1). */
static void test_memory_drop(void)
{
    static const int bal[] = {4, 5};
    const char *all[] = {"train.recompute=stage"};
    bt_model *plain = load(NULL, 0), *rec = load(all, 1);
    run_out a, b;
    run(plain, 2, bal, 8, BT_SCHEDULE_1F1B, &a);
    run(rec, 2, bal, 8, BT_SCHEDULE_1F1B, &b);
    const size_t mb = BATCH_N / 8;
    /* the memory model's recompute region of stage 0 */
    bt_plan *plan = NULL;
    int first[] = {0, 4, 9};
    CU_ASSERT_FATAL(bt_plan_from_cuts(rec->graph, 2, first, &plan) == BT_OK);
    bt_memory_params mp;
    bt_memory_params_init(&mp);
    mp.microbatch_size = (int64_t)mb;
    mp.microbatches = 8;
    mp.optimizer_slots = 2;
    int slots[] = {2, 1};
    mp.n_slots = slots;
    bt_stage_memory sm;
    bt_memory_stage(rec->graph, plan, &mp, 0, &sm, NULL);
    /* stage 0 = fc1 (linear, its relu fused: one node), drop1, fc2 (likewise), drop2. Kept: fc1
     * and drop2 (sent on), plus their state; recomputed at least drop1 and fc2: two [mb, 32] f32
     * values */
    CU_ASSERT(sm.recompute_bytes >= 2 * a64(mb * W * 4));
    CU_ASSERT(sm.n_recomputed >= 2);
    size_t saved = sm.recompute_bytes; /* one shared copy instead of one per slot */
    CU_ASSERT(a.mem[0].activations - b.mem[0].activations == (size_t)(2 - 1) * saved);
    CU_ASSERT(a.mem[0].peak_microbatches == 2 && b.mem[0].peak_microbatches == 2);
    CU_ASSERT(a.mem[0].activation_peak - b.mem[0].activation_peak == (size_t)(2 - 1) * saved);
    /* stage 1 holds one micro-batch: recomputation saves nothing there */
    CU_ASSERT(a.mem[1].activations == b.mem[1].activations);
    CU_ASSERT(a.mem[1].activation_peak == b.mem[1].activation_peak);
    bt_plan_destroy(plan);
    free(a.params), free(b.params);
    bt_model_destroy(plain), bt_model_destroy(rec);
}

static void expect_load_error(const char *override, const char *needle)
{
    bt_model *m = NULL;
    const char *ov[] = {override};
    bt_status st = bt_model_load_string(model_text, strlen(model_text), "recompute.yaml", ov, 1, &m);
    CU_ASSERT(st == BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), needle) != NULL);
    if (!strstr(bt_last_error(), needle)) fprintf(stderr, "got: %s\n", bt_last_error());
    bt_model_destroy(m);
}

static void test_loader(void)
{
    expect_load_error("train.recompute=everything", "train.recompute");
    expect_load_error("train.recompute={layers: [nope]}", "'nope', which is no layer");
    expect_load_error("train.recompute={layers: []}", "non-empty list");
    expect_load_error("train.recompute={layer: [fc1]}", "train.recompute");
    /* a layer's own key */
    static const char *text =
        "format: 1\n"
        "inputs: {x: {shape: [4], dtype: f32}, label: {shape: [], dtype: i32}}\n"
        "layers:\n"
        "  - {name: blocks, repeat: 2, op: linear, args: {out: 4}, recompute: true}\n"
        "  - {name: loss, op: cross_entropy, from: [-1, label]}\n"
        "train: {batch: 4, steps: 1}\n";
    bt_model *m = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(text, strlen(text), "t.yaml", NULL, 0, &m) == BT_OK);
    bt_layer_info li;
    CU_ASSERT(bt_graph_layer(m->graph, 1, &li) == BT_OK && li.recompute == 1);
    CU_ASSERT(bt_graph_layer(m->graph, 2, &li) == BT_OK && li.recompute == 0);
    bt_model_destroy(m);
    const char *none[] = {"train.recompute=none"};
    CU_ASSERT(bt_model_load_string(text, strlen(text), "t.yaml", none, 1, &m) == BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), "train.recompute is none") != NULL);
    /* the C API */
    m = load(NULL, 0);
    CU_ASSERT(bt_graph_set_recompute(m->graph, 99, 1) == BT_ERR_INVALID_ARG);
    CU_ASSERT(bt_graph_set_recompute(m->graph, -1, 1) == BT_OK);
    CU_ASSERT(bt_graph_layer(m->graph, 8, &li) == BT_OK && li.recompute == 1);
    bt_model_destroy(m);
}

/* zb-h1's deferred W reads activations after later micro-batches recomputed theirs: the engine
 * recomputes again before W. Recomputation still lowers the reserved activation memory there
 * (each recomputed activation is kept once, not once per micro-batch held to its W) on the last
 * stage, where every node is recomputed. Not on stage 0 of this model: fc1 is kept (sent on) but
 * feeds the recomputed drop1, which the recomputation before W reads again, so fc1's W stash needs
 * room of its own instead of fc1's output (plan/memory.c stash_in_place); the layout test below
 * checks that. */
static void test_with_split_backward(void)
{
    const char *all[] = {"train.recompute=stage"};
    bt_model *rec = load(all, 1);
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.devices = "cpu:0,cpu:1";
    p.parallel.stages = 2;
    p.parallel.microbatches = 4;
    p.parallel.schedule = BT_SCHEDULE_ZB_H1;
    p.parallel.partition = BT_PARTITION_UNIFORM;
    p.batch = BATCH_N;
    p.threads = 1;
    bt_engine *e = NULL;
    bt_memory_stats with, without;
    CU_ASSERT_FATAL(bt_engine_create(rec->graph, &p, &e) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_memory(e, 1, &with) == BT_OK);
    bt_engine_destroy(e);
    e = NULL;
    CU_ASSERT(bt_graph_set_recompute(rec->graph, -1, 0) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_create(rec->graph, &p, &e) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_memory(e, 1, &without) == BT_OK);
    bt_engine_destroy(e);
    CU_ASSERT(with.activations < without.activations);
    bt_model_destroy(rec);
}

/* A split backward's W stash may reuse its node's output space only if nothing reads that value
 * after the node's B. The recomputation before W reruns the recomputed nodes' forward from their
 * inputs: stage 0 of balance {4, 5} keeps fc1 (sent to skip) and recomputes drop1 from it, so
 * fc1's stash must not overwrite fc1 (it did, and zb-h1 with every layer recomputed then trained
 * fc2 on a dropout of fc1's gradient). Without recomputation the stash stays in place. */
static void test_stash_not_over_recompute_input(void)
{
    for (int on = 0; on <= 1; on++) {
        const char *all[] = {"train.recompute=stage"};
        bt_model *m = load(all, on);
        bt_plan *plan = NULL;
        int first[] = {0, 4, 9};
        CU_ASSERT_FATAL(bt_plan_from_cuts(m->graph, 2, first, &plan) == BT_OK);
        bt_memory_params mp;
        bt_memory_params_init(&mp);
        mp.microbatch_size = BATCH_N / 4;
        mp.split_backward = 1;
        int n_nodes = plan->n_stage_nodes[0], n_values = m->graph->n_values;
        int *value_offset = calloc((size_t)n_values, sizeof *value_offset);
        int *grad_offset = calloc((size_t)n_values, sizeof *grad_offset);
        size_t *saved_offset = calloc((size_t)n_nodes, sizeof *saved_offset);
        size_t *wgrad_offset = calloc((size_t)n_nodes, sizeof *wgrad_offset);
        bt_stage_layout layout = {value_offset, grad_offset, saved_offset, wgrad_offset};
        bt_stage_memory sm;
        bt_memory_stage(m->graph, plan, &mp, 0, &sm, &layout);
        const bt_node *fc1 = &m->graph->nodes[plan->first_node[0]]; /* fc1, its relu fused */
        CU_ASSERT(m->graph->layers[fc1->layer].recompute == on);
        CU_ASSERT(bt_memory_node_recomputed(m->graph, plan, &mp, 0, plan->first_node[0]) == 0);
        CU_ASSERT_FATAL(wgrad_offset[0] != BT_MEMORY_NO_WGRAD);
        CU_ASSERT((wgrad_offset[0] == (size_t)value_offset[fc1->out]) == !on);
        free(value_offset), free(grad_offset), free(saved_offset), free(wgrad_offset);
        bt_plan_destroy(plan);
        bt_model_destroy(m);
    }
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"bit-identical with dropout, 1-3 stages", test_bit_identical},
        {"zbv: bit-identical with dropout, 2 and 3 devices", test_zbv_bit_identical},
        {"activation memory drops by the recomputed bytes", test_memory_drop},
        {"loader keys and errors", test_loader},
        {"with zb-h1's split backward: less activation memory", test_with_split_backward},
        {"zb-h1: no W stash over a value the recomputation reads", test_stash_not_over_recompute_input},
        {NULL, NULL},
    };
    return bt_test_main("recompute", cases);
}
