#!/usr/bin/env python3
"""Plots of the benchmark ladder, as SVG written by hand (Python standard library only).

  loss.svg        the loss curves of every entry overlaid: C++ stages solid, PyTorch dashed,
                  one colour per stage, so that a stage and its PyTorch counterpart share a colour
  throughput.svg  tokens/s per stage as bars, C++ and PyTorch side by side

usage: plot.py RESULTS.json [--out DIR]      (ladder.py calls render() itself)

The input is the results.json that ladder.py writes; each entry carries `kind` ("cpp" or
"torch"), `stage` ("00".."06"), `label`, `status`, `losses` and the derived `tokens_per_s`.
"""

import argparse
import json
import math
import os
import sys
from xml.sax.saxutils import escape

# One colour per stage (Tableau 10, which stays distinguishable for most colour vision).
STAGE_COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                 "#ff9da7", "#9c755f", "#bab0ac"]
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
DASH = "7,4"  # PyTorch lines and outlines


def stage_colour(stage):
    try:
        return STAGE_COLOURS[int(stage) % len(STAGE_COLOURS)]
    except ValueError:
        return "#555555"


def nice_ticks(lo, hi, target=6, integer=False):
    """Round tick positions covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = 0.0, 1.0
    if hi <= lo:
        hi = lo + (abs(lo) * 0.1 or 1.0)
    raw = (hi - lo) / target
    magnitude = 10 ** math.floor(math.log10(raw))
    step = magnitude
    for m in (1, 2, 2.5, 5, 10):
        step = m * magnitude
        if (hi - lo) / step <= target:
            break
    if integer:
        step = max(1, round(step))
    start = math.floor(lo / step + 1e-9) * step
    end = math.ceil(hi / step - 1e-9) * step
    count = int(round((end - start) / step))
    return [start + i * step for i in range(count + 1)], step


def fmt_tick(value, step):
    """As many decimals as the tick step needs, no more."""
    decimals = max(0, -int(math.floor(math.log10(step) + 1e-9))) if step < 1 else 0
    if step < 1 and abs(step * 10 ** decimals - round(step * 10 ** decimals)) > 1e-6:
        decimals += 1  # steps like 0.25
    return f"{value:.{decimals}f}"


def fmt_si(value):
    """12345 -> 12.3K, 1234567 -> 1.23M: short labels for tokens/s."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= div:
            v = value / div
            text = f"{v:.3g}"
            return f"{text}{suffix}"
    return f"{value:.0f}"


class Svg:
    def __init__(self, width, height):
        self.width, self.height = width, height
        self.parts = []

    def add(self, text):
        self.parts.append(text)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", colour="#222", rotate=None):
        transform = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'font-weight="{weight}" fill="{colour}" {FONT}{transform}>{escape(str(s))}</text>')

    def line(self, x1, y1, x2, y2, colour="#222", width=1.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
                 f'stroke-width="{width}"{d}/>')

    def rect(self, x, y, w, h, fill, stroke="none", width=1.0, dash=None, opacity=1.0):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
                 f'fill="{fill}" fill-opacity="{opacity}" stroke="{stroke}" stroke-width="{width}"{d}/>')

    def polyline(self, points, colour, width=2.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        self.add(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="{width}" '
                 f'stroke-linejoin="round" stroke-linecap="round"{d}/>')

    def write(self, path):
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}">\n'
                f'<rect x="0" y="0" width="{self.width}" height="{self.height}" fill="white"/>\n')
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(head + "\n".join(self.parts) + "\n</svg>\n")
        os.replace(tmp, path)


def kernel_figure_parser(description, epilog):
    """The command line every figure drawn from the kernel benchmark's JSON starts from
    (step_breakdown.py, roofline.py): the stage files, --out and --batch."""
    p = argparse.ArgumentParser(description=description, epilog=epilog)
    p.add_argument("json", nargs="+", metavar="STAGE.json", help="bench_stageNN --json output, one per stage")
    p.add_argument("--out", required=True, metavar="FILE.svg", help="the SVG to write")
    p.add_argument("--batch", type=int, default=16, help="the batch size whose rows are used [16]")
    return p


def benchmark_runs(stages):
    """(GPUs, date, sequence lengths) of the stage files of a kernel-benchmark figure, as text:
    each stage has .gpu, .date and .seq; a date range or several values where the files differ."""
    gpus = " / ".join(sorted({s.gpu for s in stages}))
    dates = sorted({s.date for s in stages if s.date})
    seqs = sorted({s.seq for s in stages if s.seq})
    seq = "/".join(str(t) for t in seqs) or "?"
    date = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "no date"
    return gpus, date, seq


