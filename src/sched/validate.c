/* sched/validate.c: proving a schedule can run before anything runs it.
 *
 * The checks run in five passes and the first failure is reported:
 *   1. each instruction alone: known kind, micro-batch in range (-1 for STEP), the peer a SEND or
 *      RECV names is the neighbour its kind talks to (and exists), the model chunk is the stage's
 *      (its rank among its device's stages), no backward-pass instruction in a forward-only
 *      schedule, W only where the backward is split; then the devices: stages = devices * chunks,
 *      every device runs exactly `chunks` stages (device[s] in range; device s when each runs
 *      one), and where a device runs several stages their turns number its instructions 0..n-1
 *      once each, increasing along every stage's list (one stage per device: the list is the
 *      order and turns are not read);
 *   2. each stage alone: every micro-batch has exactly one FWD (and one BWD when training, and one
 *      W after its BWD when the backward is split), each send and receive occurs at most once per
 *      micro-batch, BWD after its FWD, RECV_ACT before the FWD that needs it, RECV_GRAD before the
 *      BWD that needs it, SEND_ACT after its FWD, SEND_GRAD after its BWD; a training stage has
 *      exactly one STEP, after its last BWD and its last W;
 *   3. between neighbours: every SEND pairs with exactly one RECV of the same kind and micro-batch
 *      on the stage it names, and every RECV with exactly one SEND;
 *   4. an abstract run (sends never block, a RECV waits for its SEND, each device runs its
 *      instructions in its order) completes; otherwise the stages that are stuck are named with the
 *      instruction each waits at, the wait cycle first;
 *   5. activation slots: each stage states 0..m slots, the instructions that touch a slot
 *      (RECV_ACT, FWD, SEND_ACT, BWD, W) name one in range and the others none (-1), a micro-batch
 *      names the same slot throughout, and holds it from its first slot instruction to its last
 *      (training: its BWD, or its W; streaming: the last read), during which no other micro-batch may take
 *      it: "stage 0, instruction 4 (0F2): forward of micro-batch 2 takes slot 1 while micro-batch
 *      1 holds it (until instruction 7, 0B1)". Together with pass 2 this proves no FWD overwrites
 *      activations a BWD (or a later send) still reads.
 * Messages name the instruction in the bt_instr_format notation:
 *   "stage 1, instruction 4 (1R3): receive of activations for micro-batch 3 has no matching send
 *    on stage 0".
 *
 * Data flow: called by bt_simulate, by the executor before a run and by `baton schedule
 * --validate`; reads the schedule only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"

#define NOT_SEEN (-1)

/* Per stage, per micro-batch: the index of the first instruction of each kind, NOT_SEEN if none.
 * Indexed [kind][s * m + mb]. */
typedef struct stage_index {
    int *first[BT_I_KINDS]; /* NULL for STEP */
} stage_index;

static const char *kind_phrase(bt_instr_kind kind)
{
    switch (kind) {
    case BT_I_FWD: return "forward";
    case BT_I_BWD: return "backward";
    case BT_I_SEND_ACT: return "send of activations";
    case BT_I_RECV_ACT: return "receive of activations";
    case BT_I_SEND_GRAD: return "send of gradients";
    case BT_I_RECV_GRAD: return "receive of gradients";
    case BT_I_STEP: return "optimizer step";
    case BT_I_WGT: return "weight gradient";
    }
    return "unknown instruction";
}

/* The instruction kind on the peer that pairs with this one. */
static bt_instr_kind partner_kind(bt_instr_kind kind)
{
    switch (kind) {
    case BT_I_SEND_ACT: return BT_I_RECV_ACT;
    case BT_I_RECV_ACT: return BT_I_SEND_ACT;
    case BT_I_SEND_GRAD: return BT_I_RECV_GRAD;
    case BT_I_RECV_GRAD: return BT_I_SEND_GRAD;
    default: return kind;
    }
}

