/* io/dataset.c: bt_dataset_load, the dispatch from a data source to its reader (see dataset.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/error.h"
#include "io/dataset.h"
#include "io/npy.h"

static float next_sym(uint64_t *s) { return (float)((double)(bt_rng_next(s) >> 11) * 0x1.0p-52 - 1.0); }

static bt_status synthetic(int64_t n, int64_t numel, int classes, uint64_t seed, int split, bt_dataset *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1) return bt_error(BT_ERR_INVALID_ARG, "synthetic data needs at least 1 sample, got %lld", (long long)n);
    float *teacher = malloc((size_t)classes * (size_t)numel * sizeof *teacher);
    out->inputs = malloc((size_t)n * (size_t)numel * sizeof *out->inputs);
    out->labels = malloc((size_t)n * sizeof *out->labels);
    if (!teacher || !out->inputs || !out->labels) {
        free(teacher);
        bt_dataset_free(out);
        return bt_error(BT_ERR_NOMEM, "synthetic data: cannot allocate %lld samples", (long long)n);
    }
    uint64_t rng = seed ^ 0x5eed5eedULL;
    for (int64_t i = 0; i < classes * numel; i++) teacher[i] = next_sym(&rng);
    rng = bt_rng_next(&rng) ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(split + 1));
    for (int64_t i = 0; i < n; i++) {
        float *x = out->inputs + i * numel;
        for (int64_t k = 0; k < numel; k++) x[k] = next_sym(&rng);
        int best = 0;
        double best_score = -INFINITY;
        for (int c = 0; c < classes; c++) {
            double score = 0;
            for (int64_t k = 0; k < numel; k++) score += (double)teacher[c * numel + k] * x[k];
            if (score > best_score) best_score = score, best = c;
        }
        out->labels[i] = best;
    }
    free(teacher);
    out->n = n;
    out->sample_numel = numel;
    out->sample_shape.ndim = 1;
    out->sample_shape.dim[0] = numel;
    out->n_classes = classes;
    return BT_OK;
}

bt_status bt_dataset_load(const bt_data_source *src, int64_t sample_numel, int n_classes,
                          uint64_t seed, int split, bt_dataset *out)
{
    return bt_dataset_load_part(src, sample_numel, n_classes, seed, split, 1, out);
}

bt_status bt_dataset_load_part(const bt_data_source *src, int64_t sample_numel, int n_classes, uint64_t seed,
                               int split, int inputs, bt_dataset *out)
{
    memset(out, 0, sizeof *out);
    switch (src->kind) {
    case BT_DATA_NONE: return bt_error(BT_ERR_INVALID_ARG, "no data source given");
    case BT_DATA_SYNTHETIC:
        return synthetic(src->samples > 0 ? src->samples : 10000, sample_numel, n_classes, seed, split, out);
    case BT_DATA_IDX: BT_TRY(bt_idx_load_pair_part(src->images, src->labels, n_classes, inputs, out)); break;
    case BT_DATA_NPY: BT_TRY(bt_npy_load_pair_part(src->images, src->labels, n_classes, inputs, out)); break;
    case BT_DATA_TEXT:
    case BT_DATA_TOKENS:
        return bt_error(BT_ERR_INVALID_ARG, "%s: text and token data feed language models (train/lm.c), not "
                        "sample/label data sets", src->path ? src->path : "data");
    }
    if (out->sample_numel != sample_numel) {
        int64_t got = out->sample_numel;
        bt_dataset_free(out);
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s: samples have %lld elements but the model's input takes %lld",
                        src->images ? src->images : "data", (long long)got, (long long)sample_numel);
    }
    return BT_OK;
}
