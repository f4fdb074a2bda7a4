/* exec/engine_dist.c: an engine that is one rank of a job across processes. Every rank builds the
 * whole plan (schedules for every stage, validated on every rank, every stage's memory layout) but
 * allocates and runs only its own stage (layout.stage) of its own replica; the other stages are
 * plan data and their workers idle (rank 0's checkpoint copy of them: dist_sync.c). A boundary between two
 * stages on different ranks takes the `mpi` path:
 *
 *   the receiver posts, at the start of each job, a receive for every micro-batch of every
 *   incoming MPI channel straight into the channel's buffer (so a send never waits on the
 *   receiver's schedule, the assumption the validator's deadlock proof makes); the sender packs the
 *   values into its own copy of the buffer and sends (MPI_Isend); RECV waits for its micro-batch
 *   (polling, bounded by the watchdog, stopped by an abort) and reads the values in place.
 *
 * Data parallelism (D > 1, dist_dp.c): the D ranks of a stage all-reduce its parameter gradients in buckets
 * (about bucket_bytes each, in the order backward finishes them); a bucket's all-reduce starts
 * during the stage's last backward of the step as soon as its last gradient is final, so it
 * overlaps the rest of the backward work (a split backward's W instructions, for the weight
 * gradients they finish); STEP waits for them. Each replica feeds its own shard
 * of the global batch and seeds the loss gradient with 1 / (global batch), so the summed gradient
 * is the global mean; the loss is summed over replicas. The global gradient norm is all-gathered
 * per stage over the replica's pipeline, so clipping and the finite check see the same total
 * everywhere (and in the same order of addition as one process). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/util.h"
#include "exec/engine_dist.h"
#include "exec/exec_internal.h"
#include "optim/optim.h"

#define BT_DP_BUCKET_DEFAULT ((size_t)4 << 20)
/* Tags of the STEP exchanges (BT_TAG_ZERO: dist_dp.c; BT_TAG_MIRROR: dist_sync.c), above every channel's
 * (c x BT_MAX_MICROBATCHES + mb) */
#define BT_TAG_PIPE 0x40000000
#define BT_TAG_REPLICAS 0x40000001
#define BT_TAG_TIE 0x40000003 /* a tied parameter's gradient (bt_dist_tie_exchange) */

static int peer_rank(const bt_engine *e, int stage)
{
    return bt_dist_rank_of(&e->dist.layout, e->dist.layout.replica, stage);
}

void bt_dist_describe_stage(const bt_engine *e, int s, char *buf, size_t size)
{
    if (!e->dist.on) {
        snprintf(buf, size, "stage %d", s);
        return;
    }
    snprintf(buf, size, "rank %d (stage %d, replica %d)", peer_rank(e, s), s, e->dist.layout.replica);
}

const bt_dist_layout *bt_engine_dist_layout(const bt_engine *e)
{
    return e && e->dist.on ? &e->dist.layout : NULL;
}

static bt_status bucket_bytes_from_env(size_t *out)
{
    const char *v = getenv("BATON_DP_BUCKET");
    *out = BT_DP_BUCKET_DEFAULT;
    if (!v || !*v) return BT_OK;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end != '\0' || n < 1024)
        return bt_error(BT_ERR_INVALID_ARG, "BATON_DP_BUCKET must be a byte count of at least 1024, not '%s'", v);
    *out = (size_t)n;
    return BT_OK;
}

