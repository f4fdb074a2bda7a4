/* exec/transfer_staged.c: a boundary between stages on different ranks where a GPU takes part.
 * Open MPI here is not CUDA-aware, so MPI only ever touches host memory; two paths:
 *
 *   mpi-staged  either side a GPU (or both, without NCCL, or forced by --transfer staged|host).
 *               The sending GPU queues, on its copy stream once the compute stream wrote the
 *               values (ev_ready), a device-to-host copy of each value into its pinned copy of
 *               micro-batch mb's message (`mpi_buf`), between the `begin` and `sent` events; its
 *               thread waits for the device, then posts the MPI send from the pinned buffer (as
 *               the mpi path does). The receiving rank posted an MPI receive for every micro-batch
 *               into its pinned buffer at the job's start (engine_dist.c), so a send never waits for
 *               the receiver's schedule; at RECV, once the message arrived, the receiving GPU
 *               queues the host-to-device copy into the channel's buffer on its copy stream,
 *               records `landed[mb]`, and its compute stream waits for that event before reading
 *               the values in place. A CPU side of the same boundary behaves exactly as the mpi
 *               path (its buffer is host memory already).
 *   nccl        both sides GPUs and the build has NCCL (dist_nccl.c): no host memory at all.
 *
 * Which path: bt_remote_path_for, the same answer on every rank (each rank opens every stage's
 * device, so each knows both sides). The sending thread's wait before MPI_Isend is the one host
 * wait this path adds; the receiver never waits for its device. */
#include <stdlib.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/exec_internal.h"

static int on_device(const bt_stage *st) { return !st->be->shares_host_memory; }

bt_transfer_path bt_remote_path_for(const bt_engine *e, int a, int b)
{
    const bt_stage *sa = &e->stage[a], *sb = &e->stage[b];
    if (!on_device(sa) && !on_device(sb)) return BT_PATH_MPI;
    if (on_device(sa) && on_device(sb) && bt_dist_nccl_available(e) &&
        (e->params.transfer == BT_TRANSFER_AUTO || e->params.transfer == BT_TRANSFER_NCCL))
        return BT_PATH_NCCL;
    return BT_PATH_MPI_STAGED;
}

bt_status bt_remote_check_mode(const bt_engine *e)
{
    if (e->params.transfer != BT_TRANSFER_NCCL) return BT_OK;
    for (int a = 0; a < e->stages; a++)
        for (int b = 0; b < e->stages; b++) {
            if (a == b || (bt_stage_is_local(e, a) && bt_stage_is_local(e, b))) continue;
            if (!on_device(&e->stage[a]) || !on_device(&e->stage[b]))
                return bt_error(BT_ERR_INVALID_ARG,
                                "--transfer nccl: stage %d (%s) and stage %d (%s) run on different ranks and one "
                                "of them is not a GPU; NCCL joins GPUs only (--transfer auto stages that boundary "
                                "through host memory)",
                                a, e->stage[a].device_name, b, e->stage[b].device_name);
        }
    const bt_stage *st = &e->stage[e->dist.layout.stage];
    if (!on_device(st))
        return bt_error(BT_ERR_INVALID_ARG, "--transfer nccl: stage %d runs on %s; NCCL joins GPU stages only",
                        st->index, st->device_name);
    if (!bt_dist_nccl_built(e))
        return bt_error(BT_ERR_INVALID_ARG, "--transfer nccl: this build has no NCCL (configure found none beside "
                        "CUDA; --transfer staged moves GPU messages through pinned host memory over MPI)");
    return BT_OK;
}

int bt_remote_on_device(const bt_engine *e, const bt_channel *ch)
{
    int s = bt_stage_is_local(e, ch->from) ? ch->from : ch->to;
    return on_device(&e->stage[s]);
}

bt_status bt_remote_setup(bt_engine *e, bt_channel *ch)
{
    int m = ch->microbatches;
    int sending = bt_stage_is_local(e, ch->from), receiving = bt_stage_is_local(e, ch->to);
    /* every rank: the sender's bookkeeping is read by code that runs for any local channel */
    ch->begin = calloc((size_t)m, sizeof *ch->begin);
    ch->sent = calloc((size_t)m, sizeof *ch->sent);
    ch->pending = calloc((size_t)m, sizeof *ch->pending);
    ch->landed = calloc((size_t)m, sizeof *ch->landed);
    if (!ch->begin || !ch->sent || !ch->pending || !ch->landed)
        return bt_error(BT_ERR_NOMEM, "engine: out of memory for channels");
    if (!sending && !receiving) return BT_OK;
    bt_stage *mine = &e->stage[sending ? ch->from : ch->to];
    if (!on_device(mine) && !(sending && on_device(&e->stage[ch->to]))) return BT_OK; /* the mpi path */
    if (ch->path == BT_PATH_NCCL) return bt_dist_nccl_channel_setup(e, ch);
    size_t total = ch->msg_bytes * (size_t)m;
    /* a CPU sender's host buffer, or a GPU side's pinned one (host memory: not the device's) */
    BT_TRY(mine->be->host_alloc(mine->dev, total ? total : 64, (void **)&ch->mpi_buf));
    if (!on_device(mine)) return BT_OK;
    for (int mb = 0; mb < m; mb++) {
        if (sending) {
            BT_TRY(mine->be->event_create(mine->dev, &ch->begin[mb]));
            BT_TRY(mine->be->event_create(mine->dev, &ch->sent[mb]));
        } else {
            BT_TRY(bt_exec_ordering_event(mine->be, mine->dev, &ch->landed[mb]));
        }
    }
    return BT_OK;
}

