/* exec/decode_dist.c: the MPI messages of a decode run across ranks (exec/decode_dist.h). Each
 * (boundary, sequence) pair has one buffer at each end that this rank runs, laid out as
 *
 *   [header][tokens: T int32, padded][rows: T x row_sum bytes, position-major]
 *
 * and an item of n rows moves the first HEAD + n x row_sum bytes of it (the header's n says how
 * many arrived). Receives are posted ahead into the receiving end's buffers, at the start and again
 * once a message was handed on; tags say the pair (DEC_TAG + (id + 1) x n_seqs + seq for a
 * boundary, DEC_TAG + seq for an item going back to stage 0, DEC_TAG - 1 for the finish), all
 * below the engine's own (0x40000000 and up) and above its channels'. Messages go over the
 * engine's world communicator between the ranks of this replica. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/decode_dist.h"
#include "exec/exec_internal.h"

#define DEC_TAG 0x20000000
#define DEC_TAG_SPAN 0x1fff0000 /* tags DEC_TAG .. DEC_TAG + DEC_TAG_SPAN */

/* One end of a pair's messages: a buffer and a request per sequence. */
typedef struct dend {
    unsigned char *buf;        /* [n_seqs][msg_max] */
    bt_comm_req *req;          /* [n_seqs] */
} dend;

typedef struct dbound {
    int from, to;
    size_t row_sum;
    dend send, recv;           /* the ends this rank runs (buf NULL: not this rank's) */
} dbound;

struct bt_decode_link {
    bt_engine *e;
    int n_seqs, logits_stage, me;
    int64_t T;
    size_t tok_bytes;          /* the padded token area */
    int n_bounds;
    dbound *b;
    dend item_send, item_recv; /* items going back to stage 0: header and tokens */
    bt_comm_req *fin_send;     /* [stages] the logits rank's finish messages */
    bt_comm_req fin_recv;
    int32_t fin_word, fin_got;
    int failed;                /* a send may still be in flight: its buffer is not freed */
};

static size_t head_bytes(void) { return (sizeof(bt_decode_head) + 63) / 64 * 64; }

static size_t msg_max(const bt_decode_link *l, size_t row_sum)
{
    return head_bytes() + l->tok_bytes + (size_t)l->T * row_sum;
}

static int rank_of_stage(const bt_decode_link *l, int s)
{
    return bt_dist_rank_of(&l->e->dist.layout, l->e->dist.layout.replica, s);
}

static bt_status end_alloc(dend *d, int n_seqs, size_t bytes)
{
    d->buf = calloc((size_t)n_seqs, bytes);
    d->req = calloc((size_t)n_seqs, sizeof *d->req);
    if (!d->buf || !d->req) return bt_error(BT_ERR_NOMEM, "decode: out of memory for the messages between ranks");
    return BT_OK;
}

bt_status bt_decode_link_create(bt_engine *e, int n_seqs, int64_t T, int logits_stage, int n_bounds,
                                bt_decode_link **out)
{
    *out = NULL;
    if ((int64_t)(n_bounds + 1) * n_seqs >= DEC_TAG_SPAN)
        return bt_error(BT_ERR_INVALID_ARG, "decode: %d sequences over %d boundaries is more than the messages "
                        "between ranks can tell apart", n_seqs, n_bounds);
    bt_decode_link *l = calloc(1, sizeof *l);
    if (!l) return bt_error(BT_ERR_NOMEM, "decode: out of memory");
    l->e = e;
    l->n_seqs = n_seqs;
    l->T = T;
    l->logits_stage = logits_stage;
    l->me = e->dist.layout.stage;
    l->tok_bytes = ((size_t)T * sizeof(int32_t) + 63) / 64 * 64;
    l->n_bounds = n_bounds;
    l->b = calloc((size_t)n_bounds + 1, sizeof *l->b);
    l->fin_send = calloc((size_t)e->stages, sizeof *l->fin_send);
    bt_status st = l->b && l->fin_send ? BT_OK : bt_error(BT_ERR_NOMEM, "decode: out of memory");
    for (int id = 0; st == BT_OK && id < n_bounds; id++) l->b[id].from = l->b[id].to = -1; /* not between ranks */
    if (st == BT_OK && logits_stage != 0 && l->me == logits_stage)
        st = end_alloc(&l->item_send, n_seqs, msg_max(l, 0));
    if (st == BT_OK && logits_stage != 0 && l->me == 0) st = end_alloc(&l->item_recv, n_seqs, msg_max(l, 0));
    if (st != BT_OK) {
        bt_decode_link_destroy(l);
        return st;
    }
    *out = l;
    return BT_OK;
}

