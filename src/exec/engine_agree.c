/* exec/engine_agree.c: what the ranks of a job must agree on about the engine they build, as
 * fields of an agreement record (dist/agree.h): the model's graph, layer by layer (op, arguments,
 * activation, inputs, output shape, parameters and their initialisation, recomputation) and every
 * engine parameter that shapes the job (parallel section, optimizer, lr schedule, clipping, batch,
 * seed, precision, transfer mode). Per-rank settings are left out on purpose: BLAS threads, the
 * watchdog, the device memory limit, and the devices' indices (each rank names its own GPUs; the
 * kinds, which choose the paths between ranks, must agree). The field names are the model file's
 * keys, or the flag where there is none. engine_dist.c adds the plan and the schedules. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/engine_dist.h"
#include "graph/graph_internal.h"

/* A growing text for one field's value; on failure the record is marked incomplete. */
typedef struct text {
    char *s;
    size_t len, cap;
    int failed;
} text;

static void add(text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void add(text *t, const char *fmt, ...)
{
    for (int tries = 0; tries < 2 && !t->failed; tries++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) break;
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 256;
        while (cap <= t->len + (size_t)n) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) break;
        t->s = s;
        t->cap = cap;
    }
    t->failed = 1;
}

static void add_num(text *t, double v)
{
    char buf[40];
    add(t, "%s", bt_agree_num_text(v, buf, sizeof buf));
}

static void put_text(bt_agree *a, const char *field, text *t)
{
    if (t->failed) a->failed = 1;
    else bt_agree_str(a, field, t->s ? t->s : "");
    free(t->s);
    memset(t, 0, sizeof *t);
}

static void add_args(text *t, const bt_args *args)
{
    for (int i = 0; i < args->n; i++) {
        const bt_arg_value *v = &args->v[i];
        add(t, " %s=", v->name);
        switch (v->type) {
        case BT_ARG_FLOAT: add_num(t, v->f); break;
        case BT_ARG_INTS:
            for (int k = 0; k < v->n; k++) add(t, "%s%lld", k ? "," : "[", (long long)v->ints[k]);
            add(t, "]");
            break;
        case BT_ARG_STRING: add(t, "'%s'", v->s ? v->s : ""); break;
        default: add(t, "%lld", (long long)v->i); break;
        }
    }
}

static void add_shape(text *t, const bt_shape *s, bt_dtype dtype)
{
    char buf[128];
    add(t, "%s %s", bt_shape_format(s, buf, sizeof buf), bt_dtype_name(dtype));
}

/* "fc1: linear out=1024 (x) -> (1024) f32, relu -> (1024) f32; fc1.weight (1024, 784) init 2 ..." */
static void layer_value(const bt_graph *g, int l, text *t)
{
    const bt_layer *ly = &g->layers[l];
    add(t, "%s:", ly->name);
    for (int k = 0; k < ly->n_nodes; k++) {
        const bt_node *n = &g->nodes[ly->first_node + k];
        add(t, "%s %s", k ? "," : "", n->op->name);
        add_args(t, &n->args);
        add(t, " (");
        for (int i = 0; i < n->n_in; i++) add(t, "%s%s", i ? ", " : "", g->values[n->in[i]].name);
        add(t, ") -> ");
        add_shape(t, &g->values[n->out].shape, g->values[n->out].dtype);
        for (int i = 0; i < n->n_params; i++) {
            const bt_param *p = &g->params[n->params[i]];
            char buf[128];
            add(t, "; %s %s init %d ", p->name, bt_shape_format(&p->shape, buf, sizeof buf), (int)p->init);
            add_num(t, p->init_arg);
            if (p->tied_to >= 0) add(t, " tied to %s", g->params[p->tied_to].name);
        }
    }
    if (ly->stage >= 0) add(t, "; stage %d", ly->stage);
    if (ly->joins_previous) add(t, "; joins the previous");
    if (ly->recompute) add(t, "; recomputed");
}

static void graph_fields(bt_agree *a, const bt_graph *g)
{
    char field[160];
    text t = {0};
    bt_agree_int(a, "model.inputs (count)", g->n_inputs);
    for (int i = 0; i < g->n_inputs; i++) {
        const bt_value *v = &g->values[g->inputs[i]];
        add(&t, "%s ", v->name);
        add_shape(&t, &v->shape, v->dtype);
        snprintf(field, sizeof field, "model.inputs[%d]", i);
        put_text(a, field, &t);
    }
    bt_agree_int(a, "model.layers (count)", g->n_layers);
    for (int l = 0; l < g->n_layers; l++) {
        layer_value(g, l, &t);
        snprintf(field, sizeof field, "model.layers[%d]", l);
        put_text(a, field, &t);
    }
}