bt_status bt_dist_setup(bt_engine *e, const bt_dist_layout *layout)
{
    if (layout->stages != e->stages)
        return bt_error(BT_ERR_INVALID_ARG,
                        "the job has N = %d ranks for D = %d replicas of P = %d stages, but the model's plan has "
                        "%d stages",
                        layout->size, layout->data, layout->stages, e->stages);
    e->dist.on = 1;
    e->dist.layout = *layout;
    bt_remote_install_transports(e);
    e->ranks = &bt_rank_hooks_dist;
    e->dist.zero = e->params.parallel.zero && layout->data > 1 && e->train_sched;
    int64_t per = (int64_t)layout->data * e->params.parallel.microbatches;
    if (e->params.batch % per != 0)
        return bt_error(BT_ERR_INVALID_ARG,
                        "batch %lld does not split into D = %d replicas of %d equal micro-batches",
                        (long long)e->params.batch, layout->data, e->params.parallel.microbatches);
    BT_TRY(bucket_bytes_from_env(&e->dist.bucket_bytes));
    BT_TRY(bt_dist_reduce_mode_from_env(&e->dist.reduce_mode));
    int peers = layout->stages > layout->data ? layout->stages : layout->data;
    e->dist.xpeer = calloc((size_t)peers, sizeof *e->dist.xpeer);
    e->dist.xbuf = calloc(2 * (size_t)peers, sizeof *e->dist.xbuf);
    e->dist.xsend = calloc((size_t)peers, sizeof *e->dist.xsend);
    e->dist.xrecv = calloc((size_t)peers, sizeof *e->dist.xrecv);
    if (!e->dist.xpeer || !e->dist.xbuf || !e->dist.xsend || !e->dist.xrecv)
        return bt_error(BT_ERR_NOMEM, "engine: out of memory");
    BT_TRY(bt_comm_world(&e->dist.world));
    BT_TRY(bt_comm_split(e->dist.world, layout->replica, layout->stage, &e->dist.pipe));
    BT_TRY(bt_comm_split(e->dist.world, layout->stage, layout->replica, &e->dist.dp));
    if (e->params.parallel.virtual_stages > 1 || (e->train_sched && e->train_sched->devices < e->stages))
        return bt_error(BT_ERR_UNSUPPORTED, "schedules with several stages per device (%s, virtual %d) do not run "
                        "across processes yet", bt_schedule_name(e->params.parallel.schedule),
                        e->params.parallel.virtual_stages);
    e->dist.last_bwd = e->dist.last_wgt = -1;
    /* a bucket starts once its gradients are final: after the step's last backward of their node,
     * or its last W where a split backward (zb-h1) defers the weight gradients */
    if (e->train_sched) {
        int s = layout->stage;
        for (int i = 0; i < e->train_sched->len[s]; i++) {
            if (e->train_sched->list[s][i].kind == BT_I_BWD) e->dist.last_bwd = i;
            if (e->train_sched->list[s][i].kind == BT_I_WGT) e->dist.last_wgt = i;
        }
    }
    return BT_OK;
}

bt_status bt_dist_setup_channels(bt_engine *e)
{
    for (int c = 0; c < e->n_channels; c++) {
        bt_channel *ch = &e->channels[c];
        ch->tag_base = c * BT_MAX_MICROBATCHES;
        if (!bt_path_uses_mpi(ch->path)) continue;
        ch->req = calloc((size_t)ch->microbatches, sizeof *ch->req);
        ch->sent_at = calloc((size_t)ch->microbatches, sizeof *ch->sent_at);
        if (!ch->req || !ch->sent_at) return bt_error(BT_ERR_NOMEM, "engine: out of memory for channels");
    }
    return BT_OK;
}

/* The instruction lists of s, as a CRC-32C of (kind, micro-batch, slot) per instruction. */
static void sched_field(bt_agree *a, const char *field, const bt_schedule *s)
{
    if (!s) {
        bt_agree_str(a, field, "none");
        return;
    }
    uint32_t crc = 0;
    long long n = 0;
    for (int st = 0; st < s->stages; st++)
        for (int i = 0; i < s->len[st]; i++, n++) {
            const bt_instr *in = &s->list[st][i];
            int32_t w[4] = {st, (int32_t)in->kind, (int32_t)in->mb, (int32_t)in->slot};
            crc = bt_crc32c(crc, w, sizeof w);
        }
    bt_agree_fmt(a, field, "%d stages, %lld instructions, crc32c %08x", s->stages, n, crc);
}

/* What every rank must have built alike: the engine's own fields (engine_agree.c), the layout,
 * the plan's cuts, every message between stages and the schedules. Collective over the world. */
