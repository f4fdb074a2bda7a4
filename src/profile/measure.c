/* profile/measure.c: measuring a model (see measure.h and baton/profile.h): per layer the bytes
 * the planner's memory model needs and the times of bt_profile_measure_layer on one device of
 * each kind, and the transfer rate between every ordered pair of devices; plus the quick
 * measurement `partition: profile` asks its caller for (bt_profile_measure_for_plan).
 *
 * Data flow: graph + device list -> devices opened through the backend registry -> bt_profile ->
 * (caller) -> bt_parallel_config.profile -> plan. Never prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "core/util.h"
#include "optim/optim.h"
#include "plan/memory.h"
#include "plan/plan.h"
#include "profile/measure.h"

void bt_profile_params_init(bt_profile_params *p)
{
    memset(p, 0, sizeof *p);
    p->devices = "cpu:0";
    p->batch = 32;
    p->microbatches = 1;
    p->training = 1;
    bt_train_config tc;
    bt_train_config_init(&tc);
    p->optimizer = tc.optimizer;
    p->repeats = 10;
    p->warmup = 2;
    p->threads = 1;
    p->transfer_bytes = (size_t)8 << 20;
    p->handoff_repeats = 5;
    p->precision = BT_F32;
}

bt_status bt_profile_parse_devices(const char *list, char (*devices)[BT_PROFILE_DEVICE_LEN], int max,
                                   int *n)
{
    *n = 0;
    if (!list || !*list) return bt_error(BT_ERR_INVALID_ARG, "no devices given (expected cpu:0,cpu:1)");
    const char *p = list;
    for (;;) {
        while (*p == ' ') p++;
        size_t len = strcspn(p, ",");
        size_t trimmed = len;
        while (trimmed > 0 && p[trimmed - 1] == ' ') trimmed--;
        if (trimmed == 0 || trimmed >= BT_PROFILE_DEVICE_LEN)
            return bt_error(BT_ERR_INVALID_ARG, "devices '%s': empty or overlong entry", list);
        if (*n >= max)
            return bt_error(BT_ERR_INVALID_ARG, "devices '%s': more than %d devices", list, max);
        memcpy(devices[*n], p, trimmed);
        devices[*n][trimmed] = '\0';
        char kind[16];
        int index;
        BT_TRY(bt_device_parse(devices[*n], kind, sizeof kind, &index));
        (*n)++;
        p += len;
        if (!*p) break;
        p++;
    }
    return BT_OK;
}


/* last_read[v]: the last layer reading value v (-1: none). */
static int *last_readers(const bt_graph *g)
{
    int *last = malloc(((size_t)g->n_values + 1) * sizeof *last);
    if (!last) return NULL;
    for (int v = 0; v < g->n_values; v++) last[v] = -1;
    for (int n = 0; n < g->n_nodes; n++)
        for (int i = 0; i < g->nodes[n].n_in; i++)
            if (g->nodes[n].layer > last[g->nodes[n].in[i]]) last[g->nodes[n].in[i]] = g->nodes[n].layer;
    return last;
}

static void layer_bytes(const bt_graph *g, int l, const int *last_read, const bt_profile_params *pp,
                        bt_profile_layer *out)
{
    bt_memory_params mp;
    bt_memory_params_init(&mp);
    mp.training = pp->training;
    mp.precision = pp->precision; /* the weights' compute copy under mixed precision */
    mp.optimizer_slots = pp->training ? bt_optim_state_count(&pp->optimizer) : 0;
    bt_layer_memory lm;
    bt_memory_layer(g, l, &mp, &lm);
    out->params = lm.n_params;
    out->param_bytes = lm.weights;
    out->grad_bytes = lm.gradients;
    out->optimizer_bytes = lm.optimizer;
    out->activation_bytes_per_sample = lm.activation_bytes_per_sample;
    out->output_bytes_per_sample = lm.output_bytes_per_sample;
    uint64_t cut = 0;
    for (int v = 0; v < g->n_values; v++) {
        const bt_value *val = &g->values[v];
        if (val->producer >= 0 && g->nodes[val->producer].layer <= l && last_read[v] > l)
            cut += bt_profile_value_row_bytes(val);
    }
    out->cut_bytes_per_sample = cut;
}