/* "cpu,cuda": the kind of every device the list names (each rank resolves the indices itself). */
static void device_kinds(bt_agree *a, const char *devices)
{
    text t = {0};
    const char *d = devices ? devices : "auto";
    while (*d) {
        size_t n = strcspn(d, ",");
        size_t kind = strcspn(d, ":,");
        add(&t, "%s%.*s", t.len ? "," : "", (int)(kind < n ? kind : n), d);
        d += n;
        if (*d == ',') d++;
    }
    put_text(a, "parallel.devices (their kinds)", &t);
}

static const char *partition_name(bt_partition_kind k)
{
    static const char *const names[] = {"uniform", "params", "profile", "balance", "layout", "stage: pins"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

static void parallel_fields(bt_agree *a, const bt_parallel_config *c)
{
    device_kinds(a, c->devices);
    bt_agree_int(a, "parallel.pipeline.stages", c->stages);
    bt_agree_int(a, "parallel.pipeline.microbatches", c->microbatches);
    bt_agree_str(a, "parallel.pipeline.schedule", bt_schedule_name(c->schedule));
    text t = {0};
    add(&t, "%s", partition_name(c->partition));
    for (int i = 0; i < c->n_balance; i++) add(&t, "%s%d", i ? "," : " ", c->balance[i]);
    if (c->partition == BT_PARTITION_LAYOUT) add(&t, " '%s'", c->layout ? c->layout : "");
    put_text(a, "parallel.pipeline.partition", &t);
    bt_agree_int(a, "parallel.virtual", c->virtual_stages > 1 ? c->virtual_stages : 1);
    bt_agree_int(a, "parallel.zero", c->zero);
}

static void train_fields(bt_agree *a, const bt_engine_params *p)
{
    const bt_optimizer_config *o = &p->optimizer;
    const bt_lr_schedule_config *s = &p->lr_schedule;
    static const char *const lr_kinds[] = {"constant", "step", "cosine"};
    bt_agree_str(a, "training (a train: section)", p->training ? "yes" : "no");
    bt_agree_str(a, "train.optimizer.type", o->kind == BT_OPT_SGD ? "sgd" : "adamw");
    bt_agree_num(a, "train.optimizer.lr", o->lr);
    bt_agree_num(a, "train.optimizer.weight_decay", o->weight_decay);
    bt_agree_num(a, "train.optimizer.momentum", o->momentum);
    bt_agree_int(a, "train.optimizer.nesterov", o->nesterov);
    bt_agree_num(a, "train.optimizer.betas[0]", o->beta1);
    bt_agree_num(a, "train.optimizer.betas[1]", o->beta2);
    bt_agree_num(a, "train.optimizer.eps", o->eps);
    bt_agree_str(a, "train.lr_schedule.type", (unsigned)s->kind < 3 ? lr_kinds[s->kind] : "?");
    bt_agree_int(a, "train.lr_schedule.warmup_steps", (long long)s->warmup_steps);
    bt_agree_int(a, "train.lr_schedule.step_size", (long long)s->step_size);
    bt_agree_num(a, "train.lr_schedule.gamma", s->gamma);
    bt_agree_num(a, "train.lr_schedule.min_lr", s->min_lr);
    bt_agree_num(a, "train.clip_grad_norm", p->clip_norm);
    bt_agree_int(a, "total steps (the lr schedule's horizon)",
                 (long long)p->total_steps);
    bt_agree_int(a, "train.batch (--batch)", (long long)p->batch);
    bt_agree_str(a, "dtype", bt_dtype_name(p->dtype));
    bt_agree_str(a, "train.precision", bt_dtype_name(p->precision));
    bt_agree_num(a, "train.loss_scale", p->loss_scale);
}

void bt_engine_agree_fields(bt_agree *a, const bt_graph *g, const bt_engine_params *p)
{
    static const char *const transfers[] = {"auto", "staged", "host", "nccl"};
    graph_fields(a, g);
    parallel_fields(a, &p->parallel);
    train_fields(a, p);
    bt_agree_int(a, "--seed (initialisation and dropout)", (long long)p->seed);
    bt_agree_str(a, "--transfer", (unsigned)p->transfer < 4 ? transfers[p->transfer] : "?");
}