bt_status bt_dist_check_agreement(bt_engine *e)
{
    if (!e->dist.on) return BT_OK;
    const bt_dist_layout *l = &e->dist.layout;
    bt_agree a;
    bt_agree_init(&a);
    bt_agree_fmt(&a, "layout", "D = %d replicas x P = %d stages", l->data, l->stages);
    bt_engine_agree_fields(&a, e->graph, &e->params);
    for (int s = 0; s < e->stages; s++) {
        char field[64];
        snprintf(field, sizeof field, "plan: stage %d's first layer", s);
        int node = e->plan->first_node[s];
        bt_agree_str(&a, field, node < e->graph->n_nodes ? e->graph->layers[e->graph->nodes[node].layer].name : "none");
    }
    for (int c = 0; c < e->n_channels; c++) {
        const bt_channel *ch = &e->channels[c];
        char field[96];
        snprintf(field, sizeof field, "plan: %s from stage %d to %d", ch->grad ? "gradients" : "activations",
                 ch->from, ch->to);
        bt_agree_fmt(&a, field, "%zu bytes a micro-batch by %s", ch->msg_bytes, bt_transfer_path_name(ch->path));
    }
    sched_field(&a, "schedule (training)", e->train_sched);
    sched_field(&a, "schedule (inference)", e->infer_sched);
    bt_agree_int(&a, "BATON_DP_BUCKET", (long long)e->dist.bucket_bytes);
    int differ = 0;
    bt_status st = bt_agree_check(e->dist.world, &a, e->params.watchdog_s, &differ);
    bt_agree_free(&a);
    if (differ)
        return bt_error_context(st, "rank %d: the ranks of this job did not build the same engine "
                                "(start every rank with the same model file, options and inputs)", l->rank);
    return st;
}

static bt_status post_receives(bt_engine *e, bt_channel *const *chs, int n)
{
    for (int c = 0; c < n; c++) {
        bt_channel *ch = chs[c];
        if (ch->path == BT_PATH_NCCL) BT_TRY(bt_dist_nccl_post(e, &e->stage[ch->to], ch));
        if (!bt_path_uses_mpi(ch->path)) continue;
        for (int mb = 0; mb < ch->microbatches; mb++)
            BT_TRY(bt_comm_irecv(e->dist.world, bt_channel_mpi_msg(ch, mb), ch->msg_bytes,
                                 peer_rank(e, ch->from), ch->tag_base + mb, &ch->req[mb]));
    }
    return BT_OK;
}

bt_status bt_dist_job_start(bt_engine *e, bt_stage *st, int grads)
{
    if (!e->dist.on) return BT_OK;
    if (grads && e->dist.shm) BT_TRY(bt_dist_shm_job_start(e, st)); /* before the gradients are zeroed */
    for (int b = 0; b < e->dist.n_buckets; b++) e->dist.buckets[b].pending = e->dist.buckets[b].n;
    if (e->dist.zero && e->job != BT_JOB_FORWARD) BT_TRY(bt_dist_absorb_state(e, st));
    BT_TRY(post_receives(e, st->in_act, st->n_in_act));
    if (grads) BT_TRY(post_receives(e, st->in_grad, st->n_in_grad));
    return BT_OK;
}

bt_status bt_dist_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb)
{
    ch->sent_at[mb] = bt_now_ms();
    return bt_comm_isend(e->dist.world, bt_channel_mpi_msg(ch, mb), ch->msg_bytes, peer_rank(e, ch->to),
                         ch->tag_base + mb, &ch->req[mb]);
}

bt_status bt_dist_wait(bt_engine *e, bt_channel *ch, int mb)
{
    return bt_comm_wait(&ch->req[mb], e->params.watchdog_s, &e->abort);
}

static bt_status finish_requests(bt_engine *e, bt_channel *const *chs, int n, int ok, int sends)
{
    for (int c = 0; c < n; c++) {
        bt_channel *ch = chs[c];
        if (!bt_path_uses_mpi(ch->path)) continue;
        for (int mb = 0; mb < ch->microbatches; mb++) {
            if (!ch->req[mb].active) continue;
            if (!ok || !sends) {
                bt_comm_cancel(&ch->req[mb]);
                continue;
            }
            bt_status s = bt_comm_wait(&ch->req[mb], e->params.watchdog_s, &e->abort);
            if (s == BT_ERR_TIMEOUT) {
                char who[96];
                bt_dist_describe_stage(e, ch->to, who, sizeof who);
                return bt_error(s, "watchdog: after %.1f s, the %s message of micro-batch %d to %s was not taken",
                                e->params.watchdog_s, ch->grad ? "gradient" : "activation", mb, who);
            }
            if (s == BT_ERR_INTERNAL) return bt_error(s, "stopped while sending to another rank");
            BT_TRY(s);
        }
    }
    return BT_OK;
}

