/* tests/test_gpt.c: GPT-style models written in the model file (blocks that repeat, tied
 * weights) run as pipelines.
 *   - blocks: copies are named <block>.k.<layer>, a name inside a copy means that copy's layer, a
 *     relative reference reaches the block's input, the block's name outside means its last layer;
 *   - tie: the tied copies start equal, and one SGD step moves them by the sum of the two
 *     gradients an untied model computes (f64, against that model's own gradients);
 *   - a 3-block GPT with tied weights split into 1, 2, 3 and 4 stages under GPipe and 1F1B gives
 *     the one-stage losses and parameters after 3 AdamW steps within 1e-5 relative, and the tied
 *     copies are bit-identical after every step;
 *   - generation: the decoder with its KV cache scores a window exactly as the engine's forward
 *     does (f64), and samples the same tokens as the cache-free path that reruns the window;
 *   - generation through the pipeline: 4 prompts in flight through 1, 2, 3 and 4 stages (and a cut
 *     whose value skips a stage; host and staged paths) get the one-stage engine's tokens, greedy
 *     and sampled, past the context window; each prompt alone with seed + its index gets the same;
 *     scoring through every stage count equals the forward (f64);
 *   - decoding a model with rmsnorm, split, concat, matmul and transpose (the sequence a leading
 *     dim), reshape, silu and mul, and a Llama-style one (rope with llama3 scaling, grouped-query
 *     attention with a sliding window, swiglu, gelu approx: tanh), scores a window as the forward
 *     does (f64, 1 and 3 stages); a matmul whose matrices span the sequence is refused, naming the
 *     layer;
 *   - generation in bf16 (precision: bf16): the decoder's score of a window equals the bf16
 *     forward's loss within 5e-6 relative on 1 and 2 stages (an f32 decoder of the same master
 *     weights is further off), and its greedy tokens equal those of the bf16 forward rerun over
 *     the window;
 *   - checkpoints of a tied model hold the tensor once (wte.weight, no lm_head.weight), and a
 *     resume on another placement (3 stages, 2 micro-batches -> 1 stage, 1) continues to float
 *     rounding, the tied copy restored from the source;
 *   - measured-cost partitioning (`baton plan`, `partition: profile`, `parallel: auto`'s search)
 *     cuts between block copies too: with equal costs per layer the unconstrained optimum
 *     would cut inside h.1, and every planner cuts at a copy's edge instead;
 *   - text data: a character vocabulary (built, saved, loaded, refusing unknown bytes), llm.c
 *     token shards (round trip, a bad header refused) and next-token windows. */
#include <math.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "test_models.h"
#include "io/text.h"
#include "plan/placement.h"
#include "plan/plan.h"
#include "plan/search.h"
#include "train/checkpoint.h"

#define T 9  /* not a multiple of the attention tile used below (block: 4) */
#define V 13
#define C 16

static const char gpt_yaml[] =
    "format: 1\n"
    "inputs:\n"
    "  idx: {shape: [9], dtype: i32}\n"
    "  label: {shape: [9], dtype: i32}\n"
    "layers:\n"
    "  - {name: wte, op: embedding, args: {num: 13, dim: 16, std: 0.1}, from: idx}\n"
    "  - {name: wpe, op: pos_embedding, args: {num: 12, std: 0.1}}\n"
    "  - name: h\n"
    "    repeat: 3\n"
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
    "  - {name: lm_head, op: linear, args: {out: 13, bias: false}%s}\n"
    "  - {name: loss, op: cross_entropy, from: [lm_head, label]}\n";

static bt_model *load_gpt(int tied)
{
    char text[4096];
    snprintf(text, sizeof text, gpt_yaml, tied ? ", tie: wte" : "");
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(text, strlen(text), "gpt.yaml", NULL, 0, &m);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

static void fill_tokens(int32_t *idx, int32_t *label, int batch, unsigned seed)
{
    for (int i = 0; i < batch * T; i++) {
        seed = seed * 1103515245u + 12345u;
        idx[i] = (int32_t)((seed >> 16) % V);
    }
    for (int i = 0; i < batch * T; i++) label[i] = (i % T == T - 1) ? idx[i - T + 1] : idx[i + 1];
}

static void test_block_names(void)
{
    bt_model *m = load_gpt(0);
    const bt_graph *g = m->graph;
    CU_ASSERT(bt_graph_find_layer(g, "h.0.ln_1") == 2);
    CU_ASSERT(bt_graph_find_layer(g, "h.2.res2") >= 0);
    CU_ASSERT(bt_graph_find_layer(g, "h.3.ln_1") < 0);
    bt_layer_info info;
    /* res2 of copy 1 reads that copy's mlp_proj and res1 */
    CU_ASSERT_FATAL(bt_graph_layer(g, bt_graph_find_layer(g, "h.1.res2"), &info) == BT_OK);
    CU_ASSERT_STRING_EQUAL(info.inputs[0], "h.1.mlp_proj");
    CU_ASSERT_STRING_EQUAL(info.inputs[1], "h.1.res1");
    /* res1 of copy 1 reaches back to the block's input: copy 0's res2 */
    CU_ASSERT_FATAL(bt_graph_layer(g, bt_graph_find_layer(g, "h.1.res1"), &info) == BT_OK);
    CU_ASSERT_STRING_EQUAL(info.inputs[1], "h.0.res2");
    /* ln_1 of copy 0 reads the layer before the block; ln_f names the block: its last layer */
    CU_ASSERT_FATAL(bt_graph_layer(g, bt_graph_find_layer(g, "h.0.ln_1"), &info) == BT_OK);
    CU_ASSERT_STRING_EQUAL(info.inputs[0], "wpe");
    CU_ASSERT_FATAL(bt_graph_layer(g, bt_graph_find_layer(g, "ln_f"), &info) == BT_OK);
    CU_ASSERT_STRING_EQUAL(info.inputs[0], "h.2.res2");
    bt_model_destroy(m);

    /* a block layer's name inside the block must be unique; a tie must match shapes */
    static const char dup[] = "format: 1\ninputs: {x: {shape: [4]}}\nlayers:\n"
                              "  - name: b\n    repeat: 2\n    layers:\n"
                              "      - {name: a, op: linear, args: {out: 4}}\n"
                              "      - {name: a, op: relu}\n";
    CU_ASSERT(bt_model_load_string(dup, strlen(dup), "dup.yaml", NULL, 0, &m) == BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), "layer name 'a' appears twice") != NULL);
    static const char badtie[] = "format: 1\ninputs: {x: {shape: [4]}}\nlayers:\n"
                                 "  - {name: a, op: linear, args: {out: 4}}\n"
                                 "  - {name: b, op: linear, args: {out: 3}, tie: a}\n";
    CU_ASSERT(bt_model_load_string(badtie, strlen(badtie), "tie.yaml", NULL, 0, &m) == BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), "tie: 'b.weight' is shaped [3, 4], 'a.weight' [4, 4]") != NULL);
}

