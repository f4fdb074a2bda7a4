/* dist/clock.c: measuring clocks and links between ranks with ping-pongs, on the communicator API
 * (so it builds without MPI too, where every call refuses as the API does).
 *
 *   clock sync   Cristian's algorithm: rank r sends root a ping at t1 (its clock), root answers
 *                with its own clock T, r receives at t2; root's clock then read T at a moment
 *                within [t1, t2] of r's, so offset = T - (t1 + t2) / 2 is off by at most
 *                (t2 - t1) / 2. The round with the shortest round trip wins (the least queueing).
 *                Root serves the ranks one after another, so no two pings share root's attention.
 *   link         half the median round trip of a message of `bytes` bytes each way, after one
 *                untimed round (connection set-up, first-touch of the buffers).
 *
 * Tags are this file's own; callers give it a communicator nothing else uses at the same time
 * (the CLI duplicates the world for it). Sits in dist (includes core only). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "dist/dist.h"

enum { TAG_PING = 101, TAG_PONG = 102, TAG_LINK = 103 };

/* A blocking exchange on top of the non-blocking calls, bounded by the watchdog. */
static bt_status send_wait(const bt_comm *c, const void *buf, size_t n, int peer, int tag, double timeout_s)
{
    bt_comm_req req = {{0}, 0};
    BT_TRY(bt_comm_isend(c, buf, n, peer, tag, &req));
    bt_status s = bt_comm_wait(&req, timeout_s, NULL);
    if (s == BT_ERR_TIMEOUT)
        return bt_error(s, "watchdog: a ping-pong message to rank %d was not taken within %.1f s", peer, timeout_s);
    return s;
}

static bt_status recv_wait(const bt_comm *c, void *buf, size_t n, int peer, int tag, double timeout_s)
{
    bt_comm_req req = {{0}, 0};
    BT_TRY(bt_comm_irecv(c, buf, n, peer, tag, &req));
    bt_status s = bt_comm_wait(&req, timeout_s, NULL);
    if (s == BT_ERR_TIMEOUT) {
        bt_comm_cancel(&req);
        return bt_error(s, "watchdog: no ping-pong answer from rank %d within %.1f s", peer, timeout_s);
    }
    return s;
}

bt_status bt_dist_clock_sync(const bt_comm *c, int root, int rounds, double timeout_s, bt_clock_sync *out)
{
    memset(out, 0, sizeof *out);
    if (rounds < 1) return bt_error(BT_ERR_INVALID_ARG, "clock sync: rounds %d < 1", rounds);
    int me = bt_comm_rank(c), n = bt_comm_size(c);
    if (me == root) {
        for (int r = 0; r < n; r++) {
            if (r == root) continue;
            for (int k = 0; k < rounds; k++) {
                double ping = 0;
                BT_TRY(recv_wait(c, &ping, sizeof ping, r, TAG_PING, timeout_s));
                double now = bt_now_ms();
                BT_TRY(send_wait(c, &now, sizeof now, r, TAG_PONG, timeout_s));
            }
        }
        return BT_OK;
    }
    double best_rtt = INFINITY, best_offset = 0;
    for (int k = 0; k < rounds; k++) {
        double t1 = bt_now_ms(), theirs = 0;
        BT_TRY(send_wait(c, &t1, sizeof t1, root, TAG_PING, timeout_s));
        BT_TRY(recv_wait(c, &theirs, sizeof theirs, root, TAG_PONG, timeout_s));
        double t2 = bt_now_ms();
        if (t2 - t1 < best_rtt) {
            best_rtt = t2 - t1;
            best_offset = theirs - 0.5 * (t1 + t2);
        }
    }
    out->offset_ms = best_offset;
    out->rtt_ms = best_rtt;
    out->uncertainty_ms = 0.5 * best_rtt;
    return BT_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

bt_status bt_dist_link_pingpong(const bt_comm *c, int a, int b, size_t bytes, int reps, double timeout_s,
                                double *oneway_ms)
{
    *oneway_ms = 0;
    int me = bt_comm_rank(c);
    if (me != a && me != b) return BT_OK;
    if (a == b || reps < 1) return bt_error(BT_ERR_INVALID_ARG, "link ping-pong: ranks %d and %d, %d rounds", a, b, reps);
    unsigned char *buf = calloc(1, bytes ? bytes : 1);
    double *rtt = calloc((size_t)reps, sizeof *rtt);
    bt_status st = BT_OK;
    if (!buf || !rtt) {
        st = bt_error(BT_ERR_NOMEM, "link ping-pong: out of memory for %zu bytes", bytes);
        goto done;
    }
    int peer = me == a ? b : a;
    for (int k = -1; k < reps; k++) { /* round -1 is untimed */
        double t0 = bt_now_ms();
        if (me == a) {
            BT_TRY_GOTO(st, send_wait(c, buf, bytes, peer, TAG_LINK, timeout_s), done);
            BT_TRY_GOTO(st, recv_wait(c, buf, bytes, peer, TAG_LINK, timeout_s), done);
        } else {
            BT_TRY_GOTO(st, recv_wait(c, buf, bytes, peer, TAG_LINK, timeout_s), done);
            BT_TRY_GOTO(st, send_wait(c, buf, bytes, peer, TAG_LINK, timeout_s), done);
        }
        if (k >= 0) rtt[k] = bt_now_ms() - t0;
    }
    qsort(rtt, (size_t)reps, sizeof *rtt, cmp_double);
    *oneway_ms = 0.5 * (reps % 2 ? rtt[reps / 2] : 0.5 * (rtt[reps / 2 - 1] + rtt[reps / 2]));
done:
    free(buf);
    free(rtt);
    return st;
}
