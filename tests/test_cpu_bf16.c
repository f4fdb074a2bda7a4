/* tests/test_cpu_bf16.c: bf16 matrix products on the CPU (cpu/gemm_bf16.c) against the f32
 * reference, on whichever path this process runs: tests/cpu_bf16_paths.sh runs it again with
 * BATON_CPU_BF16=f32 and (where the CPU has them) avx512_bf16 and amx, so a machine with AMX
 * checks all three and one without AMX checks the fallbacks it has.
 *   - the path is the one the CPU offers (/proc/cpuinfo's amx_bf16, avx512_bf16) or the one forced;
 *   - bt_gemm_at under bf16, every transpose, alpha and beta, odd sizes: within the bound of f32
 *     accumulation of exact products, |C - ref| <= (k + 2) 2^-23 sum_p |alpha a_ip b_pj| +
 *     2^-23 |beta c0|, against a double reference over the same bf16 operands; on the f32 path it
 *     is bt_sgemm bit for bit;
 *   - linear's bias added in the GEMM's epilogue equals the unfused bias-then-GEMM within one
 *     rounding of the final add;
 *   - the thread count of each call is the device's: an engine with `threads` 1, then 2, runs its
 *     bf16 GEMMs with exactly that many threads (native paths), and its f32 GEMMs too where they
 *     run on oneDNN (BATON_CPU_F32, cpu/gemm_f32.c), with one stage and with two at once;
 *   - a bf16 training run stays within bf16 tolerances of the f32 run (losses within 2%,
 *     logits of the trained model within 3% of their scale), and the pipelined bf16 run equals
 *     the one-stage bf16 run bit for bit (same GEMM shapes on each stage);
 *   - weights are converted to bf16 once per update (4 weights, 3 steps, 4 micro-batches on 2
 *     stages: 4 conversions by the first GEMMs, then 12 rewritten in place as each update's
 *     refresh writes the compute copies), and the run equals one that converts them at every
 *     GEMM. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "core/cpu_isa.h"
#include "core/half.h"
#include "backend/backend.h"
#include "cpu/blas.h"
#include "engine_runs.h"

static int cpu_has(const char *flag)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            for (char *tok = strtok(line, " \t\n"); tok && !found; tok = strtok(NULL, " \t\n"))
                found = strcmp(tok, flag) == 0;
            break;
        }
    fclose(f);
    return found;
}

static const char *forced(void)
{
    const char *w = getenv("BATON_CPU_BF16");
    return w && *w ? w : "auto";
}

static void test_path_is_the_cpus(void)
{
    const char *want = forced();
    /* BATON_CPU_ISA=avx2 (core/cpu_isa.c) hides both from oneDNN, as on an AVX2-only CPU */
    const int capped = bt_cpu_isa_capped();
    const int amx = !capped && cpu_has("amx_bf16"), avx = !capped && cpu_has("avx512_bf16");
    const bt_status st = bt_cpu_bf16_init();
    const char *desc = bt_cpu_bf16_describe();
    printf("\n  BATON_CPU_BF16=%s, cpu: amx_bf16 %d, avx512_bf16 %d: %s\n", want, amx, avx, desc);
#ifdef BATON_HAVE_DNNL
    if (strcmp(want, "amx") == 0 && !amx) {
        CU_ASSERT(st == BT_ERR_UNSUPPORTED);
        CU_ASSERT(strstr(bt_last_error(), "BATON_CPU_BF16=amx") != NULL);
        return;
    }
    if (strcmp(want, "avx512_bf16") == 0 && !avx) {
        CU_ASSERT(st == BT_ERR_UNSUPPORTED);
        return;
    }
    CU_ASSERT_FATAL(st == BT_OK);
    if (strcmp(want, "f32") == 0) {
        CU_ASSERT(!bt_cpu_bf16_native());
        CU_ASSERT(strstr(desc, "f32") != NULL);
    } else if (strcmp(want, "avx512_bf16") == 0 || (strcmp(want, "auto") == 0 && !amx && avx)) {
        CU_ASSERT(bt_cpu_bf16_native());
        CU_ASSERT(strstr(desc, "AVX512-BF16") != NULL);
    } else if (amx) {
        CU_ASSERT(bt_cpu_bf16_native());
        CU_ASSERT(strstr(desc, "AMX") != NULL);
    } else {
        CU_ASSERT(!bt_cpu_bf16_native());
    }
