"""bench/torch_mlp.py: the PyTorch peer for bench/compare_torch.sh.

Trains the MLP 784-1024-1024-10 (batch 256, AdamW lr 1e-3, cross-entropy, synthetic data) with
the given number of threads and prints one line: `torch <median step ms> <samples/s>`. Optional
third and fourth arguments give other widths and batch (bench/auto_layout.sh):
`torch_mlp.py STEPS THREADS 784,1024,1024,1024,1024,1024,1024,10 1024`.
Run it with Debian's /usr/bin/python3 (python3-torch) and OPENBLAS_CORETYPE set for this CPU,
so the peer gets the same fast GEMM kernels baton picks for itself.
"""
import statistics
import sys
import time

import torch


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    widths = [int(w) for w in sys.argv[3].split(",")] if len(sys.argv) > 3 else [784, 1024, 1024, 10]
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(batch, widths[0])
    y = torch.randint(0, widths[-1], (batch,))
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= 3:
            times.append(ms)
    med = statistics.median(times)
    print(f"torch {med:.3f} {batch * 1e3 / med:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
