/* bench/bench_gpt.c: the fused attention op alone, never part of `make check` (`make bench`).
 *
 *   bench_gpt attention [--t T] [--c C] [--heads H] [--batch B] [--steps N] [--causal 0|1]
 *       Forward and backward of `attention` on x [B, T, 3C] through the engine (one cpu stage,
 *       one BLAS thread), followed by an `mse` against a zero target so there is a loss to
 *       differentiate; prints the median over N steps of one step in milliseconds as
 *       `baton_attention_ms M`. bench/torch_gpt.py --attention runs the same graph written in
 *       PyTorch (masked softmax(QK^T/sqrt(d))V, the same mse); bench/compare_gpt.sh alternates them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "core/util.h"

static int arg_int(int argc, char **argv, const char *name, int dflt)
{
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return atoi(argv[i + 1]);
    return dflt;
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "attention") != 0) {
        fprintf(stderr, "usage: bench_gpt attention [--t T] [--c C] [--heads H] [--batch B] [--steps N] [--causal 0|1]\n");
        return 2;
    }
    const int T = arg_int(argc, argv, "--t", 256), C = arg_int(argc, argv, "--c", 256);
    const int H = arg_int(argc, argv, "--heads", 4), B = arg_int(argc, argv, "--batch", 8);
    const int steps = arg_int(argc, argv, "--steps", 20), causal = arg_int(argc, argv, "--causal", 1);
    bt_graph *g = NULL;
    bt_args *a = NULL;
    bt_engine *e = NULL;
    int64_t xs[2] = {T, 3 * C}, ys[2] = {T, C};
    int rc = 1;
    if (bt_graph_create(&g) || bt_graph_add_input(g, "x", 2, xs, BT_F32) ||
        bt_graph_add_input(g, "target", 2, ys, BT_F32) || bt_args_create(&a))
        goto done;
    bt_args_set_int(a, "heads", H);
    bt_args_set_bool(a, "causal", causal);
    bt_layer_desc d;
    const char *att_in[] = {"x"}, *loss_in[] = {"attn", "target"};
    bt_layer_desc_init(&d), d.name = "attn", d.op = "attention", d.args = a, d.inputs = att_in, d.n_inputs = 1;
    if (bt_graph_add_layer(g, &d)) goto done;
    bt_layer_desc_init(&d), d.name = "loss", d.op = "mse", d.inputs = loss_in, d.n_inputs = 2;
    if (bt_graph_add_layer(g, &d)) goto done;
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.batch = B;
    p.threads = 1;
    if (bt_engine_create(g, &p, &e)) goto done;
    float *x = malloc((size_t)B * T * 3 * C * sizeof *x), *y = calloc((size_t)B * T * C, sizeof *y);
    double *ms = calloc((size_t)steps, sizeof *ms);
    uint64_t rng = 1;
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) x[i] = (float)((bt_rng_next(&rng) >> 11) * 0x1.0p-53) - 0.5f;
    bt_feed feeds[] = {{"x", x, BT_F32}, {"target", y, BT_F32}};
    bt_step_result r;
    for (int s = 0; s < 3; s++)
        if (bt_engine_compute_grads(e, feeds, 2, &r)) goto done;
    for (int s = 0; s < steps; s++) {
        double t0 = bt_now_ms();
        if (bt_engine_compute_grads(e, feeds, 2, &r)) goto done;
        ms[s] = bt_now_ms() - t0;
    }
    printf("attention T=%d C=%d heads=%d batch=%d causal=%d\nbaton_attention_ms %.3f\n", T, C, H, B, causal,
           bt_median(ms, steps));
    free(x), free(y), free(ms);
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_gpt: %s\n", bt_last_error());
    bt_engine_destroy(e);
    bt_args_destroy(a);
    bt_graph_destroy(g);
    return rc;
}
