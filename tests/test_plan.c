/* tests/test_plan.c: contiguous partitions (src/plan/partition.c).
 *
 * References: hand-worked placements (different device speeds, transfer costs, memory limits that
 * rule cuts out), an exhaustive enumeration written here for the weight balancer, and
 * bt_partition_brute_force for the optimal planner on thousands of seeded random tables. Every plan
 * the planner returns is re-priced here from the raw table with the in-flight counts written out
 * (1F1B min(p-k, m), GPipe m, streaming 1), so a wrong plan cannot agree with itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bt_test.h"
#include "plan/partition.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng_next(void)
{
    /* xorshift64*: reproducible on every platform, unlike rand(). */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dULL;
}

static int rng_int(int lo, int hi) /* inclusive */
{
    return lo + (int)(rng_next() % (uint64_t)(hi - lo + 1));
}

static double rng_unit(void)
{
    return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static int expected_inflight(bt_schedule_kind kind, int p, int m, int k)
{
    switch (kind) {
    case BT_SCHEDULE_1F1B: return p - k < m ? p - k : m;
    case BT_SCHEDULE_GPIPE: return m;
    case BT_SCHEDULE_STREAM: return 1;
    }
    return -1;
}

/* Re-prices plan from the raw problem and checks it is a legal, fitting placement. */
static void check_plan(const bt_partition_problem *pr, const bt_partition_plan *plan)
{
    int L = pr->layers, p = pr->stages;
    CU_ASSERT_EQUAL_FATAL(plan->stages, p);
    CU_ASSERT_EQUAL(plan->first_layer[0], 0);
    CU_ASSERT_EQUAL(plan->first_layer[p], L);
    double bottleneck = 0;
    for (int k = 0; k < p; k++) {
        int a = plan->first_layer[k], b = plan->first_layer[k + 1], d = plan->device[k];
        CU_ASSERT_FATAL(a < b);
        CU_ASSERT_FATAL(d >= 0 && d < pr->devices);
        if (!pr->permute) CU_ASSERT_EQUAL(d, k);
        for (int j = 0; j < k; j++) CU_ASSERT_NOT_EQUAL(plan->device[j], d);
        double t = 0;
        uint64_t weights = 0, acts = 0;
        for (int l = a; l < b; l++) {
            t += pr->cost[d * L + l];
            weights += pr->static_bytes ? pr->static_bytes[l] : 0;
            acts += pr->act_bytes ? pr->act_bytes[l] : 0;
        }
        if (k < p - 1 && pr->xfer) t += pr->xfer[b - 1];
        int inflight = expected_inflight(pr->schedule, p, pr->microbatches, k);
        uint64_t bytes = weights + (uint64_t)inflight * acts;
        CU_ASSERT_EQUAL(plan->inflight[k], inflight);
        CU_ASSERT_EQUAL(plan->stage_bytes[k], bytes);
        CU_ASSERT(fabs(plan->stage_time[k] - t) <= 1e-9);
        if (pr->capacity) CU_ASSERT(bytes <= pr->capacity[d]);
        if (t > bottleneck) bottleneck = t;
    }
    CU_ASSERT(fabs(plan->bottleneck - bottleneck) <= 1e-9);
}

static void assert_cuts(const int *got, const int *want, int n)
{
    for (int i = 0; i < n; i++) {
        if (got[i] != want[i]) printf("\n  cut %d: got %d, want %d\n", i, got[i], want[i]);
        CU_ASSERT_EQUAL(got[i], want[i]);
    }
}

/* ---- uniform and by weight ------------------------------------------------------------------- */

static void test_uniform(void)
{
    int cuts[8];
    CU_ASSERT_EQUAL_FATAL(bt_partition_uniform(10, 4, cuts), BT_OK);
    assert_cuts(cuts, (const int[]){0, 2, 4, 7, 10}, 5); /* 2, 2, 3, 3: extras go last */
    CU_ASSERT_EQUAL_FATAL(bt_partition_uniform(4, 4, cuts), BT_OK);
    assert_cuts(cuts, (const int[]){0, 1, 2, 3, 4}, 5);
    CU_ASSERT_EQUAL_FATAL(bt_partition_uniform(5, 1, cuts), BT_OK);
    assert_cuts(cuts, (const int[]){0, 5}, 2);
    CU_ASSERT_EQUAL_FATAL(bt_partition_uniform(9, 3, cuts), BT_OK);
    assert_cuts(cuts, (const int[]){0, 3, 6, 9}, 4);
    CU_ASSERT_EQUAL(bt_partition_uniform(3, 4, cuts), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(),
                           "partition: cannot cut 3 layers into 4 non-empty stages");
    CU_ASSERT_EQUAL(bt_partition_uniform(3, 0, cuts), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_partition_uniform(3, 1, NULL), BT_ERR_INVALID_ARG);
}

static void test_by_weight_by_hand(void)
{
    int cuts[8];
    /* 1 2 3 | 4 5: heaviest 9; 1 2 3 4 | 5 would be 10, 1 2 | 3 4 5 would be 12. */
    CU_ASSERT_EQUAL_FATAL(bt_partition_by_weight(5, (const double[]){1, 2, 3, 4, 5}, 2, cuts),
                          BT_OK);
    assert_cuts(cuts, (const int[]){0, 3, 5}, 3);
    /* The two heavy ends each get a stage of their own. */
    CU_ASSERT_EQUAL_FATAL(bt_partition_by_weight(5, (const double[]){4, 1, 1, 1, 4}, 3, cuts),
                          BT_OK);
    assert_cuts(cuts, (const int[]){0, 1, 4, 5}, 4);
    /* Weightless layers (activations, the loss) spread out: heaviest stage 10 is forced, and of
     * the cuts achieving it, 2 + 2 + 2 layers has the fewest layers in its longest stage. */
    CU_ASSERT_EQUAL_FATAL(bt_partition_by_weight(6, (const double[]){0, 0, 10, 0, 0, 0}, 3, cuts),
                          BT_OK);
    assert_cuts(cuts, (const int[]){0, 2, 4, 6}, 4);
    /* All zero: the same as uniform counts. */
    CU_ASSERT_EQUAL_FATAL(bt_partition_by_weight(7, (const double[]){0, 0, 0, 0, 0, 0, 0}, 3, cuts),
                          BT_OK);
    int longest = 0;
    for (int k = 0; k < 3; k++)
        if (cuts[k + 1] - cuts[k] > longest) longest = cuts[k + 1] - cuts[k];
    CU_ASSERT_EQUAL(longest, 3);
    CU_ASSERT_EQUAL(bt_partition_by_weight(2, (const double[]){1, 1}, 3, cuts), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_partition_by_weight(2, (const double[]){1, -1}, 1, cuts),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_partition_by_weight(2, (const double[]){1, NAN}, 1, cuts),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_partition_by_weight(2, NULL, 1, cuts), BT_ERR_INVALID_ARG);
}

/* Exhaustive (heaviest stage, longest stage) optimum, lexicographic, over every cut. */
static void enumerate_weight(const double *w, int L, int p, int k, int start, double heaviest,
                             int longest, double *best_heavy, int *best_long)
{
    if (k == p - 1) {
        double sum = 0;
        for (int l = start; l < L; l++) sum += w[l];
        double h = sum > heaviest ? sum : heaviest;
        int n = L - start > longest ? L - start : longest;
        if (h < *best_heavy || (h == *best_heavy && n < *best_long)) {
            *best_heavy = h;
            *best_long = n;
        }
        return;
    }
    for (int end = start + 1; end <= L - (p - k - 1); end++) {
        double sum = 0;
        for (int l = start; l < end; l++) sum += w[l];
        enumerate_weight(w, L, p, k + 1, end, sum > heaviest ? sum : heaviest,
                         end - start > longest ? end - start : longest, best_heavy, best_long);
    }
}

static void test_by_weight_matches_enumeration(void)
{
    rng_state = 12345;
    for (int trial = 0; trial < 3000; trial++) {
        int L = rng_int(1, 11), p = rng_int(1, L);
        double w[11];
        for (int l = 0; l < L; l++)
            w[l] = rng_int(0, 3) == 0 ? 0.0 : (double)rng_int(1, 20); /* integers: exact sums */
        int cuts[12];
        CU_ASSERT_EQUAL_FATAL(bt_partition_by_weight(L, w, p, cuts), BT_OK);
        double heavy = INFINITY;
        int longest = L + 1;
        enumerate_weight(w, L, p, 0, 0, 0.0, 0, &heavy, &longest);
        double got_heavy = 0;
        int got_long = 0;
        CU_ASSERT_EQUAL(cuts[0], 0);
        CU_ASSERT_EQUAL(cuts[p], L);
        for (int k = 0; k < p; k++) {
            CU_ASSERT_FATAL(cuts[k] < cuts[k + 1]);
            double sum = 0;
            for (int l = cuts[k]; l < cuts[k + 1]; l++) sum += w[l];
            if (sum > got_heavy) got_heavy = sum;
            if (cuts[k + 1] - cuts[k] > got_long) got_long = cuts[k + 1] - cuts[k];
        }
        CU_ASSERT_EQUAL(got_heavy, heavy);
        CU_ASSERT_EQUAL(got_long, longest);
    }
}

/* ---- the optimal planner --------------------------------------------------------------------- */

static void test_optimal_device_speeds_by_hand(void)
{
    /* 4 layers; device 0 runs each in 1 ms, device 1 (slower) in 2 ms. Handing over after layer 1
     * costs 5 ms, after layers 0 and 2 0.5 ms.
     * In order (stage 0 on device 0): cut 1|3: max(1 + 0.5, 6) = 6; 2|2: max(2 + 5, 4) = 7;
     *   3|1: max(3 + 0.5, 2) = 3.5  -> 3.5 with cuts {0, 3, 4}.
     * Reordered (device 1 first): 1|3: max(2 + 0.5, 3) = 3 -> 3, devices {1, 0}, cuts {0, 1, 4};
     *   nothing beats 3: device 0 first gives at least 3.5 as above, device 1 first 2|2 gives 9,
     *   3|1 gives 6.5. */
    const double cost[] = {1, 1, 1, 1, 2, 2, 2, 2};
    const double xfer[] = {0.5, 5, 0.5, 0};
    bt_partition_problem pr;
    bt_partition_plan plan;
    bt_partition_problem_init(&pr);
    pr.layers = 4;
    pr.devices = 2;
    pr.stages = 2;
    pr.cost = cost;
    pr.xfer = xfer;
    pr.microbatches = 4;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 3.5, 1e-12);
    assert_cuts(plan.first_layer, (const int[]){0, 3, 4}, 3);
    CU_ASSERT_EQUAL(plan.device[0], 0);
    CU_ASSERT_EQUAL(plan.device[1], 1);
    CU_ASSERT_DOUBLE_EQUAL(plan.stage_time[0], 3.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(plan.stage_time[1], 2.0, 1e-12);
    check_plan(&pr, &plan);

    pr.permute = 1;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 3.0, 1e-12);
    assert_cuts(plan.first_layer, (const int[]){0, 1, 4}, 3);
    CU_ASSERT_EQUAL(plan.device[0], 1);
    CU_ASSERT_EQUAL(plan.device[1], 0);
    check_plan(&pr, &plan);

    /* Three devices for two stages: the planner may leave the slowest one out. */
    const double cost3[] = {1, 1, 1, 1, 2, 2, 2, 2, 9, 9, 9, 9};
    pr.devices = 3;
    pr.cost = cost3;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 3.0, 1e-12);
    CU_ASSERT(plan.device[0] != 2 && plan.device[1] != 2);
}