bt_status bt_dist_job_end(bt_engine *e, bt_stage *st, int ok)
{
    if (!e->dist.on) return BT_OK;
    if (!ok) e->dist.failed = 1; /* NCCL communicators are aborted, not waited for */
    bt_status s = finish_requests(e, st->out_act, st->n_out_act, ok, 1);
    if (s == BT_OK) s = finish_requests(e, st->out_grad, st->n_out_grad, ok, 1);
    finish_requests(e, st->in_act, st->n_in_act, 0, 0);
    finish_requests(e, st->in_grad, st->n_in_grad, 0, 0);
    for (int b = 0; b < e->dist.n_buckets && !ok; b++) bt_comm_cancel(&e->dist.buckets[b].req);
    return s;
}

/* Point-to-point exchange of k doubles with each of n peers (world ranks): out[i * k ..] gets peer
 * i's. Made of messages rather than a collective so that a lost rank is named: the receive that
 * times out says whose message is missing. */
bt_status bt_dist_exchange(bt_engine *e, const int *peers, int n, const double *mine, int k, double *out, int tag,
                          const char *what)
{
    bt_engine_dist *d = &e->dist;
    for (int i = 0; i < n; i++) {
        BT_TRY(bt_comm_irecv(d->world, out + (size_t)i * k, (size_t)k * sizeof *out, peers[i], tag, &d->xrecv[i]));
        BT_TRY(bt_comm_isend(d->world, mine, (size_t)k * sizeof *mine, peers[i], tag, &d->xsend[i]));
    }
    bt_status s = BT_OK;
    for (int i = 0; i < n && s == BT_OK; i++) {
        s = bt_comm_wait(&d->xrecv[i], e->params.watchdog_s, &e->abort);
        if (s == BT_ERR_TIMEOUT) {
            int r = peers[i];
            s = bt_error(s, "watchdog: after %.1f s, rank %d (stage %d, replica %d) waits at the optimizer step for %s "
                         "from rank %d (stage %d, replica %d) (lost, or stuck: see that rank's own message)",
                         e->params.watchdog_s, d->layout.rank, d->layout.stage, d->layout.replica, what, r,
                         r % d->layout.stages, r / d->layout.stages);
        } else if (s == BT_ERR_INTERNAL) {
            s = bt_error(s, "stopped at the optimizer step (another stage failed)");
        }
    }
    for (int i = 0; i < n && s == BT_OK; i++) s = bt_comm_wait(&d->xsend[i], e->params.watchdog_s, &e->abort);
    if (s != BT_OK)
        for (int i = 0; i < n; i++) {
            bt_comm_cancel(&d->xrecv[i]);
            bt_comm_cancel(&d->xsend[i]);
        }
    return s;
}

bt_status bt_dist_tie_exchange(bt_engine *e, bt_tie *t, int side)
{
    bt_engine_dist *d = &e->dist;
    const bt_dist_layout *l = &d->layout;
    int peer = bt_dist_rank_of(l, l->replica, t->stage[1 - side]->index);
    bt_comm_req rr, sr;
    memset(&rr, 0, sizeof rr);
    memset(&sr, 0, sizeof sr);
    /* the ties are taken in the same order on every rank and each waits for its message before
     * the next: MPI keeps one pair's messages of one tag in order */
    BT_TRY(bt_comm_irecv(d->world, t->host[1 - side], t->bytes, peer, BT_TAG_TIE, &rr));
    bt_status s = bt_comm_isend(d->world, t->host[side], t->bytes, peer, BT_TAG_TIE, &sr);
    if (s == BT_OK) s = bt_comm_wait(&rr, e->params.watchdog_s, &e->abort);
    if (s == BT_ERR_TIMEOUT)
        s = bt_error(s, "watchdog: after %.1f s, rank %d (stage %d, replica %d) waits at the optimizer step for the "
                     "gradient of a tied parameter from rank %d (stage %d, replica %d) (lost, or stuck: see that "
                     "rank's own message)", e->params.watchdog_s, l->rank, l->stage, l->replica, peer,
                     peer % l->stages, peer / l->stages);
    else if (s == BT_ERR_INTERNAL)
        s = bt_error(s, "stopped at the optimizer step (another stage failed)");
    if (s == BT_OK) s = bt_comm_wait(&sr, e->params.watchdog_s, &e->abort);
    if (s != BT_OK) {
        bt_comm_cancel(&rr);
        bt_comm_cancel(&sr);
    }
    return s;
}