/* Partitioners cut between block copies; balance counts them as one; a layout names a copy. */
static void test_block_partition(void)
{
    bt_model *m = load_gpt(0);
    bt_parallel_config cfg = m->parallel;
    bt_plan *plan = NULL;
    cfg.stages = 2;
    cfg.partition = BT_PARTITION_PARAMS;
    CU_ASSERT_FATAL(bt_plan_build(m->graph, &cfg, &plan) == BT_OK);
    bt_layer_info info;
    bt_graph_layer(m->graph, plan->first_layer[1], &info);
    CU_ASSERT(strstr(info.name, ".ln_1") != NULL || strcmp(info.name, "ln_f") == 0); /* a copy's first layer */
    bt_plan_destroy(plan);
    cfg.partition = BT_PARTITION_UNIFORM;
    cfg.stages = 3;
    CU_ASSERT_FATAL(bt_plan_build(m->graph, &cfg, &plan) == BT_OK);
    for (int s = 1; s < 3; s++) {
        bt_graph_layer(m->graph, plan->first_layer[s], &info);
        CU_ASSERT(strchr(info.name, '.') == NULL || strstr(info.name, ".ln_1") != NULL);
    }
    bt_plan_destroy(plan);
    /* units: wte, wpe, h.0, h.1, h.2, ln_f, lm_head, loss */
    cfg.partition = BT_PARTITION_BALANCE;
    cfg.stages = 2;
    cfg.n_balance = 2;
    cfg.balance[0] = 3;
    cfg.balance[1] = 5;
    CU_ASSERT_FATAL(bt_plan_build(m->graph, &cfg, &plan) == BT_OK);
    CU_ASSERT_EQUAL(plan->first_layer[1], bt_graph_find_layer(m->graph, "h.1.ln_1"));
    bt_plan_destroy(plan);
    cfg.balance[1] = 6;
    CU_ASSERT(bt_plan_build(m->graph, &cfg, &plan) == BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), "balance sums to 9 but the model has 8 units") != NULL);
    cfg.partition = BT_PARTITION_LAYOUT;
    cfg.layout = "wte,wpe,h.0,h.1|h.2,ln_f,lm_head,loss";
    CU_ASSERT_FATAL(bt_plan_build(m->graph, &cfg, &plan) == BT_OK);
    CU_ASSERT_EQUAL(plan->first_layer[1], bt_graph_find_layer(m->graph, "h.2.ln_1"));
    bt_plan_destroy(plan);
    bt_model_destroy(m);
}

/* Whether a cut before layer l falls between units (layers outside blocks, block copies). */
static int at_unit_edge(const bt_graph *g, int l)
{
    bt_layer_info info;
    if (bt_graph_layer(g, l, &info) != BT_OK) return 0;
    return strchr(info.name, '.') == NULL || strstr(info.name, ".ln_1") != NULL;
}

static void test_block_partition_measured(void)
{
    bt_model *m = load_gpt(0);
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = "cpu:0,cpu:1,cpu:2";
    pp.batch = 4;
    pp.microbatches = 2;
    pp.repeats = 1;
    pp.warmup = 0;
    pp.transfer_bytes = 4096;
    pp.handoff_repeats = 0;
    bt_profile *prof = NULL;
    CU_ASSERT_FATAL(bt_profile_measure(m->graph, "gpt", &pp, &prof) == BT_OK);
    /* every layer costs the same and transfers are free: 32 layers, the even 2-way cut (16) lies
     * inside h.1 (layers 11..19) */
    for (int l = 0; l < prof->n_layers; l++) {
        bt_profile_time *t = &prof->times[l * prof->n_kinds];
        t->fwd_ms = 1;
        t->bwd_ms = t->b_ms = 2;
        t->w_ms = 0;
    }
    for (int k = 0; k < prof->n_transfers; k++) prof->transfers[k].gb_per_s = 1e6;
    CU_ASSERT_EQUAL_FATAL(prof->n_layers, 32);
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = "cpu:0,cpu:1";
    lp.microbatches = 2;
    bt_placement pl;
    CU_ASSERT_FATAL(bt_placement_plan(prof, &lp, &pl) == BT_OK); /* without the graph: anywhere */
    CU_ASSERT_EQUAL(pl.stage[1].first_layer, 16);
    bt_placement_clear(&pl);
    lp.graph = m->graph;
    for (int p = 2; p <= 3; p++) {
        lp.devices = p == 2 ? "cpu:0,cpu:1" : "cpu:0,cpu:1,cpu:2";
        CU_ASSERT_FATAL(bt_placement_plan(prof, &lp, &pl) == BT_OK);
        for (int k = 1; k < p; k++) CU_ASSERT(at_unit_edge(m->graph, pl.stage[k].first_layer));
        bt_placement_clear(&pl);
        /* partition: profile */
        bt_parallel_config cfg = m->parallel;
        cfg.stages = p;
        cfg.devices = lp.devices;
        cfg.partition = BT_PARTITION_PROFILE;
        cfg.profile = prof;
        bt_plan *plan = NULL;
        CU_ASSERT_FATAL(bt_plan_build(m->graph, &cfg, &plan) == BT_OK);
        for (int k = 1; k < p; k++) CU_ASSERT(at_unit_edge(m->graph, plan->first_layer[k]));
        bt_plan_destroy(plan);
        /* the uniform comparison `baton plan` prints */
        int first[4];
        CU_ASSERT_FATAL(bt_placement_uniform_cuts(m->graph, prof->n_layers, p, first) == BT_OK);
        for (int k = 1; k < p; k++) CU_ASSERT(at_unit_edge(m->graph, first[k]));
    }
    /* a hand-made cut inside a block is refused when priced */
    lp.devices = "cpu:0,cpu:1";
    CU_ASSERT(bt_placement_evaluate(prof, &lp, (const int[]){0, 16, 32}, &pl) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "inside a repeated block") != NULL);
    /* the layout search (parallel: auto) with this profile at every point it reads */
    bt_search_params sp;
    bt_search_params_init(&sp);
    sp.graph = m->graph;
    sp.batch = 4;
    sp.devices = "cpu:0,cpu:1";
    sp.cores = 2;
    sp.threads = 1;
    sp.n_microbatches = 1;
    sp.microbatches[0] = 2;
    sp.n_schedules = 1;
    sp.schedules[0] = BT_SCHEDULE_1F1B;
    sp.recompute = 0;
    bt_search_point pts[BT_SEARCH_MAX_POINTS];
    int n = 0;
    CU_ASSERT_FATAL(bt_search_points(&sp, pts, BT_SEARCH_MAX_POINTS, &n) == BT_OK && n == 1);
    const bt_profile *profs[1] = {prof};
    bt_search_result r;
    CU_ASSERT_FATAL(bt_search_layouts(&sp, pts, profs, 1, &r) == BT_OK);
    int multi = 0;
    for (int i = 0; i < r.n; i++)
        if (r.cand[i].fits && r.cand[i].stages == 2) {
            multi = 1;
            CU_ASSERT(at_unit_edge(m->graph, r.cand[i].first_layer[1]));
        }
    CU_ASSERT(multi);
    bt_search_result_clear(&r);
    bt_profile_destroy(prof);
    bt_model_destroy(m);
}