static const char *optimizer_name(const bt_profile_params *pp)
{
    if (!pp->training) return "none";
    if (pp->optimizer.kind == BT_OPT_ADAMW) return "adamw";
    return pp->optimizer.momentum > 0 ? "sgd-momentum" : "sgd";
}

/* ---- transfers -------------------------------------------------------------------------------- */

typedef struct open_device {
    const bt_backend *be;
    bt_device *dev;
} open_device;

static bt_status open_one(const char *spec, int threads, open_device *out)
{
    char kind[16];
    int index;
    BT_TRY(bt_device_parse(spec, kind, sizeof kind, &index));
    out->be = bt_backend_find(kind);
    if (!out->be) return bt_error_context(BT_ERR_UNSUPPORTED, "profiling on %s", spec);
    BT_TRY(out->be->open(index, threads, &out->dev));
    bt_status st = out->be->bind_thread(out->dev); /* the caller closes the device either way */
    if (st != BT_OK) return bt_error_context(st, "profiling on %s: binding the device to this thread", spec);
    return BT_OK;
}

static void close_one(open_device *d)
{
    if (d->dev) d->be->close(d->dev);
    d->dev = NULL;
}

/* Device -> host buffer -> device, as a channel moves a message; GB/s of the whole path. */
static bt_status measure_transfer(open_device *from, open_device *to, const bt_profile_params *pp,
                                  double *gb_per_s)
{
    bt_status st = BT_OK;
    size_t bytes = pp->transfer_bytes;
    int repeats = pp->repeats < 3 ? 3 : pp->repeats;
    void *src = NULL, *dst = NULL;
    unsigned char *host = malloc(bytes);
    double *t = malloc((size_t)repeats * sizeof *t);
    if (!host || !t) {
        st = bt_error(BT_ERR_NOMEM, "profile: out of memory for a %zu-byte transfer", bytes);
        goto done;
    }
    BT_TRY_GOTO(st, from->be->alloc(from->dev, bytes, &src), done);
    BT_TRY_GOTO(st, to->be->alloc(to->dev, bytes, &dst), done);
    memset(host, 1, bytes);
    BT_TRY_GOTO(st, from->be->from_host(from->dev, src, host, bytes), done);
    for (int i = -1; i < repeats; i++) { /* i = -1: warm-up (first touch of the pages) */
        double t0 = bt_now_ms();
        BT_TRY_GOTO(st, from->be->to_host(from->dev, host, src, bytes), done);
        BT_TRY_GOTO(st, from->be->sync(from->dev), done);
        BT_TRY_GOTO(st, to->be->from_host(to->dev, dst, host, bytes), done);
        BT_TRY_GOTO(st, to->be->sync(to->dev), done);
        if (i >= 0) t[i] = bt_now_ms() - t0;
    }
    double ms = bt_median(t, repeats);
    *gb_per_s = (double)bytes / ((ms > 1e-6 ? ms : 1e-6) * 1e6);
done:
    if (src) from->be->free(from->dev, src);
    if (dst) to->be->free(to->dev, dst);
    free(host);
    free(t);
    return st;
}

static bt_status measure_transfers(bt_profile *prof, const bt_profile_params *pp)
{
    bt_status st = BT_OK;
    int n = prof->n_devices;
    open_device dev[BT_MAX_STAGES];
    memset(dev, 0, sizeof dev);
    prof->transfers = calloc((size_t)(n * n) + 1, sizeof *prof->transfers);
    if (!prof->transfers) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int i = 0; i < n; i++) BT_TRY_GOTO(st, open_one(prof->devices[i], pp->threads, &dev[i]), done);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            bt_profile_transfer *t = &prof->transfers[prof->n_transfers];
            snprintf(t->from, sizeof t->from, "%s", prof->devices[i]);
            snprintf(t->to, sizeof t->to, "%s", prof->devices[j]);
            t->bytes = pp->transfer_bytes;
            BT_TRY_GOTO(st, measure_transfer(&dev[i], &dev[j], pp, &t->gb_per_s), done);
            prof->n_transfers++;
        }
