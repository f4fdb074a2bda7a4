/* dist/comm_mpi.c: the communicator API over MPI (built when configure found Open MPI; see
 * comm_stub.c otherwise). Every communicator returns errors (MPI_ERRORS_RETURN) and every failed
 * call becomes BT_ERR_BACKEND with the call's name and MPI_Error_string's message. The process asks
 * for MPI_THREAD_MULTIPLE: a stage's worker thread sends, receives and reduces while the host thread
 * reduces the loss between steps. Waits poll MPI_Test (MPI progresses only inside MPI calls),
 * yielding the core between tests for the first 50 ms, then sleeping 100 us between them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

#include <mpi.h>

#include "core/error.h"
#include "core/util.h"
#include "dist/dist.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((bt_comm_req *)0)->opaque), "bt_comm_req holds an MPI_Request");

/* How long a wait polls MPI without sleeping (ms). */
#define BT_COMM_SPIN_MS 50.0

struct bt_comm {
    MPI_Comm comm;
};

static MPI_Request *req_of(bt_comm_req *r) { return (MPI_Request *)(void *)r->opaque; }

static bt_status mpi_fail(int rc, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    return bt_error(BT_ERR_BACKEND, "MPI: %s failed: %s (error %d)", call, len ? msg : "unknown error", rc);
}

#define MPI_TRY(call)                                        \
    do {                                                     \
        int bt_mpi_rc_ = (call);                             \
        if (bt_mpi_rc_ != MPI_SUCCESS) return mpi_fail(bt_mpi_rc_, #call); \
    } while (0)

int bt_dist_built(void) { return 1; }

bt_status bt_dist_init(int *rank, int *size)
{
    int up = 0;
    MPI_Initialized(&up);
    if (!up) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Init_thread");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        if (provided < MPI_THREAD_MULTIPLE)
            return bt_error(BT_ERR_UNSUPPORTED,
                            "MPI: this MPI library gives thread level %d, baton needs MPI_THREAD_MULTIPLE (%d)",
                            provided, MPI_THREAD_MULTIPLE);
    }
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, rank));
    MPI_TRY(MPI_Comm_size(MPI_COMM_WORLD, size));
    return BT_OK;
}

void bt_dist_finalize(void)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Finalize();
}

void bt_dist_abort(int code)
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Abort(MPI_COMM_WORLD, code);
}

static bt_status wrap(MPI_Comm comm, bt_comm **out)
{
    bt_comm *c = calloc(1, sizeof *c);
    if (!c) {
        MPI_Comm_free(&comm);
        return bt_error(BT_ERR_NOMEM, "MPI: out of memory");
    }
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    c->comm = comm;
    *out = c;
    return BT_OK;
}

bt_status bt_comm_world(bt_comm **out)
{
    MPI_Comm comm;
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    return wrap(comm, out);
}

bt_status bt_comm_split(const bt_comm *c, int color, int key, bt_comm **out)
{
    MPI_Comm comm;
    MPI_TRY(MPI_Comm_split(c->comm, color, key, &comm));
    return wrap(comm, out);
}

void bt_comm_free(bt_comm *c)
{
    if (!c) return;
    int down = 0;
    MPI_Finalized(&down);
    if (!down) MPI_Comm_free(&c->comm);
    free(c);
}

int bt_comm_rank(const bt_comm *c)
{
    int r = -1;
    MPI_Comm_rank(c->comm, &r);
    return r;
}

int bt_comm_size(const bt_comm *c)
{
    int n = 0;
    MPI_Comm_size(c->comm, &n);
    return n;
}

static bt_status check_count(size_t n, const char *what)
{
    if (n > (size_t)INT32_MAX)
        return bt_error(BT_ERR_UNSUPPORTED, "MPI: %s of %zu elements is over MPI's int count", what, n);
    return BT_OK;
}

bt_status bt_comm_isend(const bt_comm *c, const void *buf, size_t bytes, int peer, int tag, bt_comm_req *req)
{
    BT_TRY(check_count(bytes, "a message"));
    MPI_TRY(MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, tag, c->comm, req_of(req)));
    req->active = 1;
    return BT_OK;
}