#else
    const int can = strcmp(want, "auto") == 0 || strcmp(want, "f32") == 0;
    CU_ASSERT(st == (can ? BT_OK : BT_ERR_UNSUPPORTED));
    CU_ASSERT(!bt_cpu_bf16_native());
#endif
}

static float rand_bf16(void) { return bt_round_bf16((float)rand() / RAND_MAX * 4 - 2); }

/* One bf16 GEMM against the double reference, with leading dimensions larger than needed. */
/* prec BT_BF16 (bf16 operands) or BT_F32 (any f32 values: the f32 path, oneDNN's matmul or
 * OpenBLAS), on `threads` threads; with bias, through bt_gemm_bias (alpha 1, beta 0, relu). */
static void check_gemm_at(bt_dtype prec, int threads, int ta, int tb, int m, int n, int k, float alpha,
                          float beta, int with_bias)
{
    const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    const int rows_a = ta ? k : m, rows_b = tb ? n : k;
    float *a = malloc(sizeof(float) * (size_t)rows_a * lda);
    float *b = malloc(sizeof(float) * (size_t)rows_b * ldb);
    float *c = malloc(sizeof(float) * (size_t)m * ldc);
    float *c0 = malloc(sizeof(float) * (size_t)m * ldc);
    float *c_ref = malloc(sizeof(float) * (size_t)m * ldc);
    float *bias = malloc(sizeof(float) * (size_t)n);
    const float f32_bits = prec == BT_F32 ? 1.0f / 3 : 1.0f; /* f32 operands: not bf16 values */
    for (int i = 0; i < rows_a * lda; i++) a[i] = rand_bf16() * f32_bits;
    for (int i = 0; i < rows_b * ldb; i++) b[i] = rand_bf16() * f32_bits;
    for (int j = 0; j < n; j++) bias[j] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < m * ldc; i++) c0[i] = (float)rand() / RAND_MAX - 0.5f;
    memcpy(c, c0, sizeof(float) * (size_t)m * ldc);
    memcpy(c_ref, c0, sizeof(float) * (size_t)m * ldc);
    if (with_bias) {
        alpha = 1, beta = 0;
        bt_gemm_bias(prec, threads, 0, ta, tb, m, n, k, a, lda, b, ldb, bias, 1, c, ldc);
    } else {
        bt_gemm_at(prec, threads, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    }
    CU_ASSERT(bt_gemm_take_error() == BT_OK);
    int bad = 0, pad_touched = 0;
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            double sum = 0, abs_sum = 0;
            for (int p = 0; p < k; p++) {
                const double x = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                const double y = tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                sum += x * y;
                abs_sum += fabs(alpha * x * y);
            }
            const double c_in = with_bias ? bias[j] : c0[(size_t)i * ldc + j];
            double ref = alpha * sum + (with_bias ? c_in : beta * c_in);
            if (with_bias && ref < 0) ref = 0;
            const double tol = (k + 2) * ldexp(abs_sum, -23) + ldexp(fabs(c_in), -23) + 1e-30;
            if (fabs(c[(size_t)i * ldc + j] - ref) > tol) {
                if (bad < 3)
                    printf("\n  %s, %d thread(s), ta %d tb %d %dx%dx%d alpha %g beta %g%s: C[%d,%d] = %.9g, "
                           "reference %.9g (tolerance %.3g)", bt_dtype_name(prec), threads, ta, tb, m, n,
                           k, alpha, beta, with_bias ? " bias relu" : "", i, j, c[(size_t)i * ldc + j],
                           ref, tol);
                bad++;
            }
        }
        for (int j = n; j < ldc; j++) pad_touched |= c[(size_t)i * ldc + j] != c0[(size_t)i * ldc + j];
    }
    CU_ASSERT(bad == 0);
    CU_ASSERT(!pad_touched);
    if (prec == BT_BF16 && !with_bias && !bt_cpu_bf16_native()) { /* the f32 path is sgemm itself */
        bt_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c_ref, ldc);
        CU_ASSERT(memcmp(c, c_ref, sizeof(float) * (size_t)m * ldc) == 0);
    }
    free(a);
    free(b);
    free(c);
    free(c0);
    free(c_ref);
    free(bias);
}

