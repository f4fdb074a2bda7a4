/* train/checkpoint_shards.c: writing a sharded checkpoint (docs/checkpoints.md): one safetensors
 * shard per stage that has tensors, written by the stage's owner (bt_engine_owns_stage: replica 0
 * of the stage across processes, this process for every stage in one process, one thread per
 * shard), then an index in Hugging Face's form that rank 0 writes last:
 *
 *   DIR/checkpoint-<position>-<stage + 1>-of-<stages>.safetensors   (5 digits each, as HF's
 *                                                                    model-00001-of-00002)
 *   DIR/checkpoint-<position>.safetensors.index.json
 *   DIR/checkpoint.safetensors.index.json                            (a hard link to the newest)
 *
 * Order, and why a crash never leaves an index pointing at a partial shard: every shard is written
 * atomically (temporary, fsync, rename); every rank's result is agreed on (bt_engine_agree, a
 * collective that doubles as the barrier); only when every shard is complete does rank 0 write the
 * index (atomically too), point the latest link at it and prune. A crash before the index leaves
 * shards no index names, which the next prune (or a later save of that position) removes. Each
 * shard carries the checkpoint's training state and per-tensor checksums like a single file, so a
 * reader can also refuse a shard left from another checkpoint.
 *
 * parallel.zero: 1 (the optimizer state spread over the stage's replicas in bucket chunks):
 * bt_engine_gather_state gathers it whole on the stage's replicas first, so the owner writes whole
 * tensors and the checkpoint does not depend on D. Tensors and names are those of a single-file
 * checkpoint, so the reader's layout never matters. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "train/checkpoint.h"
#include "train/ckpt_index.h"
#include "train/ckpt_source.h"

/* Seconds a rank waits for the others' shards: writing is bounded by the disk, not the watchdog. */
#define AGREE_TIMEOUT_S 600.0
#define MESSAGE_MAX 480

char *bt_checkpoint_shard_name(int64_t position, int stage, int stages)
{
    return bt_strfmt("checkpoint-%08" PRId64 "-%05d-of-%05d.safetensors", position, stage + 1, stages);
}

char *bt_checkpoint_index_path(const char *dir, int64_t position)
{
    return bt_strfmt("%s/checkpoint-%08" PRId64 ".safetensors" BT_CKPT_INDEX_SUFFIX, dir, position);
}

static int stage_has_tensors(const bt_engine *e, const bt_graph *g, int stage)
{
    for (int i = 0; i < bt_graph_num_params(g); i++) {
        bt_param_info p;
        bt_graph_param(g, i, &p);
        if (bt_checkpoint_param_in_shard(e, &p, stage)) return 1;
    }
    return 0;
}

/* rank 0: the index of every stage's shard, from the graph and the plan alone (every rank knows
 * where each tensor lives, so nothing is sent). */
static bt_status write_index(const bt_engine *e, const bt_graph *g, const char *path, int64_t position,
                             const bt_checkpoint_meta *meta)
{
    int n = bt_graph_num_params(g), slots = bt_engine_optimizer_slots(e), stages = bt_engine_num_stages(e);
    int n_meta = 0, count = 0;
    char **keys = NULL, **values = NULL, **tensors = calloc((size_t)n * (size_t)(slots + 1) + 1, sizeof *tensors);
    char **shard = calloc((size_t)stages + 1, sizeof *shard);
    const char **files = calloc((size_t)n * (size_t)(slots + 1) + 1, sizeof *files);
    int64_t total = 0;
    bt_status st = BT_OK;
    if (!tensors || !shard || !files) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    for (int s = 0; s < stages; s++)
        if (!(shard[s] = bt_checkpoint_shard_name(position, s, stages))) {
            st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
            goto done;
        }
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        int s;
        bt_graph_param(g, i, &p);
        if (!bt_checkpoint_param_in_shard(e, &p, -1)) continue;
        BT_TRY_GOTO(st, bt_engine_param_stage(e, p.name, &s), done);
        for (int k = 0; k <= slots; k++) {
            tensors[count] = k == 0 ? bt_strdup(p.name)
                                    : bt_strfmt("optimizer.%s.%s", p.name, bt_engine_optimizer_slot_name(e, k - 1));
            if (!tensors[count]) {
                st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
                goto done;
            }
            files[count++] = shard[s];
            total += bt_shape_numel(&p.shape) * (int64_t)bt_dtype_size(bt_engine_dtype(e));
        }
    }
    BT_TRY_GOTO(st, bt_checkpoint_index_pairs(e, g, meta, &n_meta, &keys, &values), done);
    st = bt_ckpt_index_write(path, total, n_meta, (const char *const *)keys, (const char *const *)values, count,
                             (const char *const *)tensors, files);
