/* tests/test_cuda_engine.c: the executor on a GPU, against the CPU reference. Skips (exit 77,
 * saying why) where there is no usable GPU (fails instead where BT_REQUIRE_GPU is set, as
 * scripts/gpu-check.sh does). With one GPU, several logical stages share cuda:0:
 *   - a 3-stage 1F1B run on cuda:0,cuda:0,cuda:0 (residual skipping a stage) matches the one-stage
 *     CPU run after three steps: losses and every parameter within 1e-4 relative to the tensor's
 *     scale (the GPU sums in another order), on the local path and with the staged path forced
 *     (chunks of 100 bytes, so every message takes many chunks through both pinned buffers);
 *   - the boundaries report the path taken, every message, and a positive copy time;
 *   - across two GPUs (cuda:0,cuda:1,cuda:0) the peer path (staged where forced) and beside CPU
 *     stages (cpu:0,cuda:0,cpu:1) the host path match the CPU within 1e-4 (the two-GPU cases need
 *     two GPUs: the emulator's asynchronous run has two pretend ones);
 *   - bf16 and f16 runs on the GPU match the same precision on the CPU (both round every
 *     activation, activation gradient and weight copy; the GPU's GEMMs use tensor cores) within
 *     2e-2, and differ from f32 (the rounding is real);
 *   - the instruction records come from device events: per stage, slices in order, not
 *     overlapping on a stream, forward and backward taking time;
 *   - feeds from bt_engine_host_alloc memory give the same result as ordinary memory;
 *   - ZB-H1 on cuda:0,cuda:0,cuda:0 (every linear and layernorm backward split into B and the
 *     CUDA W) and interleaved 1F1B with 4 logical stages on cuda:0,cuda:0 (virtual 2, the stages
 *     of each device taking turns) match the one-stage CPU run within 1e-4;
 *   - forward only (the stream schedule) on cuda:0,cuda:0,cuda:0 with 4 micro-batches and fewer
 *     slots, so a slot is reused while the previous micro-batch's copy may still read it: the
 *     logits (layer head) of several batches equal the one-stage CPU forward's within 1e-4, in
 *     f32, bf16 and f16 (with feeds the precision cannot hold: both backends round them);
 *   - generation (bt_generate_batch) of a language model without attention through cuda:0 (with
 *     cuda:0,cuda:0 on the local path and cpu:0,cuda:0 on the host path) gives the greedy tokens
 *     of the CPU; an op with a CPU decode kernel and no CUDA one on a GPU stage is refused before
 *     anything runs, naming the layer, the op and the device;
 *   - GPTs decode on GPU stages (attention's KV cache in device memory, pos_embedding's row; a
 *     model with rmsnorm, split, concat, matmul, transpose, reshape, silu and mul; a Llama-style
 *     one with rope, grouped-query attention with a window, swiglu and gelu's tanh form): on cuda:0,
 *     cpu:0 + cuda:0, cuda:0 + cuda:0 and (two GPUs) cuda:0 + cuda:1, 3 prompts in flight past
 *     the window get the greedy tokens of cpu:0, and every row's logits of a window are within
 *     1e-4 of cpu:0's; in bf16, cuda:0 gives cpu:0's bf16 tokens and logits within 2e-2. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"
#include "engine_runs.h"
#include "exec/decode.h"
#include "exec/exec_internal.h"

static void gpu_params(bt_engine_params *p, int stages, bt_transfer_mode mode)
{
    static const char *devices[] = {"", "cuda:0", "cuda:0,cuda:0", "cuda:0,cuda:0,cuda:0"};
    engine_params(p, stages, stages > 1 ? 4 : 1, BT_SCHEDULE_1F1B);
    p->parallel.devices = devices[stages];
    p->transfer = mode;
}

static double worst_error(const run_result *a, const run_result *b)
{
    double worst = 0;
    for (int i = 0; i < a->n; i++) {
        double e = tensor_rel_error(a->params[i], b->params[i], a->sizes[i] / sizeof(float));
        if (e > worst) worst = e;
    }
    for (int s = 0; s < 3; s++) {
        double e = fabs(a->loss[s] - b->loss[s]) / fmax(fabs(b->loss[s]), 1e-3);
        if (e > worst) worst = e;
    }
    return worst;
}

static void test_pipeline_matches_cpu(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result cpu, local, staged;
    engine_params(&p, 1, 4, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &cpu);
    gpu_params(&p, 3, BT_TRANSFER_AUTO);
    run_three_steps(g, &p, &local);
    gpu_params(&p, 3, BT_TRANSFER_STAGED);
    setenv("BATON_STAGING_CHUNK", "100", 1);
    run_three_steps(g, &p, &staged);
    unsetenv("BATON_STAGING_CHUNK");
    double e_local = worst_error(&local, &cpu), e_staged = worst_error(&staged, &cpu);
    printf("\n  3 stages on cuda:0 vs 1 CPU stage: local %.3g, staged %.3g\n", e_local, e_staged);
    CU_ASSERT(e_local <= 1e-4);
    CU_ASSERT(e_staged <= 1e-4);
    /* the same kernels on the same data: the path must not change a bit */
    CU_ASSERT(identical(&local, &staged));
    free_result(&cpu);
    free_result(&local);
    free_result(&staged);
    bt_graph_destroy(g);
}

