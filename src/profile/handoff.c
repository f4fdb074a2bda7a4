/* profile/handoff.c: what a turn hand-off between two stage threads on one device costs
 * (bt_profile_measure_handoff, baton/profile.h). Interleaved 1F1B runs several logical stages per
 * device, one worker thread each, and passes the device's turn between them at nearly every
 * instruction (src/exec/worker.c: wait_turn / pass_turn, through core/turns.h): the thread that
 * finished stores the device's turn counter and wakes the next turn's owner alone, which (after a
 * short spin) sleeps until then, is scheduled onto a core and works on a cache its sibling
 * filled. None of that is inside any instruction's time, so the simulator charges it separately
 * (bt_sim_costs.handoff).
 *
 * Measurement: `devices` groups of two threads, each group a bt_turns of its own with turns
 * alternating between its two threads (as the engine's devices have), each turn a fixed piece of work
 * over the thread's own buffer; against the same work done by one thread per group without any
 * hand-off (the two buffers alternating, so cache reuse is alike). The difference per turn is the
 * hand-off. The two runs alternate `repeats` times and the medians are compared; the machine's
 * load is in both alike. Result in ms, clamped at 0.
 *
 * Data flow: measure.c stores it in the profile (handoff_ms); placement.c hands it to the
 * simulator; bench/bench_schedules.c measures it beside its engines. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/turns.h"
#include "core/util.h"
#include "profile/measure.h"

#define HANDOFF_TURNS 96                 /* turns per group and run */
#define HANDOFF_BUF (1024 * 1024 / 4)    /* floats per thread's buffer: 1 MiB */
#define HANDOFF_MAX_DEVICES BT_PROFILE_MAX_HANDOFF_DEVICES
#define HANDOFF_MAX_REPEATS 64

typedef struct handoff_run {
    bt_turns *turns[HANDOFF_MAX_DEVICES]; /* per group, turn k owned by thread k % 2 */
    atomic_bool stop;                    /* a thread could not start: release the others */
    int paired;                          /* 1: two threads per group pass turns; 0: one does all */
} handoff_run;

typedef struct handoff_thread {
    handoff_run *run;
    int group, which;                    /* which: 0 or 1 in its group */
    float *buf[2];                       /* its own buffer(s): paired uses buf[0] only */
    volatile float sink;
} handoff_thread;

/* One turn's work: a pass over the buffer, a little arithmetic on every element. */
static void work(float *b)
{
    float acc = 0;
    for (int i = 0; i < HANDOFF_BUF; i++) {
        b[i] = b[i] * 0.999f + 0.001f;
        acc += b[i];
    }
    b[0] += acc * 1e-30f;
}

static void *thread_main(void *arg)
{
    handoff_thread *t = arg;
    handoff_run *r = t->run;
    if (!r->paired) {
        for (int k = 0; k < HANDOFF_TURNS; k++) work(t->buf[k & 1]);
        return NULL;
    }
    for (int k = t->which; k < HANDOFF_TURNS; k += 2) {
        if (!bt_turns_wait(r->turns[t->group], t->which, k)) break;
        work(t->buf[0]);
        bt_turns_pass(r->turns[t->group], k);
    }
    return NULL;
}

/* Wall ms of one run (paired or not) over `devices` groups, each thread's buffers from bufs. */
static bt_status one_run(int devices, int paired, float **bufs, double *ms)
{
    handoff_run r;
    handoff_thread th[2 * HANDOFF_MAX_DEVICES];
    pthread_t tid[2 * HANDOFF_MAX_DEVICES];
    int owner[HANDOFF_TURNS];
    memset(&r, 0, sizeof r);
    r.paired = paired;
    atomic_init(&r.stop, 0);
    for (int k = 0; k < HANDOFF_TURNS; k++) owner[k] = k % 2;
    bt_status st = BT_OK;
    for (int g = 0; g < devices && paired && st == BT_OK; g++)
        st = bt_turns_create(HANDOFF_TURNS, owner, 2, &r.stop, &r.turns[g]);
    int n = paired ? 2 * devices : devices, started = 0;
    double t0 = bt_now_ms();
    for (int i = 0; i < n && st == BT_OK; i++) {
        int g = paired ? i / 2 : i;
        th[i] = (handoff_thread){.run = &r, .group = g, .which = paired ? i % 2 : 0,
                                 .buf = {bufs[2 * g + (paired ? i % 2 : 0)], bufs[2 * g + 1]}};
        if (pthread_create(&tid[i], NULL, thread_main, &th[i]) != 0) {
            st = bt_error(BT_ERR_BACKEND, "hand-off: pthread_create failed");
            break;
        }
        started++;
    }
    if (st != BT_OK) { /* release the started ones: a paired thread waits for its partner */
        atomic_store(&r.stop, 1);
        for (int g = 0; g < devices; g++) bt_turns_wake(r.turns[g]);
    }
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    *ms = bt_now_ms() - t0;
    for (int g = 0; g < devices; g++) bt_turns_destroy(r.turns[g]);
    return st;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bt_status bt_profile_measure_handoff(int devices, int repeats, double *ms)
{
    if (!ms) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_measure_handoff: ms is NULL");
    *ms = 0;
    if (devices < 1 || devices > HANDOFF_MAX_DEVICES || repeats < 1)
        return bt_error(BT_ERR_INVALID_ARG, "hand-off: %d devices (1 to %d) and %d repeats (>= 1)", devices,
                        HANDOFF_MAX_DEVICES, repeats);
    if (repeats > HANDOFF_MAX_REPEATS) repeats = HANDOFF_MAX_REPEATS;
    float *bufs[2 * HANDOFF_MAX_DEVICES] = {NULL};
    double paired[HANDOFF_MAX_REPEATS], alone[HANDOFF_MAX_REPEATS];
    bt_status st = BT_OK;
    for (int i = 0; i < 2 * devices; i++) {
        bufs[i] = malloc(HANDOFF_BUF * sizeof(float));
        if (!bufs[i]) {
            st = bt_error(BT_ERR_NOMEM, "hand-off: out of memory");
            goto out;
        }
        for (int k = 0; k < HANDOFF_BUF; k++) bufs[i][k] = (float)(k % 7);
    }
    double warm;
    BT_TRY_GOTO(st, one_run(devices, 0, bufs, &warm), out);
    for (int k = 0; k < repeats; k++) {
        BT_TRY_GOTO(st, one_run(devices, 1, bufs, &paired[k]), out);
        BT_TRY_GOTO(st, one_run(devices, 0, bufs, &alone[k]), out);
    }
    qsort(paired, (size_t)repeats, sizeof *paired, cmp_double);
    qsort(alone, (size_t)repeats, sizeof *alone, cmp_double);
    double d = (paired[repeats / 2] - alone[repeats / 2]) / HANDOFF_TURNS;
    *ms = d > 0 ? d : 0;
out:
    for (int i = 0; i < 2 * devices; i++) free(bufs[i]);
    return st;
}