static void test_optimal_memory_by_hand(void)
{
    /* 4 equal layers (1 ms on either device), each 10 B of weights and 5 B of activations per
     * micro-batch; 1F1B with p = 2, m = 4 holds 2 micro-batches on stage 0 and 1 on stage 1.
     * Device 0 has 30 B. Unlimited, 2|2 would win (bottleneck 2), but stage 0 would need
     * 20 + 2 * 10 = 40 B. 1|3 fits (10 + 2 * 5 = 20 B; stage 1: 30 + 15 = 45 <= 100): 3 ms. */
    const double cost[] = {1, 1, 1, 1, 1, 1, 1, 1};
    const uint64_t weights[] = {10, 10, 10, 10}, acts[] = {5, 5, 5, 5};
    uint64_t capacity[] = {30, 100};
    bt_partition_problem pr;
    bt_partition_plan plan;
    bt_partition_problem_init(&pr);
    pr.layers = 4;
    pr.devices = 2;
    pr.stages = 2;
    pr.cost = cost;
    pr.static_bytes = weights;
    pr.act_bytes = acts;
    pr.microbatches = 4;
    pr.schedule = BT_SCHEDULE_1F1B;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK); /* no capacity: unlimited */
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 2.0, 1e-12);
    pr.capacity = capacity;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 3.0, 1e-12);
    assert_cuts(plan.first_layer, (const int[]){0, 1, 4}, 3);
    CU_ASSERT_EQUAL(plan.inflight[0], 2);
    CU_ASSERT_EQUAL(plan.inflight[1], 1);
    CU_ASSERT_EQUAL(plan.stage_bytes[0], 20);
    CU_ASSERT_EQUAL(plan.stage_bytes[1], 45);
    check_plan(&pr, &plan);

    /* GPipe holds all 4 micro-batches everywhere: stage 0 needs at least 10 + 4 * 5 = 30 B, and
     * stage 1 with 3 layers 30 + 4 * 15 = 90 <= 100: still 1|3. */
    pr.schedule = BT_SCHEDULE_GPIPE;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 3.0, 1e-12);
    CU_ASSERT_EQUAL(plan.stage_bytes[0], 30);
    CU_ASSERT_EQUAL(plan.stage_bytes[1], 90);

    /* One byte less on device 0 and nothing fits; the message names device 0 and its 29 B. */
    capacity[0] = 29;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    const char *msg = bt_last_error();
    CU_ASSERT_PTR_NOT_NULL(
        strstr(msg, "no placement of 4 layers on 2 stages fits in device memory"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "layers 0..0 (stage 0) on device 0, needing 30 B"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "4 in-flight micro-batches x 5 B of activations"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "where device 0 has 29 B"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "reorder devices may help"));
    CU_ASSERT_EQUAL(bt_partition_brute_force(&pr, &plan), BT_ERR_INVALID_ARG);

    /* Reordering would not help here (device 0 cannot hold any single layer with 4 micro-batches),
     * but with streaming (1 in flight) it fits: layer 0 on device 0 needs 15 B. */
    pr.permute = 1;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(strstr(bt_last_error(), "reorder"));
    pr.schedule = BT_SCHEDULE_STREAM;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &plan), BT_OK);
    check_plan(&pr, &plan);

    /* Big numbers print in binary units: the closest placement is 2|2, 6 GiB on each device. */
    const uint64_t big_weights[] = {3ULL << 30, 3ULL << 30, 3ULL << 30, 3ULL << 30};
    uint64_t small[] = {2ULL << 30, 2ULL << 30};
    pr.static_bytes = big_weights;
    pr.act_bytes = NULL;
    pr.capacity = small;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "needing 6.00 GiB"));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "has 2.00 GiB"));
}

