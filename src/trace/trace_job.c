/* trace/trace_job.c: one Chrome/Perfetto trace of a job across processes (see trace.h).
 *
 * Each rank packs what its own stage recorded (bt_trace_pack_stage: raw structs, so only a rank of
 * the same build reads them: every rank of a job runs the same binary), rank 0 gathers the packs
 * and writes them here as one file:
 *
 *   pid r            rank r, "rank r (replica i, stage s)", sorted by rank; threads 0 compute
 *                    (F, B, W, STEP), 1 transfers (SEND, RECV), 2 the gradient reductions (one slice
 *                    per bucket, args: bytes, hidden ms, exposed ms);
 *   times            rank r's host clock plus its offset to rank 0's (measured by the caller), in
 *                    microseconds from the earliest traced step start of any rank; rounded once to
 *                    whole nanoseconds, so one track's slices stay in order;
 *   flows            a SEND of kind K, micro-batch mb, step k on rank a (replica q, stage s) reaches
 *                    the RECV of the same kind, micro-batch and step on rank q x P + d for every
 *                    stage d its channels reach; the arrow starts in the middle of the SEND slice
 *                    and ends at the same moment inside the RECV slice, clamped into it (so an
 *                    arrow that points back in time shows a receive that completed before the
 *                    middle of its send: eager delivery, or clocks off by up to the uncertainty).
 *
 * Never prints. Data flow: bt_trace (trace.c) -> pack -> the CLI's gather over MPI -> here -> file. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "trace/trace.h"

#define PACK_MAGIC 0x6274726bu /* "btrk" */

typedef struct pack_head {
    uint32_t magic;
    int stage, stages, n_steps;
    double first_t0_ms;
    bt_trace_stage facts;
} pack_head;

typedef struct pack_step {
    double t0_ms, wall_ms;
    int microbatches, training, n, n_coll;
} pack_step;

/* ---- packing ---------------------------------------------------------------------------------- */

bt_status bt_trace_pack_stage(const bt_trace *t, int stage, void **buf, size_t *len)
{
    *buf = NULL;
    *len = 0;
    if (!t || stage < 0 || (t->n_steps > 0 && stage >= t->stages))
        return bt_error(BT_ERR_INVALID_ARG, "bt_trace_pack_stage: no stage %d", stage);
    size_t n = sizeof(pack_head);
    for (int k = 0; k < t->n_steps; k++)
        n += sizeof(pack_step) + (size_t)t->steps[k].n[stage] * sizeof(bt_trace_ev) +
             (size_t)t->steps[k].n_coll * sizeof(bt_trace_coll);
    unsigned char *p = calloc(1, n), *at = p;
    if (!p) return bt_error(BT_ERR_NOMEM, "trace: out of memory packing %zu bytes", n);
    pack_head h;
    memset(&h, 0, sizeof h);
    h.magic = PACK_MAGIC;
    h.stage = stage;
    h.stages = t->stages;
    h.n_steps = t->n_steps;
    h.first_t0_ms = t->first_t0_ms;
    if (t->n_steps > 0) h.facts = t->stage[stage];
    memcpy(at, &h, sizeof h);
    at += sizeof h;
    for (int k = 0; k < t->n_steps; k++) {
        const bt_trace_step *st = &t->steps[k];
        pack_step ps = {st->t0_ms, st->wall_ms, st->microbatches, st->training, st->n[stage], st->n_coll};
        memcpy(at, &ps, sizeof ps);
        at += sizeof ps;
        memcpy(at, st->ev[stage], (size_t)ps.n * sizeof(bt_trace_ev));
        at += (size_t)ps.n * sizeof(bt_trace_ev);
        if (ps.n_coll) memcpy(at, st->coll, (size_t)ps.n_coll * sizeof(bt_trace_coll));
        at += (size_t)ps.n_coll * sizeof(bt_trace_coll);
    }
    *buf = p;
    *len = n;
    return BT_OK;
}

/* One rank's pack, read back (copies, so the structs are aligned). */
typedef struct rank_part {
    pack_head h;
    pack_step *steps;           /* [h.n_steps] */
    bt_trace_ev **ev;           /* [h.n_steps][steps[k].n] */
    bt_trace_coll **coll;       /* [h.n_steps][steps[k].n_coll] */
} rank_part;

static void part_free(rank_part *r)
{
    for (int k = 0; r->ev && k < r->h.n_steps; k++) free(r->ev[k]);
    for (int k = 0; r->coll && k < r->h.n_steps; k++) free(r->coll[k]);
    free(r->ev);
    free(r->coll);
    free(r->steps);
    memset(r, 0, sizeof *r);
}

