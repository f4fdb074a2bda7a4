/* exec/decode.h: autoregressive decoding through the engine's stages (decode.c), the pipeline
 * under bt_generate (train/generate.c, which owns sampling and the sequences' contexts).
 *
 * A decode run carries n sequences. Each has at most one item in the pipeline at a time: rows
 * [pos, pos + n) of the sequence, given as their tokens. Every stage runs its own layers on the
 * item one row (position) at a time with its own weights and, per sequence, the caches of its own
 * layers (attention's keys and values), then hands the rows of the values later stages read to
 * them; the stage that produces the logits gives them to the caller's callback, which says what
 * the sequence's next item is (a sampled token) or that it is done, and the item goes back to the
 * first stage. With k sequences and P stages, k >= P keeps every stage busy, as the streaming
 * schedule does with micro-batches. Sequences never share state, so each one's rows are computed
 * exactly as they would be alone, on any number of stages.
 *
 * Across processes (an engine of bt_engine_create_dist, D = 1) every rank calls bt_engine_decode
 * alike, with the same sequences; each runs its own stage with its own weights, and the rows and
 * items move between ranks as MPI messages (decode_dist.h). The callback runs on the logits
 * stage's rank only: bt_engine_decode_share then hands its results to every rank.
 *
 * Data flow: train/generate.c -> bt_engine_decode -> the engine's workers (BT_JOB_DECODE) ->
 * backend run_op(BT_RUN_DECODE) per node and row. */
#ifndef BT_EXEC_DECODE_H
#define BT_EXEC_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/engine.h"
#include "baton/graph.h"
#include "baton/status.h"

/* One item of a sequence. */
typedef struct bt_decode_item {
    const int32_t *tokens; /* its n tokens; the caller keeps them unchanged until the item's callback */
    int64_t pos, n;        /* rows [pos, pos + n), 1 <= n, pos + n <= T */
    int reset;             /* 1: the sequence's caches start afresh (position pos must be 0) */
    int all_logits;        /* 1: the callback gets every row's logits; 0: the last row's */
    int done;              /* set by the callback: the sequence has no next item */
} bt_decode_item;

/* Called on the logits stage's thread once an item of sequence seq has run: logits holds `rows`
 * rows of V values in the engine's dtype (host memory, valid during the call). Writes the next
 * item of the sequence into *next (done = 1: none). A failure stops the run with its message. */
typedef bt_status (*bt_decode_fn)(void *ctx, int seq, const void *logits, int64_t rows, bt_decode_item *next);

typedef struct bt_decode_params {
    int token_value;       /* the graph value holding the tokens (an i32 input [T]) */
    int logits_node;       /* the node whose output [T, V] is the logits; later nodes do not run */
    int n_seqs;
    const bt_decode_item *first; /* [n_seqs] each sequence's first item */
    bt_decode_fn on_logits;
    void *ctx;
} bt_decode_params;

/* What a run measured. */
typedef struct bt_decode_stats {
    int stages;            /* the stages the rows streamed through (up to the logits' stage) */
    double wall_ms;
    double busy_ms[BT_MAX_STAGES]; /* per stage: running its layers (rows and their copies) */
    int64_t items[BT_MAX_STAGES];  /* per stage: items it ran */
} bt_decode_stats;

/* Runs the decode on e's workers until every sequence is done. Every value the nodes up to
 * logits_node produce must be shaped [T, ...] (a row per position; the caller checks it). Refused:
 * an engine across processes with data-parallel replicas (D > 1), and a stage whose backend cannot
 * run a layer's decode kernel (BT_ERR_UNSUPPORTED naming both). Buffers are allocated on the
 * stages' devices for the run (per sequence: T rows of every value crossing into a stage, each
 * layer's cache) and freed. Across processes stats are every stage's (collective), and a lost or
 * stuck rank fails the run within the watchdog, naming the rank waited for. */
bt_status bt_engine_decode(bt_engine *e, const bt_decode_params *p, bt_decode_stats *stats);

/* Across processes, every rank of the pipeline calls it alike: buf's bytes from the rank that ran
 * logits_node (where the callback ran) to every rank. Nothing in one process. */
bt_status bt_engine_decode_share(bt_engine *e, int logits_node, void *buf, size_t bytes);

#endif