/* The new schedules on logical stages of cuda:0 against the one-stage CPU run. */
static void test_new_schedules_match_cpu(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result cpu, zb, il;
    engine_params(&p, 1, 4, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &cpu);
    engine_params(&p, 3, 4, BT_SCHEDULE_ZB_H1);
    p.parallel.devices = "cuda:0,cuda:0,cuda:0";
    run_three_steps(g, &p, &zb);
    engine_params(&p, 4, 4, BT_SCHEDULE_INTERLEAVED_1F1B);
    p.parallel.devices = "cuda:0,cuda:0";
    p.parallel.virtual_stages = 2;
    run_three_steps(g, &p, &il);
    double e_zb = worst_error(&zb, &cpu), e_il = worst_error(&il, &cpu);
    printf("\n  vs 1 CPU stage: zb-h1 on 3 stages %.3g, interleaved-1f1b 4 stages on 2 devices %.3g\n", e_zb,
           e_il);
    CU_ASSERT(e_zb <= 1e-4);
    CU_ASSERT(e_il <= 1e-4);
    free_result(&cpu);
    free_result(&zb);
    free_result(&il);
    bt_graph_destroy(g);
}

static void check_paths(bt_transfer_mode mode, bt_transfer_path want)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    gpu_params(&p, 3, mode);
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 5);
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    for (int i = 0; i < bt_engine_num_boundaries(e); i++) {
        bt_boundary_stats s;
        CU_ASSERT_FATAL(bt_engine_boundary(e, i, &s) == BT_OK);
        CU_ASSERT_EQUAL(s.path, want);
        CU_ASSERT_EQUAL(s.messages, 4);
        CU_ASSERT(s.copy_ms > 0);
    }
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static void test_boundary_paths(void)
{
    check_paths(BT_TRANSFER_AUTO, BT_PATH_LOCAL);
    check_paths(BT_TRANSFER_STAGED, BT_PATH_STAGED);
    check_paths(BT_TRANSFER_HOST, BT_PATH_HOST);
}

/* Runs the residual graph on devices (3 stages) with mode, checks every boundary took a path in
 * want[] (by boundary index order is not fixed: each must be one of the two given), and compares
 * three steps with the one-stage CPU run. */
static void run_on(const char *devices, bt_transfer_mode mode, bt_transfer_path want_a,
                   bt_transfer_path want_b, const run_result *cpu)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 3, 4, BT_SCHEDULE_1F1B);
    p.parallel.devices = devices;
    p.transfer = mode;
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 5);
    CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    int seen_a = 0;
    for (int i = 0; i < bt_engine_num_boundaries(e); i++) {
        bt_boundary_stats st;
        CU_ASSERT_FATAL(bt_engine_boundary(e, i, &st) == BT_OK);
        CU_ASSERT(st.path == want_a || st.path == want_b);
        seen_a |= st.path == want_a;
        CU_ASSERT_EQUAL(st.messages, 4);
    }
    CU_ASSERT(seen_a); /* the path under test was taken somewhere */
    bt_engine_destroy(e);
    run_result r;
    run_three_steps(g, &p, &r);
    double err = worst_error(&r, cpu);
    printf("\n  %s (%s): %.3g vs 1 CPU stage", devices,
           mode == BT_TRANSFER_STAGED ? "staged" : "auto", err);
    CU_ASSERT(err <= 1e-4);
    free_result(&r);
    bt_graph_destroy(g);
}

