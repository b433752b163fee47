#!/usr/bin/env python3
"""What if stage 02's LayerNorm kept its statistics (mean, rstd) in bf16? A CPU experiment.

Usage (PyTorch on the CPU; Debian's /usr/bin/python3 with its PyTorch 1.13 runs it in a few
seconds; no GPU, nothing is built):

    /usr/bin/python3 tests/docs/layernorm_stats_bf16.py

It emulates stage 02's LayerNorm forward (layernorm_forward_kernel of
stages/00_fp32_baseline/layernorm.cuh with Act = bf16): 4096 rows of C = 768, stored in bf16,
weight 1 and bias 0, the output rounded to bf16. As in the kernel, a warp shares a row: lane l
reads the 16-byte packs l, l + 32 and l + 64 (8 bf16 each), adds its 24 elements one after
another, and the 32 lanes' sums are added by the butterfly of cuda::warp_sum (common/cuda/reduce.cuh),
once for the mean and once for the squared deviations. Four versions of the statistics:

  - "fp32 statistics (stage 02)": float accumulators, as the kernel is written;
  - "fp32 sums, mean/rstd stored bf16": what making the mean/rstd buffers act_t would give;
  - "bf16 accumulation, a warp per row": the same passes with bf16 arithmetic (every +=, every
    step of the warp's reduction, the mean and each deviation round to bf16);
  - "bf16 accumulation, one running sum": the same in the first version's shape
    (tests/bench/first_versions.cuh: a thread per row, one sum over all 768 elements).

For four kinds of rows (N(0, 1); N(0, 1) with two outlier channels, +20 and -15; N(10, 1);
N(100, 1)) it prints, for each version, the output's relative L2 error and largest error
against an exact (float64) LayerNorm of the same bf16 input, the worst row's mean error in units
of that row's standard deviation, and the worst row's relative rstd error; then what storing
the input in bf16 costs by itself (exact LayerNorm of the bf16 input against exact LayerNorm of
the fp32 input). The seed is fixed, so the output is the same on every run.

The table of docs/02_bf16_autocast.md, "What if the LayerNorm statistics were bf16?", is this
output, rounded to two digits.
"""
import torch

torch.manual_seed(0)
R, C, EPS = 4096, 768, 1e-5
LANES, VEC = 32, 8  # a warp; a 16-byte pack of bf16
bf, f32, f64 = torch.bfloat16, torch.float32, torch.float64


def exact(x):  # float64 LayerNorm of the given values: the yardstick
    x = x.to(f64)
    m = x.mean(1, keepdim=True)
    v = ((x - m) ** 2).mean(1, keepdim=True)
    return (x - m) / torch.sqrt(v + EPS), m, 1 / torch.sqrt(v + EPS)


def by_lane(x):  # [R, C] -> [R, LANES, C / LANES]: each lane's elements in the order it adds them
    k = C // (LANES * VEC)  # packs per lane
    return x.reshape(R, k, LANES, VEC).permute(0, 2, 1, 3).reshape(R, LANES, k * VEC)


def warp_sum(v):  # cuda::warp_sum: v += v[lane ^ offset] for offset 16, 8, 4, 2, 1
    lane = torch.arange(LANES)
    offset = LANES // 2
    while offset > 0:
        v = v + v[:, lane ^ offset]
        offset //= 2
    return v[:, :1]  # every lane holds the same sum


def stats_warp(x, acc):  # the kernel's passes 1 and 2, with accumulators of dtype acc
    xl = by_lane(x)
    s = torch.zeros(R, LANES, dtype=acc)
    for c in range(xl.shape[2]):
        s = s + xl[:, :, c].to(acc)
    m = warp_sum(s) / C
    q = torch.zeros(R, LANES, dtype=acc)
    for c in range(xl.shape[2]):
        d = xl[:, :, c].to(acc) - m
        q = q + d * d
    return m, torch.rsqrt(warp_sum(q) / C + EPS)


def stats_running_sum(x, acc):  # the first version: one thread, one sum over the whole row
    m = torch.zeros(R, 1, dtype=acc)
    for c in range(C):
        m = m + x[:, c:c + 1].to(acc)
    m = m / C
    v = torch.zeros(R, 1, dtype=acc)
    for c in range(C):
        d = x[:, c:c + 1].to(acc) - m
        v = v + d * d
    return m, torch.rsqrt(v / C + EPS)


def normalize(x, m, s):  # (x - mean) * rstd in float, rounded to bf16 on store
    return ((x.to(f32) - m.to(f32)) * s.to(f32)).to(bf)


def report(name, x32):
    x = x32.to(bf)  # stage 02 stores activations in bf16
    ref, m_ref, s_ref = exact(x)
    sd_ref = 1 / s_ref
    m32, s32 = stats_warp(x, f32)
    variants = {
        "fp32 statistics (stage 02)": (m32, s32),
        "fp32 sums, mean/rstd stored bf16": (m32.to(bf), s32.to(bf)),
        "bf16 accumulation, a warp per row": stats_warp(x, bf),
        "bf16 accumulation, one running sum": stats_running_sum(x, bf),
    }
    print(f"\n{name}")
    for label, (m, s) in variants.items():
        y = normalize(x, m, s).to(f64)
        rel = ((y - ref).norm() / ref.norm()).item()
        mx = (y - ref).abs().max().item()
        dm = ((m.to(f64) - m_ref).abs() / sd_ref).max().item()
        ds = ((s.to(f64) - s_ref).abs() / s_ref).max().item()
        print(f"  {label:35s} out rel.err {rel:9.2e}  max {mx:8.2e}  "
              f"mean err {dm:8.2e} sd  rstd rel.err {ds:8.2e}")
    full, _, _ = exact(x32)  # what bf16 *storage* of the input costs, whatever the statistics
    print(f"  {'(bf16 input vs fp32 input, exact)':35s} out rel.err "
          f"{((ref - full).norm() / full.norm()).item():9.2e}")


report("N(0, 1)", torch.randn(R, C))
outliers = torch.randn(R, C)
outliers[:, 7] += 20.0
outliers[:, 300] -= 15.0
report("N(0, 1) with two outlier channels (+20, -15)", outliers)
report("mean/std = 10: N(10, 1)", 10 + torch.randn(R, C))
report("mean/std = 100: N(100, 1)", 100 + torch.randn(R, C))
