/* bench/bench_graphs.h: the models the benchmarks build through the C API. Each program defines
 * die(what), which prints the message with bt_last_error() and exits, before including this. */
#ifndef BT_BENCH_GRAPHS_H
#define BT_BENCH_GRAPHS_H

#include <stdio.h>

#include "baton.h"

/* in -> hidden x n_hidden (relu) -> 10 -> cross-entropy; inputs "image" [in] and "label". */
static bt_graph *bench_dense_graph(int64_t in, int64_t hidden, int n_hidden)
{
    bt_graph *g;
    bt_args *a;
    int64_t dims[] = {in};
    if (bt_graph_create(&g) || bt_args_create(&a)) die("graph");
    if (bt_graph_add_input(g, "image", 1, dims, BT_F32) || bt_graph_add_input(g, "label", 0, NULL, BT_I32))
        die("inputs");
    for (int i = 0; i <= n_hidden; i++) {
        char name[16];
        snprintf(name, sizeof name, i < n_hidden ? "fc%d" : "head", i + 1);
        bt_layer_desc d;
        bt_layer_desc_init(&d);
        if (bt_args_set_int(a, "out", i < n_hidden ? hidden : 10)) die("args");
        d.name = name, d.op = "linear", d.args = a, d.act = i < n_hidden ? "relu" : NULL;
        if (bt_graph_add_layer(g, &d)) die(name);
    }
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc d;
    bt_layer_desc_init(&d);
    d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    if (bt_graph_add_layer(g, &d)) die("loss");
    bt_args_destroy(a);
    return g;
}

#endif
