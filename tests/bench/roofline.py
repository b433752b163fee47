#!/usr/bin/env python3
"""Every op of the kernel benchmark against the roofs of its GPU: a roofline, as SVG.

usage: roofline.py --out FILE.svg [--batch 16] [--ceilings ceilings.json] STAGE.json...

The input is the JSON of the kernel benchmark (`bench_stageNN --json`, tests/bench/README.md,
"The kernel benchmark"), one file per stage. Every row of it is one op, one pass, at one batch
size, timed alone: the median of warm runs with the L2 cache emptied before each. For every row,
common/train/op_cost.h counts the bytes the op must at least move and, for the ops made of matrix
products (matmuls, attention, the fused matmul slots), their FLOPs. Two ceilings bound any op:

    bandwidth roof   TFLOP/s <= copy bandwidth × intensity    (intensity = FLOPs / bytes)
    compute roof     TFLOP/s <= the peak of the op's arithmetic

and they meet at the ridge, intensity = compute roof / copy. The compute roof is the one of the
arithmetic the stage does its products in, as its JSON records it (`precision`): bf16 (stage 02
on) is read against the bf16 GEMM throughput measured on the same GPU (ridge about 258 FLOP/B on
an H100); fp32 (stage 00, no tensor cores) and TF32 (stage 01) against the fp32 and dense TF32
peaks of the GPU's data sheet (DATASHEET_PEAKS), which no program here measures: 67 and 494.5
TFLOP/s on an H100 SXM or H200 (ridges at about 22 and 164 FLOP/B with the H100's copy
bandwidth). A stage's fp32 matmul at 50 TFLOP/s is thus near its own roof, although it is far
below the bf16 one. A file that records no precision is read as bf16. A GPU the table does not
hold has no fp32 or TF32 roof: its fp32 and TF32 stages are read against the bf16 roof, an
upper bound far above theirs, and the table and the figure say so. The figure has two panels:

  - the roofline, log-log: x the arithmetic intensity of a row with FLOPs (FLOP per byte, from
    the row's `flops` and `bytes`), y its achieved TFLOP/s (flops / ms_median), the bandwidth
    roof and the bf16 GEMM roof drawn from the measured ceilings and their ridge marked, and the
    fp32 and TF32 roofs, where stages of that arithmetic are drawn, dashed in the colour of the
    first such stage. One marker per row and stage, in the stage's colour and shape (plot.py's
    STAGE_COLOURS); a thin grey line joins the points of one op from stage to stage, and the
    op's label ("lm_head fwd", "attention bwd") sits once, at its point in the last stage that
    has it, moved aside with a leader line where points crowd.
  - the ops with no FLOPs counted (embedding, LayerNorm, GELU, residual add, classifier,
    optimizer, and the fused slots among them): they have no intensity to place them on the x
    axis, and their roof is the copy bandwidth alone. One horizontal bar per op and pass, one
    bar per stage inside the op's group (the stages side by side read best: a stage that
    changes an op's element size moves its bar), achieved GB/s (bytes / ms_median) against the
    copy roof, with the fraction of it at the end of the bar.

The measured roofs: with --ceilings, the copy and GEMM ceilings of that file (`bench_ceilings
--json`, as the ladder writes it: ladder/ceilings.json); without, those each stage's JSON records
(measured at the start of the same run), the highest of them where the stages' runs differ. One
set of roofs for the whole figure and table, so every percentage is read against the same
numbers. (MFU, unlike this figure, divides every stage by the bf16 peak: it asks how much of the
GPU a stage uses, this figure how near each kernel comes to what its own arithmetic allows.)

Rows left out: the fusion slots a stage leaves unfused (their `source` says "unfused: ...",
their single ops have rows of their own, as in step_breakdown.py), and rows of another batch
size (the optimizer's, of no batch size, is kept). A row that was not measured (status not
"ok") is listed as missing, on stderr, under the table and in the figure. A row above a roof by
more than 5% (ABOVE_ROOF) is reported the same way: the op cannot move less than op_cost.h
counts, so it points at a counting error or a ceiling measured too low.

Output: the SVG (--out) and, on stdout, the same numbers as a table: op, pass, stage, intensity
(FLOP/B), TFLOP/s, the % of the roof at that intensity (achieved / min(compute roof of the op's
arithmetic, bandwidth × intensity)), which compute roof that is and whether the bandwidth or the
compute roof binds there; then the bandwidth-bound rows with GB/s and % of the copy roof.

Exit status: 0 the figure is written and complete; 1 written, but a row was missing or above a
roof (the figure says which); 2 bad usage, or no input could be read (one line on stderr).

Python 3 standard library only. See tests/bench/README.md.
"""

import json
import math
import os
import re
import sys
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # plot.py, next to this file
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from plot import FONT, Svg, benchmark_runs, fmt_tick, kernel_figure_parser, nice_ticks, stage_colour, wrap  # noqa: E402

ABOVE_ROOF = 1.05  # a row above this fraction of its roof is reported: the counts or the ceilings are off
MARKERS = ["circle", "square", "triangle", "diamond", "triangle-down"]  # by stage number, with the colour
PASS_SHORT = {"forward": "fwd", "backward": "bwd"}

# The arithmetic a stage does its matrix products in, from its JSON's `precision`; anything else
# (or none) is read as bf16, the arithmetic of the measured GEMM roof.
ARITHMETIC = {"FP32": "fp32", "TF32": "tf32", "BF16": "bf16"}
ARITH_NAME = {"fp32": "fp32", "tf32": "TF32", "bf16": "bf16"}

