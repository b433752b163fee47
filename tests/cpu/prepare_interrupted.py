#!/usr/bin/env python3
"""Ctrl-C in gpt_prepare on a terminal: the error starts a line of its own instead of being glued
to the progress line (which a terminal gets without a newline, rewritten with \\r), and the run
leaves nothing behind: no shard, and no --out folder that it created; a folder that was there
stays.

gpt_prepare reads standard input from a pipe this script fills, its output goes to a
pseudo-terminal, and the script sends SIGINT once a progress line has come: gpt_prepare is then
encoding or waiting for more input. About 2 s a run, two runs.

usage: prepare_interrupted.py --prepare BIN --tokenizer DIR --out DIR
"""
import argparse
import os
import pty
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time


def text_chunk(seed, size):
    """About `size` bytes of words, spaces and newlines (a text the reader can cut anywhere)."""
    rng = random.Random(seed)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dogs", "42", "naïve", "it's"]
    parts, n = [], 0
    while n < size:
        word = rng.choice(words) + rng.choice([" ", " ", " ", "\n", ". "])
        parts.append(word)
        n += len(word)
    return "".join(parts).encode()


def interrupted_run(prepare, tokenizer, out_dir):
    """Runs gpt_prepare on a terminal, SIGINT after its first progress line; returns (exit code, output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([prepare, "--out", out_dir, "--tokenizer", tokenizer, "--threads", "1", "-"],
                            stdin=subprocess.PIPE, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    stop = threading.Event()

    def feed():  # 1 MB every 0.1 s until told to stop; standard input stays open after that
        chunk = text_chunk(1, 1 << 20)
        try:
            while not stop.is_set():
                proc.stdin.write(chunk)
                proc.stdin.flush()
                time.sleep(0.1)
        except (BrokenPipeError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    output, signalled, deadline = b"", False, time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the process closed the terminal, it has ended
                break
            if not data:
                break
            output += data
        if not signalled and b"tokens/s" in output:
            proc.send_signal(signal.SIGINT)
            signalled = True
    stop.set()
    try:
        rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
    os.close(master)
    try:
        proc.stdin.close()
    except BrokenPipeError:
        pass
    if not signalled:
        sys.exit(f"FAIL: no progress line within 60 s, no signal sent (exit {rc}):\n{output!r}")
    return rc, output.decode(errors="replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prepare", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(os.path.join(args.out, "existing"))

    failures = []
    runs = [(os.path.join(args.out, "new", "data"), True), (os.path.join(args.out, "existing"), False)]
    for out_dir, created in runs:  # created: the run makes --out (and the folder "new" above it)
        rc, output = interrupted_run(args.prepare, args.tokenizer, out_dir)
        # The terminal turns each \n into \r\n. The error must follow a newline, not the progress line.
        error = re.search(r"(^|.)error: [^\r\n]*", output, re.S)
        if rc != 1 or not error or "interrupted (SIGINT)" not in error.group(0):
            failures.append(f"--out {out_dir}: expected exit 1 and 'error: interrupted (SIGINT)...', got exit {rc}")
        elif error.group(1) not in ("", "\n"):
            failures.append(f"--out {out_dir}: the error does not start its own line: "
                            f"{output[max(0, error.start() - 60):error.end()]!r}")
        if created and os.path.exists(os.path.join(args.out, "new")):
            failures.append(f"--out {out_dir}: the interrupted run left the folder it created: "
                            f"{sorted(os.listdir(os.path.join(args.out, 'new')))}")
        if not created and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
            failures.append(f"--out {out_dir}: a folder that was there before should stay, empty: "
                            f"{os.listdir(out_dir) if os.path.isdir(out_dir) else 'removed'}")
        print(f"--out {out_dir}: exit {rc}, output:\n{output!r}\n")
    if failures:
        sys.exit("FAIL:\n  " + "\n  ".join(failures))
    print("ok: the error starts its own line, and the interrupted runs left nothing behind")


if __name__ == "__main__":
    main()
