#!/usr/bin/env python3
"""The attention benchmark: causal self-attention alone, forward and backward, at GPT-2's head
size of 64, for each built C++ stage (its bench_stageNN, --ops Attention) and for PyTorch's
scaled_dot_product_attention with each backend this PyTorch offers (flash, cuDNN, memory-
efficient), on the same GPU in the same run. From stage 03 on, the stage's benchmark-only
variants are timed too (bench_stageNN --attention-variants yes; tests/bench/attention_variants.cuh):
stage 03's kernels before FlashAttention-2's design, 16 rows per warp, FlashAttention-2's atomic
dq, blocks of 128 keys or queries in the backward, the forward without tensor cores
(stages/03_flash_attention/basic_flash_forward.cuh). They are the same in every later stage,
which uses stage 03's attention: they are run for the first such stage only.

    python3 tests/bench/attention.py --build build/all
    python3 tests/bench/attention.py --build build/all --seq 1024,2048 --tokens 16384
    python3 tests/bench/attention.py --build build/all --rounds 7
    python3 tests/bench/attention.py --build build/all --dry-run

--rounds N (1 to 50) times that stage's attention and its variants in N interleaved rounds
(bench_stageNN --rounds N): each entry once a round, each round in its own order, so that no
entry always runs after the same one; each reports the median of its rounds,
and the table their range. Timed one after the other, once each, the same kernel measured
0.14 ms or 0.19 ms on an H200 depending on what ran before it: a difference between variants
is only worth reading against that range.

Beside each entry, the GPU's SM clock and its active throttle reasons, as nvidia-smi reads them
right before and right after it (for a C++ stage, before and after the bench_stageNN run that
timed all of its entries; null where nvidia-smi is missing or fails). Read only: nothing here
changes a GPU setting.

FLOPs are counted as FlashAttention's benchmarks count them (Tri Dao, "FlashAttention-2: Faster
Attention with Better Parallelism and Work Partitioning", 2023, https://arxiv.org/abs/2307.08691,
section 4.1), so that figures compare with published ones: the forward pass is 4·B·NH·T²·HS / 2
for causal attention (the masked half is not work), the backward 2.5 times that (five products
against two). The kernel benchmark (bench_stageNN, common/train/op_cost.h) counts the same; this
script recounts from its times all the same, so that its table does not depend on which count
the bench_stageNN that ran had (its files in docs/results/2026-11-23_h100 and 2026-11-27_h200
count the whole T x T square). Batch: --tokens / T sequences (B·NH blocks of rows fill the GPU
many times over).
"% of GEMM" reads each pass's TFLOP/s against the bf16 GEMM ceiling (a large cuBLAS bf16 matrix
product) that the same bench_stageNN run measured first, counting only the FLOPs above: the share
of the tensor cores' practical throughput the attention gets.

Memory: what the attention keeps for itself beyond its inputs, its output and the gradients (for
the C++ stages the `saved` and `scratch` buffers their bench_stageNN reports; for PyTorch the
peak allocated less those). At a fixed --tokens, stage 02's saved probabilities, B·NH·T² values,
grow in proportion to T; a flash attention's log-sum-exp, B·NH·T values, does not grow at all.

Outputs, in --out (default BUILD/attention): results.json, results.md (the table as printed),
and the bench_stageNN logs. Python 3 standard library plus torch (for the PyTorch rows; without
CUDA PyTorch they are reported as not run).
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

from gpu_clock import gpu_clock, throttle_names

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HS, NH = 64, 12  # GPT-2: heads of 64, 12 of them at 124M


def flops(B, T, passname):
    forward = 4.0 * B * NH * T * T * HS / 2.0
    return forward if passname == "forward" else 2.5 * forward


def find_benches(build):
    found = {}
    for path in sorted(glob.glob(os.path.join(build, "stages", "bench_stage[0-9][0-9]"))):
        if os.access(path, os.X_OK):
            found[os.path.basename(path)[-2:]] = path
    return found


def clock_cells(r):
    """The table's cells "SM MHz before/after" and "throttle before/after" of an entry: "1980/1755",
    "none/power cap"; "-" for a reading that was not made."""
    before, after = r.get("clock_before"), r.get("clock_after")
    mhz = "/".join(str(c["sm_mhz"]) if c and c.get("sm_mhz") is not None else "-" for c in (before, after))
    throttle = "/".join(throttle_names(c.get("throttle_reasons")) if c else "-" for c in (before, after))
    return mhz, throttle


def rounds_cell(r):
    """The table's rounds cell of an entry: "7: 0.140–0.190 / 0.301–0.350" (the range of the rounds'
    medians, forward / backward, in ms) for one timed in rounds, "1" for one timed once."""
    if r.get("rounds", 1) == 1:
        return "1"
    ranges = [f"{min(r[f'{p}_rounds_ms']):.3f}–{max(r[f'{p}_rounds_ms']):.3f}" if r.get(f"{p}_rounds_ms") else "-"
              for p in ("forward", "backward")]
    return f"{r['rounds']}: {ranges[0]} / {ranges[1]}"


def run_cpp(stage, bench, B, T, out, timeout, dry_run, variants, rounds=1):
    """[(label, {'forward': ms, 'backward': ms, ...})] of one stage's attention ("" for the stage's
    own, then each variant's label), or [("", {'error': line})]. With rounds above 1, each entry's
    times are the medians of that many interleaved rounds (bench_stageNN --rounds), and
    'forward_rounds_ms' and 'backward_rounds_ms' each round's."""
    json_path = os.path.join(out, f"stage{stage}_T{T}.json")
    cmd = [bench, "--ops", "^Attention", "--batch", str(B), "--seq", str(T), "--json", json_path,
           "--attention-variants", "yes" if variants else "no"]
    if rounds > 1:
        cmd += ["--rounds", str(rounds)]
    if dry_run:
        print(" ".join(cmd))
        return []
    log_path = os.path.join(out, f"stage{stage}_T{T}.log")
    try:
        with open(log_path, "w") as log:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return [("", {"error": f"timed out after {timeout} s"})]
    try:
        with open(json_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        with open(log_path, errors="replace") as log:
            last = ([line.strip() for line in log if line.strip()] or [""])[-1]
        return [("", {"error": f"exit status {rc}: {last[:160]} (see {log_path})"})]
    if result.get("error"):
        return [("", {"error": result["error"]})]
    gemm = ((result.get("ceilings") or {}).get("gemm") or {}).get("tflops")
    found = {}  # label -> times, in the order of the rows
    for row in result.get("rows", []):
        op = row.get("op") or ""
        if op != "Attention" and not op.startswith("Attention "):
            continue
        times = found.setdefault(op[len("Attention "):],
                                 {"device": result.get("device_name"), "gemm_tflops": gemm, "rounds": rounds})
        if row.get("status") == "ok":
            times[row["pass"]] = row["ms_median"]
            times[f"{row['pass']}_rounds_ms"] = row.get("rounds_ms") or [row["ms_median"]]
            # What the op kept beyond its inputs and outputs: saved for the backward, and scratch.
            times["memory_mib"] = max(times.get("memory_mib", 0), (row.get("workspace_bytes") or 0) / 2**20)
        else:
            times.setdefault("error", f"{row['pass']}: {row.get('status')} ({row.get('reason')})")
    return list(found.items()) or [("", {"error": f"no Attention row in {json_path}"})]


def torch_backends():
    """[(label, SDPBackend)] this PyTorch offers, or an error line."""
    try:
        import torch
        from torch.nn.attention import SDPBackend
    except ImportError as e:
        return None, f"no PyTorch with torch.nn.attention ({e})"
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA device"
    backends = [("SDPA flash", "FLASH_ATTENTION"), ("SDPA cuDNN", "CUDNN_ATTENTION"),
                ("SDPA memory-efficient", "EFFICIENT_ATTENTION")]
    return [(label, getattr(SDPBackend, name)) for label, name in backends if hasattr(SDPBackend, name)], None


def run_torch(backend, B, T, warmup, iters):
    """{'forward': ms, 'backward': ms, 'memory_mib': MiB} (medians of CUDA-event times), or {'error': line}."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    torch.manual_seed(1337)
    shape = (B, NH, T, HS)
    try:
        q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fwd, bwd = [], []
        with sdpa_kernel([backend]):
            for i in range(warmup + iters):
                start, mid, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
                start.record()
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                mid.record()
                y.backward(dout)
                end.record()
                torch.cuda.synchronize()
                if i >= warmup:
                    fwd.append(start.elapsed_time(mid))
                    bwd.append(mid.elapsed_time(end))
                q.grad = k.grad = v.grad = None
                del y
        # Beyond the inputs (allocated before `base`), the output and the three gradients, as for
        # the C++ rows: what SDPA saved for the backward and its workspace.
        extra = torch.cuda.max_memory_allocated() - base - 4 * q.numel() * q.element_size()
        return {"forward": statistics.median(fwd), "backward": statistics.median(bwd), "memory_mib": extra / 2**20,
                "device": torch.cuda.get_device_name()}
    except RuntimeError as e:  # a backend this GPU or build cannot run
        return {"error": str(e).splitlines()[0][:160]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="a build tree with bench_stageNN (build/all, build/stage03)")
    p.add_argument("--seq", default="1024,2048,4096,8192",
                   help="sequence lengths, comma-separated [1024,2048,4096,8192]")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per batch: B = tokens / T [16384]")
    p.add_argument("--stages", default="all", help="C++ stages to run: all, none or 02,03,... [all]")
    p.add_argument("--warmup", type=int, default=3, help="PyTorch runs not timed [3]")
    p.add_argument("--iters", type=int, default=20, help="PyTorch runs timed [20]")
    p.add_argument("--rounds", type=int, default=1,
                   help="1 to 50: the stage whose variants are timed times its attention and each variant in "
                        "N interleaved rounds (bench_stageNN --rounds), each entry the median of its rounds [1]")
    p.add_argument("--timeout", type=int, default=300, help="seconds per bench_stageNN run [300]")
    p.add_argument("--out", help="output directory [BUILD/attention]")
    p.add_argument("--no-torch", action="store_true", help="C++ stages only")
    p.add_argument("--dry-run", action="store_true", help="print the C++ commands, run nothing")
    args = p.parse_args(argv)
    if not 1 <= args.rounds <= 50:
        p.error(f"--rounds {args.rounds}: not a whole number from 1 to 50")

    try:
        seqs = [int(s) for s in args.seq.split(",")]
    except ValueError:
        p.error(f"--seq {args.seq!r}: not a list of whole numbers")
    if any(T <= 0 or args.tokens % T for T in seqs) or args.tokens <= 0:
        p.error(f"--tokens {args.tokens} must be a positive multiple of every --seq")
    benches = find_benches(args.build)
    if args.stages == "none":
        benches = {}
    elif args.stages != "all":
        wanted = args.stages.split(",")
        missing = [s for s in wanted if s not in benches]
        if missing:
            p.error(f"not built in {args.build}: bench_stage{', bench_stage'.join(missing)}")
        benches = {s: benches[s] for s in wanted}
    out = args.out or os.path.join(args.build, "attention")
    os.makedirs(out, exist_ok=True)

    backends, torch_error = ([], "--no-torch") if args.no_torch or args.dry_run else torch_backends()
    # The variants belong to stage 03's attention, which the later stages use as it is.
    variant_stage = min((s for s in benches if int(s) >= 3), default=None)
    rows = []
    gemm_tflops = None
    for T in seqs:
        B = args.tokens // T
        for stage, bench in benches.items():
            print(f"stage {stage} T={T} B={B} ...", file=sys.stderr, flush=True)
            before = None if args.dry_run else gpu_clock()
            found = run_cpp(stage, bench, B, T, out, args.timeout, args.dry_run, stage == variant_stage,
                            args.rounds if stage == variant_stage else 1)
            after = None if args.dry_run else gpu_clock()
            for label, r in found:
                gemm_tflops = gemm_tflops or r.get("gemm_tflops")
                entry = f"C++ stage {stage}" + (f" ({label})" if label else "")
                rows.append({"entry": entry, "T": T, "B": B, **r, "clock_before": before, "clock_after": after})
        for label, backend in backends or []:
            print(f"{label} T={T} B={B} ...", file=sys.stderr, flush=True)
            before = gpu_clock()
            r = run_torch(backend, B, T, args.warmup, args.iters)
            rows.append({"entry": f"PyTorch {label}", "T": T, "B": B, **r, "clock_before": before,
                         "clock_after": gpu_clock()})
        if backends is None:
            rows.append({"entry": "PyTorch SDPA", "T": T, "B": B, "error": torch_error})
    if args.dry_run:
        return 0

    device = next((r["device"] for r in rows if r.get("device")), "unknown GPU")
    ceiling = (f"bf16 GEMM ceiling measured in the same run (bench_ceilings' cuBLAS product): {gemm_tflops:.0f} "
               "TFLOP/s" if gemm_tflops else "bf16 GEMM ceiling: not measured (no C++ stage ran)")
    lines = [f"Causal attention, head size {HS}, {NH} heads, {args.tokens} tokens per batch, on {device}",
             "TFLOP/s counted as FlashAttention does: forward 4·B·NH·T²·HS/2, backward 2.5x that", ceiling,
             "memory: what the attention keeps beyond its inputs, output and gradients (saved for the backward, "
             "scratch)",
             f"rounds: stage {variant_stage}'s entries are the median of {args.rounds} interleaved rounds "
             "(bench_stageNN --rounds), beside the range of the rounds' medians (forward / backward ms); the others "
             "are timed once" if args.rounds > 1 and variant_stage else "rounds: every entry is timed once",
             "SM MHz and throttle reasons: nvidia-smi right before / after the entry (a C++ stage's: before / after "
             "the bench_stageNN run of all its entries); -: not read", "",
             "| entry | T | B | forward ms | forward TFLOP/s | backward ms | backward TFLOP/s | fwd+bwd TFLOP/s | "
             "% of GEMM (fwd / bwd) | memory MiB | rounds | SM MHz before/after | throttle before/after |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        mhz, throttle = clock_cells(r)
        if "forward" not in r or "backward" not in r:
            lines.append(f"| {r['entry']} | {r['T']} | {r['B']} | not run: {r.get('error', 'no result')} | | | | | | "
                         f"| | {mhz} | {throttle} |")
            continue
        f, b = flops(r["B"], r["T"], "forward"), flops(r["B"], r["T"], "backward")
        r["forward_tflops"] = f / (r["forward"] * 1e-3) / 1e12
        r["backward_tflops"] = b / (r["backward"] * 1e-3) / 1e12
        r["total_tflops"] = (f + b) / ((r["forward"] + r["backward"]) * 1e-3) / 1e12
        share = ""
        if gemm_tflops:
            r["forward_gemm_fraction"] = r["forward_tflops"] / gemm_tflops
            r["backward_gemm_fraction"] = r["backward_tflops"] / gemm_tflops
            share = f"{100 * r['forward_gemm_fraction']:.0f}% / {100 * r['backward_gemm_fraction']:.0f}%"
        mem = f"{r['memory_mib']:.1f}" if "memory_mib" in r else ""
        lines.append(f"| {r['entry']} | {r['T']} | {r['B']} | {r['forward']:.3f} | {r['forward_tflops']:.1f} | "
                     f"{r['backward']:.3f} | {r['backward_tflops']:.1f} | {r['total_tflops']:.1f} | {share} | {mem} | "
                     f"{rounds_cell(r)} | {mhz} | {throttle} |")
    # The goal of stage 03: SDPA flash's speed or better, forward and backward each (cuDNN: the stretch).
    lines.append("")
    for T in seqs:
        ours = next((r for r in rows if r["entry"] == "C++ stage 03" and r["T"] == T and "total_tflops" in r), None)
        for label in ("PyTorch SDPA flash", "PyTorch SDPA cuDNN"):
            theirs = next((r for r in rows if r["entry"] == label and r["T"] == T and "total_tflops" in r), None)
            if ours and theirs:
                lines.append(f"T={T}: stage 03 / {label[8:]} = {theirs['forward'] / ours['forward']:.2f}x forward, "
                             f"{theirs['backward'] / ours['backward']:.2f}x backward, "
                             f"{ours['total_tflops'] / theirs['total_tflops']:.2f}x both (above 1: stage 03 faster)")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"device": device, "head_size": HS, "heads": NH, "tokens": args.tokens, "gemm_tflops": gemm_tflops,
                   "rounds": args.rounds, "rounds_stage": variant_stage, "rows": rows}, f, indent=1)
    print(f"results in {out}/results.md and results.json", file=sys.stderr)
    return 1 if any("error" in r for r in rows if r["entry"].startswith("C++")) else 0


if __name__ == "__main__":
    sys.exit(main())
