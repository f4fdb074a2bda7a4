/* tests/test_hf_config.c: config.json of Hugging Face directories (src/model/hf_config.c).
 * tests/hf/configs/ holds files written by transformers 4.40.2's to_json_file for tiny models of
 * each architecture (llama3-scaled.json also carries the rope_scaling, head_dim and mlp_bias keys
 * of Meta's Llama 3.2 files, which 4.40.2 cannot write); each must read with the numbers given to
 * transformers. Then every refusal: an architecture, model_type, rope_scaling type, activation,
 * quantization or unknown key baton does not implement is BT_ERR_MODEL naming the key and
 * value; malformed JSON is BT_ERR_MODEL with line and column. */
#include <stdio.h>
#include <string.h>

#define BT_TEST_TMPDIR
#include "bt_test.h"
#include "core/error.h"
#include "model/hf_config.h"

/* Writes text as tmpdir/config.json and reads it. */
static bt_status read_text(const char *text, bt_hf_config *c)
{
    char path[512];
    FILE *f = fopen(tmp_path("config.json", path, sizeof path), "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
    return bt_hf_config_read(tmpdir, c);
}

static bt_status read_fixture(const char *name, bt_hf_config *c)
{
    char rel[256], src[1024];
    snprintf(rel, sizeof rel, "tests/hf/configs/%s.json", name);
    FILE *f = fopen(bt_test_src(rel, src, sizeof src), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char text[65536];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const bt_status st = read_text(text, c);
    if (st != BT_OK) fprintf(stderr, "%s: %s\n", name, bt_last_error());
    return st;
}

static void test_fixtures(void)
{
    make_tmpdir();
    bt_hf_config c;
    CU_ASSERT_EQUAL_FATAL(read_fixture("llama-gqa", &c), BT_OK);
    CU_ASSERT_EQUAL(c.arch, BT_HF_LLAMA);
    CU_ASSERT_STRING_EQUAL(c.architecture, "LlamaForCausalLM");
    CU_ASSERT(c.vocab == 300 && c.hidden == 64 && c.intermediate == 160 && c.layers == 2);
    CU_ASSERT(c.heads == 4 && c.kv_heads == 2 && c.head_dim == 16 && c.max_positions == 128);
    CU_ASSERT(c.rope_theta == 500000.0 && !c.rope_llama3 && !c.tied && !c.attention_bias);
    CU_ASSERT(c.norm_eps == 1e-6 && c.sliding_window == 0 && strcmp(c.act, "silu") == 0);
    CU_ASSERT(c.bos == 1 && c.n_eos == 1 && c.eos[0] == 2);

    CU_ASSERT_EQUAL_FATAL(read_fixture("llama3-scaled", &c), BT_OK);
    CU_ASSERT(c.kv_heads == 1 && c.tied && c.rope_llama3 && c.rope_factor == 8.0);
    CU_ASSERT(c.rope_low_freq_factor == 1.0 && c.rope_high_freq_factor == 4.0);
    CU_ASSERT(c.rope_original_max == 64 && c.head_dim == 16 && !c.mlp_bias);

    CU_ASSERT_EQUAL_FATAL(read_fixture("qwen2", &c), BT_OK);
    CU_ASSERT(c.arch == BT_HF_QWEN2 && c.attention_bias && c.qkv_bias_only && c.tied);
    CU_ASSERT(c.sliding_window == 0); /* use_sliding_window: false */

    CU_ASSERT_EQUAL_FATAL(read_fixture("mistral", &c), BT_OK);
    CU_ASSERT(c.arch == BT_HF_MISTRAL && c.sliding_window == 16 && !c.tied);

    CU_ASSERT_EQUAL_FATAL(read_fixture("gpt2", &c), BT_OK);
    CU_ASSERT(c.arch == BT_HF_GPT2 && c.hidden == 64 && c.heads == 4 && c.kv_heads == 4);
    CU_ASSERT(c.intermediate == 256 && c.max_positions == 128 && c.tied && c.attention_bias);
    CU_ASSERT(strcmp(c.act, "gelu_new") == 0 && c.norm_eps == 1e-5 && c.rope_theta == 0);
    CU_ASSERT(c.dropout == 0.1 && c.dropout_key[0] != 0);
    CU_ASSERT(bt_hf_is_dir(tmpdir));
    remove_tmpdir();
    CU_ASSERT(!bt_hf_is_dir(tmpdir));
}

#define LLAMA_KEYS                                                                               \
    "\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": "  \
    "16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"max_position_embeddings\": 32, " \
    "\"rms_norm_eps\": 1e-5"

/* text must be refused with status and a message holding every part */
static void refused(const char *text, bt_status status, const char *part1, const char *part2)
{
    bt_hf_config c;
    const bt_status st = read_text(text, &c);
    CU_ASSERT_EQUAL(st, status);
    const char *msg = bt_last_error();
    if (!strstr(msg, part1) || (part2 && !strstr(msg, part2)))
        fprintf(stderr, "message \"%s\" lacks \"%s\" / \"%s\"\n", msg, part1, part2 ? part2 : "");
    CU_ASSERT(strstr(msg, part1) != NULL);
    if (part2) CU_ASSERT(strstr(msg, part2) != NULL);
    CU_ASSERT(strstr(msg, "config.json") != NULL);
}

static void test_refusals(void)
{
    make_tmpdir();
    bt_hf_config c;
    CU_ASSERT_EQUAL(read_text("{" LLAMA_KEYS "}", &c), BT_OK); /* the minimal file reads */
    refused("{\"model_type\": \"bert\"}", BT_ERR_MODEL, "\"model_type\"", "bert");
    refused("{}", BT_ERR_MODEL, "\"model_type\"", "(missing)");
    refused("{" LLAMA_KEYS ", \"architectures\": [\"LlamaForSequenceClassification\"]}",
            BT_ERR_MODEL, "LlamaForSequenceClassification", "LlamaForCausalLM");
    refused("{" LLAMA_KEYS ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}",
            BT_ERR_MODEL, "rope_scaling.rope_type", "yarn");
    refused("{" LLAMA_KEYS ", \"rope_scaling\": {\"type\": \"linear\", \"factor\": 4}}",
            BT_ERR_MODEL, "rope_scaling.rope_type", "linear");
    refused("{" LLAMA_KEYS ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8, "
            "\"low_freq_factor\": 1, \"high_freq_factor\": 4, "
            "\"original_max_position_embeddings\": 64, \"beta\": 2}}",
            BT_ERR_MODEL, "rope_scaling.beta", NULL);
    refused("{" LLAMA_KEYS ", \"quantization_config\": {\"bits\": 4}}", BT_ERR_MODEL,
            "quantization_config", NULL);
    refused("{" LLAMA_KEYS ", \"hidden_act\": \"gelu\"}", BT_ERR_MODEL, "hidden_act", "gelu");
    refused("{" LLAMA_KEYS ", \"frobnicate\": 3}", BT_ERR_MODEL, "\"frobnicate\"", "llama");
    refused("{" LLAMA_KEYS ", \"torch_dtype\": \"int8\"}", BT_ERR_MODEL, "torch_dtype", "int8");
    refused("{" LLAMA_KEYS ", \"num_key_value_heads\": 3}", BT_ERR_MODEL, "num_key_value_heads",
            NULL);
    refused("{\"model_type\": \"llama\", \"vocab_size\": 10, \"hidden_size\": \"8\"}", BT_ERR_MODEL,
            "\"hidden_size\" must be an integer", NULL);
    refused("{\"model_type\": \"llama\", \"vocab_size\": 0}", BT_ERR_MODEL, "\"vocab_size\" is 0", NULL);
    refused("{\"model_type\": \"llama\",\n  \"vocab_size\": 10,,}", BT_ERR_MODEL, "config.json:2:", NULL);
    refused("{\"model_type\": \"llama\", \"model_type\": \"llama\"}", BT_ERR_MODEL, "duplicate", NULL);
    refused("{\"model_type\": \"qwen2\", \"vocab_size\": 10, \"hidden_size\": 8, "
            "\"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
            "\"max_position_embeddings\": 32, \"rms_norm_eps\": 1e-5, \"use_sliding_window\": true}",
            BT_ERR_MODEL, "use_sliding_window", "true");
    refused("{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 8, \"n_layer\": 1, "
            "\"n_head\": 2, \"n_positions\": 16, \"scale_attn_by_inverse_layer_idx\": true}",
            BT_ERR_MODEL, "scale_attn_by_inverse_layer_idx", NULL);
    refused("{\"model_type\": \"gpt2\", \"vocab_size\": 10, \"n_embd\": 8, \"n_layer\": 1, "
            "\"n_head\": 2, \"n_positions\": 16, \"activation_function\": \"relu\"}",
            BT_ERR_MODEL, "activation_function", "relu");
    remove_tmpdir();
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"transformers' config files read with their numbers", test_fixtures},
        {"what baton does not implement is refused, naming it", test_refusals},
        {NULL, NULL},
    };
    return bt_test_main("hf_config", cases);
}
