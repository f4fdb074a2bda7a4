/* train/ckpt_source.h: a checkpoint opened for reading, whatever its layout: one safetensors file,
 * or an index (ckpt_index.h) and the shards it names. Every reader of weights (resume, --init,
 * predict, generate, the C API) goes through it, so each accepts both layouts, whatever the
 * layout of the engine reading it.
 *
 * Opening a path: a directory opens its latest checkpoint (checkpoint.safetensors.index.json or
 * checkpoint.safetensors; when both exist, the one at the later data position, so a directory
 * that changed layouts opens its newest); a name ending in ".index.json" an index; anything else a
 * safetensors file. Opening an index opens every shard it names (each mapped and validated by
 * io/safetensors.h: a truncated shard is refused there) and checks the map against the shards: a
 * tensor the index names must be in its shard, and a shard may hold no tensor the index maps
 * elsewhere or not at all (a duplicate or a stray); errors name the tensor and the files. */
#ifndef BT_TRAIN_CKPT_SOURCE_H
#define BT_TRAIN_CKPT_SOURCE_H

#include "baton/status.h"
#include "io/safetensors.h"
#include "train/ckpt_index.h"

#define BT_CHECKPOINT_INDEX "checkpoint.safetensors" BT_CKPT_INDEX_SUFFIX

typedef struct bt_ckpt_source {
    char *path;            /* the file or the index opened */
    bt_st_file *single;    /* a single-file checkpoint, or NULL */
    bt_ckpt_index index;   /* a sharded one: the index ... */
    bt_st_file **shards;   /* ... and its shards, in index.files order */
    int n_meta;            /* the metadata (the file's, or the index's), sorted by key; borrowed */
    const char **keys, **values;
} bt_ckpt_source;

/* Opens path as above. The caller owns *out (bt_ckpt_source_close). Errors: BT_ERR_IO. */
bt_status bt_ckpt_source_open(const char *path, bt_ckpt_source **out);
/* Accepts NULL. */
void bt_ckpt_source_close(bt_ckpt_source *s);
/* The latest checkpoint of directory dir, as a malloc'ed path (see above); else a Hugging Face
 * directory's model.safetensors; *out NULL when it has none. Fails when memory or a metadata read
 * fails, and on a sharded Hugging Face checkpoint (BT_ERR_UNSUPPORTED: not read yet). */
bt_status bt_ckpt_source_latest(const char *dir, char **out);

/* Tensor name, or NULL; *file (may be NULL) gets the file holding it. */
const bt_st_tensor *bt_ckpt_source_find(const bt_ckpt_source *s, const char *name, const bt_st_file **file);
/* Every tensor of every file, in file order; *file as above. */
int bt_ckpt_source_count(const bt_ckpt_source *s);
const bt_st_tensor *bt_ckpt_source_at(const bt_ckpt_source *s, int i, const bt_st_file **file);
/* Metadata value, or NULL. */
const char *bt_ckpt_source_meta(const bt_ckpt_source *s, const char *key);
/* The files that hold tensors: 1 (the file) or the shards. */
int bt_ckpt_source_files(const bt_ckpt_source *s);
const bt_st_file *bt_ckpt_source_file(const bt_ckpt_source *s, int i);

#endif
