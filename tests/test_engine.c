/* tests/test_engine.c: the engine end to end on the CPU. A pipelined run must match the same model
 * run as one stage (loss and every parameter after three steps, for p in 1..4 and m in 1,2,4,8
 * under GPipe and 1F1B, with a residual that skips a stage); activation memory must follow the
 * schedule; a stuck transfer must be reported by the watchdog in bounded time; a graph built
 * through the C API and the same model from YAML must give bit-identical results; and the
 * engine's gradients must agree with finite differences of its own loss in f64. The admission check
 * counts exactly the bytes the engine then allocates (host-path scratch included), and a worker
 * whose thread cannot be bound to its device fails its jobs with the reason. A step is all or
 * nothing: one that fails in one stage's backward, retried, gives the weights of a clean run bit
 * for bit, and a non-finite gradient stops the step before any update, naming its parameter. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"
#include "engine_runs.h"
#include "backend/backend.h"
#include "core/error.h"
#include "exec/exec_internal.h"

static void test_pipeline_matches_single_stage(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result ref;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &ref);
    CU_ASSERT(ref.loss[2] < ref.loss[0]); /* it actually learns something */
    const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B};
    const int ms[] = {1, 2, 4, 8};
    int checked = 0;
    for (int k = 0; k < 2; k++)
        for (int stages = 1; stages <= 4; stages++)
            for (int mi = 0; mi < 4; mi++) {
                run_result r;
                engine_params(&p, stages, ms[mi], kinds[k]);
                run_three_steps(g, &p, &r);
                int ok = 1;
                double worst = 0;
                for (int s = 0; s < 3; s++) ok &= close_rel(r.loss[s], ref.loss[s], 1e-6);
                for (int i = 0; i < r.n; i++) {
                    double err = tensor_rel_error(r.params[i], ref.params[i], r.sizes[i] / sizeof(float));
                    if (err > worst) worst = err;
                }
                ok &= worst <= 1e-6;
                if (!ok)
                    printf("\n  mismatch: %s p=%d m=%d loss %.9g vs %.9g, worst parameter error %.3g\n",
                           bt_schedule_name(kinds[k]), stages, ms[mi], r.loss[2], ref.loss[2], worst);
                CU_ASSERT(ok);
                if (ms[mi] == 1) CU_ASSERT(identical(&r, &ref));
                checked++;
                free_result(&r);
            }
    CU_ASSERT_EQUAL(checked, 32);
    free_result(&ref);
    bt_graph_destroy(g);
}

