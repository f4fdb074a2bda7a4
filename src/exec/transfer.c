/* exec/transfer.c: how a message crosses a stage boundary. Each channel has one path, chosen once
 * the devices are open (bt_transfer_path_for):
 *
 *   host    the two stages run on different backends (cpu and cuda), or the engine was told to
 *           (BT_TRANSFER_HOST): the sender copies into a host buffer and the receiver copies out,
 *           both synchronously. The reference, and the only path between backends.
 *   local   both stages see the same memory (cpu:N, or logical stages sharing one GPU): one
 *           device-local copy into the receiver's buffer on the sender's copy stream.
 *   peer    two GPUs with peer access: cudaMemcpyPeerAsync on the sender's copy stream.
 *   staged  two devices without peer access, or forced (BT_TRANSFER_STAGED): the message moves in
 *           chunks through two pinned host buffers used in turn, so the device-to-host copy of one
 *           chunk overlaps the host-to-device copy of the previous one.
 *   mpi     the stages run on different ranks of a job across processes (CPU stages): the sender
 *           packs the values into its copy of the buffer and sends it (MPI_Isend); the receiver
 *           posted a receive for every micro-batch into its buffer at the job's start and reads the
 *           values in place (engine_dist.c). The rate reported is the packing and posting.
 *   mpi-staged  different ranks with a GPU on either side: the GPU side copies between its device
 *           and a pinned host copy of the messages on its copy stream, ordered by events, and MPI
 *           moves the host copies (transfer_staged.c). The rate is the device-to-host copy.
 *   nccl    different ranks, GPUs on both sides, a build with NCCL: ncclSend on the sender's copy
 *           stream, receives queued ahead on the boundary's communicator stream (dist_nccl.c).
 *
 * On every device path the receiver's buffer holds every micro-batch of a step, the receiver reads
 * activations in place from it, and ordering is by events: the sender's copy stream waits for the
 * compute stream to have written the values (ev_ready), the copy is queued, `sent[mb]` is recorded
 * after it, and the receiver's compute stream waits for `sent[mb]` before using the message. No
 * host thread waits for a device here. A buffer is reused only in the next step, after every
 * device was synchronised. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "exec/exec_internal.h"

#define BT_DEFAULT_STAGING_CHUNK ((size_t)4 << 20)

const char *bt_transfer_path_name(bt_transfer_path path)
{
    switch (path) {
    case BT_PATH_HOST: return "host";
    case BT_PATH_LOCAL: return "local";
    case BT_PATH_PEER: return "peer";
    case BT_PATH_STAGED: return "staged";
    case BT_PATH_MPI: return "mpi";
    case BT_PATH_MPI_STAGED: return "mpi-staged";
    case BT_PATH_NCCL: return "nccl";
    case BT_PATH_SHM: return "shm";
    }
    return "?";
}

bt_transfer_path bt_transfer_path_for(bt_engine *e, int a, int b)
{
    const bt_stage *sa = &e->stage[a], *sb = &e->stage[b];
    if (!bt_stage_is_local(e, a) || !bt_stage_is_local(e, b)) return bt_remote_path_for(e, a, b);
    if (e->params.transfer == BT_TRANSFER_HOST || sa->be != sb->be) return BT_PATH_HOST;
    if (e->params.transfer == BT_TRANSFER_STAGED) return BT_PATH_STAGED;
    int access = sa->be->peer_access(sa->dev, sb->dev);
    if (access == 2) return BT_PATH_LOCAL;
    if (access == 1 && sb->be->peer_access(sb->dev, sa->dev) == 1) return BT_PATH_PEER;
    return BT_PATH_STAGED;
}

static bt_status create_events(bt_stage *st, bt_event **ev, int n)
{
    for (int i = 0; i < n; i++) BT_TRY(st->be->event_create(st->dev, &ev[i]));
    return BT_OK;
}

bt_status bt_transfer_setup(bt_engine *e, bt_channel *ch)
{
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
    size_t total = ch->msg_bytes * (size_t)ch->microbatches;
    if (ch->path == BT_PATH_HOST) {
        ch->buf = malloc(total + 1);
        if (!ch->buf) return bt_error(BT_ERR_NOMEM, "engine: out of memory for channels");
        from->host_channel_bytes += total; /* host memory, not the device's */
        return BT_OK;
    }
    if (ch->path == BT_PATH_MPI_STAGED || ch->path == BT_PATH_NCCL) { /* transfer_staged.c */
        /* the device buffer a receiving rank copies (or NCCL receives) into; a sending rank sends
         * from its slots through pinned host memory or NCCL, with no device buffer of the channel */
        if (bt_stage_is_local(e, ch->to)) {
            BT_TRY(to->be->alloc(to->dev, total ? total : 64, (void **)&ch->buf));
            to->mem.activations += total;
        }
        return bt_remote_setup(e, ch);
    }
    if (ch->path == BT_PATH_MPI) { /* no events: MPI requests (engine_dist.c) */
        /* the buffer of the end this rank runs (the receiver's, or the sender's copy); none when
         * neither end is this rank's */
        bt_stage *own = bt_stage_is_local(e, ch->to) ? to : bt_stage_is_local(e, ch->from) ? from : NULL;
        if (!own) return BT_OK;
        BT_TRY(own->be->alloc(own->dev, total ? total : 64, (void **)&ch->buf));
        own->mem.activations += total;
        if (own == from) from->mpi_send_bytes += total;
        return BT_OK;
    }
    BT_TRY(to->be->alloc(to->dev, total ? total : 64, (void **)&ch->buf));
    to->mem.activations += total;
    int m = ch->microbatches;
    ch->begin = calloc((size_t)m, sizeof *ch->begin);
    ch->sent = calloc((size_t)m, sizeof *ch->sent);
    ch->pending = calloc((size_t)m, sizeof *ch->pending);
    if (!ch->begin || !ch->sent || !ch->pending)
        return bt_error(BT_ERR_NOMEM, "engine: out of memory for channels");
    BT_TRY(create_events(from, ch->begin, m));
    BT_TRY(create_events(from, ch->sent, m));
    if (ch->path == BT_PATH_STAGED) {
        size_t biggest = 0;
        for (int k = 0; k < ch->n_values; k++) {
            size_t end = k + 1 < ch->n_values ? ch->value_off[k + 1] : ch->msg_bytes;
            if (end - ch->value_off[k] > biggest) biggest = end - ch->value_off[k];
        }
        ch->chunk_bytes = e->staging_chunk < biggest ? e->staging_chunk : biggest;
        if (ch->chunk_bytes == 0) ch->chunk_bytes = 64;
        for (int k = 0; k < 2; k++) {
            BT_TRY(from->be->host_alloc(from->dev, ch->chunk_bytes, &ch->stage_buf[k]));
            BT_TRY(bt_exec_ordering_event(from->be, from->dev, &ch->filled[k]));
            BT_TRY(bt_exec_ordering_event(to->be, to->dev, &ch->drained[k]));
        }
    }
    return BT_OK;
}

