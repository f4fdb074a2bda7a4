/* exec/dist_shm.c: the data-parallel reduction of a CPU stage whose replicas share one machine,
 * through shared memory instead of MPI messages (the `shm` path; dist_dp.c has the `mpi` one).
 *
 * The replicas of the stage allocate one MPI-3 shared window (MPI_Win_allocate_shared over the
 * stage's replica communicator, after MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) showed that every
 * replica is on this machine); each rank's segment holds its flags, then its gradient arena (the
 * stores' gradients themselves, in bucket order, as dist_dp.c's in-place arena), then (zero) its
 * master weights themselves, packed in bucket order. Each rank loads its peers' memory directly:
 *
 *   reduce-scatter  rank r sums slice r of a bucket over every replica, in replica order (so the
 *                   result is the same on every rank and, for D = 2, a + b exactly as MPI's sum),
 *                   vectorised, into slice r of its own arena;
 *   all-gather      every rank copies the other slices from their owners' arenas (without zero);
 *                   with parallel.zero: 1 each rank updates its slice of the weights in place in
 *                   its segment and copies the others' slices from their segments.
 *
 * Synchronisation is one 64-bit flag per (rank, bucket, phase) in its owner's segment, each on its
 * own cache line, written by its owner only: the step's generation number, stored with release
 * order after MPI_Win_sync, read with acquire order before MPI_Win_sync (C11 atomics, lock-free on
 * every machine this builds for). Phases: ready (the bucket's gradients are final here), reduced
 * (this rank's slice is summed), updated (zero: this rank's weights slice is published), and one
 * `done` per rank (it has finished reading its peers' arenas this step), which a rank waits for
 * before it writes its own gradients again: before it zeroes them for the next step, and before
 * the tied parameters' exchange adds the other copy's gradient into them at STEP (worker_step.c);
 * without zero, one more flag says that the rank has written the sums of squares of its share of
 * the tensors (whole tensors, balanced by size) for the global norm, which every rank then adds
 * in tensor order (the CPU backend's sum_squares term for term: the same bits, half the passes
 * over the gradients). No barrier per bucket: a rank waits only for the flags of the data it is
 * about to read. Waits spin briefly, then yield, then sleep 100 us,
 * bounded by the watchdog (naming the peer rank and what it has not done) and stopped by abort.
 *
 * Chosen per stage by BATON_DP_REDUCE (auto: shm when every replica of a CPU stage is on this
 * machine; mpi; shm: forced, an error naming the ranks when they are not on one machine). */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "the shm path's flags need lock-free 64-bit atomics");

/* flag lines per bucket: ready, reduced, updated; then one `done` line */
enum { F_READY = 0, F_REDUCED = 1, F_UPDATED = 2, F_PER_BUCKET = 3 };
#define LINE 64
/* a wait spins (SPINS pauses between clock reads) for SPIN_MS, then yields the core between
 * looks until YIELD_MS, then sleeps 100 us between them: a peer a few microseconds behind is
 * met without giving the core away, and a lost one does not burn it */
#define SPINS 512
#define SPIN_MS 0.05
#define YIELD_MS 50.0

bt_status bt_dist_reduce_mode_from_env(int *mode)
{
    const char *v = getenv("BATON_DP_REDUCE");
    *mode = BT_DP_REDUCE_AUTO;
    if (!v || !*v || !strcmp(v, "auto")) return BT_OK;
    if (!strcmp(v, "mpi")) *mode = BT_DP_REDUCE_MPI;
    else if (!strcmp(v, "shm")) *mode = BT_DP_REDUCE_SHM;
    else return bt_error(BT_ERR_INVALID_ARG, "BATON_DP_REDUCE must be auto, mpi or shm, not '%s'", v);
    return BT_OK;
}

static const char *mode_name(int m) { return m == BT_DP_REDUCE_MPI ? "mpi" : m == BT_DP_REDUCE_SHM ? "shm" : "auto"; }

static unsigned char *seg(const bt_engine *e, int q) { return e->dist.shm_base[q]; }

static _Atomic uint64_t *flag(const bt_engine *e, int q, int line)
{
    return (_Atomic uint64_t *)(void *)(seg(e, q) + (size_t)line * LINE);
}

