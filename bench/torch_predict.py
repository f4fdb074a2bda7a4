"""bench/torch_predict.py: the PyTorch peer for bench/compare_predict.sh.

Usage: torch_predict.py CHECKPOINT.safetensors OUT_DIR [THREADS] [BATCH] [--write]
Loads baton's checkpoint of models/fashion-mlp.yaml (PyTorch names: fc1.weight, ...) into the same
784-1024-1024-10 MLP, reads Fashion-MNIST's t10k set from its IDX files as baton does (x / 255 in
float32), and runs model.eval() under torch.no_grad() over it in batches of BATCH (the last one
short), timing each batch. Prints one line:
`torch <samples/s> <p50 ms> <p99 ms> <accuracy>`. With --write it also writes OUT_DIR/x.npy and
OUT_DIR/y.npy, the same inputs and labels, for `baton predict`.
Run it with Debian's /usr/bin/python3 (python3-torch), OPENBLAS_CORETYPE set for this CPU.
"""
import gzip
import json
import math
import struct
import sys
import time

import numpy as np
import torch

FM = "/usr/share/datasets/fashion-mnist/"


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xff
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def safetensors(path):
    with open(path, "rb") as f:
        n, = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        blob = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(blob[b:e], dtype=np.float32).reshape(t["shape"]).copy())
    return out


def main() -> int:
    ckpt, out_dir = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    batch = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    torch.set_num_threads(threads)
    x = (idx(FM + "t10k-images-idx3-ubyte.gz").reshape(-1, 784) / 255.0).astype(np.float32)
    y = idx(FM + "t10k-labels-idx1-ubyte.gz").astype(np.int32)
    if "--write" in sys.argv:
        np.save(out_dir + "/x.npy", x)
        np.save(out_dir + "/y.npy", y)
    model = torch.nn.Sequential()
    model.add_module("fc1", torch.nn.Linear(784, 1024))
    model.add_module("relu1", torch.nn.ReLU())
    model.add_module("fc2", torch.nn.Linear(1024, 1024))
    model.add_module("relu2", torch.nn.ReLU())
    model.add_module("head", torch.nn.Linear(1024, 10))
    weights = {k: v for k, v in safetensors(ckpt).items() if not k.startswith("optimizer.")}
    model.load_state_dict(weights)
    model.eval()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    lat, correct = [], 0
    with torch.no_grad():
        for b in range(0, len(x), batch):
            t0 = time.perf_counter()
            logits = model(xt[b:b + batch])
            lat.append((time.perf_counter() - t0) * 1e3)
            correct += int((logits.argmax(1) == yt[b:b + batch]).sum())
    lat_sorted = sorted(lat)
    p50 = lat_sorted[(len(lat) - 1) // 2]
    p99 = lat_sorted[max(0, math.ceil(0.99 * len(lat)) - 1)]
    print(f"torch {len(x) * 1e3 / sum(lat):.1f} {p50:.3f} {p99:.3f} {correct / len(x):.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
