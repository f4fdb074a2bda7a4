"""bench/torch_gpu.py: the PyTorch peer on the GPU for bench/compare_gpu.sh.

Trains the same models as models/fashion-mlp.yaml (784-1024-1024-10) and models/fashion-cnn.yaml
(conv 32 / pool / conv 64 / pool / fc 128 / 10) on cuda:0: f32, eager mode, AdamW
(lr 2e-3, weight decay 0.01, as in the model files; constant lr), cross-entropy, synthetic data
already on the GPU. Each step is timed with CUDA events (recorded around zero_grad, forward,
backward and the optimizer step, then synchronised), after warm-up; prints the median.
TF32 is left off, as baton computes in f32 (its cuBLAS default).

Usage: python3 bench/torch_gpu.py [--model mlp|cnn] [--batch B] [--steps N] [--warmup N]
           [--compile] [--fused]
Last line: `result torch model=mlp batch=256 median_ms=0.4321 samples_per_s=592000.0`.
"""
import argparse
import statistics
import sys

import torch
from torch import nn


def build(model: str) -> nn.Module:
    if model == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 1024), nn.ReLU(),
            nn.Linear(1024, 1024), nn.ReLU(),
            nn.Linear(1024, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2, stride=2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--batch", type=int, default=0, help="default: the model file's (256 mlp, 128 cnn)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default: eager)")
    ap.add_argument("--fused", action="store_true", help="AdamW(fused=True) (default: PyTorch's default)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_gpu: no CUDA GPU visible to PyTorch", file=sys.stderr)
        return 1
    batch = args.batch or (256 if args.model == "mlp" else 128)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    dev = torch.device("cuda:0")
    model = build(args.model).to(dev)
    if args.compile:
        model = torch.compile(model)
    opt_kwargs = {"lr": 2e-3, "weight_decay": 0.01}
    if args.fused:
        opt_kwargs["fused"] = True
    opt = torch.optim.AdamW(model.parameters(), **opt_kwargs)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(args.warmup + args.steps):
        start.record()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        end.record()
        end.synchronize()
        if i >= args.warmup:
            times.append(start.elapsed_time(end))
    med = statistics.median(times)
    print(f"device: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, "
          f"{'compiled' if args.compile else 'eager'}, loss {loss.item():.4f}")
    print(f"result torch model={args.model} batch={batch} median_ms={med:.4f} "
          f"samples_per_s={batch * 1e3 / med:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
