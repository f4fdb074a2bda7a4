/* train/checkpoint_dir.c: the checkpoint directory (see checkpoint.h). A directory holds numbered
 * checkpoints, "checkpoint-<position>.safetensors" (position: batches consumed, the trainer's
 * step number, eight digits at least), and "checkpoint.safetensors", a hard link to the newest,
 * which is what --resume DIR and every older reader open. Writing one: the numbered file is
 * written atomically (io/atomic_file.h), then linked to a temporary name and renamed over
 * checkpoint.safetensors, then the directory is fsynced: at every instant the pointer names a
 * complete checkpoint. Then the oldest numbered files beyond keep_last are removed (never the one
 * just written; files numbered above it, left by an earlier run of the directory, go first).
 *
 * Opening a directory happens before step 1: it is created like `mkdir -p`, tested for writing
 * (a probe file is written, fsynced, hard-linked and removed, so a read-only directory or a file
 * system without hard links is refused before any training), locked, cleared of temporaries
 * killed writers left, and checked for room for one more checkpoint. Every failure there is
 * BT_ERR_INVALID_ARG (the user named a directory that cannot be used), before training starts.
 *
 * Sharded checkpoints (checkpoint_shards.c) live in the same directory: "checkpoint-<position>-
 * <s>-of-<P>.safetensors" shards, "checkpoint-<position>.safetensors.index.json", and the pointer
 * "checkpoint.safetensors.index.json". Pointing one layout's pointer removes the other's, so the
 * directory has one latest (after a crash in between, readers take the later position: see
 * ckpt_source.h). Pruning counts positions over both layouts and removes a sharded checkpoint
 * index first, then its shards, so no index ever names a removed shard; shards that no index names
 * (a writer that failed or crashed before its index) are removed and never count as kept. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"
#include "train/checkpoint.h"

#define NUMBERED_PREFIX "checkpoint-"
#define NUMBERED_SUFFIX ".safetensors"

bt_status bt_checkpoint_make_dirs(const char *dir)
{
    char *path = bt_strdup(dir);
    if (!path) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    bt_status st = BT_OK;
    size_t len = strlen(path);
    for (size_t i = 1; i <= len && st == BT_OK; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char saved = path[i];
        path[i] = '\0';
        struct stat sb;
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            st = bt_error(BT_ERR_INVALID_ARG, "%s: cannot create the checkpoint directory (at %s: %s)", dir, path,
                          strerror(errno));
        else if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            st = bt_error(BT_ERR_INVALID_ARG, "%s: cannot create the checkpoint directory (%s is not a directory)",
                          dir, path);
        path[i] = saved;
    }
    free(path);
    return st;
}

/* Writes, fsyncs, hard-links and removes a probe file: the directory takes files and links. */
static bt_status probe_dir(const char *dir)
{
    char *file = bt_strfmt("%s/.write-test.XXXXXX", dir), *link_name = bt_strfmt("%s/.write-test-link", dir);
    bt_status st = BT_OK;
    int fd = -1;
    static const char bytes[4096];
    if (!file || !link_name) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    fd = mkstemp(file);
    if (fd < 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: the checkpoint directory is not writable: %s", dir, strerror(errno));
        free(file);
        file = NULL;
        goto done;
    }
    if (write(fd, bytes, sizeof bytes) != (ssize_t)sizeof bytes || fsync(fd) != 0) {
        st = bt_error(BT_ERR_INVALID_ARG, "%s: cannot write into the checkpoint directory: %s", dir, strerror(errno));
        goto done;
    }
    unlink(link_name);
    if (link(file, link_name) != 0) {
        st = bt_error(BT_ERR_INVALID_ARG,
                      "%s: the checkpoint directory's file system refuses hard links (%s); baton points "
                      "checkpoint.safetensors at the newest checkpoint with one", dir, strerror(errno));
        goto done;
    }
    unlink(link_name);
done:
    if (fd >= 0) close(fd);
    if (file) unlink(file);
    free(file);
    free(link_name);
    return st;
}

/* The position in "checkpoint-<digits>.safetensors", "checkpoint-<digits>.safetensors.index.json"
 * or a shard's "checkpoint-<digits>-<digits>-of-<digits>.safetensors"; -1 for any other name. */