static void test_optimal_rejects_bad_problems(void)
{
    const double cost[] = {1, 1, 1, 1};
    bt_partition_problem pr;
    bt_partition_plan plan;
    bt_partition_problem_init(&pr);
    pr.layers = 2;
    pr.devices = 2;
    pr.stages = 3;
    pr.cost = cost;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(),
                           "partition: cannot cut 2 layers into 3 non-empty stages");
    pr.layers = 4;
    pr.devices = 1;
    pr.stages = 2;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "partition: 2 stages need 2 devices, 1 given");
    pr.layers = 2;
    pr.devices = 2;
    pr.stages = 2;
    pr.cost = NULL;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    const double bad[] = {1, -2, 1, 1};
    pr.cost = bad;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "layer 1 on device 0"));
    pr.cost = cost;
    pr.microbatches = 0;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    pr.microbatches = 1;
    double many[13 * 13];
    for (int i = 0; i < 13 * 13; i++) many[i] = 1;
    pr.layers = 13;
    pr.devices = 13;
    pr.cost = many;
    pr.permute = 1;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_ERR_INVALID_ARG);
    pr.permute = 0;
    CU_ASSERT_EQUAL(bt_partition_optimal(&pr, &plan), BT_OK);
    CU_ASSERT_EQUAL(bt_partition_optimal(NULL, &plan), BT_ERR_INVALID_ARG);
}