/* Boundaries between two GPUs take the peer path where peer access exists (staged when forced or
 * where it does not), and a CPU stage next to a GPU stage the host path; every such pipeline
 * matches the CPU. Needs two GPUs for the first two (the emulator's BT_EMU_GPUS=2 run has them);
 * with one, those cases are skipped, saying so. */
static void test_paths_across_devices(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    run_result cpu;
    engine_params(&p, 1, 4, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &cpu);
    bt_graph_destroy(g);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    int peer = 0;
    if (n >= 2 && cudaDeviceCanAccessPeer(&peer, 0, 1) != cudaSuccess) peer = 0;
    if (n >= 2) {
        /* stage 0 and 2 on cuda:0, stage 1 on cuda:1: 0->1 and 1->2 cross GPUs, the skip 0->2 is local */
        run_on("cuda:0,cuda:1,cuda:0", BT_TRANSFER_AUTO, peer ? BT_PATH_PEER : BT_PATH_STAGED,
               BT_PATH_LOCAL, &cpu);
        run_on("cuda:0,cuda:1,cuda:0", BT_TRANSFER_STAGED, BT_PATH_STAGED, BT_PATH_STAGED, &cpu);
    } else {
        printf("\n  (one GPU: the two-GPU peer and staged cases are skipped) ");
    }
    run_on("cpu:0,cuda:0,cpu:1", BT_TRANSFER_AUTO, BT_PATH_HOST, BT_PATH_LOCAL, &cpu);
    free_result(&cpu);
}

static void test_mixed_precision_matches_cpu(void)
{
    bt_graph *g = residual_graph();
    const bt_dtype precisions[] = {BT_BF16, BT_F16};
    run_result f32;
    bt_engine_params p;
    engine_params(&p, 1, 4, BT_SCHEDULE_1F1B);
    run_three_steps(g, &p, &f32);
    for (int k = 0; k < 2; k++) {
        run_result cpu, gpu;
        engine_params(&p, 1, 4, BT_SCHEDULE_1F1B);
        p.precision = precisions[k];
        run_three_steps(g, &p, &cpu);
        gpu_params(&p, 2, BT_TRANSFER_AUTO);
        p.precision = precisions[k];
        run_three_steps(g, &p, &gpu);
        double e = worst_error(&gpu, &cpu), from_f32 = worst_error(&cpu, &f32);
        printf("\n  %s: GPU vs CPU %.3g; CPU %s vs f32 %.3g\n", bt_dtype_name(precisions[k]), e,
               bt_dtype_name(precisions[k]), from_f32);
        CU_ASSERT(e <= 2e-2);
        CU_ASSERT(from_f32 > 1e-6);
        free_result(&cpu);
        free_result(&gpu);
    }
    free_result(&f32);
    bt_graph_destroy(g);
}