bt_status bt_dist_step_exchange(bt_engine *e, bt_stage *st, double local_loss)
{
    bt_engine_dist *d = &e->dist;
    const bt_dist_layout *l = &d->layout;
    int n = 0, P = l->stages;
    double loss = local_loss;
    if (l->stage == P - 1 && l->data > 1) { /* the loss over the last stage's replicas */
        for (int q = 0; q < l->data; q++)
            if (q != l->replica) d->xpeer[n++] = bt_dist_rank_of(l, q, P - 1);
        double mine = local_loss;
        BT_TRY(bt_dist_exchange(e, d->xpeer, n, &mine, 1, d->xbuf, BT_TAG_REPLICAS, "the loss of another replica"));
        /* added in replica order on every rank, so every rank gets the same sum */
        loss = 0;
        for (int q = 0, i = 0; q < l->data; q++) loss += q == l->replica ? local_loss : d->xbuf[i++];
    }
    n = 0;
    for (int s = 0; s < P; s++)
        if (s != l->stage) d->xpeer[n++] = bt_dist_rank_of(l, l->replica, s);
    double mine[2] = {e->sumsq[st->index], l->stage == P - 1 ? loss : 0.0};
    BT_TRY(bt_dist_exchange(e, d->xpeer, n, mine, 2, d->xbuf, BT_TAG_PIPE, "the gradient norm and loss of another stage"));
    for (int s = 0, i = 0; s < P; s++) {
        const double *v = s == l->stage ? mine : d->xbuf + 2 * (size_t)i++;
        e->sumsq[s] = v[0];
        if (s == P - 1) d->loss_sum = v[1];
    }
    return BT_OK;
}

/* The stage that produces graph value v. */
static int producer_stage(const bt_engine *e, int v)
{
    int node = e->graph->values[v].producer;
    for (int s = 0; s < e->stages; s++)
        if (node >= e->plan->first_node[s] && node < e->plan->first_node[s] + e->plan->n_stage_nodes[s]) return s;
    return e->stages - 1;
}

bt_status bt_dist_after_job(bt_engine *e, int job_kind, double *loss_sum)
{
    if (!e->dist.on) return BT_OK;
    const bt_dist_layout *l = &e->dist.layout;
    if (job_kind != BT_JOB_FORWARD) *loss_sum = e->dist.loss_sum; /* summed at STEP */
    size_t rows = (size_t)e->mb_size * (size_t)e->params.parallel.microbatches;
    if (job_kind == BT_JOB_FORWARD && e->has_loss) { /* the loss over every replica's last stage */
        double v = l->stage == e->stages - 1 ? *loss_sum : 0.0;
        BT_TRY(bt_comm_allreduce_f64(e->dist.world, &v, 1, e->params.watchdog_s));
        *loss_sum = v;
    }
    if (job_kind == BT_JOB_FORWARD && e->loss_out) { /* each replica's per-sample losses, everywhere */
        size_t local = rows * bt_dtype_size(e->dtype);
        unsigned char *base = (unsigned char *)e->loss_out - (size_t)l->replica * local;
        for (int q = 0; q < l->data; q++)
            BT_TRY(bt_comm_bcast(e->dist.world, base + (size_t)q * local, local, bt_dist_rank_of(l, q, e->stages - 1),
                                 e->params.watchdog_s));
    }
    if (job_kind == BT_JOB_FORWARD && e->out_ptr) {
        const bt_value *v = &e->graph->values[e->out_value];
        bt_dtype dt = v->dtype == BT_I32 ? BT_I32 : e->dtype;
        size_t local = (size_t)e->mb_size * (size_t)e->params.parallel.microbatches *
                       (size_t)bt_shape_numel(&v->shape) * bt_dtype_size(dt);
        unsigned char *base = (unsigned char *)e->out_ptr - (size_t)l->replica * local;
        int s = producer_stage(e, e->out_value);
        for (int q = 0; q < l->data; q++)
            BT_TRY(bt_comm_bcast(e->dist.world, base + (size_t)q * local, local, bt_dist_rank_of(l, q, s),
                                 e->params.watchdog_s));
    }
    return BT_OK;
}

void bt_dist_teardown(bt_engine *e)
{
    bt_engine_dist *d = &e->dist;
    for (int b = 0; b < d->n_buckets; b++) {
        if (!d->buckets[b].in_place) free(d->buckets[b].flat);
        free(d->buckets[b].wflat);
        free(d->buckets[b].state[0]);
        free(d->buckets[b].state[1]);
    }
    free(d->buckets);
    free(d->order);
    free(d->bucket_of);
    free(d->final_after);
    free(d->xpeer);
    free(d->xbuf);
    free(d->xsend);
    free(d->xrecv);
    free(d->rank_stats);
    free(d->rank_channels);
    bt_dist_mirror_drop(e);
    free(d->mirror);
    bt_dist_shm_teardown(e); /* collective over d->dp */
    bt_comm_free(d->dp);
    bt_comm_free(d->pipe);
    bt_comm_free(d->world);
    memset(d, 0, sizeof *d);
}

