/* plan/partition.c: uniform, weight-balanced and optimal contiguous partitions (see partition.h).
 *
 * The optimal planner is a min-max dynamic programme. A state is the set of devices already given
 * a stage (a bitmask when the device order is free, else just the count k, since stage k then runs
 * on device k) together with the number j of layers placed; best[state][j] is the smallest
 * bottleneck of any placement of layers [0, j) on those devices. A transition gives the next stage
 * (index k = devices used) layers [j, j2) on a new device d. Stage sums are accumulated layer by
 * layer from the stage's first layer, exactly as bt_partition_evaluate and the brute force sum
 * them, so all three compute bit-identical stage times and the optimum compares exactly.
 * Memory grows with j2 (bytes are non-negative), so the scan over j2 stops at the first stage that
 * no longer fits. Cost: O(states * D * L^2) with states = 2^D (permuting) or p + 1.
 *
 * When nothing fits, the same programme minimises the largest bytes/capacity ratio instead, and
 * the message names the stage and device of that closest placement.
 *
 * Data flow: callers hand in plain arrays (layers are indices); the in-flight count per stage
 * comes from the schedule module (bt_schedule_max_inflight). Never prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "plan/partition.h"
#include "sched/sched.h"

#define BRUTE_FORCE_MAX_LAYERS 16
#define BRUTE_FORCE_MAX_DEVICES 8

typedef enum search_objective {
    MINIMISE_TIME,        /* bottleneck stage time, memory a hard limit */
    MINIMISE_MEMORY_RATIO /* largest bytes / capacity, no limit (diagnosing a misfit) */
} search_objective;

void bt_partition_problem_init(bt_partition_problem *pr)
{
    if (!pr) return;
    memset(pr, 0, sizeof *pr);
    pr->stages = 1;
    pr->microbatches = 1;
    pr->schedule = BT_SCHEDULE_1F1B;
}

static uint64_t add_saturating(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t mul_saturating(uint64_t a, uint64_t b)
{
    return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t stage_bytes(uint64_t static_sum, uint64_t act_sum, int inflight)
{
    return add_saturating(static_sum, mul_saturating(act_sum, (uint64_t)inflight));
}

static uint64_t device_capacity(const bt_partition_problem *pr, int d)
{
    return pr->capacity ? pr->capacity[d] : BT_PARTITION_UNLIMITED;
}

/* "1.50 GiB", "12.0 MiB", "512 B". */
static const char *format_bytes(uint64_t bytes, char *buf, size_t size)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    int u = 0;
    if (bytes == BT_PARTITION_UNLIMITED) {
        snprintf(buf, size, "unlimited");
        return buf;
    }
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, size, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, size, "%.2f %s", v, unit[u]);
    return buf;
}

static bt_status check_problem(const bt_partition_problem *pr, const bt_partition_plan *out)
{
    if (!pr || !out) return bt_error(BT_ERR_INVALID_ARG, "partition: problem or plan is NULL");
    int L = pr->layers, D = pr->devices, p = pr->stages;
    if (L < 1) return bt_error(BT_ERR_INVALID_ARG, "partition: %d layers (need at least 1)", L);
    if (D < 1) return bt_error(BT_ERR_INVALID_ARG, "partition: %d devices (need at least 1)", D);
    if (p < 1 || p > BT_MAX_STAGES)
        return bt_error(BT_ERR_INVALID_ARG, "partition: %d stages (need 1 to %d)", p,
                        BT_MAX_STAGES);
    if (p > L)
        return bt_error(BT_ERR_INVALID_ARG,
                        "partition: cannot cut %d layers into %d non-empty stages", L, p);
    if (p > D)
        return bt_error(BT_ERR_INVALID_ARG, "partition: %d stages need %d devices, %d given", p, p,
                        D);
    if (pr->permute && D > BT_PARTITION_MAX_PERMUTED_DEVICES)
        return bt_error(
            BT_ERR_INVALID_ARG,
            "partition: reordering %d devices is not supported (at most %d); place them "
            "in order instead",
            D, BT_PARTITION_MAX_PERMUTED_DEVICES);
    if (pr->no_cut) {
        int units = 1;
        for (int l = 0; l + 1 < L; l++) units += !pr->no_cut[l];
        if (p > units)
            return bt_error(BT_ERR_INVALID_ARG, "partition: cannot cut %d units (layers, and block copies as "
                            "one) into %d non-empty stages", units, p);
    }
    if (pr->microbatches < 1)
        return bt_error(BT_ERR_INVALID_ARG, "partition: %d micro-batches (need at least 1)",
                        pr->microbatches);
    if (!pr->cost) return bt_error(BT_ERR_INVALID_ARG, "partition: the cost table is missing");
    for (int d = 0; d < D; d++)
        for (int l = 0; l < L; l++) {
            double c = pr->cost[(size_t)d * L + l];
            if (!isfinite(c) || c < 0)
                return bt_error(BT_ERR_INVALID_ARG,
                                "partition: cost of layer %d on device %d is %g (need a finite "
                                "time >= 0)",
                                l, d, c);
        }
    if (pr->xfer)
        for (int l = 0; l + 1 < L; l++)
            if (!isfinite(pr->xfer[l]) || pr->xfer[l] < 0)
                return bt_error(BT_ERR_INVALID_ARG,
                                "partition: transfer time after layer %d is %g (need a finite time "
                                ">= 0)",
                                l, pr->xfer[l]);
    return BT_OK;
}