bt_status bt_decode_link_add(bt_decode_link *l, int id, int from, int to, size_t row_sum)
{
    dbound *b = &l->b[id];
    b->from = from;
    b->to = to;
    b->row_sum = row_sum;
    if (from == l->me) BT_TRY(end_alloc(&b->send, l->n_seqs, msg_max(l, row_sum)));
    if (to == l->me) BT_TRY(end_alloc(&b->recv, l->n_seqs, msg_max(l, row_sum)));
    return BT_OK;
}

static unsigned char *slot(const bt_decode_link *l, const dend *d, size_t row_sum, int seq)
{
    return d->buf + (size_t)seq * msg_max(l, row_sum);
}

static int tag_of(const bt_decode_link *l, int id, int seq) { return DEC_TAG + (id + 1) * l->n_seqs + seq; }

static bt_status post_recv(bt_decode_link *l, int id, int seq)
{
    const bt_comm *w = l->e->dist.world;
    if (id < 0)
        return bt_comm_irecv(w, slot(l, &l->item_recv, 0, seq), msg_max(l, 0), rank_of_stage(l, l->logits_stage),
                             DEC_TAG + seq, &l->item_recv.req[seq]);
    dbound *b = &l->b[id];
    return bt_comm_irecv(w, slot(l, &b->recv, b->row_sum, seq), msg_max(l, b->row_sum), rank_of_stage(l, b->from),
                         tag_of(l, id, seq), &b->recv.req[seq]);
}

bt_status bt_decode_link_start(bt_decode_link *l)
{
    for (int q = 0; q < l->n_seqs; q++) {
        for (int id = 0; id < l->n_bounds; id++)
            if (l->b[id].recv.buf) BT_TRY(post_recv(l, id, q));
        if (l->item_recv.buf) BT_TRY(post_recv(l, -1, q));
    }
    if (l->me < l->logits_stage)
        BT_TRY(bt_comm_irecv(l->e->dist.world, &l->fin_got, sizeof l->fin_got, rank_of_stage(l, l->logits_stage),
                             DEC_TAG - 1, &l->fin_recv));
    return BT_OK;
}

/* Waits for a send request before its buffer is refilled. */
static bt_status wait_send(bt_decode_link *l, bt_comm_req *req, int to)
{
    bt_status s = bt_comm_wait(req, l->e->params.watchdog_s, &l->e->abort);
    if (s == BT_ERR_TIMEOUT) {
        char who[96];
        bt_dist_describe_stage(l->e, to, who, sizeof who);
        return bt_error(s, "watchdog: decode: after %.1f s, a message to %s was not taken (lost, or stuck: see that "
                        "rank's own message)", l->e->params.watchdog_s, who);
    }
    if (s == BT_ERR_INTERNAL) return bt_error(s, "decode: stopped while sending to another rank");
    return s;
}

bt_status bt_decode_link_rows(bt_decode_link *l, int id, int seq, unsigned char **rows)
{
    dbound *b = &l->b[id];
    BT_TRY(wait_send(l, &b->send.req[seq], b->to));
    *rows = slot(l, &b->send, b->row_sum, seq) + head_bytes() + l->tok_bytes;
    return BT_OK;
}