static int is_transfer(bt_instr_kind kind)
{
    return kind == BT_I_SEND_ACT || kind == BT_I_RECV_ACT || kind == BT_I_SEND_GRAD ||
           kind == BT_I_RECV_GRAD;
}

static int is_backward_pass(bt_instr_kind kind)
{
    return kind == BT_I_BWD || kind == BT_I_SEND_GRAD || kind == BT_I_RECV_GRAD ||
           kind == BT_I_STEP || kind == BT_I_WGT;
}

/* Fails with "stage S, instruction I (TOKEN): <message>". */
static bt_status fail_at(const bt_schedule *sched, int s, int i, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static bt_status fail_at(const bt_schedule *sched, int s, int i, const char *fmt, ...)
{
    char token[48], detail[512];
    va_list ap;
    bt_instr_format(s, &sched->list[s][i], token, sizeof token);
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return bt_error(BT_ERR_SCHEDULE, "stage %d, instruction %d (%s): %s", s, i, token, detail);
}

static bt_status check_shape(const bt_schedule *sched)
{
    if (!sched) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_validate: schedule is NULL");
    if (sched->stages < 1 || sched->microbatches < 1)
        return bt_error(BT_ERR_SCHEDULE, "schedule has %d stages and %d micro-batches (need >= 1)",
                        sched->stages, sched->microbatches);
    if (!sched->len || !sched->list || !sched->slots || !sched->device)
        return bt_error(BT_ERR_SCHEDULE, "schedule has no instruction lists");
    if (sched->chunks < 1 || sched->devices < 1 || sched->devices * sched->chunks != sched->stages)
        return bt_error(BT_ERR_SCHEDULE, "schedule has %d stages on %d devices with %d model chunks "
                        "each (stages must be devices * chunks)", sched->stages, sched->devices,
                        sched->chunks);
    for (int s = 0; s < sched->stages; s++) {
        if (sched->device[s] < 0 || sched->device[s] >= sched->devices)
            return bt_error(BT_ERR_SCHEDULE, "stage %d runs on device %d (the schedule has %d: 0..%d)", s,
                            sched->device[s], sched->devices, sched->devices - 1);
        if (sched->devices == sched->stages && sched->device[s] != s)
            return bt_error(BT_ERR_SCHEDULE, "stage %d runs on device %d, but with one stage per device stage s "
                            "runs on device s", s, sched->device[s]);
        int c = bt_schedule_stage_chunk(sched, s);
        if (c >= sched->chunks)
            return bt_error(BT_ERR_SCHEDULE, "stage %d makes %d stages on device %d (each device runs %d: the "
                            "chunks)", s, c + 1, sched->device[s], sched->chunks);
        if (sched->len[s] < 0)
            return bt_error(BT_ERR_SCHEDULE, "stage %d has a negative length %d", s, sched->len[s]);
        if (sched->len[s] > 0 && !sched->list[s])
            return bt_error(BT_ERR_SCHEDULE, "stage %d has %d instructions but no list", s,
                            sched->len[s]);
    }
    return BT_OK;
}

/* Pass 1: each instruction on its own. */
static bt_status check_instructions(const bt_schedule *sched)
{
    int p = sched->stages, m = sched->microbatches;
    for (int s = 0; s < p; s++)
        for (int i = 0; i < sched->len[s]; i++) {
            const bt_instr *ins = &sched->list[s][i];
            if ((unsigned)ins->kind >= BT_I_KINDS)
                return fail_at(sched, s, i, "unknown instruction kind %d", (int)ins->kind);
            if (ins->kind == BT_I_WGT && !sched->split_backward)
                return fail_at(sched, s, i, "weight gradient in a schedule whose backward computes "
                               "them (only split-backward schedules such as zb-h1 have W)");
            if (!sched->training && is_backward_pass(ins->kind))
                return fail_at(sched, s, i, "%s in a forward-only schedule",
                               kind_phrase(ins->kind));
            if (ins->kind == BT_I_STEP) {
                if (ins->mb != -1)
                    return fail_at(sched, s, i,
                                   "optimizer step carries micro-batch %d (must be -1)", ins->mb);
            } else if (ins->mb < 0 || ins->mb >= m) {
                return fail_at(sched, s, i,
                               "micro-batch %d out of range (the schedule has %d: 0..%d)", ins->mb,
                               m, m - 1);
            }
            if (ins->chunk < 0 || ins->chunk >= sched->chunks)
                return fail_at(sched, s, i,
                               "model chunk %d out of range (the schedule has %d per stage)",
                               ins->chunk, sched->chunks);
            if (ins->chunk != bt_schedule_stage_chunk(sched, s))
                return fail_at(sched, s, i,
                               "model chunk %d, but stage %d is chunk %d of device %d (%d devices)",
                               ins->chunk, s, bt_schedule_stage_chunk(sched, s), sched->device[s],
                               sched->devices);
            int want = bt_instr_peer(ins->kind, s);
            if (is_transfer(ins->kind)) {
                if (want < 0 || want >= p)
                    return fail_at(sched, s, i, "%s on the %s stage, which has no %s neighbour",
                                   kind_phrase(ins->kind), want < 0 ? "first" : "last",
                                   want < 0 ? "previous" : "next");
                if (ins->peer != want)
                    return fail_at(sched, s, i, "%s names peer %d (must be stage %d)",
                                   kind_phrase(ins->kind), ins->peer, want);
            } else if (ins->peer != -1) {
                return fail_at(sched, s, i, "%s names peer %d (must be -1)", kind_phrase(ins->kind),
                               ins->peer);
            }
        }
    return BT_OK;
}

static void stage_index_free(stage_index *idx)
{
    for (int k = 0; k < BT_I_KINDS; k++) free(idx->first[k]);
}

/* Pass 2: each stage on its own; fills idx with the first index of every (kind, stage, mb). */
static bt_status check_stages(const bt_schedule *sched, stage_index *idx)
{
    int p = sched->stages, m = sched->microbatches;
    size_t cells = (size_t)p * (size_t)m;
    for (int k = 0; k < BT_I_KINDS; k++) {
        if (k == BT_I_STEP) continue;
        idx->first[k] = malloc(cells * sizeof *idx->first[k]);
        if (!idx->first[k]) return bt_error(BT_ERR_NOMEM, "out of memory validating a schedule");
        for (size_t c = 0; c < cells; c++) idx->first[k][c] = NOT_SEEN;
    }

    for (int s = 0; s < p; s++) {
        int step_at = NOT_SEEN, last_bwd = NOT_SEEN, last_wgt = NOT_SEEN;
        for (int i = 0; i < sched->len[s]; i++) {
            const bt_instr *ins = &sched->list[s][i];
            if (ins->kind == BT_I_STEP) {
                if (step_at != NOT_SEEN)
                    return fail_at(sched, s, i,
                                   "second optimizer step (the first is instruction %d)", step_at);
                step_at = i;
                continue;
            }
            int *first = &idx->first[ins->kind][(size_t)s * m + ins->mb];
            if (*first != NOT_SEEN)
                return fail_at(sched, s, i,
                               "second %s for micro-batch %d (the first is instruction %d)",
                               kind_phrase(ins->kind), ins->mb, *first);
            *first = i;
            if (ins->kind == BT_I_BWD) last_bwd = i;
            if (ins->kind == BT_I_WGT) last_wgt = i;
        }

        for (int mb = 0; mb < m; mb++) {
            size_t c = (size_t)s * m + mb;
            int fwd = idx->first[BT_I_FWD][c], bwd = idx->first[BT_I_BWD][c];
            int recv_act = idx->first[BT_I_RECV_ACT][c], send_act = idx->first[BT_I_SEND_ACT][c];
            int recv_grad = idx->first[BT_I_RECV_GRAD][c],
                send_grad = idx->first[BT_I_SEND_GRAD][c];
            if (fwd == NOT_SEEN)
                return bt_error(BT_ERR_SCHEDULE, "stage %d: no forward of micro-batch %d", s, mb);
            if (sched->training && bwd == NOT_SEEN)
                return bt_error(BT_ERR_SCHEDULE, "stage %d: no backward of micro-batch %d", s, mb);
            if (bwd != NOT_SEEN && bwd < fwd)
                return fail_at(sched, s, bwd, "backward of micro-batch %d before its forward "
                               "(instruction %d)", mb, fwd);
            if (s > 0 && recv_act == NOT_SEEN)
                return fail_at(sched, s, fwd, "forward of micro-batch %d has no receive of its "
                               "activations from stage %d", mb, s - 1);
            if (recv_act != NOT_SEEN && recv_act > fwd)
                return fail_at(sched, s, fwd, "forward of micro-batch %d before the receive of its "
                               "activations (instruction %d)", mb, recv_act);
            if (send_act != NOT_SEEN && send_act < fwd)
                return fail_at(sched, s, send_act, "send of activations for micro-batch %d before "
                               "its forward (instruction %d)", mb, fwd);
            if (bwd != NOT_SEEN && s < p - 1 && recv_grad == NOT_SEEN)
                return fail_at(sched, s, bwd, "backward of micro-batch %d has no receive of its "
                               "gradients from stage %d", mb, s + 1);
            if (recv_grad != NOT_SEEN && bwd != NOT_SEEN && recv_grad > bwd)
                return fail_at(sched, s, bwd, "backward of micro-batch %d before the receive of "
                               "its gradients (instruction %d)", mb, recv_grad);
            if (send_grad != NOT_SEEN && (bwd == NOT_SEEN || send_grad < bwd))
                return fail_at(sched, s, send_grad,
                               "send of gradients for micro-batch %d before its backward", mb);
            int wgt = idx->first[BT_I_WGT][c];
            if (sched->split_backward && sched->training && wgt == NOT_SEEN)
                return bt_error(BT_ERR_SCHEDULE, "stage %d: no weight gradient of micro-batch %d "
                                "(the backward is split: every B needs its W)", s, mb);
            if (wgt != NOT_SEEN && (bwd == NOT_SEEN || wgt < bwd))
                return fail_at(sched, s, wgt, "weight gradient of micro-batch %d before its backward%s",
                               mb, bwd == NOT_SEEN ? "" : " (B)");
        }

        if (sched->training) {
            if (step_at == NOT_SEEN)
                return bt_error(BT_ERR_SCHEDULE,
                                "stage %d: no optimizer step in a training schedule", s);
            if (step_at < last_bwd)
                return fail_at(sched, s, step_at, "optimizer step before the stage's last backward "
                               "(instruction %d)", last_bwd);
            if (step_at < last_wgt)
                return fail_at(sched, s, step_at, "optimizer step before the stage's last weight "
                               "gradient (instruction %d)", last_wgt);
        }
    }
    return BT_OK;
}

/* Pass 3: every SEND and RECV has its partner on the neighbouring stage. Duplicates were rejected
 * in pass 2, so existence is enough for "exactly one". */
static bt_status check_pairing(const bt_schedule *sched, const stage_index *idx)
{
    int m = sched->microbatches;
    for (int s = 0; s < sched->stages; s++)
        for (int i = 0; i < sched->len[s]; i++) {
            const bt_instr *ins = &sched->list[s][i];
            if (!is_transfer(ins->kind)) continue;
            int peer = ins->peer;
            bt_instr_kind want = partner_kind(ins->kind);
            if (idx->first[want][(size_t)peer * m + ins->mb] == NOT_SEEN) {
                int is_send = ins->kind == BT_I_SEND_ACT || ins->kind == BT_I_SEND_GRAD;
                return fail_at(sched, s, i, "%s for micro-batch %d has no matching %s on stage %d",
                               kind_phrase(ins->kind), ins->mb, is_send ? "receive" : "send", peer);
            }
        }
    return BT_OK;
}

/* Appends "<separator>stage S waits at TOKEN (instruction I) for PEER_TOKEN" to buf. */
static void describe_wait(const bt_schedule *sched, const int *pos, int s, const char *separator,
                          char *buf, size_t size)
{
    const bt_instr *ins = &sched->list[s][pos[s]];
    bt_instr partner = {partner_kind(ins->kind), ins->mb, s, -1, 0, -1};
    char mine[48], theirs[48];
    bt_instr_format(s, ins, mine, sizeof mine);
    bt_instr_format(ins->peer, &partner, theirs, sizeof theirs);
    size_t used = strlen(buf);
    if (used < size)
        snprintf(buf + used, size - used, "%sstage %d waits at %s (instruction %d) for %s",
                 separator, s, mine, pos[s], theirs);
}

/* Builds the deadlock message from the stuck positions. Every stuck stage waits at a RECV whose
 * peer is stuck too (pairing passed, so a finished peer would have sent), so following the waits
 * from any stuck stage for p steps lands on a cycle; in a chain of stages that cycle is two
 * neighbours waiting for each other. The cycle is listed first, then the stages stuck behind it. */
static bt_status report_wait_cycle(const bt_schedule *sched, const int *pos)
{
    int p = sched->stages;
    bt_status st;
    int *waits_on = malloc((size_t)p * sizeof *waits_on);
    char *in_cycle = calloc((size_t)p, 1);
    size_t msg_size = 112 * (size_t)p + 64;
    char *msg = calloc(msg_size, 1);
    if (!waits_on || !in_cycle || !msg) {
        st = bt_error(BT_ERR_NOMEM, "out of memory validating a schedule");
        goto out;
    }

    int walker = -1;
    for (int s = 0; s < p; s++) {
        waits_on[s] = pos[s] < sched->len[s] ? sched->list[s][pos[s]].peer : -1;
        if (waits_on[s] >= 0 && walker < 0) walker = s;
    }
    for (int step = 0; step < p && walker >= 0; step++) walker = waits_on[walker];
    if (walker < 0) {
        st = bt_error(BT_ERR_INTERNAL, "validation: a stuck stage waits on a finished one");
        goto out;
    }
    for (int s = walker; !in_cycle[s]; s = waits_on[s]) in_cycle[s] = 1;

    const char *separator = "wait cycle: ";
    for (int s = 0; s < p; s++)
        if (in_cycle[s]) {
            describe_wait(sched, pos, s, separator, msg, msg_size);
            separator = ", ";
        }
    separator = "; also stuck: ";
    for (int s = 0; s < p; s++)
        if (waits_on[s] >= 0 && !in_cycle[s]) {
            describe_wait(sched, pos, s, separator, msg, msg_size);
            separator = ", ";
        }
    st = bt_error(BT_ERR_SCHEDULE, "%s", msg);

out:
    free(msg);
    free(in_cycle);
    free(waits_on);
    return st;
}

/* The devices' orders: n[d] instructions, (stage[d][k], index[d][k]) the k-th device d runs. */
typedef struct device_orders {
    int devices;
    int *n, **stage, **index;
} device_orders;

static void device_orders_free(device_orders *o)
{
    for (int d = 0; o->stage && d < o->devices; d++) {
        free(o->stage[d]);
        free(o->index[d]);
    }
    free(o->stage);
    free(o->index);
    free(o->n);
    memset(o, 0, sizeof *o);
}

/* Pass 1, second half: each device's order is a permutation of its stages' instructions (turns
 * 0..n-1, once each) that keeps every stage's list order. */
static bt_status check_device_orders(const bt_schedule *sched, device_orders *o)
{
    int D = sched->devices;
    o->devices = D;
    o->n = calloc((size_t)D, sizeof *o->n);
    o->stage = calloc((size_t)D, sizeof *o->stage);
    o->index = calloc((size_t)D, sizeof *o->index);
    if (!o->n || !o->stage || !o->index) return bt_error(BT_ERR_NOMEM, "out of memory validating a schedule");
    for (int d = 0; d < D; d++)
        BT_TRY(bt_schedule_device_order(sched, d, &o->n[d], &o->stage[d], &o->index[d]));
    if (D == sched->stages) return BT_OK;
    for (int s = 0; s < sched->stages; s++)
        for (int i = 1; i < sched->len[s]; i++)
            if (sched->list[s][i].turn <= sched->list[s][i - 1].turn)
                return fail_at(sched, s, i, "turn %d on device %d comes before the stage's previous "
                               "instruction (turn %d): a device runs each stage's list in order",
                               sched->list[s][i].turn, sched->device[s], sched->list[s][i - 1].turn);
    return BT_OK;
}

/* Several stages per device: names each stuck device with the instruction it waits at. */
static bt_status report_stuck_devices(const bt_schedule *sched, const device_orders *o, const int *pos)
{
    char msg[1024] = "", mine[48], theirs[48];
    size_t used = 0;
    for (int d = 0; d < o->devices && used < sizeof msg; d++) {
        if (pos[d] >= o->n[d]) continue;
        int s = o->stage[d][pos[d]];
        const bt_instr *ins = &sched->list[s][o->index[d][pos[d]]];
        bt_instr partner = {partner_kind(ins->kind), ins->mb, s, -1, 0, -1};
        bt_instr_format(s, ins, mine, sizeof mine);
        bt_instr_format(ins->peer, &partner, theirs, sizeof theirs);
        used += (size_t)snprintf(msg + used, sizeof msg - used, "%sdevice %d waits at %s (stage %d, "
                                 "instruction %d) for %s", used ? ", " : "the devices cannot proceed: ",
                                 d, mine, s, o->index[d][pos[d]], theirs);
    }
    return bt_error(BT_ERR_SCHEDULE, "%s", msg);
}

/* Pass 4: runs the devices' orders abstractly. A RECV proceeds once its peer has executed the
 * matching SEND; everything else proceeds at once. */
static bt_status check_deadlock(const bt_schedule *sched, const device_orders *o)
{
    int p = sched->stages, m = sched->microbatches, D = o->devices;
    bt_status st = BT_OK;
    int *pos = calloc((size_t)D, sizeof *pos);
    /* sent[s * m + mb] bit 0: SEND_ACT from s done, bit 1: SEND_GRAD from s done. */
    unsigned char *sent = calloc((size_t)p * (size_t)m, 1);
    if (!pos || !sent) {
        st = bt_error(BT_ERR_NOMEM, "out of memory validating a schedule");
        goto out;
    }

    for (;;) {
        int progress = 0, done = 1;
        for (int d = 0; d < D; d++) {
            while (pos[d] < o->n[d]) {
                int s = o->stage[d][pos[d]];
                const bt_instr *ins = &sched->list[s][o->index[d][pos[d]]];
                if (ins->kind == BT_I_RECV_ACT && !(sent[(size_t)ins->peer * m + ins->mb] & 1))
                    break;
                if (ins->kind == BT_I_RECV_GRAD && !(sent[(size_t)ins->peer * m + ins->mb] & 2))
                    break;
                if (ins->kind == BT_I_SEND_ACT) sent[(size_t)s * m + ins->mb] |= 1;
                if (ins->kind == BT_I_SEND_GRAD) sent[(size_t)s * m + ins->mb] |= 2;
                pos[d]++;
                progress = 1;
            }
            if (pos[d] < o->n[d]) done = 0;
        }
        if (done) break;
        if (!progress) {
            /* one stage per device: pos[d] is stage d's position in its own list */
            st = D == p ? report_wait_cycle(sched, pos) : report_stuck_devices(sched, o, pos);
            break;
        }
    }

out:
    free(sent);
    free(pos);
    return st;
}

/* Pass 5 on stage s. last[mb]: index of mb's last slot instruction; held_by[k]: the micro-batch
 * holding slot k (-1: free); slot_of[mb]: the slot mb names (-1: not seen yet). */
static bt_status check_stage_slots(const bt_schedule *sched, int s, int *last, int *held_by,
                                   int *slot_of)
{
    int m = sched->microbatches, n = sched->slots[s];
    if (n < 0 || n > m)
        return bt_error(BT_ERR_SCHEDULE,
                        "stage %d states %d activation slots (must be 0..%d, its micro-batches)", s,
                        n, m);
    for (int mb = 0; mb < m; mb++) last[mb] = slot_of[mb] = -1;
    for (int k = 0; k < n; k++) held_by[k] = -1;
    for (int i = 0; i < sched->len[s]; i++)
        if (bt_instr_has_slot(sched->list[s][i].kind)) last[sched->list[s][i].mb] = i;

    for (int i = 0; i < sched->len[s]; i++) {
        const bt_instr *ins = &sched->list[s][i];
        int k = ins->slot, mb = ins->mb;
        if (!bt_instr_has_slot(ins->kind)) {
            if (k != -1)
                return fail_at(sched, s, i, "%s names slot %d (must be -1)",
                               kind_phrase(ins->kind), k);
            continue;
        }
        if (k < 0 || k >= n)
            return fail_at(sched, s, i, "%s of micro-batch %d names slot %d (the stage has %d: "
                           "0..%d)", kind_phrase(ins->kind), mb, k, n, n - 1);
        if (slot_of[mb] >= 0 && slot_of[mb] != k)
            return fail_at(sched, s, i, "%s of micro-batch %d names slot %d, but the micro-batch "
                           "holds slot %d", kind_phrase(ins->kind), mb, k, slot_of[mb]);
        if (slot_of[mb] < 0) { /* mb takes slot k */
            int other = held_by[k];
            if (other >= 0) {
                char token[48];
                bt_instr_format(s, &sched->list[s][last[other]], token, sizeof token);
                return fail_at(sched, s, i, "%s of micro-batch %d takes slot %d while micro-batch "
                               "%d holds it (until instruction %d, %s)", kind_phrase(ins->kind),
                               mb, k, other, last[other], token);
            }
            slot_of[mb] = k;
            held_by[k] = mb;
        }
        if (i == last[mb]) held_by[k] = -1;
    }
    return BT_OK;
}

/* Pass 5: activation slots, stage by stage (passes 1 and 2 hold: every mb is in range). */
static bt_status check_slots(const bt_schedule *sched)
{
    bt_status st = BT_OK;
    size_t m = (size_t)sched->microbatches;
    int *last = malloc(m * sizeof *last), *held_by = malloc(m * sizeof *held_by);
    int *slot_of = malloc(m * sizeof *slot_of);
    if (!last || !held_by || !slot_of) st = bt_error(BT_ERR_NOMEM, "out of memory validating a schedule");
    for (int s = 0; s < sched->stages && st == BT_OK; s++)
        st = check_stage_slots(sched, s, last, held_by, slot_of);
    free(slot_of);
    free(held_by);
    free(last);
    return st;
}

bt_status bt_schedule_validate(const bt_schedule *sched)
{
    stage_index idx = {0};
    device_orders orders = {0};
    bt_status st;
    BT_TRY(check_shape(sched));
    BT_TRY_GOTO(st, check_instructions(sched), out);
    BT_TRY_GOTO(st, check_device_orders(sched, &orders), out);
    BT_TRY_GOTO(st, check_stages(sched, &idx), out);
    BT_TRY_GOTO(st, check_pairing(sched, &idx), out);
    BT_TRY_GOTO(st, check_deadlock(sched, &orders), out);
    BT_TRY_GOTO(st, check_slots(sched), out);
out:
    device_orders_free(&orders);
    stage_index_free(&idx);
    return st;
}
