/* tests/test_sched.c: schedules, validator, simulator and grid (src/sched/).
 *
 * References are independent of the code under test: instruction lists and grids written out by
 * hand, the closed-form bubble (p-1)/(m+p-1) of fill-drain pipelines with equal costs, hand-worked
 * timings of small unequal-cost runs, broken schedules whose exact validator message is known, and
 * the slot of every micro-batch as the executor computed it before schedules named slots
 * (mb mod the stage's in-flight count). Hand-made schedules are written in the bt_instr_format
 * notation, one string per stage, and read with bt_schedule_parse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bt_test.h"
#include "sched/sched.h"

/* ---- helpers --------------------------------------------------------------------------------- */

/* A hand-made schedule; rows[s] is stage s in the notation (slots assigned from the order). */
static bt_schedule *make(int p, int m, int training, const char *const *rows)
{
    bt_schedule *sched = NULL;
    bt_schedule_kind kind = training ? BT_SCHEDULE_1F1B : BT_SCHEDULE_STREAM;
    bt_status st = bt_schedule_parse(kind, p, m, rows, &sched);
    if (st != BT_OK) printf("\n  parse failed: %s\n", bt_last_error());
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    return sched;
}

/* Stage s's list in the notation, space-separated. */
static void stage_text(const bt_schedule *sched, int s, char *buf, size_t size)
{
    char token[32];
    buf[0] = '\0';
    for (int i = 0; i < sched->len[s]; i++) {
        bt_instr_format(s, &sched->list[s][i], token, sizeof token);
        if (i > 0) strncat(buf, " ", size - strlen(buf) - 1);
        strncat(buf, token, size - strlen(buf) - 1);
    }
}

static void assert_lists(bt_schedule_kind kind, int p, int m, const char *const *expected)
{
    bt_schedule *sched = NULL;
    char text[4096];
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(kind, p, m, &sched), BT_OK);
    CU_ASSERT_EQUAL(sched->stages, p);
    CU_ASSERT_EQUAL(sched->microbatches, m);
    for (int s = 0; s < p; s++) {
        stage_text(sched, s, text, sizeof text);
        if (strcmp(text, expected[s]) != 0)
            printf("\n  stage %d\n  got  %s\n  want %s\n", s, text, expected[s]);
        CU_ASSERT_STRING_EQUAL(text, expected[s]);
    }
    bt_schedule_destroy(sched);
}

/* Validates and expects exactly this message (or BT_OK when message is NULL). */
static void assert_validation(const bt_schedule *sched, const char *message)
{
    bt_status st = bt_schedule_validate(sched);
    if (!message) {
        if (st != BT_OK) printf("\n  unexpected failure: %s\n", bt_last_error());
        CU_ASSERT_EQUAL(st, BT_OK);
        return;
    }
    CU_ASSERT_EQUAL(st, BT_ERR_SCHEDULE);
    if (strcmp(bt_last_error(), message) != 0)
        printf("\n  got  %s\n  want %s\n", bt_last_error(), message);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), message);
}

static void assert_hand_made_fails(int p, int m, int training, const char *const *rows,
                                   const char *message)
{
    bt_schedule *sched = make(p, m, training, rows);
    assert_validation(sched, message);
    bt_schedule_destroy(sched);
}

static int find_instr(const bt_schedule *sched, int s, bt_instr_kind kind, int mb)
{
    for (int i = 0; i < sched->len[s]; i++)
        if (sched->list[s][i].kind == kind && sched->list[s][i].mb == mb) return i;
    return -1;
}

static void remove_instr(bt_schedule *sched, int s, int i)
{
    memmove(&sched->list[s][i], &sched->list[s][i + 1],
            (size_t)(sched->len[s] - i - 1) * sizeof sched->list[s][i]);
    sched->len[s]--;
}

static bt_status simulate_equal(const bt_schedule *sched, double f, double b, bt_sim_result *res)
{
    double fwd[16], bwd[16];
    for (int s = 0; s < sched->stages; s++) {
        fwd[s] = f;
        bwd[s] = b;
    }
    bt_sim_costs costs = {.fwd = fwd, .bwd = bwd, .step = 0.0};
    return bt_simulate(sched, &costs, res);
}

/* ---- builders -------------------------------------------------------------------------------- */

