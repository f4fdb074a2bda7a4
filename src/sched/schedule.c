/* sched/schedule.c: building the per-stage instruction lists of GPipe, 1F1B, forward-only
 * streaming, interleaved 1F1B and ZB-H1, allocating and freeing schedules, and giving instructions
 * their activation slots (the slot count per stage sizes the executor's activation memory). The
 * text forms live in notation.c.
 *
 * Invariants of every built schedule (bt_schedule_validate proves them for any schedule):
 * - every FWD on stage s > 0 is directly preceded by RECV_ACT(mb, s-1), every FWD on s < p-1 is
 *   directly followed by SEND_ACT(mb, s+1);
 * - every BWD on s < p-1 is directly preceded by RECV_GRAD(mb, s+1), every BWD on s > 0 is directly
 *   followed by SEND_GRAD(mb, s-1);
 * - training schedules end with exactly one STEP per stage;
 * - slots come from bt_schedule_assign_slots: a micro-batch takes the lowest free slot at its first
 *   slot instruction and frees it after its last, which gives GPipe slot mb, 1F1B slot
 *   mb mod min(p-s, m) (backwards retire micro-batches in the order forwards admit them) and
 *   streaming slot 0 (a micro-batch is sent on before the next one is received).
 * GPipe runs its backwards in ascending micro-batch order (0, 1, ..., m-1), the order the forwards
 * ran in, so the oldest activations are released first (as torch.distributed.pipelining does).
 *
 * Interleaved 1F1B (Megatron-LM's order) on P devices with v chunks each (p = P v logical stages,
 * stage l on device l mod P, chunk l / P): device d's k-th forward unit runs chunk (k / P) mod v on
 * micro-batch (k / (P v)) P + k mod P, its k-th backward unit chunk v - 1 - (k / P) mod v on the
 * same micro-batch formula; it runs min(2 (P - d - 1) + (v - 1) P, m v) warm-up forwards (all of
 * them when m == P), then alternates one forward and one backward, then drains. m must be a
 * multiple of P. Each unit is the stage's RECV, compute and SEND as above; `turn` numbers the
 * device's instructions in that order, and the STEPs of its stages come last.
 *
 * ZB-H1 (Qi et al., 2024, the handcrafted schedule): 1F1B's forwards and input-gradient backwards
 * B, each followed by the weight-gradient W of the oldest micro-batch whose W is pending as long as
 * more than s are pending on stage s; the last W's drain before STEP. With unit F = B = W costs the
 * idle time per stage is (p - 1), a third of 1F1B's 3 (p - 1); stage s holds at most min(p, m)
 * micro-batches (1F1B's peak, reached on every stage instead of only the first).
 *
 * Data flow: plan/ and the executor call bt_schedule_build; the simulator (simulate.c) and the
 * validator (validate.c) read the lists; the grid is drawn from a unit-cost simulation. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"

static int kind_is_valid(bt_schedule_kind kind)
{
    return kind == BT_SCHEDULE_GPIPE || kind == BT_SCHEDULE_1F1B || kind == BT_SCHEDULE_STREAM ||
           kind == BT_SCHEDULE_INTERLEAVED_1F1B || kind == BT_SCHEDULE_ZB_H1;
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
    sched->chunks = 1;
    sched->devices = p;
    sched->split_backward = kind == BT_SCHEDULE_ZB_H1;
    sched->len = calloc((size_t)p, sizeof *sched->len);
    sched->list = calloc((size_t)p, sizeof *sched->list);
    sched->slots = calloc((size_t)p, sizeof *sched->slots);
    if (!sched->len || !sched->list || !sched->slots) goto nomem;
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
    free(sched->slots);
    free(sched);
}

static void push(bt_schedule *sched, int s, bt_instr_kind kind, int mb, int peer)
{
    bt_instr *ins = &sched->list[s][sched->len[s]++];
    ins->kind = kind;
    ins->mb = mb;
    ins->peer = peer;
    ins->slot = -1; /* bt_schedule_assign_slots gives them */
    ins->chunk = s / sched->devices;
    ins->turn = -1;
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

