/* bench/bench_cpu.c: CPU benchmarks, never part of `make check`. Build with `make bench`.
 *
 *   bench_cpu mlp [--steps N] [--threads T]
 *       Trains the MLP 784-1024-1024-10 (batch 256, AdamW) on one cpu stage and prints its
 *       median step time, samples/s and achieved GFLOP/s beside the rate of the BLAS's own sgemm
 *       on the same GEMM shapes, measured in the same run with the same threads, and the ratio.
 *       --precision bf16 trains at bf16 (oneDNN GEMMs where the CPU has them) and times the
 *       same GEMMs through bt_gemm_at at bf16.
 *   bench_cpu gemm [--steps N] [--threads T]
 *       The machine's limits: sgemm and the bf16 GEMM on 1024^3 and 256 x 1024 x 1024.
 *   bench_cpu pipeline [--steps N] [--microbatches M] [--batch B] [--model mlp|deep]
 *       A GEMM-heavy MLP as 2 stages on cpu:0,cpu:1 (one BLAS thread each) against 1 stage on
 *       one thread, runs interleaved, and prints the speedup beside the schedule's ideal
 *       2m/(m+1). `mlp` is 784-1024-1024-10 (its two stages cannot be balanced: fc1 alone against
 *       fc2 + head); `deep` is 1024 -> six 1024-wide layers -> 10, which splits evenly.
 *   bench_cpu placement [--steps N] [--microbatches M]
 *       An MLP whose layers differ strongly in cost (784-2048-1024-128-128-128-128-10) on
 *       cpu:0,cpu:1: profiles it, plans the cut (plan/placement.h), then runs the uniform
 *       placement (4 | 4 layers) and the planned one interleaved, and prints both measured median
 *       step times beside the times the planner predicted for them.
 *
 * Every figure is a median over interleaved repetitions; nothing is hard-coded. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton.h"
#include "core/util.h"
#include "cpu/blas.h"
#include "plan/partition.h"
#include "plan/placement.h"
#include "profile/measure.h"

/* Samples per step: 256 unless --batch says otherwise (the pipeline mode takes it). */
static int bench_batch = 256;
/* --precision: f32, or bf16 (the engine's mixed precision; GEMMs through bt_gemm_at). */
static bt_dtype bench_precision = BT_F32;
static int bench_threads = 1;
#define BATCH bench_batch

static void die(const char *what)
{
    fprintf(stderr, "bench_cpu: %s: %s\n", what, bt_last_error());
    exit(1);
}

#include "bench_graphs.h"


static bt_graph *mlp_graph(void) { return bench_dense_graph(784, 1024, 2); }

typedef struct bench_data {
    float *x;
    int32_t *y;
    bt_feed feeds[2];
} bench_data;

static void make_data_width(bench_data *d, int in)
{
    d->x = malloc(sizeof(float) * (size_t)BATCH * (size_t)in);
    d->y = malloc(sizeof(int32_t) * BATCH);
    srand(1);
    for (int i = 0; i < BATCH * in; i++) d->x[i] = (float)rand() / RAND_MAX;
    for (int i = 0; i < BATCH; i++) d->y[i] = rand() % 10;
    d->feeds[0] = (bt_feed){"image", d->x, BT_F32};
    d->feeds[1] = (bt_feed){"label", d->y, BT_I32};
}

static void make_data(bench_data *d) { make_data_width(d, 784); }

