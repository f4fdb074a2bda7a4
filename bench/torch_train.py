"""bench/torch_train.py: the PyTorch peer for bench/compare_bf16.sh.

    torch_train.py mlp|cnn f32|bf16 THREADS STEPS   one line: `torch <median step ms> <samples/s>`
    torch_train.py gemm f32|bf16 THREADS REPEATS     one line: `gemm <GFLOP/s>` (1024^3 matmul)

mlp: 784-1024-1024-10, batch 256; cnn: models/fashion-cnn.yaml's network (conv 32, pool, conv 64,
pool, fc 128, head 10), batch 128. AdamW lr 2e-3, weight decay 0.01, cross-entropy, synthetic data.
bf16 is torch.autocast("cpu", dtype=torch.bfloat16) around the forward (PyTorch's recommended CPU
mixed precision: its oneDNN runs matmuls and convolutions in bf16 on AMX or AVX512-BF16); the
weights and optimizer stay f32. Run with Debian's /usr/bin/python3 (python3-torch 1.13). Its
matrix products in f32 go through OpenBLAS, whose threads torch.set_num_threads does not limit:
the caller sets OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE (see FACTS in bench/RESULTS.md).
"""
import statistics
import sys
import time

import torch


def network(kind):
    if kind == "mlp":
        return torch.nn.Sequential(
            torch.nn.Linear(784, 1024), torch.nn.ReLU(),
            torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
            torch.nn.Linear(1024, 10)), torch.rand(256, 784)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(3136, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10)), torch.rand(128, 1, 28, 28)


def train(kind, precision, steps):
    torch.manual_seed(0)
    model, x = network(kind)
    y = torch.randint(0, 10, (x.shape[0],))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    for i in range(steps + 3):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= 3:
            times.append(ms)
    med = statistics.median(times)
    print(f"torch {med:.3f} {x.shape[0] * 1e3 / med:.1f}")


def gemm(precision, repeats):
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    a = torch.rand(1024, 1024).to(dtype)
    b = torch.rand(1024, 1024).to(dtype)
    for _ in range(3):
        torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t0)
    print(f"gemm {2 * 1024 ** 3 / statistics.median(times) / 1e9:.1f}")


def main() -> int:
    kind, precision, threads, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    if kind == "gemm":
        gemm(precision, n)
    else:
        train(kind, precision, n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
