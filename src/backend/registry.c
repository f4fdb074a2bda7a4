/* backend/registry.c: the one place that knows which backends exist in this build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "backend/backend.h"
#include "core/error.h"

#ifdef BATON_HAVE_CUDA
const bt_backend *bt_cuda_backend(void);
#endif

const bt_backend *bt_backend_find(const char *kind)
{
    if (strcmp(kind, "cpu") == 0) return bt_cpu_backend();
#ifdef BATON_HAVE_CUDA
    if (strcmp(kind, "cuda") == 0) return bt_cuda_backend();
#else
    if (strcmp(kind, "cuda") == 0) {
        bt_error(BT_ERR_UNSUPPORTED, "device kind 'cuda': this baton was built without CUDA");
        return NULL;
    }
#endif
    bt_error(BT_ERR_INVALID_ARG, "unknown device kind '%s' (cpu or cuda)", kind);
    return NULL;
}

/* cuda:local: this process's index among the ranks a launcher started on its machine (Open MPI,
 * MPICH, Slurm), so one command line gives each rank of a machine its own GPU; 0 in one process.
 * The launchers' variables are read here rather than in src/dist because a device name is parsed
 * wherever a device is opened (engine, profile), below the code that knows about jobs. */
static int local_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long n = strtol(v, &end, 10);
        if (*end == '\0' && n >= 0 && n <= 1023) return (int)n;
    }
    return 0;
}

bt_status bt_device_parse(const char *spec, char *kind, size_t kind_size, int *index)
{
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n == 0 || n >= kind_size)
        return bt_error(BT_ERR_INVALID_ARG, "device '%s': expected KIND:INDEX like cpu:0", spec);
    memcpy(kind, spec, n);
    kind[n] = '\0';
    *index = 0;
    if (colon && strcmp(colon, ":local") == 0 && n == 4 && strncmp(spec, "cuda", 4) == 0) {
        *index = local_rank();
        return BT_OK;
    }
    if (colon) {
        char *end = NULL;
        long v = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || v < 0 || v > 1023)
            return bt_error(BT_ERR_INVALID_ARG, "device '%s': index must be 0 to 1023", spec);
        *index = (int)v;
    }
    if (strcmp(kind, "cpu") != 0 && strcmp(kind, "cuda") != 0)
        return bt_error(BT_ERR_INVALID_ARG, "device '%s': unknown kind '%s' (cpu or cuda)", spec,
                        kind);
    return BT_OK;
}
