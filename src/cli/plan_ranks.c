/* cli/plan_ranks.c: `baton plan MODEL.yaml --profile P.json --ranks N`: the layout of a job of N
 * ranks (docs/distributed.md), priced from a profile whose links between ranks `baton profile`
 * measured under mpirun. Every split N = D x P (D data-parallel replicas of a P-stage pipeline,
 * each stage on its own rank) is planned and simulated: the P stages cut optimally for a
 * replica's share of the batch (B / D samples), every boundary paying the link (latency + bytes /
 * bandwidth per message, each way) on top of the same-process transfer (plan/placement.c), and,
 * with D > 1, each stage's gradient all-reduce over its D replicas priced as a ring over the same
 * link: per bucket of at most 4 MiB (BATON_DP_BUCKET's default), 2 (D - 1) latencies, plus
 * 2 (D - 1) / D x the stage's gradient bytes / bandwidth. The all-reduce is added to the simulated
 * step in full (the engine overlaps part of it with the last backward, so this is an upper
 * bound). The split with the shortest step wins; a slow link moves the choice towards fewer
 * boundaries between ranks (more replicas, fewer stages), a fast one towards whatever computes best.
 * Prints a table of the splits, the choice, the command line and the parallel: YAML (or --json). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/plan_ranks.h"
#include "core/error.h"

#define BUCKET_BYTES ((double)(4 << 20))

typedef struct split {
    int D, P;
    int ok;
    char why[160];             /* !ok: why the split cannot run */
    bt_placement pl;
    double allreduce_ms, step_ms, samples_per_s;
    int boundaries;            /* pipeline boundaries between ranks per replica */
} split;

/* A ring all-reduce of `bytes` over D ranks, bucketed as the engine does. */
static double ring_ms(double bytes, int D, double latency_ms, double gb_per_s)
{
    if (D < 2 || bytes <= 0) return 0;
    double buckets = ceil(bytes / BUCKET_BYTES);
    return buckets * 2.0 * (D - 1) * latency_ms + 2.0 * (D - 1) / D * bytes / (gb_per_s * 1e6);
}

static void plan_split(const bt_profile *p, const bt_placement_params *base, int D, int P, split *s)
{
    memset(s, 0, sizeof *s);
    s->D = D;
    s->P = P;
    if (p->batch % D != 0) {
        snprintf(s->why, sizeof s->why, "the batch of %lld does not split into %d replicas", (long long)p->batch, D);
        return;
    }
    char devices[BT_MAX_STAGES * 8] = "";
    for (int k = 0; k < P; k++) /* each rank its own device */
        snprintf(devices + strlen(devices), sizeof devices - strlen(devices), "%s%s:%d", k ? "," : "",
                 p->kinds[0], k);
    bt_placement_params lp = *base;
    lp.devices = devices;
    lp.permute = 0;
    lp.cross_rank = P > 1;
    lp.batch = p->batch / D;
    bt_status st = bt_placement_plan(p, &lp, &s->pl);
    if (st != BT_OK) {
        snprintf(s->why, sizeof s->why, "%s", bt_last_error());
        return;
    }
    double lat = 0, bw = 0;
    bt_profile_link_model(p, &lat, &bw);
    for (int k = 0; k < P; k++) { /* the slowest stage's reduction holds STEP back */
        double ms = ring_ms((double)s->pl.stage[k].params * 4.0, D, lat, bw);
        if (ms > s->allreduce_ms) s->allreduce_ms = ms;
    }
    s->step_ms = s->pl.step_ms + s->allreduce_ms;
    s->samples_per_s = s->step_ms > 0 ? (double)p->batch * 1000.0 / s->step_ms : 0;
    s->boundaries = P - 1;
    s->ok = 1;
}

int bt_cli_plan_ranks(const bt_model *m, const bt_profile *p, const bt_placement_params *base, int ranks, int json)
{
    (void)m;
    double lat = 0, bw = 0;
    if (!bt_profile_link_model(p, &lat, &bw)) {
        fprintf(stderr, "baton plan: --ranks needs the link between ranks, and this profile has none: measure it "
                        "under mpirun (mpirun -np 2 baton profile MODEL.yaml)\n");
        return BT_EXIT_USAGE;
    }
    split *all = calloc((size_t)ranks + 1, sizeof *all);
    if (!all) return bt_cli_fail("plan", bt_error(BT_ERR_NOMEM, "plan: out of memory"));
    int n = 0, best = -1;
    for (int P = 1; P <= ranks; P++) {
        if (ranks % P != 0 || P > p->n_layers || P > BT_MAX_STAGES) continue;
        plan_split(p, base, ranks / P, P, &all[n]);
        if (all[n].ok && (best < 0 || all[n].step_ms < all[best].step_ms)) best = n;
        n++;
    }
    if (json) {
        json_t *rows = json_array();
        for (int i = 0; i < n; i++) {
            const split *s = &all[i];
            json_array_append_new(
                rows, s->ok ? json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:s}", "data", s->D, "stages", s->P,
                                        "rank_boundaries", s->boundaries, "pipeline_step_ms", s->pl.step_ms,
                                        "allreduce_ms", s->allreduce_ms, "step_ms", s->step_ms, "samples_per_s",
                                        s->samples_per_s, "yaml", s->pl.yaml)
                            : json_pack("{s:i, s:i, s:s}", "data", s->D, "stages", s->P, "refused", s->why));
        }
        json_t *j = json_pack("{s:i, s:{s:f, s:f}, s:o, s:o}", "ranks", ranks, "link", "latency_us", lat * 1e3,
                              "gb_per_s", bw, "splits", rows, "best",
                              best >= 0 ? json_pack("{s:i, s:i}", "data", all[best].D, "stages", all[best].P)
                                        : json_null());
        if (j) {
            json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
            printf("\n");
        }
        json_decref(j);
    } else {
        printf("a job of %d ranks, link between ranks: latency %.1f us, %.3f GB/s (from the profile's ping-pongs)\n",
               ranks, lat * 1e3, bw);
        printf("  %-4s %-6s %-16s %14s %13s %10s %12s\n", "D", "P", "rank boundaries", "pipeline ms", "all-reduce ms",
               "step ms", "samples/s");
        for (int i = 0; i < n; i++) {
            const split *s = &all[i];
            if (!s->ok) {
                printf("  %-4d %-6d cannot run: %s\n", s->D, s->P, s->why);
                continue;
            }
            printf("  %-4d %-6d %-16d %14.3f %13.3f %10.3f %12.0f%s\n", s->D, s->P, s->boundaries, s->pl.step_ms,
                   s->allreduce_ms, s->step_ms, s->samples_per_s, i == best ? "  <- best" : "");
        }
        printf("  (each boundary pays the link once per micro-batch each way; the all-reduce is a bucketed ring over "
               "the link, counted in full)\n");
        if (best >= 0) {
            const split *s = &all[best];
            printf("\nbest: D = %d replicas x P = %d stages:  mpirun -np %d baton run MODEL.yaml --dp %d\n%s", s->D,
                   s->P, ranks, s->D, s->pl.yaml);
        }
    }
    int rc = BT_EXIT_OK;
    if (best < 0) {
        fprintf(stderr, "baton plan: no split of %d ranks into D x P can run this model (see above)\n", ranks);
        rc = BT_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++) bt_placement_clear(&all[i].pl);
    free(all);
    return rc;
}