static void test_notation(void)
{
    char buf[32];
    const struct {
        int stage;
        bt_instr ins;
        const char *text;
    } cases[] = {
        {1, {BT_I_FWD, 3, -1}, "1F3"},       {0, {BT_I_BWD, 0, -1}, "0B0"},
        {2, {BT_I_SEND_ACT, 3, 3}, "2S3"},   {1, {BT_I_RECV_ACT, 3, 0}, "1R3"},
        {2, {BT_I_SEND_GRAD, 3, 1}, "2s3"},  {2, {BT_I_RECV_GRAD, 3, 3}, "2r3"},
        {1, {BT_I_STEP, -1, -1}, "1U"},      {12, {BT_I_FWD, 345, -1}, "12F345"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bt_instr_format(cases[i].stage, &cases[i].ins, buf, sizeof buf);
        CU_ASSERT_STRING_EQUAL(buf, cases[i].text);
    }
    bt_instr_format(7, &cases[7].ins, buf, 4); /* truncates, stays terminated */
    CU_ASSERT_STRING_EQUAL(buf, "7F3");
}

static void test_notation_parse(void)
{
    /* Every token the formatter writes reads back as the same stage, kind, micro-batch and peer;
     * the slot is left to bt_schedule_assign_slots (-1) and the chunk is 0. */
    const struct {
        int stage;
        bt_instr ins;
    } cases[] = {
        {1, {BT_I_FWD, 3, -1, -1, 0, -1}},       {0, {BT_I_BWD, 0, -1, -1, 0, -1}},
        {2, {BT_I_SEND_ACT, 3, 3, -1, 0, -1}},   {1, {BT_I_RECV_ACT, 3, 0, -1, 0, -1}},
        {2, {BT_I_SEND_GRAD, 3, 1, -1, 0, -1}},  {2, {BT_I_RECV_GRAD, 3, 3, -1, 0, -1}},
        {1, {BT_I_STEP, -1, -1, -1, 0, -1}},     {12, {BT_I_FWD, 345, -1, -1, 0, -1}},
        {16777215, {BT_I_BWD, 16777215, -1, -1, 0, -1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[48];
        int stage = -7;
        bt_instr ins = {BT_I_STEP, 9, 9, 9, 9, -1};
        const char *end = NULL;
        bt_instr_format(cases[i].stage, &cases[i].ins, text, sizeof text);
        strcat(text, "  next");
        CU_ASSERT_EQUAL_FATAL(bt_instr_parse(text, &stage, &ins, &end), BT_OK);
        CU_ASSERT_EQUAL(stage, cases[i].stage);
        CU_ASSERT_EQUAL(ins.kind, cases[i].ins.kind);
        CU_ASSERT_EQUAL(ins.mb, cases[i].ins.mb);
        CU_ASSERT_EQUAL(ins.peer, cases[i].ins.peer);
        CU_ASSERT_EQUAL(ins.slot, -1);
        CU_ASSERT_EQUAL(ins.chunk, 0);
        CU_ASSERT_STRING_EQUAL(end, "  next");
    }
    int stage;
    bt_instr ins;
    CU_ASSERT_EQUAL(bt_instr_parse("   0B2", &stage, &ins, NULL), BT_OK); /* leading spaces */
    CU_ASSERT_EQUAL(ins.mb, 2);
}

static void test_notation_malformed(void)
{
    const struct {
        const char *text, *message;
    } cases[] = {
        {"", "schedule text: expected an instruction, found the end"},
        {"   ", "schedule text: expected an instruction, found the end"},
        {"F3", "schedule text: \"F3\" does not start with a stage number (below 16777216)"},
        {"-1F3", "schedule text: \"-1F3\" does not start with a stage number (below 16777216)"},
        {"16777216F0",
         "schedule text: \"16777216F0\" does not start with a stage number (below 16777216)"},
        {"1X3 1F0", "schedule text: \"1X3\" has no instruction letter after the stage (one of F "
                    "B W S R s r U)"},
        {"1", "schedule text: \"1\" has no instruction letter after the stage (one of F B W S R s r "
              "U)"},
        {"1F", "schedule text: \"1F\" has no micro-batch number (below 16777216) after 'F'"},
        {"1F-3", "schedule text: \"1F-3\" has no micro-batch number (below 16777216) after 'F'"},
        {"1F99999999999",
         "schedule text: \"1F99999999999\" has no micro-batch number (below 16777216) after 'F'"},
        {"1F3x", "schedule text: \"1F3x\" has unexpected text after \"1F3\""},
        {"1U3", "schedule text: \"1U3\" has unexpected text after \"1U\""},
        {"1F3,1B3", "schedule text: \"1F3,1B3\" has unexpected text after \"1F3\""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int stage = 5;
        bt_instr ins = {BT_I_BWD, 4, -1, -1, 0, -1};
        CU_ASSERT_EQUAL(bt_instr_parse(cases[c].text, &stage, &ins, NULL), BT_ERR_INVALID_ARG);
        if (strcmp(bt_last_error(), cases[c].message) != 0)
            printf("\n  got  %s\n  want %s\n", bt_last_error(), cases[c].message);
        CU_ASSERT_STRING_EQUAL(bt_last_error(), cases[c].message);
        CU_ASSERT_EQUAL(stage, 5); /* untouched on failure */
        CU_ASSERT_EQUAL(ins.kind, BT_I_BWD);
    }

    /* Whole schedules: the failing row and token are named; nothing is returned. */
    bt_schedule *sched = (bt_schedule *)&sched;
    const char *const wrong_stage[] = {"0F0 0B0 0U", "1F0 0B0 1U"};
    CU_ASSERT_EQUAL(bt_schedule_parse(BT_SCHEDULE_1F1B, 2, 1, wrong_stage, &sched),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(sched);
    CU_ASSERT_STRING_EQUAL(bt_last_error(),
                           "stage 1, token 1: \"0B0\" names stage 0 in the row of stage 1");
    const char *const bad_token[] = {"0F0 0Q0"};
    CU_ASSERT_EQUAL(bt_schedule_parse(BT_SCHEDULE_1F1B, 1, 1, bad_token, &sched),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "stage 0, token 1: schedule text: \"0Q0\" has no "
                                            "instruction letter after the stage (one of F B W S R "
                                            "s r U)");
    const char *const one_row[] = {"0F0"};
    CU_ASSERT_EQUAL(bt_schedule_parse(BT_SCHEDULE_1F1B, 0, 1, one_row, &sched),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_schedule_parse(BT_SCHEDULE_1F1B, 1, 0, one_row, &sched),
                    BT_ERR_INVALID_ARG);
    /* An empty row is an empty stage (the validator says what it lacks). */
    const char *const empty[] = {""};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(BT_SCHEDULE_STREAM, 1, 1, empty, &sched), BT_OK);
    CU_ASSERT_EQUAL(sched->len[0], 0);
    CU_ASSERT_EQUAL(sched->training, 0);
    assert_validation(sched, "stage 0: no forward of micro-batch 0");
    bt_schedule_destroy(sched);
}

static void test_parse_round_trips_built_schedules(void)
{
    /* Each built schedule written as text and read back is the same schedule, slots included
     * (the parser assigns them as the builders do). */
    const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B, BT_SCHEDULE_STREAM,
                                      BT_SCHEDULE_ZB_H1};
    for (int k = 0; k < 4; k++)
        for (int p = 1; p <= 6; p++)
            for (int m = 1; m <= 9; m++) {
                bt_schedule *built = NULL, *parsed = NULL;
                char text[6][2048];
                const char *rows[6];
                CU_ASSERT_EQUAL_FATAL(bt_schedule_build(kinds[k], p, m, &built), BT_OK);
                for (int s = 0; s < p; s++) {
                    stage_text(built, s, text[s], sizeof text[s]);
                    rows[s] = text[s];
                }
                CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(kinds[k], p, m, rows, &parsed), BT_OK);
                CU_ASSERT_EQUAL(parsed->training, built->training);
                CU_ASSERT_EQUAL(parsed->split_backward, built->split_backward);
                CU_ASSERT_EQUAL(parsed->chunks, 1);
                for (int s = 0; s < p; s++) {
                    CU_ASSERT_EQUAL_FATAL(parsed->len[s], built->len[s]);
                    CU_ASSERT_EQUAL(parsed->slots[s], built->slots[s]);
                    for (int i = 0; i < built->len[s]; i++) {
                        const bt_instr *a = &built->list[s][i], *b = &parsed->list[s][i];
                        CU_ASSERT(a->kind == b->kind && a->mb == b->mb && a->peer == b->peer &&
                                  a->slot == b->slot && a->chunk == b->chunk);
                    }
                }
                bt_schedule_destroy(parsed);
                bt_schedule_destroy(built);
            }
}

static void test_1f1b_lists(void)
{
    /* p = 3, m = 4: stage s warms up with min(p-s-1, m) forwards, then F/B pairs, then drains. */
    const char *const p3m4[] = {
        "0F0 0S0 0F1 0S1 0F2 0S2 0r0 0B0 0F3 0S3 0r1 0B1 0r2 0B2 0r3 0B3 0U",
        ("1R0 1F0 1S0 1R1 1F1 1S1 1r0 1B0 1s0 1R2 1F2 1S2 1r1 1B1 1s1 1R3 1F3 1S3 1r2 1B2 1s2 "
         "1r3 1B3 1s3 1U"),
        "2R0 2F0 2B0 2s0 2R1 2F1 2B1 2s1 2R2 2F2 2B2 2s2 2R3 2F3 2B3 2s3 2U",
    };
    assert_lists(BT_SCHEDULE_1F1B, 3, 4, p3m4);
    /* Fewer micro-batches than stages: the warm-up is cut to m. */
    const char *const p3m1[] = {
        "0F0 0S0 0r0 0B0 0U",
        "1R0 1F0 1S0 1r0 1B0 1s0 1U",
        "2R0 2F0 2B0 2s0 2U",
    };
    assert_lists(BT_SCHEDULE_1F1B, 3, 1, p3m1);
    const char *const p1m2[] = {"0F0 0B0 0F1 0B1 0U"};
    assert_lists(BT_SCHEDULE_1F1B, 1, 2, p1m2);
}

static void test_gpipe_lists(void)
{
    /* All forwards, then all backwards in ascending micro-batch order, then the step. */
    const char *const p2m2[] = {
        "0F0 0S0 0F1 0S1 0r0 0B0 0r1 0B1 0U",
        "1R0 1F0 1R1 1F1 1B0 1s0 1B1 1s1 1U",
    };
    assert_lists(BT_SCHEDULE_GPIPE, 2, 2, p2m2);
    const char *const p3m2[] = {
        "0F0 0S0 0F1 0S1 0r0 0B0 0r1 0B1 0U",
        "1R0 1F0 1S0 1R1 1F1 1S1 1r0 1B0 1s0 1r1 1B1 1s1 1U",
        "2R0 2F0 2R1 2F1 2B0 2s0 2B1 2s1 2U",
    };
    assert_lists(BT_SCHEDULE_GPIPE, 3, 2, p3m2);
}

static void test_stream_lists(void)
{
    const char *const p3m2[] = {"0F0 0S0 0F1 0S1", "1R0 1F0 1S0 1R1 1F1 1S1", "2R0 2F0 2R1 2F1"};
    assert_lists(BT_SCHEDULE_STREAM, 3, 2, p3m2);
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_STREAM, 2, 2, &sched), BT_OK);
    CU_ASSERT_EQUAL(sched->training, 0);
    bt_schedule_destroy(sched);
}

static void test_build_rejects_bad_sizes(void)
{
    bt_schedule *sched = (bt_schedule *)&sched; /* must be reset to NULL on failure */
    CU_ASSERT_EQUAL(bt_schedule_build(BT_SCHEDULE_1F1B, 0, 4, &sched), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(sched);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "0 stages"));
    CU_ASSERT_EQUAL(bt_schedule_build(BT_SCHEDULE_GPIPE, 2, 0, &sched), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_schedule_build((bt_schedule_kind)9, 2, 2, &sched), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_schedule_alloc(BT_SCHEDULE_1F1B, 2, 2, 1, -1, &sched), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_schedule_alloc(BT_SCHEDULE_1F1B, 2, 2, 1, 0, &sched), BT_OK);
    CU_ASSERT_EQUAL(sched->len[0], 0);
    CU_ASSERT_EQUAL(sched->len[1], 0);
    bt_schedule_destroy(sched);
    bt_schedule_destroy(NULL);
}

static void test_built_schedules_validate(void)
{
    const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B, BT_SCHEDULE_STREAM,
                                      BT_SCHEDULE_ZB_H1};
    for (int k = 0; k < 4; k++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 16; m++) {
                bt_schedule *sched = NULL;
                CU_ASSERT_EQUAL_FATAL(bt_schedule_build(kinds[k], p, m, &sched), BT_OK);
                assert_validation(sched, NULL);
                bt_schedule_destroy(sched);
            }
}

static void test_max_inflight(void)
{
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++) {
            bt_schedule *f1b = NULL, *gpipe = NULL, *stream = NULL;
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, p, m, &f1b), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_GPIPE, p, m, &gpipe), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_STREAM, p, m, &stream), BT_OK);
            for (int s = 0; s < p; s++) {
                int want = p - s < m ? p - s : m;
                CU_ASSERT_EQUAL(bt_schedule_max_inflight(f1b, s), want);
                CU_ASSERT_EQUAL(bt_schedule_max_inflight(gpipe, s), m);
                CU_ASSERT_EQUAL(bt_schedule_max_inflight(stream, s), 1);
            }
            CU_ASSERT_EQUAL(bt_schedule_max_inflight(f1b, p), 0);
            CU_ASSERT_EQUAL(bt_schedule_max_inflight(f1b, -1), 0);
            bt_schedule_destroy(f1b);
            bt_schedule_destroy(gpipe);
            bt_schedule_destroy(stream);
        }
    /* Counted from the list, not from the kind: this stage holds at most 2. */
    const char *const rows[] = {"0F0 0B0 0F1 0F2 0B1 0B2 0U"};
    bt_schedule *sched = make(1, 3, 1, rows);
    CU_ASSERT_EQUAL(bt_schedule_max_inflight(sched, 0), 2);
    bt_schedule_destroy(sched);
}

