#!/usr/bin/env python3
"""One C++ stage's training step beside PyTorch's compiled step, group by group: a page and a figure.

usage: step_breakdown_vs_torch.py --kernels STAGE.json --profile PROFILE.json --out PAGE.md
                                  [--svg FIGURE.svg] [--ladder results.json] [--batch 16] [--layers 12]

The C++ side is the kernel benchmark's JSON of one stage (`bench_stage05 --json`), summed exactly
as step_breakdown.py sums it (its class Stage, imported): each op's median times the number of
times one training step runs it, in step_breakdown.py's GROUPS (block matmuls, LM head, attention,
LayerNorm, GELU + residual add, classifier, embedding, optimizer).

The PyTorch side is one training step of the PyTorch reference under torch.profiler
(`gpt2_reference.py --profile-step`, tests/reference/profile_trace.py): the device time of every
kernel, copy and fill the step ran, each put into the same groups by the rules of RULES below,
and what no rule claims into a ninth group, "other", listed kernel by kernel on the page. The
GPU check profiles the ladder's "compile + vocab padded" entry, stage 05's counterpart
(`ladder.py --torch pad --profile-step PATH`).

How a PyTorch kernel is attributed (RULES, in order; the first rule that matches decides):
  1. by the part of the step that launched it: everything launched by gradient clipping and
     AdamW is the optimizer, whatever its name; the batch's upload is "other";
  2. an Inductor kernel (`triton_<kind>_fused_<ops>_<n>`) by the aten ops its name lists, in a
     fixed priority (classifier, attention, LayerNorm, embedding, GELU + residual add, matmul).
     Inductor fuses across op boundaries and lists a kernel's ops sorted alphabetically, so the
     first op of a name is only the first in spelling: `triton_per_fused_add_native_layer_norm_3`
     adds the residual and normalises. A fused kernel goes to the group of its highest-priority
     op: that approximation is the page's main uncertainty, and the page says which rule took
     each kernel;
  3. a library kernel by its name: FlashAttention, cuDNN and memory-efficient attention; the
     foreach and fused optimizer kernels; cuBLAS, cuBLASLt and CUTLASS matrix products;
  4. a matrix product whose launching op has a dimension of the vocabulary's size (V or the
     padded Vp, from the profile's input shapes) is the LM head, not a block matmul.

What the two sides measure is not the same: C++, per-op medians, each op timed alone with the L2
cache emptied; PyTorch, the kernels of one real step (warm L2, one sample, under the profiler).
Neither counts launch gaps or host work: --ladder sets both sides' measured ms/step beside the
sums.

Output: the page (--out, Markdown: the table of groups, the figure, each group's PyTorch kernels,
the C++ rows, the rules) and the figure (--svg: two stacked bars, step_breakdown.py's colours);
the table also goes to stdout.

Exit status: 0 the page is written and complete; 1 written, but incomplete (the C++ stage lacks a
row the step needs or has one step_breakdown.py does not know, the two sides ran on different
GPUs, or the ladder could not be compared); 2 bad usage, an unreadable input, or inputs that
cannot be compared (another batch, sequence length or model, a profile without GPU kernels).

Python 3 standard library only. See tests/bench/README.md.
"""

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # step_breakdown.py and plot.py, next to this file
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from plot import Svg, fmt_tick, nice_ticks  # noqa: E402
from step_breakdown import (GROUP_SHORT, GROUPS, N_LAYER, Stage, draw_bar, draw_ladder_mark,  # noqa: E402
                            draw_legend, read_ladder)

PROG = "step_breakdown_vs_torch.py"

# step_breakdown.py's groups, and what only the PyTorch side has (the last colour of plot.py's
# Tableau 10, which GROUPS does not use).
OTHER = ("other", "other (PyTorch only: layout copies, casts, the batch's upload, ...)", "#bab0ac")
ALL_GROUPS = list(GROUPS) + [OTHER]
SHORT = dict(GROUP_SHORT, other="other")