static void test_records_from_events(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    gpu_params(&p, 3, BT_TRANSFER_AUTO);
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    batch_data b;
    make_batch(&b, 9);
    bt_step_result r;
    for (int i = 0; i < 2; i++) CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, &r) == BT_OK);
    const bt_schedule *sched = bt_engine_last_schedule(e);
    for (int s = 0; s < 3; s++) {
        int n = 0;
        const bt_trace_rec *rec = bt_engine_trace(e, s, &n);
        CU_ASSERT_EQUAL(n, sched->len[s]);
        double last_compute_end = 0, fwd = 0;
        for (int i = 0; i < n; i++) {
            const bt_instr *ins = &sched->list[s][rec[i].instr];
            CU_ASSERT(rec[i].end_ms >= rec[i].start_ms);
            CU_ASSERT(rec[i].end_ms <= r.step_ms + 1.0);
            if (ins->kind == BT_I_SEND_ACT || ins->kind == BT_I_SEND_GRAD) continue; /* copy stream */
            CU_ASSERT(rec[i].start_ms >= last_compute_end - 1e-3);
            last_compute_end = rec[i].end_ms;
            if (ins->kind == BT_I_FWD) fwd += rec[i].end_ms - rec[i].start_ms;
        }
        CU_ASSERT(fwd > 0);
    }
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static void test_pinned_feeds(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    gpu_params(&p, 2, BT_TRANSFER_AUTO);
    double loss[2];
    for (int pinned = 0; pinned < 2; pinned++) {
        bt_engine *e = NULL;
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
        batch_data b;
        make_batch(&b, 11);
        float *x = b.x;
        int32_t *label = b.label;
        if (pinned) {
            CU_ASSERT_FATAL(bt_engine_host_alloc(e, sizeof b.x, (void **)&x) == BT_OK);
            CU_ASSERT_FATAL(bt_engine_host_alloc(e, sizeof b.label, (void **)&label) == BT_OK);
            memcpy(x, b.x, sizeof b.x);
            memcpy(label, b.label, sizeof b.label);
        }
        bt_feed feeds[2] = {{"x", x, BT_F32}, {"label", label, BT_I32}};
        bt_step_result r;
        for (int i = 0; i < 3; i++) CU_ASSERT_FATAL(bt_engine_train_step(e, feeds, 2, &r) == BT_OK);
        loss[pinned] = r.loss;
        if (pinned) {
            bt_engine_host_free(e, x);
            bt_engine_host_free(e, label);
        }
        bt_engine_destroy(e);
    }
    CU_ASSERT_EQUAL(loss[0], loss[1]);
    bt_graph_destroy(g);
}

/* Forward only on 3 logical stages of cuda:0 (stream schedule) against the CPU, per precision. */
static void test_forward_only_matches_cpu(void)
{
    bt_graph *g = residual_graph();
    const bt_dtype precisions[] = {BT_F32, BT_BF16, BT_F16};
    for (int k = 0; k < 3; k++) {
        bt_engine_params pc, pg;
        bt_engine *cpu = NULL, *gpu = NULL;
        /* the CPU engine first: engine_params' device list is one static buffer */
        engine_params(&pc, 1, 4, BT_SCHEDULE_STREAM);
        pc.precision = precisions[k];
        pc.training = 0;
        bt_status cs = bt_engine_create(g, &pc, &cpu);
        if (cs != BT_OK) printf("\n  engine_create (CPU): %s\n", bt_last_error());
        CU_ASSERT_FATAL(cs == BT_OK);
        gpu_params(&pg, 3, BT_TRANSFER_AUTO);
        pg.parallel.schedule = BT_SCHEDULE_STREAM;
        pg.precision = precisions[k];
        pg.training = 0;
        bt_status st = bt_engine_create(g, &pg, &gpu);
        if (st != BT_OK) printf("\n  engine_create: %s\n", bt_last_error());
        CU_ASSERT_FATAL(st == BT_OK);
        double worst = 0;
        for (int batch = 0; batch < 3; batch++) {
            batch_data b;
            make_batch(&b, 300 + (unsigned)batch);
            for (int i = 0; i < BATCH * IN; i++) b.x[i] = b.x[i] * 3.0f + 1e-3f;
            float want[BATCH * CLASSES], got[BATCH * CLASSES];
            CU_ASSERT_FATAL(bt_engine_forward_layer(cpu, b.feeds, 2, "head", want, NULL) == BT_OK);
            st = bt_engine_forward_layer(gpu, b.feeds, 2, "head", got, NULL);
            if (st != BT_OK) printf("\n  forward: %s\n", bt_last_error());
            CU_ASSERT_FATAL(st == BT_OK);
            const double e = tensor_rel_error(got, want, BATCH * CLASSES);
            worst = e > worst || e != e ? e : worst;
        }
        printf("\n  forward only, 3 stages on cuda:0 vs CPU, %s: %.3g\n",
               bt_dtype_name(precisions[k]), worst);
        CU_ASSERT(worst <= 1e-4);
        bt_engine_destroy(gpu);
        bt_engine_destroy(cpu);
    }
    bt_graph_destroy(g);
}

