#!/usr/bin/env python3
"""Self-test of the benchmark ladder's plumbing (tests/bench/ladder.py, largest_batch.py), on the CPU.

    python3 tests/reference/test_ladder.py          (CTest: ladder_selftest, label cpu)

The ladder measures GPUs, but what it takes from the trainers and how it runs and stops
them can be checked anywhere, with no GPU and no torch:

  - the C++ trainer's "start" event carries the model's sizes, its parameter count, the FLOPs
    per token and the peak (null on the CPU), and they agree with the checkpoint's header;
  - the ladder takes its numbers from there: the PyTorch entries' MFU uses the C++ entries'
    denominator;
  - a --timeout, a spent --budget and Ctrl-C stop an entry's whole process group (SIGINT,
    then SIGKILL), the entries left are reported "not run", and the results are written;
  - --dry-run needs nothing but the build tree's file names;
  - without a GPU, without gpt_init, with a Python that cannot import torch, or with nothing to
    run, it refuses in one line before it makes or writes anything (the initial checkpoint of
    d12 is 475 MB); its first line names the Python that runs the PyTorch entries (--python, else
    GPT_PYTHON of the build tree's CMakeCache.txt);
  - --profile-step passes the profile's options to its one PyTorch entry, and an entry that
    wrote no profile has failed.
  - largest_batch.py takes the batch the trainer's refusal names, steps down after an
    out-of-memory failure, and runs the ladder at the batch that fits.
  - every PyTorch entry that calls SDPA pins its backend, and the one the run used is recorded;
    the vocabulary pairs (sdpa_pad, compile_noshapepad) run with their options and their ratios
    are reported; PyTorch best (--torch best) probes 64, 32, 16 until one fits, runs there with
    C++ 04-06 beside it at that batch, and says "not run" and why when none fits; best_autotune
    (max-autotune) runs at that batch too, and only beside best.
  - every entry records the SM clock it ran at (tests/bench/gpu_clock.py: nvidia-smi sampled
    while it runs), in results.json, the tables and the CSV; "-" where nvidia-smi reads nothing,
    the entries running as ever; the sampler never outlives its entry, nor its ladder.

The real CPU trainer and gpt_init come from the environment (GPT_CPU_TRAINER, GPT_INIT_TOOL;
CTest sets both); without them those tests are skipped. Everything else uses small stand-in
scripts written into a temporary directory, nvidia-smi among them.
"""

import csv
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(HERE), "bench")
LADDER = os.path.join(BENCH, "ladder.py")
LARGEST = os.path.join(BENCH, "largest_batch.py")
TRAINER = os.environ.get("GPT_CPU_TRAINER")
GPT_INIT = os.environ.get("GPT_INIT_TOOL")

sys.path.insert(0, BENCH)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import gpu_clock  # noqa: E402

# A stand-in for a C++ trainer: writes a start event and steps like common/train/loop.h.
# MODE slow: also starts a child, then waits to be stopped; stubborn: both ignore SIGINT.
FAKE_TRAINER = '''\
import json, os, signal, subprocess, sys, time
MODE = {mode!r}
log = sys.argv[sys.argv.index("--log") + 1]
B, T = (int(sys.argv[sys.argv.index(k) + 1]) for k in ("--batch", "--seq"))
with open(log, "w") as f:
    f.write(json.dumps({{"type": "start", "stage": "fake", "device": "Fake GPU", "params": 1000,
                        "config": {{"max_seq_len": 64}}, "flops_per_token": 6000.0,
                        "peak_flops": 1e9, "peak_match": "Fake"}}) + "\\n")
    f.flush()
    if MODE != "quick":
        if MODE == "stubborn":
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # the child inherits this too
        child = subprocess.Popen(["sleep", "300"])
        with open(os.path.join(os.path.dirname(log), "child.pid"), "w") as p:
            p.write(str(child.pid))
        time.sleep(300)
    for step in range(3):
        f.write(json.dumps({{"type": "step", "step": step, "loss": 10.0 - step, "ms": 10.0}}) + "\\n")
    f.write(json.dumps({{"type": "summary", "peak_memory_bytes": 1234}}) + "\\n")
'''

# A stand-in for the Python that runs gpt2_reference.py: writes its --out JSON, with the SDPA
# backend it pinned (gpt2_reference.py's fields). From the environment: FAKE_CALLS, a file that
# gets each command line; FAKE_TORCH_MAX_BATCH, the largest batch that fits (above it: the
# reference's out-of-memory line, exit 2); FAKE_NO_CUDNN, cudnn falls back to flash;
# FAKE_TORCH_FAIL, every run fails otherwise.
FAKE_PYTHON = '''\
import json, os, sys
if sys.argv[1:2] == ["-c"]:  # the ladder's check of its PyTorch, before anything runs (FAKE_NO_TORCH: no torch)
    if os.environ.get("FAKE_NO_TORCH"):
        print("cannot import torch (ModuleNotFoundError: No module named 'torch')")
        sys.exit(3)
    print("torch fake, CUDA fake, Fake GPU")
    sys.exit(0)
def arg(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else None
if os.environ.get("FAKE_CALLS"):
    with open(os.environ["FAKE_CALLS"], "a") as f:
        f.write(json.dumps(sys.argv[1:]) + "\\n")
B = int(arg("--batch"))
if B > int(os.environ.get("FAKE_TORCH_MAX_BATCH", "1000000")):
    print(f"gpt2_reference: error: out of memory at B={B} T={arg('--seq')}; try a smaller --batch or --seq",
          file=sys.stderr)
    sys.exit(2)
if os.environ.get("FAKE_TORCH_FAIL"):
    print("gpt2_reference: error: --compile: Inductor could not find a C compiler", file=sys.stderr)
    sys.exit(2)
asked = arg("--sdpa-backend")
used, note = asked, None
if asked == "cudnn" and os.environ.get("FAKE_NO_CUDNN"):
    used, note = "flash", "cudnn asked, flash used: no cuDNN attention here"
with open(arg("--out"), "w") as f:
    json.dump({"losses": [10.0, 9.0, 8.0], "step_ms": [20.0, 20.0, 20.0], "peak_memory_bytes": 99,
               "device_name": "Fake GPU", "torch_version": "fake", "sdpa_backend": used,
               "sdpa_backend_asked": asked, "sdpa_backend_note": note}, f)
'''


# The same, writing --profile-step's file too (what tests/bench/step_breakdown_vs_torch.py reads).
FAKE_PROFILING_PYTHON = FAKE_PYTHON + '''\
profile = sys.argv[sys.argv.index("--profile-step") + 1]
with open(profile, "w") as f:
    json.dump({"kernels": [], "trace": sys.argv[sys.argv.index("--profile-trace") + 1]}, f)
'''


# nvidia-smi as the ladder asks it for the GPU's name and driver: one fake GPU (FAKE_SMI), or the
# failure of a machine whose driver sees none (NO_GPU_SMI).
FAKE_SMI = 'print("Fake GPU, 999.99")\n'
NO_GPU_SMI = ('import sys\nprint("NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver.")\n'
              'sys.exit(9)\n')

