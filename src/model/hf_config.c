/* model/hf_config.c: config.json of a Hugging Face checkpoint directory, read strictly.
 *
 * Four architectures: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM and GPT2LMHeadModel.
 * Every key of the file falls in one of three classes, and a key in none of them is refused:
 *   - used: the numbers that define the computation (sizes, heads, eps, rope, biases, ties, the
 *     window, the activation), each type- and range-checked;
 *   - accepted with a condition: a setting baton implements only at one value (GPT-2's
 *     scale_attn_weights true, Qwen2's use_sliding_window false, pretraining_tp of any value since
 *     its slices compute the same product); another value is refused naming key and value;
 *   - known not to change what the model computes: bookkeeping (transformers_version,
 *     _name_or_path, torch_dtype is read), generation defaults (generate reads
 *     generation_config.json), initialisation (initializer_range), label maps, dropout
 *     probabilities (kept in bt_hf_config for the training side to honour or refuse).
 * No approximate model: an unknown model_type, rope_scaling of another type, a quantization_config
 * and the like are BT_ERR_MODEL with the key and its value. */
#include "model/hf_config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"

int bt_hf_is_dir(const char *path)
{
    struct stat st;
    char cfg[4096];
    if (!path || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    if (snprintf(cfg, sizeof cfg, "%s/config.json", path) >= (int)sizeof cfg) return 0;
    return stat(cfg, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- reading typed keys, remembering which were read ----------------------------------------- */

#define MAX_KEYS 96

typedef struct reader {
    const char *file; /* for messages */
    json_t *obj;
    const char *used[MAX_KEYS];
    int n_used;
} reader;

static void mark(reader *r, const char *key)
{
    if (r->n_used < MAX_KEYS) r->used[r->n_used++] = key;
}

static int was_used(const reader *r, const char *key)
{
    for (int i = 0; i < r->n_used; i++)
        if (strcmp(r->used[i], key) == 0) return 1;
    return 0;
}

/* *out = the key's integer in [lo, hi]; absent or null leaves *out as it was (an error where
 * required). get_num, get_bool and get_str likewise. */
static bt_status get_int(reader *r, const char *key, int64_t lo, int64_t hi, int required,
                         int64_t *out)
{
    mark(r, key);
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (required) return bt_error(BT_ERR_MODEL, "%s: \"%s\" is missing", r->file, key);
        return BT_OK;
    }
    if (!json_is_integer(v))
        return bt_error(BT_ERR_MODEL, "%s: \"%s\" must be an integer", r->file, key);
    const json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return bt_error(BT_ERR_MODEL, "%s: \"%s\" is %lld (expected %lld to %lld)", r->file, key,
                        (long long)x, (long long)lo, (long long)hi);
    *out = x;
    return BT_OK;
}

static bt_status get_num(reader *r, const char *key, double lo, double hi, int required,
                         double *out)
{
    mark(r, key);
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) {
        if (required) return bt_error(BT_ERR_MODEL, "%s: \"%s\" is missing", r->file, key);
        return BT_OK;
    }
    if (!json_is_number(v))
        return bt_error(BT_ERR_MODEL, "%s: \"%s\" must be a number", r->file, key);
    const double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return bt_error(BT_ERR_MODEL, "%s: \"%s\" is %g (expected %g to %g)", r->file, key, x, lo,
                        hi);
    *out = x;
    return BT_OK;
}

static bt_status get_bool(reader *r, const char *key, int *out)
{
    mark(r, key);
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) return BT_OK;
    if (!json_is_boolean(v))
        return bt_error(BT_ERR_MODEL, "%s: \"%s\" must be true or false", r->file, key);
    *out = json_is_true(v);
    return BT_OK;
}

/* A boolean baton implements only at `want`: another value is refused. */
static bt_status need_bool(reader *r, const char *key, int want, const char *why)
{
    int v = want;
    BT_TRY(get_bool(r, key, &v));
    if (v != want)
        return bt_error(BT_ERR_MODEL, "%s: \"%s\": %s is not implemented (%s)", r->file, key,
                        v ? "true" : "false", why);
    return BT_OK;
}

