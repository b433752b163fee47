#!/usr/bin/env python3
"""The benchmark ladder: every C++ stage beside its PyTorch counterpart, on the same GPU.

Every entry trains GPT-2 124M (`d12`) at T = 1024 with the same batch, from the same initial
checkpoint (made once with gpt_init), on the same data (data/brown, read in the same order),
with the same optimizer settings, for the same number of steps. The first few steps are left
out of the timing (CUDA context, cuBLAS heuristics, torch.compile). Per entry it reports:

  tokens/s     median over the timed steps of (B x T) / step time
  ms/step      median step time over the timed steps
  MFU          tokens/s x FLOPs per token / the GPU's dense bf16 peak (the same denominator for
               every entry, fp32 stages included, so the ladder is comparable)
  peak memory  the most device memory the run held
  loss         the final training loss and the whole curve

Every PyTorch entry that calls SDPA pins its backend (flash; cudnn for PyTorch best) and records
the one it used. After the per-stage entries come two that show what an unaligned vocabulary costs
PyTorch (sdpa_pad, compile_noshapepad: eager SDPA with the vocabulary padded, compile with
Inductor's own shape padding off), and, with --torch best, PyTorch at its best (compile, fused
AdamW, vocabulary padded, cuDNN attention) at the largest of 64, 32, 16 sequences that a two-step
probe fits, with the C++ stages 04-06 beside it at that batch (rows of stage "best"); with
--torch best,best_autotune also PyTorch best under torch.compile's max-autotune (CUDA Graphs and
GEMMs chosen by timing, stage 04's counterpart of its graph capture and timed matmuls) at that
batch, its tokens/s over PyTorch best's among the pairs.

Beside every entry, the SM clock it ran at: nvidia-smi samples the GPU every 0.5 s while the
entry runs (tests/bench/gpu_clock.py; logs/KEY.clock.csv), and the tables give the median and
the lowest SM clock over the busy samples (utilization >= 50 %) and every throttle reason active
in them; "-" without nvidia-smi. It only reads: no clock or setting is changed.

The ladder computes none of the model's numbers itself: the C++ trainer's "start" event (its
--log) says how many FLOPs a token costs and what the GPU's peak is, and the checkpoint's
header how large the model is. So the named sizes, the FLOP count and the peak table exist
once, in the C++ code (common/model/config.cpp, common/util/peak_flops.h).

Every entry runs in a process group of its own. On a timeout, a spent --budget or Ctrl-C the
whole group gets SIGINT (PyTorch exits and gives the GPU back), then SIGKILL after --grace
seconds, so that nothing the entry started keeps running.

It also runs bench_ceilings (when built) for the two ceilings of this GPU. Outputs, in --out:
results.json (everything, the input of --results-only), results.csv, results.md (the table),
results.txt (the table for a terminal), loss.svg and throughput.svg (plot.py; with PyTorch best also
loss_best.svg and throughput_best.svg), logs/.

Before it makes or writes anything, it checks what it needs: a GPU, gpt_init (or --checkpoint),
and a Python that imports CUDA PyTorch for the PyTorch entries; without one it says so in one line
and exits 2. That Python is --python, else GPT_PYTHON of the build tree's CMakeCache.txt (the
Python with torch that CMake found), else the one running the ladder; the first line of the
output names it.

Python 3 standard library only. See tests/bench/README.md.
"""

import argparse
import csv
import datetime
import glob
import io
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)  # for plot.py and gpu_clock.py, next to this file
sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from gpu_clock import SAMPLE_INTERVAL_MS, BUSY_UTILIZATION, ClockSampler  # noqa: E402

# ----------------------------------------------------------------------------------------
# The workload: the same for every entry (tests/bench/README.md)

INIT_SEED = 1337  # gpt_init's default, and the trainers' default --seed

# The optimizer settings, passed explicitly to both the C++ trainers and the PyTorch reference
# (the option names are the same in both), so that neither side's own defaults matter: the
# loss curves are comparable step by step.
TRAIN_SETTINGS = [
    ("--lr", "6e-4"),
    ("--warmup", "5"),
    ("--min-lr-frac", "0.1"),
    ("--weight-decay", "0.1"),
    ("--beta1", "0.9"),
    ("--beta2", "0.95"),
    ("--eps", "1e-8"),
    ("--grad-clip", "1.0"),
]

# The PyTorch configurations the chapters name as each stage's counterpart (the one-liner of
# docs/NN_*.md, as nanoGPT applies it), each with the stage it corresponds to
# (tests/reference/README.md, "The C++ stages and their PyTorch counterparts"). Every entry that
# calls SDPA pins its backend (gpt2_reference.py --sdpa-backend): flash, FlashAttention-2, the
# counterpart of stage 03's kernel, for 03-05 alike, so that each step of the ladder changes one
# thing; the label shows the backend the run used.
BF16_SDPA = ["--precision", "bf16", "--attention", "sdpa"]
FLASH = ["--sdpa-backend", "flash"]
BEST = BF16_SDPA + ["--sdpa-backend", "cudnn", "--compile", "--fused-adamw", "--vocab-pad", "64"]
TORCH_CONFIGS = [
    # key, stage, short label (the backend is added to it), options of tests/reference/gpt2_reference.py
    ("fp32", "00", "fp32 eager", ["--precision", "fp32", "--attention", "manual"]),
    ("tf32", "01", "TF32", ["--precision", "tf32", "--attention", "manual"]),
    ("bf16", "02", "bf16 autocast", ["--precision", "bf16", "--attention", "manual"]),
    ("sdpa", "03", "bf16 + SDPA", BF16_SDPA + FLASH),
    ("compile", "04", "bf16 + SDPA + torch.compile", BF16_SDPA + FLASH + ["--compile"]),
    ("pad", "05", "compile + vocab padded to 64", BF16_SDPA + FLASH + ["--compile", "--vocab-pad", "64"]),
    # What an unaligned vocabulary costs PyTorch (group "vocab", run after the entries above). Inductor
    # pads matmul shapes itself (shape_padding, on by default since 2.1), so compile vs pad cannot show
    # it: eager SDPA with the vocabulary padded pairs with "sdpa", and compile with Inductor's padding
    # off with "compile" and "pad" (QUESTIONS).
    ("sdpa_pad", "03", "bf16 + SDPA + vocab padded to 64", BF16_SDPA + FLASH + ["--vocab-pad", "64"]),
    ("compile_noshapepad", "04", "compile, Inductor's shape padding off",
     BF16_SDPA + FLASH + ["--compile", "--inductor-shape-padding", "off"]),
    # PyTorch at its best on one GPU (group "best", run last): cuDNN attention where it can run (else
    # flash, said so), at the largest of BEST_BATCHES that fits, with C++ 04-06 beside it at that batch.
    ("best", "best", "compile + fused AdamW + vocab padded to 64", BEST),
    # The same with torch.compile's max-autotune, at the batch PyTorch best found: CUDA Graphs and
    # GEMMs chosen by timing, stage 04's counterpart of its graph capture and timed matmuls.
    ("best_autotune", "best", "best + max-autotune: CUDA Graphs and timed GEMMs",
     BEST + ["--compile-mode", "max-autotune"]),
]
GROUPS = {"sdpa_pad": "vocab", "compile_noshapepad": "vocab", "best": "best",
          "best_autotune": "best"}  # the rest: "ladder"
GROUP_RANK = {"ladder": 0, "vocab": 1, "best": 2}  # run and shown in this order
# --torch all leaves these out: up to four compiles for best (three probes and the run), and
# max-autotune's compile times every GEMM's candidates.
NOT_IN_ALL = ("best", "best_autotune")

# PyTorch best's batch: the largest of these whose probe (PROBE_STEPS steps) does not run out of memory.
BEST_BATCHES = (64, 32, 16)
PROBE_STEPS = 2
BEST_CPP_STAGES = ("04", "05", "06")  # run again beside it, at its batch
BEST_KEY = "torch_best"  # the entry whose search sets the batch of its group

# Pairs of entries that answer one question together (tokens/s of the first over the second's).
QUESTIONS = [
    ("torch_sdpa_pad", "torch_sdpa",
     "what an unaligned vocabulary (50257) costs eager PyTorch: vocab padded to 64 over unpadded, both bf16 + "
     "SDPA"),
    ("torch_compile", "torch_compile_noshapepad",
     "what Inductor's own shape padding recovers at V = 50257: compile over compile with it off"),
    ("torch_pad", "torch_compile_noshapepad",
     "what an unaligned vocabulary costs compiled PyTorch when Inductor does not pad: vocab padded to 64 over "
     "unpadded with shape padding off (with V padded, shape padding has no matmul left to pad)"),
    ("torch_best_autotune", "torch_best",
     "what max-autotune (CUDA Graphs, GEMMs chosen by timing) adds to PyTorch best, at its batch"),
]

# Stage names for stages that are not built (the PyTorch side still runs for them).
STAGE_TITLES = {"00": "fp32 baseline", "01": "tf32", "02": "bf16 autocast", "03": "flash attention",
                "04": "fused kernels", "05": "vocab padding", "06": "multi gpu mfu"}