static int64_t numbered_position(const char *name)
{
    size_t np = strlen(NUMBERED_PREFIX), len = strlen(name);
    if (strncmp(name, NUMBERED_PREFIX, np) != 0) return -1;
    int64_t v = 0;
    size_t i = np;
    for (; i < len && isdigit((unsigned char)name[i]); i++) {
        if (v > (INT64_MAX - 9) / 10) return -1;
        v = v * 10 + (name[i] - '0');
    }
    if (i == np) return -1;
    const char *rest = name + i;
    if (strcmp(rest, NUMBERED_SUFFIX) == 0 || strcmp(rest, NUMBERED_SUFFIX BT_CKPT_INDEX_SUFFIX) == 0) return v;
    int a = 0, b = 0, used = 0;
    if (sscanf(rest, "-%d-of-%d.safetensors%n", &a, &b, &used) == 2 && (size_t)used == strlen(rest) &&
        isdigit((unsigned char)rest[1]))
        return v;
    return -1;
}

/* Removes the temporaries of killed writers: of both pointers, and of numbered files, shards and
 * indexes. */
static bt_status remove_stale(const char *dir)
{
    static const char *const pointers[] = {BT_CHECKPOINT_FILE, BT_CHECKPOINT_INDEX};
    bt_status st = BT_OK;
    for (int i = 0; i < 2 && st == BT_OK; i++) {
        char *file = bt_strfmt("%s/%s", dir, pointers[i]);
        st = file ? bt_atomic_file_remove_stale(file, NULL) : bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        free(file);
    }
    BT_TRY(st);
    DIR *d = opendir(dir);
    if (!d) return bt_error(BT_ERR_INVALID_ARG, "%s: cannot list the checkpoint directory: %s", dir, strerror(errno));
    for (struct dirent *e; st == BT_OK && (e = readdir(d)) != NULL;) {
        const char *tmp = strstr(e->d_name, BT_CKPT_INDEX_SUFFIX ".tmp.");
        size_t keep = strlen(BT_CKPT_INDEX_SUFFIX);
        if (!tmp) tmp = strstr(e->d_name, NUMBERED_SUFFIX ".tmp."), keep = strlen(NUMBERED_SUFFIX);
        if (strncmp(e->d_name, NUMBERED_PREFIX, strlen(NUMBERED_PREFIX)) != 0 || !tmp) continue;
        char *target = bt_strfmt("%s/%.*s", dir, (int)(tmp - e->d_name + keep), e->d_name);
        st = target ? bt_atomic_file_remove_stale(target, NULL) : bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        free(target);
    }
    closedir(d);
    return st;
}

bt_status bt_checkpoint_dir_prepare(const char *dir, size_t checkpoint_bytes, bt_dir_lock **lock)
{
    bt_dir_lock *l = NULL;
    bt_status st = BT_OK;
    if (lock) *lock = NULL;
    if (!dir || !*dir) return bt_error(BT_ERR_INVALID_ARG, "the checkpoint directory name is empty");
    BT_TRY(bt_checkpoint_make_dirs(dir));
    BT_TRY(probe_dir(dir));
    BT_TRY(bt_dir_lock_acquire(dir, "checkpoint directory", &l));
    BT_TRY_GOTO(st, remove_stale(dir), fail);
    struct statvfs vfs;
    if (checkpoint_bytes && statvfs(dir, &vfs) == 0) {
        unsigned long long avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
        if (avail < checkpoint_bytes) {
            st = bt_error(BT_ERR_INVALID_ARG,
                          "%s: the checkpoint directory's file system has %llu bytes free, but one checkpoint of "
                          "this model needs %zu", dir, avail, checkpoint_bytes);
            goto fail;
        }
    }
    if (lock) *lock = l;
    else bt_dir_lock_release(l); /* only checking: another writer would have been refused above */
    return BT_OK;
fail:
    bt_dir_lock_release(l);
    return st;
}

