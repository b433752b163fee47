#!/usr/bin/env python3
"""One C++ stage's training step beside its PyTorch counterpart's, group by group: a page and a figure.

usage: step_breakdown_vs_torch.py --kernels STAGE.json --profile PROFILE.json --out PAGE.md
                                  [--svg FIGURE.svg] [--ladder results.json] [--batch 16] [--layers 12]
                                  [--flag-over 1.25]

The C++ side is the kernel benchmark's JSON of one stage (`bench_stageNN --json`), summed exactly
as step_breakdown.py sums it (its class Stage, imported): each op's median times the number of
times one training step runs it, in step_breakdown.py's GROUPS (block matmuls, LM head, attention,
LayerNorm, GELU + residual add, classifier, embedding, optimizer).

The PyTorch side is one training step of the PyTorch reference under torch.profiler
(`gpt2_reference.py --profile-step`, tests/reference/profile_trace.py): the device time of every
kernel, copy and fill the step ran, each put into the same groups by the rules of RULES below,
and what no rule claims into a ninth group, "other", listed kernel by kernel on the page. Two
uses: stage 05 beside compiled PyTorch (the GPU check profiles the ladder's "compile + vocab
padded" entry, `ladder.py --torch pad --profile-step PATH`), and stages 00-03 each beside its
eager counterpart (`--torch fp32`, `tf32`, `bf16`, `sdpa`), op group by op group: DESIGN.md §6
holds stage 00 to kernels "as good as PyTorch's", and the table flags every group where the C++
stage takes more than --flag-over (1.25) times PyTorch's time.

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
  4. any other kernel, copy or fill (eager PyTorch's own: ATen's elementwise, softmax, LayerNorm,
     embedding and loss kernels) by the ATen op that launched it, which the profile records per
     call (the innermost op: `aten::native_layer_norm`, `aten::_softmax`, `aten::copy_`, ...),
     and for the ops that run everywhere (copies, fills, adds, sums) by that op's input shapes:
     a 4-dimensional tensor is the attention's heads, a last dimension of V the logits, and so on;
  5. a matrix product launched by a batched product (`aten::bmm`: the manual attention's q·kᵀ and
     att·v) is attention; one whose launching op has a dimension of the vocabulary's size (V or
     the padded Vp, from the profile's input shapes) is the LM head, not a block matmul.

What the two sides measure is not the same: C++, per-op medians, each op timed alone with the L2
cache emptied; PyTorch, the kernels of one real step (warm L2, one sample, under the profiler).
Neither counts launch gaps or host work: --ladder sets both sides' measured ms/step beside the
sums.

Output: the page (--out, Markdown: the table of groups with PyTorch ÷ C++ and C++ ÷ PyTorch, the
groups over --flag-over marked, the figure, each group's PyTorch kernels, the C++ rows, the rules)
and the figure (--svg: two stacked bars, step_breakdown.py's colours); the table also goes to stdout.

Exit status: 0 the page is written and complete; 1 written, but incomplete (the C++ stage lacks a
row the step needs or has one step_breakdown.py does not know, the two sides ran on different
GPUs, or the ladder could not be compared); 2 bad usage, an unreadable input, or inputs that
cannot be compared (another batch, sequence length or model, a profile without GPU kernels).
A group over --flag-over is a finding, not an error: it does not change the exit status.

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

from ladder import TORCH_CONFIGS  # noqa: E402
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
    name (triton_<kind>_fused_<ops>_<n>); "name" a library kernel's whole name; "op" the ATen op
    that launched a kernel, copy or fill that is not Inductor's. An "op" rule can ask more: the
    part of the step (`phase`, a pattern) and the op's input shapes (`shape`, a key of SHAPES)."""

    def __init__(self, group, on, pattern, catches, phase=None, shape=None):
        self.group, self.on, self.pattern, self.catches = group, on, pattern, catches
        self.phase, self.shape = phase, shape
        self.regex = re.compile(pattern, re.IGNORECASE)


