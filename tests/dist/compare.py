#!/usr/bin/env python3
# tests/dist/compare.py: compares two baton runs for tests/dist.sh, with the standard library only.
#   compare.py losses REF.jsonl RUN.jsonl TOL      every step's loss and gradient norm (the "step"
#                                                  records; the norm catches a gradient scaled
#                                                  wrongly, which AdamW and clipping would hide),
#                                                  and each evaluation's loss and accuracy
#   compare.py tensors REF RUN TOL   every tensor (weights and optimizer state); REF and RUN are
#                                    checkpoints of either layout: a .safetensors file, a sharded
#                                    checkpoint's .index.json (Hugging Face's form: weight_map names
#                                    each tensor's shard), or a checkpoint directory (its latest)
# Relative tolerance: a loss within TOL of the reference's, relatively; a tensor element within TOL
# times the tensor's largest magnitude (normwise relative error, as torch.testing's atol/rtol pair
# would put it): data parallelism adds a gradient's micro-batch contributions in another order, and
# AdamW divides by the root of the second moment, so a weight whose gradient is near zero moves by
# a rounding-sized but element-relatively large amount (2e-8 on a weight of 4e-4 after 3 steps).
# The largest element-wise relative difference is printed too. Exit 0 when equal within TOL, 1
# naming the first difference.
import json, os, struct, sys, array

def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if "step" in r and "loss" in r and "eval" not in r:
                out[r["step"]] = (r["loss"], r["grad_norm"])
            elif r.get("eval"):  # the evaluation at the end: loss and accuracy, as step "eval"
                out["eval %d" % r["step"]] = (r["loss"], r.get("accuracy") or 0.0)
    return out

def tensors(path):
    if os.path.isdir(path):
        index = os.path.join(path, "checkpoint.safetensors.index.json")
        path = index if os.path.exists(index) else os.path.join(path, "checkpoint.safetensors")
    if path.endswith(".index.json"):
        with open(path) as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(weight_map.values())):
            part = one_file(os.path.join(os.path.dirname(path), shard))
            for name in part:
                if name in out or weight_map.get(name) != shard:
                    raise SystemExit("%s: tensor %s is not where the index maps it (%s)" % (path, name, shard))
            out.update(part)
        if sorted(out) != sorted(weight_map):
            raise SystemExit("%s: the shards hold %s, the index lists %s" % (path, sorted(out), sorted(weight_map)))
        return out
    return one_file(path)

def one_file(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise SystemExit("%s: %s is %s, expected F32" % (path, name, info["dtype"]))
        b, e = info["data_offsets"]
        a = array.array("f")
        a.frombytes(data[base + b:base + e])
        out[name] = a
    return out

def close(a, b, tol, scale=0.0):
    return abs(a - b) <= tol * max(abs(a), abs(b), scale)

def main():
    kind, ref, run, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    if kind == "losses":
        r, o = losses(ref), losses(run)
        if not r or sorted(r, key=str) != sorted(o, key=str):
            print("steps differ: %s has %s, %s has %s" % (ref, sorted(r, key=str), run, sorted(o, key=str)))
            return 1
        for s in sorted(r, key=str):
            for k, what in enumerate(("loss", "grad_norm or accuracy")):
                if not close(r[s][k], o[s][k], tol):
                    print("step %s: %s %.9g in %s, %.9g in %s" % (s, what, r[s][k], ref, o[s][k], run))
                    return 1
        print("losses and gradient norms of %d steps, and the evaluation, agree within %g"
              % (sum(1 for s in r if not isinstance(s, str)), tol))
        return 0
    r, o = tensors(ref), tensors(run)
    if sorted(r) != sorted(o):
        print("tensors differ: %s vs %s" % (sorted(set(r) ^ set(o)), run))
        return 1
    worst = worst_elem = 0.0
    for name in sorted(r):
        if len(r[name]) != len(o[name]):
            print("%s: %d elements in %s, %d in %s" % (name, len(r[name]), ref, len(o[name]), run))
            return 1
        scale = max((abs(x) for x in r[name]), default=0.0)
        for i, (a, b) in enumerate(zip(r[name], o[name])):
            if not close(a, b, tol, scale):
                print("%s[%d]: %.9g in %s, %.9g in %s (largest magnitude in the tensor %.3g)"
                      % (name, i, a, ref, b, run, scale))
                return 1
            if a != b:
                worst = max(worst, abs(a - b) / max(abs(a), abs(b), scale))
                worst_elem = max(worst_elem, abs(a - b) / max(abs(a), abs(b)))
    print("%d tensors agree within %g (largest normwise difference %.3g, element-wise %.3g)"
          % (len(r), tol, worst, worst_elem))
    return 0

sys.exit(main())