# nvidia-smi as the ladder and its clock sampler (tests/bench/gpu_clock.py) ask it: the GPU's name;
# one reading of clocks.sm, the reasons, power, temperature and utilization, which moves on to the
# next block of clocks.txt beside it (the sampler reads once before each entry: a block per entry);
# and with -lms the same block, then a wait until it is stopped. Every command line goes to
# smi_calls.jsonl, the pid of every loop to smi_loops.txt and, stopped by SIGINT (the sampler's
# stop, not the SIGKILL of a parent's death), to smi_stopped.txt. FAKE_SMI_OLD: an older driver,
# which knows the reasons only as clocks_throttle_reasons; FAKE_SMI_NO_CLOCKS: every reading fails.
CLOCK_SMI = '''\
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
args = sys.argv[1:]
with open(os.path.join(here, "smi_calls.jsonl"), "a") as f:
    f.write(json.dumps(args) + "\\n")
query = next((a for a in args if a.startswith("--query-gpu=")), "")
if "name" in query:
    print("Fake GPU, 999.99")
    sys.exit(0)
if os.environ.get("FAKE_SMI_NO_CLOCKS") or (os.environ.get("FAKE_SMI_OLD") and "clocks_event_reasons" in query):
    print(f"Field {query[12:]} is not a valid field to query.")
    sys.exit(2)
blocks = open(os.path.join(here, "clocks.txt")).read().strip().split("\\n\\n")
count = os.path.join(here, "count.txt")
n = int(open(count).read()) if os.path.exists(count) else 0
if "-lms" not in args:
    n += 1
    open(count, "w").write(str(n))
fields = len(query.split(","))  # the block's lines have all five; a reading of fewer gets the first ones
block = "\\n".join(", ".join(line.split(", ")[:fields]) for line in blocks[min(n, len(blocks)) - 1].splitlines())
if "-lms" not in args:
    print(block)
    sys.exit(0)
try:
    with open(os.path.join(here, "smi_loops.txt"), "a") as f:
        f.write(f"{os.getpid()}\\n")
    print(block, flush=True)
    time.sleep(300)
except KeyboardInterrupt:
    with open(os.path.join(here, "smi_stopped.txt"), "a") as f:
        f.write(f"{os.getpid()}\\n")
'''

# Its readings, a block per entry. The first: idle before the entry, then three busy samples at
# different clocks, one of them under the power cap, and one nvidia-smi could not read. The second:
# busy throughout, slower, under the power cap and sw thermal slowdown.
CLOCKS = """\
345, 0x0000000000000001, 60.5, 31, 0
1980, 0x0000000000000000, 650.0, 55, 98
[N/A], [N/A], [N/A], [N/A], [N/A]
1755, 0x0000000000000004, 700.0, 61, 99
1950, 0x0000000000000000, 690.0, 60, 97

1410, 0x0000000000000020, 500.0, 85, 100
1395, 0x0000000000000024, 520.5, 87, 100
1400, 0x0000000000000004, 510.0, 86, 100
"""

# A gpt_init that writes its --out, as the real one does (475 MB for d12).
FAKE_INIT = '''\
import sys
with open(sys.argv[sys.argv.index("--out") + 1], "wb") as f:
    f.write(bytes(1000))
'''


def write_script(path, body):
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + body)
    os.chmod(path, 0o755)


def write_checkpoint_header(path, maxT, V, L, H, C, params):
    """Only the header of docs/formats.md: all the ladder reads of a checkpoint."""
    with open(path, "wb") as f:
        f.write(struct.pack("<10i", 20261122, 2, maxT, V, L, H, C, 0, 0, params) + bytes(4 * 246))


def write_shard(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(4 * 253))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


def gone(pid, wait=5.0):
    """Whether a process has ended (within `wait` seconds: a signal takes a moment). A zombie
    that nobody has reaped yet counts as ended."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


class Sandbox(unittest.TestCase):
    """A build tree, data and a checkpoint header in a temporary directory, for stand-ins."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.build = os.path.join(self.dir, "build")
        self.data = os.path.join(self.dir, "data")
        self.out = os.path.join(self.dir, "out")
        for d in ("stages", "common"):
            os.makedirs(os.path.join(self.build, d))
        os.makedirs(self.data)
        write_shard(os.path.join(self.data, "x_train_000.bin"), [(i * 7919) % 50257 for i in range(2000)])
        self.ckpt = os.path.join(self.dir, "init.ckpt")
        write_checkpoint_header(self.ckpt, 1024, 50257, 12, 12, 768, 124439808)
        self.fake_python = os.path.join(self.dir, "fake_python")
        write_script(self.fake_python, FAKE_PYTHON)
        # The ladder asks nvidia-smi whether there is a GPU: here, a fake one says yes.
        self.bin = os.path.join(self.dir, "bin")
        os.makedirs(self.bin)
        write_script(os.path.join(self.bin, "nvidia-smi"), FAKE_SMI)
        self._path = os.environ["PATH"]
        os.environ["PATH"] = self.bin + os.pathsep + self._path

    def tearDown(self):
        os.environ["PATH"] = self._path
        self._tmp.cleanup()

    def trainer(self, stage, mode):
        write_script(os.path.join(self.build, "stages", f"train_{stage}_{mode}"), FAKE_TRAINER.format(mode=mode))

    def ladder_args(self, *extra, checkpoint=True):
        """The ladder on the stand-ins; checkpoint=False: it makes one with the build's gpt_init."""
        return [sys.executable, LADDER, "--build", self.build, "--data", self.data, "--out", self.out,
                *(["--checkpoint", self.ckpt] if checkpoint else []), "--batch", "2", "--seq", "32",
                "--steps", "3", "--skip", "1", "--python", self.fake_python, "--no-plot", *map(str, extra)]

    def ladder(self, *extra, expect, env=None):
        t0 = time.monotonic()
        proc = subprocess.run(self.ladder_args(*extra), capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, **(env or {})))
        self.assertEqual(proc.returncode, expect, proc.stdout + proc.stderr)
        return proc, time.monotonic() - t0

    def results(self):
        with open(os.path.join(self.out, "results.json")) as f:
            return json.load(f)

    def entries(self):
        return {e["key"]: e for e in self.results()["entries"]}

    def text(self, name):
        with open(os.path.join(self.out, name)) as f:
            return f.read()

    def child_pid(self):
        with open(os.path.join(self.out, "logs", "child.pid")) as f:
            return int(f.read())

    def clock_smi(self):
        """The stand-in nvidia-smi that answers the clock sampler too, with the blocks of CLOCKS."""
        write_script(os.path.join(self.bin, "nvidia-smi"), CLOCK_SMI)
        with open(os.path.join(self.bin, "clocks.txt"), "w") as f:
            f.write(CLOCKS)

    def smi_pids(self, name):
        """The pids in smi_loops.txt or smi_stopped.txt."""
        try:
            with open(os.path.join(self.bin, name)) as f:
                return sorted(int(line) for line in f)
        except OSError:
            return []

    def smi_calls(self):
        with open(os.path.join(self.bin, "smi_calls.jsonl")) as f:
            return [json.loads(line) for line in f]

    def samplers_left(self):
        """The stand-in nvidia-smi's processes still running."""
        smi = os.path.join(self.bin, "nvidia-smi").encode()
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if smi in f.read():
                        found.append(int(pid))
            except OSError:
                pass
        return [pid for pid in found if not gone(pid)]

    def assert_samplers_stopped(self):
        """Every sampler that started was stopped by the ladder, and none is left."""
        stopped = self.smi_pids("smi_stopped.txt")
        self.assertEqual([pid for pid in self.smi_pids("smi_loops.txt") if pid not in stopped], [])
        self.assertEqual(self.samplers_left(), [])