REFERENCE = os.path.join(REPO, "tests", "reference", "gpt2_reference.py")
CKPT_MAGIC = 20261122  # docs/formats.md, "Checkpoints"


def read_checkpoint_header(path):
    """The model's sizes and parameter count from the header of a checkpoint (docs/formats.md:
    int32 magic, version, maxT, V, L, H, C, step, has-optimizer-state, parameter count), or
    None when the file is missing or not a checkpoint."""
    try:
        with open(path, "rb") as f:
            words = struct.unpack("<10i", f.read(40))
    except (OSError, struct.error):
        return None
    if words[0] != CKPT_MAGIC:
        return None
    maxT, V, L, H, C = words[2:7]
    return {"max_seq_len": maxT, "vocab_size": V, "n_layer": L, "n_head": H, "n_embd": C, "params": words[9]}


def model_title(params):
    """'124M' for GPT-2 small's 124,439,808 parameters: millions, as OpenAI named the GPT-2
    models (124M, 355M, 774M, 1558M)."""
    return f"{params / 1e6:.0f}M" if params else None


def median(values):
    v = sorted(values)
    n = len(v)
    if n == 0:
        return None
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


# ----------------------------------------------------------------------------------------
# The plan: which entries, with which commands


def find_trainers(build):
    """{stage number: path} of the stage trainers of a build tree (build/stages/train_NN_*)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(build, "stages", "train_[0-9][0-9]_*"))):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            found[os.path.basename(path)[6:8]] = path
    return found


def usage_error(message):
    print(f"ladder.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_list(text, known, what, not_in_all=()):
    """'all', 'none' or a comma-separated subset of `known`, in which 'all' stands for every
    one but those of `not_in_all` ('all,best')."""
    if text is None:
        text = "all"
    if text == "none":
        return []
    items = []
    for x in (x.strip() for x in text.split(",")):
        for y in ([k for k in known if k not in not_in_all] if x == "all" else [x] if x else []):
            if y not in items:
                items.append(y)
    bad = [x for x in items if x not in known]
    if bad:
        usage_error(f"unknown {what} {', '.join(bad)} (known: {', '.join(known) or 'none'})")
    return items


def torch_keys(text):
    keys = parse_list(text, [k for k, *_ in TORCH_CONFIGS], "PyTorch configuration", NOT_IN_ALL)
    if "best_autotune" in keys and "best" not in keys:
        usage_error("best_autotune runs at the batch PyTorch best's search finds: ask for both "
                    "(--torch best,best_autotune)")
    return keys


def option_value(options, flag):
    return options[options.index(flag) + 1] if flag in options else None


def torch_short(label, used, asked):
    """A PyTorch entry's label with its SDPA backend: 'bf16 + SDPA (flash)'; where cudnn fell back,
    'compile + ... (flash; cudnn asked)'."""
    backend = used or asked
    if not backend or backend == "unpinned":
        return label
    return f"{label} ({backend}" + (f"; {asked} asked)" if asked and used and asked != used else ")")


def common_args(args, checkpoint_flag, checkpoint, batch=None, steps=None):
    out = [checkpoint_flag, checkpoint, "--data", args.data, "--batch", str(batch or args.batch),
           "--seq", str(args.seq), "--steps", str(steps or args.steps)]
    for flag, value in TRAIN_SETTINGS:
        out += [flag, value]
    return out


def profile_trace_path(profile):
    """Where --profile-step PATH keeps the profiler's Chrome trace: beside it, PATH less .json
    plus .trace.json.gz."""
    return (profile[:-5] if profile.endswith(".json") else profile) + ".trace.json.gz"


def cpp_command(args, exe, checkpoint, log, batch):
    return [exe] + common_args(args, "--init", checkpoint, batch) + ["--val-every", "0", "--sample-every", "0",
                                                                     "--log", log]


def torch_command(args, checkpoint, options, out, batch, steps=None, profile=True):
    cmd = [args.python, REFERENCE] + common_args(args, "--checkpoint", checkpoint, batch, steps) + [
        "--device", "cuda"] + options + ["--warmup-steps-timing", str(args.skip), "--out", out]
    if profile and args.profile_step:  # one more step under torch.profiler (tests/bench/step_breakdown_vs_torch.py)
        cmd += ["--profile-step", args.profile_step, "--profile-trace", profile_trace_path(args.profile_step)]
    return cmd


def set_batch(entry, args, batch):
    """An entry's batch, and its command at that batch (PyTorch best's group, once it is known)."""
    entry["batch"] = batch
    if entry["kind"] == "cpp":
        entry["command"] = cpp_command(args, entry["exe"], entry["checkpoint"], entry["output"], batch)
    else:
        entry["command"] = torch_command(args, entry["checkpoint"], entry["options"], entry["output"], batch)


def plan_entries(args, trainers, checkpoint, logs):
    entries = []
    if args.stages in ("all", "none"):
        stages = sorted(trainers) if args.stages == "all" else []
    else:
        stages = [x.strip() for x in args.stages.split(",") if x.strip()]
        for stage in stages:
            if stage not in trainers:
                usage_error(f"stage {stage} is not built in {args.build} "
                            f"(built: {', '.join(sorted(trainers)) or 'none'})")
    keys = torch_keys(args.torch)
    best = "best" in keys
    for stage in stages:
        exe = trainers[stage]
        name = os.path.basename(exe)[len("train_"):]
        for group in ("ladder", "best") if best and stage in BEST_CPP_STAGES else ("ladder",):
            key = f"cpp_{stage}" + ("_best" if group == "best" else "")
            log = os.path.join(logs, f"{key}.jsonl")
            entries.append({"kind": "cpp", "stage": "best" if group == "best" else stage, "cpp_stage": stage,
                            "group": group, "key": key, "name": name, "short": name[3:].replace("_", " "),
                            "label": f"C++ {name}", "output": log, "exe": exe, "checkpoint": checkpoint})
    for key, stage, short, options in TORCH_CONFIGS:
        if key not in keys:
            continue
        asked = option_value(options, "--sdpa-backend")
        entries.append({"kind": "torch", "stage": stage, "group": GROUPS.get(key, "ladder"), "key": f"torch_{key}",
                        "name": key, "configuration": short, "short": torch_short(short, None, asked),
                        "label": f"PyTorch {torch_short(short, None, asked)}", "sdpa_backend_asked": asked,
                        "options": options, "output": os.path.join(logs, f"torch_{key}.json"),
                        "checkpoint": checkpoint, "profile": args.profile_step})
    choices = [args.best_batch] if args.best_batch else list(BEST_BATCHES)
    for e in entries:
        best_group = e["group"] == "best"
        # PyTorch best's group runs at the batch its search finds: planned (and shown) at the first try.
        set_batch(e, args, choices[0] if best_group else args.batch)
        if best_group:
            e["batch"] = None
            e["batch_choices"] = choices
    entries.sort(key=lambda e: run_order(e, args.order))
    return entries


def run_order(entry, order):
    """The order the entries run in: the per-stage entries (the ladder), then the vocabulary pairs,
    then PyTorch best and the C++ stages beside it, so that a ladder cut short by its budget has the
    ladder. In the ladder, pairs: C++ stage NN, then its PyTorch counterpart; newest-first: every
    C++ stage from the newest down, then PyTorch's from the newest down (the GPU check's quick phase).
    PyTorch best runs first in its group: its probes choose the batch of the others; max-autotune,
    the longest compile, runs last."""
    group = entry.get("group", "ladder")
    kind = 0 if entry["kind"] == "cpp" else 1
    sign = -1 if order == "newest-first" else 1
    if group == "best":
        place = 0 if entry["key"] == BEST_KEY else 1 if entry["kind"] == "cpp" else 2
        return (GROUP_RANK[group], place, sign * int(entry.get("cpp_stage") or 0))
    if order == "newest-first":
        return (GROUP_RANK[group], kind, -int(entry["stage"]))
    return (GROUP_RANK[group], int(entry["stage"]), kind)


def pair_order(entry):
    """The order of the results, whatever order the entries ran in: C++ stage NN, then its
    PyTorch counterpart (a ladder cut short still has pairs); then the vocabulary pairs; then the
    C++ stages at PyTorch best's batch, then PyTorch best."""
    group = entry.get("group", "ladder")
    return (GROUP_RANK.get(group, 0), entry.get("cpp_stage") or entry["stage"], 0 if entry["kind"] == "cpp" else 1)


# ----------------------------------------------------------------------------------------
# Running


