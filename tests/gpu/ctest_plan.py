#!/usr/bin/env python3
"""The GPU tests of a build tree, for the GPU check's quick phase (tests/gpu_check.sh).

  ctest_plan.py plan --build DIR --out PLAN.json [--source-dir REPO]
      Reads the tests from CTest (--show-only=json-v1), checks that they are isolated from each
      other and from the shell they run in, and writes the batches they run in: stages 03-06
      first (never run on a GPU before), then 00-02; in each, the tests that may run side by side,
      then those that need the GPU to themselves (RUN_SERIAL, one at a time, so that they do not
      stop the others each time one comes up). Exit status 1 when a check fails.
  ctest_plan.py report --plan PLAN.json --log LOG [--log LOG]...
      From CTest's output, per stage: passed, failed (named), skipped, those that do not apply
      to their stage (they skip saying so; read from the full log CTest wrote, LOG's name with
      .full.log, as tests/gpu_check.sh copies it) and not run (the tests that have no result
      line: the batch was stopped, or never started).

The checks (each a way the GPU window was found to be wasted):
  - the full-size curve tests (GPT-2 124M at B = 16, up to 28.8 GiB each) share a RESOURCE_LOCK,
    so that under ctest -j they take turns instead of running out of device memory together;
  - every GPU test unsets every launcher variable common/dist/group.cpp reads, and NCCL_DEBUG
    (ENVIRONMENT_MODIFICATION; tests/gpu/checks.cmake): a variable left set in the shell would
    make a test wait for processes that do not exist, or add lines to checked output.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
FIRST = ("03", "04", "05", "06")  # never run on a GPU before: first
FULL_SIZE = ".Model.FullSizeCurveMatchesPyTorch"


def properties(test):
    return {p["name"]: p["value"] for p in test.get("properties", [])}


def ctest_tests(build):
    r = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ctest_plan.py: error: ctest --show-only in {build} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["tests"]


def launcher_variables(source_dir):
    """Every environment variable common/dist reads (env("X"), env_int("X", ...))."""
    names = set()
    dist = os.path.join(source_dir, "common", "dist")
    for name in sorted(os.listdir(dist)):
        if name.endswith((".cpp", ".h")):
            with open(os.path.join(dist, name)) as f:
                names |= set(re.findall(r'\benv(?:_int)?\("([A-Z_][A-Z0-9_]*)"', f.read()))
    return names


def stage_of(name):
    m = re.match(r"stage(\d\d)\.", name)
    return m.group(1) if m else None


def check(tests, source_dir):
    """The isolation the quick phase relies on; a list of problems, and a line on what holds."""
    problems = []
    gpu = [t for t in tests if "gpu" in properties(t).get("LABELS", [])]
    full = [t for t in gpu if t["name"].endswith(FULL_SIZE)]
    locks = [set(properties(t).get("RESOURCE_LOCK", [])) for t in full]
    shared = set.intersection(*locks) if locks else set()
    if len(full) > 1 and not shared:
        problems.append(f"the {len(full)} full-size curve tests share no RESOURCE_LOCK: under ctest -j "
                        "several would train GPT-2 124M at once (28.8 GiB each in stages 00 and 01)")
    wanted = launcher_variables(source_dir) | {"NCCL_DEBUG"}
    for t in gpu:
        unset = {m.split("=", 1)[0] for m in properties(t).get("ENVIRONMENT_MODIFICATION", [])
                 if m.split("=", 1)[1:] == ["unset:"]}
        missing = sorted(wanted - unset)
        if missing:
            problems.append(f"{t['name']} does not unset {', '.join(missing)} (GPT_TEST_ENVIRONMENT_UNSET, "
                            "tests/gpu/checks.cmake)")
    holds = (f"{len(full)} full-size tests take turns (RESOURCE_LOCK {', '.join(sorted(shared)) or '-'}); "
             f"every GPU test unsets the {len(wanted)} launcher and NCCL_DEBUG variables common/dist reads")
    return problems, holds


def plan(args):
    tests = ctest_tests(args.build)
    problems, holds = check(tests, args.source_dir)
    gpu = [(i + 1, t) for i, t in enumerate(tests) if "gpu" in properties(t).get("LABELS", [])]
    stages = sorted({stage_of(t["name"]) for _, t in gpu if stage_of(t["name"])})
    groups = [[s for s in stages if s in FIRST], [s for s in stages if s not in FIRST]]
    batches = []
    for group in groups:
        if not group:
            continue
        for serial in (False, True):
            chosen = [(n, t) for n, t in gpu if stage_of(t["name"]) in group and
                      bool(properties(t).get("RUN_SERIAL")) == serial]
            if chosen:
                label = f"stages {group[0]}-{group[-1]}" if len(group) > 1 else f"stage {group[0]}"
                batches.append({"name": f"{label}{', one at a time' if serial else ''}",
                                "tests": [t["name"] for _, t in chosen], "numbers": [n for n, _ in chosen]})
    with open(args.out, "w") as f:
        json.dump({"build": os.path.abspath(args.build), "stages": stages, "batches": batches}, f, indent=1)
    per_stage = collections.Counter(stage_of(t["name"]) for _, t in gpu)
    print(f"plan: {len(gpu)} GPU tests (" + ", ".join(f"stage {s}: {per_stage[s]}" for s in stages) +
          f") in {len(batches)} batches, in this order:")
    for b in batches:
        print(f"  {b['name']}: {len(b['tests'])} test{'' if len(b['tests']) == 1 else 's'}")
    for p in problems:
        print(f"error: {p}")
    if not problems:
        print(f"isolation: {holds}")
    return 1 if problems else 0


# "  12/180 Test #186: stage03.Kernels.Foo ..........   Passed    1.23 sec"
RESULT = re.compile(r"Test\s+#\d+: (\S+) \.*\s*(\*{3})?(Passed|Failed|Skipped|Not Run|Timeout|Exception|"
                    r"Subprocess aborted|SEGFAULT|Child aborted|\S+)")


# How a test that does not apply to its stage starts its skip message (kDoesNotApply,
# tests/gpu/stage_tests.cuh). Such a test checks nothing, but is no failure: a GPU check must
# have no other skip.
DOES_NOT_APPLY = "does not apply to this stage: "


def not_applicable(logs):
    """The tests whose output says they do not apply to their stage, from the full logs."""
    names = set()
    for log in logs:
        full = re.sub(r"\.log$", "", log) + ".full.log"
        if not os.path.exists(full):
            continue
        name = None
        with open(full, errors="replace") as f:
            for line in f:
                m = re.match(r"\d+/\d+ Test: (\S+)", line)
                if m:
                    name = m.group(1)
                elif line.startswith(DOES_NOT_APPLY) and name:
                    names.add(name)
    return names


def report(args):
    with open(args.plan) as f:
        planned = json.load(f)
    results = {}
    for log in args.log:
        if not os.path.exists(log):
            continue
        with open(log, errors="replace") as f:
            for line in f:
                m = RESULT.search(line)
                if m:
                    results[m.group(1)] = m.group(3)
    apart = not_applicable(args.log)
    rows, totals = [], collections.Counter()
    for stage in planned["stages"]:
        names = [n for b in planned["batches"] for n in b["tests"] if stage_of(n) == stage]
        count = collections.Counter()
        failed = []
        for n in names:
            r = results.get(n)
            if r is None or r == "Not Run":  # never started, or its program was not built
                count["not run"] += 1
            elif r == "Passed":
                count["passed"] += 1
            elif r == "Skipped" and n in apart:
                count["do not apply"] += 1
            elif r == "Skipped":
                count["skipped"] += 1
            else:
                count["failed"] += 1
                failed.append(f"{n.split('.', 1)[1]} ({r})")
        totals.update(count)
        line = (f"stage {stage}: {count['passed']} passed, {count['failed']} failed, {count['skipped']} skipped, "
                f"{count['do not apply']} do not apply, {count['not run']} not run of {len(names)}")
        if failed:
            line += ": " + ", ".join(failed)
        rows.append(line)
    print("\n".join(rows))
    total = sum(totals.values())
    print(f"tests: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped, "
          f"{totals['do not apply']} do not apply, {totals['not run']} not run of {total}")
    return 0 if totals["passed"] + totals["do not apply"] == total and totals["passed"] > 0 else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("plan", help="check the GPU tests' isolation and write the batches they run in")
    a.add_argument("--build", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--source-dir", default=REPO)
    b = sub.add_parser("report", help="passed, failed and not run per stage, from CTest's output")
    b.add_argument("--plan", required=True)
    b.add_argument("--log", action="append", default=[])
    args = p.parse_args()
    return plan(args) if args.command == "plan" else report(args)


if __name__ == "__main__":
    sys.exit(main())
