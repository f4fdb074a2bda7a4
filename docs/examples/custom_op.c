/* docs/examples/custom_op.c: using baton from C. Registers a custom op, `example.swish`
 * (y = x * sigmoid(x)), builds a small regression graph with it through the C API, trains it, then
 * loads the same kind of model from YAML, where the custom op is usable by name too.
 *
 * Build against an installed baton:
 *   cc -std=c11 custom_op.c $(pkg-config --cflags --libs baton) -lm -o custom_op
 * It exits 0 when both models learned (final loss below a third of the first). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <baton.h>

/* ---- the op: shape rule, forward, backward ---------------------------------------------------- */

static bt_status swish_infer(bt_infer_ctx *ctx)
{
    /* elementwise: output shape and dtype are the input's */
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), bt_infer_input_dtype(ctx, 0));
}

static bt_status swish_forward(const bt_op_call *call)
{
    if (call->in[0].dtype != BT_F32) return bt_op_error(BT_ERR_UNSUPPORTED, "example.swish: f32 only");
    const float *x = call->in[0].data;
    float *y = call->out->data;
    int64_t n = bt_tensor_numel(&call->in[0]);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
    return BT_OK;
}

static bt_status swish_backward(const bt_op_call *call)
{
    if (!call->in_grad[0].data) return BT_OK;
    const float *x = call->in[0].data, *dy = call->out_grad->data;
    float *dx = call->in_grad[0].data;
    int64_t n = bt_tensor_numel(&call->in[0]);
    for (int64_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + expf(-x[i]));
        dx[i] += dy[i] * (s + x[i] * s * (1.0f - s)); /* backward adds into the input gradient */
    }
    return BT_OK;
}

/* ---- data: y = sin(x0) + 0.5 * x1 * x2 ------------------------------------------------------- */

#define BATCH 64

static void make_batch(float *x, float *y, unsigned seed)
{
    srand(seed);
    for (int i = 0; i < BATCH; i++) {
        for (int k = 0; k < 4; k++) x[i * 4 + k] = (float)rand() / RAND_MAX * 2 - 1;
        y[i] = sinf(2 * x[i * 4]) + 0.5f * x[i * 4 + 1] * x[i * 4 + 2];
    }
}

static int check(bt_status st, const char *what)
{
    if (st != BT_OK) fprintf(stderr, "%s: %s\n", what, bt_last_error());
    return st == BT_OK;
}

static int train(const bt_graph *graph, const char *label)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.batch = BATCH;
    p.parallel.devices = "cpu:0,cpu:1"; /* two pipeline stages */
    p.parallel.microbatches = 4;
    p.optimizer.lr = 3e-3;
    bt_engine *engine = NULL;
    if (!check(bt_engine_create(graph, &p, &engine), "bt_engine_create")) return 0;
    float x[BATCH * 4], y[BATCH];
    double first = 0, last = 0;
    for (int step = 0; step < 300; step++) {
        make_batch(x, y, (unsigned)step);
        bt_feed feeds[] = {{"x", x, BT_F32}, {"y", y, BT_F32}};
        bt_step_result r;
        if (!check(bt_engine_train_step(engine, feeds, 2, &r), "bt_engine_train_step")) {
            bt_engine_destroy(engine);
            return 0;
        }
        if (step == 0) first = r.loss;
        last = r.loss;
    }
    bt_engine_destroy(engine);
    printf("%s: loss %.4f -> %.4f\n", label, first, last);
    return last < first / 3;
}

static const char model_yaml[] =
    "format: 1\n"
    "name: swish-regression\n"
    "inputs:\n"
    "  x: {shape: [4]}\n"
    "  y: {shape: [1]}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 32}, act: example.swish}\n"
    "  - {name: fc2, op: linear, args: {out: 32}}\n"
    "  - {name: sw, op: example.swish}\n"
    "  - {name: out, op: linear, args: {out: 1}}\n"
    "  - {name: loss, op: mse, from: [out, y]}\n"
    "train: {batch: 64}\n";

int main(void)
{
    const bt_op_def swish = {
        .name = "example.swish",
        .min_inputs = 1,
        .max_inputs = 1,
        .infer = swish_infer,
        .cpu_forward = swish_forward,
        .cpu_backward = swish_backward,
        .help = "x * sigmoid(x)",
    };
    if (!check(bt_op_register(&swish), "bt_op_register")) return 1;

    /* the graph through the C API */
    bt_graph *g = NULL;
    bt_args *args = NULL;
    int64_t x_dims[] = {4}, y_dims[] = {1};
    const char *loss_inputs[] = {"out", "y"};
    bt_layer_desc d;
    int ok = check(bt_graph_create(&g), "bt_graph_create") && check(bt_args_create(&args), "bt_args_create") &&
             check(bt_graph_add_input(g, "x", 1, x_dims, BT_F32), "input x") &&
             check(bt_graph_add_input(g, "y", 1, y_dims, BT_F32), "input y");
    bt_args_set_int(args, "out", 32);
    bt_layer_desc_init(&d), d.name = "fc1", d.op = "linear", d.args = args, d.act = "example.swish";
    ok = ok && check(bt_graph_add_layer(g, &d), "fc1");
    bt_layer_desc_init(&d), d.name = "fc2", d.op = "linear", d.args = args;
    ok = ok && check(bt_graph_add_layer(g, &d), "fc2");
    bt_layer_desc_init(&d), d.name = "sw", d.op = "example.swish";
    ok = ok && check(bt_graph_add_layer(g, &d), "sw");
    bt_args_set_int(args, "out", 1);
    bt_layer_desc_init(&d), d.name = "out", d.op = "linear", d.args = args;
    ok = ok && check(bt_graph_add_layer(g, &d), "out");
    bt_layer_desc_init(&d), d.name = "loss", d.op = "mse", d.inputs = loss_inputs, d.n_inputs = 2;
    ok = ok && check(bt_graph_add_layer(g, &d), "loss");
    bt_args_destroy(args);
    ok = ok && train(g, "C API graph");
    bt_graph_destroy(g);

    /* the same op from YAML */
    bt_model *model = NULL;
    ok = ok && check(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "swish.yaml", NULL, 0, &model),
                     "bt_model_load_string");
    ok = ok && train(model->graph, "YAML model");
    bt_model_destroy(model);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
