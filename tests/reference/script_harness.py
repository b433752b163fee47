"""Running a bench script under test: as a program, or its main() in this process.

Shared by the self-tests of tests/bench/step_breakdown.py and tests/bench/roofline.py.
Python 3 standard library only.
"""
import contextlib
import io
import subprocess
import sys


def run(script, *args):
    """The script as a program: its exit status, stdout and stderr."""
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=60)


def call(main, *args):
    """main(args) in this process (no second interpreter to start: a test stays well under a second),
    its exit status, stdout and stderr in the same form as run()."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
