/* tests/fuzz/fuzz_overrides.c: libFuzzer harness for "dotted.key=value" overrides. The input is
 * up to 8 overrides, one per line, applied to a fixed valid model (a small MLP with a pipeline,
 * training and data sections) through bt_model_load_string, so each override is parsed, applied
 * to the document (model/overrides.c) and then checked by the interpreter like file content. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "baton/model.h"

#define MAX_OVERRIDES 8

static const char model_yaml[] =
    "format: 1\n"
    "name: fuzz-mlp\n"
    "inputs:\n"
    "  image: {shape: [16], dtype: f32}\n"
    "  label: {shape: [], dtype: i32}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 8}, act: relu}\n"
    "  - {name: blocks, repeat: 2, op: linear, args: {out: 8}, act: relu}\n"
    "  - {name: skip, op: add, from: [-1, fc1]}\n"
    "  - {name: head, op: linear, args: {out: 4}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "parallel:\n"
    "  devices: [cpu:0, cpu:1]\n"
    "  pipeline: {stages: 2, microbatches: 4, schedule: 1f1b, partition: params}\n"
    "train:\n"
    "  batch: 8\n"
    "  epochs: 1\n"
    "  optimizer: {type: adamw, lr: 1.0e-3, weight_decay: 0.01}\n"
    "data:\n"
    "  train: {type: synthetic, samples: 64}\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *overrides[MAX_OVERRIDES];
    int n = 0;
    char *line = text;
    while (n < MAX_OVERRIDES && line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        overrides[n++] = line;
        line = nl ? nl + 1 : NULL;
    }
    bt_model *m = NULL;
    if (bt_model_load_string(model_yaml, sizeof model_yaml - 1, "fuzz.yaml", overrides, n, &m) == BT_OK)
        bt_model_destroy(m);
    free(text);
    return 0;
}
