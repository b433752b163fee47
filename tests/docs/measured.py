"""The chapters' measured tables, generated from the committed GPU runs in docs/results/.

A chapter never copies a measured number by hand: it holds a marker pair, and sync_docs.py
writes the table between the two lines from the results files (and --check fails when the
table there is not what the files say):

    <!-- measured: 03 -->
    <!-- end measured -->

Tables: "00" ... "06" (one per chapter), "03a" (the attention algorithm's part of chapter 03),
"ladder" (every stage on the reference GPU, for README.md and docs/README.md) and "yardsticks"
(each GPU model's reference ceilings).

A run is a directory docs/results/<date>_<gpu>[_<anything>]/ as tests/gpu_check.sh archives it:
ladder*/results.json (tests/bench/ladder.py), kernels/stageNN.json (bench_stageNN --json),
attention/results.json (tests/bench/attention.py), ceilings in each of them, and a
gpu_check_<commit>.txt whose name gives the commit, and tests_summary.txt (the GPU tests per stage). Runs are ordered by the time their files
record; each cell of a table comes from the latest run of its GPU model that measured it, and
names that run. The attention benchmark's rows give the median and the range over every run of
the GPU model instead: the same kernel has measured up to a quarter apart from run to run, so
one run says little about a difference between two variants. A run whose entries timed other
code than their labels name now (ATOMIC_DQ_RUNS: made while stage 03's backward added dq with
atomics) is read under the labels of what it timed.

The yardstick of a GPU model is the median of every copy bandwidth and every bf16 GEMM ceiling
its runs measured; "% of copy" and "% of GEMM" in the tables are against it, so that a
percentage does not move with the ceiling one run happened to measure.

Python 3 standard library only.
"""
import json
import re
import statistics

MARKER = re.compile(r"<!-- measured: (\S+) -->$")
END = "<!-- end measured -->"

# Each stage's PyTorch counterpart in the ladder (tests/bench/ladder.py's entry keys).
COUNTERPART = {
    "00": ("torch_fp32", "eager fp32"),
    "01": ("torch_tf32", "eager TF32"),
    "02": ("torch_bf16", "eager bf16 autocast"),
    "03": ("torch_sdpa", "bf16 + SDPA"),
    "04": ("torch_compile", "torch.compile"),
    "05": ("torch_pad", "torch.compile + vocabulary padded to 64"),
    "06": ("torch_pad", "torch.compile + vocabulary padded to 64"),
}

# The kernel rows of each chapter: (op, pass) as bench_stageNN names them, at B = 16.
KERNELS = {
    "00": [("Matmul fc", "forward"), ("Matmul lm_head", "forward"), ("LayerNorm", "forward"),
           ("LayerNorm", "backward"), ("Attention", "forward"), ("Attention", "backward"),
           ("Classifier", "forward"), ("Classifier", "backward"), ("Gelu", "forward"), ("Residual", "forward")],
    "01": [("Matmul qkv", "forward"), ("Matmul attn_proj", "forward"), ("Matmul fc", "forward"),
           ("Matmul fc_proj", "forward"), ("Matmul lm_head", "forward"), ("Matmul lm_head", "backward")],
    "02": [("Matmul fc", "forward"), ("Matmul lm_head", "forward"), ("LayerNorm", "forward"),
           ("Attention", "forward"), ("Attention", "backward"), ("Gelu", "forward"), ("Optimizer", "step")],
    "03": [("Attention", "forward"), ("Attention", "backward")],
    "04": [("ResidualLayerNorm", "forward"), ("ResidualLayerNorm", "backward"), ("MatmulBiasGelu fc", "forward"),
           ("MatmulBackwardGelu fc_proj", "backward"), ("ClassifierWithGrad", "forward+backward"),
           ("Optimizer", "step")],
    "05": [(f"Matmul lm_head at {v}", p) for v in (50257, 50264, 50272, 50304, 50432, 51200) for p in ("forward", "backward")]
          + [("ClassifierWithGrad", "forward+backward")],
    "06": [("Optimizer", "step")],
}