# ----------------------------------------------------------------------------------------------
# The rules


class Rule:
    """`group` takes a call when `pattern` (case-insensitive) matches what the rule reads (`on`):
    "phase" the part of the step that launched it; "ops" the op names of an Inductor kernel's
    name (triton_<kind>_fused_<ops>_<n>); "name" a library kernel's whole name."""

    def __init__(self, group, on, pattern, catches):
        self.group, self.on, self.pattern, self.catches = group, on, pattern, catches
        self.regex = re.compile(pattern, re.IGNORECASE)


RULES = [
    Rule("optimizer", "phase", r"^optimizer$",
         "every kernel launched by clip_grad_norm_ and AdamW (foreach or fused), whatever its name: the "
         "gradient norm, the clipping and the update, as stage 05's optimizer row"),
    Rule("other", "phase", r"^data$",
         "the batch's upload (a host-to-device copy): the C++ trainer uploads before its step's timing starts"),
    Rule("classifier", "ops", r"nll_loss|softmax|cross_entropy",
         "the loss and its gradient: log-softmax, NLL and their backward (the logits' slice to V and their "
         "cast to fp32 fuse in)"),
    Rule("attention", "ops", r"scaled_dot_product|flash_attention|efficient_attention",
         "an Inductor kernel made from the attention op itself (SDPA's math path)"),
    Rule("layernorm", "ops", r"layer_norm",
         "LayerNorm forward and backward, with what Inductor fuses into them: the residual add before it "
         "(as stage 05's ResidualLayerNorm), the residual stream's gradient sum, the statistics the "
         "backward recomputes"),
    Rule("embedding", "ops", r"embedding",
         "token + position embedding and its backward (embedding_dense_backward)"),
    Rule("gelu_residual", "ops", r"gelu|tanh|(?:^|_)add(?:_|$)",
         "GELU forward and backward (with the fc bias add Inductor fuses into it, which stage 05 counts in "
         "its fused fc+GELU matmul), and a residual add fused with nothing of higher priority"),
    Rule("matmul", "ops", r"(?:^|_)(?:addmm|mm|bmm|sum)(?:_|$)",
         "a bias's gradient (a column sum of a matmul's output gradient, part of stage 05's Matmul "
         "backward), or a matmul Inductor wrote itself (max-autotune templates)"),
    Rule("attention", "name", r"flash|fmha|sdpa|attention",
         "FlashAttention (pytorch_flash::flash_fwd_kernel, flash_bwd_*), cuDNN's attention (*sdpa*, "
         "*flash_fprop*), memory-efficient attention (fmha_cutlass*)"),
    Rule("optimizer", "name", r"multi_tensor_apply|adam|lpnorm",
         "the foreach and fused optimizer kernels and _foreach_norm, when the phase is unknown"),
    Rule("matmul", "name", r"gemm|gemv|nvjet|xmma|cutlass|wgmma|s16816|s1688|splitk|cublas",
         "cuBLAS, cuBLASLt and CUTLASS matrix products (sm90_xmma_gemm_*, nvjet_*, cutlass*, splitKreduce_*)"),
]
LM_HEAD_NOTE = ("a matrix product whose launching op has a dimension of V or Vp (its input shapes) is the LM "
                "head, not a block matmul")
INDUCTOR = re.compile(r"^triton_[a-z0-9]+_(?:fused_)?(?P<ops>.*?)(?:_\d+)?$")


