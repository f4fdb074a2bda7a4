/* cuda/nccl_comm.h: NCCL for GPU stages across processes (the `nccl` path's transport and the
 * GPU replicas' gradient all-reduce): a communicator bootstrapped from a unique id that the caller
 * broadcasts (over MPI: src/dist), point-to-point send/receive and the collectives on a CUDA
 * stream, every NCCL error a bt_status with ncclGetErrorString's message. Built where configure
 * found NCCL beside CUDA (BATON_HAVE_NCCL), never in the emulator build.
 *
 * Status: compiled, linked and tested by tests/test_nccl.c (one rank on cuda:0; skips without a
 * GPU). The executor reaches it through the backend's communication table (nccl_transfer.c): the
 * nccl path and the GPU replicas' all-reduce (exec/dist_nccl.c), not yet run on a GPU. */
#ifndef BT_CUDA_NCCL_COMM_H
#define BT_CUDA_NCCL_COMM_H

#include <stddef.h>

#include "baton/status.h"
#include "baton/tensor.h"

#define BT_NCCL_ID_BYTES 128

typedef struct bt_nccl_comm bt_nccl_comm;

/* A new unique id (on one rank; the others receive it). */
bt_status bt_nccl_unique_id(unsigned char id[BT_NCCL_ID_BYTES]);
/* Joins rank of nranks on GPU device (cudaSetDevice first). Collective over the ranks. */
bt_status bt_nccl_comm_create(const unsigned char id[BT_NCCL_ID_BYTES], int nranks, int rank, int device,
                              bt_nccl_comm **out);
/* Destroys c (waits for its work); abort = 1 aborts it instead (a failed job). Accepts NULL. */
void bt_nccl_comm_destroy(bt_nccl_comm *c, int abort);
/* Queues on stream (a cudaStream_t; NULL: the default stream). */
bt_status bt_nccl_send(bt_nccl_comm *c, const void *buf, size_t bytes, int peer, void *stream);
bt_status bt_nccl_recv(bt_nccl_comm *c, void *buf, size_t bytes, int peer, void *stream);
/* In-place sum over the ranks of count elements of dtype (BT_F32, BT_F64, BT_BF16, BT_F16). */
bt_status bt_nccl_allreduce_sum(bt_nccl_comm *c, void *buf, size_t count, bt_dtype dtype, void *stream);
/* buf holds nranks blocks of count elements; this rank's sum lands in block rank (in place). */
bt_status bt_nccl_reduce_scatter_sum(bt_nccl_comm *c, void *buf, size_t count, bt_dtype dtype, void *stream);
/* buf holds nranks blocks of count elements; block rank is this rank's; all blocks afterwards. */
bt_status bt_nccl_all_gather(bt_nccl_comm *c, void *buf, size_t count, bt_dtype dtype, void *stream);
/* Groups the calls between them into one launch (send and receive pairs must be grouped). */
bt_status bt_nccl_group_start(void);
bt_status bt_nccl_group_end(void);
/* An error NCCL raised asynchronously (a peer lost), as a status. */
bt_status bt_nccl_check_async(bt_nccl_comm *c);

#endif