static void destroy_events(bt_stage *st, bt_event **ev, int n)
{
    for (int i = 0; ev && i < n; i++)
        if (ev[i]) st->be->event_destroy(st->dev, ev[i]);
}

void bt_transfer_teardown(bt_engine *e, bt_channel *ch)
{
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
    if (ch->path == BT_PATH_MPI_STAGED || ch->path == BT_PATH_NCCL) bt_remote_teardown(e, ch);
    if (ch->path == BT_PATH_HOST) {
        free(ch->buf);
    } else if (ch->path == BT_PATH_MPI) {
        bt_stage *own = bt_stage_is_local(e, ch->to) ? to : from;
        if (ch->buf && own->dev) own->be->free(own->dev, ch->buf);
    } else {
        if (ch->buf && to->dev) to->be->free(to->dev, ch->buf);
        if (from->dev) {
            destroy_events(from, ch->begin, ch->microbatches);
            destroy_events(from, ch->sent, ch->microbatches);
            for (int k = 0; k < 2; k++) {
                if (ch->stage_buf[k]) from->be->host_free(from->dev, ch->stage_buf[k]);
                if (ch->filled[k]) from->be->event_destroy(from->dev, ch->filled[k]);
            }
        }
        for (int k = 0; k < 2 && to->dev; k++)
            if (ch->drained[k]) to->be->event_destroy(to->dev, ch->drained[k]);
    }
    free(ch->begin);
    free(ch->sent);
    free(ch->pending);
    free(ch->req);
    free(ch->sent_at);
    ch->req = NULL;
    ch->sent_at = NULL;
    ch->buf = NULL;
    ch->begin = ch->sent = NULL;
    ch->pending = NULL;
}