def gpu_info():
    """(name, driver) of GPU 0 from nvidia-smi, or (None, None)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None, None
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    line = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    if "," not in line:
        return None, None
    name, driver = (x.strip() for x in line.split(",", 1))
    return name, driver


def show(cmd):
    """A command for people to read: paths inside the current directory made relative."""
    here = os.getcwd() + os.sep
    return shlex.join(a[len(here):] if a.startswith(here) else a for a in cmd)


def tail(path, lines=40):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()[-lines:]
    except OSError:
        return []


def error_line(log_lines):
    """The one line that says why a run failed: its 'error:' line if it printed one."""
    for line in reversed(log_lines):
        if re.search(r"(^|: )error: ", line) or line.startswith("error:"):
            return line.strip()
    for line in reversed(log_lines):
        if re.search(r"(Error|error|Exception)\b", line):
            return line.strip()
    return next((l.strip() for l in reversed(log_lines) if l.strip()), "no output")


def progress_of(entry):
    """'step k/N' of a running entry, read from its outputs so far."""
    try:
        if entry["kind"] == "cpp":
            with open(entry["output"], encoding="utf-8") as f:
                n = sum(1 for line in f if '"type": "step"' in line)
            return f"step {n}/{entry['steps']}"
        for line in reversed(tail(entry["log"], 5)):
            m = re.match(r"step\s+(\d+)/(\d+)", line)
            if m:
                return f"step {m.group(1)}/{m.group(2)}"
    except OSError:
        pass
    return "starting"


# Each entry, and each tool the ladder runs, gets a process group of its own: a Ctrl-C at the
# terminal then reaches only the ladder, and the ladder decides how its children are stopped.


def signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the child leads a group with its own pid
    except ProcessLookupError:
        pass  # nothing of the group is left


def leader_exited(proc):
    """Whether the group's main process has exited, without reaping it: while it is not reaped,
    its pid, which is the group's id, cannot be given to another process, so signals to the
    group reach no stranger."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def end_group(proc):
    """SIGKILL to whatever is left of the group (torch.compile's workers, say), then reap."""
    signal_group(proc, signal.SIGKILL)
    proc.wait()


def stop_group(proc, grace):
    """Stops a running group: SIGINT to all of it, as a Ctrl-C would, so that PyTorch exits
    and releases the GPU; then SIGKILL once the main process has exited, or after `grace`
    seconds at the latest."""
    signal_group(proc, signal.SIGINT)
    deadline = time.monotonic() + grace
    try:
        while not leader_exited(proc) and time.monotonic() < deadline:
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: no more waiting
    end_group(proc)


# When the ladder itself is interrupted, whoever interrupted it may not wait long either
# (tests/gpu_check.sh sends SIGKILL 5 to 10 s after its SIGTERM): the ladder must have ended its
# children before that, or they would be left running.
INTERRUPT_GRACE_S = 5


def default_sigint():
    """In the child, before it runs: SIGINT as a program expects it. A ladder started as a
    background command by a shell without job control (tests/gpu_check.sh starts it so) inherits
    SIGINT ignored, and so would its children, whom stop_group then could not stop but by SIGKILL
    after the grace: a trainer would not remove its temporary files, PyTorch not end cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_in_group(cmd, log, limit, grace, tick=None):
    """Runs cmd in a process group of its own, its output appended to the open file `log`.

    Returns (return code, None) when it ends by itself, or (None, "limit") when it ran longer
    than `limit` seconds and was stopped. On Ctrl-C (KeyboardInterrupt) the group is stopped
    and the exception passed on. tick(elapsed seconds) is called about every 0.2 s.
    """
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                            preexec_fn=default_sigint)
    t0 = time.monotonic()
    try:
        while not leader_exited(proc):
            if time.monotonic() - t0 > limit:
                stop_group(proc, grace)
                return None, "limit"
            if tick:
                tick(time.monotonic() - t0)
            time.sleep(0.2)
    except KeyboardInterrupt:
        stop_group(proc, min(grace, INTERRUPT_GRACE_S))
        raise
    end_group(proc)  # it has finished; nothing it started may outlive it
    return proc.returncode, None


class Budget:
    """The time the whole ladder may take (--budget); unlimited without one."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.deadline = None if seconds is None else time.monotonic() + seconds

    def left(self):
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def limit(self, timeout, grace):
        """(seconds a command may run, whether the budget rather than `timeout` sets that):
        the budget keeps `grace` seconds back, for stopping the command in time."""
        left = self.left() - grace
        return (left, True) if left < timeout else (timeout, False)