# The fp32 and TF32 compute roofs: peaks of the vendor's data sheet, not measured here
# (bench_ceilings times a bf16 GEMM only). fp32 is the FMA units' rate, TF32 the tensor cores'
# dense rate: the data sheets give TF32 with sparsity, twice the dense rate, so 989 / 2. One row
# a board, found by the words of the name the GPU reports, the more specific names first (as
# common/util/peak_flops.h finds the bf16 peak): the PCIe and NVL boards have other SM counts or
# clocks, and no figures here rather than the SXM board's.
H100_SHEET = "NVIDIA H100 Tensor Core GPU data sheet, NVIDIA, 2022, https://www.nvidia.com/en-us/data-center/h100/"
H200_SHEET = "NVIDIA H200 Tensor Core GPU data sheet, NVIDIA, 2023, https://www.nvidia.com/en-us/data-center/h200/"
DATASHEET_PEAKS = [  # (words of the reported name, None or (board, {arithmetic: TFLOP/s}, source))
    ("H100 PCIe", None),
    ("H100 NVL", None),
    ("H100", ("NVIDIA H100 SXM", {"fp32": 67.0, "tf32": 989.0 / 2}, H100_SHEET)),  # "NVIDIA H100 80GB HBM3"
    ("H200 NVL", None),
    ("H200", ("NVIDIA H200 SXM", {"fp32": 67.0, "tf32": 989.0 / 2}, H200_SHEET)),  # "NVIDIA H200"
]


def has_words(name, words):
    """Whether `words` occur in `name` as whole words: "H200" is in "NVIDIA H200", not in "NVIDIA GH200"."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(words)}(?![A-Za-z0-9])", name) is not None


def datasheet_peaks(gpu):
    """(board, {arithmetic: TFLOP/s}, source) of the first row of DATASHEET_PEAKS that names the GPU, or None."""
    for words, entry in DATASHEET_PEAKS:
        if has_words(gpu, words):
            return entry
    return None


class Error(Exception):
    """An input that cannot be used: one line on stderr, exit status 2."""


def positive(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise Error(f"cannot read {path}: {' '.join(str(exc).split())}") from None


def ceilings_of(obj):
    """(copy GB/s, GEMM TFLOP/s) of a `ceilings` object (bench_ceilings --json), or None."""
    if not isinstance(obj, dict):
        return None
    copy, gemm = obj.get("copy"), obj.get("gemm")
    if not (isinstance(copy, dict) and isinstance(gemm, dict)):
        return None
    if not (positive(copy.get("gb_per_s")) and positive(gemm.get("tflops"))):
        return None
    return float(copy["gb_per_s"]), float(gemm["tflops"])


def short_label(op, pass_):
    """"Matmul lm_head" "forward" -> "lm_head fwd"; "Attention" "backward" -> "attention bwd"."""
    if op.startswith("Matmul "):
        op = op[len("Matmul "):]
    elif op == "Attention":
        op = "attention"
    return f"{op} {PASS_SHORT.get(pass_, pass_)}"


# ----------------------------------------------------------------------------------------------
# One stage's rows


class Row:
    def __init__(self, stage, r):
        self.stage = stage
        self.op, self.pass_ = str(r.get("op")), str(r.get("pass"))
        self.name = f"{self.op} {self.pass_}"
        self.arith = stage.arith  # the arithmetic of the stage's products: its compute roof
        self.bytes, self.flops, self.ms = float(r["bytes"]), float(r.get("flops") or 0), float(r["ms_median"])

    @property
    def intensity(self):  # FLOP per byte
        return self.flops / self.bytes

    @property
    def tflops(self):
        return self.flops / self.ms / 1e9

    @property
    def gb_per_s(self):
        return self.bytes / self.ms / 1e6


class Stage:
    def __init__(self, path, data, batch):
        if not isinstance(data, dict) or not isinstance(data.get("rows"), list) or \
                not all(isinstance(r, dict) for r in data["rows"]):
            raise Error(f"cannot read {path}: not the kernel benchmark's JSON (no list of rows)")
        self.path = path
        self.batch = batch
        self.name = str(data.get("stage") or "??")
        self.number = self.name[:2]
        self.short = self.name[3:].replace("_", " ") if len(self.name) > 3 else self.name
        self.gpu = data.get("device_name") or data.get("device") or "unknown GPU"
        self.date = str(data.get("date") or "")[:10]
        self.seq = (data.get("settings") or {}).get("seq") if isinstance(data.get("settings"), dict) else None
        self.ceilings = ceilings_of(data.get("ceilings"))
        self.arith = ARITHMETIC.get(str(data.get("precision") or "").upper(), "bf16")
        self.points = []     # rows with FLOPs: the roofline
        self.bars = []       # rows without: bandwidth only
        self.missing = []    # (row name, why)
        self.rows_at_batch = 0
        for r in data["rows"]:
            if r.get("batch") not in (batch, None):
                continue
            self.rows_at_batch += r.get("batch") == batch
            name = f"{r.get('op')} {r.get('pass')}"
            if str(r.get("source", "")).startswith("unfused"):
                continue  # the slot's single ops have rows of their own
            if r.get("status") != "ok":
                reason = f": {r['reason']}" if r.get("reason") else ""
                self.missing.append((name, f"{r.get('status', 'not measured')}{reason}"))
                continue
            flops = r.get("flops")
            if not (positive(r.get("bytes")) and positive(r.get("ms_median"))) or \
                    not (flops is None or flops == 0 or positive(flops)):
                self.missing.append((name, "no bytes, FLOPs or time in the row"))
                continue
            row = Row(self, r)
            (self.points if row.flops > 0 else self.bars).append(row)


# ----------------------------------------------------------------------------------------------
# The roofs


class Roofs:
    """The measured roofs (copy bandwidth, bf16 GEMM) and the data-sheet compute roofs of the fp32
    and TF32 stages drawn, when the GPU has them (peaks: arithmetic -> TFLOP/s)."""

    def __init__(self, copy_gbs, gemm_tflops, source):
        self.copy, self.gemm, self.source = copy_gbs, gemm_tflops, source
        self.peaks = {}       # "fp32", "tf32": the data sheet's TFLOP/s
        self.sheet = None     # (board, source) of those peaks
        self.no_peaks = None  # why an fp32 or TF32 stage is read against the bf16 roof

    def compute(self, arith="bf16"):  # TFLOP/s: the compute roof of that arithmetic
        return self.peaks.get(arith, self.gemm)

    def roof_name(self, arith="bf16"):
        return f"{ARITH_NAME[arith]} peak" if arith in self.peaks else "bf16 GEMM"

    def ridge_of(self, arith="bf16"):  # FLOP/B where the bandwidth roof meets that compute roof
        return self.compute(arith) * 1e3 / self.copy

    @property
    def ridge(self):  # the bf16 GEMM roof's
        return self.ridge_of("bf16")

    def at(self, intensity, arith="bf16"):  # TFLOP/s
        return min(self.compute(arith), self.copy * intensity / 1e3)

    def bound(self, intensity, arith="bf16"):
        return "memory" if intensity < self.ridge_of(arith) else "compute"


def add_datasheet_peaks(roofs, stages):
    """The fp32 and TF32 roofs of the arithmetics the stages' points are in, from DATASHEET_PEAKS."""
    wanted = sorted({s.arith for s in stages if s.points and s.arith != "bf16"}, key=list(ARITH_NAME).index)
    if not wanted:
        return
    gpus = sorted({s.gpu for s in stages})
    entries = {gpu: datasheet_peaks(gpu) for gpu in gpus}
    first = entries[gpus[0]]
    which = ", ".join(s.number for s in stages if s.points and s.arith != "bf16")
    if first is None or any(e is not first for e in entries.values()):
        roofs.no_peaks = (f"no data-sheet {' or '.join(ARITH_NAME[a] for a in wanted)} peak for "
                          f"{' / '.join(gpus)} in roofline.py: stage {which} read against the bf16 GEMM roof")
        return
    board, peaks, source = first
    roofs.peaks = {a: peaks[a] for a in wanted if a in peaks}
    roofs.sheet = (board, source)


