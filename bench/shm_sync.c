/* bench/shm_sync.c: what the shm path of the data-parallel reduction (src/exec/dist_shm.c) costs
 * against MPI on this machine, measured in the same run, alternating: (1) synchronisation alone:
 * a flag handshake in an MPI shared window (each rank stores a generation with release order
 * after MPI_Win_sync and waits for every peer's, as dist_shm.c waits per bucket) against
 * MPI_Barrier; (2) summing N floats over the ranks: reduce-scatter and all-gather by loads in the
 * window (the shm path) against MPI_Allreduce in place (the mpi path). Medians of `reps` rounds,
 * microseconds. Standalone (no libbaton): bench/compare_shm_sync.sh builds it with mpicc.
 * Usage: mpirun -np 2 shm_sync [N floats, default 1863690: the MLP 784-1024-1024-10] [reps] */
#include <mpi.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef float v16f __attribute__((vector_size(64)));

static void sum2(float *dst, float *const *src, int D, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16f acc, x;
        memcpy(&acc, src[0] + i, sizeof acc);
        for (int q = 1; q < D; q++) {
            memcpy(&x, src[q] + i, sizeof x);
            acc += x;
        }
        memcpy(dst + i, &acc, sizeof acc);
    }
    for (; i < n; i++) {
        float a = src[0][i];
        for (int q = 1; q < D; q++) a += src[q][i];
        dst[i] = a;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, D;
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &me);
    MPI_Comm_size(node, &D);
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1863690;
    int reps = argc > 2 ? atoi(argv[2]) : 40;
    size_t slice = ((n + (size_t)D - 1) / (size_t)D + 15) / 16 * 16;
    MPI_Win win;
    char *mine;
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true");
    MPI_Win_allocate_shared((MPI_Aint)(4 * 64 + n * sizeof(float) + 64), 1, info, MPI_COMM_WORLD, &mine, &win);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    char **base = calloc((size_t)D, sizeof *base);
    for (int q = 0; q < D; q++) {
        MPI_Aint sz;
        int du;
        MPI_Win_shared_query(win, q, &sz, &du, &base[q]);
    }
    memset(mine, 0, 4 * 64);
    float *mpi_buf = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) mpi_buf[i] = ((float *)(mine + 4 * 64))[i] = (float)((i + (size_t)me) % 7);
    MPI_Win_sync(win);
    MPI_Barrier(MPI_COMM_WORLD);
    double *t_flag = calloc((size_t)reps, sizeof(double)), *t_bar = calloc((size_t)reps, sizeof(double));
    double *t_ws = calloc((size_t)reps, sizeof(double));
    double *t_shm = calloc((size_t)reps, sizeof(double)), *t_mpi = calloc((size_t)reps, sizeof(double));
    uint64_t gen = 0;
#define FLAG(q, k) ((_Atomic uint64_t *)(void *)(base[q] + (k) * 64))
#define WAIT_ALL(k)                                                                        \
    do {                                                                                   \
        for (int q = 0; q < D; q++)                                                        \
            for (int spin = 0; q != me && atomic_load_explicit(FLAG(q, k), memory_order_acquire) < gen; spin++) \
                if (spin > 512) sched_yield(); /* as dist_shm.c's wait_flag */             \
        MPI_Win_sync(win);                                                                 \
    } while (0)
#define PUBLISH(k)                                                                         \
    do {                                                                                   \
        MPI_Win_sync(win);                                                                 \
        atomic_store_explicit(FLAG(me, k), gen, memory_order_release);                     \
    } while (0)
    for (int r = 0; r < reps; r++) {
        /* synchronisation alone, 100 rounds each */
        double t0 = now_us();
        for (int k = 0; k < 100; k++) {
            gen++;
            PUBLISH(0);
            WAIT_ALL(0);
        }
        t_flag[r] = (now_us() - t0) / 100;
        t0 = now_us();
        for (int k = 0; k < 100; k++) MPI_Barrier(node);
        t_bar[r] = (now_us() - t0) / 100;
        t0 = now_us();
        for (int k = 0; k < 100; k++) MPI_Win_sync(win);
        t_ws[r] = (now_us() - t0) / 100;
        /* the reduction: shm (ready, reduce own slice, reduced, gather, done) against MPI */
        MPI_Barrier(node);
        t0 = now_us();
        gen++;
        PUBLISH(1);
        WAIT_ALL(1);
        float *src[64];
        for (int q = 0; q < D; q++) src[q] = (float *)(base[q] + 4 * 64) + (size_t)me * slice;
        size_t lo = (size_t)me * slice, cnt = lo >= n ? 0 : (n - lo < slice ? n - lo : slice);
        sum2(src[me], src, D, cnt);
        PUBLISH(2);
        WAIT_ALL(2);
        for (int q = 0; q < D; q++) {
            if (q == me) continue;
            size_t ql = (size_t)q * slice, qc = ql >= n ? 0 : (n - ql < slice ? n - ql : slice);
            memcpy((float *)(mine + 4 * 64) + ql, (float *)(base[q] + 4 * 64) + ql, qc * sizeof(float));
        }
        PUBLISH(3);
        WAIT_ALL(3);
        t_shm[r] = now_us() - t0;
        MPI_Barrier(node);
        t0 = now_us();
        MPI_Allreduce(MPI_IN_PLACE, mpi_buf, (int)n, MPI_FLOAT, MPI_SUM, node);
        t_mpi[r] = now_us() - t0;
    }
    double f = median(t_flag, reps), b = median(t_bar, reps), s = median(t_shm, reps), m = median(t_mpi, reps);
    double ws = median(t_ws, reps);
    if (me == 0)
        printf("%d ranks, %zu floats (%.1f MB), medians of %d rounds:\n"
               "  sync:   flag handshake %.2f us, MPI_Barrier %.2f us (barrier / flags %.2fx); one MPI_Win_sync %.3f us\n"
               "  reduce: shm loads %.0f us, MPI_Allreduce %.0f us (mpi / shm %.2fx)\n",
               D, n, (double)n * 4 / 1e6, reps, f, b, b / f, ws, s, m, m / s);
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    MPI_Finalize();
    return 0;
}
