/* trace/trace.c: collecting traced steps from an engine, the Chrome/Perfetto JSON writer, the
 * per-stage time shares and the prediction from measured costs (see trace.h).
 *
 * Matching: a SEND of kind K and micro-batch mb on stage s pairs with the RECV of the same kind
 * and mb on every stage its channels reach (recorded when the step is added); a RECV's data
 * arrived when the last of its senders finished (a send posts its message at its end). The part
 * of a receive after that moment is the copy; the part before is waiting.
 *
 * Data flow: exec/step_view.h (records, schedule, stages, the STEP barrier) -> bt_trace -> JSON
 * file, stats.
 * Never prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/error.h"
#include "exec/step_view.h"
#include "io/atomic_file.h"
#include "trace/trace.h"

bt_status bt_trace_create(bt_trace **out)
{
    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_trace_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    return BT_OK;
}

static void step_free(bt_trace_step *st, int stages)
{
    for (int s = 0; st->ev && s < stages; s++) free(st->ev[s]);
    free(st->ev);
    free(st->n);
    free(st->coll);
}

void bt_trace_destroy(bt_trace *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_steps; i++) step_free(&t->steps[i], t->stages);
    free(t->steps);
    free(t->stage);
    free(t);
}

int bt_trace_num_steps(const bt_trace *t) { return t ? t->n_steps : 0; }

int bt_trace_num_stages(const bt_trace *t) { return t ? t->stages : 0; }

/* ---- collecting ------------------------------------------------------------------------------- */

static bt_status stage_facts(const bt_engine *e, int s, bt_trace_stage *out)
{
    bt_step_stage v;
    BT_TRY(bt_engine_step_stage(e, s, &v));
    memset(out, 0, sizeof *out);
    snprintf(out->device, sizeof out->device, "%s", v.device);
    if (strcmp(v.first_layer, v.last_layer) == 0) snprintf(out->layers, sizeof out->layers, "%s", v.first_layer);
    else snprintf(out->layers, sizeof out->layers, "%s..%s", v.first_layer, v.last_layer);
    out->slot_bytes = v.slot_bytes;
    out->n_act_to = v.n_act_to;
    memcpy(out->act_to, v.act_to, sizeof out->act_to);
    out->n_grad_to = v.n_grad_to;
    memcpy(out->grad_to, v.grad_to, sizeof out->grad_to);
    return BT_OK;
}

static bt_status first_step(bt_trace *t, const bt_engine *e, const bt_step_view *view)
{
    t->stages = view->stages;
    t->first_t0_ms = view->t0_ms;
    t->stage = calloc((size_t)t->stages, sizeof *t->stage);
    if (!t->stage) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    for (int s = 0; s < t->stages; s++) BT_TRY(stage_facts(e, s, &t->stage[s]));
    return BT_OK;
}

static bt_status copy_records(const bt_engine *e, const bt_schedule *sched, bt_trace_step *step, int stages)
{
    step->n = calloc((size_t)stages, sizeof *step->n);
    step->ev = calloc((size_t)stages, sizeof *step->ev);
    if (!step->n || !step->ev) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    for (int s = 0; s < stages; s++) {
        int n = 0;
        const bt_trace_rec *rec = bt_engine_trace(e, s, &n);
        step->ev[s] = calloc((size_t)n + 1, sizeof **step->ev);
        if (!step->ev[s]) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
        for (int i = 0; i < n; i++) {
            if (rec[i].instr < 0 || rec[i].instr >= sched->len[s])
                return bt_error(BT_ERR_INTERNAL, "trace: stage %d record %d names instruction %d of %d",
                                s, i, rec[i].instr, sched->len[s]);
            bt_trace_ev *ev = &step->ev[s][i];
            ev->ins = sched->list[s][rec[i].instr];
            ev->start_ms = rec[i].start_ms;
            ev->end_ms = rec[i].end_ms;
            ev->bytes = rec[i].bytes;
            ev->live = rec[i].live;
            if (ev->end_ms > step->wall_ms) step->wall_ms = ev->end_ms;
        }
        step->n[s] = n;
    }
    return BT_OK;
}

