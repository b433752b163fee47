#!/usr/bin/env python3
"""Where one training step's time goes, per stage: one stacked bar per stage, as SVG.

usage: step_breakdown.py --out FILE.svg [--batch 16] [--ladder results.json] STAGE.json...
       step_breakdown.py --profile RUN.profile.json --out FILE.svg

Two inputs, two modes: the kernel benchmark's JSON, one bar per stage summed from per-op medians
(below), or one trainer profile (--profile, at the end of this text), one bar of one real step.

The input is the JSON of the kernel benchmark (`bench_stageNN --json`, tests/bench/README.md,
"The kernel benchmark"), one file per stage. Every row of it is one op, one pass, at one batch
size, timed alone: the median of warm runs with the L2 cache emptied before each. A training
step runs most of those ops many times (once per block, forward and backward), so each op's
share of a step is

    ms of the op in one step = its median × how many times one step runs it

and the bar of a stage is those products side by side, grouped (GROUPS below). How many times
one step runs each op is read off the model graph, common/train/model_graph.h (forward,
backward), and the step, common/train/gpt.h (enqueue_update), and written down once, in ROWS
and SLOTS below: the script computes no multiplicity by itself, it looks each row's name up.

The fusion slots (common/train/policy.h): the graph calls four groups of ops through one name
each. A stage that leaves a slot unfused runs its composition (common/train/compose.h), the
single ops one after the other, and the benchmark's row for the slot then says so in its
`source` ("unfused: Matmul, then Gelu (common/train/compose.h)"): that row is not counted, the
single ops' rows are (ROWS counts the calls the compositions make). A stage that fills a slot
with a fused kernel (stage 04 on) has a row for it with its own source: that row is counted,
and the calls of the single ops it replaces are taken off theirs (SLOTS[...].replaces).

What the sum is not: a profiler trace. It leaves out what happens between the ops (kernel
launch gaps, the host's work, the batch's upload, the memsets and the loss sum of
common/train/model_graph.h and gpt.h), and each op was timed from DRAM while in a step it may find its input
still in L2. So compare it with the ladder's measured ms/step (--ladder): the difference is
the time the ops alone do not explain.

Output: the SVG (--out) and, on stdout, the same numbers as a table (--detail: also every row
with its median and its count). A row the tables below do not know, and a row the step needs
but the file lacks or did not measure, are reported on stderr, listed under the table and
noted in the figure.

Exit status: 0 the figure is written and complete; 1 written, but a row was unknown or missing
(the figure says which stage is incomplete); 2 bad usage, or no input could be read.

The profile mode (--profile RUN.profile.json): the JSON that `train --profile --log RUN.jsonl`
writes beside its log (kind "gpt-step-profile", version 1): one step of a real run, timed op by
op on the step's own clock (CUDA events on the GPU, the host clock on the CPU). Each op is named
as the model graph names it (common/train/model_graph.h, gpt.h) with its time summed over the
calls the step made, so nothing is multiplied here: the table PROFILE_OPS below only puts each
name into one of the groups above, or into two that only a real step has (the collectives of
stage 06, and zero_grad). The figure is one bar whose length is the step's own time (step_ms):
the groups, then, hatched, the time between the ops (difference_ms: launch gaps, host work, waits).
An op whose "within" names another op ran inside that op's time and is not added again. Stages
00-03 run fc+gelu as a matmul and then the GELU, stage 04 on as one kernel: either way the op is
timed as one, so the GELU is in the block matmuls, and the residual add in the LayerNorm.
Exit status as above: 1 when an op name is not in PROFILE_OPS (its time goes to an "unknown"
group, the figure is written) or the file's totals disagree with its ops; 2 for a file that is
not such a profile.

Python 3 standard library only. See tests/bench/README.md.
"""

import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # plot.py, next to this file
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from plot import STAGE_COLOURS, Svg, benchmark_runs, fmt_tick, kernel_figure_parser, nice_ticks  # noqa: E402

# GPT-2 124M, the only model the kernel benchmark measures (kernel_bench.cuh: config "d12").
N_LAYER = 12

# ----------------------------------------------------------------------------------------------
# The groups of the bar, left to right, with their colours (the Tableau 10 of plot.py).

GROUPS = [
    # key, label in the legend and the table, colour
    ("matmul", "matmuls of the blocks (qkv, attn_proj, fc, fc_proj)", STAGE_COLOURS[0]),
    ("lm_head", "LM head (the tied output matmul)", STAGE_COLOURS[3]),
    ("attention", "attention", STAGE_COLOURS[2]),
    ("layernorm", "LayerNorm", STAGE_COLOURS[1]),
    ("gelu_residual", "GELU + residual add", STAGE_COLOURS[5]),
    ("classifier", "classifier (softmax, loss, its gradient)", STAGE_COLOURS[6]),
    ("embedding", "embedding", STAGE_COLOURS[8]),
    ("optimizer", "optimizer (gradient norm, AdamW)", STAGE_COLOURS[4]),
]
# What a group holds besides: in the benchmark, where a stage fills a fusion slot (SLOTS below);
# in a profile, always (fc+gelu and residual+ln_2 are one op each in the graph, fused or not).
CARRIED = {"matmul": "with the GELU", "layernorm": "with the residual add"}
FUSED_NOTE = {key: f"; fused: {what}" for key, what in CARRIED.items()}
GROUP_SHORT = {"matmul": "block matmuls", "lm_head": "LM head", "attention": "attention",
               "layernorm": "LayerNorm", "gelu_residual": "GELU + residual", "classifier": "classifier",
               "embedding": "embedding", "optimizer": "optimizer"}

