# tests/hf_ops_ref.py: baton's transformer ops against the formulas of Hugging Face's decoder
# layers, written out here in PyTorch (float64), for tests/hf_ops.sh. For each layer kind it writes
# a one-layer baton model (YAML), random weights (safetensors, HF's tensor roles under baton's
# layer names) and inputs (npy), runs `baton predict`, and compares the output with the reference
# computed from the same arrays:
#   - Llama 3 (grouped-query heads 4/2, rope_theta 500000, rope_scaling llama3 with frequencies in
#     all three of its bands), Qwen2 (multi-query 3/1, q/k/v biases), Mistral (sliding_window 5 of
#     T = 12, attention tiles of 5), a Llama with head_dim != hidden / heads: RMSNorm, q_proj |
#     k_proj | v_proj stacked into one linear, rotary embedding by rotate_half, repeat_kv,
#     causal (and windowed) softmax, o_proj, residual, RMSNorm, act(gate_proj) * up_proj, down_proj,
#     residual;
#   - GPT-2: LayerNorm, the fused c_attn (Conv1D: its [in, out] weight transposed into linear's
#     [out, in]), multi-head causal attention, c_proj, residual, LayerNorm, c_fc, gelu_new, c_proj,
#     residual.
# The reference's inverse frequencies follow Meta's Llama 3.1 description (wavelength bands against
# the original context), computed here, not by baton. Per HF-NOTES, sliding_window W means the
# last W positions, the query's own included. Each model runs in f64 (agreement within 1e-10) and
# in f32 (within 1e-5, inputs and weights rounded to f32 first): max |baton - ref| / max(1, |ref|).
# Usage: hf_ops_ref.py BATON TMPDIR; prints one line per run, exits 1 on any disagreement.
import json
import math
import struct
import subprocess
import sys

import numpy as np
import torch

BATON, TMP = sys.argv[1], sys.argv[2]
N, T = 3, 12  # samples, positions


def write_npy(path, a):
    np.save(path, np.ascontiguousarray(a))


def write_safetensors(path, tensors):
    """safetensors: an 8-byte little-endian header length, the JSON header, the raw data."""
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dtype = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ---- the reference: HF's layers as formulas --------------------------------------------------