static bt_status get_str(reader *r, const char *key, char *out, size_t cap)
{
    mark(r, key);
    json_t *v = json_object_get(r->obj, key);
    if (!v || json_is_null(v)) return BT_OK;
    if (!json_is_string(v)) return bt_error(BT_ERR_MODEL, "%s: \"%s\" must be a string", r->file, key);
    if (strlen(json_string_value(v)) >= cap)
        return bt_error(BT_ERR_MODEL, "%s: \"%s\" is too long", r->file, key);
    snprintf(out, cap, "%s", json_string_value(v));
    return BT_OK;
}

/* ---- the architectures ------------------------------------------------------------------------ */

typedef struct arch_def {
    const char *model_type, *architecture;
    bt_hf_arch arch;
} arch_def;

static const arch_def archs[] = {
    {"llama", "LlamaForCausalLM", BT_HF_LLAMA},
    {"qwen2", "Qwen2ForCausalLM", BT_HF_QWEN2},
    {"mistral", "MistralForCausalLM", BT_HF_MISTRAL},
    {"gpt2", "GPT2LMHeadModel", BT_HF_GPT2},
};

/* Keys that do not change what a causal LM computes from its weights (see the opening comment). */
static const char *const harmless[] = {
    "transformers_version", "_name_or_path", "use_cache", "initializer_range", "pad_token_id",
    "return_dict", "output_hidden_states", "output_attentions", "torchscript", "use_bfloat16",
    "id2label", "label2id", "task_specific_params", "problem_type", "tokenizer_class", "prefix",
    "sep_token_id", "decoder_start_token_id", "finetuning_task", "chunk_size_feed_forward",
    "tf_legacy_loss", "max_length", "min_length", "do_sample", "early_stopping", "num_beams",
    "num_beam_groups", "diversity_penalty", "temperature", "top_k", "top_p", "typical_p",
    "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
    "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
    "return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id",
    "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens", "summary_type", "summary_use_proj", "summary_activation",
    "summary_proj_to_labels", "summary_first_dropout", "n_ctx", "max_window_layers",
};

static int is_harmless(const char *key)
{
    for (size_t i = 0; i < sizeof harmless / sizeof harmless[0]; i++)
        if (strcmp(harmless[i], key) == 0) return 1;
    return 0;
}

static bt_status read_tokens(reader *r, bt_hf_config *c)
{
    BT_TRY(get_int(r, "bos_token_id", 0, INT32_MAX, 0, &c->bos));
    mark(r, "eos_token_id");
    json_t *v = json_object_get(r->obj, "eos_token_id");
    if (!v || json_is_null(v)) return BT_OK;
    if (json_is_integer(v)) {
        c->eos[c->n_eos++] = json_integer_value(v);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (!json_is_integer(e) || c->n_eos == BT_HF_MAX_EOS)
                return bt_error(BT_ERR_MODEL, "%s: \"eos_token_id\" must be an integer or up to %d "
                                "integers", r->file, BT_HF_MAX_EOS);
            c->eos[c->n_eos++] = json_integer_value(e);
        }
    } else {
        return bt_error(BT_ERR_MODEL, "%s: \"eos_token_id\" must be an integer or a list of them",
                        r->file);
    }
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos[i] < 0 || c->eos[i] > INT32_MAX)
            return bt_error(BT_ERR_MODEL, "%s: \"eos_token_id\" %lld is not a token id", r->file,
                            (long long)c->eos[i]);
    return BT_OK;
}

/* rope_scaling: null, or {rope_type (or type): llama3, factor, low_freq_factor, high_freq_factor,
 * original_max_position_embeddings}. */
