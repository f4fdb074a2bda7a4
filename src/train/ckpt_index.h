/* train/ckpt_index.h: the index of a sharded checkpoint, in Hugging Face's
 * model.safetensors.index.json form:
 *
 *   {"metadata": {"total_size": 24880, "format": "baton-checkpoint-1", "step": "3", ...},
 *    "weight_map": {"fc1.weight": "checkpoint-00000003-00001-of-00002.safetensors", ...}}
 *
 * total_size is the bytes of tensor data in all shards (an integer, as Hugging Face writes it);
 * every other metadata value is a string (baton's training state, the same keys a single-file
 * checkpoint keeps in its safetensors "__metadata__", with its crc32c.__metadata__). The weight map
 * names each tensor's shard by a file name relative to the index's directory: a plain name, never
 * a path ("/" and ".." are refused). Reading is strict about what baton relies on (an object with
 * "weight_map" and optionally "metadata", nothing else at the top; duplicate keys refused; every
 * shard a string) and skips metadata values that are not strings (other writers' additions; baton
 * reads only its own string keys). Errors are BT_ERR_IO naming the index. The writer is atomic
 * (io/atomic_file.h): a crash leaves the previous index or none, never part of one. */
#ifndef BT_TRAIN_CKPT_INDEX_H
#define BT_TRAIN_CKPT_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"

#define BT_CKPT_INDEX_SUFFIX ".index.json"

typedef struct bt_ckpt_index_entry {
    char *tensor, *file;
} bt_ckpt_index_entry;

typedef struct bt_ckpt_index {
    char *path;                  /* the index file, as opened */
    int64_t total_size;          /* -1 when absent */
    int n_meta;                  /* string-valued metadata, sorted by key */
    char **keys, **values;
    int n;                       /* weight_map, sorted by tensor name */
    bt_ckpt_index_entry *map;
    int n_files;                 /* the distinct shard names, sorted */
    char **files;
} bt_ckpt_index;

/* Reads and checks path. The caller owns *out (bt_ckpt_index_free), also after a failure. */
bt_status bt_ckpt_index_read(const char *path, bt_ckpt_index *out);
/* The same from len bytes of JSON (path names them in messages); the fuzzing entry point. */
bt_status bt_ckpt_index_parse(const char *path, const char *json, size_t len, bt_ckpt_index *out);
/* Accepts a zeroed or half-filled index. */
void bt_ckpt_index_free(bt_ckpt_index *x);
/* The shard holding tensor, or NULL. */
const char *bt_ckpt_index_file_of(const bt_ckpt_index *x, const char *tensor);
/* The string metadata value of key, or NULL. */
const char *bt_ckpt_index_meta(const bt_ckpt_index *x, const char *key);

/* Writes the index at path atomically: total_size, n_meta string pairs and n (tensor, shard)
 * pairs (tensor names unique; shard names plain file names). */
bt_status bt_ckpt_index_write(const char *path, int64_t total_size, int n_meta, const char *const *keys,
                              const char *const *values, int n, const char *const *tensors,
                              const char *const *files);

#endif
