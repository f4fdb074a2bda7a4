/* core/turns.h: threads taking turns in a known order (a device's stage threads under interleaved
 * 1F1B or ZBV, and the hand-off measurement in profile/handoff.c, which must time the same thing).
 *
 * A bt_turns is one sequence of n turns, turn t belonging to one of n_slots threads (owner[t]).
 * The counter is an atomic; the thread whose turn comes next is the only one signalled (its own
 * condition variable), so a hand-off never wakes the other threads (no thundering herd); a
 * sleeping waiter also looks again every 200 us (turns.c says why: measured). Every wait also
 * stops when *abort becomes true; bt_turns_wake wakes every sleeper after the caller raised it.
 *
 * Threading: the counter is stored with release order by the thread passing the turn and loaded
 * with acquire order by the waiter, so what the previous turn wrote is visible to the next; a
 * sleeper publishes the turn it sleeps for under the mutex, and a pass signals under it. */
#ifndef BT_CORE_TURNS_H
#define BT_CORE_TURNS_H

#include <stdatomic.h>

#include "baton/status.h"

typedef struct bt_turns bt_turns;

/* n turns, owner[t] in 0..n_slots-1 the thread slot that runs turn t (copied); abort is read by
 * every wait (not owned; NULL: never). Caller owns *out. */
bt_status bt_turns_create(int n, const int *owner, int n_slots, const atomic_bool *abort, bt_turns **out);
void bt_turns_destroy(bt_turns *t);
/* Back to turn 0. Only while no thread waits (between jobs). */
void bt_turns_reset(bt_turns *t);
/* Blocks slot until the counter reaches turn: 1 then, 0 when *abort was raised first. */
int bt_turns_wait(bt_turns *t, int slot, int turn);
/* Hands turn on (the counter becomes turn + 1), waking the next turn's owner only. Called by the
 * thread that holds turn. */
void bt_turns_pass(bt_turns *t, int turn);
/* Wakes every sleeper (they re-check the counter and *abort). */
void bt_turns_wake(bt_turns *t);

#endif