static bt_engine *make_engine(const bt_model *m, int stages, bt_schedule_kind kind, int micro,
                              bt_dtype dtype, bt_optimizer_kind opt, double lr)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.stages = stages;
    p.parallel.devices = "auto";
    p.parallel.microbatches = micro;
    p.parallel.schedule = kind;
    p.batch = 4;
    p.dtype = dtype;
    p.threads = 1;
    p.seed = 7;
    p.optimizer.kind = opt;
    p.optimizer.lr = lr;
    p.optimizer.weight_decay = opt == BT_OPT_SGD ? 0 : 0.01;
    p.optimizer.momentum = 0;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return e;
}

/* One SGD step of the tied model moves both copies by g_wte + g_head of the untied model. */
static void test_tie_sums_gradients(void)
{
    const size_t n = (size_t)V * C;
    double *w0 = calloc(n, sizeof *w0), *gw = calloc(n, sizeof *gw), *gh = calloc(n, sizeof *gh);
    double *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    int32_t idx[4 * T], label[4 * T];
    fill_tokens(idx, label, 4, 11);
    bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
    bt_model *tied = load_gpt(1), *untied = load_gpt(0);
    bt_engine *et = make_engine(tied, 2, BT_SCHEDULE_1F1B, 2, BT_F64, BT_OPT_SGD, 0.5);
    bt_engine *eu = make_engine(untied, 1, BT_SCHEDULE_1F1B, 1, BT_F64, BT_OPT_SGD, 0.5);
    CU_ASSERT_FATAL(bt_engine_read_param(et, "wte.weight", w0, n * 8) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_read_param(et, "lm_head.weight", a, n * 8) == BT_OK);
    CU_ASSERT(memcmp(w0, a, n * 8) == 0); /* the copy starts as its source */
    /* the untied model gets the same weights everywhere, then its two gradients */
    for (int i = 0; i < bt_graph_num_params(untied->graph); i++) {
        bt_param_info p;
        CU_ASSERT_FATAL(bt_graph_param(untied->graph, i, &p) == BT_OK);
        size_t bytes = (size_t)bt_shape_numel(&p.shape) * 8;
        double *buf = malloc(bytes);
        CU_ASSERT_FATAL(bt_engine_read_param(et, p.name, buf, bytes) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_write_param(eu, p.name, buf, bytes) == BT_OK);
        free(buf);
    }
    bt_step_result r;
    CU_ASSERT_FATAL(bt_engine_compute_grads(eu, feeds, 2, &r) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_read_grad(eu, "wte.weight", gw, n * 8) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_read_grad(eu, "lm_head.weight", gh, n * 8) == BT_OK);
    bt_step_result rt;
    CU_ASSERT_FATAL(bt_engine_train_step(et, feeds, 2, &rt) == BT_OK);
    CU_ASSERT(fabs(rt.loss - r.loss) <= 1e-12 * fabs(r.loss));
    CU_ASSERT_FATAL(bt_engine_read_param(et, "wte.weight", a, n * 8) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_read_param(et, "lm_head.weight", b, n * 8) == BT_OK);
    CU_ASSERT(memcmp(a, b, n * 8) == 0);
    double worst = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        double want = w0[i] - 0.5 * (gw[i] + gh[i]);
        worst = fmax(worst, fabs(a[i] - want));
        moved = fmax(moved, fabs(gh[i]));
    }
    if (!(worst < 1e-12)) printf("\n  tied update off by %g\n", worst);
    CU_ASSERT(worst < 1e-12);
    CU_ASSERT(moved > 1e-6); /* the head's gradient is not negligible: the sum is tested */
    bt_engine_destroy(et);
    bt_engine_destroy(eu);
    bt_model_destroy(tied);
    bt_model_destroy(untied);
    free(w0), free(gw), free(gh), free(a), free(b);
}

#define STEPS 3

/* Losses and parameters after STEPS steps; the tied copies compared bit for bit every step. */
static void run_gpt(const bt_model *m, int stages, bt_schedule_kind kind, double *loss, double **params)
{
    bt_engine *e = make_engine(m, stages, kind, 4, BT_F32, BT_OPT_ADAMW, 3e-3);
    const size_t n = (size_t)V * C;
    float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
    for (int s = 0; s < STEPS; s++) {
        int32_t idx[4 * T], label[4 * T];
        fill_tokens(idx, label, 4, 100); /* one batch: the loss must fall */
        bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
        bt_step_result r;
        CU_ASSERT_FATAL(bt_engine_train_step(e, feeds, 2, &r) == BT_OK);
        loss[s] = r.loss;
        CU_ASSERT_FATAL(bt_engine_read_param(e, "wte.weight", a, n * 4) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_read_param(e, "lm_head.weight", b, n * 4) == BT_OK);
        if (memcmp(a, b, n * 4) != 0) printf("\n  %d stages: tied copies differ after step %d\n", stages, s + 1);
        CU_ASSERT(memcmp(a, b, n * 4) == 0);
    }
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        size_t k = (size_t)bt_shape_numel(&p.shape);
        float *f = malloc(k * sizeof *f);
        params[i] = malloc(k * sizeof **params);
        CU_ASSERT_FATAL(bt_engine_read_param(e, p.name, f, k * 4) == BT_OK);
        for (size_t j = 0; j < k; j++) params[i][j] = f[j];
        free(f);
    }
    free(a), free(b);
    bt_engine_destroy(e);
}

static void test_pipelines_agree(void)
{
    bt_model *m = load_gpt(1);
    const int np = bt_graph_num_params(m->graph);
    double ref_loss[STEPS], loss[STEPS];
    double **ref = calloc((size_t)np, sizeof *ref), **got = calloc((size_t)np, sizeof *got);
    run_gpt(m, 1, BT_SCHEDULE_1F1B, ref_loss, ref);
    CU_ASSERT(ref_loss[2] < ref_loss[0]);
    for (int stages = 1; stages <= 4; stages++)
        for (int k = 0; k < 2; k++) {
            bt_schedule_kind kind = k ? BT_SCHEDULE_1F1B : BT_SCHEDULE_GPIPE;
            run_gpt(m, stages, kind, loss, got);
            for (int s = 0; s < STEPS; s++) {
                double rel = fabs(loss[s] - ref_loss[s]) / fabs(ref_loss[s]);
                if (!(rel <= 1e-5)) printf("\n  %d stages %s: step %d loss %.9g, one stage %.9g\n", stages, k ? "1f1b" : "gpipe", s + 1, loss[s], ref_loss[s]);
                CU_ASSERT(rel <= 1e-5);
            }
            for (int i = 0; i < np; i++) {
                bt_param_info p;
                bt_graph_param(m->graph, i, &p);
                double worst = 0, scale = 1e-3;
                for (int64_t j = 0; j < bt_shape_numel(&p.shape); j++) {
                    worst = fmax(worst, fabs(got[i][j] - ref[i][j]));
                    scale = fmax(scale, fabs(ref[i][j]));
                }
                if (!(worst <= 1e-5 * scale)) printf("\n  %d stages: %s differs by %g (scale %g)\n", stages, p.name, worst, scale);
                CU_ASSERT(worst <= 1e-5 * scale);
                free(got[i]);
            }
        }
    for (int i = 0; i < np; i++) free(ref[i]);
    free(ref), free(got);
    bt_model_destroy(m);
}

