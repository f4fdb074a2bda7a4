/* exec/dist_nccl.c: the nccl path and the NCCL gradient all-reduce of GPU stages on different ranks,
 * through the backend's communication table (bt_backend_comms: the CUDA backend's NCCL, NULL in a
 * build without NCCL and in the emulator build, where mpi-staged and MPI all-reduces stand in).
 *
 *   bootstrap   one communicator per channel (two ranks: the sender is rank 0) and one per stage
 *               over its D replicas. The sender (replica 0) asks for a unique id and sends
 *               (broadcasts) it over MPI, then every member joins. Channels are set up in the same
 *               order on every rank, so the blocking joins cannot wait on each other in a cycle.
 *   channels    the receiver queues, at each job's start, the receive of every micro-batch on the
 *               channel's communicator stream, each followed by `landed[mb]` (the NCCL form of
 *               the mpi path's receives posted ahead: a send never waits for the receiver's
 *               schedule); the sender queues ncclSend on its copy stream once the values are
 *               written (ev_ready) between the `begin` and `sent` events; RECV makes the compute
 *               stream wait for `landed[mb]`. A communicator per channel keeps each one's
 *               operations in their own order, whatever the other channels do.
 *   all-reduce  a bucket is packed (device to device) into its device buffer on the compute stream
 *               once its last gradient is final, reduced on the stage communicator's stream, and
 *               unpacked at STEP after the compute stream waited for it.
 *   failure     every communicator is destroyed with the engine; after a failed job it is aborted
 *               (ncclCommAbort), since waiting for a lost rank would hang. A lost peer's kernels
 *               never finish: the engine's watchdog names the stuck stage, and the job ends with
 *               MPI_Abort (cli/run_dist.c).
 *
 * Written against NCCL 2.x and compiled in every CUDA build with NCCL; no development machine had a
 * GPU, so it has run only where a GPU was lent (tests/dist_gpu.sh, scripts/gpu-check.sh). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/engine_dist.h"
#include "exec/exec_internal.h"

#define BT_TAG_NCCL_ID 0x40000100 /* + channel index: a channel's unique id, sender to receiver */

static const bt_backend_comms *comms_of(const bt_stage *st) { return st->be->comms; }

int bt_dist_nccl_built(const bt_engine *e)
{
    for (int s = 0; s < e->stages; s++)
        if (e->stage[s].be && comms_of(&e->stage[s])) return 1;
    return 0;
}

int bt_dist_nccl_available(const bt_engine *e)
{
    if (!e->dist.on || e->params.transfer == BT_TRANSFER_STAGED || e->params.transfer == BT_TRANSFER_HOST) return 0;
    return bt_dist_nccl_built(e);
}

static bt_status join(bt_engine *e, bt_stage *st, const unsigned char *id, int nranks, int rank,
                      bt_backend_comm **out, const char *what)
{
    bt_status s = comms_of(st)->create(st->dev, id, nranks, rank, out);
    if (s != BT_OK)
        return bt_error_context(s, "rank %d: joining the NCCL communicator of %s (NCCL joins one GPU per rank: "
                                "ranks that share a GPU need --transfer staged)",
                                e->dist.layout.rank, what);
    return BT_OK;
}

bt_status bt_dist_nccl_channel_setup(bt_engine *e, bt_channel *ch)
{
    int sending = bt_stage_is_local(e, ch->from);
    bt_stage *mine = &e->stage[sending ? ch->from : ch->to];
    const bt_backend_comms *c = comms_of(mine);
    int peer_stage = sending ? ch->to : ch->from;
    int peer = bt_dist_rank_of(&e->dist.layout, e->dist.layout.replica, peer_stage);
    int tag = BT_TAG_NCCL_ID + (int)(ch - e->channels);
    unsigned char id[512];
    if (!c || c->id_bytes > sizeof id) return bt_error(BT_ERR_INTERNAL, "nccl path without NCCL");
    bt_comm_req req = {{0}, 0};
    if (sending) {
        BT_TRY(c->unique_id(id));
        BT_TRY(bt_comm_isend(e->dist.world, id, c->id_bytes, peer, tag, &req));
    } else {
        BT_TRY(bt_comm_irecv(e->dist.world, id, c->id_bytes, peer, tag, &req));
    }
    bt_status s = bt_comm_wait(&req, e->params.watchdog_s, NULL);
    if (s != BT_OK) {
        bt_comm_cancel(&req);
        return bt_error_context(s, "rank %d: the NCCL id of the boundary %d -> %d with rank %d", e->dist.layout.rank,
                                ch->from, ch->to, peer);
    }
    char what[64];
    snprintf(what, sizeof what, "the boundary %d -> %d", ch->from, ch->to);
    BT_TRY(join(e, mine, id, 2, sending ? 0 : 1, &ch->comm, what));
    for (int mb = 0; mb < ch->microbatches; mb++) {
        if (sending) {
            BT_TRY(mine->be->event_create(mine->dev, &ch->begin[mb]));
            BT_TRY(mine->be->event_create(mine->dev, &ch->sent[mb]));
        } else {
            BT_TRY(bt_exec_ordering_event(mine->be, mine->dev, &ch->landed[mb]));
        }
    }
    return BT_OK;
}

void bt_dist_nccl_channel_teardown(bt_engine *e, bt_channel *ch)
{
    if (!ch->comm) return;
    bt_stage *mine = &e->stage[bt_stage_is_local(e, ch->from) ? ch->from : ch->to];
    comms_of(mine)->destroy(ch->comm, e->dist.failed);
    ch->comm = NULL;
}