# ----------------------------------------------------------------------------------------------
# The table: every row name of the kernel benchmark ("op pass", as `--ops` matches it), with
# how many times one training step calls it. A count is (per_block, once): per_block × n_layer
# + once. L below is n_layer (12).

ROWS = {
    # The single ops. Their counts include the calls the unfused slots' compositions make.
    #   row name                       group            per block, once   where the graph calls it
    "Embedding forward":          ("embedding",     0, 1),  # "embedding"
    "Embedding backward":         ("embedding",     0, 1),  # "embedding backward"
    # ln_1 of block 0, plus the LayerNorm of each ResidualLayerNorm: residual+ln_2 in every block,
    # and residual+ln_1 of the next block (residual+ln_f after the last): 2L + 1.
    "LayerNorm forward":          ("layernorm",     2, 1),
    # The same backward: residual+ln_f, residual+ln_2 in every block, residual+ln_1 in blocks
    # 1..L-1, and ln_1 of block 0: 2L + 1 (ResidualLayerNorm's backward is LayerNorm's).
    "LayerNorm backward":         ("layernorm",     2, 1),
    "Matmul qkv forward":         ("matmul",        1, 0),  # "qkv"
    "Matmul qkv backward":        ("matmul",        1, 0),  # "qkv backward"
    "Matmul attn_proj forward":   ("matmul",        1, 0),  # "attn_proj"
    "Matmul attn_proj backward":  ("matmul",        1, 0),  # "attn_proj backward"
    "Matmul fc forward":          ("matmul",        1, 0),  # inside "fc+gelu" (MatmulBiasGelu)
    "Matmul fc backward":         ("matmul",        1, 0),  # "fc backward"
    "Matmul fc_proj forward":     ("matmul",        1, 0),  # "fc_proj"
    "Matmul fc_proj backward":    ("matmul",        1, 0),  # inside "fc_proj+gelu backward" (MatmulBackwardGelu)
    # Stage 04 on (kLossChunkRows), the LM head and the classifier run in backward, a chunk of rows
    # at a time: the same ops over the same rows, counted once. The benchmark times them at all
    # B·T rows, writing the weight gradient; in a step of more than one chunk (B > 8 at T = 1024)
    # the later chunks also read it (154 MB each, about 0.1 ms on an H100), which this leaves out.
    "Matmul lm_head forward":     ("lm_head",       0, 1),  # "lm_head"
    "Matmul lm_head backward":    ("lm_head",       0, 1),  # "lm_head backward"
    "Attention forward":          ("attention",     1, 0),  # "attention"
    "Attention backward":         ("attention",     1, 0),  # "attention backward"
    "Gelu forward":               ("gelu_residual", 1, 0),  # inside "fc+gelu"
    "Gelu backward":              ("gelu_residual", 1, 0),  # inside "fc_proj+gelu backward"
    "Residual forward":           ("gelu_residual", 2, 0),  # inside each ResidualLayerNorm forward: 2L
    "Classifier forward":         ("classifier",    0, 1),  # inside "classifier" (ClassifierWithGrad)
    "Classifier backward":        ("classifier",    0, 1),  # the same
    "Optimizer step":             ("optimizer",     0, 1),  # "optimizer" (enqueue_update)
}


class Slot:
    """A fusion slot's row: counted when the stage fills the slot with a fused kernel, in place of
    the calls of `replaces` (the composition's single ops, each called once per slot call)."""

    def __init__(self, group, per_block, once, replaces):
        self.group, self.per_block, self.once, self.replaces = group, per_block, once, replaces


SLOTS = {
    # "fc+gelu", once per block: y = gelu(x · Wᵀ + b).
    "MatmulBiasGelu fc forward": Slot("matmul", 1, 0, ["Matmul fc forward", "Gelu forward"]),
    # "fc_proj+gelu backward", once per block: fc_proj's backward carried on through the GELU.
    "MatmulBackwardGelu fc_proj backward": Slot("matmul", 1, 0, ["Matmul fc_proj backward", "Gelu backward"]),
    # The benchmark before the slot above existed (the JSONs of 2026-11-23) gave MatmulBiasGelu a
    # backward: the GELU's backward, then fc's. One step runs the same single ops either way.
    "MatmulBiasGelu fc backward": Slot("matmul", 1, 0, ["Gelu backward", "Matmul fc backward"]),
    # "residual+ln_2" and "residual+ln_1" (or "residual+ln_f"): twice per block.
    "ResidualLayerNorm forward": Slot("layernorm", 2, 0, ["Residual forward", "LayerNorm forward"]),
    "ResidualLayerNorm backward": Slot("layernorm", 2, 0, ["LayerNorm backward"]),
    # "classifier": the loss and the logits' gradient, once.
    "ClassifierWithGrad forward+backward": Slot("classifier", 0, 1, ["Classifier forward", "Classifier backward"]),
}