def inv_freq(theta, hd, llama3):
    """f_i = theta^(-2i/hd); llama3: f / factor in the low band, f in the high one, a smooth mix
    between, the bands set by the wavelength 2 pi / f against the original context."""
    f = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    if not llama3:
        return f
    factor, lo, hi, ctx = (llama3[k] for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                "original_max_position_embeddings"))
    wavelen = 2 * math.pi / f
    out = np.empty_like(f)
    for i in range(len(f)):
        if wavelen[i] < ctx / hi:
            out[i] = f[i]
        elif wavelen[i] > ctx / lo:
            out[i] = f[i] / factor
        else:
            s = (ctx / wavelen[i] - lo) / (hi - lo)
            out[i] = (1 - s) * f[i] / factor + s * f[i]
    return out


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary(x, freqs):
    """x (N, heads, T, hd) turned by position * freqs, HF's q * cos + rotate_half(q) * sin"""
    ang = torch.arange(x.shape[2], dtype=torch.float64)[:, None] * torch.from_numpy(freqs)[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return x * ang.cos() + rotate_half(x) * ang.sin()


def attend(q, k, v, window):
    """q (N, H, T, hd), k and v (N, KVH, T, hd): repeat_kv, causal (windowed) softmax, times v"""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    i = torch.arange(q.shape[2])[:, None]
    j = torch.arange(q.shape[2])[None, :]
    hidden = j > i
    if window:
        hidden = hidden | (j <= i - window)
    s = s.masked_fill(hidden, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def heads_of(x, n, hd):
    return x.view(x.shape[0], x.shape[1], n, hd).transpose(1, 2)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def llama_layer(x, p, cfg):
    H, KVH, hd = cfg["heads"], cfg["kv_heads"], cfg["head_dim"]
    h = rms_norm(x, p["input_layernorm.weight"], cfg["eps"])
    lin = torch.nn.functional.linear
    q = lin(h, p["q_proj.weight"], p.get("q_proj.bias"))
    k = lin(h, p["k_proj.weight"], p.get("k_proj.bias"))
    v = lin(h, p["v_proj.weight"], p.get("v_proj.bias"))
    freqs = inv_freq(cfg["theta"], hd, cfg.get("llama3"))
    q = rotary(heads_of(q, H, hd), freqs)
    k = rotary(heads_of(k, KVH, hd), freqs)
    a = attend(q, k, heads_of(v, KVH, hd), cfg.get("window", 0))
    a = a.transpose(1, 2).reshape(x.shape[0], x.shape[1], H * hd)
    r = x + lin(a, p["o_proj.weight"])
    h = rms_norm(r, p["post_attention_layernorm.weight"], cfg["eps"])
    g = torch.nn.functional.silu(lin(h, p["gate_proj.weight"])) * lin(h, p["up_proj.weight"])
    return r + lin(g, p["down_proj.weight"])


def gelu_new(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt2_layer(x, p, cfg):
    H, C = cfg["heads"], x.shape[-1]
    ln = torch.nn.functional.layer_norm
    h = ln(x, (C,), p["ln_1.weight"], p["ln_1.bias"], cfg["eps"])
    qkv = h @ p["c_attn.weight"] + p["c_attn.bias"]  # Conv1D: x W + b, W [in, out]
    q, k, v = (heads_of(t, H, C // H) for t in qkv.split(C, dim=-1))
    a = attend(q, k, v, 0).transpose(1, 2).reshape(x.shape)
    r = x + a @ p["attn.c_proj.weight"] + p["attn.c_proj.bias"]
    h = ln(r, (C,), p["ln_2.weight"], p["ln_2.bias"], cfg["eps"])
    m = gelu_new(h @ p["c_fc.weight"] + p["c_fc.bias"])
    return r + m @ p["mlp.c_proj.weight"] + p["mlp.c_proj.bias"]


# ---- the baton side: one model per layer kind ------------------------------------------------

def args_text(d):
    return "{" + ", ".join("%s: %s" % (k, json.dumps(v) if isinstance(v, str) else v)
                           for k, v in d.items()) + "}"


def llama_yaml(cfg, dtype):
    H, KVH, hd, C, I = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["hidden"], cfg["inter"]
    heads = {"heads": H, "kv_heads": KVH, "head_dim": hd}
    rope = dict(heads, theta=cfg["theta"])
    if cfg.get("llama3"):
        rope["scaling"] = "llama3"
        rope.update(cfg["llama3"])
    attn = dict(heads)
    if cfg.get("window"):
        attn["window"] = cfg["window"]
    if cfg.get("block"):
        attn["block"] = cfg["block"]
    bias = "true" if cfg.get("qkv_bias") else "false"
    return f"""format: 1
name: hf-{cfg['name']}
dtype: {dtype}
inputs:
  x: {{shape: [{T}, {C}]}}
layers:
  - {{name: input_layernorm, op: rmsnorm, args: {{eps: {cfg['eps']}}}, from: x}}
  - {{name: qkv, op: linear, args: {{out: {(H + 2 * KVH) * hd}, bias: {bias}}}}}
  - {{name: rope, op: rope, args: {args_text(rope)}}}
  - {{name: attn, op: attention, args: {args_text(attn)}}}
  - {{name: o_proj, op: linear, args: {{out: {C}, bias: false}}}}
  - {{name: res_1, op: add, from: [-1, x]}}
  - {{name: post_attention_layernorm, op: rmsnorm, args: {{eps: {cfg['eps']}}}}}
  - {{name: gate_up, op: linear, args: {{out: {2 * I}, bias: false}}}}
  - {{name: mlp, op: swiglu}}
  - {{name: down_proj, op: linear, args: {{out: {C}, bias: false}}}}
  - {{name: res_2, op: add, from: [-1, res_1]}}
"""


def llama_weights(cfg, rng):
    H, KVH, hd, C, I = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["hidden"], cfg["inter"]
    p = {
        "input_layernorm.weight": 1 + 0.1 * rng.standard_normal(C),
        "q_proj.weight": rng.standard_normal((H * hd, C)) / math.sqrt(C),
        "k_proj.weight": rng.standard_normal((KVH * hd, C)) / math.sqrt(C),
        "v_proj.weight": rng.standard_normal((KVH * hd, C)) / math.sqrt(C),
        "o_proj.weight": rng.standard_normal((C, H * hd)) / math.sqrt(H * hd),
        "post_attention_layernorm.weight": 1 + 0.1 * rng.standard_normal(C),
        "gate_proj.weight": rng.standard_normal((I, C)) / math.sqrt(C),
        "up_proj.weight": rng.standard_normal((I, C)) / math.sqrt(C),
        "down_proj.weight": rng.standard_normal((C, I)) / math.sqrt(I),
    }
    if cfg.get("qkv_bias"):
        for n, w in (("q_proj", H), ("k_proj", KVH), ("v_proj", KVH)):
            p[n + ".bias"] = rng.standard_normal(w * hd)
    # baton's names: the three projections stacked by rows (q, k, v), gate and up likewise
    b = {
        "input_layernorm.weight": p["input_layernorm.weight"],
        "qkv.weight": np.concatenate([p["q_proj.weight"], p["k_proj.weight"], p["v_proj.weight"]]),
        "o_proj.weight": p["o_proj.weight"],
        "post_attention_layernorm.weight": p["post_attention_layernorm.weight"],
        "gate_up.weight": np.concatenate([p["gate_proj.weight"], p["up_proj.weight"]]),
        "down_proj.weight": p["down_proj.weight"],
    }
    if cfg.get("qkv_bias"):
        b["qkv.bias"] = np.concatenate([p["q_proj.bias"], p["k_proj.bias"], p["v_proj.bias"]])
    return p, b


def gpt2_yaml(cfg, dtype):
    C, H = cfg["hidden"], cfg["heads"]
    return f"""format: 1
name: hf-gpt2
dtype: {dtype}
inputs:
  x: {{shape: [{T}, {C}]}}
layers:
  - {{name: ln_1, op: layernorm, args: {{eps: {cfg['eps']}}}, from: x}}
  - {{name: c_attn, op: linear, args: {{out: {3 * C}}}}}
  - {{name: attn, op: attention, args: {{heads: {H}}}}}
  - {{name: attn_proj, op: linear, args: {{out: {C}}}}}
  - {{name: res_1, op: add, from: [-1, x]}}
  - {{name: ln_2, op: layernorm, args: {{eps: {cfg['eps']}}}}}
  - {{name: c_fc, op: linear, args: {{out: {4 * C}}}}}
  - {{name: act, op: gelu, args: {{approx: tanh}}}}
  - {{name: mlp_proj, op: linear, args: {{out: {C}}}}}
  - {{name: res_2, op: add, from: [-1, res_1]}}
"""


def gpt2_weights(cfg, rng):
    C = cfg["hidden"]
    p = {
        "ln_1.weight": 1 + 0.1 * rng.standard_normal(C), "ln_1.bias": 0.1 * rng.standard_normal(C),
        "c_attn.weight": rng.standard_normal((C, 3 * C)) / math.sqrt(C),
        "c_attn.bias": 0.1 * rng.standard_normal(3 * C),
        "attn.c_proj.weight": rng.standard_normal((C, C)) / math.sqrt(C),
        "attn.c_proj.bias": 0.1 * rng.standard_normal(C),
        "ln_2.weight": 1 + 0.1 * rng.standard_normal(C), "ln_2.bias": 0.1 * rng.standard_normal(C),
        "c_fc.weight": rng.standard_normal((C, 4 * C)) / math.sqrt(C),
        "c_fc.bias": 0.1 * rng.standard_normal(4 * C),
        "mlp.c_proj.weight": rng.standard_normal((4 * C, C)) / math.sqrt(4 * C),
        "mlp.c_proj.bias": 0.1 * rng.standard_normal(C),
    }
    b = {  # Conv1D's [in, out] weights are linear's [out, in] transposed
        "ln_1.weight": p["ln_1.weight"], "ln_1.bias": p["ln_1.bias"],
        "c_attn.weight": p["c_attn.weight"].T, "c_attn.bias": p["c_attn.bias"],
        "attn_proj.weight": p["attn.c_proj.weight"].T, "attn_proj.bias": p["attn.c_proj.bias"],
        "ln_2.weight": p["ln_2.weight"], "ln_2.bias": p["ln_2.bias"],
        "c_fc.weight": p["c_fc.weight"].T, "c_fc.bias": p["c_fc.bias"],
        "mlp_proj.weight": p["mlp.c_proj.weight"].T, "mlp_proj.bias": p["mlp.c_proj.bias"],
    }
    return p, b


LAYERS = [
    {"name": "llama3", "kind": "llama", "hidden": 32, "heads": 4, "kv_heads": 2, "head_dim": 8,
     "inter": 40, "eps": 1e-5, "theta": 500000.0,
     # hd 8, theta 5e5: wavelengths 6.3, 167, 4443, 1.2e5 against 400 / 4 and 400 / 1
     "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 400}},
    {"name": "qwen2", "kind": "llama", "hidden": 24, "heads": 3, "kv_heads": 1, "head_dim": 8,
     "inter": 36, "eps": 1e-6, "theta": 1000000.0, "qkv_bias": True},
    {"name": "mistral", "kind": "llama", "hidden": 32, "heads": 4, "kv_heads": 2, "head_dim": 8,
     "inter": 48, "eps": 1e-5, "theta": 10000.0, "window": 5, "block": 5},
    {"name": "llama-head_dim", "kind": "llama", "hidden": 24, "heads": 4, "kv_heads": 4,
     "head_dim": 8, "inter": 32, "eps": 1e-5, "theta": 10000.0},
    {"name": "gpt2", "kind": "gpt2", "hidden": 32, "heads": 4, "eps": 1e-5},
]


def run(cfg, dtype, rng):
    """baton's output and the reference on the same (for f32: f32-rounded) arrays"""
    kind = cfg["kind"]
    p, b = (llama_weights if kind == "llama" else gpt2_weights)(cfg, rng)
    x = rng.standard_normal((N, T, cfg["hidden"]))
    if dtype == "f32":  # both sides see the same f32 values
        x = x.astype(np.float32).astype(np.float64)
        p = {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}
        b = {k: v.astype(np.float32).astype(np.float64) for k, v in b.items()}
    npd = np.float64 if dtype == "f64" else np.float32
    stem = "%s/%s-%s" % (TMP, cfg["name"], dtype)
    with open(stem + ".yaml", "w") as f:
        f.write((llama_yaml if kind == "llama" else gpt2_yaml)(cfg, dtype))
    write_safetensors(stem + ".safetensors", {k: v.astype(npd) for k, v in b.items()})
    write_npy(stem + "-x.npy", x.astype(npd))
    cmd = [BATON, "predict", stem + ".yaml", "--weights", stem + ".safetensors", "--input",
           stem + "-x.npy", "--output", stem + "-y.npy", "--batch", str(N), "--threads", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        print("FAIL: %s %s: baton predict exited %d: %s" % (cfg["name"], dtype, res.returncode,
                                                            res.stderr.strip()[:400]))
        return None
    got = np.load(stem + "-y.npy").astype(np.float64)
    pt = {k: torch.from_numpy(v) for k, v in p.items()}
    want = (llama_layer if kind == "llama" else gpt2_layer)(torch.from_numpy(x), pt, cfg).numpy()
    if got.shape != want.shape:
        print("FAIL: %s %s: output shaped %s, the reference %s" % (cfg["name"], dtype, got.shape,
                                                                  want.shape))
        return None
    return float(np.max(np.abs(got - want) / np.maximum(1, np.abs(want))))


def main():
    rng = np.random.default_rng(20261201)
    failed = tests = 0
    for cfg in LAYERS:
        for dtype, tol in (("f64", 1e-10), ("f32", 1e-5)):
            tests += 1
            err = run(cfg, dtype, rng)
            if err is None or not err <= tol:
                failed += 1
                if err is not None:
                    print("FAIL: %s %s: baton vs reference %.3g (tolerance %g)" % (cfg["name"], dtype,
                                                                                 err, tol))
                continue
            print("%s %s: baton vs reference %.3g (tolerance %g)" % (cfg["name"], dtype, err, tol))
    print("hf_ops: %d tests, %d failed" % (tests, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
