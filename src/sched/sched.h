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
 * holds. The model chunk is 0 in every schedule today (interleaved schedules will run several
 * chunks of the model per stage). */
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
    BT_I_STEP = 6       /* optimizer step; mb = -1 */
} bt_instr_kind;

typedef struct bt_instr {
    bt_instr_kind kind;
    int mb;             /* micro-batch, 0-based; -1 for STEP */
    int peer;           /* other stage for SEND/RECV, else -1 */
    int slot;           /* activation slot (0..slots[s]-1) for RECV_ACT, FWD, SEND_ACT, BWD; else -1 */
    int chunk;          /* model chunk on this stage, 0..chunks-1 (0 for STEP) */
} bt_instr;

typedef struct bt_schedule {
    bt_schedule_kind kind;
    int stages, microbatches;
    int training;       /* 0 for BT_SCHEDULE_STREAM */
    int chunks;         /* model chunks per stage: 1 in every schedule kind today */
    int *len;           /* [stages] instructions per stage */
    bt_instr **list;    /* [stages][len[s]] */
    int *slots;         /* [stages] activation slots each stage needs */
} bt_schedule;

/* Whether instructions of this kind touch the micro-batch's activation slot (and so name it). */
static inline int bt_instr_has_slot(bt_instr_kind kind)
{
    return kind == BT_I_RECV_ACT || kind == BT_I_FWD || kind == BT_I_SEND_ACT || kind == BT_I_BWD;
}

/* The most stages and micro-batches a schedule has (and the largest number the notation reads). */
#define BT_SCHEDULE_MAX_SIZE (1 << 24)

/* The schedule kinds this build knows (each has a name, bt_schedule_name), those that train
 * (training 1) or those that only forward (0), in the enum's order, at most max of them into out;
 * returns how many. The planner searches these, so a new kind joins the search by being built
 * here. */
int bt_schedule_kinds(int training, bt_schedule_kind *out, int max);

/* Builds the schedule of kind for p stages and m micro-batches (1..BT_SCHEDULE_MAX_SIZE each).
 * Caller owns *out. */
bt_status bt_schedule_build(bt_schedule_kind kind, int p, int m, bt_schedule **out);
/* An empty schedule with room for hand-made lists (tests, custom schedules): list[s] gets
 * capacity cap each, len[s] = 0, slots[s] = 0, chunks = 1. Fill the lists, then give the slots with
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
    const double *bwd;       /* [stages] */
    const double *send_act;  /* [stages] time for stage s's activations to reach s+1; NULL: 0 */
    const double *send_grad; /* [stages] time for stage s's gradients to reach s-1; NULL: 0 */
    double step;             /* optimizer step time per stage; 0 allowed */
} bt_sim_costs;

typedef struct bt_sim_result {
    double step_time;        /* makespan */
    double bubble;           /* 1 - sum(busy) / (stages * step_time) */
    double *busy;            /* [stages] compute time per stage */
    double **start, **end;   /* [stages][len[s]] per instruction (SEND/RECV: when they complete) */
    int stages;
} bt_sim_result;

/* Runs the schedule on the costs: each stage executes its list in order; a RECV completes at the
 * later of its own start and the matching SEND's completion plus the transfer time. Caller frees
 * the result with bt_sim_result_free. */
bt_status bt_simulate(const bt_schedule *sched, const bt_sim_costs *costs, bt_sim_result *out);
void bt_sim_result_free(bt_sim_result *res);

#endif
