/* cuda/nccl_transfer.c: the CUDA backend's communication table (bt_backend_comms, backend.h) over
 * NCCL (nccl_comm.c): what exec/dist_nccl.c drives for the nccl path between GPU stages on
 * different ranks and for the GPU replicas' gradient all-reduce. A communicator here is an NCCL
 * communicator plus a non-blocking stream of its own on the device: receives and all-reduces wait
 * for other ranks there, never on the device's compute or copy stream; sends go on the device's
 * copy stream, behind the copy stream's wait for the values (ev_ready). Events are the backend's
 * (backend_cuda.c), reached through bt_cuda_event_handle. Built only with NCCL (BATON_HAVE_NCCL);
 * never run on a development machine (no GPU): see docs/distributed.md. */
#include <stdlib.h>

#include <cuda_runtime.h>

#include "backend/backend.h"
#include "core/error.h"
#include "cuda/backend_cuda.h"
#include "cuda/nccl_comm.h"

struct bt_backend_comm {
    bt_nccl_comm *nc;
    cudaStream_t stream;
    int device;
};

#define CUDA_OR(call, what)                                                                                 \
    do {                                                                                                   \
        cudaError_t bt_ce_ = (call);                                                                       \
        if (bt_ce_ != cudaSuccess)                                                                         \
            return bt_error(BT_ERR_BACKEND, "NCCL communicator: %s failed: %s", what,                      \
                            cudaGetErrorString(bt_ce_));                                                   \
    } while (0)

static bt_status comm_unique_id(void *id) { return bt_nccl_unique_id(id); }

static void comm_destroy(bt_backend_comm *c, int abort)
{
    if (!c) return;
    if (cudaSetDevice(c->device) != cudaSuccess) (void)cudaGetLastError();
    if (!abort && c->stream && cudaStreamSynchronize(c->stream) != cudaSuccess) (void)cudaGetLastError();
    bt_nccl_comm_destroy(c->nc, abort); /* abort: ncclCommAbort, which also ends its kernels */
    if (c->stream && cudaStreamDestroy(c->stream) != cudaSuccess) (void)cudaGetLastError();
    free(c);
}

static bt_status comm_create(bt_device *dev, const void *id, int nranks, int rank, bt_backend_comm **out)
{
    *out = NULL;
    bt_backend_comm *c = calloc(1, sizeof *c);
    if (!c) return bt_error(BT_ERR_NOMEM, "NCCL communicator: out of memory");
    c->device = bt_cuda_device_index(dev);
    bt_status s = bt_nccl_comm_create(id, nranks, rank, c->device, &c->nc);
    if (s != BT_OK) {
        free(c);
        return s;
    }
    cudaError_t ce = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        c->stream = NULL;
        comm_destroy(c, 1);
        return bt_error(BT_ERR_BACKEND, "NCCL communicator: cudaStreamCreateWithFlags failed: %s",
                        cudaGetErrorString(ce));
    }
    *out = c;
    return BT_OK;
}

static bt_status comm_send(bt_device *dev, bt_backend_comm *c, const void *buf, size_t bytes, int peer)
{
    CUDA_OR(cudaSetDevice(c->device), "cudaSetDevice");
    return bt_nccl_send(c->nc, buf, bytes, peer, bt_cuda_stream(dev, BT_STREAM_COPY));
}

static bt_status record(bt_backend_comm *c, bt_event *done)
{
    if (done) CUDA_OR(cudaEventRecord((cudaEvent_t)bt_cuda_event_handle(done), c->stream), "cudaEventRecord");
    return BT_OK;
}

static bt_status comm_recv(bt_device *dev, bt_backend_comm *c, void *buf, size_t bytes, int peer, bt_event *done)
{
    (void)dev;
    CUDA_OR(cudaSetDevice(c->device), "cudaSetDevice");
    if (bytes) BT_TRY(bt_nccl_recv(c->nc, buf, bytes, peer, c->stream));
    return record(c, done);
}

static bt_status comm_allreduce_sum(bt_device *dev, bt_backend_comm *c, void *buf, size_t count, bt_dtype dtype,
                                    bt_event *after, bt_event *done)
{
    (void)dev;
    CUDA_OR(cudaSetDevice(c->device), "cudaSetDevice");
    if (after)
        CUDA_OR(cudaStreamWaitEvent(c->stream, (cudaEvent_t)bt_cuda_event_handle(after), 0), "cudaStreamWaitEvent");
    BT_TRY(bt_nccl_allreduce_sum(c->nc, buf, count, dtype, c->stream));
    return record(c, done);
}

static bt_status comm_check(bt_backend_comm *c) { return bt_nccl_check_async(c->nc); }

const bt_backend_comms bt_cuda_nccl_comms = {
    .name = "nccl",
    .id_bytes = BT_NCCL_ID_BYTES,
    .unique_id = comm_unique_id,
    .create = comm_create,
    .destroy = comm_destroy,
    .send = comm_send,
    .recv = comm_recv,
    .allreduce_sum = comm_allreduce_sum,
    .check = comm_check,
};