def workload_title(meta):
    parts = [f"GPT-2 {meta.get('model_title', meta.get('model', ''))}".strip()]
    if meta.get("batch") and meta.get("seq"):
        parts.append(f"B={meta['batch']} T={meta['seq']}")
    if meta.get("gpu"):
        parts.append(meta["gpu"])
    return ", ".join(p for p in parts if p)


def entry_sort_key(e):
    return (e.get("stage", ""), 0 if e.get("kind") == "cpp" else 1)


def plot_losses(results, path):
    meta = results.get("meta", {})
    entries = [e for e in results.get("entries", []) if e.get("losses")]
    entries.sort(key=entry_sort_key)
    # The legend sits right of the plot; make room for its longest line (about 6.6 px a
    # character at 11 px) so that nothing is cut off.
    longest = max((len(legend_label(e)) + 10 for e in entries), default=20)
    left, right, top, bottom = 78, max(260, int(70 + 6.6 * longest)), 56, 62
    W, H = 660 + right, 560
    pw, ph = W - left - right, H - top - bottom
    svg = Svg(W, H)
    svg.text(left, 26, "Training loss", size=17, weight="bold")
    svg.text(left, 45, workload_title(meta) + ", every run from the same checkpoint and data", size=12,
             colour="#555")

    values = [v for e in entries for v in e["losses"] if v is not None and math.isfinite(v)]
    steps = max((len(e["losses"]) for e in entries), default=1)
    if not values:
        svg.text(left + pw / 2, top + ph / 2, "no loss curves (every entry failed)", size=14, anchor="middle")
        svg.write(path)
        return
    lo, hi = min(values), max(values)
    pad = 0.03 * (hi - lo or 1.0)
    yticks, ystep = nice_ticks(lo - pad, hi + pad)
    xticks, xstep = nice_ticks(1, max(steps, 2), target=8, integer=True)
    x0, x1 = xticks[0], xticks[-1]
    y0, y1 = yticks[0], yticks[-1]

    def X(step):
        return left + (step - x0) / (x1 - x0) * pw

    def Y(loss):
        return top + ph - (loss - y0) / (y1 - y0) * ph

    # Grid, axes, ticks and their labels.
    for t in yticks:
        svg.line(left, Y(t), left + pw, Y(t), colour="#e3e3e3")
        svg.text(left - 8, Y(t) + 4, fmt_tick(t, ystep), anchor="end")
    for t in xticks:
        svg.line(X(t), top, X(t), top + ph, colour="#f0f0f0")
        svg.line(X(t), top + ph, X(t), top + ph + 5)
        svg.text(X(t), top + ph + 20, f"{int(t)}", anchor="middle")
    svg.line(left, top + ph, left + pw, top + ph)
    svg.line(left, top, left, top + ph)
    svg.text(left + pw / 2, H - 16, "step", size=13, anchor="middle")
    svg.text(22, top + ph / 2, "training loss (nats/token)", size=13, anchor="middle", rotate=-90)

    # The curves: one polyline per unbroken run of finite values (a failed step leaves a gap).
    for e in entries:
        colour = stage_colour(e.get("stage", "0"))
        dash = DASH if e.get("kind") == "torch" else None
        segment = []
        for i, v in enumerate(e["losses"]):
            if v is None or not math.isfinite(v):
                if len(segment) > 1:
                    svg.polyline(segment, colour, dash=dash)
                segment = []
                continue
            segment.append((X(i + 1), Y(v)))
        if len(segment) > 1:
            svg.polyline(segment, colour, dash=dash)
        elif len(segment) == 1:
            svg.add(f'<circle cx="{segment[0][0]:.1f}" cy="{segment[0][1]:.1f}" r="3" fill="{colour}"/>')

    # Legend to the right of the plot.
    lx, ly = left + pw + 24, top + 6
    svg.text(lx, ly, "solid: C++ stage, dashed: PyTorch (final loss)", size=11, colour="#555")
    ly += 22
    for e in entries:
        colour = stage_colour(e.get("stage", "0"))
        dash = DASH if e.get("kind") == "torch" else None
        svg.line(lx, ly - 4, lx + 34, ly - 4, colour=colour, width=2.5, dash=dash)
        final = e["losses"][-1]
        suffix = f"  ({final:.3f})" if final is not None and math.isfinite(final) else ""
        if e.get("status", "ok") != "ok":
            suffix += f"  {e.get('status', 'failed')}"
        svg.text(lx + 42, ly, legend_label(e) + suffix, size=11)
        ly += 19
    svg.write(path)


def legend_label(e):
    who = "C++" if e.get("kind") == "cpp" else "PyTorch"
    return f"{e.get('stage', '??')} {who}: {e.get('short', e.get('label', ''))}"


