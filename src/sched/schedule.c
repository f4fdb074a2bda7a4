/* sched/schedule.c: building the per-stage instruction lists of GPipe, 1F1B and forward-only
 * streaming, allocating and freeing schedules, the in-flight count that sizes activation slots,
 * and the text forms (the "1F3" notation and the grid).
 *
 * Invariants of every built schedule (bt_schedule_validate proves them for any schedule):
 * - every FWD on stage s > 0 is directly preceded by RECV_ACT(mb, s-1), every FWD on s < p-1 is
 *   directly followed by SEND_ACT(mb, s+1);
 * - every BWD on s < p-1 is directly preceded by RECV_GRAD(mb, s+1), every BWD on s > 0 is directly
 *   followed by SEND_GRAD(mb, s-1);
 * - training schedules end with exactly one STEP per stage.
 * GPipe runs its backwards in ascending micro-batch order (0, 1, ..., m-1), the order the forwards
 * ran in, so the oldest activations are released first (as torch.distributed.pipelining does).
 *
 * Data flow: plan/ and the executor call bt_schedule_build; the simulator (simulate.c) and the
 * validator (validate.c) read the lists; the grid is drawn from a unit-cost simulation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"

/* Unit costs the grid is drawn with: one time slot per FWD, BWD and STEP. */
#define GRID_FWD_COST 1.0
#define GRID_BWD_COST 1.0
#define GRID_STEP_COST 1.0

static int kind_is_valid(bt_schedule_kind kind)
{
    return kind == BT_SCHEDULE_GPIPE || kind == BT_SCHEDULE_1F1B || kind == BT_SCHEDULE_STREAM;
}

bt_status bt_schedule_alloc(bt_schedule_kind kind, int p, int m, int training, int cap,
                            bt_schedule **out)
{
    bt_schedule *sched = NULL;
    bt_status st = BT_OK;

    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_alloc: out is NULL");
    *out = NULL;
    if (!kind_is_valid(kind))
        return bt_error(BT_ERR_INVALID_ARG, "unknown schedule kind %d", (int)kind);
    if (p < 1 || m < 1)
        return bt_error(BT_ERR_INVALID_ARG,
                        "a schedule needs at least 1 stage and 1 micro-batch (got %d stages, %d "
                        "micro-batches)",
                        p, m);
    if (cap < 0) return bt_error(BT_ERR_INVALID_ARG, "negative instruction capacity %d", cap);

    sched = calloc(1, sizeof *sched);
    if (!sched) goto nomem;
    sched->kind = kind;
    sched->stages = p;
    sched->microbatches = m;
    sched->training = training ? 1 : 0;
    sched->len = calloc((size_t)p, sizeof *sched->len);
    sched->list = calloc((size_t)p, sizeof *sched->list);
    if (!sched->len || !sched->list) goto nomem;
    for (int s = 0; s < p; s++) {
        sched->list[s] = calloc(cap > 0 ? (size_t)cap : 1, sizeof **sched->list);
        if (!sched->list[s]) goto nomem;
    }
    *out = sched;
    return BT_OK;

nomem:
    st = bt_error(BT_ERR_NOMEM, "out of memory allocating a schedule of %d stages", p);
    bt_schedule_destroy(sched);
    return st;
}

void bt_schedule_destroy(bt_schedule *sched)
{
    if (!sched) return;
    if (sched->list)
        for (int s = 0; s < sched->stages; s++) free(sched->list[s]);
    free(sched->list);
    free(sched->len);
    free(sched);
}

static void push(bt_schedule *sched, int s, bt_instr_kind kind, int mb, int peer)
{
    bt_instr *ins = &sched->list[s][sched->len[s]++];
    ins->kind = kind;
    ins->mb = mb;
    ins->peer = peer;
}

/* RECV_ACT, FWD, SEND_ACT of mb on stage s, the receive and send only where a neighbour exists. */
static void push_forward(bt_schedule *sched, int s, int mb)
{
    if (s > 0) push(sched, s, BT_I_RECV_ACT, mb, s - 1);
    push(sched, s, BT_I_FWD, mb, -1);
    if (s < sched->stages - 1) push(sched, s, BT_I_SEND_ACT, mb, s + 1);
}