static void test_slots_match_the_old_rule(void)
{
    /* Before schedules named slots, the executor put micro-batch mb in slot mb mod n on every
     * stage, n = the stage's in-flight count: min(p-s, m) for 1F1B, m for GPipe, 1 for streaming.
     * The built schedules must name exactly those slots (so results stay bit-identical); every
     * other instruction names none, and every chunk is 0. */
    const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B, BT_SCHEDULE_STREAM};
    for (int k = 0; k < 3; k++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 16; m++) {
                bt_schedule *sched = NULL;
                CU_ASSERT_EQUAL_FATAL(bt_schedule_build(kinds[k], p, m, &sched), BT_OK);
                for (int s = 0; s < p; s++) {
                    int n = kinds[k] == BT_SCHEDULE_GPIPE  ? m
                            : kinds[k] == BT_SCHEDULE_1F1B ? (p - s < m ? p - s : m)
                                                           : 1;
                    CU_ASSERT_EQUAL(sched->slots[s], n);
                    for (int i = 0; i < sched->len[s]; i++) {
                        const bt_instr *ins = &sched->list[s][i];
                        int want = bt_instr_has_slot(ins->kind) ? ins->mb % n : -1;
                        if (ins->slot != want)
                            printf("\n  kind %d p %d m %d stage %d instruction %d: slot %d, want %d\n",
                                   (int)kinds[k], p, m, s, i, ins->slot, want);
                        CU_ASSERT_EQUAL(ins->slot, want);
                        CU_ASSERT_EQUAL(ins->chunk, 0);
                    }
                }
                bt_schedule_destroy(sched);
            }
}

/* Gives every slot instruction of micro-batch mb on stage s the slot k. */
static void move_to_slot(bt_schedule *sched, int s, int mb, int k)
{
    for (int i = 0; i < sched->len[s]; i++)
        if (sched->list[s][i].mb == mb && bt_instr_has_slot(sched->list[s][i].kind))
            sched->list[s][i].slot = k;
}

static void test_validate_slot_reused_too_early(void)
{
    /* 1F1B p = 2, m = 4, stage 0 (2 slots):
     *   0F0 0S0 0F1 0S1 0r0 0B0 0F2 0S2 0r1 0B1 0F3 0S3 0r2 0B2 0r3 0B3 0U
     * mb 2 may take slot 0 (freed by 0B0) but not slot 1, which mb 1 holds until 0B1. */
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 4, &sched), BT_OK);
    move_to_slot(sched, 0, 2, 1);
    assert_validation(sched, "stage 0, instruction 6 (0F2): forward of micro-batch 2 takes slot 1 "
                             "while micro-batch 1 holds it (until instruction 9, 0B1)");
    move_to_slot(sched, 0, 2, 0);
    assert_validation(sched, NULL);
    bt_schedule_destroy(sched);

    /* A receive writes the slot too: on stage 1 of 1F1B p = 3, m = 4 (2 slots) mb 2's receive
     * (1R2, instruction 9) comes before mb 1's backward (1B1, instruction 13). */
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 3, 4, &sched), BT_OK);
    move_to_slot(sched, 1, 2, 1);
    assert_validation(sched, "stage 1, instruction 9 (1R2): receive of activations of "
                             "micro-batch 2 takes slot 1 while micro-batch 1 holds it (until "
                             "instruction 13, 1B1)");
    bt_schedule_destroy(sched);

    /* Streaming: a slot is needed until its micro-batch was sent on. */
    const char *const rows[] = {"0F0 0F1 0S0 0S1", "1R0 1F0 1R1 1F1"};
    sched = make(2, 2, 0, rows);
    CU_ASSERT_EQUAL(sched->slots[0], 2);
    assert_validation(sched, NULL);
    move_to_slot(sched, 0, 1, 0);
    assert_validation(sched, "stage 0, instruction 1 (0F1): forward of micro-batch 1 takes slot 0 "
                             "while micro-batch 0 holds it (until instruction 2, 0S0)");
    bt_schedule_destroy(sched);

    /* GPipe with fewer slots than micro-batches in flight. */
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_GPIPE, 1, 3, &sched), BT_OK);
    move_to_slot(sched, 0, 2, 0);
    sched->slots[0] = 2;
    assert_validation(sched, "stage 0, instruction 2 (0F2): forward of micro-batch 2 takes slot 0 "
                             "while micro-batch 0 holds it (until instruction 3, 0B0)");
    bt_schedule_destroy(sched);
}

static void test_validate_slot_fields(void)
{
    /* 1F1B p = 2, m = 2, stage 1 (1 slot): 1R0 1F0 1B0 1s0 1R1 1F1 1B1 1s1 1U */
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 2, &sched), BT_OK);
    CU_ASSERT_EQUAL(sched->slots[1], 1);
    sched->list[1][5].slot = 1;
    assert_validation(sched, "stage 1, instruction 5 (1F1): forward of micro-batch 1 names slot 1 "
                             "(the stage has 1: 0..0)");
    sched->list[1][5].slot = -1;
    assert_validation(sched, "stage 1, instruction 5 (1F1): forward of micro-batch 1 names slot -1 "
                             "(the stage has 1: 0..0)");
    sched->list[1][5].slot = 0;
    sched->slots[1] = 2;
    sched->list[1][6].slot = 1; /* 1B1 in another slot than 1R1 and 1F1 */
    assert_validation(sched, "stage 1, instruction 6 (1B1): backward of micro-batch 1 names slot 1, "
                             "but the micro-batch holds slot 0");
    sched->list[1][6].slot = 0;
    assert_validation(sched, NULL); /* more slots than needed is allowed */
    sched->list[1][3].slot = 0;     /* 1s0 touches no slot */
    assert_validation(sched, "stage 1, instruction 3 (1s0): send of gradients names slot 0 (must "
                             "be -1)");
    sched->list[1][3].slot = -1;
    sched->slots[1] = 3;
    assert_validation(sched, "stage 1 states 3 activation slots (must be 0..2, its micro-batches)");
    sched->slots[1] = 1;
    sched->list[0][0].chunk = 1;
    assert_validation(sched, "stage 0, instruction 0 (0F0): model chunk 1 out of range (the "
                             "schedule has 1 per stage)");
    sched->list[0][0].chunk = 0;
    assert_validation(sched, NULL);
    bt_schedule_destroy(sched);

    /* A hand-made schedule from bt_schedule_alloc names no slots until they are assigned. */
    CU_ASSERT_EQUAL_FATAL(bt_schedule_alloc(BT_SCHEDULE_STREAM, 1, 1, 0, 4, &sched), BT_OK);
    sched->list[0][sched->len[0]++] = (bt_instr){BT_I_FWD, 0, -1, -1, 0, -1};
    assert_validation(sched, "stage 0, instruction 0 (0F0): forward of micro-batch 0 names slot -1 "
                             "(the stage has 0: 0..-1)");
    CU_ASSERT_EQUAL(bt_schedule_assign_slots(sched), BT_OK);
    CU_ASSERT_EQUAL(sched->list[0][0].slot, 0);
    CU_ASSERT_EQUAL(sched->slots[0], 1);
    assert_validation(sched, NULL);
    bt_schedule_destroy(sched);
    CU_ASSERT_EQUAL(bt_schedule_assign_slots(NULL), BT_ERR_INVALID_ARG);
}

/* ---- validator ------------------------------------------------------------------------------- */

static void test_validate_missing_send(void)
{
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 4, &sched), BT_OK);
    int i = find_instr(sched, 0, BT_I_SEND_ACT, 3);
    CU_ASSERT_FATAL(i >= 0);
    remove_instr(sched, 0, i);
    /* Stage 1 (last) runs R F B s per micro-batch: 1R3 is instruction 12. */
    assert_validation(sched, "stage 1, instruction 12 (1R3): receive of activations for "
                             "micro-batch 3 has no matching send on stage 0");
    bt_sim_result res;
    CU_ASSERT_EQUAL(simulate_equal(sched, 1, 1, &res), BT_ERR_SCHEDULE);
    bt_schedule_destroy(sched);

    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_GPIPE, 3, 2, &sched), BT_OK);
    i = find_instr(sched, 2, BT_I_SEND_GRAD, 1);
    CU_ASSERT_FATAL(i >= 0);
    remove_instr(sched, 2, i);
    assert_validation(sched, "stage 1, instruction 9 (1r1): receive of gradients for micro-batch 1 "
                             "has no matching send on stage 2");
    bt_schedule_destroy(sched);
}

static void test_validate_missing_receive(void)
{
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 3, 4, &sched), BT_OK);
    int i = find_instr(sched, 1, BT_I_RECV_ACT, 2);
    CU_ASSERT_FATAL(i >= 0);
    remove_instr(sched, 1, i);
    /* Stage 1 was "1R0 1F0 1S0 1R1 1F1 1S1 1r0 1B0 1s0 1R2 1F2 ...": 1F2 moves up to index 9. */
    assert_validation(sched, "stage 1, instruction 9 (1F2): forward of micro-batch 2 has no "
                             "receive of its activations from stage 0");
    bt_schedule_destroy(sched);

    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 1, &sched), BT_OK);
    remove_instr(sched, 0, find_instr(sched, 0, BT_I_RECV_GRAD, 0));
    assert_validation(sched, "stage 0, instruction 2 (0B0): backward of micro-batch 0 has no "
                             "receive of its gradients from stage 1");
    bt_schedule_destroy(sched);
}

static void test_validate_deadlock_two_stages(void)
{
    /* Stage 0 waits for gradients before it ever sends activations. */
    const char *const rows[] = {"0r0 0F0 0S0 0B0 0U", "1R0 1F0 1B0 1s0 1U"};
    assert_hand_made_fails(2, 1, 1, rows,
                           "wait cycle: stage 0 waits at 0r0 (instruction 0) for 1s0, stage 1 "
                           "waits at 1R0 (instruction 0) for 0S0");
}