static const char lm_yaml[] =
    "format: 1\n"
    "inputs:\n"
    "  idx: {shape: [6], dtype: i32}\n"
    "  label: {shape: [6], dtype: i32}\n"
    "layers:\n"
    "  - {name: wte, op: embedding, args: {num: 11, dim: 16, std: 0.5}, from: idx}\n"
    "  - {name: fc, op: linear, args: {out: 32}, act: gelu}\n"
    "  - {name: ln, op: layernorm}\n"
    "  - {name: head, op: linear, args: {out: 11}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n";

/* A batch-1 inference engine for generation on devices, computing in precision, with the weights of
 * weights_from (or its own initialisation where NULL). */
static bt_engine *lm_engine_prec(const bt_model *m, const char *devices, int stages, bt_engine *weights_from,
                                 bt_dtype precision)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.precision = precision;
    p.parallel.devices = devices;
    p.parallel.stages = stages;
    p.batch = 1;
    p.threads = 1;
    p.seed = 3;
    p.training = 0;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    for (int i = 0; weights_from && i < bt_graph_num_params(m->graph); i++) {
        bt_param_info pi;
        bt_graph_param(m->graph, i, &pi);
        size_t bytes = (size_t)bt_shape_numel(&pi.shape) * sizeof(float);
        float *buf = malloc(bytes);
        CU_ASSERT_FATAL(bt_engine_read_param(weights_from, pi.name, buf, bytes) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_write_param(e, pi.name, buf, bytes) == BT_OK);
        free(buf);
    }
    return e;
}

static bt_engine *lm_engine(const bt_model *m, const char *devices, int stages, bt_engine *weights_from)
{
    return lm_engine_prec(m, devices, stages, weights_from, BT_F32);
}

/* test.cached_copy: y = x, with a CPU decode kernel (as if it kept a cache) and no CUDA one. */
static bt_status same_shape_infer(bt_infer_ctx *ctx)
{
    return bt_infer_set_output(ctx, bt_infer_input_shape(ctx, 0), BT_F32);
}

static bt_status copy_cpu(const bt_op_call *call)
{
    if (call->out && call->out->data)
        memcpy(call->out->data, call->in[0].data, (size_t)bt_tensor_numel(call->out) * sizeof(float));
    return BT_OK;
}

static bt_status copy_gpu(const bt_op_call *call)
{
    if (!call->out || !call->out->data) return BT_OK;
    cudaError_t err = cudaMemcpyAsync(call->out->data, call->in[0].data,
                                      (size_t)bt_tensor_numel(call->out) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, (cudaStream_t)call->stream);
    return err == cudaSuccess ? BT_OK : bt_op_error(BT_ERR_INTERNAL, "copy: %s", cudaGetErrorString(err));
}

