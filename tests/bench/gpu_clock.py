"""The GPU's SM clock and throttle reasons as nvidia-smi reads them: once (gpu_clock), or every half
second in the background while a benchmark entry runs (ClockSampler). The same kernel timed 0.14 ms
or 0.19 ms on an H200 depending on what ran before it: a time means little without the clock it
ran at.

The GPU read is the first of CUDA_VISIBLE_DEVICES, else nvidia-smi's GPU 0. Newer drivers name the
reasons field clocks_event_reasons.active, older ones clocks_throttle_reasons.active: each reading
asks for the first and falls back to the second. Without nvidia-smi, or when it fails, there is no
reading (None) and nothing else fails. Read only: nothing here changes a clock or a setting.

Python 3 standard library only.
"""

import ctypes
import functools
import operator
import os
import signal
import statistics
import subprocess

# nvidia-smi's throttle reasons (NVML's clock event reasons), by bit.
THROTTLE = {0x1: "idle", 0x2: "applications clocks", 0x4: "power cap", 0x8: "hw slowdown", 0x10: "sync boost",
            0x20: "sw thermal", 0x40: "hw thermal", 0x80: "power brake", 0x100: "display clocks"}

REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # newer drivers, older
SAMPLE_EXTRA = ("power.draw", "temperature.gpu", "utilization.gpu")  # after clocks.sm and the reasons
SAMPLE_INTERVAL_MS = 500
BUSY_UTILIZATION = 50  # % : a sample at or above it was taken while the GPU worked


def smi_command(reasons, extra=()):
    device = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    return ["nvidia-smi", "--query-gpu=" + ",".join(["clocks.sm", reasons, *extra]),
            "--format=csv,noheader,nounits", "-i", device]


