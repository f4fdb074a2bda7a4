/* bench/bench_cpu.c: CPU benchmarks, never part of `make check`. Build with `make bench`.
 *
 *   bench_cpu mlp [--steps N] [--threads T]
 *       Trains the MLP 784-1024-1024-10 (batch 256, AdamW) on one cpu stage and prints its
 *       median step time, samples/s and achieved GFLOP/s beside the rate of the BLAS's own sgemm
 *       on the same GEMM shapes, measured in the same run with the same threads, and the ratio.
 *   bench_cpu pipeline [--steps N] [--microbatches M]
 *       The same MLP as 2 stages on cpu:0,cpu:1 (one BLAS thread each) against 1 stage on one
 *       thread, runs interleaved, and prints the speedup beside the schedule's ideal 2m/(m+1).
 *
 * Every figure is a median over interleaved repetitions; nothing is hard-coded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton.h"
#include "cpu/blas.h"

#define BATCH 256

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void die(const char *what)
{
    fprintf(stderr, "bench_cpu: %s: %s\n", what, bt_last_error());
    exit(1);
}

static bt_graph *mlp_graph(void)
{
    bt_graph *g;
    bt_args *a;
    int64_t dims[] = {784};
    if (bt_graph_create(&g) || bt_args_create(&a)) die("graph");
    if (bt_graph_add_input(g, "image", 1, dims, BT_F32) || bt_graph_add_input(g, "label", 0, NULL, BT_I32))
        die("inputs");
    const char *names[] = {"fc1", "fc2", "head"};
    const int outs[] = {1024, 1024, 10};
    for (int i = 0; i < 3; i++) {
        bt_layer_desc d;
        bt_layer_desc_init(&d);
        bt_args_set_int(a, "out", outs[i]);
        d.name = names[i], d.op = "linear", d.args = a, d.act = i < 2 ? "relu" : NULL;
        if (bt_graph_add_layer(g, &d)) die(names[i]);
    }
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc d;
    bt_layer_desc_init(&d);
    d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    if (bt_graph_add_layer(g, &d)) die("loss");
    bt_args_destroy(a);
    return g;
}

typedef struct bench_data {
    float *x;
    int32_t *y;
    bt_feed feeds[2];
} bench_data;

static void make_data(bench_data *d)
{
    d->x = malloc(sizeof(float) * BATCH * 784);
    d->y = malloc(sizeof(int32_t) * BATCH);
    srand(1);
    for (int i = 0; i < BATCH * 784; i++) d->x[i] = (float)rand() / RAND_MAX;
    for (int i = 0; i < BATCH; i++) d->y[i] = rand() % 10;
    d->feeds[0] = (bt_feed){"image", d->x, BT_F32};
    d->feeds[1] = (bt_feed){"label", d->y, BT_I32};
}

static bt_engine *make_engine(const bt_graph *g, const char *devices, int m, int threads)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.devices = devices;
    p.parallel.microbatches = m;
    p.parallel.partition = BT_PARTITION_PARAMS;
    p.batch = BATCH;
    p.threads = threads;
    bt_engine *e;
    if (bt_engine_create(g, &p, &e)) die("engine");
    return e;
}

static double step_ms(bt_engine *e, bench_data *d)
{
    bt_step_result r;
    if (bt_engine_train_step(e, d->feeds, 2, &r)) die("train step");
    return r.step_ms;
}

/* The GEMMs of one training step of the MLP, run through the same BLAS baton loads. */
static double sgemm_step_ms(float *a, float *b, float *c)
{
    const int dims[4] = {784, 1024, 1024, 10};
    double t0 = now_ms();
    for (int l = 0; l < 3; l++) {
        int in = dims[l], out = dims[l + 1];
        bt_sgemm(0, 1, BATCH, out, in, 1, a, in, b, in, 0, c, out);    /* Y = X W^T */
        bt_sgemm(0, 0, BATCH, in, out, 1, c, out, b, in, 0, a, in);    /* dX = dY W */
        bt_sgemm(1, 0, out, in, BATCH, 1, c, out, a, in, 0, b, in);    /* dW = dY^T X */
    }
    return now_ms() - t0;
}