static void test_validate_deadlock_names_all_stuck_stages(void)
{
    /* Stages 1 and 2 wait for each other; stage 0 is stuck behind them. */
    const char *const rows[] = {
        "0F0 0S0 0r0 0B0 0U",
        "1R0 1r0 1F0 1S0 1B0 1s0 1U",
        "2R0 2F0 2B0 2s0 2U",
    };
    assert_hand_made_fails(3, 1, 1, rows,
                           "wait cycle: stage 1 waits at 1r0 (instruction 1) for 2s0, stage 2 "
                           "waits at 2R0 (instruction 0) for 1S0; also stuck: stage 0 waits at "
                           "0r0 (instruction 2) for 1s0");
}

static void test_validate_crossed_receives_deadlock(void)
{
    /* Every instruction is in a legal order on its own stage, but stage 0 wants gradient 1 before
     * it sends activations 1, and stage 1 wants activations 1 before it sends gradient 1. */
    const char *const rows[] = {
        "0F0 0S0 0r1 0F1 0S1 0r0 0B0 0B1 0U",
        "1R0 1F0 1R1 1F1 1B1 1s1 1B0 1s0 1U",
    };
    bt_schedule *sched = make(2, 2, 1, rows);
    assert_validation(sched, "wait cycle: stage 0 waits at 0r1 (instruction 2) for 1s1, stage 1 "
                             "waits at 1R1 (instruction 2) for 0S1");
    bt_schedule_destroy(sched);
}

static void test_validate_ordering_errors(void)
{
    struct {
        int p, m, training;
        const char *rows[2];
        const char *message;
    } cases[] = {
        {1,
         1,
         1,
         {"0F0 0F0 0B0 0U"},
         "stage 0, instruction 1 (0F0): second forward for micro-batch 0 (the first is instruction "
         "0)"},
        {1, 2, 1, {"0F0 0B0 0B1 0U"}, "stage 0: no forward of micro-batch 1"},
        {1, 2, 1, {"0F0 0F1 0B0 0U"}, "stage 0: no backward of micro-batch 1"},
        {1,
         1,
         1,
         {"0B0 0F0 0U"},
         "stage 0, instruction 0 (0B0): backward of micro-batch 0 before its forward (instruction "
         "1)"},
        {2,
         1,
         1,
         {"0F0 0S0 0r0 0B0 0U", "1F0 1R0 1B0 1s0 1U"},
         "stage 1, instruction 0 (1F0): forward of micro-batch 0 before the receive of its "
         "activations (instruction 1)"},
        {2,
         1,
         1,
         {"0S0 0F0 0r0 0B0 0U", "1R0 1F0 1B0 1s0 1U"},
         "stage 0, instruction 0 (0S0): send of activations for micro-batch 0 before its forward "
         "(instruction 1)"},
        {2,
         1,
         1,
         {"0F0 0S0 0B0 0r0 0U", "1R0 1F0 1B0 1s0 1U"},
         "stage 0, instruction 2 (0B0): backward of micro-batch 0 before the receive of its "
         "gradients (instruction 3)"},
        {2,
         1,
         1,
         {"0F0 0S0 0r0 0B0 0U", "1R0 1F0 1s0 1B0 1U"},
         "stage 1, instruction 2 (1s0): send of gradients for micro-batch 0 before its backward"},
        {2,
         1,
         1,
         {"0F0 0S0 0S0 0r0 0B0 0U", "1R0 1F0 1B0 1s0 1U"},
         "stage 0, instruction 2 (0S0): second send of activations for micro-batch 0 (the first is "
         "instruction 1)"},
        {1,
         1,
         1,
         {"0F0 0B0 0U 0U"},
         "stage 0, instruction 3 (0U): second optimizer step (the first is instruction 2)"},
        {1,
         2,
         1,
         {"0F0 0F1 0B0 0U 0B1"},
         "stage 0, instruction 3 (0U): optimizer step before the stage's last backward "
         "(instruction 4)"},
        {1, 1, 1, {"0F0 0B0"}, "stage 0: no optimizer step in a training schedule"},
        {1,
         1,
         1,
         {"0F0 0F1 0B0 0U"},
         "stage 0, instruction 1 (0F1): micro-batch 1 out of range (the schedule has 1: 0..0)"},
        {2,
         1,
         1,
         {"0R0 0F0 0S0 0r0 0B0 0U", "1R0 1F0 1B0 1s0 1U"},
         "stage 0, instruction 0 (0R0): receive of activations on the first stage, which has no "
         "previous neighbour"},
        {2,
         1,
         1,
         {"0F0 0S0 0r0 0B0 0U", "1R0 1F0 1S0 1B0 1s0 1U"},
         "stage 1, instruction 2 (1S0): send of activations on the last stage, which has no next "
         "neighbour"},
        {1, 1, 0, {"0F0 0B0"}, "stage 0, instruction 1 (0B0): backward in a forward-only schedule"},
        {1,
         1,
         0,
         {"0F0 0U"},
         "stage 0, instruction 1 (0U): optimizer step in a forward-only schedule"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        assert_hand_made_fails(cases[c].p, cases[c].m, cases[c].training, cases[c].rows,
                               cases[c].message);
}

static void test_validate_bad_fields(void)
{
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 3, 2, &sched), BT_OK);
    sched->list[1][0].peer = 2; /* 1R0 must receive from stage 0 */
    assert_validation(sched, "stage 1, instruction 0 (1R0): receive of activations names peer 2 "
                             "(must be stage 0)");
    sched->list[1][0].peer = 0;
    sched->list[1][1].peer = 0; /* 1F0 is compute */
    assert_validation(sched, "stage 1, instruction 1 (1F0): forward names peer 0 (must be -1)");
    sched->list[1][1].peer = -1;
    int step = sched->len[2] - 1;
    sched->list[2][step].mb = 0;
    assert_validation(sched, "stage 2, instruction 8 (2U): optimizer step carries micro-batch 0 "
                             "(must be -1)");
    sched->list[2][step].mb = -1;
    sched->list[0][0].mb = -1;
    assert_validation(sched, "stage 0, instruction 0 (0F-1): micro-batch -1 out of range (the "
                             "schedule has 2: 0..1)");
    sched->list[0][0].mb = 0;
    sched->list[0][0].kind = (bt_instr_kind)42;
    assert_validation(sched, "stage 0, instruction 0 (0?): unknown instruction kind 42");
    sched->list[0][0].kind = BT_I_FWD;
    assert_validation(sched, NULL);
    bt_schedule_destroy(sched);
    CU_ASSERT_EQUAL(bt_schedule_validate(NULL), BT_ERR_INVALID_ARG);
}

static void test_validate_accepts_custom_order(void)
{
    /* Receives of gradients out of micro-batch order, backwards in reverse order: unusual, valid.
     */
    const char *const rows[] = {
        "0F0 0S0 0F1 0S1 0r1 0r0 0B1 0B0 0U",
        "1R0 1F0 1R1 1F1 1B1 1s1 1B0 1s0 1U",
    };
    bt_schedule *sched = make(2, 2, 1, rows);
    assert_validation(sched, NULL);
    /* Unit costs: stage 1 F0 1..2, F1 2..3, B1 3..4 (s1 at 4), B0 4..5 (s0 at 5), U 5..5;
     * stage 0 waits for 1s1 at 4, for 1s0 at 5, then B1 5..6, B0 6..7: makespan 7. */
    bt_sim_result res;
    CU_ASSERT_EQUAL_FATAL(simulate_equal(sched, 1, 1, &res), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.step_time, 7.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.start[0][6], 5.0, 1e-12);
    bt_sim_result_free(&res);
    bt_schedule_destroy(sched);
}

/* ---- simulator ------------------------------------------------------------------------------- */

static void test_bubble_closed_form(void)
{
    const double costs[][2] = {{1.0, 1.0}, {1.0, 2.0}, {0.3, 0.7}, {2.5, 0.0}};
    const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B};
    for (size_t c = 0; c < sizeof costs / sizeof costs[0]; c++)
        for (int k = 0; k < 2; k++)
            for (int p = 1; p <= 8; p++)
                for (int m = 1; m <= 16; m++) {
                    bt_schedule *sched = NULL;
                    bt_sim_result res;
                    double f = costs[c][0], b = costs[c][1];
                    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(kinds[k], p, m, &sched), BT_OK);
                    CU_ASSERT_EQUAL_FATAL(simulate_equal(sched, f, b, &res), BT_OK);
                    double want = (double)(p - 1) / (double)(m + p - 1);
                    if (fabs(res.bubble - want) > 1e-12)
                        printf("\n  kind %d p %d m %d f %g b %g: bubble %.15f want %.15f\n",
                               (int)kinds[k], p, m, f, b, res.bubble, want);
                    CU_ASSERT(fabs(res.bubble - want) <= 1e-12);
                    CU_ASSERT(fabs(res.step_time - (m + p - 1) * (f + b)) <= 1e-9);
                    for (int s = 0; s < p; s++)
                        CU_ASSERT(fabs(res.busy[s] - m * (f + b)) <= 1e-9);
                    bt_sim_result_free(&res);
                    bt_schedule_destroy(sched);
                }
    /* Streaming has the same fill and drain with forwards alone. */
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++) {
            bt_schedule *sched = NULL;
            bt_sim_result res;
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_STREAM, p, m, &sched), BT_OK);
            double fwd[8];
            for (int s = 0; s < p; s++) fwd[s] = 1.5;
            bt_sim_costs sc = {.fwd = fwd, .step = 0};
            CU_ASSERT_EQUAL_FATAL(bt_simulate(sched, &sc, &res), BT_OK);
            CU_ASSERT(fabs(res.bubble - (double)(p - 1) / (m + p - 1)) <= 1e-12);
            CU_ASSERT(fabs(res.step_time - 1.5 * (m + p - 1)) <= 1e-12);
            bt_sim_result_free(&res);
            bt_schedule_destroy(sched);
        }
}

