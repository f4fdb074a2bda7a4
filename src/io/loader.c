/* io/loader.c: the prefetching batch loader (see loader.h). A ring of `prefetch` slots: the
 * loader thread fills slot k with the k-th batch of the stream while the consumer trains on an
 * earlier one. It gathers rows of columns (io/columns.h); a classic bt_dataset is its two columns
 * (samples, labels), and its batches also carry them as inputs and labels. The permutation of an epoch is a seeded Fisher-Yates shuffle, recomputed by the
 * thread when it enters an epoch, so (seed, epoch, index) fully determines a batch. A shard loader
 * (one rank of a job across processes) gathers only its rows of each batch and only the columns
 * its stage reads: the same permutation and positions, a slice of the same batches. A column whose
 * rows stay in their file (bt_column.rows_in_file) is gathered with one pread per row. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "core/error.h"
#include "io/loader.h"

typedef struct loader_slot {
    void *cols[BT_COLUMNS_MAX];
    bt_batch batch;
    int full;
    char error[256];       /* a row that could not be read from its file (rows_in_file), or "" */
} loader_slot;

struct bt_loader {
    bt_columns cols;       /* views: the data belongs to the caller */
    int classic;           /* made from a bt_dataset: column 0 samples, column 1 labels */
    int64_t batch, per_epoch;
    int64_t first, rows;   /* the rows of each batch gathered: [first, first + rows) */
    unsigned char use[BT_COLUMNS_MAX]; /* columns gathered (the others' buffers are NULL) */
    int shuffle, drop_last;
    uint64_t seed;
    int64_t *perm;
    int64_t perm_epoch;
    int n_slots;
    loader_slot *slots;
    const bt_host_memory *mem; /* NULL: malloc */
    /* producer position and consumer position, in batches since (epoch0, index0) */
    int64_t epoch0, index0;
    int64_t produced, consumed;
    int out;               /* a batch is with the consumer */
    uint64_t generation;   /* bumped by seek: the producer drops what it was making */
    int stop;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void make_perm(bt_loader *l, int64_t epoch)
{
    int64_t n = l->cols.n;
    for (int64_t i = 0; i < n; i++) l->perm[i] = i;
    if (l->shuffle) {
        uint64_t s = bt_mix64(l->seed ^ bt_mix64((uint64_t)epoch + 1));
        for (int64_t i = n - 1; i > 0; i--) {
            s = bt_mix64(s);
            int64_t j = (int64_t)(s % (uint64_t)(i + 1));
            int64_t t = l->perm[i];
            l->perm[i] = l->perm[j];
            l->perm[j] = t;
        }
    }
    l->perm_epoch = epoch;
}

static size_t row_bytes(const bt_column *c) { return (size_t)c->numel * bt_dtype_size(c->dtype); }

static void fill(bt_loader *l, loader_slot *slot, int64_t epoch, int64_t index)
{
    const bt_columns *cols = &l->cols;
    slot->error[0] = '\0';
    if (l->perm_epoch != epoch) make_perm(l, epoch);
    int64_t start = index * l->batch + l->first, valid = 0;
    for (int64_t r = 0; r < l->rows; r++) {
        int64_t pos = start + r;
        int64_t src = pos < cols->n ? l->perm[pos] : l->perm[0];
        if (pos < cols->n) valid++;
        for (int c = 0; c < cols->n_cols; c++) {
            if (!l->use[c]) continue;
            const bt_column *col = &cols->col[c];
            size_t row = row_bytes(col);
            char *dst = (char *)slot->cols[c] + (size_t)r * row;
            if (!col->rows_in_file) {
                memcpy(dst, (const char *)col->data + (size_t)src * row, row);
                continue;
            }
            /* the row from its file (io/columns.h): the process holds no rows but the batches' */
            for (size_t got = 0; got < row && !slot->error[0];) {
                ssize_t n = pread(col->file_fd, dst + got, row - got,
                                  (off_t)(col->file_offset + (uint64_t)src * row + got));
                if (n <= 0)
                    snprintf(slot->error, sizeof slot->error, "data: input '%s', sample %lld: %s", col->name,
                             (long long)src, n < 0 ? strerror(errno) : "the file is shorter than when it was checked");
                else
                    got += (size_t)n;
            }
        }
    }
    memset(&slot->batch, 0, sizeof slot->batch);
    for (int c = 0; c < cols->n_cols; c++) slot->batch.cols[c] = slot->cols[c];
    if (l->classic) {
        slot->batch.inputs = slot->cols[0];
        slot->batch.labels = slot->cols[1];
    }
    slot->batch.valid = valid;
    slot->batch.epoch = epoch;
    slot->batch.index = index;
}

static void *loader_main(void *arg)
{
    bt_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && l->produced - l->consumed >= l->n_slots) pthread_cond_wait(&l->cv, &l->mu);
        if (l->stop) break;
        int64_t k = l->produced;
        int64_t pos = l->index0 + k;
        int64_t epoch = l->epoch0 + pos / l->per_epoch, index = pos % l->per_epoch;
        loader_slot *slot = &l->slots[k % l->n_slots];
        uint64_t gen = l->generation;
        pthread_mutex_unlock(&l->mu);
        fill(l, slot, epoch, index);
        pthread_mutex_lock(&l->mu);
        if (gen != l->generation) continue; /* a seek happened meanwhile */
        slot->full = 1;
        l->produced++;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void *buffer(bt_loader *l, size_t bytes)
{
    void *p = NULL;
    if (!l->mem) return malloc(bytes ? bytes : 1);
    return l->mem->alloc(l->mem->ctx, bytes ? bytes : 1, &p) == BT_OK ? p : NULL;
}

static void buffer_free(bt_loader *l, void *p)
{
    if (!p) return;
    if (l->mem) l->mem->free(l->mem->ctx, p);
    else free(p);
}

static bt_status create(const bt_columns *cols, int classic, int64_t batch, int64_t first, int64_t rows,
                        const unsigned char *use, int shuffle, int drop_last, uint64_t seed, int prefetch,
                        const bt_host_memory *mem, bt_loader **out)
{
    int64_t per_epoch = drop_last ? cols->n / batch : (cols->n + batch - 1) / batch;
    if (per_epoch < 1)
        return bt_error(BT_ERR_INVALID_ARG, "the dataset has %lld samples, fewer than one batch of %lld",
                        (long long)cols->n, (long long)batch);
    bt_loader *l = calloc(1, sizeof *l);
    if (!l) return bt_error(BT_ERR_NOMEM, "loader: out of memory");
    l->cols = *cols;
    for (int c = 0; c < l->cols.n_cols; c++) l->cols.col[c].owned = 0;
    l->classic = classic;
    l->mem = mem;
    l->batch = batch;
    l->first = first;
    l->rows = rows;
    for (int c = 0; c < cols->n_cols; c++) l->use[c] = use ? use[c] != 0 : 1;
    l->per_epoch = per_epoch;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->seed = seed;
    l->perm_epoch = -1;
    l->n_slots = prefetch < 1 ? 1 : prefetch;
    l->perm = malloc((size_t)cols->n * sizeof *l->perm);
    l->slots = calloc((size_t)l->n_slots, sizeof *l->slots);
    int ok = l->perm && l->slots;
    for (int i = 0; ok && i < l->n_slots; i++)
        for (int c = 0; ok && c < cols->n_cols; c++) {
            if (!l->use[c]) continue;
            l->slots[i].cols[c] = buffer(l, (size_t)rows * row_bytes(&cols->col[c]));
            ok = l->slots[i].cols[c] != NULL;
        }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (!ok || pthread_create(&l->thread, NULL, loader_main, l) != 0) {
        bt_loader_destroy(l);
        return bt_error(BT_ERR_NOMEM, "loader: cannot allocate %d batches of %lld samples", prefetch,
                        (long long)batch);
    }
    l->started = 1;
    *out = l;
    return BT_OK;
}

bt_status bt_loader_create(const bt_dataset *ds, int64_t batch, int shuffle, int drop_last,
                           uint64_t seed, int prefetch, const bt_host_memory *mem, bt_loader **out)
{
    if (!ds || batch < 1 || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_loader_create: bad arguments");
    bt_columns cols;
    memset(&cols, 0, sizeof cols);
    cols.n = ds->n;
    cols.n_cols = 2;
    cols.col[0] = (bt_column){.dtype = BT_F32, .numel = ds->sample_numel, .data = ds->inputs};
    cols.col[1] = (bt_column){.dtype = BT_I32, .numel = 1, .data = ds->labels};
    return create(&cols, 1, batch, 0, batch, NULL, shuffle, drop_last, seed, prefetch, mem, out);
}

bt_status bt_loader_create_columns(const bt_columns *cols, int64_t batch, int shuffle, int drop_last,
                                   uint64_t seed, int prefetch, const bt_host_memory *mem, bt_loader **out)
{
    if (!cols || cols->n_cols < 1 || batch < 1 || !out)
        return bt_error(BT_ERR_INVALID_ARG, "bt_loader_create_columns: bad arguments");
    return create(cols, 0, batch, 0, batch, NULL, shuffle, drop_last, seed, prefetch, mem, out);
}

bt_status bt_loader_create_shard(const bt_columns *cols, int64_t batch, int64_t first, int64_t rows,
                                 const unsigned char *use, int shuffle, int drop_last, uint64_t seed, int prefetch,
                                 const bt_host_memory *mem, bt_loader **out)
{
    if (!cols || cols->n_cols < 1 || batch < 1 || first < 0 || rows < 1 || first + rows > batch || !out)
        return bt_error(BT_ERR_INVALID_ARG, "bt_loader_create_shard: bad arguments");
    return create(cols, 0, batch, first, rows, use, shuffle, drop_last, seed, prefetch, mem, out);
}

void bt_loader_destroy(bt_loader *l)
{
    if (!l) return;
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    for (int i = 0; l->slots && i < l->n_slots; i++)
        for (int c = 0; c < l->cols.n_cols; c++) buffer_free(l, l->slots[i].cols[c]);
    free(l->slots);
    free(l->perm);
    free(l);
}

int64_t bt_loader_batches_per_epoch(const bt_loader *l) { return l->per_epoch; }

bt_status bt_loader_seek(bt_loader *l, int64_t epoch, int64_t index)
{
    if (epoch < 0 || index < 0 || index >= l->per_epoch)
        return bt_error(BT_ERR_INVALID_ARG, "loader: no batch %lld of epoch %lld (an epoch has %lld)",
                        (long long)index, (long long)epoch, (long long)l->per_epoch);
    pthread_mutex_lock(&l->mu);
    if (l->out) {
        pthread_mutex_unlock(&l->mu);
        return bt_error(BT_ERR_INVALID_ARG, "loader: seek while a batch is out");
    }
    l->generation++;
    l->epoch0 = epoch;
    l->index0 = index;
    l->produced = l->consumed = 0;
    for (int i = 0; i < l->n_slots; i++) l->slots[i].full = 0;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return BT_OK;
}

bt_status bt_loader_next(bt_loader *l, bt_batch *out)
{
    pthread_mutex_lock(&l->mu);
    if (l->out) {
        pthread_mutex_unlock(&l->mu);
        return bt_error(BT_ERR_INVALID_ARG, "loader: release the previous batch first");
    }
    while (l->produced <= l->consumed) pthread_cond_wait(&l->cv, &l->mu);
    const loader_slot *slot = &l->slots[l->consumed % l->n_slots];
    if (slot->error[0]) {
        char msg[sizeof slot->error];
        memcpy(msg, slot->error, sizeof msg);
        pthread_mutex_unlock(&l->mu);
        return bt_error(BT_ERR_IO, "%s", msg);
    }
    *out = slot->batch;
    l->out = 1;
    pthread_mutex_unlock(&l->mu);
    return BT_OK;
}

void bt_loader_release(bt_loader *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->out) {
        l->slots[l->consumed % l->n_slots].full = 0;
        l->consumed++;
        l->out = 0;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
}