static bt_status copy_collectives(const bt_engine *e, bt_trace_step *step)
{
    int n = bt_engine_collectives(e, NULL, 0);
    if (n == 0) return BT_OK;
    bt_coll_rec *rec = calloc((size_t)n, sizeof *rec);
    step->coll = calloc((size_t)n, sizeof *step->coll);
    if (!rec || !step->coll) {
        free(rec);
        return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    }
    n = bt_engine_collectives(e, rec, n);
    for (int i = 0; i < n; i++)
        step->coll[i] = (bt_trace_coll){rec[i].bucket, rec[i].bytes, rec[i].scatter, rec[i].start_ms, rec[i].end_ms,
                                        rec[i].wait_ms};
    step->n_coll = n;
    free(rec);
    return BT_OK;
}

bt_status bt_trace_add_step(bt_trace *t, const bt_engine *e)
{
    if (!t || !e) return bt_error(BT_ERR_INVALID_ARG, "bt_trace_add_step: NULL argument");
    bt_step_view view;
    bt_status vs = bt_engine_step_view(e, &view);
    if (vs != BT_OK) return bt_error_context(vs, "trace");
    const bt_schedule *sched = view.schedule;
    if (t->n_steps == 0 && !t->stage) BT_TRY(first_step(t, e, &view));
    if (view.stages != t->stages)
        return bt_error(BT_ERR_INVALID_ARG, "trace: a %d-stage step cannot join a %d-stage trace", view.stages,
                        t->stages);
    if (t->n_steps == t->cap_steps) {
        int cap = t->cap_steps ? 2 * t->cap_steps : 16;
        bt_trace_step *s = realloc(t->steps, (size_t)cap * sizeof *s);
        if (!s) return bt_error(BT_ERR_NOMEM, "trace: out of memory");
        t->steps = s;
        t->cap_steps = cap;
    }
    bt_trace_step *step = &t->steps[t->n_steps];
    memset(step, 0, sizeof *step);
    step->t0_ms = view.t0_ms - t->first_t0_ms;
    step->kind = sched->kind;
    step->chunks = sched->chunks;
    step->microbatches = sched->microbatches;
    step->training = view.training;
    step->barrier = view.step_barrier;
    bt_status st = copy_records(e, sched, step, t->stages);
    if (st == BT_OK) st = copy_collectives(e, step);
    if (st != BT_OK) {
        step_free(step, t->stages);
        return st;
    }
    t->n_steps++;
    return BT_OK;
}

/* ---- matching sends and receives ------------------------------------------------------------ */

static int is_compute(bt_instr_kind k)
{
    return k == BT_I_FWD || k == BT_I_BWD || k == BT_I_STEP || k == BT_I_WGT;
}

/* Per step, for every stage and micro-batch: the event index of its RECV_ACT and RECV_GRAD
 * (-1: none) and the end of its SEND_ACT and SEND_GRAD (NAN: none). */
typedef struct step_index {
    int m;
    int *act, *grad;            /* [stages * m] */
    double *act_sent, *grad_sent; /* [stages * m] */
} step_index;

static void step_index_free(step_index *ix)
{
    free(ix->act);
    free(ix->grad);
    free(ix->act_sent);
    free(ix->grad_sent);
    memset(ix, 0, sizeof *ix);
}