# What an "op" rule can ask of the launching op's input shapes (profile_trace.py keeps them: the
# profiler's "Input Dims"). Eager PyTorch runs copies, fills, adds and sums all over the step; their
# shapes say where: in this model only attention has 4-dimensional tensors, only the logits a last
# dimension of V. Each test gets the tensors' shapes and the sizes {vocab, B, T} of the profile.
SHAPES = {
    "heads": ("an input of 4 dimensions, B·H·T·Q, B·T·H·Q or B·H·T·T, which only attention has",
              lambda ts, z: any(len(t) == 4 for t in ts)),
    "logits": ("an input whose last dimension is V or Vp",
               lambda ts, z: any(len(t) >= 2 and t[-1] in z["vocab"] for t in ts)),
    "table": ("a 2-dimensional input of V or Vp rows",
              lambda ts, z: any(len(t) == 2 and t[0] in z["vocab"] for t in ts)),
    "positions": ("a T × C input beside a 3-dimensional one",
                  lambda ts, z: any(len(t) == 2 and t[0] == z["T"] for t in ts) and any(len(t) == 3 for t in ts)),
    "B×T×C": ("a 3-dimensional input of B × T rows",
              lambda ts, z: any(len(t) == 3 and t[:2] == [z["B"], z["T"]] for t in ts)),
    "B·T rows": ("a 2-dimensional input of B·T rows",
                 lambda ts, z: any(len(t) == 2 and z["B"] and z["T"] and t[0] == z["B"] * z["T"] for t in ts)),
}

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
         "cuBLAS, cuBLASLt and CUTLASS matrix products (sm90_xmma_gemm_*, ampere_sgemm_*, nvjet_*, cutlass*, "
         "splitKreduce_*)"),
    # Eager PyTorch: ATen's own kernels, by the op that launched them. After the library names, so
    # that a compiled step's cuBLAS and flash kernels keep the rules above; the ops of a compiled
    # step's Inductor kernels are its graph's (CompiledFunction), which no rule here reads.
    Rule("classifier", "op", r"^aten::(?:_?log_softmax|_log_softmax_backward_data|nll_loss\w*|cross_entropy_loss)$",
         "log-softmax, NLL and their backward (cunn_SoftMaxForward/Backward with the LogSoftMax epilogue, "
         "nll_loss_forward_reduce_cuda_kernel_2d, nll_loss_backward_reduce_cuda_kernel_2d)"),
    Rule("attention", "op", r"^aten::(?:_?softmax|_softmax_backward_data|masked_fill_?|bitwise_not|cat|"
         r"_?scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|_cudnn_attention\w*)$",
         "the manual attention's softmax (softmax_warp_forward/backward, cunn_SoftMax*), its causal mask "
         "(masked_fill, the mask's ~), the qkv split's backward (cat: dq, dk, dv into one gradient, as stage "
         "00's copy_heads), an SDPA op's own kernels"),
    Rule("layernorm", "op", r"^aten::(?:native_layer_norm|native_layer_norm_backward|layer_norm)$",
         "vectorized_layer_norm_kernel, layer_norm_grad_input_kernel, GammaBetaBackwardCUDAKernel"),
    Rule("embedding", "op", r"^aten::(?:embedding\w*|index_select|arange)$",
         "the tables' lookup (indexSelectLargeIndex, indexSelectSmallIndex), the positions (arange), and "
         "embedding_dense_backward's kernels (embedding_backward_feature_kernel, its sort and segment sums)"),
    Rule("gelu_residual", "op", r"^aten::gelu(?:_backward)?$",
         "GELU forward and backward (GeluCUDAKernelImpl, GeluBackwardCUDAKernelImpl)"),
    Rule("matmul", "op", r"^aten::(?:addmm|mm|bmm|baddbmm|matmul|linear)$",
         "a matrix product no library rule knows by name (the attention's and the LM head's told apart as "
         "rule 11's are, below)"),
    Rule("attention", "op", r"^aten::\w+", "the attention's layout copies (q, k, v into heads and back, "
         "as stage 00's copy_heads), its scaling, masking and casts, the mask's "
         "clone in masked_fill, and their backward", shape="heads"),
    Rule("classifier", "op", r"^aten::\w+", "the logits' casts to fp32 and of their gradient back (bf16), "
         "their slice to V (vocab padded), the zeroed gradient nll_loss_backward fills", shape="logits"),
    Rule("embedding", "op", r"^aten::(?:add_?|fill_|zero_)$", "the token embedding's gradient: zeroed by "
         "embedding_dense_backward, and its part added to the LM head's (tied weights)", shape="table"),
    Rule("embedding", "op", r"^aten::add$", "token + position embedding (wte(idx) + wpe(pos))",
         shape="positions"),
    Rule("embedding", "op", r"^aten::sum$", "the position embedding's gradient, summed over the batch",
         shape="B×T×C"),
    Rule("matmul", "op", r"^aten::sum$", "a bias's gradient (reduce_kernel), which stage 00 computes in its "
         "Matmul backward", shape="B·T rows"),
    Rule("gelu_residual", "op", r"^aten::add$", "the residual adds (x + attn, x + mlp)", phase=r"^forward$"),
    Rule("layernorm", "op", r"^aten::add_?$", "autograd's sum of the residual stream's two gradients, which "
         "stage 00's LayerNorm backward does as it writes (dinp +=)", phase=r"^backward$"),
]
BMM_NOTE = ("a matrix product launched by a batched product (aten::bmm, aten::baddbmm: the manual attention's "
            "q·kᵀ and att·v, forward and backward) is attention")
