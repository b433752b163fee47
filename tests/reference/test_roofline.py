#!/usr/bin/env python3
"""Self-test of tests/bench/roofline.py (every op of the kernel benchmark against the roofs of its GPU).

    python3 tests/reference/test_roofline.py    (CTest: roofline_selftest, label bench)

On the kernel benchmark's JSON files of docs/results/2026-11-23_h100/kernels/ and that day's
ceilings (ladder/ceilings.json), with no GPU: the script exits 0 and writes an SVG that parses as
XML and is the one committed beside those files, and the intensities and percentages it prints
are those the files give (stage 02's LM head forward at about 723 FLOP/B), stage 00's fp32
matmuls read against the fp32 peak of the data sheet and stage 01's TF32 ones against the TF32
peak. The same for the H200's files of docs/results/2026-11-27_h200/ (stages 00-06): the figure
committed there is what the script draws. On small made-up files: an unfused slot's row is left
out, a row that was not measured is listed as missing and one above a roof is reported (exit 1),
the roofs come from --ceilings when given and from the stage files otherwise, an fp32 or TF32
row is judged against the roof of its own arithmetic (and against the bf16 roof, with a note,
on a GPU the script has no data-sheet peaks for), and a malformed file is one line on stderr and
exit 2. Python standard library only; about a second.

The SVGs of the committed files go to $ROOFLINE_OUT (CTest: the build directory), or to a
temporary directory.
"""

import json
import os
import re
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "tests", "bench", "roofline.py")
RESULTS = os.path.join(REPO, "docs", "results", "2026-11-23_h100")
KERNELS = [os.path.join(RESULTS, "kernels", f"stage0{n}.json") for n in range(3)]
CEILINGS = os.path.join(RESULTS, "ladder", "ceilings.json")
REDRAW = ("python3 tests/bench/roofline.py --out docs/results/2026-11-23_h100/kernels/roofline.svg "
          "--ceilings docs/results/2026-11-23_h100/ladder/ceilings.json "
          "docs/results/2026-11-23_h100/kernels/stage0{0,1,2}.json")
H200 = os.path.join(REPO, "docs", "results", "2026-11-27_h200")
H200_KERNELS = [os.path.join(H200, "kernels", f"stage0{n}.json") for n in range(7)]
H200_REDRAW = ("python3 tests/bench/roofline.py --out docs/results/2026-11-27_h200/kernels/roofline.svg "
               "--ceilings docs/results/2026-11-27_h200/ladder/ceilings.json "
               "docs/results/2026-11-27_h200/kernels/stage0{0,1,2,3,4,5,6}.json")
FP32_PEAK, TF32_PEAK = 67.0, 989.0 / 2  # the H100 SXM's and H200's data sheets: TF32 989 with sparsity, half without


sys.path.insert(0, os.path.dirname(SCRIPT))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import roofline  # noqa: E402

sys.path.insert(0, HERE)
import script_harness  # noqa: E402  (next to this file)


def run(*args):
    """The script as a program: its exit status, stdout and stderr."""
    return script_harness.run(SCRIPT, *args)


def call(*args):
    """The same in this process (no second interpreter to start: the test stays well under a second)."""
    return script_harness.call(roofline.main, *args)


def table_row(stdout, op, pass_, stage):
    """The numbers of one line of the table: [FLOP/B, TFLOP/s, % of roof] or [GB/s, % of roof]."""
    pattern = re.compile(rf"^{re.escape(op)} +{re.escape(pass_)} +{stage} +([0-9.]+) +([0-9.]+)(?: +([0-9.]+))?",
                         re.M)
    m = pattern.search(stdout)
    assert m, f"no line for {op} {pass_} stage {stage} in:\n{stdout}"
    return [float(x) for x in m.groups() if x is not None]


def row(op, pass_, ms, bytes_, flops=None, source="stages/00_fp32_baseline/x.cuh", batch=16, status="ok"):
    return {"op": op, "pass": pass_, "batch": batch, "seq": 1024, "source": source, "status": status,
            "reason": None if status == "ok" else "needs 99 GiB, 80 GiB free", "bytes": bytes_, "flops": flops,
            "ms_median": ms if status == "ok" else None}


