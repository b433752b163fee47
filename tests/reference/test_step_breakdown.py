#!/usr/bin/env python3
"""Self-test of tests/bench/step_breakdown.py (the per-stage bar of where a step's time goes).

    python3 tests/reference/test_step_breakdown.py    (CTest: step_breakdown_selftest, label bench)

On the kernel benchmark's JSON files of docs/results/2026-11-23_h100/kernels/ (and that day's
ladder), with no GPU: the script exits 0 and writes an SVG that parses as XML and is the one
committed beside those files, and the sums it prints are what those files give. On small
made-up files: a fused slot's row is counted in place of the single ops it replaces, and a row
the script's tables do not know, or one a step needs and the file lacks, makes it exit 1 and
name the row. On made-up trainer profiles (--profile): the one bar is the step's time, each graph
op name in its group, a nested op not added twice, the time between the ops at the end; an
unknown op name exits 1 and is named, a file that is not a profile exits 2 with one line, and a
CPU profile (no roof) draws as well. Python standard library only; well under a second.

The SVG of the committed files goes to $STEP_BREAKDOWN_OUT (CTest: the build directory), or to
a temporary directory.
"""

import copy
import os
import re
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "tests", "bench", "step_breakdown.py")
RESULTS = os.path.join(REPO, "docs", "results", "2026-11-23_h100")
KERNELS = [os.path.join(RESULTS, "kernels", f"stage0{n}.json") for n in range(3)]
LADDER = os.path.join(RESULTS, "ladder", "results.json")
REDRAW = ("python3 tests/bench/step_breakdown.py --out docs/results/2026-11-23_h100/kernels/step_breakdown.svg "
          "docs/results/2026-11-23_h100/kernels/stage0{0,1,2}.json "
          "--ladder docs/results/2026-11-23_h100/ladder/results.json")


sys.path.insert(0, os.path.dirname(SCRIPT))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import step_breakdown  # noqa: E402

sys.path.insert(0, HERE)
import script_harness  # noqa: E402  (next to this file)


def run(*args):
    """The script as a program: its exit status, stdout and stderr."""
    return script_harness.run(SCRIPT, *args)


def call(*args):
    """The same in this process (no second interpreter to start: the test stays well under a second)."""
    return script_harness.call(step_breakdown.main, *args)


def sums(stdout):
    """The numbers of the table's `sum` line, one per stage."""
    line = next(line for line in stdout.splitlines() if re.match(r"sum +[0-9]", line))
    return [float(x) for x in line.split()[1:]]


def row(op, pass_, ms, source="stages/00_fp32_baseline/x.cuh", batch=16):
    return {"op": op, "pass": pass_, "batch": batch, "seq": 1024, "source": source, "status": "ok",
            "reason": None, "ms_median": ms}


# Every single op of a step at 1 ms, and the four slots unfused: a step is then the number of
# calls, 12 blocks: embedding 2, LayerNorm 25 + 25, 8 block matmuls x 12, LM head 2,
# attention 24, GELU 24, residual 24, classifier 2, optimizer 1 = 225.
SINGLE = ["Embedding forward", "Embedding backward", "LayerNorm forward", "LayerNorm backward",
          "Matmul qkv forward", "Matmul qkv backward", "Matmul attn_proj forward", "Matmul attn_proj backward",
          "Matmul fc forward", "Matmul fc backward", "Matmul fc_proj forward", "Matmul fc_proj backward",
          "Matmul lm_head forward", "Matmul lm_head backward", "Attention forward", "Attention backward",
          "Gelu forward", "Gelu backward", "Residual forward", "Classifier forward", "Classifier backward"]
SLOTS = [("MatmulBiasGelu fc", "forward"), ("MatmulBackwardGelu fc_proj", "backward"),
         ("ResidualLayerNorm", "forward"), ("ResidualLayerNorm", "backward"),
         ("ClassifierWithGrad", "forward+backward")]
UNFUSED_TOTAL = 2 + 50 + 96 + 2 + 24 + 24 + 24 + 2 + 1


def made_up(stage, fused):
    rows = [row(*name.rsplit(" ", 1), 1.0) for name in SINGLE]
    for op, pass_ in SLOTS:
        rows.append(row(op, pass_, 1.0, "stages/04_fused/fused.cuh" if fused else
                        "unfused: X, then Y (common/train/compose.h)"))
    rows.append(row("Matmul lm_head at 50304", "forward", 99.0))  # not part of a step
    rows.append(row("Optimizer", "step", 1.0, batch=None))
    return {"stage": stage, "device_name": "Made-up GPU", "date": "2026-01-01T00:00:00Z",
            "settings": {"batch": [16], "seq": 1024}, "rows": rows}