static void fill_head(unsigned char *msg, int seq, const bt_decode_item *it)
{
    bt_decode_head h = {.seq = seq, .reset = it->reset, .all_logits = it->all_logits, .pos = it->pos, .n = it->n};
    memcpy(msg, &h, sizeof h);
    memcpy(msg + head_bytes(), it->tokens, (size_t)it->n * sizeof(int32_t));
}

bt_status bt_decode_link_send_rows(bt_decode_link *l, int id, int seq, const bt_decode_item *it)
{
    dbound *b = &l->b[id];
    unsigned char *msg = slot(l, &b->send, b->row_sum, seq);
    fill_head(msg, seq, it);
    return bt_comm_isend(l->e->dist.world, msg, head_bytes() + l->tok_bytes + (size_t)it->n * b->row_sum,
                         rank_of_stage(l, b->to), tag_of(l, id, seq), &b->send.req[seq]);
}

bt_status bt_decode_link_send_item(bt_decode_link *l, int seq, const bt_decode_item *it)
{
    BT_TRY(wait_send(l, &l->item_send.req[seq], 0));
    unsigned char *msg = slot(l, &l->item_send, 0, seq);
    fill_head(msg, seq, it);
    return bt_comm_isend(l->e->dist.world, msg, head_bytes() + l->tok_bytes, rank_of_stage(l, 0), DEC_TAG + seq,
                         &l->item_send.req[seq]);
}

bt_status bt_decode_link_send_finish(bt_decode_link *l)
{
    l->fin_word = 1;
    for (int s = 0; s < l->logits_stage; s++)
        BT_TRY(bt_comm_isend(l->e->dist.world, &l->fin_word, sizeof l->fin_word, rank_of_stage(l, s), DEC_TAG - 1,
                             &l->fin_send[s]));
    return BT_OK;
}

/* Checks an arrived header against what this run can hold (a message of another run or a bug). */
static bt_status check_head(const bt_decode_link *l, const bt_decode_head *h, int seq)
{
    if (h->seq != seq || h->n < 1 || h->pos < 0 || h->pos + h->n > l->T)
        return bt_error(BT_ERR_INTERNAL, "decode: a message for sequence %d holds sequence %d, rows %lld + %lld "
                        "(T = %lld)", seq, (int)h->seq, (long long)h->pos, (long long)h->n, (long long)l->T);
    return BT_OK;
}

static bt_status take(bt_decode_link *l, int id, int seq, bt_decode_arrival_fn fn, void *ctx)
{
    const dend *d = id < 0 ? &l->item_recv : &l->b[id].recv;
    const unsigned char *msg = slot(l, d, id < 0 ? 0 : l->b[id].row_sum, seq);
    bt_decode_head h;
    memcpy(&h, msg, sizeof h);
    BT_TRY(check_head(l, &h, seq));
    BT_TRY(fn(ctx, id, &h, (const int32_t *)(msg + head_bytes()), msg + head_bytes() + l->tok_bytes));
    return post_recv(l, id, seq);
}

bt_status bt_decode_link_poll(bt_decode_link *l, bt_decode_arrival_fn fn, void *ctx, int *arrived, int *finished)
{
    *arrived = 0;
    for (int id = -1; id < l->n_bounds; id++) {
        dend *d = id < 0 ? &l->item_recv : &l->b[id].recv;
        if (!d->buf) continue;
        for (int q = 0; q < l->n_seqs; q++) {
            int done = 0;
            if (!d->req[q].active) continue;
            BT_TRY(bt_comm_test(&d->req[q], &done));
            if (!done) continue;
            BT_TRY(take(l, id, q, fn, ctx));
            (*arrived)++;
        }
    }
    if (l->fin_recv.active) {
        int done = 0;
        BT_TRY(bt_comm_test(&l->fin_recv, &done));
        if (done) *finished = 1;
    }
    return BT_OK;
}

