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
 * A checkpoint directory has one writer: bt_checkpoint_dir_open locks it (io/dir_lock.h) and
 * removes temporaries that killed writers left behind. */
#ifndef BT_TRAIN_CHECKPOINT_H
#define BT_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "baton/engine.h"
#include "io/dir_lock.h"
#include "io/safetensors.h"

#define BT_CHECKPOINT_FILE "checkpoint.safetensors"

typedef struct bt_checkpoint_meta {
    int64_t step;              /* optimizer steps taken */
    int64_t epoch;             /* data position of the next batch */
    int64_t batch_index;
    int64_t batches_per_epoch; /* of the run that saved it; 0 in checkpoints older than the field */
    uint64_t seed;
    char model[128];
} bt_checkpoint_meta;

/* Creates dir if needed, locks it for this process (a directory another run holds is refused
 * with BT_ERR_INVALID_ARG naming its pid and host) and removes stale temporary checkpoint files.
 * The caller owns *lock (bt_dir_lock_release) and holds it while it writes checkpoints there. */
bt_status bt_checkpoint_dir_open(const char *dir, bt_dir_lock **lock);
/* Writes dir/checkpoint.safetensors (creating dir) with the engine's parameters, optimizer state,
 * meta and the checksums. */
bt_status bt_checkpoint_save(const bt_engine *engine, const bt_graph *graph, const char *dir,
                             const bt_checkpoint_meta *meta);
/* Restores parameters, optimizer state and the step counter from dir (or a .safetensors path)
 * and fills meta. Every parameter must be present with its exact shape and checksum; a missing,
 * extra, mismatched or corrupted tensor is rejected with a message naming it, before anything
 * is changed. */
bt_status bt_checkpoint_resume(bt_engine *engine, const bt_graph *graph, const char *path,
                               bt_checkpoint_meta *meta);
/* Reads and cross-checks only the metadata of the checkpoint at path (dir or file). */
bt_status bt_checkpoint_read_meta(const char *path, bt_checkpoint_meta *meta);
/* The checks on an open file, without an engine (also the fuzzing entry points): the format tag,
 * the metadata values, their consistency and the metadata checksum; then every tensor's checksum. */
bt_status bt_checkpoint_parse_meta(const bt_st_file *f, bt_checkpoint_meta *meta);
bt_status bt_checkpoint_verify_tensors(const bt_st_file *f);
/* Loads parameters only, from any safetensors file with PyTorch names (weights saved by PyTorch
 * with safetensors.torch.save_file). F32 or F64 tensors are converted to the engine's dtype.
 * Checksums, where the file has them, are verified. */
bt_status bt_checkpoint_load_weights(bt_engine *engine, const bt_graph *graph, const char *path);

#endif
