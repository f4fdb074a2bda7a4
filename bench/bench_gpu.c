/* bench/bench_gpu.c: GPU benchmarks, never part of `make check`. Built by `make bench` only where
 * configure found CUDA (HAVE_CUDA); it links cudart itself for the device name and for the raw
 * copies it measures the engine against. Without a GPU it says so and exits 1.
 *
 *   bench_gpu step [--model mlp|cnn] [--steps N] [--batch B] [--model-file F.yaml]
 *       Loads models/fashion-<model>.yaml (the shipped model, its batch and optimizer; constant
 *       lr) and trains it as one stage on cuda:0 on synthetic data: median step time (host clock
 *       around bt_engine_train_step, which returns once the step is done) and samples/s. The
 *       last line `result step ...` is what bench/compare_gpu.sh reads.
 *   bench_gpu stages [--stages P] [--microbatches M] [--steps N] [--batch B] [--width W] [--layers L]
 *       A deep MLP (W -> L layers of W, relu -> 10; it splits evenly by parameters) as P logical
 *       stages on one GPU (cuda:0 repeated), 1F1B with M micro-batches, against the same model as
 *       1 stage with the same M micro-batches, runs interleaved. Ratio: P-stage / 1-stage step
 *       time (target <= 1.05).
 *   bench_gpu copy [--transfer auto|staged] [--steps N] [--batch B] [--width W] [--layers L] [--microbatches M]
 *       The deep MLP as 2 stages on cuda:0,cuda:0. After warm-up it reads the engine's boundary
 *       statistics (bt_engine_boundary) over N steps: bytes moved over the copies' device time.
 *       In the same process it times raw copies of the same message size with CUDA events:
 *       cudaMemcpyAsync device to device (auto), or device to pinned host then host to device
 *       (staged). Ratio: engine rate / raw rate (target >= 0.90).
 *
 * Every mode prints the device first and ends with one `ratio ... = X.XX (target ...)` line
 * (step mode prints its result line instead: its ratio comes from bench/compare_gpu.sh). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "core/util.h"

#ifndef BT_SRCDIR
#define BT_SRCDIR "."
#endif

typedef struct bench_opts {
    const char *model;      /* step: mlp | cnn */
    const char *model_file; /* step: overrides the shipped file */
    const char *transfer;   /* copy: auto | staged */
    int steps, warmup, batch, stages, microbatches, width, layers;
} bench_opts;

static void die(const char *what)
{
    fprintf(stderr, "bench_gpu: %s: %s\n", what, bt_last_error());
    exit(1);
}

#include "bench_graphs.h"

