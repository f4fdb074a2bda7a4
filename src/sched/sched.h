/* sched/sched.h: pipeline schedules as plain data. A schedule is a pure function of
 * (kind, stages p, micro-batches m): for each stage an ordered instruction list. It never sees the
 * graph: the executor runs it, the simulator predicts it, the planner searches with the simulator,
 * the tracer draws it, and the validator proves it cannot hang before anything runs.
 *
 * Communication is expressed along the stage chain. SEND_ACT(mb) on stage s sends everything stage
 * s produces for micro-batch mb to every later stage that consumes it (skip connections go straight
 * to their consumer); RECV_ACT(mb) on stage s receives everything stage s needs for mb from every
 * earlier stage. Sends never block (channels hold up to m micro-batches), so the only waits are
 * receives: RECV_ACT(s, mb) waits for SEND_ACT(s-1, mb), RECV_GRAD(s, mb) for SEND_GRAD(s+1, mb),
 * and because each stage forwards before it sends, that order covers skip connections too.
 * Stage 0 takes its inputs from the feed; the last stage starts each backward from the loss.
 *
 * Activation slots: every instruction that touches a micro-batch's activations on its stage
 * (RECV_ACT writes them, FWD writes them, SEND_ACT and BWD read them) names the slot they live in;
 * a micro-batch holds its slot from the first such instruction to the last (training: its BWD;
 * streaming: its SEND_ACT, or its FWD on the last stage) and keeps one slot throughout. The
 * schedule states how many slots each stage has (slots[s]); the executor allocates that many and
 * never computes a slot itself. The validator proves no micro-batch takes a slot another still
 * holds.
 *
 * Devices: the lists are per logical stage; stage s runs on device `device[s]`, the one mapping
 * every reader uses (bt_schedule_stage_device gives it before a schedule exists: the planner's
 * device list). Every schedule but interleaved 1F1B and ZBV has one stage per device (devices ==
 * stages, device[s] = s, turn -1 everywhere). Interleaved 1F1B with v chunks per device has stages
 * = devices * v: device d runs stages d, d + P, ... (Megatron); ZBV has 2 chunks per device in a V:
 * device d runs stages d and 2P - 1 - d, so the first and the last (loss) stage share device 0.
 * A stage's model chunk is its rank among its device's stages (bt_schedule_stage_chunk), and every
 * instruction names its `turn`, its position in its device's one sequence of work; the executor
 * runs a device's stages in that order, the validator proves the order cannot hang and the
 * simulator charges a device once.
 *
 * Zero bubble (split_backward: ZB-H1, ZBV): BWD computes only the input gradients (B) and a W
 * instruction per micro-batch computes the weight gradients later (ops without a separate weight
 * kernel compute both in B); the micro-batch keeps its slot until its W. */
#ifndef BT_SCHED_H
#define BT_SCHED_H

#include <stddef.h>

#include "baton/config.h"
#include "baton/status.h"

typedef enum bt_instr_kind {
    BT_I_FWD = 0,       /* forward of mb on this stage */
    BT_I_BWD = 1,       /* backward of mb (input and weight gradients) */
    BT_I_SEND_ACT = 2,  /* peer = s + 1 */
    BT_I_RECV_ACT = 3,  /* peer = s - 1 */
    BT_I_SEND_GRAD = 4, /* peer = s - 1 */
    BT_I_RECV_GRAD = 5, /* peer = s + 1 */
    BT_I_STEP = 6,      /* optimizer step; mb = -1 */
    BT_I_WGT = 7        /* weight gradients of mb (split_backward schedules), after its BWD */
} bt_instr_kind;

#define BT_I_KINDS 8

typedef struct bt_instr {
    bt_instr_kind kind;
    int mb;             /* micro-batch, 0-based; -1 for STEP */
    int peer;           /* other stage for SEND/RECV, else -1 */
    int slot;           /* activation slot (0..slots[s]-1) for RECV_ACT, FWD, SEND_ACT, BWD; else -1 */
    int chunk;          /* the stage's model chunk on its device (bt_schedule_stage_chunk) */
    int turn;           /* devices < stages: position in the device's order; else unused (-1) */
} bt_instr;

typedef struct bt_schedule {
    bt_schedule_kind kind;
    int stages, microbatches;
    int training;       /* 0 for BT_SCHEDULE_STREAM */
    int chunks;         /* model chunks per device (interleaved: v; zbv: 2; else 1) */
    int devices;        /* stages / chunks */
    int *device;        /* [stages] the device stage s runs on (bt_schedule_stage_device) */
    int split_backward; /* BWD is the input gradient only, W instructions the weight gradients */
    int *len;           /* [stages] instructions per stage */
    bt_instr **list;    /* [stages][len[s]] */
    int *slots;         /* [stages] activation slots each stage needs */
} bt_schedule;

