#!/usr/bin/env python3
"""tests/dist/fake_link_profile.py IN.json OUT.json LATENCY_MS GB_PER_S: a profile with known costs
for tests/plan_link.sh. Every layer: forward and backward 0.01 ms, optimizer step 5 ms (so a
pipeline of 2 stages halves the step's optimizer time, while each data-parallel replica repeats
all of it), 64 KiB per sample crossing a cut after it; and the link between ranks 0 and 1 with the
given latency and bandwidth, as two ping-pong samples (8 B and 8 MiB) whose fit gives exactly them."""
import json
import sys

src, dst, lat_ms, gbps = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
p = json.load(open(src))
for layer in p["layers"]:
    layer["cut_bytes_per_sample"] = 65536
    for t in layer["times"].values():
        t.update(fwd_ms=0.01, bwd_ms=0.01, b_ms=0.006, w_ms=0.004, step_ms=5.0)
big = 8 << 20
p["links"] = [{"from_rank": 0, "to_rank": 1, "bytes": 8, "oneway_ms": lat_ms},
              {"from_rank": 0, "to_rank": 1, "bytes": big, "oneway_ms": lat_ms + (big - 8) / (gbps * 1e6)}]
json.dump(p, open(dst, "w"), indent=1)
