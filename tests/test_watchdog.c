/* tests/test_watchdog.c: the watchdog always ends a stuck run. Its value is checked when the
 * engine is created (NaN, infinities, negatives and values past BT_WATCHDOG_MAX_S are refused; 0
 * is the default); a channel wait given an unrepresentable timeout still returns once the message
 * is posted (it used to spin forever holding the mutex the sender needs); and a stage stuck
 * inside a kernel (a custom op that sleeps far longer than the watchdog) makes
 * bt_engine_train_step return BT_ERR_TIMEOUT within the watchdog plus one second, naming the
 * stage, after which the engine refuses every call and destroying it neither hangs nor crashes.
 * Beside the watchdog, one concurrency rule of the CPU backend: OpenBLAS has one thread count per
 * process, so CPU devices open at the same time must share it (a different count is refused,
 * where it used to be overwritten by whichever worker thread started last). */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "baton.h"
#include "bt_test.h"
#include "engine_runs.h"
#include "cpu/blas.h"
#include "exec/exec_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- the value ------------------------------------------------------------------------------- */

static bt_graph *small_graph(void)
{
    return bt_test_residual_graph(IN, 8, CLASSES);
}

static void test_watchdog_value_is_checked(void)
{
    bt_graph *g = small_graph();
    const double bad[] = {NAN, INFINITY, -INFINITY, -1, 1.0000001e9, 1e19, 1e300};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        bt_engine_params p;
        bt_engine *e = NULL;
        engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
        p.watchdog_s = bad[i];
        bt_status st = bt_engine_create(g, &p, &e);
        if (st != BT_ERR_INVALID_ARG) printf("\n  watchdog_s %g accepted\n", bad[i]);
        CU_ASSERT_EQUAL(st, BT_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NULL(e);
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "watchdog_s"));
        bt_engine_destroy(e);
    }
    const double good[] = {0, 1e-3, 60, BT_WATCHDOG_MAX_S};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        bt_engine_params p;
        bt_engine *e = NULL;
        engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
        p.watchdog_s = good[i];
        CU_ASSERT_EQUAL_FATAL(bt_engine_create(g, &p, &e), BT_OK);
        if (good[i] >= 1) { /* 1 ms might fire on a loaded machine */
            batch_data b;
            make_batch(&b, 5);
            CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, NULL), BT_OK);
        }
        bt_engine_destroy(e);
    }
    bt_graph_destroy(g);
}

/* ---- a channel wait with a timeout no timespec can hold -------------------------------------- */

typedef struct wait_job {
    bt_engine *e;
    bt_channel *ch;
    double timeout_s;
    bt_status status;
    atomic_int done;
} wait_job;

static void *waiter(void *arg)
{
    wait_job *j = arg;
    j->status = bt_channel_wait(j->e, j->ch, 0, j->timeout_s);
    atomic_store(&j->done, 1);
    return NULL;
}

static void *poster(void *arg)
{
    wait_job *j = arg;
    sleep_s(0.05);
    bt_channel_post(j->ch, 0);
    return NULL;
}

static void test_unrepresentable_timeout_still_waits(void)
{
    bt_graph *g = small_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    CU_ASSERT_FATAL(e->n_channels > 0);
    const double timeouts[] = {INFINITY, 1e300, 1e19, NAN};
    int hung = 0;
    for (size_t i = 0; i < sizeof timeouts / sizeof *timeouts; i++) {
        wait_job j = {.e = e, .ch = &e->channels[0], .timeout_s = timeouts[i]};
        atomic_init(&j.done, 0);
        pthread_t tw, tp;
        int post = !isnan(timeouts[i]);
        CU_ASSERT_FATAL(pthread_create(&tw, NULL, waiter, &j) == 0);
        if (post) CU_ASSERT_FATAL(pthread_create(&tp, NULL, poster, &j) == 0);
        double t0 = now_s();
        while (!atomic_load(&j.done) && now_s() - t0 < 5) sleep_s(0.005);
        if (!atomic_load(&j.done)) {
            printf("\n  a wait with timeout %g never returned\n", timeouts[i]);
            CU_FAIL("the channel wait hung");
            hung = 1; /* the threads are stuck on the channel: leave everything as it is */
            break;
        }
        pthread_join(tw, NULL);
        if (post) pthread_join(tp, NULL);
        /* a posted message is taken; NaN (no sender) counts as no time at all */
        CU_ASSERT_EQUAL(j.status, post ? BT_OK : BT_ERR_TIMEOUT);
    }
    if (!hung) {
        bt_engine_destroy(e);
        bt_graph_destroy(g);
    }
}