bt_status bt_dist_nccl_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    (void)e;
    const bt_backend *be = st->be;
    /* the copy stream already waits for ev_ready (worker.c, send_instr) */
    BT_TRY(be->event_record(st->dev, ch->begin[mb], BT_STREAM_COPY));
    for (int k = 0; k < ch->n_values; k++)
        if (bt_channel_value_bytes(ch, k))
            BT_TRY(be->comms->send(st->dev, ch->comm, bt_channel_value_source(st, ch, k, mb), bt_channel_value_bytes(ch, k), 1));
    BT_TRY(be->event_record(st->dev, ch->sent[mb], BT_STREAM_COPY));
    ch->pending[mb] = 1;
    ch->last_sent = mb;
    return BT_OK;
}

bt_status bt_dist_nccl_post(bt_engine *e, bt_stage *st, bt_channel *ch)
{
    (void)e;
    for (int mb = 0; mb < ch->microbatches; mb++) {
        unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
        int last = -1;
        for (int k = 0; k < ch->n_values; k++)
            if (bt_channel_value_bytes(ch, k)) last = k;
        for (int k = 0; k < ch->n_values; k++)
            if (bt_channel_value_bytes(ch, k))
                BT_TRY(st->be->comms->recv(st->dev, ch->comm, msg + ch->value_off[k], bt_channel_value_bytes(ch, k), 0,
                                           k == last ? ch->landed[mb] : NULL));
        if (last < 0) /* an empty message: landed marks the communicator stream as it is */
            BT_TRY(st->be->comms->recv(st->dev, ch->comm, msg, 0, 0, ch->landed[mb]));
    }
    return BT_OK;
}

bt_status bt_dist_nccl_recv(bt_stage *st, bt_channel *ch, int mb)
{
    BT_TRY(st->be->comms->check(ch->comm));
    return st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->landed[mb]);
}

/* ---- the gradient all-reduce ---------------------------------------------------------------- */

bt_status bt_dist_nccl_dp_setup(bt_engine *e, bt_stage *st)
{
    bt_engine_dist *d = &e->dist;
    const bt_backend_comms *c = comms_of(st);
    unsigned char id[512];
    if (!c || c->id_bytes > sizeof id) return bt_error(BT_ERR_INTERNAL, "NCCL all-reduce without NCCL");
    if (d->layout.replica == 0) BT_TRY(c->unique_id(id));
    BT_TRY(bt_comm_bcast(d->dp, id, c->id_bytes, 0, e->params.watchdog_s));
    char what[64];
    snprintf(what, sizeof what, "stage %d's %d replicas", st->index, d->layout.data);
    BT_TRY(join(e, st, id, d->layout.data, d->layout.replica, &d->nccl_dp, what));
    size_t dsz = bt_dtype_size(e->dtype);
    for (int b = 0; b < d->n_buckets; b++) {
        bt_dp_bucket *bk = &d->buckets[b];
        BT_TRY(st->be->alloc(st->dev, bk->count ? bk->count * dsz : 64, &bk->dflat));
        BT_TRY(bt_exec_ordering_event(st->be, st->dev, &bk->packed));
        BT_TRY(bt_exec_ordering_event(st->be, st->dev, &bk->reduced));
    }
    return BT_OK;
}

void bt_dist_nccl_dp_teardown(bt_engine *e)
{
    bt_engine_dist *d = &e->dist;
    if (!d->on || !e->stage) return;
    bt_stage *st = &e->stage[d->layout.stage];
    if (st->dev)
        for (int b = 0; b < d->n_buckets; b++) {
            bt_dp_bucket *bk = &d->buckets[b];
            if (bk->dflat) st->be->free(st->dev, bk->dflat);
            if (bk->packed) st->be->event_destroy(st->dev, bk->packed);
            if (bk->reduced) st->be->event_destroy(st->dev, bk->reduced);
            bk->dflat = NULL;
            bk->packed = bk->reduced = NULL;
        }
    if (d->nccl_dp && st->be) st->be->comms->destroy(d->nccl_dp, d->failed);
    d->nccl_dp = NULL;
}

bt_status bt_dist_nccl_bucket_start(bt_engine *e, bt_stage *st, bt_dp_bucket *b)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype);
    unsigned char *flat = b->dflat;
    for (int j = 0; j < b->n; j++) {
        bt_param_store *p = &st->params[d->order[b->first + j]];
        BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_D2D, flat, p->g, p->numel * dsz));
        flat += p->numel * dsz;
    }
    BT_TRY(st->be->event_record(st->dev, b->packed, BT_STREAM_COMPUTE));
    return st->be->comms->allreduce_sum(st->dev, d->nccl_dp, b->dflat, b->count, e->dtype, b->packed, b->reduced);
}

bt_status bt_dist_nccl_bucket_finish(bt_engine *e, bt_stage *st, bt_dp_bucket *b)
{
    bt_engine_dist *d = &e->dist;
    size_t dsz = bt_dtype_size(e->dtype);
    BT_TRY(st->be->comms->check(d->nccl_dp));
    BT_TRY(st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, b->reduced));
    const unsigned char *flat = b->dflat;
    for (int j = 0; j < b->n; j++) {
        bt_param_store *p = &st->params[d->order[b->first + j]];
        BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COMPUTE, BT_COPY_D2D, p->g, flat, p->numel * dsz));
        flat += p->numel * dsz;
    }
    return BT_OK;
}

bt_transfer_path bt_engine_dist_reduce_path(const bt_engine *e)
{
    if (e && e->dist.on && e->dist.nccl_dp) return BT_PATH_NCCL;
    if (e && e->dist.on && e->dist.shm) return BT_PATH_SHM;
    if (e && e->dist.on && !e->stage[e->dist.layout.stage].be->shares_host_memory) return BT_PATH_MPI_STAGED;
    return BT_PATH_MPI;
}
