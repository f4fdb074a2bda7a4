/* tests/test_round_skip.c: mixed precision skips the roundings that cannot change a bit (op.h's
 * lowp_exact, src/exec/worker_nodes.c). The reference is the same run with every value rounded
 * (BATON_ROUND_SKIP=0):
 *   - each built-in op's answer: relu, flatten and reshape exact both ways; maxpool2d's forward
 *     always, its backward only where windows do not overlap; conv2d's forward on the CPU (it
 *     rounds its own output), not on CUDA, never its backward; ops that compute (linear, gelu,
 *     dropout, avgpool2d) never;
 *   - which roundings a fashion-cnn-like graph skips (conv with fused relu, relu as its own node,
 *     maxpool with and without overlap, reshape, flatten, a value read by two layers, linear),
 *     against the list made by hand from the rules: an output its op writes exact, a gradient whose
 *     only consumer is an exact node of the same stage;
 *   - whole training runs (three AdamW steps) of that graph under bf16 and f16, one stage and two
 *     pipelined stages (the cut puts a value's only consumer on the other stage), with conv2d
 *     forced onto each CPU path (im2col, oneDNN: each rounds its own output), are bit for bit the
 *     runs that round everything: losses and every weight;
 *   - the same on cuda:0 where one opens (a GPU, or the CUDA emulator build: check.sh's emu job);
 *   - f32 skips nothing, and a BATON_ROUND_SKIP other than 0 or 1 is refused naming it. */
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"
#include "cpu/conv_onednn.h"
#include "exec/exec_internal.h"

#define C0 2
#define H0 8
#define CLS 4
#define NB 8

/* x [2, 8, 8] -> c1 conv2d(4, k3 p1, act relu: fused) [4, 8, 8] -> p1 maxpool2d k2 [4, 4, 4]
 * -> c2 conv2d(6, k3 p1) [6, 4, 4] -> r2 relu [6, 4, 4] -> p2 maxpool2d k3 s2 p1 (overlapping)
 * [6, 2, 2] -> r3 relu -> rs reshape [6, 4] -> fl flatten [24] -> fc linear(24); rf relu(fl);
 * sum add(fc, rf) -> head linear(4) -> loss cross_entropy. fl is read by fc and rf (exact: a
 * gradient added from two consumers is not). Layer i is node i but for the fused relu, which is
 * c1's own. */
static bt_graph *cnn_graph(void)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    const int64_t x_dims[3] = {C0, H0, H0};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 3, x_dims, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    bt_layer_desc d;
#define LAYER(nm, opname, actname, setup)                                    \
    do {                                                                     \
        CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);                        \
        setup;                                                               \
        bt_layer_desc_init(&d), d.name = nm, d.op = opname, d.act = actname; \
        d.args = a;                                                          \
        CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);                 \
        bt_args_destroy(a);                                                  \
    } while (0)
    LAYER("c1", "conv2d", "relu", (bt_args_set_int(a, "out", 4), bt_args_set_int(a, "kernel", 3),
                                   bt_args_set_int(a, "padding", 1)));
    LAYER("p1", "maxpool2d", NULL, bt_args_set_int(a, "kernel", 2));
    LAYER("c2", "conv2d", NULL, (bt_args_set_int(a, "out", 6), bt_args_set_int(a, "kernel", 3),
                                 bt_args_set_int(a, "padding", 1)));
    LAYER("r2", "relu", NULL, (void)0);
    LAYER("p2", "maxpool2d", NULL, (bt_args_set_int(a, "kernel", 3), bt_args_set_int(a, "stride", 2),
                                    bt_args_set_int(a, "padding", 1)));
    LAYER("r3", "relu", NULL, (void)0);
    static const int64_t rs_shape[2] = {6, -1};
    LAYER("rs", "reshape", NULL, bt_args_set_ints(a, "shape", 2, rs_shape));
    LAYER("fl", "flatten", NULL, (void)0);
    LAYER("fc", "linear", NULL, bt_args_set_int(a, "out", 24));
    const char *fl_in[] = {"fl"};
    bt_layer_desc_init(&d), d.name = "rf", d.op = "relu", d.inputs = fl_in, d.n_inputs = 1;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    const char *sum_in[] = {"fc", "rf"};
    bt_layer_desc_init(&d), d.name = "sum", d.op = "add", d.inputs = sum_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    LAYER("head", "linear", NULL, bt_args_set_int(a, "out", CLS));
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
#undef LAYER
    return g;
}