static void test_activation_memory_follows_schedule(void)
{
    bt_graph *g = residual_graph();
    const int m = 8;
    for (int k = 0; k < 2; k++) {
        bt_schedule_kind kind = k ? BT_SCHEDULE_1F1B : BT_SCHEDULE_GPIPE;
        for (int stages = 2; stages <= 4; stages++) {
            bt_engine_params p;
            bt_engine *e = NULL;
            engine_params(&p, stages, m, kind);
            CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
            batch_data b;
            make_batch(&b, 7);
            CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
            for (int s = 0; s < stages; s++) {
                bt_memory_stats mem;
                CU_ASSERT_FATAL(bt_engine_memory(e, s, &mem) == BT_OK);
                int want = kind == BT_SCHEDULE_GPIPE ? m : (stages - s < m ? stages - s : m);
                if (mem.peak_microbatches != want)
                    printf("\n  %s p=%d stage %d holds %d, want %d\n", bt_schedule_name(kind), stages, s,
                           mem.peak_microbatches, want);
                CU_ASSERT_EQUAL(mem.peak_microbatches, want);
                CU_ASSERT(mem.activation_peak > 0);
                CU_ASSERT(mem.activation_peak <= mem.activations);
                CU_ASSERT(mem.weights > 0 && mem.gradients == mem.weights);
                CU_ASSERT(mem.optimizer == mem.weights); /* SGD momentum: one buffer */
            }
            /* under 1F1B the first stage holds p micro-batches, the last one */
            bt_engine_destroy(e);
        }
    }
    bt_graph_destroy(g);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_watchdog_reports_stuck_transfer(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.watchdog_s = 0.5;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 3);
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    bt_engine_test_drop_send(e, 0, 1);
    double t0 = now_s();
    bt_status st = bt_engine_train_step(e, b.feeds, 2, NULL);
    double waited = now_s() - t0;
    CU_ASSERT_EQUAL(st, BT_ERR_TIMEOUT);
    const char *msg = bt_last_error();
    /* stage 1 waits for activations stage 0 never posted; stage 0 in turn waits for stage 1 */
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "watchdog: after 0.5 s"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "stage 1 (cpu:1) at instruction"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "(1R1) waits for activations of micro-batch 1 from stage 0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "(0r1) waits for gradients of micro-batch 1 from stage 1"));
    if (!strstr(msg, "(1R1)")) printf("\n  message: %s\n", msg);
    CU_ASSERT(waited < 5.0);
    /* the engine stays usable once the fault is gone */
    bt_engine_test_drop_send(e, -1, -1);
    st = bt_engine_train_step(e, b.feeds, 2, NULL);
    CU_ASSERT_EQUAL(st, BT_OK);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static const char residual_yaml[] =
    "format: 1\n"
    "name: residual\n"
    "inputs:\n"
    "  x: {shape: [8]}\n"
    "  label: {shape: [], dtype: i32}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 16}, act: tanh}\n"
    "  - {name: fc2, op: linear, args: {out: 16}, act: relu}\n"
    "  - {name: ln, op: layernorm}\n"
    "  - {name: skip, op: add, from: [-1, fc1]}\n"
    "  - {name: fc3, op: linear, args: {out: 16}, act: gelu}\n"
    "  - {name: head, op: linear, args: {out: 4}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "train:\n"
    "  batch: 16\n";

static void test_c_api_and_yaml_bit_identical(void)
{
    bt_graph *g = residual_graph();
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(residual_yaml, sizeof residual_yaml - 1, "residual.yaml", NULL, 0, &m);
    if (st != BT_OK) printf("\n  load: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT_EQUAL(bt_graph_num_params(g), bt_graph_num_params(m->graph));
    bt_engine_params p;
    engine_params(&p, 2, 4, BT_SCHEDULE_1F1B);
    bt_engine *e1 = NULL, *e2 = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e1) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_create(m->graph, &p, &e2) == BT_OK);
    batch_data b;
    make_batch(&b, 11);
    bt_step_result r1, r2;
    CU_ASSERT_FATAL(bt_engine_compute_grads(e1, b.feeds, 2, &r1) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_compute_grads(e2, b.feeds, 2, &r2) == BT_OK);
    CU_ASSERT(memcmp(&r1.loss, &r2.loss, sizeof r1.loss) == 0);
    for (int i = 0; i < bt_graph_num_params(g); i++) {
        bt_param_info a, c;
        bt_graph_param(g, i, &a);
        bt_graph_param(m->graph, i, &c);
        CU_ASSERT_STRING_EQUAL(a.name, c.name);
        size_t bytes = (size_t)bt_shape_numel(&a.shape) * 4;
        float *w1 = malloc(bytes), *w2 = malloc(bytes);
        CU_ASSERT(bt_engine_read_param(e1, a.name, w1, bytes) == BT_OK);
        CU_ASSERT(bt_engine_read_param(e2, a.name, w2, bytes) == BT_OK);
        CU_ASSERT(memcmp(w1, w2, bytes) == 0);
        CU_ASSERT(bt_engine_read_grad(e1, a.name, w1, bytes) == BT_OK);
        CU_ASSERT(bt_engine_read_grad(e2, a.name, w2, bytes) == BT_OK);
        CU_ASSERT(memcmp(w1, w2, bytes) == 0);
        free(w1);
        free(w2);
    }
    float out1[BATCH * CLASSES], out2[BATCH * CLASSES];
    CU_ASSERT(bt_engine_forward_layer(e1, b.feeds, 2, "head", out1, NULL) == BT_OK);
    CU_ASSERT(bt_engine_forward_layer(e2, b.feeds, 2, "head", out2, NULL) == BT_OK);
    CU_ASSERT(memcmp(out1, out2, sizeof out1) == 0);
    bt_engine_destroy(e1);
    bt_engine_destroy(e2);
    bt_model_destroy(m);
    bt_graph_destroy(g);
}

