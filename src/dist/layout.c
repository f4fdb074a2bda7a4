/* dist/layout.c: which (replica, stage) a rank runs. Ranks are numbered replica-major, so the P
 * stages of one replica are P consecutive ranks (rank = replica x P + stage): a hostfile that lists
 * each machine's slots together keeps a pipeline's boundaries on one machine where it can. Pure
 * arithmetic, built with or without MPI. */
#include <stdlib.h>

#include "core/error.h"
#include "dist/dist.h"

bt_status bt_dist_layout_make(int size, int rank, int data, int stages, bt_dist_layout *out)
{
    if (size < 1 || stages < 1 || rank < 0 || rank >= size || data < 0)
        return bt_error(BT_ERR_INVALID_ARG, "bad layout: N = %d ranks, rank %d, D = %d, P = %d", size, rank,
                        data, stages);
    if (data == 0) {
        if (size % stages != 0)
            return bt_error(BT_ERR_INVALID_ARG,
                            "%d ranks (N) do not divide among the model's %d pipeline stages (P): N must be "
                            "D x P for some number of data-parallel replicas D",
                            size, stages);
        data = size / stages;
    }
    if ((long long)data * stages != size)
        return bt_error(BT_ERR_INVALID_ARG,
                        "the job has N = %d ranks but D x P = %d x %d = %lld: start it with mpirun -np %lld, "
                        "or change --dp / parallel.data",
                        size, data, stages, (long long)data * stages, (long long)data * stages);
    out->size = size;
    out->rank = rank;
    out->data = data;
    out->stages = stages;
    out->replica = rank / stages;
    out->stage = rank % stages;
    out->local_size = bt_dist_local_size();
    return BT_OK;
}

int bt_dist_rank_of(const bt_dist_layout *l, int replica, int stage)
{
    return replica * l->stages + stage;
}

static int env_int(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    long n = strtol(v, &end, 10);
    return (*end == '\0' && n > 0 && n < 1 << 24) ? (int)n : 0;
}

int bt_dist_launched(const char **name)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "PMI_SIZE", NULL};
    for (int i = 0; vars[i]; i++) {
        int n = env_int(vars[i]);
        if (n > 0) {
            if (name) *name = vars[i];
            return n;
        }
    }
    /* srun without an MPI plugin variable: SLURM_STEP_NUM_TASKS is the step's task count */
    int n = getenv("SLURM_PROCID") ? env_int("SLURM_STEP_NUM_TASKS") : 0;
    if (n > 0 && name) *name = "SLURM_STEP_NUM_TASKS";
    return n;
}

int bt_dist_launched_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long n = strtol(v, &end, 10);
        if (*end == '\0' && n >= 0 && n < 1 << 24) return (int)n;
    }
    return 0;
}

int bt_dist_local_size(void)
{
    int n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (n < 1) n = env_int("MPI_LOCALNRANKS");
    if (n < 1) n = env_int("SLURM_NTASKS_PER_NODE");
    return n < 1 ? 1 : n;
}
