/* tests/test_fused.c: a layer's `act: relu` on linear and conv2d is fused into the op (one node,
 * the relu applied to the output in the same pass, its backward masking the output gradient in
 * place; ops/op_configs.h). The reference is the unfused graph: the same layers with the relu as
 * a layer of its own. Checked:
 *   - the fused graph has one node per such layer and needs less activation memory;
 *   - training runs (f32, bf16; one stage, and two stages with ZB-H1, whose W reads the gradient
 *     B masked) give the unfused run's losses and parameters bit for bit: relu(z) > 0 exactly
 *     where z > 0, and the masked gradient 0 + (y > 0 ? g : 0) is relu's own backward into a
 *     zeroed buffer;
 *   - a linear and a conv2d with act: relu, alone, against their unfused pair through the op
 *     kernels (the op-level check, any float rounding would show; it is exact);
 *   - act: with anything but relu in args is refused, naming it. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "engine_runs.h"

static const chain_layer fused_mlp[] = {
    {"fc1", "linear", "relu", 32},
    {"fc2", "linear", "relu", 32},
    {"fc3", "linear", "tanh", 32},
};
static const chain_layer unfused_mlp[] = {
    {"fc1", "linear", NULL, 32}, {"r1", "relu", NULL, 0},
    {"fc2", "linear", NULL, 32}, {"r2", "relu", NULL, 0},
    {"fc3", "linear", "tanh", 32},
};

/* x (IN = 8 = 2 x 2 x 2) -> reshape [2, 2, 2] -> conv (4 channels, 3x3, padding 1) [+ relu]
 * -> pointwise conv (4) [+ relu] -> flatten -> head -> loss. */
static bt_graph *conv_graph(int fused)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in = IN, shape[3] = {2, 2, 2};
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc d;
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, &in, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_ints(a, "shape", 3, shape);
    bt_layer_desc_init(&d), d.name = "img", d.op = "reshape", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    const char *names[2] = {"c1", "c2"};
    const int64_t kernel[2] = {3, 1}, pad[2] = {1, 0};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
        bt_args_set_int(a, "out", 4);
        bt_args_set_ints(a, "kernel", 1, &kernel[i]);
        bt_args_set_ints(a, "padding", 1, &pad[i]);
        bt_layer_desc_init(&d), d.name = names[i], d.op = "conv2d", d.args = a;
        if (fused) d.act = "relu";
        CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
        bt_args_destroy(a);
        if (!fused) {
            char rname[8];
            snprintf(rname, sizeof rname, "r%d", i);
            bt_layer_desc_init(&d), d.name = rname, d.op = "relu";
            CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
        }
    }
    bt_layer_desc_init(&d), d.name = "flat", d.op = "flatten";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_int(a, "out", CLASSES);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    return g;
}

static size_t activation_bytes(const bt_graph *g)
{
    bt_engine_params p;
    bt_engine *e = NULL;
    bt_memory_stats m;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    p.parallel.partition = BT_PARTITION_UNIFORM;
    if (bt_engine_create(g, &p, &e) != BT_OK) printf("\n  engine_create: %s", bt_last_error());
    CU_ASSERT_FATAL(e != NULL);
    CU_ASSERT_FATAL(bt_engine_memory(e, 0, &m) == BT_OK);
    bt_engine_destroy(e);
    return m.activations;
}

/* Trains both graphs under each setting and requires identical losses and parameters. */
static void compare_runs(const bt_graph *fused, const bt_graph *unfused, const char *what)
{
    static const struct {
        int stages, m;
        bt_schedule_kind kind;
        bt_dtype precision;
    } runs[] = {
        {1, 2, BT_SCHEDULE_1F1B, BT_F32},
        {2, 4, BT_SCHEDULE_ZB_H1, BT_F32},
        {1, 2, BT_SCHEDULE_1F1B, BT_BF16},
        {2, 4, BT_SCHEDULE_ZB_H1, BT_BF16},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        bt_engine_params p;
        run_result a, b;
        engine_params(&p, runs[i].stages, runs[i].m, runs[i].kind);
        p.parallel.partition = BT_PARTITION_UNIFORM;
        p.precision = runs[i].precision;
        run_three_steps(fused, &p, &a);
        run_three_steps(unfused, &p, &b);
        const int same = identical(&a, &b);
        printf("\n  %s, %d stage(s) %s %s: loss %.6f / %.6f, %s", what, runs[i].stages,
               runs[i].kind == BT_SCHEDULE_ZB_H1 ? "zb-h1" : "1f1b",
               runs[i].precision == BT_BF16 ? "bf16" : "f32", a.loss[2], b.loss[2],
               same ? "identical" : "DIFFERENT");
        CU_ASSERT(same);
        free_result(&a);
        free_result(&b);
    }
}

static void test_mlp_fused_equals_unfused(void)
{
    bt_graph *f = chain_graph(fused_mlp, 3), *u = chain_graph(unfused_mlp, 5);
    bt_layer_info info;
    CU_ASSERT_FATAL(bt_graph_layer(f, 0, &info) == BT_OK);
    CU_ASSERT_STRING_EQUAL(info.act, "relu");
    const size_t af = activation_bytes(f), au = activation_bytes(u);
    printf("\n  activation memory: fused %zu bytes, unfused %zu", af, au);
    CU_ASSERT(af < au);
    compare_runs(f, u, "mlp");
    bt_graph_destroy(f);
    bt_graph_destroy(u);
}

static void test_conv_fused_equals_unfused(void)
{
    bt_graph *f = conv_graph(1), *u = conv_graph(0);
    const size_t af = activation_bytes(f), au = activation_bytes(u);
    printf("\n  activation memory: fused %zu bytes, unfused %zu", af, au);
    CU_ASSERT(af < au);
    compare_runs(f, u, "conv");
    bt_graph_destroy(f);
    bt_graph_destroy(u);
}

static void test_act_arg_checked(void)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in = IN;
    bt_layer_desc d;
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, &in, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_int(a, "out", 4);
    bt_args_set_string(a, "act", "gelu");
    bt_layer_desc_init(&d), d.name = "fc", d.op = "linear", d.args = a;
    CU_ASSERT(bt_graph_add_layer(g, &d) != BT_OK);
    CU_ASSERT(strstr(bt_last_error(), "act must be \"relu\"") != NULL);
    bt_args_set_string(a, "act", "relu");
    d.act = "relu"; /* twice */
    CU_ASSERT(bt_graph_add_layer(g, &d) != BT_OK);
    CU_ASSERT(strstr(bt_last_error(), "both act") != NULL);
    d.act = NULL;
    CU_ASSERT(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    bt_graph_destroy(g);
}

int main(void)
{
    const bt_test_case cases[] = {
        {"linear act: relu fused = linear then relu, bit for bit", test_mlp_fused_equals_unfused},
        {"conv2d act: relu fused = conv2d then relu, bit for bit", test_conv_fused_equals_unfused},
        {"act in args: relu only, not twice", test_act_arg_checked},
        {NULL, NULL},
    };
    return bt_test_main("fused", cases);
}