/* inflight[k] for k < p: the most micro-batches stage k of the schedule holds at once. */
static bt_status stage_inflight(const bt_partition_problem *pr, int *inflight)
{
    bt_schedule *sched = NULL;
    BT_TRY(bt_schedule_build_virtual(pr->schedule, pr->stages, pr->microbatches, pr->chunks > 1 ? pr->chunks : 1,
                                     &sched));
    for (int k = 0; k < pr->stages; k++) inflight[k] = bt_schedule_max_inflight(sched, k);
    bt_schedule_destroy(sched);
    return BT_OK;
}

/* Stage time, bytes and bottleneck of the placement in out, without checking it. */
static void evaluate_unchecked(const bt_partition_problem *pr, const int *inflight,
                               bt_partition_plan *out)
{
    int L = pr->layers, p = out->stages;
    out->bottleneck = 0;
    for (int k = 0; k < p; k++) {
        int d = out->device[k], a = out->first_layer[k], b = out->first_layer[k + 1];
        double t = 0;
        uint64_t static_sum = 0, act_sum = 0;
        for (int l = a; l < b; l++) {
            t += pr->cost[(size_t)d * L + l];
            if (pr->static_bytes) static_sum = add_saturating(static_sum, pr->static_bytes[l]);
            if (pr->act_bytes) act_sum = add_saturating(act_sum, pr->act_bytes[l]);
        }
        if (k < p - 1 && pr->xfer) t += pr->xfer[b - 1];
        out->inflight[k] = inflight[k];
        out->stage_time[k] = t;
        out->stage_bytes[k] = stage_bytes(static_sum, act_sum, inflight[k]);
        if (t > out->bottleneck) out->bottleneck = t;
    }
}

static int fits(const bt_partition_problem *pr, const bt_partition_plan *plan)
{
    for (int k = 0; k < plan->stages; k++)
        if (plan->stage_bytes[k] > device_capacity(pr, plan->device[k])) return 0;
    return 1;
}

bt_status bt_partition_evaluate(const bt_partition_problem *pr, bt_partition_plan *out)
{
    int inflight[BT_MAX_STAGES];
    BT_TRY(check_problem(pr, out));
    if (out->stages != pr->stages)
        return bt_error(BT_ERR_INVALID_ARG, "partition: the plan has %d stages, the problem %d",
                        out->stages, pr->stages);
    if (out->first_layer[0] != 0 || out->first_layer[out->stages] != pr->layers)
        return bt_error(BT_ERR_INVALID_ARG, "partition: stages must cover layers 0..%d",
                        pr->layers - 1);
    for (int k = 0; k < out->stages; k++) {
        if (out->first_layer[k] >= out->first_layer[k + 1])
            return bt_error(BT_ERR_INVALID_ARG, "partition: stage %d is empty or out of order", k);
        if (k > 0 && pr->no_cut && pr->no_cut[out->first_layer[k] - 1])
            return bt_error(BT_ERR_INVALID_ARG, "partition: stage %d starts at layer %d, inside a repeated "
                            "block (cuts fall between block copies)", k, out->first_layer[k]);
        int d = out->device[k];
        if (d < 0 || d >= pr->devices)
            return bt_error(BT_ERR_INVALID_ARG, "partition: stage %d names device %d of %d", k, d,
                            pr->devices);
        for (int earlier = 0; earlier < k; earlier++)
            if (out->device[earlier] == d)
                return bt_error(BT_ERR_INVALID_ARG, "partition: device %d runs stages %d and %d", d,
                                earlier, k);
    }
    BT_TRY(stage_inflight(pr, inflight));
    evaluate_unchecked(pr, inflight, out);
    return BT_OK;
}

