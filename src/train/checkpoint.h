/* train/checkpoint.h: saving and restoring training state as safetensors. Parameters are stored
 * under their PyTorch names ("fc1.weight", [out, in]) so safetensors/PyTorch read the file
 * unchanged; optimizer state as "optimizer.<param>.<slot>" (exp_avg, exp_avg_sq,
 * momentum_buffer); the step, data position, seed and optimizer in the metadata. Nothing depends
 * on the placement: a checkpoint saved from 2 stages resumes on 3. Files are written atomically
 * (temporary file, fsync, rename), so a crash mid-write leaves the previous checkpoint intact.
 *
 * Integrity: the metadata holds "crc32c.<tensor>" (CRC-32C of the tensor's bytes as stored, eight
 * lowercase hex digits; see core/crc32c.h) for every tensor, and "crc32c.__metadata__", the
 * CRC-32C of every other metadata pair in key order, each as key NUL value NUL. Loading verifies
 * them all before anything is changed, and cross-checks the metadata: step <= data position
 * (epoch x batches_per_epoch + batch_index; skipped f16 steps make it smaller), batch_index inside
 * an epoch. A checkpoint with no "crc32c." key at all was written before checksums existed (or by
 * another program): it loads unverified; one with some but not all is refused.
 *
 * A checkpoint directory has one writer: bt_checkpoint_dir_prepare locks it (io/dir_lock.h) and
 * removes temporaries that killed writers left behind. It holds numbered checkpoints and
 * checkpoint.safetensors, a hard link to the newest (train/checkpoint_dir.c).
 *
 * Sharded checkpoints (train/checkpoint_shards.c, docs/checkpoints.md): the same tensors and
 * metadata split into one safetensors shard per stage, each written by its stage's owner, and an
 * index in Hugging Face's model.safetensors.index.json form, written last; the directory's
 * pointer to the newest is then checkpoint.safetensors.index.json. Across processes (one writer
 * per job: rank 0 holds the lock, the other ranks write their shards into the same directory)
 * checkpoints are always sharded; in one process on request. Every reader takes both
 * (train/ckpt_source.h). */
#ifndef BT_TRAIN_CHECKPOINT_H
#define BT_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "baton/engine.h"
#include "baton/train.h"
#include "io/dir_lock.h"
#include "io/safetensors.h"
#include "train/ckpt_source.h"

#define BT_CHECKPOINT_FILE "checkpoint.safetensors"

/* bt_checkpoint_save, _resume, _read_meta, _load_weights(_partial) and bt_checkpoint_meta are
 * public: baton/train.h. */

/* Prepares dir before training (train/checkpoint_dir.c): creates it and its parents, tests it
 * for writing (a probe file, fsynced and hard-linked), locks it for this process (a directory
 * another run holds is refused naming its pid and host), removes stale temporaries, and checks
 * that its file system has checkpoint_bytes free (0: no check). Failures are
 * BT_ERR_INVALID_ARG. The caller owns *lock (bt_dir_lock_release) and holds it while it writes
 * checkpoints there; lock NULL only prepares and checks, and lets the lock go at once. */
bt_status bt_checkpoint_dir_prepare(const char *dir, size_t checkpoint_bytes, bt_dir_lock **lock);
/* bt_checkpoint_dir_prepare without the space check. */
bt_status bt_checkpoint_dir_open(const char *dir, bt_dir_lock **lock);
/* The checks every resume makes before loading: PATH (a checkpoint, or a directory with its latest)
 * exists, its metadata reads, and it was saved with this seed by this model (model NULL or "": not
 * checked). Fills *meta; failures are BT_ERR_INVALID_ARG naming what differs. */
bt_status bt_checkpoint_resume_meta(const char *path, uint64_t seed, const char *model, bt_checkpoint_meta *meta);
/* bt_checkpoint_save (sharded 0) or bt_checkpoint_save_sharded (sharded 1; across processes
 * always, and then every rank calls it), then removes the oldest numbered checkpoints so that
 * keep_last remain (the one just written always does; <= 0: keep all). */
bt_status bt_checkpoint_save_kept(const bt_engine *engine, const bt_graph *graph, const char *dir,
                                  const bt_checkpoint_meta *meta, int keep_last, int sharded);
/* The sharded writer (train/checkpoint_shards.c), keeping keep_last. Collective across processes. */
bt_status bt_checkpoint_save_shards_kept(bt_engine *engine, const bt_graph *graph, const char *dir,
                                         const bt_checkpoint_meta *meta, int keep_last);
/* "checkpoint-<position, 8 digits>-<stage + 1, 5 digits>-of-<stages, 5 digits>.safetensors", a
 * shard's file name in its directory (malloc'ed; NULL: out of memory). */
