/* sched/schedule.c: building the per-stage instruction lists of GPipe, 1F1B, forward-only
 * streaming, interleaved 1F1B, ZB-H1 and ZBV, placing logical stages on devices, allocating and
 * freeing schedules, and giving instructions their activation slots (the slot count per stage
 * sizes the executor's activation memory). The text forms live in notation.c.
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
 * ZBV (Qi et al., 2024, section 6; PyTorch's ScheduleZBVZeroBubble): P devices, 2P logical stages
 * in a V, device d running stage d (chunk 0) and stage 2P-1-d (chunk 1), so stage 0 and the loss
 * stage 2P-1 share device 0 and stages P-1 and P share device P-1. Device d's order over
 * n = max(m, 2P-1) micro-batches (those >= m are left out): 2(P-d)-1 forwards of chunk 0; d pairs
 * (F chunk 1, F chunk 0); P-d triples (F, B, W of chunk 1); then while forwards remain, (F0, B0, W0,
 * F1, B1, W1) with each F only while chunk 0 has micro-batches left; then d pairs (B0, B1) whose W
 * wait, P-d pairs (B0, W0 of the oldest pending), the pending W of chunk 1, then of chunk 0, and the
 * two STEPs. With F = B = W per chunk no device idles between its first and its last instruction
 * (the zero-bubble property); what idles is the start and end staircase. A device holds at most
 * 2P chunk-sized micro-batches, P stages' worth: 1F1B's peak.
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
           kind == BT_SCHEDULE_INTERLEAVED_1F1B || kind == BT_SCHEDULE_ZB_H1 || kind == BT_SCHEDULE_ZBV;
}

int bt_schedule_splits_backward(bt_schedule_kind kind)
{
    return kind == BT_SCHEDULE_ZB_H1 || kind == BT_SCHEDULE_ZBV;
}

int bt_schedule_stage_device(bt_schedule_kind kind, int p, int v, int s)
{
    if (s < 0 || s >= p) return -1;
    if (v < 1) v = 1;
    int devices = p / v > 0 ? p / v : 1;
    if (kind == BT_SCHEDULE_ZBV && v == 2) return s < devices ? s : p - 1 - s;
    if (kind == BT_SCHEDULE_INTERLEAVED_1F1B || kind == BT_SCHEDULE_ZBV) return s % devices;
    return s;
}

int bt_schedule_stage_chunk(const bt_schedule *sched, int s)
{
    int c = 0;
    if (!sched || !sched->device || s < 0 || s >= sched->stages) return -1;
    for (int t = 0; t < s; t++) c += sched->device[t] == sched->device[s];
    return c;
}

int bt_schedule_default_virtual(bt_schedule_kind kind, int v)
{
    if (v > 1) return v;
    return kind == BT_SCHEDULE_ZBV ? 2 : 1;
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
    sched->split_backward = bt_schedule_splits_backward(kind);
    sched->len = calloc((size_t)p, sizeof *sched->len);
    sched->list = calloc((size_t)p, sizeof *sched->list);
    sched->slots = calloc((size_t)p, sizeof *sched->slots);
    sched->device = calloc((size_t)p, sizeof *sched->device);
    if (!sched->len || !sched->list || !sched->slots || !sched->device) goto nomem;
    for (int s = 0; s < p; s++) {
        sched->device[s] = s;
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
    free(sched->device);
    free(sched);
}

static void push(bt_schedule *sched, int s, bt_instr_kind kind, int mb, int peer)
{
    bt_instr *ins = &sched->list[s][sched->len[s]++];
    ins->kind = kind;
    ins->mb = mb;
    ins->peer = peer;
    ins->slot = -1; /* bt_schedule_assign_slots gives them */
    ins->chunk = sched->devices == sched->stages ? 0 : bt_schedule_stage_chunk(sched, s);
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

/* One step of a device's ZBV order: compute kind k (FWD, BWD or WGT) of chunk c (0, 1). */
static void push_zbv(bt_schedule *sched, int d, int c, bt_instr_kind k, int mb, int *turn)
{
    if (mb >= sched->microbatches) return; /* beyond m: the published order pads with these */
    int s = c == 0 ? d : sched->stages - 1 - d, before = sched->len[s];
    if (k == BT_I_FWD) push_forward(sched, s, mb);
    else if (k == BT_I_BWD) push_backward(sched, s, mb);
    else push(sched, s, BT_I_WGT, mb, -1);
    for (int i = before; i < sched->len[s]; i++) sched->list[s][i].turn = (*turn)++;
}