static void cuda_die(const char *what, cudaError_t e)
{
    fprintf(stderr, "bench_gpu: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}

#define CUDA_CHECK(call)                                                                         \
    do {                                                                                         \
        cudaError_t e_ = (call);                                                                 \
        if (e_ != cudaSuccess) cuda_die(#call, e_);                                              \
    } while (0)

/* Prints the GPU; returns 0, or 1 with a message when this machine has none. */
static int describe_device(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n < 1) {
        fprintf(stderr, "bench_gpu: no CUDA GPU on this machine (cudaGetDeviceCount: %s); nothing to measure\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 1;
    }
    struct cudaDeviceProp prop;
    int driver = 0, runtime = 0;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    printf("device: cuda:0 %s (sm_%d%d, %.1f GiB, %d SMs), driver %d.%d, runtime %d.%d\n", prop.name, prop.major,
           prop.minor, (double)prop.totalGlobalMem / (1u << 30), prop.multiProcessorCount, driver / 1000,
           driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    return 0;
}

/* ---- synthetic feeds for any graph whose inputs are f32 (uniform [0,1)) or i32 labels (0..9) -- */

typedef struct bench_feeds {
    int n;
    bt_feed feed[8];
    void *data[8];
} bench_feeds;

static void make_feeds(const bt_graph *g, int64_t batch, bench_feeds *f)
{
    memset(f, 0, sizeof *f);
    uint64_t rng = 1;
    f->n = bt_graph_num_inputs(g);
    if (f->n > 8) f->n = 8;
    for (int i = 0; i < f->n; i++) {
        bt_input_info in;
        if (bt_graph_input(g, i, &in)) die("graph input");
        int64_t count = batch * bt_shape_numel(&in.shape);
        if (in.dtype == BT_F32) {
            float *x = malloc(sizeof(float) * (size_t)count);
            if (!x) die("out of memory");
            for (int64_t k = 0; k < count; k++) x[k] = (float)(bt_rng_next(&rng) >> 40) * 0x1.0p-24f;
            f->data[i] = x;
        } else if (in.dtype == BT_I32) {
            int32_t *y = malloc(sizeof(int32_t) * (size_t)count);
            if (!y) die("out of memory");
            for (int64_t k = 0; k < count; k++) y[k] = (int32_t)(bt_rng_next(&rng) % 10);
            f->data[i] = y;
        } else {
            fprintf(stderr, "bench_gpu: input %s has dtype %s; only f32 inputs and i32 labels are synthesised\n",
                    in.name, bt_dtype_name(in.dtype));
            exit(2);
        }
        f->feed[i] = (bt_feed){in.name, f->data[i], in.dtype};
    }
}

static void free_feeds(bench_feeds *f)
{
    for (int i = 0; i < f->n; i++) free(f->data[i]);
}

/* One training step; returns its wall time in ms (host clock around the call). */
static double train_ms(bt_engine *e, const bench_feeds *f, bt_step_result *r)
{
    double t0 = bt_now_ms();
    if (bt_engine_train_step(e, f->feed, f->n, r)) die("train step");
    return bt_now_ms() - t0;
}


/* "cuda:0,cuda:0,..." with p entries. */
static void same_gpu_devices(int p, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int s = 0; s < p; s++) strncat(buf, s ? ",cuda:0" : "cuda:0", size - strlen(buf) - 1);
}

static bt_engine *deep_engine(const bt_graph *g, int p, int m, int64_t batch, bt_transfer_mode transfer)
{
    char devices[16 * BT_MAX_STAGES];
    same_gpu_devices(p, devices, sizeof devices);
    bt_engine_params ep;
    bt_engine_params_init(&ep);
    ep.parallel.devices = devices;
    ep.parallel.stages = p;
    ep.parallel.microbatches = m;
    ep.parallel.schedule = BT_SCHEDULE_1F1B;
    ep.parallel.partition = BT_PARTITION_PARAMS;
    ep.batch = batch;
    ep.transfer = transfer;
    bt_engine *e;
    if (bt_engine_create(g, &ep, &e)) die(devices);
    return e;
}

/* ---- step ---------------------------------------------------------------------------------- */

static int bench_step(const bench_opts *o)
{
    char path[4096];
    if (o->model_file) snprintf(path, sizeof path, "%s", o->model_file);
    else snprintf(path, sizeof path, "%s/models/fashion-%s.yaml", BT_SRCDIR, o->model);
    bt_model *m;
    if (bt_model_load(path, NULL, 0, &m)) die(path);
    bt_engine_params ep;
    bt_engine_params_init(&ep);
    ep.parallel.devices = "cuda:0";
    ep.parallel.stages = 1;
    ep.parallel.microbatches = 1;
    ep.parallel.schedule = BT_SCHEDULE_1F1B;
    ep.parallel.partition = BT_PARTITION_UNIFORM;
    ep.optimizer = m->train.optimizer;
    ep.clip_norm = m->train.clip_norm;
    ep.batch = o->batch > 0 ? o->batch : m->train.batch;
    bt_engine *e;
    if (bt_engine_create(m->graph, &ep, &e)) die("engine on cuda:0");
    bench_feeds f;
    make_feeds(m->graph, ep.batch, &f);
    double *wall = calloc((size_t)o->steps, sizeof *wall), *eng = calloc((size_t)o->steps, sizeof *eng);
    bt_step_result r = {0};
    double first_loss = 0;
    for (int i = 0; i < o->warmup; i++) {
        train_ms(e, &f, &r);
        if (i == 0) first_loss = r.loss;
    }
    for (int i = 0; i < o->steps; i++) {
        wall[i] = train_ms(e, &f, &r);
        eng[i] = r.step_ms;
    }
    double mw = bt_median(wall, o->steps), me = bt_median(eng, o->steps);
    printf("%s (%s): batch %lld, %s lr %g, 1 stage on cuda:0, f32, synthetic data, %d warm-up + %d steps\n",
           m->name, path, (long long)ep.batch, ep.optimizer.kind == BT_OPT_ADAMW ? "AdamW" : "SGD",
           ep.optimizer.lr, o->warmup, o->steps);
    printf("  loss %.4f after warm-up step 1, %.4f after the last step\n", first_loss, r.loss);
    printf("  median step %.3f ms (engine's own step_ms %.3f), %.0f samples/s\n", mw, me, ep.batch * 1e3 / mw);
    printf("result step model=%s batch=%lld median_ms=%.4f samples_per_s=%.1f\n", o->model_file ? m->name : o->model,
           (long long)ep.batch, mw, ep.batch * 1e3 / mw);
    free(wall);
    free(eng);
    free_feeds(&f);
    bt_engine_destroy(e);
    bt_model_destroy(m);
    return 0;
}

/* ---- stages -------------------------------------------------------------------------------- */

static int bench_stages(const bench_opts *o)
{
    int p = o->stages, m = o->microbatches;
    bt_graph *g = bench_dense_graph(o->width, o->width, o->layers);
    bench_feeds f;
    make_feeds(g, o->batch, &f);
    bt_engine *one = deep_engine(g, 1, m, o->batch, BT_TRANSFER_AUTO);
    bt_engine *many = deep_engine(g, p, m, o->batch, BT_TRANSFER_AUTO);
    double *t1 = calloc((size_t)o->steps, sizeof *t1), *tp = calloc((size_t)o->steps, sizeof *tp);
    double *bub = calloc((size_t)o->steps, sizeof *bub);
    bt_step_result r1, rp;
    for (int i = 0; i < o->warmup; i++) train_ms(one, &f, &r1), train_ms(many, &f, &rp);
    for (int i = 0; i < o->steps; i++) {
        t1[i] = train_ms(one, &f, &r1);
        tp[i] = train_ms(many, &f, &rp);
        bub[i] = rp.bubble;
    }
    double a = bt_median(t1, o->steps), b = bt_median(tp, o->steps);
    double flops = 0;
    for (int l = 0; l <= o->layers; l++) flops += 6.0 * o->batch * o->width * (l < o->layers ? o->width : 10);
    printf("mlp %d-(%d x %d)-10, batch %d, %d micro-batches of %d, 1f1b, partition by parameters, AdamW, "
           "%d warm-up + %d steps interleaved (medians)\n", o->width, o->width, o->layers, o->batch, m,
           o->batch / m, o->warmup, o->steps);
    printf("  losses after the last step: 1 stage %.6f, %d stages %.6f\n", r1.loss, p, rp.loss);
    printf("  1 stage  on cuda:0           %9.3f ms  %9.0f samples/s  %7.1f TFLOP/s\n", a, o->batch * 1e3 / a,
           flops / a / 1e9);
    printf("  %d stages on cuda:0 x %-5d  %9.3f ms  %9.0f samples/s  %7.1f TFLOP/s  bubble %.1f%%\n", p, p, b,
           o->batch * 1e3 / b, flops / b / 1e9, 100 * bt_median(bub, o->steps));
    printf("ratio %d-stage / 1-stage step time = %.2f (target <= 1.05)\n", p, b / a);
    free(t1);
    free(tp);
    free(bub);
    free_feeds(&f);
    bt_engine_destroy(many);
    bt_engine_destroy(one);
    bt_graph_destroy(g);
    return 0;
}

/* ---- copy ---------------------------------------------------------------------------------- */

/* Median ms of one raw copy of bytes: device to device, or (staged) device -> pinned host ->
 * device, each timed with CUDA events on one stream. */
static double raw_copy_ms(size_t bytes, int staged, int reps)
{
    void *src, *dst, *host = NULL;
    cudaStream_t s;
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaMalloc(&src, bytes));
    CUDA_CHECK(cudaMalloc(&dst, bytes));
    CUDA_CHECK(cudaMemset(src, 1, bytes));
    if (staged) CUDA_CHECK(cudaMallocHost(&host, bytes));
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    double *t = calloc((size_t)reps, sizeof *t);
    for (int i = -3; i < reps; i++) {
        CUDA_CHECK(cudaEventRecord(e0, s));
        if (staged) {
            CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, s));
            CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s));
        } else {
            CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
        }
        CUDA_CHECK(cudaEventRecord(e1, s));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0) t[i] = ms;
    }
    double med = bt_median(t, reps);
    free(t);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(s);
    if (host) cudaFreeHost(host);
    cudaFree(src);
    cudaFree(dst);
    return med;
}