void bt_remote_teardown(bt_engine *e, bt_channel *ch)
{
    int sending = bt_stage_is_local(e, ch->from);
    bt_stage *mine = &e->stage[sending ? ch->from : ch->to];
    if (ch->path == BT_PATH_NCCL) bt_dist_nccl_channel_teardown(e, ch);
    if (mine->dev) {
        for (int mb = 0; mb < ch->microbatches; mb++) {
            if (ch->begin && ch->begin[mb]) mine->be->event_destroy(mine->dev, ch->begin[mb]);
            if (ch->sent && ch->sent[mb]) mine->be->event_destroy(mine->dev, ch->sent[mb]);
            if (ch->landed && ch->landed[mb]) mine->be->event_destroy(mine->dev, ch->landed[mb]);
        }
        if (ch->mpi_buf) mine->be->host_free(mine->dev, ch->mpi_buf);
    }
    free(ch->landed);
    ch->landed = NULL;
    ch->mpi_buf = NULL;
    /* begin, sent, pending: freed by bt_transfer_teardown (their events are destroyed above) */
    free(ch->begin);
    free(ch->sent);
    ch->begin = ch->sent = NULL;
}

/* A CPU side's send (the mpi path, and the CPU side of mpi-staged): packed into host memory and
 * sent; its copy time is the packing and the posting. */
static bt_status pack_and_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    double t0 = bt_now_ms();
    BT_TRY(bt_transfer_pack_host(st, ch, mb, bt_channel_mpi_msg(ch, mb)));
    BT_TRY(bt_dist_send(e, st, ch, mb));
    ch->copy_ms += bt_now_ms() - t0;
    ch->messages++;
    ch->bytes += (double)ch->msg_bytes;
    return BT_OK;
}

bt_status bt_remote_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    const bt_backend *be = st->be;
    unsigned char *msg = bt_channel_mpi_msg(ch, mb);
    if (!on_device(st)) return pack_and_send(e, st, ch, mb); /* a CPU sender: the mpi path's packing */
    /* the copy stream already waits for ev_ready (worker.c, send_instr) */
    BT_TRY(be->event_record(st->dev, ch->begin[mb], BT_STREAM_COPY));
    for (int k = 0; k < ch->n_values; k++)
        BT_TRY(be->copy_async(st->dev, BT_STREAM_COPY, BT_COPY_D2H, msg + ch->value_off[k],
                              bt_channel_value_source(st, ch, k, mb), bt_channel_value_bytes(ch, k)));
    BT_TRY(be->event_record(st->dev, ch->sent[mb], BT_STREAM_COPY));
    /* MPI reads host memory: the copies must be done before the send is posted */
    BT_TRY(be->sync(st->dev));
    ch->pending[mb] = 1; /* its copy time is counted by bt_transfer_account */
    ch->last_sent = mb;
    return bt_dist_send(e, st, ch, mb);
}

bt_status bt_remote_recv(bt_stage *st, bt_channel *ch, int mb)
{
    if (!ch->mpi_buf || !on_device(st)) return BT_OK; /* host memory: read in place (the mpi path) */
    size_t off = (size_t)mb * ch->msg_bytes;
    BT_TRY(st->be->copy_async(st->dev, BT_STREAM_COPY, BT_COPY_H2D, ch->buf + off, ch->mpi_buf + off,
                              ch->msg_bytes));
    BT_TRY(st->be->event_record(st->dev, ch->landed[mb], BT_STREAM_COPY));
    return st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->landed[mb]);
}

/* The transports between ranks (exec/transport.h), installed by bt_dist_setup. */

/* mpi: the buffer of the end this rank runs (the receiver's, or the sender's copy), in host memory
 * (CPU stages); none when neither end is this rank's. No events: MPI requests (engine_dist.c). */
