#!/usr/bin/env python3
"""The static figures of docs/, drawn as SVG by hand (Python 3 standard library only).

    python3 tests/docs/figures.py            write every figure into docs/figures/
    python3 tests/docs/figures.py --check    write nothing; exit 1 if a committed figure differs
    ... [--root DIR]                         the repository (default: the one holding this file)

The CTest test docs.figures_match_script runs --check. A figure is a function of this file, of
course_figures.py beside it, of the SVG helpers they share with the benchmarks' plots
(tests/bench/plot.py) and of the committed files they read (the kernels' and trainers' sources,
the ladders' results.csv and results.json and the kernel benchmark's stageNN.json in
docs/results/), with no date and no randomness: the same inputs always give the same bytes. After
a change to any of them, or a new results directory, run it.

  attention_tiles.svg   chapter 03, "Tiles": the causal score matrix of one (batch, head) at
                        T = 256 cut into the kernel's 64 x 64 tiles (skipped, diagonal, full;
                        which blockIdx.x takes each row of tiles), and where one block keeps its
                        operands (q in registers, k and v tiles double-buffered in shared memory,
                        s and o in registers per warp).
  mma_fragments.svg     chapter 03b, "The tensor-core fragments": which of the 32 lanes of a warp
                        holds which element of A (16 x 16), B (16 x 8) and the fp32 D (16 x 8) of
                        mma.sync.m16n8k16, and how the D of two neighbouring 8-column tiles is
                        the A of the next product (a_from_accumulators).

The course's other figures are drawn by tests/docs/course_figures.py (imported here, checked with
these):

  online_softmax.svg    chapter 03, "The online softmax": one query row's scores over 4 key tiles
                        of a small fixed example; after each tile the running maximum m, the
                        factor exp(m_old - m) and the rescaled l and o, then o / l and the
                        one-pass softmax beside it (the script checks that they agree).
  flash_backward_walk.svg  chapter 03b, "The backward pass": the three launches of the backward;
                        the dk/dv kernel's blocks of 64 keys walking down their column of query
                        tiles from the diagonal, dk and dv kept in registers, and the dq kernel's
                        blocks of 64 queries walking along their row of key tiles to the diagonal,
                        dq kept in registers (no atomics); the steps of each loop body.
  fusion_bytes.svg      chapter 04, "The fusions": bytes per step before and after each fusion
                        (classifier, matmul epilogues, LayerNorm, AdamW) at GPT-2 124M, B = 16,
                        T = 1024, counted as the chapter counts them, with the H200's measured
                        times beside them.
  cuda_graph_timeline.svg  chapter 04, "CUDA Graphs": a step's host and GPU timelines with and
                        without the graph, at B = 16 (to scale, the measured step) and at B = 1
                        (predicted); schematic, from the chapter's figures, not a profile.
  ring_all_reduce.svg   chapter 06, "The idea": a ring all-reduce on
                        4 GPUs step by step (reduce-scatter, then all-gather), and the last
                        micro-batch's backward with each bucket's all-reduce on the second stream.
  memory_per_stage.svg  chapter 00, "Memory at GPT-2 124M, B = 16, T = 1024" (and the other
                        chapters' memory sections): the trainer's peak memory per stage, read from
                        the ladders' results.csv, the latest run of each GPU model.
  number_formats.svg    chapters 01, "What TF32 is", and 02, "bf16, fp16 and fp32": the bits of
                        fp32, TF32, bf16 and fp16 holding π, with largest, smallest normal and
                        epsilon computed from the bit counts (checked against struct's fp32/fp16).
  ladder.svg            docs/README.md, "The ladder so far" (and README.md): tokens/s per stage
                        and the PyTorch entries of the same run beside their stages, measured
                        only, from one ladder run: of docs/results/*/ladder/results.json the one
                        with the latest meta date in which every C++ stage finished (at present
                        2026-11-28_h200_9cf1cf3, an H200); GPU, date and directory in the caption.
  roofline.svg          chapter 00, "The yardsticks": the H200's roofline, log-log, from its data
                        sheet (4.8 TB/s HBM3e; 989 TFLOP/s bf16 dense, 67 fp32; ridges ≈ 206 and
                        ≈ 14 FLOP/B), with stage 00's kernels at B = 16 from
                        docs/results/2026-11-28_h200_9cf1cf3/kernels/stage00.json as points
                        (flops / bytes, flops / median); the ops with no FLOPs counted (LayerNorm,
                        GELU, residual, embedding, classifier) as a strip of achieved GB/s ÷ the
                        slope beside it, no FLOPs estimated. Its LayerNorm, softmax and classifier
                        are the first versions (a thread per row), as measured at 9cf1cf3.
  step_path.svg         chapter 00, "How the stages plug in": one training step through the code,
                        four boxes: the policy (stages/NN_*/stage.cuh), the op table Ops<S>
                        (common/train/policy.h), the model graph (common/train/model_graph.h),
                        the training loop (common/train/loop.h, gpt.h). Every name drawn is looked
                        up in its file first; the script stops if one is gone.
  lm_head_rows.svg      chapter 05, "Why 50257 is slow": the first 8 rows of the bf16 logits
                        against 16-byte boundaries, V = 50257 (row r starts 2·V·r bytes in:
                        0, 2, ..., 14 past a boundary) and stage 05's Vp = 50304 (every row on
                        one); V and kVocabMultiple read from common/model/config.h and stage 05.
  step_NN.svg           chapter NN, "Measured effect" (NN = 00 to 06): where one step's time goes
                        in stage NN beside the stage before it (stage 00 alone), drawn by
                        tests/bench/step_breakdown.py from the latest run that has both stages'
                        kernel benchmarks and a ladder (kernels/stageNN.json, ladder/results.json):
                        each op's median × the times a step runs it, grouped, with the ladder's
                        measured ms per step beside each bar.

The sizes drawn are the kernel's own: the constants of stages/03_flash_attention/
flash_attention.cuh and tensor_cores.cuh are read and compared with those this file draws, and so
is the comment in tensor_cores.cuh that states the fragment layout (PTX ISA, "Matrix fragments for
mma.m16n8k16"); if they
differ the script stops and says so, since a figure would no longer describe the kernel. The
fragment figure also checks, before drawing, that the packing of a_from_accumulators maps the
two D tiles onto A's layout element for element.
"""

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "bench"))  # plot.py: the SVG helpers and colours of the benchmarks
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from plot import FONT, STAGE_COLOURS, Svg  # noqa: E402

