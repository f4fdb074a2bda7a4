/* tests/test_transfer.c: stage-to-stage transfers on the CPU. Every path a boundary can take must
 * move the same bytes: the local path (one copy into the receiver's buffer, read in place), the
 * staged path forced on (messages cut into chunks through two staging buffers, with a chunk size
 * that divides neither the messages nor a float), and the synchronous host path must give
 * bit-identical losses and parameters, for a residual that skips stages, under GPipe and 1F1B.
 * The per-boundary statistics must name the path and count every message and byte. On a GPU the
 * same executor code orders the copies with events (tests/test_cuda.c runs it there). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "baton.h"
#include "bt_test.h"
#include "engine_runs.h"

static void train_with(bt_transfer_mode mode, const char *chunk, int stages, int m, bt_schedule_kind kind,
                       run_result *r)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, stages, m, kind);
    p.transfer = mode;
    if (chunk) setenv("BATON_STAGING_CHUNK", chunk, 1);
    run_three_steps(g, &p, r);
    unsetenv("BATON_STAGING_CHUNK");
    bt_graph_destroy(g);
}

static void test_paths_move_the_same_bytes(void)
{
    const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B};
    const int stage_counts[] = {2, 3, 4};
    for (int k = 0; k < 2; k++)
        for (int si = 0; si < 3; si++) {
            int stages = stage_counts[si];
            run_result local, staged, staged_big, host;
            train_with(BT_TRANSFER_AUTO, NULL, stages, 4, kinds[k], &local);
            train_with(BT_TRANSFER_STAGED, "100", stages, 4, kinds[k], &staged);
            train_with(BT_TRANSFER_STAGED, NULL, stages, 4, kinds[k], &staged_big);
            train_with(BT_TRANSFER_HOST, NULL, stages, 4, kinds[k], &host);
            int same = identical(&local, &staged) && identical(&local, &staged_big) && identical(&local, &host);
            if (!same)
                printf("\n  %s p=%d: losses local %.9g staged %.9g staged(4 MiB) %.9g host %.9g\n",
                       bt_schedule_name(kinds[k]), stages, local.loss[2], staged.loss[2], staged_big.loss[2],
                       host.loss[2]);
            CU_ASSERT(same);
            CU_ASSERT(local.loss[2] < local.loss[0]);
            free_result(&local);
            free_result(&staged);
            free_result(&staged_big);
            free_result(&host);
        }
}

/* A chunk size under 64 bytes, or not a number, is ignored (the default is used), not obeyed. */
static void test_bad_chunk_setting_ignored(void)
{
    run_result a, b;
    train_with(BT_TRANSFER_STAGED, "7", 3, 2, BT_SCHEDULE_1F1B, &a);
    train_with(BT_TRANSFER_STAGED, "lots", 3, 2, BT_SCHEDULE_1F1B, &b);
    CU_ASSERT(identical(&a, &b));
    free_result(&a);
    free_result(&b);
}

/* What stage `from` sends downstream per micro-batch, by the engine's own account. */
static int64_t sent_bytes(const bt_engine *e, int from)
{
    bt_stage_info info;
    CU_ASSERT_FATAL(bt_engine_stage(e, from, &info) == BT_OK);
    return (int64_t)info.send_bytes;
}

static void check_boundaries(bt_transfer_mode mode, bt_transfer_path want)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 3, 4, BT_SCHEDULE_1F1B);
    p.transfer = mode;
    bt_engine *e = NULL;
    CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
    const int steps = 2;
    for (int s = 0; s < steps; s++) {
        batch_data b;
        make_batch(&b, 7 + (unsigned)s);
        CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
    }
    int n = bt_engine_num_boundaries(e);
    /* stage 0 -> 1, 0 -> 2 (the residual), 1 -> 2, each both ways */
    CU_ASSERT_EQUAL(n, 6);
    int64_t act_bytes[3] = {0};
    for (int i = 0; i < n; i++) {
        bt_boundary_stats b;
        CU_ASSERT_FATAL(bt_engine_boundary(e, i, &b) == BT_OK);
        CU_ASSERT_EQUAL(b.path, want);
        CU_ASSERT_EQUAL(b.grad, b.from > b.to);
        CU_ASSERT_EQUAL(b.messages, (int64_t)steps * 4);
        CU_ASSERT(fabs(b.bytes - (double)b.messages * (double)b.message_bytes) < 0.5);
        CU_ASSERT(b.message_bytes > 0);
        CU_ASSERT(b.copy_ms > 0); /* timed, even on the CPU (clock reads around the copies) */
        if (!b.grad) act_bytes[b.from] += (int64_t)b.message_bytes;
    }
    /* what a stage sends per micro-batch is what its boundaries carry forward */
    for (int s = 0; s < 2; s++) CU_ASSERT_EQUAL(act_bytes[s], sent_bytes(e, s));
    bt_boundary_stats none;
    CU_ASSERT_EQUAL(bt_engine_boundary(e, n, &none), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_engine_boundary(e, -1, &none), BT_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(bt_transfer_path_name(want),
                           want == BT_PATH_LOCAL ? "local" : want == BT_PATH_STAGED ? "staged" : "host");
    bt_engine_destroy(e);
    bt_graph_destroy(g);
}