static bt_status mpi_setup(bt_engine *e, bt_channel *ch)
{
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
    size_t total = ch->msg_bytes * (size_t)ch->microbatches;
    bt_stage *own = bt_stage_is_local(e, ch->to) ? to : bt_stage_is_local(e, ch->from) ? from : NULL;
    if (!own) return BT_OK;
    BT_TRY(own->be->alloc(own->dev, total ? total : 64, (void **)&ch->buf));
    own->mem.activations += total;
    if (own == from) from->mpi_send_bytes += total;
    return BT_OK;
}

static void mpi_teardown(bt_engine *e, bt_channel *ch)
{
    bt_stage *own = bt_stage_is_local(e, ch->to) ? &e->stage[ch->to] : &e->stage[ch->from];
    if (ch->buf && own->dev) own->be->free(own->dev, ch->buf);
}

/* the receiver's buffer is host memory: the message is read in place where it arrived */
static bt_status mpi_land(bt_stage *st, bt_channel *ch, int mb)
{
    (void)st, (void)ch, (void)mb;
    return BT_OK;
}

/* mpi-staged and nccl: the device buffer a receiving rank copies (or NCCL receives) into; a sending
 * rank sends from its slots through pinned host memory or NCCL, with no device buffer of the
 * channel. */
static bt_status gpu_setup(bt_engine *e, bt_channel *ch)
{
    bt_stage *to = &e->stage[ch->to];
    size_t total = ch->msg_bytes * (size_t)ch->microbatches;
    if (bt_stage_is_local(e, ch->to)) {
        BT_TRY(to->be->alloc(to->dev, total ? total : 64, (void **)&ch->buf));
        to->mem.activations += total;
    }
    return bt_remote_setup(e, ch);
}

static void gpu_teardown(bt_engine *e, bt_channel *ch)
{
    bt_stage *to = &e->stage[ch->to];
    bt_remote_teardown(e, ch);
    if (ch->buf && to->dev) to->be->free(to->dev, ch->buf);
}

/* nccl: the receives were queued ahead at the job's start; the device waits, not the host */
static bt_status nccl_wait(bt_engine *e, bt_channel *ch, int mb)
{
    (void)e, (void)ch, (void)mb;
    return BT_OK;
}

static const bt_transport transport_mpi = {BT_PATH_MPI, BT_TRANSPORT_REMOTE, mpi_setup, mpi_teardown,
                                           pack_and_send, bt_dist_wait, mpi_land};
static const bt_transport transport_mpi_staged = {BT_PATH_MPI_STAGED, BT_TRANSPORT_REMOTE | BT_TRANSPORT_EVENTS,
                                                  gpu_setup, gpu_teardown, bt_remote_send, bt_dist_wait,
                                                  bt_remote_recv};
static const bt_transport transport_nccl = {BT_PATH_NCCL, BT_TRANSPORT_REMOTE | BT_TRANSPORT_EVENTS, gpu_setup,
                                            gpu_teardown, bt_dist_nccl_send, nccl_wait, bt_dist_nccl_recv};

void bt_remote_install_transports(bt_engine *e)
{
    e->transport[BT_PATH_MPI] = &transport_mpi;
    e->transport[BT_PATH_MPI_STAGED] = &transport_mpi_staged;
    e->transport[BT_PATH_NCCL] = &transport_nccl;
}

bt_status bt_dist_check_gpu(const bt_engine *e)
{
    if (!e->dist.on) return BT_OK;
    const bt_stage *st = &e->stage[e->dist.layout.stage];
    if (e->dist.zero && on_device(st))
        return bt_error(BT_ERR_INVALID_ARG,
                        "parallel.zero: 1 with stage %d on %s: the sharded optimizer step across processes runs on "
                        "host memory and is not built for GPU stages yet (run without parallel.zero, or on CPU "
                        "stages)",
                        st->index, st->device_name);
    return BT_OK;
}

bt_status bt_dist_bcast_stage(bt_engine *e, bt_stage *st, void *ptr, size_t bytes, int root)
{
    if (!on_device(st)) return bt_comm_bcast(e->dist.world, ptr, bytes, root, e->params.watchdog_s);
    /* MPI reads host memory: through a host copy on every rank (each opens every stage's device) */
    void *host = malloc(bytes ? bytes : 1);
    if (!host) return bt_error(BT_ERR_NOMEM, "engine: out of memory for a broadcast of %zu bytes", bytes);
    bt_status s = BT_OK;
    if (e->dist.layout.rank == root) BT_TRY_GOTO(s, st->be->to_host(st->dev, host, ptr, bytes), done);
    BT_TRY_GOTO(s, bt_comm_bcast(e->dist.world, host, bytes, root, e->params.watchdog_s), done);
    if (e->dist.layout.rank != root) BT_TRY_GOTO(s, st->be->from_host(st->dev, ptr, host, bytes), done);
done:
    free(host);
    return s;
}
