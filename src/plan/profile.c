/* plan/profile.c: the cost table's queries (see profile.h): kinds, times, transfer rates, the
 * check that a profile belongs to a graph, and freeing. Pure: no device, no file. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph_internal.h"
#include "plan/profile.h"

void bt_profile_destroy(bt_profile *p)
{
    if (!p) return;
    for (int l = 0; p->layers && l < p->n_layers; l++) {
        free(p->layers[l].name);
        free(p->layers[l].op);
        free(p->layers[l].act);
    }
    free(p->layers);
    free(p->times);
    free(p->transfers);
    free(p->links);
    free(p->model);
    free(p);
}

int bt_profile_kind_index(const bt_profile *p, const char *kind)
{
    for (int k = 0; k < p->n_kinds; k++)
        if (strcmp(p->kinds[k], kind) == 0) return k;
    return -1;
}

const bt_profile_time *bt_profile_time_at(const bt_profile *p, int layer, int kind)
{
    return &p->times[(size_t)layer * (size_t)p->n_kinds + (size_t)kind];
}

void bt_profile_device_kind(const char *device, char *kind, size_t size)
{
    size_t n = strcspn(device, ":");
    if (n >= size) n = size - 1;
    memcpy(kind, device, n);
    kind[n] = '\0';
}

double bt_profile_rate(const bt_profile *p, const char *from, const char *to)
{
    char kf[16], kt[16], a[16], b[16];
    double slowest = 0;
    bt_profile_device_kind(from, kf, sizeof kf);
    bt_profile_device_kind(to, kt, sizeof kt);
    for (int i = 0; i < p->n_transfers; i++) {
        const bt_profile_transfer *t = &p->transfers[i];
        if (strcmp(t->from, from) == 0 && strcmp(t->to, to) == 0) return t->gb_per_s;
        bt_profile_device_kind(t->from, a, sizeof a);
        bt_profile_device_kind(t->to, b, sizeof b);
        if (strcmp(a, kf) == 0 && strcmp(b, kt) == 0 && (slowest == 0 || t->gb_per_s < slowest))
            slowest = t->gb_per_s;
    }
    return slowest;
}

bt_status bt_profile_check_graph(const bt_profile *p, const bt_graph *g, const char *what)
{
    const char *src = what ? what : "the profile";
    if (p->n_layers != g->n_layers)
        return bt_error(BT_ERR_MODEL, "%s has %d layers but the model has %d: profile this model again",
                        src, p->n_layers, g->n_layers);
    for (int l = 0; l < g->n_layers; l++) {
        const bt_layer *ly = &g->layers[l];
        if (strcmp(p->layers[l].name, ly->name) != 0 || strcmp(p->layers[l].op, ly->op_name) != 0)
            return bt_error(BT_ERR_MODEL,
                            "%s: layer %d is '%s' (%s) but the model's is '%s' (%s): profile this "
                            "model again",
                            src, l, p->layers[l].name, p->layers[l].op, ly->name, ly->op_name);
    }
    return BT_OK;
}

bt_dtype bt_profile_precision(const bt_profile *p) { return p ? p->precision : BT_F32; }

bt_status bt_profile_check_precision(const bt_profile *p, bt_dtype precision, const char *what)
{
    const char *src = what ? what : "the profile";
    if (!p) return bt_error(BT_ERR_INVALID_ARG, "bt_profile_check_precision: NULL profile");
    if (p->precision != precision)
        return bt_error(BT_ERR_MODEL,
                        "%s was measured at precision %s but the model computes at %s: its costs do not "
                        "price this model (profile it again at %s: baton profile takes train.precision)",
                        src, bt_dtype_name(p->precision), bt_dtype_name(precision), bt_dtype_name(precision));
    return BT_OK;
}

int bt_profile_link_model(const bt_profile *p, double *latency_ms, double *gb_per_s)
{
    *latency_ms = 0;
    *gb_per_s = 0;
    int found = 0;
    for (int i = 0; p && i < p->n_links; i++) {
        const bt_profile_link *a = &p->links[i];
        int seen = 0; /* each pair once, at its first sample */
        for (int j = 0; j < i && !seen; j++)
            seen = p->links[j].from_rank == a->from_rank && p->links[j].to_rank == a->to_rank;
        if (seen) continue;
        const bt_profile_link *lo = a, *hi = a;
        for (int j = i; j < p->n_links; j++) {
            const bt_profile_link *b = &p->links[j];
            if (b->from_rank != a->from_rank || b->to_rank != a->to_rank) continue;
            if (b->bytes < lo->bytes) lo = b;
            if (b->bytes > hi->bytes) hi = b;
        }
        double lat = lo->oneway_ms, bw;
        if (hi->bytes > lo->bytes && hi->oneway_ms > lo->oneway_ms)
            bw = (double)(hi->bytes - lo->bytes) / (hi->oneway_ms - lo->oneway_ms) / 1e6;
        else
            bw = (double)hi->bytes / hi->oneway_ms / 1e6;
        if (!found || lat > *latency_ms) *latency_ms = lat;
        if (!found || bw < *gb_per_s) *gb_per_s = bw;
        found = 1;
    }
    return found;
}

double bt_profile_link_ms(double latency_ms, double gb_per_s, double bytes)
{
    if (bytes <= 0) return 0;
    return latency_ms + (gb_per_s > 0 ? bytes / (gb_per_s * 1e6) : 0);
}
