/* dist/comm_stub.c: the communicator API in a build without MPI (configure found no Open MPI, or
 * --without-mpi). Nothing here can run: every call that would need MPI is BT_ERR_UNSUPPORTED
 * naming what to install, so `--dp`, `parallel.data` or a launch under mpirun is refused with that
 * message (the CLI checks bt_dist_built first) and never runs as one process by mistake. */
#include <stdlib.h>

#include "core/error.h"
#include "dist/dist.h"

#define NO_MPI                                                                                          \
    bt_error(BT_ERR_UNSUPPORTED, "this baton was built without MPI: install libopenmpi-dev and "      \
                                 "openmpi-bin (scripts/install-deps.sh) and configure again")

int bt_dist_built(void) { return 0; }
bt_status bt_dist_init(int *rank, int *size)
{
    *rank = 0;
    *size = 1;
    return NO_MPI;
}
void bt_dist_finalize(void) {}
void bt_dist_abort(int code) { exit(code); }
bt_status bt_comm_world(bt_comm **out) { *out = NULL; return NO_MPI; }
bt_status bt_comm_split(const bt_comm *c, int color, int key, bt_comm **out) { *out = NULL; return NO_MPI; }
void bt_comm_free(bt_comm *c) { (void)c; }
int bt_comm_rank(const bt_comm *c) { return 0; }
int bt_comm_size(const bt_comm *c) { return 1; }
bt_status bt_comm_isend(const bt_comm *c, const void *buf, size_t bytes, int peer, int tag, bt_comm_req *req)
{
    return NO_MPI;
}
bt_status bt_comm_irecv(const bt_comm *c, void *buf, size_t bytes, int peer, int tag, bt_comm_req *req)
{
    return NO_MPI;
}
bt_status bt_comm_test(bt_comm_req *req, int *done) { *done = 1; return BT_OK; }
bt_status bt_comm_wait(bt_comm_req *req, double timeout_s, atomic_bool *abort) { return BT_OK; }
void bt_comm_cancel(bt_comm_req *req) { req->active = 0; }
bt_status bt_comm_iallreduce_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, bt_comm_req *req)
{
    return NO_MPI;
}
bt_status bt_comm_allreduce_f64(const bt_comm *c, double *buf, int count, double timeout_s) { return NO_MPI; }
bt_status bt_comm_minmax_u64(const bt_comm *c, uint64_t v, uint64_t *min, uint64_t *max, double timeout_s)
{
    return NO_MPI;
}
bt_status bt_comm_allgather_f64(const bt_comm *c, double v, double *out, double timeout_s, atomic_bool *abort)
{
    return NO_MPI;
}
bt_status bt_comm_allgather_bytes(const bt_comm *c, const void *send, size_t bytes, void *recv, double timeout_s)
{
    return NO_MPI;
}
bt_status bt_comm_reduce_scatter_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, double timeout_s)
{
    return NO_MPI;
}
bt_status bt_comm_bcast(const bt_comm *c, void *buf, size_t bytes, int root, double timeout_s) { return NO_MPI; }
bt_status bt_comm_ireduce_scatter_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, bt_comm_req *req)
{
    return NO_MPI;
}
bt_status bt_comm_allgather_inplace(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, double timeout_s)
{
    return NO_MPI;
}
bt_status bt_comm_gather_bytes(const bt_comm *c, const void *send, size_t bytes, int root, void **recv,
                               size_t *counts, double timeout_s)
{
    if (recv) *recv = NULL;
    return NO_MPI;
}
bt_status bt_comm_node_leader(const bt_comm *c, int *leader, double timeout_s)
{
    *leader = 0;
    return NO_MPI;
}
bt_status bt_comm_barrier(const bt_comm *c, double timeout_s) { return NO_MPI; }
bt_status bt_shm_win_alloc(const bt_comm *c, size_t bytes, double timeout_s, bt_shm_win **out)
{
    *out = NULL;
    return NO_MPI;
}
void *bt_shm_win_base(const bt_shm_win *w, int r) { return NULL; }
void bt_shm_win_sync(const bt_shm_win *w) {}
void bt_shm_win_free(bt_shm_win *w) {}