static void test_generate(void)
{
    bt_model *m = load_gpt(1);
    bt_engine *e = make_engine(m, 2, BT_SCHEDULE_1F1B, 1, BT_F64, BT_OPT_ADAMW, 3e-3);
    int32_t idx[4 * T], label[4 * T];
    fill_tokens(idx, label, 4, 5);
    bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
    bt_step_result r;
    for (int s = 0; s < 3; s++) CU_ASSERT_FATAL(bt_engine_train_step(e, feeds, 2, &r) == BT_OK);
    double per_sample[4];
    CU_ASSERT_FATAL(bt_engine_forward(e, feeds, 2, per_sample, &r) == BT_OK);
    for (int b = 0; b < 4; b++) {
        int32_t seq[T + 1];
        memcpy(seq, idx + b * T, sizeof(int32_t) * T);
        seq[T] = label[b * T + T - 1];
        double loss = 0;
        CU_ASSERT_FATAL(bt_generate_score(e, m->graph, seq, T + 1, &loss) == BT_OK);
        if (!(fabs(loss - per_sample[b]) <= 1e-12 * fabs(per_sample[b])))
            printf("\n  sample %d: decoder %.17g, forward %.17g\n", b, loss, per_sample[b]);
        CU_ASSERT(fabs(loss - per_sample[b]) <= 1e-12 * fabs(per_sample[b]));
    }
    /* the same tokens with and without the cache (a batch-1 engine for the window path) */
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.stages = 2;
    p.batch = 1;
    p.dtype = BT_F64;
    p.threads = 1;
    p.training = 0;
    bt_engine *e1 = NULL;
    CU_ASSERT_FATAL(bt_engine_create(m->graph, &p, &e1) == BT_OK);
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info pi;
        bt_graph_param(m->graph, i, &pi);
        size_t bytes = (size_t)bt_shape_numel(&pi.shape) * 8;
        double *buf = malloc(bytes);
        CU_ASSERT_FATAL(bt_engine_read_param(e, pi.name, buf, bytes) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_write_param(e1, pi.name, buf, bytes) == BT_OK);
        free(buf);
    }
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 6;
    gp.seed = 3;
    gp.top_k = 5;
    const int32_t prompt[] = {1, 2, 3};
    int32_t a[6], b[6];
    bt_generate_stats st;
    CU_ASSERT_FATAL(bt_generate(e, m->graph, prompt, 3, &gp, a, &st) == BT_OK);
    CU_ASSERT(st.tokens_per_s > 0);
    gp.kv_cache = 0;
    CU_ASSERT_FATAL(bt_generate(e1, m->graph, prompt, 3, &gp, b, &st) == BT_OK);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    for (int k = 0; k < 6; k++) CU_ASSERT(a[k] >= 0 && a[k] < V);
    /* errors: a token outside the vocabulary, a bad temperature */
    const int32_t bad[] = {1, V};
    gp.kv_cache = 1;
    CU_ASSERT(bt_generate(e, m->graph, bad, 2, &gp, a, &st) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "prompt token 13 at 1 is outside the vocabulary of 13") != NULL);
    gp.temperature = -1;
    CU_ASSERT(bt_generate(e, m->graph, prompt, 3, &gp, a, &st) == BT_ERR_INVALID_ARG);
    gp.temperature = 1;
    gp.vocab = V + 1; /* a tokenizer larger than the logits */
    CU_ASSERT(bt_generate(e, m->graph, prompt, 3, &gp, a, &st) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "a vocabulary of 14 tokens is larger than the model's 13 logits") != NULL);
    bt_engine_destroy(e1);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* The index of the largest of row[0..n), the lowest among equals. */
static int32_t argmax_of(const double *row, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* Temperature 0 is greedy: every token is the argmax of the forward's last logits row for the
 * tokens so far (the window, batch 1), with and without the KV cache, whatever the seed and top_k;
 * equal logits give the lowest id (an lm_head of zeros: every token 0). vocab restricts sampling
 * to the ids below it: at a temperature that makes every id likely, 200 tokens stay below 5 (and
 * without the restriction they do not), and a prompt token at or above it is refused. */
static void test_generate_greedy_and_vocab(void)
{
    bt_model *m = load_gpt(0);
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.batch = 1;
    p.dtype = BT_F64;
    p.threads = 1;
    p.training = 0;
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(m->graph, &p, &e) == BT_OK);
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 5;
    gp.temperature = 0;
    const int32_t prompt[] = {4, 7, 1};
    int32_t a[5], b[5], c[5];
    CU_ASSERT_FATAL(bt_generate(e, m->graph, prompt, 3, &gp, a, NULL) == BT_OK);
    gp.seed = 77;
    gp.top_k = 2;
    CU_ASSERT_FATAL(bt_generate(e, m->graph, prompt, 3, &gp, b, NULL) == BT_OK);
    gp.kv_cache = 0;
    CU_ASSERT_FATAL(bt_generate(e, m->graph, prompt, 3, &gp, c, NULL) == BT_OK);
    CU_ASSERT(memcmp(a, b, sizeof a) == 0 && memcmp(a, c, sizeof a) == 0);
    int32_t seq[T] = {4, 7, 1}, label[T] = {0};
    double logits[T * V];
    bt_feed feeds[] = {{"idx", seq, BT_I32}, {"label", label, BT_I32}};
    for (int k = 0; k < 5; k++) {
        CU_ASSERT_FATAL(bt_engine_forward_layer(e, feeds, 2, "lm_head", logits, NULL) == BT_OK);
        const int32_t want = argmax_of(logits + (3 + k - 1) * V, V);
        if (a[k] != want) printf("\n  greedy token %d: %d, the forward's argmax %d\n", k, a[k], want);
        CU_ASSERT_EQUAL(a[k], want);
        seq[3 + k] = want;
    }
    double zeros[V * C] = {0};
    CU_ASSERT_FATAL(bt_engine_write_param(e, "lm_head.weight", zeros, sizeof zeros) == BT_OK);
    gp.kv_cache = 1;
    CU_ASSERT_FATAL(bt_generate(e, m->graph, prompt, 3, &gp, a, NULL) == BT_OK);
    for (int k = 0; k < 5; k++) CU_ASSERT_EQUAL(a[k], 0);
    /* vocab: at temperature 1e6 every one of the 13 ids is about equally likely */
    int32_t many[200];
    gp.temperature = 1e6;
    gp.top_k = 0;
    gp.tokens = 200;
    int above = 0;
    CU_ASSERT_FATAL(bt_generate(e, m->graph, prompt, 3, &gp, many, NULL) == BT_OK);
    for (int k = 0; k < 200; k++) above += many[k] >= 5;
    CU_ASSERT(above > 0);
    gp.vocab = 5;
    CU_ASSERT_FATAL(bt_generate(e, m->graph, (const int32_t[]){4, 1, 2}, 3, &gp, many, NULL) == BT_OK);
    above = 0;
    for (int k = 0; k < 200; k++) above += many[k] >= 5 || many[k] < 0;
    CU_ASSERT_EQUAL(above, 0);
    CU_ASSERT(bt_generate(e, m->graph, prompt, 3, &gp, many, NULL) == BT_ERR_INVALID_ARG); /* 7 >= 5 */
    CU_ASSERT(strstr(bt_last_error(), "prompt token 7 at 1 is outside the vocabulary of 5") != NULL);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* A batch-1 inference engine on `stages` stages (layout: a cut string, or NULL for the default
 * partition) with the weights of src. */
static bt_engine *copy_engine(const bt_model *m, bt_engine *src, int stages, const char *layout,
                              bt_transfer_mode transfer)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.stages = stages;
    p.transfer = transfer;
    if (layout) {
        p.parallel.partition = BT_PARTITION_LAYOUT;
        p.parallel.layout = layout;
    }
    p.batch = 1;
    p.dtype = BT_F64;
    p.threads = 1;
    p.training = 0;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info pi;
        bt_graph_param(m->graph, i, &pi);
        size_t bytes = (size_t)bt_shape_numel(&pi.shape) * 8;
        double *buf = malloc(bytes);
        CU_ASSERT_FATAL(bt_engine_read_param(src, pi.name, buf, bytes) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_write_param(e, pi.name, buf, bytes) == BT_OK);
        free(buf);
    }
    return e;
}