# A trainer profile (train --profile) of a fused stage on two GPUs, with every op name the graph
# gives op(): (name, pass, calls, ms, within). The norm's all-reduce runs inside the optimizer's
# time, so it must not be added again (its 2 ms would show).
PROFILE_OPS = [
    ("embedding", "forward", 1, 1.0, None), ("ln_1", "forward", 1, 0.5, None),
    ("qkv", "forward", 12, 10.0, None), ("attention", "forward", 12, 8.0, None),
    ("attn_proj", "forward", 12, 4.0, None), ("residual+ln_2", "forward", 12, 3.0, None),
    ("fc+gelu", "forward", 12, 12.0, None), ("fc_proj", "forward", 12, 11.0, None),
    ("residual+ln_1", "forward", 11, 2.5, None), ("residual+ln_f", "forward", 1, 0.5, None),
    ("lm_head", "backward", 2, 6.0, None), ("classifier", "backward", 2, 2.0, None),
    ("lm_head backward", "backward", 2, 12.0, None), ("residual+ln_f backward", "backward", 1, 0.5, None),
    ("fc_proj+gelu backward", "backward", 12, 20.0, None), ("fc backward", "backward", 12, 22.0, None),
    ("residual+ln_2 backward", "backward", 12, 4.0, None), ("attn_proj backward", "backward", 12, 8.0, None),
    ("attention backward", "backward", 12, 16.0, None), ("qkv backward", "backward", 12, 19.0, None),
    ("ln_1 backward", "backward", 1, 0.5, None), ("residual+ln_1 backward", "backward", 11, 3.5, None),
    ("embedding backward", "backward", 1, 2.0, None), ("zero_grad", "update", 1, 0.25, None),
    ("gradient reduction (bucket)", "backward", 4, 1.5, None), ("gradient reduction", "backward", 1, 0.5, None),
    ("optimizer", "update", 1, 3.0, None), ("weight all-gather", "update", 1, 0.75, None),
    ("gradient norm all-reduce", "update", 1, 2.0, "optimizer"),
]
# The groups' ms, left to right, then the time between the ops: 174 ms of ops in a 180 ms step.
PROFILE_GROUPS = [("block matmuls", 106.0), ("LM head", 18.0), ("attention", 24.0), ("LayerNorm", 15.0),
                  ("classifier", 2.0), ("embedding", 3.0), ("optimizer", 3.0), ("communication", 2.75),
                  ("zero_grad", 0.25), ("between the ops", 6.0)]


def profile(ops=PROFILE_OPS, step_ms=180.0, **fields):
    """A made-up trainer profile; `fields` replace the file's own."""
    ops_ms = sum(ms for _, _, _, ms, within in ops if within is None)
    data = {"kind": "gpt-step-profile", "version": 1, "stage": "06_multi_gpu_mfu",
            "device": "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)",
            "model": "d12 (12 layers, 12 heads, 768 wide, 1024 positions)",
            "batch": 16, "seq": 1024, "micro_batches": 2, "world": 2, "step": 3, "captured": True,
            "clock": "CUDA events on the stream",
            "roof": {"source": "measured at start-up", "gb_per_s": 3000.0, "tflops": 700.0},
            "ops": [{"name": name, "pass": pass_, "calls": calls, "ms": ms, "share": ms / step_ms,
                     "bytes": 1.0e8, "flops": 0, "gb_per_s": 2000.0, "tflops": None, "roof_share": 0.66,
                     "within": within} for name, pass_, calls, ms, within in ops],
            "ops_ms": ops_ms, "step_ms": step_ms, "difference_ms": step_ms - ops_ms}
    data.update(fields)
    return data


def group_lines(stdout):
    """The profile table's lines: {group: (ms, share %)}."""
    found = re.findall(r"^([a-zA-Z_ ]+?) +(-?[0-9.]+) +(-?[0-9.]+)%", stdout, re.M)
    return {name: (float(ms), float(share)) for name, ms, share in found}


def svg_bar(path):
    """The SVG's texts, and its bar's segments (rects as tall as a bar) as (x, width, fill)."""
    root = ET.parse(path).getroot()
    texts = [(float(t.get("x")), t.text or "") for t in root.iter() if t.tag.endswith("text")]
    segments = [(float(r.get("x")), float(r.get("width")), r.get("fill")) for r in root.iter()
                if r.tag.endswith("rect") and r.get("height") == "36.0"]
    return texts, segments