static bt_engine *make_engine(const bt_graph *g, const char *devices, int m, int threads)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.precision = bench_precision;
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
    double t0 = bt_now_ms();
    for (int l = 0; l < 3; l++) {
        int in = dims[l], out = dims[l + 1];
        const bt_dtype pr = bench_precision;
        const int th = bench_threads;
        bt_gemm_at(pr, th, 0, 1, BATCH, out, in, 1, a, in, b, in, 0, c, out); /* Y = X W^T */
        bt_gemm_at(pr, th, 0, 0, BATCH, in, out, 1, c, out, b, in, 0, a, in); /* dX = dY W */
        bt_gemm_at(pr, th, 1, 0, out, in, BATCH, 1, c, out, a, in, 0, b, in); /* dW = dY^T X */
    }
    return bt_now_ms() - t0;
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
        tb[i] = step_ms(e, &d); /* the engine's cpu:0 set the BLAS thread count */
        ts[i] = sgemm_step_ms(a, b, c);
    }
    double flops = 0;
    const int dims[4] = {784, 1024, 1024, 10};
    for (int l = 0; l < 3; l++) flops += 3.0 * 2.0 * BATCH * dims[l] * dims[l + 1];
    double mb = bt_median(tb, steps), ms = bt_median(ts, steps);
    printf("blas: %s\n", bt_blas_describe());
    printf("bf16: %s\n", bt_cpu_bf16_describe());
    printf("mlp 784-1024-1024-10, batch %d, AdamW, %s, %d thread%s, %d steps (medians)\n", BATCH,
           bench_precision == BT_BF16 ? "bf16" : "f32", threads, threads == 1 ? "" : "s", steps);
    printf("  baton training step   %8.2f ms  %9.0f samples/s  %6.1f GFLOP/s\n", mb, BATCH * 1e3 / mb,
           flops / mb / 1e6);
    printf("  %s of those GEMMs  %8.2f ms  %26.1f GFLOP/s\n", bench_precision == BT_BF16 ? " bf16" : "sgemm",
           ms, flops / ms / 1e6);
    printf("  baton / GEMM rate     %8.2f\n", ms / mb);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
    return 0;
}

static int bench_pipeline(int steps, int m, const char *model)
{
    int deep = strcmp(model, "deep") == 0;
    bt_graph *g = deep ? bench_dense_graph(1024, 1024, 6) : mlp_graph();
    bench_data d;
    make_data_width(&d, deep ? 1024 : 784);
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
    double a = bt_median(t1, steps), b = bt_median(t2, steps), ideal = 2.0 * m / (m + 1);
    printf("blas: %s\n", bt_blas_describe());
    printf("%s, batch %d, %d micro-batches of %d, 1f1b, partition by parameters, %d steps (medians)\n",
           deep ? "mlp 1024-(1024 x 6)-10" : "mlp 784-1024-1024-10", BATCH, m, BATCH / m, steps);
    printf("  1 stage  on cpu:0        %8.2f ms  %8.0f samples/s\n", a, BATCH * 1e3 / a);
    printf("  2 stages on cpu:0,cpu:1  %8.2f ms  %8.0f samples/s  bubble %.1f%%\n", b, BATCH * 1e3 / b,
           100 * bt_median(bub, steps));
    printf("  speedup %.2fx, ideal 2m/(m+1) = %.2fx, %.0f%% of ideal\n", a / b, ideal, 100 * (a / b) / ideal);
    bt_engine_destroy(one);
    bt_engine_destroy(two);
    bt_graph_destroy(g);
    return 0;
}

/* x[784] -> wide 2048 -> mid 1024 -> n1 128 -> n2, n3, n4 128 -> head 10 -> loss: 3.9M of the
 * 4.0M multiply-adds per sample sit in the first three of eight layers. */
