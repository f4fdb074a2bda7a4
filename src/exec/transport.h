/* exec/transport.h: the table of transports, one entry per path a stage boundary's messages take
 * (the paths of baton/engine.h). The executor calls a channel's entry and never asks which path it
 * is: transfer.c defines the four in one process (host, local, peer, staged); the paths between
 * ranks (mpi, mpi-staged, nccl) are defined by the code that runs a job across processes and
 * installed in the engine's table when the engine becomes one rank of such a job. A channel's
 * entry (bt_channel.tp) is fixed when it is built (topology.c) from its path; a path without an
 * entry in the engine's table is an internal error there.
 *
 * The order of calls on one channel: setup once; per micro-batch, on the sender's thread send,
 * and on the receiver's thread wait (the host side: the message was queued or has arrived) then
 * land (the receiver's compute stream may read it); teardown once (devices still open). The
 * generic parts (the mailbox post of in-process paths, reading host buffers into the stage,
 * adding gradients, the copy-time accounting of evented paths) stay in transfer.c and follow the
 * flags. Included by exec_internal.h, whose types it uses. */
#ifndef BT_EXEC_TRANSPORT_H
#define BT_EXEC_TRANSPORT_H

/* The boundary paths (BT_PATH_SHM is a reduction's path, never a boundary's). */
#define BT_TRANSPORT_PATHS (BT_PATH_NCCL + 1)

enum {
    /* the copies are ordered by events: the sender records begin[mb] and sent[mb] on its copy
     * stream and sets pending[mb] (the receiver's side of a device path waits for sent[mb]); the
     * copy time is read from the events once the sender's device is idle (bt_transfer_account) */
    BT_TRANSPORT_EVENTS = 1u << 0,
    /* the other end is another rank: the transport tells the receiver itself (no mailbox post),
     * and what the peer last did is not known here */
    BT_TRANSPORT_REMOTE = 1u << 1,
    /* the message sits in host memory (buf): the receiver copies it into the stage */
    BT_TRANSPORT_HOST_BUFFER = 1u << 2,
};

typedef struct bt_transport {
    bt_transfer_path path;
    unsigned flags; /* BT_TRANSPORT_* */
    /* The channel's buffer, events and whatever else its path needs, on this rank's side. */
    bt_status (*setup)(bt_engine *e, bt_channel *ch);
    /* Frees what setup made that bt_transfer_teardown does not (begin, sent, pending, req and
     * sent_at are freed there, after this). Runs on a channel whose setup failed part-way. */
    void (*teardown)(bt_engine *e, bt_channel *ch);
    /* Queues micro-batch mb's message (the sender's values written; with BT_TRANSPORT_EVENTS the
     * copy stream already waits for ev_ready). */
    bt_status (*send)(bt_engine *e, bt_stage *st, bt_channel *ch, int mb);
    /* The receiver's host thread: until mb's message was queued (or arrived); the errors of
     * bt_channel_wait (BT_ERR_TIMEOUT, BT_ERR_INTERNAL on abort). */
    bt_status (*wait)(bt_engine *e, bt_channel *ch, int mb);
    /* The receiver: st's compute stream may read mb's message from buf once this returns (a wait
     * queued on it, or a copy into buf). */
    bt_status (*land)(bt_stage *st, bt_channel *ch, int mb);
} bt_transport;

/* transfer.c: the in-process entries, and the engine's table with them filled in. */
extern const bt_transport bt_transport_host, bt_transport_local, bt_transport_peer, bt_transport_staged;
void bt_transport_table_init(const bt_transport **table);

/* transfer.c, for transports elsewhere: packs mb's values from st into msg (host memory), one
 * synchronous copy each (the host path's send, and a CPU side's send between ranks). */
bt_status bt_transfer_pack_host(const bt_stage *st, const bt_channel *ch, int mb, unsigned char *msg);

#endif