bt_status bt_comm_irecv(const bt_comm *c, void *buf, size_t bytes, int peer, int tag, bt_comm_req *req)
{
    BT_TRY(check_count(bytes, "a message"));
    MPI_TRY(MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, tag, c->comm, req_of(req)));
    req->active = 1;
    return BT_OK;
}

bt_status bt_comm_test(bt_comm_req *req, int *done)
{
    *done = 1;
    if (!req->active) return BT_OK;
    int flag = 0;
    MPI_TRY(MPI_Test(req_of(req), &flag, MPI_STATUS_IGNORE));
    if (flag) req->active = 0;
    *done = flag;
    return BT_OK;
}

bt_status bt_comm_wait(bt_comm_req *req, double timeout_s, atomic_bool *abort)
{
    double t0 = bt_now_ms(), limit = timeout_s * 1000.0;
    for (;;) {
        int done = 0;
        BT_TRY(bt_comm_test(req, &done));
        if (done) return BT_OK;
        if (abort && atomic_load(abort)) return BT_ERR_INTERNAL;
        double waited = bt_now_ms() - t0;
        if (waited > limit) return BT_ERR_TIMEOUT;
        /* MPI moves a non-blocking collective on only inside MPI calls: test again at once for the
         * first BT_COMM_SPIN_MS (yielding the core to any other runnable thread), then every
         * 100 us, so a long wait (a pipeline bubble, a lost rank) does not burn a core */
        if (waited < BT_COMM_SPIN_MS) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
}

void bt_comm_cancel(bt_comm_req *req)
{
    if (!req->active) return;
    MPI_Cancel(req_of(req));
    MPI_Request_free(req_of(req));
    req->active = 0;
}

static MPI_Datatype mpi_type(bt_dtype dtype) { return dtype == BT_F64 ? MPI_DOUBLE : MPI_FLOAT; }

bt_status bt_comm_iallreduce_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, bt_comm_req *req)
{
    BT_TRY(check_count(count, "an all-reduce"));
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), MPI_SUM, c->comm, req_of(req)));
    req->active = 1;
    return BT_OK;
}

/* Waits for a collective started on req; a timeout names it (and leaves the request behind: the
 * job is over once a collective timed out). */
static bt_status finish(bt_comm_req *req, double timeout_s, atomic_bool *abort, const char *what)
{
    bt_status s = bt_comm_wait(req, timeout_s, abort);
    if (s == BT_ERR_TIMEOUT)
        return bt_error(s, "watchdog: MPI %s did not complete within %.1f s: a rank of the job is lost or stuck",
                        what, timeout_s);
    return s;
}

bt_status bt_comm_allreduce_f64(const bt_comm *c, double *buf, int count, double timeout_s)
{
    bt_comm_req req = {{0}, 0};
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, c->comm, req_of(&req)));
    req.active = 1;
    return finish(&req, timeout_s, NULL, "all-reduce");
}

bt_status bt_comm_minmax_u64(const bt_comm *c, uint64_t v, uint64_t *min, uint64_t *max, double timeout_s)
{
    uint64_t lo = v, hi = v;
    bt_comm_req a = {{0}, 0}, b = {{0}, 0};
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, c->comm, req_of(&a)));
    a.active = 1;
    BT_TRY(finish(&a, timeout_s, NULL, "all-reduce (min)"));
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, c->comm, req_of(&b)));
    b.active = 1;
    BT_TRY(finish(&b, timeout_s, NULL, "all-reduce (max)"));
    *min = lo;
    *max = hi;
    return BT_OK;
}

bt_status bt_comm_allgather_f64(const bt_comm *c, double v, double *out, double timeout_s, atomic_bool *abort)
{
    bt_comm_req req = {{0}, 0};
    double send = v;
    MPI_TRY(MPI_Iallgather(&send, 1, MPI_DOUBLE, out, 1, MPI_DOUBLE, c->comm, req_of(&req)));
    req.active = 1;
    return bt_comm_wait(&req, timeout_s, abort); /* the caller names what it waited for */
}

bt_status bt_comm_allgather_bytes(const bt_comm *c, const void *send, size_t bytes, void *recv, double timeout_s)
{
    BT_TRY(check_count(bytes, "an all-gather"));
    bt_comm_req req = {{0}, 0};
    MPI_TRY(MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm, req_of(&req)));
    req.active = 1;
    return finish(&req, timeout_s, NULL, "all-gather");
}