def classify(name, kind, call, vocab):
    """(group, how) of one call of a kernel: call has the phase, op and input dims that launched it."""
    inductor = INDUCTOR.match(name)
    group, how = None, None
    for number, rule in enumerate(RULES, 1):
        if rule.on == "phase":
            subject = call.get("phase") or ""
        elif rule.on == "ops":
            if not inductor:
                continue
            subject = inductor.group("ops")
        else:
            if inductor or kind != "kernel":
                continue
            subject = name
        match = rule.regex.search(subject)
        if match:
            group, how = rule.group, f"rule {number}, {rule.on}: {match.group(0).strip('_') or subject}"
            break
    if group is None:
        return "other", ("no rule: an Inductor kernel of other ops" if inductor else
                         f"no rule: a {kind}" if kind != "kernel" else "no rule")
    if group == "matmul" and vocab & set(flat_dims(call.get("input_dims"))):
        return "lm_head", how + "; a dimension of V or Vp"
    return group, how


def flat_dims(dims):
    """Every integer of an op's "Input Dims" (a list of lists)."""
    out = []
    if isinstance(dims, list):
        for d in dims:
            out.extend(flat_dims(d) if isinstance(d, list) else [d] if isinstance(d, int) else [])
    return out


# ----------------------------------------------------------------------------------------------
# The PyTorch side


class TorchStep:
    def __init__(self, path, data):
        self.path = path
        self.data = data
        config, settings = data.get("config") or {}, data.get("settings") or {}
        self.gpu = data.get("device_name") or "unknown GPU"
        self.date = (data.get("date") or "")[:10]
        self.batch, self.seq = settings.get("batch"), settings.get("seq")
        self.layers, self.C, self.H = config.get("L"), config.get("C"), config.get("H")
        self.V, self.Vp = config.get("V"), settings.get("padded_vocab") or config.get("V")
        self.label = torch_label(settings)
        short = [x for x, on in (("compile", settings.get("compile")),
                                 ("vocab padded", (settings.get("vocab_pad") or 1) > 1)) if on]
        self.short = " + ".join(short) or self.label
        self.totals = data.get("totals") or {}
        self.phases = data.get("phases") or {}
        self.groups = {key: 0.0 for key, _, _ in ALL_GROUPS}
        self.launches = {key: 0 for key, _, _ in ALL_GROUPS}
        self.by_group = {}  # group: {(name, how): [ms, count]}
        vocab = {v for v in (self.V, self.Vp) if isinstance(v, int)}
        for k in data.get("kernels") or []:
            calls = k.get("calls") or [{"phase": None, "op": None, "input_dims": None, "ms": k.get("ms", 0.0),
                                        "count": k.get("count", 0)}]
            for c in calls:
                group, how = classify(k.get("name", ""), k.get("kind", "kernel"), c, vocab)
                ms = float(c.get("ms") or 0.0)
                self.groups[group] += ms
                self.launches[group] += int(c.get("count") or 0)
                cell = self.by_group.setdefault(group, {}).setdefault((k.get("name", ""), how), [0.0, 0])
                cell[0] += ms
                cell[1] += int(c.get("count") or 0)

    @property
    def total(self):
        return sum(self.groups.values())


def torch_label(settings):
    """'bf16 + SDPA + torch.compile + vocab padded to 50304' from the reference's settings."""
    parts = [settings.get("precision") or "?"]
    if settings.get("attention") == "sdpa":
        parts.append("SDPA")
    if settings.get("compile"):
        mode = settings.get("compile_mode")
        parts.append("torch.compile" + (f" ({mode})" if mode and mode != "default" else ""))
    if settings.get("fused_adamw"):
        parts.append("fused AdamW")
    if (settings.get("vocab_pad") or 1) > 1:
        parts.append(f"vocab padded to {settings.get('padded_vocab')}")
    return " + ".join(parts)


def read_ladder_torch(path, stage):
    """The ladder's PyTorch entry of `stage`: (its ms/step, its label), or (None, None)."""
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    for e in results.get("entries", []):
        if e.get("kind") == "torch" and e.get("stage") == stage and e.get("status") == "ok" \
                and isinstance(e.get("median_ms"), (int, float)):
            return e["median_ms"], e.get("label") or e.get("key")
    return None, None


# ----------------------------------------------------------------------------------------------
# Output