#define NP 4  /* prompts */
#define NT 20 /* tokens each: past T = 9, so every prompt's window is read again several times */

/* Decoding through 1 to 4 stages (and a cut that sends a value past a stage) gives every prompt
 * the tokens the one-stage engine gives it, greedy and sampled; prompts in flight together give
 * what each gives alone with seed + its index; within the window the KV cache gives what the
 * forward over the whole window gives; scoring agrees with the forward on every stage count. */
static void test_generate_pipelined(void)
{
    bt_model *m = load_gpt(1);
    bt_engine *trained = make_engine(m, 2, BT_SCHEDULE_1F1B, 1, BT_F64, BT_OPT_ADAMW, 3e-2);
    int32_t idx[4 * T], label[4 * T];
    fill_tokens(idx, label, 4, 11);
    bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
    bt_step_result r;
    for (int s = 0; s < 5; s++) CU_ASSERT_FATAL(bt_engine_train_step(trained, feeds, 2, &r) == BT_OK);
    /* skip: h.0.res1 on stage 2 reads wpe's output from stage 0 */
    static const char skip_layout[] = "wte,wpe | h.0.ln_1,h.0.c_attn,h.0.attn,h.0.c_proj | h.0.res1,h.0.ln_2,"
                                      "h.0.c_fc,h.0.mlp_proj,h.0.res2,h.1 | h.2,ln_f,lm_head,loss";
    enum { N_ENG = 7 };
    bt_engine *eng[N_ENG];
    for (int s = 0; s < 4; s++) eng[s] = copy_engine(m, trained, s + 1, NULL, BT_TRANSFER_AUTO);
    eng[4] = copy_engine(m, trained, 4, skip_layout, BT_TRANSFER_AUTO);
    /* the rows through host memory (the path between different devices) */
    eng[5] = copy_engine(m, trained, 3, NULL, BT_TRANSFER_HOST);
    eng[6] = copy_engine(m, trained, 4, skip_layout, BT_TRANSFER_STAGED);
    const int32_t p0[] = {1, 2, 3}, p1[] = {4}, p2[] = {5, 6, 7, 8, 9, 10, 11, 12, 0, 1, 2}, p3[] = {7, 7};
    const int32_t *prompts[NP] = {p0, p1, p2, p3};
    const int64_t lens[NP] = {3, 1, 11, 2};
    for (int sampled = 0; sampled < 2; sampled++) {
        bt_generate_params gp;
        bt_generate_params_init(&gp);
        gp.tokens = NT;
        gp.seed = 5;
        gp.top_k = sampled ? 6 : 1;
        gp.temperature = sampled ? 0.9 : 1.0;
        int32_t ref[NP][NT], got[NP][NT];
        int32_t *ref_out[NP] = {ref[0], ref[1], ref[2], ref[3]}, *got_out[NP] = {got[0], got[1], got[2], got[3]};
        bt_generate_stats per[NP], total;
        CU_ASSERT_FATAL(bt_generate_batch(eng[0], m->graph, NP, prompts, lens, &gp, ref_out, per, &total) == BT_OK);
        CU_ASSERT(total.stages == 1 && total.tokens_per_s > 0 && total.busy > 0 && total.busy <= 1.0 + 1e-9);
        static const int stages_of[N_ENG] = {1, 2, 3, 4, 4, 3, 4};
        for (int e = 1; e < N_ENG; e++) {
            memset(got, 0xff, sizeof got);
            CU_ASSERT_FATAL(bt_generate_batch(eng[e], m->graph, NP, prompts, lens, &gp, got_out, per, &total) == BT_OK);
            CU_ASSERT(total.stages == stages_of[e]);
            if (memcmp(got, ref, sizeof ref) != 0) printf("\n  engine %d (sampled %d): tokens differ\n", e, sampled);
            CU_ASSERT(memcmp(got, ref, sizeof ref) == 0);
        }
        /* each prompt alone, with seed + its index */
        for (int q = 0; q < NP; q++) {
            bt_generate_params one = gp;
            one.seed = gp.seed + (uint64_t)q;
            int32_t alone[NT];
            CU_ASSERT_FATAL(bt_generate(eng[2], m->graph, prompts[q], lens[q], &one, alone, NULL) == BT_OK);
            if (memcmp(alone, ref[q], sizeof alone) != 0) printf("\n  prompt %d alone differs (sampled %d)\n", q, sampled);
            CU_ASSERT(memcmp(alone, ref[q], sizeof alone) == 0);
        }
        /* within the window: the KV cache = the forward over the window (prompt p0: 3 + 6 = T) */
        bt_generate_params win = gp;
        win.tokens = T - 3;
        int32_t a[T], b[T];
        CU_ASSERT_FATAL(bt_generate(eng[3], m->graph, p0, 3, &win, a, NULL) == BT_OK);
        win.kv_cache = 0;
        CU_ASSERT_FATAL(bt_generate(eng[1], m->graph, p0, 3, &win, b, NULL) == BT_OK);
        CU_ASSERT(memcmp(a, b, (size_t)(T - 3) * sizeof *a) == 0);
    }
    /* scoring through every stage count agrees with the forward */
    double per_sample[4];
    CU_ASSERT_FATAL(bt_engine_forward(trained, feeds, 2, per_sample, &r) == BT_OK);
    for (int e = 0; e < N_ENG; e++)
        for (int b = 0; b < 4; b++) {
            int32_t seq[T + 1];
            memcpy(seq, idx + b * T, sizeof(int32_t) * T);
            seq[T] = label[b * T + T - 1];
            double loss = 0;
            CU_ASSERT_FATAL(bt_generate_score(eng[e], m->graph, seq, T + 1, &loss) == BT_OK);
            CU_ASSERT(fabs(loss - per_sample[b]) <= 1e-12 * fabs(per_sample[b]));
        }
    /* a bad token in the second prompt is named */
    const int32_t bad[] = {1, V};
    const int32_t *bad_prompts[2] = {p0, bad};
    const int64_t bad_lens[2] = {3, 2};
    int32_t o0[NT], o1[NT];
    int32_t *outs[2] = {o0, o1};
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 3;
    CU_ASSERT(bt_generate_batch(eng[1], m->graph, 2, bad_prompts, bad_lens, &gp, outs, NULL, NULL) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "prompt 1: prompt token 13 at 1") != NULL);
    for (int e = 0; e < N_ENG; e++) bt_engine_destroy(eng[e]);
    bt_engine_destroy(trained);
    bt_model_destroy(m);
}


