"""tests/hf_models.py: tiny random Hugging Face models written by transformers 4.40.2 itself, one
directory each (config.json, model.safetensors, generation_config.json), from the configs in
tests/hf/configs/ (llama3-scaled's rope_scaling, head_dim and mlp_bias, which 4.40.2 cannot
build, are put back into its written config.json as Meta's files have them). For each it also
writes params.json: every tensor of the safetensors file with its shape, the names and shapes baton
must give the same model (GPT-2's Conv1D weights are stored [in, out]; baton's linear is [out, in]).
Usage: hf_models.py SRCDIR OUTDIR."""
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open

src, out = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
CLASSES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
           "mistral": "MistralForCausalLM", "gpt2": "GPT2LMHeadModel"}
for name in ["llama-gqa", "llama3-scaled", "qwen2", "mistral", "gpt2"]:
    d = json.load(open(os.path.join(src, "tests/hf/configs", name + ".json")))
    extra = {k: d.pop(k) for k in ["rope_scaling", "head_dim", "mlp_bias"] if k in d}
    d.pop("transformers_version", None)
    config = transformers.AutoConfig.for_model(**d)
    model = getattr(transformers, CLASSES[d["model_type"]])(config)
    path = os.path.join(out, name)
    model.save_pretrained(path, safe_serialization=True)
    if extra:
        c = json.load(open(os.path.join(path, "config.json")))
        c.update(extra)
        json.dump(c, open(os.path.join(path, "config.json"), "w"), indent=2, sort_keys=True)
    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        params = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    json.dump(params, open(os.path.join(path, "params.json"), "w"), indent=1, sort_keys=True)
print("transformers", transformers.__version__, "wrote", out)
