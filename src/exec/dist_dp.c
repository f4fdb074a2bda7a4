/* exec/dist_dp.c: data parallelism across processes, the local stage's side (see engine_dist.c for
 * the rest of a job across processes). The stage's parameter gradients go into buckets of about
 * bucket_bytes, in the order backward finishes them (later nodes first); during the stage's last
 * backward of the step a bucket's reduction over the stage's D replicas starts as soon as its last
 * gradient is final (bt_dist_grads_final), overlapping the backward work left, and STEP waits for
 * them (bt_dist_grads_reduce): an all-reduce, whose sums are copied back into the gradients (on a
 * CPU stage the gradients live in the buckets, reduced in place: grads_in_place).
 *
 * parallel.zero: 1 shards the optimizer state instead: each bucket is D chunks; the reduction is a
 * reduce-scatter (each replica gets the sum of its own chunk), the global gradient norm adds the
 * replicas' chunks in replica order (so every replica sees the same total), each replica updates
 * its chunk of the weights with its chunk of the state, and an all-gather gives every replica all
 * the weights. The layout's full state buffers of the local stage are freed (the memory statistics
 * show the state divided by D); a checkpoint gathers the state into full buffers again
 * (bt_dist_gather_state) and a resume writes full buffers, both sharded again at the next job
 * (bt_dist_absorb_state). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"

/* the tag of the zero norm exchange, beside engine_dist.c's */
#define BT_TAG_ZERO 0x40000002

/* The stage-local node whose backward makes store i's gradient final: the first node (in forward
 * order) that uses it, as backward runs the nodes in reverse. */
static int final_node(const bt_engine *e, const bt_stage *st, int i)
{
    for (int k = 0; k < st->n_nodes; k++) {
        const bt_node *n = &e->graph->nodes[st->first_node + k];
        for (int j = 0; j < n->n_params; j++)
            if (st->node_params[k][j] == &st->params[i]) return k;
    }
    return 0;
}

/* Where store (order index) j of bucket b starts in the bucket, in elements. */
static size_t store_offset(const bt_engine *e, const bt_stage *st, const bt_dp_bucket *b, int j)
{
    size_t off = 0;
    for (int i = 0; i < j; i++) off += st->params[e->dist.order[b->first + i]].numel;
    return off;
}

/* This rank's chunk of bucket b: elements [*lo, *lo + *n) of the bucket (n may be 0 at the end). */
static void my_chunk(const bt_engine *e, const bt_dp_bucket *b, size_t *lo, size_t *n)
{
    *lo = (size_t)e->dist.layout.replica * b->chunk;
    *n = *lo >= b->count ? 0 : (b->count - *lo < b->chunk ? b->count - *lo : b->chunk);
}

/* zero: copies the chunk of the full state buffers into the shards (or back, to_full), store by
 * store; the parts of stores outside the chunk are left alone. */
static bt_status copy_shards(bt_engine *e, bt_stage *st, int to_full)
{
    size_t dsz = bt_dtype_size(e->dtype);
    int slots = bt_optim_state_count(&e->params.optimizer);
    for (int bi = 0; bi < e->dist.n_buckets; bi++) {
        bt_dp_bucket *b = &e->dist.buckets[bi];
        size_t lo, n;
        my_chunk(e, b, &lo, &n);
        for (int j = 0; j < b->n; j++) {
            bt_param_store *p = &st->params[e->dist.order[b->first + j]];
            size_t o = store_offset(e, st, b, j);
            size_t a = o > lo ? o : lo, z = o + p->numel < lo + n ? o + p->numel : lo + n;
            if (a >= z) continue;
            for (int k = 0; k < slots; k++) {
                unsigned char *full = (unsigned char *)p->state[k] + (a - o) * dsz;
                unsigned char *shard = (unsigned char *)b->state[k] + (a - lo) * dsz;
                memcpy(to_full ? full : shard, to_full ? shard : full, (z - a) * dsz);
            }
        }
    }
    return BT_OK;
}

/* zero: gives the local stage's optimizer state up for its chunks: the full buffers the layout
 * allocated are freed, and the memory statistics say so (the optimizer state divided by D). */