def made_up(stage, rows, ceilings=(1000.0, 100.0), gpu="Made-up GPU", precision=None):
    """A stage file; its ceilings: copy GB/s, GEMM TFLOP/s (ridge at 100 FLOP/B by default)."""
    data = {"stage": stage, "device_name": gpu, "date": "2026-01-01T00:00:00Z",
            "settings": {"batch": [16], "seq": 1024}, "rows": rows}
    if precision:
        data["precision"] = precision
    if ceilings:
        data["ceilings"] = {"copy": {"gb_per_s": ceilings[0]}, "gemm": {"tflops": ceilings[1]}}
    return data


class CommittedResults(unittest.TestCase):
    def out(self, name):
        """A fresh path for an SVG in $ROOFLINE_OUT, or in a temporary directory."""
        out_dir = os.environ.get("ROOFLINE_OUT")
        if not out_dir:
            tmp = tempfile.TemporaryDirectory()
            self.addCleanup(tmp.cleanup)
            out_dir = tmp.name
        os.makedirs(out_dir, exist_ok=True)
        svg = os.path.join(out_dir, name)
        if os.path.exists(svg):
            os.remove(svg)
        return svg

    def test_figure_and_table_of_the_committed_files(self):
        svg = self.out("roofline.svg")
        r = run("--out", svg, "--ceilings", CEILINGS, *KERNELS)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stderr, "")
        root = ET.parse(svg).getroot()
        self.assertTrue(root.tag.endswith("svg"))
        text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
        self.assertIn("NVIDIA H100 80GB HBM3, 2026-11-23, GPT-2 124M B=16 T=1024", text)
        self.assertIn("each point is one op timed alone (kernel benchmark, median, L2 emptied), counted as in "
                      "common/train/op_cost.h", text)
        self.assertIn("lm_head fwd", text)
        self.assertIn("attention fwd, bwd", text)
        # The roofs of ceilings.json, and the ridge where they meet.
        self.assertIn("roofs: copy 3012.3 GB/s, bf16 GEMM 777.9 TFLOP/s, ridge at 258.2 FLOP/B", r.stdout)
        # The fp32 and TF32 roofs: the data sheet's peaks, named as such, with their source.
        self.assertIn("data-sheet peaks of the NVIDIA H100 SXM, not measured: fp32 67.0 TFLOP/s (ridge at 22.2 "
                      "FLOP/B), TF32 494.5 TFLOP/s (ridge at 164.2 FLOP/B); NVIDIA H100 Tensor Core GPU data sheet, "
                      "NVIDIA, 2022, https://www.nvidia.com/en-us/data-center/h100/", r.stdout)
        self.assertIn("fp32 67 and TF32 494.5 TFLOP/s, the NVIDIA H100 SXM's data-sheet peaks, not measured", text)
        self.assertIn("fp32 roof: 67 TFLOP/s, data-sheet peak", text)
        self.assertIn("TF32 roof: 494.5 TFLOP/s, data-sheet peak", text)
        self.assertIn("compute roof: bf16 GEMM 777.9 TFLOP/s, measured", text)

        # Stage 02's LM head forward: its intensity is its FLOPs over its bytes in the file.
        with open(KERNELS[2], encoding="utf-8") as f:
            lm = next(x for x in json.load(f)["rows"]
                      if x["op"] == "Matmul lm_head" and x["pass"] == "forward" and x["batch"] == 16)
        intensity = lm["flops"] / lm["bytes"]
        self.assertTrue(700 < intensity < 740, intensity)
        got = table_row(r.stdout, "Matmul lm_head", "forward", "02")
        self.assertAlmostEqual(got[0], intensity, delta=0.05)
        self.assertAlmostEqual(got[1], lm["tflops"], delta=0.01)
        self.assertAlmostEqual(got[2], 100 * lm["tflops"] / 777.889, delta=0.05)  # right of the ridge: compute roof
        # Stage 00 computes in fp32 without tensor cores: its matmuls are read against the fp32 peak
        # (ridge at 22 FLOP/B), not the bf16 roof; stage 01's TF32 ones against the TF32 peak.
        for stage, peak, name in (("00", FP32_PEAK, "fp32 peak"), ("01", TF32_PEAK, "TF32 peak")):
            for op in ("Matmul qkv", "Matmul attn_proj", "Matmul lm_head", "Attention"):
                got = table_row(r.stdout, op, "forward", stage)
                self.assertAlmostEqual(got[2], 100 * got[1] / peak, delta=0.1)  # TFLOP/s printed to 0.01
                self.assertRegex(r.stdout, rf"{op} +forward +{stage} .* {name} +compute\n")
        # Stage 00's qkv forward: 44.9 TFLOP/s, about 67% of the fp32 peak (it was 6% of the bf16 roof).
        self.assertAlmostEqual(table_row(r.stdout, "Matmul qkv", "forward", "00")[2], 67.1, delta=0.1)
        # A TF32 matmul left of the bf16 ridge (258) but right of the TF32 one (164): compute-bound.
        self.assertRegex(r.stdout, r"Matmul attn_proj +forward +01 +187\.6 .* TF32 peak +compute\n")
        self.assertRegex(r.stdout, r"Matmul qkv +forward +02 .* bf16 GEMM +compute\n")
        # Every matmul-like row of the three files at B = 16 is a point, every other row a bar;
        # the unfused slots are not there.
        self.assertEqual(len(re.findall(r"^(Matmul|Attention) .* (memory|compute)$", r.stdout, re.M)), 36)
        self.assertEqual(len(re.findall(r"^(Embedding|LayerNorm|Gelu|Residual|Classifier|Optimizer) ", r.stdout,
                                        re.M)), 30)
        self.assertNotIn("MatmulBiasGelu", r.stdout)
        self.assertNotIn("ResidualLayerNorm", r.stdout)
        # The committed figure is this one: it can be drawn again from the committed files.
        with open(svg, "rb") as a, open(os.path.join(RESULTS, "kernels", "roofline.svg"), "rb") as b:
            self.assertTrue(a.read() == b.read(), "docs/results/2026-11-23_h100/kernels/roofline.svg is not what "
                            "the script draws; run: " + REDRAW)

    def test_the_h200_figure_is_what_the_script_draws(self):
        svg = self.out("roofline_h200.svg")
        r = call("--out", svg, "--ceilings", os.path.join(H200, "ladder", "ceilings.json"), *H200_KERNELS)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("data-sheet peaks of the NVIDIA H200 SXM, not measured: fp32 67.0 TFLOP/s", r.stdout)
        self.assertIn("NVIDIA H200 Tensor Core GPU data sheet, NVIDIA, 2023, "
                      "https://www.nvidia.com/en-us/data-center/h200/", r.stdout)
        self.assertRegex(r.stdout, r"Matmul fc +forward +00 .* fp32 peak +compute\n")
        self.assertRegex(r.stdout, r"Matmul fc +forward +01 .* TF32 peak +compute\n")
        self.assertRegex(r.stdout, r"Matmul fc +forward +06 .* bf16 GEMM +compute\n")
        with open(svg, "rb") as a, open(os.path.join(H200, "kernels", "roofline.svg"), "rb") as b:
            self.assertTrue(a.read() == b.read(), "docs/results/2026-11-27_h200/kernels/roofline.svg is not what "
                            "the script draws; run: " + H200_REDRAW)


