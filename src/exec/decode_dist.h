/* exec/decode_dist.h: the MPI side of a decode run whose stages are on different ranks (one
 * replica's pipeline under mpirun; decode_dist.c). decode.c keeps the pipeline's logic (which stage
 * runs what, the inboxes, the caches) and calls this for the three kinds of message that cross
 * ranks:
 *
 *   rows    boundary id (the decode's channel index, the same on every rank) from stage `from` to
 *           stage `to`, for one sequence's item: the item's header and tokens, then the rows
 *           [0, n) of every value crossing, position-major (row i at i x row_sum), so an item of
 *           n rows sends a prefix of the buffer;
 *   item    the next item of a sequence, from the logits stage's rank back to stage 0's;
 *   finish  from the logits stage's rank to every other decoding rank once every sequence is done.
 *
 * Every receive of this rank is posted ahead (per incoming boundary and sequence, straight into
 * that pair's buffer, and again as soon as its message was taken), so a send never waits for the
 * receiver's progress. A sequence has at most one item in the pipeline, so one buffer per
 * (boundary, sequence) and end suffices; a sender waits for its previous send from that buffer
 * before refilling it. Waits are bounded by the engine's watchdog and stop on its abort flag. */
#ifndef BT_EXEC_DECODE_DIST_H
#define BT_EXEC_DECODE_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "exec/decode.h"

/* A message's header. */
typedef struct bt_decode_head {
    int32_t seq, reset, all_logits, pad;
    int64_t pos, n;
} bt_decode_head;

typedef struct bt_decode_link bt_decode_link;

/* For a distributed engine e (one replica of P_engine stages; the logits on logits_stage). */
bt_status bt_decode_link_create(bt_engine *e, int n_seqs, int64_t T, int logits_stage, int n_bounds,
                                bt_decode_link **out);
/* Boundary id between decoding stages from and to, row_sum bytes per position: buffers for the
 * end this rank runs (none when it runs neither). */
bt_status bt_decode_link_add(bt_decode_link *l, int id, int from, int to, size_t row_sum);
/* Posts every receive this rank's stage expects. */
bt_status bt_decode_link_start(bt_decode_link *l);
/* The rows area of boundary id's send buffer for seq, once its previous send completed. */
bt_status bt_decode_link_rows(bt_decode_link *l, int id, int seq, unsigned char **rows);
/* Sends boundary id's message for seq: header and tokens of it, rows [0, it->n). */
bt_status bt_decode_link_send_rows(bt_decode_link *l, int id, int seq, const bt_decode_item *it);
/* Sends seq's next item to stage 0's rank. */
bt_status bt_decode_link_send_item(bt_decode_link *l, int seq, const bt_decode_item *it);
/* Tells every other decoding rank that every sequence is done. */
bt_status bt_decode_link_send_finish(bt_decode_link *l);

/* Called for each message taken: id is the boundary (-1: an item for stage 0); tokens holds h->n
 * tokens and rows h->n rows of row_sum bytes (boundaries only). Valid during the call. */
typedef bt_status (*bt_decode_arrival_fn)(void *ctx, int id, const bt_decode_head *h, const int32_t *tokens,
                                          const unsigned char *rows);
/* Tests every posted receive once, hands each arrived message to fn and posts its receive again;
 * *arrived counts them, *finished is set by the finish message. */
bt_status bt_decode_link_poll(bt_decode_link *l, bt_decode_arrival_fn fn, void *ctx, int *arrived, int *finished);
/* "rank 1 (stage 1, replica 0)" and others: the ranks this rank's stage receives from. */
void bt_decode_link_peers(const bt_decode_link *l, char *buf, size_t size);
/* After the run: ok, waits for this rank's sends (bounded by the watchdog); either way cancels the
 * receives still posted. After a failure the send buffers are left to the process's exit (MPI may
 * still read them). */
bt_status bt_decode_link_end(bt_decode_link *l, int ok);
/* Accepts NULL. */
void bt_decode_link_destroy(bt_decode_link *l);

/* Collective over the replica's pipeline after a run: every decoding stage's busy time and items
 * (stats->busy_ms, items for stages 0..P-1), each from its own rank. */
bt_status bt_decode_dist_stats(bt_engine *e, int P, double busy_ms, int64_t items, bt_decode_stats *stats);

#endif