static void test_generate_on_gpu(void)
{
    bt_model *m = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(lm_yaml, strlen(lm_yaml), "lm.yaml", NULL, 0, &m) == BT_OK);
    bt_engine *cpu = lm_engine(m, "cpu:0", 1, NULL);
    static const char *const devices[] = {"cuda:0", "cuda:0,cuda:0", "cpu:0,cuda:0"};
    const int32_t p0[] = {1, 2}, p1[] = {3}, p2[] = {4, 5, 6, 7, 8};
    const int32_t *prompts[3] = {p0, p1, p2};
    const int64_t lens[3] = {2, 1, 5};
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 9; /* past T = 6: every window is read again */
    gp.top_k = 1;
    int32_t ref[3][9], got[3][9];
    int32_t *ref_out[3] = {ref[0], ref[1], ref[2]}, *got_out[3] = {got[0], got[1], got[2]};
    CU_ASSERT_FATAL(bt_generate_batch(cpu, m->graph, 3, prompts, lens, &gp, ref_out, NULL, NULL) == BT_OK);
    for (int d = 0; d < 3; d++) {
        bt_engine *e = lm_engine(m, devices[d], d == 0 ? 1 : 2, cpu);
        bt_generate_stats total;
        memset(got, 0xff, sizeof got);
        bt_status st = bt_generate_batch(e, m->graph, 3, prompts, lens, &gp, got_out, NULL, &total);
        if (st != BT_OK) printf("\n  %s: %s\n", devices[d], bt_last_error());
        CU_ASSERT(st == BT_OK);
        CU_ASSERT(total.stages == (d == 0 ? 1 : 2));
        if (memcmp(got, ref, sizeof ref) != 0) printf("\n  %s: tokens differ from the CPU's\n", devices[d]);
        CU_ASSERT(memcmp(got, ref, sizeof ref) == 0);
        bt_engine_destroy(e);
    }
    bt_engine_destroy(cpu);
    bt_model_destroy(m);
    /* an op with a CPU decode kernel (a cache) and no CUDA one on a GPU stage: refused, naming
     * the layer, the op and the device, before anything runs */
    const bt_op_def cached = {.name = "test.cached_copy", .min_inputs = 1, .max_inputs = 1,
                              .infer = same_shape_infer, .cpu_forward = copy_cpu, .cpu_backward = copy_cpu,
                              .cuda_forward = copy_gpu, .cuda_backward = copy_gpu, .cpu_decode = copy_cpu};
    CU_ASSERT_FATAL(bt_op_register(&cached) == BT_OK);
    static const char cached_yaml[] =
        "format: 1\n"
        "inputs:\n"
        "  idx: {shape: [6], dtype: i32}\n"
        "  label: {shape: [6], dtype: i32}\n"
        "layers:\n"
        "  - {name: wte, op: embedding, args: {num: 11, dim: 16}, from: idx}\n"
        "  - {name: mine, op: test.cached_copy}\n"
        "  - {name: head, op: linear, args: {out: 11}}\n"
        "  - {name: loss, op: cross_entropy, from: [head, label]}\n";
    CU_ASSERT_FATAL(bt_model_load_string(cached_yaml, strlen(cached_yaml), "cached.yaml", NULL, 0, &m) == BT_OK);
    bt_engine *e = lm_engine(m, "cuda:0", 1, NULL);
    CU_ASSERT(bt_generate_batch(e, m->graph, 3, prompts, lens, &gp, got_out, NULL, NULL) == BT_ERR_UNSUPPORTED);
    CU_ASSERT(strstr(bt_last_error(), "layer 'mine' (op test.cached_copy) has no decode") != NULL &&
              strstr(bt_last_error(), "cuda:0") != NULL);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* GPTs for decoding on GPU stages (T = 9: no multiple of the attention tile, 4). The first is the
 * GPT of tests/test_gpt.c with two blocks; the second puts every other op a GPT may decode
 * through a stage: rmsnorm, split, concat, matmul and transpose of [T, 4, 4] rows (the sequence a
 * leading dimension), reshape, silu, mul. */
static const char gpt_yaml[] =
    "format: 1\n"
    "inputs:\n"
    "  idx: {shape: [9], dtype: i32}\n"
    "  label: {shape: [9], dtype: i32}\n"
    "layers:\n"
    "  - {name: wte, op: embedding, args: {num: 13, dim: 16, std: 0.5}, from: idx}\n"
    "  - {name: wpe, op: pos_embedding, args: {num: 12, std: 0.3}}\n"
    "  - name: h\n"
    "    repeat: 2\n"
    "    layers:\n"
    "      - {name: ln_1, op: layernorm}\n"
    "      - {name: c_attn, op: linear, args: {out: 48}}\n"
    "      - {name: attn, op: attention, args: {heads: 2, block: 4}}\n"
    "      - {name: c_proj, op: linear, args: {out: 16}}\n"
    "      - {name: res1, op: add, from: [-1, -5]}\n"
    "      - {name: ln_2, op: layernorm}\n"
    "      - {name: c_fc, op: linear, args: {out: 64}, act: gelu}\n"
    "      - {name: mlp_proj, op: linear, args: {out: 16}}\n"
    "      - {name: res2, op: add, from: [-1, res1]}\n"
    "  - {name: ln_f, op: layernorm, from: h}\n"
    "  - {name: lm_head, op: linear, args: {out: 13, bias: false}, tie: wte}\n"
    "  - {name: loss, op: cross_entropy, from: [lm_head, label]}\n";