/* The ops above decode one row each (split, concat, matmul and transpose count rows from the
 * call's tensors: with the config's T rows they ran past the one row's buffers), and so do the
 * Hugging Face ops (rope by the row's position, grouped-query attention with a window keeping
 * kv_heads in its cache, swiglu, gelu's tanh form): the decoder's score of each window equals the
 * forward's loss (f64) on 1 and 3 stages. A matmul whose matrices span the sequence ([T, T] @
 * [T, T]) cannot decode a position alone: refused, naming the layer. */
static void check_decoder_scores(const char *yaml, const char *what)
{
    bt_model *m = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(yaml, strlen(yaml), what, NULL, 0, &m) == BT_OK);
    bt_engine *e = make_engine(m, 1, BT_SCHEDULE_1F1B, 1, BT_F64, BT_OPT_ADAMW, 3e-3);
    int32_t idx[4 * T], label[4 * T];
    fill_tokens(idx, label, 4, 21);
    bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
    bt_step_result r;
    double per_sample[4];
    CU_ASSERT_FATAL(bt_engine_forward(e, feeds, 2, per_sample, &r) == BT_OK);
    bt_engine *three = copy_engine(m, e, 3, NULL, BT_TRANSFER_AUTO);
    for (int b = 0; b < 4; b++) {
        int32_t seq[T + 1];
        memcpy(seq, idx + b * T, sizeof(int32_t) * T);
        seq[T] = label[b * T + T - 1];
        double l1 = 0, l3 = 0;
        CU_ASSERT_FATAL(bt_generate_score(e, m->graph, seq, T + 1, &l1) == BT_OK);
        CU_ASSERT_FATAL(bt_generate_score(three, m->graph, seq, T + 1, &l3) == BT_OK);
        if (!(fabs(l1 - per_sample[b]) <= 1e-12 * fabs(per_sample[b])))
            printf("\n  %s sample %d: decoder %.17g, forward %.17g\n", what, b, l1, per_sample[b]);
        CU_ASSERT(fabs(l1 - per_sample[b]) <= 1e-12 * fabs(per_sample[b]));
        CU_ASSERT(fabs(l3 - per_sample[b]) <= 1e-12 * fabs(per_sample[b]));
    }
    bt_engine_destroy(three);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_generate_every_op(void)
{
    check_decoder_scores(bt_test_decode_mix_yaml, "mix.yaml");
    check_decoder_scores(bt_test_decode_llama_yaml, "llama.yaml");
    bt_model *m = NULL;
    static const char square_yaml[] =
        "format: 1\n"
        "inputs:\n"
        "  idx: {shape: [9], dtype: i32}\n"
        "  label: {shape: [9], dtype: i32}\n"
        "layers:\n"
        "  - {name: wte, op: embedding, args: {num: 13, dim: 9}, from: idx}\n"
        "  - {name: mix, op: matmul, from: [wte, wte]}\n"
        "  - {name: head, op: linear, args: {out: 13}}\n"
        "  - {name: loss, op: cross_entropy, from: [head, label]}\n";
    CU_ASSERT_FATAL(bt_model_load_string(square_yaml, strlen(square_yaml), "square.yaml", NULL, 0, &m) == BT_OK);
    bt_engine *e = make_engine(m, 1, BT_SCHEDULE_1F1B, 1, BT_F64, BT_OPT_ADAMW, 3e-3);
    const int32_t window[T + 1] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    double loss;
    CU_ASSERT(bt_generate_score(e, m->graph, window, T + 1, &loss) == BT_ERR_UNSUPPORTED);
    CU_ASSERT(strstr(bt_last_error(), "layer 'mix'") != NULL &&
              strstr(bt_last_error(), "do not hold whole matrices") != NULL);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* A batch-1 engine on `stages` stages computing in precision (f32 dtype), with src's weights. */
static bt_engine *copy_engine_prec(const bt_model *m, bt_engine *src, int stages, bt_dtype precision)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.stages = stages;
    p.batch = 1;
    p.threads = 1;
    p.training = 0;
    p.precision = precision;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info pi;
        bt_graph_param(m->graph, i, &pi);
        size_t bytes = (size_t)bt_shape_numel(&pi.shape) * sizeof(float);
        float *buf = malloc(bytes);
        CU_ASSERT_FATAL(bt_engine_read_param(src, pi.name, buf, bytes) == BT_OK);
        CU_ASSERT_FATAL(bt_engine_write_param(e, pi.name, buf, bytes) == BT_OK);
        free(buf);
    }
    return e;
}

#define BF16_TOL 5e-6 /* relative: measured 4.6e-8 (AVX512-BF16 and f32 paths); an f32 decoder: 6.7e-5 */

/* precision: bf16 (f32 master weights; bf16 compute copies, GEMMs and activations): the decoder
 * computes as the bf16 forward does, so its score of each window equals the bf16 forward's loss
 * (what the evaluation reports) within BF16_TOL on 1 and 2 stages, while a decoder that computed
 * in f32 from the same master weights misses it by more; and the greedy tokens with the KV cache
 * equal those of the window rerun through the bf16 forward, for three prompts (within the window,
 * where the two read the same tokens), on 1 and 2 stages. */