static void check_gemm(int ta, int tb, int m, int n, int k, float alpha, float beta)
{
    check_gemm_at(BT_BF16, 1, ta, tb, m, n, k, alpha, beta, 0);
}

static void test_gemm_against_reference(void)
{
    if (bt_cpu_bf16_init() != BT_OK) return; /* the forced path is refused: test_path_is_the_cpus */
    srand(7);
    const int sizes[][3] = {{1, 1, 1}, {37, 53, 61}, {64, 128, 256}, {256, 96, 300}, {5, 700, 33}};
    const float ab[][2] = {{1, 0}, {1, 1}, {0.5f, 0.25f}};
    for (int s = 0; s < 5; s++)
        for (int t = 0; t < 4; t++)
            for (int x = 0; x < 3; x++)
                check_gemm(t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2], ab[x][0], ab[x][1]);
}

/* f32 GEMMs (oneDNN's matmul primitive on the default path, OpenBLAS under
 * BATON_CPU_F32=openblas) against a double reference: every transpose, strides wider than the
 * rows, alpha and beta, the bias and relu epilogue, on 1 and 2 threads. */
static void test_f32_gemm_against_reference(void)
{
    if (bt_cpu_f32_init() != BT_OK) { /* a forced path the build lacks: devices refuse it */
        printf("\n  not run: %s", bt_last_error());
        return;
    }
    srand(11);
    const int sizes[][3] = {{1, 1, 1}, {37, 53, 61}, {256, 96, 300}, {5, 700, 33}};
    const float ab[][2] = {{1, 0}, {1, 1}, {0.5f, 0.25f}};
    for (int threads = 1; threads <= 2; threads++)
        for (int s = 0; s < 4; s++)
            for (int t = 0; t < 4; t++) {
                for (int x = 0; x < 3; x++)
                    check_gemm_at(BT_F32, threads, t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2],
                                  ab[x][0], ab[x][1], 0);
                check_gemm_at(BT_F32, threads, t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2], 1, 0, 1);
            }
}

/* The bias added in the GEMM's epilogue (bt_gemm_bias) against the unfused pair: rows set to
 * the bias, then the product added with beta 1. The same sums, so equal within one rounding of
 * the final add (|d| <= 2^-23 (|C| + |bias|)); the run reports whether they were identical. */
static void test_fused_bias_equals_unfused(void)
{
    if (bt_cpu_bf16_init() != BT_OK) return;
    srand(11);
    const int m = 67, n = 130, k = 200;
    float *x = malloc(sizeof(float) * m * k), *w = malloc(sizeof(float) * n * k);
    float *bias = malloc(sizeof(float) * n), *fused = malloc(sizeof(float) * m * n);
    float *plain = malloc(sizeof(float) * m * n);
    for (int i = 0; i < m * k; i++) x[i] = rand_bf16();
    for (int i = 0; i < n * k; i++) w[i] = rand_bf16();
    for (int i = 0; i < n; i++) bias[i] = (float)rand() / RAND_MAX - 0.5f;
    bt_gemm_bias(BT_BF16, 1, BT_GEMM_PARAM_B, 0, 1, m, n, k, x, k, w, k, bias, 0, fused, n);
    CU_ASSERT(bt_gemm_take_error() == BT_OK);
    for (int r = 0; r < m; r++) memcpy(plain + r * n, bias, sizeof(float) * n);
    bt_gemm_at(BT_BF16, 1, 0, 1, m, n, k, 1, x, k, w, k, 1, plain, n);
    int bad = 0, identical_bits = memcmp(fused, plain, sizeof(float) * m * n) == 0;
    for (int i = 0; i < m * n; i++)
        bad += fabs((double)fused[i] - plain[i]) > ldexp(fabs((double)plain[i]) + fabs((double)bias[i % n]), -23);
    printf("\n  fused bias vs unfused: %s", identical_bits ? "identical" : "within one rounding");
    CU_ASSERT(bad == 0);
    free(x), free(w), free(bias), free(fused), free(plain);
}

/* A wider model than residual_graph, so its GEMMs are worth threads. */
static bt_graph *wide_graph(void)
{
    return bt_test_residual_graph(IN, 256, CLASSES);
}

