/* exec/transfer.c: how a message crosses a stage boundary. Each channel has one path, chosen once
 * the devices are open (bt_transfer_path_for), and goes through that path's entry in the engine's
 * table of transports (exec/transport.h): this file defines the entries of the four paths in one
 * process and dispatches every call through the channel's entry; the three between ranks are
 * defined in transfer_staged.c and installed when the engine becomes one rank of a job:
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
    if (!bt_stage_is_local(e, a) || !bt_stage_is_local(e, b)) return e->ranks->remote_path(e, a, b);
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

static void destroy_events(bt_stage *st, bt_event **ev, int n)
{
    for (int i = 0; ev && i < n; i++)
        if (ev[i]) st->be->event_destroy(st->dev, ev[i]);
}

bt_status bt_transfer_pack_host(const bt_stage *st, const bt_channel *ch, int mb, unsigned char *msg)
{
    for (int k = 0; k < ch->n_values; k++)
        BT_TRY(st->be->to_host(st->dev, msg + ch->value_off[k], bt_channel_value_source(st, ch, k, mb),
                               bt_channel_value_bytes(ch, k)));
    return BT_OK;
}

/* host: a host buffer the sender packs into and the receiver copies out of, both synchronously. */
static bt_status host_setup(bt_engine *e, bt_channel *ch)
{
    size_t total = ch->msg_bytes * (size_t)ch->microbatches;
    ch->buf = malloc(total + 1);
    if (!ch->buf) return bt_error(BT_ERR_NOMEM, "engine: out of memory for channels");
    e->stage[ch->from].host_channel_bytes += total; /* host memory, not the device's */
    return BT_OK;
}

static void host_teardown(bt_engine *e, bt_channel *ch)
{
    (void)e;
    free(ch->buf);
}

static bt_status host_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    (void)e;
    double t0 = bt_now_ms();
    BT_TRY(bt_transfer_pack_host(st, ch, mb, ch->buf + (size_t)mb * ch->msg_bytes));
    ch->copy_ms += bt_now_ms() - t0;
    ch->messages++;
    ch->bytes += (double)ch->msg_bytes;
    return BT_OK;
}

/* The in-process paths' host wait: the mailbox (channel.c). */
static bt_status mailbox_wait(bt_engine *e, bt_channel *ch, int mb)
{
    return bt_channel_wait(e, ch, mb, e->params.watchdog_s);
}

static bt_status land_in_place(bt_stage *st, bt_channel *ch, int mb)
{
    (void)st, (void)ch, (void)mb;
    return BT_OK;
}

/* local, peer, staged: the receiver's buffer on its device, begin/sent events per micro-batch on
 * the sender's device; staged adds its two pinned chunks. */
static bt_status device_setup(bt_engine *e, bt_channel *ch)
{
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
    size_t total = ch->msg_bytes * (size_t)ch->microbatches;
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
    return BT_OK;
}

static bt_status staged_setup(bt_engine *e, bt_channel *ch)
{
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
    BT_TRY(device_setup(e, ch));
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
    return BT_OK;
}

static void device_teardown(bt_engine *e, bt_channel *ch)
{
    bt_stage *from = &e->stage[ch->from], *to = &e->stage[ch->to];
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

/* One value of a device path's message, on the sender's copy stream. */
typedef bt_status (*value_copy_fn)(bt_channel *ch, bt_stage *src, bt_stage *dst, unsigned char *to,
                                   const unsigned char *from, size_t bytes);

static bt_status local_copy(bt_channel *ch, bt_stage *src, bt_stage *dst, unsigned char *to,
                            const unsigned char *from, size_t bytes)
{
    (void)ch, (void)dst;
    return src->be->copy_async(src->dev, BT_STREAM_COPY, BT_COPY_D2D, to, from, bytes);
}

static bt_status peer_copy(bt_channel *ch, bt_stage *src, bt_stage *dst, unsigned char *to,
                           const unsigned char *from, size_t bytes)
{
    (void)ch;
    return src->be->copy_peer(dst->dev, to, src->dev, from, bytes);
}

/* The message's values copied one by one between the events begin[mb] and sent[mb]. */
static bt_status device_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb, value_copy_fn copy)
{
    const bt_backend *be = st->be;
    unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
    bt_stage *rs = &e->stage[ch->to];
    BT_TRY(be->event_record(st->dev, ch->begin[mb], BT_STREAM_COPY));
    for (int k = 0; k < ch->n_values; k++) {
        size_t bytes = bt_channel_value_bytes(ch, k);
        if (bytes == 0) continue;
        BT_TRY(copy(ch, st, rs, msg + ch->value_off[k], bt_channel_value_source(st, ch, k, mb), bytes));
    }
    /* staged: the message has arrived once the receiver drained the last chunk (only staged_copy
     * marks chunks used) */
    if (ch->drained_used[ch->last_sent_chunk])
        BT_TRY(be->stream_wait(st->dev, BT_STREAM_COPY, ch->drained[ch->last_sent_chunk]));
    BT_TRY(be->event_record(st->dev, ch->sent[mb], BT_STREAM_COPY));
    ch->pending[mb] = 1;
    ch->last_sent = mb;
    return BT_OK;
}