bt_status bt_comm_reduce_scatter_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, double timeout_s)
{
    BT_TRY(check_count(count, "a reduce-scatter"));
    size_t esz = dtype == BT_F64 ? 8 : 4;
    int r = bt_comm_rank(c);
    bt_comm_req req = {{0}, 0};
    MPI_TRY(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), MPI_SUM, c->comm,
                                      req_of(&req)));
    req.active = 1;
    BT_TRY(finish(&req, timeout_s, NULL, "reduce-scatter"));
    /* MPI leaves the result at the start of buf; move it to block r */
    if (r > 0) memmove((char *)buf + (size_t)r * count * esz, buf, count * esz);
    return BT_OK;
}

bt_status bt_comm_bcast(const bt_comm *c, void *buf, size_t bytes, int root, double timeout_s)
{
    BT_TRY(check_count(bytes, "a broadcast"));
    bt_comm_req req = {{0}, 0};
    MPI_TRY(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, c->comm, req_of(&req)));
    req.active = 1;
    return finish(&req, timeout_s, NULL, "broadcast");
}

bt_status bt_comm_ireduce_scatter_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, bt_comm_req *req)
{
    BT_TRY(check_count(count, "a reduce-scatter"));
    MPI_TRY(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buf, (int)count, mpi_type(dtype), MPI_SUM, c->comm,
                                      req_of(req)));
    req->active = 1;
    return BT_OK;
}

bt_status bt_comm_allgather_inplace(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, double timeout_s)
{
    BT_TRY(check_count(count, "an all-gather"));
    bt_comm_req req = {{0}, 0};
    MPI_TRY(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, (int)count, mpi_type(dtype), c->comm,
                           req_of(&req)));
    req.active = 1;
    return finish(&req, timeout_s, NULL, "all-gather");
}

bt_status bt_comm_gather_bytes(const bt_comm *c, const void *send, size_t bytes, int root, void **recv,
                               size_t *counts, double timeout_s)
{
    BT_TRY(check_count(bytes, "a gather"));
    int n = bt_comm_size(c), me = bt_comm_rank(c);
    if (recv) *recv = NULL;
    int mine = (int)bytes, *len = NULL, *at = NULL;
    unsigned char *all = NULL;
    bt_comm_req req = {{0}, 0};
    bt_status st = BT_OK;
    if (me == root) {
        len = calloc((size_t)n, sizeof *len);
        at = calloc((size_t)n, sizeof *at);
        if (!len || !at) {
            st = bt_error(BT_ERR_NOMEM, "MPI: out of memory for a gather");
            goto done;
        }
    }
    int rc = MPI_Igather(&mine, 1, MPI_INT, len, 1, MPI_INT, root, c->comm, req_of(&req));
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Igather");
        goto done;
    }
    req.active = 1;
    BT_TRY_GOTO(st, finish(&req, timeout_s, NULL, "gather (sizes)"), done);
    size_t total = 0;
    if (me == root) {
        for (int r = 0; r < n; r++) {
            if (total + (size_t)len[r] > (size_t)INT32_MAX) {
                st = bt_error(BT_ERR_UNSUPPORTED, "MPI: a gather of more than %d bytes", INT32_MAX);
                goto done;
            }
            at[r] = (int)total;
            total += (size_t)len[r];
            if (counts) counts[r] = (size_t)len[r];
        }
        all = malloc(total + 1);
        if (!all) {
            st = bt_error(BT_ERR_NOMEM, "MPI: out of memory for a gather of %zu bytes", total);
            goto done;
        }
    }
    rc = MPI_Igatherv(send, mine, MPI_BYTE, all, len, at, MPI_BYTE, root, c->comm, req_of(&req));
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Igatherv");
        goto done;
    }
    req.active = 1;
    BT_TRY_GOTO(st, finish(&req, timeout_s, NULL, "gather"), done);
    if (me == root) {
        *recv = all;
        all = NULL;
    }
done:
    free(all);
    free(len);
    free(at);
    return st;
}