static bt_status step_index_build(const bt_trace *t, const bt_trace_step *step, step_index *ix)
{
    size_t cells = (size_t)t->stages * (size_t)step->microbatches + 1;
    ix->m = step->microbatches;
    ix->act = malloc(cells * sizeof *ix->act);
    ix->grad = malloc(cells * sizeof *ix->grad);
    ix->act_sent = malloc(cells * sizeof *ix->act_sent);
    ix->grad_sent = malloc(cells * sizeof *ix->grad_sent);
    if (!ix->act || !ix->grad || !ix->act_sent || !ix->grad_sent) {
        step_index_free(ix);
        return bt_error(BT_ERR_NOMEM, "trace: out of memory");
    }
    for (size_t c = 0; c < cells; c++) {
        ix->act[c] = ix->grad[c] = -1;
        ix->act_sent[c] = ix->grad_sent[c] = NAN;
    }
    for (int s = 0; s < t->stages; s++)
        for (int i = 0; i < step->n[s]; i++) {
            const bt_trace_ev *ev = &step->ev[s][i];
            if (ev->ins.mb < 0 || ev->ins.mb >= ix->m) continue;
            size_t c = (size_t)s * (size_t)ix->m + (size_t)ev->ins.mb;
            switch (ev->ins.kind) {
            case BT_I_RECV_ACT: ix->act[c] = i; break;
            case BT_I_RECV_GRAD: ix->grad[c] = i; break;
            case BT_I_SEND_ACT: ix->act_sent[c] = ev->end_ms; break;
            case BT_I_SEND_GRAD: ix->grad_sent[c] = ev->end_ms; break;
            default: break;
            }
        }
    return BT_OK;
}

/* When the data of a RECV on stage d had all arrived: the latest end of a matching send among the
 * stages whose channels reach d (a send posts at its end), or the receive's start if earlier. */
static double arrival_ms(const bt_trace *t, const step_index *ix, int d, const bt_trace_ev *recv)
{
    int grad = recv->ins.kind == BT_I_RECV_GRAD;
    double latest = recv->start_ms;
    for (int s = 0; s < t->stages; s++) {
        const bt_trace_stage *fs = &t->stage[s];
        int reaches = 0;
        for (int k = 0; k < (grad ? fs->n_grad_to : fs->n_act_to); k++)
            reaches |= (grad ? fs->grad_to[k] : fs->act_to[k]) == d;
        double sent = (grad ? ix->grad_sent : ix->act_sent)[s * ix->m + recv->ins.mb];
        if (reaches && sent > latest) latest = sent;
    }
    return latest;
}

/* ---- JSON ------------------------------------------------------------------------------------- */

/* Integer nanoseconds from the first step's start: rounding once keeps slices of a track in order. */
static long long to_ns(const bt_trace_step *step, double ms)
{
    return llround((step->t0_ms + ms) * 1e6);
}

typedef struct json_out {
    bt_atomic_file *f;
    int n;
    bt_status st;
} json_out;

/* Writes ev (stealing it) as one line of the traceEvents array. */
static void emit(json_out *o, json_t *ev)
{
    if (o->st != BT_OK) {
        json_decref(ev);
        return;
    }
    char *s = ev ? json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
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

static void emit_metadata(json_out *o, const bt_trace *t)
{
    for (int s = 0; s < t->stages; s++) {
        char name[96];
        snprintf(name, sizeof name, "stage %d (%s)", s, t->stage[s].device);
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", s + 1,
                          "tid", 0, "args", "name", name));
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "process_sort_index", "ph", "M", "pid",
                          s + 1, "tid", 0, "args", "sort_index", s));
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", s + 1,
                          "tid", 0, "args", "name", "compute"));
        emit(o, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", s + 1,
                          "tid", 1, "args", "name", "transfers"));
    }
}

static void emit_counter(json_out *o, int s, long long ns, size_t bytes)
{
    emit(o, json_pack("{s:s, s:s, s:i, s:f, s:{s:I}}", "name", "activations", "ph", "C", "pid", s + 1, "ts",
                      (double)ns / 1e3, "args", "bytes", (json_int_t)bytes));
}