/* Every row's logits of one window, read by the decoder (exec/decode.h) as bt_generate_score
 * reads them. */
typedef struct logit_rows {
    float *out;
    int64_t vocab;
} logit_rows;

static bt_status keep_rows(void *ctx, int seq, const void *logits, int64_t rows, bt_decode_item *next)
{
    logit_rows *k = ctx;
    (void)seq;
    memcpy(k->out, logits, (size_t)(rows * k->vocab) * sizeof(float));
    next->done = 1;
    return BT_OK;
}

static bt_status decode_logits(bt_engine *e, const int32_t *tokens, int64_t n, float *out, int64_t vocab)
{
    const bt_graph *g = e->graph;
    int tok = -1;
    for (int v = 0; v < g->n_values; v++)
        if (strcmp(g->values[v].name, "idx") == 0) tok = v;
    const int logits = g->values[g->nodes[g->n_nodes - 1].in[0]].producer;
    bt_decode_item first = {.tokens = tokens, .pos = 0, .n = n, .reset = 1, .all_logits = 1};
    logit_rows k = {out, vocab};
    bt_decode_params dp = {.token_value = tok, .logits_node = logits, .n_seqs = 1, .first = &first,
                           .on_logits = keep_rows, .ctx = &k};
    return bt_engine_decode(e, &dp, NULL);
}

#define DEC_T 9
#define DEC_V 13
#define DEC_NT 14 /* tokens per prompt: past T, so every window is read again */

/* A GPT decoded on GPU stages (cuda:0; cpu:0 + cuda:0 through host memory; cuda:0 + cuda:0 on
 * the local path; cuda:0 + cuda:1 where there are two GPUs) gives the greedy tokens of cpu:0 for
 * 3 prompts in flight, and every row's logits of a whole window within 1e-4 of the CPU's
 * (err = |gpu - cpu| / max(1, |cpu|)); precision: bf16 on cuda:0 gives the tokens of bf16 on
 * cpu:0 and its logits within 2e-2 (both round every row, weight and GEMM operand to bf16). */
static void check_gpt_on_gpu(const char *yaml, const char *what, bt_dtype precision)
{
    bt_model *m = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(yaml, strlen(yaml), what, NULL, 0, &m) == BT_OK);
    bt_engine *cpu = lm_engine_prec(m, "cpu:0", 1, NULL, precision);
    int gpus = 0;
    CU_ASSERT_FATAL(cudaGetDeviceCount(&gpus) == cudaSuccess);
    static const char *const devices[] = {"cuda:0", "cpu:0,cuda:0", "cuda:0,cuda:0", "cuda:0,cuda:1"};
    const int32_t p0[] = {1, 2, 3}, p1[] = {4}, p2[] = {5, 6, 7, 8, 9, 10};
    const int32_t *prompts[3] = {p0, p1, p2};
    const int64_t lens[3] = {3, 1, 6};
    const int32_t window[DEC_T] = {3, 1, 4, 1, 5, 9, 2, 6, 5};
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = DEC_NT;
    gp.top_k = 1;
    int32_t ref[3][DEC_NT], got[3][DEC_NT];
    int32_t *ref_out[3] = {ref[0], ref[1], ref[2]}, *got_out[3] = {got[0], got[1], got[2]};
    float want[DEC_T * DEC_V], have[DEC_T * DEC_V];
    CU_ASSERT_FATAL(bt_generate_batch(cpu, m->graph, 3, prompts, lens, &gp, ref_out, NULL, NULL) == BT_OK);
    CU_ASSERT_FATAL(decode_logits(cpu, window, DEC_T, want, DEC_V) == BT_OK);
    const double tol = precision == BT_F32 ? 1e-4 : 2e-2;
    for (int d = 0; d < 4; d++) {
        if (precision != BT_F32 && d > 0) continue; /* bf16: the one GPU stage */
        if (d == 3 && gpus < 2) {
            printf("\n  %s: cuda:0,cuda:1 not run: this machine has one GPU", what);
            continue;
        }
        bt_engine *e = lm_engine_prec(m, devices[d], d == 0 ? 1 : 2, cpu, precision);
        memset(got, 0xff, sizeof got);
        bt_status st = bt_generate_batch(e, m->graph, 3, prompts, lens, &gp, got_out, NULL, NULL);
        if (st != BT_OK) printf("\n  %s on %s: %s\n", what, devices[d], bt_last_error());
        CU_ASSERT(st == BT_OK);
        if (memcmp(got, ref, sizeof ref) != 0) printf("\n  %s on %s: tokens differ from the CPU's", what, devices[d]);
        CU_ASSERT(memcmp(got, ref, sizeof ref) == 0);
        st = decode_logits(e, window, DEC_T, have, DEC_V);
        if (st != BT_OK) printf("\n  %s on %s: %s\n", what, devices[d], bt_last_error());
        CU_ASSERT_FATAL(st == BT_OK);
        double worst = 0;
        for (int i = 0; i < DEC_T * DEC_V; i++) {
            const double err = fabs((double)have[i] - want[i]) / fmax(1.0, fabs((double)want[i]));
            worst = err > worst || err != err ? err : worst;
        }
        printf("\n  %s on %s, %s: logits within %.3g of cpu:0's", what, devices[d], bt_dtype_name(precision), worst);
        CU_ASSERT(worst <= tol);
        bt_engine_destroy(e);
    }
    bt_engine_destroy(cpu);
    bt_model_destroy(m);
}