static void test_boundary_statistics(void)
{
    check_boundaries(BT_TRANSFER_AUTO, BT_PATH_LOCAL);
    check_boundaries(BT_TRANSFER_STAGED, BT_PATH_STAGED);
    check_boundaries(BT_TRANSFER_HOST, BT_PATH_HOST);
}

/* Activations that arrive over a device path are read in place, so the receiving stage's slots do
 * not hold a second copy: its activation memory is smaller than with the host path by exactly
 * one copy of what it receives per slot. */
static void test_received_values_take_no_slot_space(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    size_t act[2][3];
    int slots_seen = 0;
    for (int mode = 0; mode < 2; mode++) {
        engine_params(&p, 3, 4, BT_SCHEDULE_GPIPE);
        p.transfer = mode ? BT_TRANSFER_HOST : BT_TRANSFER_AUTO;
        bt_engine *e = NULL;
        CU_ASSERT_FATAL(bt_engine_create(g, &p, &e) == BT_OK);
        batch_data b;
        make_batch(&b, 3);
        CU_ASSERT_FATAL(bt_engine_train_step(e, b.feeds, 2, NULL) == BT_OK);
        for (int s = 0; s < 3; s++) {
            bt_memory_stats m;
            CU_ASSERT_FATAL(bt_engine_memory(e, s, &m) == BT_OK);
            act[mode][s] = m.activation_peak;
            slots_seen = m.peak_microbatches;
        }
        bt_engine_destroy(e);
    }
    CU_ASSERT_EQUAL(slots_seen, 4); /* GPipe keeps every micro-batch */
    CU_ASSERT_EQUAL(act[0][0], act[1][0]); /* stage 0 receives nothing */
    for (int s = 1; s < 3; s++) CU_ASSERT(act[0][s] < act[1][s]);
    bt_graph_destroy(g);
}

/* NCCL joins GPU stages on different ranks: forcing it in one process is a usage error naming the
 * flag, never a silent fallback to another path. The paths across processes have their names. */
static void test_nccl_refused_in_one_process(void)
{
    bt_graph *g = residual_graph();
    bt_engine_params p;
    engine_params(&p, 2, 4, BT_SCHEDULE_1F1B);
    p.transfer = BT_TRANSFER_NCCL;
    bt_engine *e = NULL;
    CU_ASSERT_EQUAL(bt_engine_create(g, &p, &e), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "--transfer nccl"));
    CU_ASSERT_STRING_EQUAL(bt_transfer_path_name(BT_PATH_MPI), "mpi");
    CU_ASSERT_STRING_EQUAL(bt_transfer_path_name(BT_PATH_MPI_STAGED), "mpi-staged");
    CU_ASSERT_STRING_EQUAL(bt_transfer_path_name(BT_PATH_NCCL), "nccl");
    bt_graph_destroy(g);
}

/* cuda:local is the GPU of the rank's index on its machine under a launcher, cuda:0 without one. */
static void test_cuda_local_device(void)
{
    char kind[16];
    int index = -1;
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("MPI_LOCALRANKID");
    unsetenv("SLURM_LOCALID");
    CU_ASSERT_EQUAL(bt_device_parse("cuda:local", kind, sizeof kind, &index), BT_OK);
    CU_ASSERT_STRING_EQUAL(kind, "cuda");
    CU_ASSERT_EQUAL(index, 0);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    CU_ASSERT_EQUAL(bt_device_parse("cuda:local", kind, sizeof kind, &index), BT_OK);
    CU_ASSERT_EQUAL(index, 3);
    CU_ASSERT_EQUAL(bt_device_parse("cuda:2", kind, sizeof kind, &index), BT_OK);
    CU_ASSERT_EQUAL(index, 2); /* an index is the same GPU on every rank */
    CU_ASSERT_EQUAL(bt_device_parse("cpu:local", kind, sizeof kind, &index), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_device_parse("cuda:locale", kind, sizeof kind, &index), BT_ERR_INVALID_ARG);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"local, staged and host paths move the same bytes", test_paths_move_the_same_bytes},
        {"a bad staging chunk setting is ignored", test_bad_chunk_setting_ignored},
        {"boundary statistics name the path and count messages", test_boundary_statistics},
        {"received values take no slot space", test_received_values_take_no_slot_space},
        {"--transfer nccl is refused in one process", test_nccl_refused_in_one_process},
        {"cuda:local is the launcher's local rank", test_cuda_local_device},
        {NULL, NULL}};
    return bt_test_main("transfer", cases);
}