# Rows that are not part of a step, on purpose.
NOT_IN_A_STEP = [
    (re.compile(r"^Matmul lm_head at \d+ "),
     "the LM head at another width (stage 05's padding question); a step runs `Matmul lm_head`"),
    (re.compile(r"^Matmul \w+ \(.+\) "),
     "a hand-written matmul kernel (--matmul-variants yes); a step runs the library's"),
]


def calls(per_block, once, n_layer):
    return per_block * n_layer + once


# ----------------------------------------------------------------------------------------------
# The profile mode: every op name the model graph passes to op() (common/train/model_graph.h,
# gpt.h), and its group. The profile sums each op over its calls: no counts here.

COMMUNICATION = ("communication", "communication (gradient reduction, all-gather, norm all-reduce)",
                 STAGE_COLOURS[7])
OTHER = ("other", "other (zero_grad)", STAGE_COLOURS[9])
UNKNOWN = ("unknown", "unknown ops (not in PROFILE_OPS of step_breakdown.py)", "#555555")
# The step's time outside every op, hatched: not an op, so no colour of the groups'.
BETWEEN = ("between", "between the ops (launch gaps, host work, waits)", "url(#between)")
BETWEEN_PATTERN = ('<defs><pattern id="between" width="6" height="6" patternUnits="userSpaceOnUse" '
                   'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f4f4f4"/>'
                   '<line x1="0" y1="0" x2="0" y2="6" stroke="#b8b8b8" stroke-width="2"/></pattern></defs>')
PROFILE_GROUPS = list(GROUPS) + [COMMUNICATION, OTHER, UNKNOWN, BETWEEN]
PROFILE_SHORT = dict(GROUP_SHORT, communication="communication", other="zero_grad", unknown="unknown",
                     between="between the ops")

PROFILE_OPS = {
    "embedding": "embedding",
    "embedding backward": "embedding",
    "ln_1": "layernorm",                   # block 0's; the other blocks' come with the residual
    "ln_1 backward": "layernorm",
    "residual+ln_1": "layernorm",          # the residual add, then the next block's ln_1
    "residual+ln_1 backward": "layernorm",
    "residual+ln_2": "layernorm",
    "residual+ln_2 backward": "layernorm",
    "residual+ln_f": "layernorm",
    "residual+ln_f backward": "layernorm",
    "qkv": "matmul",
    "qkv backward": "matmul",
    "attn_proj": "matmul",
    "attn_proj backward": "matmul",
    "fc+gelu": "matmul",                   # MatmulBiasGelu: with the GELU
    "fc backward": "matmul",
    "fc_proj": "matmul",
    "fc_proj+gelu backward": "matmul",     # MatmulBackwardGelu: with the GELU's backward
    "attention": "attention",
    "attention backward": "attention",
    "lm_head": "lm_head",
    "lm_head backward": "lm_head",
    "classifier": "classifier",            # ClassifierWithGrad: the loss and the logits' gradient
    "optimizer": "optimizer",
    "zero_grad": "other",
    "gradient reduction": "communication",
    "gradient reduction (bucket)": "communication",
    "weight all-gather": "communication",
    "gradient norm all-reduce": "communication",
}


# ----------------------------------------------------------------------------------------------
# One stage's breakdown


def stage_names(name):
    """A stage's number and its name in words: 04_fused_kernels -> ("04", "fused kernels")."""
    return name[:2], name[3:].replace("_", " ") if len(name) > 3 else name


class Stage:
    def __init__(self, path, data, batch, n_layer):
        self.path = path
        self.name = data.get("stage", "??")
        self.number, self.short = stage_names(self.name)
        self.gpu = data.get("device_name") or data.get("device") or "unknown GPU"
        self.date = (data.get("date") or "")[:10]
        self.seq = (data.get("settings") or {}).get("seq")
        self.batch = batch
        self.n_layer = n_layer
        self.groups = {key: 0.0 for key, _, _ in GROUPS}
        self.counted = []      # (row name, median ms, calls, ms in the step, group, note)
        self.not_counted = []  # (row name, why)
        self.problems = []     # what makes this bar incomplete

        # The rows at this batch size, and those of no batch size (the optimizer's).
        rows = {}
        for r in data.get("rows", []):
            if r.get("batch") not in (batch, None):
                continue
            name = f"{r.get('op')} {r.get('pass')}"
            rows[name] = r
        self.rows_at_batch = sum(1 for r in rows.values() if r.get("batch") == batch)

        # The single ops' calls, less those of the slots the stage fills with a fused kernel.
        need = {name: calls(pb, once, n_layer) for name, (_, pb, once) in ROWS.items()}
        for name, r in rows.items():
            slot = SLOTS.get(name)
            if slot is None:
                continue
            if str(r.get("source", "")).startswith("unfused"):
                self.not_counted.append((name, "slot left unfused: its single ops are counted"))
                continue
            n = calls(slot.per_block, slot.once, n_layer)
            for single in slot.replaces:
                need[single] -= n
            self.add(name, r, n, slot.group, f"fused: {r.get('source', '')}")

        for name, r in rows.items():
            if name in SLOTS:
                continue
            if name in ROWS:
                n = need[name]
                if n < 0:
                    self.problems.append(f"{name}: fused slots replace more calls than the step makes")
                elif n == 0:
                    self.not_counted.append((name, "replaced by a fused slot"))
                else:
                    self.add(name, r, n, ROWS[name][0], "")
                continue
            why = next((why for pattern, why in NOT_IN_A_STEP if pattern.search(name)), None)
            if why:
                self.not_counted.append((name, why))
            else:
                self.not_counted.append((name, "UNKNOWN: not in the tables of step_breakdown.py"))
                self.problems.append(f"row '{name}' is not in the tables of step_breakdown.py (ROWS, SLOTS)")

        # Rows the step needs that the file does not have.
        for name, n in need.items():
            if n > 0 and name not in rows:
                self.problems.append(f"row '{name}' (B={batch}) is not in the file")

    def add(self, name, r, n, group, note):
        ms = r.get("ms_median")
        if r.get("status") != "ok" or not isinstance(ms, (int, float)):
            self.problems.append(f"row '{name}' has no time ({r.get('status', 'not measured')}"
                                 + (f": {r['reason']}" if r.get("reason") else "") + ")")
            self.not_counted.append((name, f"{r.get('status', 'not measured')}"))
            return
        self.groups[group] += ms * n
        self.counted.append((name, ms, n, ms * n, group, note))

    @property
    def total(self):
        return sum(self.groups.values())