static void test_gpt_decodes_on_gpu(void)
{
    check_gpt_on_gpu(gpt_yaml, "gpt.yaml", BT_F32);
    check_gpt_on_gpu(bt_test_decode_mix_yaml, "mix.yaml", BT_F32);
    check_gpt_on_gpu(bt_test_decode_llama_yaml, "llama.yaml", BT_F32);
    check_gpt_on_gpu(gpt_yaml, "gpt.yaml", BT_BF16);
}

/* No usable GPU: a skip (77), or a failure (1) where BT_REQUIRE_GPU is set to anything but "" or
 * "0" (scripts/gpu-check.sh sets it: on a GPU machine a broken driver must not pass as a skip). */
static int no_gpu(const char *test, cudaError_t err)
{
    const char *req = getenv("BT_REQUIRE_GPU");
    const int required = req && *req && strcmp(req, "0") != 0;
    printf("%s: %s: no usable GPU (cudaGetDeviceCount: %s)%s\n", test,
           required ? "FAILED" : "SKIPPED",
           err != cudaSuccess ? cudaGetErrorString(err) : "0 devices",
           required ? "; BT_REQUIRE_GPU is set, so a GPU must be here" : "");
    return required ? 1 : BT_TEST_SKIP;
}

int main(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) return no_gpu("test_cuda_engine", err);
    static const bt_test_case cases[] = {
        {"3 logical stages on cuda:0 = CPU (local and staged)", test_pipeline_matches_cpu},
        {"peer, staged and host paths across GPUs and a CPU stage = CPU", test_paths_across_devices},
        {"boundaries report their path", test_boundary_paths},
        {"zb-h1 and interleaved-1f1b on cuda:0 = CPU", test_new_schedules_match_cpu},
        {"bf16 and f16 on the GPU = the same precision on the CPU", test_mixed_precision_matches_cpu},
        {"instruction records come from device events", test_records_from_events},
        {"pinned feeds = ordinary feeds", test_pinned_feeds},
        {"forward only on 3 logical stages = CPU (f32, bf16, f16)", test_forward_only_matches_cpu},
        {"generate through GPU stages = CPU; an op without a CUDA decode refused", test_generate_on_gpu},
        {"a GPT decodes on GPU stages = CPU (f32; bf16)", test_gpt_decodes_on_gpu},
        {NULL, NULL}};
    return bt_test_main("cuda_engine", cases);
}