static void test_threads_per_device(void)
{
    if (bt_cpu_bf16_init() != BT_OK) return;
    bt_graph *g = wide_graph();
    for (int threads = 1; threads <= 2; threads++) {
        bt_engine_params p;
        run_result r;
        engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
        p.precision = BT_BF16;
        p.threads = threads;
        bt_gemm_bf16_threads_seen(1);
        run_three_steps(g, &p, &r);
        const int seen = bt_gemm_bf16_threads_seen(0);
        printf("\n  threads %d: bf16 GEMMs ran with at most %d", threads, seen);
        CU_ASSERT(seen == (bt_cpu_bf16_native() ? threads : 0));
        free_result(&r);
    }
    bt_graph_destroy(g);
}

static void test_training_bf16_against_f32(void)
{
    if (bt_cpu_bf16_init() != BT_OK) return;
    bt_graph *g = wide_graph();
    bt_engine_params p;
    run_result f32, bf16, piped;
    engine_params(&p, 1, 2, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &f32);
    p.precision = BT_BF16;
    run_three_steps(g, &p, &bf16);
    for (int s = 0; s < 3; s++) {
        printf("\n  step %d loss: f32 %.6f, bf16 %.6f", s, f32.loss[s], bf16.loss[s]);
        CU_ASSERT(close_rel(bf16.loss[s], f32.loss[s], 0.02));
    }
    double worst = 0;
    for (int i = 0; i < f32.n; i++)
        worst = fmax(worst, tensor_rel_error(bf16.params[i], f32.params[i], f32.sizes[i] / sizeof(float)));
    printf("\n  parameters after 3 steps: largest error %.4f of the tensor's scale", worst);
    CU_ASSERT(worst < 0.05);

    /* Pipelined = one stage, bit for bit, at the same threads per stage: each stage runs the
     * one-stage run's GEMMs on the same shapes. Across thread counts it holds only within the
     * sums' rounding: OpenBLAS's sgemm (the bf16 path on a CPU without native bf16 under
     * BATON_CPU_F32=openblas) gives other bits at 2 threads than at 1 on its Haswell kernels for
     * almost every shape, and on SkylakeX for K above its block of 384 (docs/architecture.md, "The
     * CPU backend"). The one-stage run above had both cores; the pipeline has one each. */
    run_result one_thread;
    engine_params(&p, 1, 2, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    p.threads = 1;
    run_three_steps(g, &p, &one_thread);
    engine_params(&p, 2, 2, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    p.threads = 1;
    run_three_steps(g, &p, &piped);
    CU_ASSERT(identical(&piped, &one_thread));
    double thread_err = 0;
    for (int i = 0; i < bf16.n; i++)
        thread_err = fmax(thread_err, tensor_rel_error(one_thread.params[i], bf16.params[i],
                                                       bf16.sizes[i] / sizeof(float)));
    printf("\n  one stage at 1 thread and at 2: %s (largest difference %.2g of the tensor's scale)",
           identical(&one_thread, &bf16) ? "identical" : "within rounding", thread_err);
    CU_ASSERT(thread_err < 1e-3);
    free_result(&one_thread);

    /* the logits of the same weights, forward in f32 and in bf16 */
    bt_engine *e32 = NULL, *e16 = NULL;
    engine_params(&p, 1, 1, BT_SCHEDULE_1F1B);
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e32) == BT_OK);
    p.precision = BT_BF16;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e16) == BT_OK);
    batch_data b;
    make_batch(&b, 9);
    float l32[BATCH * CLASSES], l16[BATCH * CLASSES];
    CU_ASSERT_FATAL(bt_engine_forward_layer(e32, b.feeds, 2, "head", l32, NULL) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_forward_layer(e16, b.feeds, 2, "head", l16, NULL) == BT_OK);
    const double logit_err = tensor_rel_error(l16, l32, BATCH * CLASSES);
    printf("\n  logits: bf16 within %.4f of the f32 scale", logit_err);
    CU_ASSERT(logit_err < 0.03);
    CU_ASSERT(logit_err > 0); /* bf16 really rounds */
    bt_engine_destroy(e32);
    bt_engine_destroy(e16);
    free_result(&f32);
    free_result(&bf16);
    free_result(&piped);
    bt_graph_destroy(g);
}