static bt_status read_rope_scaling(reader *r, bt_hf_config *c)
{
    mark(r, "rope_scaling");
    json_t *v = json_object_get(r->obj, "rope_scaling");
    if (!v || json_is_null(v)) return BT_OK;
    if (!json_is_object(v))
        return bt_error(BT_ERR_MODEL, "%s: \"rope_scaling\" must be an object or null", r->file);
    reader s = {r->file, v, {0}, 0};
    char type[32] = "", type2[32] = "";
    BT_TRY(get_str(&s, "rope_type", type, sizeof type));
    BT_TRY(get_str(&s, "type", type2, sizeof type2));
    if (!type[0]) snprintf(type, sizeof type, "%s", type2);
    if (strcmp(type, "default") == 0) return BT_OK;
    if (strcmp(type, "llama3") != 0)
        return bt_error(BT_ERR_MODEL,
                        "%s: \"rope_scaling.rope_type\": \"%s\" is not implemented (baton implements "
                        "llama3)",
                        r->file, type[0] ? type : "(none)");
    c->rope_llama3 = 1;
    BT_TRY(get_num(&s, "factor", 1, 1e6, 1, &c->rope_factor));
    BT_TRY(get_num(&s, "low_freq_factor", 1e-6, 1e6, 1, &c->rope_low_freq_factor));
    BT_TRY(get_num(&s, "high_freq_factor", 1e-6, 1e6, 1, &c->rope_high_freq_factor));
    BT_TRY(get_int(&s, "original_max_position_embeddings", 1, INT32_MAX, 1, &c->rope_original_max));
    if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
        return bt_error(BT_ERR_MODEL,
                        "%s: \"rope_scaling\": high_freq_factor %g must exceed low_freq_factor %g",
                        r->file, c->rope_high_freq_factor, c->rope_low_freq_factor);
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (!was_used(&s, key))
            return bt_error(BT_ERR_MODEL, "%s: \"rope_scaling.%s\" is not implemented", r->file,
                            key);
    }
    return BT_OK;
}

/* A dropout probability: training only (logits, generate and predict never drop); the largest is
 * kept with its key for the training side. */
static bt_status get_dropout(reader *r, const char *key, bt_hf_config *c)
{
    double p = 0;
    BT_TRY(get_num(r, key, 0, 1, 0, &p));
    if (p > c->dropout) {
        c->dropout = p;
        snprintf(c->dropout_key, sizeof c->dropout_key, "%s", key);
    }
    return BT_OK;
}

static bt_status read_llama_family(reader *r, bt_hf_config *c)
{
    BT_TRY(get_int(r, "vocab_size", 1, INT32_MAX, 1, &c->vocab));
    BT_TRY(get_int(r, "hidden_size", 1, 1 << 20, 1, &c->hidden));
    BT_TRY(get_int(r, "intermediate_size", 1, 1 << 22, 1, &c->intermediate));
    BT_TRY(get_int(r, "num_hidden_layers", 1, 4096, 1, &c->layers));
    BT_TRY(get_int(r, "num_attention_heads", 1, 4096, 1, &c->heads));
    c->kv_heads = c->heads;
    BT_TRY(get_int(r, "num_key_value_heads", 1, 4096, 0, &c->kv_heads));
    c->head_dim = c->hidden / c->heads;
    BT_TRY(get_int(r, "head_dim", 1, 1 << 16, 0, &c->head_dim));
    BT_TRY(get_int(r, "max_position_embeddings", 1, INT32_MAX, 1, &c->max_positions));
    BT_TRY(get_num(r, "rms_norm_eps", 0, 1, 1, &c->norm_eps));
    c->rope_theta = 10000;
    BT_TRY(get_num(r, "rope_theta", 1e-6, 1e12, 0, &c->rope_theta));
    BT_TRY(read_rope_scaling(r, c));
    snprintf(c->act, sizeof c->act, "silu");
    BT_TRY(get_str(r, "hidden_act", c->act, sizeof c->act));
    if (strcmp(c->act, "silu") != 0)
        return bt_error(BT_ERR_MODEL,
                        "%s: \"hidden_act\": \"%s\" is not implemented for %s (baton implements silu)",
                        r->file, c->act, c->architecture);
    c->tied = 0;
    BT_TRY(get_bool(r, "tie_word_embeddings", &c->tied));
    /* pretraining_tp > 1 slices the same products: the same model, any value */
    int64_t tp = 1;
    BT_TRY(get_int(r, "pretraining_tp", 1, 4096, 0, &tp));
    BT_TRY(get_dropout(r, "attention_dropout", c));
    if (c->arch == BT_HF_QWEN2) {
        c->attention_bias = 1;
        c->qkv_bias_only = 1;
        BT_TRY(need_bool(r, "use_sliding_window", 0,
                         "Qwen2's per-layer sliding window; baton attends to every position"));
        int64_t window = 0;
        BT_TRY(get_int(r, "sliding_window", 0, INT32_MAX, 0, &window)); /* unused when off */
    } else {
        BT_TRY(get_bool(r, "attention_bias", &c->attention_bias));
        BT_TRY(get_bool(r, "mlp_bias", &c->mlp_bias));
    }
    if (c->arch == BT_HF_MISTRAL)
        BT_TRY(get_int(r, "sliding_window", 1, INT32_MAX, 0, &c->sliding_window));
    if (c->heads % c->kv_heads != 0)
        return bt_error(BT_ERR_MODEL,
                        "%s: \"num_attention_heads\" %lld is not a multiple of "
                        "\"num_key_value_heads\" %lld",
                        r->file, (long long)c->heads, (long long)c->kv_heads);
    if (c->head_dim % 2 != 0)
        return bt_error(BT_ERR_MODEL, "%s: \"head_dim\" %lld must be even (rotary pairs)", r->file,
                        (long long)c->head_dim);
    return BT_OK;
}

