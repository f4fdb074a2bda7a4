/* tests/test_bf16_store.c: activations kept as bf16 under precision bf16 on CPU stages
 * (exec/bf16_store.c, plan/memory.h). A storage change, not a numerical one:
 *   - the packing is exact for every bf16 value (signs, zeros, subnormals, infinities, NaNs) and
 *     says when a value is not one; the CPU backend refuses to store such a value (BT_ERR_INTERNAL);
 *   - training runs with bf16 storage forced on every stage (BATON_BF16_STASH=1) equal the runs
 *     with f32 slots (=0) bit for bit, losses, weights and a forward after them, under 1F1B,
 *     GPipe, ZB-H1 (whose W stashes are bf16 too), interleaved 1F1B, ZBV, recomputation (also with
 *     ZB-H1) and forced host-path transfers; and the engine did keep them as bf16 there;
 *   - memory: on a bf16 MLP pipeline under GPipe the reserved activation bytes (the plan) and the
 *     measured peak are the figures worked out by hand below, against the f32 run's; the default
 *     (auto) keeps a stage in f32 where bf16 slots plus working copies would take more; f32 runs
 *     never keep bf16;
 *   - BATON_BF16_STASH with another value is refused, naming it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "backend/backend.h"
#include "bt_test.h"
#include "core/half.h"
#include "engine_runs.h"

static void test_pack_exact(void)
{
    const float special[] = {0.0f, -0.0f, 1.0f, -2.5f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 3.3e38f};
    enum { N = 1000 + sizeof special / sizeof *special };
    float x[N], back[N];
    uint16_t h[N];
    srand(7);
    for (int i = 0; i < 1000; i++) x[i] = bt_round_bf16(((float)rand() / RAND_MAX - 0.5f) * powf(2, rand() % 60 - 30));
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) x[1000 + i] = bt_round_bf16(special[i]);
    CU_ASSERT(bt_bf16_pack(h, x, N) == 0);
    bt_bf16_unpack(back, h, N);
    CU_ASSERT(memcmp(x, back, sizeof x) == 0);
    x[17] = nextafterf(x[17], INFINITY); /* not a bf16 value any more */
    CU_ASSERT(bt_bf16_pack(h, x, N) != 0);

    bt_device *dev = NULL;
    const bt_backend *be = bt_cpu_backend();
    CU_ASSERT_FATAL(be->open(0, 1, &dev) == BT_OK);
    CU_ASSERT(be->store_bf16(dev, h, x, N) == BT_ERR_INTERNAL);
    CU_ASSERT(strstr(bt_last_error(), "not bf16 values") != NULL);
    x[17] = back[17];
    CU_ASSERT(be->store_bf16(dev, h, x, N) == BT_OK);
    CU_ASSERT(be->load_bf16(dev, back, h, N) == BT_OK);
    CU_ASSERT(memcmp(x, back, sizeof x) == 0);
    be->close(dev);
}

typedef struct store_run {
    run_result r;
    float logits[BATCH * CLASSES];
    bt_memory_stats mem[8];
    int stages;
} store_run;

/* Three training steps and a forward of the logits, with BATON_BF16_STASH=mode. */
static void run_mode(const bt_graph *g, const bt_engine_params *p, const char *mode, store_run *out)
{
    setenv("BATON_BF16_STASH", mode, 1);
    run_three_steps(g, p, &out->r);
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, p, &e) == BT_OK);
    batch_data b;
    for (int step = 0; step < 2; step++) {
        make_batch(&b, 200 + (unsigned)step);
        CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    }
    CU_ASSERT_FATAL(bt_engine_forward_layer(e, b.feeds, 2, "head", out->logits, NULL) == BT_OK);
    out->stages = bt_engine_num_stages(e);
    for (int s = 0; s < out->stages && s < 8; s++) bt_engine_memory(e, s, &out->mem[s]);
    bt_engine_destroy(e);
    unsetenv("BATON_BF16_STASH");
}

static void same_as_f32_slots(const bt_graph *g, const bt_engine_params *p, const char *what)
{
    store_run on, off;
    run_mode(g, p, "1", &on);
    run_mode(g, p, "0", &off);
    int same = identical(&on.r, &off.r) && memcmp(on.logits, off.logits, sizeof on.logits) == 0;
    if (!same) printf("\n  %s: bf16 storage changed the results\n", what);
    CU_ASSERT(same);
    for (int s = 0; s < on.stages; s++) {
        CU_ASSERT(on.mem[s].bf16_kept == 1);
        CU_ASSERT(off.mem[s].bf16_kept == 0);
        CU_ASSERT(off.mem[s].activation_peak == off.mem[s].activation_peak_f32);
        /* the f32 figure the bf16 run reports is the f32 run's */
        CU_ASSERT(on.mem[s].activation_peak_f32 == off.mem[s].activation_peak);
    }
    free_result(&on.r);
    free_result(&off.r);
}

