/* tests/fuzz/fuzz_checkpoint.c: libFuzzer harness for checkpoint restore (train/checkpoint.c):
 * the input is a checkpoint file handed to bt_checkpoint_resume on a one-stage CPU engine built
 * once from a fixed small model (AdamW, so optimizer state is restored too). This covers the
 * metadata (format tag, step, data position, seed, model), the tensor names, shapes and dtypes
 * checked against the graph, and the copy into the engine. The seeds are checkpoints of that same
 * model (tests/fuzz/corpus/fuzz_checkpoint/), so mutations start from files that resume. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "baton/engine.h"
#include "baton/model.h"
#include "fuzz_input.h"
#include "train/checkpoint.h"

/* the model of tests/fuzz/corpus/fuzz_checkpoint/ (regenerate the seeds when it changes) */
static const char model_yaml[] =
    "format: 1\n"
    "name: fuzz-ckpt\n"
    "inputs:\n"
    "  x: {shape: [6]}\n"
    "  label: {shape: [], dtype: i32}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 5}, act: relu}\n"
    "  - {name: head, op: linear, args: {out: 3}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "train:\n"
    "  batch: 4\n"
    "  optimizer: {type: adamw, lr: 1.0e-3}\n"
    "data:\n"
    "  train: {type: synthetic, samples: 16}\n";

static bt_model *model;
static bt_engine *engine;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    bt_engine_params p;
    if (bt_model_load_string(model_yaml, sizeof model_yaml - 1, "fuzz-ckpt.yaml", NULL, 0, &model) != BT_OK)
        goto fail;
    bt_engine_params_init(&p);
    p.parallel = model->parallel;
    p.parallel.devices = "cpu:0";
    p.parallel.stages = 1;
    p.parallel.microbatches = 1;
    p.optimizer = model->train.optimizer;
    p.batch = model->train.batch;
    if (bt_engine_create(model->graph, &p, &engine) != BT_OK) goto fail;
    return 0;
fail:
    fprintf(stderr, "fuzz_checkpoint: setup failed: %s\n", bt_last_error());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    bt_checkpoint_meta meta;
    (void)bt_checkpoint_resume(engine, model->graph, fuzz_input_path(data, size), &meta);
    return 0;
}