static void test_evaluate_hand_made_plan(void)
{
    /* Layers cost {1, 2, 3} on device 0 and {2, 4, 6} on device 1; the cut after layer 0 costs
     * 0.25. Stage 0 = layer 0 on device 1: 2 + 0.25; stage 1 = layers 1..2 on device 0: 5. */
    const double cost[] = {1, 2, 3, 2, 4, 6}, xfer[] = {0.25, 1, 0};
    bt_partition_problem pr;
    bt_partition_plan plan;
    bt_partition_problem_init(&pr);
    pr.layers = 3;
    pr.devices = 2;
    pr.stages = 2;
    pr.cost = cost;
    pr.xfer = xfer;
    pr.permute = 1;
    memset(&plan, 0, sizeof plan);
    plan.stages = 2;
    plan.first_layer[0] = 0;
    plan.first_layer[1] = 1;
    plan.first_layer[2] = 3;
    plan.device[0] = 1;
    plan.device[1] = 0;
    CU_ASSERT_EQUAL_FATAL(bt_partition_evaluate(&pr, &plan), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(plan.stage_time[0], 2.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(plan.stage_time[1], 5.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(plan.bottleneck, 5.0, 1e-12);
    plan.device[1] = 1;
    CU_ASSERT_EQUAL(bt_partition_evaluate(&pr, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "partition: device 1 runs stages 0 and 1");
    plan.device[1] = 0;
    plan.first_layer[1] = 3;
    CU_ASSERT_EQUAL(bt_partition_evaluate(&pr, &plan), BT_ERR_INVALID_ARG);
}

/* A random problem of at most 9 layers and 5 devices; about a third have no fitting placement. */
static void random_problem(bt_partition_problem *pr, double *cost, double *xfer, uint64_t *weights,
                           uint64_t *acts, uint64_t *capacity)
{
    static const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B,
                                             BT_SCHEDULE_STREAM};
    bt_partition_problem_init(pr);
    int L = rng_int(1, 9), D = rng_int(1, 5);
    int p = rng_int(1, L < D ? L : D);
    pr->layers = L;
    pr->devices = D;
    pr->stages = p;
    pr->microbatches = rng_int(1, 6);
    pr->schedule = kinds[rng_int(0, 2)];
    pr->permute = rng_int(0, 1);
    for (int d = 0; d < D; d++) {
        double slowdown = 0.5 + 2.5 * rng_unit(); /* devices of different speeds */
        for (int l = 0; l < L; l++) cost[d * L + l] = slowdown * (0.1 + 4.0 * rng_unit());
    }
    /* Sometimes one device is uniformly faster for equal layers, sometimes tables are integers so
     * many placements tie exactly. */
    if (rng_int(0, 3) == 0)
        for (int i = 0; i < D * L; i++) cost[i] = (double)(int)(cost[i] + 0.5);
    for (int l = 0; l < L; l++) xfer[l] = rng_unit() * 2.0;
    pr->cost = cost;
    pr->xfer = rng_int(0, 2) ? xfer : NULL;
    uint64_t total = 0;
    for (int l = 0; l < L; l++) {
        weights[l] = (uint64_t)rng_int(0, 100);
        acts[l] = (uint64_t)rng_int(0, 40);
        total += weights[l] + acts[l] * (uint64_t)pr->microbatches;
    }
    pr->static_bytes = rng_int(0, 4) ? weights : NULL;
    pr->act_bytes = rng_int(0, 4) ? acts : NULL;
    if (rng_int(0, 5) > 0) {
        for (int d = 0; d < D; d++)
            capacity[d] = (uint64_t)((double)total / p * (0.4 + 1.6 * rng_unit()));
        pr->capacity = capacity;
    }
}

static void test_optimal_matches_brute_force(void)
{
    int feasible = 0, infeasible = 0, permuted = 0, memory_bound = 0;
    rng_state = 20261122;
    for (int trial = 0; trial < 4000; trial++) {
        double cost[5 * 9], xfer[9];
        uint64_t weights[9], acts[9], capacity[5];
        bt_partition_problem pr;
        bt_partition_plan fast, slow;
        random_problem(&pr, cost, xfer, weights, acts, capacity);
        bt_status st_fast = bt_partition_optimal(&pr, &fast);
        bt_status st_slow = bt_partition_brute_force(&pr, &slow);
        CU_ASSERT_EQUAL(st_fast, st_slow);
        if (st_fast != st_slow) {
            printf("\n  trial %d: optimal %d, brute force %d (%s)\n", trial, st_fast, st_slow,
                   bt_last_error());
            continue;
        }
        if (st_fast != BT_OK) {
            CU_ASSERT_EQUAL(st_fast, BT_ERR_INVALID_ARG);
            infeasible++;
            continue;
        }
        feasible++;
        permuted += pr.permute && pr.devices > 1;
        if (fast.bottleneck != slow.bottleneck)
            printf("\n  trial %d: optimal %.17g, brute force %.17g\n", trial, fast.bottleneck,
                   slow.bottleneck);
        CU_ASSERT_EQUAL(fast.bottleneck, slow.bottleneck);
        check_plan(&pr, &fast);
        check_plan(&pr, &slow);
        /* Did memory change the answer? Count the cases where dropping the limits helps. */
        if (pr.capacity) {
            bt_partition_problem unlimited = pr;
            bt_partition_plan free_plan;
            unlimited.capacity = NULL;
            CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&unlimited, &free_plan), BT_OK);
            CU_ASSERT(free_plan.bottleneck <= fast.bottleneck);
            memory_bound += free_plan.bottleneck < fast.bottleneck;
        }
        /* Blocks that may not be cut inside (no rng drawn: the trials above stay as they were):
         * both searches agree, respect them, and never beat the unconstrained optimum. */
        {
            unsigned char no_cut[9];
            for (int l = 0; l < pr.layers; l++) no_cut[l] = (unsigned char)((l * 7 + trial) % 3 == 0);
            bt_partition_problem blocks = pr;
            bt_partition_plan bf, bs;
            blocks.no_cut = no_cut;
            bt_status a = bt_partition_optimal(&blocks, &bf), b = bt_partition_brute_force(&blocks, &bs);
            CU_ASSERT_EQUAL(a, b);
            if (a == BT_OK && b == BT_OK) {
                CU_ASSERT_EQUAL(bf.bottleneck, bs.bottleneck);
                CU_ASSERT(bf.bottleneck >= fast.bottleneck);
                for (int k = 1; k < bf.stages; k++) CU_ASSERT(!no_cut[bf.first_layer[k] - 1]);
                CU_ASSERT_EQUAL(bt_partition_evaluate(&blocks, &bf), BT_OK);
            }
        }
        /* Freedom to reorder never hurts. */
        if (!pr.permute) {
            bt_partition_problem free_order = pr;
            bt_partition_plan reordered;
            free_order.permute = 1;
            CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&free_order, &reordered), BT_OK);
            CU_ASSERT(reordered.bottleneck <= fast.bottleneck);
        }
    }
    printf("\n  %d feasible (%d with device reordering, %d where memory changed the optimum), "
           "%d with no fitting placement\n",
           feasible, permuted, memory_bound, infeasible);
    /* The random tables really exercise every path. */
    CU_ASSERT(feasible > 1000);
    CU_ASSERT(infeasible > 300);
    CU_ASSERT(permuted > 500);
    CU_ASSERT(memory_bound > 200);
}