BMM = re.compile(r"^aten::(?:bmm|baddbmm)$")
LM_HEAD_NOTE = ("a matrix product whose launching op has a dimension of V or Vp (its input shapes) is the LM "
                "head, not a block matmul")
INDUCTOR = re.compile(r"^triton_[a-z0-9]+_(?:fused_)?(?P<ops>.*?)(?:_\d+)?$")


def classify(name, kind, call, vocab, sizes=None):
    """(group, how) of one call of a kernel: call has the phase, op and input dims that launched it;
    sizes the profile's B and T (for SHAPES; without them, the rules that need them match nothing)."""
    inductor = INDUCTOR.match(name)
    op, phase = call.get("op") or "", call.get("phase") or ""
    z = {"vocab": vocab, "B": None, "T": None}
    z.update(sizes or {})
    ts = shapes(call.get("input_dims"))
    group, how = None, None
    for number, rule in enumerate(RULES, 1):
        if rule.on == "phase":
            subject = phase
        elif rule.on == "ops":
            if not inductor:
                continue
            subject = inductor.group("ops")
        elif rule.on == "op":
            # An Inductor kernel's op is its graph's, never an ATen op: the "ops" rules had it.
            if inductor or not op:
                continue
            if rule.phase and not re.search(rule.phase, phase):
                continue
            if rule.shape and not SHAPES[rule.shape][1](ts, z):
                continue
            subject = op
        else:
            if inductor or kind != "kernel":
                continue
            subject = name
        match = rule.regex.search(subject)
        if match:
            how = f"rule {number}, {rule.on}: {match.group(0).strip('_') or subject}"
            if rule.on == "op":  # the op whole (aten::copy_ is not aten::copy), and what else it asked
                how = f"rule {number}, op: {op}" + (f" in the {phase}" if rule.phase else "") + (
                    f", shapes: {rule.shape}" if rule.shape else "")
            group = rule.group
            break
    if group is None:
        return "other", ("no rule: an Inductor kernel of other ops" if inductor else
                         f"no rule: a {kind}" if kind != "kernel" else "no rule")
    if group == "matmul" and BMM.match(op):
        return "attention", how + f"; launched by {op}"
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


def shapes(dims):
    """The tensors' shapes in an op's "Input Dims": one list of ints per tensor argument, a tensor
    list's one by one; scalars and other arguments ([]) left out."""
    out = []
    for d in dims if isinstance(dims, list) else []:
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            out.append(d)
        elif isinstance(d, list):
            out.extend(shapes(d))
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
        self.compiled = bool(settings.get("compile"))
        self.label = torch_label(settings, data.get("sdpa_backend"))
        short = [x for x, on in (("compile", self.compiled),
                                 ("vocab padded", (settings.get("vocab_pad") or 1) > 1)) if on]
        self.short = " + ".join(short) or (
            f"{settings.get('precision') or '?'}{' + SDPA' if settings.get('attention') == 'sdpa' else ''} eager")
        # The ladder's --torch entry these settings are (its key and the C++ stage it pairs with).
        self.key, self.stage = ladder_entry(settings)
        self.totals = data.get("totals") or {}
        self.phases = data.get("phases") or {}
        self.groups = {key: 0.0 for key, _, _ in ALL_GROUPS}
        self.launches = {key: 0 for key, _, _ in ALL_GROUPS}
        self.by_group = {}  # group: {(name, how): [ms, count]}
        vocab = {v for v in (self.V, self.Vp) if isinstance(v, int)}
        sizes = {"B": self.batch, "T": self.seq}
        for k in data.get("kernels") or []:
            calls = k.get("calls") or [{"phase": None, "op": None, "input_dims": None, "ms": k.get("ms", 0.0),
                                        "count": k.get("count", 0)}]
            for c in calls:
                group, how = classify(k.get("name", ""), k.get("kind", "kernel"), c, vocab, sizes)
                ms = float(c.get("ms") or 0.0)
                self.groups[group] += ms
                self.launches[group] += int(c.get("count") or 0)
                cell = self.by_group.setdefault(group, {}).setdefault((k.get("name", ""), how), [0.0, 0])
                cell[0] += ms
                cell[1] += int(c.get("count") or 0)

    @property
    def total(self):
        return sum(self.groups.values())