bt_status bt_comm_node_leader(const bt_comm *c, int *leader, double timeout_s)
{
    MPI_Comm node;
    int me = 0;
    MPI_TRY(MPI_Comm_rank(MPI_COMM_WORLD, &me));
    MPI_TRY(MPI_Comm_split_type(c->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_Comm_set_errhandler(node, MPI_ERRORS_RETURN);
    int low = me;
    bt_comm_req req = {{0}, 0};
    int rc = MPI_Iallreduce(MPI_IN_PLACE, &low, 1, MPI_INT, MPI_MIN, node, req_of(&req));
    bt_status st = BT_OK;
    if (rc != MPI_SUCCESS) st = mpi_fail(rc, "MPI_Iallreduce");
    else {
        req.active = 1;
        st = finish(&req, timeout_s, NULL, "all-reduce (the machine's lowest rank)");
    }
    MPI_Comm_free(&node);
    *leader = low;
    return st;
}

bt_status bt_comm_barrier(const bt_comm *c, double timeout_s)
{
    bt_comm_req req = {{0}, 0};
    MPI_TRY(MPI_Ibarrier(c->comm, req_of(&req)));
    req.active = 1;
    return finish(&req, timeout_s, NULL, "barrier");
}

struct bt_shm_win {
    MPI_Win win;
    int n, locked;
    void **base;               /* [n] each rank's segment here */
};

bt_status bt_shm_win_alloc(const bt_comm *c, size_t bytes, double timeout_s, bt_shm_win **out)
{
    *out = NULL;
    if (bytes > (size_t)INT64_MAX / 2) return bt_error(BT_ERR_UNSUPPORTED, "MPI: a shared window of %zu bytes", bytes);
    bt_shm_win *w = calloc(1, sizeof *w);
    if (!w) return bt_error(BT_ERR_NOMEM, "MPI: out of memory");
    w->win = MPI_WIN_NULL;
    w->n = bt_comm_size(c);
    w->base = calloc((size_t)w->n, sizeof *w->base);
    bt_status st = BT_OK;
    MPI_Info info = MPI_INFO_NULL;
    if (!w->base) {
        st = bt_error(BT_ERR_NOMEM, "MPI: out of memory");
        goto fail;
    }
    /* each rank's segment on its own pages (first touched by its owner), not one block */
    if (MPI_Info_create(&info) == MPI_SUCCESS) MPI_Info_set(info, "alloc_shared_noncontig", "true");
    void *mine = NULL;
    size_t size = (bytes + 63) / 64 * 64 + 64; /* room to align the start to 64 bytes */
    int rc = MPI_Win_allocate_shared((MPI_Aint)size, 1, info, c->comm, &mine, &w->win);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Win_allocate_shared");
        w->win = MPI_WIN_NULL;
        goto fail;
    }
    MPI_Win_set_errhandler(w->win, MPI_ERRORS_RETURN);
    for (int r = 0; r < w->n; r++) {
        MPI_Aint got = 0;
        int unit = 0;
        void *at = NULL;
        rc = MPI_Win_shared_query(w->win, r, &got, &unit, &at);
        if (rc != MPI_SUCCESS) {
            st = mpi_fail(rc, "MPI_Win_shared_query");
            goto fail;
        }
        w->base[r] = (void *)(((uintptr_t)at + 63) & ~(uintptr_t)63);
    }
    memset(w->base[bt_comm_rank(c)], 0, bytes);
    rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, w->win);
    if (rc != MPI_SUCCESS) {
        st = mpi_fail(rc, "MPI_Win_lock_all");
        goto fail;
    }
    w->locked = 1;
    MPI_Win_sync(w->win);
    BT_TRY_GOTO(st, bt_comm_barrier(c, timeout_s), fail); /* every segment zeroed before any is read */
    MPI_Win_sync(w->win);
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    *out = w;
    return BT_OK;
fail:
    if (info != MPI_INFO_NULL) MPI_Info_free(&info);
    bt_shm_win_free(w);
    return st;
}

void *bt_shm_win_base(const bt_shm_win *w, int r) { return w->base[r]; }

void bt_shm_win_sync(const bt_shm_win *w) { MPI_Win_sync(w->win); }

void bt_shm_win_free(bt_shm_win *w)
{
    if (!w) return;
    int down = 0;
    MPI_Finalized(&down);
    if (!down && w->locked) MPI_Win_unlock_all(w->win);
    if (!down && w->win != MPI_WIN_NULL) MPI_Win_free(&w->win);
    free(w->base);
    free(w);
}