static void emit_slices(json_out *o, const bt_trace *t, const bt_trace_step *step, int k)
{
    for (int s = 0; s < t->stages; s++) {
        const bt_trace_stage *fs = &t->stage[s];
        emit_counter(o, s, to_ns(step, 0), 0);
        for (int i = 0; i < step->n[s]; i++) {
            const bt_trace_ev *ev = &step->ev[s][i];
            char name[32];
            bt_instr_format(s, &ev->ins, name, sizeof name);
            long long a = to_ns(step, ev->start_ms), b = to_ns(step, ev->end_ms);
            int compute = is_compute(ev->ins.kind);
            emit(o, json_pack("{s:s, s:s, s:s, s:i, s:i, s:f, s:f, s:{s:i, s:s, s:I, s:i}}", "name", name, "cat",
                              compute ? "compute" : "transfer", "ph", "X", "pid", s + 1, "tid", compute ? 0 : 1,
                              "ts", (double)a / 1e3, "dur", (double)(b - a) / 1e3, "args", "microbatch",
                              ev->ins.mb, "layers", fs->layers, "bytes", (json_int_t)ev->bytes, "step", k));
            if (ev->ins.kind == BT_I_FWD && !step->training) {
                emit_counter(o, s, a, fs->slot_bytes);
                emit_counter(o, s, b, 0);
            } else if (ev->ins.kind == BT_I_FWD || ev->ins.kind == BT_I_BWD) {
                emit_counter(o, s, b, (size_t)ev->live * fs->slot_bytes);
            }
        }
    }
}

/* One arrow per (send, receiving stage): it starts inside the SEND slice and ends inside the RECV
 * slice, no earlier than it starts (see the file comment for why the receive ends later). */
static void emit_flows(json_out *o, const bt_trace *t, const bt_trace_step *step, const step_index *ri,
                       long long *next_id)
{
    for (int s = 0; s < t->stages; s++)
        for (int i = 0; i < step->n[s]; i++) {
            const bt_trace_ev *send = &step->ev[s][i];
            int grad = send->ins.kind == BT_I_SEND_GRAD;
            if ((send->ins.kind != BT_I_SEND_ACT && !grad) || send->ins.mb < 0 || send->ins.mb >= ri->m) continue;
            const bt_trace_stage *fs = &t->stage[s];
            for (int k = 0; k < (grad ? fs->n_grad_to : fs->n_act_to); k++) {
                int d = grad ? fs->grad_to[k] : fs->act_to[k];
                int j = (grad ? ri->grad : ri->act)[d * ri->m + send->ins.mb];
                if (j < 0) continue;
                const bt_trace_ev *recv = &step->ev[d][j];
                long long sa = to_ns(step, send->start_ms), sb = to_ns(step, send->end_ms);
                long long ra = to_ns(step, recv->start_ms), rb = to_ns(step, recv->end_ms);
                long long reach = rb > sa ? rb - sa : 0;
                long long s_ts = sa + ((sb - sa) < reach ? (sb - sa) : reach) / 2;
                long long lo = ra > s_ts ? ra : s_ts;
                long long f_ts = lo + (rb > lo ? (rb - lo) / 2 : 0);
                const char *name = grad ? "gradients" : "activations";
                json_int_t id = (json_int_t)(*next_id)++;
                emit(o, json_pack("{s:s, s:s, s:s, s:I, s:i, s:i, s:f}", "name", name, "cat", "flow", "ph", "s",
                                  "id", id, "pid", s + 1, "tid", 1, "ts", (double)s_ts / 1e3));
                emit(o, json_pack("{s:s, s:s, s:s, s:s, s:I, s:i, s:i, s:f}", "name", name, "cat", "flow", "ph",
                                  "f", "bp", "e", "id", id, "pid", d + 1, "tid", 1, "ts", (double)f_ts / 1e3));
            }
        }
}