/* The engine's gradients (pipelined, micro-batched, f64) against central differences of the
 * engine's own mean loss. */
static void test_engine_gradients_match_finite_differences(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 3, 4, BT_SCHEDULE_1F1B);
    p.dtype = BT_F64;
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    static double x[BATCH * IN];
    static int32_t label[BATCH];
    srand(5);
    for (int i = 0; i < BATCH * IN; i++) x[i] = (double)rand() / RAND_MAX * 2 - 1;
    for (int i = 0; i < BATCH; i++) label[i] = rand() % CLASSES;
    bt_feed feeds[2] = {{"x", x, BT_F64}, {"label", label, BT_I32}};
    const char *names[] = {"fc1.weight", "ln.weight", "fc3.bias", "head.weight"};
    double max_err = 0;
    for (int k = 0; k < 4; k++) {
        bt_param_info info;
        int idx = -1;
        for (int i = 0; i < bt_graph_num_params(g); i++) {
            bt_graph_param(g, i, &info);
            if (strcmp(info.name, names[k]) == 0) { idx = i; break; }
        }
        CU_ASSERT_FATAL(idx >= 0);
        size_t n = (size_t)bt_shape_numel(&info.shape);
        double *w = malloc(n * 8), *grad = malloc(n * 8);
        bt_step_result r;
        CU_ASSERT_FATAL(bt_engine_compute_grads(e, feeds, 2, &r) == BT_OK);
        CU_ASSERT(bt_engine_read_grad(e, names[k], grad, n * 8) == BT_OK);
        CU_ASSERT(bt_engine_read_param(e, names[k], w, n * 8) == BT_OK);
        for (size_t j = 0; j < n; j += (n > 8 ? n / 7 : 1)) {
            const double h = 1e-5;
            double orig = w[j], lp, lm;
            w[j] = orig + h;
            bt_engine_write_param(e, names[k], w, n * 8);
            bt_engine_compute_grads(e, feeds, 2, &r);
            lp = r.loss;
            w[j] = orig - h;
            bt_engine_write_param(e, names[k], w, n * 8);
            bt_engine_compute_grads(e, feeds, 2, &r);
            lm = r.loss;
            w[j] = orig;
            bt_engine_write_param(e, names[k], w, n * 8);
            double fd = (lp - lm) / (2 * h);
            double err = fabs(fd - grad[j]) / fmax(1e-4, fabs(fd) + fabs(grad[j]));
            if (err > max_err) max_err = err;
        }
        free(w);
        free(grad);
    }
    CU_ASSERT(max_err < 1e-5);
    if (max_err >= 1e-5) printf("\n  max relative error %g\n", max_err);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* Clipping by the global norm: every stage must scale by the norm over all stages' gradients. */