/* RECV_GRAD, BWD, SEND_GRAD of mb on stage s. */
static void push_backward(bt_schedule *sched, int s, int mb)
{
    if (s < sched->stages - 1) push(sched, s, BT_I_RECV_GRAD, mb, s + 1);
    push(sched, s, BT_I_BWD, mb, -1);
    if (s > 0) push(sched, s, BT_I_SEND_GRAD, mb, s - 1);
}

static void build_gpipe(bt_schedule *sched)
{
    for (int s = 0; s < sched->stages; s++) {
        for (int mb = 0; mb < sched->microbatches; mb++) push_forward(sched, s, mb);
        for (int mb = 0; mb < sched->microbatches; mb++) push_backward(sched, s, mb);
        push(sched, s, BT_I_STEP, -1, -1);
    }
}

/* Stage s runs min(p-s-1, m) warm-up forwards, then alternates one forward and one backward, then
 * drains the remaining backwards. */
static void build_1f1b(bt_schedule *sched)
{
    int p = sched->stages, m = sched->microbatches;
    for (int s = 0; s < p; s++) {
        int warmup = p - s - 1 < m ? p - s - 1 : m;
        int next_fwd = 0, next_bwd = 0;
        while (next_fwd < warmup) push_forward(sched, s, next_fwd++);
        while (next_fwd < m) {
            push_forward(sched, s, next_fwd++);
            push_backward(sched, s, next_bwd++);
        }
        while (next_bwd < m) push_backward(sched, s, next_bwd++);
        push(sched, s, BT_I_STEP, -1, -1);
    }
}

static void build_stream(bt_schedule *sched)
{
    for (int s = 0; s < sched->stages; s++)
        for (int mb = 0; mb < sched->microbatches; mb++) push_forward(sched, s, mb);
}

bt_status bt_schedule_build(bt_schedule_kind kind, int p, int m, bt_schedule **out)
{
    bt_schedule *sched = NULL;
    int training = kind != BT_SCHEDULE_STREAM;

    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_build: out is NULL");
    *out = NULL;
    if (p < 1 || m < 1 || m > (1 << 24) || p > (1 << 24))
        return bt_error(BT_ERR_INVALID_ARG,
                        "a schedule needs 1 to 16777216 stages and micro-batches (got %d stages, "
                        "%d micro-batches)",
                        p, m);
    /* Per stage: m forwards and m backwards with at most two transfers each, plus STEP. */
    long long cap = training ? 6LL * m + 1 : 3LL * m;
    if (cap > (1LL << 30))
        return bt_error(BT_ERR_INVALID_ARG, "%d micro-batches is too many for one schedule", m);
    BT_TRY(bt_schedule_alloc(kind, p, m, training, (int)cap, &sched));
    switch (kind) {
    case BT_SCHEDULE_GPIPE: build_gpipe(sched); break;
    case BT_SCHEDULE_1F1B: build_1f1b(sched); break;
    case BT_SCHEDULE_STREAM: build_stream(sched); break;
    }
    *out = sched;
    return BT_OK;
}

int bt_schedule_max_inflight(const bt_schedule *sched, int stage)
{
    if (!sched || stage < 0 || stage >= sched->stages) return 0;
    if (!sched->training) return 1;
    int held = 0, peak = 0;
    for (int i = 0; i < sched->len[stage]; i++) {
        bt_instr_kind kind = sched->list[stage][i].kind;
        if (kind == BT_I_FWD) held++;
        else if (kind == BT_I_BWD) held--;
        if (held > peak) peak = held;
    }
    return peak;
}

void bt_instr_format(int stage, const bt_instr *ins, char *buf, size_t size)
{
    static const char letter[] = {
        [BT_I_FWD] = 'F',      [BT_I_BWD] = 'B',       [BT_I_SEND_ACT] = 'S',
        [BT_I_RECV_ACT] = 'R', [BT_I_SEND_GRAD] = 's', [BT_I_RECV_GRAD] = 'r',
        [BT_I_STEP] = 'U',
    };
    if (!buf || size == 0) return;
    if (!ins || (unsigned)ins->kind > BT_I_STEP) {
        snprintf(buf, size, "%d?", stage);
        return;
    }
    if (ins->kind == BT_I_STEP) snprintf(buf, size, "%dU", stage);
    else snprintf(buf, size, "%d%c%d", stage, letter[ins->kind], ins->mb);
}

