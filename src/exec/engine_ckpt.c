/* exec/engine_ckpt.c: what a checkpoint writer or reader asks the engine about placement, and the
 * two collective steps a sharded checkpoint needs across processes (train/checkpoint_shards.c is
 * the writer; docs/checkpoints.md the format). Kept apart from engine_dist.c (job set-up and the
 * step's exchanges) so that the checkpoint paths change alone.
 *
 *   owner of stage s: the process that writes s's tensors: in one process every stage; across
 *                     processes replica 0 of s (every replica holds the same weights).
 *   runner of stage s: a process that holds s's memory and must receive s's tensors on a
 *                     resume: in one process every stage; across processes every replica of s.
 *
 * With parallel.zero: 1 the optimizer state of a stage is spread over its replicas in bucket
 * chunks that do not follow tensor boundaries; bt_engine_gather_state gathers it whole on every
 * replica of the stage (bt_dist_gather_state, an all-gather over the stage's replicas), so the
 * owner writes whole tensors and the file does not depend on D. The next job shards it again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "exec/exec_internal.h"

#define AGREE_MESSAGE 480

bt_status bt_engine_param_stage(const bt_engine *e, const char *name, int *stage)
{
    if (!e || !name || !stage) return bt_error(BT_ERR_INVALID_ARG, "NULL engine, parameter name or stage");
    /* by the graph and the stages' node ranges: a rank holds the stores of its own stages only */
    const bt_graph *g = e->graph;
    for (int p = 0; p < g->n_params; p++) {
        if (strcmp(g->params[p].name, name) != 0) continue;
        for (int s = 0; s < e->stages; s++) {
            const bt_stage *st = &e->stage[s];
            if (g->params[p].node >= st->first_node && g->params[p].node < st->first_node + st->n_nodes) {
                *stage = s;
                return BT_OK;
            }
        }
    }
    return bt_error(BT_ERR_INVALID_ARG, "the model has no parameter '%s'", name);
}

int bt_engine_runs_stage(const bt_engine *e, int stage)
{
    if (!e || stage < 0 || stage >= e->stages) return 0;
    return bt_stage_is_local(e, stage);
}

int bt_engine_owns_stage(const bt_engine *e, int stage)
{
    return bt_engine_runs_stage(e, stage) && (!e->dist.on || e->dist.layout.replica == 0);
}

int bt_engine_ranks(const bt_engine *e) { return e && e->dist.on ? e->dist.layout.size : 1; }

bt_status bt_engine_gather_state(bt_engine *e)
{
    BT_TRY(bt_engine_check_usable(e));
    return e->ranks->gather_state(e);
}

/* One rank's word in bt_engine_agree. */
typedef struct agree_word {
    int32_t status;
    char message[AGREE_MESSAGE];
} agree_word;

bt_status bt_engine_agree(bt_engine *e, bt_status mine, double timeout_s)
{
    if (!e || !e->dist.on) return mine;
    agree_word w = {.status = (int32_t)mine};
    if (mine != BT_OK) snprintf(w.message, sizeof w.message, "%s", bt_last_error());
    int n = e->dist.layout.size;
    agree_word *all = calloc((size_t)n, sizeof *all);
    if (!all) return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    double limit = timeout_s > 0 ? timeout_s : e->params.watchdog_s;
    bt_status st = bt_comm_allgather_bytes(e->dist.world, &w, sizeof w, all, limit);
    if (st != BT_OK) {
        free(all);
        return bt_error_context(st, "rank %d: waiting for every rank's checkpoint status", e->dist.layout.rank);
    }
    for (int r = 0; r < n; r++) {
        if (all[r].status == BT_OK) continue;
        all[r].message[AGREE_MESSAGE - 1] = '\0';
        bt_dist_layout l = e->dist.layout;
        if (r == l.rank) st = bt_error((bt_status)all[r].status, "%s", all[r].message);
        else
            st = bt_error((bt_status)all[r].status, "rank %d (stage %d, replica %d): %s", r, r % l.stages,
                          r / l.stages, all[r].message);
        break;
    }
    free(all);
    return st;
}