done:
    for (int i = 0; i < n; i++) close_one(&dev[i]);
    return st;
}

/* ---- the whole model -------------------------------------------------------------------------- */

static bt_status check_params(const bt_graph *g, const bt_profile_params *pp)
{
    if (!g || !pp) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_measure: NULL argument");
    if (g->n_layers == 0) return bt_error(BT_ERR_MODEL, "the model has no layers");
    if (pp->microbatches < 1 || pp->batch < 1 || pp->batch % pp->microbatches != 0)
        return bt_error(BT_ERR_INVALID_ARG, "batch %lld does not split into %d equal micro-batches",
                        (long long)pp->batch, pp->microbatches);
    if (pp->repeats < 1 || pp->warmup < 0 || pp->threads < 1)
        return bt_error(BT_ERR_INVALID_ARG, "profile: repeats must be >= 1, warm-ups >= 0, threads >= 1");
    if (pp->transfer_bytes < 4096)
        return bt_error(BT_ERR_INVALID_ARG, "profile: transfer size %zu is below 4096 bytes",
                        pp->transfer_bytes);
    if (pp->precision != BT_F32 && pp->precision != BT_BF16 && pp->precision != BT_F16)
        return bt_error(BT_ERR_INVALID_ARG, "profile: precision must be f32, bf16 or f16, not %s (dtype %d)",
                        bt_dtype_name(pp->precision), (int)pp->precision);
    if (pp->training && !bt_graph_is_trainable(g))
        return bt_error(BT_ERR_MODEL, "cannot profile training: the last layer must be a loss");
    return BT_OK;
}

static bt_status measure_kinds(const bt_graph *g, const bt_profile_params *pp, bt_profile *prof)
{
    for (int d = 0; d < prof->n_devices; d++) {
        char kind[16];
        bt_profile_device_kind(prof->devices[d], kind, sizeof kind);
        if (bt_profile_kind_index(prof, kind) >= 0) continue;
        if (prof->n_kinds == BT_PROFILE_MAX_KINDS)
            return bt_error(BT_ERR_INVALID_ARG, "profile: more than %d device kinds", BT_PROFILE_MAX_KINDS);
        snprintf(prof->kinds[prof->n_kinds], sizeof prof->kinds[0], "%s", kind);
        snprintf(prof->measured_on[prof->n_kinds], sizeof prof->measured_on[0], "%s", prof->devices[d]);
        prof->n_kinds++;
    }
    prof->times = calloc((size_t)prof->n_layers * (size_t)prof->n_kinds, sizeof *prof->times);
    if (!prof->times) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    for (int k = 0; k < prof->n_kinds; k++) {
        open_device dev = {0};
        bt_status st = open_one(prof->measured_on[k], pp->threads, &dev);
        for (int l = 0; st == BT_OK && l < prof->n_layers; l++)
            st = bt_profile_measure_layer(g, l, dev.be, dev.dev, pp, &prof->times[(size_t)l * prof->n_kinds + k]);
        close_one(&dev);
        BT_TRY(st);
    }
    return BT_OK;
}

