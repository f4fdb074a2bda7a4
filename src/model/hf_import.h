/* model/hf_import.h: the baton model text of a Hugging Face directory (see hf_import.c). */
#ifndef BT_MODEL_HF_IMPORT_H
#define BT_MODEL_HF_IMPORT_H

#include <stdint.h>

#include "baton/status.h"
#include "model/hf_config.h"

/* Positions a sample holds unless the model's own maximum is smaller (override
 * inputs.input_ids.shape and inputs.labels.shape for another). */
#define BT_HF_DEFAULT_CONTEXT 512

int64_t bt_hf_default_context(const bt_hf_config *c);

/* *out = the model file (YAML, malloc'd) for config c read from dir, with `context` positions
 * per sample (1 to c->max_positions). */
bt_status bt_hf_model_yaml(const bt_hf_config *c, const char *dir, int64_t context, char **out);

#endif