def torch_label(settings, backend=None):
    """'bf16 + SDPA + torch.compile + vocab padded to 50304', 'fp32 + manual attention, eager' from
    the reference's settings (and the SDPA backend it recorded as used)."""
    parts = [settings.get("precision") or "?"]
    if settings.get("attention") == "sdpa":
        parts.append("SDPA" + (f" ({backend})" if isinstance(backend, str) and backend != "unpinned" else ""))
    elif settings.get("attention") == "manual":
        parts.append("manual attention")  # the T x T scores: stages 00-02's attention
    if settings.get("compile"):
        mode = settings.get("compile_mode")
        parts.append("torch.compile" + (f" ({mode})" if mode and mode != "default" else ""))
    if settings.get("fused_adamw"):
        parts.append("fused AdamW")
    if (settings.get("vocab_pad") or 1) > 1:
        parts.append(f"vocab padded to {settings.get('padded_vocab')}")
    return " + ".join(parts) + ("" if settings.get("compile") else ", eager")


def ladder_entry(settings):
    """(key, stage) of the configuration in ladder.py's TORCH_CONFIGS whose options give these
    settings (the first, in its order), or (None, None). A setting the profile does not record
    matches any value."""
    for key, stage, _, options in TORCH_CONFIGS:
        want = {"precision": "fp32", "attention": "manual", "sdpa_backend": None, "compile": False,
                "vocab_pad": 1, "inductor_shape_padding": "default", "fused_adamw": False}
        i = 0
        while i < len(options):
            name = options[i][2:].replace("-", "_")
            if name in ("compile", "fused_adamw"):  # the two flags without a value
                want[name], i = True, i + 1
            else:
                want[name], i = (int(options[i + 1]) if name == "vocab_pad" else options[i + 1]), i + 2
        if all(settings[k] == v for k, v in want.items() if k in settings):
            return key, stage
    return None, None


def read_ladder_torch(path, stage, key=None):
    """The ladder's PyTorch entry: the one of the profile's configuration (`key`, as ladder.py names
    it), else the first of `stage`; (its ms/step, its label), or (None, None)."""
    with open(path, encoding="utf-8") as f:
        results = json.load(f)
    done = [e for e in results.get("entries", []) if e.get("kind") == "torch" and e.get("status") == "ok"
            and isinstance(e.get("median_ms"), (int, float))]
    mine = [e for e in done if key and e.get("key") == f"torch_{key}"] or [e for e in done if e.get("stage") == stage]
    return (mine[0]["median_ms"], mine[0].get("label") or mine[0].get("key")) if mine else (None, None)


# ----------------------------------------------------------------------------------------------
# Output


def fmt_ms(v):
    return "–" if v is None else f"{v:.2f}"


def fmt_ratio(a, b):
    """a ÷ b as '1.23×' ('' where either is missing or zero)."""
    return f"{a / b:.2f}×" if a and b else ""


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


def table_rows(cpp, torch, ladder, flag_over):
    """[(label, C++ ms, PyTorch ms, PyTorch ÷ C++, C++ ÷ PyTorch, over)] of the table, on stdout and on
    the page; over: a group (not other, not a sum) where C++ takes more than flag_over × PyTorch's time."""
    rows = []
    for key, _, _ in ALL_GROUPS:
        c = cpp.groups.get(key) if key != "other" else None
        t = torch.groups[key]
        rows.append((SHORT[key], c, t, fmt_ratio(t, c), fmt_ratio(c, t), bool(c and t and c > flag_over * t)))
    rows.append(("sum", cpp.total, torch.total, fmt_ratio(torch.total, cpp.total), fmt_ratio(cpp.total, torch.total),
                 False))
    if ladder:
        c, t = ladder.get("cpp"), ladder.get("torch")
        rows.append(("ladder ms/step", c, t, fmt_ratio(t, c), fmt_ratio(c, t), False))
        rows.append(("ladder - sum", None if c is None else c - cpp.total, None if t is None else t - torch.total,
                     "", "", False))
    return rows