static bt_status take(const unsigned char **at, const unsigned char *end, void *dst, size_t n, int rank)
{
    if ((size_t)(end - *at) < n) return bt_error(BT_ERR_IO, "trace: rank %d's trace is truncated", rank);
    if (n) memcpy(dst, *at, n);
    *at += n;
    return BT_OK;
}

static bt_status part_read(const void *buf, size_t len, int rank, int stages, rank_part *r)
{
    memset(r, 0, sizeof *r);
    const unsigned char *at = buf, *end = at + len;
    BT_TRY(take(&at, end, &r->h, sizeof r->h, rank));
    if (r->h.magic != PACK_MAGIC || r->h.n_steps < 0 || r->h.stage < 0 || r->h.stage >= stages)
        return bt_error(BT_ERR_IO, "trace: rank %d sent no trace of this build (stage %d of %d)", rank, r->h.stage,
                        stages);
    int n = r->h.n_steps;
    r->steps = calloc((size_t)n + 1, sizeof *r->steps);
    r->ev = calloc((size_t)n + 1, sizeof *r->ev);
    r->coll = calloc((size_t)n + 1, sizeof *r->coll);
    if (!r->steps || !r->ev || !r->coll) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    for (int k = 0; k < n; k++) {
        pack_step *ps = &r->steps[k];
        BT_TRY(take(&at, end, ps, sizeof *ps, rank));
        if (ps->n < 0 || ps->n_coll < 0) return bt_error(BT_ERR_IO, "trace: rank %d's step %d is malformed", rank, k);
        r->ev[k] = calloc((size_t)ps->n + 1, sizeof **r->ev);
        r->coll[k] = calloc((size_t)ps->n_coll + 1, sizeof **r->coll);
        if (!r->ev[k] || !r->coll[k]) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
        BT_TRY(take(&at, end, r->ev[k], (size_t)ps->n * sizeof(bt_trace_ev), rank));
        BT_TRY(take(&at, end, r->coll[k], (size_t)ps->n_coll * sizeof(bt_trace_coll), rank));
    }
    return BT_OK;
}

/* ---- writing ---------------------------------------------------------------------------------- */

typedef struct job_out {
    bt_atomic_file *f;
    int n;
    bt_status st;
} job_out;

static void emit(job_out *o, json_t *ev)
{
    if (o->st != BT_OK || !ev) {
        if (!ev && o->st == BT_OK) o->st = bt_error(BT_ERR_NOMEM, "trace: out of memory");
        json_decref(ev);
        return;
    }
    char *s = json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(ev);
    if (!s) {
        o->st = bt_error(BT_ERR_NOMEM, "trace: out of memory");
        return;
    }
    const char *sep = o->n++ ? ",\n" : "\n";
    o->st = bt_atomic_file_write(o->f, sep, strlen(sep));
    if (o->st == BT_OK) o->st = bt_atomic_file_write(o->f, s, strlen(s));
    free(s);
}

typedef struct job {
    int n;                      /* ranks */
    const bt_trace_rank *info;
    rank_part *part;
    double base_ms;             /* rank 0's clock: the earliest traced step start of any rank */
} job;

/* Rank r's time ms (from its step k's start) in integer nanoseconds on the job's timeline. */
static long long ns_at(const job *j, int r, int k, double ms)
{
    const rank_part *p = &j->part[r];
    return llround((p->h.first_t0_ms + j->info[r].offset_ms + p->steps[k].t0_ms + ms - j->base_ms) * 1e6);
}

static int is_compute(bt_instr_kind k)
{
    return k == BT_I_FWD || k == BT_I_BWD || k == BT_I_STEP || k == BT_I_WGT;
}

static void emit_meta(job_out *o, const job *j)
{
    for (int r = 0; r < j->n; r++) {
        const bt_trace_rank *ri = &j->info[r];
        const rank_part *p = &j->part[r];
        char name[160], compute[64];
        snprintf(name, sizeof name, "rank %d (replica %d, stage %d)", r, ri->replica, ri->stage);
        snprintf(compute, sizeof compute, "compute (%s)", p->h.facts.device);
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", r, "tid", 0,
                          "args", "name", name));
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "process_sort_index", "ph", "M", "pid", r,
                          "tid", 0, "args", "sort_index", r));
        char label[160];
        snprintf(label, sizeof label, "%s; clock %+.3f ms +- %.3f ms to rank 0", p->h.facts.layers, ri->offset_ms,
                 ri->uncertainty_ms);
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_labels", "ph", "M", "pid", r, "tid", 0,
                          "args", "labels", label));
        const char *threads[3] = {compute, "transfers", "gradient reductions"};
        for (int t = 0; t < 3; t++)
            emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", r, "tid", t,
                              "args", "name", threads[t]));
    }
}

