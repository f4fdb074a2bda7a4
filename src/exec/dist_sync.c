/* exec/dist_sync.c: what the ranks of a job across processes do together between steps (see
 * engine_dist.c for the rest): bt_engine_sync_params gives rank 0 a host copy of every other stage
 * (weights and optimizer state from replica 0's rank of each, one message per stage) for the
 * checkpoint it writes, since a rank holds its own stage only; the parameter accessors read it
 * (bt_dist_mirror_read) until the next job drops it. bt_engine_agree_stop makes every rank stop
 * after the same step when a signal reached any of them. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"

/* The tag of a stage's tensors sent to rank 0 by bt_engine_sync_params */
#define BT_TAG_MIRROR 0x40000010
/* bt_engine_agree_stop: a rank's word to rank 0 (+ 1: rank 0's answer) */
#define BT_TAG_STOP 0x40001000 /* above the mirror's per-stage tags and NCCL's per-channel ids */

/* Bytes of stage s's parameters in the engine's dtype, and the offset of param's slot (-1: the
 * weights) in the mirror's order: parameter by parameter (graph order), weights then each slot. */
static size_t mirror_offset(const bt_engine *e, int s, int param, int slot, size_t *total)
{
    const bt_graph *g = e->graph;
    const bt_stage *st = &e->stage[s];
    size_t dsz = bt_dtype_size(e->dtype), off = 0, at = 0;
    int per = 1 + (e->params.training ? bt_optim_state_count(&e->params.optimizer) : 0);
    for (int p = 0; p < g->n_params; p++) {
        if (g->params[p].node < st->first_node || g->params[p].node >= st->first_node + st->n_nodes) continue;
        size_t n = (size_t)bt_shape_numel(&g->params[p].shape) * dsz;
        if (p == param) at = off + (size_t)(slot + 1) * n;
        off += (size_t)per * n;
    }
    if (total) *total = off;
    return at;
}

bt_status bt_dist_mirror_read(const bt_engine *e, int s, int param, int slot, void *dst, size_t bytes)
{
    if (!e->dist.mirror || !e->dist.mirror[s]) {
        char who[96];
        bt_dist_describe_stage(e, s, who, sizeof who);
        return bt_error(BT_ERR_INVALID_ARG,
                        "parameter '%s' is held by %s: this rank holds its own stage only (rank 0 gets a copy of "
                        "every stage from bt_engine_sync_params, which every rank calls)",
                        e->graph->params[param].name, who);
    }
    memcpy(dst, e->dist.mirror[s] + mirror_offset(e, s, param, slot, NULL), bytes);
    return BT_OK;
}

void bt_dist_mirror_drop(bt_engine *e)
{
    for (int s = 0; e->dist.mirror && s < e->stages; s++) {
        free(e->dist.mirror[s]);
        e->dist.mirror[s] = NULL;
    }
}

/* Replica 0's rank of a stage other than rank 0's: its stage's tensors, packed in the mirror's
 * order, to rank 0. */
static bt_status send_stage_to_root(bt_engine *e, bt_stage *st)
{
    size_t total, dsz = bt_dtype_size(e->dtype);
    mirror_offset(e, st->index, -1, -1, &total);
    unsigned char *buf = malloc(total ? total : 1);
    if (!buf) return bt_error(BT_ERR_NOMEM, "engine: out of memory for the checkpoint copy");
    bt_status s = BT_OK;
    int slots = e->params.training ? bt_optim_state_count(&e->params.optimizer) : 0;
    for (int i = 0; i < st->n_params && s == BT_OK; i++) {
        bt_param_store *p = &st->params[i];
        unsigned char *at = buf + mirror_offset(e, st->index, p->param, -1, NULL);
        s = st->be->to_host(st->dev, at, p->w, p->numel * dsz);
        for (int k = 0; k < slots && s == BT_OK; k++)
            s = st->be->to_host(st->dev, at + (size_t)(k + 1) * p->numel * dsz, p->state[k], p->numel * dsz);
    }
    bt_comm_req req = {0};
    if (s == BT_OK) s = bt_comm_isend(e->dist.world, buf, total, 0, BT_TAG_MIRROR + st->index, &req);
    if (s == BT_OK) {
        s = bt_comm_wait(&req, e->params.watchdog_s, &e->abort);
        if (s == BT_ERR_TIMEOUT)
            s = bt_error(s, "watchdog: after %.1f s, rank %d (stage %d) could not hand its tensors to rank 0 for the "
                         "checkpoint (lost, or stuck: see that rank's own message)",
                         e->params.watchdog_s, e->dist.layout.rank, st->index);
    }
    if (s != BT_OK) bt_comm_cancel(&req);
    free(buf);
    return s;
}

