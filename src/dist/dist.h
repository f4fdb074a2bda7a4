/* dist/dist.h: baton beyond one process, on MPI. Two parts:
 *
 *   the layout   which (replica, stage) a rank runs: rank = replica x P + stage, for D replicas of
 *                a P-stage pipeline on N = D x P ranks (layout.c, pure arithmetic, always built);
 *   the comms    a small communicator API over MPI that the executor and the CLI call: point to
 *                point send/receive (non-blocking), all-reduce (non-blocking and blocking),
 *                reduce-scatter, all-gather, broadcast, abort (comm_mpi.c; comm_stub.c in a build
 *                without MPI, where every call is BT_ERR_UNSUPPORTED naming it).
 *
 * Every MPI error becomes a bt_status (BT_ERR_BACKEND) carrying MPI's own message (communicators
 * are set to MPI_ERRORS_RETURN). No MPI type appears here: requests are opaque storage, so code
 * above (exec, cli) compiles the same with or without MPI. Sits below exec (includes core only). */
#ifndef BT_DIST_DIST_H
#define BT_DIST_DIST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "baton/tensor.h"

/* ---- layout --------------------------------------------------------------------------------- */

typedef struct bt_dist_layout {
    int size, rank;            /* N ranks, this one */
    int data, stages;          /* D replicas, P stages: N = D x P */
    int replica, stage;        /* this rank's: rank = replica x P + stage */
    int local_size;            /* ranks on this machine (for the BLAS threads), >= 1 */
} bt_dist_layout;

/* Checks N = D x P and fills out (D = 0: N / P). BT_ERR_INVALID_ARG naming N, D and P otherwise. */
bt_status bt_dist_layout_make(int size, int rank, int data, int stages, bt_dist_layout *out);
int bt_dist_rank_of(const bt_dist_layout *l, int replica, int stage);

/* ---- the process ---------------------------------------------------------------------------- */

/* 1 when this build has MPI. */
int bt_dist_built(void);
/* How many ranks a launcher (mpirun, srun) started, from its environment (OMPI_COMM_WORLD_SIZE,
 * PMI_SIZE, PMIX_SIZE, SLURM_NTASKS under srun), or 0 when none did; *name says which variable. */
int bt_dist_launched(const char **name);
/* This process's rank in that launch (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID; the
 * MPI world rank once MPI is up), or 0 when no launcher says. */
int bt_dist_launched_rank(void);
/* Ranks of this launch on this machine (OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE), >= 1. */
int bt_dist_local_size(void);
/* MPI_Init_thread asking for MPI_THREAD_MULTIPLE (the stage worker and the host thread both call
 * MPI); refused when the library gives less. Idempotent. */
bt_status bt_dist_init(int *rank, int *size);
void bt_dist_finalize(void);
/* Ends every rank of the job (MPI_Abort) with exit code code; never returns when MPI is up. */
void bt_dist_abort(int code);

/* ---- communicators -------------------------------------------------------------------------- */

typedef struct bt_comm bt_comm;

/* Opaque room for one MPI request. */
typedef struct bt_comm_req {
    uint64_t opaque[2];
    int active;
} bt_comm_req;

/* A duplicate of MPI_COMM_WORLD (errors returned, not fatal). */
bt_status bt_comm_world(bt_comm **out);
/* MPI_Comm_split: ranks with the same color form one communicator, ordered by key. */
bt_status bt_comm_split(const bt_comm *c, int color, int key, bt_comm **out);
void bt_comm_free(bt_comm *c);
int bt_comm_rank(const bt_comm *c);
int bt_comm_size(const bt_comm *c);

/* Point to point, non-blocking: bytes of raw memory to/from peer (a rank of c) under tag. */
bt_status bt_comm_isend(const bt_comm *c, const void *buf, size_t bytes, int peer, int tag, bt_comm_req *req);
bt_status bt_comm_irecv(const bt_comm *c, void *buf, size_t bytes, int peer, int tag, bt_comm_req *req);
/* *done = 1 once req completed (it is then inactive); an inactive request is done. */
bt_status bt_comm_test(bt_comm_req *req, int *done);
/* Waits for req, polling; BT_ERR_TIMEOUT after timeout_s, BT_ERR_INTERNAL (no message) once *abort
 * is raised. */
bt_status bt_comm_wait(bt_comm_req *req, double timeout_s, atomic_bool *abort);
/* Cancels a pending receive (a failed job) and frees it. */
void bt_comm_cancel(bt_comm_req *req);

/* In-place sum over c of count elements of dtype (BT_F32 or BT_F64), non-blocking. */
bt_status bt_comm_iallreduce_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, bt_comm_req *req);
/* Non-blocking reduce-scatter in place: buf holds size(c) blocks of count elements; once done,
 * buf's first block holds the sum over c of block rank(c) (the rest of buf is undefined). */