static bt_graph *lopsided_graph(void)
{
    bt_graph *g;
    bt_args *a;
    int64_t dims[] = {784};
    if (bt_graph_create(&g) || bt_args_create(&a)) die("graph");
    if (bt_graph_add_input(g, "image", 1, dims, BT_F32) || bt_graph_add_input(g, "label", 0, NULL, BT_I32))
        die("inputs");
    const char *names[] = {"wide", "mid", "n1", "n2", "n3", "n4", "head"};
    const int outs[] = {2048, 1024, 128, 128, 128, 128, 10};
    for (int i = 0; i < 7; i++) {
        bt_layer_desc d;
        bt_layer_desc_init(&d);
        bt_args_set_int(a, "out", outs[i]);
        d.name = names[i], d.op = "linear", d.args = a, d.act = i < 6 ? "relu" : NULL;
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

/* How much of two cores two workers get: the same sgemm loop on one thread alone, then on two
 * threads at once; 1.0 means the second core is fully available (pipelining can pay off). */
typedef struct gemm_job {
    float *a, *b, *c;
    double ms;
} gemm_job;

static void *gemm_loop(void *arg)
{
    gemm_job *j = arg;
    double t0 = bt_now_ms();
    for (int i = 0; i < 10; i++) bt_sgemm(0, 1, BATCH, 1024, 1024, 1, j->a, 1024, j->b, 1024, 0, j->c, 1024);
    j->ms = bt_now_ms() - t0;
    return NULL;
}

static double parallel_efficiency(void)
{
    gemm_job j[2];
    for (int k = 0; k < 2; k++) {
        j[k].a = calloc((size_t)BATCH * 1024, sizeof(float));
        j[k].b = calloc((size_t)1024 * 1024, sizeof(float));
        j[k].c = calloc((size_t)BATCH * 1024, sizeof(float));
    }
    int one = 1;
    if (bt_blas_claim_threads(&one, 1) != BT_OK) fprintf(stderr, "bench: %s\n", bt_last_error());
    gemm_loop(&j[0]);
    double alone = 1e30, together = 1e30;
    for (int r = 0; r < 3; r++) {
        gemm_loop(&j[0]);
        alone = fmin(alone, j[0].ms);
        pthread_t t;
        pthread_create(&t, NULL, gemm_loop, &j[1]);
        gemm_loop(&j[0]);
        pthread_join(t, NULL);
        together = fmin(together, fmax(j[0].ms, j[1].ms));
    }
    for (int k = 0; k < 2; k++) free(j[k].a), free(j[k].b), free(j[k].c);
    return alone / together;
}

static bt_engine *balanced_engine(const bt_graph *g, const bt_placement *pl, int m)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.devices = "cpu:0,cpu:1";
    p.parallel.microbatches = m;
    p.parallel.partition = BT_PARTITION_BALANCE;
    p.parallel.n_balance = pl->stages;
    for (int k = 0; k < pl->stages; k++) p.parallel.balance[k] = pl->stage[k].n_layers;
    p.batch = BATCH;
    p.threads = 1;
    bt_engine *e;
    if (bt_engine_create(g, &p, &e)) die("engine");
    return e;
}

static void describe_cut(const bt_profile *prof, const bt_placement *pl, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int k = 0; k < pl->stages && len < size; k++) {
        const bt_placement_stage *s = &pl->stage[k];
        const char *first = prof->layers[s->first_layer].name;
        const char *last = prof->layers[s->first_layer + s->n_layers - 1].name;
        len += (size_t)snprintf(buf + len, size - len, "%s%s%s%s", k ? " | " : "", first,
                                s->n_layers > 1 ? ".." : "", s->n_layers > 1 ? last : "");
    }
}

static int bench_placement(int steps, int m)
{
    bt_graph *g = lopsided_graph();
    bench_data d;
    make_data(&d);
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = "cpu:0,cpu:1";
    pp.batch = BATCH;
    pp.microbatches = m;
    bt_profile *prof;
    if (bt_profile_measure(g, "lopsided", &pp, &prof)) die("profile");
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = "cpu:0,cpu:1";
    bt_placement planned, uniform;
    int first[3];
    if (bt_placement_plan(prof, &lp, &planned)) die("plan");
    if (bt_partition_uniform(prof->n_layers, 2, first) || bt_placement_evaluate(prof, &lp, first, &uniform))
        die("uniform placement");
    bt_engine *eu = balanced_engine(g, &uniform, m), *ep = balanced_engine(g, &planned, m);
    double *tu = calloc((size_t)steps, sizeof(double)), *tp = calloc((size_t)steps, sizeof(double));
    for (int i = 0; i < 3; i++) step_ms(eu, &d), step_ms(ep, &d);
    for (int i = 0; i < steps; i++) {
        tu[i] = step_ms(eu, &d);
        tp[i] = step_ms(ep, &d);
    }
    double mu = bt_median(tu, steps), mp = bt_median(tp, steps);
    char cu[160], cp[160];
    describe_cut(prof, &uniform, cu, sizeof cu);
    describe_cut(prof, &planned, cp, sizeof cp);
    printf("blas: %s\n", bt_blas_describe());
    printf("placement: mlp 784-2048-1024-128x4-10 (8 layers), batch %d, %d micro-batches, 1f1b, cpu:0,cpu:1, "
           "%d steps (medians)\n", BATCH, m, steps);
    printf("  %-8s %-28s %10s %10s\n", "", "stages", "predicted", "measured");
    printf("  %-8s %-28s %7.2f ms %7.2f ms\n", "uniform", cu, uniform.step_ms, mu);
    printf("  %-8s %-28s %7.2f ms %7.2f ms\n", "planned", cp, planned.step_ms, mp);
    printf("  planned vs uniform: %.2fx faster measured, %.2fx predicted\n", mu / mp, uniform.step_ms / planned.step_ms);
    printf("  two sgemm threads run at %.0f%% of their speed alone on this machine now (the prediction\n"
           "  assumes 100%%: stages on separate devices do not slow each other down)\n",
           100 * parallel_efficiency());
    bt_engine_destroy(eu);
    bt_engine_destroy(ep);
    bt_placement_clear(&planned);
    bt_placement_clear(&uniform);
    bt_profile_destroy(prof);
    bt_graph_destroy(g);
    free(tu);
    free(tp);
    return 0;
}