char *bt_checkpoint_shard_name(int64_t position, int stage, int stages);
/* "dir/checkpoint-<position>.safetensors.index.json" (malloc'ed; NULL: out of memory). */
char *bt_checkpoint_index_path(const char *dir, int64_t position);
/* The data position a checkpoint is numbered by: epoch x batches_per_epoch + batch_index, or the
 * step when batches_per_epoch is 0. */
int64_t bt_checkpoint_position(const bt_checkpoint_meta *meta);
/* mkdir -p dir (failures: BT_ERR_INVALID_ARG). */
bt_status bt_checkpoint_make_dirs(const char *dir);
/* Points dir/name (checkpoint.safetensors or checkpoint.safetensors.index.json) at file, a hard
 * link made under a temporary name and renamed over, fsyncs dir, then removes the other layout's
 * pointer, so the directory's latest is the checkpoint just written. */
bt_status bt_checkpoint_point_latest(const char *dir, const char *file, const char *name);
/* What bt_checkpoint_remove_position removes at a position. */
enum { BT_CKPT_REMOVE_SINGLE = 1, BT_CKPT_REMOVE_SHARDED = 2 };
/* Removes the checkpoint at position: its single file, and/or its index and then its shards. */
bt_status bt_checkpoint_remove_position(const char *dir, int64_t position, int what);
/* The metadata pairs of a checkpoint's index: the training state, the records and its
 * crc32c.__metadata__, sorted by key (the checksum last). The caller frees each string and both
 * arrays. */
bt_status bt_checkpoint_index_pairs(const bt_engine *engine, const bt_graph *graph, const bt_checkpoint_meta *meta,
                                    int *n, char ***keys, char ***values);
/* 1 when parameter p is stored in stage's shard (stage -1: in any; a tied copy in none). */
int bt_checkpoint_param_in_shard(const bt_engine *engine, const bt_param_info *p, int stage);
/* Writes stage's tensors (parameters and optimizer state) as one safetensors file at path,
 * atomically, with the training state and checksums in its metadata. */
bt_status bt_checkpoint_write_shard(const bt_engine *engine, const bt_graph *graph, const char *path,
                                    const bt_checkpoint_meta *meta, int stage);
/* Removes numbered checkpoints of dir but the one at position current and the keep_last - 1
 * newest below it (numbers above current, from an earlier run of the directory, go first). */
bt_status bt_checkpoint_prune(const char *dir, int64_t current, int keep_last);
/* "dir/checkpoint-<position, 8 digits at least>.safetensors" (malloc'ed; NULL: out of memory). */
char *bt_checkpoint_numbered_path(const char *dir, int64_t position);
/* Writes one checkpoint file at path, atomically. */
bt_status bt_checkpoint_write_file(const bt_engine *engine, const bt_graph *graph, const char *path,
                                   const bt_checkpoint_meta *meta);
/* The checks on an open file, without an engine (also the fuzzing entry points): the format tag,
 * the metadata values, their consistency and the metadata checksum; then every tensor's checksum. */
bt_status bt_checkpoint_parse_meta(const bt_st_file *f, bt_checkpoint_meta *meta);
bt_status bt_checkpoint_verify_tensors(const bt_st_file *f);
/* What a resume must match beyond bt_checkpoint_meta, recorded by every checkpoint written since
 * issue 29 (metadata "graph", "loss_scale", "loss_scale_clean_steps"; older ones have none): the
 * model graph's description (graph/describe.h), which bt_checkpoint_resume compares with the
 * graph resuming it, naming the first line that differs (BT_ERR_INVALID_ARG); and under
 * precision f16 the loss scaler's scale and clean-step count, which it restores. Without the
 * graph record the tensors' names and shapes are all that is checked, as before; without the
 * loss scale an f16 run starts again from train.loss_scale (it adapts, but the continuation is
 * not bit-exact); a non-f16 run resuming an f16 checkpoint has no scale to restore. */
typedef struct bt_checkpoint_records {
    const char *graph;              /* borrowed from the source, or NULL */
    int has_loss_scale;
    double loss_scale;              /* [1, 2^64] */
    int64_t loss_scale_clean_steps; /* >= 0 */
} bt_checkpoint_records;
/* The records of an opened checkpoint (validated as parse_meta validates them; BT_ERR_IO). */
bt_status bt_checkpoint_parse_records(const bt_ckpt_source *src, bt_checkpoint_records *rec);
/* The same on an opened checkpoint of either layout: its metadata (the file's or the index's)... */
bt_status bt_checkpoint_parse_source_meta(const bt_ckpt_source *src, bt_checkpoint_meta *meta);
/* ... and all of it: the metadata, every file's checksums, and for a sharded checkpoint each
 * shard's training state equal to the index's (a shard left from another checkpoint is refused). */
bt_status bt_checkpoint_verify_source(const bt_ckpt_source *src, bt_checkpoint_meta *meta);

#endif
