"""The course's figures beyond chapter 03's kernel drawings: drawn by hand as SVG, like those of
figures.py, which imports this file, lists every figure in its docstring and checks them all.

Every number drawn is computed here, read from a committed results file (docs/results/), or
quoted from a chapter, and the comment beside it says which. Each draw function takes the
SVG's path and the repository root.
"""

import contextlib
import csv
import io
import json
import math
import re
import struct

from xml.sax.saxutils import escape

from plot import FONT, STAGE_COLOURS, Svg, fmt_si, wrap

from measured import runs as committed_runs  # docs/results/'s runs, as the measured tables read them

BLUE, ORANGE, RED, TEAL, GREEN, YELLOW, PURPLE, PINK, BROWN, GREY = STAGE_COLOURS
MUTED = "#555"
TEXT = "#333"

GIB = 1024 ** 3
MIB = 1024 ** 2


def defs(svg, hatches=()):
    """An arrowhead, and one hatch pattern per colour in `hatches` (id "hatch-RRGGBB"): the
    mark of a predicted bar."""
    patterns = "".join(
        f'<pattern id="hatch-{c[1:]}" width="7" height="7" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="7" height="7" fill="white"/>'
        f'<line x1="0" y1="0" x2="0" y2="7" stroke="{c}" stroke-width="2.5"/></pattern>' for c in hatches)
    svg.add('<defs>' + patterns +
            '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>')


def hatch(colour):
    return f"url(#hatch-{colour[1:]})"


def arrow(svg, x1, y1, x2, y2, colour="#444", width=1.5):
    svg.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
            f'stroke-width="{width}" marker-end="url(#arrow)"/>')


def lines(svg, x, y, texts, size=12, colour=TEXT, step=None):
    """Lines of text one under the other; returns the y after the last."""
    step = step or size + 6
    for t in texts:
        svg.text(x, y, t, size=size, colour=colour)
        y += step
    return y


def halo(svg, x, y, s, size=11, anchor="start", colour="#222", weight="normal"):
    """Text with a white outline under it, legible across grid and roof lines (roofline.py's halo_text)."""
    svg.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{colour}" stroke="white" stroke-width="3" stroke-linejoin="round" paint-order="stroke" '
            f'{FONT}>{escape(str(s))}</text>')


def title(svg, heading, subtitle):
    svg.text(24, 30, heading, size=18, weight="bold")
    svg.text(24, 50, subtitle, size=12, colour=MUTED)


def canvas(width, height, heading, subtitle, hatches=(), desc=None):
    """A figure's SVG with its definitions (defs) and its title; with `desc`, also an SVG <title>
    (the heading) and <desc> for screen readers and image viewers."""
    svg = Svg(width, height)
    if desc:
        svg.add(f"<title>{escape(heading)}</title><desc>{escape(desc)}</desc>")
    defs(svg, hatches)
    title(svg, heading, subtitle)
    return svg


# ----------------------------------------------------------------------------------------------
# Results read from the committed files (docs/results/README.md lists the runs).

STAGE_NAMES = ["fp32", "TF32", "bf16", "flash attention", "fused kernels", "vocab padding", "NCCL, one GPU"]


def ladder_rows(root):
    """({(gpu, kind, stage): row}, {gpu: date}): every entry that finished in the latest committed
    run of each GPU model (H100, H200: the word after "NVIDIA"), from its ladders' results.csv
    (docs/results/<run>/ladder*/results.csv). A new results directory changes the figures that
    read these by regeneration alone."""
    latest = {}  # gpu -> (date, run directory)
    for name in sorted((root / "docs" / "results").glob("*/ladder*/results.csv")):
        with open(name, encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f):
                if row["status"] == "ok" and row["kind"] == "cpp":
                    gpu = row["gpu"].split()[1]
                    latest[gpu] = max(latest.get(gpu, ("", "")), (row["date"], name.parent.parent.name))
    rows, dates = {}, {}
    for gpu, (date, run) in latest.items():
        dates[gpu] = date[:10]
        for name in sorted((root / "docs" / "results" / run).glob("ladder*/results.csv")):
            with open(name, encoding="utf-8", newline="") as f:
                for row in csv.DictReader(f):
                    if row["status"] == "ok" and row["gpu"].split()[1] == gpu:
                        rows[(gpu, row["kind"], row["stage"])] = row
    return rows, dates


# ----------------------------------------------------------------------------------------------
# online_softmax.svg (chapter 03, "The online softmax")

# One query row: scores (already scaled by 1/sqrt(HS)) and one column of v, in 4 tiles of 4 keys.
# Chosen so that the maximum grows at tiles 0, 2 and 3 and stays put at tile 1.
SOFTMAX_SCORES = [[0.5, 1.2, -0.3, 0.8], [0.4, -1.0, 0.9, 0.1], [2.1, 0.3, 1.5, -0.6], [1.0, 2.6, 0.2, 1.9]]
SOFTMAX_VALUES = [[1.0, -0.5, 2.0, 0.3], [0.7, 1.5, -1.2, 0.4], [-0.8, 0.6, 1.1, 2.2], [0.9, -1.4, 0.5, 1.3]]


def online_softmax_steps():
    """The state after each tile, as the chapter's update writes it, and the one-pass result."""
    m, l, o = -math.inf, 0.0, 0.0
    steps = []
    for s, v in zip(SOFTMAX_SCORES, SOFTMAX_VALUES):
        m_new = max(m, max(s))
        factor = math.exp(m - m_new)  # 0 at the first tile: exp(-inf)
        tile_l = sum(math.exp(x - m_new) for x in s)
        tile_o = sum(math.exp(x - m_new) * y for x, y in zip(s, v))
        steps.append(dict(m_old=m, m=m_new, factor=factor, l_old=l, o_old=o, tile_l=tile_l, tile_o=tile_o,
                          l=l * factor + tile_l, o=o * factor + tile_o))
        m, l, o = m_new, l * factor + tile_l, o * factor + tile_o
    scores = [x for s in SOFTMAX_SCORES for x in s]
    values = [y for v in SOFTMAX_VALUES for y in v]
    top = max(scores)
    one_l = sum(math.exp(x - top) for x in scores)
    one_o = sum(math.exp(x - top) * y for x, y in zip(scores, values))
    # The check the figure rests on: the tile-by-tile sums are the one-pass sums.
    if not (math.isclose(l, one_l, rel_tol=1e-12) and math.isclose(o, one_o, rel_tol=1e-12) and m == top):
        raise AssertionError(f"online softmax: l {l} o {o} against one pass {one_l} {one_o}")
    return steps, dict(m=top, l=one_l, o=one_o, probs=[math.exp(x - top) / one_l for x in scores])


def online_softmax(path, root):
    steps, one = online_softmax_steps()
    W, H = 980, 500
    svg = canvas(W, H, "The online softmax: one query row, four key tiles",
                 "After each tile the row keeps m (largest score so far), ℓ = Σ exp(s − m) and "
                 "o = Σ exp(s − m)·v; when m grows, ℓ and o are rescaled.")
    n = len(SOFTMAX_SCORES[0])
    cell, x0 = 50, 96
    cols = {"m": 312, "factor": 476, "l": 612, "o": 800}  # left edges of the state's columns
    top = 112
    svg.text(x0 + 2 * cell, top - 14, "scores s (v under each)", size=12, anchor="middle", weight="bold")
    svg.text(cols["m"], top - 30, "m =", size=12, weight="bold")
    svg.text(cols["m"], top - 14, "max(m_old, max s)", size=12, weight="bold")
    svg.text(cols["factor"], top - 30, "factor =", size=12, weight="bold")
    svg.text(cols["factor"], top - 14, "exp(m_old − m)", size=12, weight="bold")
    svg.text(cols["l"], top - 30, "ℓ = ℓ_old·factor", size=12, weight="bold")
    svg.text(cols["l"], top - 14, "    + Σ exp(s − m)", size=12, weight="bold")
    svg.text(cols["o"], top - 30, "o = o_old·factor", size=12, weight="bold")
    svg.text(cols["o"], top - 14, "    + Σ exp(s − m)·v", size=12, weight="bold")
    row_h = 66
    p_max = max(one["probs"])
    for j, st in enumerate(steps):
        y = top + j * row_h
        svg.rect(16, y - 6, W - 32, row_h - 8, "#f7f7f7" if j % 2 == 0 else "white")
        svg.text(24, y + 18, f"tile {j}", size=13, weight="bold")
        svg.text(24, y + 36, f"keys {n * j}-{n * j + n - 1}", size=11, colour=MUTED)
        for k, (s, v) in enumerate(zip(SOFTMAX_SCORES[j], SOFTMAX_VALUES[j])):
            x = x0 + k * cell
            top_score = s == max(SOFTMAX_SCORES[j]) and s > st["m_old"]
            # Tinted by the key's final probability, the darkest the row's largest.
            svg.rect(x + 2, y, cell - 4, 28, TEAL, opacity=0.15 + 0.75 * one["probs"][n * j + k] / p_max,
                     stroke=ORANGE if top_score else "none", width=2.5)
            svg.text(x + cell / 2, y + 19, f"{s:.1f}", size=13, anchor="middle", weight="bold")
            svg.text(x + cell / 2, y + 44, f"v {v:+.1f}", size=11, anchor="middle", colour=MUTED)
        grew = st["m"] > st["m_old"]
        m_old = "−∞" if st["m_old"] == -math.inf else f"{st['m_old']:.2f}"
        svg.text(cols["m"], y + 18, f"max({m_old}, {max(SOFTMAX_SCORES[j]):.2f}) = {st['m']:.2f}", size=12)
        svg.text(cols["m"], y + 36, "grew" if grew else "unchanged", size=11,
                 colour=ORANGE if grew else MUTED, weight="bold" if grew else "normal")
        if j == 0:
            f_text, f_note, f_colour = "0", "nothing to rescale", MUTED
        elif grew:
            f_text, f_note, f_colour = f"{st['factor']:.4f}", f"exp({st['m_old']:.2f} − {st['m']:.2f})", ORANGE
        else:
            f_text, f_note, f_colour = "1", "sums kept as they are", MUTED
        svg.text(cols["factor"], y + 18, f_text, size=14, weight="bold", colour=f_colour)
        svg.text(cols["factor"], y + 36, f_note, size=11, colour=MUTED)
        for key, old, new in (("l", st["l_old"], st["tile_l"]), ("o", st["o_old"], st["tile_o"])):
            sign = "+" if new >= 0 else "−"
            rescaled = "0" if j == 0 else f"{old:.4f}·{st['factor']:.4f}"
            svg.text(cols[key], y + 18, f"{rescaled} {sign} {abs(new):.4f}", size=12)
            svg.text(cols[key], y + 36, f"= {st[key]:.4f}", size=12, weight="bold")
    last = steps[-1]
    y = top + len(steps) * row_h + 14
    svg.line(16, y - 10, W - 16, y - 10, colour="#ccc")
    svg.text(24, y + 10, "After the last tile", size=13, weight="bold")
    svg.text(180, y + 10, f"y = o / ℓ = {last['o']:.4f} / {last['l']:.4f} = {last['o'] / last['l']:.6f};   "
             f"lse = m + log ℓ = {last['m']:.2f} + {math.log(last['l']):.4f} = {last['m'] + math.log(last['l']):.4f}",
             size=12)
    svg.text(24, y + 34, "One pass", size=13, weight="bold")
    svg.text(180, y + 34, f"over all {len(one['probs'])} scores at once, m = {one['m']:.2f}: ℓ = {one['l']:.4f}, "
             f"o = {one['o']:.4f}, y = {one['o'] / one['l']:.6f}: the same (the script checks it to 12 digits)",
             size=12)
    lines(svg, 24, y + 66, [
        "exp(m_old − m)·exp(s − m_old) = exp(s − m): multiplying the old sums by the factor is exact, so nothing "
        "seen before has to be read again.",
        "Orange outline: the score that raised the maximum. Tint: the key's final probability (darker is larger). "
        "The kernel does the same in",
        "powers of two (exp2f) for 64 keys a tile, 32 query rows a warp; one column of v stands here for all 64.",
    ], size=12, colour=TEXT)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# flash_backward_walk.svg (chapter 03b, "The backward pass")