def roofs_for(stages, ceilings_path):
    """The roofs, and a problem when the ceilings come from another GPU."""
    if ceilings_path:
        data = read_json(ceilings_path)
        c = ceilings_of(data)
        if c is None:
            raise Error(f"cannot read {ceilings_path}: no copy.gb_per_s and gemm.tflops (bench_ceilings --json)")
        roofs = Roofs(*c, f"measured by bench_ceilings ({os.path.basename(ceilings_path)})")
        gpu = data.get("device_name")
        other = sorted({s.gpu for s in stages if gpu and s.gpu != gpu})
        add_datasheet_peaks(roofs, stages)
        return roofs, ([f"the ceilings are of {gpu}, the kernel benchmark ran on {' / '.join(other)}"]
                       if other else [])
    lacking = [os.path.basename(s.path) for s in stages if s.ceilings is None]
    if lacking:
        raise Error(f"{', '.join(lacking)} records no ceilings: pass --ceilings FILE (bench_ceilings --json)")
    copies, gemms = [s.ceilings[0] for s in stages], [s.ceilings[1] for s in stages]
    source = "measured at the start of the benchmark's run"
    if len(stages) > 1:
        source = ("measured at the start of each stage's run, the highest of them"
                  if len(set(copies)) > 1 or len(set(gemms)) > 1 else "measured at the start of each stage's run")
    roofs = Roofs(max(copies), max(gemms), source)
    add_datasheet_peaks(roofs, stages)
    return roofs, []


def above_roof(stages, roofs):
    problems = []
    for s in stages:
        for p in s.points:
            roof = roofs.at(p.intensity, p.arith)
            if p.tflops > ABOVE_ROOF * roof:
                problems.append(f"stage {s.number}: {p.name} at {p.tflops:.1f} TFLOP/s is above the roof "
                                f"({roof:.1f} at {p.intensity:.1f} FLOP/B, {roofs.roof_name(p.arith)}): "
                                "a counting error?")
        for b in s.bars:
            if b.gb_per_s > ABOVE_ROOF * roofs.copy:
                problems.append(f"stage {s.number}: {b.name} at {b.gb_per_s:.0f} GB/s is above the copy roof "
                                f"({roofs.copy:.0f} GB/s): a counting error?")
    return problems


# ----------------------------------------------------------------------------------------------
# The table


def subtitle(stages, batch):
    gpus, date, seq = benchmark_runs(stages)
    return f"{gpus}, {date}, GPT-2 124M B={batch} T={seq}, stage {', '.join(s.number for s in stages)}"