def fmt_ms(v):
    return "–" if v is None else f"{v:.2f}"


def fmt_ratio(torch_ms, cpp_ms):
    return f"{torch_ms / cpp_ms:.2f}×" if torch_ms and cpp_ms else ""


def short_name(name, limit=120):
    """A kernel name for the page: without `void`, the namespaces at::native:: and (anonymous
    namespace)::, and the argument list; then, if still long, its middle."""
    s = re.sub(r"^void ", "", name)
    s = re.sub(r"(?:\w+::)*\(anonymous namespace\)::|\bat::native::", "", s)
    s = re.sub(r"(?<=>)\([^()]*\)$", "", s)
    return s if len(s) <= limit else s[: limit - 40] + "…" + s[-39:]


def md_cell(name):
    """A kernel name as a table cell: shortened, in backticks, with its bars escaped."""
    return "`" + short_name(name).replace("`", "'").replace("|", "\\|") + "`"


def table_rows(cpp, torch, ladder):
    """[(label, C++ ms, PyTorch ms, ratio)] of the table, on stdout and on the page."""
    rows = []
    for key, _, _ in ALL_GROUPS:
        c = cpp.groups.get(key) if key != "other" else None
        t = torch.groups[key]
        rows.append((SHORT[key], c, t, fmt_ratio(t, c)))
    rows.append(("sum", cpp.total, torch.total, fmt_ratio(torch.total, cpp.total)))
    if ladder:
        c, t = ladder.get("cpp"), ladder.get("torch")
        rows.append(("ladder ms/step", c, t, fmt_ratio(t, c)))
        rows.append(("ladder - sum", None if c is None else c - cpp.total, None if t is None else t - torch.total, ""))
    return rows


def print_table(cpp, torch, ladder, out):
    out.write(f"stage {cpp.name} beside PyTorch {torch.label}, ms per step, B={cpp.batch} T={cpp.seq}\n\n")
    out.write(f"{'':<18}{'C++':>10}{'PyTorch':>10}{'PyTorch/C++':>13}\n")
    for label, c, t, r in table_rows(cpp, torch, ladder):
        out.write(f"{label:<18}{fmt_ms(c):>10}{fmt_ms(t):>10}{r:>13}".rstrip() + "\n")