static int count_bits(size_t v)
{
    int n = 0;
    for (; v; v &= v - 1) n++;
    return n;
}

/* The dynamic programme of the file comment; *found says whether any placement was feasible. */
static bt_status search(const bt_partition_problem *pr, const int *inflight,
                        search_objective objective, bt_partition_plan *out, int *found)
{
    int L = pr->layers, D = pr->devices, p = pr->stages, permute = pr->permute;
    size_t states = permute ? (size_t)1 << D : (size_t)p + 1;
    size_t cells = states * (size_t)(L + 1);
    bt_status st = BT_OK;
    double *best = malloc(cells * sizeof *best);
    int *from_layer = malloc(cells * sizeof *from_layer);
    unsigned char *from_device = malloc(cells);
    *found = 0;
    if (!best || !from_layer || !from_device) {
        st = bt_error(BT_ERR_NOMEM, "partition: out of memory for a search over %zu states", cells);
        goto out;
    }
    for (size_t c = 0; c < cells; c++) best[c] = INFINITY;
    best[0] = 0.0; /* no devices used, no layers placed */

    for (size_t state = 0; state < states; state++) {
        int k = permute ? count_bits(state) : (int)state;
        if (k >= p) continue;
        int last_stage = k == p - 1;
        for (int j = k; j <= L - (p - k); j++) {
            double base = best[state * (L + 1) + j];
            if (isinf(base)) continue;
            int d_lo = permute ? 0 : k, d_hi = permute ? D - 1 : k;
            for (int d = d_lo; d <= d_hi; d++) {
                if (permute && (state >> d & 1)) continue;
                size_t next = permute ? state | (size_t)1 << d : state + 1;
                uint64_t cap = device_capacity(pr, d);
                double t = 0;
                uint64_t static_sum = 0, act_sum = 0;
                int j2_max = last_stage ? L : L - (p - k - 1);
                for (int j2 = j + 1; j2 <= j2_max; j2++) {
                    int l = j2 - 1;
                    t += pr->cost[(size_t)d * L + l];
                    if (pr->static_bytes)
                        static_sum = add_saturating(static_sum, pr->static_bytes[l]);
                    if (pr->act_bytes) act_sum = add_saturating(act_sum, pr->act_bytes[l]);
                    uint64_t bytes = stage_bytes(static_sum, act_sum, inflight[k]);
                    if (objective == MINIMISE_TIME && bytes > cap) break;
                    if (last_stage && j2 < L) continue;
                    if (!last_stage && pr->no_cut && pr->no_cut[l]) continue; /* inside a block */
                    double score;
                    if (objective == MINIMISE_TIME)
                        score = t + (!last_stage && pr->xfer ? pr->xfer[l] : 0.0);
                    else
                        score = (double)bytes / (double)(cap > 0 ? cap : 1);
                    double reach = score > base ? score : base;
                    size_t cell = next * (L + 1) + j2;
                    if (reach < best[cell]) {
                        best[cell] = reach;
                        from_layer[cell] = j;
                        from_device[cell] = (unsigned char)d;
                    }
                }
            }
        }
    }

    size_t final_state = 0;
    double final_score = INFINITY;
    for (size_t state = 0; state < states; state++) {
        int k = permute ? count_bits(state) : (int)state;
        if (k != p) continue;
        if (best[state * (L + 1) + L] < final_score) {
            final_score = best[state * (L + 1) + L];
            final_state = state;
        }
    }
    if (isinf(final_score)) goto out;

    out->stages = p;
    out->first_layer[p] = L;
    size_t state = final_state;
    int j = L;
    for (int k = p - 1; k >= 0; k--) {
        size_t cell = state * (L + 1) + j;
        int d = from_device[cell];
        out->device[k] = d;
        out->first_layer[k] = from_layer[cell];
        j = from_layer[cell];
        state = permute ? state & ~((size_t)1 << d) : state - 1;
    }
    evaluate_unchecked(pr, inflight, out);
    *found = 1;

out:
    free(from_device);
    free(from_layer);
    free(best);
    return st;
}

