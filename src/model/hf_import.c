/* model/hf_import.c: the baton model file equivalent to a Hugging Face directory's config.json
 * (hf_config.c), as YAML text for the usual loader (loader.c), and what `baton import` writes.
 *
 * Layers are named so that parameters carry the checkpoint's own names (model.layers.3.self_attn.
 * q_proj.weight; transformer.h.0.attn.c_attn.weight): a repeated block per decoder layer.
 *   Llama, Qwen2, Mistral: embed_tokens; per layer input_layernorm (rmsnorm), q/k/v_proj joined by
 *   concat into attention's q|k|v rows, rope, attention (kv_heads, head_dim, Mistral's window),
 *   o_proj, the residual add, post_attention_layernorm, gate/up_proj joined, swiglu, down_proj,
 *   the residual add; then model.norm and lm_head (tied to embed_tokens where the config ties).
 *   GPT-2: wte, wpe (learned positions), per layer ln_1, attn.c_attn (Conv1D: its [in, out]
 *   weight is transposed when loaded), attention, attn.c_proj, ln_2, mlp.c_fc, gelu (tanh form
 *   for gelu_new), mlp.c_proj; ln_f and the tied lm_head.
 * Inputs are input_ids and labels of `context` positions (a loss layer reads them, so the same file
 * trains, profiles and serves). Nothing here approximates: every number comes from the config,
 * which refused what baton does not implement. */
#include "model/hf_import.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/model.h"
#include "core/error.h"