def op_order(stages, attr):
    """The op names of the rows in `attr`, in the order the files list them (first stage first)."""
    names = []
    for s in stages:
        for row in getattr(s, attr):
            if row.name not in names:
                names.append(row.name)
    return names


def by_op(stages, attr):
    """[(op name, [rows, stage by stage])], in op_order."""
    return [(name, [r for s in stages for r in getattr(s, attr) if r.name == name]) for name in op_order(stages, attr)]


def print_table(stages, roofs, problems, out=None):
    out = out or sys.stdout

    def emit(line=""):  # a line of the table, without trailing blanks
        out.write(line.rstrip() + "\n")

    emit(f"roofline of the kernel benchmark: {subtitle(stages, stages[0].batch)}")
    emit(f"roofs: copy {roofs.copy:.1f} GB/s, bf16 GEMM {roofs.gemm:.1f} TFLOP/s, ridge at {roofs.ridge:.1f} "
         f"FLOP/B; {roofs.source}")
    if roofs.peaks:
        board, source = roofs.sheet
        peaks = ", ".join(f"{ARITH_NAME[a]} {t:.1f} TFLOP/s (ridge at {roofs.ridge_of(a):.1f} FLOP/B)"
                          for a, t in roofs.peaks.items())
        emit(f"data-sheet peaks of the {board}, not measured: {peaks}; {source}")
    if roofs.no_peaks:
        emit(f"note: {roofs.no_peaks}")
    emit()
    emit("ops with FLOPs: % of roof = TFLOP/s / min(compute roof of the op's arithmetic, copy bandwidth x "
         "intensity)")
    points = by_op(stages, "points")
    op_w = max([len("op")] + [len(name.rsplit(" ", 1)[0]) for name, _ in points]) + 2
    pass_w = max([len("pass")] + [len(p.pass_) for _, rows in points for p in rows]) + 2
    emit(f"{'op':<{op_w}}{'pass':<{pass_w}}{'stage':>5}{'FLOP/B':>10}{'TFLOP/s':>10}{'% of roof':>11}  "
         f"{'compute roof':<14}bound")
    for _, rows in points:
        for p in rows:
            emit(f"{p.op:<{op_w}}{p.pass_:<{pass_w}}{p.stage.number:>5}{p.intensity:>10.1f}{p.tflops:>10.2f}"
                 f"{100 * p.tflops / roofs.at(p.intensity, p.arith):>11.1f}  {roofs.roof_name(p.arith):<14}"
                 f"{roofs.bound(p.intensity, p.arith)}")
    bars = by_op(stages, "bars")
    if bars:
        emit()
        emit("ops with no FLOPs counted (bound by bandwidth): % of roof = GB/s / copy bandwidth")
        op_w = max([len("op")] + [len(name.rsplit(" ", 1)[0]) for name, _ in bars]) + 2
        pass_w = max([len("pass")] + [len(b.pass_) for _, rows in bars for b in rows]) + 2
        emit(f"{'op':<{op_w}}{'pass':<{pass_w}}{'stage':>5}{'GB/s':>10}{'% of roof':>11}")
        for _, rows in bars:
            for b in rows:
                emit(f"{b.op:<{op_w}}{b.pass_:<{pass_w}}{b.stage.number:>5}{b.gb_per_s:>10.1f}"
                     f"{100 * b.gb_per_s / roofs.copy:>11.1f}")
    missing = [(s, name, why) for s in stages for name, why in s.missing]
    if missing:
        emit()
        emit(f"missing (not measured, B={stages[0].batch}):")
        for s, name, why in missing:
            emit(f"  stage {s.number}: {name}: {why}")
    if problems:
        emit()
        emit("problems:")
        for p in problems:
            emit(f"  {p}")


# ----------------------------------------------------------------------------------------------
# The figure


def floor125(v):
    """The largest of 1, 2, 5 × 10^k at or below v."""
    k = math.floor(math.log10(v))
    return max(m * 10 ** k for m in (1, 2, 5) if m * 10 ** k <= v * (1 + 1e-9))


def ceil125(v):
    """The smallest of 1, 2, 5, 10 × 10^k at or above v."""
    k = math.floor(math.log10(v))
    return min(m * 10 ** k for m in (1, 2, 5, 10) if m * 10 ** k >= v * (1 - 1e-9))


def log_ticks(lo, hi):
    """1, 2, 5 × 10^k within [lo, hi] (only the powers of ten when that spans over 3 decades)."""
    ms = (1,) if math.log10(hi / lo) > 3.2 else (1, 2, 5)
    ticks = []
    for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in ms:
            v = m * 10.0 ** k
            if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9):
                ticks.append(v)
    return ticks


def fmt_num(v):
    """1000 -> 1,000; 2.5 -> 2.5; 0.5 -> 0.5."""
    return f"{v:,.0f}" if v >= 1 and abs(v - round(v)) < 1e-9 else f"{v:g}"


def marker(svg, shape, x, y, colour, r=5.0):
    if shape == "circle":
        svg.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{colour}" stroke="white" stroke-width="0.8"/>')
        return
    if shape == "square":
        pts = [(x - r * 0.9, y - r * 0.9), (x + r * 0.9, y - r * 0.9), (x + r * 0.9, y + r * 0.9),
               (x - r * 0.9, y + r * 0.9)]
    elif shape == "triangle":
        pts = [(x, y - r * 1.15), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)]
    elif shape == "triangle-down":
        pts = [(x, y + r * 1.15), (x + r * 1.1, y - r * 0.8), (x - r * 1.1, y - r * 0.8)]
    else:  # diamond
        pts = [(x, y - r * 1.2), (x + r * 1.2, y), (x, y + r * 1.2), (x - r * 1.2, y)]
    svg.add(f'<polygon points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in pts)}" fill="{colour}" '
            'stroke="white" stroke-width="0.8"/>')