def page(cpp, torch, ladder, ladder_note, problems, svg_name, args):
    L = []
    emit = L.append
    title = f"Stage {cpp.number} beside PyTorch ({torch.label}): where one training step's time goes"
    emit(f"# {title}\n")
    emit(f"GPT-2 124M, B = {cpp.batch}, T = {cpp.seq}; C++: {cpp.gpu}, {cpp.date}; PyTorch "
         f"{torch.data.get('torch_version', '?')}: {torch.gpu}, {torch.date}.\n")
    emit("Written by `tests/bench/step_breakdown_vs_torch.py` from numbers a GPU printed; nothing here is "
         "edited by hand.\n")
    emit("| | C++ | PyTorch |")
    emit("|---|---|---|")
    emit(f"| what runs | stage {cpp.name} | the PyTorch reference, {torch.label} |")
    emit("| what is summed | each op's median in the kernel benchmark (timed alone, L2 emptied, "
         f"`--iters` runs) × the times one step runs it (`step_breakdown.py`) | the device time of every "
         f"kernel, copy and fill of one step under `torch.profiler`, after {torch.data.get('steps_before', '?')} "
         "warm-up steps (one sample, L2 as the step left it) |")
    emit(f"| from | `{os.path.relpath(os.path.abspath(cpp.path), os.path.dirname(os.path.abspath(args.out)))}` | "
         f"`{os.path.relpath(os.path.abspath(torch.path), os.path.dirname(os.path.abspath(args.out)))}` |")
    emit("")
    if svg_name:
        emit(f"![stage {cpp.number} beside PyTorch, ms per step by group]({svg_name})\n")

    emit("## Per group\n")
    emit("| group | C++ ms/step | PyTorch ms/step | PyTorch ÷ C++ |")
    emit("|---|---:|---:|---:|")
    for label, c, t, r in table_rows(cpp, torch, ladder):
        strong = label in ("sum", "ladder ms/step")
        cells = [label, fmt_ms(c), fmt_ms(t), r]
        emit("| " + " | ".join(f"**{x}**" if strong and x and x != "–" else x for x in cells) + " |")
    emit("")
    emit("PyTorch ÷ C++ above 1: the C++ stage spends less time there. `other` holds what only the PyTorch "
         "step runs (below, kernel by kernel). " + (
             "`ladder ms/step` is each side's median step time in the ladder of the same run; `ladder - sum` "
             "is what the kernels alone do not explain (launch gaps, host work, and for C++ the difference "
             "between ops timed alone and ops in a step)." if ladder else
             f"Ladder: {ladder_note}." if ladder_note else
             "No ladder was given (`--ladder`): the sums are kernel time only."))
    emit("")
    t = torch.totals
    emit(f"The PyTorch step under the profiler: {fmt_ms(torch.data.get('profiled_step_wall_ms'))} ms of wall "
         f"time (the same run's steps before it: median {fmt_ms(torch.data.get('step_ms_median'))} ms), "
         f"{t.get('events', 0)} GPU events, {fmt_ms(t.get('gpu_ms'))} ms of device time, the GPU busy "
         f"{fmt_ms(t.get('gpu_busy_ms'))} ms (overlaps counted once). By part of the step (host time, and the "
         "device time of what it launched):\n")
    emit("| part | host ms | GPU ms | GPU events |")
    emit("|---|---:|---:|---:|")
    for name in ("data", "forward", "backward", "optimizer"):
        p = torch.phases.get(name)
        if p:
            emit(f"| {name} | {fmt_ms(p.get('wall_ms'))} | {fmt_ms(p.get('gpu_ms'))} | {p.get('events', 0)} |")
    if t.get("no_phase"):
        emit(f"| (no part found) | | | {t['no_phase']} |")
    emit("")

    if problems:
        emit("## Incomplete\n")
        for p in problems:
            emit(f"- {p}")
        emit("")

    emit("## The PyTorch kernels, by group\n")
    emit("Each kernel with the rule that put it there (§ How the PyTorch kernels are grouped); every group's "
         f"{args.top} largest, and every kernel of `other`. Names without `void`, `at::native::`, "
         "`(anonymous namespace)::` and their argument list, long ones without their middle; "
         f"`{os.path.basename(torch.path)}` has them whole.\n")
    for key, label, _ in ALL_GROUPS:
        cells = torch.by_group.get(key)
        if not cells:
            continue
        items = sorted(cells.items(), key=lambda kv: (-kv[1][0], kv[0][0]))
        emit(f"### {label}: {torch.groups[key]:.2f} ms, {torch.launches[key]} launches\n")
        emit("| kernel | launches | ms | rule |")
        emit("|---|---:|---:|---|")
        shown = items if key == "other" else items[: args.top]
        for (name, how), (ms, n) in shown:
            emit(f"| {md_cell(name)} | {n} | {ms:.3f} | {how} |")
        rest = items[len(shown):]
        if rest:
            emit(f"| and {len(rest)} more | {sum(n for _, (_, n) in rest)} | "
                 f"{sum(ms for _, (ms, _) in rest):.3f} | |")
        emit("")

    emit(f"## The C++ rows (stage {cpp.name})\n")
    emit("As `step_breakdown.py --detail` prints them: each row's median, the times one step runs it, their "
         "product.\n")
    emit("| row | median ms | × | ms/step | group |")
    emit("|---|---:|---:|---:|---|")
    for name, ms, n, total, group, note in cpp.counted:
        emit(f"| {name} | {ms:.4f} | {n} | {total:.2f} | {SHORT[group]}{' (fused)' if note else ''} |")
    for name, why in cpp.not_counted:
        emit(f"| {name} | | – | | not counted: {why} |")
    emit("")

    emit("## How the PyTorch kernels are grouped\n")
    emit("Every launch is tried against these rules in order, and the first that matches decides. "
         "`phase` reads the part of the step that launched it (the profiled step marks data, forward, backward "
         "and optimizer with `torch.profiler.record_function`); `ops` reads the op names in an Inductor kernel's "
         "name (`triton_<kind>_fused_<ops>_<n>`); `name` reads a library kernel's whole name. Then "
         f"{LM_HEAD_NOTE}. What no rule takes is `other`.\n")
    emit("| # | group | reads | pattern | what it catches |")
    emit("|---:|---|---|---|---|")
    for i, r in enumerate(RULES, 1):
        emit(f"| {i} | {SHORT[r.group]} | {r.on} | `{r.pattern.replace('|', chr(92) + '|')}` | {r.catches} |")
    emit("")
    emit("What this cannot tell apart, and how it errs:\n")
    emit("- Inductor fuses across op boundaries and names a kernel after all the aten ops it was made from, "
         "**sorted alphabetically**: the first op of a name is the first in spelling, not in the kernel "
         "(`triton_per_fused_add_native_layer_norm_3` adds the residual, then normalises). A fused kernel "
         "is attributed to the group of its highest-priority op (the order of the `ops` rules), so its "
         "other ops' time goes with it: the residual add into LayerNorm (as stage 05 counts its "
         "ResidualLayerNorm), the fc bias add into GELU (where stage 05 counts its fused fc+GELU as a "
         "matmul).")
    emit("- Inductor's partitioner recomputes cheap forward ops in the backward (LayerNorm statistics, the "
         "GELU's input) inside backward kernels: that time is in the backward's group, as in stage 05.")
    emit("- Library matrix products cannot be told apart by name; the LM head is found by its launching op's "
         "shapes. Without shapes (a profile made without `record_shapes`) every product counts as a block "
         "matmul.")
    emit("- Autocast's casts of the fp32 weights to bf16, made in the forward and fused by Inductor "
         "(`triton_poi_fused__to_copy_*`), are `other`; stage 05's optimizer writes its bf16 copy inside "
         "its update, in the optimizer group. Layout copies (`clone`, `permute`) are `other` too.")
    emit("- The two columns are different measurements: C++ per-op medians, each op alone with the L2 "
         "emptied; PyTorch one step as it ran (warm L2, one sample, under the profiler). Compare groups "
         "by their size, not to the last decimal.")
    emit("")
    emit("## How this page was made\n")
    here = os.path.dirname(os.path.abspath(args.out))

    def rel(path):
        return os.path.relpath(os.path.abspath(path), here)

    emit("In this page's directory (`REPO` the repository):\n")
    emit("```sh")
    emit(f"python3 $REPO/tests/bench/step_breakdown_vs_torch.py --kernels {rel(cpp.path)} --profile {rel(torch.path)} "
         f"--out {rel(args.out)}" + (f" --svg {rel(args.svg)}" if args.svg else "")
         + (f" --ladder {rel(args.ladder)}" if args.ladder else "") + f" --batch {cpp.batch}")
    emit("```\n")
    emit("The profile comes from the ladder's PyTorch entry with one more step under the profiler "
         "(`ladder.py --stages none --torch pad --profile-step PATH`: `gpt2_reference.py --profile-step`); "
         "the GPU check runs both in its kernels phase and again with the ladder's ms/step in its ladder phase "
         "(tests/bench/README.md).")
    return "\n".join(L) + "\n"


