#!/usr/bin/env python3
"""tests/dist/check_trace.py: checks the one Chrome trace of a job across processes (baton run
--trace under mpirun; src/trace/trace_job.c). Usage: check_trace.py TRACE.json RANKS [REPLICAS]

Checks: the file is valid JSON with a traceEvents list; there are exactly RANKS processes (pids 0
.. RANKS-1), each named "rank r (replica i, stage s)" by a process_name record; every slice has a
pid among them; the flows pair up (every "s" id has exactly one "f", on a different pid for at
least one pair) and each flow's ends lie inside a transfer slice of their own process (the send,
the receive); for every pair, the receive ended no earlier than its send began, within the clock
uncertainty the file states (otherData.clock_uncertainty_us, on each side), plus 1 us of rounding;
with REPLICAS > 1, gradient reduction slices exist on every rank. Prints one line; exit 1 on a
failure naming it."""
import json
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    path, ranks = sys.argv[1], int(sys.argv[2])
    replicas = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError as e:
        fail("not valid JSON: %s" % e)
    evs = doc.get("traceEvents")
    if not isinstance(evs, list) or not evs:
        fail("no traceEvents list")
    unc_us = float(doc.get("otherData", {}).get("clock_uncertainty_us", -1))
    if unc_us < 0:
        fail("otherData.clock_uncertainty_us is missing")
    names = {e["pid"]: e["args"]["name"] for e in evs if e.get("ph") == "M" and e.get("name") == "process_name"}
    if sorted(names) != list(range(ranks)):
        fail("process names for pids %s, expected 0..%d" % (sorted(names), ranks - 1))
    for pid, name in names.items():
        if not name.startswith("rank %d (replica " % pid) or ", stage " not in name:
            fail("pid %d is named %r" % (pid, name))
    pids = {e["pid"] for e in evs if "pid" in e}
    if pids != set(range(ranks)):
        fail("events on pids %s, expected %d" % (sorted(pids), ranks))
    slices = {}
    for e in evs:
        if e.get("ph") == "X":
            if e["dur"] < 0:
                fail("negative duration: %r" % e)
            slices.setdefault((e["pid"], e["tid"]), []).append(e)
    starts, ends = {}, {}
    for e in evs:
        if e.get("ph") == "s":
            if e["id"] in starts:
                fail("flow id %s starts twice" % e["id"])
            starts[e["id"]] = e
        elif e.get("ph") == "f":
            if e["id"] in ends:
                fail("flow id %s ends twice" % e["id"])
            ends[e["id"]] = e
    if not starts:
        fail("no flows")
    if set(starts) != set(ends):
        fail("unpaired flow ids: %s" % sorted(set(starts) ^ set(ends))[:10])

    def enclosing(ev, kind):
        """The transfer slice of kind (S, R, s, r: the 1F3 notation) on ev's track that contains ev and
        carries its step and micro-batch."""
        for x in slices.get((ev["pid"], ev["tid"]), []):
            # 0.01 us: a flow end placed at a slice's edge, ts and dur each printed in us from ns
            if (x["ts"] - 0.01 <= ev["ts"] <= x["ts"] + x["dur"] + 0.01 and x["name"][1:2] == kind and
                    x["args"]["microbatch"] == ev["args"]["microbatch"] and x["args"]["step"] == ev["args"]["step"]):
                return x
        return None

    cross, worst = 0, float("-inf")
    for fid, s in starts.items():
        f = ends[fid]
        if f.get("bp") != "e":
            fail("flow %s does not bind to its enclosing slice" % fid)
        if s["pid"] != f["pid"]:
            cross += 1
        send = enclosing(s, "S" if s["name"] == "activations" else "s")
        recv = enclosing(f, "R" if s["name"] == "activations" else "r")
        if send is None or recv is None:
            fail("flow %s: no %s slice encloses its %s end" % (fid, "send" if send is None else "receive",
                                                                "start" if send is None else "finish"))
        # the receive cannot complete before the send began (clocks within the stated uncertainty)
        early = send["ts"] - (recv["ts"] + recv["dur"])
        worst = max(worst, early)
        if early > 2 * unc_us + 1.0:
            fail("flow %s (%s, step %d, micro-batch %d, pid %d -> %d): the receive ended %.1f us before the "
                 "send began (clocks are within +- %.1f us)" % (fid, s["name"], s["args"]["step"],
                                                                s["args"]["microbatch"], s["pid"], f["pid"], early,
                                                                unc_us))
    if cross == 0:
        fail("no flow crosses processes")
    if replicas > 1:
        coll = {p for (p, t), v in slices.items() if t == 2 and any(x.get("cat") == "collective" for x in v)}
        if coll != set(range(ranks)):
            fail("gradient reduction slices on pids %s, expected every rank" % sorted(coll))
    print("trace: %d ranks, %d events, %d flows (%d across processes); receives end at most %.1f us before their "
          "sends begin, clock uncertainty +- %.1f us" % (ranks, len(evs), len(starts), cross, max(worst, 0.0), unc_us))


main()