def run_command(entry, limit, by_budget, grace, interactive):
    """Runs an entry's command with its output in its log; returns (returncode, status, wall_s)
    where status is None when it ended by itself, else "timeout", "budget" or "interrupted"."""
    t0 = time.monotonic()
    last_report = [t0]

    def tick(elapsed):
        if interactive:
            sys.stdout.write(f"\r        ... {progress_of(entry)} ({elapsed:.0f} s)   ")
            sys.stdout.flush()
        elif time.monotonic() - last_report[0] >= 30:
            print(f"        ... {progress_of(entry)} ({elapsed:.0f} s)", flush=True)
            last_report[0] = time.monotonic()

    with open(entry["log"], "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(entry["command"]) + "\n\n")
        log.flush()
        try:
            rc, stopped = run_in_group(entry["command"], log, limit, grace, tick)
        except OSError as exc:
            log.write(f"error: cannot start: {exc}\n")
            return None, "failed", time.monotonic() - t0
        except KeyboardInterrupt:
            log.write(f"\nerror: interrupted after {time.monotonic() - t0:.0f} s (Ctrl-C)\n")
            return None, "interrupted", time.monotonic() - t0
        wall = time.monotonic() - t0
        if stopped and by_budget:
            log.write(f"\nerror: stopped after {wall:.0f} s: the ladder's --budget was spent\n")
            return None, "budget", wall
        if stopped:
            log.write(f"\nerror: timed out after {limit:.0f} s (ladder.py --timeout)\n")
            return None, "timeout", wall
        return rc, None, wall


def read_events(path, partial=False):
    """The events of a trainer's JSON Lines log. partial: the run was cut off, and its last
    line may be incomplete: lines that do not parse are left out."""
    events = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                events.append(json.loads(line))
            except ValueError:
                if not partial:
                    raise
    return events


# What the ladder takes from a trainer's "start" event (common/train/loop.h): the model's sizes
# and parameter count, the FLOPs per token at this T, and the peak FLOP/s of the device with
# the entry of the peak table in common/util/peak_flops.h that gave it (null where unknown).
START_KEYS = ("config", "params", "flops_per_token", "peak_flops", "peak_match")


def read_cpp(entry, partial=False):
    """Steps, peak memory, device and the start event's numbers from the trainer's log."""
    events = read_events(entry["output"], partial)
    steps = sorted((e for e in events if e.get("type") == "step"), key=lambda e: e["step"])
    summary = next((e for e in events if e.get("type") == "summary"), {})
    start = next((e for e in events if e.get("type") == "start"), {})
    return {
        "losses": [e.get("loss") for e in steps],
        "step_ms": [e.get("ms") for e in steps],
        "peak_memory_bytes": summary.get("peak_memory_bytes"),
        "device": start.get("device"),
        "start": {k: start.get(k) for k in START_KEYS} if start else None,
    }


def read_torch(entry):
    with open(entry["output"], encoding="utf-8") as f:
        data = json.load(f)
    return {
        "losses": data.get("losses", []),
        "step_ms": data.get("step_ms", []),
        "peak_memory_bytes": data.get("peak_memory_bytes"),
        "device": data.get("device_name"),
        "torch_version": data.get("torch_version"),
        # what gpt2_reference.py pinned (null where it wrote none: manual attention, or an older reference)
        "sdpa_backend": data.get("sdpa_backend"),
        "sdpa_backend_note": data.get("sdpa_backend_note"),
        "inductor_padding": data.get("inductor_padding"),
    }


def run_entry(entry, args, index, count, limit, by_budget):
    who = "C++    " if entry["kind"] == "cpp" else "PyTorch"
    what = "train_" + entry["name"] if entry["kind"] == "cpp" else entry["short"]
    print(f"[{index:2d}/{count}] stage {entry['stage']} {who} {what}", flush=True)
    entry["steps"] = args.steps
    clock_file = entry["log"][:-len(".log")] + ".clock.csv"
    for path in (entry["output"], entry.get("profile"), clock_file):
        if path and os.path.exists(path):
            os.remove(path)  # an earlier run's output must not pass for this one's
    with ClockSampler(clock_file) as clock:  # the GPU's clock while the entry runs
        rc, status, wall = run_command(entry, limit, by_budget, args.grace, sys.stdout.isatty())
    entry["clock"] = clock.summary
    if sys.stdout.isatty():
        sys.stdout.write("\r" + " " * 60 + "\r")
    entry["returncode"], entry["wall_s"] = rc, round(wall, 1)
    lines = tail(entry["log"])
    if status is None and rc == 0:
        try:
            entry.update(read_cpp(entry) if entry["kind"] == "cpp" else read_torch(entry))
            if entry["kind"] == "torch" and entry.get("configuration"):  # the backend it used, fallback shown
                entry["short"] = torch_short(entry["configuration"], entry.get("sdpa_backend"),
                                             entry.get("sdpa_backend_asked"))
                entry["label"] = f"PyTorch {entry['short']}"
            status = "ok" if entry["losses"] else "failed"
            if not entry["losses"]:
                entry["error"] = "the run wrote no steps"
            elif entry.get("profile") and not os.path.exists(entry["profile"]):
                status, entry["error"] = "failed", f"the run wrote no profile ({entry['profile']})"
        except (OSError, ValueError, KeyError) as exc:
            status, entry["error"] = "failed", f"cannot read {entry['output']}: {exc}"
    else:
        entry["error"] = error_line(lines)
        if entry["kind"] == "cpp":
            try:  # the steps before the end still show on the loss plot (a divergence, say)
                entry.update(read_cpp(entry, partial=True))
            except (OSError, ValueError, KeyError):
                pass
        if status is None:
            status = "failed"
            if entry["kind"] == "torch" and rc == 77:
                status = "skipped"  # gpt2_reference.py: torch cannot be imported
            elif "out of memory" in entry["error"] or "out of device memory" in entry["error"]:
                status = "oom"
    entry["status"] = status
    return entry


def not_run(entry, why):
    """An entry the ladder did not start: why is "budget" or "interrupted"."""
    entry.update(status="not run", error=why, returncode=None, wall_s=0.0)
    return entry


OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|out of device memory", re.IGNORECASE)


def search_best_batch(entry, args, budget, logs):
    """PyTorch best's batch: a probe of PROBE_STEPS steps at each of its batch_choices, largest
    first, until one fits; a probe that runs out of memory (its log says so) passes to the next.
    Every try is recorded in entry["batch_search"]. Returns (batch, None), or (None, (status, why))
    for the entry: "not run" when no batch fits, "failed" when a probe failed otherwise (a smaller
    batch would not cure it), "budget" or "interrupted" when the ladder stops."""
    tried = entry["batch_search"] = []
    for batch in entry["batch_choices"]:
        limit, by_budget = budget.limit(args.timeout, args.grace)
        if limit < 1:
            return None, ("budget", "budget")
        name = f"torch_best_probe_b{batch}"
        probe = {"kind": "torch", "steps": PROBE_STEPS, "log": os.path.join(logs, name + ".log"),
                 "output": os.path.join(logs, name + ".json")}
        probe["command"] = torch_command(args, entry["checkpoint"], entry["options"], probe["output"], batch,
                                         steps=PROBE_STEPS, profile=False)
        print(f"        probe: batch {batch}, {PROBE_STEPS} steps", flush=True)
        rc, status, wall = run_command(probe, limit, by_budget, args.grace, False)
        lines = tail(probe["log"], 80)
        result = {"batch": batch, "wall_s": round(wall, 1), "log": probe["log"]}
        tried.append(result)
        if status in ("budget", "interrupted"):
            result.update(result=status, error=status)
            return None, (status, status)
        if status is None and rc == 0:
            result["result"] = "fits"
            print(f"        batch {batch} fits ({wall:.0f} s)", flush=True)
            return batch, None
        why = error_line(lines)
        if status is None and any(OUT_OF_MEMORY.search(line) for line in lines):
            result.update(result="out of memory", error=why)
            print(f"        batch {batch} is out of memory ({why})", flush=True)
            continue
        result.update(result=status or "failed", error=why)
        return None, ("failed", f"its probe at batch {batch} {'timed out' if status == 'timeout' else 'failed'}: {why}")
    return None, ("not run", "no batch fits: " + ", ".join(f"{t['batch']} out of memory" for t in tried))


def derive(entry, meta):
    """The reported numbers of one entry, from its raw per-step data (also for --results-only)."""
    for key in ("median_ms", "tokens_per_s", "mfu", "final_loss", "timed_steps"):
        entry[key] = None
    if entry.get("status") != "ok":
        return entry
    tokens = (entry.get("batch") or meta["batch"]) * meta["seq"]
    step_ms = [ms for ms in entry.get("step_ms") or [] if ms is not None and ms > 0]
    # Steady state: leave out the first `skip` steps; with too few steps keep at least one.
    skip = min(meta["skip"], max(len(step_ms) - 1, 0))
    timed = step_ms[skip:]
    if timed:
        entry["timed_steps"] = len(timed)
        entry["median_ms"] = median(timed)
        entry["tokens_per_s"] = median([tokens / (ms / 1000.0) for ms in timed])
        if meta.get("peak_flops") and meta.get("flops_per_token"):
            entry["mfu"] = entry["tokens_per_s"] * meta["flops_per_token"] / meta["peak_flops"]
    losses = [x for x in entry.get("losses") or [] if x is not None]
    entry["final_loss"] = losses[-1] if losses else None
    return entry


def take_mfu_denominator(meta, entries):
    """FLOPs per token and the peak, for every entry's MFU, PyTorch's included: from the start
    event of the first C++ entry that wrote one (all of them ran on this GPU at this T). Without
    a C++ entry there is no MFU: the ladder does not count FLOPs or keep a peak table itself."""
    if meta.get("flops_per_token"):
        return  # taken already (results of earlier ladders carry them too)
    for e in entries:
        start = e.get("start") or {}
        if e["kind"] == "cpp" and start.get("flops_per_token"):
            meta.update(flops_per_token=start["flops_per_token"], peak_flops=start.get("peak_flops"),
                        peak_match=start.get("peak_match"), mfu_from=e["key"])
            meta["params"] = meta.get("params") or start.get("params")
            return


def finish_meta(results):
    """Fills what the entries tell about the run: the GPU's name when nvidia-smi did not, and
    the MFU denominator; then derives every entry's numbers and the speed-ups."""
    meta, entries = results["meta"], results["entries"]
    if not meta.get("gpu"):
        names = [(e.get("device") or "").split(",")[0].strip() for e in entries if e.get("status") == "ok"]
        names += [(results.get("ceilings") or {}).get("device_name") or ""]
        meta["gpu"] = next((n for n in names if n and n != "cpu"), None)
    take_mfu_denominator(meta, entries)
    if not meta.get("model_title"):
        meta["model_title"] = model_title(meta.get("params"))
    versions = {e.get("torch_version") for e in entries if e.get("torch_version")}
    if versions:
        meta["torch_version"] = ", ".join(sorted(versions))
    for e in entries:
        derive(e, meta)

    def group(e):
        return e.get("group", "ladder")

    def ratio(a, b):
        return a["tokens_per_s"] / b["tokens_per_s"] if a and b and a.get("tokens_per_s") and b.get("tokens_per_s") \
            else None

    # vs stage 00: at the same batch only (not PyTorch best's group)
    for kind in ("cpp", "torch"):
        base = next((e for e in entries if e["kind"] == kind and e["stage"] == "00" and group(e) == "ladder"), None)
        for e in entries:
            if e["kind"] == kind:
                e["speedup_vs_00"] = ratio(e, base) if group(e) != "best" else None
    # C++ ÷ PyTorch: a stage over its counterpart; at PyTorch best's batch, over PyTorch best
    best = next((x for x in entries if x["key"] == BEST_KEY), None)
    for e in entries:
        other = None
        if e["kind"] == "cpp" and group(e) == "best":
            other = best
        elif e["kind"] == "cpp":
            other = next((x for x in entries if x["stage"] == e["stage"] and x["kind"] == "torch"
                          and group(x) == "ladder"), None)
        e["cpp_over_torch"] = ratio(e, other) if other else None
    by_key = {e["key"]: e for e in entries}
    results["comparisons"] = [
        {"question": question, "entries": [a, b], "ratio": ratio(by_key[a], by_key[b])}
        for a, b, question in QUESTIONS if a in by_key and b in by_key]
    return results


# ----------------------------------------------------------------------------------------
# Rendering


def fmt_num(v, digits=0):
    return "" if v is None else f"{v:,.{digits}f}"


def fmt_gib(b):
    return "" if b is None else f"{b / 2**30:.2f} GiB"


def fmt_pct(v):
    return "" if v is None else f"{100 * v:.1f}%"


def fmt_x(v):
    return "" if v is None else f"{v:.2f}×"


def table_rows(results):
    """The rows of the table, as lists of strings (shared by results.md and results.txt)."""
    rows = []
    blank = [""] * (len(HEADER) - FIRST_NUMBER - 1)
    for e in results["entries"]:
        who = "C++" if e["kind"] == "cpp" else "PyTorch"
        config = e["name"] if e["kind"] == "cpp" else e["short"]
        batch = str(e.get("batch") or (results["meta"]["batch"] if e.get("group", "ladder") != "best" else ""))
        if e.get("status") == "not run":
            rows.append([e["stage"], who, config, batch, f"not run ({e.get('error')})"] + blank)
            continue
        if e.get("status") != "ok":
            reason = e.get("error") or ""
            rows.append([e["stage"], who, config, batch, f"{e.get('status', 'failed')}: {reason}"[:160]] + blank)
            continue
        rows.append([e["stage"], who, config, batch, fmt_num(e["tokens_per_s"]), fmt_num(e["median_ms"], 1),
                     fmt_pct(e["mfu"]), fmt_gib(e.get("peak_memory_bytes")), fmt_num(e["final_loss"], 4),
                     fmt_x(e.get("speedup_vs_00")), fmt_x(e.get("cpp_over_torch"))] + sm_clock_cells(e.get("clock")))
    return rows


def sm_clock_cells(clock):
    """An entry's cells "SM MHz" and "throttle": "1950/1755" (median/min over its busy samples; a *
    where none was busy and they are over all) and "power cap"; "-" where nvidia-smi read nothing."""
    if not clock:
        return ["-", "-"]
    mhz = "/".join("-" if clock.get(k) is None else f"{clock[k]:.0f}" for k in ("sm_mhz_median", "sm_mhz_min"))
    return [mhz + ("" if clock.get("over") == "busy" else "*"), clock.get("throttle_reasons") or "-"]


def clock_text(clock):
    """The SM clock for the progress lines: ", SM 1950/1755 MHz, throttle: power cap"; "" without one."""
    if not clock:
        return ""
    mhz, throttle = sm_clock_cells(clock)
    return f", SM {mhz} MHz, throttle: {throttle}"


HEADER = ["stage", "implementation", "configuration", "batch", "tokens/s", "ms/step", "MFU", "peak memory",
          "final loss", "vs stage 00", "C++ ÷ PyTorch", "SM MHz", "throttle"]
FIRST_NUMBER = HEADER.index("tokens/s")


def best_line(results):
    """How PyTorch best's batch was found, and its attention backend; None without it."""
    e = next((x for x in results["entries"] if x["key"] == BEST_KEY), None)
    if not e:
        return None
    tries = e.get("batch_search") or []
    said = "; ".join(f"{t['batch']}: {t['result']}" + (f" ({t['error']})" if t.get("error") and t["result"] not in
                                                       ("fits", "budget", "interrupted") else "") for t in tries)
    if e.get("batch") and not tries:
        found = f"batch {e['batch']} (--best-batch, no search)"
    elif e.get("batch"):
        found = f"batch {e['batch']}, the largest of {', '.join(map(str, e.get('batch_choices') or []))} that fits " \
                f"a {PROBE_STEPS}-step probe ({said})"
    else:
        found = f"no batch ({said or e.get('error') or 'not searched'})"
    cpp = ", ".join(x["cpp_stage"] for x in results["entries"] if x["kind"] == "cpp" and x.get("group") == "best")
    line = found
    if cpp:
        line += (f"; C++ {cpp} beside it at that batch, each row's C++ ÷ PyTorch over it" if e.get("batch")
                 else f"; C++ {cpp} not run beside it")
    if e.get("batch") and any(x["key"] == "torch_best_autotune" for x in results["entries"]):
        line += "; max-autotune at that batch too"
    if e.get("sdpa_backend"):
        line += f"; attention: {e['sdpa_backend']}" + (f" ({e['sdpa_backend_note']})" if e.get("sdpa_backend_note")
                                                        else "")
    return line


def comparison_lines(results):
    """The pairs of QUESTIONS that ran, each with its ratio."""
    out = []
    for c in results.get("comparisons") or []:
        a, b = c["entries"]
        value = fmt_x(c["ratio"]) if c.get("ratio") is not None else "not measured"
        out.append(f"{a} ÷ {b} = {value}: {c['question']}")
    return out


def header_lines(results):
    """What was measured, where, and how: the lines above the table."""
    meta, ceil = results["meta"], results.get("ceilings")
    gpu = meta.get("gpu") or "unknown GPU"
    lines = [("GPU", gpu + (f" (driver {meta['driver']})" if meta.get("driver") else ""))]
    lines.append(("Date", meta.get("date", "")))
    lines.append(("Command", meta.get("command", "")))
    tps = meta["batch"] * meta["seq"]
    params = f"{meta['params']:,} parameters" if meta.get("params") else "parameters unknown"
    init = meta.get("init") or f"gpt_init --model {meta['model']} --seed {INIT_SEED}"
    lines.append(("Workload",
        f"GPT-2 {meta.get('model_title') or ''} ({meta['model']}, {params}), "
        f"batch {meta['batch']} x T {meta['seq']} = {tps:,} tokens/step, {meta['steps']} steps from the "
        f"same checkpoint ({init}) on {meta.get('data_name', '')}; "
        f"medians over steps {meta['skip'] + 1}-{meta['steps']}"))
    lines.append(("Training settings (both sides)", " ".join(f"{k} {v}" for k, v in meta.get("settings", []))))
    source = f" (from the start event of {meta['mfu_from']})" if meta.get("mfu_from") else ""
    if meta.get("peak_flops") and meta.get("flops_per_token"):
        lines.append(("MFU", f"tokens/s x {meta['flops_per_token']:,.0f} FLOPs/token (6N + 12·L·H·Q·T) / "
                             f"{meta['peak_flops'] / 1e12:.0f} TFLOP/s, the dense bf16 peak of "
                             f"'{meta.get('peak_match')}' in common/util/peak_flops.h{source}, for every entry"))
    elif meta.get("flops_per_token"):
        lines.append(("MFU", f"not reported: {gpu} is not in the peak table of common/util/peak_flops.h{source}"))
    else:
        lines.append(("MFU", "not reported (no C++ trainer wrote a start event in this run: the FLOPs per "
                             "token and the GPU's peak come from there)"))
    if ceil:
        c, g = ceil.get("copy", {}), ceil.get("gemm", {})
        of_peak = ""
        if meta.get("peak_flops") and g.get("tflops"):
            of_peak = f", {100 * g['tflops'] * 1e12 / meta['peak_flops']:.0f}% of the data-sheet peak"
        lines.append(("Ceilings on this GPU (bench_ceilings)",
                      f"device-to-device copy {c.get('gb_per_s', 0):,.0f} GB/s (read + write); bf16 GEMM "
                      f"{g.get('m')}x{g.get('n')}x{g.get('k')} {g.get('tflops', 0):,.1f} TFLOP/s{of_peak}"))
    else:
        lines.append(("Ceilings", "not measured (bench_ceilings not built or failed)"))
    if meta.get("torch_version"):
        lines.append(("PyTorch", meta["torch_version"]))
    if any(e["kind"] == "torch" and e.get("sdpa_backend_asked") for e in results["entries"]):
        lines.append(("SDPA backend", "pinned in every PyTorch entry that calls SDPA (gpt2_reference.py "
                                      "--sdpa-backend), shown in brackets after its configuration"))
    best = best_line(results)
    if best:
        lines.append(("PyTorch best", best))
    if any("clock" in e for e in results["entries"]):
        lines.append(("SM clock", f"nvidia-smi every {SAMPLE_INTERVAL_MS / 1000:g} s during the entry "
                                  f"(logs/KEY.clock.csv); busy samples: utilization >= {BUSY_UTILIZATION} %; "
                                  "SM MHz: their median/min (*: over all samples, none was busy); throttle: "
                                  "every reason active in them; -: not read (no nvidia-smi, or it failed)"))
    if meta.get("stopped"):
        lines.append(("Stopped early", meta["stopped"]))
    return lines


def render_md(results):
    out = io.StringIO()
    meta = results["meta"]
    out.write(f"# Benchmark ladder: GPT-2 {meta.get('model_title', meta['model'])}, "
              f"{meta.get('gpu') or 'unknown GPU'}\n\n")
    out.write("Written by tests/bench/ladder.py; every number below was printed by that run. "
              "See tests/bench/README.md for what each one means.\n\n")
    for key, text in header_lines(results):
        out.write(f"- **{key}**: " + (f"`{text}`" if key == "Command" else text) + "\n")
    out.write("\n| " + " | ".join(HEADER) + " |\n")
    out.write("|" + "|".join(["---"] * 3 + ["---:"] * (len(HEADER) - 4) + ["---"]) + "|\n")
    for row in table_rows(results):
        out.write("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |\n")
    out.write("\n'vs stage 00': tokens/s over stage 00 of the same implementation, at the same batch. "
              "'C++ ÷ PyTorch': the C++ stage's tokens/s over its PyTorch counterpart's; in the rows of "
              "stage 'best', over PyTorch best's at the same batch.\n\n")
    pairs = comparison_lines(results)
    if pairs:
        out.write("Pairs that answer one question (tokens/s over tokens/s):\n\n")
        out.write("".join(f"- {line}\n" for line in pairs) + "\n")
    out.write("![training loss](loss.svg)\n\n![tokens per second](throughput.svg)\n")
    if (meta.get("best") or {}).get("batch"):
        out.write("\n![training loss, PyTorch best's batch](loss_best.svg)\n\n"
                  "![tokens per second, PyTorch best's batch](throughput_best.svg)\n")
    return out.getvalue()


def render_txt(results):
    rows = [HEADER] + table_rows(results)
    k = FIRST_NUMBER
    failed = [n and r[k] and r[k + 1:] == [""] * (len(HEADER) - k - 1) for n, r in enumerate(rows)]
    widths = [max(len(r[i]) for r, f in zip(rows, failed) if not (f and i >= k)) for i in range(len(HEADER))]
    right = set(range(3, len(HEADER) - 1))  # the throttle reasons are words
    out = io.StringIO()
    for key, text in header_lines(results):
        out.write(f"{key}: {text}\n")
    out.write("\n")
    for n, row in enumerate(rows):
        if failed[n]:  # a failed entry: the reason spans the number columns
            out.write("  ".join(row[i].rjust(widths[i]) if i in right else row[i].ljust(widths[i])
                                for i in range(k)) + "  " + row[k] + "\n")
            continue
        cells = [row[i].rjust(widths[i]) if i in right else row[i].ljust(widths[i]) for i in range(len(row))]
        out.write("  ".join(cells).rstrip() + "\n")
        if n == 0:
            out.write("  ".join("-" * w for w in widths) + "\n")
    pairs = comparison_lines(results)
    if pairs:
        out.write("\nPairs that answer one question (tokens/s over tokens/s):\n")
        out.write("".join(f"  {line}\n" for line in pairs))
    return out.getvalue()


CLOCK_KEYS = ["sm_mhz_median", "sm_mhz_min", "sm_mhz_max", "throttle_mask", "throttle_reasons", "power_w_max",
              "temperature_c_max"]  # of an entry's "clock" (gpu_clock.summarize), in the CSV as they are
CSV_FIELDS = ["stage", "kind", "name", "key", "batch", "sdpa_backend", "sdpa_backend_asked", "status", "error",
              "tokens_per_s", "median_ms", "mfu", "peak_memory_bytes", "final_loss", "speedup_vs_00", "cpp_over_torch",
              "timed_steps", "wall_s"] + CLOCK_KEYS + ["clock_samples", "clock_busy_samples"]


def clock_csv_values(clock):
    c = clock or {}
    return dict({k: c.get(k) for k in CLOCK_KEYS}, clock_samples=c.get("samples"),
                clock_busy_samples=c.get("busy_samples"))


def render_csv(results):
    out = io.StringIO()
    meta = results["meta"]
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_FIELDS + ["gpu", "date", "model", "ladder_batch", "seq", "steps"])
    digits = {"tokens_per_s": 1, "median_ms": 3, "mfu": 5, "final_loss": 6, "speedup_vs_00": 4,
              "cpp_over_torch": 4}

    def cell(e, k):
        v = e.get(k)
        return "" if v is None else round(v, digits[k]) if k in digits else v

    for e in results["entries"]:
        e = dict(e, batch=e.get("batch") or (meta["batch"] if e.get("group", "ladder") != "best" else None),
                 **clock_csv_values(e.get("clock")))
        w.writerow([cell(e, k) for k in CSV_FIELDS] +
                   [meta.get("gpu") or "", meta.get("date", ""), meta["model"], meta["batch"], meta["seq"],
                    meta["steps"]])
    return out.getvalue()