static void test_simulate_unequal_1f1b_by_hand(void)
{
    /* 1F1B, p = 2, m = 2. fwd = {1, 2}, bwd = {2, 3}, activations 0 -> 1 take 0.5, gradients
     * 1 -> 0 take 0.25, step 0.5.
     *   stage 0: 0F0 0S0 0F1 0S1 0r0 0B0 0r1 0B1 0U
     *   stage 1: 1R0 1F0 1B0 1s0 1R1 1F1 1B1 1s1 1U
     * stage 0: F0 0..1 (act 0 arrives at 1.5), F1 1..2 (act 1 arrives at 2.5)
     * stage 1: R0 done 1.5, F0 1.5..3.5, B0 3.5..6.5 (grad 0 arrives at 6.75),
     *          R1 done max(6.5, 2.5) = 6.5, F1 6.5..8.5, B1 8.5..11.5 (grad 1 at 11.75),
     *          U 11.5..12
     * stage 0: r0 waits 2..6.75, B0 6.75..8.75, r1 waits 8.75..11.75, B1 11.75..13.75,
     *          U 13.75..14.25
     * step time 14.25; busy {1+1+2+2+0.5, 2+2+3+3+0.5} = {6.5, 10.5};
     * bubble = 1 - 17 / (2 * 14.25) = 23/57. */
    bt_schedule *sched = NULL;
    bt_sim_result res;
    const double fwd[] = {1, 2}, bwd[] = {2, 3}, send_act[] = {0.5, 0}, send_grad[] = {0, 0.25};
    bt_sim_costs costs = {fwd, bwd, send_act, send_grad, 0.5, NULL, 0};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 2, &sched), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_simulate(sched, &costs, &res), BT_OK);
    CU_ASSERT_EQUAL(res.stages, 2);
    CU_ASSERT_DOUBLE_EQUAL(res.step_time, 14.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.busy[0], 6.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.busy[1], 10.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.bubble, 23.0 / 57.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.start[1][1], 1.5, 1e-12);  /* 1F0 */
    CU_ASSERT_DOUBLE_EQUAL(res.end[1][0], 1.5, 1e-12);    /* 1R0 completes */
    CU_ASSERT_DOUBLE_EQUAL(res.start[1][5], 6.5, 1e-12);  /* 1F1 */
    CU_ASSERT_DOUBLE_EQUAL(res.start[0][4], 2.0, 1e-12);  /* 0r0 starts waiting */
    CU_ASSERT_DOUBLE_EQUAL(res.end[0][4], 6.75, 1e-12);   /* and completes */
    CU_ASSERT_DOUBLE_EQUAL(res.start[0][5], 6.75, 1e-12); /* 0B0 */
    CU_ASSERT_DOUBLE_EQUAL(res.start[0][7], 11.75, 1e-12); /* 0B1 */
    CU_ASSERT_DOUBLE_EQUAL(res.end[0][8], 14.25, 1e-12);  /* 0U */
    CU_ASSERT_DOUBLE_EQUAL(res.end[1][8], 12.0, 1e-12);   /* 1U */
    bt_sim_result_free(&res);
    bt_schedule_destroy(sched);
}

static void test_simulate_unequal_gpipe_by_hand(void)
{
    /* GPipe, p = 2, m = 2, fwd = {2, 1}, bwd = {1, 3}, instant transfers, free step.
     * stage 0: F0 0..2, F1 2..4; stage 1: F0 2..3, waits for act 1 until 4, F1 4..5,
     * B0 5..8 (s0 at 8), B1 8..11 (s1 at 11); stage 0: B0 8..9, B1 11..12.
     * step time 12, busy {6, 8}, bubble 1 - 14/24 = 5/12. */
    bt_schedule *sched = NULL;
    bt_sim_result res;
    const double fwd[] = {2, 1}, bwd[] = {1, 3};
    bt_sim_costs costs = {.fwd = fwd, .bwd = bwd};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_GPIPE, 2, 2, &sched), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_simulate(sched, &costs, &res), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.step_time, 12.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.bubble, 5.0 / 12.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.start[1][3], 4.0, 1e-12); /* 1F1 */
    CU_ASSERT_DOUBLE_EQUAL(res.start[0][5], 8.0, 1e-12); /* 0B0 */
    bt_sim_result_free(&res);
    bt_schedule_destroy(sched);
}

static void test_simulate_stream_with_transfers(void)
{
    /* p = 2, m = 3, fwd 1 each, activations take 0.5: stage 1 runs F0 1.5..2.5, F1 2.5..3.5,
     * F2 3.5..4.5 (stage 0 sends at 1, 2, 3; arrivals 1.5, 2.5, 3.5). busy 3 + 3 over 2 * 4.5. */
    bt_schedule *sched = NULL;
    bt_sim_result res;
    const double fwd[] = {1, 1}, send_act[] = {0.5, 0};
    bt_sim_costs costs = {.fwd = fwd, .send_act = send_act};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_STREAM, 2, 3, &sched), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_simulate(sched, &costs, &res), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(res.step_time, 4.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.bubble, 1.0 - 6.0 / 9.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.start[1][1], 1.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(res.start[1][5], 3.5, 1e-12); /* 1F2: 1R0 1F0 1R1 1F1 1R2 1F2 */
    bt_sim_result_free(&res);
    bt_schedule_destroy(sched);
}

static void test_simulate_rejects_bad_costs(void)
{
    bt_schedule *sched = NULL;
    bt_sim_result res;
    const double fwd[] = {1, -1}, ok[] = {1, 1};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 2, &sched), BT_OK);
    bt_sim_costs negative = {.fwd = fwd, .bwd = ok};
    CU_ASSERT_EQUAL(bt_simulate(sched, &negative, &res), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "fwd[1]"));
    bt_sim_costs no_bwd = {.fwd = ok};
    CU_ASSERT_EQUAL(bt_simulate(sched, &no_bwd, &res), BT_ERR_INVALID_ARG);
    bt_sim_costs nan_step = {.fwd = ok, .bwd = ok, .step = NAN};
    CU_ASSERT_EQUAL(bt_simulate(sched, &nan_step, &res), BT_ERR_INVALID_ARG);
    bt_sim_result_free(&res); /* zeroed by the failed calls: freeing is a no-op */
    bt_sim_result_free(NULL);
    bt_schedule_destroy(sched);
}

/* ---- grid ------------------------------------------------------------------------------------ */


/* ---- interleaved 1F1B and ZB-H1 ------------------------------------------------------------- */

/* Every ZB-H1 schedule (p 1..8, m 1..16) and interleaved schedule (P 1..4 devices, v 1..3, m a
 * multiple of P up to 16) validates; ZB-H1 holds min(p, m) on every stage, interleaved stages
 * never hold more than their device's bound and each device's order holds exactly Megatron's
 * warm-up + 1 (or every forward when m = P). */
static void test_new_schedules_validate(void)
{
    int built = 0;
    for (int p = 1; p <= 8; p++)
        for (int m = 1; m <= 16; m++) {
            bt_schedule *sched = NULL;
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_ZB_H1, p, m, &sched), BT_OK);
            CU_ASSERT(sched->split_backward);
            bt_status st = bt_schedule_validate(sched);
            if (st != BT_OK) printf("\n  zb-h1 p=%d m=%d: %s\n", p, m, bt_last_error());
            CU_ASSERT_EQUAL(st, BT_OK);
            for (int s = 0; s < p; s++)
                CU_ASSERT_EQUAL(sched->slots[s], bt_schedule_slot_bound(BT_SCHEDULE_ZB_H1, p, m, 1, s));
            bt_schedule_destroy(sched);
            built++;
        }
    for (int P = 1; P <= 4; P++)
        for (int v = 1; v <= 3; v++)
            for (int m = P; m <= 16; m += P) {
                bt_schedule *sched = NULL;
                int p = P * v;
                CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_INTERLEAVED_1F1B, p, m, v, &sched),
                                      BT_OK);
                CU_ASSERT_EQUAL(sched->devices, P);
                CU_ASSERT_EQUAL(sched->chunks, v);
                bt_status st = bt_schedule_validate(sched);
                if (st != BT_OK) printf("\n  interleaved P=%d v=%d m=%d: %s\n", P, v, m, bt_last_error());
                CU_ASSERT_EQUAL(st, BT_OK);
                for (int d = 0; d < P; d++) {
                    int n = 0, *stage = NULL, *index = NULL, live = 0, peak = 0;
                    CU_ASSERT_EQUAL_FATAL(bt_schedule_device_order(sched, d, &n, &stage, &index), BT_OK);
                    for (int k = 0; k < n; k++) {
                        const bt_instr *ins = &sched->list[stage[k]][index[k]];
                        CU_ASSERT_EQUAL(stage[k] % P, d);
                        CU_ASSERT_EQUAL(ins->chunk, stage[k] / P);
                        if (ins->kind == BT_I_FWD && ++live > peak) peak = live;
                        if (ins->kind == BT_I_BWD) live--;
                    }
                    int bound = bt_schedule_slot_bound(BT_SCHEDULE_INTERLEAVED_1F1B, p, m, v, d);
                    if (v > 1) CU_ASSERT_EQUAL(peak, bound);
                    for (int c = 0; c < v; c++) CU_ASSERT(sched->slots[c * P + d] <= bound);
                    free(stage);
                    free(index);
                }
                bt_schedule_destroy(sched);
                built++;
            }
    CU_ASSERT_EQUAL(built, 128 + 3 * (16 + 8 + 5 + 4));
}