/* The machine's GEMM limits at this thread count: sgemm (OpenBLAS) and the bf16 GEMM baton
 * uses (oneDNN where the CPU has it), on 1024^3 and on the MLP's 256 x 1024 x 1024. */
static int bench_gemm(int steps, int threads)
{
    int claimed = threads;
    if (bt_blas_claim_threads(&claimed, 1) != BT_OK) die("threads");
    float *a = calloc((size_t)1024 * 1024, sizeof(float)), *b = calloc((size_t)1024 * 1024, sizeof(float));
    float *c = calloc((size_t)1024 * 1024, sizeof(float));
    for (int i = 0; i < 1024 * 1024; i++) a[i] = b[i] = 0.5f;
    double *t = calloc((size_t)steps, sizeof(double));
    if (bt_cpu_f32_init() != BT_OK) die("f32 path");
    bt_blas_bind_threads(threads); /* f32 on oneDNN: this thread's count */
    printf("blas: %s\nf32: %s\nbf16: %s\n", bt_blas_describe(), bt_cpu_f32_describe(),
           bt_cpu_bf16_describe());
    const int shapes[2][3] = {{1024, 1024, 1024}, {256, 1024, 1024}};
    for (int sh = 0; sh < 2; sh++)
        for (int pr = 0; pr < 2; pr++) {
            const int m = shapes[sh][0], n = shapes[sh][1], k = shapes[sh][2];
            const bt_dtype prec = pr ? BT_BF16 : BT_F32;
            for (int i = 0; i < steps + 2; i++) {
                double t0 = bt_now_ms();
                bt_gemm_at(prec, threads, 0, 0, m, n, k, 1, a, k, b, n, 0, c, n);
                if (i >= 2) t[i - 2] = bt_now_ms() - t0;
            }
            const double ms = bt_median(t, steps);
            printf("  gemm %-4s %4dx%4dx%4d  %d thread%s  %8.3f ms  %7.1f GFLOP/s\n", pr ? "bf16" : "f32",
                   m, n, k, threads, threads == 1 ? "" : "s", ms, 2.0 * m * n * k / ms / 1e6);
        }
    bt_blas_release_threads();
    free(a), free(b), free(c), free(t);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "mlp";
    int steps = 20, threads = 1, m = 8;
    const char *model = "mlp";
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--batch") == 0) bench_batch = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--model") == 0) model = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0) threads = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--microbatches") == 0) m = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--precision") == 0 && strcmp(argv[i + 1], "bf16") == 0) bench_precision = BT_BF16;
        else if (strcmp(argv[i], "--precision") == 0 && strcmp(argv[i + 1], "f32") == 0) bench_precision = BT_F32;
        else {
            fprintf(stderr, "bench_cpu: unknown option or value '%s %s'\n", argv[i], argv[i + 1]);
            return 2;
        }
    }
    bench_threads = threads;
    bt_blas_bind_threads(threads); /* direct f32 GEMMs on oneDNN (gemm_f32.c) use this count */
    if (steps < 1 || threads < 1 || m < 1 || bench_batch < m || bench_batch % m) {
        fprintf(stderr, "usage: bench_cpu mlp|pipeline|placement|gemm [--steps N] [--threads T] [--microbatches M] "
                        "[--batch B (a multiple of M)] [--model mlp|deep] [--precision f32|bf16]\n");
        return 2;
    }
    if (strcmp(mode, "mlp") == 0) return bench_mlp(steps, threads);
    if (strcmp(mode, "pipeline") == 0) return bench_pipeline(steps, m, model);
    if (strcmp(mode, "placement") == 0) return bench_placement(steps, m);
    if (strcmp(mode, "gemm") == 0) return bench_gemm(steps, threads);
    fprintf(stderr, "bench_cpu: unknown mode '%s' (mlp, pipeline, placement or gemm)\n", mode);
    return 2;
}
