#!/usr/bin/env python3
"""Self-test of tests/bench/attention.py (the attention benchmark's plumbing), with no GPU and no torch.

    python3 tests/reference/test_attention.py    (CTest: attention_selftest, label bench)

On made-up bench_stageNN programs (small Python scripts that write the kernel benchmark's JSON,
with each round's times under --rounds as bench_stageNN writes them) and a made-up nvidia-smi:

  - --rounds N goes to the stage whose variants are timed (the first from 03 on) and to no other,
    --dry-run prints the commands and runs nothing, and a --rounds outside 1-50 is refused;
  - each C++ entry keeps the median bench_stageNN reported, its rounds, and their range in the
    table ("3: 0.140–0.190 / ..."); an entry timed once says 1;
  - the SM clock and throttle reasons nvidia-smi gives before and after each entry are in
    results.json and in the table ("1980/1755", "none/power cap"), and null and "-" where
    nvidia-smi is missing or fails, the run going on;
  - nvidia-smi's line and its throttle mask are read as they come ("[N/A]", unknown bits).

Python standard library only; a few seconds.
"""

import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "tests", "bench", "attention.py")

sys.path.insert(0, os.path.dirname(SCRIPT))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import attention  # noqa: E402
import gpu_clock  # noqa: E402  (its nvidia-smi helpers)

# A made-up bench_stageNN: writes what the real one writes for --ops ^Attention, the stage's row
# and, with --attention-variants yes, one variant's; with --rounds N each row's rounds too. Every
# command line it was given is appended to calls.txt beside it.
FAKE_BENCH = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
opt = dict(zip(args[::2], args[1::2]))
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.txt"), "a") as f:
    f.write(" ".join([os.path.basename(sys.argv[0])] + args) + "\n")
