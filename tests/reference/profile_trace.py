#!/usr/bin/env python3
"""Per-kernel GPU times of one training step, from a torch.profiler Chrome trace.

usage: profile_trace.py TRACE.json[.gz] --out PROFILE.json [--meta OLD_PROFILE.json]

gpt2_reference.py --profile-step PATH runs one training step under torch.profiler (CPU and CUDA
activity, record_shapes) and writes what this module makes of the profiler's Chrome trace; with
--profile-trace it also keeps the trace. This command line summarises a kept trace again (after
a change here, say), taking the run's metadata (model, settings, GPU) from --meta.

The profiled step marks its four parts with torch.profiler.record_function ranges named
PHASE_PREFIX + "data", "forward", "backward" and "optimizer" (the batch's upload; forward and
loss; backward; gradient clipping, AdamW and zero_grad). From the trace it takes:

  - every GPU event: kernels (category "kernel"), copies ("gpu_memcpy") and fills ("gpu_memset"),
    each with its device time ("dur", microseconds);
  - the host event that launched it: the runtime or driver call with the same "correlation"
    (cudaLaunchKernel, cuLaunchKernel, ...), or else the CPU op with the same "External id";
  - the phase it belongs to: the range above that contains its launch (host time; the backward
    runs on autograd's own thread, but the main thread waits inside its range meanwhile);
  - the op that launched it (the innermost CPU op with its "External id", for a matrix product
    `aten::mm` or `aten::addmm`) with the op's "Input Dims" (record_shapes), which tell the LM
    head's products (a dimension of the vocabulary's size) from the blocks'.

The output, one JSON object (the key `kernels` is what tests/bench/step_breakdown_vs_torch.py
groups):

  totals   kernel_ms, memcpy_ms, memset_ms, gpu_ms (their sum), gpu_busy_ms (the union of their
           intervals: what the GPU was busy with, overlaps counted once), events, and how many
           GPU events had no phase (no_phase) and no op (no_op)
  phases   per phase: wall_ms (the host range's length) and gpu_ms, events (the GPU events
           launched inside it)
  kernels  one object per kernel name, the most time first: name, kind (kernel, memcpy,
           memset), ms (total device time), count (launches), and calls: the same split by
           (phase, op, input_dims), each with its ms and count

Exit status: 0 written; 2 bad usage, or a trace or --meta file that cannot be read.

Python 3 standard library only: gpt2_reference.py imports it, and its self-test
(tests/reference/test_step_breakdown_vs_torch.py) runs it on made-up traces without torch.
"""

import argparse
import gzip
import json
import os
import sys

PHASE_PREFIX = "gpt2_reference."
PHASES = ("data", "forward", "backward", "optimizer")

# Chrome-trace categories of GPU activity (kineto; older versions capitalised them).
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
             "memset": "memset"}
# Host calls that launch GPU work and carry its "correlation".
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
# Host ranges that can hold an "External id" (the op that launched a kernel).
OP_CATEGORIES = {"cpu_op", "operator", "user_annotation"}


def load_trace(path):
    """The events of a Chrome trace (a dict with "traceEvents", or a bare list), plain or gzipped."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ValueError("not a Chrome trace: no list of events")
    return [e for e in events if isinstance(e, dict)]


def number(value):
    """A trace's number (µs); traces write some as strings."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v else None  # not NaN


