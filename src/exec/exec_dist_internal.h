/* exec/exec_dist_internal.h: what the files of exec/ that make an engine one rank of a job across
 * processes (engine_dist.c, dist_dp.c, dist_shm.c, dist_sync.c, dist_nccl.c, transfer_staged.c)
 * offer the executor. Included at the end of exec/exec_internal.h, whose types it uses; include
 * that header, not this one. */
#ifndef BT_EXEC_DIST_INTERNAL_H
#define BT_EXEC_DIST_INTERNAL_H

/* transfer_staged.c: boundaries between ranks where a GPU takes part (mpi-staged, nccl) */
/* The path between stage a and b when one of them runs on another rank. */
bt_transfer_path bt_remote_path_for(const bt_engine *e, int a, int b);
/* A transfer mode this job cannot honour (--transfer nccl without NCCL, or with a CPU side). */
bt_status bt_remote_check_mode(const bt_engine *e);
/* Buffers and events of an mpi-staged or nccl channel, for this rank's side of it. */
bt_status bt_remote_setup(bt_engine *e, bt_channel *ch);
void bt_remote_teardown(bt_engine *e, bt_channel *ch);
/* Sender: a GPU side copies mb's values into pinned memory on its copy stream (after ev_ready),
 * waits for them and sends them over MPI; nccl queues ncclSend on the copy stream. */
bt_status bt_remote_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb);
/* Receiver, after the message arrived (MPI) or was queued (nccl): a GPU side copies it into `buf`
 * on its copy stream and makes its compute stream wait for it. */
bt_status bt_remote_recv(bt_stage *st, bt_channel *ch, int mb);
/* The entries of the mpi, mpi-staged and nccl paths in the engine's table (exec/transport.h). */
void bt_remote_install_transports(bt_engine *e);
/* Whether this rank's side of ch is a device with its own memory (a GPU). */
int bt_remote_on_device(const bt_engine *e, const bt_channel *ch);

/* dist_nccl.c: NCCL between GPU stages on different ranks (see there) */
/* Whether a stage's backend has a communication table (a build with NCCL). */
int bt_dist_nccl_built(const bt_engine *e);
/* Whether this job uses NCCL where both sides are GPUs (built, and not forced to stage). */
int bt_dist_nccl_available(const bt_engine *e);
/* A channel's communicator (collective with the peer rank: the id goes over MPI) and events. */
bt_status bt_dist_nccl_channel_setup(bt_engine *e, bt_channel *ch);
void bt_dist_nccl_channel_teardown(bt_engine *e, bt_channel *ch);
bt_status bt_dist_nccl_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb);
/* At a job's start on the receiver: every micro-batch's receive, on the communicator's stream. */
bt_status bt_dist_nccl_post(bt_engine *e, bt_stage *st, bt_channel *ch);
bt_status bt_dist_nccl_recv(bt_stage *st, bt_channel *ch, int mb);
/* The stage's communicator over its replicas and the buckets' device buffers (collective). */
bt_status bt_dist_nccl_dp_setup(bt_engine *e, bt_stage *st);
/* Frees them (devices still open); aborts the communicator after a failure. Accepts none. */
void bt_dist_nccl_dp_teardown(bt_engine *e);
/* A bucket's gradients packed and all-reduced (queued); at STEP, waited for and unpacked. */
bt_status bt_dist_nccl_bucket_start(bt_engine *e, bt_stage *st, bt_dp_bucket *b);
bt_status bt_dist_nccl_bucket_finish(bt_engine *e, bt_stage *st, bt_dp_bucket *b);
/* transfer_staged.c: parallel.zero with a GPU stage across processes is refused (not built). */
bt_status bt_dist_check_gpu(const bt_engine *e);
/* Broadcast of bytes of stage st's memory from world rank root (through host memory on a GPU). */
bt_status bt_dist_bcast_stage(bt_engine *e, bt_stage *st, void *ptr, size_t bytes, int root);

/* engine_dist.c: the parts of a job across processes the executor calls (all no-ops, or BT_OK,
 * when the engine is not distributed) */
/* Posts the receives of every micro-batch on st's incoming MPI channels for this job. */
bt_status bt_dist_job_start(bt_engine *e, bt_stage *st, int grads);
/* Packs mb's message on an MPI channel and sends it. */
bt_status bt_dist_send(bt_engine *e, bt_stage *st, bt_channel *ch, int mb);
/* Waits for mb's message on an MPI channel; the errors of bt_channel_wait. */
bt_status bt_dist_wait(bt_engine *e, bt_channel *ch, int mb);
/* After the job's instructions: waits for this rank's sends (ok = 1) or cancels what is pending. */
bt_status bt_dist_job_end(bt_engine *e, bt_stage *st, int ok);
/* Backward of node k (stage-local) in the stage's last backward of the step (for a node whose
 * weight gradients a split backward defers: in its last W): starts the buckets whose gradients are
 * now final. */
bt_status bt_dist_grads_final(bt_engine *e, bt_stage *st, int k);
/* At STEP: waits for every bucket's all-reduce (starting any not started) and copies the sums back. */
bt_status bt_dist_grads_reduce(bt_engine *e, bt_stage *st);
/* At STEP after the local sum of squares (e->sumsq[st->index]; 0 when not training): every stage's
 * sum into e->sumsq, and the loss summed over every replica into e->dist.loss_sum (local_loss: the
 * last stage's own sum), by messages to the replica's other stages (and the last stage's other
 * replicas), so a timeout names the rank whose message is missing. */