import course_figures  # noqa: E402  (the course's other figures; this directory is on sys.path)

REGENERATE = "python3 tests/docs/figures.py"

# Colours: Tableau 10, as in tests/bench/plot.py.
BLUE, ORANGE, RED, TEAL, GREEN, YELLOW, PURPLE, PINK, BROWN, GREY = STAGE_COLOURS
MUTED = "#555"

# ----------------------------------------------------------------------------------------------
# attention_tiles.svg

FLASH_SOURCE = "stages/03_flash_attention/flash_attention.cuh"
TENSOR_CORES_SOURCE = "stages/03_flash_attention/tensor_cores.cuh"
# What the figure draws: kQueryRows, kTile (flash_attention.cuh), kPad (tensor_cores.cuh), and the
# rows per warp of the trainer's op (using FlashAttention = FlashAttentionWith<32>).
QUERY_ROWS, TILE, PAD, ROWS_PER_WARP = 128, 64, 8, 32
WARPS = QUERY_ROWS // ROWS_PER_WARP
T = 256                      # the sequence length drawn: 4 x 4 tiles, 2 blocks of queries
HS = 64                      # GPT-2's head size


def kernel_constants(root):
    """kQueryRows, kTile, kPad and the trainer's rows per warp as the kernel's files define them."""
    flash = (root / FLASH_SOURCE).read_text(encoding="utf-8")
    tensor_cores = (root / TENSOR_CORES_SOURCE).read_text(encoding="utf-8")
    found = {}
    for name, text in (("kQueryRows", flash), ("kTile", flash), ("kPad", tensor_cores)):
        m = re.search(rf"constexpr int {name} = (\d+);", text)
        found[name] = int(m.group(1)) if m else None
    m = re.search(r"using FlashAttention = FlashAttentionWith<(\d+)>;", flash)
    found["rows per warp"] = int(m.group(1)) if m else None
    return found


def defs(svg):
    """The hatch of skipped tiles, the hatch of padding, and an arrowhead."""
    svg.add('<defs>'
            '<pattern id="skipped" width="8" height="8" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="8" height="8" fill="#f5f5f5"/>'
            '<line x1="0" y1="0" x2="0" y2="8" stroke="#d4d4d4" stroke-width="3"/></pattern>'
            '<pattern id="padding" width="5" height="5" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)"><rect width="5" height="5" fill="#e6e6e6"/>'
            '<line x1="0" y1="0" x2="0" y2="5" stroke="#9a9a9a" stroke-width="1.5"/></pattern>'
            '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker>'
            '<marker id="arrow-white" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
            'orient="auto"><path d="M 0 0 L 10 5 L 0 10 z" fill="white"/></marker>'
            '</defs>')


