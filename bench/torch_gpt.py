"""bench/torch_gpt.py: the PyTorch twin of models/gpt-shakespeare.yaml.

The same model (4 blocks of pre-norm causal self-attention and a GELU MLP, 4 heads, 128 channels,
context 64, linear layers without bias, layer norms with bias, the head tied to the token
embedding, embeddings initialised N(0, 0.02), linear layers PyTorch's default), the same data
(data/shakespeare.txt, character vocabulary, the last 10% validate) and the same
hyperparameters (batch 12, AdamW lr 1e-3 betas (0.9, 0.99) weight decay 0.1 on every parameter,
100 linear warm-up steps then cosine to 1e-4, gradient clipping at 1) as `baton run`, with
baton's formulas (src/optim/lr_schedule.c). Attention is the masked softmax(QK^T/sqrt(d))V
written out, as nanoGPT's slow path. Validation is the mean loss over the windows baton's
evaluation takes (src/train/lm.c: 200 batches of 12 windows spread evenly over the split).

usage: torch_gpt.py [--steps N] [--threads K] [--eval-every N] [--text PATH] [--time-only]
       torch_gpt.py --attention T,C,HEADS,BATCH [--steps N] [--threads K]
       torch_gpt.py --generate N [--prompts K] [--threads K]
The second form times forward + backward of the causal attention written out (masked
softmax(QK^T/sqrt(d))V on x [B, T, 3C], then an mse against zeros), as bench/bench_gpt.c
times baton's fused op, and prints `torch_attention_ms M` (median).
The third form samples N tokens after a 6-token prompt for K prompts at once (a batch of K, the
way PyTorch decodes several sequences) from the model with its initial weights, with a KV cache
per block and baton's window policy (a full context keeps its last T/2 tokens and is read again),
and prints `torch_generate tokens_per_s R` (all new tokens over the whole time, prompt included).
prints `step N loss L`, `eval step N loss L`, and at the end
`torch_gpt steps N median_ms M tokens_per_s T val_loss V`.
Run with Debian's /usr/bin/python3 and OPENBLAS_CORETYPE / OPENBLAS_NUM_THREADS set by the caller
(bench/compare_gpt.sh).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

T, C, H, L, B = 64, 128, 4, 4, 12


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = torch.nn.LayerNorm(C)
        self.c_attn = torch.nn.Linear(C, 3 * C, bias=False)
        self.c_proj = torch.nn.Linear(C, C, bias=False)
        self.ln_2 = torch.nn.LayerNorm(C)
        self.c_fc = torch.nn.Linear(C, 4 * C, bias=False)
        self.mlp_proj = torch.nn.Linear(4 * C, C, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def attn(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        s = s.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = F.softmax(s, dim=-1) @ v
        return y.transpose(1, 2).reshape(b, t, C)

    def forward(self, x):
        x = x + self.c_proj(self.attn(self.ln_1(x)))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, C)
        self.wpe = torch.nn.Embedding(T, C)
        torch.nn.init.normal_(self.wte.weight, std=0.02)
        torch.nn.init.normal_(self.wpe.weight, std=0.02)
        self.h = torch.nn.ModuleList(Block() for _ in range(L))
        self.ln_f = torch.nn.LayerNorm(C)
        self.lm_head = torch.nn.Linear(C, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx, label):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), label.view(-1))


def lr_at(step, total, base=1e-3, min_lr=1e-4, warmup=100):
    if step < warmup:
        return base * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, total - 1 - warmup))
    return min_lr + 0.5 * (base - min_lr) * (1 + math.cos(math.pi * p))


def attention_bench(spec, steps, threads):
    t, c, h, b = (int(v) for v in spec.split(","))
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x = (torch.rand(b, t, 3 * c) - 0.5).requires_grad_(True)
    target = torch.zeros(b, t, c)
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        q, k, v = x.split(c, dim=2)
        q, k, v = (z.view(b, t, h, c // h).transpose(1, 2) for z in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(c // h)
        s = s.masked_fill(~mask, float("-inf"))
        y = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        loss = ((y - target) ** 2).mean(dim=(1, 2)).mean()
        x.grad = None
        loss.backward()
        if i >= 3:
            times.append((time.perf_counter() - t0) * 1000)
    print(f"attention T={t} C={c} heads={h} batch={b}\ntorch_attention_ms {statistics.median(times):.3f}", flush=True)
    return 0


def generate_bench(tokens, prompts, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    vocab = 90
    m = GPT(vocab).eval()

    def run(idx, caches, pos):  # idx [b, n] at positions pos.. ; caches: per block [k, v] or None
        x = m.wte(idx) + m.wpe.weight[pos : pos + idx.shape[1]]
        for i, blk in enumerate(m.h):
            b, t, _ = x.shape
            q, k, v = blk.c_attn(blk.ln_1(x)).split(C, dim=2)
            q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
            if caches[i] is not None:
                k = torch.cat([caches[i][0], k], dim=2)
                v = torch.cat([caches[i][1], v], dim=2)
            caches[i] = (k, v)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
            s = s.masked_fill(~blk.mask[pos : pos + t, : pos + t], float("-inf"))
            y = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, t, C)
            x = x + blk.c_proj(y)
            x = x + blk.mlp_proj(F.gelu(blk.c_fc(blk.ln_2(x))))
        return m.lm_head(m.ln_f(x[:, -1]))

    with torch.no_grad():
        ctx = torch.randint(0, vocab, (prompts, 6))
        t0 = time.perf_counter()
        caches = [None] * L
        logits = run(ctx, caches, 0)
        for n in range(tokens):
            tok = torch.multinomial(F.softmax(logits, dim=-1), 1)
            if n + 1 == tokens:
                break
            if ctx.shape[1] == T:  # the window is full: its last half, read again
                ctx = torch.cat([ctx[:, T - T // 2 :], tok], dim=1)
                caches = [None] * L
                logits = run(ctx, caches, 0)
            else:
                ctx = torch.cat([ctx, tok], dim=1)
                logits = run(tok, caches, ctx.shape[1] - 1)
        ms = (time.perf_counter() - t0) * 1000
    print(f"generate {tokens} tokens x {prompts} prompts in {ms:.1f} ms\n"
          f"torch_generate tokens_per_s {tokens * prompts / (ms / 1000):.1f}", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--attention", default=None)
    ap.add_argument("--generate", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--text", default="data/shakespeare.txt")
    ap.add_argument("--time-only", action="store_true", help="no evaluation: throughput only")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.attention:
        return attention_bench(a.attention, a.steps, a.threads)
    if a.generate:
        return generate_bench(a.generate, a.prompts, a.threads)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    data = open(a.text, "rb").read()
    chars = sorted(set(data))
    lut = {c: i for i, c in enumerate(chars)}
    tokens = torch.tensor([lut[c] for c in data], dtype=torch.long)
    n_val = int(len(tokens) * 0.1)
    train, val = tokens[: len(tokens) - n_val], tokens[len(tokens) - n_val:]
    model = GPT(len(chars))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)

    def evaluate():
        model.eval()
        starts = len(val) - T - 1
        batches = min(200, max(1, (starts // T + 1) // B))
        count = batches * B
        total = 0.0
        with torch.no_grad():
            for q in range(batches):
                offs = [int(w * starts / count) for w in range(q * B, q * B + B)]
                x = torch.stack([val[o: o + T] for o in offs])
                y = torch.stack([val[o + 1: o + T + 1] for o in offs])
                total += model(x, y).item() * B
        model.train()
        return total / count

    times = []
    val_loss = float("nan")
    for step in range(a.steps):
        t0 = time.perf_counter()
        offs = torch.randint(0, len(train) - T - 1, (B,))
        x = torch.stack([train[o: o + T] for o in offs])
        y = torch.stack([train[o + 1: o + T + 1] for o in offs])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps)
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append((time.perf_counter() - t0) * 1000)
        if (step + 1) % 100 == 0 or step == 0:
            print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        if not a.time_only and a.eval_every > 0 and (step + 1) % a.eval_every == 0 and step + 1 != a.steps:
            print(f"eval step {step + 1} loss {evaluate():.4f}", flush=True)
    if not a.time_only:
        val_loss = evaluate()
        print(f"eval step {a.steps} loss {val_loss:.4f}", flush=True)
    med = statistics.median(times[3:] if len(times) > 6 else times)
    print(f"torch_gpt steps {a.steps} median_ms {med:.2f} tokens_per_s {B * T / (med / 1000):.0f} "
          f"val_loss {val_loss:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