def draw(cpp, torch, ladder, problems, path):
    bars = [(f"stage {cpp.number} (C++)", cpp.short, cpp.groups, ladder.get("cpp") if ladder else None),
            ("PyTorch", torch.short, torch.groups, ladder.get("torch") if ladder else None)]
    left, right, top, bar_h, gap = 150, 140, 92, 40, 30
    legend_rows = (len(ALL_GROUPS) + 1) // 2
    notes = int(bool(ladder)) + int(bool(problems))
    W = 1000
    ph = len(bars) * (bar_h + gap)
    H = top + ph + 66 + legend_rows * 20 + 20 * notes + 16
    pw = W - left - right
    svg = Svg(W, H)
    svg.text(24, 28, f"Stage {cpp.number} beside PyTorch: where one training step's time goes (ms; shorter is "
             "faster)", size=17, weight="bold")
    svg.text(24, 48, f"GPT-2 124M B={cpp.batch} T={cpp.seq}, {cpp.gpu}, {cpp.date}; PyTorch "
             f"{torch.data.get('torch_version', '?')}, {torch.label}", size=12, colour="#555")
    svg.text(24, 66, "C++: each op's median (timed alone) × the times one step runs it; PyTorch: the kernels of "
             "one profiled step (torch.profiler), grouped alike", size=12, colour="#555")
    most = max([sum(g.values()) for _, _, g, _ in bars] + [m for *_, m in bars if m] + [1.0])
    ticks, step = nice_ticks(0, most * 1.02, target=8)

    def X(ms):
        return left + ms / ticks[-1] * pw

    for t in ticks:
        svg.line(X(t), top - 6, X(t), top + ph, colour="#e3e3e3")
        svg.line(X(t), top + ph, X(t), top + ph + 5)
        svg.text(X(t), top + ph + 20, fmt_tick(t, step), anchor="middle")
    svg.line(left, top + ph, left + pw, top + ph)
    svg.text(left + pw / 2, top + ph + 40, "milliseconds per training step", size=13, anchor="middle")
    for i, (name, sub, groups, measured) in enumerate(bars):
        y = top + gap / 2 + i * (bar_h + gap)
        svg.text(left - 12, y + bar_h / 2 - 2, name, size=13, anchor="end", weight="bold")
        svg.text(left - 12, y + bar_h / 2 + 13, sub if len(sub) <= 22 else sub[:21] + "…", size=11, anchor="end",
                 colour="#444")
        draw_bar(svg, X, y, bar_h, ALL_GROUPS, groups)
        total = sum(groups.values())
        svg.text(X(max(total, measured or 0)) + 8, y + bar_h / 2 + 4, f"sum {total:.1f} ms", size=12,
                 weight="bold")
        draw_ladder_mark(svg, X, y, bar_h, measured)
    foot = draw_legend(svg, W, top + ph + 66, legend_rows, [(label, colour) for _, label, colour in ALL_GROUPS],
                       "the ladder's measured ms/step of each side (median of whole steps, same run)" if ladder else None)
    if problems:
        svg.text(24, foot, "incomplete: " + "; ".join(problems)[:140], size=12, colour="#b00")
    svg.write(path)