BACKWARD_TILE, BACKWARD_WARP_ROWS = 64, 16  # kTile of flash_attention.cuh; keys or queries per warp
BACKWARD_T = 256
# What the figure draws, as the source says it: the tile, the default blocks of 64 keys and 64
# queries (4 warps of 16 rows: two threads per row), the dk/dv walk down a column from the tile of
# the block's first key, the dq walk along a row of key tiles in reversed block order, and a
# default without atomics.
BACKWARD_SOURCE = [
    "template <int kRowsPerWarp, int kBackwardKeys = kTile, int kDqQueries = kTile, bool kAtomicDq = false>",
    "constexpr int kThreads = kKeys * 2",
    "constexpr int kThreads = kQueries * 2",
    "for (int q_tile = first_q_tile; q_tile < q_tiles; ++q_tile)",
    "const int query0 = (gridDim.x - 1 - blockIdx.x) * kQueries;",
    "static constexpr bool kBitwiseRepeatable = !kAtomicDq;",
]


def backward_constants_found(root):
    text = (root / "stages/03_flash_attention/flash_attention.cuh").read_text(encoding="utf-8")
    tile = re.search(r"constexpr int kTile = (\d+);", text)
    dq_kernel = text.find("flash_backward_dq_kernel(bf16* dqkv")
    return (tile and int(tile.group(1)) == BACKWARD_TILE and all(s in text for s in BACKWARD_SOURCE)
            and "flash_backward_dkdv_kernel(bf16* dqkv" in text and dq_kernel >= 0
            and text.find("for (int j = 0; j < tiles; ++j)", dq_kernel) >= 0)


def flash_backward_walk(path, root):
    if not backward_constants_found(root):
        raise SystemExit("figures: the backward of flash_attention.cuh no longer walks as flash_backward_walk.svg "
                         "draws it (kTile, the default blocks of 64 keys and 64 queries, the dk/dv kernel's q_tile "
                         "loop, the dq kernel's loop and its reversed blocks, no atomics by default): update "
                         "tests/docs/course_figures.py")
    n = BACKWARD_T // BACKWARD_TILE
    warps = BACKWARD_TILE // BACKWARD_WARP_ROWS
    W, H = 1000, 800
    svg = canvas(W, H, "The backward of flash attention: a column of tiles for dk and dv, a row for dq",
                 f"Stage 03, one (batch, head) at T = {BACKWARD_T}: {n} tiles of {BACKWARD_TILE} each way; both "
                 f"kernels' grids (T/{BACKWARD_TILE}, B·NH), {warps} warps of {BACKWARD_WARP_ROWS} keys or queries "
                 "a block")

    # The three launches of FlashAttention::backward, in order.
    ky = 70
    kernels = [("1  flash_row_dot_kernel", "D = rowsum(dout ∘ out), one per row", GREY),
               ("2  flash_backward_dkdv_kernel", "dk, dv: one block per 64 keys", TEAL),
               ("3  flash_backward_dq_kernel", "dq: one block per 64 queries", PURPLE)]
    kw = 300
    for i, (name, what, colour) in enumerate(kernels):
        x = 24 + i * (kw + 20)
        svg.rect(x, ky, kw, 42, colour, opacity=0.18, stroke=colour, width=1.5)
        svg.text(x + 10, ky + 17, name, size=12, weight="bold")
        svg.text(x + 10, ky + 34, what, size=11, colour=TEXT)
        if i:
            arrow(svg, x - 19, ky + 21, x - 2, ky + 21)

    # Two copies of the causal matrix, queries down and keys across: the dk/dv kernel's blocks own
    # columns and walk down, the dq kernel's own rows and walk across. Each lower tile is visited
    # once by each.
    c = 64
    gy = 214
    panels = [(110, TEAL, "kernel 2: a block per column of keys, walking ↓"),
              (590, PURPLE, "kernel 3: a block per row of queries, walking →")]
    for p, (gx, colour, heading) in enumerate(panels):
        svg.text(gx + n * c / 2, gy - 44, heading, size=12, anchor="middle", weight="bold")
        svg.text(gx + n * c / 2, gy - 28, "keys across, queries down", size=11, anchor="middle", colour=MUTED)
        for j in range(n):
            svg.text(gx + (j + 0.5) * c, gy - 8, f"k tile {j}" if p else f"block {j}", size=11, anchor="middle",
                     colour=MUTED)
        for i in range(n):
            # The dq kernel takes its blocks in the forward's order: blockIdx.x = 0 the longest row.
            svg.text(gx - 8, gy + (i + 0.5) * c + 4, f"q tile {i}" if not p else f"block {n - 1 - i}", size=11,
                     anchor="end", colour=MUTED)
            for j in range(n):
                x, y = gx + j * c, gy + i * c
                if j > i:
                    svg.rect(x, y, c, c, "#f3f3f3", stroke="white", width=2)
                    continue
                svg.rect(x, y, c, c, colour, opacity=0.85 if j < i else 0.55, stroke="white", width=2)
                step = i - j + 1 if p == 0 else j + 1
                svg.text(x + c / 2 - (6 if p == 0 else 0), y + c / 2 - (4 if i == j else -4), f"step {step}",
                         size=11, anchor="middle", colour="white", weight="bold")
                if i == j:
                    svg.text(x + c / 2 - (6 if p == 0 else 0), y + c / 2 + 11, "masked", size=10, anchor="middle",
                             colour="white")
        if p == 0:
            for j in range(n):  # from the diagonal down to the last query tile
                x = gx + j * c + c - 10
                arrow(svg, x, gy + j * c + 8, x, gy + n * c - 4, colour="#1f4e4a", width=2)
        else:
            for i in range(n):  # from key tile 0 along to the diagonal
                y = gy + i * c + c - 10
                arrow(svg, gx + 6, y, gx + (i + 1) * c - 4, y, colour="#4a2a4a", width=2)

    # What each block keeps, and writes once at the end of its walk.
    by = gy + n * c + 16
    gx = panels[0][0]
    for j in range(n):
        x = gx + j * c + 3
        svg.rect(x, by, c - 6, 36, ORANGE, opacity=0.85)
        svg.text(x + (c - 6) / 2, by + 15, "dk, dv", size=11, anchor="middle", colour="white", weight="bold")
        svg.text(x + (c - 6) / 2, by + 29, "registers", size=9, anchor="middle", colour="white")
    svg.text(gx - 8, by + 22, "kept", size=11, anchor="end", colour=MUTED)
    gx = panels[1][0]
    svg.text(gx + n * c + 16 + 32, gy - 8, "kept", size=11, anchor="middle", colour=MUTED)
    for i in range(n):
        x, y = gx + n * c + 16, gy + i * c + 3
        svg.rect(x, y, 64, c - 6, ORANGE, opacity=0.85)
        svg.text(x + 32, y + 25, "dq", size=11, anchor="middle", colour="white", weight="bold")
        svg.text(x + 32, y + 39, "registers", size=9, anchor="middle", colour="white")

    # One step of each walk, as the loop bodies do it.
    steps = [
        (panels[0][0] - 86, "Block j at query tile i (one step ↓)", [
            ("Pᵀ = exp2(k·qᵀ·c − lse)", TEAL, "recomputed from the saved lse"),
            ("dv += Pᵀ·dout", ORANGE, ""),
            ("dPᵀ = v·doutᵀ", TEAL, ""),
            ("dSᵀ = Pᵀ ∘ (dPᵀ − D)", TEAL, ""),
            ("dk += dSᵀ·q", ORANGE, ""),
        ], "4 products; q, dout of tile i + 1 load meanwhile"),
        (panels[1][0] - 86, "A warp's 16 queries at key tile j (one step →)", [
            ("P = exp2(q·kᵀ·c − lse)", PURPLE, "recomputed; lse, D in registers"),
            ("dP = dout·vᵀ", PURPLE, "made a second time"),
            ("dS = P ∘ (dP − D)", PURPLE, ""),
            ("dq += dS·k", ORANGE, ""),
        ], "3 products (add_dq_of_tile); k, v of tile j + 1 load meanwhile"),
    ]
    sy = by + 66
    for x, heading, items, foot in steps:
        svg.text(x, sy, heading, size=12, weight="bold")
        y = sy + 14
        for what, colour, note in items:
            svg.rect(x, y, 10, 10, colour, opacity=0.85)
            svg.text(x + 16, y + 9, what, size=12, colour="#222")
            if note:
                svg.text(x + 170, y + 9, note, size=10, colour=MUTED)
            y += 22
        svg.text(x, y + 8, foot, size=11, colour=MUTED)

    ny = sy + 172
    svg.line(24, ny - 16, W - 24, ny - 16, colour="#e3e3e3")
    lines(svg, 24, ny + 4, [
        "Why two walks: dk and dv of a key sum over the queries after it, a column of tiles; dq of a query sums over "
        "the keys before it, a row.",
        "Each sum has one block that owns it and adds its terms in one order, in registers: no atomics, no fp32 sums "
        "in memory, the same bits",
        "on every run. The price: P and dP made twice, 7 products per pair of tiles instead of 5. FlashAttention-2 "
        "makes dq inside the column",
        "walk instead and adds each block's share into fp32 sums with atomicAdd (the benchmark's atomic-dq variant).",
    ], size=12)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# fusion_bytes.svg (chapter 04, "The fusions")

# Bytes per step at GPT-2 124M, B x T = 16 x 1024 (N = 16,384, C = 768, bf16), counted as
# docs/04_fused_kernels.md's table "The fusions" counts them: the traffic the fusion changes (a
# matmul's own reads of its inputs are the same both ways and left out). Per call, in MiB:
# one N x C activation is 24 MiB, one N x 4C 96 MiB; the logits N x 50257 bf16.
N_POS, WIDTH, VOCAB, PARAMS, LAYERS = 16 * 1024, 768, 50257, 124_439_808, 12
ACT = N_POS * WIDTH * 2 / MIB           # 24 MiB
ACT4 = 4 * ACT                          # 96 MiB
LOGITS = N_POS * VOCAB * 2 / MIB        # bf16 logits, 1.53 GiB


