/* cuda/devices.c: enumerating the machine's CUDA GPUs (see devices.h) through the CUDA runtime.
 * Every query is checked; "no GPU" (no device, or no driver new enough) is told apart from other
 * failures so callers can say so plainly. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_check.h"
#include "cuda/devices.h"

bt_status bt_gpu_count(int *n)
{
    *n = 0;
    cudaError_t e = cudaGetDeviceCount(n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
        *n = 0;
        (void)cudaGetLastError();
        return bt_error(BT_ERR_UNSUPPORTED,
                        "no usable CUDA GPU on this machine (cudaGetDeviceCount: %s)",
                        cudaGetErrorString(e));
    }
    if (e != cudaSuccess) {
        *n = 0;
        return bt_cuda_status(e, "cudaGetDeviceCount", __FILE__, __LINE__);
    }
    if (*n == 0) return bt_error(BT_ERR_UNSUPPORTED, "no CUDA GPU on this machine");
    return BT_OK;
}

/* Whether cuDNN starts on the current device (a handle created and destroyed), in words; the
 * backend falls back to the GEMM convolution path with the same words (cuda/backend_cuda.c). */
static void probe_cudnn(char *out, size_t size)
{
#ifdef BATON_HAVE_CUDNN
    const char *v = getenv("BATON_CUDNN");
    if (v && strcmp(v, "0") == 0) {
        snprintf(out, size, "cuDNN off (BATON_CUDNN=0): conv2d takes the GEMM path");
        return;
    }
    cudnnHandle_t h = NULL;
    cudnnStatus_t e =
        v && strcmp(v, "broken") == 0 ? CUDNN_STATUS_NOT_INITIALIZED : cudnnCreate(&h);
    (void)cudaGetLastError();
    if (e != CUDNN_STATUS_SUCCESS) {
        snprintf(out, size, "cuDNN unusable (cudnnCreate: %s): conv2d takes the GEMM path",
                 cudnnGetErrorString(e));
        return;
    }
    const size_t ver = cudnnGetVersion();
    cudnnDestroy(h);
    snprintf(out, size, "cuDNN %zu.%zu.%zu", ver / 10000, ver / 100 % 100, ver % 100);
#else
    snprintf(out, size, "no cuDNN in this build: conv2d takes the GEMM path");
#endif
}

bt_status bt_gpu_info_get(int index, bt_gpu_info *out)
{
    struct cudaDeviceProp prop;
    size_t free_bytes = 0, total_bytes = 0;
    int previous = 0, n = 0;
    bt_status st = BT_OK;
    memset(out, 0, sizeof *out);
    BT_TRY(bt_gpu_count(&n));
    if (index < 0 || index >= n)
        return bt_error(BT_ERR_INVALID_ARG, "cuda:%d: this machine has %d CUDA GPU%s", index, n,
                        n == 1 ? "" : "s");
    BT_CUDA_TRY(cudaGetDevice(&previous));
    BT_CUDA_TRY(cudaGetDeviceProperties(&prop, index));
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->multiprocessors = prop.multiProcessorCount;
    out->total_bytes = prop.totalGlobalMem;
    BT_CUDA_TRY(cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, index));
    BT_CUDA_TRY_GOTO(st, cudaSetDevice(index), restore);
    BT_CUDA_TRY_GOTO(st, cudaMemGetInfo(&free_bytes, &total_bytes), restore);
    out->free_bytes = free_bytes;
    probe_cudnn(out->cudnn, sizeof out->cudnn);
restore:
    if (st == BT_OK)
        st = BT_CUDA_CHECK(cudaSetDevice(previous));
    else
        (void)cudaSetDevice(previous);
    return st;
}

bt_status bt_gpu_peer_matrix(int n, int *can)
{
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int v = 0;
            if (a != b) BT_CUDA_TRY(cudaDeviceCanAccessPeer(&v, a, b));
            can[a * n + b] = v != 0;
        }
    return BT_OK;
}