bt_status bt_profile_measure(const bt_graph *g, const char *model_name, const bt_profile_params *pp,
                             bt_profile **out)
{
    bt_status st = BT_OK;
    int *last_read = NULL;
    BT_TRY(check_params(g, pp));
    bt_profile *prof = calloc(1, sizeof *prof);
    if (!prof) return bt_error(BT_ERR_NOMEM, "profile: out of memory");
    BT_TRY_GOTO(st, bt_profile_parse_devices(pp->devices, prof->devices, BT_MAX_STAGES, &prof->n_devices), fail);
    if (pp->training && pp->handoff_repeats > 0 && prof->n_devices > BT_PROFILE_MAX_HANDOFF_DEVICES) {
        /* refused now, not after every layer and every pair of devices was measured */
        st = bt_error(BT_ERR_INVALID_ARG,
                      "%d devices (%s): a training profile measures at most %d (its turn hand-off runs two "
                      "threads per device)",
                      prof->n_devices, pp->devices, BT_PROFILE_MAX_HANDOFF_DEVICES);
        goto fail;
    }
    prof->model = bt_strdup(model_name ? model_name : "model");
    prof->layers = calloc((size_t)g->n_layers, sizeof *prof->layers);
    if (!prof->model || !prof->layers) {
        st = bt_error(BT_ERR_NOMEM, "profile: out of memory");
        goto fail;
    }
    prof->batch = pp->batch;
    prof->microbatches = pp->microbatches;
    prof->microbatch_size = pp->batch / pp->microbatches;
    prof->training = pp->training != 0;
    snprintf(prof->optimizer, sizeof prof->optimizer, "%s", optimizer_name(pp));
    prof->precision = pp->precision;
    prof->threads = pp->threads;
    prof->repeats = pp->repeats;
    prof->warmup = pp->warmup;
    prof->n_layers = g->n_layers;
    if (!(last_read = last_readers(g))) {
        st = bt_error(BT_ERR_NOMEM, "profile: out of memory");
        goto fail;
    }
    for (int l = 0; l < g->n_layers; l++) {
        bt_profile_layer *pl = &prof->layers[l];
        pl->name = bt_strdup(g->layers[l].name);
        pl->op = bt_strdup(g->layers[l].op_name);
        pl->act = g->layers[l].act ? bt_strdup(g->layers[l].act) : NULL;
        if (!pl->name || !pl->op || (g->layers[l].act && !pl->act)) {
            st = bt_error(BT_ERR_NOMEM, "profile: out of memory");
            goto fail;
        }
        layer_bytes(g, l, last_read, pp, pl);
    }
    BT_TRY_GOTO(st, measure_kinds(g, pp, prof), fail);
    BT_TRY_GOTO(st, measure_transfers(prof, pp), fail);
    if (prof->training && pp->handoff_repeats > 0) /* interleaved 1F1B's turn hand-offs */
        BT_TRY_GOTO(st, bt_profile_measure_handoff(prof->n_devices, pp->handoff_repeats, &prof->handoff_ms), fail);
    free(last_read);
    *out = prof;
    return BT_OK;
fail:
    free(last_read);
    bt_profile_destroy(prof);
    return st;
}

/* ---- the quick measurement of `partition: profile` -------------------------------------------- */

bt_status bt_profile_measure_for_plan(const bt_graph *g, const bt_parallel_config *cfg, bt_dtype precision,
                                      bt_profile **out)
{
    char devices[BT_MAX_STAGES][32];
    char list[BT_MAX_STAGES * 33] = "";
    int n = 0;
    if (!g || !cfg || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_measure_for_plan: NULL argument");
    *out = NULL;
    if (precision != BT_F32 && precision != BT_BF16 && precision != BT_F16) /* even when nothing is measured */
        return bt_error(BT_ERR_INVALID_ARG, "partition: profile: precision must be f32, bf16 or f16, not %s (dtype %d)",
                        bt_dtype_name(precision), (int)precision);
    if (!bt_plan_needs_profile(g, cfg)) return BT_OK;
    BT_TRY(bt_plan_resolve_devices(cfg, g->n_layers, devices, &n));
    bt_plan_join_devices(devices, n, list, sizeof list);
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = list;
    pp.microbatches = cfg->microbatches > 0 ? cfg->microbatches : 1;
    pp.batch = (int64_t)pp.microbatches * BT_PROFILE_QUICK_MICROBATCH;
    pp.training = bt_graph_is_trainable(g) && cfg->schedule != BT_SCHEDULE_STREAM;
    pp.repeats = BT_PROFILE_QUICK_REPEATS;
    pp.warmup = 1;
    pp.transfer_bytes = (size_t)1 << 20;
    pp.handoff_repeats = 0; /* only cuts are chosen from it: nothing is simulated */
    pp.precision = precision; /* the engine's: bf16 costs are not f32's */
    bt_status st = bt_profile_measure(g, NULL, &pp, out);
    if (st != BT_OK) return bt_error_context(st, "partition: profile (measuring the layers)");
    return BT_OK;
}