#define N_LAYERS 13

/* By hand from the rules (OUT: the op writes its output exact; GRAD: the output's gradient is
 * written by its only consumer, exact in backward, on the same stage). */
static const unsigned char expected_one_stage[N_LAYERS] = {
    /* c1: conv rounds its own output on the CPU; its only consumer p1 has windows 2x2 stride 2 */
    BT_EXACT_OUT | BT_EXACT_GRAD,
    /* p1: its consumer c2 is a conv (whose input gradient is a sum) */ BT_EXACT_OUT,
    /* c2: its consumer is the relu r2 */ BT_EXACT_OUT | BT_EXACT_GRAD,
    /* r2: its consumer p2 overlaps (k3 s2) */ BT_EXACT_OUT,
    /* p2: consumer r3 */ BT_EXACT_OUT | BT_EXACT_GRAD,
    /* r3: consumer rs */ BT_EXACT_OUT | BT_EXACT_GRAD,
    /* rs: consumer fl */ BT_EXACT_OUT | BT_EXACT_GRAD,
    /* fl: read by fc and rf */ BT_EXACT_OUT,
    /* fc */ 0,
    /* rf: its consumer sum is an add */ BT_EXACT_OUT,
    /* sum: add computes; consumer head */ 0,
    /* head */ 0,
    /* loss */ 0};

typedef struct run_out {
    double loss[3];
    int n;
    float *params[16];
    size_t sizes[16];
} run_out;

static void params_for(bt_engine_params *p, int stages, bt_dtype precision)
{
    bt_engine_params_init(p);
    p->parallel.devices = stages == 2 ? "cpu:0,cpu:1" : "cpu:0";
    p->parallel.stages = stages;
    p->parallel.microbatches = 2;
    p->parallel.schedule = BT_SCHEDULE_1F1B;
    p->parallel.partition = BT_PARTITION_BALANCE;
    p->parallel.n_balance = stages;
    if (stages == 2) {
        /* stage 0: c1 p1 c2 r2 p2; stage 1: r3 ... (p2's only consumer is on the other stage) */
        p->parallel.balance[0] = 5;
        p->parallel.balance[1] = N_LAYERS - 5;
    } else {
        p->parallel.balance[0] = N_LAYERS;
    }
    p->batch = NB;
    p->seed = 7;
    p->optimizer.kind = BT_OPT_ADAMW;
    p->optimizer.lr = 0.01;
    p->optimizer.weight_decay = 0.01;
    p->precision = precision;
    p->watchdog_s = 20;
}

static void make_feeds(float *x, int32_t *label, bt_feed *feeds, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < NB * C0 * H0 * H0; i++) x[i] = (float)rand() / RAND_MAX * 4 - 2;
    for (int i = 0; i < NB; i++) label[i] = rand() % CLS;
    feeds[0] = (bt_feed){"x", x, BT_F32};
    feeds[1] = (bt_feed){"label", label, BT_I32};
}

/* Three steps with BATON_ROUND_SKIP=skip; with expected non-NULL, stage 0's plan is checked
 * against it first. */