rounds = int(opt.get("--rounds", "1"))
ops = ["Attention"] + (["Attention 16 rows per warp"] if opt["--attention-variants"] == "yes" else [])
rows = []
for k, op in enumerate(ops):
    for p, base in (("forward", 0.14), ("backward", 0.30)):
        times = [base + 0.01 * k + 0.02 * ((r + k) % 3) for r in range(rounds)]
        row = {{"op": op, "pass": p, "status": "ok", "ms_median": sorted(times)[len(times) // 2],
               "ms_min": min(times) - 0.001, "ms_max": max(times) + 0.001, "workspace_bytes": 1 << 20}}
        if rounds > 1:
            row.update(rounds_ms=times, rounds_ms_min=min(times), rounds_ms_max=max(times))
        rows.append(row)
with open(opt["--json"], "w") as f:
    json.dump({{"error": None, "device_name": "Fake GPU", "ceilings": {{"gemm": {{"tflops": 800.0}}}},
               "rows": rows}}, f)
'''

# A made-up nvidia-smi: the next line of clocks.txt beside it per call (the last one again when
# they run out), or exit status 9 when there is no such file.
FAKE_SMI = r'''#!{python}
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
path, count = os.path.join(here, "clocks.txt"), os.path.join(here, "count.txt")
if not os.path.exists(path):
    sys.exit(9)
lines = open(path).read().splitlines()
n = int(open(count).read()) if os.path.exists(count) else 0
open(count, "w").write(str(n + 1))
print(lines[min(n, len(lines) - 1)])
'''


def executable(path, text):
    with open(path, "w") as f:
        f.write(text.format(python=sys.executable))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class Parts(unittest.TestCase):
    def test_parse_clock(self):
        self.assertEqual(gpu_clock.parse_clock("1980, 0x0000000000000000\n"),
                         {"sm_mhz": 1980, "throttle_reasons": "0x0000000000000000"})
        self.assertEqual(gpu_clock.parse_clock("[N/A], [N/A]"), {"sm_mhz": None, "throttle_reasons": "[N/A]"})
        self.assertEqual(gpu_clock.parse_clock("1755, 0x4\n345, 0x1\n")["sm_mhz"], 1755)  # the first GPU
        for text in ("", "garbage", "1, 2, 3"):
            self.assertIsNone(gpu_clock.parse_clock(text), text)

    def test_throttle_names(self):
        self.assertEqual(gpu_clock.throttle_names("0x0000000000000000"), "none")
        self.assertEqual(gpu_clock.throttle_names("0x0000000000000004"), "power cap")
        self.assertEqual(gpu_clock.throttle_names("0x21"), "idle+sw thermal")
        self.assertEqual(gpu_clock.throttle_names("0x1000"), "0x1000")  # a bit this script has no name for
        self.assertEqual(gpu_clock.throttle_names("[N/A]"), "[N/A]")
        self.assertEqual(gpu_clock.throttle_names(None), "-")

    def test_cells(self):
        clock = {"sm_mhz": 1980, "throttle_reasons": "0x0"}
        self.assertEqual(attention.clock_cells({"clock_before": clock,
                                                "clock_after": {"sm_mhz": 1755, "throttle_reasons": "0x4"}}),
                         ("1980/1755", "none/power cap"))
        self.assertEqual(attention.clock_cells({"clock_before": None, "clock_after": clock}), ("-/1980", "-/none"))
        self.assertEqual(attention.clock_cells({}), ("-/-", "-/-"))
        self.assertEqual(attention.rounds_cell({"rounds": 3, "forward_rounds_ms": [0.19, 0.14, 0.15],
                                                "backward_rounds_ms": [0.3, 0.35, 0.31]}),
                         "3: 0.140–0.190 / 0.300–0.350")
        self.assertEqual(attention.rounds_cell({"rounds": 3, "forward_rounds_ms": [0.2]}), "3: 0.200–0.200 / -")
        self.assertEqual(attention.rounds_cell({"rounds": 1}), "1")
        self.assertEqual(attention.rounds_cell({}), "1")  # PyTorch's: timed once


class Runs(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.build = os.path.join(self.dir, "build")
        self.stages = os.path.join(self.build, "stages")
        self.bin = os.path.join(self.dir, "bin")  # the PATH the script gets: nvidia-smi or nothing
        os.makedirs(self.stages)
        os.makedirs(self.bin)
        for stage in ("02", "03", "04"):
            executable(os.path.join(self.stages, f"bench_stage{stage}"), FAKE_BENCH)
        self.out = os.path.join(self.dir, "out")

    def run_script(self, *args):
        env = dict(os.environ, PATH=self.bin)
        env.pop("CUDA_VISIBLE_DEVICES", None)
        return subprocess.run([sys.executable, SCRIPT, "--build", self.build, "--out", self.out, "--no-torch",
                               "--seq", "1024", *args], capture_output=True, text=True, timeout=60, env=env)

    def calls(self):
        with open(os.path.join(self.stages, "calls.txt")) as f:
            return f.read().splitlines()

    def results(self):
        with open(os.path.join(self.out, "results.json")) as f:
            return json.load(f)

    def test_dry_run(self):
        r = self.run_script("--dry-run", "--rounds", "3", "--seq", "1024,2048")
        self.assertEqual(r.returncode, 0, r.stderr)
        commands = r.stdout.splitlines()
        self.assertEqual(len(commands), 6, r.stdout)
        for line in commands:
            self.assertEqual(line.endswith("--attention-variants yes --rounds 3"), "bench_stage03" in line, line)
        self.assertFalse(os.path.exists(os.path.join(self.stages, "calls.txt")))  # nothing ran
        self.assertFalse(os.path.exists(os.path.join(self.out, "results.json")))

    def test_rounds_out_of_range(self):
        for n in ("0", "51"):
            r = self.run_script("--dry-run", "--rounds", n)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--rounds", r.stderr)

    def test_rounds_and_clocks(self):
        with open(os.path.join(self.bin, "clocks.txt"), "w") as f:
            f.write("345, 0x0000000000000001\n1980, 0x0000000000000000\n1755, 0x0000000000000004\n")
        executable(os.path.join(self.bin, "nvidia-smi"), FAKE_SMI)
        r = self.run_script("--rounds", "3", "--stages", "02,03")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        calls = self.calls()
        self.assertEqual(calls[0].split()[0], "bench_stage02")
        self.assertNotIn("--rounds", calls[0])
        self.assertTrue(calls[1].endswith("--attention-variants yes --rounds 3"), calls[1])
        res = self.results()
        self.assertEqual((res["rounds"], res["rounds_stage"]), (3, "03"))
        rows = {row["entry"]: row for row in res["rows"]}
        self.assertEqual(list(rows), ["C++ stage 02", "C++ stage 03", "C++ stage 03 (16 rows per warp)"])
        # Stage 02 timed once: one round, its median; before and after its run, the first two readings.
        s02 = rows["C++ stage 02"]
        self.assertEqual((s02["rounds"], s02["forward"], s02["forward_rounds_ms"]), (1, 0.14, [0.14]))
        self.assertEqual(s02["clock_before"], {"sm_mhz": 345, "throttle_reasons": "0x0000000000000001"})
        self.assertEqual(s02["clock_after"]["sm_mhz"], 1980)
        # Stage 03's entries: bench_stageNN's median of 3 rounds, the rounds, one reading before and
        # one after the run they share.
        variant = rows["C++ stage 03 (16 rows per warp)"]
        self.assertEqual(variant["rounds"], 3)
        self.assertEqual(len(variant["forward_rounds_ms"]), 3)
        self.assertAlmostEqual(variant["forward"], sorted(variant["forward_rounds_ms"])[1])
        for entry in ("C++ stage 03", "C++ stage 03 (16 rows per warp)"):
            self.assertEqual(rows[entry]["clock_before"]["sm_mhz"], 1755)
            self.assertEqual(rows[entry]["clock_after"]["throttle_reasons"], "0x0000000000000004")
        table = r.stdout
        self.assertIn("| rounds | SM MHz before/after | throttle before/after |", table)
        self.assertIn("median of 3 interleaved rounds", table)
        line = next(x for x in table.splitlines() if x.startswith("| C++ stage 03 (16 rows per warp) |"))
        self.assertTrue(line.endswith("| 3: 0.150–0.190 / 0.310–0.350 | 1755/1755 | power cap/power cap |"), line)
        line = next(x for x in table.splitlines() if x.startswith("| C++ stage 02 |"))
        self.assertTrue(line.endswith("| 1 | 345/1980 | idle/none |"), line)
        # The readers of results.json read it as before (tests/docs/measured.py: entry, T, B, forward, backward).
        self.assertIsInstance(variant["forward"], float)

    def test_without_nvidia_smi(self):
        for present in (False, True):  # missing, then one that fails (no clocks.txt: exit status 9)
            if present:
                executable(os.path.join(self.bin, "nvidia-smi"), FAKE_SMI)
            r = self.run_script("--stages", "03")
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            for row in self.results()["rows"]:
                self.assertIsNone(row["clock_before"])
                self.assertIsNone(row["clock_after"])
                self.assertEqual(row["rounds"], 1)
            line = next(x for x in r.stdout.splitlines() if x.startswith("| C++ stage 03 |"))
            self.assertTrue(line.endswith("| 1 | -/- | -/- |"), line)
            self.assertIn("rounds: every entry is timed once", r.stdout)


if __name__ == "__main__":
    unittest.main()