/* f32 GEMMs on oneDNN run on each device's own count, with one stage or two at once (OpenBLAS's
 * one process-wide count would make two stages share it); on the OpenBLAS path none run there. */
static void test_f32_threads_per_device(void)
{
    const char *want = getenv("BATON_CPU_F32");
    const bt_status st = bt_cpu_f32_init();
    printf("\n  BATON_CPU_F32=%s: %s", want ? want : "(unset)", bt_cpu_f32_describe());
    if (st != BT_OK) { /* only a forced oneDNN in a build without it */
        CU_ASSERT(want && strcmp(want, "openblas") != 0);
        return;
    }
#ifdef BATON_HAVE_DNNL
    CU_ASSERT(bt_cpu_f32_onednn() == !(want && strcmp(want, "openblas") == 0));
#endif
    if (bt_cpu_bf16_init() != BT_OK) return; /* a forced bf16 path this CPU lacks: devices refuse */
    bt_graph *g = wide_graph();
    for (int stages = 1; stages <= 2; stages++)
        for (int threads = 1; threads <= 2; threads++) {
            bt_engine_params p;
            run_result r;
            engine_params(&p, stages, 2, BT_SCHEDULE_1F1B);
            p.threads = threads;
            bt_gemm_f32_threads_seen(1);
            run_three_steps(g, &p, &r);
            const int seen = bt_gemm_f32_threads_seen(0);
            printf("\n  %d stage(s), threads %d: f32 GEMMs on oneDNN ran with at most %d", stages,
                   threads, seen);
            CU_ASSERT(seen == (bt_cpu_f32_onednn() ? threads : 0));
            free_result(&r);
        }
    bt_graph_destroy(g);
}

/* Weights are converted to bf16 once per update, not once per micro-batch and GEMM, and the kept
 * conversions never outlive a change of the weights: the run equals one that converts every time. */
