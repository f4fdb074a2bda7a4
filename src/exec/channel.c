/* exec/channel.c: a one-way, one-step mailbox between two stages. The sender queues the copy of a
 * micro-batch (transfer.c) and posts it; the receiver waits for that micro-batch and clears it.
 * A slot per micro-batch means a send never blocks, which is the assumption the schedule
 * validator proves deadlock-freedom under. Waits are bounded: past the watchdog timeout the
 * receiver gives up with BT_ERR_TIMEOUT, and an abort wakes every waiter. A wait that fails
 * for any other reason returns that error at once (BT_ERR_BACKEND): it is never retried.
 *
 * Threading: `ready[mb]` is a C11 atomic, stored with release order by the sender (under the
 * mutex, so a sleeping receiver cannot miss it) and loaded with acquire order by a spinning
 * receiver; the engine's abort flag is a C11 atomic too. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "exec/exec_internal.h"

bt_status bt_channel_init(bt_channel *ch, int from, int to, int grad, int microbatches)
{
    ch->from = from;
    ch->to = to;
    ch->grad = grad;
    ch->microbatches = microbatches;
    ch->last_sent = -1;
    ch->last_sent_chunk = 1;
    ch->ready = malloc((size_t)microbatches * sizeof *ch->ready);
    if (!ch->ready) return bt_error(BT_ERR_NOMEM, "channel: out of memory");
    for (int mb = 0; mb < microbatches; mb++) atomic_init(&ch->ready[mb], 0);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&ch->mu, NULL);
    pthread_cond_init(&ch->cv, &attr);
    pthread_condattr_destroy(&attr);
    ch->sync_ready = 1;
    return BT_OK;
}

void bt_channel_destroy(bt_channel *ch)
{
    if (!ch) return;
    if (ch->sync_ready) {
        pthread_mutex_destroy(&ch->mu);
        pthread_cond_destroy(&ch->cv);
    }
    free(ch->ready);
}

void bt_channel_post(bt_channel *ch, int mb)
{
    pthread_mutex_lock(&ch->mu);
    atomic_store_explicit(&ch->ready[mb], 1, memory_order_release);
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
}

/* Spins up to BT_CHANNEL_SPIN_NS for a message before sleeping: a hand-off between stages on
 * their own cores then costs a cache-line transfer instead of a futex wake-up. */
#define BT_CHANNEL_SPIN_NS 50000

static int spin_for(const bt_engine *e, const bt_channel *ch, int mb)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0;; i++) {
        if (atomic_load_explicit(&ch->ready[mb], memory_order_acquire) || atomic_load(&e->abort)) return 1;
        if ((i & 63) == 63) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > BT_CHANNEL_SPIN_NS)
                return 0;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* The absolute CLOCK_MONOTONIC time timeout_s from now. The engine validates the watchdog
 * (0 < timeout_s <= BT_WATCHDOG_MAX_S); the clamp keeps the arithmetic defined for any double, so
 * the deadline is always a valid timespec (NaN and negative: now; beyond the maximum: the maximum). */
static struct timespec deadline_after(double timeout_s)
{
    if (!(timeout_s > 0)) timeout_s = 0;
    if (timeout_s > BT_WATCHDOG_MAX_S) timeout_s = BT_WATCHDOG_MAX_S;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    double whole = floor(timeout_s);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    return deadline;
}

bt_status bt_channel_wait(bt_engine *e, bt_channel *ch, int mb, double timeout_s)
{
    spin_for(e, ch, mb);
    struct timespec deadline = deadline_after(timeout_s);
    bt_status st = BT_OK;
    int rc = 0;
    pthread_mutex_lock(&ch->mu);
    while (!atomic_load(&ch->ready[mb]) && !atomic_load(&e->abort)) {
        rc = pthread_cond_timedwait(&ch->cv, &ch->mu, &deadline);
        if (rc == 0) continue;
        if (atomic_load(&ch->ready[mb])) break;
        /* a timeout, or an error (never retried: a wait that fails at once would spin holding
         * the mutex the sender needs) */
        st = rc == ETIMEDOUT ? BT_ERR_TIMEOUT : BT_ERR_BACKEND;
        break;
    }
    if (st == BT_OK && !atomic_load(&ch->ready[mb])) st = BT_ERR_INTERNAL; /* aborted by another stage */
    if (st == BT_OK) atomic_store(&ch->ready[mb], 0);
    pthread_mutex_unlock(&ch->mu);
    if (st == BT_ERR_BACKEND) return bt_error(st, "pthread_cond_timedwait: %s", strerror(rc));
    return st;
}

void bt_channels_wake_all(bt_engine *e)
{
    for (int c = 0; c < e->n_channels; c++) {
        bt_channel *ch = &e->channels[c];
        pthread_mutex_lock(&ch->mu);
        pthread_cond_broadcast(&ch->cv);
        pthread_mutex_unlock(&ch->mu);
    }
}