static int bucket_line(const bt_engine *e, const bt_dp_bucket *b, int phase)
{
    return (int)(b - e->dist.buckets) * F_PER_BUCKET + phase;
}

static int done_line(const bt_engine *e) { return e->dist.n_buckets * F_PER_BUCKET; }
/* the sums of squares of this rank's share of the tensors are in its segment (without zero) */
static int sq_line(const bt_engine *e) { return e->dist.n_buckets * F_PER_BUCKET + 1; }

static void publish(bt_engine *e, int line)
{
    bt_shm_win_sync(e->dist.shm); /* this rank's stores before the flag that announces them */
    atomic_store_explicit(flag(e, e->dist.layout.replica, line), e->dist.shm_gen, memory_order_release);
}

static int seen(const bt_engine *e, int q, int line)
{
    return atomic_load_explicit(flag(e, q, line), memory_order_acquire) >= e->dist.shm_gen;
}

int bt_dist_shm_sumsq_split(const bt_engine *e) { return e->dist.shm && !e->dist.zero && !e->n_ties; }

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Waits until replica q's flag `line` reaches this step's generation. */
static bt_status wait_flag(bt_engine *e, int q, int line, const char *what, int bucket)
{
    for (int i = 0; i < SPINS; i++) {
        if (seen(e, q, line)) goto seen_it;
        relax();
    }
    double t0 = bt_now_ms();
    const bt_dist_layout *l = &e->dist.layout;
    for (int i = 0; !seen(e, q, line); i++) {
        if (i % SPINS || bt_now_ms() - t0 < SPIN_MS) { /* keep the core a little longer first */
            relax();
            continue;
        }
        if (atomic_load(&e->abort)) return bt_error(BT_ERR_INTERNAL, "stopped at the gradient reduction (another stage failed)");
        double waited = bt_now_ms() - t0;
        if (waited > e->params.watchdog_s * 1000.0) {
            int r = bt_dist_rank_of(l, q, l->stage);
            char b[32] = "";
            if (bucket >= 0) snprintf(b, sizeof b, " of bucket %d", bucket);
            return bt_error(BT_ERR_TIMEOUT,
                            "watchdog: after %.1f s, rank %d (stage %d, replica %d) waits in shared memory for rank %d "
                            "(stage %d, replica %d) to %s%s (lost, or stuck: see that rank's own message)",
                            e->params.watchdog_s, l->rank, l->stage, l->replica, r, l->stage, q, what, b);
        }
        if (waited < YIELD_MS) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
seen_it:
    bt_shm_win_sync(e->dist.shm); /* the peer's stores after its flag */
    return BT_OK;
}

bt_status bt_dist_shm_choose(bt_engine *e, bt_stage *st, int *use)
{
    bt_engine_dist *d = &e->dist;
    const bt_dist_layout *l = &d->layout;
    *use = 0;
    struct pick {
        int leader, mode, cpu;
    } mine = {0, d->reduce_mode, st->be->shares_host_memory ? 1 : 0};
    int D = l->data;
    struct pick *all = calloc((size_t)D, sizeof *all);
    char *names = NULL;
    bt_status s = BT_OK;
    if (!all) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    BT_TRY_GOTO(s, bt_comm_node_leader(d->dp, &mine.leader, e->params.watchdog_s), done);
    BT_TRY_GOTO(s, bt_comm_allgather_bytes(d->dp, &mine, sizeof mine, all, e->params.watchdog_s), done);
    int one_machine = 1, cpu = 1;
    for (int q = 0; q < D; q++) {
        if (all[q].mode != mine.mode) {
            s = bt_error(BT_ERR_INVALID_ARG,
                         "BATON_DP_REDUCE is %s on rank %d but %s on rank %d (stage %d): give every rank the same",
                         mode_name(mine.mode), l->rank, mode_name(all[q].mode), bt_dist_rank_of(l, q, l->stage),
                         l->stage);
            goto done;
        }
        one_machine &= all[q].leader == all[0].leader;
        cpu &= all[q].cpu;
    }
    if (mine.mode == BT_DP_REDUCE_SHM && !cpu) {
        s = bt_error(BT_ERR_INVALID_ARG,
                     "BATON_DP_REDUCE=shm: stage %d runs on %s, whose gradients are not in host memory: the shm "
                     "path reduces CPU stages only (use auto or mpi)",
                     l->stage, st->device_name);
        goto done;
    }
    if (mine.mode == BT_DP_REDUCE_SHM && !one_machine) {
        size_t cap = (size_t)D * 64 + 1;
        names = calloc(1, cap);
        if (!names) {
            s = bt_error(BT_ERR_NOMEM, "engine: out of memory");
            goto done;
        }
        size_t at = 0;
        for (int q = 0; q < D && at < cap; q++)
            at += (size_t)snprintf(names + at, cap - at, "%srank %d on rank %d's machine", q ? ", " : "",
                                   bt_dist_rank_of(l, q, l->stage), all[q].leader);
        s = bt_error(BT_ERR_INVALID_ARG,
                     "BATON_DP_REDUCE=shm: the replicas of stage %d are not all on one machine (%s): shared memory "
                     "cannot reach across machines (use auto or mpi)",
                     l->stage, names);
        goto done;
    }
    *use = mine.mode != BT_DP_REDUCE_MPI && one_machine && cpu;
done:
    free(all);
    free(names);
    return s;
}

/* Where [lo, lo + n) of bucket b's elements is the slice of replica q. */
static void slice_of(const bt_engine *e, const bt_dp_bucket *b, int q, size_t *lo, size_t *n)
{
    size_t region = e->dist.zero ? b->chunk * (size_t)e->dist.layout.data : b->count;
    *lo = (size_t)q * b->shm_slice;
    *n = *lo >= region ? 0 : (region - *lo < b->shm_slice ? region - *lo : b->shm_slice);
    if (*lo > region) *lo = region;
}

/* Which replica sums the squares of each tensor: the largest first, each to the replica with the
 * fewest elements so far (a tensor is never split: its sum must be the backend's, bit for bit).
 * The same on every rank (sizes and order are). */
static bt_status share_sumsq(bt_engine *e, bt_stage *st)
{
    int D = e->dist.layout.data, n = st->n_params;
    size_t *load = calloc((size_t)D, sizeof *load);
    unsigned char *done = calloc((size_t)n + 1, 1);
    if (!load || !done) {
        free(load);
        free(done);
        return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    }
    for (int k = 0; k < n; k++) {
        int big = -1, to = 0;
        for (int i = 0; i < n; i++)
            if (!done[i] && (big < 0 || st->sq_n[i] > st->sq_n[big])) big = i;
        for (int q = 1; q < D; q++)
            if (load[q] < load[to]) to = q;
        done[big] = 1;
        e->dist.shm_sq_owner[big] = to;
        load[to] += st->sq_n[big];
    }
    free(load);
    free(done);
    return BT_OK;
}

bt_status bt_dist_shm_setup(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype), align = LINE / dsz, D = (size_t)d->layout.data;
    size_t at = (size_t)(d->n_buckets * F_PER_BUCKET + 2) * LINE, padded = 0;
    if (!d->zero) { /* each tensor's sum of squares, computed by one replica (bt_dist_shm_sumsq) */
        d->shm_sq_off = at;
        at += ((size_t)st->n_params * sizeof(double) + LINE - 1) / LINE * LINE;
        if (!(d->shm_sq_owner = calloc((size_t)st->n_params + 1, sizeof *d->shm_sq_owner)))
            return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    }
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        b->shm_off = at;
        if (d->zero) { /* stores packed (the shards' offsets, dist_dp.c), D chunks */
            b->shm_slice = b->chunk;
            at += (b->chunk * D * dsz + LINE - 1) / LINE * LINE;
        } else { /* each store 64-byte aligned, as dist_dp.c's in-place arena; slices of whole lines */
            b->count = 0;
            for (int j = 0; j < b->n; j++)
                b->count += (st->params[d->order[b->first + j]].numel + align - 1) / align * align;
            size_t per = (b->count + D - 1) / D;
            b->shm_slice = (per + align - 1) / align * align;
            at += b->count * dsz;
        }
    }
    for (int bi = 0; d->zero && bi < d->n_buckets; bi++) {
        d->buckets[bi].shm_woff = at;
        at += (d->buckets[bi].chunk * D * dsz + LINE - 1) / LINE * LINE;
    }
    BT_TRY(bt_shm_win_alloc(d->dp, at, e->params.watchdog_s, &d->shm));
    if (!(d->shm_base = calloc(D, sizeof *d->shm_base))) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (size_t q = 0; q < D; q++) d->shm_base[q] = bt_shm_win_base(d->shm, (int)q);
    unsigned char *mine = seg(e, d->layout.replica);
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        unsigned char *p = mine + b->shm_off;
        for (int j = 0; j < b->n; j++) {
            int i = d->order[b->first + j];
            bt_param_store *ps = &st->params[i];
            ps->g = p;
            st->sq_ptr[i] = p;
            size_t n = d->zero ? ps->numel : (ps->numel + align - 1) / align * align;
            p += n * dsz;
            if (!d->zero) padded += n - ps->numel;
        }
        b->in_place = 1; /* flat lies in the window: never freed by itself */
        size_t lo, n;
        slice_of(e, b, d->layout.replica, &lo, &n);
        /* zero: the sum of this rank's chunk, where dist_dp.c's norm and update read it */
        b->flat = d->zero ? mine + b->shm_off + lo * dsz : mine + b->shm_off;
    }
    if (!d->zero) BT_TRY(share_sumsq(e, st));
    for (int bi = 0; d->zero && bi < d->n_buckets; bi++) { /* zero: the weights move into the window */
        bt_dp_bucket *b = &d->buckets[bi];
        unsigned char *w = mine + b->shm_woff;
        for (int j = 0; j < b->n; j++) {
            bt_param_store *ps = &st->params[d->order[b->first + j]];
            BT_TRY(st->be->to_host(st->dev, w, ps->w, ps->numel * dsz));
            ps->w = w;
            w += ps->numel * dsz;
        }
    }
    if (d->zero && st->flat_w) {
        st->be->free(st->dev, st->flat_w);
        st->flat_w = NULL;
    }
    if (st->flat_g) st->be->free(st->dev, st->flat_g);
    st->flat_g = NULL; /* the update runs per tensor (worker_step.c), or per chunk (zero) */
    st->grad_arena = mine;
    st->grad_arena_shm = 1;
    /* counted as dist_dp.c's paths count them: the stores' alignment (without zero), not the
     * flags or the chunks' padding (zero's MPI buffers are not either) */
    st->mem.gradients += padded * dsz;
    return BT_OK;
}