/* Whether instructions of this kind touch the micro-batch's activation slot (and so name it). */
static inline int bt_instr_has_slot(bt_instr_kind kind)
{
    return kind == BT_I_RECV_ACT || kind == BT_I_FWD || kind == BT_I_SEND_ACT || kind == BT_I_BWD ||
           kind == BT_I_WGT;
}

/* The most stages and micro-batches a schedule has (and the largest number the notation reads). */
#define BT_SCHEDULE_MAX_SIZE (1 << 24)

/* The schedule kinds this build runs that train (training 1: bt_schedule_training_kinds, in its
 * order) or that only forward (0: stream), at most max of them into out; returns how many. The
 * planner searches these, so a new kind joins the search by being listed there. */
int bt_schedule_kinds(int training, bt_schedule_kind *out, int max);

/* The device logical stage s of p runs on under kind with v chunks per device (p / v devices):
 * interleaved 1F1B s mod (p / v); zbv s for s < p / 2, else p - 1 - s (the V); every other kind s.
 * The one place of that rule: schedules store it (device[]), the planner places stages by it.
 * -1 when s is out of range. */
/* 1 for the kinds that split the backward into B and W (zb-h1, zbv): their slots keep each
 * micro-batch's W stash until W runs. */
int bt_schedule_splits_backward(bt_schedule_kind kind);
int bt_schedule_stage_device(bt_schedule_kind kind, int p, int v, int s);
/* Stage s's model chunk: how many stages before s run on its device (0 .. chunks - 1). */
int bt_schedule_stage_chunk(const bt_schedule *sched, int s);
/* The model chunks per device kind runs when `virtual` says v (0 or 1: the kind's own): zbv 2,
 * interleaved v, others 1. What the loader and the CLI fill in when `virtual` is not given. */
int bt_schedule_default_virtual(bt_schedule_kind kind, int v);

/* Builds the schedule of kind for p stages and m micro-batches (1..BT_SCHEDULE_MAX_SIZE each),
 * one stage per device (interleaved 1F1B with v = 1 is 1F1B). Caller owns *out. */
bt_status bt_schedule_build(bt_schedule_kind kind, int p, int m, bt_schedule **out);
/* The schedule generators, as the planner enumerates them: kind for p logical stages, m
 * micro-batches and v model chunks per device (p / v devices). v > 1 only for interleaved 1F1B,
 * where p must be a multiple of v and m a multiple of the devices (Megatron's groups), and for
 * zbv, which takes exactly v = 2 (p even, any m). Caller owns *out. */
bt_status bt_schedule_build_virtual(bt_schedule_kind kind, int p, int m, int v, bt_schedule **out);
/* Whether bt_schedule_build_virtual accepts (kind, p, m, v): BT_OK, or BT_ERR_INVALID_ARG with the
 * reason ("interleaved-1f1b needs micro-batches in groups of the 2 devices: 5 is not a multiple of
 * 2"). Cheap; builds nothing. */
bt_status bt_schedule_check_shape(bt_schedule_kind kind, int p, int m, int v);
/* The training schedule kinds a planner may choose from, in order of preference for equal cost;
 * *n gets their count. Interleaved needs v >= 2, the others take v = 1. */
const bt_schedule_kind *bt_schedule_training_kinds(int *n);
/* The peak activation slots (micro-batches in flight) each kind holds on stage s of p (v chunks
 * per device; interleaved counts the device's stages together), the published bound the built
 * schedules meet: 1F1B min(p - s, m), ZB-H1 min(p, m) (1F1B's peak, on every stage), GPipe m,
 * interleaved Megatron's warm-up min(2(P - d - 1) + (v - 1)P, mv) + 1 on device d, zbv on device d
 * min(2P - d, m) for its chunk 0 and min(d + 1, m) for its chunk 1 (2P chunk-sized micro-batches
 * per device at the peak, P stages' worth: 1F1B's first stage). */
int bt_schedule_slot_bound(bt_schedule_kind kind, int p, int m, int v, int s);
/* Device d's instructions in the order it runs them: n_out pairs (stage_out[i], index_out[i]).
 * The caller frees both arrays. Turns are trusted to be a valid order (validate first) except
 * that out-of-range or repeated turns are reported as BT_ERR_SCHEDULE. */
bt_status bt_schedule_device_order(const bt_schedule *sched, int d, int *n_out, int **stage_out,
                                   int **index_out);
/* An empty schedule with room for hand-made lists (tests, custom schedules): list[s] gets
 * capacity cap each, len[s] = 0, slots[s] = 0, chunks = 1, devices = p, device[s] = s,
 * split_backward as the kind says. Fill the lists, then give the slots with
 * bt_schedule_assign_slots (or set every slot and slots[s] by hand). */
bt_status bt_schedule_alloc(bt_schedule_kind kind, int p, int m, int training, int cap,
                            bt_schedule **out);
void bt_schedule_destroy(bt_schedule *sched);