bt_status bt_checkpoint_dir_open(const char *dir, bt_dir_lock **lock) { return bt_checkpoint_dir_prepare(dir, 0, lock); }

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* *complete: position has a single file or an index (not only shards). */
static bt_status position_complete(const char *dir, int64_t position, int *complete)
{
    char *single = bt_checkpoint_numbered_path(dir, position), *index = bt_checkpoint_index_path(dir, position);
    struct stat sb;
    bt_status st = single && index ? BT_OK : bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    *complete = st == BT_OK && (stat(single, &sb) == 0 || stat(index, &sb) == 0);
    free(single);
    free(index);
    return st;
}

bt_status bt_checkpoint_prune(const char *dir, int64_t current, int keep_last)
{
    if (keep_last <= 0) return BT_OK;
    DIR *d = opendir(dir);
    if (!d) return bt_error(BT_ERR_IO, "%s: cannot list the checkpoint directory: %s", dir, strerror(errno));
    int64_t *above = NULL, *below = NULL;
    size_t n_above = 0, n_below = 0, cap = 0;
    bt_status st = BT_OK;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        int64_t p = numbered_position(e->d_name);
        if (p < 0 || p == current) continue;
        if (n_above + n_below + 1 > cap) {
            cap = cap * 2 + 16;
            int64_t *a = realloc(above, cap * sizeof *a), *b = a ? realloc(below, cap * sizeof *b) : NULL;
            if (a) above = a;
            if (b) below = b;
            if (!a || !b) {
                st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
                goto done;
            }
        }
        int seen = 0; /* a position has up to three kinds of files */
        for (size_t k = 0; k < n_above && !seen; k++) seen = above[k] == p;
        for (size_t k = 0; k < n_below && !seen; k++) seen = below[k] == p;
        if (seen) continue;
        if (p > current) above[n_above++] = p;
        else below[n_below++] = p;
    }
    /* shards no index names (a save that failed or was killed before its index) are no
     * checkpoint: they go first, with the files above the current one, and never count as kept */
    for (size_t i = 0; i < n_below && st == BT_OK;) {
        int complete = 0;
        st = position_complete(dir, below[i], &complete);
        if (st != BT_OK || complete) {
            i++;
            continue;
        }
        above[n_above++] = below[i];
        below[i] = below[--n_below];
    }
    if (st != BT_OK) goto done;
    if (n_below > 1) qsort(below, n_below, sizeof *below, cmp_i64);
    /* keep: the current file and the keep_last - 1 newest below it; files above it go first */
    size_t keep_below = (size_t)keep_last - 1 < n_below ? (size_t)keep_last - 1 : n_below;
    for (size_t i = 0; i < n_above + n_below - keep_below && st == BT_OK; i++) {
        int64_t p = i < n_above ? above[i] : below[i - n_above];
        st = bt_checkpoint_remove_position(dir, p, BT_CKPT_REMOVE_SINGLE | BT_CKPT_REMOVE_SHARDED);
    }
done:
    closedir(d);
    free(above);
    free(below);
    return st;
}

char *bt_checkpoint_numbered_path(const char *dir, int64_t position)
{
    return bt_strfmt("%s/" NUMBERED_PREFIX "%08" PRId64 NUMBERED_SUFFIX, dir, position);
}

static bt_status unlink_checked(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT)
        return bt_error(BT_ERR_IO, "%s: cannot remove an old checkpoint: %s", path, strerror(errno));
    return BT_OK;
}

bt_status bt_checkpoint_remove_position(const char *dir, int64_t position, int what)
{
    bt_status st = BT_OK;
    if (what & BT_CKPT_REMOVE_SINGLE) {
        char *path = bt_checkpoint_numbered_path(dir, position);
        st = path ? unlink_checked(path) : bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        free(path);
    }
    if (st != BT_OK || !(what & BT_CKPT_REMOVE_SHARDED)) return st;
    char *index = bt_checkpoint_index_path(dir, position), *prefix = bt_strfmt(NUMBERED_PREFIX "%08" PRId64 "-", position);
    if (!index || !prefix) st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    if (st == BT_OK) st = unlink_checked(index); /* the index first: it never names a missing shard */
    DIR *d = st == BT_OK ? opendir(dir) : NULL;
    if (st == BT_OK && !d) st = bt_error(BT_ERR_IO, "%s: cannot list the checkpoint directory: %s", dir, strerror(errno));
    for (struct dirent *e; d && st == BT_OK && (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0 || numbered_position(e->d_name) != position) continue;
        char *path = bt_strfmt("%s/%s", dir, e->d_name);
        st = path ? unlink_checked(path) : bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        free(path);
    }
    if (d) closedir(d);
    free(index);
    free(prefix);
    return st;
}