static bt_status read_gpt2(reader *r, bt_hf_config *c)
{
    BT_TRY(get_int(r, "vocab_size", 1, INT32_MAX, 1, &c->vocab));
    BT_TRY(get_int(r, "n_embd", 1, 1 << 20, 1, &c->hidden));
    BT_TRY(get_int(r, "n_layer", 1, 4096, 1, &c->layers));
    BT_TRY(get_int(r, "n_head", 1, 4096, 1, &c->heads));
    BT_TRY(get_int(r, "n_positions", 1, INT32_MAX, 1, &c->max_positions));
    c->intermediate = 4 * c->hidden;
    BT_TRY(get_int(r, "n_inner", 1, 1 << 22, 0, &c->intermediate));
    c->norm_eps = 1e-5;
    BT_TRY(get_num(r, "layer_norm_epsilon", 0, 1, 0, &c->norm_eps));
    snprintf(c->act, sizeof c->act, "gelu_new");
    BT_TRY(get_str(r, "activation_function", c->act, sizeof c->act));
    if (strcmp(c->act, "gelu_pytorch_tanh") == 0) snprintf(c->act, sizeof c->act, "gelu_new");
    if (strcmp(c->act, "gelu_new") != 0 && strcmp(c->act, "gelu") != 0)
        return bt_error(BT_ERR_MODEL,
                        "%s: \"activation_function\": \"%s\" is not implemented (baton implements "
                        "gelu_new, gelu_pytorch_tanh and gelu)",
                        r->file, c->act);
    if (c->hidden % c->heads != 0)
        return bt_error(BT_ERR_MODEL, "%s: \"n_embd\" %lld is not a multiple of \"n_head\" %lld",
                        r->file, (long long)c->hidden, (long long)c->heads);
    c->kv_heads = c->heads;
    c->head_dim = c->hidden / c->heads;
    c->tied = 1;
    BT_TRY(get_bool(r, "tie_word_embeddings", &c->tied));
    c->attention_bias = c->mlp_bias = 1;
    BT_TRY(need_bool(r, "scale_attn_weights", 1, "attention scores without 1/sqrt(head_dim)"));
    BT_TRY(need_bool(r, "scale_attn_by_inverse_layer_idx", 0, "scores scaled by 1/(layer + 1)"));
    BT_TRY(need_bool(r, "reorder_and_upcast_attn", 0, "the reordered, upcast attention"));
    BT_TRY(need_bool(r, "add_cross_attention", 0, "cross-attention layers"));
    BT_TRY(get_dropout(r, "resid_pdrop", c));
    BT_TRY(get_dropout(r, "embd_pdrop", c));
    BT_TRY(get_dropout(r, "attn_pdrop", c));
    return BT_OK;
}