bt_status bt_dist_shm_readers_done(bt_engine *e)
{
    bt_engine_dist *d = &e->dist;
    for (int q = 0; q < d->layout.data && d->shm_gen > 0; q++)
        if (q != d->layout.replica) BT_TRY(wait_flag(e, q, done_line(e), "finish reading this rank's gradients", -1));
    return BT_OK;
}

bt_status bt_dist_shm_job_start(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    (void)st;
    /* the peers have read this rank's arena for the last step before it is zeroed for this one */
    BT_TRY(bt_dist_shm_readers_done(e));
    d->shm_gen++;
    for (int bi = 0; bi < d->n_buckets; bi++) d->buckets[bi].shm_phase = 0;
    return BT_OK;
}

void bt_dist_shm_start(bt_engine *e, bt_dp_bucket *b)
{
    publish(e, bucket_line(e, b, F_READY));
    b->shm_phase = 1;
}

typedef float v16f __attribute__((vector_size(64)));
typedef double v8d __attribute__((vector_size(64)));

/* dst[i] = src[0][i] + src[1][i] + ... in that order; dst may be one of the sources (each block is
 * loaded whole before it is stored). One definition per element type T, 64-byte vectors VT of W. */
#define SUM_LOOP(name, T, VT, W)                                   \
    static void name(T *dst, T *const *src, int D, size_t n)       \
    {                                                              \
        size_t i = 0;                                              \
        for (; i + (W) <= n; i += (W)) {                           \
            VT acc, x;                                             \
            memcpy(&acc, src[0] + i, sizeof acc);                  \
            for (int q = 1; q < D; q++) {                          \
                memcpy(&x, src[q] + i, sizeof x);                  \
                acc += x;                                          \
            }                                                      \
            memcpy(dst + i, &acc, sizeof acc);                     \
        }                                                          \
        for (; i < n; i++) {                                       \
            T a = src[0][i];                                       \
            for (int q = 1; q < D; q++) a += src[q][i];            \
            dst[i] = a;                                            \
        }                                                          \
    }
