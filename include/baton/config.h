/* baton/config.h: the run configuration a model file's `parallel:`, `train:` and `data:` sections
 * describe, as plain structs. The loader fills them from YAML (defaults first, then the file, then
 * key=value overrides); C callers fill them with the _init functions and change what they need.
 * Strings in these structs are owned by whoever filled them (the bt_model for loaded models). */
#ifndef BATON_CONFIG_H
#define BATON_CONFIG_H

#include <stdint.h>

#include "baton/api.h"
#include "baton/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BT_MAX_STAGES 64
#define BT_MAX_MICROBATCHES 4096  /* parallel.pipeline.microbatches */

typedef enum bt_schedule_kind {
    BT_SCHEDULE_GPIPE = 0,  /* fill-drain: all forwards, then all backwards */
    BT_SCHEDULE_1F1B = 1,   /* one forward one backward after warm-up */
    BT_SCHEDULE_STREAM = 2, /* forward only, for inference */
    BT_SCHEDULE_INTERLEAVED_1F1B = 3, /* Megatron's interleaved 1F1B: `virtual` chunks per device */
    BT_SCHEDULE_ZB_H1 = 4,  /* zero bubble ZB-H1: backward split into B (input) and W (weights) */
    BT_SCHEDULE_ZBV = 5     /* zero bubble V: 2 chunks per device (device d holds stages d and
                               2P-1-d), B and W split; `virtual` must be 2 */
} bt_schedule_kind;

typedef enum bt_partition_kind {
    BT_PARTITION_UNIFORM = 0, /* the same number of layers per stage */
    BT_PARTITION_PARAMS = 1,  /* balance parameter counts */
    BT_PARTITION_PROFILE = 2, /* measured costs: bt_parallel_config.profile */
    BT_PARTITION_BALANCE = 3, /* explicit layer counts per stage */
    BT_PARTITION_LAYOUT = 4,  /* explicit layer names: "a,b|c|d" */
    BT_PARTITION_PINNED = 5   /* every layer carries stage: N */
} bt_partition_kind;

typedef struct bt_parallel_config {
    const char *devices;      /* "auto", or a list "cpu:0,cpu:1" / "cuda:0,cuda:0" */
    int stages;               /* 0: one per device; the logical stages the model is cut into
                                 (devices x virtual_stages under interleaved-1f1b) */
    int microbatches;         /* >= 1 */
    bt_schedule_kind schedule;
    bt_partition_kind partition;
    int n_balance;
    int balance[BT_MAX_STAGES];
    const char *layout;       /* for BT_PARTITION_LAYOUT */
    const struct bt_profile *profile; /* for BT_PARTITION_PROFILE: the measured costs the cuts are
                                 chosen from (baton/profile.h), made by the caller before the plan
                                 is built; not owned, read only while the plan is built */
    int data;                 /* parallel.data: data-parallel replicas, each a process group of
                                 `stages` ranks under mpirun (0: as many as the ranks allow) */
    int zero;                 /* parallel.zero: 1 shards the optimizer state over the replicas
                                 (reduce-scatter the gradients, update a shard, all-gather the
                                 weights); 0: every replica keeps all of it */
    int virtual_stages;       /* interleaved-1f1b: model chunks per device (`virtual`, >= 1; 0 reads
                                 as 1): logical stage l runs on device l mod (stages / virtual);
                                 zbv: 2 (stage l < P on device l, l >= P on device 2P-1-l) */
    int auto_layout;          /* `parallel: auto`: stages, threads, micro-batches, schedule and
                                 cuts are chosen by measuring (`baton run` does it, see
                                 docs/planner.md); an engine or plan given it unresolved refuses */
} bt_parallel_config;

typedef enum bt_optimizer_kind { BT_OPT_SGD = 0, BT_OPT_ADAMW = 1 } bt_optimizer_kind;
typedef enum bt_lr_kind { BT_LR_CONSTANT = 0, BT_LR_STEP = 1, BT_LR_COSINE = 2 } bt_lr_kind;

typedef struct bt_optimizer_config {
    bt_optimizer_kind kind;
    double lr;
    double weight_decay;      /* SGD: L2 added to the gradient; AdamW: decoupled */
    double momentum;          /* SGD */
    int nesterov;             /* SGD */
    double beta1, beta2, eps; /* AdamW */
} bt_optimizer_config;

typedef struct bt_lr_schedule_config {
    bt_lr_kind kind;
    int64_t warmup_steps;     /* linear warm-up from 0 (cosine and step) */
    int64_t step_size;        /* step: multiply by gamma every step_size steps */
    double gamma;
    double min_lr;            /* cosine: floor reached at the last step */
} bt_lr_schedule_config;

typedef struct bt_train_config {
    int enabled;              /* the model file has a train: section */
    int64_t batch;            /* samples per step (split into micro-batches) */
    int epochs;
    int64_t steps;            /* 0: as many as epochs over the data take */
    bt_optimizer_config optimizer;
    bt_lr_schedule_config lr_schedule;
    double clip_norm;         /* 0: no clipping; else the global gradient norm bound */
    bt_dtype precision;       /* BT_F32, BT_BF16 or BT_F16: see docs/model-format.md */
    double loss_scale;        /* f16: the initial dynamic loss scale; 0: 65536 */
    int64_t eval_every;       /* steps; 0: only at the end */
    int64_t checkpoint_every; /* steps; 0: only at the end (when a checkpoint dir is set) */
    const char *checkpoint_dir;
    int checkpoint_keep_last; /* numbered checkpoints kept in the directory; 0: all (default 1) */
    const char *tensorboard;  /* TensorBoard event files go here (the baton command); NULL: none */
} bt_train_config;

typedef enum bt_data_kind {
    BT_DATA_NONE = 0,
    BT_DATA_SYNTHETIC = 1,
    BT_DATA_IDX = 2,
    BT_DATA_NPY = 3,
    BT_DATA_TEXT = 4,         /* a text file, tokenised by a character or byte vocabulary */
    BT_DATA_TOKENS = 5        /* an llm.c token shard (.bin: uint16 tokens after a 1 KiB header) */
} bt_data_kind;

#define BT_DATA_MAX_INPUTS 16

typedef struct bt_data_source {
    bt_data_kind kind;
    const char *images;       /* idx/npy: file with the inputs */
    const char *labels;       /* idx/npy: file with the labels */
    int n_inputs;             /* npy per input (inputs: {name: file}): how many pairs; then images
                                 and labels are NULL */
    const char *input_names[BT_DATA_MAX_INPUTS];
    const char *input_files[BT_DATA_MAX_INPUTS];
    int64_t samples;          /* synthetic: how many samples an epoch has */
    int shuffle;
    const char *path;         /* text/tokens: the file */
    int bytes;                /* text: 1: the 256 bytes are the vocabulary; 0: the file's characters */
    double val_fraction;      /* text/tokens train source without eval: the held-out tail (0.1) */
} bt_data_source;

typedef struct bt_data_config {
    bt_data_source train;
    bt_data_source eval;
} bt_data_config;

/* Defaults: devices "auto", stages 0, microbatches 1, 1F1B, partition params. */
BT_API void bt_parallel_config_init(bt_parallel_config *cfg);
/* Defaults: disabled, batch 32, 1 epoch, AdamW lr 1e-3 wd 0.01 betas (0.9, 0.999) eps 1e-8,
 * constant lr, no clipping, f32. */
BT_API void bt_train_config_init(bt_train_config *cfg);
BT_API void bt_data_config_init(bt_data_config *cfg);

BT_API const char *bt_schedule_name(bt_schedule_kind kind);

#ifdef __cplusplus
}
#endif
#endif