class MadeUpFiles(script_harness.InputFiles):

    def svg(self, name="a.svg"):
        return os.path.join(self.dir, name)

    def test_points_bars_and_the_rows_left_out(self):
        rows = [
            # 2e12 FLOPs over 1e10 bytes: 200 FLOP/B, right of the ridge (100); 40 ms: 50 TFLOP/s, 50%.
            row("Matmul fc", "forward", 40.0, 1e10, 2e12),
            # 50 FLOP/B, left of it: the roof is 1000 GB/s x 50 = 50 TFLOP/s; 25 TFLOP/s is 50%.
            row("Attention", "forward", 4.0, 2e9, 1e11),
            row("LayerNorm", "forward", 2.0, 1e9),  # 500 GB/s, 50% of the copy roof
            row("MatmulBiasGelu fc", "forward", 1.0, 1e9, 1e11, source="unfused: Matmul, then Gelu"),
            row("Matmul fc", "forward", 1.0, 1e9, 1e11, batch=8),  # another batch size
            row("Optimizer", "step", 1.0, 4e8, batch=None),  # no batch size: kept
        ]
        r = call("--out", self.svg(), self.write("s.json", made_up("03_x", rows)))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(table_row(r.stdout, "Matmul fc", "forward", "03"), [200.0, 50.0, 50.0])
        self.assertEqual(table_row(r.stdout, "Attention", "forward", "03"), [50.0, 25.0, 50.0])
        self.assertEqual(table_row(r.stdout, "LayerNorm", "forward", "03"), [500.0, 50.0])
        self.assertEqual(table_row(r.stdout, "Optimizer", "step", "03"), [400.0, 40.0])
        self.assertNotIn("MatmulBiasGelu", r.stdout)
        self.assertIn("ridge at 100.0 FLOP/B", r.stdout)
        self.assertEqual(r.stdout.count("Matmul fc "), 1)

    def test_ceilings_from_the_option_or_the_highest_of_the_stages(self):
        a = self.write("a.json", made_up("00_a", [row("Matmul fc", "forward", 40.0, 1e10, 2e12)], (1000.0, 100.0)))
        b = self.write("b.json", made_up("01_b", [row("Matmul fc", "forward", 40.0, 1e10, 2e12)], (900.0, 120.0)))
        r = call("--out", self.svg(), a, b)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("roofs: copy 1000.0 GB/s, bf16 GEMM 120.0 TFLOP/s", r.stdout)
        ceilings = self.write("c.json", {"device_name": "Made-up GPU", "copy": {"gb_per_s": 2000.0},
                                         "gemm": {"tflops": 400.0}})
        r = call("--out", self.svg(), "--ceilings", ceilings, a, b)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("roofs: copy 2000.0 GB/s, bf16 GEMM 400.0 TFLOP/s, ridge at 200.0 FLOP/B", r.stdout)
        # No ceilings anywhere: nothing to draw the roofs from.
        none = self.write("n.json", made_up("02_n", [row("Matmul fc", "forward", 40.0, 1e10, 2e12)], None))
        r = call("--out", self.svg(), none)
        self.assertEqual(r.returncode, 2)
        self.assertIn("records no ceilings: pass --ceilings", r.stderr)

    def test_each_op_against_the_roof_of_its_own_arithmetic(self):
        # Copy 1000 GB/s, bf16 GEMM 700 TFLOP/s (ridge 700 FLOP/B); on an H100 the data sheet's fp32
        # 67 TFLOP/s (ridge 67 FLOP/B) and TF32 494.5 TFLOP/s (ridge 494.5 FLOP/B).
        h100 = "NVIDIA H100 80GB HBM3"
        # 1000 FLOP/B each: right of every ridge, so each row's roof is its arithmetic's peak.
        fp32 = self.write("a.json", made_up("00_a", [row("Matmul fc", "forward", 1e12 / 33.5e9, 1e9, 1e12)],
                                            (1000.0, 700.0), h100, "FP32"))      # 33.5 TFLOP/s: 50% of 67
        tf32 = self.write("b.json", made_up("01_b", [row("Matmul fc", "forward", 1e12 / 247.25e9, 1e9, 1e12)],
                                            (1000.0, 700.0), h100, "TF32"))      # 247.25: 50% of 494.5
        bf16 = self.write("c.json", made_up("02_c", [row("Matmul fc", "forward", 1e12 / 350e9, 1e9, 1e12)],
                                            (1000.0, 700.0), h100, "BF16"))      # 350: 50% of 700
        svg = self.svg()
        r = call("--out", svg, fp32, tf32, bf16)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        for stage, name in (("00", "fp32 peak"), ("01", "TF32 peak"), ("02", "bf16 GEMM")):
            self.assertAlmostEqual(table_row(r.stdout, "Matmul fc", "forward", stage)[2], 50.0, delta=0.01)
            self.assertRegex(r.stdout, rf"Matmul fc +forward +{stage} .* {name} +compute\n")
        self.assertIn("data-sheet peaks of the NVIDIA H100 SXM, not measured: fp32 67.0 TFLOP/s (ridge at 67.0 "
                      "FLOP/B), TF32 494.5 TFLOP/s (ridge at 494.5 FLOP/B)", r.stdout)
        with open(svg, encoding="utf-8") as f:
            figure = f.read()
        self.assertIn("fp32 roof: 67 TFLOP/s, data-sheet peak", figure)
        self.assertIn("TF32 roof: 494.5 TFLOP/s, data-sheet peak", figure)
        # Left of its own ridge, a TF32 row is held by the bandwidth: 200 FLOP/B x 1000 GB/s = 200 TFLOP/s.
        r = call("--out", svg, self.write("d.json", made_up("01_d", [row("Matmul fc", "forward", 10.0, 1e10, 1e12)],
                                                            (1000.0, 700.0), h100, "TF32")))
        self.assertEqual(table_row(r.stdout, "Matmul fc", "forward", "01"), [100.0, 100.0, 100.0])
        self.assertRegex(r.stdout, r"Matmul fc +forward +01 .* TF32 peak +memory\n")
        # Only the roofs of the arithmetics drawn: no TF32 roof for an fp32 stage alone.
        r = call("--out", svg, fp32)
        self.assertIn("not measured: fp32 67.0 TFLOP/s (ridge at 67.0 FLOP/B); NVIDIA H100", r.stdout)
        self.assertNotIn("TF32", r.stdout)
        # The SXM figures are not lent to the PCIe board, nor to a GPU the table does not hold: there
        # an fp32 row is read against the bf16 roof, and the table and figure say so.
        for gpu in ("NVIDIA H100 PCIe", "Made-up GPU"):
            other = self.write("e.json", made_up("00_e", [row("Matmul fc", "forward", 1e12 / 35e9, 1e9, 1e12)],
                                                 (1000.0, 700.0), gpu, "FP32"))
            r = call("--out", svg, other)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertAlmostEqual(table_row(r.stdout, "Matmul fc", "forward", "00")[2], 5.0, delta=0.01)
            self.assertRegex(r.stdout, r"Matmul fc +forward +00 .* bf16 GEMM +compute\n")
            note = f"no data-sheet fp32 peak for {gpu} in roofline.py: stage 00 read against the bf16 GEMM roof"
            self.assertIn(f"note: {note}", r.stdout)
            with open(svg, encoding="utf-8") as f:
                self.assertIn(note, f.read())
        # A file with no precision is read as bf16.
        r = call("--out", svg, self.write("f.json", made_up("00_f", [row("Matmul fc", "forward", 1e12 / 35e9, 1e9,
                                                                          1e12)], (1000.0, 700.0), h100)))
        self.assertRegex(r.stdout, r"Matmul fc +forward +00 .* bf16 GEMM +compute\n")
        self.assertNotIn("data-sheet", r.stdout)

    def test_missing_and_above_the_roof(self):
        rows = [row("Matmul fc", "forward", 40.0, 1e10, 2e12),
                row("Attention", "backward", None, 4e9, 2e11, status="skipped"),
                row("Matmul qkv", "forward", 10.0, 1e10, 2e12),   # 200 TFLOP/s under a 100 TFLOP/s roof
                row("Gelu", "forward", 0.5, 1e9)]                  # 2000 GB/s over a 1000 GB/s roof
        svg = self.svg()
        r = call("--out", svg, self.write("s.json", made_up("03_x", rows)))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("stage 03: Attention backward (B=16) not measured: skipped: needs 99 GiB", r.stderr)
        self.assertIn("stage 03: Matmul qkv forward at 200.0 TFLOP/s is above the roof", r.stderr)
        self.assertIn("stage 03: Gelu forward at 2000 GB/s is above the copy roof", r.stderr)
        self.assertIn("missing (not measured, B=16):\n  stage 03: Attention backward: skipped", r.stdout)
        with open(svg, encoding="utf-8") as f:
            figure = f.read()
        self.assertIn("missing: stage 03, Attention backward (B=16)", figure)
        self.assertIn("above the roof", figure)

    def test_bad_input(self):
        # Malformed JSON: one line on stderr, exit 2, no figure.
        svg = self.svg("bad.svg")
        r = run("--out", svg, self.write("bad.json", '{"stage": "02_x", "rows": [}'))
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertRegex(r.stderr, r"^roofline\.py: error: cannot read .*bad\.json: ")
        self.assertFalse(os.path.exists(svg))
        # JSON, but not the benchmark's.
        r = call("--out", svg, self.write("list.json", [1, 2, 3]))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("not the kernel benchmark's JSON", r.stderr)
        r = call("--out", svg, os.path.join(self.dir, "none.json"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read", r.stderr)
        other_batch = self.write("s.json", made_up("03_x", [row("Matmul fc", "forward", 1.0, 1e9, 1e11)]))
        r = call("--out", svg, "--batch", "8", other_batch)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no input has rows at B=8", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