bt_status bt_trace_write_json(const bt_trace *t, const char *path)
{
    if (!t || !path) return bt_error(BT_ERR_INVALID_ARG, "bt_trace_write_json: NULL argument");
    json_out o = {NULL, 0, BT_OK};
    BT_TRY(bt_atomic_file_open(path, &o.f));
    static const char head[] = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [";
    o.st = bt_atomic_file_write(o.f, head, sizeof head - 1);
    emit_metadata(&o, t);
    long long next_id = 1;
    for (int k = 0; k < t->n_steps && o.st == BT_OK; k++) {
        const bt_trace_step *step = &t->steps[k];
        step_index ri;
        memset(&ri, 0, sizeof ri);
        emit_slices(&o, t, step, k);
        if (o.st == BT_OK) o.st = step_index_build(t, step, &ri);
        if (o.st == BT_OK) emit_flows(&o, t, step, &ri, &next_id);
        step_index_free(&ri);
    }
    if (o.st == BT_OK) o.st = bt_atomic_file_write(o.f, "\n]}\n", 4);
    if (o.st != BT_OK) {
        bt_atomic_file_abort(o.f);
        return o.st;
    }
    return bt_atomic_file_commit(o.f);
}

/* ---- statistics and prediction -------------------------------------------------------------- */

typedef struct samples {
    double *v;
    int n, cap;
} samples;

static int push(samples *s, double x)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return 0;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(samples *s)
{
    if (s->n == 0) return 0;
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_double);
    return s->n % 2 ? s->v[s->n / 2] : 0.5 * (s->v[s->n / 2 - 1] + s->v[s->n / 2]);
}

enum { S_FWD, S_BWD, S_STEP, S_SEND_ACT, S_RECV_ACT, S_SEND_GRAD, S_RECV_GRAD, S_WGT, S_COUNT };

/* The part of a STEP that is the stage's own work: with a barrier, what follows the last
 * stage's arrival (all stages leave together); without, all of it. */
static double step_work(const bt_trace *t, const bt_trace_step *step, const bt_trace_ev *ev)
{
    if (!step->barrier) return ev->end_ms - ev->start_ms;
    double last_start = ev->start_ms;
    for (int s = 0; s < t->stages; s++)
        for (int i = 0; i < step->n[s]; i++)
            if (step->ev[s][i].ins.kind == BT_I_STEP && step->ev[s][i].start_ms > last_start)
                last_start = step->ev[s][i].start_ms;
    double w = ev->end_ms - last_start;
    return w < 0 ? 0 : w;
}

/* Fills the samples of one stage over every step; *busy, *xfer and *wall receive sums in ms. */
static bt_status collect_stage(const bt_trace *t, int s, samples *smp, double *busy, double *xfer, double *wall)
{
    *busy = *xfer = *wall = 0;
    for (int k = 0; k < t->n_steps; k++) {
        const bt_trace_step *step = &t->steps[k];
        step_index ix;
        memset(&ix, 0, sizeof ix);
        BT_TRY(step_index_build(t, step, &ix));
        *wall += step->wall_ms;
        for (int i = 0; i < step->n[s]; i++) {
            const bt_trace_ev *ev = &step->ev[s][i];
            double dur = ev->end_ms - ev->start_ms, copy;
            int ok = 1;
            switch (ev->ins.kind) {
            case BT_I_FWD: *busy += dur, ok = push(&smp[S_FWD], dur); break;
            case BT_I_BWD: *busy += dur, ok = push(&smp[S_BWD], dur); break;
            case BT_I_WGT: *busy += dur, ok = push(&smp[S_WGT], dur); break;
            case BT_I_STEP:
                if (!step->training) break;
                copy = step_work(t, step, ev);
                *busy += copy, ok = push(&smp[S_STEP], copy);
                break;
            case BT_I_SEND_ACT: *xfer += dur, ok = push(&smp[S_SEND_ACT], dur); break;
            case BT_I_SEND_GRAD: *xfer += dur, ok = push(&smp[S_SEND_GRAD], dur); break;
            case BT_I_RECV_ACT:
            case BT_I_RECV_GRAD: {
                double arrived = ev->ins.mb >= 0 && ev->ins.mb < ix.m ? arrival_ms(t, &ix, s, ev) : ev->start_ms;
                copy = ev->end_ms - (arrived > ev->start_ms ? arrived : ev->start_ms);
                if (copy < 0) copy = 0;
                *xfer += copy;
                ok = push(&smp[ev->ins.kind == BT_I_RECV_ACT ? S_RECV_ACT : S_RECV_GRAD], copy);
                break;
            }
            }
            if (!ok) {
                step_index_free(&ix);
                return bt_error(BT_ERR_NOMEM, "trace: out of memory");
            }
        }
        step_index_free(&ix);
    }
    return BT_OK;
}

