/* io/dataset.h: a labelled dataset in memory, from a model's data: section. IDX and .npy pairs are
 * read by idx.c and npy.c; a synthetic source is generated here: inputs uniform in [-1, 1] and
 * labels from a fixed random linear "teacher" (argmax of W x), so a model can really learn it and
 * a falling loss means something. The dataset's sample must have as many elements as the model's
 * float input. */
#ifndef BT_IO_DATASET_H
#define BT_IO_DATASET_H

#include <stdint.h>

#include "baton/config.h"
#include "io/idx.h"

/* Loads (or generates) src into out. sample_numel and n_classes describe the model: the
 * synthetic generator uses them, files are checked against them. Synthetic data: seed picks the
 * teacher (the task), split (0 train, 1 eval) the samples, so an eval set is held out from the
 * same task. Errors name the file. */
bt_status bt_dataset_load(const bt_data_source *src, int64_t sample_numel, int n_classes,
                          uint64_t seed, int split, bt_dataset *out);
/* inputs = 0: files give their labels only (out->inputs NULL; the inputs file's header is
 * checked, not its data), for a rank whose stage never reads the inputs; synthetic data is made
 * whole (its labels come from its inputs). inputs = 1: bt_dataset_load. */
bt_status bt_dataset_load_part(const bt_data_source *src, int64_t sample_numel, int n_classes, uint64_t seed,
                               int split, int inputs, bt_dataset *out);

#endif