def fusion_rows():
    """(name, calls, unfused MiB per call, fused MiB per call, how, measured H200 time). Each
    figure's arithmetic is the chapter's: unfused - fused per call is its "bytes saved" column."""
    return [
        # three reads of the bf16 logits, the fp32 probabilities written and read back, dlogits
        # written; fused: two reads (online softmax), dlogits written over them
        ("classifier: softmax, loss, dlogits", 1, 3 * LOGITS + 2 * 2 * LOGITS + LOGITS, 3 * LOGITS,
         "3 reads + fp32 probabilities → 2 reads", "7.2 → 1.5 ms a step"),
        # matmul writes x·Wᵀ, a bias kernel reads and writes it, GELU reads pre and writes out;
        # fused: pre and out written by the epilogue
        ("fc: bias + GELU in the matmul", LAYERS, ACT4 + 2 * ACT4 + 2 * ACT4, 2 * ACT4,
         "GELU_AUX_BIAS epilogue", "0.4243 → 0.1514 ms a layer"),
        # qkv (N x 3C), attn_proj and fc_proj (N x C): written, then read and written by the bias kernel
        ("qkv, attn_proj, fc_proj: bias in the matmul", LAYERS, 3 * (3 * ACT + ACT + ACT), 3 * ACT + ACT + ACT,
         "BIAS epilogue", "2.3 ms a step"),
        # bias gradients: a column-sum kernel reads dout of qkv, attn_proj, fc and fc_proj again
        ("bias gradients beside the weight gradients", LAYERS, 3 * ACT + ACT + ACT4 + ACT, 0,
         "BGRADB epilogue", "none: separate kernels kept"),
        # d(gelu out) written, read with pre, d(pre) written; fused: pre read, d(pre) written
        ("GELU's backward in fc_proj's backward", LAYERS, 4 * ACT4, 2 * ACT4, "DGELU epilogue",
         "0.3963 → 0.2720 ms a layer"),
        # dinp kernel: dout, x, dinp read, dinp written; parameter kernel: dout, x read again
        ("LayerNorm backward", 25, 6 * ACT, 4 * ACT, "one kernel, a warp per row", "both LayerNorm rows:"),
        # the add reads a, b and writes the residual, the LayerNorm reads it and writes its output
        ("residual add + LayerNorm forward", 24, 5 * ACT, 4 * ACT, "one kernel, a warp per row",
         "37.1 → 1.7 ms a step"),
        # 30 bytes a parameter for the update (fp32 weight r/w, gradient, m and v r/w, bf16 copy),
        # 4 for the norm's read of the gradient: the same either way
        ("AdamW: norm and update", 1, 34 * PARAMS / MIB, 34 * PARAMS / MIB, "18 launches → 3, same bytes",
         "1.5162 → 1.1405 ms a step"),
    ]


def fusion_bytes(path, root):
    rows = fusion_rows()
    # The chapter's "bytes saved per step" column, to the precision it prints (GiB).
    saved_printed = [7.7, 3.4, 2.8, 2.5, 2.3, 1.2, 0.6, 0.0]
    for (name, calls, before, after, _, _), printed in zip(rows, saved_printed):
        saved = calls * (before - after) * MIB / GIB
        if abs(saved - printed) > 0.051:
            raise AssertionError(f"fusion_bytes: {name} saves {saved:.2f} GiB, the chapter says {printed}")
    W, H = 1000, 90 + 52 * len(rows) + 110
    svg = canvas(W, H, "Bytes moved per training step, before and after each fusion of stage 04",
                 "GPT-2 124M, B = 16, T = 1024 (N = 16,384 positions): counted from the kernels' "
                 "interfaces as chapter 04 counts them, not measured")
    left, right = 330, 770  # bars from x = left; the measured times right of x = right
    scale = (right - left - 70) / max(calls * before for _, calls, before, _, _, _ in rows) * GIB / MIB
    svg.text(right + 10, 78, "measured, H200", size=12, weight="bold")
    svg.text(right + 10, 92, "stage 03 → 04, 2026-11-27", size=11, colour=MUTED)
    y = 108
    for name, calls, before, after, how, measured in rows:
        b, a = calls * before * MIB / GIB, calls * after * MIB / GIB
        svg.text(24, y + 12, name, size=12, weight="bold")
        svg.text(24, y + 28, f"{how}; {calls} call{'s' if calls > 1 else ''} a step" if calls > 1 else how,
                 size=11, colour=MUTED)
        svg.rect(left, y, b * scale, 16, RED, opacity=0.75)
        svg.text(left + b * scale + 6, y + 12, f"{b:.2f} GiB", size=11)
        svg.rect(left, y + 19, a * scale, 16, GREEN, opacity=0.9)
        saved = b - a
        svg.text(left + a * scale + 6, y + 31, f"{a:.2f} GiB" + (f"  (−{saved:.2f})" if saved > 0.005 else ""),
                 size=11, weight="bold" if saved > 0.005 else "normal")
        svg.text(right + 10, y + 22, measured, size=11, colour=TEXT)
        y += 52
    svg.line(left, 100, left, y - 10, colour="#888")
    ly = y + 6
    svg.rect(24, ly - 10, 16, 12, RED, opacity=0.75)
    svg.text(46, ly, "unfused (stage 03)", size=12)
    svg.rect(190, ly - 10, 16, 12, GREEN, opacity=0.9)
    svg.text(212, ly, "fused (stage 04)", size=12)
    lines(svg, 24, ly + 24, [
        "The bytes each change affects, counted the chapter's way (a matmul's reads of its inputs are the same both "
        "ways and left out; the",
        "bias gradient's column sums move no bytes of their own when fused). Measured times: chapter 04, "
        "\"Measured effect\", kernel benchmark of",
        "2026-11-27 (H200). AdamW moves the same bytes: what changed is the launches and the 16-byte accesses.",
    ], size=12)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# cuda_graph_timeline.svg (chapter 04, "CUDA Graphs")

# From docs/04_fused_kernels.md, "Why small kernels are slow" and "Measured effect":
OPS_PER_STEP = 300          # about 300 operations queued per step (read off the model graph)
HOST_US_PER_OP = 5          # assumed host time to queue one operation
KERNELS_MS_B16 = 56.0       # stage 04's per-op medians summed (kernel benchmark, H200, 2026-11-27)
STEP_MS_B16 = 56.5          # stage 04's step, ladder, H200, 2026-11-27 (graph replayed)
GPU_MS_B1 = 4.0             # B = 1: about 4 ms of GPU work if it shrank in proportion (predicted)


def cuda_graph_timeline(path, root):
    W, H = 1000, 600
    svg = canvas(W, H, "One training step with and without the CUDA Graph (stage 04)",
                 "schematic, from the chapter's figures, not a profile: ~300 operations a step, ~5 µs of host time to "
                 "queue each (assumed)")
    left, right = 200, 960
    host_ms = OPS_PER_STEP * HOST_US_PER_OP / 1000

    def panel(y, heading, sub, total_ms, kernel_ms, tick_ms, note_without, note_with, ops_drawn=None, marks=()):
        svg.text(24, y, heading, size=14, weight="bold")
        svg.text(24, y + 18, sub, size=12, colour=MUTED)
        scale = (right - left) / total_ms
        ay = y + 40
        ticks = [t * tick_ms for t in range(int(total_ms / tick_ms + 1e-9) + 1)]
        for t in ticks:
            svg.line(left + t * scale, ay, left + t * scale, ay + 176, colour="#eee")
            svg.text(left + t * scale, ay - 4, f"{t:g} ms", size=10, anchor="middle", colour=MUTED)
        rows = [("without graph", "host", "GPU"), ("with graph", "host", "GPU")]
        for r, (mode, _, _) in enumerate(rows):
            ry = ay + 8 + r * 88
            svg.text(24, ry + 14, mode, size=12, weight="bold")
            svg.text(left - 8, ry + 14, "host (CPU)", size=11, anchor="end", colour=MUTED)
            svg.text(left - 8, ry + 46, "GPU", size=11, anchor="end", colour=MUTED)
            if r == 0:  # every operation queued by the host, one at a time
                svg.rect(left, ry + 2, host_ms * scale, 18, ORANGE, opacity=0.85)
                svg.text(left + host_ms * scale + 6, ry + 15, note_without, size=11)
            else:
                svg.rect(left, ry + 2, max(2.0, 0.01 * scale), 18, ORANGE, opacity=0.85)
                svg.text(left + 8, ry + 15, note_with, size=11)
            # The GPU: the step's kernels (drawn as ops_drawn blocks), the first after one launch.
            start = HOST_US_PER_OP / 1000
            count = ops_drawn or OPS_PER_STEP
            width = kernel_ms / count * scale
            x = left + start * scale
            blocks = []
            for k in range(count):
                blocks.append(f'<rect x="{x + k * width:.1f}" y="{ry + 34:.1f}" width="{max(width - 0.6, 0.4):.1f}" '
                              f'height="18"/>')
            svg.add(f'<g fill="{BLUE}" fill-opacity="0.85">' + "".join(blocks) + "</g>")
        for row, ms, label in marks:  # where a step ends, measured or predicted
            mx, ry = left + ms * scale, ay + 8 + row * 88
            svg.line(mx, ry + 28, mx, ry + 58, colour="#222", width=1.5, dash="3,2")
            svg.text(mx - 4, ry + 70, label, size=10, anchor="end", colour=TEXT)
        return ay + 184

    # B = 16: the measured step, to scale.
    y = panel(92, "B = 16, to scale: the host is far ahead, so the graph has little to save",
              f"stage 04 on an H200 (2026-11-27): kernels {KERNELS_MS_B16} ms (per-op medians summed), step "
              f"{STEP_MS_B16} ms: ≤ {STEP_MS_B16 - KERNELS_MS_B16:.1f} ms outside the kernels", 60.0,
              KERNELS_MS_B16, 10,
              f"~{OPS_PER_STEP} launches × {HOST_US_PER_OP} µs ≈ {host_ms:.1f} ms, then the host waits",
              "one cudaGraphLaunch", ops_drawn=60,
              marks=((0, KERNELS_MS_B16 + 1.0, "not measured without the graph: predicted under 1 ms more"),
                     (1, STEP_MS_B16, f"step: {STEP_MS_B16} ms measured")))
    # B = 1: predicted, the same operations on a shorter step.
    us_per_op = GPU_MS_B1 * 1000 / OPS_PER_STEP
    panel(y + 28, "B = 1, predicted: the same ~300 operations share ~4 ms, ~13 µs each",
          f"the host's {HOST_US_PER_OP} µs a launch is now {host_ms / GPU_MS_B1:.0%} of the GPU's time; a host slower "
          f"than ~{us_per_op:.0f} µs an operation would leave the GPU waiting between kernels", 4.5,
          GPU_MS_B1, 0.5, f"{OPS_PER_STEP} × {HOST_US_PER_OP} µs ≈ {host_ms:.1f} ms of host work",
          "one cudaGraphLaunch: the host is free for the next batch", ops_drawn=60)
    svg.text(24, H - 14, f"Each blue block stands for 5 of the {OPS_PER_STEP} operations. Gaps between dependent "
             "kernels are too small to draw at this scale; the chapter predicts under 1 ms a step at B = 16.",
             size=11, colour=MUTED)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# ring_all_reduce.svg (chapter 06, "The idea" and "Buckets: summing while backward runs")

RING = 4  # ranks drawn