/* Stage s: warm-up and steady state as 1F1B, with B for the backward; after each B the oldest
 * pending W runs while more than s are pending; the rest drain before STEP. */
static void build_zb_h1(bt_schedule *sched)
{
    int p = sched->stages, m = sched->microbatches;
    for (int s = 0; s < p; s++) {
        int warmup = p - s - 1 < m ? p - s - 1 : m;
        int next_fwd = 0, next_bwd = 0, next_wgt = 0;
        while (next_fwd < warmup) push_forward(sched, s, next_fwd++);
        while (next_bwd < m) {
            if (next_fwd < m) push_forward(sched, s, next_fwd++);
            push_backward(sched, s, next_bwd++);
            while (next_bwd - next_wgt > s) push(sched, s, BT_I_WGT, next_wgt++, -1);
        }
        while (next_wgt < m) push(sched, s, BT_I_WGT, next_wgt++, -1);
        push(sched, s, BT_I_STEP, -1, -1);
    }
}

/* Megatron's k-th forward (backward: reversed chunks) unit on a device: its chunk and micro-batch. */
static void interleaved_unit(int k, int P, int v, int backward, int *chunk, int *mb)
{
    int c = (k / P) % v;
    *chunk = backward ? v - 1 - c : c;
    *mb = (k / (P * v)) * P + k % P;
}

/* Appends one forward or backward unit of (chunk, mb) on device d, numbering the turns. */
static void push_unit(bt_schedule *sched, int d, int k, int backward, int *turn)
{
    int P = sched->devices, chunk, mb;
    interleaved_unit(k, P, sched->chunks, backward, &chunk, &mb);
    int s = chunk * P + d, before = sched->len[s];
    if (backward) push_backward(sched, s, mb);
    else push_forward(sched, s, mb);
    for (int i = before; i < sched->len[s]; i++) sched->list[s][i].turn = (*turn)++;
}

static void build_interleaved(bt_schedule *sched)
{
    int P = sched->devices, v = sched->chunks, m = sched->microbatches;
    int total = m * v;
    for (int d = 0; d < P; d++) {
        int turn = 0, warmup = 2 * (P - d - 1) + (v - 1) * P;
        if (m == P || warmup > total) warmup = total;
        int next_fwd = 0, next_bwd = 0;
        while (next_fwd < warmup) push_unit(sched, d, next_fwd++, 0, &turn);
        while (next_fwd < total) {
            push_unit(sched, d, next_fwd++, 0, &turn);
            push_unit(sched, d, next_bwd++, 1, &turn);
        }
        while (next_bwd < total) push_unit(sched, d, next_bwd++, 1, &turn);
        for (int c = 0; c < v; c++) {
            int s = c * P + d;
            push(sched, s, BT_I_STEP, -1, -1);
            sched->list[s][sched->len[s] - 1].turn = turn++;
        }
    }
}

static const bt_schedule_kind training_kinds[] = {BT_SCHEDULE_1F1B, BT_SCHEDULE_ZB_H1,
                                                   BT_SCHEDULE_INTERLEAVED_1F1B, BT_SCHEDULE_GPIPE};

const bt_schedule_kind *bt_schedule_training_kinds(int *n)
{
    if (n) *n = (int)(sizeof training_kinds / sizeof training_kinds[0]);
    return training_kinds;
}

int bt_schedule_kinds(int training, bt_schedule_kind *out, int max)
{
    int n = 0, nt = 0;
    const bt_schedule_kind *kinds = bt_schedule_training_kinds(&nt);
    if (!training) {
        if (max > 0) out[n++] = BT_SCHEDULE_STREAM;
        return n;
    }
    for (int k = 0; k < nt && n < max; k++) out[n++] = kinds[k];
    return n;
}