static void emit_rank_step(job_out *o, const job *j, int r, int k)
{
    const rank_part *p = &j->part[r];
    const pack_step *ps = &p->steps[k];
    int s = p->h.stage;
    for (int i = 0; i < ps->n && o->st == BT_OK; i++) {
        const bt_trace_ev *ev = &p->ev[k][i];
        char name[32];
        bt_instr_format(s, &ev->ins, name, sizeof name);
        long long a = ns_at(j, r, k, ev->start_ms), b = ns_at(j, r, k, ev->end_ms);
        int compute = is_compute(ev->ins.kind);
        emit(o, json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:{s:i, s:s, s:I, s:i}}", "name", name, "cat",
                          compute ? "compute" : "transfer", "ph", "X", "pid", r, "tid", compute ? 0 : 1, "ts",
                          (double)a / 1e3, "dur", (double)(b > a ? b - a : 0) / 1e3, "args", "microbatch", ev->ins.mb,
                          "layers", p->h.facts.layers, "bytes", (json_int_t)ev->bytes, "step", k));
        if (ev->ins.kind == BT_I_FWD || ev->ins.kind == BT_I_BWD)
            emit(o, json_pack("{s:s, s:s, s:i, s:f, s:{s:I}}", "name", "activations", "ph", "C", "pid", r, "ts",
                              (double)b / 1e3, "args", "bytes", (json_int_t)((size_t)ev->live * p->h.facts.slot_bytes)));
    }
    for (int i = 0; i < ps->n_coll && o->st == BT_OK; i++) {
        const bt_trace_coll *c = &p->coll[k][i];
        long long a = ns_at(j, r, k, c->start_ms), b = ns_at(j, r, k, c->end_ms);
        double hidden = (c->end_ms < c->wait_ms ? c->end_ms : c->wait_ms) - c->start_ms;
        if (hidden < 0) hidden = 0;
        double exposed = c->end_ms - c->start_ms - hidden;
        char name[48];
        snprintf(name, sizeof name, "%s b%d", c->scatter ? "reduce-scatter" : "all-reduce", c->bucket);
        emit(o, json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:{s:i, s:I, s:f, s:f, s:i, s:i}}", "name", name,
                          "cat", "collective", "ph", "X", "pid", r, "tid", 2, "ts", (double)a / 1e3, "dur",
                          (double)(b > a ? b - a : 0) / 1e3, "args", "bucket", c->bucket, "bytes", (json_int_t)c->bytes,
                          "hidden_ms", hidden, "exposed_ms", exposed > 0 ? exposed : 0.0, "stage",
                          p->h.stage, "step", k));
    }
}

/* The rank running (replica, stage), or -1. */
static int rank_of(const job *j, int replica, int stage)
{
    for (int r = 0; r < j->n; r++)
        if (j->info[r].replica == replica && j->info[r].stage == stage) return r;
    return -1;
}

static void emit_flows(job_out *o, const job *j, long long *next_id)
{
    for (int a = 0; a < j->n; a++) {
        const rank_part *pa = &j->part[a];
        const bt_trace_stage *fs = &pa->h.facts;
        for (int k = 0; k < pa->h.n_steps; k++)
            for (int i = 0; i < pa->steps[k].n && o->st == BT_OK; i++) {
                const bt_trace_ev *send = &pa->ev[k][i];
                int grad = send->ins.kind == BT_I_SEND_GRAD;
                if (send->ins.kind != BT_I_SEND_ACT && !grad) continue;
                bt_instr_kind want = grad ? BT_I_RECV_GRAD : BT_I_RECV_ACT;
                for (int t = 0; t < (grad ? fs->n_grad_to : fs->n_act_to); t++) {
                    int b = rank_of(j, j->info[a].replica, grad ? fs->grad_to[t] : fs->act_to[t]);
                    if (b < 0 || k >= j->part[b].h.n_steps) continue;
                    const rank_part *pb = &j->part[b];
                    const bt_trace_ev *recv = NULL;
                    for (int q = 0; q < pb->steps[k].n && !recv; q++)
                        if (pb->ev[k][q].ins.kind == want && pb->ev[k][q].ins.mb == send->ins.mb) recv = &pb->ev[k][q];
                    if (!recv) continue;
                    long long sa = ns_at(j, a, k, send->start_ms), sb = ns_at(j, a, k, send->end_ms);
                    long long ra = ns_at(j, b, k, recv->start_ms), rb = ns_at(j, b, k, recv->end_ms);
                    long long s_ts = sa + (sb - sa) / 2;
                    long long f_ts = s_ts < ra ? ra : s_ts > rb ? rb : s_ts;
                    const char *name = grad ? "gradients" : "activations";
                    json_int_t id = (json_int_t)(*next_id)++;
                    emit(o, json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:f, s:{s:i, s:i}}", "name", name, "cat", "flow",
                                      "ph", "s", "id", id, "pid", a, "tid", 1, "ts", (double)s_ts / 1e3, "args", "step",
                                      k, "microbatch", send->ins.mb));
                    emit(o, json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:i, s:f, s:{s:i, s:i}}", "name", name, "cat",
                                      "flow", "ph", "f", "bp", "e", "id", id, "pid", b, "tid", 1, "ts",
                                      (double)f_ts / 1e3, "args", "step", k, "microbatch", send->ins.mb));
                }
            }
    }
}