def ring_states(n):
    """The contributors of every chunk on every rank after each step of a ring all-reduce:
    n - 1 steps of reduce-scatter (rank r sends chunk (r - s) mod n to rank r + 1, which adds it),
    then n - 1 of all-gather (rank r sends its finished chunk (r + 1 - s) mod n, which is copied)."""
    state = [[frozenset([r]) for _ in range(n)] for r in range(n)]
    history = [("start", [row[:] for row in state], set())]
    for s in range(n - 1):
        sent = {(r, (r - s) % n) for r in range(n)}
        new = [row[:] for row in state]
        for r, c in sent:
            new[(r + 1) % n][c] = state[(r + 1) % n][c] | state[r][c]
        state = new
        history.append((f"reduce-scatter {s + 1}", [row[:] for row in state], sent))
    full = frozenset(range(n))
    if any(state[r][(r + 1) % n] != full for r in range(n)):
        raise AssertionError("reduce-scatter did not finish a chunk on every rank")
    for s in range(n - 1):
        sent = {(r, (r + 1 - s) % n) for r in range(n)}
        new = [row[:] for row in state]
        for r, c in sent:
            new[(r + 1) % n][c] = state[r][c]
        state = new
        history.append((f"all-gather {s + 1}", [row[:] for row in state], sent))
    if any(chunk != full for row in state for chunk in row):
        raise AssertionError("the all-gather did not give every rank every sum")
    return history


def bucket_sizes():
    """Parameters of one block's bucket and of the last one (wte, wpe, ln_f), GPT-2 124M with the
    vocabulary padded to 50,304 rows: common/train/parallel.h, gradient_buckets."""
    C, Vp, T = 768, 50304, 1024
    block = (2 * C) + (3 * C * C + 3 * C) + (C * C + C) + (2 * C) + (4 * C * C + 4 * C) + (4 * C * C + C)
    last = Vp * C + T * C + 2 * C
    # The chapter's figures ("A scaling model"): 7,087,872 a block, 39,421,440 the last, P in all.
    if (block, last, 12 * block + last) != (7_087_872, 39_421_440, 124_475_904):
        raise AssertionError(f"bucket sizes {block}, {last} are not the chapter's")
    return block, last


def ring_all_reduce(path, root):
    history = ring_states(RING)
    block, last = bucket_sizes()
    W, H = 1000, 700
    svg = canvas(W, H, "Stage 06's gradient sum: a ring all-reduce per bucket, during backward",
                 f"top: the ring on {RING} GPUs, gradients cut into {RING} chunks; bottom: the last "
                 "micro-batch's backward and the all-reduces on the second stream")
    cw, ch = 40, 24
    gx, gy = 170, 96
    gap = 200
    for r in range(RING):
        svg.text(gx + r * gap + RING * cw / 2, gy, f"GPU {r}", size=12, anchor="middle", weight="bold")
        for c in range(RING):
            svg.text(gx + r * gap + (c + 0.5) * cw, gy + 16, f"c{c}", size=10, anchor="middle", colour=MUTED)
    y = gy + 24
    for step, (label, state, sent) in enumerate(history):
        if step == RING:
            svg.line(24, y - 4, W - 24, y - 4, colour="#ddd", dash="4,3")
        svg.text(24, y + 16, label, size=12, colour=TEXT, weight="bold" if step in (0, RING - 1, 2 * RING - 2)
                 else "normal")
        for r in range(RING):
            for c in range(RING):
                who = state[r][c]
                x = gx + r * gap + c * cw
                full = len(who) == RING
                fill = PURPLE if full else BLUE
                svg.rect(x + 1, y + 1, cw - 2, ch - 2, fill, opacity=0.9 if full else 0.12 + 0.2 * len(who),
                         stroke=ORANGE if (r, c) in sent else "white", width=2.5 if (r, c) in sent else 1)
                text = "Σ" if full else "+".join(str(k) for k in sorted(who))
                svg.text(x + cw / 2, y + 16, text, size=11 if full else 10, anchor="middle",
                         colour="white" if full else "#222", weight="bold" if full else "normal")
        y += ch + 6
    ly = y + 10
    svg.rect(24, ly - 10, 22, 14, BLUE, opacity=0.32)
    svg.text(52, ly + 1, "0+1: the sum of those GPUs' gradients", size=11)
    svg.rect(300, ly - 10, 22, 14, PURPLE, opacity=0.9)
    svg.text(328, ly + 1, "Σ: the sum over all GPUs", size=11)
    svg.rect(510, ly - 10, 22, 14, "white", stroke=ORANGE, width=2.5)
    svg.text(538, ly + 1, "sent this step to the next GPU (GPU 3 → GPU 0)", size=11)
    n8 = 8
    S = 4 * (12 * block + last)
    per_gpu = 2 * (n8 - 1) / n8 * S
    lines(svg, 24, ly + 24, [
        "Reduce-scatter: each GPU sends one chunk to the next and adds the one it receives; after N − 1 steps "
        "each GPU holds the sum",
        "of one chunk. All-gather: the finished sums are passed on around the ring, N − 1 steps more.",
    ], size=12)
    ly += 38
    svg.text(24, ly + 24, f"Each of the 2(N − 1) steps sends 1/N of the gradients per GPU: 2(N − 1)/N × S in all. "
             f"GPT-2 124M, S = {S / 1e6:.1f} MB of fp32 gradients, N = {n8}: {per_gpu / 1e6:.0f} MB per GPU.",
             size=12)

    # The bucket overlap: main stream backward, blocks 11 .. 0 then the embeddings; each bucket's
    # all-reduce on the second stream as soon as it is final. Widths: blocks schematic, all-reduces
    # in proportion to their bytes.
    ty = ly + 62
    svg.line(24, ty - 22, W - 24, ty - 22, colour="#e3e3e3")
    svg.text(24, ty, "The last micro-batch's backward (earlier micro-batches only add up gradients locally, and "
             "send nothing)", size=14, weight="bold")
    x0, bw = 150, 40
    my, cy = ty + 40, ty + 100
    svg.text(x0 - 10, my + 15, "main stream", size=11, anchor="end", weight="bold")
    svg.text(x0 - 10, cy + 15, "second stream", size=11, anchor="end", weight="bold")
    svg.text(x0 - 10, cy + 30, "(high priority)", size=10, anchor="end", colour=MUTED)
    svg.rect(x0, my, 70, 22, "#bbb")
    svg.text(x0 + 35, my + 15, "LM head", size=10, anchor="middle", colour="#222")
    svg.text(x0 + 70 + 6 * bw, my - 8, "backward of blocks 11, 10, …, 0", size=11, anchor="middle", colour=MUTED)
    x = x0 + 70
    per_block_w = 0.5 * bw  # an all-reduce of one block's bucket, against a block's backward
    unit = per_block_w / block
    for b in range(12):
        svg.rect(x + 1, my, bw - 2, 22, TEAL, opacity=0.85)
        svg.text(x + bw / 2, my + 15, f"{11 - b}", size=11, anchor="middle", colour="white", weight="bold")
        arrow(svg, x + bw - 1, my + 23, x + bw + 3, cy - 2, colour="#999", width=1)
        svg.rect(x + bw + 3, cy, block * unit, 22, PURPLE, opacity=0.8)
        if b in (0, 11):
            svg.text(x + bw + 3 + block * unit / 2, cy + 36, f"bucket {b}", size=10, anchor="middle", colour=MUTED)
        x += bw
    svg.rect(x + 1, my, 60, 22, "#999")
    svg.text(x + 31, my + 15, "embed.", size=10, anchor="middle", colour="white")
    x += 61
    arrow(svg, x - 1, my + 23, x + 3, cy - 2, colour="#999", width=1)
    svg.rect(x + 3, cy, last * unit, 22, PURPLE, opacity=0.95)
    svg.text(x + 3 + last * unit / 2, cy + 15, "bucket 12", size=10, anchor="middle", colour="white")
    svg.text(x + 3 + last * unit / 2, cy + 36, "wte, wpe, ln_f", size=10, anchor="middle", colour=MUTED)
    end = x + 3 + last * unit
    svg.rect(x + 3, my, end - x - 3, 22, "none", stroke="#bbb", dash="3,3")
    svg.text(x + 3 + (end - x - 3) / 2, my + 15, "waits", size=10, anchor="middle", colour=MUTED)
    svg.rect(end + 2, my, 70, 22, YELLOW, opacity=0.9)
    svg.text(end + 37, my + 15, "AdamW", size=10, anchor="middle", colour="#222")
    lines(svg, 24, cy + 64, [
        f"A block's bucket: its slice of each of the 12 per-layer tensors, {block:,} parameters "
        f"({4 * block / 1e6:.1f} MB of fp32); the last, {last:,} ({4 * last / 1e6:.1f} MB),",
        "almost all wte, whose gradient is final only after the embedding's backward. Each all-reduce waits on an "
        "event for its block, runs",
        "beside the blocks below it, and only the last one is left for AdamW to wait for. Schematic: the "
        "all-reduces' widths are in proportion",
        "to their bytes, the blocks' are not to scale; stage 06 has not run on several GPUs, so none of this is "
        "measured.",
    ], size=12)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# memory_per_stage.svg (chapters 00-06)

MEMORY_CHANGES = {  # what each stage changed in memory, from the chapters' "Memory" sections
    "01": "TF32: the same buffers",
    "02": "bf16 activations, logits",
    "03": "no T × T attention saved",
    "04": "fused classifier, logits in chunks",
    "05": "padded vocabulary",
    "06": "one process: as stage 05",
}


def memory_per_stage(path, root):
    rows, dates = ladder_rows(root)
    stages = [f"{s:02d}" for s in range(7)]
    W, H = 960, 520
    svg = canvas(W, H, "Device memory per stage: GPT-2 124M, B = 16, T = 1024",
                 "the trainer's peak (its buffers, cuBLASLt's workspace; not CUDA's context), from the ladders' "
                 "results files", hatches=[GREY])
    left, top, bottom = 80, 80, 400
    gib_max = 32
    scale = (bottom - top) / gib_max

    def Y(v):
        return bottom - v * scale

    for t in range(0, gib_max + 1, 4):
        svg.line(left, Y(t), W - 24, Y(t), colour="#e9e9e9")
        svg.text(left - 8, Y(t) + 4, f"{t}", size=11, anchor="end")
    svg.text(30, (top + bottom) / 2, "GiB", size=12, anchor="middle", rotate=-90)
    group = (W - 24 - left) / len(stages)
    bar = 56
    previous = None
    for i, stage in enumerate(stages):
        cx = left + group * (i + 0.5)
        measured = [(gpu, rows[(gpu, "cpp", stage)]) for gpu in ("H200", "H100") if (gpu, "cpp", stage) in rows]
        colour = STAGE_COLOURS[i]
        if measured:
            values = {int(row["peak_memory_bytes"]) for _, row in measured}
            if len(values) != 1:
                raise AssertionError(f"stage {stage}: the GPUs measured different peaks {values}; draw both")
            gib = values.pop() / GIB
            svg.rect(cx - bar / 2, Y(gib), bar, bottom - Y(gib), colour, opacity=0.9)
            svg.text(cx, Y(gib) - 22, f"{gib:.2f} GiB", size=12, anchor="middle", weight="bold")
            svg.text(cx, Y(gib) - 8, " + ".join(gpu for gpu, _ in measured), size=10, anchor="middle",
                     colour=MUTED)
            if previous is not None:
                delta = gib - previous
                if abs(delta) >= 0.005:
                    text = f"{delta:+.2f} GiB"
                else:
                    text = f"{delta * GIB / MIB:+.1f} MiB" if delta else "±0"
                svg.text(cx, bottom + 54, text.replace("-", "−"), size=11, anchor="middle", weight="bold",
                         colour=TEXT)
            previous = gib
        else:  # not measured: none at present; the chapter's estimate would be drawn hatched here
            svg.text(cx, bottom - 10, "not measured", size=10, anchor="middle", colour=MUTED)
        svg.text(cx, bottom + 18, stage, size=13, anchor="middle", weight="bold")
        svg.text(cx, bottom + 34, STAGE_NAMES[i], size=11, anchor="middle", colour="#444")
        for k, part in enumerate(wrap(MEMORY_CHANGES.get(stage, "fp32 baseline"), 18)):
            svg.text(cx, bottom + 70 + 13 * k, part, size=10, anchor="middle", colour=MUTED)
    svg.line(left, bottom, W - 24, bottom, colour="#444")
    svg.text(left - 8, bottom + 54, "change", size=11, anchor="end", colour=MUTED)
    ly = H - 20
    svg.rect(24, ly - 11, 16, 12, GREY)
    ran = {gpu: sorted(stage for (g, kind, stage) in rows if g == gpu and kind == "cpp") for gpu in dates}
    svg.text(46, ly, "every bar measured, in the latest run of each GPU: " + ", ".join(
        f"{gpu} {dates[gpu]} ({ran[gpu][0]}-{ran[gpu][-1]})" for gpu in sorted(dates, reverse=True)) +
        "; peak_memory_bytes of docs/results/*/ladder*/results.csv", size=11)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# number_formats.svg (chapters 01 and 02)

