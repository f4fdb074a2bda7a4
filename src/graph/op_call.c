/* graph/op_call.c: building one node's bt_op_call (see op_call.h). Pure: reads the graph and the
 * caller's pointers, touches no device. */
#include <string.h>

#include "graph/op_call.h"

static void value_tensor(bt_tensor *t, void *data, const bt_value *v, int64_t batch, bt_dtype dtype)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = v->dtype == BT_I32 ? BT_I32 : dtype;
    t->ndim = v->shape.ndim + 1;
    t->dim[0] = batch;
    for (int i = 0; i < v->shape.ndim; i++) t->dim[i + 1] = v->shape.dim[i];
}

static void param_tensor(bt_tensor *t, void *data, const bt_param *p, bt_dtype dtype)
{
    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = dtype;
    t->ndim = p->shape.ndim;
    for (int i = 0; i < p->shape.ndim; i++) t->dim[i] = p->shape.dim[i];
}

void bt_op_call_build(const bt_graph *g, int node, int64_t batch, bt_dtype dtype, int backward,
                      const bt_op_call_data *d, bt_op_call_tensors *t, bt_op_call *call)
{
    const bt_node *n = &g->nodes[node];
    memset(call, 0, sizeof *call);
    for (int i = 0; i < n->n_in; i++) value_tensor(&t->in[i], d->in[i], &g->values[n->in[i]], batch, dtype);
    value_tensor(&t->out, d->out, &g->values[n->out], batch, dtype);
    for (int j = 0; j < n->n_params; j++) {
        param_tensor(&t->param[j], d->param[j], &g->params[n->params[j]], dtype);
        param_tensor(&t->param_grad[j], d->param_grad[j], &g->params[n->params[j]], dtype);
    }
    call->batch = batch;
    call->n_in = n->n_in;
    call->in = t->in;
    call->out = &t->out;
    call->n_params = n->n_params;
    call->param = t->param;
    call->saved = d->saved;
    call->workspace = d->workspace;
    call->config = n->config;
    if (!backward) return;
    value_tensor(&t->out_grad, d->out_grad, &g->values[n->out], batch, dtype);
    for (int i = 0; i < n->n_in; i++) {
        t->in_grad[i] = t->in[i];
        t->in_grad[i].data = d->in_grad[i];
    }
    call->param_grad = t->param_grad;
    call->out_grad = &t->out_grad;
    call->in_grad = t->in_grad;
}
