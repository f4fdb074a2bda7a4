/* cuda/devices.h: what the machine's CUDA GPUs are: count, name, memory, compute capability and
 * which pairs can reach each other's memory directly (peer access). Plain C with no CUDA types,
 * so the CLI (`baton devices`) and the planner can include it; the functions exist only in builds
 * with CUDA (BATON_HAVE_CUDA). Querying free memory creates a CUDA context on each device asked
 * about; nothing else here does. */
#ifndef BT_CUDA_DEVICES_H
#define BT_CUDA_DEVICES_H

#include <stddef.h>

#include "baton/status.h"

typedef struct bt_gpu_info {
    int index;
    char name[256];         /* "NVIDIA H100 80GB HBM3" */
    int cc_major, cc_minor; /* compute capability: 9, 0 for sm_90 */
    int multiprocessors;
    size_t total_bytes;     /* device memory */
    size_t free_bytes;      /* free now (cudaMemGetInfo) */
    char pci_bus_id[32];    /* "0000:1b:00.0" */
    char cudnn[160];        /* "cuDNN 9.1.0", "cuDNN unusable (...): conv2d takes the GEMM path",
                             * or "no cuDNN in this build": what conv2d will use there */
} bt_gpu_info;

/* Number of usable GPUs in *n. Without any (no driver, no device: CUDA errors 35 and 100)
 * returns BT_ERR_UNSUPPORTED with a message saying so and the CUDA error string, *n = 0; other
 * CUDA failures give BT_ERR_BACKEND. */
bt_status bt_gpu_count(int *n);

/* Describes GPU index (0 <= index < bt_gpu_count). Leaves the calling thread's current device
 * as it was. */
bt_status bt_gpu_info_get(int index, bt_gpu_info *out);

/* Fills can[a * n + b] with 1 where GPU a can access GPU b's memory directly (a != b), 0
 * otherwise (and on the diagonal). n is bt_gpu_count's result; can has n * n entries. */
bt_status bt_gpu_peer_matrix(int n, int *can);

#endif