def print_table(cpp, torch, ladder, flag_over, out):
    out.write(f"stage {cpp.name} beside PyTorch {torch.label}, ms per step, B={cpp.batch} T={cpp.seq}\n\n")
    out.write(f"{'':<18}{'C++':>10}{'PyTorch':>10}{'PyTorch/C++':>13}{'C++/PyTorch':>13}\n")
    for label, c, t, speed, times, over in table_rows(cpp, torch, ladder, flag_over):
        out.write((f"{label:<18}{fmt_ms(c):>10}{fmt_ms(t):>10}{speed:>13}{times:>13}"
                   + (f"  over {flag_over:g}×" if over else "")).rstrip() + "\n")


def counterpart(stage):
    """The --torch key of ladder.py's counterpart of a C++ stage (the first of TORCH_CONFIGS)."""
    return next((key for key, s, _, _ in TORCH_CONFIGS if s == stage), None)


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
    entry = ""
    if torch.key:  # which ladder entry the profile is, and the stage's own where that is another
        mine = counterpart(cpp.number)
        entry = (f" (the ladder's `--torch {torch.key}`"
                 + (f", stage {torch.stage}'s counterpart" if torch.stage.isdigit() else "")
                 + (f"; stage {cpp.number}'s is `--torch {mine}`" if mine and torch.stage != cpp.number else "") + ")")
    emit(f"| what runs | stage {cpp.name} | the PyTorch reference, {torch.label}{entry} |")
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
    emit("| group | C++ ms/step | PyTorch ms/step | PyTorch ÷ C++ | C++ ÷ PyTorch (× PyTorch's time) |")
    emit("|---|---:|---:|---:|---:|")
    rows = table_rows(cpp, torch, ladder, args.flag_over)
    for label, c, t, speed, times, over in rows:
        strong = label in ("sum", "ladder ms/step")
        cells = [label, fmt_ms(c), fmt_ms(t), speed, times]
        cells = [f"**{x}**" if strong and x and x != "–" else x for x in cells]
        if over:
            cells[4] = f"**{times}**, over {args.flag_over:g}×"
        emit("| " + " | ".join(cells) + " |")
    emit("")
    over = [f"{label} ({times})" for label, _, _, _, times, o in rows if o]
    emit("PyTorch ÷ C++ above 1: the C++ stage spends less time there (a speed-up, as the ladder counts it). "
         "C++ ÷ PyTorch is the other way round, the C++ stage's time as a multiple of PyTorch's: DESIGN.md §6 "
         f"holds stage 00's kernels to eager PyTorch's for each op, and a group over {args.flag_over:g}× "
         f"(`--flag-over`) is marked. " + (
             f"Over {args.flag_over:g}× here: {', '.join(over)}." if over else
             f"No group is over {args.flag_over:g}× here.") + " `other` holds what only the PyTorch "
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
         "name (`triton_<kind>_fused_<ops>_<n>`); `name` reads a library kernel's whole name; `op` reads the "
         "ATen op that launched any other kernel, copy or fill (the innermost op, as the profile records it), "
         "and some `op` rules also the part of the step or the op's input shapes. Then "
         f"{BMM_NOTE}, and {LM_HEAD_NOTE}. What no rule takes is `other`.\n")
    emit("| # | group | reads | pattern | what it catches |")
    emit("|---:|---|---|---|---|")
    for i, r in enumerate(RULES, 1):
        reads = r.on + (f", in the {r.phase.strip('^$')}" if r.phase else "") + (
            f", shapes: {r.shape}" if r.shape else "")
        catches = r.catches + (f" (shapes {r.shape}: {SHAPES[r.shape][0]})" if r.shape else "")
        emit(f"| {i} | {SHORT[r.group]} | {reads} | `{r.pattern.replace('|', chr(92) + '|')}` | {catches} |")
    emit("")
    emit("What this cannot tell apart, and how it errs:\n")
    known = bool(torch.data.get("settings"))  # without settings, both kinds of bullets
    compiled, eager = torch.compiled or not known, not torch.compiled or not known
    by_shape = [i for i, r in enumerate(RULES, 1) if r.on == "op" and (r.shape or r.phase)]
    if compiled:
        emit("- Inductor fuses across op boundaries and names a kernel after all the aten ops it was made from, "
             "**sorted alphabetically**: the first op of a name is the first in spelling, not in the kernel "
             "(`triton_per_fused_add_native_layer_norm_3` adds the residual, then normalises). A fused kernel "
             "is attributed to the group of its highest-priority op (the order of the `ops` rules), so its "
             "other ops' time goes with it: the residual add into LayerNorm (as stage 05 counts its "
             "ResidualLayerNorm), the fc bias add into GELU (where stage 05 counts its fused fc+GELU as a "
             "matmul).")
        emit("- Inductor's partitioner recomputes cheap forward ops in the backward (LayerNorm statistics, the "
             "GELU's input) inside backward kernels: that time is in the backward's group, as in stage 05.")
    if eager:
        emit("- Eager PyTorch runs one ATen op per kernel or few, and the profile knows the op that launched each: "
             "the innermost one (`aten::copy_`, not the `aten::reshape` or `aten::to` around it). Ops that run "
             "all over the step (copies, fills, adds, sums) are placed by their input shapes and the part of the "
             f"step (rules {by_shape[0]}-{by_shape[-1]}): 4-dimensional tensors are the attention's, a last "
             "dimension of V the logits', V rows the token embedding's gradient; an add in the forward is a "
             "residual add (the embedding's, with its T × C position table, excepted), in the backward autograd's "
             "sum of the residual stream's two gradients, which stage 00's LayerNorm backward does as it writes. "
             "A launch of such an op with other shapes is `other`: autocast's casts of weights and activations "
             "(bf16, stage 02's counterpart), the backward's seed (`ones_like`), a value read back (`.item()`).")
        emit("- The manual attention (the counterpart of stages 00-02) is about ten kernels a layer each way: "
             "the products (`aten::bmm`, with cuBLAS names), the scaling, the mask, the softmax, the copies of "
             "q, k, v into heads and of the output back. All are attention, as stage 00's Attention rows count "
             "its permutes, softmax and batched products.")
        emit("- A linear layer's bias is added inside its matmul where ATen uses cuBLASLt's bias epilogue; where "
             "it first copies the bias into the output instead, that copy's innermost op is `aten::copy_` and it "
             "lands in `other`, not the block matmuls.")
    emit("- Library matrix products cannot be told apart by name; the LM head is found by its launching op's "
         "shapes, the attention's by the op (`aten::bmm`). Without shapes (a profile made without "
         "`record_shapes`) every product but the attention's counts as a block matmul.")
    if compiled:
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
         + (f" --ladder {rel(args.ladder)}" if args.ladder else "") + f" --batch {cpp.batch}"
         + (f" --flag-over {args.flag_over:g}" if args.flag_over != 1.25 else ""))
    emit("```\n")
    emit("The profile comes from the ladder's PyTorch entry with one more step under the profiler "
         f"(`ladder.py --stages none --torch {torch.key or 'KEY'} --profile-step PATH`: `gpt2_reference.py "
         "--profile-step`); the GPU check makes stage 05's page in its kernels phase and again with the ladder's "
         "ms/step in its ladder phase, and tests/bench/README.md gives the commands of stages 00-03 beside their "
         "eager counterparts.")
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
    p.add_argument("--flag-over", type=float, default=1.25, metavar="X",
                   help="mark the groups where C++ takes more than X times PyTorch's time [1.25]")
    args = p.parse_args(argv)
    if args.batch < 1 or args.layers < 1 or args.top < 1 or not args.flag_over > 0:
        p.error("--batch, --layers, --top and --flag-over must be positive")

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
            torch_ms, _ = read_ladder_torch(args.ladder, cpp.number, torch.key)
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
    print_table(cpp, torch, ladder, args.flag_over, sys.stdout)
    other = sorted(torch.by_group.get("other", {}).items(), key=lambda kv: -kv[1][0])
    if other:
        print(f"\nother ({torch.groups['other']:.2f} ms): " + ", ".join(f"{name[:60]} {ms:.2f}" for (name, _), (ms, _)
                                                                      in other[:5])
              + (f", and {len(other) - 5} more" if len(other) > 5 else ""))
    print(f"\nwrote {args.out}" + (f" and {args.svg}" if args.svg else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
