/* baton/model.h: loading a model file (YAML, see docs/model-format.md) into a graph plus its run
 * configuration. Every error is reported as "file:line:col: message" through bt_last_error() with
 * status BT_ERR_MODEL (or BT_ERR_SHAPE / BT_ERR_IO). Overrides "train.optimizer.lr=3e-4" are
 * applied to the document before it is interpreted, so they are checked exactly like the file. */
#ifndef BATON_MODEL_H
#define BATON_MODEL_H

#include <stddef.h>

#include "baton/api.h"
#include "baton/config.h"
#include "baton/graph.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bt_model {
    const char *name;         /* the model's name: field */
    const char *path;         /* the file it came from */
    bt_graph *graph;          /* owned by the model */
    bt_parallel_config parallel;
    bt_train_config train;
    bt_data_config data;
    bt_dtype dtype;           /* dtype: f32 (default) or f64, the engine's compute and parameter type */
    const char *hf_dir;       /* the Hugging Face directory (config.json) it was read from, or NULL */
} bt_model;

/* Loads path, applying n_overrides "dotted.key=value" strings. The caller owns *out (free with
 * bt_model_destroy). A directory holding config.json is read as that Hugging Face model (Llama,
 * Qwen2, Mistral, GPT-2: the model file `baton import` writes for it; docs/hf.md). */
BT_API bt_status bt_model_load(const char *path, const char *const *overrides, int n_overrides,
                               bt_model **out);
/* The same from a string; name is used in messages in place of a file name. */
BT_API bt_status bt_model_load_string(const char *text, size_t len, const char *name,
                                      const char *const *overrides, int n_overrides, bt_model **out);
/* *out_yaml = the baton model file equivalent to the Hugging Face directory dir (what
 * bt_model_load reads there and `baton import` writes), with `context` positions per sample (0:
 * the default, the model's maximum up to 512). The caller frees *out_yaml with free(). */
BT_API bt_status bt_model_hf_yaml(const char *dir, long long context, char **out_yaml);
/* For a model read from a Hugging Face directory (hf_dir set; BT_OK for any other): whether its
 * checkpoint's weights can be used as they are, for serving (training 0) or training (1). Refused,
 * naming why: GPT-2's Conv1D weights (stored [in, out]; not transposed on loading yet), and for
 * training a dropout probability the model file does not reproduce. */
BT_API bt_status bt_model_hf_check_weights(const bt_model *m, int training);
/* Frees a model and everything it owns; accepts NULL. */
BT_API void bt_model_destroy(bt_model *model);

#ifdef __cplusplus
}
#endif
#endif