static void test_weights_converted_once_per_update(void)
{
    if (bt_cpu_bf16_init() != BT_OK) return;
    bt_graph *g = wide_graph();
    bt_engine_params p;
    run_result kept, fresh;
    engine_params(&p, 2, 4, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    const long long before = bt_gemm_bf16_conversions(), before_r = bt_gemm_bf16_refreshes();
    run_three_steps(g, &p, &kept);
    const long long made = bt_gemm_bf16_conversions() - before;
    const long long refreshed = bt_gemm_bf16_refreshes() - before_r;
    printf("\n  3 steps of 4 micro-batches: %lld weight conversions, %lld refreshed in place", made,
           refreshed);
    /* fc1, fc2, fc3, head: converted at their first GEMM, then rewritten by each step's refresh */
    CU_ASSERT(made == (bt_cpu_bf16_native() ? 4 : 0));
    CU_ASSERT(refreshed == (bt_cpu_bf16_native() ? 4 * 3 : 0));
    bt_gemm_bf16_param_cache(0);
    run_three_steps(g, &p, &fresh);
    bt_gemm_bf16_param_cache(1);
    CU_ASSERT(bt_gemm_bf16_conversions() - before == made);
    CU_ASSERT(identical(&kept, &fresh));
    free_result(&kept);
    free_result(&fresh);
    bt_graph_destroy(g);
}

/* The backend's round_copy rewrites the kept bf16 copies of the weights it writes, block by
 * block (cpu/bf16_params.h), on 1, 2 and 3 threads: two weights packed in one array at an odd
 * offset, large enough for several blocks. After new values are written, GEMMs reading the kept
 * copies (no new conversion) equal GEMMs converting the operand afresh, bit for bit, and differ
 * from the products before the write. */
static void test_round_copy_refreshes_kept_weights(void)
{
    /* no kept copies to refresh: said, not passed in silence (a forced path this CPU lacks is
     * refused at init, which the init test checks) */
    if (bt_cpu_bf16_init() != BT_OK) {
        printf("\n  not run: %s", bt_last_error());
        return;
    }
    if (!bt_cpu_bf16_native()) {
        printf("\n  not run: this CPU has no native bf16 path (%s), so GEMMs keep no bf16 weights",
               bt_cpu_bf16_describe());
        return;
    }
    enum { M = 8, K1 = 300, N1 = 200, K2 = 150, N2 = 101, AT2 = K1 * N1 + 3, TOTAL = AT2 + K2 * N2 + 5 };
    float *src = malloc(TOTAL * sizeof *src), *w = malloc(TOTAL * sizeof *w);
    float *x = malloc(M * K1 * sizeof *x), *before = malloc(M * N1 * sizeof *before);
    float *kept = malloc(M * N1 * sizeof *kept), *fresh = malloc(M * N1 * sizeof *fresh);
    CU_ASSERT_PTR_NOT_NULL_FATAL(src && w && x && before && kept && fresh);
    for (int i = 0; i < M * K1; i++) x[i] = bt_round_bf16((float)((i * 37) % 19) / 19.0f - 0.5f);
    const bt_backend *be = bt_cpu_backend();
    for (int threads = 1; threads <= 3; threads++) {
        bt_device *dev = NULL;
        CU_ASSERT_FATAL(be->open(0, -threads, &dev) == BT_OK);
        for (int i = 0; i < TOTAL; i++) src[i] = (float)((i * 7919u) % 1000) / 997.0f - 0.5f;
        CU_ASSERT(be->round_copy(dev, BT_BF16, w, src, TOTAL) == BT_OK);
        const float *w2 = w + AT2;
        const long long conv0 = bt_gemm_bf16_conversions(), ref0 = bt_gemm_bf16_refreshes();
        bt_gemm_param(BT_BF16, threads, BT_GEMM_PARAM_B, 0, 0, M, N1, K1, 1, x, K1, w, N1, 0, before, N1);
        bt_gemm_param(BT_BF16, threads, BT_GEMM_PARAM_B, 0, 0, M, N2, K2, 1, x, K1, w2, N2, 0, fresh, N2);
        CU_ASSERT_EQUAL(bt_gemm_bf16_conversions() - conv0, 2); /* both weights kept */
        for (int i = 0; i < TOTAL; i++) src[i] = (float)((i * 104729u) % 1000) / 991.0f - 0.5f;
        CU_ASSERT(be->round_copy(dev, BT_BF16, w, src, TOTAL) == BT_OK);
        CU_ASSERT_EQUAL(bt_gemm_bf16_refreshes() - ref0, 2); /* rewritten in place */
        for (int pass = 0; pass < 2; pass++) {
            const int n = pass ? N2 : N1, k = pass ? K2 : K1;
            const float *b = pass ? w2 : w;
            bt_gemm_param(BT_BF16, threads, BT_GEMM_PARAM_B, 0, 0, M, n, k, 1, x, K1, b, n, 0, kept, n);
            CU_ASSERT_EQUAL(bt_gemm_bf16_conversions() - conv0, 2); /* no new conversion */
            bt_gemm_bf16_param_cache(0);
            bt_gemm_param(BT_BF16, threads, BT_GEMM_PARAM_B, 0, 0, M, n, k, 1, x, K1, b, n, 0, fresh, n);
            bt_gemm_bf16_param_cache(1);
            CU_ASSERT_EQUAL(memcmp(kept, fresh, (size_t)M * n * sizeof *kept), 0);
            if (!pass) CU_ASSERT(memcmp(kept, before, (size_t)M * n * sizeof *kept) != 0);
        }
        be->close(dev);
        bt_gemm_bf16_release(w, TOTAL * sizeof *w); /* as the backend's free would */
    }
    free(src), free(w), free(x), free(before), free(kept), free(fresh);
}

int main(void)
{
    const bt_test_case cases[] = {
        {"the bf16 path is the CPU's (or the forced one)", test_path_is_the_cpus},
        {"bf16 GEMM = double reference within f32 accumulation", test_gemm_against_reference},
        {"f32 GEMM = double reference, bias and relu in the epilogue", test_f32_gemm_against_reference},
        {"bias in the epilogue = bias then GEMM", test_fused_bias_equals_unfused},
        {"bf16 GEMMs use each device's thread count", test_threads_per_device},
        {"f32 GEMMs use each device's thread count (oneDNN)", test_f32_threads_per_device},
        {"bf16 training within bf16 tolerance of f32; pipelined = one stage", test_training_bf16_against_f32},
        {"bf16 weights converted once per update, never stale", test_weights_converted_once_per_update},
        {"round_copy rewrites kept bf16 weights in place", test_round_copy_refreshes_kept_weights},
        {NULL, NULL},
    };
    return bt_test_main("cpu_bf16", cases);
}