static void test_clipping_uses_the_global_norm(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 3, 2, BT_SCHEDULE_1F1B);
    p.optimizer.momentum = 0;
    p.optimizer.weight_decay = 0;
    p.optimizer.lr = 0.5;
    batch_data b;
    make_batch(&b, 21);
    bt_engine *probe = NULL, *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &probe) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_compute_grads(probe, b.feeds, 2, NULL) == BT_OK);
    int n = bt_graph_num_params(g);
    float *w0[16], *gr[16];
    double sumsq = 0;
    for (int i = 0; i < n; i++) {
        bt_param_info info;
        bt_graph_param(g, i, &info);
        size_t k = (size_t)bt_shape_numel(&info.shape);
        w0[i] = malloc(k * 4);
        gr[i] = malloc(k * 4);
        bt_engine_read_param(probe, info.name, w0[i], k * 4);
        bt_engine_read_grad(probe, info.name, gr[i], k * 4);
        for (size_t j = 0; j < k; j++) sumsq += (double)gr[i][j] * gr[i][j];
    }
    double norm = sqrt(sumsq), clip = norm / 4; /* clipping must scale every stage by ~1/4 */
    p.clip_norm = clip;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    bt_step_result r;
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, &r) == BT_OK);
    CU_ASSERT(fabs(r.grad_norm - norm) <= 1e-5 * norm);
    double scale = clip / (norm + 1e-6), worst = 0;
    for (int i = 0; i < n; i++) {
        bt_param_info info;
        bt_graph_param(g, i, &info);
        size_t k = (size_t)bt_shape_numel(&info.shape);
        float *w1 = malloc(k * 4);
        bt_engine_read_param(e, info.name, w1, k * 4);
        for (size_t j = 0; j < k; j++) {
            double want = w0[i][j] - p.optimizer.lr * scale * gr[i][j];
            worst = fmax(worst, fabs(w1[j] - want));
        }
        free(w1);
        free(w0[i]);
        free(gr[i]);
    }
    CU_ASSERT(worst < 1e-6);
    if (worst >= 1e-6) printf("\n  clipped update off by %g\n", worst);
    bt_engine_destroy(probe);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* Per-stage time accounting adds up, and a stage that waits for its neighbour shows idle time. */
static void test_time_accounting(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, 2, 4, BT_SCHEDULE_GPIPE);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 4);
    for (int i = 0; i < 3; i++) CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    for (int s = 0; s < 2; s++) {
        bt_time_stats t;
        CU_ASSERT_FATAL(bt_engine_time(e, s, &t) == BT_OK);
        CU_ASSERT_EQUAL(t.steps, 3);
        CU_ASSERT(t.busy_ms > 0 && t.transfer_ms > 0 && t.idle_ms > 0);
        CU_ASSERT(fabs(t.busy_ms + t.transfer_ms + t.idle_ms - t.wall_ms) < 1e-6 * t.wall_ms + 1e-9);
    }
    CU_ASSERT_EQUAL(bt_engine_time(e, 2, &(bt_time_stats){0}), BT_ERR_INVALID_ARG);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* A plan that needs more memory than its devices have is refused before allocating, naming the
 * stage and the bytes; what an engine does allocate matches what the check predicted. */
static void test_plan_too_big_is_refused(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, 2, 4, BT_SCHEDULE_1F1B);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    size_t used = 0;
    for (int s = 0; s < 2; s++) {
        bt_memory_stats m;
        bt_engine_memory(e, s, &m);
        used += m.current;
    }
    bt_engine_destroy(e);
    p.device_memory = used / 2;
    e = NULL;
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_NOMEM);
    CU_ASSERT_PTR_NULL(e);
    const char *msg = bt_last_error();
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "the plan does not fit in memory: stage "));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "weights"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "iB free")); /* KiB here: each figure takes its own unit */
    CU_ASSERT_PTR_NULL(strstr(msg, " 0.0 "));
    p.device_memory = used + 4096; /* enough, with the channel scratch rounding */
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_OK);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* The admission check and the allocation come from one memory model: a limit of exactly the bytes
 * an engine holds admits it, one byte less refuses it, on device paths and through host memory
 * (where a receiving stage also holds a scratch buffer for gradient messages). */
static void test_admission_counts_what_is_allocated(void)
{
    bt_graph *g = residual_graph();
    for (int mode = 0; mode < 2; mode++) {
        bt_engine_params p;
        engine_params(&p, 3, 4, BT_SCHEDULE_1F1B);
        p.transfer = mode ? BT_TRANSFER_HOST : BT_TRANSFER_AUTO;
        bt_engine *e = NULL;
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
        size_t used = 0, scratch = 0;
        for (int s = 0; s < 3; s++) {
            bt_memory_stats m;
            CU_ASSERT_FATAL(bt_engine_memory(e, s, &m) == BT_OK);
            used += m.current + e->stage[s].host_channel_bytes; /* every cpu:N shares the host */
            scratch += e->stage[s].recv_scratch_bytes;
        }
        CU_ASSERT(mode ? scratch > 0 : scratch == 0);
        bt_engine_destroy(e);
        p.device_memory = used;
        e = NULL;
        CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_OK);
        bt_engine_destroy(e);
        p.device_memory = used - 1;
        e = NULL;
        CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_NOMEM);
        CU_ASSERT_PTR_NULL(e);
    }
    bt_graph_destroy(g);
}

