/* cli/run_job_summary.c: the rows of rank 0's summary that only a job across processes has, beside
 * the per-rank table of run_dist.c: the boundaries of every replica but 0 (replica 0's are the
 * summary's own boundary rows), and one row per rank for its stage's gradient reductions over the
 * replicas (path, reductions, bytes, GB/s, and the time hidden behind the backward work: the part
 * of each bucket's reduction before STEP began to wait for it). Text and JSON (the "job" record).
 * Reads the statistics bt_engine_dist_gather_stats collected; prints only. */
#include <stdio.h>

#include "cli/run_dist.h"
#include "exec/engine_dist.h"

static double gb_per_s(double bytes, double ms) { return ms > 0 ? bytes / ms / 1e6 : 0; }

void bt_cli_job_rows_text(const bt_engine *e)
{
    const bt_dist_layout *l = bt_engine_dist_layout(e);
    if (!l) return;
    int shown = 0;
    for (int q = 1; q < l->data; q++)
        for (int i = 0; i < bt_engine_num_boundaries(e); i++) {
            bt_boundary_stats b;
            char per[32], rate[32] = "-";
            if (bt_engine_dist_replica_boundary(e, q, i, &b) != BT_OK || b.messages == 0) continue;
            if (!shown++)
                printf("  %-7s %-9s %-11s %-7s %13s %12s\n", "replica", "boundary", "carries", "path", "per message",
                       "rate");
            if (b.copy_ms > 0) snprintf(rate, sizeof rate, "%.2f GB/s", gb_per_s(b.bytes, b.copy_ms));
            printf("  %-7d %d -> %-4d %-11s %-7s %13s %12s\n", q, b.from, b.to, b.grad ? "gradients" : "activations",
                   bt_transfer_path_name(b.path), bt_cli_bytes((double)b.message_bytes, per, sizeof per), rate);
        }
    shown = 0;
    for (int r = 0; r < l->size; r++) {
        bt_dist_reduce_stats s;
        char bytes[32];
        if (bt_engine_dist_rank_reduce(e, r, &s) != BT_OK || s.reductions == 0) continue;
        if (!shown++)
            printf("  gradient reductions over each stage's %d replicas (hidden: before STEP waited for them):\n"
                   "  %-5s %-5s %-14s %-10s %8s %11s %10s %10s %9s\n",
                   l->data, "rank", "stage", "collective", "path", "buckets", "bytes", "GB/s", "total ms", "hidden");
        printf("  %-5d %-5d %-14s %-10s %8lld %11s %10.2f %10.3f %8.1f%%\n", r, r % l->stages,
               s.scatter ? "reduce-scatter" : "all-reduce", bt_transfer_path_name(s.path), (long long)s.reductions,
               bt_cli_bytes(s.bytes, bytes, sizeof bytes), gb_per_s(s.bytes, s.total_ms), s.total_ms,
               s.total_ms > 0 ? 100 * s.hidden_ms / s.total_ms : 0.0);
    }
}

void bt_cli_job_rows_json(const bt_engine *e)
{
    const bt_dist_layout *l = bt_engine_dist_layout(e);
    if (!l) return;
    printf(", \"boundaries\": [");
    int n = 0;
    for (int q = 0; q < l->data; q++)
        for (int i = 0; i < bt_engine_num_boundaries(e); i++) {
            bt_boundary_stats b;
            if (bt_engine_dist_replica_boundary(e, q, i, &b) != BT_OK) continue;
            printf("%s{\"replica\": %d, \"from\": %d, \"to\": %d, \"what\": \"%s\", \"path\": \"%s\", "
                   "\"message_bytes\": %zu, \"messages\": %lld, \"gb_per_s\": %.4f}",
                   n++ ? ", " : "", q, b.from, b.to, b.grad ? "gradients" : "activations",
                   bt_transfer_path_name(b.path), b.message_bytes, (long long)b.messages,
                   gb_per_s(b.bytes, b.copy_ms));
        }
    printf("], \"collectives\": [");
    n = 0;
    for (int r = 0; r < l->size; r++) {
        bt_dist_reduce_stats s;
        if (bt_engine_dist_rank_reduce(e, r, &s) != BT_OK || s.reductions == 0) continue;
        printf("%s{\"rank\": %d, \"replica\": %d, \"stage\": %d, \"collective\": \"%s\", \"path\": \"%s\", "
               "\"reductions\": %lld, \"bytes\": %.0f, \"gb_per_s\": %.4f, \"total_ms\": %.4f, \"hidden_ms\": %.4f, "
               "\"wait_ms\": %.4f}",
               n++ ? ", " : "", r, r / l->stages, r % l->stages, s.scatter ? "reduce-scatter" : "all-reduce",
               bt_transfer_path_name(s.path), (long long)s.reductions, s.bytes, gb_per_s(s.bytes, s.total_ms), s.total_ms, s.hidden_ms, s.wait_ms);
    }
    printf("]");
}