/* Rank 0: every other stage's tensors from its replica-0 rank, into the mirrors. */
static bt_status receive_stages(bt_engine *e)
{
    bt_engine_dist *d = &e->dist;
    if (!d->mirror && !(d->mirror = calloc((size_t)e->stages, sizeof *d->mirror)))
        return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    for (int s = 0; s < e->stages; s++) {
        if (bt_stage_is_local(e, s)) continue;
        size_t total;
        mirror_offset(e, s, -1, -1, &total);
        d->mirror[s] = malloc(total ? total : 1);
        if (!d->mirror[s]) return bt_error(BT_ERR_NOMEM, "engine: out of memory for the checkpoint copy");
        bt_comm_req req = {0};
        int from = bt_dist_rank_of(&d->layout, 0, s);
        BT_TRY(bt_comm_irecv(d->world, d->mirror[s], total, from, BT_TAG_MIRROR + s, &req));
        bt_status st = bt_comm_wait(&req, e->params.watchdog_s, &e->abort);
        if (st != BT_OK) bt_comm_cancel(&req);
        if (st == BT_ERR_TIMEOUT)
            return bt_error(st, "watchdog: after %.1f s, rank 0 waits for the tensors of stage %d from rank %d (stage "
                            "%d, replica 0) for the checkpoint (lost, or stuck: see that rank's own message)",
                            e->params.watchdog_s, s, from, s);
        BT_TRY(st);
    }
    return BT_OK;
}

bt_status bt_engine_sync_params(bt_engine *e)
{
    BT_TRY(bt_engine_check_usable(e));
    if (!e->dist.on) return BT_OK;
    const bt_dist_layout *l = &e->dist.layout;
    bt_stage *st = &e->stage[l->stage];
    if (e->dist.zero) BT_TRY(bt_dist_gather_state(e, st)); /* the replicas' chunks, on each of them */
    BT_TRY(st->be->sync(st->dev));
    bt_dist_mirror_drop(e);
    if (l->rank == 0) return receive_stages(e);
    if (l->replica == 0) return send_stage_to_root(e, st);
    return BT_OK;
}

/* Through rank 0, point to point (not one all-reduce) so that a rank that is lost is named: rank 0
 * waits for each rank's word in turn and, past the watchdog, names the one missing; the others
 * wait for rank 0's answer and name rank 0. */
bt_status bt_engine_agree_stop(bt_engine *e, int local, int *stop)
{
    if (!stop) return bt_error(BT_ERR_INVALID_ARG, "bt_engine_agree_stop: stop is NULL");
    *stop = local != 0;
    BT_TRY(bt_engine_check_usable(e));
    if (!e->dist.on) return BT_OK;
    const bt_dist_layout *l = &e->dist.layout;
    double v = local != 0, word = 0;
    const double wait_s = e->params.watchdog_s;
    bt_comm_req req = {0};
    if (l->rank == 0) {
        for (int r = 1; r < l->size; r++) {
            BT_TRY(bt_comm_irecv(e->dist.world, &word, sizeof word, r, BT_TAG_STOP, &req));
            bt_status st = bt_comm_wait(&req, wait_s, &e->abort);
            if (st != BT_OK) bt_comm_cancel(&req);
            if (st == BT_ERR_TIMEOUT)
                return bt_error(st, "watchdog: after %.1f s, rank 0 (stage %d, replica %d) agreeing whether to stop "
                                "after the step had no word from rank %d (stage %d, replica %d): lost, or stuck "
                                "(see that rank's own message)",
                                wait_s, l->stage, l->replica, r, r % l->stages, r / l->stages);
            BT_TRY(st);
            if (word > 0) v = 1;
        }
        for (int r = 1; r < l->size; r++) {
            BT_TRY(bt_comm_isend(e->dist.world, &v, sizeof v, r, BT_TAG_STOP + 1, &req));
            bt_status st = bt_comm_wait(&req, wait_s, &e->abort);
            if (st != BT_OK) bt_comm_cancel(&req);
            if (st == BT_ERR_TIMEOUT)
                return bt_error(st, "watchdog: after %.1f s, rank 0 agreeing whether to stop could not answer rank %d "
                                "(stage %d, replica %d): lost, or stuck",
                                wait_s, r, r % l->stages, r / l->stages);
            BT_TRY(st);
        }
    } else {
        bt_comm_req ask = {0};
        BT_TRY(bt_comm_isend(e->dist.world, &v, sizeof v, 0, BT_TAG_STOP, &ask));
        BT_TRY(bt_comm_irecv(e->dist.world, &word, sizeof word, 0, BT_TAG_STOP + 1, &req));
        bt_status st = bt_comm_wait(&ask, wait_s, &e->abort);
        if (st == BT_OK) st = bt_comm_wait(&req, wait_s, &e->abort);
        if (st != BT_OK) bt_comm_cancel(&ask), bt_comm_cancel(&req);
        if (st == BT_ERR_TIMEOUT)
            return bt_error(st, "watchdog: after %.1f s, rank %d (stage %d, replica %d) agreeing whether to stop "
                            "after the step had no answer from rank 0 (stage 0, replica 0): lost, or stuck "
                            "(see that rank's own message)",
                            wait_s, l->rank, l->stage, l->replica);
        BT_TRY(st);
        v = word;
    }
    *stop = v > 0;
    return BT_OK;
}