static bt_status failing_bind(bt_device *dev)
{
    (void)dev;
    return bt_error(BT_ERR_UNSUPPORTED, "no core to pin to");
}

/* A worker thread whose device cannot be bound to it fails the job it is given with that reason
 * and raises the abort flag, instead of running on an unbound thread. */
static void test_bind_failure_is_the_workers_error(void)
{
    bt_backend fake = *bt_cpu_backend();
    fake.bind_thread = failing_bind;
    bt_engine e;
    bt_stage st;
    bt_worker w;
    memset(&e, 0, sizeof e);
    memset(&st, 0, sizeof st);
    memset(&w, 0, sizeof w);
    st.be = &fake;
    snprintf(st.device_name, sizeof st.device_name, "cpu:0");
    w.engine = &e;
    e.stages = 1;
    e.stage = &st;
    e.worker = &w;
    atomic_init(&e.abort, 0);
    pthread_mutex_init(&e.mu, NULL);
    pthread_cond_init(&e.cv_job, NULL);
    pthread_cond_init(&e.cv_done, NULL);
    pthread_cond_init(&e.cv_barrier, NULL);
    CU_ASSERT_FATAL(pthread_create(&w.thread, NULL, bt_worker_main, &w) == 0);
    pthread_mutex_lock(&e.mu);
    e.job = BT_JOB_GRADS;
    e.generation++;
    pthread_cond_broadcast(&e.cv_job);
    while (e.done_count < 1) pthread_cond_wait(&e.cv_done, &e.mu);
    e.job = BT_JOB_EXIT;
    e.generation++;
    pthread_cond_broadcast(&e.cv_job);
    pthread_mutex_unlock(&e.mu);
    pthread_join(w.thread, NULL);
    CU_ASSERT_EQUAL(w.status, BT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(w.error, "stage 0 (cpu:0): cannot bind the worker thread: no core to pin to"));
    CU_ASSERT(atomic_load(&e.abort));
    pthread_mutex_destroy(&e.mu);
    pthread_cond_destroy(&e.cv_job);
    pthread_cond_destroy(&e.cv_done);
    pthread_cond_destroy(&e.cv_barrier);
}

static void test_bad_configurations_rejected(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, 2, 3, BT_SCHEDULE_1F1B); /* 16 samples do not split into 3 */
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "does not split"));
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.parallel.balance[0] = 3; /* sums to 9, not 7 */
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_MODEL);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "balance sums to 9"));
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.parallel.devices = "cpu:0,cpu:1,cpu:2";
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_MODEL);
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 1);
    b.label[5] = 9; /* out of range for 4 classes */
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, NULL), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "9"));
    b.feeds[0].dtype = BT_F64;
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, NULL), BT_ERR_INVALID_ARG);
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

/* ---- a step is all or nothing --------------------------------------------------------------- */

/* test.flaky: the identity, whose backward fails once when armed, after a pause long enough for
 * the last stage to have finished its own backward (and, before steps were all or nothing, to
 * have applied its update). */
static int flaky_armed;

static bt_status flaky_infer(bt_infer_ctx *ctx)
{
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), bt_infer_input_dtype(ctx, 0));
}

static bt_status flaky_forward(const bt_op_call *c)
{
    memcpy(c->out->data, c->in[0].data, (size_t)bt_tensor_numel(c->out) * sizeof(float));
    return BT_OK;
}