/* The message for "nothing fits", naming the stage of the closest placement that overflows most. */
static bt_status explain_misfit(const bt_partition_problem *pr, const int *inflight)
{
    bt_partition_plan closest;
    int found = 0;
    memset(&closest, 0, sizeof closest);
    BT_TRY(search(pr, inflight, MINIMISE_MEMORY_RATIO, &closest, &found));
    if (!found) return bt_error(BT_ERR_INTERNAL, "partition: no placement at all was found");

    int worst = 0;
    double worst_ratio = -1;
    for (int k = 0; k < closest.stages; k++) {
        uint64_t cap = device_capacity(pr, closest.device[k]);
        double ratio = (double)closest.stage_bytes[k] / (double)(cap > 0 ? cap : 1);
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = k;
        }
    }
    int a = closest.first_layer[worst], b = closest.first_layer[worst + 1];
    uint64_t static_sum = 0, act_sum = 0;
    for (int l = a; l < b; l++) {
        if (pr->static_bytes) static_sum = add_saturating(static_sum, pr->static_bytes[l]);
        if (pr->act_bytes) act_sum = add_saturating(act_sum, pr->act_bytes[l]);
    }
    char need[32], has[32], weights[32], acts[32];
    return bt_error(
        BT_ERR_INVALID_ARG,
        "no placement of %d layers on %d stages fits in device memory (%s schedule, %d "
        "micro-batches): the closest still puts layers %d..%d (stage %d) on device %d, "
        "needing %s (%s of weights, gradients and optimizer state + %d in-flight "
        "micro-batches x %s of activations) where device %d has %s%s",
        pr->layers, pr->stages, bt_schedule_name(pr->schedule), pr->microbatches, a, b - 1, worst,
        closest.device[worst], format_bytes(closest.stage_bytes[worst], need, sizeof need),
        format_bytes(static_sum, weights, sizeof weights), closest.inflight[worst],
        format_bytes(act_sum, acts, sizeof acts), closest.device[worst],
        format_bytes(device_capacity(pr, closest.device[worst]), has, sizeof has),
        !pr->permute && pr->devices > 1 ? "; letting the planner reorder devices may help" : "");
}

bt_status bt_partition_optimal(const bt_partition_problem *pr, bt_partition_plan *out)
{
    int inflight[BT_MAX_STAGES];
    int found = 0;
    BT_TRY(check_problem(pr, out));
    BT_TRY(stage_inflight(pr, inflight));
    memset(out, 0, sizeof *out);
    BT_TRY(search(pr, inflight, MINIMISE_TIME, out, &found));
    if (!found) return explain_misfit(pr, inflight);
    return BT_OK;
}

/* ---- brute force ----------------------------------------------------------------------------- */

typedef struct brute_state {
    const bt_partition_problem *pr;
    const int *inflight;
    bt_partition_plan trial;
    bt_partition_plan best;
    int found;
} brute_state;

static void brute_try(brute_state *bs)
{
    evaluate_unchecked(bs->pr, bs->inflight, &bs->trial);
    if (!fits(bs->pr, &bs->trial)) return;
    if (!bs->found || bs->trial.bottleneck < bs->best.bottleneck) {
        bs->best = bs->trial;
        bs->found = 1;
    }
}

/* Every injective map of stages k..p-1 onto the devices not in used. */
static void brute_devices(brute_state *bs, int k, unsigned used)
{
    if (k == bs->pr->stages) {
        brute_try(bs);
        return;
    }
    for (int d = 0; d < bs->pr->devices; d++) {
        if (used >> d & 1) continue;
        bs->trial.device[k] = d;
        brute_devices(bs, k + 1, used | 1u << d);
    }
}

/* Every choice of first_layer[k+1..p-1] after first_layer[k] = start. */
static void brute_cuts(brute_state *bs, int k, int start)
{
    int L = bs->pr->layers, p = bs->pr->stages;
    bs->trial.first_layer[k] = start;
    if (k == p - 1) {
        bs->trial.first_layer[p] = L;
        if (bs->pr->permute) {
            brute_devices(bs, 0, 0);
        } else {
            for (int s = 0; s < p; s++) bs->trial.device[s] = s;
            brute_try(bs);
        }
        return;
    }
    for (int end = start + 1; end <= L - (p - k - 1); end++)
        if (!bs->pr->no_cut || !bs->pr->no_cut[end - 1]) brute_cuts(bs, k + 1, end);
}

bt_status bt_partition_brute_force(const bt_partition_problem *pr, bt_partition_plan *out)
{
    int inflight[BT_MAX_STAGES];
    brute_state bs;
    BT_TRY(check_problem(pr, out));
    if (pr->layers > BRUTE_FORCE_MAX_LAYERS || pr->devices > BRUTE_FORCE_MAX_DEVICES)
        return bt_error(BT_ERR_INVALID_ARG,
                        "partition brute force: at most %d layers and %d devices (got %d and %d)",
                        BRUTE_FORCE_MAX_LAYERS, BRUTE_FORCE_MAX_DEVICES, pr->layers, pr->devices);
    BT_TRY(stage_inflight(pr, inflight));
    memset(&bs, 0, sizeof bs);
    bs.pr = pr;
    bs.inflight = inflight;
    bs.trial.stages = pr->stages;
    brute_cuts(&bs, 0, 0);
    if (!bs.found)
        return bt_error(BT_ERR_INVALID_ARG, "no placement of %d layers on %d stages fits in device "
                        "memory (brute force)", pr->layers, pr->stages);
    *out = bs.best;
    return BT_OK;
}