class CommittedResults(unittest.TestCase):
    def test_figure_and_table_of_the_committed_files(self):
        out_dir = os.environ.get("STEP_BREAKDOWN_OUT")
        if not out_dir:
            tmp = tempfile.TemporaryDirectory()
            self.addCleanup(tmp.cleanup)
            out_dir = tmp.name
        os.makedirs(out_dir, exist_ok=True)
        svg = os.path.join(out_dir, "step_breakdown.svg")
        if os.path.exists(svg):
            os.remove(svg)
        r = run("--out", svg, *KERNELS, "--ladder", LADDER)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        root = ET.parse(svg).getroot()
        self.assertTrue(root.tag.endswith("svg"))
        text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
        self.assertIn("not a profiler trace", text)
        self.assertIn("NVIDIA H100 80GB HBM3, 2026-11-23", text)
        # The sums of the committed files, and the ladder's ms/step beside them.
        self.assertEqual(sums(r.stdout), [548.7, 340.6, 271.2])
        self.assertRegex(r.stdout, r"ladder ms/step +548\.0 +341\.8 +271\.1\n")
        # The committed figure is this one: it can be drawn again from the committed files.
        with open(svg, "rb") as a, open(os.path.join(RESULTS, "kernels", "step_breakdown.svg"), "rb") as b:
            self.assertTrue(a.read() == b.read(), "docs/results/2026-11-23_h100/kernels/step_breakdown.svg is not "
                            "what the script draws; run: " + REDRAW)