static bt_status flaky_backward(const bt_op_call *c)
{
    if (flaky_armed) {
        flaky_armed = 0;
        struct timespec pause = {0, 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
        return bt_op_error(BT_ERR_BACKEND, "test.flaky: planned failure");
    }
    const float *dy = c->out_grad->data;
    float *dx = c->in_grad[0].data;
    if (dx)
        for (int64_t i = 0; i < bt_tensor_numel(c->out_grad); i++) dx[i] += dy[i];
    return BT_OK;
}

/* test.slow: the identity, whose forward pauses while armed (it holds the last stage back, so a
 * receiver that does not wait for its message reads a stale buffer). */
static int slow_armed;

static bt_status slow_forward(const bt_op_call *c)
{
    if (slow_armed) {
        struct timespec pause = {0, 20 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    return flaky_forward(c);
}

static bt_status slow_backward(const bt_op_call *c)
{
    const float *dy = c->out_grad->data;
    float *dx = c->in_grad[0].data;
    for (int64_t i = 0; i < bt_tensor_numel(c->out_grad); i++) dx[i] += dy[i];
    return BT_OK;
}

/* x -> fc1 -> flaky | fc2 -> slow -> head -> loss: the flaky layer ends stage 0, the update of the
 * last stage is what a failed step must not apply. */
static bt_graph *flaky_graph(void)
{
    static int registered;
    if (!registered) {
        bt_op_def def = {.name = "test.flaky", .min_inputs = 1, .max_inputs = 1, .infer = flaky_infer,
                         .cpu_forward = flaky_forward, .cpu_backward = flaky_backward};
        CU_ASSERT_FATAL(bt_op_register(&def) == BT_OK);
        bt_op_def slow = {.name = "test.slow", .min_inputs = 1, .max_inputs = 1, .infer = flaky_infer,
                          .cpu_forward = slow_forward, .cpu_backward = slow_backward};
        CU_ASSERT_FATAL(bt_op_register(&slow) == BT_OK);
        registered = 1;
    }
    const chain_layer layers[] = {{"fc1", "linear", "tanh", HID}, {"flaky", "test.flaky", NULL, 0},
                                  {"fc2", "linear", "relu", HID}, {"slow", "test.slow", NULL, 0}};
    return chain_graph(layers, 4);
}

/* 1 if every parameter of a and b is bit-identical. */
static int same_weights(const bt_graph *g, const bt_engine *a, const bt_engine *b)
{
    int same = 1;
    for (int i = 0; i < bt_graph_num_params(g); i++) {
        bt_param_info info;
        bt_graph_param(g, i, &info);
        size_t bytes = (size_t)bt_shape_numel(&info.shape) * sizeof(float);
        float *x = malloc(bytes), *y = malloc(bytes);
        CU_ASSERT_FATAL(x && y);
        CU_ASSERT(bt_engine_read_param(a, info.name, x, bytes) == BT_OK);
        CU_ASSERT(bt_engine_read_param(b, info.name, y, bytes) == BT_OK);
        if (memcmp(x, y, bytes) != 0) {
            printf("\n  %s differs\n", info.name);
            same = 0;
        }
        free(x);
        free(y);
    }
    return same;
}

/* A step that fails in one stage's backward applies no update anywhere, so retrying it gives the
 * weights (and optimizer state: more steps follow) of a run where it never failed, bit for bit.
 * Before, the last stage had already applied its update and the retry applied it twice; and the
 * gradient message the failed step posted but never received stayed flagged, so later steps could
 * read a gradient buffer before it was rewritten. */
static void test_failed_step_retried_is_a_clean_step(void)
{
    bt_graph *g = flaky_graph();
    const int balance[2] = {2, 4};
    bt_engine_params p;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.parallel.balance[0] = balance[0], p.parallel.balance[1] = balance[1];
    for (int clip = 0; clip < 2; clip++) {
        p.clip_norm = clip ? 1e3 : 0;
        bt_engine *clean = NULL, *retried = NULL;
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &clean) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &retried) == BT_OK);
        bt_step_result rc, rr;
        for (int step = 0; step < 6; step++) {
            batch_data b;
            make_batch(&b, 300 + (unsigned)step);
            slow_armed = step == 1 || step == 2; /* the retry and the step after: the last stage lags */
            CU_ASSERT_FATAL(bt_engine_train_step(clean, b.feeds, 2, &rc) == BT_OK);
            if (step == 1) {
                flaky_armed = 1;
                bt_status st = bt_engine_train_step(retried, b.feeds, 2, &rr);
                CU_ASSERT_EQUAL(st, BT_ERR_BACKEND);
                CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "planned failure"));
                CU_ASSERT_EQUAL(bt_engine_step(retried), 1);
            }
            CU_ASSERT_FATAL(bt_engine_train_step(retried, b.feeds, 2, &rr) == BT_OK);
            CU_ASSERT(memcmp(&rc.loss, &rr.loss, sizeof rc.loss) == 0);
        }
        slow_armed = 0;
        CU_ASSERT_EQUAL(bt_engine_step(retried), 6);
        if (!same_weights(g, clean, retried)) printf("  (clip %d)\n", clip);
        CU_ASSERT(same_weights(g, clean, retried));
        bt_engine_destroy(clean);
        bt_engine_destroy(retried);
    }
    bt_graph_destroy(g);
}