FORMATS = [  # name, exponent bits, mantissa bits, what the chapter says of it
    ("fp32", 8, 23, "weights, optimizer state; stages 00-01 everywhere"),
    ("TF32", 8, 10, "inside the tensor cores only (stage 01): fp32 words, 13 bits not read"),
    ("bf16", 8, 7, "activations and matmul operands from stage 02 on: fp32's top half"),
    ("fp16", 5, 10, "not used here: 3 more bits than bf16, but tiny gradients fall below its range (chapter 02)"),
]


def fp32_bits(x):
    return struct.unpack(">I", struct.pack(">f", x))[0]


def round_fp32_bits(bits, drop):
    """fp32 bits with the low `drop` mantissa bits rounded off, to nearest, ties to even."""
    half = 1 << (drop - 1)
    low = bits & ((1 << drop) - 1)
    bits >>= drop
    if low > half or (low == half and bits & 1):
        bits += 1
    return bits << drop


def format_properties(e, m):
    bias = 2 ** (e - 1) - 1
    return dict(max=(2 - 2.0 ** -m) * 2.0 ** bias, min_normal=2.0 ** (1 - bias), eps=2.0 ** -m, bias=bias)


def encode(x, name):
    """The bits (as a string) and the value of x in the format `name`."""
    if name == "fp32":
        bits = fp32_bits(x)
        return f"{bits:032b}", struct.unpack(">f", struct.pack(">I", bits))[0]
    if name in ("TF32", "bf16"):
        drop = 13 if name == "TF32" else 16
        bits = round_fp32_bits(fp32_bits(x), drop)
        value = struct.unpack(">f", struct.pack(">I", bits))[0]
        return f"{bits:032b}"[:32 - drop], value
    bits = struct.unpack(">H", struct.pack(">e", x))[0]
    return f"{bits:016b}", struct.unpack(">e", struct.pack(">H", bits))[0]


def check_formats():
    """The arithmetic against the machine's own formats: fp32 and fp16 from struct."""
    largest_fp32 = struct.unpack(">f", bytes.fromhex("7f7fffff"))[0]
    largest_bf16 = struct.unpack(">f", bytes.fromhex("7f7f0000"))[0]
    largest_fp16 = struct.unpack(">e", bytes.fromhex("7bff"))[0]
    largest_tf32 = struct.unpack(">f", bytes.fromhex("7f7fe000"))[0]  # fp32's word, the low 13 bits 0
    got = {name: format_properties(e, m)["max"] for name, e, m, _ in FORMATS}
    if got != {"fp32": largest_fp32, "TF32": largest_tf32, "bf16": largest_bf16, "fp16": largest_fp16}:
        raise AssertionError(f"largest values {got}")
    if encode(math.pi, "bf16")[1] != 3.140625:  # chapter 02: "π becomes 3.140625"
        raise AssertionError("π in bf16")


def sci(x):
    exponent = math.floor(math.log10(abs(x)))
    mantissa = x / 10 ** exponent
    sup = str(exponent).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa:.2f} × 10{sup}"


def power_of_two(k):
    return "2" + str(k).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))


def number_formats(path, root):
    check_formats()
    W, H = 980, 640
    svg = canvas(W, H, "Four floating-point formats, bit by bit: π in each",
                 "sign, exponent, mantissa; value = (−1)^sign × 1.mantissa × 2^(exponent − bias). "
                 "Range and precision computed from the bit counts.", hatches=[GREY])
    bw, x0 = 22, 110
    y = 92
    for name, e, m, use in FORMATS:
        p = format_properties(e, m)
        bits, value = encode(math.pi, name)
        total = 1 + e + m
        svg.text(24, y + 17, name, size=15, weight="bold")
        svg.text(24, y + 33, f"1 + {e} + {m}", size=11, colour=MUTED)
        colours = [RED] + [BLUE] * e + [GREEN] * m
        for k in range(total):
            svg.rect(x0 + k * bw, y, bw - 2, 24, colours[k], opacity=0.85)
            svg.text(x0 + k * bw + (bw - 2) / 2, y + 17, bits[k], size=12, anchor="middle", colour="white",
                     weight="bold")
        if name == "TF32":  # the 13 low bits of the fp32 word the tensor core does not read
            for k in range(total, 32):
                svg.rect(x0 + k * bw, y, bw - 2, 24, hatch(GREY), stroke="#bbb", width=0.8)
        # The fields' names over the first row only; widths under each row.
        under = y + 40
        svg.text(x0 + (bw - 2) / 2, under, "s", size=10, anchor="middle", colour=RED)
        svg.text(x0 + bw * (1 + e / 2), under, f"exponent ({e}, bias {p['bias']})", size=10, anchor="middle",
                 colour=BLUE)
        svg.text(x0 + bw * (1 + e + m / 2), under, f"mantissa ({m})", size=10, anchor="middle", colour=GREEN)
        svg.text(x0, y + 60, f"largest {sci(p['max'])}  ·  smallest normal {sci(p['min_normal'])}  ·  "
                 f"epsilon {power_of_two(-m)} ≈ {sci(p['eps'])}  ·  π → {value!r}", size=12)
        svg.text(x0, y + 77, use, size=11, colour=MUTED)
        y += 118
    lines(svg, 24, y + 2, [
        "Epsilon is the gap between 1 and the next number: the relative precision. bf16 keeps fp32's 8 exponent "
        "bits (the same range) and 7 of",
        "its 23 mantissa bits, so converting is rounding away the low half of the word; fp16 has 3 more mantissa "
        "bits but 3 fewer exponent bits.",
        "Grey hatching: the 13 bits of an fp32 word that TF32 leaves out (rounded here to nearest, ties to even).",
    ], size=12)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# ladder.svg (docs/README.md and README.md)

LADDER_STAGES = [f"{s:02d}" for s in range(7)]


def latest_ladder(root):
    """(directory, results) of the committed ladder run with the latest meta date among those in
    which every C++ stage finished: docs/results/*/ladder/results.json. A new results directory
    with a full ladder changes the figure by regeneration alone."""
    runs = []
    for name in sorted((root / "docs" / "results").glob("*/ladder/results.json")):
        with open(name, encoding="utf-8") as f:
            results = json.load(f)
        done = {e["stage"] for e in results["entries"] if e["kind"] == "cpp" and e["status"] == "ok"}
        if done >= set(LADDER_STAGES):
            runs.append((results["meta"]["date"], name.parent.parent.name, results))
    if not runs:
        raise SystemExit("figures: no docs/results/*/ladder/results.json has every C++ stage: ladder.svg has "
                         "nothing to draw")
    date, directory, results = max(runs, key=lambda run: (run[0], run[1]))
    return directory, results


def ladder(path, root):
    directory, results = latest_ladder(root)
    meta = results["meta"]
    entries = {(e["kind"], e["stage"]): e for e in results["entries"] if e["status"] == "ok"}
    torch = [e for (kind, _), e in sorted(entries.items()) if kind == "torch"]
    W, H = 980, 520
    svg = canvas(W, H, f"The ladder: training throughput per stage, GPT-2 {meta['model_title']}, "
                 f"B = {meta['batch']}, T = {meta['seq']}",
                 f"tokens/s, median over the timed steps (higher is better); {meta['gpu']}, measured "
                 f"{meta['date'][:10]}: docs/results/{directory}/ladder/results.json",
                 desc=f"Bar chart: tokens per second of each C++ stage 00-06 and of the PyTorch entries of the same "
                      f"run beside their stages, {meta['gpu']}, {meta['date'][:10]}.")
    left, right = 86, W - 24
    top, height = 96, 280
    bottom = top + height
    vmax = math.ceil(max(e["tokens_per_s"] for e in entries.values()) * 1.1 / 100e3) * 100e3
    group = (right - left) / len(LADDER_STAGES)
    bar = 34

    def Y(v):
        return bottom - v / vmax * height

    for t in range(0, int(vmax) + 1, 100_000):
        svg.line(left, Y(t), right, Y(t), colour="#e9e9e9")
        svg.text(left - 8, Y(t) + 4, fmt_si(t) if t else "0", size=11, anchor="end")
    svg.text(30, (top + bottom) / 2, "tokens/s", size=12, anchor="middle", rotate=-90)
    for i, stage in enumerate(LADDER_STAGES):
        cx = left + group * (i + 0.5)
        colour = STAGE_COLOURS[i]
        cpp, pytorch = entries.get(("cpp", stage)), entries.get(("torch", stage))
        bx = cx - bar / 2 if not pytorch else cx - bar - 3
        v = cpp["tokens_per_s"]
        svg.rect(bx, Y(v), bar, bottom - Y(v), colour)
        svg.text(bx + bar / 2, Y(v) - 6, fmt_si(v), size=11, anchor="middle", weight="bold")
        if pytorch:
            v = pytorch["tokens_per_s"]
            svg.rect(cx + 3, Y(v), bar, bottom - Y(v), colour, stroke=colour, width=1.8, dash="5,3", opacity=0.3)
            svg.text(cx + 3 + bar / 2, Y(v) - 6, fmt_si(v), size=11, anchor="middle")
        svg.text(cx, bottom + 18, stage, size=13, anchor="middle", weight="bold")
        svg.text(cx, bottom + 33, STAGE_NAMES[i], size=11, anchor="middle", colour="#444")
    svg.line(left, bottom, right, bottom, colour="#444")
    ly = bottom + 66
    svg.rect(24, ly - 11, 16, 12, "#777")
    svg.text(46, ly, "C++ stage", size=12)
    svg.rect(140, ly - 11, 16, 12, "#777", stroke="#777", width=1.5, dash="4,2", opacity=0.3)
    svg.text(162, ly, "PyTorch in the same run: " + ("; ".join(f"{e['stage']} {e['short']}" for e in torch)
                                                      if torch else "none"), size=12)
    timed = {e["timed_steps"] for e in entries.values()}
    lines(svg, 24, ly + 26, [
        f"Every entry trained from the same checkpoint on the same data, {meta['steps']} steps, the first "
        f"{meta['skip']} not timed ({' or '.join(str(t) for t in sorted(timed))} timed); one process on one GPU: "
        "stage 06 here is stage 05",
        "with NCCL's hooks (several GPUs: chapter 06). The run drawn: of docs/results/*/ladder/results.json, the "
        "latest in which every C++ stage finished.",
    ], size=11, colour=MUTED, step=16)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# roofline.svg (stage 00's kernels against the H200's roofs)