static void test_identical_devices_reorder_changes_nothing(void)
{
    /* Larger than brute force can handle: with identical devices, every order is the same, so the
     * bitmask search must find exactly the in-order optimum. */
    enum { L = 30, D = 8 };
    double cost[D * L], xfer[L];
    uint64_t weights[L], acts[L], capacity[D];
    rng_state = 777;
    for (int l = 0; l < L; l++) {
        double c = 0.2 + rng_unit() * 3;
        for (int d = 0; d < D; d++) cost[d * L + l] = c;
        xfer[l] = rng_unit();
        weights[l] = (uint64_t)rng_int(1, 50);
        acts[l] = (uint64_t)rng_int(1, 20);
    }
    for (int d = 0; d < D; d++) capacity[d] = 400;
    bt_partition_problem pr;
    bt_partition_plan in_order, reordered;
    bt_partition_problem_init(&pr);
    pr.layers = L;
    pr.devices = D;
    pr.stages = D;
    pr.cost = cost;
    pr.xfer = xfer;
    pr.static_bytes = weights;
    pr.act_bytes = acts;
    pr.capacity = capacity;
    pr.microbatches = 8;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &in_order), BT_OK);
    pr.permute = 1;
    CU_ASSERT_EQUAL_FATAL(bt_partition_optimal(&pr, &reordered), BT_OK);
    CU_ASSERT_EQUAL(in_order.bottleneck, reordered.bottleneck);
    check_plan(&pr, &reordered);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"uniform", test_uniform},
        {"by weight, by hand", test_by_weight_by_hand},
        {"by weight matches enumeration", test_by_weight_matches_enumeration},
        {"optimal: device speeds and order, by hand", test_optimal_device_speeds_by_hand},
        {"optimal: memory limits, by hand", test_optimal_memory_by_hand},
        {"optimal: rejects bad problems", test_optimal_rejects_bad_problems},
        {"evaluate a hand-made plan", test_evaluate_hand_made_plan},
        {"optimal matches brute force on random tables", test_optimal_matches_brute_force},
        {"identical devices: reordering changes nothing",
         test_identical_devices_reorder_changes_nothing},
        {NULL, NULL},
    };
    return bt_test_main("plan", cases);
}