/* ---- a stage stuck inside a kernel ------------------------------------------------------------ */

/* test.stall: the identity, whose forward blocks while `stall` is set (at most 30 s). */
static atomic_int stall, stalled_calls, returned_calls;

static bt_status stall_infer(bt_infer_ctx *ctx)
{
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), bt_infer_input_dtype(ctx, 0));
}

static bt_status stall_forward(const bt_op_call *call)
{
    if (atomic_load(&stall)) {
        atomic_fetch_add(&stalled_calls, 1);
        double t0 = now_s();
        while (atomic_load(&stall) && now_s() - t0 < 30) sleep_s(0.002);
        atomic_fetch_add(&returned_calls, 1);
    }
    memcpy(call->out->data, call->in[0].data, (size_t)bt_tensor_numel(call->out) * sizeof(float));
    return BT_OK;
}

static bt_status stall_backward(const bt_op_call *call)
{
    const float *dy = call->out_grad->data;
    float *dx = call->in_grad[0].data;
    if (dx)
        for (int64_t i = 0; i < bt_tensor_numel(call->out_grad); i++) dx[i] += dy[i];
    return BT_OK;
}

static void register_stall(void)
{
    if (bt_op_find("test.stall")) return;
    bt_op_def d = {.name = "test.stall", .min_inputs = 1, .max_inputs = 1, .infer = stall_infer,
                   .cpu_forward = stall_forward, .cpu_backward = stall_backward};
    CU_ASSERT_FATAL(bt_op_register(&d) == BT_OK);
}

/* x -> fc1 -> stall -> head -> loss(head, label) */
static bt_graph *stall_graph(void)
{
    register_stall();
    const chain_layer layers[] = {{"fc1", "linear", "tanh", 8}, {"stall", "test.stall", NULL, 0}};
    return chain_graph(layers, 2);
}

/* LeakSanitizer's switch (weak: absent outside sanitizer builds). An abandoned engine is leaked
 * by design (docs/c-api.md): what this thread allocates for it is marked reachable, so the
 * sanitizer job reports every other leak and not this one. */
void __lsan_disable(void) __attribute__((weak));
void __lsan_enable(void) __attribute__((weak));

static void stuck_kernel_case(int stages)
{
    bt_graph *g = stall_graph();
    bt_engine_params p;
    bt_engine *e = NULL;
    engine_params(&p, stages, 2, BT_SCHEDULE_1F1B);
    p.parallel.n_balance = stages;
    p.parallel.balance[0] = stages == 1 ? 4 : 2; /* fc1 and stall on stage 0 */
    p.parallel.balance[1] = 2;
    const double watchdog = 0.5;
    p.watchdog_s = watchdog;
    p.threads = 1; /* an abandoned engine keeps its claim on the BLAS thread count */
    if (__lsan_disable) __lsan_disable();
    bt_status made = bt_engine_create(g, &p, &e);
    if (__lsan_enable) __lsan_enable();
    CU_ASSERT_FATAL(made == BT_OK);
    batch_data b;
    make_batch(&b, 9);
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK); /* healthy first */

    atomic_store(&stall, 1);
    atomic_store(&stalled_calls, 0);
    atomic_store(&returned_calls, 0);
    double t0 = now_s();
    bt_status st = bt_engine_train_step(e, b.feeds, 2, NULL);
    double waited = now_s() - t0;
    CU_ASSERT_EQUAL(st, BT_ERR_TIMEOUT);
    const char *msg = bt_last_error();
    if (!strstr(msg, "(0F0)")) printf("\n  message: %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "watchdog: after"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "stage 0 (cpu:0) is stuck in instruction"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "(0F0)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "unusable"));
    if (waited > watchdog + 1) printf("\n  the step took %.2f s with a %.1f s watchdog\n", waited, watchdog);
    CU_ASSERT(waited <= watchdog + 1);
    CU_ASSERT_EQUAL(atomic_load(&stalled_calls), 1);
    CU_ASSERT_EQUAL(atomic_load(&returned_calls), 0); /* it really was still stuck */

    /* the engine refuses everything that would touch the stuck stage's state */
    CU_ASSERT_EQUAL(bt_engine_train_step(e, b.feeds, 2, NULL), BT_ERR_TIMEOUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "unusable"));
    float w[8 * IN];
    CU_ASSERT_EQUAL(bt_engine_read_param(e, "fc1.weight", w, sizeof w), BT_ERR_TIMEOUT);
    CU_ASSERT_EQUAL(bt_engine_forward(e, b.feeds, 2, NULL, NULL), BT_ERR_TIMEOUT);
    CU_ASSERT_EQUAL(bt_engine_set_step(e, 3), BT_ERR_TIMEOUT);
    CU_ASSERT_EQUAL(atomic_load(&stalled_calls), 1); /* nothing ran again */

    /* destroy returns at once although the worker is still stuck */
    t0 = now_s();
    bt_engine_destroy(e);
    CU_ASSERT(now_s() - t0 < 1.0);
    CU_ASSERT_EQUAL(atomic_load(&returned_calls), 0);

    /* the kernel returns at last: its abandoned worker leaves without touching the graph */
    atomic_store(&stall, 0);
    for (int i = 0; i < 1000 && atomic_load(&returned_calls) == 0; i++) sleep_s(0.002);
    CU_ASSERT_EQUAL(atomic_load(&returned_calls), 1);
    sleep_s(0.1);
    bt_graph_destroy(g);
}