/* One value through the two pinned chunks: chunk k is refilled only once the receiving device has
 * drained what it last held. The sender's thread queues both halves; no host thread waits. */
static bt_status staged_copy(bt_channel *ch, bt_stage *src, bt_stage *dst, unsigned char *to,
                             const unsigned char *from, size_t bytes)
{
    const bt_backend *be = src->be;
    for (size_t off = 0; off < bytes; off += ch->chunk_bytes) {
        size_t n = bytes - off < ch->chunk_bytes ? bytes - off : ch->chunk_bytes;
        int k = ch->last_sent_chunk ^ 1;
        if (ch->drained_used[k]) BT_TRY(be->stream_wait(src->dev, BT_STREAM_COPY, ch->drained[k]));
        BT_TRY(be->copy_async(src->dev, BT_STREAM_COPY, BT_COPY_D2H, ch->stage_buf[k], from + off, n));
        BT_TRY(be->event_record(src->dev, ch->filled[k], BT_STREAM_COPY));
        BT_TRY(be->stream_wait(dst->dev, BT_STREAM_COPY, ch->filled[k]));
        BT_TRY(be->copy_async(dst->dev, BT_STREAM_COPY, BT_COPY_H2D, to + off, ch->stage_buf[k], n));
        BT_TRY(be->event_record(dst->dev, ch->drained[k], BT_STREAM_COPY));
        ch->drained_used[k] = 1;
        ch->last_sent_chunk = k;
    }
    return BT_OK;
}

bt_status bt_transfer_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    const bt_backend *be = st->be;
    unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
    if (ch->path == BT_PATH_MPI_STAGED || ch->path == BT_PATH_NCCL) return bt_remote_send(e, st, ch, mb);
    if (ch->path == BT_PATH_HOST || ch->path == BT_PATH_MPI) {
        double t0 = bt_now_ms();
        for (int k = 0; k < ch->n_values; k++)
            BT_TRY(be->to_host(st->dev, msg + ch->value_off[k], bt_channel_value_source(st, ch, k, mb),
                               bt_channel_value_bytes(ch, k)));
        if (ch->path == BT_PATH_MPI) BT_TRY(bt_dist_send(e, st, ch, mb));
        ch->copy_ms += bt_now_ms() - t0;
        ch->messages++;
        ch->bytes += (double)ch->msg_bytes;
        return BT_OK;
    }
    bt_stage *rs = &e->stage[ch->to];
    BT_TRY(be->event_record(st->dev, ch->begin[mb], BT_STREAM_COPY));
    for (int k = 0; k < ch->n_values; k++) {
        const void *src = bt_channel_value_source(st, ch, k, mb);
        unsigned char *dst = msg + ch->value_off[k];
        size_t bytes = bt_channel_value_bytes(ch, k);
        if (bytes == 0) continue;
        switch (ch->path) {
        case BT_PATH_LOCAL:
            BT_TRY(be->copy_async(st->dev, BT_STREAM_COPY, BT_COPY_D2D, dst, src, bytes));
            break;
        case BT_PATH_PEER:
            BT_TRY(be->copy_peer(rs->dev, dst, st->dev, src, bytes));
            break;
        case BT_PATH_STAGED:
            BT_TRY(staged_copy(ch, st, rs, dst, src, bytes));
            break;
        case BT_PATH_HOST:
        case BT_PATH_MPI:
        case BT_PATH_MPI_STAGED:
        case BT_PATH_NCCL:
        case BT_PATH_SHM: /* a reduction's path, never a boundary's */
            break;
        }
    }
    /* staged: the message has arrived once the receiver drained the last chunk */
    if (ch->path == BT_PATH_STAGED && ch->drained_used[ch->last_sent_chunk])
        BT_TRY(be->stream_wait(st->dev, BT_STREAM_COPY, ch->drained[ch->last_sent_chunk]));
    BT_TRY(be->event_record(st->dev, ch->sent[mb], BT_STREAM_COPY));
    ch->pending[mb] = 1;
    ch->last_sent = mb;
    return BT_OK;
}