bt_status bt_hf_config_read(const char *dir, bt_hf_config *out)
{
    char path[4096];
    memset(out, 0, sizeof *out);
    out->bos = -1;
    if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
        return bt_error(BT_ERR_INVALID_ARG, "%s: path too long", dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (jerr.line < 1) return bt_error(BT_ERR_IO, "%s: %s", path, jerr.text);
        return bt_error(BT_ERR_MODEL, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    bt_status st = BT_OK;
    reader r = {path, root, {0}, 0};
    if (!json_is_object(root)) {
        st = bt_error(BT_ERR_MODEL, "%s: the file must hold one JSON object", path);
        goto done;
    }
    BT_TRY_GOTO(st, get_str(&r, "model_type", out->model_type, sizeof out->model_type), done);
    const arch_def *a = NULL;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i].model_type, out->model_type) == 0) a = &archs[i];
    if (!a) {
        st = bt_error(BT_ERR_MODEL,
                      "%s: \"model_type\": \"%s\" is not implemented (baton implements llama, qwen2, "
                      "mistral and gpt2)",
                      path, out->model_type[0] ? out->model_type : "(missing)");
        goto done;
    }
    out->arch = a->arch;
    snprintf(out->architecture, sizeof out->architecture, "%s", a->architecture);
    /* architectures: absent, or exactly this family's causal LM */
    mark(&r, "architectures");
    json_t *list = json_object_get(root, "architectures");
    if (list && !json_is_null(list)) {
        size_t i;
        json_t *e;
        if (!json_is_array(list) || json_array_size(list) == 0) {
            st = bt_error(BT_ERR_MODEL, "%s: \"architectures\" must be a list of names", path);
            goto done;
        }
        json_array_foreach(list, i, e) {
            if (!json_is_string(e) || strcmp(json_string_value(e), a->architecture) != 0) {
                st = bt_error(BT_ERR_MODEL,
                              "%s: \"architectures\": \"%s\" is not implemented for model_type %s "
                              "(baton implements %s)",
                              path, json_is_string(e) ? json_string_value(e) : "(not a string)",
                              a->model_type, a->architecture);
                goto done;
            }
        }
    }
    if (json_object_get(root, "quantization_config")) {
        st = bt_error(BT_ERR_MODEL,
                      "%s: \"quantization_config\": quantized weights are not implemented", path);
        goto done;
    }
    BT_TRY_GOTO(st, get_str(&r, "torch_dtype", out->dtype, sizeof out->dtype), done);
    if (out->dtype[0] && strcmp(out->dtype, "float32") && strcmp(out->dtype, "bfloat16") &&
        strcmp(out->dtype, "float16")) {
        st = bt_error(BT_ERR_MODEL,
                      "%s: \"torch_dtype\": \"%s\" is not implemented (float32, bfloat16, float16)",
                      path, out->dtype);
        goto done;
    }
    BT_TRY_GOTO(st, read_tokens(&r, out), done);
    if (a->arch == BT_HF_GPT2)
        st = read_gpt2(&r, out);
    else
        st = read_llama_family(&r, out);
    if (st != BT_OK) goto done;
    {
        const char *key;
        json_t *val;
        json_object_foreach(root, key, val) {
            if (was_used(&r, key) || is_harmless(key)) continue;
            st = bt_error(BT_ERR_MODEL,
                          "%s: \"%s\" is not a %s setting baton knows; refusing rather than guess "
                          "whether it changes the model",
                          path, key, a->model_type);
            goto done;
        }
    }
done:
    json_decref(root);
    return st;
}