/* Unit costs (F = 1, fused B = 2; split B = W = 1): ZB-H1 idles (p - 1) per stage, a third of
 * 1F1B's 3 (p - 1) (Qi et al.: (p-1)(T_F + T_B - T_W) against (p-1)(T_F + T_B + T_W)); with the
 * model cut into v chunks per device (F = 1/v, B = 2/v per chunk) interleaved 1F1B idles
 * (p - 1) 3 / v per device: its bubble (p-1)/(v m) of the ideal 3m against 1F1B's (p-1)/m. */
static void test_bubble_formulas(void)
{
    double one[32], two[32], third[32], two_thirds[32];
    for (int s = 0; s < 32; s++) one[s] = 1, two[s] = 2;
    const int ps[] = {2, 3, 4}, ms[] = {4, 8};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 2; b++) {
            int p = ps[a], m = ms[b];
            bt_schedule *f1b = NULL, *zb = NULL;
            bt_sim_result r1, rz;
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, p, m, &f1b), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_ZB_H1, p, m, &zb), BT_OK);
            bt_sim_costs fused = {.fwd = one, .bwd = two}, split = {.fwd = one, .bwd = one, .wgt = one};
            CU_ASSERT_EQUAL_FATAL(bt_simulate(f1b, &fused, &r1), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_simulate(zb, &split, &rz), BT_OK);
            double idle_1f1b = r1.step_time - 3.0 * m, idle_zb = rz.step_time - 3.0 * m;
            CU_ASSERT_DOUBLE_EQUAL(idle_1f1b, 3.0 * (p - 1), 1e-12);
            CU_ASSERT_DOUBLE_EQUAL(idle_zb, (double)(p - 1), 1e-12);
            CU_ASSERT_DOUBLE_EQUAL(idle_zb / idle_1f1b, 1.0 / 3.0, 1e-12);
            CU_ASSERT(rz.bubble < r1.bubble);
            bt_sim_result_free(&r1);
            bt_sim_result_free(&rz);
            bt_schedule_destroy(f1b);
            bt_schedule_destroy(zb);
        }
    for (int P = 2; P <= 4; P++)
        for (int v = 2; v <= 3; v++)
            for (int g = 1; g <= 4; g *= 2) {
                int m = P * g;
                bt_schedule *il = NULL;
                bt_sim_result r;
                for (int s = 0; s < 32; s++) third[s] = 1.0 / v, two_thirds[s] = 2.0 / v;
                CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_INTERLEAVED_1F1B, P * v, m, v, &il),
                                      BT_OK);
                bt_sim_costs chunk = {.fwd = third, .bwd = two_thirds};
                CU_ASSERT_EQUAL_FATAL(bt_simulate(il, &chunk, &r), BT_OK);
                CU_ASSERT_EQUAL(r.devices, P);
                double ideal = 3.0 * m, idle = r.step_time - ideal;
                if (fabs(idle / ideal - (P - 1.0) / (v * m)) > 1e-12)
                    printf("\n  interleaved P=%d v=%d m=%d: idle %.4f of %.4f\n", P, v, m, idle, ideal);
                CU_ASSERT_DOUBLE_EQUAL(idle / ideal, (P - 1.0) / (v * m), 1e-12);
                bt_sim_result_free(&r);
                bt_schedule_destroy(il);
            }
}

/* The turn hand-off: free for schedules with one stage per device; on interleaved it adds idle
 * time (busy unchanged) of at least one hand-off and at most one per device switch. */
static void test_simulate_handoff(void)
{
    double one[8], two[8];
    for (int s = 0; s < 8; s++) one[s] = 1, two[s] = 2;
    bt_schedule *f1b = NULL, *il = NULL;
    bt_sim_result a, b;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 4, &f1b), BT_OK);
    bt_sim_costs free_ = {.fwd = one, .bwd = two}, dear = {.fwd = one, .bwd = two, .handoff = 0.25};
    CU_ASSERT_EQUAL_FATAL(bt_simulate(f1b, &free_, &a), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_simulate(f1b, &dear, &b), BT_OK);
    CU_ASSERT_DOUBLE_EQUAL(a.step_time, b.step_time, 1e-12);
    bt_sim_result_free(&a);
    bt_sim_result_free(&b);
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_INTERLEAVED_1F1B, 4, 4, 2, &il), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_simulate(il, &free_, &a), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_simulate(il, &dear, &b), BT_OK);
    int switches = 0;
    for (int d = 0; d < il->devices; d++) {
        int n = 0, *st = NULL, *ix = NULL;
        CU_ASSERT_EQUAL_FATAL(bt_schedule_device_order(il, d, &n, &st, &ix), BT_OK);
        int here = 0;
        for (int i = 1; i < n; i++) here += st[i] != st[i - 1];
        if (here > switches) switches = here;
        free(st);
        free(ix);
    }
    CU_ASSERT(switches > 0);
    CU_ASSERT(b.step_time >= a.step_time + 0.25 - 1e-12);
    CU_ASSERT(b.step_time <= a.step_time + 0.25 * switches + 1e-12);
    for (int s = 0; s < 4; s++) CU_ASSERT_DOUBLE_EQUAL(a.busy[s], b.busy[s], 1e-12);
    CU_ASSERT(b.bubble > a.bubble);
    bt_sim_result_free(&a);
    bt_sim_result_free(&b);
    dear.handoff = NAN;
    CU_ASSERT_EQUAL(bt_simulate(il, &dear, &a), BT_ERR_INVALID_ARG);
    bt_schedule_destroy(f1b);
    bt_schedule_destroy(il);
}

/* Grids show W (zb-h1) and, for interleaved, one row per device with the logical stage in each
 * token (device 0 runs stages 0 and 2). */
static void test_grid_new_schedules(void)
{
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_ZB_H1, 2, 2, &sched), BT_OK);
    char *grid = bt_schedule_format_grid(sched);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grid);
    const char *want = "slot     0   1   2   3   4   5   6   7\n"
                       "stage 0  0F0 0F1 .   0B0 0W0 0B1 0W1 0U\n"
                       "stage 1  .   1F0 1B0 1F1 1B1 1W0 1W1 1U\n";
    if (strcmp(grid, want) != 0) printf("\n%s", grid);
    CU_ASSERT_STRING_EQUAL(grid, want);
    free(grid);
    bt_schedule_destroy(sched);

    CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_INTERLEAVED_1F1B, 4, 2, 2, &sched), BT_OK);
    grid = bt_schedule_format_grid(sched);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grid);
    /* m = P: every forward first (Megatron), chunk 0 then chunk 1; backwards chunk 1 first */
    want = "slot      0   1   2   3   4   5   6   7   8   9   10  11\n"
           "device 0  0F0 0F1 2F0 2F1 .   .   2B0 2B1 0B0 0B1 0U  2U\n"
           "device 1  .   1F0 1F1 3F0 3F1 3B0 3B1 1B0 1B1 1U  3U  .\n";
    if (strcmp(grid, want) != 0) printf("\n%s", grid);
    CU_ASSERT_STRING_EQUAL(grid, want);
    free(grid);
    bt_schedule_destroy(sched);
}

static void test_check_shape(void)
{
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_INTERLEAVED_1F1B, 6, 6, 2), BT_OK);
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_INTERLEAVED_1F1B, 6, 4, 2), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "interleaved-1f1b runs micro-batches in groups of the 3 devices: "
                                            "4 micro-batches is not a multiple of 3");
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_INTERLEAVED_1F1B, 5, 4, 2), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "interleaved-1f1b: 5 stages do not split into 2 chunks per device "
                                            "(stages must be a multiple of virtual)");
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_ZB_H1, 4, 4, 2), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "virtual 2: only interleaved-1f1b and zbv run several chunks per "
                                            "device (zb-h1 takes virtual 1)");
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_ZBV, 4, 3, 2), BT_OK); /* any m */
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_ZBV, 6, 4, 3), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "zbv runs exactly 2 chunks per device (device d holds stages d and "
                                            "2P-1-d): virtual must be 2, got 3");
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_ZBV, 4, 4, 1), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_schedule_check_shape(BT_SCHEDULE_ZBV, 5, 4, 2), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_last_error(), "zbv: 5 stages do not pair into a V (stages must be 2 x devices)");
    CU_ASSERT_EQUAL(bt_schedule_default_virtual(BT_SCHEDULE_ZBV, 0), 2);
    CU_ASSERT_EQUAL(bt_schedule_default_virtual(BT_SCHEDULE_1F1B, 0), 1);
    int n = 0;
    const bt_schedule_kind *kinds = bt_schedule_training_kinds(&n);
    CU_ASSERT_EQUAL(n, 5);
    for (int i = 0; i < n; i++) CU_ASSERT(kinds[i] != BT_SCHEDULE_STREAM);
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL(bt_schedule_build_virtual(BT_SCHEDULE_INTERLEAVED_1F1B, 4, 3, 2, &sched), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(sched);
}

/* The validator on split backwards: W only where the backward is split, exactly one per
 * micro-batch, after its B, and STEP after the last W. */