bt_status bt_transfer_recv_act(bt_stage *st, bt_channel *ch, int mb)
{
    if (ch->path == BT_PATH_MPI) return BT_OK; /* arrived (bt_dist_wait) and read in place */
    if (ch->path == BT_PATH_MPI_STAGED || ch->path == BT_PATH_NCCL) return bt_remote_recv(st, ch, mb);
    if (ch->path != BT_PATH_HOST) return st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->sent[mb]);
    const unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
    for (int k = 0; k < ch->n_values; k++)
        BT_TRY(st->be->from_host(st->dev, bt_slot_value(st, mb, ch->values[k]), msg + ch->value_off[k],
                                 bt_channel_value_bytes(ch, k)));
    return BT_OK;
}

bt_status bt_transfer_recv_grad(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    const unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
    if (ch->path == BT_PATH_MPI_STAGED || ch->path == BT_PATH_NCCL) BT_TRY(bt_remote_recv(st, ch, mb));
    else if (bt_path_has_events(ch->path)) BT_TRY(st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->sent[mb]));
    for (int k = 0; k < ch->n_values; k++) {
        size_t bytes = bt_channel_value_bytes(ch, k);
        const void *src = msg + ch->value_off[k];
        if (ch->path == BT_PATH_HOST) {
            BT_TRY(st->be->from_host(st->dev, st->recv_scratch, src, bytes));
            src = st->recv_scratch;
        }
        BT_TRY(st->be->accumulate(st->dev, e->dtype, st->grads + st->grad_offset[ch->values[k]], src,
                                  bytes / bt_dtype_size(e->dtype)));
    }
    return BT_OK;
}

bt_status bt_transfer_account(bt_engine *e, bt_channel *ch)
{
    if (!bt_path_has_events(ch->path)) return BT_OK;
    bt_stage *st = &e->stage[ch->from];
    for (int mb = 0; mb < ch->microbatches; mb++) {
        if (!ch->pending[mb]) continue;
        ch->pending[mb] = 0;
        double ms = 0;
        BT_TRY(st->be->event_elapsed(st->dev, ch->begin[mb], ch->sent[mb], &ms));
        ch->copy_ms += ms;
        ch->messages++;
        ch->bytes += (double)ch->msg_bytes;
    }
    ch->last_sent = -1;
    return BT_OK;
}

size_t bt_transfer_default_chunk(void)
{
    const char *v = getenv("BATON_STAGING_CHUNK");
    if (v && *v) {
        char *end;
        unsigned long long n = strtoull(v, &end, 10);
        if (*end == '\0' && n >= 64) return (size_t)n;
    }
    return BT_DEFAULT_STAGING_CHUNK;
}