# ----------------------------------------------------------------------------------------------


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def read(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def main(argv=None):
    p = argparse.ArgumentParser(
        prog=PROG,
        description="One C++ stage's training step (the kernel benchmark's JSON, summed as step_breakdown.py "
                    "sums it) beside one profiled step of the PyTorch reference (gpt2_reference.py "
                    "--profile-step), in the same groups: a Markdown page, an SVG and a table on stdout.",
        epilog="Exit status: 0 written and complete; 1 written, but incomplete (C++ rows unknown or missing, "
               "different GPUs, a ladder that cannot be compared); 2 bad usage, unreadable input, or inputs that "
               "cannot be compared. See tests/bench/README.md.")
    p.add_argument("--kernels", required=True, metavar="STAGE.json", help="bench_stageNN --json of the C++ stage")
    p.add_argument("--profile", required=True, metavar="PROFILE.json",
                   help="gpt2_reference.py --profile-step's output: one PyTorch step's kernels")
    p.add_argument("--out", required=True, metavar="PAGE.md", help="the page to write")
    p.add_argument("--svg", metavar="FIGURE.svg", help="also draw the two bars (the page links it by its file name)")
    p.add_argument("--ladder", metavar="results.json", help="the ladder's results.json: both sides' measured ms/step")
    p.add_argument("--batch", type=int, default=16, help="the batch size whose C++ rows are used [16]")
    p.add_argument("--layers", type=int, default=N_LAYER, help=f"blocks of the model [{N_LAYER}, GPT-2 124M]")
    p.add_argument("--top", type=int, default=8, help="kernels listed per group on the page, 'other' all [8]")
    args = p.parse_args(argv)
    if args.batch < 1 or args.layers < 1 or args.top < 1:
        p.error("--batch, --layers and --top must be positive")

    inputs = {}
    for what, path in (("kernels", args.kernels), ("profile", args.profile)):
        try:
            inputs[what] = read(path)
        except (OSError, ValueError) as exc:
            return fail(f"cannot read {path}: {exc}")
    cpp = Stage(args.kernels, inputs["kernels"], args.batch, args.layers)
    if cpp.rows_at_batch == 0 or not cpp.counted:
        return fail(f"{args.kernels} has no measured rows at B={args.batch}")
    torch = TorchStep(args.profile, inputs["profile"])
    if not (inputs["profile"].get("kernels")):
        return fail(f"{args.profile} lists no GPU kernels (a profile made on the CPU, or not by "
                    "gpt2_reference.py --profile-step)")
    model = inputs["kernels"].get("model") or {}
    mismatch = [f"{what} {a} and {b}" for what, a, b in (
        ("B", cpp.batch, torch.batch), ("T", cpp.seq, torch.seq), ("layers", args.layers, torch.layers),
        ("C", model.get("C"), torch.C), ("heads", model.get("NH"), torch.H)) if a is not None and a != b]
    if mismatch:
        return fail("the two sides ran different workloads (C++ and PyTorch: " + ", ".join(mismatch) + ")")

    problems = list(cpp.problems)
    if cpp.gpu != torch.gpu:
        problems.append(f"the C++ side ran on {cpp.gpu}, the PyTorch side on {torch.gpu}")
    ladder, ladder_note = None, None
    if args.ladder:
        try:
            measured, ladder_note = read_ladder(args.ladder, args.batch, cpp.seq, {cpp.gpu, torch.gpu})
            torch_ms, _ = read_ladder_torch(args.ladder, cpp.number)
        except (OSError, ValueError) as exc:
            return fail(f"cannot read {args.ladder}: {exc}")
        if ladder_note is None:
            ladder = {"cpp": measured.get(cpp.number), "torch": torch_ms}
            missing = [side for side, v in ladder.items() if v is None]
            if missing:
                ladder_note = f"the ladder has no finished {' or '.join(missing)} entry of stage {cpp.number}"
        if ladder_note:
            problems.append(f"ladder: {ladder_note}")

    svg_name = None
    if args.svg:
        draw(cpp, torch, ladder, problems, args.svg)
        svg_name = os.path.relpath(os.path.abspath(args.svg), os.path.dirname(os.path.abspath(args.out)))
    text = page(cpp, torch, ladder, ladder_note, problems, svg_name, args)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, args.out)

    for problem in problems:
        print(f"{PROG}: warning: {problem}", file=sys.stderr)
    print_table(cpp, torch, ladder, sys.stdout)
    other = sorted(torch.by_group.get("other", {}).items(), key=lambda kv: -kv[1][0])
    if other:
        print(f"\nother ({torch.groups['other']:.2f} ms): " + ", ".join(f"{name[:60]} {ms:.2f}" for (name, _), (ms, _)
                                                                      in other[:5])
              + (f", and {len(other) - 5} more" if len(other) > 5 else ""))
    print(f"\nwrote {args.out}" + (f" and {args.svg}" if args.svg else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