class LadderTest(Sandbox):
    # -- the start event ------------------------------------------------------------------

    @unittest.skipUnless(TRAINER and GPT_INIT, "GPT_CPU_TRAINER and GPT_INIT_TOOL are not set")
    def test_cpu_trainer_start_event(self):
        ckpt, log = os.path.join(self.dir, "micro.ckpt"), os.path.join(self.dir, "run.jsonl")
        subprocess.run([GPT_INIT, "--model", "micro", "--out", ckpt], check=True, capture_output=True)
        T = 32
        subprocess.run([TRAINER, "--init", ckpt, "--data", self.data, "--batch", "2", "--seq", str(T),
                        "--steps", "1", "--val-every", "0", "--sample-every", "0", "--threads", "1",
                        "--log", log], check=True, capture_output=True)
        with open(log) as f:
            start = json.loads(f.readline())
        with open(ckpt, "rb") as f:
            magic, _, maxT, V, L, H, C, _, _, params = struct.unpack("<10i", f.read(40))
        self.assertEqual(start["type"], "start")
        for key in ("stage", "device", "model", "batch", "seq", "micro_batches", "world"):
            self.assertIn(key, start)  # the fields it always had
        self.assertEqual(start["config"], {"max_seq_len": maxT, "vocab_size": V, "n_layer": L, "n_head": H,
                                           "n_embd": C})
        self.assertEqual(start["params"], params)
        # docs: 6N + 12·L·H·Q·T, computed here only to check the trainer's number
        self.assertEqual(start["flops_per_token"], 6 * params + 12 * L * H * (C // H) * T)
        self.assertIsNone(start["peak_flops"])  # the CPU has no entry in the GPU peak table
        self.assertIsNone(start["peak_match"])

    @unittest.skipUnless(TRAINER and GPT_INIT, "GPT_CPU_TRAINER and GPT_INIT_TOOL are not set")
    def test_ladder_with_the_cpu_trainer(self):
        os.symlink(TRAINER, os.path.join(self.build, "stages", "train_00_cpu_reference"))
        os.symlink(GPT_INIT, os.path.join(self.build, "common", "gpt_init"))
        proc = subprocess.run(self.ladder_args("--model", "micro", "--torch", "none", checkpoint=False),
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        meta, e = self.results()["meta"], self.entries()["cpp_00"]
        self.assertEqual(e["status"], "ok")
        self.assertEqual(meta["params"], 3320640)  # micro, from the checkpoint gpt_init wrote
        self.assertEqual(meta["model_title"], "3M")
        self.assertEqual(meta["flops_per_token"], e["start"]["flops_per_token"])
        self.assertIsNone(e["mfu"])  # no peak on the CPU: no MFU, and the table says why
        self.assertIn("MFU: not reported", proc.stdout)

    # -- the numbers the ladder takes from the start event -----------------------------------

    def test_pytorch_entries_use_the_cpp_denominator(self):
        self.trainer("00", "quick")
        self.ladder("--torch", "fp32", "--stages", "00", expect=0)
        meta, e = self.results()["meta"], self.entries()
        self.assertEqual((meta["flops_per_token"], meta["peak_flops"], meta["peak_match"], meta["mfu_from"]),
                         (6000.0, 1e9, "Fake", "cpp_00"))
        self.assertEqual((meta["params"], meta["model_title"]), (124439808, "124M"))  # the checkpoint's header
        for key, ms in (("cpp_00", 10.0), ("torch_fp32", 20.0)):
            tokens_per_s = 2 * 32 / (ms / 1000)
            self.assertAlmostEqual(e[key]["mfu"], tokens_per_s * 6000.0 / 1e9, places=12)
        with open(os.path.join(self.out, "results.txt")) as f:
            self.assertIn("'Fake' in common/util/peak_flops.h (from the start event of cpp_00)", f.read())
        # --results-only renders the same from results.json alone
        proc = subprocess.run([sys.executable, LADDER, "--results-only", os.path.join(self.out, "results.json"),
                               "--out", os.path.join(self.dir, "again"), "--no-plot"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_no_cpp_entry_no_mfu(self):
        self.ladder("--torch", "fp32", "--stages", "none", expect=0)
        self.assertIsNone(self.entries()["torch_fp32"]["mfu"])
        with open(os.path.join(self.out, "results.txt")) as f:
            self.assertIn("MFU: not reported (no C++ trainer", f.read())

    def test_profile_step(self):
        profile = os.path.join(self.dir, "profile", "torch_pad_profile.json")
        os.makedirs(os.path.dirname(profile))
        write_script(self.fake_python, FAKE_PROFILING_PYTHON)
        self.ladder("--torch", "pad", "--stages", "none", "--profile-step", profile, expect=0)
        e = self.entries()["torch_pad"]
        self.assertEqual(e["status"], "ok")
        self.assertEqual(e["command"][-4:], ["--profile-step", profile, "--profile-trace",
                                             profile[:-5] + ".trace.json.gz"])
        self.assertIn("--vocab-pad", e["command"])  # the ladder's own options of the entry, unchanged
        write_script(self.fake_python, FAKE_PYTHON)  # a run that writes no profile has failed
        self.ladder("--torch", "pad", "--stages", "none", "--profile-step", profile, expect=1)
        self.assertIn("wrote no profile", self.entries()["torch_pad"]["error"])
        self.assertFalse(os.path.exists(profile))  # the earlier run's profile does not pass for this one's
        for torch in ("all", "none", "compile,pad"):  # one entry, one profile
            proc, _ = self.ladder("--torch", torch, "--profile-step", profile, expect=2)
            self.assertIn("give exactly one --torch configuration", proc.stderr)

    # -- stopping ------------------------------------------------------------------------------

    def test_timeout_stops_the_group_and_goes_on(self):
        self.trainer("00", "slow")
        self.trainer("01", "quick")
        self.clock_smi()
        self.ladder("--torch", "none", "--timeout", 2, "--grace", 5, expect=1)
        e = self.entries()
        self.assertEqual(e["cpp_00"]["status"], "timeout")
        self.assertIn("timed out", e["cpp_00"]["error"])
        self.assertEqual(e["cpp_00"]["start"]["flops_per_token"], 6000.0)  # read from the cut-off log
        self.assertEqual(e["cpp_01"]["status"], "ok")
        self.assertTrue(gone(self.child_pid()), "the entry's child outlived it")
        # Its clock sampler ran for its two seconds, and was stopped with it.
        self.assertEqual((e["cpp_00"]["clock"]["sm_mhz_median"], e["cpp_01"]["clock"]["sm_mhz_median"]), (1950, 1400))
        self.assertTrue(self.smi_pids("smi_loops.txt"))
        self.assert_samplers_stopped()

    def test_an_entry_stops_on_sigint_when_the_ladder_inherited_it_ignored(self):
        # As tests/gpu_check.sh starts it: a background command of a shell without job control,
        # SIGINT ignored. The entry must still get SIGINT as a signal, not only SIGKILL after the grace.
        self.trainer("00", "slow")
        t0 = time.monotonic()
        proc = subprocess.run(self.ladder_args("--torch", "none", "--timeout", 2, "--grace", 60), capture_output=True,
                              text=True, timeout=120, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        wall = time.monotonic() - t0
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertEqual(self.entries()["cpp_00"]["status"], "timeout")
        self.assertLess(wall, 30, "the entry was not stopped by SIGINT: it waited for the SIGKILL after the grace")
        self.assertTrue(gone(self.child_pid()), "the entry's child outlived it")

    def test_budget_stops_everything_and_writes_results(self):
        self.trainer("00", "stubborn")  # ignores SIGINT: only SIGKILL ends it
        self.trainer("01", "quick")
        budget, grace = 5, 1
        _, wall = self.ladder("--torch", "fp32", "--timeout", 100, "--budget", budget, "--grace", grace, expect=1)
        self.assertLess(wall, budget + 5)  # the budget holds, with room for a busy machine
        e = self.entries()
        self.assertEqual(e["cpp_00"]["status"], "budget")
        for key in ("torch_fp32", "cpp_01"):
            self.assertEqual((e[key]["status"], e[key]["error"]), ("not run", "budget"))
        self.assertTrue(gone(self.child_pid()), "the entry's child outlived it")
        with open(os.path.join(self.out, "results.txt")) as f:
            text = f.read()
        self.assertIn("not run (budget)", text)
        self.assertIn("Stopped early: the --budget of 5 s was spent", text)
        self.assertTrue(os.path.exists(os.path.join(self.out, "results.md")))

    def test_ctrl_c_stops_the_group_and_writes_results(self):
        self.trainer("00", "slow")
        self.trainer("01", "quick")
        self.clock_smi()
        proc = subprocess.Popen(self.ladder_args("--torch", "none", "--grace", 5), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        pid_file = os.path.join(self.out, "logs", "child.pid")
        deadline = time.monotonic() + 60
        while not (os.path.exists(pid_file) and os.path.getsize(pid_file)) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGINT)  # what a Ctrl-C at the terminal sends the ladder
        output, _ = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, output)
        e = self.entries()
        self.assertEqual(e["cpp_00"]["status"], "interrupted")
        self.assertEqual((e["cpp_01"]["status"], e["cpp_01"]["error"]), ("not run", "interrupted"))
        self.assertTrue(gone(self.child_pid()), "the entry's child outlived the Ctrl-C")
        self.assertEqual(e["cpp_00"]["clock"]["throttle_reasons"], "power cap")
        self.assert_samplers_stopped()
        self.assertTrue(os.path.exists(os.path.join(self.out, "results.txt")))

    def test_newest_first_runs_cpp_from_the_newest_and_shows_pairs(self):
        self.trainer("00", "quick")
        self.trainer("01", "quick")
        proc, _ = self.ladder("--order", "newest-first", "--torch", "none", expect=0)
        ran = [line.split("] stage ")[1].split()[0] for line in proc.stdout.splitlines()
               if line.startswith("[") and "] stage " in line]
        self.assertEqual(ran, ["01", "00"], proc.stdout)
        with open(os.path.join(self.out, "results.json")) as f:
            self.assertEqual([e["key"] for e in json.load(f)["entries"]], ["cpp_00", "cpp_01"])

    # -- what it needs, checked before anything is made or written ---------------------------

    def refused(self, *extra, env=None, checkpoint=False):
        """The ladder run with a gpt_init that would write the checkpoint: it must exit 2 with one
        line and leave the sandbox as it was. Returns that line."""
        write_script(os.path.join(self.build, "common", "gpt_init"), FAKE_INIT)
        before = sorted(os.path.relpath(os.path.join(d, f), self.dir) for d, _, fs in os.walk(self.dir) for f in fs)
        proc = subprocess.run(self.ladder_args(*extra, checkpoint=checkpoint), capture_output=True, text=True,
                              timeout=120, env=dict(os.environ, **(env or {})))
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        after = sorted(os.path.relpath(os.path.join(d, f), self.dir) for d, _, fs in os.walk(self.dir) for f in fs)
        self.assertEqual(after, before, "the ladder wrote something before it refused")
        self.assertFalse(os.path.exists(self.out))
        self.assertEqual(len(proc.stderr.splitlines()), 1, proc.stderr)
        self.assertTrue(proc.stderr.startswith("ladder.py: error: "), proc.stderr)
        return proc.stderr

    def test_no_gpu_refuses_before_writing_anything(self):
        write_script(os.path.join(self.bin, "nvidia-smi"), NO_GPU_SMI)
        self.trainer("00", "quick")
        why = self.refused("--torch", "fp32")
        self.assertIn("no GPU found (nvidia-smi names none)", why)
        self.assertIn("--dry-run prints its plan anywhere", why)

    def test_no_gpt_init_refuses_before_writing_anything(self):
        self.trainer("00", "quick")
        proc = subprocess.run(self.ladder_args("--torch", "none", checkpoint=False), capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn("gpt_init is not built, and it makes the initial checkpoint", proc.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_python_without_torch_refuses_before_writing_anything(self):
        self.trainer("00", "quick")
        why = self.refused("--torch", "fp32", env={"FAKE_NO_TORCH": "1"})
        self.assertIn(f"the Python for the PyTorch entries, {self.fake_python} (--python): cannot import torch", why)
        self.assertIn("--torch none for the C++ stages alone", why)

    def test_nothing_to_run_refuses_before_writing_anything(self):
        why = self.refused("--torch", "none")
        self.assertIn("nothing to run: --stages all and --torch none select no entry (no stage trainers in", why)

    def test_the_first_line_names_the_python_of_the_pytorch_entries(self):
        proc, _ = self.ladder("--dry-run", "--torch", "fp32", expect=0)
        self.assertEqual(proc.stdout.splitlines()[0],
                         f"ladder: the PyTorch entries run with {self.fake_python} (--python)")
        # Without --python: the Python with torch that CMake found for this build tree.
        with open(os.path.join(self.build, "CMakeCache.txt"), "w") as f:
            f.write(f"//Python with torch for the reference model\nGPT_PYTHON:FILEPATH={self.fake_python}\n")
        args = self.ladder_args("--dry-run", "--torch", "fp32")
        i = args.index("--python")
        proc = subprocess.run(args[:i] + args[i + 2:], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        first = proc.stdout.splitlines()[0]
        self.assertTrue(first.startswith(f"ladder: the PyTorch entries run with {self.fake_python} (GPT_PYTHON of "),
                        first)
        self.assertIn(self.fake_python + " ", proc.stdout.split("plan (dry run")[1])  # and runs the entry

    # -- planning only -----------------------------------------------------------------------

    def test_dry_run(self):
        self.trainer("00", "quick")
        os.remove(os.path.join(self.data, "x_train_000.bin"))  # a dry run needs no data either
        proc, _ = self.ladder("--dry-run", "--budget", 450, "--timeout", 240, expect=0)
        self.assertIn("train_00_quick", proc.stdout)
        self.assertIn("gpt2_reference.py", proc.stdout)
        self.assertIn("not run (budget)", proc.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.out, "results.json")))

    def test_dry_run_newest_first(self):
        self.trainer("00", "quick")
        self.trainer("01", "quick")
        proc, _ = self.ladder("--dry-run", "--order", "newest-first", "--torch", "fp32,tf32", expect=0)
        plan = [" ".join(line.split("] stage ")[1].split()) for line in proc.stdout.splitlines()
                if line.lstrip().startswith("[")]
        self.assertEqual(plan, ["01 C++ train_01_quick", "00 C++ train_00_quick", "01 PyTorch TF32",
                                "00 PyTorch fp32 eager"], proc.stdout)


def option(command, flag):
    """The value after `flag` in a command line (None if absent)."""
    return command[command.index(flag) + 1] if flag in command else None


class PytorchBestTest(Sandbox):
    """The pinned SDPA backends, the vocabulary pairs, and PyTorch best: its batch search (a probe
    per batch, out of memory -> the next smaller), the C++ stages 04-06 beside it at that batch."""

    def calls(self):
        """The command lines the stand-in PyTorch was started with, in order."""
        with open(os.path.join(self.dir, "calls.jsonl")) as f:
            return [json.loads(line) for line in f]

    def env(self, **extra):
        return dict({"FAKE_CALLS": os.path.join(self.dir, "calls.jsonl")}, **extra)

    def test_every_sdpa_entry_pins_its_backend(self):
        proc, _ = self.ladder("--torch", "all", "--stages", "none", expect=0, env=self.env())
        e = self.entries()
        for key in ("fp32", "tf32", "bf16"):  # no SDPA: nothing to pin
            self.assertNotIn("--sdpa-backend", e[f"torch_{key}"]["command"])
            self.assertIsNone(e[f"torch_{key}"]["sdpa_backend"])
        for key in ("sdpa", "compile", "pad", "sdpa_pad", "compile_noshapepad"):  # one change per step: flash
            self.assertEqual(option(e[f"torch_{key}"]["command"], "--sdpa-backend"), "flash", key)
            self.assertEqual(e[f"torch_{key}"]["sdpa_backend"], "flash", key)  # as the run recorded it
        self.assertEqual(e["torch_sdpa"]["short"], "bf16 + SDPA (flash)")
        self.assertNotIn("torch_best", e)  # --torch all leaves PyTorch best out
        self.assertIn("| 03 | PyTorch | bf16 + SDPA (flash) | 2 |", self.text("results.md"))

    def test_vocabulary_pairs(self):
        proc, _ = self.ladder("--torch", "sdpa_pad,compile_noshapepad,sdpa,compile,pad", "--stages", "none",
                              expect=0, env=self.env())
        e = self.entries()
        pad, nosp = e["torch_sdpa_pad"]["command"], e["torch_compile_noshapepad"]["command"]
        self.assertEqual(option(pad, "--vocab-pad"), "64")  # eager SDPA, the vocabulary padded
        self.assertNotIn("--compile", pad)
        self.assertNotIn("--vocab-pad", e["torch_sdpa"]["command"])  # its pair, unpadded
        self.assertEqual(option(nosp, "--inductor-shape-padding"), "off")
        self.assertIn("--compile", nosp)
        self.assertNotIn("--vocab-pad", nosp)
        # run after the per-stage entries, whatever order they were asked in
        ran = [line.split("] stage ")[1] for line in proc.stdout.splitlines() if line.startswith("[")]
        self.assertEqual([r.split(" PyTorch ")[1] for r in ran],
                         ["bf16 + SDPA (flash)", "bf16 + SDPA + torch.compile (flash)",
                          "compile + vocab padded to 64 (flash)", "bf16 + SDPA + vocab padded to 64 (flash)",
                          "compile, Inductor's shape padding off (flash)"], proc.stdout)
        pairs = {tuple(c["entries"]): c["ratio"] for c in self.results()["comparisons"]}
        self.assertEqual(pairs, {("torch_sdpa_pad", "torch_sdpa"): 1.0,
                                 ("torch_compile", "torch_compile_noshapepad"): 1.0,
                                 ("torch_pad", "torch_compile_noshapepad"): 1.0})
        self.assertIn("torch_sdpa_pad ÷ torch_sdpa = 1.00×: what an unaligned vocabulary", self.text("results.txt"))

    def test_best_steps_down_after_out_of_memory(self):
        for stage in ("03", "04", "05", "06"):
            self.trainer(stage, "quick")
        for fits, tried in ((32, ["out of memory", "fits"]), (16, ["out of memory", "out of memory", "fits"])):
            with self.subTest(fits=fits):
                if os.path.exists(os.path.join(self.dir, "calls.jsonl")):
                    os.remove(os.path.join(self.dir, "calls.jsonl"))
                proc, _ = self.ladder("--torch", "sdpa,best", expect=0, env=self.env(FAKE_TORCH_MAX_BATCH=str(fits)))
                e, meta = self.entries(), self.results()["meta"]
                best = e["torch_best"]
                self.assertEqual((best["status"], best["batch"]), ("ok", fits))
                self.assertEqual([t["result"] for t in best["batch_search"]], tried)
                self.assertEqual([t["batch"] for t in best["batch_search"]], [64, 32, 16][:len(tried)])
                self.assertIn("out of memory at B=64", best["batch_search"][0]["error"])
                self.assertEqual((meta["best"]["batch"], meta["best"]["choices"]), (fits, [64, 32, 16]))
                cmd = best["command"]
                self.assertEqual((option(cmd, "--batch"), option(cmd, "--steps"), option(cmd, "--sdpa-backend"),
                                  option(cmd, "--vocab-pad")), (str(fits), "3", "cudnn", "64"))
                self.assertIn("--fused-adamw", cmd)
                self.assertIn("--compile", cmd)
                self.assertEqual(best["sdpa_backend"], "cudnn")
                # the probes: PROBE_STEPS steps at 64, 32, ... down to the batch that fits, then the run
                calls = [c for c in self.calls() if option(c, "--out").endswith(".json") and "probe" in c[-1]]
                self.assertEqual([(option(c, "--batch"), option(c, "--steps")) for c in calls],
                                 [(str(b), "2") for b in [64, 32, 16][:len(tried)]])
                # C++ 04-06 beside it at its batch (not 03), and the ladder's own entries at --batch 2
                for stage in ("04", "05", "06"):
                    x = e[f"cpp_{stage}_best"]
                    self.assertEqual((x["status"], x["batch"], option(x["command"], "--batch")),
                                     ("ok", fits, str(fits)), stage)
                    self.assertAlmostEqual(x["tokens_per_s"], fits * 32 / 0.010)  # its own batch's tokens
                    self.assertAlmostEqual(x["cpp_over_torch"], 2.0)  # over PyTorch best
                    self.assertEqual(option(e[f"cpp_{stage}"]["command"], "--batch"), "2")
                self.assertNotIn("cpp_03_best", e)
                self.assertIsNone(e["cpp_05_best"]["speedup_vs_00"])
                ran = [line.split("] stage ")[1] for line in proc.stdout.splitlines() if line.startswith("[")]
                self.assertTrue(ran[-4].startswith("best PyTorch compile + fused AdamW"), ran)  # it chooses the batch
                self.assertEqual([r.split()[2] for r in ran[-3:]],
                                 ["train_04_quick", "train_05_quick", "train_06_quick"])
                txt, md = self.text("results.txt"), self.text("results.md")
                self.assertIn(f"PyTorch best: batch {fits}, the largest of 64, 32, 16 that fits a 2-step probe "
                              "(64: out of memory (gpt2_reference: error: out of memory at B=64", txt)
                self.assertIn(f"| best | C++ | 05_quick | {fits} |", md)
                self.assertIn(f"| best | PyTorch | compile + fused AdamW + vocab padded to 64 (cudnn) | {fits} |", md)
                self.assertIn("| 03 | PyTorch | bf16 + SDPA (flash) | 2 |", md)
        # --results-only renders the same again, and the plots of PyTorch best's group beside the ladder's
        again = os.path.join(self.dir, "again")
        proc = subprocess.run([sys.executable, LADDER, "--results-only", os.path.join(self.out, "results.json"),
                               "--out", again], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with open(os.path.join(again, "results.txt")) as f:
            self.assertEqual(f.read(), self.text("results.txt"))
        for name in ("loss.svg", "throughput.svg", "loss_best.svg", "throughput_best.svg"):
            self.assertTrue(os.path.getsize(os.path.join(again, name)) > 0, name)
        with open(os.path.join(again, "throughput_best.svg")) as f:
            self.assertIn("B=16", f.read())  # drawn at PyTorch best's batch
        with open(os.path.join(again, "throughput.svg")) as f:
            self.assertIn("B=2", f.read())

    def test_best_when_no_batch_fits(self):
        self.trainer("05", "quick")
        proc, _ = self.ladder("--torch", "best", expect=0, env=self.env(FAKE_TORCH_MAX_BATCH="8"))
        e = self.entries()
        why = "no batch fits: 64 out of memory, 32 out of memory, 16 out of memory"
        self.assertEqual((e["torch_best"]["status"], e["torch_best"]["error"]), ("not run", why))
        self.assertEqual((e["cpp_05_best"]["status"], e["cpp_05_best"]["error"]),
                         ("not run", "PyTorch best found no batch"))
        self.assertEqual(e["cpp_05"]["status"], "ok")  # the ladder's own entry runs as ever
        self.assertEqual(len(self.calls()), 3)  # three probes, no run
        self.assertIn(f"not run ({why})", self.text("results.txt"))
        self.assertIn("PyTorch best: no batch (64: out of memory", self.text("results.txt"))

    def test_best_probe_failing_otherwise_stops_the_search(self):
        self.trainer("04", "quick")
        self.ladder("--torch", "best", "--stages", "04", expect=1, env=self.env(FAKE_TORCH_FAIL="1"))
        e = self.entries()
        self.assertEqual(e["torch_best"]["status"], "failed")
        self.assertIn("its probe at batch 64 failed: gpt2_reference: error: --compile", e["torch_best"]["error"])
        self.assertEqual(len(self.calls()), 1)  # a smaller batch would not cure it
        self.assertEqual(e["cpp_04_best"]["status"], "not run")

    def test_best_batch_given_and_cudnn_falling_back(self):
        self.ladder("--torch", "best", "--best-batch", "16", "--stages", "none", expect=0,
                    env=self.env(FAKE_NO_CUDNN="1"))
        best = self.entries()["torch_best"]
        self.assertEqual([option(c, "--batch") for c in self.calls()], ["16"])  # no probe
        self.assertEqual((best["sdpa_backend"], best["sdpa_backend_asked"]), ("flash", "cudnn"))
        self.assertEqual(best["short"], "compile + fused AdamW + vocab padded to 64 (flash; cudnn asked)")
        txt = self.text("results.txt")
        self.assertIn("PyTorch best: batch 16 (--best-batch, no search); attention: flash (cudnn asked, flash used: "
                      "no cuDNN attention here)", txt)
        with open(os.path.join(self.out, "results.csv")) as f:
            self.assertIn("best,torch,best,torch_best,16,flash,cudnn,ok", f.read())
        self.ladder("--torch", "best", "--best-batch", "0", expect=2)

    def test_best_autotune_at_best_batch(self):
        self.trainer("04", "quick")
        proc, _ = self.ladder("--dry-run", "--torch", "best,best_autotune", "--stages", "04", expect=0)
        plan = [line.split("] stage ")[1] for line in proc.stdout.splitlines() if line.lstrip().startswith("[")]
        self.assertEqual(plan, ["04 C++     train_04_quick",
                                "best PyTorch compile + fused AdamW + vocab padded to 64 (cudnn)",
                                "best C++     train_04_quick",
                                "best PyTorch best + max-autotune: CUDA Graphs and timed GEMMs (cudnn)"], proc.stdout)
        self.assertEqual(proc.stdout.count("batch: the largest of 64, 32, 16"), 1)  # one search, PyTorch best's
        self.assertEqual(proc.stdout.count("at PyTorch best's batch, beside it (shown at 64)"), 2)
        self.assertIn("--fused-adamw --vocab-pad 64 --compile-mode max-autotune", proc.stdout)
        proc, _ = self.ladder("--dry-run", "--torch", "all,best", expect=0)
        self.assertNotIn("max-autotune", proc.stdout)  # not in all
        proc, _ = self.ladder("--dry-run", "--torch", "best_autotune", expect=2)
        self.assertIn("best_autotune runs at the batch PyTorch best's search finds", proc.stderr)
        # Run: at the batch PyTorch best found, no probe of its own, and its ratio over PyTorch best.
        self.ladder("--torch", "best,best_autotune", "--stages", "none", expect=0,
                    env=self.env(FAKE_TORCH_MAX_BATCH="32"))
        auto = self.entries()["torch_best_autotune"]
        self.assertEqual((auto["status"], auto["batch"], option(auto["command"], "--batch"),
                          option(auto["command"], "--compile-mode")), ("ok", 32, "32", "max-autotune"))
        self.assertEqual([option(c, "--batch") for c in self.calls()], ["64", "32", "32", "32"])  # 2 probes, 2 runs
        self.assertEqual([(c["entries"], c["ratio"]) for c in self.results()["comparisons"]],
                         [(["torch_best_autotune", "torch_best"], 1.0)])
        txt = self.text("results.txt")
        self.assertIn("torch_best_autotune ÷ torch_best = 1.00×: what max-autotune", txt)
        self.assertIn("max-autotune at that batch too", txt)
        # No batch for PyTorch best: none for it either.
        self.ladder("--torch", "best,best_autotune", "--stages", "none", expect=0,
                    env=self.env(FAKE_TORCH_MAX_BATCH="8"))
        auto = self.entries()["torch_best_autotune"]
        self.assertEqual((auto["status"], auto["error"]), ("not run", "PyTorch best found no batch"))

    def test_dry_run_lists_the_new_entries(self):
        for stage in ("04", "05"):
            self.trainer(stage, "quick")
        proc, _ = self.ladder("--dry-run", "--torch", "all,best", expect=0)
        out = proc.stdout
        self.assertIn("stage 03 PyTorch bf16 + SDPA + vocab padded to 64 (flash)", out)
        self.assertIn("stage 04 PyTorch compile, Inductor's shape padding off (flash)", out)
        self.assertIn("stage best PyTorch compile + fused AdamW + vocab padded to 64 (cudnn)", out)
        self.assertIn("batch: the largest of 64, 32, 16 whose 2-step probe does not run out of memory", out)
        self.assertIn("--batch 64 --seq 32 --steps 2", out)  # the first probe
        self.assertIn("--sdpa-backend cudnn --compile --fused-adamw --vocab-pad 64", out)
        self.assertEqual(out.count("at PyTorch best's batch, beside it (shown at 64)"), 2)  # C++ 04 and 05
        self.assertIn("cpp_05_best.jsonl", out)
        self.assertFalse(os.path.exists(os.path.join(self.out, "results.json")))
        proc, _ = self.ladder("--dry-run", "--torch", "all", "--order", "newest-first", expect=0)
        self.assertNotIn("stage best", proc.stdout)
        proc, _ = self.ladder("--dry-run", "--torch", "best,nonsense", expect=2)
        self.assertIn("unknown PyTorch configuration nonsense", proc.stderr)


class ClockTest(Sandbox):
    """The SM clock beside every entry: nvidia-smi sampled while it runs (gpu_clock.ClockSampler),
    summed up in results.json and shown in the tables."""

    def test_every_entry_has_its_clock(self):
        self.trainer("00", "quick")
        self.clock_smi()
        self.ladder("--torch", "fp32", "--stages", "00", expect=0, env={"CUDA_VISIBLE_DEVICES": "3,1"})
        e = self.entries()
        cpp, torch = e["cpp_00"]["clock"], e["torch_fp32"]["clock"]
        # The first block: the idle sample and the one nvidia-smi could not read are left out of the
        # clock and the reasons; the power and temperature are the highest of every sample.
        self.assertEqual({k: cpp[k] for k in ("over", "sm_mhz_median", "sm_mhz_min", "sm_mhz_max", "throttle_mask",
                                              "throttle_reasons", "power_w_max", "temperature_c_max")},
                         {"over": "busy", "sm_mhz_median": 1950, "sm_mhz_min": 1755, "sm_mhz_max": 1980,
                          "throttle_mask": "0x0000000000000004", "throttle_reasons": "power cap",
                          "power_w_max": 700.0, "temperature_c_max": 61})
        # the reading before the entry, and the loop's if it printed before it was stopped
        self.assertIn((cpp["samples"], cpp["busy_samples"]), ((5, 3), (10, 6)))
        self.assertEqual(cpp["reasons_field"], "clocks_event_reasons.active")
        self.assertEqual(cpp["file"], os.path.join(self.out, "logs", "cpp_00.clock.csv"))
        self.assertEqual((torch["sm_mhz_median"], torch["sm_mhz_min"], torch["throttle_reasons"]),
                         (1400, 1395, "power cap+sw thermal"))
        # The tables: the two entries at their two clocks.
        md, txt = (self.text(name) for name in ("results.md", "results.txt"))
        rows = {line.split(" | ")[1]: line for line in md.splitlines() if line.startswith("| 00 |")}
        self.assertTrue(rows["C++"].endswith("| 1950/1755 | power cap |"), rows)
        self.assertTrue(rows["PyTorch"].endswith("| 1400/1395 | power cap+sw thermal |"), rows)
        self.assertIn("| C++ ÷ PyTorch | SM MHz | throttle |", md)
        for text in (md, txt):
            self.assertIn("nvidia-smi every 0.5 s during the entry", text)
            self.assertIn("busy samples: utilization >= 50 %", text)
        line = next(line for line in txt.splitlines() if " 00_quick " in line)
        self.assertTrue(line.endswith("1950/1755  power cap"), txt)
        with open(os.path.join(self.out, "results.csv")) as f:
            row = next(r for r in csv.DictReader(f) if r["key"] == "torch_fp32")
        columns = ("sm_mhz_median", "sm_mhz_min", "sm_mhz_max", "throttle_mask", "throttle_reasons", "power_w_max",
                   "temperature_c_max", "clock_busy_samples")
        self.assertEqual([row[k] for k in columns], ["1400", "1395", "1410", "0x0000000000000024",
                                                     "power cap+sw thermal", "520.5", "87", row["clock_samples"]])
        # What it asked: one reading before each entry (not before the ladder's other commands), and
        # the loop (which a quick entry may stop before it wrote its call down), of the first GPU of
        # CUDA_VISIBLE_DEVICES; nothing that sets anything.
        fields = "--query-gpu=clocks.sm,clocks_event_reasons.active,power.draw,temperature.gpu,utilization.gpu"
        reading = [fields, "--format=csv,noheader,nounits", "-i", "3"]
        calls = [c for c in self.smi_calls() if "name" not in c[0]]
        self.assertEqual([c for c in calls if "-lms" not in c], [reading, reading])
        self.assertTrue(all(c == reading + ["-lms", "500"] for c in calls if "-lms" in c), calls)
        self.assert_samplers_stopped()

    def test_an_older_driver(self):
        self.trainer("00", "quick")
        self.clock_smi()
        self.ladder("--torch", "none", expect=0, env={"FAKE_SMI_OLD": "1"})
        clock = self.entries()["cpp_00"]["clock"]
        self.assertEqual((clock["reasons_field"], clock["sm_mhz_median"]), ("clocks_throttle_reasons.active", 1950))
        # the newer name refused, the older one taken, and the loop's with it
        calls = [c[0].split(",")[1] for c in self.smi_calls() if "name" not in c[0]]
        self.assertEqual(calls[:2], ["clocks_event_reasons.active", "clocks_throttle_reasons.active"])
        self.assertTrue(all(field == "clocks_throttle_reasons.active" for field in calls[2:]), calls)
        self.assert_samplers_stopped()

    def test_without_clock_readings_the_entries_run(self):
        # nvidia-smi fails every reading; then the one that answers none of them (FAKE_SMI: only a name).
        self.trainer("00", "quick")
        for smi, env in ((CLOCK_SMI, {"FAKE_SMI_NO_CLOCKS": "1"}), (FAKE_SMI, {})):
            with self.subTest(env=env):
                write_script(os.path.join(self.bin, "nvidia-smi"), smi)
                self.ladder("--torch", "fp32", expect=0, env=env)
                for key, e in self.entries().items():
                    self.assertEqual((e["status"], e["clock"]), ("ok", None), key)
                md = self.text("results.md")
                self.assertTrue(next(x for x in md.splitlines() if x.startswith("| 00 | C++ |")).endswith("| - | - |"))
                self.assertIn(",,,,,,,,,", next(x for x in self.text("results.csv").splitlines()
                                                if x.startswith("00,cpp")))
                if env:  # no reading: no loop either
                    self.assertFalse([c for c in self.smi_calls() if "-lms" in c])
        self.assertEqual(self.samplers_left(), [])


class ClockSamplerTest(Sandbox):
    """tests/bench/gpu_clock.py on its own: the summary of the samples, and the sampler's process."""

    def test_summary(self):
        s = gpu_clock.summarize(CLOCKS.split("\n\n")[0] + "\nnot a sample\n\n1, 2, 3\n")
        self.assertEqual(s, {"samples": 5, "busy_samples": 3, "over": "busy", "sm_mhz_median": 1950,
                             "sm_mhz_min": 1755, "sm_mhz_max": 1980, "throttle_mask": "0x0000000000000004",
                             "throttle_reasons": "power cap", "power_w_max": 700.0, "temperature_c_max": 61})
        # Busy from 50 % on; an even count's median is between the two middle clocks.
        s = gpu_clock.summarize("1500, 0x0, 300, 40, 50\n1700, 0x20, 310, 41, 60\n900, 0x1, 90, 30, 49\n")
        self.assertEqual((s["busy_samples"], s["sm_mhz_median"], s["throttle_reasons"]), (2, 1600, "sw thermal"))
        # None busy: over every sample, said so; unknown bits named by their value.
        s = gpu_clock.summarize("345, 0x1, 60, 30, 0\n1410, 0x1004, 70, 31, [N/A]\n")
        self.assertEqual((s["busy_samples"], s["over"], s["sm_mhz_median"], s["sm_mhz_min"], s["throttle_reasons"]),
                         (0, "all (none busy)", 877.5, 345, "idle+power cap+0x1000"))
        # Nothing nvidia-smi could read: a sample, but no number.
        s = gpu_clock.summarize("[N/A], [N/A], [N/A], [Not Supported], [N/A]\n")
        self.assertEqual((s["samples"], s["sm_mhz_median"], s["throttle_mask"], s["throttle_reasons"],
                          s["power_w_max"]), (1, None, None, None, None))
        for text in ("", "Fake GPU, 999.99\n", "NVIDIA-SMI has failed because it couldn't communicate\n"):
            self.assertIsNone(gpu_clock.summarize(text), text)

    def test_without_nvidia_smi(self):
        os.remove(os.path.join(self.bin, "nvidia-smi"))
        os.environ["PATH"] = self.bin  # no nvidia-smi anywhere
        path = os.path.join(self.dir, "clock.csv")
        with gpu_clock.ClockSampler(path) as clock:
            pass
        self.assertIsNone(clock.summary)
        self.assertFalse(os.path.exists(path))
        self.assertIsNone(gpu_clock.gpu_clock())

    def test_stopped_on_leaving_the_block(self):
        self.clock_smi()
        path = os.path.join(self.dir, "clock.csv")
        with gpu_clock.ClockSampler(path) as clock:
            self.assertIsNone(clock.proc.poll())
            time.sleep(0.5)
        self.assertEqual(clock.summary["sm_mhz_median"], 1950)
        self.assertIsNone(clock.proc)
        with self.assertRaises(RuntimeError):  # an exception in the block stops it too
            with gpu_clock.ClockSampler(path) as clock:
                raise RuntimeError("the entry failed")
        self.assertEqual(clock.summary["sm_mhz_median"], 1400)
        self.assertEqual(gpu_clock.gpu_clock(), {"sm_mhz": 1410, "throttle_reasons": "0x0000000000000020"})
        self.assert_samplers_stopped()

    def test_dies_with_the_process_that_started_it(self):
        self.clock_smi()
        script = (f"import sys, time; sys.dont_write_bytecode = True; sys.path.insert(0, {BENCH!r}); import gpu_clock; "
                  f"clock = gpu_clock.ClockSampler({os.path.join(self.dir, 'clock.csv')!r}).start(); "
                  "print(clock.proc.pid, flush=True); time.sleep(60)")
        parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        pid = int(parent.stdout.readline())
        parent.kill()  # no stop(), no exit handler
        parent.wait()
        parent.stdout.close()
        self.assertTrue(gone(pid), "nvidia-smi outlived the process that started it")
        self.assertEqual(self.samplers_left(), [])


# A stand-in for a trainer whose memory fits 36 sequences while its estimate says 40: the
# refusal of a batch above 40, an out-of-memory failure from 37 to 40, a run at 36 and below.
SIZED_TRAINER = '''\
import json, sys
B = int(sys.argv[sys.argv.index("--batch") + 1])
if B > 40:
    print(f"error: --batch {B} --seq 32 of fake needs about 9.9 GiB of device memory (...), but 1.0 GiB "
          "is available; the largest --batch that fits is 40")
    sys.exit(1)
if B > 36:
    print("error: CUDA error: out of memory (cudaMalloc of the attention's workspace)")
    sys.exit(1)
if "--log" in sys.argv:
    with open(sys.argv[sys.argv.index("--log") + 1], "w") as f:
        f.write(json.dumps({"type": "start", "stage": "fake", "device": "Fake GPU", "params": 1000,
                            "flops_per_token": 6000.0, "peak_flops": 1e9, "peak_match": "Fake"}) + "\\n")
        for step in range(3):
            f.write(json.dumps({"type": "step", "step": step, "loss": 10.0 - step, "ms": 10.0}) + "\\n")
        f.write(json.dumps({"type": "summary", "peak_memory_bytes": 1234}) + "\\n")
'''


class LargestBatchTest(Sandbox):
    """tests/bench/largest_batch.py: the trainer's refusal, the out-of-memory retries, the ladder run."""

    def largest(self, *extra, expect=0):
        proc = subprocess.run([sys.executable, LARGEST, "--build", self.build, "--data", self.data, "--out",
                               self.out, "--seq", "32", "--steps", "3", "--skip", "1", *map(str, extra)],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, expect, proc.stdout + proc.stderr)
        if expect == 0:
            with open(os.path.join(self.out, "results.json")) as f:
                return proc, json.load(f)["rows"]
        return proc, None

    def test_estimate_then_smaller_after_out_of_memory(self):
        write_script(os.path.join(self.build, "stages", "train_03_sized"), SIZED_TRAINER)
        proc, rows = self.largest("--stages", "03", "--checkpoint", self.ckpt)
        self.assertIn("the estimate fits --batch 40", proc.stdout)
        self.assertIn("--batch 40 is out of memory; trying 38", proc.stdout)
        self.assertIn("--batch 38 is out of memory; trying 36", proc.stdout)
        (row,) = rows
        self.assertEqual((row["stage"], row["batch"], row["entry"]["status"]), ("03", 36, "ok"))
        self.assertAlmostEqual(row["entry"]["tokens_per_s"], 36 * 32 / 0.010)
        with open(os.path.join(self.out, "results.md")) as f:
            self.assertIn("| 03 | 03_sized | 36 |", f.read())

    def test_too_few_tries(self):
        write_script(os.path.join(self.build, "stages", "train_03_sized"), SIZED_TRAINER)
        proc, _ = self.largest("--stages", "03", "--checkpoint", self.ckpt, "--tries", 2, expect=1)
        self.assertIn("no batch fitted in 2 tries", proc.stdout)

    def test_unbuilt_stage(self):
        proc, _ = self.largest("--stages", "02", expect=2)
        self.assertIn("stage(s) 02 not built", proc.stderr)

    @unittest.skipUnless(TRAINER and GPT_INIT, "GPT_CPU_TRAINER and GPT_INIT_TOOL are not set")
    def test_with_the_cpu_trainer(self):
        os.symlink(TRAINER, os.path.join(self.build, "stages", "train_00_cpu_reference"))
        os.symlink(GPT_INIT, os.path.join(self.build, "common", "gpt_init"))
        # The CPU trainer's refusal speaks of host memory; --max-batch keeps the run small.
        _, rows = self.largest("--stages", "00", "--model", "micro", "--max-batch", 3)
        (row,) = rows
        self.assertEqual((row["batch"], row["entry"]["status"]), (3, "ok"))
        self.assertEqual(len(row["entry"]["losses"]), 3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