static bt_status local_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    return device_send(e, st, ch, mb, local_copy);
}

static bt_status peer_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    return device_send(e, st, ch, mb, peer_copy);
}

static bt_status staged_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    return device_send(e, st, ch, mb, staged_copy);
}

static bt_status device_land(bt_stage *st, bt_channel *ch, int mb)
{
    return st->be->stream_wait(st->dev, BT_STREAM_COMPUTE, ch->sent[mb]);
}

const bt_transport bt_transport_host = {BT_PATH_HOST, BT_TRANSPORT_HOST_BUFFER, host_setup, host_teardown,
                                        host_send, mailbox_wait, land_in_place};
const bt_transport bt_transport_local = {BT_PATH_LOCAL, BT_TRANSPORT_EVENTS, device_setup, device_teardown,
                                         local_send, mailbox_wait, device_land};
const bt_transport bt_transport_peer = {BT_PATH_PEER, BT_TRANSPORT_EVENTS, device_setup, device_teardown,
                                        peer_send, mailbox_wait, device_land};
const bt_transport bt_transport_staged = {BT_PATH_STAGED, BT_TRANSPORT_EVENTS, staged_setup, device_teardown,
                                          staged_send, mailbox_wait, device_land};

void bt_transport_table_init(const bt_transport **table)
{
    for (int p = 0; p < BT_TRANSPORT_PATHS; p++) table[p] = NULL;
    table[BT_PATH_HOST] = &bt_transport_host;
    table[BT_PATH_LOCAL] = &bt_transport_local;
    table[BT_PATH_PEER] = &bt_transport_peer;
    table[BT_PATH_STAGED] = &bt_transport_staged;
}

bt_status bt_transfer_setup(bt_engine *e, bt_channel *ch)
{
    const bt_transport *tp = (int)ch->path < BT_TRANSPORT_PATHS ? e->transport[ch->path] : NULL;
    if (!tp)
        return bt_error(BT_ERR_INTERNAL, "engine: no transport for the %s path from stage %d to %d",
                        bt_transfer_path_name(ch->path), ch->from, ch->to);
    ch->tp = tp;
    return tp->setup(e, ch);
}

void bt_transfer_teardown(bt_engine *e, bt_channel *ch)
{
    if (ch->tp) ch->tp->teardown(e, ch);
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

bt_status bt_transfer_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    return ch->tp->send(e, st, ch, mb);
}

bt_status bt_transfer_wait(bt_engine *e, bt_channel *ch, int mb)
{
    return ch->tp->wait(e, ch, mb);
}

bt_status bt_transfer_recv_act(bt_stage *st, bt_channel *ch, int mb)
{
    BT_TRY(ch->tp->land(st, ch, mb));
    if (!(ch->tp->flags & BT_TRANSPORT_HOST_BUFFER)) return BT_OK; /* read in place from buf */
    const unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
    for (int k = 0; k < ch->n_values; k++)
        BT_TRY(st->be->from_host(st->dev, bt_slot_value(st, mb, ch->values[k]), msg + ch->value_off[k],
                                 bt_channel_value_bytes(ch, k)));
    return BT_OK;
}

bt_status bt_transfer_recv_grad(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    const unsigned char *msg = ch->buf + (size_t)mb * ch->msg_bytes;
    int host = (ch->tp->flags & BT_TRANSPORT_HOST_BUFFER) != 0;
    BT_TRY(ch->tp->land(st, ch, mb));
    for (int k = 0; k < ch->n_values; k++) {
        size_t bytes = bt_channel_value_bytes(ch, k);
        const void *src = msg + ch->value_off[k];
        if (host) {
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
    if (!bt_channel_has_events(ch)) return BT_OK;
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
