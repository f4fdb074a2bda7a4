/* train/checkpoint.h: saving and restoring training state as safetensors. Parameters are stored
 * under their PyTorch names ("fc1.weight", [out, in]) so safetensors/PyTorch read the file
 * unchanged; optimizer state as "optimizer.<param>.<slot>" (exp_avg, exp_avg_sq,
 * momentum_buffer); the step, data position, seed and optimizer in the metadata. Nothing depends
 * on the placement: a checkpoint saved from 2 stages resumes on 3. Files are written atomically
 * (temporary file, fsync, rename), so a crash mid-write leaves the previous checkpoint intact. */
#ifndef BT_TRAIN_CHECKPOINT_H
#define BT_TRAIN_CHECKPOINT_H

#include <stdint.h>

#include "baton/engine.h"

#define BT_CHECKPOINT_FILE "checkpoint.safetensors"

typedef struct bt_checkpoint_meta {
    int64_t step;          /* optimizer steps taken */
    int64_t epoch;         /* data position of the next batch */
    int64_t batch_index;
    uint64_t seed;
    char model[128];
} bt_checkpoint_meta;

/* Writes dir/checkpoint.safetensors (creating dir) with the engine's parameters, optimizer state
 * and meta. */
bt_status bt_checkpoint_save(const bt_engine *engine, const bt_graph *graph, const char *dir,
                             const bt_checkpoint_meta *meta);
/* Restores parameters, optimizer state and the step counter from dir (or a .safetensors path)
 * and fills meta. Every parameter must be present with its exact shape; a missing, extra or
 * mismatched tensor is rejected with a message naming it, before anything is changed. */
bt_status bt_checkpoint_resume(bt_engine *engine, const bt_graph *graph, const char *path,
                               bt_checkpoint_meta *meta);
/* Loads parameters only, from any safetensors file with PyTorch names (weights saved by PyTorch
 * with safetensors.torch.save_file). F32 or F64 tensors are converted to the engine's dtype. */
bt_status bt_checkpoint_load_weights(bt_engine *engine, const bt_graph *graph, const char *path);

#endif