/* Gives every instruction its slot, stage by stage in list order: a micro-batch takes the lowest
 * free slot at its first slot instruction and frees it after its last, so slots are reused as soon
 * as it is safe; instructions without a slot get -1. Sets slots[s] to the slots stage s used. The
 * builders use it (GPipe: mb; 1F1B: mb mod min(p-s, m); streaming: 0). Instructions whose
 * micro-batch is out of range are left for the validator to report. */
bt_status bt_schedule_assign_slots(bt_schedule *sched);

/* Proves the schedule can run: every mb has exactly one FWD per stage (and one BWD when training),
 * BWD after its FWD, every RECV pairs with exactly one SEND of the same kind and mb on the
 * neighbouring stage and vice versa, STEP after the stage's last BWD, no cycle of waits (an
 * abstract run with non-blocking sends completes), and slots are used safely (each within
 * slots[s], one per micro-batch, never taken while another micro-batch still holds it). On
 * failure returns BT_ERR_SCHEDULE with a message naming the stage, the index and the instruction
 * ("stage 1, instruction 4 (1B3): ..."). */
bt_status bt_schedule_validate(const bt_schedule *sched);

/* The activation slots stage s needs (slots[s]): the most micro-batches it holds at once,
 * forwarded and not yet backwarded (training), or 1 (streaming). Sizes the activation memory;
 * 0 for a stage out of range. */
int bt_schedule_max_inflight(const bt_schedule *sched, int stage);

/* ---- text (notation.c) ---------------------------------------------------------------------- */

/* The neighbour an instruction of kind on stage s talks to (SEND_ACT, RECV_GRAD: s + 1;
 * RECV_ACT, SEND_GRAD: s - 1); -1 for compute and STEP. */
int bt_instr_peer(bt_instr_kind kind, int stage);
/* "1F3", "0B0", "2S3" (send act), "1R3" (recv act), "2s3"/"2r3" (send/recv grad), "1U" (step):
 * stage, kind letter, micro-batch. The slot and chunk are not written (slots follow from the
 * order, see bt_schedule_assign_slots; chunks are 0). */
void bt_instr_format(int stage, const bt_instr *ins, char *buf, size_t size);
/* Parses one token of that notation at text (leading spaces skipped): *stage, and *ins with the
 * peer its kind talks to, slot -1 and chunk 0; *end (if not NULL) points past the token, which
 * must end at a space or the end of the text. Numbers are decimal digits (no sign), below 2^24.
 * BT_ERR_INVALID_ARG with a message quoting the token when the text is malformed. */
bt_status bt_instr_parse(const char *text, int *stage, bt_instr *ins, const char **end);
/* A hand-made schedule from text: rows[s] is stage s's list, tokens separated by spaces, each
 * naming stage s ("0F0 0S0 0r0 0B0 0U"). Training unless kind is BT_SCHEDULE_STREAM. Slots are
 * assigned with bt_schedule_assign_slots; nothing is validated. Caller owns *out. */
bt_status bt_schedule_parse(bt_schedule_kind kind, int p, int m, const char *const *rows,
                            bt_schedule **out);
/* The grid: one row per stage, one column per time slot of the simulated run with unit costs,
 * compute instructions only, in the notation above ("." for idle). Caller frees the string. */
char *bt_schedule_format_grid(const bt_schedule *sched);

/* ---- simulator ------------------------------------------------------------------------------- */

typedef struct bt_sim_costs {
    const double *fwd;       /* [stages] time of one forward of one micro-batch */
    const double *bwd;       /* [stages] (split_backward: the input-gradient part B) */
    const double *send_act;  /* [stages] time for stage s's activations to reach s+1; NULL: 0 */
    const double *send_grad; /* [stages] time for stage s's gradients to reach s-1; NULL: 0 */
    double step;             /* optimizer step time per stage; 0 allowed */
    const double *wgt;       /* [stages] weight-gradient W; needed when the schedule has W */
    /* The turn hand-off between two stages on one device (interleaved 1F1B: a stage thread wakes
     * its device's next stage thread, which then runs on a cold cache): charged before an
     * instruction whose stage differs from the one its device ran last, as idle time, not busy.
     * Measured by `baton profile` (bt_profile_measure_handoff); 0: free. */
    double handoff;
} bt_sim_costs;

typedef struct bt_sim_result {
    double step_time;        /* makespan */
    double bubble;           /* 1 - sum(busy) / (devices * step_time) */
    double *busy;            /* [stages] compute time per stage */
    int devices;             /* what bubble divides by */
    double **start, **end;   /* [stages][len[s]] per instruction (SEND/RECV: when they complete) */
    int stages;
} bt_sim_result;

/* Runs the schedule on the costs: each device executes its instructions in order (its stage's
 * list, or its turns; a turn that moves to another stage of the device first waits
 * costs->handoff); a RECV completes at the later of its own start and the matching SEND's
 * completion plus the transfer time. Caller frees
 * the result with bt_sim_result_free. */
bt_status bt_simulate(const bt_schedule *sched, const bt_sim_costs *costs, bt_sim_result *out);
void bt_sim_result_free(bt_sim_result *res);

#endif