static void test_schedules_bit_identical(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    static const struct {
        int stages, m;
        bt_schedule_kind kind;
        const char *what;
    } cases[] = {
        {1, 4, BT_SCHEDULE_1F1B, "one stage"},    {2, 4, BT_SCHEDULE_1F1B, "1f1b 2 stages"},
        {3, 8, BT_SCHEDULE_1F1B, "1f1b 3 stages"}, {3, 4, BT_SCHEDULE_GPIPE, "gpipe 3 stages"},
        {2, 4, BT_SCHEDULE_ZB_H1, "zb-h1 2 stages"}, {4, 8, BT_SCHEDULE_ZB_H1, "zb-h1 4 stages"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        engine_params(&p, cases[c].stages, cases[c].m, cases[c].kind);
        p.precision = BT_BF16;
        p.threads = 1;
        same_as_f32_slots(g, &p, cases[c].what);
    }
    /* interleaved: 4 logical stages on cpu:0, cpu:1 */
    engine_params(&p, 4, 8, BT_SCHEDULE_INTERLEAVED_1F1B);
    p.parallel.devices = "cpu:0,cpu:1";
    p.parallel.virtual_stages = 2;
    p.precision = BT_BF16;
    p.threads = 1;
    same_as_f32_slots(g, &p, "interleaved");
    /* zbv: 4 logical stages in a V on cpu:0, cpu:1, split backward */
    engine_params(&p, 4, 8, BT_SCHEDULE_ZBV);
    p.parallel.devices = "cpu:0,cpu:1";
    p.parallel.virtual_stages = 2;
    p.precision = BT_BF16;
    p.threads = 1;
    same_as_f32_slots(g, &p, "zbv");
    /* messages through host memory: received values are written into the slots */
    engine_params(&p, 3, 4, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    p.transfer = BT_TRANSFER_HOST;
    same_as_f32_slots(g, &p, "host path");
    bt_graph_destroy(g);
}

static void test_recompute_bit_identical(void)
{
    bt_graph *g = residual_graph();
    for (int l = 0; l < bt_graph_num_layers(g); l++) CU_ASSERT_FATAL(bt_graph_set_recompute(g, l, l % 2 == 0) == BT_OK);
    bt_engine_params p;
    engine_params(&p, 2, 4, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    same_as_f32_slots(g, &p, "recompute 1f1b");
    engine_params(&p, 3, 4, BT_SCHEDULE_ZB_H1);
    p.precision = BT_BF16;
    same_as_f32_slots(g, &p, "recompute zb-h1");
    bt_graph_destroy(g);
}

/* x (8) -> fc1 (64, relu) -> fc2 (64, relu) | head (4) -> loss, GPipe, 8 micro-batches of 2. */
static void test_memory_halves(void)
{
    const chain_layer layers[] = {{"fc1", "linear", "relu", 64}, {"fc2", "linear", "relu", 64}};
    bt_graph *g = chain_graph(layers, 2);
    bt_engine_params p;
    engine_params(&p, 2, 8, BT_SCHEDULE_GPIPE);
    p.parallel.balance[0] = 2, p.parallel.balance[1] = 2;
    p.precision = BT_BF16;
    store_run f32, dflt;
    run_mode(g, &p, "0", &f32);
    run_mode(g, &p, "auto", &dflt);
    CU_ASSERT(identical(&f32.r, &dflt.r));
    /* stage 0 keeps x (2 x 8), fc1 and fc2 (2 x 64 each) per micro-batch. f32 slot: 64 + 512 + 512
     * = 1088 bytes, 8 slots (GPipe holds every micro-batch): 8704. bf16 slot: 64 (32 rounded up to
     * 64) + 256 + 256 = 576; working copies: x and fc1 at node 0 (64 + 512), fc2 beside fc1 at
     * node 1 (from 576): 1088; in all 8 x 576 + 1088 = 5696, 65% of f32 (it tends to half as
     * micro-batches in flight grow against one working set). */
    CU_ASSERT(f32.mem[0].bf16_kept == 0);
    CU_ASSERT(f32.mem[0].activation_peak == 8704);
    CU_ASSERT(dflt.mem[0].bf16_kept == 1);
    CU_ASSERT(dflt.mem[0].activation_peak == 5696);
    CU_ASSERT(dflt.mem[0].activation_peak_f32 == 8704);
    /* the plan: what is reserved (activations also count the channel buffers, unchanged) */
    CU_ASSERT(f32.mem[0].activations - dflt.mem[0].activations == 8704 - 5696);
    CU_ASSERT(dflt.mem[0].peak_microbatches == 8);
    /* stage 1 keeps head (2 x 4: 64 bytes either way), the label and the loss: bf16 slots would
     * add working copies and save nothing, so auto keeps f32 there */
    CU_ASSERT(dflt.mem[1].bf16_kept == 0);
    CU_ASSERT(dflt.mem[1].activation_peak == f32.mem[1].activation_peak);
    /* f32 runs never keep bf16, whatever the variable says */
    p.precision = BT_F32;
    store_run plain;
    run_mode(g, &p, "1", &plain);
    CU_ASSERT(plain.mem[0].bf16_kept == 0 && plain.mem[1].bf16_kept == 0);
    CU_ASSERT(plain.mem[0].activation_peak == 8704);
    free_result(&plain.r);
    free_result(&f32.r);
    free_result(&dflt.r);
    bt_graph_destroy(g);
}

static void test_bad_variable_refused(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 2, 4, BT_SCHEDULE_1F1B);
    p.precision = BT_BF16;
    setenv("BATON_BF16_STASH", "yes", 1);
    bt_engine *e = NULL;
    CU_ASSERT(bt_engine_create(g, &p, &e) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "BATON_BF16_STASH=yes") != NULL);
    CU_ASSERT(e == NULL);
    unsetenv("BATON_BF16_STASH");
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"packing is exact and checked", test_pack_exact},
        {"schedules: bit-identical to f32 slots", test_schedules_bit_identical},
        {"recomputation: bit-identical", test_recompute_bit_identical},
        {"memory: planned and measured", test_memory_halves},
        {"a bad BATON_BF16_STASH is refused", test_bad_variable_refused},
        {NULL, NULL}};
    return bt_test_main("bf16_store", cases);
}