int bt_engine_rank(const bt_engine *e)
{
    return e && e->dist.on ? e->dist.layout.rank : 0;
}

/* The statistics rank 0 prints for every stage of replica 0: each rank's own, gathered. */
typedef struct dist_stats {
    bt_time_stats time;
    bt_memory_stats mem;
    bt_dist_reduce_stats reduce;
} dist_stats;

void bt_engine_dist_trace(bt_engine *e, int on)
{
    if (e && e->dist.on) e->dist.trace = on;
}

/* One rank's last job, as sent to the others of its replica: its step start on the host clock,
 * how many records, then the records. */
typedef struct trace_head {
    double t0_ms;
    int n;
} trace_head;

bt_status bt_dist_gather_trace(bt_engine *e)
{
    if (!e->dist.on || !e->dist.trace) return BT_OK;
    const bt_dist_layout *l = &e->dist.layout;
    int cap = 0;
    for (int s = 0; s < e->stages; s++)
        if (e->worker[s].trace_cap > cap) cap = e->worker[s].trace_cap;
    size_t block = sizeof(trace_head) + (size_t)cap * sizeof(bt_trace_rec);
    unsigned char *mine = calloc(1, block), *all = calloc((size_t)l->stages, block);
    bt_status st = BT_OK;
    if (!mine || !all) {
        st = bt_error(BT_ERR_NOMEM, "engine: out of memory for the trace");
        goto done;
    }
    const bt_worker *w = &e->worker[l->stage];
    trace_head h = {e->step_t0_ms, w->n_trace};
    memcpy(mine, &h, sizeof h);
    memcpy(mine + sizeof h, w->trace, (size_t)w->n_trace * sizeof(bt_trace_rec));
    BT_TRY_GOTO(st, bt_comm_allgather_bytes(e->dist.pipe, mine, block, all, e->params.watchdog_s), done);
    for (int s = 0; s < e->stages; s++) {
        if (s == l->stage) continue;
        bt_worker *o = &e->worker[s];
        memcpy(&h, all + (size_t)s * block, sizeof h);
        int n = h.n < o->trace_cap ? h.n : o->trace_cap;
        memcpy(o->trace, all + (size_t)s * block + sizeof h, (size_t)n * sizeof(bt_trace_rec));
        o->n_trace = n;
        /* onto this rank's timeline: the host clocks of one machine (CLOCK_MONOTONIC) agree */
        for (int i = 0; i < n; i++) {
            o->trace[i].start_ms += h.t0_ms - e->step_t0_ms;
            o->trace[i].end_ms += h.t0_ms - e->step_t0_ms;
        }
    }
done:
    free(mine);
    free(all);
    return st;
}