bt_status bt_schedule_check_shape(bt_schedule_kind kind, int p, int m, int v)
{
    if (!kind_is_valid(kind)) return bt_error(BT_ERR_INVALID_ARG, "unknown schedule kind %d", (int)kind);
    if (p < 1 || m < 1 || m > BT_SCHEDULE_MAX_SIZE || p > BT_SCHEDULE_MAX_SIZE)
        return bt_error(BT_ERR_INVALID_ARG,
                        "a schedule needs 1 to %d stages and micro-batches (got %d stages, %d "
                        "micro-batches)",
                        BT_SCHEDULE_MAX_SIZE, p, m);
    if (v < 1) return bt_error(BT_ERR_INVALID_ARG, "virtual must be >= 1, got %d", v);
    if (v > 1 && kind != BT_SCHEDULE_INTERLEAVED_1F1B)
        return bt_error(BT_ERR_INVALID_ARG, "virtual %d: only interleaved-1f1b runs several chunks per "
                        "device (%s takes virtual 1)", v,
                        kind == BT_SCHEDULE_GPIPE ? "gpipe" : kind == BT_SCHEDULE_1F1B ? "1f1b"
                        : kind == BT_SCHEDULE_STREAM ? "stream" : "zb-h1");
    if (p % v != 0)
        return bt_error(BT_ERR_INVALID_ARG, "interleaved-1f1b: %d stages do not split into %d chunks per "
                        "device (stages must be a multiple of virtual)", p, v);
    if (kind == BT_SCHEDULE_INTERLEAVED_1F1B && m % (p / v) != 0)
        return bt_error(BT_ERR_INVALID_ARG, "interleaved-1f1b runs micro-batches in groups of the %d devices: "
                        "%d micro-batches is not a multiple of %d", p / v, m, p / v);
    /* Per stage: m forwards and m backwards with at most two transfers each, m W, plus STEP. */
    if (7LL * m + 1 > (1LL << 30))
        return bt_error(BT_ERR_INVALID_ARG, "%d micro-batches is too many for one schedule", m);
    return BT_OK;
}

int bt_schedule_slot_bound(bt_schedule_kind kind, int p, int m, int v, int s)
{
    if (s < 0 || s >= p || m < 1) return 0;
    switch (kind) {
    case BT_SCHEDULE_GPIPE: return m;
    case BT_SCHEDULE_1F1B: return p - s < m ? p - s : m;
    case BT_SCHEDULE_ZB_H1: return p < m ? p : m;
    case BT_SCHEDULE_STREAM: return 1;
    case BT_SCHEDULE_INTERLEAVED_1F1B: {
        int P = p / (v > 0 ? v : 1), d = s % P, total = m * v;
        int warmup = 2 * (P - d - 1) + (v - 1) * P;
        if (m == P || warmup > total) warmup = total;
        return warmup + 1 < total ? warmup + 1 : total;
    }
    }
    return 0;
}

bt_status bt_schedule_build(bt_schedule_kind kind, int p, int m, bt_schedule **out)
{
    return bt_schedule_build_virtual(kind, p, m, 1, out);
}

bt_status bt_schedule_build_virtual(bt_schedule_kind kind, int p, int m, int v, bt_schedule **out)
{
    bt_schedule *sched = NULL;
    int training = kind != BT_SCHEDULE_STREAM;

    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_build: out is NULL");
    *out = NULL;
    BT_TRY(bt_schedule_check_shape(kind, p, m, v));
    long long cap = training ? 7LL * m + 1 : 3LL * m;
    if (kind == BT_SCHEDULE_INTERLEAVED_1F1B) cap = 6LL * m + 1;
    BT_TRY(bt_schedule_alloc(kind, p, m, training, (int)cap, &sched));
    sched->chunks = v;
    sched->devices = p / v;
    sched->split_backward = kind == BT_SCHEDULE_ZB_H1;
    switch (kind) {
    case BT_SCHEDULE_GPIPE: build_gpipe(sched); break;
    case BT_SCHEDULE_1F1B: build_1f1b(sched); break;
    case BT_SCHEDULE_STREAM: build_stream(sched); break;
    case BT_SCHEDULE_ZB_H1: build_zb_h1(sched); break;
    case BT_SCHEDULE_INTERLEAVED_1F1B:
        if (v == 1) build_1f1b(sched);
        else build_interleaved(sched);
        break;
    }
    bt_status st = bt_schedule_assign_slots(sched);
    if (st != BT_OK) {
        bt_schedule_destroy(sched);
        return st;
    }
    *out = sched;
    return BT_OK;
}