SUM_LOOP(sum_f32, float, v16f, 16)
SUM_LOOP(sum_f64, double, v8d, 8)

/* This rank's slice of bucket b, summed over the replicas (whose ready flags it has seen). */
static bt_status reduce_slice(bt_engine *e, bt_dp_bucket *b)
{
    bt_engine_dist *d = &e->dist;
    int D = d->layout.data, me = d->layout.replica;
    size_t dsz = bt_dtype_size(e->dtype), lo, n;
    slice_of(e, b, me, &lo, &n);
    enum { MAX_D = 256 };
    float *f[MAX_D];
    double *g[MAX_D];
    if (D > MAX_D) return bt_error(BT_ERR_UNSUPPORTED, "the shm path reduces over at most %d replicas, not %d", MAX_D, D);
    for (int q = 0; q < D; q++) {
        void *at = seg(e, q) + b->shm_off + lo * dsz;
        f[q] = at;
        g[q] = at;
    }
    if (e->dtype == BT_F64) sum_f64(g[me], g, D, n);
    else sum_f32(f[me], f, D, n);
    publish(e, bucket_line(e, b, F_REDUCED));
    b->shm_phase = 2;
    return BT_OK;
}

static int all_seen(const bt_engine *e, int line)
{
    for (int q = 0; q < e->dist.layout.data; q++)
        if (q != e->dist.layout.replica && !seen(e, q, line)) return 0;
    return 1;
}