static int bench_mlp(int steps, int threads)
{
    bt_graph *g = mlp_graph();
    bench_data d;
    make_data(&d);
    bt_engine *e = make_engine(g, "cpu:0", 1, threads);
    float *a = calloc((size_t)BATCH * 1024 * 4, sizeof(float));
    float *b = calloc((size_t)1024 * 1024, sizeof(float));
    float *c = calloc((size_t)BATCH * 1024 * 4, sizeof(float));
    for (int i = 0; i < 1024 * 1024; i++) b[i] = 1e-3f;
    double *tb = calloc((size_t)steps, sizeof(double)), *ts = calloc((size_t)steps, sizeof(double));
    for (int i = 0; i < 3; i++) step_ms(e, &d), sgemm_step_ms(a, b, c); /* warm-up */
    for (int i = 0; i < steps; i++) {
        tb[i] = step_ms(e, &d);
        bt_blas_set_threads(threads);
        ts[i] = sgemm_step_ms(a, b, c);
    }
    double flops = 0;
    const int dims[4] = {784, 1024, 1024, 10};
    for (int l = 0; l < 3; l++) flops += 3.0 * 2.0 * BATCH * dims[l] * dims[l + 1];
    double mb = median(tb, steps), ms = median(ts, steps);
    printf("blas: %s\n", bt_blas_describe());
    printf("mlp 784-1024-1024-10, batch %d, AdamW, %d thread%s, %d steps (medians)\n", BATCH, threads,
           threads == 1 ? "" : "s", steps);
    printf("  baton training step   %8.2f ms  %9.0f samples/s  %6.1f GFLOP/s\n", mb, BATCH * 1e3 / mb,
           flops / mb / 1e6);
    printf("  sgemm of those GEMMs  %8.2f ms  %26.1f GFLOP/s\n", ms, flops / ms / 1e6);
    printf("  baton / sgemm rate    %8.2f\n", ms / mb);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
    return 0;
}

static int bench_pipeline(int steps, int m)
{
    bt_graph *g = mlp_graph();
    bench_data d;
    make_data(&d);
    bt_engine *one = make_engine(g, "cpu:0", m, 1);
    bt_engine *two = make_engine(g, "cpu:0,cpu:1", m, 1);
    double *t1 = calloc((size_t)steps, sizeof(double)), *t2 = calloc((size_t)steps, sizeof(double));
    double *bub = calloc((size_t)steps, sizeof(double));
    for (int i = 0; i < 3; i++) step_ms(one, &d), step_ms(two, &d);
    for (int i = 0; i < steps; i++) {
        t1[i] = step_ms(one, &d);
        bt_step_result r;
        if (bt_engine_train_step(two, d.feeds, 2, &r)) die("train step");
        t2[i] = r.step_ms;
        bub[i] = r.bubble;
    }
    double a = median(t1, steps), b = median(t2, steps), ideal = 2.0 * m / (m + 1);
    printf("blas: %s\n", bt_blas_describe());
    printf("mlp 784-1024-1024-10, batch %d, %d micro-batches, 1f1b, %d steps (medians)\n", BATCH, m, steps);
    printf("  1 stage  on cpu:0        %8.2f ms  %8.0f samples/s\n", a, BATCH * 1e3 / a);
    printf("  2 stages on cpu:0,cpu:1  %8.2f ms  %8.0f samples/s  bubble %.1f%%\n", b, BATCH * 1e3 / b,
           100 * median(bub, steps));
    printf("  speedup %.2fx, ideal 2m/(m+1) = %.2fx, %.0f%% of ideal\n", a / b, ideal, 100 * (a / b) / ideal);
    bt_engine_destroy(one);
    bt_engine_destroy(two);
    bt_graph_destroy(g);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "mlp";
    int steps = 20, threads = 1, m = 8;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--microbatches") == 0) m = atoi(argv[i + 1]);
    }
    if (steps < 1 || threads < 1 || m < 1) {
        fprintf(stderr, "usage: bench_cpu mlp|pipeline [--steps N] [--threads T] [--microbatches M]\n");
        return 2;
    }
    if (strcmp(mode, "mlp") == 0) return bench_mlp(steps, threads);
    if (strcmp(mode, "pipeline") == 0) return bench_pipeline(steps, m);
    fprintf(stderr, "bench_cpu: unknown mode '%s' (mlp or pipeline)\n", mode);
    return 2;
}