class MadeUpFiles(script_harness.InputFiles):

    def test_unfused_slots_count_their_single_ops(self):
        r = call("--out", os.path.join(self.dir, "a.svg"), self.write("s.json", made_up("03_x", fused=False)))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sums(r.stdout), [UNFUSED_TOTAL])

    def test_a_fused_slot_replaces_its_single_ops(self):
        # Fused: fc+gelu 12, fc_proj+gelu backward 12, residual+LayerNorm 24 + 24, classifier 1 in
        # place of 12 + 12 + 12 + 12 + 24 + 24 + 24 + 2 calls; LayerNorm keeps block 0's ln_1.
        fused = self.write("s.json", made_up("04_x", fused=True))
        r = call("--out", os.path.join(self.dir, "b.svg"), "--detail", fused)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        fused_total = UNFUSED_TOTAL - (12 * 4 + 24 * 3 + 2) + (12 + 12 + 24 + 24 + 1)
        self.assertEqual(sums(r.stdout), [fused_total])
        self.assertRegex(r.stdout, r"Residual forward .*not counted: replaced by a fused slot")
        self.assertRegex(r.stdout, r"LayerNorm forward +1\.0000 +1 ")
        self.assertRegex(r.stdout, r"Matmul lm_head at 50304 forward .*not counted: the LM head at another width")

    def test_an_unknown_row_is_reported(self):
        data = made_up("04_x", fused=True)
        data["rows"].append(row("Softcap", "forward", 1.0))
        missing = copy.deepcopy(made_up("05_y", fused=False))
        missing["rows"] = [r for r in missing["rows"] if r["op"] != "Attention"]
        svg = os.path.join(self.dir, "c.svg")
        r = call("--out", svg, self.write("a.json", data), self.write("b.json", missing))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("stage 04: row 'Softcap forward' is not in the tables", r.stderr)
        self.assertIn("stage 05: row 'Attention forward' (B=16) is not in the file", r.stderr)
        self.assertTrue(os.path.exists(svg))
        with open(svg, encoding="utf-8") as f:
            self.assertIn("incomplete: stage 04, 05", f.read())

    def test_bad_input(self):
        r = call("--out", os.path.join(self.dir, "d.svg"), os.path.join(self.dir, "none.json"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read", r.stderr)
        other_batch = self.write("s.json", made_up("03_x", fused=False))
        r = call("--out", os.path.join(self.dir, "e.svg"), "--batch", "8", other_batch)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no input has rows at B=8", r.stderr)



class TrainerProfiles(script_harness.InputFiles):

    def draw(self, data, *extra):
        svg = os.path.join(self.dir, "run.profile.svg")
        path = data if isinstance(data, str) and os.path.exists(data) else self.write("run.profile.json", data)
        return call("--profile", path, "--out", svg, *extra), svg

    def test_every_graph_op_has_a_group(self):
        self.assertEqual(sorted(step_breakdown.PROFILE_OPS), sorted(name for name, *_ in PROFILE_OPS))

    def test_one_bar_as_long_as_the_step(self):
        r, svg = self.draw(profile())
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        groups = group_lines(r.stdout)
        for name, ms in PROFILE_GROUPS:
            self.assertAlmostEqual(groups[name][0], ms, places=6, msg=name)
        self.assertEqual(groups["step"], (180.0, 100.0))
        self.assertRegex(r.stdout, r"gradient norm all-reduce \(in optimizer\) +2\.00\n")
        # The segments, left to right, are the groups and then the time between the ops (hatched):
        # each as wide as its share of the step, and the step's time written where the bar ends.
        texts, segments = svg_bar(svg)
        self.assertEqual(len(segments), len(PROFILE_GROUPS))
        self.assertEqual(segments[-1][2], "url(#between)")
        width = sum(w for _, w, _ in segments)
        for (_, w, _), (name, ms) in zip(segments, PROFILE_GROUPS):
            self.assertAlmostEqual(w / width, ms / 180.0, delta=0.002, msg=name)
        end = next(x for x, text in texts if text == "step 180.0 ms")
        self.assertAlmostEqual(segments[-1][0] + segments[-1][1] + 8, end, delta=0.2)
        words = " ".join(text for _, text in texts)
        self.assertIn("06_multi_gpu_mfu, step 3 of its run, timed op by op", words)
        self.assertIn("B=16 T=1024, 2 micro-batches, 2 GPUs, NVIDIA H100 80GB HBM3", words)
        self.assertIn("(qkv, attn_proj, fc, fc_proj); with the GELU", words)
        self.assertIn("LayerNorm; with the residual add", words)
        self.assertIn("not added again: gradient norm all-reduce 2.00 ms (in optimizer)", words)
        self.assertIn("CUDA Graph", words)

    def test_ops_that_overlap_the_step(self):
        # 174 ms of ops in a 170 ms step (a collective on a stream of its own): the bar is the
        # ops, the step a mark across it, and nothing is hatched.
        r, svg = self.draw(profile(step_ms=170.0))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(group_lines(r.stdout)["between the ops"][0], -4.0)
        texts, segments = svg_bar(svg)
        self.assertNotIn("url(#between)", [fill for _, _, fill in segments])
        words = [text for _, text in texts]
        self.assertIn("ops 174.0 ms", words)
        self.assertIn("step 170.0", words)

    def test_an_unknown_op(self):
        r, svg = self.draw(profile(PROFILE_OPS + [("softcap", "forward", 1, 1.0, None)], step_ms=181.0))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("op 'softcap' is not in the table of step_breakdown.py", r.stderr)
        self.assertEqual(group_lines(r.stdout)["unknown"][0], 1.0)
        texts, _ = svg_bar(svg)
        self.assertIn("incomplete: op 'softcap' is not in the table of step_breakdown.py (PROFILE_OPS)",
                      [text for _, text in texts])

    def test_totals_the_ops_do_not_give(self):
        r, _ = self.draw(profile(ops_ms=176.0))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('"ops_ms" is 176.000 ms, the ops give 174.000 ms', r.stderr)

    def test_not_a_profile(self):
        cases = [
            ("{", "cannot read"),
            ({"kind": "gpt-run-log"}, 'its "kind" is "gpt-run-log", not "gpt-step-profile"'),
            (made_up("04_x", fused=True), "the kernel benchmark's JSON, not a trainer profile"),
            (profile(version=2), "profile version 2: this script reads version 1"),
            (dict(profile(), step_ms=None), '"step_ms" is null, not a positive number'),
            (dict(profile(), ops={}), '"ops" is not a list of ops'),
            (dict(profile(), ops=[{"name": "qkv", "ms": "9.1"}]), "op 'qkv' has \"ms\" \"9.1\", not a time"),
            (profile(difference_ms=None), '"difference_ms" is null, not a number'),
        ]
        for data, message in cases:
            r, svg = self.draw(data)
            self.assertEqual(r.returncode, 2, message + ": " + r.stdout + r.stderr)
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertRegex(r.stderr, r"^step_breakdown\.py: error: ")
            self.assertIn(message, r.stderr)
            self.assertFalse(os.path.exists(svg))
        r, _ = self.draw(profile(), "--batch", "16")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--profile draws the profile's own step", r.stderr)

    def test_a_cpu_profile(self):
        ops = [op for op in PROFILE_OPS if op[0] not in ("gradient reduction (bucket)", "gradient reduction",
                                                         "weight all-gather", "gradient norm all-reduce")]
        data = profile(ops, step_ms=9000.0, stage="00_fp32_baseline", device="CPU (2 threads)", micro_batches=1,
                       world=1, captured=False, clock="the host clock", roof={"source": "none", "gb_per_s": None,
                                                                              "tflops": None})
        for op in data["ops"]:
            op.update(gb_per_s=None, tflops=None, roof_share=None)
        r, svg = self.draw(data, "--detail")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(group_lines(r.stdout)["between the ops"][0], 9000.0 - 171.25)
        self.assertIn("(no roof measured: no share of a ceiling)", r.stdout)
        self.assertRegex(r.stdout, r"qkv +forward +12 +10\.000 +0\.1% +- +block matmuls\n")
        texts, _ = svg_bar(svg)
        words = " ".join(text for _, text in texts)
        self.assertIn("00_fp32_baseline, step 3 of its run, timed op by op (the host clock)", words)
        self.assertIn("B=16 T=1024, CPU (2 threads)", words)
        self.assertIn("step 9000.0 ms", words)
        self.assertNotIn("CUDA Graph", words)
        self.assertNotIn("communication", words)


if __name__ == "__main__":
    unittest.main(verbosity=2)
