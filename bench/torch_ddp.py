"""bench/torch_ddp.py: the PyTorch DistributedDataParallel peer for bench/compare_dist.sh.

Trains the MLP 784-1024-1024-10 (global batch 256 split over the processes, AdamW lr 1e-3,
cross-entropy, synthetic data) with DDP over the gloo backend: WORLD processes started by
torch.multiprocessing, rendezvous on 127.0.0.1, one thread each. Prints one line from rank 0:
`ddp <median step ms> <samples/s>`. Run with Debian's /usr/bin/python3 (python3-torch), with
OPENBLAS_NUM_THREADS=1 (torch.set_num_threads does not limit OpenBLAS's own pool) and
OPENBLAS_CORETYPE set for this CPU, so the peer gets the same GEMM kernels baton picks.
"""
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, port, steps, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3, weight_decay=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    local = 256 // world
    x = torch.rand(local, 784)
    y = torch.randint(0, 10, (local,))
    times = []
    for i in range(steps + 3):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if i >= 3:
            times.append(ms)
    if rank == 0:
        out.put(statistics.median(times))
    dist.destroy_process_group()


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(worker, args=(world, port, steps, out), nprocs=world, join=True)
    med = out.get()
    print(f"ddp {med:.3f} {256 * 1e3 / med:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