# The roofs: NVIDIA H200 Tensor Core GPU data sheet (NVIDIA, 2023,
# https://www.nvidia.com/en-us/data-center/h200/), H200 SXM column; not measured here.
H200_HBM_TB_S = 4.8       # "GPU Memory Bandwidth 4.8TB/s" (HBM3e), 10¹² bytes a second
H200_BF16_TFLOPS = 989.0  # "BF16 Tensor Core 1,979 TFLOPS" with sparsity: 989 dense
H200_FP32_TFLOPS = 67.0   # "FP32 67 TFLOPS": the CUDA cores' FMA rate, what stage 00's matmuls use
# The points: stage 00's rows of the kernel benchmark in the latest committed H200 run that has
# them (a new results directory changes the figure by regeneration alone). Each row is one op
# timed alone (median of 20 warm runs, the L2 emptied before each); `bytes` and `flops` are those
# common/train/op_cost.h counts (the least the op must move; attention's FLOPs over the causal
# half, settings.attention_flops).
ROOFLINE_BATCH = 16
# The runs made before commit e9a0ed3 gave stage 00's LayerNorm, causal softmax and classifier a
# warp or a block per row: in these the three are the first versions, a thread per row.
FIRST_VERSION_RUNS = {"2026-11-23_h100", "2026-11-27_h200", "2026-11-28_h200", "2026-11-28_h200_9cf1cf3"}
# The points labelled: (op, pass) -> label
ROOFLINE_LABELS = {("Matmul lm_head", "forward"): "LM head fwd", ("Matmul lm_head", "backward"): "LM head bwd",
                   ("Matmul fc", "forward"): "fc fwd", ("Matmul fc", "backward"): "fc bwd",
                   ("Attention", "forward"): "attention fwd", ("Attention", "backward"): "attention bwd"}
PASS_SHORT = {"forward": "fwd", "backward": "bwd"}


def roofline_run(root):
    """The latest committed H200 run (a measured.Run) with stage 00's kernels."""
    found = [r for r in committed_runs(root) if r.model == "H200" and r.kernels.get("00", {}).get("rows")]
    if not found:
        raise SystemExit("figures: no docs/results/*/kernels/stage00.json of an H200: roofline.svg draws the "
                         "H200's roofs; update tests/docs/course_figures.py")
    return found[-1]


def stage00_rows(root):
    """(points, strip, run, latest): the rows of stage 00 at B = 16 that were measured, split into
    those with FLOPs counted (points: op, pass, intensity FLOP/B, TFLOP/s) and those with bytes only
    (strip: op, pass, GB/s). Left out: the fusion slots stage 00 leaves unfused (`source`
    "unfused: ..."), whose single ops have rows of their own, and the optimizer's row, which has no
    batch size."""
    latest = roofline_run(root)
    run = latest.kernels["00"]
    points, strip = [], []
    for r in run["rows"]:
        if r.get("batch") != ROOFLINE_BATCH or r.get("status") != "ok" or r["source"].startswith("unfused"):
            continue
        if r.get("flops"):
            points.append((r["op"], r["pass"], r["flops"] / r["bytes"], r["flops"] / r["ms_median"] / 1e9))
        else:
            strip.append((r["op"], r["pass"], r["bytes"] / r["ms_median"] / 1e6))
    return points, strip, run, latest