static void test_stuck_kernel_two_stages(void) { stuck_kernel_case(2); }

static void test_stuck_kernel_one_stage(void) { stuck_kernel_case(1); }

/* ---- one BLAS thread count ------------------------------------------------------------------- */

/* f32 GEMMs on oneDNN (the default where the build has it): every device keeps its own count, so
 * engines with different counts coexist and both train. */
static void devices_keep_their_counts(bt_graph *g)
{
    bt_engine_params p;
    bt_engine *a = NULL, *b = NULL;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.threads = 1;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &a) == BT_OK);
    p.threads = 2;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &b) == BT_OK);
    batch_data d;
    make_batch(&d, 4);
    bt_gemm_f32_threads_seen(1);
    CU_ASSERT_EQUAL(bt_engine_train_step(a, d.feeds, 2, NULL), BT_OK);
    CU_ASSERT_EQUAL(bt_gemm_f32_threads_seen(1), 1);
    CU_ASSERT_EQUAL(bt_engine_train_step(b, d.feeds, 2, NULL), BT_OK);
    CU_ASSERT_EQUAL(bt_gemm_f32_threads_seen(1), 2);
    bt_engine_destroy(a);
    bt_engine_destroy(b);
}

/* The OpenBLAS path (BATON_CPU_F32=openblas, which tests/cpu_bf16_paths.sh runs this program
 * with): one count per process, later devices must ask for it. */
static void test_cpu_devices_share_one_blas_thread_count(void)
{
    bt_graph *g = small_graph();
    if (bt_cpu_f32_onednn()) {
        printf("\n  f32 GEMMs on oneDNN: each device keeps its count (the OpenBLAS rule runs under "
               "BATON_CPU_F32=openblas)");
        devices_keep_their_counts(g);
        bt_graph_destroy(g);
        return;
    }
    bt_engine_params p;
    bt_engine *a = NULL, *b = NULL, *c = NULL;
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.threads = 1;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &a) == BT_OK);
    p.threads = 2;
    bt_status st = bt_engine_create(g, &p, &b);
    CU_ASSERT_EQUAL(st, BT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(b);
    if (st != BT_OK) {
        const char *msg = bt_last_error();
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "OpenBLAS has one thread count per process"));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "already open use 1: cannot open one with 2"));
    }
    bt_engine_destroy(b);
    p.threads = 0; /* automatic: takes the count in effect (alone, one stage would get every core) */
    p.parallel.stages = 1, p.parallel.n_balance = 1, p.parallel.balance[0] = 7;
    p.parallel.devices = "cpu:0";
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &c), BT_OK);
    batch_data d;
    make_batch(&d, 4);
    CU_ASSERT_EQUAL(bt_engine_train_step(a, d.feeds, 2, NULL), BT_OK);
    CU_ASSERT_EQUAL(bt_engine_train_step(c, d.feeds, 2, NULL), BT_OK);
    bt_engine_destroy(a);
    bt_engine_destroy(c);
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.threads = 2; /* once no device holds it, the count may change */
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &b), BT_OK);
    bt_engine_destroy(b);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"the watchdog's value is checked", test_watchdog_value_is_checked},
        {"a wait with an unrepresentable timeout still returns", test_unrepresentable_timeout_still_waits},
        {"CPU devices share one BLAS thread count (OpenBLAS), or keep their own (oneDNN)",
         test_cpu_devices_share_one_blas_thread_count},
        {"a kernel stuck on stage 0 of 2 ends the step", test_stuck_kernel_two_stages},
        {"a kernel stuck on the only stage ends the step", test_stuck_kernel_one_stage},
        {NULL, NULL}};
    return bt_test_main("watchdog", cases);
}