/* Without zero: the other slices of bucket b from their owners (whose reduced flags it has seen). */
static void gather_slices(bt_engine *e, bt_dp_bucket *b)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype);
    unsigned char *mine = seg(e, d->layout.replica);
    for (int q = 0; q < d->layout.data; q++) {
        if (q == d->layout.replica) continue;
        size_t lo, n;
        slice_of(e, b, q, &lo, &n);
        memcpy(mine + b->shm_off + lo * dsz, seg(e, q) + b->shm_off + lo * dsz, n * dsz);
    }
    b->shm_phase = 3;
    b->done_ms = bt_now_ms();
}

bt_status bt_dist_shm_poll(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    (void)st;
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        if (b->shm_phase == 1 && all_seen(e, bucket_line(e, b, F_READY))) {
            bt_shm_win_sync(d->shm);
            BT_TRY(reduce_slice(e, b));
            if (d->zero) b->done_ms = bt_now_ms();
        }
        if (b->shm_phase == 2 && !d->zero && all_seen(e, bucket_line(e, b, F_REDUCED))) {
            bt_shm_win_sync(d->shm);
            gather_slices(e, b);
        }
    }
    return BT_OK;
}

bt_status bt_dist_shm_finish(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    int D = d->layout.data, me = d->layout.replica;
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        if (b->shm_phase >= 2) continue;
        for (int q = 0; q < D; q++)
            if (q != me) BT_TRY(wait_flag(e, q, bucket_line(e, b, F_READY), "finish its gradients", bi));
        BT_TRY(reduce_slice(e, b));
        if (d->zero) b->done_ms = bt_now_ms();
    }
    for (int bi = 0; bi < d->n_buckets && !d->zero; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        if (b->shm_phase >= 3) continue;
        for (int q = 0; q < D; q++)
            if (q != me) BT_TRY(wait_flag(e, q, bucket_line(e, b, F_REDUCED), "sum its slice", bi));
        gather_slices(e, b);
    }
    publish(e, done_line(e)); /* this rank reads no peer's arena again this step */
    if (bt_dist_shm_sumsq_split(e)) { /* (ties change gradients at STEP: then every rank sums all) */
        double *sq = (double *)(void *)(seg(e, me) + d->shm_sq_off);
        for (int i = 0; i < st->n_params; i++)
            if (d->shm_sq_owner[i] == me)
                sq[i] = e->dtype == BT_F64 ? bt_optim_sumsq_f64(st->sq_ptr[i], (int64_t)st->sq_n[i])
                                           : bt_optim_sumsq_f32(st->sq_ptr[i], (int64_t)st->sq_n[i]);
        publish(e, sq_line(e));
    }
    return BT_OK;
}