def stage_marker(number):
    try:
        return MARKERS[int(number) % len(MARKERS)]
    except ValueError:
        return "circle"


def halo_text(svg, x, y, s, size=11, anchor="start", colour="#222", weight="normal"):
    """Text with a white outline under it, legible across grid and roof lines."""
    svg.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{colour}" stroke="white" stroke-width="3" stroke-linejoin="round" paint-order="stroke" '
            f'{FONT}>{escape(str(s))}</text>')


def text_width(s, size):
    return 0.6 * size * len(s)  # DejaVu Sans: about 0.6 em a character


class Placer:
    """Greedy placement of labels: the first spot near its point that overlaps nothing placed."""

    def __init__(self, bounds):
        self.bounds = bounds  # x0, y0, x1, y1: labels stay inside
        self.taken = []

    def block(self, x0, y0, x1, y1):
        self.taken.append((x0, y0, x1, y1))

    def free(self, box):
        bx0, by0, bx1, by1 = self.bounds
        if box[0] < bx0 or box[1] < by0 or box[2] > bx1 or box[3] > by1:
            return False
        return all(box[2] <= t[0] or box[0] >= t[2] or box[3] <= t[1] or box[1] >= t[3] for t in self.taken)

    def place(self, px, py, w, h):
        """The label's box (x0, y0, x1, y1) and whether it is far enough from the point to need a leader."""
        near = [(px + 8, py - h / 2), (px - 8 - w, py - h / 2), (px - w / 2, py - 8 - h), (px - w / 2, py + 8),
                (px + 6, py - 5 - h), (px + 6, py + 5), (px - 6 - w, py - 5 - h), (px - 6 - w, py + 5)]
        for x0, y0 in near:
            box = (x0, y0, x0 + w, y0 + h)
            if self.free(box):
                self.taken.append(box)
                return box, False
        for dist in (16, 26, 38, 52, 68, 86, 106):
            for deg in range(0, 360, 15):
                a = math.radians(deg)
                cx = px + (dist + w / 2) * math.cos(a)
                cy = py - (dist + h / 2) * math.sin(a)
                box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
                if self.free(box):
                    self.taken.append(box)
                    return box, True
        x0 = max(self.bounds[0], min(px + 8, self.bounds[2] - w))  # nowhere free: at the point, inside the panel
        box = (x0, py - h / 2, x0 + w, py + h / 2)
        self.taken.append(box)
        return box, False


def legend_lines(stages, joined, right):
    """The legend's entries, [(x, stage or None, label)] per line, each line ending before `right`."""
    entries = [(s, f"stage {s.number} {s.short}", 16 + text_width(f"stage {s.number} {s.short}", 12))
               for s in stages]
    if len(stages) > 1 and joined:
        label = "one op from stage to stage, labelled at its last"
        entries.append((None, label, 28 + text_width(label, 12)))
    lines, line, x = [], [], 24
    for s, label, w in entries:
        if line and x + w > right:
            lines.append(line)
            line, x = [], 24
        line.append((x, s, label))
        x += w + 22
    return lines + [line]