static void test_validate_weight_gradients(void)
{
    const char *const ok[] = {"0F0 0S0 0r0 0B0 0W0 0U", "1R0 1F0 1B0 1s0 1W0 1U"};
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(BT_SCHEDULE_ZB_H1, 2, 1, ok, &sched), BT_OK);
    assert_validation(sched, NULL);
    CU_ASSERT_EQUAL(sched->list[1][4].slot, 0); /* W holds the slot */
    bt_schedule_destroy(sched);
    const char *const before[] = {"0F0 0S0 0r0 0W0 0B0 0U", "1R0 1F0 1B0 1s0 1W0 1U"};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(BT_SCHEDULE_ZB_H1, 2, 1, before, &sched), BT_OK);
    assert_validation(sched, "stage 0, instruction 3 (0W0): weight gradient of micro-batch 0 before its "
                             "backward (B)");
    bt_schedule_destroy(sched);
    const char *const missing[] = {"0F0 0S0 0r0 0B0 0U", "1R0 1F0 1B0 1s0 1W0 1U"};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(BT_SCHEDULE_ZB_H1, 2, 1, missing, &sched), BT_OK);
    assert_validation(sched, "stage 0: no weight gradient of micro-batch 0 (the backward is split: every B "
                             "needs its W)");
    bt_schedule_destroy(sched);
    const char *const late[] = {"0F0 0S0 0r0 0B0 0U 0W0", "1R0 1F0 1B0 1s0 1W0 1U"};
    CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(BT_SCHEDULE_ZB_H1, 2, 1, late, &sched), BT_OK);
    assert_validation(sched, "stage 0, instruction 4 (0U): optimizer step before the stage's last weight "
                             "gradient (instruction 5)");
    bt_schedule_destroy(sched);
    CU_ASSERT_EQUAL_FATAL(bt_schedule_parse(BT_SCHEDULE_1F1B, 2, 1, ok, &sched), BT_OK);
    assert_validation(sched, "stage 0, instruction 4 (0W0): weight gradient in a schedule whose backward "
                         "computes them (only split-backward schedules such as zb-h1 have W)");
    bt_schedule_destroy(sched);
}

/* Device turns: every instruction of a device's stages once, in each stage's list order; an order
 * that makes the device wait for itself is a deadlock naming the devices. */
static void test_validate_device_turns(void)
{
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_INTERLEAVED_1F1B, 2, 1, 2, &sched), BT_OK);
    /* one device, stages 0 and 1: 0F0 0S0 1R0 1F0 1B0 1s0 0r0 0B0 0U 1U */
    assert_validation(sched, NULL);
    CU_ASSERT_EQUAL(sched->list[0][0].turn, 0);
    CU_ASSERT_EQUAL(sched->list[1][0].turn, 2);
    sched->list[1][0].turn = 0;
    assert_validation(sched, "stage 1, instruction 0: turn 0 on device 0 is taken twice (the device runs 10 "
                             "instructions: turns 0..9, each once)");
    sched->list[1][0].turn = 10;
    assert_validation(sched, "stage 1, instruction 0: turn 10 on device 0 is out of range (the device runs 10 "
                             "instructions: turns 0..9, each once)");
    /* swap 0F0 and 0S0's turns: the stage's own list order is broken */
    sched->list[1][0].turn = 2;
    sched->list[0][0].turn = 1;
    sched->list[0][1].turn = 0;
    assert_validation(sched, "stage 0, instruction 1 (0S0): turn 0 on device 0 comes before the stage's "
                             "previous instruction (turn 1): a device runs each stage's list in order");
    sched->list[0][0].turn = 0;
    sched->list[0][1].turn = 1;
    /* stage 1's receive before stage 0's send on the one device: it waits for itself.
     * Order: 1R0 1F0 1B0 1s0 0F0 0S0 0r0 0B0 0U 1U */
    for (int i = 0; i < 4; i++) sched->list[1][i].turn = i;
    for (int i = 0; i < 5; i++) sched->list[0][i].turn = 4 + i;
    sched->list[1][4].turn = 9;
    assert_validation(sched, "the devices cannot proceed: device 0 waits at 1R0 (stage 1, instruction 0) for "
                             "0S0");
    bt_schedule_destroy(sched);
}

static void test_grid_by_hand(void)
{
    /* 1F1B p = 2, m = 2 with F = B = U = 1 slot and instant transfers:
     *   stage 1 (1R0 1F0 1B0 1s0 1R1 1F1 1B1 1s1 1U): F0 at 1 (after 0F0), B0 at 2, F1 at 3,
     *   B1 at 4, U at 5; stage 0 (0F0 0S0 0F1 0S1 0r0 0B0 0r1 0B1 0U): F0 at 0, F1 at 1,
     *   B0 at 3 (gradient 0 sent at 3), B1 at 5 (gradient 1 sent at 5), U at 6. */
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, 2, 2, &sched), BT_OK);
    char *grid = bt_schedule_format_grid(sched);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grid);
    const char *want = "slot     0   1   2   3   4   5   6\n"
                       "stage 0  0F0 0F1 .   0B0 .   0B1 0U\n"
                       "stage 1  .   1F0 1B0 1F1 1B1 1U  .\n";
    if (strcmp(grid, want) != 0) printf("\n%s", grid);
    CU_ASSERT_STRING_EQUAL(grid, want);
    free(grid);
    bt_schedule_destroy(sched);

    /* Streaming p = 3, m = 2: a diagonal, no backward, no step. */
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_STREAM, 3, 2, &sched), BT_OK);
    grid = bt_schedule_format_grid(sched);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grid);
    CU_ASSERT_STRING_EQUAL(grid, "slot     0   1   2   3\n"
                                 "stage 0  0F0 0F1 .   .\n"
                                 "stage 1  .   1F0 1F1 .\n"
                                 "stage 2  .   .   2F0 2F1\n");
    free(grid);
    bt_schedule_destroy(sched);
}

static void test_grid_columns_are_fixed_width(void)
{
    /* p = 11, m = 12 GPipe: tokens up to "10F11" (5 wide); every cell but the last of a row is
     * padded to 5 + 1, so every column starts at the same offset in every row. */
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_GPIPE, 11, 12, &sched), BT_OK);
    char *grid = bt_schedule_format_grid(sched);
    CU_ASSERT_PTR_NOT_NULL_FATAL(grid);
    int slots = 2 * (12 + 11 - 1) + 1; /* forwards, backwards, step */
    int rows = 0;
    for (char *line = strtok(grid, "\n"); line; line = strtok(NULL, "\n"), rows++) {
        int label = (int)strlen("stage 10");
        for (int t = 0; t < slots; t++) {
            int col = label + 2 + t * 6;
            CU_ASSERT_FATAL((int)strlen(line) > col);
            CU_ASSERT(line[col - 1] == ' ');
            CU_ASSERT(line[col] != ' ');
        }
        if (rows > 0) {
            int cells = 0;
            for (char *c = line + label; *c; c++)
                if (c[0] != ' ' && c[-1] == ' ') cells++;
            CU_ASSERT_EQUAL(cells, slots);
        }
    }
    CU_ASSERT_EQUAL(rows, 12);
    free(grid);
    bt_schedule_destroy(sched);
}

/* ---- ZBV ------------------------------------------------------------------------------------ */

/* Device d's compute instructions in its order, as "sFm" tokens separated by spaces. */
static void device_compute_text(const bt_schedule *sched, int d, char *buf, size_t size)
{
    int n = 0, *st = NULL, *ix = NULL;
    size_t used = 0;
    buf[0] = '\0';
    CU_ASSERT_EQUAL_FATAL(bt_schedule_device_order(sched, d, &n, &st, &ix), BT_OK);
    for (int k = 0; k < n; k++) {
        const bt_instr *ins = &sched->list[st[k]][ix[k]];
        if (ins->kind != BT_I_FWD && ins->kind != BT_I_BWD && ins->kind != BT_I_WGT && ins->kind != BT_I_STEP)
            continue;
        char token[48];
        bt_instr_format(st[k], ins, token, sizeof token);
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? " " : "", token);
    }
    free(st);
    free(ix);
}

/* PyTorch's ScheduleZBVZeroBubble order worked out by hand for P = 2 devices (stages 0 and 3 on
 * device 0, 1 and 2 on device 1) and m = 4: device 0 three forwards of chunk 0, two (F, B, W) of
 * chunk 1, the steady (F0 B0 W0 F1 B1 W1), then (B0 W0) twice; device 1 one forward of chunk 0,
 * (F1, F0), one (F1 B1 W1), the steady state, (B0 B1), (B0 W0), then the pending W1 and W0. */
static void test_zbv_order_by_hand(void)
{
    bt_schedule *sched = NULL;
    char text[1024];
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_ZBV, 4, 4, 2, &sched), BT_OK);
    CU_ASSERT_EQUAL(sched->devices, 2);
    CU_ASSERT_EQUAL(sched->chunks, 2);
    CU_ASSERT(sched->split_backward);
    const int dev[] = {0, 1, 1, 0};
    for (int s = 0; s < 4; s++) {
        CU_ASSERT_EQUAL(sched->device[s], dev[s]);
        CU_ASSERT_EQUAL(bt_schedule_stage_device(BT_SCHEDULE_ZBV, 4, 2, s), dev[s]);
        CU_ASSERT_EQUAL(bt_schedule_stage_chunk(sched, s), s < 2 ? 0 : 1);
        for (int i = 0; i < sched->len[s]; i++) CU_ASSERT_EQUAL(sched->list[s][i].chunk, s < 2 ? 0 : 1);
    }
    device_compute_text(sched, 0, text, sizeof text);
    const char *want0 = "0F0 0F1 0F2 3F0 3B0 3W0 3F1 3B1 3W1 0F3 0B0 0W0 3F2 3B2 3W2 0B1 0W1 3F3 3B3 3W3 "
                        "0B2 0W2 0B3 0W3 0U 3U";
    if (strcmp(text, want0) != 0) printf("\n  device 0: %s\n", text);
    CU_ASSERT_STRING_EQUAL(text, want0);
    device_compute_text(sched, 1, text, sizeof text);
    const char *want1 = "1F0 2F0 1F1 2F1 2B0 2W0 1F2 1B0 1W0 2F2 2B1 2W1 1F3 1B1 1W1 2F3 2B2 2W2 "
                        "1B2 2B3 1B3 1W2 2W3 1W3 1U 2U";
    if (strcmp(text, want1) != 0) printf("\n  device 1: %s\n", text);
    CU_ASSERT_STRING_EQUAL(text, want1);
    assert_validation(sched, NULL);
    bt_schedule_destroy(sched);
}