static void train(const bt_graph *g, const bt_engine_params *p, int skip, run_out *r,
                  const unsigned char *expected)
{
    setenv("BATON_ROUND_SKIP", skip ? "1" : "0", 1);
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(g, p, &e);
    if (st != BT_OK) printf("\n  engine_create: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    int skipped = 0;
    for (int s = 0; s < e->stages; s++)
        for (int k = 0; k < e->stage[s].n_nodes; k++) skipped += e->stage[s].exact[k] != 0;
    CU_ASSERT(skip ? skipped > 0 : skipped == 0);
    if (expected)
        for (int k = 0; k < e->stage[0].n_nodes; k++) {
            if (e->stage[0].exact[k] != expected[k])
                printf("\n  node %d: exact %d, expected %d\n", k, e->stage[0].exact[k], expected[k]);
            CU_ASSERT(e->stage[0].exact[k] == expected[k]);
        }
    for (int step = 0; step < 3; step++) {
        float x[NB * C0 * H0 * H0];
        int32_t label[NB];
        bt_feed feeds[2];
        make_feeds(x, label, feeds, 200 + (unsigned)step);
        bt_step_result res;
        st = bt_engine_train_step(e, feeds, 2, &res);
        if (st != BT_OK) printf("\n  train_step: %s\n", bt_last_error());
        CU_ASSERT_FATAL(st == BT_OK);
        r->loss[step] = res.loss;
    }
    r->n = bt_test_read_params(e, g, r->params, r->sizes, (int)(sizeof r->params / sizeof r->params[0]));
    bt_engine_destroy(e);
    unsetenv("BATON_ROUND_SKIP");
}

static int same_run(const run_out *a, const run_out *b)
{
    int same = memcmp(a->loss, b->loss, sizeof a->loss) == 0;
    for (int i = 0; i < a->n; i++) same &= memcmp(a->params[i], b->params[i], a->sizes[i]) == 0;
    return same;
}

static void free_run(run_out *r)
{
    for (int i = 0; i < r->n; i++) free(r->params[i]);
}

static void check_identical_on(bt_dtype precision, int stages, const char *devices)
{
    bt_graph *g = cnn_graph();
    bt_engine_params p;
    params_for(&p, stages, precision);
    if (devices) p.parallel.devices = devices;
    run_out rounded, skipped;
    train(g, &p, 0, &rounded, NULL);
    train(g, &p, 1, &skipped, stages == 1 && !devices ? expected_one_stage : NULL);
    CU_ASSERT(rounded.loss[2] < rounded.loss[0] + 1.0); /* a real run, not NaN */
    int same = same_run(&rounded, &skipped);
    if (!same)
        printf("\n  %s, %d stage(s): losses %.9g %.9g %.9g (rounded) vs %.9g %.9g %.9g (skipped)\n",
               precision == BT_BF16 ? "bf16" : "f16", stages, rounded.loss[0], rounded.loss[1],
               rounded.loss[2], skipped.loss[0], skipped.loss[1], skipped.loss[2]);
    CU_ASSERT(same);
    free_run(&rounded);
    free_run(&skipped);
    bt_graph_destroy(g);
}

/* On the CPU, once per conv2d path (each rounds its output itself: ops/conv_tmpl.h's im2col,
 * cpu/conv_onednn.c's oneDNN where the build has it). */
static void check_identical(bt_dtype precision, int stages)
{
    for (int path = BT_CONV_IM2COL; path < BT_CONV_PATHS; path++) {
        if (path == BT_CONV_ONEDNN && !bt_cpu_conv_onednn_available()) continue;
        bt_cpu_conv_force(path);
        check_identical_on(precision, stages, NULL);
    }
    bt_cpu_conv_force(-2);
}

static void test_bf16_one_stage(void) { check_identical(BT_BF16, 1); }
static void test_f16_one_stage(void) { check_identical(BT_F16, 1); }
static void test_bf16_two_stages(void) { check_identical(BT_BF16, 2); }
static void test_f16_two_stages(void) { check_identical(BT_F16, 2); }

/* The CUDA kernels of relu, maxpool2d, flatten and reshape keep the same promises: on cuda:0
 * (a GPU, or the emulator build's), skipping is rounding everything there too. Where no cuda:0
 * opens, says so and checks nothing, unless a GPU was promised. */
static void test_cuda(void)
{
    bt_graph *g = cnn_graph();
    bt_engine_params p;
    params_for(&p, 1, BT_BF16);
    p.parallel.devices = "cuda:0";
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(g, &p, &e);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
    if (st != BT_OK) {
        /* a GPU is promised where BT_REQUIRE_GPU is set (scripts/gpu-check.sh) and in the
         * emulator's runs (BT_EMU_MODE, check.sh's emu job) */
        int required = getenv("BT_REQUIRE_GPU") || getenv("BT_EMU_MODE");
        printf("\n  %s: no cuda:0 here (%s)\n", required ? "FAILED" : "SKIPPED", bt_last_error());
        CU_ASSERT(!required);
        return;
    }
    check_identical_on(BT_BF16, 1, "cuda:0");
    check_identical_on(BT_F16, 1, "cuda:0");
}

/* On two stages p2's gradient comes back from stage 1 (r3 is there): not skipped, while stage 1
 * still skips r3's and rs's. */
static void test_two_stage_plan(void)
{
    bt_graph *g = cnn_graph();
    bt_engine_params p;
    params_for(&p, 2, BT_BF16);
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    CU_ASSERT_FATAL(e->stage[0].n_nodes == 5);
    for (int k = 0; k < 4; k++) CU_ASSERT(e->stage[0].exact[k] == expected_one_stage[k]);
    CU_ASSERT(e->stage[0].exact[4] == BT_EXACT_OUT);
    for (int k = 0; k < e->stage[1].n_nodes; k++) CU_ASSERT(e->stage[1].exact[k] == expected_one_stage[5 + k]);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static void test_f32_and_bad_switch(void)
{
    bt_graph *g = cnn_graph();
    bt_engine_params p;
    params_for(&p, 1, BT_F32);
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    for (int k = 0; k < e->stage[0].n_nodes; k++) CU_ASSERT(e->stage[0].exact[k] == 0);
    bt_engine_destroy(e);
    e = NULL;
    p.precision = BT_BF16;
    setenv("BATON_ROUND_SKIP", "yes", 1);
    CU_ASSERT(bt_engine_create(g, &p, &e) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "BATON_ROUND_SKIP=yes") != NULL);
    CU_ASSERT(e == NULL);
    unsetenv("BATON_ROUND_SKIP");
    bt_graph_destroy(g);
}

/* The answer of one built-in op for a single-input layer of args (key=int pairs). */
static int op_answer_on(const char *backend, const char *op, const int64_t *in_dims, int ndim,
                        const char *k1, int64_t v1, const char *k2, int64_t v2, bt_dtype precision,
                        int pass)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", ndim, in_dims, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    if (k1) bt_args_set_int(a, k1, v1);
    if (k2) bt_args_set_int(a, k2, v2);
    bt_layer_desc d;
    bt_layer_desc_init(&d), d.name = "l", d.op = op, d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    const bt_node *n = &g->nodes[0];
    int r = n->op->lowp_exact ? n->op->lowp_exact(n->config, precision, pass, backend) : 0;
    bt_args_destroy(a);
    bt_graph_destroy(g);
    return r;
}