static int mb_in_range(const bt_schedule *sched, const bt_instr *ins)
{
    return ins->mb >= 0 && ins->mb < sched->microbatches;
}

/* Stage s: last[mb] is the index of mb's last slot instruction, slot_of[mb] its slot (-1: none
 * yet); held[k] says slot k is taken. Arrays of m entries (a stage never needs more slots than
 * micro-batches). */
static void assign_stage_slots(bt_schedule *sched, int s, int *last, int *slot_of, char *held)
{
    int m = sched->microbatches, used = 0;
    for (int mb = 0; mb < m; mb++) {
        last[mb] = -1;
        slot_of[mb] = -1;
        held[mb] = 0;
    }
    for (int i = 0; i < sched->len[s]; i++) {
        const bt_instr *ins = &sched->list[s][i];
        if (bt_instr_has_slot(ins->kind) && mb_in_range(sched, ins)) last[ins->mb] = i;
    }
    for (int i = 0; i < sched->len[s]; i++) {
        bt_instr *ins = &sched->list[s][i];
        ins->slot = -1;
        if (!bt_instr_has_slot(ins->kind) || !mb_in_range(sched, ins)) continue;
        if (slot_of[ins->mb] < 0) {
            int k = 0;
            while (held[k]) k++; /* at most m - 1 others are held */
            held[k] = 1;
            slot_of[ins->mb] = k;
            if (k + 1 > used) used = k + 1;
        }
        ins->slot = slot_of[ins->mb];
        if (i == last[ins->mb]) held[ins->slot] = 0;
    }
    sched->slots[s] = used;
}

bt_status bt_schedule_assign_slots(bt_schedule *sched)
{
    bt_status st = BT_OK;
    if (!sched || !sched->len || !sched->list || !sched->slots || sched->microbatches < 1)
        return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_assign_slots: not an allocated schedule");
    size_t m = (size_t)sched->microbatches;
    int *last = malloc(m * sizeof *last), *slot_of = malloc(m * sizeof *slot_of);
    char *held = malloc(m);
    if (last && slot_of && held)
        for (int s = 0; s < sched->stages; s++) assign_stage_slots(sched, s, last, slot_of, held);
    else
        st = bt_error(BT_ERR_NOMEM, "out of memory assigning activation slots");
    free(held);
    free(slot_of);
    free(last);
    return st;
}

int bt_schedule_max_inflight(const bt_schedule *sched, int stage)
{
    if (!sched || stage < 0 || stage >= sched->stages) return 0;
    return sched->slots[stage];
}

bt_status bt_schedule_device_order(const bt_schedule *sched, int d, int *n_out, int **stage_out,
                                   int **index_out)
{
    *n_out = 0;
    *stage_out = *index_out = NULL;
    if (!sched || d < 0 || d >= sched->devices)
        return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_device_order: no device %d", d);
    int n = 0, alone = sched->devices == sched->stages;
    for (int s = d; s < sched->stages; s += sched->devices) n += sched->len[s];
    int *stage = malloc((size_t)(n > 0 ? n : 1) * sizeof *stage);
    int *index = malloc((size_t)(n > 0 ? n : 1) * sizeof *index);
    if (!stage || !index) {
        free(stage);
        free(index);
        return bt_error(BT_ERR_NOMEM, "out of memory ordering a device's instructions");
    }
    for (int k = 0; k < n; k++) stage[k] = -1;
    for (int s = d; s < sched->stages; s += sched->devices)
        for (int i = 0; i < sched->len[s]; i++) {
            int t = alone ? i : sched->list[s][i].turn;
            if (t < 0 || t >= n || stage[t] >= 0) {
                free(stage);
                free(index);
                return bt_error(BT_ERR_SCHEDULE, "stage %d, instruction %d: turn %d on device %d is %s "
                                "(the device runs %d instructions: turns 0..%d, each once)", s, i, t, d,
                                t < 0 || t >= n ? "out of range" : "taken twice", n, n - 1);
            }
            stage[t] = s;
            index[t] = i;
        }
    *n_out = n;
    *stage_out = stage;
    *index_out = index;
    return BT_OK;
}