def roofline(path, root):
    points, strip, run, latest = stage00_rows(root)
    directory = latest.name
    commit = f"commit {latest.commit}" if latest.commit else directory
    matmuls = [tflops for op, _, _, tflops in points if op.startswith("Matmul")]
    attention = [tflops for op, _, _, tflops in points if op == "Attention"]
    ridge_bf16 = H200_BF16_TFLOPS / H200_HBM_TB_S  # FLOP/B where the slope meets the roof: 206
    ridge_fp32 = H200_FP32_TFLOPS / H200_HBM_TB_S  # 14
    W, H = 1040, 720
    svg = canvas(W, H, "The H200's roofline, with stage 00's kernels",
                 f"GPT-2 124M, B = {ROOFLINE_BATCH}, T = {run['settings']['seq']}, fp32: each op timed alone "
                 f"(median, L2 emptied); roofs from the H200 SXM data sheet",
                 desc="Log-log roofline: the 4.8 TB/s HBM3e slope under a 989 TFLOP/s bf16 roof (ridge ≈ 206 FLOP/B) "
                      f"and a 67 TFLOP/s fp32 roof (ridge ≈ 14 FLOP/B); stage 00's matmuls sit at "
                      f"{min(matmuls):.0f}-{max(matmuls):.0f} TFLOP/s, attention at {min(attention):.1f}-"
                      f"{max(attention):.1f}; the ops with no FLOPs counted are bars of achieved bandwidth at the left.")
    first = (": its LayerNorm, softmax (inside attention) and classifier are the first versions, one thread per "
             "row" if directory in FIRST_VERSION_RUNS else "")
    svg.text(24, 68, f"Stage 00 as measured at {commit} ({run['date'][:10]}){first}", size=12, colour=MUTED)

    # Left: the ops with no FLOPs counted. They have no intensity, so no place on the x axis; no
    # FLOPs are estimated for them: each is drawn as its achieved GB/s ÷ the 4.8 TB/s of the slope.
    sx, sw, top = 128, 160, 118
    svg.text(24, top - 20, "No FLOPs counted: achieved GB/s ÷ 4.8 TB/s", size=13, weight="bold")
    row_h = 30
    for k, (op, pass_, gbs) in enumerate(strip):
        y = top + k * row_h
        share = gbs / (H200_HBM_TB_S * 1e3)
        svg.text(sx - 8, y + 13, f"{op} {PASS_SHORT.get(pass_, pass_)}", size=11, anchor="end",
                 weight="bold" if op == "LayerNorm" else "normal")
        svg.rect(sx, y + 2, sw, 14, "#f0f0f0")
        svg.rect(sx, y + 2, share * sw, 14, BLUE, opacity=0.9)
        svg.text(sx + sw + 8, y + 13, f"{share:.0%}", size=11, weight="bold")
        svg.text(sx + sw + 44, y + 13, f"{gbs:,.0f} GB/s", size=10, colour=MUTED)
    bottom = top + len(strip) * row_h
    copy = run["ceilings"]["copy"]["gb_per_s"]  # a device-to-device copy, measured in the same run
    cx = sx + copy / (H200_HBM_TB_S * 1e3) * sw
    svg.line(cx, top - 6, cx, bottom - 8, colour="#222", width=1.2, dash="4,3")
    svg.line(sx + sw, top - 6, sx + sw, bottom - 8, colour="#222", width=1.2)
    for t in (0, 0.5, 1):
        svg.text(sx + t * sw, bottom + 6, f"{t:.0%}", size=10, anchor="middle", colour=MUTED)
    lines(svg, 24, bottom + 28, [
        f"Dashed: a copy, measured in the same run, {copy:,.0f} GB/s",
        f"({copy / (H200_HBM_TB_S * 1e3):.0%} of the slope). Solid: the slope itself.",
        "Bytes: the least each op must move (op_cost.h);",
        "no FLOPs are estimated for these ops.",
    ], size=11, colour=MUTED, step=15)

    # Right: the roofline, log-log.
    left, right, ptop, pbottom = 468, W - 28, 100, 560
    x0, x1, y0, y1 = 1.0, 2000.0, 1.0, 2000.0
    lx, ly = math.log10(x1 / x0), math.log10(y1 / y0)

    def X(v):
        return left + math.log10(v / x0) / lx * (right - left)

    def Y(v):
        return pbottom - math.log10(v / y0) / ly * (pbottom - ptop)

    for decade in (1, 10, 100, 1000):
        for m in (1, 2, 5):
            t = decade * m
            if t > x1:
                continue
            svg.line(X(t), ptop, X(t), pbottom, colour="#dcdcdc" if m == 1 else "#f0f0f0")
            svg.line(left, Y(t), right, Y(t), colour="#dcdcdc" if m == 1 else "#f0f0f0")
            svg.text(X(t), pbottom + 17, f"{t:,}", size=11, anchor="middle", colour="#222" if m == 1 else MUTED)
            svg.text(left - 6, Y(t) + 4, f"{t:,}", size=11, anchor="end", colour="#222" if m == 1 else MUTED)
    svg.line(left, pbottom, right, pbottom, colour="#444")
    svg.line(left, ptop, left, pbottom, colour="#444")
    svg.text((left + right) / 2, pbottom + 38, "arithmetic intensity: FLOPs ÷ bytes moved (FLOP per byte, log)",
             size=12, anchor="middle")
    svg.text(left - 44, (ptop + pbottom) / 2, "attainable TFLOP/s (log)", size=12, anchor="middle", rotate=-90)

    # The roofs: the slope (4.8 TB/s × intensity) up to each ridge, then flat.
    svg.polyline([(X(x0), Y(H200_HBM_TB_S * x0)), (X(ridge_bf16), Y(H200_BF16_TFLOPS)), (X(x1), Y(H200_BF16_TFLOPS))],
                 "#222", width=2.2)
    svg.polyline([(X(ridge_fp32), Y(H200_FP32_TFLOPS)), (X(x1), Y(H200_FP32_TFLOPS))], ORANGE, width=2.2,
                 dash="8,4")
    for ridge, tflops, colour in ((ridge_bf16, H200_BF16_TFLOPS, "#222"), (ridge_fp32, H200_FP32_TFLOPS, ORANGE)):
        svg.line(X(ridge), Y(tflops), X(ridge), pbottom, colour=colour, width=1, dash="3,3")
        svg.add(f'<circle cx="{X(ridge):.1f}" cy="{Y(tflops):.1f}" r="4" fill="white" stroke="{colour}" '
                f'stroke-width="2"/>')
        halo(svg, X(ridge) + 5, pbottom - 8, f"ridge ≈ {ridge:.0f} FLOP/B", size=11, colour=colour)
    halo(svg, right - 4, Y(H200_BF16_TFLOPS) - 8, f"bf16 tensor cores, dense: {H200_BF16_TFLOPS:g} TFLOP/s",
         size=12, anchor="end", weight="bold")
    halo(svg, right - 4, Y(H200_FP32_TFLOPS) - 8, f"fp32 CUDA cores: {H200_FP32_TFLOPS:g} TFLOP/s", size=12,
         anchor="end", weight="bold", colour=ORANGE)
    # The slope's label, under it.
    at = 1.6
    angle = math.degrees(math.atan2(Y(H200_HBM_TB_S * 10 * at) - Y(H200_HBM_TB_S * at), X(10 * at) - X(at)))
    bx, by = X(at) + 10, Y(H200_HBM_TB_S * at) + 16
    svg.add(f'<text x="{bx:.1f}" y="{by:.1f}" font-size="12" font-weight="bold" fill="#222" {FONT} '
            f'transform="rotate({angle:.2f} {bx:.1f} {by:.1f})">HBM3e: {H200_HBM_TB_S:g} TB/s × intensity</text>')

    # The points: forward filled, backward hollow; a handful labelled, those in the crowd of
    # matmuls below it with a leader line: (dx, dy, anchor) from the point.
    offsets = {"fc fwd": (-50, 36, "middle"), "LM head fwd": (-20, 62, "middle"), "fc bwd": (10, 88, "middle"),
               "LM head bwd": (50, 36, "middle"), "attention fwd": (-10, 12, "end"),
               "attention bwd": (-10, -6, "end")}
    for op, pass_, intensity, tflops in points:
        px, py = X(intensity), Y(tflops)
        fill = BLUE if pass_ == "forward" else "white"
        svg.add(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="4.5" fill="{fill}" stroke="{BLUE}" stroke-width="1.8"/>')
    for op, pass_, intensity, tflops in points:
        label = ROOFLINE_LABELS.get((op, pass_))
        if not label:
            continue
        px, py = X(intensity), Y(tflops)
        dx, dy, anchor = offsets[label]
        if anchor == "middle":
            svg.line(px + dx * 5 / dy, py + 5, px + dx, py + dy - 12, colour="#888", width=0.8)
        halo(svg, px + dx, py + dy, f"{label}: {tflops:.1f}", size=11, anchor=anchor)
    matmuls = [t for op, _, _, t in points if op.startswith("Matmul")]
    attention = [t for op, _, _, t in points if op == "Attention"]
    ly0 = pbottom + 64
    svg.add(f'<circle cx="{left + 6:.1f}" cy="{ly0 - 4:.1f}" r="4.5" fill="{BLUE}" stroke="{BLUE}" '
            f'stroke-width="1.8"/>')
    svg.text(left + 16, ly0, "forward", size=11)
    svg.add(f'<circle cx="{left + 82:.1f}" cy="{ly0 - 4:.1f}" r="4.5" fill="white" stroke="{BLUE}" '
            f'stroke-width="1.8"/>')
    svg.text(left + 92, ly0, "backward; unlabelled: the qkv, attn_proj and fc_proj matmuls", size=11)
    lines(svg, left, ly0 + 20, [
        f"The matmuls (cuBLAS, fp32, no tensor cores): {min(matmuls):.0f}-{max(matmuls):.0f} TFLOP/s, "
        f"{min(matmuls) / H200_FP32_TFLOPS:.0%}-{max(matmuls) / H200_FP32_TFLOPS:.0%} of",
        f"the fp32 roof. Attention (T × T scores in memory): {min(attention):.1f}-{max(attention):.1f} TFLOP/s, "
        f"{min(attention) / H200_FP32_TFLOPS:.0%}-{max(attention) / H200_FP32_TFLOPS:.0%}.",
    ], size=11, colour=MUTED, step=15)
    svg.text(24, H - 14, f"Points: docs/results/{directory}/kernels/stage00.json, the rows at B = {ROOFLINE_BATCH} "
             "(fusion slots left unfused and the optimizer's row, of no batch size, left out).", size=11,
             colour=MUTED)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# step_path.svg (one training step, through the code)

# Every name the figure draws, with the file it is in: the script stops if one is no longer there.
STEP_PATH_CODE = [
    ("stages/00_fp32_baseline/stage.cuh", [
        "struct Stage00 : CudaBackend {", "using act_t = float;",
        "static constexpr Precision kPrecision = Precision::FP32;", "static constexpr int kVocabMultiple = 1;",
        "static constexpr bool kCaptureStep = false;", "static constexpr int kLossChunkRows = 0;",
        "using Matmul = stage00::CublasMatmul;", "using Attention = stage00::MaterializedAttention;",
        "using ResidualLayerNorm = Unfused;", "using Optimizer = stage00::AdamW;", "using Parallel = SingleProcess;"]),
    ("stages/04_fused_kernels/stage.cuh", [
        "struct Stage04 : Stage03 {", "static constexpr bool kCaptureStep = true;",
        "using Matmul = stage04::EpilogueMatmul;", "using ResidualLayerNorm = stage04::ResidualLayerNorm;"]),
    ("common/train/policy.h", [
        "struct Ops {", "using Matmul = typename S::Matmul;", "using Attention = typename S::Attention;",
        "using MatmulBiasGelu = SlotOr<typename S::MatmulBiasGelu, compose::MatmulThenGelu<Matmul, Gelu>>;",
        "static_assert(activations_fit<typename S::act_t>(S::kPrecision),", "std::vector<OpRow> op_table()"]),
    ("common/train/compose.h", ["MatmulThenGelu"]),
    ("common/train/model_graph.h", [
        "class ModelGraph {", "using O = Ops<S>;", "void forward(", "void backward(",
        'op("embedding"', 'op("ln_1"', 'op("qkv"', 'op("attention"', 'op("attn_proj"', 'op("residual+ln_2"',
        'op("fc+gelu"', 'op("fc_proj"', 'op("residual+ln_1"', 'op("lm_head"', 'op("classifier"',
        'op("lm_head backward"', 'op("fc_proj+gelu backward"', 'op("embedding backward"',
        "O::Embedding::forward", "O::Attention::forward", "O::ResidualLayerNorm::forward",
        "O::MatmulBiasGelu::forward", "O::ClassifierWithGrad::forward_backward", "O::MatmulBackwardGelu::backward",
        "gradients_final(L - 1 - l);"]),
    ("common/train/gpt.h", [
        "StepResult train_step(", "zero_grad();", "enqueue_forward(B, T);",
        "enqueue_backward(loss_scale, i == k - 1);", "enqueue_update(settings);", 'graph_.op("gradient reduction"',
        "optimizer_.step(", "S::capture_step(ctx_, enqueue);", "S::replay_step(ctx_);", "StepResult sync() {"]),
    ("common/train/loop.h", [
        "int train_with(TrainOptions opt,", "batches[i] = train_data.next();",
        "const float lr = learning_rate(step,", "model.train_step(batches,", "log.step(r);"]),
    ("common/train/main.inl", ["return gpt::train<Stage>(opt);"]),
    ("stages/train_main.cu.in", ["#define GPT_STAGE @GPT_STAGE_TYPE@"]),
    ("stages/CMakeLists.txt", ['set(GPT_STAGE_TYPE "gpt::Stage${num}")',
                               "configure_file(${CMAKE_CURRENT_SOURCE_DIR}/train_main.cu.in"]),
]


def step_path(path, root):
    for name, snippets in STEP_PATH_CODE:
        text = (root / name).read_text(encoding="utf-8")
        gone = [s for s in snippets if s not in text]
        if gone:
            raise SystemExit(f"figures: {name} no longer has {gone[0]!r}, which step_path.svg draws: update "
                             "tests/docs/course_figures.py")
    W, H = 1200, 640
    svg = canvas(W, H, "One training step, through the code",
                 "what a stage chooses, how the choice reaches the kernels, and what runs them: the same four "
                 "pieces in every trainer, only the first differs from stage to stage",
                 desc="Four boxes, left to right: the stage policy (stage.cuh), the op table Ops<S> (policy.h), the "
                      "model graph (model_graph.h) and the training loop (loop.h, gpt.h).")
    bw, gap, top, bh = 262, 34, 84, 440
    boxes = [
        ("1  The policy", "a struct of types and constants", BLUE, [
            ("struct Stage00 : CudaBackend {", "code"),
            ("  using act_t = float;", "code"),
            ("  kPrecision = Precision::FP32;", "code"),
            ("  kVocabMultiple = 1;", "code"),
            ("  kCaptureStep = false;", "code"),
            ("  kLossChunkRows = 0;", "code"),
            ("  using Matmul = stage00::CublasMatmul;", "code"),
            ("  using Attention =", "code"),
            ("      stage00::MaterializedAttention;", "code"),
            ("  using ResidualLayerNorm = Unfused;", "code"),
            ("  using Optimizer = stage00::AdamW;", "code"),
            ("  using Parallel = SingleProcess;", "code"),
            ("};", "code"),
            ("", None),
            ("A later stage inherits and changes", "note"),
            ("a few lines:", "note"),
            ("struct Stage04 : Stage03 {", "code"),
            ("  kCaptureStep = true;", "code"),
            ("  using Matmul = stage04::EpilogueMatmul;", "code"),
            ("  using ResidualLayerNorm =", "code"),
            ("      stage04::ResidualLayerNorm; …", "code"),
        ], ["stages/NN_*/stage.cuh"]),
        ("2  The op table Ops<S>", "which kernel each op uses", ORANGE, [
            ("template <class S> struct Ops {", "code"),
            ("  using Matmul = typename S::Matmul;", "code"),
            ("  using Attention = typename S::Attention;", "code"),
            ("  …", "code"),
            ("  using MatmulBiasGelu = SlotOr<", "code"),
            ("      typename S::MatmulBiasGelu,", "code"),
            ("      compose::MatmulThenGelu<", "code"),
            ("          Matmul, Gelu>>;", "code"),
            ("  …", "code"),
            ("};", "code"),
            ("", None),
            ("A fusion slot the stage leaves Unfused", "note"),
            ("runs its single ops one after the other", "note"),
            ("(compose.h): stage 04 fills the slots.", "note"),
            ("", None),
            ("static_assert: act_t fits kPrecision.", "note"),
            ("op_table<S>(): each op and its file,", "note"),
            ("printed by every trainer's --help.", "note"),
        ], ["common/train/policy.h", "(slots: common/train/compose.h)"]),
        ("3  The model graph", "ModelGraph<S>: the same for every stage", GREEN, [
            ("forward(): using O = Ops<S>", "head"),
            ('op("embedding"): O::Embedding', "code"),
            ('op("ln_1"): O::LayerNorm', "code"),
            ("per block, × 12:", "note"),
            ('  op("qkv"): O::Matmul', "code"),
            ('  op("attention"): O::Attention', "code"),
            ('  op("attn_proj"): O::Matmul', "code"),
            ('  op("residual+ln_2"): O::ResidualLayerNorm', "code"),
            ('  op("fc+gelu"): O::MatmulBiasGelu', "code"),
            ('  op("fc_proj"): O::Matmul', "code"),
            ('  op("residual+ln_1"): O::ResidualLayerNorm', "code"),
            ('op("lm_head"): O::Matmul', "code"),
            ("", None),
            ("backward(): the same ops in reverse", "head"),
            ('op("classifier"): O::ClassifierWithGrad', "code"),
            ('op("lm_head backward")', "code"),
            ('blocks 11 … 0: op("fc_proj+gelu backward")', "code"),
            ("    O::MatmulBackwardGelu, …", "code"),
            ('op("embedding backward")', "code"),
            ("gradients_final(bucket): each block's", "note"),
            ("gradients, once final, to the reduction", "note"),
        ], ["common/train/model_graph.h", "(its buffers: common/train/buffers.h)"]),
        ("4  The training loop", "train_with<S>(), one iteration a step", PURPLE, [
            ("data", "head"),
            ("batches[i] = train_data.next();", "code"),
            ("lr = learning_rate(step, …);", "code"),
            ("step", "head"),
            ("model.train_step(batches, …)   GPT<S>:", "code"),
            ("  zero_grad();", "code"),
            ("  per micro-batch:", "note"),
            ("    enqueue_forward(B, T);", "code"),
            ("    enqueue_backward(loss_scale, …);", "code"),
            ("optimizer", "head"),
            ("  enqueue_update(settings);", "code"),
            ('    "gradient reduction" (Parallel)', "code"),
            ("    optimizer_.step(…): norm, clip, AdamW", "code"),
            ("  sync(): the step's one wait", "code"),
            ("  kCaptureStep: captured once as a", "note"),
            ("  CUDA Graph (S::capture_step), then", "note"),
            ("  S::replay_step, one launch a step", "note"),
            ("log", "head"),
            ("log.step(r);  loss, lr, grad norm, ms,", "code"),
            ("  tokens/s, MFU", "code"),
        ], ["common/train/loop.h", "(the step: common/train/gpt.h)"]),
    ]
    for i, (heading, sub, colour, body, files) in enumerate(boxes):
        x = 24 + i * (bw + gap)
        svg.rect(x, top, bw, bh, colour, opacity=0.07, stroke=colour, width=1.8)
        svg.rect(x, top, bw, 44, colour, opacity=0.85)
        svg.text(x + 10, top + 19, heading, size=14, weight="bold", colour="white")
        svg.text(x + 10, top + 36, sub, size=11, colour="white")
        y = top + 64
        for text, kind in body:
            indent = 3.2 * (len(text) - len(text.lstrip()))  # SVG collapses the spaces of an indent
            text = text.strip()
            if kind == "code":
                svg.text(x + 10 + indent, y, text, size=10.5, colour="#222")
            elif kind == "head":
                svg.text(x + 10 + indent, y, text, size=11, weight="bold", colour=colour)
            elif kind == "note":
                svg.text(x + 10 + indent, y, text, size=10.5, colour=MUTED)
            y += 18 if kind else 8
        for k, f in enumerate(files):
            svg.text(x + bw / 2, top + bh + 20 + 16 * k, f, size=12 if k == 0 else 11, anchor="middle",
                     weight="bold" if k == 0 else "normal", colour="#222" if k == 0 else MUTED)
        if i:
            arrow(svg, x - gap + 4, top + 22, x - 4, top + 22, width=2)
    lines(svg, 24, top + bh + 70, [
        "One trainer per stage: stages/CMakeLists.txt fills stages/train_main.cu.in with the stage's header and "
        "#define GPT_STAGE gpt::Stage04 (say); its main(), common/train/main.inl,",
        "calls gpt::train<Stage>(opt). The graph reads its ops only from Ops<S>, never from the stage directly. Each "
        "box's lines are taken from its file, shortened (…).",
    ], size=12)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# lm_head_rows.svg (chapter 05: why 50257 columns are slow)

ROW_BOUNDARY = 16  # bytes: the loads of cuBLASLt's fast kernels (common/cuda/gemm.cuh, "Alignment")
BF16_BYTES = 2
ROWS_DRAWN = 8


def vocab_sizes(root):
    """V (common/model/config.h) and stage 05's Vp, V rounded up to kVocabMultiple as padded_vocab does."""
    config = (root / "common/model/config.h").read_text(encoding="utf-8")
    stage05 = (root / "stages/05_vocab_padding/stage.cuh").read_text(encoding="utf-8")
    v = re.search(r"int vocab_size = (\d+);", config)
    multiple = re.search(r"static constexpr int kVocabMultiple = (\d+);", stage05)
    if not (v and multiple):
        raise SystemExit("figures: no vocab_size in common/model/config.h or kVocabMultiple in stage 05: update "
                         "tests/docs/course_figures.py")
    v, multiple = int(v.group(1)), int(multiple.group(1))
    return v, (v + multiple - 1) // multiple * multiple, multiple


def alignment_of(stride):
    """The largest power of two up to 16 that divides a row's bytes: gemm.cuh's detail::alignment."""
    a = ROW_BOUNDARY
    while a > 1 and stride % a:
        a //= 2
    return a


def lm_head_rows(path, root):
    v, vp, multiple = vocab_sizes(root)

    def offsets(columns):  # where the rows drawn start, past a 16-byte boundary
        return ", ".join(str(BF16_BYTES * columns * r % ROW_BOUNDARY) for r in range(ROWS_DRAWN))

    W, H = 1040, 800  # H: cut to the last line below
    svg = canvas(W, H, "Rows of the logits against 16-byte boundaries",
                 f"bf16 logits, one row per position, row-major: row r starts 2 × columns × r bytes after row 0 "
                 f"(cudaMalloc'd: on a 256-byte boundary); the first {ROWS_DRAWN} rows' starts",
                 desc=f"The start of each of the first {ROWS_DRAWN} rows of bf16 logits against 16-byte boundaries: "
                      f"with {v} columns they lie {offsets(v)} bytes past one; with {vp}, {offsets(vp)}.")
    px = 9                  # pixels per byte
    window = 3 * ROW_BOUNDARY
    gx = 250                # where the drawn bytes start

    def panel(y, columns, heading, sub):
        stride = BF16_BYTES * columns
        svg.text(24, y, heading, size=14, weight="bold")
        svg.text(24, y + 18, sub, size=12, colour=MUTED)
        y += 40
        for b in range(0, window + 1, ROW_BOUNDARY):
            svg.text(gx + b * px, y - 4, f"+{b}" if b else "16·k", size=10, anchor="middle", colour=MUTED)
        aligned = 0
        for r in range(ROWS_DRAWN):
            start = stride * r
            off = start % ROW_BOUNDARY
            aligned += off == 0
            ry = y + 4 + r * 28
            svg.text(24, ry + 15, f"row {r}", size=12, weight="bold")
            svg.text(80, ry + 15, f"starts at byte {start:,}", size=11, colour=TEXT)
            # The window: the 16-byte block the row starts in and the two after it. Before the
            # start, the end of row r − 1 (grey); the row's elements before its first boundary,
            # which no aligned 16-byte load can start from, orange; the rest in 16-byte loads, blue.
            head = (ROW_BOUNDARY - off) % ROW_BOUNDARY
            cells = []
            for byte in range(0, window, BF16_BYTES):
                if byte < off:
                    fill = "#d0d0d0"
                elif byte < off + head:
                    fill = ORANGE
                else:
                    fill = BLUE
                cells.append(f'<rect x="{gx + byte * px + 1}" y="{ry + 2}" width="{BF16_BYTES * px - 2}" '
                             f'height="18" fill="{fill}"/>')
            svg.add('<g fill-opacity="0.85">' + "".join(cells) + "</g>")
            for b in range(0, window + 1, ROW_BOUNDARY):
                svg.line(gx + b * px, ry - 2, gx + b * px, ry + 24, colour="#222", width=1.6)
            svg.line(gx + off * px, ry - 1, gx + off * px, ry + 23, colour=RED if off else GREEN, width=2.4)
            status = "aligned" if off == 0 else f"{head // BF16_BYTES} element{'s' if head > 2 else ''} before a " \
                                                 "boundary"
            svg.text(gx + window * px + 14, ry + 15, f"mod 16 = {off:2d}", size=12, weight="bold",
                     colour=GREEN if off == 0 else RED)
            svg.text(gx + window * px + 112, ry + 15, status, size=11, colour=TEXT)
        period = ROW_BOUNDARY // math.gcd(stride, ROW_BOUNDARY)
        end = y + 4 + ROWS_DRAWN * 28 + 14
        if period == 1:
            power = stride & -stride  # the largest power of two dividing the row's bytes
            verdict = (f"every row starts on a 16-byte boundary ({aligned} of {ROWS_DRAWN} drawn); in fact on a "
                       f"{power}-byte one: {stride:,} = {power} × {stride // power:,}")
        else:
            verdict = (f"one row in {period} starts on a 16-byte boundary ({aligned} of {ROWS_DRAWN} drawn); the "
                       f"matrix is {alignment_of(stride)}-byte aligned, as gemm.cuh's alignment() finds it")
        svg.text(24, end, verdict, size=12, weight="bold", colour=TEXT)
        return end

    stride = BF16_BYTES * v
    period = ROW_BOUNDARY // math.gcd(stride, ROW_BOUNDARY)
    y = panel(92, v, f"V = {v:,} columns (stages 02-04)",
              f"a row is 2 × {v:,} = {stride:,} bytes; {stride:,} mod 16 = {stride % ROW_BOUNDARY}: each row starts "
              f"{stride % ROW_BOUNDARY} bytes further past a boundary than the one before")
    stride_p = BF16_BYTES * vp
    y = panel(y + 46, vp, f"Vp = {vp:,} columns (stage 05: V rounded up to kVocabMultiple = {multiple})",
              f"a row is 2 × {vp:,} = {stride_p:,} bytes = 16 × {stride_p // ROW_BOUNDARY:,}; the {vp - v} extra "
              "columns are zero weights, masked out of the softmax")
    ly = y + 34
    svg.rect(24, ly - 11, 20, 14, "#d0d0d0")
    svg.text(50, ly, "end of the row before", size=12)
    svg.rect(220, ly - 11, 20, 14, ORANGE, opacity=0.85)
    svg.text(246, ly, "the row, before its first 16-byte boundary", size=12)
    svg.rect(540, ly - 11, 20, 14, BLUE, opacity=0.85)
    svg.text(566, ly, "the row, in 16-byte (8-element) pieces", size=12)
    end = lines(svg, 24, ly + 28, [
        "One cell: one bf16 element (2 bytes); black lines: 16-byte boundaries. cuBLASLt's fast kernels load 16 "
        "bytes at a time (common/cuda/gemm.cuh,",
        f"\"Alignment\"): with rows only {alignment_of(stride)}-byte aligned it must pick slower kernels, or has "
        "none and multiplies padded copies; any kernel",
        f"that reads rows 16 bytes at a time starts ragged on {period - 1} rows in {period}. The offsets are computed "
        "by the script from V and kVocabMultiple as the code defines them.",
    ], size=12)
    svg.height = int(end)
    svg.write(str(path))



# step_NN.svg (chapter NN, "Measured effect"): where one step's time goes in stage NN, beside the
# stage before it, from the latest run that has both stages' kernel benchmarks and its ladder.
# tests/bench/step_breakdown.py draws it (its bars, groups and ladder marks), from the committed
# files as they are: a new results directory changes the figure by regeneration alone.

def latest_kernel_run(root, stages):
    """The latest results directory with kernels/stageNN.json for every stage of `stages`, and
    ladder/results.json."""
    runs = [r.dir for r in committed_runs(root)
            if all(n in r.kernels for n in stages) and (r.dir / "ladder" / "results.json").is_file()]
    if not runs:
        raise SystemExit(f"figures: no docs/results/* has the kernel benchmarks of stages {', '.join(stages)} "
                         "and a ladder")
    return runs[-1]


def step_bars(stage):
    def draw(path, root):
        import step_breakdown  # tests/bench, on the path beside plot.py
        stages = [stage] if stage == "00" else [f"{int(stage) - 1:02d}", stage]
        run = latest_kernel_run(root, stages)
        args = ["--out", str(path), "--ladder", str(run / "ladder" / "results.json")]
        args += [str(run / "kernels" / f"stage{n}.json") for n in stages]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = step_breakdown.main(args)
        if code not in (0, 1):  # 1: drawn, a row noted as missing in the figure itself
            raise SystemExit(f"figures: step_breakdown.py could not draw {path} (exit {code})")
        # the run's directory, not this machine's path, in the figure
        text = path.read_text(encoding="utf-8").replace(str(root) + "/", "")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return draw


FIGURES = {
    "online_softmax.svg": online_softmax,
    "flash_backward_walk.svg": flash_backward_walk,
    "fusion_bytes.svg": fusion_bytes,
    "cuda_graph_timeline.svg": cuda_graph_timeline,
    "ring_all_reduce.svg": ring_all_reduce,
    "memory_per_stage.svg": memory_per_stage,
    "number_formats.svg": number_formats,
    "ladder.svg": ladder,
    "roofline.svg": roofline,
    "step_path.svg": step_path,
    "lm_head_rows.svg": lm_head_rows,
    **{f"step_{n:02d}.svg": step_bars(f"{n:02d}") for n in range(7)},
}

