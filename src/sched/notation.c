/* sched/notation.c: the text forms of a schedule. One instruction is written "1F3" (stage 1,
 * forward, micro-batch 3): the letters are F forward, B backward (the input gradient where the
 * backward is split), W weight gradient, S/R send/receive activations, s/r send/receive
 * gradients, and "1U" is stage 1's optimizer step. The stage is the logical stage, as in
 * torch.distributed.pipelining's actions: under interleaved 1F1B on P devices "5F3" is chunk 5 / P
 * of device 5 mod P, so the token shows the chunk. The parser reads the same tokens back (the peer
 * follows from the kind; the slot is assigned from the order, the chunk from the stage), so
 * hand-made schedules in tests and tools are written as one row of tokens per stage. The grid draws
 * a unit-cost simulation: one row per device, one column per time slot.
 *
 * Data flow: the validator and the watchdog name instructions with bt_instr_format, the trace
 * labels its slices with it, `baton schedule` prints the grid; tests build schedules with
 * bt_schedule_parse. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "sched/sched.h"

/* Unit costs the grid is drawn with: one time slot per FWD, BWD and STEP. */
#define GRID_FWD_COST 1.0
#define GRID_BWD_COST 1.0
#define GRID_STEP_COST 1.0
#define GRID_WGT_COST 1.0

/* The letter of each kind, indexed by bt_instr_kind. */
static const char kind_letters[] = "FBSRsrUW";

void bt_instr_format(int stage, const bt_instr *ins, char *buf, size_t size)
{
    if (!buf || size == 0) return;
    if (!ins || (unsigned)ins->kind >= BT_I_KINDS) {
        snprintf(buf, size, "%d?", stage);
        return;
    }
    if (ins->kind == BT_I_STEP) snprintf(buf, size, "%dU", stage);
    else snprintf(buf, size, "%d%c%d", stage, kind_letters[ins->kind], ins->mb);
}

/* Reads decimal digits at *at into *v (below BT_SCHEDULE_MAX_SIZE); 0 if there are none or too many. */
static int read_number(const char **at, int *v)
{
    const char *p = *at;
    long long n = 0;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') {
        n = n * 10 + (*p - '0');
        if (n >= BT_SCHEDULE_MAX_SIZE) return 0;
        p++;
    }
    *v = (int)n;
    *at = p;
    return 1;
}

int bt_instr_peer(bt_instr_kind kind, int s)
{
    switch (kind) {
    case BT_I_SEND_ACT:
    case BT_I_RECV_GRAD: return s + 1;
    case BT_I_RECV_ACT:
    case BT_I_SEND_GRAD: return s - 1;
    default: return -1;
    }
}

bt_status bt_instr_parse(const char *text, int *stage, bt_instr *ins, const char **end)
{
    if (!text || !stage || !ins) return bt_error(BT_ERR_INVALID_ARG, "bt_instr_parse: NULL argument");
    while (*text == ' ') text++;
    const char *at = text;
    size_t token_len = strcspn(text, " ");
    int s = 0;
    bt_instr parsed = {BT_I_FWD, -1, -1, -1, 0, -1};
    if (token_len == 0) return bt_error(BT_ERR_INVALID_ARG, "schedule text: expected an instruction, found the end");
    if (!read_number(&at, &s))
        return bt_error(BT_ERR_INVALID_ARG,
                        "schedule text: \"%.*s\" does not start with a stage number (below %d)",
                        (int)token_len, text, BT_SCHEDULE_MAX_SIZE);
    const char *letter = *at ? strchr(kind_letters, *at) : NULL;
    if (!letter)
        return bt_error(BT_ERR_INVALID_ARG,
                        "schedule text: \"%.*s\" has no instruction letter after the stage (one of "
                        "F B W S R s r U)",
                        (int)token_len, text);
    parsed.kind = (bt_instr_kind)(letter - kind_letters);
    at++;
    if (parsed.kind != BT_I_STEP && !read_number(&at, &parsed.mb))
        return bt_error(BT_ERR_INVALID_ARG,
                        "schedule text: \"%.*s\" has no micro-batch number (below %d) after '%c'",
                        (int)token_len, text, BT_SCHEDULE_MAX_SIZE, *letter);
    if (*at && *at != ' ')
        return bt_error(BT_ERR_INVALID_ARG, "schedule text: \"%.*s\" has unexpected text after \"%.*s\"",
                        (int)token_len, text, (int)(at - text), text);
    parsed.peer = bt_instr_peer(parsed.kind, s);
    *stage = s;
    *ins = parsed;
    if (end) *end = at;
    return BT_OK;
}

/* The number of space-separated tokens in text. */
static int count_tokens(const char *text)
{
    int n = 0;
    for (const char *at = text; *at;) {
        while (*at == ' ') at++;
        if (!*at) break;
        n++;
        at += strcspn(at, " ");
    }
    return n;
}