bt_status bt_dist_step_exchange(bt_engine *e, bt_stage *st, double local_loss);
/* After a job on the host: the loss summed over replicas, and the output of a forward job on
 * every rank. */
bt_status bt_dist_after_job(bt_engine *e, int job_kind, double *loss_sum);
/* parallel.zero: 1: the stage's global sum of squared gradients (each replica's chunk, added in
 * replica order), and the update of this rank's chunk followed by the weights' all-gather. */
bt_status bt_dist_zero_sumsq(bt_engine *e, bt_stage *st, double *out);
bt_status bt_dist_zero_update(bt_engine *e, bt_stage *st, double lr, int64_t step, double scale);
/* zero: the full state buffer of ps's slot for a write (allocated, zeroed, when sharded); a read
 * of a sharded state is an error saying to call bt_engine_sync_params first. */
bt_status bt_dist_state_buffer(bt_engine *e, bt_stage *st, bt_param_store *ps, int slot, int write);
/* Rank 0 after bt_engine_sync_params: parameter param of another rank's stage s, its weights
 * (slot -1) or a state slot, into dst; an error naming the holder otherwise. */
bt_status bt_dist_mirror_read(const bt_engine *e, int s, int param, int slot, void *dst, size_t bytes);
/* Frees the copies (at the start of the next job: they would be stale). */
void bt_dist_mirror_drop(bt_engine *e);
/* "rank 3 (stage 1, replica 1)" for stage s of this rank's replica. */
void bt_dist_describe_stage(const bt_engine *e, int s, char *buf, size_t size);
void bt_dist_teardown(bt_engine *e);
/* Point-to-point exchange of k doubles with each of n peers (world ranks): out[i * k ..] gets peer
 * i's; a timeout names the peer whose message is missing (what: what was waited for). */
bt_status bt_dist_exchange(bt_engine *e, const int *peers, int n, const double *mine, int k, double *out, int tag,
                           const char *what);
/* dist_shm.c: data-parallel reduction through a shared window when a stage's replicas share one
 * machine (see there) */
enum { BT_DP_REDUCE_AUTO = 0, BT_DP_REDUCE_MPI = 1, BT_DP_REDUCE_SHM = 2 };
bt_status bt_dist_reduce_mode_from_env(int *mode);
/* Collective over the stage's replicas: *use = 1 when the shm path runs (BATON_DP_REDUCE and
 * where the replicas are); a forced shm that cannot run is BT_ERR_INVALID_ARG naming the ranks. */
bt_status bt_dist_shm_choose(bt_engine *e, bt_stage *st, int *use);
bt_status bt_dist_shm_setup(bt_engine *e, bt_stage *st);
bt_status bt_dist_shm_job_start(bt_engine *e, bt_stage *st);
/* waits until every peer replica has finished reading this rank's gradient arena this step */
bt_status bt_dist_shm_readers_done(bt_engine *e);
void bt_dist_shm_start(bt_engine *e, bt_dp_bucket *b);
bt_status bt_dist_shm_poll(bt_engine *e, bt_stage *st);
bt_status bt_dist_shm_finish(bt_engine *e, bt_stage *st);
/* Without zero (and ties): the stage's sum of squared gradients, each tensor's part computed by
 * one replica at the end of the reduction; the same value as the backend's sum_squares. */
int bt_dist_shm_sumsq_split(const bt_engine *e);
bt_status bt_dist_shm_sumsq(bt_engine *e, bt_stage *st, double *out);
bt_status bt_dist_shm_zero_update(bt_engine *e, bt_stage *st, double lr, int64_t step, double scale);
void bt_dist_shm_teardown(bt_engine *e);

/* Tied parameters across processes (worker_step.c's exchange_tied): tie t's side on this rank
 * (host[side], the gradient already summed over the replicas) goes to the rank of this replica
 * holding the other side, whose gradient arrives in host[1 - side]; a timeout names that rank. */
bt_status bt_dist_tie_exchange(bt_engine *e, bt_tie *t, int side);
/* dist_dp.c, parallel.zero: the full state buffers sharded again (at a job's start), or gathered
 * (for a checkpoint: bt_engine_sync_params). */
bt_status bt_dist_absorb_state(bt_engine *e, bt_stage *st);
bt_status bt_dist_gather_state(bt_engine *e, bt_stage *st);
/* After a successful job (when tracing): the other stages' instruction records of this replica,
 * from their ranks, into their workers' trace arrays, on this rank's timeline. */
bt_status bt_dist_gather_trace(bt_engine *e);
/* engine_dist.c: the rank hooks of a job across processes (exec/rank_hooks.h), which bt_dist_setup
 * installs in the engine; they call the functions above. */
extern const bt_rank_hooks bt_rank_hooks_dist;
/* Creation (engine.c calls them in this order): the communicators and checks, once the plan and
 * schedules exist; the MPI channels' tags and requests; the buckets; the cross-rank agreement. */
bt_status bt_dist_setup(bt_engine *e, const bt_dist_layout *layout);
bt_status bt_dist_setup_channels(bt_engine *e);
bt_status bt_dist_setup_buckets(bt_engine *e);
bt_status bt_dist_check_agreement(bt_engine *e);

#endif
