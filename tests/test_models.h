/* tests/test_models.h: graphs several test programs build through the C API. */
#ifndef BT_TEST_MODELS_H
#define BT_TEST_MODELS_H

#include "baton.h"
#include "bt_test.h"

/* x[in] -> fc1(tanh) -> fc2(relu) -> ln -> skip = ln + fc1 -> fc3(gelu) -> head[classes]
 * -> loss(head, label): seven layers with a residual that skips stages when fc1 is cut off. */
static inline bt_graph *bt_test_residual_graph(int64_t in, int64_t hidden, int64_t classes)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, &in, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_layer_desc d;
    const char *skip_in[] = {"ln", "fc1"}, *loss_in[] = {"head", "label"};
    bt_args_set_int(a, "out", hidden);
    bt_layer_desc_init(&d), d.name = "fc1", d.op = "linear", d.args = a, d.act = "tanh";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc2", d.op = "linear", d.args = a, d.act = "relu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "ln", d.op = "layernorm";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "skip", d.op = "add", d.inputs = skip_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc3", d.op = "linear", d.args = a, d.act = "gelu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_set_int(a, "out", classes);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    return g;
}

#endif