static int decimal_digits(long long v)
{
    int n = 1;
    if (v < 0) {
        n++;
        v = -v;
    }
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static int is_compute(bt_instr_kind kind)
{
    return kind == BT_I_FWD || kind == BT_I_BWD || kind == BT_I_STEP;
}

/* Layout (columns are time slots of a run with F = B = STEP = 1 and instant transfers; every cell
 * is padded to one width and the last cell of a row is not padded):
 *   slot     0   1   2   3   4   5   6
 *   stage 0  0F0 0F1 .   0B0 .   0B1 0U
 *   stage 1  .   1F0 1B0 1F1 1B1 1U  . */
char *bt_schedule_format_grid(const bt_schedule *sched)
{
    bt_sim_result sim = {0};
    double *fwd = NULL, *bwd = NULL;
    const bt_instr **cell = NULL;
    char *text = NULL;
    char token[48];

    if (!sched) {
        bt_error(BT_ERR_INVALID_ARG, "bt_schedule_format_grid: schedule is NULL");
        return NULL;
    }
    int p = sched->stages;
    fwd = malloc((size_t)p * sizeof *fwd);
    bwd = malloc((size_t)p * sizeof *bwd);
    if (!fwd || !bwd) goto nomem;
    for (int s = 0; s < p; s++) {
        fwd[s] = GRID_FWD_COST;
        bwd[s] = GRID_BWD_COST;
    }
    bt_sim_costs costs = {.fwd = fwd, .bwd = bwd, .step = GRID_STEP_COST};
    if (bt_simulate(sched, &costs, &sim) != BT_OK) goto fail;

    int slots = (int)(sim.step_time + 0.5);
    int width = decimal_digits(slots > 0 ? slots - 1 : 0);
    for (int s = 0; s < p; s++)
        for (int i = 0; i < sched->len[s]; i++) {
            bt_instr_format(s, &sched->list[s][i], token, sizeof token);
            int n = (int)strlen(token);
            if (is_compute(sched->list[s][i].kind) && n > width) width = n;
        }

    /* cell[s * slots + t]: the compute instruction stage s starts in slot t, or NULL. */
    cell = calloc((size_t)p * (size_t)(slots > 0 ? slots : 1), sizeof *cell);
    if (!cell) goto nomem;
    for (int s = 0; s < p; s++)
        for (int i = 0; i < sched->len[s]; i++) {
            if (!is_compute(sched->list[s][i].kind)) continue;
            int t = (int)(sim.start[s][i] + 0.5);
            if (t >= 0 && t < slots) cell[(size_t)s * slots + t] = &sched->list[s][i];
        }

    int label = (int)strlen("stage ") + decimal_digits(p - 1);
    size_t row_bytes = (size_t)label + 2 + (size_t)slots * (size_t)(width + 1) + 1;
    text = malloc(row_bytes * (size_t)(p + 1) + 1);
    if (!text) goto nomem;
    char *at = text, *text_end = text + row_bytes * (size_t)(p + 1) + 1;
    at += snprintf(at, (size_t)(text_end - at), "%-*s ", label, "slot");
    for (int t = 0; t < slots; t++)
        at += snprintf(at, (size_t)(text_end - at), " %-*d", t == slots - 1 ? 0 : width, t);
    *at++ = '\n';
    for (int s = 0; s < p; s++) {
        int stage_digits = label - (int)strlen("stage ");
        at += snprintf(at, (size_t)(text_end - at), "stage %-*d ", stage_digits, s);
        for (int t = 0; t < slots; t++) {
            const bt_instr *ins = cell[(size_t)s * slots + t];
            if (ins) bt_instr_format(s, ins, token, sizeof token);
            else strcpy(token, ".");
            at += snprintf(at, (size_t)(text_end - at), " %-*s", t == slots - 1 ? 0 : width, token);
        }
        *at++ = '\n';
    }
    *at = '\0';
    goto done;

nomem:
    bt_error(BT_ERR_NOMEM, "out of memory drawing a schedule grid");
fail:
    free(text);
    text = NULL;
done:
    free(cell);
    bt_sim_result_free(&sim);
    free(fwd);
    free(bwd);
    return text;
}