bt_status bt_trace_stage_summary(const bt_trace *t, int s, bt_trace_stage_stats *out)
{
    if (!t || !out || s < 0 || s >= t->stages)
        return bt_error(BT_ERR_INVALID_ARG, "bt_trace_stage_summary: no stage %d", s);
    samples smp[S_COUNT];
    double busy, xfer, wall;
    memset(smp, 0, sizeof smp);
    memset(out, 0, sizeof *out);
    bt_status st = collect_stage(t, s, smp, &busy, &xfer, &wall);
    if (st == BT_OK) {
        out->busy = wall > 0 ? busy / wall : 0;
        out->transfer = wall > 0 ? xfer / wall : 0;
        out->idle = wall > 0 ? 1.0 - out->busy - out->transfer : 0;
        if (out->idle < 0) out->idle = 0;
        out->fwd_ms = median(&smp[S_FWD]);
        out->bwd_ms = median(&smp[S_BWD]);
        out->wgt_ms = median(&smp[S_WGT]);
        out->step_ms = median(&smp[S_STEP]);
        out->send_act_ms = median(&smp[S_SEND_ACT]);
        out->recv_act_ms = median(&smp[S_RECV_ACT]);
        out->send_grad_ms = median(&smp[S_SEND_GRAD]);
        out->recv_grad_ms = median(&smp[S_RECV_GRAD]);
    }
    for (int i = 0; i < S_COUNT; i++) free(smp[i].v);
    return st;
}

bt_status bt_trace_predict(const bt_trace *t, double *predicted_ms, double *measured_ms)
{
    if (!t || t->n_steps == 0 || !predicted_ms || !measured_ms)
        return bt_error(BT_ERR_INVALID_ARG, "bt_trace_predict: no traced step");
    const bt_trace_step *last = &t->steps[t->n_steps - 1];
    double fwd[BT_MAX_STAGES], bwd[BT_MAX_STAGES], wgt[BT_MAX_STAGES], step = 0;
    for (int s = 0; s < t->stages; s++) {
        bt_trace_stage_stats ss;
        BT_TRY(bt_trace_stage_summary(t, s, &ss));
        fwd[s] = ss.fwd_ms + ss.send_act_ms + ss.recv_act_ms;
        bwd[s] = ss.bwd_ms + ss.send_grad_ms + ss.recv_grad_ms;
        wgt[s] = ss.wgt_ms;
        if (ss.step_ms > step) step = ss.step_ms;
    }
    samples walls = {0};
    for (int k = 0; k < t->n_steps; k++)
        if (!push(&walls, t->steps[k].wall_ms)) {
            free(walls.v);
            return bt_error(BT_ERR_NOMEM, "trace: out of memory");
        }
    *measured_ms = median(&walls);
    free(walls.v);
    bt_schedule *sched = NULL;
    bt_sim_result res;
    memset(&res, 0, sizeof res);
    bt_sim_costs costs = {fwd, last->training ? bwd : NULL, NULL, NULL, last->training ? step : 0,
                          last->training ? wgt : NULL};
    bt_status st = bt_schedule_build_virtual(last->kind, t->stages, last->microbatches,
                                             last->chunks > 0 ? last->chunks : 1, &sched);
    if (st == BT_OK) st = bt_simulate(sched, &costs, &res);
    if (st == BT_OK) *predicted_ms = res.step_time;
    bt_sim_result_free(&res);
    bt_schedule_destroy(sched);
    return st;
}