bt_status bt_schedule_parse(bt_schedule_kind kind, int p, int m, const char *const *rows,
                            bt_schedule **out)
{
    bt_schedule *sched = NULL;
    bt_status st = BT_OK;
    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_parse: out is NULL");
    *out = NULL;
    if (!rows || p < 1) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_parse: no rows");
    int cap = 0;
    for (int s = 0; s < p; s++) {
        if (!rows[s]) return bt_error(BT_ERR_INVALID_ARG, "bt_schedule_parse: row %d is NULL", s);
        int n = count_tokens(rows[s]);
        if (n > cap) cap = n;
    }
    BT_TRY(bt_schedule_alloc(kind, p, m, kind != BT_SCHEDULE_STREAM, cap, &sched));
    for (int s = 0; s < p; s++) {
        const char *at = rows[s];
        while (*at == ' ') at++;
        while (*at) {
            int stage;
            bt_instr *ins = &sched->list[s][sched->len[s]];
            st = bt_instr_parse(at, &stage, ins, &at);
            if (st != BT_OK) {
                st = bt_error_context(st, "stage %d, token %d", s, sched->len[s]);
                goto fail;
            }
            if (stage != s) {
                char token[48];
                bt_instr_format(stage, ins, token, sizeof token);
                st = bt_error(BT_ERR_INVALID_ARG,
                              "stage %d, token %d: \"%s\" names stage %d in the row of stage %d", s,
                              sched->len[s], token, stage, s);
                goto fail;
            }
            sched->len[s]++;
            while (*at == ' ') at++;
        }
    }
    BT_TRY_GOTO(st, bt_schedule_assign_slots(sched), fail);
    *out = sched;
    return BT_OK;

fail:
    bt_schedule_destroy(sched);
    return st;
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
    return kind == BT_I_FWD || kind == BT_I_BWD || kind == BT_I_STEP || kind == BT_I_WGT;
}

/* Layout (columns are time slots of a run with F = B = W = STEP = 1 and instant transfers; every
 * cell is padded to one width and the last cell of a row is not padded; one row per device, "stage"
 * where each device runs one stage):
 *   slot     0   1   2   3   4   5   6
 *   stage 0  0F0 0F1 .   0B0 .   0B1 0U
 *   stage 1  .   1F0 1B0 1F1 1B1 1U  .
 * Interleaved and ZBV rows are devices ("device 0  0F0 0F1 2F0 2F1 ...": under interleaved with 2
 * devices stage 2 is device 0's chunk 1; under zbv stage 3 is). */
char *bt_schedule_format_grid(const bt_schedule *sched)
{
    bt_sim_result sim = {0};
    double *fwd = NULL, *bwd = NULL, *wgt = NULL;
    const bt_instr **cell = NULL;
    int *cell_stage = NULL;
    char *text = NULL;
    char token[48];

    if (!sched) {
        bt_error(BT_ERR_INVALID_ARG, "bt_schedule_format_grid: schedule is NULL");
        return NULL;
    }
    int p = sched->stages, D = sched->devices > 0 ? sched->devices : p;
    fwd = malloc((size_t)p * sizeof *fwd);
    bwd = malloc((size_t)p * sizeof *bwd);
    wgt = malloc((size_t)p * sizeof *wgt);
    if (!fwd || !bwd || !wgt) goto nomem;
    for (int s = 0; s < p; s++) {
        fwd[s] = GRID_FWD_COST;
        bwd[s] = GRID_BWD_COST;
        wgt[s] = GRID_WGT_COST;
    }
    bt_sim_costs costs = {.fwd = fwd, .bwd = bwd, .wgt = wgt, .step = GRID_STEP_COST};
    if (bt_simulate(sched, &costs, &sim) != BT_OK) goto fail;

    int slots = (int)(sim.step_time + 0.5);
    int width = decimal_digits(slots > 0 ? slots - 1 : 0);
    for (int s = 0; s < p; s++)
        for (int i = 0; i < sched->len[s]; i++) {
            bt_instr_format(s, &sched->list[s][i], token, sizeof token);
            int n = (int)strlen(token);
            if (is_compute(sched->list[s][i].kind) && n > width) width = n;
        }

    /* cell[d * slots + t]: the compute instruction device d starts in slot t (of cell_stage), or NULL. */
    size_t cells = (size_t)D * (size_t)(slots > 0 ? slots : 1);
    cell = calloc(cells, sizeof *cell);
    cell_stage = calloc(cells, sizeof *cell_stage);
    if (!cell || !cell_stage) goto nomem;
    for (int s = 0; s < p; s++)
        for (int i = 0; i < sched->len[s]; i++) {
            if (!is_compute(sched->list[s][i].kind)) continue;
            int t = (int)(sim.start[s][i] + 0.5);
            if (t >= 0 && t < slots) {
                cell[(size_t)sched->device[s] * slots + t] = &sched->list[s][i];
                cell_stage[(size_t)sched->device[s] * slots + t] = s;
            }
        }

    const char *row_name = D == p ? "stage " : "device ";
    int label = (int)strlen(row_name) + decimal_digits(D - 1);
    size_t row_bytes = (size_t)label + 2 + (size_t)slots * (size_t)(width + 1) + 1;
    text = malloc(row_bytes * (size_t)(D + 1) + 1);
    if (!text) goto nomem;
    char *at = text, *text_end = text + row_bytes * (size_t)(D + 1) + 1;
    at += snprintf(at, (size_t)(text_end - at), "%-*s ", label, "slot");
    for (int t = 0; t < slots; t++)
        at += snprintf(at, (size_t)(text_end - at), " %-*d", t == slots - 1 ? 0 : width, t);
    *at++ = '\n';
    for (int d = 0; d < D; d++) {
        int digits = label - (int)strlen(row_name);
        at += snprintf(at, (size_t)(text_end - at), "%s%-*d ", row_name, digits, d);
        for (int t = 0; t < slots; t++) {
            const bt_instr *ins = cell[(size_t)d * slots + t];
            if (ins) bt_instr_format(cell_stage[(size_t)d * slots + t], ins, token, sizeof token);
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
    free(cell_stage);
    free(cell);
    bt_sim_result_free(&sim);
    free(fwd);
    free(bwd);
    free(wgt);
    return text;
}
