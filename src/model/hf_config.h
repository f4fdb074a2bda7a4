/* model/hf_config.h: a Hugging Face checkpoint directory's config.json, read strictly into the
 * numbers that define the model's computation (see hf_config.c for what is accepted). The first
 * step of loading an HF directory: config -> baton model text -> the usual loader. */
#ifndef BT_MODEL_HF_CONFIG_H
#define BT_MODEL_HF_CONFIG_H

#include <stdint.h>

#include "baton/status.h"

typedef enum { BT_HF_LLAMA = 0, BT_HF_QWEN2, BT_HF_MISTRAL, BT_HF_GPT2 } bt_hf_arch;

#define BT_HF_MAX_EOS 8

typedef struct bt_hf_config {
    bt_hf_arch arch;
    char model_type[16];   /* "llama", "qwen2", "mistral", "gpt2" */
    char architecture[32]; /* "LlamaForCausalLM", ... */
    int64_t vocab;         /* vocab_size */
    int64_t hidden;        /* hidden_size / n_embd */
    int64_t intermediate;  /* intermediate_size / n_inner (GPT-2: 4 x hidden when null) */
    int64_t layers;        /* num_hidden_layers / n_layer */
    int64_t heads;         /* num_attention_heads / n_head */
    int64_t kv_heads;      /* num_key_value_heads (= heads when absent; GPT-2: heads) */
    int64_t head_dim;      /* head_dim (= hidden / heads when absent) */
    int64_t max_positions; /* max_position_embeddings / n_positions */
    double norm_eps;       /* rms_norm_eps / layer_norm_epsilon */
    double rope_theta;     /* 0 for GPT-2 (learned positions) */
    int rope_llama3;       /* rope_scaling {rope_type: llama3} */
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max; /* original_max_position_embeddings */
    int tied;                  /* tie_word_embeddings */
    int attention_bias;        /* q/k/v/o biases (Llama's attention_bias; Qwen2: q/k/v only) */
    int qkv_bias_only;         /* Qwen2: biases on q, k, v but not o_proj */
    int mlp_bias;
    int64_t sliding_window; /* 0: every position attends to all before it */
    char act[24];           /* "silu", "gelu_new" (tanh approximation), "gelu" (erf) */
    char dtype[16];         /* torch_dtype: "float32", "bfloat16", "float16" ("" when absent) */
    double dropout;         /* the largest dropout probability the file gives (training only) */
    char dropout_key[24];   /* its key, e.g. "attn_pdrop" */
    int64_t bos;            /* -1 when absent */
    int64_t eos[BT_HF_MAX_EOS];
    int n_eos;
} bt_hf_config;

/* 1 when path is a directory holding config.json (what every command takes as an HF model). */
int bt_hf_is_dir(const char *path);

/* Reads DIR/config.json. Every key is either used, known not to change the computation, or
 * refused: an architecture, model_type, rope_scaling type, quantization or other setting baton
 * does not implement is BT_ERR_MODEL (a usage error, exit 2) naming the key and its value, as are
 * malformed JSON (file:line:column) and a wrong type or range (the key). */
bt_status bt_hf_config_read(const char *dir, bt_hf_config *out);

#endif