bt_status bt_engine_dist_gather_stats(bt_engine *e)
{
    if (!e || !e->dist.on) return BT_OK;
    const bt_dist_layout *l = &e->dist.layout;
    const bt_engine_dist *d = &e->dist;
    dist_stats mine = {e->stage[l->stage].time, e->stage[l->stage].mem,
                       {d->reductions, d->reduced_bytes, d->reduce_ms, d->reduce_hidden_ms, d->reduce_wait_ms, d->zero,
                        bt_engine_dist_reduce_path(e)}};
    dist_stats *all = calloc((size_t)l->size, sizeof *all);
    double *ch = calloc((size_t)e->n_channels * 3 * ((size_t)l->size + 1), sizeof *ch);
    bt_status st = BT_OK;
    if (!all || !ch) {
        st = bt_error(BT_ERR_NOMEM, "engine: out of memory");
        goto done;
    }
    BT_TRY_GOTO(st, bt_comm_allgather_bytes(e->dist.world, &mine, sizeof mine, all, e->params.watchdog_s), done);
    free(e->dist.rank_stats);
    e->dist.rank_stats = malloc((size_t)l->size * sizeof *e->dist.rank_stats);
    if (!e->dist.rank_stats) {
        st = bt_error(BT_ERR_NOMEM, "engine: out of memory");
        goto done;
    }
    for (int r = 0; r < l->size; r++) {
        e->dist.rank_stats[r].time = all[r].time;
        e->dist.rank_stats[r].mem = all[r].mem;
        e->dist.rank_stats[r].reduce = all[r].reduce;
    }
    double *own = ch + (size_t)e->n_channels * 3 * (size_t)l->size;
    for (int c = 0; c < e->n_channels; c++) {
        own[3 * c] = (double)e->channels[c].messages;
        own[3 * c + 1] = e->channels[c].bytes;
        own[3 * c + 2] = e->channels[c].copy_ms;
    }
    BT_TRY_GOTO(st,
                bt_comm_allgather_bytes(e->dist.world, own, (size_t)e->n_channels * 3 * sizeof *own, ch,
                                        e->params.watchdog_s),
                done);
    free(e->dist.rank_channels); /* kept for the rows of the other replicas' boundaries */
    e->dist.rank_channels = ch;
    ch = NULL;
    for (int s = 0; s < e->stages; s++) {
        int r = bt_dist_rank_of(l, l->replica, s);
        e->stage[s].time = all[r].time;
        e->stage[s].mem = all[r].mem;
    }
    for (int c = 0; c < e->n_channels; c++) {
        const double *src =
            e->dist.rank_channels + (size_t)bt_dist_rank_of(l, l->replica, e->channels[c].from) * e->n_channels * 3;
        e->channels[c].messages = (int64_t)src[3 * c];
        e->channels[c].bytes = src[3 * c + 1];
        e->channels[c].copy_ms = src[3 * c + 2];
    }
done:
    free(all);
    free(ch);
    return st;
}

bt_status bt_engine_dist_rank_stats(const bt_engine *e, int rank, bt_time_stats *time, bt_memory_stats *mem)
{
    if (!e || !e->dist.on || !e->dist.rank_stats || rank < 0 || rank >= e->dist.layout.size)
        return bt_error(BT_ERR_INVALID_ARG, "no statistics of rank %d (gather them first)", rank);
    *time = e->dist.rank_stats[rank].time;
    *mem = e->dist.rank_stats[rank].mem;
    return BT_OK;
}

bt_status bt_engine_dist_rank_reduce(const bt_engine *e, int rank, bt_dist_reduce_stats *out)
{
    if (!e || !e->dist.on || !e->dist.rank_stats || rank < 0 || rank >= e->dist.layout.size)
        return bt_error(BT_ERR_INVALID_ARG, "no statistics of rank %d (gather them first)", rank);
    *out = e->dist.rank_stats[rank].reduce;
    return BT_OK;
}

bt_status bt_engine_dist_replica_boundary(const bt_engine *e, int replica, int i, bt_boundary_stats *out)
{
    BT_TRY(bt_engine_boundary(e, i, out));
    if (!e->dist.on || !e->dist.rank_channels || replica < 0 || replica >= e->dist.layout.data)
        return bt_error(BT_ERR_INVALID_ARG, "no statistics of replica %d's boundaries (gather them first)", replica);
    const double *src = e->dist.rank_channels +
                        ((size_t)bt_dist_rank_of(&e->dist.layout, replica, out->from) * e->n_channels + i) * 3;
    out->messages = (int64_t)src[0];
    out->bytes = src[1];
    out->copy_ms = src[2];
    return BT_OK;
}

void bt_engine_dist_reduce_stats(const bt_engine *e, int64_t *reductions, int64_t *early, double *bytes,
                                 double *wait_ms, double *total_ms)
{
    *reductions = e->dist.reductions;
    *early = e->dist.early_reductions;
    *bytes = e->dist.reduced_bytes;
    *wait_ms = e->dist.reduce_wait_ms;
    *total_ms = e->dist.reduce_ms;
}

/* The rank hooks (exec/rank_hooks.h): what a job across processes adds at each step the executor
 * runs, with the worker marked waiting (for the host's watchdog) where it waits for other ranks. */
static bt_status hook_grads_reduce(bt_engine *e, bt_worker *w, bt_stage *st)
{
    if (e->dist.n_buckets == 0) return BT_OK;
    atomic_store(&w->waiting, 1);
    bt_status s = bt_dist_grads_reduce(e, st);
    atomic_store(&w->waiting, 0);
    return s;
}

