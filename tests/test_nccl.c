/* tests/test_nccl.c: the NCCL wrapper (src/cuda/nccl_comm.c) on one GPU: a one-rank communicator
 * bootstrapped from a unique id, an in-place all-reduce (the sum over one rank is the input), a
 * reduce-scatter and an all-gather (one block), a send to itself received in the same group, and
 * an error turned into a status (an unknown dtype). Built where configure found NCCL; skips (exit
 * 77) without a GPU, or fails where BT_REQUIRE_GPU is set (scripts/gpu-check.sh). This is all that
 * runs of the NCCL path: the executor does not use it yet. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bt_test.h"
#include "core/error.h"
#include "cuda/nccl_comm.h"

static int failures;
#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            failures++;                                    \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);    \
            printf(__VA_ARGS__);                           \
            printf("\n");                                  \
        }                                                  \
    } while (0)

int main(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        const char *req = getenv("BT_REQUIRE_GPU");
        int required = req && *req && strcmp(req, "0") != 0;
        printf("test_nccl: %s: no usable GPU (cudaGetDeviceCount: %s)\n", required ? "FAILED" : "SKIPPED",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        return required ? 1 : BT_TEST_SKIP;
    }
    unsigned char id[BT_NCCL_ID_BYTES];
    bt_nccl_comm *c = NULL;
    bt_status s = bt_nccl_unique_id(id);
    CHECK(s == BT_OK, "unique id: %s", bt_last_error());
    if (s == BT_OK) s = bt_nccl_comm_create(id, 1, 0, 0, &c);
    CHECK(s == BT_OK, "comm: %s", bt_last_error());
    if (s != BT_OK) return 1;
    enum { N = 1000 };
    float host[N], back[N];
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f - 3.0f;
    float *dev = NULL, *other = NULL;
    CHECK(cudaMalloc((void **)&dev, sizeof host) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMalloc((void **)&other, sizeof host) == cudaSuccess, "cudaMalloc");
    cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
    CHECK(bt_nccl_allreduce_sum(c, dev, N, BT_F32, NULL) == BT_OK, "all-reduce: %s", bt_last_error());
    CHECK(bt_nccl_reduce_scatter_sum(c, dev, N, BT_F32, NULL) == BT_OK, "reduce-scatter: %s", bt_last_error());
    CHECK(bt_nccl_all_gather(c, dev, N, BT_F32, NULL) == BT_OK, "all-gather: %s", bt_last_error());
    CHECK(bt_nccl_group_start() == BT_OK, "group start: %s", bt_last_error());
    CHECK(bt_nccl_send(c, dev, sizeof host, 0, NULL) == BT_OK, "send: %s", bt_last_error());
    CHECK(bt_nccl_recv(c, other, sizeof host, 0, NULL) == BT_OK, "recv: %s", bt_last_error());
    CHECK(bt_nccl_group_end() == BT_OK, "group end: %s", bt_last_error());
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
    cudaMemcpy(back, other, sizeof back, cudaMemcpyDeviceToHost);
    CHECK(memcmp(back, host, sizeof host) == 0, "the data came back changed");
    CHECK(bt_nccl_check_async(c) == BT_OK, "async error: %s", bt_last_error());
    s = bt_nccl_allreduce_sum(c, dev, N, BT_I32, NULL);
    CHECK(s == BT_ERR_UNSUPPORTED && strstr(bt_last_error(), "i32"), "i32 all-reduce: %d %s", (int)s,
          bt_last_error());
    cudaFree(dev);
    cudaFree(other);
    bt_nccl_comm_destroy(c, 0);
    printf("test_nccl: %s\n", failures ? "FAILED" : "passed");
    return failures != 0;
}
