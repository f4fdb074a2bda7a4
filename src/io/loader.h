/* io/loader.h: batches from a dataset, assembled ahead of the step on a loader thread. Epoch e
 * visits the samples in a permutation seeded by (seed, e) (or in order without shuffling); a
 * training loader drops the incomplete last batch, an evaluation loader pads it and says how many
 * rows are real. `prefetch` batches are kept ready in buffers allocated once, so the first stage
 * never waits on gathering rows. The position (epoch, batch) can be set for an exact resume. The
 * buffers can come from an engine's page-locked host memory (bt_engine_host_alloc), so a GPU
 * copies them in without a hidden wait. */
#ifndef BT_IO_LOADER_H
#define BT_IO_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "io/columns.h"
#include "io/idx.h"

typedef struct bt_loader bt_loader;

typedef struct bt_batch {
    const float *inputs;   /* (batch, sample_numel): a loader of a bt_dataset; else NULL */
    const int32_t *labels; /* (batch): a loader of a bt_dataset; else NULL */
    const void *cols[BT_COLUMNS_MAX]; /* (batch, numel) of each column, in the columns' order */
    int64_t valid;         /* rows that are real samples (< batch only for a padded last batch) */
    int64_t epoch, index;  /* position of this batch */
} bt_batch;

/* Where batch buffers come from; NULL in bt_loader_create: malloc. */
typedef struct bt_host_memory {
    bt_status (*alloc)(void *ctx, size_t bytes, void **out);
    void (*free)(void *ctx, void *ptr);
    void *ctx;
} bt_host_memory;

/* ds (and mem, if given) must outlive the loader. drop_last: 1 for training, 0 for evaluation
 * (pads with row 0). */
bt_status bt_loader_create(const bt_dataset *ds, int64_t batch, int shuffle, int drop_last,
                           uint64_t seed, int prefetch, const bt_host_memory *mem, bt_loader **out);
/* The same for any input signature: a batch holds rows of every column (cols must outlive the
 * loader; its data is read, never changed). */
bt_status bt_loader_create_columns(const bt_columns *cols, int64_t batch, int shuffle, int drop_last,
                                   uint64_t seed, int prefetch, const bt_host_memory *mem, bt_loader **out);
/* The same, gathering only rows [first, first + rows) of every batch of `batch` rows (one rank's
 * share of a global batch across processes) and only the columns with use[c] != 0 (use NULL: all);
 * a batch's other columns are NULL and `valid` counts the real rows of the shard. Epochs, positions
 * and the permutation are those of the whole batches. */
bt_status bt_loader_create_shard(const bt_columns *cols, int64_t batch, int64_t first, int64_t rows,
                                 const unsigned char *use, int shuffle, int drop_last, uint64_t seed, int prefetch,
                                 const bt_host_memory *mem, bt_loader **out);
void bt_loader_destroy(bt_loader *loader);
/* Batches per epoch. */
int64_t bt_loader_batches_per_epoch(const bt_loader *loader);
/* Restarts the stream at (epoch, index). */
bt_status bt_loader_seek(bt_loader *loader, int64_t epoch, int64_t index);
/* Waits for the next batch; it stays valid until bt_loader_release. One batch out at a time. */
bt_status bt_loader_next(bt_loader *loader, bt_batch *out);
void bt_loader_release(bt_loader *loader);

#endif