def draw(stages, roofs, problems, left_out, path):
    batch = stages[0].batch
    points = by_op(stages, "points")
    bars = by_op(stages, "bars")
    missing = [(s, name, why) for s in stages for name, why in s.missing]
    W = 1000
    left, right = 86, 34
    pw = W - left - right

    # The header: what the roofs are and where they come from, wrapped; then the legend.
    text = f"roofs: copy {roofs.copy:,.0f} GB/s and bf16 GEMM {roofs.gemm:.1f} TFLOP/s, {roofs.source}"
    if roofs.peaks:
        board, source = roofs.sheet
        text += (f"; {' and '.join(f'{ARITH_NAME[a]} {t:g}' for a, t in roofs.peaks.items())} TFLOP/s, the "
                 f"{board}'s data-sheet peak{'s' if len(roofs.peaks) > 1 else ''}, not measured ({source}). Each op is read against the compute roof "
                 "of its own arithmetic")
    text += ". Far below that roof at its intensity: the kernel, not the GPU, is the limit"
    header = wrap(text, 132)
    if roofs.no_peaks:
        header += wrap(f"{roofs.no_peaks}.", 132)
    legend = legend_lines(stages, bool(points), W - 24)
    ly0 = 84 + 18 * len(header) + 7
    top = ly0 + 22 * (len(legend) - 1) + 23
    ph = (500 if len(points) <= 16 else 660) if points else 0  # taller where many ops' labels crowd

    # The second panel: one group per op, one bar per stage that has the row.
    bar_h, bar_gap, group_gap = 12, 2, 12
    groups = [(name, [(s, next((b for b in s.bars if b.name == name), None)) for s in stages]) for name, _ in bars]
    groups_h = sum(len(rows) * (bar_h + bar_gap) + group_gap for _, rows in groups)
    p2_title = top + ph + (70 if points else 0)
    p2_top = p2_title + 44
    notes = len(missing) + len(problems) + int(bool(left_out))
    H = int(p2_top + (groups_h + 40 if groups else 0) + 14 + 18 * notes + 12)
    svg = Svg(W, H)

    svg.text(24, 28, "Roofline: each op of the kernel benchmark against the GPU's roofs", size=17,
             weight="bold")
    svg.text(24, 48, subtitle(stages, batch), size=12, colour="#555")
    svg.text(24, 66, "each point is one op timed alone (kernel benchmark, median, L2 emptied), counted as in "
             "common/train/op_cost.h", size=12, colour="#555")
    for i, line in enumerate(header):
        svg.text(24, 84 + 18 * i, line, size=12, colour="#555")

    # Legend: the stages' markers, on as many lines as they need.
    for i, line in enumerate(legend):
        ly = ly0 + 22 * i
        for lx, s, label in line:
            if s is None:  # the grey line that joins one op's points
                svg.line(lx, ly - 4, lx + 22, ly - 4, colour="#aaa", width=1.2)
                svg.text(lx + 28, ly, label, size=12, colour="#555")
            else:
                marker(svg, stage_marker(s.number), lx + 6, ly - 4, stage_colour(s.number))
                svg.text(lx + 16, ly, label, size=12)

    if points:
        draw_roofline(svg, stages, roofs, points, left, top, pw, ph)

    # The second panel.
    if groups:
        svg.text(24, p2_title, "Ops with no FLOPs counted: achieved GB/s against the copy roof (no intensity to "
                 "place them on the roofline)", size=15, weight="bold")
        svg.text(24, p2_title + 19, "embedding, LayerNorm, GELU, residual add, classifier, optimizer: a few "
                 "operations per element, bound by bandwidth; each op's bytes ÷ its median", size=12, colour="#555")
        bl = 230  # the op names left of it
        bw = W - bl - 180
        gmax = max([roofs.copy] + [b.gb_per_s for _, rows in groups for _, b in rows if b])
        ticks, step = nice_ticks(0, gmax, target=7)
        x1 = max(ticks[-1], roofs.copy)

        def X(v):
            return bl + v / x1 * bw

        bottom = p2_top + groups_h
        for t in ticks:
            svg.line(X(t), p2_top - 4, X(t), bottom, colour="#e6e6e6")
            svg.line(X(t), bottom, X(t), bottom + 5)
            svg.text(X(t), bottom + 19, f"{t:,.0f}" if step >= 1 else fmt_tick(t, step), size=11, anchor="middle")
        svg.line(bl, bottom, bl + bw, bottom)
        svg.text(bl + bw / 2, bottom + 37, "achieved GB/s (bytes counted as in op_cost.h ÷ median time)", size=12,
                 anchor="middle")
        y = p2_top
        for name, rows in groups:
            gh = len(rows) * (bar_h + bar_gap)
            svg.text(bl - 10, y + gh / 2 + 4, name, size=12, anchor="end")
            for s, b in rows:
                if b is None:
                    if any(n == name for n, _ in s.missing):
                        svg.text(bl + 4, y + bar_h - 2, f"stage {s.number}: not measured", size=10, colour="#b00")
                else:
                    svg.rect(bl, y, X(b.gb_per_s) - bl, bar_h, stage_colour(s.number))
                    halo_text(svg, X(b.gb_per_s) + 5, y + bar_h - 2,
                              f"{b.gb_per_s:,.0f} ({100 * b.gb_per_s / roofs.copy:.0f}%)", size=10, colour="#333")
                y += bar_h + bar_gap
            y += group_gap
        rx = X(roofs.copy)
        svg.line(rx, p2_top - 12, rx, bottom, colour="#222", width=1.6, dash="6,3")
        svg.text(rx + 6, p2_top - 4, f"copy roof {roofs.copy:,.0f} GB/s", size=11, weight="bold")
        foot = bottom + 40 + 14
    else:
        foot = p2_top
    foot += 8
    for s, name, why in missing:
        svg.text(24, foot, f"missing: stage {s.number}, {name} (B={batch}): {why}", size=12, colour="#b00")
        foot += 18
    for p in problems:
        svg.text(24, foot, p, size=12, colour="#b00")
        foot += 18
    if left_out:
        svg.text(24, foot, f"left out, no rows at B={batch}: {', '.join(left_out)}", size=12, colour="#b00")
    svg.write(path)