def union_length(intervals):
    """The length of the union of [start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarise(events, prefix=PHASE_PREFIX):
    """The totals, phases and kernels (module docstring) of a trace's events."""
    phases = {}  # name: (start, end)
    launch_ts = {}  # correlation: host time of the launch
    ops = {}  # External id: [(start, end, name, input dims)]
    gpu = []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        name = str(e.get("name", ""))
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        ts, dur = number(e.get("ts")), number(e.get("dur"))
        if cat in GPU_KINDS:
            if ts is not None and dur is not None and dur >= 0:
                gpu.append((GPU_KINDS[cat], name, ts, dur, args))
            continue
        if ts is None:
            continue
        if name.startswith(prefix) and name[len(prefix):] in PHASES and cat != "gpu_user_annotation" \
                and dur is not None:
            phases[name[len(prefix):]] = (ts, ts + dur)
            continue
        if cat in LAUNCH_CATEGORIES and "correlation" in args:
            launch_ts[args["correlation"]] = ts
        if (cat in OP_CATEGORIES or not cat) and "External id" in args and dur is not None:
            ops.setdefault(args["External id"], []).append((ts, ts + dur, name, args.get("Input Dims")))

    def phase_of(t):
        if t is None:
            return None
        for phase, (a, b) in phases.items():
            if a <= t <= b:
                return phase
        return None

    kernels = {}
    totals = {"kernel_ms": 0.0, "memcpy_ms": 0.0, "memset_ms": 0.0, "gpu_ms": 0.0, "gpu_busy_ms": 0.0,
              "events": len(gpu), "no_phase": 0, "no_op": 0}
    by_phase = {p: {"wall_ms": (b - a) / 1000.0, "gpu_ms": 0.0, "events": 0} for p, (a, b) in phases.items()}
    for kind, name, ts, dur, args in gpu:
        ms = dur / 1000.0
        # The op that launched it: the innermost range with its External id (phases are not among them).
        candidates = ops.get(args.get("External id"), [])
        op = min(candidates, key=lambda c: c[1] - c[0]) if candidates else None
        # When it was launched: its runtime or driver call, or else the start of that op.
        t = launch_ts.get(args.get("correlation")) if "correlation" in args else None
        if t is None and op is not None:
            t = op[0]
        phase = phase_of(t)
        if phase is None:
            totals["no_phase"] += 1
        else:
            by_phase[phase]["gpu_ms"] += ms
            by_phase[phase]["events"] += 1
        if op is None:
            totals["no_op"] += 1
        totals[f"{kind}_ms"] += ms
        k = kernels.setdefault(name, {"name": name, "kind": kind, "ms": 0.0, "count": 0, "calls": {}})
        k["ms"] += ms
        k["count"] += 1
        dims = op[3] if op else None
        key = (phase, op[2] if op else None, json.dumps(dims))
        c = k["calls"].setdefault(key, {"phase": phase, "op": op[2] if op else None, "input_dims": dims,
                                        "ms": 0.0, "count": 0})
        c["ms"] += ms
        c["count"] += 1
    totals["gpu_ms"] = totals["kernel_ms"] + totals["memcpy_ms"] + totals["memset_ms"]
    totals["gpu_busy_ms"] = union_length([(ts, ts + dur) for _, _, ts, dur, _ in gpu]) / 1000.0
    out = []
    for k in sorted(kernels.values(), key=lambda k: (-k["ms"], k["name"])):
        k["calls"] = sorted(k["calls"].values(), key=lambda c: (-c["ms"], str(c["op"])))
        out.append(k)
    return {"totals": totals, "phases": by_phase, "kernels": out}


def main(argv=None):
    p = argparse.ArgumentParser(
        prog="profile_trace.py",
        description="Per-kernel GPU times of one training step from a torch.profiler Chrome trace (the one "
                    "gpt2_reference.py --profile-trace keeps), as gpt2_reference.py --profile-step writes them.",
        epilog="Exit status: 0 written; 2 bad usage or unreadable input. See tests/bench/README.md.")
    p.add_argument("trace", metavar="TRACE.json[.gz]", help="the Chrome trace (prof.export_chrome_trace)")
    p.add_argument("--out", required=True, metavar="PROFILE.json", help="the summary to write")
    p.add_argument("--meta", metavar="PROFILE.json",
                   help="a summary gpt2_reference.py wrote: its metadata (model, settings, GPU) is kept")
    args = p.parse_args(argv)
    try:
        events = load_trace(args.trace)
    except (OSError, ValueError) as exc:
        print(f"profile_trace.py: error: cannot read {args.trace}: {exc}", file=sys.stderr)
        return 2
    meta = {}
    if args.meta:
        try:
            with open(args.meta, encoding="utf-8") as f:
                meta = json.load(f)
            if not isinstance(meta, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:
            print(f"profile_trace.py: error: cannot read {args.meta}: {exc}", file=sys.stderr)
            return 2
    summary = dict(meta)
    summary.update(summarise(events))
    summary["trace"] = args.trace
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)
    t = summary["totals"]
    print(f"{t['events']} GPU events, {t['gpu_ms']:.2f} ms ({t['gpu_busy_ms']:.2f} ms busy); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
