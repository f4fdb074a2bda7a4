"""tests/hf_logits.py: the fixtures of tests/hf_logits.sh, written by transformers 4.40.2 itself:
for a tiny random model of each Llama-family architecture (Llama with GQA and an untied head, Qwen2
with q/k/v biases and a tied head, Mistral with a sliding window of 5 over 16 positions),
tests/hf/models/NAME/ holds what save_pretrained wrote (config.json, model.safetensors), and
NAME.ids.npy / NAME.logits.npy a batch of token ids and the model's logits for them (f32, eager
attention). Mistral's reference runs with sliding_window W - 1: transformers 4.40.2 lets a query
see W + 1 positions where the window's meaning (and baton) is W (../shared HF-NOTES).
Usage, in a venv with transformers==4.40.2 on Debian's PyTorch: python tests/hf_logits.py SRCDIR"""
import os
import sys

import numpy as np
import torch
import transformers

src = sys.argv[1]
out = os.path.join(src, "tests/hf/models")
common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=32)
models = {
    "llama": transformers.LlamaConfig(num_key_value_heads=2, rope_theta=500000.0,
                                      tie_word_embeddings=False, **common),
    "qwen2": transformers.Qwen2Config(num_key_value_heads=1, tie_word_embeddings=True, **common),
    "mistral": transformers.MistralConfig(num_key_value_heads=2, sliding_window=5, **common),
}
rng = np.random.default_rng(0)
for name, config in models.items():
    torch.manual_seed(1)
    config.architectures = [type(config).__name__.replace("Config", "ForCausalLM")]
    model = transformers.AutoModelForCausalLM.from_config(config)
    for p in model.parameters():  # larger weights than the default init: logits of scale ~1
        torch.nn.init.normal_(p, std=0.2)
    path = os.path.join(out, name)
    model.save_pretrained(path, safe_serialization=True)
    os.remove(os.path.join(path, "generation_config.json"))
    ids = rng.integers(0, config.vocab_size, size=(3, 16)).astype(np.int32)
    ref = config
    if name == "mistral":
        ref = transformers.AutoConfig.from_pretrained(path)
        ref.sliding_window -= 1
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(path, config=ref,
                                                                  attn_implementation="eager")
    with torch.no_grad():
        logits = ref_model.eval()(torch.tensor(ids, dtype=torch.long)).logits.numpy()
    np.save(os.path.join(out, name + ".ids.npy"), ids)
    np.save(os.path.join(out, name + ".logits.npy"), logits.astype(np.float32))
    print(name, logits.shape, "max |logit|", float(np.abs(logits).max()))