def draw_roofline(svg, stages, roofs, points, left, top, pw, ph):
    xs = [p.intensity for _, rows in points for p in rows]
    ys = [p.tflops for _, rows in points for p in rows]
    # The compute roofs drawn: the measured bf16 GEMM one and the data-sheet ones of the stages' arithmetics.
    computes = [("bf16", roofs.gemm)] + list(roofs.peaks.items())
    ridges = [roofs.ridge_of(a) for a, _ in computes]
    # At least a decade of the bandwidth roof left of the bf16 ridge and room left of the lowest one,
    # and room around the points.
    x0 = floor125(min(min(xs) / 1.6, roofs.ridge / 10, min(ridges) / 2))
    x1 = ceil125(max(max(xs), max(ridges)) * 1.6)
    y0 = floor125(min(ys) / 1.3)
    y1 = ceil125(max(max(ys), max(t for _, t in computes)) * 1.15)
    lx0, lx1, ly0, ly1 = math.log10(x0), math.log10(x1), math.log10(y0), math.log10(y1)

    def X(v):
        return left + (math.log10(v) - lx0) / (lx1 - lx0) * pw

    def Y(v):
        return top + ph - (math.log10(v) - ly0) / (ly1 - ly0) * ph

    for t in log_ticks(x0, x1):
        major = abs(math.log10(t) - round(math.log10(t))) < 1e-9
        svg.line(X(t), top, X(t), top + ph, colour="#dcdcdc" if major else "#efefef")
        svg.line(X(t), top + ph, X(t), top + ph + 5)
        svg.text(X(t), top + ph + 19, fmt_num(t), size=11, anchor="middle")
    for t in log_ticks(y0, y1):
        major = abs(math.log10(t) - round(math.log10(t))) < 1e-9
        svg.line(left, Y(t), left + pw, Y(t), colour="#dcdcdc" if major else "#efefef")
        svg.text(left - 8, Y(t) + 4, fmt_num(t), size=11, anchor="end")
    svg.line(left, top + ph, left + pw, top + ph)
    svg.line(left, top, left, top + ph)
    svg.text(left + pw / 2, top + ph + 40, "arithmetic intensity: FLOPs ÷ bytes moved (FLOP/B, log scale)", size=13,
             anchor="middle")
    svg.text(24, top + ph / 2, "achieved TFLOP/s (log scale)", size=13, anchor="middle", rotate=-90)

    # The roofs: bandwidth × intensity up to the highest ridge, the bf16 GEMM ceiling from its ridge;
    # the fp32 and TF32 peaks from theirs, dashed, in the colour of the first stage they judge.
    ridge = roofs.ridge
    start = max(x0, y0 * 1e3 / roofs.copy)
    slope_end = max(ridges)
    svg.polyline([(X(start), Y(roofs.copy * start / 1e3)), (X(slope_end), Y(roofs.copy * slope_end / 1e3))], "#222",
                 width=2.2)
    svg.polyline([(X(ridge), Y(roofs.gemm)), (X(x1), Y(roofs.gemm))], "#222", width=2.2)
    peak_colour = {a: stage_colour(next(s.number for s in stages if s.arith == a)) for a in roofs.peaks}
    for a, t in roofs.peaks.items():
        svg.line(X(max(roofs.ridge_of(a), x0)), Y(t), X(x1), Y(t), colour=peak_colour[a], width=2.2, dash="8,4")
    svg.line(X(ridge), Y(roofs.gemm), X(ridge), top + ph, colour="#777", width=1.0, dash="3,3")
    placer = Placer((left + 4, top + 4, left + pw - 4, top + ph - 4))
    # The bf16 ridge's label, and the bandwidth roof's along its slope: below the lowest ridge
    # drawn, or between the lowest two where that leaves too little room.
    ridge_label = f"{'bf16 ridge' if roofs.peaks else 'ridge'} {ridge:.0f} FLOP/B"
    rx = X(ridge) + 6
    halo_text(svg, rx, top + ph - 8, ridge_label, size=11, colour="#444")
    placer.block(rx, top + ph - 19, rx + text_width(ridge_label, 11), top + ph - 4)
    bw_label = f"bandwidth roof: copy {roofs.copy:,.0f} GB/s × intensity"
    angle = math.degrees(math.atan2(Y(roofs.at(ridge)) - Y(roofs.at(start)), X(ridge) - X(start)))
    lw = text_width(bw_label, 12)
    low = sorted(r for r in ridges if r > start)
    at = start * (ridge / start) ** 0.12
    if roofs.peaks and low and X(at) + lw * math.cos(math.radians(angle)) > X(low[0]):
        at = low[0] * 1.15  # past the lowest ridge, under the next
    bx, by = X(at) + 4, Y(roofs.at(at)) - 7
    svg.add(f'<text x="{bx:.1f}" y="{by:.1f}" font-size="12" text-anchor="start" font-weight="bold" fill="#222" '
            f'{FONT} transform="rotate({angle:.2f} {bx:.1f} {by:.1f})">{escape(bw_label)}</text>')
    ex, ey = bx + lw * math.cos(math.radians(angle)), by + lw * math.sin(math.radians(angle))
    for i in range(6):  # the slanted label, blocked as a few boxes along it
        cx, cy = bx + (ex - bx) * (i + 0.5) / 6, by + (ey - by) * (i + 0.5) / 6
        placer.block(cx - lw / 12, cy - 12, cx + lw / 12, cy + 4)
    # The slope and the points, blocked before the compute roofs' labels are placed: those go where
    # neither is, on their line's right, else left of where it starts (nothing lies above the slope).
    sx0, sy0, sx1, sy1 = X(start), Y(roofs.copy * start / 1e3), X(slope_end), Y(roofs.copy * slope_end / 1e3)
    steps = max(1, int(math.hypot(sx1 - sx0, sy1 - sy0) // 8))
    for i in range(steps + 1):
        cx, cy = sx0 + (sx1 - sx0) * i / steps, sy0 + (sy1 - sy0) * i / steps
        placer.block(cx - 3, cy - 3, cx + 3, cy + 3)
    for a, t in computes:  # the flat roofs: no label is to cross them
        placer.block(X(max(roofs.ridge_of(a), x0)), Y(t) - 3, X(x1), Y(t) + 3)
    for _, rows in points:
        for p in rows:
            px, py = X(p.intensity), Y(p.tflops)
            placer.block(px - 6, py - 6, px + 6, py + 6)
    for a, t in computes:
        if a == "bf16":
            label, colour = f"compute roof: bf16 GEMM {t:.1f} TFLOP/s, measured", "#222"
        else:
            label, colour = f"{ARITH_NAME[a]} roof: {t:g} TFLOP/s, data-sheet peak", peak_colour[a]
        w, y = text_width(label, 12), Y(t)
        xa, xb = X(max(roofs.ridge_of(a), x0)) + 8, X(x1) - 8
        spots = [(x, y0_) for x in [xb - w - 50 * k for k in range(int((xb - w - xa) // 50) + 1)] + [xa]
                 for y0_ in (y - 20, y + 4)]
        before = [(xa - 16 - w, y - 16 - 18 * k) for k in range(4)]  # left of the line's start, above the slope
        spots += before
        box = next(((x, y0_, x + w, y0_ + 16) for x, y0_ in spots if placer.free((x, y0_, x + w, y0_ + 16))),
                   (before[0][0], before[0][1], before[0][0] + w, before[0][1] + 16))
        placer.block(*box)
        halo_text(svg, box[0], box[3] - 4, label, size=12, weight="bold", colour=colour)

    # One op's points from stage to stage, then the markers, then the labels.
    for _, rows in points:
        if len(rows) > 1:
            svg.polyline([(X(p.intensity), Y(p.tflops)) for p in rows], "#b8b8b8", width=1.0)
    for _, rows in points:
        for p in rows:
            px, py = X(p.intensity), Y(p.tflops)
            marker(svg, stage_marker(p.stage.number), px, py, stage_colour(p.stage.number))
            placer.block(px - 6, py - 6, px + 6, py + 6)
    # The labels, at each op's last point; ops whose last points coincide share one ("attention fwd, bwd").
    last, labels = [], []
    for _, rows in points:
        p = rows[-1]
        same = next((i for i, q in enumerate(last) if q.stage is p.stage and abs(X(q.intensity) - X(p.intensity)) < 3
                     and abs(Y(q.tflops) - Y(p.tflops)) < 3), None)
        if same is None:
            last.append(p)
            labels.append(short_label(p.op, p.pass_))
        elif last[same].op == p.op:
            labels[same] += f", {PASS_SHORT.get(p.pass_, p.pass_)}"
        else:
            labels[same] += f", {short_label(p.op, p.pass_)}"
    where = [(X(p.intensity), Y(p.tflops)) for p in last]
    # The crowded ones (many points near) first, so that they get the spots next to them.

    def crowding(i):
        return -sum(1 for (x, y) in where if abs(x - where[i][0]) < 60 and abs(y - where[i][1]) < 30)

    for i in sorted(range(len(last)), key=lambda i: (crowding(i), i)):
        px, py = where[i]
        label = labels[i]
        w, h = text_width(label, 11), 12
        box, leader = placer.place(px, py, w, h)
        if leader:
            # From the point's edge to the nearest point of the label's box.
            nx, ny = min(max(px, box[0]), box[2]), min(max(py, box[1]), box[3])
            d = math.hypot(nx - px, ny - py) or 1.0
            svg.line(px + (nx - px) * 6 / d, py + (ny - py) * 6 / d, nx, ny, colour="#888", width=0.8)
        halo_text(svg, box[0], box[3] - 2.5, label, size=11, colour="#222")


def main(argv=None):
    p = kernel_figure_parser(
        description="A roofline of the kernel benchmark's JSON (bench_stageNN --json): every op with FLOPs as a "
                    "point, arithmetic intensity against achieved TFLOP/s, under the bandwidth and GEMM roofs; the "
                    "ops without FLOPs as bars of GB/s against the copy roof. Also prints the numbers as a table.",
        epilog="Exit status: 0 written and complete; 1 written, but a row was not measured or lies above a roof "
               "(reported on stderr, and in the figure); 2 bad usage or no readable input. See "
               "tests/bench/README.md.")
    p.add_argument("--ceilings", metavar="ceilings.json",
                   help="bench_ceilings --json output (the ladder's ladder/ceilings.json): the roofs [the ceilings "
                        "each STAGE.json records]")
    args = p.parse_args(argv)
    if args.batch < 1:
        p.error("--batch must be positive")

    stages, left_out = [], []
    try:
        for path in args.json:
            stage = Stage(path, read_json(path), args.batch)
            if stage.rows_at_batch == 0:
                print(f"roofline.py: warning: {path} has no rows at B={args.batch}; left out", file=sys.stderr)
                left_out.append(os.path.basename(path))
                continue
            stages.append(stage)
        if not stages:
            raise Error(f"no input has rows at B={args.batch}")
        stages.sort(key=lambda s: s.name)
        roofs, problems = roofs_for(stages, args.ceilings)
    except Error as exc:
        print(f"roofline.py: error: {exc}", file=sys.stderr)
        return 2

    problems += above_roof(stages, roofs)
    for s in stages:
        for name, why in s.missing:
            print(f"roofline.py: warning: stage {s.number}: {name} (B={args.batch}) not measured: {why}",
                  file=sys.stderr)
    for problem in problems:
        print(f"roofline.py: warning: {problem}", file=sys.stderr)
    print_table(stages, roofs, problems)
    try:
        draw(stages, roofs, problems, left_out, args.out)
    except OSError as exc:
        print(f"roofline.py: error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"\nwrote {args.out}")
    return 1 if left_out or problems or any(s.missing for s in stages) else 0


if __name__ == "__main__":
    sys.exit(main())