static void test_generate_bf16(void)
{
    bt_model *m = load_gpt(1);
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel.stages = 2;
    p.parallel.microbatches = 2;
    p.batch = 4;
    p.threads = 1;
    p.seed = 7;
    p.precision = BT_BF16;
    p.optimizer.lr = 3e-2;
    bt_engine *trained = NULL;
    CU_ASSERT_FATAL(bt_engine_create(m->graph, &p, &trained) == BT_OK);
    int32_t idx[4 * T], label[4 * T];
    fill_tokens(idx, label, 4, 11);
    bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
    bt_step_result r;
    for (int s = 0; s < 5; s++) CU_ASSERT_FATAL(bt_engine_train_step(trained, feeds, 2, &r) == BT_OK);
    float per_sample[4];
    CU_ASSERT_FATAL(bt_engine_forward(trained, feeds, 2, per_sample, &r) == BT_OK);
    bt_engine *one = copy_engine_prec(m, trained, 1, BT_BF16), *two = copy_engine_prec(m, trained, 2, BT_BF16);
    bt_engine *f32 = copy_engine_prec(m, trained, 1, BT_F32);
    double worst = 0, f32_best = INFINITY;
    for (int b = 0; b < 4; b++) {
        int32_t seq[T + 1];
        memcpy(seq, idx + b * T, sizeof(int32_t) * T);
        seq[T] = label[b * T + T - 1];
        double l1 = 0, l2 = 0, lf = 0;
        CU_ASSERT_FATAL(bt_generate_score(one, m->graph, seq, T + 1, &l1) == BT_OK);
        CU_ASSERT_FATAL(bt_generate_score(two, m->graph, seq, T + 1, &l2) == BT_OK);
        CU_ASSERT_FATAL(bt_generate_score(f32, m->graph, seq, T + 1, &lf) == BT_OK);
        const double want = per_sample[b];
        worst = fmax(worst, fmax(fabs(l1 - want), fabs(l2 - want)) / fabs(want));
        f32_best = fmin(f32_best, fabs(lf - want) / fabs(want));
        CU_ASSERT(l1 == l2); /* the same rows, on any number of stages */
    }
    printf("\n  bf16: decoder vs bf16 forward within %.3g relative; an f32 decoder at least %.3g off", worst,
           f32_best);
    CU_ASSERT(worst <= BF16_TOL);
    CU_ASSERT(f32_best > worst); /* the tolerance tells the two apart */
    /* greedy tokens: the KV cache in bf16 = the bf16 forward over the window */
    const int32_t p0[] = {1, 2, 3}, p1[] = {4}, p2[] = {5, 6, 7, 8, 9};
    const int32_t *prompts[3] = {p0, p1, p2};
    const int64_t lens[3] = {3, 1, 5};
    for (int q = 0; q < 3; q++) {
        bt_generate_params gp;
        bt_generate_params_init(&gp);
        gp.tokens = T - lens[q];
        gp.top_k = 1;
        int32_t cached[T], cached2[T], window[T];
        CU_ASSERT_FATAL(bt_generate(one, m->graph, prompts[q], lens[q], &gp, cached, NULL) == BT_OK);
        CU_ASSERT_FATAL(bt_generate(two, m->graph, prompts[q], lens[q], &gp, cached2, NULL) == BT_OK);
        gp.kv_cache = 0;
        CU_ASSERT_FATAL(bt_generate(one, m->graph, prompts[q], lens[q], &gp, window, NULL) == BT_OK);
        if (memcmp(cached, window, (size_t)gp.tokens * sizeof *cached) != 0)
            printf("\n  bf16 prompt %d: the KV cache's tokens differ from the forward's", q);
        CU_ASSERT(memcmp(cached, window, (size_t)gp.tokens * sizeof *cached) == 0);
        CU_ASSERT(memcmp(cached, cached2, (size_t)gp.tokens * sizeof *cached) == 0);
    }
    bt_engine_destroy(one);
    bt_engine_destroy(two);
    bt_engine_destroy(f32);
    bt_engine_destroy(trained);
    bt_model_destroy(m);
}

static void test_tied_checkpoint(void)
{
    bt_model *m = load_gpt(1);
    bt_engine *a = make_engine(m, 3, BT_SCHEDULE_1F1B, 2, BT_F32, BT_OPT_ADAMW, 3e-3);
    bt_engine *b = make_engine(m, 1, BT_SCHEDULE_GPIPE, 1, BT_F32, BT_OPT_ADAMW, 3e-3);
    int32_t idx[4 * T], label[4 * T];
    bt_feed feeds[] = {{"idx", idx, BT_I32}, {"label", label, BT_I32}};
    bt_step_result r;
    for (int s = 0; s < 2; s++) {
        fill_tokens(idx, label, 4, 30 + (unsigned)s);
        CU_ASSERT_FATAL(bt_engine_train_step(a, feeds, 2, &r) == BT_OK);
    }
    char dir[] = "/tmp/bt_test_gpt_ck_XXXXXX", path[256];
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    bt_checkpoint_meta meta = {.step = 2};
    snprintf(meta.model, sizeof meta.model, "gpt");
    CU_ASSERT_FATAL(bt_checkpoint_save(a, m->graph, dir, &meta) == BT_OK);
    snprintf(path, sizeof path, "%s/" BT_CHECKPOINT_FILE, dir);
    bt_st_file *f = NULL;
    CU_ASSERT_FATAL(bt_st_open(path, &f) == BT_OK);
    int wte = 0, head = 0;
    for (int i = 0; i < bt_st_count(f); i++) {
        const char *name = bt_st_at(f, i)->name;
        wte += strcmp(name, "wte.weight") == 0;
        head += strstr(name, "lm_head.weight") != NULL;
    }
    CU_ASSERT_EQUAL(wte, 1);
    CU_ASSERT_EQUAL(head, 0); /* neither the weight nor its optimizer state */
    bt_st_close(f);
    bt_checkpoint_meta got;
    CU_ASSERT_FATAL(bt_checkpoint_resume(b, m->graph, dir, &got) == BT_OK);
    fill_tokens(idx, label, 4, 99);
    CU_ASSERT_FATAL(bt_engine_train_step(a, feeds, 2, &r) == BT_OK);
    bt_step_result rb;
    CU_ASSERT_FATAL(bt_engine_train_step(b, feeds, 2, &rb) == BT_OK);
    CU_ASSERT(fabs(r.loss - rb.loss) <= 1e-5 * fabs(r.loss));
    const size_t n = (size_t)V * C;
    float *wa = calloc(n, 4), *wb = calloc(n, 4), *hb = calloc(n, 4);
    CU_ASSERT_FATAL(bt_engine_read_param(a, "wte.weight", wa, n * 4) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_read_param(b, "wte.weight", wb, n * 4) == BT_OK);
    CU_ASSERT_FATAL(bt_engine_read_param(b, "lm_head.weight", hb, n * 4) == BT_OK);
    CU_ASSERT(memcmp(wb, hb, n * 4) == 0); /* the copy was restored from wte.weight */
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)wa[i] - wb[i]));
    CU_ASSERT(worst <= 1e-6);
    free(wa), free(wb), free(hb);
    remove(path);
    snprintf(path, sizeof path, "%s/.lock", dir);
    remove(path);
    rmdir(dir);
    bt_engine_destroy(a);
    bt_engine_destroy(b);
    bt_model_destroy(m);
}