static int bench_copy(const bench_opts *o)
{
    int staged = strcmp(o->transfer, "staged") == 0;
    int m = o->microbatches;
    bt_graph *g = bench_dense_graph(o->width, o->width, o->layers);
    bench_feeds f;
    make_feeds(g, o->batch, &f);
    bt_engine *e = deep_engine(g, 2, m, o->batch, staged ? BT_TRANSFER_STAGED : BT_TRANSFER_AUTO);
    bt_step_result r;
    for (int i = 0; i < o->warmup; i++) train_ms(e, &f, &r);
    int nb = bt_engine_num_boundaries(e);
    if (nb < 1) {
        fprintf(stderr, "bench_gpu: the 2-stage engine reports no boundaries\n");
        return 1;
    }
    bt_boundary_stats *before = calloc((size_t)nb, sizeof *before), *after = calloc((size_t)nb, sizeof *after);
    for (int b = 0; b < nb; b++)
        if (bt_engine_boundary(e, b, &before[b])) die("boundary stats");
    double *t = calloc((size_t)o->steps, sizeof *t);
    for (int i = 0; i < o->steps; i++) t[i] = train_ms(e, &f, &r);
    for (int b = 0; b < nb; b++)
        if (bt_engine_boundary(e, b, &after[b])) die("boundary stats");
    printf("mlp %d-(%d x %d)-10, batch %d, %d micro-batches of %d, 2 stages on cuda:0,cuda:0, transfer %s, "
           "%d warm-up + %d steps; median step %.3f ms\n", o->width, o->width, o->layers, o->batch, m,
           o->batch / m, o->transfer, o->warmup, o->steps, bt_median(t, o->steps));
    printf("  %-8s %-5s %-7s %12s %9s %12s %10s %9s %9s %6s\n", "boundary", "dir", "path", "message", "messages",
           "bytes", "copy ms", "GB/s", "raw GB/s", "ratio");
    double engine_ms = 0, raw_ms = 0;
    int wrong_path = 0;
    for (int b = 0; b < nb; b++) {
        const bt_boundary_stats *x = &after[b];
        double bytes = x->bytes - before[b].bytes, ms = x->copy_ms - before[b].copy_ms;
        long long msgs = (long long)(x->messages - before[b].messages);
        double raw = x->message_bytes > 0 ? raw_copy_ms(x->message_bytes, staged, 50) : 0;
        double raw_rate = raw > 0 ? x->message_bytes / raw / 1e6 : 0, rate = ms > 0 ? bytes / ms / 1e6 : 0;
        char name[32];
        snprintf(name, sizeof name, "%d->%d", x->from, x->to);
        printf("  %-8s %-5s %-7s %12zu %9lld %12.0f %10.3f %9.2f %9.2f %6.2f\n", name, x->grad ? "grad" : "act",
               bt_transfer_path_name(x->path), x->message_bytes, msgs, bytes, ms, rate, raw_rate,
               raw_rate > 0 && rate > 0 ? rate / raw_rate : 0);
        if (bytes > 0 && ms > 0 && raw > 0) {
            engine_ms += ms;
            raw_ms += bytes / x->message_bytes * raw;
        }
        if (staged && x->path != BT_PATH_STAGED) wrong_path = 1;
    }
    printf("  raw: cudaMemcpyAsync %s of one message, CUDA events, median of 50\n",
           staged ? "device -> pinned host, then pinned host -> device," : "device to device");
    if (wrong_path) printf("  note: --transfer staged was asked for, but a boundary reports another path\n");
    int rc = 0;
    if (engine_ms > 0) {
        printf("ratio engine / raw copy rate (%s) = %.2f (target >= 0.90)\n", o->transfer, raw_ms / engine_ms);
    } else {
        printf("ratio engine / raw copy rate (%s) = n/a: the engine timed no copies (a zero-copy hand-off, "
               "or no statistics)\n", o->transfer);
    }
    free(before);
    free(after);
    free(t);
    free_feeds(&f);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
    return rc;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: bench_gpu step   [--model mlp|cnn] [--model-file F.yaml] [--steps N] [--batch B]\n"
            "       bench_gpu stages [--stages P] [--microbatches M] [--steps N] [--batch B] [--width W] [--layers L]\n"
            "       bench_gpu copy   [--transfer auto|staged] [--microbatches M] [--steps N] [--batch B] [--width W] "
            "[--layers L]\n"
            "       (--warmup N everywhere; the batch must be a multiple of M)\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int is_step = strcmp(mode, "step") == 0, is_stages = strcmp(mode, "stages") == 0;
    int is_copy = strcmp(mode, "copy") == 0;
    if (!is_step && !is_stages && !is_copy) return usage();
    bench_opts o = {.model = "mlp", .transfer = "auto", .steps = 30, .warmup = 5, .batch = 0, .stages = 2,
                    .microbatches = 8, .width = 2048, .layers = 12};
    if (is_copy) o.width = 4096, o.layers = 4;
    for (int i = 2; i < argc; i += 2) {
        const char *k = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (strcmp(k, "--model") == 0) o.model = v;
        else if (strcmp(k, "--model-file") == 0) o.model_file = v;
        else if (strcmp(k, "--transfer") == 0) o.transfer = v;
        else if (strcmp(k, "--steps") == 0) o.steps = atoi(v);
        else if (strcmp(k, "--warmup") == 0) o.warmup = atoi(v);
        else if (strcmp(k, "--batch") == 0) o.batch = atoi(v);
        else if (strcmp(k, "--stages") == 0) o.stages = atoi(v);
        else if (strcmp(k, "--microbatches") == 0) o.microbatches = atoi(v);
        else if (strcmp(k, "--width") == 0) o.width = atoi(v);
        else if (strcmp(k, "--layers") == 0) o.layers = atoi(v);
        else return usage();
    }
    if (!is_step && o.batch == 0) o.batch = 2048;
    if (strcmp(o.model, "mlp") != 0 && strcmp(o.model, "cnn") != 0) return usage();
    if (strcmp(o.transfer, "auto") != 0 && strcmp(o.transfer, "staged") != 0) return usage();
    if (o.steps < 1 || o.warmup < 1 || o.batch < 0 || o.stages < 1 || o.stages > BT_MAX_STAGES ||
        o.microbatches < 1 || o.width < 1 || o.layers < 1)
        return usage();
    if (!is_step && (o.batch < o.microbatches || o.batch % o.microbatches)) return usage();
    if (describe_device() != 0) return 1;
    if (is_step) return bench_step(&o);
    if (is_stages) return bench_stages(&o);
    return bench_copy(&o);
}