static bt_status shard_state(bt_engine *e, bt_stage *st)
{
    size_t dsz = bt_dtype_size(e->dtype);
    int slots = bt_optim_state_count(&e->params.optimizer);
    for (int bi = 0; bi < e->dist.n_buckets; bi++)
        for (int k = 0; k < slots; k++) {
            bt_dp_bucket *b = &e->dist.buckets[bi];
            b->state[k] = calloc(b->chunk ? b->chunk : 1, dsz);
            if (!b->state[k]) return bt_error(BT_ERR_NOMEM, "engine: out of memory for optimizer state");
            st->mem.optimizer += b->chunk * dsz;
        }
    BT_TRY(copy_shards(e, st, 0)); /* the initial state (zeros) */
    /* the layout packed each slot's full state into one array (bt_stage.flat_state): free it
     * whole; from now on a store's state is NULL unless a checkpoint or a resume fills it */
    for (int k = 0; k < slots; k++) {
        for (int i = 0; i < st->n_params; i++) {
            bt_param_store *p = &st->params[i];
            if (!p->state[k]) continue;
            if (!st->flat_state[k]) st->be->free(st->dev, p->state[k]);
            p->state[k] = NULL;
            st->mem.optimizer -= p->numel * dsz;
        }
        if (st->flat_state[k]) st->be->free(st->dev, st->flat_state[k]);
        st->flat_state[k] = NULL;
    }
    st->mem.current = st->mem.weights + st->mem.gradients + st->mem.optimizer + st->mem.activations +
                      st->mem.workspace;
    st->mem.peak = st->mem.current;
    return BT_OK;
}

/* zero: full state buffers hold the truth (a checkpoint gathered them, or a resume wrote them):
 * their chunks become the shards and the buffers are freed again. At the start of a job. */
bt_status bt_dist_absorb_state(bt_engine *e, bt_stage *st)
{
    if (!e->dist.full_state) return BT_OK;
    BT_TRY(copy_shards(e, st, 0));
    int slots = bt_optim_state_count(&e->params.optimizer);
    for (int i = 0; i < st->n_params; i++)
        for (int k = 0; k < slots; k++)
            if (st->params[i].state[k]) {
                st->be->free(st->dev, st->params[i].state[k]);
                st->params[i].state[k] = NULL;
            }
    e->dist.full_state = 0;
    return BT_OK;
}

bt_status bt_dist_state_buffer(bt_engine *e, bt_stage *st, bt_param_store *ps, int slot, int write)
{
    if (ps->state[slot]) return BT_OK;
    if (!e->dist.zero || !bt_stage_is_local(e, st->index))
        return bt_error(BT_ERR_INTERNAL, "parameter '%s' has no optimizer state buffer",
                        e->graph->params[ps->param].name);
    if (!write)
        return bt_error(BT_ERR_INVALID_ARG,
                        "the optimizer state of '%s' is sharded over the replicas (parallel.zero: 1): every rank "
                        "calls bt_engine_sync_params first",
                        e->graph->params[ps->param].name);
    /* a resume writes the whole state: hold it in full until the next job shards it */
    int slots = bt_optim_state_count(&e->params.optimizer);
    size_t dsz = bt_dtype_size(e->dtype);
    if (!e->dist.full_state) {
        for (int i = 0; i < st->n_params; i++)
            for (int k = 0; k < slots; k++) {
                bt_param_store *p = &st->params[i];
                if (p->state[k]) continue;
                BT_TRY(st->be->alloc(st->dev, p->numel * dsz, &p->state[k]));
                BT_TRY(st->be->zero(st->dev, p->state[k], p->numel * dsz));
            }
        BT_TRY(copy_shards(e, st, 1)); /* what it does not write keeps its current value */
        e->dist.full_state = 1;
    }
    return BT_OK;
}

/* Without zero, on a device whose memory the host reads (cpu:N): the stage's gradients move into
 * one arena in bucket order, each store's gradient 64-byte aligned (the padding stays zero, so
 * reducing it changes nothing), and each bucket is all-reduced in place there: no copy into a
 * separate buffer and back (two passes over every gradient per step). The arena replaces the
 * stores' own gradient buffers (bt_stage.grad_arena; the layout frees it). */
static bt_status grads_in_place(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype), align = 64 / dsz, total = 0;
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        b->count = 0;
        for (int j = 0; j < b->n; j++)
            b->count += (st->params[d->order[b->first + j]].numel + align - 1) / align * align;
        total += b->count * dsz;
    }
    void *arena = NULL;
    BT_TRY(st->be->alloc(st->dev, total ? total : 64, &arena));
    BT_TRY(st->be->zero(st->dev, arena, total ? total : 64));
    st->grad_arena = arena;
    unsigned char *at = arena;
    size_t padded = 0;
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        b->flat = at;
        b->in_place = 1;
        for (int j = 0; j < b->n; j++) {
            int i = d->order[b->first + j];
            bt_param_store *p = &st->params[i];
            size_t n = (p->numel + align - 1) / align * align;
            p->g = at; /* the packed gradients (layout.c) are freed once, below */
            st->sq_ptr[i] = at;
            at += n * dsz;
            padded += (n - p->numel) * dsz;
        }
    }
    if (st->flat_g) st->be->free(st->dev, st->flat_g);
    st->flat_g = NULL; /* the update runs per tensor over the arena (worker_step.c) */
    st->mem.gradients += padded;
    return BT_OK;
}

