"""tests/tensorboard_check.py: reads baton's TensorBoard event files with TensorBoard's own reader
(the `tensorboard` package: EventAccumulator for the run, EventFileLoader for one file) and holds
them against the JSON records of the same run. Called by tests/tensorboard.sh:

    tensorboard_check.py run RUN_DIR RECORDS.jsonl FIRST LAST   every scalar = its JSON record,
                                                                steps FIRST..LAST complete, in order
    tensorboard_check.py truncated EVENT_FILE SCRATCH_DIR       a file cut mid-record reads up to
                                                                its last whole record

Prints one line per failure and exits 1 if there was any."""
import json
import os
import shutil
import struct
import sys

import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import event_file_loader

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def close(tb, want, half_unit):
    """tb (a float32) equals want, printed in the JSON with half_unit rounding, to float precision."""
    return abs(tb - want) <= half_unit + abs(want) * 2.0**-23


def check_run(run_dir, records_path, first, last):
    steps, evals, config = {}, {}, None
    for line in open(records_path):
        r = json.loads(line)
        if "config" in r:
            config = config or r
        elif r.get("eval"):
            evals[r["step"]] = r
        elif "step" in r and "lr" in r:  # not a checkpoint record
            steps[r["step"]] = r
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    n_stages = len(next(iter(steps.values()))["stages"])
    # tag -> (record kind, the JSON value, how the JSON printed it: "f32" 9 digits of the double
    # whose float32 TensorBoard holds; ("g", 5e-6) %.6g; ("f", half) a fixed number of decimals)
    expect = {
        "train/loss": ("step", lambda r: r["loss"], "f32"),
        "train/lr": ("step", lambda r: r["lr"], ("g", 5e-6)),
        "train/grad_norm": ("step", lambda r: r["grad_norm"], ("g", 5e-6)),
        "train/step_ms": ("step", lambda r: r["step_ms"], ("f", 5e-4)),
        "train/samples_per_s": ("step", lambda r: r["samples_per_s"], ("f", 0.05)),
        "train/bubble": ("step", lambda r: r["bubble"], ("f", 5e-5)),
        "eval/loss": ("eval", lambda r: r["loss"], "f32"),
        "eval/accuracy": ("eval", lambda r: r["accuracy"], ("f", 5e-7)),
    }
    for s in range(n_stages):
        for k in ("busy", "transfer", "idle"):
            expect["stage%d/%s" % (s, k)] = ("step", lambda r, s=s, k=k: r["stages"][s][k], ("f", 5e-5))
        expect["stage%d/peak_MiB" % s] = ("step", lambda r, s=s: r["stages"][s]["peak_bytes"] / 2**20, ("f", 0))
    for tag in tags["scalars"]:
        if tag not in expect:
            fail("scalar %s has no JSON field to compare with" % tag)
            continue
        kind, get, printed = expect[tag]
        events = acc.Scalars(tag)
        got_steps = [e.step for e in events]
        want_steps = sorted(evals) if kind == "eval" else list(range(first, last + 1))
        if got_steps != want_steps:
            fail("%s: steps %s, expected %s" % (tag, got_steps, want_steps))
        records = evals if kind == "eval" else steps
        for e in events:
            if e.step not in records:
                fail("%s: step %d has no JSON record" % (tag, e.step))
                continue
            want = get(records[e.step])
            if printed == "f32":
                # TensorBoard holds float32(x) of the double x; the JSON holds x to 9 digits. A
                # float32 round-trips through 9 digits, but x is a double: near a float32 midpoint
                # its 9 digits may round to the neighbour. So: within half a float32 ulp of the
                # float TensorBoard holds, plus the 9-digit print's error.
                tb = np.float32(e.value)
                ok = tb == np.float32(want) or \
                    abs(float(tb) - want) <= float(np.spacing(tb)) / 2 + 5e-9 * abs(want)
            elif printed[0] == "g":
                ok = close(e.value, want, abs(want) * printed[1])
            else:
                ok = close(e.value, want, printed[1])
            if not ok:
                fail("%s at step %d: TensorBoard reads %r, the JSON record says %r" % (tag, e.step, e.value, want))
    for tag in ["train/loss", "train/lr", "train/grad_norm", "train/step_ms", "train/samples_per_s", "train/bubble",
                "stage0/busy", "stage0/transfer", "stage0/idle", "stage0/peak_MiB", "eval/loss", "eval/accuracy"]:
        if tag not in tags["scalars"]:
            fail("no scalar %s" % tag)
    if "config" not in tags["tensors"]:
        fail("no config text")
    else:
        text = b"".join(t.tensor_proto.string_val[0] for t in acc.Tensors("config")).decode()
        if config and "| model | %s |" % config["model"] not in text:
            fail("config text lacks the model name: %r" % text[:200])
        if acc.SummaryMetadata("config").plugin_data.plugin_name != "text":
            fail("config is not a text summary")


def records_of(path):
    """(offset, end) of every whole record in an event file, parsed by hand."""
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[pos:pos + 8])
        if pos + 12 + n + 4 > len(data):
            break
        out.append((pos, pos + 12 + n + 4))
        pos += 12 + n + 4
    return out, data


def check_truncated(path, scratch):
    full = [e.SerializeToString() for e in event_file_loader.EventFileLoader(path).Load()]
    recs, data = records_of(path)
    if len(full) != len(recs) or len(recs) < 4:
        fail("%s: the reader found %d events, the file holds %d records" % (path, len(full), len(recs)))
        return
    for k in (1, len(recs) // 2, len(recs) - 1):
        start, end = recs[k]
        for cut in (start + 5, start + 12 + (end - start - 16) // 2, end - 2):  # header, data, footer
            os.makedirs(scratch, exist_ok=True)
            cut_path = os.path.join(scratch, os.path.basename(path))
            with open(cut_path, "wb") as f:
                f.write(data[:cut])
            got = [e.SerializeToString() for e in event_file_loader.EventFileLoader(cut_path).Load()]
            if got != full[:k]:
                fail("cut at byte %d (inside record %d): read %d events, expected the %d before it"
                     % (cut, k, len(got), k))
            acc = ea.EventAccumulator(scratch, size_guidance={ea.SCALARS: 0})
            acc.Reload()  # the run reader copes too
            shutil.rmtree(scratch)


def main():
    if sys.argv[1] == "run":
        check_run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "truncated":
        check_truncated(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: tensorboard_check.py run|truncated ...")
    sys.exit(1 if failures else 0)


main()
