/* core/turns.c: the turn hand-off (turns.h). One atomic counter per sequence, one condition
 * variable per thread slot, one mutex guarding the sleepers' state. A pass stores the counter and,
 * when the next turn belongs to another slot, signals that slot alone; a wait returns at once when
 * its turn has come (a thread running consecutive turns never touches the mutex), else sleeps on
 * its own condition variable, re-checking every BT_TURNS_POLL_NS.
 *
 * Why no spin, and why the bounded sleep (measured on the 2-core machine under load 12-17,
 * bench_schedules' interleaved trace, alternating runs; bench/RESULTS.md): a spinning waiter holds
 * the core its own device's next thread needs (the threads outnumber the cores), and a thread
 * that slept through a whole unit waited longer in the run queue once signalled (gap median
 * 10-16 ms against 1.2-7 ms for the old broadcast, which woke every sleeper at every pass) than
 * one that wakes every 200 us to look (1.8-2.3 ms). On a quiet machine the signal wakes it at
 * once and the re-checks cost a few microseconds each.
 *
 * Data flow: exec/worker.c (wait_turn / pass_turn) and profile/handoff.c (its measurement). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/turns.h"

#define BT_TURNS_POLL_NS 200000

struct bt_turns {
    atomic_int turn;      /* the turn that may run now */
    int n, n_slots;
    int *owner;           /* [n] */
    int *sleeping;        /* [n_slots] the turn a slot sleeps for, -1: awake (under mu) */
    const atomic_bool *abort;
    pthread_mutex_t mu;
    pthread_cond_t *cv;   /* [n_slots] */
    int n_cv;             /* condition variables initialised (destroy) */
    int mu_ready;
};

static int aborted(const bt_turns *t)
{
    return t->abort && atomic_load(t->abort);
}

bt_status bt_turns_create(int n, const int *owner, int n_slots, const atomic_bool *abort, bt_turns **out)
{
    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_turns_create: out is NULL");
    *out = NULL;
    if (n < 0 || n_slots < 1 || (n > 0 && !owner))
        return bt_error(BT_ERR_INVALID_ARG, "bt_turns_create: %d turns over %d slots", n, n_slots);
    for (int k = 0; k < n; k++)
        if (owner[k] < 0 || owner[k] >= n_slots)
            return bt_error(BT_ERR_INVALID_ARG, "bt_turns_create: turn %d belongs to slot %d (0..%d)", k, owner[k],
                            n_slots - 1);
    bt_turns *t = calloc(1, sizeof *t);
    if (!t) return bt_error(BT_ERR_NOMEM, "turns: out of memory");
    t->n = n;
    t->n_slots = n_slots;
    t->abort = abort;
    atomic_init(&t->turn, 0);
    t->owner = malloc((size_t)(n > 0 ? n : 1) * sizeof *t->owner);
    t->sleeping = malloc((size_t)n_slots * sizeof *t->sleeping);
    t->cv = calloc((size_t)n_slots, sizeof *t->cv);
    if (!t->owner || !t->sleeping || !t->cv) goto nomem;
    if (n > 0) memcpy(t->owner, owner, (size_t)n * sizeof *owner);
    for (int k = 0; k < n_slots; k++) t->sleeping[k] = -1;
    if (pthread_mutex_init(&t->mu, NULL) != 0) goto nomem;
    t->mu_ready = 1;
    pthread_condattr_t attr; /* the re-check deadline is on CLOCK_MONOTONIC */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    for (; t->n_cv < n_slots; t->n_cv++)
        if (pthread_cond_init(&t->cv[t->n_cv], &attr) != 0) break;
    pthread_condattr_destroy(&attr);
    if (t->n_cv < n_slots) goto nomem;
    *out = t;
    return BT_OK;
nomem:
    bt_turns_destroy(t);
    return bt_error(BT_ERR_NOMEM, "turns: out of memory (or of synchronisation objects)");
}

void bt_turns_destroy(bt_turns *t)
{
    if (!t) return;
    for (int k = 0; k < t->n_cv; k++) pthread_cond_destroy(&t->cv[k]);
    if (t->mu_ready) pthread_mutex_destroy(&t->mu);
    free(t->cv);
    free(t->sleeping);
    free(t->owner);
    free(t);
}

void bt_turns_reset(bt_turns *t)
{
    atomic_store(&t->turn, 0);
}

int bt_turns_wait(bt_turns *t, int slot, int turn)
{
    if (atomic_load_explicit(&t->turn, memory_order_acquire) == turn) return 1;
    pthread_mutex_lock(&t->mu);
    t->sleeping[slot] = turn;
    while (atomic_load_explicit(&t->turn, memory_order_acquire) != turn && !aborted(t)) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += BT_TURNS_POLL_NS;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cv[slot], &t->mu, &until); /* signalled, or time to look again */
    }
    t->sleeping[slot] = -1;
    pthread_mutex_unlock(&t->mu);
    return atomic_load_explicit(&t->turn, memory_order_acquire) == turn;
}

void bt_turns_pass(bt_turns *t, int turn)
{
    int next = turn + 1;
    atomic_store_explicit(&t->turn, next, memory_order_release);
    if (next >= t->n || t->owner[next] == t->owner[turn]) return; /* the passer runs it: nobody sleeps for it */
    int k = t->owner[next];
    pthread_mutex_lock(&t->mu);
    if (t->sleeping[k] == next) pthread_cond_signal(&t->cv[k]);
    pthread_mutex_unlock(&t->mu);
}

void bt_turns_wake(bt_turns *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    for (int k = 0; k < t->n_slots; k++) pthread_cond_broadcast(&t->cv[k]);
    pthread_mutex_unlock(&t->mu);
}