def query(extra=()):
    """(the reasons field nvidia-smi accepted, its output) of one reading of the SM clock, the
    throttle reasons and `extra`; None where nvidia-smi is missing or fails."""
    for reasons in REASON_FIELDS:
        try:
            result = subprocess.run(smi_command(reasons, extra), capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if result.returncode == 0:
            return reasons, result.stdout
    return None


def parse_clock(text):
    """nvidia-smi's line "1980, 0x0000000000000000" as {'sm_mhz': 1980, 'throttle_reasons': '0x0000000000000000'}
    (sm_mhz None where it is not a number, "[N/A]"); None for anything else."""
    fields = [f.strip() for f in (text.strip().splitlines() or [""])[0].split(",")]
    if len(fields) != 2 or not fields[1]:
        return None
    return {"sm_mhz": int(fields[0]) if fields[0].isdigit() else None, "throttle_reasons": fields[1]}


def gpu_clock():
    """The SM clock and active throttle reasons of the GPU now, as parse_clock gives them; None where
    nvidia-smi is missing or fails."""
    found = query()
    return parse_clock(found[1]) if found else None


def throttle_names(reasons):
    """nvidia-smi's mask as words: "none", "power cap", "idle+sw thermal"; a text that is no mask as it is."""
    try:
        mask = int(reasons, 16)
    except (TypeError, ValueError):
        return reasons or "-"
    names = [name for bit, name in THROTTLE.items() if mask & bit]
    if mask & ~sum(THROTTLE):
        names.append(hex(mask & ~sum(THROTTLE)))
    return "+".join(names) or "none"


def smi_value(text):
    """A field's value (an int where nvidia-smi wrote one), or None for "[N/A]", "[Not Supported]" and the like."""
    try:
        return int(text) if text.isdigit() else float(text)
    except ValueError:
        return None


def smi_mask(text):
    try:
        return int(text, 16)
    except ValueError:
        return None


def summarize(text):
    """The samples of ClockSampler's file (lines "clocks.sm, reasons, power.draw, temperature.gpu,
    utilization.gpu"; others are left out) in a few numbers, or None without a sample:

      samples, busy_samples  every sample, and those at utilization >= BUSY_UTILIZATION %
      over                   "busy", or "all (none busy)": the samples the next four are taken over
      sm_mhz_median/min/max  the SM clock over those samples
      throttle_mask          every reason active in any of them, as a mask ("0x...4"), and
      throttle_reasons       as words ("power cap")
      power_w_max, temperature_c_max   over every sample

    A field nvidia-smi cannot read ("[N/A]") counts as unknown; a sample with an unknown
    utilization is not busy. Idle samples are left out where there are busy ones, for their
    "idle" reason and their low clock say nothing of the entry."""
    samples = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 + len(SAMPLE_EXTRA):
            sm, reasons, power, temperature, utilization = fields
            samples.append({"sm": smi_value(sm), "mask": smi_mask(reasons), "power": smi_value(power),
                            "temperature": smi_value(temperature), "utilization": smi_value(utilization)})
    if not samples:
        return None
    busy = [s for s in samples if s["utilization"] is not None and s["utilization"] >= BUSY_UTILIZATION]
    over = busy or samples
    clocks = [s["sm"] for s in over if s["sm"] is not None]
    masks = [s["mask"] for s in over if s["mask"] is not None]
    union = functools.reduce(operator.or_, masks) if masks else None
    powers = [s["power"] for s in samples if s["power"] is not None]
    temperatures = [s["temperature"] for s in samples if s["temperature"] is not None]
    median = statistics.median(clocks) if clocks else None
    if median is not None and median == int(median):
        median = int(median)  # MHz as nvidia-smi writes them, whether the count was odd or even
    return {
        "samples": len(samples), "busy_samples": len(busy), "over": "busy" if busy else "all (none busy)",
        "sm_mhz_median": median,
        "sm_mhz_min": min(clocks, default=None), "sm_mhz_max": max(clocks, default=None),
        "throttle_mask": None if union is None else f"0x{union:016x}",
        "throttle_reasons": None if union is None else throttle_names(hex(union)),
        "power_w_max": max(powers, default=None), "temperature_c_max": max(temperatures, default=None),
    }


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def sampler_setup():
    """In the sampler's process, before nvidia-smi starts: SIGINT as a program expects it (a ladder
    started in the background inherits it ignored), and SIGKILL when the process that started it
    ends, however it ends (Linux; elsewhere stop() alone ends it), so that a benchmark killed
    outright leaves no nvidia-smi looping behind it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:  # no prctl here
        pass


class ClockSampler:
    """nvidia-smi's readings of the GPU every SAMPLE_INTERVAL_MS while a benchmark entry runs, its
    lines in the file `path` (overwritten), the first of them taken right before the entry:

        with ClockSampler(path) as clock:
            ...                  # the entry
        clock.summary            # summarize()'s dict, with reasons_field and file; None without a sample

    Leaving the block ends nvidia-smi, however the block is left (nvidia-smi starts no process of
    its own: ending it is enough)."""

    def __init__(self, path, interval_ms=SAMPLE_INTERVAL_MS):
        self.path, self.interval_ms = path, interval_ms
        self.proc, self.reasons, self.summary = None, None, None

    def start(self):
        found = query(SAMPLE_EXTRA)  # also finds the reasons field this driver accepts
        if not found:
            return self
        self.reasons, first = found
        try:
            with open(self.path, "w", encoding="utf-8") as out:
                out.write(first)
                out.flush()
                self.proc = subprocess.Popen(smi_command(self.reasons, SAMPLE_EXTRA) + ["-lms", str(self.interval_ms)],
                                             stdout=out, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                             preexec_fn=sampler_setup)
        except (OSError, subprocess.SubprocessError):
            pass  # no loop: the summary has the first reading alone (none without the file)
        return self

    def stop(self):
        """Ends nvidia-smi and returns the summary (also in self.summary)."""
        proc, self.proc = self.proc, None
        if proc:
            try:
                proc.send_signal(signal.SIGINT)  # Ctrl-C: how nvidia-smi's loop is meant to be ended
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            finally:  # also when a Ctrl-C comes while it waits
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        if self.reasons:
            try:
                with open(self.path, encoding="utf-8", errors="replace") as f:
                    self.summary = summarize(f.read())
            except OSError:
                self.summary = None
            if self.summary:
                self.summary.update(reasons_field=self.reasons, file=self.path)
        return self.summary

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False