bt_status bt_dist_setup_buckets(bt_engine *e)
{
    if (!e->dist.on || e->dist.layout.data < 2 || !e->train_sched) return BT_OK;
    bt_stage *st = &e->stage[e->dist.layout.stage];
    int n = st->n_params;
    if (n == 0) return BT_OK;
    bt_engine_dist *d = &e->dist;
    d->order = calloc((size_t)n, sizeof *d->order);
    d->bucket_of = calloc((size_t)n, sizeof *d->bucket_of);
    d->final_after = calloc((size_t)n, sizeof *d->final_after);
    d->buckets = calloc((size_t)n, sizeof *d->buckets);
    if (!d->order || !d->bucket_of || !d->final_after || !d->buckets)
        return bt_error(BT_ERR_NOMEM, "engine: out of memory for gradient buckets");
    for (int i = 0; i < n; i++) d->final_after[i] = final_node(e, st, i);
    /* the order gradients become final: later nodes first; within a node, the store order */
    int m = 0;
    for (int k = st->n_nodes - 1; k >= 0; k--)
        for (int i = 0; i < n; i++)
            if (d->final_after[i] == k) d->order[m++] = i;
    size_t dsz = bt_dtype_size(e->dtype);
    int shm = 0; /* the replicas share this machine: the shm path (dist_shm.c) */
    BT_TRY(bt_dist_shm_choose(e, st, &shm)); /* collective over the stage's replicas */
    d->n_buckets = 0;
    for (int p = 0; p < n;) {
        bt_dp_bucket *b = &d->buckets[d->n_buckets];
        b->first = p;
        size_t bytes = 0;
        while (p < n && (b->n == 0 || bytes + st->params[d->order[p]].numel * dsz <= d->bucket_bytes)) {
            bytes += st->params[d->order[p]].numel * dsz;
            d->bucket_of[d->order[p]] = d->n_buckets;
            b->n++;
            p++;
        }
        b->count = bytes / dsz;
        if (d->zero) {
            size_t D = (size_t)e->dist.layout.data;
            b->chunk = (b->count + D - 1) / D;
            bytes = b->chunk * D * dsz;
        }
        if (shm) { /* the gradients and the weights' staging lie in the shared window */
            d->n_buckets++;
            continue;
        }
        if (d->zero) {
            b->wflat = calloc(1, bytes ? bytes : 64);
            if (!b->wflat) return bt_error(BT_ERR_NOMEM, "engine: out of memory for gradient buckets");
        }
        if (!d->zero && st->be->shares_host_memory) { /* in place: see grads_in_place */
            d->n_buckets++;
            continue;
        }
        b->flat = calloc(1, bytes ? bytes : 64);
        if (!b->flat) return bt_error(BT_ERR_NOMEM, "engine: out of memory for gradient buckets");
        d->n_buckets++;
    }
    if (d->zero) BT_TRY(shard_state(e, st));
    if (shm) BT_TRY(bt_dist_shm_setup(e, st));
    else if (!d->zero && st->be->shares_host_memory) BT_TRY(grads_in_place(e, st));
    if (!st->be->shares_host_memory && bt_dist_nccl_available(e)) BT_TRY(bt_dist_nccl_dp_setup(e, st));
    return BT_OK;
}

/* early: started during the backward work (not at STEP), overlapping it */
static bt_status start_bucket(bt_engine *e, bt_stage *st, bt_dp_bucket *b, int early)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype);
    if (d->nccl_dp) { /* on the device, reduced on the communicator's stream (dist_nccl.c) */
        b->pending = -1;
        b->start_ms = bt_now_ms();
        b->done_ms = 0; /* its end is on the device, not timed: no trace slice, no time counted */
        d->reductions++;
        d->reduced_bytes += (double)(b->count * dsz);
        return bt_dist_nccl_bucket_start(e, st, b);
    }
    if (d->shm) { /* its gradients are final here: the peers may read them (dist_shm.c) */
        b->pending = -1;
        b->start_ms = bt_now_ms();
        b->done_ms = 0;
        d->reductions++;
        d->early_reductions += early;
        d->reduced_bytes += (double)(b->count * dsz);
        bt_dist_shm_start(e, b);
        return BT_OK;
    }
    unsigned char *flat = b->flat;
    for (int j = 0; j < b->n && !b->in_place; j++) {
        bt_param_store *p = &st->params[d->order[b->first + j]];
        BT_TRY(st->be->to_host(st->dev, flat, p->g, p->numel * dsz));
        flat += p->numel * dsz;
    }
    b->pending = -1; /* started */
    b->start_ms = bt_now_ms();
    b->done_ms = 0;
    d->reductions++;
    d->early_reductions += early;
    d->reduced_bytes += (double)(b->count * dsz);
    if (d->zero) { /* each replica gets the sum of its chunk only */
        size_t padded = b->chunk * (size_t)d->layout.data;
        memset((unsigned char *)b->flat + b->count * dsz, 0, (padded - b->count) * dsz);
        return bt_comm_ireduce_scatter_sum(d->dp, b->flat, b->chunk, e->dtype, &b->req);
    }
    return bt_comm_iallreduce_sum(d->dp, b->flat, b->count, e->dtype, &b->req);
}