static void test_text_data(void)
{
    const unsigned char text[] = "to be, or not to be";
    const size_t n = sizeof text - 1;
    bt_vocab v, w;
    bt_vocab_build(text, n, 0, &v);
    CU_ASSERT_EQUAL(v.size, 8); /* ' ', ',', b, e, n, o, r, t */
    CU_ASSERT_EQUAL(v.byte[0], ' ');
    CU_ASSERT_EQUAL(v.byte[7], 't');
    uint16_t tok[64];
    CU_ASSERT_FATAL(bt_vocab_encode(&v, text, n, tok) == BT_OK);
    CU_ASSERT_EQUAL(tok[0], 7);
    CU_ASSERT(bt_vocab_encode(&v, (const unsigned char *)"tox", 3, tok) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "byte 0x78 at offset 2") != NULL);
    CU_ASSERT_FATAL(bt_vocab_encode(&v, text, n, tok) == BT_OK);
    char dir[] = "/tmp/bt_test_gpt_XXXXXX", path[256];
    CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    CU_ASSERT_FATAL(bt_vocab_save(&v, path) == BT_OK);
    CU_ASSERT_FATAL(bt_vocab_load(path, &w) == BT_OK);
    CU_ASSERT(w.size == v.size && memcmp(w.byte, v.byte, 256) == 0 && memcmp(w.token, v.token, sizeof w.token) == 0);
    /* vocab.txt is read strictly: anything but the count, its entries and a newline is refused
     * naming line and column */
    static const struct {
        const char *text, *error;
    } bad_vocabs[] = {
        {"3 616263\nxyz", "vocab.txt:2:1: text after the 3 entries the count announces (byte 0x78)"},
        {"3 61626364\n", "vocab.txt:1:9: text after the 3 entries the count announces (byte 0x36)"},
        {"3 616263 \n", "vocab.txt:1:9: text after the 3 entries"},
        {"3 616261\n", "vocab.txt:1:7: entry 2 (byte 0x61) repeats entry 0"},
        {"3 616362\n", "vocab.txt:1:7: entry 2 (byte 0x62) is below entry 1 (0x63)"},
        {"3 6162\n", "vocab.txt:1:7: entry 2 of 3 is not two hex digits (the line ends early)"},
        {"3 61+2\n", "vocab.txt:1:5: entry 1 of 3 is not two hex digits"},
        {"+3 616263\n", "vocab.txt:1:1: not a vocabulary file"},
        {"03 616263\n", "vocab.txt:1:1: not a vocabulary file"},
        {"257 00\n", "vocab.txt:1:1: not a vocabulary file"},
        {"3\t616263\n", "vocab.txt:1:2: a space must follow the count 3"},
    };
    for (size_t i = 0; i < sizeof bad_vocabs / sizeof *bad_vocabs; i++) {
        FILE *vf = fopen(path, "w");
        CU_ASSERT_FATAL(vf != NULL);
        fputs(bad_vocabs[i].text, vf);
        fclose(vf);
        const bt_status vst = bt_vocab_load(path, &w);
        if (vst != BT_ERR_IO || !strstr(bt_last_error(), bad_vocabs[i].error))
            printf("\n  vocab '%s': %d, %s\n", bad_vocabs[i].text, vst, bt_last_error());
        CU_ASSERT(vst == BT_ERR_IO && strstr(bt_last_error(), bad_vocabs[i].error) != NULL);
    }
    FILE *vf = fopen(path, "w"); /* without the final newline, and in upper case: the same vocabulary */
    CU_ASSERT_FATAL(vf != NULL);
    fputs("3 2C6F74", vf);
    fclose(vf);
    CU_ASSERT(bt_vocab_load(path, &w) == BT_OK && w.size == 3 && w.byte[0] == ',' && w.token['t'] == 2);
    bt_vocab all;
    bt_vocab_build(text, n, 1, &all);
    CU_ASSERT_EQUAL(all.size, 256);
    /* shards */
    snprintf(path, sizeof path, "%s/train.bin", dir);
    CU_ASSERT_FATAL(bt_tokens_write_bin(path, tok, n) == BT_OK);
    uint16_t *back = NULL;
    size_t m = 0;
    CU_ASSERT_FATAL(bt_tokens_read_bin(path, &back, &m) == BT_OK);
    CU_ASSERT(m == n && memcmp(back, tok, n * 2) == 0);
    free(back);
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_FATAL(f != NULL);
    int32_t wrong = 20240519;
    fwrite(&wrong, 4, 1, f);
    fclose(f);
    CU_ASSERT(bt_tokens_read_bin(path, &back, &m) == BT_ERR_IO);
    CU_ASSERT(strstr(bt_last_error(), "not an llm.c token shard (magic 20240519") != NULL);
    remove(path);
    snprintf(path, sizeof path, "%s/vocab.txt", dir);
    remove(path);
    rmdir(dir);
    /* windows: every label is the token after its input */
    int32_t idx[3 * 5], label[3 * 5];
    uint64_t rng = 42;
    bt_text_windows(tok, n, 5, 3, &rng, idx, label);
    for (int b = 0; b < 3; b++) {
        int o = -1;
        for (int s = 0; s + 5 < (int)n && o < 0; s++)
            if (memcmp(&idx[b * 5], (int32_t[]){tok[s], tok[s + 1], tok[s + 2], tok[s + 3], tok[s + 4]}, 20) == 0 &&
                label[b * 5 + 4] == tok[s + 5])
                o = s;
        CU_ASSERT(o >= 0);
        for (int t = 0; t < 4; t++) CU_ASSERT_EQUAL(label[b * 5 + t], idx[b * 5 + t + 1]);
    }
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"blocks: names and references", test_block_names},
        {"blocks: partitions cut between copies", test_block_partition},
        {"blocks: measured-cost plans and the search cut between copies", test_block_partition_measured},
        {"tie: one step moves both copies by the summed gradient", test_tie_sums_gradients},
        {"GPT on 1-4 stages, GPipe and 1F1B: same losses and weights", test_pipelines_agree},
        {"generate: KV-cache decoder = forward; with = without the cache", test_generate},
        {"generate through 1-4 stages, prompts in flight = one stage = alone", test_generate_pipelined},
        {"generate: temperature 0 is greedy (lowest id on ties); vocab bounds the ids", test_generate_greedy_and_vocab},
        {"generate in bf16: score = bf16 forward, tokens = bf16 window", test_generate_bf16},
        {"generate through rmsnorm, split, concat, matmul, transpose, silu", test_generate_every_op},
        {"tie: checkpoints store the tensor once; resume elsewhere", test_tied_checkpoint},
        {"text data: vocabulary, llm.c shards, windows", test_text_data},
        {NULL, NULL},
    };
    return bt_test_main("gpt", cases);
}