typedef struct text {
    char *s;
    size_t n, cap;
    int oom;
} text;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void put(text *t, const char *fmt, ...)
{
    if (t->oom) return;
    va_list ap;
    va_start(ap, fmt);
    char one[1024];
    const int k = vsnprintf(one, sizeof one, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof one) {
        t->oom = 1;
        return;
    }
    if (t->n + (size_t)k + 1 > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        while (cap < t->n + (size_t)k + 1) cap *= 2;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
    memcpy(t->s + t->n, one, (size_t)k + 1);
    t->n += (size_t)k;
}

static const char *yes(int b) { return b ? "true" : "false"; }

/* x in the fewest digits that read back as x, into buf */
static const char *num(double x, char buf[32])
{
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, 32, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

/* rope's arguments (a flow mapping's inside) */
static void rope_args(text *t, const bt_hf_config *c)
{
    char b1[32], b2[32], b3[32], b4[32];
    put(t, "heads: %lld, kv_heads: %lld, head_dim: %lld, theta: %s", (long long)c->heads,
        (long long)c->kv_heads, (long long)c->head_dim, num(c->rope_theta, b1));
    if (c->rope_llama3)
        put(t, ", scaling: llama3, factor: %s, low_freq_factor: %s, high_freq_factor: %s, "
               "original_max_position_embeddings: %lld",
            num(c->rope_factor, b2), num(c->rope_low_freq_factor, b3),
            num(c->rope_high_freq_factor, b4), (long long)c->rope_original_max);
}

static void llama_layers(text *t, const bt_hf_config *c)
{
    char eb[32];
    const long long C = c->hidden, H = c->heads, KV = c->kv_heads, D = c->head_dim;
    const int qkv_bias = c->attention_bias, o_bias = c->attention_bias && !c->qkv_bias_only;
    put(t, "  - {name: model.embed_tokens, op: embedding, args: {num: %lld, dim: %lld, std: 0.02}, "
           "from: input_ids}\n",
        (long long)c->vocab, C);
    put(t, "  - name: model.layers\n    repeat: %lld\n    layers:\n", (long long)c->layers);
    put(t, "      - {name: input_layernorm, op: rmsnorm, args: {eps: %s}}\n", num(c->norm_eps, eb));
    put(t, "      - {name: self_attn.q_proj, op: linear, args: {out: %lld, bias: %s}}\n", H * D,
        yes(qkv_bias));
    put(t, "      - {name: self_attn.k_proj, op: linear, args: {out: %lld, bias: %s}, "
           "from: input_layernorm}\n",
        KV * D, yes(qkv_bias));
    put(t, "      - {name: self_attn.v_proj, op: linear, args: {out: %lld, bias: %s}, "
           "from: input_layernorm}\n",
        KV * D, yes(qkv_bias));
    put(t, "      - {name: self_attn.qkv, op: concat, from: [self_attn.q_proj, self_attn.k_proj, "
           "self_attn.v_proj]}\n");
    put(t, "      - {name: self_attn.rope, op: rope, args: {");
    rope_args(t, c);
    put(t, "}}\n");
    put(t, "      - {name: self_attn.attn, op: attention, args: {heads: %lld, kv_heads: %lld, "
           "head_dim: %lld",
        H, KV, D);
    if (c->sliding_window > 0) put(t, ", window: %lld", (long long)c->sliding_window);
    put(t, "}}\n");
    put(t, "      - {name: self_attn.o_proj, op: linear, args: {out: %lld, bias: %s}}\n", C,
        yes(o_bias));
    put(t, "      - {name: attn_residual, op: add, from: [-1, -9]}\n"); /* -9: the block's input */
    put(t, "      - {name: post_attention_layernorm, op: rmsnorm, args: {eps: %s}}\n", num(c->norm_eps, eb));
    put(t, "      - {name: mlp.gate_proj, op: linear, args: {out: %lld, bias: %s}}\n",
        (long long)c->intermediate, yes(c->mlp_bias));
    put(t, "      - {name: mlp.up_proj, op: linear, args: {out: %lld, bias: %s}, "
           "from: post_attention_layernorm}\n",
        (long long)c->intermediate, yes(c->mlp_bias));
    put(t, "      - {name: mlp.gate_up, op: concat, from: [mlp.gate_proj, mlp.up_proj]}\n");
    put(t, "      - {name: mlp.act, op: swiglu}\n");
    put(t, "      - {name: mlp.down_proj, op: linear, args: {out: %lld, bias: %s}}\n", C,
        yes(c->mlp_bias));
    put(t, "      - {name: mlp_residual, op: add, from: [-1, attn_residual]}\n");
    put(t, "  - {name: model.norm, op: rmsnorm, args: {eps: %s}}\n", num(c->norm_eps, eb));
    put(t, "  - {name: lm_head, op: linear, args: {out: %lld, bias: false}%s}\n",
        (long long)c->vocab, c->tied ? ", tie: model.embed_tokens" : "");
}

static void gpt2_layers(text *t, const bt_hf_config *c)
{
    char eb[32];
    const long long C = c->hidden;
    put(t, "  - {name: transformer.wte, op: embedding, args: {num: %lld, dim: %lld, std: 0.02}, "
           "from: input_ids}\n",
        (long long)c->vocab, C);
    put(t, "  - {name: transformer.wpe, op: pos_embedding, args: {num: %lld, std: 0.01}}\n",
        (long long)c->max_positions);
    put(t, "  - name: transformer.h\n    repeat: %lld\n    layers:\n", (long long)c->layers);
    put(t, "      - {name: ln_1, op: layernorm, args: {eps: %s}}\n", num(c->norm_eps, eb));
    put(t, "      - {name: attn.c_attn, op: linear, args: {out: %lld}}\n", 3 * C);
    put(t, "      - {name: attn.attn, op: attention, args: {heads: %lld}}\n", (long long)c->heads);
    put(t, "      - {name: attn.c_proj, op: linear, args: {out: %lld}}\n", C);
    put(t, "      - {name: attn_residual, op: add, from: [-1, -5]}\n"); /* -5: the block's input */
    put(t, "      - {name: ln_2, op: layernorm, args: {eps: %s}}\n", num(c->norm_eps, eb));
    put(t, "      - {name: mlp.c_fc, op: linear, args: {out: %lld}}\n", (long long)c->intermediate);
    put(t, "      - {name: mlp.act, op: gelu, args: {approx: %s}}\n",
        strcmp(c->act, "gelu_new") == 0 ? "tanh" : "none");
    put(t, "      - {name: mlp.c_proj, op: linear, args: {out: %lld}}\n", C);
    put(t, "      - {name: mlp_residual, op: add, from: [-1, attn_residual]}\n");
    put(t, "  - {name: transformer.ln_f, op: layernorm, args: {eps: %s}}\n", num(c->norm_eps, eb));
    put(t, "  - {name: lm_head, op: linear, args: {out: %lld, bias: false}%s}\n",
        (long long)c->vocab, c->tied ? ", tie: transformer.wte" : "");
}

int64_t bt_hf_default_context(const bt_hf_config *c)
{
    return c->max_positions < BT_HF_DEFAULT_CONTEXT ? c->max_positions : BT_HF_DEFAULT_CONTEXT;
}

bt_status bt_model_hf_check_weights(const bt_model *m, int training)
{
    if (!m) return bt_error(BT_ERR_INVALID_ARG, "bt_model_hf_check_weights: NULL model");
    if (!m->hf_dir) return BT_OK;
    bt_hf_config c;
    BT_TRY(bt_hf_config_read(m->hf_dir, &c));
    if (c.arch == BT_HF_GPT2)
        return bt_error(BT_ERR_UNSUPPORTED,
                        "%s: GPT2LMHeadModel's Conv1D weights are stored [in, out], and baton does not "
                        "transpose them on loading yet (check, profile and plan take the directory)",
                        m->hf_dir);
    if (training && c.dropout > 0)
        return bt_error(BT_ERR_UNSUPPORTED,
                        "%s: config.json's %s is %g, and baton's model of it has no dropout: training "
                        "would not be the model's (set it to 0 to train without)",
                        m->hf_dir, c.dropout_key, c.dropout);
    return BT_OK;
}

bt_status bt_model_hf_yaml(const char *dir, long long context, char **out_yaml)
{
    if (!dir || !out_yaml) return bt_error(BT_ERR_INVALID_ARG, "bt_model_hf_yaml: NULL argument");
    *out_yaml = NULL;
    bt_hf_config c;
    BT_TRY(bt_hf_config_read(dir, &c));
    return bt_hf_model_yaml(&c, dir, context > 0 ? context : bt_hf_default_context(&c), out_yaml);
}

bt_status bt_hf_model_yaml(const bt_hf_config *c, const char *dir, int64_t context, char **out)
{
    *out = NULL;
    if (context < 1 || context > c->max_positions)
        return bt_error(BT_ERR_INVALID_ARG,
                        "%s: a context of %lld positions (the model has %lld: 1 to that)", dir,
                        (long long)context, (long long)c->max_positions);
    text t = {0};
    put(&t, "# The baton model of the Hugging Face directory %s (%s, written by baton import from its\n"
            "# config.json). Parameter names are the checkpoint's. Edit the parallel: and train:\n"
            "# sections as for any model; the context is inputs' shape (both inputs alike).\n",
        dir, c->architecture);
    put(&t, "format: 1\n");
    put(&t, "inputs:\n  input_ids: {shape: [%lld], dtype: i32}\n  labels: {shape: [%lld], dtype: i32}\n",
        (long long)context, (long long)context);
    put(&t, "layers:\n");
    if (c->arch == BT_HF_GPT2)
        gpt2_layers(&t, c);
    else
        llama_layers(&t, c);
    put(&t, "  - {name: loss, op: cross_entropy, from: [lm_head, labels]}\n");
    put(&t, "parallel:\n  devices: auto\n  pipeline: {stages: 1, microbatches: 1}\n");
    if (t.oom) {
        free(t.s);
        return bt_error(BT_ERR_NOMEM, "%s: writing its baton model: out of memory", dir);
    }
    *out = t.s;
    return BT_OK;
}
