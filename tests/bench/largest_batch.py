#!/usr/bin/env python3
"""Each C++ stage at the largest batch it fits: the other half of the ladder's comparison.

The ladder (ladder.py) runs every stage at the same batch, which shows what each optimization
does to the speed of the same work. Some optimizations also change how much work fits: stage 03's
attention keeps B·NH·T values for the backward where stage 02 keeps B·NH·T² probabilities, so at
T = 1024 it fits a far larger batch, and a larger batch keeps the GPU busier. This script finds
each stage's largest batch and runs the ladder there, one stage at a time:

    python3 tests/bench/largest_batch.py --build build/all --stages 02,03
    python3 tests/bench/largest_batch.py --build build/all --stages 02,03 --dry-run

For each stage:
  1. ask the trainer: a run with an impossible --batch is refused before any work, in one line
     that names the largest --batch its memory estimate fits (common/train/memory.h);
  2. try that batch for --steps 2; what the estimate does not count (the CUDA libraries' own
     workspaces) can still leave it out of memory, and then 5% less is tried, up to --tries times;
  3. run the ladder at that batch (ladder.py --stages NN --torch none --batch B), from the same
     initial checkpoint and on the same data as every ladder entry.

Outputs, in --out (default BUILD/largest_batch): results.md and results.json (one row per stage:
the batch, tokens/s, ms/step, MFU, peak memory, final loss), and stageNN/, each a whole ladder
output. Python 3 standard library only; see tests/bench/README.md.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LADDER = os.path.join(HERE, "ladder.py")
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import ladder  # noqa: E402  (find_trainers, error_line, the formats of the table)

IMPOSSIBLE_BATCH = 1000000  # refused by every GPU's memory: the refusal names the largest that fits
REFUSAL = re.compile(r"the largest --batch that fits is (\d+)")
SHRINK = 0.95  # after an out-of-memory try


def parse_args(argv):
    p = argparse.ArgumentParser(prog="largest_batch.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(REPO, "build", "all"), help="build tree with the stage trainers")
    p.add_argument("--stages", default="02,03", help="C++ stages: all, or e.g. 02,03")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--model", default="d12", help="model size (as for ladder.py)")
    p.add_argument("--steps", type=int, default=20, help="training steps of each ladder run")
    p.add_argument("--skip", type=int, default=5, help="first steps left out of the timing")
    p.add_argument("--max-batch", type=int, default=1024, help="never more sequences than this")
    p.add_argument("--tries", type=int, default=4, help="batches tried per stage before giving up")
    p.add_argument("--timeout", type=int, default=600, help="seconds per trainer or ladder run")
    p.add_argument("--data", default=os.path.join(REPO, "data", "brown"), help="token shards")
    p.add_argument("--checkpoint", help="initial checkpoint for the ladder runs (default: gpt_init's)")
    p.add_argument("--out", help="output directory (default: BUILD/largest_batch)")
    p.add_argument("--dry-run", action="store_true", help="print the commands of the first try; run nothing")
    args = p.parse_args(argv)
    for name in ("seq", "steps", "max_batch", "tries", "timeout"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if not 0 <= args.skip < args.steps:
        p.error(f"--skip {args.skip} must be at least 0 and leave a timed step of --steps {args.steps}")
    args.build, args.data = os.path.abspath(args.build), os.path.abspath(args.data)
    args.out = os.path.abspath(args.out or os.path.join(args.build, "largest_batch"))
    return args


def run(cmd, log_path, timeout, dry):
    """(exit status, the output's last lines) of one command, its output also in log_path."""
    print("  " + ladder.show(cmd), flush=True)
    if dry:
        return 0, []
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            rc, stopped = ladder.run_in_group(cmd, log, timeout, 10)
        except OSError as exc:
            return 127, [f"cannot start: {exc}"]
    lines = ladder.tail(log_path, 40)
    return (124 if stopped else rc), lines + ([f"stopped after {timeout} s"] if stopped else [])


def out_of_memory(lines):
    text = "\n".join(lines)
    return "out of memory" in text or "out of device memory" in text


def find_batch(args, stage, exe, logs):
    """(batch, None) where a short run of the stage fits, or (None, why)."""
    trainer = [exe, "--model", args.model, "--data", args.data, "--seq", str(args.seq), "--val-every", "0",
               "--sample-every", "0"]
    rc, lines = run(trainer + ["--batch", str(IMPOSSIBLE_BATCH), "--steps", "1"],
                    os.path.join(logs, f"stage{stage}_refusal.log"), args.timeout, args.dry_run)
    if args.dry_run:
        batch = args.max_batch
    else:
        found = [m for m in map(REFUSAL.search, lines) if m]
        if rc == 0 or not found:
            return None, f"the trainer did not name its largest batch: {ladder.error_line(lines)}"
        batch = min(int(found[-1].group(1)), args.max_batch)
        print(f"  the estimate fits --batch {found[-1].group(1)}" +
              (f" (--max-batch {args.max_batch})" if batch == args.max_batch else ""), flush=True)
    for attempt in range(args.tries):
        if batch < 1:
            break
        rc, lines = run(trainer + ["--batch", str(batch), "--steps", "2"],
                        os.path.join(logs, f"stage{stage}_batch{batch}.log"), args.timeout, args.dry_run)
        if rc == 0:
            return batch, None
        if not out_of_memory(lines):
            return None, f"--batch {batch} failed: {ladder.error_line(lines)}"
        print(f"  --batch {batch} is out of memory; trying {int(batch * SHRINK)}", flush=True)
        batch = int(batch * SHRINK)
    return None, f"no batch fitted in {args.tries} tries"


def run_ladder(args, stage, batch):
    """The ladder's entry of this stage at this batch (its results.json entry), or None."""
    out = os.path.join(args.out, f"stage{stage}")
    cmd = [sys.executable, LADDER, "--build", args.build, "--stages", stage, "--torch", "none",
           "--batch", str(batch), "--seq", str(args.seq), "--steps", str(args.steps), "--skip", str(args.skip),
           "--model", args.model, "--data", args.data, "--timeout", str(args.timeout), "--no-ceilings",
           "--out", out] + (["--checkpoint", args.checkpoint] if args.checkpoint else [])
    rc, _ = run(cmd, os.path.join(args.out, "logs", f"stage{stage}_ladder.log"), args.timeout + 120, args.dry_run)
    if args.dry_run:
        return None
    try:
        with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
            results = json.load(f)
        return results["entries"][0], results["meta"]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def render(rows, meta):
    lines = [f"# Each stage at the largest batch it fits: GPT-2 {meta.get('model_title') or ''}, "
             f"{meta.get('gpu') or 'unknown GPU'}", "",
             "Written by tests/bench/largest_batch.py; every number below was printed by that run.", "",
             f"- **Date**: {meta.get('date', '')}",
             f"- **Workload**: T {meta.get('seq')}, {meta.get('steps')} steps from the same checkpoint, medians "
             f"over steps {meta.get('skip', 0) + 1}-{meta.get('steps')}; the batch is each stage's own", "",
             "| stage | configuration | batch | tokens/s | ms/step | MFU | peak memory | final loss |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        e = r.get("entry") or {}
        if e.get("status") != "ok":
            lines.append(f"| {r['stage']} | {r['name']} | {r.get('batch') or ''} | "
                         f"{r.get('error') or e.get('error') or 'failed'} | | | | |")
            continue
        lines.append(f"| {r['stage']} | {r['name']} | {r['batch']} | {ladder.fmt_num(e['tokens_per_s'])} | "
                     f"{ladder.fmt_num(e['median_ms'], 1)} | {ladder.fmt_pct(e['mfu'])} | "
                     f"{ladder.fmt_gib(e.get('peak_memory_bytes'))} | {ladder.fmt_num(e['final_loss'], 4)} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    trainers = ladder.find_trainers(args.build)
    stages = sorted(trainers) if args.stages == "all" else [s.strip() for s in args.stages.split(",") if s.strip()]
    missing = [s for s in stages if s not in trainers]
    if missing or not stages:
        print(f"largest_batch.py: error: stage(s) {', '.join(missing) or '(none)'} not built in {args.build} "
              f"(built: {', '.join(sorted(trainers)) or 'none'})", file=sys.stderr)
        return 2
    logs = os.path.join(args.out, "logs")
    os.makedirs(logs, exist_ok=True)
    rows, meta = [], {"seq": args.seq, "steps": args.steps, "skip": args.skip}
    for stage in stages:
        name = os.path.basename(trainers[stage])[len("train_"):]
        print(f"stage {stage} ({name}): the largest batch at T = {args.seq}", flush=True)
        batch, why = find_batch(args, stage, trainers[stage], logs)
        row = {"stage": stage, "name": name, "batch": batch, "error": why}
        if batch and not args.dry_run:
            print(f"  --batch {batch} fits; the ladder at that batch", flush=True)
            found = run_ladder(args, stage, batch)
            if found:
                row["entry"], ladder_meta = found
                meta.update({k: ladder_meta.get(k) for k in ("gpu", "date", "model_title")})
            else:
                row["error"] = f"the ladder at --batch {batch} wrote no results (logs/stage{stage}_ladder.log)"
        elif args.dry_run:
            run_ladder(args, stage, args.max_batch)
        rows.append(row)
        if why:
            print(f"  {why}", flush=True)
    if args.dry_run:
        return 0
    text = render(rows, meta)
    print("\n" + text)
    ladder.write_text(os.path.join(args.out, "results.md"), text)
    ladder.write_text(os.path.join(args.out, "results.json"),
                      json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}/results.md and results.json")
    return 0 if all((r.get("entry") or {}).get("status") == "ok" for r in rows) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nlargest_batch: interrupted", file=sys.stderr)
        sys.exit(130)