# The attention benchmark's entries each table shows, at T = 1024 and B = 16, each row even when
# no run has timed it yet (its cells empty).
ATOMIC_DQ = "C++ stage 03 (atomic dq (FlashAttention-2's))"
FIRST_FORM = "C++ stage 03 (dq in its own pass, first form)"
ATTENTION = {
    "03a": ["C++ stage 02", "C++ stage 03 (no tensor cores (forward))", "C++ stage 03", ATOMIC_DQ,
            "PyTorch SDPA flash"],
    "03": ["C++ stage 03", ATOMIC_DQ, FIRST_FORM, "C++ stage 03 (before: 64 x 64 tiles, a dq kernel)",
           "C++ stage 03 (16 rows per warp)", "C++ stage 03 (128 keys per dk/dv block)",
           "C++ stage 03 (128 queries per dq block)", "C++ stage 03 (128 keys per dk/dv block, 128 queries per dq block)",
           "PyTorch SDPA flash", "PyTorch SDPA cuDNN"],
}
PASSES = ("forward", "backward")
# The runs made before stage 03's attention backward made dq in a pass of its own. Until then the
# stage added dq into fp32 sums with atomics (FlashAttention-2's way, now the benchmark's atomic-dq
# variant), and the present design was the benchmark's "deterministic dq" variant, in a first form
# (its dq kernel the one of the kernels before). Their entries timed other code than the same labels
# time now, so they are read under the labels of what they timed, as course_figures.py's
# FIRST_VERSION_RUNS marks the runs of stage 00's first kernels.
ATOMIC_DQ_RUNS = {"2026-11-23_h100", "2026-11-27_h200", "2026-11-28_h200", "2026-11-28_h200_9cf1cf3"}
ATOMIC_DQ_ENTRIES = {  # entry as those runs name it -> the rows of its forward and its backward (None: not shown)
    "C++ stage 03": (ATOMIC_DQ, ATOMIC_DQ),
    "C++ stage 03 (deterministic dq)": (FIRST_FORM, FIRST_FORM),
    # their forward is the variant's; their backward was the stage's, then the atomic one
    "C++ stage 03 (16 rows per warp)": ("C++ stage 03 (16 rows per warp)", None),
    "C++ stage 03 (no tensor cores (forward))": ("C++ stage 03 (no tensor cores (forward))", None),
}
ATTENTION_T, ATTENTION_B = 1024, 16
STEP_TABLES = {"00", "01", "02", "03", "04", "05", "06"}
NAMES = sorted(STEP_TABLES | set(ATTENTION) | {"ladder", "yardsticks"})
# "stage 03: 52 passed, 0 failed, 0 skipped[, 2 do not apply], 0 not run of 52" (tests_summary.txt)
TESTS_LINE = re.compile(r"stage (\d\d): (\d+) passed, (\d+) failed, (\d+) skipped, (?:(\d+) do not apply, )?"
                        r"(\d+) not run of (\d+)")


def gpu_model(name):
    """'NVIDIA H100 80GB HBM3' -> 'H100': the column a GPU's figures go in."""
    m = re.search(r"\b([A-Z]\d{2,4}[A-Za-z]*)\b", name or "")
    return m.group(1) if m else (name or "unknown GPU")