def plot_throughput(results, path):
    meta = results.get("meta", {})
    entries = results.get("entries", [])
    stages = sorted({e.get("stage", "") for e in entries})
    W, H = 980, 540
    left, right, top, bottom = 86, 30, 76, 86
    pw, ph = W - left - right, H - top - bottom
    svg = Svg(W, H)
    svg.text(left, 26, "Throughput per stage (tokens/s, median over the timed steps; higher is better)",
             size=17, weight="bold")
    svg.text(left, 45, workload_title(meta), size=12, colour="#555")

    def ok(e):
        v = e.get("tokens_per_s")
        return e.get("status") == "ok" and v is not None and math.isfinite(v) and v > 0

    values = [e["tokens_per_s"] for e in entries if ok(e)]
    if not stages:
        svg.text(left + pw / 2, top + ph / 2, "no entries", size=14, anchor="middle")
        svg.write(path)
        return
    # Room above the tallest bar for its label; an empty chart still gets a sensible axis.
    yticks, ystep = nice_ticks(0, max(values) * 1.08 if values else 100e3)
    y1 = yticks[-1]
    if not values:
        svg.text(left + pw / 2, top + ph / 2, "no entry finished: see results.md for why", size=14,
                 anchor="middle", colour="#b00")

    def Y(v):
        return top + ph - v / y1 * ph

    for t in yticks:
        svg.line(left, Y(t), left + pw, Y(t), colour="#e3e3e3")
        svg.text(left - 8, Y(t) + 4, fmt_si(t) if t else "0", anchor="end")
    svg.line(left, top + ph, left + pw, top + ph)
    svg.line(left, top, left, top + ph)
    svg.text(22, top + ph / 2, "tokens per second", size=13, anchor="middle", rotate=-90)

    # Legend: what solid and light bars mean.
    lx = left + pw - 330
    svg.rect(lx, 56, 16, 12, "#777")
    svg.text(lx + 22, 66, "C++ stage", size=12)
    svg.rect(lx + 120, 56, 16, 12, "#777", stroke="#777", width=1.5, dash="4,2", opacity=0.3)
    svg.text(lx + 142, 66, "PyTorch counterpart", size=12)

    group = pw / len(stages)
    bar = min(56.0, group * 0.34)
    for gi, stage in enumerate(stages):
        cx = left + group * (gi + 0.5)
        colour = stage_colour(stage)
        for kind in ("cpp", "torch"):
            e = next((x for x in entries if x.get("stage") == stage and x.get("kind") == kind), None)
            bx = cx - bar - 3 if kind == "cpp" else cx + 3  # C++ left of the centre, PyTorch right
            if e is None:
                continue
            if ok(e):
                v = e["tokens_per_s"]
                if kind == "cpp":
                    svg.rect(bx, Y(v), bar, top + ph - Y(v), colour)
                else:
                    svg.rect(bx, Y(v), bar, top + ph - Y(v), colour, stroke=colour, width=1.8, dash="5,3",
                             opacity=0.3)
                svg.text(bx + bar / 2, Y(v) - 6, fmt_si(v), size=11, anchor="middle")
            else:
                status = e.get("status", "failed")
                svg.text(bx + bar / 2, top + ph - 8, "OOM" if status == "oom" else status, size=10,
                         anchor="middle", colour="#b00")
        # Stage number and name under the pair.
        svg.text(cx, top + ph + 20, stage, size=13, anchor="middle", weight="bold")
        names = {e.get("short") for e in entries if e.get("stage") == stage and e.get("kind") == "cpp"}
        name = next(iter(names), None) or next(
            (e.get("short") for e in entries if e.get("stage") == stage), "")
        for li, line in enumerate(wrap(name or "", 16)[:2]):
            svg.text(cx, top + ph + 37 + 14 * li, line, size=11, anchor="middle", colour="#444")
    svg.write(path)


def wrap(text, width):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    if line:
        lines.append(line)
    return lines


def render(results, out_dir):
    """Writes loss.svg and throughput.svg into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "loss.svg"), os.path.join(out_dir, "throughput.svg")]
    plot_losses(results, paths[0])
    plot_throughput(results, paths[1])
    return paths


def main(argv=None):
    p = argparse.ArgumentParser(description="Plots of a benchmark ladder results.json, as SVG.")
    p.add_argument("results", help="results.json written by tests/bench/ladder.py")
    p.add_argument("--out", metavar="DIR", help="where to write the SVGs (default: next to RESULTS)")
    args = p.parse_args(argv)
    try:
        with open(args.results, encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"plot.py: error: cannot read {args.results}: {exc}", file=sys.stderr)
        return 2
    for path in render(results, args.out or os.path.dirname(os.path.abspath(args.results))):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