def write_text(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def save_results(results, out_dir):
    write_text(os.path.join(out_dir, "results.json"), json.dumps(results, indent=1) + "\n")


def render_all(results, out_dir, plots=True):
    """results.md, .txt, .csv and the plots; returns the paths written."""
    finish_meta(results)
    os.makedirs(out_dir, exist_ok=True)
    save_results(results, out_dir)
    written = [os.path.join(out_dir, "results.json")]
    for name, text in (("results.md", render_md(results)), ("results.txt", render_txt(results)),
                       ("results.csv", render_csv(results))):
        write_text(os.path.join(out_dir, name), text)
        written.append(os.path.join(out_dir, name))
    if plots:
        try:
            import plot
            main = [e for e in results["entries"] if e.get("group", "ladder") != "best"]
            written += plot.render(dict(results, entries=main), out_dir)
            written += plot_best(plot, results, out_dir)
        except Exception as exc:  # a plot must never lose the numbers above
            print(f"ladder.py: warning: plotting failed: {exc}", file=sys.stderr)
    return written


def plot_best(plot, results, out_dir):
    """loss_best.svg and throughput_best.svg: the C++ stages at PyTorch best's batch and PyTorch
    best (plot.py's figures, drawn from a view of the results: each C++ entry under its stage
    number, PyTorch best's bar beside each of them, its curve once, in grey)."""
    batch = (results["meta"].get("best") or {}).get("batch")
    if not batch:
        return []
    group = [e for e in results["entries"] if e.get("group") == "best"]
    cpp = [dict(e, stage=e["cpp_stage"]) for e in group if e["kind"] == "cpp"]
    torch = [e for e in group if e["key"] == BEST_KEY]
    view = dict(results, meta=dict(results["meta"], batch=batch))
    paths = [os.path.join(out_dir, "loss_best.svg"), os.path.join(out_dir, "throughput_best.svg")]
    plot.plot_losses(dict(view, entries=cpp + torch), paths[0])
    plot.plot_throughput(dict(view, entries=cpp + ([dict(e, stage=c["stage"]) for e in torch for c in cpp]
                                                   if cpp else torch)), paths[1])
    return paths


# ----------------------------------------------------------------------------------------
# Main


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="ladder.py",
        description="The benchmark ladder: every built C++ stage and the PyTorch reference in the "
                    "configurations that the chapters name as each stage's counterpart, on the same "
                    "GPU, workload, data and initial checkpoint. See tests/bench/README.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--build", default=os.path.join(REPO, "build", "all"),
                   help="build tree with the stage trainers (build/<preset>)")
    p.add_argument("--steps", type=int, default=30, help="training steps per entry")
    p.add_argument("--skip", type=int, default=5,
                   help="first steps left out of the timing (warm-up, torch.compile)")
    p.add_argument("--batch", type=int, default=16, help="sequences per step, the same for every entry")
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence")
    p.add_argument("--model", default="d12",
                   help="model size for gpt_init (its names are those of common/model/config.cpp); the "
                        "ladder is defined for d12, the others are for trying it out")
    p.add_argument("--stages", default="all", help="C++ stages to run: all, none, or e.g. 00,01")
    p.add_argument("--torch", default="all",
                   help="PyTorch configurations: none, or a list of " + ",".join(k for k, *_ in TORCH_CONFIGS) +
                        " in which all stands for every one but " + ",".join(NOT_IN_ALL) +
                        " (all," + ",".join(NOT_IN_ALL) + ": every one)")
    p.add_argument("--best-batch", type=int, metavar="B",
                   help="run PyTorch best (--torch best) and the entries beside it at batch B instead of "
                        "searching " + ", ".join(map(str, BEST_BATCHES)) + " for the largest that fits")
    p.add_argument("--python", default=argparse.SUPPRESS,
                   help="Python with CUDA PyTorch, which runs the PyTorch entries (default: GPT_PYTHON of BUILD's "
                        "CMakeCache.txt, the Python with torch that CMake found; without it, the Python running "
                        "the ladder). The first line of the output names it")
    p.add_argument("--data", default=os.path.join(REPO, "data", "brown"), help="token shards (the default corpus)")
    p.add_argument("--checkpoint", help="initial checkpoint to use instead of making one with gpt_init")
    p.add_argument("--out", help="output directory (default: BUILD/ladder; with --results-only: that file's directory)")
    p.add_argument("--timeout", type=int, default=900,
                   help="seconds per entry before it is stopped (never more than what is left of --budget)")
    p.add_argument("--budget", type=int, metavar="SECONDS",
                   help="seconds for the whole ladder; when they are spent, the running entry is stopped, the "
                        "rest are reported 'not run (budget)' and the results of the others are written "
                        "(default: no limit)")
    p.add_argument("--grace", type=int, default=10,
                   help="seconds between SIGINT and SIGKILL when an entry is stopped (after a Ctrl-C: at most "
                        f"{INTERRUPT_GRACE_S})")
    p.add_argument("--order", choices=("pairs", "newest-first"), default="pairs",
                   help="the order the entries run in: each C++ stage, then its PyTorch counterpart (pairs); "
                        "or every C++ stage from the newest down, then PyTorch's (newest-first); the results "
                        "are shown in pairs either way")
    p.add_argument("--no-ceilings", action="store_true", help="do not run bench_ceilings")
    p.add_argument("--no-plot", action="store_true", help="do not write the SVG plots")
    p.add_argument("--dry-run", action="store_true", help="print the commands only; run nothing")
    p.add_argument("--results-only", metavar="FILE",
                   help="re-render the table, CSV and plots from a results.json; run nothing")
    p.add_argument("--profile-step", metavar="PATH",
                   help="after its steps, the PyTorch entry (exactly one --torch configuration) runs one more step "
                        "under torch.profiler and writes its per-kernel GPU times to PATH and the Chrome trace "
                        "beside it (gpt2_reference.py --profile-step, --profile-trace); its timed steps are not "
                        "affected. For tests/bench/step_breakdown_vs_torch.py")
    p.add_argument("--make-curve", metavar="PATH",
                   help="run only the PyTorch fp32 entry (stage 00's counterpart) and copy its JSON, the "
                        "reference loss curve, to PATH")
    args = p.parse_args(argv)
    for name in ("steps", "batch", "seq", "timeout"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be positive")
    if args.skip < 0:
        p.error("--skip must not be negative")
    if args.skip >= args.steps:
        p.error(f"--skip {args.skip} leaves no timed step of --steps {args.steps}")
    if args.grace < 0:
        p.error("--grace must not be negative")
    if args.budget is not None and args.budget <= 0:
        p.error("--budget must be positive")
    if args.best_batch is not None and args.best_batch <= 0:
        p.error("--best-batch must be positive")
    if args.profile_step:
        keys = [k for k, *_ in TORCH_CONFIGS]
        chosen = torch_keys(args.torch)
        if len(chosen) != 1 or args.make_curve or args.results_only:
            p.error("--profile-step profiles one PyTorch entry: give exactly one --torch configuration "
                    f"(one of {','.join(keys)})")
        args.profile_step = os.path.abspath(args.profile_step)
    args.build = os.path.abspath(args.build)
    args.data = os.path.abspath(args.data)
    if getattr(args, "python", None):
        args.python_from = "--python"
    else:
        args.python, args.python_from = cmake_python(args.build)
    return args


def cmake_python(build):
    """(the Python for the PyTorch entries, where it comes from): GPT_PYTHON of the build tree's
    CMakeCache.txt (tests/CMakeLists.txt chose it because it imports torch), else this Python."""
    cache = os.path.join(build, "CMakeCache.txt")
    try:
        with open(cache, encoding="utf-8", errors="replace") as f:
            for line in f:
                m = re.match(r"GPT_PYTHON:[A-Z]+=(.+)$", line.rstrip("\n"))
                if m:
                    return m.group(1), f"GPT_PYTHON of {os.path.relpath(cache)}"
    except OSError:
        pass
    return sys.executable, f"the Python running the ladder; no GPT_PYTHON in {os.path.relpath(cache)}"


def results_only(args):
    try:
        with open(args.results_only, encoding="utf-8") as f:
            results = json.load(f)
        if "meta" not in results or "entries" not in results:
            raise ValueError("not a ladder results file (no 'meta' and 'entries')")
    except (OSError, ValueError) as exc:
        print(f"ladder.py: error: cannot read {args.results_only}: {exc}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out or os.path.dirname(os.path.abspath(args.results_only)))
    for path in render_all(results, out, plots=not args.no_plot):
        print(f"wrote {path}")
    print()
    print(render_txt(results), end="")
    return 0 if all(e.get("status") == "ok" for e in results["entries"]) else 1


def run_tool(cmd, log_path, limit, grace):
    """Runs a helper (gpt_init, bench_ceilings) like an entry: in its own process group, with
    its output in log_path. Returns (status, why): status "ok", "failed", or "stopped" when it
    ran past `limit` seconds; why is the one line that says what went wrong."""
    if limit < 1:
        return "stopped", "no time left"
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            rc, stopped = run_in_group(cmd, log, limit, grace)
        except OSError as exc:
            return "failed", f"cannot start: {exc}"
    if stopped:
        return "stopped", f"stopped after {limit:.0f} s"
    return ("ok", None) if rc == 0 else ("failed", error_line(tail(log_path)))


def run_ceilings(args, out_dir, logs, budget, dry):
    """bench_ceilings' numbers, or None; and whether the budget ran out while it ran."""
    exe = os.path.join(args.build, "tests", "bench", "bench_ceilings")
    if args.no_ceilings or args.make_curve:
        return None, False
    if not os.path.isfile(exe):
        print(f"ceilings: {show([exe])} is not built; the table will have no ceilings", flush=True)
        return None, False
    path = os.path.join(out_dir, "ceilings.json")
    cmd = [exe, "--json", path]
    print(f"ceilings: {show(cmd)}", flush=True)
    if dry:
        return None, False
    limit, by_budget = budget.limit(600, args.grace)
    log = os.path.join(logs, "ceilings.log")
    status, why = run_tool(cmd, log, limit, args.grace)
    for line in tail(log, 100):
        print(f"  {line}", flush=True)
    if status != "ok":
        print(f"ceilings: failed: {why}", flush=True)
        return None, status == "stopped" and by_budget
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), False
    except (OSError, ValueError):
        return None, False


def best_batch(entry, args, budget, logs, index, count, meta, entries):
    """Sets PyTorch best's batch, and that of the C++ entries beside it: --best-batch, or the
    search. Returns None when it has one, else (status, why) for the entry."""
    print(f"[{index:2d}/{count}] stage best PyTorch {entry['short']}: its batch", flush=True)
    choices = entry["batch_choices"]
    meta["best"] = {"choices": choices, "batch": None, "tried": []}
    if args.best_batch:
        batch, failed = args.best_batch, None
    else:
        try:
            batch, failed = search_best_batch(entry, args, budget, logs)
        except KeyboardInterrupt:
            batch, failed = None, ("interrupted", "interrupted")
        meta["best"]["tried"] = entry["batch_search"]
    if failed:
        return failed
    meta["best"]["batch"] = batch
    for e in entries:
        if e.get("group") == "best":
            set_batch(e, args, batch)
    return None


# Run by the Python of the PyTorch entries before anything else: its last line says why not.
TORCH_CHECK = """\
import sys
try:
    import torch
except Exception as exc:
    print(f"cannot import torch ({type(exc).__name__}: {exc})")
    sys.exit(3)
if not torch.cuda.is_available():
    print(f"its torch {torch.__version__} sees no CUDA device (CUDA build: {torch.version.cuda})")
    sys.exit(3)
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name(0)}")
"""


def gpu_present(gpu_name):
    """Whether this machine has a GPU: nvidia-smi named one, or, with no nvidia-smi to ask, the
    driver lists one."""
    if gpu_name:
        return True
    return not shutil.which("nvidia-smi") and bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def preflight(args, entries, gpu, init_cmd, checkpoint):
    """Why the ladder cannot run here, or None; checked before anything is made or written (the
    initial checkpoint of d12 alone is 475 MB), so that a machine without what it needs is told
    at once."""
    if not entries:
        built = "" if find_trainers(args.build) else f" (no stage trainers in {args.build}/stages)"
        return f"nothing to run: --stages {args.stages} and --torch {args.torch} select no entry{built}"
    if not gpu_present(gpu):
        return ("no GPU found (nvidia-smi names none): every entry trains on a GPU; run the ladder on a GPU "
                "machine (--dry-run prints its plan anywhere)")
    if init_cmd and not os.access(init_cmd[0], os.X_OK):
        return (f"{init_cmd[0]} is not built, and it makes the initial checkpoint "
                f"(cmake --build {os.path.relpath(args.build)} --target gpt_init, or give --checkpoint PATH)")
    if not init_cmd and not os.path.isfile(checkpoint):
        return f"--checkpoint {checkpoint}: no such file"
    if any(e["kind"] == "torch" for e in entries):
        try:
            run = subprocess.run([args.python, "-c", TORCH_CHECK], capture_output=True, text=True, timeout=300)
            lines = (run.stdout + run.stderr).strip().splitlines()
            why = lines[-1] if lines else f"exit status {run.returncode}"
            ok = run.returncode == 0
        except (OSError, subprocess.TimeoutExpired) as exc:
            why, ok = f"cannot run it: {exc}", False
        if not ok:
            return (f"the Python for the PyTorch entries, {args.python} ({args.python_from}): {why}; give "
                    f"--python PY with CUDA PyTorch, or --torch none for the C++ stages alone")
        print(f"ladder: PyTorch: {why}", flush=True)
    return None


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM stops the ladder the way Ctrl-C does


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.results_only:
        return results_only(args)

    budget = Budget(args.budget)  # counts from here: making the checkpoint and the ceilings too
    dry = args.dry_run
    out_dir = os.path.abspath(args.out or os.path.join(args.build, "ladder"))
    logs = os.path.join(out_dir, "logs")
    trainers = find_trainers(args.build)
    if args.make_curve:
        args.stages, args.torch = "none", "fp32"

    gpu, driver = gpu_info()
    found = shutil.which(args.python)  # a bare name: which one PATH gives
    where = f", {found} on PATH" if found and os.sep not in args.python else ""
    print(f"ladder: the PyTorch entries run with {args.python} ({args.python_from}{where})"
          + ("" if torch_keys(args.torch) else "; none asked (--torch none)"), flush=True)
    meta = {
        "gpu": gpu, "driver": driver,
        "date": datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "command": shlex.join([os.path.relpath(sys.argv[0]) if argv is None else "ladder.py"] +
                              (sys.argv[1:] if argv is None else argv)),
        "build": args.build, "model": args.model,
        "batch": args.batch, "seq": args.seq, "steps": args.steps, "skip": args.skip,
        "settings": TRAIN_SETTINGS, "data": args.data, "data_name": os.path.relpath(args.data, REPO),
        "python": args.python, "timeout_s": args.timeout, "budget_s": args.budget,
        # From the checkpoint's header, once there is one.
        "config": None, "params": None, "model_title": None,
        # The MFU denominator, from the start event of a C++ entry (take_mfu_denominator).
        "flops_per_token": None, "peak_flops": None, "peak_match": None, "mfu_from": None,
    }

    print(f"ladder: GPU {gpu or 'not found by nvidia-smi'}; build {args.build}; out {out_dir}", flush=True)
    print(f"ladder: {args.checkpoint or args.model}, B={args.batch}, T={args.seq}, {args.steps} steps "
          f"(first {args.skip} untimed)" + (f"; budget {args.budget} s" if args.budget else ""), flush=True)
    if not trainers and not args.make_curve:
        print(f"ladder: no stage trainers in {args.build}/stages (build one: cmake --build --preset all)",
              flush=True)
    if not glob.glob(os.path.join(args.data, "*_train_*.bin")):
        msg = (f"no *_train_*.bin shards in {args.data} (make the default corpus: "
               f"cmake --build {os.path.relpath(args.build)} --target data)")
        if not dry:
            print(f"ladder.py: error: {msg}", file=sys.stderr)
            return 2
        print(f"ladder: note: {msg}")

    # The initial checkpoint, made once: every entry starts from exactly these parameters.
    checkpoint = args.checkpoint and os.path.abspath(args.checkpoint)
    init_cmd = None
    if not checkpoint:
        checkpoint = os.path.join(out_dir, f"init_{args.model}_seed{INIT_SEED}.ckpt")
        gpt_init = os.path.join(args.build, "common", "gpt_init")
        init_cmd = [gpt_init, "--model", args.model, "--seed", str(INIT_SEED), "--out", checkpoint]
        meta["init"] = f"gpt_init --model {args.model} --seed {INIT_SEED}"
    else:
        meta["model"] = os.path.basename(checkpoint)
        meta["init"] = f"--checkpoint {os.path.relpath(checkpoint)}"
    meta["checkpoint"] = checkpoint

    entries = plan_entries(args, trainers, checkpoint, logs)
    for e in entries:
        e["log"] = os.path.join(logs, e["key"] + ".log")

    if dry:
        print("\nplan (dry run: nothing is run)")
        if init_cmd:
            print(f"  checkpoint: {show(init_cmd)}")
        run_ceilings(args, out_dir, logs, budget, dry=True)
        for i, e in enumerate(entries, 1):
            who = "C++    " if e["kind"] == "cpp" else "PyTorch"
            what = "train_" + e["name"] if e["kind"] == "cpp" else e["short"]
            print(f"  [{i:2d}/{len(entries)}] stage {e['stage']} {who} {what}")
            choices = e.get("batch_choices")
            if choices and e["key"] == BEST_KEY and len(choices) > 1:
                print(f"        batch: the largest of {', '.join(map(str, choices))} whose {PROBE_STEPS}-step probe "
                      f"does not run out of memory (each smaller one after an out-of-memory exit); shown at "
                      f"{choices[0]}\n        probe: " + show(torch_command(
                          args, checkpoint, e["options"], os.path.join(logs, f"torch_best_probe_b{choices[0]}.json"),
                          choices[0], steps=PROBE_STEPS, profile=False)))
            elif choices and e["key"] == BEST_KEY:
                print(f"        batch: {choices[0]} (--best-batch: no search)")
            elif choices:
                print(f"        at PyTorch best's batch, beside it (shown at {choices[0]})")
            print(f"        {show(e['command'])}")
        if not entries:
            print("  (no entries)")
        limits = f"each entry stopped after {args.timeout} s"
        if args.budget:
            limits += (f", all of it after {args.budget} s (entries that no longer fit are reported "
                       f"'not run (budget)')")
        print(f"  limits: {limits}; stopping is SIGINT, then SIGKILL after {args.grace} s")
        if args.make_curve:
            print(f"  then copy {entries[0]['output']} to {os.path.abspath(args.make_curve)}")
        else:
            best = ", loss_best.svg, throughput_best.svg" if any(e.get("group") == "best" for e in entries) else ""
            print(f"  outputs: {out_dir}/results.{{json,csv,md,txt}}, loss.svg, throughput.svg{best}, logs/")
        if args.profile_step:
            print(f"  profile: {args.profile_step}, {profile_trace_path(args.profile_step)}")
        return 0

    why_not = preflight(args, entries, gpu, init_cmd, checkpoint)
    if why_not:
        print(f"ladder.py: error: {why_not}", file=sys.stderr)
        return 2

    # From here on, SIGTERM too stops the running entry's process group before the ladder ends.
    signal.signal(signal.SIGTERM, raise_interrupt)
    os.makedirs(logs, exist_ok=True)
    results = {"meta": meta, "ceilings": None, "entries": []}
    stop = None  # why the remaining entries are not run: "budget" or "interrupted"
    try:
        if init_cmd:
            print(f"checkpoint: {show(init_cmd)}", flush=True)
            limit, by_budget = budget.limit(600, args.grace)
            status, why = run_tool(init_cmd, os.path.join(logs, "gpt_init.log"), limit, args.grace)
            if status == "stopped" and by_budget:
                stop = "budget"
            elif status != "ok":
                print(f"ladder.py: error: cannot make the initial checkpoint: {why}", file=sys.stderr)
                return 2
        header = read_checkpoint_header(checkpoint)
        if header:
            meta["config"] = {k: v for k, v in header.items() if k != "params"}
            meta["params"] = header["params"]
            meta["model_title"] = model_title(header["params"])

        if not stop:
            results["ceilings"], spent = run_ceilings(args, out_dir, logs, budget, dry=False)
            stop = "budget" if spent else None
        if not meta["gpu"] and results["ceilings"]:  # no nvidia-smi: the name bench_ceilings saw
            meta["gpu"] = results["ceilings"].get("device_name")
    except KeyboardInterrupt:
        stop = "interrupted"

    for i, e in enumerate(entries, 1):
        results["entries"].append(e)
        results["entries"].sort(key=pair_order)
        limit, by_budget = budget.limit(args.timeout, args.grace)
        if not stop and limit < 1:
            stop = "budget"
        if stop:
            not_run(e, stop)
            print(f"[{i:2d}/{len(entries)}] stage {e['stage']} {e['key']}: not run ({stop})", flush=True)
            continue
        if e.get("group") == "best" and e["batch"] is None:
            if e["key"] == BEST_KEY and not e.get("batch_search"):
                found = best_batch(e, args, budget, logs, i, len(entries), meta, entries)
                if found:  # it did not run: why
                    status, why = found
                    if status in ("budget", "interrupted"):
                        stop = status
                    if status == "not run" or status in ("budget", "interrupted"):
                        not_run(e, why)
                    else:
                        e.update(status=status, error=why, returncode=None, wall_s=0.0)
                    print(f"        {e['status'].upper()}: {why}", flush=True)
                    save_results(results, out_dir)
                    continue
                limit, by_budget = budget.limit(args.timeout, args.grace)  # the probes took some
                if limit < 1:
                    stop = "budget"
                    not_run(e, stop)
                    print(f"        not run ({stop})", flush=True)
                    continue
            else:  # beside a PyTorch best that found no batch (C++ 04-06, max-autotune)
                not_run(e, "PyTorch best found no batch")
                print(f"[{i:2d}/{len(entries)}] stage {e['stage']} {e['key']}: not run ({e['error']})", flush=True)
                save_results(results, out_dir)
                continue
        try:
            run_entry(e, args, i, len(entries), limit, by_budget)
        except KeyboardInterrupt:  # between two commands: the entry has its results, or none
            e.setdefault("status", "interrupted")
            e.setdefault("error", "interrupted")
            stop = "interrupted"
        if e["status"] in ("budget", "interrupted"):
            stop = e["status"]
        finish_meta(results)  # the MFU denominator comes with the first C++ entry
        if e["status"] == "ok":
            mfu = f", MFU {fmt_pct(e['mfu'])}" if e.get("mfu") is not None else ""
            print(f"        ok: {e['median_ms']:.1f} ms/step, {e['tokens_per_s']:,.0f} tokens/s{mfu}, peak "
                  f"{fmt_gib(e.get('peak_memory_bytes')) or 'n/a'}, final loss {e['final_loss']:.4f}"
                  f"{clock_text(e.get('clock'))} ({e['wall_s']:.0f} s)", flush=True)
        else:
            print(f"        {e['status'].upper()}: {e.get('error')} ({e.get('wall_s', 0):.0f} s; log {e['log']})",
                  flush=True)
        save_results(results, out_dir)  # a ladder cut short keeps what it measured

    if stop:
        skipped = [e["key"] for e in entries if e["status"] == "not run"]
        what = (f"the --budget of {args.budget} s was spent" if stop == "budget" else "interrupted")
        meta["stopped"] = what + (f"; not run: {', '.join(skipped)}" if skipped else "")
        print(f"ladder: {meta['stopped']}", flush=True)

    if args.make_curve:
        save_results(results, out_dir)
        e = entries[0]
        if e["status"] != "ok":
            print(f"ladder.py: error: the reference run did not finish; {args.make_curve} is unchanged",
                  file=sys.stderr)
            return 130 if stop == "interrupted" else 1
        dest = os.path.abspath(args.make_curve)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(e["output"], dest + ".tmp")
        os.replace(dest + ".tmp", dest)
        print(f"wrote {dest} (command: {shlex.join(e['command'])})")
        return 0

    written = render_all(results, out_dir, plots=not args.no_plot)
    print()
    print(render_txt(results), end="")
    print()
    for path in written:
        print(f"wrote {path}")
    failed = [e for e in entries if e["status"] not in ("ok", "not run")]
    if failed:
        print(f"ladder: {len(failed)} of {len(entries)} entries did not finish: "
              + ", ".join(f"{e['key']} ({e['status']})" for e in failed))
    if stop == "interrupted":
        return 130
    return 1 if stop or failed or not entries else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("\nladder: interrupted (results.json keeps the entries that finished)", file=sys.stderr)
        sys.exit(130)
