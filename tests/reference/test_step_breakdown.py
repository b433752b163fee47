#!/usr/bin/env python3
"""Self-test of tests/bench/step_breakdown.py (the per-stage bar of where a step's time goes).

    python3 tests/reference/test_step_breakdown.py    (CTest: step_breakdown_selftest, label bench)

On the kernel benchmark's JSON files of docs/results/2026-11-23_h100/kernels/ (and that day's
ladder), with no GPU: the script exits 0 and writes an SVG that parses as XML and is the one
committed beside those files, and the sums it prints are what those files give. On small
made-up files: a fused slot's row is counted in place of the single ops it replaces, and a row
the script's tables do not know, or one a step needs and the file lacks, makes it exit 1 and
name the row. Python standard library only; well under a second.

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


if __name__ == "__main__":
    unittest.main(verbosity=2)
