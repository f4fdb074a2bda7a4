"""bench/torch_deep.py: the PyTorch peer for bench/compare_schedules.sh.

Trains bench_schedules' `deep` MLP (W -> six W-wide linear+relu -> 10, batch B, AdamW lr 1e-4,
cross-entropy, synthetic data) on one process with the given threads and prints one line:
`torch <median step ms> <samples/s>`. Run it with Debian's /usr/bin/python3 (python3-torch),
OPENBLAS_CORETYPE set for this CPU and OPENBLAS_NUM_THREADS equal to the threads (FACTS.md: torch's
own thread setting does not limit OpenBLAS).
"""
import statistics
import sys
import time

import torch


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    width = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(batch, width)
    y = torch.randint(0, 10, (batch,))
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= 2:
            times.append(ms)
    med = statistics.median(times)
    print(f"torch {med:.3f} {batch * 1e3 / med:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