def load(path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def when(text):
    """'2026-11-28 06:14 UTC' or '2026-11-28T06:14:15Z' -> '2026-11-28 06:14' (sortable)."""
    m = re.match(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d)", text or "")
    return f"{m.group(1)} {m.group(2)}" if m else None


class Run:
    """One directory of docs/results/: what it measured, on which GPU, when, at which commit."""

    def __init__(self, directory):
        self.dir = directory
        self.name = directory.name
        commits = sorted(m.group(1) for p in directory.glob("gpu_check_*.txt")
                         if (m := re.fullmatch(r"gpu_check_([0-9a-f]{7,40})\.txt", p.name)))
        self.commit = commits[-1] if commits else None
        self.ladders = [d for p in sorted(directory.glob("ladder*/results.json")) if (d := load(p))]
        self.kernels = {}
        for p in sorted((directory / "kernels").glob("stage[0-9][0-9].json")):
            d = load(p)
            if d and not d.get("error"):
                self.kernels[p.stem[len("stage"):]] = d
        self.attention = load(directory / "attention" / "results.json")
        self.tests = {}  # stage -> (passed, failed, skipped, do not apply, not run, total)
        summary = directory / "tests_summary.txt"
        for m in TESTS_LINE.finditer(summary.read_text(encoding="utf-8") if summary.is_file() else ""):
            self.tests[m.group(1)] = tuple(int(g or 0) for g in m.groups()[1:])
        gpus = [l["meta"].get("gpu") for l in self.ladders] + [k.get("device_name") for k in self.kernels.values()]
        if self.attention:
            gpus.append(self.attention.get("device"))
        gpus = [g for g in gpus if g]
        self.gpu = gpus[0] if gpus else None
        self.model = gpu_model(self.gpu)
        times = [when(l["meta"].get("date")) for l in self.ladders] + [when(k.get("date")) for k in self.kernels.values()]
        times = sorted(t for t in times if t)
        self.time = times[-1] if times else self.name[:10]
        self.date = self.time[:10]

    def ceilings(self):
        """(copy GB/s, bf16 GEMM TFLOP/s) of every measurement of the ceilings in this run."""
        found = []
        for l in self.ladders:
            found.append(l.get("ceilings") or {})
        for k in self.kernels.values():
            found.append(k.get("ceilings") or {})
        copies = [c["copy"]["gb_per_s"] for c in found if c.get("copy", {}).get("gb_per_s")]
        gemms = [c["gemm"]["tflops"] for c in found
                 if c.get("gemm", {}).get("tflops") and c["gemm"].get("dtype", "bf16") == "bf16"]
        if self.attention and self.attention.get("gemm_tflops"):
            gemms.append(self.attention["gemm_tflops"])
        return copies, gemms

    def datasheet_tflops(self):
        for c in [l.get("ceilings") or {} for l in self.ladders] + [k.get("ceilings") or {} for k in self.kernels.values()]:
            if c.get("datasheet_bf16_tflops"):
                return c["datasheet_bf16_tflops"]
        for l in self.ladders:
            if l["meta"].get("peak_flops"):
                return l["meta"]["peak_flops"] / 1e12
        return None

    def entry(self, key):
        """The ladder entry `key` (cpp_03, torch_sdpa...) that ran, and its ladder; None if none did."""
        for l in reversed(self.ladders):
            for e in l.get("entries", []):
                if e.get("key") == key and e.get("status") == "ok" and e.get("tokens_per_s"):
                    return e, l
        return None

    def kernel(self, stage, op, pass_):
        d = self.kernels.get(stage)
        for r in (d or {}).get("rows", []):
            if (r.get("op"), r.get("pass")) == (op, pass_) and r.get("status") == "ok" and \
                    r.get("batch") in (16, None):
                if op == "Attention" and r.get("tflops") and d.get("settings", {}).get("attention_flops") != "causal_half":
                    # runs before 2026-11-28 counted the whole T x T square; every run is shown as
                    # FlashAttention counts, over the causal half
                    r = dict(r, tflops=r["tflops"] / 2)
                return r
        return None

    def attention_row(self, entry):
        """The attention benchmark's row at T = 1024, B = 16 that the table row `entry` shows: in a
        run of ATOMIC_DQ_RUNS, the one ATOMIC_DQ_ENTRIES reads as `entry`, without a pass it reads
        as another row or none."""
        for r in (self.attention or {}).get("rows", []):
            if r.get("T") != ATTENTION_T or r.get("B") != ATTENTION_B:
                continue
            name = r.get("entry")
            shown = ATOMIC_DQ_ENTRIES.get(name) if self.name in ATOMIC_DQ_RUNS else None
            shown = shown or (name, name)
            if entry in shown:
                return {k: v for k, v in r.items() if k not in PASSES or shown[PASSES.index(k)] == entry}
        return None


def runs(root):
    base = root / "docs" / "results"
    found = [Run(d) for d in sorted(base.iterdir()) if d.is_dir()] if base.is_dir() else []
    return sorted((r for r in found if r.gpu), key=lambda r: (r.time, r.name))


def yardsticks(all_runs):
    """{model: {"copy": [...], "gemm": [...], "datasheet": TFLOP/s, "runs": n}} over every run."""
    out = {}
    for r in all_runs:
        y = out.setdefault(r.model, {"copy": [], "gemm": [], "datasheet": None, "runs": 0, "gpu": r.gpu})
        copies, gemms = r.ceilings()
        y["copy"] += copies
        y["gemm"] += gemms
        y["datasheet"] = y["datasheet"] or r.datasheet_tflops()
        y["runs"] += 1
    return out


def models(all_runs):
    """GPU models, the one with the latest run first (the reference GPU), each once."""
    seen = []
    for r in reversed(all_runs):
        if r.model not in seen:
            seen.append(r.model)
    return seen


class Table:
    """Rows of cells, each cell naming the run it came from by a letter defined under the table."""

    def __init__(self, head):
        self.head, self.rows, self.sources = head, [], []

    def mark(self, run):
        if run not in self.sources:
            self.sources.append(run)
        return "abcdefghijklmnopqrstuvwxyz"[self.sources.index(run)]

    def cell(self, text, run):
        return f"{text} [{self.mark(run)}]" if text is not None and run is not None else ""

    def render(self, note, link_prefix):
        lines = ["| " + " | ".join(self.head) + " |", "|---" + "|---:" * (len(self.head) - 1) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        lines.append("")
        for run in self.sources:
            commit = f", commit {run.commit}" if run.commit else ""
            lines.append(f"[{self.mark(run)}] [{run.name}]({link_prefix}results/{run.name}/): {run.gpu}, "
                         f"{run.time} UTC{commit}  ")
        if note:
            lines.append(note)
        return lines


def latest(all_runs, model, pick):
    """(value, run) from the latest run of `model` for which pick(run) is not None."""
    for r in reversed(all_runs):
        if r.model == model:
            v = pick(r)
            if v is not None:
                return v, r
    return None, None


def ms(x):
    return f"{x:.1f} ms" if x >= 10 else f"{x:.2f} ms" if x >= 1 else f"{x:.4f} ms"


def kernel_text(row, yard):
    """'0.7453 ms, 0.8 % of copy': the row's time and its share of the GPU model's yardstick."""
    text = ms(row["ms_median"])
    if row.get("tflops") and yard["gemm"]:
        share = 100 * row["tflops"] / statistics.median(yard["gemm"])
        text += f", {row['tflops']:.1f} TFLOP/s, {share:.{1 if share < 10 else 0}f} % of GEMM"
    elif row.get("gb_per_s") and yard["copy"]:
        share = 100 * row["gb_per_s"] / statistics.median(yard["copy"])
        text += f", {row['gb_per_s']:,.0f} GB/s, {share:.{1 if share < 10 else 0}f} % of copy"
    return text


def step_table(all_runs, stage, link_prefix):
    cols = models(all_runs)
    yard = yardsticks(all_runs)
    t = Table(["B = 16, T = 1024"] + [yard[m]["gpu"] for m in cols])
    prev = f"{int(stage) - 1:02d}"
    key, counterpart = COUNTERPART[stage]

    def row(label, pick, fmt):
        cells = []
        for m in cols:
            v, r = latest(all_runs, m, pick)
            cells.append(t.cell(fmt(v) if v is not None else None, r))
        if any(cells):
            t.rows.append([label] + cells)

    def mine(r):
        e = r.entry(f"cpp_{stage}")
        return e[0] if e else None

    row("step", mine, lambda e: f"{e['median_ms']:.1f} ms" if e.get("median_ms") else
        f"{16 * 1024 / e['tokens_per_s'] * 1e3:.1f} ms")
    row("tokens/s", mine, lambda e: f"{e['tokens_per_s']:,.0f}")
    row("MFU", mine, lambda e: f"{100 * e['mfu']:.1f} %")
    row("peak memory", lambda r: (mine(r) or {}).get("peak_memory_bytes"), lambda b: f"{b / 2 ** 30:.2f} GiB")
    if stage != "00":
        def over(r):
            a, b = r.entry(f"cpp_{stage}"), r.entry(f"cpp_{prev}")
            return a[0]["tokens_per_s"] / b[0]["tokens_per_s"] if a and b and a[1] is b[1] else None
        row(f"over stage {prev}", over, lambda x: f"{x:.2f}×")

    def theirs(r):
        e = r.entry(key)
        return e[0] if e else None
    row(f"PyTorch {counterpart}", theirs, lambda e: f"{16 * 1024 / e['tokens_per_s'] * 1e3:.1f} ms")

    def ratio(r):
        a, b = r.entry(f"cpp_{stage}"), r.entry(key)
        return a[0]["tokens_per_s"] / b[0]["tokens_per_s"] if a and b else None
    row("C++ ÷ PyTorch", ratio, lambda x: f"{x:.2f}×")

    for op, pass_ in KERNELS.get(stage, []):
        label = f"{op} {pass_}"
        cells = []
        for m in cols:
            v, r = latest(all_runs, m, lambda r: r.kernel(stage, op, pass_))
            cells.append(t.cell(kernel_text(v, yard[m]) if v else None, r))
        if any(cells):
            t.rows.append([label] + cells)
    note = ("Step rows: tests/bench/ladder.py (median ms per step; the PyTorch row is its tokens/s as ms per "
            f"step of 16,384 tokens); kernel rows: bench_stage{stage} at B = 16 (median of 20 runs); "
            "% of copy and % of GEMM: against the GPU model's yardstick (chapter 00; GEMM is the bf16 ceiling, "
            "whatever the stage's precision). "
            "C++ ÷ PyTorch compares two entries of one run.")
    return t.render(note, link_prefix)


def attention_table(all_runs, name, link_prefix):
    cols = [m for m in models(all_runs) if any(r.attention for r in all_runs if r.model == m)]
    t = Table([f"attention, T = {ATTENTION_T}, B = {ATTENTION_B}"] +
              [f"{c} {what}" for c in cols for what in ("forward", "backward")])
    for entry in ATTENTION[name]:
        cells = []
        for m in cols:
            found = [(r, row) for r in all_runs if r.model == m and (row := r.attention_row(entry))]
            for what in ("forward", "backward"):
                values = [row[what] for _, row in found if row.get(what)]
                if not values:
                    cells.append("")
                    continue
                marks = ",".join(t.mark(r) for r, row in found if row.get(what))
                if len(values) == 1:
                    cells.append(f"{ms(values[0])} [{marks}]")
                else:
                    cells.append(f"{ms(statistics.median(values))} ({min(values):.3f}–{max(values):.3f}, "
                                 f"{len(values)} runs) [{marks}]")
        t.rows.append([entry] + cells)
    note = ("tests/bench/attention.py, one timing (median of its repeats) per run; each cell is the median "
            "over the runs, with their range; an empty cell, no committed run has timed it. Runs are not "
            "interleaved: a difference inside the range says nothing.")
    before = [t.mark(r) for r in t.sources if r.name in ATOMIC_DQ_RUNS]
    def short(entry):  # "C++ stage 03 (atomic dq (FlashAttention-2's))" -> "atomic dq (FlashAttention-2's)"
        return entry[len("C++ stage 03 ("):-1] if entry.startswith("C++ stage 03 (") else entry
    read_as = [f"their *{short(old)}* entry is the *{short(rows[0])}* row" for old, rows in ATOMIC_DQ_ENTRIES.items()
               if rows[0] != old and rows[0] in ATTENTION[name]]
    if any(rows[1] is None and rows[0] in ATTENTION[name] for rows in ATOMIC_DQ_ENTRIES.values()):
        read_as.append("the backward of their other stage 03 entries (the atomic one) is left out")
    if before and read_as:
        note += (f" {'Runs' if len(before) > 1 else 'Run'} {','.join(before)} came before stage 03 made dq in a "
                 "pass of its own: " + "; ".join(read_as) + ".")
    return t.render(note, link_prefix)


def yardstick_table(all_runs, link_prefix):
    yard = yardsticks(all_runs)
    t = Table(["GPU", "copy bandwidth (read + write)", "bf16 GEMM ceiling (8192³)", "data sheet, dense bf16", "runs"])
    for m in models(all_runs):
        y = yard[m]

        def spread(xs, unit, digits):
            if not xs:
                return ""
            return (f"{statistics.median(xs):,.{digits}f} {unit} (median of {len(xs)}; "
                    f"{min(xs):,.{digits}f}–{max(xs):,.{digits}f})")
        marks = ", ".join(t.mark(r) for r in all_runs if r.model == m)
        t.rows.append([y["gpu"], spread(y["copy"], "GB/s", 0), spread(y["gemm"], "TFLOP/s", 0),
                       f"{y['datasheet']:.0f} TFLOP/s" if y["datasheet"] else "", f"{y['runs']} [{marks}]"])
    note = ("Every ceiling measured in the committed runs (tests/bench's bench_ceilings: a 2 GiB device-to-device "
            "copy, a cuBLAS bf16 product with fp32 accumulation), pooled per GPU model.")
    return t.render(note, link_prefix)


def tests_text(t):
    passed, failed, skipped, apart, not_run, total = t
    text = f"{passed} of {total - apart} passed"
    if apart:
        text += f" ({apart} do not apply)"
    return text + (f", {failed} failed" if failed else "") + (f", {skipped} skipped" if skipped else "") + \
        (f", {not_run} not run" if not_run else "")


def ladder_table(all_runs, link_prefix):
    """Every stage on the reference GPU (the model of the latest run): its step, its PyTorch
    counterpart's, and its GPU tests, each from the latest run that measured it."""
    model = models(all_runs)[0]
    t = Table(["stage", "ms per step", "tokens/s", "MFU", "over the stage before", "PyTorch counterpart",
               "C++ ÷ PyTorch", "GPU tests"])
    for stage in sorted(STEP_TABLES):
        key, counterpart = COUNTERPART[stage]
        prev = f"{int(stage) - 1:02d}"

        def mine(r):
            e = r.entry(f"cpp_{stage}")
            return e[0] if e else None

        def over(r):
            a, b = r.entry(f"cpp_{stage}"), r.entry(f"cpp_{prev}")
            return a[0]["tokens_per_s"] / b[0]["tokens_per_s"] if a and b and a[1] is b[1] else None

        def theirs(r):
            e = r.entry(key)
            return 16 * 1024 / e[0]["tokens_per_s"] * 1e3 if e else None

        def ratio(r):
            a, b = r.entry(f"cpp_{stage}"), r.entry(key)
            return a[0]["tokens_per_s"] / b[0]["tokens_per_s"] if a and b else None

        e, er = latest(all_runs, model, mine)
        o, orun = latest(all_runs, model, over) if stage != "00" else (None, None)
        p, prun = latest(all_runs, model, theirs)
        q, qrun = latest(all_runs, model, ratio)
        tests, trun = latest(all_runs, model, lambda r: r.tests.get(stage))
        t.rows.append([stage,
                       t.cell(f"{e['median_ms']:.1f}" if e else None, er),
                       t.cell(f"{e['tokens_per_s']:,.0f}" if e else None, er),
                       t.cell(f"{100 * e['mfu']:.1f} %" if e else None, er),
                       t.cell(f"{o:.2f}×" if o else None, orun),
                       t.cell(f"{counterpart}: {p:.1f} ms" if p else None, prun),
                       t.cell(f"{q:.2f}×" if q else None, qrun),
                       t.cell(tests_text(tests) if tests else None, trun)])
    note = (f"{models(all_runs)[0]} at B = 16, T = 1024 (tests/bench/ladder.py; GPU tests: the GPU check's "
            "tests_summary.txt). C++ ÷ PyTorch compares two entries of one run. Each chapter's own table adds the "
            "other GPUs and the kernels.")
    return t.render(note, link_prefix)


def table(root, name, link_prefix=""):
    """The lines of table `name`, as they go between its markers."""
    if name not in NAMES:
        raise ValueError(f"no measured table named {name!r} (known: {', '.join(NAMES)})")
    all_runs = runs(root)
    if not all_runs:
        return ["(no run in docs/results/ yet)"]
    if name == "yardsticks":
        return yardstick_table(all_runs, link_prefix)
    if name == "ladder":
        return ladder_table(all_runs, link_prefix)
    if name in ATTENTION and name not in STEP_TABLES:
        return attention_table(all_runs, name, link_prefix)
    if name == "03":
        return step_table(all_runs, name, link_prefix) + [""] + attention_table(all_runs, name, link_prefix)
    if name in STEP_TABLES:
        return step_table(all_runs, name, link_prefix)
    raise ValueError(f"no measured table named {name!r} (known: {', '.join(NAMES)})")


def sync(root, md, text, problems):
    """text with every measured table regenerated; problems gets (message, fixable)."""
    name = md.relative_to(root).as_posix()
    depth = len(md.relative_to(root / "docs").parts) - 1 if (root / "docs") in md.parents else -1
    prefix = "../" * depth if depth >= 0 else "docs/"
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        m = MARKER.match(line.strip())
        if not m:
            if line.strip() == END:
                problems.append((f"{name}:{i}: {END} without its opening marker", False))
            continue
        close = next((j for j in range(i, len(lines)) if lines[j].strip() == END), None)
        if close is None:
            problems.append((f"{name}:{i}: measured table {m.group(1)} is not closed by {END}", False))
            continue
        try:
            new = [""] + table(root, m.group(1), prefix) + [""]
        except ValueError as e:
            problems.append((f"{name}:{i}: {e}", False))
            new = lines[i:close]
        if lines[i:close] != new:
            problems.append((f"{name}:{i}: measured table {m.group(1)} is not what docs/results/ says", True))
        out += new + [lines[close]]
        i = close + 1
    return "\n".join(out)