static int op_answer(const char *op, const int64_t *in_dims, int ndim, const char *k1, int64_t v1,
                     const char *k2, int64_t v2, bt_dtype precision, int pass)
{
    return op_answer_on("cpu", op, in_dims, ndim, k1, v1, k2, v2, precision, pass);
}

static void test_op_answers(void)
{
    static const int64_t img[3] = {2, 6, 6}, vec[1] = {8};
    for (int pass = BT_LOWP_FORWARD; pass <= BT_LOWP_BACKWARD; pass++)
        for (bt_dtype pr = BT_BF16; pr != BT_F32; pr = pr == BT_BF16 ? BT_F16 : BT_F32) {
            CU_ASSERT(op_answer("relu", vec, 1, NULL, 0, NULL, 0, pr, pass) == 1);
            CU_ASSERT(op_answer("flatten", img, 3, NULL, 0, NULL, 0, pr, pass) == 1);
            CU_ASSERT(op_answer("maxpool2d", img, 3, "kernel", 2, NULL, 0, pr, pass) == 1);
            CU_ASSERT(op_answer("maxpool2d", img, 3, "kernel", 2, "stride", 3, pr, pass) == 1);
            /* windows overlap: two output gradients add into one input element */
            CU_ASSERT(op_answer("maxpool2d", img, 3, "kernel", 3, "stride", 2, pr, pass) ==
                      (pass == BT_LOWP_FORWARD));
            CU_ASSERT(op_answer("maxpool2d", img, 3, "kernel", 2, "stride", 1, pr, pass) ==
                      (pass == BT_LOWP_FORWARD));
            CU_ASSERT(op_answer("avgpool2d", img, 3, "kernel", 2, NULL, 0, pr, pass) == 0);
            CU_ASSERT(op_answer("dropout", vec, 1, NULL, 0, NULL, 0, pr, pass) == 0);
            CU_ASSERT(op_answer("gelu", vec, 1, NULL, 0, NULL, 0, pr, pass) == 0);
            CU_ASSERT(op_answer("linear", vec, 1, "out", 4, NULL, 0, pr, pass) == 0);
            /* the CPU forward rounds its own output (either path); its backward sums */
            CU_ASSERT(op_answer("conv2d", img, 3, "out", 4, "kernel", 3, pr, pass) == (pass == BT_LOWP_FORWARD));
        }
    /* cuDNN's conv leaves rounding to the executor; f32 is never asked, but answers no */
    CU_ASSERT(op_answer_on("cuda", "conv2d", img, 3, "out", 4, "kernel", 3, BT_BF16, BT_LOWP_FORWARD) == 0);
    CU_ASSERT(op_answer_on("cuda", "maxpool2d", img, 3, "kernel", 2, NULL, 0, BT_BF16, BT_LOWP_BACKWARD) == 1);
    CU_ASSERT(op_answer("conv2d", img, 3, "out", 4, "kernel", 3, BT_F32, BT_LOWP_FORWARD) == 0);
    /* reshape takes a list argument */
    bt_graph *g = NULL;
    bt_args *a = NULL;
    static const int64_t shape[2] = {4, -1};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, vec, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_ints(a, "shape", 2, shape);
    bt_layer_desc d;
    bt_layer_desc_init(&d), d.name = "r", d.op = "reshape", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    const bt_node *n = &g->nodes[0];
    CU_ASSERT(n->op->lowp_exact && n->op->lowp_exact(n->config, BT_BF16, BT_LOWP_FORWARD, "cpu"));
    CU_ASSERT(n->op->lowp_exact && n->op->lowp_exact(n->config, BT_BF16, BT_LOWP_BACKWARD, "cuda"));
    bt_args_destroy(a);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"each op's lowp_exact", test_op_answers},
        {"two stages: a gradient that comes back is rounded", test_two_stage_plan},
        {"f32 skips nothing; a bad BATON_ROUND_SKIP is refused", test_f32_and_bad_switch},
        {"bf16, one stage: skipping = rounding everything", test_bf16_one_stage},
        {"f16, one stage: skipping = rounding everything", test_f16_one_stage},
        {"bf16, two stages: skipping = rounding everything", test_bf16_two_stages},
        {"f16, two stages: skipping = rounding everything", test_f16_two_stages},
        {"bf16 and f16 on cuda:0: skipping = rounding everything", test_cuda},
        {NULL, NULL}};
    return bt_test_main("round_skip", cases);
}