bt_status bt_comm_ireduce_scatter_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, bt_comm_req *req);
/* All-gather in place: buf holds size(c) blocks of count elements; block rank(c) is this rank's,
 * and afterwards every block is its rank's. Waits like bt_comm_wait (no abort). */
bt_status bt_comm_allgather_inplace(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, double timeout_s);

/* The collectives below block the caller, but never longer than timeout_s (the watchdog): a rank
 * that died or hangs makes them fail with BT_ERR_TIMEOUT naming the collective, never hang. */
/* In-place sum of doubles. */
bt_status bt_comm_allreduce_f64(const bt_comm *c, double *buf, int count, double timeout_s);
/* min and max of v over c. */
bt_status bt_comm_minmax_u64(const bt_comm *c, uint64_t v, uint64_t *min, uint64_t *max, double timeout_s);
/* out[r] = the value of rank r (out has bt_comm_size(c) doubles); stops once *abort is raised
 * (BT_ERR_INTERNAL, no message). */
bt_status bt_comm_allgather_f64(const bt_comm *c, double v, double *out, double timeout_s, atomic_bool *abort);
/* Every rank's recv gets the concatenation of each rank's bytes (the same on all). */
bt_status bt_comm_allgather_bytes(const bt_comm *c, const void *send, size_t bytes, void *recv, double timeout_s);
/* buf holds size(c) x count elements; rank r ends with the sum of block r in buf + r x count (the
 * other blocks are left undefined). */
bt_status bt_comm_reduce_scatter_sum(const bt_comm *c, void *buf, size_t count, bt_dtype dtype, double timeout_s);
/* Broadcast of bytes from root. */
bt_status bt_comm_bcast(const bt_comm *c, void *buf, size_t bytes, int root, double timeout_s);
/* Gather of a different number of bytes from every rank to root: on root, *recv (malloc'd, the
 * caller frees) is the ranks' bytes one after another and counts[r] (size(c) entries) rank r's
 * count; on the others recv and counts are untouched (they may be NULL). */
bt_status bt_comm_gather_bytes(const bt_comm *c, const void *send, size_t bytes, int root, void **recv,
                               size_t *counts, double timeout_s);

/* ---- shared memory on one machine (MPI-3 shared windows) -------------------------------------- */

/* The lowest rank of MPI_COMM_WORLD on the calling rank's machine (MPI_Comm_split_type(c,
 * MPI_COMM_TYPE_SHARED) and a minimum over it): ranks of c with the same leader share memory.
 * Collective over c. */
bt_status bt_comm_node_leader(const bt_comm *c, int *leader, double timeout_s);
/* MPI_Barrier over c, bounded by timeout_s (BT_ERR_TIMEOUT naming it). */
bt_status bt_comm_barrier(const bt_comm *c, double timeout_s);

/* A window of memory every rank of c can load and store directly (MPI_Win_allocate_shared; every
 * rank of c must share this machine's memory: bt_comm_node_leader). Each rank's segment is `bytes`
 * long, 64-byte aligned, zeroed, and in a passive-target epoch (lock_all) until freed; every rank
 * has zeroed its segment when the allocation returns on any rank. Collective over c. */
typedef struct bt_shm_win bt_shm_win;
bt_status bt_shm_win_alloc(const bt_comm *c, size_t bytes, double timeout_s, bt_shm_win **out);
/* Rank r's segment (r a rank of c), in this process's address space. */
void *bt_shm_win_base(const bt_shm_win *w, int r);
/* MPI_Win_sync: the memory barrier MPI's separate/unified model asks for between this rank's
 * stores and a flag that publishes them, and between seeing a peer's flag and reading its data. */
void bt_shm_win_sync(const bt_shm_win *w);
/* Collective; NULL is fine. */
void bt_shm_win_free(bt_shm_win *w);

/* ---- clocks and links (clock.c) ------------------------------------------------------------- */

/* This rank's clock against root's (CLOCK_MONOTONIC, bt_now_ms), measured as Cristian's algorithm
 * does: `rounds` ping-pongs with root, keeping the one with the shortest round trip; root's clock
 * read in the middle of it is taken to be at the middle of the round trip. offset_ms is what to
 * add to this rank's clock to read root's; the true offset lies within +- uncertainty_ms (half the
 * shortest round trip). Root's own is 0 +- 0. Collective over c: root measures each rank in turn. */
typedef struct bt_clock_sync {
    double offset_ms, uncertainty_ms;
    double rtt_ms;             /* the shortest round trip */
} bt_clock_sync;
bt_status bt_dist_clock_sync(const bt_comm *c, int root, int rounds, double timeout_s, bt_clock_sync *out);

/* One ping-pong measurement of the link from rank a to rank b of c: `reps` round trips of a
 * message of `bytes` each way after one untimed one; *oneway_ms (on a and b) is half the median
 * round trip. Ranks other than a and b return at once with *oneway_ms = 0. */
bt_status bt_dist_link_pingpong(const bt_comm *c, int a, int b, size_t bytes, int reps, double timeout_s,
                                double *oneway_ms);

#endif