bt_status bt_dist_grads_final(bt_engine *e, bt_stage *st, int k)
{
    bt_engine_dist *d = &e->dist;
    if (d->n_buckets == 0) return BT_OK;
    for (int i = 0; i < st->n_params; i++) {
        if (d->final_after[i] != k) continue;
        bt_dp_bucket *b = &d->buckets[d->bucket_of[i]];
        if (b->pending > 0 && --b->pending == 0) BT_TRY(start_bucket(e, st, b, 1));
    }
    if (d->shm) return bt_dist_shm_poll(e, st); /* what the peers' progress allows already */
    for (int b = 0; b < d->n_buckets; b++) { /* MPI progresses inside MPI calls */
        int done;
        if (d->buckets[b].pending < 0 && !d->nccl_dp) {
            BT_TRY(bt_comm_test(&d->buckets[b].req, &done));
            if (done && d->buckets[b].done_ms == 0) d->buckets[b].done_ms = bt_now_ms();
        }
    }
    return BT_OK;
}

bt_status bt_dist_grads_reduce(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    if (d->n_buckets == 0) return BT_OK;
    size_t dsz = bt_dtype_size(e->dtype);
    double t0 = bt_now_ms();
    d->reduce_wait_t0_ms = t0;
    if (d->shm) {
        for (int bi = 0; bi < d->n_buckets; bi++)
            if (d->buckets[bi].pending >= 0) BT_TRY(start_bucket(e, st, &d->buckets[bi], 0));
        BT_TRY(bt_dist_shm_finish(e, st));
        for (int bi = 0; bi < d->n_buckets; bi++) {
            bt_dp_bucket *b = &d->buckets[bi];
            d->reduce_ms += b->done_ms - b->start_ms;
            d->reduce_hidden_ms += (b->done_ms < t0 ? b->done_ms : t0) - (b->start_ms < t0 ? b->start_ms : t0);
        }
        d->reduce_wait_ms += bt_now_ms() - t0;
        return BT_OK;
    }
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        if (b->pending >= 0) BT_TRY(start_bucket(e, st, b, 0)); /* a stage whose last backward left it */
        if (d->nccl_dp) {
            BT_TRY(bt_dist_nccl_bucket_finish(e, st, b));
            continue;
        }
        bt_status s = bt_comm_wait(&b->req, e->params.watchdog_s, &e->abort);
        if (s == BT_ERR_TIMEOUT)
            return bt_error(s, "watchdog: after %.1f s, rank %d (stage %d, replica %d) waits at the optimizer step "
                            "for the gradient all-reduce of bucket %d over the stage's %d replicas",
                            e->params.watchdog_s, e->dist.layout.rank, st->index, e->dist.layout.replica, bi,
                            e->dist.layout.data);
        if (s == BT_ERR_INTERNAL) return bt_error(s, "stopped at the gradient all-reduce (another stage failed)");
        BT_TRY(s);
        if (b->done_ms == 0) b->done_ms = bt_now_ms();
        d->reduce_ms += b->done_ms - b->start_ms; /* the trace's collective slices (step_view.c) */
        d->reduce_hidden_ms += (b->done_ms < t0 ? b->done_ms : t0) - (b->start_ms < t0 ? b->start_ms : t0);
        if (d->zero || b->in_place) continue; /* zero: the chunk's sum stays in flat (bt_dist_zero_update) */
        const unsigned char *flat = b->flat;
        for (int j = 0; j < b->n; j++) {
            bt_param_store *p = &st->params[d->order[b->first + j]];
            BT_TRY(st->be->from_host(st->dev, p->g, flat, p->numel * dsz));
            flat += p->numel * dsz;
        }
    }
    d->reduce_wait_ms += bt_now_ms() - t0;
    return BT_OK;
}