static bt_status hook_exchange(bt_engine *e, bt_worker *w, bt_stage *st)
{
    atomic_store(&w->waiting, 1);
    bt_status s = bt_dist_step_exchange(e, st, bt_worker_loss_sum(e, st));
    atomic_store(&w->waiting, 0);
    return s;
}

/* a gradients-only job's STEP: the device idle before the loss is read */
static bt_status hook_grads_step(bt_engine *e, bt_worker *w, bt_stage *st)
{
    BT_TRY(st->be->sync(st->dev));
    return hook_exchange(e, w, st);
}

static bt_status hook_sumsq(bt_engine *e, bt_stage *st, double *out)
{
    if (e->dist.zero) return bt_dist_zero_sumsq(e, st, out); /* the replicas' chunks of the summed gradients */
    if (bt_dist_shm_sumsq_split(e)) return bt_dist_shm_sumsq(e, st, out); /* each replica summed its share */
    return bt_worker_stage_sumsq(e, st, out);
}

static bt_status hook_update(bt_engine *e, bt_stage *st, double scale)
{
    if (e->dist.zero) return bt_dist_zero_update(e, st, e->lr, e->step + 1, scale);
    return bt_worker_stage_update(e, st, scale);
}

static bt_status hook_tie_exchange(bt_engine *e, bt_worker *w, bt_tie *t, int side)
{
    atomic_store(&w->waiting, 1);
    bt_status s = bt_dist_tie_exchange(e, t, side);
    atomic_store(&w->waiting, 0);
    return s;
}

/* the tie sums land in the shared arena: the peers must be done reading it */
static bt_status hook_ties_summing(bt_engine *e, bt_worker *w)
{
    if (!e->dist.shm) return BT_OK;
    atomic_store(&w->waiting, 1);
    bt_status s = bt_dist_shm_readers_done(e);
    atomic_store(&w->waiting, 0);
    return s;
}

static int hook_last_backward(const bt_engine *e, bt_instr_kind kind, int instr)
{
    if (e->dist.n_buckets == 0) return 0;
    return instr == (kind == BT_I_WGT ? e->dist.last_wgt : e->dist.last_bwd);
}

static bt_status hook_job_failed(const bt_engine *e, bt_status failed)
{
    return bt_error_context(failed, "rank %d (stage %d, replica %d)", e->dist.layout.rank, e->dist.layout.stage,
                            e->dist.layout.replica);
}

/* parallel.zero shards the state over the stage's replicas until it is gathered */
static bt_status hook_gather_state(bt_engine *e)
{
    if (!e->dist.zero || e->dist.full_state) return BT_OK;
    return bt_dist_gather_state(e, &e->stage[e->dist.layout.stage]);
}

static bt_status hook_job_done(bt_engine *e, bt_job_kind job, double *loss_sum)
{
    BT_TRY(bt_dist_after_job(e, job, loss_sum)); /* the loss over replicas */
    return bt_dist_gather_trace(e);              /* when tracing: the other ranks' records */
}

static bt_status hook_check_stages(const bt_engine *e)
{
    BT_TRY(bt_dist_check_gpu(e)); /* GPU stages across processes: what runs */
    return bt_remote_check_mode(e);
}

static bt_status hook_created(bt_engine *e)
{
    BT_TRY(bt_dist_setup_channels(e));
    BT_TRY(bt_dist_setup_buckets(e));
    return bt_dist_check_agreement(e);
}

const bt_rank_hooks bt_rank_hooks_dist = {
    .check_stages = hook_check_stages,
    .remote_path = bt_remote_path_for,
    .created = hook_created,
    .release_devices = bt_dist_nccl_dp_teardown,
    .teardown = bt_dist_teardown,
    .job_start = bt_dist_job_start,
    .job_end = bt_dist_job_end,
    .last_backward = hook_last_backward,
    .grads_final = bt_dist_grads_final,
    .grads_reduce = hook_grads_reduce,
    .grads_step = hook_grads_step,
    .sumsq = hook_sumsq,
    .exchange = hook_exchange,
    .update = hook_update,
    .tie_exchange = hook_tie_exchange,
    .ties_summing = hook_ties_summing,
    .job_begin = bt_dist_mirror_drop,
    .job_failed = hook_job_failed,
    .job_done = hook_job_done,
    .gather_state = hook_gather_state,
    .mirror_read = bt_dist_mirror_read,
    .state_buffer = bt_dist_state_buffer,
    .describe_stage = bt_dist_describe_stage,
};