/* A NaN in the samples fed through the C API reaches the gradients: the step stops before any
 * update, naming the step, the stage and the first parameter whose gradient is not finite, and
 * every weight stays as it was. Before, the update went ahead and wrote NaN into the weights. */
static void test_nonfinite_gradient_stops_the_step(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    bt_engine *e = NULL, *ref = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &ref) == BT_OK);
    batch_data b;
    make_batch(&b, 5);
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_train_step(ref, b.feeds, 2, NULL) == BT_OK);
    const float bad[] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        batch_data poisoned = b;
        poisoned.feeds[0].data = poisoned.x, poisoned.feeds[1].data = poisoned.label;
        poisoned.x[IN * 11 + 3] = bad[k]; /* sample 11: micro-batch 1 */
        bt_step_result r;
        bt_status st = bt_engine_train_step(e, poisoned.feeds, 2, &r);
        CU_ASSERT_EQUAL(st, BT_ERR_NUMERIC);
        const char *msg = bt_last_error();
        if (!strstr(msg, "step 2, stage 0 (cpu:0): the gradient of 'fc1.weight' is not finite"))
            printf("\n  %s\n", msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "step 2, stage 0 (cpu:0): the gradient of 'fc1.weight' is not finite"));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "no stage applied the update"));
        CU_ASSERT_EQUAL(bt_engine_step(e), 1);
        CU_ASSERT(same_weights(g, e, ref));
    }
    /* the engine stays usable: a clean batch trains as if nothing had happened */
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_train_step(ref, b.feeds, 2, NULL) == BT_OK);
    CU_ASSERT(same_weights(g, e, ref));
    bt_engine_destroy(e);
    bt_engine_destroy(ref);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"pipeline matches single stage (p 1-4, m 1-8, gpipe and 1f1b)", test_pipeline_matches_single_stage},
        {"activation memory follows the schedule", test_activation_memory_follows_schedule},
        {"watchdog reports a stuck transfer", test_watchdog_reports_stuck_transfer},
        {"C API and YAML give bit-identical results", test_c_api_and_yaml_bit_identical},
        {"engine gradients match finite differences (f64)", test_engine_gradients_match_finite_differences},
        {"clipping uses the global norm across stages", test_clipping_uses_the_global_norm},
        {"time accounting", test_time_accounting},
        {"a plan too big for memory is refused", test_plan_too_big_is_refused},
        {"bad configurations are rejected", test_bad_configurations_rejected},
        {"admission counts what is allocated", test_admission_counts_what_is_allocated},
        {"a failed thread binding is the worker's error", test_bind_failure_is_the_workers_error},
        {"a failed step, retried, is a clean step", test_failed_step_retried_is_a_clean_step},
        {"a non-finite gradient stops the step before any update", test_nonfinite_gradient_stops_the_step},
        {NULL, NULL}};
    return bt_test_main("engine", cases);
}
