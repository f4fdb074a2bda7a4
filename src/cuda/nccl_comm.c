/* cuda/nccl_comm.c: NCCL communicators for GPU stages across processes (see nccl_comm.h). Thin by
 * design: one function per NCCL call the executor needs, every result checked and turned into a
 * bt_status (BT_ERR_BACKEND) with the call and ncclGetErrorString's message. The unique id is the
 * caller's to share (src/dist broadcasts it over MPI), so this file knows nothing of MPI. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error.h"
#include "cuda/nccl_comm.h"

_Static_assert(BT_NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "the id size is NCCL's");

struct bt_nccl_comm {
    ncclComm_t comm;
    int nranks, rank;
};

#define NCCL_TRY(call)                                                                                     \
    do {                                                                                                   \
        ncclResult_t bt_nccl_r_ = (call);                                                                 \
        if (bt_nccl_r_ != ncclSuccess)                                                                     \
            return bt_error(BT_ERR_BACKEND, "NCCL: %s failed: %s (%s:%d)", #call,                          \
                            ncclGetErrorString(bt_nccl_r_), __FILE__, __LINE__);                           \
    } while (0)

static bt_status nccl_type(bt_dtype dtype, ncclDataType_t *out)
{
    switch (dtype) {
    case BT_F32: *out = ncclFloat32; return BT_OK;
    case BT_F64: *out = ncclFloat64; return BT_OK;
    case BT_BF16: *out = ncclBfloat16; return BT_OK;
    case BT_F16: *out = ncclFloat16; return BT_OK;
    default: return bt_error(BT_ERR_UNSUPPORTED, "NCCL: no reduction for %s", bt_dtype_name(dtype));
    }
}

bt_status bt_nccl_unique_id(unsigned char id[BT_NCCL_ID_BYTES])
{
    ncclUniqueId u;
    NCCL_TRY(ncclGetUniqueId(&u));
    memcpy(id, u.internal, BT_NCCL_ID_BYTES);
    return BT_OK;
}

bt_status bt_nccl_comm_create(const unsigned char id[BT_NCCL_ID_BYTES], int nranks, int rank, int device,
                              bt_nccl_comm **out)
{
    *out = NULL;
    cudaError_t ce = cudaSetDevice(device);
    if (ce != cudaSuccess)
        return bt_error(BT_ERR_BACKEND, "NCCL: cudaSetDevice(%d) failed: %s", device, cudaGetErrorString(ce));
    bt_nccl_comm *c = calloc(1, sizeof *c);
    if (!c) return bt_error(BT_ERR_NOMEM, "NCCL: out of memory");
    ncclUniqueId u;
    memcpy(u.internal, id, BT_NCCL_ID_BYTES);
    ncclResult_t r = ncclCommInitRank(&c->comm, nranks, u, rank);
    if (r != ncclSuccess) {
        free(c);
        return bt_error(BT_ERR_BACKEND, "NCCL: ncclCommInitRank (rank %d of %d, cuda:%d) failed: %s", rank, nranks,
                        device, ncclGetErrorString(r));
    }
    c->nranks = nranks;
    c->rank = rank;
    *out = c;
    return BT_OK;
}

void bt_nccl_comm_destroy(bt_nccl_comm *c, int abort)
{
    if (!c) return;
    if (abort) ncclCommAbort(c->comm);
    else ncclCommDestroy(c->comm);
    free(c);
}

bt_status bt_nccl_send(bt_nccl_comm *c, const void *buf, size_t bytes, int peer, void *stream)
{
    NCCL_TRY(ncclSend(buf, bytes, ncclUint8, peer, c->comm, (cudaStream_t)stream));
    return BT_OK;
}

bt_status bt_nccl_recv(bt_nccl_comm *c, void *buf, size_t bytes, int peer, void *stream)
{
    NCCL_TRY(ncclRecv(buf, bytes, ncclUint8, peer, c->comm, (cudaStream_t)stream));
    return BT_OK;
}

bt_status bt_nccl_allreduce_sum(bt_nccl_comm *c, void *buf, size_t count, bt_dtype dtype, void *stream)
{
    ncclDataType_t t = ncclFloat32;
    BT_TRY(nccl_type(dtype, &t));
    NCCL_TRY(ncclAllReduce(buf, buf, count, t, ncclSum, c->comm, (cudaStream_t)stream));
    return BT_OK;
}

bt_status bt_nccl_reduce_scatter_sum(bt_nccl_comm *c, void *buf, size_t count, bt_dtype dtype, void *stream)
{
    ncclDataType_t t = ncclFloat32;
    BT_TRY(nccl_type(dtype, &t));
    /* in place: the receive buffer is the rank's own block of the send buffer */
    void *mine = (unsigned char *)buf + (size_t)c->rank * count * bt_dtype_size(dtype);
    NCCL_TRY(ncclReduceScatter(buf, mine, count, t, ncclSum, c->comm, (cudaStream_t)stream));
    return BT_OK;
}

bt_status bt_nccl_all_gather(bt_nccl_comm *c, void *buf, size_t count, bt_dtype dtype, void *stream)
{
    ncclDataType_t t = ncclFloat32;
    BT_TRY(nccl_type(dtype, &t));
    const void *mine = (const unsigned char *)buf + (size_t)c->rank * count * bt_dtype_size(dtype);
    NCCL_TRY(ncclAllGather(mine, buf, count, t, c->comm, (cudaStream_t)stream));
    return BT_OK;
}

bt_status bt_nccl_group_start(void)
{
    NCCL_TRY(ncclGroupStart());
    return BT_OK;
}

bt_status bt_nccl_group_end(void)
{
    NCCL_TRY(ncclGroupEnd());
    return BT_OK;
}

bt_status bt_nccl_check_async(bt_nccl_comm *c)
{
    ncclResult_t async = ncclSuccess;
    NCCL_TRY(ncclCommGetAsyncError(c->comm, &async));
    if (async != ncclSuccess)
        return bt_error(BT_ERR_BACKEND, "NCCL: the communicator failed: %s", ncclGetErrorString(async));
    return BT_OK;
}