bt_status bt_dist_shm_sumsq(bt_engine *e, bt_stage *st, double *out)
{
    bt_engine_dist *d = &e->dist;
    for (int q = 0; q < d->layout.data; q++)
        if (q != d->layout.replica) BT_TRY(wait_flag(e, q, sq_line(e), "sum the squares of its tensors", -1));
    /* the CPU backend's sum_squares, term for term: each tensor's sum, added in tensor order */
    double sum = 0;
    for (int i = 0; i < st->n_params; i++)
        sum += ((const double *)(const void *)(seg(e, d->shm_sq_owner[i]) + d->shm_sq_off))[i];
    *out = sum;
    return BT_OK;
}

/* The part [a, z) of bucket elements that store j (at offset o, numel) shares with [lo, lo + n). */
static int overlap(size_t o, size_t numel, size_t lo, size_t n, size_t *a, size_t *z)
{
    *a = o > lo ? o : lo;
    *z = o + numel < lo + n ? o + numel : lo + n;
    return *a < *z;
}

bt_status bt_dist_shm_zero_update(bt_engine *e, bt_stage *st, double lr, int64_t step, double scale)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype);
    int D = d->layout.data, me = d->layout.replica;
    int slots = bt_optim_state_count(&e->params.optimizer);
    /* this rank's chunk of every bucket: updated in place in the stores' weights, which lie in
     * this rank's segment (bt_dist_shm_setup), where the peers read them */
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        size_t lo, n, o = 0;
        slice_of(e, b, me, &lo, &n);
        for (int j = 0; j < b->n; j++) {
            bt_param_store *p = &st->params[d->order[b->first + j]];
            size_t a, z;
            if (overlap(o, p->numel, lo, n, &a, &z)) {
                void *state[2] = {NULL, NULL};
                for (int k = 0; k < slots; k++) state[k] = (unsigned char *)b->state[k] + (a - lo) * dsz;
                unsigned char *w = (unsigned char *)p->w + (a - o) * dsz;
                BT_TRY(st->be->optimizer_update(st->dev, &e->params.optimizer, e->dtype, w,
                                                (const unsigned char *)b->flat + (a - lo) * dsz, state, z - a, lr,
                                                step, scale));
            }
            o += p->numel;
        }
        publish(e, bucket_line(e, b, F_UPDATED));
    }
    /* every other chunk from its owner's weights */
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        for (int q = 0; q < D; q++) {
            if (q == me) continue;
            BT_TRY(wait_flag(e, q, bucket_line(e, b, F_UPDATED), "publish its updated weights", bi));
            size_t lo, n, o = 0;
            slice_of(e, b, q, &lo, &n);
            const unsigned char *pub = seg(e, q) + b->shm_woff;
            for (int j = 0; j < b->n; j++) {
                bt_param_store *p = &st->params[d->order[b->first + j]];
                size_t a, z;
                if (overlap(o, p->numel, lo, n, &a, &z))
                    BT_TRY(st->be->from_host(st->dev, (unsigned char *)p->w + (a - o) * dsz, pub + a * dsz,
                                             (z - a) * dsz));
                o += p->numel;
            }
        }
        for (int j = 0; j < b->n; j++) BT_TRY(bt_worker_refresh_lowp(e, st, &st->params[d->order[b->first + j]]));
    }
    return BT_OK;
}

void bt_dist_shm_teardown(bt_engine *e)
{
    /* collective: skipped after a failed job (the other ranks may be gone; MPI_Abort or
     * MPI_Finalize ends the window with the process) */
    if (!e->dist.failed) bt_shm_win_free(e->dist.shm);
    e->dist.shm = NULL;
    free(e->dist.shm_sq_owner);
    e->dist.shm_sq_owner = NULL;
    free(e->dist.shm_base);
    e->dist.shm_base = NULL;
}