def polygon(svg, points, fill, opacity=1.0):
    pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    svg.add(f'<polygon points="{pts}" fill="{fill}" fill-opacity="{opacity}"/>')


def arrow(svg, x1, y1, x2, y2, colour="#444", width=1.5, marker="arrow"):
    svg.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{colour}" '
            f'stroke-width="{width}" marker-end="url(#{marker})"/>')


def score_matrix(svg):
    """Left: the causal T x T scores of one (batch, head), in tiles; one block per two rows of tiles."""
    n = T // TILE
    per_block = QUERY_ROWS // TILE  # rows of tiles per block
    c = 76  # pixels per tile
    gx, gy = 172, 146
    svg.text(gx + n * c / 2, 90, "keys →", size=13, anchor="middle", weight="bold")
    for j in range(n):
        svg.text(gx + (j + 0.5) * c, 110, f"{j * TILE}-{(j + 1) * TILE - 1}", size=11, anchor="middle")
        svg.text(gx + (j + 0.5) * c, 127, f"tile j = {j}", size=10, anchor="middle", colour=MUTED)
    svg.text(gx - 12, 120, "queries ↓", size=13, anchor="end", weight="bold")
    for i in range(n):
        # query0 = (gridDim.x - 1 - blockIdx.x) * 128: blockIdx.x = 0 takes the last rows
        block = n // per_block - 1 - i // per_block
        y = gy + i * c
        if i % per_block == 0:
            svg.text(gx - 12, y + c - 3, f"blockIdx.x = {block}", size=12, anchor="end", weight="bold")
            svg.text(gx - 12, y + c + 13, f"queries {i * TILE}-{(i + per_block) * TILE - 1}", size=10,
                     anchor="end", colour=MUTED)
            svg.text(gx + n * c + 8, y + c + 4, f"{i + per_block} tiles", size=11, colour=MUTED)
        for j in range(n):
            x = gx + j * c
            if j > i and j < (i // per_block + 1) * per_block:
                # Loaded by the block (its other warps need it), computed by none of these warps.
                svg.rect(x, y, c, c, "url(#skipped)")
                svg.text(x + c / 2, y + c / 2 + 4, "loaded,", size=10, anchor="middle", colour="#666")
                svg.text(x + c / 2, y + c / 2 + 17, "not used", size=10, anchor="middle", colour="#666")
            elif j > i:
                svg.rect(x, y, c, c, "url(#skipped)")
            elif j < i:
                svg.rect(x, y, c, c, BLUE, opacity=0.9)
                svg.text(x + c / 2, y + c / 2 - 2, "full", size=11, anchor="middle", colour="white")
            else:
                # Keys after the query (column > row, the upper-right triangle) are set to -inf.
                polygon(svg, [(x, y), (x + c, y), (x + c, y + c)], RED, opacity=0.22)
                polygon(svg, [(x, y), (x, y + c), (x + c, y + c)], BLUE, opacity=0.9)
                svg.text(x + 0.7 * c, y + 0.34 * c, "−∞", size=13, anchor="middle", colour="#a02828")
            svg.rect(x, y, c, c, "none", stroke="white", width=2)
        # The walk of the warps along their rows: key tile 0 up to their own.
        arrow(svg, gx + 8, y + c - 11, gx + i * c + c * 0.62, y + c - 11, colour="white", width=1.5,
              marker="arrow-white")
    for b in range(n // per_block):  # the outline of each block's rows
        svg.rect(gx, gy + b * per_block * c, n * c, per_block * c, "none", stroke="#444", width=2)
    svg.rect(gx, gy, n * c, n * c, "none", stroke="#888", width=1)

    # Which buffer each key tile goes through (j mod 2), under the grid.
    by = gy + n * c + 18
    svg.text(gx - 12, by, "k, v buffer", size=11, anchor="end", colour=MUTED)
    for j in range(n):
        svg.text(gx + (j + 0.5) * c, by, f"{j % 2}", size=11, anchor="middle", colour=ORANGE, weight="bold")

    # Legend and notes.
    ly = by + 32
    x0 = 24
    svg.rect(x0, ly - 11, 22, 14, BLUE, opacity=0.9)
    svg.text(x0 + 30, ly, "full: every score of the tile is used", size=12)
    ly += 22
    polygon(svg, [(x0, ly - 11), (x0 + 22, ly - 11), (x0 + 22, ly + 3)], RED, opacity=0.22)
    polygon(svg, [(x0, ly - 11), (x0, ly + 3), (x0 + 22, ly + 3)], BLUE, opacity=0.9)
    svg.text(x0 + 30, ly, "diagonal: keys after the query set to −∞ (scores<true>)", size=12)
    ly += 22
    svg.rect(x0, ly - 11, 22, 14, "url(#skipped)", stroke="#ccc", width=1)
    svg.text(x0 + 30, ly, "skipped: above the diagonal, not computed (not loaded, past the block's rows)", size=12)
    ly += 30
    for line in (f"One block per {QUERY_ROWS} queries of one (batch, head), outlined: grid",
                 f"(T/{QUERY_ROWS}, B·NH), blockIdx.y = (batch, head), {WARPS} warps of {ROWS_PER_WARP} rows. "
                 "Within",
                 "one (batch, head) the longest rows get the lowest blockIdx.x. Blocks are",
                 "usually started x fastest (CUDA promises no order), so long and short rows",
                 "alternate across the grid. The warps walk their rows left to right (→), key",
                 "tile 0 up to their own; a warp skips the tiles past its last query, which",
                 "the block loads for its other warps."):
        svg.text(x0, ly, line, size=12, colour="#333")
        ly += 18


def one_block(svg):
    """Right: one block while it works on key tile j: what lives where."""
    x0, x1 = 560, 1096
    svg.text(x0, 90, "One block, at key tile j", size=14, weight="bold")
    svg.text(x0, 108, f"{32 * WARPS} threads = {WARPS} warps; warp w owns query rows {ROWS_PER_WARP}w to "
             f"{ROWS_PER_WARP}w + {ROWS_PER_WARP - 1} of the block's {QUERY_ROWS}", size=12, colour=MUTED)

    # Global memory.
    top = 120
    svg.rect(x0, top, x1 - x0, 62, "#f7f7f7", stroke="#bbb")
    svg.text(x0 + 10, top + 18, "global memory (HBM)", size=12, weight="bold")
    svg.text(x0 + 10, top + 36, "qkv [B, T, 3C] bf16: q, k and v of every head, read in place (no permutes)",
             size=11, colour="#333")
    svg.text(x0 + 10, top + 52, "out [B, T, C] and lse (one float per row): written once, after the last tile",
             size=11, colour="#333")

    # Global -> shared: cp.async.
    arrow(svg, x0 + 60, top + 62, x0 + 60, top + 100)
    svg.text(x0 + 72, top + 80, "cp.async, 16 bytes at a time, k and v in groups of their own: k of j + 1 "
             "loads during", size=11, colour="#333")
    svg.text(x0 + 72, top + 95, "q·kᵀ of j, v of j + 1 during p·v of j (q once, at the start, through both v "
             "buffers)", size=11, colour=MUTED)

    # Shared memory: k and v, two buffers each, rows of 64 + 8 bf16.
    top = 222
    ld = HS + PAD
    shared_bytes = 2 * 2 * TILE * ld * 2
    svg.rect(x0, top, x1 - x0, 150, "#fffaf3", stroke="#bbb")
    svg.text(x0 + 10, top + 18, "shared memory", size=12, weight="bold")
    svg.text(x0 + 124, top + 18, f"k and v, two buffers each (buf = j mod 2): {shared_bytes:,} bytes per block",
             size=11, colour="#333")
    px = 1.5  # pixels per column; a row of the tile is one pixel
    tw, pw = HS * px, PAD * px
    ty = top + 30
    for bi, (name, colour, x) in enumerate((("k_s", ORANGE, x0 + 14), ("k_s", ORANGE, x0 + 138),
                                            ("v_s", GREEN, x0 + 276), ("v_s", GREEN, x0 + 400))):
        buf = bi % 2
        computing = buf == 0
        svg.rect(x, ty, tw, TILE, colour, opacity=0.9 if computing else 0.3,
                 stroke=colour, width=1.5, dash=None if computing else "4,3")
        svg.rect(x + tw, ty, pw, TILE, "url(#padding)", stroke="#999", width=0.8)
        who = "key" if name == "k_s" else "value"
        svg.text(x + tw / 2, ty + 26, f"{name}[{'buf' if computing else '1 − buf'}]", size=11, anchor="middle",
                 weight="bold", colour="white" if computing else "#333")
        svg.text(x + tw / 2, ty + 42, f"{who} tile {'j' if computing else 'j + 1'}", size=10, anchor="middle",
                 colour="white" if computing else "#333")
        svg.text(x + (tw + pw) / 2, ty + TILE + 14, "in use" if computing else "arriving", size=10,
                 anchor="middle", colour=MUTED)
    svg.text(x0 + 10, top + 124, f"each: {TILE} rows × ({HS} + {PAD}) bf16. The {PAD} extra (hatched) make rows "
             f"{ld * 2} bytes apart,", size=11, colour="#333")
    svg.text(x0 + 10, top + 140, "so the 8 rows one ldmatrix reads fall on different banks.", size=11,
             colour="#333")

    # Shared -> registers: ldmatrix.
    arrow(svg, x0 + 60, top + 150, x0 + 60, top + 184)
    svg.text(x0 + 72, top + 171, "ldmatrix: each thread gets its part of four 8×8 matrices (v transposed on "
             "the way)", size=11, colour="#333")

    # Registers, per warp.
    top = 406
    svg.rect(x0, top, x1 - x0, 184, "#f5f8fc", stroke="#bbb")
    svg.text(x0 + 10, top + 18, "registers", size=12, weight="bold")
    svg.text(x0 + 80, top + 18, f"each warp its own {ROWS_PER_WARP} rows, two m16n8k16 groups: bf16 in, "
             "fp32 sums", size=11, colour="#333")
    qx, sx, ox, w = x0 + 88, x0 + 244, x0 + 400, 112
    hy = top + 38
    svg.text(qx + w / 2, hy, "q: loaded once", size=10, anchor="middle", colour=MUTED)
    svg.text(sx + w / 2, hy, "s = q·kᵀ, then p", size=10, anchor="middle", colour=MUTED)
    svg.text(ox + w / 2, hy, "o += p·v (with m, ℓ)", size=10, anchor="middle", colour=MUTED)
    for wi in range(WARPS):
        y = top + 46 + wi * 30
        svg.text(x0 + 12, y + 15, f"warp {wi}", size=11, weight="bold")
        svg.rect(qx, y, w, 22, BLUE, opacity=0.9)
        svg.text(qx + w / 2, y + 15, f"q  {ROWS_PER_WARP} × {HS} bf16", size=10, anchor="middle", colour="white")
        svg.text((qx + w + sx) / 2, y + 15, "· kᵀ →", size=11, anchor="middle", colour="#333")
        svg.rect(sx, y, w, 22, PURPLE, opacity=0.9)
        svg.text(sx + w / 2, y + 15, f"s  {ROWS_PER_WARP} × {TILE} fp32", size=10, anchor="middle", colour="white")
        svg.text((sx + w + ox) / 2, y + 15, "· v →", size=11, anchor="middle", colour="#333")
        svg.rect(ox, y, w, 22, YELLOW, opacity=0.9)
        svg.text(ox + w / 2, y + 15, f"o  {ROWS_PER_WARP} × {HS} fp32", size=10, anchor="middle", colour="#222")
    svg.text(x0 + 10, top + 170, "s becomes p (online softmax) and feeds the second product without leaving "
             "the registers.", size=11, colour="#333")
    svg.text(x0, top + 206, "After the last tile: out = o / ℓ (bf16) and lse = m + log ℓ go to global memory.",
             size=12, colour="#333")


def attention_tiles(path):
    W, H = 1120, 690
    svg = Svg(W, H)
    defs(svg)
    svg.text(24, 30, f"The tiles of flash attention (stage 03), T = {T}: blocks of {QUERY_ROWS} queries, tiles of "
             f"{TILE} × {TILE}",
             size=17, weight="bold")
    svg.text(24, 50, "left: the causal scores of one (batch, head) and the blocks that compute them; "
             "right: where one block keeps its operands", size=12, colour=MUTED)
    svg.line(536, 78, 536, H - 20, colour="#e3e3e3")
    score_matrix(svg)
    one_block(svg)
    svg.write(str(path))


# ----------------------------------------------------------------------------------------------
# mma_fragments.svg

# The fragment layout as tensor_cores.cuh states it at its top (PTX ISA, "Matrix fragments
# for mma.m16n8k16"). The figure draws these three lines; if the comment changes, so must this.
FRAGMENT_COMMENT = (
    "//   A  4 registers of 2 bf16: (row g, cols 2c, 2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..)",
    "//   B  2 registers of 2 bf16: (rows 2c, 2c+1, col g), (rows 2c+8, 2c+9, col g)",
    "//   D  4 floats: (g, 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)",
)
LANE = 5  # the lane the figure follows


def fragment_comment_found(root):
    """Whether tensor_cores.cuh still states the layout in the words this figure draws."""
    lines = [line.strip() for line in (root / TENSOR_CORES_SOURCE).read_text(encoding="utf-8").split("\n")]
    return all(line.strip() in lines for line in FRAGMENT_COMMENT)


def a_owner(r, k):
    """(lane, register, half) holding element (row r, column k) of A, 16 x 16."""
    return 4 * (r % 8) + (k % 8) // 2, (r // 8) + 2 * (k // 8), k % 2


def b_owner(k, n):
    """(lane, register, half) holding element (row k, column n) of B, 16 x 8."""
    return 4 * n + (k % 8) // 2, k // 8, k % 2


def d_owner(r, n):
    """(lane, element) holding element (row r, column n) of D, 16 x 8: d[0..3] of the thread."""
    return 4 * (r % 8) + n // 2, 2 * (r // 8) + n % 2


def check_accumulators_to_a():
    """a_from_accumulators: a[0] = (acc[2k][0], acc[2k][1]), a[1] = (acc[2k][2], acc[2k][3]),
    a[2], a[3] the same of acc[2k + 1]. Every element of the two D tiles must land where A's
    layout wants it, in the same lane: otherwise the figure's claim is false."""
    for tile in (0, 1):  # 8-column tiles 2k and 2k + 1
        for r in range(16):
            for n in range(8):
                lane, e = d_owner(r, n)
                register, half = 2 * tile + e // 2, e % 2
                if a_owner(r, 8 * tile + n) != (lane, register, half):
                    raise AssertionError(f"D tile {tile} ({r}, {n}) is not A ({r}, {8 * tile + n})")


A_COLOURS = (BLUE, ORANGE, GREEN, PURPLE)  # a[0] .. a[3]; D rows 0-7 / 8-15 of tile 2k, 2k + 1
B_COLOURS = (TEAL, PINK)                   # b[0], b[1]


def fragment_grid(svg, x, y, rows, cols, cell, owner, colour, label, pairs, index_size=9):
    """A rows x cols matrix, one cell per element: the lane that holds it, tinted by register.
    `pairs`: "cols" (a register's two halves side by side) or "rows" (one above the other).
    The cells' texts share their attributes in groups, to keep the file small."""
    for j in range(cols):
        svg.text(x + (j + 0.5) * cell, y - 5, str(j), size=index_size, anchor="middle", colour=MUTED)
    for i in range(rows):
        svg.text(x - 5, y + (i + 0.5) * cell + 3, str(i), size=index_size, anchor="end", colour=MUTED)
    tints, strong, lanes, mine, tags, outlines = [], [], [], [], [], []
    for i in range(rows):
        for j in range(cols):
            lane, tag = owner(i, j)
            cx, cy = x + j * cell, y + i * cell  # whole pixels: x, y and cell are integers
            followed = lane == LANE
            (strong if followed else tints).append(
                f'<rect x="{cx}" y="{cy}" width="{cell}" height="{cell}" fill="{colour(i, j)}"/>')
            (mine if followed else lanes).append(f'<text x="{cx + cell // 2}" y="{cy + cell // 2 + 1}">{lane}</text>')
            tags.append(f'<text x="{cx + cell // 2}" y="{cy + cell - 3}">{tag}</text>')
            if followed:
                outlines.append(f'<rect x="{cx + 1}" y="{cy + 1}" width="{cell - 2}" height="{cell - 2}"/>')
    size = 11 if cell >= 26 else 9
    svg.add('<g fill-opacity="0.3">' + "".join(tints) + "</g>")
    svg.add('<g fill-opacity="0.75">' + "".join(strong) + "</g>")
    svg.add(f'<g font-size="{size}" text-anchor="middle" fill="#333" {FONT}>' + "".join(lanes) + "</g>")
    svg.add(f'<g font-size="{size}" text-anchor="middle" font-weight="bold" fill="#111" {FONT}>' + "".join(mine)
            + "</g>")
    svg.add(f'<g font-size="7" text-anchor="middle" fill="#555" {FONT}>' + "".join(tags) + "</g>")
    # Thin lines between cells, thicker between register pairs and between the 8 x 8 quarters.
    for j in range(cols + 1):
        w = 2.0 if j % 8 == 0 else 1.2 if (pairs == "cols" and j % 2 == 0) else 0.4
        svg.line(x + j * cell, y, x + j * cell, y + rows * cell, colour="#666" if w > 1 else "#bbb", width=w)
    for i in range(rows + 1):
        w = 2.0 if i % 8 == 0 else 1.2 if (pairs == "rows" and i % 2 == 0) else 0.4
        svg.line(x, y + i * cell, x + cols * cell, y + i * cell, colour="#666" if w > 1 else "#bbb", width=w)
    # The followed lane's cells, outlined.
    svg.add('<g fill="none" stroke="#111" stroke-width="2">' + "".join(outlines) + "</g>")
    if label:
        svg.text(x, y - 22, label, size=13, weight="bold")


def mma_fragments(path):
    check_accumulators_to_a()
    W, H = 1120, 1180
    svg = Svg(W, H)
    defs(svg)
    svg.text(24, 30, "The fragments of mma.sync.m16n8k16 (bf16 × bf16 → fp32): which thread holds which element",
             size=17, weight="bold")
    svg.text(24, 50, "Each cell: the lane (0-31) of the warp that holds the element, and which of its registers "
             "(tint). Lane = 4g + c, with g = lane / 4 and c = lane % 4.", size=12, colour=MUTED)
    svg.text(24, 67, "Row and column numbers are the element's within the operand. Source: PTX ISA, "
             "\"Matrix fragments for mma.m16n8k16\"; the comment at the top of tensor_cores.cuh.",
             size=12, colour=MUTED)

    cell = 28
    top = 118
    ax, bx, dx = 44, 576, 858

    def a_tag(r, k):
        lane, reg, half = a_owner(r, k)
        return lane, f"a{reg}" + ("·lo" if half == 0 else "·hi")

    def b_tag(k, n):
        lane, reg, half = b_owner(k, n)
        return lane, f"b{reg}" + ("·lo" if half == 0 else "·hi")

    def d_tag(r, n):
        lane, e = d_owner(r, n)
        return lane, f"d[{e}]"

    fragment_grid(svg, ax, top, 16, 16, cell, a_tag, lambda r, k: A_COLOURS[a_owner(r, k)[1]],
                  "A  16 × 16 bf16 (rows: m, columns: k)", "cols")
    svg.text((ax + 16 * cell + bx) / 2, top + 8 * cell + 8, "×", size=26, anchor="middle", weight="bold")
    fragment_grid(svg, bx, top, 16, 8, cell, b_tag, lambda k, n: B_COLOURS[b_owner(k, n)[1]],
                  "B  16 × 8 bf16 (k × n)", "rows")
    svg.text((bx + 8 * cell + dx) / 2, top + 8 * cell + 8, "=", size=26, anchor="middle", weight="bold")
    fragment_grid(svg, dx, top, 16, 8, cell, d_tag, lambda r, n: A_COLOURS[r // 8],
                  "D  16 × 8 fp32 (m × n): D += A·B", "cols")

    # The lane followed, in words.
    y = top + 16 * cell + 34
    g, c = LANE // 4, LANE % 4
    svg.text(24, y, f"Lane {LANE} (outlined): g = {g}, c = {c}. Its registers hold (row, column):", size=13,
             weight="bold")

    def cells(owner, rows, cols, reg):
        got = [(i, j) for i in range(rows) for j in range(cols) if owner(i, j)[0] == LANE and owner(i, j)[1] == reg]
        return " ".join(f"({i},{j})" for i, j in got)

    lines = [
        "A: a0 = " + cells(a_owner, 16, 16, 0) + ";  a1 = " + cells(a_owner, 16, 16, 1)
        + ";  a2 = " + cells(a_owner, 16, 16, 2) + ";  a3 = " + cells(a_owner, 16, 16, 3),
        "B: b0 = " + cells(b_owner, 16, 8, 0) + ";  b1 = " + cells(b_owner, 16, 8, 1),
        "D: d[0], d[1], d[2], d[3] = " + " ".join(
            f"({i},{j})" for e in range(4) for i in range(16) for j in range(8) if d_owner(i, j) == (LANE, e)),
    ]
    for k, line in enumerate(lines):
        svg.text(40, y + 22 + 19 * k, line, size=12, colour="#333")
    svg.text(40, y + 22 + 19 * 3, "A register is 32 bits: two bf16, the lower column (A) or row (B) in its low "
             "half (lo). The four threads of a quad (same g) share a row of A and of D.", size=12, colour=MUTED)

    # Second part: two D tiles are one A.
    y0 = y + 120
    svg.line(24, y0 - 28, W - 24, y0 - 28, colour="#e3e3e3")
    svg.text(24, y0, "Why the probabilities never leave the registers (a_from_accumulators)", size=15, weight="bold")
    svg.text(24, y0 + 19, "The scores s = q·kᵀ of a warp are 8 D tiles of 16 × 8 (64 keys). Put the D of tiles 2k and "
             "2k + 1 side by side:", size=12, colour="#333")
    small = 22
    gx, gy = 48, y0 + 66

    def pair_tag(r, j):
        lane, e = d_owner(r, j % 8)
        return lane, f"d[{e}]"

    fragment_grid(svg, gx, gy, 16, 16, small, pair_tag, lambda r, j: A_COLOURS[2 * (j // 8) + r // 8],
                  "", "cols", index_size=8)
    svg.text(gx + 4 * small, gy - 22, "D of tile 2k", size=12, anchor="middle", weight="bold")
    svg.text(gx + 12 * small, gy - 22, "D of tile 2k + 1", size=12, anchor="middle", weight="bold")
    svg.text(gx + 8 * small, gy + 16 * small + 18, "columns 16k to 16k + 15 of s, fp32", size=11, anchor="middle",
             colour=MUTED)

    tx = gx + 16 * small + 40
    arrow(svg, tx - 30, gy + 8 * small, tx - 6, gy + 8 * small)
    rows = [
        ("a[0] = pack_bf16(acc[2k][0], acc[2k][1])", "row g, columns 2c, 2c+1", BLUE),
        ("a[1] = pack_bf16(acc[2k][2], acc[2k][3])", "row g+8, columns 2c, 2c+1", ORANGE),
        ("a[2] = pack_bf16(acc[2k+1][0], acc[2k+1][1])", "row g, columns 2c+8, 2c+9", GREEN),
        ("a[3] = pack_bf16(acc[2k+1][2], acc[2k+1][3])", "row g+8, columns 2c+8, 2c+9", PURPLE),
    ]
    svg.text(tx, gy + 6, "each thread, with no other thread's help, rounds its own", size=12, colour="#333")
    svg.text(tx, gy + 24, "floats to bf16 and packs them in pairs:", size=12, colour="#333")
    for k, (code, where, colour) in enumerate(rows):
        yy = gy + 56 + 40 * k
        svg.rect(tx, yy - 13, 16, 16, colour, opacity=0.45)
        svg.text(tx + 24, yy, code, size=12, weight="bold", colour="#222")
        svg.text(tx + 24, yy + 16, "holds " + where + ": A's register " + str(k) + " exactly", size=11, colour=MUTED)
    svg.text(tx, gy + 232, "Compare with A above: every lane number stands in the same place. So the", size=12,
             colour="#333")
    svg.text(tx, gy + 250, "16 × 16 block of probabilities is the A operand of p·v (k = 16 keys) as it is:",
             size=12, colour="#333")
    svg.text(tx, gy + 268, "no shuffle, no trip through shared memory. Four such blocks make 64 keys.", size=12,
             colour="#333")
    svg.text(tx, gy + 296, "(The same in the backward: dv += Pᵀ·dout, dk += dSᵀ·q, dq += dS·k.)", size=12,
             colour=MUTED)
    svg.write(str(path))


FIGURES = {"attention_tiles.svg": lambda path, root: attention_tiles(path),
           "mma_fragments.svg": lambda path, root: mma_fragments(path),
           **course_figures.FIGURES}  # each draws (path, root): some read docs/results/ under root


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a committed figure differs")
    parser.add_argument("--root", type=Path, default=HERE.parents[1], help="repository root")
    args = parser.parse_args()
    root = args.root.resolve()

    constants = kernel_constants(root)
    drawn = {"kQueryRows": QUERY_ROWS, "kTile": TILE, "kPad": PAD, "rows per warp": ROWS_PER_WARP}
    if constants != drawn:
        print(f"figures.py: {FLASH_SOURCE} has {constants}, attention_tiles.svg draws {drawn}: "
              "update tests/docs/figures.py", file=sys.stderr)
        return 1

    if not fragment_comment_found(root):
        print(f"figures.py: the fragment layout stated at the top of {TENSOR_CORES_SOURCE} is not the one "
              "mma_fragments.svg draws: update tests/docs/figures.py", file=sys.stderr)
        return 1

    out_dir = root / "docs" / "figures"
    stale = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, draw in FIGURES.items():
            target = out_dir / name
            if not args.check:
                out_dir.mkdir(parents=True, exist_ok=True)
                draw(target, root)
                print(f"wrote {target.relative_to(root)}")
                continue
            fresh = Path(tmp) / name
            draw(fresh, root)
            if not target.exists() or target.read_bytes() != fresh.read_bytes():
                stale.append(str(target.relative_to(root)))
    if stale:
        for name in stale:
            print(f"figures.py: {name} is not what the script draws; run {REGENERATE}", file=sys.stderr)
        return 1
    if args.check:
        print(f"figures.py: {len(FIGURES)} figure(s) match the script")
    return 0


if __name__ == "__main__":
    sys.exit(main())