done:
    for (int i = 0; i < n_meta; i++) free(keys[i]), free(values[i]);
    for (int i = 0; tensors && i < count; i++) free(tensors[i]);
    for (int s = 0; shard && s < stages; s++) free(shard[s]);
    free(keys);
    free(values);
    free(tensors);
    free(shard);
    free(files);
    return st;
}

typedef struct shard_job {
    const bt_engine *e;
    const bt_graph *g;
    const bt_checkpoint_meta *meta;
    char *path;
    int stage;
    bt_status st;
    char message[MESSAGE_MAX];
    pthread_t thread;
    int started;
} shard_job;

static void *write_job(void *arg)
{
    shard_job *j = arg;
    j->st = bt_checkpoint_write_shard(j->e, j->g, j->path, j->meta, j->stage);
    if (j->st != BT_OK) snprintf(j->message, sizeof j->message, "%s", bt_last_error());
    return NULL;
}

/* This process's shards, one thread each (the first of them on the calling thread). */
static bt_status write_own_shards(const bt_engine *e, const bt_graph *g, const char *dir, int64_t position,
                                  const bt_checkpoint_meta *meta)
{
    int stages = bt_engine_num_stages(e), n = 0;
    shard_job *jobs = calloc((size_t)stages + 1, sizeof *jobs);
    bt_status st = BT_OK;
    if (!jobs) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    for (int s = 0; s < stages && st == BT_OK; s++) {
        if (!bt_engine_owns_stage(e, s) || !stage_has_tensors(e, g, s)) continue;
        char *name = bt_checkpoint_shard_name(position, s, stages);
        jobs[n] = (shard_job){.e = e, .g = g, .meta = meta, .stage = s,
                              .path = name ? bt_strfmt("%s/%s", dir, name) : NULL};
        free(name);
        if (!jobs[n++].path) st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    }
    for (int i = 1; i < n && st == BT_OK; i++) {
        if (pthread_create(&jobs[i].thread, NULL, write_job, &jobs[i]) != 0) write_job(&jobs[i]);
        else jobs[i].started = 1;
    }
    if (st == BT_OK && n > 0) write_job(&jobs[0]);
    for (int i = 0; i < n; i++) {
        if (jobs[i].started) pthread_join(jobs[i].thread, NULL);
        if (st == BT_OK && jobs[i].st != BT_OK) st = bt_error(jobs[i].st, "%s", jobs[i].message);
        free(jobs[i].path);
    }
    free(jobs);
    return st;
}

bt_status bt_checkpoint_save_sharded(bt_engine *e, const bt_graph *g, const char *dir, const bt_checkpoint_meta *meta)
{
    return bt_checkpoint_save_shards_kept(e, g, dir, meta, 0);
}

bt_status bt_checkpoint_save_shards_kept(bt_engine *e, const bt_graph *g, const char *dir,
                                         const bt_checkpoint_meta *meta, int keep_last)
{
    int64_t position = bt_checkpoint_position(meta);
    bt_status st = bt_checkpoint_make_dirs(dir);
    bt_status gathered = bt_engine_gather_state(e); /* collective: every rank, whatever happened */
    if (st == BT_OK) st = gathered;
    if (st == BT_OK) st = write_own_shards(e, g, dir, position, meta);
    BT_TRY(bt_engine_agree(e, st, AGREE_TIMEOUT_S)); /* every shard complete, on every rank */
    st = BT_OK;
    if (bt_engine_rank(e) == 0) {
        char *index = bt_checkpoint_index_path(dir, position);
        if (!index) st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        if (st == BT_OK) st = write_index(e, g, index, position, meta);
        if (st == BT_OK) st = bt_checkpoint_point_latest(dir, index, BT_CHECKPOINT_INDEX);
        if (st == BT_OK) st = bt_checkpoint_remove_position(dir, position, BT_CKPT_REMOVE_SINGLE);
        if (st == BT_OK) st = bt_checkpoint_prune(dir, position, keep_last);
        free(index);
    }
    return bt_engine_agree(e, st, AGREE_TIMEOUT_S);
}