void bt_decode_link_peers(const bt_decode_link *l, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < l->e->stages && used < size; s++) {
        int from = 0;
        for (int id = 0; id < l->n_bounds; id++) from |= l->b[id].to == l->me && l->b[id].from == s;
        if (l->me == 0 && s == l->logits_stage && s != 0) from = 1; /* the next items */
        if (!from) continue;
        char who[96];
        bt_dist_describe_stage(l->e, s, who, sizeof who);
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? " or " : "", who);
    }
}

static void cancel_recvs(dend *d, int n)
{
    for (int q = 0; d->req && q < n; q++) bt_comm_cancel(&d->req[q]);
}

bt_status bt_decode_link_end(bt_decode_link *l, int ok)
{
    bt_status s = BT_OK;
    for (int id = 0; ok && s == BT_OK && id < l->n_bounds; id++)
        for (int q = 0; l->b[id].send.req && q < l->n_seqs && s == BT_OK; q++)
            s = wait_send(l, &l->b[id].send.req[q], l->b[id].to);
    for (int q = 0; ok && s == BT_OK && l->item_send.req && q < l->n_seqs; q++)
        s = wait_send(l, &l->item_send.req[q], 0);
    for (int st = 0; ok && s == BT_OK && st < l->logits_stage; st++) s = wait_send(l, &l->fin_send[st], st);
    if (!ok || s != BT_OK) l->failed = 1;
    for (int id = 0; id < l->n_bounds; id++) cancel_recvs(&l->b[id].recv, l->n_seqs);
    cancel_recvs(&l->item_recv, l->n_seqs);
    bt_comm_cancel(&l->fin_recv);
    return s;
}

static void end_free(dend *d)
{
    free(d->buf);
    free(d->req);
}

void bt_decode_link_destroy(bt_decode_link *l)
{
    if (!l) return;
    for (int id = 0; l->b && id < l->n_bounds; id++) end_free(&l->b[id].recv);
    end_free(&l->item_recv);
    if (l->failed) return; /* a send may be in flight from the rest: left to the process's exit */
    for (int id = 0; l->b && id < l->n_bounds; id++) end_free(&l->b[id].send);
    end_free(&l->item_send);
    free(l->b);
    free(l->fin_send);
    free(l);
}

bt_status bt_decode_dist_stats(bt_engine *e, int P, double busy_ms, int64_t items, bt_decode_stats *stats)
{
    const int n = bt_comm_size(e->dist.pipe);
    double *all = malloc((size_t)n * sizeof *all);
    if (!all) return bt_error(BT_ERR_NOMEM, "decode: out of memory");
    const double mine[2] = {busy_ms, (double)items};
    bt_status st = BT_OK;
    for (int k = 0; k < 2 && st == BT_OK; k++) {
        st = bt_comm_allgather_f64(e->dist.pipe, mine[k], all, e->params.watchdog_s, &e->abort);
        for (int s = 0; s < P && s < n && st == BT_OK; s++) {
            if (k == 0) stats->busy_ms[s] = all[s];
            else stats->items[s] = (int64_t)all[s];
        }
    }
    free(all);
    if (st == BT_ERR_INTERNAL) st = bt_error(st, "decode: stopped while gathering the stages' figures");
    return st;
}

bt_status bt_engine_decode_share(bt_engine *e, int logits_node, void *buf, size_t bytes)
{
    if (!e || !buf) return bt_error(BT_ERR_INVALID_ARG, "decode: NULL engine or buffer");
    if (!e->dist.on || bytes == 0) return BT_OK;
    int root = -1;
    for (int s = 0; s < e->stages; s++)
        if (logits_node >= e->stage[s].first_node && logits_node < e->stage[s].first_node + e->stage[s].n_nodes) root = s;
    if (root < 0) return bt_error(BT_ERR_INVALID_ARG, "decode: logits node %d is on no stage", logits_node);
    return bt_comm_bcast(e->dist.pipe, buf, bytes, root, e->params.watchdog_s);
}