static json_t *other_data(const job *j)
{
    json_t *ranks = json_array();
    double worst = 0;
    for (int r = 0; r < j->n && ranks; r++) {
        const bt_trace_rank *ri = &j->info[r];
        if (ri->uncertainty_ms > worst) worst = ri->uncertainty_ms;
        json_array_append_new(ranks, json_pack("{s:i, s:i, s:i, s:f, s:f}", "rank", r, "replica", ri->replica, "stage",
                                               ri->stage, "clock_offset_us", ri->offset_ms * 1e3,
                                               "clock_uncertainty_us", ri->uncertainty_ms * 1e3));
    }
    return json_pack("{s:s, s:i, s:f, s:s, s:o}", "baton", "job trace", "ranks", j->n, "clock_uncertainty_us",
                     worst * 1e3, "clock_sync",
                     "Cristian: ping-pongs with rank 0 at the start and the end of the run; every rank's times are "
                     "on rank 0's clock within +- clock_uncertainty_us",
                     "per_rank", ranks ? ranks : json_array());
}

bt_status bt_trace_write_job_json(const void *const *parts, const size_t *lens, const bt_trace_rank *ranks,
                                  int n_ranks, int stages, const char *path)
{
    if (!parts || !lens || !ranks || n_ranks < 1 || !path)
        return bt_error(BT_ERR_INVALID_ARG, "bt_trace_write_job_json: bad argument");
    job j = {n_ranks, ranks, calloc((size_t)n_ranks, sizeof(rank_part)), INFINITY};
    job_out o = {NULL, 0, BT_OK};
    bt_status st = BT_OK;
    if (!j.part) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    for (int r = 0; r < n_ranks; r++) {
        BT_TRY_GOTO(st, part_read(parts[r], lens[r], r, stages, &j.part[r]), done);
        if (j.part[r].h.n_steps > 0 && j.part[r].h.first_t0_ms + ranks[r].offset_ms < j.base_ms)
            j.base_ms = j.part[r].h.first_t0_ms + ranks[r].offset_ms;
    }
    if (!isfinite(j.base_ms)) j.base_ms = 0;
    BT_TRY_GOTO(st, bt_atomic_file_open(path, &o.f), done);
    json_t *other = other_data(&j);
    char *head = other ? json_dumps(other, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(other);
    if (!head) {
        o.st = bt_error(BT_ERR_NOMEM, "trace: out of memory");
    } else {
        static const char a[] = "{\"displayTimeUnit\": \"ms\", \"otherData\": ", b[] = ", \"traceEvents\": [";
        o.st = bt_atomic_file_write(o.f, a, sizeof a - 1);
        if (o.st == BT_OK) o.st = bt_atomic_file_write(o.f, head, strlen(head));
        if (o.st == BT_OK) o.st = bt_atomic_file_write(o.f, b, sizeof b - 1);
        free(head);
    }
    emit_meta(&o, &j);
    for (int r = 0; r < n_ranks; r++)
        for (int k = 0; k < j.part[r].h.n_steps; k++) emit_rank_step(&o, &j, r, k);
    long long next_id = 1;
    emit_flows(&o, &j, &next_id);
    if (o.st == BT_OK) o.st = bt_atomic_file_write(o.f, "\n]}\n", 4);
    if (o.st != BT_OK) {
        bt_atomic_file_abort(o.f);
        st = o.st;
    } else {
        st = bt_atomic_file_commit(o.f);
    }
done:
    for (int r = 0; r < n_ranks; r++) part_free(&j.part[r]);
    free(j.part);
    return st;
}