# ----------------------------------------------------------------------------------------------
# The ladder's measured ms/step


def read_ladder(path, batch, seq, gpus):
    """{stage number: ms/step} of the ladder's C++ entries, and a note when it cannot be compared."""
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    meta = results.get("meta", {})
    if meta.get("gpu") and meta["gpu"] not in gpus:
        return {}, f"the ladder ran on {meta['gpu']}, the kernel benchmark on {' / '.join(sorted(gpus))}: not compared"
    if meta.get("batch") != batch or (seq and meta.get("seq") != seq):
        return {}, (f"the ladder ran B={meta.get('batch')} T={meta.get('seq')}, the breakdown is of "
                    f"B={batch} T={seq}: not compared")
    measured = {}
    for e in results.get("entries", []):
        if e.get("kind") == "cpp" and e.get("status") == "ok" and isinstance(e.get("median_ms"), (int, float)):
            measured[e.get("stage")] = e["median_ms"]
    return measured, None


# ----------------------------------------------------------------------------------------------
# One trainer profile


class ProfileError(Exception):
    """The file is not a trainer profile this script can read."""


def number(value):
    """A finite JSON number (not a bool), or None."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else None


class Profile:
    """One trainer profile: its ops in PROFILE_GROUPS, and what makes it incomplete."""

    def __init__(self, path, data):
        if not isinstance(data, dict) or data.get("kind") != "gpt-step-profile":
            if isinstance(data, dict) and "rows" in data:
                raise ProfileError("the kernel benchmark's JSON, not a trainer profile: give it without --profile")
            kind = data.get("kind") if isinstance(data, dict) else None
            raise ProfileError(f'not a trainer profile (its "kind" is {json.dumps(kind)}, not "gpt-step-profile")')
        if data.get("version") != 1:
            raise ProfileError(f"profile version {json.dumps(data.get('version'))}: this script reads version 1")
        self.step_ms = number(data.get("step_ms"))
        if self.step_ms is None or self.step_ms <= 0:
            raise ProfileError(f'"step_ms" is {json.dumps(data.get("step_ms"))}, not a positive number')
        ops = data.get("ops")
        if not isinstance(ops, list) or not ops:
            raise ProfileError('"ops" is not a list of ops')
        for i, op in enumerate(ops):
            if not (isinstance(op, dict) and isinstance(op.get("name"), str) and op["name"]):
                raise ProfileError(f"op {i + 1} has no name")
            ms = number(op.get("ms"))
            if ms is None or ms < 0:
                raise ProfileError(f"op '{op['name']}' has \"ms\" {json.dumps(op.get('ms'))}, not a time")
            if op.get("within") is not None and not isinstance(op["within"], str):
                raise ProfileError(f"op '{op['name']}' has a \"within\" that is not an op name")
        for key in ("ops_ms", "difference_ms"):
            if number(data.get(key)) is None:
                raise ProfileError(f'"{key}" is {json.dumps(data.get(key))}, not a number')

        self.path = path
        self.name = str(data.get("stage", "??"))
        self.number, self.short = stage_names(self.name)
        self.device = str(data.get("device") or "unknown device")
        self.model = data.get("model")
        self.batch, self.seq = data.get("batch"), data.get("seq")
        self.micro_batches, self.world = data.get("micro_batches"), data.get("world")
        self.step = data.get("step")
        self.captured = data.get("captured") is True
        self.clock = data.get("clock")
        self.roofed = (data.get("roof") or {}).get("source") not in (None, "none")
        self.groups = {key: 0.0 for key, _, _ in PROFILE_GROUPS}
        self.ops = []      # (op, group): every op, nested ones included
        self.nested = []   # ops inside another op's time
        self.problems = []
        names = {op["name"] for op in ops}
        for op in ops:
            group = PROFILE_OPS.get(op["name"])
            if group is None:
                group = "unknown"
                self.problems.append(f"op '{op['name']}' is not in the table of step_breakdown.py (PROFILE_OPS)")
            self.ops.append((op, group))
            if op.get("within") is None:
                self.groups[group] += op["ms"]
                continue
            self.nested.append(op)
            if op["within"] not in names:
                self.problems.append(f"op '{op['name']}' is within '{op['within']}', which the profile does not have")
        self.ops_ms = sum(v for v in self.groups.values())
        # What the ops leave of the step; below zero when ops overlap (on streams of their own).
        self.between_ms = self.step_ms - self.ops_ms
        self.groups["between"] = max(self.between_ms, 0.0)
        tolerance = 0.01 + 1e-3 * self.step_ms  # the file's rounding
        for key, mine in (("ops_ms", self.ops_ms), ("difference_ms", self.between_ms)):
            if abs(data[key] - mine) > tolerance:
                self.problems.append(f'"{key}" is {data[key]:.3f} ms, the ops give {mine:.3f} ms')

    @property
    def carried(self):
        """The groups that hold an op with the GELU or the residual add in it."""
        return {group for op, group in self.ops if "+" in op["name"] and group in CARRIED}

    def workload(self):
        parts = [f"B={self.batch} T={self.seq}"]
        if isinstance(self.micro_batches, int) and self.micro_batches > 1:
            parts.append(f"{self.micro_batches} micro-batches")
        if isinstance(self.world, int) and self.world > 1:
            parts.append(f"{self.world} GPUs")
        return ", ".join(parts)

    def what(self):
        """What was timed, and how: the first line under the title."""
        clock = f" ({self.clock})" if self.clock else ""
        return f"{self.name}, step {self.step} of its run, timed op by op{clock}"

    def where(self):
        model = f"GPT-2 {self.model}, " if self.model else ""
        return f"{model}{self.workload()}, {self.device}"


# ----------------------------------------------------------------------------------------------
# Output


def subtitle(stages, batch):
    gpus, date, seq = benchmark_runs(stages)
    return (f"sum of the kernel benchmark's per-op medians (not a profiler trace), GPT-2 124M B={batch} "
            f"T={seq}, {gpus}, {date}")


def print_table(stages, ladder, ladder_note, detail, out=None):
    out = out or sys.stdout
    def emit(line=""):  # a line of the table, without trailing blanks
        out.write(line.rstrip() + "\n")

    w = max(9, max(len(s.number) for s in stages) + 2)
    label_w = max(len(GROUP_SHORT[k]) for k in GROUP_SHORT) + 2
    label_w = max(label_w, len("ladder ms/step") + 2)
    emit(subtitle(stages, stages[0].batch))
    emit(f"ms per step = each op's median x the times one step runs it (n_layer = {stages[0].n_layer})")
    emit()
    emit(f"{'':<{label_w}}" + "".join(f"{'stage ' + s.number:>{w + 6}}" for s in stages))
    for key, _, _ in GROUPS:
        cells = ""
        for s in stages:
            v = s.groups[key]
            share = 100.0 * v / s.total if s.total else 0.0
            cells += f"{v:>{w}.1f}{share:>5.0f}%"
        emit(f"{GROUP_SHORT[key]:<{label_w}}" + cells)
    emit(f"{'sum':<{label_w}}" + "".join(f"{s.total:>{w}.1f}{'':>6}" for s in stages))
    if ladder is not None:
        if ladder_note:
            emit(f"ladder: {ladder_note}")
        else:
            cells_m, cells_d = "", ""
            for s in stages:
                m = ladder.get(s.number)
                cells_m += f"{m:>{w}.1f}{'':>6}" if m is not None else f"{'-':>{w}}{'':>6}"
                if m is not None and s.total:
                    d = m - s.total
                    cells_d += f"{d:>+{w}.1f}{100.0 * d / m:>+5.1f}%"
                else:
                    cells_d += f"{'-':>{w}}{'':>6}"
            emit(f"{'ladder ms/step':<{label_w}}" + cells_m)
            emit(f"{'ladder - sum':<{label_w}}" + cells_d)
    for s in stages:
        if s.problems:
            emit(f"\nstage {s.number} is incomplete:")
            for p in s.problems:
                emit(f"  {p}")
    if detail:
        for s in stages:
            emit(f"\nstage {s.name} ({os.path.basename(s.path)}), B={s.batch}:")
            emit(f"  {'row':<38} {'median ms':>10} {'x':>4} {'ms/step':>9}  group")
            for name, ms, n, total, group, note in s.counted:
                emit(f"  {name:<38} {ms:>10.4f} {n:>4} {total:>9.2f}  {GROUP_SHORT[group]}"
                      + (f"  ({note})" if note else ""))
            for name, why in s.not_counted:
                emit(f"  {name:<38} {'':>10} {'-':>4} {'':>9}  not counted: {why}")



def draw_bar(svg, X, y, bar_h, groups, values):
    """One stacked bar at height y: a segment per group of `groups` (key, label, colour) with a
    positive value in `values`, left to right from 0, each labelled with its ms where it fits."""
    x = 0.0
    for key, _, colour in groups:
        v = values.get(key, 0.0)
        if v <= 0:
            continue
        wide = X(x + v) - X(x)
        svg.rect(X(x), y, wide, bar_h, colour, stroke="white", width=0.8)
        label = f"{v:.0f}" if v >= 10 else f"{v:.1f}"
        if wide >= 7.5 * len(label) + 6:
            dark = key in ("gelu_residual", "lm_head", "other", "communication", "between")  # light colours
            svg.text(X(x) + wide / 2, y + bar_h / 2 + 4, label, size=11, anchor="middle",
                     colour="#222" if dark else "white")
        x += v


def draw_ladder_mark(svg, X, y, bar_h, measured, name="ladder"):
    """The ladder's measured ms/step across a bar at height y: a line with a marker, `name` and its value."""
    if measured is None:
        return
    mx = X(measured)
    svg.line(mx, y - 7, mx, y + bar_h + 7, colour="#222", width=2.0)
    svg.add(f'<path d="M {mx - 5:.1f} {y - 12:.1f} L {mx + 5:.1f} {y - 12:.1f} L {mx:.1f} {y - 5:.1f} Z" '
            'fill="#222"/>')
    svg.text(mx + 7, y - 4, f"{name} {measured:.1f}", size=10, colour="#222")