static void build_zbv(bt_schedule *sched)
{
    int P = sched->devices, m = sched->microbatches, n = m > 2 * P - 1 ? m : 2 * P - 1;
    for (int d = 0; d < P; d++) {
        int turn = 0, f[2] = {0, 0}, b[2] = {0, 0}, w[2];
        for (int i = 0; i < 2 * (P - d) - 1; i++) push_zbv(sched, d, 0, BT_I_FWD, f[0]++, &turn);
        for (int i = 0; i < d; i++) {
            push_zbv(sched, d, 1, BT_I_FWD, f[1]++, &turn);
            push_zbv(sched, d, 0, BT_I_FWD, f[0]++, &turn);
        }
        for (int i = 0; i < P - d; i++) {
            push_zbv(sched, d, 1, BT_I_FWD, f[1]++, &turn);
            push_zbv(sched, d, 1, BT_I_BWD, b[1], &turn);
            push_zbv(sched, d, 1, BT_I_WGT, b[1]++, &turn);
        }
        while (f[1] < f[0] || f[0] < n) {
            if (f[0] < n) push_zbv(sched, d, 0, BT_I_FWD, f[0]++, &turn);
            push_zbv(sched, d, 0, BT_I_BWD, b[0], &turn);
            push_zbv(sched, d, 0, BT_I_WGT, b[0]++, &turn);
            push_zbv(sched, d, 1, BT_I_FWD, f[1]++, &turn);
            push_zbv(sched, d, 1, BT_I_BWD, b[1], &turn);
            push_zbv(sched, d, 1, BT_I_WGT, b[1]++, &turn);
        }
        w[0] = b[0];
        w[1] = b[1];
        for (int i = 0; i < d; i++) {
            push_zbv(sched, d, 0, BT_I_BWD, b[0]++, &turn);
            push_zbv(sched, d, 1, BT_I_BWD, b[1]++, &turn);
        }
        for (int i = 0; i < P - d; i++) {
            push_zbv(sched, d, 0, BT_I_BWD, b[0]++, &turn);
            push_zbv(sched, d, 0, BT_I_WGT, w[0]++, &turn);
        }
        while (w[1] < b[1]) push_zbv(sched, d, 1, BT_I_WGT, w[1]++, &turn);
        while (w[0] < b[0]) push_zbv(sched, d, 0, BT_I_WGT, w[0]++, &turn);
        for (int c = 0; c < 2; c++) {
            int s = c == 0 ? d : sched->stages - 1 - d;
            push(sched, s, BT_I_STEP, -1, -1);
            sched->list[s][sched->len[s] - 1].turn = turn++;
        }
    }
}

static const bt_schedule_kind training_kinds[] = {BT_SCHEDULE_1F1B, BT_SCHEDULE_ZB_H1, BT_SCHEDULE_ZBV,
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
    if (kind == BT_SCHEDULE_ZBV) {
        if (v != 2)
            return bt_error(BT_ERR_INVALID_ARG, "zbv runs exactly 2 chunks per device (device d holds stages d and "
                            "2P-1-d): virtual must be 2, got %d", v);
        if (p % 2 != 0)
            return bt_error(BT_ERR_INVALID_ARG, "zbv: %d stages do not pair into a V (stages must be 2 x devices)", p);
    } else if (v > 1 && kind != BT_SCHEDULE_INTERLEAVED_1F1B)
        return bt_error(BT_ERR_INVALID_ARG, "virtual %d: only interleaved-1f1b and zbv run several chunks per "
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
    case BT_SCHEDULE_ZBV: {
        int P = p / 2, d = s < P ? s : p - 1 - s, bound = s < P ? 2 * P - d : d + 1;
        return bound < m ? bound : m;
    }
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
    for (int s = 0; s < p; s++) sched->device[s] = bt_schedule_stage_device(kind, p, v, s);
    switch (kind) {
    case BT_SCHEDULE_GPIPE: build_gpipe(sched); break;
    case BT_SCHEDULE_1F1B: build_1f1b(sched); break;
    case BT_SCHEDULE_STREAM: build_stream(sched); break;
    case BT_SCHEDULE_ZB_H1: build_zb_h1(sched); break;
    case BT_SCHEDULE_ZBV: build_zbv(sched); break;
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
    for (int s = 0; s < sched->stages; s++)
        if (sched->device[s] == d) n += sched->len[s];
    int *stage = malloc((size_t)(n > 0 ? n : 1) * sizeof *stage);
    int *index = malloc((size_t)(n > 0 ? n : 1) * sizeof *index);
    if (!stage || !index) {
        free(stage);
        free(index);
        return bt_error(BT_ERR_NOMEM, "out of memory ordering a device's instructions");
    }
    for (int k = 0; k < n; k++) stage[k] = -1;
    for (int s = 0; s < sched->stages; s++)
        for (int i = 0; i < sched->len[s] && sched->device[s] == d; i++) {
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