bt_status bt_dist_zero_sumsq(bt_engine *e, bt_stage *st, double *out)
{
    bt_engine_dist *d = &e->dist;
    double mine = 0;
    for (int bi = 0; bi < d->n_buckets; bi++) {
        size_t lo, n;
        my_chunk(e, &d->buckets[bi], &lo, &n);
        double v = 0;
        const void *x = d->buckets[bi].flat;
        if (n) BT_TRY(st->be->sum_squares(st->dev, e->dtype, &x, &n, 1, &v));
        mine += v;
    }
    int np = 0;
    for (int q = 0; q < d->layout.data; q++)
        if (q != d->layout.replica) d->xpeer[np++] = bt_dist_rank_of(&d->layout, q, st->index);
    BT_TRY(bt_dist_exchange(e, d->xpeer, np, &mine, 1, d->xbuf, BT_TAG_ZERO, "the gradient norm of another replica's chunk"));
    double sum = 0; /* in replica order on every replica: the same total everywhere */
    for (int q = 0, i = 0; q < d->layout.data; q++) sum += q == d->layout.replica ? mine : d->xbuf[i++];
    *out = sum;
    return BT_OK;
}

bt_status bt_dist_zero_update(bt_engine *e, bt_stage *st, double lr, int64_t step, double scale)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype);
    if (d->shm) return bt_dist_shm_zero_update(e, st, lr, step, scale);
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        size_t lo, n;
        my_chunk(e, b, &lo, &n);
        unsigned char *w = b->wflat;
        for (int j = 0; j < b->n; j++) { /* the bucket's weights, packed */
            bt_param_store *p = &st->params[d->order[b->first + j]];
            BT_TRY(st->be->to_host(st->dev, w, p->w, p->numel * dsz));
            w += p->numel * dsz;
        }
        if (n)
            BT_TRY(st->be->optimizer_update(st->dev, &e->params.optimizer, e->dtype,
                                            (unsigned char *)b->wflat + lo * dsz, b->flat, b->state, n, lr,
                                            step, scale));
        bt_status s = bt_comm_allgather_inplace(d->dp, b->wflat, b->chunk, e->dtype, e->params.watchdog_s);
        if (s != BT_OK) return bt_error_context(s, "rank %d, stage %d: the weights' all-gather (parallel.zero)",
                                                d->layout.rank, st->index);
        w = b->wflat;
        for (int j = 0; j < b->n; j++) {
            bt_param_store *p = &st->params[d->order[b->first + j]];
            BT_TRY(st->be->from_host(st->dev, p->w, w, p->numel * dsz));
            BT_TRY(bt_worker_refresh_lowp(e, st, p));
            w += p->numel * dsz;
        }
    }
    return BT_OK;
}

/* zero: every replica's chunks of the local stage's optimizer state, gathered into full buffers
 * (allocated for the purpose; the next job shards them again and frees them). */
bt_status bt_dist_gather_state(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    int slots = bt_optim_state_count(&e->params.optimizer);
    size_t dsz = bt_dtype_size(e->dtype);
    if (!d->full_state)
        for (int i = 0; i < st->n_params; i++)
            for (int k = 0; k < slots; k++)
                if (!st->params[i].state[k])
                    BT_TRY(st->be->alloc(st->dev, st->params[i].numel * dsz, &st->params[i].state[k]));
    for (int bi = 0; bi < d->n_buckets; bi++) {
        bt_dp_bucket *b = &d->buckets[bi];
        unsigned char *own = NULL; /* shm: the staging in the window is the peers' to read */
        if (d->shm && !(own = malloc(b->chunk * (size_t)d->layout.data * dsz + 1)))
            return bt_error(BT_ERR_NOMEM, "engine: out of memory for the optimizer state");
        bt_status s = BT_OK;
        for (int k = 0; k < slots && s == BT_OK; k++) {
            unsigned char *full = own ? own : b->wflat; /* the weights' staging buffer, free between steps */
            memcpy(full + (size_t)d->layout.replica * b->chunk * dsz, b->state[k], b->chunk * dsz);
            s = bt_comm_allgather_inplace(d->dp, full, b->chunk, e->dtype, e->params.watchdog_s);
            for (int j = 0; j < b->n && s == BT_OK; j++) {
                bt_param_store *p = &st->params[d->order[b->first + j]];
                memcpy(p->state[k], full + store_offset(e, st, b, j) * dsz, p->numel * dsz);
            }
        }
        free(own);
        BT_TRY(s);
    }
    d->full_state = 1;
    return BT_OK;
}
