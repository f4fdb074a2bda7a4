/* tests/test_models.h: graphs several test programs build through the C API, and reading a
 * trained engine's parameters back to compare runs. */
#ifndef BT_TEST_MODELS_H
#define BT_TEST_MODELS_H

#include "baton.h"
#include "bt_test.h"

/* x[in] -> fc1(tanh) -> fc2(relu) -> ln -> skip = ln + fc1 -> fc3(gelu) -> head[classes]
 * -> loss(head, label): seven layers with a residual that skips stages when fc1 is cut off. */
static inline bt_graph *bt_test_residual_graph(int64_t in, int64_t hidden, int64_t classes)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, &in, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_layer_desc d;
    const char *skip_in[] = {"ln", "fc1"}, *loss_in[] = {"head", "label"};
    bt_args_set_int(a, "out", hidden);
    bt_layer_desc_init(&d), d.name = "fc1", d.op = "linear", d.args = a, d.act = "tanh";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc2", d.op = "linear", d.args = a, d.act = "relu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "ln", d.op = "layernorm";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "skip", d.op = "add", d.inputs = skip_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc3", d.op = "linear", d.args = a, d.act = "gelu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_set_int(a, "out", classes);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    return g;
}

/* A model file (test_gpt, test_cuda_engine): every op a GPT may decode beside the block's: rmsnorm,
 * split, concat, matmul and transpose of [T, 4, 4] rows (the sequence a leading dimension),
 * reshape, silu, mul. */
static const char bt_test_decode_mix_yaml[] =
    "format: 1\n"
    "inputs:\n"
    "  idx: {shape: [9], dtype: i32}\n"
    "  label: {shape: [9], dtype: i32}\n"
    "layers:\n"
    "  - {name: wte, op: embedding, args: {num: 13, dim: 16, std: 0.5}, from: idx}\n"
    "  - {name: wpe, op: pos_embedding, args: {num: 9, std: 0.3}}\n"
    "  - {name: n1, op: rmsnorm}\n"
    "  - {name: qkv, op: linear, args: {out: 48}}\n"
    "  - {name: attn, op: attention, args: {heads: 4, block: 4}}\n"
    "  - {name: v, op: split, args: {parts: 3, index: 2}, from: qkv}\n"
    "  - {name: cat, op: concat, from: [attn, v]}\n"
    "  - {name: proj, op: linear, args: {out: 16}}\n"
    "  - {name: res, op: add, from: [-1, wpe]}\n"
    "  - {name: sq, op: reshape, args: {shape: [9, 4, 4]}}\n"
    "  - {name: tr, op: transpose}\n"
    "  - {name: mm, op: matmul, from: [sq, tr]}\n"
    "  - {name: flat, op: reshape, args: {shape: [9, 16]}}\n"
    "  - {name: gate, op: silu, from: res}\n"
    "  - {name: glu, op: mul, from: [flat, gate]}\n"
    "  - {name: n2, op: rmsnorm}\n"
    "  - {name: head, op: linear, args: {out: 13}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n";

/* A model file (test_gpt, test_cuda_engine): two Llama-style decoder blocks of the Hugging Face ops
 * (rmsnorm, a q|k|v linear with biases as Qwen2's, rope with llama3 scaling, grouped-query
 * attention 4/2 with a sliding window of 5 < T, swiglu), then gelu's tanh form before the head. */
static const char bt_test_decode_llama_yaml[] =
    "format: 1\n"
    "inputs:\n"
    "  idx: {shape: [9], dtype: i32}\n"
    "  label: {shape: [9], dtype: i32}\n"
    "layers:\n"
    "  - {name: wte, op: embedding, args: {num: 13, dim: 16, std: 0.5}, from: idx}\n"
    "  - name: layers\n"
    "    repeat: 2\n"
    "    layers:\n"
    "      - {name: input_layernorm, op: rmsnorm}\n"
    "      - {name: qkv, op: linear, args: {out: 32}}\n"
    "      - {name: rope, op: rope, args: {heads: 4, kv_heads: 2, theta: 500000, scaling: llama3, factor: 8,\n"
    "                                      low_freq_factor: 1, high_freq_factor: 4,\n"
    "                                      original_max_position_embeddings: 16}}\n"
    "      - {name: attn, op: attention, args: {heads: 4, kv_heads: 2, window: 5, block: 4}}\n"
    "      - {name: o_proj, op: linear, args: {out: 16, bias: false}}\n"
    "      - {name: res_1, op: add, from: [-1, -6]}\n"
    "      - {name: post_attention_layernorm, op: rmsnorm}\n"
    "      - {name: gate_up, op: linear, args: {out: 48, bias: false}}\n"
    "      - {name: mlp, op: swiglu}\n"
    "      - {name: down_proj, op: linear, args: {out: 16, bias: false}}\n"
    "      - {name: res_2, op: add, from: [-1, res_1]}\n"
    "  - {name: norm, op: rmsnorm, from: layers}\n"
    "  - {name: act, op: gelu, args: {approx: tanh}}\n"
    "  - {name: lm_head, op: linear, args: {out: 13, bias: false}}\n"
    "  - {name: loss, op: cross_entropy, from: [lm_head, label]}\n";

/* Reads every parameter of g from e into params[i] (malloc'ed, sizes[i] bytes; f32), at most
 * max of them; returns how many (the caller frees them). */
static inline int bt_test_read_params(bt_engine *e, const bt_graph *g, float **params, size_t *sizes, int max)
{
    const int n = bt_graph_num_params(g);
    CU_ASSERT_FATAL(n <= max);
    for (int i = 0; i < n; i++) {
        bt_param_info info;
        bt_graph_param(g, i, &info);
        sizes[i] = (size_t)bt_shape_numel(&info.shape) * sizeof(float);
        params[i] = malloc(sizes[i]);
        CU_ASSERT_FATAL(bt_engine_read_param(e, info.name, params[i], sizes[i]) == BT_OK);
    }
    return n;
}

#endif