/* ---- simple partitions ----------------------------------------------------------------------- */

static bt_status check_counts(int layers, int stages, const int *first_layer)
{
    if (!first_layer) return bt_error(BT_ERR_INVALID_ARG, "partition: first_layer is NULL");
    if (stages < 1)
        return bt_error(BT_ERR_INVALID_ARG, "partition: %d stages (need at least 1)", stages);
    if (stages > layers)
        return bt_error(BT_ERR_INVALID_ARG,
                        "partition: cannot cut %d layers into %d non-empty stages", layers, stages);
    return BT_OK;
}

bt_status bt_partition_uniform(int layers, int stages, int *first_layer)
{
    BT_TRY(check_counts(layers, stages, first_layer));
    int base = layers / stages, extra = layers % stages;
    first_layer[0] = 0;
    for (int k = 0; k < stages; k++)
        first_layer[k + 1] = first_layer[k] + base + (k >= stages - extra ? 1 : 0);
    return BT_OK;
}

/* Min-max over contiguous cuts of [0, layers) into stages. The score of a stage is its weight sum
 * (by_count 0) or its layer count (by_count 1); a stage whose weight sum exceeds weight_limit is
 * not allowed. On success fills first_layer and *optimum; *found 0 when no cut is allowed. */
static bt_status balance(int layers, int stages, const double *weight, double weight_limit,
                         int by_count, int *first_layer, double *optimum, int *found)
{
    size_t cells = (size_t)(stages + 1) * (size_t)(layers + 1);
    double *best = malloc(cells * sizeof *best);
    int *from = malloc(cells * sizeof *from);
    bt_status st = BT_OK;
    *found = 0;
    if (!best || !from) {
        st = bt_error(BT_ERR_NOMEM, "partition: out of memory balancing %d layers", layers);
        goto out;
    }
    for (size_t c = 0; c < cells; c++) best[c] = INFINITY;
    best[0] = 0.0;
    for (int k = 0; k < stages; k++)
        for (int j = k; j <= layers - (stages - k); j++) {
            double base = best[(size_t)k * (layers + 1) + j];
            if (isinf(base)) continue;
            int j2_max = k == stages - 1 ? layers : layers - (stages - k - 1);
            double sum = 0;
            for (int j2 = j + 1; j2 <= j2_max; j2++) {
                sum += weight[j2 - 1];
                if (sum > weight_limit) break;
                if (k == stages - 1 && j2 < layers) continue;
                double score = by_count ? (double)(j2 - j) : sum;
                double reach = score > base ? score : base;
                size_t cell = (size_t)(k + 1) * (layers + 1) + j2;
                if (reach < best[cell]) {
                    best[cell] = reach;
                    from[cell] = j;
                }
            }
        }
    double final_score = best[(size_t)stages * (layers + 1) + layers];
    if (isinf(final_score)) goto out;
    first_layer[stages] = layers;
    for (int k = stages; k > 0; k--)
        first_layer[k - 1] = from[(size_t)k * (layers + 1) + first_layer[k]];
    *optimum = final_score;
    *found = 1;
out:
    free(from);
    free(best);
    return st;
}

bt_status bt_partition_by_weight(int layers, const double *weight, int stages, int *first_layer)
{
    double heaviest = 0, longest = 0;
    int found = 0;
    BT_TRY(check_counts(layers, stages, first_layer));
    if (!weight) return bt_error(BT_ERR_INVALID_ARG, "partition: weights are NULL");
    for (int l = 0; l < layers; l++)
        if (!isfinite(weight[l]) || weight[l] < 0)
            return bt_error(BT_ERR_INVALID_ARG,
                            "partition: weight of layer %d is %g (need a finite value >= 0)", l,
                            weight[l]);
    BT_TRY(balance(layers, stages, weight, INFINITY, 0, first_layer, &heaviest, &found));
    if (!found) return bt_error(BT_ERR_INTERNAL, "partition: no balanced cut was found");
    BT_TRY(balance(layers, stages, weight, heaviest, 1, first_layer, &longest, &found));
    if (!found) return bt_error(BT_ERR_INTERNAL, "partition: the balanced cut was lost");
    return BT_OK;
}
