/* graph/lowp_exact.c: the mixed-precision roundings an op's lowp_exact makes unnecessary (see
 * lowp_exact.h). Pure functions of the graph; nothing is cached. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/lowp_exact.h"

bt_status bt_lowp_skip_enabled(int *on)
{
    const char *v = getenv("BATON_ROUND_SKIP");
    if (!v || !*v || strcmp(v, "1") == 0) *on = 1;
    else if (strcmp(v, "0") == 0) *on = 0;
    else
        return bt_error(BT_ERR_INVALID_ARG, "BATON_ROUND_SKIP=%s: expected 1 (skip the mixed-precision "
                        "roundings that cannot change a bit, the default) or 0 (round every value)", v);
    return BT_OK;
}

static int op_says(const bt_graph *g, int node, bt_dtype precision, int pass, const char *backend)
{
    const bt_node *n = &g->nodes[node];
    if (precision != BT_BF16 && precision != BT_F16) return 0;
    return n->op->lowp_exact && n->op->lowp_exact(n->config, precision, pass, backend) != 0;
}

int bt_lowp_output_exact(const bt_graph *g, int node, bt_dtype precision, const char *backend)
{
    const bt_node *n = &g->nodes[node];
    const int loss = bt_graph_output_value(g);
    if (n->out == loss) return 0;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] == loss) return 0;
    return op_says(g, node, precision, BT_LOWP_FORWARD, backend);
}

int bt_lowp_grad_writer(const bt_graph *g, int v, bt_dtype precision, const char *backend)
{
    const int loss = bt_graph_output_value(g);
    if (v == loss || g->values[v].dtype == BT_I32) return -1;
    int consumer = -1, input = -1, uses = 0;
    for (int j = 0; j < g->n_nodes; j++)
        for (int i = 0; i < g->nodes[j].n_in; i++)
            if (g->nodes[j].in[i] == v) consumer = j, input = i, uses++;
    if (uses != 1) return -1;
    const bt_node *c = &g->nodes[consumer];
    if (c->out == loss || (c->no_grad_mask & (1u << input))) return -1;
    return op_says(g, consumer, precision, BT_LOWP_BACKWARD, backend) ? consumer : -1;
}