bt_status bt_checkpoint_point_latest(const char *dir, const char *file, const char *name)
{
    const char *other = strcmp(name, BT_CHECKPOINT_FILE) == 0 ? BT_CHECKPOINT_INDEX : BT_CHECKPOINT_FILE;
    char *tmp = bt_strfmt("%s/%s.tmp.link00", dir, name), *latest = bt_strfmt("%s/%s", dir, name);
    char *old = bt_strfmt("%s/%s", dir, other);
    bt_status st = BT_OK;
    if (!tmp || !latest || !old) {
        st = bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
        goto done;
    }
    unlink(tmp);
    if (link(file, tmp) != 0 || rename(tmp, latest) != 0) {
        st = bt_error(BT_ERR_IO, "%s: cannot point %s at it: %s", file, latest, strerror(errno));
        unlink(tmp);
        goto done;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    st = unlink_checked(old); /* the other layout's pointer names an older checkpoint now */
done:
    free(tmp);
    free(latest);
    free(old);
    return st;
}

int64_t bt_checkpoint_position(const bt_checkpoint_meta *meta)
{
    if (meta->batches_per_epoch > 0) return meta->epoch * meta->batches_per_epoch + meta->batch_index;
    return meta->step;
}

bt_status bt_checkpoint_save(const bt_engine *e, const bt_graph *g, const char *dir, const bt_checkpoint_meta *meta)
{
    return bt_checkpoint_save_kept(e, g, dir, meta, 0, 0);
}

bt_status bt_checkpoint_save_kept(const bt_engine *e, const bt_graph *g, const char *dir,
                                  const bt_checkpoint_meta *meta, int keep_last, int sharded)
{
    /* across processes no rank holds every stage: each owner writes its own (the engine is not
     * changed, but with parallel.zero the gather fills its state buffers) */
    if (sharded || bt_engine_ranks(e) > 1)
        return bt_checkpoint_save_shards_kept((bt_engine *)e, g, dir, meta, keep_last);
    int64_t position = bt_checkpoint_position(meta);
    BT_TRY(bt_checkpoint_make_dirs(dir));
    char *file = bt_checkpoint_numbered_path(dir, position);
    if (!file) return bt_error(BT_ERR_NOMEM, "checkpoint: out of memory");
    bt_status st = bt_checkpoint_write_file(e, g, file, meta);
    if (st == BT_OK) st = bt_checkpoint_point_latest(dir, file, BT_CHECKPOINT_FILE);
    if (st == BT_OK) st = bt_checkpoint_remove_position(dir, position, BT_CKPT_REMOVE_SHARDED);
    if (st == BT_OK) st = bt_checkpoint_prune(dir, position, keep_last);
    free(file);
    return st;
}

bt_status bt_checkpoint_resume_meta(const char *path, uint64_t seed, const char *model, bt_checkpoint_meta *meta)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bt_error(BT_ERR_INVALID_ARG, "%s: no checkpoint to resume from there: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        char *latest = NULL;
        BT_TRY(bt_ckpt_source_latest(path, &latest));
        int found = latest != NULL;
        free(latest);
        if (!found)
            return bt_error(BT_ERR_INVALID_ARG, "%s: no checkpoint to resume from there (neither %s nor %s in it)",
                            path, BT_CHECKPOINT_FILE, BT_CHECKPOINT_INDEX);
    }
    BT_TRY(bt_checkpoint_read_meta(path, meta));
    if (meta->seed != seed)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s was saved with seed %llu but this run uses seed %llu: pass --seed %llu to continue it exactly",
                        path, (unsigned long long)meta->seed, (unsigned long long)seed,
                        (unsigned long long)meta->seed);
    if (meta->model[0] && model && model[0] && strcmp(meta->model, model) != 0)
        return bt_error(BT_ERR_INVALID_ARG, "%s was saved by model '%s', but this model is '%s'", path, meta->model,
                        model);
    return BT_OK;
}