def draw_legend(svg, W, y, rows, labels, ladder_text):
    """The legend from height y: `labels` (label, colour) in two columns of `rows`, then, if
    ladder_text is given, the ladder's mark explained. Returns the height below it."""
    col_w = (W - 48) / 2
    for i, (label, colour) in enumerate(labels):
        lx = 24 + col_w * (i // rows)
        yy = y + 20 * (i % rows)
        svg.rect(lx, yy - 10, 16, 12, colour)
        svg.text(lx + 22, yy, label, size=12)
    foot = y + 20 * rows + 8
    if ladder_text:
        svg.line(30, foot - 12, 30, foot + 4, colour="#222", width=2.0)
        svg.text(42, foot, ladder_text, size=12)
        foot += 20
    return foot


class Bar:
    """One bar of a figure: two lines of label left of it, its segments ({group key: ms}), its
    length, the text right of it (red when `problem`), and a measured ms/step marked across it."""

    def __init__(self, label, sublabel, values, length, end_text, problem=False, mark=None, mark_name="ladder"):
        self.label, self.sublabel, self.values, self.length = label, sublabel, values, length
        self.end_text, self.problem, self.mark, self.mark_name = end_text, problem, mark, mark_name


def draw_bars(path, title, lines, groups, bars, labels, mark_text=None, notes=(), defs=None):
    """The figure of both modes: a title, grey `lines` under it, one stacked bar per Bar on one
    axis of ms per step, a legend of `labels` (label, colour) with `mark_text` explaining the marks,
    then `notes` (text, colour). `defs`: SVG definitions the colours refer to."""
    n = len(bars)
    left, right, top = 150, 140, 56 + 18 * len(lines)
    bar_h, gap = 36, 26
    legend_rows = (len(labels) + 1) // 2
    W = 1000
    ph = n * (bar_h + gap)
    H = top + ph + 66 + legend_rows * 20 + 20 * (int(bool(mark_text)) + len(notes)) + 16
    pw = W - left - right
    svg = Svg(W, H)
    if defs:
        svg.add(defs)
    svg.text(24, 28, title, size=17, weight="bold")
    for i, line in enumerate(lines):
        svg.text(24, 48 + 18 * i, line, size=12, colour="#555")

    most = max([b.length for b in bars] + [b.mark for b in bars if b.mark is not None] + [1.0])
    ticks, step = nice_ticks(0, most * 1.02, target=8)
    x1 = ticks[-1]

    def X(ms):
        return left + ms / x1 * pw

    for t in ticks:
        svg.line(X(t), top - 6, X(t), top + ph, colour="#e3e3e3")
        svg.line(X(t), top + ph, X(t), top + ph + 5)
        svg.text(X(t), top + ph + 20, fmt_tick(t, step), anchor="middle")
    svg.line(left, top + ph, left + pw, top + ph)
    svg.text(left + pw / 2, top + ph + 40, "milliseconds per training step", size=13, anchor="middle")

    for i, b in enumerate(bars):
        y = top + gap / 2 + i * (bar_h + gap)
        # Dark, not the stage's colour of plot.py: here the colours are the op groups'.
        svg.text(left - 12, y + bar_h / 2 - 2, b.label, size=13, anchor="end", weight="bold")
        svg.text(left - 12, y + bar_h / 2 + 13, b.sublabel, size=11, anchor="end", colour="#444")
        draw_bar(svg, X, y, bar_h, groups, b.values)
        label_x = X(max(b.length, b.mark or 0)) + 8
        svg.text(label_x, y + bar_h / 2 + 4, b.end_text, size=12, weight="bold", colour="#b00" if b.problem else "#222")
        draw_ladder_mark(svg, X, y, bar_h, b.mark, b.mark_name)

    foot = draw_legend(svg, W, top + ph + 66, legend_rows, labels, mark_text)
    for text, colour in notes:
        svg.text(24, foot, text, size=12, colour=colour)
        foot += 20
    svg.write(path)


def draw(stages, ladder, ladder_note, left_out, path):
    # The ladder's ms/step of the stages drawn here, where it has them.
    ladder = {s.number: ladder[s.number] for s in stages if ladder and s.number in ladder}
    bars = [Bar(f"stage {s.number}", s.short, s.groups, s.total,
                f"sum {s.total:.1f} ms" + (" (incomplete)" if s.problems else ""), bool(s.problems),
                ladder.get(s.number)) for s in stages]
    # Legend: the groups in two columns, then the ladder's mark.
    fused = {group for s in stages for _, _, _, _, group, note in s.counted if note}  # hold a fused slot's row
    labels = [(label + (FUSED_NOTE.get(key, "") if key in fused else ""), colour) for key, label, colour in GROUPS]
    notes = []
    if not ladder and ladder_note:
        notes.append((f"ladder: {ladder_note}", "#555"))
    incomplete = [s.number for s in stages if s.problems]
    if incomplete:
        notes.append((f"incomplete: stage {', '.join(incomplete)} (rows unknown or not measured: "
                      "see step_breakdown.py's output)", "#b00"))
    if left_out:
        notes.append((f"left out, no rows at B={stages[0].batch}: {', '.join(left_out)}", "#b00"))
    draw_bars(path, "Where one training step's time goes, per stage (ms; shorter is faster)",
              [subtitle(stages, stages[0].batch),
               f"each op's median × the times one step runs it ({stages[0].n_layer} blocks, forward and "
               "backward, the optimizer once), grouped"],
              GROUPS, bars, labels,
              "the ladder's measured ms/step (median of whole steps): above the sum by launch gaps "
              "and host work, below it where an op finds its input in L2" if ladder else None,
              notes)


def print_profile(prof, detail, out=None):
    out = out or sys.stdout
    def emit(line=""):  # a line of the table, without trailing blanks
        out.write(line.rstrip() + "\n")

    emit(prof.what())
    emit(prof.where())
    emit()
    w = max(len(v) for v in PROFILE_SHORT.values()) + 2
    emit(f"{'':<{w}}{'ms':>10}{'share':>8}   (share: of the step's time)")
    shown = {group for op, group in prof.ops if op.get("within") is None}
    for key, _, _ in PROFILE_GROUPS:
        v = prof.between_ms if key == "between" else prof.groups[key]
        if key in shown or key == "between":
            emit(f"{PROFILE_SHORT[key]:<{w}}{v:>10.2f}{100.0 * v / prof.step_ms:>7.1f}%"
                 + ("   (below 0: the ops overlap)" if v < 0 else ""))
    emit(f"{'step':<{w}}{prof.step_ms:>10.2f}{100.0:>7.1f}%")
    if prof.nested:
        emit("\nwithin another op, not added again:")
        for op in prof.nested:
            emit(f"  {op['name'] + ' (in ' + op['within'] + ')':<{w + 24}}{op['ms']:>10.2f}")
    if prof.problems:
        emit("\nthe profile is incomplete:")
        for problem in prof.problems:
            emit(f"  {problem}")
    if detail:
        emit(f"\nevery op of {os.path.basename(prof.path)}"
             + ("" if prof.roofed else " (no roof measured: no share of a ceiling)") + ":")
        emit(f"  {'op':<30} {'pass':<9} {'calls':>5} {'ms':>10} {'share':>7} {'of roof':>8}  group")
        for op, group in prof.ops:
            roof = number(op.get("roof_share"))
            emit(f"  {op['name']:<30} {str(op.get('pass', '?')):<9} {str(op.get('calls', '?')):>5} {op['ms']:>10.3f}"
                 f" {100.0 * op['ms'] / prof.step_ms:>6.1f}% {'-' if roof is None else f'{100.0 * roof:.0f}%':>8}  "
                 + PROFILE_SHORT[group] + (f" (within {op['within']})" if op.get("within") is not None else ""))


def draw_profile(prof, path):
    """One bar as long as the step, the time between the ops hatched at its end. Where the ops
    add up to more (some overlap), the bar is their sum and the step's time a mark across it."""
    overlap = prof.between_ms < 0
    length = prof.ops_ms if overlap else prof.step_ms
    end = f"{'ops' if overlap else 'step'} {length:.1f} ms" + (" (incomplete)" if prof.problems else "")
    # A numbered stage ("04_fused_kernels"), or the CPU reference ("cpu_reference").
    head, _, rest = prof.name.partition("_")
    label, short = (f"stage {prof.number}", prof.short) if prof.number.isdigit() else (head.upper(), rest)
    bar = Bar(label, short, prof.groups, length, end, bool(prof.problems),
              prof.step_ms if overlap else None, "step")
    carried = prof.carried
    labels = [(label + (f"; {CARRIED[key]}" if key in carried else ""), colour)
              for key, label, colour in PROFILE_GROUPS if prof.groups[key] > 0]
    notes = []
    if prof.captured:
        notes.append(("the stage runs its step as a CUDA Graph; the step timed here ran without it, op by op", "#555"))
    if prof.nested:
        notes.append(("within another op, not added again: "
                      + "; ".join(f"{op['name']} {op['ms']:.2f} ms (in {op['within']})" for op in prof.nested), "#555"))
    for problem in prof.problems[:3]:
        notes.append((f"incomplete: {problem}", "#b00"))
    if len(prof.problems) > 3:
        notes.append((f"incomplete: {len(prof.problems) - 3} more (see step_breakdown.py's output)", "#b00"))
    draw_bars(path, "Where one training step's time goes (ms; shorter is faster)",
              [prof.what(), prof.where(),
               "each op's time over all its calls in the step, grouped; the bar is the step's own time"
               + (": the ops add up to more (some overlap), so the step is the mark" if overlap else "")],
              PROFILE_GROUPS, [bar], labels,
              "the step's own time, from before its first op to after its last" if overlap else None,
              notes, BETWEEN_PATTERN)


def read_json(path):
    """The file's JSON, or None after saying on stderr why it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        print(f"step_breakdown.py: error: cannot read {path}: {exc}", file=sys.stderr)
        return None


def profile_main(path, out, detail):
    """The profile mode of main(): its exit status."""
    data = read_json(path)
    if data is None:
        return 2
    try:
        prof = Profile(path, data)
    except ProfileError as exc:
        print(f"step_breakdown.py: error: {path}: {exc}", file=sys.stderr)
        return 2
    for problem in prof.problems:
        print(f"step_breakdown.py: warning: {problem}", file=sys.stderr)
    print_profile(prof, detail)
    draw_profile(prof, out)
    print(f"\nwrote {out}")
    return 1 if prof.problems else 0


def main(argv=None):
    p = kernel_figure_parser(
        description="One stacked bar per stage: where one GPT-2 124M training step's time goes, from the kernel "
                    "benchmark's JSON (bench_stageNN --json). Each segment is an op group's medians times the "
                    "number of calls one step makes (the tables ROWS and SLOTS at the top of this script, read "
                    "off common/train/model_graph.h and gpt.h). With --profile instead: one bar of one real "
                    "step, from the profile a trainer writes (train --profile), each op timed in the step, "
                    "grouped the same way (the table PROFILE_OPS), the time between the ops at its end. "
                    "Also prints the numbers as a table.",
        epilog="Exit status: 0 written and complete; 1 written, but a row was unknown to the tables or one the "
               "step needs was missing or not measured (with --profile: an op name unknown to PROFILE_OPS, or "
               "totals the ops do not give; reported on stderr, and in the figure); 2 bad usage, no readable "
               "input, or a file that is not a trainer profile. See tests/bench/README.md.")
    p.usage = ("%(prog)s --out FILE.svg [--batch 16] [--ladder results.json] [--layers 12] [--detail] STAGE.json...\n"
               "       %(prog)s --profile RUN.profile.json --out FILE.svg [--detail]")
    # The profile mode has no stage files: they become optional here and are required below.
    stage_files = next(a for a in p._actions if a.dest == "json")
    stage_files.nargs, stage_files.required = "*", False
    batch = p.get_default("batch")
    p.set_defaults(batch=None)  # None: not given, as the profile mode wants it
    p.add_argument("--profile", metavar="RUN.profile.json",
                   help="instead of STAGE.json: the profile of one step that train --profile writes (one bar)")
    p.add_argument("--ladder", metavar="results.json",
                   help="the ladder's results.json (tests/bench/ladder.py): its measured ms/step beside each sum")
    p.add_argument("--layers", type=int, help=f"blocks of the model [{N_LAYER}, GPT-2 124M]")
    p.add_argument("--detail", action="store_true",
                   help="also print every row: its median, its count, its ms (with --profile: every op)")
    args = p.parse_args(argv)
    if args.profile is not None:
        if args.json or args.ladder or args.batch is not None or args.layers is not None:
            p.error("--profile draws the profile's own step: STAGE.json, --batch, --layers and --ladder are "
                    "for the kernel benchmark's files")
        return profile_main(args.profile, args.out, args.detail)
    if not args.json:
        p.error("the kernel benchmark's STAGE.json files (or --profile RUN.profile.json) are required")
    args.batch = batch if args.batch is None else args.batch
    args.layers = N_LAYER if args.layers is None else args.layers
    if args.batch < 1 or args.layers < 1:
        p.error("--batch and --layers must be positive")

    stages, left_out = [], []
    for path in args.json:
        data = read_json(path)
        if data is None:
            return 2
        stage = Stage(path, data, args.batch, args.layers)
        if stage.rows_at_batch == 0 or not stage.counted:
            print(f"step_breakdown.py: warning: {path} has no measured rows at B={args.batch}; left out",
                  file=sys.stderr)
            left_out.append(os.path.basename(path))
            continue
        stages.append(stage)
    if not stages:
        print(f"step_breakdown.py: error: no input has rows at B={args.batch}", file=sys.stderr)
        return 2
    stages.sort(key=lambda s: s.name)

    ladder, ladder_note = None, None
    if args.ladder:
        try:
            ladder, ladder_note = read_ladder(args.ladder, args.batch, stages[0].seq, {s.gpu for s in stages})
        except (OSError, ValueError) as exc:
            print(f"step_breakdown.py: error: cannot read {args.ladder}: {exc}", file=sys.stderr)
            return 2

    for s in stages:
        for problem in s.problems:
            print(f"step_breakdown.py: warning: stage {s.number}: {problem}", file=sys.stderr)
    print_table(stages, ladder, ladder_note, args.detail)
    draw(stages, ladder, ladder_note, left_out, args.out)
    print(f"\nwrote {args.out}")
    return 1 if left_out or any(s.problems for s in stages) else 0


if __name__ == "__main__":
    sys.exit(main())