/* Every ZBV schedule for P = 1..5 devices and m = 1..16 validates (every W after its B, turns,
 * no wait cycle, slots), puts stage s on device s (s < P) or 2P-1-s, holds exactly the stated
 * bound of slots per stage, and at most 2P chunk-sized micro-batches per device (P stages' worth:
 * 1F1B's stage 0), exactly 2P once m >= 2P. */
static void test_zbv_validates(void)
{
    for (int P = 1; P <= 5; P++)
        for (int m = 1; m <= 16; m++) {
            bt_schedule *sched = NULL;
            int p = 2 * P;
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_ZBV, p, m, 2, &sched), BT_OK);
            bt_status st = bt_schedule_validate(sched);
            if (st != BT_OK) printf("\n  zbv P=%d m=%d: %s\n", P, m, bt_last_error());
            CU_ASSERT_EQUAL(st, BT_OK);
            for (int s = 0; s < p; s++) {
                CU_ASSERT_EQUAL(sched->device[s], s < P ? s : p - 1 - s);
                if (sched->slots[s] != bt_schedule_slot_bound(BT_SCHEDULE_ZBV, p, m, 2, s))
                    printf("\n  zbv P=%d m=%d stage %d: %d slots, bound %d\n", P, m, s, sched->slots[s],
                           bt_schedule_slot_bound(BT_SCHEDULE_ZBV, p, m, 2, s));
                CU_ASSERT_EQUAL(sched->slots[s], bt_schedule_slot_bound(BT_SCHEDULE_ZBV, p, m, 2, s));
            }
            for (int d = 0; d < P; d++) {
                int n = 0, *stage = NULL, *index = NULL, live = 0, peak = 0;
                CU_ASSERT_EQUAL_FATAL(bt_schedule_device_order(sched, d, &n, &stage, &index), BT_OK);
                for (int k = 0; k < n; k++) {
                    const bt_instr *ins = &sched->list[stage[k]][index[k]];
                    CU_ASSERT_EQUAL(sched->device[stage[k]], d);
                    if (ins->kind == BT_I_FWD && ++live > peak) peak = live;
                    if (ins->kind == BT_I_WGT) live--; /* a micro-batch holds its slot until its W */
                }
                CU_ASSERT(peak <= 2 * P);
                if (m >= 2 * P) CU_ASSERT_EQUAL(peak, 2 * P);
                free(stage);
                free(index);
            }
            bt_schedule_destroy(sched);
        }
}

/* With F = B = W = 1/2 per chunk (a device's two chunks make one 1F1B stage of F = 1, B + W = 2)
 * ZBV is the zero-bubble schedule of Qi et al. (section 6; bubble (p-1)(T_F + T_B - 2 T_W) = 0 for
 * equal costs, counted as they do, without the synchronised optimizer step): once m >= 2P - 1 no
 * device idles between its first and last instruction. What a synchronised step adds is the
 * staircase: device d cannot start before d chunk forwards, so the step takes 3m + (P-1)/2, idle
 * (P-1) T_F per device: a sixth of 1F1B's 3(P-1) and half of ZB-H1's (P-1) on the same costs. */
static void test_zbv_bubble(void)
{
    double half[16], one[16], two[16];
    for (int s = 0; s < 16; s++) half[s] = 0.5, one[s] = 1, two[s] = 2;
    for (int P = 2; P <= 4; P++)
        for (int m = 2 * P - 1; m <= 16; m++) {
            bt_schedule *zbv = NULL, *f1b = NULL;
            bt_sim_result r, r1;
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_ZBV, 2 * P, m, 2, &zbv), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_schedule_build(BT_SCHEDULE_1F1B, P, m, &f1b), BT_OK);
            bt_sim_costs chunk = {.fwd = half, .bwd = half, .wgt = half}, fused = {.fwd = one, .bwd = two};
            CU_ASSERT_EQUAL_FATAL(bt_simulate(zbv, &chunk, &r), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_simulate(f1b, &fused, &r1), BT_OK);
            CU_ASSERT_EQUAL(r.devices, P);
            for (int d = 0; d < P; d++) {
                double first = INFINITY, last = 0, busy = r.busy[d] + r.busy[2 * P - 1 - d];
                for (int c = 0; c < 2; c++) {
                    int s = c ? 2 * P - 1 - d : d;
                    for (int i = 0; i < zbv->len[s]; i++) {
                        bt_instr_kind k = zbv->list[s][i].kind;
                        if (k != BT_I_FWD && k != BT_I_BWD && k != BT_I_WGT) continue;
                        first = fmin(first, r.start[s][i]);
                        last = fmax(last, r.end[s][i]);
                    }
                }
                if (fabs(last - first - busy) > 1e-12)
                    printf("\n  zbv P=%d m=%d device %d: span %.2f, busy %.2f\n", P, m, d, last - first, busy);
                CU_ASSERT_DOUBLE_EQUAL(last - first, busy, 1e-12);
                CU_ASSERT_DOUBLE_EQUAL(first, 0.5 * d, 1e-12);
            }
            double idle = r.step_time - 3.0 * m, idle_1f1b = r1.step_time - 3.0 * m;
            CU_ASSERT_DOUBLE_EQUAL(idle, 0.5 * (P - 1), 1e-12);
            CU_ASSERT_DOUBLE_EQUAL(idle / idle_1f1b, 1.0 / 6.0, 1e-12);
            CU_ASSERT(r.bubble < r1.bubble);
            bt_sim_result_free(&r);
            bt_sim_result_free(&r1);
            bt_schedule_destroy(zbv);
            bt_schedule_destroy(f1b);
        }
}

/* The device map is checked: a stage on a device the schedule does not have, or a third stage on a
 * device of two chunks. */
static void test_validate_device_map(void)
{
    bt_schedule *sched = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_schedule_build_virtual(BT_SCHEDULE_ZBV, 4, 4, 2, &sched), BT_OK);
    sched->device[3] = 2;
    assert_validation(sched, "stage 3 runs on device 2 (the schedule has 2: 0..1)");
    sched->device[3] = 1;
    assert_validation(sched, "stage 3 makes 3 stages on device 1 (each device runs 2: the chunks)");
    sched->device[3] = 0;
    assert_validation(sched, NULL);
    bt_schedule_destroy(sched);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"instruction notation", test_notation},
        {"notation: parse reads what format writes", test_notation_parse},
        {"notation: malformed text", test_notation_malformed},
        {"notation: built schedules round-trip through text", test_parse_round_trips_built_schedules},
        {"1F1B instruction lists", test_1f1b_lists},
        {"GPipe instruction lists", test_gpipe_lists},
        {"streaming instruction lists", test_stream_lists},
        {"build rejects bad sizes", test_build_rejects_bad_sizes},
        {"built schedules validate (p 1..8, m 1..16)", test_built_schedules_validate},
        {"peak in-flight micro-batches", test_max_inflight},
        {"slots are those of mb mod in-flight", test_slots_match_the_old_rule},
        {"validator: missing send", test_validate_missing_send},
        {"validator: missing receive", test_validate_missing_receive},
        {"validator: two-stage deadlock", test_validate_deadlock_two_stages},
        {"validator: deadlock names every stuck stage",
         test_validate_deadlock_names_all_stuck_stages},
        {"validator: crossed receives deadlock", test_validate_crossed_receives_deadlock},
        {"validator: ordering and count errors", test_validate_ordering_errors},
        {"validator: bad fields", test_validate_bad_fields},
        {"validator: accepts a custom order", test_validate_accepts_custom_order},
        {"validator: a slot reused too early", test_validate_slot_reused_too_early},
        {"validator: slot and chunk fields", test_validate_slot_fields},
        {"simulator: bubble (p-1)/(m+p-1) with equal costs", test_bubble_closed_form},
        {"simulator: unequal 1F1B by hand", test_simulate_unequal_1f1b_by_hand},
        {"simulator: unequal GPipe by hand", test_simulate_unequal_gpipe_by_hand},
        {"simulator: streaming with transfers", test_simulate_stream_with_transfers},
        {"simulator: rejects bad costs", test_simulate_rejects_bad_costs},
        {"grid by hand", test_grid_by_hand},
        {"grid columns are fixed width", test_grid_columns_are_fixed_width},
        {"interleaved and zb-h1 validate, within their memory bounds", test_new_schedules_validate},
        {"simulator: the published bubble formulas", test_bubble_formulas},
        {"simulator: turn hand-offs cost idle time on shared devices only", test_simulate_handoff},
        {"grid: zb-h1 and interleaved", test_grid_new_schedules},
        {"schedule shapes the generators accept", test_check_shape},
        {"validator: weight gradients", test_validate_weight_gradients},
        {"validator: device turns", test_validate_device_turns},
        {"zbv: each device's order is the published one (P 2, m 4, by hand)", test_zbv_order_by_hand},
        {"zbv validates, in a V, within 1F1B's memory", test_zbv_validates},
        {"zbv: zero bubble inside every device's span with F = B = W", test_zbv_bubble},
        {"validator: a stage on a device out of range or one too many", test_validate_device_map},
        {NULL, NULL},
    };
    return bt_test_main("sched", cases);
}
